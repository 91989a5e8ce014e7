//! The workspace `avfs mcp` keeps mounted while a session lasts.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::context::AUDIT_ORIGIN_ENV;

/// The workspace mounted for the length of a session, unmounted when the session ends.
pub(super) struct SessionMount {
    exe: PathBuf,
    mountpoint: PathBuf,
}

impl SessionMount {
    /// Mounts the server's workspace under `$AVFS_HOME/run/mcp/PID`. Nothing is lost when
    /// it cannot be (no FUSE, or the workspace is mounted elsewhere already, which exec
    /// then reuses): commands mount for themselves as without the server.
    pub(super) fn start(exe: &Path, home: &Path, vault: Option<&str>) -> Option<SessionMount> {
        let mountpoint = home
            .join("run")
            .join("mcp")
            .join(std::process::id().to_string());
        std::fs::create_dir_all(&mountpoint).ok()?;
        let mut cmd = std::process::Command::new(exe);
        cmd.arg("--json");
        if let Some(v) = vault {
            cmd.arg(format!("--vault={v}"));
        }
        let out = cmd
            .arg("mount")
            .arg(&mountpoint)
            .env(AUDIT_ORIGIN_ENV, "mcp")
            // Unmounted also when this server is killed (SIGKILL) and cannot do it.
            .env(crate::mount::OWNER_ENV, std::process::id().to_string())
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()?;
        if !out.status.success() {
            let _ = std::fs::remove_dir(&mountpoint);
            return None;
        }
        Some(SessionMount {
            exe: exe.to_path_buf(),
            mountpoint,
        })
    }
}

impl Drop for SessionMount {
    fn drop(&mut self) {
        let _ = std::process::Command::new(&self.exe)
            .arg("--json")
            .arg("unmount")
            .arg(&self.mountpoint)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir(&self.mountpoint);
    }
}
