//! Write buffering: kernel write requests land in memory, per inode, in 64 KiB blocks,
//! and reach SQLite as one transaction when the file is flushed (close, fsync, a
//! checkpoint request, memory pressure), never one transaction per write request. The
//! blocks are a `content::Patch` over the file's stored content.

use std::ops::{Deref, DerefMut};

use rusqlite::Connection;

use crate::error::Result;
use crate::workspace::content::{Patch, exists};
use crate::workspace::{Hash, now_ns};

/// Unflushed changes to one file.
pub struct DirtyFile {
    patch: Patch,
    /// The stored content the buffer applies to: it must still exist when the buffer is
    /// stored (space reclaim never removes what a live inode names, and this is checked).
    pub base: (Hash, u64),
    /// Size of the stored content when the buffer began (what a quota already counts).
    pub stored_size: u64,
    /// The modification time the file gets when the buffer is stored: the time of the
    /// last write, unless a later utimensat (tar, `cp -p`, `touch -d`) set one.
    pub mtime_ns: i64,
    /// The change time of the last change through the buffer: what `stat` shows before
    /// the buffer is stored (the mount has no writeback cache, so the kernel asks).
    pub ctime_ns: i64,
}

impl DirtyFile {
    pub fn new(db: &Connection, hash: &Hash, size: u64) -> Result<DirtyFile> {
        Ok(DirtyFile {
            patch: Patch::new(db, hash, size)?,
            base: (*hash, size),
            stored_size: size,
            mtime_ns: now_ns(),
            ctime_ns: now_ns(),
        })
    }

    pub fn write(&mut self, db: &Connection, offset: u64, data: &[u8]) -> Result<()> {
        self.patch.write(db, offset, data)?;
        self.touch(true);
        Ok(())
    }

    /// Records a change now: of the content (`content`: the modification time too, as a
    /// write, a truncate or a punched hole make it) or of the allocation only.
    pub fn touch(&mut self, content: bool) {
        let now = now_ns();
        self.ctime_ns = now;
        if content {
            self.mtime_ns = now;
        }
    }

    /// Stores the changed blocks and returns the new content hash and size.
    pub fn commit(&self, db: &Connection) -> Result<(Hash, u64)> {
        if self.base.1 > 0 && !exists(db, &self.base.0, self.base.1)? {
            return Err(crate::error::Error::Corrupt {
                path: Default::default(),
                reason: format!(
                    "the stored content {} this file's buffered writes apply to is gone",
                    self.base.0.to_hex()
                ),
            });
        }
        self.patch.commit(db)
    }
}

impl Deref for DirtyFile {
    type Target = Patch;
    fn deref(&self) -> &Patch {
        &self.patch
    }
}

impl DerefMut for DirtyFile {
    fn deref_mut(&mut self) -> &mut Patch {
        &mut self.patch
    }
}
