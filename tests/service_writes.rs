//! What a service wrote, in `avfs service list` (`writes`): real services writing real
//! files in the workspace's kept overlay, real runs taking their writes in. The counts
//! and paths come from the `exec.service_writes` audit rows those runs wrote; `pending`
//! counts what no ingest took in yet, without taking it in.

mod common;
#[path = "common/overlay.rs"]
mod overlay;

use std::time::{Duration, Instant};

use common::Env;
use overlay::overlay_or_skip;
use serde_json::{Value, json};

fn setup() -> Env {
    let env = Env::new();
    env.ok(&["vault", "create", "t"]);
    env.ok(&["--vault", "t", "write", "/index.html", "hello\n"]);
    env.allow_all_policy("t");
    env
}

fn start(env: &Env, name: &str, line: &str) -> Value {
    let s = env.json(&[
        "--vault", "t", "service", "start", "--name", name, "--shell", line,
    ]);
    assert_eq!(s["service"]["state"], "running", "{s}");
    s
}

/// The service named `name` as `service list --json` shows it.
fn listed(env: &Env, name: &str) -> Value {
    let l = env.json(&["--vault", "t", "service", "list"]);
    l["services"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no service {name}: {l}"))
        .clone()
}

/// Polls `f` up to 180 s (a bound against hanging on a loaded machine, not a timing
/// assertion: it returns as soon as `f` holds).
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

fn logged(env: &Env, name: &str, what: &str) -> bool {
    env.ok(&["--vault", "t", "service", "logs", name])
        .stdout
        .contains(what)
}

fn run(env: &Env, line: &str) -> Value {
    let x = env.json(&["--vault", "t", "exec", "--shell", line]);
    assert_eq!(x["exit_code"], 0, "{x}");
    x
}

/// A service's writes: pending before the next run, then in `writes` with their paths
/// and counts from the audit row that run wrote; a service that ran while nothing was
/// written shows none; the plain-text list says it in a few words.
#[test]
fn service_list_reports_what_a_service_wrote() {
    if !overlay_or_skip("service_list_reports_what_a_service_wrote") {
        return;
    }
    let env = setup();
    start(
        &env,
        "writer",
        "echo a > a.txt && mkdir d && echo b > d/b && echo written && exec sleep 600",
    );
    eventually("the service has written", || {
        logged(&env, "writer", "written")
    });
    // Not taken in yet: counted, and nothing recorded.
    let w = &listed(&env, "writer")["writes"];
    assert_eq!(
        w["pending"],
        json!({"entries": 2, "at_least": false}),
        "{w}"
    );
    assert_eq!(w["taken"], 0, "{w}");
    assert!(w["last"].is_null(), "{w}");
    // Listing took nothing in: the next run's envelope still has them as the service's.
    let x = run(&env, "true");
    let sc = &x["service_changes"];
    assert_eq!(sc["services"], json!(["writer"]), "{x}");
    let w = &listed(&env, "writer")["writes"];
    assert_eq!(
        (
            &w["taken"],
            &w["added"],
            &w["modified"],
            &w["deleted"],
            &w["total"]
        ),
        (&json!(1), &json!(3), &json!(0), &json!(0), &json!(3)),
        "{w}"
    );
    assert_eq!(w["last"]["paths"], json!(["/a.txt", "/d", "/d/b"]), "{w}");
    assert_eq!(w["last"]["more"], 0, "{w}");
    assert_eq!(w["last"]["exec"], x["id"], "{w} {x}");
    assert!(w["last"]["at"].as_str().unwrap().ends_with('Z'), "{w}");
    assert_eq!(
        w["pending"],
        json!({"entries": 0, "at_least": false}),
        "{w}"
    );

    // A service that runs while nothing is written: no writes are its.
    start(&env, "idle", "exec sleep 600");
    // Nor in a workspace of its own (a new overlay: its empty upper holds nothing new).
    env.ok(&["vault", "create", "u"]);
    env.allow_all_policy("u");
    env.json(&[
        "--vault", "u", "service", "start", "--name", "alone", "--", "sleep", "600",
    ]);
    let l = env.json(&["--vault", "u", "service", "list"]);
    assert_eq!(
        l["services"][0]["writes"]["pending"],
        json!({"entries": 0, "at_least": false}),
        "{l}"
    );
    assert_eq!(l["services"][0]["writes"]["taken"], 0, "{l}");
    env.ok(&["--vault", "u", "service", "stop", "alone"]);
    let x = run(&env, "cat a.txt");
    assert!(x["service_changes"].is_null(), "{x}");
    let idle = listed(&env, "idle");
    let w = &idle["writes"];
    assert_eq!((&w["taken"], &w["total"]), (&json!(0), &json!(0)), "{w}");
    assert!(w["last"].is_null(), "{w}");
    assert_eq!(w["pending"]["entries"], 0, "{w}");
    let text = env.ok(&["--vault", "t", "service", "list"]).stdout;
    let line_of = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no line for {name}: {text}"))
            .to_string()
    };
    assert!(line_of("writer").ends_with("; wrote 3 paths"), "{text}");
    assert!(!line_of("idle").contains("wrote"), "{text}");
    // A stop's document has them too.
    let stopped = env.json(&["--vault", "t", "service", "stop", "writer"]);
    assert_eq!(stopped["service"]["writes"]["taken"], 1, "{stopped}");
    env.ok(&["--vault", "t", "service", "stop", "idle"]);
    // An ended service keeps its writes; nothing pending is its once a run took the
    // overlay in after it ended.
    run(&env, "true");
    let w = &listed(&env, "writer")["writes"];
    assert_eq!((&w["taken"], &w["total"]), (&json!(1), &json!(3)), "{w}");
    assert!(w["pending"].is_null(), "{w}");
}

