//! Names and directories: lookup, creating and removing names, renames, links and
//! listings.

use super::*;

/// New files and directories take the caller's ids; a setgid directory passes on its group.
pub(super) fn new_node(req: &Request, parent: &Inode, kind: Kind, mode: u32) -> NewNode {
    let mut n = NewNode::new(kind, mode & 0o7777);
    n.uid = req.uid();
    n.gid = req.gid();
    if parent.mode & 0o2000 != 0 {
        n.gid = parent.gid;
        if kind == Kind::Dir {
            n.mode |= 0o2000;
        }
    }
    n
}

impl AvfsFs {
    pub(super) fn on_lookup(&self, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        // No name can be longer than 255 bytes: ENAMETOOLONG, as ext4 answers (the kernel
        // looks a name up before stat, unlink, rename, link, rmdir...).
        if name.len() > 255 {
            self.count("lookup");
            return reply.error(Errno::from_i32(libc::ENAMETOOLONG));
        }
        let r = self.with("lookup", |db, st| {
            let ign = |i: Inode| (attr_of(&i, None), Generation(0));
            if is_ign(parent.0) {
                return Ok(st.ign_child(db, parent.0, name.as_bytes())?.map(ign));
            }
            let ws = st.ws(db)?;
            let p = ws.get(parent.0)?;
            let child = ws.lookup(&p, name.as_bytes())?;
            st.known.insert((parent.0, name.as_bytes().to_vec()));
            match child {
                Some(c) => st.entry(db, &c).map(Some),
                // A name the vault lacks may be an ignored file's (one branch without).
                None if st.ign.is_some() => {
                    Ok(st.ign_child(db, parent.0, name.as_bytes())?.map(ign))
                }
                None => Ok(None),
            }
        });
        match r {
            Ok(Some((a, g))) => reply.entry(&TTL, &a, g),
            // A negative entry: the kernel may remember that the name does not exist.
            Ok(None) => reply.entry(
                &TTL,
                &FileAttr {
                    ino: INodeNo(0),
                    ..attr_of(&dummy_dir(), None)
                },
                Generation(0),
            ),
            Err(e) => reply.error(errno(&e)),
        }
    }

