//! Three-way merge of a fork back into a workspace (`avfs vault merge`).
//!
//! The base is the checkpoint the fork was made from. The walk goes through the base,
//! fork and target trees together and, like the tree diff, never enters a subtree the
//! fork left as it was (equal hashes), so its cost is O(fork's changes × depth):
//!
//! * a path the fork changed and the target did not: the fork's entry is taken, a whole
//!   subtree as one O(1) graft;
//! * a path both changed in the same way: nothing to do;
//! * a path both changed differently: directories on both sides are merged entry by entry;
//!   files and other entries are merged by part (content, mode and owner, each extended
//!   attribute), and the path is a conflict only when the two sides changed the same part
//!   differently, or one deleted what the other changed, or they disagree on its type.
//!
//! A text file both sides edited gets a three-way line merge (`textmerge`), as
//! `git merge-file` does: edits that do not overlap merge cleanly (`merged`). What is left
//! (overlapping edits, delete against edit, type or mode disagreements) is a conflict; the
//! plan keeps the target's version there, and the caller refuses to apply a plan with
//! conflicts unless asked for `markers`: then an overlapping text edit is written with
//! conflict markers and a binary file keeps both versions (the fork's beside the target's,
//! as `NAME.FORK`).
//!
//! Renames are followed (as `git diff -M` finds them, `diff::renames`): a file one side
//! renamed and the other edited ends up at the new name with both sides' edits.

use rusqlite::Connection;
use serde::Serialize;

use crate::diff::{Change, ChangeKind, DiffOptions, change, diff_entry};
use crate::error::{Error, Result};
use crate::store::objects::{self, Entry, Hash, Kind, Xattrs, get_tree};
use crate::workspace::flush::entry_at;
use crate::workspace::path::display;
use crate::workspace::{Inode, NewNode, ROOT_INO, SetAttr, Workspace};

mod apply;
mod conflict;

pub use apply::apply;

/// Largest text file (on any side) that gets a line merge: the same cap as a patch.
pub const TEXT_LIMIT: u64 = crate::diff::PATCH_LIMIT;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ConflictKind {
    /// Both sides changed the same part (content, mode, an attribute) differently.
    BothModified,
    /// Absent in the base, added on both sides differently.
    BothAdded,
    /// The fork deleted what the target changed.
    DeletedInFork,
    /// The target deleted what the fork changed.
    DeletedInTarget,
    /// The sides disagree on the type (file, directory, symlink, ...).
    TypeChanged,
}

#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Resolution {
    /// The target's version stays as it was.
    KeptTarget,
    /// The file now holds a line merge with conflict markers.
    Markers,
    /// A binary (or too large) file both sides changed: the target's version stays at the
    /// path and the fork's is written beside it, at `kept_as`.
    BothKept,
}

#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Conflict {
    pub path: String,
    pub kind: ConflictKind,
    /// What the fork did to the path since the base (a change kind, or `unchanged`).
    pub fork: &'static str,
    /// What the target did to it.
    pub target: &'static str,
    pub type_base: Option<&'static str>,
    pub type_fork: Option<&'static str>,
    pub type_target: Option<&'static str>,
    pub resolution: Resolution,
    /// With `both_kept`: where the fork's version was written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept_as: Option<String>,
    #[serde(skip)]
    pub comps: Vec<Vec<u8>>,
}

/// Mode and owner.
type Owner = (u32, u32, u32);

/// One change to make in the target's live layer.
#[derive(Clone, Debug)]
pub enum Action {
    /// Replace whatever the target has at `comps` by `entry` (a whole subtree); `None`
    /// removes it.
    Take {
        comps: Vec<Vec<u8>>,
        entry: Option<Entry>,
    },
    /// Change parts of the existing entry at `comps` in place.
    Update {
        comps: Vec<Vec<u8>>,
        content: Option<(Hash, u64)>,
        owner: Option<Owner>,
        /// Attributes to set (`Some`) or remove (`None`).
        xattrs: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    },
    /// Replace a file's content with a line merge.
    Write { comps: Vec<Vec<u8>>, data: Vec<u8> },
}

