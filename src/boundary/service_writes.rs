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
//! `exec.service_writes` audit row records them (the services' ids and names, the
//! counts, the first `AUDITED_PATHS` paths): `avfs service list` reads its services'
//! writes there, and what is not taken in yet from the upper (`pending_writes`).
//!
//! Not taken in ahead: a workspace whose upper holds new ignored files (moving them
//! needs the keeper, and so the services, ended: the run's end does that, as before),
//! and a failed step (a quota): the run's ingest then takes the writes in with its own.

use std::path::Path;

use serde_json::json;

use super::run::{IngestRequest, take_in_tx};
use crate::context::Context;
use crate::engine::kept;
use crate::engine::overlay::{self, OverlayRun, RunSite};
use crate::engine::pending;
use crate::error::Result;
use crate::exec::envelope::{ChangesMode, MAX_SERVICE_CHANGES, ReportLimits, ServiceChanges};
use crate::registry::VaultRef;
use crate::sandbox::service as proc_service;
use crate::store::{Store, audit};
use crate::workspace::Workspace;

/// Paths an `exec.service_writes` audit row names at most (`more` counts the rest).
pub const AUDITED_PATHS: usize = 20;

/// The services that ran in `v`'s workspace since its kept overlay's last ingest
/// (running now, or ended after it): (id, name) each, oldest first.
fn serving_since_ingest(home: &Path, v: &VaultRef, kept_dir: &Path) -> Vec<(String, String)> {
    let last_ns = pending::last_ingest_ns(kept_dir);
    proc_service::records(&super::service::workspace_dir(home, v))
        .into_iter()
        .filter(|(_, r)| r.live() || r.ended_at_ns.is_some_and(|t| t >= last_ns))
        .map(|(_, r)| (r.id, r.name))
        .collect()
}

/// What the services of `v`'s workspace wrote that no ingest took in yet, counted
/// without taking it in (`engine::pending`: read-only, no lock), and the ids of the
/// services it is ascribed to (those that ran since the last ingest). None without a
/// kept overlay or such a service.
pub fn pending_writes(home: &Path, v: &VaultRef) -> Option<(Vec<String>, pending::Pending)> {
    let kept_dir = kept::kept_dir(home, &v.path, &v.workspace);
    let ids: Vec<String> = serving_since_ingest(home, v, &kept_dir)
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    if ids.is_empty() {
        return None;
    }
    Some((ids, pending::pending(&kept_dir)?))
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
    let serving = serving_since_ingest(&ctx.home, v, &kept_dir);
    if serving.is_empty() {
        return Ok(None);
    }
    let service_ids: Vec<&str> = serving.iter().map(|(id, _)| id.as_str()).collect();
    let mut services: Vec<String> = serving.iter().map(|(_, n)| n.clone()).collect();
    services.dedup();
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
    // The audit row names the first paths (sorted, a rename's two), for `service list`.
    let paths: Vec<String> = changes
        .iter()
        .take(AUDITED_PATHS)
        .map(|c| c.path.clone())
        .collect();
    let more = changes.len() - paths.len();
    let row = |summary: &crate::exec::envelope::Summary| {
        json!({"exec": id, "services": services, "service_ids": service_ids,
            "summary": summary, "paths": paths, "more": more})
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
                &row(&layered.summary),
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
