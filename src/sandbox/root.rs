//! The file system tree of a confined run: a fresh tmpfs root that holds only what the
//! run may see, then `pivot_root` into it, as bubblewrap and container runtimes do.
//!
//! - the listed read paths, each a recursive bind made read-only, `nosuid` and `nodev`
//!   on every mount below it (`mount_setattr` with `AT_RECURSIVE`), so no chmod, chown,
//!   utimes, setxattr, link or write reaches a host file; a listed symlink is a symlink;
//! - the vault's writable package caches (`config::DEFAULT_WRITABLE_CACHES`);
//! - the workspace at its stable path;
//! - a private /tmp and /dev/shm (tmpfs of bounded size), a minimal /dev (null, zero,
//!   full, random, urandom, tty, ptmx, pts), /sys read-only and a /proc of the run's own
//!   (mounted by PID 1, which then detaches the host's tree).
//!
//! Nothing else of the host exists in the run: not /root, /home, /var, /run, nor their
//! Unix sockets. Every host path is cloned (`open_tree`) before the new root covers
//! anything, so it is the host's own path that is resolved; the tree is then assembled
//! after `pivot_root`, where symlinks resolve inside the new root.

use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::sys;

/// Where the host's tree stays until it is detached: by PID 1 once it has mounted its
/// /proc where the run is in a user namespace (a /proc mount there needs a fully visible
/// one in the mount namespace), else by the set-up before PID 1 starts.
pub const OLD_ROOT: &str = "/.avfs-host";

/// A cache of the vault, writable in the run at `path`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CacheMount {
    /// Where the run sees it (the tool's default place).
    pub path: PathBuf,
    /// The vault's own directory for it, and overlayfs's work directory beside it.
    pub upper: PathBuf,
    pub work: PathBuf,
    /// The host's directory at `path`, shown read-only below the vault's content.
    pub lower: Option<PathBuf>,
}

/// What the new root holds (paths as the run sees them, which are the host's).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RootPlan {
    /// Host paths shown read-only.
    pub visible: Vec<PathBuf>,
    pub caches: Vec<CacheMount>,
    /// Device files bound from the host's /dev.
    pub devices: Vec<PathBuf>,
    pub tmp_bytes: u64,
    pub shm_bytes: u64,
}

/// One piece of the new root, put in place in path order (parents first).
enum Piece {
    /// A detached mount; `dir`: a directory (else a file) is its mountpoint.
    Mount {
        fd: OwnedFd,
        dir: bool,
        writable: bool,
    },
    Symlink(PathBuf),
    /// The private /tmp.
    Tmp,
}

fn clone_ro(p: &Path) -> io::Result<OwnedFd> {
    let fd = sys::clone_tree(p)?;
    sys::set_attrs(
        &fd,
        sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV,
        0,
    )?;
    Ok(fd)
}

/// The detached mount of a package cache: the vault's directory over the host's.
pub fn cache_mount(c: &CacheMount) -> io::Result<OwnedFd> {
    // Where overlayfs cannot have the cache's directory as its upper ($AVFS_HOME on an
    // overlayfs itself, say), the run sees the vault's cache alone.
    match &c.lower {
        Some(lower) => sys::overlay(&[lower.as_path()], &c.upper, &c.work)
            .or_else(|_| sys::clone_tree(&c.upper)),
        None => sys::clone_tree(&c.upper),
    }
}