    pub(super) fn on_mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let kind = match mode & libc::S_IFMT {
            libc::S_IFREG | 0 => Kind::File,
            libc::S_IFIFO => Kind::Fifo,
            libc::S_IFSOCK => Kind::Socket,
            libc::S_IFCHR => Kind::CharDev,
            libc::S_IFBLK => Kind::BlockDev,
            _ => return reply.error(Errno::from_i32(libc::EINVAL)),
        };
        self.make(
            req,
            parent,
            name,
            kind,
            mode,
            None,
            rdev as u64,
            "mknod",
            reply,
        )
    }

    pub(super) fn on_mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        reply: ReplyEntry,
    ) {
        self.make(req, parent, name, Kind::Dir, mode, None, 0, "mkdir", reply)
    }

    pub(super) fn on_symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let t = target.as_os_str().as_bytes().to_vec();
        self.make(
            req,
            parent,
            link_name,
            Kind::Symlink,
            0o777,
            Some(t),
            0,
            "symlink",
            reply,
        )
    }

    pub(super) fn on_unlink(&self, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove("unlink", parent, name, reply)
    }

    pub(super) fn on_rmdir(&self, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove("rmdir", parent, name, reply)
    }

    /// `unlink` or `rmdir` (`op`) of `name` in `parent`.
    fn remove(&self, op: &'static str, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.check_writable().and_then(|_| {
            self.with(op, |db, st| {
                let ws = st.ws(db)?;
                let p = ws.get(parent.0)?;
                if op == "rmdir" {
                    ws.rmdir(&p, name.as_bytes())
                } else {
                    ws.unlink(&p, name.as_bytes())
                }
            })
        });
        match erofs(r, self.readonly) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    pub(super) fn on_rename(
        &self,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if flags.contains(RenameFlags::RENAME_WHITEOUT) {
            return reply.error(Errno::from_i32(libc::EINVAL));
        }
        let r = self.check_writable().and_then(|_| {
            self.with("rename", |db, st| {
                let ws = st.ws(db)?;
                let p = ws.get(parent.0)?;
                let np = ws.get(newparent.0)?;
                let f = crate::workspace::RenameFlags {
                    noreplace: flags.contains(RenameFlags::RENAME_NOREPLACE),
                    exchange: flags.contains(RenameFlags::RENAME_EXCHANGE),
                };
                ws.rename(&p, name.as_bytes(), &np, newname.as_bytes(), f)?;
                st.known.insert((newparent.0, newname.as_bytes().to_vec()));
                Ok(())
            })
        });
        match erofs(r, self.readonly) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    pub(super) fn on_link(
        &self,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let r = self.check_writable().and_then(|_| {
            self.with("link", |db, st| {
                let ws = st.ws(db)?;
                let np = ws.get(newparent.0)?;
                let i = ws.link(ino.0, &np, newname.as_bytes())?;
                st.known.insert((newparent.0, newname.as_bytes().to_vec()));
                st.entry(db, &i)
            })
        });
        match erofs(
            r.map_err(|e| {
                if let Error::Refused(_) = e {
                    Error::Refused(String::new())
                } else {
                    e
                }
            }),
            self.readonly,
        ) {
            Ok((a, g)) => reply.entry(&TTL, &a, g),
            Err(e) => reply.error(e),
        }
    }

    pub(super) fn on_readdir(&self, ino: INodeNo, offset: u64, mut reply: ReplyDirectory) {
        let r = self.with("readdir", |db, st| {
            let entries = st.listing(db, ino.0, offset)?;
            let mut i = offset;
            if i == 0 {
                if reply.add(ino, 1, FileType::Directory, ".") {
                    return Ok(false);
                }
                i = 1;
            }
            if i == 1 {
                if reply.add(ino, 2, FileType::Directory, "..") {
                    return Ok(false);
                }
                i = 2;
            }
            for (n, (name, inode)) in entries.iter().enumerate().skip((i - 2) as usize) {
                if reply.add(
                    INodeNo(inode.ino),
                    n as u64 + 3,
                    file_type(inode.kind),
                    OsStr::from_bytes(name),
                ) {
                    return Ok(false);
                }
            }
            Ok(true)
        });
        match r {
            Ok(done) => {
                if done {
                    self.end_listing(ino.0);
                }
                reply.ok()
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    pub(super) fn on_readdirplus(&self, ino: INodeNo, offset: u64, mut reply: ReplyDirectoryPlus) {
        let r = self.with("readdirplus", |db, st| {
            st.listing(db, ino.0, offset)?;
            let st = &mut *st;
            let entries = &st.listings[&ino.0];
            // The kernel skips "." and ".." of a readdirplus reply (no dentries for them).
            let dot = FileAttr {
                ino,
                kind: FileType::Directory,
                ..attr_of(&dummy_dir(), None)
            };
            let mut i = offset;
            if i == 0 {
                if reply.add(ino, 1, ".", &Duration::ZERO, &dot, Generation(0)) {
                    return Ok(false);
                }
                i = 1;
            }
            if i == 1 {
                if reply.add(ino, 2, "..", &Duration::ZERO, &dot, Generation(0)) {
                    return Ok(false);
                }
                i = 2;
            }
            let mut added = Vec::new();
            let mut ign_names = Vec::new();
            let mut done = true;
            for (n, (name, inode)) in entries.iter().enumerate().skip((i - 2) as usize) {
                if is_ign(inode.ino) {
                    // Served from the host: no vault attributes, no bookkeeping.
                    let a = attr_of(inode, None);
                    let at = OsStr::from_bytes(name);
                    if reply.add(
                        INodeNo(inode.ino),
                        n as u64 + 3,
                        at,
                        &TTL,
                        &a,
                        Generation(0),
                    ) {
                        done = false;
                        break;
                    }
                    ign_names.push(name.clone());
                    continue;
                }
                let a = full_attr(&st.ws(db)?, inode, st.dirty.get(&inode.ino))?;
                let g = Generation(st.gens.get(&inode.ino).copied().unwrap_or(0));
                if reply.add(
                    INodeNo(inode.ino),
                    n as u64 + 3,
                    OsStr::from_bytes(name),
                    &TTL,
                    &a,
                    g,
                ) {
                    done = false;
                    break;
                }
                added.push((name.clone(), inode.ino, inode.kind, inode.hash, inode.size));
            }
            for name in ign_names {
                st.known.insert((ino.0, name));
            }
            for (name, child, kind, hash, size) in added {
                st.kernel_ref(child);
                st.known.insert((ino.0, name));
                if kind == Kind::File {
                    st.files.entry(child).or_insert((hash, size));
                }
            }
            Ok(done)
        });
        match r {
            Ok(done) => {
                if done {
                    self.end_listing(ino.0);
                }
                reply.ok()
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn make(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        kind: Kind,
        mode: u32,
        target: Option<Vec<u8>>,
        rdev: u64,
        op: &'static str,
        reply: ReplyEntry,
    ) {
        let r = self.check_writable().and_then(|_| {
            self.with(op, |db, st| {
                let ws = st.ws(db)?;
                let p = ws.get(parent.0)?;
                let mut node = new_node(req, &p, kind, mode);
                node.target = target;
                node.rdev = rdev;
                let i = ws.create(&p, name.as_bytes(), node)?;
                st.known.insert((parent.0, name.as_bytes().to_vec()));
                st.entry(db, &i)
            })
        });
        match erofs(r, self.readonly) {
            Ok((a, g)) => reply.entry(&TTL, &a, g),
            Err(e) => reply.error(e),
        }
    }
}
