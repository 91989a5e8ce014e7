//! Writing stored trees out as overlayfs layers: a whole root (the bottom of a stack), or
//! the difference between two roots on top of the first one's stack (new and changed
//! entries written, deleted ones as whiteouts, replaced directories opaque).
//!
//! Works from immutable tree objects, never from a live layer, so it can run outside any
//! workspace transaction. Everything is created with `O_EXCL`/`O_NOFOLLOW` inside a fresh
//! directory that only this process writes.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::FromRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rusqlite::Connection;

use super::ingest::OPAQUE_XATTR;
use crate::error::{Error, Result};
use crate::relpath::Rel;
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

fn timespec(ns: i64) -> libc::timespec {
    libc::timespec {
        tv_sec: ns.div_euclid(1_000_000_000) as libc::time_t,
        tv_nsec: ns.rem_euclid(1_000_000_000) as libc::c_long,
    }
}

/// Sets the modification time of `p` itself (never through a symlink); atime too.
pub fn set_times(p: &Path, mtime_ns: i64) -> io::Result<()> {
    let c = cpath(p)?;
    let t = [timespec(mtime_ns), timespec(mtime_ns)];
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

/// What writing a layer still has to do (an explicit stack: no step recurses, however
/// deep the tree). A directory's `Finish` is pushed before its entries, so it runs after
/// them: its time is set once nothing more is written inside it.
enum Job {
    /// Create `entry` at `at` (in directory `dir` of `Writer::dirs`); `opaque`: mark
    /// the directory as replacing whatever lies below it.
    Create {
        at: Rel,
        dir: usize,
        entry: Entry,
        opaque: bool,
    },
    /// Owner, mode, attributes and time of an entry created at `at`.
    Finish { at: Rel, entry: Entry },
    /// Fill directory `at` (`dir`) with what differs between the trees `from` and `to`.
    Diff {
        from: Option<Hash>,
        to: Hash,
        at: Rel,
        dir: usize,
    },
}

/// Writes layers from one vault.
pub struct Writer<'a> {
    db: &'a Connection,
    /// Root may give files their recorded owners; others keep their own.
    root: bool,
    /// First place written for each link group of the tree being written.
    links: HashMap<u64, Rel>,
    /// Every name written for a link group (path below the layer's root), to complete
    /// groups a diff touched.
    linked: std::collections::HashSet<Vec<u8>>,
    /// The directories written: (the directory holding it, its name); 0 is the root.
    dirs: Vec<(usize, Vec<u8>)>,
    jobs: Vec<Job>,
    pub stats: Written,
}

fn at_err(at: &Rel, e: io::Error) -> Error {
    Error::host(
        format!(
            "layer entry {}",
            String::from_utf8_lossy(at.path.as_bytes())
        ),
        e,
    )
}

fn cname(name: &[u8]) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

