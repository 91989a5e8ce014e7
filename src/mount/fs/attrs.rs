//! File attributes: what the kernel is told about an inode (times, sizes, link counts),
//! and the changes it asks for (SETATTR: chmod, chown, truncate, utimens).

use super::*;

pub(super) fn ts(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

/// A time the kernel sent (SETATTR), in ns since the epoch. fuser 0.18 turns the kernel's
/// `(secs < 0, nsecs)` into `epoch - (|secs| s + nsecs ns)`, where the timespec means
/// `secs s + nsecs ns` (its own TODO says so): the nanoseconds are undone here, so
/// `touch -d '1969-12-31 23:43:20.000000005'` keeps its value.
pub(super) fn ns_of(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i64,
        Err(e) => {
            let d = e.duration();
            -(d.as_secs() as i64) * 1_000_000_000 + i64::from(d.subsec_nanos())
        }
    }
}

pub(super) fn file_type(k: Kind) -> FileType {
    match k {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
        Kind::Fifo => FileType::NamedPipe,
        Kind::Socket => FileType::Socket,
        Kind::CharDev => FileType::CharDevice,
        Kind::BlockDev => FileType::BlockDevice,
    }
}

pub(super) fn attr_of(i: &Inode, dirty: Option<&DirtyFile>) -> FileAttr {
    let size = dirty.map_or(i.size, |d| d.size());
    // A file being written shows its buffer's times (they become the inode's when the
    // buffer is stored).
    let mtime_ns = dirty.map_or(i.mtime_ns, |d| d.mtime_ns);
    let ctime_ns = dirty.map_or(i.ctime_ns, |d| d.ctime_ns.max(i.ctime_ns));
    FileAttr {
        ino: INodeNo(i.ino),
        size,
        blocks: size.div_ceil(512),
        atime: ts(i.atime_ns.unwrap_or(i.mtime_ns)),
        mtime: ts(mtime_ns),
        ctime: ts(ctime_ns),
        crtime: ts(i.ctime_ns),
        kind: file_type(i.kind),
        perm: (i.mode & 0o7777) as u16,
        nlink: i.nlink,
        uid: i.uid,
        gid: i.gid,
        rdev: i.rdev as u32,
        blksize: 65536,
        flags: 0,
    }
}

/// `attr_of` with what needs the vault: a directory's link count (2 + subdirectories) and
/// the blocks a sparse file really holds (what `du` shows).
pub(super) fn full_attr(ws: &Workspace, i: &Inode, dirty: Option<&DirtyFile>) -> Result<FileAttr> {
    let mut a = attr_of(i, dirty);
    if i.kind == Kind::Dir {
        a.nlink = ws.dir_nlink(i)?;
    } else if i.kind == Kind::File && dirty.is_none() && i.size > CHUNK_SIZE as u64 {
        a.blocks = ws.extents(i)?.allocated().div_ceil(512);
    }
    Ok(a)
}

/// The mode after the VFS's "kill privileges" rule: no setuid; no setgid if group-executable.
pub(super) fn kill_suid(mode: u32) -> u32 {
    let mut m = mode & !0o4000;
    if m & 0o010 != 0 {
        m &= !0o2000;
    }
    m
}

pub(super) fn dummy_dir() -> Inode {
    Inode {
        ino: ROOT_INO,
        kind: Kind::Dir,
        mode: 0o755,
        uid: 0,
        gid: 0,
        size: 0,
        mtime_ns: 0,
        ctime_ns: 0,
        nlink: 1,
        rdev: 0,
        link_group: 0,
        hash: None,
        target: None,
        materialized: true,
        dirty: false,
        has_links: false,
        atime_ns: None,
    }
}

impl AvfsFs {
    #[allow(clippy::too_many_arguments)] // the shape of the kernel's request
    pub(super) fn on_setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        reply: ReplyAttr,
    ) {
        let r = self.check_writable().and_then(|_| {
            self.with("setattr", |db, st| {
                st.ign_rules_touched(ino.0);
                let cur = st.ws(db)?.get(ino.0)?;
                if let Some(size) = size {
                    if cur.kind == Kind::Dir {
                        return Err(Error::IsADirectory(String::new()));
                    }
                    // Past the largest file size: EFBIG, before anything is allocated.
                    crate::workspace::content::check_size(size)?;
                    if let Some(d) = st.dirty.get(&ino.0) {
                        st.may_grow(db, d.stored_size, size)?;
                    }
                    if let Some(d) = st.dirty.get_mut(&ino.0) {
                        d.truncate(db, size)?;
                    } else if cur.kind == Kind::File && cur.size != size {
                        st.ws(db)?.setattr(
                            ino.0,
                            &SetAttr {
                                size: Some(size),
                                ..Default::default()
                            },
                        )?;
                    }
                }
                let mut set = SetAttr {
                    mode: mode.map(|m| m & 0o7777),
                    uid,
                    gid,
                    size: None,
                    mtime_ns: mtime.map(|t| match t {
                        TimeOrNow::Now => now_ns(),
                        TimeOrNow::SpecificTime(t) => ns_of(t),
                    }),
                    atime_ns: atime.map(|t| match t {
                        TimeOrNow::Now => now_ns(),
                        TimeOrNow::SpecificTime(t) => ns_of(t),
                    }),
                };
                if size.is_some() && set.mtime_ns.is_none() {
                    set.mtime_ns = Some(now_ns());
                }
                // HANDLE_KILLPRIV_V2: we clear setuid/setgid as the VFS would: on chown of
                // a non-directory, and on truncate by a caller without CAP_FSETID
                // (approximated as non-root). Setgid goes only with group-execute.
                let chown = (uid.is_some() || gid.is_some()) && cur.kind != Kind::Dir;
                let trunc = size.is_some() && req.uid() != 0;
                if mode.is_none() && (chown || trunc) && kill_suid(cur.mode) != cur.mode {
                    set.mode = Some(kill_suid(cur.mode));
                }
                // Times set while writes are buffered are the times the file keeps
                // when the buffer is stored (close), not the time of the close.
                if let (Some(t), Some(d)) = (set.mtime_ns, st.dirty.get_mut(&ino.0)) {
                    d.mtime_ns = t;
                }
                let ws = st.ws(db)?;
                // A truncate above changed the stored inode: read it again.
                let i = if size.is_some() {
                    ws.setattr(ino.0, &set)?
                } else {
                    ws.setattr_of(cur, &set)?
                };
                st.own(&i);
                st.attr(db, &i)
            })
        });
        match erofs(r, self.readonly) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }
}
