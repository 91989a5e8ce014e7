//! `avfs pull`: fetch, then bring the remote's checkpoint into the workspace: nothing to
//! do, a fast-forward (O(1): the workspace is restored onto it), or a three-way merge
//! (`vault merge`'s) whose checkpoint has both heads as parents, so the next push is a
//! fast-forward.

use std::path::Path;

use serde::Serialize;

use super::commits::{self, CheckpointObject};
use super::fetch::{FetchReport, fetch};
use super::{Progress, refs};
use crate::diff::Change;
use crate::error::{Error, Result};
use crate::merge::{self, Conflict};
use crate::store::{Store, audit, now_ns};
use crate::workspace::Workspace;

#[derive(Clone, Debug, Serialize)]
pub struct PullReport {
    pub remote: String,
    pub workspace: String,
    /// `up_to_date`, `fast_forward` or `merged`.
    pub status: &'static str,
    /// The workspace's head checkpoint afterwards.
    pub checkpoint: Option<String>,
    /// The checkpoint of unsaved changes taken before a merge, if there were any.
    pub before: Option<String>,
    /// What the merge took from the remote.
    pub taken: Vec<Change>,
    pub conflicts: Vec<Conflict>,
    pub unresolved: usize,
    pub fetch: FetchReport,
}

pub fn pull(
    home: &Path,
    vault: &Path,
    workspace: &str,
    remote: &str,
    markers: bool,
    progress: &dyn Progress,
) -> Result<PullReport> {
    let fetched = fetch(home, vault, remote, false, progress)?;
    let remote = fetched.remote.clone();
    let mut store = Store::open(vault)?;
    let theirs = store
        .read(|db| refs::remembered(db, &remote))?
        .into_iter()
        .find(|(n, _)| n == workspace)
        .map(|(_, h)| h)
        .ok_or_else(|| {
            Error::Refused(format!(
                "{remote} has no workspace {workspace} to pull (push it first, or see `avfs remote show {remote}`)"
            ))
        })?;
    progress.phase("integrating", None);
    let label = format!("{remote}/{workspace}");
    let report = store.write(|db| {
        let mut ws = Workspace::open(db, workspace)?;
        let head = ws.head()?;
        let ours = head.as_ref().map(|h| commits::object_for(db, h.id)).transpose()?;
        let mut r = PullReport {
            remote: remote.clone(),
            workspace: workspace.to_string(),
            status: "up_to_date",
            checkpoint: head.as_ref().map(|h| h.name.clone()),
            before: None,
            taken: vec![],
            conflicts: vec![],
            unresolved: 0,
            fetch: fetched.clone(),
        };
        if let Some(o) = ours
            && (o == theirs || commits::is_ancestor(db, &theirs, &o)?)
        {
            return Ok(r);
        }
        let modified = ws.is_modified()?;
        let fast_forward = match ours {
            None => true,
            Some(o) => commits::is_ancestor(db, &o, &theirs)?,
        };
        if fast_forward && !modified {
            let id = commits::import(db, ws.info.id, &theirs, &remote)?;
            let cp = ws
                .checkpoints()?
                .into_iter()
                .find(|c| c.id == id)
                .ok_or_else(|| Error::Internal("imported checkpoint vanished".into()))?;
            ws.restore(&cp)?;
            r.status = "fast_forward";
            r.checkpoint = Some(cp.name);
        } else {
            let mut ours = ours;
            if modified {
                let name = format!("auto-before-pull-{}", now_ns() / 1_000_000);
                let msg = format!("unsaved changes before pulling {label}");
                let cp = ws.checkpoint(Some(&name), Some(&msg), "auto")?.checkpoint;
                ours = Some(commits::object_for(db, cp.id)?);
                r.before = Some(cp.name);
            }
            let ours = ours.ok_or_else(|| Error::Internal("no local head".into()))?;
            let base = commits::merge_base(db, &ours, &theirs)?.ok_or_else(|| {
                Error::Refused(format!(
                    "{workspace} and {label} share no checkpoint, so there is no merge base; clone {label} into a vault of its own instead"
                ))
            })?;
            let base_root = commits::load(db, &base)?
                .ok_or_else(|| Error::Internal("merge base not fetched".into()))?
                .root;
            let their = commits::load(db, &theirs)?
                .ok_or_else(|| Error::Internal("remote head not fetched".into()))?;
            // Their history becomes visible here (`checkpoint list`, `diff`).
            commits::import(db, ws.info.id, &theirs, &remote)?;
            let target_root = ws.flush()?;
            let opts = merge::Options {
                paths: &[],
                markers,
                target_label: workspace,
                fork_label: &label,
            };
            let plan = merge::plan(db, &base_root, &their.root, &target_root, &opts)?;
            merge::apply(&ws, &plan, &their.root)?;
            let name = format!("pull-{remote}-{}", now_ns() / 1_000_000);
            let msg = format!(
                "merge of {label}: {} taken, {} conflict(s)",
                plan.taken.len(),
                plan.conflicts.len()
            );
            let cp = ws.checkpoint(Some(&name), Some(&msg), "merge")?.checkpoint;
            commits::bind(
                db,
                cp.id,
                &CheckpointObject {
                    root: cp.root,
                    parents: vec![ours, theirs],
                    name: cp.name.clone(),
                    created_at_ns: cp.created_at_ns,
                    origin: cp.origin.clone(),
                    message: cp.message.clone(),
                },
            )?;
            r.status = "merged";
            r.checkpoint = Some(cp.name);
            r.unresolved = plan.unresolved();
            r.taken = plan.taken;
            r.conflicts = plan.conflicts;
        }
        audit::append(
            db,
            Some(workspace),
            audit::cli_actor(),
            "remote.pull",
            &serde_json::json!({"remote": remote, "status": r.status, "checkpoint": r.checkpoint, "conflicts": r.conflicts.len()}),
        )?;
        Ok(r)
    })?;
    Ok(report)
}