/// A service that keeps writing (`date > out.txt` in a loop): something is pending
/// between runs, and each run's taking names its file.
#[test]
fn a_service_that_keeps_writing_has_pending_writes_and_takings() {
    if !overlay_or_skip("a_service_that_keeps_writing_has_pending_writes_and_takings") {
        return;
    }
    let env = setup();
    start(
        &env,
        "clock",
        "while :; do date > out.txt; echo tick; sleep 0.2; done",
    );
    eventually("something is pending", || {
        listed(&env, "clock")["writes"]["pending"]["entries"]
            .as_u64()
            .is_some_and(|n| n > 0)
    });
    let x = run(&env, "true");
    let paths: Vec<&str> = x["service_changes"]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["/out.txt"], "{x}");
    let w = &listed(&env, "clock")["writes"];
    assert!(w["taken"].as_u64().unwrap() >= 1, "{w}");
    assert_eq!(w["added"], 1, "{w}");
    assert_eq!(w["last"]["paths"], json!(["/out.txt"]), "{w}");
    eventually("the service writes again", || {
        listed(&env, "clock")["writes"]["pending"]["entries"]
            .as_u64()
            .is_some_and(|n| n > 0)
    });
    env.ok(&["--vault", "t", "service", "stop", "clock"]);
}

/// A service that wrote 1 200 files: the pending count stops at its bound and says so,
/// the taking names 20 paths and counts the rest, and the whole list stays small.
#[test]
fn a_service_that_wrote_many_files_is_listed_bounded() {
    if !overlay_or_skip("a_service_that_wrote_many_files_is_listed_bounded") {
        return;
    }
    let env = setup();
    start(
        &env,
        "many",
        "mkdir m && i=0; while [ $i -lt 1200 ]; do : > m/f$i; i=$((i+1)); done; echo written; exec sleep 600",
    );
    eventually("the service has written", || {
        logged(&env, "many", "written")
    });
    let w = &listed(&env, "many")["writes"];
    assert_eq!(
        w["pending"],
        json!({"entries": 1000, "at_least": true}),
        "{w}"
    );
    run(&env, "true");
    let l = env
        .run(&["--json", "--vault", "t", "service", "list"])
        .stdout;
    assert!(l.len() < 8 * 1024, "{} bytes: {l}", l.len());
    let w = &listed(&env, "many")["writes"];
    assert_eq!(
        (&w["added"], &w["total"]),
        (&json!(1201), &json!(1201)),
        "{w}"
    );
    let paths = w["last"]["paths"].as_array().unwrap();
    assert_eq!(paths.len(), 20, "{w}");
    assert_eq!(paths[0], "/m", "{w}");
    assert_eq!(w["last"]["more"], 1181, "{w}");
    assert_eq!(
        w["pending"],
        json!({"entries": 0, "at_least": false}),
        "{w}"
    );
    env.ok(&["--vault", "t", "service", "stop", "many"]);
}
