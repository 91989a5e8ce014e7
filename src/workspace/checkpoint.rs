//! Checkpoints, restore and fork.

use rusqlite::{OptionalExtension, Row, params};
use serde::Serialize;

use super::{Workspace, WorkspaceInfo, create_workspace, flush::entry_at, new_layer, path};
use crate::error::{Error, Result};
use crate::store::now_ns;
use crate::store::objects::{Hash, Kind};

#[derive(Clone, Debug, Serialize)]
pub struct Checkpoint {
    pub id: i64,
    pub name: String,
    pub workspace: String,
    #[serde(serialize_with = "super::ser_hash")]
    pub root: Hash,
    pub parent: Option<String>,
    pub created_at_ns: i64,
    pub origin: String,
    pub message: Option<String>,
}

/// What `save` did, for reporting.
#[derive(Clone, Debug, Serialize)]
pub struct CheckpointSummary {
    pub checkpoint: Checkpoint,
    /// False when the live state equalled the previous checkpoint.
    pub changed: bool,
}

const CP_COLS: &str = "c.id, c.name, w.name, c.root, (SELECT p.name FROM checkpoint p WHERE p.id = c.parent), c.created_at_ns, c.origin, c.message";

/// Origins of the checkpoints avfs takes on its own, around runs (`exec`, `shell`) and
/// before a restore or merge replaces unsaved changes (`auto`); every other checkpoint
/// was saved by a person or an agent (`checkpoint save`, a merge, a fork's base).
pub const TAKEN_BY_AVFS: &[&str] = &["exec", "shell", "auto"];

/// `anc(id, depth)`: the head of workspace `?1` (depth 0) and the checkpoints it
/// descends from, following `parent` (into the parent workspace for a fork).
const ANCESTRY: &str = "WITH RECURSIVE anc(id, depth) AS (
    SELECT head, 0 FROM workspace WHERE id = ?1 AND head IS NOT NULL
    UNION
    SELECT c.parent, anc.depth + 1 FROM checkpoint c JOIN anc ON c.id = anc.id
    WHERE c.parent IS NOT NULL AND anc.depth < 100000)";

fn cp_from_row(r: &Row) -> rusqlite::Result<Checkpoint> {
    let root: Vec<u8> = r.get(3)?;
    Ok(Checkpoint {
        id: r.get(0)?,
        name: r.get(1)?,
        workspace: r.get(2)?,
        root: Hash::from_slice(&root).unwrap_or(crate::store::objects::HOLE),
        parent: r.get(4)?,
        created_at_ns: r.get(5)?,
        origin: r.get(6)?,
        message: r.get(7)?,
    })
}

pub fn validate_checkpoint_name(name: &str) -> Result<()> {
    if name == "live" || name.starts_with('(') {
        return Err(Error::InvalidArgument(
            name.into(),
            "\"live\" and names starting with '(' are reserved".into(),
        ));
    }
    if name.is_empty() || name.len() > 200 || name.chars().any(|c| c.is_control() || c == '/') {
        return Err(Error::InvalidArgument(
            name.into(),
            "checkpoint names are 1-200 characters, no '/' or control characters".into(),
        ));
    }
    Ok(())
}

fn generated_name(db: &rusqlite::Connection) -> Result<String> {
    let next: i64 = db.query_row("SELECT COALESCE(MAX(id), 0) + 1 FROM checkpoint", [], |r| {
        r.get(0)
    })?;
    let secs = now_ns() / 1_000_000_000;
    let (y, mo, d, h, mi, s) = crate::util::civil_from_unix(secs);
    Ok(format!("cp-{y:04}{mo:02}{d:02}-{h:02}{mi:02}{s:02}-{next}"))
}

