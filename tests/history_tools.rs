//! History tools through the real binary: `status`, `checkpoint list --graph`,
//! `log PATH` (versions where the path changed), `diff --stat/--name-only/-- PATH` and
//! rename detection, `checkpoint prune` / `retention` with `gc` giving the space back.
//!
//! Tests that run `avfs exec` need a working engine (as tests/exec_cli.rs): without one
//! they skip with a message, and with `AVFS_REQUIRE_FUSE=1` they fail.

mod common;
#[path = "common/fuse.rs"]
mod fuse;

use common::*;
use serde_json::Value;

fn can_run(test: &str) -> bool {
    match fuse::fuse_unusable() {
        None => true,
        Some(why) => {
            if std::env::var("AVFS_REQUIRE_FUSE").as_deref() == Ok("1") {
                panic!("{test}: FUSE is required (AVFS_REQUIRE_FUSE=1): {why}");
            }
            eprintln!("SKIPPED {test}: {why}");
            false
        }
    }
}

fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

fn kinds(diff: &Value) -> Vec<(String, String, Option<String>)> {
    diff["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["kind"].as_str().unwrap().to_string(),
                c["path"].as_str().unwrap().to_string(),
                c["from"].as_str().map(String::from),
            )
        })
        .collect()
}

fn k(kind: &str, path: &str, from: Option<&str>) -> (String, String, Option<String>) {
    (kind.into(), path.into(), from.map(String::from))
}

const TEXT: &str = "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\n";

