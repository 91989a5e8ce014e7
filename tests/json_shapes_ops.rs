//! The JSON documents of docs/json.md, checked against the real binary (continued from
//! tests/json_shapes.rs): upkeep, usage errors, mounts, policy, remotes and the history
//! tools (status, graph, prune, retention, diff --stat, renames, paging).

mod common;
use common::*;
#[path = "common/documents.rs"]
mod documents;
#[path = "common/shapes.rs"]
mod shapes;

use serde_json::Value;
use shapes::*;

// ---- upkeep -----------------------------------------------------------------------------

#[test]
fn audit_and_audit_verify() {
    let env = Env::new();
    doc(&env, &["write", "/a", "x"]);
    doc(&env, &["mkdir", "/d"]);
    doc(&env, &["checkpoint", "save", "c"]);

    let a = doc(&env, &["audit"]);
    shape(&a, &[("entries", Arr)]);
    let entries = each(
        &a["entries"],
        &[
            ("id", Num),
            ("time", Str),
            ("ts_ns", Num),
            ("workspace", NullOr(&Str)),
            ("actor", Str),
            ("action", Str),
            ("detail", Any),
            ("hash", Str),
        ],
    );
    for e in entries {
        assert_time(&e["time"]);
        assert_hash(&e["hash"]);
    }
    let actions: Vec<&str> = entries
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        ["vault.create", "write", "mkdir", "checkpoint.save"]
    );
    assert_eq!(entries[0]["id"], 1);
    assert_eq!(entries[1]["detail"]["path"], "/a");
    let a = doc(&env, &["audit", "--limit", "1"]);
    let entries = each(&a["entries"], &[("id", Num), ("action", Str)]);
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["action"], "checkpoint.save");
    let a = doc(&env, &["audit", "--since", "2999-01-01T00:00:00Z"]);
    assert_eq!(a["entries"], serde_json::json!([]));
    err_doc(
        &env,
        &["audit", "--since", "yesterday"],
        1,
        "invalid_argument",
    );

    let v = doc(&env, &["audit", "verify"]);
    check_audit_verify(&v);
    assert_eq!(v["ok"], true);
    assert_eq!(v["rows"], 4);

    sqlite(&env, "default")
        .execute("UPDATE audit SET detail = '{}' WHERE id = 2", [])
        .unwrap();
    let r = env.run(&["--json", "audit", "verify"]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    let v = one_document(&r.stdout);
    assert!(v.get("error").is_none(), "{v}");
    check_audit_verify(&v);
    assert_eq!(v["ok"], false);
    assert_eq!(v["problems"][0]["id"], 2);
}

