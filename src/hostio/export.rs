//! Export: a workspace subtree to a host directory (see the module above).

use super::*;

struct Exporter<'w, 'a> {
    ws: &'w Workspace<'a>,
    root: bool,
    /// Keep setuid/setgid bits (`--keep-setuid`); otherwise they are dropped.
    keep_setuid: bool,
    stats: ExportStats,
    /// First exported place of each inode with more than one name.
    links: HashMap<u64, Rel>,
    done: u64,
    progress: &'w dyn Fn(u64),
}

impl Exporter<'_, '_> {
    /// The permission bits to give a host entry: setuid/setgid dropped unless kept.
    fn host_mode(&mut self, mode: u32) -> u32 {
        let m = mode & 0o7777;
        if self.keep_setuid || m & 0o6000 == 0 {
            return m;
        }
        self.stats.setuid_dropped += 1;
        m & !0o6000
    }

    fn file_done(&mut self) {
        self.done += 1;
        if self.done.is_multiple_of(PROGRESS_EVERY) {
            (self.progress)(self.done);
        }
    }

    /// Makes `p` a real directory we can write into; true if it was created.
    fn make_dir(&self, p: &Path, exists_check: bool) -> Result<bool> {
        if exists_check {
            match fs::symlink_metadata(p) {
                Ok(m) if m.is_dir() => return Ok(false),
                Ok(_) => fs::remove_file(p).map_err(|e| host_err(p, e))?,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(host_err(p, e)),
            }
        }
        fs::DirBuilder::new()
            .mode(0o700)
            .create(p)
            .map_err(|e| host_err(p, e))?;
        Ok(true)
    }

    /// Clears the way for a new non-directory at `p` (only files, symlinks and the like
    /// and empty directories are removed).
    fn clear_slot(&self, p: &Path) -> Result<()> {
        match fs::symlink_metadata(p) {
            Ok(m) if m.is_dir() => fs::remove_dir(p).map_err(|e| {
                host_msg(
                    p,
                    format!(
                        "is a directory and cannot be replaced by a file ({e}); remove it first"
                    ),
                )
            }),
            Ok(_) => fs::remove_file(p).map_err(|e| host_err(p, e)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(host_err(p, e)),
        }
    }

    fn set_owner(&self, p: &Path, i: &Inode) -> Result<()> {
        if self.root {
            ignore_eperm(std::os::unix::fs::lchown(p, Some(i.uid), Some(i.gid)))
                .map_err(|e| host_err(p, e))?;
        }
        Ok(())
    }

    fn write_file(&mut self, i: &Inode, p: &Path) -> Result<()> {
        let hash = i
            .hash
            .ok_or_else(|| Error::Internal(format!("inode {} is a file without content", i.ino)))?;
        let f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NOCTTY)
            .open(p)
            .map_err(|e| host_err(p, e))?;
        if i.size > 0 {
            // One chunk in memory at a time, however large the file; holes stay holes.
            content::copy_to_file(self.ws.db, &hash, i.size, &f).map_err(|e| match e {
                Error::Host { message, .. } => host_msg(p, &message),
                other => other,
            })?;
        }
        if self.root {
            ignore_eperm(std::os::unix::fs::fchown(&f, Some(i.uid), Some(i.gid)))
                .map_err(|e| host_err(p, e))?;
        }
        // After writing and chown, both of which may clear setuid/setgid bits.
        let mode = self.host_mode(i.mode);
        f.set_permissions(fs::Permissions::from_mode(mode))
            .map_err(|e| host_err(p, e))?;
        let t = times(i.mtime_ns);
        // SAFETY: the descriptor is open and `t` holds two timespecs.
        check(unsafe { libc::futimens(f.as_raw_fd(), t.as_ptr()) }).map_err(|e| host_err(p, e))?;
        self.stats.files += 1;
        self.stats.bytes += i.size;
        Ok(())
    }

