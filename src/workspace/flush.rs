//! Turning the live layer into trees (flush) and grafting trees into it.

use std::collections::HashMap;

use rusqlite::params;

use super::{Inode, ROOT_INO, Workspace};
use crate::error::{Error, Result};
use crate::store::objects::{
    DirAttrs, Entry, Hash, Kind, Tree, Xattrs, get_tree, put_tree, put_tree_scratch,
};
use crate::store::{counter_take, now_ns};

fn entry_of(
    name: Vec<u8>,
    i: &Inode,
    hash: Option<Hash>,
    link_group: u64,
    has_links: bool,
    xattrs: Xattrs,
) -> Entry {
    Entry {
        name,
        kind: i.kind,
        mode: i.mode,
        uid: i.uid,
        gid: i.gid,
        mtime_ns: i.mtime_ns,
        size: if i.kind == Kind::Dir { 0 } else { i.size },
        hash,
        target: i.target.clone(),
        rdev: i.rdev,
        link_group,
        has_links,
        xattrs,
    }
}

/// A directory being hashed by `flush_dir`: the entries made so far, the children still
/// to look at, and the child directory whose hash it waits for.
struct OpenDir {
    dir: Inode,
    children: std::vec::IntoIter<(Vec<u8>, Inode)>,
    xattrs: HashMap<u64, Xattrs>,
    entries: Vec<Entry>,
    any_links: bool,
    waiting: Option<(Vec<u8>, Inode, Xattrs)>,
}

impl OpenDir {
    fn push(&mut self, entry: Entry) {
        self.any_links |= entry.link_group != 0 || entry.has_links;
        self.entries.push(entry);
    }
}

/// Link groups given to hard-linked inodes during one flush.
#[derive(Default)]
struct Groups {
    /// inode -> its group.
    of: HashMap<u64, u64>,
    /// A dry run (`live_root`): nothing is written.
    dry: bool,
    /// Groups a dry run numbered without taking them from the counter.
    provisional: u64,
}