#[test]
fn gc_and_stats() {
    let env = Env::new();
    doc(&env, &["write", "/a", "first content"]);
    doc(&env, &["checkpoint", "save", "old"]);
    doc(&env, &["write", "/a", "second content"]);
    doc(&env, &["checkpoint", "save", "new"]);
    doc(&env, &["checkpoint", "delete", "old"]);

    let g = doc(&env, &["gc"]);
    shape(
        &g,
        &[
            ("chunks_removed", Num),
            ("contents_removed", Num),
            ("trees_removed", Num),
            ("bytes_freed", Num),
            ("layers_purged", Num),
            ("objects_kept", Num),
            ("layers", Obj),
        ],
    );
    shape(
        &g["layers"],
        &[
            ("retired_kept", Num),
            ("removed_layers", Num),
            ("forgotten_roots", Num),
            ("freed_bytes", Num),
            ("bytes", Num),
        ],
    );
    // `checkpoint delete` already took back what only "old" held.
    assert_eq!(g["chunks_removed"], 0, "{g}");

    doc(&env, &["vault", "fork", "default", "f"]);
    let s = doc(&env, &["--vault", "f", "stats"]);
    shape(
        &s,
        &[
            ("vault", Str),
            ("path", Str),
            ("workspace", Str),
            ("file_bytes", Num),
            ("stats", Obj),
        ],
    );
    assert_eq!(s["vault"], "f");
    assert_eq!(s["workspace"], "f");
    shape(&s["stats"], &[("vault", Obj), ("workspace", NullOr(&Obj))]);
    shape(
        &s["stats"]["vault"],
        &[
            ("stored_bytes", Num),
            ("chunks", Num),
            ("contents", Num),
            ("trees", Num),
            ("tree_bytes", Num),
            ("chunk_list_bytes", Num),
            ("checkpoints", Num),
            ("workspaces", Num),
            ("forks", Num),
            ("live_inodes", Num),
        ],
    );
    let w = &s["stats"]["workspace"];
    shape(
        w,
        &[
            ("name", Str),
            ("root", Str),
            ("parent", NullOr(&Str)),
            ("head", NullOr(&Str)),
            ("files", Num),
            ("dirs", Num),
            ("symlinks", Num),
            ("other", Num),
            ("hard_links", Num),
            ("logical_bytes", Num),
            ("checkpoints", Num),
        ],
    );
    assert_hash(&w["root"]);
    assert_eq!(w["name"], "f");
    assert_eq!(w["parent"], "main");
    assert_eq!(w["files"], 1);
    assert_eq!(s["stats"]["vault"]["forks"], 1);
    assert_eq!(s["stats"]["vault"]["workspaces"], 2);
}

// ---- usage errors -----------------------------------------------------------------------

#[test]
fn usage_errors_are_one_json_document_with_exit_2() {
    let env = Env::new();
    for args in [
        &["frobnicate"][..],
        &["ls", "--no-such-flag"],
        &["cat"],
        &["tree", "-L", "many"],
        &["restore", "/f"],
        &["vault", "fork", "only-one"],
    ] {
        err_doc(&env, args, 2, "usage");
    }
    // --json after the command works too.
    let r = env.run(&["ls", "--bogus", "--json"]);
    assert_eq!(r.code, 2);
    assert_eq!(one_document(&r.stdout)["error"]["kind"], "usage");
    // Without --json, stdout stays empty.
    let r = env.run(&["ls", "--bogus"]);
    assert_eq!(r.code, 2);
    assert!(r.stdout.is_empty(), "{}", r.stdout);
    let r = env.run(&["cat", "/nope"]);
    assert_eq!(r.code, 1);
    assert!(r.stdout.is_empty(), "{}", r.stdout);
    assert!(r.stderr.contains("error"), "{}", r.stderr);
}

// ---- mounts -----------------------------------------------------------------------------

const MOUNT: &[(&str, Kind)] = &[
    ("id", Str),
    ("vault", Str),
    ("vault_path", Str),
    ("workspace", Str),
    ("mountpoint", Str),
    ("pid", Num),
    ("socket", Str),
    ("readonly", Bool),
    ("started_at_ns", Num),
];

#[test]
fn mounts_and_unmount_without_fuse() {
    let env = Env::new();
    let m = doc(&env, &["mounts"]);
    shape(&m, &[("mounts", Arr)]);
    assert_eq!(m["mounts"], serde_json::json!([]));
    let dir = env.path("not-mounted");
    std::fs::create_dir_all(&dir).unwrap();
    err_doc(&env, &["unmount", dir.to_str().unwrap()], 1, "not_found");
    err_doc(&env, &["mount", "a", "b", "c"], 2, "usage");
}

/// Unmounts on drop, so a failing assertion leaves no server behind.
struct Mounted<'a> {
    env: &'a Env,
    mountpoint: String,
}

impl Drop for Mounted<'_> {
    fn drop(&mut self) {
        let _ = self.env.run(&["unmount", &self.mountpoint]);
    }
}

fn fuse_usable() -> bool {
    std::path::Path::new("/dev/fuse").exists()
}

