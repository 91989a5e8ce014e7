//! `avfs remote`, `push`, `fetch`, `pull`, `clone` against a real S3-compatible server
//! (moto, over HTTP on loopback) and against a directory: two "machines" are two
//! `$AVFS_HOME`s with vaults of their own.

mod common;
#[path = "common/remote_util.rs"]
mod remote_util;
#[path = "common/s3.rs"]
mod s3;

use std::path::Path;
use std::process::Stdio;

use common::Env;
use remote_util::{exported_equals, machine, project};
use s3::{S3, Server};
use serde_json::Value;

fn stats_chunks(env: &Env, vault: &str) -> u64 {
    env.json(&["--vault", vault, "stats"])["stats"]["vault"]["chunks"]
        .as_u64()
        .unwrap()
}

#[test]
fn s3_server_refuses_a_second_conditional_write() {
    refuses_a_second_conditional_write(Server::Moto);
}

#[test]
fn s3s_fs_refuses_a_second_conditional_write() {
    refuses_a_second_conditional_write(Server::S3sFs);
}

fn refuses_a_second_conditional_write(server: Server) {
    // Without this the race test below would prove nothing: a second create with
    // If-None-Match and an update with a stale If-Match are refused (412), and the
    // object keeps the first writer's bytes.
    let s3 = S3::start_on(server);
    let out = s3.boto3(
        r#"
def put(body, **kw):
    try:
        return s3.put_object(Bucket=bucket, Key='cas', Body=body, **kw)['ETag']
    except botocore.exceptions.ClientError as e:
        return 'refused %s' % e.response['ResponseMetadata']['HTTPStatusCode']
first = put(b'one', IfNoneMatch='*')
print(put(b'two', IfNoneMatch='*'))
second = put(b'three', IfMatch=first)
print(put(b'four', IfMatch=first))
print(s3.get_object(Bucket=bucket, Key='cas')['Body'].read().decode())
"#,
    );
    assert_eq!(out, "refused 412\nrefused 412\nthree\n");
}

#[test]
fn push_then_lazy_and_full_clone_over_s3() {
    push_then_lazy_and_full_clone(Server::Moto);
}

#[test]
fn push_then_lazy_and_full_clone_over_s3s_fs() {
    push_then_lazy_and_full_clone(Server::S3sFs);
}

