//! Vault maintenance: garbage collection, a full consistency check and statistics.
//!
//! All three run over an open vault inside a transaction the caller owns (`gc` and a
//! workspace `stats` need a write transaction; `verify` and vault-only `stats` only read).
//!
//! * [`gc`] marks every object reachable from a workspace base root, a checkpoint root or a
//!   live (not dead) layer, then sweeps unreferenced chunks, contents and trees. Shared
//!   subtrees (forks, checkpoints) are walked once: the mark is O(unique reachable objects),
//!   the sweep is one `DELETE ... NOT IN` per table against an indexed temp table. It refuses
//!   (and deletes nothing) when a reachable tree or chunk list is missing or damaged, because
//!   a sweep could then destroy objects that only the damaged one knew about; run [`verify`].
//! * [`verify`] re-hashes every stored object, checks every reference between objects, roots
//!   and the live layers, runs `PRAGMA integrity_check` and checks the audit chain. It reports
//!   every problem it finds and never stops at the first one.
//! * [`stats`] counts what the vault stores and, for one workspace, what its tree holds.

use std::collections::HashSet;

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension, Statement, params};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::store::content;
use crate::store::objects::{self, CHUNK_SIZE, HOLE, Hash, Kind, Tree};
use crate::store::{Store, audit};

// ---------------------------------------------------------------------------------------
// gc
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// verify
// ---------------------------------------------------------------------------------------

/// One thing wrong with the vault.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Stable machine-readable kind, e.g. `chunk_hash_mismatch`, `missing_tree`.
    pub kind: String,
    /// The object the problem was found in, e.g. `chunk <hex>`, `tree <hex>`, `workspace main`.
    pub object: String,
    pub message: String,
}

/// How many rows of each kind were checked.
#[derive(Serialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct Checked {
    pub chunks: u64,
    pub chunk_bytes: u64,
    pub contents: u64,
    pub trees: u64,
    pub tree_entries: u64,
    pub workspaces: u64,
    pub checkpoints: u64,
    pub inodes: u64,
    pub dentries: u64,
    pub audit_rows: u64,
}

#[derive(Serialize, Debug, Clone)]
pub struct VerifyReport {
    pub ok: bool,
    /// The file keeps a checksum in every page, checked on every read (vaults made
    /// before page checksums do not: `avfs vault upgrade` gives them checksums).
    pub page_checksums: bool,
    pub checked: Checked,
    pub problems: Vec<Problem>,
}

fn type_name(v: ValueRef) -> &'static str {
    match v {
        ValueRef::Null => "NULL",
        ValueRef::Integer(_) => "an integer",
        ValueRef::Real(_) => "a real",
        ValueRef::Text(_) => "text",
        ValueRef::Blob(_) => "a blob",
    }
}

fn hash_of_value(v: ValueRef) -> std::result::Result<Hash, String> {
    match v {
        ValueRef::Blob(b) => <[u8; 32]>::try_from(b)
            .map(Hash)
            .map_err(|_| format!("stored hash has {} bytes, expected 32", b.len())),
        other => Err(format!(
            "stored hash is {}, expected a 32-byte blob",
            type_name(other)
        )),
    }
}

fn opt_hash_of_value(v: ValueRef) -> std::result::Result<Option<Hash>, String> {
    match v {
        ValueRef::Null => Ok(None),
        other => hash_of_value(other).map(Some),
    }
}

fn blob_of_value<'v>(v: ValueRef<'v>, what: &str) -> std::result::Result<&'v [u8], String> {
    match v {
        ValueRef::Blob(b) => Ok(b),
        other => Err(format!("{what} is {}, expected a blob", type_name(other))),
    }
}

fn int_of_value(v: ValueRef, what: &str) -> std::result::Result<i64, String> {
    match v {
        ValueRef::Integer(i) => Ok(i),
        other => Err(format!(
            "{what} is {}, expected an integer",
            type_name(other)
        )),
    }
}

/// A text column for display (names of workspaces and checkpoints).
/// Why a stored value is not the text its column holds (reads of it would fail), if it is
/// not: a flipped byte can leave a name that is no longer UTF-8.
fn not_text(v: ValueRef, nullable: bool) -> Option<String> {
    match v {
        ValueRef::Text(b) => std::str::from_utf8(b)
            .err()
            .map(|e| format!("not UTF-8 ({e})")),
        ValueRef::Null if nullable => None,
        other => Some(format!("{} where text belongs", show_name(other))),
    }
}

fn show_text(v: ValueRef) -> String {
    match v {
        ValueRef::Blob(b) | ValueRef::Text(b) => String::from_utf8_lossy(b).into_owned(),
        other => show_name(other),
    }
}

fn show_name(v: ValueRef) -> String {
    match v {
        ValueRef::Blob(b) | ValueRef::Text(b) => format!("{:?}", String::from_utf8_lossy(b)),
        ValueRef::Integer(i) => i.to_string(),
        ValueRef::Real(f) => f.to_string(),
        ValueRef::Null => "NULL".into(),
    }
}

struct Verifier<'a> {
    db: &'a Connection,
    checked: Checked,
    problems: Vec<Problem>,
    chunks: HashSet<Hash>,
    contents: HashSet<Hash>,
    trees: HashSet<Hash>,
    /// A set is only trusted for "missing" reports when the scan that filled it finished.
    chunks_complete: bool,
    contents_complete: bool,
    trees_complete: bool,
}

