//! Naming entries of a tree at any depth without a path longer than PATH_MAX: a path of
//! bounded length relative to an open directory (an anchor), as the `*at` system calls
//! take it. The walks over host trees (the ingest of an overlay's upper, the layers
//! written for a run, import and export) go through it, so a tree as deep as a run or a
//! person made it is read, written and removed like any other.

use std::ffi::{CStr, CString};
use std::fs::{self, File};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;

/// Longest path a [`Rel`] holds below its base: far under PATH_MAX (4 096), so that no
/// lookup of the walk is refused however deep the tree is.
const REL_MAX: usize = 512;

/// An entry of a tree being walked, named relative to an open directory: a path of at
/// most `REL_MAX` bytes below `base`. Directories deeper than that are reached from a
/// descriptor of a directory on the way (an anchor), so depth never needs a path longer
/// than PATH_MAX and only one descriptor per `REL_MAX` bytes of depth stays open.
#[derive(Clone)]
pub struct Rel {
    pub base: Arc<File>,
    pub path: CString,
}

/// `Rel::path` of a walk's root: the base directory itself.
pub const HERE: &CStr = c".";

impl Rel {
    /// The root of a walk: the directory at `path` itself, or where it points when it
    /// is a symlink (a directory named on the command line).
    pub fn root_following(path: &Path) -> io::Result<Rel> {
        let file = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(path)?;
        Ok(Rel {
            base: Arc::new(file),
            path: HERE.to_owned(),
        })
    }

