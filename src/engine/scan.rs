//! Reading an upper directory with few system calls, for the ingest.
//!
//! A directory's entries come with their type from `getdents` (overlayfs requires an
//! upper file system that reports it), and metadata and attributes are read through a
//! descriptor that is open anyway (the directory being listed, the file being hashed).
//! So a regular file costs one path lookup (its `open`) instead of three (`lstat`,
//! `llistxattr`, `open`), and the lookups of files happen on the hashing threads.

use std::ffi::{CStr, CString};
use std::fs::{self, File};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::MetadataExt;

use crate::store::objects::Xattrs;

/// The xattr overlayfs marks a directory that replaces the lower one with (`userxattr`).
pub const OPAQUE_XATTR: &[u8] = b"user.overlay.opaque";
/// overlayfs's own attributes (`user.overlay.*` under `userxattr`): never the user's.
const OVERLAY_XATTR_PREFIX: &[u8] = b"user.overlay.";

/// What the ingest needs of an inode's metadata.
#[derive(Clone, Copy, Debug, Default)]
pub struct Meta {
    /// `st_mode`: type and permission bits.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime_ns: i64,
    pub rdev: u64,
    pub nlink: u64,
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    /// 512-byte blocks allocated (what a tree takes on disk: `tree_size`).
    pub blocks: u64,
    /// Changes with anything that changes the inode (content, attributes, links): with
    /// the inode number, size and mtime, how a kept upper's unchanged file is recognized.
    pub ctime_ns: i64,
}

impl Meta {
    pub fn of(m: &fs::Metadata) -> Meta {
        Meta {
            mode: m.mode(),
            uid: m.uid(),
            gid: m.gid(),
            mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
            rdev: m.rdev(),
            nlink: m.nlink(),
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            blocks: m.blocks(),
            ctime_ns: m.ctime() * 1_000_000_000 + m.ctime_nsec(),
        }
    }

    fn of_stat(st: &libc::stat) -> Meta {
        Meta {
            mode: st.st_mode,
            uid: st.st_uid,
            gid: st.st_gid,
            mtime_ns: st.st_mtime * 1_000_000_000 + st.st_mtime_nsec,
            rdev: st.st_rdev,
            nlink: st.st_nlink,
            dev: st.st_dev,
            ino: st.st_ino,
            size: st.st_size as u64,
            blocks: st.st_blocks as u64,
            ctime_ns: st.st_ctime * 1_000_000_000 + st.st_ctime_nsec,
        }
    }

    fn is(&self, kind: u32) -> bool {
        self.mode & libc::S_IFMT == kind
    }
    pub fn is_file(&self) -> bool {
        self.is(libc::S_IFREG)
    }
    pub fn is_dir(&self) -> bool {
        self.is(libc::S_IFDIR)
    }
    pub fn is_symlink(&self) -> bool {
        self.is(libc::S_IFLNK)
    }
    pub fn is_char_device(&self) -> bool {
        self.is(libc::S_IFCHR)
    }
    pub fn is_block_device(&self) -> bool {
        self.is(libc::S_IFBLK)
    }
    pub fn is_fifo(&self) -> bool {
        self.is(libc::S_IFIFO)
    }
    pub fn is_socket(&self) -> bool {
        self.is(libc::S_IFSOCK)
    }
}

pub use crate::relpath::{OpenDir, Rel, readlink_at};

/// The disk space (allocated blocks) of the tree at `path`, at any depth: an explicit
/// stack of directories named through [`Rel`], so neither the call stack nor a path
/// grows with the tree's depth (a run can leave an upper deeper than PATH_MAX). What
/// cannot be read counts as nothing: this is a figure for reports and budgets.
pub fn tree_size(path: &std::path::Path) -> u64 {
    let Ok(top) = fs::symlink_metadata(path) else {
        return 0;
    };
    let mut total = top.blocks() * 512;
    if !top.is_dir() {
        return total;
    }
    let Ok(root) = Rel::root(path) else {
        return total;
    };
    let mut pending = vec![root];
    while let Some(dir) = pending.pop() {
        let Ok(mut open) = OpenDir::open_at(&dir) else {
            continue;
        };
        let mut anchor = None;
        while let Ok(Some(e)) = open.next_entry() {
            let Ok(name) = CString::new(e.name.as_slice()) else {
                continue;
            };
            let Ok(meta) = lstat_at(&open.file, &name) else {
                continue;
            };
            total += meta.blocks * 512;
            if meta.is_dir()
                && let Ok(child) = dir.child(&mut anchor, &e.name)
            {
                pending.push(child);
            }
        }
    }
    total
}

