//! The JSON documents `avfs --json` prints (docs/json.md), as types.
//!
//! The CLI builds one of these and prints it; `crate::schema` derives the JSON Schema
//! files in `schemas/` and the MCP tools' `outputSchema` from the same types, so the
//! three cannot drift apart. Doc comments on fields become the schemas' descriptions.
//!
//! Most documents list their keys alphabetically (as `serde_json::Value` prints them):
//! the fields of the top-level documents here are declared in that order, so the move
//! from `json!` to types changed no document's key order. Nested objects print in their
//! fields' order.

pub mod files;
pub mod history;
pub mod services;
pub mod tools;

use schemars::JsonSchema;
use serde::Serialize;

use crate::util::rfc3339;
use crate::workspace::Checkpoint;

/// A checkpoint: a saved state of a workspace.
#[derive(Serialize, JsonSchema, Debug, Clone)]
pub struct CheckpointDoc {
    /// Checkpoint name.
    pub name: String,
    /// The workspace that owns it (for a fork's inherited head, the parent's workspace).
    pub workspace: String,
    /// BLAKE3 hash (hex) of the checkpoint's root tree: equal roots, equal content.
    pub root: String,
    /// The checkpoint that was head when this one was saved.
    pub parent: Option<String>,
    /// When it was saved, RFC 3339 UTC.
    pub created_at: String,
    /// When it was saved, nanoseconds since the Unix epoch.
    pub created_at_ns: i64,
    /// Who made it: cli, auto, fork, merge, shell, exec.
    pub origin: String,
    /// The `-m` message.
    pub message: Option<String>,
}

impl CheckpointDoc {
    pub fn of(c: &Checkpoint) -> CheckpointDoc {
        CheckpointDoc {
            name: c.name.clone(),
            workspace: c.workspace.clone(),
            root: c.root.to_hex(),
            parent: c.parent.clone(),
            created_at: rfc3339(c.created_at_ns),
            created_at_ns: c.created_at_ns,
            origin: c.origin.clone(),
            message: c.message.clone(),
        }
    }
}

/// An error, as in an error document's `error` (and in a streamed listing that failed
/// part-way).
#[derive(Serialize, JsonSchema, Debug, Clone)]
pub struct ErrorBody {
    /// The process exit code, 1 or 2.
    pub exit_code: i32,
    /// Stable machine-readable kind (docs/cli.md#error-kinds).
    pub kind: String,
    /// For people; the wording may change.
    pub message: String,
}
