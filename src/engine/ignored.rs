//! Ignored paths: what git's ignore rules (`.gitignore` at any depth, `.git/info/exclude`,
//! git's global excludes file, `.avfsignore`) match and the history does not hold lives in a per-workspace directory
//! beside the vault, never in the vault file.
//!
//! ```text
//! $AVFS_HOME/ignored/<mount id>/   the workspace's ignored files, as a tree
//! ```
//!
//! A run mounts that directory as the topmost lower layer, so ignored files are at the
//! stable path in every run. After the run, before the ingest, [`separate`] moves the
//! ignored, untracked entries of the run's upper into it (a rename: both are under
//! `$AVFS_HOME`), applies deletions of ignored files, and leaves in the upper only what is
//! versioned, so the ingest, the change report, checkpoints, diffs and merges never see
//! them and the upper can still become a layer of the history. As git does, a path the
//! history holds stays versioned whatever the rules say: only untracked paths are ignored.
//! The rules are read from the workspace as the run left it (the upper over the lowers),
//! so a `.gitignore` the run itself wrote counts.
//!
//! A fork's directory is made at the fork's first run from its parent's: the directories
//! copied, the files hard links to the parent's (`ensure`), so a fork of a workspace
//! with a `.venv` has a working `.venv` for the price of its directories. What either
//! writes afterwards stays its own, because a file here is never changed in place, only
//! replaced: this directory is a lower layer of every run (a write copies the file up
//! into the run's upper) and `separate` moves the new file over the old name.

use std::ffi::OsStr;
use std::fs::{self, File};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::relpath::Rel;

mod tree;

/// Ignored files and their bytes (regular files; directories and links not counted).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct IgnoredCount {
    pub files: u64,
    pub bytes: u64,
}

impl IgnoredCount {
    pub fn is_empty(&self) -> bool {
        self.files == 0 && self.bytes == 0
    }
}

/// Where all workspaces' ignored directories are.
pub fn ignored_root(home: &Path) -> PathBuf {
    home.join("ignored")
}

/// The directory of one workspace's ignored files (the mount shows it too).
pub fn ignored_dir(home: &Path, vault_path: &Path, workspace: &str) -> PathBuf {
    crate::mount::ignored_dir(home, vault_path, workspace)
}

fn host_err(p: &Path, e: std::io::Error) -> Error {
    Error::host(p.display(), e)
}

/// Does the directory hold anything?
pub fn holds_any(dir: &Path) -> bool {
    fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some())
}

/// The workspace's ignored directory, made on its first run: a copy of its parent's
/// (a fork), else empty.
pub fn ensure(
    home: &Path,
    vault_path: &Path,
    workspace: &str,
    parent: Option<&str>,
) -> Result<PathBuf> {
    let dir = ignored_dir(home, vault_path, workspace);
    if dir.is_dir() {
        return Ok(dir);
    }
    let root = ignored_root(home);
    fs::create_dir_all(&root).map_err(|e| host_err(&root, e))?;
    super::overlay::private(&root);
    let tmp = dir.with_extension(format!("new{}", std::process::id()));
    let _ = tree::remove_path(&tmp);
    let from = parent
        .map(|p| ignored_dir(home, vault_path, p))
        .filter(|p| holds_any(p));
    match from {
        Some(from) => {
            // A fork's directory is what the parent's held when the fork first ran: its
            // directories copied, its files shared as hard links (`cp -al`). Sharing is
            // safe because no file of an ignored directory is ever changed in place: it
            // is a lower layer, so a run that writes one copies it up, and `separate`
            // then *replaces* the name (rename); the mount shows it read-only. Where
            // hard links cannot be made (another file system, a link count at its
            // limit), a copy (reflinks where the file system has them).
            let cp = |args: &[&str]| -> Result<std::process::ExitStatus> {
                let _ = tree::remove_path(&tmp);
                std::process::Command::new("cp")
                    .args(args)
                    .arg("--")
                    .arg(&from)
                    .arg(&tmp)
                    .stderr(std::process::Stdio::null())
                    .status()
                    .map_err(|e| host_err(Path::new("cp"), e))
            };
            let mut st = cp(&["-a", "-l"])?;
            if !st.success() {
                st = cp(&["-a", "--reflink=auto"])?;
            }
            if !st.success() {
                let _ = tree::remove_path(&tmp);
                return Err(Error::Host {
                    what: tmp.display().to_string(),
                    message: format!("copying the parent's ignored files failed ({st})"),
                });
            }
        }
        None => fs::create_dir(&tmp).map_err(|e| host_err(&tmp, e))?,
    }
    match fs::rename(&tmp, &dir) {
        Ok(()) => Ok(dir),
        // Another process made it meanwhile: theirs stands.
        Err(_) if dir.is_dir() => {
            let _ = tree::remove_path(&tmp);
            Ok(dir)
        }
        Err(e) => Err(host_err(&dir, e)),
    }
}

