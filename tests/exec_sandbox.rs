//! The sandbox of `avfs exec` end to end: the real binary, the kernel's namespaces,
//! Landlock and seccomp. Every envelope is validated against
//! `schemas/execution-envelope.schema.json`.
//!
//! The commands that try to get out are written as scripts into the workspace (or take
//! their targets from `--env`), so the policy lets them run and the kernel has to stop
//! them. Each escape is also tried without the sandbox where that is harmless, to show
//! the test would notice if the sandbox did nothing.
//!
//! Tests that run a command need the sandbox (Landlock, user or root namespaces): without
//! it they skip with a message, and with `AVFS_REQUIRE_FUSE=1` (CI) they fail.

mod common;
#[path = "common/envelope.rs"]
mod envelope;

use std::io::Write;
use std::net::TcpListener;
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{Env, Run};
use serde_json::{Value, json};

// ---------------------------------------------------------------- helpers

use envelope::assert_envelope;

fn required() -> bool {
    std::env::var("AVFS_REQUIRE_FUSE").as_deref() == Ok("1")
}

/// Why sandboxed commands cannot run here (no Landlock, no namespaces, no overlayfs), if so.
fn sandbox_probe() -> &'static Option<String> {
    static P: OnceLock<Option<String>> = OnceLock::new();
    P.get_or_init(|| {
        let env = Env::new();
        let r = env.run(&["--json", "exec", "--", "true"]);
        let v: Value = match serde_json::from_str(&r.stdout) {
            Ok(v) => v,
            Err(e) => return Some(format!("{e}: {}", r.stdout)),
        };
        if let Some(e) = v.get("error") {
            return Some(e.to_string());
        }
        if v["sandbox"]["enforced"] != true {
            return Some(format!("exec ran unconfined: {}", v["sandbox"]));
        }
        None
    })
}

/// True when the test may run sandboxed commands; fails it under `AVFS_REQUIRE_FUSE=1`.
fn can_sandbox(test: &str) -> bool {
    match sandbox_probe() {
        None => true,
        Some(why) => {
            if required() {
                panic!("{test}: the sandbox is required (AVFS_REQUIRE_FUSE=1), but: {why}");
            }
            eprintln!("SKIPPED {test}: {why}");
            false
        }
    }
}

/// A private `$AVFS_HOME` with a vault `t` holding `a.txt`.
fn setup() -> Env {
    let env = Env::new();
    env.ok(&["vault", "create", "t"]);
    env.ok(&["--vault", "t", "write", "a.txt", "hi\n"]);
    env
}

fn write(env: &Env, path: &str, text: &str) {
    env.ok(&["--vault", "t", "write", "-p", path, text]);
}

fn policy(env: &Env, text: &str) {
    std::fs::write(env.home().join("policy.toml"), text).unwrap();
}

struct Exec {
    code: i32,
    env: Value,
    run: Run,
}

/// `avfs --json --vault t exec ARGS...` with extra variables for avfs itself: checks
/// that stdout is one valid envelope whose exit_code is the exit status, and that no
/// exec mount is left behind.
fn exec_with(env: &Env, vars: &[(&str, &str)], args: &[&str]) -> Exec {
    let mut a = vec!["--json", "--vault", "t", "exec"];
    a.extend_from_slice(args);
    let mut cmd = env.cmd(&a);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
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
    assert_eq!(run.code, v["exit_code"].as_i64().unwrap() as i32, "{v}");
    if let Ok(rd) = std::fs::read_dir(env.home().join("run/exec")) {
        let left: Vec<_> = rd.map(|e| e.unwrap().path()).collect();
        assert!(left.is_empty(), "exec left mountpoints behind: {left:?}");
    }
    Exec {
        code: run.code,
        env: v,
        run,
    }
}

fn exec(env: &Env, args: &[&str]) -> Exec {
    exec_with(env, &[], args)
}

fn stdout(x: &Exec) -> &str {
    x.env["result"]["stdout"].as_str().unwrap()
}

fn assert_sandboxed(e: &Value, network: bool) {
    let sb = &e["sandbox"];
    assert_eq!(sb["enforced"], true, "{e}");
    assert_eq!(sb["network"], network, "{e}");
    let writable: Vec<&str> = sb["writable_paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(
        writable,
        [e["workspace_path"].as_str().unwrap(), "/tmp", "/dev/shm"],
        "{e}"
    );
    assert!(
        sb["mechanism"].as_str().unwrap().contains("landlock"),
        "{e}"
    );
}

fn audit_run(env: &Env, id: &str) -> Value {
    env.json(&["--vault", "t", "audit"])["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["action"] == "exec.run" && a["detail"]["id"] == id)
        .unwrap_or_else(|| panic!("no exec.run audit entry for {id}"))["detail"]
        .clone()
}

/// PIDs of host processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) {
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if text.contains(marker) {
                out.push(pid);
            }
        }
    }
    out
}

// ---------------------------------------------------------------- the file system

