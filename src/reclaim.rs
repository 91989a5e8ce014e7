//! Space reclaim without a manual `gc`: content that nothing references any more goes,
//! and the vault file shrinks, as part of normal work.
//!
//! Most garbage is young: a file rewritten again and again in a mount (an editor, a build,
//! fsx) stores new chunks at every close, and the previous ones are referenced by nothing
//! but the live layer that just dropped them. [`reclaim`] collects exactly that kind of
//! garbage at a cost that does not grow with the vault:
//!
//! * Objects (chunks, contents, trees) are *young* when stored after the last collection
//!   (row ids above a watermark per table, kept in `meta`) or when the last collection
//!   found that only the live state references them (`reclaim_young`); the others are
//!   *settled*. A settled object never references a young one: an object references
//!   only what existed when it was stored, what a checkpoint reaches is settled with
//!   everything below it, and only a full `gc` deletes settled rows, together with every
//!   row that references them (so a hash stored again later is referenced only by young
//!   rows).
//! * A collection loads the young rows, marks those reachable from checkpoint roots,
//!   workspace base roots and live (not dead) inodes, descending only into young trees
//!   and contents, and deletes the young rows nothing reached. Cost: O(young rows +
//!   checkpoints + live inodes), however large the settled part of the vault is.
//! * What a checkpoint reaches becomes settled. What only the live state reaches stays
//!   young (listed in `reclaim_young`), so it can still go when the live state drops it.
//!
//! Safety against other processes: a collection runs inside a write transaction, so it
//! sees every committed change and no writer runs meanwhile; every writer stores a
//! content and references it (inode, tree, checkpoint) in one transaction. A process
//! that keeps a hash across transactions (the mount's write buffers keep the content
//! they apply to) holds it through a live inode, which is a root, and checks that it
//! still exists before building on it (`content::exists`).
//!
//! Garbage that was settled (a deleted checkpoint or fork, a restored-away state) is
//! found by a full mark from every root: [`collect_all`], which the commands that create
//! it run right away (`checkpoint delete`, `vault delete`) and `avfs gc` runs on demand.
//! Both end with an incremental vacuum, so the file gives the pages back.

use std::collections::HashMap;

use rusqlite::{Connection, params};
use serde::Serialize;

use crate::error::Result;
use crate::store::content;
use crate::store::objects::{CHUNK_SIZE, Hash, Kind};
use crate::store::{meta_get, meta_set};

/// A collection runs once this many rows were stored since the last one (128 chunks are
/// at most 8 MiB), or as many as the last one kept young, whichever is more: a long run
/// of writes with no checkpoint (a build) is collected a logarithmic number of times.
const DUE_ROWS: i64 = 128;

const TABLES: [&str; 3] = ["chunk", "content", "tree"];

fn mark_key(table: &str) -> String {
    format!("reclaim.{table}")
}

/// What one collection did.
#[derive(Serialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct ReclaimReport {
    /// Young rows looked at (chunks, contents, trees).
    pub young: u64,
    pub chunks_removed: u64,
    pub contents_removed: u64,
    pub trees_removed: u64,
    /// Sum of the data lengths of the removed chunks.
    pub bytes_freed: u64,
    /// Young rows kept because only the live state references them (not settled yet).
    pub kept_live: u64,
    /// Pages the file gave back (incremental vacuum).
    pub pages_freed: u64,
}

fn watermark(db: &Connection, table: &str) -> Result<i64> {
    Ok(meta_get(db, &mark_key(table))?.unwrap_or(0))
}

fn max_id(db: &Connection, table: &str) -> Result<i64> {
    Ok(db
        .prepare_cached(&format!("SELECT COALESCE(MAX(id), 0) FROM {table}"))?
        .query_row([], |r| r.get(0))?)
}

/// Were enough rows stored since the last collection for one to pay off? Two cheap
/// queries per table; call it as often as you like.
pub fn due(db: &Connection) -> Result<bool> {
    let kept = meta_get(db, "reclaim.kept")?.unwrap_or(0);
    let mut young = 0;
    for t in TABLES {
        young += (max_id(db, t)? - watermark(db, t)?).max(0);
    }
    Ok(young >= DUE_ROWS.max(kept))
}

/// Did the last collection keep rows that only the live state referenced? Those go only
/// when a collection runs after the live state dropped them, and a deletion stores
/// nothing that would make one [`due`]: a mount runs one when it goes quiet.
pub fn kept_live(db: &Connection) -> Result<bool> {
    Ok(meta_get(db, "reclaim.kept")?.unwrap_or(0) > 0)
}

