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

/// Polls `f` up to 180 s: a server takes a moment to listen, ten of them starting at
/// once on a loaded 2-core machine (the full suite beside stress-ng) take far longer
/// than on a quiet one. A bound against hanging, not a timing assertion: `f` returns as
/// soon as what it waits for is there.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(180);
    while Instant::now() < until {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{what}: not within 180 s");
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
    // It ends half a second in: after the start's early-exit wait (a few ms), so the
    // start answers `running` and the exit is seen by `service list`.
    let s = start(
        &env,
        "t",
        &[
            "--name",
            "job",
            "--shell",
            "echo out; echo err >&2; sleep 0.5; exit 3",
        ],
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

/// A command that exits at once is answered as exited, with its status and its last
/// output, and `service start` fails with its status: nobody is left guessing.
#[test]
fn a_service_that_exits_at_once_is_reported_as_exited() {
    if !ready("a_service_that_exits_at_once_is_reported_as_exited") {
        return;
    }
    let env = setup();
    env.allow_all_policy("t");
    // The wait for an early exit is a few ms by default; a loaded machine may take
    // longer to even fail an exec, so these starts wait up to 10 s (the wait ends as
    // soon as the command does: nothing here depends on how fast the machine is).
    let early = |args: &[&str]| {
        let out = env
            .cmd(args)
            .env("AVFS_SERVICE_EARLY_MS", "10000")
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, stdout) = early(&[
        "--json",
        "--vault",
        "t",
        "service",
        "start",
        "--name",
        "gone",
        "--",
        "no-such-command-avfs-29",
    ]);
    let s: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(code, 127, "{s}");
    assert_eq!(s["service"]["state"], "exited", "{s}");
    assert_eq!(s["service"]["exit_code"], 127, "{s}");
    assert!(
        s["service"]["last_output"]
            .as_str()
            .unwrap()
            .contains("no-such-command-avfs-29"),
        "{s}"
    );
    // A command that fails a moment later: list shows it exited, with its last output.
    let s = start(
        &env,
        "t",
        &[
            "--name",
            "late",
            "--shell",
            "sleep 0.3; echo bye >&2; exit 4",
        ],
    );
    assert_eq!(s["service"]["state"], "running", "{s}");
    assert!(s["service"]["last_output"].is_null(), "{s}");
    eventually("it exits", || {
        services(&env, "t")
            .iter()
            .any(|x| x["name"] == "late" && x["state"] == "exited")
    });
    let l = services(&env, "t");
    let late = l.iter().find(|x| x["name"] == "late").unwrap();
    assert_eq!(late["exit_code"], 4, "{late}");
    assert_eq!(late["last_output"], "bye\n", "{late}");
    // The human form says so too.
    let (code, stdout) = early(&[
        "--vault",
        "t",
        "service",
        "start",
        "--",
        "no-such-command-avfs-29",
    ]);
    assert_eq!(code, 127, "{stdout}");
    assert!(
        stdout.contains("exited") && stdout.contains("last output"),
        "{stdout}"
    );
}

/// Ignored files (a .gitignore'd .venv) live in a directory that is the kept overlay's
/// topmost lower layer: a run that writes some retires the kept overlay before they move
/// there, which ends the workspace's running services (their end says so), losing
/// nothing. A service started in a workspace that has ignored files runs in its kept
/// overlay, sees them, and outlives runs that only read them.
#[test]
fn services_and_a_workspace_with_ignored_files() {
    if !ready("services_and_a_workspace_with_ignored_files") {
        return;
    }
    let env = setup();
    env.ok(&["--vault", "t", "write", "/.gitignore", ".venv/\n"]);
    let s = start(&env, "t", &["--name", "w", "--", "sleep", "600"]);
    assert_eq!(s["service"]["state"], "running", "{s}");
    let pid = s["service"]["pid"].as_i64().unwrap();
    // A run makes the ignored directory, as `python -m venv .venv` would.
    let x = env.json(&[
        "--vault",
        "t",
        "exec",
        "--shell",
        "mkdir -p .venv && echo ignored-ok > .venv/marker && echo kept > a.txt",
    ]);
    assert_eq!(x["exit_code"], 0, "{x}");
    eventually("the service ends with the kept overlay", || !alive(pid));
    let l = services(&env, "t");
    assert_eq!(l[0]["state"], "ended", "{l:?}");
    assert!(
        l[0]["end_reason"].as_str().unwrap().contains("overlay"),
        "{l:?}"
    );
    // Nothing was lost: the run's file, and its ignored one for the next run.
    assert_eq!(env.ok(&["--vault", "t", "cat", "a.txt"]).stdout, "kept\n");
    let x = env.json(&["--vault", "t", "exec", "--", "cat", ".venv/marker"]);
    assert_eq!(x["result"]["stdout"], "ignored-ok\n", "{x}");
    // A service in the workspace that now has ignored files sees them, and a run that
    // only reads them leaves it running.
    let s = start(
        &env,
        "t",
        &[
            "--name",
            "w2",
            "--",
            "sh",
            "-c",
            "cat .venv/marker > seen.txt; exec sleep 600",
        ],
    );
    assert_eq!(s["service"]["state"], "running", "{s}");
    let pid = s["service"]["pid"].as_i64().unwrap();
    eventually("the service read the ignored file", || {
        env.json(&["--vault", "t", "exec", "--", "cat", "seen.txt"])["result"]["stdout"]
            == "ignored-ok\n"
    });
    let x = env.json(&["--vault", "t", "exec", "--", "cat", ".venv/marker"]);
    assert_eq!(x["exit_code"], 0, "{x}");
    assert!(
        alive(pid),
        "the service outlives a run that only reads ignored files"
    );
    env.ok(&["--vault", "t", "service", "stop", "w2"]);
    eventually("the service stops", || !alive(pid));
    assert_eq!(services(&env, "t").len(), 2);
}

/// What a service writes is reported as the service's: the next run's envelope lists it
/// under `service_changes` (naming the service), not among the run's own `changes`, and
/// the vault holds it from before that run's checkpoint on. A run after that, with
/// nothing new written by the service, says nothing of services.
#[test]
fn service_writes_are_reported_as_the_services_not_the_next_runs() {
    if !ready("service_writes_are_reported_as_the_services_not_the_next_runs") {
        return;
    }
    let env = setup();
    env.allow_all_policy("t");
    let s = start(
        &env,
        "t",
        &[
            "--name",
            "writer",
            "--shell",
            "echo from-service > svc.txt && mkdir -p data && echo 1 > data/n && echo written && exec sleep 600",
        ],
    );
    assert_eq!(s["service"]["state"], "running", "{s}");
    eventually("the service has written", || {
        env.ok(&["--vault", "t", "service", "logs", "writer"])
            .stdout
            .contains("written")
    });
    let x = env.json(&[
        "--vault",
        "t",
        "exec",
        "--checkpoint",
        "--shell",
        "echo from-run > run.txt",
    ]);
    assert_eq!(x["exit_code"], 0, "{x}");
    let paths = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|c| c["path"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(paths(&x["changes"]), ["/run.txt"], "{x}");
    let sc = &x["service_changes"];
    assert_eq!(sc["services"], serde_json::json!(["writer"]), "{x}");
    assert_eq!(
        paths(&sc["changes"]),
        ["/data", "/data/n", "/svc.txt"],
        "{x}"
    );
    assert_eq!(sc["change_summary"]["added"], 3, "{x}");
    assert_eq!(sc["truncated"], false, "{x}");
    assert!(
        sc["changes"][0].get("patch").is_none_or(Value::is_null),
        "{x}"
    );
    // The run's checkpoint already held the service's file (it is not the run's).
    let cp = x["checkpoint"].as_str().unwrap();
    let d = env.json(&["--vault", "t", "diff", cp]);
    let after_cp: Vec<String> = d["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(after_cp, ["/run.txt"], "{d}");
    assert_eq!(
        env.ok(&["--vault", "t", "cat", "svc.txt"]).stdout,
        "from-service\n"
    );
    // Nothing new from the service: nothing said.
    let x = env.json(&["--vault", "t", "exec", "--", "cat", "svc.txt"]);
    assert_eq!(x["result"]["stdout"], "from-service\n", "{x}");
    assert!(x["service_changes"].is_null(), "{x}");
    assert!(x["changes"].as_array().unwrap().is_empty(), "{x}");
    let audit = env.ok(&["--vault", "t", "audit"]).stdout;
    assert!(audit.contains("exec.service_writes"), "{audit}");
    env.ok(&["--vault", "t", "service", "stop", "writer"]);
}

/// Processes whose command line is exactly `argv`.
fn processes(argv: &[&str]) -> Vec<i32> {
    let want: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .filter(|pid| alive(*pid as i64))
        .collect()
}

/// Every supervisor and set-up pid the workspace's records name (to check they end),
/// and every cgroup directory (to check they are removed).
fn recorded_pids(env: &Env) -> Vec<i64> {
    recorded(env).0
}

fn recorded(env: &Env) -> (Vec<i64>, Vec<String>) {
    let mut out = vec![];
    let mut cgroups = vec![];
    let Ok(ws) = std::fs::read_dir(env.home().join("services")) else {
        return (out, cgroups);
    };
    for w in ws.flatten() {
        for s in std::fs::read_dir(w.path()).unwrap().flatten() {
            let Ok(t) = std::fs::read(s.path().join("service.json")) else {
                continue;
            };
            let v: Value = serde_json::from_slice(&t).unwrap();
            for k in ["supervisor", "setup"] {
                if let Some(p) = v[k]["pid"].as_i64() {
                    out.push(p);
                }
            }
            for c in v["cgroups"].as_array().into_iter().flatten() {
                cgroups.extend(c.as_str().map(String::from));
            }
        }
    }
    (out, cgroups)
}

/// `kill -9` of `avfs service start` and of `avfs service stop` at points along their
/// way: afterwards every process of the service is either a running service that
/// `service list` shows, or gone; `vault delete` ends the rest; nothing is left.
#[test]
fn kill_9_during_start_and_stop_leaves_no_orphan() {
    if !ready("kill_9_during_start_and_stop_leaves_no_orphan") {
        return;
    }
    let env = setup();
    let marker = ["sleep", "7129"];
    let mut seen: Vec<i64> = vec![];
    let kill_after = |args: &[&str], ms: u64| {
        let mut c = env.cmd(args).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(ms));
        let _ = c.kill();
        let _ = c.wait();
    };
    let check = |env: &Env| {
        // What runs is what list shows running: one marker process per running service.
        let running = services(env, "t")
            .iter()
            .filter(|s| s["state"] == "running")
            .count();
        let procs = processes(&marker);
        assert_eq!(
            procs.len(),
            running,
            "marker processes {procs:?}, running {running}"
        );
    };
    for (round, ms) in [0u64, 5, 15, 30, 60, 100, 200].into_iter().enumerate() {
        let name = format!("k{round}");
        kill_after(
            &[
                "--vault", "t", "service", "start", "--name", &name, "--", marker[0], marker[1],
            ],
            ms,
        );
        // A start killed before its supervisor answered either started the service
        // (its supervisor is reparented and keeps it) or left a record that is lost.
        std::thread::sleep(Duration::from_millis(300));
        seen.extend(recorded_pids(&env));
        check(&env);
        let running: Vec<String> = services(&env, "t")
            .iter()
            .filter(|s| s["state"] == "running")
            .map(|s| s["name"].as_str().unwrap().to_string())
            .collect();
        for n in running {
            kill_after(&["--vault", "t", "service", "stop", &n], ms);
            std::thread::sleep(Duration::from_millis(300));
            seen.extend(recorded_pids(&env));
            check(&env);
        }
    }
    // A last one that surely runs, then the vault goes: nothing of it is left.
    let s = start(&env, "t", &["--name", "last", "--", marker[0], marker[1]]);
    assert_eq!(s["service"]["state"], "running", "{s}");
    let (pids, cgroups) = recorded(&env);
    seen.extend(pids);
    env.ok(&["vault", "delete", "t", "-y"]);
    eventually("no marker process is left", || {
        processes(&marker).is_empty()
    });
    eventually("no supervisor or set-up is left", || {
        seen.iter().all(|p| !alive(*p))
    });
    // The service's cgroups went with it (each is removed once its processes are).
    eventually("the services' cgroups are removed", || {
        cgroups.iter().all(|c| !std::path::Path::new(c).exists())
    });
    let dirs = std::fs::read_dir(env.home().join("services"))
        .map(|d| d.flatten().count())
        .unwrap_or(0);
    assert_eq!(dirs, 0, "vault delete left service records");
}

/// `--publish PORT`: the host reaches the service on its own 127.0.0.1:PORT, and only
/// while the service runs; a port already taken on the host fails the start clearly.
#[test]
fn a_published_port_is_reached_from_the_host() {
    if !ready("a_published_port_is_reached_from_the_host") {
        return;
    }
    let env = setup();
    let port = 18436u16;
    let p = port.to_string();
    let s = start(
        &env,
        "t",
        &[
            "--name",
            "pub",
            "--publish",
            &p,
            "--",
            "python3",
            "-m",
            "http.server",
            &p,
        ],
    );
    assert_eq!(s["service"]["state"], "running", "{s}");
    assert_eq!(s["service"]["published"], serde_json::json!([port]), "{s}");
    let host_get = || {
        let out = std::process::Command::new("curl")
            .args(["-s", "--max-time", "5"])
            .arg(format!("http://127.0.0.1:{port}/index.html"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    eventually("the host gets the page through the published port", || {
        host_get() == "hello from the workspace\n"
    });
    // A second service cannot publish the same host port.
    let e = env.json_err(
        &[
            "--vault",
            "t",
            "service",
            "start",
            "--name",
            "pub2",
            "--publish",
            &p,
            "--",
            "sleep",
            "600",
        ],
        1,
    );
    assert!(e["message"].as_str().unwrap().contains(&p), "{e}");
    let l = services(&env, "t");
    assert!(
        l.iter()
            .all(|x| x["name"] != "pub2" || x["state"] != "running"),
        "{l:?}"
    );
    let e = env.json_err(
        &[
            "--vault",
            "t",
            "service",
            "start",
            "--publish",
            "0",
            "--",
            "sleep",
            "600",
        ],
        1,
    );
    assert!(e["message"].as_str().unwrap().contains("--publish"), "{e}");
    // Stopped: the host port is gone with it.
    env.ok(&["--vault", "t", "service", "stop", "pub"]);
    assert_eq!(host_get(), "");
}
