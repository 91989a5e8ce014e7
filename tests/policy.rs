//! The policy against its decision corpus (tests/data/policy-corpus.txt), and the corpus's
//! attack lines run for real through `avfs exec` against a canary directory on the host,
//! a fake secret in the home directory and a loopback listener: without the sandbox the
//! policy alone must stop them (nothing runs), with the sandbox (and a policy that allows
//! everything) the sandbox alone must. The driver asserts outcomes only, never how the
//! sandbox is built.

mod common;

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};

use common::Env;
use serde_json::Value;

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/policy-corpus.txt");

fn setup() -> Env {
    let env = Env::new();
    env.ok(&["vault", "create", "t"]);
    for (p, text) in [
        ("a.txt", "alpha\nbeta\n"),
        ("b.txt", "beta\ngamma\n"),
        ("build.sh", "#!/bin/sh\necho built\n"),
        ("src/main.rs", "fn main() {}\n"),
    ] {
        env.ok(&["--vault", "t", "write", "-p", p, text]);
    }
    env
}

#[test]
fn corpus_decisions_hold() {
    let env = setup();
    let r = env.run(&[
        "--json", "--vault", "t", "policy", "test", "--corpus", CORPUS,
    ]);
    let v = r.json();
    let failed = v["failed"].as_array().expect("failed is an array");
    let report: Vec<String> = failed
        .iter()
        .map(|f| {
            format!(
                "line {}: {}\n    expected {} {}, got {} {} ({}: {})",
                f["line"],
                f["command"],
                f["expected_action"],
                f["expected_category"],
                f["action"],
                f["category"],
                f["rule"],
                f["reason"]
            )
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} corpus lines decided otherwise:\n{}",
        failed.len(),
        v["lines"],
        report.join("\n")
    );
    assert_eq!(r.code, 0);
    assert!(v["lines"].as_u64().unwrap() >= 300, "{}", v["lines"]);
    // The same run in human form names the lines and the words used everywhere.
    let text = std::fs::read_to_string(CORPUS).unwrap();
    let attacks = text.lines().filter(|l| l.starts_with('!')).count();
    assert!(attacks >= 60, "only {attacks} attack lines");
}

#[test]
fn corpus_runner_reports_mismatches_and_bad_files() {
    let env = setup();
    let f = env.path("c.txt");
    std::fs::write(&f, "allow read_only cat /etc/passwd\nallow read_only ls\n").unwrap();
    let r = env.run(&[
        "--vault",
        "t",
        "policy",
        "test",
        "--corpus",
        f.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(
        r.stdout.contains("FAIL line 1: cat /etc/passwd"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("got deny host_escape_risk"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("2 lines, 1 failed"), "{}", r.stdout);
    std::fs::write(&f, "allow readonly ls\n").unwrap();
    let r = env.run(&[
        "--vault",
        "t",
        "policy",
        "test",
        "--corpus",
        f.to_str().unwrap(),
    ]);
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("line 1") && r.stderr.contains("readonly"),
        "{}",
        r.stderr
    );
}

#[test]
fn policy_check_speaks_snake_case() {
    let env = setup();
    let r = env.ok(&[
        "--vault",
        "t",
        "policy",
        "check",
        "--shell",
        "cat a.txt; cat /etc/passwd",
    ]);
    assert!(r.stdout.contains("host_escape_risk"), "{}", r.stdout);
    assert!(r.stdout.contains("read_only"), "{}", r.stdout);
    assert!(
        !r.stdout.contains("ReadOnly") && !r.stdout.contains("HostEscapeRisk"),
        "{}",
        r.stdout
    );
    // --env is classified as exec classifies it.
    let d = env.json(&[
        "--vault",
        "t",
        "policy",
        "check",
        "--env",
        "LD_PRELOAD=./x.so",
        "--",
        "ls",
    ]);
    assert_eq!(d["action"], "require_approval", "{d}");
    let d = env.json(&[
        "--vault",
        "t",
        "policy",
        "check",
        "--env",
        "PATH=/evil:/usr/bin",
        "--",
        "ls",
    ]);
    assert_eq!(d["action"], "deny", "{d}");
    // Absolute paths below the vault's stable workspace path are inside the workspace;
    // `..` out of it is not, /proc/self/root into it is.
    let ws = env.home().join("ws/t");
    let inside = format!("cat {}/a.txt", ws.display());
    let d = env.json(&["--vault", "t", "policy", "check", "--shell", &inside]);
    assert_eq!(d["action"], "allow", "{d}");
    let out = format!("cat {}/../../policy.toml", ws.display());
    let d = env.json(&["--vault", "t", "policy", "check", "--shell", &out]);
    assert_eq!(d["action"], "deny", "{d}");
    let via = format!("cat /proc/self/root{}/a.txt", ws.display());
    let d = env.json(&["--vault", "t", "policy", "check", "--shell", &via]);
    assert_eq!(d["action"], "allow", "{d}");
}

// ---------------------------------------------------------------- the attacks, for real

/// Every file under `dir` with its content (the canary's state).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                out.insert(p.clone(), b"<dir>".to_vec());
                stack.push(p);
            } else {
                out.insert(p.clone(), std::fs::read(&p).unwrap_or_default());
            }
        }
    }
    out
}

