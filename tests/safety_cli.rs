//! Nothing lost by accident, through the real binary: `vault delete` of a vault that is
//! mounted or running, read-only commands on a vault that does not exist, and the small
//! things scripts rely on (`--quiet`, precise mount errors).

mod common;
#[path = "common/fuse.rs"]
mod fuse;

use std::time::{Duration, Instant};

use common::*;

#[test]
fn read_only_commands_on_a_missing_vault_create_nothing() {
    let env = Env::new();
    for args in [
        vec!["ls", "/"],
        vec!["cat", "/x"],
        vec!["stat", "/"],
        vec!["tree", "/"],
        vec!["checkpoint", "list"],
        vec!["audit"],
        vec!["stats"],
        vec!["diff"],
        vec!["vault", "info"],
    ] {
        let e = env.json_err(&args, 1);
        assert_eq!(e["kind"], "no_such_vault", "{args:?}: {e}");
        let msg = e["message"].as_str().unwrap();
        assert!(msg.contains("avfs vault create NAME"), "{args:?}: {msg}");
    }
    assert!(
        !env.home().join("vaults").exists(),
        "a read created a vault"
    );
    assert_eq!(
        env.json(&["vault", "list"])["vaults"],
        serde_json::json!([])
    );
    // A named vault or a path that does not exist is the same kind, not a new vault.
    let e = env.json_err(&["--vault", "nosuch", "ls", "/"], 1);
    assert_eq!(e["kind"], "no_such_vault");
    let missing = env.path("missing.avfs");
    let e = env.json_err(&["--vault", missing.to_str().unwrap(), "ls", "/"], 1);
    assert_eq!(e["kind"], "no_such_vault");
    assert!(!missing.exists());

    // The first mutating use creates `default`, as the README promises.
    env.ok(&["write", "/notes.txt", "hello"]);
    assert_eq!(env.cat(None, "/notes.txt"), "hello");
    assert_eq!(env.json(&["vault", "list"])["vaults"][0]["name"], "default");

    // After `default` is deleted, a read is an error again, not a silent empty vault.
    env.ok(&["vault", "delete", "default", "-y"]);
    assert_eq!(env.json_err(&["ls", "/"], 1)["kind"], "no_such_vault");
    assert_eq!(
        env.json(&["vault", "list"])["vaults"],
        serde_json::json!([])
    );
}

#[test]
fn deleting_a_mounted_vault_is_refused_unless_forced_and_keeps_nothing_half_done() {
    if !fuse::fuse_or_skip("deleting_a_mounted_vault") {
        return;
    }
    let env = Env::new();
    env.ok(&["vault", "create", "v"]);
    env.ok(&["--vault", "v", "write", "/a.txt", "a"]);
    env.ok(&["vault", "fork", "v", "f"]);
    let mp = env.path("mnt");
    std::fs::create_dir(&mp).unwrap();
    env.ok(&["mount", "f", mp.to_str().unwrap()]);
    std::fs::write(mp.join("b.txt"), "written in the mount").unwrap();

    // The fork is mounted: its delete is refused with the next step.
    let e = env.json_err(&["vault", "delete", "f", "-y"], 1);
    assert_eq!(e["kind"], "busy", "{e}");
    let msg = e["message"].as_str().unwrap();
    assert!(
        msg.contains(mp.to_str().unwrap()) && msg.contains("--force"),
        "{msg}"
    );
    // Its vault's too: a fork of it is mounted.
    let e = env.json_err(&["vault", "delete", "v", "-y"], 1);
    assert_eq!(e["kind"], "busy", "{e}");
    assert!(fuse::is_mountpoint(&mp));
    assert_eq!(env.cat(Some("f"), "/b.txt"), "written in the mount");
    assert_eq!(
        env.json(&["vault", "list"])["vaults"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    // --force unmounts first, then deletes.
    let r = env.json(&["vault", "delete", "f", "-y", "--force"]);
    assert_eq!(r["deleted"], serde_json::json!(["f"]));
    assert_eq!(r["unmounted"], serde_json::json!([mp.to_str().unwrap()]));
    assert!(!fuse::is_mountpoint(&mp));
    assert_eq!(env.json(&["mounts"])["mounts"], serde_json::json!([]));
    assert_eq!(env.cat(Some("v"), "/a.txt"), "a");
    assert_eq!(
        env.json_err(&["--vault", "f", "ls", "/"], 1)["kind"],
        "no_such_vault"
    );
}

#[test]
fn deleting_a_vault_with_a_run_in_progress_is_refused_even_with_force() {
    let env = Env::new();
    env.ok(&["write", "/a.txt", "a"]);
    let mut child = env
        .cmd(["exec", "--", "sleep", "6"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the run holds its workspace (its lock file names it).
    let start = Instant::now();
    loop {
        let locks = std::fs::read_dir(env.home().join("locks"))
            .map(|d| {
                d.flatten()
                    .any(|e| std::fs::read_to_string(e.path()).is_ok_and(|t| t.contains("sleep")))
            })
            .unwrap_or(false);
        if locks {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the run never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for args in [
        vec!["vault", "delete", "default", "-y"],
        vec!["vault", "delete", "default", "-y", "--force"],
    ] {
        let e = env.json_err(&args, 1);
        assert_eq!(e["kind"], "busy", "{args:?}: {e}");
        let msg = e["message"].as_str().unwrap();
        assert!(msg.contains("sleep 6") && msg.contains("Wait"), "{msg}");
    }
    assert!(child.wait().unwrap().success());
    assert_eq!(env.cat(None, "/a.txt"), "a");
    // The run is over: the delete goes through.
    env.ok(&["vault", "delete", "default", "-y"]);
    assert!(!env.home().join("vaults/default.avfs").exists());
}

#[test]
fn mount_on_a_missing_directory_says_so() {
    let env = Env::new();
    env.ok(&["write", "/a.txt", "a"]);
    let mp = env.path("no/such/dir");
    let e = env.json_err(&["mount", mp.to_str().unwrap()], 1);
    assert_eq!(e["kind"], "not_found", "{e}");
    let msg = e["message"].as_str().unwrap();
    assert!(
        msg.contains("does not exist") && msg.contains("mkdir -p"),
        "{msg}"
    );
    let file = env.path("file");
    std::fs::write(&file, "x").unwrap();
    let e = env.json_err(&["mount", file.to_str().unwrap()], 1);
    assert_eq!(e["kind"], "not_a_directory", "{e}");
}

#[test]
fn quiet_prints_no_summaries_and_stats_are_for_people() {
    let env = Env::new();
    let r = env.ok(&["--quiet", "write", "/a.txt", "hello"]);
    assert_eq!((r.stdout.as_str(), r.stderr.as_str()), ("", ""));
    let r = env.ok(&["-q", "checkpoint", "save", "one"]);
    assert_eq!(r.stdout, "");
    // Errors are still printed, and --json is unchanged.
    let r = env.run(&["-q", "cat", "/nope"]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("/nope"), "{}", r.stderr);
    assert_eq!(env.json(&["-q", "stat", "/a.txt"])["size"], 5);

    let r = env.ok(&["stats"]);
    assert!(
        !r.stdout.contains('{'),
        "raw JSON in human stats: {}",
        r.stdout
    );
    assert!(r.stdout.contains("files 1,"), "{}", r.stdout);
    assert!(r.stdout.contains("head one, 1 checkpoint"), "{}", r.stdout);
}