impl<'a> Verifier<'a> {
    fn problem(&mut self, kind: &str, object: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem {
            kind: kind.into(),
            object: object.into(),
            message: message.into(),
        });
    }

    /// Runs one check; an error (other than a busy vault) becomes a problem and the next
    /// check still runs. Returns whether the check finished.
    fn run(&mut self, name: &str, f: impl FnOnce(&mut Self) -> Result<()>) -> Result<bool> {
        match f(self) {
            Ok(()) => Ok(true),
            Err(Error::Busy) => Err(Error::Busy),
            Err(e) => {
                self.problem(
                    "check_failed",
                    name,
                    format!("this check stopped early: {e}"),
                );
                Ok(false)
            }
        }
    }

    /// None if the content a file entry or inode names is present (or cannot be judged).
    fn content_problem(&self, h: &Hash, size: u64) -> Option<(&'static str, String)> {
        if size as usize <= CHUNK_SIZE {
            if *h != HOLE && self.chunks_complete && !self.chunks.contains(h) {
                return Some((
                    "missing_chunk",
                    format!("chunk {} of a {size}-byte file is missing", h.to_hex()),
                ));
            }
        } else if self.contents_complete && !self.contents.contains(h) {
            return Some((
                "missing_content",
                format!("content {} of a {size}-byte file is missing", h.to_hex()),
            ));
        }
        None
    }

    fn tree_missing(&self, h: &Hash) -> bool {
        self.trees_complete && !self.trees.contains(h)
    }

    /// The schema must be the one the file's format defines (`store::schema_check`).
    fn schema(&mut self) -> Result<()> {
        for d in Store::schema_differences(self.db)? {
            self.problem("schema", "vault schema", d);
        }
        Ok(())
    }

    /// Every page of the file against its checksum, read from the file directly, so
    /// every damaged page is named (a query stops at the first). Returns whether the
    /// file keeps page checksums.
    fn page_checksums(&mut self) -> Result<bool> {
        let Some(path) = self.db.path().filter(|p| !p.is_empty()) else {
            return Ok(false);
        };
        let scan = crate::store::pagesum::scan_file(std::path::Path::new(path))
            .map_err(|e| Error::host(path, e))?;
        for page in scan.bad {
            self.problem(
                "page_checksum",
                format!("page {page}"),
                "the page does not match its checksum: a byte of it changed after it was written",
            );
        }
        Ok(scan.checksums)
    }

    fn integrity(&mut self) -> Result<()> {
        let msgs: Vec<String> = self
            .db
            .prepare("PRAGMA integrity_check")?
            .query_map([], |r| r.get::<_, String>(0))?
            .collect::<rusqlite::Result<_>>()?;
        if msgs.len() != 1 || msgs[0] != "ok" {
            for m in msgs {
                self.problem("sqlite_integrity", "vault file", m);
            }
        }
        Ok(())
    }

    fn scan_chunks(&mut self) -> Result<()> {
        let db = self.db;
        let mut stmt = db.prepare("SELECT id, hash, data FROM chunk")?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            self.checked.chunks += 1;
            let id: i64 = r.get(0)?;
            let hash = match hash_of_value(r.get_ref(1)?) {
                Ok(h) => h,
                Err(e) => {
                    self.problem("bad_hash", format!("chunk #{id}"), e);
                    continue;
                }
            };
            self.chunks.insert(hash);
            let obj = format!("chunk {}", hash.to_hex());
            match blob_of_value(r.get_ref(2)?, "data") {
                Ok(data) => {
                    self.checked.chunk_bytes += data.len() as u64;
                    if data.len() > CHUNK_SIZE {
                        self.problem(
                            "chunk_too_big",
                            &obj,
                            format!("{} bytes, at most {CHUNK_SIZE} allowed", data.len()),
                        );
                    }
                    if Hash::of(data) != hash {
                        self.problem(
                            "chunk_hash_mismatch",
                            obj,
                            "stored bytes do not match the chunk's hash",
                        );
                    }
                }
                Err(e) => self.problem("chunk_malformed", obj, e),
            }
        }
        Ok(())
    }

    fn scan_tree_hashes(&mut self) -> Result<()> {
        let db = self.db;
        let mut stmt = db.prepare("SELECT hash FROM tree")?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            // Malformed hashes are reported by the tree scan.
            if let Ok(h) = hash_of_value(r.get_ref(0)?) {
                self.trees.insert(h);
            }
        }
        Ok(())
    }

    fn scan_contents(&mut self) -> Result<()> {
        let db = self.db;
        let mut stmt = db.prepare("SELECT id, hash, size, chunks, format FROM content")?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            self.checked.contents += 1;
            let id: i64 = r.get(0)?;
            let hash = match hash_of_value(r.get_ref(1)?) {
                Ok(h) => h,
                Err(e) => {
                    self.problem("bad_hash", format!("content #{id}"), e);
                    continue;
                }
            };
            self.contents.insert(hash);
            let obj = format!("content {}", hash.to_hex());
            let size = match int_of_value(r.get_ref(2)?, "size") {
                Ok(s) if s >= 0 => s as u64,
                Ok(s) => {
                    self.problem("content_malformed", obj, format!("negative size {s}"));
                    continue;
                }
                Err(e) => {
                    self.problem("content_malformed", obj, e);
                    continue;
                }
            };
            let format = match int_of_value(r.get_ref(4)?, "format") {
                Ok(f) => f,
                Err(e) => {
                    self.problem("content_malformed", obj, e);
                    continue;
                }
            };
            let ext = match blob_of_value(r.get_ref(3)?, "chunk list")
                .and_then(|b| content::decode_row(format, b, size))
            {
                Ok(e) => e,
                Err(e) if e.contains("chunks listed") => {
                    self.problem("content_chunk_count", obj, e);
                    continue;
                }
                Err(e) => {
                    self.problem("content_malformed", obj, e);
                    continue;
                }
            };
            if content::hash_of(&ext) != hash {
                self.problem(
                    "content_hash_mismatch",
                    &obj,
                    "chunk list and size do not match the content's hash",
                );
            }
            for (i, c) in &ext.list {
                if self.chunks_complete && !self.chunks.contains(c) {
                    self.problem(
                        "missing_chunk",
                        &obj,
                        format!("chunk {i} ({}) is missing", c.to_hex()),
                    );
                }
            }
        }
        Ok(())
    }

    fn scan_trees(&mut self) -> Result<()> {
        let db = self.db;
        let mut stmt = db.prepare("SELECT id, hash, data FROM tree")?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            self.checked.trees += 1;
            let id: i64 = r.get(0)?;
            let (hash, obj) = match hash_of_value(r.get_ref(1)?) {
                Ok(h) => (Some(h), format!("tree {}", h.to_hex())),
                Err(e) => {
                    self.problem("bad_hash", format!("tree #{id}"), e);
                    (None, format!("tree #{id}"))
                }
            };
            let data = match blob_of_value(r.get_ref(2)?, "data") {
                Ok(d) => d,
                Err(e) => {
                    self.problem("tree_malformed", obj, e);
                    continue;
                }
            };
            if let Some(h) = hash
                && Tree::hash_of(data) != h
            {
                self.problem(
                    "tree_hash_mismatch",
                    &obj,
                    "stored bytes do not match the tree's hash",
                );
            }
            let tree = match Tree::decode(data) {
                Ok(t) => t,
                Err(e) => {
                    self.problem("tree_undecodable", obj, e);
                    continue;
                }
            };
            for e in &tree.entries {
                self.checked.tree_entries += 1;
                let name = String::from_utf8_lossy(&e.name);
                match (e.kind, &e.hash) {
                    (Kind::Dir, Some(sub)) if self.tree_missing(sub) => {
                        self.problem(
                            "missing_tree",
                            &obj,
                            format!("entry {name:?} names missing tree {}", sub.to_hex()),
                        );
                    }
                    (Kind::File, Some(c)) => {
                        if let Some((kind, msg)) = self.content_problem(c, e.size) {
                            self.problem(kind, &obj, format!("entry {name:?}: {msg}"));
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    fn check_workspaces(&mut self) -> Result<()> {
        let db = self.db;
        let mut stmt = db.prepare(
            "SELECT w.id, w.name, w.base_root, w.layer, l.id, l.dead, l.workspace,
                    (SELECT kind FROM inode i WHERE i.layer = w.layer AND i.ino = 1)
             FROM workspace w LEFT JOIN layer l ON l.id = w.layer",
        )?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            self.checked.workspaces += 1;
            let id: i64 = r.get(0)?;
            let obj = format!("workspace {}", show_text(r.get_ref(1)?));
            if let Some(why) = not_text(r.get_ref(1)?, false) {
                self.problem("bad_text", &obj, format!("name: {why}"));
            }
            match hash_of_value(r.get_ref(2)?) {
                Ok(h) if self.tree_missing(&h) => self.problem(
                    "missing_tree",
                    &obj,
                    format!("base root {} is missing", h.to_hex()),
                ),
                Ok(_) => {}
                Err(e) => self.problem("bad_hash", &obj, format!("base root: {e}")),
            }
            let layer = show_name(r.get_ref(3)?);
            if r.get_ref(4)? == ValueRef::Null {
                self.problem(
                    "missing_layer",
                    &obj,
                    format!("its live layer {layer} does not exist"),
                );
                continue;
            }
            if matches!(r.get_ref(5)?, ValueRef::Integer(d) if d != 0) {
                self.problem(
                    "dead_layer",
                    &obj,
                    format!("its live layer {layer} is marked dead"),
                );
            }
            if !matches!(r.get_ref(6)?, ValueRef::Integer(w) if w == id) {
                self.problem(
                    "layer_owner",
                    &obj,
                    format!("its live layer {layer} belongs to another workspace"),
                );
            }
            match r.get_ref(7)? {
                ValueRef::Integer(2) => {}
                ValueRef::Null => self.problem(
                    "missing_inode",
                    &obj,
                    format!("layer {layer} has no root inode"),
                ),
                other => self.problem(
                    "root_not_dir",
                    &obj,
                    format!("root inode of layer {layer} has kind {}", show_name(other)),
                ),
            }
        }
        Ok(())
    }

    fn check_checkpoints(&mut self) -> Result<()> {
        let db = self.db;
        let mut stmt = db.prepare(
            "SELECT c.id, COALESCE(w.name, '#' || c.workspace), c.name, c.root, c.origin,
                    c.message FROM checkpoint c
             LEFT JOIN workspace w ON w.id = c.workspace",
        )?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            self.checked.checkpoints += 1;
            let obj = format!(
                "checkpoint {}/{}",
                show_text(r.get_ref(1)?),
                show_text(r.get_ref(2)?)
            );
            for (col, at, nullable) in [
                ("name", 2, false),
                ("origin", 4, false),
                ("message", 5, true),
            ] {
                if let Some(why) = not_text(r.get_ref(at)?, nullable) {
                    self.problem("bad_text", &obj, format!("{col}: {why}"));
                }
            }
            match hash_of_value(r.get_ref(3)?) {
                Ok(h) if self.tree_missing(&h) => self.problem(
                    "missing_tree",
                    &obj,
                    format!("root {} is missing", h.to_hex()),
                ),
                Ok(_) => {}
                Err(e) => self.problem("bad_hash", &obj, format!("root: {e}")),
            }
        }
        Ok(())
    }

    fn check_inodes(&mut self) -> Result<()> {
        let db = self.db;
        let mut stmt = db.prepare(
            "SELECT layer, ino, kind, size, hash, dirty, materialized FROM inode
             WHERE layer NOT IN (SELECT id FROM layer WHERE dead = 1)",
        )?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            self.checked.inodes += 1;
            let obj = format!(
                "inode {} of layer {}",
                show_name(r.get_ref(1)?),
                show_name(r.get_ref(0)?)
            );
            let kind = match int_of_value(r.get_ref(2)?, "kind")
                .and_then(|k| Kind::from_i64(k).map_err(|e| e.to_string()))
            {
                Ok(k) => k,
                Err(e) => {
                    self.problem("inode_malformed", obj, e);
                    continue;
                }
            };
            let size = match int_of_value(r.get_ref(3)?, "size") {
                Ok(s) if s >= 0 => s as u64,
                Ok(s) => {
                    self.problem("inode_malformed", obj, format!("negative size {s}"));
                    continue;
                }
                Err(e) => {
                    self.problem("inode_malformed", obj, e);
                    continue;
                }
            };
            let hash = match opt_hash_of_value(r.get_ref(4)?) {
                Ok(h) => h,
                Err(e) => {
                    self.problem("bad_hash", obj, e);
                    continue;
                }
            };
            let flag = |v: ValueRef| !matches!(v, ValueRef::Integer(0));
            let dirty = flag(r.get_ref(5)?);
            let materialized = flag(r.get_ref(6)?);
            match kind {
                Kind::Dir if !dirty => match hash {
                    Some(h) if self.tree_missing(&h) => self.problem(
                        "missing_tree",
                        obj,
                        format!("clean directory's tree {} is missing", h.to_hex()),
                    ),
                    Some(_) => {}
                    None if !materialized => self.problem(
                        "missing_tree",
                        obj,
                        "clean, unmaterialized directory has no tree",
                    ),
                    None => {}
                },
                Kind::File => match hash {
                    Some(h) => {
                        if let Some((k, msg)) = self.content_problem(&h, size) {
                            self.problem(k, obj, msg);
                        }
                    }
                    None => self.problem("missing_content", obj, "file has no content hash"),
                },
                _ => {}
            }
        }
        Ok(())
    }

    fn check_dentries(&mut self) -> Result<()> {
        let db = self.db;
        let mut stmt = db.prepare(
            "SELECT d.layer, d.parent, d.name, d.ino, i.ino IS NOT NULL, p.ino IS NOT NULL, p.kind
             FROM dentry d
             LEFT JOIN inode i ON i.layer = d.layer AND i.ino = d.ino
             LEFT JOIN inode p ON p.layer = d.layer AND p.ino = d.parent
             WHERE d.layer NOT IN (SELECT id FROM layer WHERE dead = 1)",
        )?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            self.checked.dentries += 1;
            let layer = show_name(r.get_ref(0)?);
            let parent = show_name(r.get_ref(1)?);
            let ino = show_name(r.get_ref(3)?);
            let obj = format!(
                "dentry {} in inode {parent} of layer {layer}",
                show_name(r.get_ref(2)?)
            );
            if r.get::<_, bool>(4)? {
                // The target exists.
            } else {
                self.problem(
                    "dangling_dentry",
                    &obj,
                    format!("names inode {ino}, which does not exist in this layer"),
                );
            }
            if !r.get::<_, bool>(5)? {
                self.problem(
                    "dentry_parent",
                    obj,
                    format!("parent inode {parent} does not exist in this layer"),
                );
            } else if r.get_ref(6)? != ValueRef::Integer(Kind::Dir as i64) {
                self.problem(
                    "dentry_parent",
                    obj,
                    format!("parent inode {parent} is not a directory"),
                );
            }
        }
        Ok(())
    }

    fn check_audit(&mut self) -> Result<()> {
        let report = audit::verify(self.db)?;
        self.checked.audit_rows = report.rows.max(0) as u64;
        for p in report.problems {
            self.problem("audit", format!("audit row {}", p.id), p.problem);
        }
        Ok(())
    }
}

