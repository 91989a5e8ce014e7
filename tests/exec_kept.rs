//! The kept overlay: runs of one workspace share one overlayfs, held by a keeper process,
//! as long as nothing else moved the workspace's head. Tested as a user sees it: each
//! run's change list holds exactly its own changes, an edit made outside a run (a CLI
//! write, a restore) is seen by the next run, a run that writes a lot hands its upper
//! over as a layer, the keeper goes when its home goes or it idles, and no mount of it
//! shows on the host.

mod common;
#[path = "common/fuse.rs"]
mod fuse;
#[path = "common/overlay.rs"]
mod overlay;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::Env;
use overlay::{SH_ALLOWED as POLICY, changes, ok_in, overlay_or_skip, setup_with, stdout};
use serde_json::Value;

fn how(v: &Value) -> String {
    v["engine"]["layers"]["how"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

fn sh(env: &Env, script: &str) -> Value {
    ok_in(env, "t", &["--shell", script])
}

/// The kept overlays under the home, as (directory, keeper pid).
fn kept(env: &Env) -> Vec<(PathBuf, i64)> {
    let mut out = vec![];
    if let Ok(rd) = std::fs::read_dir(env.home().join("kept")) {
        for e in rd.flatten() {
            let Ok(text) = std::fs::read(e.path().join("kept.json")) else {
                continue;
            };
            let v: Value = serde_json::from_slice(&text).unwrap();
            out.push((e.path(), v["keeper"]["pid"].as_i64().unwrap_or(0)));
        }
    }
    out
}

fn running(pid: i64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

fn gone_within(pid: i64, limit: Duration) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if !running(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

fn host_mounts_under(dir: &Path) -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(dir.to_str().unwrap()))
        .map(String::from)
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> std::collections::BTreeSet<(String, String)> {
    list.iter()
        .map(|(k, p)| (k.to_string(), p.to_string()))
        .collect()
}

#[test]
fn runs_share_one_overlay_and_each_reports_only_its_own_changes() {
    if !overlay_or_skip("runs_share_one_overlay_and_each_reports_only_its_own_changes") {
        return;
    }
    let env = setup_with(POLICY);
    let first = sh(&env, "echo one > a && mkdir d && echo x > d/x");
    assert_eq!(
        changes(&first),
        pairs(&[("added", "/a"), ("added", "/d"), ("added", "/d/x")])
    );
    let keepers = kept(&env);
    assert_eq!(keepers.len(), 1, "{keepers:?}");
    let pid = keepers[0].1;
    assert!(running(pid), "the keeper {pid} runs after the first exec");
    // The overlay is in the keeper's namespace only.
    assert_eq!(host_mounts_under(&env.home()), Vec::<String>::new());
    // `avfs status` names the keeper, and what the upper holds (a, d, d/x: two files).
    let st = env.json(&["--vault", "t", "status"]);
    let listed = st["kept_overlays"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{st}");
    assert_eq!(listed[0]["workspace"], "main");
    assert_eq!(listed[0]["keeper_pid"].as_i64(), Some(pid));
    assert_eq!(listed[0]["upper_files"], 2, "{st}");
    assert_eq!(listed[0]["upper_bytes"], 6, "{st}");

    let second = sh(&env, "cat a && echo two >> a && rm d/x");
    assert_eq!(how(&second), "kept", "{}", second["engine"]);
    assert_eq!(stdout(&second), "one\n");
    assert_eq!(
        changes(&second),
        pairs(&[("modified", "/a"), ("deleted", "/d/x")])
    );
    assert_eq!(kept(&env)[0].1, pid, "the same keeper");

    // A run that changes nothing reports nothing, though the upper holds a and d.
    let third = sh(&env, "cat a; ls d");
    assert_eq!(how(&third), "kept");
    assert_eq!(stdout(&third), "one\ntwo\n");
    assert!(changes(&third).is_empty(), "{}", third["changes"]);
    assert_eq!(env.cat(Some("t"), "/a"), "one\ntwo\n");
    env.ok(&["--vault", "t", "vault", "verify"]);
}

#[test]
fn an_edit_outside_a_run_is_seen_by_the_next_run() {
    if !overlay_or_skip("an_edit_outside_a_run_is_seen_by_the_next_run") {
        return;
    }
    let env = setup_with(POLICY);
    sh(&env, "echo run > f");
    let old = kept(&env)[0].1;
    env.ok(&["--vault", "t", "checkpoint", "save", "c1"]);
    env.ok(&["--vault", "t", "write", "/f", "cli"]);
    let after_write = sh(&env, "cat f");
    assert_ne!(how(&after_write), "kept", "{}", after_write["engine"]);
    assert_eq!(stdout(&after_write), "cli");
    assert!(
        gone_within(old, Duration::from_secs(5)),
        "the old keeper ends"
    );

    env.ok(&["--vault", "t", "checkpoint", "restore", "c1"]);
    let after_restore = sh(&env, "cat f");
    assert_ne!(how(&after_restore), "kept");
    assert_eq!(stdout(&after_restore), "run\n");
    assert!(changes(&after_restore).is_empty());
}

#[test]
fn a_large_upper_becomes_a_layer_and_the_next_run_starts_fresh() {
    if !overlay_or_skip("a_large_upper_becomes_a_layer_and_the_next_run_starts_fresh") {
        return;
    }
    let env = setup_with(POLICY);
    let big = sh(
        &env,
        "mkdir many && cd many && i=0; while [ $i -lt 1100 ]; do echo $i > f$i; i=$((i+1)); done",
    );
    assert_eq!(big["change_summary"]["added"], 1101);
    let keeper = {
        // Retired: no kept overlay left, its keeper gone.
        let k = kept(&env);
        assert!(k.is_empty(), "{k:?}");
        big["engine"]["layers"]["depth"].as_u64().unwrap()
    };
    let next = sh(&env, "cat many/f1099");
    // The retired upper is now the layer of the root it showed: cached, one deeper.
    assert_eq!(how(&next), "cached", "{}", next["engine"]);
    assert_eq!(
        next["engine"]["layers"]["depth"].as_u64().unwrap(),
        keeper + 1
    );
    assert_eq!(stdout(&next), "1099\n");
    assert!(changes(&next).is_empty());
    // The retired keeper ended off the exec's path; the run that mounted its upper as a
    // layer waited for it first and removed what it left.
    let dying = env.home().join("kept").join(".dying");
    let left: Vec<_> = std::fs::read_dir(&dying)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn the_keeper_ends_when_its_home_goes_or_it_idles() {
    if !overlay_or_skip("the_keeper_ends_when_its_home_goes_or_it_idles") {
        return;
    }
    let env = setup_with(POLICY);
    sh(&env, "echo x > x");
    let (dir, pid) = kept(&env)[0].clone();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        gone_within(pid, Duration::from_secs(5)),
        "the keeper {pid} outlived its directory"
    );

    // Idle: a keeper unused for AVFS_KEEP_IDLE_SECS ends; the next run mounts the same
    // upper again.
    let r = env
        .cmd(["--json", "--vault", "t", "exec", "--shell", "echo y > y"])
        .env("AVFS_KEEP_IDLE_SECS", "1")
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stdout));
    let pid = kept(&env)[0].1;
    assert!(gone_within(pid, Duration::from_secs(10)), "idle keeper");
    let again = sh(&env, "cat x y");
    assert_eq!(how(&again), "remounted", "{}", again["engine"]);
    assert_eq!(stdout(&again), "x\ny\n");

    // Deleting the vault ends its keeper and its kept overlay.
    let pid = kept(&env)[0].1;
    assert!(running(pid));
    env.ok(&["vault", "delete", "t", "-y"]);
    assert!(
        gone_within(pid, Duration::from_secs(5)),
        "keeper of a deleted vault"
    );
    assert!(kept(&env).is_empty(), "{:?}", kept(&env));
}

#[test]
fn a_run_longer_than_the_idle_time_keeps_its_keeper() {
    if !overlay_or_skip("a_run_longer_than_the_idle_time_keeps_its_keeper") {
        return;
    }
    let env = setup_with(POLICY);
    let exec = |line: &str| -> Value {
        let r = env
            .cmd(["--json", "--vault", "t", "exec", "--shell", line])
            .env("AVFS_KEEP_IDLE_SECS", "2")
            .output()
            .unwrap();
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stdout));
        serde_json::from_slice(&r.stdout).unwrap()
    };
    // The keeper (idle after 2 s) must not leave under a run that lasts 5 s: the run
    // holds it from taking the overlay to its end, and the next run finds it.
    let long = exec("echo a > a; sleep 5");
    let pid = kept(&env)[0].1;
    assert!(running(pid), "the keeper {pid} left under a run");
    let next = exec("cat a");
    assert_eq!(
        how(&next),
        "kept",
        "{} after {}",
        next["engine"],
        long["engine"]
    );
    assert_eq!(kept(&env)[0].1, pid, "the same keeper");
    assert_eq!(stdout(&next), "a\n");
    // Idle, it leaves; the next run waits for it to be gone and mounts the upper again.
    assert!(gone_within(pid, Duration::from_secs(10)), "idle keeper");
    let after = exec("cat a");
    assert_eq!(how(&after), "remounted", "{}", after["engine"]);
    assert_eq!(stdout(&after), "a\n");
}

