//! Remotes: sharing a vault's checkpoints across machines through S3-compatible object
//! storage (or a directory).
//!
//! Layout of a remote (below its URL):
//!
//! ```text
//! packs/<blake3>   many objects back to back (chunks in data packs; trees, chunk lists
//!                  and checkpoints in metadata packs), immutable
//! index/<blake3>   one per pack: kind, hash, offset, length of each object, immutable
//! refs/<workspace> JSON: the checkpoint the workspace points at; moved only by
//!                  conditional writes (If-Match / If-None-Match), read back after
//! probe/conditional-writes  the key `probe` writes to check the store's conditions
//! ```
//!
//! Modules: `config` (URLs, credentials from the environment and `$AVFS_HOME/remotes.toml`),
//! `transport` (the object store client, request counters, conditional writes), `pack`
//! (the object and index formats), `catalog` (this vault's copy of the remote's indexes),
//! `commits` (checkpoints as content-addressed objects), `refs`, `probe` (whether a store
//! refuses the conditional writes refs rely on), `push`, `fetch` (and
//! clone), `fork` (`vault fork --remote`), `pull`, `lazy` (a lazy clone's fault handler)
//! and `gc` below.

pub mod catalog;
pub mod commits;
pub mod config;
pub mod fetch;
pub mod fork;
pub mod lazy;
pub mod objects;
pub mod pack;
pub mod probe;
pub mod pull;
pub mod push;
pub mod refs;
pub mod transport;

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::store::{Store, audit, meta_get};
pub use fetch::{CloneOptions, CloneReport, FetchReport, clone, fetch};
pub use pull::{PullReport, pull};
pub use push::{PushReport, RefStatus, Target, push};
use transport::Transport;

/// The name a clone gives the remote it came from.
pub const ORIGIN: &str = "origin";

/// Long work reports its progress here (the CLI draws bars on a terminal).
pub trait Progress: Sync {
    fn phase(&self, _what: &str, _total: Option<u64>) {}
    fn advance(&self, _n: u64) {}
}

pub struct NoProgress;
impl Progress for NoProgress {}

/// Remote names: like vault names.
pub fn validate_name(name: &str) -> Result<()> {
    crate::registry::validate_name(name).map_err(|_| {
        Error::InvalidArgument(
            name.into(),
            "remote names are 1-128 characters of letters, digits, '-', '_' and '.', not starting with '.'".into(),
        )
    })
}

/// The URL of remote `name` of this vault.
pub fn remote_url(db: &Connection, name: &str) -> Result<(String, String)> {
    let url: Option<String> = db
        .prepare_cached("SELECT url FROM remote WHERE name = ?1")?
        .query_row([name], |r| r.get(0))
        .optional()?;
    url.map(|u| (name.to_string(), u))
        .ok_or_else(|| Error::NoSuchRemote(name.into()))
}

/// The remote to use when none is named: `origin`, else the only one.
pub fn default_remote(db: &Connection) -> Result<String> {
    let names: Vec<String> = db
        .prepare("SELECT name FROM remote ORDER BY name")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    if names.iter().any(|n| n == ORIGIN) {
        return Ok(ORIGIN.into());
    }
    match names.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(Error::NoSuchRemote(
            "(none configured; add one with `avfs remote add NAME URL`)".into(),
        )),
        _ => Err(Error::InvalidArgument(
            "REMOTE".into(),
            format!(
                "this vault has several remotes ({}); name one",
                names.join(", ")
            ),
        )),
    }
}

pub(crate) fn add_remote_row(db: &Connection, name: &str, url: &str) -> Result<()> {
    validate_name(name)?;
    config::parse_url(url)?;
    let n = db.execute(
        "INSERT OR IGNORE INTO remote (name, url, created_at_ns) VALUES (?1, ?2, ?3)",
        params![name, url, crate::store::now_ns()],
    )?;
    if n == 0 {
        return Err(Error::Exists(format!("remote {name}")));
    }
    Ok(())
}

pub fn open_transport(home: &Path, name: &str, url: &str) -> Result<Transport> {
    let location = config::parse_url(url)?;
    let settings = config::settings_for(home, &location)?;
    Transport::open(name, &location, &settings)
}

#[derive(Clone, Debug, Serialize)]
pub struct RemoteInfo {
    pub name: String,
    pub url: String,
    /// Workspaces of the remote as last fetched or pushed: name and checkpoint object.
    pub refs: Vec<RefInfo>,
    /// Declared with `remote add --single-writer`: refs move even on a store that fails
    /// the conditional-write probe.
    pub single_writer: bool,
    /// What the probe found, once a push probed the store (null before, and for a
    /// directory remote).
    pub conditional_writes: Option<probe::ConditionalWrites>,
}

#[derive(Clone, Debug, Serialize)]
pub struct RefInfo {
    pub workspace: String,
    pub head: String,
}

