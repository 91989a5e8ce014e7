//! `avfs exec` end to end: the real binary, a real FUSE mount, every envelope validated
//! against `schemas/execution-envelope.schema.json`.
//!
//! Tests that run a command need FUSE: without it they skip with a message, and with
//! `AVFS_REQUIRE_FUSE=1` they fail. Tests whose commands are denied or wait for approval
//! never mount, and always run.
#![allow(clippy::macro_metavars_in_unsafe)]

mod common;
#[path = "common/envelope.rs"]
mod envelope;
#[path = "common/exec.rs"]
mod exec;
#[path = "common/fuse.rs"]
mod fuse;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

// ---------------------------------------------------------------- helpers

use envelope::{assert_envelope, validator};
use exec::*;
use fuse::can_mount;

// ---------------------------------------------------------------- the schema

/// The schema is strict: a real envelope passes, and each kind of damage is caught.
#[test]
fn schema_accepts_real_envelopes_and_rejects_damaged_ones() {
    let env = setup();
    let denied = exec(&env, &["--no-sandbox", "--shell", "cat /etc/passwd"]).env;
    let asked = exec(&env, &["--", "curl", "x"]).env;
    // A full envelope with a result and changes, built from a real one (no mount needed).
    let mut ran = denied.clone();
    ran["decision"]["action"] = json!("allow_with_checkpoint");
    ran["checkpoint"] = json!("exec-0123456789");
    ran["mountpoint"] = json!("/tmp/m");
    ran["result"] = json!({
        "exit_code": 0, "signal": null, "timed_out": false, "duration_ms": 3,
        "stdout": "", "stderr": "", "stdout_truncated": false, "stderr_truncated": false,
        "stdout_bytes": 0, "stderr_bytes": 0, "lingering_processes_killed": false
    });
    ran["changes"] = json!([{
        "path": "/f", "kind": "added", "type_before": null, "type_after": "file",
        "size_before": null, "size_after": 2, "mode_before": null, "mode_after": "0644",
        "patch": "--- /dev/null\n+++ b/f\n@@ -0,0 +1 @@\n+x\n"
    }]);
    ran["exit_code"] = json!(0);
    ran["workspace_path"] = json!("/tmp/m");
    ran["engine"] = json!({"name": "overlay", "reason": "default",
        "layers": {"how": "cached", "written": 0, "depth": 1, "prepare_ms": 0},
        "ingest": {"files_read": 1, "bytes_read": 2, "ms": 0}});
    ran["request"]["options"]["no_sandbox"] = json!(true);
    ran["sandbox"] = json!({
        "enforced": false, "mechanism": "none", "network": true, "network_granted_by": null,
        "writable_paths": ["/"], "read_only_paths": [], "hidden_paths": []
    });
    // The same run under the sandbox, with the network an approval granted.
    let mut boxed = ran.clone();
    boxed["request"]["options"]["no_sandbox"] = json!(false);
    boxed["sandbox"] = json!({
        "enforced": true, "mechanism": "namespaces+landlock(abi 7)+seccomp",
        "network": true, "network_granted_by": "approval ap-0123456789",
        "writable_paths": ["/tmp/m", "/tmp", "/dev/shm"], "read_only_paths": ["/usr", "/etc"],
        "hidden_paths": ["/etc/shadow"]
    });
    for ok in [&denied, &asked, &ran, &boxed] {
        assert_envelope(ok);
    }
    // Nothing ran: nothing was enforced and nothing had the network.
    for e in [&denied, &asked] {
        assert_eq!(
            e["sandbox"],
            json!({"enforced": false, "mechanism": "none", "network": false, "network_granted_by": null,
                   "writable_paths": [], "read_only_paths": [], "hidden_paths": []})
        );
        assert_eq!(e["engine"], Value::Null);
        assert_eq!(e["workspace_path"], Value::Null);
        assert_eq!(e["request"]["options"]["sandbox"], false);
    }
    assert_eq!(denied["request"]["options"]["no_sandbox"], true);
    assert_eq!(asked["request"]["options"]["no_sandbox"], false);
    type Damage = fn(&mut Value);
    let damages: &[(&str, Damage)] = &[
        ("unknown top-level field", |v| v["extra"] = json!(1)),
        ("missing field", |v| {
            v.as_object_mut().unwrap().remove("rollback");
        }),
        ("unknown action", |v| {
            v["decision"]["action"] = json!("maybe")
        }),
        ("unknown category", |v| {
            v["decision"]["categories"] = json!(["network"])
        }),
        ("unknown finding field", |v| {
            v["decision"]["findings"][0]["x"] = json!(1)
        }),
        ("unknown change kind", |v| {
            v["changes"][0]["kind"] = json!("renamed")
        }),
        ("bad mode", |v| v["changes"][0]["mode_after"] = json!("644")),
        ("added with a type before", |v| {
            v["changes"][0]["type_before"] = json!("file")
        }),
        ("negative size", |v| {
            v["changes"][0]["size_after"] = json!(-1)
        }),
        ("string exit code", |v| v["exit_code"] = json!("0")),
        ("result without stdout", |v| {
            v["result"].as_object_mut().unwrap().remove("stdout");
        }),
        ("result with extra field", |v| v["result"]["pid"] = json!(1)),
        ("command kind", |v| {
            v["request"]["command"]["kind"] = json!("exec")
        }),
        ("argv kind with a shell line", |v| {
            v["request"]["command"] = json!({"kind": "argv", "argv": null, "shell": "ls"})
        }),
        ("unknown option", |v| {
            v["request"]["options"]["sudo"] = json!(true)
        }),
        ("relative cwd", |v| v["request"]["cwd"] = json!("sub")),
        ("rollback extra", |v| v["rollback"]["when"] = json!(0)),
        (
            "approval state",
            |v| {
                v["approval"] = json!({"id": "ap-0123456789", "state": "maybe", "expires_at_ns": 1})
            },
        ),
        ("summary field", |v| {
            v["change_summary"]["copied"] = json!(0)
        }),
        ("schema version", |v| v["schema_version"] = json!(2)),
        ("no sandbox", |v| {
            v.as_object_mut().unwrap().remove("sandbox");
        }),
        ("sandbox extra field", |v| v["sandbox"]["uid"] = json!(0)),
        ("sandbox without network_granted_by", |v| {
            v["sandbox"]
                .as_object_mut()
                .unwrap()
                .remove("network_granted_by");
        }),
        ("enforced sandbox writable everywhere", |v| {
            v["sandbox"]["enforced"] = json!(true);
            v["sandbox"]["network"] = json!(false);
        }),
        ("enforced sandbox with nothing writable", |v| {
            v["sandbox"] = json!({"enforced": true, "network": false, "network_granted_by": null,
                "writable_paths": [], "read_only_paths": [], "hidden_paths": []})
        }),
        ("unenforced sandbox hiding paths", |v| {
            v["sandbox"]["hidden_paths"] = json!(["/etc/shadow"])
        }),
        ("network granted but off", |v| {
            v["sandbox"] = json!({"enforced": true, "network": false, "network_granted_by": "policy",
                "writable_paths": ["/tmp/m"], "read_only_paths": [], "hidden_paths": []})
        }),
        ("sandboxed network without a grant", |v| {
            v["sandbox"] = json!({"enforced": true, "network": true, "network_granted_by": null,
                "writable_paths": ["/tmp/m"], "read_only_paths": [], "hidden_paths": []})
        }),
        ("unknown grant", |v| {
            v["sandbox"] = json!({"enforced": true, "network": true, "network_granted_by": "agent",
                "writable_paths": ["/tmp/m"], "read_only_paths": [], "hidden_paths": []})
        }),
        ("relative read-only path", |v| {
            v["sandbox"] = json!({"enforced": true, "network": false, "network_granted_by": null,
                "writable_paths": ["/tmp/m"], "read_only_paths": ["usr"], "hidden_paths": []})
        }),
        ("--sandbox and --no-sandbox", |v| {
            v["request"]["options"]["sandbox"] = json!(true);
            v["request"]["options"]["no_sandbox"] = json!(true);
        }),
        ("options without sandbox", |v| {
            v["request"]["options"]
                .as_object_mut()
                .unwrap()
                .remove("sandbox");
        }),
    ];
    for (what, damage) in damages {
        let mut v = ran.clone();
        damage(&mut v);
        assert!(
            !validator().is_valid(&v),
            "the schema accepts an envelope with: {what}"
        );
    }
}