#[test]
fn mount_mounts_unmount() {
    if !fuse_usable() && std::env::var("AVFS_REQUIRE_FUSE").as_deref() != Ok("1") {
        eprintln!("skipping: no /dev/fuse (set AVFS_REQUIRE_FUSE=1 to insist)");
        return;
    }
    let env = Env::new();
    doc(&env, &["write", "/hello", "hi"]);
    let mp = env.path("mnt");
    std::fs::create_dir_all(&mp).unwrap();
    let mps = mp.to_str().unwrap().to_string();

    let m = doc(&env, &["mount", &mps]);
    let guard = Mounted {
        env: &env,
        mountpoint: mps.clone(),
    };
    shape(&m, &[("mount", Obj)]);
    shape(&m["mount"], MOUNT);
    assert_eq!(m["mount"]["mountpoint"], mps.as_str());
    assert_eq!(m["mount"]["vault"], "default");
    assert_eq!(m["mount"]["workspace"], "main");
    assert_eq!(m["mount"]["readonly"], false);
    assert_eq!(std::fs::read_to_string(mp.join("hello")).unwrap(), "hi");

    let list = doc(&env, &["mounts"]);
    shape(&list, &[("mounts", Arr)]);
    let mounts = each(&list["mounts"], MOUNT);
    assert_eq!(mounts.len(), 1);
    assert_eq!(mounts[0]["id"], m["mount"]["id"]);
    assert_eq!(mounts[0]["pid"], m["mount"]["pid"]);

    err_doc(
        &env,
        &["mount", env.path("other").to_str().unwrap()],
        1,
        "refused",
    );

    let u = doc(&env, &["unmount", &mps]);
    shape(&u, &[("unmounted", Str), ("result", Str)]);
    assert_eq!(u["unmounted"], mps.as_str());
    assert_eq!(u["result"], "unmounted");
    drop(guard);
    assert_eq!(doc(&env, &["mounts"])["mounts"], serde_json::json!([]));
    err_doc(&env, &["unmount", &mps], 1, "not_found");
}

/// `policy check` (the envelope's decision object) and `policy test --corpus`.
#[test]
fn policy_check_and_corpus() {
    let env = Env::new();
    doc(&env, &["vault", "create", "p"]);
    let d = doc(
        &env,
        &[
            "--vault",
            "p",
            "policy",
            "check",
            "--no-sandbox",
            "--shell",
            "cat a; cat /etc/passwd",
        ],
    );
    shape(
        &d,
        &[
            ("action", Str),
            ("categories", Arr),
            ("matched_rule", Str),
            ("reason", Str),
            ("findings", Arr),
        ],
    );
    assert_eq!(d["action"], "deny");
    assert_eq!(
        d["categories"],
        serde_json::json!(["read_only", "host_escape_risk"])
    );
    each(
        &d["findings"],
        &[
            ("program", Str),
            ("category", Str),
            ("action", Str),
            ("rule", Str),
            ("reason", Str),
        ],
    );
    let f = env.path("corpus.txt");
    std::fs::write(
        &f,
        "% no-sandbox\nallow read_only ls\ndeny read_only cat /etc/passwd\n",
    )
    .unwrap();
    let mut a = vec!["--json", "--vault", "p", "policy", "test", "--corpus"];
    a.push(f.to_str().unwrap());
    let r = env.run(&a);
    assert_eq!(r.code, 1, "one line fails: {}", r.stdout);
    let t = one_document(&r.stdout);
    shape(&t, &[("ok", Bool), ("lines", Num), ("failed", Arr)]);
    assert_eq!(t["lines"], 2);
    let failed = each(
        &t["failed"],
        &[
            ("line", Num),
            ("command", Str),
            ("expected_action", Str),
            ("expected_category", Str),
            ("action", Str),
            ("category", Str),
            ("rule", Str),
            ("reason", Str),
            ("ok", Bool),
        ],
    );
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["category"], "host_escape_risk");
}