/// `remote add NAME URL [--single-writer]`. Adding a remote again with its own URL and
/// `--single-writer` declares it single-writer (that is how an existing remote opts in).
pub fn add(
    vault: &Path,
    workspace: &str,
    name: &str,
    url: &str,
    single_writer: bool,
) -> Result<RemoteInfo> {
    let mut store = Store::open(vault)?;
    store.write(|db| {
        let existing = match remote_url(db, name) {
            Ok((_, u)) => Some(u),
            Err(Error::NoSuchRemote(_)) => None,
            Err(e) => return Err(e),
        };
        match existing {
            Some(u) if u == url && single_writer => {}
            Some(_) => return Err(Error::Exists(format!("remote {name}"))),
            None => add_remote_row(db, name, url)?,
        }
        if single_writer {
            probe::set_single_writer(db, name, true)?;
        }
        audit::append(
            db,
            Some(workspace),
            audit::cli_actor(),
            "remote.add",
            &serde_json::json!({"name": name, "url": url, "single_writer": single_writer}),
        )?;
        Ok(())
    })?;
    Ok(RemoteInfo {
        name: name.into(),
        url: url.into(),
        refs: vec![],
        single_writer,
        conditional_writes: None,
    })
}

pub fn list(vault: &Path) -> Result<Vec<RemoteInfo>> {
    let mut store = Store::open(vault)?;
    store.read(|db| {
        let rows: Vec<(String, String)> = db
            .prepare("SELECT name, url FROM remote ORDER BY name")?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        rows.into_iter()
            .map(|(name, url)| {
                let refs = refs::remembered(db, &name)?
                    .into_iter()
                    .map(|(w, h)| RefInfo {
                        workspace: w,
                        head: h.to_hex(),
                    })
                    .collect();
                Ok(RemoteInfo {
                    single_writer: probe::single_writer(db, &name)?,
                    conditional_writes: probe::cached(db, &name, &url)?,
                    name,
                    url,
                    refs,
                })
            })
            .collect()
    })
}

/// Objects of this vault that only `remote` can supply (a lazy clone's unfetched
/// contents): removing the remote would lose them.
fn only_promised_by(db: &Connection, remote: &str) -> Result<u64> {
    let cat = catalog::Catalog::load(db)?;
    let mut n = 0;
    for (h, kind, _, _) in cat.objects(Some(remote)) {
        if !objects::has(db, kind, &h)? && !cat.promised_elsewhere(remote, &h) {
            n += 1;
        }
    }
    Ok(n)
}

pub fn remove(vault: &Path, workspace: &str, name: &str, force: bool) -> Result<RemoteInfo> {
    let mut store = Store::open(vault)?;
    store.write(|db| {
        let (_, url) = remote_url(db, name)?;
        let lazy = meta_get(db, fetch::LAZY_KEY)?.unwrap_or(0) == 1;
        if lazy && !force {
            let n = only_promised_by(db, name)?;
            if n > 0 {
                return Err(Error::Refused(format!(
                    "this vault is a lazy clone and {n} of its objects are still only on {name}; run `avfs fetch {name} --full` first (or --force to lose them)"
                )));
            }
        }
        catalog::forget_remote(db, name)?;
        db.execute("DELETE FROM remote_ref WHERE remote = ?1", [name])?;
        db.execute("DELETE FROM remote WHERE name = ?1", [name])?;
        probe::forget(db, name)?;
        audit::append(
            db,
            Some(workspace),
            audit::cli_actor(),
            "remote.remove",
            &serde_json::json!({"name": name, "url": url}),
        )?;
        Ok(RemoteInfo {
            name: name.into(),
            url,
            refs: vec![],
            single_writer: false,
            conditional_writes: None,
        })
    })
}

#[derive(Clone, Debug, Serialize)]
pub struct GcReport {
    pub remote: String,
    /// Packs no index names (left by killed pushes) and older than the grace period.
    pub packs_deleted: u64,
    pub bytes_freed: u64,
    /// Such packs still inside the grace period (a push may be uploading them now).
    pub packs_kept_young: u64,
    pub traffic: transport::Traffic,
}

/// `avfs remote gc`: deletes packs that no index names, once older than `grace_secs`
/// (a push in flight uploads its pack before its index, so a young one is left alone).
pub fn gc(home: &Path, vault: &Path, name: &str, grace_secs: u64) -> Result<GcReport> {
    let mut store = Store::open(vault)?;
    let (name, url) = store.read(|db| remote_url(db, name))?;
    let t = open_transport(home, &name, &url)?;
    let before = t.traffic();
    let indexes = t.run(t.list("index"))?;
    let mut named = std::collections::HashSet::new();
    for l in &indexes {
        let Some(n) = l.key.strip_prefix("index/") else {
            continue;
        };
        let data = t
            .run(t.get(&l.key))?
            .ok_or_else(|| t.err(&l.key, "listed but gone"))?;
        let idx = pack::PackIndex::decode(n, &data).map_err(|reason| Error::RemoteCorrupt {
            remote: name.clone(),
            what: format!("index {n}"),
            reason,
        })?;
        named.insert(idx.pack);
    }
    let now = crate::store::now_ns() / 1_000_000_000;
    let mut r = GcReport {
        remote: name.clone(),
        packs_deleted: 0,
        bytes_freed: 0,
        packs_kept_young: 0,
        traffic: Default::default(),
    };
    for l in t.run(t.list("packs"))? {
        let Some(n) = l.key.strip_prefix("packs/") else {
            continue;
        };
        if named.contains(n) {
            continue;
        }
        if now - l.modified_unix < grace_secs as i64 {
            r.packs_kept_young += 1;
            continue;
        }
        t.run(t.delete(&l.key))?;
        r.packs_deleted += 1;
        r.bytes_freed += l.size;
    }
    r.traffic = t.traffic() - before;
    Ok(r)
}