/// A file one side renamed while the other edited it at its old path.
#[derive(Clone, Debug)]
struct RenamedFile {
    from: Vec<Vec<u8>>,
    to: Vec<Vec<u8>>,
    /// The file in the base, at `from`.
    base: Entry,
}

pub struct Options<'a> {
    /// Only these paths (and what is below them); empty means everything.
    pub paths: &'a [Vec<Vec<u8>>],
    /// Write conflicts out: markers where text edits overlap, both versions of a binary
    /// file. Without it a conflict keeps the target's version in the plan.
    pub markers: bool,
    pub target_label: &'a str,
    pub fork_label: &'a str,
}

#[derive(Default)]
pub struct Plan {
    pub actions: Vec<Action>,
    /// The fork's changes (base → fork) that the merge takes, sorted by path.
    pub taken: Vec<Change>,
    /// Paths both sides edited whose edits did not overlap: their line merge holds both.
    pub line_merged: Vec<String>,
    pub conflicts: Vec<Conflict>,
}

impl Plan {
    /// Conflicts that still need a person (every conflict: clean line merges are none).
    pub fn unresolved(&self) -> usize {
        self.conflicts.len()
    }
}

fn owner(e: &Entry) -> Owner {
    (e.mode, e.uid, e.gid)
}

fn content_key(e: &Entry) -> (Option<Hash>, u64, Option<&Vec<u8>>, u64) {
    (e.hash, e.size, e.target.as_ref(), e.rdev)
}

/// Equal for the merge: everything but times, link groups and the name.
fn same(a: &Entry, b: &Entry) -> bool {
    a.kind == b.kind
        && content_key(a) == content_key(b)
        && owner(a) == owner(b)
        && a.xattrs == b.xattrs
}

fn same_opt(a: Option<&Entry>, b: Option<&Entry>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => same(a, b),
        _ => false,
    }
}

fn is_dir(e: Option<&Entry>) -> bool {
    e.is_some_and(|e| e.kind == Kind::Dir)
}

fn is_file(e: Option<&Entry>) -> bool {
    e.is_some_and(|e| e.kind == Kind::File)
}

/// What one side did to a path since the base. For a directory, `modified` means that
/// something below it changed; its own mode and attributes come first.
fn side_change(b: Option<&Entry>, x: Option<&Entry>) -> &'static str {
    match (b, x) {
        (None, None) => "unchanged",
        (None, Some(_)) => "added",
        (Some(_), None) => "deleted",
        (Some(b), Some(x)) if b.kind != x.kind => "type_changed",
        (Some(b), Some(x)) if b.kind == Kind::Dir && owner(b) != owner(x) => "mode_changed",
        (Some(b), Some(x)) if b.kind == Kind::Dir && b.xattrs != x.xattrs => "meta_changed",
        (Some(b), Some(x)) if content_key(b) != content_key(x) => "modified",
        (Some(b), Some(x)) if owner(b) != owner(x) => "mode_changed",
        (Some(b), Some(x)) if b.xattrs != x.xattrs => "meta_changed",
        _ => "unchanged",
    }
}

/// Three-way choice for one part: `Ok(true)` take the fork's value, `Ok(false)` keep the
/// target's, `Err(())` both changed it differently.
fn pick<T: PartialEq>(b: Option<&T>, f: &T, t: &T) -> std::result::Result<bool, ()> {
    if f == t || b == Some(f) {
        Ok(false)
    } else if b == Some(t) {
        Ok(true)
    } else {
        Err(())
    }
}

fn xattr<'a>(x: &'a Xattrs, name: &[u8]) -> Option<&'a Vec<u8>> {
    x.iter().find(|(n, _)| n == name).map(|(_, v)| v)
}

