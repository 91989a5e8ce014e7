//! Ingest: turns the upper directory of an overlay run into a new root tree of the vault.
//!
//! The upper holds exactly what the run changed (overlayfs copies a file up before its
//! first change): new and changed entries, whiteouts (character devices 0/0) for deleted
//! ones, and opaque directories (`user.overlay.opaque`, the run mounts with `userxattr`)
//! that replace a whole tree. The new root is the base root with those differences
//! applied, built bottom-up from immutable tree objects, so the cost is O(changed files +
//! changed bytes + entries of the directories that hold them), never O(workspace).
//!
//! File contents are read and hashed on worker threads (from the page cache: the run just
//! wrote them) while the calling thread stores the chunks, all in the caller's one
//! transaction. A chunk this ingest already sent, or that the vault already holds, is
//! not compressed nor stored again (`store::chunkdedupe`). A file copied up but left
//! unchanged yields the base's entry again, so it is not a change. Only a file's data is
//! read (`SEEK_DATA`: a sparse file costs what it holds), and in a kept overlay only the
//! files changed since its last ingest (`memo`).
//! The upper is walked relative to open directories and the tree built without
//! recursion, so a run may make a tree of any depth (`upper`).

use std::collections::HashMap;
use std::fs;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use rusqlite::Connection;

use super::memo::Memo;
pub use super::scan::OPAQUE_XATTR;
use super::scan::{Meta, user_xattrs_fd};
use super::upper::{Found, FoundFile, FoundKind, Walk, walk};
use crate::error::{Error, Result};
use crate::store::Store;
use crate::store::chunkdedupe::{Dedupe, Reader};
use crate::store::counter_take;
use crate::store::objects::{
    self, CHUNK_SIZE, ChunkRow, DirAttrs, Entry, Hash, Kind, Packing, Tree, Xattrs, get_tree,
    put_tree,
};

/// How to read the upper.
#[derive(Clone, Copy, Debug)]
pub struct IngestOptions {
    /// Record owners as found. Without it (a run by a user other than root, who cannot
    /// give files away), an entry that existed keeps its owner and a new one gets the
    /// caller's.
    pub keep_owners: bool,
    /// Keep setuid/setgid bits on files (only when root asked for it: issue 14).
    pub keep_setuid: bool,
}

/// What an ingest produced.
#[derive(Clone, Debug)]
pub struct Ingested {
    pub root: Hash,
    /// The upper describes the new root exactly as a layer on top of the base's stack
    /// (nothing was normalized on the way in), so it can become that layer.
    pub exact: bool,
    /// Regular files read and hashed.
    pub files_read: u64,
    pub bytes_read: u64,
    /// Regular files of a kept upper not read again: the last ingest read them, and
    /// they have not changed since.
    pub files_unchanged: u64,
    /// Chunks of the files read that were not compressed nor stored again: this ingest
    /// had already sent them, or the vault held them (`store::chunkdedupe`).
    pub chunks_reused: u64,
    /// Every regular file of the upper as taken in, for the next ingest of a kept upper.
    pub memo: Memo,
    /// Entries that could not be taken in, with the reason (the run's report names them).
    pub skipped: Vec<String>,
}

/// A file as read by a hashing worker: its metadata and attributes (from the descriptor
/// it read through), and its stored content: the chunks that hold data (block number,
/// hash; holes are left out), or the content itself when the last ingest of a kept
/// overlay read this very file.
#[derive(Clone, Default)]
struct FileContent {
    meta: Meta,
    xattrs: Xattrs,
    chunks: Vec<(u64, Hash)>,
    size: u64,
    known: Option<Hash>,
    /// Bytes read (blocks of zeros included, holes skipped with `SEEK_DATA` not).
    read: u64,
}

/// A file as a worker read it: its content, and the chunks it holds for the storing
/// thread (those of a small file; a big file's went on their own), or why it failed.
type FileRead = std::result::Result<(FileContent, Vec<ChunkRow>), String>;

fn host_err(p: &Path, e: std::io::Error) -> Error {
    Error::host(p.display(), e)
}

