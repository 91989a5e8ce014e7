//! `avfs vault merge`: a three-way merge of a fork back into its parent (or another
//! workspace of the same vault file).

use std::ffi::OsString;

use clap::{Args, ValueEnum};
use serde_json::json;

use super::Ctx;
use super::checkpoint::print_changes;
use crate::documents::CheckpointDoc;
use crate::documents::history::{MergeReport, MergeSummary};
use crate::error::{Error, Result};
use crate::merge::{self, Resolution};
use crate::registry::VaultRef;
use crate::workspace::Store;
use crate::workspace::path::{display, parse};
use crate::workspace::{Workspace, find_workspace};

#[derive(Args, Debug)]
pub struct MergeArgs {
    /// The fork to merge (a registered name).
    #[arg(required_unless_present_any = ["cont", "abort"])]
    fork: Option<String>,
    /// Finish the pending merge (one that left unresolved conflicts) after editing the
    /// conflicting files: the target's live state becomes the merge's checkpoint.
    #[arg(long = "continue", conflicts_with_all = ["abort", "dry_run", "paths"])]
    cont: bool,
    /// Undo the pending merge: the target goes back to its checkpoint from before it.
    #[arg(long, conflicts_with_all = ["dry_run", "paths"])]
    abort: bool,
    /// Merge into this vault or fork of the same file (default: the one FORK was forked from).
    #[arg(long, value_name = "TARGET")]
    into: Option<String>,
    /// Merge only this path and what is below it (repeatable).
    #[arg(long = "path", value_name = "P")]
    paths: Vec<OsString>,
    /// Work out and print the merge, change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Text files both sides edited are merged line by line; what is left is a conflict.
    /// `report` (default): a merge with conflicts changes nothing, lists them and exits 1.
    /// `markers`: it is applied and left pending, with <<<<<<< ======= >>>>>>> where text
    /// edits overlap and the fork's version of a binary file beside the target's
    /// (NAME.FORK); edit, then `--continue`.
    #[arg(long, value_enum, default_value_t = ConflictMode::Report, value_name = "MODE")]
    conflicts: ConflictMode,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConflictMode {
    Report,
    Markers,
}

/// The newest state of `fork` recorded as merged into `target` whose merge the target
/// still descends from: its `merge-FORK-STAMP` checkpoint is the target's head or in its
/// history. A merge undone by restoring an earlier checkpoint no longer counts.
fn last_merge_point(
    fork: &Workspace,
    target: &Workspace,
    fork_name: &str,
) -> Result<Option<crate::workspace::Checkpoint>> {
    for (point, stamp) in fork.merge_points(&target.info.name)? {
        if let Some(merged) = target.own_checkpoint(&format!("merge-{fork_name}-{stamp}"))?
            && target.descends_from(merged.id)?
        {
            return Ok(Some(point));
        }
    }
    Ok(None)
}

/// The workspace a fork merges into by default: the one it was forked from.
fn parent_of(reg: &crate::registry::Registry, fork: &VaultRef, parent: &str) -> Result<VaultRef> {
    Ok(reg
        .names_in(&fork.path)?
        .into_iter()
        .find(|v| v.workspace == parent)
        .unwrap_or(VaultRef {
            name: parent.into(),
            path: fork.path.clone(),
            workspace: parent.into(),
        }))
}

/// `--continue` and `--abort` of the merge pending in the target: `--into`, else FORK's
/// parent, else the selected vault.
fn resolve_pending(ctx: &Ctx, a: &MergeArgs) -> Result<i32> {
    let reg = ctx.registry()?;
    let target = match (&a.into, &a.fork) {
        (Some(n), _) => reg
            .resolve(Some(n))?
            .ok_or_else(|| Error::NoSuchVault(n.clone()))?,
        (None, Some(f)) => {
            let fork = reg
                .resolve(Some(f))?
                .ok_or_else(|| Error::NoSuchVault(f.clone()))?;
            let info = Store::open_read(&fork.path)?
                .read(|db| find_workspace(db, &fork.workspace))?
                .ok_or_else(|| Error::NoSuchVault(f.clone()))?;
            match info.parent {
                Some(p) => parent_of(&reg, &fork, &p)?,
                None => fork,
            }
        }
        (None, None) => ctx.existing()?.1,
    };
    let doc = if a.cont {
        ctx.mutate_in(&target, "vault.merge.continue", |ws| {
            let (p, cp) = crate::mergepending::finish(ws)?;
            let paths: Vec<String> = p.conflicts.iter().map(|c| c.path.clone()).collect();
            let doc = json!({
                "action": "continued", "fork": p.fork, "into": p.into,
                "checkpoint": CheckpointDoc::of(&cp), "conflicts": paths,
            });
            let detail = json!({"fork": p.fork, "into": p.into, "checkpoint": cp.name});
            Ok((doc, detail))
        })?
    } else {
        ctx.mutate_in(&target, "vault.merge.abort", |ws| {
            let p = crate::mergepending::abort(ws)?;
            let paths: Vec<String> = p.conflicts.iter().map(|c| c.path.clone()).collect();
            let doc = json!({
                "action": "aborted", "fork": p.fork, "into": p.into,
                "restored": p.before, "conflicts": paths,
            });
            let detail = json!({"fork": p.fork, "into": p.into, "restored": p.before});
            Ok((doc, detail))
        })?
    };
    ctx.out.emit(&doc, || {
        if a.cont {
            println!(
                "merge of {} into {} completed: checkpoint {}",
                doc["fork"].as_str().unwrap_or(""),
                doc["into"].as_str().unwrap_or(""),
                doc["checkpoint"]["name"].as_str().unwrap_or("")
            );
        } else {
            println!(
                "merge of {} into {} aborted: {} restored to checkpoint {}",
                doc["fork"].as_str().unwrap_or(""),
                doc["into"].as_str().unwrap_or(""),
                doc["into"].as_str().unwrap_or(""),
                doc["restored"].as_str().unwrap_or("")
            );
        }
    });
    Ok(0)
}

pub fn merge(ctx: &Ctx, a: MergeArgs) -> Result<i32> {
    if a.cont || a.abort {
        return resolve_pending(ctx, &a);
    }
    let fork_sel = a.fork.clone().unwrap_or_default();
    let reg = ctx.registry()?;
    let fork = reg
        .resolve(Some(&fork_sel))?
        .ok_or_else(|| Error::NoSuchVault(fork_sel.clone()))?;
    let info = Store::open(&fork.path)?
        .read(|db| find_workspace(db, &fork.workspace))?
        .ok_or_else(|| Error::NoSuchVault(fork_sel.clone()))?;
    let (Some(parent), Some(base_name)) = (info.parent.clone(), info.parent_checkpoint.clone())
    else {
        return Err(Error::Refused(format!(
            "{} is not a fork made from a checkpoint, so it has no merge base",
            fork.name
        )));
    };
    let target = match &a.into {
        Some(n) => reg
            .resolve(Some(n))?
            .ok_or_else(|| Error::NoSuchVault(n.clone()))?,
        None => parent_of(&reg, &fork, &parent)?,
    };
    if target.path != fork.path {
        return Err(Error::InvalidArgument(
            target.name,
            format!(
                "not in {}'s vault file ({}): a fork merges into a workspace of its own file",
                fork.name,
                fork.path.display()
            ),
        ));
    }
    if target.workspace == fork.workspace {
        return Err(Error::InvalidArgument(
            target.name,
            "a fork cannot be merged into itself".into(),
        ));
    }
    let paths: Vec<Vec<Vec<u8>>> = a.paths.iter().map(|p| parse(p)).collect::<Result<_>>()?;
    let shown_paths: Vec<String> = paths.iter().map(|p| display(p)).collect();
    ctx.sync_mount(&fork)?;
    let markers = a.conflicts == ConflictMode::Markers;
    let dry_run = a.dry_run;

    // Everything happens in the target's transaction: the base and the fork are read in it.
    let work = |ws: &mut Workspace| -> Result<MergeReport> {
        let db = ws.db;
        // A merge that left conflicts must be finished or undone first: merging on top
        // of it would mix two merges and could drop the first one's fork side.
        // (A dry run changes nothing: it may look.)
        if !dry_run && let Some(p) = crate::mergepending::get(db, &ws.info.name)? {
            return Err(crate::mergepending::refusal(&p));
        }
        let mut fork_ws = Workspace::open(db, &fork.workspace)?;
        // After a merge into this target that the target still has (not undone by a
        // restore), the base is the fork as it was then merged; before it, the checkpoint
        // the fork was made from.
        let base = match last_merge_point(&fork_ws, ws, &fork.name)? {
            Some(cp) => cp,
            None => Workspace::open(db, &parent)
                .map_err(|_| {
                    Error::Refused(format!(
                        "{} was forked from workspace {parent}, which is gone: no merge base",
                        fork.name
                    ))
                })?
                .find_checkpoint(&base_name)
                .map_err(|_| {
                    Error::Refused(format!(
                        "{}'s merge base, checkpoint {base_name} of {parent}, was deleted",
                        fork.name
                    ))
                })?,
        };
        let base_name = base.name.clone();
        let fork_root = fork_ws.flush()?;
        let target_root = ws.flush()?;
        let opts = merge::Options {
            paths: &paths,
            markers,
            target_label: &target.name,
            fork_label: &fork.name,
        };
        let plan = merge::plan(db, &base.root, &fork_root, &target_root, &opts)?;
        // Without markers, a merge with conflicts changes nothing: applying the rest
        // would keep the target's side of each conflict and drop the fork's.
        let refused = !markers && plan.unresolved() > 0;
        let mut before = None;
        let mut checkpoint = None;
        let mut pending = false;
        // Conflicts that kept the target's side change nothing, but still leave the merge
        // pending: the fork's side must not be dropped by moving the base.
        if !refused && (!plan.actions.is_empty() || (!dry_run && plan.unresolved() > 0)) {
            if !dry_run {
                before = Some(if ws.is_modified()? {
                    let name = format!(
                        "auto-before-merge-{}",
                        crate::workspace::now_ns() / 1_000_000
                    );
                    let msg = format!("unsaved changes before merging {}", fork.name);
                    ws.checkpoint(Some(&name), Some(&msg), "auto")?
                        .checkpoint
                        .name
                } else {
                    ws.head()?.map(|h| h.name).unwrap_or_default()
                });
            }
            merge::apply(ws, &plan, &fork_root)?;
            if !dry_run && plan.unresolved() > 0 {
                // Not a finished merge: no merge checkpoint and no merge point until the
                // user resolves the conflicts (`--continue`) or undoes it (`--abort`).
                let p = crate::mergepending::Pending {
                    fork: fork.name.clone(),
                    fork_workspace: fork.workspace.clone(),
                    into: target.name.clone(),
                    base: base_name.clone(),
                    before: before.clone().unwrap_or_default(),
                    paths: shown_paths.clone(),
                    stamp: crate::workspace::now_ns() / 1_000_000,
                    started_at_ns: crate::workspace::now_ns(),
                    conflicts: vec![],
                };
                crate::mergepending::start(ws, &fork_ws, &fork_root, p, &plan.conflicts)?;
                pending = true;
            } else if !dry_run {
                let stamp = crate::workspace::now_ns() / 1_000_000;
                let name = format!("merge-{}-{stamp}", fork.name);
                let msg = format!(
                    "merge of {} (base {base_name}): {} taken, {} conflict(s)",
                    fork.name,
                    plan.taken.len(),
                    plan.conflicts.len()
                );
                checkpoint = Some(ws.checkpoint(Some(&name), Some(&msg), "merge")?.checkpoint);
                // A merge of the whole fork moves the base of the next one; a merge of
                // some paths does not (the rest of the fork is still unmerged).
                if paths.is_empty() {
                    fork_ws.record_merge_point(&ws.info.name, stamp, &fork_root)?;
                }
            }
        }
        let unresolved = plan.unresolved();
        Ok(MergeReport {
            fork: fork.name.clone(),
            into: target.name.clone(),
            base: base_name.clone(),
            dry_run,
            paths: shown_paths.clone(),
            before,
            checkpoint: checkpoint.as_ref().map(CheckpointDoc::of),
            clean: unresolved == 0,
            pending,
            refused,
            summary: MergeSummary {
                taken: plan.taken.len(),
                line_merged: plan.line_merged.len(),
                conflicts: plan.conflicts.len(),
                unresolved,
            },
            taken: plan.taken,
            line_merged: plan.line_merged,
            conflicts: plan.conflicts,
        })
    };
    let report = if dry_run {
        ctx.trial_in(&target, work)?
    } else {
        ctx.mutate_in(&target, "vault.merge", |ws| {
            let r = work(ws)?;
            let detail = json!({
                "fork": r.fork, "into": r.into, "base": r.base, "paths": r.paths,
                "taken": r.summary.taken,
                "conflicts": r.conflicts.iter().map(|c| &c.path).collect::<Vec<_>>(),
                "checkpoint": r.checkpoint.as_ref().map(|c| &c.name),
                "pending": r.pending,
                "refused": r.refused,
            });
            Ok((r, detail))
        })?
    };
    let paint = ctx.out.paint();
    ctx.out.emit(&report, || {
        let verb = match (report.refused, report.dry_run) {
            (true, true) => "would refuse to merge",
            (true, false) => "refused to merge",
            (false, true) => "would merge",
            (false, false) => "merged",
        };
        let s = &report.summary;
        println!(
            "{verb} {} into {} (base {}): {} taken ({} line-merged), {} conflict{}",
            report.fork,
            report.into,
            report.base,
            s.taken,
            s.line_merged,
            s.conflicts,
            if s.conflicts == 1 { "" } else { "s" }
        );
        print_changes(&report.taken, paint);
        for c in &report.conflicts {
            let what = match c.resolution {
                _ if report.refused => "both sides changed it".into(),
                Resolution::KeptTarget => format!("kept {}'s version", report.into),
                Resolution::Markers => "conflict markers written".into(),
                Resolution::BothKept => format!(
                    "{}'s version kept, the fork's written to {}",
                    report.into,
                    c.kept_as.as_deref().unwrap_or("?")
                ),
            };
            let sigil = paint.bad("C");
            println!(
                "{sigil} {}  {} (fork {}, {} {}): {what}",
                c.path,
                serde_json::to_value(c.kind)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default(),
                c.fork,
                report.into,
                c.target
            );
        }
        if report.refused {
            println!(
                "nothing changed: the fork's edits conflict with {}'s; merge with \
                 `--conflicts=markers` to write both sides out and resolve them by hand",
                report.into
            );
            return;
        }
        if let Some(cp) = &report.checkpoint {
            println!("checkpoint: {}", cp.name);
        }
        if report.pending {
            println!(
                "merge pending: {} unresolved conflict{}; edit the files, then \
                 `avfs vault merge --continue --into {}`, or undo with \
                 `avfs vault merge --abort --into {}`",
                s.unresolved,
                if s.unresolved == 1 { "" } else { "s" },
                report.into,
                report.into
            );
            return;
        }
        if let Some(b) = report.before.as_deref().filter(|b| !b.is_empty()) {
            println!(
                "undo with: avfs --vault {} checkpoint restore {b}",
                report.into
            );
        }
    });
    Ok(if report.clean { 0 } else { 1 })
}
