//! What a workspace's services wrote between two runs, reported as theirs.
//!
//! A service runs in the workspace's kept overlay and writes to its upper; nothing takes
//! those writes in until the next run's ingest, which would report them as the run's.
//! So before a run (before its checkpoint) whose workspace had a service running since
//! its last ingest, the kept overlay's upper is taken in as a step of its own (the same
//! ingest a run's end does, reading only what changed since the last one), and its
//! changes go into the run's envelope as `service_changes`, bounded, without patches;
//! the run's `changes` are then its own (but for what a service writes while the run
//! runs). The checkpoint before the run so holds the services' writes, and an
//! `exec.service_writes` audit row records them.
//!
//! Not taken in ahead: a workspace whose upper holds new ignored files (moving them
//! needs the keeper, and so the services, ended: the run's end does that, as before),
//! and a failed step (a quota): the run's ingest then takes the writes in with its own.

use std::path::Path;
use std::time::UNIX_EPOCH;

use serde_json::json;

use super::run::{IngestRequest, take_in_tx};
use crate::context::Context;
use crate::engine::kept;
use crate::engine::overlay::{self, OverlayRun, RunSite};
use crate::error::Result;
use crate::exec::envelope::{ChangesMode, MAX_SERVICE_CHANGES, ReportLimits, ServiceChanges};
use crate::registry::VaultRef;
use crate::sandbox::service as proc_service;
use crate::store::{Store, audit};
use crate::workspace::Workspace;

/// The services that ran in `v`'s workspace since its kept overlay's last ingest
/// (running now, or ended after it), by name.
fn serving_since_ingest(home: &Path, v: &VaultRef, kept_dir: &Path) -> Vec<String> {
    let last_ns = std::fs::metadata(kept_dir.join("memo.json"))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as i64);
    let mut names: Vec<String> = proc_service::records(&super::service::workspace_dir(home, v))
        .into_iter()
        .filter(|(_, r)| r.live() || r.ended_at_ns.is_some_and(|t| t >= last_ns))
        .map(|(_, r)| r.name)
        .collect();
    names.dedup();
    names
}

/// Takes in what the services of `v`'s workspace wrote since its last run; None when
/// no service ran since, nothing was written, or it is left to the run (see above).
pub(super) fn take_in(
    ctx: &Context,
    v: &VaultRef,
    store: &mut Store,
    id: &str,
    limits: &ReportLimits,
    opts: IngestRequest,
) -> Result<Option<ServiceChanges>> {
    let kept_dir = kept::kept_dir(&ctx.home, &v.path, &v.workspace);
    if !kept::enabled() || !kept_dir.join("kept.json").exists() {
        return Ok(None);
    }
    let services = serving_since_ingest(&ctx.home, v, &kept_dir);
    if services.is_empty() {
        return Ok(None);
    }
    ctx.sync_mount(v)?;
    let (head, parent) = store.write(|db| {
        let mut ws = Workspace::open(db, &v.workspace)?;
        Ok((ws.flush()?, ws.info.parent.clone()))
    })?;
    let mut hints = vec![];
    hints.extend(overlay::last_root(&ctx.home, &v.path, &v.workspace));
    if let Some(p) = &parent {
        hints.extend(overlay::last_root(&ctx.home, &v.path, p));
    }
    let ignored_dir =
        crate::engine::ignored::ensure(&ctx.home, &v.path, &v.workspace, parent.as_deref())?;
    let step = format!("{id}-services");
    let site = RunSite {
        home: &ctx.home,
        id: &step,
        vault_path: &v.path,
        workspace: &v.workspace,
        ignored: Some(&ignored_dir),
    };
    let orun =
        store.read(|db| OverlayRun::prepare_kept(&site, db, &head, &hints, opts.keep_owners))?;
    if !matches!(orun.record.stack.how.as_str(), "kept" | "remounted")
        || store.read(|db| orun.has_ignored(db))?
    {
        // A new overlay (the head had moved: what the old one held was retired with its
        // services), or ignored files to move: the run does as it did.
        orun.leave_kept();
        return Ok(None);
    }
    let taken = orun.store_upper(store).and_then(|stored| {
        store.write(|db| take_in_tx(db, &v.workspace, &orun, Some(stored), opts, true))
    });
    let (ing, changes) = match taken {
        Ok(t) => t,
        Err(_) => {
            let _ = store.write(|db| crate::store::pins::unpin(db, &orun.ingest_pin()));
            orun.leave_kept();
            return Ok(None);
        }
    };
    let shown = ReportLimits {
        changes: match limits.changes {
            ChangesMode::None => ChangesMode::None,
            _ => ChangesMode::List,
        },
        max_changes: limits.max_changes.min(MAX_SERVICE_CHANGES),
        max_patch_bytes: 0,
        output: limits.output,
    };
    let (layered, current) = store.write(|db| {
        let layered = super::report::layer(db, changes, &shown)?;
        let current = Workspace::open(db, &v.workspace)?.flush()?;
        if layered.summary.total > 0 {
            audit::append(
                db,
                Some(&v.workspace),
                "exec",
                "exec.service_writes",
                &json!({"exec": id, "services": services, "summary": layered.summary}),
            )?;
        }
        Ok((layered, current))
    })?;
    overlay::remember_root(&ctx.home, &v.path, &v.workspace, &current);
    orun.finish(&ctx.home, Some(&ing), Some(&current));
    ctx.invalidate_mount(v)?;
    if layered.summary.total == 0 {
        return Ok(None);
    }
    Ok(Some(ServiceChanges {
        services,
        truncated: layered.page.truncated,
        changes: layered.changes,
        change_summary: layered.summary,
    }))
}
