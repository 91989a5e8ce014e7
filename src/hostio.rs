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

// ---------------------------------------------------------------------------------------
// Import
// ---------------------------------------------------------------------------------------

/// One host entry seen by the walk. Nodes are numbered in walk order, so a node's
/// children always have larger numbers than the node itself.
struct Node {
    name: Vec<u8>,
    parent: usize,
    kind: Kind,
    mode: u32,
    uid: u32,
    gid: u32,
    mtime_ns: i64,
    rdev: u64,
    dev: u64,
    ino: u64,
    nlink: u64,
    target: Option<Vec<u8>>,
    /// Directories: children sorted by name bytes.
    children: Vec<usize>,
}

impl Node {
    fn new(name: Vec<u8>, parent: usize, kind: Kind, m: &fs::Metadata) -> Node {
        Node {
            name,
            parent,
            kind,
            mode: m.mode() & 0o7777,
            uid: m.uid(),
            gid: m.gid(),
            mtime_ns: mtime_ns_of(m),
            rdev: if matches!(kind, Kind::CharDev | Kind::BlockDev) {
                m.rdev()
            } else {
                0
            },
            dev: m.dev(),
            ino: m.ino(),
            nlink: m.nlink(),
            target: None,
            children: Vec::new(),
        }
    }
}

/// Reader thread -> storing thread.
enum Msg {
    Chunk(Hash, Vec<u8>),
    File {
        idx: usize,
        chunks: Extents,
        size: u64,
    },
}

struct Walk {
    nodes: Vec<Node>,
    skipped: Vec<String>,
    bytes: u64,
}

fn cancelled() -> Error {
    Error::Internal("import cancelled".into())
}

/// Batches messages, so the two threads synchronize once per batch, not per file.
struct Batcher {
    tx: SyncSender<Vec<Msg>>,
    batch: Vec<Msg>,
    bytes: usize,
}

impl Batcher {
    fn send(&mut self, m: Msg) -> Result<()> {
        if let Msg::Chunk(_, data) = &m {
            self.bytes += data.len();
        }
        self.batch.push(m);
        if self.batch.len() >= BATCH_MSGS || self.bytes >= BATCH_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if !self.batch.is_empty() {
            let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH_MSGS));
            self.bytes = 0;
            self.tx.send(batch).map_err(|_| cancelled())?;
        }
        Ok(())
    }
}

/// Reads one regular file in chunk-sized pieces, sending each hashed chunk on `tx`; returns
/// its extents and size. The holes of a sparse file are skipped (`SEEK_DATA`), and blocks
/// of zeros are not stored.
fn read_file(path: &Path, m: &fs::Metadata, tx: &mut Batcher) -> Result<(Extents, u64)> {
    use std::os::unix::fs::FileExt;
    // O_NOFOLLOW and O_NONBLOCK: a file swapped for a symlink or a FIFO after the walk
    // looked at it is neither followed nor waited on.
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| host_err(path, e))?;
    let fm = f.metadata().map_err(|e| host_err(path, e))?;
    if !fm.file_type().is_file() || fm.ino() != m.ino() || fm.dev() != m.dev() {
        return Err(host_msg(path, "changed while it was being imported"));
    }
    // Read up to the size fstat reported: a file that grows meanwhile is cut there, and
    // one that shrinks ends at its end of file.
    let expect = fm.len();
    content::check_size(expect).map_err(|e| host_msg(path, e.to_string()))?;
    let cs = CHUNK_SIZE as u64;
    let mut list = Vec::new();
    let mut size = expect;
    let mut next = 0u64;
    'regions: for (start, stop) in content::data_regions(&f, expect) {
        let mut idx = (start / cs).max(next);
        while idx * cs < stop {
            let want = (expect - idx * cs).min(cs) as usize;
            let mut buf = vec![0u8; want];
            let mut got = 0;
            while got < want {
                match f.read_at(&mut buf[got..], idx * cs + got as u64) {
                    Ok(0) => break,
                    Ok(n) => got += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(host_err(path, e)),
                }
            }
            buf.truncate(got);
            // A file of one block is its chunk, zeros included; in a larger one a block
            // of zeros is a hole.
            if got > 0 && (expect <= cs || buf.iter().any(|b| *b != 0)) {
                let h = Hash::of(&buf);
                list.push((idx, h));
                tx.send(Msg::Chunk(h, buf))?;
            }
            if got < want {
                size = idx * cs + got as u64;
                break 'regions;
            }
            idx += 1;
        }
        next = idx;
    }
    Ok((Extents { size, list }, size))
}

/// Walks the host tree (the reader thread): metadata, symlink targets and file contents.
fn walk_host(root: &Path, exclude: &HashSet<(u64, u64)>, tx: SyncSender<Vec<Msg>>) -> Result<Walk> {
    let tx = &mut Batcher {
        tx,
        batch: Vec::with_capacity(BATCH_MSGS),
        bytes: 0,
    };
    // The directory named on the command line is followed if it is a symlink; nothing
    // below it is.
    let meta = fs::metadata(root).map_err(|e| host_err(root, e))?;
    if !meta.is_dir() {
        return Err(host_msg(root, "not a directory"));
    }
    let mut nodes = vec![Node::new(Vec::new(), usize::MAX, Kind::Dir, &meta)];
    let mut skipped = Vec::new();
    let mut bytes = 0u64;
    // Contents of files with more than one name, read once.
    let mut linked: HashMap<(u64, u64), (Extents, u64)> = HashMap::new();
    let mut stack = vec![(0usize, root.to_path_buf())];
    while let Some((idx, dir)) = stack.pop() {
        let rd = fs::read_dir(&dir).map_err(|e| host_err(&dir, e))?;
        let mut children = Vec::new();
        for ent in rd {
            let ent = ent.map_err(|e| host_err(&dir, e))?;
            let name = ent.file_name().into_vec();
            let p = ent.path();
            objects::validate_name(&name)
                .map_err(|why| host_msg(&p, format!("invalid name ({why})")))?;
            // Does not follow symlinks.
            let m = ent.metadata().map_err(|e| host_err(&p, e))?;
            let kind = kind_of(&m.file_type());
            if kind == Kind::File && exclude.contains(&(m.dev(), m.ino())) {
                skipped.push(format!("{} (the vault itself)", p.display()));
                continue;
            }
            let child = nodes.len();
            let mut node = Node::new(name, idx, kind, &m);
            match kind {
                Kind::Dir => stack.push((child, p)),
                Kind::Symlink => {
                    let t = fs::read_link(&p).map_err(|e| host_err(&p, e))?;
                    node.target = Some(t.into_os_string().into_vec());
                }
                Kind::File => {
                    let key = (m.dev(), m.ino());
                    let (chunks, size) = match linked.get(&key) {
                        Some(c) => c.clone(),
                        None => {
                            let c = read_file(&p, &m, tx)?;
                            bytes += c.1;
                            if m.nlink() > 1 {
                                linked.insert(key, c.clone());
                            }
                            c
                        }
                    };
                    tx.send(Msg::File {
                        idx: child,
                        chunks,
                        size,
                    })?;
                }
                _ => {}
            }
            nodes.push(node);
            children.push(child);
        }
        children.sort_unstable_by(|a, b| nodes[*a].name.cmp(&nodes[*b].name));
        nodes[idx].children = children;
    }
    tx.flush()?;
    Ok(Walk {
        nodes,
        skipped,
        bytes,
    })
}

