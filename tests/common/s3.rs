//! A real S3-compatible server for the remote tests, in a process of its own on a
//! loopback port, stopped when dropped: `Server::Moto` (`scripts/s3-server.py`, moto's
//! S3 backend, conditional writes made atomic) or `Server::S3sFs` (the `s3s-fs` binary
//! from crates.io, objects in a temporary directory; it checks a condition and then
//! writes, not atomically).
//!
//! Include with `mod common; #[path = "common/s3.rs"] mod s3;`. The Python that has moto
//! (and boto3, for `S3::boto3`) is `$AVFS_S3_PYTHON`, else the virtualenv
//! `scripts/test.sh` makes (target/py-venv); s3s-fs is `$AVFS_S3S_FS`, else
//! target/s3s-fs/bin/s3s-fs (`scripts/test.sh` installs it).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// Which S3 implementation a test runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    Moto,
    S3sFs,
    /// moto with If-Match / If-None-Match dropped from every request: a store that
    /// ignores conditional writes.
    MotoIgnoringConditions,
}

pub struct S3 {
    child: Child,
    pub port: u16,
    pub bucket: String,
    pub server: Server,
    /// s3s-fs's object directory.
    _dir: Option<tempfile::TempDir>,
}

pub const KEY_ID: &str = "avfs-test-key";
pub const SECRET: &str = "avfs-test-secret";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn s3s_fs() -> PathBuf {
    if let Some(p) = std::env::var_os("AVFS_S3S_FS") {
        return PathBuf::from(p);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/s3s-fs/bin/s3s-fs")
}

fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("AVFS_S3_PYTHON") {
        return PathBuf::from(p);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/py-venv/bin/python")
}

impl S3 {
    /// Starts moto with one bucket.
    pub fn start() -> S3 {
        S3::start_on(Server::Moto)
    }

    /// Starts `server` with one bucket. Fails (never skips) when it is not installed:
    /// `./scripts/test.sh` installs both.
    pub fn start_on(server: Server) -> S3 {
        match server {
            Server::Moto => S3::start_moto(false),
            Server::MotoIgnoringConditions => S3::start_moto(true),
            Server::S3sFs => S3::start_s3s_fs(),
        }
    }

    fn start_s3s_fs() -> S3 {
        let bin = s3s_fs();
        let port = free_port();
        let bucket = "avfs-test".to_string();
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(&bucket)).unwrap();
        let child = Command::new(&bin)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", KEY_ID, "--secret-key", SECRET])
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start s3s-fs ({}): {e}; run ./scripts/test.sh, which installs it, or set AVFS_S3S_FS",
                    bin.display()
                )
            });
        let mut s3 = S3 {
            child,
            port,
            bucket,
            server: Server::S3sFs,
            _dir: Some(dir),
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(st)) = s3.child.try_wait() {
                panic!("s3s-fs exited at start: {st}");
            }
            assert!(
                std::time::Instant::now() < deadline,
                "s3s-fs did not listen on port {port} within 20 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        s3
    }

    fn start_moto(ignore_conditions: bool) -> S3 {
        let py = python();
        let port = free_port();
        let bucket = "avfs-test".to_string();
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/s3-server.py");
        let mut child = Command::new(&py)
            .arg(&script)
            .args(ignore_conditions.then_some("--ignore-conditions"))
            .arg(port.to_string())
            .arg(&bucket)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start the S3 server ({} {}): {e}; run ./scripts/test.sh, which installs moto, or set AVFS_S3_PYTHON",
                    py.display(),
                    script.display()
                )
            });
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(
            line.trim(),
            "ready",
            "the S3 server did not start (is moto[server] installed for {}?)",
            py.display()
        );
        S3 {
            child,
            port,
            bucket,
            server: if ignore_conditions {
                Server::MotoIgnoringConditions
            } else {
                Server::Moto
            },
            _dir: None,
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{}/{prefix}", self.bucket)
    }

    /// The environment an avfs process needs to reach this server.
    pub fn env(&self, c: &mut Command) {
        c.env("AWS_ENDPOINT_URL", self.endpoint())
            .env("AWS_ACCESS_KEY_ID", KEY_ID)
            .env("AWS_SECRET_ACCESS_KEY", SECRET)
            .env("AWS_REGION", "us-east-1")
            .env("AVFS_REMOTE_RETRIES", "1");
    }

    /// Runs a Python snippet with boto3 (moto's dependency) and `s3`, a client signed
    /// for this server, in scope; returns its stdout.
    pub fn boto3(&self, code: &str) -> String {
        let out = self.boto3_cmd(code).output().unwrap();
        assert!(
            out.status.success(),
            "python failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The command `boto3` runs, to start it alongside something else.
    pub fn boto3_cmd(&self, code: &str) -> Command {
        let prelude = format!(
            "import boto3, botocore\ns3 = boto3.client('s3', endpoint_url='{}', aws_access_key_id='{KEY_ID}', aws_secret_access_key='{SECRET}', region_name='us-east-1')\nbucket = '{}'\n",
            self.endpoint(),
            self.bucket
        );
        let mut c = Command::new(python());
        c.arg("-c").arg(format!("{prelude}{code}"));
        c
    }

    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for S3 {
    fn drop(&mut self) {
        self.stop();
    }
}