/// Removes a workspace's ignored files (the workspace or its vault is deleted).
pub fn discard(home: &Path, vault_path: &Path, workspace: &str) {
    let _ = tree::remove_path(&ignored_dir(home, vault_path, workspace));
}

/// Counts the regular files below `p` (or `p` itself) and their bytes, at any depth.
pub fn measure(p: &Path) -> IgnoredCount {
    let parent = p.parent().filter(|q| !q.as_os_str().is_empty());
    let (Some(parent), Some(name)) = (parent, p.file_name()) else {
        return IgnoredCount::default();
    };
    match Rel::root_following(parent).and_then(|r| r.child(&mut None, name.as_bytes())) {
        Ok(at) => tree::measure(&at),
        Err(_) => IgnoredCount::default(),
    }
}

/// The rule files read in each directory, weakest first (later patterns win).
pub(super) const RULE_FILES: [&str; 2] = [".gitignore", ".avfsignore"];

/// The workspace as the run left it, for reading rule files and telling tracked paths.
pub struct View<'a> {
    /// The run's upper.
    pub upper: &'a Path,
    /// The history's layers, top first (not the ignored directory).
    pub lowers: &'a [PathBuf],
    /// Is this path (components below the root) in the workspace's history (its head)?
    pub tracked: &'a mut dyn FnMut(&[Vec<u8>]) -> Result<bool>,
}

impl View<'_> {
    /// The rules of the directory `f` is at, `rel` below the root (`None`: it has none).
    fn rules(f: &mut Frame, rel: &[u8]) -> Option<Gitignore> {
        dir_rules(
            &mut |p| p.file_name().and_then(|n| f.read(n.as_bytes())),
            Path::new(OsStr::from_bytes(rel)),
        )
    }
}

/// The rules of directory `rel` (`None`: it has none), its rule files read by `read`.
pub(super) fn dir_rules(
    read: &mut dyn FnMut(&Path) -> Option<Vec<u8>>,
    rel: &Path,
) -> Option<Gitignore> {
    let base = Path::new("/").join(rel);
    let mut b = GitignoreBuilder::new(&base);
    let mut any = false;
    for name in RULE_FILES {
        let Some(text) = read(&rel.join(name)) else {
            continue;
        };
        let from = base.join(name);
        for line in String::from_utf8_lossy(&text).lines() {
            // A bad pattern is skipped (git skips it too), never an error of the run.
            if b.add_line(Some(from.clone()), line).is_ok() {
                any = true;
            }
        }
    }
    any.then(|| b.build().ok()).flatten()
}

/// The rules of the root that no `.gitignore` overrides: `.git/info/exclude` (read by
/// `read`), then git's global excludes file; strongest first.
pub(super) fn root_excludes(read: &mut dyn FnMut(&Path) -> Option<Vec<u8>>) -> Vec<Gitignore> {
    read(Path::new(".git/info/exclude"))
        .and_then(|text| root_rules(&text, Path::new("/.git/info/exclude")))
        .into_iter()
        .chain(global_excludes())
        .collect()
}

/// Does the first of `rules` (strongest first) that says anything of `rel` ignore it?
pub(super) fn decide<'a>(
    rules: impl Iterator<Item = &'a Gitignore>,
    rel: &Path,
    is_dir: bool,
) -> bool {
    let p = Path::new("/").join(rel);
    for g in rules {
        match g.matched(&p, is_dir) {
            Match::Ignore(_) => return true,
            Match::Whitelist(_) => return false,
            Match::None => {}
        }
    }
    false
}

/// Rules read as if from the workspace's root (`.git/info/exclude`, the global file).
fn root_rules(text: &[u8], from: &Path) -> Option<Gitignore> {
    let mut b = GitignoreBuilder::new("/");
    for line in String::from_utf8_lossy(text).lines() {
        let _ = b.add_line(Some(from.to_path_buf()), line);
    }
    b.build().ok()
}