/// Per-attribute three-way merge: the operations that bring the fork's attribute changes
/// into the target, or `Err` when both changed one attribute differently.
#[allow(clippy::type_complexity)]
fn merge_xattrs(
    b: Option<&Xattrs>,
    f: &Xattrs,
    t: &Xattrs,
) -> std::result::Result<Vec<(Vec<u8>, Option<Vec<u8>>)>, ()> {
    let empty = Xattrs::new();
    let b = b.unwrap_or(&empty);
    let mut names: Vec<&Vec<u8>> = b.iter().chain(f).chain(t).map(|(n, _)| n).collect();
    names.sort();
    names.dedup();
    let mut ops = Vec::new();
    for n in names {
        let (bv, fv, tv) = (xattr(b, n), xattr(f, n), xattr(t, n));
        if fv == tv || bv == fv {
            continue;
        }
        if bv == tv {
            ops.push((n.clone(), fv.cloned()));
        } else {
            return Err(());
        }
    }
    Ok(ops)
}

#[derive(PartialEq)]
enum Sel {
    Skip,
    Ancestor,
    All,
}

/// The entries of one directory on the three sides: base, fork, target.
type Children = (Vec<Entry>, Vec<Entry>, Vec<Entry>);

/// A directory level of the merge walk: the three sides' entries (sorted by name) and how
/// far through the base's and the fork's the walk is.
struct Level {
    b: Vec<Entry>,
    f: Vec<Entry>,
    t: Vec<Entry>,
    i: usize,
    j: usize,
}

impl Level {
    fn new((b, f, t): Children) -> Level {
        Level {
            b,
            f,
            t,
            i: 0,
            j: 0,
        }
    }

    /// The next name in the base or the fork that the fork changed (the walk never enters
    /// what the fork left as it was), with its entries on the three sides.
    #[allow(clippy::type_complexity)]
    fn next_changed(&mut self) -> Option<(Option<Entry>, Option<Entry>, Option<Entry>)> {
        let (b, f) = (&self.b, &self.f);
        while self.i < b.len() || self.j < f.len() {
            let order = match (b.get(self.i), f.get(self.j)) {
                (Some(x), Some(y)) => x.name.cmp(&y.name),
                (Some(_), None) => std::cmp::Ordering::Less,
                _ => std::cmp::Ordering::Greater,
            };
            let (be, fe) = match order {
                std::cmp::Ordering::Less => {
                    self.i += 1;
                    (Some(&b[self.i - 1]), None)
                }
                std::cmp::Ordering::Greater => {
                    self.j += 1;
                    (None, Some(&f[self.j - 1]))
                }
                std::cmp::Ordering::Equal => {
                    self.i += 1;
                    self.j += 1;
                    (Some(&b[self.i - 1]), Some(&f[self.j - 1]))
                }
            };
            if same_opt(be, fe) {
                continue;
            }
            let name = be.or(fe).map(|e| e.name.as_slice()).unwrap_or_default();
            let te = self
                .t
                .binary_search_by(|e| e.name.as_slice().cmp(name))
                .ok()
                .map(|k| self.t[k].clone());
            return Some((be.cloned(), fe.cloned(), te));
        }
        None
    }
}

struct Walker<'a> {
    db: &'a Connection,
    opts: &'a Options<'a>,
    target_root: Hash,
    /// Files the fork renamed that the target edited at the old path.
    fork_renames: Vec<RenamedFile>,
    /// Files the target renamed.
    target_renames: Vec<RenamedFile>,
    plan: Plan,
}

