//! Services: processes that outlive one run, inside the workspace's sandbox
//! (docs/services.md).
//!
//! `start` crosses the boundary as a run does (`boundary::exec` with a `ServiceLaunch`:
//! the policy decides, the run lock, the checkpoint, the kept overlay and the sandbox's
//! plan are a run's) and returns as soon as the service runs; its supervisor
//! (`sandbox::service`) keeps its record and bounded log. `list`, `logs`, `stop` and
//! `restart` read and act on those records; every start and stop is in the audit log.
//!
//! The workspace's runs and services share one network namespace (the first running
//! service's): a run reaches a service on 127.0.0.1, the host and other workspaces do
//! not (each fork is its own workspace).

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use crate::boundary::{self, Command, ExecRequest, ServiceLaunch};
use crate::context::Context;
use crate::documents::services::{ServiceDoc, ServiceStarted, ServiceStopped, ServiceWrites};
use crate::error::{Error, Result};
use crate::registry::VaultRef;
use crate::sandbox::service::{self as proc_service, ServiceRecord};
use crate::store::{Store, audit};

mod writes;
use writes::Writes;

/// What `avfs service start` asks for.
#[derive(Clone, Debug)]
pub struct StartRequest {
    pub command: Command,
    pub name: Option<String>,
    pub env: Vec<(String, String)>,
    pub cwd: String,
    pub ttl: Option<Duration>,
    /// Ports of the host's 127.0.0.1 that reach it (`--publish`).
    pub publish: Vec<u16>,
    /// Wait this long for a run of the workspace to end.
    pub wait: Option<Duration>,
}

/// The services of the `--vault` workspace, and where their directories are.
fn workspace(ctx: &Context) -> Result<(VaultRef, PathBuf)> {
    let (_, v) = ctx.target()?;
    let dir = boundary::service::workspace_dir(&ctx.home, &v);
    Ok((v, dir))
}

fn doc(v: &VaultRef, dir: &Path, r: &ServiceRecord, writes: ServiceWrites) -> ServiceDoc {
    let state = r.current_state();
    let log_bytes = ["log", "log.1"]
        .iter()
        .filter_map(|f| std::fs::metadata(dir.join(f)).ok())
        .map(|m| m.len())
        .sum();
    ServiceDoc {
        id: r.id.clone(),
        name: r.name.clone(),
        vault: v.name.clone(),
        workspace: r.workspace.clone(),
        pid: r.pid,
        command: r.command.clone(),
        cwd: r.cwd.clone(),
        started_at: crate::util::rfc3339(r.started_at_ns),
        ended_at: r.ended_at_ns.map(crate::util::rfc3339),
        exit_code: r.exit_code,
        signal: r.signal,
        end_reason: r.end_reason.clone(),
        ttl_secs: r.ttl_secs,
        published: r.published.clone(),
        log_bytes,
        last_output: (!matches!(state.as_str(), "running" | "starting"))
            .then(|| String::from_utf8_lossy(&last_lines(dir, 20, 4096)).into_owned()),
        state,
        writes,
    }
}

/// The last `lines` lines of a service's output, at most `max` bytes of them.
fn last_lines(dir: &Path, lines: usize, max: usize) -> Vec<u8> {
    let mut bytes = std::fs::read(dir.join("log")).unwrap_or_default();
    if bytes.len() < max {
        let mut old = std::fs::read(dir.join("log.1")).unwrap_or_default();
        old.extend(bytes);
        bytes = old;
    }
    let body = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
    let start = body
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, b)| **b == b'\n')
        .nth(lines.saturating_sub(1))
        .map_or(0, |(i, _)| i + 1)
        .max(bytes.len().saturating_sub(max));
    bytes.split_off(start)
}

fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && !name.starts_with('.');
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidName(format!(
            "service name {name:?}: letters, digits, '-', '_' and '.', at most 64, not starting with '.'"
        )))
    }
}

