//! The kernel's side: the options the mount asks for at FUSE_INIT, and the `Filesystem`
//! trait, whose requests go to the module of their concern (`on_*`); the few that are a
//! line or two are answered here.

use super::ignored_write::Make;
use super::*;

fn ign_entry(r: std::result::Result<(Inode, Option<u64>), Errno>, reply: ReplyEntry) {
    match r {
        Ok((i, _)) => reply.entry(&TTL, &attr_of(&i, None), Generation(0)),
        Err(e) => reply.error(e),
    }
}

fn empty(r: std::result::Result<(), Errno>, reply: ReplyEmpty) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

impl AvfsFs {
    /// Kernel options: readdirplus, parallel dirops, 1 MiB requests; no writeback cache
    /// unless `AVFS_MOUNT_WRITEBACK=1`.
    ///
    /// Without the writeback cache every write reaches the server before `write()`
    /// returns, so a write past the largest file size (EFBIG) or over a quota (EDQUOT) fails
    /// at `write`, as on ext4. With it, the kernel accepts such a write into its page cache
    /// (FUSE_INIT carries no largest file size: the kernel allows 2^63 - 1) and the error
    /// first surfaces at `close` or `fsync`, which many programs never check. Measured on
    /// one tmpfs, interleaved (docs/benchmarks.md, mount group): `tar x` and `rm -r` are
    /// faster without it, SQLite the same, 4 KiB sequential writes ~1.7x slower.
    pub fn configure_kernel(config: &mut KernelConfig) -> std::io::Result<()> {
        let mut want = InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_READDIRPLUS_AUTO
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_CACHE_SYMLINKS
            // We clear setuid/setgid on write ourselves, which saves a getxattr and a
            // setattr per write request.
            | InitFlags::FUSE_HANDLE_KILLPRIV_V2
            | InitFlags::FUSE_MAX_PAGES;
        if std::env::var_os("AVFS_MOUNT_WRITEBACK").is_some_and(|v| v == "1") {
            want |= InitFlags::FUSE_WRITEBACK_CACHE;
        }
        let _ = config.add_capabilities(want & config.capabilities());
        let _ = config.set_max_write(1 << 20);
        let _ = config.set_max_readahead(1 << 20);
        let _ = config.set_max_background(64);
        Ok(())
    }
}

