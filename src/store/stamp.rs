//! Is a vault file as avfs last left it? A *stamp* is what can be seen of the file from
//! outside (device, inode, size, times, the SQLite header, the size and time of its
//! `-wal`). Every avfs process that opened the file for writing records the stamp when it
//! is done with it (after its connection closed, so after SQLite's last checkpoint), in
//! the registry under `$AVFS_HOME`. The next process that opens the file for writing
//! compares: the same stamp means avfs itself closed it cleanly and nothing changed it
//! since, so it can be written at once; any difference (a copy, an import, an edit, a
//! process killed mid-write, another `$AVFS_HOME`) means it is checked in full first.
//!
//! Processes that have the file open hold a shared `flock` on it (BSD locks, which
//! SQLite's POSIX locks do not see). Only a process that gets it exclusively, so is
//! alone, compares stamps: while other avfs processes have the file open its stamp moves
//! with their writes, and the process that opened it first has checked it.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::util::flock;

/// The stamp of the file at `path` now (see the module documentation).
pub fn of(path: &Path) -> std::io::Result<String> {
    let m = std::fs::metadata(path)?;
    let mut header = [0u8; 100];
    let mut f = File::open(path)?;
    let mut got = 0;
    while got < header.len() {
        match f.read(&mut header[got..])? {
            0 => break,
            n => got += n,
        }
    }
    let head = blake3::hash(&header[..got]);
    let wal = match std::fs::metadata(sidecar(path, "-wal")) {
        // Its size and modification time, not its ctime: SQLite running as root
        // chowns the `-wal` to the vault's owner on every open, so a command that only
        // read the vault would move the ctime and cost the next writer a full check.
        // An empty `-wal` holds nothing, as none does.
        Ok(w) if w.len() == 0 => "none".into(),
        Ok(w) => format!("{}@{}.{}", w.len(), w.mtime(), w.mtime_nsec()),
        Err(_) => "none".into(),
    };
    Ok(format!(
        "v1 dev={} ino={} size={} mtime={}.{} ctime={}.{} header={} wal={wal}",
        m.dev(),
        m.ino(),
        m.len(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
        &head.to_hex()[..16],
    ))
}

/// `path` with `suffix` appended (`-wal`, `-shm`).
pub fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

/// The key a file's stamp is kept under: its absolute path, symlinks resolved.
fn key(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// A process's hold on a vault file it writes: a shared `flock` for as long as it has the
/// file open. Dropped after the SQLite connection (see `Store`), it records the file's
/// stamp and lets go.
pub struct Guard {
    file: File,
    path: PathBuf,
    /// Record the stamp when dropped (not when opening failed).
    armed: bool,
}

impl Guard {
    /// Takes the hold. When no other avfs process has the file open and its stamp is not
    /// the one recorded, `check` runs first (with the file locked exclusively, so no
    /// avfs process opens it meanwhile) and must pass.
    pub fn take(path: &Path, check: impl FnOnce() -> Result<()>) -> Result<Guard> {
        let file = File::open(path).map_err(|e| Error::host(path.display(), e))?;
        let mut guard = Guard {
            file,
            path: key(path),
            armed: false,
        };
        match flock(&guard.file, libc::LOCK_EX | libc::LOCK_NB) {
            Ok(()) => {
                let now = of(path).map_err(|e| Error::host(path.display(), e))?;
                let recorded = book_get(&guard.path);
                if recorded.as_deref() != Some(now.as_str()) {
                    check()?;
                    book_put(&guard.path);
                }
                // Other processes may open it now; they trust this check.
                flock(&guard.file, libc::LOCK_SH).map_err(|e| Error::host(path.display(), e))?;
            }
            Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => {
                // Another avfs process has it open (or is checking it: wait for that).
                flock(&guard.file, libc::LOCK_SH).map_err(|e| Error::host(path.display(), e))?;
            }
            Err(e) => return Err(Error::host(path.display(), e)),
        }
        guard.armed = true;
        Ok(guard)
    }

    /// Records the file as it is now, as avfs left it (a file avfs just made).
    pub fn stamp_now(&self) {
        book_put(&self.path);
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.armed {
            book_put(&self.path);
        }
        // Closing `file` releases the lock.
    }
}

/// Locks the file at `path` exclusively when no other avfs process has it open (they
/// hold it shared, see `Guard`); `Busy` otherwise. Released when the returned file is
/// closed. For work that replaces the file (`vault upgrade`).
pub fn lock_alone(path: &Path) -> Result<File> {
    let file = File::open(path).map_err(|e| Error::host(path.display(), e))?;
    match flock(&file, libc::LOCK_EX | libc::LOCK_NB) {
        Ok(()) => Ok(file),
        Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => Err(Error::Busy),
        Err(e) => Err(Error::host(path.display(), e)),
    }
}

/// Records the stamp of the file at `path` as it is now: avfs itself just left it so.
pub fn record(path: &Path) {
    book_put(&key(path));
}

/// The stamp recorded for the file at `key`, if any.
fn book_get(key: &Path) -> Option<String> {
    let db = super::homedb::HomeDb::open(&super::homedb::default_home()).ok()?;
    db.stamp(key).ok().flatten()
}

/// Records the stamp of the file at `key` as it is now. The stamp is taken inside the
/// registry's write transaction, so of two processes finishing at once the one whose
/// stamp is recorded last also took it last. Best effort: without a stamp the next open
/// checks the file in full, which is slow but safe.
fn book_put(key: &Path) {
    if let Ok(db) = super::homedb::HomeDb::open(&super::homedb::default_home()) {
        let _ = db.restamp(key, || of(key).ok());
    }
}
