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
    pipe: Option<std::fs::File>,
    pid: libc::pid_t,
}

impl Watchdog {
    /// Starts the watchdog of run `id`; it inherits `lock_fd` (the run lock).
    pub fn start(home: &Path, id: &str, base: &VaultRef, lock_fd: Option<i32>) -> Result<Watchdog> {
        let exe = std::env::current_exe().map_err(|e| Error::host("current executable", e))?;
        // /proc/self/exe still runs this very binary if its file was replaced meanwhile
        // (a rebuild), as `mount::spawn::avfs_command` does.
        let program = Path::new("/proc/self/exe");
        let program = if program.exists() {
            program
        } else {
            exe.as_path()
        };
        let argv: Vec<std::ffi::OsString> = vec![
            exe.clone().into(),
            "exec-watchdog".into(),
            "--id".into(),
            id.into(),
        ];
        let mut env: Vec<(std::ffi::OsString, std::ffi::OsString)> = std::env::vars_os()
            .filter(|(k, _)| k != "AVFS_HOME" && k != crate::procs::MARKER)
            .collect();
        env.push(("AVFS_HOME".into(), home.into()));
        // A process group of its own: the terminal's signals (Ctrl-C, Ctrl-Z, hangup) go
        // to the foreground group, which ends `avfs exec`, not its watchdog. It holds the
        // run lock from the moment it exists: the lock outlives us if we die right here.
        // A fork where that is sound (see `watchdog_fork`); the MCP server and other
        // multi-threaded callers execute the binary.
        let single = crate::exec::forked::SelfStat::read().is_some_and(|s| s.single_threaded());
        let child = if single {
            super::watchdog_fork::start(program, &argv, &env, lock_fd)
        } else {
            super::spawn::spawn(program, &argv, &env, lock_fd)
        }
        .map_err(|e| Error::host("starting the exec watchdog", e))?;
        let dog = Watchdog {
            pipe: Some(child.stdin),
            pid: child.pid,
        };
        dog.tell(
            json!({"base": {"name": base.name, "path": base.path, "workspace": base.workspace}}),
        );
        Ok(dog)
    }

    pub fn tell(&self, note: serde_json::Value) {
        use std::io::Write;
        if let Some(mut p) = self.pipe.as_ref() {
            // One write per note: formatting straight into the pipe writes every token
            // on its own.
            let mut line = note.to_string();
            line.push('\n');
            let _ = p.write_all(line.as_bytes());
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        // Every way out of `exec` that runs destructors cleaned up itself.
        self.tell(json!({"done": true}));
        self.pipe = None;
        // It ends as soon as it reads "done": wait for that (a bounded wait), so that
        // when `avfs exec` returns, nothing of the run is left, not even its watchdog
        // (a caller that looks for the run's processes right after would otherwise find
        // it, on a busy machine, not yet scheduled to read). Past the bound, it outlives
        // us (it holds the run lock until it has seen "done").
        wait_for_exit(self.pid, Duration::from_secs(5));
    }
}

/// Reaps our child `pid` once it has exited, waiting up to `limit` for that.
fn wait_for_exit(pid: libc::pid_t, limit: Duration) {
    if let Ok(fd) = crate::pidfd::Pidfd::open(pid) {
        fd.wait_exit(Some(limit));
    }
    let mut status = 0;
    // SAFETY: waits, without blocking, only for our own child.
    unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
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
                    run.finish(&ctx.home, Some(&i), None);
                }
            }
            _ => run.discard(&ctx.home),
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
