//! The arguments of each tool, as the client sends them (their JSON Schema is what
//! `tools/list` shows).

use rmcp::schemars::{self, JsonSchema};
use serde::Deserialize;

// Every tool's `vault` (described once, in the server's instructions, to keep
// `tools/list` small) selects the vault or fork a call works on (without it, the
// server's own: `avfs --vault V mcp`, else `$AVFS_VAULT`, else the current vault).
// Paging (`limit`, `cursor`) is described there once too.

/// A page of checkpoints.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub(super) struct CheckpointListParams {
    /// The newest N checkpoints (default 100).
    pub(super) limit: Option<u64>,
    /// A page's `next_cursor`: the older ones.
    pub(super) cursor: Option<String>,
    pub(super) vault: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct ExecParams {
    /// A shell command line, run by bash (give this or `argv`).
    pub(super) command: Option<String>,
    /// The program and its arguments, run without a shell (give this or `command`).
    pub(super) argv: Option<Vec<String>>,
    /// Directory inside the workspace to run in (default `/`).
    pub(super) cwd: Option<String>,
    /// Stop the command after this many seconds (fractions allowed: 0.5).
    #[schemars(range(min = 0))]
    pub(super) timeout_secs: Option<f64>,
    /// Extra environment variables, each `KEY=VALUE`.
    pub(super) env: Option<Vec<String>>,
    /// `true`: always checkpoint first; `false`: never (even when the policy asks).
    pub(super) checkpoint: Option<bool>,
    /// Restore the pre-run checkpoint when the command fails or times out.
    #[serde(default)]
    pub(super) rollback_on_failure: bool,
    /// `false`: run without the sandbox (refused when the policy requires it).
    pub(super) sandbox: Option<bool>,
    /// Run in this task fork (created on first use).
    pub(super) fork: Option<String>,
    /// Run in a throw-away fork.
    #[serde(default)]
    pub(super) ephemeral: bool,
    /// Run the command of this approval, once a person approved it.
    pub(super) approve: Option<String>,
    /// Wait this long for a person's decision when approval is required.
    #[schemars(range(min = 0))]
    pub(super) wait_approval_secs: Option<f64>,
    /// `list` (default; bounded by `max_changes`, `max_patch_bytes`), `full`,
    /// `summary` (counts), `none`.
    pub(super) changes: Option<ChangesParam>,
    /// Entries in the change list at most (default 50); `changes_page.rest` pages the rest.
    #[schemars(range(min = 0))]
    pub(super) max_changes: Option<u64>,
    /// Bytes of patches at most (default 65536); a larger patch is cut.
    #[schemars(range(min = 0))]
    pub(super) max_patch_bytes: Option<u64>,
    /// Bytes kept from the start of stdout and of stderr (default 8192).
    #[schemars(range(min = 0))]
    pub(super) output_head_bytes: Option<u64>,
    /// Bytes kept from the end of stdout and of stderr (default 8192).
    #[schemars(range(min = 0))]
    pub(super) output_tail_bytes: Option<u64>,
    pub(super) vault: Option<String>,
}

// `exec`'s `changes` (no doc comment: it would be repeated in `tools/list`).
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(super) enum ChangesParam {
    List,
    Full,
    Summary,
    None,
}

