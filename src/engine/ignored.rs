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

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use serde::{Deserialize, Serialize};

use super::materialize::remove_tree;
use crate::error::{Error, Result};

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
    let _ = remove_tree(&tmp);
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
                let _ = remove_tree(&tmp);
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
                let _ = remove_tree(&tmp);
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
            let _ = remove_tree(&tmp);
            Ok(dir)
        }
        Err(e) => Err(host_err(&dir, e)),
    }
}

/// Removes a workspace's ignored files (the workspace or its vault is deleted).
pub fn discard(home: &Path, vault_path: &Path, workspace: &str) {
    let _ = remove_tree(&ignored_dir(home, vault_path, workspace));
}

/// Counts the regular files below `p` (or `p` itself) and their bytes.
pub fn measure(p: &Path) -> IgnoredCount {
    let mut c = IgnoredCount::default();
    let mut stack = vec![p.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(m) = fs::symlink_metadata(&p) else {
            continue;
        };
        if m.is_dir() {
            if let Ok(rd) = fs::read_dir(&p) {
                stack.extend(rd.flatten().map(|e| e.path()));
            }
        } else if m.is_file() {
            c.files += 1;
            c.bytes += m.len();
        }
    }
    c
}

/// The rule files read in each directory, weakest first (later patterns win).
pub(super) const RULE_FILES: [&str; 2] = [".gitignore", ".avfsignore"];

fn is_whiteout(m: &fs::Metadata) -> bool {
    m.file_type().is_char_device() && m.rdev() == 0
}

fn is_opaque(p: &Path) -> bool {
    xattr_get(p, super::scan::OPAQUE_XATTR).is_some_and(|v| v == b"y")
}

