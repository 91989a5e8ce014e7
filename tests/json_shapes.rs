//! The JSON documents of docs/json.md, checked against the real binary: every documented
//! field is present with its documented type, so renaming or removing a field fails here.
//! Every run also checks that stdout holds exactly one JSON document and nothing else.

mod common;
use common::*;
#[path = "common/documents.rs"]
mod documents;

use serde_json::Value;

/// The documented type of a field.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Str,
    /// An integer (never fractional).
    Num,
    Bool,
    Arr,
    Obj,
    /// Any JSON value (audit `detail`).
    Any,
    /// Always present; `null` or the inner kind.
    NullOr(&'static Kind),
    /// Absent, or present with the inner kind.
    Opt(&'static Kind),
}
use Kind::*;

fn is_kind(v: &Value, k: Kind) -> bool {
    match k {
        Str => v.is_string(),
        Num => v.is_i64() || v.is_u64(),
        Bool => v.is_boolean(),
        Arr => v.is_array(),
        Obj => v.is_object(),
        Any => true,
        NullOr(inner) => v.is_null() || is_kind(v, *inner),
        Opt(inner) => is_kind(v, *inner),
    }
}

/// Asserts `v` is an object holding every field of `fields` with its documented kind.
fn shape(v: &Value, fields: &[(&str, Kind)]) {
    let obj = v
        .as_object()
        .unwrap_or_else(|| panic!("expected an object, got {v}"));
    for (name, kind) in fields {
        match obj.get(*name) {
            None => assert!(
                matches!(kind, Opt(_)),
                "field {name:?} is missing from {v:#}"
            ),
            Some(f) => assert!(
                is_kind(f, *kind),
                "field {name:?} should be {kind:?}, got {f} in {v:#}"
            ),
        }
    }
}

/// `shape` on every element of the array `v`; returns the elements.
fn each<'a>(v: &'a Value, fields: &[(&str, Kind)]) -> &'a Vec<Value> {
    let arr = v
        .as_array()
        .unwrap_or_else(|| panic!("expected an array, got {v}"));
    for e in arr {
        shape(e, fields);
    }
    arr
}

/// Parses stdout as exactly one JSON document, with nothing else around it but whitespace.
fn one_document(stdout: &str) -> Value {
    let mut docs = serde_json::Deserializer::from_str(stdout).into_iter::<Value>();
    let first = docs
        .next()
        .unwrap_or_else(|| panic!("stdout holds no JSON document: {stdout:?}"))
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {stdout:?}"));
    assert!(
        docs.next().is_none(),
        "stdout holds more than one document: {stdout:?}"
    );
    // The strict parse rejects any trailing text, not only further documents.
    let strict: Value = serde_json::from_str(stdout)
        .unwrap_or_else(|e| panic!("stdout has text besides the document ({e}): {stdout:?}"));
    assert_eq!(strict, first);
    assert!(stdout.ends_with('\n'), "no final newline: {stdout:?}");
    assert!(first.is_object(), "the document is not an object: {first}");
    first
}

/// Runs `avfs --json ARGS`, insists on exit 0 and returns the one document.
fn doc(env: &Env, args: &[&str]) -> Value {
    let mut a = vec!["--json"];
    a.extend_from_slice(args);
    let r = env.run(&a);
    assert_eq!(
        r.code, 0,
        "avfs {a:?} failed\nstdout: {}\nstderr: {}",
        r.stdout, r.stderr
    );
    let v = one_document(&r.stdout);
    assert!(v.get("error").is_none(), "success carries an error: {v}");
    // The MCP tools' documents also match the schema generated from their type.
    documents::check(args, &v);
    v
}

/// Runs `avfs --json ARGS`, insists on exit `code` and an error document; returns `error`.
fn err_doc(env: &Env, args: &[&str], code: i32, kind: &str) -> Value {
    let mut a = vec!["--json"];
    a.extend_from_slice(args);
    let r = env.run(&a);
    assert_eq!(
        r.code, code,
        "avfs {a:?}: expected exit {code}\nstdout: {}\nstderr: {}",
        r.stdout, r.stderr
    );
    let v = one_document(&r.stdout);
    shape(&v, &[("error", Obj)]);
    let e = &v["error"];
    shape(e, &[("kind", Str), ("message", Str), ("exit_code", Num)]);
    assert_eq!(e["kind"], kind, "{e}");
    assert_eq!(e["exit_code"], code, "{e}");
    assert!(!e["message"].as_str().unwrap().is_empty());
    e.clone()
}

// ---- value formats of docs/json.md "Conventions" ----------------------------------------

fn assert_mode(v: &Value) {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("mode {v} is not a string"));
    assert!(
        s.len() == 4 && s.chars().all(|c| c.is_digit(8)),
        "mode {s:?} is not 4 octal digits"
    );
}

fn assert_hash(v: &Value) {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("hash {v} is not a string"));
    assert!(
        s.len() == 64 && s.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')),
        "hash {s:?} is not 64 lowercase hex digits"
    );
}

fn assert_time(v: &Value) {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("time {v} is not a string"));
    let b = s.as_bytes();
    assert!(
        b.len() == 24 && b[4] == b'-' && b[10] == b'T' && b[19] == b'.' && s.ends_with('Z'),
        "time {s:?} is not RFC 3339 UTC with milliseconds"
    );
}

const TYPES: &[&str] = &[
    "file",
    "dir",
    "symlink",
    "fifo",
    "socket",
    "char_device",
    "block_device",
];

fn assert_type(v: &Value) {
    assert!(
        v.as_str().is_some_and(|t| TYPES.contains(&t)),
        "unknown file type {v}"
    );
}

// ---- shared objects ---------------------------------------------------------------------

