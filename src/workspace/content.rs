//! File contents as the front ends read and write them: the mount's write buffers and
//! seeks, the CLI's `write`, `cat` and `grep`. The store keeps contents as chunk lists;
//! these are the few of its operations a reader or writer of one file needs, so the CLI
//! and the mount never reach into the store for them (tests/data/layers.toml).

pub use crate::store::content::{
    Extents, Patch, check_size, copy_to, end_of, exists, extents, read_all, read_at, write_bytes,
};

use super::{Hash, Workspace};
use crate::error::Result;
use crate::store::objects::{empty_root, put_tree_scratch};

impl Workspace<'_> {
    /// An empty tree owned by the current user, stored as scratch (collected when nothing
    /// refers to it): the `from` side of a diff in a workspace with no checkpoint yet.
    pub fn empty_tree(&self) -> Result<Hash> {
        let (uid, gid) = super::current_uid_gid();
        put_tree_scratch(self.db, &empty_root(uid, gid, 0))
    }
}
