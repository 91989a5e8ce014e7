//! `vault export`: writes one workspace as a standalone vault file holding only the
//! objects its live state and checkpoints reference.

use std::collections::HashSet;
use std::path::Path;

use rusqlite::{Connection, params};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::store::content;
use crate::store::objects::{CHUNK_SIZE, HOLE, Hash, Kind, get_tree};
use crate::store::{Store, audit};
use crate::workspace::{MAIN, Workspace, create_workspace};

#[derive(Debug, Default, Serialize)]
pub struct ExportReport {
    pub trees: usize,
    pub contents: usize,
    pub chunks: usize,
    pub checkpoints: usize,
    pub bytes: u64,
}

/// Every object reachable from `roots`, each shared subtree visited once.
#[derive(Default)]
pub struct Reachable {
    pub trees: HashSet<Hash>,
    pub contents: HashSet<Hash>,
    pub chunks: HashSet<Hash>,
}

impl Reachable {
    pub fn walk_tree(&mut self, db: &Connection, root: Hash) -> Result<()> {
        let mut stack = vec![root];
        while let Some(h) = stack.pop() {
            if !self.trees.insert(h) {
                continue;
            }
            for e in get_tree(db, &h)?.entries {
                match (e.kind, e.hash) {
                    (Kind::Dir, Some(sub)) => stack.push(sub),
                    (Kind::File, Some(c)) => self.add_content(db, c, e.size)?,
                    _ => {}
                }
            }
        }
        Ok(())
    }

    pub fn add_content(&mut self, db: &Connection, hash: Hash, size: u64) -> Result<()> {
        if size as usize <= CHUNK_SIZE {
            if hash != HOLE {
                self.chunks.insert(hash);
            }
            return Ok(());
        }
        if self.contents.insert(hash) {
            for (_, c) in &content::extents(db, &hash, size)?.list {
                self.chunks.insert(*c);
            }
        }
        Ok(())
    }
}

fn copy_rows(
    src: &Connection,
    dst: &Connection,
    table: &str,
    cols: &str,
    hashes: &HashSet<Hash>,
) -> Result<u64> {
    let mut get = src.prepare(&format!("SELECT {cols} FROM {table} WHERE hash = ?1"))?;
    let n = cols.split(',').count();
    let placeholders: Vec<String> = (1..=n).map(|i| format!("?{i}")).collect();
    let mut put = dst.prepare(&format!(
        "INSERT OR IGNORE INTO {table} ({cols}) VALUES ({})",
        placeholders.join(",")
    ))?;
    let mut bytes = 0u64;
    for h in hashes {
        let row: Vec<rusqlite::types::Value> =
            get.query_row([&h.0[..]], |r| (0..n).map(|i| r.get(i)).collect())?;
        if let Some(rusqlite::types::Value::Blob(b)) = row.get(1) {
            bytes += b.len() as u64;
        }
        put.execute(rusqlite::params_from_iter(row))?;
    }
    Ok(bytes)
}

pub fn export_workspace(src_path: &Path, workspace: &str, dst_path: &Path) -> Result<ExportReport> {
    if dst_path.exists() {
        return Err(Error::Exists(dst_path.display().to_string()));
    }
    let mut src = Store::open(src_path)?;
    let (root, checkpoints, reach) = src.write(|db| {
        let mut ws = Workspace::open(db, workspace)?;
        let root = ws.flush()?;
        let mut cps = ws.checkpoints()?;
        if let Some(h) = ws.head()?
            && h.workspace != workspace
        {
            cps.insert(0, h);
        }
        let mut reach = Reachable::default();
        reach.walk_tree(db, root)?;
        for c in &cps {
            reach.walk_tree(db, c.root)?;
        }
        audit::append(
            db,
            Some(workspace),
            crate::store::audit::cli_actor(),
            "vault.export",
            &serde_json::json!({"file": dst_path}),
        )?;
        Ok((root, cps, reach))
    })?;
    let head_name = src.read(|db| Ok(Workspace::open(db, workspace)?.head()?.map(|h| h.name)))?;
    let mut dst = Store::create(dst_path)?;
    let result = dst.write(|d| {
        let mut report = ExportReport::default();
        let s = &src.conn;
        report.bytes += copy_rows(s, d, "chunk", "hash, data, codec", &reach.chunks)?;
        copy_rows(s, d, "content", "hash, size, chunks, format", &reach.contents)?;
        copy_rows(s, d, "tree", "hash, data, files, bytes", &reach.trees)?;
        report.trees = reach.trees.len();
        report.contents = reach.contents.len();
        report.chunks = reach.chunks.len();
        let info = create_workspace(d, MAIN, Some(root), None)?;
        let mut prev: Option<i64> = None;
        let mut head_id = None;
        for c in &checkpoints {
            d.execute(
                "INSERT INTO checkpoint (workspace, name, root, parent, created_at_ns, origin, message) VALUES (?1,?2,?3,?4,?5,?6,?7)",
                params![info.id, c.name, &c.root.0[..], prev, c.created_at_ns, c.origin, c.message],
            )?;
            prev = Some(d.last_insert_rowid());
            if head_name.as_deref() == Some(c.name.as_str()) {
                head_id = prev;
            }
        }
        d.execute("UPDATE workspace SET head = ?1 WHERE id = ?2", params![head_id, info.id])?;
        report.checkpoints = checkpoints.len();
        audit::append(
            d,
            Some(MAIN),
            crate::store::audit::cli_actor(),
            "vault.create",
            &serde_json::json!({"exported_from": src_path, "workspace": workspace}),
        )?;
        Ok(report)
    });
    if result.is_err() {
        drop(dst);
        for suffix in ["", "-wal", "-shm"] {
            let mut p = dst_path.as_os_str().to_owned();
            p.push(suffix);
            let _ = std::fs::remove_file(p);
        }
    }
    result
}
