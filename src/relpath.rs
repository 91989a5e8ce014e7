//! Naming entries of a tree at any depth without a path longer than PATH_MAX: a path of
//! bounded length relative to an open directory (an anchor), as the `*at` system calls
//! take it. The walks over host trees (the ingest of an overlay's upper, the layers
//! written for a run, import and export) go through it, so a tree as deep as a run or a
//! person made it is read and written like any other.

use std::ffi::{CStr, CString};
use std::fs::{self, File};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
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
