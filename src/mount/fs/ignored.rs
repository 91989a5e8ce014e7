//! The workspace's ignored files (`$AVFS_HOME/ignored/<mount id>`, outside the vault; see
//! `engine::ignored`) shown at their paths, as every run shows them; changes to them go
//! to the host's ignored directory (`ignored_write`).
//!
//! An ignored entry gets an inode number at or above [`IGN_BASE`], far above any the vault
//! gives (SQLite row ids), so every request tells the two apart by the number alone. A
//! name the vault has is the vault's; a name it lacks is looked up in the ignored
//! directory at the same path; listings of a directory add the ignored names the vault
//! lacks. Requests on ignored inodes are served from the host file system; those that
//! would change one are `ignored_write`'s (EROFS when the mount was given no
//! `IgnoredPolicy`).
//!
//! Nothing of this runs while the ignored directory is empty or absent (`active`), so a
//! workspace without ignored files pays one branch per lookup miss and listing.

use super::*;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;

/// The first inode number of an ignored entry.
pub(super) const IGN_BASE: u64 = 1 << 60;

pub(super) fn is_ign(ino: u64) -> bool {
    ino >= IGN_BASE
}

/// What the mount knows of the ignored directory: the inode numbers it gave out (a path
/// keeps its number for the mount's life, so the kernel's cached entries stay valid).
pub(super) struct Ignored {
    pub(super) dir: PathBuf,
    /// The directory holds anything (checked at mount, after every outside change, and
    /// set when the mount makes an entry there).
    pub(super) active: bool,
    pub(super) by_ino: HashMap<u64, PathBuf>,
    by_path: HashMap<PathBuf, u64>,
    next_ino: u64,
    /// The engine's decisions on changes (`None`: the files are read-only).
    pub(super) policy: Option<Box<dyn crate::mount::IgnoredPolicy>>,
    /// Open files that may write, by handle.
    pub(super) handles: HashMap<u64, std::fs::File>,
    pub(super) next_fh: u64,
    /// Vault inodes the rules were read from: a change to one makes the policy read the
    /// rules again.
    pub(super) rule_inos: HashSet<u64>,
}

fn holds_any(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some())
}

impl Ignored {
    pub(super) fn new(
        dir: PathBuf,
        policy: Option<Box<dyn crate::mount::IgnoredPolicy>>,
    ) -> Ignored {
        Ignored {
            active: holds_any(&dir),
            dir,
            by_ino: HashMap::new(),
            by_path: HashMap::new(),
            next_ino: IGN_BASE,
            policy,
            handles: HashMap::new(),
            next_fh: 1,
            rule_inos: HashSet::new(),
        }
    }

    /// After an outside change: a run may have made (or emptied) the directory, or
    /// changed a rule file.
    pub(super) fn refresh(&mut self) {
        self.active = holds_any(&self.dir);
        self.rule_inos.clear();
        if let Some(p) = self.policy.as_mut() {
            p.forget_rules();
        }
    }

    fn ino_for(&mut self, rel: &Path) -> u64 {
        if let Some(&i) = self.by_path.get(rel) {
            return i;
        }
        let i = self.next_ino;
        self.next_ino += 1;
        self.by_ino.insert(i, rel.to_path_buf());
        self.by_path.insert(rel.to_path_buf(), i);
        i
    }

    /// `rel` and what was below it are gone: a new entry there gets a new number (the
    /// kernel may still hold the old one, of an open file).
    pub(super) fn forget_path(&mut self, rel: &Path) {
        let gone: Vec<PathBuf> = self
            .by_path
            .keys()
            .filter(|p| p.starts_with(rel))
            .cloned()
            .collect();
        for p in gone {
            if let Some(i) = self.by_path.remove(&p) {
                self.by_ino.remove(&i);
            }
        }
    }

    /// `from` (and what is below it) was renamed to `to`: its numbers go with it, as a
    /// renamed file keeps its inode; what `to` named before is gone.
    pub(super) fn moved(&mut self, from: &Path, to: &Path) {
        self.forget_path(to);
        let moving: Vec<(PathBuf, u64)> = self
            .by_path
            .iter()
            .filter(|(p, _)| p.starts_with(from))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        for (p, i) in moving {
            self.by_path.remove(&p);
            // Not `to.join("")`: that ends in a slash, which names no file.
            let new = match p.strip_prefix(from) {
                Ok(below) if !below.as_os_str().is_empty() => to.join(below),
                _ => to.to_path_buf(),
            };
            self.by_ino.insert(i, new.clone());
            self.by_path.insert(new, i);
        }
    }

    /// The host path of an ignored inode.
    pub(super) fn host(&self, ino: u64) -> Result<PathBuf> {
        self.by_ino
            .get(&ino)
            .map(|r| self.dir.join(r))
            .ok_or_else(|| Error::NotFound(format!("inode {ino}")))
    }