/// git's global excludes file of the user running avfs (`core.excludesFile` in
/// `$GIT_CONFIG_GLOBAL`, `~/.gitconfig`, `$XDG_CONFIG_HOME/git/config` or
/// `/etc/gitconfig`, else `$XDG_CONFIG_HOME/git/ignore`), as git reads it: the weakest
/// rules, below `.git/info/exclude`.
fn global_excludes() -> Option<Gitignore> {
    let path = ignore::gitignore::gitconfig_excludes_path()?;
    let text = fs::read(&path).ok()?;
    root_rules(&text, &path)
}

/// The rules in force in one directory: its own and its parents', deepest last; then
/// `.git/info/exclude` and the global excludes file, strongest first.
struct Rules {
    stack: Vec<Gitignore>,
    exclude: Vec<Gitignore>,
}

impl Rules {
    /// Is `rel` (below the root) ignored? String work only: it holds at any depth.
    fn ignored(&self, rel: &[u8], is_dir: bool) -> bool {
        let stack = self.stack.iter().rev();
        decide(
            stack.chain(self.exclude.iter()),
            Path::new(OsStr::from_bytes(rel)),
            is_dir,
        )
    }
}

/// What [`separate`] found or did.
#[derive(Default)]
struct Found {
    count: IgnoredCount,
    /// Anything to move or delete at all (a dry run stops at the first).
    any: bool,
}

/// One directory of the walk: the same directory in each tree the walk touches, each
/// named through a [`Rel`] so that no path grows with the depth.
struct Frame {
    /// It in the run's upper, and the anchor its entries are named from (`Rel::child`).
    upper: Rel,
    upper_anchor: Option<Arc<File>>,
    /// It in the ignored directory, where that has a directory here (made on demand:
    /// `Walk::make_parents`).
    ign: Option<Rel>,
    ign_anchor: Option<Arc<File>>,
    /// It in each lower, top first, where it may be (a lower that lacks it fails the
    /// lookups); none below an opaque directory of the upper, which hides them. Only
    /// rule files are read there.
    lowers: Vec<(Rel, Option<Arc<File>>)>,
    /// Its entries still to look at, the next last.
    names: Vec<Vec<u8>>,
    /// The length of its path in `Walk::rel`.
    rel_len: usize,
    /// It is ignored (so is all below it: git does not look inside an ignored directory).
    ignored: bool,
    /// The upper's directory is opaque (it replaces the lowers' whole).
    opaque: bool,
    /// It has rules of its own (on top of `Rules::stack` while the walk is below it).
    rules: bool,
    /// Something left the upper's directory (moved to the ignored directory or deleted).
    moved: bool,
}

impl Frame {
    /// A file's bytes as the merged view shows it: the upper's, else those of the first
    /// lower that has the name.
    fn read(&mut self, name: &[u8]) -> Option<Vec<u8>> {
        let at = self.upper.child(&mut self.upper_anchor, name).ok()?;
        match tree::lstat(&at) {
            Ok(m) if m.is_file() => return tree::read_file(&at),
            Ok(_) => return None,
            Err(_) => {}
        }
        for (l, anchor) in &mut self.lowers {
            let Ok(at) = l.child(anchor, name) else {
                continue;
            };
            match tree::lstat(&at) {
                Ok(m) if m.is_file() => return tree::read_file(&at),
                Ok(_) => return None,
                Err(_) => {}
            }
        }
        None
    }
}