struct Target {
    canary: PathBuf,
    home: PathBuf,
    secret: String,
    listener: TcpListener,
}

impl Target {
    fn new(env: &Env) -> Target {
        let canary = env.path("canary");
        std::fs::create_dir_all(canary.join("sub")).unwrap();
        std::fs::write(canary.join("keep.txt"), "canary\n").unwrap();
        let home = env.path("userhome");
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        let secret = format!("AVFS-FAKE-SECRET-{}", std::process::id());
        std::fs::write(home.join(".ssh/id_canary"), format!("{secret}\n")).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        Target {
            canary,
            home,
            secret,
            listener,
        }
    }

    /// Connections the listener got since the last call.
    fn connections(&self) -> usize {
        let mut n = 0;
        while self.listener.accept().is_ok() {
            n += 1;
        }
        n
    }
}

fn attack_lines() -> Vec<(usize, String)> {
    let text = std::fs::read_to_string(CORPUS).unwrap();
    text.lines()
        .enumerate()
        .filter(|(_, l)| l.starts_with('!'))
        .map(|(n, l)| {
            // `! DECISION CATEGORY COMMAND`
            let rest = l[1..].trim_start();
            let mut it = rest.splitn(3, ' ');
            it.next();
            it.next();
            (n + 1, it.next().unwrap().trim().replace('↵', "\n"))
        })
        .collect()
}

/// Runs every attack line through `avfs exec` with `extra` options; returns the
/// violations (canary changed, secret printed, listener reached) and how many ran.
fn run_attacks(env: &Env, t: &Target, extra: &[&str], must_not_run: bool) -> (Vec<String>, usize) {
    let before = snapshot(&t.canary);
    let port = t.listener.local_addr().unwrap().port();
    let mut violations = Vec::new();
    let mut ran = 0;
    t.connections();
    // The driver sees a connection when there is one.
    let probe = std::net::TcpStream::connect(t.listener.local_addr().unwrap()).unwrap();
    drop(probe);
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(
        t.connections(),
        1,
        "the listener must see the driver's own connection"
    );
    for (n, line) in attack_lines() {
        let cmd = line
            .replace("@CANARY@", t.canary.to_str().unwrap())
            .replace("@PORT@", &port.to_string());
        let mut args = vec!["--json", "--vault", "t", "exec", "--timeout", "10"];
        args.extend_from_slice(extra);
        args.extend(["--shell", &cmd]);
        let out = env.cmd(&args).env("HOME", &t.home).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
            panic!("line {n}: {cmd}\nnot one JSON document ({e}): {stdout}\n{stderr}")
        });
        let code = out.status.code().unwrap_or(-1);
        if !v["result"].is_null() {
            ran += 1;
        }
        if must_not_run && (!v["result"].is_null() || !(code == 126 || code == 75)) {
            violations.push(format!(
                "line {n}: ran without approval (exit {code}, decision {}): {cmd}",
                v["decision"]["action"]
            ));
        }
        if stdout.contains(&t.secret) || stderr.contains(&t.secret) {
            violations.push(format!("line {n}: printed the secret: {cmd}"));
        }
        let c = t.connections();
        if c > 0 {
            violations.push(format!("line {n}: reached the listener {c} times: {cmd}"));
        }
        let now = snapshot(&t.canary);
        if now != before {
            violations.push(format!("line {n}: changed the canary directory: {cmd}"));
            // Restore it so the next line is judged on its own.
            let _ = std::fs::remove_dir_all(&t.canary);
            std::fs::create_dir_all(t.canary.join("sub")).unwrap();
            std::fs::write(t.canary.join("keep.txt"), "canary\n").unwrap();
        }
    }
    (violations, ran)
}

fn fuse_required() -> bool {
    std::env::var("AVFS_REQUIRE_FUSE").as_deref() == Ok("1")
}

/// True if /dev/fuse can be used; a failure when AVFS_REQUIRE_FUSE=1 says it must be.
fn fuse_usable() -> bool {
    if std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .is_ok()
    {
        return true;
    }
    assert!(
        !fuse_required(),
        "FUSE is required (AVFS_REQUIRE_FUSE=1) but /dev/fuse is unusable"
    );
    eprintln!("SKIPPED: /dev/fuse unusable");
    false
}