fn push_then_lazy_and_full_clone(server: Server) {
    let s3 = S3::start_on(server);
    let a = machine(&s3);
    let src = a.path("src");
    project(&src, 120);
    a.ok(&["import", src.to_str().unwrap(), "/"]);
    a.ok(&["checkpoint", "save", "v1", "-m", "first"]);
    let url = s3.url("team/web");
    a.ok(&["remote", "add", "origin", &url]);
    let p = a.json(&["push"]);
    assert_eq!(p["refs"][0]["status"], "created");
    assert_eq!(p["refs"][0]["checkpoint"], "v1");
    // The first ref update to the store probed its conditional writes: 3 requests.
    assert_eq!(p["probe"]["requests"], 3, "{p}");
    assert_eq!(p["probe"]["if_match"], true, "{p}");
    assert_eq!(p["probe"]["if_none_match"], true, "{p}");
    // Few, large requests: 120 files in a couple of packs, not a PUT per object.
    assert!(p["objects"].as_u64().unwrap() > 120);
    assert!(p["traffic"]["requests"].as_u64().unwrap() <= 3 + 10, "{p}");

    // Another machine: a lazy clone holds the checkpoint and the root listing, nothing
    // more; listings below and file contents come on first read.
    let b = machine(&s3);
    let c = b.json(&["clone", &url, "web"]);
    assert_eq!(c["clone"]["lazy"], true);
    assert_eq!(c["clone"]["checkpoint"], "v1");
    assert_eq!(c["clone"]["fetched"]["objects"], 2, "{c}");
    assert_eq!(stats_chunks(&b, "web"), 0);
    // A clone killed after its last commit, before the registry named it, leaves a whole
    // vault file nobody names: the same command takes it as it is.
    let vaults = b.home().join("vaults");
    std::fs::copy(vaults.join("web.avfs"), vaults.join("web2.avfs")).unwrap();
    let again = b.json(&["clone", &url, "web2"]);
    assert_eq!(again["clone"]["resumed"], true, "{again}");
    assert_eq!(again["clone"]["checkpoint"], "v1", "{again}");
    assert_eq!(again["clone"]["head"], c["clone"]["head"], "{again}");
    assert_eq!(b.cat(Some("web2"), "/src/m3/f3.txt"), "file 3\n".repeat(4));
    b.ok(&["vault", "delete", "web2", "-y"]);
    let ls = b.ok(&["--vault", "web", "ls", "/src/m3"]).stdout;
    assert!(ls.contains("f3.txt"), "{ls}");
    // First read fetches, and the content is kept.
    assert_eq!(b.cat(Some("web"), "/src/m3/f3.txt"), "file 3\n".repeat(4));
    assert!(stats_chunks(&b, "web") > 0);
    exported_equals(&b, "web", &src);
    assert_eq!(
        b.json(&["--vault", "web", "vault", "verify"])["report"]["ok"],
        true
    );
    b.ok(&["--vault", "web", "gc"]);
    let cps = b.json(&["--vault", "web", "checkpoint", "list"]);
    assert_eq!(cps["checkpoints"][0]["name"], "v1");

    // A full clone needs the server no more.
    let full = machine(&s3);
    let c = full.json(&["clone", &url, "web", "--full"]);
    assert_eq!(c["clone"]["lazy"], false);
    drop(s3);
    exported_equals(&full, "web", &src);
    assert_eq!(
        full.json(&["--vault", "web", "vault", "verify"])["report"]["ok"],
        true
    );
    // The lazy clone still reads what it fetched; what it never read is an error that
    // names the remote, not a corrupt vault.
    assert_eq!(b.cat(Some("web"), "/src/m3/f3.txt"), "file 3\n".repeat(4));
}

#[test]
fn incremental_push_after_ten_changes_is_a_handful_of_requests() {
    incremental_push_after_ten_changes(Server::Moto);
}

#[test]
fn incremental_push_after_ten_changes_over_s3s_fs() {
    incremental_push_after_ten_changes(Server::S3sFs);
}

fn incremental_push_after_ten_changes(server: Server) {
    let s3 = S3::start_on(server);
    let a = machine(&s3);
    let src = a.path("src");
    project(&src, 400);
    a.ok(&["import", src.to_str().unwrap(), "/"]);
    a.ok(&["checkpoint", "save", "v1"]);
    a.ok(&["remote", "add", "origin", &s3.url("inc")]);
    a.json(&["push"]);
    for i in 0..10 {
        a.ok(&[
            "write",
            &format!("/src/m{}/f{i}.txt", i % 7),
            &format!("changed {i}"),
        ]);
    }
    a.ok(&["checkpoint", "save", "v2"]);
    let p = a.json(&["push"]);
    assert_eq!(p["refs"][0]["status"], "updated");
    // The probe ran once, at the first push; not again.
    assert!(p.get("probe").is_none(), "{p}");
    // 10 chunks + changed trees + 1 checkpoint; list + ref + 2 packs + 2 indexes + ref
    // + its read-back.
    let objects = p["objects"].as_u64().unwrap();
    assert!((11..=30).contains(&objects), "{p}");
    assert!(p["traffic"]["requests"].as_u64().unwrap() <= 10, "{p}");
    // Nothing new: nothing sent.
    let again = a.json(&["push"]);
    assert_eq!(again["refs"][0]["status"], "up_to_date");
    assert_eq!(again["objects"], 0);
}

fn spawn(env: &Env, args: &[&str]) -> std::process::Child {
    env.cmd(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn outcome(child: std::process::Child) -> (i32, Value) {
    let out = child.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), v)
}

