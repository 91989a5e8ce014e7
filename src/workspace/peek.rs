//! Reading a workspace without changing it. The live layer holds rows only for what was
//! looked at or changed; a read that reaches a directory the layer has not loaded reads
//! its stored tree instead of loading it, so `ls`, `cat`, `stat`, `tree` and the other
//! reads write nothing and work on a vault opened read-only.

use std::cell::RefCell;
use std::collections::HashMap;

use rusqlite::{OptionalExtension, params};

use super::path::{components, display, join_bytes};
use super::{Inode, ROOT_INO, Workspace};
use crate::error::{Error, Result};
use crate::store::objects::{self, Entry, Hash, Kind, Xattrs, get_tree};

const MAX_SYMLINK_HOPS: usize = 40;

/// A file or directory as a read sees it: a row of the live layer, or the entry of a
/// stored tree below a directory the live layer has not loaded.
#[derive(Clone, Debug)]
pub enum Node {
    Live(Inode),
    Stored(Entry),
}

impl Node {
    pub fn kind(&self) -> Kind {
        match self {
            Node::Live(i) => i.kind,
            Node::Stored(e) => e.kind,
        }
    }
    pub fn is_dir(&self) -> bool {
        self.kind() == Kind::Dir
    }
    /// Permission bits.
    pub fn mode(&self) -> u32 {
        match self {
            Node::Live(i) => i.mode & 0o7777,
            Node::Stored(e) => e.mode & 0o7777,
        }
    }
    pub fn uid(&self) -> u32 {
        match self {
            Node::Live(i) => i.uid,
            Node::Stored(e) => e.uid,
        }
    }
    pub fn gid(&self) -> u32 {
        match self {
            Node::Live(i) => i.gid,
            Node::Stored(e) => e.gid,
        }
    }
    pub fn size(&self) -> u64 {
        match self {
            Node::Live(i) => i.size,
            Node::Stored(e) if e.kind == Kind::Dir => 0,
            Node::Stored(e) => e.size,
        }
    }
    pub fn mtime_ns(&self) -> i64 {
        match self {
            Node::Live(i) => i.mtime_ns,
            Node::Stored(e) => e.mtime_ns,
        }
    }
    /// A stored entry has no ctime of its own: loading it gives it its mtime.
    pub fn ctime_ns(&self) -> i64 {
        match self {
            Node::Live(i) => i.ctime_ns,
            Node::Stored(e) => e.mtime_ns,
        }
    }
    /// Content hash of a file, tree hash of a directory that has one.
    pub fn hash(&self) -> Option<Hash> {
        match self {
            Node::Live(i) => i.hash,
            Node::Stored(e) => e.hash,
        }
    }
    pub fn target(&self) -> Option<&[u8]> {
        match self {
            Node::Live(i) => i.target.as_deref(),
            Node::Stored(e) => e.target.as_deref(),
        }
    }
    /// The inode number, for what the live layer holds; a stored entry gets one only when
    /// something loads it.
    pub fn ino(&self) -> Option<u64> {
        match self {
            Node::Live(i) => Some(i.ino),
            Node::Stored(_) => None,
        }
    }
    /// The stored tree to read for a directory the live layer has not loaded.
    fn tree(&self) -> Result<Option<Hash>> {
        match self {
            Node::Live(i) if i.materialized => Ok(None),
            _ => self
                .hash()
                .map(Some)
                .ok_or_else(|| Error::Internal("clean directory without a tree".into())),
        }
    }
}

/// Read-only access to a workspace (see the module documentation).
pub struct Peek<'w, 'a> {
    ws: &'w Workspace<'a>,
    /// Names per link group in the live state's tree, counted on first need.
    links: RefCell<Option<HashMap<u64, u32>>>,
}

impl<'a> Workspace<'a> {
    pub fn peek(&self) -> Peek<'_, 'a> {
        Peek {
            ws: self,
            links: RefCell::new(None),
        }
    }
}

