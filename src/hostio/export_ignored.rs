//! `export --include-ignored`: the workspace's ignored files (a host directory under
//! `$AVFS_HOME/ignored`, outside the vault) copied out beside the tracked ones.
//!
//! The copy runs after the tracked files are written and never writes through a
//! symlink: files are created with `O_CREAT | O_EXCL | O_NOFOLLOW`, and only real
//! directories are descended into. Where the host already has an entry at an ignored
//! path, the history wins: an entry the workspace holds (a tracked file made after the
//! rule) is kept and the ignored one is listed in `skipped`; anything else there (an
//! earlier export, with `--force`) is replaced, as export replaces same-named files.
//!
//! Both trees are walked at any depth: an explicit stack of directories, each entry named
//! through a [`Rel`] on either side (a short path below an open directory), so an
//! ignored tree deeper than PATH_MAX (a `node_modules` a run made) is copied like any
//! other, and neither the call stack nor a path grows with the depth.

use super::*;
use std::sync::Arc;

/// Copies the tree `from` (the ignored directory's part below the exported workspace
/// directory `wpath`) into the host directory `host`, adding to `stats`.
pub(super) fn copy_ignored(
    ws: &Workspace,
    from: &Path,
    wpath: &[Vec<u8>],
    host: &Path,
    keep_setuid: bool,
    stats: &mut ExportStats,
) -> Result<()> {
    let mut c = Copier {
        ws,
        keep_setuid,
        // SAFETY: geteuid has no preconditions and cannot fail.
        root: unsafe { libc::geteuid() } == 0,
        links: HashMap::new(),
        stats,
        host,
        wlen: wpath.len(),
    };
    let src = Rel::root_following(from).map_err(|e| host_err(from, e))?;
    let dst = Rel::root_following(host).map_err(|e| host_err(host, e))?;
    c.tree(src, dst, wpath.to_vec())
}

struct Copier<'s, 'w, 'a> {
    ws: &'w Workspace<'a>,
    keep_setuid: bool,
    root: bool,
    /// First host place of each source file with more than one name, by (dev, ino).
    links: HashMap<(u64, u64), Rel>,
    stats: &'s mut ExportStats,
    /// The export's host directory and how many components of a workspace path lie
    /// above it: how errors name a host entry.
    host: &'w Path,
    wlen: usize,
}

/// A directory being copied: both sides' entries named through `Rel`s, the source's
/// names left to copy (the first last), and, for one the copy made, its source's
/// metadata (its attributes are set once what is below it is written).
struct Level {
    src: Rel,
    src_anchor: Option<Arc<fs::File>>,
    dst: Rel,
    dst_anchor: Option<Arc<fs::File>>,
    names: Vec<Vec<u8>>,
    made: Option<fs::Metadata>,
}