/// `verify` of the vault file at `path`, opened read-only (nothing is written to it); a
/// file whose schema is damaged is still checked as far as it can be read.
pub fn verify_file(path: &std::path::Path) -> Result<VerifyReport> {
    match Store::open_read_unchecked(path).and_then(|mut store| store.read(verify)) {
        Ok(report) => Ok(report),
        // A page that SQLite reads to open the file, or that a step outside the checks
        // needs, fails its checksum: the report lists every damaged page instead of
        // the first error.
        Err(Error::Corrupt { reason, .. }) => {
            let Ok(scan) = crate::store::pagesum::scan_file(path) else {
                return Err(Error::Corrupt {
                    path: path.into(),
                    reason,
                });
            };
            if scan.bad.is_empty() {
                return Err(Error::Corrupt {
                    path: path.into(),
                    reason,
                });
            }
            let mut problems: Vec<Problem> = scan
                .bad
                .iter()
                .map(|page| Problem {
                    kind: "page_checksum".into(),
                    object: format!("page {page}"),
                    message: "the page does not match its checksum: a byte of it changed after it was written".into(),
                })
                .collect();
            problems.push(Problem {
                kind: "check_failed".into(),
                object: "vault file".into(),
                message: format!("the rest could not be checked: {reason}"),
            });
            Ok(VerifyReport {
                ok: false,
                page_checksums: true,
                checked: Checked::default(),
                problems,
            })
        }
        Err(e) => Err(e),
    }
}

