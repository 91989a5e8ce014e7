//! This vault's copy of each remote's pack indexes: which object lies in which pack, at
//! which offset. A push consults it to send only what the remote lacks; a fetch and a
//! lazy read use it to fetch an object by range. It is a cache of what the remote says:
//! `sync` brings it up to date with one LIST (plus a GET per index not seen yet) and
//! forgets indexes the remote no longer has.
//!
//! Each pack's index is kept as one blob in its `remote_pack` row (`entries`: fixed-width
//! records sorted by hash), not as a row per object: a lazy clone of 100 000 files reads
//! 31 indexes of 109 000 entries, and inserting those as rows was 76 % of the clone's
//! CPU. A lookup loads the blobs into a [`Catalog`] (once per pack and process: an
//! index is immutable and named by its hash) and binary-searches them. Rows of
//! `remote_object` written by older builds are still read, for packs without a blob.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};

use futures_util::{StreamExt, TryStreamExt};
use rusqlite::{Connection, params};

use super::pack::{IndexEntry, ObjKind, PackIndex, index_key};
use super::transport::Transport;
use crate::error::{Error, Result};
use crate::store::Store;
use crate::store::objects::Hash;
pub use crate::store::packrecords::Item;
use crate::store::packrecords::{PackEntries, read_entries};

/// Where one object lies.
#[derive(Clone, Debug)]
pub struct Located {
    pub pack_id: i64,
    pub pack_name: String,
    pub remote: String,
    pub kind: ObjKind,
    pub offset: u64,
    pub length: u64,
}

/// What `sync` changed.
#[derive(Debug, Default, Clone, Copy)]
pub struct SyncReport {
    pub indexes_read: usize,
    pub indexes_forgotten: usize,
}

/// Loaded indexes, by index name: immutable, so a process reads each at most once.
fn loaded() -> &'static Mutex<HashMap<String, Arc<PackEntries>>> {
    static L: OnceLock<Mutex<HashMap<String, Arc<PackEntries>>>> = OnceLock::new();
    L.get_or_init(Default::default)
}

struct Pack {
    id: i64,
    remote: String,
    name: String,
    entries: Arc<PackEntries>,
}

/// Every remote's indexes as this vault knows them, ready for lookups. Load it once for
/// many lookups (a push, a fetch): loading reads the list of packs.
pub struct Catalog {
    packs: Vec<Pack>,
}

impl Catalog {
    pub fn load(db: &Connection) -> Result<Catalog> {
        let rows: Vec<(i64, String, String, String)> = db
            .prepare_cached(
                "SELECT id, remote, index_name, pack_name FROM remote_pack ORDER BY id",
            )?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let mut packs = Vec::with_capacity(rows.len());
        for (id, remote, index_name, name) in rows {
            let cached = loaded()
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&index_name)
                .cloned();
            let entries = match cached {
                Some(e) => e,
                None => {
                    let e = Arc::new(read_entries(db, id)?);
                    loaded()
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(index_name, e.clone());
                    e
                }
            };
            packs.push(Pack {
                id,
                remote,
                name,
                entries,
            });
        }
        Ok(Catalog { packs })
    }

    /// Where object `hash` of `kind` lies, preferring remote `prefer`, then the oldest pack.
    pub fn locate(&self, hash: &Hash, kind: ObjKind, prefer: Option<&str>) -> Option<Located> {
        let mut found: Option<Located> = None;
        for p in &self.packs {
            let Some((_, _, offset, length)) = p.entries.find(hash).find(|i| i.1 == kind) else {
                continue;
            };
            let preferred = prefer == Some(p.remote.as_str());
            if found.is_none() || preferred {
                found = Some(Located {
                    pack_id: p.id,
                    pack_name: p.name.clone(),
                    remote: p.remote.clone(),
                    kind,
                    offset,
                    length,
                });
            }
            if preferred || prefer.is_none() {
                break;
            }
        }
        found
    }

    /// Does `remote` hold object `hash` (as far as its indexes say)?
    pub fn known(&self, remote: &str, hash: &Hash) -> bool {
        self.packs
            .iter()
            .any(|p| p.remote == remote && p.entries.find(hash).next().is_some())
    }

    /// Is `hash` promised by some remote: listed in one of its indexes (a lazy clone's
    /// objects that were not fetched yet)?
    pub fn promised(&self, hash: &Hash) -> bool {
        self.packs
            .iter()
            .any(|p| p.entries.find(hash).next().is_some())
    }

    /// Does a remote other than `remote` promise `hash`?
    pub fn promised_elsewhere(&self, remote: &str, hash: &Hash) -> bool {
        self.packs
            .iter()
            .any(|p| p.remote != remote && p.entries.find(hash).next().is_some())
    }

    /// Every object of `remote`'s packs (or of every remote's).
    pub fn objects<'a>(&'a self, remote: Option<&'a str>) -> impl Iterator<Item = Item> + 'a {
        self.packs
            .iter()
            .filter(move |p| remote.is_none_or(|r| p.remote == r))
            .flat_map(|p| p.entries.items())
    }

    /// The objects of pack `pack_id` in pack order (for read-ahead).
    pub fn in_pack_order(&self, pack_id: i64) -> Vec<Item> {
        let mut items: Vec<Item> = self
            .packs
            .iter()
            .filter(|p| p.id == pack_id)
            .flat_map(|p| p.entries.items())
            .collect();
        items.sort_unstable_by_key(|i| i.2);
        items
    }
}

