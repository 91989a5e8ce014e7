//! The search index's rows that outlive what they index: forgetting a deleted
//! workspace's documents and the texts nobody refers to any more. They are plain rows of
//! the vault's schema, so the store removes them; deleting a workspace (a lower layer
//! than `search`) can then leave no stale document behind for a new workspace that gets
//! the same id.

use rusqlite::Connection;

use crate::error::Result;
use crate::store::schema::SEARCH_TABLES;

/// Does the vault have the index's tables? A vault gets them at its first search
/// (format 10; files of formats 4-9 have them from the start).
pub fn has_tables(db: &Connection) -> Result<bool> {
    Ok(db
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM main.sqlite_schema WHERE type = 'table' AND name = 'search_state')",
        )?
        .query_row([], |r| r.get(0))?)
}

/// Makes the index's tables unless the vault has them (inside the caller's write
/// transaction, so two first searches cannot both make them).
pub fn ensure_tables(db: &Connection) -> Result<()> {
    if !has_tables(db)? {
        db.execute_batch(SEARCH_TABLES)?;
    }
    Ok(())
}

/// Deletes indexed contents no document refers to any more.
pub fn purge_unused_texts(db: &Connection) -> Result<()> {
    if !has_tables(db)? {
        return Ok(());
    }
    let unused: Vec<(i64, bool)> = db
        .prepare("SELECT id, indexed FROM search_text t WHERE NOT EXISTS (SELECT 1 FROM search_doc d WHERE d.text = t.id)")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    for (id, indexed) in unused {
        if indexed {
            db.prepare_cached("DELETE FROM search_fts WHERE rowid = ?1")?
                .execute([id])?;
        }
        db.prepare_cached("DELETE FROM search_text WHERE id = ?1")?
            .execute([id])?;
    }
    Ok(())
}

/// Drops a workspace's index (the workspace is being deleted).
pub fn forget_workspace(db: &Connection, ws: i64) -> Result<()> {
    if !has_tables(db)? {
        return Ok(());
    }
    db.execute("DELETE FROM search_doc WHERE workspace = ?1", [ws])?;
    db.execute("DELETE FROM search_state WHERE workspace = ?1", [ws])?;
    purge_unused_texts(db)
}
