//! A real S3-compatible server for the remote tests: `scripts/s3-server.py` (moto's S3
//! backend) in a process of its own on a loopback port, stopped when dropped.
//!
//! Include with `mod common; #[path = "common/s3.rs"] mod s3;`. The Python that has moto
//! is `$AVFS_S3_PYTHON`, else the virtualenv `scripts/test.sh` makes (target/py-venv).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

pub struct S3 {
    child: Child,
    pub port: u16,
    pub bucket: String,
}

fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("AVFS_S3_PYTHON") {
        return PathBuf::from(p);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/py-venv/bin/python")
}

impl S3 {
    /// Starts a server with one bucket. Fails (never skips) when moto is not installed:
    /// `./scripts/test.sh` installs it.
    pub fn start() -> S3 {
        let py = python();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let bucket = "avfs-test".to_string();
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/s3-server.py");
        let mut child = Command::new(&py)
            .arg(&script)
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
            .env("AWS_ACCESS_KEY_ID", "avfs-test-key")
            .env("AWS_SECRET_ACCESS_KEY", "avfs-test-secret")
            .env("AWS_REGION", "us-east-1")
            .env("AVFS_REMOTE_RETRIES", "1");
    }

    /// Runs a Python snippet with boto3 (moto's dependency) and `s3`, a client signed
    /// for this server, in scope; returns its stdout.
    pub fn boto3(&self, code: &str) -> String {
        let prelude = format!(
            "import boto3, botocore\ns3 = boto3.client('s3', endpoint_url='{}', aws_access_key_id='k', aws_secret_access_key='s', region_name='us-east-1')\nbucket = '{}'\n",
            self.endpoint(),
            self.bucket
        );
        let out = Command::new(python())
            .arg("-c")
            .arg(format!("{prelude}{code}"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "python failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
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
