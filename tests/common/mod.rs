//! Drives the real `avfs` binary in a private `$AVFS_HOME`.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

pub struct Env {
    pub dir: tempfile::TempDir,
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not one JSON document ({e}):\n{}\nstderr: {}",
                self.stdout, self.stderr
            )
        })
    }
}

impl Env {
    pub fn new() -> Env {
        // Vault files keep a checksum in every page. Tests that change a vault through
        // SQLite (to damage or age it on purpose) do it as a checksum-aware tool would, so
        // what they test is the damage they made, not the broken sums of a plain SQLite.
        agentvfs::store::pagesum::register();
        Env {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    pub fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    pub fn cmd<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut c = Command::new(env!("CARGO_BIN_EXE_avfs"));
        c.args(args)
            .env("AVFS_HOME", self.home())
            .env_remove("AVFS_VAULT")
            .stdin(Stdio::null());
        c
    }

    fn finish(out: Output) -> Run {
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs and returns whatever happened.
    pub fn run(&self, args: &[&str]) -> Run {
        Self::finish(self.cmd(args).output().unwrap())
    }

    /// Runs with stdin.
    pub fn run_stdin(&self, args: &[&str], input: &[u8]) -> Run {
        let mut child = self
            .cmd(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        Self::finish(child.wait_with_output().unwrap())
    }

    /// Runs and insists on success.
    pub fn ok(&self, args: &[&str]) -> Run {
        let r = self.run(args);
        assert_eq!(
            r.code, 0,
            "avfs {args:?} failed\nstdout: {}\nstderr: {}",
            r.stdout, r.stderr
        );
        r
    }

    /// Runs with --json, insists on success, returns the document.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        self.ok(&a).json()
    }

    /// A policy for vault `vault` that allows every category: what still holds is the
    /// sandbox and the change intake alone. (The built-in policy asks about a workspace
    /// script and refuses host paths, which is right for an agent but not what the
    /// sandbox tests are about.)
    pub fn allow_all_policy(&self, vault: &str) {
        std::fs::create_dir_all(self.home().join("policies")).unwrap();
        std::fs::write(
            self.home().join(format!("policies/{vault}.toml")),
            "[defaults]\nread_only = \"allow\"\nmutating = \"allow\"\ndestructive = \"allow\"\n\
             networked = \"allow\"\nhost_escape_risk = \"allow\"\nunknown = \"allow\"\n",
        )
        .unwrap();
    }

    /// Runs with --json, insists on exit `code`, returns the document whatever it is.
    pub fn json_exit(&self, args: &[&str], code: i32) -> Value {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        let r = self.run(&a);
        assert_eq!(
            r.code, code,
            "avfs {a:?}\nstdout: {}\nstderr: {}",
            r.stdout, r.stderr
        );
        r.json()
    }

    /// Runs with --json, insists on failure with `code`, returns the error object.
    pub fn json_err(&self, args: &[&str], code: i32) -> Value {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        let r = self.run(&a);
        assert_eq!(
            r.code, code,
            "avfs {args:?}: expected exit {code}\nstdout: {}\nstderr: {}",
            r.stdout, r.stderr
        );
        let v = r.json();
        assert!(v.get("error").is_some(), "no error object: {v}");
        v["error"].clone()
    }

    pub fn cat(&self, vault: Option<&str>, path: &str) -> String {
        let mut a = vec![];
        if let Some(v) = vault {
            a.extend(["--vault", v]);
        }
        a.extend(["cat", path]);
        self.ok(&a).stdout
    }
}

/// Bytes that do not compress (an xorshift stream from `seed`): a vault stores them as
/// they are, so tests of sizes, quotas and full disks count what they wrote.
#[allow(dead_code)]
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ seed.wrapping_mul(0x2545_f491_4f6c_dd1d);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

pub fn sha(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

/// Changed paths of a diff document, as (kind, path).
pub fn changes(diff: &Value) -> Vec<(String, String)> {
    diff["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["kind"].as_str().unwrap().to_string(),
                c["path"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}
