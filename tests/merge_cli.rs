//! `avfs vault merge` through the real binary: three-way merges of a fork back into its
//! parent, conflicts of every kind, --dry-run, --path, --conflicts=markers, the checkpoint
//! and audit row it leaves, and its refusals.

mod common;
#[path = "common/documents.rs"]
mod documents;
use common::*;
use serde_json::Value;

fn taken(r: &Value) -> Vec<(String, String)> {
    r["taken"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["kind"].as_str().unwrap().to_string(),
                c["path"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// (path, kind, fork, target, resolution) of every conflict.
fn conflicts(r: &Value) -> Vec<(String, String, String, String, String)> {
    r["conflicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap().to_string();
            (
                s("path"),
                s("kind"),
                s("fork"),
                s("target"),
                s("resolution"),
            )
        })
        .collect()
}

fn c5(p: &str, k: &str, f: &str, t: &str, r: &str) -> (String, String, String, String, String) {
    (p.into(), k.into(), f.into(), t.into(), r.into())
}

fn t2(k: &str, p: &str) -> (String, String) {
    (k.into(), p.into())
}

/// Runs `avfs --json ARGS`, expects exit `code` and a normal (non-error) document.
fn report(env: &Env, args: &[&str], code: i32) -> Value {
    let v = env.json_exit(args, code);
    assert!(v.get("error").is_none(), "{v}");
    documents::check(args, &v);
    v
}

/// A vault `default` with a checkpoint `base`, and a fork `task` of it.
fn setup() -> Env {
    let env = Env::new();
    for (p, c) in [
        ("/src/a.txt", "a\n"),
        ("/src/b.txt", "b\n"),
        ("/both.txt", "one\ntwo\nthree\n"),
        ("/gone-in-target.txt", "e\n"),
        ("/gone-in-fork.txt", "f\n"),
        ("/deleted.txt", "d\n"),
        ("/mode.sh", "echo\n"),
        ("/retyped", "i\n"),
        ("/same.txt", "s\n"),
    ] {
        env.ok(&["write", "-p", p, c]);
    }
    env.ok(&["checkpoint", "save", "base"]);
    env.ok(&["vault", "fork", "default", "task"]);
    env
}

#[test]
fn one_sided_changes_are_taken_and_two_sided_ones_are_conflicts() {
    let env = setup();
    let f = |args: &[&str]| {
        let mut a = vec!["--vault", "task"];
        a.extend_from_slice(args);
        env.ok(&a);
    };
    // The fork: one-sided changes...
    f(&["write", "/src/a.txt", "a from the fork\n"]);
    f(&["mkdir", "-p", "/new/x"]);
    f(&["write", "/new/x/y.txt", "y\n"]);
    f(&["rm", "/deleted.txt"]);
    f(&["chmod", "600", "/mode.sh"]);
    f(&["tag", "/src/b.txt", "reviewed"]);
    // ...and changes the target makes too, differently or identically.
    f(&["write", "/both.txt", "one\nTWO (fork)\nthree\n"]);
    f(&["write", "/gone-in-target.txt", "e, edited in the fork\n"]);
    f(&["rm", "/gone-in-fork.txt"]);
    f(&["write", "/added-both.txt", "fork's\n"]);
    f(&["write", "/same.txt", "identical\n"]);
    f(&["rm", "/retyped"]);
    f(&["mkdir", "/retyped"]);
    // The target.
    env.ok(&["write", "/src/b.txt", "b from the target\n"]);
    env.ok(&["write", "/both.txt", "one\nTWO (target)\nthree\n"]);
    env.ok(&["rm", "/gone-in-target.txt"]);
    env.ok(&["write", "/gone-in-fork.txt", "f, edited in the target\n"]);
    env.ok(&["write", "/added-both.txt", "target's\n"]);
    env.ok(&["write", "/same.txt", "identical\n"]);
    env.ok(&["write", "/retyped", "i, edited\n"]);
    // Without markers the merge is refused: it lists what it would do, changes nothing.
    let refused = report(&env, &["vault", "merge", "task"], 1);
    assert_eq!(refused["refused"], true);
    assert_eq!(refused["pending"], false);
    assert_eq!(refused["summary"]["taken"], 7);
    assert_eq!(refused["summary"]["conflicts"], 5);
    assert_eq!(env.cat(None, "/src/a.txt"), "a\n");
    let audit_before = env.json(&["audit"])["entries"].as_array().unwrap().len();

    let r = report(&env, &["vault", "merge", "task", "--conflicts=markers"], 1);
    assert_eq!(r["fork"], "task");
    assert_eq!(r["into"], "default");
    assert_eq!(r["base"], "base");
    assert_eq!(r["dry_run"], false);
    assert_eq!(r["clean"], false);
    assert_eq!(
        taken(&r),
        vec![
            t2("deleted", "/deleted.txt"),
            t2("mode_changed", "/mode.sh"),
            t2("added", "/new"),
            t2("added", "/new/x"),
            t2("added", "/new/x/y.txt"),
            t2("modified", "/src/a.txt"),
            t2("meta_changed", "/src/b.txt"),
        ]
    );
    assert_eq!(
        conflicts(&r),
        vec![
            c5("/added-both.txt", "both_added", "added", "added", "markers"),
            c5(
                "/both.txt",
                "both_modified",
                "modified",
                "modified",
                "markers"
            ),
            c5(
                "/gone-in-fork.txt",
                "deleted_in_fork",
                "deleted",
                "modified",
                "kept_target"
            ),
            c5(
                "/gone-in-target.txt",
                "deleted_in_target",
                "modified",
                "deleted",
                "kept_target"
            ),
            c5(
                "/retyped",
                "type_changed",
                "type_changed",
                "modified",
                "kept_target"
            ),
        ]
    );
    assert_eq!(r["summary"]["taken"], 7);
    assert_eq!(r["summary"]["conflicts"], 5);
    assert_eq!(r["summary"]["unresolved"], 5);
    let c = &r["conflicts"][4];
    assert_eq!(
        (&c["type_base"], &c["type_fork"], &c["type_target"]),
        (&"file".into(), &"dir".into(), &"file".into())
    );

    // The target has the fork's one-sided changes and keeps its own versions.
    assert_eq!(env.cat(None, "/src/a.txt"), "a from the fork\n");
    assert_eq!(env.cat(None, "/src/b.txt"), "b from the target\n");
    assert_eq!(
        env.json(&["meta", "/src/b.txt"])["tags"],
        serde_json::json!(["reviewed"])
    );
    assert_eq!(env.cat(None, "/new/x/y.txt"), "y\n");
    assert_eq!(
        env.json_err(&["cat", "/deleted.txt"], 1)["kind"],
        "not_found"
    );
    assert_eq!(env.json(&["stat", "/mode.sh"])["mode"], "0600");
    assert_eq!(
        env.cat(None, "/both.txt"),
        "one\n<<<<<<< default\nTWO (target)\n=======\nTWO (fork)\n>>>>>>> task\nthree\n"
    );
    assert_eq!(
        env.cat(None, "/gone-in-fork.txt"),
        "f, edited in the target\n"
    );
    assert_eq!(
        env.json_err(&["cat", "/gone-in-target.txt"], 1)["kind"],
        "not_found"
    );
    assert_eq!(
        env.cat(None, "/added-both.txt"),
        "<<<<<<< default\ntarget's\n=======\nfork's\n>>>>>>> task\n"
    );
    assert_eq!(env.cat(None, "/retyped"), "i, edited\n");

    // Unresolved conflicts leave the merge pending: no merge checkpoint yet, and the
    // state before it is kept.
    assert_eq!(r["pending"], true);
    assert!(r["checkpoint"].is_null(), "{r}");
    let before = r["before"].as_str().unwrap();
    assert!(before.starts_with("auto-before-merge-"), "{before}");
    assert_eq!(env.ok(&["cat", "/src/a.txt", "--at", before]).stdout, "a\n");
    let list = env.json(&["checkpoint", "list"]);
    assert_eq!(list["head"], before);

    // The fork's files and head are untouched; it holds the state being merged, not yet
    // recorded as merged.
    assert_eq!(
        env.cat(Some("task"), "/both.txt"),
        "one\nTWO (fork)\nthree\n"
    );
    let fork_cps = env.json(&["--vault", "task", "checkpoint", "list"]);
    assert_eq!(fork_cps["head"], "base");
    let held: Vec<&Value> = fork_cps["checkpoints"].as_array().unwrap().iter().collect();
    assert_eq!(held.len(), 1, "{fork_cps}");
    assert!(
        held[0]["name"]
            .as_str()
            .unwrap()
            .starts_with("pending-merge-into-main-")
    );

    // --continue (once the markers are gone): the live state becomes the merge's
    // checkpoint and the fork's merge point.
    env.ok(&["write", "/both.txt", "one\nTWO\nthree\n"]);
    env.ok(&["write", "/added-both.txt", "both's\n"]);
    let done = report(&env, &["vault", "merge", "--continue"], 0);
    assert_eq!(done["action"], "continued");
    let cp = &done["checkpoint"];
    assert_eq!(cp["origin"], "merge");
    assert_eq!(cp["workspace"], "main");
    let name = cp["name"].as_str().unwrap();
    assert!(name.starts_with("merge-task-"), "{name}");
    let list = env.json(&["checkpoint", "list"]);
    assert_eq!(list["head"], name);
    assert!(
        env.json(&["diff", name])["changes"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let fork_cps = env.json(&["--vault", "task", "checkpoint", "list"]);
    assert_eq!(fork_cps["head"], "base");
    let merged: Vec<&Value> = fork_cps["checkpoints"].as_array().unwrap().iter().collect();
    assert_eq!(merged.len(), 1, "{fork_cps}");
    assert_eq!(merged[0]["origin"], "merge");
    assert!(
        merged[0]["name"]
            .as_str()
            .unwrap()
            .starts_with("merged-into-main-")
    );

    // The audit rows: the merge (its changes in one transaction), then the --continue.
    let entries = env.json(&["audit"])["entries"].as_array().unwrap().clone();
    // (The two writes that resolved the markers are between them.)
    assert_eq!(entries.len(), audit_before + 4);
    let row = &entries[entries.len() - 4];
    assert_eq!(row["action"], "vault.merge");
    assert_eq!(row["workspace"], "main");
    assert_eq!(row["detail"]["fork"], "task");
    assert_eq!(row["detail"]["taken"], 7);
    assert!(row["detail"]["checkpoint"].is_null());
    assert_eq!(
        row["detail"]["conflicts"],
        serde_json::json!([
            "/added-both.txt",
            "/both.txt",
            "/gone-in-fork.txt",
            "/gone-in-target.txt",
            "/retyped"
        ])
    );
    let row = entries.last().unwrap();
    assert_eq!(row["action"], "vault.merge.continue");
    assert_eq!(row["detail"]["checkpoint"], name);
    assert_eq!(env.json(&["audit", "verify"])["ok"], true);

    // Undo: the checkpoint before the merge.
    env.ok(&["checkpoint", "restore", before]);
    assert_eq!(env.cat(None, "/src/a.txt"), "a\n");

    // The human report.
    let r = env.run(&["vault", "merge", "task", "--dry-run"]);
    assert_eq!(r.code, 1);
    assert!(
        r.stdout
            .starts_with("would refuse to merge task into default (base base): 7 taken (0 line-merged), 5 conflicts\n"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("\nM /src/a.txt  2 B -> 16 B\nX /src/b.txt\n"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("\nC /both.txt  both_modified (fork modified, default modified): both sides changed it\n"),
        "{}",
        r.stdout
    );
}

#[test]
fn dry_run_reports_the_same_and_changes_nothing() {
    let env = setup();
    env.ok(&["--vault", "task", "write", "/src/a.txt", "fork\n"]);
    env.ok(&["--vault", "task", "write", "/both.txt", "fork\n"]);
    env.ok(&["write", "/both.txt", "target\n"]);
    let audit = env.json(&["audit"])["entries"].as_array().unwrap().len();
    let cps = env.json(&["checkpoint", "list"]);
    let dry = report(&env, &["vault", "merge", "task", "--dry-run"], 1);
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["checkpoint"], Value::Null);
    assert_eq!(dry["before"], Value::Null);
    assert_eq!(taken(&dry), vec![t2("modified", "/src/a.txt")]);
    assert_eq!(env.cat(None, "/src/a.txt"), "a\n");
    assert_eq!(env.json(&["checkpoint", "list"]), cps);
    assert_eq!(
        env.json(&["audit"])["entries"].as_array().unwrap().len(),
        audit
    );
    // Without markers the real merge is refused as the dry run said: nothing changes.
    assert_eq!(dry["refused"], true);
    let real = report(&env, &["vault", "merge", "task"], 1);
    assert_eq!(real["refused"], true);
    assert_eq!(real["taken"], dry["taken"]);
    assert_eq!(real["conflicts"], dry["conflicts"]);
    assert_eq!(env.cat(None, "/src/a.txt"), "a\n");
    let dry = report(
        &env,
        &["vault", "merge", "task", "--dry-run", "--conflicts=markers"],
        1,
    );
    assert_eq!(dry["refused"], false);
    assert_eq!(env.cat(None, "/src/a.txt"), "a\n");
    let real = report(&env, &["vault", "merge", "task", "--conflicts=markers"], 1);
    assert_eq!(real["taken"], dry["taken"]);
    assert_eq!(real["conflicts"], dry["conflicts"]);
    assert_eq!(env.cat(None, "/src/a.txt"), "fork\n");
}

#[test]
fn paths_promote_only_what_is_under_them() {
    let env = setup();
    let f = |a: &[&str]| {
        let mut v = vec!["--vault", "task"];
        v.extend_from_slice(a);
        env.ok(&v);
    };
    f(&["write", "/src/a.txt", "fork a\n"]);
    f(&["write", "/src/b.txt", "fork b\n"]);
    f(&["write", "-p", "/docs/guide/intro.md", "intro\n"]);
    f(&["write", "/docs/other.md", "other\n"]);
    f(&["write", "/same.txt", "fork\n"]);
    let r = report(
        &env,
        &[
            "vault",
            "merge",
            "task",
            "--path",
            "src/a.txt",
            "--path",
            "/docs/guide",
        ],
        0,
    );
    assert_eq!(r["paths"], serde_json::json!(["/src/a.txt", "/docs/guide"]));
    assert_eq!(
        taken(&r),
        vec![
            t2("added", "/docs/guide"),
            t2("added", "/docs/guide/intro.md"),
            t2("modified", "/src/a.txt")
        ]
    );
    assert_eq!(env.cat(None, "/src/a.txt"), "fork a\n");
    assert_eq!(env.cat(None, "/src/b.txt"), "b\n");
    assert_eq!(env.cat(None, "/docs/guide/intro.md"), "intro\n");
    assert_eq!(
        env.json_err(&["cat", "/docs/other.md"], 1)["kind"],
        "not_found"
    );
    assert_eq!(env.cat(None, "/same.txt"), "s\n");
    // The rest follows later; what was merged already is identical on both sides now.
    let r = report(&env, &["vault", "merge", "task"], 0);
    assert_eq!(
        taken(&r),
        vec![
            t2("added", "/docs/other.md"),
            t2("modified", "/same.txt"),
            t2("modified", "/src/b.txt")
        ]
    );
    assert!(r["conflicts"].as_array().unwrap().is_empty());
    // Nothing left: no checkpoint, exit 0.
    let r = report(&env, &["vault", "merge", "task"], 0);
    assert!(taken(&r).is_empty());
    assert_eq!(r["checkpoint"], Value::Null);
    assert_eq!(r["clean"], true);
}

#[test]
fn markers_line_merge_text_conflicts() {
    let env = setup();
    env.ok(&["write", "/lines.txt", "1\n2\n3\n4\n5\n6\n7\n8\n"]);
    let bin = |vault: &str, data: &[u8]| {
        let r = env.run_stdin(&["--vault", vault, "write", "/bin.dat"], data);
        assert_eq!(r.code, 0, "{}", r.stderr);
    };
    bin("default", b"\0base");
    env.ok(&["checkpoint", "save", "base2"]);
    env.ok(&["vault", "fork", "default", "t2"]);
    // Overlapping edits of /both.txt; far-apart edits of /lines.txt; a binary file.
    env.ok(&[
        "--vault",
        "t2",
        "write",
        "/both.txt",
        "one\nTWO (fork)\nthree\n",
    ]);
    env.ok(&["write", "/both.txt", "one\nTWO (target)\nthree\n"]);
    env.ok(&[
        "--vault",
        "t2",
        "write",
        "/lines.txt",
        "ONE\n2\n3\n4\n5\n6\n7\n8\n",
    ]);
    env.ok(&["write", "/lines.txt", "1\n2\n3\n4\n5\n6\n7\nEIGHT\n"]);
    bin("t2", b"\0fork");
    bin("default", b"\0target");
    let r = report(&env, &["vault", "merge", "t2", "--conflicts=markers"], 1);
    assert_eq!(
        conflicts(&r),
        vec![
            c5(
                "/bin.dat",
                "both_modified",
                "modified",
                "modified",
                "both_kept"
            ),
            c5(
                "/both.txt",
                "both_modified",
                "modified",
                "modified",
                "markers"
            ),
        ]
    );
    assert_eq!(r["line_merged"], serde_json::json!(["/lines.txt"]));
    assert_eq!(r["summary"]["unresolved"], 2);
    assert_eq!(
        env.cat(None, "/both.txt"),
        "one\n<<<<<<< default\nTWO (target)\n=======\nTWO (fork)\n>>>>>>> t2\nthree\n"
    );
    assert_eq!(
        env.cat(None, "/lines.txt"),
        "ONE\n2\n3\n4\n5\n6\n7\nEIGHT\n"
    );
    assert_eq!(env.ok(&["cat", "/bin.dat"]).stdout, "\0target");
    assert_eq!(env.ok(&["cat", "/bin.dat.t2"]).stdout, "\0fork");
    // The merge is pending; --continue refuses while a file still holds markers.
    let e = env.json_err(&["vault", "merge", "--continue"], 1);
    assert_eq!(e["kind"], "refused");
    assert!(e["message"].as_str().unwrap().contains("/both.txt"), "{e}");
    env.ok(&["write", "/both.txt", "one\nTWO (both)\nthree\n"]);
    env.ok(&["rm", "/bin.dat.t2"]);
    let done = report(&env, &["vault", "merge", "--continue"], 0);
    assert_eq!(
        done["conflicts"],
        serde_json::json!(["/bin.dat", "/both.txt"])
    );
    assert_eq!(env.cat(None, "/both.txt"), "one\nTWO (both)\nthree\n");

    // Without --conflicts=markers an overlapping edit is refused: the target's text stays.
    env.ok(&["vault", "fork", "default", "t3", "--from", "base2"]);
    env.ok(&[
        "--vault",
        "t3",
        "write",
        "/lines.txt",
        "ONE\n2\n3\n4\n5\n6\n7\nt3's\n",
    ]);
    env.ok(&["write", "/lines.txt", "1\n2\n3\n4\n5\n6\n7\nanother\n"]);
    let r = report(&env, &["vault", "merge", "t3"], 1);
    assert_eq!(r["refused"], true);
    assert_eq!(
        conflicts(&r),
        vec![c5(
            "/lines.txt",
            "both_modified",
            "modified",
            "modified",
            "kept_target"
        )]
    );
    assert_eq!(
        env.cat(None, "/lines.txt"),
        "1\n2\n3\n4\n5\n6\n7\nanother\n"
    );

    // Only clean line merges: exit 0.
    env.ok(&["vault", "fork", "default", "t4"]);
    env.ok(&[
        "--vault",
        "t4",
        "write",
        "/lines.txt",
        "top\n1\n2\n3\n4\n5\n6\n7\nanother\n",
    ]);
    env.ok(&[
        "write",
        "/lines.txt",
        "1\n2\n3\n4\n5\n6\n7\nanother\nbottom\n",
    ]);
    let r = report(&env, &["vault", "merge", "t4", "--conflicts", "markers"], 0);
    assert_eq!(r["clean"], true);
    assert_eq!(r["summary"]["unresolved"], 0);
    assert_eq!(
        env.cat(None, "/lines.txt"),
        "top\n1\n2\n3\n4\n5\n6\n7\nanother\nbottom\n"
    );
}

#[test]
fn parts_changed_on_different_sides_merge_without_conflict() {
    let env = setup();
    env.ok(&["--vault", "task", "write", "/src/a.txt", "new content\n"]);
    env.ok(&["chmod", "600", "/src/a.txt"]);
    env.ok(&["--vault", "task", "tag", "/same.txt", "from-fork"]);
    env.ok(&["tag", "/same.txt", "from-target"]);
    env.ok(&["--vault", "task", "meta", "/src/b.txt", "owner", "fork"]);
    env.ok(&["meta", "/src/b.txt", "owner", "target"]);
    env.ok(&["--vault", "task", "chmod", "700", "/src"]);
    env.ok(&["write", "/src/c.txt", "c\n"]);
    let r = report(&env, &["vault", "merge", "task", "--conflicts=markers"], 1);
    assert_eq!(
        taken(&r),
        vec![
            t2("meta_changed", "/same.txt"),
            t2("mode_changed", "/src"),
            t2("modified", "/src/a.txt"),
        ]
    );
    assert_eq!(
        conflicts(&r),
        vec![c5(
            "/src/b.txt",
            "both_modified",
            "meta_changed",
            "meta_changed",
            "kept_target"
        )]
    );
    let a = env.json(&["stat", "/src/a.txt"]);
    assert_eq!(a["mode"], "0600");
    assert_eq!(env.cat(None, "/src/a.txt"), "new content\n");
    assert_eq!(
        env.json(&["meta", "/same.txt"])["tags"],
        serde_json::json!(["from-fork", "from-target"])
    );
    assert_eq!(env.ok(&["meta", "/src/b.txt", "owner"]).stdout, "target\n");
    assert_eq!(env.json(&["stat", "/src"])["mode"], "0700");
    assert_eq!(env.cat(None, "/src/c.txt"), "c\n");
}

#[test]
fn into_a_sibling_and_refusals() {
    let env = setup();
    env.ok(&["vault", "fork", "default", "sibling"]);
    env.ok(&["--vault", "task", "write", "/from-task.txt", "t\n"]);
    let r = report(&env, &["vault", "merge", "task", "--into", "sibling"], 0);
    assert_eq!(r["into"], "sibling");
    assert_eq!(env.cat(Some("sibling"), "/from-task.txt"), "t\n");
    assert_eq!(
        env.json_err(&["cat", "/from-task.txt"], 1)["kind"],
        "not_found"
    );
    let head = env.json(&["--vault", "sibling", "checkpoint", "list"])["head"].clone();
    assert!(head.as_str().unwrap().starts_with("merge-task-"), "{head}");

    let e = env.json_err(&["vault", "merge", "default"], 1);
    assert_eq!(e["kind"], "refused");
    assert!(
        e["message"].as_str().unwrap().contains("no merge base"),
        "{e}"
    );
    assert_eq!(
        env.json_err(&["vault", "merge", "task", "--into", "task"], 1)["kind"],
        "invalid_argument"
    );
    assert_eq!(
        env.json_err(&["vault", "merge", "nope"], 1)["kind"],
        "no_such_vault"
    );
    env.ok(&["vault", "create", "other"]);
    let e = env.json_err(&["vault", "merge", "task", "--into", "other"], 1);
    assert_eq!(e["kind"], "invalid_argument");
    assert!(e["message"].as_str().unwrap().contains("vault file"), "{e}");
    assert_eq!(
        env.json_err(&["vault", "merge", "task", "--conflicts", "theirs"], 2)["kind"],
        "usage"
    );
    // The base checkpoint is gone: no three-way merge is possible.
    env.ok(&["checkpoint", "delete", "base"]);
    let e = env.json_err(&["vault", "merge", "task"], 1);
    assert_eq!(e["kind"], "refused");
    assert!(e["message"].as_str().unwrap().contains("base"), "{e}");
}

#[test]
fn a_large_fork_merges_in_proportion_to_its_changes() {
    let env = Env::new();
    let host = env.path("tree");
    for d in 0..20 {
        let dir = host.join(format!("d{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..100 {
            std::fs::write(dir.join(format!("f{f}")), format!("{d}/{f}\n")).unwrap();
        }
    }
    env.ok(&["import", host.to_str().unwrap()]);
    env.ok(&["checkpoint", "save", "base"]);
    env.ok(&["vault", "fork", "default", "big"]);
    env.ok(&["--vault", "big", "write", "/d7/f42", "changed\n"]);
    env.ok(&["write", "/d3/f1", "target\n"]);
    let r = report(&env, &["vault", "merge", "big"], 0);
    assert_eq!(taken(&r), vec![t2("modified", "/d7/f42")]);
    assert_eq!(env.cat(None, "/d7/f42"), "changed\n");
    assert_eq!(env.cat(None, "/d3/f1"), "target\n");
    let d = env.json(&["diff", r["before"].as_str().unwrap()]);
    assert_eq!(changes(&d), vec![t2("modified", "/d7/f42")]);
}

#[test]
fn directory_and_root_attributes_merge_by_key_and_conflict_on_the_same_key() {
    let env = setup();
    env.ok(&["--vault", "task", "tag", "/", "from-fork"]);
    env.ok(&["tag", "/", "from-target"]);
    env.ok(&["--vault", "task", "meta", "/src", "owner", "fork"]);
    env.ok(&["meta", "/src", "owner", "target"]);
    env.ok(&["--vault", "task", "write", "/src/a.txt", "fork\n"]);
    let r = report(&env, &["vault", "merge", "task", "--conflicts=markers"], 1);
    assert_eq!(
        taken(&r),
        vec![t2("meta_changed", "/"), t2("modified", "/src/a.txt")]
    );
    assert_eq!(
        conflicts(&r),
        vec![c5(
            "/src",
            "both_modified",
            "meta_changed",
            "meta_changed",
            "kept_target"
        )]
    );
    assert_eq!(
        env.json(&["meta", "/"])["tags"],
        serde_json::json!(["from-fork", "from-target"])
    );
    assert_eq!(env.ok(&["meta", "/src", "owner"]).stdout, "target\n");
    assert_eq!(env.cat(None, "/src/a.txt"), "fork\n");
    report(
        &env,
        &["vault", "merge", "--continue", "--into", "default"],
        0,
    );

    // The root's own attributes in conflict.
    env.ok(&["vault", "fork", "default", "t2"]);
    env.ok(&["--vault", "t2", "meta", "/", "k", "fork"]);
    env.ok(&["meta", "/", "k", "target"]);
    let r = report(&env, &["vault", "merge", "t2", "--conflicts=markers"], 1);
    assert_eq!(
        conflicts(&r),
        vec![c5(
            "/",
            "both_modified",
            "meta_changed",
            "meta_changed",
            "kept_target"
        )]
    );
    assert_eq!(env.ok(&["meta", "/", "k"]).stdout, "target\n");
}

#[test]
fn a_second_merge_takes_only_what_changed_since_the_first() {
    let env = setup();
    env.ok(&["--vault", "task", "write", "/src/a.txt", "fork 1\n"]);
    let first = report(&env, &["vault", "merge", "task"], 0);
    assert_eq!(first["base"], "base");
    assert_eq!(taken(&first), vec![t2("modified", "/src/a.txt")]);
    // The target keeps working on what it took; the fork works on something else.
    env.ok(&["write", "/src/a.txt", "target after the merge\n"]);
    env.ok(&["--vault", "task", "write", "/src/b.txt", "fork 2\n"]);
    let second = report(&env, &["vault", "merge", "task"], 0);
    let marker = second["base"].as_str().unwrap().to_string();
    assert!(marker.starts_with("merged-into-main-"), "{second}");
    // Against the fork point, /src/a.txt would be a conflict (changed on both sides).
    assert_eq!(conflicts(&second), vec![]);
    assert_eq!(taken(&second), vec![t2("modified", "/src/b.txt")]);
    assert_eq!(env.cat(None, "/src/a.txt"), "target after the merge\n");
    assert_eq!(env.cat(None, "/src/b.txt"), "fork 2\n");
    // Merge points are checkpoints of the fork that do not move its head.
    let cps = env.json(&["--vault", "task", "checkpoint", "list"]);
    assert_eq!(cps["head"], "base");
    let names: Vec<String> = cps["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names.len(), 2, "{cps}");
    assert_eq!(names[0], marker);
    let latest = names[1].clone();
    // Nothing new in the fork: nothing to merge, and no new merge point.
    let third = report(&env, &["vault", "merge", "task"], 0);
    assert_eq!((taken(&third), conflicts(&third)), (vec![], vec![]));
    assert_eq!(third["base"], latest.as_str());
    let cps = env.json(&["--vault", "task", "checkpoint", "list"]);
    assert_eq!(cps["checkpoints"].as_array().unwrap().len(), 2);
    // A merge of some paths leaves the base where it was.
    env.ok(&["--vault", "task", "write", "/src/a.txt", "fork 3\n"]);
    env.ok(&["--vault", "task", "write", "/same.txt", "fork 3\n"]);
    let part = report(&env, &["vault", "merge", "task", "--path", "/same.txt"], 0);
    assert_eq!(part["base"], latest.as_str());
    let fourth = report(&env, &["vault", "merge", "task", "--dry-run"], 1);
    assert_eq!(fourth["base"], latest.as_str());
    assert_eq!(conflicts(&fourth)[0].0, "/src/a.txt");
    // Deleting merge points falls back to the one before, then to the fork point.
    env.ok(&["--vault", "task", "checkpoint", "delete", &latest]);
    let back = report(&env, &["vault", "merge", "task", "--dry-run"], 1);
    assert_eq!(back["base"], marker.as_str());
    env.ok(&["--vault", "task", "checkpoint", "delete", &marker]);
    let back = report(&env, &["vault", "merge", "task", "--dry-run"], 1);
    assert_eq!(back["base"], "base");
}

/// The example: a merge in report mode kept the target's side of a conflict;
/// a second merge with markers must not say "0 taken, 0 conflicts" (the fork's edit
/// gone for good). The first merge stays pending until continued or aborted.
#[test]
fn unresolved_conflicts_stay_pending_until_continued_or_aborted() {
    let env = setup();
    env.ok(&[
        "--vault",
        "task",
        "write",
        "/both.txt",
        "one\nTWO (fork)\nthree\n",
    ]);
    env.ok(&[
        "--vault",
        "task",
        "write",
        "/src/a.txt",
        "a from the fork\n",
    ]);
    env.ok(&["write", "/both.txt", "one\nTWO (target)\nthree\n"]);
    let head_before = env.json(&["checkpoint", "list"])["head"].clone();

    let r = env.run(&["vault", "merge", "task", "--conflicts=markers"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stdout.contains("merge pending: 1 unresolved conflict;")
            && r.stdout
                .contains("avfs vault merge --continue --into default")
            && r.stdout.contains("avfs vault merge --abort --into default"),
        "{}",
        r.stdout
    );
    assert!(
        env.cat(None, "/both.txt")
            .contains("<<<<<<< default\nTWO (target)\n")
    );
    assert_eq!(env.cat(None, "/src/a.txt"), "a from the fork\n");

    // Another merge into the same target is refused while one is pending, with the way
    // out; a dry run may still look.
    let e = env.json_err(&["vault", "merge", "task", "--conflicts=markers"], 1);
    assert_eq!(e["kind"], "refused");
    let msg = e["message"].as_str().unwrap();
    assert!(
        msg.contains("pending") && msg.contains("/both.txt") && msg.contains("--abort"),
        "{msg}"
    );
    report(&env, &["vault", "merge", "task", "--dry-run"], 1);

    // --abort: the target is as it was before the merge, the fork unmerged.
    let a = report(&env, &["vault", "merge", "--abort", "--into", "default"], 0);
    assert_eq!(a["action"], "aborted");
    assert_eq!(a["conflicts"], serde_json::json!(["/both.txt"]));
    assert_eq!(env.cat(None, "/src/a.txt"), "a\n");
    assert_eq!(env.cat(None, "/both.txt"), "one\nTWO (target)\nthree\n");
    let fork_cps = env.json(&["--vault", "task", "checkpoint", "list"]);
    assert_eq!(fork_cps["checkpoints"], serde_json::json!([]), "{fork_cps}");
    assert_ne!(env.json(&["checkpoint", "list"])["head"], head_before);
    let e = env.json_err(&["vault", "merge", "--abort"], 1);
    assert_eq!(e["kind"], "refused");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("no merge is pending")
    );

    // The markers merge now sees the conflict and the fork's side.
    let r = report(&env, &["vault", "merge", "task", "--conflicts=markers"], 1);
    assert_eq!(r["summary"]["taken"], 1);
    assert_eq!(r["summary"]["conflicts"], 1);
    assert!(env.cat(None, "/both.txt").contains("TWO (fork)"));

    // --continue after editing (FORK names the target too); the next merge starts from
    // what was merged, so nothing is re-reported.
    env.ok(&["write", "/both.txt", "one\nTWO (resolved)\nthree\n"]);
    let done = report(&env, &["vault", "merge", "task", "--continue"], 0);
    assert_eq!(done["action"], "continued");
    assert_eq!(env.cat(None, "/both.txt"), "one\nTWO (resolved)\nthree\n");
    let again = report(&env, &["vault", "merge", "task"], 0);
    assert_eq!(
        (
            again["summary"]["taken"].as_u64(),
            again["summary"]["conflicts"].as_u64()
        ),
        (Some(0), Some(0))
    );
    // And the fork's later edit is a plain take.
    env.ok(&[
        "--vault",
        "task",
        "write",
        "/both.txt",
        "one\nTWO (fork, later)\nthree\n",
    ]);
    let later = report(&env, &["vault", "merge", "task", "--dry-run"], 1);
    assert_eq!(later["summary"]["conflicts"], 1, "{later}");
}

/// Ten numbered lines, with `edits` (line number, new text) made.
fn numbered(edits: &[(usize, &str)]) -> String {
    (1..=10)
        .map(|i| {
            let line = edits
                .iter()
                .find(|(n, _)| *n == i)
                .map_or(format!("line {i}"), |(_, t)| t.to_string());
            line + "\n"
        })
        .collect()
}

#[test]
fn edits_of_one_file_that_do_not_overlap_merge_cleanly_by_default() {
    let env = setup();
    env.ok(&["write", "/lines.txt", &numbered(&[])]);
    env.ok(&["checkpoint", "save", "base2"]);
    env.ok(&["vault", "fork", "default", "t2"]);
    env.ok(&[
        "--vault",
        "t2",
        "write",
        "/lines.txt",
        &numbered(&[(1, "fork's first line")]),
    ]);
    env.ok(&[
        "write",
        "/lines.txt",
        &numbered(&[(10, "target's last line")]),
    ]);
    let r = report(&env, &["vault", "merge", "t2"], 0);
    assert_eq!(r["clean"], true, "{r}");
    assert_eq!(r["refused"], false);
    assert_eq!(r["pending"], false);
    assert_eq!(r["conflicts"], serde_json::json!([]));
    assert_eq!(r["line_merged"], serde_json::json!(["/lines.txt"]));
    assert_eq!(r["summary"]["line_merged"], 1);
    assert_eq!(taken(&r), vec![t2("modified", "/lines.txt")]);
    let both = numbered(&[(1, "fork's first line"), (10, "target's last line")]);
    assert_eq!(env.cat(None, "/lines.txt"), both);
    let cp = r["checkpoint"]["name"].as_str().unwrap();
    assert_eq!(env.ok(&["cat", "/lines.txt", "--at", cp]).stdout, both);

    // The human report says so.
    env.ok(&["vault", "fork", "default", "t3"]);
    env.ok(&[
        "--vault",
        "t3",
        "write",
        "/lines.txt",
        &numbered(&[
            (1, "fork's first line"),
            (5, "t3's fifth"),
            (10, "target's last line"),
        ]),
    ]);
    env.ok(&[
        "write",
        "/lines.txt",
        &numbered(&[(1, "fork's first line"), (10, "again")]),
    ]);
    let h = env.run(&["vault", "merge", "t3"]);
    assert_eq!(h.code, 0, "{}{}", h.stdout, h.stderr);
    assert!(
        h.stdout.contains("1 taken (1 line-merged), 0 conflicts"),
        "{}",
        h.stdout
    );
    assert_eq!(
        env.cat(None, "/lines.txt"),
        numbered(&[(1, "fork's first line"), (5, "t3's fifth"), (10, "again")])
    );
}

#[test]
fn a_merge_with_conflicts_is_refused_without_markers_and_changes_nothing() {
    let env = setup();
    env.ok(&[
        "--vault",
        "task",
        "write",
        "/both.txt",
        "one\nTWO (fork)\nthree\n",
    ]);
    env.ok(&[
        "--vault",
        "task",
        "write",
        "/src/a.txt",
        "a from the fork\n",
    ]);
    env.ok(&["write", "/both.txt", "one\nTWO (target)\nthree\n"]);
    env.ok(&["checkpoint", "save", "edited"]);
    let audit_before = env.json(&["audit"])["entries"].as_array().unwrap().len();

    let r = report(&env, &["vault", "merge", "task"], 1);
    assert_eq!(r["refused"], true, "{r}");
    assert_eq!(r["clean"], false);
    assert_eq!(r["pending"], false);
    assert!(r["checkpoint"].is_null() && r["before"].is_null(), "{r}");
    assert_eq!(
        conflicts(&r),
        vec![c5(
            "/both.txt",
            "both_modified",
            "modified",
            "modified",
            "kept_target"
        )]
    );
    // What would have been taken is listed, and none of it was.
    assert_eq!(taken(&r), vec![t2("modified", "/src/a.txt")]);
    assert_eq!(env.cat(None, "/src/a.txt"), "a\n");
    assert_eq!(env.cat(None, "/both.txt"), "one\nTWO (target)\nthree\n");
    assert_eq!(env.json(&["checkpoint", "list"])["head"], "edited");
    assert!(
        env.json(&["diff", "edited"])["changes"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // Nothing is pending: there is nothing to continue.
    let e = env.json_err(&["vault", "merge", "--continue"], 1);
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("no merge is pending"),
        "{e}"
    );
    let entries = env.json(&["audit"])["entries"].as_array().unwrap().clone();
    assert_eq!(entries.len(), audit_before + 1);
    assert_eq!(entries.last().unwrap()["detail"]["refused"], true);

    // The human report names the file and the way on.
    let h = env.run(&["vault", "merge", "task"]);
    assert_eq!(h.code, 1);
    assert!(
        h.stdout.starts_with("refused to merge task into default")
            && h.stdout.contains("C /both.txt")
            && h.stdout.contains("--conflicts=markers"),
        "{}",
        h.stdout
    );

    // With markers it is written out, and both sides are in the file.
    let r = report(&env, &["vault", "merge", "task", "--conflicts=markers"], 1);
    assert_eq!(r["refused"], false);
    assert_eq!(r["pending"], true);
    assert_eq!(env.cat(None, "/src/a.txt"), "a from the fork\n");
    assert_eq!(
        env.cat(None, "/both.txt"),
        "one\n<<<<<<< default\nTWO (target)\n=======\nTWO (fork)\n>>>>>>> task\nthree\n"
    );
}

#[test]
fn binary_conflicts_keep_both_versions_with_markers() {
    let env = setup();
    let bin = |vault: &str, data: &[u8]| {
        let r = env.run_stdin(&["--vault", vault, "write", "/bin.dat"], data);
        assert_eq!(r.code, 0, "{}", r.stderr);
    };
    bin("default", b"\0base");
    env.ok(&["checkpoint", "save", "base2"]);
    env.ok(&["vault", "fork", "default", "t2"]);
    bin("t2", b"\0fork");
    bin("default", b"\0target");
    // Without markers: refused, nothing written.
    let r = report(&env, &["vault", "merge", "t2"], 1);
    assert_eq!(r["refused"], true);
    assert_eq!(
        env.json_err(&["cat", "/bin.dat.t2"], 1)["kind"],
        "not_found"
    );

    let r = report(&env, &["vault", "merge", "t2", "--conflicts=markers"], 1);
    assert_eq!(
        conflicts(&r),
        vec![c5(
            "/bin.dat",
            "both_modified",
            "modified",
            "modified",
            "both_kept"
        )]
    );
    assert_eq!(r["conflicts"][0]["kept_as"], "/bin.dat.t2");
    assert_eq!(env.ok(&["cat", "/bin.dat"]).stdout, "\0target");
    assert_eq!(env.ok(&["cat", "/bin.dat.t2"]).stdout, "\0fork");
    // --continue waits for one version to be chosen.
    let e = env.json_err(&["vault", "merge", "--continue"], 1);
    assert!(
        e["message"].as_str().unwrap().contains("/bin.dat.t2"),
        "{e}"
    );
    env.ok(&["mv", "/bin.dat.t2", "/bin.dat"]);
    report(&env, &["vault", "merge", "--continue"], 0);
    assert_eq!(env.ok(&["cat", "/bin.dat"]).stdout, "\0fork");
}

#[test]
fn a_renamed_file_gets_the_other_sides_edits() {
    let env = setup();
    env.ok(&["write", "/doc.txt", &numbered(&[])]);
    env.ok(&["write", "/other.txt", &numbered(&[(3, "other")])]);
    env.ok(&["mkdir", "/pkg"]);
    env.ok(&["write", "/pkg/mod.txt", &numbered(&[(4, "module")])]);
    env.ok(&["checkpoint", "save", "base2"]);
    env.ok(&["vault", "fork", "default", "t2"]);
    let t = |args: &[&str]| {
        let mut a = vec!["--vault", "t2"];
        a.extend_from_slice(args);
        env.ok(&a);
    };
    // The fork renames (and edits) doc.txt and the directory pkg; the target edits them
    // at their old names.
    t(&["mv", "/doc.txt", "/renamed.txt"]);
    t(&["write", "/renamed.txt", &numbered(&[(1, "fork's edit")])]);
    t(&["mv", "/pkg", "/lib"]);
    env.ok(&["write", "/doc.txt", &numbered(&[(9, "target's edit")])]);
    env.ok(&[
        "write",
        "/pkg/mod.txt",
        &numbered(&[(4, "module"), (10, "target's")]),
    ]);
    // The target renames other.txt, the fork edits it at its old name.
    env.ok(&["mv", "/other.txt", "/moved.txt"]);
    t(&[
        "write",
        "/other.txt",
        &numbered(&[(3, "other"), (7, "fork's")]),
    ]);

    let r = report(&env, &["vault", "merge", "t2"], 0);
    assert_eq!(r["conflicts"], serde_json::json!([]), "{r}");
    assert_eq!(
        r["line_merged"],
        serde_json::json!(["/lib/mod.txt", "/moved.txt", "/renamed.txt"])
    );
    assert_eq!(
        env.cat(None, "/renamed.txt"),
        numbered(&[(1, "fork's edit"), (9, "target's edit")])
    );
    assert_eq!(env.json_err(&["cat", "/doc.txt"], 1)["kind"], "not_found");
    assert_eq!(
        env.cat(None, "/lib/mod.txt"),
        numbered(&[(4, "module"), (10, "target's")])
    );
    assert_eq!(
        env.json_err(&["cat", "/pkg/mod.txt"], 1)["kind"],
        "not_found"
    );
    assert_eq!(
        env.cat(None, "/moved.txt"),
        numbered(&[(3, "other"), (7, "fork's")])
    );
    assert_eq!(env.json_err(&["cat", "/other.txt"], 1)["kind"], "not_found");
}
