//! What the JSON shape tests share: the documented kinds of a field, the checks of one
//! document (exactly one on stdout, each field with its kind, validated against its
//! schema), the value formats of docs/json.md "Conventions" and the shared objects.
//!
//! Include with `mod common; #[path = "common/documents.rs"] mod documents;
//! #[path = "common/shapes.rs"] mod shapes;`.
#![allow(dead_code)]

use crate::common::Env;
use serde_json::Value;

/// The documented type of a field.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
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
pub use Kind::*;

pub fn is_kind(v: &Value, k: Kind) -> bool {
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
pub fn shape(v: &Value, fields: &[(&str, Kind)]) {
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
pub fn each<'a>(v: &'a Value, fields: &[(&str, Kind)]) -> &'a Vec<Value> {
    let arr = v
        .as_array()
        .unwrap_or_else(|| panic!("expected an array, got {v}"));
    for e in arr {
        shape(e, fields);
    }
    arr
}

/// Parses stdout as exactly one JSON document, with nothing else around it but whitespace.
pub fn one_document(stdout: &str) -> Value {
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
pub fn doc(env: &Env, args: &[&str]) -> Value {
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
    crate::documents::check(args, &v);
    v
}

/// Runs `avfs --json ARGS`, insists on exit `code` and an error document; returns `error`.
pub fn err_doc(env: &Env, args: &[&str], code: i32, kind: &str) -> Value {
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

pub fn assert_mode(v: &Value) {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("mode {v} is not a string"));
    assert!(
        s.len() == 4 && s.chars().all(|c| c.is_digit(8)),
        "mode {s:?} is not 4 octal digits"
    );
}

pub fn assert_hash(v: &Value) {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("hash {v} is not a string"));
    assert!(
        s.len() == 64 && s.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')),
        "hash {s:?} is not 64 lowercase hex digits"
    );
}

pub fn assert_time(v: &Value) {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("time {v} is not a string"));
    let b = s.as_bytes();
    assert!(
        b.len() == 24 && b[4] == b'-' && b[10] == b'T' && b[19] == b'.' && s.ends_with('Z'),
        "time {s:?} is not RFC 3339 UTC with milliseconds"
    );
}

pub const TYPES: &[&str] = &[
    "file",
    "dir",
    "symlink",
    "fifo",
    "socket",
    "char_device",
    "block_device",
];

pub fn assert_type(v: &Value) {
    assert!(
        v.as_str().is_some_and(|t| TYPES.contains(&t)),
        "unknown file type {v}"
    );
}

// ---- shared objects ---------------------------------------------------------------------

pub const VAULT_REF: &[(&str, Kind)] = &[("name", Str), ("path", Str), ("workspace", Str)];

pub const VAULT: &[(&str, Kind)] = &[
    ("name", Str),
    ("path", Str),
    ("workspace", Str),
    ("current", Bool),
    ("parent", NullOr(&Str)),
    ("forked_from_checkpoint", NullOr(&Str)),
    ("created_at", NullOr(&Str)),
    ("error", Opt(&Str)),
];

pub const STAT: &[(&str, Kind)] = &[
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

pub const CHECKPOINT: &[(&str, Kind)] = &[
    ("name", Str),
    ("workspace", Str),
    ("root", Str),
    ("parent", NullOr(&Str)),
    ("created_at", Str),
    ("created_at_ns", Num),
    ("origin", Str),
    ("message", NullOr(&Str)),
];

pub const CHANGE: &[(&str, Kind)] = &[
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

pub const SUMMARY: &[(&str, Kind)] = &[
    ("added", Num),
    ("modified", Num),
    ("deleted", Num),
    ("type_changed", Num),
    ("mode_changed", Num),
];

pub const HOST_STATS: &[(&str, Kind)] = &[
    ("files", Num),
    ("dirs", Num),
    ("symlinks", Num),
    ("hardlinks", Num),
    ("bytes", Num),
    ("skipped", Arr),
    ("setuid_dropped", Num),
];

pub const VERIFY_CHECKED: &[(&str, Kind)] = &[
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

pub fn check_stat(s: &Value) {
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

pub fn check_checkpoint(c: &Value) {
    shape(c, CHECKPOINT);
    assert_hash(&c["root"]);
    assert_time(&c["created_at"]);
    assert!(
        ["cli", "auto", "fork"].contains(&c["origin"].as_str().unwrap()),
        "{c}"
    );
}

pub fn check_vault_verify(v: &Value) {
    shape(v, &[("vault", Str), ("path", Str), ("report", Obj)]);
    let r = &v["report"];
    shape(
        r,
        &[
            ("ok", Bool),
            ("page_checksums", Bool),
            ("checked", Obj),
            ("problems", Arr),
        ],
    );
    shape(&r["checked"], VERIFY_CHECKED);
    each(
        &r["problems"],
        &[("kind", Str), ("object", Str), ("message", Str)],
    );
}

pub fn check_audit_verify(v: &Value) {
    shape(v, &[("rows", Num), ("ok", Bool), ("problems", Arr)]);
    each(&v["problems"], &[("id", Num), ("problem", Str)]);
}

pub fn check_diff(d: &Value) -> &Vec<Value> {
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

pub fn sqlite(env: &Env, vault: &str) -> rusqlite::Connection {
    rusqlite::Connection::open(env.home().join(format!("vaults/{vault}.avfs"))).unwrap()
}