/// Runs [`reclaim`] when [`due`]; call it inside a write transaction.
pub fn reclaim_if_due(db: &Connection) -> Result<Option<ReclaimReport>> {
    if due(db)? {
        Ok(Some(reclaim(db)?))
    } else {
        Ok(None)
    }
}

/// One young row: its id, and whether a root reached it (settled: from a checkpoint).
#[derive(Clone, Copy, Default)]
struct Young {
    id: i64,
    reached: bool,
    settled: bool,
}

struct Marker<'a> {
    db: &'a Connection,
    chunks: HashMap<Hash, Young>,
    contents: HashMap<Hash, Young>,
    trees: HashMap<Hash, Young>,
}

impl Marker<'_> {
    /// Marks `h` (a file content of `size` bytes) and its young chunks.
    fn file(&mut self, h: Hash, size: u64, settled: bool) -> Result<()> {
        if size as usize <= CHUNK_SIZE {
            if let Some(y) = self.chunks.get_mut(&h) {
                y.reached = true;
                y.settled |= settled;
            }
            return Ok(());
        }
        let Some(y) = self.contents.get_mut(&h) else {
            return Ok(()); // settled: references only settled chunks
        };
        if y.reached && (y.settled || !settled) {
            return Ok(());
        }
        y.reached = true;
        y.settled |= settled;
        for (_, c) in &content::extents(self.db, &h, size)?.list {
            if let Some(y) = self.chunks.get_mut(c) {
                y.reached = true;
                y.settled |= settled;
            }
        }
        Ok(())
    }

    /// Marks the young tree `h` and what it references, descending only into young trees.
    fn tree(&mut self, h: Hash, settled: bool) -> Result<()> {
        let mut stack = vec![h];
        while let Some(h) = stack.pop() {
            let Some(y) = self.trees.get_mut(&h) else {
                continue;
            };
            if y.reached && (y.settled || !settled) {
                continue;
            }
            y.reached = true;
            y.settled |= settled;
            let tree = crate::store::objects::get_tree(self.db, &h)?;
            for e in tree.entries {
                match (e.kind, e.hash) {
                    (Kind::Dir, Some(sub)) => stack.push(sub),
                    (Kind::File, Some(c)) => self.file(c, e.size, settled)?,
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

fn load_young(db: &Connection, tbl: usize, mark: i64) -> Result<HashMap<Hash, Young>> {
    let table = TABLES[tbl];
    let mut out = HashMap::new();
    let mut stmt = db.prepare_cached(&format!(
        "SELECT id, hash FROM {table} WHERE id > ?1
         UNION ALL SELECT t.id, t.hash FROM reclaim_young r JOIN {table} t ON t.id = r.id
         WHERE r.tbl = ?2 AND r.id <= ?1"
    ))?;
    let mut rows = stmt.query(params![mark, tbl as i64])?;
    while let Some(r) = rows.next()? {
        let id: i64 = r.get(0)?;
        let blob: Vec<u8> = r.get(1)?;
        if let Ok(h) = Hash::from_slice(&blob) {
            out.insert(
                h,
                Young {
                    id,
                    ..Default::default()
                },
            );
        }
    }
    Ok(out)
}

/// Collects young garbage (see the module documentation) inside the caller's write
/// transaction, then returns freed pages to the file system.
pub fn reclaim(db: &Connection) -> Result<ReclaimReport> {
    let mut report = collect_young(db)?;
    report.pages_freed = crate::store::vacuum(db)?;
    Ok(report)
}

/// Gives the file's free pages back to the file system (an incremental vacuum): what a
/// writer that collected with [`collect_young`] does once it goes quiet. The pages given
/// back.
pub fn give_back_pages(db: &Connection) -> Result<u64> {
    crate::store::vacuum(db)
}

/// [`reclaim`] without giving the freed pages back: they stay on the file's free list,
/// where the next writes take them. A writer that goes on (a mount) collects this way
/// while it writes; moving pages to shrink the file only for the next writes to grow it
/// again would double what goes through the WAL.
pub fn collect_young(db: &Connection) -> Result<ReclaimReport> {
    let marks: Vec<i64> = TABLES
        .iter()
        .map(|t| watermark(db, t))
        .collect::<Result<_>>()?;
    let mut m = Marker {
        db,
        chunks: load_young(db, 0, marks[0])?,
        contents: load_young(db, 1, marks[1])?,
        trees: load_young(db, 2, marks[2])?,
    };
    let mut report = ReclaimReport {
        young: (m.chunks.len() + m.contents.len() + m.trees.len()) as u64,
        ..Default::default()
    };
    if report.young > 0 {
        mark_roots(&mut m)?;
        sweep(db, &m, &mut report)?;
        // What only the live state holds stays young; everything else stored so far is
        // settled (the watermark is taken after the sweep, so new rows get higher ids).
        db.prepare_cached("DELETE FROM reclaim_young")?
            .execute([])?;
        let mut keep = db.prepare_cached("INSERT INTO reclaim_young (tbl, id) VALUES (?1, ?2)")?;
        for (tbl, young) in [&m.chunks, &m.contents, &m.trees].into_iter().enumerate() {
            for y in young.values().filter(|y| y.reached && !y.settled) {
                keep.execute(params![tbl as i64, y.id])?;
                report.kept_live += 1;
            }
            let t = TABLES[tbl];
            meta_set(db, &mark_key(t), max_id(db, t)?)?;
        }
        meta_set(db, "reclaim.kept", report.kept_live as i64)?;
    }
    Ok(report)
}

fn mark_roots(m: &mut Marker) -> Result<()> {
    let db = m.db;
    let hash = |b: Vec<u8>| Hash::from_slice(&b);
    // Checkpoints: what they reach is settled.
    let roots: Vec<Vec<u8>> = db
        .prepare_cached("SELECT root FROM checkpoint")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for r in roots {
        let h = hash(r)?;
        if m.trees.contains_key(&h) {
            m.tree(h, true)?;
        }
    }
    // The live state: base roots and every inode of a layer that is not dead (rows of
    // layers without a row are kept too: being wrong costs data).
    let bases: Vec<Vec<u8>> = db
        .prepare_cached("SELECT base_root FROM workspace")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for r in bases {
        let h = hash(r)?;
        if m.trees.contains_key(&h) {
            m.tree(h, false)?;
        }
    }
    // Roots running commands still need (see `store::pins`).
    for h in crate::store::pins::roots(db, false)? {
        if m.trees.contains_key(&h) {
            m.tree(h, false)?;
        }
    }
    let mut stmt = db.prepare_cached(
        "SELECT kind, size, hash FROM inode
         WHERE hash IS NOT NULL AND layer NOT IN (SELECT id FROM layer WHERE dead = 1)",
    )?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let blob: Vec<u8> = r.get(2)?;
        let h = hash(blob)?;
        let (kind, size): (i64, i64) = (r.get(0)?, r.get(1)?);
        if kind == Kind::Dir as i64 {
            if m.trees.contains_key(&h) {
                m.tree(h, false)?;
            }
        } else if kind == Kind::File as i64 {
            m.file(h, size.max(0) as u64, false)?;
        } else if let Some(y) = m.chunks.get_mut(&h) {
            y.reached = true;
        }
    }
    Ok(())
}

fn sweep(db: &Connection, m: &Marker, report: &mut ReclaimReport) -> Result<()> {
    let mut size = db.prepare_cached("SELECT length(data) FROM chunk WHERE id = ?1")?;
    let mut del = db.prepare_cached("DELETE FROM chunk WHERE id = ?1")?;
    for y in m.chunks.values().filter(|y| !y.reached) {
        let n: i64 = size.query_row([y.id], |r| r.get(0))?;
        report.bytes_freed += n.max(0) as u64;
        report.chunks_removed += del.execute([y.id])? as u64;
    }
    let mut del = db.prepare_cached("DELETE FROM content WHERE id = ?1")?;
    for y in m.contents.values().filter(|y| !y.reached) {
        report.contents_removed += del.execute([y.id])? as u64;
    }
    let mut del = db.prepare_cached("DELETE FROM tree WHERE id = ?1")?;
    for y in m.trees.values().filter(|y| !y.reached) {
        report.trees_removed += del.execute([y.id])? as u64;
    }
    Ok(())
}

/// A full collection ([`crate::maintenance::gc`]: a mark from every root), then the file
/// shrinks. What `checkpoint delete`, `vault delete` and `avfs gc` run.
pub fn collect_all(db: &Connection) -> Result<crate::maintenance::GcReport> {
    let r = crate::maintenance::gc(db)?;
    after_full_gc(db)?;
    crate::store::vacuum(db)?;
    Ok(r)
}

/// `avfs gc`: a full collection, with its audit row (`gc`, by `actor`, about
/// `workspace`) in the same transaction; then the file gives its free pages back (a vault
/// made before format 5 is first converted so it can: one full VACUUM) and the WAL is
/// emptied. The conversion is best effort, the sweep being committed: its error comes
/// back beside the report, for the caller to warn about.
pub fn gc(
    store: &mut crate::store::Store,
    workspace: &str,
    actor: &str,
) -> Result<(crate::maintenance::GcReport, Option<crate::error::Error>)> {
    let report = store.write(|db| {
        let r = collect_all(db)?;
        crate::store::audit::append(
            db,
            Some(workspace),
            actor,
            "gc",
            &serde_json::to_value(&r).unwrap_or_default(),
        )?;
        Ok(r)
    })?;
    let converted = crate::store::enable_incremental_vacuum(&store.conn).err();
    let _ = store
        .conn
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
    Ok((report, converted))
}

/// After a full `gc` (which deletes rows of any age): the watermarks move to the newest
/// rows, so a row stored later can never get the id of a deleted one below a watermark
/// (SQLite gives the next row the largest id + 1), and the rows that were young stay young.
pub fn after_full_gc(db: &Connection) -> Result<()> {
    for (tbl, t) in TABLES.iter().enumerate() {
        let mark = watermark(db, t)?;
        db.prepare_cached(&format!(
            "INSERT OR IGNORE INTO reclaim_young (tbl, id) SELECT ?1, id FROM {t} WHERE id > ?2"
        ))?
        .execute(params![tbl as i64, mark])?;
        db.prepare_cached(&format!(
            "DELETE FROM reclaim_young WHERE tbl = ?1 AND id NOT IN (SELECT id FROM {t})"
        ))?
        .execute([tbl as i64])?;
        meta_set(db, &mark_key(t), max_id(db, t)?)?;
    }
    Ok(())
}

/// Used by tests: is this tree hash stored?
#[cfg(test)]
fn has_tree(db: &Connection, h: &Hash) -> bool {
    db.query_row("SELECT 1 FROM tree WHERE hash = ?1", [&h.0[..]], |_| Ok(()))
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use crate::workspace::{NewNode, ROOT_INO, Workspace, create_workspace};

    fn count(db: &Connection, t: &str) -> i64 {
        db.query_row(&format!("SELECT COUNT(*) FROM {t}"), [], |r| r.get(0))
            .unwrap()
    }

    /// A file rewritten many times leaves only its last content (and what checkpoints
    /// hold); a full verify passes after each collection.
    #[test]
    fn rewrites_leave_only_what_is_referenced() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::create(&dir.path().join("v.avfs")).unwrap();
        store
            .write(|db| {
                create_workspace(db, "main", None, None)?;
                Ok(())
            })
            .unwrap();
        let big = |n: u8| vec![n; 3 * CHUNK_SIZE + 5];
        let ino = store
            .write(|db| {
                let ws = Workspace::open(db, "main")?;
                let root = ws.get(ROOT_INO)?;
                let (h, s) = content::write_bytes(db, &big(1))?;
                let node = NewNode {
                    content: Some((h, s)),
                    ..NewNode::new(Kind::File, 0o644)
                };
                Ok(ws.create(&root, b"f", node)?.ino)
            })
            .unwrap();
        let mut saved = Vec::new();
        for round in 2..60u8 {
            store
                .write(|db| {
                    let mut ws = Workspace::open(db, "main")?;
                    let (h, s) = content::write_bytes(db, &big(round))?;
                    ws.set_content(ino, h, s)?;
                    if round % 20 == 0 {
                        ws.checkpoint(Some(&format!("c{round}")), None, "test")?;
                        saved.push(round);
                    }
                    reclaim_if_due(db)?;
                    Ok(())
                })
                .unwrap();
        }
        store
            .write(|db| {
                let r = reclaim(db)?;
                assert!(r.chunks_removed > 0 || r.young == 0, "{r:?}");
                Ok(())
            })
            .unwrap();
        let db = &store.conn;
        // The live content, plus the checkpoints' own: one distinct chunk (and a tail)
        // per version kept.
        let versions = 1 + saved.len() as i64;
        assert!(
            count(db, "chunk") <= 2 * versions + 2,
            "{} chunks",
            count(db, "chunk")
        );
        assert!(count(db, "content") <= versions + 1);
        let v = crate::maintenance::verify(db).unwrap();
        assert!(v.ok, "{:?}", v.problems);
        // Every kept version still reads back.
        let ws = Workspace::open(db, "main").unwrap();
        for cp in ws.checkpoints().unwrap() {
            let e = crate::workspace::flush::entry_at(db, &cp.root, &[b"f".to_vec()])
                .unwrap()
                .unwrap();
            let n: u8 = cp.name[1..].parse().unwrap();
            assert_eq!(
                content::read_all(db, e.hash.as_ref().unwrap(), e.size).unwrap(),
                big(n)
            );
            assert!(has_tree(db, &cp.root));
        }
    }
}
