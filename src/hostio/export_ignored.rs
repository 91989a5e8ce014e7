//! `export --include-ignored`: the workspace's ignored files (a host directory under
//! `$AVFS_HOME/ignored`, outside the vault) copied out beside the tracked ones.
//!
//! The copy runs after the tracked files are written and never writes through a
//! symlink: files are created with `O_CREAT | O_EXCL | O_NOFOLLOW`, and only real
//! directories are descended into. Where the host already has an entry at an ignored
//! path, the history wins: an entry the workspace holds (a tracked file made after the
//! rule) is kept and the ignored one is listed in `skipped`; anything else there (an
//! earlier export, with `--force`) is replaced, as export replaces same-named files.

use super::*;

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
    };
    let mut comps = wpath.to_vec();
    c.dir(from, host, &mut comps)
}

struct Copier<'s, 'w, 'a> {
    ws: &'w Workspace<'a>,
    keep_setuid: bool,
    root: bool,
    /// First host place of each source file with more than one name, by (dev, ino).
    links: HashMap<(u64, u64), PathBuf>,
    stats: &'s mut ExportStats,
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
    fn clear(&mut self, p: &Path, comps: &[Vec<u8>], is_dir: bool) -> Result<bool> {
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
            fs::remove_dir_all(p).map_err(|e| host_err(p, e))?;
        } else {
            fs::remove_file(p).map_err(|e| host_err(p, e))?;
        }
        Ok(true)
    }

    fn dir(&mut self, from: &Path, host: &Path, comps: &mut Vec<Vec<u8>>) -> Result<()> {
        let mut names: Vec<_> = fs::read_dir(from)
            .map_err(|e| host_err(from, e))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<io::Result<_>>()
            .map_err(|e| host_err(from, e))?;
        names.sort();
        for name in names {
            let (src, dst) = (from.join(&name), host.join(&name));
            comps.push(name.as_bytes().to_vec());
            let r = self.entry(&src, &dst, comps);
            comps.pop();
            r?;
        }
        Ok(())
    }

    fn entry(&mut self, src: &Path, dst: &Path, comps: &mut Vec<Vec<u8>>) -> Result<()> {
        let m = fs::symlink_metadata(src).map_err(|e| host_err(src, e))?;
        let ft = m.file_type();
        if ft.is_dir() {
            let fresh = self.clear(dst, comps, true)?;
            if fresh {
                fs::DirBuilder::new()
                    .mode(0o700)
                    .create(dst)
                    .map_err(|e| host_err(dst, e))?;
            } else if !fs::symlink_metadata(dst).is_ok_and(|d| d.is_dir()) {
                return Ok(()); // the history's non-directory stands
            }
            self.dir(src, dst, comps)?;
            self.stats.dirs += u64::from(fresh);
            // A directory the history (or the host) had keeps its attributes.
            if fresh {
                self.attrs(dst, &m, false)?;
            }
            return Ok(());
        }
        if !self.clear(dst, comps, false)? {
            return Ok(());
        }
        if m.nlink() > 1
            && !ft.is_symlink()
            && let Some(first) = self.links.get(&(m.dev(), m.ino()))
        {
            fs::hard_link(first, dst).map_err(|e| host_err(dst, e))?;
            self.stats.hardlinks += 1;
            return Ok(());
        }
        if ft.is_symlink() {
            let target = fs::read_link(src).map_err(|e| host_err(src, e))?;
            std::os::unix::fs::symlink(&target, dst).map_err(|e| host_err(dst, e))?;
            self.stats.symlinks += 1;
            self.attrs(dst, &m, true)?;
            return Ok(());
        }
        if !ft.is_file() {
            self.skip(
                comps,
                "an ignored FIFO, socket or device node is not copied",
            );
            return Ok(());
        }
        let mut input = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(src)
            .map_err(|e| host_err(src, e))?;
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
            self.links.insert((m.dev(), m.ino()), dst.to_path_buf());
        }
        Ok(())
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
