//! The run's set-up as a command sees it. The set-up (and the run's PID 1) is a fork of
//! `avfs exec`, not a second start of avfs's binary: what that `execve` did is now done
//! by hand, and these tests check what a command can observe of it.

mod common;

use common::Env;
use serde_json::Value;

fn required() -> bool {
    std::env::var("AVFS_REQUIRE_FUSE").as_deref() == Ok("1")
}

/// A private `$AVFS_HOME` with a vault `t` whose policy allows everything; `None` (or a
/// failure under `AVFS_REQUIRE_FUSE=1`) when runs cannot be set up on this machine.
fn setup(test: &str) -> Option<Env> {
    let env = Env::new();
    env.ok(&["vault", "create", "t"]);
    env.allow_all_policy("t");
    let probe = env.run(&["--json", "--vault", "t", "exec", "--", "true"]);
    let v: Value = serde_json::from_str(&probe.stdout).unwrap_or(Value::Null);
    if v.get("error").is_some() || v.is_null() {
        let why = format!("avfs exec cannot run here: {}", probe.stdout);
        assert!(
            !required(),
            "{test}: runs are required (AVFS_REQUIRE_FUSE=1): {why}"
        );
        eprintln!("SKIPPED {test}: {why}");
        return None;
    }
    Some(env)
}

/// `avfs --json --vault t exec ARGS`: the envelope of a run that happened.
fn exec(env: &Env, args: &[&str]) -> Value {
    let mut a = vec!["--json", "--vault", "t", "exec"];
    a.extend_from_slice(args);
    let r = env.run(&a);
    let v: Value = serde_json::from_str(&r.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\nstderr: {}", r.stdout, r.stderr));
    assert!(v.get("error").is_none(), "{v}");
    v
}

/// A command cannot approve its own request: `avfs approve` inside a run is refused also
/// when the command removed the run's marker variable, because the run's PID 1 is
/// avfs's set-up (`__avfs-run`), which the command cannot replace.
#[test]
fn a_command_cannot_approve_even_without_the_marker_variable() {
    let Some(env) = setup("a_command_cannot_approve_even_without_the_marker_variable") else {
        return;
    };
    // Without the sandbox, so that avfs's binary (in the build tree) can be run inside.
    let avfs = env!("CARGO_BIN_EXE_avfs");
    let v = exec(
        &env,
        &[
            "--no-sandbox",
            "--",
            "env",
            "-u",
            "AVFS_EXEC_ID",
            avfs,
            "approve",
            "ap-0000000000",
        ],
    );
    assert_eq!(v["exit_code"], 1, "{v}");
    let err = v["result"]["stderr"].as_str().unwrap();
    assert!(
        err.contains("approvals cannot be decided from inside an avfs exec run")
            && err.contains("PID namespace"),
        "{err}"
    );
    // What it looks at: PID 1's command line names the set-up.
    let v = exec(&env, &["--", "cat", "/proc/1/cmdline"]);
    let cmdline = v["result"]["stdout"].as_str().unwrap();
    assert!(
        cmdline.split('\0').any(|a| a == "__avfs-run"),
        "{cmdline:?}"
    );
}

/// Only stdin, stdout and stderr get into the run, in the sandbox and without it (the
/// set-up is a fork: nothing closes avfs's own descriptors, the vault's included, but
/// the set-up itself).
#[test]
fn no_descriptor_of_avfs_reaches_the_command() {
    let Some(env) = setup("no_descriptor_of_avfs_reaches_the_command") else {
        return;
    };
    for mode in ["--sandbox", "--no-sandbox"] {
        let v = exec(&env, &[mode, "--", "ls", "/proc/self/fd"]);
        let fds: Vec<&str> = v["result"]["stdout"].as_str().unwrap().lines().collect();
        // 0, 1, 2, and the descriptor `ls` opened to list the directory.
        assert_eq!(fds.len(), 4, "{mode}: {fds:?}");
        assert_eq!(&fds[..3], ["0", "1", "2"], "{mode}: {fds:?}");
    }
}
