//! `vault recover`: copies out of a damaged vault every checkpoint and every workspace
//! whose objects are all intact into a new vault file, and lists what was lost.
//!
//! The damaged file is opened read-only and never written. Each unit (a checkpoint, or a
//! workspace's live state) is recovered whole or not at all: every tree, chunk list and
//! chunk it reaches is read and checked against its hash first. Checkpoints keep their
//! names, times, origins and messages; a fork keeps its name and, when its source was
//! recovered too, its lineage. A workspace whose live state is lost starts from its newest
//! recovered checkpoint. The new vault's audit log starts afresh with one `vault.recover`
//! row naming the source and what was lost (the old log cannot be carried over intact).

use std::collections::{HashMap, HashSet};
use std::path::Path;

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::store::objects::{self, HOLE, Hash, Kind, get_chunk, get_tree};
use crate::store::{Store, audit, content, scratch};
use crate::workspace::{MAIN, Workspace, WorkspaceInfo, create_workspace, list_workspaces};

#[derive(Debug, Default, Serialize)]
pub struct RecoverReport {
    /// What was copied: `workspace/checkpoint`, or `workspace (live)`.
    pub recovered: Vec<String>,
    pub lost: Vec<Lost>,
    pub trees: usize,
    pub contents: usize,
    pub chunks: usize,
}

#[derive(Debug, Serialize)]
pub struct Lost {
    pub what: String,
    pub reason: String,
}

/// The objects one unit reaches, all checked.
#[derive(Default)]
struct Objects {
    trees: HashSet<Hash>,
    contents: HashSet<Hash>,
    chunks: HashSet<Hash>,
}

struct Checker<'a> {
    db: &'a Connection,
    /// Objects already read and found intact.
    good: Objects,
}

