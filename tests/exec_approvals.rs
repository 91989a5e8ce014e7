//! Approvals of `avfs exec`, end to end: a command the policy sends to a person runs
//! nothing until approved, then runs exactly the approved line once, where it was asked
//! (a fork, an ephemeral fork); expired, forged or foreign approvals are refused and
//! reported; `--wait-approval` waits for the person's answer. The real binary and real
//! runs; every envelope is validated against `schemas/execution-envelope.schema.json`.
//!
//! Tests that run a command need FUSE: without it they skip with a message, and with
//! `AVFS_REQUIRE_FUSE=1` they fail.

mod common;
#[path = "common/envelope.rs"]
mod envelope;
#[path = "common/exec.rs"]
mod exec;
#[path = "common/fuse.rs"]
mod fuse;

use std::time::{Duration, Instant};

use common::Env;
use envelope::assert_envelope;
use exec::*;
use fuse::can_mount;
use serde_json::{Value, json};

const FAKE_NETWORK_POLICY: &str = r#"
[[rule]]
name = "fake-network"
program = "echo"
args = ["net-*"]
category = "networked"
reason = "pretend this talks to the network"
examples = ["echo net-ping"]
counter_examples = ["echo hello"]
"#;

#[test]
fn approval_flow_runs_exactly_the_approved_command_once() {
    if !can_mount("approval_flow_runs_exactly_the_approved_command_once") {
        return;
    }
    let env = setup();
    std::fs::write(env.home().join("policy.toml"), FAKE_NETWORK_POLICY).unwrap();
    let line = "echo net-ping >> ran.log";
    let t0 = now_ns();
    let x = exec(&env, &["--cwd", "sub", "--env", "K=V", "--shell", line]);
    assert_eq!(x.code, 75, "{}", x.env);
    assert_eq!(x.env["decision"]["matched_rule"], "fake-network");
    assert_nothing_ran(&x.env);
    let id = x.env["approval"]["id"].as_str().unwrap().to_string();
    assert!(!exists(&env, "t", "sub/ran.log"));

    // Listed with the exact request.
    let list = env.json(&["--vault", "t", "approvals"]);
    let aps = list["approvals"].as_array().unwrap();
    assert_eq!(aps.len(), 1, "{list}");
    let ap = &aps[0];
    assert_eq!(ap["id"], id.as_str());
    assert_eq!(ap["state"], "pending");
    assert_eq!(
        ap["request"]["command"],
        json!({"kind": "shell", "argv": null, "shell": line})
    );
    assert_eq!(ap["request"]["cwd"], "/sub");
    assert_eq!(ap["request"]["vault"], "t");
    assert_eq!(ap["request"]["workspace"], "main");
    assert_eq!(ap["request"]["options"]["env"], json!(["K=V"]));
    assert_eq!(ap["workspace"], "t");
    let cats = strs(&ap["decision"]["categories"]);
    assert!(cats.contains(&"networked".to_string()) && cats.contains(&"mutating".to_string()));
    let exp = ap["expires_at_ns"].as_i64().unwrap();
    let day = 24 * 3600 * 1_000_000_000i64;
    assert!(
        exp >= t0 + day - 60_000_000_000 && exp <= now_ns() + day,
        "expiry {exp}"
    );
    assert_eq!(ap["expires_at_ns"], x.env["approval"]["expires_at_ns"]);
    let human = env.ok(&["--vault", "t", "approvals"]).stdout;
    assert!(human.contains(&id) && human.contains(line), "{human}");

    // Not yet approved: refused.
    let err = exec_error(&env, &["--approve", &id]);
    assert_eq!(err["kind"], "refused", "{err}");
    // Approve; a different command line with the id is refused.
    let d = env.json(&["--vault", "t", "approve", &id]);
    assert_eq!(d["approval"]["state"], "approved");
    let err = exec_error(
        &env,
        &["--approve", &id, "--shell", "echo net-other >> ran.log"],
    );
    assert_eq!(err["kind"], "refused");
    assert!(err["message"].as_str().unwrap().contains(line), "{err}");

    // Runs exactly that command (with its cwd and env), once.
    let x = exec(&env, &["--approve", &id]);
    let e = &x.env;
    assert_eq!(x.code, 0, "{e}");
    assert_eq!(e["approval"]["id"], id.as_str());
    assert_eq!(e["approval"]["state"], "used");
    assert_eq!(e["request"]["command"]["shell"], line);
    assert_eq!(e["request"]["cwd"], "/sub");
    assert_eq!(e["request"]["options"]["approve"], id.as_str());
    assert_eq!(e["decision"]["action"], "allow_with_checkpoint");
    assert!(
        e["checkpoint"].is_string(),
        "an approved run is checkpointed"
    );
    assert_eq!(change_set(e), set(&[("added", "/sub/ran.log")]));
    assert_eq!(env.cat(Some("t"), "sub/ran.log"), "net-ping\n");
    // The same command line given explicitly is fine too, but the approval is used up.
    let err = exec_error(&env, &["--approve", &id]);
    assert_eq!(err["kind"], "refused");
    let err = exec_error(&env, &["--approve", &id, "--shell", line]);
    assert_eq!(err["kind"], "refused");
    assert_eq!(env.cat(Some("t"), "sub/ran.log"), "net-ping\n", "ran twice");
    let err = env.json_err(&["--vault", "t", "approve", &id], 1);
    assert_eq!(err["kind"], "refused");

    // Deny: the command can never run.
    let x = exec(&env, &["--shell", "echo net-second >> ran2.log"]);
    let id2 = x.env["approval"]["id"].as_str().unwrap().to_string();
    let d = env.json(&["--vault", "t", "deny", &id2]);
    assert_eq!(d["approval"]["state"], "denied");
    let err = exec_error(&env, &["--approve", &id2]);
    assert_eq!(err["kind"], "refused");
    assert!(err["message"].as_str().unwrap().contains("denied"), "{err}");
    let err = env.json_err(&["--vault", "t", "approve", &id2], 1);
    assert_eq!(err["kind"], "refused");
    assert!(!exists(&env, "t", "ran2.log"));
    // Neither is pending any more; --all shows both.
    let list = env.json(&["--vault", "t", "approvals"]);
    assert!(list["approvals"].as_array().unwrap().is_empty(), "{list}");
    let all = env.json(&["--vault", "t", "approvals", "--all"]);
    let states: Vec<_> = all["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["id"].as_str().unwrap().to_string(),
                a["state"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        states,
        [
            (id.clone(), "used".to_string()),
            (id2.clone(), "denied".to_string())
        ]
    );
    let err = exec_error(&env, &["--approve", "ap-0000000000"]);
    assert_eq!(err["kind"], "not_found", "{err}");

    // Every step is audited, in order.
    let audit = audit_entries(&env, "t");
    let steps: Vec<(String, String)> = audit
        .iter()
        .filter_map(|a| {
            let act = a["action"].as_str().unwrap();
            let d = &a["detail"];
            let ap = match act {
                "approval.request" | "approval.use" => d["approval"].as_str(),
                "approval.approve" | "approval.deny" => d["id"].as_str(),
                "exec.run" => d["approval"]["id"].as_str(),
                _ => None,
            }?;
            Some((act.to_string(), ap.to_string()))
        })
        .collect();
    let s = |a: &str, i: &str| (a.to_string(), i.to_string());
    assert_eq!(
        steps,
        [
            s("approval.request", &id),
            s("approval.approve", &id),
            s("approval.use", &id),
            s("exec.run", &id),
            s("approval.request", &id2),
            s("approval.deny", &id2),
        ]
    );
    let req = audit
        .iter()
        .find(|a| a["action"] == "approval.request")
        .unwrap();
    assert_eq!(req["detail"]["request"]["command"]["shell"], line);
    let run = audit.iter().find(|a| a["action"] == "exec.run").unwrap();
    assert_envelope(&run["detail"]);
    assert_eq!(run["detail"]["id"], e["id"]);
}

#[test]
fn approved_fork_and_ephemeral_requests_run_where_they_were_asked() {
    if !can_mount("approved_fork_and_ephemeral_requests_run_where_they_were_asked") {
        return;
    }
    let env = setup();
    std::fs::write(env.home().join("policy.toml"), FAKE_NETWORK_POLICY).unwrap();
    let vaults = vault_names(&env);
    // Asking creates nothing: no fork for a command that did not run.
    let x = exec(&env, &["--fork", "task", "--shell", "echo net-a > a.log"]);
    assert_eq!(x.code, 75);
    assert_eq!(x.env["request"]["vault"], "task");
    let fork_id = x.env["approval"]["id"].as_str().unwrap().to_string();
    let x = exec(&env, &["--ephemeral", "--shell", "echo net-b > b.log"]);
    assert_eq!(x.code, 75);
    let eph_id = x.env["approval"]["id"].as_str().unwrap().to_string();
    assert_eq!(
        vault_names(&env),
        vaults,
        "a request that did not run created a fork"
    );
    for id in [&fork_id, &eph_id] {
        env.ok(&["--vault", "t", "approve", id]);
    }
    let x = exec(&env, &["--approve", &fork_id]);
    assert_eq!(x.code, 0, "{}", x.env);
    assert_eq!(x.env["request"]["vault"], "task");
    assert_eq!(env.cat(Some("task"), "a.log"), "net-a\n");
    assert!(!exists(&env, "t", "a.log"));
    let x = exec(&env, &["--approve", &eph_id]);
    assert_eq!(x.code, 0, "{}", x.env);
    assert!(
        x.env["request"]["vault"]
            .as_str()
            .unwrap()
            .starts_with("eph-")
    );
    assert_eq!(change_set(&x.env), set(&[("added", "/b.log")]));
    assert!(!exists(&env, "t", "b.log"));
    let mut want = vaults.clone();
    want.push("task".into());
    want.sort();
    let mut got = vault_names(&env);
    got.sort();
    assert_eq!(got, want, "the ephemeral fork was not discarded");
}

#[test]
fn expired_approvals_can_neither_be_approved_nor_run() {
    let env = setup();
    let ask = |line: &str| {
        let x = exec(&env, &["--shell", line]);
        assert_eq!(x.code, 75);
        x.env["approval"]["id"].as_str().unwrap().to_string()
    };
    let pending = ask("curl one");
    let approved = ask("curl two");
    env.ok(&["--vault", "t", "approve", &approved]);
    let db = rusqlite::Connection::open(env.home().join("vaults/t.avfs")).unwrap();
    db.execute("UPDATE approval SET expires_at_ns = 1", [])
        .unwrap();
    drop(db);
    assert!(
        env.json(&["--vault", "t", "approvals"])["approvals"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let all = env.json(&["--vault", "t", "approvals", "--all"]);
    for a in all["approvals"].as_array().unwrap() {
        assert_eq!(a["state"], "expired", "{a}");
    }
    let err = env.json_err(&["--vault", "t", "approve", &pending], 1);
    assert_eq!(err["kind"], "refused");
    let err = exec_error(&env, &["--approve", &approved]);
    assert_eq!(err["kind"], "refused");
    assert!(
        err["message"].as_str().unwrap().contains("expired"),
        "{err}"
    );
}

/// Runs SQL on a vault with the `sqlite3` program, as anything on the host could: the
/// vault is attached to a scratch database, the way the attack was found. The write stays
/// in the WAL (no checkpoint when sqlite3 closes), as it did there: copied into the file
/// by sqlite3, its page would lack its page checksum, and avfs already refuses that.
fn sqlite3_cli(env: &Env, vault: &str, sql: &str) {
    let vault_file = env.home().join(format!("vaults/{vault}.avfs"));
    let script = format!("ATTACH '{}' AS v; {sql}", vault_file.display());
    let out = std::process::Command::new("sqlite3")
        .args(["-cmd", ".dbconfig no_ckpt_on_close on"])
        .arg(env.path("scratch.db"))
        .arg(&script)
        .output()
        .expect("the sqlite3 program (apt-get install -y sqlite3)");
    assert!(
        out.status.success(),
        "sqlite3 {script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Unmounts on drop, also when the test fails, so no mount outlives it.
struct Unmount<'a>(&'a Env, std::path::PathBuf);

impl Drop for Unmount<'_> {
    fn drop(&mut self) {
        let r = self.0.run(&["unmount", self.1.to_str().unwrap()]);
        if !std::thread::panicking() {
            assert_eq!(r.code, 0, "unmount: {}", r.stderr);
        }
    }
}

/// `audit verify`: exit status and the problems it names.
fn audit_verify(env: &Env, vault: &str) -> (i32, Vec<String>) {
    let r = env.run(&["--json", "--vault", vault, "audit", "verify"]);
    let v = r.json();
    let problems = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["problem"].as_str().unwrap().to_string())
        .collect();
    (r.code, problems)
}

#[test]
fn an_approval_written_into_the_vault_outside_avfs_is_refused_and_reported() {
    if !can_mount("an_approval_written_into_the_vault_outside_avfs_is_refused_and_reported") {
        return;
    }
    let env = setup();
    let ask = |line: &str| {
        let x = exec(&env, &["--shell", line]);
        assert_eq!(x.code, 75, "{}", x.env);
        x.env["approval"]["id"].as_str().unwrap().to_string()
    };
    let forged = ask("curl https://example.com/one");
    assert_eq!(audit_verify(&env, "t"), (0, vec![]));
    // As where the attack was found, an avfs process holds the vault open (here a mount;
    // there a run's): sqlite3's write stays in the WAL, where SQLite reads it.
    let mnt = env.path("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    env.ok(&["mount", "t", mnt.to_str().unwrap()]);
    let mounted = Unmount(&env, mnt.clone());

    // The attack as found: the state flipped with sqlite3, no audit row written.
    sqlite3_cli(
        &env,
        "t",
        &format!(
            "UPDATE v.approval SET state = 'approved', decided_at_ns = 1 WHERE id = '{forged}'"
        ),
    );
    let err = exec_error(&env, &["--approve", &forged]);
    assert_eq!(err["kind"], "refused", "{err}");
    let msg = err["message"].as_str().unwrap();
    assert!(
        msg.contains(&forged) && msg.contains("audit log records it pending"),
        "{err}"
    );
    let (code, problems) = audit_verify(&env, "t");
    assert_eq!(code, 1, "{problems:?}");
    assert!(
        problems
            .iter()
            .any(|p| p.contains(&forged) && p.contains("records it pending")),
        "{problems:?}"
    );
    // Nor can a person's command decide it now.
    let err = env.json_err(&["approve", &forged], 1);
    assert_eq!(err["kind"], "refused", "{err}");

    // With a decision row forged as well (a plain INSERT cannot make its hash).
    let second = ask("curl https://example.com/two");
    sqlite3_cli(
        &env,
        "t",
        &format!(
            "UPDATE v.approval SET state = 'approved' WHERE id = '{second}';
             INSERT INTO v.audit (id, ts_ns, workspace, actor, action, detail, prev_hash, hash)
               SELECT id + 1, ts_ns + 1, workspace, 'cli', 'approval.approve',
                      json_object('id', '{second}', 'state', 'approved'), hash, randomblob(32)
               FROM v.audit ORDER BY id DESC LIMIT 1;
             UPDATE v.meta SET value = (SELECT MAX(id) FROM v.audit) WHERE key = 'audit_head';"
        ),
    );
    let err = exec_error(&env, &["--approve", &second]);
    assert_eq!(err["kind"], "refused", "{err}");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("does not match its hash"),
        "{err}"
    );

    // A request approved by a person, then its command swapped in the vault.
    let third = ask("curl https://example.com/three");
    env.ok(&["approve", &third]);
    sqlite3_cli(
        &env,
        "t",
        &format!(
            "UPDATE v.approval SET request = replace(request, 'example.com/three', 'evil.example/x') WHERE id = '{third}'"
        ),
    );
    let err = exec_error(&env, &["--approve", &third]);
    assert_eq!(err["kind"], "refused", "{err}");
    assert!(
        err["message"].as_str().unwrap().contains("request differs"),
        "{err}"
    );
    // And its expiry pushed out.
    let fourth = ask("curl https://example.com/four");
    env.ok(&["approve", &fourth]);
    sqlite3_cli(
        &env,
        "t",
        &format!(
            "UPDATE v.approval SET expires_at_ns = expires_at_ns + 1000000000000 WHERE id = '{fourth}'"
        ),
    );
    let err = exec_error(&env, &["--approve", &fourth]);
    assert!(err["message"].as_str().unwrap().contains("expiry"), "{err}");
    let (code, problems) = audit_verify(&env, "t");
    assert_eq!(code, 1);
    for id in [&forged, &second, &third, &fourth] {
        assert!(
            problems.iter().any(|p| p.contains(id.as_str())),
            "{id}: {problems:?}"
        );
    }
    // Nothing ran: no exec.run or approval.use row.
    let audit = audit_entries(&env, "t");
    assert!(
        !audit
            .iter()
            .any(|a| a["action"] == "exec.run" || a["action"] == "approval.use"),
        "{audit:?}"
    );
    // Alone with the file again, avfs checks it in full before writing (it was changed
    // outside avfs), and the forged approvals make it refuse to.
    drop(mounted);
    let err = exec_error(&env, &["--approve", &forged]);
    assert_eq!(err["kind"], "corrupt_vault", "{err}");
    assert!(
        err["message"].as_str().unwrap().contains("approval"),
        "{err}"
    );
}

#[test]
fn approvals_of_every_vault_are_listed_and_decided_by_id_alone() {
    let env = setup();
    env.ok(&["vault", "create", "u"]);
    let x = exec(&env, &["--shell", "curl one"]);
    let in_t = x.env["approval"]["id"].as_str().unwrap().to_string();
    let x = exec_in(&env, "u", &["--shell", "curl two"]);
    assert_eq!(x.code, 75, "{}", x.env);
    let in_u = x.env["approval"]["id"].as_str().unwrap().to_string();
    assert_ne!(in_t, in_u);

    // Without --vault: every vault's, each naming its vault; with it: that vault's.
    let all = env.json(&["approvals"]);
    let listed: Vec<(String, String)> = all["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["id"].as_str().unwrap().to_string(),
                a["workspace"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            (in_t.clone(), "t".to_string()),
            (in_u.clone(), "u".to_string())
        ]
    );
    let human = env.ok(&["approvals"]).stdout;
    assert!(human.contains(&in_t) && human.contains(&in_u), "{human}");
    let only_u = env.json(&["--vault", "u", "approvals"]);
    assert_eq!(only_u["approvals"].as_array().unwrap().len(), 1);
    assert_eq!(only_u["approvals"][0]["id"], in_u.as_str());

    // approve and deny find the vault from the id; deny prints the id.
    let d = env.json(&["approve", &in_u]);
    assert_eq!(d["approval"]["state"], "approved");
    let denied = env.ok(&["deny", &in_t]).stdout;
    assert!(
        denied.contains(&in_t) && denied.contains("denied"),
        "{denied}"
    );
    let states = |v: &str| -> Vec<String> {
        env.json(&["--vault", v, "approvals", "--all"])["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["state"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(states("u"), ["approved"]);
    assert_eq!(states("t"), ["denied"]);
    // The decision rows are in the vault the request was asked in.
    assert!(
        audit_entries(&env, "u")
            .iter()
            .any(|a| a["action"] == "approval.approve" && a["detail"]["id"] == in_u.as_str())
    );
    let err = env.json_err(&["approve", "ap-0000000000"], 1);
    assert_eq!(err["kind"], "not_found", "{err}");
    assert_eq!(audit_verify(&env, "t"), (0, vec![]));
    assert_eq!(audit_verify(&env, "u"), (0, vec![]));

    // A vault that cannot be read does not hide the others' requests.
    env.ok(&["vault", "create", "w"]);
    std::fs::write(env.home().join("vaults/w.avfs"), b"not a vault").unwrap();
    let x = exec_in(&env, "u", &["--shell", "curl three"]);
    let third = x.env["approval"]["id"].as_str().unwrap().to_string();
    let r = env.run(&["--json", "approvals"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("warning: vault w"), "{}", r.stderr);
    assert_eq!(r.json()["approvals"][1]["id"], third.as_str());
    assert_eq!(env.json(&["deny", &third])["approval"]["state"], "denied");
}

/// Starts `avfs --json --vault t exec ARGS...` in the background.
fn spawn_exec(env: &Env, args: &[&str]) -> std::process::Child {
    let mut a = vec!["--json", "--vault", "t", "exec"];
    a.extend_from_slice(args);
    env.cmd(&a)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for the one pending approval of vault `t` to appear; its id.
fn pending_approval(env: &Env) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let l = env.json(&["--vault", "t", "approvals"]);
        if let Some(id) = l["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["state"] == "pending")
            .and_then(|a| a["id"].as_str())
        {
            return id.to_string();
        }
        assert!(Instant::now() < deadline, "no pending approval appeared");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The envelope (or error) a background exec printed, and its exit status.
fn finished(child: std::process::Child) -> (i32, Value) {
    let out = child.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap(), v)
}

#[test]
fn wait_approval_runs_once_a_person_approves_and_answers_a_denial_or_the_end_of_the_wait() {
    let env = setup();
    std::fs::write(env.home().join("policy.toml"), FAKE_NETWORK_POLICY).unwrap();

    // Nobody decides: after the wait, the pending request, exit 75.
    let t0 = Instant::now();
    let x = exec(
        &env,
        &["--wait-approval", "0.5", "--shell", "echo net-a >> ran.log"],
    );
    assert!(t0.elapsed() >= Duration::from_millis(500));
    assert_eq!(x.code, 75, "{}", x.env);
    assert_eq!(x.env["approval"]["state"], "pending");
    assert_nothing_ran(&x.env);
    env.ok(&["deny", x.env["approval"]["id"].as_str().unwrap()]);

    // Denied while waiting: exit 126, nothing ran.
    let child = spawn_exec(
        &env,
        &["--wait-approval", "60", "--shell", "echo net-b >> ran.log"],
    );
    let id = pending_approval(&env);
    env.ok(&["deny", &id]);
    let (code, e) = finished(child);
    assert_eq!(code, 126, "{e}");
    assert_envelope(&e);
    assert_eq!(e["approval"]["id"], id.as_str());
    assert_eq!(e["approval"]["state"], "denied");
    assert_nothing_ran(&e);

    // A state forged while it waits is refused, not run.
    let child = spawn_exec(
        &env,
        &["--wait-approval", "60", "--shell", "echo net-c >> ran.log"],
    );
    let id = pending_approval(&env);
    sqlite3_cli(
        &env,
        "t",
        &format!("UPDATE v.approval SET state = 'approved' WHERE id = '{id}'"),
    );
    let (code, e) = finished(child);
    assert_eq!(code, 1, "{e}");
    // `refused` while another avfs process holds the vault; alone, the full check of a
    // file changed outside avfs refuses it as `corrupt_vault`, naming the approval.
    let kind = e["error"]["kind"].as_str().unwrap();
    assert!(kind == "refused" || kind == "corrupt_vault", "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains(&id), "{e}");
    // (The forged request stays refused; a fresh vault home for the approved run.)
    let env = setup();
    std::fs::write(env.home().join("policy.toml"), FAKE_NETWORK_POLICY).unwrap();
    if !can_mount("wait_approval_runs_once_a_person_approves") {
        return;
    }
    // Approved while waiting: it runs, as `--approve ID` would, once.
    let child = spawn_exec(
        &env,
        &["--wait-approval", "60", "--shell", "echo net-d >> ran.log"],
    );
    let id = pending_approval(&env);
    env.ok(&["approve", &id]);
    let (code, e) = finished(child);
    assert_eq!(code, 0, "{e}");
    assert_envelope(&e);
    assert_eq!(e["approval"]["id"], id.as_str());
    assert_eq!(e["approval"]["state"], "used");
    assert_eq!(e["decision"]["action"], "allow_with_checkpoint");
    assert_eq!(change_set(&e), set(&[("added", "/ran.log")]));
    assert_eq!(env.cat(Some("t"), "ran.log"), "net-d\n");
    let err = exec_error(&env, &["--approve", &id]);
    assert_eq!(err["kind"], "refused");
    assert_eq!(audit_verify(&env, "t"), (0, vec![]));
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}