fn node_row(r: &rusqlite::Row, at: usize) -> rusqlite::Result<Inode> {
    Inode::from_row(r, at)
}

impl Peek<'_, '_> {
    pub fn root(&self) -> Result<Node> {
        Ok(Node::Live(self.ws.get(ROOT_INO)?))
    }

    /// The entry `name` of directory `dir`.
    pub fn child(&self, dir: &Node, name: &[u8]) -> Result<Option<Node>> {
        if !dir.is_dir() {
            return Err(Error::NotADirectory(crate::names::escape(name)));
        }
        match (dir, dir.tree()?) {
            (Node::Live(d), None) => Ok(self
                .ws
                .db
                .prepare_cached(concat!(
                    "SELECT ",
                    inode_cols!("i"),
                    " FROM dentry d JOIN inode i ON i.layer = d.layer AND i.ino = d.ino
                     WHERE d.layer = ?1 AND d.parent = ?2 AND d.name = ?3"
                ))?
                .query_row(params![self.ws.info.layer, d.ino as i64, name], |r| {
                    node_row(r, 0)
                })
                .optional()?
                .map(Node::Live)),
            (_, Some(h)) => {
                let mut tree = get_tree(self.ws.db, &h)?;
                Ok(tree
                    .entries
                    .binary_search_by(|e| e.name.as_slice().cmp(name))
                    .ok()
                    .map(|i| Node::Stored(tree.entries.swap_remove(i))))
            }
            _ => unreachable!("a stored directory always has a tree"),
        }
    }

