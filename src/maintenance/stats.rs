//! What the vault stores and, for one workspace, what its tree holds.

use std::collections::HashSet;

use rusqlite::{Connection, params};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::store::objects::{self, Kind};

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

pub(super) fn count(db: &Connection, sql: &str) -> Result<u64> {
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