fn xattr_get(p: &Path, name: &[u8]) -> Option<Vec<u8>> {
    let cp = std::ffi::CString::new(p.as_os_str().as_bytes()).ok()?;
    let cn = std::ffi::CString::new(name).ok()?;
    let mut buf = [0u8; 8];
    // SAFETY: valid C strings and a buffer of the given length.
    let n =
        unsafe { libc::lgetxattr(cp.as_ptr(), cn.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    (n >= 0).then(|| buf[..n as usize].to_vec())
}

fn xattr_remove(p: &Path, name: &[u8]) {
    let (Ok(cp), Ok(cn)) = (
        std::ffi::CString::new(p.as_os_str().as_bytes()),
        std::ffi::CString::new(name),
    ) else {
        return;
    };
    // SAFETY: valid C strings; a missing attribute is fine.
    unsafe { libc::lremovexattr(cp.as_ptr(), cn.as_ptr()) };
}

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
    /// A file's bytes as the merged view shows it (`hidden`: an opaque directory of the
    /// upper hides the lowers at this depth).
    fn read(&self, rel: &Path, hidden: bool) -> Option<Vec<u8>> {
        let p = self.upper.join(rel);
        match fs::symlink_metadata(&p) {
            Ok(m) if m.is_file() => return fs::read(&p).ok(),
            Ok(_) => return None,
            Err(_) if hidden => return None,
            Err(_) => {}
        }
        for l in self.lowers {
            let p = l.join(rel);
            match fs::symlink_metadata(&p) {
                Ok(m) if m.is_file() => return fs::read(&p).ok(),
                Ok(_) => return None,
                Err(_) => {}
            }
        }
        None
    }

    /// The rules of directory `rel` (`None`: it has none).
    fn rules(&self, rel: &Path, hidden: bool) -> Option<Gitignore> {
        dir_rules(&mut |p| self.read(p, hidden), rel)
    }

    /// `.git/info/exclude` and the global excludes file, strongest first.
    fn exclude(&self) -> Vec<Gitignore> {
        root_excludes(&mut |p| self.read(p, false))
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

/// The rules in force in one directory: its own and its parents', deepest first; then
/// `.git/info/exclude` and the global excludes file, strongest first.
struct Rules {
    stack: Vec<(usize, Gitignore)>,
    exclude: Vec<Gitignore>,
}

impl Rules {
    fn ignored(&self, rel: &Path, is_dir: bool) -> bool {
        let stack = self.stack.iter().rev().map(|(_, g)| g);
        decide(stack.chain(self.exclude.iter()), rel, is_dir)
    }
}

/// What [`separate`] found or did.
#[derive(Default)]
struct Found {
    count: IgnoredCount,
    /// Anything to move or delete at all (a dry run stops at the first).
    any: bool,
}

/// Moves the ignored, untracked entries of the run's upper into `ignored` and applies the
/// run's deletions of ignored files there; returns what was moved. With `dry`, changes
/// nothing and only says whether there is anything to do (a kept overlay's upper is still
/// mounted: its keeper must end first).
pub fn separate(view: &mut View, ignored: &Path, dry: bool) -> Result<(IgnoredCount, bool)> {
    let mut rules = Rules {
        stack: vec![],
        exclude: view.exclude(),
    };
    let mut found = Found::default();
    let mut comps = Vec::new();
    visit(
        view,
        ignored,
        Path::new(""),
        &mut comps,
        &mut rules,
        (false, false),
        dry,
        &mut found,
    )?;
    Ok((found.count, found.any))
}

/// One directory of the upper. `(parent_ignored, hidden)`: the directory itself is
/// ignored (so is all below it: git does not look inside an ignored directory), an
/// opaque directory at or above it hides the lowers. Returns whether it moved anything
/// out of this directory.
#[allow(clippy::too_many_arguments)]
fn visit(
    view: &mut View,
    ignored: &Path,
    rel: &Path,
    comps: &mut Vec<Vec<u8>>,
    rules: &mut Rules,
    (dir_ignored, hidden): (bool, bool),
    dry: bool,
    found: &mut Found,
) -> Result<bool> {
    let depth = comps.len();
    if let Some(g) = view.rules(rel, hidden) {
        rules.stack.push((depth, g));
    }
    let here = view.upper.join(rel);
    let mut names: Vec<_> = fs::read_dir(&here)
        .map_err(|e| host_err(&here, e))?
        .flatten()
        .map(|e| e.file_name())
        .collect();
    names.sort();
    let mut moved = false;
    for name in names {
        if dry && found.any {
            break;
        }
        let rel_child = rel.join(&name);
        let src = view.upper.join(&rel_child);
        let Ok(m) = fs::symlink_metadata(&src) else {
            continue;
        };
        comps.push(name.as_bytes().to_vec());
        let dst = ignored.join(&rel_child);
        // An error ends the whole walk (`comps` is not needed after it).
        'entry: {
            if is_whiteout(&m) {
                // A deletion: of an ignored file (it goes from the ignored directory; the
                // whiteout goes too when the history never had the path), or of a
                // tracked one (the ingest takes it in).
                let in_ignored = fs::symlink_metadata(&dst).is_ok();
                let tracked = (view.tracked)(comps)?;
                if in_ignored || !tracked {
                    found.any |= in_ignored;
                    if !dry {
                        remove_any(&dst).map_err(|e| host_err(&dst, e))?;
                        if !tracked {
                            fs::remove_file(&src).map_err(|e| host_err(&src, e))?;
                            moved = true;
                        }
                    }
                }
                break 'entry;
            }
            let is_dir = m.is_dir();
            let ign = dir_ignored || rules.ignored(&rel_child, is_dir);
            if ign && !(view.tracked)(comps)? {
                found.any = true;
                if dry {
                    break 'entry;
                }
                let c = measure(&src);
                found.count.files += c.files;
                found.count.bytes += c.bytes;
                make_parents(view.upper, ignored, rel)?;
                move_into(&src, &dst)?;
                moved = true;
                break 'entry;
            }
            if is_dir {
                let opaque = is_opaque(&src);
                if opaque && fs::symlink_metadata(&dst).is_ok() {
                    // The run replaced the directory whole: what the ignored directory
                    // held there is gone too.
                    found.any = true;
                    if !dry {
                        remove_any(&dst).map_err(|e| host_err(&dst, e))?;
                    }
                }
                let below = visit(
                    view,
                    ignored,
                    &rel_child,
                    comps,
                    rules,
                    (ign, hidden || opaque),
                    dry,
                    found,
                )?;
                // A directory that was copied up only to hold what went to the ignored
                // directory is no change of the history: it leaves the upper.
                if below && !opaque && (view.tracked)(comps)? && fs::remove_dir(&src).is_ok() {
                    moved = true;
                }
            }
        }
        comps.pop();
    }
    if rules.stack.last().is_some_and(|(d, _)| *d == depth) {
        rules.stack.pop();
    }
    Ok(moved)
}

fn remove_any(p: &Path) -> std::io::Result<()> {
    match fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => remove_tree(p),
        Ok(_) => fs::remove_file(p),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Makes the directories above `rel` in the ignored directory, with the attributes their
/// copies in the upper have (the ignored directory lies above the history's layers, so
/// its directories' attributes are the ones a run sees).
fn make_parents(upper: &Path, ignored: &Path, rel: &Path) -> Result<()> {
    let mut at = PathBuf::new();
    for c in rel.components() {
        at.push(c);
        let d = ignored.join(&at);
        if d.is_dir() {
            continue;
        }
        fs::create_dir(&d).map_err(|e| host_err(&d, e))?;
        if let Ok(m) = fs::symlink_metadata(upper.join(&at)) {
            let _ = fs::set_permissions(&d, fs::Permissions::from_mode(m.mode() & 0o7777));
            let _ = std::os::unix::fs::lchown(&d, Some(m.uid()), Some(m.gid()));
        }
    }
    Ok(())
}

/// Moves `src` (of the upper) to `dst` (of the ignored directory): a directory already
/// there takes the upper's entries one by one (the upper holds only what the run
/// changed), unless the upper's is opaque (it replaces the old one whole).
fn move_into(src: &Path, dst: &Path) -> Result<()> {
    let sm = fs::symlink_metadata(src).map_err(|e| host_err(src, e))?;
    let dm = fs::symlink_metadata(dst).ok();
    if sm.is_dir() && dm.as_ref().is_some_and(|m| m.is_dir()) && !is_opaque(src) {
        let rd = fs::read_dir(src).map_err(|e| host_err(src, e))?;
        for e in rd.flatten() {
            let (s, d) = (e.path(), dst.join(e.file_name()));
            let m = fs::symlink_metadata(&s).map_err(|e| host_err(&s, e))?;
            if is_whiteout(&m) {
                remove_any(&d).map_err(|e| host_err(&d, e))?;
                continue;
            }
            move_into(&s, &d)?;
        }
        let _ = fs::set_permissions(dst, fs::Permissions::from_mode(sm.mode() & 0o7777));
        let _ = remove_tree(src);
        return Ok(());
    }
    if dm.is_some() {
        remove_any(dst).map_err(|e| host_err(dst, e))?;
    }
    fs::rename(src, dst).map_err(|e| host_err(dst, e))?;
    if sm.is_dir() {
        strip_overlay_marks(dst);
    }
    Ok(())
}

/// A directory moved out of an upper keeps no overlay marks: no opaque attribute, no
/// whiteouts (what they hid is not below the ignored directory).
fn strip_overlay_marks(dir: &Path) {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        xattr_remove(&d, super::scan::OPAQUE_XATTR);
        let Ok(rd) = fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            match fs::symlink_metadata(&p) {
                Ok(m) if m.is_dir() => stack.push(p),
                Ok(m) if is_whiteout(&m) => {
                    let _ = fs::remove_file(&p);
                }
                _ => {}
            }
        }
    }
}
