//! Tree diff: walks two roots together and skips equal subtrees (equal hashes), so the
//! cost is O(changes × depth), not O(tree size).

use rusqlite::Connection;
use serde::Serialize;

use crate::error::Result;
use crate::store::objects::{self, Entry, Hash, Kind, get_tree};
use crate::workspace::path::display;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
    TypeChanged,
    ModeChanged,
}

impl ChangeKind {
    pub fn sigil(self) -> &'static str {
        match self {
            ChangeKind::Added => "A",
            ChangeKind::Modified => "M",
            ChangeKind::Deleted => "D",
            ChangeKind::TypeChanged => "T",
            ChangeKind::ModeChanged => "P",
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Change {
    pub path: String,
    pub kind: ChangeKind,
    /// File type before/after: file, dir, symlink, ...
    pub type_before: Option<&'static str>,
    pub type_after: Option<&'static str>,
    pub size_before: Option<u64>,
    pub size_after: Option<u64>,
    pub mode_before: Option<String>,
    pub mode_after: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    #[serde(skip)]
    pub before: Option<Entry>,
    #[serde(skip)]
    pub after: Option<Entry>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ChangeSummary {
    pub added: usize,
    pub modified: usize,
    pub deleted: usize,
    pub type_changed: usize,
    pub mode_changed: usize,
}

impl ChangeSummary {
    pub fn of(changes: &[Change]) -> ChangeSummary {
        let mut s = ChangeSummary::default();
        for c in changes {
            match c.kind {
                ChangeKind::Added => s.added += 1,
                ChangeKind::Modified => s.modified += 1,
                ChangeKind::Deleted => s.deleted += 1,
                ChangeKind::TypeChanged => s.type_changed += 1,
                ChangeKind::ModeChanged => s.mode_changed += 1,
            }
        }
        s
    }
}

fn size_of(e: &Entry) -> Option<u64> {
    (e.kind != Kind::Dir).then_some(e.size)
}

fn change(path: String, kind: ChangeKind, a: Option<&Entry>, b: Option<&Entry>) -> Change {
    Change {
        path,
        kind,
        type_before: a.map(|e| e.kind.name()),
        type_after: b.map(|e| e.kind.name()),
        size_before: a.and_then(size_of),
        size_after: b.and_then(size_of),
        mode_before: a.map(|e| format!("{:04o}", e.mode & 0o7777)),
        mode_after: b.map(|e| format!("{:04o}", e.mode & 0o7777)),
        patch: None,
        before: a.cloned(),
        after: b.cloned(),
    }
}

/// Every change from root `a` to root `b`, sorted by path.
pub fn diff_roots(db: &Connection, a: &Hash, b: &Hash) -> Result<Vec<Change>> {
    let mut out = Vec::new();
    if a != b {
        let ta = get_tree(db, a)?;
        let tb = get_tree(db, b)?;
        if let (Some(ra), Some(rb)) = (&ta.root_attrs, &tb.root_attrs)
            && (ra.mode != rb.mode || ra.uid != rb.uid || ra.gid != rb.gid)
        {
            let mut c = change("/".into(), ChangeKind::ModeChanged, None, None);
            c.type_before = Some("dir");
            c.type_after = Some("dir");
            c.mode_before = Some(format!("{:04o}", ra.mode));
            c.mode_after = Some(format!("{:04o}", rb.mode));
            out.push(c);
        }
        diff_entries(db, &mut Vec::new(), &ta.entries, &tb.entries, &mut out)?;
    }
    Ok(out)
}

fn diff_entries(
    db: &Connection,
    prefix: &mut Vec<Vec<u8>>,
    a: &[Entry],
    b: &[Entry],
    out: &mut Vec<Change>,
) -> Result<()> {
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let order = match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) => x.name.cmp(&y.name),
            (Some(_), None) => std::cmp::Ordering::Less,
            _ => std::cmp::Ordering::Greater,
        };
        match order {
            std::cmp::Ordering::Less => {
                whole(db, prefix, &a[i], ChangeKind::Deleted, out)?;
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                whole(db, prefix, &b[j], ChangeKind::Added, out)?;
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                pair(db, prefix, &a[i], &b[j], out)?;
                i += 1;
                j += 1;
            }
        }
    }
    Ok(())
}

fn path_of(prefix: &mut Vec<Vec<u8>>, name: &[u8]) -> String {
    prefix.push(name.to_vec());
    let p = display(prefix);
    prefix.pop();
    p
}

