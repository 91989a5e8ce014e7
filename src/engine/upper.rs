//! Listing an overlay run's upper directory for the ingest, at any depth.
//!
//! Each directory is opened once, relative to its parent's base (`scan::Rel`), so no
//! lookup needs a path longer than PATH_MAX however deep the run made the tree; the walk
//! keeps an explicit stack, never recursing. Its listing, metadata and attributes come
//! through that descriptor, and entries that are neither files nor directories are
//! `lstat`ed relative to it. Regular files are only named here (the hashing workers
//! open them), except in a kept overlay, whose files are `lstat`ed so that those the
//! last ingest already read (`memo`) are not read again.

use std::ffi::CString;

use super::memo::Memo;
use super::scan::{self, Meta, Rel, user_xattrs_fd};
use crate::error::{Error, Result};
use crate::store::objects::{Hash, Kind, Xattrs};
use std::os::fd::AsRawFd;

/// One entry of an upper directory, as found. The metadata and attributes of files and
/// directories are read where they are opened: in `Walk::dirs` and the hashed files.
pub(super) struct Found {
    pub name: Vec<u8>,
    pub what: FoundKind,
}

pub(super) enum FoundKind {
    Whiteout,
    /// Index into `Walk::dirs`.
    Dir(usize),
    /// Index into `Walk::files`.
    File(usize),
    Symlink(Vec<u8>, Meta),
    Special(Kind, Meta),
}

pub(super) struct FoundDir {
    /// The directory holding it (the root is its own parent) and its name there.
    pub parent: usize,
    pub name: Vec<u8>,
    pub meta: Meta,
    pub xattrs: Xattrs,
    pub opaque: bool,
    pub entries: Vec<Found>,
}

/// A regular file of the upper: where it is, and, when the last ingest of a kept
/// overlay read this very inode unchanged, what it found (`meta`, attributes, content).
pub(super) struct FoundFile {
    pub dir: usize,
    pub name: Vec<u8>,
    pub rel: Rel,
    pub known: Option<(Meta, Xattrs, Hash)>,
}

/// The upper as listed: its directories in the order found (a directory always comes
/// before the directories inside it), its regular files.
pub(super) struct Walk {
    pub dirs: Vec<FoundDir>,
    pub files: Vec<FoundFile>,
    pub skipped: Vec<String>,
}

impl Walk {
    /// The path (below the upper's root) of entry `name` of directory `dir`.
    pub fn display(&self, dir: usize, name: Option<&[u8]>) -> String {
        let mut comps: Vec<Vec<u8>> = name.map(|n| vec![n.to_vec()]).unwrap_or_default();
        let mut i = dir;
        while i != 0 {
            comps.push(self.dirs[i].name.clone());
            i = self.dirs[i].parent;
        }
        comps.reverse();
        crate::workspace::path::display(&comps)
    }

    fn err(&self, dir: usize, name: Option<&[u8]>, e: std::io::Error) -> Error {
        Error::host(format!("upper /{}", self.display(dir, name)), e)
    }
}

/// Lists the upper, depth first. `memo`: what the last ingest of this (kept) upper read.
pub(super) fn walk(upper: &std::path::Path, memo: Option<&Memo>) -> Result<Walk> {
    let mut w = Walk {
        dirs: vec![FoundDir {
            parent: 0,
            name: vec![],
            meta: Meta::default(),
            xattrs: vec![],
            opaque: false,
            entries: vec![],
        }],
        files: vec![],
        skipped: vec![],
    };
    let root = Rel::root(upper).map_err(|e| Error::host(upper.display(), e))?;
    let mut stack = vec![(0usize, root)];
    while let Some((idx, rel)) = stack.pop() {
        let mut od = scan::OpenDir::open_at(&rel).map_err(|e| w.err(idx, None, e))?;
        let meta = od.file.metadata().map_err(|e| w.err(idx, None, e))?;
        let (xattrs, opaque) = user_xattrs_fd(od.file.as_raw_fd());
        let d = &mut w.dirs[idx];
        (d.meta, d.xattrs, d.opaque) = (Meta::of(&meta), xattrs, opaque);
        // This directory's descriptor, once an entry is too deep to name from `rel.base`.
        let mut anchor = None;
        let mut entries = Vec::new();
        while let Some(de) = od.next_entry().map_err(|e| w.err(idx, None, e))? {
            let name = de.name;
            let c = CString::new(name.clone()).expect("names have no NUL");
            // Files and directories are read when opened; anything else (or an entry
            // whose type the listing does not give, or a kept upper's file) is looked
            // at here.
            let look = match de.d_type {
                libc::DT_DIR => false,
                libc::DT_REG => memo.is_some(),
                _ => true,
            };
            let stat = if look {
                Some(scan::lstat_at(&od.file, &c).map_err(|e| w.err(idx, Some(&name), e))?)
            } else {
                None
            };
            let is_dir = stat.map_or(de.d_type == libc::DT_DIR, |m| m.is_dir());
            let is_file = stat.map_or(de.d_type == libc::DT_REG, |m| m.is_file());
            let what = if is_dir || is_file {
                let child = rel
                    .child(&mut anchor, &name)
                    .map_err(|e| w.err(idx, Some(&name), e))?;
                if is_dir {
                    w.dirs.push(FoundDir {
                        parent: idx,
                        name: name.clone(),
                        meta: Meta::default(),
                        xattrs: vec![],
                        opaque: false,
                        entries: vec![],
                    });
                    stack.push((w.dirs.len() - 1, child));
                    FoundKind::Dir(w.dirs.len() - 1)
                } else {
                    let known = match (memo, stat) {
                        (Some(memo), Some(m)) => memo.unchanged(&m),
                        _ => None,
                    };
                    w.files.push(FoundFile {
                        dir: idx,
                        name: name.clone(),
                        rel: child,
                        known,
                    });
                    FoundKind::File(w.files.len() - 1)
                }
            } else {
                let m = stat.expect("looked at above");
                // Only files and directories can carry `user.*` attributes (the kernel
                // refuses them elsewhere), so there are none to read here.
                if m.is_char_device() && m.rdev == 0 {
                    FoundKind::Whiteout
                } else if m.is_symlink() {
                    let t =
                        scan::readlink_at(&od.file, &c).map_err(|e| w.err(idx, Some(&name), e))?;
                    FoundKind::Symlink(t, m)
                } else if m.is_fifo() {
                    FoundKind::Special(Kind::Fifo, m)
                } else if m.is_socket() {
                    FoundKind::Special(Kind::Socket, m)
                } else if m.is_char_device() {
                    FoundKind::Special(Kind::CharDev, m)
                } else if m.is_block_device() {
                    FoundKind::Special(Kind::BlockDev, m)
                } else {
                    let shown = w.display(idx, Some(&name));
                    w.skipped.push(format!("{shown}: unknown file type"));
                    continue;
                }
            };
            entries.push(Found { name, what });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        w.dirs[idx].entries = entries;
    }
    Ok(w)
}
