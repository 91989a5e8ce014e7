//! The exec watchdog seen from the boundary: `Watchdog` starts it and sends it notes;
//! `main` is what it does when `avfs exec` died before saying it was done (see
//! `exec::watchdog` for the listening and process-ending parts).
//!
//! It inherits the workspace's run lock, so no other run starts on the workspace before
//! it has finished: the command ended, an overlay run's upper taken in (or discarded,
//! for a failed run asked to roll back, or an ephemeral fork), the FUSE mount gone, the
//! checkpoint restored when asked, the fork discarded, and a record in the audit log.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use super::run::{IngestRequest, take_in};
use crate::context::Context;
use crate::engine::overlay::OverlayRun;
use crate::error::{Error, Result};
use crate::registry::VaultRef;
use crate::store::{Store, audit};
use crate::workspace::Workspace;

/// exec's handle on its watchdog: notes go down a pipe only this process holds; dropping
/// the handle says "done".
pub struct Watchdog {
    pipe: Option<std::process::ChildStdin>,
    child: std::process::Child,
}

impl Watchdog {
    /// Starts the watchdog of run `id`; it inherits `lock_fd` (the run lock).
    pub fn start(home: &Path, id: &str, base: &VaultRef, lock_fd: Option<i32>) -> Result<Watchdog> {
        use std::os::unix::process::CommandExt;
        let mut cmd = crate::mount::spawn::avfs_command()?;
        cmd.arg("exec-watchdog")
            .arg("--id")
            .arg(id)
            .env("AVFS_HOME", home)
            .env_remove(crate::exec::procs::MARKER)
            .current_dir("/")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        // A process group of its own: the terminal's signals (Ctrl-C, Ctrl-Z, hangup) go
        // to the foreground group, which ends `avfs exec`, not its watchdog.
        cmd.process_group(0);
        if let Some(fd) = lock_fd {
            // SAFETY: only fcntl between fork and exec: the child keeps the lock's
            // descriptor open across exec.
            unsafe {
                cmd.pre_exec(move || {
                    libc::fcntl(fd, libc::F_SETFD, 0);
                    Ok(())
                });
            }
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| Error::host("starting the exec watchdog", e))?;
        let dog = Watchdog {
            pipe: child.stdin.take(),
            child,
        };
        dog.tell(
            json!({"base": {"name": base.name, "path": base.path, "workspace": base.workspace}}),
        );
        Ok(dog)
    }

    pub fn tell(&self, note: serde_json::Value) {
        use std::io::Write;
        if let Some(mut p) = self.pipe.as_ref() {
            let _ = writeln!(p, "{note}");
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        // Every way out of `exec` that runs destructors cleaned up itself.
        self.tell(json!({"done": true}));
        self.pipe = None;
        let _ = self.child.try_wait();
    }
}

fn vault_ref(v: &serde_json::Value) -> Option<VaultRef> {
    Some(VaultRef {
        name: v["name"].as_str()?.to_string(),
        path: PathBuf::from(v["path"].as_str()?),
        workspace: v["workspace"].as_str()?.to_string(),
    })
}

/// `avfs exec-watchdog` (internal): waits for its `avfs exec` to finish; if it died
/// instead, finishes for it.
pub fn main(ctx: &Context, id: &str) -> Result<i32> {
    let Some(st) = crate::exec::watchdog::listen(std::io::stdin().lock()) else {
        return Ok(0);
    };
    let pgid = st.get("pgid").and_then(|v| v.as_i64()).map(|v| v as i32);
    let killed = crate::exec::watchdog::end_command(pgid, id);
    if let Some(pid) = st.get("server").and_then(|v| v.as_i64()) {
        // It got SIGTERM from the kernel when exec died, and is unmounting.
        crate::exec::watchdog::wait_gone(pid as i32, Duration::from_secs(20));
    }
    if let Some(mp) = st.get("mountpoint").and_then(|v| v.as_str()) {
        crate::engine::fuse::remove_exec_mountpoint(Path::new(mp));
        let _ = crate::mount::list_mounts(&ctx.home);
    }
    let base = st.get("base").and_then(vault_ref);
    let target = st.get("workspace").and_then(vault_ref);
    let finished_ok =
        st.get("finished") == Some(&json!(true)) && st.get("failed") == Some(&json!(false));
    let rollback = st.get("rollback") == Some(&json!(true));
    let ephemeral = st
        .get("ephemeral")
        .and_then(|v| v.as_str())
        .map(String::from);
    // An overlay run: its upper holds what the command wrote, also what it had not closed.
    let mut ingested = None;
    if let Some(run_id) = st.get("run").and_then(|v| v.as_str())
        && let Ok(run) = OverlayRun::open(&ctx.home, run_id)
    {
        let take = ephemeral.is_none() && (finished_ok || !rollback);
        match (&target, take) {
            (Some(v), true) => {
                let opts = IngestRequest {
                    keep_owners: st.get("keep_owners") == Some(&json!(true)),
                    keep_setuid: st.get("keep_setuid") == Some(&json!(true)),
                };
                let r = take_in(ctx, v, &run, opts);
                ingested = Some(match &r {
                    Ok((i, changes)) => {
                        json!({"ok": true, "files": i.files_read, "changes": changes.len()})
                    }
                    Err(e) => json!({"ok": false, "error": e.to_string()}),
                });
                // On an error the run is kept for a person to look at: the audit says why.
                if let Ok((i, _)) = r {
                    run.finish(&ctx.home, Some(&i));
                }
            }
            _ => run.discard(),
        }
    }
    let mut rolled_back = None;
    if let (Some(v), Some(cp), true) = (
        &target,
        st.get("checkpoint").and_then(|v| v.as_str()),
        rollback,
    ) && !finished_ok
    {
        let r = (|| {
            ctx.sync_mount(v)?;
            let mut store = Store::open(&v.path)?;
            store.write(|db| {
                let mut ws = Workspace::open(db, &v.workspace)?;
                let c = ws.find_checkpoint(cp)?;
                ws.restore(&c)
            })?;
            ctx.invalidate_mount(v)
        })();
        rolled_back = Some(r.is_ok());
    }
    let mut discarded = None;
    if let (Some(name), Some(b)) = (&ephemeral, &base) {
        let v = VaultRef {
            name: name.clone(),
            path: b.path.clone(),
            workspace: name.clone(),
        };
        discarded = Some(super::place::discard(ctx, &v).is_ok());
    }
    if let Some(b) = &base {
        let ws = match (&target, discarded) {
            (Some(t), None) => t.workspace.clone(),
            _ => b.workspace.clone(),
        };
        let detail = json!({
            "exec": id, "reason": "avfs exec ended before its command (killed or crashed)",
            "command_finished": st.get("finished").cloned().unwrap_or(json!(false)),
            "killed_processes": killed, "rolled_back": rolled_back, "discarded_fork": discarded,
            "fork": st.get("ephemeral").cloned().unwrap_or(serde_json::Value::Null),
            "ingested": ingested,
        });
        let mut store = Store::open(&b.path)?;
        store.write(|db| audit::append(db, Some(&ws), "exec", "exec.abandoned", &detail))?;
    }
    Ok(0)
}