// ---- remotes (docs/json.md "Remotes"), against a directory remote -----------------------

const TRAFFIC: &[(&str, Kind)] = &[("requests", Num), ("bytes_up", Num), ("bytes_down", Num)];

#[test]
fn remote_push_fetch_pull_clone_gc() {
    let env = Env::new();
    let dir = env.path("remote");
    let url = format!("file://{}", dir.display());
    env.ok(&["write", "/f", "one"]);
    env.ok(&["checkpoint", "save", "v1"]);
    let added = doc(&env, &["remote", "add", "origin", &url]);
    shape(
        &added["added"],
        &[
            ("name", Str),
            ("url", Str),
            ("refs", Arr),
            ("single_writer", Bool),
            ("conditional_writes", NullOr(&Obj)),
        ],
    );
    let p = doc(&env, &["push"]);
    shape(
        &p,
        &[
            ("remote", Str),
            ("url", Str),
            ("refs", Arr),
            ("packs", Num),
            ("objects", Num),
            ("bytes", Num),
            ("traffic", Obj),
            ("seconds", Any),
            ("unsaved_changes", Arr),
        ],
    );
    assert!(p["seconds"].is_number());
    shape(&p["traffic"], TRAFFIC);
    shape(
        &p["refs"][0],
        &[
            ("workspace", Str),
            ("checkpoint", Str),
            ("old", NullOr(&Str)),
            ("new", Str),
            ("status", Str),
        ],
    );
    assert_eq!(p["refs"][0]["status"], "created");
    let l = doc(&env, &["remote", "list"]);
    shape(
        &l["remotes"][0],
        &[
            ("name", Str),
            ("url", Str),
            ("refs", Arr),
            ("single_writer", Bool),
            ("conditional_writes", NullOr(&Obj)),
        ],
    );
    shape(
        &l["remotes"][0]["refs"][0],
        &[("workspace", Str), ("head", Str)],
    );
    let f = doc(&env, &["fetch"]);
    shape(
        &f,
        &[
            ("remote", Str),
            ("url", Str),
            ("refs", Arr),
            ("lazy", Bool),
            ("fetched", Obj),
            ("traffic", Obj),
            ("seconds", Any),
        ],
    );
    shape(
        &f["refs"][0],
        &[
            ("workspace", Str),
            ("checkpoint", Str),
            ("head", Str),
            ("previous", NullOr(&Str)),
        ],
    );
    shape(&f["fetched"], &[("objects", Num), ("bytes", Num)]);
    let other = Env::new();
    let c = doc(&other, &["clone", &url, "copy"]);
    shape(&c, &[("vault", Obj), ("clone", Obj)]);
    shape(
        &c["clone"],
        &[
            ("url", Str),
            ("path", Str),
            ("workspace", Str),
            ("checkpoint", Str),
            ("head", Str),
            ("lazy", Bool),
            ("resumed", Bool),
            ("fetched", Obj),
            ("traffic", Obj),
            ("seconds", Any),
        ],
    );
    let pl = doc(&env, &["pull"]);
    shape(
        &pl,
        &[
            ("remote", Str),
            ("workspace", Str),
            ("status", Str),
            ("checkpoint", NullOr(&Str)),
            ("before", NullOr(&Str)),
            ("taken", Arr),
            ("conflicts", Arr),
            ("unresolved", Num),
            ("fetch", Obj),
        ],
    );
    assert_eq!(pl["status"], "up_to_date");
    let g = doc(&env, &["remote", "gc", "origin"]);
    shape(
        &g,
        &[
            ("remote", Str),
            ("packs_deleted", Num),
            ("bytes_freed", Num),
            ("packs_kept_young", Num),
            ("traffic", Obj),
        ],
    );
    err_doc(&env, &["push", "nowhere"], 1, "no_such_remote");
    other.ok(&["--vault", "copy", "write", "/f", "two"]);
    other.ok(&["--vault", "copy", "checkpoint", "save", "v2"]);
    env.ok(&["write", "/g", "x"]);
    env.ok(&["checkpoint", "save", "v2b"]);
    doc(&other, &["--vault", "copy", "push"]);
    err_doc(&env, &["push"], 1, "push_rejected");
    // A fork at the remote's checkpoint: `vault fork`'s shape plus what came from where.
    let fk = doc(
        &env,
        &["vault", "fork", "default", "theirs", "--remote", "origin"],
    );
    shape(
        &fk,
        &[
            ("fork", Obj),
            ("parent", Str),
            ("checkpoint", NullOr(&Str)),
            ("remote", Obj),
        ],
    );
    shape(
        &fk["remote"],
        &[
            ("remote", Str),
            ("workspace", Str),
            ("checkpoint", Str),
            ("head", Str),
            ("base", NullOr(&Str)),
            ("lazy", Bool),
            ("fetched", Obj),
            ("traffic", Obj),
            ("seconds", Any),
        ],
    );
    assert_eq!(fk["checkpoint"], "v2");
    assert_eq!(fk["remote"]["base"], "v1");
    shape(&fk["remote"]["traffic"], TRAFFIC);
    let removed = doc(&env, &["remote", "remove", "origin"]);
    shape(&removed["removed"], &[("name", Str), ("url", Str)]);
}

