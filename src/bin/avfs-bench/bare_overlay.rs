//! The kernel's share of an overlay run: the same command in a plain overlayfs mount
//! (the options avfs mounts with, nothing of avfs around it) over a copy of the same
//! state, on the same file system. The engines table prints it beside native so that
//! each row shows how much of the overlay engine's cost is overlayfs itself (a floor no
//! ingest or set-up work can go under) and how much is avfs.

use super::*;

/// A scratch overlay: `dir/{upper,work,merged}`, mounted over one lower directory.
pub(crate) struct BareOverlay {
    dir: PathBuf,
    mounted: bool,
}

impl BareOverlay {
    pub(crate) fn new(dir: PathBuf) -> BareOverlay {
        BareOverlay {
            dir,
            mounted: false,
        }
    }

    pub(crate) fn merged(&self) -> PathBuf {
        self.dir.join("merged")
    }

    /// Mounts a fresh overlay over `lower` (an empty upper). Needs root; an error says
    /// why it could not (the table then shows "-").
    pub(crate) fn mount(&mut self, lower: &Path) -> BoxResult<()> {
        self.unmount()?;
        for d in ["upper", "work", "merged"] {
            std::fs::create_dir_all(self.dir.join(d))?;
        }
        let opts = format!(
            "lowerdir={},upperdir={},workdir={},userxattr",
            lower.display(),
            self.dir.join("upper").display(),
            self.dir.join("work").display()
        );
        run(&mut cmd(
            "mount",
            [
                OsStr::new("-t"),
                OsStr::new("overlay"),
                OsStr::new("overlay"),
                OsStr::new("-o"),
                OsStr::new(&opts),
                self.merged().as_os_str(),
            ],
        ))?;
        self.mounted = true;
        Ok(())
    }

    /// Unmounts and removes the upper (what the command wrote), leaving nothing behind.
    pub(crate) fn unmount(&mut self) -> BoxResult<()> {
        if self.mounted {
            run(&mut cmd("umount", [self.merged().as_os_str()]))?;
            self.mounted = false;
        }
        if self.dir.exists() {
            std::fs::remove_dir_all(&self.dir)?;
        }
        Ok(())
    }
}

impl Drop for BareOverlay {
    fn drop(&mut self) {
        let _ = self.unmount();
    }
}
