//! What an envelope shows of a run's changes (`--changes`, `--max-changes`,
//! `--max-patch-bytes`) and what the audit log keeps of an envelope.
//!
//! A run that makes a virtualenv changes ~1 700 paths; the whole list with patches is
//! megabytes, more than a model's context. The envelope keeps the counts (by kind, and
//! by top directory when the list is long), the first entries with patches cut to a
//! budget, and names two checkpoints and the `avfs diff` command that pages the rest.

use std::collections::HashMap;

use rusqlite::Connection;
use serde_json::{Value, json};

use crate::diff::{Change, ChangeKind, ChangeSummary, add_patches, renames};
use crate::error::Result;
use crate::exec::envelope::{
    ChangesMode, ChangesPage, DirectoryCount, Envelope, ReportLimits, ShownChange, Summary,
};

/// Only files up to this size get a patch (larger ones: `avfs diff --patch`).
pub const PATCH_FILE_LIMIT: u64 = 64 * 1024;
/// Directories listed in `by_directory` at most.
const TOP_DIRECTORIES: usize = 20;
/// A long list is one with more entries than this, or than what is shown.
const LONG_LIST: usize = 50;

/// The changes as an envelope shows them.
pub struct Layered {
    pub changes: Vec<ShownChange>,
    pub summary: Summary,
    pub page: ChangesPage,
}

/// Shapes the run's whole change list (sorted by path) for the envelope; reads the
/// patches of the entries shown, and no others. Renames are detected as `avfs diff`
/// does by default, so the `rest` command pages exactly this list.
pub fn layer(db: &Connection, changes: Vec<Change>, limits: &ReportLimits) -> Result<Layered> {
    let mut changes = renames::detect(db, changes, renames::DEFAULT_THRESHOLD)?;
    let total = changes.len();
    let counts = ChangeSummary::of(&changes);
    let shown_n = match limits.changes {
        ChangesMode::Full => total,
        ChangesMode::List => total.min(limits.max_changes),
        ChangesMode::Summary | ChangesMode::None => 0,
    };
    let by_directory = match limits.changes {
        ChangesMode::None | ChangesMode::Full => None,
        _ if total > shown_n || total > LONG_LIST => Some(by_directory(&changes)),
        _ => None,
    };
    changes.truncate(shown_n);
    let budget = match limits.changes {
        ChangesMode::Full => None,
        _ => Some(limits.max_patch_bytes),
    };
    if budget != Some(0) {
        add_patches(db, &mut changes, PATCH_FILE_LIMIT)?;
    }
    if shown_n < total {
        // A cut list keeps its patch budget for edits: an added or deleted file's patch
        // is its whole text, which the checkpoints hold (`rest` pages it).
        for c in changes
            .iter_mut()
            .filter(|c| !matches!(c.kind, ChangeKind::Modified | ChangeKind::Renamed))
        {
            c.patch = None;
        }
    }
    let (shown, patch_bytes, cut) = cut_patches(changes, budget);
    Ok(Layered {
        summary: Summary {
            counts,
            total,
            by_directory,
            ignored: Default::default(),
        },
        page: ChangesPage {
            mode: limits.changes.name(),
            shown: shown.len(),
            total,
            truncated: shown.len() < total,
            patch_bytes,
            patches_truncated: cut,
            before: None,
            after: None,
            rest: None,
        },
        changes: shown,
    })
}

/// The share of the budget one patch may take: a modified file's patch an eighth, a
/// whole file's text (added or deleted: the content is in a checkpoint) a thirty-second.
fn share(kind: ChangeKind, budget: usize) -> usize {
    match kind {
        ChangeKind::Modified | ChangeKind::Renamed => budget / 8,
        _ => budget / 32,
    }
}

/// Cuts patches to their share and to what is left of the budget; returns the entries,
/// the bytes of patches kept and how many patches were cut or dropped.
fn cut_patches(changes: Vec<Change>, budget: Option<usize>) -> (Vec<ShownChange>, u64, usize) {
    let mut left = budget.unwrap_or(usize::MAX);
    let (mut bytes, mut cut) = (0u64, 0usize);
    let shown = changes
        .into_iter()
        .map(|mut change| {
            let patch = change.patch.take();
            let kind = change.kind;
            let mut shown = ShownChange {
                change,
                patch_truncated: None,
                patch_bytes: None,
            };
            let Some(patch) = patch else {
                return shown;
            };
            let cap = match budget {
                None => usize::MAX,
                Some(b) => share(kind, b).min(left),
            };
            let kept = if patch.len() <= cap {
                patch.clone()
            } else {
                cut_at_line(&patch, cap).to_string()
            };
            if kept.len() < patch.len() {
                cut += 1;
                shown.patch_truncated = Some(true);
                shown.patch_bytes = Some(patch.len() as u64);
            }
            left -= kept.len().min(left);
            bytes += kept.len() as u64;
            shown.change.patch = (!kept.is_empty()).then_some(kept);
            shown
        })
        .collect();
    (shown, bytes, cut)
}

