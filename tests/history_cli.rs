//! Checkpoints, diff, log, per-path restore, audit, gc, verify and stats through the real binary.

mod common;
use common::*;
use serde_json::Value;

fn find<'a>(diff: &'a Value, path: &str) -> &'a Value {
    diff["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["path"] == path)
        .unwrap_or_else(|| panic!("{path} not in {diff}"))
}

#[test]
fn checkpoint_save_list_restore_delete() {
    let env = Env::new();
    env.ok(&["write", "/f", "v1"]);
    let s = env.json(&["checkpoint", "save", "one", "-m", "first"]);
    assert_eq!(s["checkpoint"]["name"], "one");
    assert_eq!(s["checkpoint"]["message"], "first");
    assert_eq!(
        env.json_err(&["checkpoint", "save", "one"], 1)["kind"],
        "checkpoint_exists"
    );
    // Generated names are unique even within one second.
    let names: Vec<String> = (0..4)
        .map(|_| {
            env.json(&["snapshot", "save"])["checkpoint"]["name"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let mut dedup = names.clone();
    dedup.sort();
    dedup.dedup();
    assert_eq!(dedup.len(), 4, "{names:?}");

    env.ok(&["write", "/f", "v2"]);
    env.ok(&["write", "/g", "new"]);
    let r = env.json(&["checkpoint", "restore", "one"]);
    let kept = r["saved_unsaved_changes_as"]
        .as_str()
        .expect("unsaved changes are kept")
        .to_string();
    assert_eq!(env.cat(None, "/f"), "v1");
    assert_eq!(env.json_err(&["cat", "/g"], 1)["kind"], "not_found");
    // ...and nothing was lost: the automatic checkpoint has them.
    assert_eq!(env.ok(&["cat", "/f", "--at", &kept]).stdout, "v2");

    let list = env.json(&["checkpoint", "list"]);
    assert_eq!(list["head"], "one");
    assert_eq!(list["checkpoints"].as_array().unwrap().len(), 6);
    env.json(&["checkpoint", "delete", "one"]);
    assert_eq!(
        env.json_err(&["checkpoint", "restore", "one"], 1)["kind"],
        "no_such_checkpoint"
    );
    assert_eq!(
        env.json(&["checkpoint", "list"])["checkpoints"]
            .as_array()
            .unwrap()
            .len(),
        5
    );
    assert_eq!(
        env.cat(None, "/f"),
        "v1",
        "deleting a checkpoint never touches the live state"
    );
}

#[test]
fn a_fork_names_the_checkpoints_it_descends_from() {
    let env = Env::new();
    env.ok(&["write", "/f", "v0"]);
    env.json(&["checkpoint", "save", "old"]);
    env.ok(&["write", "/f", "v1"]);
    env.json(&["checkpoint", "save", "base"]);
    env.ok(&["write", "/f", "parent-later"]);
    env.json(&["checkpoint", "save", "later"]);
    env.json(&["vault", "fork", "default", "task", "--from", "base"]);
    fn t<'a>(args: &[&'a str]) -> Vec<&'a str> {
        let mut v = vec!["--vault", "task"];
        v.extend_from_slice(args);
        v
    }
    let run = |args: &[&str]| env.json(&t(args));
    assert_eq!(run(&["checkpoint", "list"])["head"], "base");
    run(&["write", "/f", "fork-edit"]);
    // The head a fork reports is a name it can use: in diff, cat --at, restore.
    let d = run(&["diff", "base"]);
    assert_eq!(d["from"], "base");
    assert_eq!(find(&d, "/f")["kind"], "modified");
    assert_eq!(run(&["cat", "/f", "--at", "base"])["content"], "v1");
    // ...and so is what the fork point descends from, but not the parent's later work.
    assert_eq!(run(&["cat", "/f", "--at", "old"])["content"], "v0");
    let e = env.json_err(&t(&["cat", "/f", "--at", "later"]), 1);
    assert_eq!(e["kind"], "no_such_checkpoint");
    // A fork's own checkpoint of the same name wins, and is all it may delete.
    run(&["checkpoint", "save", "base"]);
    assert_eq!(run(&["cat", "/f", "--at", "base"])["content"], "fork-edit");
    run(&["checkpoint", "delete", "base"]);
    let e = env.json_err(&t(&["checkpoint", "delete", "base"]), 1);
    assert_eq!(e["kind"], "no_such_checkpoint");
    assert_eq!(
        env.ok(&["cat", "/f", "--at", "base"]).stdout,
        "v1",
        "the parent's is untouched"
    );
    run(&["checkpoint", "restore", "base"]);
    assert_eq!(env.cat(Some("task"), "/f"), "v1");
}

