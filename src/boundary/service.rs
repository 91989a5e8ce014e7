//! The boundary's end of `avfs service start`: once the policy has decided and the run
//! is prepared as any run is (lock, checkpoint, the kept overlay, the sandbox's plan and
//! cgroup), the set-up is handed to a supervisor (`sandbox::service`) instead of being
//! waited for. The service runs in the workspace's kept overlay, so it sees what runs
//! change and runs see what it writes.

use std::path::{Path, PathBuf};

use crate::engine::overlay::OverlayRun;
use crate::error::{Error, Result};
use crate::registry::VaultRef;
use crate::sandbox::RunPlan;
use crate::sandbox::service::{self as proc_service, ServiceRecord, SupervisorPlan};

use super::{Command, ExecRequest, ServiceLaunch};

/// The service directories of a workspace.
pub fn workspace_dir(home: &Path, v: &VaultRef) -> PathBuf {
    proc_service::workspace_dir(home, &crate::mount::mount_id(&v.path, &v.workspace))
}

pub(super) fn needs_overlay() -> Error {
    Error::SandboxUnavailable(
        "a service runs in the workspace's kept overlay: it needs the overlay engine, run \
         as root, without AVFS_KEEP_OVERLAY=0 and outside an ephemeral fork"
            .into(),
    )
}

pub(super) struct Start<'a> {
    pub v: &'a VaultRef,
    pub launch: &'a ServiceLaunch,
    pub req: &'a ExecRequest,
    pub plan: &'a RunPlan,
    pub plan_json: String,
    pub cgroups: Vec<PathBuf>,
    pub services_dir: &'a Path,
    /// The supervisor forked ahead (`exec::supervisor`); None: `avfs __avfs-service`.
    pub supervisor: Option<crate::exec::supervisor::Supervisor>,
    /// The run's id.
    pub exec_id: &'a str,
}

/// Records the service and starts its supervisor; returns the service's PID 1 (as the
/// host sees it) once it runs.
pub(super) fn start(s: Start, orun: &OverlayRun) -> Result<i32> {
    let Some((keeper, kept_record)) = orun.kept_keeper() else {
        return Err(needs_overlay());
    };
    if s.plan.confine.is_none() {
        return Err(Error::Refused(
            "a service runs in the sandbox (it shares the workspace's loopback with its runs); \
             --no-sandbox is for runs"
                .into(),
        ));
    }
    let taken = proc_service::records(s.services_dir)
        .into_iter()
        .any(|(_, r)| r.name == s.launch.name && r.live());
    if taken {
        return Err(Error::Exists(format!(
            "service {} is running in workspace {} (stop it first, or give another --name)",
            s.launch.name, s.v.name
        )));
    }
    let dir = s.services_dir.join(&s.launch.id);
    std::fs::create_dir_all(&dir).map_err(|e| Error::host(dir.display(), e))?;
    let command = match &s.req.command {
        Command::Argv(a) => a.clone(),
        Command::Shell(line) => vec!["bash".into(), "-c".into(), line.clone()],
    };
    let rec = ServiceRecord {
        id: s.launch.id.clone(),
        name: s.launch.name.clone(),
        vault_path: s.v.path.clone(),
        workspace: s.v.workspace.clone(),
        command,
        cwd: s.req.cwd.clone(),
        env: s.req.env.clone(),
        ttl_secs: s.launch.ttl_secs,
        started_at_ns: crate::store::now_ns(),
        state: "starting".into(),
        supervisor: None,
        starter: proc_service::ProcId::of(std::process::id() as i32),
        setup: None,
        pid: None,
        exit_code: None,
        signal: None,
        ended_at_ns: None,
        end_reason: None,
        cgroups: s.cgroups.clone(),
        published: s.launch.publish.clone(),
    };
    rec.write(&dir).map_err(|e| Error::host(dir.display(), e))?;
    let plan = SupervisorPlan {
        dir: dir.clone(),
        setup_plan: s.plan_json.clone(),
        vault: std::path::absolute(&s.v.path).unwrap_or(s.v.path.clone()),
        kept_record,
        keeper,
        ttl_secs: s.launch.ttl_secs,
        early_ms: std::env::var("AVFS_SERVICE_EARLY_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(proc_service::EARLY_EXIT_MS)
            .min(10_000),
        publish: s.launch.publish.clone(),
    };
    match s.supervisor {
        Some(sup) => sup.launch(&plan, s.exec_id),
        None => proc_service::launch(&plan),
    }
    .map_err(|e| Error::SandboxUnavailable(e.to_string()))?;
    let rec = ServiceRecord::read(&dir)
        .ok_or_else(|| Error::Internal("the service's record is gone".into()))?;
    Ok(rec.pid.or(rec.setup.map(|p| p.pid)).unwrap_or(0))
}
