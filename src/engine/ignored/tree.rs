//! The file-system steps of [`super::separate`] at any depth: every entry of the run's
//! upper, of the ignored directory and of the lowers is reached through a [`Rel`] (a
//! short path below an open directory), and every walk keeps its own stack, so neither a
//! path nor the call stack grows with the depth of the tree (a run can make a tree far
//! deeper than PATH_MAX, and the rules must hold at its bottom too).

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

use super::IgnoredCount;
use crate::engine::scan::{self, Meta, OpenDir, Rel};
use crate::error::{Error, Result};
/// Removal and listing at any depth are the leaf `relpath`'s (the engine's other
/// removals use them too).
pub(super) use crate::relpath::{
    names, remove_tree as remove, remove_tree_path as remove_path, unlink,
};

/// How an error names an entry: `root/rel`, shortened (`relpath::shortened`).
pub(super) fn shown(root: &Path, rel: &[u8]) -> String {
    let mut s = root.as_os_str().as_bytes().to_vec();
    if !rel.is_empty() {
        s.push(b'/');
        s.extend_from_slice(rel);
    }
    String::from_utf8_lossy(&crate::relpath::shortened(s)).into_owned()
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn not_found(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound
}

/// `lstat` of what `at` names.
pub(super) fn lstat(at: &Rel) -> io::Result<Meta> {
    scan::lstat_at(&at.base, &at.path)
}

/// `lstat`, `None` when nothing is there (or a component on the way is no directory).
pub(super) fn lstat_opt(at: &Rel) -> io::Result<Option<Meta>> {
    match lstat(at) {
        Ok(m) => Ok(Some(m)),
        Err(e) if not_found(&e) || e.raw_os_error() == Some(libc::ENOTDIR) => Ok(None),
        Err(e) => Err(e),
    }
}

/// overlayfs's mark of a deletion: a character device 0/0.
pub(super) fn is_whiteout(m: &Meta) -> bool {
    m.is_char_device() && m.rdev == 0
}

/// Does overlayfs mark the directory `at` names opaque?
pub(super) fn is_opaque(at: &Rel) -> bool {
    let p = at.proc_path();
    let cn = CString::new(scan::OPAQUE_XATTR).expect("no NUL");
    let mut buf = [0u8; 8];
    // SAFETY: valid C strings and a buffer of the given length.
    let n = unsafe { libc::lgetxattr(p.as_ptr(), cn.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    n == 1 && buf[0] == b'y'
}

/// The bytes of the regular file `at` names (never through a symlink).
pub(super) fn read_file(at: &Rel) -> Option<Vec<u8>> {
    let mut f = at.open_file().ok()?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf).ok()?;
    Some(buf)
}

pub(super) fn mkdir(at: &Rel) -> io::Result<()> {
    // SAFETY: a valid descriptor and C string.
    check(unsafe { libc::mkdirat(at.fd(), at.path.as_ptr(), 0o700) })
}

/// Gives what `at` names the permission bits and owner in `m` (as far as it may).
pub(super) fn set_attrs(at: &Rel, m: &Meta) {
    // SAFETY (both): a valid descriptor and C string.
    unsafe {
        libc::fchownat(
            at.fd(),
            at.path.as_ptr(),
            m.uid,
            m.gid,
            libc::AT_SYMLINK_NOFOLLOW,
        );
        libc::fchmodat(at.fd(), at.path.as_ptr(), m.mode & 0o7777, 0);
    }
}

#[cfg(test)]
fn chmod(at: &Rel, mode: u32) -> io::Result<()> {
    // SAFETY: a valid descriptor and C string.
    check(unsafe { libc::fchmodat(at.fd(), at.path.as_ptr(), mode, 0) })
}

fn rename(from: &Rel, to: &Rel) -> io::Result<()> {
    // SAFETY: valid descriptors and C strings.
    check(unsafe { libc::renameat(from.fd(), from.path.as_ptr(), to.fd(), to.path.as_ptr()) })
}

/// Counts the regular files below what `at` names (or it itself) and their bytes.
pub(super) fn measure(at: &Rel) -> IgnoredCount {
    let mut c = IgnoredCount::default();
    let Ok(m) = lstat(at) else {
        return c;
    };
    if m.is_file() {
        c.files += 1;
        c.bytes += m.size;
    }
    if !m.is_dir() {
        return c;
    }
    let mut pending = vec![at.clone()];
    while let Some(dir) = pending.pop() {
        let Ok(mut od) = OpenDir::open_at(&dir) else {
            continue;
        };
        let mut anchor = None;
        while let Ok(Some(e)) = od.next_entry() {
            let Ok(name) = CString::new(e.name.as_slice()) else {
                continue;
            };
            let Ok(m) = scan::lstat_at(&od.file, &name) else {
                continue;
            };
            if m.is_file() {
                c.files += 1;
                c.bytes += m.size;
            } else if m.is_dir()
                && let Ok(child) = dir.child(&mut anchor, &e.name)
            {
                pending.push(child);
            }
        }
    }
    c
}

/// A directory moved out of an upper keeps no overlay marks: no opaque attribute, no
/// whiteouts (what they hid is not below the ignored directory). At any depth; what
/// cannot be read is left as it is (a mark left behind hides nothing there).
fn strip_overlay_marks(at: &Rel) {
    let cn = CString::new(scan::OPAQUE_XATTR).expect("no NUL");
    let mut pending = vec![at.clone()];
    while let Some(dir) = pending.pop() {
        let Ok(mut od) = OpenDir::open_at(&dir) else {
            continue;
        };
        // SAFETY: a valid descriptor and C string; a missing attribute is fine.
        unsafe { libc::fremovexattr(std::os::fd::AsRawFd::as_raw_fd(&od.file), cn.as_ptr()) };
        let mut anchor = None;
        while let Ok(Some(e)) = od.next_entry() {
            let Ok(name) = CString::new(e.name.as_slice()) else {
                continue;
            };
            match scan::lstat_at(&od.file, &name) {
                Ok(m) if m.is_dir() => {
                    if let Ok(child) = dir.child(&mut anchor, &e.name) {
                        pending.push(child);
                    }
                }
                Ok(m) if is_whiteout(&m) => {
                    // SAFETY: a valid descriptor and C string.
                    unsafe {
                        libc::unlinkat(std::os::fd::AsRawFd::as_raw_fd(&od.file), name.as_ptr(), 0)
                    };
                }
                _ => {}
            }
        }
    }
}

/// Puts `src` (of the upper) in the place of `dst` (of the ignored directory): whatever
/// was at `dst` goes, `src` is renamed there and loses its overlay marks.
fn replace(src: &Rel, dst: &Rel, is_dir: bool, dst_there: bool) -> io::Result<()> {
    if dst_there {
        remove(dst)?;
    }
    rename(src, dst)?;
    if is_dir {
        strip_overlay_marks(dst);
    }
    Ok(())
}

/// Moves `src` (of the upper) to `dst` (of the ignored directory): a directory already
/// there takes the upper's entries one by one (the upper holds only what the run
/// changed), unless the upper's is opaque (it replaces the old one whole). `name` is how
/// an error names `dst`.
pub(super) fn move_into(src: &Rel, dst: &Rel, name: &str) -> Result<()> {
    // The path below `dst` being worked on, for errors.
    let mut trail: Vec<u8> = Vec::new();
    let err = |trail: &[u8], e: io::Error| {
        let what = if trail.is_empty() {
            name.to_string()
        } else {
            shown(Path::new(name), trail)
        };
        Error::host(what, e)
    };
    let sm = lstat(src).map_err(|e| err(&[], e))?;
    let dm = lstat_opt(dst).map_err(|e| err(&[], e))?;
    if !(sm.is_dir() && dm.is_some_and(|m| m.is_dir()) && !is_opaque(src)) {
        return replace(src, dst, sm.is_dir(), dm.is_some()).map_err(|e| err(&[], e));
    }
    struct Merge {
        src: Rel,
        src_anchor: Option<Arc<File>>,
        dst: Rel,
        dst_anchor: Option<Arc<File>>,
        meta: Meta,
        names: Vec<Vec<u8>>,
        trail_len: usize,
    }
    let open = |src: Rel, dst: Rel, meta: Meta, trail: &[u8]| -> Result<Merge> {
        Ok(Merge {
            names: names(&src).map_err(|e| err(trail, e))?,
            src,
            src_anchor: None,
            dst,
            dst_anchor: None,
            meta,
            trail_len: trail.len(),
        })
    };
    let mut stack = vec![open(src.clone(), dst.clone(), sm, &trail)?];
    while let Some(top) = stack.last_mut() {
        trail.truncate(top.trail_len);
        let Some(n) = top.names.pop() else {
            // Everything moved: the directory takes the upper's permissions, and what
            // is left of the upper's copy goes.
            let done = stack.pop().expect("a top");
            set_attrs(&done.dst, &done.meta);
            remove(&done.src).map_err(|e| err(&trail, e))?;
            continue;
        };
        if !trail.is_empty() {
            trail.push(b'/');
        }
        trail.extend_from_slice(&n);
        let s = top
            .src
            .child(&mut top.src_anchor, &n)
            .map_err(|e| err(&trail, e))?;
        let d = top
            .dst
            .child(&mut top.dst_anchor, &n)
            .map_err(|e| err(&trail, e))?;
        let m = lstat(&s).map_err(|e| err(&trail, e))?;
        let dm = lstat_opt(&d).map_err(|e| err(&trail, e))?;
        if is_whiteout(&m) {
            remove(&d).map_err(|e| err(&trail, e))?;
            continue;
        }
        if m.is_dir() && dm.is_some_and(|m| m.is_dir()) && !is_opaque(&s) {
            let next = open(s, d, m, &trail)?;
            stack.push(next);
            continue;
        }
        replace(&s, &d, m.is_dir(), dm.is_some()).map_err(|e| err(&trail, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEPTH: usize = 3_000;

    /// Makes `DEPTH` directories `d` below `top` (no path longer than a name) and
    /// `files` at the bottom; returns the bottom's Rel.
    fn chain(top: &Path, files: &[(&str, &str)]) -> Rel {
        let root = Rel::root(top).unwrap();
        let mut at = root;
        let mut anchor = None;
        for _ in 0..DEPTH {
            let d = at.child(&mut anchor, b"d").unwrap();
            mkdir(&d).unwrap();
            at = d;
            anchor = None;
        }
        for (name, text) in files {
            let f = at.child(&mut anchor, name.as_bytes()).unwrap();
            let p = f.proc_path();
            std::fs::write(std::ffi::OsStr::from_bytes(p.as_bytes()), text).unwrap();
        }
        at
    }

    fn at_bottom(top: &Path, name: &str) -> Rel {
        let mut at = Rel::root(top).unwrap();
        let mut anchor = None;
        for _ in 0..DEPTH {
            at = at.child(&mut anchor, b"d").unwrap();
            anchor = None;
        }
        at.child(&mut anchor, name.as_bytes()).unwrap()
    }

    #[test]
    fn measure_move_and_remove_reach_below_path_max() {
        let t = tempfile::tempdir().unwrap();
        let (a, b) = (t.path().join("a"), t.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        chain(&a, &[("x", "12345"), ("y", "1")]);
        chain(&b, &[("old", "o"), ("y", "stale")]);
        // 3 000 × 2 bytes: past PATH_MAX.
        let c = measure(&Rel::root(&a).unwrap());
        assert_eq!(c, IgnoredCount { files: 2, bytes: 6 });

        // `b` already has the chain: the entries merge into it one by one, and the
        // upper's copy of the chain goes.
        let src = Rel::root(t.path()).unwrap().child(&mut None, b"a").unwrap();
        let dst = Rel::root(t.path()).unwrap().child(&mut None, b"b").unwrap();
        move_into(&src, &dst, "b").unwrap();
        assert!(!a.exists());
        assert_eq!(read_file(&at_bottom(&b, "x")).unwrap(), b"12345");
        assert_eq!(read_file(&at_bottom(&b, "y")).unwrap(), b"1");
        assert_eq!(read_file(&at_bottom(&b, "old")).unwrap(), b"o");

        // Read-only directories on the way do not stop the removal.
        chmod(&at_bottom(&b, "x"), 0o444).unwrap();
        let bottom_dir = {
            let mut at = Rel::root(&b).unwrap();
            let mut anchor = None;
            for _ in 0..DEPTH {
                at = at.child(&mut anchor, b"d").unwrap();
                anchor = None;
            }
            at
        };
        chmod(&bottom_dir, 0o555).unwrap();
        remove_path(&b).unwrap();
        assert!(!b.exists());
        remove_path(&b).unwrap();
    }

    #[test]
    fn long_paths_are_shown_shortened() {
        let rel = "d/".repeat(5_000);
        let s = shown(Path::new("/home/ignored"), rel.as_bytes());
        assert!(s.len() < 400, "{s}");
        assert!(s.starts_with("/home/ignored/d/d"), "{s}");
        assert!(s.contains("bytes)"), "{s}");
        assert_eq!(shown(Path::new("/r"), b"a/b"), "/r/a/b");
    }
}