/// The files `side` renamed since `base` (as `avfs diff` finds renames).
fn renamed_files(db: &Connection, base: &Hash, side: &Hash) -> Result<Vec<RenamedFile>> {
    let changes = crate::diff::renames::detect(
        db,
        crate::diff::diff_roots(db, base, side)?,
        crate::diff::renames::DEFAULT_THRESHOLD,
    )?;
    let mut out = Vec::new();
    for c in changes {
        let (ChangeKind::Renamed, Some(from), Some(before)) = (c.kind, &c.from, &c.before) else {
            continue;
        };
        // `from` is for display; a name that is not UTF-8 does not parse back to the
        // same entry, and such a rename is merged as a delete and an add.
        let Ok(from) = crate::workspace::path::parse(std::ffi::OsStr::new(from)) else {
            continue;
        };
        if entry_at(db, base, &from)?.is_some_and(|e| e.hash == before.hash) {
            out.push(RenamedFile {
                from,
                to: c.comps.clone(),
                base: before.clone(),
            });
        }
    }
    Ok(out)
}

/// Works out what merging `fork` into `target` (both descended from `base`) changes.
pub fn plan(
    db: &Connection,
    base: &Hash,
    fork: &Hash,
    target: &Hash,
    opts: &Options,
) -> Result<Plan> {
    if base == fork {
        return Ok(Plan::default());
    }
    let mut w = Walker {
        db,
        opts,
        target_root: *target,
        fork_renames: vec![],
        target_renames: vec![],
        plan: Plan::default(),
    };
    // Renames matter only where the other side edited the old path: found by a diff of
    // each side (O(changes)), then looked up as the walk meets those paths.
    if base != target {
        let edited_in = |root: &Hash, r: &RenamedFile| -> Result<bool> {
            Ok(entry_at(db, root, &r.from)?
                .is_some_and(|e| e.kind == Kind::File && e.hash != r.base.hash))
        };
        for r in renamed_files(db, base, fork)? {
            if edited_in(target, &r)? && entry_at(db, target, &r.to)?.is_none() {
                w.fork_renames.push(r);
            }
        }
        for r in renamed_files(db, base, target)? {
            if edited_in(fork, &r)? && entry_at(db, fork, &r.to)?.is_none() {
                w.target_renames.push(r);
            }
        }
    }
    let (tb, tf, tt) = (
        get_tree(db, base)?,
        get_tree(db, fork)?,
        get_tree(db, target)?,
    );
    if w.select(&[]) == Sel::All
        && let (Some(rb), Some(rf), Some(rt)) = (&tb.root_attrs, &tf.root_attrs, &tt.root_attrs)
    {
        let as_entry = |a: &crate::store::objects::DirAttrs| a.root_entry(None, false);
        let (eb, ef, et) = (as_entry(rb), as_entry(rf), as_entry(rt));
        if !w.dir_meta(&[], Some(&eb), &ef, &et) {
            w.conflict(&[], Some(&eb), Some(&ef), Some(&et))?;
        }
    }
    w.dir(&mut Vec::new(), tb.entries, tf.entries, tt.entries)?;
    w.renamed_in_fork(fork)?;
    Ok(w.plan)
}