/// The pieces, taken from the host's tree as it is now; `premade`: cache mounts made
/// already (`cache_mount`), by where the run sees them.
fn take(
    plan: &RootPlan,
    mut premade: Vec<(PathBuf, OwnedFd)>,
) -> io::Result<Vec<(PathBuf, Piece)>> {
    let mut pieces = vec![(PathBuf::from("/tmp"), Piece::Tmp)];
    let mut visible = plan.visible.clone();
    visible.sort();
    // Directories cloned so far: a path below one (`/usr/lib` under `/usr`) is shown by
    // it and is not cloned at all. A clone that is never attached is dissolved when its
    // descriptor closes, and every dissolve waits for an RCU grace period (up to ~10 ms
    // on a busy machine) on the run's critical path.
    let mut dirs: Vec<&Path> = vec![];
    for p in &visible {
        if dirs.iter().any(|d| p.starts_with(d) && p != d) {
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(p) else {
            continue;
        };
        let piece = if meta.file_type().is_symlink() {
            Piece::Symlink(std::fs::read_link(p)?)
        } else {
            if meta.is_dir() {
                dirs.push(p);
            }
            Piece::Mount {
                fd: clone_ro(p)?,
                dir: meta.is_dir(),
                writable: false,
            }
        };
        pieces.push((p.clone(), piece));
    }
    for c in &plan.caches {
        let fd = match premade.iter().position(|(p, _)| *p == c.path) {
            Some(i) => premade.swap_remove(i).1,
            None => cache_mount(c)?,
        };
        pieces.push((
            c.path.clone(),
            Piece::Mount {
                fd,
                dir: true,
                writable: true,
            },
        ));
    }
    // Stable order, parents before children; a cache below a visible path after it.
    pieces.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(pieces)
}

fn mkdirs(p: &Path) -> io::Result<()> {
    std::fs::create_dir_all(p)
        .map_err(|e| io::Error::new(e.kind(), format!("creating {}: {e}", p.display())))
}

/// Puts one piece in place. A read-only path already shown by a visible directory above
/// it is skipped; a mountpoint that cannot be made (below a read-only path that lacks
/// it) leaves that piece out.
fn place(path: &Path, piece: Piece, shown: &mut Vec<PathBuf>, tmp_bytes: u64) -> io::Result<()> {
    let covered = shown.iter().any(|s| path.starts_with(s) && path != s);
    match piece {
        Piece::Tmp => {
            mkdirs(path)?;
            sys::tmpfs_sized(path, 0o1777, tmp_bytes)
        }
        Piece::Symlink(target) => {
            if covered {
                return Ok(());
            }
            if let Some(parent) = path.parent() {
                mkdirs(parent)?;
            }
            std::os::unix::fs::symlink(&target, path)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
        }
        Piece::Mount { fd, dir, writable } => {
            if covered && !writable {
                return Ok(());
            }
            let made = if dir {
                std::fs::create_dir_all(path)
            } else {
                path.parent()
                    .map_or(Ok(()), std::fs::create_dir_all)
                    .and_then(|_| {
                        std::fs::OpenOptions::new()
                            .write(true)
                            .create(true)
                            .truncate(false)
                            .open(path)
                            .map(drop)
                    })
            };
            if made.is_err() {
                return Ok(());
            }
            sys::attach(&fd, path)?;
            if dir && !writable {
                shown.push(path.to_path_buf());
            }
            Ok(())
        }
    }
}

/// A minimal /dev: the listed device files (bound from the host's), /dev/pts, the
/// standard symlinks and a private /dev/shm.
fn make_dev(devices: &[(PathBuf, OwnedFd, bool)], shm_bytes: u64) -> io::Result<()> {
    let dev = Path::new("/dev");
    mkdirs(dev)?;
    sys::mount(
        Some(Path::new("tmpfs")),
        dev,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("mode=755,size=64k"),
    )?;
    for (p, fd, dir) in devices {
        if *dir {
            mkdirs(p)?;
        } else {
            std::fs::File::create(p)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))?;
        }
        sys::attach(fd, p)?;
    }
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("core", "/proc/kcore"),
    ] {
        std::os::unix::fs::symlink(target, dev.join(name))?;
    }
    let shm = dev.join("shm");
    mkdirs(&shm)?;
    sys::tmpfs_sized(&shm, 0o1777, shm_bytes)?;
    // The device files stay writable (their own mounts); /dev itself does not.
    sys::remount_ro(dev)
}

/// Builds the new root and enters it. `workspace` is attached at `ws_path` (hidden
/// directories above it, `$AVFS_HOME` say, are empty tmpfs, read-only once it is in).
/// Afterwards the host's tree is at `OLD_ROOT` until `leave_host` detaches it.
pub fn enter(
    plan: &RootPlan,
    workspace: OwnedFd,
    ws_path: &Path,
    hidden_dirs: &[PathBuf],
    hidden_files: &[PathBuf],
    premade: Vec<(PathBuf, OwnedFd)>,
) -> io::Result<()> {
    let pieces = take(plan, premade)?;
    let mut devices = vec![];
    for d in &plan.devices {
        let Ok(meta) = std::fs::metadata(d) else {
            continue;
        };
        // Not nodev: these are the device files the run uses.
        let fd = sys::clone_tree_with(d, sys::MOUNT_ATTR_NOSUID)?;
        devices.push((d.clone(), fd, meta.is_dir()));
    }
    // The new root: an empty tmpfs, staged over /tmp (everything below it was taken).
    let staging = Path::new("/tmp");
    sys::mount(
        Some(Path::new("tmpfs")),
        staging,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some("mode=755,size=1m"),
    )?;
    let old = staging.join(OLD_ROOT.trim_start_matches('/'));
    mkdirs(&old)?;
    sys::pivot_root(staging, &old)?;
    std::env::set_current_dir("/")?;
    let mut shown = vec![];
    for (path, piece) in pieces {
        place(&path, piece, &mut shown, plan.tmp_bytes)?;
    }
    make_dev(&devices, plan.shm_bytes)?;
    mkdirs(Path::new("/proc"))?;
    let mut hidden = vec![];
    for d in hidden_dirs {
        if std::fs::symlink_metadata(d).is_ok_and(|m| m.is_dir()) {
            sys::tmpfs(d, 0o755)?;
            hidden.push(d);
        }
    }
    for f in hidden_files {
        if std::fs::symlink_metadata(f).is_ok_and(|m| !m.is_dir()) {
            sys::bind_ro(Path::new("/dev/null"), f)?;
        }
    }
    mkdirs(ws_path).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("the workspace path is inside a read-only host path: {e}"),
        )
    })?;
    sys::attach(&workspace, ws_path)?;
    for d in hidden {
        sys::remount_ro(d)?;
    }
    Ok(())
}

/// PID 1, once its /proc is mounted: detaches the host's tree and makes the root
/// read-only (only the mounts on it are writable).
pub fn leave_host() -> io::Result<()> {
    let old = Path::new(OLD_ROOT);
    sys::umount_detach(old)?;
    std::fs::remove_dir(old)
        .map_err(|e| io::Error::new(e.kind(), format!("removing {OLD_ROOT}: {e}")))?;
    sys::remount_ro(Path::new("/"))
}