/// The workspace, a private /tmp and /dev/shm are the only writable places; the host
/// outside them is read-only or absent, and the envelope and audit log say so.
#[test]
fn writing_outside_the_workspace_fails() {
    if !can_sandbox("writing_outside_the_workspace_fails") {
        return;
    }
    let env = setup();
    env.allow_all_policy("t");
    let host_dir = env.path("host");
    std::fs::create_dir_all(&host_dir).unwrap();
    let host_file = host_dir.join("escape.txt");
    let tmp_marker = format!("/tmp/avfs-sandbox-{}", std::process::id());
    let etc_marker = format!("/etc/avfs-sandbox-{}", std::process::id());
    // Each attempt prints ok or FAILED; the targets come from the environment, so the
    // policy does not see them.
    write(
        &env,
        "escape.sh",
        r#"try() { if sh -c "$2" 2>/dev/null; then echo "$1 ok"; else echo "$1 FAILED"; fi; }
try workspace 'echo in > inside.txt'
try host-dir 'echo out > "$HOST_FILE"'
try etc 'echo out > "$ETC_FILE"'
try usr 'touch /usr/avfs-sandbox-escape'
try home 'touch "$HOME/avfs-sandbox-escape"'
try root 'touch /avfs-sandbox-escape'
try tmp 'echo t > "$TMP_FILE" && test -s "$TMP_FILE"'
try shm 'echo s > /dev/shm/x'
try mkdir-root 'mkdir /newdir'
try remount 'mount -o remount,rw /usr'
try mknod 'mknod disk b 254 0'
try sysctl 'v=$(cat /proc/sys/kernel/core_pattern) && echo "$v" > /proc/sys/kernel/core_pattern'
"#,
    );
    let vars = [
        format!("HOST_FILE={}", host_file.display()),
        format!("ETC_FILE={etc_marker}"),
        format!("TMP_FILE={tmp_marker}"),
    ];
    let mut args: Vec<&str> = vec!["--sandbox"];
    for v in &vars {
        args.extend(["--env", v]);
    }
    args.extend(["--", "sh", "escape.sh"]);
    let x = exec(&env, &args);
    assert_eq!(x.code, 0, "{}", x.env);
    assert_eq!(
        stdout(&x),
        "workspace ok\nhost-dir FAILED\netc FAILED\nusr FAILED\nhome FAILED\nroot FAILED\n\
         tmp ok\nshm ok\nmkdir-root FAILED\nremount FAILED\nmknod FAILED\nsysctl FAILED\n",
        "{}",
        x.env
    );
    assert!(
        !host_file.exists(),
        "the sandbox wrote {}",
        host_file.display()
    );
    assert!(!Path::new(&etc_marker).exists());
    assert!(
        !Path::new(&tmp_marker).exists(),
        "the sandbox's /tmp is the host's"
    );
    assert!(!Path::new("/usr/avfs-sandbox-escape").exists());
    // What changed in the workspace is reported as usual.
    let changed: Vec<&str> = x.env["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert_eq!(changed, ["/inside.txt"], "{}", x.env);
    assert_eq!(env.cat(Some("t"), "inside.txt"), "in\n");
    assert_sandboxed(&x.env, false);
    let sb = &x.env["sandbox"];
    assert!(sb["network_granted_by"].is_null());
    let ro: Vec<&str> = sb["read_only_paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert!(ro.contains(&"/usr"), "{ro:?}");
    assert!(
        !ro.iter()
            .any(|p| Path::new(&std::env::var("HOME").unwrap_or("/root".into())).starts_with(p)),
        "the home directory (or a directory above it) is visible: {ro:?}"
    );
    assert_eq!(x.env["request"]["options"]["sandbox"], true);
    // No capability that could undo the sandbox: CAP_SYS_ADMIN (mount), CAP_MKNOD,
    // CAP_DAC_READ_SEARCH (open_by_handle_at), CAP_SYS_MODULE, CAP_SYS_PTRACE, CAP_NET_ADMIN.
    let x = exec(
        &env,
        &["--sandbox", "--", "grep", "CapEff", "/proc/self/status"],
    );
    let caps = stdout(&x)
        .lines()
        .find_map(|l| l.split("CapEff:").nth(1))
        .map(|h| u64::from_str_radix(h.trim(), 16).unwrap())
        .unwrap_or_else(|| panic!("no CapEff: {}", x.env));
    for (name, bit) in [
        ("CAP_DAC_READ_SEARCH", 2),
        ("CAP_NET_ADMIN", 12),
        ("CAP_SYS_MODULE", 16),
        ("CAP_SYS_PTRACE", 19),
        ("CAP_SYS_ADMIN", 21),
        ("CAP_MKNOD", 27),
    ] {
        assert_eq!(caps & (1 << bit), 0, "{name} in the sandbox: {caps:x}");
    }
    // Root may still manage ownership inside the workspace (tar, package managers).
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let x = exec(
            &env,
            &[
                "--sandbox",
                "--shell",
                "touch owned && chown 1234:1234 owned",
            ],
        );
        assert_eq!(x.code, 0, "{}", x.env);
    }
    // The audit log records the same sandbox.
    let id = x.env["id"].as_str().unwrap();
    assert_eq!(audit_run(&env, id)["sandbox"], x.env["sandbox"]);
    // Without the sandbox the same script does write the host file: the test is real.
    let mut args: Vec<&str> = vec!["--no-sandbox"];
    for v in &vars[..1] {
        args.extend(["--env", v]);
    }
    args.extend(["--", "sh", "-c", "echo out > \"$HOST_FILE\""]);
    let x = exec(&env, &args);
    assert_eq!(x.code, 0, "{}", x.env);
    assert_eq!(std::fs::read_to_string(&host_file).unwrap(), "out\n");
    let sb = &x.env["sandbox"];
    assert_eq!(sb["enforced"], false);
    assert_eq!(sb["writable_paths"], json!(["/"]));
}

/// `~/.ssh` (and other secrets) cannot be read: the home directory is absent by
/// default, and secrets stay hidden when a policy shows the home directory read-only.
#[test]
fn reading_home_secrets_fails() {
    if !can_sandbox("reading_home_secrets_fails") {
        return;
    }
    let env = setup();
    env.allow_all_policy("t");
    let home = env.path("userhome");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::create_dir_all(home.join(".aws")).unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), "SECRET-KEY\n").unwrap();
    std::fs::write(home.join(".aws/credentials"), "SECRET-AWS\n").unwrap();
    std::fs::write(home.join(".netrc"), "SECRET-NETRC\n").unwrap();
    std::fs::write(home.join("notes.txt"), "plain notes\n").unwrap();
    let home_s = home.to_str().unwrap();
    let vars = [("HOME", home_s)];
    write(
        &env,
        "peek.sh",
        r#"for f in .ssh/id_ed25519 .aws/credentials .netrc notes.txt; do
  if c=$(cat "$HOME/$f" 2>/dev/null); then echo "$f: $c"; else echo "$f: unreadable"; fi
done
ls -A "$HOME/.ssh" 2>/dev/null | wc -l
"#,
    );
    // Without the sandbox every file is readable (so the test can tell).
    let x = exec_with(&env, &vars, &["--no-sandbox", "--", "sh", "peek.sh"]);
    assert_eq!(
        stdout(&x),
        ".ssh/id_ed25519: SECRET-KEY\n.aws/credentials: SECRET-AWS\n.netrc: SECRET-NETRC\n\
         notes.txt: plain notes\n1\n"
    );
    // Default sandbox: the home directory is not there at all.
    let x = exec_with(&env, &vars, &["--sandbox", "--", "sh", "peek.sh"]);
    assert_eq!(x.code, 0, "{}", x.env);
    assert_eq!(
        stdout(&x),
        ".ssh/id_ed25519: unreadable\n.aws/credentials: unreadable\n.netrc: unreadable\n\
         notes.txt: unreadable\n0\n",
        "{}",
        x.env
    );
    // A policy that shows the whole home directory still hides the secrets.
    policy(&env, "[sandbox]\nextra_read_only_paths = [\"~\"]\n");
    let x = exec_with(&env, &vars, &["--sandbox", "--", "sh", "peek.sh"]);
    assert_eq!(
        stdout(&x),
        ".ssh/id_ed25519: unreadable\n.aws/credentials: unreadable\n.netrc: unreadable\n\
         notes.txt: plain notes\n0\n",
        "{}",
        x.env
    );
    let hidden = x.env["sandbox"]["hidden_paths"].as_array().unwrap().clone();
    for s in [".ssh", ".aws", ".netrc"] {
        let p = home.join(s).display().to_string();
        assert!(hidden.contains(&json!(p)), "{p} not in {hidden:?}");
    }
    // Nor can it write there.
    let x = exec_with(
        &env,
        &vars,
        &["--sandbox", "--", "sh", "-c", "echo x >> notes.txt"],
    );
    assert_eq!(x.code, 0, "writes inside the workspace: {}", x.env);
    write(&env, "w.sh", "echo x >> \"$HOME/notes.txt\"\n");
    let x = exec_with(&env, &vars, &["--sandbox", "--", "sh", "w.sh"]);
    assert_ne!(x.code, 0, "{}", x.env);
    assert_eq!(
        std::fs::read_to_string(home.join("notes.txt")).unwrap(),
        "plain notes\n"
    );
}

