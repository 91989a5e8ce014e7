//! The live layer of a workspace: the single place that changes a workspace.
//!
//! A workspace is `base_root` (an immutable tree) plus a live layer: inode and dentry rows
//! for exactly the part of the tree that was looked at or changed. Directories are
//! materialized from their tree object on first lookup; untouched subtrees cost nothing.
//! A change marks its directory and the directory's ancestors dirty; `flush` re-hashes
//! only dirty directories.

mod checkpoint;
pub mod content;
pub mod flush;
mod limits;
mod nodes;
pub mod path;
mod record;

pub use checkpoint::{Checkpoint, CheckpointSummary, TAKEN_BY_AVFS, validate_checkpoint_name};
pub use limits::{Budget, QuotaBaseline};
pub use nodes::{NewNode, RenameFlags, SetAttr};
pub use record::{cli_actor, record};

// What the CLI and the mount need of the vault file to call this API (open it, name
// objects, stamp times), so that they never import the store's internals.
pub use crate::store::objects::{CHUNK_SIZE, Entry, HOLE, Hash, Kind};
pub use crate::store::quota::Quota;
pub use crate::store::{Store, now_ns};

use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::store::objects::{self, get_tree};

pub const ROOT_INO: u64 = 1;
/// Name of the workspace a new vault starts with.
pub const MAIN: &str = "main";

/// One live inode row.
#[derive(Clone, Debug)]
pub struct Inode {
    pub ino: u64,
    pub kind: Kind,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    /// Files: names. Directories: 2 + subdirectories once known, 1 while not yet counted
    /// (see `Workspace::dir_nlink`), 0 once removed.
    pub nlink: u32,
    pub rdev: u64,
    pub link_group: u64,
    /// Content hash of a file; tree hash of a clean directory.
    pub hash: Option<Hash>,
    pub target: Option<Vec<u8>>,
    pub materialized: bool,
    pub dirty: bool,
    pub has_links: bool,
    /// The access time a program set (utimensat); `None` reads as `mtime_ns`. Reads never
    /// change it (noatime), and trees do not keep it.
    pub atime_ns: Option<i64>,
}

/// The inode columns `Inode::from_row` reads, in its order. A macro so the statements
/// below are string constants: building them per call showed up in mount profiles.
macro_rules! inode_cols {
    () => {
        "ino, kind, mode, uid, gid, size, mtime_ns, ctime_ns, nlink, rdev, link_group, hash, target, materialized, dirty, has_links, atime_ns"
    };
    ($p:literal) => {
        concat!(
            $p, ".ino, ", $p, ".kind, ", $p, ".mode, ", $p, ".uid, ", $p, ".gid, ", $p, ".size, ",
            $p, ".mtime_ns, ", $p, ".ctime_ns, ", $p, ".nlink, ", $p, ".rdev, ", $p,
            ".link_group, ", $p, ".hash, ", $p, ".target, ", $p, ".materialized, ", $p,
            ".dirty, ", $p, ".has_links, ", $p, ".atime_ns"
        )
    };
}

pub mod peek;
pub use peek::{Node, Peek};

impl Inode {
    fn from_row(r: &Row, at: usize) -> rusqlite::Result<Inode> {
        let hash: Option<Vec<u8>> = r.get(at + 11)?;
        let kind: i64 = r.get(at + 1)?;
        Ok(Inode {
            ino: r.get::<_, i64>(at)? as u64,
            kind: Kind::from_i64(kind)
                .map_err(|_| rusqlite::Error::IntegralValueOutOfRange(at + 1, kind))?,
            mode: r.get(at + 2)?,
            uid: r.get(at + 3)?,
            gid: r.get(at + 4)?,
            size: r.get::<_, i64>(at + 5)? as u64,
            mtime_ns: r.get(at + 6)?,
            ctime_ns: r.get(at + 7)?,
            nlink: r.get(at + 8)?,
            rdev: r.get::<_, i64>(at + 9)? as u64,
            link_group: r.get::<_, i64>(at + 10)? as u64,
            hash: match hash {
                None => None,
                Some(h) => Some(Hash::from_slice(&h).map_err(|_| {
                    rusqlite::Error::InvalidColumnType(
                        at + 11,
                        "hash".into(),
                        rusqlite::types::Type::Blob,
                    )
                })?),
            },
            target: r.get(at + 12)?,
            materialized: r.get(at + 13)?,
            dirty: r.get(at + 14)?,
            has_links: r.get(at + 15)?,
            atime_ns: r.get(at + 16)?,
        })
    }