/// Racing rounds per server: `AVFS_RACE_ROUNDS` (the long mode: 200), else 6.
fn race_rounds() -> usize {
    std::env::var("AVFS_RACE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6)
}

#[test]
fn two_pushers_at_once_one_wins_the_other_is_told_to_pull() {
    two_pushers_race(Server::Moto);
}

#[test]
fn two_pushers_at_once_over_s3s_fs_never_both_succeed() {
    // s3s-fs checks If-Match and then writes: two pushers from one head can both pass
    // the check. The read-back after the write is what turns one of them into
    // `lost_race` (without it, 2 of 7 rounds lost an update).
    two_pushers_race(Server::S3sFs);
}

/// How one push of a race ended.
#[derive(Debug, PartialEq)]
enum Ended {
    /// Exit 0, the ref moved from `old`.
    Won {
        old: String,
    },
    Rejected,
    LostRace,
}

fn ended(code: i32, v: &Value) -> Ended {
    match code {
        0 => {
            assert_eq!(v["refs"][0]["status"], "updated", "{v}");
            Ended::Won {
                old: v["refs"][0]["old"].as_str().unwrap().to_string(),
            }
        }
        1 if v["error"]["kind"] == "push_rejected" => {
            let msg = v["error"]["message"].as_str().unwrap();
            assert!(msg.contains("avfs pull"), "{v}");
            Ended::Rejected
        }
        1 if v["refs"][0]["status"] == "lost_race" => {
            assert_ne!(v["refs"][0]["found"], v["refs"][0]["new"], "{v}");
            Ended::LostRace
        }
        _ => panic!("push exited {code}: {v}"),
    }
}

fn two_pushers_race(server: Server) {
    let s3 = S3::start_on(server);
    let url = s3.url("race");
    let seed = machine(&s3);
    seed.ok(&["write", "/shared.txt", "base"]);
    seed.ok(&["checkpoint", "save", "base"]);
    seed.ok(&["remote", "add", "origin", &url]);
    seed.json(&["push"]);
    let a = machine(&s3);
    let b = machine(&s3);
    a.json(&["clone", &url, "w"]);
    b.json(&["clone", &url, "w"]);
    let rounds = race_rounds();
    let (mut rejected, mut lost, mut both_won) = (0, 0, 0);
    for round in 0..rounds {
        a.ok(&["--vault", "w", "write", &format!("/a{round}.txt"), "from a"]);
        a.ok(&["--vault", "w", "checkpoint", "save", &format!("a{round}")]);
        b.ok(&["--vault", "w", "write", &format!("/b{round}.txt"), "from b"]);
        b.ok(&["--vault", "w", "checkpoint", "save", &format!("b{round}")]);
        let pa = spawn(&a, &["--json", "--vault", "w", "push"]);
        let pb = spawn(&b, &["--json", "--vault", "w", "push"]);
        let (ca, va) = outcome(pa);
        let (cb, vb) = outcome(pb);
        let (ea, eb) = (ended(ca, &va), ended(cb, &vb));
        if let (Ended::Won { old: oa }, Ended::Won { old: ob }) = (&ea, &eb)
            && oa == ob
        {
            both_won += 1;
        }
        for e in [&ea, &eb] {
            match e {
                Ended::Rejected => rejected += 1,
                Ended::LostRace => lost += 1,
                Ended::Won { .. } => {}
            }
        }
        // Whoever did not win merges the remote's head and pushes again; then both
        // are where the remote is.
        for (env, e) in [(&a, &ea), (&b, &eb)] {
            if !matches!(e, Ended::Won { .. }) {
                let pull = env.json(&["--vault", "w", "pull"]);
                assert_eq!(pull["status"], "merged", "round {round}: {pull}");
                env.json(&["--vault", "w", "push"]);
            }
        }
        a.json(&["--vault", "w", "pull"]);
        b.json(&["--vault", "w", "pull"]);
    }
    eprintln!(
        "race on {server:?}: {rounds} rounds: {rejected} push_rejected, {lost} lost_race, {both_won} where both won from one head"
    );
    assert_eq!(
        both_won, 0,
        "{both_won} of {rounds} rounds: both pushes reported success from the same old head"
    );
    let check = machine(&s3);
    check.json(&["clone", &url, "w", "--full"]);
    for round in 0..rounds {
        assert_eq!(check.cat(Some("w"), &format!("/a{round}.txt")), "from a");
        assert_eq!(check.cat(Some("w"), &format!("/b{round}.txt")), "from b");
    }
    assert_eq!(check.cat(Some("w"), "/shared.txt"), "base");
}

#[test]
fn pull_fast_forwards_merges_and_keeps_unsaved_work() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().join("remote").display());
    let a = Env::new();
    a.ok(&["write", "/readme", "one"]);
    a.ok(&["checkpoint", "save", "v1"]);
    a.ok(&["remote", "add", "origin", &url]);
    a.json(&["push"]);
    let b = Env::new();
    b.json(&["clone", &url, "w"]);
    a.ok(&["write", "/readme", "two"]);
    a.ok(&["checkpoint", "save", "v2"]);
    a.json(&["push"]);
    let ff = b.json(&["--vault", "w", "pull"]);
    assert_eq!(ff["status"], "fast_forward");
    assert_eq!(b.cat(Some("w"), "/readme"), "two");
    // Unsaved work on B and a new push from A: merged, nothing lost.
    b.ok(&["--vault", "w", "write", "/notes", "b's notes"]);
    a.ok(&["write", "/other", "a's file"]);
    a.ok(&["checkpoint", "save", "v3"]);
    a.json(&["push"]);
    let m = b.json(&["--vault", "w", "pull"]);
    assert_eq!(m["status"], "merged", "{m}");
    assert!(
        m["before"]
            .as_str()
            .unwrap()
            .starts_with("auto-before-pull")
    );
    assert_eq!(b.cat(Some("w"), "/notes"), "b's notes");
    assert_eq!(b.cat(Some("w"), "/other"), "a's file");
    // The merge has both heads as parents: pushing it is a fast-forward.
    let p = b.json(&["--vault", "w", "push"]);
    assert_eq!(p["refs"][0]["status"], "updated");
    let up = a.json(&["pull"]);
    assert_eq!(up["status"], "fast_forward");
    assert_eq!(a.cat(None, "/notes"), "b's notes");
}

