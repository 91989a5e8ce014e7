//! Quotas: limits per vault (scope "") and per workspace (scope = its name).

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use crate::error::Result;

#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Quota {
    /// "" for the whole vault, else a workspace name.
    pub scope: String,
    pub max_bytes: Option<u64>,
    pub max_files: Option<u64>,
    pub max_file_size: Option<u64>,
}

impl Quota {
    pub fn is_empty(&self) -> bool {
        self.max_bytes.is_none() && self.max_files.is_none() && self.max_file_size.is_none()
    }
}

pub fn get(db: &Connection, scope: &str) -> Result<Option<Quota>> {
    Ok(db
        .prepare_cached("SELECT max_bytes, max_files, max_file_size FROM quota WHERE scope = ?1")?
        .query_row([scope], |r| {
            Ok(Quota {
                scope: scope.to_string(),
                max_bytes: r.get::<_, Option<i64>>(0)?.map(|v| v as u64),
                max_files: r.get::<_, Option<i64>>(1)?.map(|v| v as u64),
                max_file_size: r.get::<_, Option<i64>>(2)?.map(|v| v as u64),
            })
        })
        .optional()?)
}

pub fn set(db: &Connection, q: &Quota) -> Result<()> {
    if q.is_empty() {
        return clear(db, &q.scope);
    }
    db.execute(
        "INSERT OR REPLACE INTO quota (scope, max_bytes, max_files, max_file_size) VALUES (?1, ?2, ?3, ?4)",
        params![q.scope, q.max_bytes.map(|v| v as i64), q.max_files.map(|v| v as i64), q.max_file_size.map(|v| v as i64)],
    )?;
    Ok(())
}

pub fn clear(db: &Connection, scope: &str) -> Result<()> {
    db.execute("DELETE FROM quota WHERE scope = ?1", [scope])?;
    Ok(())
}

/// Bytes the vault file uses (pages in use, not counting free pages).
pub fn vault_bytes(db: &Connection) -> Result<u64> {
    let pages: i64 = db.query_row("PRAGMA page_count", [], |r| r.get(0))?;
    let free: i64 = db.query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
    let size: i64 = db.query_row("PRAGMA page_size", [], |r| r.get(0))?;
    Ok(((pages - free).max(0) * size) as u64)
}