/// A message from a hashing worker to the storing thread.
enum Msg {
    /// A chunk of a big file, sent as soon as it is read (the file is not held whole).
    Chunk(ChunkRow),
    /// File `i` read, with the chunks to store that were not sent on their own: one
    /// message per small file, not one per chunk and one more at the end (each message
    /// can wake the storing thread, which shares two cores with the workers).
    Done(usize, FileRead),
}

/// Files up to this size go to the storing thread in one message.
const BATCH_BYTES: u64 = 16 * CHUNK_SIZE as u64;

/// Reads one file block by block, sending each stored chunk, with its metadata and
/// attributes read through the same descriptor. Only the file's data is read: holes are
/// skipped with `SEEK_DATA` (a 64 GiB file holding one byte costs one block), and blocks
/// that read as zeros are holes too. It reads the size the file has when opened: the
/// run's processes are gone, nothing writes to the upper.
///
/// A chunk this ingest already sent, or that the vault holds, is not compressed (`dedupe`).
fn hash_file(
    file: &FoundFile,
    shown: &dyn Fn() -> String,
    tx: &SyncSender<Msg>,
    dedupe: &mut Reader,
) -> FileRead {
    use std::io::{Seek, SeekFrom};
    let fail = |e: std::io::Error| format!("{}: {e}", shown());
    let f = file.rel.open_file().map_err(fail)?;
    let meta = Meta::of(&f.metadata().map_err(fail)?);
    if !meta.is_file() {
        return Err(format!("{}: no longer a regular file", shown()));
    }
    let mut out = FileContent {
        meta,
        xattrs: user_xattrs_fd(f.as_raw_fd()).0,
        size: meta.size,
        ..FileContent::default()
    };
    let zero = crate::store::content::zero_block_hash();
    let mut held = Vec::new();
    let hold = meta.size <= BATCH_BYTES;
    let cs = CHUNK_SIZE as u64;
    let mut block = 0u64;
    while block * cs < meta.size {
        // The next block holding data (a file system without SEEK_DATA says all of it;
        // a file of one block is just read).
        let data = match if meta.size <= cs {
            Ok(Some(0))
        } else {
            seek_data(&f, block * cs)
        } {
            Ok(Some(at)) => at,
            Ok(None) => break,
            Err(_) => block * cs,
        };
        if data >= meta.size {
            break;
        }
        block = data / cs;
        let start = block * cs;
        let want = (meta.size - start).min(cs) as usize;
        // A buffer of the bytes expected, not a whole chunk (most files are much smaller
        // than a chunk), read into without zeroing it first: zeroing cost more than the
        // read for small files, and is one more pass over every byte of a big one.
        let mut buf = Vec::with_capacity(want);
        (&f).seek(SeekFrom::Start(start)).map_err(fail)?;
        (&f).take(want as u64).read_to_end(&mut buf).map_err(fail)?;
        // A file cut meanwhile (by a service of the workspace) ends where it ends.
        let short = buf.len() < want;
        out.read += buf.len() as u64;
        if short {
            out.size = start + buf.len() as u64;
            if buf.is_empty() {
                break;
            }
        }
        let h = Hash::of(&buf);
        if h != zero {
            out.chunks.push((block, h));
            // Compressed here, on the worker: the storing thread only inserts. No row for
            // a chunk this ingest already sent.
            match dedupe.row(h, buf, Packing::Fast) {
                Some(row) if hold => held.push(row),
                Some(row) => tx
                    .send(Msg::Chunk(row))
                    .map_err(|_| "the storing thread stopped".to_string())?,
                None => {}
            }
        }
        if short {
            break;
        }
        block += 1;
    }
    Ok((out, held))
}

/// `lseek(SEEK_DATA)`: the first offset at or after `from` that holds data, `None` when
/// only a hole follows.
fn seek_data(f: &fs::File, from: u64) -> std::io::Result<Option<u64>> {
    // SAFETY: lseek on a valid descriptor.
    let r = unsafe { libc::lseek(f.as_raw_fd(), from as libc::off_t, libc::SEEK_DATA) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::ENXIO) {
            Ok(None)
        } else {
            Err(e)
        };
    }
    Ok(Some(r as u64))
}

