//! The FUSE engine: the run works in a FUSE mount of the workspace, bound at the
//! workspace's stable path inside the run's namespace. The live `avfs mount` of the
//! workspace is reused when there is one; otherwise a mount server is started for the
//! run and unmounted when it ends.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use crate::error::{Error, Result};
use crate::registry::VaultRef;

/// A mount of a workspace for the duration of a command: the running mount when there is
/// one, otherwise one started here and unmounted when the guard goes.
pub struct MountGuard {
    home: PathBuf,
    pub mountpoint: PathBuf,
    ours: bool,
    /// The server of a mount we made.
    pub server: Option<u32>,
    /// The mount's control socket.
    pub socket: Option<PathBuf>,
}

/// Where exec mounts a workspace that is not mounted already.
pub fn exec_mountpoint(home: &Path, id: &str) -> PathBuf {
    crate::mount::run_dir(home).join("exec").join(id)
}

impl MountGuard {
    pub fn acquire(home: &Path, v: &VaultRef, id: &str) -> Result<MountGuard> {
        if let Some(m) = crate::mount::find_mount(home, &v.path, &v.workspace)? {
            return Ok(MountGuard {
                home: home.to_path_buf(),
                mountpoint: m.mountpoint,
                ours: false,
                server: None,
                socket: Some(m.socket),
            });
        }
        let mp = exec_mountpoint(home, id);
        std::fs::create_dir_all(&mp).map_err(|e| Error::host(mp.display(), e))?;
        // The server dies with this process: killed, exec leaves no mount behind.
        let rec = crate::mount::spawn::spawn_background(home, v, &mp, false, false, true)?;
        Ok(MountGuard {
            home: home.to_path_buf(),
            mountpoint: rec.mountpoint,
            ours: true,
            server: Some(rec.pid),
            socket: Some(rec.socket),
        })
    }

    /// A mount made for this run has refused nothing before it.
    pub fn is_ours(&self) -> bool {
        self.ours
    }

    fn release(&mut self) {
        if !std::mem::take(&mut self.ours) {
            return;
        }
        if let Ok(list) = crate::mount::list_mounts(&self.home)
            && let Some(m) = list.into_iter().find(|m| m.mountpoint == self.mountpoint)
        {
            let _ = crate::mount::control::request(&m.socket, &json!({"op": "unmount"}));
            for _ in 0..400 {
                // The server is our child: reap it, or it lingers as a zombie.
                // SAFETY: non-blocking waitpid on a pid we spawned.
                unsafe { libc::waitpid(m.pid as i32, std::ptr::null_mut(), libc::WNOHANG) };
                if !crate::mount::pid_alive(m.pid) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        if crate::mount::is_mountpoint(&self.mountpoint) {
            let _ = crate::mount::force_unmount(&self.mountpoint);
        }
        let _ = std::fs::remove_dir(&self.mountpoint);
    }
}

impl Drop for MountGuard {
    fn drop(&mut self) {
        self.release();
    }
}

/// How many requests the mount refused for a quota so far, and the last message.
pub fn quota_refusals(socket: Option<&Path>) -> Option<(u64, String)> {
    let v = crate::mount::control::request(socket?, &json!({"op": "quota"})).ok()?;
    Some((
        v["refused"].as_u64()?,
        v["message"].as_str().unwrap_or_default().to_string(),
    ))
}

/// Unmounts and removes exec's own mountpoint. exec may have died while its server was
/// still starting, so a mount can appear after a first look: only once the directory is
/// gone can none appear any more.
pub fn remove_exec_mountpoint(mp: &Path) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if crate::mount::is_mountpoint(mp) {
            let _ = crate::mount::force_unmount(mp);
        }
        match std::fs::remove_dir(mp) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(_) => return,
        }
    }
}
