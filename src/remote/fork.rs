//! `avfs vault fork SRC NAME --remote REMOTE[/WORKSPACE] [--from C]`: a new workspace in
//! SRC's vault file at a checkpoint of a remote, moving only what the vault lacks.
//!
//! The checkpoint history comes first (only objects not here), then the tree: in a lazy
//! vault only the root (the rest on first read, as after a clone), in a complete vault
//! every tree and file the vault does not hold yet, so it stays complete. Objects the
//! vault already has (its own history, an earlier fetch) are never asked for. The new
//! workspace's parent is SRC's workspace, at the nearest checkpoint the two histories
//! share when there is one, so `vault merge` of the fork has a merge base.
//!
//! Running the same fork again (after a kill once the vault file had it, or simply
//! twice) finishes without change when the workspace is already what was asked: a fork
//! of SRC at that checkpoint, unchanged since; otherwise it says what is there.

use std::path::Path;
use std::time::Instant;

use rusqlite::{OptionalExtension, params};
use serde::Serialize;

use super::fetch::{Fetched, LAZY_KEY, fetch_history, fetch_trees};
use super::transport::Traffic;
use super::{Progress, catalog, commits, refs};
use crate::error::{Error, Result};
use crate::store::objects::Hash;
use crate::store::{Store, audit, meta_get};
use crate::workspace::{Workspace, create_workspace};

/// What to fork: a remote, the workspace (ref) on it, and a checkpoint of its history.
pub struct RemoteForkSpec<'a> {
    pub remote: &'a str,
    /// The remote workspace (ref); None: the source workspace's name.
    pub workspace: Option<&'a str>,
    /// A checkpoint name in that workspace's history; None: its head.
    pub checkpoint: Option<&'a str>,
}

#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct RemoteFork {
    pub remote: String,
    /// The remote workspace the checkpoint was taken from.
    pub workspace: String,
    /// The checkpoint the fork starts at (its name in the fork), and its object (hex).
    pub checkpoint: String,
    pub head: String,
    /// The checkpoint of the source workspace both histories share, if any (the merge
    /// base of `vault merge`).
    pub base: Option<String>,
    /// True when file contents (and listings below the root) stay on the remote until
    /// first read (the vault is a lazy clone).
    pub lazy: bool,
    pub fetched: Fetched,
    pub traffic: Traffic,
    pub seconds: f64,
    /// The workspace was already there, as asked (a re-run, e.g. after a kill once the
    /// vault file had it): nothing was created.
    #[serde(skip)]
    #[schemars(skip)]
    pub already_there: bool,
}

/// `REMOTE[/WORKSPACE]` as typed after `--remote`.
pub fn parse_spec(s: &str) -> Result<(&str, Option<&str>)> {
    let (remote, ws) = match s.split_once('/') {
        Some((r, w)) => (r, Some(w)),
        None => (s, None),
    };
    super::validate_name(remote)?;
    if let Some(w) = ws {
        crate::registry::validate_name(w).map_err(|_| {
            Error::InvalidArgument(
                s.into(),
                "expected REMOTE or REMOTE/WORKSPACE (a workspace name after the '/')".into(),
            )
        })?;
    }
    Ok((remote, ws))
}

/// Creates workspace `name` in the vault at `vault`, at a checkpoint of a remote.
pub fn fork(
    home: &Path,
    vault: &Path,
    source_workspace: &str,
    name: &str,
    spec: &RemoteForkSpec,
    progress: &dyn Progress,
) -> Result<RemoteFork> {
    let started = Instant::now();
    let mut store = Store::open(vault)?;
    let (remote, url) = store.read(|db| super::remote_url(db, spec.remote))?;
    let remote_ws = spec.workspace.unwrap_or(source_workspace).to_string();
    let exists = store.read(|db| Ok(crate::workspace::find_workspace(db, name)?.is_some()))?;
    let t = super::open_transport(home, &remote, &url)?;
    let before = t.traffic();
    progress.phase("reading the remote's indexes", None);
    catalog::sync(&mut store, &t, &remote)?;
    let (r, _) = t
        .run(refs::read(&t, &remote_ws))?
        .ok_or_else(|| Error::Remote {
            remote: remote.clone(),
            message: format!(
                "it has no workspace {remote_ws:?}; name one with --remote {remote}/WORKSPACE"
            ),
        })?;
    let head = r.head_hash().map_err(|reason| Error::RemoteCorrupt {
        remote: remote.clone(),
        what: format!("ref {remote_ws}"),
        reason,
    })?;
    let mut got = Fetched::default();
    progress.phase("fetching", None);
    fetch_history(&mut store, &t, &remote, &[head], &mut got, progress)?;
    let target = match spec.checkpoint {
        None => head,
        Some(c) => store
            .read(|db| commits::find_named(db, &head, c))?
            .ok_or_else(|| {
                Error::NoSuchCheckpoint(format!("{c} (in {remote}/{remote_ws}'s history)"))
            })?,
    };
    let obj = store
        .read(|db| commits::load(db, &target))?
        .ok_or_else(|| Error::Internal("checkpoint object not fetched".into()))?;
    let lazy = store.read(|db| Ok(meta_get(db, LAZY_KEY)?.unwrap_or(0) == 1))?;
    let (checkpoint, base) = if exists {
        store.write(|db| {
            already_forked(
                db,
                source_workspace,
                name,
                &target,
                &obj.name,
                &remote,
                &remote_ws,
            )
        })?
    } else {
        new_fork(
            &mut store,
            &t,
            (&remote, &remote_ws),
            source_workspace,
            name,
            &target,
            &obj,
            lazy,
            &mut got,
            progress,
        )?
    };
    Ok(RemoteFork {
        remote,
        workspace: remote_ws,
        checkpoint,
        head: target.to_hex(),
        base,
        lazy,
        fetched: got,
        traffic: t.traffic() - before,
        seconds: started.elapsed().as_secs_f64(),
        already_there: exists,
    })
}

