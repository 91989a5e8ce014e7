//! Writing stored trees out as overlayfs layers: a whole root (the bottom of a stack), or
//! the difference between two roots on top of the first one's stack (new and changed
//! entries written, deleted ones as whiteouts, replaced directories opaque).
//!
//! Works from immutable tree objects, never from a live layer, so it can run outside any
//! workspace transaction. Everything is created with `O_EXCL`/`O_NOFOLLOW` inside a fresh
//! directory that only this process writes.

use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rusqlite::Connection;

use super::ingest::{OPAQUE_XATTR, set_xattr};
use crate::error::{Error, Result};
use crate::store::objects::{DirAttrs, Entry, Hash, Kind, get_tree};

/// What writing a layer cost.
#[derive(Clone, Debug, Default)]
pub struct Written {
    pub files: u64,
    pub dirs: u64,
    pub bytes: u64,
    pub whiteouts: u64,
}

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sets the modification time of `p` itself (never through a symlink); atime too.
pub fn set_times(p: &Path, mtime_ns: i64) -> io::Result<()> {
    let c = cpath(p)?;
    let ts = libc::timespec {
        tv_sec: mtime_ns.div_euclid(1_000_000_000) as libc::time_t,
        tv_nsec: mtime_ns.rem_euclid(1_000_000_000) as libc::c_long,
    };
    let t = [ts, ts];
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

fn mknod(p: &Path, mode: u32, rdev: u64) -> io::Result<()> {
    let c = cpath(p)?;
    // SAFETY: valid path; mknod creates nothing but the node.
    check(unsafe { libc::mknod(c.as_ptr(), mode as libc::mode_t, rdev as libc::dev_t) })
}

/// Writes layers from one vault.
pub struct Writer<'a> {
    db: &'a Connection,
    /// Root may give files their recorded owners; others keep their own.
    root: bool,
    /// First path written for each link group of the tree being written.
    links: HashMap<u64, PathBuf>,
    /// Every name written for a link group (to complete groups a diff touched).
    linked: std::collections::HashSet<PathBuf>,
    pub stats: Written,
}