#[test]
fn attacks_without_the_sandbox_are_stopped_by_the_policy() {
    if !fuse_usable() {
        return;
    }
    let env = setup();
    let t = Target::new(&env);
    // The driver itself can see a violation: the same secret, read outside avfs.
    assert!(
        std::fs::read_to_string(t.home.join(".ssh/id_canary"))
            .unwrap()
            .contains(&t.secret)
    );
    let (violations, ran) = run_attacks(&env, &t, &["--no-sandbox"], true);
    assert!(
        violations.is_empty(),
        "{} violations:\n{}",
        violations.len(),
        violations.join("\n")
    );
    assert_eq!(ran, 0);
}

#[test]
fn attacks_in_the_sandbox_are_stopped_by_the_sandbox_alone() {
    let env = setup();
    // A policy that allows everything: whatever holds now is the sandbox.
    std::fs::create_dir_all(env.home().join("policies")).unwrap();
    std::fs::write(
        env.home().join("policies/t.toml"),
        "[defaults]\nread_only = \"allow\"\nmutating = \"allow\"\ndestructive = \"allow\"\n\
         networked = \"allow\"\nhost_escape_risk = \"allow\"\nunknown = \"allow\"\n",
    )
    .unwrap();
    let probe = env.run(&["--json", "--vault", "t", "exec", "--sandbox", "--", "true"]);
    if probe.code != 0 {
        assert!(
            !fuse_required(),
            "the sandbox is required (AVFS_REQUIRE_FUSE=1) but unusable: {}{}",
            probe.stdout,
            probe.stderr
        );
        eprintln!("SKIPPED: the sandbox is unusable here: {}", probe.stdout);
        return;
    }
    let t = Target::new(&env);
    let (violations, ran) = run_attacks(&env, &t, &["--sandbox"], false);
    assert!(
        violations.is_empty(),
        "{} violations:\n{}",
        violations.len(),
        violations.join("\n")
    );
    // Everything ran (the policy allowed it): the sandbox, not the policy, held.
    assert_eq!(ran, attack_lines().len());
    // And a line that must work in the sandbox does: the driver can see a success.
    let out = env
        .cmd([
            "--json",
            "--vault",
            "t",
            "exec",
            "--sandbox",
            "--shell",
            "printf sandboxed > c.txt",
        ])
        .env("HOME", &t.home)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(env.cat(Some("t"), "c.txt"), "sandboxed");
}

/// Without the sandbox the command follows the workspace's symlinks on the host: a link
/// already in the workspace (made with `avfs ln -s`, imported, checked out) must not turn
/// an ordinary-looking line into a host read or write.
#[test]
fn symlinks_in_the_workspace_do_not_lead_an_unsandboxed_run_out() {
    if !fuse_usable() {
        return;
    }
    let env = setup();
    let t = Target::new(&env);
    let secret_path = t.home.join(".ssh/id_canary");
    let secret = secret_path.to_str().unwrap();
    let canary = t.canary.to_str().unwrap();
    for (link, target) in [
        ("/hostroot", "/"),
        ("/leak", secret),
        ("/d/up", "../hostroot"),
        ("/canarylink", canary),
        ("/inner", "a.txt"),
    ] {
        env.ok(&["--vault", "t", "mkdir", "-p", "/d"]);
        env.ok(&["--vault", "t", "ln", "-s", target, link]);
    }
    let home_rel = secret.trim_start_matches('/');
    let before = snapshot(&t.canary);
    for line in [
        format!("cat hostroot{secret}"),
        "cat leak".to_string(),
        "cat ./leak".to_string(),
        "grep -h . leak a.txt".to_string(),
        format!("cd hostroot && cat {home_rel}"),
        format!("cat d/up{secret}"),
        format!("cat d/../d/up{secret}"),
        "echo x > canarylink/new".to_string(),
        "cp a.txt canarylink/".to_string(),
        "cp a.txt --target-directory=canarylink".to_string(),
        "rm -rf canarylink/sub".to_string(),
    ] {
        let out = env
            .cmd([
                "--json",
                "--vault",
                "t",
                "exec",
                "--no-sandbox",
                "--timeout",
                "10",
                "--shell",
                &line,
            ])
            .env("HOME", &t.home)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{line}: {e}"));
        assert!(
            v["result"].is_null() && out.status.code() == Some(126),
            "{line}: ran without the sandbox through a symlink of the workspace: {stdout}"
        );
        assert_eq!(v["decision"]["action"], "deny", "{line}");
        let reason = v["decision"]["reason"].as_str().unwrap();
        assert!(
            reason.contains("is a symlink to") && reason.contains("outside the workspace"),
            "{line}: the reason names the link: {reason}"
        );
        assert!(!stdout.contains(&t.secret), "{line}: printed the secret");
        assert_eq!(snapshot(&t.canary), before, "{line}: changed the canary");
    }
    // Links that stay in the workspace work as before.
    let v = env.json_exit(
        &[
            "--vault",
            "t",
            "exec",
            "--no-sandbox",
            "--shell",
            "cat inner && cat d/../inner",
        ],
        0,
    );
    assert_eq!(v["result"]["stdout"], "alpha\nbeta\nalpha\nbeta\n");
}