// ---- history tools (status, graph, prune, retention, diff --stat, renames) ---------------

#[test]
fn status_shape() {
    let env = Env::new();
    doc(&env, &["write", "/a", "a\n"]);
    doc(&env, &["checkpoint", "save", "c1", "-m", "first"]);
    doc(&env, &["mv", "/a", "/b"]);
    let s = doc(&env, &["status"]);
    shape(
        &s,
        &[
            ("vault", Str),
            ("vault_path", Str),
            ("workspace", Str),
            ("parent", NullOr(&Str)),
            ("workspace_path", Str),
            ("head", NullOr(&Obj)),
            ("clean", Bool),
            ("summary", Obj),
            ("changes", Arr),
            ("changes_truncated", Bool),
            ("checkpoints", Num),
            ("automatic_checkpoints", Num),
            ("auto_prune_keep_last", NullOr(&Num)),
            ("mounts", Arr),
            ("runs", Arr),
            ("kept_overlays", Arr),
            ("pending_approvals", Arr),
            ("next", Arr),
        ],
    );
    shape(
        &s["head"],
        &[
            ("name", Str),
            ("created_at", Str),
            ("origin", Str),
            ("message", NullOr(&Str)),
        ],
    );
    assert_time(&s["head"]["created_at"]);
    shape(&s["summary"], SUMMARY);
    assert_eq!(s["summary"]["renamed"], 1);
    let changes = each(
        &s["changes"],
        &[("path", Str), ("kind", Str), ("from", Opt(&Str))],
    );
    assert_eq!(changes[0]["from"], "/a");
    assert!(s["next"].as_array().unwrap().iter().all(|n| n.is_string()));
}

#[test]
fn diff_stat_names_paths_and_renames_shape() {
    let env = Env::new();
    doc(&env, &["write", "-p", "/src/a.txt", "one\ntwo\n"]);
    doc(&env, &["checkpoint", "save", "c1"]);
    doc(&env, &["mv", "/src/a.txt", "/src/b.txt"]);
    doc(&env, &["write", "/src/new.txt", "x\n"]);
    let d = doc(&env, &["diff", "c1", "--stat", "--path", "/src"]);
    let changes = check_diff_with_renames(&d);
    let r = changes.iter().find(|c| c["kind"] == "renamed").unwrap();
    shape(r, &[("from", Str), ("similarity", Num)]);
    assert_eq!(d["paths"], serde_json::json!(["/src"]));
    shape(&d["stat"], &[("files", Arr), ("totals", Obj)]);
    each(
        &d["stat"]["files"],
        &[
            ("path", Str),
            ("kind", Str),
            ("from", Opt(&Str)),
            ("insertions", NullOr(&Num)),
            ("deletions", NullOr(&Num)),
            ("binary", Bool),
        ],
    );
    shape(
        &d["stat"]["totals"],
        &[("files", Num), ("insertions", Num), ("deletions", Num)],
    );
    let n = doc(&env, &["diff", "c1", "--name-only"]);
    check_diff_with_renames(&n);
    assert_eq!(
        n["names"],
        serde_json::json!(["/src/b.txt", "/src/new.txt"])
    );
    err_doc(&env, &["diff", "c1", "--find-renames", "101"], 2, "usage");
}

