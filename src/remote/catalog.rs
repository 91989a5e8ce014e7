//! This vault's copy of each remote's pack indexes: which object lies in which pack, at
//! which offset. A push consults it to send only what the remote lacks; a fetch and a
//! lazy read use it to fetch an object by range. It is a cache of what the remote says:
//! `sync` brings it up to date with one LIST (plus a GET per index not seen yet) and
//! forgets indexes the remote no longer has.

use std::collections::{HashMap, HashSet};

use futures_util::{StreamExt, TryStreamExt};
use rusqlite::{Connection, OptionalExtension, params};

use super::pack::{IndexEntry, ObjKind, PackIndex, index_key};
use super::transport::Transport;
use crate::error::{Error, Result};
use crate::store::Store;
use crate::store::objects::Hash;

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

/// Records one pack's index as known (after this process uploaded or downloaded it).
pub fn record(
    db: &Connection,
    remote: &str,
    index_name: &str,
    pack_name: &str,
    entries: &[IndexEntry],
) -> Result<()> {
    let n = db
        .prepare_cached(
            "INSERT OR IGNORE INTO remote_pack (remote, index_name, pack_name) VALUES (?1, ?2, ?3)",
        )?
        .execute(params![remote, index_name, pack_name])?;
    if n == 0 {
        return Ok(());
    }
    let id = db.last_insert_rowid();
    let mut ins = db.prepare_cached(
        "INSERT OR IGNORE INTO remote_object (hash, pack, kind, offset, length) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    for e in entries {
        ins.execute(params![&e.hash[..], id, e.kind, e.offset as i64, e.length])?;
    }
    Ok(())
}

/// Forgets everything known about a remote (it was removed).
pub fn forget_remote(db: &Connection, remote: &str) -> Result<()> {
    db.execute(
        "DELETE FROM remote_object WHERE pack IN (SELECT id FROM remote_pack WHERE remote = ?1)",
        [remote],
    )?;
    db.execute("DELETE FROM remote_pack WHERE remote = ?1", [remote])?;
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
    // Indexes are small; fetch several at once, and record them in batches so a killed
    // fetch keeps what it read.
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
            .buffer_unordered(8)
            .try_collect(),
    )?;
    store.write(|db| {
        for id in &gone {
            db.execute("DELETE FROM remote_object WHERE pack = ?1", [id])?;
            db.execute("DELETE FROM remote_pack WHERE id = ?1", [id])?;
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

/// Does `remote` hold object `hash` (as far as its indexes say)?
pub fn known(db: &Connection, remote: &str, hash: &Hash) -> Result<bool> {
    Ok(db
        .prepare_cached(
            "SELECT 1 FROM remote_object o JOIN remote_pack p ON p.id = o.pack
             WHERE o.hash = ?1 AND p.remote = ?2 LIMIT 1",
        )?
        .query_row(params![&hash.0[..], remote], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Is `hash` promised by some remote: listed in one of its indexes (a lazy clone's
/// objects that were not fetched yet)?
pub fn promised(db: &Connection, hash: &Hash) -> Result<bool> {
    Ok(db
        .prepare_cached("SELECT 1 FROM remote_object WHERE hash = ?1 LIMIT 1")?
        .query_row([&hash.0[..]], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Every object some remote promises, with its kind (for `vault verify`).
pub fn promised_all(db: &Connection) -> Result<Vec<(ObjKind, Hash)>> {
    let mut st = db.prepare("SELECT DISTINCT kind, hash FROM remote_object")?;
    let rows = st.query_map([], |r| Ok((r.get::<_, u8>(0)?, r.get::<_, Vec<u8>>(1)?)))?;
    let mut out = Vec::new();
    for row in rows {
        let (k, h) = row?;
        if let (Some(k), Ok(h)) = (ObjKind::from_u8(k), Hash::from_slice(&h)) {
            out.push((k, h));
        }
    }
    Ok(out)
}

/// Where object `hash` of `kind` lies, preferring remote `prefer`.
pub fn locate(
    db: &Connection,
    hash: &Hash,
    kind: ObjKind,
    prefer: Option<&str>,
) -> Result<Option<Located>> {
    let mut st = db.prepare_cached(
        "SELECT p.id, p.pack_name, p.remote, o.offset, o.length FROM remote_object o
         JOIN remote_pack p ON p.id = o.pack
         WHERE o.hash = ?1 AND o.kind = ?2
         ORDER BY p.remote = ?3 DESC, p.id LIMIT 1",
    )?;
    Ok(st
        .query_row(params![&hash.0[..], kind as u8, prefer], |r| {
            Ok(Located {
                pack_id: r.get(0)?,
                pack_name: r.get(1)?,
                remote: r.get(2)?,
                kind,
                offset: r.get::<_, i64>(3)? as u64,
                length: r.get::<_, i64>(4)? as u64,
            })
        })
        .optional()?)
}

/// The objects stored right after `after` in pack `pack_id`, in order (for read-ahead).
pub fn following(
    db: &Connection,
    pack_id: i64,
    after: u64,
    limit: usize,
) -> Result<Vec<(Hash, ObjKind, u64, u64)>> {
    let mut st = db.prepare_cached(
        "SELECT hash, kind, offset, length FROM remote_object
         WHERE pack = ?1 AND offset > ?2 ORDER BY offset LIMIT ?3",
    )?;
    let rows = st.query_map(params![pack_id, after as i64, limit as i64], |r| {
        let h: Vec<u8> = r.get(0)?;
        let k: u8 = r.get(1)?;
        Ok((h, k, r.get::<_, i64>(2)? as u64, r.get::<_, i64>(3)? as u64))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (h, k, o, l) = row?;
        if let (Ok(h), Some(k)) = (Hash::from_slice(&h), ObjKind::from_u8(k)) {
            out.push((h, k, o, l));
        }
    }
    Ok(out)
}

/// The objects of pack `pack_id` that lie wholly inside bytes `range`, in order (a lazy
/// read of a tree brings its neighbours: see `lazy`).
pub fn within(
    db: &Connection,
    pack_id: i64,
    range: std::ops::Range<u64>,
) -> Result<Vec<(Hash, ObjKind, u64, u64)>> {
    let mut st = db.prepare_cached(
        "SELECT hash, kind, offset, length FROM remote_object
         WHERE pack = ?1 AND offset >= ?2 AND offset < ?3 AND offset + length <= ?3
         ORDER BY offset",
    )?;
    let rows = st.query_map(
        params![pack_id, range.start as i64, range.end as i64],
        |r| {
            let h: Vec<u8> = r.get(0)?;
            let k: u8 = r.get(1)?;
            Ok((h, k, r.get::<_, i64>(2)? as u64, r.get::<_, i64>(3)? as u64))
        },
    )?;
    let mut out = Vec::new();
    for row in rows {
        let (h, k, o, l) = row?;
        if let (Ok(h), Some(k)) = (Hash::from_slice(&h), ObjKind::from_u8(k)) {
            out.push((h, k, o, l));
        }
    }
    Ok(out)
}