/// The longest prefix of `text` of at most `max` bytes that ends at a line's end (or,
/// when the first line alone is longer, at a character boundary).
fn cut_at_line(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    match text[..end].rfind('\n') {
        Some(i) => &text[..=i],
        None => &text[..end],
    }
}

/// Where a change is counted: the top directory it is in, or is (a file at the root
/// counts under "/").
fn directory_of(c: &Change) -> String {
    let path = c.path.trim_start_matches('/');
    match path.split_once('/') {
        Some((top, _)) => format!("/{top}"),
        None if c.type_after == Some("dir") || c.type_before == Some("dir") => {
            format!("/{path}")
        }
        None => "/".into(),
    }
}

fn by_directory(changes: &[Change]) -> Vec<DirectoryCount> {
    // Counted in place: a 20 000-file run would otherwise clone every change (paths,
    // hashes, sizes) only to count it.
    let mut groups: HashMap<String, (ChangeSummary, usize)> = HashMap::new();
    for c in changes {
        let (counts, total) = groups.entry(directory_of(c)).or_default();
        counts.add(c.kind);
        *total += 1;
    }
    let mut dirs: Vec<DirectoryCount> = groups
        .into_iter()
        .map(|(path, (counts, total))| DirectoryCount {
            path,
            counts,
            total,
        })
        .collect();
    dirs.sort_by(|a, b| b.total.cmp(&a.total).then(a.path.cmp(&b.path)));
    dirs.truncate(TOP_DIRECTORIES);
    dirs
}

/// The command that prints the changes after the first `shown`, a page at a time.
pub fn rest_command(vault: &str, before: &str, after: &str, shown: usize, page: usize) -> String {
    format!(
        "avfs --vault {vault} diff {before} {after} --offset {shown} --limit {} --patch --json",
        page.max(1)
    )
}

fn hex(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

/// What the audit log keeps of an envelope: everything but the bodies (the change list,
/// the patches, the captured output), which are replaced by their BLAKE3 digests and
/// byte counts, so an exec adds a bounded row however much it changed or printed. The
/// changes themselves stay in the checkpoints the envelope names.
pub(crate) fn audit_record(env: &Envelope) -> Value {
    let mut v = serde_json::to_value(env).unwrap_or_default();
    let listed: Vec<&Change> = env.changes.iter().map(|c| &c.change).collect();
    let mut patches = blake3::Hasher::new();
    let mut patch_bytes = 0u64;
    for c in &listed {
        if let Some(p) = &c.patch {
            patches.update(p.as_bytes());
            patch_bytes += p.len() as u64;
        }
    }
    let list = serde_json::to_vec(&listed).unwrap_or_default();
    let mut digests = json!({
        "changes_listed": listed.len(),
        "changes_blake3": hex(&list),
        "patch_bytes": patch_bytes,
        "patches_blake3": patches.finalize().to_hex().to_string(),
    });
    if let Some(r) = &env.result {
        digests["stdout_blake3"] = json!(hex(r.stdout.as_bytes()));
        digests["stderr_blake3"] = json!(hex(r.stderr.as_bytes()));
        digests["stdout_kept_bytes"] = json!(r.stdout.len());
        digests["stderr_kept_bytes"] = json!(r.stderr.len());
        v["result"]["stdout"] = json!("");
        v["result"]["stderr"] = json!("");
    }
    v["changes"] = json!([]);
    v["audit_digests"] = digests;
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_end_at_lines_and_characters() {
        assert_eq!(cut_at_line("ab\ncd\nef", 7), "ab\ncd\n");
        assert_eq!(cut_at_line("abcdef", 3), "abc");
        assert_eq!(cut_at_line("éé", 3), "é");
        assert_eq!(cut_at_line("ab", 10), "ab");
    }
}
