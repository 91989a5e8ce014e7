//! What a tool's result looks like: the `outputSchema` each tool declares and the compact
//! form of the exec envelope the server returns.
//!
//! The exec tool's schema is derived from `schemas/execution-envelope.schema.json`, the
//! same file the CLI's envelope is tested against, so the two cannot drift apart: the only
//! differences are the ones [`compact_envelope`] makes, applied to the schema by
//! [`exec_schema`]. The other tools return the documents of `avfs --json` (docs/json.md):
//! their schema is the one `crate::schema` derives from the document's type, the same
//! that `schemas/NAME.schema.json` holds.

use std::sync::{Arc, OnceLock};

use rmcp::model::JsonObject;
use serde_json::{Value, json};

const ENVELOPE_SCHEMA: &str = include_str!("../../schemas/execution-envelope.schema.json");

/// Fields of `result` left out at their default (`false`, `null`, `[]`): what did not
/// happen. `exit_code`, `timed_out`, the output and its sizes always stay.
const RESULT_DEFAULTS: [&str; 6] = [
    "signal",
    "stdout_truncated",
    "stderr_truncated",
    "lingering_processes_killed",
    "escaped_processes",
    "quota_refused",
];

/// Drops what a model does not need to read from an exec envelope, without losing what
/// happened: the options that are at their default (a model knows what it did not ask
/// for), `mountpoint` when it repeats `workspace_path` (kept in the CLI's envelope only
/// for readers of earlier envelopes), `rollback` when none was asked for,
/// `changes_page` when the list and its patches are whole, `service_changes` when null,
/// a lone `decision.findings` entry that repeats the decision, the sandbox's package
/// caches and its limits when all of them held, and the [`RESULT_DEFAULTS`].
pub(super) fn compact_envelope(doc: &mut Value) {
    if let Some(result) = doc.get_mut("result").and_then(Value::as_object_mut) {
        result.retain(|k, v| !(RESULT_DEFAULTS.contains(&k.as_str()) && is_default(v)));
    }
    if let Some(decision) = doc.get_mut("decision").and_then(Value::as_object_mut)
        && lone_finding_repeats(decision)
    {
        decision.remove("findings");
    }
    if doc.pointer("/rollback/requested") == Some(&Value::Bool(false))
        && let Some(obj) = doc.as_object_mut()
    {
        obj.remove("rollback");
    }
    if let Some(req) = doc.get_mut("request").and_then(Value::as_object_mut)
        && let Some(opts) = req.get_mut("options").and_then(Value::as_object_mut)
    {
        opts.retain(|_, v| !is_default(v));
        if opts.is_empty() {
            req.remove("options");
        }
    }
    if let Some(sandbox) = doc.get_mut("sandbox").and_then(Value::as_object_mut) {
        // The package caches are the same list on every run, and limits that all held are
        // the documented ones: `avfs exec --json` has both.
        sandbox.remove("writable_caches");
        if sandbox
            .get("limits")
            .and_then(|l| l.get("not_enforced"))
            .and_then(Value::as_array)
            .is_some_and(Vec::is_empty)
        {
            sandbox.remove("limits");
        }
    }
    // No service wrote anything since the last run: nothing to say.
    if doc.get("service_changes") == Some(&Value::Null)
        && let Some(obj) = doc.as_object_mut()
    {
        obj.remove("service_changes");
    }
    if let Some(obj) = doc.as_object_mut()
        && obj.get("mountpoint").is_some()
        && obj.get("mountpoint") == obj.get("workspace_path")
    {
        obj.remove("mountpoint");
    }
    if doc.pointer("/changes_page/truncated") == Some(&Value::Bool(false))
        && doc.pointer("/changes_page/patches_truncated") == Some(&json!(0))
        && let Some(obj) = doc.as_object_mut()
    {
        // Everything is listed whole: the page says nothing `changes` does not.
        obj.remove("changes_page");
    }
}

/// One finding, saying what the decision says (its program is the command's).
fn lone_finding_repeats(decision: &serde_json::Map<String, Value>) -> bool {
    let Some([f]) = decision
        .get("findings")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
    else {
        return false;
    };
    let same = |fk: &str, dk: &str| f.get(fk).is_some() && f.get(fk) == decision.get(dk);
    let category_listed = decision
        .get("categories")
        .and_then(Value::as_array)
        .is_some_and(|cs| f.get("category").is_some_and(|c| cs.contains(c)));
    same("action", "action")
        && same("rule", "matched_rule")
        && same("reason", "reason")
        && category_listed
}