    /// The ignored entry at `rel` (below the workspace's root), if the directory has one.
    pub(super) fn inode(&mut self, rel: &Path) -> Option<Inode> {
        self.find(rel).ok().flatten()
    }

    /// The ignored entry at `rel`, if the directory has one; NameTooLong where its host
    /// path is longer than the host takes (the ignored view names entries by their full
    /// host path: a tree a run made deeper than PATH_MAX shows down to there, and below
    /// it a lookup answers ENAMETOOLONG, not "no such file").
    pub(super) fn find(&mut self, rel: &Path) -> Result<Option<Inode>> {
        let p = self.dir.join(rel);
        let m = match std::fs::symlink_metadata(&p) {
            Ok(m) => m,
            Err(e) => {
                return match host_err(&p, e) {
                    long @ Error::NameTooLong(_) => Err(long),
                    _ => Ok(None),
                };
            }
        };
        let ino = self.ino_for(rel);
        Ok(Some(inode_of(ino, &m, &p)))
    }

    /// An ignored inode as the host has it now.
    pub(super) fn get(&self, ino: u64) -> Result<Inode> {
        let p = self.host(ino)?;
        let m = std::fs::symlink_metadata(&p).map_err(|e| match host_err(&p, e) {
            Error::NameTooLong(w) => Error::NameTooLong(w),
            _ => Error::NotFound(format!("inode {ino}")),
        })?;
        Ok(inode_of(ino, &m, &p))
    }

    /// The entries of the ignored directory at `rel` (none when it has no such directory).
    fn list(&mut self, rel: &Path) -> Vec<(Vec<u8>, Inode)> {
        let Ok(rd) = std::fs::read_dir(self.dir.join(rel)) else {
            return vec![];
        };
        let mut names: Vec<_> = rd.flatten().map(|e| e.file_name()).collect();
        names.sort();
        names
            .into_iter()
            .filter_map(|n| {
                let i = self.inode(&rel.join(&n))?;
                Some((n.as_bytes().to_vec(), i))
            })
            .collect()
    }
}

/// A host error of the ignored directory: ENAMETOOLONG stays that errno (the entry's
/// host path is longer than PATH_MAX), anything else is an I/O error.
pub(super) fn host_err(p: &Path, e: std::io::Error) -> Error {
    if e.raw_os_error() == Some(libc::ENAMETOOLONG) {
        let shown = p.to_string_lossy();
        let tail = shown.len().saturating_sub(200);
        let tail = (tail..shown.len())
            .find(|&i| shown.is_char_boundary(i))
            .unwrap_or(0);
        return Error::NameTooLong(format!("…{}", &shown[tail..]));
    }
    Error::host(p.display(), e)
}

fn inode_of(ino: u64, m: &std::fs::Metadata, p: &Path) -> Inode {
    let ft = m.file_type();
    let kind = if ft.is_dir() {
        Kind::Dir
    } else if ft.is_symlink() {
        Kind::Symlink
    } else if ft.is_fifo() {
        Kind::Fifo
    } else if ft.is_socket() {
        Kind::Socket
    } else if ft.is_char_device() {
        Kind::CharDev
    } else if ft.is_block_device() {
        Kind::BlockDev
    } else {
        Kind::File
    };
    let target = (kind == Kind::Symlink)
        .then(|| std::fs::read_link(p).ok())
        .flatten()
        .map(|t| t.into_os_string().into_vec());
    Inode {
        ino,
        kind,
        mode: m.mode() & 0o7777,
        uid: m.uid(),
        gid: m.gid(),
        size: m.len(),
        mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
        ctime_ns: m.ctime() * 1_000_000_000 + m.ctime_nsec(),
        nlink: if kind == Kind::Dir { 2 } else { 1 },
        rdev: m.rdev(),
        link_group: 0,
        hash: None,
        target,
        materialized: true,
        dirty: false,
        has_links: false,
        atime_ns: None,
    }
}

use std::os::unix::ffi::OsStringExt;

/// The path (below the root) of a vault inode the kernel knows, through its names.
pub(super) fn vault_path(ws: &Workspace, ino: u64) -> Result<Option<PathBuf>> {
    let mut comps: Vec<Vec<u8>> = Vec::new();
    let mut cur = ino;
    while cur != ROOT_INO {
        let Some((parent, name)) = ws.names_of(cur)?.into_iter().next() else {
            return Ok(None);
        };
        comps.push(name);
        cur = parent;
        if comps.len() > 4096 {
            return Ok(None);
        }
    }
    Ok(Some(
        comps.iter().rev().map(|c| OsStr::from_bytes(c)).collect(),
    ))
}

impl State {
    /// The path of directory `dir` (vault or ignored) when ignored files are shown.
    fn ign_rel(&self, db: &Connection, dir: u64) -> Result<Option<PathBuf>> {
        let Some(g) = self.ign.as_ref().filter(|g| g.active) else {
            return Ok(None);
        };
        if is_ign(dir) {
            return Ok(g.by_ino.get(&dir).cloned());
        }
        vault_path(&self.ws(db)?, dir)
    }