    /// Creates a FIFO, socket or device node; false if it must be skipped.
    fn make_special(&mut self, i: &Inode, p: &Path, wpath: &str) -> Result<bool> {
        let c = cpath(p).map_err(|e| host_err(p, e))?;
        if i.kind == Kind::Fifo {
            // SAFETY: `c` is a valid NUL-terminated path.
            check(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }).map_err(|e| host_err(p, e))?;
        } else {
            if !self.root {
                self.stats.skipped.push(format!(
                    "{wpath} ({}: only root can create it)",
                    i.kind.name()
                ));
                return Ok(false);
            }
            let mode = (i.kind.ifmt() | (i.mode & 0o1777)) as libc::mode_t;
            // SAFETY: `c` is a valid NUL-terminated path.
            if let Err(e) = check(unsafe { libc::mknod(c.as_ptr(), mode, i.rdev as libc::dev_t) }) {
                self.stats
                    .skipped
                    .push(format!("{wpath} ({}: {e})", i.kind.name()));
                return Ok(false);
            }
        }
        self.set_owner(p, i)?;
        let mode = self.host_mode(i.mode);
        // A FIFO or device node is not opened (that could block or touch a device).
        // SAFETY: `c` is a valid NUL-terminated path.
        check(unsafe { libc::fchmodat(libc::AT_FDCWD, c.as_ptr(), mode as libc::mode_t, 0) })
            .map_err(|e| host_err(p, e))?;
        set_mtime_nofollow(p, i.mtime_ns).map_err(|e| host_err(p, e))?;
        Ok(true)
    }

    /// Recreates one non-directory at `at` (`disp` in messages).
    fn leaf(
        &mut self,
        i: &Inode,
        at: &Rel,
        disp: &Path,
        exists_check: bool,
        wpath: &dyn Fn() -> String,
    ) -> Result<()> {
        let p = &proc_path(at);
        self.leaf_at(i, at, p, exists_check, wpath)
            .map_err(|e| shown_as(e, disp))
    }

    fn leaf_at(
        &mut self,
        i: &Inode,
        at: &Rel,
        p: &Path,
        exists_check: bool,
        wpath: &dyn Fn() -> String,
    ) -> Result<()> {
        if exists_check {
            self.clear_slot(p)?;
        }
        if i.nlink > 1
            && let Some(first) = self.links.get(&i.ino)
        {
            fs::hard_link(proc_path(first), p).map_err(|e| host_err(p, e))?;
            self.stats.hardlinks += 1;
            if i.kind == Kind::File {
                self.file_done();
            }
            return Ok(());
        }
        match i.kind {
            Kind::File => {
                self.write_file(i, p)?;
                self.file_done();
            }
            Kind::Symlink => {
                let target = i.target.as_deref().unwrap_or_default();
                std::os::unix::fs::symlink(OsStr::from_bytes(target), p)
                    .map_err(|e| host_err(p, e))?;
                self.set_owner(p, i)?;
                set_mtime_nofollow(p, i.mtime_ns).map_err(|e| host_err(p, e))?;
                self.stats.symlinks += 1;
            }
            Kind::Fifo | Kind::Socket | Kind::CharDev | Kind::BlockDev => {
                if !self.make_special(i, p, &wpath())? {
                    return Ok(());
                }
            }
            Kind::Dir => return Err(Error::Internal("leaf called on a directory".into())),
        }
        if i.nlink > 1 {
            self.links.insert(i.ino, at.clone());
        }
        Ok(())
    }

    /// Recreates the directory `ino` at `host`, depth first; attributes post-order. Each
    /// directory is reached relative to an open ancestor (`Rel`), so a tree deeper than
    /// PATH_MAX exports like any other.
    fn tree(&mut self, ino: u64, host: &Path, wpath: String) -> Result<()> {
        enum Step {
            Enter {
                ino: u64,
                at: Option<Rel>,
                disp: PathBuf,
                wpath: String,
                check: bool,
            },
            Exit {
                inode: Inode,
                at: Rel,
                disp: PathBuf,
            },
        }
        let mut stack = vec![Step::Enter {
            ino,
            at: None,
            disp: host.to_path_buf(),
            wpath,
            check: true,
        }];
        while let Some(step) = stack.pop() {
            match step {
                Step::Enter {
                    ino,
                    at,
                    disp,
                    wpath,
                    check,
                } => {
                    let top = at.is_none();
                    let created = match &at {
                        Some(at) => self.make_dir(&proc_path(at), check),
                        None => self.make_dir(host, check),
                    }
                    .map_err(|e| shown_as(e, &disp))?;
                    let at = match at {
                        Some(at) => at,
                        None => Rel::root(host).map_err(|e| host_err(host, e))?,
                    };
                    self.stats.dirs += 1;
                    // Always a fresh row: materializing elsewhere may have changed it.
                    let dir = self.ws.get(ino)?;
                    let children = self.ws.readdir(&dir)?;
                    // A directory that existed before the export at the top keeps its
                    // attributes; everything the export makes gets the workspace's.
                    if created || !top {
                        stack.push(Step::Exit {
                            inode: dir,
                            at: at.clone(),
                            disp: disp.clone(),
                        });
                    }
                    let mut anchor = None;
                    for (name, child) in children {
                        let c = at
                            .child(&mut anchor, &name)
                            .map_err(|e| host_err(&disp, e))?;
                        let cdisp = disp.join(OsStr::from_bytes(&name));
                        let shown = || {
                            let mut w = if wpath == "/" {
                                String::new()
                            } else {
                                wpath.clone()
                            };
                            w.push_str(&path::display(std::slice::from_ref(&name)));
                            w
                        };
                        if child.kind == Kind::Dir {
                            stack.push(Step::Enter {
                                ino: child.ino,
                                at: Some(c),
                                disp: cdisp,
                                wpath: shown(),
                                check: !created,
                            });
                        } else {
                            self.leaf(&child, &c, &cdisp, !created, &shown)?;
                        }
                    }
                }
                Step::Exit { inode, at, disp } => {
                    let p = proc_path(&at);
                    (|| {
                        self.set_owner(&p, &inode)?;
                        let mode = self.host_mode(inode.mode);
                        fs::set_permissions(&p, fs::Permissions::from_mode(mode))
                            .map_err(|e| host_err(&p, e))?;
                        set_mtime_nofollow(&p, inode.mtime_ns).map_err(|e| host_err(&p, e))
                    })()
                    .map_err(|e| shown_as(e, &disp))?;
                }
            }
        }
        Ok(())
    }
}

