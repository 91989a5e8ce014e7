//! The FUSE adapter: translates kernel requests into workspace calls. Owns the write
//! buffers and open-file bookkeeping; everything else is the workspace API.
//!
//! This file holds the mount's state and its transactions (`with`: one savepoint per
//! request, metadata batched up to `MAX_BATCH`). The requests are served by concern:
//! `kernel` (FUSE_INIT options, the `Filesystem` trait, small requests), `attrs`
//! (getattr/setattr), `dirs` (names, links, listings), `files` (handles, reads, buffered
//! writes, close/fsync/fallocate/lseek), `xattrs`; `state` is what is remembered per
//! inode between requests, `outside` what the kernel must forget after a CLI change, and
//! `upkeep` the background audit and space reclaim.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen,
    ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use rusqlite::Connection;

mod attrs;
mod dirs;
mod files;
mod ignored;
mod ignored_write;
mod kernel;
mod outside;
mod state;
mod upkeep;
mod xattrs;
pub use upkeep::{RECLAIM_EVERY, TRIM_EVERY, audit_every};

use attrs::{attr_of, dummy_dir, file_type, full_attr, kill_suid};
use dirs::new_node;
use ignored::is_ign;

use super::buffer::DirtyFile;
use crate::error::{Error, Result};
use crate::workspace::{Budget, Inode, NewNode, ROOT_INO, SetAttr, Workspace, WorkspaceInfo};
use crate::workspace::{CHUNK_SIZE, Hash, Kind, Store, now_ns};

/// How long the kernel may cache names and attributes. Changes made behind the kernel's
/// back (CLI commands, restore) reach it through explicit invalidation instead.
const TTL: Duration = Duration::from_secs(30);
/// Longest time a batch of metadata changes stays uncommitted.
const MAX_BATCH: Duration = Duration::from_millis(50);
/// A file's write buffer is flushed to the vault once it holds this much. It is also
/// the largest transaction a write makes, so it bounds how far one commit can take the
/// WAL past its cap (`wal::CAP_BYTES`).
const MAX_DIRTY_PER_FILE: usize = 16 << 20;
/// All write buffers together: past this the largest is flushed, so that many files
/// written at once (stress-ng's iomix and copy-file) cannot take the server's memory
/// with them (they took it to 850 MB with a per-file bound alone).
const MAX_DIRTY_TOTAL: usize = 64 << 20;

/// How a request's transaction ends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    /// Batched with the next requests (committed within `MAX_BATCH`).
    Batch,
    /// Committed before the reply: survives a killed process (close, sync).
    Commit,
    /// Committed and synced to disk: survives power loss (fsync).
    Durable,
}

/// What the kernel must forget after an outside change (see `AvfsFs::outside_change`).
#[derive(Default, Debug)]
pub struct Invalidation {
    /// Cached names (parent, name).
    pub names: Vec<(u64, Vec<u8>)>,
    /// Inodes whose attributes and pages go.
    pub pages: Vec<u64>,
    /// Inodes whose attributes go.
    pub attrs: Vec<u64>,
}

/// Requests per operation, and the time spent serving them (ns, under the lock), read
/// through the control socket (`counters`); the benchmark prints them per workload.
pub type Counters = HashMap<&'static str, u64>;

/// A directory listing: a snapshot taken when a listing starts at offset 0 and kept
/// for the calls that continue it (as POSIX allows).
type Listing = Vec<(Vec<u8>, Inode)>;

pub struct State {
    ws_name: String,
    /// The workspace row, cached; reloaded after changes made from outside (restore).
    info: Option<WorkspaceInfo>,
    /// When the open write transaction began (metadata changes are batched).
    tx_since: Option<Instant>,
    dirty: HashMap<u64, DirtyFile>,
    /// Open file handles per inode.
    open: HashMap<u64, u32>,
    /// Inodes that must outlive their last name: open (a handle) or still held by the
    /// kernel (a lookup count it has not forgotten). An unlinked one stays an orphan,
    /// with its attributes and content, until the last close or FORGET, whichever is
    /// later, as a real file system keeps an unlinked inode while it is in use: with
    /// the writeback cache the kernel writes a dropped file's times back (a SETATTR)
    /// after the unlink, and an inode deleted at the unlink made `syncfs()` fail ESTALE.
    open_set: HashSet<u64>,
    /// Listings in progress, per directory. There are no directory handles: opendir
    /// answers ENOSYS, so the kernel never sends OPENDIR/RELEASEDIR (two requests per
    /// directory walked) and caches listings itself (FOPEN_CACHE_DIR by default).
    listings: HashMap<u64, Listing>,
    /// Inodes dropped while the kernel still had them (a removed directory someone
    /// may still have open): deleted once the kernel forgets them.
    forgotten: Vec<u64>,
    next_fh: u64,
    /// Names the kernel may have cached, for invalidation after outside changes.
    known: HashSet<(u64, Vec<u8>)>,
    /// Lookup counts the kernel holds per inode (FUSE's nlookup): once the kernel forgets
    /// an inode, what we remember about it for invalidation can go too.
    lookups: HashMap<u64, u64>,
    /// Directories whose listing the kernel may cache (FOPEN_CACHE_DIR).
    listed: HashSet<u64>,
    /// Open file handles that may write, or that created their file (fh -> ino): the only
    /// files that can have dirty pages in the kernel, and the only handles whose close()
    /// commits.
    writers: HashMap<u64, u64>,
    /// Content identity (hash, size) of every regular file the kernel was told about, as
    /// this mount last saw or produced it. With the writeback cache the kernel trusts
    /// its own idea of a file's size, so a file changed from outside (CLI, restore) must
    /// become a new kernel inode: this is how such files are found.
    files: HashMap<u64, (Option<Hash>, u64)>,
    /// Generation numbers of inodes changed from outside (default 0). A lookup answering
    /// a new generation makes the kernel drop its old inode and its cached size.
    gens: HashMap<u64, u64>,
    epoch: u64,
    /// Quota limits and usage, so quota checks cost no SQL per request.
    budget: Budget,
    /// A buffer was refused (quota): the kernel caches bytes the vault does not hold.
    refused: bool,
    /// Requests refused for a quota, and the last message (which names the quota).
    quota_refusals: (u64, String),
    pub counters: Counters,
    pub busy_ns: Counters,
    /// The root the last mount audit row accounts for (see `upkeep`).
    audited: Option<Hash>,
    /// The workspace's ignored files (`ignored`, `ignored_write`); `None`: not shown.
    ign: Option<ignored::Ignored>,
    /// Bytes of file data stored since space reclaim last looked (`upkeep::bound_garbage`).
    stored: u64,
}