    fn from_entry(ino: u64, e: &Entry) -> Inode {
        Inode {
            ino,
            kind: e.kind,
            mode: e.mode,
            uid: e.uid,
            gid: e.gid,
            size: e.size,
            mtime_ns: e.mtime_ns,
            ctime_ns: e.mtime_ns,
            nlink: 1,
            rdev: e.rdev,
            link_group: e.link_group,
            hash: e.hash,
            target: e.target.clone(),
            materialized: false,
            dirty: false,
            has_links: e.has_links,
            atime_ns: None,
        }
    }

    pub fn is_dir(&self) -> bool {
        self.kind == Kind::Dir
    }

    /// st_mode: file type bits plus permission bits.
    pub fn st_mode(&self) -> u32 {
        self.kind.ifmt() | (self.mode & 0o7777)
    }
}

/// A workspace row.
#[derive(Clone, Debug, Serialize)]
pub struct WorkspaceInfo {
    pub id: i64,
    pub name: String,
    #[serde(serialize_with = "ser_hash")]
    pub base_root: Hash,
    pub layer: i64,
    pub parent: Option<String>,
    pub parent_checkpoint: Option<String>,
    pub created_at_ns: i64,
}

pub fn ser_hash<S: serde::Serializer>(h: &Hash, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&h.to_hex())
}

const WS_COLS: &str = "id, name, base_root, layer, parent_name, parent_checkpoint, created_at_ns";

fn ws_from_row(r: &Row) -> rusqlite::Result<WorkspaceInfo> {
    let root: Vec<u8> = r.get(2)?;
    Ok(WorkspaceInfo {
        id: r.get(0)?,
        name: r.get(1)?,
        base_root: Hash::from_slice(&root).unwrap_or(objects::HOLE),
        layer: r.get(3)?,
        parent: r.get(4)?,
        parent_checkpoint: r.get(5)?,
        created_at_ns: r.get(6)?,
    })
}

