//! The full consistency check of a vault file (`avfs vault verify`): it re-hashes every
//! stored object, checks every reference between objects, roots and the live layers, runs
//! `PRAGMA integrity_check`, checks every page against its checksum and the audit chain,
//! and reports every problem it finds, never stopping at the first one. The store runs it
//! itself before the first write to a file avfs did not close cleanly, and before an
//! upgrade; objects a remote promises (`packrecords`) count as present.

use std::collections::HashSet;

use rusqlite::Connection;
use rusqlite::types::ValueRef;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::store::content;
use crate::store::objects::{CHUNK_SIZE, HOLE, Hash, Kind, Tree};
use crate::store::{Store, audit};

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
        let mut stmt = db.prepare("SELECT id, hash, data, codec FROM chunk")?;
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
            let codec = r.get_ref(3)?.as_i64().unwrap_or(-1);
            let decoded = blob_of_value(r.get_ref(2)?, "data").and_then(|stored| {
                self.checked.chunk_bytes += stored.len() as u64;
                crate::store::objects::decode_chunk(codec, stored.to_vec())
                    .map_err(|why| format!("stored bytes {why}"))
            });
            match decoded {
                Ok(data) => {
                    let data = &data[..];
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
    for (kind, h) in super::packrecords::promised_all(db)? {
        match kind {
            super::packrecords::ObjKind::Chunk => v.chunks.insert(h),
            super::packrecords::ObjKind::Content => v.contents.insert(h),
            super::packrecords::ObjKind::Tree => v.trees.insert(h),
            super::packrecords::ObjKind::Checkpoint => false,
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