/// Hashes every file on worker threads while this thread hands their chunks to `store`.
/// Files the last ingest of a kept overlay read unchanged are not read; returns the
/// files' contents and the bytes read.
fn store_files(
    walk: &Walk,
    dedupe: &Dedupe,
    store: &mut dyn FnMut(ChunkRow) -> Result<()>,
) -> Result<(Vec<FileContent>, u64)> {
    let files = &walk.files;
    let mut results: Vec<Option<std::result::Result<FileContent, String>>> =
        vec![None; files.len()];
    let mut to_read = Vec::new();
    for (i, f) in files.iter().enumerate() {
        match &f.known {
            Some((meta, xattrs, content)) => {
                results[i] = Some(Ok(FileContent {
                    meta: *meta,
                    xattrs: xattrs.clone(),
                    chunks: vec![],
                    size: meta.size,
                    known: Some(*content),
                    read: 0,
                }))
            }
            None => to_read.push(i),
        }
    }
    let mut bytes = 0u64;
    // Most runs write no file (`true`, `git status`, a failed build): no worker threads
    // then, nor the cgroup reads `available_parallelism` makes.
    if !to_read.is_empty() {
        read_files(walk, &to_read, &mut results, &mut bytes, dedupe, store)?;
    }
    let mut out = Vec::with_capacity(files.len());
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Some(Ok(c)) => out.push(c),
            Some(Err(msg)) => {
                return Err(Error::Host {
                    what: format!(
                        "upper /{}",
                        walk.display(files[i].dir, Some(&files[i].name))
                    ),
                    message: msg,
                });
            }
            None => return Err(Error::Internal("a file was never hashed".into())),
        }
    }
    Ok((out, bytes))
}

type Results = Vec<Option<std::result::Result<FileContent, String>>>;

/// Reads the files `to_read` (indexes into `walk.files`) on worker threads into `results`.
fn read_files(
    walk: &Walk,
    to_read: &[usize],
    results: &mut Results,
    bytes: &mut u64,
    dedupe: &Dedupe,
    store: &mut dyn FnMut(ChunkRow) -> Result<()>,
) -> Result<()> {
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 8)
        .min(to_read.len().max(1));
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        let (tx, rx): (SyncSender<Msg>, Receiver<Msg>) = sync_channel(64);
        for _ in 0..workers {
            let tx = tx.clone();
            let next = &next;
            s.spawn(move || {
                let mut dedupe = dedupe.reader();
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&i) = to_read.get(k) else {
                        break;
                    };
                    let f = &walk.files[i];
                    let shown = || format!("upper /{}", walk.display(f.dir, Some(&f.name)));
                    let r = hash_file(f, &shown, &tx, &mut dedupe);
                    if tx.send(Msg::Done(i, r)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let mut failed = None;
        for msg in rx {
            if failed.is_some() {
                continue; // drain, so the workers finish
            }
            match msg {
                Msg::Chunk(row) => {
                    if let Err(e) = store(row) {
                        failed = Some(e);
                    }
                }
                Msg::Done(i, Ok((content, held))) => {
                    *bytes += content.read;
                    for row in held {
                        if let Err(e) = store(row) {
                            failed = Some(e);
                            break;
                        }
                    }
                    results[i] = Some(Ok(content));
                }
                Msg::Done(i, Err(e)) => results[i] = Some(Err(e)),
            }
        }
        failed.map_or(Ok(()), Err)
    })
}

/// The content hash of stored chunks (the chunk list is recorded when there are several).
fn content_of(db: &Connection, c: &FileContent) -> Result<Hash> {
    if let Some(h) = c.known {
        return Ok(h);
    }
    if c.size as usize <= CHUNK_SIZE {
        // One chunk or none: the content is addressed by that chunk.
        return match c.chunks.first() {
            Some((_, h)) => Ok(*h),
            // A file of zeros shorter than a chunk: its one chunk holds exactly its bytes.
            None => objects::put_chunk(db, &vec![0u8; c.size as usize]),
        };
    }
    // Blocks of zeros are holes (store::content canonicalises zero chunks too).
    let list = c.chunks.clone();
    crate::store::content::store_extents(db, crate::store::content::Extents { size: c.size, list })
}