/// `lstat` of `name` in the directory open as `dir` (no lookup of the directory's path).
pub fn lstat_at(dir: &File, name: &CStr) -> io::Result<Meta> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a valid descriptor, C string and stat buffer.
    let r = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstatat filled it.
    let st = unsafe { st.assume_init() };
    Ok(Meta::of_stat(&st))
}

/// `user.*` attributes of an open file or directory, minus overlayfs's own; and whether
/// overlayfs marked it opaque.
pub fn user_xattrs_fd(fd: RawFd) -> (Xattrs, bool) {
    user_xattrs(
        // SAFETY (both): a valid descriptor, C strings and buffers of the given lengths.
        |buf| unsafe { libc::flistxattr(fd, buf.as_mut_ptr().cast(), buf.len()) },
        |name, buf| unsafe {
            libc::fgetxattr(fd, name.as_ptr(), buf.as_mut_ptr().cast(), buf.len())
        },
    )
}

fn user_xattrs(
    list: impl Fn(&mut [u8]) -> isize,
    get: impl Fn(&CStr, &mut [u8]) -> isize,
) -> (Xattrs, bool) {
    let Some(names) = grow_read(1024, 4, |buf| list(buf)) else {
        return (vec![], false);
    };
    let mut out = Vec::new();
    let mut opaque = false;
    for name in names.split(|b| *b == 0).filter(|s| !s.is_empty()) {
        if !name.starts_with(b"user.") {
            continue;
        }
        let cname = CString::new(name).expect("xattr names have no NUL");
        let Some(value) = grow_read(256, 16, |buf| get(&cname, buf)) else {
            continue;
        };
        if name == OPAQUE_XATTR {
            opaque = value == b"y";
            continue;
        }
        if name.starts_with(OVERLAY_XATTR_PREFIX) {
            continue;
        }
        out.push((name.to_vec(), value));
    }
    out.sort();
    (out, opaque)
}

/// Calls `read` with a buffer grown by `factor` while it reports `ERANGE`; `None` on
/// another error.
fn grow_read(start: usize, factor: usize, read: impl Fn(&mut [u8]) -> isize) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; start];
    loop {
        let n = read(&mut buf);
        if n >= 0 {
            buf.truncate(n as usize);
            return Some(buf);
        }
        if io::Error::last_os_error().raw_os_error() == Some(libc::ERANGE) {
            let len = buf.len() * factor;
            buf.resize(len, 0);
            continue;
        }
        return None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::FromRawFd;

    /// A file at the bottom of a chain far deeper than PATH_MAX still counts: its blocks
    /// are reached through the chain's anchors, not a path.
    #[test]
    fn tree_size_counts_a_file_below_path_max() {
        let top = tempfile::tempdir().unwrap();
        let name = "d".repeat(200);
        let mut dir = File::open(top.path()).unwrap();
        for _ in 0..60 {
            let c = CString::new(name.as_str()).unwrap();
            // SAFETY: a valid descriptor and C string.
            assert_eq!(
                unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), 0o755) },
                0
            );
            // SAFETY: as above; the new descriptor is ours.
            let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), libc::O_DIRECTORY) };
            assert!(fd >= 0);
            // SAFETY: just opened, owned by nobody else.
            dir = unsafe { File::from_raw_fd(fd) };
        }
        // SAFETY: a valid descriptor and C string; the new descriptor is ours.
        let fd = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                c"f".as_ptr(),
                libc::O_CREAT | libc::O_WRONLY,
                0o644,
            )
        };
        assert!(fd >= 0);
        // SAFETY: just opened, owned by nobody else.
        let mut f = unsafe { File::from_raw_fd(fd) };
        std::io::Write::write_all(&mut f, &vec![7u8; 1 << 20]).unwrap();
        f.sync_all().unwrap();
        // 60 × 201 bytes of path: three times PATH_MAX.
        assert!(tree_size(top.path()) >= 1 << 20);
    }
}