#[test]
fn diff_finds_renames_and_filters_paths() {
    let env = Env::new();
    env.ok(&["write", "-p", "/src/a.txt", TEXT]);
    env.ok(&[
        "write",
        "-p",
        "/src/b.txt",
        TEXT.replace("one", "uno").as_str(),
    ]);
    env.ok(&["write", "-p", "/docs/x.md", "# x\n"]);
    env.ok(&["checkpoint", "save", "c1"]);
    // An exact rename, an edited rename (one line of ten changed), an addition.
    env.ok(&["mkdir", "/lib"]);
    env.ok(&["mv", "/src/a.txt", "/lib/a.txt"]);
    env.ok(&["rm", "/src/b.txt"]);
    env.ok(&[
        "write",
        "/src/c.txt",
        TEXT.replace("one", "uno").replace("ten", "TEN").as_str(),
    ]);
    env.ok(&["write", "/docs/new.md", "new\n"]);

    let d = env.json(&["diff", "c1"]);
    assert_eq!(
        kinds(&d),
        [
            k("added", "/docs/new.md", None),
            k("added", "/lib", None),
            k("renamed", "/lib/a.txt", Some("/src/a.txt")),
            k("renamed", "/src/c.txt", Some("/src/b.txt")),
        ],
        "{d:#}"
    );
    let exact = &d["changes"][2];
    assert_eq!(exact["similarity"], 100);
    assert_eq!(exact["size_before"], exact["size_after"]);
    let edited = d["changes"][3]["similarity"].as_u64().unwrap();
    assert!((50..100).contains(&edited), "{edited}");
    assert_eq!(d["summary"]["renamed"], 2);
    assert_eq!(d["summary"]["added"], 2);
    assert_eq!(d["summary"]["deleted"], 0);

    // The patch of an edited rename goes from the old name to the new one; an exact
    // rename has none.
    let p = env.json(&["diff", "c1", "-p"]);
    let patch = p["changes"][3]["patch"].as_str().unwrap();
    assert!(
        patch.contains("--- a/src/b.txt") && patch.contains("+++ b/src/c.txt"),
        "{patch}"
    );
    assert!(patch.contains("-ten\n+TEN\n"), "{patch}");
    assert!(p["changes"][2].get("patch").is_none(), "{p:#}");

    // Only identical content at 100 %; no renames at all with --no-renames.
    let d = env.json(&["diff", "c1", "--find-renames", "100"]);
    assert_eq!(d["summary"]["renamed"], 1);
    assert_eq!(d["summary"]["deleted"], 1);
    let d = env.json(&["diff", "c1", "--no-renames"]);
    assert!(d["summary"].get("renamed").is_none(), "{d:#}");
    assert_eq!(d["summary"]["deleted"], 2);
    assert_eq!(d["summary"]["added"], 4);

    // Path filters: after `--`, or --path; a rename counts for both its paths.
    let d = env.json(&["diff", "c1", "--", "/docs"]);
    assert_eq!(kinds(&d), [k("added", "/docs/new.md", None)]);
    assert_eq!(d["paths"], serde_json::json!(["/docs"]));
    let d = env.json(&["diff", "c1", "live", "--path", "/src"]);
    assert_eq!(
        kinds(&d),
        [
            k("renamed", "/lib/a.txt", Some("/src/a.txt")),
            k("renamed", "/src/c.txt", Some("/src/b.txt")),
        ]
    );
    // A prefix matches whole names only.
    let d = env.json(&["diff", "c1", "--path", "/sr"]);
    assert!(d["changes"].as_array().unwrap().is_empty(), "{d:#}");

    // --name-only: one path a line.
    let r = env.ok(&["diff", "c1", "--name-only"]);
    assert_eq!(r.stdout, "/docs/new.md\n/lib\n/lib/a.txt\n/src/c.txt\n");
    let d = env.json(&["diff", "c1", "--name-only"]);
    assert_eq!(d["names"].as_array().unwrap().len(), 4);

    // --stat: per-file line counts and totals.
    let d = env.json(&["diff", "c1", "--stat"]);
    let files = d["stat"]["files"].as_array().unwrap();
    let c = files.iter().find(|f| f["path"] == "/src/c.txt").unwrap();
    assert_eq!(
        (c["insertions"].as_u64(), c["deletions"].as_u64()),
        (Some(1), Some(1))
    );
    let a = files.iter().find(|f| f["path"] == "/lib/a.txt").unwrap();
    assert_eq!(
        (a["insertions"].as_u64(), a["deletions"].as_u64()),
        (Some(0), Some(0))
    );
    assert_eq!(d["stat"]["totals"]["files"], 3, "{d:#}");
    assert_eq!(d["stat"]["totals"]["insertions"], 2);
    assert_eq!(d["stat"]["totals"]["deletions"], 1);
    let r = env.ok(&["diff", "c1", "--stat"]);
    assert!(
        r.stdout.contains("/src/b.txt => /src/c.txt")
            && r.stdout
                .contains(" 3 files changed, 2 insertions(+), 1 deletions(-)"),
        "{}",
        r.stdout
    );
    // Human output names both sides of a rename.
    let r = env.ok(&["diff", "c1"]);
    assert!(
        r.stdout.contains("R /src/a.txt -> /lib/a.txt"),
        "{}",
        r.stdout
    );

    // Bad input: a clear usage error, nothing else.
    let r = env.run(&["diff", "c1", "--find-renames", "0"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    let r = env.run(&["diff", "c1", "--name-only", "--stat"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
}

#[test]
fn log_lists_only_versions_where_the_path_changed() {
    let env = Env::new();
    env.ok(&["write", "/f", "v1"]);
    env.ok(&["checkpoint", "save", "c1"]);
    env.ok(&["write", "/g", "other"]);
    env.ok(&["checkpoint", "save", "c2"]);
    env.ok(&["checkpoint", "save", "c3"]);
    env.ok(&["write", "/f", "v2"]);
    env.ok(&["checkpoint", "save", "c4"]);
    env.ok(&["write", "/g", "more"]);
    let at = |l: &Value| -> Vec<String> {
        l["versions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["at"].as_str().unwrap().to_string())
            .collect()
    };
    let l = env.json(&["log", "/f"]);
    assert_eq!(at(&l), ["c1", "c4"], "{l:#}");
    assert!(
        l["versions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v["changed"] == true)
    );
    let all = env.json(&["log", "/f", "--all"]);
    assert_eq!(at(&all), ["c1", "c2", "c3", "c4", "live"]);
    env.ok(&["write", "/f", "v3"]);
    assert_eq!(at(&env.json(&["log", "/f"])), ["c1", "c4", "live"]);
    let r = env.ok(&["log", "/f"]);
    assert_eq!(r.stdout.lines().count(), 3, "{}", r.stdout);
}

#[test]
fn status_reports_head_changes_and_approvals() {
    let env = Env::new();
    env.ok(&["vault", "create", "t"]);
    env.ok(&["--vault", "t", "write", "/a", "a\n"]);
    let s = env.json(&["--vault", "t", "status"]);
    assert_eq!(s["vault"], "t");
    assert_eq!(s["workspace"], "main");
    assert!(s["head"].is_null());
    assert_eq!(s["clean"], false);
    assert_eq!(s["summary"]["added"], 1);
    assert!(
        s["workspace_path"].as_str().unwrap().ends_with("/ws/t"),
        "{s:#}"
    );
    env.ok(&["--vault", "t", "checkpoint", "save", "c1", "-m", "first"]);
    let s = env.json(&["--vault", "t", "status"]);
    assert_eq!(s["clean"], true);
    assert_eq!(s["head"]["name"], "c1");
    assert_eq!(s["head"]["message"], "first");
    assert!(s["changes"].as_array().unwrap().is_empty());
    let r = env.ok(&["--vault", "t", "status"]);
    assert!(
        r.stdout
            .contains("nothing changed since the head checkpoint"),
        "{}",
        r.stdout
    );

    env.ok(&["--vault", "t", "write", "/b", "b\n"]);
    env.ok(&["--vault", "t", "mv", "/a", "/a2"]);
    env.ok(&["--vault", "t", "chmod", "700", "/b"]);
    let s = env.json(&["--vault", "t", "status"]);
    assert_eq!(s["clean"], false);
    assert_eq!(s["summary"]["added"], 1, "{s:#}");
    assert_eq!(s["summary"]["renamed"], 1, "{s:#}");
    assert_eq!(s["changes"][0]["path"], "/a2");
    assert_eq!(s["changes"][0]["from"], "/a");
    let r = env.ok(&["--vault", "t", "status"]);
    assert!(
        r.stdout.contains("unsaved changes: 1 added, 1 renamed"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("avfs checkpoint save"), "{}", r.stdout);

    // A request waiting for a person shows, with the command that decides it.
    let a = env.run(&["--json", "--vault", "t", "exec", "--", "curl", "x"]);
    assert_eq!(a.code, 75, "{}", a.stdout);
    let id = a.json()["approval"]["id"].as_str().unwrap().to_string();
    let s = env.json(&["--vault", "t", "status"]);
    let pending = s["pending_approvals"].as_array().unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0]["id"], id.as_str());
    assert!(
        s["next"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains(&format!("avfs approve {id}")))
    );
    assert!(s["runs"].as_array().unwrap().is_empty());
    assert!(s["mounts"].as_array().unwrap().is_empty());
}

#[test]
fn graph_shows_forks_and_merges() {
    let env = Env::new();
    env.ok(&["write", "/f", "base\n"]);
    env.ok(&["checkpoint", "save", "base"]);
    env.ok(&["vault", "fork", "default", "task"]);
    env.ok(&["--vault", "task", "write", "/g", "fork\n"]);
    env.ok(&["--vault", "task", "checkpoint", "save", "t1"]);
    env.ok(&["write", "/h", "main\n"]);
    env.ok(&["checkpoint", "save", "m1"]);
    let m = env.run(&["--json", "vault", "merge", "task"]);
    assert_eq!(m.code, 0, "{}", m.stdout);
    let merge = m.json()["checkpoint"]["name"].as_str().unwrap().to_string();

    let g = env.json(&["checkpoint", "list", "--graph"]);
    let nodes = g["graph"]["nodes"].as_array().unwrap();
    let node = |n: &str| {
        nodes
            .iter()
            .find(|x| x["name"] == n)
            .unwrap_or_else(|| panic!("{n} in {g:#}"))
    };
    let mn = node(&merge);
    assert_eq!(mn["workspace"], "main");
    assert_eq!(mn["heads"], serde_json::json!(["main"]));
    let parents = names(&mn["parents"]);
    assert_eq!(parents.len(), 2, "{mn:#}");
    assert_eq!(parents[0], "m1");
    assert!(parents[1].starts_with("merged-into-main-"), "{parents:?}");
    assert_eq!(names(&node("t1")["parents"]), ["base"]);
    assert_eq!(node("t1")["workspace"], "task");
    // Every node comes before its parents.
    let pos = |n: &str| nodes.iter().position(|x| x["name"] == n).unwrap();
    assert_eq!(pos(&merge), 0);
    assert!(pos("m1") < pos("base") && pos("t1") < pos("base"));
    let lines: Vec<&str> = g["graph"]["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert!(lines[0].starts_with("* merge-task-"), "{lines:#?}");
    assert!(
        lines.iter().any(|l| l.starts_with("| * ")),
        "two columns: {lines:#?}"
    );
    assert!(
        lines.last().unwrap().starts_with("* base [main]"),
        "{lines:#?}"
    );
    let r = env.ok(&["checkpoint", "list", "--graph"]);
    assert_eq!(r.stdout.lines().count(), lines.len());
}

/// Runs `avfs exec` in vault `t` and insists that it worked.
fn exec_ok(env: &Env, shell: &str) -> Value {
    let r = env.run(&[
        "--json",
        "--vault",
        "t",
        "exec",
        "--checkpoint",
        "--shell",
        shell,
    ]);
    assert_eq!(r.code, 0, "exec {shell}: {}\n{}", r.stdout, r.stderr);
    r.json()
}

fn vault_bytes(env: &Env) -> u64 {
    std::fs::metadata(env.home().join("vaults/t.avfs"))
        .unwrap()
        .len()
}

fn exec_checkpoints(env: &Env) -> Vec<String> {
    names(&env.json(&["--vault", "t", "checkpoint", "list"])["checkpoints"])
        .into_iter()
        .filter(|n| n.starts_with("exec-"))
        .collect()
}

#[test]
fn prune_keeps_named_and_recent_and_gc_gives_space_back() {
    if !can_run("prune_keeps_named_and_recent_and_gc_gives_space_back") {
        return;
    }
    let env = Env::new();
    env.ok(&["vault", "create", "t"]);
    env.ok(&["--vault", "t", "write", "/seed", "x\n"]);
    env.ok(&["--vault", "t", "checkpoint", "save", "mine"]);
    for i in 0..6 {
        // Every run replaces a 400 KB file of random bytes (they do not compress): each
        // exec checkpoint holds another one.
        exec_ok(&env, "head -c 400000 /dev/urandom > big");
        if i == 2 {
            env.ok(&["--vault", "t", "checkpoint", "save", "named-later"]);
        }
    }
    let execs = exec_checkpoints(&env);
    assert_eq!(execs.len(), 6);

    let err = env.json_err(&["--vault", "t", "checkpoint", "prune"], 1);
    assert_eq!(err["kind"], "invalid_argument");
    assert!(
        err["message"].as_str().unwrap().contains("--keep-last"),
        "{err}"
    );

    let dry = env.json(&[
        "--vault",
        "t",
        "checkpoint",
        "prune",
        "--keep-last",
        "2",
        "--dry-run",
    ]);
    assert_eq!(dry["dry_run"], true);
    assert_eq!(names_of(&dry["pruned"]), execs[..4]);
    assert_eq!(exec_checkpoints(&env), execs, "a dry run deletes nothing");

    env.json(&["--vault", "t", "gc"]);
    let before = vault_bytes(&env);
    let p = env.json(&["--vault", "t", "checkpoint", "prune", "--keep-last", "2"]);
    assert_eq!(names_of(&p["pruned"]), execs[..4]);
    assert_eq!(p["kept_automatic"], 2);
    assert_eq!(p["kept_other"], 2);
    assert_eq!(exec_checkpoints(&env), execs[4..]);
    let all = names(&env.json(&["--vault", "t", "checkpoint", "list"])["checkpoints"]);
    assert!(all.contains(&"mine".to_string()) && all.contains(&"named-later".to_string()));
    // What the named checkpoint holds is still there.
    assert_eq!(
        env.ok(&["--vault", "t", "cat", "/seed", "--at", "named-later"])
            .stdout,
        "x\n"
    );
    let g = env.json(&["--vault", "t", "gc"]);
    let after = vault_bytes(&env);
    // Four exec checkpoints go; `named-later` holds the same file as one of them: two
    // 400 KB files go (allowing for the audit rows written meanwhile).
    assert!(
        after + 600_000 <= before,
        "vault {before} -> {after} bytes after prune + gc: {g}"
    );
    assert_eq!(
        env.json(&["--vault", "t", "vault", "verify"])["report"]["ok"],
        true
    );
    // The audit log says what went.
    let audit = env.json(&["--vault", "t", "audit"]).to_string();
    assert!(audit.contains("checkpoint.prune"), "{audit}");

    // --keep-days keeps everything this young.
    let p = env.json(&["--vault", "t", "checkpoint", "prune", "--keep-days", "1"]);
    assert!(p["pruned"].as_array().unwrap().is_empty());
}

fn names_of(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn retention_setting_prunes_after_each_exec() {
    if !can_run("retention_setting_prunes_after_each_exec") {
        return;
    }
    let env = Env::new();
    env.ok(&["vault", "create", "t"]);
    let r = env.json(&["--vault", "t", "checkpoint", "retention"]);
    assert!(r["keep_last"].is_null());
    let r = env.json(&[
        "--vault",
        "t",
        "checkpoint",
        "retention",
        "--keep-last",
        "2",
    ]);
    assert_eq!(r["keep_last"], 2);
    env.ok(&["--vault", "t", "checkpoint", "save", "mine"]);
    let mut ids = vec![];
    for i in 0..4 {
        let e = exec_ok(&env, &format!("echo {i} > f{i}"));
        ids.push(e["checkpoint"].as_str().unwrap().to_string());
    }
    assert_eq!(exec_checkpoints(&env), ids[2..]);
    assert!(
        names(&env.json(&["--vault", "t", "checkpoint", "list"])["checkpoints"])
            .contains(&"mine".to_string())
    );
    assert_eq!(env.cat(Some("t"), "/f0"), "0\n");
    let s = env.json(&["--vault", "t", "status"]);
    assert_eq!(s["auto_prune_keep_last"], 2);
    assert_eq!(s["automatic_checkpoints"], 2);
    let r = env.json(&["--vault", "t", "checkpoint", "retention", "--off"]);
    assert!(r["keep_last"].is_null());
    exec_ok(&env, "echo x > g");
    assert_eq!(exec_checkpoints(&env).len(), 3);
    let r = env.run(&[
        "--vault",
        "t",
        "checkpoint",
        "retention",
        "--keep-last",
        "-1",
    ]);
    assert_eq!(r.code, 2);
}
