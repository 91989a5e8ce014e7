//! The ExecutionEnvelope: one JSON document per `avfs exec`, described by
//! `schemas/execution-envelope.schema.json`.

use serde::Serialize;

use super::policy::Decision;
use super::runner::RunResult;
use crate::diff::{Change, ChangeSummary};
use crate::engine::EngineInfo;
use crate::exec::capture::CaptureLimits;
use crate::sandbox::SandboxInfo;

pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Command {
    /// "argv" or "shell".
    pub kind: &'static str,
    pub argv: Option<Vec<String>>,
    pub shell: Option<String>,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Request {
    pub command: Command,
    /// Directory inside the workspace the command runs in.
    pub cwd: String,
    pub vault: String,
    pub workspace: String,
    pub options: serde_json::Value,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ApprovalInfo {
    pub id: String,
    pub state: String,
    pub expires_at_ns: Option<i64>,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Rollback {
    pub requested: bool,
    pub performed: bool,
    pub checkpoint: Option<String>,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Envelope {
    pub schema_version: u32,
    pub id: String,
    pub request: Request,
    pub decision: Decision,
    pub approval: Option<ApprovalInfo>,
    /// Checkpoint taken before the run.
    pub checkpoint: Option<String>,
    pub result: Option<RunResult>,
    /// The changes shown (all of them, or the first `--max-changes`; see `changes_page`).
    pub changes: Vec<ShownChange>,
    pub change_summary: Summary,
    /// How much of the change list is shown, and the command that pages the rest.
    pub changes_page: ChangesPage,
    /// What the workspace's services wrote since its last run: taken in just before
    /// this run (and before its checkpoint), so not in `changes`. Null when no service
    /// ran since.
    pub service_changes: Option<ServiceChanges>,
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

/// What services wrote into the workspace between two runs (docs/services.md).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ServiceChanges {
    /// The services (names) that ran in the workspace since its last run.
    pub services: Vec<String>,
    /// The first changes (at most `MAX_SERVICE_CHANGES`, no patches).
    pub changes: Vec<ShownChange>,
    pub change_summary: Summary,
    /// Whether `changes` lists only part of them.
    pub truncated: bool,
}

/// Entries of `service_changes.changes` at most: the run's own changes come first.
pub const MAX_SERVICE_CHANGES: usize = 20;

/// How much of the change list an envelope shows (`--changes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangesMode {
    /// The first `max_changes` changes, patches within `max_patch_bytes` (the default).
    List,
    /// Every change and every patch (as small text files have them), unbounded.
    Full,
    /// Counts only (by kind and by top directories), no list.
    Summary,
    /// Counts by kind only: no list, no directories, no patches computed.
    None,
}

impl ChangesMode {
    pub fn name(self) -> &'static str {
        match self {
            ChangesMode::List => "list",
            ChangesMode::Full => "full",
            ChangesMode::Summary => "summary",
            ChangesMode::None => "none",
        }
    }
}

/// What an envelope keeps of a run's changes and output: small by default, so that it
/// fits in a model's context; the rest stays in the vault (`avfs diff`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReportLimits {
    pub changes: ChangesMode,
    /// Entries in `changes` at most (mode `list`).
    pub max_changes: usize,
    /// Bytes of patches in all at most (mode `list`); a patch over its share is cut.
    pub max_patch_bytes: usize,
    /// Bytes kept from the start and the end of stdout and of stderr.
    pub output: CaptureLimits,
}

pub const DEFAULT_MAX_CHANGES: usize = 50;
pub const DEFAULT_MAX_PATCH_BYTES: usize = 64 * 1024;

impl Default for ReportLimits {
    fn default() -> Self {
        ReportLimits {
            changes: ChangesMode::List,
            max_changes: DEFAULT_MAX_CHANGES,
            max_patch_bytes: DEFAULT_MAX_PATCH_BYTES,
            output: CaptureLimits::default(),
        }
    }
}

/// One entry of `changes`: a change of the tree diff, with a marker when its patch was cut.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ShownChange {
    #[serde(flatten)]
    pub change: Change,
    /// The patch was cut (to its share of `max_patch_bytes`, or dropped when none was
    /// left); `patch_bytes` is its whole size. Absent when the patch is whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch_truncated: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch_bytes: Option<u64>,
}

/// Counts of the run's changes: by kind, in all, and (for long lists) by top directory.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct Summary {
    #[serde(flatten)]
    pub counts: ChangeSummary,
    pub total: usize,
    /// The top directories (below the root) holding the most changes,
    /// largest first; only when the list is longer than what is shown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by_directory: Option<Vec<DirectoryCount>>,
    /// Files the run wrote that the workspace's ignore rules match (`.gitignore`,
    /// `.git/info/exclude`, `.avfsignore`) and the history does not hold: they went to
    /// the workspace's ignored directory, not into the change list or the vault.
    #[serde(default)]
    pub ignored: crate::engine::ignored::IgnoredCount,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct DirectoryCount {
    pub path: String,
    #[serde(flatten)]
    pub counts: ChangeSummary,
    pub total: usize,
}

/// How much of the list is shown, and the way to the rest.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ChangesPage {
    /// `--changes`: list, full, summary or none.
    pub mode: &'static str,
    /// Entries in `changes`.
    pub shown: usize,
    /// Changes the run made.
    pub total: usize,
    /// Some changes are not in the list.
    pub truncated: bool,
    /// Bytes of patches in the list, and how many patches were cut or dropped.
    pub patch_bytes: u64,
    pub patches_truncated: usize,
    /// Checkpoint with the state before the run (the envelope's `checkpoint`) and the one
    /// with the state after it (taken only when the list is cut), when they exist.
    pub before: Option<String>,
    pub after: Option<String>,
    /// The command that prints the whole list (paged), or null when it cannot be
    /// named (no checkpoint before the run, or the run was rolled back).
    pub rest: Option<String>,
}

impl ChangesPage {
    pub fn nothing(mode: ChangesMode) -> ChangesPage {
        ChangesPage {
            mode: mode.name(),
            shown: 0,
            total: 0,
            truncated: false,
            patch_bytes: 0,
            patches_truncated: 0,
            before: None,
            after: None,
            rest: None,
        }
    }
}

// Readers of an entry or of the summary see the tree diff's own fields.
impl std::ops::Deref for ShownChange {
    type Target = Change;
    fn deref(&self) -> &Change {
        &self.change
    }
}

impl std::ops::Deref for Summary {
    type Target = ChangeSummary;
    fn deref(&self) -> &ChangeSummary {
        &self.counts
    }
}