struct Builder<'a> {
    db: &'a Connection,
    walk: &'a Walk,
    /// The files as read, and their content hashes.
    files: Vec<FileContent>,
    contents: Vec<Hash>,
    opts: IngestOptions,
    own: (u32, u32),
    /// (dev, ino) of hard-linked upper files -> link group number.
    groups: HashMap<(u64, u64), u64>,
    /// How many names each hard-linked upper file has in the upper.
    link_names: HashMap<(u64, u64), u32>,
    exact: bool,
    /// Directories of the walk built so far (deepest first): their tree and whether
    /// anything below holds hard links.
    built: Vec<Option<(Hash, bool)>>,
}

impl Builder<'_> {
    fn mode_of(&mut self, kind: Kind, m: &Meta) -> u32 {
        let mut mode = m.mode & 0o7777;
        if kind == Kind::File && !self.opts.keep_setuid && mode & 0o6000 != 0 {
            mode &= !0o6000;
            self.exact = false;
        }
        mode
    }

    fn owner(&self, m: &Meta, base: Option<&Entry>) -> (u32, u32) {
        if self.opts.keep_owners {
            return (m.uid, m.gid);
        }
        match base {
            Some(b) => (b.uid, b.gid),
            None => self.own,
        }
    }

    fn link_group(&mut self, m: &Meta) -> Result<u64> {
        let key = (m.dev, m.ino);
        if self.link_names.get(&key).copied().unwrap_or(0) < 2 {
            return Ok(0);
        }
        if let Some(g) = self.groups.get(&key) {
            return Ok(*g);
        }
        let g = counter_take(self.db, "next_link_group", 1)? as u64;
        self.groups.insert(key, g);
        Ok(g)
    }

    /// Builds the new root tree (not stored yet): every directory of the walk on top of
    /// its tree in `base_root`, the deepest first, so that no step recurses however deep
    /// the upper is.
    fn build(&mut self, base_root: &Hash) -> Result<Tree> {
        let walk = self.walk;
        let n = walk.dirs.len();
        // Each directory's tree in the base, parents first (the walk lists a directory
        // before the ones inside it). An opaque directory's entries have no base.
        let mut bases: Vec<Option<Hash>> = vec![None; n];
        bases[0] = Some(*base_root);
        for idx in 0..n {
            let dir = &walk.dirs[idx];
            let Some(h) = bases[idx] else { continue };
            if dir.opaque
                || !dir
                    .entries
                    .iter()
                    .any(|f| matches!(f.what, FoundKind::Dir(_)))
            {
                continue;
            }
            let tree = get_tree(self.db, &h)?;
            for f in &dir.entries {
                if let FoundKind::Dir(i) = f.what
                    && let Ok(at) = tree.entries.binary_search_by(|e| e.name.cmp(&f.name))
                    && tree.entries[at].kind == Kind::Dir
                {
                    bases[i] = tree.entries[at].hash;
                }
            }
        }
        self.built = vec![None; n];
        for idx in (1..n).rev() {
            let (tree, links) = self.build_dir(idx, bases[idx].as_ref())?;
            self.built[idx] = Some((put_tree(self.db, &tree)?, links));
        }
        Ok(self.build_dir(0, Some(base_root))?.0)
    }

    /// Builds directory `idx` of the walk on top of `base` (its tree in the base root,
    /// if it was a directory there and is not opaque), the directories inside it built
    /// already; returns its tree and whether anything below holds hard links.
    fn build_dir(&mut self, idx: usize, base: Option<&Hash>) -> Result<(Tree, bool)> {
        let dir = &self.walk.dirs[idx];
        let base_tree = match base {
            Some(h) if !dir.opaque => Some(get_tree(self.db, h)?),
            _ => None,
        };
        let mut merged: Vec<Entry> = Vec::new();
        let mut base_entries = base_tree.map(|t| t.entries).unwrap_or_default().into_iter();
        let mut pending = base_entries.next();
        for f in &dir.entries {
            // Base entries that sort before this one are untouched.
            while let Some(b) = pending.take() {
                if b.name < f.name {
                    merged.push(b);
                    pending = base_entries.next();
                } else {
                    pending = Some(b);
                    break;
                }
            }
            let base_entry = match &pending {
                Some(b) if b.name == f.name => {
                    let b = pending.take();
                    pending = base_entries.next();
                    b
                }
                _ => None,
            };
            if let Some(e) = self.entry(f, base_entry.as_ref())? {
                merged.push(e);
            }
        }
        merged.extend(pending);
        merged.extend(base_entries);
        let links = merged.iter().any(|e| e.link_group != 0 || e.has_links);
        Ok((
            Tree {
                root_attrs: None,
                entries: merged,
            },
            links,
        ))
    }

    /// The new entry for one upper entry (`None`: a whiteout, the name is gone).
    fn entry(&mut self, f: &Found, base: Option<&Entry>) -> Result<Option<Entry>> {
        let walk = self.walk;
        let (kind, m, xattrs) = match &f.what {
            FoundKind::Whiteout => return Ok(None),
            FoundKind::Dir(i) => (Kind::Dir, walk.dirs[*i].meta, walk.dirs[*i].xattrs.clone()),
            FoundKind::File(i) => (
                Kind::File,
                self.files[*i].meta,
                self.files[*i].xattrs.clone(),
            ),
            FoundKind::Symlink(_, m) => (Kind::Symlink, *m, vec![]),
            FoundKind::Special(k, m) => (*k, *m, vec![]),
        };
        let m = &m;
        let (uid, gid) = self.owner(m, base);
        let mode = self.mode_of(kind, m);
        if let FoundKind::File(i) = &f.what
            && mode != m.mode & 0o7777
        {
            // The bits dropped from the history go from the upper too, before it is kept
            // or becomes a layer: no setuid file stays on the host's disk.
            let at = &walk.files[*i].rel;
            // SAFETY: a valid descriptor and C string; the result is ignored as before
            // (an upper file that cannot be changed keeps its bits until it is removed).
            let _ = unsafe { libc::fchmodat(at.fd(), at.path.as_ptr(), mode as libc::mode_t, 0) };
        }
        let mut e = Entry {
            name: f.name.clone(),
            kind,
            mode,
            uid,
            gid,
            mtime_ns: m.mtime_ns,
            size: 0,
            hash: None,
            target: None,
            rdev: 0,
            link_group: 0,
            has_links: false,
            xattrs,
        };
        match &f.what {
            FoundKind::Whiteout => unreachable!(),
            FoundKind::Dir(i) => {
                let (tree, links) = self.built[*i]
                    .ok_or_else(|| Error::Internal("a directory was built out of order".into()))?;
                e.hash = Some(tree);
                e.has_links = links;
            }
            FoundKind::File(i) => {
                e.hash = Some(self.contents[*i]);
                e.size = self.files[*i].size;
                e.link_group = self.link_group(m)?;
            }
            FoundKind::Symlink(t, _) => {
                e.target = Some(t.clone());
                e.mode = 0o777;
            }
            FoundKind::Special(k, _) => {
                if matches!(k, Kind::CharDev | Kind::BlockDev) {
                    e.rdev = m.rdev;
                }
                e.link_group = self.link_group(m)?;
            }
        }
        // A copy-up that changed nothing is the base entry itself. (Copying up a hard link
        // breaks it: the base entry keeps its group, whose content is still the same.)
        if let Some(b) = base
            && b.kind == e.kind
            && b.hash == e.hash
            && b.size == e.size
            && b.mode == e.mode
            && b.uid == e.uid
            && b.gid == e.gid
            && b.mtime_ns == e.mtime_ns
            && b.target == e.target
            && b.rdev == e.rdev
            && b.xattrs == e.xattrs
            && b.has_links == e.has_links
            && e.link_group == 0
        {
            return Ok(Some(b.clone()));
        }
        Ok(Some(e))
    }
}