/// Starts a service: decided, checkpointed and confined as a run; returns once it runs
/// (or with the decision that kept it from starting).
pub fn start(ctx: &Context, req: StartRequest) -> Result<(ServiceStarted, i32)> {
    let id = boundary::new_id("svc");
    let name = req.name.clone().unwrap_or_else(|| id.clone());
    check_name(&name)?;
    if req.publish.contains(&0) {
        return Err(Error::InvalidArgument(
            "0".into(),
            "--publish takes a port from 1 to 65535".into(),
        ));
    }
    let mut ex = ExecRequest::new(req.command);
    ex.cwd = req.cwd;
    ex.env = req.env;
    ex.wait = req.wait;
    ex.service = Some(ServiceLaunch {
        id: id.clone(),
        name,
        ttl_secs: req.ttl.map(|t| t.as_secs().max(1)),
        publish: req.publish,
    });
    let out = boundary::exec(ctx, ex)?;
    let env = out.envelope;
    let service = find(ctx, &id).map(|(v, dir, r)| doc(&v, &dir, &r, writes_of(ctx, &v, &r)));
    let started = ServiceStarted {
        decision: env.decision.clone(),
        checkpoint: env.checkpoint.clone(),
        exec: env.id.clone(),
        approval: env.approval.as_ref().map(|a| a.id.clone()),
        service,
    };
    // A service that exited at once fails the start as its command failed (a run's
    // exit status: 128 + N for signal N).
    let code = match &started.service {
        Some(d) if d.state == "exited" => match (d.exit_code, d.signal) {
            (Some(c), _) => c,
            (None, Some(sig)) => 128 + sig,
            _ => 1,
        },
        _ => env.exit_code,
    };
    Ok((started, code))
}

/// The service `id` of the `--vault` workspace.
fn find(ctx: &Context, id: &str) -> Option<(VaultRef, PathBuf, ServiceRecord)> {
    let (v, ws_dir) = workspace(ctx).ok()?;
    let dir = ws_dir.join(id);
    let r = ServiceRecord::read(&dir)?;
    Some((v, dir, r))
}

/// What `r`'s workspace's services wrote while it ran, for the document of a start or a
/// stop: a vault that cannot be read then leaves it empty (the start or stop happened;
/// `service list` reports the error).
fn writes_of(ctx: &Context, v: &VaultRef, r: &ServiceRecord) -> ServiceWrites {
    Writes::read(ctx, v, [r]).map_or_else(|_| ServiceWrites::default(), |w| w.of(r))
}

/// The services of the `--vault` workspace, oldest first.
pub fn list(ctx: &Context) -> Result<Vec<ServiceDoc>> {
    let (v, ws_dir) = workspace(ctx)?;
    let all = proc_service::records(&ws_dir);
    let writes = Writes::read(ctx, &v, all.iter().map(|(_, r)| r))?;
    Ok(all
        .iter()
        .map(|(dir, r)| doc(&v, dir, r, writes.of(r)))
        .collect())
}

/// The service named `which` (a name or an id) of the `--vault` workspace: the running
/// one of that name, else the latest.
fn resolve(ctx: &Context, which: &str) -> Result<(VaultRef, PathBuf, ServiceRecord)> {
    let (v, ws_dir) = workspace(ctx)?;
    let all = proc_service::records(&ws_dir);
    let pick = all
        .iter()
        .rev()
        .find(|(_, r)| r.id == which || (r.name == which && r.live()))
        .or_else(|| all.iter().rev().find(|(_, r)| r.name == which));
    match pick {
        Some((dir, r)) => Ok((v, dir.clone(), r.clone())),
        None => Err(Error::NotFound(format!(
            "service {which} in vault {} (avfs service list shows its services)",
            v.name
        ))),
    }
}

/// The service's output: the last `tail` lines (all that is kept without), and the
/// offset in `log` it ends at (for `follow`).
pub fn logs(ctx: &Context, which: &str, tail: Option<usize>) -> Result<(Vec<u8>, PathBuf, u64)> {
    let (_, dir, _) = resolve(ctx, which)?;
    let mut bytes = std::fs::read(dir.join("log.1")).unwrap_or_default();
    let cur = std::fs::read(dir.join("log")).unwrap_or_default();
    let end = cur.len() as u64;
    bytes.extend(cur);
    if let Some(n) = tail {
        let body = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
        let start = match n {
            0 => bytes.len(),
            n => body
                .iter()
                .enumerate()
                .rev()
                .filter(|(_, b)| **b == b'\n')
                .nth(n - 1)
                .map_or(0, |(i, _)| i + 1),
        };
        bytes.drain(..start);
    }
    Ok((bytes, dir, end))
}

