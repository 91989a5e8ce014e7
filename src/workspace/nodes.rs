//! Creating, linking, unlinking, renaming and changing attributes of live inodes.

use rusqlite::params;

use super::{Inode, Workspace};
use crate::error::{Error, Result};
use crate::store::now_ns;
use crate::store::objects::{Hash, Kind, validate_name};

/// What to create.
#[derive(Clone, Debug)]
pub struct NewNode {
    pub kind: Kind,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Content hash and size of a file.
    pub content: Option<(Hash, u64)>,
    pub target: Option<Vec<u8>>,
    pub rdev: u64,
    pub mtime_ns: Option<i64>,
}

impl NewNode {
    pub fn new(kind: Kind, mode: u32) -> NewNode {
        let (uid, gid) = super::current_uid_gid();
        NewNode {
            kind,
            mode,
            uid,
            gid,
            content: None,
            target: None,
            rdev: 0,
            mtime_ns: None,
        }
    }
}

/// Attribute changes; `None` leaves a field alone.
#[derive(Clone, Debug, Default)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub mtime_ns: Option<i64>,
    /// Kept in the live layer only (trees hold no access time).
    pub atime_ns: Option<i64>,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct RenameFlags {
    pub noreplace: bool,
    pub exchange: bool,
}

/// Room for one inode's extended attributes, as ext4 with 256-byte inodes and 4 KiB
/// blocks has it: an attribute takes 16 bytes plus its name (without the `user.` prefix)
/// and its value, each rounded up to 4 bytes; one attribute must fit in the attribute
/// block (4 096 bytes less a 32-byte header and a 4-byte end marker), and all of them in
/// that block plus the 92 bytes inside the inode. So 103 attributes of 16 bytes with
/// 5-byte names fit, or one value of 4 040 bytes, as on ext4; past that, ENOSPC.
pub const XATTR_BLOCK: u64 = 4096 - 32 - 4;
pub const XATTR_SPACE: u64 = XATTR_BLOCK + 92;

fn xattr_cost(name: &[u8], value_len: usize) -> u64 {
    let name = name.strip_prefix(b"user.").unwrap_or(name);
    16 + (name.len() as u64).next_multiple_of(4) + (value_len as u64).next_multiple_of(4)
}

pub fn check_name(name: &[u8]) -> Result<()> {
    validate_name(name).map_err(|why| {
        let shown = crate::names::escape(name);
        if name.len() > 255 {
            Error::NameTooLong(shown)
        } else {
            Error::InvalidName(format!("{shown} ({why})"))
        }
    })
}

