//! `avfs exec` on the overlay engine, driven as an agent drives it: the probe that fails
//! a test under `AVFS_REQUIRE_FUSE=1` when overlayfs cannot be used, and the envelope
//! helpers the exec tests share.
//!
//! Include with `mod common; #[path = "common/overlay.rs"] mod overlay;`.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::sync::OnceLock;

use serde_json::Value;

use crate::common::Env;

fn overlay_probe() -> &'static Result<(), String> {
    static P: OnceLock<Result<(), String>> = OnceLock::new();
    P.get_or_init(|| {
        let env = Env::new();
        let r = env.run(&["--json", "exec", "--", "true"]);
        let v: Value = serde_json::from_str(&r.stdout).map_err(|e| format!("{e}: {}", r.stdout))?;
        if let Some(e) = v.get("error") {
            return Err(e.to_string());
        }
        match v["engine"]["name"].as_str() {
            Some("overlay") => Ok(()),
            _ => Err(format!("exec ran with {}", v["engine"])),
        }
    })
}

/// True when the overlay engine runs here; fails the test under `AVFS_REQUIRE_FUSE=1`.
pub fn overlay_or_skip(test: &str) -> bool {
    match overlay_probe() {
        Ok(()) => true,
        Err(why) => {
            if std::env::var("AVFS_REQUIRE_FUSE").as_deref() == Ok("1") {
                panic!("{test}: the overlay engine is required (AVFS_REQUIRE_FUSE=1) but: {why}");
            }
            eprintln!("SKIPPED {test}: no overlay engine ({why})");
            false
        }
    }
}

/// A policy that lets `sh` run and write (checkpointed first), as the exec tests need.
pub const SH_CHECKPOINTED: &str = r#"
[[rule]]
name = "test-sh"
program = "sh"
category = "mutating"
decision = "allow_with_checkpoint"
"#;

/// A policy that lets `sh` run and write with no checkpoint.
pub const SH_ALLOWED: &str = r#"
[[rule]]
name = "test-sh"
program = "sh"
category = "mutating"
decision = "allow"
"#;

/// `sh -c SCRIPT` in `vault` through exec; it must exit 0.
pub fn sh_in(env: &Env, vault: &str, script: &str) -> Value {
    ok_in(env, vault, &["--", "sh", "-c", script])
}

/// Where `status` says the workspace's ignored files are.
pub fn ignored_dir(env: &Env, vault: &str) -> std::path::PathBuf {
    let st = env.json(&["--vault", vault, "status"]);
    std::path::PathBuf::from(st["ignored"]["path"].as_str().expect("status names it"))
}

/// A private home with vault `t` and `policy` as the user's policy file.
pub fn setup_with(policy: &str) -> Env {
    let env = Env::new();
    env.ok(&["vault", "create", "t"]);
    std::fs::create_dir_all(env.home()).unwrap();
    std::fs::write(env.home().join("policy.toml"), policy).unwrap();
    env
}

/// `avfs --json --vault VAULT exec ARGS...`: the envelope (avfs itself must not fail).
pub fn exec_in(env: &Env, vault: &str, args: &[&str]) -> Value {
    let mut a = vec!["--json", "--vault", vault, "exec"];
    a.extend_from_slice(args);
    let r = env.run(&a);
    let v: Value = serde_json::from_str(&r.stdout).unwrap_or_else(|e| {
        panic!(
            "exec {args:?}: {e}\nstdout: {}\nstderr: {}",
            r.stdout, r.stderr
        )
    });
    assert!(v.get("error").is_none(), "exec {args:?}: {v}");
    assert_eq!(r.code, v["exit_code"].as_i64().unwrap() as i32, "{v}");
    v
}

/// Like [`exec_in`], and the command exited 0.
pub fn ok_in(env: &Env, vault: &str, args: &[&str]) -> Value {
    let v = exec_in(env, vault, args);
    assert_eq!(
        v["exit_code"], 0,
        "exec {args:?} failed: {}\n{}",
        v["result"]["stderr"], v["decision"]
    );
    v
}

pub fn stdout(v: &Value) -> String {
    v["result"]["stdout"].as_str().unwrap_or("").to_string()
}

/// The envelope's change list as (kind, path) pairs.
pub fn changes(v: &Value) -> BTreeSet<(String, String)> {
    crate::common::changes(v).into_iter().collect()
}
