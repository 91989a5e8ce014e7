//! Trees a read computes but may not store: the live state of a workspace whose changes
//! are not flushed yet, hashed for `diff`, `log`, `grep` or `find` by a command that must
//! leave the vault file as it found it (and may have it open read-only). They go to a
//! table of the connection's private, in-memory `temp` schema, which SQLite writes even on
//! a read-only connection, and `get_tree` looks there for a tree the vault lacks.

use rusqlite::{Connection, OptionalExtension, params};

use super::objects::Hash;
use crate::error::Result;

fn ensure(db: &Connection) -> Result<()> {
    db.execute_batch(
        "CREATE TEMP TABLE IF NOT EXISTS scratch_tree
         (hash BLOB PRIMARY KEY, data BLOB NOT NULL, files INTEGER, bytes INTEGER)",
    )?;
    Ok(())
}

/// Keeps a tree for the life of the connection (not in the vault).
pub fn put(db: &Connection, hash: &Hash, data: &[u8], files: u64, bytes: u64) -> Result<()> {
    ensure(db)?;
    db.prepare_cached(
        "INSERT OR IGNORE INTO temp.scratch_tree (hash, data, files, bytes) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![&hash.0[..], data, files as i64, bytes as i64])?;
    Ok(())
}

/// A tree kept by `put` on this connection: its bytes and totals.
pub fn get(db: &Connection, hash: &Hash) -> Result<Option<(Vec<u8>, u64, u64)>> {
    // No scratch table: nothing was kept (and the lookup is only made for a tree the
    // vault lacks, which is rare).
    let Ok(mut stmt) =
        db.prepare_cached("SELECT data, files, bytes FROM temp.scratch_tree WHERE hash = ?1")
    else {
        return Ok(None);
    };
    Ok(stmt
        .query_row([&hash.0[..]], |r| {
            Ok((
                r.get(0)?,
                r.get::<_, i64>(1)? as u64,
                r.get::<_, i64>(2)? as u64,
            ))
        })
        .optional()?)
}
