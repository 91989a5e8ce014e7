//! The lazy clone's fault handler: when the store lacks a chunk, chunk list or tree that a
//! remote's index lists, fetch it by range, check it, keep it, hand it over.
//!
//! A read of one chunk brings the chunks stored after it in the same pack too (only ones
//! this vault lacks): a push writes a file's chunks one after another, so reading a
//! large file sequentially costs a request per 4 MiB (64 chunks), not per 64 KiB. A
//! chunk shorter than a full one is a small file (or a file's end): its neighbours are
//! other files, read ahead up to 64 of them and 1 MiB, so the first `cat` of one small
//! file does not hash and store megabytes of others, while reading many small files (a
//! `grep -r`, a build) still costs a request per 64 files, not per file.
//!
//! A read of one tree (or chunk list) brings the metadata around it in its pack: up to
//! 1 MiB before it and 256 KiB after. A push writes a directory's subtrees right before
//! the directory (children first), so the first `ls` of a deep path, or a `find` below a
//! directory, costs a request per MiB of listings, not one per directory, and a lazy
//! clone needs only its root tree to begin.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use rusqlite::Connection;

use super::catalog;
use super::objects as wire;
use super::pack::{ObjKind, pack_key, verify};
use super::transport::Transport;
use crate::error::{Error, Result};
use crate::store::missing::{Missing, ObjectSource};
use crate::store::objects::{CHUNK_SIZE, Hash};

const READ_AHEAD: u64 = 4 * 1024 * 1024;
/// Read-ahead after a partial chunk (a small file): its neighbours are other files.
const READ_AHEAD_SMALL: u64 = 1024 * 1024;
/// At most this many chunks after the one asked for (64 full chunks are `READ_AHEAD`).
const READ_AHEAD_CHUNKS: usize = 64;
/// Metadata read around a missing tree or chunk list: before it, after it.
const TREES_BEFORE: u64 = 1024 * 1024;
const TREES_AFTER: u64 = 256 * 1024;

struct LazyFetch;

/// Registers the fault handler for this process (the `avfs` binary does it at start).
pub fn install() {
    crate::store::missing::set_source(Box::new(LazyFetch));
}

fn transports() -> &'static Mutex<HashMap<String, Arc<Transport>>> {
    static T: OnceLock<Mutex<HashMap<String, Arc<Transport>>>> = OnceLock::new();
    T.get_or_init(Default::default)
}

fn transport_for(remote: &str, url: &str) -> Result<Arc<Transport>> {
    let mut map = transports().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(t) = map.get(url) {
        return Ok(t.clone());
    }
    let t = Arc::new(super::open_transport(
        &crate::registry::default_home(),
        remote,
        url,
    )?);
    map.insert(url.to_string(), t.clone());
    Ok(t)
}

/// Listings and chunk lists this process fetched, by hash: a command reads inside one
/// transaction, whose snapshot does not see what `keep` stored through another
/// connection, so without this the next directory of a path would be fetched again.
/// Bounded; contents (chunks) are not kept here, they are read once.
struct Fetched {
    objects: HashMap<(u8, Hash), Arc<[u8]>>,
    bytes: usize,
}

const FETCHED_MAX_BYTES: usize = 64 * 1024 * 1024;

fn fetched() -> &'static Mutex<Fetched> {
    static F: OnceLock<Mutex<Fetched>> = OnceLock::new();
    F.get_or_init(|| {
        Mutex::new(Fetched {
            objects: HashMap::new(),
            bytes: 0,
        })
    })
}

fn remember(objects: &[(ObjKind, Hash, &[u8])]) {
    let mut f = fetched().lock().unwrap_or_else(|e| e.into_inner());
    for (k, h, d) in objects {
        if *k == ObjKind::Chunk || f.bytes + d.len() > FETCHED_MAX_BYTES {
            continue;
        }
        if f.objects.insert((*k as u8, *h), Arc::from(*d)).is_none() {
            f.bytes += d.len();
        }
    }
}

fn recall(kind: ObjKind, hash: &Hash) -> Option<Arc<[u8]>> {
    let f = fetched().lock().unwrap_or_else(|e| e.into_inner());
    f.objects.get(&(kind as u8, *hash)).cloned()
}

/// SQLITE_TXN_WRITE: the connection holds the write lock, so the objects go in with its
/// transaction; otherwise a connection of our own commits them at once.
fn in_write_txn(db: &Connection) -> bool {
    // SAFETY: a valid connection handle and a NUL-terminated schema name.
    unsafe { rusqlite::ffi::sqlite3_txn_state(db.handle(), c"main".as_ptr()) == 2 }
}

fn keep(db: &Connection, objects: &[(ObjKind, Hash, &[u8])]) -> Result<()> {
    let insert_all = |c: &Connection| -> Result<()> {
        for (k, h, d) in objects {
            wire::insert(c, *k, h, d)?;
        }
        Ok(())
    };
    if in_write_txn(db) || db.is_autocommit() {
        return insert_all(db);
    }
    // Inside a read transaction: its snapshot will not see these rows, but later
    // commands will; the caller gets the bytes directly.
    let Some(path) = db.path().filter(|p| !p.is_empty()) else {
        return Ok(());
    };
    let mut other = crate::store::Store::open(std::path::Path::new(path))?;
    other.write(insert_all)
}

