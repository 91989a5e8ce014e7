//! The FUSE adapter: translates kernel requests into workspace calls. Owns the write
//! buffers and open-file bookkeeping; everything else is the workspace API.

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

mod upkeep;
pub use upkeep::{AUDIT_EVERY, RECLAIM_EVERY};

use super::buffer::DirtyFile;
use crate::error::{Error, Result};
use crate::store::objects::{CHUNK_SIZE, Hash, Kind};
use crate::store::{Store, now_ns};
use crate::workspace::{Budget, Inode, NewNode, ROOT_INO, SetAttr, Workspace, WorkspaceInfo};

/// How long the kernel may cache names and attributes. Changes made behind the kernel's
/// back (CLI commands, restore) reach it through explicit invalidation instead.
const TTL: Duration = Duration::from_secs(30);
/// Longest time a batch of metadata changes stays uncommitted.
const MAX_BATCH: Duration = Duration::from_millis(50);
/// A file's write buffer is flushed to the vault once it holds this much.
const MAX_DIRTY_PER_FILE: usize = 64 << 20;

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

fn ts(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

fn ns_of(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i64,
        Err(e) => -(e.duration().as_nanos() as i64),
    }
}

fn file_type(k: Kind) -> FileType {
    match k {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
        Kind::Fifo => FileType::NamedPipe,
        Kind::Socket => FileType::Socket,
        Kind::CharDev => FileType::CharDevice,
        Kind::BlockDev => FileType::BlockDevice,
    }
}

fn attr_of(i: &Inode, dirty: Option<&DirtyFile>) -> FileAttr {
    let size = dirty.map_or(i.size, |d| d.size());
    FileAttr {
        ino: INodeNo(i.ino),
        size,
        blocks: size.div_ceil(512),
        atime: ts(i.atime_ns.unwrap_or(i.mtime_ns)),
        mtime: ts(i.mtime_ns),
        ctime: ts(i.ctime_ns),
        crtime: ts(i.ctime_ns),
        kind: file_type(i.kind),
        perm: (i.mode & 0o7777) as u16,
        nlink: i.nlink,
        uid: i.uid,
        gid: i.gid,
        rdev: i.rdev as u32,
        blksize: 65536,
        flags: 0,
    }
}