impl Checker<'_> {
    /// Every object below `root`, each read and hash-checked once.
    fn unit(&mut self, root: Hash) -> Result<Objects> {
        let mut out = Objects::default();
        let mut stack = vec![root];
        while let Some(h) = stack.pop() {
            if !out.trees.insert(h) {
                continue;
            }
            let tree = get_tree(self.db, &h)?;
            self.good.trees.insert(h);
            for e in tree.entries {
                match (e.kind, e.hash) {
                    (Kind::Dir, Some(sub)) => stack.push(sub),
                    (Kind::File, Some(c)) => {
                        let ext = content::extents(self.db, &c, e.size)?;
                        if e.size as usize > objects::CHUNK_SIZE {
                            out.contents.insert(c);
                        }
                        for &(_, ch) in &ext.list {
                            if ch == HOLE
                                || !out.chunks.insert(ch)
                                || self.good.chunks.contains(&ch)
                            {
                                continue;
                            }
                            get_chunk(self.db, &ch)?;
                            self.good.chunks.insert(ch);
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(out)
    }
}

/// The stored bytes of tree `h` (from the vault, or a scratch tree of a live state).
fn tree_bytes(db: &Connection, h: &Hash) -> Result<Vec<u8>> {
    let data: Option<Vec<u8>> = db
        .prepare_cached("SELECT data FROM tree WHERE hash = ?1")?
        .query_row([&h.0[..]], |r| r.get(0))
        .optional()?;
    match data {
        Some(d) => Ok(d),
        None => scratch::get(db, h)?
            .map(|(d, _, _)| d)
            .ok_or_else(|| Error::Internal(format!("tree {} vanished", h.to_hex()))),
    }
}

struct CheckpointRow {
    id: i64,
    name: String,
    root: Hash,
    parent: Option<i64>,
    created_at_ns: i64,
    origin: String,
    message: Option<String>,
}

fn checkpoints_of(db: &Connection, ws: i64) -> Result<Vec<CheckpointRow>> {
    let mut stmt = db.prepare(
        "SELECT id, name, root, parent, created_at_ns, origin, message FROM checkpoint
         WHERE workspace = ?1 ORDER BY id",
    )?;
    let rows = stmt.query_map([ws], |r| {
        let root: Vec<u8> = r.get(2)?;
        Ok(CheckpointRow {
            id: r.get(0)?,
            name: r.get(1)?,
            root: Hash::from_slice(&root).unwrap_or(HOLE),
            parent: r.get(3)?,
            created_at_ns: r.get(4)?,
            origin: r.get(5)?,
            message: r.get(6)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Recovers what is intact in the vault at `src_path` into a new vault at `dst_path`.
pub fn recover(src_path: &Path, dst_path: &Path) -> Result<RecoverReport> {
    if dst_path.exists() {
        return Err(Error::Exists(dst_path.display().to_string()));
    }
    let mut src = Store::open_read_unchecked(src_path)?;
    // Pages that fail their checksum are read as they are, as before page checksums:
    // a failing page would otherwise lose every row of the table it is in, and what is
    // copied is checked against its hashes anyway.
    crate::store::pagesum::verification(&src.conn, false);
    let mut report = RecoverReport::default();
    // What to copy, worked out on the source first.
    struct Plan {
        info: WorkspaceInfo,
        checkpoints: Vec<CheckpointRow>,
        head: Option<i64>,
        live: Option<Hash>,
    }
    let mut all = Objects::default();
    let plans = src.read(|db| {
        let mut checker = Checker {
            db,
            good: Objects::default(),
        };
        let mut plans = Vec::new();
        for info in list_workspaces(db)? {
            let head: Option<i64> = db
                .query_row("SELECT head FROM workspace WHERE id = ?1", [info.id], |r| {
                    r.get(0)
                })
                .unwrap_or(None);
            let mut kept = Vec::new();
            for cp in checkpoints_of(db, info.id).unwrap_or_default() {
                let what = format!("{}/{}", info.name, cp.name);
                match checker.unit(cp.root) {
                    Ok(o) => {
                        merge_into(&mut all, o);
                        report.recovered.push(what);
                        kept.push(cp);
                    }
                    Err(e) => report.lost.push(Lost {
                        what,
                        reason: why(e),
                    }),
                }
            }
            let what = format!("{} (live)", info.name);
            let live = Workspace::open(db, &info.name)
                .and_then(|ws| ws.live_root())
                .and_then(|root| checker.unit(root).map(|o| (root, o)));
            let live = match live {
                Ok((root, o)) => {
                    merge_into(&mut all, o);
                    report.recovered.push(what);
                    Some(root)
                }
                Err(e) => {
                    report.lost.push(Lost {
                        what,
                        reason: why(e),
                    });
                    None
                }
            };
            plans.push(Plan {
                info,
                checkpoints: kept,
                head,
                live,
            });
        }
        Ok(plans)
    })?;
    if plans.is_empty() {
        return Err(Error::Corrupt {
            path: src_path.into(),
            reason: "no workspace can be read".into(),
        });
    }
    report.trees = all.trees.len();
    report.contents = all.contents.len();
    report.chunks = all.chunks.len();

    let mut dst = Store::create(dst_path)?;
    let result = dst.write(|d| {
        let s = &src.conn;
        for h in &all.chunks {
            let data = get_chunk(s, h)?;
            objects::put_chunk_hashed(d, h, &data)?;
        }
        for h in &all.contents {
            let (size, blob): (i64, Vec<u8>) = s.query_row(
                "SELECT size, chunks FROM content WHERE hash = ?1",
                [&h.0[..]],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            d.execute(
                "INSERT OR IGNORE INTO content (hash, size, chunks) VALUES (?1, ?2, ?3)",
                params![&h.0[..], size, blob],
            )?;
        }
        for h in &all.trees {
            // Totals are left NULL: computed on first use.
            d.execute(
                "INSERT OR IGNORE INTO tree (hash, data) VALUES (?1, ?2)",
                params![&h.0[..], tree_bytes(s, h)?],
            )?;
        }
        // Main first, so forks find their source.
        let mut ordered: Vec<&Plan> = plans.iter().collect();
        ordered.sort_by_key(|p| (p.info.name != MAIN, p.info.id));
        let mut cp_ids: HashMap<i64, i64> = HashMap::new();
        let mut made: HashMap<String, WorkspaceInfo> = HashMap::new();
        for p in ordered {
            let root = p
                .live
                .or_else(|| p.checkpoints.last().map(|c| c.root))
                .or_else(|| {
                    p.head
                        .and_then(|h| cp_ids.get(&h))
                        .and_then(|id| {
                            d.query_row("SELECT root FROM checkpoint WHERE id = ?1", [id], |r| {
                                r.get::<_, Vec<u8>>(0)
                            })
                            .ok()
                        })
                        .and_then(|r| Hash::from_slice(&r).ok())
                });
            let parent = p
                .info
                .parent
                .as_ref()
                .and_then(|n| made.get(n))
                .map(|w| (w, p.info.parent_checkpoint.as_deref()));
            let info = create_workspace(d, &p.info.name, root, parent)?;
            for c in &p.checkpoints {
                d.execute(
                    "INSERT INTO checkpoint (workspace, name, root, parent, created_at_ns, origin, message)
                     VALUES (?1,?2,?3,?4,?5,?6,?7)",
                    params![
                        info.id,
                        c.name,
                        &c.root.0[..],
                        c.parent.and_then(|pid| cp_ids.get(&pid)),
                        c.created_at_ns,
                        c.origin,
                        c.message
                    ],
                )?;
                cp_ids.insert(c.id, d.last_insert_rowid());
            }
            let head = p
                .head
                .and_then(|h| cp_ids.get(&h).copied())
                .or_else(|| p.checkpoints.last().and_then(|c| cp_ids.get(&c.id).copied()));
            d.execute(
                "UPDATE workspace SET head = ?1 WHERE id = ?2",
                params![head, info.id],
            )?;
            made.insert(p.info.name.clone(), info);
        }
        if !made.contains_key(MAIN) {
            create_workspace(d, MAIN, None, None)?;
        }
        audit::append(
            d,
            Some(MAIN),
            audit::cli_actor(),
            "vault.recover",
            &serde_json::json!({"from": src_path, "recovered": report.recovered, "lost": report.lost}),
        )?;
        Ok(())
    });
    if let Err(e) = result {
        drop(dst);
        for suffix in ["", "-wal", "-shm"] {
            let mut p = dst_path.as_os_str().to_owned();
            p.push(suffix);
            let _ = std::fs::remove_file(p);
        }
        return Err(e);
    }
    Ok(report)
}

fn merge_into(all: &mut Objects, o: Objects) {
    all.trees.extend(o.trees);
    all.contents.extend(o.contents);
    all.chunks.extend(o.chunks);
}

/// What is wrong, without the advice a corrupt-vault error gives (this is the advice).
fn why(e: Error) -> String {
    match e {
        Error::Corrupt { reason, .. } => reason,
        other => other.to_string(),
    }
}