/// A pack's entries: its blob, or the rows an older build wrote.
/// Records one pack's index as known (after this process uploaded or downloaded it).
pub fn record(
    db: &Connection,
    remote: &str,
    index_name: &str,
    pack_name: &str,
    entries: &[IndexEntry],
) -> Result<()> {
    db.prepare_cached(
        "INSERT OR IGNORE INTO remote_pack (remote, index_name, pack_name, entries)
         VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![
        remote,
        index_name,
        pack_name,
        PackEntries::encode(entries)
    ])?;
    Ok(())
}

fn forget_pack(db: &Connection, id: i64) -> Result<()> {
    db.execute("DELETE FROM remote_object WHERE pack = ?1", [id])?;
    db.execute("DELETE FROM remote_pack WHERE id = ?1", [id])?;
    Ok(())
}

/// Forgets everything known about a remote (it was removed).
pub fn forget_remote(db: &Connection, remote: &str) -> Result<()> {
    let ids: Vec<i64> = db
        .prepare("SELECT id FROM remote_pack WHERE remote = ?1")?
        .query_map([remote], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for id in ids {
        forget_pack(db, id)?;
    }
    Ok(())
}

/// Brings the catalog of `remote` up to date with the remote's `index/` listing.
pub fn sync(store: &mut Store, t: &Transport, remote: &str) -> Result<SyncReport> {
    let listed = t.run(t.list("index"))?;
    let on_remote: HashSet<String> = listed
        .iter()
        .filter_map(|l| l.key.strip_prefix("index/").map(str::to_string))
        .filter(|n| n.len() == 64)
        .collect();
    let known: HashMap<String, i64> = store.read(|db| {
        let mut st = db.prepare("SELECT index_name, id FROM remote_pack WHERE remote = ?1")?;
        let rows = st.query_map([remote], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    })?;
    let gone: Vec<i64> = known
        .iter()
        .filter(|(n, _)| !on_remote.contains(*n))
        .map(|(_, id)| *id)
        .collect();
    let new: Vec<String> = on_remote
        .iter()
        .filter(|n| !known.contains_key(*n))
        .cloned()
        .collect();
    // Indexes are small; fetch many at once (a clone of 100 000 files reads ~30 before
    // anything else: their round trips are most of its time).
    let fetched: Vec<(String, PackIndex)> = t.run(
        futures_util::stream::iter(new.iter())
            .map(|n| async move {
                let data = t
                    .get(&index_key(n))
                    .await?
                    .ok_or_else(|| t.err(&index_key(n), "listed but gone"))?;
                let idx = PackIndex::decode(n, &data).map_err(|reason| Error::RemoteCorrupt {
                    remote: t.name.clone(),
                    what: format!("index {n}"),
                    reason,
                })?;
                Ok::<_, Error>((n.clone(), idx))
            })
            .buffer_unordered(16)
            .try_collect(),
    )?;
    store.write(|db| {
        for id in &gone {
            forget_pack(db, *id)?;
        }
        for (n, idx) in &fetched {
            record(db, remote, n, &idx.pack, &idx.entries)?;
        }
        Ok(())
    })?;
    Ok(SyncReport {
        indexes_read: fetched.len(),
        indexes_forgotten: gone.len(),
    })
}
