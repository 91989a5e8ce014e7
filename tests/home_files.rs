//! What a finished workflow leaves in `$AVFS_HOME`: once no avfs process has it open, a
//! vault is its `.avfs` file alone (SQLite's `-wal` and `-shm` are removed by the last
//! process out), and a package cache the host does not have costs no overlayfs work
//! directory. (The registry keeps its `-wal` and `-shm` between commands: removing them
//! costs a checkpoint, four fsyncs, per command that writes a vault.)
//!
//! Runs commands on the overlay engine; under `AVFS_REQUIRE_FUSE=1` (CI) a machine
//! without it fails them instead of skipping.

mod common;
#[path = "common/overlay.rs"]
mod overlay;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::Env;
use overlay::{SH_CHECKPOINTED as POLICY, exec_in, overlay_or_skip, setup_with};

/// The avfs processes of `env`'s home other than keepers (which hold no database file
/// open: they outlive runs by design): pid and command line.
fn processes_of(env: &Env) -> Vec<(i32, String)> {
    let want = format!("AVFS_HOME={}", env.home().display());
    let mut out = vec![];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(environ) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        if !environ.split(|b| *b == 0).any(|kv| kv == want.as_bytes()) {
            continue;
        }
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        if stat
            .rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z'))
        {
            continue;
        }
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains("__avfs-keep") {
            continue;
        }
        out.push((pid, cmd));
    }
    out
}

/// Waits (up to a minute: a watchdog may still be finishing) until no avfs process of
/// the home but keepers is left; fails naming them otherwise.
fn wait_for_no_processes(env: &Env) {
    let t0 = Instant::now();
    loop {
        let left = processes_of(env);
        if left.is_empty() {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "avfs processes still running: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SQLite's side files (`-wal`, `-shm`, `-journal`) in `dir`.
fn side_files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = p.to_string_lossy();
            n.ends_with("-wal") || n.ends_with("-shm") || n.ends_with("-journal")
        })
        .collect();
    out.sort();
    out
}

/// An exec, a command that fails, an avfs command that fails, and reads: once their
/// processes are gone, the vault's SQLite side files are too, and what they wrote is in
/// the file.
#[test]
fn finished_commands_leave_no_sqlite_side_files() {
    if !overlay_or_skip("finished_commands_leave_no_sqlite_side_files") {
        return;
    }
    let env = setup_with(POLICY);
    let v = exec_in(&env, "t", &["--shell", "echo one > a.txt"]);
    assert_eq!(v["exit_code"], 0, "{v}");
    // The command fails (so does avfs exec, with its status).
    let v = exec_in(&env, "t", &["--shell", "echo two > b.txt; exit 3"]);
    assert_eq!(v["exit_code"], 3, "{v}");
    // avfs itself fails.
    let e = env.json_err(&["--vault", "t", "cat", "no-such-file"], 1);
    assert_eq!(e["kind"], "not_found", "{e}");
    let st = env.json(&["--vault", "t", "status"]);
    assert!(st.get("error").is_none(), "{st}");
    wait_for_no_processes(&env);
    let vaults = env.home().join("vaults");
    assert_eq!(
        side_files(&vaults),
        Vec::<PathBuf>::new(),
        "beside the vault"
    );
    // Nothing was lost with them: a fresh process reads both runs' files.
    assert_eq!(env.cat(Some("t"), "a.txt"), "one\n");
    assert_eq!(env.cat(Some("t"), "b.txt"), "two\n");
    wait_for_no_processes(&env);
    assert_eq!(side_files(&vaults), Vec::<PathBuf>::new(), "after cat");
}

/// Reads while an exec runs share SQLite's side files with it (none is removed under
/// it), see what it committed after, and the last process out removes them.
#[test]
fn reads_during_an_exec_share_the_side_files_and_the_last_removes_them() {
    if !overlay_or_skip("reads_during_an_exec_share_the_side_files_and_the_last_removes_them") {
        return;
    }
    let env = setup_with(POLICY);
    env.ok(&["--vault", "t", "write", "before.txt", "b\n"]);
    let vaults = env.home().join("vaults");
    assert_eq!(side_files(&vaults), Vec::<PathBuf>::new(), "after write");
    let run = env
        .cmd([
            "--json",
            "--vault",
            "t",
            "exec",
            "--shell",
            "echo during > during.txt; sleep 2",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Reads of the vault while the run holds it (or after it: then they are plain reads).
    for _ in 0..5 {
        assert_eq!(env.cat(Some("t"), "before.txt"), "b\n");
        env.json(&["--vault", "t", "status"]);
        env.json(&["--vault", "t", "checkpoint", "list"]);
    }
    let out = run.wait_with_output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["exit_code"], 0, "{v}");
    assert_eq!(env.cat(Some("t"), "during.txt"), "during\n");
    wait_for_no_processes(&env);
    // A -wal the run could not checkpoint (a reader had the file open at its close) is
    // the next writer's to checkpoint; this one's close is the last.
    env.ok(&["--vault", "t", "write", "after.txt", "a\n"]);
    wait_for_no_processes(&env);
    assert_eq!(
        side_files(&vaults),
        Vec::<PathBuf>::new(),
        "beside the vault"
    );
    env.ok(&["vault", "verify", "t"]);
}

/// A package cache the host has no directory for is mounted from the vault's own
/// directory alone: it has no overlayfs work directory; one the host has keeps its.
#[test]
fn a_cache_the_host_lacks_has_no_work_directory() {
    if !overlay_or_skip("a_cache_the_host_lacks_has_no_work_directory") {
        return;
    }
    let env = setup_with(POLICY);
    let v = exec_in(&env, "t", &["--", "true"]);
    assert_eq!(v["exit_code"], 0, "{v}");
    let caches: Vec<String> = v["sandbox"]["writable_caches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect();
    assert!(!caches.is_empty(), "{v}");
    let dirs: Vec<PathBuf> = std::fs::read_dir(env.home().join("caches"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    for c in &caches {
        let name = c.trim_start_matches('/').replace('/', "_");
        let d = dirs[0].join(&name);
        assert!(
            d.join("upper").is_dir(),
            "{c}: no {}",
            d.join("upper").display()
        );
        let host_has = std::fs::canonicalize(c).is_ok_and(|p| p.is_dir());
        assert_eq!(
            d.join("work").exists(),
            host_has,
            "{c}: the host has it: {host_has}"
        );
    }
}
