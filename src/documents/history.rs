//! Documents about a workspace's history and its forks: `checkpoint save|list|restore`,
//! `diff`, `vault fork`, `vault merge`, `approvals`, `audit`.

use schemars::JsonSchema;
use serde::Serialize;

use super::CheckpointDoc;
use crate::diff::stat::{FileStat, StatTotals};
use crate::diff::{Change, ChangeSummary};
use crate::merge::Conflict;
use crate::registry::VaultRef;
use crate::store::approvals::Approval;
use crate::store::audit::AuditRow;
use crate::util::rfc3339;

/// `checkpoint save --json`.
#[derive(Serialize, JsonSchema, Debug)]
pub struct CheckpointSaved {
    /// False when the live state equals the previous head (the checkpoint is still made).
    pub changed: bool,
    /// The new checkpoint.
    pub checkpoint: CheckpointDoc,
}

/// `checkpoint list --json`.
#[derive(Serialize, JsonSchema, Debug)]
pub struct CheckpointList {
    /// This workspace's checkpoints, oldest first: the newest `--limit` (default 100)
    /// before `--cursor`.
    pub checkpoints: Vec<CheckpointDoc>,
    /// The head checkpoint (in a fork, possibly one of the parent's, not in the list).
    pub head: Option<String>,
    /// How many checkpoints the workspace has in all.
    pub total: usize,
    /// Pass as `--cursor` for the page of older ones; null on the last page.
    pub next_cursor: Option<String>,
}

/// `checkpoint restore --json`.
#[derive(Serialize, JsonSchema, Debug)]
pub struct CheckpointRestored {
    /// The checkpoint now live.
    pub restored: CheckpointDoc,
    /// The automatic checkpoint holding the unsaved changes; null when there were none.
    pub saved_unsaved_changes_as: Option<String>,
}

/// `diff --json` and `checkpoint diff --json`: what changed between two states.
#[derive(Serialize, JsonSchema, Debug)]
pub struct DiffReport {
    /// The changes from `offset` on, at most `--limit`, sorted by path.
    pub changes: Vec<Change>,
    /// Checkpoint name, `live`, or `(empty)` when there is no head and none was given.
    pub from: String,
    /// Only with `--name-only`: the changed paths (new paths for renames).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub names: Option<Vec<String>>,
    /// Where the next page starts (`--offset`); null when this page is the last.
    pub next_offset: Option<usize>,
    /// `--offset` as given.
    pub offset: usize,
    /// Only with path filters: the filters, normalized.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paths: Option<Vec<String>>,
    /// Only with `--stat`: inserted and deleted lines per change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stat: Option<DiffStat>,
    /// Counts per kind of all the changes after path filters (not only this page).
    pub summary: ChangeSummary,
    /// Checkpoint name or `live`.
    pub to: String,
    /// Changes between `from` and `to` after path filters.
    pub total: usize,
}

/// `diff --stat`: lines per file, and totals.
#[derive(Serialize, JsonSchema, Debug)]
pub struct DiffStat {
    pub files: Vec<FileStat>,
    pub totals: StatTotals,
}

/// `vault fork --json`.
#[derive(Serialize, JsonSchema, Debug)]
pub struct ForkReport {
    /// The checkpoint of the source the fork starts from; null only when an interrupted
    /// fork was completed.
    pub checkpoint: Option<String>,
    /// Only `true`, when this call completed a fork an earlier one was killed in the
    /// middle of (the fork already existed in the vault file).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub completed_interrupted_fork: bool,
    /// The new fork.
    pub fork: VaultRef,
    /// The source as resolved: its registered name, or the path as typed.
    pub parent: String,
    /// Only with `--remote`: where the checkpoint came from and what moved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote: Option<crate::remote::fork::RemoteFork>,
}