#[test]
fn every_fork_has_a_base_of_its_own_name_unless_it_starts_at_a_saved_checkpoint() {
    let env = Env::new();
    env.ok(&["vault", "create", "t"]);
    env.ok(&["--vault", "t", "write", "/f", "v1"]);
    let fork = |name: &str| {
        env.json(&["vault", "fork", "t", name])["checkpoint"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let forked_from = |name: &str| {
        env.json(&["vault", "list"])["vaults"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name)
            .unwrap()["forked_from_checkpoint"]
            .clone()
    };
    // Unsaved changes: a base is taken for the fork, named after it.
    assert_eq!(fork("task-1"), "fork-task-1");
    // Nothing changed since: the second task still gets a base of its own name, never
    // the first one's.
    assert_eq!(fork("task-2"), "fork-task-2");
    assert_eq!(forked_from("task-1"), "fork-task-1");
    assert_eq!(forked_from("task-2"), "fork-task-2");
    let human = env.ok(&["vault", "list"]).stdout;
    let line = human.lines().find(|l| l.contains("task-2")).unwrap();
    assert!(line.contains("at fork-task-2"), "{human}");
    // Both bases hold the same tree; the second descends from the first.
    let d = env.json(&["--vault", "t", "diff", "fork-task-1", "fork-task-2"]);
    assert_eq!(d["total"], 0, "{d}");
    // A name taken by an earlier fork of that name gets a suffix.
    env.ok(&["vault", "delete", "task-1", "-y"]);
    env.ok(&["--vault", "t", "write", "/f", "v2"]);
    assert_eq!(fork("task-1"), "fork-task-1-2");
    // A checkpoint someone saved, with nothing changed since, is the base as it is.
    env.json(&["--vault", "t", "checkpoint", "save", "release"]);
    assert_eq!(fork("task-3"), "release");
    assert_eq!(forked_from("task-3"), "release");
}

#[test]
fn tags_and_metadata_changes_are_changes() {
    let env = Env::new();
    env.ok(&["write", "/f.txt", "hi"]);
    env.ok(&["write", "/g.txt", "hi"]);
    env.json(&["checkpoint", "save", "one"]);
    env.ok(&["tag", "/f.txt", "reviewed"]);
    env.ok(&["meta", "/g.txt", "owner", "alice"]);
    let d = env.json(&["diff", "one"]);
    assert_eq!(find(&d, "/f.txt")["kind"], "meta_changed");
    assert_eq!(find(&d, "/g.txt")["kind"], "meta_changed");
    assert_eq!(d["summary"]["meta_changed"], 2);
    assert_eq!(d["summary"]["modified"], 0);
    assert!(
        env.ok(&["diff", "one"]).stdout.contains("X /f.txt"),
        "the human diff shows it too"
    );
    // A checkpoint sees it as a change, and restoring undoes it.
    let s = env.json(&["checkpoint", "save", "two"]);
    assert_eq!(s["changed"], true, "{s}");
    env.json(&["checkpoint", "restore", "one"]);
    assert_eq!(env.json(&["diff", "one"])["changes"], serde_json::json!([]));
}

#[test]
fn diff_reports_every_kind_with_sizes_and_patches() {
    let env = Env::new();
    env.ok(&["write", "/keep", "same"]);
    env.ok(&["write", "/edit.txt", "line 1\nline 2\n"]);
    env.ok(&["write", "/gone", "bye"]);
    env.ok(&["write", "/becomes-dir", "file"]);
    env.ok(&["write", "/mode", "m"]);
    env.ok(&["mkdir", "-p", "/tree/sub"]);
    env.ok(&["write", "/tree/sub/x", "x"]);
    env.json(&["checkpoint", "save", "a"]);
    let none = env.json(&["diff"]);
    assert_eq!(none["changes"].as_array().unwrap().len(), 0);

    env.ok(&["write", "/edit.txt", "line 1\nline two\n"]);
    env.ok(&["rm", "/gone"]);
    env.ok(&["write", "/added", "12345"]);
    env.ok(&["rm", "/becomes-dir"]);
    env.ok(&["mkdir", "/becomes-dir"]);
    env.ok(&["write", "/becomes-dir/inside", "i"]);
    env.ok(&["chmod", "600", "/mode"]);
    env.ok(&["rm", "-r", "/tree"]);

    let d = env.json(&["diff", "--patch"]);
    assert_eq!(d["from"], "a");
    assert_eq!(d["to"], "live");
    let m = find(&d, "/edit.txt");
    assert_eq!(m["kind"], "modified");
    assert_eq!(m["size_before"], 14);
    assert_eq!(m["size_after"], 16);
    assert!(
        m["patch"]
            .as_str()
            .unwrap()
            .contains("-line 2\n+line two\n"),
        "{m}"
    );
    assert_eq!(find(&d, "/gone")["kind"], "deleted");
    assert_eq!(find(&d, "/gone")["size_before"], 3);
    assert_eq!(find(&d, "/added")["kind"], "added");
    assert_eq!(find(&d, "/added")["size_after"], 5);
    let t = find(&d, "/becomes-dir");
    assert_eq!(t["kind"], "type_changed");
    assert_eq!(
        (t["type_before"].as_str(), t["type_after"].as_str()),
        (Some("file"), Some("dir"))
    );
    assert_eq!(find(&d, "/becomes-dir/inside")["kind"], "added");
    let p = find(&d, "/mode");
    assert_eq!(p["kind"], "mode_changed");
    assert_eq!(
        (p["mode_before"].as_str(), p["mode_after"].as_str()),
        (Some("0644"), Some("0600"))
    );
    for gone in ["/tree", "/tree/sub", "/tree/sub/x"] {
        assert_eq!(find(&d, gone)["kind"], "deleted");
    }
    assert!(
        d["changes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["path"] != "/keep")
    );
    assert_eq!(d["summary"]["deleted"], 4);

    // Checkpoint to checkpoint, and the checkpoint diff alias.
    env.json(&["checkpoint", "save", "b"]);
    let d2 = env.json(&["checkpoint", "diff", "a", "b"]);
    assert_eq!(changes(&d2), changes(&d));
    let back = env.json(&["diff", "b", "a"]);
    assert_eq!(find(&back, "/added")["kind"], "deleted");
    let human = env.ok(&["diff", "a", "b"]).stdout;
    assert!(human.contains("M /edit.txt"), "{human}");
}

#[test]
fn log_cat_at_and_restore_one_path() {
    let env = Env::new();
    env.ok(&["write", "-p", "/src/main.rs", "v1"]);
    env.ok(&["write", "/other", "o1"]);
    env.json(&["checkpoint", "save", "c1"]);
    env.ok(&["write", "/src/main.rs", "v2"]);
    env.json(&["checkpoint", "save", "c2"]);
    env.json(&["checkpoint", "save", "c3"]);
    env.ok(&["write", "/src/main.rs", "v3 live"]);
    env.ok(&["write", "/other", "o2"]);

    let log = env.json(&["log", "/src/main.rs"]);
    let v = log["versions"].as_array().unwrap();
    let ats: Vec<&str> = v.iter().map(|x| x["at"].as_str().unwrap()).collect();
    // Only the versions where the path changed: c3 equals c2 (see `log --all`).
    assert_eq!(ats, vec!["c1", "c2", "live"]);
    let changed: Vec<bool> = v.iter().map(|x| x["changed"].as_bool().unwrap()).collect();
    assert_eq!(changed, vec![true, true, true]);
    assert_eq!(v[2]["size"], 7);
    let all = env.json(&["log", "/src/main.rs", "--all"]);
    let changed: Vec<bool> = all["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["changed"].as_bool().unwrap())
        .collect();
    assert_eq!(changed, vec![true, true, false, true]);

    assert_eq!(env.ok(&["cat", "/src/main.rs", "--at", "c1"]).stdout, "v1");
    assert_eq!(
        env.json_err(&["cat", "/src/main.rs", "--at", "nope"], 1)["kind"],
        "no_such_checkpoint"
    );

    env.json(&["restore", "/src/main.rs", "--from", "c1"]);
    assert_eq!(env.cat(None, "/src/main.rs"), "v1");
    assert_eq!(
        env.cat(None, "/other"),
        "o2",
        "only the named path is restored"
    );
    // A whole directory, and a path that did not exist then.
    env.ok(&["write", "/src/new.rs", "n"]);
    env.json(&["restore", "/src", "--from", "c2"]);
    assert_eq!(env.cat(None, "/src/main.rs"), "v2");
    assert_eq!(
        env.json_err(&["cat", "/src/new.rs"], 1)["kind"],
        "not_found"
    );
    env.ok(&["write", "/later", "l"]);
    env.json(&["restore", "/later", "--from", "c1"]);
    assert_eq!(env.json_err(&["cat", "/later"], 1)["kind"], "not_found");
}

#[test]
fn symlinks_and_hard_links_survive_checkpoint_round_trips() {
    let env = Env::new();
    env.ok(&["mkdir", "-p", "/a", "/b"]);
    env.ok(&["write", "/a/x", "shared"]);
    env.ok(&["ln", "/a/x", "/b/y"]);
    env.ok(&["ln", "-s", "../a/x", "/b/sym"]);
    env.json(&["checkpoint", "save", "linked"]);
    env.ok(&["rm", "-r", "/a", "/b"]);
    env.json(&["checkpoint", "restore", "linked"]);
    assert_eq!(env.json(&["stat", "/b/y"])["nlink"], 2);
    assert_eq!(env.json(&["stat", "/b/sym"])["target"], "../a/x");
    // Still one inode: a write through one name shows through the other, across dirs
    // that were materialized separately.
    env.ok(&["write", "/b/y", "changed via y"]);
    env.json(&["checkpoint", "save", "after"]);
    assert_eq!(
        env.ok(&["cat", "/a/x", "--at", "after"]).stdout,
        "changed via y"
    );
    // A fork sees the link too.
    env.json(&["vault", "fork", "default", "f"]);
    env.ok(&["--vault", "f", "write", "/a/x", "fork"]);
    assert_eq!(env.cat(Some("f"), "/b/y"), "fork");
    assert_eq!(env.cat(None, "/b/y"), "changed via y");
}

fn sqlite(env: &Env) -> rusqlite::Connection {
    rusqlite::Connection::open(env.home().join("vaults/default.avfs")).unwrap()
}

#[test]
fn audit_lists_and_detects_tampering() {
    let env = Env::new();
    for i in 0..5 {
        env.ok(&["write", &format!("/f{i}"), "x"]);
    }
    env.json(&["checkpoint", "save", "c"]);
    let a = env.json(&["audit"]);
    let actions: Vec<&str> = a["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions.iter().filter(|a| **a == "write").count(), 5);
    assert_eq!(*actions.last().unwrap(), "checkpoint.save");
    assert_eq!(
        env.json(&["audit", "--limit", "2"])["entries"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        env.json(&["audit", "--since", "1h"])["entries"]
            .as_array()
            .unwrap()
            .len(),
        actions.len()
    );
    assert_eq!(
        env.json(&["audit", "--since", "2999-01-01T00:00:00Z"])["entries"]
            .as_array()
            .unwrap()
            .len(),
        0
    );
    assert_eq!(env.json(&["audit", "verify"])["ok"], true);

    // Edit a row.
    sqlite(&env)
        .execute(
            "UPDATE audit SET detail = '{\"path\":\"/innocent\"}' WHERE id = 3",
            [],
        )
        .unwrap();
    let r = env.run(&["--json", "audit", "verify"]);
    assert_eq!(r.code, 1);
    assert_eq!(r.json()["ok"], false);
    let env2 = Env::new();
    for i in 0..5 {
        env2.ok(&["write", &format!("/f{i}"), "x"]);
    }
    // Remove a row in the middle, and then the last one.
    sqlite(&env2)
        .execute("DELETE FROM audit WHERE id = 3", [])
        .unwrap();
    assert_eq!(env2.run(&["audit", "verify"]).code, 1);
    let env3 = Env::new();
    for i in 0..3 {
        env3.ok(&["write", &format!("/f{i}"), "x"]);
    }
    sqlite(&env3)
        .execute(
            "DELETE FROM audit WHERE id = (SELECT MAX(id) FROM audit)",
            [],
        )
        .unwrap();
    let v = env3.run(&["--json", "audit", "verify"]);
    assert_eq!(v.code, 1, "{}", v.stdout);
}

#[test]
fn gc_verify_stats() {
    let env = Env::new();
    let big_a = noise(200_000, 1);
    let big_b = noise(200_000, 2);
    assert_eq!(env.run_stdin(&["write", "/big"], &big_a).code, 0);
    env.json(&["checkpoint", "save", "old"]);
    assert_eq!(env.run_stdin(&["write", "/big"], &big_b).code, 0);
    env.json(&["checkpoint", "save", "new"]);
    let before = env.json(&["stats"]);
    let g = env.json(&["gc"]);
    assert_eq!(
        g["chunks_removed"], 0,
        "everything is still referenced by a checkpoint: {g}"
    );
    // Deleting the checkpoint gives its space back at once (docs/storage.md): a later
    // gc finds nothing left, and the stored bytes went down (below).
    env.json(&["checkpoint", "delete", "old"]);
    let g = env.json(&["gc"]);
    assert_eq!(g["chunks_removed"], 0, "{g}");
    assert_eq!(env.cmd(["cat", "/big"]).output().unwrap().stdout, big_b);
    let after = env.json(&["stats"]);
    assert!(
        after["stats"]["vault"]["stored_bytes"].as_u64()
            < before["stats"]["vault"]["stored_bytes"].as_u64()
    );
    assert_eq!(after["stats"]["workspace"]["files"], 1);
    assert_eq!(after["stats"]["workspace"]["logical_bytes"], 200_000);
    assert_eq!(env.json(&["vault", "verify"])["report"]["ok"], true);

    // Flip content bytes: verify finds it, cat refuses to return wrong data.
    sqlite(&env)
        .execute(
            "UPDATE chunk SET data = zeroblob(length(data)) WHERE length(data) > 60000",
            [],
        )
        .unwrap();
    let r = env.run(&["--json", "vault", "verify"]);
    assert_eq!(r.code, 1);
    assert_eq!(r.json()["report"]["ok"], false);
    let e = env.json_err(&["cat", "/big"], 1);
    assert_eq!(e["kind"], "corrupt_vault");
}

/// 120 000 numbered lines (1.4 MB), with line `at` replaced by `by`.
fn big_text(at: usize, by: &str) -> String {
    (0..120_000)
        .map(|i| {
            if i == at {
                format!("{by}\n")
            } else {
                format!("line {i:06}\n")
            }
        })
        .collect()
}

#[test]
fn a_one_line_edit_of_a_large_text_file_is_a_one_line_hunk() {
    let env = Env::new();
    let write = |data: &[u8]| {
        let r = env.run_stdin(&["write", "/big.txt"], data);
        assert_eq!(r.code, 0, "{}", r.stderr);
    };
    write(big_text(usize::MAX, "").as_bytes());
    let bin: Vec<u8> = (0..2_000_000u32).map(|i| (i % 251) as u8).collect();
    let r = env.run_stdin(&["write", "/big.bin"], &bin);
    assert_eq!(r.code, 0, "{}", r.stderr);
    env.json(&["checkpoint", "save", "a"]);
    write(big_text(60_000, "changed").as_bytes());
    let mut bin2 = bin.clone();
    bin2[1_000_000] ^= 0xff;
    let r = env.run_stdin(&["write", "/big.bin"], &bin2);
    assert_eq!(r.code, 0, "{}", r.stderr);

    let d = env.json(&["diff", "--patch"]);
    let patch = find(&d, "/big.txt")["patch"]
        .as_str()
        .unwrap_or_else(|| panic!("no patch: {d}"));
    // One hunk: the line and three of context on each side, whatever the file's size.
    assert_eq!(
        patch.matches("\n@@ ").count() + patch.starts_with("@@ ") as usize,
        1,
        "{patch}"
    );
    assert!(patch.contains("-line 060000\n+changed\n"), "{patch}");
    assert!(patch.len() < 300, "{} bytes: {patch}", patch.len());
    // A binary file gets no patch, however small its change.
    assert!(find(&d, "/big.bin").get("patch").is_none());
    let s = env.json(&["diff", "--stat"]);
    let stat = s["stat"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "/big.txt")
        .unwrap()
        .clone();
    assert_eq!(
        (&stat["insertions"], &stat["deletions"]),
        (&1.into(), &1.into()),
        "{stat}"
    );
}

#[test]
fn checkpoint_list_and_diff_return_a_page_by_default() {
    let env = Env::new();
    env.ok(&["write", "/f", "0"]);
    env.json(&["checkpoint", "save", "start"]);
    for i in 1..=104 {
        env.ok(&["write", &format!("/f{i}"), "x"]);
        // /f changes in every checkpoint: `log /f` has 105 versions.
        env.ok(&["write", "/f", &i.to_string()]);
        env.json(&["checkpoint", "save", &format!("c{i:03}")]);
    }
    // The newest 100, oldest first, and the way to the older ones.
    let l = env.json(&["checkpoint", "list"]);
    let names: Vec<&str> = l["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 100);
    assert_eq!((names[0], names[99]), ("c005", "c104"));
    assert_eq!(l["total"], 105);
    assert_eq!(l["next_cursor"], "100");
    let older = env.json(&["checkpoint", "list", "--cursor", "100"]);
    let names: Vec<&str> = older["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["start", "c001", "c002", "c003", "c004"]);
    assert!(older["next_cursor"].is_null());
    let two = env.json(&["checkpoint", "list", "--limit", "2", "--cursor", "1"]);
    assert_eq!(two["checkpoints"][0]["name"], "c102");
    assert_eq!(two["checkpoints"][1]["name"], "c103");
    assert_eq!(two["next_cursor"], "3");
    let e = env.json_err(&["checkpoint", "list", "--cursor", "x"], 1);
    assert_eq!(e["kind"], "invalid_argument");
    // diff: 105 changes, the first 100 listed, the summary counts all.
    let d = env.json(&["diff", "start"]);
    assert_eq!(d["changes"].as_array().unwrap().len(), 100);
    assert_eq!((&d["total"], &d["next_offset"]), (&105.into(), &100.into()));
    assert_eq!(d["summary"]["added"], 104);
    assert_eq!(d["summary"]["modified"], 1);

    // log: pages go back from the newest version, as checkpoint list's do.
    let log = env.json(&["log", "/f"]);
    let ats = |v: &Value| -> Vec<String> {
        v["versions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["at"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(log["total"], 105);
    assert_eq!(ats(&log).len(), 100);
    assert_eq!(ats(&log)[99], "c104");
    let mut all = ats(&log);
    let mut cursor = log["next_cursor"].as_str().map(str::to_string);
    while let Some(c) = cursor {
        let page = env.json(&["log", "/f", "--limit", "30", "--cursor", &c]);
        assert_eq!(page["total"], 105);
        let mut older = ats(&page);
        older.append(&mut all);
        all = older;
        cursor = page["next_cursor"].as_str().map(str::to_string);
    }
    let mut want = vec!["start".to_string()];
    want.extend((1..=104).map(|i| format!("c{i:03}")));
    assert_eq!(all, want);
    // Human output pages only when asked, and says where the rest is.
    let text = env.ok(&["log", "/f"]).stdout;
    assert_eq!(text.lines().count(), 105, "{text}");
    let text = env.ok(&["log", "/f", "--limit", "2"]).stdout;
    assert!(
        text.starts_with("... 103 older: avfs log /f --cursor 2"),
        "{text}"
    );

    // audit: more than 200 rows; a page of the newest 100, and the cursor (a row id)
    // walks back to the first row, every row exactly once.
    let a = env.json(&["audit"]);
    let total = a["total"].as_u64().unwrap();
    assert!(total > 200, "{total}");
    let ids = |v: &Value| -> Vec<u64> {
        v["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["id"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(ids(&a).len(), 100);
    assert_eq!(*ids(&a).last().unwrap(), total);
    let mut all = ids(&a);
    let mut cursor = a["next_cursor"].as_str().map(str::to_string);
    while let Some(c) = cursor {
        let page = env.json(&["audit", "--cursor", &c]);
        assert_eq!(page["total"], total);
        let mut older = ids(&page);
        assert!(older.len() <= 100);
        older.append(&mut all);
        all = older;
        cursor = page["next_cursor"].as_str().map(str::to_string);
    }
    assert_eq!(all, (1..=total).collect::<Vec<_>>());
    let e = env.json_err(&["audit", "--cursor", "x"], 1);
    assert_eq!(e["kind"], "invalid_argument");
}