fn is_default(v: &Value) -> bool {
    match v {
        Value::Null | Value::Bool(false) => true,
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// The exec tool's output schema: the envelope schema, loosened exactly where
/// [`compact_envelope`] leaves things out.
pub(super) fn exec_schema() -> Arc<JsonObject> {
    static SCHEMA: OnceLock<Arc<JsonObject>> = OnceLock::new();
    SCHEMA
        .get_or_init(|| {
            // The envelope keeps its title (a client can match it to the published
            // schema); the other documents' titles are only bytes in `tools/list`.
            let full = full_exec_schema();
            let mut s = fields_only(&full);
            if let Some(t) = full.get("title") {
                s.insert("title".into(), t.clone());
            }
            Arc::new(s)
        })
        .clone()
}

/// The envelope's schema as the compact envelope follows it (tested; what
/// `exec_schema` declares the top level of).
fn full_exec_schema() -> Value {
    let mut s: Value = serde_json::from_str(ENVELOPE_SCHEMA).expect("the envelope schema is JSON");
    loosen(&mut s);
    s
}

/// The top level of a document's schema: each field and its JSON type (`{}` for a field
/// whose schema is a reference or a choice), without descriptions or nested definitions,
/// which `schemas/NAME.schema.json` and docs/json.md hold (the server's instructions say
/// so once, for every tool). Whole schemas made `tools/list`
/// 70 KB (exec's alone 19.5 KB), more than a model should read before its first call;
/// results still follow the whole schema (tests/mcp checks them against the files).
fn fields_only(full: &Value) -> JsonObject {
    let mut out = JsonObject::new();
    out.insert("type".into(), json!("object"));
    let props: JsonObject = full
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| {
            let ty = v
                .get("type")
                .map(|t| json!({"type": t}))
                .unwrap_or(json!({}));
            (k.clone(), ty)
        })
        .collect();
    out.insert("properties".into(), Value::Object(props));
    out
}

fn loosen(s: &mut Value) {
    // The `$id` is a URL: a client could try to fetch what it names. Every `$ref` in the
    // file is local (`#/$defs/...`), so the document resolves without it.
    if let Some(o) = s.as_object_mut() {
        o.remove("$id");
    }
    drop_required(s.pointer_mut("/required"), "mountpoint");
    drop_required(s.pointer_mut("/required"), "rollback");
    drop_required(s.pointer_mut("/required"), "changes_page");
    drop_required(s.pointer_mut("/required"), "service_changes");
    drop_required(s.pointer_mut("/$defs/decision/required"), "findings");
    for name in RESULT_DEFAULTS {
        drop_required(s.pointer_mut("/$defs/result/required"), name);
    }
    drop_required(s.pointer_mut("/$defs/request/required"), "options");
    if let Some(opts) = s
        .pointer_mut("/$defs/options")
        .and_then(Value::as_object_mut)
    {
        opts.insert("required".into(), json!([]));
        // "not both --sandbox and --no-sandbox" must still hold when both are left out:
        // only a document that has both set to true is refused.
        if let Some(not) = opts.get_mut("not").and_then(Value::as_object_mut) {
            not.insert("required".into(), json!(["sandbox", "no_sandbox"]));
        }
    }
}

fn drop_required(list: Option<&mut Value>, name: &str) {
    if let Some(Value::Array(a)) = list {
        a.retain(|v| v != name);
    }
}

/// The output schema of a tool that returns the document of `avfs --json COMMAND`: the
/// schema generated from the document's type, exactly as in `schemas/NAME.schema.json`.
pub(super) fn doc_schema(name: &str) -> Arc<JsonObject> {
    let schema = crate::schema::named(name)
        .unwrap_or_else(|| panic!("no document schema named {name} in schema::all()"));
    Arc::new(fields_only(&schema.to_value()))
}

/// `{"output": TEXT}`: what `service logs --json` prints.
pub(super) fn text_schema() -> Arc<JsonObject> {
    let v = json!({"type": "object", "properties": {"output": {"type": "string"}}});
    Arc::new(v.as_object().cloned().unwrap_or_default())
}

/// Input schemas without what a model reads and learns nothing from: the `$schema` line
/// schemars puts in each (the MCP spec makes 2020-12 the default), `format` (schemars'
/// `uint64`, `double`: `integer` with `minimum: 0` and `number` already say it, and
/// `badargs` checks those), and a `default` of `false` or `[]` (what leaving out an
/// optional flag or list means anyway).
pub(super) fn trim_input_schemas<S>(
    router: &mut rmcp::handler::server::router::tool::ToolRouter<S>,
) {
    for route in router.map.values_mut() {
        let mut s = (*route.attr.input_schema).clone();
        s.remove("$schema");
        for v in s.values_mut() {
            drop_noise(v);
        }
        route.attr.input_schema = Arc::new(s);
    }
}

fn drop_noise(v: &mut Value) {
    match v {
        Value::Object(o) => {
            if o.get("format").is_some_and(Value::is_string) {
                o.remove("format");
            }
            let empty = |d: &Value| *d == Value::Bool(false) || *d == json!([]);
            if o.get("default").is_some_and(empty) {
                o.remove("default");
            }
            // An optional argument is one a call leaves out; `null` for it means the same
            // (`badargs` lets it through), so `["integer", "null"]` says no more than
            // `"integer"`, and an optional enum needs no `anyOf` with `null`.
            if let Some(Value::Array(ts)) = o.get("type")
                && ts.len() == 2
                && ts.iter().any(|t| t == "null")
                && let Some(t) = ts.iter().find(|t| *t != "null").cloned()
            {
                o.insert("type".into(), t);
            }
            if let Some(Value::Array(alts)) = o.get("anyOf")
                && alts.len() == 2
                && alts.iter().any(|a| *a == json!({"type": "null"}))
                && let Some(Value::Object(other)) = alts
                    .iter()
                    .find(|a| **a != json!({"type": "null"}))
                    .cloned()
            {
                o.remove("anyOf");
                o.extend(other);
            }
            for x in o.values_mut() {
                drop_noise(x);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(drop_noise),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compacting_drops_default_options_and_the_repeated_mountpoint() {
        let mut doc = json!({
            "request": {"cwd": "/", "options": {"timeout_secs": null, "env": [], "fork": "f",
                        "checkpoint": false, "ephemeral": true}},
            "mountpoint": "/w", "workspace_path": "/w",
        });
        compact_envelope(&mut doc);
        assert_eq!(
            doc["request"]["options"],
            json!({"fork": "f", "ephemeral": true})
        );
        assert!(doc.get("mountpoint").is_none());
        assert_eq!(doc["workspace_path"], "/w");

        let mut plain = json!({"request": {"options": {"keep": false}}, "mountpoint": null,
                               "workspace_path": "/w"});
        compact_envelope(&mut plain);
        assert!(plain["request"].get("options").is_none());
        // A different mountpoint (null: nothing ran) is information: kept.
        assert!(plain.get("mountpoint").is_some());
    }

    #[test]
    fn compacting_keeps_what_happened() {
        let finding = json!({"program": "true", "category": "read_only", "action": "allow",
                             "rule": "r", "reason": "only reads"});
        let mut doc = json!({
            "decision": {"action": "allow", "categories": ["read_only"], "matched_rule": "r",
                         "reason": "only reads", "findings": [finding]},
            "result": {"exit_code": 0, "timed_out": false, "signal": null,
                       "stdout_truncated": false, "escaped_processes": [], "quota_refused": null},
            "rollback": {"requested": false, "performed": false, "checkpoint": null},
        });
        compact_envelope(&mut doc);
        assert!(doc["decision"].get("findings").is_none());
        assert_eq!(doc["result"], json!({"exit_code": 0, "timed_out": false}));
        assert!(doc.get("rollback").is_none());

        // Two findings, a signal, a requested rollback: all kept.
        let mut doc = json!({
            "decision": {"action": "deny", "categories": ["read_only"], "matched_rule": "r",
                         "reason": "x", "findings": [finding, finding]},
            "result": {"signal": 9, "stdout_truncated": true},
            "rollback": {"requested": true, "performed": false, "checkpoint": null},
        });
        let before = doc.clone();
        compact_envelope(&mut doc);
        assert_eq!(doc, before);
    }

    #[test]
    fn the_exec_schema_is_the_envelope_schema_loosened_where_compacting_drops() {
        let s = full_exec_schema();
        assert!(s.get("$id").is_none());
        let req = s.pointer("/required").unwrap().as_array().unwrap();
        assert!(req.iter().any(|v| v == "changes"));
        assert!(!req.iter().any(|v| v == "mountpoint"));
        assert_eq!(s.pointer("/$defs/options/required").unwrap(), &json!([]));
        assert!(
            s.pointer("/$defs/options/properties/timeout_secs")
                .is_some()
        );
    }

    #[test]
    fn every_document_tool_declares_its_generated_schema() {
        for (name, schema) in crate::schema::all() {
            let declared = Value::Object((*doc_schema(name)).clone());
            let full = schema.to_value();
            assert_eq!(declared["type"], "object", "{name}");
            let fields = |v: &Value| -> Vec<String> {
                v["properties"]
                    .as_object()
                    .unwrap()
                    .keys()
                    .cloned()
                    .collect()
            };
            assert_eq!(fields(&declared), fields(&full), "{name}");
        }
        let exec = Value::Object((*exec_schema()).clone());
        assert_eq!(exec["title"], full_exec_schema()["title"]);
        assert_eq!(exec["properties"]["exit_code"], json!({"type": "integer"}));
    }
}