/// Ingests `upper` on top of `base_root`; returns the new root (equal to `base_root`
/// when the run changed nothing). Runs inside the caller's write transaction.
pub fn ingest(
    db: &Connection,
    base_root: &Hash,
    upper: &Path,
    opts: IngestOptions,
) -> Result<Ingested> {
    let walk = walk(upper, None)?;
    let dedupe = Dedupe::new(db);
    let (contents, bytes_read) =
        store_files(&walk, &dedupe, &mut |row| objects::put_chunk_row(db, &row))?;
    ingest_stored(
        db,
        base_root,
        Stored {
            walk,
            contents,
            bytes_read,
            pending: vec![],
            chunks_reused: dedupe.reused(),
        },
        opts,
    )
}

/// An upper read and its files' chunks stored (`store_upper`), for `ingest_stored`.
pub struct Stored {
    walk: Walk,
    contents: Vec<FileContent>,
    bytes_read: u64,
    /// Chunks not committed yet (the last, partial batch): stored by `ingest_stored`.
    pending: Vec<ChunkRow>,
    chunks_reused: u64,
}

/// Chunks are committed in transactions of about this many bytes when an upper holds
/// more. One transaction for all of them made SQLite's WAL as large as the upper's new
/// content, written and then checkpointed into the vault: two writes of every byte, and
/// a WAL that grows into memory the system has just taken back (measured on this kind
/// of guest, 1 GiB of 64 KiB rows: 13.4-16.9 s in one transaction, 2.8-2.9 s in 8 MiB
/// ones; 1.9-2.1 s against 1.74-1.76 s when memory is plentiful).
const COMMIT_BYTES: usize = 8 << 20;