/// Stores what the reader thread sends (the calling thread); returns each file's content.
fn store_contents(
    db: &Connection,
    rx: Receiver<Vec<Msg>>,
    progress: &dyn Fn(u64),
) -> Result<Vec<Option<(Hash, u64)>>> {
    let mut contents: Vec<Option<(Hash, u64)>> = Vec::new();
    let mut done = 0u64;
    for msg in rx.into_iter().flatten() {
        match msg {
            Msg::Chunk(h, data) => objects::put_chunk_hashed(db, &h, &data)?,
            Msg::File { idx, chunks, size } => {
                let h = content::store_extents(db, chunks)?;
                if contents.len() <= idx {
                    contents.resize(idx + 1, None);
                }
                contents[idx] = Some((h, size));
                done += 1;
                if done.is_multiple_of(PROGRESS_EVERY) {
                    progress(done);
                }
            }
        }
    }
    progress(done);
    Ok(contents)
}

/// (dev, ino) of the vault file and its companions, so importing a directory that holds
/// the vault does not try to copy the vault into itself.
fn vault_files(db: &Connection) -> HashSet<(u64, u64)> {
    let mut set = HashSet::new();
    if let Some(p) = db.path().filter(|p| !p.is_empty()) {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            if let Ok(m) = fs::metadata(format!("{p}{suffix}")) {
                set.insert((m.dev(), m.ino()));
            }
        }
    }
    set
}

/// Where the import goes.
enum Dest {
    /// `dest` does not exist: graft the imported directory as `name` under `parent`.
    New { parent: u64, name: Vec<u8> },
    /// `dest` is an existing directory: merge into it.
    Merge(u64),
}

/// Finds (and with `create`, makes) the destination. Without `create`, `Ok(None)` means
/// some parent directories are missing and would be created.
fn locate_dest(ws: &Workspace, dest: &[Vec<u8>], create: bool) -> Result<Option<Dest>> {
    let mut cur = ROOT_INO;
    for (i, comp) in dest.iter().enumerate() {
        let last = i + 1 == dest.len();
        let dir = ws.get(cur)?;
        let found = match ws.lookup(&dir, comp)? {
            Some(n) if n.kind == Kind::Symlink => Some(ws.resolve_existing(&dest[..=i], true)?),
            other => other,
        };
        match found {
            Some(n) if n.kind == Kind::Dir => cur = n.ino,
            Some(_) => return Err(Error::NotADirectory(path::display(&dest[..=i]))),
            None if last => {
                return Ok(Some(Dest::New {
                    parent: cur,
                    name: comp.clone(),
                }));
            }
            None if !create => return Ok(None),
            None => {
                let dir = ws.get(cur)?;
                cur = ws.create(&dir, comp, NewNode::new(Kind::Dir, 0o755))?.ino;
            }
        }
    }
    Ok(Some(Dest::Merge(cur)))
}