impl Workspace<'_> {
    /// Hashes every dirty directory bottom-up, stores the new trees, marks them clean and
    /// makes the result the workspace's base root. Costs O(dirty directories × entries).
    pub fn flush(&mut self) -> Result<Hash> {
        let root = self.get(ROOT_INO)?;
        let (hash, _) = match (root.dirty, root.hash) {
            (false, Some(h)) => (h, root.has_links),
            _ => self.flush_dir(root, &mut Groups::default())?,
        };
        if hash != self.info.base_root {
            self.db
                .prepare_cached("UPDATE workspace SET base_root = ?1 WHERE id = ?2")?
                .execute(params![&hash.0[..], self.info.id])?;
            self.info.base_root = hash;
        }
        Ok(hash)
    }

    /// The root hash of the live state without writing anything: what `flush` would
    /// return, with the trees it would store kept in the connection's scratch space
    /// (`store::scratch`) instead. For reads, which may have the vault open read-only.
    pub fn live_root(&self) -> Result<Hash> {
        let root = self.get(ROOT_INO)?;
        Ok(match (root.dirty, root.hash) {
            (false, Some(h)) => h,
            _ => {
                let mut groups = Groups {
                    dry: true,
                    ..Groups::default()
                };
                self.flush_dir(root, &mut groups)?.0
            }
        })
    }

    /// Hashes `dir` and every dirty directory below it, deepest first. A loop over an
    /// explicit stack, not recursion: a chain of thousands of directories (stress-ng's
    /// dirdeep goes past 5 000 through a mount) must not overflow a thread's stack.
    fn flush_dir(&self, dir: Inode, groups: &mut Groups) -> Result<(Hash, bool)> {
        let mut stack = vec![self.open_dir(dir)?];
        // The hash of the directory just finished, for the entry its parent waits on.
        let mut finished: Option<(Hash, bool)> = None;
        loop {
            let top = stack.last_mut().expect("a directory is open");
            if let Some((h, links)) = finished.take() {
                let (name, child, x) = top.waiting.take().expect("a parent waits");
                top.push(entry_of(name, &child, Some(h), 0, links, x));
            }
            let mut descend = None;
            while let Some((name, child)) = top.children.next() {
                let x = top.xattrs.get(&child.ino).cloned().unwrap_or_default();
                if child.kind == Kind::Dir {
                    if let (false, Some(h)) = (child.dirty, child.hash) {
                        top.push(entry_of(name, &child, Some(h), 0, child.has_links, x));
                        continue;
                    }
                    top.waiting = Some((name, child.clone(), x));
                    descend = Some(child);
                    break;
                }
                let group = self.link_group_of(&child, groups)?;
                top.push(entry_of(name, &child, child.hash, group, false, x));
            }
            if let Some(child) = descend {
                stack.push(self.open_dir(child)?);
                continue;
            }
            let done = stack.pop().expect("a directory is open");
            let r = self.store_dir(done, groups)?;
            if stack.is_empty() {
                return Ok(r);
            }
            finished = Some(r);
        }
    }

    /// A directory about to be hashed: its children and their extended attributes.
    fn open_dir(&self, dir: Inode) -> Result<OpenDir> {
        let children = self.children(dir.ino)?;
        let mut xattrs: HashMap<u64, Xattrs> = HashMap::new();
        let lo = children.iter().map(|(_, c)| c.ino).min();
        let hi = children.iter().map(|(_, c)| c.ino).max();
        if let (Some(lo), Some(hi)) = (lo, hi) {
            // One range scan (xattrs are rare) instead of a seek per child.
            let mut stmt = self.db.prepare_cached(
                "SELECT ino, name, value FROM xattr WHERE layer = ?1 AND ino BETWEEN ?2 AND ?3 ORDER BY ino, name",
            )?;
            let mut rows = stmt.query(params![self.layer(), lo as i64, hi as i64])?;
            while let Some(r) = rows.next()? {
                xattrs
                    .entry(r.get::<_, i64>(0)? as u64)
                    .or_default()
                    .push((r.get(1)?, r.get(2)?));
            }
        }
        Ok(OpenDir {
            entries: Vec::with_capacity(children.len()),
            children: children.into_iter(),
            dir,
            xattrs,
            any_links: false,
            waiting: None,
        })
    }

    /// The link group of a file entry: 0 for a single link, else the group its inode has
    /// or gets (numbered once per flush, or provisionally in a dry run).
    fn link_group_of(&self, child: &Inode, groups: &mut Groups) -> Result<u64> {
        if child.nlink <= 1 {
            return Ok(0);
        }
        if let Some(g) = groups.of.get(&child.ino) {
            return Ok(*g);
        }
        let g = if child.link_group != 0 {
            child.link_group
        } else if groups.dry {
            // The numbers a flush would take, not taken.
            let next = crate::store::meta_get(self.db, "next_link_group")?.unwrap_or(1) as u64;
            groups.provisional += 1;
            next + groups.provisional - 1
        } else {
            let g = counter_take(self.db, "next_link_group", 1)? as u64;
            self.db
                .prepare_cached("UPDATE inode SET link_group = ?3 WHERE layer = ?1 AND ino = ?2")?
                .execute(params![self.layer(), child.ino as i64, g as i64])?;
            self.db
                .prepare_cached(
                    "INSERT OR REPLACE INTO linkgroup (layer, grp, ino) VALUES (?1, ?2, ?3)",
                )?
                .execute(params![self.layer(), g as i64, child.ino as i64])?;
            g
        };
        groups.of.insert(child.ino, g);
        Ok(g)
    }

    /// Stores the tree of a directory whose entries are all known, and marks it clean.
    fn store_dir(&self, d: OpenDir, groups: &Groups) -> Result<(Hash, bool)> {
        let root_attrs = if d.dir.ino == ROOT_INO {
            Some(DirAttrs {
                mode: d.dir.mode,
                uid: d.dir.uid,
                gid: d.dir.gid,
                mtime_ns: d.dir.mtime_ns,
                xattrs: self.xattrs(ROOT_INO)?,
            })
        } else {
            None
        };
        let tree = Tree {
            root_attrs,
            entries: d.entries,
        };
        if groups.dry {
            return Ok((put_tree_scratch(self.db, &tree)?, d.any_links));
        }
        let hash = put_tree(self.db, &tree)?;
        self.db
            .prepare_cached("UPDATE inode SET hash = ?3, dirty = 0, has_links = ?4 WHERE layer = ?1 AND ino = ?2")?
            .execute(params![self.layer(), d.dir.ino as i64, &hash.0[..], d.any_links])?;
        Ok((hash, d.any_links))
    }

    /// Inserts a stored tree entry under `parent` as `name` (import, copy, per-path
    /// restore). Directories arrive unmaterialized, so grafting a whole tree costs O(1)
    /// unless it holds hard links, whose groups are renumbered to stay unique.
    pub fn graft(&self, parent: &Inode, name: &[u8], entry: &Entry) -> Result<Inode> {
        super::nodes::check_name(name)?;
        if self.lookup(parent, name)?.is_some() {
            return Err(Error::Exists(crate::names::escape(name)));
        }
        if entry.kind != Kind::Dir {
            self.check_file_size(entry.size)?;
            self.charge(1, entry.size as i64)?;
        } else if self.budget.is_some()
            && let Some(h) = entry.hash
        {
            let u = crate::store::objects::tree_usage(self.db, &h)?;
            self.charge(u.files as i64, u.bytes as i64)?;
        }
        let mut entry = entry.clone();
        entry.name = name.to_vec();
        if entry.link_group != 0 || entry.has_links {
            let mut map = HashMap::new();
            entry = renumber_links(self.db, &entry, &mut map)?;
            self.reopen_links()?;
        }
        let ino = self.alloc_inos(1)?;
        let mut inode = Inode::from_entry(ino, &entry);
        inode.link_group = 0;
        inode.ctime_ns = now_ns();
        super::insert_inode(self.db, self.layer(), &inode)?;
        for (xn, xv) in &entry.xattrs {
            self.set_xattr_raw(ino, xn, xv)?;
        }
        self.insert_dentry(parent.ino, name, ino)?;
        if entry.kind == Kind::Dir {
            self.dir_links_changed(parent.ino, 1)?;
        }
        self.mark_dirty(parent.ino)?;
        Ok(inode)
    }

    fn set_xattr_raw(&self, ino: u64, name: &[u8], value: &[u8]) -> Result<()> {
        self.db
            .prepare_cached(
                "INSERT OR REPLACE INTO xattr (layer, ino, name, value) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![self.layer(), ino as i64, name, value])?;
        Ok(())
    }

    /// The entry a live inode would have in a tree, flushing it first if it is a dirty dir.
    pub fn entry_for(&self, name: &[u8], inode: &Inode) -> Result<Entry> {
        let x = self.xattrs(inode.ino)?;
        if inode.kind == Kind::Dir {
            let (h, links) = match (inode.dirty, inode.hash) {
                (false, Some(h)) => (h, inode.has_links),
                _ => self.flush_dir(inode.clone(), &mut Groups::default())?,
            };
            return Ok(entry_of(name.to_vec(), inode, Some(h), 0, links, x));
        }
        // A copy of one hard link is a separate file: no group.
        Ok(entry_of(name.to_vec(), inode, inode.hash, 0, false, x))
    }
}

