//! Tree diff: walks two roots together and skips equal subtrees (equal hashes), so the
//! cost is O(changes × depth), not O(tree size).

use rusqlite::Connection;
use serde::Serialize;

use crate::error::Result;
use crate::linediff;
use crate::store::objects::{Entry, Hash, Kind, get_tree};
use crate::workspace::path::display;

pub mod filter;
pub mod renames;
pub mod stat;

/// What happened to a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
    TypeChanged,
    ModeChanged,
    /// Only the extended attributes (tags, metadata, other `user.*`) differ.
    MetaChanged,
    /// A deleted file and an added file paired by content (see `renames`): `path` is
    /// the new path, `from` the old one. Only `renames::detect` makes these.
    Renamed,
}

impl ChangeKind {
    pub fn sigil(self) -> &'static str {
        match self {
            ChangeKind::Added => "A",
            ChangeKind::Modified => "M",
            ChangeKind::Deleted => "D",
            ChangeKind::TypeChanged => "T",
            ChangeKind::ModeChanged => "P",
            ChangeKind::MetaChanged => "X",
            ChangeKind::Renamed => "R",
        }
    }
}

#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Change {
    /// Workspace path (the new path of a rename).
    pub path: String,
    pub kind: ChangeKind,
    /// File type before: file, dir, symlink, fifo, socket, char_device, block_device;
    /// null where the path did not exist.
    pub type_before: Option<&'static str>,
    /// File type after; null where the path no longer exists.
    pub type_after: Option<&'static str>,
    /// Size in bytes before; null for directories and the missing side.
    pub size_before: Option<u64>,
    /// Size in bytes after; null for directories and the missing side.
    pub size_after: Option<u64>,
    /// Permission bits before, 4 octal digits; null on the missing side.
    pub mode_before: Option<String>,
    /// Permission bits after, 4 octal digits; null on the missing side.
    pub mode_after: Option<String>,
    /// Unified diff of a text file (only with `--patch`): 3 lines of context around each
    /// change, whatever the file's size (an edit of a text file up to 64 MiB; an added or
    /// deleted file up to 1 MiB, as its patch is its whole text).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    /// A rename's old path (only on `renamed` changes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// A rename's similarity in percent: 100 for the same content (only on `renamed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub similarity: Option<u8>,
    #[serde(skip)]
    pub before: Option<Entry>,
    #[serde(skip)]
    pub after: Option<Entry>,
    /// The path as raw name bytes (`path` is for display and loses invalid UTF-8).
    #[serde(skip)]
    pub comps: Vec<Vec<u8>>,
}

/// What a diff compares besides type, content and mode.
#[derive(Clone, Copy, Debug)]
pub struct DiffOptions {
    /// Report entries whose extended attributes alone differ, as `MetaChanged` (what
    /// people and agents see); the search index, which cares only for content, leaves
    /// them out.
    pub xattrs: bool,
}

impl Default for DiffOptions {
    fn default() -> Self {
        DiffOptions { xattrs: true }
    }
}

