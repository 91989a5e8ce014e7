//! Documents of the search and metadata tools: `grep`, `find`, `search`, `tag`/`untag`.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Serialize;

use crate::search::{Hit, IndexUpdate};

/// `grep --json`: the matching lines.
#[derive(Serialize, JsonSchema, Debug)]
pub struct GrepReport {
    /// Files skipped as binary (a NUL byte in the first 8 KiB).
    pub binary_files_skipped: u64,
    /// Files with a match on this page, in path order (with `-l`, the page itself).
    pub files: Vec<String>,
    /// Files with at least one match, in all.
    pub files_matched: usize,
    /// Regular files read (dot names are skipped without `--hidden`).
    pub files_searched: u64,
    /// Matching lines in path order, then line order, at most `--limit` (default 100 with
    /// `--json`) from `--cursor` on; empty with `-l`.
    pub matches: Vec<GrepMatch>,
    /// Pass as `--cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
    /// Where the search started, normalized.
    pub path: String,
    /// The pattern as given.
    pub pattern: String,
    /// Matching lines in all (with `-l`, files with a match).
    pub total: usize,
}

/// One matching line.
#[derive(Serialize, JsonSchema, Debug)]
pub struct GrepMatch {
    /// The file.
    pub path: String,
    /// Line number, from 1.
    pub line: u64,
    /// The line without its line ending; invalid UTF-8 as U+FFFD.
    pub text: String,
}

/// `find --json`: the matching entries.
#[derive(Serialize, JsonSchema, Debug)]
pub struct FindReport {
    /// Matching entries in walk order (depth first, names sorted by bytes), at most
    /// `--limit` (default 100 with `--json`) from `--cursor` on.
    pub entries: Vec<FoundEntry>,
    /// Pass as `--cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
    /// Where the walk started, normalized.
    pub path: String,
    /// Matching entries in all.
    pub total: usize,
}

/// One entry `find` matched.
#[derive(Serialize, JsonSchema, Debug)]
pub struct FoundEntry {
    /// Workspace path.
    pub path: String,
    /// file, dir, symlink, fifo, socket, char_device or block_device.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Bytes (0 for directories).
    pub size: u64,
    /// Permission bits, 4 octal digits.
    pub mode: String,
    /// Modification time, RFC 3339 UTC.
    pub mtime: String,
    /// The entry's tags, sorted.
    pub tags: Vec<String>,
    /// The entry's metadata: key to value.
    pub meta: BTreeMap<String, String>,
}

/// `search --json`: ranked full-text results.
#[derive(Serialize, JsonSchema, Debug)]
pub struct SearchReport {
    /// The FTS5 query run (with `--fts`, `query` itself).
    pub fts_query: String,
    /// What bringing the index up to date did before searching.
    pub index: IndexUpdate,
    /// The words as given, joined by spaces.
    pub query: String,
    /// Best first (BM25), ties by path; at most `--limit` (20).
    pub results: Vec<Hit>,
}

/// `tag --json` and `untag --json`.
#[derive(Serialize, JsonSchema, Debug)]
pub struct TagReport {
    /// `tag` only: the tags this call added, in the order given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub added: Option<Vec<String>>,
    /// The path, normalized.
    pub path: String,
    /// `untag` only: the tags this call removed, in the order given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub removed: Option<Vec<String>>,
    /// All tags of the path afterwards, sorted.
    pub tags: Vec<String>,
}
