//! Importing a host directory tree into a workspace and exporting a workspace subtree to a
//! host directory.
//!
//! Import never goes through the live layer file by file: a reader thread walks the host
//! tree (never following symlinks), reads and hashes file contents, and hands the chunks to
//! the calling thread, which stores them; then immutable tree objects are built bottom-up
//! and grafted into the workspace in O(1) per grafted entry.
//!
//! Export walks the live layer and recreates every entry under a host directory. It never
//! writes through a symlink: files are created with `O_CREAT | O_EXCL | O_NOFOLLOW`, a
//! name that already exists is unlinked first (with `--force`), and only directories that
//! are real directories (checked with `lstat`, or just created) are descended into.

use std::collections::{HashMap, HashSet};
use std::ffi::{CString, OsStr};
use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use rusqlite::Connection;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::relpath::Rel;
use crate::store::content::{self, Extents};
use crate::store::objects::{self, CHUNK_SIZE, Entry, Hash, Kind, Tree};
use crate::store::{counter_take, now_ns};
use crate::workspace::{Inode, NewNode, ROOT_INO, SetAttr, Workspace, path};

/// How often (in files) the progress callback is called.
const PROGRESS_EVERY: u64 = 1000;
/// The reader thread sends messages in batches of this many messages or bytes...
const BATCH_MSGS: usize = 256;
const BATCH_BYTES: usize = 1 << 20;
/// ...and at most this many batches are in flight (so at most ~9 MiB of file data).
const CHANNEL_DEPTH: usize = 8;

/// What an import did.
#[derive(Serialize, Debug, Clone, Default)]
pub struct ImportStats {
    /// Regular files stored (a hard-linked file counts once).
    pub files: u64,
    /// Directories below the imported host directory.
    pub dirs: u64,
    pub symlinks: u64,
    /// Extra names of a file (or symlink, FIFO, ...) already imported in this run.
    pub hardlinks: u64,
    /// Bytes of file content read from the host.
    pub bytes: u64,
    /// Host paths left out, each with the reason.
    pub skipped: Vec<String>,
    /// Entries whose setuid/setgid bits were dropped (kept only with `keep_setuid`).
    pub setuid_dropped: u64,
}

/// What an export did.
#[derive(Serialize, Debug, Clone, Default)]
pub struct ExportStats {
    /// Regular files written (a hard-linked file counts once).
    pub files: u64,
    /// Directories exported (including the top one).
    pub dirs: u64,
    pub symlinks: u64,
    /// Names created as hard links to a file exported earlier in this run.
    pub hardlinks: u64,
    /// Bytes of file content written.
    pub bytes: u64,
    /// Workspace paths that could not be recreated on the host, each with the reason.
    pub skipped: Vec<String>,
    /// Entries whose setuid/setgid bits were dropped (kept only with `keep_setuid`).
    pub setuid_dropped: u64,
}

fn host_err(p: &Path, e: io::Error) -> Error {
    Error::host(p.display(), e)
}

/// A short path to what `at` names, at any depth (through `/proc/self/fd`).
fn proc_path(at: &Rel) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(at.proc_path().as_bytes()))
}

fn host_msg(p: &Path, message: impl Into<String>) -> Error {
    Error::Host {
        what: p.display().to_string(),
        message: message.into(),
    }
}

fn mtime_ns_of(m: &fs::Metadata) -> i64 {
    m.mtime()
        .saturating_mul(1_000_000_000)
        .saturating_add(m.mtime_nsec())
}

fn kind_of(ft: &fs::FileType) -> Kind {
    if ft.is_dir() {
        Kind::Dir
    } else if ft.is_symlink() {
        Kind::Symlink
    } else if ft.is_fifo() {
        Kind::Fifo
    } else if ft.is_socket() {
        Kind::Socket
    } else if ft.is_char_device() {
        Kind::CharDev
    } else if ft.is_block_device() {
        Kind::BlockDev
    } else {
        Kind::File
    }
}

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

fn timespec(ns: i64) -> libc::timespec {
    // SAFETY: timespec is plain data; all-zero is a valid value.
    let mut t: libc::timespec = unsafe { std::mem::zeroed() };
    t.tv_sec = ns.div_euclid(1_000_000_000) as libc::time_t;
    t.tv_nsec = ns.rem_euclid(1_000_000_000) as _;
    t
}

/// Access time left alone (not tracked), modification time set.
fn times(mtime_ns: i64) -> [libc::timespec; 2] {
    let mut omit = timespec(0);
    omit.tv_nsec = libc::UTIME_OMIT;
    [omit, timespec(mtime_ns)]
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sets the mtime of `p` itself, never of what a symlink points to.
fn set_mtime_nofollow(p: &Path, mtime_ns: i64) -> io::Result<()> {
    let c = cpath(p)?;
    let t = times(mtime_ns);
    // SAFETY: `c` is a valid NUL-terminated path and `t` holds two timespecs.
    check(unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            t.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })
}

fn ignore_eperm(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => Ok(()),
        other => other,
    }
}

mod export;
mod export_ignored;
mod import;

pub use export::export;
pub use import::import;

#[cfg(test)]
mod tests;
