//! The JSON documents of docs/json.md, checked against the real binary: every documented
//! field is present with its documented type, so renaming or removing a field fails here.
//! Every run also checks that stdout holds exactly one JSON document and nothing else.
//! This file: vaults, files, host import/export and history; tests/json_shapes_ops.rs
//! has upkeep, usage errors, mounts, policy, remotes and the history tools.

mod common;
use common::*;
#[path = "common/documents.rs"]
mod documents;
#[path = "common/shapes.rs"]
mod shapes;

use serde_json::Value;
use shapes::*;

// ---- vaults -----------------------------------------------------------------------------

#[test]
fn vault_create_list_use_info() {
    let env = Env::new();
    let v = doc(&env, &["vault", "create", "demo"]);
    shape(&v, &[("created", Obj)]);
    shape(&v["created"], VAULT_REF);
    assert_eq!(v["created"]["name"], "demo");
    assert_eq!(v["created"]["workspace"], "main");
    let custom = env.path("elsewhere/other.avfs");
    let v = doc(
        &env,
        &[
            "vault",
            "create",
            "other",
            "--path",
            custom.to_str().unwrap(),
        ],
    );
    assert_eq!(v["created"]["path"], custom.to_str().unwrap());

    let list = doc(&env, &["vault", "list"]);
    shape(&list, &[("vaults", Arr)]);
    let vaults = each(&list["vaults"], VAULT);
    assert_eq!(vaults.len(), 2);
    assert!(vaults.iter().all(|v| v.get("error").is_none()));
    assert_time(&vaults[0]["created_at"]);
    // `vault ls` is the same command.
    assert_eq!(doc(&env, &["vault", "ls"])["vaults"], list["vaults"]);

    let u = doc(&env, &["vault", "use", "other"]);
    shape(&u, &[("current", Str)]);
    assert_eq!(u["current"], "other");

    let info = doc(&env, &["vault", "info"]);
    shape(
        &info,
        &[
            ("vault", Obj),
            ("checkpoints", Num),
            ("head", NullOr(&Str)),
            ("forks", Arr),
            ("file_bytes", Num),
            ("workspace_path", Str),
        ],
    );
    shape(&info["vault"], VAULT);
    let set = doc(&env, &["vault", "set-path", "/srv/other-app"]);
    shape(&set, &[("vault", Str), ("workspace_path", Str)]);
    assert_eq!(
        doc(&env, &["vault", "info"])["workspace_path"],
        "/srv/other-app"
    );
    assert_eq!(info["vault"]["name"], "other");
    assert_eq!(info["vault"]["current"], true);
    assert!(info["head"].is_null());
    assert!(info["file_bytes"].as_u64().unwrap() > 0);

    let info = doc(&env, &["vault", "info", "demo"]);
    assert_eq!(info["vault"]["name"], "demo");
    assert_eq!(info["vault"]["current"], false);

    err_doc(&env, &["vault", "create", "demo"], 1, "vault_exists");
    err_doc(&env, &["vault", "use", "nope"], 1, "no_such_vault");
    err_doc(&env, &["vault", "info", "nope"], 1, "no_such_vault");
    err_doc(&env, &["vault", "create", ".hidden"], 1, "invalid_argument");
}