/// Gives every link group inside `entry` a fresh vault-wide number (shared via `map`), so
/// a copied or restored subtree never joins links that live elsewhere in the tree. The
/// directories on the way down are an explicit stack (a tree can be deeper than the call
/// stack would take); numbers are given in the same order as a depth-first walk.
pub fn renumber_links(
    db: &rusqlite::Connection,
    entry: &Entry,
    map: &mut HashMap<u64, u64>,
) -> Result<Entry> {
    let mut renumber = |e: &mut Entry| -> Result<()> {
        if e.link_group != 0 {
            let next = match map.get(&e.link_group) {
                Some(g) => *g,
                None => {
                    let g = counter_take(db, "next_link_group", 1)? as u64;
                    map.insert(e.link_group, g);
                    g
                }
            };
            e.link_group = next;
        }
        Ok(())
    };
    let walks_into = |e: &Entry| e.kind == Kind::Dir && e.has_links;
    let tree_of = |e: &Entry| -> Result<crate::store::objects::Tree> {
        let hash = e
            .hash
            .ok_or_else(|| Error::Internal("directory entry without tree".into()))?;
        get_tree(db, &hash)
    };
    // A directory being renumbered: its entry, its tree, and the next child to do.
    struct Level {
        entry: Entry,
        tree: crate::store::objects::Tree,
        next: usize,
    }
    let mut e = entry.clone();
    renumber(&mut e)?;
    if !walks_into(&e) {
        return Ok(e);
    }
    let mut stack = vec![Level {
        tree: tree_of(&e)?,
        entry: e,
        next: 0,
    }];
    loop {
        let top = stack.last_mut().expect("a level");
        if top.next < top.tree.entries.len() {
            let i = top.next;
            top.next += 1;
            let child = &mut top.tree.entries[i];
            renumber(child)?;
            if walks_into(child) {
                let c = child.clone();
                stack.push(Level {
                    tree: tree_of(&c)?,
                    entry: c,
                    next: 0,
                });
            }
            continue;
        }
        let mut done = stack.pop().expect("a level");
        done.entry.hash = Some(put_tree(db, &done.tree)?);
        match stack.last_mut() {
            // The parent's child just finished is the one before its `next`.
            Some(parent) => parent.tree.entries[parent.next - 1] = done.entry,
            None => return Ok(done.entry),
        }
    }
}

/// Follows `path` components through stored trees from `root`; `None` if absent.
pub fn entry_at(
    db: &rusqlite::Connection,
    root: &Hash,
    comps: &[Vec<u8>],
) -> Result<Option<Entry>> {
    let mut tree = get_tree(db, root)?;
    for (i, c) in comps.iter().enumerate() {
        let Ok(pos) = tree.entries.binary_search_by(|e| e.name.as_slice().cmp(c)) else {
            return Ok(None);
        };
        let e = tree.entries.swap_remove(pos);
        if i + 1 == comps.len() {
            return Ok(Some(e));
        }
        if e.kind != Kind::Dir {
            return Ok(None);
        }
        tree = get_tree(db, e.hash.as_ref().unwrap())?;
    }
    // The root itself, described as a directory entry.
    let a = tree.root_attrs.clone().unwrap_or(DirAttrs {
        mode: 0o755,
        uid: 0,
        gid: 0,
        mtime_ns: 0,
        xattrs: vec![],
    });
    let has_links = tree
        .entries
        .iter()
        .any(|e| e.link_group != 0 || e.has_links);
    Ok(Some(a.root_entry(Some(*root), has_links)))
}