// ---------------------------------------------------------------- the network

/// A server on the host's loopback that answers every connection with "pong".
fn pong_server() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let _ = s.write_all(b"pong\n");
        }
    });
    port
}

const NET_SCRIPT: &str = r#"import socket, sys
try:
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
    print("connected:", s.recv(16).decode().strip())
except OSError as e:
    print("no connection:", type(e).__name__)
"#;

fn connected(x: &Exec) -> bool {
    let out = stdout(x);
    assert!(
        out.starts_with("connected: pong") || out.starts_with("no connection"),
        "unexpected output: {}\n{}",
        x.env,
        x.run.stderr
    );
    out.starts_with("connected: pong")
}

/// No network in the sandbox, unless the command was an approved networked one, a rule
/// grants it, or the policy gives it to every sandboxed command.
#[test]
fn loopback_is_unreachable_without_network_and_reachable_when_approved() {
    if !can_sandbox("loopback_is_unreachable_without_network_and_reachable_when_approved") {
        return;
    }
    let env = setup();
    let port = pong_server().to_string();
    write(&env, "net.py", NET_SCRIPT);
    // python3 is "mutating" by default: it runs without approval.
    let x = exec(&env, &["--no-sandbox", "--", "python3", "net.py", &port]);
    assert!(connected(&x), "without the sandbox the server is reachable");
    let x = exec(&env, &["--sandbox", "--", "python3", "net.py", &port]);
    assert_eq!(x.code, 0, "{}", x.env);
    assert!(!connected(&x), "the sandbox reached the host's loopback");
    assert_sandboxed(&x.env, false);
    // The script as a networked command: it needs approval, and once approved it runs
    // in the sandbox with the network.
    policy(
        &env,
        "[[rule]]\nname = \"net-script\"\nprogram = \"python3\"\nargs = [\"net.py\", \"**\"]\ncategory = \"networked\"\n",
    );
    let x = exec(&env, &["--sandbox", "--", "python3", "net.py", &port]);
    assert_eq!(x.code, 75, "{}", x.env);
    assert!(x.env["result"].is_null());
    assert_eq!(x.env["sandbox"]["enforced"], false, "nothing ran");
    assert_eq!(x.env["request"]["options"]["sandbox"], true);
    let id = x.env["approval"]["id"].as_str().unwrap().to_string();
    env.ok(&["--vault", "t", "approve", &id]);
    let x = exec(&env, &["--approve", &id]);
    assert_eq!(x.code, 0, "{}", x.env);
    assert!(
        connected(&x),
        "the approved networked command had no network"
    );
    assert_sandboxed(&x.env, true);
    assert_eq!(
        x.env["sandbox"]["network_granted_by"],
        format!("approval {id}")
    );
    // Approved, but not networked (an unknown program a rule asks for): no network.
    policy(
        &env,
        "[[rule]]\nname = \"net-script\"\nprogram = \"python3\"\nargs = [\"net.py\", \"**\"]\ncategory = \"unknown\"\ndecision = \"require_approval\"\n",
    );
    let x = exec(&env, &["--sandbox", "--", "python3", "net.py", &port]);
    assert_eq!(x.code, 75, "{}", x.env);
    let id = x.env["approval"]["id"].as_str().unwrap().to_string();
    env.ok(&["--vault", "t", "approve", &id]);
    let x = exec(&env, &["--approve", &id]);
    assert!(
        !connected(&x),
        "an approved command that is not networked got the network"
    );
    // A rule grants the network without approval.
    policy(
        &env,
        "[[rule]]\nname = \"local-service\"\nprogram = \"python3\"\nargs = [\"net.py\", \"**\"]\ncategory = \"networked\"\ndecision = \"allow\"\nnetwork = true\n",
    );
    let x = exec(&env, &["--sandbox", "--", "python3", "net.py", &port]);
    assert!(connected(&x), "the rule's network grant was ignored");
    assert_eq!(x.env["sandbox"]["network_granted_by"], "rule local-service");
    // The same rule without the grant: allowed, but no network.
    policy(
        &env,
        "[[rule]]\nname = \"local-service\"\nprogram = \"python3\"\nargs = [\"net.py\", \"**\"]\ncategory = \"networked\"\ndecision = \"allow\"\n",
    );
    let x = exec(&env, &["--sandbox", "--", "python3", "net.py", &port]);
    assert_eq!(x.env["decision"]["action"], "allow");
    assert!(
        !connected(&x),
        "allowed is not the same as granted the network"
    );
    // The policy grants it to every sandboxed command.
    policy(&env, "[sandbox]\nnetwork = true\n");
    let x = exec(&env, &["--sandbox", "--", "python3", "net.py", &port]);
    assert!(connected(&x));
    assert_eq!(x.env["sandbox"]["network_granted_by"], "policy");
}