impl<'a> Writer<'a> {
    pub fn new(db: &'a Connection) -> Writer<'a> {
        Writer {
            db,
            // SAFETY: geteuid has no preconditions.
            root: unsafe { libc::geteuid() } == 0,
            links: HashMap::new(),
            linked: std::collections::HashSet::new(),
            stats: Written::default(),
        }
    }

    fn host_err(p: &Path, e: io::Error) -> Error {
        Error::host(p.display(), e)
    }

    /// Owner, mode, xattrs and time of an entry already created at `p`.
    fn finish(&self, p: &Path, e: &Entry) -> Result<()> {
        if self.root {
            std::os::unix::fs::lchown(p, Some(e.uid), Some(e.gid))
                .map_err(|err| Self::host_err(p, err))?;
        }
        if e.kind != Kind::Symlink {
            // Without the setuid and setgid bits: a layer is on the host's disk, where
            // such a file would run as its owner for whoever reaches it. A run sees a
            // file the history holds as setuid without the bits (the history keeps them).
            fs::set_permissions(p, fs::Permissions::from_mode(e.mode & 0o1777))
                .map_err(|err| Self::host_err(p, err))?;
            for (k, v) in &e.xattrs {
                // Only user.* attributes are stored; one a file system refuses is left out.
                let _ = set_xattr(p, k, v);
            }
        }
        set_times(p, e.mtime_ns).map_err(|err| Self::host_err(p, err))
    }

    fn write_file(&mut self, p: &Path, e: &Entry) -> Result<()> {
        let hash = e
            .hash
            .ok_or_else(|| Error::Internal("file entry without content".into()))?;
        let f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .mode(0o600)
            .open(p)
            .map_err(|err| Self::host_err(p, err))?;
        if e.size > 0 {
            // One block at a time; holes stay holes.
            crate::store::content::copy_to_file(self.db, &hash, e.size, &f).map_err(
                |err| match err {
                    Error::Host { message, .. } => Error::Host {
                        what: p.display().to_string(),
                        message,
                    },
                    other => other,
                },
            )?;
        }
        self.stats.files += 1;
        self.stats.bytes += e.size;
        Ok(())
    }

    /// Creates entry `e` at `p` (which does not exist); directories recursively.
    fn create(&mut self, p: &Path, e: &Entry) -> Result<()> {
        if e.link_group != 0
            && let Some(first) = self.links.get(&e.link_group)
        {
            fs::hard_link(first, p).map_err(|err| Self::host_err(p, err))?;
            self.linked.insert(p.to_path_buf());
            return Ok(());
        }
        match e.kind {
            Kind::Dir => {
                fs::create_dir(p).map_err(|err| Self::host_err(p, err))?;
                self.stats.dirs += 1;
                if let Some(h) = e.hash {
                    let tree = get_tree(self.db, &h)?;
                    for child in &tree.entries {
                        self.create(&p.join(OsStr::from_bytes(&child.name)), child)?;
                    }
                }
            }
            Kind::File => self.write_file(p, e)?,
            Kind::Symlink => {
                let t = e.target.as_deref().unwrap_or_default();
                std::os::unix::fs::symlink(OsStr::from_bytes(t), p)
                    .map_err(|err| Self::host_err(p, err))?;
            }
            Kind::Fifo => {
                mknod(p, libc::S_IFIFO | 0o600, 0).map_err(|err| Self::host_err(p, err))?
            }
            Kind::Socket => {
                // A socket file cannot be recreated without binding one: an empty
                // placeholder of the same type is what a copy can do.
                mknod(p, libc::S_IFSOCK | 0o600, 0).map_err(|err| Self::host_err(p, err))?
            }
            Kind::CharDev | Kind::BlockDev => {
                // Only root can make device nodes; a layer of another user leaves them out
                // (the run's mount is `nodev` anyway).
                let fmt = e.kind.ifmt();
                if mknod(p, fmt | 0o600, e.rdev).is_err() {
                    return Ok(());
                }
            }
        }
        if e.link_group != 0 {
            self.links.insert(e.link_group, p.to_path_buf());
            self.linked.insert(p.to_path_buf());
        }
        self.finish(p, e)
    }

    fn root_attrs(&self, root: &Hash) -> Result<DirAttrs> {
        Ok(get_tree(self.db, root)?.root_attrs.unwrap_or(DirAttrs {
            mode: 0o755,
            uid: 0,
            gid: 0,
            mtime_ns: 0,
            xattrs: vec![],
        }))
    }

    /// Writes the whole tree `root` into `dir` (an empty directory).
    pub fn full(&mut self, root: &Hash, dir: &Path) -> Result<()> {
        let tree = get_tree(self.db, root)?;
        for child in &tree.entries {
            self.create(&dir.join(OsStr::from_bytes(&child.name)), child)?;
        }
        let a = self.root_attrs(root)?;
        self.finish(dir, &a.root_entry(None, false))
    }

    /// Writes into `dir` (an empty directory) what turns a view of `from` into a view of
    /// `to` when `dir` is stacked above it.
    pub fn diff(&mut self, from: &Hash, to: &Hash, dir: &Path) -> Result<()> {
        self.diff_dir(Some(from), to, dir)?;
        self.complete_link_groups(to, dir)?;
        let a = self.root_attrs(to)?;
        self.finish(dir, &a.root_entry(None, false))
    }

    /// A link group the diff wrote one name of must be whole in this layer: its other
    /// names, unchanged and so not written, would otherwise show the lower layer's file,
    /// a different one. They are linked in here too, with the directories that hold them
    /// (merged directories: their attributes, nothing else), whose times are set again.
    fn complete_link_groups(&mut self, to: &Hash, dir: &Path) -> Result<()> {
        if self.links.is_empty() {
            return Ok(());
        }
        // A member, with the directories (name, entry) that lead to it.
        type Parents = Vec<(Vec<u8>, Entry)>;
        let mut members: Vec<(Parents, Entry)> = vec![];
        let mut stack: Vec<(Hash, Parents)> = vec![(*to, vec![])];
        while let Some((h, parents)) = stack.pop() {
            for e in get_tree(self.db, &h)?.entries {
                if e.kind == Kind::Dir {
                    if e.has_links
                        && let Some(sub) = e.hash
                    {
                        let mut p = parents.clone();
                        p.push((e.name.clone(), e.clone()));
                        stack.push((sub, p));
                    }
                } else if e.link_group != 0 && self.links.contains_key(&e.link_group) {
                    members.push((parents.clone(), e));
                }
            }
        }
        let mut touched: Vec<(PathBuf, Entry)> = vec![];
        for (parents, e) in members {
            let mut p = dir.to_path_buf();
            for (name, d) in &parents {
                p.push(OsStr::from_bytes(name));
                if !p.exists() {
                    fs::create_dir(&p).map_err(|err| Self::host_err(&p, err))?;
                    self.stats.dirs += 1;
                }
                touched.push((p.clone(), d.clone()));
            }
            p.push(OsStr::from_bytes(&e.name));
            if self.linked.contains(&p) {
                continue;
            }
            let first = self.links[&e.link_group].clone();
            fs::hard_link(&first, &p).map_err(|err| Self::host_err(&p, err))?;
            self.linked.insert(p);
        }
        // Deepest first: a directory's time is set after everything below it.
        touched.sort_by(|a, b| {
            (b.0.components().count(), &b.0).cmp(&(a.0.components().count(), &a.0))
        });
        touched.dedup_by(|a, b| a.0 == b.0);
        for (p, d) in touched {
            self.finish(&p, &d)?;
        }
        Ok(())
    }

    fn whiteout(&mut self, p: &Path) -> Result<()> {
        mknod(p, libc::S_IFCHR, 0).map_err(|err| Self::host_err(p, err))?;
        self.stats.whiteouts += 1;
        Ok(())
    }

    /// `dir` exists in the layer; fills it with what differs between the trees.
    fn diff_dir(&mut self, from: Option<&Hash>, to: &Hash, dir: &Path) -> Result<()> {
        let old = match from {
            Some(h) => get_tree(self.db, h)?.entries,
            None => vec![],
        };
        let new = get_tree(self.db, to)?.entries;
        let (mut i, mut j) = (0, 0);
        while i < old.len() || j < new.len() {
            let ord = match (old.get(i), new.get(j)) {
                (Some(a), Some(b)) => a.name.cmp(&b.name),
                (Some(_), None) => std::cmp::Ordering::Less,
                _ => std::cmp::Ordering::Greater,
            };
            match ord {
                std::cmp::Ordering::Less => {
                    self.whiteout(&dir.join(OsStr::from_bytes(&old[i].name)))?;
                    i += 1;
                }
                std::cmp::Ordering::Greater => {
                    let p = dir.join(OsStr::from_bytes(&new[j].name));
                    self.create(&p, &new[j])?;
                    if new[j].kind == Kind::Dir {
                        mark_opaque(&p)?;
                    }
                    j += 1;
                }
                std::cmp::Ordering::Equal => {
                    let (a, b) = (&old[i], &new[j]);
                    if a != b {
                        let p = dir.join(OsStr::from_bytes(&b.name));
                        if a.kind == Kind::Dir && b.kind == Kind::Dir {
                            // A merged directory: its own attributes, and what changed below.
                            fs::create_dir(&p).map_err(|err| Self::host_err(&p, err))?;
                            self.stats.dirs += 1;
                            if a.hash != b.hash {
                                let to = b.hash.ok_or_else(|| {
                                    Error::Internal("directory without tree".into())
                                })?;
                                self.diff_dir(a.hash.as_ref(), &to, &p)?;
                            }
                            self.finish(&p, b)?;
                        } else {
                            self.create(&p, b)?;
                            if b.kind == Kind::Dir {
                                mark_opaque(&p)?;
                            }
                        }
                    }
                    i += 1;
                    j += 1;
                }
            }
        }
        Ok(())
    }
}

/// Marks a directory of a layer as replacing whatever lies below it.
fn mark_opaque(p: &Path) -> Result<()> {
    // The directory's time was set when it was created; setting an xattr does not touch it.
    set_xattr(p, OPAQUE_XATTR, b"y").map_err(|e| Error::host(p.display(), e))
}

/// Removes a directory tree that may hold directories without write permission (an
/// overlay work dir, a layer with read-only directories).
pub fn remove_tree(p: &Path) -> io::Result<()> {
    match fs::remove_dir_all(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(_) => {
            make_writable(p);
            match fs::remove_dir_all(p) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                other => other,
            }
        }
    }
}

fn make_writable(p: &Path) {
    let Ok(m) = fs::symlink_metadata(p) else {
        return;
    };
    if !m.is_dir() {
        return;
    }
    let _ = fs::set_permissions(p, fs::Permissions::from_mode(0o700));
    if let Ok(rd) = fs::read_dir(p) {
        for e in rd.flatten() {
            make_writable(&e.path());
        }
    }
}