pub struct AvfsFs {
    inner: Mutex<(Store, State)>,
    /// Wakes the mount's timer thread early (see `take_refused`).
    wake: std::sync::Condvar,
    readonly: bool,
    vault_dir: std::path::PathBuf,
}

fn errno(e: &Error) -> Errno {
    if matches!(e, Error::NotFound(s) if s.starts_with("inode ")) {
        return Errno::from_i32(libc::ESTALE);
    }
    Errno::from_i32(e.errno())
}

fn open_ws<'a>(
    db: &'a Connection,
    info: &Option<WorkspaceInfo>,
    name: &str,
    open: &'a HashSet<u64>,
    budget: &'a Budget,
) -> Result<Workspace<'a>> {
    let mut ws = match info {
        Some(i) => Workspace::with_info(db, i.clone()),
        None => Workspace::open(db, name)?,
    };
    ws.open_inos = Some(open);
    ws.budget = Some(budget);
    Ok(ws)
}

impl AvfsFs {
    pub fn new(mut store: Store, ws_name: &str, readonly: bool) -> Result<AvfsFs> {
        store.write(|db| {
            let ws = Workspace::open(db, ws_name)?;
            ws.purge_orphans()?;
            Ok(())
        })?;
        let vault_dir = store
            .path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| "/".into());
        let state = State {
            ws_name: ws_name.to_string(),
            info: None,
            tx_since: None,
            dirty: HashMap::new(),
            open: HashMap::new(),
            open_set: HashSet::new(),
            listings: HashMap::new(),
            forgotten: Vec::new(),
            next_fh: 1,
            known: HashSet::new(),
            writers: HashMap::new(),
            listed: HashSet::new(),
            lookups: HashMap::new(),
            files: HashMap::new(),
            gens: HashMap::new(),
            epoch: 0,
            budget: Budget::default(),
            refused: false,
            quota_refusals: (0, String::new()),
            counters: HashMap::new(),
            busy_ns: HashMap::new(),
            audited: None,
            ign: None,
            stored: 0,
        };
        Ok(AvfsFs {
            inner: Mutex::new((store, state)),
            wake: std::sync::Condvar::new(),
            readonly,
            vault_dir,
        })
    }

    /// Runs `f` inside the mount's open write transaction, in a savepoint of its own so a
    /// failed request undoes only itself. Metadata changes are batched: the transaction
    /// commits when `commit` says so (close, fsync, sync), or once it is `MAX_BATCH` old.
    fn with<T>(
        &self,
        op: &'static str,
        f: impl FnOnce(&Connection, &mut State) -> Result<T>,
    ) -> Result<T> {
        self.with_commit(op, End::Batch, f)
    }

    fn with_commit<T>(
        &self,
        op: &'static str,
        end: End,
        f: impl FnOnce(&Connection, &mut State) -> Result<T>,
    ) -> Result<T> {
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (store, state) = &mut *guard;
        let started = Instant::now();
        *state.counters.entry(op).or_default() += 1;
        let db = &store.conn;
        if state.tx_since.is_none() {
            Store::exec(db, "BEGIN IMMEDIATE")?;
            state.tx_since = Some(Instant::now());
            // Between our transactions another process may have changed the workspace
            // row (a restore starts a new live layer): read it again.
            state.info = None;
        }
        if state.info.is_none() {
            state.info = Some(
                crate::workspace::find_workspace(db, &state.ws_name)?
                    .ok_or_else(|| Error::NoSuchVault(state.ws_name.clone()))?,
            );
            state.budget.reload(db, &state.ws_name)?;
        }
        if !state.forgotten.is_empty() {
            let gone = std::mem::take(&mut state.forgotten);
            let ws = state.ws(db)?;
            for ino in gone {
                ws.drop_orphan(ino)?;
            }
        }
        Store::exec(db, "SAVEPOINT op")?;
        let r = f(db, state);
        state.budget.finish_request(r.is_ok());
        if let Err(Error::Quota(m)) = &r {
            state.quota_refusals.0 += 1;
            state.quota_refusals.1.clone_from(m);
        }
        match &r {
            Ok(_) => Store::exec(db, "RELEASE op")?,
            Err(_) => {
                Store::exec(db, "ROLLBACK TO op")?;
                Store::exec(db, "RELEASE op")?;
            }
        }
        if end != End::Batch || state.tx_since.is_some_and(|t| t.elapsed() > MAX_BATCH) {
            Self::commit(db, state)?;
            // Between two transactions, under the lock: the WAL's bound (a failed
            // checkpoint is tried again after the next commit; the data is committed).
            state.count_wal_cap(super::wal::cap(store));
            self.bound_garbage(store, state);
        }
        if end == End::Durable && r.is_ok() {
            // Still under the lock, so no other request has begun a transaction.
            super::wal::make_durable(store)?;
        }
        *state.busy_ns.entry(op).or_default() += started.elapsed().as_nanos() as u64;
        if state.refused {
            self.wake.notify_all();
        }
        r.map_err(|e| store.corrupt_if_sqlite(e))
    }

    /// A listing was read to its end: its snapshot can go.
    fn end_listing(&self, dir: u64) {
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        guard.1.listings.remove(&dir);
    }

    fn commit(db: &Connection, state: &mut State) -> Result<()> {
        if state.tx_since.take().is_some()
            && let Err(e) = Store::exec(db, "COMMIT")
        {
            let _ = Store::exec(db, "ROLLBACK");
            state.info = None;
            state.budget.forget_usage();
            return Err(e);
        }
        Ok(())
    }

    /// Commits a batch that has been open for a while (called from a timer).
    pub fn commit_if_stale(&self) {
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (store, state) = &mut *guard;
        if state.tx_since.is_some_and(|t| t.elapsed() > MAX_BATCH) {
            let _ = Self::commit(&store.conn, state);
            state.count_wal_cap(super::wal::cap(store));
            self.bound_garbage(store, state);
        }
    }

    /// Flushes every buffer and commits; the control socket calls this before another
    /// process reads the workspace. `durable` also makes it survive power loss.
    pub fn sync(&self, durable: bool) -> Result<()> {
        let end = if durable { End::Durable } else { End::Commit };
        self.with_commit("sync", end, |db, st| st.flush_all(db))
    }

    /// Copies every committed page from the WAL into the vault file (at unmount), so
    /// that copying the .avfs file alone copies everything, as after any other command,
    /// and empties the WAL file when no other process is reading (else it stays for
    /// that process's last command to empty).
    pub fn checkpoint_wal(&self) -> Result<()> {
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (store, state) = &mut *guard;
        Self::commit(&store.conn, state)?;
        super::wal::empty(store)
    }

    /// True once after a file's buffered writes were refused (a quota): the kernel still
    /// caches them, so the caller runs an invalidation (`outside_change`), which gives
    /// such files a new kernel inode.
    pub fn take_refused(&self) -> bool {
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::take(&mut guard.1.refused)
    }

    /// How many requests a quota refused so far, and the last refusal's message.
    pub fn quota_refusals(&self) -> (u64, String) {
        let guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        guard.1.quota_refusals.clone()
    }

    /// Sleeps up to `max`, less when a request refused writes (see `take_refused`).
    pub fn wait_for_work(&self, max: Duration) {
        let guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if !guard.1.refused {
            let _ = self.wake.wait_timeout(guard, max);
        }
    }

    /// Counts a request answered without the vault.
    fn count(&self, op: &'static str) {
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        *guard.1.counters.entry(op).or_default() += 1;
    }

    /// Requests served so far, the background work's own (reclaim, audit) left out.
    pub fn requests(&self) -> u64 {
        let guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        guard
            .1
            .counters
            .iter()
            .filter(|(op, _)| !matches!(**op, "reclaim" | "reclaim_inline" | "audit"))
            .map(|(_, n)| *n)
            .sum()
    }

    /// (requests, busy ns) per operation.
    pub fn counters(&self) -> (Counters, Counters) {
        let guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        (guard.1.counters.clone(), guard.1.busy_ns.clone())
    }

    fn check_writable(&self) -> Result<()> {
        if self.readonly {
            return Err(Error::Refused("read-only mount".into()));
        }
        Ok(())
    }
}

fn erofs<T>(r: Result<T>, readonly: bool) -> std::result::Result<T, Errno> {
    r.map_err(|e| {
        if readonly && matches!(e, Error::Refused(_)) {
            Errno::from_i32(libc::EROFS)
        } else {
            errno(&e)
        }
    })
}
