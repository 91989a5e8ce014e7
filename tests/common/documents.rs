//! Checks `avfs --json` documents against their generated JSON Schema
//! (`schemas/NAME.schema.json`, see `agentvfs::schema`): which schema a command line's
//! document has, and a validator per schema.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use serde_json::Value;

/// The schema of the document `avfs --json ARGS` prints on success, for the commands
/// that have one (the MCP tools' commands); `None` for the others.
pub fn schema_name(args: &[&str]) -> Option<&'static str> {
    let mut words = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match *a {
            "--vault" => {
                it.next();
            }
            "--" => break,
            _ if a.starts_with('-') => {}
            _ => words.push(*a),
        }
    }
    let has = |flag: &str| args.contains(&flag);
    Some(match (words.first()?, words.get(1).copied()) {
        (&"checkpoint", Some("save")) => "checkpoint-save",
        (&"checkpoint", Some("list" | "ls")) if !has("--graph") => "checkpoint-list",
        (&"checkpoint", Some("restore")) => "checkpoint-restore",
        (&"checkpoint", Some("diff")) | (&"diff", _) => "diff",
        (&"vault", Some("fork")) => "vault-fork",
        (&"vault", Some("merge")) if !has("--continue") && !has("--abort") => "vault-merge",
        (&"approvals", _) => "approvals",
        (&"approve" | &"deny", _) => "approve",
        (&"audit", None) => "audit",
        (&"audit", Some(w)) if w != "verify" && w != "anchor" => "audit",
        (&"cat", _) => "cat",
        (&"write", _) => "write",
        (&"ls", _) => "ls",
        (&"stat", _) => "stat",
        (&"log", _) => "log",
        (&"grep", _) => "grep",
        (&"find", _) => "find",
        (&"search", _) => "search",
        (&"tag" | &"untag", _) => "tag",
        (&"push", _) => "push",
        _ => return None,
    })
}

fn validator(name: &str) -> &'static jsonschema::Validator {
    static ALL: OnceLock<Mutex<HashMap<String, &'static jsonschema::Validator>>> = OnceLock::new();
    let mut all = ALL.get_or_init(Default::default).lock().unwrap();
    all.entry(name.to_string()).or_insert_with(|| {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("schemas/{name}.schema.json"));
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let schema: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{}: not JSON: {e}", path.display()));
        Box::leak(Box::new(jsonschema::validator_for(&schema).unwrap_or_else(
            |e| panic!("{}: invalid schema: {e}", path.display()),
        )))
    })
}

/// Panics with every violation if `v` does not match the schema named `name`.
pub fn assert_matches(name: &str, v: &Value) {
    let errors: Vec<String> = validator(name)
        .iter_errors(v)
        .map(|e| format!("  at {}: {e}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "document does not match schemas/{name}.schema.json:\n{}\n{}",
        errors.join("\n"),
        serde_json::to_string_pretty(v).unwrap()
    );
}

/// Validates the document `avfs --json ARGS` printed against its command's schema, if it
/// has one; returns the schema's name.
pub fn check(args: &[&str], v: &Value) -> Option<&'static str> {
    let name = schema_name(args)?;
    assert_matches(name, v);
    Some(name)
}