/// How many changes of each kind a change list has.
#[derive(Clone, Debug, Default, Serialize, schemars::JsonSchema)]
pub struct ChangeSummary {
    pub added: usize,
    pub modified: usize,
    pub deleted: usize,
    pub type_changed: usize,
    pub mode_changed: usize,
    pub meta_changed: usize,
    /// Present only when some change is a rename, so consumers of change lists without
    /// rename detection (the exec envelope) see the shape they always saw.
    #[serde(skip_serializing_if = "is_zero")]
    pub renamed: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl ChangeSummary {
    pub fn of(changes: &[Change]) -> ChangeSummary {
        let mut s = ChangeSummary::default();
        for c in changes {
            s.add(c.kind);
        }
        s
    }

    /// Counts one change of this kind.
    pub fn add(&mut self, kind: ChangeKind) {
        match kind {
            ChangeKind::Added => self.added += 1,
            ChangeKind::Modified => self.modified += 1,
            ChangeKind::Deleted => self.deleted += 1,
            ChangeKind::TypeChanged => self.type_changed += 1,
            ChangeKind::ModeChanged => self.mode_changed += 1,
            ChangeKind::MetaChanged => self.meta_changed += 1,
            ChangeKind::Renamed => self.renamed += 1,
        }
    }
}

fn size_of(e: &Entry) -> Option<u64> {
    (e.kind != Kind::Dir).then_some(e.size)
}

/// One change at `comps` from entry `a` to entry `b`, with sizes, types and modes filled in.
pub fn change(
    comps: Vec<Vec<u8>>,
    kind: ChangeKind,
    a: Option<&Entry>,
    b: Option<&Entry>,
) -> Change {
    Change {
        path: display(&comps),
        comps,
        kind,
        type_before: a.map(|e| e.kind.name()),
        type_after: b.map(|e| e.kind.name()),
        size_before: a.and_then(size_of),
        size_after: b.and_then(size_of),
        mode_before: a.map(|e| format!("{:04o}", e.mode & 0o7777)),
        mode_after: b.map(|e| format!("{:04o}", e.mode & 0o7777)),
        patch: None,
        from: None,
        similarity: None,
        before: a.cloned(),
        after: b.cloned(),
    }
}

/// Every change from root `a` to root `b`, sorted by path.
pub fn diff_roots(db: &Connection, a: &Hash, b: &Hash) -> Result<Vec<Change>> {
    diff_roots_with(db, a, b, DiffOptions::default())
}

/// `diff_roots`, comparing what `opts` asks for too.
pub fn diff_roots_with(
    db: &Connection,
    a: &Hash,
    b: &Hash,
    opts: DiffOptions,
) -> Result<Vec<Change>> {
    let mut out = Vec::new();
    if a != b {
        let ta = get_tree(db, a)?;
        let tb = get_tree(db, b)?;
        if let (Some(ra), Some(rb)) = (&ta.root_attrs, &tb.root_attrs) {
            let kind = if ra.mode != rb.mode || ra.uid != rb.uid || ra.gid != rb.gid {
                Some(ChangeKind::ModeChanged)
            } else if opts.xattrs && ra.xattrs != rb.xattrs {
                Some(ChangeKind::MetaChanged)
            } else {
                None
            };
            if let Some(kind) = kind {
                let mut c = change(vec![], kind, None, None);
                c.type_before = Some("dir");
                c.type_after = Some("dir");
                c.mode_before = Some(format!("{:04o}", ra.mode));
                c.mode_after = Some(format!("{:04o}", rb.mode));
                out.push(c);
            }
        }
        let mut w = Walk {
            db,
            opts,
            out,
            frames: vec![],
        };
        w.frames.push(Frame::Pair {
            a: ta.entries,
            b: tb.entries,
            i: 0,
            j: 0,
            pops: false,
        });
        w.run(&mut Vec::new())?;
        out = w.out;
    }
    Ok(out)
}

/// The changes from entry `a` to entry `b` (either may be absent) at `parent`/name, with
/// everything below them: the diff of one subtree, for callers that walk trees themselves.
pub fn diff_entry(
    db: &Connection,
    parent: &[Vec<u8>],
    a: Option<&Entry>,
    b: Option<&Entry>,
    opts: DiffOptions,
) -> Result<Vec<Change>> {
    let mut w = Walk {
        db,
        opts,
        out: Vec::new(),
        frames: vec![],
    };
    let mut prefix = parent.to_vec();
    match (a, b) {
        (Some(a), Some(b)) => w.pair(&mut prefix, a, b)?,
        (Some(a), None) => w.whole(&mut prefix, a, ChangeKind::Deleted)?,
        (None, Some(b)) => w.whole(&mut prefix, b, ChangeKind::Added)?,
        (None, None) => {}
    }
    w.run(&mut prefix)?;
    Ok(w.out)
}

struct Walk<'a> {
    db: &'a Connection,
    opts: DiffOptions,
    out: Vec<Change>,
    /// The directories being compared, innermost last: an explicit stack instead of
    /// recursion, so that depth costs memory, never the thread's stack.
    frames: Vec<Frame>,
}

/// A directory listing being gone through; `pops`: its name was pushed on the prefix
/// when it was entered, and is taken off when it is done.
enum Frame {
    /// Two listings merged by name.
    Pair {
        a: Vec<Entry>,
        b: Vec<Entry>,
        i: usize,
        j: usize,
        pops: bool,
    },
    /// A listing added or deleted whole.
    Whole {
        entries: Vec<Entry>,
        i: usize,
        kind: ChangeKind,
        pops: bool,
    },
}

fn path_of(prefix: &[Vec<u8>], name: &[u8]) -> Vec<Vec<u8>> {
    let mut p = Vec::with_capacity(prefix.len() + 1);
    p.extend_from_slice(prefix);
    p.push(name.to_vec());
    p
}