impl Workspace<'_> {
    /// Updates a directory's mtime/ctime after its entries changed and marks it dirty.
    fn touch_dir(&self, dir: u64) -> Result<()> {
        let now = now_ns();
        self.db
            .prepare_cached(
                "UPDATE inode SET atime_ns = COALESCE(atime_ns, mtime_ns), mtime_ns = ?3, ctime_ns = ?3 WHERE layer = ?1 AND ino = ?2",
            )?
            .execute(params![self.layer(), dir as i64, now])?;
        // A dirty directory's ancestors are dirty too, so its own entry gets re-hashed.
        self.mark_dirty(dir)
    }

    pub fn create(&self, parent: &Inode, name: &[u8], node: NewNode) -> Result<Inode> {
        if self.lookup(parent, name)?.is_some() {
            check_name(name)?;
            return Err(Error::Exists(crate::names::escape(name)));
        }
        self.create_absent(parent, name, node)
    }

    /// `create` for a caller that has just looked `name` up in `parent` (in this
    /// transaction) and found nothing: saves the second lookup on the mount's hot path.
    pub fn create_absent(&self, parent: &Inode, name: &[u8], node: NewNode) -> Result<Inode> {
        check_name(name)?;
        if let (Kind::File, Some((_, size))) = (node.kind, node.content) {
            self.check_file_size(size)?;
        }
        match node.kind {
            Kind::Dir => {}
            Kind::File => self.charge(1, node.content.map_or(0, |(_, s)| s) as i64)?,
            Kind::Symlink => self.charge(1, node.target.as_ref().map_or(0, |t| t.len()) as i64)?,
            _ => self.charge(1, 0)?,
        }
        let now = now_ns();
        let ino = self.alloc_inos(1)?;
        let (hash, size) = match (node.kind, node.content) {
            (Kind::File, Some((h, s))) => (Some(h), s),
            (Kind::File, None) => (Some(crate::store::content::write_bytes(self.db, b"")?.0), 0),
            (Kind::Symlink, _) => (None, node.target.as_ref().map_or(0, |t| t.len() as u64)),
            _ => (None, 0),
        };
        let inode = Inode {
            ino,
            kind: node.kind,
            mode: node.mode & 0o7777,
            uid: node.uid,
            gid: node.gid,
            size,
            mtime_ns: node.mtime_ns.unwrap_or(now),
            ctime_ns: now,
            // An empty directory: itself and its "." entry.
            nlink: if node.kind == Kind::Dir { 2 } else { 1 },
            rdev: node.rdev,
            link_group: 0,
            hash,
            target: node.target,
            materialized: node.kind == Kind::Dir,
            dirty: node.kind == Kind::Dir,
            has_links: false,
            atime_ns: Some(node.mtime_ns.unwrap_or(now)),
        };
        super::insert_inode(self.db, self.layer(), &inode)?;
        self.insert_dentry(parent.ino, name, ino)?;
        if node.kind == Kind::Dir {
            self.dir_links_changed(parent.ino, 1)?;
        }
        self.touch_dir(parent.ino)?;
        Ok(inode)
    }

    /// Adds another name for an existing non-directory inode.
    pub fn link(&self, ino: u64, parent: &Inode, name: &[u8]) -> Result<Inode> {
        check_name(name)?;
        let mut inode = self.get(ino)?;
        if inode.kind == Kind::Dir {
            return Err(Error::Refused(
                "hard links to directories are not allowed".into(),
            ));
        }
        if self.lookup(parent, name)?.is_some() {
            return Err(Error::Exists(crate::names::escape(name)));
        }
        // A tree counts every name of a hard-linked file.
        self.charge(1, inode.size as i64)?;
        self.insert_dentry(parent.ino, name, ino)?;
        inode.nlink += 1;
        inode.ctime_ns = now_ns();
        self.put_inode(&inode)?;
        self.entry_changed(ino)?;
        self.touch_dir(parent.ino)?;
        Ok(inode)
    }

    /// Removes a non-directory name; the inode goes when its last name does.
    pub fn unlink(&self, parent: &Inode, name: &[u8]) -> Result<()> {
        let child = self
            .lookup(parent, name)?
            .ok_or_else(|| Error::NotFound(crate::names::escape(name)))?;
        if child.kind == Kind::Dir {
            return Err(Error::IsADirectory(crate::names::escape(name)));
        }
        self.delete_dentry(parent.ino, name)?;
        self.drop_name(child)?;
        self.touch_dir(parent.ino)
    }

    fn drop_name(&self, mut child: Inode) -> Result<()> {
        self.charge(-1, -(child.size as i64))?;
        let open = self.open_inos.is_some_and(|o| o.contains(&child.ino));
        if child.nlink <= 1 && open {
            child.nlink = 0;
            child.ctime_ns = now_ns();
            self.put_inode(&child)?;
        } else if child.nlink <= 1 {
            self.delete_inode(child.ino)?;
        } else {
            child.nlink -= 1;
            child.ctime_ns = now_ns();
            self.put_inode(&child)?;
            self.entry_changed(child.ino)?;
        }
        Ok(())
    }

    pub(super) fn delete_inode(&self, ino: u64) -> Result<()> {
        for sql in [
            "DELETE FROM inode WHERE layer = ?1 AND ino = ?2",
            "DELETE FROM xattr WHERE layer = ?1 AND ino = ?2",
            "DELETE FROM linkgroup WHERE layer = ?1 AND ino = ?2",
        ] {
            self.db
                .prepare_cached(sql)?
                .execute(params![self.layer(), ino as i64])?;
        }
        Ok(())
    }

    pub fn rmdir(&self, parent: &Inode, name: &[u8]) -> Result<()> {
        let shown = || crate::names::escape(name);
        let child = self
            .lookup(parent, name)?
            .ok_or_else(|| Error::NotFound(shown()))?;
        if child.kind != Kind::Dir {
            return Err(Error::NotADirectory(shown()));
        }
        if !self.readdir(&child)?.is_empty() {
            return Err(Error::NotEmpty(shown()));
        }
        self.delete_dentry(parent.ino, name)?;
        self.drop_dir(child)?;
        self.dir_links_changed(parent.ino, -1)?;
        self.touch_dir(parent.ino)
    }

    /// Deletes an empty directory whose last name went; one that a process still has
    /// open stays as an orphan (fstat works) until `drop_orphan` after the last close.
    fn drop_dir(&self, mut dir: Inode) -> Result<()> {
        if self.open_inos.is_some_and(|o| o.contains(&dir.ino)) {
            dir.nlink = 0;
            dir.ctime_ns = now_ns();
            self.put_inode(&dir)
        } else {
            self.delete_inode(dir.ino)
        }
    }

    /// Removes a name and, for a directory, everything below it.
    pub fn remove_tree(&self, parent: &Inode, name: &[u8]) -> Result<()> {
        let child = self
            .lookup(parent, name)?
            .ok_or_else(|| Error::NotFound(crate::names::escape(name)))?;
        if child.kind != Kind::Dir {
            return self.unlink(parent, name);
        }
        let child = if child.has_links {
            // Members outside this subtree must lose a link count; closing the links may
            // materialize `child`, so read it again.
            self.close_links()?;
            self.get(child.ino)?
        } else {
            child
        };
        self.delete_dentry(parent.ino, name)?;
        self.delete_subtree(child)?;
        self.dir_links_changed(parent.ino, -1)?;
        self.touch_dir(parent.ino)
    }

    fn delete_subtree(&self, dir: Inode) -> Result<()> {
        let mut stack = vec![dir];
        while let Some(d) = stack.pop() {
            if !d.materialized {
                let u = self.subtree_usage(&d)?;
                self.charge(-(u.files as i64), -(u.bytes as i64))?;
            } else {
                for (n, c) in self.children(d.ino)? {
                    self.delete_dentry(d.ino, &n)?;
                    if c.kind == Kind::Dir {
                        stack.push(c);
                    } else {
                        let fresh = self.get(c.ino)?;
                        self.drop_name(fresh)?;
                    }
                }
            }
            self.delete_inode(d.ino)?;
        }
        Ok(())
    }

    fn is_ancestor(&self, maybe_ancestor: u64, mut of: u64) -> Result<bool> {
        loop {
            if of == maybe_ancestor {
                return Ok(true);
            }
            match self.parent_of(of)? {
                Some(p) => of = p,
                None => return Ok(false),
            }
        }
    }

    pub fn rename(
        &self,
        parent: &Inode,
        name: &[u8],
        newparent: &Inode,
        newname: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        check_name(newname)?;
        let shown = |n: &[u8]| crate::names::escape(n);
        let src = self
            .lookup(parent, name)?
            .ok_or_else(|| Error::NotFound(shown(name)))?;
        if newparent.kind != Kind::Dir {
            return Err(Error::NotADirectory(shown(newname)));
        }
        if src.kind == Kind::Dir && self.is_ancestor(src.ino, newparent.ino)? {
            return Err(Error::InvalidArgument(
                shown(newname),
                "cannot move a directory into itself".into(),
            ));
        }
        let dst = self.lookup(newparent, newname)?;
        if parent.ino == newparent.ino && name == newname {
            return Ok(());
        }
        let now = now_ns();
        if flags.exchange {
            let dst = dst.ok_or_else(|| Error::NotFound(shown(newname)))?;
            if dst.kind == Kind::Dir && self.is_ancestor(dst.ino, parent.ino)? {
                return Err(Error::InvalidArgument(
                    shown(name),
                    "cannot move a directory into itself".into(),
                ));
            }
            self.delete_dentry(parent.ino, name)?;
            self.delete_dentry(newparent.ino, newname)?;
            self.insert_dentry(parent.ino, name, dst.ino)?;
            self.insert_dentry(newparent.ino, newname, src.ino)?;
            let moved = (src.kind == Kind::Dir) as i64 - (dst.kind == Kind::Dir) as i64;
            if parent.ino != newparent.ino && moved != 0 {
                self.dir_links_changed(parent.ino, -moved)?;
                self.dir_links_changed(newparent.ino, moved)?;
            }
        } else {
            if let Some(dst) = dst {
                if flags.noreplace {
                    return Err(Error::Exists(shown(newname)));
                }
                if dst.ino == src.ino {
                    return Ok(());
                }
                match (src.kind == Kind::Dir, dst.kind == Kind::Dir) {
                    (false, true) => return Err(Error::IsADirectory(shown(newname))),
                    (true, false) => return Err(Error::NotADirectory(shown(newname))),
                    (true, true) => {
                        if !self.readdir(&dst)?.is_empty() {
                            return Err(Error::NotEmpty(shown(newname)));
                        }
                        self.delete_dentry(newparent.ino, newname)?;
                        self.drop_dir(dst)?;
                        self.dir_links_changed(newparent.ino, -1)?;
                    }
                    (false, false) => {
                        self.delete_dentry(newparent.ino, newname)?;
                        self.drop_name(dst)?;
                    }
                }
            }
            self.delete_dentry(parent.ino, name)?;
            self.insert_dentry(newparent.ino, newname, src.ino)?;
            if src.kind == Kind::Dir && parent.ino != newparent.ino {
                self.dir_links_changed(parent.ino, -1)?;
                self.dir_links_changed(newparent.ino, 1)?;
            }
        }
        self.db
            .prepare_cached("UPDATE inode SET ctime_ns = ?3 WHERE layer = ?1 AND ino = ?2")?
            .execute(params![self.layer(), src.ino as i64, now])?;
        self.touch_dir(parent.ino)?;
        if newparent.ino != parent.ino {
            self.touch_dir(newparent.ino)?;
        }
        Ok(())
    }

    pub fn setattr(&self, ino: u64, set: &SetAttr) -> Result<Inode> {
        self.setattr_of(self.get(ino)?, set)
    }

    /// `setattr` on an inode the caller has just read (in this transaction).
    pub fn setattr_of(&self, mut i: Inode, set: &SetAttr) -> Result<Inode> {
        let ino = i.ino;
        let before = (i.mode, i.uid, i.gid, i.size, i.mtime_ns, i.hash);
        // An access time that read as the mtime keeps its value when the mtime changes.
        i.atime_ns.get_or_insert(i.mtime_ns);
        if let Some(m) = set.mode {
            i.mode = m & 0o7777;
        }
        if let Some(u) = set.uid {
            i.uid = u;
        }
        if let Some(g) = set.gid {
            i.gid = g;
        }
        let now = now_ns();
        if let Some(size) = set.size {
            if i.kind != Kind::File {
                return Err(Error::InvalidArgument(
                    format!("inode {ino}"),
                    "not a regular file".into(),
                ));
            }
            let hash = i
                .hash
                .ok_or_else(|| Error::Internal("file without content".into()))?;
            if size > i.size {
                self.check_file_size(size)?;
            }
            self.charge(0, (size as i64 - i.size as i64) * i.nlink as i64)?;
            i.hash = Some(crate::store::content::resize(self.db, &hash, i.size, size)?);
            i.size = size;
            i.mtime_ns = now;
        }
        if let Some(t) = set.mtime_ns {
            i.mtime_ns = t;
        }
        if let Some(t) = set.atime_ns {
            i.atime_ns = Some(t);
        }
        i.ctime_ns = now;
        self.put_inode(&i)?;
        // Trees do not hold ctime: a chown or chmod that changes nothing else (tar does
        // them for every file) leaves the parent's tree as it is.
        if before != (i.mode, i.uid, i.gid, i.size, i.mtime_ns, i.hash) {
            self.entry_changed(ino)?;
        }
        Ok(i)
    }

    /// Replaces a file's whole content.
    pub fn set_content(&self, ino: u64, hash: Hash, size: u64) -> Result<Inode> {
        self.set_content_of(self.get(ino)?, hash, size, now_ns())
    }

    /// `set_content` on an inode the caller has just read (in this transaction).
    /// Stores new content of a regular file, modified at `mtime_ns`.
    pub fn set_content_of(
        &self,
        mut i: Inode,
        hash: Hash,
        size: u64,
        mtime_ns: i64,
    ) -> Result<Inode> {
        let ino = i.ino;
        if size > i.size {
            self.check_file_size(size)?;
        }
        if i.kind != Kind::File {
            return Err(Error::InvalidArgument(
                format!("inode {ino}"),
                "not a regular file".into(),
            ));
        }
        self.charge(0, (size as i64 - i.size as i64) * i.nlink as i64)?;
        i.hash = Some(hash);
        i.size = size;
        i.atime_ns.get_or_insert(i.mtime_ns);
        i.mtime_ns = mtime_ns;
        i.ctime_ns = now_ns();
        self.put_inode(&i)?;
        self.entry_changed(ino)?;
        Ok(i)
    }

    pub fn set_xattr(&self, ino: u64, name: &[u8], value: &[u8]) -> Result<()> {
        let others: u64 = self
            .xattrs(ino)?
            .iter()
            .filter(|(n, _)| n != name)
            .map(|(n, v)| xattr_cost(n, v.len()))
            .sum();
        let cost = xattr_cost(name, value.len());
        if cost > XATTR_BLOCK || others + cost > XATTR_SPACE {
            return Err(Error::XattrsFull(
                String::from_utf8_lossy(name).into_owned(),
            ));
        }
        self.db
            .prepare_cached(
                "INSERT OR REPLACE INTO xattr (layer, ino, name, value) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![self.layer(), ino as i64, name, value])?;
        self.entry_changed(ino)
    }

    pub fn remove_xattr(&self, ino: u64, name: &[u8]) -> Result<bool> {
        let n = self
            .db
            .prepare_cached("DELETE FROM xattr WHERE layer = ?1 AND ino = ?2 AND name = ?3")?
            .execute(params![self.layer(), ino as i64, name])?;
        if n > 0 {
            self.entry_changed(ino)?;
        }
        Ok(n > 0)
    }
}
