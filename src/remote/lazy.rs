//! The lazy clone's fault handler: when the store lacks a chunk, chunk list or tree that a
//! remote's index lists, fetch it by range, check it, keep it, hand it over.
//!
//! A read of one chunk brings the chunks stored after it in the same pack too (up to
//! 4 MiB, only ones this vault lacks): a push writes a file's chunks one after another,
//! so reading a large file sequentially costs a request per 4 MiB, not per 64 KiB.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use rusqlite::Connection;

use super::catalog;
use super::objects as wire;
use super::pack::{ObjKind, pack_key, verify};
use super::transport::Transport;
use crate::error::{Error, Result};
use crate::store::missing::{Missing, ObjectSource};
use crate::store::objects::Hash;

const READ_AHEAD: u64 = 4 * 1024 * 1024;

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
        let Some(loc) = catalog::locate(db, hash, kind, None)? else {
            return Ok(None);
        };
        let url: String = db
            .prepare_cached("SELECT url FROM remote WHERE name = ?1")?
            .query_row([&loc.remote], |r| r.get(0))
            .map_err(|_| Error::NoSuchRemote(loc.remote.clone()))?;
        // The object, then the ones stored right after it that this vault lacks.
        let mut items = vec![(kind, *hash, loc.offset, loc.length)];
        let mut end = loc.offset + loc.length;
        if kind == ObjKind::Chunk {
            for (h, k, off, len) in catalog::following(db, loc.pack_id, loc.offset, 64)? {
                if off != end || k != ObjKind::Chunk || end + len - loc.offset > READ_AHEAD {
                    break;
                }
                if wire::has(db, k, &h)? {
                    break;
                }
                items.push((k, h, off, len));
                end = off + len;
            }
        }
        let t = transport_for(&loc.remote, &url)?;
        let key = pack_key(&loc.pack_name);
        let bytes = t.run_anywhere(t.get_range(&key, loc.offset..end))?;
        let mut good: Vec<(ObjKind, Hash, &[u8])> = Vec::new();
        for (i, (k, h, off, len)) in items.iter().enumerate() {
            let at = (off - loc.offset) as usize;
            let data = &bytes[at..at + *len as usize];
            match verify(*k, h, data) {
                Ok(()) => good.push((*k, *h, data)),
                Err(reason) if i == 0 => {
                    return Err(Error::RemoteCorrupt {
                        remote: loc.remote.clone(),
                        what: format!("{} {}", k.name(), h.to_hex()),
                        reason,
                    });
                }
                // A bad neighbour is not what was asked for: leave it unfetched.
                Err(_) => break,
            }
        }
        // Keeping is a cache: if it fails (a busy vault), the read still succeeds.
        let _ = keep(db, &good);
        Ok(Some(good[0].2.to_vec()))
    }
}