/// `check_diff`, where `renamed` is one more kind (present in the summary when not 0).
fn check_diff_with_renames(d: &Value) -> &Vec<Value> {
    shape(
        d,
        &[
            ("from", Str),
            ("to", Str),
            ("summary", Obj),
            ("changes", Arr),
        ],
    );
    shape(&d["summary"], SUMMARY);
    let changes = each(&d["changes"], CHANGE);
    let mut counted = 0;
    for k in [
        "added",
        "modified",
        "deleted",
        "type_changed",
        "mode_changed",
        "meta_changed",
        "renamed",
    ] {
        let n = d["summary"][k].as_u64().unwrap_or(0) as usize;
        assert_eq!(
            n,
            changes.iter().filter(|c| c["kind"] == k).count(),
            "{k}: {d:#}"
        );
        counted += n;
    }
    assert_eq!(counted, changes.len(), "a change of unknown kind: {d:#}");
    changes
}

#[test]
fn graph_prune_retention_shapes() {
    let env = Env::new();
    doc(&env, &["write", "/f", "x"]);
    doc(&env, &["checkpoint", "save", "base"]);
    doc(&env, &["vault", "fork", "default", "task"]);
    doc(&env, &["--vault", "task", "checkpoint", "save", "t1"]);
    let g = doc(&env, &["checkpoint", "list", "--graph"]);
    shape(&g, &[("graph", Obj), ("head", NullOr(&Str))]);
    shape(&g["graph"], &[("nodes", Arr), ("lines", Arr)]);
    let nodes = each(
        &g["graph"]["nodes"],
        &[
            ("name", Str),
            ("workspace", Str),
            ("parents", Arr),
            ("heads", Arr),
            ("created_at", Str),
            ("origin", Str),
            ("message", NullOr(&Str)),
            ("column", Num),
        ],
    );
    for n in nodes {
        each(&n["parents"], &[("name", Str), ("workspace", Str)]);
        assert_time(&n["created_at"]);
    }
    assert_eq!(nodes.len(), 2);

    let p = doc(
        &env,
        &["checkpoint", "prune", "--keep-last", "1", "--dry-run"],
    );
    shape(
        &p,
        &[
            ("workspace", Str),
            ("dry_run", Bool),
            ("retention", Obj),
            ("pruned", Arr),
            ("kept_automatic", Num),
            ("kept_other", Num),
        ],
    );
    shape(
        &p["retention"],
        &[("keep_last", NullOr(&Num)), ("keep_days", NullOr(&Num))],
    );
    err_doc(&env, &["checkpoint", "prune"], 1, "invalid_argument");
    let r = doc(&env, &["checkpoint", "retention", "--keep-last", "3"]);
    shape(&r, &[("keep_last", NullOr(&Num))]);
    assert_eq!(r["keep_last"], 3);
    assert_eq!(doc(&env, &["checkpoint", "retention"])["keep_last"], 3);
    assert!(doc(&env, &["checkpoint", "retention", "--off"])["keep_last"].is_null());
}

