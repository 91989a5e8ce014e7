//! `avfs service`: long-lived processes of a workspace, in its sandbox. Driven as an
//! agent drives them: a real `python3 -m http.server` started as a service, reached by
//! a real `curl` in a run (default policy, unattended), not reachable from the host nor
//! from another fork; logs, stop, restart, ttl, and nothing left once the vault is gone.

mod common;
#[path = "common/overlay.rs"]
mod overlay;

use std::time::{Duration, Instant};

use common::Env;
use overlay::overlay_or_skip;
use serde_json::Value;

fn have(prog: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {prog}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Overlay engine, python3 and curl, or skip (fail under AVFS_REQUIRE_FUSE=1).
fn ready(test: &str) -> bool {
    if !overlay_or_skip(test) {
        return false;
    }
    for p in ["python3", "curl"] {
        if !have(p) {
            assert!(
                std::env::var("AVFS_REQUIRE_FUSE").as_deref() != Ok("1"),
                "{test}: {p} is required"
            );
            eprintln!("SKIPPED {test}: no {p}");
            return false;
        }
    }
    true
}

fn setup() -> Env {
    let env = Env::new();
    env.ok(&["vault", "create", "t"]);
    env.ok(&[
        "--vault",
        "t",
        "write",
        "/index.html",
        "hello from the workspace\n",
    ]);
    env
}

fn start(env: &Env, vault: &str, args: &[&str]) -> Value {
    let mut a = vec!["--vault", vault, "service", "start"];
    a.extend_from_slice(args);
    env.json(&a)
}

fn alive(pid: i64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// `curl` in a run of `vault`: the HTTP status it got (000: no connection).
fn curl_in(env: &Env, vault: &str, port: u16) -> (String, Value) {
    let url = format!("http://127.0.0.1:{port}/index.html");
    let r = env.run(&[
        "--json",
        "--vault",
        vault,
        "exec",
        "--",
        "curl",
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--max-time",
        "5",
        &url,
    ]);
    // curl exits 7 when it cannot connect: the envelope is what matters.
    let v = r.json();
    assert!(v.get("error").is_none(), "{v}");
    (v["result"]["stdout"].as_str().unwrap_or("").to_string(), v)
}

/// Polls `f` up to 20 s (a server takes a moment to listen; not a timing assertion).
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{what}: not within 20 s");
}

fn services(env: &Env, vault: &str) -> Vec<Value> {
    env.json(&["--vault", vault, "service", "list"])["services"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn a_run_reaches_a_service_on_loopback_and_the_host_does_not() {
    if !ready("a_run_reaches_a_service_on_loopback_and_the_host_does_not") {
        return;
    }
    let env = setup();
    let port = 18431;
    let s = start(
        &env,
        "t",
        &[
            "--name",
            "web",
            "--",
            "python3",
            "-m",
            "http.server",
            &port.to_string(),
        ],
    );
    assert!(
        s["decision"]["action"]
            .as_str()
            .unwrap()
            .starts_with("allow"),
        "{s}"
    );
    let svc = &s["service"];
    assert_eq!(svc["name"], "web", "{s}");
    assert_eq!(svc["state"], "running", "{s}");
    assert!(svc["id"].as_str().unwrap().starts_with("svc-"), "{s}");
    let pid = svc["pid"].as_i64().unwrap();
    assert!(alive(pid), "{s}");
    // The default policy lets a run curl the workspace's own loopback unattended.
    let mut last = Value::Null;
    eventually("the run gets 200 from the service", || {
        let (code, v) = curl_in(&env, "t", port);
        last = v;
        code == "200"
    });
    assert!(
        last["decision"]["action"]
            .as_str()
            .unwrap()
            .starts_with("allow"),
        "{last}"
    );
    // The host's loopback does not have it.
    let host = std::process::Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "2",
        ])
        .arg(format!("http://127.0.0.1:{port}/"))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&host.stdout),
        "000",
        "the host reached the service"
    );
    // list, logs (the server logged the run's request), stop.
    let l = services(&env, "t");
    assert_eq!(l.len(), 1);
    assert_eq!(l[0]["state"], "running");
    let logs = env.ok(&["--vault", "t", "service", "logs", "web"]).stdout;
    assert!(logs.contains("GET /index.html"), "logs: {logs}");
    let tail = env
        .ok(&["--vault", "t", "service", "logs", "web", "--tail", "1"])
        .stdout;
    assert_eq!(tail.lines().count(), 1, "{tail}");
    let stopped = env.json(&["--vault", "t", "service", "stop", "web"]);
    assert_eq!(stopped["stopped"], true, "{stopped}");
    assert_eq!(stopped["service"]["state"], "stopped", "{stopped}");
    assert!(!alive(pid));
    let (code, _) = curl_in(&env, "t", port);
    assert_eq!(code, "000", "reached after stop");
    // It keeps its exit status and last output.
    let l = services(&env, "t");
    assert_eq!(l[0]["state"], "stopped");
    assert!(l[0]["ended_at"].is_string());
    let logs = env.ok(&["--vault", "t", "service", "logs", "web"]).stdout;
    assert!(logs.contains("GET /index.html"), "logs after stop: {logs}");
    // Audited.
    let audit = env.ok(&["--vault", "t", "audit"]).stdout;
    assert!(
        audit.contains("service.start") && audit.contains("service.stop"),
        "{audit}"
    );
}

