//! Changing a workspace on behalf of a command (the CLI, and MCP through it): one
//! transaction that checks the quotas and writes the command's audit row, with a mount of
//! the workspace kept consistent around it (its buffers committed first, the kernel's
//! caches dropped after). Forks made and deleted by a command, with their rows.

use super::Context;
use crate::error::Result;
use crate::registry::VaultRef;
use crate::store::{Store, audit};
use crate::workspace::{Workspace, WorkspaceInfo};

impl Context {
    /// Runs a mutating command on workspace `v` in one transaction; `f` returns the
    /// result and the audit row's detail (`action`, by `audit::cli_actor`), written in
    /// the same transaction. A result over quota rolls the whole command back. A mount of
    /// the workspace commits its buffers first and drops the kernel's caches afterwards.
    pub fn mutate_in<T>(
        &self,
        v: &VaultRef,
        action: &str,
        f: impl FnOnce(&mut Workspace) -> Result<(T, serde_json::Value)>,
    ) -> Result<T> {
        self.sync_mount(v)?;
        let mut store = Store::open(&v.path)?;
        let r = store.write(|db| {
            let mut ws = Workspace::open(db, &v.workspace)?;
            let before = ws.quota_baseline()?;
            let (r, detail) = f(&mut ws)?;
            // Over quota: the whole command is rolled back.
            ws.check_quota(&before)?;
            audit::append(db, Some(&v.workspace), audit::cli_actor(), action, &detail)?;
            Ok(r)
        })?;
        self.invalidate_mount(v)?;
        // Rows of live layers a restore replaced go in a transaction of their own, after
        // the command's work is committed.
        let _ = store.write(|db| {
            let dead: bool = db.query_row(
                "SELECT EXISTS (SELECT 1 FROM layer WHERE dead = 1)",
                [],
                |r| r.get(0),
            )?;
            if dead {
                crate::workspace::purge_dead_layers(db)?;
            }
            Ok(())
        });
        // Content the command made garbage goes once enough has piled up (cheap to
        // check; see `reclaim`). Best effort: the command's work is committed.
        let _ = store.write(|db| crate::reclaim::reclaim_if_due(db).map(|_| ()));
        Ok(r)
    }

    /// Forks workspace `source` of its vault file as `name`, at checkpoint `from` (else
    /// as it is now), with its audit row (`vault.fork`). Registering the fork is the
    /// caller's.
    pub fn fork_workspace(
        &self,
        source: &VaultRef,
        name: &str,
        from: Option<&str>,
    ) -> Result<WorkspaceInfo> {
        self.sync_mount(source)?;
        let mut store = Store::open(&source.path)?;
        store.write(|db| {
            let mut ws = Workspace::open(db, &source.workspace)?;
            let cp = from.map(|c| ws.find_checkpoint(c)).transpose()?;
            let info = ws.fork(name, cp.as_ref())?;
            audit::append(
                db,
                Some(&source.workspace),
                audit::cli_actor(),
                "vault.fork",
                &serde_json::json!({"fork": name, "from": info.parent_checkpoint}),
            )?;
            Ok(info)
        })
    }
}

/// Deletes fork `name` (workspace `v.workspace`) from its vault file, with its audit row
/// (`vault.delete`). What only the fork held stays until a collection (the caller's).
pub fn delete_fork(store: &mut Store, v: &VaultRef, name: &str) -> Result<()> {
    store.write(|db| {
        crate::workspace::delete_workspace(db, &v.workspace)?;
        audit::append(
            db,
            Some(&v.workspace),
            audit::cli_actor(),
            "vault.delete",
            &serde_json::json!({"fork": name}),
        )?;
        Ok(())
    })
}