/// Imports the contents of the host directory `host` into the workspace directory `dest`.
///
/// If `dest` does not exist it is created (with missing parents) as a copy of `host`,
/// including `host`'s own mode, owner and mtime. If it is an existing directory, `host`'s
/// entries are merged into it: same-named directories are merged recursively (and take the
/// host directory's attributes), any other same-named entry is replaced.
///
/// Setuid and setgid bits are dropped (and counted) unless `keep_setuid`: a file that
/// runs as its owner should not enter a workspace an agent works in by accident.
///
/// Call it inside a write transaction: on error the caller must roll back.
pub fn import(
    ws: &Workspace,
    host: &Path,
    dest: &[Vec<u8>],
    keep_setuid: bool,
    progress: &dyn Fn(u64),
) -> Result<ImportStats> {
    // Fail on a bad destination before reading anything.
    locate_dest(ws, dest, false)?;
    let exclude = vault_files(ws.db);
    let (walk, contents) = std::thread::scope(|s| -> Result<_> {
        let (tx, rx) = sync_channel::<Vec<Msg>>(CHANNEL_DEPTH);
        let exclude = &exclude;
        let reader = s.spawn(move || walk_host(host, exclude, tx));
        let stored = store_contents(ws.db, rx, progress);
        let walked = reader
            .join()
            .map_err(|_| Error::Internal("the import reader thread panicked".into()))?;
        // The storing side's error wins: it is why the reader was cancelled.
        let contents = stored?;
        Ok((walked?, contents))
    })?;
    let Walk {
        mut nodes,
        skipped,
        bytes,
    } = walk;
    let mut stats = ImportStats {
        bytes,
        skipped,
        ..Default::default()
    };
    if !keep_setuid {
        for n in nodes.iter_mut().filter(|n| n.mode & 0o6000 != 0) {
            n.mode &= !0o6000;
            stats.setuid_dropped += 1;
        }
    }

    // Hard links: names inside the tree that share (dev, ino) form one link group. A file
    // whose other names are all outside the tree is imported as a plain file.
    let mut members: HashMap<(u64, u64), u32> = HashMap::new();
    for n in nodes.iter().filter(|n| n.kind != Kind::Dir && n.nlink > 1) {
        *members.entry((n.dev, n.ino)).or_default() += 1;
    }
    let mut group_of: HashMap<(u64, u64), u64> = HashMap::new();
    let mut link_group = vec![0u64; nodes.len()];
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut group_index: HashMap<u64, usize> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        if n.kind == Kind::Dir {
            if i != 0 {
                stats.dirs += 1;
            }
            continue;
        }
        let key = (n.dev, n.ino);
        if n.nlink > 1 && members.get(&key).copied().unwrap_or(0) >= 2 {
            if let Some(g) = group_of.get(&key) {
                link_group[i] = *g;
                groups[group_index[g]].push(i);
                stats.hardlinks += 1;
                continue;
            }
            let g = counter_take(ws.db, "next_link_group", 1)? as u64;
            group_of.insert(key, g);
            group_index.insert(g, groups.len());
            groups.push(vec![i]);
            link_group[i] = g;
        }
        match n.kind {
            Kind::File => stats.files += 1,
            Kind::Symlink => stats.symlinks += 1,
            _ => {}
        }
    }

    let target = locate_dest(ws, dest, true)?
        .ok_or_else(|| Error::Internal("import destination vanished".into()))?;
    let merging = matches!(target, Dest::Merge(_));

    // Tree objects, bottom-up (children have larger numbers than their parents).
    let mut entries: Vec<Option<Entry>> = vec![None; nodes.len()];
    for i in (0..nodes.len()).rev() {
        let n = &nodes[i];
        let (hash, size, has_links) = match n.kind {
            Kind::Dir => {
                let mut list = Vec::with_capacity(n.children.len());
                for &c in &n.children {
                    // A merge needs the entries of directories it descends into.
                    let e = if merging {
                        entries[c].clone()
                    } else {
                        entries[c].take()
                    };
                    list.push(
                        e.ok_or_else(|| Error::Internal("import: child entry missing".into()))?,
                    );
                }
                let has_links = list.iter().any(|e| e.link_group != 0 || e.has_links);
                let h = objects::put_tree(
                    ws.db,
                    &Tree {
                        root_attrs: None,
                        entries: list,
                    },
                )?;
                (Some(h), 0, has_links)
            }
            Kind::File => {
                let (h, size) = contents
                    .get(i)
                    .copied()
                    .flatten()
                    .ok_or_else(|| Error::Internal("import: file content missing".into()))?;
                (Some(h), size, false)
            }
            Kind::Symlink => (None, n.target.as_ref().map_or(0, |t| t.len() as u64), false),
            _ => (None, 0, false),
        };
        entries[i] = Some(Entry {
            name: n.name.clone(),
            kind: n.kind,
            mode: n.mode,
            uid: n.uid,
            gid: n.gid,
            mtime_ns: n.mtime_ns,
            size,
            hash,
            target: n.target.clone(),
            rdev: n.rdev,
            link_group: link_group[i],
            has_links,
            xattrs: Vec::new(),
        });
    }

    match target {
        Dest::New { parent, name } => {
            let root = entries[0]
                .take()
                .ok_or_else(|| Error::Internal("import: root entry missing".into()))?;
            let parent = ws.get(parent)?;
            ws.graft(&parent, &name, &root)?;
        }
        Dest::Merge(top) => {
            merge(ws, top, &nodes, &entries)?;
            if !groups.is_empty() {
                relink(ws, top, &nodes, &groups)?;
            }
        }
    }
    Ok(stats)
}

/// Merges the imported tree into the existing workspace directory `top`.
fn merge(ws: &Workspace, top: u64, nodes: &[Node], entries: &[Option<Entry>]) -> Result<()> {
    enum Step {
        Enter(u64, usize),
        Exit(u64, usize),
    }
    let entry = |i: usize| {
        entries[i]
            .as_ref()
            .ok_or_else(|| Error::Internal("import: entry missing".into()))
    };
    let mut stack = vec![Step::Enter(top, 0)];
    while let Some(step) = stack.pop() {
        match step {
            Step::Enter(dir_ino, idx) => {
                // Attributes are set after the contents: replacing entries touches the mtime.
                stack.push(Step::Exit(dir_ino, idx));
                for &c in &nodes[idx].children {
                    let name = &nodes[c].name;
                    // Always a fresh row: lookups materialize and change it.
                    let dir = ws.get(dir_ino)?;
                    match ws.lookup(&dir, name)? {
                        Some(old) if old.kind == Kind::Dir && nodes[c].kind == Kind::Dir => {
                            stack.push(Step::Enter(old.ino, c));
                        }
                        Some(old) => {
                            if old.kind == Kind::Dir && old.has_links {
                                // Work around remove_tree deciding what to delete from a
                                // copy of the directory read before it materialized the
                                // link members: materialize the directory first.
                                ws.readdir(&old)?;
                            }
                            ws.remove_tree(&dir, name)?;
                            let dir = ws.get(dir_ino)?;
                            ws.graft(&dir, name, entry(c)?)?;
                        }
                        None => {
                            // `dir` was materialized by the lookup: fetch it again.
                            let dir = ws.get(dir_ino)?;
                            ws.graft(&dir, name, entry(c)?)?;
                        }
                    }
                }
            }
            Step::Exit(dir_ino, 0) => {
                // The destination keeps its own attributes; its entries changed now.
                if !nodes[0].children.is_empty() {
                    ws.setattr(
                        dir_ino,
                        &SetAttr {
                            mtime_ns: Some(now_ns()),
                            ..Default::default()
                        },
                    )?;
                }
            }
            Step::Exit(dir_ino, idx) => {
                let n = &nodes[idx];
                let set = SetAttr {
                    mode: Some(n.mode),
                    uid: Some(n.uid),
                    gid: Some(n.gid),
                    mtime_ns: Some(n.mtime_ns),
                    size: None,
                    atime_ns: None,
                };
                ws.setattr(dir_ino, &set)?;
            }
        }
    }
    Ok(())
}

