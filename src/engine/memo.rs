//! What the last ingest of a kept overlay's upper read, file by file, so that the next
//! ingest does not read an unchanged file again.
//!
//! A kept upper is ingested after every run, and it holds everything earlier runs wrote:
//! without this, a 64 GiB file written once was read again by every later `exec -- true`.
//! A file is the same when its inode number, size, mtime and ctime are (ctime changes
//! with any write, `chmod`, `chown`, attribute or link change, and cannot be set back),
//! and its content is then the one recorded. The record lives beside the upper
//! (`memo.json`) and goes with it; it is written only after the ingest that read those
//! files committed, and a recorded content the vault no longer holds is read again.

use std::collections::HashMap;
use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::scan::Meta;
use crate::store::objects::{Hash, Xattrs};

const FILE: &str = "memo.json";

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Memo {
    /// Inode number -> the file as read.
    files: HashMap<u64, Seen>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Seen {
    dev: u64,
    size: u64,
    mtime_ns: i64,
    ctime_ns: i64,
    xattrs: Xattrs,
    /// Hex of the content hash.
    content: String,
}

impl Memo {
    pub fn load(dir: &Path) -> Option<Memo> {
        let text = fs::read(dir.join(FILE)).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// Writes the record (replacing the last one at once); on failure there is none,
    /// and the next ingest reads every file.
    pub fn save(&self, dir: &Path) {
        let f = dir.join(FILE);
        let tmp = dir.join(format!(".{FILE}.{}", std::process::id()));
        let json = serde_json::to_vec(self).expect("memo serializes");
        if fs::write(&tmp, json).is_err() || fs::rename(&tmp, &f).is_err() {
            let _ = fs::remove_file(&tmp);
            let _ = fs::remove_file(&f);
        }
    }

    /// Forgets the record (before an ingest whose outcome is not known yet is kept).
    pub fn clear(dir: &Path) {
        let _ = fs::remove_file(dir.join(FILE));
    }

    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    pub fn add(&mut self, m: &Meta, xattrs: &Xattrs, content: &Hash) {
        self.files.insert(
            m.ino,
            Seen {
                dev: m.dev,
                size: m.size,
                mtime_ns: m.mtime_ns,
                ctime_ns: m.ctime_ns,
                xattrs: xattrs.clone(),
                content: content.to_hex(),
            },
        );
    }

    /// The attributes and content recorded for the file `m` describes, if it is
    /// unchanged since.
    pub fn unchanged(&self, m: &Meta) -> Option<(Meta, Xattrs, Hash)> {
        let s = self.files.get(&m.ino)?;
        if s.dev != m.dev
            || s.size != m.size
            || s.mtime_ns != m.mtime_ns
            || s.ctime_ns != m.ctime_ns
        {
            return None;
        }
        let content = crate::util::hex32(&s.content).map(Hash)?;
        Some((*m, s.xattrs.clone(), content))
    }
}