    /// The ignored entry `name` of directory `parent`, for a name the vault lacks.
    pub(super) fn ign_child(
        &mut self,
        db: &Connection,
        parent: u64,
        name: &[u8],
    ) -> Result<Option<Inode>> {
        let Some(rel) = self.ign_rel(db, parent)? else {
            return Ok(None);
        };
        self.known.insert((parent, name.to_vec()));
        let g = self.ign.as_mut().expect("ign_rel found it");
        g.find(&rel.join(OsStr::from_bytes(name)))
    }

    /// The ignored entries of directory `dir` that `vault` (its listing) does not name,
    /// appended to it; an ignored directory's entries alone.
    pub(super) fn ign_listing(
        &mut self,
        db: &Connection,
        dir: u64,
        vault: &mut Listing,
    ) -> Result<()> {
        let Some(rel) = self.ign_rel(db, dir)? else {
            return Ok(());
        };
        let g = self.ign.as_mut().expect("ign_rel found it");
        let extra = g.list(&rel);
        if extra.is_empty() {
            return Ok(());
        }
        let have: HashSet<Vec<u8>> = vault.iter().map(|(n, _)| n.clone()).collect();
        vault.extend(extra.into_iter().filter(|(n, _)| !have.contains(n)));
        Ok(())
    }

    /// An ignored inode, for listings and lookups below an ignored directory.
    pub(super) fn ign_get(&self, ino: u64) -> Result<Inode> {
        match &self.ign {
            Some(g) => g.get(ino),
            None => Err(Error::NotFound(format!("inode {ino}"))),
        }
    }
}

/// The error of a request that would change an ignored entry.
pub(super) fn erofs() -> Errno {
    Errno::from_i32(libc::EROFS)
}

impl AvfsFs {
    /// Shows the workspace's ignored directory `dir` in the mount, writable when the
    /// engine's `policy` decides on changes.
    pub fn show_ignored(&self, dir: PathBuf, policy: Option<Box<dyn crate::mount::IgnoredPolicy>>) {
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        guard.1.ign = Some(Ignored::new(dir, policy));
    }

    pub(super) fn ign_do<T>(
        &self,
        op: &'static str,
        f: impl FnOnce(&Ignored) -> Result<T>,
    ) -> Result<T> {
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let st = &mut guard.1;
        *st.counters.entry(op).or_default() += 1;
        match &st.ign {
            Some(g) => f(g),
            None => Err(Error::NotFound("inode".into())),
        }
    }

    pub(super) fn ign_getattr(&self, ino: INodeNo, reply: ReplyAttr) {
        match self.ign_do("getattr", |g| g.get(ino.0)) {
            Ok(i) => reply.attr(&TTL, &attr_of(&i, None)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    pub(super) fn ign_readlink(&self, ino: INodeNo, reply: ReplyData) {
        match self.ign_do("readlink", |g| g.get(ino.0)) {
            Ok(Inode {
                target: Some(t), ..
            }) => reply.data(&t),
            Ok(_) => reply.error(Errno::from_i32(libc::EINVAL)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    pub(super) fn ign_open(&self, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if flags.0 & libc::O_ACCMODE != libc::O_RDONLY || flags.0 & libc::O_TRUNC != 0 {
            return self.ign_open_writer(ino, flags, reply);
        }
        match self.ign_do("open", |g| g.get(ino.0)) {
            Ok(i) if i.kind == Kind::Dir => reply.error(Errno::from_i32(libc::EISDIR)),
            // No FOPEN_KEEP_CACHE: runs change ignored files behind the mount's back.
            Ok(_) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(errno(&e)),
        }
    }

    pub(super) fn ign_read(&self, ino: INodeNo, offset: u64, size: u32, reply: ReplyData) {
        let r = self.ign_do("read", |g| g.host(ino.0)).and_then(|p| {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&p)
                .map_err(|e| host_err(&p, e))?;
            let mut buf = vec![0u8; size as usize];
            let mut got = 0;
            while got < buf.len() {
                match f.read_at(&mut buf[got..], offset + got as u64) {
                    Ok(0) => break,
                    Ok(n) => got += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(host_err(&p, e)),
                }
            }
            buf.truncate(got);
            Ok(buf)
        });
        match r {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(errno(&e)),
        }
    }

    pub(super) fn ign_lseek(&self, ino: INodeNo, offset: i64, whence: i32, reply: ReplyLseek) {
        match self.ign_do("lseek", |g| g.get(ino.0)) {
            Ok(i) if offset < 0 || offset as u64 >= i.size => {
                reply.error(Errno::from_i32(libc::ENXIO))
            }
            Ok(_) if whence == libc::SEEK_DATA => reply.offset(offset),
            Ok(i) if whence == libc::SEEK_HOLE => reply.offset(i.size as i64),
            Ok(_) => reply.error(Errno::from_i32(libc::EINVAL)),
            Err(e) => reply.error(errno(&e)),
        }
    }
}
