//! Thin wrappers over the mount and namespace system calls a run's set-up makes. Each
//! returns the OS error with a short description of what failed, because a failed
//! set-up is reported to the user as "the sandbox could not start: ...".

use std::ffi::CString;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

// From the kernel's uapi/linux/mount.h (not all are in the libc crate).
const FSOPEN_CLOEXEC: libc::c_uint = 1;
const FSCONFIG_SET_FLAG: libc::c_uint = 0;
const FSCONFIG_SET_STRING: libc::c_uint = 1;
const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
const FSMOUNT_CLOEXEC: libc::c_uint = 1;
pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const OPEN_TREE_CLONE: libc::c_uint = 1;
const AT_RECURSIVE: libc::c_uint = 0x8000;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// An error that says what was being done.
pub fn err(what: impl std::fmt::Display) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

pub fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn cstring(s: &str) -> io::Result<CString> {
    CString::new(s).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn fd_result(r: libc::c_long, what: impl std::fmt::Display) -> io::Result<OwnedFd> {
    if r < 0 {
        return Err(err(what));
    }
    // SAFETY: the kernel just returned this descriptor to us.
    Ok(unsafe { OwnedFd::from_raw_fd(r as i32) })
}

/// A detached overlayfs mount (not attached anywhere yet) over `lowers` (top first), with
/// `upper` and `work`, `nosuid,nodev`. `userxattr`: overlayfs keeps its own attributes in
/// `user.overlay.*` (what an unprivileged mount must do; the layer cache relies on it).
pub fn overlay(lowers: &[&Path], upper: &Path, work: &Path) -> io::Result<OwnedFd> {
    let name = cstring("overlay")?;
    // SAFETY: a valid C string; the result is checked.
    let fs = fd_result(
        unsafe { libc::syscall(libc::SYS_fsopen, name.as_ptr(), FSOPEN_CLOEXEC) },
        "fsopen(overlay)",
    )?;
    use std::os::fd::AsRawFd;
    let set = |key: &str, value: Option<&CString>| -> io::Result<()> {
        let k = cstring(key)?;
        let (cmd, v) = match value {
            Some(v) => (FSCONFIG_SET_STRING, v.as_ptr()),
            None => (FSCONFIG_SET_FLAG, std::ptr::null()),
        };
        // SAFETY: valid descriptor and C strings.
        let r = unsafe { libc::syscall(libc::SYS_fsconfig, fs.as_raw_fd(), cmd, k.as_ptr(), v, 0) };
        if r < 0 {
            return Err(err(format!("overlay option {key}")));
        }
        Ok(())
    };
    // One `lowerdir+` per layer (Linux 6.8): no limit on the option string's length.
    let mut appended = true;
    for l in lowers {
        if set("lowerdir+", Some(&cstr(l)?)).is_err() {
            appended = false;
            break;
        }
    }
    if !appended {
        let joined: Vec<String> = lowers
            .iter()
            .map(|l| {
                l.to_string_lossy()
                    .replace('\\', "\\\\")
                    .replace(':', "\\:")
            })
            .collect();
        set("lowerdir", Some(&cstring(&joined.join(":"))?))?;
    }
    set("upperdir", Some(&cstr(upper)?))?;
    set("workdir", Some(&cstr(work)?))?;
    set("userxattr", None)?;
    // SAFETY: valid descriptor; FSCONFIG_CMD_CREATE takes no key or value.
    let r = unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_void>(),
            0,
        )
    };
    if r < 0 {
        return Err(err("creating the overlay"));
    }
    // SAFETY: valid descriptor.
    fd_result(
        unsafe {
            libc::syscall(
                libc::SYS_fsmount,
                fs.as_raw_fd(),
                FSMOUNT_CLOEXEC,
                MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
            )
        },
        "fsmount(overlay)",
    )
}

/// A detached copy of the mount tree at `source` (a bind mount not attached anywhere),
/// made `nosuid,nodev`.
pub fn clone_tree(source: &Path) -> io::Result<OwnedFd> {
    clone_tree_with(source, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)
}

/// A detached copy of the mount tree at `source` with the mount attributes `attrs` set
/// on every mount of it.
pub fn clone_tree_with(source: &Path, attrs: u64) -> io::Result<OwnedFd> {
    let c = cstr(source)?;
    // SAFETY: valid C string; the result is checked.
    let fd = fd_result(
        unsafe {
            libc::syscall(
                libc::SYS_open_tree,
                libc::AT_FDCWD,
                c.as_ptr(),
                OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | AT_RECURSIVE,
            )
        },
        format!("open_tree({})", source.display()),
    )?;
    set_attrs(&fd, attrs, 0)?;
    Ok(fd)
}

/// Sets (and clears) mount attributes on a detached or attached mount, recursively.
pub fn set_attrs(fd: &OwnedFd, set: u64, clear: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let attr = MountAttr {
        attr_set: set,
        attr_clr: clear,
        propagation: 0,
        userns_fd: 0,
    };
    let empty = cstring("")?;
    // SAFETY: valid descriptor, an empty path with AT_EMPTY_PATH, and a mount_attr.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint | AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r < 0 {
        return Err(err("mount_setattr"));
    }
    Ok(())
}