/// Calls `out` with the output the service writes after `offset` in `log`, until it has
/// ended and everything was passed on.
pub fn follow(dir: &Path, mut offset: u64, mut out: impl FnMut(&[u8]) -> bool) -> Result<()> {
    let path = dir.join("log");
    loop {
        let ended = ServiceRecord::read(dir).is_none_or(|r| !r.live());
        let mut f = std::fs::File::open(&path).map_err(|e| Error::host(path.display(), e))?;
        let len = f.metadata().map_or(0, |m| m.len());
        if len < offset {
            // Rotated: the rest of the old log is in log.1, read from where we were.
            if let Ok(mut old) = std::fs::File::open(dir.join("log.1")) {
                let mut rest = vec![];
                let _ = old.seek(SeekFrom::Start(offset));
                let _ = old.read_to_end(&mut rest);
                if !rest.is_empty() && !out(&rest) {
                    return Ok(());
                }
            }
            offset = 0;
        }
        let mut buf = vec![];
        let _ = f.seek(SeekFrom::Start(offset));
        let _ = f.read_to_end(&mut buf);
        offset += buf.len() as u64;
        if !buf.is_empty() && !out(&buf) {
            return Ok(());
        }
        if ended {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn audit_stop(v: &VaultRef, r: &ServiceRecord, action: &str) -> Result<()> {
    let mut store = Store::open(&v.path)?;
    let detail = json!({"service": {"id": r.id, "name": r.name, "pid": r.pid,
        "state": r.current_state(), "exit_code": r.exit_code, "signal": r.signal}});
    store.write(|db| audit::append(db, Some(&r.workspace), audit::cli_actor(), action, &detail))?;
    Ok(())
}

/// Stops a service (SIGTERM to its processes, SIGKILL after 2 s) and returns it as it
/// ended.
pub fn stop(ctx: &Context, which: &str) -> Result<ServiceStopped> {
    let (v, dir, _) = resolve(ctx, which)?;
    let stopped = proc_service::stop(&dir, None);
    let r = ServiceRecord::read(&dir)
        .ok_or_else(|| Error::Internal("the service's record is gone".into()))?;
    if stopped {
        audit_stop(&v, &r, "service.stop")?;
    }
    Ok(ServiceStopped {
        service: doc(&v, &dir, &r, writes_of(ctx, &v, &r)),
        stopped,
    })
}

/// Stops a service (if it runs) and starts its command again, with the same name,
/// environment, working directory and ttl.
pub fn restart(ctx: &Context, which: &str) -> Result<(ServiceStarted, i32)> {
    let (_, dir, r) = resolve(ctx, which)?;
    proc_service::stop(&dir, None);
    let command = match r.command.as_slice() {
        [b, c, line] if b == "bash" && c == "-c" => Command::Shell(line.clone()),
        a => Command::Argv(a.to_vec()),
    };
    start(
        ctx,
        StartRequest {
            command,
            name: Some(r.name.clone()),
            env: r.env.clone(),
            cwd: r.cwd.clone(),
            ttl: r.ttl_secs.map(Duration::from_secs),
            publish: r.published.clone(),
            wait: None,
        },
    )
}

/// Ends every service of a workspace that is going away (`vault delete`, fork deletion)
/// and removes their records; returns how many were running. Their supervisors would
/// end them too (the vault file or the kept overlay goes), but only within a poll: this
/// is done before the workspace goes, synchronously.
pub fn end_all(home: &Path, vault_file: &Path, workspace: &str) -> usize {
    let dir = proc_service::workspace_dir(home, &crate::mount::mount_id(vault_file, workspace));
    let n = proc_service::stop_all(&dir, "its workspace was deleted");
    let _ = std::fs::remove_dir_all(&dir);
    n
}
