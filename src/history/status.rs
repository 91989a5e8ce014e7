//! `avfs status`: where you are and what is unsaved, like `git status`: the vault and
//! workspace, the stable path runs see it at, the head checkpoint, the changes since it
//! (counted by kind), live mounts, runs in progress, kept overlays (their keeper processes)
//! and approvals waiting for a person.

use std::fs::OpenOptions;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use rusqlite::Connection;
use serde::Serialize;

use crate::context::Context;
use crate::diff::{ChangeSummary, diff_roots, renames};
use crate::error::Result;
use crate::runlock::{Holder, lock_path};
use crate::store::Store;
use crate::store::objects;
use crate::util::rfc3339;
use crate::workspace::Workspace;

/// Changed paths listed by name at most (the summary counts all).
pub const LISTED_CHANGES: usize = 50;

#[derive(Clone, Debug, Serialize)]
pub struct HeadInfo {
    pub name: String,
    pub created_at: String,
    pub origin: String,
    pub message: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ChangedPath {
    pub path: String,
    pub kind: crate::diff::ChangeKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct MountInfo {
    pub mountpoint: PathBuf,
    pub workspace: String,
    pub pid: u32,
    pub readonly: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct RunInfo {
    pub workspace: String,
    /// The exec id (`ex-…`), as in the envelope; null when the lock's holder is unknown.
    pub exec: Option<String>,
    pub pid: Option<u32>,
    pub command: Option<String>,
    pub started_at: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ApprovalInfo {
    pub id: String,
    pub workspace: String,
    pub command: serde_json::Value,
    pub created_at: String,
}

/// A workspace's ignored directory: what it holds and where.
#[derive(Clone, Debug, Serialize)]
pub struct IgnoredInfo {
    pub files: u64,
    pub bytes: u64,
    pub path: PathBuf,
}

#[derive(Clone, Debug, Serialize)]
pub struct Status {
    pub vault: String,
    pub vault_path: PathBuf,
    pub workspace: String,
    /// The fork's parent workspace, if this is a fork.
    pub parent: Option<String>,
    /// Where runs (`avfs exec`, `avfs shell`) see this workspace.
    pub workspace_path: PathBuf,
    pub head: Option<HeadInfo>,
    /// True when the live state equals the head checkpoint.
    pub clean: bool,
    /// Changes since the head checkpoint (since empty when there is none).
    pub summary: ChangeSummary,
    /// The first `LISTED_CHANGES` changed paths.
    pub changes: Vec<ChangedPath>,
    /// More changes than listed.
    pub changes_truncated: bool,
    /// Checkpoints of this workspace, and how many of them exec and shell made.
    pub checkpoints: usize,
    pub automatic_checkpoints: usize,
    /// The vault's automatic retention (`avfs checkpoint retention`).
    pub auto_prune_keep_last: Option<usize>,
    pub mounts: Vec<MountInfo>,
    pub runs: Vec<RunInfo>,
    /// Kept overlays of the vault's workspaces (`docs/exec.md`): the keeper processes
    /// avfs leaves running between runs.
    pub kept_overlays: Vec<crate::engine::kept::KeptInfo>,
    /// This workspace's ignored files: matched by its ignore rules, outside the history
    /// and the vault file (`None` before its first run).
    pub ignored: Option<IgnoredInfo>,
    pub pending_approvals: Vec<ApprovalInfo>,
    /// Commands worth running next.
    pub next: Vec<String>,
}

/// Whether a run holds `workspace`'s run lock, and who. Takes the lock for an instant
/// when it is free (a run starting meanwhile waits that instant), never creates it.
fn run_in_progress(home: &Path, vault: &Path, workspace: &str) -> Option<RunInfo> {
    let path = lock_path(home, vault, workspace);
    let mut file = OpenOptions::new().read(true).open(&path).ok()?;
    // SAFETY: flock on a descriptor we own; a shared lock is released when `file` closes.
    let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) };
    if r == 0 {
        return None;
    }
    let mut text = String::new();
    let _ = file.read_to_string(&mut text);
    let h = serde_json::from_str::<Holder>(&text).ok();
    Some(RunInfo {
        workspace: workspace.to_string(),
        exec: h.as_ref().map(|h| h.exec.clone()),
        pid: h.as_ref().map(|h| h.pid),
        command: h.as_ref().map(|h| h.command.clone()),
        started_at: h.as_ref().map(|h| rfc3339(h.started_at_ns)),
    })
}

fn workspaces(db: &Connection) -> Result<Vec<String>> {
    let mut stmt = db.prepare("SELECT name FROM workspace ORDER BY id")?;
    let rows = stmt.query_map([], |r| r.get(0))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// The status of the selected vault's workspace. Reads only.
pub fn status(ctx: &Context) -> Result<Status> {
    let (reg, v) = ctx.target()?;
    ctx.sync_mount(&v)?;
    let mut store = Store::open_read(&v.path)?;
    let mut st = store.read(|db| {
        let ws = Workspace::open(db, &v.workspace)?;
        let head = ws.head()?;
        let live = ws.live_root()?;
        let base = match &head {
            Some(h) => h.root,
            None => {
                let (uid, gid) = crate::workspace::current_uid_gid();
                objects::put_tree_scratch(db, &objects::empty_root(uid, gid, 0))?
            }
        };
        let changes = renames::detect(
            db,
            diff_roots(db, &base, &live)?,
            renames::DEFAULT_THRESHOLD,
        )?;
        let cps = ws.checkpoints()?;
        let automatic = cps
            .iter()
            .filter(|c| super::prune::AUTOMATIC_ORIGINS.contains(&c.origin.as_str()))
            .count();
        let approvals = crate::store::approvals::list(db, false)?
            .into_iter()
            .filter(|a| a.state == "pending")
            .map(|a| ApprovalInfo {
                id: a.id,
                workspace: a.workspace,
                command: a.request.get("command").cloned().unwrap_or_default(),
                created_at: rfc3339(a.created_at_ns),
            })
            .collect();
        let names = workspaces(db)?;
        let runs = names
            .iter()
            .filter_map(|w| run_in_progress(&ctx.home, &v.path, w))
            .collect();
        let kept_overlays = names
            .iter()
            .filter_map(|w| crate::engine::kept::describe(&ctx.home, &v.path, w))
            .collect();
        Ok(Status {
            vault: v.name.clone(),
            vault_path: v.path.clone(),
            workspace: v.workspace.clone(),
            parent: ws.info.parent.clone(),
            workspace_path: crate::context::path::workspace_path(db, &ctx.home, &reg, &v)?,
            clean: head.as_ref().is_some_and(|h| h.root == live),
            head: head.map(|h| HeadInfo {
                name: h.name,
                created_at: rfc3339(h.created_at_ns),
                origin: h.origin,
                message: h.message,
            }),
            summary: ChangeSummary::of(&changes),
            changes_truncated: changes.len() > LISTED_CHANGES,
            changes: changes
                .into_iter()
                .take(LISTED_CHANGES)
                .map(|c| ChangedPath {
                    path: c.path,
                    kind: c.kind,
                    from: c.from,
                })
                .collect(),
            checkpoints: cps.len(),
            automatic_checkpoints: automatic,
            auto_prune_keep_last: super::prune::auto_keep(db)?,
            mounts: vec![],
            runs,
            kept_overlays,
            ignored: ignored_info(&ctx.home, &v.path, &v.workspace),
            pending_approvals: approvals,
            next: vec![],
        })
    })?;
    st.mounts = crate::mount::list_mounts(&ctx.home)?
        .into_iter()
        .filter(|m| same_file(&m.vault_path, &v.path))
        .map(|m| MountInfo {
            mountpoint: m.mountpoint,
            workspace: m.workspace,
            pid: m.pid,
            readonly: m.readonly,
        })
        .collect();
    st.next = next_steps(&st);
    Ok(st)
}

fn ignored_info(home: &Path, vault: &Path, workspace: &str) -> Option<IgnoredInfo> {
    let path = crate::engine::ignored::ignored_dir(home, vault, workspace);
    if !path.is_dir() {
        return None;
    }
    let c = crate::engine::ignored::measure(&path);
    Some(IgnoredInfo {
        files: c.files,
        bytes: c.bytes,
        path,
    })
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

fn next_steps(st: &Status) -> Vec<String> {
    let mut next = vec![];
    if !st.clean {
        if st.head.is_some() {
            next.push("avfs diff --head     (what changed since the head checkpoint)".into());
        }
        next.push("avfs checkpoint save NAME -m MESSAGE   (keep these changes)".into());
        if let Some(h) = &st.head {
            next.push(format!(
                "avfs checkpoint restore {}   (drop them; they are kept in an automatic checkpoint)",
                h.name
            ));
        }
    }
    for a in &st.pending_approvals {
        next.push(format!("avfs approve {}   (or avfs deny {})", a.id, a.id));
    }
    if st.automatic_checkpoints > 20 && st.auto_prune_keep_last.is_none() {
        next.push(
            "avfs checkpoint prune --keep-last 10   (then avfs gc, to give the space back)".into(),
        );
    }
    next
}
