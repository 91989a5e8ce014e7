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
//! with their writes, and the process that opened it first has checked it. The last
//! process to let go, when it gets the lock exclusively, removes the file's emptied
//! `-wal` and its `-shm` (`tidy`): at rest a vault is its one file.

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
        let file = open_for_locks(path)?;
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
        // Last: a failed attempt to take the lock exclusively drops the shared one too
        // (flock's conversion is not atomic). The stamp is the same either way (an empty
        // `-wal` counts as none). Closing `file` releases the lock.
        tidy(&self.file, &self.path);
    }
}

/// A reader's hold on a vault file it reads with SQLite's shared `-wal` and `-shm`
/// (`Store::open_read`): a shared lock on a byte no one else locks (`READERS_BYTE`), so
/// no process removes them while it reads, and on drop (after the connection closed) it
/// removes them itself if it is the last (`tidy`). Not the writers' `flock`: a writer
/// alone with readers must still compare stamps (readers never check the file), and a
/// read inside a writer's own full check (which holds the `flock` exclusively) must not
/// wait for it. Records no stamp: a read leaves the file as it was.
pub struct Hold {
    file: File,
    path: PathBuf,
    /// Tidy when dropped (not when the read did not share the side files).
    armed: bool,
}

impl Hold {
    /// Waits while a process removes the side files (`tidy`: an instant).
    pub fn take(path: &Path) -> Result<Hold> {
        let file = open_for_locks(path)?;
        ofd_lock(&file, libc::F_RDLCK as libc::c_short, true)
            .map_err(|e| Error::host(path.display(), e))?;
        Ok(Hold {
            file,
            path: key(path),
            armed: true,
        })
    }

    /// Lets go without touching the side files: the read did not use them (an
    /// `immutable` open, or side files this process may not write).
    pub fn release(mut self) {
        self.armed = false;
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if self.armed {
            tidy(&self.file, &self.path);
        }
    }
}

/// The file opened to hold its locks: for writing where this process may (nothing is
/// written through it), as `tidy`'s exclusive lock on `READERS_BYTE` needs; else for
/// reading (then `tidy` leaves the side files).
fn open_for_locks(path: &Path) -> Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .or_else(|_| File::open(path))
        .map_err(|e| Error::host(path.display(), e))
}

/// Readers' byte (`Hold`): far above SQLite's own lock bytes (from 1 GiB), which these
/// locks would otherwise conflict with.
const READERS_BYTE: libc::off_t = 1 << 62;

/// Locks `READERS_BYTE` of `file` for reading or writing: an open file description lock,
/// so, unlike SQLite's POSIX locks, it stays until `file` closes, whatever else this
/// process closes. `wait`: block while a conflicting lock is held.
fn ofd_lock(file: &File, kind: libc::c_short, wait: bool) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: all-zero is a valid `flock` (l_pid must be 0 for open file description locks).
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = READERS_BYTE;
    fl.l_len = 1;
    let cmd = if wait {
        libc::F_OFD_SETLKW
    } else {
        libc::F_OFD_SETLK
    };
    loop {
        // SAFETY: a valid open descriptor and a `flock` that outlives the call.
        if unsafe { libc::fcntl(file.as_raw_fd(), cmd, &mut fl) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// Removes the `-wal` and `-shm` of the vault file at `path` once this process's
/// connection to it has closed, when they are no longer needed: no other avfs process
/// has the file open, and the `-wal` is empty (SQLite's last close checkpointed it into
/// the file; a `-wal` with frames is left for the next writer to checkpoint). Every
/// avfs process that opens the file takes a lock before its SQLite connection and keeps
/// it until after: a writer the shared `flock` (`Guard`), a reader the shared lock on
/// `READERS_BYTE` (`Hold`). Taking both exclusively here, without waiting, proves no
/// other connection of avfs exists, and holding them while removing keeps new ones out
/// (they wait for the locks). While a process has the file open SQLite keeps both files
/// (`persist_wal`): removing them is this step's alone, never SQLite's on close, which
/// would rest on SQLite's POSIX locks, dropped by any `close` of the file in the same
/// process. The shared `flock` may be gone after (see `Guard`'s drop).
fn tidy(file: &File, path: &Path) {
    if flock(file, libc::LOCK_EX | libc::LOCK_NB).is_err()
        || ofd_lock(file, libc::F_WRLCK as libc::c_short, false).is_err()
    {
        return;
    }
    let wal = sidecar(path, "-wal");
    if std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0) {
        return;
    }
    let _ = std::fs::remove_file(&wal);
    let _ = std::fs::remove_file(sidecar(path, "-shm"));
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