pub fn list_workspaces(db: &Connection) -> Result<Vec<WorkspaceInfo>> {
    let mut stmt = db.prepare(&format!("SELECT {WS_COLS} FROM workspace ORDER BY id"))?;
    let rows = stmt.query_map([], ws_from_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub fn find_workspace(db: &Connection, name: &str) -> Result<Option<WorkspaceInfo>> {
    Ok(db
        .prepare_cached(&format!("SELECT {WS_COLS} FROM workspace WHERE name = ?1"))?
        .query_row([name], ws_from_row)
        .optional()?)
}

pub fn current_uid_gid() -> (u32, u32) {
    // SAFETY: geteuid/getegid have no preconditions and cannot fail.
    unsafe { (libc::geteuid(), libc::getegid()) }
}

/// Creates a workspace on `root` with a fresh, empty live layer.
pub fn create_workspace(
    db: &Connection,
    name: &str,
    root: Option<Hash>,
    parent: Option<(&WorkspaceInfo, Option<&str>)>,
) -> Result<WorkspaceInfo> {
    if find_workspace(db, name)?.is_some() {
        return Err(Error::VaultExists(name.into()));
    }
    let root = match root {
        Some(r) => r,
        None => {
            let (uid, gid) = current_uid_gid();
            objects::put_tree(db, &objects::empty_root(uid, gid, now_ns()))?
        }
    };
    db.prepare_cached(
        "INSERT INTO workspace (name, base_root, layer, next_ino, parent_id, parent_name, parent_checkpoint, created_at_ns)
         VALUES (?1, ?2, 0, 2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        name,
        &root.0[..],
        parent.map(|p| p.0.id),
        parent.map(|p| p.0.name.clone()),
        parent.and_then(|p| p.1),
        now_ns()
    ])?;
    let id = db.last_insert_rowid();
    let layer = new_layer(db, id, &root)?;
    db.prepare_cached("UPDATE workspace SET layer = ?1 WHERE id = ?2")?
        .execute(params![layer, id])?;
    find_workspace(db, name)?.ok_or_else(|| Error::Internal("workspace vanished".into()))
}

/// Starts an empty live layer on `root` (only the root inode, not materialized).
fn new_layer(db: &Connection, ws_id: i64, root: &Hash) -> Result<i64> {
    db.prepare_cached("INSERT INTO layer (workspace) VALUES (?1)")?
        .execute([ws_id])?;
    let layer = db.last_insert_rowid();
    let tree = get_tree(db, root)?;
    let a = tree.root_attrs.unwrap_or(objects::DirAttrs {
        mode: 0o755,
        uid: 0,
        gid: 0,
        mtime_ns: 0,
        xattrs: vec![],
    });
    let root_inode = Inode {
        ino: ROOT_INO,
        kind: Kind::Dir,
        mode: a.mode,
        uid: a.uid,
        gid: a.gid,
        size: 0,
        mtime_ns: a.mtime_ns,
        ctime_ns: a.mtime_ns,
        nlink: 1,
        rdev: 0,
        link_group: 0,
        hash: Some(*root),
        target: None,
        materialized: false,
        dirty: false,
        has_links: tree
            .entries
            .iter()
            .any(|e| e.link_group != 0 || e.has_links),
        atime_ns: None,
    };
    insert_inode(db, layer, &root_inode)?;
    for (n, v) in &a.xattrs {
        db.prepare_cached("INSERT INTO xattr (layer, ino, name, value) VALUES (?1, ?2, ?3, ?4)")?
            .execute(params![layer, ROOT_INO as i64, n, v])?;
    }
    Ok(layer)
}

/// Deletes the rows of layers no workspace uses any more.
pub fn purge_dead_layers(db: &Connection) -> Result<usize> {
    let dead: Vec<i64> = db
        .prepare("SELECT id FROM layer WHERE dead = 1")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for l in &dead {
        for table in ["inode", "dentry", "xattr", "linkgroup"] {
            db.execute(&format!("DELETE FROM {table} WHERE layer = ?1"), [l])?;
        }
        db.execute("DELETE FROM layer WHERE id = ?1", [l])?;
    }
    Ok(dead.len())
}

fn insert_inode(db: &Connection, layer: i64, i: &Inode) -> Result<()> {
    db.prepare_cached(concat!(
        "INSERT INTO inode (layer, ",
        inode_cols!(),
        ") VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18)"
    ))?
    .execute(params![
        layer,
        i.ino as i64,
        i.kind as i64,
        i.mode,
        i.uid,
        i.gid,
        i.size as i64,
        i.mtime_ns,
        i.ctime_ns,
        i.nlink,
        i.rdev as i64,
        i.link_group as i64,
        i.hash.map(|h| h.0.to_vec()),
        i.target,
        i.materialized,
        i.dirty,
        i.has_links,
        i.atime_ns
    ])?;
    Ok(())
}

/// A workspace opened inside one transaction.
pub struct Workspace<'a> {
    pub db: &'a Connection,
    pub info: WorkspaceInfo,
    /// Inodes some process still has open (the mount sets this): when their last name
    /// goes they stay as orphans, readable until `drop_orphan` after the last close.
    pub open_inos: Option<&'a std::collections::HashSet<u64>>,
    /// Quota accounting of a long-lived writer (the mount); `None` for CLI commands,
    /// which check the totals once before they commit (`check_quota`).
    pub budget: Option<&'a Budget>,
}

impl<'a> Workspace<'a> {
    pub fn open(db: &'a Connection, name: &str) -> Result<Workspace<'a>> {
        let info = find_workspace(db, name)?.ok_or_else(|| Error::NoSuchVault(name.into()))?;
        Ok(Workspace {
            db,
            info,
            open_inos: None,
            budget: None,
        })
    }

    /// A workspace whose row the caller already holds (the mount caches it).
    pub fn with_info(db: &'a Connection, info: WorkspaceInfo) -> Workspace<'a> {
        Workspace {
            db,
            info,
            open_inos: None,
            budget: None,
        }
    }

    fn layer(&self) -> i64 {
        self.info.layer
    }

    pub fn get(&self, ino: u64) -> Result<Inode> {
        self.try_get(ino)?
            .ok_or_else(|| Error::NotFound(format!("inode {ino}")))
    }

    pub fn try_get(&self, ino: u64) -> Result<Option<Inode>> {
        Ok(self
            .db
            .prepare_cached(concat!(
                "SELECT ",
                inode_cols!(),
                " FROM inode WHERE layer = ?1 AND ino = ?2"
            ))?
            .query_row(params![self.layer(), ino as i64], |r| Inode::from_row(r, 0))
            .optional()?)
    }

    fn alloc_inos(&self, n: u64) -> Result<u64> {
        let start: i64 = self
            .db
            .prepare_cached("UPDATE workspace SET next_ino = next_ino + ?1 WHERE id = ?2 RETURNING next_ino - ?1")?
            .query_row(params![n as i64, self.info.id], |r| r.get(0))?;
        Ok(start as u64)
    }

    fn put_inode(&self, i: &Inode) -> Result<()> {
        self.db
            .prepare_cached(
                "UPDATE inode SET kind=?3, mode=?4, uid=?5, gid=?6, size=?7, mtime_ns=?8, ctime_ns=?9, nlink=?10,
                 rdev=?11, link_group=?12, hash=?13, target=?14, materialized=?15, dirty=?16, has_links=?17,
                 atime_ns=?18 WHERE layer=?1 AND ino=?2",
            )?
            .execute(params![
                self.layer(),
                i.ino as i64,
                i.kind as i64,
                i.mode,
                i.uid,
                i.gid,
                i.size as i64,
                i.mtime_ns,
                i.ctime_ns,
                i.nlink,
                i.rdev as i64,
                i.link_group as i64,
                i.hash.map(|h| h.0.to_vec()),
                i.target,
                i.materialized,
                i.dirty,
                i.has_links,
                i.atime_ns
            ])?;
        Ok(())
    }

    fn insert_dentry(&self, parent: u64, name: &[u8], ino: u64) -> Result<()> {
        self.db
            .prepare_cached(
                "INSERT INTO dentry (layer, parent, name, ino) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![self.layer(), parent as i64, name, ino as i64])?;
        Ok(())
    }

    fn delete_dentry(&self, parent: u64, name: &[u8]) -> Result<()> {
        self.db
            .prepare_cached("DELETE FROM dentry WHERE layer = ?1 AND parent = ?2 AND name = ?3")?
            .execute(params![self.layer(), parent as i64, name])?;
        Ok(())
    }

    /// Loads a directory's entries from its tree object into the live layer.
    pub fn materialize(&self, dir: &Inode) -> Result<()> {
        if dir.materialized || dir.kind != Kind::Dir {
            return Ok(());
        }
        // The caller's copy may predate an earlier materialization in this transaction.
        let done: bool = self
            .db
            .prepare_cached("SELECT materialized FROM inode WHERE layer = ?1 AND ino = ?2")?
            .query_row(params![self.layer(), dir.ino as i64], |r| r.get(0))
            .optional()?
            .unwrap_or(true);
        if done {
            return Ok(());
        }
        let hash = dir
            .hash
            .ok_or_else(|| Error::Internal(format!("clean directory {} has no tree", dir.ino)))?;
        let tree = get_tree(self.db, &hash)?;
        let first = self.alloc_inos(tree.entries.len() as u64)?;
        let mut saw_links = false;
        for (n, e) in tree.entries.iter().enumerate() {
            let mut ino = first + n as u64;
            let mut existing = None;
            if e.link_group != 0 {
                saw_links = true;
                existing = self
                    .db
                    .prepare_cached("SELECT ino FROM linkgroup WHERE layer = ?1 AND grp = ?2")?
                    .query_row(params![self.layer(), e.link_group as i64], |r| {
                        r.get::<_, i64>(0)
                    })
                    .optional()?;
            }
            if let Some(other) = existing {
                ino = other as u64;
                self.db
                    .prepare_cached(
                        "UPDATE inode SET nlink = nlink + 1 WHERE layer = ?1 AND ino = ?2",
                    )?
                    .execute(params![self.layer(), other])?;
            } else {
                insert_inode(self.db, self.layer(), &Inode::from_entry(ino, e))?;
                for (xn, xv) in &e.xattrs {
                    self.db
                        .prepare_cached(
                            "INSERT INTO xattr (layer, ino, name, value) VALUES (?1, ?2, ?3, ?4)",
                        )?
                        .execute(params![self.layer(), ino as i64, xn, xv])?;
                }
                if e.link_group != 0 {
                    self.db
                        .prepare_cached(
                            "INSERT INTO linkgroup (layer, grp, ino) VALUES (?1, ?2, ?3)",
                        )?
                        .execute(params![self.layer(), e.link_group as i64, ino as i64])?;
                }
            }
            self.insert_dentry(dir.ino, &e.name, ino)?;
        }
        self.db
            .prepare_cached("UPDATE inode SET materialized = 1 WHERE layer = ?1 AND ino = ?2")?
            .execute(params![self.layer(), dir.ino as i64])?;
        if saw_links {
            self.close_links()?;
        }
        Ok(())
    }

    /// Materializes every directory that holds a hard-link member, once per layer, so
    /// all names of a linked inode are live together and a change reaches all of them.
    fn close_links(&self) -> Result<()> {
        let closed: bool = self
            .db
            .prepare_cached("SELECT links_closed FROM layer WHERE id = ?1")?
            .query_row([self.layer()], |r| r.get(0))?;
        if closed {
            return Ok(());
        }
        self.db
            .prepare_cached("UPDATE layer SET links_closed = 1 WHERE id = ?1")?
            .execute([self.layer()])?;
        let mut stack = vec![ROOT_INO];
        while let Some(d) = stack.pop() {
            let dir = self.get(d)?;
            self.materialize(&dir)?;
            for (_, child) in self.children(d)? {
                if child.kind == Kind::Dir && (child.materialized || child.has_links) {
                    stack.push(child.ino);
                }
            }
        }
        Ok(())
    }

    /// Marks that some subtree with unmaterialized link members was grafted in.
    fn reopen_links(&self) -> Result<()> {
        self.db
            .prepare_cached("UPDATE layer SET links_closed = 0 WHERE id = ?1")?
            .execute([self.layer()])?;
        Ok(())
    }

    pub fn lookup(&self, parent: &Inode, name: &[u8]) -> Result<Option<Inode>> {
        if parent.kind != Kind::Dir {
            return Err(Error::NotADirectory(format!("inode {}", parent.ino)));
        }
        self.materialize(parent)?;
        Ok(self
            .db
            .prepare_cached(concat!(
                "SELECT ",
                inode_cols!("i"),
                " FROM dentry d JOIN inode i ON i.layer = d.layer AND i.ino = d.ino
                 WHERE d.layer = ?1 AND d.parent = ?2 AND d.name = ?3"
            ))?
            .query_row(params![self.layer(), parent.ino as i64, name], |r| {
                Inode::from_row(r, 0)
            })
            .optional()?)
    }

    /// Entries of a directory, sorted by name bytes. Materializes the directory.
    pub fn readdir(&self, dir: &Inode) -> Result<Vec<(Vec<u8>, Inode)>> {
        if dir.kind != Kind::Dir {
            return Err(Error::NotADirectory(format!("inode {}", dir.ino)));
        }
        self.materialize(dir)?;
        self.children(dir.ino)
    }

    fn children(&self, dir: u64) -> Result<Vec<(Vec<u8>, Inode)>> {
        let names: Vec<(Vec<u8>, u64)> = self
            .db
            .prepare_cached(
                "SELECT name, ino FROM dentry WHERE layer = ?1 AND parent = ?2 ORDER BY name",
            )?
            .query_map(params![self.layer(), dir as i64], |r| {
                Ok((r.get(0)?, r.get::<_, i64>(1)? as u64))
            })?
            .collect::<rusqlite::Result<_>>()?;
        let (Some(lo), Some(hi)) = (
            names.iter().map(|(_, i)| *i).min(),
            names.iter().map(|(_, i)| *i).max(),
        ) else {
            return Ok(vec![]);
        };
        // A materialized directory's children got consecutive inode numbers, so one
        // range scan of the inode table usually finds them all: much cheaper than one
        // index seek per child (this is most of what flush costs).
        let mut found: HashMap<u64, Inode> = HashMap::with_capacity(names.len());
        if hi - lo < 4 * names.len() as u64 + 16 {
            let mut stmt = self.db.prepare_cached(concat!(
                "SELECT ",
                inode_cols!(),
                " FROM inode WHERE layer = ?1 AND ino BETWEEN ?2 AND ?3"
            ))?;
            let rows = stmt.query_map(params![self.layer(), lo as i64, hi as i64], |r| {
                Inode::from_row(r, 0)
            })?;
            for i in rows {
                let i = i?;
                found.insert(i.ino, i);
            }
        }
        let mut out = Vec::with_capacity(names.len());
        for (name, ino) in names {
            // A hard link appears under several names: clone, do not take.
            let inode = match found.get(&ino) {
                Some(i) => i.clone(),
                None => self.get(ino)?,
            };
            out.push((name, inode));
        }
        Ok(out)
    }

    /// The (parent, name) pairs that name `ino`.
    pub fn names_of(&self, ino: u64) -> Result<Vec<(u64, Vec<u8>)>> {
        let mut stmt = self
            .db
            .prepare_cached("SELECT parent, name FROM dentry WHERE layer = ?1 AND ino = ?2")?;
        let rows = stmt.query_map(params![self.layer(), ino as i64], |r| {
            Ok((r.get::<_, i64>(0)? as u64, r.get(1)?))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    pub fn parent_of(&self, ino: u64) -> Result<Option<u64>> {
        Ok(self.names_of(ino)?.first().map(|(p, _)| *p))
    }

    /// Marks `dir` and its ancestors dirty; stops at the first that already is.
    fn mark_dirty(&self, dir: u64) -> Result<()> {
        let mut cur = Some(dir);
        while let Some(d) = cur {
            let changed = self
                .db
                .prepare_cached(
                    "UPDATE inode SET dirty = 1 WHERE layer = ?1 AND ino = ?2 AND dirty = 0",
                )?
                .execute(params![self.layer(), d as i64])?;
            if changed == 0 {
                break;
            }
            cur = self.parent_of(d)?;
        }
        Ok(())
    }

    /// Every directory holding a name of `ino` must be re-hashed (its entry changed).
    fn entry_changed(&self, ino: u64) -> Result<()> {
        if ino == ROOT_INO {
            return self.mark_dirty(ROOT_INO);
        }
        for (parent, _) in self.names_of(ino)? {
            self.mark_dirty(parent)?;
        }
        Ok(())
    }

    /// A directory's link count as Linux file systems report it: 2 + its subdirectories.
    /// Counted the first time it is asked for (from the live entries, or from the stored
    /// tree of a directory not loaded yet) and then kept current by mkdir, rmdir and
    /// rename; other inodes: their `nlink`.
    pub fn dir_nlink(&self, i: &Inode) -> Result<u32> {
        if i.kind != Kind::Dir || i.nlink != 1 {
            return Ok(i.nlink);
        }
        let materialized: bool = self
            .db
            .prepare_cached("SELECT materialized FROM inode WHERE layer = ?1 AND ino = ?2")?
            .query_row(params![self.layer(), i.ino as i64], |r| r.get(0))
            .optional()?
            .unwrap_or(i.materialized);
        let subdirs: i64 = if materialized {
            self.db
                .prepare_cached(
                    "SELECT COUNT(*) FROM dentry d JOIN inode c ON c.layer = d.layer AND c.ino = d.ino
                     WHERE d.layer = ?1 AND d.parent = ?2 AND c.kind = 2",
                )?
                .query_row(params![self.layer(), i.ino as i64], |r| r.get(0))?
        } else {
            match i.hash {
                Some(h) => get_tree(self.db, &h)?
                    .entries
                    .iter()
                    .filter(|e| e.kind == Kind::Dir)
                    .count() as i64,
                None => 0,
            }
        };
        let n = 2 + subdirs as u32;
        self.db
            .prepare_cached(
                "UPDATE inode SET nlink = ?3 WHERE layer = ?1 AND ino = ?2 AND nlink = 1",
            )?
            .execute(params![self.layer(), i.ino as i64, n])?;
        Ok(n)
    }

    /// A subdirectory of `dir` came or went: its link count follows, once it is known.
    fn dir_links_changed(&self, dir: u64, by: i64) -> Result<()> {
        self.db
            .prepare_cached(
                "UPDATE inode SET nlink = nlink + ?3 WHERE layer = ?1 AND ino = ?2 AND nlink >= 2",
            )?
            .execute(params![self.layer(), dir as i64, by])?;
        Ok(())
    }

    /// Reads file bytes.
    pub fn read(&self, file: &Inode, offset: u64, len: usize) -> Result<Vec<u8>> {
        let ext = self.extents(file)?;
        crate::store::content::read_at(self.db, &ext, offset, len)
    }

    /// A file's extent map (which blocks hold data): for reads, `SEEK_DATA`/`SEEK_HOLE`
    /// and the blocks a file really uses.
    pub fn extents(&self, file: &Inode) -> Result<std::sync::Arc<crate::store::content::Extents>> {
        match file.kind {
            Kind::File => {
                let hash = file
                    .hash
                    .ok_or_else(|| Error::Internal("file without content".into()))?;
                crate::store::content::extents(self.db, &hash, file.size)
            }
            Kind::Dir => Err(Error::IsADirectory(format!("inode {}", file.ino))),
            _ => Err(Error::InvalidArgument(
                format!("inode {}", file.ino),
                "not a regular file".into(),
            )),
        }
    }

    pub fn xattrs(&self, ino: u64) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut stmt = self.db.prepare_cached(
            "SELECT name, value FROM xattr WHERE layer = ?1 AND ino = ?2 ORDER BY name",
        )?;
        let rows = stmt.query_map(params![self.layer(), ino as i64], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

/// Removes a workspace (a fork) with its checkpoints and live layers. Content stays until
/// `gc`; other workspaces never lose anything, since content is shared by hash.
pub fn delete_workspace(db: &Connection, name: &str) -> Result<WorkspaceInfo> {
    let info = find_workspace(db, name)?.ok_or_else(|| Error::NoSuchVault(name.into()))?;
    db.execute("UPDATE layer SET dead = 1 WHERE workspace = ?1", [info.id])?;
    // Checkpoints of other workspaces that descend from these keep a dangling parent name only.
    db.execute(
        "UPDATE checkpoint SET parent = NULL WHERE parent IN (SELECT id FROM checkpoint WHERE workspace = ?1) AND workspace != ?1",
        [info.id],
    )?;
    db.execute("UPDATE workspace SET head = NULL WHERE head IN (SELECT id FROM checkpoint WHERE workspace = ?1) AND id != ?1", [info.id])?;
    db.execute("DELETE FROM checkpoint WHERE workspace = ?1", [info.id])?;
    db.execute("DELETE FROM workspace WHERE id = ?1", [info.id])?;
    crate::store::search_rows::forget_workspace(db, info.id)?;
    purge_dead_layers(db)?;
    Ok(info)
}

impl Workspace<'_> {
    /// Deletes an orphan (an inode with no names left) once nothing has it open.
    pub fn drop_orphan(&self, ino: u64) -> Result<()> {
        if let Some(i) = self.try_get(ino)?
            && i.nlink == 0
            && self.names_of(ino)?.is_empty()
        {
            self.delete_inode(ino)?;
        }
        Ok(())
    }

    /// Deletes every orphan of this layer (left by a process that died with files open).
    pub fn purge_orphans(&self) -> Result<usize> {
        let orphans: Vec<i64> = self
            .db
            .prepare("SELECT ino FROM inode i WHERE layer = ?1 AND nlink = 0 AND ino != 1 AND NOT EXISTS (SELECT 1 FROM dentry d WHERE d.layer = i.layer AND d.ino = i.ino)")?
            .query_map([self.layer()], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        for o in &orphans {
            self.delete_inode(*o as u64)?;
        }
        Ok(orphans.len())
    }
}
