//! Garbage collection: mark what is reachable, sweep the rest (see the module docs).

use std::collections::HashSet;

use rusqlite::{Connection, OptionalExtension, Statement};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::store::content;
use crate::store::objects::{CHUNK_SIZE, HOLE, Hash, Kind, Tree};

/// What [`gc`] removed.
#[derive(Serialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    pub chunks_removed: u64,
    pub contents_removed: u64,
    pub trees_removed: u64,
    /// Sum of the data lengths of the removed chunks. The vault file itself does not shrink
    /// (SQLite reuses the free pages); only a VACUUM outside a transaction gives them back.
    pub bytes_freed: u64,
    /// Dead live layers (from restores) whose rows were deleted first.
    pub layers_purged: u64,
    /// Distinct reachable objects (chunks, contents and trees) that were kept.
    pub objects_kept: u64,
}

fn gc_refused(what: String) -> Error {
    Error::Corrupt {
        path: Default::default(),
        reason: format!("gc stopped before deleting anything: {what}; run `avfs vault verify`"),
    }
}

/// Walks the object graph from the roots, recording every reachable hash in `temp.gc_keep`.
struct Marker<'a> {
    db: &'a Connection,
    insert: Statement<'a>,
    tree_data: Statement<'a>,
    content_chunks: Statement<'a>,
    kept: HashSet<Hash>,
    /// Trees marked but not yet read.
    pending: Vec<Hash>,
    /// What remotes promise (a lazy clone's unfetched objects), loaded on first need.
    promises: Option<crate::remote::catalog::Catalog>,
}