/// Bytes of every file of a vault (with its -wal), to search for a secret.
fn vault_bytes(env: &Env) -> Vec<u8> {
    let mut all = Vec::new();
    for e in walk(&env.home()) {
        all.extend(std::fs::read(e).unwrap_or_default());
    }
    all
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn credentials_never_reach_the_vault_the_audit_log_or_messages() {
    let s3 = S3::start();
    let secret = "SECRET-9f3b2c7d-do-not-store";
    let key_id = "KEYID-77aa";
    let env = Env::new();
    let with_creds = |args: &[&str]| {
        let out = env
            .cmd(args)
            .env("AWS_ENDPOINT_URL", s3.endpoint())
            .env("AWS_ACCESS_KEY_ID", key_id)
            .env("AWS_SECRET_ACCESS_KEY", secret)
            .env("AWS_SESSION_TOKEN", format!("{secret}-token"))
            .env("AVFS_REMOTE_RETRIES", "0")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !text.contains(secret),
            "{args:?} printed the secret: {text}"
        );
        (out.status.code().unwrap(), text)
    };
    with_creds(&["write", "/f", "x"]);
    with_creds(&["checkpoint", "save", "v1"]);
    // Credentials in a URL are refused, and not repeated back.
    let (code, text) = with_creds(&[
        "--json",
        "remote",
        "add",
        "bad",
        &format!("s3://{key_id}:{secret}@bucket/x"),
    ]);
    assert_eq!(code, 1, "{text}");
    with_creds(&["remote", "add", "origin", &s3.url("sec")]);
    let (code, text) = with_creds(&["--json", "push"]);
    assert_eq!(code, 0, "{text}");
    with_creds(&["--json", "fetch"]);
    with_creds(&["--json", "pull"]);
    // A failing request (no such bucket) is an error without the secret.
    with_creds(&["remote", "add", "nobucket", "s3://no-such-bucket-xyz/p"]);
    let (code, text) = with_creds(&["--json", "push", "nobucket"]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("\"kind\": \"remote\""), "{text}");
    let (code, _) = with_creds(&["clone", &s3.url("sec"), "copy"]);
    assert_eq!(code, 0);
    with_creds(&["--vault", "copy", "cat", "/f"]);
    let audit = with_creds(&["--json", "audit", "--limit", "100"]).1;
    assert!(audit.contains("remote.push"), "{audit}");
    let bytes = vault_bytes(&env);
    assert!(
        !contains(&bytes, secret),
        "a vault or registry file holds the secret"
    );
    assert!(
        !contains(&bytes, key_id),
        "a vault or registry file holds the key id"
    );
}