/// Makes fork `name` of `source_workspace` at the fetched checkpoint `target` (its trees
/// fetched first); returns its checkpoint's name and the parent checkpoint both share.
#[allow(clippy::too_many_arguments)]
fn new_fork(
    store: &mut Store,
    t: &super::Transport,
    (remote, remote_ws): (&String, &String),
    source_workspace: &str,
    name: &str,
    target: &Hash,
    obj: &commits::CheckpointObject,
    lazy: bool,
    got: &mut Fetched,
    progress: &dyn Progress,
) -> Result<(String, Option<String>)> {
    // A lazy vault stays lazy (the root listing only); a complete one stays complete.
    fetch_trees(store, t, remote, &[obj.root], lazy, false, got, progress)?;
    store.write(|db| {
        let source = Workspace::open(db, source_workspace)?;
        // The source's checkpoint both histories share: the fork's parent checkpoint.
        let base = match source.head()? {
            Some(cp) => {
                let ours = commits::object_for(db, cp.id)?;
                match commits::merge_base(db, &ours, target)? {
                    Some(b) => local_name_in(db, &b, source.info.id)?,
                    None => None,
                }
            }
            None => None,
        };
        let info = create_workspace(
            db,
            name,
            Some(obj.root),
            Some((&source.info, base.as_deref())),
        )?;
        let id = commits::import(db, info.id, target, remote)?;
        db.execute(
            "UPDATE workspace SET head = ?1 WHERE id = ?2",
            params![id, info.id],
        )?;
        let checkpoint: String =
            db.query_row("SELECT name FROM checkpoint WHERE id = ?1", [id], |r| {
                r.get(0)
            })?;
        audit::append(
            db,
            Some(source_workspace),
            audit::cli_actor(),
            "vault.fork",
            &serde_json::json!({"fork": name, "from": checkpoint, "remote": remote, "remote_workspace": remote_ws}),
        )?;
        Ok((checkpoint, base))
    })
}

/// Workspace `name` exists already: fine when it is the fork that was asked for (of
/// `source` at checkpoint object `target`, unchanged since); then its checkpoint's name
/// and the fork's base. Otherwise an error that says what is there.
fn already_forked(
    db: &rusqlite::Connection,
    source: &str,
    name: &str,
    target: &Hash,
    target_name: &str,
    remote: &str,
    remote_ws: &str,
) -> Result<(String, Option<String>)> {
    let mut ws = Workspace::open(db, name)?;
    let head = ws.head()?;
    let at = match &head {
        Some(cp) => Some(commits::object_for(db, cp.id)?),
        None => None,
    };
    let from_source = ws.info.parent.as_deref() == Some(source);
    let detail = match (&head, at) {
        (Some(cp), Some(h)) if h == *target && from_source => {
            if !ws.is_modified()? {
                return Ok((cp.name.clone(), ws.info.parent_checkpoint.clone()));
            }
            format!(
                "it is the fork of {source} at {remote}/{remote_ws}'s checkpoint {target_name} that was asked for, but has unsaved changes since"
            )
        }
        (Some(cp), _) if from_source => format!(
            "it is a fork of {source} at checkpoint {}, not at {remote}/{remote_ws}'s {target_name} as asked",
            cp.name
        ),
        (Some(cp), _) => format!(
            "it is not a fork of {source} (its checkpoint is {}; {remote}/{remote_ws}'s {target_name} was asked)",
            cp.name
        ),
        (None, _) => {
            format!("it has no checkpoint; {remote}/{remote_ws}'s {target_name} was asked")
        }
    };
    Err(Error::ForkDiffers {
        name: name.into(),
        detail: format!("{detail}; choose another name, or `avfs vault delete {name}` first"),
    })
}

/// The name of the checkpoint of workspace `ws` that object `h` stands for, if any.
fn local_name_in(
    db: &rusqlite::Connection,
    h: &crate::store::objects::Hash,
    ws: i64,
) -> Result<Option<String>> {
    let Some(id) = commits::local_of(db, h)? else {
        return Ok(None);
    };
    Ok(db
        .query_row(
            "SELECT name FROM checkpoint WHERE id = ?1 AND workspace = ?2",
            params![id, ws],
            |r| r.get(0),
        )
        .optional()?)
}
