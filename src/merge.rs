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
    w.dir(&mut Vec::new(), &tb.entries, &tf.entries, &tt.entries)?;
    w.renamed_in_fork(fork)?;
    Ok(w.plan)
}

/// Room left on the stack below which a level of the merge walk moves to a new segment,
/// and the size of that segment (about a thousand levels).
const STACK_RED_ZONE: usize = 128 * 1024;
const STACK_SEGMENT: usize = 4 * 1024 * 1024;

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

    /// Merges one directory level: every name in the base or the fork. The walk recurses
    /// once per level through here, so the stack grows on the heap as a tree deepens (a
    /// 5 000-deep chain overflowed the main thread's 8 MiB).
    fn dir(
        &mut self,
        prefix: &mut Vec<Vec<u8>>,
        b: &[Entry],
        f: &[Entry],
        t: &[Entry],
    ) -> Result<()> {
        stacker::maybe_grow(STACK_RED_ZONE, STACK_SEGMENT, || {
            self.dir_level(prefix, b, f, t)
        })
    }

    fn dir_level(
        &mut self,
        prefix: &mut Vec<Vec<u8>>,
        b: &[Entry],
        f: &[Entry],
        t: &[Entry],
    ) -> Result<()> {
        let (mut i, mut j) = (0, 0);
        while i < b.len() || j < f.len() {
            let order = match (b.get(i), f.get(j)) {
                (Some(x), Some(y)) => x.name.cmp(&y.name),
                (Some(_), None) => std::cmp::Ordering::Less,
                _ => std::cmp::Ordering::Greater,
            };
            let (be, fe) = match order {
                std::cmp::Ordering::Less => {
                    i += 1;
                    (Some(&b[i - 1]), None)
                }
                std::cmp::Ordering::Greater => {
                    j += 1;
                    (None, Some(&f[j - 1]))
                }
                std::cmp::Ordering::Equal => {
                    i += 1;
                    j += 1;
                    (Some(&b[i - 1]), Some(&f[j - 1]))
                }
            };
            // The fork left this name as it was: nothing below it to take.
            if same_opt(be, fe) {
                continue;
            }
            let name = be.or(fe).map(|e| e.name.clone()).unwrap_or_default();
            let te = t
                .binary_search_by(|e| e.name.as_slice().cmp(&name))
                .ok()
                .map(|k| &t[k]);
            prefix.push(name);
            match self.select(prefix) {
                Sel::Skip => {}
                Sel::Ancestor => {
                    if is_dir(fe) && te.is_some_and(|t| t.kind != Kind::Dir) {
                        self.conflict(prefix, be, fe, te)?;
                    } else {
                        let (bc, fc, tc) =
                            (self.children(be)?, self.children(fe)?, self.children(te)?);
                        self.dir(prefix, &bc, &fc, &tc)?;
                    }
                }
                Sel::All => self.node(prefix, be, fe, te)?,
            }
            prefix.pop();
        }
        Ok(())
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

    fn node(
        &mut self,
        comps: &mut Vec<Vec<u8>>,
        b: Option<&Entry>,
        f: Option<&Entry>,
        t: Option<&Entry>,
    ) -> Result<()> {
        if same_opt(t, f) {
            return Ok(());
        }
        if same_opt(t, b) {
            return self.take(comps, b, f);
        }
        if self.follows_rename(comps, b, f, t)? {
            return Ok(());
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
                    let (bc, fc, tc) = (self.children(b)?, self.children(f)?, self.children(t)?);
                    return self.dir(comps, &bc, &fc, &tc);
                }
            }
            return self.conflict(comps, b, f, t);
        };
        if fe.kind != te.kind {
            return self.conflict(comps, b, f, t);
        }
        // A base of another type counts as no base: both sides made the same new thing.
        let be = b.filter(|b| b.kind == fe.kind);
        if fe.kind == Kind::Dir {
            if !self.dir_meta(comps, be, fe, te) {
                self.conflict(comps, b, f, t)?;
            }
            let (bc, fc, tc) = (self.children(be)?, self.children(f)?, self.children(t)?);
            return self.dir(comps, &bc, &fc, &tc);
        }
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
            let taken = change(comps.clone(), ChangeKind::Modified, b, f);
            self.clean_merge(comps, m.unwrap(), Some(taken));
            if *own || !xattrs.is_empty() {
                self.plan.actions.push(Action::Update {
                    comps: comps.clone(),
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
        self.plan.taken.push(change(comps.clone(), kind, b, f));
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
                comps: comps.clone(),
                entry: Some(merged),
            });
            return Ok(());
        }
        self.plan.actions.push(Action::Update {
            comps: comps.clone(),
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

    /// The three-way line merge of a file both sides edited (`b` the base, `None` for
    /// none), or `None` when a side is not text (binary, not UTF-8, over `TEXT_LIMIT`).
    fn line_merge(
        &self,
        b: Option<&Entry>,
        f: &Entry,
        t: &Entry,
    ) -> Result<Option<crate::textmerge::TextMerge>> {
        let (Some(base), Some(theirs), Some(ours)) =
            (self.text(b)?, self.text(Some(f))?, self.text(Some(t))?)
        else {
            return Ok(None);
        };
        Ok(Some(crate::textmerge::merge3(
            &base,
            &ours,
            &theirs,
            self.opts.target_label,
            self.opts.fork_label,
        )))
    }

    /// A line merge without overlaps: the file gets it, and the fork's edit is taken.
    fn clean_merge(
        &mut self,
        comps: &[Vec<u8>],
        m: crate::textmerge::TextMerge,
        taken: Option<Change>,
    ) {
        self.plan.actions.push(Action::Write {
            comps: comps.to_vec(),
            data: m.text.into_bytes(),
        });
        self.plan.taken.extend(taken);
        self.plan.line_merged.push(display(comps));
    }

    /// Where the fork's version of a binary conflict goes: `NAME.FORK` beside it (with a
    /// number when the target has that name already).
    fn beside(&self, comps: &[Vec<u8>]) -> Result<Vec<Vec<u8>>> {
        let label: String = self
            .opts
            .fork_label
            .chars()
            .map(|c| if c == '/' { '_' } else { c })
            .collect();
        let mut out = comps.to_vec();
        let name = comps.last().cloned().unwrap_or_default();
        for n in 0.. {
            let mut v = name.clone();
            v.push(b'.');
            v.extend_from_slice(label.as_bytes());
            if n > 0 {
                v.extend_from_slice(format!(".{n}").as_bytes());
            }
            *out.last_mut().unwrap() = v;
            if entry_at(self.db, &self.target_root, &out)?.is_none() {
                break;
            }
        }
        Ok(out)
    }

    fn text(&self, e: Option<&Entry>) -> Result<Option<String>> {
        let Some(e) = e else {
            return Ok(Some(String::new()));
        };
        if e.kind != Kind::File || e.size > TEXT_LIMIT {
            return Ok(None);
        }
        let data = crate::store::content::read_all(self.db, e.hash.as_ref().unwrap(), e.size)?;
        if data.contains(&0) {
            return Ok(None);
        }
        Ok(String::from_utf8(data).ok())
    }

    fn conflict(
        &mut self,
        comps: &[Vec<u8>],
        b: Option<&Entry>,
        f: Option<&Entry>,
        t: Option<&Entry>,
    ) -> Result<()> {
        self.conflict_with(comps, b, f, t, None)
    }

    /// A conflict at `comps`; `merged` is the line merge already made of its content.
    fn conflict_with(
        &mut self,
        comps: &[Vec<u8>],
        b: Option<&Entry>,
        f: Option<&Entry>,
        t: Option<&Entry>,
        merged: Option<crate::textmerge::TextMerge>,
    ) -> Result<()> {
        let kind = match (b, f, t) {
            (None, _, _) => ConflictKind::BothAdded,
            (Some(_), None, _) => ConflictKind::DeletedInFork,
            (Some(_), _, None) => ConflictKind::DeletedInTarget,
            (Some(b), Some(f), Some(t)) if b.kind != f.kind || b.kind != t.kind => {
                ConflictKind::TypeChanged
            }
            _ => ConflictKind::BothModified,
        };
        let kind = match (kind, f, t) {
            (ConflictKind::BothAdded, Some(f), Some(t)) if f.kind != t.kind => {
                ConflictKind::TypeChanged
            }
            (k, _, _) => k,
        };
        let mut resolution = Resolution::KeptTarget;
        let mut kept_as = None;
        if self.opts.markers
            && let (Some(fe), Some(te)) = (f, t)
            && fe.kind == Kind::File
            && te.kind == Kind::File
            && (fe.hash, fe.size) != (te.hash, te.size)
        {
            let merged = match merged {
                Some(m) => Some(m),
                None => self.line_merge(b.filter(|b| b.kind == Kind::File), fe, te)?,
            };
            match merged {
                Some(m) => {
                    // Without overlaps, the conflict is in the mode or an attribute: the
                    // content still gets both sides' edits.
                    if m.conflicts > 0 {
                        resolution = Resolution::Markers;
                    }
                    self.plan.actions.push(Action::Write {
                        comps: comps.to_vec(),
                        data: m.text.into_bytes(),
                    });
                }
                None => {
                    // No lines to merge: the fork's version is written beside the target's.
                    let at = self.beside(comps)?;
                    let mut copy = fe.clone();
                    copy.name = at.last().cloned().unwrap_or_default();
                    self.plan.actions.push(Action::Take {
                        comps: at.clone(),
                        entry: Some(copy),
                    });
                    resolution = Resolution::BothKept;
                    kept_as = Some(display(&at));
                }
            }
        }
        self.plan.conflicts.push(Conflict {
            path: display(comps),
            kind,
            fork: side_change(b, f),
            target: side_change(b, t),
            type_base: b.map(|e| e.kind.name()),
            type_fork: f.map(|e| e.kind.name()),
            type_target: t.map(|e| e.kind.name()),
            resolution,
            kept_as,
            comps: comps.to_vec(),
        });
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

/// The live entry at `comps`, read literally (no symlink followed).
fn literal(ws: &Workspace, comps: &[Vec<u8>]) -> Result<Inode> {
    let mut cur = ws.get(ROOT_INO)?;
    for (i, c) in comps.iter().enumerate() {
        if cur.kind != Kind::Dir {
            return Err(Error::NotADirectory(display(&comps[..i])));
        }
        cur = ws
            .lookup(&cur, c)?
            .ok_or_else(|| Error::NotFound(display(&comps[..=i])))?;
    }
    Ok(cur)
}

/// The live directory at `comps`, creating missing ones like the fork has them.
fn ensure_dir(ws: &Workspace, comps: &[Vec<u8>], fork_root: &Hash) -> Result<Inode> {
    let mut cur = ws.get(ROOT_INO)?;
    for (i, c) in comps.iter().enumerate() {
        cur = match ws.lookup(&cur, c)? {
            Some(d) if d.kind == Kind::Dir => d,
            Some(_) => return Err(Error::NotADirectory(display(&comps[..=i]))),
            None => {
                let fe = entry_at(ws.db, fork_root, &comps[..=i])?.filter(|e| e.kind == Kind::Dir);
                let mut n = NewNode::new(Kind::Dir, fe.as_ref().map_or(0o755, |e| e.mode));
                if let Some(e) = &fe {
                    (n.uid, n.gid, n.mtime_ns) = (e.uid, e.gid, Some(e.mtime_ns));
                }
                let d = ws.create(&cur, c, n)?;
                for (xn, xv) in fe.iter().flat_map(|e| e.xattrs.iter()) {
                    ws.set_xattr(d.ino, xn, xv)?;
                }
                ws.get(d.ino)?
            }
        };
    }
    Ok(cur)
}

/// Makes the plan's changes in the target's live layer.
pub fn apply(ws: &Workspace, plan: &Plan, fork_root: &Hash) -> Result<()> {
    for a in &plan.actions {
        match a {
            Action::Take { comps, entry } => {
                let Some((name, parents)) = comps.split_last() else {
                    return Err(Error::Internal("merge cannot replace the root".into()));
                };
                let mut dir = ensure_dir(ws, parents, fork_root)?;
                if ws.lookup(&dir, name)?.is_some() {
                    ws.remove_tree(&dir, name)?;
                    dir = ws.get(dir.ino)?;
                }
                if let Some(e) = entry {
                    ws.graft(&dir, name, e)?;
                }
            }
            Action::Update {
                comps,
                content,
                owner,
                xattrs,
            } => {
                let node = literal(ws, comps)?;
                if let Some((hash, size)) = content {
                    ws.set_content(node.ino, *hash, *size)?;
                }
                if let Some((mode, uid, gid)) = owner {
                    ws.setattr(
                        node.ino,
                        &SetAttr {
                            mode: Some(*mode),
                            uid: Some(*uid),
                            gid: Some(*gid),
                            ..Default::default()
                        },
                    )?;
                }
                for (n, v) in xattrs {
                    match v {
                        Some(v) => ws.set_xattr(node.ino, n, v)?,
                        None => {
                            ws.remove_xattr(node.ino, n)?;
                        }
                    }
                }
            }
            Action::Write { comps, data } => {
                let node = literal(ws, comps)?;
                let hash = crate::store::content::write_bytes(ws.db, data)?.0;
                ws.set_content(node.ino, hash, data.len() as u64)?;
            }
        }
    }
    Ok(())
}