#[test]
fn a_service_that_exits_keeps_its_status_and_output() {
    if !ready("a_service_that_exits_keeps_its_status_and_output") {
        return;
    }
    let env = setup();
    env.allow_all_policy("t");
    let s = start(
        &env,
        "t",
        &["--name", "job", "--shell", "echo out; echo err >&2; exit 3"],
    );
    assert_eq!(s["service"]["name"], "job", "{s}");
    eventually("it exits", || services(&env, "t")[0]["state"] == "exited");
    let l = services(&env, "t");
    assert_eq!(l[0]["exit_code"], 3, "{l:?}");
    let logs = env.ok(&["--vault", "t", "service", "logs", "job"]).stdout;
    assert!(logs.contains("out") && logs.contains("err"), "{logs}");
    // Restart runs it again under the same name.
    let r = env.json(&["--vault", "t", "service", "restart", "job"]);
    assert_eq!(r["service"]["name"], "job", "{r}");
    eventually("both runs listed", || services(&env, "t").len() == 2);
}

#[test]
fn bad_input_is_refused_clearly() {
    if !ready("bad_input_is_refused_clearly") {
        return;
    }
    let env = setup();
    let e = env.json_err(&["--vault", "t", "service", "stop", "nope"], 1);
    assert_eq!(e["kind"], "not_found", "{e}");
    let e = env.json_err(
        &[
            "--vault", "t", "service", "start", "--name", "../x", "--", "true",
        ],
        1,
    );
    assert!(
        e["message"].as_str().unwrap().contains("service name"),
        "{e}"
    );
    let s = start(&env, "t", &["--name", "w", "--", "sleep", "60"]);
    assert_eq!(s["service"]["state"], "running", "{s}");
    let e = env.json_err(
        &[
            "--vault", "t", "service", "start", "--name", "w", "--", "sleep", "60",
        ],
        1,
    );
    assert!(e["message"].as_str().unwrap().contains("is running"), "{e}");
    env.ok(&["--vault", "t", "service", "stop", "w"]);
}

#[test]
fn ttl_ends_a_service_and_vault_delete_leaves_nothing() {
    if !ready("ttl_ends_a_service_and_vault_delete_leaves_nothing") {
        return;
    }
    let env = setup();
    let s = start(
        &env,
        "t",
        &["--name", "short", "--ttl", "1", "--", "sleep", "600"],
    );
    let pid = s["service"]["pid"].as_i64().unwrap();
    eventually("the ttl ends it", || {
        services(&env, "t")[0]["state"] == "ended"
    });
    assert!(!alive(pid));
    assert!(
        services(&env, "t")[0]["end_reason"]
            .as_str()
            .unwrap()
            .contains("ttl")
    );
    let s = start(&env, "t", &["--name", "long", "--", "sleep", "600"]);
    let pid = s["service"]["pid"].as_i64().unwrap();
    assert!(alive(pid));
    env.ok(&["vault", "delete", "t", "-y"]);
    eventually("vault delete ends it", || !alive(pid));
}

#[test]
fn ten_services_on_ten_forks_each_reachable_only_from_its_own_workspace() {
    if !ready("ten_services_on_ten_forks_each_reachable_only_from_its_own_workspace") {
        return;
    }
    let env = setup();
    let port = 18432;
    let mut pids = vec![];
    for i in 0..10 {
        let f = format!("f{i}");
        env.ok(&["vault", "fork", "t", &f]);
        env.ok(&["--vault", &f, "write", "/index.html", &format!("fork {i}")]);
        let s = start(
            &env,
            &f,
            &[
                "--name",
                "web",
                "--",
                "python3",
                "-m",
                "http.server",
                &port.to_string(),
            ],
        );
        assert_eq!(s["service"]["state"], "running", "{s}");
        pids.push(s["service"]["pid"].as_i64().unwrap());
    }
    // All ten run at once, on the same port, each in its own workspace's loopback.
    assert!(pids.iter().all(|p| alive(*p)));
    for i in 0..10 {
        let f = format!("f{i}");
        let url = format!("http://127.0.0.1:{port}/index.html");
        eventually(&format!("{f} reaches its own service"), || {
            let v = env
                .run(&[
                    "--json",
                    "--vault",
                    &f,
                    "exec",
                    "--",
                    "curl",
                    "-s",
                    "--max-time",
                    "5",
                    &url,
                ])
                .json();
            v["result"]["stdout"] == format!("fork {i}")
        });
    }
    // The workspace they were forked from has no service: nothing answers there.
    let (code, _) = curl_in(&env, "t", port);
    assert_eq!(code, "000");
    // Deleting a fork ends its service, and only its.
    env.ok(&["vault", "delete", "f3", "-y"]);
    eventually("the deleted fork's service ends", || !alive(pids[3]));
    assert!(pids.iter().enumerate().all(|(i, p)| i == 3 || alive(*p)));
}
