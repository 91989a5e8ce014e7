//! Objects a vault has only the promise of: a lazy clone holds its trees but fetches a
//! file's contents from its remote on first read. The store does not know remotes; it
//! asks the source registered here (by `remote::lazy`) when a chunk, chunk list or tree
//! it needs is absent, and reports the object missing when nobody can supply it. Being
//! at the lowest level, every reader gets it: the CLI, the mount, exec.

use std::sync::OnceLock;

use rusqlite::Connection;

use super::objects::Hash;
use crate::error::Result;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missing {
    Chunk,
    /// A file's chunk list; the bytes returned are the size (8 bytes, little-endian)
    /// followed by the chunk hashes.
    Content,
    Tree,
}

pub trait ObjectSource: Send + Sync {
    /// The bytes of `hash`, checked against it and kept in the vault, or None when no
    /// remote promises it.
    fn fetch(&self, db: &Connection, kind: Missing, hash: &Hash) -> Result<Option<Vec<u8>>>;
}

static SOURCE: OnceLock<Box<dyn ObjectSource>> = OnceLock::new();

/// Registers the process's source of missing objects (once; later calls are ignored).
pub fn set_source(source: Box<dyn ObjectSource>) {
    let _ = SOURCE.set(source);
}

pub fn fetch(db: &Connection, kind: Missing, hash: &Hash) -> Result<Option<Vec<u8>>> {
    match SOURCE.get() {
        Some(s) => s.fetch(db, kind, hash),
        None => Ok(None),
    }
}
