//! Where a command runs, decided before anything is created (a denied or unapproved
//! command leaves no fork behind), then made: the target workspace, a named task fork,
//! or a fresh ephemeral fork.

use serde_json::json;

use super::{ExecRequest, new_id};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::registry::{Registry, VaultRef, validate_name};
use crate::store::{Store, audit};
use crate::workspace::Workspace;

pub enum Place {
    /// The target vault itself, or a fork that already exists.
    Existing(VaultRef),
    /// A fork of `base` to create under this name (`--fork NAME` on first use).
    NewFork(String),
    /// A fresh ephemeral fork of `base`, named in advance (so the watchdog can discard
    /// it if exec dies right after making it).
    Ephemeral(String),
}

impl Place {
    /// The vault and workspace names the run will use.
    pub fn names(&self, base: &VaultRef) -> (String, String) {
        match self {
            Place::Existing(v) => (v.name.clone(), v.workspace.clone()),
            Place::NewFork(n) => (n.clone(), n.clone()),
            Place::Ephemeral(_) => (base.name.clone(), base.workspace.clone()),
        }
    }
}

pub fn plan(reg: &Registry, base: &VaultRef, req: &ExecRequest) -> Result<Place> {
    if req.ephemeral {
        return Ok(Place::Ephemeral(new_id("eph")));
    }
    let Some(name) = &req.fork else {
        return Ok(Place::Existing(base.clone()));
    };
    // A fork whose creation was killed between its two commits is picked up again.
    crate::registry::reconcile(reg, &base.path)?;
    match reg.get(name)? {
        Some(existing) if existing.path == base.path => Ok(Place::Existing(existing)),
        Some(existing) => Err(Error::Refused(format!(
            "--fork {name}: {name} is registered for another vault file ({}), not a fork of {}",
            existing.path.display(),
            base.name
        ))),
        None => {
            validate_name(name)?;
            Ok(Place::NewFork(name.clone()))
        }
    }
}

/// Creates the fork the plan asks for; returns it and whether it is ephemeral.
pub fn create(
    ctx: &Context,
    reg: &Registry,
    base: &VaultRef,
    place: Place,
) -> Result<(VaultRef, bool)> {
    let (name, ephemeral) = match place {
        Place::Existing(v) => return Ok((v, false)),
        Place::NewFork(n) => (n, false),
        Place::Ephemeral(n) => (n, true),
    };
    ctx.sync_mount(base)?;
    let mut store = Store::open(&base.path)?;
    store.write(|db| {
        let mut ws = Workspace::open(db, &base.workspace)?;
        if ephemeral && ws.is_modified()? {
            // Forking a modified workspace would checkpoint the source first (and move its
            // head); an ephemeral fork must leave nothing behind, so it starts from the
            // live tree directly.
            let root = ws.flush()?;
            crate::workspace::create_workspace(db, &name, Some(root), Some((&ws.info, None)))?;
        } else {
            // An ephemeral fork starts from the head as it is: a base checkpoint taken
            // for it would be left behind.
            let from = if ephemeral { ws.head()? } else { None };
            ws.fork(&name, from.as_ref())?;
        }
        audit::append(
            db,
            Some(&base.workspace),
            "exec",
            "vault.fork",
            &json!({"fork": name, "ephemeral": ephemeral}),
        )?;
        Ok(())
    })?;
    let v = VaultRef {
        name: name.clone(),
        path: base.path.clone(),
        workspace: name,
    };
    if let Err(e) = crate::registry::add_or_same(reg, &v) {
        let _ = store.write(|db| crate::workspace::delete_workspace(db, &v.workspace).map(|_| ()));
        return Err(e);
    }
    Ok((v, ephemeral))
}

/// Deletes an ephemeral fork (its workspace and its registration).
pub fn discard(ctx: &Context, v: &VaultRef) -> Result<()> {
    let reg = ctx.registry()?;
    let mut store = Store::open(&v.path)?;
    store.write(|db| {
        match crate::workspace::delete_workspace(db, &v.workspace) {
            Ok(_) | Err(Error::NoSuchVault(_)) => {}
            Err(e) => return Err(e),
        }
        audit::append(
            db,
            Some(&v.workspace),
            "exec",
            "vault.delete",
            &json!({"fork": v.name, "ephemeral": true}),
        )
    })?;
    if reg.get(&v.name)?.is_some() {
        reg.remove(&v.name)?;
    }
    Ok(())
}
