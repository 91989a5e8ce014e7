//! `diff --stat`: lines inserted and deleted per changed file, as `git diff --stat`
//! counts them (a line diff of the two contents; binary or large files have no counts).

use rusqlite::Connection;
use serde::Serialize;

use super::{Change, ChangeKind, PATCH_LIMIT, text_of};
use crate::error::Result;

#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct FileStat {
    pub path: String,
    pub kind: ChangeKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Null for binary files, files over 1 MiB and changes without content (directories,
    /// modes, metadata).
    pub insertions: Option<u64>,
    pub deletions: Option<u64>,
    pub binary: bool,
}

#[derive(Clone, Debug, Default, Serialize, schemars::JsonSchema)]
pub struct StatTotals {
    pub files: usize,
    pub insertions: u64,
    pub deletions: u64,
}

/// Line counts for every change that touches a file's content.
pub fn stats(db: &Connection, changes: &[Change]) -> Result<(Vec<FileStat>, StatTotals)> {
    let mut out = Vec::with_capacity(changes.len());
    let mut totals = StatTotals::default();
    for c in changes {
        let is_file = |e: &Option<crate::store::objects::Entry>| {
            e.as_ref()
                .is_none_or(|e| e.kind == crate::store::objects::Kind::File)
        };
        let content = matches!(
            c.kind,
            ChangeKind::Added | ChangeKind::Deleted | ChangeKind::Modified | ChangeKind::Renamed
        ) && is_file(&c.before)
            && is_file(&c.after)
            && (c.before.is_some() || c.after.is_some());
        let (mut ins, mut del, mut binary) = (None, None, false);
        if content {
            let same = c.kind == ChangeKind::Renamed
                && c.before.as_ref().map(|e| e.hash) == c.after.as_ref().map(|e| e.hash);
            if same {
                (ins, del) = (Some(0), Some(0));
            } else {
                let big = |e: &Option<crate::store::objects::Entry>| {
                    e.as_ref().is_some_and(|e| e.size > PATCH_LIMIT)
                };
                let texts = if big(&c.before) || big(&c.after) {
                    None
                } else {
                    Some((
                        text_of(db, c.before.as_ref())?,
                        text_of(db, c.after.as_ref())?,
                    ))
                };
                match texts {
                    Some((Some(old), Some(new))) => {
                        let (i, d) = count(&old, &new);
                        (ins, del) = (Some(i), Some(d));
                    }
                    _ => binary = true,
                }
            }
            totals.files += 1;
            totals.insertions += ins.unwrap_or(0);
            totals.deletions += del.unwrap_or(0);
        }
        out.push(FileStat {
            path: c.path.clone(),
            kind: c.kind,
            from: c.from.clone(),
            insertions: ins,
            deletions: del,
            binary,
        });
    }
    Ok((out, totals))
}

fn count(old: &str, new: &str) -> (u64, u64) {
    crate::linediff::counts(old, new)
}