#[test]
fn without_keeping_every_run_mounts_its_own_overlay() {
    if !overlay_or_skip("without_keeping_every_run_mounts_its_own_overlay") {
        return;
    }
    let env = setup_with(POLICY);
    for i in 0..2 {
        let r = env
            .cmd(["--json", "--vault", "t", "exec", "--shell", "echo z >> z"])
            .env("AVFS_KEEP_OVERLAY", "0")
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&r.stdout).unwrap();
        assert_ne!(how(&v), "kept", "run {i}: {}", v["engine"]);
        assert!(kept(&env).is_empty());
    }
    assert_eq!(env.cat(Some("t"), "/z"), "z\nz\n");
}

/// Does the mount namespace of process `pid` show something mounted at `mp`?
fn namespaces_showing(pid: i64, mp: &Path) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(4) == mp.to_str())
}

#[test]
fn a_keeper_does_not_hold_another_homes_mount() {
    if !overlay_or_skip("a_keeper_does_not_hold_another_homes_mount") {
        return;
    }
    // A workspace mounted in one home, then a kept overlay started in another: the
    // keeper's namespace starts as a copy of the host's, FUSE mount included.
    let Some(mut m) = fuse::Mount::new("a_keeper_does_not_hold_another_homes_mount") else {
        return;
    };
    std::fs::write(m.p("f"), "mounted").unwrap();
    let env = setup_with(POLICY);
    sh(&env, "echo x > x");
    let pid = kept(&env)[0].1;
    assert!(running(pid));
    assert!(
        !namespaces_showing(pid, &m.mp),
        "the keeper {pid} holds the mount at {}",
        m.mp.display()
    );
    let server = m.env.json(&["mounts"])["mounts"][0]["pid"]
        .as_i64()
        .unwrap();

    let t0 = Instant::now();
    m.unmount();
    let took = t0.elapsed();
    eprintln!("avfs unmount with a keeper of another home alive: {took:?}");
    assert!(
        gone_within(server, Duration::from_secs(5)),
        "the mount server {server} is still running"
    );
    // Generous for a loaded machine; a held mount made `avfs unmount` wait 30 s and fail.
    assert!(took < Duration::from_secs(10), "unmount took {took:?}");
    assert_eq!(m.avfs(&["cat", "/f"]), "mounted");

    // The keeper is untouched: the next run uses it.
    assert!(running(pid));
    let next = sh(&env, "cat x");
    assert_eq!(how(&next), "kept", "{}", next["engine"]);
    assert_eq!(kept(&env)[0].1, pid, "the same keeper");
    assert_eq!(stdout(&next), "x\n");
}
