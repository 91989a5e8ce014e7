//! What the mount remembers between requests: the inodes the kernel holds, open files'
//! write buffers, listings in progress, and what the kernel was told about each file.

use super::*;

impl State {
    pub(super) fn ws<'a>(&'a self, db: &'a Connection) -> Result<Workspace<'a>> {
        open_ws(db, &self.info, &self.ws_name, &self.open_set, &self.budget)
    }

    /// Refuses to let a buffered file grow past a quota (costs nothing without quotas).
    pub(super) fn may_grow(&self, db: &Connection, stored: u64, size: u64) -> Result<()> {
        if size > stored && self.budget.limited() {
            self.ws(db)?.check_growth(stored, size)?;
        }
        Ok(())
    }

    pub(super) fn attr(&self, db: &Connection, i: &Inode) -> Result<FileAttr> {
        full_attr(&self.ws(db)?, i, self.dirty.get(&i.ino))
    }

    pub(super) fn generation(&self, ino: u64) -> Generation {
        Generation(self.gens.get(&ino).copied().unwrap_or(0))
    }

    /// Attributes for an entry reply (the kernel may make an inode of it): remembers
    /// what the kernel was told, unless an earlier answer is still to be compared.
    pub(super) fn entry(&mut self, db: &Connection, i: &Inode) -> Result<(FileAttr, Generation)> {
        let a = self.attr(db, i)?;
        if i.kind == Kind::File {
            self.files.entry(i.ino).or_insert((i.hash, i.size));
        }
        self.kernel_ref(i.ino);
        Ok((a, self.generation(i.ino)))
    }

    /// The kernel took a reference to `ino` (an entry reply). An inode it knows is
    /// treated as open (see `open_set`): removed, it stays an orphan until the kernel
    /// forgets it. Without directory handles this is also how a removed directory that a
    /// process still has open (or as cwd) stays readable.
    pub(super) fn kernel_ref(&mut self, ino: u64) {
        *self.lookups.entry(ino).or_default() += 1;
        if ino != ROOT_INO {
            self.open_set.insert(ino);
        }
    }

    /// The kernel dropped `n` references to `ino`; at none it has no inode for it left.
    pub(super) fn forget(&mut self, ino: u64, n: u64) {
        if cfg!(debug_assertions) {
            *self.counters.entry("forget").or_default() += 1;
        }
        if let Some(c) = self.lookups.get_mut(&ino) {
            *c = c.saturating_sub(n);
            if *c == 0 {
                self.lookups.remove(&ino);
                self.files.remove(&ino);
                self.gens.remove(&ino);
                if !self.open.contains_key(&ino) && self.open_set.remove(&ino) {
                    self.forgotten.push(ino);
                }
            }
        }
    }

    /// This mount changed a file's stored content itself: the kernel knows.
    pub(super) fn own(&mut self, i: &Inode) {
        if i.kind == Kind::File {
            self.files.insert(i.ino, (i.hash, i.size));
        }
    }

    /// Writes one file's buffer into the vault (inside the caller's transaction).
    pub(super) fn flush_file(&mut self, db: &Connection, ino: u64) -> Result<()> {
        if self.dirty.contains_key(&ino) {
            // All or nothing, also inside a request that goes on (release).
            Store::exec(db, "SAVEPOINT flush_file")?;
            let d = self.dirty.remove(&ino).unwrap();
            // At most what the commit stores: its new chunks, plus a content row.
            self.stored += d.bytes() as u64 + 512;
            let r = d.commit(db).and_then(|(hash, size)| {
                let ws = self.ws(db)?;
                if let Some(i) = ws.try_get(ino)? {
                    let i = ws.set_content_of(i, hash, size, d.mtime_ns)?;
                    self.own(&i);
                }
                Ok(())
            });
            if r.is_err() {
                Store::exec(db, "ROLLBACK TO flush_file")?;
            }
            Store::exec(db, "RELEASE flush_file")?;
            if let Err(e) = &r {
                // Refused (a quota) or failed: nothing of it is stored, and the buffer
                // stays as it was; the last release drops it. The kernel's cached size
                // and pages of the file must go (see `take_refused`).
                self.dirty.insert(ino, d);
                if matches!(e, Error::Quota(_)) {
                    self.files.insert(ino, (None, u64::MAX));
                    self.refused = true;
                }
            }
            return r;
        }
        Ok(())
    }

    /// The listing of `dir` for a readdir at `offset`: a fresh snapshot when a listing
    /// starts, else the one in progress.
    pub(super) fn listing(&mut self, db: &Connection, dir: u64, offset: u64) -> Result<&Listing> {
        if offset == 0 || !self.listings.contains_key(&dir) {
            let mut entries = if is_ign(dir) {
                if self.ign_get(dir)?.kind != Kind::Dir {
                    return Err(Error::NotADirectory(String::new()));
                }
                vec![]
            } else {
                let ws = self.ws(db)?;
                let d = ws.get(dir)?;
                if d.kind != Kind::Dir {
                    return Err(Error::NotADirectory(String::new()));
                }
                ws.readdir(&d)?
            };
            // Costs one branch unless the workspace has ignored files.
            if self.ign.is_some() {
                self.ign_listing(db, dir, &mut entries)?;
            }
            self.listed.insert(dir);
            self.listings.insert(dir, entries);
        }
        Ok(&self.listings[&dir])
    }

    /// Stores every buffer. One a quota refuses stays as it is, for its file's close() to
    /// report: another process asking for a consistent view (sync) gets what the vault
    /// holds instead of an error about somebody else's write.
    pub(super) fn flush_all(&mut self, db: &Connection) -> Result<()> {
        let inos: Vec<u64> = self.dirty.keys().copied().collect();
        for ino in inos {
            match self.flush_file(db, ino) {
                Ok(()) | Err(Error::Quota(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Keeps all write buffers together under `MAX_DIRTY_TOTAL` by flushing the largest
    /// ones. Only a failure to store `writing` (the file the caller writes) is the
    /// caller's error; another file's refused buffer stays for its own close() to report.
    pub(super) fn bound_buffers(&mut self, db: &Connection, writing: u64) -> Result<()> {
        let mut total: usize = self.dirty.values().map(|d| d.bytes()).sum();
        while total > MAX_DIRTY_TOTAL {
            let Some((ino, bytes)) = self
                .dirty
                .iter()
                .map(|(i, d)| (*i, d.bytes()))
                .max_by_key(|(_, b)| *b)
            else {
                break;
            };
            match self.flush_file(db, ino) {
                Ok(()) => {}
                Err(e) if ino == writing => return Err(e),
                // Refused and kept: stop rather than retry it on every write.
                Err(_) => break,
            }
            total -= bytes;
        }
        Ok(())
    }

    /// Counts the times the writer emptied the WAL itself (`wal::cap`): what the bound
    /// costs the mount's writes shows in the counters.
    pub(super) fn count_wal_cap(&mut self, capped: Result<bool>) {
        if let Ok(true) = capped {
            *self.counters.entry("wal_truncate").or_default() += 1;
        }
    }
}