/// Checks the whole vault and reports every problem found. Only a busy vault is an error;
/// SQLite errors in the middle of a check become `check_failed` problems.
pub fn verify(db: &Connection) -> Result<VerifyReport> {
    let mut v = Verifier {
        db,
        checked: Checked::default(),
        problems: Vec::new(),
        chunks: HashSet::new(),
        contents: HashSet::new(),
        trees: HashSet::new(),
        chunks_complete: false,
        contents_complete: false,
        trees_complete: false,
    };
    let mut page_checksums = false;
    v.run("page checksums", |v| {
        page_checksums = v.page_checksums()?;
        Ok(())
    })?;
    v.run("schema", Verifier::schema)?;
    v.run("sqlite integrity", Verifier::integrity)?;
    v.chunks_complete = v.run("chunks", Verifier::scan_chunks)?;
    v.trees_complete = v.run("tree index", Verifier::scan_tree_hashes)?;
    // What a remote promises (a lazy clone's unfetched objects, or a clone killed half
    // way) is not missing: known before the contents are checked for their chunks.
    for (kind, h) in crate::remote::catalog::promised_all(db)? {
        match kind {
            crate::remote::pack::ObjKind::Chunk => v.chunks.insert(h),
            crate::remote::pack::ObjKind::Content => v.contents.insert(h),
            crate::remote::pack::ObjKind::Tree => v.trees.insert(h),
            crate::remote::pack::ObjKind::Checkpoint => false,
        };
    }
    v.contents_complete = v.run("contents", Verifier::scan_contents)?;
    v.run("trees", Verifier::scan_trees)?;
    v.run("workspaces", Verifier::check_workspaces)?;
    v.run("checkpoints", Verifier::check_checkpoints)?;
    v.run("inodes", Verifier::check_inodes)?;
    v.run("dentries", Verifier::check_dentries)?;
    v.run("audit log", Verifier::check_audit)?;
    Ok(VerifyReport {
        ok: v.problems.is_empty(),
        page_checksums,
        checked: v.checked,
        problems: v.problems,
    })
}

// ---------------------------------------------------------------------------------------
// stats
// ---------------------------------------------------------------------------------------

/// What the whole vault stores. The size of the vault file is added by the caller.
#[derive(Serialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct VaultStats {
    /// File bytes actually stored (sum of chunk lengths, each distinct chunk once).
    pub stored_bytes: u64,
    pub chunks: u64,
    pub contents: u64,
    pub trees: u64,
    /// Bytes of encoded trees and chunk lists (metadata).
    pub tree_bytes: u64,
    pub chunk_list_bytes: u64,
    pub checkpoints: u64,
    pub workspaces: u64,
    /// Workspaces that were forked from another one.
    pub forks: u64,
    /// Rows in live layers that are not dead.
    pub live_inodes: u64,
}

/// What one workspace's current tree holds (after a flush).
///
/// `files`, `symlinks` and `other` count names, so a hard-linked file counts once per name;
/// `logical_bytes` counts each file once (names in one link group share their bytes, like
/// `du`), and `hard_links` is the number of extra names.
#[derive(Serialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkspaceStats {
    pub name: String,
    pub root: String,
    pub parent: Option<String>,
    pub head: Option<String>,
    pub files: u64,
    /// Directories below the root (the root itself is not counted).
    pub dirs: u64,
    pub symlinks: u64,
    /// FIFOs, sockets and device nodes.
    pub other: u64,
    pub hard_links: u64,
    pub logical_bytes: u64,
    pub checkpoints: u64,
}

#[derive(Serialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub vault: VaultStats,
    pub workspace: Option<WorkspaceStats>,
}

fn count(db: &Connection, sql: &str) -> Result<u64> {
    let n: i64 = db.query_row(sql, [], |r| r.get(0))?;
    Ok(n.max(0) as u64)
}