impl<'a> Writer<'a> {
    pub fn new(db: &'a Connection) -> Writer<'a> {
        Writer {
            db,
            // SAFETY: geteuid has no preconditions.
            root: unsafe { libc::geteuid() } == 0,
            links: HashMap::new(),
            linked: std::collections::HashSet::new(),
            dirs: vec![(0, vec![])],
            jobs: vec![],
            stats: Written::default(),
        }
    }

    /// The path below the layer's root of entry `name` of directory `dir`.
    fn key(&self, dir: usize, name: &[u8]) -> Vec<u8> {
        let mut comps = vec![name];
        let mut i = dir;
        while i != 0 {
            comps.push(&self.dirs[i].1);
            i = self.dirs[i].0;
        }
        comps.reverse();
        comps.join(&b'/')
    }

    /// Owner, mode, xattrs and time of an entry already created at `at`.
    fn finish(&self, at: &Rel, e: &Entry) -> Result<()> {
        if self.root {
            // SAFETY: a valid descriptor and C string.
            check(unsafe {
                libc::fchownat(
                    at.fd(),
                    at.path.as_ptr(),
                    e.uid,
                    e.gid,
                    libc::AT_SYMLINK_NOFOLLOW,
                )
            })
            .map_err(|err| at_err(at, err))?;
        }
        if e.kind != Kind::Symlink {
            // After chown, which clears setuid bits. Without the setuid and setgid bits: a
            // layer is on the host's disk, where such a file would run as its owner for
            // whoever reaches it. A run sees a file the history holds as setuid without the
            // bits (the history keeps them).
            // SAFETY: a valid descriptor and C string.
            check(unsafe {
                libc::fchmodat(
                    at.fd(),
                    at.path.as_ptr(),
                    (e.mode & 0o1777) as libc::mode_t,
                    0,
                )
            })
            .map_err(|err| at_err(at, err))?;
            for (k, v) in &e.xattrs {
                // Only user.* attributes are stored; one a file system refuses is left out.
                let _ = set_xattr_c(&at.proc_path(), k, v);
            }
        }
        set_times_at(at, e.mtime_ns).map_err(|err| at_err(at, err))
    }

    fn write_file(&mut self, at: &Rel, e: &Entry) -> Result<()> {
        let hash = e
            .hash
            .ok_or_else(|| Error::Internal("file entry without content".into()))?;
        // SAFETY: a valid descriptor and C string; the new descriptor is ours.
        let fd = unsafe {
            libc::openat(
                at.fd(),
                at.path.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o600 as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(at_err(at, io::Error::last_os_error()));
        }
        // SAFETY: just opened, owned by nobody else.
        let f = unsafe { std::fs::File::from_raw_fd(fd) };
        if e.size > 0 {
            // Only the blocks that hold data are written; holes stay holes.
            crate::store::content::copy_to_file(self.db, &hash, e.size, &f).map_err(
                |err| match err {
                    Error::Host { message, .. } => Error::Host {
                        what: format!(
                            "layer entry {}",
                            String::from_utf8_lossy(at.path.as_bytes())
                        ),
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

    /// Runs the jobs until none is left.
    fn run(&mut self) -> Result<()> {
        while let Some(job) = self.jobs.pop() {
            match job {
                Job::Create {
                    at,
                    dir,
                    entry,
                    opaque,
                } => self.create(at, dir, entry, opaque)?,
                Job::Finish { at, entry } => self.finish(&at, &entry)?,
                Job::Diff { from, to, at, dir } => self.diff_dir(from.as_ref(), &to, &at, dir)?,
            }
        }
        Ok(())
    }

    /// Creates entry `e` at `at` (which does not exist); a directory's entries and its
    /// `Finish` become jobs.
    fn create(&mut self, at: Rel, dir: usize, e: Entry, opaque: bool) -> Result<()> {
        if e.link_group != 0
            && let Some(first) = self.links.get(&e.link_group)
        {
            // SAFETY: valid descriptors and C strings.
            check(unsafe {
                libc::linkat(
                    first.fd(),
                    first.path.as_ptr(),
                    at.fd(),
                    at.path.as_ptr(),
                    0,
                )
            })
            .map_err(|err| at_err(&at, err))?;
            self.linked.insert(self.key(dir, &e.name));
            return Ok(());
        }
        match e.kind {
            Kind::Dir => {
                self.mkdir(&at)?;
                if opaque {
                    mark_opaque(&at)?;
                }
                let here = self.dirs.len();
                self.dirs.push((dir, e.name.clone()));
                let tree = match e.hash {
                    Some(h) => get_tree(self.db, &h)?.entries,
                    None => vec![],
                };
                self.jobs.push(Job::Finish {
                    at: at.clone(),
                    entry: e,
                });
                let mut anchor = None;
                for child in tree.into_iter().rev() {
                    let c = at
                        .child(&mut anchor, &child.name)
                        .map_err(|err| at_err(&at, err))?;
                    self.jobs.push(Job::Create {
                        at: c,
                        dir: here,
                        entry: child,
                        opaque: false,
                    });
                }
                return Ok(());
            }
            Kind::File => self.write_file(&at, &e)?,
            Kind::Symlink => {
                let t = cname(e.target.as_deref().unwrap_or_default())
                    .map_err(|err| at_err(&at, err))?;
                // SAFETY: valid C strings and descriptor.
                check(unsafe { libc::symlinkat(t.as_ptr(), at.fd(), at.path.as_ptr()) })
                    .map_err(|err| at_err(&at, err))?;
            }
            Kind::Fifo => {
                mknod_at(&at, libc::S_IFIFO | 0o600, 0).map_err(|err| at_err(&at, err))?
            }
            Kind::Socket => {
                // A socket file cannot be recreated without binding one: an empty
                // placeholder of the same type is what a copy can do.
                mknod_at(&at, libc::S_IFSOCK | 0o600, 0).map_err(|err| at_err(&at, err))?
            }
            Kind::CharDev | Kind::BlockDev => {
                // Only root can make device nodes; a layer of another user leaves them out
                // (the run's mount is `nodev` anyway).
                if mknod_at(&at, e.kind.ifmt() | 0o600, e.rdev).is_err() {
                    return Ok(());
                }
            }
        }
        if e.link_group != 0 {
            self.linked.insert(self.key(dir, &e.name));
            self.links.insert(e.link_group, at.clone());
        }
        self.finish(&at, &e)
    }

    fn mkdir(&mut self, at: &Rel) -> Result<()> {
        // SAFETY: a valid descriptor and C string.
        check(unsafe { libc::mkdirat(at.fd(), at.path.as_ptr(), 0o700) })
            .map_err(|err| at_err(at, err))?;
        self.stats.dirs += 1;
        Ok(())
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
        let top = Rel::root(dir).map_err(|e| Error::host(dir.display(), e))?;
        let tree = get_tree(self.db, root)?;
        let mut anchor = None;
        for child in tree.entries.into_iter().rev() {
            let c = top
                .child(&mut anchor, &child.name)
                .map_err(|e| at_err(&top, e))?;
            self.jobs.push(Job::Create {
                at: c,
                dir: 0,
                entry: child,
                opaque: false,
            });
        }
        self.run()?;
        let a = self.root_attrs(root)?;
        self.finish(&top, &a.root_entry(None, false))
    }

    /// Writes into `dir` (an empty directory) what turns a view of `from` into a view of
    /// `to` when `dir` is stacked above it.
    pub fn diff(&mut self, from: &Hash, to: &Hash, dir: &Path) -> Result<()> {
        let top = Rel::root(dir).map_err(|e| Error::host(dir.display(), e))?;
        self.jobs.push(Job::Diff {
            from: Some(*from),
            to: *to,
            at: top.clone(),
            dir: 0,
        });
        self.run()?;
        self.complete_link_groups(to, &top)?;
        let a = self.root_attrs(to)?;
        self.finish(&top, &a.root_entry(None, false))
    }

    /// A link group the diff wrote one name of must be whole in this layer: its other
    /// names, unchanged and so not written, would otherwise show the lower layer's file,
    /// a different one. They are linked in here too, with the directories that hold them
    /// (merged directories: their attributes, nothing else), whose times are set again.
    fn complete_link_groups(&mut self, to: &Hash, top: &Rel) -> Result<()> {
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
        // (path below the root, where it is, its entry) of the directories on the way.
        let mut touched: Vec<(Vec<u8>, Rel, Entry)> = vec![];
        for (parents, e) in members {
            let mut at = top.clone();
            let mut key: Vec<u8> = vec![];
            for (name, d) in &parents {
                at = at.child(&mut None, name).map_err(|err| at_err(top, err))?;
                if !key.is_empty() {
                    key.push(b'/');
                }
                key.extend_from_slice(name);
                match lstat_rel(&at) {
                    Ok(()) => {}
                    Err(err) if err.kind() == io::ErrorKind::NotFound => self.mkdir(&at)?,
                    Err(err) => return Err(at_err(&at, err)),
                }
                touched.push((key.clone(), at.clone(), d.clone()));
            }
            let at = at
                .child(&mut None, &e.name)
                .map_err(|err| at_err(top, err))?;
            if !key.is_empty() {
                key.push(b'/');
            }
            key.extend_from_slice(&e.name);
            if self.linked.contains(&key) {
                continue;
            }
            let first = self.links[&e.link_group].clone();
            // SAFETY: valid descriptors and C strings.
            check(unsafe {
                libc::linkat(
                    first.fd(),
                    first.path.as_ptr(),
                    at.fd(),
                    at.path.as_ptr(),
                    0,
                )
            })
            .map_err(|err| at_err(&at, err))?;
            self.linked.insert(key);
        }
        // Deepest first: a directory's time is set after everything below it.
        let depth = |k: &[u8]| k.iter().filter(|b| **b == b'/').count();
        touched.sort_by(|a, b| (depth(&b.0), &b.0).cmp(&(depth(&a.0), &a.0)));
        touched.dedup_by(|a, b| a.0 == b.0);
        for (_, at, d) in touched {
            self.finish(&at, &d)?;
        }
        Ok(())
    }

    fn whiteout(&mut self, at: &Rel) -> Result<()> {
        mknod_at(at, libc::S_IFCHR, 0).map_err(|err| at_err(at, err))?;
        self.stats.whiteouts += 1;
        Ok(())
    }

    /// `at` (directory `dir`) exists in the layer; fills it with what differs between the
    /// trees (directories below become jobs).
    fn diff_dir(&mut self, from: Option<&Hash>, to: &Hash, at: &Rel, dir: usize) -> Result<()> {
        let old = match from {
            Some(h) => get_tree(self.db, h)?.entries,
            None => vec![],
        };
        let new = get_tree(self.db, to)?.entries;
        let mut anchor = None;
        let (mut i, mut j) = (0, 0);
        while i < old.len() || j < new.len() {
            let ord = match (old.get(i), new.get(j)) {
                (Some(a), Some(b)) => a.name.cmp(&b.name),
                (Some(_), None) => std::cmp::Ordering::Less,
                _ => std::cmp::Ordering::Greater,
            };
            match ord {
                std::cmp::Ordering::Less => {
                    let c = at
                        .child(&mut anchor, &old[i].name)
                        .map_err(|err| at_err(at, err))?;
                    self.whiteout(&c)?;
                    i += 1;
                }
                std::cmp::Ordering::Greater => {
                    let c = at
                        .child(&mut anchor, &new[j].name)
                        .map_err(|err| at_err(at, err))?;
                    let opaque = new[j].kind == Kind::Dir;
                    self.create(c, dir, new[j].clone(), opaque)?;
                    j += 1;
                }
                std::cmp::Ordering::Equal => {
                    let (a, b) = (&old[i], &new[j]);
                    if a != b {
                        let c = at
                            .child(&mut anchor, &b.name)
                            .map_err(|err| at_err(at, err))?;
                        if a.kind == Kind::Dir && b.kind == Kind::Dir {
                            // A merged directory: its own attributes, and what changed below.
                            self.mkdir(&c)?;
                            let here = self.dirs.len();
                            self.dirs.push((dir, b.name.clone()));
                            self.jobs.push(Job::Finish {
                                at: c.clone(),
                                entry: b.clone(),
                            });
                            if a.hash != b.hash {
                                let to = b.hash.ok_or_else(|| {
                                    Error::Internal("directory without tree".into())
                                })?;
                                self.jobs.push(Job::Diff {
                                    from: a.hash,
                                    to,
                                    at: c,
                                    dir: here,
                                });
                            }
                        } else {
                            let opaque = b.kind == Kind::Dir;
                            self.create(c, dir, b.clone(), opaque)?;
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

fn mknod_at(at: &Rel, mode: u32, rdev: u64) -> io::Result<()> {
    // SAFETY: a valid descriptor and C string; mknodat creates nothing but the node.
    check(unsafe {
        libc::mknodat(
            at.fd(),
            at.path.as_ptr(),
            mode as libc::mode_t,
            rdev as libc::dev_t,
        )
    })
}

fn lstat_rel(at: &Rel) -> io::Result<()> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a valid descriptor, C string and stat buffer.
    check(unsafe {
        libc::fstatat(
            at.fd(),
            at.path.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })
}

/// Sets the modification time (and atime) of what `at` names itself, never through a
/// symlink.
fn set_times_at(at: &Rel, mtime_ns: i64) -> io::Result<()> {
    let t = [timespec(mtime_ns), timespec(mtime_ns)];
    // SAFETY: a valid descriptor and C string; `t` holds two timespecs.
    check(unsafe {
        libc::utimensat(
            at.fd(),
            at.path.as_ptr(),
            t.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })
}

fn set_xattr_c(path: &CStr, name: &[u8], value: &[u8]) -> io::Result<()> {
    let n = cname(name)?;
    // SAFETY: valid C strings and a value buffer of the given length.
    let r = unsafe {
        libc::lsetxattr(
            path.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Marks a directory of a layer as replacing whatever lies below it.
fn mark_opaque(at: &Rel) -> Result<()> {
    // Setting an xattr does not touch the directory's time.
    set_xattr_c(&at.proc_path(), OPAQUE_XATTR, b"y").map_err(|e| at_err(at, e))
}

/// Removes a directory tree that may hold directories without write permission (an
/// overlay work dir, a layer with read-only directories), at any depth: through
/// [`crate::relpath::remove_tree`], which keeps its own stack and few descriptors (a run
/// can leave an upper deeper than PATH_MAX in a kept overlay). Nothing there is fine.
pub fn remove_tree(p: &Path) -> io::Result<()> {
    crate::relpath::remove_tree_path(p)
}
