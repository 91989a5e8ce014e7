//! Detaching, in a mount namespace that outlives a run, the host mounts it copied and
//! must not hold: FUSE mounts above all.
//!
//! A new mount namespace starts as a copy of every mount of its parent. Where the host's
//! `/` is not a shared mount (containers, this project's CI), an unmount on the host does
//! not reach the copy, so the copy keeps the file system alive: a FUSE server whose mount
//! a person unmounted never hears the kernel let go and waits (`avfs unmount` timed out
//! after 30 s while a keeper of another workspace, even of another `$AVFS_HOME`, lived).
//! A keeper therefore detaches them when it starts and again whenever new ones show up
//! (on a host whose `/` is shared, later mounts propagate into its namespace).

use std::path::{Path, PathBuf};

/// One line of /proc/self/mountinfo, as far as unpinning needs it.
#[derive(Debug, PartialEq)]
pub struct MountLine {
    pub mountpoint: PathBuf,
    pub fstype: String,
}

/// Decodes the octal escapes (`\040` for a space, `\011`, `\012`, `\134`) mountinfo
/// writes in paths.
fn unescape(field: &str) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// Parses mountinfo text: field 5 is the mount point, the field after the ` - `
/// separator the file system type.
pub fn parse(text: &str) -> Vec<MountLine> {
    text.lines()
        .filter_map(|l| {
            let (head, tail) = l.split_once(" - ")?;
            let mountpoint = unescape(head.split(' ').nth(4)?);
            let fstype = tail.split(' ').next()?.to_string();
            Some(MountLine { mountpoint, fstype })
        })
        .collect()
}

/// Mounts whose copies pin something a person expects to go on unmount: FUSE ones
/// (`fuse`, `fuse.sshfs`, `fuseblk`), whose servers wait for the last reference.
fn pins(fstype: &str) -> bool {
    fstype == "fuse" || fstype == "fuseblk" || fstype.starts_with("fuse.")
}

/// The mount points to detach: pinning mounts, except `/` and those that hold a path in
/// `needed` (the namespace cannot work without them), and except those below one already
/// on the list (detaching a mount takes what is mounted below it along).
pub fn to_detach(lines: &[MountLine], needed: &[&Path]) -> Vec<PathBuf> {
    let mut points: Vec<&Path> = lines
        .iter()
        .filter(|m| pins(&m.fstype))
        .map(|m| m.mountpoint.as_path())
        .filter(|p| *p != Path::new("/") && !needed.iter().any(|n| n.starts_with(p)))
        .collect();
    points.sort();
    points.dedup();
    let mut out: Vec<PathBuf> = vec![];
    for p in points {
        if !out.iter().any(|o| p.starts_with(o)) {
            out.push(p.to_path_buf());
        }
    }
    out
}

/// Detaches (lazily: nothing waits for a busy or dead server) every pinning mount of this
/// process's mount namespace but the ones `needed` lies on. Returns how many it detached.
/// Call it only in a namespace of one's own: on the host it would unmount them.
pub fn detach_pinning_mounts(needed: &[&Path]) -> usize {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return 0;
    };
    let mut n = 0;
    for p in to_detach(&parse(&text), needed) {
        let Ok(c) = super::sys::cstr(&p) else {
            continue;
        };
        // SAFETY: a valid NUL-terminated path; affects this namespace only.
        if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
            n += 1;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
30 25 0:27 / /dev/shm rw,relatime - tmpfs tmpfs rw
90 27 0:50 / /tmp/a\\040b/mnt rw,nosuid,nodev,relatime - fuse.avfs avfs:t rw,user_id=0
91 90 0:51 / /tmp/a\\040b/mnt/inner rw - fuse.sshfs x rw
92 27 0:52 / /home/u/.avfs/ws/mnt rw - fuse.avfs avfs:h rw
93 27 0:53 / /media/disk rw - fuseblk /dev/sdb1 rw
94 27 0:54 / /srv/fusefs rw - fuse x rw
95 27 0:55 / /srv/over rw - overlay overlay rw
";

    #[test]
    fn fuse_mounts_are_detached_except_what_is_needed_and_what_goes_with_a_parent() {
        let lines = parse(INFO);
        assert_eq!(lines[2].mountpoint, Path::new("/tmp/a b/mnt"));
        assert_eq!(lines[2].fstype, "fuse.avfs");
        let needed = [Path::new("/home/u/.avfs/ws/mnt/kept/upper")];
        assert_eq!(
            to_detach(&lines, &needed),
            vec![
                PathBuf::from("/media/disk"),
                PathBuf::from("/srv/fusefs"),
                PathBuf::from("/tmp/a b/mnt"),
            ]
        );
    }

    #[test]
    fn escapes_are_decoded() {
        assert_eq!(unescape("/a\\011b\\134c\\012"), Path::new("/a\tb\\c\n"));
        assert_eq!(unescape("/trailing\\04"), Path::new("/trailing\\04"));
    }
}