#[test]
fn a_corrupt_or_foreign_object_on_the_remote_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let remote = dir.path().join("remote");
    let url = format!("file://{}", remote.display());
    let a = Env::new();
    let src = a.path("src");
    project(&src, 20);
    a.ok(&["import", src.to_str().unwrap(), "/"]);
    a.ok(&["checkpoint", "save", "v1"]);
    a.ok(&["remote", "add", "origin", &url]);
    a.json(&["push"]);
    // Flip one byte in the middle of every pack.
    for p in std::fs::read_dir(remote.join("packs")).unwrap() {
        let p = p.unwrap().path();
        let mut d = std::fs::read(&p).unwrap();
        let i = d.len() / 2;
        d[i] ^= 0x40;
        std::fs::write(&p, d).unwrap();
    }
    let b = Env::new();
    let e = b.json_err(&["clone", &url, "w", "--full"], 1);
    assert_eq!(e["kind"], "remote_corrupt", "{e}");
    // A foreign file among the indexes is refused too.
    std::fs::write(remote.join("index").join("0".repeat(64)), b"not an index").unwrap();
    let c = Env::new();
    let e = c.json_err(&["clone", &url, "w2"], 1);
    assert_eq!(e["kind"], "remote_corrupt", "{e}");
}

#[test]
fn remote_gc_deletes_only_packs_no_index_names() {
    let dir = tempfile::tempdir().unwrap();
    let remote = dir.path().join("remote");
    let url = format!("file://{}", remote.display());
    let a = Env::new();
    a.ok(&["write", "/f", "data"]);
    a.ok(&["checkpoint", "save", "v1"]);
    a.ok(&["remote", "add", "origin", &url]);
    a.json(&["push"]);
    // What a push killed between its pack and its index leaves.
    std::fs::write(remote.join("packs").join("f".repeat(64)), b"half a push").unwrap();
    let young = a.json(&["remote", "gc", "origin"]);
    assert_eq!(young["packs_deleted"], 0);
    assert_eq!(young["packs_kept_young"], 1);
    let g = a.json(&["remote", "gc", "origin", "--grace", "0"]);
    assert_eq!(g["packs_deleted"], 1);
    let b = Env::new();
    b.json(&["clone", &url, "w", "--full"]);
    assert_eq!(b.cat(Some("w"), "/f"), "data");
}