/// An entry added or deleted with everything below it.
fn whole(
    db: &Connection,
    prefix: &mut Vec<Vec<u8>>,
    e: &Entry,
    kind: ChangeKind,
    out: &mut Vec<Change>,
) -> Result<()> {
    let p = path_of(prefix, &e.name);
    out.push(match kind {
        ChangeKind::Deleted => change(p, kind, Some(e), None),
        _ => change(p, kind, None, Some(e)),
    });
    if e.kind == Kind::Dir {
        let tree = get_tree(db, e.hash.as_ref().unwrap())?;
        prefix.push(e.name.clone());
        for c in &tree.entries {
            whole(db, prefix, c, kind, out)?;
        }
        prefix.pop();
    }
    Ok(())
}

fn pair(
    db: &Connection,
    prefix: &mut Vec<Vec<u8>>,
    a: &Entry,
    b: &Entry,
    out: &mut Vec<Change>,
) -> Result<()> {
    let attrs_differ = a.mode != b.mode || a.uid != b.uid || a.gid != b.gid;
    let content_differs =
        a.hash != b.hash || a.size != b.size || a.target != b.target || a.rdev != b.rdev;
    // Most pairs in a visited directory are equal: skip them before building a path.
    if a.kind == b.kind && !attrs_differ && !content_differs {
        return Ok(());
    }
    let p = path_of(prefix, &a.name);
    if a.kind != b.kind {
        out.push(change(p, ChangeKind::TypeChanged, Some(a), Some(b)));
        prefix.push(a.name.clone());
        for (e, kind) in [(a, ChangeKind::Deleted), (b, ChangeKind::Added)] {
            if e.kind == Kind::Dir {
                for c in &get_tree(db, e.hash.as_ref().unwrap())?.entries {
                    whole(db, prefix, c, kind, out)?;
                }
            }
        }
        prefix.pop();
        return Ok(());
    }
    if a.kind == Kind::Dir {
        if attrs_differ {
            out.push(change(p, ChangeKind::ModeChanged, Some(a), Some(b)));
        }
        if a.hash != b.hash {
            let ta = get_tree(db, a.hash.as_ref().unwrap())?;
            let tb = get_tree(db, b.hash.as_ref().unwrap())?;
            prefix.push(a.name.clone());
            diff_entries(db, prefix, &ta.entries, &tb.entries, out)?;
            prefix.pop();
        }
        return Ok(());
    }
    if content_differs {
        out.push(change(p, ChangeKind::Modified, Some(a), Some(b)));
    } else if attrs_differ {
        out.push(change(p, ChangeKind::ModeChanged, Some(a), Some(b)));
    }
    Ok(())
}

/// Largest file (either side) that gets a unified text diff.
pub const PATCH_LIMIT: u64 = 1024 * 1024;

fn text_of(db: &Connection, e: Option<&Entry>) -> Result<Option<String>> {
    let Some(e) = e else {
        return Ok(Some(String::new()));
    };
    if e.kind != Kind::File || e.size > PATCH_LIMIT {
        return Ok(None);
    }
    let data = objects::read_all(db, e.hash.as_ref().unwrap(), e.size)?;
    if data.contains(&0) {
        return Ok(None);
    }
    Ok(String::from_utf8(data).ok())
}

/// Adds a unified diff to every change of a text file no larger than `limit` bytes.
/// Contents are read here (the connection is this thread's); the line diffs run on a
/// second thread as they arrive, so reading and diffing overlap.
pub fn add_patches(db: &Connection, changes: &mut [Change], limit: u64) -> Result<()> {
    let (tx, rx) = std::sync::mpsc::channel::<(usize, String, String, String, String)>();
    std::thread::scope(|scope| {
        let differ = scope.spawn(move || {
            rx.into_iter()
                .map(|(i, old, new, from, to)| (i, unified(&old, &new, &from, &to)))
                .collect::<Vec<_>>()
        });
        let read: Result<()> = (|| {
            for (i, c) in changes.iter().enumerate() {
                let sized = |e: &Option<Entry>| {
                    e.as_ref()
                        .is_none_or(|e| e.kind == Kind::File && e.size <= limit)
                };
                if !matches!(
                    c.kind,
                    ChangeKind::Added | ChangeKind::Modified | ChangeKind::Deleted
                ) || !sized(&c.before)
                    || !sized(&c.after)
                {
                    continue;
                }
                let (Some(old), Some(new)) = (
                    text_of(db, c.before.as_ref())?,
                    text_of(db, c.after.as_ref())?,
                ) else {
                    continue;
                };
                let from = if c.before.is_some() {
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

fn unified(old: &str, new: &str, from: &str, to: &str) -> String {
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(from, to)
        .to_string()
}