    /// Resolves a path as `Workspace::resolve_full` does (symlinks in the middle always
    /// followed, the last one with `follow_last`, never above `/`), also returning the
    /// path after following symlinks. `None` when only the last component is missing.
    pub fn resolve_full(
        &self,
        comps: &[Vec<u8>],
        follow_last: bool,
    ) -> Result<Option<(Node, Vec<Vec<u8>>)>> {
        let mut path: Vec<Vec<u8>> = comps.to_vec();
        let mut hops = 0;
        'restart: loop {
            let mut cur = self.root()?;
            for i in 0..path.len() {
                let last = i + 1 == path.len();
                if !cur.is_dir() {
                    return Err(Error::NotADirectory(display(&path[..i])));
                }
                let Some(next) = self.child(&cur, &path[i])? else {
                    if last {
                        return Ok(None);
                    }
                    return Err(Error::NotFound(display(&path[..=i])));
                };
                if next.kind() == Kind::Symlink && (!last || follow_last) {
                    hops += 1;
                    if hops > MAX_SYMLINK_HOPS {
                        return Err(Error::SymlinkLoop(display(comps)));
                    }
                    let target = next.target().unwrap_or_default().to_vec();
                    let mut joined = if target.starts_with(b"/") {
                        Vec::new()
                    } else {
                        join_bytes(&path[..i])
                    };
                    joined.push(b'/');
                    joined.extend_from_slice(&target);
                    for rest in &path[i + 1..] {
                        joined.push(b'/');
                        joined.extend_from_slice(rest);
                    }
                    path = components(&joined)?;
                    continue 'restart;
                }
                cur = next;
            }
            return Ok(Some((cur, path)));
        }
    }

    pub fn resolve_existing(&self, comps: &[Vec<u8>], follow_last: bool) -> Result<Node> {
        self.resolve_full(comps, follow_last)?
            .map(|(n, _)| n)
            .ok_or_else(|| Error::NotFound(display(comps)))
    }

    /// Calls `f` with each entry of directory `dir`, in name-byte order, until it returns
    /// false. Entries are read one at a time (a cursor over the live layer's rows, or
    /// one decoded entry of the stored tree at a time), so a huge directory costs no
    /// memory per entry.
    pub fn list(&self, dir: &Node, f: &mut dyn FnMut(&[u8], Node) -> Result<bool>) -> Result<()> {
        if !dir.is_dir() {
            return Err(Error::NotADirectory(String::new()));
        }
        match (dir, dir.tree()?) {
            (Node::Live(d), None) => {
                let mut stmt = self.ws.db.prepare_cached(concat!(
                    "SELECT d.name, ",
                    inode_cols!("i"),
                    " FROM dentry d JOIN inode i ON i.layer = d.layer AND i.ino = d.ino
                     WHERE d.layer = ?1 AND d.parent = ?2 ORDER BY d.name"
                ))?;
                let mut rows = stmt.query(params![self.ws.info.layer, d.ino as i64])?;
                while let Some(r) = rows.next()? {
                    let name: Vec<u8> = r.get(0)?;
                    let inode = node_row(r, 1)?;
                    if !f(&name, Node::Live(inode))? {
                        break;
                    }
                }
                Ok(())
            }
            (_, Some(h)) => objects::visit_tree(self.ws.db, &h, &mut |e| {
                let name = std::mem::take(&mut e.name);
                let go = f(&name, Node::Stored(std::mem::replace(e, blank_entry())))?;
                Ok(go)
            }),
            _ => unreachable!("a stored directory always has a tree"),
        }
    }

    pub fn xattrs(&self, n: &Node) -> Result<Xattrs> {
        match n {
            Node::Live(i) => self.ws.xattrs(i.ino),
            Node::Stored(e) => Ok(e.xattrs.clone()),
        }
    }

    /// Bytes of a regular file.
    pub fn read(&self, n: &Node, offset: u64, len: usize) -> Result<Vec<u8>> {
        match n {
            Node::Live(i) => self.ws.read(i, offset, len),
            Node::Stored(e) => match e.kind {
                Kind::File => {
                    let h = e
                        .hash
                        .ok_or_else(|| Error::Internal("file without content".into()))?;
                    let ext = crate::store::content::extents(self.ws.db, &h, e.size)?;
                    crate::store::content::read_at(self.ws.db, &ext, offset, len)
                }
                Kind::Dir => Err(Error::IsADirectory(crate::names::escape(&e.name))),
                _ => Err(Error::InvalidArgument(
                    crate::names::escape(&e.name),
                    "not a regular file".into(),
                )),
            },
        }
    }

    /// The number of names of `n`. A stored member of a link group has as many as its
    /// group has members in the live state's tree (hashed once, without writing).
    pub fn nlink(&self, n: &Node) -> Result<u32> {
        match n {
            Node::Live(i) => Ok(i.nlink),
            Node::Stored(e) if e.link_group == 0 => Ok(1),
            Node::Stored(e) => {
                if self.links.borrow().is_none() {
                    let mut counts = HashMap::new();
                    count_links(self.ws.db, &self.ws.live_root()?, &mut counts)?;
                    *self.links.borrow_mut() = Some(counts);
                }
                Ok(self
                    .links
                    .borrow()
                    .as_ref()
                    .and_then(|c| c.get(&e.link_group).copied())
                    .unwrap_or(1)
                    .max(1))
            }
        }
    }
}

fn blank_entry() -> Entry {
    Entry {
        name: vec![],
        kind: Kind::File,
        mode: 0,
        uid: 0,
        gid: 0,
        mtime_ns: 0,
        size: 0,
        hash: None,
        target: None,
        rdev: 0,
        link_group: 0,
        has_links: false,
        xattrs: vec![],
    }
}

/// Counts the members of every link group below tree `h` (only directories that hold
/// one), with an explicit stack of trees so that depth costs no call stack.
fn count_links(db: &rusqlite::Connection, h: &Hash, counts: &mut HashMap<u64, u32>) -> Result<()> {
    let mut pending = vec![*h];
    while let Some(tree) = pending.pop() {
        for e in get_tree(db, &tree)?.entries {
            if e.link_group != 0 {
                *counts.entry(e.link_group).or_default() += 1;
            }
            if e.kind == Kind::Dir
                && e.has_links
                && let Some(sub) = e.hash
            {
                pending.push(sub);
            }
        }
    }
    Ok(())
}