impl Walk<'_> {
    /// Goes through the frames until none is left, in the order a recursive walk would:
    /// each entry's change, then what is below it.
    fn run(&mut self, prefix: &mut Vec<Vec<u8>>) -> Result<()> {
        while let Some(top) = self.frames.last_mut() {
            let step = match top {
                Frame::Pair { a, b, i, j, pops } => {
                    let order = match (a.get(*i), b.get(*j)) {
                        (Some(x), Some(y)) => x.name.cmp(&y.name),
                        (Some(_), None) => std::cmp::Ordering::Less,
                        (None, Some(_)) => std::cmp::Ordering::Greater,
                        (None, None) => {
                            let pops = *pops;
                            self.frames.pop();
                            if pops {
                                prefix.pop();
                            }
                            continue;
                        }
                    };
                    match order {
                        std::cmp::Ordering::Less => {
                            *i += 1;
                            (Some(a[*i - 1].clone()), None)
                        }
                        std::cmp::Ordering::Greater => {
                            *j += 1;
                            (None, Some(b[*j - 1].clone()))
                        }
                        std::cmp::Ordering::Equal => {
                            *i += 1;
                            *j += 1;
                            (Some(a[*i - 1].clone()), Some(b[*j - 1].clone()))
                        }
                    }
                }
                Frame::Whole {
                    entries,
                    i,
                    kind,
                    pops,
                } => match entries.get(*i) {
                    Some(e) => {
                        *i += 1;
                        match kind {
                            ChangeKind::Deleted => (Some(e.clone()), None),
                            _ => (None, Some(e.clone())),
                        }
                    }
                    None => {
                        let pops = *pops;
                        self.frames.pop();
                        if pops {
                            prefix.pop();
                        }
                        continue;
                    }
                },
            };
            match step {
                (Some(a), Some(b)) => self.pair(prefix, &a, &b)?,
                (Some(a), None) => self.whole(prefix, &a, ChangeKind::Deleted)?,
                (None, Some(b)) => self.whole(prefix, &b, ChangeKind::Added)?,
                (None, None) => {}
            }
        }
        Ok(())
    }

    /// An entry added or deleted with everything below it.
    fn whole(&mut self, prefix: &mut Vec<Vec<u8>>, e: &Entry, kind: ChangeKind) -> Result<()> {
        let p = path_of(prefix, &e.name);
        self.out.push(match kind {
            ChangeKind::Deleted => change(p, kind, Some(e), None),
            _ => change(p, kind, None, Some(e)),
        });
        if e.kind == Kind::Dir {
            let tree = get_tree(self.db, e.hash.as_ref().unwrap())?;
            prefix.push(e.name.clone());
            self.frames.push(Frame::Whole {
                entries: tree.entries,
                i: 0,
                kind,
                pops: true,
            });
        }
        Ok(())
    }

    fn pair(&mut self, prefix: &mut Vec<Vec<u8>>, a: &Entry, b: &Entry) -> Result<()> {
        let attrs_differ = a.mode != b.mode || a.uid != b.uid || a.gid != b.gid;
        let content_differs =
            a.hash != b.hash || a.size != b.size || a.target != b.target || a.rdev != b.rdev;
        let xattrs_differ = self.opts.xattrs && a.xattrs != b.xattrs;
        // Most pairs in a visited directory are equal: skip them before building a path.
        if a.kind == b.kind && !attrs_differ && !content_differs && !xattrs_differ {
            return Ok(());
        }
        let p = path_of(prefix, &a.name);
        if a.kind != b.kind {
            self.out
                .push(change(p, ChangeKind::TypeChanged, Some(a), Some(b)));
            // What was below the old entry (deleted), then what is below the new one
            // (added): the frame run first is pushed last; the first pushed pops the name.
            prefix.push(a.name.clone());
            let mut pops = true;
            for (e, kind) in [(b, ChangeKind::Added), (a, ChangeKind::Deleted)] {
                let entries = if e.kind == Kind::Dir {
                    get_tree(self.db, e.hash.as_ref().unwrap())?.entries
                } else {
                    vec![]
                };
                self.frames.push(Frame::Whole {
                    entries,
                    i: 0,
                    kind,
                    pops,
                });
                pops = false;
            }
            return Ok(());
        }
        if a.kind == Kind::Dir {
            if attrs_differ {
                self.out
                    .push(change(p, ChangeKind::ModeChanged, Some(a), Some(b)));
            } else if xattrs_differ {
                self.out
                    .push(change(p, ChangeKind::MetaChanged, Some(a), Some(b)));
            }
            if a.hash != b.hash {
                let ta = get_tree(self.db, a.hash.as_ref().unwrap())?;
                let tb = get_tree(self.db, b.hash.as_ref().unwrap())?;
                prefix.push(a.name.clone());
                self.frames.push(Frame::Pair {
                    a: ta.entries,
                    b: tb.entries,
                    i: 0,
                    j: 0,
                    pops: true,
                });
            }
            return Ok(());
        }
        if content_differs {
            self.out
                .push(change(p, ChangeKind::Modified, Some(a), Some(b)));
        } else if attrs_differ {
            self.out
                .push(change(p, ChangeKind::ModeChanged, Some(a), Some(b)));
        } else if xattrs_differ {
            self.out
                .push(change(p, ChangeKind::MetaChanged, Some(a), Some(b)));
        }
        Ok(())
    }
}