/// The workspace inode at imported node `idx` (below `top`) and its parent's inode number.
fn resolve_node(ws: &Workspace, top: u64, nodes: &[Node], idx: usize) -> Result<(u64, Inode)> {
    let mut chain = Vec::new();
    let mut i = idx;
    while i != 0 {
        chain.push(i);
        i = nodes[i].parent;
    }
    let mut parent = top;
    let mut cur = ws.get(top)?;
    for &i in chain.iter().rev() {
        let next = ws.lookup(&cur, &nodes[i].name)?.ok_or_else(|| {
            Error::Internal(format!(
                "import: {} vanished",
                String::from_utf8_lossy(&nodes[i].name)
            ))
        })?;
        parent = cur.ino;
        cur = next;
    }
    Ok((parent, cur))
}

/// A merge grafts each top-level entry separately, and every graft gives its link groups
/// fresh numbers, so a group whose names landed in different grafts would split into
/// separate files. Joins such names back into one inode.
fn relink(ws: &Workspace, top: u64, nodes: &[Node], groups: &[Vec<usize>]) -> Result<()> {
    for group in groups {
        let (_, first) = resolve_node(ws, top, nodes, group[0])?;
        for &m in &group[1..] {
            let (parent, inode) = resolve_node(ws, top, nodes, m)?;
            if inode.ino == first.ino {
                continue;
            }
            let name = &nodes[m].name;
            ws.unlink(&ws.get(parent)?, name)?;
            ws.link(first.ino, &ws.get(parent)?, name)?;
            let pidx = nodes[m].parent;
            if pidx != 0 {
                ws.setattr(
                    parent,
                    &SetAttr {
                        mtime_ns: Some(nodes[pidx].mtime_ns),
                        ..Default::default()
                    },
                )?;
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Export
// ---------------------------------------------------------------------------------------

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

struct Exporter<'w, 'a> {
    ws: &'w Workspace<'a>,
    root: bool,
    /// Keep setuid/setgid bits (`--keep-setuid`); otherwise they are dropped.
    keep_setuid: bool,
    stats: ExportStats,
    /// First exported path of each inode with more than one name.
    links: HashMap<u64, PathBuf>,
    done: u64,
    progress: &'w dyn Fn(u64),
}

impl Exporter<'_, '_> {
    /// The permission bits to give a host entry: setuid/setgid dropped unless kept.
    fn host_mode(&mut self, mode: u32) -> u32 {
        let m = mode & 0o7777;
        if self.keep_setuid || m & 0o6000 == 0 {
            return m;
        }
        self.stats.setuid_dropped += 1;
        m & !0o6000
    }

    fn file_done(&mut self) {
        self.done += 1;
        if self.done.is_multiple_of(PROGRESS_EVERY) {
            (self.progress)(self.done);
        }
    }

    /// Makes `p` a real directory we can write into; true if it was created.
    fn make_dir(&self, p: &Path, exists_check: bool) -> Result<bool> {
        if exists_check {
            match fs::symlink_metadata(p) {
                Ok(m) if m.is_dir() => return Ok(false),
                Ok(_) => fs::remove_file(p).map_err(|e| host_err(p, e))?,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(host_err(p, e)),
            }
        }
        fs::DirBuilder::new()
            .mode(0o700)
            .create(p)
            .map_err(|e| host_err(p, e))?;
        Ok(true)
    }

    /// Clears the way for a new non-directory at `p` (only files, symlinks and the like
    /// and empty directories are removed).
    fn clear_slot(&self, p: &Path) -> Result<()> {
        match fs::symlink_metadata(p) {
            Ok(m) if m.is_dir() => fs::remove_dir(p).map_err(|e| {
                host_msg(
                    p,
                    format!(
                        "is a directory and cannot be replaced by a file ({e}); remove it first"
                    ),
                )
            }),
            Ok(_) => fs::remove_file(p).map_err(|e| host_err(p, e)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(host_err(p, e)),
        }
    }

    fn set_owner(&self, p: &Path, i: &Inode) -> Result<()> {
        if self.root {
            ignore_eperm(std::os::unix::fs::lchown(p, Some(i.uid), Some(i.gid)))
                .map_err(|e| host_err(p, e))?;
        }
        Ok(())
    }

    fn write_file(&mut self, i: &Inode, p: &Path) -> Result<()> {
        let hash = i
            .hash
            .ok_or_else(|| Error::Internal(format!("inode {} is a file without content", i.ino)))?;
        let f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NOCTTY)
            .open(p)
            .map_err(|e| host_err(p, e))?;
        if i.size > 0 {
            // One chunk in memory at a time, however large the file; holes stay holes.
            content::copy_to_file(self.ws.db, &hash, i.size, &f).map_err(|e| match e {
                Error::Host { message, .. } => host_msg(p, &message),
                other => other,
            })?;
        }
        if self.root {
            ignore_eperm(std::os::unix::fs::fchown(&f, Some(i.uid), Some(i.gid)))
                .map_err(|e| host_err(p, e))?;
        }
        // After writing and chown, both of which may clear setuid/setgid bits.
        let mode = self.host_mode(i.mode);
        f.set_permissions(fs::Permissions::from_mode(mode))
            .map_err(|e| host_err(p, e))?;
        let t = times(i.mtime_ns);
        // SAFETY: the descriptor is open and `t` holds two timespecs.
        check(unsafe { libc::futimens(f.as_raw_fd(), t.as_ptr()) }).map_err(|e| host_err(p, e))?;
        self.stats.files += 1;
        self.stats.bytes += i.size;
        Ok(())
    }

    /// Creates a FIFO, socket or device node; false if it must be skipped.
    fn make_special(&mut self, i: &Inode, p: &Path, wpath: &str) -> Result<bool> {
        let c = cpath(p).map_err(|e| host_err(p, e))?;
        if i.kind == Kind::Fifo {
            // SAFETY: `c` is a valid NUL-terminated path.
            check(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }).map_err(|e| host_err(p, e))?;
        } else {
            if !self.root {
                self.stats.skipped.push(format!(
                    "{wpath} ({}: only root can create it)",
                    i.kind.name()
                ));
                return Ok(false);
            }
            let mode = (i.kind.ifmt() | (i.mode & 0o1777)) as libc::mode_t;
            // SAFETY: `c` is a valid NUL-terminated path.
            if let Err(e) = check(unsafe { libc::mknod(c.as_ptr(), mode, i.rdev as libc::dev_t) }) {
                self.stats
                    .skipped
                    .push(format!("{wpath} ({}: {e})", i.kind.name()));
                return Ok(false);
            }
        }
        self.set_owner(p, i)?;
        let mode = self.host_mode(i.mode);
        // A FIFO or device node is not opened (that could block or touch a device).
        // SAFETY: `c` is a valid NUL-terminated path.
        check(unsafe { libc::fchmodat(libc::AT_FDCWD, c.as_ptr(), mode as libc::mode_t, 0) })
            .map_err(|e| host_err(p, e))?;
        set_mtime_nofollow(p, i.mtime_ns).map_err(|e| host_err(p, e))?;
        Ok(true)
    }

    /// Recreates one non-directory at `p`.
    fn leaf(
        &mut self,
        i: &Inode,
        p: &Path,
        exists_check: bool,
        wpath: &dyn Fn() -> String,
    ) -> Result<()> {
        if exists_check {
            self.clear_slot(p)?;
        }
        if i.nlink > 1
            && let Some(first) = self.links.get(&i.ino)
        {
            fs::hard_link(first, p).map_err(|e| host_err(p, e))?;
            self.stats.hardlinks += 1;
            if i.kind == Kind::File {
                self.file_done();
            }
            return Ok(());
        }
        match i.kind {
            Kind::File => {
                self.write_file(i, p)?;
                self.file_done();
            }
            Kind::Symlink => {
                let target = i.target.as_deref().unwrap_or_default();
                std::os::unix::fs::symlink(OsStr::from_bytes(target), p)
                    .map_err(|e| host_err(p, e))?;
                self.set_owner(p, i)?;
                set_mtime_nofollow(p, i.mtime_ns).map_err(|e| host_err(p, e))?;
                self.stats.symlinks += 1;
            }
            Kind::Fifo | Kind::Socket | Kind::CharDev | Kind::BlockDev => {
                if !self.make_special(i, p, &wpath())? {
                    return Ok(());
                }
            }
            Kind::Dir => return Err(Error::Internal("leaf called on a directory".into())),
        }
        if i.nlink > 1 {
            self.links.insert(i.ino, p.to_path_buf());
        }
        Ok(())
    }

    /// Recreates the directory `ino` at `host`, depth first; attributes post-order.
    fn tree(&mut self, ino: u64, host: &Path, wpath: Vec<Vec<u8>>) -> Result<()> {
        enum Step {
            Enter {
                ino: u64,
                host: PathBuf,
                wpath: Vec<Vec<u8>>,
                check: bool,
                top: bool,
            },
            Exit {
                inode: Inode,
                host: PathBuf,
            },
        }
        let mut stack = vec![Step::Enter {
            ino,
            host: host.to_path_buf(),
            wpath,
            check: true,
            top: true,
        }];
        while let Some(step) = stack.pop() {
            match step {
                Step::Enter {
                    ino,
                    host,
                    wpath,
                    check,
                    top,
                } => {
                    let created = self.make_dir(&host, check)?;
                    self.stats.dirs += 1;
                    // Always a fresh row: materializing elsewhere may have changed it.
                    let dir = self.ws.get(ino)?;
                    let children = self.ws.readdir(&dir)?;
                    // A directory that existed before the export at the top keeps its
                    // attributes; everything the export makes gets the workspace's.
                    if created || !top {
                        stack.push(Step::Exit {
                            inode: dir,
                            host: host.clone(),
                        });
                    }
                    for (name, child) in children {
                        let p = host.join(OsStr::from_bytes(&name));
                        if child.kind == Kind::Dir {
                            let mut w = wpath.clone();
                            w.push(name);
                            stack.push(Step::Enter {
                                ino: child.ino,
                                host: p,
                                wpath: w,
                                check: !created,
                                top: false,
                            });
                        } else {
                            let shown = || {
                                let mut w = wpath.clone();
                                w.push(name.clone());
                                path::display(&w)
                            };
                            self.leaf(&child, &p, !created, &shown)?;
                        }
                    }
                }
                Step::Exit { inode, host } => {
                    self.set_owner(&host, &inode)?;
                    let mode = self.host_mode(inode.mode);
                    fs::set_permissions(&host, fs::Permissions::from_mode(mode))
                        .map_err(|e| host_err(&host, e))?;
                    set_mtime_nofollow(&host, inode.mtime_ns).map_err(|e| host_err(&host, e))?;
                }
            }
        }
        Ok(())
    }
}

/// Exports the workspace directory (or single file) at `src` to the host path `host`.
///
/// Refuses, before writing anything, if `host` exists and is a non-empty directory or
/// anything else, unless `force`: then the export writes into it, replacing same-named
/// entries and keeping unrelated ones. Owners are set only when running as root; device
/// nodes and sockets are recreated only by root and otherwise reported in `skipped`.
/// A file exported into an existing directory keeps its name there. Setuid and setgid
/// bits are dropped (and counted) unless `keep_setuid`.
pub fn export(
    ws: &Workspace,
    src: &[Vec<u8>],
    host: &Path,
    force: bool,
    keep_setuid: bool,
    progress: &dyn Fn(u64),
) -> Result<ExportStats> {
    let (node, resolved) = ws
        .resolve_full(src, true)?
        .ok_or_else(|| Error::NotFound(path::display(src)))?;
    let existing = match fs::symlink_metadata(host) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(host_err(host, e)),
    };
    match &existing {
        Some(m) => {
            let nonempty = !m.is_dir()
                || fs::read_dir(host)
                    .map_err(|e| host_err(host, e))?
                    .next()
                    .is_some();
            if nonempty && !force {
                return Err(Error::Refused(format!(
                    "{}: already exists and is not empty; pass --force to export into it \
                     (same-named files are replaced, other files are kept)",
                    host.display()
                )));
            }
        }
        None => {
            if let Some(parent) = host.parent().filter(|p| !p.as_os_str().is_empty()) {
                fs::create_dir_all(parent).map_err(|e| host_err(parent, e))?;
            }
        }
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let mut ex = Exporter {
        ws,
        root,
        keep_setuid,
        stats: ExportStats::default(),
        links: HashMap::new(),
        done: 0,
        progress,
    };
    if node.kind == Kind::Dir {
        ex.tree(node.ino, host, resolved)?;
    } else {
        let target = match (&existing, resolved.last()) {
            (Some(m), Some(name)) if m.is_dir() => host.join(OsStr::from_bytes(name)),
            _ => host.to_path_buf(),
        };
        let shown = || path::display(&resolved);
        ex.leaf(&node, &target, existing.is_some(), &shown)?;
    }
    progress(ex.done);
    Ok(ex.stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use crate::workspace::create_workspace;
    use std::os::unix::fs::symlink;

    fn set_mtime(p: &Path, secs: i64, nsec: i64) {
        set_mtime_nofollow(p, secs * 1_000_000_000 + nsec).unwrap();
    }

    fn mkfifo(p: &Path, mode: u32) {
        let c = cpath(p).unwrap();
        // SAFETY: valid path.
        check(unsafe { libc::mkfifo(c.as_ptr(), mode as libc::mode_t) }).unwrap();
        fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
    }

    /// Gives every entry below `dir` (and `dir`) a distinct mtime with nanoseconds, post-order.
    fn stamp(dir: &Path, k: &mut i64) {
        let mut names: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        for p in names {
            if fs::symlink_metadata(&p).unwrap().is_dir() {
                stamp(&p, k);
            } else {
                *k += 1;
                set_mtime(&p, 1_600_000_000 + *k, 123_456_789 + *k);
            }
        }
        *k += 1;
        set_mtime(dir, 1_600_000_000 + *k, 987_654_321 - *k);
    }

    fn odd_name() -> &'static OsStr {
        OsStr::from_bytes(b"bad\xff\xfe name.bin")
    }

    fn make_host(root: &Path) {
        fs::create_dir_all(root.join("a/b")).unwrap();
        fs::write(root.join("a/b/c.txt"), "hello\n").unwrap();
        fs::write(root.join("a/x.sh"), "#!/bin/sh\necho hi\n").unwrap();
        fs::set_permissions(root.join("a/x.sh"), fs::Permissions::from_mode(0o751)).unwrap();
        fs::write(root.join("a/suid"), "s").unwrap();
        fs::set_permissions(root.join("a/suid"), fs::Permissions::from_mode(0o4755)).unwrap();
        symlink("../outside", root.join("a/rel")).unwrap();
        symlink("/nonexistent/dangling/target", root.join("abs")).unwrap();
        fs::create_dir(root.join("d1")).unwrap();
        fs::create_dir(root.join("d2")).unwrap();
        fs::write(root.join("d1/h1"), "linked content").unwrap();
        fs::hard_link(root.join("d1/h1"), root.join("d2/h2")).unwrap();
        fs::create_dir(root.join("empty")).unwrap();
        fs::write(root.join(odd_name()), b"raw bytes").unwrap();
        let big: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
        fs::write(root.join("big.bin"), &big).unwrap();
        fs::write(root.join("exact.bin"), vec![9u8; CHUNK_SIZE]).unwrap();
        fs::write(root.join("zero"), b"").unwrap();
        mkfifo(&root.join("fifo"), 0o640);
        fs::set_permissions(root.join("a"), fs::Permissions::from_mode(0o1755)).unwrap();
        let mut k = 0;
        stamp(root, &mut k);
    }

    /// Asserts that two host trees are equal: kinds, contents, targets, modes, owners, mtimes.
    fn compare(a: &Path, b: &Path, top_attrs: bool) {
        let ma = fs::symlink_metadata(a).unwrap();
        let mb = fs::symlink_metadata(b).unwrap_or_else(|e| panic!("{}: {e}", b.display()));
        assert_eq!(
            kind_of(&ma.file_type()),
            kind_of(&mb.file_type()),
            "{}",
            b.display()
        );
        if top_attrs {
            if !ma.file_type().is_symlink() {
                assert_eq!(
                    ma.mode() & 0o7777,
                    mb.mode() & 0o7777,
                    "mode of {}",
                    b.display()
                );
            }
            assert_eq!(
                (ma.uid(), ma.gid()),
                (mb.uid(), mb.gid()),
                "owner of {}",
                b.display()
            );
            assert_eq!(
                mtime_ns_of(&ma),
                mtime_ns_of(&mb),
                "mtime of {}",
                b.display()
            );
        }
        let ft = ma.file_type();
        if ft.is_file() {
            assert_eq!(
                fs::read(a).unwrap(),
                fs::read(b).unwrap(),
                "content of {}",
                b.display()
            );
        } else if ft.is_symlink() {
            assert_eq!(
                fs::read_link(a).unwrap(),
                fs::read_link(b).unwrap(),
                "target of {}",
                b.display()
            );
        } else if ft.is_dir() {
            let names = |d: &Path| {
                let mut v: Vec<_> = fs::read_dir(d)
                    .unwrap()
                    .map(|e| e.unwrap().file_name())
                    .collect();
                v.sort();
                v
            };
            let (na, nb) = (names(a), names(b));
            assert_eq!(na, nb, "entries of {}", b.display());
            for n in na {
                compare(&a.join(&n), &b.join(&n), true);
            }
        }
    }

    fn assert_linked(out: &Path) {
        let m1 = fs::symlink_metadata(out.join("d1/h1")).unwrap();
        let m2 = fs::symlink_metadata(out.join("d2/h2")).unwrap();
        assert_eq!(m1.ino(), m2.ino(), "hard-linked pair was split");
        assert_eq!(m1.nlink(), 2);
    }

    fn new_vault(dir: &Path) -> Store {
        let mut store = Store::create(&dir.join("v.avfs")).unwrap();
        store
            .write(|db| {
                create_workspace(db, "main", None, None)?;
                Ok(())
            })
            .unwrap();
        store
    }

    fn comps(p: &str) -> Vec<Vec<u8>> {
        path::components(p.as_bytes()).unwrap()
    }

    #[test]
    fn round_trip_into_root() {
        let tmp = tempfile::tempdir().unwrap();
        let host = tmp.path().join("host");
        make_host(&host);
        let mut store = new_vault(tmp.path());
        let calls = std::cell::Cell::new(0);
        let stats = store
            .write(|db| {
                let mut ws = Workspace::open(db, "main")?;
                let st = import(&ws, &host, &[], true, &|_| calls.set(calls.get() + 1))?;
                ws.checkpoint(Some("c1"), None, "test")?;
                Ok(st)
            })
            .unwrap();
        assert!(calls.get() >= 1);
        // a, a/b, d1, d2, empty
        assert_eq!(stats.dirs, 5);
        // c.txt x.sh suid h1 odd big exact zero
        assert_eq!(stats.files, 8);
        assert_eq!(stats.symlinks, 2);
        assert_eq!(stats.hardlinks, 1);
        assert!(stats.skipped.is_empty(), "{:?}", stats.skipped);

        // From the live layer the import built.
        let out = tmp.path().join("out");
        let st = store
            .write(|db| {
                export(
                    &Workspace::open(db, "main")?,
                    &[],
                    &out,
                    false,
                    true,
                    &|_| {},
                )
            })
            .unwrap();
        assert_eq!(st.hardlinks, 1);
        assert_eq!(st.symlinks, 2);
        compare(&host, &out, false);
        assert_linked(&out);

        // From the stored trees alone: a fresh live layer on the checkpoint.
        let out2 = tmp.path().join("out2");
        store
            .write(|db| {
                let mut ws = Workspace::open(db, "main")?;
                let cp = ws.find_checkpoint("c1")?;
                ws.restore(&cp)?;
                export(&ws, &[], &out2, false, true, &|_| {})
            })
            .unwrap();
        compare(&host, &out2, false);
        assert_linked(&out2);
    }

    #[test]
    fn round_trip_into_new_dir() {
        let tmp = tempfile::tempdir().unwrap();
        let host = tmp.path().join("host");
        make_host(&host);
        let mut store = new_vault(tmp.path());
        let out = tmp.path().join("deep/out");
        store
            .write(|db| {
                let mut ws = Workspace::open(db, "main")?;
                import(&ws, &host, &comps("/sub/dir"), true, &|_| {})?;
                ws.checkpoint(Some("c1"), None, "test")?;
                let cp = ws.find_checkpoint("c1")?;
                ws.restore(&cp)?;
                export(&ws, &comps("/sub/dir"), &out, false, true, &|_| {})
            })
            .unwrap();
        // The import root took the host directory's own attributes.
        compare(&host, &out, true);
        assert_linked(&out);

        // A single file, into a file path and into an existing empty directory.
        let one = tmp.path().join("one.sh");
        let into = tmp.path().join("into");
        fs::create_dir(&into).unwrap();
        store
            .write(|db| {
                let ws = Workspace::open(db, "main")?;
                export(&ws, &comps("/sub/dir/a/x.sh"), &one, false, true, &|_| {})?;
                export(&ws, &comps("/sub/dir/a/x.sh"), &into, false, true, &|_| {})
            })
            .unwrap();
        compare(&host.join("a/x.sh"), &one, true);
        compare(&host.join("a/x.sh"), &into.join("x.sh"), true);
    }

    #[test]
    fn hard_link_change_reaches_both_names() {
        let tmp = tempfile::tempdir().unwrap();
        let host = tmp.path().join("host");
        make_host(&host);
        let mut store = new_vault(tmp.path());
        store
            .write(|db| {
                let mut ws = Workspace::open(db, "main")?;
                import(&ws, &host, &[], true, &|_| {})?;
                ws.checkpoint(Some("c1"), None, "test")?;
                Ok(())
            })
            .unwrap();
        let out = tmp.path().join("out");
        store
            .write(|db| {
                let mut ws = Workspace::open(db, "main")?;
                let ino = ws.resolve_existing(&comps("/d1/h1"), false)?.ino;
                assert_eq!(ws.resolve_existing(&comps("/d2/h2"), false)?.ino, ino);
                ws.set_content(ino, crate::store::content::write_bytes(db, b"new")?.0, 3)?;
                ws.checkpoint(Some("c2"), None, "test")?;
                let cp = ws.find_checkpoint("c2")?;
                ws.restore(&cp)?;
                export(&ws, &[], &out, false, true, &|_| {})
            })
            .unwrap();
        assert_eq!(fs::read(out.join("d1/h1")).unwrap(), b"new");
        assert_eq!(fs::read(out.join("d2/h2")).unwrap(), b"new");
        assert_linked(&out);
    }

    #[test]
    fn export_refuses_non_empty_target() {
        let tmp = tempfile::tempdir().unwrap();
        let host = tmp.path().join("host");
        make_host(&host);
        let mut store = new_vault(tmp.path());
        store
            .write(|db| import(&Workspace::open(db, "main")?, &host, &[], true, &|_| {}))
            .unwrap();

        let out = tmp.path().join("out");
        fs::create_dir(&out).unwrap();
        fs::write(out.join("keep"), "mine").unwrap();
        fs::write(out.join("zero"), "will be replaced").unwrap();
        let file = tmp.path().join("file");
        fs::write(&file, "a file").unwrap();
        for target in [&out, &file] {
            let err = store
                .write(|db| {
                    export(
                        &Workspace::open(db, "main")?,
                        &[],
                        target,
                        false,
                        true,
                        &|_| {},
                    )
                })
                .unwrap_err();
            assert!(
                matches!(err, Error::Refused(ref m) if m.contains("--force")),
                "{err}"
            );
        }
        let mut names: Vec<_> = fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["keep", "zero"]);
        assert_eq!(fs::read(out.join("zero")).unwrap(), b"will be replaced");
        assert_eq!(fs::read(&file).unwrap(), b"a file");

        // With force: same-named entries replaced, unrelated ones kept; a symlink in the
        // way is replaced, never written through.
        let victim = tmp.path().join("victim");
        fs::create_dir(&victim).unwrap();
        symlink(&victim, out.join("a")).unwrap();
        store
            .write(|db| {
                export(
                    &Workspace::open(db, "main")?,
                    &[],
                    &out,
                    true,
                    true,
                    &|_| {},
                )
            })
            .unwrap();
        assert_eq!(fs::read(out.join("keep")).unwrap(), b"mine");
        assert_eq!(fs::read(out.join("zero")).unwrap(), b"");
        assert!(fs::symlink_metadata(out.join("a")).unwrap().is_dir());
        assert_eq!(fs::read_dir(&victim).unwrap().count(), 0);
        fs::remove_file(out.join("keep")).unwrap();
        compare(&host, &out, false);
    }

    #[test]
    fn import_merges_into_existing_dir() {
        let tmp = tempfile::tempdir().unwrap();
        let host = tmp.path().join("host");
        make_host(&host);
        let mut store = new_vault(tmp.path());
        store
            .write(|db| {
                let ws = Workspace::open(db, "main")?;
                let root = ws.get(ROOT_INO)?;
                let m = ws.create(&root, b"m", NewNode::new(Kind::Dir, 0o755))?;
                // `a` is a file here and a directory on the host: replaced.
                ws.create(&m, b"a", NewNode::new(Kind::File, 0o644))?;
                let m = ws.get(m.ino)?;
                let d1 = ws.create(&m, b"d1", NewNode::new(Kind::Dir, 0o700))?;
                ws.create(&d1, b"old", NewNode::new(Kind::File, 0o644))?;
                import(&ws, &host, &comps("/m"), true, &|_| {})?;
                // Importing twice replaces everything with equal content.
                import(&ws, &host, &comps("/m"), true, &|_| {})?;
                Ok(())
            })
            .unwrap();
        let out = tmp.path().join("out");
        store
            .write(|db| {
                let mut ws = Workspace::open(db, "main")?;
                ws.checkpoint(Some("c1"), None, "test")?;
                let cp = ws.find_checkpoint("c1")?;
                ws.restore(&cp)?;
                export(&ws, &comps("/m"), &out, false, true, &|_| {})
            })
            .unwrap();
        // The merged d1 keeps its extra file and takes the host's attributes.
        fs::remove_file(out.join("d1/old")).unwrap();
        set_mtime(&out.join("d1"), 0, 0);
        set_mtime(&host.join("d1"), 0, 0);
        compare(&host, &out, false);
        assert_linked(&out);
    }

    #[test]
    fn import_errors_name_the_host_path() {
        let tmp = tempfile::tempdir().unwrap();
        let mut store = new_vault(tmp.path());
        let missing = tmp.path().join("missing");
        let err = store
            .write(|db| import(&Workspace::open(db, "main")?, &missing, &[], true, &|_| {}))
            .unwrap_err();
        assert!(
            matches!(err, Error::Host { ref what, .. } if what.contains("missing")),
            "{err}"
        );
        // Importing a directory that holds the vault leaves the vault out.
        fs::write(tmp.path().join("f"), "x").unwrap();
        let st = store
            .write(|db| {
                import(
                    &Workspace::open(db, "main")?,
                    tmp.path(),
                    &comps("/t"),
                    true,
                    &|_| {},
                )
            })
            .unwrap();
        assert_eq!(st.files, 1);
        assert!(
            st.skipped.iter().any(|s| s.contains("v.avfs")),
            "{:?}",
            st.skipped
        );
    }

    #[test]
    fn merge_replacing_a_dir_with_links_keeps_counts() {
        let tmp = tempfile::tempdir().unwrap();
        let host = tmp.path().join("host");
        fs::create_dir_all(host.join("x/d")).unwrap();
        fs::create_dir_all(host.join("y")).unwrap();
        fs::write(host.join("x/d/h1"), "l").unwrap();
        fs::hard_link(host.join("x/d/h1"), host.join("y/h2")).unwrap();
        let host2 = tmp.path().join("host2");
        fs::create_dir_all(&host2).unwrap();
        fs::write(host2.join("x"), "now a file").unwrap();
        let mut store = new_vault(tmp.path());
        store
            .write(|db| {
                let mut ws = Workspace::open(db, "main")?;
                import(&ws, &host, &[], true, &|_| {})?;
                ws.checkpoint(Some("c1"), None, "test")?;
                let cp = ws.find_checkpoint("c1")?;
                // A fresh live layer: /x is not materialized yet.
                ws.restore(&cp)?;
                import(&ws, &host2, &[], true, &|_| {})?;
                let h2 = ws.resolve_existing(&comps("/y/h2"), false)?;
                assert_eq!(h2.nlink, 1);
                assert_eq!(ws.resolve_existing(&comps("/x"), false)?.kind, Kind::File);
                let orphans: i64 = db.query_row(
                    "SELECT COUNT(*) FROM dentry d WHERE d.parent != 1 AND NOT EXISTS
                     (SELECT 1 FROM inode i WHERE i.layer = d.layer AND i.ino = d.parent)",
                    [],
                    |r| r.get(0),
                )?;
                assert_eq!(orphans, 0);
                Ok(())
            })
            .unwrap();
    }

    /// User + system CPU time of this process (all threads), in seconds.
    fn cpu_seconds() -> f64 {
        // SAFETY: getrusage fills the zeroed struct it is given.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        tv(ru.ru_utime) + tv(ru.ru_stime)
    }

    /// `cargo test --release --lib hostio::tests::import_speed -- --ignored --nocapture`
    /// (set TMPDIR to choose where the 100 000 files and the vault go).
    #[test]
    #[ignore = "timing probe: 100 000 files; speed is measured by scripts/bench.sh, not asserted in tests"]
    fn import_speed() {
        let tmp = tempfile::tempdir().unwrap();
        let host = tmp.path().join("host");
        for d in 0..100 {
            let dir = host.join(format!("dir{d:03}"));
            fs::create_dir_all(&dir).unwrap();
            for f in 0..1000 {
                let body = format!("file {d} {f}\n").repeat(1 + f % 8);
                fs::write(dir.join(format!("file{f:04}.txt")), body).unwrap();
            }
        }
        let mut store = new_vault(tmp.path());
        let report = |what: &str, files: u64, t: std::time::Instant, cpu0: f64| {
            let el = t.elapsed();
            eprintln!(
                "{what} {files} files in {el:.2?} ({:.2}s CPU): {:.0} files/s",
                cpu_seconds() - cpu0,
                files as f64 / el.as_secs_f64()
            );
        };
        let (t, cpu0) = (std::time::Instant::now(), cpu_seconds());
        let dest = comps("/imported");
        let st = store
            .write(|db| import(&Workspace::open(db, "main")?, &host, &dest, true, &|_| {}))
            .unwrap();
        report("imported", st.files, t, cpu0);
        let out = tmp.path().join("out");
        let (t, cpu0) = (std::time::Instant::now(), cpu_seconds());
        let st = store
            .write(|db| {
                export(
                    &Workspace::open(db, "main")?,
                    &dest,
                    &out,
                    false,
                    true,
                    &|_| {},
                )
            })
            .unwrap();
        report("exported", st.files, t, cpu0);
    }
}
