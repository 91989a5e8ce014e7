//! `kill -9` of CLI commands in the middle of their work: `checkpoint save`, `vault fork`,
//! `gc`, `import` (of a large host tree) and `exec`. After every kill the vault opens,
//! `vault verify` and `audit verify` pass, the registry and the vault file agree, and the
//! operation is either fully done or not done at all.
//!
//! Each test first times one uninterrupted run of the same operation, then kills later
//! runs after a random delay within that time, so most kills land mid-operation (the
//! report counts how many did).
//!
//! Knobs: `AVFS_CRASH_ROUNDS` (rounds per operation, default 50), `AVFS_CRASH_SEED`
//! (seed of the delays), `AVFS_CRASH_IMPORT_FILES` (files in the imported tree, default
//! 20 000). `exec` needs /dev/fuse (skips without it; fails with `AVFS_REQUIRE_FUSE=1`).
#![allow(clippy::macro_metavars_in_unsafe)]

mod common;
#[allow(unused_macros, unused_imports)]
#[macro_use]
#[path = "common/fuse.rs"]
mod fuse;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::Env;
use fuse::{Rng, fuse_or_skip};
use serde_json::Value;

fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn rounds() -> u64 {
    knob("AVFS_CRASH_ROUNDS", 50)
}

fn rng_for(test: &str) -> Rng {
    let seed = knob("AVFS_CRASH_SEED", 0x5eed);
    let h = test
        .bytes()
        .fold(seed, |h, b| h.wrapping_mul(31).wrapping_add(b as u64));
    Rng::new(h)
}

/// One line for the reliability table (collected by scripts/reliability.sh).
fn report(what: &str, rounds: u64, held: &str) {
    eprintln!("RELIABILITY|crash_cli|kill -9|{what}|{rounds}|{held}");
}

/// How a killed run ended.
#[derive(Default)]
struct Tally {
    /// Still running when SIGKILL was sent.
    killed_mid: u64,
    /// Had already exited.
    finished_first: u64,
    /// After the kill: the operation was complete / absent.
    done: u64,
    not_done: u64,
}

impl Tally {
    fn summary(&self) -> String {
        format!(
            "{} killed mid-operation ({} had finished first); afterwards {} done, {} not done, 0 half-done",
            self.killed_mid, self.finished_first, self.done, self.not_done
        )
    }
}