/// Vault-wide counts and, for `workspace`, the counts of its current tree. With a workspace
/// this flushes it first, so it needs a write transaction.
pub fn stats(db: &Connection, workspace: Option<&str>) -> Result<Stats> {
    // The flush may store new trees: count the vault after it.
    let workspace = match workspace {
        None => None,
        Some(name) => Some(workspace_stats(db, name)?),
    };
    let (chunks, stored_bytes): (i64, i64) = db.query_row(
        "SELECT COUNT(*), COALESCE(SUM(length(data)), 0) FROM chunk",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let (contents, chunk_list_bytes): (i64, i64) = db.query_row(
        "SELECT COUNT(*), COALESCE(SUM(length(chunks)), 0) FROM content",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let (trees, tree_bytes): (i64, i64) = db.query_row(
        "SELECT COUNT(*), COALESCE(SUM(length(data)), 0) FROM tree",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let vault = VaultStats {
        stored_bytes: stored_bytes.max(0) as u64,
        chunks: chunks.max(0) as u64,
        contents: contents.max(0) as u64,
        trees: trees.max(0) as u64,
        tree_bytes: tree_bytes.max(0) as u64,
        chunk_list_bytes: chunk_list_bytes.max(0) as u64,
        checkpoints: count(db, "SELECT COUNT(*) FROM checkpoint")?,
        workspaces: count(db, "SELECT COUNT(*) FROM workspace")?,
        forks: count(
            db,
            "SELECT COUNT(*) FROM workspace WHERE parent_id IS NOT NULL OR parent_name IS NOT NULL",
        )?,
        live_inodes: count(
            db,
            "SELECT COUNT(*) FROM inode WHERE layer NOT IN (SELECT id FROM layer WHERE dead = 1)",
        )?,
    };
    Ok(Stats { vault, workspace })
}

fn workspace_stats(db: &Connection, name: &str) -> Result<WorkspaceStats> {
    let mut ws = crate::workspace::Workspace::open(db, name)?;
    let root = ws.flush()?;
    let mut s = WorkspaceStats {
        name: ws.info.name.clone(),
        root: root.to_hex(),
        parent: ws.info.parent.clone(),
        head: ws.head()?.map(|c| c.name),
        checkpoints: db
            .query_row(
                "SELECT COUNT(*) FROM checkpoint WHERE workspace = ?1",
                params![ws.info.id],
                |r| r.get::<_, i64>(0),
            )?
            .max(0) as u64,
        ..Default::default()
    };
    // Walk every path (equal subtrees at two paths are two copies in the workspace).
    let mut groups: HashSet<u64> = HashSet::new();
    let mut stack = vec![root];
    while let Some(h) = stack.pop() {
        let tree = objects::get_tree(db, &h)?;
        for e in tree.entries {
            match e.kind {
                Kind::Dir => {
                    s.dirs += 1;
                    let sub = e
                        .hash
                        .ok_or_else(|| Error::Internal("directory entry without tree".into()))?;
                    stack.push(sub);
                }
                Kind::File => {
                    s.files += 1;
                    if e.link_group == 0 || groups.insert(e.link_group) {
                        s.logical_bytes += e.size;
                    } else {
                        s.hard_links += 1;
                    }
                }
                Kind::Symlink => s.symlinks += 1,
                _ => s.other += 1,
            }
        }
    }
    Ok(s)
}

// ---------------------------------------------------------------------------------------
// tests
// ---------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    fn put_content(db: &rusqlite::Connection, data: &[u8]) -> Result<Hash> {
        Ok(crate::store::content::write_bytes(db, data)?.0)
    }
    use crate::workspace::{Inode, NewNode, ROOT_INO, Workspace, create_workspace};

    fn vault() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("v.avfs")).unwrap();
        (dir, store)
    }

    fn put_file(ws: &Workspace, parent: &Inode, name: &[u8], data: &[u8]) -> Result<Inode> {
        let h = put_content(ws.db, data)?;
        ws.create(
            parent,
            name,
            NewNode {
                content: Some((h, data.len() as u64)),
                ..NewNode::new(Kind::File, 0o644)
            },
        )
    }

    fn root(ws: &Workspace) -> Inode {
        ws.get(ROOT_INO).unwrap()
    }

    fn has_chunk(db: &Connection, h: &Hash) -> bool {
        db.query_row(
            "SELECT COUNT(*) FROM chunk WHERE hash = ?1",
            [&h.0[..]],
            |r| r.get::<_, i64>(0),
        )
        .unwrap()
            == 1
    }
    fn has_content(db: &Connection, h: &Hash) -> bool {
        db.query_row(
            "SELECT COUNT(*) FROM content WHERE hash = ?1",
            [&h.0[..]],
            |r| r.get::<_, i64>(0),
        )
        .unwrap()
            == 1
    }
    fn has_tree(db: &Connection, h: &Hash) -> bool {
        db.query_row(
            "SELECT COUNT(*) FROM tree WHERE hash = ?1",
            [&h.0[..]],
            |r| r.get::<_, i64>(0),
        )
        .unwrap()
            == 1
    }

    /// A multi-chunk payload whose chunks are unlike any other test data.
    fn big(seed: u8, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u64 * 7 + seed as u64 * 131 + (i / CHUNK_SIZE) as u64) as u8)
            .collect()
    }

    fn kinds(r: &VerifyReport) -> Vec<&str> {
        r.problems.iter().map(|p| p.kind.as_str()).collect()
    }

    #[test]
    fn gc_removes_exactly_the_unreferenced() -> Result<()> {
        let (_dir, mut store) = vault();
        let big_b = big(1, 3 * CHUNK_SIZE + 5);
        store.write(|db| {
            let info = create_workspace(db, "main", None, None)?;
            let empty_root = info.base_root;
            let mut ws = Workspace::open(db, "main")?;

            // cp1: x.txt and big.bin; both disappear from everything but cp1.
            put_file(&ws, &root(&ws), b"x.txt", b"only in cp1")?;
            put_file(&ws, &root(&ws), b"big.bin", &big_b)?;
            let r1 = ws.checkpoint(Some("cp1"), None, "test")?.checkpoint.root;
            ws.unlink(&root(&ws), b"x.txt")?;
            ws.unlink(&root(&ws), b"big.bin")?;

            // cp2: y.txt in a subdirectory; the fork keeps it after cp2 is deleted.
            let d = ws.create(&root(&ws), b"d", NewNode::new(Kind::Dir, 0o755))?;
            put_file(&ws, &d, b"y.txt", b"kept by the fork")?;
            let r2 = ws.checkpoint(Some("cp2"), None, "test")?.checkpoint.root;
            let fork = ws.fork("f", None)?;
            assert_eq!(fork.base_root, r2);

            // keep: k.txt only in checkpoint "keep".
            ws.remove_tree(&root(&ws), b"d")?;
            put_file(&ws, &root(&ws), b"k.txt", b"kept by a checkpoint")?;
            let rk = ws.checkpoint(Some("keep"), None, "test")?.checkpoint.root;
            ws.unlink(&root(&ws), b"k.txt")?;

            // z.txt only in the live layer (never flushed).
            put_file(&ws, &root(&ws), b"z.txt", b"only live")?;
            // A big file only in the live layer.
            let big_live = big(2, CHUNK_SIZE + 1);
            put_file(&ws, &root(&ws), b"live.bin", &big_live)?;
            // An orphan nobody references.
            let orphan = put_content(db, b"orphan bytes")?;

            ws.delete_checkpoint("cp1")?;
            ws.delete_checkpoint("cp2")?;

            let before = verify(db)?;
            assert!(before.ok, "{:?}", before.problems);

            let report = gc(db)?;
            // x.txt + 4 chunks of big.bin + the orphan.
            assert_eq!(report.chunks_removed, 6, "{report:?}");
            assert_eq!(report.contents_removed, 1, "{report:?}");
            // The empty root of the new workspace and cp1's root.
            assert_eq!(report.trees_removed, 2, "{report:?}");
            assert_eq!(
                report.bytes_freed,
                (b"only in cp1".len() + big_b.len() + b"orphan bytes".len()) as u64
            );

            assert!(!has_chunk(db, &Hash::of(b"only in cp1")));
            assert!(!has_content(
                db,
                &crate::store::content::hash_of(&crate::store::content::Extents {
                    size: big_b.len() as u64,
                    list: big_b
                        .chunks(CHUNK_SIZE)
                        .enumerate()
                        .map(|(i, c)| (i as u64, Hash::of(c)))
                        .collect(),
                })
            ));
            for c in big_b.chunks(CHUNK_SIZE) {
                assert!(!has_chunk(db, &Hash::of(c)));
            }
            assert!(!has_chunk(db, &orphan));
            assert!(!has_tree(db, &r1));
            assert!(!has_tree(db, &empty_root));

            assert!(has_tree(db, &r2) && has_tree(db, &rk));
            assert!(has_chunk(db, &Hash::of(b"kept by the fork")));
            assert!(has_chunk(db, &Hash::of(b"kept by a checkpoint")));
            assert!(has_chunk(db, &Hash::of(b"only live")));
            for c in big_live.chunks(CHUNK_SIZE) {
                assert!(has_chunk(db, &Hash::of(c)));
            }

            let after = verify(db)?;
            assert!(after.ok, "{:?}", after.problems);

            // Everything still reads back.
            let f = Workspace::open(db, "f")?;
            let fd = f.lookup(&root(&f), b"d")?.unwrap();
            let y = f.lookup(&fd, b"y.txt")?.unwrap();
            assert_eq!(f.read(&y, 0, 100)?, b"kept by the fork");
            let z = ws.lookup(&root(&ws), b"z.txt")?.unwrap();
            assert_eq!(ws.read(&z, 0, 100)?, b"only live");
            let lb = ws.lookup(&root(&ws), b"live.bin")?.unwrap();
            assert_eq!(ws.read(&lb, 0, big_live.len())?, big_live);
            let keep = ws.find_checkpoint("keep")?;
            ws.restore(&keep)?;
            let k = ws.lookup(&root(&ws), b"k.txt")?.unwrap();
            assert_eq!(ws.read(&k, 0, 100)?, b"kept by a checkpoint");

            // The restore replaced the live layer (gc purges its rows): z.txt and live.bin
            // become garbage.
            let again = gc(db)?;
            assert_eq!(
                (
                    again.chunks_removed,
                    again.contents_removed,
                    again.trees_removed,
                    again.layers_purged
                ),
                (3, 1, 0, 1),
                "{again:?}"
            );
            let third = gc(db)?;
            assert_eq!(
                third,
                GcReport {
                    objects_kept: third.objects_kept,
                    ..Default::default()
                }
            );
            assert!(verify(db)?.ok);
            Ok(())
        })
    }

    #[test]
    fn gc_keeps_shared_subtrees_and_dirty_state() -> Result<()> {
        let (_dir, mut store) = vault();
        store.write(|db| {
            create_workspace(db, "main", None, None)?;
            let mut ws = Workspace::open(db, "main")?;
            let mut dir = root(&ws);
            for level in 0..20 {
                dir = ws.create(
                    &dir,
                    format!("l{level}").as_bytes(),
                    NewNode::new(Kind::Dir, 0o755),
                )?;
                put_file(&ws, &dir, b"f", format!("file at {level}").as_bytes())?;
            }
            ws.checkpoint(Some("base"), None, "test")?;
            for i in 0..5 {
                ws.fork(&format!("fork{i}"), None)?;
            }
            // A change in one fork, left dirty (not flushed).
            let mut f = Workspace::open(db, "fork3")?;
            let l0 = f.lookup(&root(&f), b"l0")?.unwrap();
            let old = f.lookup(&l0, b"f")?.unwrap();
            let h = put_content(db, b"changed in fork3")?;
            f.set_content(old.ino, h, 16)?;
            ws.delete_checkpoint("base")?;

            let r = gc(db)?;
            assert_eq!(r.chunks_removed + r.contents_removed, 0, "{r:?}");
            // 20 directories + root, plus 20 file chunks, plus the fork's new chunk.
            assert!(r.objects_kept >= 42, "{r:?}");
            assert!(verify(db)?.ok);
            let l0 = f.lookup(&root(&f), b"l0")?.unwrap();
            let file = f.lookup(&l0, b"f")?.unwrap();
            assert_eq!(f.read(&file, 0, 100)?, b"changed in fork3");
            f.flush()?;
            assert!(verify(db)?.ok);
            // The old l0 file is still in the other forks.
            let other = Workspace::open(db, "fork1")?;
            let l0 = other.lookup(&root(&other), b"l0")?.unwrap();
            let file = other.lookup(&l0, b"f")?.unwrap();
            assert_eq!(other.read(&file, 0, 100)?, b"file at 0");
            Ok(())
        })
    }

    #[test]
    fn gc_purges_dead_layers_and_refuses_a_damaged_graph() -> Result<()> {
        let (_dir, mut store) = vault();
        store.write(|db| {
            create_workspace(db, "main", None, None)?;
            let mut ws = Workspace::open(db, "main")?;
            let d = ws.create(&root(&ws), b"d", NewNode::new(Kind::Dir, 0o755))?;
            put_file(&ws, &d, b"a", b"aaa")?;
            let cp = ws.checkpoint(Some("one"), None, "test")?.checkpoint;
            put_file(&ws, &root(&ws), b"later", b"later")?;
            // A dead layer left behind (restore purges its own; simulate an interrupted one).
            db.execute("INSERT INTO layer (workspace, dead) VALUES (?1, 1)", [ws.info.id])?;
            let dead = db.last_insert_rowid();
            db.execute(
                "INSERT INTO inode (layer, ino, kind, mode, uid, gid, size, mtime_ns, ctime_ns, nlink, hash)
                 VALUES (?1, 1, 1, 420, 0, 0, 5, 0, 0, 1, ?2)",
                params![dead, &Hash::of(b"in a dead layer").0[..]],
            )?;
            let r = gc(db)?;
            assert_eq!(r.layers_purged, 1);
            assert_eq!(db.query_row("SELECT COUNT(*) FROM inode WHERE layer = ?1", [dead], |r| r.get::<_, i64>(0))?, 0);

            // Damage: the subtree of "d" goes missing. gc must refuse and delete nothing.
            let tree = objects::get_tree(db, &cp.root)?;
            let sub = tree.entries.iter().find(|e| e.name == b"d").unwrap().hash.unwrap();
            db.execute("DELETE FROM tree WHERE hash = ?1", [&sub.0[..]])?;
            crate::store::content::write_bytes(db, b"garbage")?;
            let chunks_before = count(db, "SELECT COUNT(*) FROM chunk")?;
            let err = gc(db).unwrap_err();
            assert!(matches!(err, Error::Corrupt { .. }), "{err}");
            assert!(err.to_string().contains(&sub.to_hex()), "{err}");
            assert_eq!(count(db, "SELECT COUNT(*) FROM chunk")?, chunks_before);
            Ok(())
        })
    }

    #[test]
    fn gc_after_deleting_a_fork_keeps_what_others_share() -> Result<()> {
        let (_dir, mut store) = vault();
        store.write(|db| {
            create_workspace(db, "main", None, None)?;
            let mut ws = Workspace::open(db, "main")?;
            put_file(&ws, &root(&ws), b"shared", b"shared by both")?;
            ws.checkpoint(Some("base"), None, "test")?;
            ws.fork("f", None)?;
            let mut f = Workspace::open(db, "f")?;
            put_file(&f, &root(&f), b"mine", b"only in the fork")?;
            f.checkpoint(Some("fork-cp"), None, "test")?;
            put_file(&f, &root(&f), b"live", b"only in the fork's live layer")?;
            crate::workspace::delete_workspace(db, "f")?;

            let r = gc(db)?;
            assert_eq!(r.chunks_removed, 2, "{r:?}");
            assert!(!has_chunk(db, &Hash::of(b"only in the fork")));
            assert!(!has_chunk(db, &Hash::of(b"only in the fork's live layer")));
            assert!(has_chunk(db, &Hash::of(b"shared by both")));
            assert!(verify(db)?.ok);
            Ok(())
        })
    }

    /// A small vault with a file, a big file, a subdirectory, a checkpoint and a fork.
    fn populated(store: &mut Store) -> Result<(Hash, Hash, Hash)> {
        store.write(|db| {
            create_workspace(db, "main", None, None)?;
            let mut ws = Workspace::open(db, "main")?;
            put_file(&ws, &root(&ws), b"small", b"small file")?;
            put_file(&ws, &root(&ws), b"big", &big(3, 2 * CHUNK_SIZE + 10))?;
            let d = ws.create(&root(&ws), b"sub", NewNode::new(Kind::Dir, 0o755))?;
            put_file(&ws, &d, b"inner", b"inner file")?;
            let cp = ws.checkpoint(Some("one"), None, "test")?.checkpoint;
            ws.fork("f", None)?;
            audit::append(
                db,
                Some("main"),
                "test",
                "populate",
                &serde_json::json!({"n": 1}),
            )?;
            let tree = objects::get_tree(db, &cp.root)?;
            let sub = tree
                .entries
                .iter()
                .find(|e| e.name == b"sub")
                .unwrap()
                .hash
                .unwrap();
            let bigc = tree
                .entries
                .iter()
                .find(|e| e.name == b"big")
                .unwrap()
                .hash
                .unwrap();
            Ok((cp.root, sub, bigc))
        })
    }

    #[test]
    fn verify_passes_on_a_healthy_vault() -> Result<()> {
        let (_dir, mut store) = vault();
        populated(&mut store)?;
        let r = store.read(verify)?;
        assert!(r.ok, "{:?}", r.problems);
        assert!(
            r.checked.chunks >= 5 && r.checked.contents == 1 && r.checked.trees >= 3,
            "{:?}",
            r.checked
        );
        assert_eq!(
            (
                r.checked.workspaces,
                r.checked.checkpoints,
                r.checked.audit_rows
            ),
            (2, 1, 1)
        );
        assert!(r.checked.inodes >= 2 && r.checked.dentries >= 1);
        Ok(())
    }

    #[test]
    fn verify_detects_a_modified_chunk() -> Result<()> {
        let (_dir, mut store) = vault();
        populated(&mut store)?;
        let h = Hash::of(b"small file");
        store.write(|db| {
            db.execute(
                "UPDATE chunk SET data = ?2 WHERE hash = ?1",
                params![&h.0[..], b"SMALL FILE"],
            )?;
            Ok(())
        })?;
        let r = store.read(verify)?;
        assert!(!r.ok);
        assert_eq!(kinds(&r), ["chunk_hash_mismatch"], "{:?}", r.problems);
        assert_eq!(r.problems[0].object, format!("chunk {}", h.to_hex()));
        Ok(())
    }

    #[test]
    fn verify_detects_a_missing_tree() -> Result<()> {
        let (_dir, mut store) = vault();
        let (root_hash, sub, _) = populated(&mut store)?;
        store.write(|db| {
            db.execute("DELETE FROM tree WHERE hash = ?1", [&sub.0[..]])?;
            Ok(())
        })?;
        let r = store.read(verify)?;
        assert!(!r.ok);
        let missing: Vec<&Problem> = r
            .problems
            .iter()
            .filter(|p| p.kind == "missing_tree")
            .collect();
        assert!(!missing.is_empty(), "{:?}", r.problems);
        assert!(
            missing.iter().all(|p| p.message.contains(&sub.to_hex())),
            "{:?}",
            r.problems
        );
        assert!(
            missing
                .iter()
                .any(|p| p.object == format!("tree {}", root_hash.to_hex()))
        );

        // The root itself gone: every workspace and checkpoint that names it is reported.
        store.write(|db| {
            db.execute("DELETE FROM tree WHERE hash = ?1", [&root_hash.0[..]])?;
            Ok(())
        })?;
        let r = store.read(verify)?;
        let objs: Vec<&str> = r
            .problems
            .iter()
            .filter(|p| p.kind == "missing_tree")
            .map(|p| p.object.as_str())
            .collect();
        assert!(
            objs.contains(&"workspace main") && objs.contains(&"workspace f"),
            "{objs:?}"
        );
        assert!(objs.contains(&"checkpoint main/one"), "{objs:?}");
        Ok(())
    }

    #[test]
    fn verify_detects_dangling_dentries() -> Result<()> {
        let (_dir, mut store) = vault();
        populated(&mut store)?;
        store.write(|db| {
            let layer: i64 = db.query_row("SELECT layer FROM workspace WHERE name = 'main'", [], |r| r.get(0))?;
            db.execute("INSERT INTO dentry (layer, parent, name, ino) VALUES (?1, 1, x'67686f7374', 99999)", [layer])?;
            // A dentry whose parent is a file.
            let small: i64 =
                db.query_row("SELECT ino FROM dentry WHERE layer = ?1 AND name = x'736d616c6c'", [layer], |r| r.get(0))?;
            db.execute("INSERT INTO dentry (layer, parent, name, ino) VALUES (?1, ?2, x'78', 1)", params![layer, small])?;
            Ok(())
        })?;
        let r = store.read(verify)?;
        assert!(!r.ok);
        let mut k = kinds(&r);
        k.sort();
        assert_eq!(k, ["dangling_dentry", "dentry_parent"], "{:?}", r.problems);
        assert!(r.problems.iter().any(|p| p.message.contains("99999")));
        Ok(())
    }

    #[test]
    fn verify_reports_malformed_rows_without_panicking() -> Result<()> {
        let (_dir, mut store) = vault();
        let (_, sub, bigc) = populated(&mut store)?;
        store.write(|db| {
            // A chunk hash of the wrong length and a data column of the wrong type.
            db.execute("UPDATE chunk SET hash = x'0102' WHERE hash = ?1", [&Hash::of(b"inner file").0[..]])?;
            db.execute("UPDATE chunk SET data = 'text' WHERE hash = ?1", [&Hash::of(b"small file").0[..]])?;
            // A chunk list that is not a multiple of 32 bytes.
            db.execute("UPDATE content SET chunks = x'010203' WHERE hash = ?1", [&bigc.0[..]])?;
            // A tree whose bytes are garbage.
            db.execute("UPDATE tree SET data = x'ffffffff' WHERE hash = ?1", [&sub.0[..]])?;
            // A workspace whose layer is gone, an inode with a bad hash and unknown kind.
            db.execute("UPDATE workspace SET layer = 4242 WHERE name = 'f'", [])?;
            db.execute(
                "INSERT INTO inode (layer, ino, kind, mode, uid, gid, size, mtime_ns, ctime_ns, nlink, hash)
                 VALUES ((SELECT layer FROM workspace WHERE name = 'main'), 777, 9, 0, 0, 0, 0, 0, 0, 1, x'00')",
                [],
            )?;
            db.execute(
                "INSERT INTO inode (layer, ino, kind, mode, uid, gid, size, mtime_ns, ctime_ns, nlink, hash)
                 VALUES ((SELECT layer FROM workspace WHERE name = 'main'), 778, 1, 0, 0, 0, 3, 0, 0, 1, x'00')",
                [],
            )?;
            // An edited audit row.
            db.execute("UPDATE audit SET detail = '{}'", [])?;
            Ok(())
        })?;
        let r = store.read(verify)?;
        assert!(!r.ok);
        let k = kinds(&r);
        for want in [
            "bad_hash",
            "chunk_malformed",
            "content_malformed",
            "tree_hash_mismatch",
            "tree_undecodable",
            "missing_layer",
            "inode_malformed",
            "missing_chunk",
            "audit",
        ] {
            assert!(k.contains(&want), "{want} not in {:?}", r.problems);
        }
        assert!(!k.contains(&"check_failed"), "{:?}", r.problems);
        Ok(())
    }

    #[test]
    fn verify_turns_a_broken_schema_into_problems() -> Result<()> {
        let (_dir, mut store) = vault();
        populated(&mut store)?;
        store.write(|db| {
            db.execute_batch("DROP TABLE dentry")?;
            Ok(())
        })?;
        let r = store.read(verify)?;
        assert!(!r.ok);
        assert!(
            r.problems
                .iter()
                .any(|p| p.kind == "check_failed" && p.object == "dentries"),
            "{:?}",
            r.problems
        );
        assert!(r.checked.chunks > 0 && r.checked.trees > 0);
        Ok(())
    }

    #[test]
    fn stats_count_what_is_there() -> Result<()> {
        let (_dir, mut store) = vault();
        store.write(|db| {
            create_workspace(db, "main", None, None)?;
            let mut ws = Workspace::open(db, "main")?;
            let a = put_file(&ws, &root(&ws), b"a", b"12345")?;
            let d = ws.create(&root(&ws), b"d", NewNode::new(Kind::Dir, 0o755))?;
            let e = ws.create(&d, b"e", NewNode::new(Kind::Dir, 0o755))?;
            put_file(&ws, &e, b"b", &big(4, CHUNK_SIZE + 100))?;
            put_file(&ws, &d, b"same", b"12345")?;
            ws.link(a.ino, &d, b"a-link")?;
            ws.create(
                &root(&ws),
                b"l",
                NewNode {
                    target: Some(b"a".to_vec()),
                    ..NewNode::new(Kind::Symlink, 0o777)
                },
            )?;
            ws.create(&root(&ws), b"p", NewNode::new(Kind::Fifo, 0o644))?;
            ws.checkpoint(Some("c1"), None, "test")?;
            ws.fork("f", None)?;
            put_file(&ws, &root(&ws), b"unflushed", b"xyz")?;

            let s = stats(db, Some("main"))?;
            let w = s.workspace.clone().unwrap();
            assert_eq!(
                (w.files, w.dirs, w.symlinks, w.other, w.hard_links),
                (5, 2, 1, 1, 1),
                "{w:?}"
            );
            assert_eq!(
                w.logical_bytes,
                5 + (CHUNK_SIZE as u64 + 100) + 5 + 3,
                "{w:?}"
            );
            assert_eq!(w.checkpoints, 1);
            assert_eq!(w.head.as_deref(), Some("c1"));
            assert_eq!(
                w.root,
                Workspace::open(db, "main")?.info.base_root.to_hex(),
                "stats flushed"
            );

            let v = &s.vault;
            assert_eq!((v.workspaces, v.forks, v.checkpoints), (2, 1, 1), "{v:?}");
            // Chunks: "12345" (stored once for two files), the 2 chunks of b, "xyz".
            assert_eq!(v.chunks, 4);
            assert_eq!(v.chunks, count(db, "SELECT COUNT(*) FROM chunk")?);
            assert_eq!(v.contents, 1);
            assert_eq!(v.stored_bytes, 5 + (CHUNK_SIZE as u64 + 100) + 3);
            // Two extents of 40 bytes (block + chunk).
            assert_eq!(v.chunk_list_bytes, 80);
            assert_eq!(v.trees, count(db, "SELECT COUNT(*) FROM tree")?);

            let f = stats(db, Some("f"))?.workspace.unwrap();
            assert_eq!(
                (f.files, f.logical_bytes, f.parent.as_deref(), f.checkpoints),
                (4, 5 + CHUNK_SIZE as u64 + 100 + 5, Some("main"), 0)
            );
            assert!(stats(db, None)?.workspace.is_none());
            assert!(matches!(
                stats(db, Some("nope")),
                Err(Error::NoSuchVault(_))
            ));
            Ok(())
        })
    }

    /// `cargo test --release --lib maintenance::tests::large -- --ignored --nocapture`
    #[test]
    #[ignore = "timing probe on a 100 000-object vault; speed is measured by scripts/bench.sh, not asserted in tests"]
    fn large_vault_timings() -> Result<()> {
        let (_dir, mut store) = vault();
        let t = std::time::Instant::now();
        store.write(|db| {
            create_workspace(db, "main", None, None)?;
            let mut ws = Workspace::open(db, "main")?;
            for d in 0..1000 {
                let dir = ws.create(
                    &root(&ws),
                    format!("d{d}").as_bytes(),
                    NewNode::new(Kind::Dir, 0o755),
                )?;
                for f in 0..100 {
                    put_file(
                        &ws,
                        &dir,
                        format!("f{f}").as_bytes(),
                        format!("{d}/{f}").as_bytes(),
                    )?;
                }
            }
            ws.checkpoint(Some("one"), None, "test")?;
            for i in 0..10 {
                ws.fork(&format!("fork{i}"), None)?;
            }
            for d in 0..1000 {
                crate::store::content::write_bytes(db, format!("garbage {d}").as_bytes())?;
            }
            Ok(())
        })?;
        eprintln!("build: {:?}", t.elapsed());
        let t = std::time::Instant::now();
        let r = store.write(gc)?;
        eprintln!("gc: {:?} {r:?}", t.elapsed());
        assert_eq!(r.chunks_removed, 1000);
        let t = std::time::Instant::now();
        let v = store.read(verify)?;
        eprintln!("verify: {:?} {:?}", t.elapsed(), v.checked);
        assert!(v.ok);
        let t = std::time::Instant::now();
        let s = store.write(|db| stats(db, Some("fork3")))?;
        eprintln!("stats: {:?} {:?}", t.elapsed(), s.workspace);
        Ok(())
    }
}