#[test]
fn vault_delete_lists_unmounted_and_pending_merges_have_their_shapes() {
    let env = Env::new();
    env.ok(&["vault", "create", "v"]);
    env.ok(&["--vault", "v", "write", "/f.txt", "base\n"]);
    env.ok(&["--vault", "v", "checkpoint", "save", "b"]);
    env.ok(&["vault", "fork", "v", "t"]);
    env.ok(&["--vault", "t", "write", "/f.txt", "fork\n"]);
    env.ok(&["--vault", "v", "write", "/f.txt", "target\n"]);
    let mut a = vec!["--json", "vault", "merge", "t"];
    // Without markers: refused, nothing changed.
    let r = env.run(&a);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let m = one_document(&r.stdout);
    documents::assert_matches("vault-merge", &m);
    shape(
        &m,
        &[
            ("clean", Bool),
            ("pending", Bool),
            ("refused", Bool),
            ("checkpoint", NullOr(&Obj)),
            ("before", NullOr(&Str)),
            ("line_merged", Arr),
            ("conflicts", Arr),
        ],
    );
    assert_eq!(
        (&m["refused"], &m["pending"]),
        (&true.into(), &false.into())
    );
    a.push("--conflicts=markers");
    let r = env.run(&a);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let m = one_document(&r.stdout);
    documents::assert_matches("vault-merge", &m);
    assert_eq!(m["pending"], true);
    err_doc(&env, &["vault", "merge", "t"], 1, "refused");
    let ab = doc(&env, &["vault", "merge", "--abort", "--into", "v"]);
    shape(
        &ab,
        &[
            ("action", Str),
            ("fork", Str),
            ("into", Str),
            ("restored", Str),
            ("conflicts", Arr),
        ],
    );
    assert_eq!(env.run(&a).code, 1);
    env.ok(&["--vault", "v", "write", "/f.txt", "resolved\n"]);
    let c = doc(&env, &["vault", "merge", "t", "--continue"]);
    shape(
        &c,
        &[
            ("action", Str),
            ("fork", Str),
            ("into", Str),
            ("checkpoint", Obj),
            ("conflicts", Arr),
        ],
    );
    assert_eq!(c["checkpoint"]["origin"], "merge");
    err_doc(
        &env,
        &["vault", "merge", "--continue", "--into", "v"],
        1,
        "refused",
    );
    let d = doc(&env, &["vault", "delete", "t", "-y"]);
    shape(&d, &[("deleted", Arr), ("unmounted", Arr)]);
    err_doc(&env, &["--vault", "nosuch", "ls"], 1, "no_such_vault");
}

#[test]
fn diff_pages_with_offset_and_limit() {
    let env = Env::new();
    for f in ["/a", "/b", "/c", "/d", "/e"] {
        doc(&env, &["write", f, "x\n"]);
    }
    let all = doc(&env, &["diff"]);
    check_diff(&all);
    assert_eq!(all["total"], 5);
    assert_eq!(all["offset"], 0);
    assert_eq!(all["next_offset"], Value::Null);
    let page = doc(&env, &["diff", "--offset", "1", "--limit", "2", "--patch"]);
    shape(
        &page,
        &[
            ("total", Num),
            ("offset", Num),
            ("next_offset", NullOr(&Num)),
        ],
    );
    // The summary counts every change, the page lists two.
    assert_eq!(page["summary"]["added"], 5);
    let paths: Vec<&str> = page["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["/b", "/c"]);
    assert!(page["changes"][0]["patch"].as_str().unwrap().contains("+x"));
    assert_eq!(page["next_offset"], 3);
    let last = doc(&env, &["diff", "--offset", "3", "--limit", "2"]);
    assert_eq!(last["changes"].as_array().unwrap().len(), 2);
    assert_eq!(last["next_offset"], Value::Null);
    let past = doc(&env, &["diff", "--offset", "9"]);
    assert_eq!(past["changes"], serde_json::json!([]));
    assert_eq!(past["total"], 5);
}