impl Filesystem for AvfsFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        AvfsFs::configure_kernel(config)
    }

    fn destroy(&mut self) {
        let _ = self.sync(true);
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.on_lookup(parent, name, reply)
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        if is_ign(ino.0) {
            return; // numbers of ignored entries stay for the mount's life
        }
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        guard.1.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if is_ign(ino.0) {
            return self.ign_getattr(ino, reply);
        }
        match self.with("getattr", |db, st| st.attr(db, &st.ws(db)?.get(ino.0)?)) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        if is_ign(ino.0) {
            return self.ign_setattr(ino, mode, uid, gid, size, atime, mtime, reply);
        }
        self.on_setattr(req, ino, mode, uid, gid, size, atime, mtime, reply)
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        if is_ign(ino.0) {
            return self.ign_readlink(ino, reply);
        }
        match self.with("readlink", |db, st| st.ws(db)?.get(ino.0)) {
            Ok(i) => match i.target {
                Some(t) => reply.data(&t),
                None => reply.error(Errno::from_i32(libc::EINVAL)),
            },
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        match self.ign_route(parent, name, Some(false)) {
            Ok(None) => {}
            Ok(Some(rel)) => {
                let what = Make::Node { mode, rdev };
                return ign_entry(self.ign_make(req, (parent, name), &rel, what), reply);
            }
            Err(e) => return reply.error(e),
        }
        self.on_mknod(req, parent, name, mode, rdev, reply)
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        match self.ign_route(parent, name, Some(true)) {
            Ok(None) => {}
            Ok(Some(rel)) => {
                let what = Make::Dir { mode };
                return ign_entry(self.ign_make(req, (parent, name), &rel, what), reply);
            }
            Err(e) => return reply.error(e),
        }
        self.on_mkdir(req, parent, name, mode, reply)
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        match self.ign_route(parent, link_name, Some(false)) {
            Ok(None) => {}
            Ok(Some(rel)) => {
                let what = Make::Symlink { target };
                return ign_entry(self.ign_make(req, (parent, link_name), &rel, what), reply);
            }
            Err(e) => return reply.error(e),
        }
        self.on_symlink(req, parent, link_name, target, reply)
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.ign_route(parent, name, None) {
            Ok(None) => {}
            Ok(Some(rel)) => return empty(self.ign_remove(&rel, false), reply),
            Err(e) => return reply.error(e),
        }
        self.on_unlink(parent, name, reply)
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.ign_route(parent, name, None) {
            Ok(None) => {}
            Ok(Some(rel)) => return empty(self.ign_remove(&rel, true), reply),
            Err(e) => return reply.error(e),
        }
        self.on_rmdir(parent, name, reply)
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        match self.ign_route_rename((parent, name), (newparent, newname)) {
            Ok((None, None)) => {}
            Ok((Some(from), Some(to))) => {
                return empty(self.ign_rename(&from, &to, flags.bits()), reply);
            }
            // Between the history and the ignored files: as between two file systems.
            Ok(_) => return reply.error(Errno::from_i32(libc::EXDEV)),
            Err(e) => return reply.error(e),
        }
        self.on_rename(parent, name, newparent, newname, flags, reply)
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        match (
            is_ign(ino.0),
            self.ign_route(newparent, newname, Some(false)),
        ) {
            (false, Ok(None)) => {}
            (true, Ok(Some(rel))) => {
                let r = self.ign_link(ino, (newparent, newname), &rel);
                return ign_entry(r.map(|i| (i, None)), reply);
            }
            (_, Err(e)) => return reply.error(e),
            _ => return reply.error(Errno::from_i32(libc::EXDEV)),
        }
        self.on_link(ino, newparent, newname, reply)
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if is_ign(ino.0) {
            return self.ign_open(ino, flags, reply);
        }
        self.on_open(ino, flags, reply)
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        if is_ign(ino.0) {
            return self.ign_read(ino, offset, size, reply);
        }
        self.on_read(ino, offset, size, reply)
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        if is_ign(ino.0) {
            return self.ign_write(ino, _fh, offset, data, reply);
        }
        self.on_write(ino, offset, data, write_flags, reply)
    }

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        if is_ign(ino.0) {
            return reply.ok();
        }
        self.on_flush(ino, fh, reply)
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        if is_ign(ino.0) {
            return self.ign_release(fh, reply);
        }
        self.on_release(ino, fh, reply)
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        if is_ign(ino.0) {
            return self.ign_fsync(ino, _fh, reply);
        }
        self.on_fsync(req, ino, reply)
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // "Not implemented": the kernel stops sending OPENDIR and RELEASEDIR for good
        // and opens directories itself with FOPEN_KEEP_CACHE | FOPEN_CACHE_DIR. The
        // kernel still checks that the inode is a directory and its permissions.
        reply.error(Errno::from_i32(libc::ENOSYS))
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        self.on_readdir(ino, offset, reply)
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        self.on_readdirplus(ino, offset, reply)
    }

    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let _ = (req, ino, fh, datasync);
        match self.sync(true) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // Space is the host's (the vault file grows on the disk it lives on).
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        let c = std::ffi::CString::new(self.vault_dir.as_os_str().as_bytes()).unwrap_or_default();
        // SAFETY: `c` is a valid NUL-terminated path and `s` a writable statvfs.
        let ok = unsafe { libc::statvfs(c.as_ptr(), &mut s) } == 0;
        let files = self.with("statfs", |db, _| {
            Ok(db.query_row("SELECT COUNT(*) FROM inode", [], |r| r.get::<_, i64>(0))? as u64)
        });
        if !ok {
            return reply.error(Errno::from_i32(libc::EIO));
        }
        let files = files.unwrap_or(0);
        reply.statfs(
            s.f_blocks,
            s.f_bfree,
            s.f_bavail,
            files + s.f_ffree,
            s.f_ffree,
            s.f_bsize as u32,
            255,
            s.f_frsize as u32,
        );
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        if is_ign(ino.0) {
            // Ignored files keep no extended attributes of the mount's.
            return reply.error(Errno::from_i32(libc::ENOTSUP));
        }
        self.on_setxattr(ino, name, value, flags, reply)
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        if is_ign(ino.0) {
            return reply.error(Errno::from_i32(libc::ENODATA));
        }
        self.on_getxattr(ino, name, size, reply)
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        if is_ign(ino.0) {
            return if size == 0 {
                reply.size(0)
            } else {
                reply.data(&[])
            };
        }
        self.on_listxattr(ino, size, reply)
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if is_ign(ino.0) {
            return reply.error(Errno::from_i32(libc::ENODATA));
        }
        self.on_removexattr(ino, name, reply)
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // default_permissions: the kernel checks modes itself.
        reply.ok();
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        match self.ign_route(parent, name, Some(false)) {
            Ok(None) => {}
            Ok(Some(rel)) => {
                let what = Make::File { mode, flags };
                return match self.ign_make(req, (parent, name), &rel, what) {
                    Ok((i, fh)) => reply.created(
                        &TTL,
                        &attr_of(&i, None),
                        Generation(0),
                        FileHandle(fh.unwrap_or(0)),
                        FopenFlags::empty(),
                    ),
                    Err(e) => reply.error(e),
                };
            }
            Err(e) => return reply.error(e),
        }
        self.on_create(req, parent, name, mode, flags, reply)
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        if is_ign(ino.0) {
            return self.ign_fallocate(ino, _fh, (offset, length, mode), reply);
        }
        self.on_fallocate(ino, offset, length, mode, reply)
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        if is_ign(ino.0) {
            return self.ign_lseek(ino, offset, whence, reply);
        }
        self.on_lseek(ino, offset, whence, reply)
    }
}
