//! Changes made outside the mount (CLI commands, restore): what the kernel must forget,
//! and which files it may hold dirty pages of.

use super::*;

impl AvfsFs {
    /// After a change made outside the mount (CLI, restore): works out what the kernel
    /// must forget. Every name it may have cached goes; files whose content changed get
    /// a new generation (so the next lookup makes a fresh kernel inode, whose size is not
    /// the stale cached one) and lose their pages; files that no longer exist lose their
    /// pages, so open handles reach us and fail with ESTALE instead of showing old data.
    ///
    /// Commits before it returns: the process that asked goes on writing the vault (exec
    /// appends its audit row), and a transaction of ours left open for the batch window
    /// made it wait in SQLite's busy backoff (80-90 ms of a 100 ms `exec -- true`).
    pub fn outside_change(&self) -> Result<Invalidation> {
        self.with_commit("invalidate", End::Commit, |db, st| {
            st.info = None;
            st.budget.forget_usage();
            // A run may have made (or emptied) the ignored directory.
            if let Some(g) = &mut st.ign {
                g.refresh();
            }
            st.info = Some(
                crate::workspace::find_workspace(db, &st.ws_name)?
                    .ok_or_else(|| Error::NoSuchVault(st.ws_name.clone()))?,
            );
            // Another command changed the workspace and audited that itself: the mount's
            // own account goes on from the state it left.
            if st.audited.is_some() {
                st.audited = Some(st.ws(db)?.flush()?);
            }
            let mut inv = Invalidation::default();
            let mut vanished = Vec::new();
            let mut changed = Vec::new();
            {
                let ws = st.ws(db)?;
                for (&ino, fp) in &st.files {
                    match ws.try_get(ino)? {
                        None => vanished.push(ino),
                        Some(i) if (i.hash, i.size) != *fp => changed.push((ino, (i.hash, i.size))),
                        Some(_) => {}
                    }
                }
            }
            for ino in vanished {
                st.files.remove(&ino);
                st.gens.remove(&ino);
                inv.pages.push(ino);
            }
            for (ino, fp) in changed {
                st.epoch += 1;
                st.gens.insert(ino, st.epoch);
                st.files.insert(ino, fp);
                inv.pages.push(ino);
            }
            inv.names = st.known.drain().collect();
            // Directories whose names or listings were cached and the root lose their
            // attributes and cached listings (FOPEN_CACHE_DIR keeps those in the
            // directory's pages); open files lose their attributes (mode, owner, times).
            let mut pages: Vec<u64> = inv
                .names
                .iter()
                .map(|(p, _)| *p)
                .chain(st.listed.drain())
                .chain([ROOT_INO])
                .collect();
            pages.sort_unstable();
            pages.dedup();
            inv.pages.extend(pages);
            inv.attrs = st.open.keys().copied().collect();
            Ok(inv)
        })
    }

    /// Paths (relative to the mountpoint) of files open for writing: the files whose
    /// pages the kernel may hold dirty. Unlinked files have none and are left out.
    pub fn written_paths(&self) -> Result<Vec<std::path::PathBuf>> {
        self.with("written_paths", |db, st| {
            let ws = st.ws(db)?;
            let mut inos: Vec<u64> = st.writers.values().copied().collect();
            inos.sort_unstable();
            inos.dedup();
            let mut out = Vec::new();
            'files: for ino in inos {
                let mut comps: Vec<Vec<u8>> = Vec::new();
                let mut cur = ino;
                while cur != ROOT_INO {
                    let Some((parent, name)) = ws.names_of(cur)?.into_iter().next() else {
                        continue 'files;
                    };
                    comps.push(name);
                    cur = parent;
                    if comps.len() > 4096 {
                        continue 'files;
                    }
                }
                let mut p = std::path::PathBuf::new();
                for c in comps.iter().rev() {
                    p.push(OsStr::from_bytes(c));
                }
                out.push(p);
            }
            Ok(out)
        })
    }
}