/// In the sandbox, 127.0.0.1 is the workspace's own network namespace (shared with its
/// services), not the host's: a loopback-only client runs unattended there and reaches
/// nothing of the host, a listener on the host's loopback included. Without the sandbox
/// the same line is the host's loopback, and asks a person.
#[test]
fn a_loopback_client_runs_unattended_in_the_sandbox_and_reaches_nothing_of_the_host() {
    if !can_sandbox(
        "a_loopback_client_runs_unattended_in_the_sandbox_and_reaches_nothing_of_the_host",
    ) {
        return;
    }
    let env = setup();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let url = format!("http://127.0.0.1:{}/x", addr.port());
    let curl = ["curl", "-s", "--max-time", "5", url.as_str()];
    let mut args = vec!["--"];
    args.extend(curl);
    let x = exec(&env, &args);
    assert_eq!(
        x.env["decision"]["action"], "allow_with_checkpoint",
        "{}",
        x.env
    );
    assert!(!x.env["result"].is_null(), "{}", x.env);
    assert_sandboxed(&x.env, false);
    // curl could not connect (7): nothing listens on the workspace's loopback.
    assert_eq!(x.code, 7, "{}", x.env);
    assert!(
        listener.accept().is_err(),
        "a default run reached the host's loopback listener"
    );
    // --no-sandbox: the host's loopback; the policy asks, nothing runs.
    let mut args = vec!["--no-sandbox", "--"];
    args.extend(curl);
    let x = exec(&env, &args);
    assert_eq!(x.env["decision"]["action"], "require_approval", "{}", x.env);
    assert!(x.env["result"].is_null(), "{}", x.env);
    assert!(listener.accept().is_err(), "an unapproved run connected");
    // The listener does see a connection when there is one (the test can fail).
    drop(std::net::TcpStream::connect(addr).unwrap());
    let until = Instant::now() + Duration::from_secs(10);
    while listener.accept().is_err() {
        assert!(Instant::now() < until, "the listener never saw the driver");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A command found through a version manager's shim (pyenv's `python3`, which runs
/// `$PYENV_ROOT/libexec/pyenv`) runs in the sandbox when `HOME` is elsewhere: the
/// manager's tree is shown with its PATH entry, not only `~/.pyenv` (issue 29: the
/// services example exited 127 under the docs tests' fresh HOME).
#[test]
fn a_version_managers_shim_runs_when_home_is_elsewhere() {
    if !can_sandbox("a_version_managers_shim_runs_when_home_is_elsewhere") {
        return;
    }
    let env = setup();
    let home = env.path("elsewhere");
    std::fs::create_dir_all(&home).unwrap();
    let x = exec_with(
        &env,
        &[("HOME", home.to_str().unwrap())],
        &["--", "python3", "-c", "print(1)"],
    );
    assert_eq!(x.code, 0, "{}\n{}", x.env, x.run.stderr);
    assert_eq!(stdout(&x), "1\n", "{}", x.env);
}

// ---------------------------------------------------------------- tools

/// git, cargo and node work inside the sandbox, in the mounted workspace.
#[test]
fn git_cargo_and_node_work_inside() {
    if !can_sandbox("git_cargo_and_node_work_inside") {
        return;
    }
    let env = setup();
    let ident = [
        "--env",
        "GIT_AUTHOR_NAME=a",
        "--env",
        "GIT_AUTHOR_EMAIL=a@example.com",
        "--env",
        "GIT_COMMITTER_NAME=a",
        "--env",
        "GIT_COMMITTER_EMAIL=a@example.com",
    ];
    let mut args = vec!["--sandbox"];
    args.extend(ident);
    args.extend([
        "--shell",
        "git init -q && git add a.txt && git commit -qm first && git log --format=%s",
    ]);
    let x = exec(&env, &args);
    assert_eq!(x.code, 0, "{}\n{}", x.env, x.run.stderr);
    assert_eq!(stdout(&x), "first\n");
    assert_sandboxed(&x.env, false);
    let x = exec(&env, &["--sandbox", "--", "git", "status", "--short"]);
    assert_eq!(x.code, 0, "{}", x.env);
    // cargo: a fresh crate, built offline (no dependencies) into the workspace.
    write(
        &env,
        "hello/Cargo.toml",
        "[package]\nname = \"hello\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    );
    write(
        &env,
        "hello/src/main.rs",
        "fn main() { println!(\"hello from the sandbox\"); }\n",
    );
    let x = exec(
        &env,
        &[
            "--sandbox",
            "--cwd",
            "hello",
            "--",
            "cargo",
            "run",
            "--offline",
            "-q",
        ],
    );
    assert_eq!(x.code, 0, "{}\n{}", x.env, x.run.stderr);
    assert_eq!(stdout(&x), "hello from the sandbox\n");
    assert!(
        x.env["changes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["path"] == "/hello/target/debug/hello"),
        "the build output is in the workspace"
    );
    // node: a script that reads and writes workspace files.
    write(
        &env,
        "script.js",
        "const fs = require('fs');\nconst t = fs.readFileSync('a.txt', 'utf8');\n\
         fs.writeFileSync('from-node.txt', t.toUpperCase());\nconsole.log('node', process.version.startsWith('v'));\n",
    );
    let x = exec(&env, &["--sandbox", "--", "node", "script.js"]);
    assert_eq!(x.code, 0, "{}\n{}", x.env, x.run.stderr);
    assert_eq!(stdout(&x), "node true\n");
    assert_eq!(env.cat(Some("t"), "from-node.txt"), "HI\n");
}

// ---------------------------------------------------------------- processes

/// Everything the command started is gone when exec returns: background jobs, a
/// process in a new session (setsid) and one that ignores SIGTERM.
#[test]
fn a_process_left_running_is_gone_when_exec_returns() {
    if !can_sandbox("a_process_left_running_is_gone_when_exec_returns") {
        return;
    }
    let env = setup();
    env.allow_all_policy("t");
    let tag = format!(
        "{}.{}",
        4000 + std::process::id() % 1000,
        std::process::id()
    );
    write(
        &env,
        "leave.sh",
        &format!(
            "sleep {tag}1 &\nsetsid sleep {tag}2 &\nnohup sh -c 'trap \"\" TERM; sleep {tag}3' >/dev/null 2>&1 &\n\
             sleep 0.3\necho started\n"
        ),
    );
    let t = Instant::now();
    let x = exec(&env, &["--sandbox", "--", "sh", "leave.sh"]);
    assert_eq!(x.code, 0, "{}", x.env);
    assert_eq!(stdout(&x), "started\n");
    assert_eq!(x.env["result"]["lingering_processes_killed"], true);
    // The command's duration, not the grace period of what it left behind.
    let ms = x.env["result"]["duration_ms"].as_u64().unwrap();
    assert!((300..1900).contains(&ms), "duration_ms {ms}");
    let left = processes_with(&tag);
    assert!(left.is_empty(), "processes outlived exec: {left:?}");
    // The one that ignores SIGTERM got the grace period, then SIGKILL.
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    // Without the sandbox the setsid one leaves the process group: the run's PID
    // namespace ends it too, and it is reported.
    let x = exec(&env, &["--no-sandbox", "--", "sh", "leave.sh"]);
    assert_eq!(x.code, 0);
    let left = processes_with(&tag);
    for pid in &left {
        // SAFETY: ending a process this test started.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    assert!(left.is_empty(), "processes outlived exec: {left:?}");
    let escaped = x.env["result"]["escaped_processes"].as_array().unwrap();
    assert!(
        escaped.iter().any(|p| p["command"]
            .as_str()
            .unwrap_or("")
            .contains(&format!("{tag}2"))),
        "{escaped:?}"
    );
}

/// Exit codes, signals, timeouts and missing programs are reported as without the
/// sandbox.
#[test]
fn status_and_timeouts_are_exact_in_the_sandbox() {
    if !can_sandbox("status_and_timeouts_are_exact_in_the_sandbox") {
        return;
    }
    let env = setup();
    env.allow_all_policy("t");
    write(&env, "k.sh", "kill -9 $$\n");
    for sandbox in [false, true] {
        let with = |args: &[&str]| {
            let mut a = if sandbox { vec!["--sandbox"] } else { vec![] };
            a.extend_from_slice(args);
            exec(&env, &a)
        };
        let x = with(&["--", "sh", "-c", "exit 7"]);
        assert_eq!(x.code, 7, "{}", x.env);
        assert_eq!(x.env["result"]["exit_code"], 7);
        let x = with(&["--", "sh", "k.sh"]);
        assert_eq!(x.code, 137, "{}", x.env);
        assert!(x.env["result"]["exit_code"].is_null(), "{}", x.env);
        assert_eq!(x.env["result"]["signal"], 9);
        let x = with(&["--timeout", "0.3", "--", "sleep", "30"]);
        assert_eq!(x.code, 124, "{}", x.env);
        assert_eq!(x.env["result"]["timed_out"], true);
        assert_eq!(x.env["result"]["signal"], 15, "SIGTERM reached the command");
        let t = Instant::now();
        let x = with(&[
            "--timeout",
            "0.3",
            "--shell",
            "trap 'echo term; exit 3' TERM; sleep 30 & wait",
        ]);
        assert_eq!(x.code, 124, "{}", x.env);
        assert_eq!(x.env["result"]["exit_code"], 3, "{}", x.env);
        assert_eq!(stdout(&x), "term\n");
        assert!(t.elapsed() < Duration::from_secs(5));
        // A program that does not exist: 127, like a shell.
        std::fs::write(
            env.home().join("policy.toml"),
            "[[rule]]\nname = \"missing\"\nprogram = \"no-such-tool-*\"\ncategory = \"mutating\"\n",
        )
        .unwrap();
        let x = with(&["--", "no-such-tool-xyz"]);
        assert_eq!(x.code, 127, "{}", x.env);
        assert!(
            x.env["result"]["stderr"]
                .as_str()
                .unwrap()
                .contains("no-such-tool-xyz")
        );
        std::fs::remove_file(env.home().join("policy.toml")).unwrap();
    }
    // The environment is an allow-list plus AVFS_* and --env.
    let x = exec_with(
        &env,
        &[("AVFS_TEST_SECRET_TOKEN", "s3cret"), ("LC_TIME", "C")],
        &["--sandbox", "--env", "MINE=1", "--", "env"],
    );
    let out = stdout(&x);
    assert!(!out.contains("s3cret"), "{out}");
    for want in [
        "MINE=1",
        "LC_TIME=C",
        "AVFS_VAULT=t",
        "AVFS_EXEC_ID=ex-",
        "PATH=",
    ] {
        assert!(out.contains(want), "{want} missing:\n{out}");
    }
    assert!(!out.contains("AVFS_HOME="), "{out}");
}

/// A descriptor avfs inherited (here: a host directory) does not get into the sandbox,
/// where it would be a way out.
#[test]
fn inherited_descriptors_stay_outside() {
    if !can_sandbox("inherited_descriptors_stay_outside") {
        return;
    }
    let env = setup();
    env.allow_all_policy("t");
    let host = env.path("host");
    std::fs::create_dir_all(&host).unwrap();
    std::fs::write(host.join("outside.txt"), "outside\n").unwrap();
    let dir = std::fs::File::open(&host).unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&dir);
    // SAFETY: clearing close-on-exec of our own descriptor, so avfs inherits it.
    unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
    write(
        &env,
        "fd.sh",
        "if cat \"/proc/self/fd/$FD/outside.txt\" 2>/dev/null; then :; else echo no; fi\n",
    );
    let fd_s = format!("FD={fd}");
    // The descriptor reaches avfs (the test is real: avfs itself can read through it)...
    let through = std::fs::read_to_string(format!("/proc/self/fd/{fd}/outside.txt")).unwrap();
    assert_eq!(through, "outside\n");
    // ...but no run gets it, with or without the sandbox.
    let plain = exec(&env, &["--no-sandbox", "--env", &fd_s, "--", "sh", "fd.sh"]);
    let boxed = exec(&env, &["--sandbox", "--env", &fd_s, "--", "sh", "fd.sh"]);
    drop(dir);
    assert_eq!(stdout(&plain), "no\n", "{}", plain.env);
    assert_eq!(stdout(&boxed), "no\n", "{}", boxed.env);
}

// ---------------------------------------------------------------- settings and errors

/// A run that cannot be set up is an error, never a run without the sandbox, and the
/// command did not run; an approval is not used up by a run that never got to start.
#[test]
fn a_run_that_cannot_be_set_up_is_an_error() {
    if !can_sandbox("a_run_that_cannot_be_set_up_is_an_error") {
        return;
    }
    let env = setup();
    // The workspace path is a file: the run's mount cannot be made.
    let file = env.path("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    env.json(&["vault", "set-path", "--name", "t", file.to_str().unwrap()]);
    // (Without the sandbox: in the sandbox the path, below /tmp, would be in the run's
    // own /tmp, where a directory can be made.)
    let out = env
        .cmd([
            "--json",
            "--vault",
            "t",
            "exec",
            "--no-sandbox",
            "--",
            "touch",
            "x",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["kind"], "sandbox_unavailable", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not-a-dir"),
        "{v}"
    );
    assert_eq!(
        env.run(&["--vault", "t", "cat", "/x"]).code,
        1,
        "the command ran"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
    assert!(
        std::fs::read_dir(env.home().join("runs")).map_or(true, |mut d| d.next().is_none()),
        "a run directory is left"
    );
}

/// `[sandbox] default = true` makes it the default, `--no-sandbox` turns it off, and
/// `required = true` refuses `--no-sandbox`. Malformed settings are errors.
#[test]
fn policy_settings_make_the_sandbox_the_default() {
    let env = setup();
    // Denied commands need no sandbox: the envelope still has `sandbox`.
    let x = exec(&env, &["--sandbox", "--shell", "sudo cat /etc/passwd"]);
    assert_eq!(x.code, 126);
    assert_eq!(
        x.env["sandbox"],
        json!({"enforced": false, "mechanism": "none", "network": false, "network_granted_by": null,
               "writable_paths": [], "read_only_paths": [], "hidden_paths": []})
    );
    policy(&env, "[sandbox]\nrequired = true\n");
    let err = env.json_err(&["--vault", "t", "exec", "--no-sandbox", "--", "true"], 1);
    assert_eq!(err["kind"], "refused", "{err}");
    assert!(err["message"].as_str().unwrap().contains("required"));
    for bad in [
        "[sandbox]\nread_only_paths = [\"relative/dir\"]\n",
        "[sandbox]\nextra_read_only_paths = [\"/a/../etc\"]\n",
        "[sandbox]\nhidden_paths = [\"$PATH\"]\n",
        "[sandbox]\nnetwork = \"yes\"\n",
        "[sandbox]\nunknown = 1\n",
        "[[rule]]\nname = \"x\"\nprogram = \"x\"\ncategory = \"mutating\"\nnetwork = \"yes\"\n",
    ] {
        policy(&env, bad);
        let err = env.json_err(&["--vault", "t", "exec", "--", "true"], 1);
        assert_eq!(err["kind"], "invalid_argument", "{bad}: {err}");
    }
    policy(
        &env,
        "[sandbox]\ndefault = true\nextra_read_only_paths = [\"/srv\"]\nenv = [\"MY_*\"]\n",
    );
    let show = env.json(&["--vault", "t", "policy", "show"]);
    assert_eq!(show["sandbox"]["default"], true, "{show}");
    assert!(
        show["sandbox"]["read_only_paths"]
            .as_array()
            .unwrap()
            .contains(&json!("/srv"))
    );
    assert_eq!(show["sandbox"]["env"], json!(["MY_*"]));
    if !can_sandbox("policy_settings_make_the_sandbox_the_default") {
        return;
    }
    let x = exec(&env, &["--", "true"]);
    assert_eq!(x.code, 0, "{}", x.env);
    assert_sandboxed(&x.env, false);
    assert_eq!(x.env["request"]["options"]["sandbox"], false);
    let x = exec(&env, &["--no-sandbox", "--", "true"]);
    assert_eq!(x.env["sandbox"]["enforced"], false);
    assert_eq!(x.env["sandbox"]["network"], true);
    assert_eq!(x.env["request"]["options"]["no_sandbox"], true);
    // The default is the sandbox, even without any policy file; a policy can turn it off.
    std::fs::remove_file(env.home().join("policy.toml")).unwrap();
    assert_sandboxed(&exec(&env, &["--", "true"]).env, false);
    policy(&env, "[sandbox]\ndefault = false\n");
    let x = exec(&env, &["--", "true"]);
    assert_eq!(x.env["sandbox"]["enforced"], false, "{}", x.env);
    policy(&env, "[sandbox]\ndefault = true\n");
    // A vault's own policy file applies to its forks: an ephemeral run is sandboxed too.
    std::fs::remove_file(env.home().join("policy.toml")).unwrap();
    std::fs::create_dir_all(env.home().join("policies")).unwrap();
    std::fs::write(
        env.home().join("policies/t.toml"),
        "[sandbox]\ndefault = true\n",
    )
    .unwrap();
    let x = exec(&env, &["--ephemeral", "--", "sh", "-c", "echo x > f"]);
    assert_eq!(x.code, 0, "{}", x.env);
    assert_sandboxed(&x.env, false);
}

/// Issue 14, finding 6: a run cannot reach `$AVFS_HOME` or the vault, so it cannot read
/// the vault, rewrite its policy or approve its own pending request, even when told
/// where they are and given the avfs binary.
#[test]
fn a_run_cannot_reach_avfs_home_or_approve_itself() {
    if !can_sandbox("a_run_cannot_reach_avfs_home_or_approve_itself") {
        return;
    }
    let env = setup();
    // A request left pending: a client of a host outside the workspace asks a person
    // (192.0.2.1 is TEST-NET-1, never reached: the request stays pending). A client of
    // 127.0.0.1 would not: in the sandbox that is the workspace's own loopback.
    let asked = env.run(&[
        "--json",
        "--vault",
        "t",
        "exec",
        "--shell",
        "curl -s http://192.0.2.1:9/",
    ]);
    let asked: Value = serde_json::from_str(&asked.stdout).unwrap();
    let id = asked["approval"]["id"].as_str().unwrap().to_string();
    env.allow_all_policy("t");
    let policy_file = env.home().join("policies/t.toml");
    let policy_before = std::fs::read_to_string(&policy_file).unwrap();
    let copy_of_avfs = env.path("avfs-bin");
    std::fs::copy(env!("CARGO_BIN_EXE_avfs"), &copy_of_avfs).unwrap();
    write(
        &env,
        "reach.sh",
        r#"ls "$H/vaults" 2>/dev/null | grep -q . && echo "listed the vaults"
cat "$H/vaults/t.avfs" > stolen.db 2>/dev/null && test -s stolen.db && echo "read the vault"
echo '[defaults]' >> "$H/policies/t.toml" 2>/dev/null && echo "wrote the policy"
AVFS_HOME="$H" "$AVFS" --vault t approve "$ID" >/dev/null 2>&1 && echo "approved itself"
echo done
"#,
    );
    let h = format!("H={}", env.home().display());
    let avfs = format!("AVFS={}", copy_of_avfs.display());
    let ask = format!("ID={id}");
    let x = exec(
        &env,
        &[
            "--sandbox",
            "--env",
            &h,
            "--env",
            &avfs,
            "--env",
            &ask,
            "--",
            "sh",
            "reach.sh",
        ],
    );
    assert_eq!(stdout(&x), "done\n", "{}", x.env);
    assert_eq!(
        std::fs::read_to_string(&policy_file).unwrap(),
        policy_before
    );
    let list = env.json(&["--vault", "t", "approvals"]);
    let entry = list["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == id.as_str())
        .unwrap_or_else(|| panic!("{id} is gone: {list}"));
    assert_eq!(entry["state"], "pending", "{list}");
}