/// An error about a host entry, naming it as the user knows it (`disp`), not by the
/// `/proc/self/fd` path it was reached through.
fn shown_as(e: Error, disp: &Path) -> Error {
    match e {
        Error::Host { message, .. } => Error::Host {
            what: disp.display().to_string(),
            message,
        },
        other => other,
    }
}

/// Exports the workspace directory (or single file) at `src` to the host path `host`.
///
/// Refuses, before writing anything, if `host` exists and is a non-empty directory or
/// anything else, unless `force`: then the export writes into it, replacing same-named
/// entries and keeping unrelated ones. Owners are set only when running as root; device
/// nodes and sockets are recreated only by root and otherwise reported in `skipped`.
/// A file exported into an existing directory keeps its name there. Setuid and setgid
/// bits are dropped (and counted) unless `keep_setuid`.
///
/// With `ignored` (the workspace's ignored directory, `--include-ignored`), the ignored
/// files below `src` are copied out too, after the tracked ones (`export_ignored`); `src`
/// may then be an ignored directory the history does not hold.
pub fn export(
    ws: &Workspace,
    src: &[Vec<u8>],
    host: &Path,
    (force, keep_setuid): (bool, bool),
    ignored: Option<&Path>,
    progress: &dyn Fn(u64),
) -> Result<ExportStats> {
    let found = match ws.resolve_full(src, true) {
        Ok(f) => f,
        Err(Error::NotFound(_)) if ignored.is_some() => None,
        Err(e) => return Err(e),
    };
    // The ignored directory's part below a workspace path (its names are taken as
    // written: the ignored directory holds no symlink the history resolves).
    let ignored_src = |comps: &[Vec<u8>]| {
        ignored.map(|d| d.join(OsStr::from_bytes(&path::join_bytes(comps)[1..])))
    };
    let (node, resolved) = match found {
        Some(f) => f,
        // Only in the ignored directory (`export --include-ignored /.venv DIR`).
        None => match ignored_src(src).filter(|p| p.is_dir()) {
            Some(from) => {
                refuse_nonempty(host, force)?;
                fs::create_dir_all(host).map_err(|e| host_err(host, e))?;
                let mut stats = ExportStats::default();
                super::export_ignored::copy_ignored(ws, &from, src, host, keep_setuid, &mut stats)?;
                progress(stats.files);
                return Ok(stats);
            }
            None => return Err(Error::NotFound(path::display(src))),
        },
    };
    let existing = match fs::symlink_metadata(host) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(host_err(host, e)),
    };
    refuse_nonempty(host, force)?;
    if existing.is_none()
        && let Some(parent) = host.parent().filter(|p| !p.as_os_str().is_empty())
    {
        fs::create_dir_all(parent).map_err(|e| host_err(parent, e))?;
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let mut ex = Exporter {
        ws,
        root,
        keep_setuid,
        stats: ExportStats::default(),
        links: HashMap::new(),
        done: 0,
        progress,
    };
    if node.kind == Kind::Dir {
        ex.tree(node.ino, host, path::display(&resolved))?;
    } else {
        let target = match (&existing, resolved.last()) {
            (Some(m), Some(name)) if m.is_dir() => host.join(OsStr::from_bytes(name)),
            _ => host.to_path_buf(),
        };
        let shown = || path::display(&resolved);
        let (dir, name) = match (target.parent(), target.file_name()) {
            (Some(d), Some(n)) => (
                if d.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    d
                },
                n,
            ),
            _ => return Err(host_msg(&target, "not a file name")),
        };
        let at = Rel::root_following(dir)
            .and_then(|r| r.child(&mut None, name.as_bytes()))
            .map_err(|e| host_err(dir, e))?;
        ex.leaf(&node, &at, &target, existing.is_some(), &shown)?;
    }
    progress(ex.done);
    let mut stats = ex.stats;
    if node.kind == Kind::Dir
        && let Some(from) = ignored_src(&resolved).filter(|p| p.is_dir())
    {
        super::export_ignored::copy_ignored(ws, &from, &resolved, host, keep_setuid, &mut stats)?;
    }
    Ok(stats)
}

/// An existing, non-empty `host` is refused unless `force`.
fn refuse_nonempty(host: &Path, force: bool) -> Result<()> {
    let m = match fs::symlink_metadata(host) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(host_err(host, e)),
    };
    let nonempty = !m.is_dir()
        || fs::read_dir(host)
            .map_err(|e| host_err(host, e))?
            .next()
            .is_some();
    if nonempty && !force {
        return Err(Error::Refused(format!(
            "{}: already exists and is not empty; pass --force to export into it \
             (same-named files are replaced, other files are kept)",
            host.display()
        )));
    }
    Ok(())
}