/// Reads `upper` and stores its files' chunks, committing them in transactions of
/// their own once they pass `COMMIT_BYTES` (fewer stay for `ingest_stored`'s). Until
/// the ingest's own transaction references them, committed chunks are kept from space
/// reclaim by a pin named `pin` (`store::pins`) on a tree that lists them, which that
/// transaction removes; the caller removes it when the ingest fails.
///
/// `memo`: what the last ingest of this (kept) upper read; files it names unchanged are
/// not read again, as long as the vault still holds their content.
pub fn store_upper(
    store: &mut Store,
    upper: &Path,
    pin: &str,
    memo: Option<&Memo>,
) -> Result<Stored> {
    let mut walk = walk(upper, memo)?;
    if walk.files.iter().any(|f| f.known.is_some()) {
        store.read(|db| {
            for f in &mut walk.files {
                if let Some((m, _, h)) = &f.known
                    && !crate::store::content::exists(db, h, m.size)?
                {
                    f.known = None;
                }
            }
            Ok(())
        })?;
    }
    let mut pending: Vec<ChunkRow> = vec![];
    let mut pending_bytes = 0usize;
    // Trees of committed batches, each listing its chunks; the pin names a tree of them.
    let mut batches: Vec<Hash> = vec![];
    let dedupe = Dedupe::new(&store.conn);
    let mut commit = |batch: Vec<ChunkRow>, batches: &mut Vec<Hash>| -> Result<()> {
        store.write(|db| {
            let mut entries = Vec::with_capacity(batch.len());
            for (i, row) in batch.iter().enumerate() {
                objects::put_chunk_row(db, row)?;
                entries.push(pin_entry(
                    format!("c{i:06}"),
                    Kind::File,
                    row.hash,
                    row.len as u64,
                ));
            }
            let tree = put_tree(
                db,
                &Tree {
                    root_attrs: None,
                    entries,
                },
            )?;
            batches.push(tree);
            let listing = batches
                .iter()
                .enumerate()
                .map(|(i, t)| pin_entry(format!("b{i:06}"), Kind::Dir, *t, 0))
                .collect();
            let root = put_tree(
                db,
                &Tree {
                    root_attrs: None,
                    entries: listing,
                },
            )?;
            crate::store::pins::pin(db, pin, &root)
        })
    };
    let (contents, bytes_read) = store_files(&walk, &dedupe, &mut |row| {
        pending_bytes += row.len;
        pending.push(row);
        if pending_bytes >= COMMIT_BYTES {
            pending_bytes = 0;
            commit(std::mem::take(&mut pending), &mut batches)?;
        }
        Ok(())
    })?;
    Ok(Stored {
        walk,
        contents,
        bytes_read,
        pending,
        chunks_reused: dedupe.reused(),
    })
}