    /// The root of a walk: the directory at `path` itself.
    pub fn root(path: &Path) -> io::Result<Rel> {
        let file = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)?;
        Ok(Rel {
            base: Arc::new(file),
            path: HERE.to_owned(),
        })
    }

    /// Entry `name` of the directory this names; `anchor` holds that directory's
    /// descriptor once a child needed it as its base (it is opened then).
    pub fn child(&self, anchor: &mut Option<Arc<File>>, name: &[u8]) -> io::Result<Rel> {
        let here = self.path.as_bytes();
        if here == b"." {
            return Ok(Rel {
                base: self.base.clone(),
                path: CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?,
            });
        }
        if here.len() + 1 + name.len() <= REL_MAX {
            let mut p = Vec::with_capacity(here.len() + 1 + name.len());
            p.extend_from_slice(here);
            p.push(b'/');
            p.extend_from_slice(name);
            return Ok(Rel {
                base: self.base.clone(),
                path: CString::new(p).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?,
            });
        }
        let base = match anchor {
            Some(a) => a.clone(),
            None => anchor
                .insert(Arc::new(self.open(libc::O_DIRECTORY)?))
                .clone(),
        };
        Ok(Rel {
            base,
            path: CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?,
        })
    }

    /// Opens what this names (read-only, never through a symlink) with more `flags`.
    pub fn open(&self, flags: libc::c_int) -> io::Result<File> {
        // SAFETY: a valid descriptor and C string; the new descriptor is ours.
        let fd = unsafe {
            libc::openat(
                self.base.as_raw_fd(),
                self.path.as_ptr(),
                flags | libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and is owned by nobody else.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// Opens the regular file this names for reading, never through a symlink.
    pub fn open_file(&self) -> io::Result<File> {
        self.open(0)
    }

    /// The base's descriptor, for `*at` calls with `path`.
    pub fn fd(&self) -> RawFd {
        self.base.as_raw_fd()
    }

    /// A path naming this entry (its last component not followed by the `l*` calls) that
    /// stays short at any depth: through `/proc/self/fd`, for calls with no `*at` form
    /// (`lsetxattr`).
    pub fn proc_path(&self) -> CString {
        let mut p = format!("/proc/self/fd/{}/", self.fd()).into_bytes();
        p.extend_from_slice(self.path.as_bytes());
        CString::new(p).expect("no NUL in a Rel path")
    }
}

/// The target of the symlink `name` in the directory open as `dir`.
/// A host path as an error names it: its middle left out when it is too long to read (a
/// path deeper than PATH_MAX is tens of kilobytes of `d/d/d`).
pub fn shortened(path: Vec<u8>) -> Vec<u8> {
    const HEAD: usize = 120;
    const TAIL: usize = 200;
    if path.len() <= HEAD + TAIL + 40 {
        return path;
    }
    let left = path.len() - HEAD - TAIL;
    let mut t = path[..HEAD].to_vec();
    t.extend_from_slice(format!("…({left} bytes)…").as_bytes());
    t.extend_from_slice(&path[path.len() - TAIL..]);
    t
}

pub fn readlink_at(dir: &File, name: &CStr) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; 256];
    loop {
        // SAFETY: a valid descriptor, C string and buffer of the given length.
        let n = unsafe {
            libc::readlinkat(
                dir.as_raw_fd(),
                name.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if (n as usize) < buf.len() {
            buf.truncate(n as usize);
            return Ok(buf);
        }
        let len = buf.len() * 4;
        buf.resize(len, 0);
    }
}

/// A directory open for listing: its descriptor (for metadata, attributes and `*at`
/// calls) and its entries.
pub struct OpenDir {
    pub file: File,
    stream: *mut libc::DIR,
}

/// One directory entry: its name and `d_type` (`DT_UNKNOWN` when the file system does
/// not say).
pub struct DirEntry {
    pub name: Vec<u8>,
    pub d_type: u8,
}

impl OpenDir {
    /// Opens the directory `at` names for listing, never through a symlink.
    pub fn open_at(at: &Rel) -> io::Result<OpenDir> {
        OpenDir::from_file(at.open(libc::O_DIRECTORY)?)
    }

    pub fn from_file(file: File) -> io::Result<OpenDir> {
        // The stream owns (and closes) a duplicate; `file` stays usable.
        // SAFETY: a valid descriptor.
        let dup = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
        if dup < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `dup` is ours; on success the stream owns it.
        let stream = unsafe { libc::fdopendir(dup) };
        if stream.is_null() {
            let e = io::Error::last_os_error();
            // SAFETY: fdopendir failed, so `dup` is still ours to close.
            drop(unsafe { File::from_raw_fd(dup) });
            return Err(e);
        }
        Ok(OpenDir { file, stream })
    }

    /// The next entry (not `.` or `..`), `None` at the end.
    pub fn next_entry(&mut self) -> io::Result<Option<DirEntry>> {
        loop {
            // SAFETY: readdir reports errors through errno only when it returns null.
            unsafe { *libc::__errno_location() = 0 };
            // SAFETY: a valid stream, used by this thread only.
            let d = unsafe { libc::readdir64(self.stream) };
            if d.is_null() {
                let e = io::Error::last_os_error();
                return if e.raw_os_error().unwrap_or(0) == 0 {
                    Ok(None)
                } else {
                    Err(e)
                };
            }
            // SAFETY: readdir returned a valid entry with a NUL-terminated name.
            let (name, d_type) =
                unsafe { (CStr::from_ptr((*d).d_name.as_ptr()).to_bytes(), (*d).d_type) };
            if name == b"." || name == b".." {
                continue;
            }
            return Ok(Some(DirEntry {
                name: name.to_vec(),
                d_type,
            }));
        }
    }
}

impl Drop for OpenDir {
    fn drop(&mut self) {
        // SAFETY: the stream is valid and closed once.
        unsafe { libc::closedir(self.stream) };
    }
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `st_mode` of what `at` names (not followed), `None` when nothing is there (or a
/// component on the way is no directory).
fn lstat_mode(at: &Rel) -> io::Result<Option<u32>> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a valid descriptor, C string and stat buffer.
    let r = unsafe {
        libc::fstatat(
            at.fd(),
            at.path.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOENT | libc::ENOTDIR) => Ok(None),
            _ => Err(e),
        };
    }
    // SAFETY: fstatat filled it.
    Ok(Some(unsafe { st.assume_init() }.st_mode))
}

fn is_dir(mode: u32) -> bool {
    mode & libc::S_IFMT == libc::S_IFDIR
}

/// Removes the entry `at` names (`dir`: an empty directory).
pub fn unlink(at: &Rel, dir: bool) -> io::Result<()> {
    let flags = if dir { libc::AT_REMOVEDIR } else { 0 };
    // SAFETY: a valid descriptor and C string.
    check(unsafe { libc::unlinkat(at.fd(), at.path.as_ptr(), flags) })
}

/// The names in the directory `at` names, sorted, the first last (for `pop`). The
/// directory is closed again: a walk keeps no descriptor per level it is down.
pub fn names(at: &Rel) -> io::Result<Vec<Vec<u8>>> {
    let mut od = OpenDir::open_at(at)?;
    let mut out = Vec::new();
    while let Some(e) = od.next_entry()? {
        out.push(e.name);
    }
    out.sort_unstable_by(|a, b| b.cmp(a));
    Ok(out)
}

/// Removes what `at` names, a whole tree at any depth; nothing there is fine. The walk
/// keeps its own stack and names every entry through a [`Rel`], so neither the call
/// stack nor a path grows with the depth, and only one descriptor per `REL_MAX` bytes of
/// depth stays open (std's `remove_dir_all` keeps one per level, and runs out on a tree
/// a run can make). A directory that denies its owner writing or listing (a read-only
/// module cache, overlayfs's work directory) is given owner permissions first: it is
/// ours to remove.
pub fn remove_tree(at: &Rel) -> io::Result<()> {
    let Some(mode) = lstat_mode(at)? else {
        return Ok(());
    };
    if !is_dir(mode) {
        return unlink(at, false);
    }
    struct Dir {
        rel: Rel,
        anchor: Option<Arc<File>>,
        names: Vec<Vec<u8>>,
    }
    // A directory is made the owner's to list, search and empty before it is read.
    let open = |rel: Rel, mode: u32| -> io::Result<Dir> {
        if mode & 0o700 != 0o700 {
            // As far as it may: when it cannot, listing or emptying it says why.
            // SAFETY: a valid descriptor and C string.
            unsafe { libc::fchmodat(rel.fd(), rel.path.as_ptr(), 0o700, 0) };
        }
        Ok(Dir {
            names: names(&rel)?,
            rel,
            anchor: None,
        })
    };
    let mut stack = vec![open(at.clone(), mode)?];
    while let Some(top) = stack.last_mut() {
        let Some(name) = top.names.pop() else {
            let Dir { rel, anchor, .. } = stack.pop().expect("a top");
            drop(anchor);
            unlink(&rel, true)?;
            continue;
        };
        let c = top.rel.child(&mut top.anchor, &name)?;
        match lstat_mode(&c)? {
            Some(m) if is_dir(m) => {
                let d = open(c, m)?;
                stack.push(d);
            }
            Some(_) => unlink(&c, false)?,
            None => {}
        }
    }
    Ok(())
}

/// Removes the tree at `p` (any depth, see [`remove_tree`]); nothing there is fine. A
/// symlink at `p` is removed, not followed.
pub fn remove_tree_path(p: &Path) -> io::Result<()> {
    let (Some(parent), Some(name)) = (p.parent(), p.file_name()) else {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    };
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    let at = match Rel::root_following(parent) {
        Ok(r) => r,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    remove_tree(&at.child(&mut None, name.as_bytes())?)
}
