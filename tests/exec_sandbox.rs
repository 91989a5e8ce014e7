//! The sandbox of `avfs exec` end to end: the real binary, the kernel's namespaces,
//! Landlock and seccomp. Every envelope is validated against
//! `schemas/execution-envelope.schema.json`.
//!
//! The commands that try to get out are written as scripts into the workspace (or take
//! their targets from `--env`), so the policy lets them run and the kernel has to stop
//! them. Each escape is also tried without the sandbox where that is harmless, to show
//! the test would notice if the sandbox did nothing.
//!
//! Tests that run a command need the sandbox (Landlock, user or root namespaces): without
//! it they skip with a message, and with `AVFS_REQUIRE_FUSE=1` (CI) they fail.

mod common;
#[path = "common/envelope.rs"]
mod envelope;

use std::io::Write;
use std::net::TcpListener;
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{Env, Run};
use serde_json::{Value, json};

// ---------------------------------------------------------------- helpers

use envelope::assert_envelope;

fn required() -> bool {
    std::env::var("AVFS_REQUIRE_FUSE").as_deref() == Ok("1")
}

/// Why sandboxed commands cannot run here (no Landlock, no namespaces, no overlayfs), if so.
fn sandbox_probe() -> &'static Option<String> {
    static P: OnceLock<Option<String>> = OnceLock::new();
    P.get_or_init(|| {
        let env = Env::new();
        let r = env.run(&["--json", "exec", "--", "true"]);
        let v: Value = match serde_json::from_str(&r.stdout) {
            Ok(v) => v,
            Err(e) => return Some(format!("{e}: {}", r.stdout)),
        };
        if let Some(e) = v.get("error") {
            return Some(e.to_string());
        }
        if v["sandbox"]["enforced"] != true {
            return Some(format!("exec ran unconfined: {}", v["sandbox"]));
        }
        None
    })
}

/// True when the test may run sandboxed commands; fails it under `AVFS_REQUIRE_FUSE=1`.
fn can_sandbox(test: &str) -> bool {
    match sandbox_probe() {
        None => true,
        Some(why) => {
            if required() {
                panic!("{test}: the sandbox is required (AVFS_REQUIRE_FUSE=1), but: {why}");
            }
            eprintln!("SKIPPED {test}: {why}");
            false
        }
    }
}

/// A private `$AVFS_HOME` with a vault `t` holding `a.txt`.
fn setup() -> Env {
    let env = Env::new();
    env.ok(&["vault", "create", "t"]);
    env.ok(&["--vault", "t", "write", "a.txt", "hi\n"]);
    env
}

fn write(env: &Env, path: &str, text: &str) {
    env.ok(&["--vault", "t", "write", "-p", path, text]);
}

fn policy(env: &Env, text: &str) {
    std::fs::write(env.home().join("policy.toml"), text).unwrap();
}

struct Exec {
    code: i32,
    env: Value,
    run: Run,
}

/// `avfs --json --vault t exec ARGS...` with extra variables for avfs itself: checks
/// that stdout is one valid envelope whose exit_code is the exit status, and that no
/// exec mount is left behind.
fn exec_with(env: &Env, vars: &[(&str, &str)], args: &[&str]) -> Exec {
    let mut a = vec!["--json", "--vault", "t", "exec"];
    a.extend_from_slice(args);
    let mut cmd = env.cmd(&a);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    let v: Value = serde_json::from_str(&run.stdout).unwrap_or_else(|e| {
        panic!(
            "avfs exec {args:?}: stdout is not one JSON document ({e})\nexit {}\nstdout: {}\nstderr: {}",
            run.code, run.stdout, run.stderr
        )
    });
    assert!(
        v.get("error").is_none(),
        "avfs exec {args:?} failed: {v}\nstderr: {}",
        run.stderr
    );
    assert_envelope(&v);
    assert_eq!(run.code, v["exit_code"].as_i64().unwrap() as i32, "{v}");
    if let Ok(rd) = std::fs::read_dir(env.home().join("run/exec")) {
        let left: Vec<_> = rd.map(|e| e.unwrap().path()).collect();
        assert!(left.is_empty(), "exec left mountpoints behind: {left:?}");
    }
    Exec {
        code: run.code,
        env: v,
        run,
    }
}

fn exec(env: &Env, args: &[&str]) -> Exec {
    exec_with(env, &[], args)
}

fn stdout(x: &Exec) -> &str {
    x.env["result"]["stdout"].as_str().unwrap()
}

fn assert_sandboxed(e: &Value, network: bool) {
    let sb = &e["sandbox"];
    assert_eq!(sb["enforced"], true, "{e}");
    assert_eq!(sb["network"], network, "{e}");
    let writable: Vec<&str> = sb["writable_paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(
        writable,
        [e["workspace_path"].as_str().unwrap(), "/tmp", "/dev/shm"],
        "{e}"
    );
    assert!(
        sb["mechanism"].as_str().unwrap().contains("landlock"),
        "{e}"
    );
}

fn audit_run(env: &Env, id: &str) -> Value {
    env.json(&["--vault", "t", "audit"])["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["action"] == "exec.run" && a["detail"]["id"] == id)
        .unwrap_or_else(|| panic!("no exec.run audit entry for {id}"))["detail"]
        .clone()
}

/// PIDs of host processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) {
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if text.contains(marker) {
                out.push(pid);
            }
        }
    }
    out
}

// ---------------------------------------------------------------- the tests, by concern

#[path = "exec_sandbox/files.rs"]
mod files;
#[path = "exec_sandbox/network.rs"]
mod network;
#[path = "exec_sandbox/processes.rs"]
mod processes;
#[path = "exec_sandbox/settings.rs"]
mod settings;
#[path = "exec_sandbox/tools.rs"]
mod tools;