impl Copier<'_, '_, '_> {
    fn mode(&mut self, mode: u32) -> u32 {
        let m = mode & 0o7777;
        if self.keep_setuid || m & 0o6000 == 0 {
            return m;
        }
        self.stats.setuid_dropped += 1;
        m & !0o6000
    }

    fn skip(&mut self, comps: &[Vec<u8>], why: &str) {
        self.stats
            .skipped
            .push(format!("{} ({why})", path::display(comps)));
    }

    /// Does the workspace's history hold this path? Then its entry on the host stands.
    fn tracked(&self, comps: &[Vec<u8>]) -> bool {
        matches!(self.ws.resolve(comps, false), Ok(Some(_)))
    }

    /// Makes the host slot `p` free for an ignored entry of kind `is_dir`; `Ok(false)`:
    /// keep what is there (the history's entry, or a real directory to merge into).
    fn clear(&mut self, at: &Rel, comps: &[Vec<u8>], is_dir: bool) -> Result<bool> {
        let p = &proc_path(at);
        let m = match fs::symlink_metadata(p) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(true),
            Err(e) => return Err(host_err(p, e)),
        };
        if is_dir && m.is_dir() {
            return Ok(false);
        }
        if self.tracked(comps) {
            self.skip(
                comps,
                "the workspace's history holds this path; its entry was kept",
            );
            return Ok(false);
        }
        if m.is_dir() {
            crate::relpath::remove_tree(at).map_err(|e| host_err(p, e))?;
        } else {
            fs::remove_file(p).map_err(|e| host_err(p, e))?;
        }
        Ok(true)
    }

    /// How errors name the host entry the export writes at `comps`: below the export's
    /// host directory, shortened (`relpath::shortened`).
    fn shown(&self, comps: &[Vec<u8>]) -> PathBuf {
        let mut s = self.host.as_os_str().as_bytes().to_vec();
        for c in comps.iter().skip(self.wlen) {
            s.push(b'/');
            s.extend_from_slice(c);
        }
        PathBuf::from(std::ffi::OsString::from_vec(crate::relpath::shortened(s)))
    }

    /// Names an error of an entry reached through `/proc/self/fd` by its host path.
    fn named(&self, comps: &[Vec<u8>], e: Error) -> Error {
        match e {
            Error::Host { message, .. } => Error::Host {
                what: self.shown(comps).display().to_string(),
                message,
            },
            other => other,
        }
    }

    /// Copies the source directory `src` into the host directory `dst` (both there),
    /// depth first in name order; `comps` is the workspace path of `src`.
    fn tree(&mut self, src: Rel, dst: Rel, mut comps: Vec<Vec<u8>>) -> Result<()> {
        let base = comps.len();
        let list = |c: &Copier, at: &Rel, comps: &[Vec<u8>]| -> Result<Vec<Vec<u8>>> {
            crate::relpath::names(at).map_err(|e| c.named(comps, Error::from(e)))
        };
        let mut stack = vec![Level {
            names: list(self, &src, &comps)?,
            src,
            src_anchor: None,
            dst,
            dst_anchor: None,
            made: None,
        }];
        while let Some(top) = stack.last_mut() {
            let Some(name) = top.names.pop() else {
                let done = stack.pop().expect("a top");
                if let Some(m) = done.made {
                    self.stats.dirs += 1;
                    let p = proc_path(&done.dst);
                    self.attrs(&p, &m, false)
                        .map_err(|e| self.named(&comps, e))?;
                }
                // The level below the walk's own was entered by a name of its parent.
                if comps.len() > base {
                    comps.pop();
                }
                continue;
            };
            let at = |r: Result<Rel, io::Error>| r.map_err(Error::from);
            let s = at(top.src.child(&mut top.src_anchor, &name));
            let d = at(top.dst.child(&mut top.dst_anchor, &name));
            comps.push(name);
            let (s, d) = match (s, d) {
                (Ok(s), Ok(d)) => (s, d),
                (Err(e), _) | (_, Err(e)) => return Err(self.named(&comps, e)),
            };
            match self.entry(&s, &d, &comps) {
                Ok(Some(made)) => {
                    let names = list(self, &s, &comps)?;
                    stack.push(Level {
                        src: s,
                        src_anchor: None,
                        dst: d,
                        dst_anchor: None,
                        names,
                        made,
                    });
                }
                Ok(None) => {
                    comps.pop();
                }
                Err(e) => return Err(self.named(&comps, e)),
            }
        }
        Ok(())
    }

    /// Copies one entry; for a directory, makes (or keeps) it and answers `Some` (with
    /// its metadata when the copy made it) for the walk to go on into it.
    fn entry(
        &mut self,
        s: &Rel,
        d: &Rel,
        comps: &[Vec<u8>],
    ) -> Result<Option<Option<fs::Metadata>>> {
        let (src, dst) = (&proc_path(s), &proc_path(d));
        let m = fs::symlink_metadata(src).map_err(|e| host_err(src, e))?;
        let ft = m.file_type();
        if ft.is_dir() {
            let fresh = self.clear(d, comps, true)?;
            if fresh {
                fs::DirBuilder::new()
                    .mode(0o700)
                    .create(dst)
                    .map_err(|e| host_err(dst, e))?;
            } else if !fs::symlink_metadata(dst).is_ok_and(|d| d.is_dir()) {
                return Ok(None); // the history's non-directory stands
            }
            // A directory the history (or the host) had keeps its attributes.
            return Ok(Some(fresh.then_some(m)));
        }
        if !self.clear(d, comps, false)? {
            return Ok(None);
        }
        if m.nlink() > 1
            && !ft.is_symlink()
            && let Some(first) = self.links.get(&(m.dev(), m.ino()))
        {
            fs::hard_link(proc_path(first), dst).map_err(|e| host_err(dst, e))?;
            self.stats.hardlinks += 1;
            return Ok(None);
        }
        if ft.is_symlink() {
            let target = fs::read_link(src).map_err(|e| host_err(src, e))?;
            std::os::unix::fs::symlink(&target, dst).map_err(|e| host_err(dst, e))?;
            self.stats.symlinks += 1;
            self.attrs(dst, &m, true)?;
            return Ok(None);
        }
        if !ft.is_file() {
            self.skip(
                comps,
                "an ignored FIFO, socket or device node is not copied",
            );
            return Ok(None);
        }
        let mut input = s.open_file().map_err(|e| host_err(src, e))?;
        let mut out = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NOCTTY)
            .open(dst)
            .map_err(|e| host_err(dst, e))?;
        // io::copy uses copy_file_range: a reflink or an in-kernel copy where it can.
        io::copy(&mut input, &mut out).map_err(|e| host_err(dst, e))?;
        drop(out);
        self.stats.files += 1;
        self.stats.bytes += m.len();
        self.attrs(dst, &m, false)?;
        if m.nlink() > 1 {
            self.links.insert((m.dev(), m.ino()), d.clone());
        }
        Ok(None)
    }

    /// Owner (root only), permission bits (not of a link) and mtime, after the content.
    fn attrs(&mut self, p: &Path, m: &fs::Metadata, link: bool) -> Result<()> {
        if self.root {
            ignore_eperm(std::os::unix::fs::lchown(p, Some(m.uid()), Some(m.gid())))
                .map_err(|e| host_err(p, e))?;
        }
        if !link {
            let mode = self.mode(m.mode());
            fs::set_permissions(p, fs::Permissions::from_mode(mode)).map_err(|e| host_err(p, e))?;
        }
        set_mtime_nofollow(p, mtime_ns_of(m)).map_err(|e| host_err(p, e))
    }
}