/// `attr_of` with what needs the vault: a directory's link count (2 + subdirectories) and
/// the blocks a sparse file really holds (what `du` shows).
fn full_attr(ws: &Workspace, i: &Inode, dirty: Option<&DirtyFile>) -> Result<FileAttr> {
    let mut a = attr_of(i, dirty);
    if i.kind == Kind::Dir {
        a.nlink = ws.dir_nlink(i)?;
    } else if i.kind == Kind::File && dirty.is_none() && i.size > CHUNK_SIZE as u64 {
        a.blocks = ws.extents(i)?.allocated().div_ceil(512);
    }
    Ok(a)
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

impl State {
    fn ws<'a>(&'a self, db: &'a Connection) -> Result<Workspace<'a>> {
        open_ws(db, &self.info, &self.ws_name, &self.open_set, &self.budget)
    }

    /// Refuses to let a buffered file grow past a quota (costs nothing without quotas).
    fn may_grow(&self, db: &Connection, stored: u64, size: u64) -> Result<()> {
        if size > stored && self.budget.limited() {
            self.ws(db)?.check_growth(stored, size)?;
        }
        Ok(())
    }

    fn attr(&self, db: &Connection, i: &Inode) -> Result<FileAttr> {
        full_attr(&self.ws(db)?, i, self.dirty.get(&i.ino))
    }

    fn generation(&self, ino: u64) -> Generation {
        Generation(self.gens.get(&ino).copied().unwrap_or(0))
    }

    /// Attributes for an entry reply (the kernel may make an inode of it): remembers
    /// what the kernel was told, unless an earlier answer is still to be compared.
    fn entry(&mut self, db: &Connection, i: &Inode) -> Result<(FileAttr, Generation)> {
        let a = self.attr(db, i)?;
        if i.kind == Kind::File {
            self.files.entry(i.ino).or_insert((i.hash, i.size));
        }
        self.kernel_ref(i.ino);
        Ok((a, self.generation(i.ino)))
    }

    /// The kernel took a reference to `ino` (an entry reply). An inode it knows is
    /// treated as open (see `open_set`): removed, it stays an orphan until the kernel
    /// forgets it. Without directory handles this is also how a removed directory that a
    /// process still has open (or as cwd) stays readable.
    fn kernel_ref(&mut self, ino: u64) {
        *self.lookups.entry(ino).or_default() += 1;
        if ino != ROOT_INO {
            self.open_set.insert(ino);
        }
    }

    /// The kernel dropped `n` references to `ino`; at none it has no inode for it left.
    fn forget(&mut self, ino: u64, n: u64) {
        if cfg!(debug_assertions) {
            *self.counters.entry("forget").or_default() += 1;
        }
        if let Some(c) = self.lookups.get_mut(&ino) {
            *c = c.saturating_sub(n);
            if *c == 0 {
                self.lookups.remove(&ino);
                self.files.remove(&ino);
                self.gens.remove(&ino);
                if !self.open.contains_key(&ino) && self.open_set.remove(&ino) {
                    self.forgotten.push(ino);
                }
            }
        }
    }

    /// This mount changed a file's stored content itself: the kernel knows.
    fn own(&mut self, i: &Inode) {
        if i.kind == Kind::File {
            self.files.insert(i.ino, (i.hash, i.size));
        }
    }

    /// Writes one file's buffer into the vault (inside the caller's transaction).
    fn flush_file(&mut self, db: &Connection, ino: u64) -> Result<()> {
        if self.dirty.contains_key(&ino) {
            // All or nothing, also inside a request that goes on (release).
            Store::exec(db, "SAVEPOINT flush_file")?;
            let d = self.dirty.remove(&ino).unwrap();
            let r = d.commit(db).and_then(|(hash, size)| {
                let ws = self.ws(db)?;
                if let Some(i) = ws.try_get(ino)? {
                    let i = ws.set_content_of(i, hash, size, d.mtime_ns)?;
                    self.own(&i);
                }
                Ok(())
            });
            if r.is_err() {
                Store::exec(db, "ROLLBACK TO flush_file")?;
            }
            Store::exec(db, "RELEASE flush_file")?;
            if let Err(e) = &r {
                // Refused (a quota) or failed: nothing of it is stored, and the buffer
                // stays as it was; the last release drops it. The kernel's cached size
                // and pages of the file must go (see `take_refused`).
                self.dirty.insert(ino, d);
                if matches!(e, Error::Quota(_)) {
                    self.files.insert(ino, (None, u64::MAX));
                    self.refused = true;
                }
            }
            return r;
        }
        Ok(())
    }

    /// The listing of `dir` for a readdir at `offset`: a fresh snapshot when a listing
    /// starts, else the one in progress.
    fn listing(&mut self, db: &Connection, dir: u64, offset: u64) -> Result<&Listing> {
        if offset == 0 || !self.listings.contains_key(&dir) {
            let entries = {
                let ws = self.ws(db)?;
                let d = ws.get(dir)?;
                if d.kind != Kind::Dir {
                    return Err(Error::NotADirectory(String::new()));
                }
                ws.readdir(&d)?
            };
            self.listed.insert(dir);
            self.listings.insert(dir, entries);
        }
        Ok(&self.listings[&dir])
    }

    /// Stores every buffer. One a quota refuses stays as it is, for its file's close() to
    /// report: another process asking for a consistent view (sync) gets what the vault
    /// holds instead of an error about somebody else's write.
    fn flush_all(&mut self, db: &Connection) -> Result<()> {
        let inos: Vec<u64> = self.dirty.keys().copied().collect();
        for ino in inos {
            match self.flush_file(db, ino) {
                Ok(()) | Err(Error::Quota(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
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
            let _ = super::wal::cap(store);
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
            let _ = super::wal::cap(store);
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

    /// After a change made outside the mount (CLI, restore): works out what the kernel
    /// must forget. Every name it may have cached goes; files whose content changed get
    /// a new generation (so the next lookup makes a fresh kernel inode, whose size is not
    /// the stale cached one) and lose their pages; files that no longer exist lose their
    /// pages, so open handles reach us and fail with ESTALE instead of showing old data.
    pub fn outside_change(&self) -> Result<Invalidation> {
        self.with("invalidate", |db, st| {
            st.info = None;
            st.budget.forget_usage();
            st.info = Some(
                crate::workspace::find_workspace(db, &st.ws_name)?
                    .ok_or_else(|| Error::NoSuchVault(st.ws_name.clone()))?,
            );
            // Another command changed the workspace and audited that itself: the mount's
            // own account goes on from the state it left.
            if st.audited.is_some() {
                st.audited = Some(st.ws(db)?.flush()?);
            }
            let mut inv = Invalidation::default();
            let mut vanished = Vec::new();
            let mut changed = Vec::new();
            {
                let ws = st.ws(db)?;
                for (&ino, fp) in &st.files {
                    match ws.try_get(ino)? {
                        None => vanished.push(ino),
                        Some(i) if (i.hash, i.size) != *fp => changed.push((ino, (i.hash, i.size))),
                        Some(_) => {}
                    }
                }
            }
            for ino in vanished {
                st.files.remove(&ino);
                st.gens.remove(&ino);
                inv.pages.push(ino);
            }
            for (ino, fp) in changed {
                st.epoch += 1;
                st.gens.insert(ino, st.epoch);
                st.files.insert(ino, fp);
                inv.pages.push(ino);
            }
            inv.names = st.known.drain().collect();
            // Directories whose names or listings were cached and the root lose their
            // attributes and cached listings (FOPEN_CACHE_DIR keeps those in the
            // directory's pages); open files lose their attributes (mode, owner, times).
            let mut pages: Vec<u64> = inv
                .names
                .iter()
                .map(|(p, _)| *p)
                .chain(st.listed.drain())
                .chain([ROOT_INO])
                .collect();
            pages.sort_unstable();
            pages.dedup();
            inv.pages.extend(pages);
            inv.attrs = st.open.keys().copied().collect();
            Ok(inv)
        })
    }

    /// Paths (relative to the mountpoint) of files open for writing: the files whose
    /// pages the kernel may hold dirty. Unlinked files have none and are left out.
    pub fn written_paths(&self) -> Result<Vec<std::path::PathBuf>> {
        self.with("written_paths", |db, st| {
            let ws = st.ws(db)?;
            let mut inos: Vec<u64> = st.writers.values().copied().collect();
            inos.sort_unstable();
            inos.dedup();
            let mut out = Vec::new();
            'files: for ino in inos {
                let mut comps: Vec<Vec<u8>> = Vec::new();
                let mut cur = ino;
                while cur != ROOT_INO {
                    let Some((parent, name)) = ws.names_of(cur)?.into_iter().next() else {
                        continue 'files;
                    };
                    comps.push(name);
                    cur = parent;
                    if comps.len() > 4096 {
                        continue 'files;
                    }
                }
                let mut p = std::path::PathBuf::new();
                for c in comps.iter().rev() {
                    p.push(OsStr::from_bytes(c));
                }
                out.push(p);
            }
            Ok(out)
        })
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

    /// (requests, busy ns) per operation.
    /// Counts a request answered without the vault.
    fn count(&self, op: &'static str) {
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        *guard.1.counters.entry(op).or_default() += 1;
    }

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

/// The mode after the VFS's "kill privileges" rule: no setuid; no setgid if group-executable.
fn kill_suid(mode: u32) -> u32 {
    let mut m = mode & !0o4000;
    if m & 0o010 != 0 {
        m &= !0o2000;
    }
    m
}

/// The answer for any attribute outside `user.*`: the mount stores only `user.*`, so the
/// other namespaces (security, system ACLs, trusted) are not supported, for reading as for
/// writing. EOPNOTSUPP rather than ENODATA matters for speed: `ls -l`, `cp` and others
/// then remember that the filesystem has no SELinux labels or ACLs and stop asking, where
/// ENODATA costs a kernel round trip per file (FUSE caches no missing attributes).
const XATTR_UNSUPPORTED: i32 = libc::EOPNOTSUPP;

fn erofs<T>(r: Result<T>, readonly: bool) -> std::result::Result<T, Errno> {
    r.map_err(|e| {
        if readonly && matches!(e, Error::Refused(_)) {
            Errno::from_i32(libc::EROFS)
        } else {
            errno(&e)
        }
    })
}

/// New files and directories take the caller's ids; a setgid directory passes on its group.
fn new_node(req: &Request, parent: &Inode, kind: Kind, mode: u32) -> NewNode {
    let mut n = NewNode::new(kind, mode & 0o7777);
    n.uid = req.uid();
    n.gid = req.gid();
    if parent.mode & 0o2000 != 0 {
        n.gid = parent.gid;
        if kind == Kind::Dir {
            n.mode |= 0o2000;
        }
    }
    n
}

impl Filesystem for AvfsFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        AvfsFs::configure_kernel(config)
    }

    fn destroy(&mut self) {
        let _ = self.sync(true);
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.lookup_impl(parent, name, reply)
    }
    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        guard.1.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.with("getattr", |db, st| st.attr(db, &st.ws(db)?.get(ino.0)?)) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let r = self.check_writable().and_then(|_| {
            self.with("setattr", |db, st| {
                let cur = st.ws(db)?.get(ino.0)?;
                if let Some(size) = size {
                    if cur.kind == Kind::Dir {
                        return Err(Error::IsADirectory(String::new()));
                    }
                    // Past the largest file size: EFBIG, before anything is allocated.
                    crate::store::content::check_size(size)?;
                    if let Some(d) = st.dirty.get(&ino.0) {
                        st.may_grow(db, d.stored_size, size)?;
                    }
                    if let Some(d) = st.dirty.get_mut(&ino.0) {
                        d.truncate(db, size)?;
                    } else if cur.kind == Kind::File && cur.size != size {
                        st.ws(db)?.setattr(
                            ino.0,
                            &SetAttr {
                                size: Some(size),
                                ..Default::default()
                            },
                        )?;
                    }
                }
                let mut set = SetAttr {
                    mode: mode.map(|m| m & 0o7777),
                    uid,
                    gid,
                    size: None,
                    mtime_ns: mtime.map(|t| match t {
                        TimeOrNow::Now => now_ns(),
                        TimeOrNow::SpecificTime(t) => ns_of(t),
                    }),
                    atime_ns: atime.map(|t| match t {
                        TimeOrNow::Now => now_ns(),
                        TimeOrNow::SpecificTime(t) => ns_of(t),
                    }),
                };
                if size.is_some() && set.mtime_ns.is_none() {
                    set.mtime_ns = Some(now_ns());
                }
                // HANDLE_KILLPRIV_V2: we clear setuid/setgid as the VFS would: on chown of
                // a non-directory, and on truncate by a caller without CAP_FSETID
                // (approximated as non-root). Setgid goes only with group-execute.
                let chown = (uid.is_some() || gid.is_some()) && cur.kind != Kind::Dir;
                let trunc = size.is_some() && req.uid() != 0;
                if mode.is_none() && (chown || trunc) && kill_suid(cur.mode) != cur.mode {
                    set.mode = Some(kill_suid(cur.mode));
                }
                // Times set while writes are buffered are the times the file keeps
                // when the buffer is stored (close), not the time of the close.
                if let (Some(t), Some(d)) = (set.mtime_ns, st.dirty.get_mut(&ino.0)) {
                    d.mtime_ns = t;
                }
                let ws = st.ws(db)?;
                // A truncate above changed the stored inode: read it again.
                let i = if size.is_some() {
                    ws.setattr(ino.0, &set)?
                } else {
                    ws.setattr_of(cur, &set)?
                };
                st.own(&i);
                st.attr(db, &i)
            })
        });
        match erofs(r, self.readonly) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.with("readlink", |db, st| st.ws(db)?.get(ino.0)) {
            Ok(i) => match i.target {
                Some(t) => reply.data(&t),
                None => reply.error(Errno::from_i32(libc::EINVAL)),
            },
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let kind = match mode & libc::S_IFMT {
            libc::S_IFREG | 0 => Kind::File,
            libc::S_IFIFO => Kind::Fifo,
            libc::S_IFSOCK => Kind::Socket,
            libc::S_IFCHR => Kind::CharDev,
            libc::S_IFBLK => Kind::BlockDev,
            _ => return reply.error(Errno::from_i32(libc::EINVAL)),
        };
        self.make(
            req,
            parent,
            name,
            kind,
            mode,
            None,
            rdev as u64,
            "mknod",
            reply,
        )
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        self.make(req, parent, name, Kind::Dir, mode, None, 0, "mkdir", reply)
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let t = target.as_os_str().as_bytes().to_vec();
        self.make(
            req,
            parent,
            link_name,
            Kind::Symlink,
            0o777,
            Some(t),
            0,
            "symlink",
            reply,
        )
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.check_writable().and_then(|_| {
            self.with("unlink", |db, st| {
                let ws = st.ws(db)?;
                let p = ws.get(parent.0)?;
                ws.unlink(&p, name.as_bytes())
            })
        });
        match erofs(r, self.readonly) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.check_writable().and_then(|_| {
            self.with("rmdir", |db, st| {
                let ws = st.ws(db)?;
                let p = ws.get(parent.0)?;
                ws.rmdir(&p, name.as_bytes())
            })
        });
        match erofs(r, self.readonly) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if flags.contains(RenameFlags::RENAME_WHITEOUT) {
            return reply.error(Errno::from_i32(libc::EINVAL));
        }
        let r = self.check_writable().and_then(|_| {
            self.with("rename", |db, st| {
                let ws = st.ws(db)?;
                let p = ws.get(parent.0)?;
                let np = ws.get(newparent.0)?;
                let f = crate::workspace::RenameFlags {
                    noreplace: flags.contains(RenameFlags::RENAME_NOREPLACE),
                    exchange: flags.contains(RenameFlags::RENAME_EXCHANGE),
                };
                ws.rename(&p, name.as_bytes(), &np, newname.as_bytes(), f)?;
                st.known.insert((newparent.0, newname.as_bytes().to_vec()));
                Ok(())
            })
        });
        match erofs(r, self.readonly) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let r = self.check_writable().and_then(|_| {
            self.with("link", |db, st| {
                let ws = st.ws(db)?;
                let np = ws.get(newparent.0)?;
                let i = ws.link(ino.0, &np, newname.as_bytes())?;
                st.known.insert((newparent.0, newname.as_bytes().to_vec()));
                st.entry(db, &i)
            })
        });
        match erofs(
            r.map_err(|e| {
                if let Error::Refused(_) = e {
                    Error::Refused(String::new())
                } else {
                    e
                }
            }),
            self.readonly,
        ) {
            Ok((a, g)) => reply.entry(&TTL, &a, g),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let r = self.with("open", |db, st| {
            let i = st.ws(db)?.get(ino.0)?;
            if i.kind == Kind::Dir {
                return Err(Error::IsADirectory(String::new()));
            }
            let fh = st.next_fh;
            st.next_fh += 1;
            *st.open.entry(ino.0).or_default() += 1;
            st.open_set.insert(ino.0);
            if flags.0 & libc::O_ACCMODE != libc::O_RDONLY {
                st.writers.insert(fh, ino.0);
            }
            Ok(fh)
        });
        match r {
            // All changes reach the file through this mount or come with an explicit
            // invalidation, so the kernel may keep its page cache across opens.
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let r = self.with("read", |db, st| match st.dirty.get(&ino.0) {
            Some(d) => d.read(db, offset, size as usize),
            None => {
                let ws = st.ws(db)?;
                let i = ws.get(ino.0)?;
                ws.read(&i, offset, size as usize)
            }
        });
        match r {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let r = self.check_writable().and_then(|_| {
            self.with("write", |db, st| {
                if !st.dirty.contains_key(&ino.0) {
                    let i = st.ws(db)?.get(ino.0)?;
                    if i.kind != Kind::File {
                        return Err(Error::InvalidArgument(String::new(), "not a file".into()));
                    }
                    let d =
                        DirtyFile::new(db, &i.hash.unwrap_or(crate::store::objects::HOLE), i.size)?;
                    st.dirty.insert(ino.0, d);
                }
                if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
                    let ws = st.ws(db)?;
                    let i = ws.get(ino.0)?;
                    if kill_suid(i.mode) != i.mode {
                        ws.setattr(
                            ino.0,
                            &SetAttr {
                                mode: Some(kill_suid(i.mode)),
                                ..Default::default()
                            },
                        )?;
                    }
                }
                // A write the caller waits for is refused at once. A delayed one from the
                // page cache is checked when the file is stored (close, fsync): refused
                // there, close() fails with EDQUOT, where a failed writeback means EIO.
                if !write_flags.contains(WriteFlags::FUSE_WRITE_CACHE) {
                    let stored = st.dirty[&ino.0].stored_size;
                    st.may_grow(db, stored, offset.saturating_add(data.len() as u64))?;
                }
                let d = st.dirty.get_mut(&ino.0).unwrap();
                if let Err(e) = d.write(db, offset, data) {
                    if matches!(e, Error::TooBig(_))
                        && write_flags.contains(WriteFlags::FUSE_WRITE_CACHE)
                    {
                        // Past the largest file size, from the page cache: the kernel
                        // believes in a size the file will never have; a new kernel inode
                        // (see `take_refused`) shows what the vault holds.
                        st.files.insert(ino.0, (None, u64::MAX));
                        st.refused = true;
                    }
                    return Err(e);
                }
                if d.bytes() > MAX_DIRTY_PER_FILE {
                    st.flush_file(db, ino.0)?;
                }
                Ok(data.len() as u32)
            })
        });
        match erofs(r, self.readonly) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        {
            // A read-only handle whose file has nothing buffered changed nothing that
            // close() must make durable: no transaction (git reads thousands of files).
            let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            let st = &mut guard.1;
            if !st.writers.contains_key(&fh.0) && !st.dirty.contains_key(&ino.0) {
                *st.counters.entry("flush").or_default() += 1;
                return reply.ok();
            }
        }
        // close(): everything written so far is committed before close returns.
        match self.with_commit("flush", End::Commit, |db, st| st.flush_file(db, ino.0)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        {
            // Fast path: nothing buffered and other handles remain, or nothing to delete.
            let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            let st = &mut guard.1;
            st.writers.remove(&fh.0);
            if !st.dirty.contains_key(&ino.0) {
                let n = st.open.entry(ino.0).or_default();
                if *n > 1 {
                    *n -= 1;
                    return reply.ok();
                }
            }
        }
        let r = self.with_commit("release", End::Batch, |db, st| {
            let flushed = st.flush_file(db, ino.0);
            let n = st.open.entry(ino.0).or_default();
            // A buffer a quota refused goes with the last handle; one that failed for
            // another reason stays for the next flush (sync, unmount) to try again.
            match flushed {
                Err(Error::Quota(_)) if *n <= 1 => {
                    st.dirty.remove(&ino.0);
                }
                Err(e) => return Err(e),
                Ok(()) => {}
            }
            *n = n.saturating_sub(1);
            if *n == 0 {
                st.open.remove(&ino.0);
                // Still held by the kernel: an orphan waits for its FORGET (`forget`).
                if !st.lookups.contains_key(&ino.0) {
                    st.open_set.remove(&ino.0);
                    st.ws(db)?.drop_orphan(ino.0)?;
                }
            }
            Ok(())
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // Our own control thread fsyncs open files only to get the kernel's dirty pages
        // (see control.rs); it makes the result durable itself when it has to.
        let end = if req.pid() == std::process::id() {
            End::Commit
        } else {
            End::Durable
        };
        let r = self.with_commit("fsync", end, |db, st| st.flush_file(db, ino.0));
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // "Not implemented": the kernel stops sending OPENDIR and RELEASEDIR for good
        // and opens directories itself with FOPEN_KEEP_CACHE | FOPEN_CACHE_DIR. The
        // kernel still checks that the inode is a directory and its permissions.
        reply.error(Errno::from_i32(libc::ENOSYS))
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let r = self.with("readdir", |db, st| {
            let entries = st.listing(db, ino.0, offset)?;
            let mut i = offset;
            if i == 0 {
                if reply.add(ino, 1, FileType::Directory, ".") {
                    return Ok(false);
                }
                i = 1;
            }
            if i == 1 {
                if reply.add(ino, 2, FileType::Directory, "..") {
                    return Ok(false);
                }
                i = 2;
            }
            for (n, (name, inode)) in entries.iter().enumerate().skip((i - 2) as usize) {
                if reply.add(
                    INodeNo(inode.ino),
                    n as u64 + 3,
                    file_type(inode.kind),
                    OsStr::from_bytes(name),
                ) {
                    return Ok(false);
                }
            }
            Ok(true)
        });
        match r {
            Ok(done) => {
                if done {
                    self.end_listing(ino.0);
                }
                reply.ok()
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let r = self.with("readdirplus", |db, st| {
            st.listing(db, ino.0, offset)?;
            let st = &mut *st;
            let entries = &st.listings[&ino.0];
            // The kernel skips "." and ".." of a readdirplus reply (no dentries for them).
            let dot = FileAttr {
                ino,
                kind: FileType::Directory,
                ..attr_of(&dummy_dir(), None)
            };
            let mut i = offset;
            if i == 0 {
                if reply.add(ino, 1, ".", &Duration::ZERO, &dot, Generation(0)) {
                    return Ok(false);
                }
                i = 1;
            }
            if i == 1 {
                if reply.add(ino, 2, "..", &Duration::ZERO, &dot, Generation(0)) {
                    return Ok(false);
                }
                i = 2;
            }
            let mut added = Vec::new();
            let mut done = true;
            for (n, (name, inode)) in entries.iter().enumerate().skip((i - 2) as usize) {
                let a = full_attr(&st.ws(db)?, inode, st.dirty.get(&inode.ino))?;
                let g = Generation(st.gens.get(&inode.ino).copied().unwrap_or(0));
                if reply.add(
                    INodeNo(inode.ino),
                    n as u64 + 3,
                    OsStr::from_bytes(name),
                    &TTL,
                    &a,
                    g,
                ) {
                    done = false;
                    break;
                }
                added.push((name.clone(), inode.ino, inode.kind, inode.hash, inode.size));
            }
            for (name, child, kind, hash, size) in added {
                st.kernel_ref(child);
                st.known.insert((ino.0, name));
                if kind == Kind::File {
                    st.files.entry(child).or_insert((hash, size));
                }
            }
            Ok(done)
        });
        match r {
            Ok(done) => {
                if done {
                    self.end_listing(ino.0);
                }
                reply.ok()
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let _ = (req, ino, fh, datasync);
        match self.sync(true) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // Space is the host's (the vault file grows on the disk it lives on).
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        let c = std::ffi::CString::new(self.vault_dir.as_os_str().as_bytes()).unwrap_or_default();
        // SAFETY: `c` is a valid NUL-terminated path and `s` a writable statvfs.
        let ok = unsafe { libc::statvfs(c.as_ptr(), &mut s) } == 0;
        let files = self.with("statfs", |db, _| {
            Ok(db.query_row("SELECT COUNT(*) FROM inode", [], |r| r.get::<_, i64>(0))? as u64)
        });
        if !ok {
            return reply.error(Errno::from_i32(libc::EIO));
        }
        let files = files.unwrap_or(0);
        reply.statfs(
            s.f_blocks,
            s.f_bfree,
            s.f_bavail,
            files + s.f_ffree,
            s.f_ffree,
            s.f_bsize as u32,
            255,
            s.f_frsize as u32,
        );
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        if !name.as_bytes().starts_with(b"user.") {
            return reply.error(Errno::from_i32(XATTR_UNSUPPORTED));
        }
        let r = self.check_writable().and_then(|_| {
            self.with("setxattr", |db, st| {
                let ws = st.ws(db)?;
                let exists = ws.xattrs(ino.0)?.iter().any(|(n, _)| n == name.as_bytes());
                if flags & libc::XATTR_CREATE != 0 && exists {
                    return Err(Error::Exists(String::new()));
                }
                if flags & libc::XATTR_REPLACE != 0 && !exists {
                    return Err(Error::InvalidArgument(String::new(), "ENODATA".into()));
                }
                ws.set_xattr(ino.0, name.as_bytes(), value)
            })
        });
        match r {
            Ok(()) => reply.ok(),
            Err(Error::InvalidArgument(_, m)) if m == "ENODATA" => {
                reply.error(Errno::from_i32(libc::ENODATA))
            }
            Err(e) => reply.error(erofs::<()>(Err(e), self.readonly).unwrap_err()),
        }
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        // Only user.* attributes are stored; the kernel asks for security.capability on
        // every chown and write, so answer those without touching the vault.
        if !name.as_bytes().starts_with(b"user.") {
            self.count("getxattr_unsupported");
            return reply.error(Errno::from_i32(XATTR_UNSUPPORTED));
        }
        let r = self.with("getxattr", |db, st| {
            Ok(st
                .ws(db)?
                .xattrs(ino.0)?
                .into_iter()
                .find(|(n, _)| n == name.as_bytes())
                .map(|(_, v)| v))
        });
        match r {
            Ok(Some(v)) if size == 0 => reply.size(v.len() as u32),
            Ok(Some(v)) if v.len() > size as usize => reply.error(Errno::from_i32(libc::ERANGE)),
            Ok(Some(v)) => reply.data(&v),
            Ok(None) => reply.error(Errno::from_i32(libc::ENODATA)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let r = self.with("listxattr", |db, st| {
            let mut out = Vec::new();
            for (n, _) in st.ws(db)?.xattrs(ino.0)? {
                out.extend_from_slice(&n);
                out.push(0);
            }
            Ok(out)
        });
        match r {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() > size as usize => reply.error(Errno::from_i32(libc::ERANGE)),
            Ok(v) => reply.data(&v),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if !name.as_bytes().starts_with(b"user.") {
            let e = if self.readonly {
                libc::EROFS
            } else {
                XATTR_UNSUPPORTED
            };
            return reply.error(Errno::from_i32(e));
        }
        let r = self.check_writable().and_then(|_| {
            self.with("removexattr", |db, st| {
                st.ws(db)?.remove_xattr(ino.0, name.as_bytes())
            })
        });
        match r {
            Ok(true) => reply.ok(),
            Ok(false) => reply.error(Errno::from_i32(libc::ENODATA)),
            Err(e) => reply.error(erofs::<()>(Err(e), self.readonly).unwrap_err()),
        }
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // default_permissions: the kernel checks modes itself.
        reply.ok();
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let r = self.check_writable().and_then(|_| {
            self.with("create", |db, st| {
                let ws = open_ws(db, &st.info, &st.ws_name, &st.open_set, &st.budget)?;
                let p = ws.get(parent.0)?;
                let mut truncated = false;
                let inode = match ws.lookup(&p, name.as_bytes())? {
                    Some(_) if flags & libc::O_EXCL != 0 => {
                        return Err(Error::Exists(String::new()));
                    }
                    Some(existing) if existing.kind == Kind::Dir => {
                        return Err(Error::IsADirectory(String::new()));
                    }
                    Some(existing) => {
                        if flags & libc::O_TRUNC != 0
                            && (existing.size != 0 || st.dirty.contains_key(&existing.ino))
                        {
                            st.dirty.remove(&existing.ino);
                            truncated = true;
                            ws.setattr(
                                existing.ino,
                                &SetAttr {
                                    size: Some(0),
                                    ..Default::default()
                                },
                            )?
                        } else {
                            existing
                        }
                    }
                    None => {
                        ws.create_absent(&p, name.as_bytes(), new_node(req, &p, Kind::File, mode))?
                    }
                };
                st.known.insert((parent.0, name.as_bytes().to_vec()));
                if truncated {
                    st.own(&inode);
                }
                let fh = st.next_fh;
                st.next_fh += 1;
                *st.open.entry(inode.ino).or_default() += 1;
                st.open_set.insert(inode.ino);
                // Even O_RDONLY: the handle made the file, and its close() commits that.
                st.writers.insert(fh, inode.ino);
                Ok((st.entry(db, &inode)?, fh))
            })
        });
        match erofs(r, self.readonly) {
            Ok(((a, g), fh)) => {
                reply.created(&TTL, &a, g, FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE)
            }
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let r = self.check_writable().and_then(|_| {
            self.with("fallocate", |db, st| {
                if !st.dirty.contains_key(&ino.0) {
                    let i = st.ws(db)?.get(ino.0)?;
                    if i.kind != Kind::File {
                        return Err(Error::InvalidArgument(String::new(), "not a file".into()));
                    }
                    st.dirty.insert(
                        ino.0,
                        DirtyFile::new(db, &i.hash.unwrap_or(crate::store::objects::HOLE), i.size)?,
                    );
                }
                // Past the largest file size: EFBIG, as ext4 answers; nothing allocated.
                let end = crate::store::content::end_of(offset, length)?;
                if mode == 0 {
                    st.may_grow(db, st.dirty[&ino.0].stored_size, end)?;
                }
                let d = st.dirty.get_mut(&ino.0).unwrap();
                if mode == 0 {
                    if end > d.size() {
                        d.truncate(db, end)?;
                    }
                } else if mode == libc::FALLOC_FL_KEEP_SIZE {
                } else if mode == libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE {
                    d.punch(db, offset, length)?;
                } else {
                    return Err(Error::InvalidArgument(String::new(), "EOPNOTSUPP".into()));
                }
                Ok(())
            })
        });
        match r {
            Ok(()) => reply.ok(),
            Err(Error::InvalidArgument(_, m)) if m == "EOPNOTSUPP" => {
                reply.error(Errno::from_i32(libc::EOPNOTSUPP))
            }
            Err(e) => reply.error(erofs::<()>(Err(e), self.readonly).unwrap_err()),
        }
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        let r = self.with("lseek", |db, st| {
            let offset = u64::try_from(offset)
                .map_err(|_| Error::InvalidArgument(String::new(), "negative offset".into()))?;
            // With the writeback cache the kernel may hold written pages it has not sent
            // yet (it does not write them back before asking): while the file is open for
            // writing, the answer is the conservative one, all data up to the end of the
            // file as this mount knows it (exact after an fsync).
            let writing = st.writers.values().any(|i| *i == ino.0);
            let (size, data, hole) = match st.dirty.get(&ino.0) {
                Some(d) => (d.size(), d.next_data(offset), d.next_hole(offset)),
                None => {
                    let ws = st.ws(db)?;
                    let i = ws.get(ino.0)?;
                    let ext = ws.extents(&i)?;
                    (i.size, ext.next_data(offset), ext.next_hole(offset))
                }
            };
            Ok(match whence {
                libc::SEEK_DATA | libc::SEEK_HOLE if offset >= size => None,
                libc::SEEK_DATA if writing => Some(offset),
                libc::SEEK_HOLE if writing => Some(size),
                libc::SEEK_DATA => data,
                libc::SEEK_HOLE => Some(hole),
                _ => return Err(Error::InvalidArgument(String::new(), "whence".into())),
            })
        });
        match r {
            Ok(Some(o)) => reply.offset(o as i64),
            Ok(None) => reply.error(Errno::from_i32(libc::ENXIO)),
            Err(e) => reply.error(errno(&e)),
        }
    }
}

fn dummy_dir() -> Inode {
    Inode {
        ino: ROOT_INO,
        kind: Kind::Dir,
        mode: 0o755,
        uid: 0,
        gid: 0,
        size: 0,
        mtime_ns: 0,
        ctime_ns: 0,
        nlink: 1,
        rdev: 0,
        link_group: 0,
        hash: None,
        target: None,
        materialized: true,
        dirty: false,
        has_links: false,
        atime_ns: None,
    }
}

impl AvfsFs {
    #[allow(clippy::too_many_arguments)]
    fn make(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        kind: Kind,
        mode: u32,
        target: Option<Vec<u8>>,
        rdev: u64,
        op: &'static str,
        reply: ReplyEntry,
    ) {
        let r = self.check_writable().and_then(|_| {
            self.with(op, |db, st| {
                let ws = st.ws(db)?;
                let p = ws.get(parent.0)?;
                let mut node = new_node(req, &p, kind, mode);
                node.target = target;
                node.rdev = rdev;
                let i = ws.create(&p, name.as_bytes(), node)?;
                st.known.insert((parent.0, name.as_bytes().to_vec()));
                st.entry(db, &i)
            })
        });
        match erofs(r, self.readonly) {
            Ok((a, g)) => reply.entry(&TTL, &a, g),
            Err(e) => reply.error(e),
        }
    }
}

impl AvfsFs {
    /// Kernel options: writeback cache, readdirplus, parallel dirops, 1 MiB requests.
    pub fn configure_kernel(config: &mut KernelConfig) -> std::io::Result<()> {
        let want = InitFlags::FUSE_WRITEBACK_CACHE
            | InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_READDIRPLUS_AUTO
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_CACHE_SYMLINKS
            // We clear setuid/setgid on write ourselves, which saves a getxattr and a
            // setattr per write request.
            | InitFlags::FUSE_HANDLE_KILLPRIV_V2
            | InitFlags::FUSE_MAX_PAGES;
        let _ = config.add_capabilities(want & config.capabilities());
        let _ = config.set_max_write(1 << 20);
        let _ = config.set_max_readahead(1 << 20);
        let _ = config.set_max_background(64);
        Ok(())
    }

    fn lookup_impl(&self, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        // No name can be longer than 255 bytes: ENAMETOOLONG, as ext4 answers (the kernel
        // looks a name up before stat, unlink, rename, link, rmdir...).
        if name.len() > 255 {
            self.count("lookup");
            return reply.error(Errno::from_i32(libc::ENAMETOOLONG));
        }
        let r = self.with("lookup", |db, st| {
            let ws = st.ws(db)?;
            let p = ws.get(parent.0)?;
            let child = ws.lookup(&p, name.as_bytes())?;
            st.known.insert((parent.0, name.as_bytes().to_vec()));
            child.map(|c| st.entry(db, &c)).transpose()
        });
        match r {
            Ok(Some((a, g))) => reply.entry(&TTL, &a, g),
            // A negative entry: the kernel may remember that the name does not exist.
            Ok(None) => reply.entry(
                &TTL,
                &FileAttr {
                    ino: INodeNo(0),
                    ..attr_of(&dummy_dir(), None)
                },
                Generation(0),
            ),
            Err(e) => reply.error(errno(&e)),
        }
    }
}