const VAULT_REF: &[(&str, Kind)] = &[("name", Str), ("path", Str), ("workspace", Str)];

const VAULT: &[(&str, Kind)] = &[
    ("name", Str),
    ("path", Str),
    ("workspace", Str),
    ("current", Bool),
    ("parent", NullOr(&Str)),
    ("forked_from_checkpoint", NullOr(&Str)),
    ("created_at", NullOr(&Str)),
    ("error", Opt(&Str)),
];

const STAT: &[(&str, Kind)] = &[
    ("path", Str),
    ("name", Str),
    ("type", Str),
    ("mode", Str),
    ("size", Num),
    ("nlink", Num),
    ("uid", Num),
    ("gid", Num),
    ("mtime", Str),
    ("mtime_ns", Num),
    ("ctime_ns", Num),
    ("ino", Num),
    ("target", Opt(&Str)),
    ("content_hash", Opt(&Str)),
];

const CHECKPOINT: &[(&str, Kind)] = &[
    ("name", Str),
    ("workspace", Str),
    ("root", Str),
    ("parent", NullOr(&Str)),
    ("created_at", Str),
    ("created_at_ns", Num),
    ("origin", Str),
    ("message", NullOr(&Str)),
];

const CHANGE: &[(&str, Kind)] = &[
    ("path", Str),
    ("kind", Str),
    ("type_before", NullOr(&Str)),
    ("type_after", NullOr(&Str)),
    ("size_before", NullOr(&Num)),
    ("size_after", NullOr(&Num)),
    ("mode_before", NullOr(&Str)),
    ("mode_after", NullOr(&Str)),
    ("patch", Opt(&Str)),
];

const SUMMARY: &[(&str, Kind)] = &[
    ("added", Num),
    ("modified", Num),
    ("deleted", Num),
    ("type_changed", Num),
    ("mode_changed", Num),
];

const HOST_STATS: &[(&str, Kind)] = &[
    ("files", Num),
    ("dirs", Num),
    ("symlinks", Num),
    ("hardlinks", Num),
    ("bytes", Num),
    ("skipped", Arr),
    ("setuid_dropped", Num),
];

const VERIFY_CHECKED: &[(&str, Kind)] = &[
    ("chunks", Num),
    ("chunk_bytes", Num),
    ("contents", Num),
    ("trees", Num),
    ("tree_entries", Num),
    ("workspaces", Num),
    ("checkpoints", Num),
    ("inodes", Num),
    ("dentries", Num),
    ("audit_rows", Num),
];

fn check_stat(s: &Value) {
    shape(s, STAT);
    assert_type(&s["type"]);
    assert_mode(&s["mode"]);
    assert_time(&s["mtime"]);
    match s["type"].as_str().unwrap() {
        "file" => {
            assert_hash(&s["content_hash"]);
            assert!(s.get("target").is_none(), "{s}");
        }
        "symlink" => {
            assert!(s["target"].is_string(), "{s}");
            assert!(s.get("content_hash").is_none(), "{s}");
        }
        _ => {
            assert!(s.get("target").is_none(), "{s}");
            assert!(s.get("content_hash").is_none(), "{s}");
        }
    }
}

fn check_checkpoint(c: &Value) {
    shape(c, CHECKPOINT);
    assert_hash(&c["root"]);
    assert_time(&c["created_at"]);
    assert!(
        ["cli", "auto", "fork"].contains(&c["origin"].as_str().unwrap()),
        "{c}"
    );
}

fn check_vault_verify(v: &Value) {
    shape(v, &[("vault", Str), ("path", Str), ("report", Obj)]);
    let r = &v["report"];
    shape(r, &[("ok", Bool), ("checked", Obj), ("problems", Arr)]);
    shape(&r["checked"], VERIFY_CHECKED);
    each(
        &r["problems"],
        &[("kind", Str), ("object", Str), ("message", Str)],
    );
}

fn check_audit_verify(v: &Value) {
    shape(v, &[("rows", Num), ("ok", Bool), ("problems", Arr)]);
    each(&v["problems"], &[("id", Num), ("problem", Str)]);
}

fn check_diff(d: &Value) -> &Vec<Value> {
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
    ] {
        let n = d["summary"][k].as_u64().unwrap() as usize;
        assert_eq!(
            n,
            changes.iter().filter(|c| c["kind"] == k).count(),
            "summary.{k} disagrees with changes: {d:#}"
        );
        counted += n;
    }
    assert_eq!(counted, changes.len(), "a change of unknown kind: {d:#}");
    for c in changes {
        for side in ["before", "after"] {
            if !c[format!("type_{side}")].is_null() {
                assert_type(&c[format!("type_{side}")]);
            }
            if !c[format!("mode_{side}")].is_null() {
                assert_mode(&c[format!("mode_{side}")]);
            }
        }
    }
    changes
}

fn sqlite(env: &Env, vault: &str) -> rusqlite::Connection {
    rusqlite::Connection::open(env.home().join(format!("vaults/{vault}.avfs"))).unwrap()
}

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
    let v = doc(&env, &["vault", "verify", "task-copy"]);
    assert_eq!(v["report"]["ok"], true);

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
    std::fs::write(&f, "allow read_only ls\ndeny read_only cat /etc/passwd\n").unwrap();
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
        &[("name", Str), ("url", Str), ("refs", Arr)],
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
        &[("name", Str), ("url", Str), ("refs", Arr)],
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
    let r = env.run(&a);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let m = one_document(&r.stdout);
    documents::assert_matches("vault-merge", &m);
    shape(
        &m,
        &[
            ("clean", Bool),
            ("pending", Bool),
            ("checkpoint", NullOr(&Obj)),
            ("before", NullOr(&Str)),
            ("conflicts", Arr),
        ],
    );
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
    a.push("--conflicts=markers");
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