/// Moves the ignored, untracked entries of the run's upper into `ignored` and applies the
/// run's deletions of ignored files there; returns what was moved. With `dry`, changes
/// nothing and only says whether there is anything to do (a kept overlay's upper is still
/// mounted: its keeper must end first).
///
/// The walk keeps its own stack of directories (the post-order steps run when one is
/// finished), and reaches every entry through `Rel` anchors, so it holds at any depth: a
/// run can make a tree far deeper than PATH_MAX, and the rules hold at its bottom too.
pub fn separate(view: &mut View, ignored: &Path, dry: bool) -> Result<(IgnoredCount, bool)> {
    let upper = Rel::root(view.upper).map_err(|e| host_err(view.upper, e))?;
    let ign = Rel::root(ignored).map_err(|e| host_err(ignored, e))?;
    let lowers = view
        .lowers
        .iter()
        .filter_map(|l| Rel::root(l).ok())
        .map(|r| (r, None))
        .collect();
    let mut root = Frame {
        upper,
        upper_anchor: None,
        ign: Some(ign),
        ign_anchor: None,
        lowers,
        names: vec![],
        rel_len: 0,
        ignored: false,
        opaque: false,
        rules: false,
        moved: false,
    };
    // `.git/info/exclude`: rules of the root, weaker than any `.gitignore`.
    let exclude = root_excludes(&mut |p| root.read(p.as_os_str().as_bytes()));
    let mut w = Walk {
        view,
        ignored,
        rules: Rules {
            stack: vec![],
            exclude,
        },
        found: Found::default(),
        dry,
        stack: vec![],
        rel: vec![],
        comps: vec![],
    };
    w.enter(root)?;
    while let Some(top) = w.stack.last_mut() {
        let next = if w.dry && w.found.any {
            None
        } else {
            top.names.pop()
        };
        match next {
            Some(name) => w.entry(name)?,
            None => w.leave()?,
        }
    }
    Ok((w.found.count, w.found.any))
}

/// The state of [`separate`]'s walk. An error ends it: what was moved before stays moved
/// (each move is a rename), and the upper still holds all the rest.
struct Walk<'v, 'a> {
    view: &'v mut View<'a>,
    ignored: &'v Path,
    rules: Rules,
    found: Found,
    dry: bool,
    /// The directories from the root down to the one being read.
    stack: Vec<Frame>,
    /// The path below the root of the entry being looked at (`a/b/c`), for the rules and
    /// for errors.
    rel: Vec<u8>,
    /// The same as components, for `View::tracked`.
    comps: Vec<Vec<u8>>,
}

impl Walk<'_, '_> {
    fn upper_err(&self, e: std::io::Error) -> Error {
        Error::host(tree::shown(self.view.upper, &self.rel), e)
    }

    fn ign_err(&self, e: std::io::Error) -> Error {
        Error::host(tree::shown(self.ignored, &self.rel), e)
    }

    /// Starts on the directory `f` (at `self.rel`): reads its entries and its rules.
    fn enter(&mut self, mut f: Frame) -> Result<()> {
        f.names = tree::names(&f.upper).map_err(|e| self.upper_err(e))?;
        f.rel_len = self.rel.len();
        if let Some(g) = View::rules(&mut f, &self.rel) {
            self.rules.stack.push(g);
            f.rules = true;
        }
        self.stack.push(f);
        Ok(())
    }

    /// Done with the directory on top: its rules end, and a directory that was copied
    /// up only to hold what went to the ignored directory leaves the upper (it is no
    /// change of the history).
    fn leave(&mut self) -> Result<()> {
        let f = self.stack.pop().expect("a directory on the stack");
        if f.rules {
            self.rules.stack.pop();
        }
        let Some(parent) = self.stack.last() else {
            return Ok(());
        };
        let parent_len = parent.rel_len;
        self.rel.truncate(f.rel_len);
        if f.moved && !f.opaque && (self.view.tracked)(&self.comps)? {
            let Frame { upper, .. } = f;
            if tree::unlink(&upper, true).is_ok() {
                self.stack.last_mut().expect("the parent").moved = true;
            }
        }
        self.comps.pop();
        self.rel.truncate(parent_len);
        Ok(())
    }

