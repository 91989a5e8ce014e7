//! Retention of automatic checkpoints. Every mutating `avfs exec` leaves an `exec-…`
//! checkpoint (origin `exec`) and every `avfs shell` a `shell-…` one (origin `shell`);
//! nothing else is automatic here. Checkpoints a person or agent saved
//! (`checkpoint save`, any name), `auto-before-restore-…` ones (they hold unsaved work),
//! merge records, the head of any workspace and checkpoints another workspace was forked
//! from or builds on are always kept. Pruning deletes checkpoint rows only (children are
//! re-parented as `checkpoint delete` does); `avfs gc` then gives their space back.

use rusqlite::Connection;
use serde::Serialize;
use serde_json::json;

use crate::error::{Error, Result};
use crate::store::{audit, meta_get, meta_set, now_ns};
use crate::workspace::{Checkpoint, Workspace};

/// Origins of the checkpoints retention may delete.
pub const AUTOMATIC_ORIGINS: &[&str] = &["exec", "shell"];

/// Vault setting (meta key): keep this many automatic checkpoints per workspace after
/// each exec (absent: keep all).
pub const AUTO_KEEP_KEY: &str = "auto_prune_keep_last";

/// What to keep. A checkpoint survives when any rule keeps it.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Retention {
    /// The newest N automatic checkpoints.
    pub keep_last: Option<usize>,
    /// Automatic checkpoints younger than D days.
    pub keep_days: Option<u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct PruneReport {
    pub workspace: String,
    pub dry_run: bool,
    pub retention: Retention,
    /// Deleted (or, in a dry run, would be).
    pub pruned: Vec<String>,
    /// Automatic checkpoints kept by the rules or because something depends on them.
    pub kept_automatic: usize,
    /// Checkpoints that are not automatic (always kept).
    pub kept_other: usize,
}

/// Checkpoints of this workspace that something outside retention's rules holds on to:
/// the head of any workspace, a checkpoint another workspace's checkpoints descend from
/// (a fork's base), and one a workspace was forked from by name.
fn pinned(db: &Connection, ws: &Workspace) -> Result<std::collections::HashSet<i64>> {
    let mut stmt = db.prepare(
        "SELECT c.id FROM checkpoint c WHERE c.workspace = ?1 AND (
           c.id IN (SELECT head FROM workspace WHERE head IS NOT NULL)
           OR c.id IN (SELECT parent FROM checkpoint WHERE parent IS NOT NULL AND workspace != ?1)
           OR c.name IN (SELECT parent_checkpoint FROM workspace
                         WHERE parent_id = ?1 AND parent_checkpoint IS NOT NULL))",
    )?;
    let ids = stmt.query_map([ws.info.id], |r| r.get(0))?;
    Ok(ids.collect::<rusqlite::Result<_>>()?)
}

/// Which of this workspace's checkpoints `r` deletes, oldest first.
pub fn plan(ws: &Workspace, r: Retention) -> Result<(Vec<Checkpoint>, usize, usize)> {
    if r.keep_last.is_none() && r.keep_days.is_none() {
        return Err(Error::InvalidArgument(
            "checkpoint prune".into(),
            "say what to keep: --keep-last N and/or --keep-days D".into(),
        ));
    }
    let pins = pinned(ws.db, ws)?;
    let all = ws.checkpoints()?;
    let (auto, other): (Vec<Checkpoint>, Vec<Checkpoint>) = all
        .into_iter()
        .partition(|c| AUTOMATIC_ORIGINS.contains(&c.origin.as_str()));
    let cutoff = r
        .keep_days
        .map(|d| now_ns() - (d as i64).saturating_mul(86_400_000_000_000));
    let n = auto.len();
    let mut doomed = Vec::new();
    for (i, c) in auto.into_iter().enumerate() {
        // `checkpoints()` lists oldest first: the last `keep_last` are the newest.
        let recent = r.keep_last.is_some_and(|k| n - i <= k);
        let young = cutoff.is_some_and(|t| c.created_at_ns >= t);
        if !(recent || young || pins.contains(&c.id)) {
            doomed.push(c);
        }
    }
    let kept_auto = n - doomed.len();
    Ok((doomed, kept_auto, other.len()))
}

/// Deletes what `plan` names (unless `dry_run`), in the caller's transaction; with
/// `audit_as`, records it in the audit log as that actor (callers that audit the whole
/// command themselves pass `None`).
pub fn prune(
    ws: &Workspace,
    r: Retention,
    dry_run: bool,
    audit_as: Option<&str>,
) -> Result<PruneReport> {
    let (doomed, kept_automatic, kept_other) = plan(ws, r)?;
    let pruned: Vec<String> = doomed.iter().map(|c| c.name.clone()).collect();
    if !dry_run && !pruned.is_empty() {
        for name in &pruned {
            ws.delete_checkpoint(name)?;
        }
        if let Some(actor) = audit_as {
            audit::append(
                ws.db,
                Some(&ws.info.name),
                actor,
                "checkpoint.prune",
                &json!({"retention": r, "pruned": pruned}),
            )?;
        }
    }
    Ok(PruneReport {
        workspace: ws.info.name.clone(),
        dry_run,
        retention: r,
        pruned,
        kept_automatic,
        kept_other,
    })
}

/// The vault's automatic retention (`avfs checkpoint retention`), if set.
pub fn auto_keep(db: &Connection) -> Result<Option<usize>> {
    Ok(meta_get(db, AUTO_KEEP_KEY)?.and_then(|n| usize::try_from(n).ok()))
}

/// Sets (`Some`) or clears (`None`) the vault's automatic retention.
pub fn set_auto_keep(db: &Connection, keep: Option<usize>) -> Result<()> {
    match keep {
        Some(n) => meta_set(db, AUTO_KEEP_KEY, n as i64),
        None => {
            db.execute("DELETE FROM meta WHERE key = ?1", [AUTO_KEEP_KEY])?;
            Ok(())
        }
    }
}

/// After a run: applies the vault's automatic retention to `workspace`, if one is set.
/// Best effort: a run that worked is not reported as failed because pruning did not.
pub fn after_run(store: &mut crate::store::Store, workspace: &str) {
    let r = store.write(|db| {
        let Some(keep) = auto_keep(db)? else {
            return Ok(());
        };
        let ws = Workspace::open(db, workspace)?;
        let retention = Retention {
            keep_last: Some(keep),
            keep_days: None,
        };
        prune(&ws, retention, false, Some("exec")).map(|_| ())
    });
    if let Err(e) = r {
        eprintln!("avfs: automatic checkpoint pruning in {workspace}: {e}");
    }
}