impl<'a> Marker<'a> {
    fn new(db: &'a Connection) -> Result<Marker<'a>> {
        Ok(Marker {
            db,
            insert: db.prepare("INSERT OR IGNORE INTO temp.gc_keep (hash) VALUES (?1)")?,
            tree_data: db.prepare("SELECT data FROM tree WHERE hash = ?1")?,
            content_chunks: db
                .prepare("SELECT format, size, chunks FROM content WHERE hash = ?1")?,
            kept: HashSet::new(),
            pending: Vec::new(),
            promises: None,
        })
    }

    /// Is `h` listed in a remote's index (not fetched yet, not missing)?
    fn promised(&mut self, h: &Hash) -> Result<bool> {
        if self.promises.is_none() {
            self.promises = Some(crate::remote::catalog::Catalog::load(self.db)?);
        }
        Ok(self.promises.as_ref().is_some_and(|c| c.promised(h)))
    }

    /// Records `h` as reachable; true the first time it is seen.
    fn keep(&mut self, h: Hash) -> Result<bool> {
        if h == HOLE || !self.kept.insert(h) {
            return Ok(false);
        }
        self.insert.execute([&h.0[..]])?;
        Ok(true)
    }

    fn tree(&mut self, h: Hash) -> Result<()> {
        if self.keep(h)? {
            self.pending.push(h);
        }
        Ok(())
    }

    /// A file's content: a chunk hash for one chunk or less, else a chunk list. A chunk list
    /// stored under a small file's hash is kept too (readers would not use it, but a sweep
    /// must never be the thing that loses data).
    fn file(&mut self, h: Hash, size: u64) -> Result<()> {
        if !self.keep(h)? {
            return Ok(());
        }
        let row: Option<(i64, i64, Vec<u8>)> = self
            .content_chunks
            .query_row([&h.0[..]], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()?;
        match row {
            Some((format, stored, blob)) => {
                let ext = content::decode_row(format, &blob, stored.max(0) as u64)
                    .map_err(|e| gc_refused(format!("content {}: {e}", h.to_hex())))?;
                for (_, c) in ext.list {
                    self.keep(c)?;
                }
            }
            // A lazy clone's unfetched file: its remote holds it, nothing here to keep.
            None if size as usize > CHUNK_SIZE && self.promised(&h)? => {}
            None if size as usize > CHUNK_SIZE => {
                return Err(gc_refused(format!(
                    "content {} of a {size}-byte file is missing",
                    h.to_hex()
                )));
            }
            None => {}
        }
        Ok(())
    }

    /// Reads every pending tree once and marks what its entries reference.
    fn drain(&mut self) -> Result<()> {
        while let Some(h) = self.pending.pop() {
            let data: Option<Vec<u8>> = self
                .tree_data
                .query_row([&h.0[..]], |r| r.get(0))
                .optional()?;
            let data = match data {
                Some(d) => d,
                // A tree a remote promises (lazy clone): nothing below it is here to keep.
                None if self.promised(&h)? => continue,
                None => return Err(gc_refused(format!("tree {} is missing", h.to_hex()))),
            };
            if Tree::hash_of(&data) != h {
                return Err(gc_refused(format!("tree {} fails its hash", h.to_hex())));
            }
            let tree =
                Tree::decode(&data).map_err(|e| gc_refused(format!("tree {}: {e}", h.to_hex())))?;
            for e in tree.entries {
                match (e.kind, e.hash) {
                    (Kind::Dir, Some(sub)) => self.tree(sub)?,
                    (Kind::File, Some(c)) => self.file(c, e.size)?,
                    (_, Some(other)) => {
                        self.keep(other)?;
                    }
                    (_, None) => {}
                }
            }
        }
        Ok(())
    }
}

fn stored_hash(blob: &[u8], what: impl FnOnce() -> String) -> Result<Hash> {
    Hash::from_slice(blob)
        .map_err(|_| gc_refused(format!("{} holds a {}-byte hash", what(), blob.len())))
}

/// Marks everything reachable into `temp.gc_keep`; returns the number of distinct objects.
fn mark(db: &Connection) -> Result<u64> {
    let mut m = Marker::new(db)?;

    let roots: Vec<(String, Vec<u8>)> = db
        .prepare("SELECT 'workspace ' || name, base_root FROM workspace UNION ALL SELECT 'checkpoint ' || name, root FROM checkpoint")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    for (what, blob) in roots {
        m.tree(stored_hash(&blob, || what)?)?;
        m.drain()?;
    }
    // Roots running commands still need (see `store::pins`); a day-old pin is dropped.
    for h in crate::store::pins::roots(db, true)? {
        if crate::store::objects::tree_readable(db, &h)? {
            m.tree(h)?;
            m.drain()?;
        }
    }

    // Live layers: every layer that is not dead (rows of unknown layers are kept too:
    // being conservative costs some bytes, being wrong costs data).
    let live: Vec<(i64, i64, i64, i64, Vec<u8>)> = db
        .prepare(
            "SELECT layer, ino, kind, size, hash FROM inode
             WHERE hash IS NOT NULL AND layer NOT IN (SELECT id FROM layer WHERE dead = 1)",
        )?
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    for (layer, ino, kind, size, blob) in live {
        let h = stored_hash(&blob, || format!("inode {ino} of layer {layer}"))?;
        match kind {
            2 => m.tree(h)?,
            1 => m.file(h, size.max(0) as u64)?,
            _ => {
                m.keep(h)?;
            }
        }
        m.drain()?;
    }
    Ok(m.kept.len() as u64)
}

/// Deletes dead layers, then every chunk, content and tree that no workspace, checkpoint or
/// live layer can reach. Run it inside a write transaction; it does not VACUUM.
pub fn gc(db: &Connection) -> Result<GcReport> {
    let layers_purged = crate::workspace::purge_dead_layers(db)? as u64;
    db.execute_batch(
        "CREATE TEMP TABLE IF NOT EXISTS gc_keep (hash BLOB PRIMARY KEY) WITHOUT ROWID;
         DELETE FROM temp.gc_keep;",
    )?;
    let objects_kept = mark(db)?;

    let bytes_freed: i64 = db.query_row(
        "SELECT COALESCE(SUM(length(data)), 0) FROM chunk WHERE hash NOT IN (SELECT hash FROM temp.gc_keep)",
        [],
        |r| r.get(0),
    )?;
    let chunks_removed = db.execute(
        "DELETE FROM chunk WHERE hash NOT IN (SELECT hash FROM temp.gc_keep)",
        [],
    )?;
    let contents_removed = db.execute(
        "DELETE FROM content WHERE hash NOT IN (SELECT hash FROM temp.gc_keep)",
        [],
    )?;
    let trees_removed = db.execute(
        "DELETE FROM tree WHERE hash NOT IN (SELECT hash FROM temp.gc_keep)",
        [],
    )?;
    db.execute_batch("DROP TABLE IF EXISTS temp.gc_keep")?;

    Ok(GcReport {
        chunks_removed: chunks_removed as u64,
        contents_removed: contents_removed as u64,
        trees_removed: trees_removed as u64,
        bytes_freed: bytes_freed.max(0) as u64,
        layers_purged,
        objects_kept,
    })
}
