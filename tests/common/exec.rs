//! The `avfs exec` tests' shared steps: a workspace to run in, one exec checked as a
//! whole (one valid envelope on stdout, its exit status the command's, no mount left
//! behind), and readers of what an envelope and the vault say.
//!
//! Include with `mod common; #[path = "common/envelope.rs"] mod envelope;
//! #[path = "common/exec.rs"] mod exec;`.
#![allow(dead_code)]

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::common::{self, Env, Run};
use crate::envelope::assert_envelope;

/// A private `$AVFS_HOME` with a vault `t` holding `a.txt` ("hi\n") and `sub/b.txt`.
pub fn setup() -> Env {
    let env = Env::new();
    env.ok(&["vault", "create", "t"]);
    env.ok(&["--vault", "t", "write", "a.txt", "hi\n"]);
    env.ok(&["--vault", "t", "write", "-p", "sub/b.txt", "bee\n"]);
    env
}

pub struct Exec {
    pub code: i32,
    pub env: Value,
    pub run: Run,
}

/// `avfs --json --vault t exec ARGS...`: checks that stdout is exactly one valid
/// envelope, that the exit status is the envelope's, and that no exec mount is left.
pub fn exec_in(env: &Env, vault: &str, args: &[&str]) -> Exec {
    let mut a = vec!["--json", "--vault", vault, "exec"];
    a.extend_from_slice(args);
    let run = env.run(&a);
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
    assert_eq!(
        run.code,
        v["exit_code"].as_i64().unwrap() as i32,
        "exit status differs from the envelope's exit_code: {v}"
    );
    let exec_dir = env.home().join("run/exec");
    if let Ok(rd) = std::fs::read_dir(&exec_dir) {
        let left: Vec<_> = rd.map(|e| e.unwrap().path()).collect();
        assert!(left.is_empty(), "exec left mountpoints behind: {left:?}");
    }
    Exec {
        code: run.code,
        env: v,
        run,
    }
}

pub fn exec(env: &Env, args: &[&str]) -> Exec {
    exec_in(env, "t", args)
}

/// `avfs --json --vault t exec ARGS...` that must fail as avfs itself (not the command).
pub fn exec_error(env: &Env, args: &[&str]) -> Value {
    let mut a = vec!["--vault", "t", "exec"];
    a.extend_from_slice(args);
    env.json_err(&a, 1)
}

pub fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect()
}

pub fn categories(e: &Value) -> Vec<String> {
    strs(&e["decision"]["categories"])
}

/// (kind, path) of every change, as reported.
pub fn change_set(e: &Value) -> BTreeSet<(String, String)> {
    common::changes(e).into_iter().collect()
}

pub fn set(items: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    items
        .iter()
        .map(|(k, p)| (k.to_string(), p.to_string()))
        .collect()
}

pub fn change<'a>(e: &'a Value, path: &str) -> &'a Value {
    e["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["path"] == path)
        .unwrap_or_else(|| panic!("no change for {path}: {}", e["changes"]))
}

pub fn checkpoint_names(env: &Env, vault: &str) -> Vec<String> {
    env.json(&["--vault", vault, "checkpoint", "list"])["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

pub fn vault_names(env: &Env) -> Vec<String> {
    env.json(&["vault", "list"])["vaults"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_string())
        .collect()
}

pub fn exists(env: &Env, vault: &str, path: &str) -> bool {
    env.run(&["--vault", vault, "stat", path]).code == 0
}

pub fn audit_entries(env: &Env, vault: &str) -> Vec<Value> {
    env.json(&["--vault", vault, "audit"])["entries"]
        .as_array()
        .unwrap()
        .clone()
}

/// Asserts a command was turned away without running: nothing in the result, no
/// checkpoint, no mount, no change.
pub fn assert_nothing_ran(e: &Value) {
    assert!(
        e["result"].is_null(),
        "a result for a command that must not run: {e}"
    );
    assert!(e["checkpoint"].is_null(), "{e}");
    assert!(e["mountpoint"].is_null(), "{e}");
    assert_eq!(e["changes"], json!([]), "{e}");
    assert!(!e["rollback"]["performed"].as_bool().unwrap());
}