#[test]
fn vault_fork_export_import_verify_delete() {
    let env = Env::new();
    doc(&env, &["vault", "create", "base"]);
    doc(&env, &["--vault", "base", "write", "/a", "one"]);
    doc(&env, &["--vault", "base", "checkpoint", "save", "c1"]);

    let f = doc(&env, &["vault", "fork", "base", "task", "--from", "c1"]);
    shape(
        &f,
        &[("fork", Obj), ("parent", Str), ("checkpoint", NullOr(&Str))],
    );
    shape(&f["fork"], VAULT_REF);
    assert_eq!(f["fork"]["name"], "task");
    assert_eq!(f["fork"]["workspace"], "task");
    assert_eq!(f["parent"], "base");
    assert_eq!(f["checkpoint"], "c1");

    // Without --from and with unsaved changes, a fork-NAME checkpoint is taken first.
    doc(&env, &["--vault", "base", "write", "/a", "two"]);
    let f = doc(&env, &["vault", "fork", "base", "task2", "--use"]);
    assert_eq!(f["checkpoint"], "fork-task2");

    let list = doc(&env, &["vault", "list"]);
    let vaults = each(&list["vaults"], VAULT);
    let task = vaults.iter().find(|v| v["name"] == "task").unwrap();
    assert_eq!(task["parent"], "base");
    assert_eq!(task["forked_from_checkpoint"], "c1");
    let task2 = vaults.iter().find(|v| v["name"] == "task2").unwrap();
    assert_eq!(task2["current"], true);

    let info = doc(&env, &["vault", "info", "base"]);
    let forks: Vec<&str> = info["forks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().expect("fork names are strings"))
        .collect();
    assert_eq!(forks, ["task", "task2"]);
    assert_eq!(info["head"], "fork-task2");

    let file = env.path("task.avfs");
    let x = doc(&env, &["vault", "export", "task", file.to_str().unwrap()]);
    shape(&x, &[("exported", Str), ("file", Str), ("report", Obj)]);
    shape(
        &x["report"],
        &[
            ("trees", Num),
            ("contents", Num),
            ("chunks", Num),
            ("checkpoints", Num),
            ("bytes", Num),
        ],
    );
    assert_eq!(x["exported"], "task");
    assert_eq!(x["file"], file.to_str().unwrap());
    assert_eq!(x["report"]["checkpoints"], 1);
    err_doc(
        &env,
        &["vault", "export", "task", file.to_str().unwrap()],
        1,
        "already_exists",
    );

    let i = doc(
        &env,
        &["vault", "import", file.to_str().unwrap(), "task-copy"],
    );
    shape(&i, &[("imported", Str), ("file", Str), ("forks", Arr)]);
    assert_eq!(i["imported"], "task-copy");
    assert_eq!(i["file"], file.to_str().unwrap());
    assert!(i["forks"].as_array().unwrap().iter().all(Value::is_string));
    // The default name is the file stem, which is taken by the fork.
    err_doc(
        &env,
        &["vault", "import", file.to_str().unwrap()],
        1,
        "vault_exists",
    );

    let v = doc(&env, &["vault", "verify", "base"]);
    check_vault_verify(&v);
    assert_eq!(v["vault"], "base");
    assert_eq!(v["report"]["ok"], true);
    assert_eq!(v["report"]["problems"].as_array().unwrap().len(), 0);
    assert_eq!(v["report"]["checked"]["workspaces"], 3);
    assert_eq!(v["report"]["page_checksums"], true);
    let v = doc(&env, &["vault", "verify", "task-copy"]);
    assert_eq!(v["report"]["ok"], true);
    // A vault made with page checksums has nothing to upgrade.
    let u = doc(&env, &["vault", "upgrade", "base"]);
    shape(&u, &[("vault", Str), ("path", Str), ("report", Obj)]);
    shape(
        &u["report"],
        &[
            ("upgraded", Bool),
            ("pages", Num),
            ("bytes_before", Num),
            ("bytes_after", Num),
        ],
    );
    assert_eq!(u["report"]["upgraded"], false);

    let d = doc(&env, &["vault", "delete", "task2", "-y"]);
    shape(&d, &[("deleted", Arr)]);
    assert_eq!(d["deleted"], serde_json::json!(["task2"]));
    let e = err_doc(&env, &["vault", "delete", "base", "-y"], 1, "refused");
    assert!(e["message"].as_str().unwrap().contains("--force"));
    let e = err_doc(&env, &["vault", "delete", "base", "--force"], 1, "refused");
    assert!(e["message"].as_str().unwrap().contains("-y"));
    let d = doc(&env, &["vault", "delete", "base", "-y", "--force"]);
    assert_eq!(d["deleted"], serde_json::json!(["base", "task"]));
    err_doc(&env, &["vault", "delete", "base", "-y"], 1, "no_such_vault");
    err_doc(&env, &["--vault", "task", "ls"], 1, "no_such_vault");
}

#[test]
fn vault_list_reports_unreadable_files_with_error() {
    let env = Env::new();
    doc(&env, &["vault", "create", "good"]);
    doc(&env, &["vault", "create", "broken"]);
    std::fs::write(env.home().join("vaults/broken.avfs"), "not a vault").unwrap();
    let list = doc(&env, &["vault", "list"]);
    let vaults = each(&list["vaults"], VAULT);
    let broken = vaults.iter().find(|v| v["name"] == "broken").unwrap();
    assert!(broken["error"].is_string(), "{broken}");
    assert!(broken["created_at"].is_null(), "{broken}");
    let good = vaults.iter().find(|v| v["name"] == "good").unwrap();
    assert!(good.get("error").is_none(), "{good}");
    err_doc(&env, &["--vault", "broken", "ls"], 1, "not_a_vault");
    err_doc(&env, &["vault", "verify", "broken"], 1, "not_a_vault");
    let missing = env.path("missing.avfs");
    err_doc(
        &env,
        &["--vault", missing.to_str().unwrap(), "stat", "/"],
        1,
        "no_such_vault",
    );
}

#[test]
fn vault_verify_failure_is_a_report_with_exit_1() {
    let env = Env::new();
    doc(&env, &["write", "/a", "hello"]);
    sqlite(&env, "default")
        .execute("UPDATE chunk SET data = X'00000000'", [])
        .unwrap();
    let r = env.run(&["--json", "vault", "verify"]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    let v = one_document(&r.stdout);
    assert!(v.get("error").is_none(), "{v}");
    check_vault_verify(&v);
    assert_eq!(v["report"]["ok"], false);
    let problems = v["report"]["problems"].as_array().unwrap();
    assert!(!problems.is_empty());
    assert!(problems.iter().any(|p| p["kind"] == "chunk_hash_mismatch"));
    err_doc(&env, &["cat", "/a"], 1, "corrupt_vault");
}

// ---- files ------------------------------------------------------------------------------

#[test]
fn write_cat_ls_stat() {
    let env = Env::new();
    let w = doc(&env, &["write", "/notes.txt", "hello\n"]);
    shape(&w, &[("path", Str), ("size", Num)]);
    assert_eq!(w["path"], "/notes.txt");
    assert_eq!(w["size"], 6);
    let w = doc(&env, &["write", "-a", "notes.txt", "more\n"]);
    assert_eq!(w["path"], "/notes.txt", "paths are shown absolute");
    assert_eq!(w["size"], 11);
    let w = doc(
        &env,
        &["write", "-p", "/src/deep/main.rs", "fn main() {}\n"],
    );
    assert_eq!(w["path"], "/src/deep/main.rs");

    // From stdin, binary.
    let r = env.run_stdin(&["--json", "write", "/blob.bin"], &[0, 0xff, 0x10]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let w = one_document(&r.stdout);
    documents::assert_matches("write", &w);
    shape(&w, &[("path", Str), ("size", Num)]);
    assert_eq!(w["size"], 3);

    let c = doc(&env, &["cat", "/notes.txt"]);
    shape(
        &c,
        &[
            ("path", Str),
            ("size", Num),
            ("encoding", Str),
            ("content", Str),
        ],
    );
    assert_eq!(c["encoding"], "utf-8");
    assert_eq!(c["content"], "hello\nmore\n");
    assert_eq!(c["size"], 11);
    let c = doc(&env, &["cat", "/blob.bin"]);
    shape(
        &c,
        &[
            ("path", Str),
            ("size", Num),
            ("encoding", Str),
            ("content", Str),
        ],
    );
    assert_eq!(c["encoding"], "hex");
    assert_eq!(c["content"], "00ff10");
    assert_eq!(c["size"], 3);

    let l = doc(&env, &["ls"]);
    shape(&l, &[("path", Str), ("entries", Arr)]);
    assert_eq!(l["path"], "/");
    let entries = each(&l["entries"], STAT);
    for e in entries {
        check_stat(e);
    }
    let names: Vec<&str> = entries
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["blob.bin", "notes.txt", "src"]);
    let l = doc(&env, &["ls", "-l", "-a", "/notes.txt"]);
    assert_eq!(l["path"], "/notes.txt");
    let entries = each(&l["entries"], STAT);
    assert_eq!(entries.len(), 1);
    check_stat(&entries[0]);
    assert_eq!(entries[0]["path"], "/notes.txt");

    let s = doc(&env, &["stat", "/notes.txt"]);
    check_stat(&s);
    assert_eq!(s["type"], "file");
    assert_eq!(s["mode"], "0644");
    assert_eq!(s["size"], 11);
    let s = doc(&env, &["stat", "/"]);
    check_stat(&s);
    assert_eq!(s["name"], "/");
    assert_eq!(s["type"], "dir");

    err_doc(&env, &["cat", "/nope"], 1, "not_found");
    err_doc(&env, &["cat", "/src"], 1, "is_a_directory");
    err_doc(&env, &["write", "/no/parent", "x"], 1, "not_found");
    err_doc(&env, &["ls", "/nope"], 1, "not_found");
    err_doc(&env, &["stat", "/nope"], 1, "not_found");
    let long = format!("/{}", "x".repeat(256));
    err_doc(&env, &["write", &long, "x"], 1, "name_too_long");
}

#[test]
fn mkdir_rm_mv_cp_tree() {
    let env = Env::new();
    let m = doc(&env, &["mkdir", "-p", "/docs", "/build/out"]);
    shape(&m, &[("created", Arr)]);
    assert_eq!(m["created"], serde_json::json!(["/docs", "/build/out"]));
    err_doc(&env, &["mkdir", "/docs"], 1, "already_exists");
    doc(&env, &["write", "-p", "/src/main.rs", "fn main() {}\n"]);

    let c = doc(&env, &["cp", "-r", "/src", "/src-copy"]);
    shape(&c, &[("from", Str), ("to", Str)]);
    assert_eq!(c["from"], "/src");
    assert_eq!(c["to"], "/src-copy");
    let c = doc(&env, &["cp", "/src/main.rs", "/docs"]);
    assert_eq!(c["to"], "/docs/main.rs");
    err_doc(&env, &["cp", "/src", "/x"], 1, "is_a_directory");

    let v = doc(&env, &["mv", "/src-copy", "/docs"]);
    shape(&v, &[("from", Str), ("to", Str)]);
    assert_eq!(v["from"], "/src-copy");
    assert_eq!(v["to"], "/docs/src-copy");
    err_doc(&env, &["mv", "/nope", "/x"], 1, "not_found");

    let t = doc(&env, &["tree"]);
    check_tree(&t, true);
    assert_eq!(t["name"], "/");
    let t = doc(&env, &["tree", "-L", "1", "/docs"]);
    check_tree(&t, true);
    assert_eq!(t["name"], "/docs");
    let children = t["children"].as_array().unwrap();
    let sub = children.iter().find(|c| c["name"] == "src-copy").unwrap();
    assert_eq!(sub["type"], "dir");
    assert!(
        sub.get("children").is_none(),
        "a directory at the depth limit has no children: {sub}"
    );
    let t = doc(&env, &["tree", "/build/out"]);
    assert_eq!(t["children"], serde_json::json!([]), "an empty directory");
    let t = doc(&env, &["tree", "/src/main.rs"]);
    check_tree(&t, true);
    assert!(t.get("children").is_none(), "a file has no children: {t}");

    let r = doc(&env, &["rm", "-r", "/docs/src-copy", "/build"]);
    shape(&r, &[("removed", Arr)]);
    assert_eq!(
        r["removed"],
        serde_json::json!(["/docs/src-copy", "/build"])
    );
    let r = doc(&env, &["rm", "-f", "/nope"]);
    assert_eq!(r["removed"], serde_json::json!([]));
    err_doc(&env, &["rm", "/src"], 1, "is_a_directory");
    err_doc(&env, &["rm", "/nope"], 1, "not_found");
    err_doc(&env, &["rm", "-r", "/"], 1, "refused");
}

fn check_tree(node: &Value, top: bool) {
    shape(
        node,
        &[
            ("name", Str),
            ("type", Str),
            ("size", Num),
            ("children", Opt(&Arr)),
        ],
    );
    assert_type(&node["type"]);
    if top {
        assert!(node["name"].as_str().unwrap().starts_with('/'), "{node}");
    }
    if let Some(children) = node.get("children") {
        assert_eq!(node["type"], "dir", "only directories have children");
        for c in children.as_array().unwrap() {
            check_tree(c, false);
        }
    }
}

#[test]
fn ln_and_chmod() {
    let env = Env::new();
    doc(&env, &["write", "/notes.txt", "hi"]);
    let l = doc(&env, &["ln", "-s", "/notes.txt", "/link"]);
    shape(&l, &[("link", Str), ("target", Str), ("symbolic", Bool)]);
    assert_eq!(l["link"], "/link");
    assert_eq!(l["target"], "/notes.txt");
    assert_eq!(l["symbolic"], true);
    let s = doc(&env, &["stat", "/link"]);
    check_stat(&s);
    assert_eq!(s["type"], "symlink");
    assert_eq!(s["target"], "/notes.txt");

    let l = doc(&env, &["ln", "/notes.txt", "/hard"]);
    shape(&l, &[("link", Str), ("target", Str), ("symbolic", Bool)]);
    assert_eq!(l["symbolic"], false);
    assert_eq!(doc(&env, &["stat", "/notes.txt"])["nlink"], 2);
    err_doc(&env, &["ln", "/notes.txt", "/hard"], 1, "already_exists");
    err_doc(&env, &["ln", "/", "/rootlink"], 1, "refused");

    let c = doc(&env, &["chmod", "600", "/notes.txt", "/link"]);
    shape(&c, &[("changed", Arr)]);
    let changed = each(&c["changed"], &[("path", Str), ("mode", Str)]);
    assert_eq!(changed.len(), 2);
    assert_eq!(changed[0]["path"], "/notes.txt");
    assert_eq!(changed[0]["mode"], "0600");
    assert_eq!(changed[1]["path"], "/link");
    let c = doc(&env, &["chmod", "u+x,go-w", "/notes.txt"]);
    assert_eq!(c["changed"][0]["mode"], "0700");
    assert_mode(&c["changed"][0]["mode"]);
    err_doc(&env, &["chmod", "99x", "/notes.txt"], 1, "invalid_argument");

    doc(&env, &["ln", "-s", "/loop2", "/loop1"]);
    doc(&env, &["ln", "-s", "/loop1", "/loop2"]);
    err_doc(&env, &["cat", "/loop1"], 1, "symlink_loop");
}

// ---- host -------------------------------------------------------------------------------

#[test]
fn import_and_export() {
    let env = Env::new();
    let host = env.path("host");
    std::fs::create_dir_all(host.join("sub")).unwrap();
    std::fs::write(host.join("a.txt"), "one\n").unwrap();
    std::fs::write(host.join("sub/b.txt"), "two\n").unwrap();
    std::os::unix::fs::symlink("a.txt", host.join("l")).unwrap();
    std::fs::hard_link(host.join("a.txt"), host.join("a2.txt")).unwrap();

    let i = doc(&env, &["import", host.to_str().unwrap(), "/imported"]);
    shape(&i, &[("from", Str), ("to", Str), ("stats", Obj)]);
    shape(&i["stats"], HOST_STATS);
    assert_eq!(i["from"], host.to_str().unwrap());
    assert_eq!(i["to"], "/imported");
    let st = &i["stats"];
    assert_eq!(st["files"], 2);
    assert_eq!(st["dirs"], 1);
    assert_eq!(st["symlinks"], 1);
    assert_eq!(st["hardlinks"], 1);
    assert_eq!(st["bytes"], 8);
    assert!(
        st["skipped"]
            .as_array()
            .unwrap()
            .iter()
            .all(Value::is_string)
    );

    let out = env.path("out");
    let x = doc(&env, &["export", "/imported", out.to_str().unwrap()]);
    shape(&x, &[("from", Str), ("to", Str), ("stats", Obj)]);
    shape(&x["stats"], HOST_STATS);
    assert_eq!(x["from"], "/imported");
    assert_eq!(x["to"], out.to_str().unwrap());
    assert_eq!(x["stats"]["files"], 2);
    assert_eq!(x["stats"]["dirs"], 2, "export counts the top directory");

    let e = err_doc(
        &env,
        &["export", "/imported", out.to_str().unwrap()],
        1,
        "refused",
    );
    assert!(e["message"].as_str().unwrap().contains("--force"));
    let x = doc(
        &env,
        &["export", "/imported", out.to_str().unwrap(), "--force"],
    );
    shape(&x["stats"], HOST_STATS);
    let missing = env.path("no-such-host-dir");
    err_doc(&env, &["import", missing.to_str().unwrap()], 1, "host_io");
    err_doc(
        &env,
        &["import", host.join("a.txt").to_str().unwrap()],
        1,
        "not_a_directory",
    );
}

// ---- history ----------------------------------------------------------------------------

#[test]
fn checkpoints_save_list_restore_delete() {
    let env = Env::new();
    // Reads never create a vault: the first write does.
    env.ok(&["vault", "create", "default"]);
    let l = doc(&env, &["checkpoint", "list"]);
    shape(&l, &[("checkpoints", Arr), ("head", NullOr(&Str))]);
    assert!(l["head"].is_null());

    doc(&env, &["write", "/a", "one"]);
    let s = doc(&env, &["checkpoint", "save", "v1", "-m", "first"]);
    shape(&s, &[("checkpoint", Obj), ("changed", Bool)]);
    check_checkpoint(&s["checkpoint"]);
    assert_eq!(s["changed"], true);
    assert_eq!(s["checkpoint"]["name"], "v1");
    assert_eq!(s["checkpoint"]["message"], "first");
    assert_eq!(s["checkpoint"]["origin"], "cli");
    assert!(s["checkpoint"]["parent"].is_null());
    let s = doc(&env, &["snapshot", "save"]);
    check_checkpoint(&s["checkpoint"]);
    assert_eq!(s["changed"], false);
    assert!(s["checkpoint"]["message"].is_null());
    assert_eq!(s["checkpoint"]["parent"], "v1");
    let generated = s["checkpoint"]["name"].as_str().unwrap().to_string();
    assert!(generated.starts_with("cp-"), "{generated}");

    let l = doc(&env, &["checkpoint", "list"]);
    let cps = each(&l["checkpoints"], CHECKPOINT);
    for c in cps {
        check_checkpoint(c);
    }
    assert_eq!(cps.len(), 2);
    assert_eq!(l["head"], generated.as_str());

    // Restore with nothing unsaved.
    let r = doc(&env, &["checkpoint", "restore", "v1"]);
    shape(
        &r,
        &[
            ("restored", Obj),
            ("saved_unsaved_changes_as", NullOr(&Str)),
        ],
    );
    check_checkpoint(&r["restored"]);
    assert_eq!(r["restored"]["name"], "v1");
    assert!(r["saved_unsaved_changes_as"].is_null());
    // Restore with unsaved changes: they go to an automatic checkpoint.
    doc(&env, &["write", "/a", "unsaved"]);
    let r = doc(&env, &["checkpoint", "restore", "v1"]);
    let auto = r["saved_unsaved_changes_as"].as_str().unwrap().to_string();
    assert!(auto.starts_with("auto-before-restore-"), "{auto}");
    let l = doc(&env, &["checkpoint", "ls"]);
    let a = l["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == auto.as_str())
        .unwrap()
        .clone();
    check_checkpoint(&a);
    assert_eq!(a["origin"], "auto");
    assert!(a["message"].is_string());

    let d = doc(&env, &["checkpoint", "delete", &generated]);
    shape(&d, &[("deleted", Obj)]);
    check_checkpoint(&d["deleted"]);
    assert_eq!(d["deleted"]["name"], generated.as_str());
    doc(&env, &["checkpoint", "rm", &auto]);

    err_doc(&env, &["checkpoint", "save", "v1"], 1, "checkpoint_exists");
    err_doc(
        &env,
        &["checkpoint", "restore", "nope"],
        1,
        "no_such_checkpoint",
    );
    err_doc(
        &env,
        &["checkpoint", "delete", "nope"],
        1,
        "no_such_checkpoint",
    );
    err_doc(&env, &["checkpoint", "save", "a/b"], 1, "invalid_argument");
}

#[test]
fn diff_with_and_without_patch() {
    let env = Env::new();
    doc(&env, &["write", "/a", "x\n"]);
    let d = doc(&env, &["diff"]);
    let changes = check_diff(&d);
    assert_eq!(d["from"], "(empty)");
    assert_eq!(d["to"], "live");
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0]["kind"], "added");
    assert!(changes[0]["type_before"].is_null());
    assert!(changes[0]["mode_before"].is_null());
    assert!(changes[0]["size_before"].is_null());

    doc(&env, &["write", "-p", "/dir/keep.txt", "keep\n"]);
    doc(&env, &["write", "/gone", "bye\n"]);
    doc(&env, &["ln", "-s", "/a", "/l"]);
    doc(&env, &["checkpoint", "save", "c1"]);
    doc(&env, &["write", "/a", "y\n"]);
    doc(&env, &["rm", "/gone"]);
    doc(&env, &["write", "/new", "new\n"]);
    doc(&env, &["chmod", "700", "/dir"]);
    doc(&env, &["rm", "/l"]);
    doc(&env, &["mkdir", "/l"]);
    doc(&env, &["checkpoint", "save", "c2"]);

    let d = doc(&env, &["diff", "--patch"]);
    check_diff(&d);
    assert_eq!(d["from"], "c2");
    assert_eq!(d["changes"], serde_json::json!([]));

    let d = doc(&env, &["diff", "c1", "--patch"]);
    let changes = check_diff(&d);
    assert_eq!(d["from"], "c1");
    assert_eq!(d["to"], "live");
    let kinds: Vec<(&str, &str)> = changes
        .iter()
        .map(|c| (c["kind"].as_str().unwrap(), c["path"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("modified", "/a"),
            ("mode_changed", "/dir"),
            ("deleted", "/gone"),
            ("type_changed", "/l"),
            ("added", "/new"),
        ]
    );
    let a = &changes[0];
    assert!(a["patch"].as_str().unwrap().contains("-x\n+y\n"), "{a}");
    let dir = &changes[1];
    assert!(dir["size_before"].is_null() && dir["size_after"].is_null());
    assert_eq!(dir["mode_after"], "0700");
    assert!(dir.get("patch").is_none(), "no patch for a directory");
    let gone = &changes[2];
    assert!(gone["type_after"].is_null() && gone["mode_after"].is_null());
    assert!(gone["patch"].as_str().unwrap().contains("+++ /dev/null"));

    // Without --patch there is no patch field; `checkpoint diff` is the same document.
    let d = doc(&env, &["checkpoint", "diff", "c1", "c2"]);
    let changes = check_diff(&d);
    assert_eq!(d["from"], "c1");
    assert_eq!(d["to"], "c2");
    assert!(changes.iter().all(|c| c.get("patch").is_none()));

    err_doc(&env, &["diff", "nope"], 1, "no_such_checkpoint");
    err_doc(
        &env,
        &["checkpoint", "diff", "c1", "nope"],
        1,
        "no_such_checkpoint",
    );
}

#[test]
fn log_and_restore() {
    let env = Env::new();
    doc(&env, &["write", "/f", "one"]);
    doc(&env, &["checkpoint", "save", "c1"]);
    doc(&env, &["rm", "/f"]);
    doc(&env, &["checkpoint", "save", "c2"]);
    doc(&env, &["write", "/f", "two"]);

    let l = doc(&env, &["log", "/f"]);
    shape(&l, &[("path", Str), ("versions", Arr)]);
    assert_eq!(l["path"], "/f");
    let versions = each(
        &l["versions"],
        &[
            ("at", Str),
            ("created_at", NullOr(&Str)),
            ("exists", Bool),
            ("type", NullOr(&Str)),
            ("size", NullOr(&Num)),
            ("mode", NullOr(&Str)),
            ("content_hash", NullOr(&Str)),
            ("changed", Bool),
        ],
    );
    let at: Vec<&str> = versions.iter().map(|v| v["at"].as_str().unwrap()).collect();
    assert_eq!(at, ["c1", "c2", "live"]);
    assert_time(&versions[0]["created_at"]);
    assert_hash(&versions[0]["content_hash"]);
    assert_mode(&versions[0]["mode"]);
    assert_eq!(versions[0]["type"], "file");
    let absent = &versions[1];
    assert_eq!(absent["exists"], false);
    for k in ["type", "size", "mode", "content_hash"] {
        assert!(absent[k].is_null(), "{k} of a missing version: {absent}");
    }
    assert!(versions[2]["created_at"].is_null(), "live has no time");
    assert!(versions.iter().all(|v| v["changed"] == true));

    let r = doc(&env, &["restore", "/f", "--from", "c1"]);
    shape(&r, &[("path", Str), ("from", Str), ("changed", Bool)]);
    assert_eq!(r["path"], "/f");
    assert_eq!(r["from"], "c1");
    assert_eq!(r["changed"], true);
    assert_eq!(doc(&env, &["cat", "/f"])["content"], "one");
    let c = doc(&env, &["cat", "/f", "--at", "c1"]);
    assert_eq!(c["content"], "one");
    assert_eq!(c["encoding"], "utf-8");
    let r = doc(&env, &["restore", "/never", "--from", "c1"]);
    assert_eq!(r["changed"], false);

    err_doc(&env, &["log", "/never"], 1, "not_found");
    err_doc(&env, &["cat", "/f", "--at", "c2"], 1, "not_found");
    err_doc(
        &env,
        &["restore", "/f", "--from", "nope"],
        1,
        "no_such_checkpoint",
    );
}
