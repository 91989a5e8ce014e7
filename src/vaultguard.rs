//! What makes deleting a vault or a fork lose work: a live mount of one of its
//! workspaces (writes in it would vanish when it unmounts) or a run in progress (its
//! changes would be taken into a file that is gone). `vault delete` checks both here.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::mount::{self, MountRecord, control};
use crate::runlock::{Holder, lock_path};

/// The live mounts of these workspaces of the vault file at `vault_path`.
pub fn mounts_of(
    home: &Path,
    vault_path: &Path,
    workspaces: &[String],
) -> Result<Vec<MountRecord>> {
    Ok(mount::list_mounts(home)?
        .into_iter()
        .filter(|m| m.vault_path == vault_path && workspaces.contains(&m.workspace))
        .collect())
}

/// The run locks of some workspaces, held so no run starts while they go away.
pub struct RunsHeld {
    _files: Vec<File>,
}

/// Takes the run lock of every workspace without waiting; a workspace with a run in
/// progress is a `busy` error that names the run. The locks are released when the
/// returned value is dropped.
pub fn hold_runs(home: &Path, vault_path: &Path, workspaces: &[String]) -> Result<RunsHeld> {
    let mut files = Vec::new();
    for ws in workspaces {
        let path = lock_path(home, vault_path, ws);
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d).map_err(|e| Error::host(d.display(), e))?;
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::host(path.display(), e))?;
        // SAFETY: flock on a descriptor we own.
        let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(Error::host(path.display(), e));
            }
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            let who = serde_json::from_str::<Holder>(&text)
                .map(|h| format!("run {} (pid {}, `{}`)", h.exec, h.pid, h.command))
                .unwrap_or_else(|_| "a run".into());
            return Err(Error::RunBusy(format!(
                "workspace {ws} has {who} in progress; deleting it now would lose that run's \
                 changes. Wait for the run to finish (or stop it), then delete again"
            )));
        }
        files.push(file);
    }
    Ok(RunsHeld { _files: files })
}

/// Unmounts a live mount the way `avfs unmount` does: the server commits what was
/// written, detaches and exits; a server that died on its own has its mount detached.
pub fn unmount(rec: &MountRecord) -> Result<()> {
    let mp = &rec.mountpoint;
    if let Err(e) = control::request(&rec.socket, &serde_json::json!({"op": "unmount"})) {
        // Another `avfs unmount` may have got there first: the server is going away. Only
        // a server that stays up and mounted is an error.
        for _ in 0..100 {
            if !mount::pid_alive(rec.pid) && !mount::is_mountpoint(mp) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if mount::pid_alive(rec.pid) && mount::is_mountpoint(mp) {
            return Err(e);
        }
    }
    // Wait for the server to finish writing and exit.
    for _ in 0..600 {
        if !mount::pid_alive(rec.pid) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if mount::pid_alive(rec.pid) {
        return Err(Error::RunBusy(format!(
            "the mount server of {} (pid {}) did not exit within 30 s; try `avfs unmount {}`",
            rec.vault,
            rec.pid,
            mp.display()
        )));
    }
    // A server that died on its own leaves its mount behind.
    if mount::is_mountpoint(mp) {
        mount::force_unmount(mp)?;
    }
    Ok(())
}
