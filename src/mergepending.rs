//! A merge that left conflicts nobody has resolved yet stays pending until the user
//! finishes it (`vault merge --continue`, after editing the files) or undoes it
//! (`vault merge --abort`). While it is pending the target's next merge is refused, and
//! the fork is not recorded as merged: a merge whose conflicts kept the target's side
//! must not move the base of the next merge past the fork's side, or that side would be
//! dropped silently.
//!
//! The record lives in the vault's `meta` table (key `merge_pending:TARGET`, a JSON
//! text), so no format change is needed. The fork's state as merged is kept alive by a
//! checkpoint of the fork, `pending-merge-into-TARGET-STAMP` (origin `merge`), which
//! `--continue` turns into the usual merge point and `--abort` deletes.

use rusqlite::{Connection, params};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::merge::{Conflict, Resolution};
use crate::store::objects::Hash;
use crate::store::objects::Kind;
use crate::store::{meta_set_text, now_ns};
use crate::workspace::{Checkpoint, Workspace};

/// One conflict of a pending merge.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PendingConflict {
    pub path: String,
    /// Path components (names are bytes).
    pub comps: Vec<Vec<u8>>,
    /// `kept_target`, `markers` or `both_kept`.
    pub resolution: Resolution,
    /// With `both_kept`: where the fork's version was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_as: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Pending {
    /// The fork's registered name, and its workspace in the file.
    pub fork: String,
    pub fork_workspace: String,
    /// The target's registered name.
    pub into: String,
    /// The merge base's checkpoint name.
    pub base: String,
    /// The target's checkpoint from before the merge: what `--abort` restores.
    pub before: String,
    /// `--path` filters: a merge of some paths does not move the next merge's base.
    pub paths: Vec<String>,
    pub stamp: i64,
    pub started_at_ns: i64,
    pub conflicts: Vec<PendingConflict>,
}

fn key(target_ws: &str) -> String {
    format!("merge_pending:{target_ws}")
}

fn held_name(target_ws: &str, stamp: i64) -> String {
    format!("pending-merge-into-{target_ws}-{stamp}")
}

/// The merge pending in workspace `target_ws`, if any.
pub fn get(db: &Connection, target_ws: &str) -> Result<Option<Pending>> {
    let Some(text) = crate::store::meta_get_text(db, &key(target_ws))? else {
        return Ok(None);
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| Error::Corrupt {
            path: Default::default(),
            reason: format!("the pending merge record of {target_ws} does not decode: {e}"),
        })
}

/// The error for a merge, pull or other change refused while a merge is pending.
pub fn refusal(p: &Pending) -> Error {
    let paths: Vec<&str> = p.conflicts.iter().map(|c| c.path.as_str()).collect();
    Error::Refused(format!(
        "a merge of {} into {} is pending with {} unresolved conflict(s) ({}); edit those \
         files, then `avfs vault merge --continue --into {}`, or undo it with \
         `avfs vault merge --abort --into {}`",
        p.fork,
        p.into,
        p.conflicts.len(),
        paths.join(", "),
        p.into,
        p.into
    ))
}

/// Records a merge into `target` that left `conflicts` unresolved; `fork_root` is the
/// fork's state that was merged, kept by a checkpoint of the fork.
pub fn start(
    target: &Workspace,
    fork: &Workspace,
    fork_root: &Hash,
    mut p: Pending,
    conflicts: &[Conflict],
) -> Result<Pending> {
    p.conflicts = conflicts
        .iter()
        .map(|c| PendingConflict {
            path: c.path.clone(),
            comps: c.comps.clone(),
            resolution: c.resolution,
            kept_as: c.kept_as.clone(),
        })
        .collect();
    let name = held_name(&target.info.name, p.stamp);
    let message = format!(
        "{} as merged into {} (merge pending)",
        fork.info.name, target.info.name
    );
    target
        .db
        .prepare_cached(
            "INSERT INTO checkpoint (workspace, name, root, parent, created_at_ns, origin, message, audit_head)
             VALUES (?1, ?2, ?3, (SELECT head FROM workspace WHERE id = ?1), ?4, 'merge', ?5,
                     (SELECT MAX(id) FROM audit))",
        )?
        .execute(params![fork.info.id, name, &fork_root.0[..], now_ns(), message])?;
    let text = serde_json::to_string(&p).map_err(|e| Error::Internal(e.to_string()))?;
    meta_set_text(target.db, &key(&target.info.name), &text)?;
    Ok(p)
}