/// `vault merge --json`: a three-way merge of a fork into its target.
#[derive(Serialize, JsonSchema, Debug)]
pub struct MergeReport {
    /// The fork, as resolved.
    pub fork: String,
    /// The target's registered name (its workspace name when it has none).
    pub into: String,
    /// The base checkpoint the three-way merge compares from.
    pub base: String,
    /// `--dry-run`: nothing was changed.
    pub dry_run: bool,
    /// The `--path` filters, normalized; empty: everything.
    pub paths: Vec<String>,
    /// The checkpoint holding the target as it was before (restore it to undo); null on
    /// a dry run or when nothing was changed.
    pub before: Option<String>,
    /// The new checkpoint of the target (origin `merge`); null on a dry run, when there
    /// was nothing to change, or while the merge is pending.
    pub checkpoint: Option<CheckpointDoc>,
    /// No conflict is left unresolved.
    pub clean: bool,
    /// Unresolved conflicts left the merge pending (`--continue` or `--abort`).
    pub pending: bool,
    /// Conflicts without `--conflicts=markers`: nothing was changed (exit 1).
    pub refused: bool,
    /// The fork's changes brought into the target (or that would be), sorted by path.
    pub taken: Vec<Change>,
    /// Files both sides edited without overlap: they hold both sides' edits.
    pub line_merged: Vec<String>,
    /// Paths both sides changed differently, sorted by path.
    pub conflicts: Vec<Conflict>,
    pub summary: MergeSummary,
}

/// Counts of a merge.
#[derive(Serialize, JsonSchema, Debug)]
pub struct MergeSummary {
    /// Length of `taken`.
    pub taken: usize,
    /// Length of `line_merged`.
    pub line_merged: usize,
    /// Length of `conflicts`.
    pub conflicts: usize,
    /// Conflicts left for a person: all of them (kept for older readers).
    pub unresolved: usize,
}

/// `approvals --json`.
#[derive(Serialize, JsonSchema, Debug)]
pub struct ApprovalList {
    /// Pending approvals of every vault (of the `--vault` one when given; all of them
    /// with `--all`), oldest first.
    pub approvals: Vec<Approval>,
}

/// `approve --json` and `deny --json`.
#[derive(Serialize, JsonSchema, Debug)]
pub struct ApprovalDecided {
    /// The approval as decided (`approved` or `denied`).
    pub approval: Approval,
}

/// `audit --json`: the audit log.
#[derive(Serialize, JsonSchema, Debug)]
pub struct AuditLog {
    /// Rows oldest first: the newest `--limit` (default 100 with `--json`) before
    /// `--cursor`.
    pub entries: Vec<AuditEntry>,
    /// Pass as `--cursor` for the page of older rows; null on the last page. A row id:
    /// rows appended meanwhile do not shift the pages.
    pub next_cursor: Option<String>,
    /// Rows in all (at or after `--since`).
    pub total: usize,
}

/// One audit row.
#[derive(Serialize, JsonSchema, Debug)]
pub struct AuditEntry {
    /// What was done: `write`, `checkpoint.save`, `vault.fork`, ...
    pub action: String,
    /// Who did it: `cli`, `mcp` (or another `AVFS_ORIGIN` word), `mount`.
    pub actor: String,
    /// The action's arguments, usually an object.
    pub detail: serde_json::Value,
    /// The row's chain hash (BLAKE3, hex).
    pub hash: String,
    /// Row number, from 1.
    pub id: i64,
    /// When, RFC 3339 UTC.
    pub time: String,
    /// When, nanoseconds since the Unix epoch.
    pub ts_ns: i64,
    /// The workspace the row is about.
    pub workspace: Option<String>,
}

impl AuditEntry {
    pub fn of(r: &AuditRow) -> AuditEntry {
        AuditEntry {
            action: r.action.clone(),
            actor: r.actor.clone(),
            detail: r.detail.clone(),
            hash: r.hash.clone(),
            id: r.id,
            time: rfc3339(r.ts_ns),
            ts_ns: r.ts_ns,
            workspace: r.workspace.clone(),
        }
    }
}
