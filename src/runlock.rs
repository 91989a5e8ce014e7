//! One run at a time per workspace: an exclusive `flock` on a file of `$AVFS_HOME/locks`,
//! taken with a bounded wait. The lock belongs to the open file, which the exec watchdog
//! inherits, so a run whose `avfs exec` was killed stays locked until its watchdog has
//! taken its changes in. A second run that cannot get the lock in time fails with a
//! `busy` error naming the run that holds it.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// How long a run waits for another run of the same workspace by default.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);

/// Who holds a lock (written into the lock file by its holder).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Holder {
    pub exec: String,
    pub pid: u32,
    pub command: String,
    pub started_at_ns: i64,
}

pub struct RunLock {
    file: File,
    pub path: PathBuf,
}

pub fn lock_path(home: &Path, vault_path: &Path, workspace: &str) -> PathBuf {
    home.join("locks").join(format!(
        "{}.lock",
        crate::mount::mount_id(vault_path, workspace)
    ))
}

impl RunLock {
    /// Takes the workspace's run lock, waiting up to `wait` for the run holding it.
    pub fn acquire(
        home: &Path,
        vault_path: &Path,
        workspace: &str,
        holder: &Holder,
        wait: Duration,
    ) -> Result<RunLock> {
        let path = lock_path(home, vault_path, workspace);
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
        let deadline = Instant::now() + wait;
        let mut pause = Duration::from_millis(2);
        loop {
            // SAFETY: flock on a descriptor we own.
            let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if r == 0 {
                break;
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(Error::host(path.display(), e));
            }
            if Instant::now() >= deadline {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                let who = serde_json::from_str::<Holder>(&text)
                    .map(|h| {
                        format!(
                            "run {} (pid {}, `{}`, for {} s)",
                            h.exec,
                            h.pid,
                            h.command,
                            (crate::store::now_ns() - h.started_at_ns) / 1_000_000_000
                        )
                    })
                    .unwrap_or_else(|_| "another run".into());
                return Err(Error::RunBusy(format!(
                    "workspace {workspace} is running {who}; waited {} s (--wait SECS to wait longer; \
                     run in parallel with --fork NAME or --ephemeral)",
                    wait.as_secs_f64()
                )));
            }
            std::thread::sleep(pause.min(deadline.saturating_duration_since(Instant::now())));
            pause = (pause * 2).min(Duration::from_millis(100));
        }
        let json = serde_json::to_vec(holder).expect("holder serializes");
        let _ = file.set_len(0);
        let _ = file.rewind();
        let _ = file.write_all(&json);
        Ok(RunLock { file, path })
    }

    /// The descriptor a child must inherit to keep the lock after we die.
    pub fn raw_fd(&self) -> i32 {
        self.file.as_raw_fd()
    }
}