/// Attaches a detached mount at `target`.
pub fn attach(fd: &OwnedFd, target: &Path) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let empty = cstring("")?;
    let t = cstr(target)?;
    // SAFETY: valid descriptor and C strings.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            fd.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if r < 0 {
        return Err(err(format!(
            "attaching the workspace at {}",
            target.display()
        )));
    }
    Ok(())
}

/// mount(2) with optional source, type and data.
pub fn mount(
    source: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> io::Result<()> {
    let s = source.map(cstr).transpose()?;
    let t = cstr(target)?;
    let f = fstype.map(cstring).transpose()?;
    let d = data.map(cstring).transpose()?;
    // SAFETY: valid (or null) C strings.
    let r = unsafe {
        libc::mount(
            s.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            t.as_ptr(),
            f.as_ref().map_or(std::ptr::null(), |f| f.as_ptr()),
            flags,
            d.as_ref()
                .map_or(std::ptr::null(), |d| d.as_ptr().cast::<libc::c_void>()),
        )
    };
    if r < 0 {
        return Err(err(format!("mount on {}", target.display())));
    }
    Ok(())
}

/// A fresh tmpfs at `target`.
pub fn tmpfs(target: &Path, mode: u32) -> io::Result<()> {
    mount(
        Some(Path::new("tmpfs")),
        target,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&format!("mode={mode:o}")),
    )
}

/// A fresh tmpfs at `target` of at most `bytes` bytes.
pub fn tmpfs_sized(target: &Path, mode: u32, bytes: u64) -> io::Result<()> {
    mount(
        Some(Path::new("tmpfs")),
        target,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&format!("mode={mode:o},size={bytes}")),
    )
}

/// Makes `new_root` (a mount point) this mount namespace's root; the old root is then
/// at `put_old` (below `new_root`).
pub fn pivot_root(new_root: &Path, put_old: &Path) -> io::Result<()> {
    let n = cstr(new_root)?;
    let o = cstr(put_old)?;
    // SAFETY: valid C strings; pivot_root changes only this mount namespace.
    if unsafe { libc::syscall(libc::SYS_pivot_root, n.as_ptr(), o.as_ptr()) } < 0 {
        return Err(err("pivot_root"));
    }
    Ok(())
}

/// Detaches the mount tree at `target` (lazily: it goes when no longer used).
pub fn umount_detach(target: &Path) -> io::Result<()> {
    let t = cstr(target)?;
    // SAFETY: a valid C string.
    if unsafe { libc::umount2(t.as_ptr(), libc::MNT_DETACH) } < 0 {
        return Err(err(format!("detaching {}", target.display())));
    }
    Ok(())
}

/// Makes the mount at `target` read-only (a bind remount keeps its other flags).
pub fn remount_ro(target: &Path) -> io::Result<()> {
    mount(
        None,
        target,
        None,
        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
        None,
    )
}

/// Binds `source` over `target` read-only.
pub fn bind_ro(source: &Path, target: &Path) -> io::Result<()> {
    mount(Some(source), target, None, libc::MS_BIND, None)?;
    remount_ro(target)
}

/// Moves this (single-threaded) process into the namespace `ns` refers to.
pub fn setns(ns: &std::fs::File, kind: libc::c_int) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid descriptor; setns only changes this process's namespaces.
    if unsafe { libc::setns(ns.as_raw_fd(), kind) } < 0 {
        return Err(err("setns"));
    }
    Ok(())
}

pub fn unshare(flags: libc::c_int) -> io::Result<()> {
    // SAFETY: unshare only changes this process's namespaces.
    if unsafe { libc::unshare(flags) } < 0 {
        return Err(err("unshare"));
    }
    Ok(())
}

/// Writes a /proc file of this process (uid_map and friends) in one write(2).
pub fn write_proc(path: &str, text: &str) -> io::Result<()> {
    std::fs::write(path, text).map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))
}

/// Brings the loopback interface of a new network namespace up.
pub fn loopback_up() -> io::Result<()> {
    // SAFETY: a datagram socket used for one ioctl, closed below.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return Err(err("socket"));
    }
    // SAFETY: we own `s`.
    let _guard = unsafe { OwnedFd::from_raw_fd(s) };
    // SAFETY: ifreq is plain data.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (i, b) in b"lo".iter().enumerate() {
        req.ifr_name[i] = *b as libc::c_char;
    }
    // SAFETY: valid socket and ifreq.
    if unsafe { libc::ioctl(s, libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(err("reading the loopback interface's flags"));
    }
    // SAFETY: the union's flags member, as SIOCGIFFLAGS filled it.
    unsafe {
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    }
    // SAFETY: valid socket and ifreq.
    if unsafe { libc::ioctl(s, libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(err("bringing the loopback interface up"));
    }
    Ok(())
}