#[test]
fn lazy_clone_contents_reach_a_mount() {
    if std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .is_err()
    {
        if std::env::var("AVFS_REQUIRE_FUSE").as_deref() == Ok("1") {
            panic!("FUSE is required (AVFS_REQUIRE_FUSE=1) but /dev/fuse is unusable");
        }
        eprintln!("SKIPPED lazy_clone_contents_reach_a_mount: no FUSE");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().join("remote").display());
    let a = Env::new();
    let src = a.path("src");
    project(&src, 30);
    a.ok(&["import", src.to_str().unwrap(), "/"]);
    a.ok(&["checkpoint", "save", "v1"]);
    a.ok(&["remote", "add", "origin", &url]);
    a.json(&["push"]);
    let b = Env::new();
    b.json(&["clone", &url, "w"]);
    let mnt = b.path("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    b.ok(&["mount", "w", mnt.to_str().unwrap()]);
    let got = std::fs::read(mnt.join("big.bin"));
    let small = std::fs::read_to_string(mnt.join("src/m2/f2.txt"));
    b.ok(&["unmount", mnt.to_str().unwrap()]);
    assert_eq!(got.unwrap(), std::fs::read(src.join("big.bin")).unwrap());
    assert_eq!(small.unwrap(), "file 2\n".repeat(3));
}

#[test]
fn vault_fork_from_a_remote_checkpoint_moves_only_missing_objects() {
    let s3 = S3::start();
    let a = machine(&s3);
    let src = a.path("src");
    project(&src, 200);
    a.ok(&["import", src.to_str().unwrap(), "/"]);
    a.ok(&["checkpoint", "save", "v1"]);
    let url = s3.url("fork");
    a.ok(&["remote", "add", "origin", &url]);
    a.json(&["push"]);
    // Machine b holds all of v1; machine c a lazy clone of v1.
    let b = machine(&s3);
    b.json(&["clone", &url, "web", "--full"]);
    // a moves on: three changed files, pushed as v2.
    for i in 0..3 {
        a.ok(&["write", &format!("/src/m{i}/f{i}.txt"), &format!("v2 {i}")]);
    }
    a.ok(&["checkpoint", "save", "v2"]);
    a.json(&["push"]);
    let c = machine(&s3);
    c.json(&["clone", &url, "web", "--checkpoint", "v1"]);

    let f = b.json(&[
        "vault", "fork", "web", "review", "--remote", "origin", "--from", "v2",
    ]);
    assert_eq!(f["checkpoint"], "v2");
    assert_eq!(f["fork"]["name"], "review");
    assert_eq!(f["remote"]["base"], "v1");
    assert_eq!(f["remote"]["lazy"], false);
    // Only what v2 adds: 3 chunks, the changed listings (/, /src, 3 directories) and
    // the checkpoint; none of the 200 files b already holds.
    let objects = f["remote"]["fetched"]["objects"].as_u64().unwrap();
    assert!((5..=12).contains(&objects), "{f}");
    assert_eq!(b.cat(Some("review"), "/src/m1/f1.txt"), "v2 1");
    assert_eq!(b.cat(Some("web"), "/src/m1/f1.txt"), "file 1\n".repeat(2));
    // The same fork again, as after a kill once the vault file had it (the registry
    // does not know it yet): it finishes, nothing moves. Asked at another checkpoint,
    // or changed since, it says what is there.
    let reg = rusqlite::Connection::open(b.home().join("registry.db")).unwrap();
    reg.execute("DELETE FROM vault WHERE name = 'review'", [])
        .unwrap();
    drop(reg);
    let again = b.json(&["vault", "fork", "web", "review", "--remote", "origin"]);
    assert_eq!(again["completed_interrupted_fork"], true, "{again}");
    assert_eq!(again["checkpoint"], "v2");
    assert_eq!(again["remote"]["fetched"]["objects"], 0, "{again}");
    assert_eq!(b.cat(Some("review"), "/src/m1/f1.txt"), "v2 1");
    let other = b.json_err(
        &[
            "vault", "fork", "web", "review", "--remote", "origin", "--from", "v1",
        ],
        1,
    );
    assert_eq!(other["kind"], "vault_exists", "{other}");
    let msg = other["message"].as_str().unwrap();
    assert!(
        msg.contains("at checkpoint v2, not at origin/main's v1"),
        "{msg}"
    );
    b.ok(&["--vault", "review", "write", "/new.txt", "x"]);
    let changed = b.json_err(&["vault", "fork", "web", "review", "--remote", "origin"], 1);
    assert!(
        changed["message"]
            .as_str()
            .unwrap()
            .contains("unsaved changes"),
        "{changed}"
    );
    b.ok(&["--vault", "review", "rm", "/new.txt"]);
    // A missing remote workspace is an error that names it.
    let none = b.run(&["vault", "fork", "web", "x", "--remote", "origin/nosuch"]);
    assert!(
        none.code != 0 && none.stderr.contains("nosuch"),
        "{}",
        none.stderr
    );

    // The lazy clone stays lazy: the checkpoint is known, only the root listing moves.
    let g = c.json(&["vault", "fork", "web", "review", "--remote", "origin"]);
    assert_eq!(g["checkpoint"], "v2");
    assert_eq!(g["remote"]["lazy"], true);
    assert_eq!(g["remote"]["fetched"]["objects"], 1, "{g}");
    assert_eq!(c.cat(Some("review"), "/src/m2/f2.txt"), "v2 2");

    // b's fork is complete: it reads without the server.
    drop(s3);
    assert_eq!(b.cat(Some("review"), "/src/m0/f0.txt"), "v2 0");
    assert_eq!(b.cat(Some("review"), "/src/m5/f5.txt"), "file 5\n");
    exported_equals(&b, "web", &src);
}

#[test]
fn a_store_that_ignores_conditional_writes_moves_no_ref_unless_declared_single_writer() {
    let s3 = S3::start_on(Server::MotoIgnoringConditions);
    let a = machine(&s3);
    a.ok(&["write", "/f", "one"]);
    a.ok(&["checkpoint", "save", "v1"]);
    let url = s3.url("unsafe");
    a.ok(&["remote", "add", "origin", &url]);
    let e = a.json_err(&["push"], 1);
    assert_eq!(e["kind"], "remote_unsafe", "{e}");
    let msg = e["message"].as_str().unwrap();
    for needle in [
        "If-Match",
        "If-None-Match",
        "--single-writer",
        "nothing was changed",
    ] {
        assert!(msg.contains(needle), "{needle:?} not in {msg}");
    }
    // Nothing was uploaded and no ref written: only the probe's own key is there.
    let keys = s3.boto3(
        "print(sorted(o['Key'] for o in s3.list_objects_v2(Bucket=bucket).get('Contents', [])))",
    );
    assert_eq!(keys.trim(), "['unsafe/probe/conditional-writes']", "{keys}");
    // The verdict is kept in the vault, for this URL.
    let list = a.json(&["remote", "list"]);
    let cw = &list["remotes"][0]["conditional_writes"];
    assert_eq!(cw["if_match"], false, "{list}");
    assert_eq!(cw["if_none_match"], false, "{list}");
    assert_eq!(cw["requests"], 3, "{list}");
    assert_eq!(cw["url"], url.as_str(), "{list}");
    // Another URL under the same name is refused; the same URL with --single-writer
    // opts in.
    let other = a.json_err(&["remote", "add", "origin", &s3.url("elsewhere")], 1);
    assert_eq!(other["kind"], "already_exists", "{other}");
    a.ok(&["remote", "add", "origin", &url, "--single-writer"]);
    let p = a.json(&["push"]);
    assert_eq!(p["refs"][0]["status"], "created", "{p}");
    assert!(p.get("probe").is_none(), "the verdict was cached: {p}");
    assert_eq!(
        a.json(&["remote", "list"])["remotes"][0]["single_writer"],
        true
    );
    a.ok(&["write", "/f", "two"]);
    a.ok(&["checkpoint", "save", "v2"]);
    assert_eq!(a.json(&["push"])["refs"][0]["status"], "updated");
    let b = machine(&s3);
    b.json(&["clone", &url, "w"]);
    assert_eq!(b.cat(Some("w"), "/f"), "two");
    // A clone's origin is not declared single-writer: refused, until the remotes file
    // says so for the bucket.
    b.ok(&["--vault", "w", "write", "/g", "from b"]);
    b.ok(&["--vault", "w", "checkpoint", "save", "b1"]);
    assert_eq!(
        b.json_err(&["--vault", "w", "push"], 1)["kind"],
        "remote_unsafe"
    );
    let toml = b.home().join("remotes.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, format!("{text}single_writer = true\n")).unwrap();
    assert_eq!(
        b.json(&["--vault", "w", "push"])["refs"][0]["status"],
        "updated"
    );
    // Removed and added at another URL: probed again there (and refused again).
    a.ok(&["remote", "remove", "origin"]);
    a.ok(&["remote", "add", "origin", &s3.url("elsewhere")]);
    assert_eq!(a.json_err(&["push"], 1)["kind"], "remote_unsafe");
    let list = a.json(&["remote", "list"]);
    assert_eq!(list["remotes"][0]["single_writer"], false, "{list}");
    assert_eq!(
        list["remotes"][0]["conditional_writes"]["url"],
        s3.url("elsewhere").as_str()
    );
}

#[test]
fn a_ref_overwritten_after_the_push_wrote_it_is_a_lost_race_and_nothing_uploaded_is_lost() {
    let s3 = S3::start();
    let a = machine(&s3);
    let src = a.path("src");
    project(&src, 60);
    a.ok(&["import", src.to_str().unwrap(), "/"]);
    a.ok(&["checkpoint", "save", "v1"]);
    let url = s3.url("lost");
    a.ok(&["remote", "add", "origin", &url]);
    let first = a.json(&["push"]);
    let v1 = first["refs"][0]["new"].as_str().unwrap().to_string();
    for i in 0..10 {
        a.ok(&[
            "write",
            &format!("/src/m{}/f{i}.txt", i % 7),
            &format!("v2 {i}"),
        ]);
    }
    a.ok(&["checkpoint", "save", "v2"]);
    // What a store that checks a condition and then writes can do: another writer's
    // put lands after ours. Here a racer puts the old ref back as soon as the push
    // has written the new one, while the push waits to read it back.
    let mut racer = s3
        .boto3_cmd(
            r#"
import sys, time
key = 'lost/refs/main'
old = s3.get_object(Bucket=bucket, Key=key)['Body'].read()
print('ready', flush=True)
deadline = time.time() + 120
while time.time() < deadline:
    if s3.get_object(Bucket=bucket, Key=key)['Body'].read() != old:
        s3.put_object(Bucket=bucket, Key=key, Body=old)
        print('overwrote', flush=True)
        sys.exit(0)
    time.sleep(0.005)
print('timeout', flush=True)
"#,
        )
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(racer.stdout.take().unwrap()));
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    let out = a
        .cmd(["--json", "push"])
        .env("AVFS_REMOTE_SETTLE_MS", "3000")
        .output()
        .unwrap();
    assert_eq!(lines.next().unwrap().unwrap(), "overwrote");
    racer.wait().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let p: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(p["refs"][0]["status"], "lost_race", "{p}");
    assert_eq!(p["refs"][0]["found"], v1.as_str(), "{p}");
    assert!(stderr.contains("avfs pull origin"), "{stderr}");
    let sent = p["objects"].as_u64().unwrap();
    assert!(sent >= 11, "{p}");
    // The remote is at v1 again; v2 descends from it, so pushing again moves the ref
    // and sends nothing: the packs of the lost push are there and reused.
    let again = a.json(&["push"]);
    assert_eq!(again["refs"][0]["status"], "updated", "{again}");
    assert_eq!(again["refs"][0]["old"], v1.as_str(), "{again}");
    assert_eq!(again["objects"], 0, "{again}");
    let b = machine(&s3);
    b.json(&["clone", &url, "w", "--full"]);
    assert_eq!(b.cat(Some("w"), "/src/m3/f3.txt"), "v2 3");
    assert_eq!(
        b.json(&["--vault", "w", "vault", "verify"])["report"]["ok"],
        true
    );
}
