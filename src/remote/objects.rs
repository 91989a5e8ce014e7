//! Reading and storing objects in their wire form (see `pack`), for push and fetch.

use rusqlite::{Connection, OptionalExtension, params};

use super::commits;
use super::pack::ObjKind;
use crate::error::{Error, Result};
use crate::store::objects::{self as store_objects, Hash};

/// Is object `hash` of `kind` stored in this vault?
pub fn has(db: &Connection, kind: ObjKind, hash: &Hash) -> Result<bool> {
    let sql = match kind {
        ObjKind::Chunk => "SELECT 1 FROM chunk WHERE hash = ?1",
        ObjKind::Content => "SELECT 1 FROM content WHERE hash = ?1",
        ObjKind::Tree => "SELECT 1 FROM tree WHERE hash = ?1",
        ObjKind::Checkpoint => "SELECT 1 FROM checkpoint_object WHERE hash = ?1",
    };
    Ok(db
        .prepare_cached(sql)?
        .query_row([&hash.0[..]], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Stores a verified object. Trees go in without their usage totals (computed on first
/// use, as for trees of older formats), so they can arrive in any order.
pub fn insert(db: &Connection, kind: ObjKind, hash: &Hash, data: &[u8]) -> Result<()> {
    match kind {
        ObjKind::Chunk => store_objects::put_chunk_hashed(db, hash, data)?,
        ObjKind::Content => {
            crate::store::content::insert_wire(db, hash, data)?;
        }
        ObjKind::Tree => {
            db.prepare_cached("INSERT OR IGNORE INTO tree (hash, data) VALUES (?1, ?2)")?
                .execute(params![&hash.0[..], data])?;
        }
        ObjKind::Checkpoint => commits::put(db, data, hash)?,
    }
    Ok(())
}

/// The wire bytes of a stored object, checked against its hash. An object this vault
/// only has the promise of (a lazy clone) is fetched through the store's usual path.
pub fn read(db: &Connection, kind: ObjKind, hash: &Hash) -> Result<Vec<u8>> {
    let bad = |why: &str| Error::Corrupt {
        path: Default::default(),
        reason: format!("{} {} {why}", kind.name(), hash.to_hex()),
    };
    match kind {
        // The wire carries a chunk's bytes, whatever codec this vault stores it with:
        // decoded and checked against its hash (or fetched, in a lazy clone) as any read.
        ObjKind::Chunk => store_objects::get_chunk(db, hash),
        // Checked against its hash as it is read.
        ObjKind::Content => crate::store::content::wire_of(db, hash),
        ObjKind::Tree => {
            let d: Option<Vec<u8>> = db
                .prepare_cached("SELECT data FROM tree WHERE hash = ?1")?
                .query_row([&hash.0[..]], |r| r.get(0))
                .optional()?;
            match d {
                Some(d) if store_objects::Tree::hash_of(&d) == *hash => Ok(d),
                Some(_) => Err(bad("fails its hash")),
                // Faults it in (lazy clone) or reports it missing; postcard's encoding
                // is canonical, so re-encoding gives the stored bytes.
                None => Ok(store_objects::get_tree(db, hash)?.encode()),
            }
        }
        ObjKind::Checkpoint => commits::raw(db, hash),
    }
}