// ---------------------------------------------------------------- categories

#[test]
fn read_only_is_allowed_without_a_checkpoint() {
    if !can_mount("read_only_is_allowed_without_a_checkpoint") {
        return;
    }
    let env = setup();
    let before = checkpoint_names(&env, "t");
    for args in [
        vec!["--", "ls", "-a"],
        vec!["--shell", "cat a.txt && grep -c bee sub/b.txt | wc -l"],
    ] {
        let x = exec(&env, &args);
        let e = &x.env;
        assert_eq!(x.code, 0, "{e}");
        assert_eq!(e["decision"]["action"], "allow", "{e}");
        assert_eq!(categories(e), ["read_only"]);
        assert!(e["checkpoint"].is_null(), "{e}");
        assert!(e["approval"].is_null());
        assert_eq!(e["changes"], json!([]));
        assert_eq!(e["result"]["exit_code"], 0);
        assert_eq!(e["result"]["timed_out"], false);
        assert!(e["mountpoint"].is_string());
    }
    let x = exec(&env, &["--", "ls", "-a"]);
    assert!(
        x.env["result"]["stdout"]
            .as_str()
            .unwrap()
            .contains("a.txt")
    );
    assert_eq!(x.env["request"]["command"]["kind"], "argv");
    assert_eq!(x.env["request"]["command"]["argv"], json!(["ls", "-a"]));
    assert_eq!(x.env["request"]["vault"], "t");
    assert_eq!(x.env["request"]["workspace"], "main");
    assert_eq!(x.env["request"]["cwd"], "/");
    // The sandbox is on by default: the workspace's stable path, /tmp and /dev/shm are
    // the only writable places, and there is no network.
    let sb = &x.env["sandbox"];
    assert_eq!(sb["enforced"], true, "{sb}");
    assert_eq!(sb["network"], false, "{sb}");
    assert_eq!(
        sb["writable_paths"],
        json!([x.env["workspace_path"], "/tmp", "/dev/shm"])
    );
    // --no-sandbox: the user's full rights, said so in the envelope.
    let x = exec(&env, &["--no-sandbox", "--", "ls", "-a"]);
    assert_eq!(
        x.env["sandbox"],
        json!({"enforced": false, "mechanism": "none", "network": true, "network_granted_by": null,
               "writable_paths": ["/"], "read_only_paths": [], "hidden_paths": []})
    );
    assert_eq!(x.env["request"]["options"]["no_sandbox"], true);
    let x = exec(&env, &["--shell", "cat a.txt"]);
    assert_eq!(x.env["result"]["stdout"], "hi\n");
    assert_eq!(x.env["request"]["command"]["kind"], "shell");
    assert_eq!(
        checkpoint_names(&env, "t"),
        before,
        "read-only runs took checkpoints"
    );
    assert!(
        !x.run.stdout.contains("\nhi\n"),
        "output is in the envelope only"
    );
}

