//! `kill -9` of push, fetch, clone (full and lazy) and of a lazy clone's first read, at
//! several moments, against a real S3-compatible server (moto on loopback): both sides
//! stay consistent (`vault verify`; the remote holds no ref to missing data, and a fetch
//! or clone never changes it) and running the command again finishes the job.

mod common;
#[path = "common/remote_util.rs"]
mod remote_util;
#[path = "common/s3.rs"]
mod s3;

use std::process::Stdio;
use std::time::Duration;

use common::Env;
use remote_util::{exported_equals, machine, noise, project};
use s3::S3;

/// Starts `args` in `env` and kills it (SIGKILL) after `delay_ms`, wherever it is.
fn kill_after(env: &Env, args: &[&str], delay_ms: u64) {
    let mut child = env
        .cmd(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(delay_ms));
    let _ = child.kill();
    let _ = child.wait();
}

fn verify_ok(env: &Env, vault: &str, what: &str) {
    let v = env.json(&["--vault", vault, "vault", "verify"]);
    assert_eq!(v["report"]["ok"], true, "{what}: {v}");
}

/// Every object below `prefix` on the server: key, ETag, size (what "untouched" compares).
fn remote_listing(s3: &S3, prefix: &str) -> String {
    s3.boto3(&format!(
        "keys = []\nfor page in s3.get_paginator('list_objects_v2').paginate(Bucket=bucket, Prefix='{prefix}/'):\n    keys += [(o['Key'], o['ETag'], o['Size']) for o in page.get('Contents', [])]\nprint(sorted(keys))"
    ))
}

fn registered(env: &Env, name: &str) -> bool {
    env.json(&["vault", "list"])["vaults"]
        .as_array()
        .unwrap()
        .iter()
        .any(|v| v["name"] == name)
}

#[test]
fn kill_9_during_push_and_clone_leaves_both_sides_consistent() {
    let s3 = S3::start();
    let url = s3.url("kill");
    let a = machine(&s3);
    let src = a.path("src");
    project(&src, 300);
    // Enough bytes that the push takes a while: 24 MiB of incompressible data.
    std::fs::write(src.join("noise.bin"), noise(24 << 20, 0)).unwrap();
    a.ok(&["import", src.to_str().unwrap(), "/"]);
    a.ok(&["checkpoint", "save", "v1"]);
    a.ok(&["remote", "add", "origin", &url]);
    for (round, delay) in [40u64, 150, 400].into_iter().enumerate() {
        let mut child = a
            .cmd(["--json", "push"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay));
        let _ = child.kill();
        let _ = child.wait();
        // Local side: the vault is whole.
        assert_eq!(
            a.json(&["vault", "verify"])["report"]["ok"],
            true,
            "round {round}"
        );
        // Remote side: either no ref yet, or a ref whose every object is there.
        let probe = machine(&s3);
        let r = probe.run(&["--json", "clone", &url, "p", "--full"]);
        if r.code == 0 {
            exported_equals(&probe, "p", &src);
        } else {
            assert!(
                r.stdout.contains("no workspaces yet"),
                "round {round}: {}",
                r.stdout
            );
        }
    }
    // Re-running finishes the push.
    let done = a.json(&["push"]);
    assert_ne!(done["refs"][0]["status"], "updated", "{done}");
    let probe = machine(&s3);
    probe.json(&["clone", &url, "p", "--full"]);
    exported_equals(&probe, "p", &src);
    let c = machine(&s3);
    for delay in [60u64, 250] {
        let mut child = c
            .cmd(["--json", "clone", &url, "w", "--full"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay));
        let _ = child.kill();
        let _ = child.wait();
        let list = c.json(&["vault", "list"]);
        let registered = list["vaults"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["name"] == "w");
        // A half-made clone is never registered as a vault; a small clone can finish
        // before the kill (registering is its last step), and is then whole.
        if registered {
            assert_eq!(
                c.json(&["--vault", "w", "vault", "verify"])["report"]["ok"],
                true,
                "delay {delay} ms"
            );
            exported_equals(&c, "w", &src);
            std::fs::remove_dir_all(c.path("export-w")).unwrap();
            c.ok(&["vault", "delete", "w", "-y"]);
        }
    }
    let r = c.run(&["--json", "clone", &url, "w", "--full"]);
    assert_eq!(r.code, 0, "{}", r.stdout);
    exported_equals(&c, "w", &src);
    assert_eq!(
        c.json(&["--vault", "w", "vault", "verify"])["report"]["ok"],
        true
    );
}