impl Walker<'_> {
    fn select(&self, comps: &[Vec<u8>]) -> Sel {
        if self.opts.paths.is_empty() {
            return Sel::All;
        }
        let mut ancestor = false;
        for p in self.opts.paths {
            if comps.starts_with(p) {
                return Sel::All;
            }
            ancestor |= p.starts_with(comps);
        }
        if ancestor { Sel::Ancestor } else { Sel::Skip }
    }

    fn children(&self, e: Option<&Entry>) -> Result<Vec<Entry>> {
        match e {
            Some(e) if e.kind == Kind::Dir => {
                Ok(get_tree(self.db, e.hash.as_ref().unwrap())?.entries)
            }
            _ => Ok(vec![]),
        }
    }

    /// Merges a directory and everything below it that the fork changed: every name in
    /// the base or the fork, level by level, depth first in name order. The levels being
    /// walked are an explicit stack (one entry per level down, on the heap), so neither
    /// the call stack nor anything but that list grows with the tree's depth.
    fn dir(
        &mut self,
        prefix: &mut Vec<Vec<u8>>,
        b: Vec<Entry>,
        f: Vec<Entry>,
        t: Vec<Entry>,
    ) -> Result<()> {
        let mut stack = vec![Level::new((b, f, t))];
        while let Some(top) = stack.last_mut() {
            let Some((be, fe, te)) = top.next_changed() else {
                stack.pop();
                // The level below the walk's own was entered by a name of its parent.
                if !stack.is_empty() {
                    prefix.pop();
                }
                continue;
            };
            let (be, fe, te) = (be.as_ref(), fe.as_ref(), te.as_ref());
            prefix.push(be.or(fe).map(|e| e.name.clone()).unwrap_or_default());
            let below = match self.select(prefix) {
                Sel::Skip => None,
                Sel::Ancestor => {
                    if is_dir(fe) && te.is_some_and(|t| t.kind != Kind::Dir) {
                        self.conflict(prefix, be, fe, te)?;
                        None
                    } else {
                        Some(self.children3(be, fe, te)?)
                    }
                }
                Sel::All => self.node(prefix, be, fe, te)?,
            };
            match below {
                // The name stays on `prefix` while its level is walked.
                Some(below) => stack.push(Level::new(below)),
                None => {
                    prefix.pop();
                }
            }
        }
        Ok(())
    }

    /// The entries of the three sides' directories (none for a side that is no directory).
    fn children3(
        &self,
        b: Option<&Entry>,
        f: Option<&Entry>,
        t: Option<&Entry>,
    ) -> Result<Children> {
        Ok((self.children(b)?, self.children(f)?, self.children(t)?))
    }

    fn take(&mut self, comps: &[Vec<u8>], b: Option<&Entry>, f: Option<&Entry>) -> Result<()> {
        let parent = &comps[..comps.len() - 1];
        let changes = diff_entry(self.db, parent, b, f, DiffOptions::default())?;
        // Only times differ: nothing worth changing in the target.
        if changes.is_empty() {
            return Ok(());
        }
        self.plan.actions.push(Action::Take {
            comps: comps.to_vec(),
            entry: f.cloned(),
        });
        self.plan.taken.extend(changes);
        Ok(())
    }

    /// A name the fork changed: what the merge makes of it, and `Some` with the three
    /// sides' entries below it when the walk goes on into it (a directory).
    fn node(
        &mut self,
        comps: &[Vec<u8>],
        b: Option<&Entry>,
        f: Option<&Entry>,
        t: Option<&Entry>,
    ) -> Result<Option<Children>> {
        if same_opt(t, f) {
            return Ok(None);
        }
        if same_opt(t, b) {
            self.take(comps, b, f)?;
            return Ok(None);
        }
        if self.follows_rename(comps, b, f, t)? {
            return Ok(None);
        }
        let (Some(fe), Some(te)) = (f, t) else {
            // A directory one side deleted while the other changed something below it:
            // when that side renamed files out of it, its entries are merged one by one,
            // so the renamed files carry the other side's edits.
            if is_dir(b) && is_dir(f.or(t)) {
                let under = |rs: &[RenamedFile]| rs.iter().any(|r| r.from.starts_with(comps));
                if (f.is_none() && under(&self.fork_renames))
                    || (t.is_none() && under(&self.target_renames))
                {
                    return self.children3(b, f, t).map(Some);
                }
            }
            self.conflict(comps, b, f, t)?;
            return Ok(None);
        };
        if fe.kind != te.kind {
            self.conflict(comps, b, f, t)?;
            return Ok(None);
        }
        // A base of another type counts as no base: both sides made the same new thing.
        let be = b.filter(|b| b.kind == fe.kind);
        if fe.kind == Kind::Dir {
            if !self.dir_meta(comps, be, fe, te) {
                self.conflict(comps, b, f, t)?;
            }
            return self.children3(be, f, t).map(Some);
        }
        self.both_changed(comps, b, be, fe, te)?;
        Ok(None)
    }

    /// A non-directory both sides changed, to the same kind (`be`: the base when it is of
    /// that kind too).
    fn both_changed(
        &mut self,
        comps: &[Vec<u8>],
        b: Option<&Entry>,
        be: Option<&Entry>,
        fe: &Entry,
        te: &Entry,
    ) -> Result<()> {
        let (f, t) = (Some(fe), Some(te));
        if b.is_some() && be.is_none() {
            return self.conflict(comps, b, f, t);
        }
        // Same kind on both sides, changed differently: merge by part.
        let content = pick(
            be.map(content_key).as_ref(),
            &content_key(fe),
            &content_key(te),
        );
        let own = pick(be.map(owner).as_ref(), &owner(fe), &owner(te));
        let xattrs = merge_xattrs(be.map(|e| &e.xattrs), &fe.xattrs, &te.xattrs);
        if content.is_err()
            && fe.kind == Kind::File
            && let (Ok(own), Ok(xattrs)) = (&own, &xattrs)
        {
            // Both edited the file: a line merge, as `git merge-file` makes it.
            let m = self.line_merge(be, fe, te)?;
            if m.as_ref().is_none_or(|m| m.conflicts != 0) {
                return self.conflict_with(comps, b, f, t, m);
            }
            let taken = change(comps.to_vec(), ChangeKind::Modified, b, f);
            self.clean_merge(comps, m.unwrap(), Some(taken));
            if *own || !xattrs.is_empty() {
                self.plan.actions.push(Action::Update {
                    comps: comps.to_vec(),
                    content: None,
                    owner: own.then(|| owner(fe)),
                    xattrs: xattrs.clone(),
                });
            }
            return Ok(());
        }
        let (Ok(content), Ok(own), Ok(xattrs)) = (content, own, xattrs) else {
            return self.conflict(comps, b, f, t);
        };
        if !content && !own && xattrs.is_empty() {
            return Ok(());
        }
        let kind = if content {
            ChangeKind::Modified
        } else if own {
            ChangeKind::ModeChanged
        } else {
            ChangeKind::MetaChanged
        };
        self.plan.taken.push(change(comps.to_vec(), kind, b, f));
        if content && fe.kind != Kind::File {
            // A symlink's target or a device number: replace the entry, keeping the
            // target's own mode and attribute changes.
            let mut merged = fe.clone();
            if !own {
                (merged.mode, merged.uid, merged.gid) = owner(te);
            }
            let mut x = te.xattrs.clone();
            apply_xattr_ops(&mut x, &xattrs);
            merged.xattrs = x;
            self.plan.actions.push(Action::Take {
                comps: comps.to_vec(),
                entry: Some(merged),
            });
            return Ok(());
        }
        self.plan.actions.push(Action::Update {
            comps: comps.to_vec(),
            content: content.then(|| (fe.hash.unwrap_or(objects::HOLE), fe.size)),
            owner: own.then(|| owner(fe)),
            xattrs,
        });
        Ok(())
    }

    /// Merges a directory's own mode, owner and attributes. False on a conflict.
    fn dir_meta(&mut self, comps: &[Vec<u8>], b: Option<&Entry>, f: &Entry, t: &Entry) -> bool {
        let own = pick(b.map(owner).as_ref(), &owner(f), &owner(t));
        let xattrs = merge_xattrs(b.map(|e| &e.xattrs), &f.xattrs, &t.xattrs);
        let (Ok(own), Ok(xattrs)) = (own, xattrs) else {
            return false;
        };
        if own || !xattrs.is_empty() {
            let kind = if own {
                ChangeKind::ModeChanged
            } else {
                ChangeKind::MetaChanged
            };
            self.plan
                .taken
                .push(change(comps.to_vec(), kind, b, Some(f)));
            self.plan.actions.push(Action::Update {
                comps: comps.to_vec(),
                content: None,
                owner: own.then(|| owner(f)),
                xattrs,
            });
        }
        true
    }

    /// A path one side renamed away while the other edited it: the edit follows the file
    /// to its new name. True when handled.
    fn follows_rename(
        &mut self,
        comps: &[Vec<u8>],
        b: Option<&Entry>,
        f: Option<&Entry>,
        t: Option<&Entry>,
    ) -> Result<bool> {
        let (Some(be), true) = (b, is_file(b)) else {
            return Ok(false);
        };
        if f.is_none() && is_file(t) {
            // The fork renamed it: handled once the walk is over (`renamed_in_fork`), when
            // it is known that the new name was taken.
            return Ok(self.fork_renames.iter().any(|r| r.from == comps));
        }
        if t.is_none()
            && let Some(fe) = f.filter(|_| is_file(f))
            && let Some(r) = self.target_renames.iter().find(|r| r.from == comps)
        {
            // The target renamed it: the fork's edit is merged into the new name.
            let to = r.to.clone();
            let Some(te) = entry_at(self.db, &self.target_root, &to)? else {
                return Ok(false);
            };
            let m = self.line_merge(Some(be), fe, &te)?;
            match m {
                Some(m) if m.conflicts == 0 => {
                    let taken = change(to.clone(), ChangeKind::Modified, Some(be), Some(fe));
                    self.clean_merge(&to, m, Some(taken))
                }
                m => self.conflict_with(&to, Some(be), Some(fe), Some(&te), m)?,
            }
            return Ok(true);
        }
        Ok(false)
    }

    /// The files the fork renamed and the target edited at the old name: when the walk
    /// took the new name, the old one goes and the new one gets the target's edits too;
    /// otherwise the old name is a conflict (deleted in the fork, edited in the target).
    fn renamed_in_fork(&mut self, fork_root: &Hash) -> Result<()> {
        for r in std::mem::take(&mut self.fork_renames) {
            if self.select(&r.from) != Sel::All {
                continue;
            }
            let grafted = self.plan.actions.iter().any(
                |a| matches!(a, Action::Take { comps, entry: Some(_) } if r.to.starts_with(comps)),
            );
            let Some(te) = entry_at(self.db, &self.target_root, &r.from)? else {
                continue;
            };
            let fe = entry_at(self.db, fork_root, &r.to)?.filter(|e| e.kind == Kind::File);
            let m = match &fe {
                Some(fe) if grafted => self.line_merge(Some(&r.base), fe, &te)?,
                _ => None,
            };
            let (Some(fe), true) = (
                fe,
                m.is_some() && (self.opts.markers || m.as_ref().is_some_and(|m| m.conflicts == 0)),
            ) else {
                self.conflict(&r.from, Some(&r.base), None, Some(&te))?;
                continue;
            };
            self.plan.actions.push(Action::Take {
                comps: r.from.clone(),
                entry: None,
            });
            self.plan.taken.push(change(
                r.from.clone(),
                ChangeKind::Deleted,
                Some(&r.base),
                None,
            ));
            match m {
                Some(m) if m.conflicts == 0 => self.clean_merge(&r.to, m, None),
                m => self.conflict_with(&r.to, Some(&r.base), Some(&fe), Some(&te), m)?,
            }
        }
        // The walk went in path order; what was added after it goes in its place.
        self.plan.conflicts.sort_by(|a, b| a.comps.cmp(&b.comps));
        self.plan.taken.sort_by(|a, b| a.comps.cmp(&b.comps));
        self.plan.line_merged.sort();
        Ok(())
    }
}

fn apply_xattr_ops(x: &mut Xattrs, ops: &[(Vec<u8>, Option<Vec<u8>>)]) {
    for (n, v) in ops {
        x.retain(|(m, _)| m != n);
        if let Some(v) = v {
            x.push((n.clone(), v.clone()));
        }
    }
    x.sort();
}
