//! The JSON Schemas of the `--json` documents, derived from their types
//! ([`crate::documents`] and the library results they hold).
//!
//! [`all`] is the one list of them: `schemas/<name>.schema.json` is generated from it
//! (`tests/schemas.rs` fails when a committed file differs and says how to regenerate),
//! and the MCP server's tools declare these schemas as their `outputSchema`.
//!
//! `schemas/execution-envelope.schema.json`, the exec envelope's, is still written by
//! hand: it says more than the envelope's types do (patterns, `oneOf`, `not`), and every
//! envelope the tests make is validated against it; [`envelope_from_type`] keeps its
//! fields those of the type.

use schemars::generate::SchemaSettings;
use schemars::transform::RecursiveTransform;
use schemars::{JsonSchema, Schema};

use crate::documents::files::{ExecOutput, FileContent, FileLog, FileWritten, Listing, StatDoc};
use crate::documents::history::{
    ApprovalDecided, ApprovalList, AuditLog, CheckpointList, CheckpointRestored, CheckpointSaved,
    DiffReport, ForkReport, MergeReport,
};
use crate::documents::services::{ServiceList, ServiceStarted, ServiceStopped};
use crate::documents::tools::{FindReport, GrepReport, SearchReport, TagReport};

/// Every document type with the name of its schema file (`schemas/NAME.schema.json`),
/// named after its command (`checkpoint save` → `checkpoint-save`).
pub fn all() -> Vec<(&'static str, Schema)> {
    vec![
        ("approvals", of::<ApprovalList>()),
        ("approve", of::<ApprovalDecided>()),
        ("audit", of::<AuditLog>()),
        ("cat", of::<FileContent>()),
        ("checkpoint-list", of::<CheckpointList>()),
        ("checkpoint-restore", of::<CheckpointRestored>()),
        ("checkpoint-save", of::<CheckpointSaved>()),
        ("diff", of::<DiffReport>()),
        ("find", of::<FindReport>()),
        ("grep", of::<GrepReport>()),
        ("log", of::<FileLog>()),
        ("ls", of::<Listing>()),
        ("output", of::<ExecOutput>()),
        ("push", of::<crate::remote::PushReport>()),
        ("search", of::<SearchReport>()),
        ("service-list", of::<ServiceList>()),
        ("service-start", of::<ServiceStarted>()),
        ("service-stop", of::<ServiceStopped>()),
        ("stat", of::<StatDoc>()),
        ("tag", of::<TagReport>()),
        ("vault-fork", of::<ForkReport>()),
        ("vault-merge", of::<MergeReport>()),
        ("write", of::<FileWritten>()),
    ]
}

/// The exec envelope's schema as its type ([`crate::exec::envelope::Envelope`]) gives it.
/// Not a file: `schemas/execution-envelope.schema.json`, written by hand, says more
/// (value patterns, `oneOf` between argv and shell commands, "not both --sandbox and
/// --no-sandbox"); `tests/schemas.rs` checks that it names exactly the fields this one
/// does, object by object, and requires the same ones, so the type and the file cannot
/// drift apart.
pub fn envelope_from_type() -> Schema {
    of::<crate::exec::envelope::Envelope>()
}

/// The schema named `name` in [`all`].
pub fn named(name: &str) -> Option<Schema> {
    all().into_iter().find(|(n, _)| *n == name).map(|(_, s)| s)
}

/// The schema of what `T` serializes to: JSON Schema 2020-12 (what MCP asks for), an
/// `Option` without `skip_serializing_if` is a required field that may be null, one
/// with it an optional field. Objects are closed (`additionalProperties: false`): a
/// field a type does not declare fails validation in the tests, so a document cannot
/// grow a field its schema and docs do not know. Readers should still ignore unknown
/// fields (docs/json.md, compatibility promise): a later release may add some.
pub fn of<T: JsonSchema>() -> Schema {
    SchemaSettings::draft2020_12()
        .for_serialize()
        .with_transform(RecursiveTransform(close_objects))
        .into_generator()
        .into_root_schema_for::<T>()
}

fn close_objects(s: &mut Schema) {
    if let Some(o) = s.as_object_mut()
        && o.contains_key("properties")
        && !o.contains_key("additionalProperties")
    {
        o.insert("additionalProperties".into(), false.into());
    }
}

/// The text of `schemas/NAME.schema.json` for `schema`: pretty JSON and a final newline.
pub fn file_text(schema: &Schema) -> String {
    let mut text = serde_json::to_string_pretty(schema).expect("a schema is JSON");
    text.push('\n');
    text
}
