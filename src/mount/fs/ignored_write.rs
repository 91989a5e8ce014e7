//! Changes through the mount to the workspace's ignored files (issue 28): they go to the
//! host's ignored directory, never to the vault, as a run's do. Which new entries are
//! ignored, and what must happen before the directory changes (it is made, no overlay
//! has it mounted, a shared file is copied first), are the engine's decisions
//! (`IgnoredPolicy`); this file carries the requests to the host.
//!
//! A name is the ignored directory's when its directory is (an inode from `IGN_BASE`),
//! when the vault lacks it and the ignored directory has it, or, for a new name the
//! vault lacks, when the policy says the rules ignore it. A rename or link between the
//! vault and the ignored directory answers EXDEV (as between two file systems: `mv`
//! copies and removes), so nothing moves into or out of the history behind its back.
//! Without a policy (a read-only mount) a change answers EROFS.

use super::*;
use std::fs::{self as hostfs, File};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;

use super::ignored::{erofs, host_err, vault_path};

/// A request's answer: an errno straight from the host.
type Answer<T> = std::result::Result<T, Errno>;

fn io(e: std::io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

fn err(e: Error) -> Errno {
    errno(&e)
}

fn cstr(p: &Path) -> Answer<std::ffi::CString> {
    std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(|_| Errno::from_i32(libc::EINVAL))
}

/// What a new ignored entry is.
pub(super) enum Make<'a> {
    File { mode: u32, flags: i32 },
    Dir { mode: u32 },
    Symlink { target: &'a Path },
    Node { mode: u32, rdev: u32 },
}

impl State {
    /// Whose name `name` of directory `parent` is: `Some(path below the root)` when the
    /// ignored directory's, `None` when the vault's. `new`: the name is being made (a
    /// directory or not), so the rules decide for a name neither has.
    fn ign_side(
        &mut self,
        db: &Connection,
        parent: u64,
        name: &[u8],
        new: Option<bool>,
    ) -> Result<Option<PathBuf>> {
        let Some(g) = self.ign.as_mut() else {
            return Ok(None);
        };
        if let Some(p) = g.policy.as_mut()
            && p.is_rule_file(name)
        {
            p.forget_rules();
        }
        if is_ign(parent) {
            let rel = g
                .by_ino
                .get(&parent)
                .ok_or_else(|| Error::NotFound(format!("inode {parent}")))?;
            return Ok(Some(rel.join(OsStr::from_bytes(name))));
        }
        // Costs nothing for an old name while the ignored directory is empty.
        let decide = new.is_some() && g.policy.is_some();
        if !g.active && !decide {
            return Ok(None);
        }
        let ws = open_ws(db, &self.info, &self.ws_name, &self.open_set, &self.budget)?;
        let p = ws.get(parent)?;
        if p.kind != Kind::Dir || ws.lookup(&p, name)?.is_some() {
            return Ok(None);
        }
        let Some(prel) = vault_path(&ws, parent)? else {
            return Ok(None);
        };
        let rel = prel.join(OsStr::from_bytes(name));
        if g.active && hostfs::symlink_metadata(g.dir.join(&rel)).is_ok() {
            return Ok(Some(rel));
        }
        let (Some(is_dir), Some(policy)) = (new, g.policy.as_mut()) else {
            return Ok(None);
        };
        let rule_inos = &mut g.rule_inos;
        let mut read = |r: &Path| -> Option<(u64, Vec<u8>)> {
            let comps: Vec<Vec<u8>> = r.iter().map(|c| c.as_bytes().to_vec()).collect();
            let i = ws.resolve(&comps, true).ok()??;
            if i.kind != Kind::File {
                return None;
            }
            rule_inos.insert(i.ino);
            ws.read(&i, 0, i.size as usize).ok().map(|b| (i.ino, b))
        };
        Ok(policy.ignores(&rel, is_dir, &mut read).then_some(rel))
    }

    /// A vault file changed: when the rules were read from it, they are read again.
    pub(super) fn ign_rules_touched(&mut self, ino: u64) {
        if let Some(g) = self.ign.as_mut()
            && g.rule_inos.remove(&ino)
            && let Some(p) = g.policy.as_mut()
        {
            p.forget_rules();
        }
    }

    /// Before a change of the ignored directory: the policy's preparations; then its
    /// directories above `rel` are made, with the attributes the vault's have (the
    /// ignored directory lies above the history's layers in a run, so its directories'
    /// attributes are the ones a run sees).
    fn ign_prepare(&mut self, db: &Connection, rel: Option<&Path>) -> Result<PathBuf> {
        let parent = match self.ign.as_ref() {
            Some(g) if !g.dir.is_dir() => {
                crate::workspace::find_workspace(db, &self.ws_name)?.and_then(|i| i.parent)
            }
            _ => None,
        };
        let g = self
            .ign
            .as_mut()
            .ok_or_else(|| Error::Internal("no ignored files".into()))?;
        let policy = g
            .policy
            .as_mut()
            .ok_or_else(|| Error::Refused("read-only".into()))?;
        policy.before_change(parent.as_deref())?;
        g.active = true;
        let dir = g.dir.clone();
        let Some(above) = rel.and_then(Path::parent) else {
            return Ok(dir);
        };
        let ws = open_ws(db, &self.info, &self.ws_name, &self.open_set, &self.budget)?;
        let mut at = PathBuf::new();
        let mut comps: Vec<Vec<u8>> = Vec::new();
        for c in above.iter() {
            at.push(c);
            comps.push(c.as_bytes().to_vec());
            let d = dir.join(&at);
            if d.is_dir() {
                continue;
            }
            hostfs::create_dir(&d).map_err(|e| host_err(&d, e))?;
            if let Some(v) = ws.resolve(&comps, false)? {
                let _ = hostfs::set_permissions(&d, hostfs::Permissions::from_mode(v.mode));
                let _ = std::os::unix::fs::lchown(&d, Some(v.uid), Some(v.gid));
            }
        }
        Ok(dir)
    }

    fn ign_writable(&self) -> bool {
        self.ign.as_ref().is_some_and(|g| g.policy.is_some())
    }
}

impl AvfsFs {
    /// Runs `f` under the mount's lock, with the vault's connection for lookups (no
    /// transaction of its own: ignored files are not in the vault).
    /// EROFS when ignored files are read-only.
    fn ign_locked<T>(
        &self,
        op: &'static str,
        f: impl FnOnce(&Connection, &mut State) -> Answer<T>,
    ) -> Answer<T> {
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (store, st) = &mut *guard;
        *st.counters.entry(op).or_default() += 1;
        if !st.ign_writable() {
            return Err(erofs());
        }
        f(&store.conn, st)
    }

    /// Whose the name is (see `State::ign_side`); EROFS for a name of an ignored
    /// directory when ignored files are read-only.
    pub(super) fn ign_route(
        &self,
        parent: INodeNo,
        name: &OsStr,
        new: Option<bool>,
    ) -> Answer<Option<PathBuf>> {
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (store, st) = &mut *guard;
        if st.ign.is_none() {
            return Ok(None);
        }
        if is_ign(parent.0) && !st.ign_writable() {
            return Err(erofs());
        }
        st.ign_side(&store.conn, parent.0, name.as_bytes(), new)
            .map_err(err)
    }

    /// Whose the two names of a rename are: the new name is decided as a new entry of
    /// the old one's kind.
    pub(super) fn ign_route_rename(
        &self,
        (parent, name): (INodeNo, &OsStr),
        (newparent, newname): (INodeNo, &OsStr),
    ) -> Answer<(Option<PathBuf>, Option<PathBuf>)> {
        let from = self.ign_route(parent, name, None)?;
        let is_dir = {
            let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            let (store, st) = &mut *guard;
            match (&from, st.ign.as_ref()) {
                (_, None) => return Ok((None, None)),
                (Some(rel), Some(g)) => g.dir.join(rel).is_dir(),
                (None, Some(_)) => {
                    let ws = st.ws(&store.conn).map_err(err)?;
                    let p = ws.get(parent.0).map_err(err)?;
                    ws.lookup(&p, name.as_bytes())
                        .map_err(err)?
                        .is_some_and(|i| i.kind == Kind::Dir)
                }
            }
        };
        Ok((from, self.ign_route(newparent, newname, Some(is_dir))?))
    }

    /// Makes the ignored entry `rel` (name `name` of `parent`) for the caller; a file
    /// is opened for reading and writing (its handle is returned).
    pub(super) fn ign_make(
        &self,
        req: &Request,
        (parent, name): (INodeNo, &OsStr),
        rel: &Path,
        what: Make,
    ) -> Answer<(Inode, Option<u64>)> {
        self.ign_locked("ign_make", |db, st| {
            let dir = st.ign_prepare(db, Some(rel)).map_err(err)?;
            let p = dir.join(rel);
            let g = st.ign.as_mut().expect("prepared");
            let mut handle = None;
            let perms = |mode: u32| {
                hostfs::set_permissions(&p, hostfs::Permissions::from_mode(mode & 0o7777))
            };
            match what {
                Make::File { mode, flags } => {
                    let exists = hostfs::symlink_metadata(&p).is_ok();
                    if exists && flags & libc::O_EXCL != 0 {
                        return Err(Errno::from_i32(libc::EEXIST));
                    }
                    let truncate = flags & libc::O_TRUNC != 0;
                    if exists {
                        g.policy
                            .as_ref()
                            .expect("prepared")
                            .unshare(&p, truncate)
                            .map_err(err)?;
                    }
                    let f = hostfs::OpenOptions::new()
                        .read(true)
                        .write(true)
                        .create(!exists)
                        .create_new(!exists)
                        .mode(mode & 0o7777)
                        .custom_flags(libc::O_NOFOLLOW)
                        .open(&p)
                        .map_err(io)?;
                    if truncate {
                        f.set_len(0).map_err(io)?;
                    }
                    if !exists {
                        perms(mode).map_err(io)?;
                    }
                    handle = Some(f);
                }
                Make::Dir { mode } => {
                    hostfs::DirBuilder::new()
                        .mode(mode & 0o7777)
                        .create(&p)
                        .map_err(io)?;
                    perms(mode).map_err(io)?;
                }
                Make::Symlink { target } => std::os::unix::fs::symlink(target, &p).map_err(io)?,
                Make::Node { mode, rdev } => {
                    let c = cstr(&p)?;
                    // SAFETY: a valid C string; mknod makes a node or fails.
                    if unsafe { libc::mknod(c.as_ptr(), mode, rdev as libc::dev_t) } != 0 {
                        return Err(io(std::io::Error::last_os_error()));
                    }
                    perms(mode).map_err(io)?;
                }
            }
            // The caller's ids, as the vault's new entries take them.
            let _ = std::os::unix::fs::lchown(&p, Some(req.uid()), Some(req.gid()));
            let inode = g.inode(rel).ok_or_else(|| Errno::from_i32(libc::ENOENT))?;
            let fh = handle.map(|f| {
                let fh = g.next_fh;
                g.next_fh += 1;
                g.handles.insert(fh, f);
                fh
            });
            st.known.insert((parent.0, name.as_bytes().to_vec()));
            Ok((inode, fh))
        })
    }

    /// Removes the ignored entry `rel` (a directory when `dir`).
    pub(super) fn ign_remove(&self, rel: &Path, dir: bool) -> Answer<()> {
        self.ign_locked("ign_remove", |db, st| {
            let p = st.ign_prepare(db, None).map_err(err)?.join(rel);
            if dir {
                hostfs::remove_dir(&p).map_err(io)?;
            } else {
                let m = hostfs::symlink_metadata(&p).map_err(io)?;
                if m.is_dir() {
                    return Err(Errno::from_i32(libc::EISDIR));
                }
                hostfs::remove_file(&p).map_err(io)?;
            }
            st.ign.as_mut().expect("prepared").forget_path(rel);
            Ok(())
        })
    }

    /// Renames within the ignored directory (`flags`: renameat2's).
    pub(super) fn ign_rename(&self, from: &Path, to: &Path, flags: u32) -> Answer<()> {
        self.ign_locked("ign_rename", |db, st| {
            let dir = st.ign_prepare(db, Some(to)).map_err(err)?;
            let (a, b) = (cstr(&dir.join(from))?, cstr(&dir.join(to))?);
            // SAFETY: valid C strings; renameat2 renames or fails.
            let r = unsafe {
                libc::renameat2(
                    libc::AT_FDCWD,
                    a.as_ptr(),
                    libc::AT_FDCWD,
                    b.as_ptr(),
                    flags,
                )
            };
            if r != 0 {
                return Err(io(std::io::Error::last_os_error()));
            }
            let g = st.ign.as_mut().expect("prepared");
            if flags & libc::RENAME_EXCHANGE != 0 {
                let tmp = PathBuf::from("\0exchange");
                g.moved(from, &tmp);
                g.moved(to, from);
                g.moved(&tmp, to);
            } else {
                g.moved(from, to);
            }
            Ok(())
        })
    }

    /// A new name `rel` (of `parent`) for ignored inode `ino`.
    pub(super) fn ign_link(
        &self,
        ino: INodeNo,
        (parent, name): (INodeNo, &OsStr),
        rel: &Path,
    ) -> Answer<Inode> {
        self.ign_locked("ign_link", |db, st| {
            let dir = st.ign_prepare(db, Some(rel)).map_err(err)?;
            let g = st.ign.as_mut().expect("prepared");
            let src = g.host(ino.0).map_err(err)?;
            hostfs::hard_link(&src, dir.join(rel)).map_err(io)?;
            let inode = g.inode(rel).ok_or_else(|| Errno::from_i32(libc::ENOENT))?;
            st.known.insert((parent.0, name.as_bytes().to_vec()));
            Ok(inode)
        })
    }

    /// Opens an ignored file for writing: a file shared with a fork is copied first.
    pub(super) fn ign_open_writer(&self, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let r = self.ign_locked("open", |db, st| {
            if !st.ign_writable() {
                return Err(erofs());
            }
            st.ign_prepare(db, None).map_err(err)?;
            let g = st.ign.as_mut().expect("prepared");
            let p = g.host(ino.0).map_err(err)?;
            let truncate = flags.0 & libc::O_TRUNC != 0;
            g.policy
                .as_ref()
                .expect("prepared")
                .unshare(&p, truncate)
                .map_err(err)?;
            // Read and write whatever was asked: with the writeback cache the kernel reads
            // pages through a write-only handle, and appends itself (O_APPEND would make
            // every positioned write an append).
            let f = hostfs::OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&p)
                .map_err(io)?;
            if truncate {
                f.set_len(0).map_err(io)?;
            }
            let fh = g.next_fh;
            g.next_fh += 1;
            g.handles.insert(fh, f);
            Ok(fh)
        });
        match r {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    /// The host file of a handle, or the file at the inode's path when the kernel
    /// writes through a handle we did not give out.
    fn ign_file<T>(
        &self,
        op: &'static str,
        ino: INodeNo,
        fh: FileHandle,
        f: impl FnOnce(&File) -> std::io::Result<T>,
    ) -> Answer<T> {
        self.ign_locked(op, |_, st| {
            let g = st.ign.as_mut().ok_or_else(erofs)?;
            if let Some(file) = g.handles.get(&fh.0) {
                return f(file).map_err(io);
            }
            if g.policy.is_none() {
                return Err(erofs());
            }
            let p = g.host(ino.0).map_err(err)?;
            let file = hostfs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&p)
                .map_err(io)?;
            f(&file).map_err(io)
        })
    }

    pub(super) fn ign_write(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        reply: ReplyWrite,
    ) {
        match self.ign_file("write", ino, fh, |f| f.write_all_at(data, offset)) {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    pub(super) fn ign_fsync(&self, ino: INodeNo, fh: FileHandle, reply: ReplyEmpty) {
        let has = {
            let guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            guard
                .1
                .ign
                .as_ref()
                .is_some_and(|g| g.handles.contains_key(&fh.0))
        };
        if !has {
            return reply.ok();
        }
        match self.ign_file("fsync", ino, fh, |f| f.sync_data()) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    pub(super) fn ign_release(&self, fh: FileHandle, reply: ReplyEmpty) {
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(g) = guard.1.ign.as_mut() {
            g.handles.remove(&fh.0);
        }
        reply.ok()
    }

    pub(super) fn ign_fallocate(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        (offset, length, mode): (u64, u64, i32),
        reply: ReplyEmpty,
    ) {
        let r = self.ign_file("fallocate", ino, fh, |f| {
            use std::os::fd::AsRawFd;
            // SAFETY: a valid descriptor; fallocate changes that file or fails.
            let r = unsafe { libc::fallocate(f.as_raw_fd(), mode, offset as i64, length as i64) };
            if r != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    /// chmod, chown, truncate and utimes of an ignored entry (a shared file is copied
    /// first).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn ign_setattr(
        &self,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        reply: ReplyAttr,
    ) {
        let r = self.ign_locked("setattr", |db, st| {
            if !st.ign_writable() {
                return Err(erofs());
            }
            st.ign_prepare(db, None).map_err(err)?;
            let g = st.ign.as_mut().expect("prepared");
            let p = g.host(ino.0).map_err(err)?;
            let m = hostfs::symlink_metadata(&p).map_err(io)?;
            g.policy
                .as_ref()
                .expect("prepared")
                .unshare(&p, size == Some(0))
                .map_err(err)?;
            if let Some(size) = size {
                if m.is_dir() {
                    return Err(Errno::from_i32(libc::EISDIR));
                }
                hostfs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(&p)
                    .and_then(|f| f.set_len(size))
                    .map_err(io)?;
            }
            if uid.is_some() || gid.is_some() {
                std::os::unix::fs::lchown(&p, uid, gid).map_err(io)?;
            }
            if let Some(mode) = mode
                && !m.file_type().is_symlink()
            {
                hostfs::set_permissions(&p, hostfs::Permissions::from_mode(mode & 0o7777))
                    .map_err(io)?;
            }
            if atime.is_some() || mtime.is_some() {
                let ts = |t: Option<TimeOrNow>| match t {
                    None => libc::timespec {
                        tv_sec: 0,
                        tv_nsec: libc::UTIME_OMIT,
                    },
                    Some(TimeOrNow::Now) => libc::timespec {
                        tv_sec: 0,
                        tv_nsec: libc::UTIME_NOW,
                    },
                    Some(TimeOrNow::SpecificTime(t)) => {
                        let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
                        libc::timespec {
                            tv_sec: d.as_secs() as libc::time_t,
                            tv_nsec: d.subsec_nanos() as libc::c_long,
                        }
                    }
                };
                let times = [ts(atime), ts(mtime)];
                let c = cstr(&p)?;
                // SAFETY: a valid C string and two timespecs.
                let r = unsafe {
                    libc::utimensat(
                        libc::AT_FDCWD,
                        c.as_ptr(),
                        times.as_ptr(),
                        libc::AT_SYMLINK_NOFOLLOW,
                    )
                };
                if r != 0 {
                    return Err(io(std::io::Error::last_os_error()));
                }
            }
            g.get(ino.0).map_err(err)
        });
        match r {
            Ok(i) => reply.attr(&TTL, &attr_of(&i, None)),
            Err(e) => reply.error(e),
        }
    }
}