impl ChangesParam {
    pub(super) fn name(self) -> &'static str {
        match self {
            ChangesParam::List => "list",
            ChangesParam::Full => "full",
            ChangesParam::Summary => "summary",
            ChangesParam::None => "none",
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct CheckpointSaveParams {
    /// Checkpoint name (default: generated).
    pub(super) name: Option<String>,
    /// A message saying why.
    pub(super) message: Option<String>,
    pub(super) vault: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct CheckpointRestoreParams {
    /// The checkpoint.
    pub(super) name: String,
    pub(super) vault: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct DiffParams {
    /// From this checkpoint (default: the last one saved by a person or agent;
    /// see `head`).
    pub(super) from: Option<String>,
    /// From the head checkpoint (after an exec: the one before it) instead of
    /// the last saved one.
    #[serde(default)]
    pub(super) head: bool,
    /// To this checkpoint (default: the live state).
    pub(super) to: Option<String>,
    /// Include unified diffs of text files.
    #[serde(default)]
    pub(super) patch: bool,
    /// Only changes at or below these workspace paths.
    pub(super) paths: Option<Vec<String>>,
    /// Skip the first N changes (paging; `next_offset` says where the next page starts).
    #[schemars(range(min = 0))]
    pub(super) offset: Option<u64>,
    /// List at most N changes.
    #[schemars(range(min = 0))]
    pub(super) limit: Option<u64>,
    pub(super) vault: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct ForkParams {
    /// Name of the new fork.
    pub(super) name: String,
    /// Fork from this checkpoint instead of the live state.
    pub(super) from_checkpoint: Option<String>,
    /// The vault or fork to fork (default: the server's).
    pub(super) vault: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct ApprovalsParams {
    /// Also list decided, used and expired approvals.
    #[serde(default)]
    pub(super) all: bool,
    pub(super) vault: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct ReadFileParams {
    /// Absolute path inside the workspace.
    pub(super) path: String,
    /// Read it as it was at this checkpoint.
    pub(super) at: Option<String>,
    pub(super) vault: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct WriteFileParams {
    /// Absolute path inside the workspace.
    pub(super) path: String,
    /// The content, in `encoding`.
    pub(super) content: String,
    /// `utf-8` (default), `base64` or `hex`.
    pub(super) encoding: Option<String>,
    /// Append instead of replacing.
    #[serde(default)]
    pub(super) append: bool,
    /// Create missing parent directories.
    #[serde(default)]
    pub(super) parents: bool,
    pub(super) vault: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct ListDirParams {
    /// Directory inside the workspace (default `/`).
    pub(super) path: Option<String>,
    /// Include names starting with a dot.
    #[serde(default)]
    pub(super) all: bool,
    #[schemars(range(min = 0))]
    pub(super) limit: Option<u64>,
    pub(super) cursor: Option<String>,
    pub(super) vault: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct PathParams {
    /// Absolute path inside the workspace.
    pub(super) path: String,
    pub(super) vault: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct LogParams {
    /// Absolute path inside the workspace.
    pub(super) path: String,
    #[schemars(range(min = 0))]
    pub(super) limit: Option<u64>,
    pub(super) cursor: Option<String>,
    pub(super) vault: Option<String>,
}

// No `vault`: the exec id finds its output (and a doc comment here would be in
// `tools/list`).
#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct ExecOutputParams {
    /// The envelope's `id`.
    pub(super) exec_id: String,
    pub(super) stream: Option<StreamParam>,
    /// Start byte (a page's `next_offset`).
    #[schemars(range(min = 0))]
    pub(super) offset: Option<u64>,
    /// Bytes (default 16384).
    #[schemars(range(min = 0))]
    pub(super) limit: Option<u64>,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(super) enum StreamParam {
    Stdout,
    Stderr,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct AuditParams {
    #[schemars(range(min = 0))]
    pub(super) limit: Option<u64>,
    pub(super) cursor: Option<String>,
    /// Only records since this time (RFC 3339, or a duration like `10m` ago).
    pub(super) since: Option<String>,
    pub(super) vault: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct GrepParams {
    /// A regular expression (Rust regex syntax, as ripgrep's), or a literal with `fixed`.
    pub(super) pattern: String,
    /// File or directory to search (default `/`).
    pub(super) path: Option<String>,
    /// Match case-insensitively.
    #[serde(default)]
    pub(super) ignore_case: bool,
    /// The pattern is a literal string.
    #[serde(default)]
    pub(super) fixed: bool,
    /// Match whole words only.
    #[serde(default)]
    pub(super) word: bool,
    /// Also search names starting with '.'.
    #[serde(default)]
    pub(super) hidden: bool,
    /// Only the paths of files with a match.
    #[serde(default)]
    pub(super) files_only: bool,
    /// Search the files as they were at this checkpoint.
    pub(super) at: Option<String>,
    #[schemars(range(min = 0))]
    pub(super) limit: Option<u64>,
    pub(super) cursor: Option<String>,
    pub(super) vault: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct FindParams {
    /// Directory to search (default `/`).
    pub(super) path: Option<String>,
    /// Name globs (`*.rs`); any may match.
    #[serde(default)]
    pub(super) name: Vec<String>,
    /// Types: f (file), d (directory), l (symlink), p, s, c, b; any may match.
    #[serde(default, rename = "type")]
    pub(super) kind: Vec<String>,
    /// Size conditions like `+10k`, `-1M`, `100`; all must hold.
    #[serde(default)]
    pub(super) size: Vec<String>,
    /// Only what changed since this checkpoint.
    pub(super) newer: Option<String>,
    /// Tags the entry must have (all of them).
    #[serde(default)]
    pub(super) tag: Vec<String>,
    /// Metadata conditions `KEY` or `KEY=VALUE` (all of them).
    #[serde(default)]
    pub(super) meta: Vec<String>,
    /// Descend at most this many levels.
    pub(super) max_depth: Option<u64>,
    /// Search the tree as it was at this checkpoint.
    pub(super) at: Option<String>,
    #[schemars(range(min = 0))]
    pub(super) limit: Option<u64>,
    pub(super) cursor: Option<String>,
    pub(super) vault: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct SearchParams {
    /// Words to look for (ranked full-text search over text files).
    pub(super) query: String,
    /// Only below this directory.
    pub(super) path: Option<String>,
    /// At most this many results (default 20).
    pub(super) limit: Option<u64>,
    /// The query is raw SQLite FTS5 syntax (AND, OR, NEAR, "phrases", prefix*).
    #[serde(default)]
    pub(super) fts: bool,
    pub(super) vault: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct TagParams {
    /// Absolute path inside the workspace.
    pub(super) path: String,
    /// Tags to add (or remove, with `remove`).
    pub(super) tags: Vec<String>,
    /// Remove these tags instead of adding them.
    #[serde(default)]
    pub(super) remove: bool,
    pub(super) vault: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct MergeParams {
    /// The fork to merge back (a registered name).
    pub(super) fork: String,
    /// Merge into this vault or fork of the same file (default: the one it was forked from).
    pub(super) into: Option<String>,
    /// Merge only these paths and what is below them.
    #[serde(default)]
    pub(super) paths: Vec<String>,
    /// Work out and report the merge, change nothing.
    #[serde(default)]
    pub(super) dry_run: bool,
    /// Apply despite conflicts: markers in overlapping text, both copies of a
    /// binary file.
    #[serde(default)]
    pub(super) markers: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct ServiceStartParams {
    /// Default: its id.
    pub(super) name: Option<String>,
    /// A shell line (bash), or `argv`.
    pub(super) command: Option<String>,
    pub(super) argv: Option<Vec<String>>,
    /// `KEY=VALUE` each.
    pub(super) env: Option<Vec<String>>,
    pub(super) cwd: Option<String>,
    /// End it after this many seconds.
    #[schemars(range(min = 0))]
    pub(super) ttl_secs: Option<f64>,
    pub(super) vault: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct ServiceParams {
    /// Its name or id.
    pub(super) service: String,
    /// `service_logs`: the last N lines only.
    #[schemars(range(min = 0))]
    pub(super) tail: Option<u64>,
    pub(super) vault: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct VaultOnlyParams {
    pub(super) vault: Option<String>,
}