fn spawn(env: &Env, args: &[&str]) -> Child {
    env.cmd(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Runs `args`, SIGKILLs it after `delay`; true when it was still running then.
fn run_and_kill(env: &Env, args: &[&str], delay: Duration) -> bool {
    let mut child = spawn(env, args);
    std::thread::sleep(delay);
    let running = matches!(child.try_wait(), Ok(None));
    if running {
        // SAFETY: kill(2) of our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    }
    let st = child.wait().unwrap();
    if !running {
        let mut err = String::new();
        use std::io::Read;
        let _ = child.stderr.take().unwrap().read_to_string(&mut err);
        assert!(
            st.code() == Some(0) || st.code() == Some(1),
            "avfs {args:?} exited {st} before the kill\n{err}"
        );
        assert!(!err.contains("panicked"), "avfs {args:?} panicked\n{err}");
    }
    running
}

/// Times one full run (it must succeed).
fn timed(env: &Env, args: &[&str]) -> Duration {
    let t0 = Instant::now();
    env.ok(args);
    t0.elapsed()
}

fn delay_within(rng: &mut Rng, full: Duration) -> Duration {
    // Half the kills anywhere in a full run, half in its last 30 % (where the commits
    // are); up to 110 %, so a few runs finish before the kill.
    let us = (full.as_micros() as u64).max(1000);
    if rng.chance(50) {
        Duration::from_micros(rng.below(us))
    } else {
        Duration::from_micros(us * 8 / 10 + rng.below(us * 3 / 10))
    }
}

/// The vault opens, verifies, its audit chain holds, and every registered name agrees
/// with the workspaces in the file.
fn healthy(env: &Env, vault: &str, what: &str) {
    let r = env.run(&["--json", "--vault", vault, "vault", "verify"]);
    assert!(
        r.code == 0 && r.json()["report"]["ok"] == true,
        "{what}: vault verify after kill -9:\n{}\n{}",
        r.stdout,
        r.stderr
    );
    let r = env.run(&["--json", "--vault", vault, "audit", "verify"]);
    assert!(
        r.code == 0 && r.json()["ok"] == true,
        "{what}: audit verify after kill -9:\n{}",
        r.stdout
    );
    registry_agrees(env, vault, what);
}

/// Registered forks of `vault` (whose parent is it) and the workspaces forked from it in
/// the file are the same set, and no registered name points at a missing workspace.
fn registry_agrees(env: &Env, vault: &str, what: &str) {
    let list = env.json(&["vault", "list"]);
    let mut registered = BTreeSet::new();
    for v in list["vaults"].as_array().unwrap() {
        assert!(
            v.get("error").is_none_or(Value::is_null),
            "{what}: registry entry {} points at nothing: {v}",
            v["name"]
        );
        if v["parent"] == vault {
            registered.insert(v["name"].as_str().unwrap().to_string());
        }
    }
    let info = env.json(&["vault", "info", vault]);
    let in_file: BTreeSet<String> = info["forks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        registered, in_file,
        "{what}: the registry (left) and the vault file (right) disagree on the forks of {vault}"
    );
}

fn write_tree(root: &Path, files: usize, tag: &str) -> usize {
    let per_dir = 200;
    for i in 0..files {
        let d = root.join(format!("d{:03}", i / per_dir));
        if i % per_dir == 0 {
            std::fs::create_dir_all(&d).unwrap();
        }
        std::fs::write(
            d.join(format!("f{:03}", i % per_dir)),
            format!("{tag} file {i}\n"),
        )
        .unwrap();
    }
    files
}

fn count_files(env: &Env, vault: &str, path: &str) -> Option<usize> {
    let r = env.run(&["--json", "--vault", vault, "tree", "-a", path]);
    if r.code != 0 {
        let v = r.json();
        assert_eq!(v["error"]["kind"], "not_found", "tree {path}: {v}");
        return None;
    }
    fn walk(n: &Value) -> usize {
        n["children"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| if c["type"] == "dir" { walk(c) } else { 1 })
            .sum()
    }
    Some(walk(&r.json()))
}

// ---------------------------------------------------------------------------- import

#[test]
fn kill_9_of_import_leaves_all_or_nothing() {
    let n = knob("AVFS_CRASH_IMPORT_FILES", 20_000) as usize;
    let env = Env::new();
    let host = env.path("host");
    write_tree(&host, n, "import");
    env.ok(&["vault", "create", "v"]);
    env.ok(&["--vault", "v", "write", "/before", "kept"]);
    let h = host.to_str().unwrap();
    let full = timed(&env, &["--vault", "v", "import", h, "/cal"]);
    assert_eq!(count_files(&env, "v", "/cal"), Some(n));
    let mut rng = rng_for("import");
    let mut t = Tally::default();
    for round in 0..rounds() {
        let dest = format!("/imp{round}");
        let delay = delay_within(&mut rng, full);
        let mid = run_and_kill(&env, &["--vault", "v", "import", h, &dest], delay);
        if mid {
            t.killed_mid += 1;
        } else {
            t.finished_first += 1;
        }
        let what = format!(
            "import round {round} (killed after {} ms)",
            delay.as_millis()
        );
        healthy(&env, "v", &what);
        match count_files(&env, "v", &dest) {
            None => t.not_done += 1,
            Some(c) => {
                assert_eq!(c, n, "{what}: HALF an import: {c} of {n} files");
                assert_eq!(
                    env.cat(Some("v"), &format!("{dest}/d000/f007")),
                    "import file 7\n"
                );
                t.done += 1;
            }
        }
        assert_eq!(env.cat(Some("v"), "/before"), "kept");
        // The vault keeps working (the next round imports again).
        env.ok(&["--vault", "v", "rm", "-r", "-f", &dest]);
    }
    report(
        &format!("`import` of {n} files (full run {} ms)", full.as_millis()),
        rounds(),
        &format!("verify + audit ok; {}", t.summary()),
    );
}

// ---------------------------------------------------------------- checkpoint save

#[test]
fn kill_9_of_checkpoint_save_leaves_it_saved_or_absent() {
    let env = Env::new();
    let host = env.path("host");
    let n = 2000;
    write_tree(&host, n, "cp");
    env.ok(&["vault", "create", "v"]);
    env.ok(&["--vault", "v", "import", host.to_str().unwrap(), "/t"]);
    // Many dirty inodes make the save do real work: chmod 1000 files each round.
    let dirty = |round: u64| {
        let mode = if round.is_multiple_of(2) {
            "600"
        } else {
            "640"
        };
        let paths: Vec<String> = (0..1000)
            .map(|i| {
                let j = (i + round as usize * 317) % n;
                format!("/t/d{:03}/f{:03}", j / 200, j % 200)
            })
            .collect();
        let mut a = vec!["--vault", "v", "chmod", mode];
        a.extend(paths.iter().map(String::as_str));
        env.ok(&a);
        env.ok(&["--vault", "v", "write", "/round", &format!("round {round}")]);
    };
    dirty(1000);
    let full = timed(&env, &["--vault", "v", "checkpoint", "save", "cal"]);
    let mut rng = rng_for("checkpoint");
    let mut t = Tally::default();
    for round in 0..rounds() {
        dirty(round);
        let name = format!("k{round}");
        let delay = delay_within(&mut rng, full);
        let mid = run_and_kill(&env, &["--vault", "v", "checkpoint", "save", &name], delay);
        if mid {
            t.killed_mid += 1;
        } else {
            t.finished_first += 1;
        }
        let what = format!(
            "checkpoint save round {round} (killed after {} ms)",
            delay.as_millis()
        );
        healthy(&env, "v", &what);
        let list = env.json(&["--vault", "v", "checkpoint", "list"]);
        let names: Vec<&str> = list["checkpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        if names.contains(&name.as_str()) {
            // Saved: it is the head, it holds this round's state, and nothing changed since.
            assert_eq!(list["head"], name.as_str(), "{what}: {list}");
            assert_eq!(
                env.ok(&["--vault", "v", "cat", "--at", &name, "/round"])
                    .stdout,
                format!("round {round}")
            );
            let d = env.json(&["--vault", "v", "diff", &name]);
            assert_eq!(d["changes"].as_array().unwrap().len(), 0, "{what}: {d}");
            t.done += 1;
        } else {
            // Not saved: the live state still has every change, and saving works.
            assert_eq!(env.cat(Some("v"), "/round"), format!("round {round}"));
            let d = env.json(&["--vault", "v", "diff"]);
            assert!(
                !d["changes"].as_array().unwrap().is_empty(),
                "{what}: changes lost: {d}"
            );
            env.ok(&["--vault", "v", "checkpoint", "save", &name]);
            t.not_done += 1;
        }
        // Every checkpoint restores: restore the previous one and come back.
        if round > 0 {
            env.ok(&[
                "--vault",
                "v",
                "checkpoint",
                "restore",
                &format!("k{}", round - 1),
            ]);
            assert_eq!(env.cat(Some("v"), "/round"), format!("round {}", round - 1));
            env.ok(&["--vault", "v", "checkpoint", "restore", &name]);
        }
    }
    report(
        &format!(
            "`checkpoint save` of 1000 dirty files (full run {} ms)",
            full.as_millis()
        ),
        rounds(),
        &format!("verify + audit ok; {}", t.summary()),
    );
}

// ------------------------------------------------------------------------ vault fork

#[test]
fn kill_9_of_vault_fork_leaves_a_usable_fork_or_none() {
    let env = Env::new();
    env.ok(&["vault", "create", "v"]);
    env.ok(&["--vault", "v", "write", "-p", "/src/a", "base a"]);
    env.ok(&["--vault", "v", "checkpoint", "save", "base"]);
    let full = timed(&env, &["vault", "fork", "v", "cal"]);
    let mut rng = rng_for("fork");
    let mut t = Tally::default();
    for round in 0..rounds() {
        // Unsaved changes in the source: the fork must checkpoint them first.
        env.ok(&["--vault", "v", "write", "/src/r", &format!("round {round}")]);
        let name = format!("fk{round}");
        let delay = delay_within(&mut rng, full);
        let mid = run_and_kill(&env, &["vault", "fork", "v", &name], delay);
        if mid {
            t.killed_mid += 1;
        } else {
            t.finished_first += 1;
        }
        let what = format!(
            "vault fork round {round} (killed after {} ms)",
            delay.as_millis()
        );
        healthy(&env, "v", &what);
        let list = env.json(&["vault", "list"]);
        let exists = list["vaults"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["name"] == name.as_str());
        if exists {
            assert_eq!(
                env.cat(Some(&name), "/src/r"),
                format!("round {round}"),
                "{what}"
            );
            assert_eq!(env.cat(Some(&name), "/src/a"), "base a");
            env.ok(&["--vault", &name, "write", "/mine", "x"]);
            t.done += 1;
        } else {
            // Gone without a trace: the same fork can be made now.
            let r = env.run(&["--json", "vault", "fork", "v", &name]);
            assert_eq!(r.code, 0, "{what}: retrying the fork failed: {}", r.stdout);
            t.not_done += 1;
        }
        assert_eq!(env.cat(Some("v"), "/src/r"), format!("round {round}"));
    }
    report(
        &format!("`vault fork` (full run {} ms)", full.as_millis()),
        rounds(),
        &format!("verify + audit ok, registry = file; {}", t.summary()),
    );
}

/// The window between the two commits of `vault fork` (the vault file, then the
/// registry, a separate SQLite file) is too short for random kills to hit reliably.
/// This puts the vault in exactly the state such a kill leaves: the fork's workspace
/// committed in the file, no registry entry. The user must be able to recover by simply
/// running the command again.
#[test]
fn fork_killed_between_vault_file_and_registry_can_be_retried() {
    let env = Env::new();
    env.ok(&["vault", "create", "v"]);
    env.ok(&["--vault", "v", "write", "/a", "a"]);
    let path = PathBuf::from(
        env.json(&["vault", "info", "v"])["vault"]["path"]
            .as_str()
            .unwrap(),
    );
    let orphan = |name: &str| {
        let mut s = agentvfs::store::Store::open(&path).unwrap();
        s.write(|db| {
            let mut ws = agentvfs::workspace::Workspace::open(db, "main")?;
            ws.fork(name, None)?;
            Ok(())
        })
        .unwrap();
    };
    orphan("half");
    // The vault itself is fine.
    let v = env.json(&["--vault", "v", "vault", "verify"]);
    assert_eq!(v["report"]["ok"], true, "{v}");
    // Running the fork again completes it (or the fork is otherwise reachable).
    let r = env.run(&["--json", "vault", "fork", "v", "half"]);
    let usable = r.code == 0 || env.run(&["--vault", "half", "cat", "/a"]).code == 0;
    assert!(
        usable,
        "BUG: a `vault fork` killed after committing the workspace but before registering \
         it leaves a fork that can neither be used nor made again:\n{}",
        r.stdout
    );
    assert_eq!(env.cat(Some("half"), "/a"), "a");
    // The same window in `exec --fork` (which creates its fork the same way).
    orphan("task-x");
    if fuse_or_skip("fork_killed_between_vault_file_and_registry_can_be_retried (exec)") {
        let r = env.run(&[
            "--json", "--vault", "v", "exec", "--fork", "task-x", "--", "true",
        ]);
        assert_eq!(
            r.code, 0,
            "BUG: `exec --fork task-x` after a kill between its fork's two commits fails forever:\n{}",
            r.stdout
        );
    }
}

/// The same for `vault delete` of a fork, which deletes the workspace in the file and then
/// the registry entry: a kill between leaves a name that points at nothing. Deleting it
/// again must clean it up.
#[test]
fn fork_delete_killed_between_vault_file_and_registry_can_be_retried() {
    let env = Env::new();
    env.ok(&["vault", "create", "v"]);
    env.ok(&["vault", "fork", "v", "gone"]);
    let path = PathBuf::from(
        env.json(&["vault", "info", "v"])["vault"]["path"]
            .as_str()
            .unwrap(),
    );
    let mut s = agentvfs::store::Store::open(&path).unwrap();
    s.write(|db| agentvfs::workspace::delete_workspace(db, "gone").map(|_| ()))
        .unwrap();
    drop(s);
    let r = env.run(&["--json", "--vault", "gone", "ls", "/"]);
    assert_eq!(r.code, 1);
    assert_eq!(r.json()["error"]["kind"], "no_such_vault", "{}", r.stdout);
    let r = env.run(&["--json", "vault", "delete", "gone", "-y"]);
    assert_eq!(
        r.code, 0,
        "BUG: a fork whose `vault delete` was killed after the vault file's commit cannot be \
         deleted again (its registry entry stays forever):\n{}",
        r.stdout
    );
    let list = env.json(&["vault", "list"]);
    assert!(!list.to_string().contains("\"gone\""), "{list}");
}

// -------------------------------------------------------------------------------- gc

/// A full collection (what `gc` runs, and what `vault delete` of a fork runs after the
/// deletion is committed, since space comes back on its own) killed at a random moment:
/// the garbage is all there or all gone, never half, and the next `gc` finishes the job.
/// The collection killed is `vault delete`'s: deleting a fork leaves no garbage for a
/// later `gc` when it is not killed.
#[test]
fn kill_9_of_a_collection_leaves_it_done_or_not_done() {
    let env = Env::new();
    env.ok(&["vault", "create", "v"]);
    env.ok(&[
        "--vault",
        "v",
        "write",
        "-p",
        "/keep/a",
        &"keep".repeat(20_000),
    ]);
    env.ok(&["--vault", "v", "checkpoint", "save", "keep"]);
    let host = env.path("garbage");
    let files = 3000;
    // A fork with unique content: garbage once the fork is deleted.
    let make_fork = |tag: &str| {
        let _ = std::fs::remove_dir_all(&host);
        write_tree(&host, files, tag);
        env.ok(&["vault", "fork", "v", tag]);
        env.ok(&["--vault", tag, "import", host.to_str().unwrap(), "/g"]);
        env.ok(&["--vault", tag, "checkpoint", "save"]);
    };
    let chunks = |env: &Env| -> u64 {
        env.json(&["--vault", "v", "stats"])["stats"]["vault"]["chunks"]
            .as_u64()
            .unwrap()
    };
    make_fork("cal");
    let full = timed(&env, &["vault", "delete", "cal", "-y"]);
    let clean = chunks(&env);
    let mut rng = rng_for("gc");
    let mut t = Tally::default();
    for round in 0..rounds() {
        let tag = format!("junk{round}");
        make_fork(&tag);
        let before = chunks(&env);
        assert!(before >= clean + files as u64, "the fork holds no content");
        let delay = delay_within(&mut rng, full);
        let mid = run_and_kill(&env, &["vault", "delete", &tag, "-y"], delay);
        if mid {
            t.killed_mid += 1;
        } else {
            t.finished_first += 1;
        }
        let what = format!(
            "collection round {round} (killed after {} ms)",
            delay.as_millis()
        );
        healthy(&env, "v", &what);
        let after = chunks(&env);
        if after == clean {
            t.done += 1;
        } else {
            assert_eq!(
                after, before,
                "{what}: HALF a collection: {after} chunks, {before} before, {clean} when done"
            );
            t.not_done += 1;
        }
        assert_eq!(env.cat(Some("v"), "/keep/a"), "keep".repeat(20_000));
        assert_eq!(
            env.ok(&["--vault", "v", "cat", "--at", "keep", "/keep/a"])
                .stdout,
            "keep".repeat(20_000)
        );
        // Killed before the deletion committed: the fork is still there; delete it again.
        let _ = env.run(&["vault", "delete", &tag, "-y"]);
        env.ok(&["--vault", "v", "gc"]);
        assert_eq!(chunks(&env), clean, "{what}: gc after the kill");
    }
    report(
        &format!(
            "a full collection (`vault delete` of a fork, as `gc`) of {files} garbage chunks (full run {} ms)",
            full.as_millis()
        ),
        rounds(),
        &format!("verify + audit ok, kept content intact; {}", t.summary()),
    );
}

// ------------------------------------------------------------------------------ exec

/// A command that starts a daemon outside its process group, writes 300 files in the
/// mount, then its marker.
const EXEC_LINE: &str = "setsid sleep 600 & mkdir -p out && python3 -c 'import sys; [open(\"out/f%d\" % i, \"w\").write(\"x\" * i) for i in range(300)]' && echo done > out/marker";

/// `setsid` is no program the built-in policy knows; these tests allow it.
fn allow_setsid(env: &Env) {
    std::fs::create_dir_all(env.home()).unwrap();
    std::fs::write(
        env.home().join("policy.toml"),
        "[[rule]]\nname = \"setsid\"\nprogram = \"setsid\"\ncategory = \"mutating\"\ndecision = \"allow\"\n",
    )
    .unwrap();
}

/// Processes started for this test's `$AVFS_HOME` (every avfs process, its mount
/// servers, watchdogs and commands inherit it): pid and command line.
fn processes_of(env: &Env) -> Vec<(i32, String)> {
    // avfs's own processes carry AVFS_HOME; a run's set-up its plan, and a sandboxed
    // command (whose environment is an allow-list) AVFS_WORKSPACE_PATH: all name the home.
    let want = env.home().display().to_string();
    let mut out = vec![];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(environ) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        if !environ
            .split(|b| *b == 0)
            .any(|kv| kv.windows(want.len()).any(|w| w == want.as_bytes()))
        {
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
        // The keeper of a workspace's kept overlay outlives runs by design; one whose
        // overlay is not on record any more (a killed run's, retired) counts.
        if cmd.contains("__avfs-keep") && kept_keepers(env).contains(&(pid as i64)) {
            continue;
        }
        // A retired overlay's keeper was killed and is ending (its namespace's teardown
        // takes tens of ms, off the exec's path): it must be gone within seconds.
        if cmd.contains("__avfs-keep") && dying_keepers(env).contains(&(pid as i64)) {
            let t0 = Instant::now();
            while e.path().join("stat").exists() && t0.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(10));
            }
            let left = std::fs::read_to_string(e.path().join("stat")).is_ok_and(|s| {
                !s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            });
            assert!(!left, "the retired keeper {pid} did not end within 5 s");
            continue;
        }
        out.push((pid, cmd));
    }
    out
}

/// Run locks under the home that some process holds.
fn held_run_locks(env: &Env) -> Vec<PathBuf> {
    use std::os::fd::AsRawFd;
    let mut held = vec![];
    if let Ok(rd) = std::fs::read_dir(env.home().join("locks")) {
        for e in rd.flatten() {
            let Ok(f) = std::fs::File::open(e.path()) else {
                continue;
            };
            // SAFETY: flock on a descriptor we own; released when `f` closes.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                held.push(e.path());
            }
        }
    }
    held
}