#[test]
fn mutating_takes_a_listed_checkpoint() {
    if !can_mount("mutating_takes_a_listed_checkpoint") {
        return;
    }
    let env = setup();
    let x = exec(&env, &["--", "touch", "new.txt"]);
    let e = &x.env;
    assert_eq!(x.code, 0, "{e}");
    assert_eq!(e["decision"]["action"], "allow_with_checkpoint");
    assert_eq!(categories(e), ["mutating"]);
    assert_eq!(e["decision"]["matched_rule"], "build-or-edit");
    let cp = e["checkpoint"]
        .as_str()
        .expect("a checkpoint name")
        .to_string();
    assert!(checkpoint_names(&env, "t").contains(&cp), "{cp} not listed");
    assert_eq!(change_set(e), set(&[("added", "/new.txt")]));
    // The checkpoint is the state before the run.
    let r = env.run(&["--vault", "t", "diff", &cp, "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        common::changes(&r.json()),
        [("added".to_string(), "/new.txt".to_string())]
    );
    // --no-checkpoint overrides the policy; the change report does not need one.
    let x = exec(&env, &["--no-checkpoint", "--", "touch", "other.txt"]);
    assert!(x.env["checkpoint"].is_null());
    assert_eq!(change_set(&x.env), set(&[("added", "/other.txt")]));
    // --checkpoint forces one for a read-only command.
    let x = exec(&env, &["--checkpoint", "--", "ls"]);
    assert!(x.env["checkpoint"].is_string());
    assert_eq!(x.env["decision"]["action"], "allow");
}

#[test]
fn destructive_takes_a_checkpoint_and_reports_deletions() {
    if !can_mount("destructive_takes_a_checkpoint_and_reports_deletions") {
        return;
    }
    let env = setup();
    env.ok(&["--vault", "t", "write", "-p", "dir/x/y.txt", "y\n"]);
    env.ok(&["--vault", "t", "write", "dir/z.txt", "z\n"]);
    let x = exec(&env, &["--shell", "rm -rf dir"]);
    let e = &x.env;
    assert_eq!(x.code, 0, "{e}");
    assert_eq!(e["decision"]["action"], "allow_with_checkpoint");
    assert_eq!(categories(e), ["destructive"]);
    assert_eq!(e["decision"]["matched_rule"], "rm-recursive-or-force");
    let cp = e["checkpoint"].as_str().unwrap();
    assert!(checkpoint_names(&env, "t").contains(&cp.to_string()));
    assert_eq!(
        change_set(e),
        set(&[
            ("deleted", "/dir"),
            ("deleted", "/dir/x"),
            ("deleted", "/dir/x/y.txt"),
            ("deleted", "/dir/z.txt"),
        ])
    );
    assert_eq!(e["change_summary"]["deleted"], 4);
    let y = change(e, "/dir/x/y.txt");
    assert_eq!(y["size_before"], 2);
    assert!(y["size_after"].is_null());
    assert!(!exists(&env, "t", "dir"));
    // What was deleted is in the checkpoint.
    env.ok(&["--vault", "t", "checkpoint", "restore", cp]);
    assert_eq!(env.cat(Some("t"), "dir/x/y.txt"), "y\n");
}

#[test]
fn networked_requires_approval_and_runs_nothing() {
    let env = setup();
    let before = checkpoint_names(&env, "t");
    let mut ids = BTreeSet::new();
    for (i, cmd) in [
        vec!["curl", "x"],
        vec!["git", "push"],
        vec!["npm", "install", "x"],
        vec!["pip", "install", "x"],
        vec!["cargo", "add", "x"],
    ]
    .into_iter()
    .enumerate()
    {
        // As argv...
        let mut args = vec!["--"];
        args.extend(cmd.iter());
        let x = exec(&env, &args);
        let e = &x.env;
        assert_eq!(x.code, 75, "{cmd:?}: {e}");
        assert_eq!(e["decision"]["action"], "require_approval", "{cmd:?}");
        assert_eq!(categories(e), ["networked"], "{cmd:?}");
        assert_nothing_ran(e);
        let ap = &e["approval"];
        assert_eq!(ap["state"], "pending");
        assert!(ap["expires_at_ns"].as_i64().unwrap() > 0);
        assert!(
            ids.insert(ap["id"].as_str().unwrap().to_string()),
            "ids are unique"
        );
        // ...and after a command that would leave a trace if the line ran at all.
        let line = format!("touch ran{i}.txt; {}", cmd.join(" "));
        let x = exec(&env, &["--shell", &line]);
        assert_eq!(x.code, 75, "{line}: {}", x.env);
        assert!(categories(&x.env).contains(&"networked".to_string()));
        assert_nothing_ran(&x.env);
        assert!(!exists(&env, "t", &format!("ran{i}.txt")), "{line} ran");
    }
    assert_eq!(checkpoint_names(&env, "t"), before);
    let listed = env.json(&["--vault", "t", "approvals"]);
    assert_eq!(listed["approvals"].as_array().unwrap().len(), 10);
}

/// Without the sandbox (the strict reading), host paths are denied; avfs's own files
/// are denied in any run.
#[test]
fn host_escape_is_denied_and_runs_nothing() {
    let env = setup();
    for (line, strict) in [
        ("cat /etc/passwd", true),
        ("ls ~/.ssh", true),
        ("cd / && ls", true),
        ("ls ../../..", true),
        ("cat $AVFS_HOME/policy.toml", false),
        ("cp t.avfs stolen", false),
    ] {
        for l in [line.to_string(), format!("touch ran.txt; {line}")] {
            let mut args = vec!["--shell", l.as_str()];
            if strict {
                args.insert(0, "--no-sandbox");
            }
            let x = exec(&env, &args);
            let e = &x.env;
            assert_eq!(x.code, 126, "{l}: {e}");
            assert_eq!(e["decision"]["action"], "deny", "{l}");
            assert!(
                categories(e).contains(&"host_escape_risk".to_string()),
                "{l}: {e}"
            );
            assert!(e["approval"].is_null(), "a denied command gets no approval");
            assert_nothing_ran(e);
            assert!(!exists(&env, "t", "ran.txt"), "{l} ran");
        }
    }
    // argv form too, and from a subdirectory `..` stays inside but `../..` does not.
    assert_eq!(
        exec(&env, &["--no-sandbox", "--", "cat", "/etc/passwd"]).code,
        126
    );
    assert_eq!(
        exec(&env, &["--no-sandbox", "--cwd", "sub", "--", "ls", "../.."]).code,
        126
    );
    let denies = audit_entries(&env, "t")
        .into_iter()
        .filter(|a| a["action"] == "exec.deny")
        .collect::<Vec<_>>();
    assert_eq!(denies.len(), 14);
    for d in &denies {
        assert_envelope(&d["detail"]);
    }
    assert!(
        env.json(&["--vault", "t", "approvals"])["approvals"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

// ---------------------------------------------------------------- shell parsing

#[test]
fn shell_lines_are_parsed_and_the_strictest_finding_wins() {
    let env = setup();
    // (line, action, categories that must be among the decision's)
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "cd .. && curl x",
            "deny",
            &["networked", "host_escape_risk"],
        ),
        (
            "echo $(curl x)",
            "require_approval",
            &["read_only", "networked"],
        ),
        (
            "echo `curl x`",
            "require_approval",
            &["read_only", "networked"],
        ),
        ("echo \"$(cat /etc/passwd)\"", "deny", &["host_escape_risk"]),
        (
            "ls | curl -d @- x",
            "require_approval",
            &["read_only", "networked"],
        ),
        (
            "cat a.txt | sh -c 'wget y'",
            "require_approval",
            &["networked"],
        ),
        (
            "(cd sub && ls) || wget y",
            "require_approval",
            &["networked"],
        ),
        ("git -C /etc status", "deny", &["host_escape_risk"]),
        ("sudo ls", "deny", &["host_escape_risk"]),
        ("env X=1 curl y", "require_approval", &["networked"]),
        ("echo x > /tmp/out", "deny", &["host_escape_risk"]),
        ("xargs curl < urls.txt", "require_approval", &["networked"]),
        ("find . -exec curl {} ;", "require_approval", &["networked"]),
        ("echo 'unterminated", "require_approval", &["unknown"]),
        ("cat <<EOF", "require_approval", &["unknown"]),
        ("frobnicate --all", "require_approval", &["unknown"]),
    ];
    // The strict reading (`--no-sandbox`): a default run trusts the sandbox for host
    // paths (tests/policy.rs).
    for (line, action, cats) in cases {
        let x = exec(&env, &["--no-sandbox", "--shell", line]);
        let e = &x.env;
        assert_eq!(e["decision"]["action"], *action, "{line}: {e}");
        for c in *cats {
            assert!(
                categories(e).contains(&c.to_string()),
                "{line}: no {c}: {e}"
            );
        }
        assert_eq!(x.code, if *action == "deny" { 126 } else { 75 }, "{line}");
        assert_nothing_ran(e);
        assert_eq!(e["approval"].is_null(), *action == "deny", "{line}");
        // `policy check` says the same.
        let d = env.json(&[
            "--vault",
            "t",
            "policy",
            "check",
            "--no-sandbox",
            "--shell",
            line,
        ]);
        assert_eq!(d["action"], e["decision"]["action"], "{line}");
        assert_eq!(d["categories"], e["decision"]["categories"], "{line}");
    }
    // Unparseable lines fail closed with the rule that says so.
    let x = exec(&env, &["--shell", "echo 'unterminated"]);
    assert_eq!(x.env["decision"]["matched_rule"], "unparseable");
    assert_eq!(categories(&x.env), ["unknown"]);
    assert!(x.env["approval"]["id"].is_string());
    // Policy-only cases, decided without running anything.
    for (line, action, cat) in [
        (
            "bash -c \"rm -rf .\"",
            "allow_with_checkpoint",
            "destructive",
        ),
        (
            "find . -name '*.o' -delete",
            "allow_with_checkpoint",
            "destructive",
        ),
        ("git -C sub status", "allow", "read_only"),
        ("git -C sub push", "require_approval", "networked"),
        ("ls > /dev/null 2>&1", "allow", "read_only"),
        ("cat a.txt | grep h | wc -l", "allow", "read_only"),
    ] {
        let d = env.json(&["--vault", "t", "policy", "check", "--shell", line]);
        assert_eq!(d["action"], action, "{line}: {d}");
        assert!(
            strs(&d["categories"]).contains(&cat.to_string()),
            "{line}: {d}"
        );
    }
    let d = env.json(&[
        "--vault",
        "t",
        "policy",
        "check",
        "--shell",
        "git -C sub status",
    ]);
    assert_eq!(
        strs(&d["categories"]),
        ["read_only"],
        "git -C is not mutating: {d}"
    );
}

#[test]
fn shell_lines_that_run() {
    if !can_mount("shell_lines_that_run") {
        return;
    }
    let env = setup();
    env.ok(&["--vault", "t", "write", "-p", "gone/one.o", "1"]);
    env.ok(&["--vault", "t", "write", "gone/two.o", "2"]);
    env.ok(&["--vault", "t", "write", "-p", "victim/v.txt", "v"]);

    // A redirection makes echo mutating.
    let x = exec(&env, &["--shell", "echo x > f"]);
    assert_eq!(x.code, 0, "{}", x.env);
    assert_eq!(x.env["decision"]["action"], "allow_with_checkpoint");
    assert_eq!(x.env["decision"]["matched_rule"], "redirect-write");
    assert!(categories(&x.env).contains(&"mutating".to_string()));
    assert!(x.env["checkpoint"].is_string());
    assert_eq!(change_set(&x.env), set(&[("added", "/f")]));
    assert_eq!(env.cat(Some("t"), "f"), "x\n");

    // sh -c is parsed recursively: destructive, checkpointed.
    let x = exec(
        &env,
        &["--cwd", "victim", "--shell", "bash -c \"rm -rf .\""],
    );
    assert_eq!(x.env["decision"]["action"], "allow_with_checkpoint");
    assert!(categories(&x.env).contains(&"destructive".to_string()));
    assert!(x.env["checkpoint"].is_string());
    let x = exec(&env, &["--", "bash", "-c", "rm -rf victim"]);
    assert!(categories(&x.env).contains(&"destructive".to_string()));
    assert_eq!(
        change_set(&x.env),
        set(&[("deleted", "/victim"), ("deleted", "/victim/v.txt")])
    );

    // find -delete is destructive.
    let x = exec(
        &env,
        &["--cwd", "gone", "--shell", "find . -name '*.o' -delete"],
    );
    assert_eq!(x.code, 0, "{}", x.env);
    assert_eq!(x.env["decision"]["matched_rule"], "find-delete");
    assert!(x.env["checkpoint"].is_string());
    assert_eq!(
        change_set(&x.env),
        set(&[("deleted", "/gone/one.o"), ("deleted", "/gone/two.o")])
    );

    // Pipelines and command substitution run when every part is allowed.
    let x = exec(&env, &["--shell", "cat a.txt sub/b.txt | wc -l"]);
    assert_eq!(x.env["decision"]["action"], "allow");
    assert_eq!(x.env["result"]["stdout"].as_str().unwrap().trim(), "2");
    let x = exec(&env, &["--shell", "echo \"$(cat a.txt)-`cat sub/b.txt`\""]);
    assert_eq!(x.env["decision"]["action"], "allow");
    assert_eq!(x.env["result"]["stdout"], "hi-bee\n");
}

// ---------------------------------------------------------------- timeouts, rollback

#[test]
fn timeout_ends_a_process_that_ignores_sigterm() {
    if !can_mount("timeout_ends_a_process_that_ignores_sigterm") {
        return;
    }
    let env = setup();
    let start = Instant::now();
    let x = exec(
        &env,
        &[
            "--timeout",
            "1",
            "--shell",
            "echo before > early.txt; trap \"\" TERM; sleep 30",
        ],
    );
    let took = start.elapsed();
    let e = &x.env;
    assert_eq!(x.code, 124, "{e}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let r = &e["result"];
    assert_eq!(r["timed_out"], true);
    assert!(r["exit_code"].is_null(), "{r}");
    assert_eq!(r["signal"], 9, "SIGTERM was ignored, so SIGKILL: {r}");
    let ms = r["duration_ms"].as_u64().unwrap();
    assert!((1000..8000).contains(&ms), "duration {ms} ms");
    // What happened before the timeout is reported and kept.
    assert_eq!(change_set(e), set(&[("added", "/early.txt")]));
    assert_eq!(env.cat(Some("t"), "early.txt"), "before\n");

    // A process that obeys SIGTERM ends without the grace period.
    let start = Instant::now();
    let x = exec(&env, &["--timeout", "0.5", "--", "sleep", "30"]);
    assert_eq!(x.code, 124);
    assert_eq!(x.env["result"]["signal"], 15, "{}", x.env);
    // (Waiting out the 2 s grace period would make it at least 2.5 s.)
    assert!(
        start.elapsed() < Duration::from_millis(2400),
        "{:?}",
        start.elapsed()
    );

    // A background job left in the group is ended when the command exits.
    let start = Instant::now();
    let x = exec(&env, &["--shell", "sleep 30 & echo started"]);
    assert_eq!(x.code, 0);
    assert_eq!(x.env["result"]["lingering_processes_killed"], true);
    assert_eq!(x.env["result"]["stdout"], "started\n");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
}

/// A daemon that leaves the command's process group (setsid, with or without its
/// environment) is ended when the command exits or times out, and reported.
#[test]
fn a_daemon_that_leaves_the_process_group_is_ended_and_reported() {
    if !can_mount("a_daemon_that_leaves_the_process_group_is_ended_and_reported") {
        return;
    }
    let env = setup();
    std::fs::write(
        env.home().join("policy.toml"),
        "[[rule]]\nname = \"setsid\"\nprogram = \"setsid\"\ncategory = \"mutating\"\ndecision = \"allow\"\n",
    )
    .unwrap();
    let cases = [
        // Keeps the marker in its environment.
        (
            "setsid sleep 601 & sleep 0.3; echo started",
            "sleep 601",
            None,
        ),
        // Clears its environment: found because it became our child.
        (
            "setsid env -i sleep 602 & sleep 0.3; echo started",
            "sleep 602",
            None,
        ),
        // Ignores SIGTERM, and the command times out.
        (
            "setsid sh -c 'trap \"\" TERM; sleep 603' & sleep 30",
            "sleep 603",
            Some("1"),
        ),
    ];
    for (line, daemon, timeout) in cases {
        let mut args = vec![];
        if let Some(t) = timeout {
            args.extend(["--timeout", t]);
        }
        args.extend(["--shell", line]);
        let start = Instant::now();
        let x = exec(&env, &args);
        let r = &x.env["result"];
        assert_eq!(r["timed_out"], timeout.is_some(), "{line}: {r}");
        let escaped = r["escaped_processes"].as_array().unwrap();
        let found: Vec<&Value> = escaped.iter().filter(|p| p["command"] == daemon).collect();
        assert_eq!(found.len(), 1, "{line}: {r}");
        // The PIDs are the run's own (it has a PID namespace): look for the command line.
        let left = std::process::Command::new("pgrep")
            .args(["-f", &format!("^{daemon}$")])
            .output()
            .unwrap();
        assert!(
            left.stdout.is_empty(),
            "{line}: {daemon} still runs: {}",
            String::from_utf8_lossy(&left.stdout)
        );
        // SIGTERM first, SIGKILL after the 2 s grace period.
        assert!(
            start.elapsed() < Duration::from_secs(8),
            "{line}: {:?}",
            start.elapsed()
        );
    }
    // A run without daemons reports none.
    let x = exec(&env, &["--", "true"]);
    assert_eq!(x.env["result"]["escaped_processes"], json!([]));
    eprintln!(
        "RELIABILITY|exec_cli|exec|a command that starts a daemon with `setsid` and exits (the daemon keeps or clears its environment), or times out while its daemon ignores SIGTERM|3|the daemon is ended (SIGTERM, SIGKILL after 2 s) and listed in result.escaped_processes; none left running"
    );
}

/// A command that prints a gigabyte: the capture keeps its first MiB, and avfs exec's
/// memory stays small (the rest is counted and dropped).
#[test]
fn a_gigabyte_of_output_keeps_capture_and_memory_bounded() {
    if !can_mount("a_gigabyte_of_output_keeps_capture_and_memory_bounded") {
        return;
    }
    let env = setup();
    #[allow(clippy::zombie_processes)] // reaped below with wait4
    let child = env
        .cmd([
            "--json",
            "--vault",
            "t",
            "exec",
            "--shell",
            "yes | head -c 1073741824; echo done >&2",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    // Read the pipes while waiting with wait4, which gives the process's own peak RSS.
    let (mut so, mut se) = (child.stdout.unwrap(), child.stderr.unwrap());
    let out = std::thread::spawn(move || {
        let mut v = vec![];
        std::io::Read::read_to_end(&mut so, &mut v).unwrap();
        v
    });
    let err = std::thread::spawn(move || {
        let mut v = vec![];
        std::io::Read::read_to_end(&mut se, &mut v).unwrap();
        v
    });
    let mut status = 0;
    // SAFETY: zeroed rusage filled in by wait4 for our own child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::wait4(pid, &mut status, 0, &mut ru) }, pid);
    let out = out.join().unwrap();
    let _ = err.join().unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_envelope(&v);
    let r = &v["result"];
    assert_eq!(r["exit_code"], 0, "{r}");
    assert_eq!(r["stdout_bytes"], 1u64 << 30);
    assert_eq!(r["stdout_truncated"], true);
    // The first and the last 8 KiB, and a line saying what was dropped between.
    let kept = 2 * 8 * 1024;
    assert_eq!(r["stdout_omitted"], (1u64 << 30) - kept);
    let text = r["stdout"].as_str().unwrap();
    let marker = format!(
        "[avfs: {} bytes of stdout omitted here; 1073741824 in all]\n",
        (1u64 << 30) - kept
    );
    assert_eq!(text.len(), kept as usize + marker.len());
    assert!(text.starts_with("y\ny\n") && text.ends_with("y\ny\n"));
    assert_eq!(text.matches(&marker).count(), 1);
    assert_eq!(r["stderr"], "done\n");
    // "y\n" is three characters in JSON.
    assert!(out.len() < 512 * 1024, "envelope of {} bytes", out.len());
    // ru_maxrss is in KiB: the largest of avfs exec and the children it waited for (the
    // shell, head, the mount server).
    assert!(
        ru.ru_maxrss < 200 * 1024,
        "peak RSS {} MiB while 1 GiB of output went by",
        ru.ru_maxrss / 1024
    );
    eprintln!(
        "RELIABILITY|exec_cli|exec|a command that prints 1 GiB|1|capture = its first and last 8 KiB, 16 MiB of it on disk (stdout_bytes counts all, stdout_omitted the middle), envelope < 512 KiB, peak RSS of avfs exec and its waited-for children {} MiB",
        ru.ru_maxrss / 1024
    );
}

/// A command that deletes the mountpoint's parent (`$AVFS_HOME/run/exec`) or its
/// grandparent (`$AVFS_HOME/run`, with the mount records and control sockets): what it
/// deleted in the workspace is reported, exec still ends its mount and reports, the
/// vault verifies, and the next exec works.
#[test]
fn a_command_that_deletes_the_mountpoints_parent() {
    if !can_mount("a_command_that_deletes_the_mountpoints_parent") {
        return;
    }
    let env = setup();
    for (up, what) in [(1, "parent"), (2, "grandparent")] {
        env.ok(&["--vault", "t", "write", "a.txt", "hi\n"]);
        let line = format!(
            "echo new > n.txt; python3 -c 'import os, shutil; d = os.getcwd()\nfor _ in range({up}): d = os.path.dirname(d)\nshutil.rmtree(d, ignore_errors=True)'; echo after > after.txt"
        );
        let x = exec(&env, &["--shell", &line]);
        let e = &x.env;
        assert_eq!(x.code, 0, "{what}: {e}");
        // rmtree went through the mount too: the workspace's files are gone, reported.
        let changes = change_set(e);
        assert!(
            changes.contains(&("deleted".into(), "/a.txt".into())),
            "{what}: {e}"
        );
        assert!(
            changes.contains(&("added".into(), "/after.txt".into())),
            "{what}: {e}"
        );
        assert_eq!(env.cat(Some("t"), "after.txt"), "after\n");
        let mounts = env.json(&["mounts"]);
        assert_eq!(mounts["mounts"], json!([]), "{what}: {mounts}");
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(
            !info.contains(env.home().to_str().unwrap()),
            "{what}: a mount under AVFS_HOME is left"
        );
        assert_eq!(
            env.json(&["--vault", "t", "vault", "verify"])["report"]["ok"],
            true
        );
        // The checkpoint taken before has everything back.
        let cp = e["checkpoint"].as_str().unwrap();
        env.ok(&["--vault", "t", "checkpoint", "restore", cp]);
        assert_eq!(env.cat(Some("t"), "a.txt"), "hi\n");
        assert_eq!(exec(&env, &["--", "cat", "a.txt"]).code, 0);
    }
    eprintln!(
        "RELIABILITY|exec_cli|exec|a command that deletes the mountpoint's parent, and its grandparent (mount records, control sockets)|2|exit 0 with a full envelope; the deletions it made through the mount reported; no mount left; verify ok; the checkpoint restores everything; the next exec works"
    );
}

#[test]
fn rollback_on_failure_restores_the_checkpoint() {
    if !can_mount("rollback_on_failure_restores_the_checkpoint") {
        return;
    }
    let env = setup();
    let x = exec(
        &env,
        &[
            "--rollback-on-failure",
            "--shell",
            "echo x > made.txt; echo more >> a.txt; exit 1",
        ],
    );
    let e = &x.env;
    assert_eq!(x.code, 1, "{e}");
    assert_eq!(e["rollback"]["requested"], true);
    assert_eq!(e["rollback"]["performed"], true);
    let cp = e["checkpoint"].as_str().unwrap();
    assert_eq!(e["rollback"]["checkpoint"], cp);
    assert_eq!(
        change_set(e),
        set(&[("added", "/made.txt"), ("modified", "/a.txt")])
    );
    assert!(
        change(e, "/a.txt")["patch"]
            .as_str()
            .unwrap()
            .contains("+more")
    );
    let r = env.run(&["--vault", "t", "cat", "made.txt"]);
    assert_ne!(r.code, 0, "made.txt survived the rollback");
    assert_eq!(env.cat(Some("t"), "a.txt"), "hi\n");

    // Even a read-only command gets a checkpoint to roll back to.
    let x = exec(&env, &["--rollback-on-failure", "--", "ls", "no-such-file"]);
    assert_ne!(x.code, 0);
    assert!(x.env["checkpoint"].is_string());
    assert_eq!(x.env["rollback"]["performed"], true);

    // A timeout is a failure too.
    let x = exec(
        &env,
        &[
            "--rollback-on-failure",
            "--timeout",
            "0.5",
            "--shell",
            "echo t > slow.txt; sleep 30",
        ],
    );
    assert_eq!(x.code, 124);
    assert_eq!(x.env["rollback"]["performed"], true);
    assert_eq!(change_set(&x.env), set(&[("added", "/slow.txt")]));
    assert!(!exists(&env, "t", "slow.txt"));

    // Success: nothing is rolled back.
    let x = exec(
        &env,
        &["--rollback-on-failure", "--shell", "echo y > kept.txt"],
    );
    assert_eq!(x.code, 0);
    assert_eq!(x.env["rollback"]["requested"], true);
    assert_eq!(x.env["rollback"]["performed"], false);
    assert!(x.env["rollback"]["checkpoint"].is_null());
    assert_eq!(env.cat(Some("t"), "kept.txt"), "y\n");

    // Without the flag a failure keeps its changes.
    let x = exec(&env, &["--shell", "echo z > failed.txt; exit 3"]);
    assert_eq!(x.code, 3);
    assert_eq!(x.env["rollback"]["requested"], false);
    assert_eq!(x.env["rollback"]["performed"], false);
    assert_eq!(env.cat(Some("t"), "failed.txt"), "z\n");
}

// ---------------------------------------------------------------- forks

#[test]
fn ephemeral_forks_leave_nothing_behind() {
    if !can_mount("ephemeral_forks_leave_nothing_behind") {
        return;
    }
    let env = setup();
    env.ok(&["--vault", "t", "checkpoint", "save", "base"]);
    // Unsaved changes in the source: forking must not checkpoint them.
    env.ok(&["--vault", "t", "write", "unsaved.txt", "u\n"]);
    let vaults = env.json(&["vault", "list"]);
    let cps = checkpoint_names(&env, "t");
    let tree = env.ok(&["--vault", "t", "tree"]).stdout;
    let x = exec(
        &env,
        &[
            "--ephemeral",
            "--shell",
            "echo e > eph.txt && rm a.txt && cat unsaved.txt",
        ],
    );
    let e = &x.env;
    assert_eq!(x.code, 0, "{e}");
    let name = e["request"]["vault"].as_str().unwrap().to_string();
    assert!(name.starts_with("eph-"), "{name}");
    assert_eq!(e["request"]["workspace"], name.as_str());
    assert_eq!(e["request"]["options"]["ephemeral"], true);
    assert_eq!(
        e["result"]["stdout"], "u\n",
        "the fork starts from the live state"
    );
    assert_eq!(
        change_set(e),
        set(&[("added", "/eph.txt"), ("deleted", "/a.txt")])
    );
    assert_eq!(env.json(&["vault", "list"]), vaults, "vault list changed");
    assert_eq!(
        checkpoint_names(&env, "t"),
        cps,
        "source checkpoints changed"
    );
    assert_eq!(
        env.ok(&["--vault", "t", "tree"]).stdout,
        tree,
        "source changed"
    );
    assert_ne!(
        env.run(&["--vault", &name, "ls"]).code,
        0,
        "{name} still usable"
    );
    // Denied or failing to start: nothing either.
    assert_eq!(exec(&env, &["--ephemeral", "--", "sudo", "ls"]).code, 126);
    let err = exec_error(&env, &["--ephemeral", "--cwd", "nope", "--", "ls"]);
    assert_eq!(err["kind"], "not_found", "{err}");
    assert_eq!(env.json(&["vault", "list"]), vaults);
    assert_eq!(checkpoint_names(&env, "t"), cps);

    // --keep keeps it, with what the command did.
    let x = exec(
        &env,
        &["--ephemeral", "--keep", "--shell", "echo k > kept.txt"],
    );
    assert_eq!(x.code, 0);
    let kept = x.env["request"]["vault"].as_str().unwrap().to_string();
    assert!(vault_names(&env).contains(&kept));
    assert_eq!(env.cat(Some(&kept), "kept.txt"), "k\n");
    assert_eq!(env.cat(Some(&kept), "unsaved.txt"), "u\n");
    assert!(!exists(&env, "t", "kept.txt"));
    assert_eq!(env.ok(&["--vault", "t", "tree"]).stdout, tree);
}

#[test]
fn fork_is_created_then_reused() {
    if !can_mount("fork_is_created_then_reused") {
        return;
    }
    let env = setup();
    let x = exec(&env, &["--fork", "task", "--shell", "echo 1 > one.txt"]);
    assert_eq!(x.code, 0, "{}", x.env);
    assert_eq!(x.env["request"]["vault"], "task");
    assert_eq!(x.env["request"]["workspace"], "task");
    assert_eq!(x.env["request"]["options"]["fork"], "task");
    assert!(vault_names(&env).contains(&"task".to_string()));
    let x = exec(
        &env,
        &[
            "--fork",
            "task",
            "--shell",
            "echo 2 > two.txt && cat one.txt",
        ],
    );
    assert_eq!(x.code, 0, "{}", x.env);
    assert_eq!(x.env["result"]["stdout"], "1\n", "the fork was not reused");
    assert_eq!(change_set(&x.env), set(&[("added", "/two.txt")]));
    let x = exec(&env, &["--fork", "task", "--shell", "rm a.txt"]);
    assert_eq!(x.code, 0);
    assert_eq!(env.cat(Some("task"), "two.txt"), "2\n");
    // The source sees none of it.
    for p in ["one.txt", "two.txt"] {
        assert!(!exists(&env, "t", p), "{p} leaked into the source");
    }
    assert_eq!(env.cat(Some("t"), "a.txt"), "hi\n");
    // A denied command creates no fork; a name taken by another vault is refused.
    assert_eq!(
        exec(&env, &["--fork", "never", "--", "sudo", "ls"]).code,
        126
    );
    assert!(!vault_names(&env).contains(&"never".to_string()));
    env.ok(&["vault", "create", "other"]);
    let err = exec_error(&env, &["--fork", "other", "--", "ls"]);
    assert_eq!(err["kind"], "refused", "{err}");
}

// ---------------------------------------------------------------- the change report

#[test]
fn change_report_has_exactly_the_expected_kinds() {
    if !can_mount("change_report_has_exactly_the_expected_kinds") {
        return;
    }
    let env = setup();
    let w = |p: &str, c: &str| {
        env.ok(&["--vault", "t", "write", p, c]);
    };
    w("edit.txt", "line1\nline2\nline3\n");
    w("del.txt", "delete me\n");
    w("ren.txt", "rename me\n");
    w("mode.sh", "#!/bin/sh\n");
    w("repl", "a file, then a directory\n");
    env.ok(&["--vault", "t", "chmod", "644", "mode.sh"]);
    let line = "echo new > created.txt && printf 'line1\\nCHANGED\\nline3\\n' > edit.txt \
                && rm del.txt && mv ren.txt renamed.txt && chmod 755 mode.sh \
                && rm repl && mkdir repl && echo inner > repl/inside.txt";
    let x = exec(&env, &["--shell", line]);
    let e = &x.env;
    assert_eq!(x.code, 0, "{e}");
    assert_eq!(
        change_set(e),
        set(&[
            ("added", "/created.txt"),
            ("modified", "/edit.txt"),
            ("deleted", "/del.txt"),
            ("renamed", "/renamed.txt"),
            ("mode_changed", "/mode.sh"),
            ("type_changed", "/repl"),
            ("added", "/repl/inside.txt"),
        ])
    );
    assert_eq!(e["changes"].as_array().unwrap().len(), 7, "duplicates: {e}");
    assert_eq!(
        e["change_summary"],
        json!({"added": 2, "modified": 1, "deleted": 1, "type_changed": 1, "mode_changed": 1,
               "meta_changed": 0, "renamed": 1, "total": 7,
               "ignored": {"files": 0, "bytes": 0}})
    );
    // The move is one rename (same content: 100 %), from its old path.
    let ren = change(e, "/renamed.txt");
    assert_eq!(
        (&ren["from"], &ren["similarity"]),
        (&json!("/ren.txt"), &json!(100))
    );
    assert!(
        ren.get("patch").is_none(),
        "an unedited rename has no patch: {ren}"
    );
    let edit = change(e, "/edit.txt");
    assert_eq!(edit["size_before"], 18);
    assert_eq!(edit["size_after"], 20);
    let patch = edit["patch"]
        .as_str()
        .expect("a unified diff for a small text file");
    assert!(
        patch.starts_with("--- a/edit.txt\n+++ b/edit.txt\n"),
        "{patch}"
    );
    assert!(
        patch.contains("\n-line2\n") && patch.contains("\n+CHANGED\n"),
        "{patch}"
    );
    assert!(patch.contains(" line1\n"), "context lines: {patch}");
    let m = change(e, "/mode.sh");
    assert_eq!(
        (m["mode_before"].as_str(), m["mode_after"].as_str()),
        (Some("0644"), Some("0755"))
    );
    assert!(m.get("patch").is_none(), "no patch for a mode change");
    let r = change(e, "/repl");
    assert_eq!(
        (r["type_before"].as_str(), r["type_after"].as_str()),
        (Some("file"), Some("dir"))
    );
    assert_eq!(r["size_before"], 25);
    assert!(r["size_after"].is_null());
    let d = change(e, "/del.txt");
    assert_eq!(d["size_before"], 10);
    assert!(d["patch"].as_str().unwrap().contains("-delete me"));
    // Paths are sorted.
    let paths: Vec<&str> = e["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    let mut sorted = paths.clone();
    sorted.sort();
    assert_eq!(paths, sorted);
    // The same report as `avfs diff` from the checkpoint.
    let cp = e["checkpoint"].as_str().unwrap();
    let diff = env.json(&["--vault", "t", "diff", cp]);
    assert_eq!(
        common::changes(&diff).into_iter().collect::<BTreeSet<_>>(),
        change_set(e)
    );

    // A large or binary file gets no patch.
    let x = exec(&env, &["--shell", "head -c 100000 /dev/zero > big.bin"]);
    assert!(change(&x.env, "/big.bin").get("patch").is_none());
    assert_eq!(change(&x.env, "/big.bin")["size_after"], 100000);
}

#[test]
fn diff_shows_changes_since_the_last_saved_checkpoint_and_head_those_of_the_last_exec() {
    if !can_mount("diff_shows_changes_since_the_last_saved_checkpoint") {
        return;
    }
    let env = setup();
    env.ok(&["--vault", "t", "checkpoint", "save", "c1"]);
    env.ok(&["--vault", "t", "write", "c.txt", "unsaved\n"]);
    let x = exec(&env, &["--shell", "echo d > d.txt"]);
    assert_eq!(x.code, 0, "{}", x.env);
    let before = x.env["checkpoint"]
        .as_str()
        .expect("exec took a checkpoint");
    let names = |d: &Value| -> Vec<String> {
        d["changes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["path"].as_str().unwrap().to_string())
            .collect()
    };
    // Plain diff: since c1, the last checkpoint someone saved, not exec's own.
    let d = env.json(&["--vault", "t", "diff"]);
    assert_eq!(d["from"], "c1", "{d}");
    assert_eq!(names(&d), ["/c.txt", "/d.txt"]);
    // --head: since the checkpoint exec took, i.e. what the last exec changed.
    let d = env.json(&["--vault", "t", "diff", "--head"]);
    assert_eq!(d["from"], before, "{d}");
    assert_eq!(names(&d), ["/d.txt"]);
    let help = env.ok(&["diff", "--help"]).stdout;
    assert!(help.contains("saved") && help.contains("--head"), "{help}");
    // Nothing saved by anyone: everything is unsaved, from the empty tree.
    let env = setup();
    let x = exec(&env, &["--shell", "echo d > d.txt"]);
    assert_eq!(x.code, 0, "{}", x.env);
    let d = env.json(&["--vault", "t", "diff"]);
    assert_eq!(d["from"], "(empty)", "{d}");
    assert_eq!(names(&d), ["/a.txt", "/d.txt", "/sub", "/sub/b.txt"]);
}

// ---------------------------------------------------------------- environment, cwd

#[test]
fn command_environment_and_cwd() {
    if !can_mount("command_environment_and_cwd") {
        return;
    }
    let env = setup();
    let x = exec(
        &env,
        &[
            "--checkpoint",
            "--env",
            "FOO=bar=baz",
            "--env",
            "EMPTY=",
            "--cwd",
            "sub",
            "--shell",
            "echo \"$AVFS_VAULT|$AVFS_WORKSPACE|$AVFS_CHECKPOINT|$FOO|${EMPTY-unset}|$(pwd)\"; cat b.txt",
        ],
    );
    let e = &x.env;
    assert_eq!(x.code, 0, "{e}");
    let mp = e["mountpoint"].as_str().unwrap();
    let cp = e["checkpoint"].as_str().unwrap();
    assert_eq!(
        e["result"]["stdout"],
        format!("t|main|{cp}|bar=baz||{mp}/sub\nbee\n")
    );
    assert_eq!(e["request"]["cwd"], "/sub");
    assert_eq!(
        e["request"]["options"]["env"],
        json!(["FOO=bar=baz", "EMPTY="])
    );
    // Without a checkpoint AVFS_CHECKPOINT is empty; in a fork the names are the fork's.
    let x = exec(
        &env,
        &[
            "--fork",
            "f",
            "--",
            "printenv",
            "AVFS_VAULT",
            "AVFS_WORKSPACE",
            "AVFS_CHECKPOINT",
        ],
    );
    assert_eq!(x.env["result"]["stdout"], "f\nf\n\n");
    // --cwd: normalized, inside the workspace only, and a directory.
    let x = exec(&env, &["--cwd", "/sub/../sub/./", "--", "pwd"]);
    assert_eq!(x.env["request"]["cwd"], "/sub");
    assert!(
        x.env["result"]["stdout"]
            .as_str()
            .unwrap()
            .ends_with("/sub\n")
    );
    for bad in ["../..", "..", "sub/../.."] {
        let err = exec_error(&env, &["--cwd", bad, "--", "ls"]);
        assert_eq!(err["kind"], "invalid_argument", "--cwd {bad}: {err}");
    }
    let err = exec_error(&env, &["--cwd", "a.txt", "--", "ls"]);
    assert_eq!(err["kind"], "not_a_directory", "{err}");
    // A symlink must not carry the command out of the workspace.
    env.ok(&["--vault", "t", "ln", "-s", "/etc", "hostetc"]);
    let err = exec_error(&env, &["--cwd", "hostetc", "--", "ls"]);
    assert_eq!(err["kind"], "not_a_directory", "{err}");
    let err = exec_error(&env, &["--env", "NOEQUALS", "--", "ls"]);
    assert_eq!(err["kind"], "invalid_argument", "{err}");
    for bad in ["-1", "0", "nan", "inf", "1e300"] {
        let t = format!("--timeout={bad}");
        let err = exec_error(&env, &[&t, "--shell", "echo x > t.txt"]);
        assert_eq!(err["kind"], "invalid_argument", "{t}: {err}");
    }
    assert!(!exists(&env, "t", "t.txt"));
    assert!(
        std::fs::read_dir(env.home().join("run/exec")).map_or(true, |mut d| d.next().is_none()),
        "a refused run left a mountpoint"
    );
    assert!(
        checkpoint_names(&env, "t").len() == 1,
        "a refused run took a checkpoint"
    );
}

#[test]
fn output_capture_is_bounded() {
    if !can_mount("output_capture_is_bounded") {
        return;
    }
    let env = setup();
    let x = exec(
        &env,
        &[
            "--shell",
            "head -c 5000000 /dev/zero | tr '\\0' x; echo oops >&2",
        ],
    );
    let r = &x.env["result"];
    assert_eq!(x.code, 0);
    assert_eq!(r["stdout_truncated"], true);
    assert_eq!(r["stdout_bytes"], 5_000_000);
    // 8 KiB head and 8 KiB tail by default (`avfs output` has the rest).
    assert_eq!(r["stdout_omitted"], 5_000_000 - 2 * 8192);
    let out = r["stdout"].as_str().unwrap();
    let (head, rest) = out.split_at(8192);
    let (marker, tail) = rest.split_at(rest.len() - 8192);
    assert!(head.bytes().chain(tail.bytes()).all(|b| b == b'x'));
    assert_eq!(
        marker,
        "\n[avfs: 4983616 bytes of stdout omitted here; 5000000 in all]\n"
    );
    assert_eq!(r["stderr"], "oops\n");
    assert_eq!(r["stderr_truncated"], false);
    assert_eq!(r["stderr_bytes"], 5);
    assert!(
        x.run.stdout.len() < (1 << 20) + 64 * 1024,
        "envelope is {} bytes",
        x.run.stdout.len()
    );
}

#[test]
fn exit_status_is_the_commands() {
    if !can_mount("exit_status_is_the_commands") {
        return;
    }
    let env = setup();
    for (args, code) in [
        (vec!["--", "sh", "-c", "exit 7"], 7),
        (vec!["--shell", "exit 42"], 42),
        (vec!["--", "false"], 1),
        (vec!["--", "true"], 0),
    ] {
        let x = exec(&env, &args);
        assert_eq!(x.code, code, "{args:?}: {}", x.env);
        assert_eq!(x.env["result"]["exit_code"], code);
        assert!(x.env["result"]["signal"].is_null());
    }
    // Killed by a signal: 128 + N. (`kill` is refused by the built-in policy: it can
    // signal host processes; this vault's policy allows it.)
    std::fs::create_dir_all(env.home().join("policies")).unwrap();
    std::fs::write(
        env.home().join("policies/t.toml"),
        "[defaults]\nhost_escape_risk = \"allow\"\n",
    )
    .unwrap();
    let x = exec(&env, &["--shell", "kill -9 $$"]);
    assert_eq!(x.code, 137, "{}", x.env);
    assert!(x.env["result"]["exit_code"].is_null());
    assert_eq!(x.env["result"]["signal"], 9);
    // A program that cannot start is reported like a shell would: 127.
    std::fs::write(
        env.home().join("policy.toml"),
        "[[rule]]\nname = \"missing\"\nprogram = \"no-such-tool-*\"\ncategory = \"mutating\"\n",
    )
    .unwrap();
    let x = exec(&env, &["--", "no-such-tool-xyz"]);
    assert_eq!(x.code, 127, "{}", x.env);
    assert!(
        x.env["result"]["stderr"]
            .as_str()
            .unwrap()
            .contains("no-such-tool-xyz")
    );
}

// ---------------------------------------------------------------- policy files

#[test]
fn user_policy_files() {
    let env = setup();
    let user = env.home().join("policy.toml");
    std::fs::create_dir_all(env.home().join("policies")).unwrap();
    let vault = env.home().join("policies/t.toml");
    std::fs::write(
        &user,
        r#"
[defaults]
destructive = "deny"

[[rule]]
name = "curl-version-is-harmless"
program = "curl"
args = ["--version"]
category = "read_only"
decision = "allow"
reason = "prints the version"
examples = ["curl --version"]
counter_examples = ["curl x"]

[[rule]]
name = "touch-needs-approval"
program = "touch"
category = "mutating"
decision = "require_approval"
examples = ["touch x", "cd sub && touch y"]
"#,
    )
    .unwrap();
    // A category decision overridden by [defaults].
    let x = exec(&env, &["--shell", "rm -rf sub"]);
    assert_eq!(x.code, 126, "{}", x.env);
    assert_eq!(x.env["decision"]["matched_rule"], "rm-recursive-or-force");
    assert!(exists(&env, "t", "sub/b.txt"));
    // A rule's own decision.
    let x = exec(&env, &["--", "touch", "x"]);
    assert_eq!(x.code, 75);
    assert_eq!(x.env["decision"]["matched_rule"], "touch-needs-approval");
    // policy check names the rule and its source.
    let d = env.json(&["--vault", "t", "policy", "check", "--", "curl", "--version"]);
    assert_eq!(d["action"], "allow", "{d}");
    assert_eq!(d["matched_rule"], "curl-version-is-harmless");
    assert_eq!(d["reason"], "prints the version");
    assert_eq!(d["findings"][0]["program"], "curl");
    let d = env.json(&["--vault", "t", "policy", "check", "--", "curl", "x"]);
    assert_eq!(d["action"], "require_approval");
    assert_eq!(d["matched_rule"], "network-tool");
    let show = env.json(&["--vault", "t", "policy", "show"]);
    assert_eq!(show["defaults"]["destructive"], "deny");
    assert!(
        show["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "touch-needs-approval" && r["source"] == user.to_str().unwrap())
    );
    // policy test: every example passes.
    let t = env.json(&["--vault", "t", "policy", "test"]);
    assert_eq!(t["ok"], true, "{t}");
    assert_eq!(t["results"].as_array().unwrap().len(), 4);

    // The vault's file takes precedence over the user's, and applies in its forks.
    std::fs::write(
        &vault,
        r#"
[defaults]
read_only = "require_approval"

[[rule]]
name = "touch-is-fine-here"
program = "touch"
category = "mutating"
examples = ["touch z"]
counter_examples = ["touch"]
"#,
    )
    .unwrap();
    let d = env.json(&["--vault", "t", "policy", "check", "--", "touch", "x"]);
    assert_eq!(d["matched_rule"], "touch-is-fine-here");
    assert_eq!(d["action"], "allow_with_checkpoint");
    for extra in [vec![], vec!["--fork", "f"], vec!["--ephemeral"]] {
        let mut args = extra.clone();
        args.extend(["--", "ls"]);
        let x = exec(&env, &args);
        assert_eq!(
            x.code, 75,
            "{extra:?}: the vault's policy was not applied: {}",
            x.env
        );
    }
    assert!(!vault_names(&env).contains(&"f".to_string()));
    // A failing counter-example: `policy test` exits 1 and says which.
    let r = env.run(&["--json", "--vault", "t", "policy", "test"]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    let t = r.json();
    assert_eq!(t["ok"], false);
    let failed: Vec<&Value> = t["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["ok"] == false)
        .collect();
    assert_eq!(failed.len(), 1, "{t}");
    assert_eq!(failed[0]["rule"], "touch-is-fine-here");
    assert_eq!(failed[0]["example"], "touch");
    assert_eq!(failed[0]["should_match"], false);
    let r = env.run(&["--vault", "t", "policy", "test"]);
    assert_eq!(r.code, 1);
    assert!(r.stdout.contains("FAIL"), "{}", r.stdout);

    // A malformed file is an error for every command that reads the policy.
    for (file, text) in [
        (&vault, "[[rule]]\nname = 1\n"),
        (&vault, "[defaults]\nnetworked = \"maybe\"\n"),
        (
            &user,
            "[[rule]]\nname = \"x\"\nprogram = \"ls\"\ncategory = \"read_only\"\nunknown_key = 1\n",
        ),
        (&user, "[[rule]]\nname = \"no-effect\"\nprogram = \"ls\"\n"),
        (&user, "this is not toml ["),
    ] {
        std::fs::write(&vault, "").unwrap();
        std::fs::write(&user, "").unwrap();
        std::fs::write(file, text).unwrap();
        for args in [
            vec!["--vault", "t", "exec", "--", "ls"],
            vec!["--vault", "t", "policy", "show"],
            vec!["--vault", "t", "policy", "check", "--", "ls"],
            vec!["--vault", "t", "policy", "test"],
        ] {
            let err = env.json_err(&args, 1);
            assert!(
                err["message"]
                    .as_str()
                    .unwrap()
                    .contains(file.file_name().unwrap().to_str().unwrap()),
                "{text:?} {args:?}: {err}"
            );
        }
    }
}

// ---------------------------------------------------------------- live mounts

/// A live `avfs mount` of the workspace stays consistent with a run: what was written
/// through it before is what the run sees, and the run's changes (and a rollback) are
/// what it shows afterwards. The run itself works at the workspace's stable path.
#[test]
fn a_live_mount_stays_consistent_with_a_run() {
    if !can_mount("a_live_mount_stays_consistent_with_a_run") {
        return;
    }
    let Some(m) = fuse::Mount::new("a_live_mount_stays_consistent_with_a_run") else {
        return;
    };
    let env = &m.env;
    // Written through the mount before exec, read by the mount once (cached): the
    // command sees it, and the mount sees the command's changes.
    std::fs::write(m.p("pre.txt"), "pre\n").unwrap();
    assert!(std::fs::read_dir(&m.mp).unwrap().count() >= 1);
    let x = exec(
        env,
        &[
            "--shell",
            "cat pre.txt && echo via-exec > seen.txt && echo more >> pre.txt",
        ],
    );
    let e = &x.env;
    assert_eq!(x.code, 0, "{e}");
    assert_eq!(e["engine"]["name"], "overlay", "{e}");
    assert_ne!(
        e["workspace_path"].as_str().unwrap(),
        std::fs::canonicalize(&m.mp).unwrap().to_str().unwrap()
    );
    assert_eq!(e["result"]["stdout"], "pre\n");
    assert_eq!(
        change_set(e),
        set(&[("added", "/seen.txt"), ("modified", "/pre.txt")])
    );
    assert_eq!(
        std::fs::read_to_string(m.p("seen.txt")).unwrap(),
        "via-exec\n"
    );
    assert_eq!(
        std::fs::read_to_string(m.p("pre.txt")).unwrap(),
        "pre\nmore\n"
    );
    assert!(
        fuse::is_mountpoint(&m.mp),
        "exec unmounted a mount it did not make"
    );
    let mounts = env.json(&["mounts"]);
    assert_eq!(mounts["mounts"].as_array().unwrap().len(), 1, "{mounts}");
    // A rollback is visible through the live mount too.
    let x = exec(
        env,
        &[
            "--rollback-on-failure",
            "--shell",
            "echo oops > oops.txt; rm pre.txt; exit 3",
        ],
    );
    assert_eq!(x.code, 3);
    assert_eq!(x.env["rollback"]["performed"], true);
    assert!(
        !m.p("oops.txt").exists(),
        "rolled-back file still visible in the mount"
    );
    assert_eq!(
        std::fs::read_to_string(m.p("pre.txt")).unwrap(),
        "pre\nmore\n"
    );
    // The FUSE engine reuses the live mount, bound at the same stable path.
    let x = exec(
        env,
        &["--engine", "fuse", "--shell", "pwd; echo f > fuse.txt"],
    );
    assert_eq!(x.code, 0, "{}", x.env);
    assert_eq!(x.env["engine"]["name"], "fuse");
    assert_eq!(
        x.env["result"]["stdout"].as_str().unwrap().trim(),
        e["workspace_path"].as_str().unwrap()
    );
    assert_eq!(std::fs::read_to_string(m.p("fuse.txt")).unwrap(), "f\n");
}

#[test]
fn a_command_that_only_tags_a_file_reports_meta_changed() {
    let env = setup();
    let x = exec(
        &env,
        &[
            "--",
            "python3",
            "-c",
            "import os; os.setxattr('a.txt', 'user.avfs.tag.reviewed', b'')",
        ],
    );
    assert_eq!(x.code, 0, "{}", x.run.stderr);
    let changes: Vec<(String, String)> = x.env["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap().into(),
                c["kind"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        changes,
        vec![("/a.txt".to_string(), "meta_changed".to_string())]
    );
    assert_eq!(x.env["change_summary"]["meta_changed"], 1);
    let tags = env.json(&["--vault", "t", "tag", "/a.txt", "other"]);
    assert!(tags.to_string().contains("reviewed"), "{tags}");
}
