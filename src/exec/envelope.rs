//! The ExecutionEnvelope: one JSON document per `avfs exec`, described by
//! `schemas/execution-envelope.schema.json`.

use serde::Serialize;

use super::policy::Decision;
use super::runner::RunResult;
use crate::diff::{Change, ChangeSummary};
use crate::engine::EngineInfo;
use crate::sandbox::SandboxInfo;

pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize)]
pub struct Command {
    /// "argv" or "shell".
    pub kind: &'static str,
    pub argv: Option<Vec<String>>,
    pub shell: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Request {
    pub command: Command,
    /// Directory inside the workspace the command runs in.
    pub cwd: String,
    pub vault: String,
    pub workspace: String,
    pub options: serde_json::Value,
}

#[derive(Debug, Clone, Serialize)]
pub struct ApprovalInfo {
    pub id: String,
    pub state: String,
    pub expires_at_ns: Option<i64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Rollback {
    pub requested: bool,
    pub performed: bool,
    pub checkpoint: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Envelope {
    pub schema_version: u32,
    pub id: String,
    pub request: Request,
    pub decision: Decision,
    pub approval: Option<ApprovalInfo>,
    /// Checkpoint taken before the run.
    pub checkpoint: Option<String>,
    pub result: Option<RunResult>,
    pub changes: Vec<Change>,
    pub change_summary: ChangeSummary,
    pub rollback: Rollback,
    /// Where the command saw the workspace: its stable path (same as `workspace_path`;
    /// kept for readers of schema version 1).
    pub mountpoint: Option<String>,
    /// The workspace's stable path: the same in every run of the vault and its forks.
    pub workspace_path: Option<String>,
    /// Which engine ran the command (overlay, or FUSE as the fallback) and why.
    pub engine: Option<EngineInfo>,
    /// Whether the kernel confined the command (the sandbox), and how.
    pub sandbox: SandboxInfo,
    pub exit_code: i32,
}