/// The keepers the home's kept overlays name.
fn kept_keepers(env: &Env) -> Vec<i64> {
    keeper_pids(&env.home().join("kept"), |e| e.join("kept.json"))
}

/// Keepers of retired overlays, killed and ending (`kept/.dying/*.json`).
fn dying_keepers(env: &Env) -> Vec<i64> {
    keeper_pids(&env.home().join("kept").join(".dying"), |e| e.to_path_buf())
}

/// The `keeper.pid` of the JSON file `file(entry)` for each entry of `dir`.
fn keeper_pids(dir: &Path, file: impl Fn(&Path) -> PathBuf) -> Vec<i64> {
    let mut out = vec![];
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if let Ok(text) = std::fs::read(file(&e.path()))
                && let Ok(v) = serde_json::from_slice::<Value>(&text)
                && let Some(pid) = v["keeper"]["pid"].as_i64()
            {
                out.push(pid);
            }
        }
    }
    out
}

/// Mountpoints under this test's `$AVFS_HOME`.
fn mounts_of(env: &Env) -> Vec<String> {
    let h = env.home().to_string_lossy().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|p| p.starts_with(&h))
        .map(String::from)
        .collect()
}

/// After a killed exec: within `limit`, no process of it runs and nothing is mounted.
/// Returns how long that took.
fn all_gone(env: &Env, what: &str, limit: Duration) -> Duration {
    let t0 = Instant::now();
    loop {
        let p = processes_of(env);
        let m = mounts_of(env);
        // The watchdog holds the run lock until it is done: a scan of /proc can miss it
        // while it executes itself (its environment is unreadable for that instant).
        let l = held_run_locks(env);
        if p.is_empty() && m.is_empty() && l.is_empty() {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < limit,
            "{what}: {:?} after the kill still: processes {p:?}, mounts {m:?}, held run locks {l:?}",
            t0.elapsed()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn audit_actions(env: &Env, vault: &str) -> Vec<Value> {
    env.json(&["--vault", vault, "audit", "--limit", "1000"])["entries"]
        .as_array()
        .unwrap()
        .clone()
}

fn needs_python(test: &str) -> bool {
    if !fuse_or_skip(test) {
        return false;
    }
    if std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var("AVFS_REQUIRE_FUSE").as_deref() != Ok("1"),
            "python3 is required"
        );
        eprintln!("SKIPPED {test}: python3 not installed");
        return false;
    }
    true
}

#[test]
fn kill_9_of_exec_ends_its_command_and_its_mount() {
    if !needs_python("kill_9_of_exec_ends_its_command_and_its_mount") {
        return;
    }
    let env = Env::new();
    allow_setsid(&env);
    env.ok(&["vault", "create", "v"]);
    env.ok(&["--vault", "v", "write", "/base", "base"]);
    let full = timed(
        &env,
        &[
            "--json", "--vault", "v", "exec", "--fork", "cal", "--shell", EXEC_LINE,
        ],
    );
    assert_eq!(env.cat(Some("cal"), "/out/marker"), "done\n");
    assert!(processes_of(&env).is_empty(), "{:?}", processes_of(&env));
    let mut rng = rng_for("exec");
    let mut t = Tally::default();
    let mut abandoned = 0;
    let mut slowest = Duration::ZERO;
    for round in 0..rounds() {
        let fork = format!("e{round}");
        let delay = delay_within(&mut rng, full);
        let mid = run_and_kill(
            &env,
            &[
                "--json", "--vault", "v", "exec", "--fork", &fork, "--shell", EXEC_LINE,
            ],
            delay,
        );
        if mid {
            t.killed_mid += 1;
        } else {
            t.finished_first += 1;
        }
        let what = format!("exec round {round} (killed after {} ms)", delay.as_millis());
        // Nothing of the killed exec is left: not its command, not the daemon the command
        // started with setsid, not the mount it made, not its watchdog.
        slowest = slowest.max(all_gone(&env, &what, Duration::from_secs(30)));
        let m = env.json(&["mounts"]);
        assert_eq!(m["mounts"].as_array().unwrap().len(), 0, "{what}: {m}");
        // The command may have been cut short, but the vault is consistent.
        healthy(&env, "v", &what);
        if mid {
            abandoned += audit_actions(&env, "v")
                .iter()
                .filter(|e| e["action"] == "exec.abandoned" && e["workspace"] == fork.as_str())
                .count();
        }
        // The next exec on the same fork works (and creates the fork if the kill came
        // before that).
        let r = env.run(&[
            "--json",
            "--vault",
            "v",
            "exec",
            "--fork",
            &fork,
            "--shell",
            "echo again > again.txt",
        ]);
        assert_eq!(
            r.code, 0,
            "{what}: the next exec failed:\n{}\n{}",
            r.stdout, r.stderr
        );
        let v = r.json();
        assert_eq!(v["exit_code"], 0, "{what}: {v}");
        assert_eq!(env.cat(Some(&fork), "/again.txt"), "again\n");
        let marker = env.run(&["--vault", &fork, "cat", "/out/marker"]);
        if marker.code == 0 {
            // The command ran to the end: all its files are there.
            assert_eq!(count_files(&env, &fork, "/out"), Some(301), "{what}");
            t.done += 1;
        } else {
            t.not_done += 1;
        }
        assert!(
            processes_of(&env).is_empty(),
            "{what}: {:?}",
            processes_of(&env)
        );
        assert!(mounts_of(&env).is_empty(), "{what}");
        healthy(&env, "v", &what);
    }
    report(
        &format!(
            "`exec --fork` of a command that starts a `setsid` daemon and writes 300 files in the mount (full run {} ms)",
            full.as_millis()
        ),
        rounds(),
        &format!(
            "verify + audit ok; no process (command, daemon, mount server, watchdog) and no mount left after any kill (slowest cleanup {} ms), {abandoned} `exec.abandoned` audit rows; next exec always ok; {} killed mid-run ({} finished first); command complete in {}, cut short in {}",
            slowest.as_millis(),
            t.killed_mid,
            t.finished_first,
            t.done,
            t.not_done
        ),
    );
}

/// Waits until a running command has written `file`: in a mount (the FUSE engine) or in
/// an overlay run's upper directory.
fn wait_for_file_in_mount(env: &Env, file: &str) {
    let t0 = Instant::now();
    loop {
        let m = env.json(&["mounts"]);
        let in_mount = m["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|r| r["mountpoint"].as_str())
            .any(|mp| Path::new(mp).join(file).exists());
        // A run's own upper, or its workspace's kept overlay's.
        let in_upper = |dir: &str| {
            std::fs::read_dir(env.home().join(dir)).is_ok_and(|rd| {
                rd.flatten()
                    .any(|e| e.path().join("upper").join(file).exists())
            })
        };
        let in_run = in_upper("runs") || in_upper("kept");
        if in_mount || in_run {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{file} never appeared"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `--rollback-on-failure` and `--ephemeral` keep their promise when exec is killed: the
/// watchdog restores the pre-run checkpoint or deletes the fork, and says so in the audit.
#[test]
fn kill_9_of_exec_rolls_back_or_discards_as_asked() {
    if !needs_python("kill_9_of_exec_rolls_back_or_discards_as_asked") {
        return;
    }
    let env = Env::new();
    allow_setsid(&env);
    env.ok(&["vault", "create", "v"]);
    env.ok(&["--vault", "v", "write", "/keep", "before"]);
    // `started` is written once the daemon is forked: a kill right after it appears
    // must still find processes for the watchdog to end.
    let line = "echo changed > keep; setsid sleep 600 & echo x > started; sleep 600";
    let rounds = rounds().min(5);
    for round in 0..rounds {
        let what = format!("rollback round {round}");
        let mut child = spawn(
            &env,
            &[
                "--json",
                "--vault",
                "v",
                "exec",
                "--rollback-on-failure",
                "--shell",
                line,
            ],
        );
        wait_for_file_in_mount(&env, "started");
        // SAFETY: kill(2) of our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        child.wait().unwrap();
        all_gone(&env, &what, Duration::from_secs(30));
        assert_eq!(
            env.cat(Some("v"), "/keep"),
            "before",
            "{what}: not rolled back"
        );
        assert_eq!(
            env.run(&["--vault", "v", "cat", "/started"]).code,
            1,
            "{what}: not rolled back"
        );
        let last = audit_actions(&env, "v");
        let row = last
            .iter()
            .rev()
            .find(|e| e["action"] == "exec.abandoned")
            .unwrap_or_else(|| panic!("{what}: no exec.abandoned row"));
        assert_eq!(row["detail"]["rolled_back"], true, "{what}: {row}");
        // The run's processes end with its PID namespace when exec dies (the kernel kills
        // them), or at the latest by the watchdog: none is left (all_gone above).
        assert!(row["detail"]["killed_processes"].is_u64(), "{what}: {row}");
        healthy(&env, "v", &what);
    }
    for round in 0..rounds {
        let what = format!("ephemeral round {round}");
        let mut child = spawn(
            &env,
            &[
                "--json",
                "--vault",
                "v",
                "exec",
                "--ephemeral",
                "--shell",
                line,
            ],
        );
        wait_for_file_in_mount(&env, "started");
        // SAFETY: kill(2) of our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        child.wait().unwrap();
        all_gone(&env, &what, Duration::from_secs(30));
        let list = env.json(&["vault", "list"]);
        assert_eq!(
            list["vaults"].as_array().unwrap().len(),
            1,
            "{what}: the ephemeral fork is left: {list}\nlast audit rows: {:?}\nprocesses: {:?}",
            audit_actions(&env, "v")
                .iter()
                .rev()
                .take(3)
                .collect::<Vec<_>>(),
            processes_of(&env)
        );
        healthy(&env, "v", &what);
        let row = audit_actions(&env, "v")
            .into_iter()
            .rev()
            .find(|e| e["action"] == "exec.abandoned")
            .unwrap();
        assert_eq!(row["detail"]["discarded_fork"], true, "{what}: {row}");
        assert_eq!(env.cat(Some("v"), "/keep"), "before");
    }
    report(
        "`exec --rollback-on-failure` and `exec --ephemeral` killed once the command wrote (a `setsid` daemon running)",
        rounds * 2,
        "command and daemon ended, no mount left; the checkpoint restored / the fork deleted every time, with an `exec.abandoned` audit row; verify + audit ok",
    );
}
