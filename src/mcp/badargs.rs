//! Bad arguments, answered one way: a tool error (`isError: true`) whose structured content
//! is an error document naming the argument and the fix, like the CLI's:
//!
//! ```json
//! {"error": {"kind": "invalid_argument", "exit_code": 1, "argument": "timeout_secs",
//!            "message": "...", "fix": "..."}}
//! ```
//!
//! A model reads a tool error and retries; a protocol exception it often never sees. So the
//! arguments are checked against the tool's own input schema before the call (unknown
//! names, missing ones, wrong JSON types, negative counts), and what a tool refuses later
//! (`bad_arg`) or the SDK cannot deserialize is turned into the same document.

use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResult, ErrorCode, JsonObject};
use serde_json::{Value, json};

/// A tool's refusal of an argument: the message, and what to do instead.
pub(super) fn bad_arg(
    argument: &str,
    message: impl Into<String>,
    fix: impl Into<String>,
) -> McpError {
    McpError::invalid_params(
        message.into(),
        Some(json!({"argument": argument, "fix": fix.into()})),
    )
}

/// Whether this error is a bad argument (to be answered as a tool error).
pub(super) fn is_bad_arg(e: &McpError) -> bool {
    e.code == ErrorCode::INVALID_PARAMS
}

/// The tool error for a bad argument.
pub(super) fn tool_error(e: &McpError) -> CallToolResult {
    let data = e.data.clone().unwrap_or(Value::Null);
    let mut err = json!({
        "kind": "invalid_argument",
        "exit_code": 1,
        "message": e.message,
    });
    for key in ["argument", "fix"] {
        if let Some(v) = data.get(key) {
            err[key] = v.clone();
        }
    }
    if err.get("fix").is_none() {
        err["fix"] = json!("check the arguments against the tool's input schema (tools/list)");
    }
    CallToolResult::structured_error(json!({ "error": err }))
}

/// The SDK's own answer when it cannot deserialize the arguments is a plain-text tool error;
/// this turns it into the structured one.
pub(super) fn restructure(r: CallToolResult) -> CallToolResult {
    if r.is_error != Some(true) || r.structured_content.is_some() {
        return r;
    }
    let text: String = r
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n");
    let argument = text
        .split('`')
        .nth(1)
        .map(str::to_string)
        .unwrap_or_default();
    tool_error(&McpError::invalid_params(
        text,
        Some(json!({"argument": argument})),
    ))
}

/// Checks `args` against `schema` (the tool's input schema): every name known, every
/// required one present, each value of its declared JSON type.
pub(super) fn check(schema: &JsonObject, args: &JsonObject) -> Result<(), McpError> {
    let empty = JsonObject::new();
    let props = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    for (name, value) in args {
        let Some(prop) = props.get(name) else {
            let mut known: Vec<&str> = props.keys().map(String::as_str).collect();
            known.sort_unstable();
            return Err(bad_arg(
                name,
                format!("unknown argument `{name}`"),
                format!("use only these arguments: {}", known.join(", ")),
            ));
        };
        // `null` is leaving the argument out (`output::trim_input_schemas`).
        if !value.is_null() {
            check_value(name, prop, value)?;
        }
    }
    for req in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !args.contains_key(req) {
            return Err(bad_arg(
                req,
                format!("missing argument `{req}`"),
                format!("give `{req}`{}", about(props.get(req))),
            ));
        }
    }
    Ok(())
}

fn check_value(name: &str, prop: &Value, value: &Value) -> Result<(), McpError> {
    let types: Vec<&str> = match prop.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => return Ok(()),
    };
    let wanted = types
        .iter()
        .filter(|t| **t != "null")
        .copied()
        .collect::<Vec<_>>();
    if !types.iter().any(|t| has_type(value, t)) {
        return Err(bad_arg(
            name,
            format!(
                "argument `{name}` must be {}, not {}",
                wanted.join(" or "),
                type_of(value)
            ),
            format!(
                "give `{name}` as {}{}",
                wanted.join(" or "),
                about(Some(prop))
            ),
        ));
    }
    if let (Some(min), Some(n)) = (prop.get("minimum").and_then(Value::as_f64), value.as_f64())
        && n < min
    {
        return Err(bad_arg(
            name,
            format!("argument `{name}` must be at least {min}, not {n}"),
            format!("give `{name}` a value of {min} or more"),
        ));
    }
    if let (Some(items), Some(list)) = (prop.get("items"), value.as_array()) {
        for v in list {
            check_value(name, items, v)?;
        }
    }
    Ok(())
}

/// ` (DESCRIPTION)` of a property, to remind what it is for.
fn about(prop: Option<&Value>) -> String {
    prop.and_then(|p| p.get("description"))
        .and_then(Value::as_str)
        .map(|d| format!(" ({})", d.trim_end_matches('.')))
        .unwrap_or_default()
}

fn has_type(v: &Value, t: &str) -> bool {
    match t {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "string" => v.is_string(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0),
        _ => true,
    }
}

fn type_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a fractional number",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> JsonObject {
        match json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Absolute path."},
                "limit": {"type": ["integer", "null"], "minimum": 0},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["path"],
        }) {
            Value::Object(o) => o,
            _ => unreachable!(),
        }
    }

    fn args(v: Value) -> JsonObject {
        v.as_object().unwrap().clone()
    }

    fn argument_of(e: McpError) -> String {
        e.data.unwrap()["argument"].as_str().unwrap().to_string()
    }

    #[test]
    fn every_kind_of_bad_argument_names_the_argument() {
        let s = schema();
        assert!(check(&s, &args(json!({"path": "/a", "limit": 3, "tags": ["x"]}))).is_ok());
        assert!(check(&s, &args(json!({"path": "/a", "limit": null}))).is_ok());
        for (bad, argument) in [
            (json!({}), "path"),
            (json!({"path": 1}), "path"),
            (json!({"path": "/a", "nope": 1}), "nope"),
            (json!({"path": "/a", "limit": -1}), "limit"),
            (json!({"path": "/a", "limit": 1.5}), "limit"),
            (json!({"path": "/a", "tags": [1]}), "tags"),
        ] {
            let e = check(&s, &args(bad.clone())).unwrap_err();
            assert_eq!(argument_of(e), argument, "{bad}");
        }
    }

    #[test]
    fn the_tool_error_is_an_error_document_with_the_fix() {
        let r = tool_error(&bad_arg("x", "bad x", "give a good x"));
        assert_eq!(r.is_error, Some(true));
        let doc = r.structured_content.unwrap();
        assert_eq!(doc["error"]["kind"], "invalid_argument");
        assert_eq!(doc["error"]["argument"], "x");
        assert_eq!(doc["error"]["fix"], "give a good x");
    }
}