/// The fork's checkpoint that holds the state that was merged.
fn held(fork: &Workspace, target_ws: &str, stamp: i64) -> Result<Option<Checkpoint>> {
    fork.own_checkpoint(&held_name(target_ws, stamp))
}

fn clear(db: &Connection, target_ws: &str) -> Result<()> {
    db.prepare_cached("DELETE FROM meta WHERE key = ?1")?
        .execute([key(target_ws)])?;
    Ok(())
}

/// Files of a pending merge that still hold conflict markers, and the fork's copies of
/// binary files that are still beside the target's (the user keeps one: deletes the
/// copy, or moves it over the original).
fn still_marked(ws: &Workspace, p: &Pending) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for c in &p.conflicts {
        if let Some(at) = &c.kept_as
            && ws
                .resolve(
                    &crate::workspace::path::parse(std::ffi::OsStr::new(at))?,
                    false,
                )?
                .is_some()
        {
            out.push(at.clone());
        }
    }
    for c in p
        .conflicts
        .iter()
        .filter(|c| c.resolution == Resolution::Markers)
    {
        let Some(node) = ws.resolve(&c.comps, false)? else {
            continue;
        };
        if node.kind != Kind::File {
            continue;
        }
        let data = ws.read(&node, 0, node.size as usize)?;
        let marked = |m: &[u8]| {
            data.split(|b| *b == b'\n')
                .any(|l| l.starts_with(m) && l.get(7).is_none_or(|b| *b == b' '))
        };
        if marked(b"<<<<<<<") && marked(b">>>>>>>") {
            out.push(c.path.clone());
        }
    }
    Ok(out)
}

/// `--continue`: the target's live state, as the user left it, becomes the merge's
/// checkpoint `merge-FORK-STAMP`; for a merge of the whole fork the fork's merged state
/// becomes the base of its next merge into this target.
pub fn finish(ws: &mut Workspace) -> Result<(Pending, Checkpoint)> {
    let target_ws = ws.info.name.clone();
    let p = get(ws.db, &target_ws)?.ok_or_else(|| nothing_pending(&target_ws))?;
    let marked = still_marked(ws, &p)?;
    if !marked.is_empty() {
        return Err(Error::Refused(format!(
            "{} still hold(s) conflict markers (<<<<<<< ... >>>>>>>) or still is the \
             fork's copy of a binary file (keep one version: remove the copy or move it \
             over the original); then `avfs vault merge --continue --into {}` again (or \
             `--abort`)",
            marked.join(", "),
            p.into
        )));
    }
    let name = format!("merge-{}-{}", p.fork, p.stamp);
    let msg = format!(
        "merge of {} (base {}): {} conflict(s) resolved by hand",
        p.fork,
        p.base,
        p.conflicts.len()
    );
    let cp = ws.checkpoint(Some(&name), Some(&msg), "merge")?.checkpoint;
    if let Ok(fork) = Workspace::open(ws.db, &p.fork_workspace)
        && let Some(h) = held(&fork, &target_ws, p.stamp)?
    {
        if p.paths.is_empty() {
            fork.record_merge_point(&target_ws, p.stamp, &h.root)?;
        }
        fork.delete_checkpoint(&h.name)?;
    }
    clear(ws.db, &target_ws)?;
    Ok((p, cp))
}

/// `--abort`: the target goes back to its checkpoint from before the merge (edits made
/// since are dropped, as the user asked), and the fork stays unmerged.
pub fn abort(ws: &mut Workspace) -> Result<Pending> {
    let target_ws = ws.info.name.clone();
    let p = get(ws.db, &target_ws)?.ok_or_else(|| nothing_pending(&target_ws))?;
    let before = ws.find_checkpoint(&p.before)?;
    ws.restore(&before)?;
    if let Ok(fork) = Workspace::open(ws.db, &p.fork_workspace)
        && let Some(h) = held(&fork, &target_ws, p.stamp)?
    {
        fork.delete_checkpoint(&h.name)?;
    }
    clear(ws.db, &target_ws)?;
    Ok(p)
}

fn nothing_pending(target_ws: &str) -> Error {
    Error::Refused(format!(
        "no merge is pending in {target_ws} (a merge is pending only when it left unresolved \
         conflicts); see `avfs vault merge --help`"
    ))
}
