//! Open files: handles, reads, buffered writes, and what close(), fsync(), fallocate()
//! and lseek() do with the buffer.

use super::*;

impl AvfsFs {
    pub(super) fn on_open(&self, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let r = self.with("open", |db, st| {
            let i = st.ws(db)?.get(ino.0)?;
            if i.kind == Kind::Dir {
                return Err(Error::IsADirectory(String::new()));
            }
            let fh = st.next_fh;
            st.next_fh += 1;
            *st.open.entry(ino.0).or_default() += 1;
            st.open_set.insert(ino.0);
            if flags.0 & libc::O_ACCMODE != libc::O_RDONLY {
                st.writers.insert(fh, ino.0);
            }
            Ok(fh)
        });
        match r {
            // All changes reach the file through this mount or come with an explicit
            // invalidation, so the kernel may keep its page cache across opens.
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE),
            Err(e) => reply.error(errno(&e)),
        }
    }

    pub(super) fn on_read(&self, ino: INodeNo, offset: u64, size: u32, reply: ReplyData) {
        let r = self.with("read", |db, st| match st.dirty.get(&ino.0) {
            Some(d) => d.read(db, offset, size as usize),
            None => {
                let ws = st.ws(db)?;
                let i = ws.get(ino.0)?;
                ws.read(&i, offset, size as usize)
            }
        });
        match r {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(errno(&e)),
        }
    }

    pub(super) fn on_write(
        &self,
        ino: INodeNo,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        reply: ReplyWrite,
    ) {
        let r = self.check_writable().and_then(|_| {
            self.with("write", |db, st| {
                if !st.dirty.contains_key(&ino.0) {
                    let i = st.ws(db)?.get(ino.0)?;
                    if i.kind != Kind::File {
                        return Err(Error::InvalidArgument(String::new(), "not a file".into()));
                    }
                    let d = DirtyFile::new(db, &i.hash.unwrap_or(crate::workspace::HOLE), i.size)?;
                    st.dirty.insert(ino.0, d);
                }
                if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
                    let ws = st.ws(db)?;
                    let i = ws.get(ino.0)?;
                    if kill_suid(i.mode) != i.mode {
                        ws.setattr(
                            ino.0,
                            &SetAttr {
                                mode: Some(kill_suid(i.mode)),
                                ..Default::default()
                            },
                        )?;
                    }
                }
                // A write the caller waits for is refused at once. A delayed one from the
                // page cache is checked when the file is stored (close, fsync): refused
                // there, close() fails with EDQUOT, where a failed writeback means EIO.
                if !write_flags.contains(WriteFlags::FUSE_WRITE_CACHE) {
                    let stored = st.dirty[&ino.0].stored_size;
                    st.may_grow(db, stored, offset.saturating_add(data.len() as u64))?;
                }
                let d = st.dirty.get_mut(&ino.0).unwrap();
                if let Err(e) = d.write(db, offset, data) {
                    if matches!(e, Error::TooBig(_))
                        && write_flags.contains(WriteFlags::FUSE_WRITE_CACHE)
                    {
                        // Past the largest file size, from the page cache: the kernel
                        // believes in a size the file will never have; a new kernel inode
                        // (see `take_refused`) shows what the vault holds.
                        st.files.insert(ino.0, (None, u64::MAX));
                        st.refused = true;
                    }
                    return Err(e);
                }
                if d.bytes() > MAX_DIRTY_PER_FILE {
                    st.flush_file(db, ino.0)?;
                }
                st.bound_buffers(db, ino.0)?;
                Ok(data.len() as u32)
            })
        });
        match erofs(r, self.readonly) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    pub(super) fn on_flush(&self, ino: INodeNo, fh: FileHandle, reply: ReplyEmpty) {
        {
            // A read-only handle whose file has nothing buffered changed nothing that
            // close() must make durable: no transaction (git reads thousands of files).
            let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            let st = &mut guard.1;
            if !st.writers.contains_key(&fh.0) && !st.dirty.contains_key(&ino.0) {
                *st.counters.entry("flush").or_default() += 1;
                return reply.ok();
            }
        }
        // close(): everything written so far is committed before close returns.
        match self.with_commit("flush", End::Commit, |db, st| st.flush_file(db, ino.0)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    pub(super) fn on_release(&self, ino: INodeNo, fh: FileHandle, reply: ReplyEmpty) {
        {
            // Fast path: nothing buffered and other handles remain, or nothing to delete.
            let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            let st = &mut guard.1;
            st.writers.remove(&fh.0);
            if !st.dirty.contains_key(&ino.0) {
                let n = st.open.entry(ino.0).or_default();
                if *n > 1 {
                    *n -= 1;
                    return reply.ok();
                }
            }
        }
        let r = self.with_commit("release", End::Batch, |db, st| {
            // A rule file written: what is ignored may have changed.
            st.ign_rules_touched(ino.0);
            let flushed = st.flush_file(db, ino.0);
            let n = st.open.entry(ino.0).or_default();
            // A buffer a quota refused goes with the last handle; one that failed for
            // another reason stays for the next flush (sync, unmount) to try again.
            match flushed {
                Err(Error::Quota(_)) if *n <= 1 => {
                    st.dirty.remove(&ino.0);
                }
                Err(e) => return Err(e),
                Ok(()) => {}
            }
            *n = n.saturating_sub(1);
            if *n == 0 {
                st.open.remove(&ino.0);
                // Still held by the kernel: an orphan waits for its FORGET (`forget`).
                if !st.lookups.contains_key(&ino.0) {
                    st.open_set.remove(&ino.0);
                    st.ws(db)?.drop_orphan(ino.0)?;
                }
            }
            Ok(())
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    pub(super) fn on_fsync(&self, req: &Request, ino: INodeNo, reply: ReplyEmpty) {
        // Our own control thread fsyncs open files only to get the kernel's dirty pages
        // (see control.rs); it makes the result durable itself when it has to.
        let end = if req.pid() == std::process::id() {
            End::Commit
        } else {
            End::Durable
        };
        let r = self.with_commit("fsync", end, |db, st| st.flush_file(db, ino.0));
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    pub(super) fn on_create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let r = self.check_writable().and_then(|_| {
            self.with("create", |db, st| {
                let ws = open_ws(db, &st.info, &st.ws_name, &st.open_set, &st.budget)?;
                let p = ws.get(parent.0)?;
                let mut truncated = false;
                let inode = match ws.lookup(&p, name.as_bytes())? {
                    Some(_) if flags & libc::O_EXCL != 0 => {
                        return Err(Error::Exists(String::new()));
                    }
                    Some(existing) if existing.kind == Kind::Dir => {
                        return Err(Error::IsADirectory(String::new()));
                    }
                    Some(existing) => {
                        if flags & libc::O_TRUNC != 0
                            && (existing.size != 0 || st.dirty.contains_key(&existing.ino))
                        {
                            st.dirty.remove(&existing.ino);
                            truncated = true;
                            ws.setattr(
                                existing.ino,
                                &SetAttr {
                                    size: Some(0),
                                    ..Default::default()
                                },
                            )?
                        } else {
                            existing
                        }
                    }
                    None => {
                        ws.create_absent(&p, name.as_bytes(), new_node(req, &p, Kind::File, mode))?
                    }
                };
                st.known.insert((parent.0, name.as_bytes().to_vec()));
                if truncated {
                    st.own(&inode);
                }
                let fh = st.next_fh;
                st.next_fh += 1;
                *st.open.entry(inode.ino).or_default() += 1;
                st.open_set.insert(inode.ino);
                // Even O_RDONLY: the handle made the file, and its close() commits that.
                st.writers.insert(fh, inode.ino);
                Ok((st.entry(db, &inode)?, fh))
            })
        });
        match erofs(r, self.readonly) {
            Ok(((a, g), fh)) => {
                reply.created(&TTL, &a, g, FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE)
            }
            Err(e) => reply.error(e),
        }
    }

    pub(super) fn on_fallocate(
        &self,
        ino: INodeNo,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let r = self.check_writable().and_then(|_| {
            self.with("fallocate", |db, st| {
                if !st.dirty.contains_key(&ino.0) {
                    let i = st.ws(db)?.get(ino.0)?;
                    if i.kind != Kind::File {
                        return Err(Error::InvalidArgument(String::new(), "not a file".into()));
                    }
                    st.dirty.insert(
                        ino.0,
                        DirtyFile::new(db, &i.hash.unwrap_or(crate::workspace::HOLE), i.size)?,
                    );
                }
                // Past the largest file size: EFBIG, as ext4 answers; nothing allocated.
                let end = crate::workspace::content::end_of(offset, length)?;
                if mode == 0 {
                    st.may_grow(db, st.dirty[&ino.0].stored_size, end)?;
                }
                let d = st.dirty.get_mut(&ino.0).unwrap();
                // Times as ext4 sets them: the change time always, the modification time
                // when the size or the bytes change.
                if mode == 0 {
                    let grows = end > d.size();
                    if grows {
                        d.truncate(db, end)?;
                    }
                    d.touch(grows);
                } else if mode == libc::FALLOC_FL_KEEP_SIZE {
                    d.touch(false);
                } else if mode == libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE {
                    d.punch(db, offset, length)?;
                    d.touch(true);
                } else {
                    return Err(Error::InvalidArgument(String::new(), "EOPNOTSUPP".into()));
                }
                Ok(())
            })
        });
        match r {
            Ok(()) => reply.ok(),
            Err(Error::InvalidArgument(_, m)) if m == "EOPNOTSUPP" => {
                reply.error(Errno::from_i32(libc::EOPNOTSUPP))
            }
            Err(e) => reply.error(erofs::<()>(Err(e), self.readonly).unwrap_err()),
        }
    }

    pub(super) fn on_lseek(&self, ino: INodeNo, offset: i64, whence: i32, reply: ReplyLseek) {
        let r = self.with("lseek", |db, st| {
            let offset = u64::try_from(offset)
                .map_err(|_| Error::InvalidArgument(String::new(), "negative offset".into()))?;
            // With the writeback cache the kernel may hold written pages it has not sent
            // yet (it does not write them back before asking): while the file is open for
            // writing, the answer is the conservative one, all data up to the end of the
            // file as this mount knows it (exact after an fsync).
            let writing = st.writers.values().any(|i| *i == ino.0);
            let (size, data, hole) = match st.dirty.get(&ino.0) {
                Some(d) => (d.size(), d.next_data(offset), d.next_hole(offset)),
                None => {
                    let ws = st.ws(db)?;
                    let i = ws.get(ino.0)?;
                    let ext = ws.extents(&i)?;
                    (i.size, ext.next_data(offset), ext.next_hole(offset))
                }
            };
            Ok(match whence {
                libc::SEEK_DATA | libc::SEEK_HOLE if offset >= size => None,
                libc::SEEK_DATA if writing => Some(offset),
                libc::SEEK_HOLE if writing => Some(size),
                libc::SEEK_DATA => data,
                libc::SEEK_HOLE => Some(hole),
                _ => return Err(Error::InvalidArgument(String::new(), "whence".into())),
            })
        });
        match r {
            Ok(Some(o)) => reply.offset(o as i64),
            Ok(None) => reply.error(Errno::from_i32(libc::ENXIO)),
            Err(e) => reply.error(errno(&e)),
        }
    }
}