impl ObjectSource for LazyFetch {
    fn fetch(&self, db: &Connection, kind: Missing, hash: &Hash) -> Result<Option<Vec<u8>>> {
        let kind = match kind {
            Missing::Chunk => ObjKind::Chunk,
            Missing::Content => ObjKind::Content,
            Missing::Tree => ObjKind::Tree,
        };
        if let Some(d) = recall(kind, hash) {
            return Ok(Some(d.to_vec()));
        }
        let cat = catalog::Catalog::load(db)?;
        let Some(loc) = cat.locate(hash, kind, None) else {
            return Ok(None);
        };
        let url: String = db
            .prepare_cached("SELECT url FROM remote WHERE name = ?1")?
            .query_row([&loc.remote], |r| r.get(0))
            .map_err(|_| Error::NoSuchRemote(loc.remote.clone()))?;
        let neighbours = cat.in_pack_order(loc.pack_id);
        let (start, items) = if kind == ObjKind::Chunk {
            (loc.offset, chunks_after(db, &neighbours, &loc, *hash)?)
        } else {
            metadata_around(db, &neighbours, &loc, *hash)?
        };
        let end = items.iter().map(|i| i.2 + i.3).max().unwrap_or(start);
        let t = transport_for(&loc.remote, &url)?;
        let key = pack_key(&loc.pack_name);
        let bytes = t.run_anywhere(t.get_range(&key, start..end))?;
        let mut asked: Option<&[u8]> = None;
        let mut good: Vec<(ObjKind, Hash, &[u8])> = Vec::new();
        for (k, h, off, len) in &items {
            let at = (off - start) as usize;
            let data = &bytes[at..at + *len as usize];
            let ok = verify(*k, h, data);
            if *h == *hash && *k == kind {
                if let Err(reason) = ok {
                    return Err(Error::RemoteCorrupt {
                        remote: loc.remote.clone(),
                        what: format!("{} {}", k.name(), h.to_hex()),
                        reason,
                    });
                }
                asked = Some(data);
            }
            // A bad neighbour is not what was asked for: leave it unfetched.
            if ok.is_ok() {
                good.push((*k, *h, data));
            }
        }
        let asked = asked.ok_or_else(|| Error::Internal("lazy fetch lost its object".into()))?;
        // Keeping is a cache: if it fails (a busy vault), the read still succeeds.
        let _ = keep(db, &good);
        remember(&good);
        Ok(Some(asked.to_vec()))
    }
}

/// An object to fetch: kind, hash, offset and length in its pack.
type Item = (ObjKind, Hash, u64, u64);

/// The chunk asked for, then the chunks stored right after it that this vault lacks
/// (a file's next chunks, up to `READ_AHEAD`). `pack` is the pack's objects in order.
fn chunks_after(
    db: &Connection,
    pack: &[catalog::Item],
    loc: &catalog::Located,
    hash: Hash,
) -> Result<Vec<Item>> {
    let mut items = vec![(ObjKind::Chunk, hash, loc.offset, loc.length)];
    let mut end = loc.offset + loc.length;
    let budget = if loc.length as usize == CHUNK_SIZE {
        READ_AHEAD
    } else {
        READ_AHEAD_SMALL
    };
    let after = pack.partition_point(|i| i.2 <= loc.offset);
    for &(h, k, off, len) in pack[after..].iter().take(READ_AHEAD_CHUNKS) {
        if off != end || k != ObjKind::Chunk || end + len - loc.offset > budget {
            break;
        }
        if wire::has(db, k, &h)? {
            break;
        }
        items.push((k, h, off, len));
        end = off + len;
    }
    Ok(items)
}

/// The tree or chunk list asked for and the trees and chunk lists this vault lacks
/// around it in its pack (one contiguous range from the returned start). `pack` is the
/// pack's objects in order.
fn metadata_around(
    db: &Connection,
    pack: &[catalog::Item],
    loc: &catalog::Located,
    hash: Hash,
) -> Result<(u64, Vec<Item>)> {
    let lo = loc.offset.saturating_sub(TREES_BEFORE);
    let hi = loc.offset + loc.length + TREES_AFTER;
    let first = pack.partition_point(|i| i.2 < lo);
    let mut items = Vec::new();
    for &(h, k, off, len) in &pack[first..] {
        if off >= hi {
            break;
        }
        if off + len > hi {
            continue;
        }
        let wanted = off == loc.offset
            || (matches!(k, ObjKind::Tree | ObjKind::Content)
                && recall(k, &h).is_none()
                && !wire::has(db, k, &h)?);
        if wanted {
            items.push((k, h, off, len));
        }
    }
    if !items.iter().any(|i| i.2 == loc.offset) {
        items = vec![(loc.kind, hash, loc.offset, loc.length)];
    }
    let start = items.first().map_or(loc.offset, |i| i.2);
    Ok((start, items))
}
