//! Import: a host directory tree into a workspace (see the module above).

use super::*;
use crate::store::chunkdedupe::{Dedupe, Reader};
use crate::store::objects::{ChunkRow, Packing};

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
    /// Hashed and compressed by the reader: the storing thread only inserts.
    Chunk(ChunkRow),
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
        if let Msg::Chunk(row) = &m {
            self.bytes += row.len;
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
///
/// `path` opens it (a short path at any depth: `Rel::proc_path`); `shown` names it in
/// errors.
fn read_file(
    path: &Path,
    shown: &Path,
    m: &fs::Metadata,
    tx: &mut Batcher,
    dedupe: &mut Reader,
) -> Result<(Extents, u64)> {
    use std::os::unix::fs::FileExt;
    let host_err = |_: &Path, e: io::Error| host_err(shown, e);
    let host_msg = |_: &Path, msg: &str| host_msg(shown, msg.to_string());
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
    content::check_size(expect).map_err(|e| host_msg(path, &e.to_string()))?;
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
                // An import stores a tree once: it takes the smaller encoding. A chunk
                // already sent or already in the vault is not compressed (`chunkdedupe`).
                if let Some(row) = dedupe.row(h, buf, Packing::Small) {
                    tx.send(Msg::Chunk(row))?;
                }
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

/// The host path of entry `name` of directory node `idx` (for messages: it may be longer
/// than PATH_MAX).
fn host_path(root: &Path, nodes: &[Node], idx: usize, name: Option<&[u8]>) -> PathBuf {
    let mut comps: Vec<&[u8]> = name.into_iter().collect();
    let mut i = idx;
    while i != 0 && i != usize::MAX {
        comps.push(&nodes[i].name);
        i = nodes[i].parent;
    }
    let mut p = root.to_path_buf();
    for c in comps.iter().rev() {
        p.push(OsStr::from_bytes(c));
    }
    p
}

/// Walks the host tree (the reader thread): metadata, symlink targets and file contents.
fn walk_host(
    root: &Path,
    exclude: &HashSet<(u64, u64)>,
    tx: SyncSender<Vec<Msg>>,
    dedupe: &Dedupe,
) -> Result<Walk> {
    let mut dedupe = dedupe.reader();
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
    // Directories are reached relative to an open ancestor (`Rel`), through a short
    // `/proc/self/fd` path: a tree deeper than PATH_MAX imports like any other.
    let top = Rel::root_following(root).map_err(|e| host_err(root, e))?;
    let mut stack = vec![(0usize, top)];
    while let Some((idx, rel)) = stack.pop() {
        let dir = PathBuf::from(OsStr::from_bytes(rel.proc_path().as_bytes()));
        let shown = |nodes: &[Node], name: Option<&[u8]>| host_path(root, nodes, idx, name);
        let rd = fs::read_dir(&dir).map_err(|e| host_err(&shown(&nodes, None), e))?;
        let mut children = Vec::new();
        let mut anchor = None;
        for ent in rd {
            let ent = ent.map_err(|e| host_err(&shown(&nodes, None), e))?;
            let name = ent.file_name().into_vec();
            let p = ent.path();
            objects::validate_name(&name).map_err(|why| {
                host_msg(&shown(&nodes, Some(&name)), format!("invalid name ({why})"))
            })?;
            // Does not follow symlinks.
            let m = ent
                .metadata()
                .map_err(|e| host_err(&shown(&nodes, Some(&name)), e))?;
            let kind = kind_of(&m.file_type());
            if kind == Kind::File && exclude.contains(&(m.dev(), m.ino())) {
                skipped.push(format!(
                    "{} (the vault itself)",
                    shown(&nodes, Some(&name)).display()
                ));
                continue;
            }
            let child = nodes.len();
            let mut node = Node::new(name.clone(), idx, kind, &m);
            match kind {
                Kind::Dir => {
                    let at = rel
                        .child(&mut anchor, &name)
                        .map_err(|e| host_err(&shown(&nodes, Some(&name)), e))?;
                    stack.push((child, at));
                }
                Kind::Symlink => {
                    let t =
                        fs::read_link(&p).map_err(|e| host_err(&shown(&nodes, Some(&name)), e))?;
                    node.target = Some(t.into_os_string().into_vec());
                }
                Kind::File => {
                    let key = (m.dev(), m.ino());
                    let (chunks, size) = match linked.get(&key) {
                        Some(c) => c.clone(),
                        None => {
                            let c =
                                read_file(&p, &shown(&nodes, Some(&name)), &m, tx, &mut dedupe)?;
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
            Msg::Chunk(row) => objects::put_chunk_row(db, &row)?,
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
    let dedupe = Dedupe::new(ws.db);
    let (walk, contents) = std::thread::scope(|s| -> Result<_> {
        let (tx, rx) = sync_channel::<Vec<Msg>>(CHANNEL_DEPTH);
        let exclude = &exclude;
        let dedupe = &dedupe;
        let reader = s.spawn(move || walk_host(host, exclude, tx, dedupe));
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
