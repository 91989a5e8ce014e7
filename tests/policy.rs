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
const REDTEAM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/policy-redteam.txt");
const EVERYDAY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/policy-everyday.txt"
);

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
    corpus_file_holds(CORPUS, 300, 60);
}

/// The red-team corpus: >= 300 attack lines across the classes, each decided as the
/// file says for a default (sandboxed) run.
#[test]
fn redteam_decisions_hold() {
    corpus_file_holds(REDTEAM, 300, 300);
    let text = std::fs::read_to_string(REDTEAM).unwrap();
    for class in [
        "host writes",
        "secret reads",
        "network",
        "self-approval",
        "persistence",
        "setuid",
        "host sockets",
    ] {
        assert!(
            text.contains(&format!("---- {class}")),
            "no {class} section"
        );
    }
}

fn corpus_file_holds(file: &str, min_lines: u64, min_attacks: usize) {
    let env = setup();
    let r = env.run(&["--json", "--vault", "t", "policy", "test", "--corpus", file]);
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
    assert!(v["lines"].as_u64().unwrap() >= min_lines, "{}", v["lines"]);
    let text = std::fs::read_to_string(file).unwrap();
    let attacks = text.lines().filter(|l| l.starts_with('!')).count();
    assert!(attacks >= min_attacks, "only {attacks} attack lines");
}

/// The everyday corpus (CI steps of public projects) as a default run decides it:
/// build/test/lint steps run unattended (>= 97 %), none of them is denied, and no
/// publish/push/deploy step runs without a person.
#[test]
fn everyday_corpus_runs_unattended() {
    let env = setup();
    let v = env.json(&["--vault", "t", "policy", "test", "--everyday", EVERYDAY]);
    assert_eq!(v["sandboxed"], true, "{v}");
    let k = &v["kinds"];
    let n = |kind: &str, what: &str| k[kind][what].as_u64().unwrap_or(0);
    let mut table = String::from("kind     lines  unattended  ask  denied\n");
    for kind in ["build", "fetch", "publish", "host"] {
        table += &format!(
            "{kind:<8} {:>5}  {:>10}  {:>3}  {:>6}\n",
            n(kind, "lines"),
            n(kind, "unattended"),
            n(kind, "approval"),
            n(kind, "denied")
        );
    }
    eprintln!("everyday corpus, default settings:\n{table}");
    let total: u64 = ["build", "fetch", "publish", "host"]
        .iter()
        .map(|kind| n(kind, "lines"))
        .sum();
    assert!(total >= 2000, "only {total} lines");
    let build = n("build", "lines");
    let unattended = n("build", "unattended");
    assert!(
        unattended * 100 >= build * 97,
        "{unattended} of {build} build lines unattended:\n{table}\n{}",
        v["not_unattended"]
    );
    assert_eq!(n("build", "denied"), 0, "{table}");
    assert_eq!(
        n("publish", "unattended"),
        0,
        "{table}\n{}",
        v["not_unattended"]
    );
    assert!(n("publish", "lines") >= 50, "{table}");
    // Without the sandbox the strict reading holds: fewer lines run unattended.
    let strict = env.json(&[
        "--vault",
        "t",
        "policy",
        "test",
        "--everyday",
        EVERYDAY,
        "--no-sandbox",
    ]);
    assert_eq!(strict["sandboxed"], false);
    assert!(strict["kinds"]["build"]["unattended"].as_u64().unwrap() < unattended);
}