#[test]
fn kill_9_during_fetch_lazy_clone_and_lazy_read_leaves_both_sides_consistent() {
    let s3 = S3::start();
    let url = s3.url("killf");
    let a = machine(&s3);
    let src = a.path("src");
    project(&src, 200);
    a.ok(&["import", src.to_str().unwrap(), "/"]);
    a.ok(&["checkpoint", "save", "v1"]);
    a.ok(&["remote", "add", "origin", &url]);
    a.json(&["push"]);
    // b holds all of v1; then a pushes v2: 24 MiB more and 200 more files.
    let b = machine(&s3);
    b.json(&["clone", &url, "web", "--full"]);
    std::fs::write(src.join("noise.bin"), noise(24 << 20, 1)).unwrap();
    for i in 0..200 {
        std::fs::write(
            src.join(format!("src/m{}/g{i}.txt", i % 7)),
            format!("v2 {i}\n"),
        )
        .unwrap();
    }
    a.ok(&["import", src.to_str().unwrap(), "/"]);
    a.ok(&["checkpoint", "save", "v2"]);
    a.json(&["push"]);
    let untouched = remote_listing(&s3, "killf");

    // `fetch` killed at several moments: b's vault stays whole, the remote unchanged.
    for delay in [30u64, 120, 400] {
        kill_after(&b, &["--vault", "web", "--json", "fetch"], delay);
        verify_ok(&b, "web", &format!("fetch killed after {delay} ms"));
        assert_eq!(
            remote_listing(&s3, "killf"),
            untouched,
            "fetch wrote to the remote"
        );
    }
    // Run again, it finishes: v2 arrives whole and b reads it without the server later.
    let f = b.json(&["--vault", "web", "fetch"]);
    assert_eq!(f["refs"][0]["checkpoint"], "v2", "{f}");
    let p = b.json(&["--vault", "web", "pull"]);
    assert_eq!(p["status"], "fast_forward", "{p}");
    exported_equals(&b, "web", &src);
    verify_ok(&b, "web", "after the fetch ran again");

    // A lazy clone killed at several moments: never registered half made, whole if it
    // finished; the same command again completes it.
    let c = machine(&s3);
    for delay in [10u64, 40, 120] {
        kill_after(&c, &["--json", "clone", &url, "lazy"], delay);
        if registered(&c, "lazy") {
            verify_ok(&c, "lazy", &format!("lazy clone killed after {delay} ms"));
            c.ok(&["vault", "delete", "lazy", "-y"]);
        }
        assert_eq!(
            remote_listing(&s3, "killf"),
            untouched,
            "clone wrote to the remote"
        );
    }
    let r = c.json(&["clone", &url, "lazy"]);
    assert_eq!(r["clone"]["lazy"], true, "{r}");
    verify_ok(&c, "lazy", "the lazy clone run again");

    // Its first read of the 24 MiB file (six ranged GETs of 4 MiB, each kept as it
    // arrives) killed at several moments: the vault stays whole; reading again gives
    // the file's bytes.
    for delay in [30u64, 100, 300] {
        kill_after(&c, &["--vault", "lazy", "cat", "/noise.bin"], delay);
        verify_ok(&c, "lazy", &format!("lazy read killed after {delay} ms"));
    }
    let got = c
        .cmd(["--vault", "lazy", "cat", "/noise.bin"])
        .output()
        .unwrap();
    assert!(got.status.success());
    assert!(
        got.stdout == noise(24 << 20, 1),
        "the lazy read returned other bytes"
    );
    assert_eq!(
        remote_listing(&s3, "killf"),
        untouched,
        "a lazy read wrote to the remote"
    );
    verify_ok(&c, "lazy", "after the lazy read");
    c.ok(&["--vault", "lazy", "fetch", "--full"]);
    exported_equals(&c, "lazy", &src);
}
