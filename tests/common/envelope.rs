//! Checks `avfs exec --json` output against the shipped ExecutionEnvelope JSON Schema.
#![allow(dead_code)]

use std::path::Path;
use std::sync::OnceLock;

use serde_json::Value;

pub fn validator() -> &'static jsonschema::Validator {
    static V: OnceLock<jsonschema::Validator> = OnceLock::new();
    V.get_or_init(|| {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas/execution-envelope.schema.json");
        let schema: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|e| panic!("{}: not JSON: {e}", path.display()));
        jsonschema::validator_for(&schema).unwrap_or_else(|e| panic!("invalid schema: {e}"))
    })
}

/// Panics with every violation if `v` is not a valid ExecutionEnvelope.
pub fn assert_envelope(v: &Value) {
    let errors: Vec<String> = validator()
        .iter_errors(v)
        .map(|e| format!("  at {}: {e}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "envelope does not match the schema:\n{}\n{}",
        errors.join("\n"),
        serde_json::to_string_pretty(v).unwrap()
    );
}