/// An entry of a pin's tree: only its kind, size and hash matter (what the collectors
/// follow).
fn pin_entry(name: String, kind: Kind, hash: Hash, size: u64) -> Entry {
    Entry {
        name: name.into_bytes(),
        kind,
        mode: if kind == Kind::Dir { 0o755 } else { 0o644 },
        uid: 0,
        gid: 0,
        mtime_ns: 0,
        size,
        hash: Some(hash),
        target: None,
        rdev: 0,
        link_group: 0,
        has_links: false,
        xattrs: vec![],
    }
}

/// `ingest` of what `store_upper` read and stored, inside the caller's transaction.
pub fn ingest_stored(
    db: &Connection,
    base_root: &Hash,
    stored: Stored,
    opts: IngestOptions,
) -> Result<Ingested> {
    let Stored {
        walk,
        contents,
        bytes_read,
        pending,
        chunks_reused,
    } = stored;
    for row in &pending {
        objects::put_chunk_row(db, row)?;
    }
    let mut hashes = Vec::with_capacity(contents.len());
    for c in &contents {
        hashes.push(content_of(db, c)?);
    }
    // How many names each hard-linked inode has in the upper.
    let mut link_names: HashMap<(u64, u64), u32> = HashMap::new();
    let mut count = |m: &Meta| {
        if m.nlink > 1 {
            *link_names.entry((m.dev, m.ino)).or_default() += 1;
        }
    };
    for c in &contents {
        count(&c.meta);
    }
    for d in &walk.dirs {
        for f in &d.entries {
            if let FoundKind::Symlink(_, m) | FoundKind::Special(_, m) = &f.what {
                count(m);
            }
        }
    }
    let mut b = Builder {
        db,
        walk: &walk,
        files: contents,
        contents: hashes,
        opts,
        own: crate::workspace::current_uid_gid(),
        groups: HashMap::new(),
        link_names,
        exact: walk.skipped.is_empty(),
        built: vec![],
    };
    let base_tree = get_tree(db, base_root)?;
    let base_attrs = base_tree.root_attrs.clone();
    let mut tree = b.build(base_root)?;
    let rm = walk.dirs[0].meta;
    let (ruid, rgid) = match (&base_attrs, opts.keep_owners) {
        (_, true) => (rm.uid, rm.gid),
        (Some(a), false) => (a.uid, a.gid),
        (None, false) => b.own,
    };
    tree.root_attrs = Some(DirAttrs {
        mode: rm.mode & 0o7777,
        uid: ruid,
        gid: rgid,
        mtime_ns: rm.mtime_ns,
        xattrs: walk.dirs[0].xattrs.clone(),
    });
    let root = if tree == base_tree {
        *base_root
    } else {
        put_tree(db, &tree)?
    };
    let mut memo = Memo::default();
    for (c, h) in b.files.iter().zip(&b.contents) {
        memo.add(&c.meta, &c.xattrs, h);
    }
    let files_unchanged = b.files.iter().filter(|c| c.known.is_some()).count() as u64;
    Ok(Ingested {
        root,
        exact: b.exact,
        files_read: walk.files.len() as u64 - files_unchanged,
        bytes_read,
        files_unchanged,
        chunks_reused,
        memo,
        skipped: walk.skipped,
    })
}

/// Gives the upper's root directory the base root's attributes before a run, so that a
/// run which changes nothing at the top leaves them equal.
pub fn prepare_upper_root(upper: &Path, attrs: &DirAttrs, keep_owners: bool) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(upper, fs::Permissions::from_mode(attrs.mode & 0o7777))
        .map_err(|e| host_err(upper, e))?;
    if keep_owners {
        std::os::unix::fs::lchown(upper, Some(attrs.uid), Some(attrs.gid))
            .map_err(|e| host_err(upper, e))?;
    }
    for (k, v) in &attrs.xattrs {
        let _ = set_xattr(upper, k, v);
    }
    super::materialize::set_times(upper, attrs.mtime_ns).map_err(|e| host_err(upper, e))
}

pub(super) fn set_xattr(path: &Path, name: &[u8], value: &[u8]) -> std::io::Result<()> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    let n = std::ffi::CString::new(name)?;
    // SAFETY: valid C strings and a value buffer of the given length.
    let r = unsafe {
        libc::lsetxattr(
            c.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
#[path = "ingest_tests.rs"]
mod tests;