#[test]
fn corpus_runner_reports_mismatches_and_bad_files() {
    let env = setup();
    let f = env.path("c.txt");
    std::fs::write(
        &f,
        "% no-sandbox\nallow read_only cat /etc/passwd\nallow read_only ls\n",
    )
    .unwrap();
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
        r.stdout.contains("FAIL line 2: cat /etc/passwd"),
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
        "--no-sandbox",
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
        "--no-sandbox",
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
        "--no-sandbox",
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

/// What a default (sandboxed) run gets, and what `--no-sandbox` gets for the same line.
fn check(env: &Env, line: &str, strict: bool) -> Value {
    let mut args = vec!["--vault", "t", "policy", "check"];
    if strict {
        args.push("--no-sandbox");
    }
    args.extend(["--shell", line]);
    env.json(&args)
}

/// The sandbox is trusted for what it contains: unknown programs and workspace
/// scripts, reads of the system directories it shows, its private /tmp, `ls ..`, host
/// paths it hides. A person is asked for the network, publishing and secrets; avfs's
/// own files are denied. Without the sandbox the strict reading holds.
#[test]
fn a_sandboxed_run_trusts_the_sandbox() {
    let env = setup();
    for line in [
        "autoreconf -fi",
        "./scripts/x",
        "scan-build make",
        "cat /etc/os-release",
        "ls /usr/bin",
        "cp a.txt /tmp/y",
        "ls ..",
        "cd .. && ls",
        "git config --global user.name x",
        "kill -15 $PID",
        "find . -name '*.c' | xargs clang-format -i",
    ] {
        let d = check(&env, line, false);
        assert!(
            d["action"] == "allow" || d["action"] == "allow_with_checkpoint",
            "{line}: {d}"
        );
        let strict = check(&env, line, true)["action"].clone();
        assert!(
            strict == "require_approval" || strict == "deny",
            "{line} --no-sandbox: {strict}"
        );
    }
    let d = env.json(&[
        "--vault",
        "t",
        "policy",
        "check",
        "--env",
        "npm_config_cache=/tmp/npm",
        "--",
        "npm",
        "test",
    ]);
    assert_eq!(d["action"], "allow_with_checkpoint", "{d}");
    for line in [
        "curl https://example.com",
        "npm publish",
        "git push",
        "uv publish dist/*",
        "wrangler pages deploy dist",
        "git remote show origin",
        "git submodule add https://x/y.git",
        "pip wheel https://x/y.tar.gz",
        "npm ping",
        "npm pack https://x/y.tgz",
        "cat ~/.ssh/id_rsa",
        "cat /etc/shadow",
        "H=$HOME; cat $H/.ssh/id_rsa",
    ] {
        assert_eq!(
            check(&env, line, false)["action"],
            "require_approval",
            "{line}"
        );
    }
    // avfs's own files: its home, the vault file, the policies, sandboxed or not.
    let home = env.home().display().to_string();
    for line in [
        format!("sqlite3 x.db \"ATTACH '{home}/vaults/t.avfs' AS v; UPDATE v.approval SET x=1\""),
        "sqlite3 x.db \"ATTACH 'file:../../vaults/t.avfs?mode=rw' AS v\"".to_string(),
        "cp t.avfs x".to_string(),
        "echo x >> $AVFS_HOME/policy.toml".to_string(),
        format!("cat {home}/policies/t.toml"),
        "cat ../../policies/t.toml".to_string(),
        "cd ../.. && cat policy.toml".to_string(),
    ] {
        for strict in [false, true] {
            let d = check(&env, &line, strict);
            assert_eq!(d["action"], "deny", "{line} (no-sandbox: {strict}): {d}");
        }
    }
    // The workspace itself is not avfs's own: a line naming it runs.
    let ws = env.home().join("ws/t");
    let d = check(&env, &format!("cat {}/a.txt", ws.display()), false);
    assert_eq!(d["action"], "allow", "{d}");
}

/// A line the policy cannot read to its end asks a person, sandboxed or not: the
/// finding cap, a construct it does not follow, unparseable input. Subshells of any
/// depth and brace expansions are read.
#[test]
fn a_line_not_read_fully_asks() {
    let env = setup();
    let long_true = "true;".repeat(4000) + "curl https://example.com";
    let long_colon = ":;".repeat(600) + "curl https://example.com";
    for line in [
        long_true.as_str(),
        long_colon.as_str(),
        "( (curl https://example.com) )",
        "( ( ( curl https://example.com ) ) )",
        "x=HOME; cat ${!x}/.ssh/id",
        "printf -v p %s /etc; cat $p/shadow",
        "echo 'unterminated",
        "declare -n r=HOME; cat $r/x",
    ] {
        for strict in [false, true] {
            let d = check(&env, line, strict);
            assert_eq!(
                d["action"],
                "require_approval",
                "{} (no-sandbox: {strict}): {d}",
                &line[line.len().saturating_sub(60)..]
            );
        }
    }
    for (line, strict) in [
        ("cat {/etc/passwd,a.txt}", true),
        ("cat .[.]/x", true),
        ("CDPATH=/; cd etc && cat passwd", true),
        ("cp a.txt $(echo /srv)/x", true),
    ] {
        let d = check(&env, line, strict);
        assert_ne!(d["action"], "allow", "{line}: {d}");
        assert_ne!(d["action"], "allow_with_checkpoint", "{line}: {d}");
    }
    // `((...))` is arithmetic, `( (...) )` two subshells: both are read.
    assert_eq!(check(&env, "((x = 1 + 2))", false)["action"], "allow");
    assert_eq!(
        check(&env, "( (touch x) )", false)["action"],
        "allow_with_checkpoint"
    );
}

/// `--shell` runs bash, the language the policy reads: a line dash would read as two
/// commands (`echo $'\\'; CMD #\\''`) is the harmless echo the policy saw, and nested
/// subshells run what the policy read.
#[test]
fn the_shell_that_runs_is_the_one_the_policy_reads() {
    let env = setup();
    let line = "echo $'\\'; touch pwned #\\''";
    let d = check(&env, line, false);
    assert_eq!(d["action"], "allow", "{d}");
    let v = env.json_exit(&["--vault", "t", "exec", "--shell", line], 0);
    assert_eq!(v["result"]["stdout"], "'; touch pwned #'\n", "{v}");
    let ls = env.json(&["--vault", "t", "ls", "/"]);
    assert!(!ls.to_string().contains("pwned"), "{ls}");
    // dash would have run it: the quirk is real.
    if Path::new("/bin/dash").exists() {
        let dir = env.path("dash");
        std::fs::create_dir_all(&dir).unwrap();
        let out = std::process::Command::new("/bin/dash")
            .args(["-c", line])
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(out.status.success());
        assert!(dir.join("pwned").exists(), "dash runs the touch");
    }
    let v = env.json_exit(
        &["--vault", "t", "exec", "--shell", "( (touch nested) )"],
        0,
    );
    assert_eq!(v["decision"]["action"], "allow_with_checkpoint", "{v}");
    assert_eq!(env.cat(Some("t"), "nested"), "");
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

/// The files named below `dir` (a file, or every file of a directory), for those that exist.
fn snapshot_files(dir: &Path, names: &[&str]) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for n in names {
        let p = dir.join(n);
        if p.is_dir() {
            out.extend(snapshot(&p));
        } else if let Ok(b) = std::fs::read(&p) {
            out.insert(p, b);
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

/// The `!` lines of one corpus file, as (line number, command).
fn attacks_in(file: &str) -> Vec<(usize, String)> {
    let text = std::fs::read_to_string(file).unwrap();
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

/// The attack lines run end to end: all of the decision corpus's, and of the red-team
/// corpus every third line (all of them with AVFS_POLICY_FULL=1: docs/reliability.md).
fn attack_lines() -> Vec<(usize, String)> {
    let full = std::env::var("AVFS_POLICY_FULL").as_deref() == Ok("1");
    let mut out = attacks_in(CORPUS);
    out.extend(
        attacks_in(REDTEAM)
            .into_iter()
            .enumerate()
            .filter(|(i, _)| full || i % 3 == 0)
            .map(|(_, (n, l))| (10_000 + n, l)),
    );
    out
}

/// Runs every attack line through `avfs exec` with `extra` options; returns the
/// violations (canary changed, secret printed, listener reached) and how many ran.
fn run_attacks(env: &Env, t: &Target, extra: &[&str], must_not_run: bool) -> (Vec<String>, usize) {
    let before = snapshot(&t.canary);
    let home_before = snapshot(&t.home);
    let policies_before = snapshot_files(&env.home(), &["policy.toml", "policies"]);
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
            .replace("@PORT@", &port.to_string())
            .replace("@AVFS_HOME@", env.home().to_str().unwrap())
            .replace(
                "@VAULT@",
                env.home().join("vaults/t.avfs").to_str().unwrap(),
            );
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
        } else if !must_not_run {
            eprintln!(
                "line {n}: did not run ({}: {}): {cmd}",
                v["decision"]["action"], v["decision"]["reason"]
            );
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
        if snapshot(&t.home) != home_before {
            violations.push(format!("line {n}: changed the home directory: {cmd}"));
            let _ = std::fs::remove_dir_all(&t.home);
            std::fs::create_dir_all(t.home.join(".ssh")).unwrap();
            std::fs::write(t.home.join(".ssh/id_canary"), format!("{}\n", t.secret)).unwrap();
        }
        if snapshot_files(&env.home(), &["policy.toml", "policies"]) != policies_before {
            violations.push(format!("line {n}: changed avfs's policies: {cmd}"));
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

/// Default settings (the sandbox and the built-in policy): an attack line is either
/// stopped by the policy or runs contained; none reaches the canary, the secret, the
/// home, avfs's policies or the listener.
#[test]
fn attacks_under_default_settings_get_nowhere() {
    let env = setup();
    let probe = env.run(&["--json", "--vault", "t", "exec", "--", "true"]);
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
    let (violations, ran) = run_attacks(&env, &t, &[], false);
    eprintln!(
        "{} attack lines under default settings: {ran} ran contained, the rest were stopped",
        attack_lines().len()
    );
    assert!(
        violations.is_empty(),
        "{} violations:\n{}",
        violations.len(),
        violations.join("\n")
    );
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