/// Largest file (either side) that gets a line diff: a patch is sized by the change, but
/// reading and diffing a file costs its size, and beyond this it costs too much for a
/// report. Binary files are told apart by their first `SNIFF_BYTES`, before any full read.
pub const PATCH_LIMIT: u64 = 64 * 1024 * 1024;
/// Largest added or deleted file that `avfs diff --patch` shows whole.
pub const WHOLE_PATCH_LIMIT: u64 = 1024 * 1024;
/// A NUL in this many first bytes makes a file binary (git looks at 8000).
const SNIFF_BYTES: usize = 8000;

fn text_of(db: &Connection, e: Option<&Entry>) -> Result<Option<String>> {
    let Some(e) = e else {
        return Ok(Some(String::new()));
    };
    if e.kind != Kind::File || e.size > PATCH_LIMIT {
        return Ok(None);
    }
    let hash = e.hash.as_ref().unwrap();
    // A file of one chunk is read whole below anyway (and checked whole for a NUL):
    // sniffing it first would read and decode its one chunk twice.
    if e.size > crate::store::objects::CHUNK_SIZE as u64 {
        let ext = crate::store::content::extents(db, hash, e.size)?;
        if crate::store::content::read_at(db, &ext, 0, SNIFF_BYTES)?.contains(&0) {
            return Ok(None);
        }
    }
    let data = crate::store::content::read_all(db, hash, e.size)?;
    if data.contains(&0) {
        return Ok(None);
    }
    Ok(String::from_utf8(data).ok())
}

/// Adds a unified diff to every change of a text file: an edit (modified, or a renamed
/// file that changed) of files up to `PATCH_LIMIT`, since its patch is as long as the
/// change; an added or deleted file (whose patch is its whole text) up to `whole_limit`.
/// Contents are read here (the connection is this thread's); the line diffs run on a
/// second thread as they arrive, so reading and diffing overlap.
pub fn add_patches(db: &Connection, changes: &mut [Change], whole_limit: u64) -> Result<()> {
    let (tx, rx) = std::sync::mpsc::channel::<(usize, String, String, String, String)>();
    std::thread::scope(|scope| {
        let differ = scope.spawn(move || {
            rx.into_iter()
                .map(|(i, old, new, from, to)| (i, linediff::unified(&old, &new, &from, &to)))
                .collect::<Vec<_>>()
        });
        let read: Result<()> = (|| {
            for (i, c) in changes.iter().enumerate() {
                // An exact rename has no patch: its content did not change.
                let edited_rename = c.kind == ChangeKind::Renamed
                    && c.before.as_ref().map(|e| e.hash) != c.after.as_ref().map(|e| e.hash);
                let limit = match c.kind {
                    ChangeKind::Modified => PATCH_LIMIT,
                    ChangeKind::Renamed if edited_rename => PATCH_LIMIT,
                    ChangeKind::Added | ChangeKind::Deleted => whole_limit.min(PATCH_LIMIT),
                    _ => continue,
                };
                let sized = |e: &Option<Entry>| {
                    e.as_ref()
                        .is_none_or(|e| e.kind == Kind::File && e.size <= limit)
                };
                if !sized(&c.before) || !sized(&c.after) {
                    continue;
                }
                let (Some(old), Some(new)) = (
                    text_of(db, c.before.as_ref())?,
                    text_of(db, c.after.as_ref())?,
                ) else {
                    continue;
                };
                let from = if let Some(old) = &c.from {
                    format!("a{old}")
                } else if c.before.is_some() {
                    format!("a{}", c.path)
                } else {
                    "/dev/null".into()
                };
                let to = if c.after.is_some() {
                    format!("b{}", c.path)
                } else {
                    "/dev/null".into()
                };
                // The receiver lives until every sender is gone: sending cannot fail.
                let _ = tx.send((i, old, new, from, to));
            }
            Ok(())
        })();
        drop(tx);
        let patches = differ
            .join()
            .map_err(|_| crate::error::Error::Internal("the diff thread panicked".into()))?;
        read?;
        for (i, p) in patches {
            changes[i].patch = Some(p);
        }
        Ok(())
    })
}