    /// One entry of the directory on top.
    fn entry(&mut self, name: Vec<u8>) -> Result<()> {
        let n = self.stack.len() - 1;
        self.rel.truncate(self.stack[n].rel_len);
        if !self.rel.is_empty() {
            self.rel.push(b'/');
        }
        self.rel.extend_from_slice(&name);
        let t = &mut self.stack[n];
        let src = t.upper.child(&mut t.upper_anchor, &name);
        let src = src.map_err(|e| self.upper_err(e))?;
        let m = match tree::lstat_opt(&src) {
            Ok(Some(m)) => m,
            Ok(None) => return Ok(()),
            Err(e) => return Err(self.upper_err(e)),
        };
        let t = &mut self.stack[n];
        let dst = t.ign.as_ref().map(|i| i.child(&mut t.ign_anchor, &name));
        let dst = dst.transpose().map_err(|e| self.ign_err(e))?;
        let dst_meta = match &dst {
            Some(d) => tree::lstat_opt(d).map_err(|e| self.ign_err(e))?,
            None => None,
        };
        self.comps.push(name.clone());
        if tree::is_whiteout(&m) {
            // A deletion: of an ignored file (it goes from the ignored directory; the
            // whiteout goes too when the history never had the path), or of a tracked
            // one (the ingest takes it in).
            let in_ignored = dst_meta.is_some();
            let tracked = (self.view.tracked)(&self.comps)?;
            if (in_ignored || !tracked) && !self.dry {
                if let Some(d) = &dst {
                    tree::remove(d).map_err(|e| self.ign_err(e))?;
                }
                if !tracked {
                    tree::unlink(&src, false).map_err(|e| self.upper_err(e))?;
                    self.stack[n].moved = true;
                }
            }
            self.found.any |= in_ignored;
            self.comps.pop();
            return Ok(());
        }
        let is_dir = m.is_dir();
        let ign = self.stack[n].ignored || self.rules.ignored(&self.rel, is_dir);
        if ign && !(self.view.tracked)(&self.comps)? {
            self.found.any = true;
            if !self.dry {
                let c = tree::measure(&src);
                self.found.count.files += c.files;
                self.found.count.bytes += c.bytes;
                let dst = match dst {
                    Some(d) => d,
                    None => {
                        self.make_parents()?;
                        let t = &mut self.stack[n];
                        let i = t.ign.as_ref().expect("made by make_parents");
                        let d = i.child(&mut t.ign_anchor, &name);
                        d.map_err(|e| self.ign_err(e))?
                    }
                };
                tree::move_into(&src, &dst, &tree::shown(self.ignored, &self.rel))?;
                self.stack[n].moved = true;
            }
            self.comps.pop();
            return Ok(());
        }
        if !is_dir {
            self.comps.pop();
            return Ok(());
        }
        let opaque = tree::is_opaque(&src);
        let mut ign_dir = dst.filter(|_| dst_meta.is_some_and(|m| m.is_dir()));
        if opaque && dst_meta.is_some() {
            // The run replaced the directory whole: what the ignored directory held
            // there is gone too.
            self.found.any = true;
            if !self.dry {
                let t = &mut self.stack[n];
                let i = t.ign.as_ref().expect("something is there");
                let d = i.child(&mut t.ign_anchor, &name);
                let d = d.map_err(|e| self.ign_err(e))?;
                tree::remove(&d).map_err(|e| self.ign_err(e))?;
                ign_dir = None;
            }
        }
        let parent = &mut self.stack[n];
        let lowers = if opaque {
            vec![]
        } else {
            let at = parent.lowers.iter_mut();
            at.filter_map(|(l, a)| l.child(a, &name).ok().map(|c| (c, None)))
                .collect()
        };
        // `comps` keeps the name while the walk is below it (`leave` pops it).
        self.enter(Frame {
            upper: src,
            upper_anchor: None,
            ign: ign_dir,
            ign_anchor: None,
            lowers,
            names: vec![],
            rel_len: 0,
            ignored: ign,
            opaque,
            rules: false,
            moved: false,
        })
    }

    /// Makes the directories of the ignored directory down to the one on top, with the
    /// attributes their copies in the upper have (the ignored directory lies above the
    /// history's layers, so its directories' attributes are the ones a run sees).
    fn make_parents(&mut self) -> Result<()> {
        for i in 1..self.stack.len() {
            if self.stack[i].ign.is_some() {
                continue;
            }
            let (before, after) = self.stack.split_at_mut(i);
            let (p, f) = (&mut before[i - 1], &mut after[0]);
            let at = &self.rel[..f.rel_len];
            let err = |e| Error::host(tree::shown(self.ignored, at), e);
            let parent = p.ign.as_ref().expect("the parents are made first");
            let d = parent
                .child(&mut p.ign_anchor, &self.comps[i - 1])
                .map_err(err)?;
            if let Err(e) = tree::mkdir(&d) {
                if e.kind() != std::io::ErrorKind::AlreadyExists {
                    return Err(err(e));
                }
                // Not a directory (the walk found none here): a file or link of an
                // earlier run, which the run's directory replaced in its view.
                tree::remove(&d).map_err(err)?;
                tree::mkdir(&d).map_err(err)?;
            }
            if let Ok(m) = tree::lstat(&f.upper) {
                tree::set_attrs(&d, &m);
            }
            f.ign = Some(d);
        }
        Ok(())
    }
}
