//! The engine's side of writes through `avfs mount` to a workspace's ignored files (see
//! `ignored`): which new entries the rules send to the ignored directory, and what must
//! happen before the mount changes that directory. The mount (`mount::IgnoredPolicy`)
//! carries the requests to the host; the decisions are the ones a run makes:
//!
//! - a new entry whose path the rules ignore, and which the workspace does not hold,
//!   goes to the ignored directory (git's rules, read from the workspace's files);
//! - the ignored directory is the topmost lower layer of the workspace's kept overlay,
//!   and a live overlay's lowers must not change: before the mount changes it, the kept
//!   overlay is retired (its upper becomes the layer of the root it shows, as when the
//!   head moves), so the next run mounts a fresh one over the changed directory;
//! - a fork's ignored directory shares its parent's files as hard links (`ensure`), so
//!   a file with more than one link is never changed in place: it is copied to a new
//!   file that replaces the name first (`unshare`), as `separate` replaces names.

use std::collections::HashMap;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use ignore::gitignore::Gitignore;

use super::ignored::{self, RULE_FILES};
use super::kept::{self, Kept};
use crate::error::{Error, Result};
use crate::mount::{IgnoredPolicy, ReadRuleFile};
use crate::store::objects::Hash;

/// One mounted workspace's ignored files.
pub struct MountPolicy {
    home: PathBuf,
    vault_path: PathBuf,
    workspace: String,
    dir: PathBuf,
    /// The rules of each directory (below the root) read so far (`None`: it has none).
    rules: HashMap<PathBuf, Option<Gitignore>>,
    /// `.git/info/exclude` and the global excludes file, once read.
    exclude: Option<Vec<Gitignore>>,
}

impl MountPolicy {
    pub fn new(home: &Path, vault_path: &Path, workspace: &str) -> MountPolicy {
        MountPolicy {
            home: home.to_path_buf(),
            vault_path: vault_path.to_path_buf(),
            workspace: workspace.to_string(),
            dir: ignored::ignored_dir(home, vault_path, workspace),
            rules: HashMap::new(),
            exclude: None,
        }
    }
}

fn host_err(p: &Path, e: std::io::Error) -> Error {
    Error::host(p.display(), e)
}

impl IgnoredPolicy for MountPolicy {
    fn ignores(&mut self, rel: &Path, is_dir: bool, read: &mut ReadRuleFile) -> bool {
        let mut text = |p: &Path| read(p).map(|(_, t)| t);
        if self.exclude.is_none() {
            self.exclude = Some(ignored::root_excludes(&mut text));
        }
        // The directories above `rel`, from the root down: as in a run (`separate`),
        // what is below an ignored directory is ignored, whatever its own rules say.
        let mut dirs = vec![PathBuf::new()];
        if let Some(parent) = rel.parent() {
            for c in parent.iter() {
                let next = dirs[dirs.len() - 1].join(c);
                dirs.push(next);
            }
        }
        for d in &dirs {
            if !self.rules.contains_key(d) {
                let g = ignored::dir_rules(&mut text, d);
                self.rules.insert(d.clone(), g);
            }
        }
        let exclude = self.exclude.as_deref().unwrap_or_default();
        let mut stack: Vec<&Gitignore> = Vec::new();
        for (i, d) in dirs.iter().enumerate() {
            if let Some(Some(g)) = self.rules.get(d) {
                stack.push(g);
            }
            let (at, at_dir) = match dirs.get(i + 1) {
                Some(below) => (below.as_path(), true),
                None => (rel, is_dir),
            };
            if ignored::decide(stack.iter().rev().copied().chain(exclude), at, at_dir) {
                return true;
            }
        }
        false
    }

    fn is_rule_file(&self, name: &[u8]) -> bool {
        name == b"exclude" || RULE_FILES.iter().any(|r| r.as_bytes() == name)
    }

    fn forget_rules(&mut self) {
        self.rules.clear();
        self.exclude = None;
    }

    fn before_change(&mut self, parent: Option<&str>) -> Result<()> {
        ignored::ensure(&self.home, &self.vault_path, &self.workspace, parent)?;
        let kdir = kept::kept_dir(&self.home, &self.vault_path, &self.workspace);
        // One stat per change while no overlay is kept (it is retired below, and the
        // next run keeps a new one).
        if !kdir.join("kept.json").exists() {
            return Ok(());
        }
        if let Some(k) = Kept::open(&kdir)
            && k.record.ignored.as_deref() == Some(self.dir.as_path())
        {
            let shows = crate::util::hex32(&k.record.root).map(Hash);
            k.retire(&self.home, shows.as_ref());
        }
        Ok(())
    }

    fn unshare(&self, p: &Path, truncate: bool) -> Result<()> {
        unshare(p, truncate)
    }
}

/// Makes the file at `p` the only name of its inode, when it has more: a new file with
/// its attributes (and its bytes, unless `truncate`) replaces the name. Directories are
/// never shared (`ensure` copies them); devices, pipes and sockets hold no bytes.
pub fn unshare(p: &Path, truncate: bool) -> Result<()> {
    let m = match fs::symlink_metadata(p) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(host_err(p, e)),
    };
    if m.is_dir() || m.nlink() < 2 || !(m.is_file() || m.file_type().is_symlink()) {
        return Ok(());
    }
    let name = p.file_name().map(|n| n.as_bytes()).unwrap_or(b"f");
    let tmp = p.with_file_name(format!(
        ".{}.avfs-cow{}",
        String::from_utf8_lossy(name),
        std::process::id()
    ));
    let _ = fs::remove_file(&tmp);
    let made = if m.file_type().is_symlink() {
        fs::read_link(p).and_then(|t| std::os::unix::fs::symlink(t, &tmp))
    } else if truncate {
        fs::File::create(&tmp).map(|_| ())
    } else {
        // A reflink where the file system has them (copy_file_range).
        fs::copy(p, &tmp).map(|_| ())
    };
    let attrs = || -> std::io::Result<()> {
        made?;
        let _ = std::os::unix::fs::lchown(&tmp, Some(m.uid()), Some(m.gid()));
        if m.is_file() {
            fs::set_permissions(&tmp, fs::Permissions::from_mode(m.mode() & 0o7777))?;
            if !truncate {
                let f = fs::File::options().write(true).open(&tmp)?;
                f.set_modified(m.modified()?)?;
            }
        }
        fs::rename(&tmp, p)
    };
    attrs().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        host_err(p, e)
    })
}