impl Workspace<'_> {
    pub fn checkpoints(&self) -> Result<Vec<Checkpoint>> {
        let mut stmt = self.db.prepare_cached(&format!(
            "SELECT {CP_COLS} FROM checkpoint c JOIN workspace w ON w.id = c.workspace WHERE c.workspace = ?1 ORDER BY c.id"
        ))?;
        let rows = stmt.query_map([self.info.id], cp_from_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The checkpoint `name` means here: one of this workspace's own, else the nearest of
    /// that name in its history (following parents from the head), which in a fork reaches
    /// the checkpoint it was forked from and what that descends from. So `diff base`,
    /// `cat --at base` and `checkpoint restore base` work in a fork whose head is `base`.
    pub fn find_checkpoint(&self, name: &str) -> Result<Checkpoint> {
        if let Some(cp) = self.own_checkpoint(name)? {
            return Ok(cp);
        }
        self.db
            .prepare_cached(&format!(
                "{ANCESTRY} SELECT {CP_COLS} FROM anc JOIN checkpoint c ON c.id = anc.id
                 JOIN workspace w ON w.id = c.workspace
                 WHERE c.name = ?2 ORDER BY anc.depth LIMIT 1"
            ))?
            .query_row(params![self.info.id, name], cp_from_row)
            .optional()?
            .ok_or_else(|| Error::NoSuchCheckpoint(name.into()))
    }

    /// One of this workspace's own checkpoints (the names it may not reuse, the ones it
    /// may delete).
    pub fn own_checkpoint(&self, name: &str) -> Result<Option<Checkpoint>> {
        Ok(self
            .db
            .prepare_cached(&format!(
                "SELECT {CP_COLS} FROM checkpoint c JOIN workspace w ON w.id = c.workspace WHERE c.workspace = ?1 AND c.name = ?2"
            ))?
            .query_row(params![self.info.id, name], cp_from_row)
            .optional()?)
    }

    /// The checkpoint the live state descends from: the last saved or restored one, or
    /// for a fork the checkpoint it was forked from.
    pub fn head(&self) -> Result<Option<Checkpoint>> {
        Ok(self
            .db
            .prepare_cached(&format!(
                "SELECT {CP_COLS} FROM checkpoint c JOIN workspace w ON w.id = c.workspace
                 WHERE c.id = (SELECT head FROM workspace WHERE id = ?1)"
            ))?
            .query_row([self.info.id], cp_from_row)
            .optional()?)
    }

    /// The newest checkpoint the live state descends from that a person or an agent saved
    /// (not one avfs took by itself, see [`TAKEN_BY_AVFS`]): what `avfs diff` compares with.
    pub fn last_saved(&self) -> Result<Option<Checkpoint>> {
        let skip = serde_json::to_string(TAKEN_BY_AVFS).unwrap_or_default();
        Ok(self
            .db
            .prepare_cached(&format!(
                "{ANCESTRY} SELECT {CP_COLS} FROM anc JOIN checkpoint c ON c.id = anc.id
                 JOIN workspace w ON w.id = c.workspace
                 WHERE c.origin NOT IN (SELECT value FROM json_each(?2))
                 ORDER BY anc.depth LIMIT 1"
            ))?
            .query_row(params![self.info.id, skip], cp_from_row)
            .optional()?)
    }

    /// Saves the live state as a named checkpoint. Costs what changed since the last flush.
    pub fn checkpoint(
        &mut self,
        name: Option<&str>,
        message: Option<&str>,
        origin: &str,
    ) -> Result<CheckpointSummary> {
        let name = match name {
            Some(n) => {
                validate_checkpoint_name(n)?;
                n.to_string()
            }
            None => generated_name(self.db)?,
        };
        if self.own_checkpoint(&name)?.is_some() {
            return Err(Error::CheckpointExists(name));
        }
        let root = self.flush()?;
        let head = self.head()?;
        let changed = head.as_ref().is_none_or(|h| h.root != root);
        self.db
            .prepare_cached(
                "INSERT INTO checkpoint (workspace, name, root, parent, created_at_ns, origin, message, audit_head)
                 VALUES (?1,?2,?3,?4,?5,?6,?7, (SELECT MAX(id) FROM audit))",
            )?
            .execute(params![self.info.id, name, &root.0[..], head.as_ref().map(|h| h.id), now_ns(), origin, message])?;
        let id = self.db.last_insert_rowid();
        self.db
            .prepare_cached("UPDATE workspace SET head = ?1 WHERE id = ?2")?
            .execute(params![id, self.info.id])?;
        Ok(CheckpointSummary {
            checkpoint: self
                .own_checkpoint(&name)?
                .ok_or_else(|| Error::NoSuchCheckpoint(name.clone()))?,
            changed,
        })
    }

    /// Records, in this fork, the state `root` it had when a merge into workspace `target`
    /// made the target's checkpoint stamped `stamp` (`merge-FORK-STAMP`): a checkpoint
    /// `merged-into-TARGET-STAMP` (origin `merge`) that does not move the fork's head.
    pub fn record_merge_point(&self, target: &str, stamp: i64, root: &Hash) -> Result<Checkpoint> {
        let name = format!("merged-into-{target}-{stamp}");
        validate_checkpoint_name(&name)?;
        let message = format!("{} as merged into {target}", self.info.name);
        self.db
            .prepare_cached(
                "INSERT INTO checkpoint (workspace, name, root, parent, created_at_ns, origin, message, audit_head)
                 VALUES (?1, ?2, ?3, (SELECT head FROM workspace WHERE id = ?1), ?4, 'merge', ?5,
                         (SELECT MAX(id) FROM audit))",
            )?
            .execute(params![self.info.id, name, &root.0[..], now_ns(), message])?;
        self.own_checkpoint(&name)?
            .ok_or(Error::NoSuchCheckpoint(name))
    }

    /// This fork's merge points into `target`, newest first, with their stamps.
    pub fn merge_points(&self, target: &str) -> Result<Vec<(Checkpoint, i64)>> {
        let prefix = format!("merged-into-{target}-");
        let mut stmt = self.db.prepare_cached(&format!(
            "SELECT {CP_COLS} FROM checkpoint c JOIN workspace w ON w.id = c.workspace
             WHERE c.workspace = ?1 AND c.origin = 'merge'
               AND substr(c.name, 1, length(?2)) = ?2
             ORDER BY c.id DESC"
        ))?;
        let rows = stmt.query_map(params![self.info.id, prefix], cp_from_row)?;
        let mut out = Vec::new();
        for cp in rows {
            let cp = cp?;
            if let Ok(stamp) = cp.name[prefix.len()..].parse() {
                out.push((cp, stamp));
            }
        }
        Ok(out)
    }

    /// Is checkpoint `id` the head or one of the checkpoints the head descends from?
    pub fn descends_from(&self, id: i64) -> Result<bool> {
        Ok(self
            .db
            .prepare_cached(&format!(
                "{ANCESTRY} SELECT EXISTS (SELECT 1 FROM anc WHERE id = ?2)"
            ))?
            .query_row(params![self.info.id, id], |r| r.get(0))?)
    }

    pub fn delete_checkpoint(&self, name: &str) -> Result<Checkpoint> {
        let cp = self
            .own_checkpoint(name)?
            .ok_or_else(|| Error::NoSuchCheckpoint(name.into()))?;
        self.db.execute("UPDATE checkpoint SET parent = (SELECT parent FROM checkpoint WHERE id = ?1) WHERE parent = ?1", [cp.id])?;
        self.db.execute("UPDATE workspace SET head = (SELECT parent FROM checkpoint WHERE id = ?1) WHERE head = ?1", [cp.id])?;
        self.db
            .execute("DELETE FROM checkpoint WHERE id = ?1", [cp.id])?;
        Ok(cp)
    }

    /// Has the live state changed since the head checkpoint?
    pub fn is_modified(&mut self) -> Result<bool> {
        let root = self.flush()?;
        Ok(self.head()?.is_none_or(|h| h.root != root))
    }

    /// Makes `cp` the live state in O(1): a new, empty live layer on its root. The old
    /// layer's rows are dropped; inode numbers are never reused, so stale handles fail.
    pub fn restore(&mut self, cp: &Checkpoint) -> Result<()> {
        let old = self.info.layer;
        let layer = new_layer(self.db, self.info.id, &cp.root)?;
        self.db
            .prepare_cached(
                "UPDATE workspace SET layer = ?1, base_root = ?2, head = ?3 WHERE id = ?4",
            )?
            .execute(params![layer, &cp.root.0[..], cp.id, self.info.id])?;
        self.db
            .prepare_cached("UPDATE layer SET dead = 1 WHERE id = ?1")?
            .execute([old])?;
        self.info.layer = layer;
        self.info.base_root = cp.root;
        // The old layer's rows are deleted later (`purge_dead_layers`, run after the
        // command and by gc), so restore does not cost what was touched before it.
        Ok(())
    }

    /// Makes `root` the live state in O(1) without moving the head checkpoint: the result
    /// of a run, taken in while nothing else changed the workspace (see `apply_diff`).
    pub fn set_root(&mut self, root: &Hash) -> Result<()> {
        let old = self.info.layer;
        let layer = new_layer(self.db, self.info.id, root)?;
        self.db
            .prepare_cached("UPDATE workspace SET layer = ?1, base_root = ?2 WHERE id = ?3")?
            .execute(params![layer, &root.0[..], self.info.id])?;
        self.db
            .prepare_cached("UPDATE layer SET dead = 1 WHERE id = ?1")?
            .execute([old])?;
        self.info.layer = layer;
        self.info.base_root = *root;
        Ok(())
    }

    /// Applies what differs between the trees `from` and `to` to the live state, entry by
    /// entry: a run's changes taken in while the workspace changed meanwhile (an edit in
    /// a live mount). Where both changed the same entry, the run's version wins.
    pub fn apply_diff(&mut self, from: &Hash, to: &Hash) -> Result<()> {
        let root = self.get(super::ROOT_INO)?;
        let (a, b) = (
            crate::store::objects::get_tree(self.db, from)?,
            crate::store::objects::get_tree(self.db, to)?,
        );
        if a.root_attrs != b.root_attrs
            && let Some(attrs) = &b.root_attrs
        {
            self.set_dir_attrs(
                super::ROOT_INO,
                attrs.mode,
                attrs.uid,
                attrs.gid,
                attrs.mtime_ns,
                &attrs.xattrs,
            )?;
        }
        self.apply_entries(&root, a.entries, b.entries)
    }

    fn set_dir_attrs(
        &self,
        ino: u64,
        mode: u32,
        uid: u32,
        gid: u32,
        mtime_ns: i64,
        xattrs: &[(Vec<u8>, Vec<u8>)],
    ) -> Result<()> {
        self.setattr(
            ino,
            &super::SetAttr {
                mode: Some(mode),
                uid: Some(uid),
                gid: Some(gid),
                size: None,
                mtime_ns: Some(mtime_ns),
                atime_ns: None,
            },
        )?;
        for (k, _) in self.xattrs(ino)? {
            if !xattrs.iter().any(|(n, _)| *n == k) {
                self.remove_xattr(ino, &k)?;
            }
        }
        for (k, v) in xattrs {
            self.set_xattr(ino, k, v)?;
        }
        Ok(())
    }

    /// Makes the live directory `dir` hold `new` where it holds `old` (two versions of its
    /// tree), descending only into directories that differ. The directories on the way
    /// down are an explicit stack, so a restore of a tree deeper than the call stack would
    /// take works; the order is a depth-first walk by name.
    fn apply_entries(
        &self,
        dir: &super::Inode,
        old: Vec<crate::store::objects::Entry>,
        new: Vec<crate::store::objects::Entry>,
    ) -> Result<()> {
        use crate::store::objects::Entry;
        use std::collections::BTreeMap;
        type Pair = (Vec<u8>, Option<Entry>, Option<Entry>);
        // The names of a directory that differ, the first last (for `pop`).
        let differing = |old: Vec<Entry>, new: Vec<Entry>| -> Vec<Pair> {
            let mut both: BTreeMap<Vec<u8>, (Option<Entry>, Option<Entry>)> = BTreeMap::new();
            for e in old {
                let name = e.name.clone();
                both.entry(name).or_default().0 = Some(e);
            }
            for e in new {
                let name = e.name.clone();
                both.entry(name).or_default().1 = Some(e);
            }
            let mut out: Vec<Pair> = both
                .into_iter()
                .filter(|(_, (a, b))| a != b)
                .map(|(n, (a, b))| (n, a, b))
                .collect();
            out.reverse();
            out
        };
        let mut stack = vec![(dir.clone(), differing(old, new))];
        while let Some((dir, names)) = stack.last_mut() {
            let Some((name, a, b)) = names.pop() else {
                stack.pop();
                continue;
            };
            let dir = dir.clone();
            let name = &name;
            let live = self.lookup(&dir, name)?;
            match (a.as_ref(), b.as_ref()) {
                (Some(a), Some(b)) if a.kind == Kind::Dir && b.kind == Kind::Dir => match live {
                    Some(l) if l.kind == Kind::Dir => {
                        self.set_dir_attrs(l.ino, b.mode, b.uid, b.gid, b.mtime_ns, &b.xattrs)?;
                        if a.hash != b.hash {
                            let (ta, tb) = (
                                crate::store::objects::get_tree(self.db, a.hash.as_ref().unwrap())?,
                                crate::store::objects::get_tree(self.db, b.hash.as_ref().unwrap())?,
                            );
                            let l = self.get(l.ino)?;
                            stack.push((l, differing(ta.entries, tb.entries)));
                        }
                    }
                    other => {
                        if other.is_some() {
                            self.remove_tree(&dir, name)?;
                        }
                        let d = self.get(dir.ino)?;
                        self.graft(&d, name, b)?;
                    }
                },
                (_, None) => {
                    if live.is_some() {
                        self.remove_tree(&dir, name)?;
                    }
                }
                (_, Some(b)) => {
                    if live.is_some() {
                        self.remove_tree(&dir, name)?;
                    }
                    let d = self.get(dir.ino)?;
                    self.graft(&d, name, b)?;
                }
            }
        }
        Ok(())
    }

    /// Restores one path (file or subtree) to its state in `cp`; a path absent there is removed.
    pub fn restore_path(&mut self, comps: &[Vec<u8>], cp: &Checkpoint) -> Result<bool> {
        let Some((name, parents)) = comps.split_last() else {
            self.restore(cp)?;
            return Ok(true);
        };
        let entry = entry_at(self.db, &cp.root, comps)?;
        let mut dir = self.get(super::ROOT_INO)?;
        for c in parents {
            dir = match self.lookup(&dir, c)? {
                Some(d) if d.kind == Kind::Dir => d,
                Some(_) => return Err(Error::NotADirectory(path::display(comps))),
                None => match &entry {
                    Some(_) => self.create(&dir, c, super::NewNode::new(Kind::Dir, 0o755))?,
                    None => return Ok(false),
                },
            };
        }
        let existed = self.lookup(&dir, name)?.is_some();
        if existed {
            self.remove_tree(&dir, name)?;
            dir = self.get(dir.ino)?;
        }
        match entry {
            Some(e) => {
                self.graft(&dir, name, &e)?;
                Ok(true)
            }
            None => Ok(existed),
        }
    }

    /// `stem`, or `stem-2`, `stem-3`... if this workspace has a checkpoint of that name.
    fn unused_name(&self, stem: &str) -> Result<String> {
        if validate_checkpoint_name(stem).is_err() {
            return generated_name(self.db);
        }
        for n in 1..1000 {
            let name = match n {
                1 => stem.to_string(),
                n => format!("{stem}-{n}"),
            };
            if self.own_checkpoint(&name)?.is_none() {
                return Ok(name);
            }
        }
        generated_name(self.db)
    }

    /// Creates a workspace sharing all content with this one, in O(1) of its size. Without
    /// `from` it starts at the head when that is a checkpoint someone saved and the live
    /// state has not moved on; otherwise at a checkpoint taken for it, `fork-NEW_NAME`
    /// (`-2`, `-3`... when taken): a base taken for one fork is never another's, so no
    /// fork is shown as forked at a checkpoint named after a different one.
    pub fn fork(&mut self, new_name: &str, from: Option<&Checkpoint>) -> Result<WorkspaceInfo> {
        let base = match from {
            Some(cp) => cp.clone(),
            None => {
                let reusable = match self.head()? {
                    Some(h) if h.origin != "fork" && !self.is_modified()? => Some(h),
                    _ => None,
                };
                if let Some(head) = reusable {
                    head
                } else {
                    let name = self.unused_name(&format!("fork-{new_name}"))?;
                    self.checkpoint(
                        Some(&name),
                        Some(&format!("taken to fork {new_name}")),
                        "fork",
                    )?
                    .checkpoint
                }
            }
        };
        let info = create_workspace(
            self.db,
            new_name,
            Some(base.root),
            Some((&self.info, Some(&base.name))),
        )?;
        self.db
            .prepare_cached("UPDATE workspace SET head = ?1 WHERE id = ?2")?
            .execute(params![base.id, info.id])?;
        Ok(info)
    }
}
