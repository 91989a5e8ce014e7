//! Step 2-5 of the boundary: lock, checkpoint, run through an engine at the stable
//! path, take the changes in, report, roll back, audit.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::Connection;
use serde_json::json;

use super::place::{self, Place};
use super::report::{self, Layered};
use super::watchdog::Watchdog;
use super::{CheckpointMode, Command, ExecRequest, audit_record};
use crate::context::Context;
use crate::diff::{Change, diff_roots};
use crate::engine::fuse::{MountGuard, exec_mountpoint, quota_refusals};
use crate::engine::ignored::{self, IgnoredCount};
use crate::engine::ingest::{IngestOptions, Ingested, Stored};
use crate::engine::overlay::{self, OverlayRun};
use crate::engine::{EngineInfo, EngineKind, IngestInfo, LayersInfo};
use crate::error::{Error, Result};
use crate::exec::EXIT_TIMED_OUT;
use crate::exec::envelope::Envelope;
use crate::exec::outputs::OutputFiles;
use crate::exec::policy::{Action, Decision, Policy};
use crate::exec::runner::{self, RunSpec};
use crate::procs;
use crate::registry::{Registry, VaultRef};
use crate::runlock::{DEFAULT_WAIT, Holder, RunLock};
use crate::sandbox::{self, RunPlan, View};
use crate::store::objects::{Hash, Kind};
use crate::store::{Store, audit};
use crate::workspace::Workspace;

pub(super) struct Job<'a> {
    pub ctx: &'a Context,
    pub reg: &'a Registry,
    pub base: &'a VaultRef,
    pub place: Place,
    pub req: &'a ExecRequest,
    pub cwd: &'a [String],
    pub decision: &'a Decision,
    pub policy: &'a Policy,
    /// Sandboxed: whether the network is granted, and by what. `None`: no sandbox.
    pub network: Option<(bool, Option<String>)>,
    /// The workspace's stable path.
    pub ws_path: &'a Path,
    /// The vault file, open (forks are workspaces of the same file).
    pub store: Store,
}

/// How an overlay run's upper is read (see `IngestOptions`).
#[derive(Clone, Copy, Debug)]
pub struct IngestRequest {
    pub keep_owners: bool,
    pub keep_setuid: bool,
}

/// Where `--shell` lines run: bash, the language the policy reads.
const BASH: &[&str] = &["/bin/bash", "/usr/bin/bash", "/usr/local/bin/bash"];

/// The bash `--shell` runs, or a clear error when there is none.
fn shell() -> Result<&'static str> {
    BASH.iter()
        .copied()
        .find(|p| Path::new(p).is_file())
        .ok_or_else(|| {
            Error::Refused(format!(
                "--shell runs bash (the language the policy reads) and none was found at {}; \
                 install bash or give the command as -- ARGV",
                BASH.join(", ")
            ))
        })
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Locks, makes the fork, runs, and discards an ephemeral fork again. Returns the
/// ephemeral fork's name and whether it was kept.
pub(super) fn run(job: Job, envelope: &mut Envelope) -> Result<Option<(String, bool)>> {
    let ctx = job.ctx;
    let lock_ws = match &job.place {
        Place::Existing(v) => v.workspace.clone(),
        Place::NewFork(n) | Place::Ephemeral(n) => n.clone(),
    };
    let holder = Holder {
        exec: envelope.id.clone(),
        pid: std::process::id(),
        command: match &job.req.command {
            Command::Shell(s) => s.clone(),
            Command::Argv(a) => a.join(" "),
        },
        started_at_ns: crate::store::now_ns(),
    };
    let lock = RunLock::acquire(
        &ctx.home,
        &job.base.path,
        &lock_ws,
        &holder,
        job.req.wait.unwrap_or(DEFAULT_WAIT),
    )?;
    // From here on, if this process dies, the watchdog finishes for it.
    let dog = Watchdog::start(&ctx.home, &envelope.id, job.base, Some(lock.raw_fd()))?;
    let keep = job.req.keep;
    if let (Place::Ephemeral(name), false) = (&job.place, keep) {
        dog.tell(json!({"ephemeral": name}));
    }
    let (v, ephemeral) = place::create(ctx, job.reg, job.base, job.place)?;
    let store = if v.path == job.base.path {
        job.store
    } else {
        Store::open(&v.path)?
    };
    dog.tell(json!({"workspace": {"name": v.name, "path": v.path, "workspace": v.workspace}}));
    envelope.request.vault = v.name.clone();
    envelope.request.workspace = v.workspace.clone();
    let r = run_in(
        &JobIn {
            ctx,
            req: job.req,
            cwd: job.cwd,
            decision: job.decision,
            policy: job.policy,
            network: job.network,
            ws_path: job.ws_path,
            dog: &dog,
        },
        &v,
        store,
        envelope,
    );
    if ephemeral && !keep {
        // Also when the run failed: an ephemeral fork never outlives its command, and
        // its checkpoints go with it: the rest of the list cannot be paged.
        envelope.changes_page.after = None;
        envelope.changes_page.rest = None;
        let gone = place::discard(ctx, &v);
        r?;
        gone?;
    } else {
        r?;
    }
    drop(dog);
    drop(lock);
    Ok(ephemeral.then(|| (v.name.clone(), keep)))
}

struct JobIn<'a> {
    ctx: &'a Context,
    req: &'a ExecRequest,
    cwd: &'a [String],
    decision: &'a Decision,
    policy: &'a Policy,
    network: Option<(bool, Option<String>)>,
    ws_path: &'a Path,
    dog: &'a Watchdog,
}

/// The engine's side of one run.
enum Prepared {
    Overlay(Box<OverlayRun>, LayersInfo),
    Fuse(MountGuard),
}

/// The working directory must be a real directory of the workspace: following a symlink
/// (`sub -> /etc`) would start the command outside it.
fn check_cwd(db: &Connection, root: &Hash, cwd: &[String], shown: &str) -> Result<()> {
    let mut comps: Vec<Vec<u8>> = vec![];
    for c in cwd {
        comps.push(c.as_bytes().to_vec());
        let what = || format!("--cwd {shown} ({c} in the workspace)");
        match crate::workspace::flush::entry_at(db, root, &comps)? {
            Some(e) if e.kind == Kind::Dir => {}
            Some(_) => return Err(Error::NotADirectory(what())),
            None => return Err(Error::NotFound(what())),
        }
    }
    Ok(())
}

fn run_in(job: &JobIn, v: &VaultRef, mut store: Store, envelope: &mut Envelope) -> Result<()> {
    let ctx = job.ctx;
    let req = job.req;
    let (engine, reason) = crate::engine::choose(&ctx.home, req.engine)?;
    let ws_path = job.ws_path.to_path_buf();
    envelope.workspace_path = Some(ws_path.display().to_string());
    envelope.mountpoint = Some(ws_path.display().to_string());
    let want_checkpoint = match req.checkpoint {
        CheckpointMode::Never => false,
        CheckpointMode::Always => true,
        CheckpointMode::Auto => {
            req.rollback_on_failure || job.decision.action == Action::AllowWithCheckpoint
        }
    };
    // Sandbox settings are checked before the checkpoint: a plan that fails leaves nothing.
    let confinement = job.network.clone().map(|(network, granted_by)| {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        sandbox::confinement(&sandbox::Request {
            config: &job.policy.sandbox,
            network,
            network_granted_by: granted_by,
            workspace: &ws_path,
            avfs_home: &ctx.home,
            vault_file: &v.path,
            home: home.as_deref().filter(|h| h.is_absolute()),
            host_var: &|k| std::env::var_os(k),
            root: is_root(),
            limits: req.limits.apply(job.policy.sandbox.limits),
        })
    });
    // The run's cgroup (pids, memory): made before it starts, removed when it is over.
    let (confinement, _cgroup) = match confinement {
        Some((mut c, mut info)) => {
            let limits = req.limits.apply(job.policy.sandbox.limits);
            let (cg, limits_info) = sandbox::limits::RunCgroup::create(&envelope.id, &limits);
            if let Some(cg) = &cg {
                c.cgroup_procs = cg.procs_files();
            }
            info.limits = Some(limits_info);
            (Some((c, info)), cg)
        }
        None => (None, None),
    };
    // The set-up starts joining the cgroup now, while the checkpoint is taken and the
    // workspace prepared (`exec::early`): on cgroup v1 a join waits 10-20 ms.
    // A service's supervisor is forked now instead, and forks that set-up itself
    // (`exec::supervisor`): the set-up must be its child.
    let (early, supervisor) = match (&confinement, &_cgroup) {
        (Some((c, _)), Some(cg)) => {
            // A set-up in a user namespace (not root) mounts the caches there.
            let caches = if is_root() { &c.root.caches[..] } else { &[] };
            if req.service.is_some() {
                let s = crate::exec::supervisor::Supervisor::fork(&cg.procs_files(), caches);
                (None, s)
            } else {
                (
                    crate::exec::early::Early::start(&cg.procs_files(), caches),
                    None,
                )
            }
        }
        _ => (None, None),
    };
    envelope.sandbox = match &confinement {
        Some((_, info)) => info.clone(),
        None => crate::sandbox::SandboxInfo::unenforced(),
    };
    // What the workspace's services wrote since its last run is theirs, not this run's.
    if matches!(engine, EngineKind::Overlay) && req.service.is_none() {
        let opts = IngestRequest {
            keep_owners: is_root(),
            keep_setuid: req.keep_setuid && is_root(),
        };
        envelope.service_changes =
            super::service_writes::take_in(ctx, v, &mut store, &envelope.id, &req.report, opts)?;
    }
    ctx.sync_mount(v)?;
    // `avfs shell` keeps its own names: a `shell-...` checkpoint of origin `shell`, and
    // `shell.enter`/`shell.exit` audit rows.
    let (cp_name, origin) = if req.interactive {
        (format!("shell-{}", &envelope.id[3..]), "shell")
    } else {
        (format!("exec-{}", &envelope.id[3..]), "exec")
    };
    let shown = envelope.request.command.shell.clone().unwrap_or_else(|| {
        envelope
            .request
            .command
            .argv
            .clone()
            .unwrap_or_default()
            .join(" ")
    });
    let shown_cwd = envelope.request.cwd.clone();
    let (before, checkpoint, parent) = store.write(|db| {
        let mut ws = Workspace::open(db, &v.workspace)?;
        let root = ws.flush()?;
        // The state before must outlive whatever changes the live state during the run
        // (a mount's writes let reclaim take it): the change report diffs against it.
        crate::store::pins::pin(db, &envelope.id, &root)?;
        check_cwd(db, &root, job.cwd, &shown_cwd)?;
        let parent = ws.info.parent.clone();
        let message = if req.interactive {
            "on entering avfs shell".to_string()
        } else {
            format!("before: {shown}")
        };
        let r = if want_checkpoint {
            let s = ws.checkpoint(Some(&cp_name), Some(&message), origin)?;
            (s.checkpoint.root, Some(s.checkpoint.name), parent)
        } else {
            (root, None, parent)
        };
        if req.interactive {
            audit::append(
                db,
                Some(&v.workspace),
                crate::store::audit::cli_actor(),
                "shell.enter",
                &json!({"checkpoint": r.1, "shell": shown, "exec": envelope.id}),
            )?;
        }
        Ok(r)
    })?;
    envelope.checkpoint = checkpoint.clone();
    if let Some(cp) = &checkpoint {
        job.dog
            .tell(json!({"checkpoint": cp, "rollback": req.rollback_on_failure}));
    }
    let keep_owners = is_root();
    let keep_setuid = req.keep_setuid && is_root();
    let prepared = match engine {
        EngineKind::Overlay => {
            let started = Instant::now();
            let mut hints = vec![];
            hints.extend(overlay::last_root(&ctx.home, &v.path, &v.workspace));
            if let Some(p) = &parent {
                hints.extend(overlay::last_root(&ctx.home, &v.path, p));
            }
            job.dog.tell(
                json!({"run": envelope.id, "keep_owners": keep_owners, "keep_setuid": keep_setuid}),
            );
            let ignored_dir = ignored::ensure(&ctx.home, &v.path, &v.workspace, parent.as_deref())?;
            let site = overlay::RunSite {
                home: &ctx.home,
                id: &envelope.id,
                vault_path: &v.path,
                workspace: &v.workspace,
                ignored: Some(&ignored_dir),
            };
            // An ephemeral fork runs once: nothing to keep its overlay for. The ignored
            // directory is the kept overlay's topmost lower too: a run that wrote ignored
            // files ends the keeper before they move there (`separate_ignored`), and with
            // it the workspace's services (their end says so).
            let keep = crate::engine::kept::enabled() && !req.ephemeral;
            if !keep && crate::engine::kept::enabled() {
                crate::engine::kept::discard(&ctx.home, &v.path, &v.workspace);
            }
            let run = store.read(|db| {
                if keep {
                    OverlayRun::prepare_kept(&site, db, &before, &hints, keep_owners)
                } else {
                    OverlayRun::prepare(&site, db, &before, &hints, keep_owners)
                }
            })?;
            let info = LayersInfo {
                how: run.record.stack.how.clone(),
                written: run.record.stack.written,
                depth: run.record.stack.layers.len(),
                prepare_ms: started.elapsed().as_millis() as u64,
            };
            Prepared::Overlay(Box::new(run), info)
        }
        EngineKind::Fuse => {
            // The watchdog learns where exec's own mount will be before it exists: exec
            // may die while the server is starting.
            job.dog
                .tell(json!({"mountpoint": exec_mountpoint(&ctx.home, &envelope.id)}));
            let m = MountGuard::acquire(&ctx.home, v, &envelope.id)?;
            if let Some(pid) = m.server {
                job.dog.tell(json!({"server": pid}));
            }
            Prepared::Fuse(m)
        }
    };
    let view = match &prepared {
        Prepared::Overlay(run, _) => run.view(),
        Prepared::Fuse(m) => View::Bind {
            source: m.mountpoint.clone(),
        },
    };
    // A mount made for this run has refused nothing yet.
    let quota_before = match &prepared {
        Prepared::Fuse(m) if !m.is_ours() => quota_refusals(m.socket.as_deref()),
        _ => Some((0, String::new())),
    };
    let mut fixed = vec![
        ("AVFS_VAULT".to_string(), v.name.clone()),
        ("AVFS_WORKSPACE".to_string(), v.workspace.clone()),
        (
            "AVFS_WORKSPACE_PATH".to_string(),
            ws_path.display().to_string(),
        ),
        (
            "AVFS_CHECKPOINT".to_string(),
            checkpoint.clone().unwrap_or_default(),
        ),
        (procs::MARKER.to_string(), envelope.id.clone()),
    ];
    fixed.extend(req.env.iter().cloned());
    let env = match &confinement {
        Some(_) => sandbox::environment(&job.policy.sandbox, std::env::vars_os(), &fixed),
        None => {
            let mut e: Vec<(String, String)> = std::env::vars()
                .filter(|(k, _)| !fixed.iter().any(|(f, _)| f == k))
                .filter(|(k, _)| k != sandbox::setup::PLAN_VAR)
                // bash runs the file these name before the line: code the policy never saw.
                .filter(|(k, _)| k != "BASH_ENV" && k != "ENV")
                .collect();
            e.extend(fixed.iter().cloned());
            e
        }
    };
    let argv: Vec<OsString> = match &req.command {
        // The policy reads bash: the line runs in bash, never in a shell that reads it
        // otherwise (dash runs `echo $'\'; CMD #\''` as two commands).
        Command::Shell(s) => vec![shell()?.into(), "-c".into(), s.into()],
        Command::Argv(a) => a.iter().map(OsString::from).collect(),
    };
    let mut cwd_path = ws_path.clone();
    for c in job.cwd {
        cwd_path.push(c);
    }
    // SAFETY: getuid/getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    // The workspace's runs and services share one loopback: the network namespace of a
    // running service (the first service makes a fresh one, as a run does).
    let services_dir = super::service::workspace_dir(&ctx.home, v);
    let plan = RunPlan {
        net_of: sandbox::service::network_of(&services_dir),
        workspace: ws_path.clone(),
        view,
        cwd: cwd_path,
        argv,
        env,
        user_namespace: !is_root(),
        uid,
        gid,
        confine: confinement.map(|(c, _)| c),
        interactive: req.interactive,
    };
    let plan_json = serde_json::to_string(&plan).expect("run plan serializes");
    if let Some(launch) = &req.service {
        let Prepared::Overlay(orun, layers) = prepared else {
            return Err(super::service::needs_overlay());
        };
        let cgroup = _cgroup.map(|c| c.keep()).unwrap_or_default();
        let started = super::service::start(
            super::service::Start {
                v,
                launch,
                req,
                plan: &plan,
                plan_json,
                cgroups: cgroup,
                services_dir: &services_dir,
                supervisor,
                exec_id: &envelope.id,
            },
            &orun,
        );
        orun.leave_kept();
        store.write(|db| crate::store::pins::unpin(db, &envelope.id))?;
        let pid = started?;
        envelope.engine = Some(EngineInfo {
            name: engine.name(),
            reason,
            layers: Some(layers),
            ingest: None,
        });
        envelope.exit_code = 0;
        let mut record = audit_record(envelope);
        record["service"] = json!({"id": launch.id, "name": launch.name, "pid": pid, "ttl_secs": launch.ttl_secs, "publish": launch.publish});
        store
            .write(|db| audit::append(db, Some(&v.workspace), "exec", "service.start", &record))?;
        return Ok(());
    }
    let init = std::env::current_exe()
        .map_err(|e| Error::host("locating the avfs binary for the run", e))?;
    let program: OsString = if Path::new("/proc/self/exe").exists() {
        "/proc/self/exe".into()
    } else {
        init.into_os_string()
    };
    let args = vec![OsString::from(sandbox::RUN_INIT_ARG)];
    let spawn_env = vec![(sandbox::setup::PLAN_VAR.to_string(), plan_json)];
    // The whole output, kept for `avfs output` (an interactive run's goes to the
    // terminal). A home that cannot hold it does not stop the run: the envelope has the
    // head and tail.
    let outputs = (!req.interactive)
        .then(|| OutputFiles::create(&ctx.home, &v.path, &v.workspace, &envelope.id).ok())
        .flatten();
    let spec = RunSpec {
        program: &program,
        args: &args,
        cwd: Path::new("/"),
        env: &spawn_env,
        timeout: req.timeout,
        grace: Duration::from_secs(2),
        capture: req.report.output,
        outputs: outputs.as_ref(),
        stream: req.stream,
        sandboxed: true,
        interactive: req.interactive,
        // The runner also sets AVFS_EXEC_ID, the marker of the command's processes.
        id: &envelope.id,
        adopt_children: true,
        on_start: Some(&|pgid| job.dog.tell(json!({"pgid": pgid}))),
        setup: Some(&plan),
        early: early.as_ref(),
    };
    let mut run = runner::run(&spec);
    if let Some(o) = outputs {
        let (out, err) = run
            .as_ref()
            .map_or((0, 0), |r| (r.stdout_bytes, r.stderr_bytes));
        o.finish(out, err);
    }
    // Not handed the run (the runner started its set-up another way): ended here.
    drop(early);
    if let Ok(r) = &run {
        job.dog
            .tell(json!({"finished": true, "failed": r.timed_out || r.exit_code != Some(0)}));
    }
    let failed = match &run {
        Ok(r) => r.timed_out || r.exit_code != Some(0),
        Err(_) => true,
    };
    let rollback = req.rollback_on_failure && failed && checkpoint.is_some();
    // Whatever happened, report what changed: a diff of the workspace's roots.
    let mut engine_info = EngineInfo {
        name: engine.name(),
        reason,
        layers: None,
        ingest: None,
    };
    let mut ignored_count = IgnoredCount::default();
    let changes = match prepared {
        Prepared::Overlay(orun, layers) => {
            engine_info.layers = Some(layers);
            let started = Instant::now();
            let opts = IngestRequest {
                keep_owners,
                keep_setuid,
            };
            ctx.sync_mount(v)?;
            let taken = store
                .read(|db| orun.separate_ignored(db))
                .and_then(|count| {
                    ignored_count = count;
                    orun.store_upper(&mut store)
                })
                .and_then(|stored| {
                    store.write(|db| {
                        take_in_tx(db, &v.workspace, &orun, Some(stored), opts, !rollback)
                    })
                });
            if taken.is_err() {
                // Content stored ahead of a failed ingest is garbage: let reclaim have it.
                let _ = store.write(|db| crate::store::pins::unpin(db, &orun.ingest_pin()));
            }
            match taken {
                Ok((ing, changes)) => {
                    engine_info.ingest = Some(IngestInfo {
                        files_read: ing.files_read,
                        bytes_read: ing.bytes_read,
                        files_unchanged: ing.files_unchanged,
                        chunks_reused: ing.chunks_reused,
                        ms: started.elapsed().as_millis() as u64,
                        skipped: ing.skipped.clone(),
                    });
                    let (layered, current) = store.write(|db| {
                        let layered = layer_in_tx(
                            db,
                            v,
                            changes,
                            req,
                            &envelope.id,
                            checkpoint.as_deref(),
                            rollback,
                        )?;
                        let mut ws = Workspace::open(db, &v.workspace)?;
                        Ok((layered, ws.flush()?))
                    })?;
                    overlay::remember_root(&ctx.home, &v.path, &v.workspace, &current);
                    orun.finish(&ctx.home, Some(&ing), Some(&current));
                    ctx.invalidate_mount(v)?;
                    layered
                }
                Err(Error::Quota(msg)) => {
                    // Nothing was taken in; the run's files stay for a person to look at.
                    let kept = orun.keep_for_inspection().display().to_string();
                    if let Ok(r) = &mut run {
                        r.quota_refused = Some(runner::QuotaRefused {
                            refusals: 1,
                            message: format!(
                                "quota exceeded: {msg}; none of the run's changes were taken in (its files are kept in {kept})"
                            ),
                        });
                    }
                    store.read(|db| report::layer(db, vec![], &req.report))?
                }
                Err(e) => {
                    // Nothing was taken in. The run's files are set aside (a kept overlay
                    // is retired with them), so that the next run starts from the
                    // workspace's head instead of failing on the same upper; the audit
                    // records the run and where its files are.
                    let kept = orun.keep_for_inspection().display().to_string();
                    let detail = json!({"exec": envelope.id, "command": envelope.request.command,
                        "checkpoint": envelope.checkpoint, "error": e.to_string(), "files_kept_in": kept});
                    store.write(|db| {
                        audit::append(
                            db,
                            Some(&v.workspace),
                            "exec",
                            "exec.ingest_failed",
                            &detail,
                        )
                    })?;
                    return Err(match e {
                        Error::Host { what, message } => Error::Host {
                            what,
                            message: format!(
                                "{message}; none of the run's changes were taken in (its files are kept in {kept})"
                            ),
                        },
                        other => other,
                    });
                }
            }
        }
        Prepared::Fuse(mount) => {
            if let (Ok(r), Some((n, message))) = (&mut run, quota_refusals(mount.socket.as_deref()))
            {
                let refusals = n.saturating_sub(quota_before.map_or(0, |b| b.0));
                if refusals > 0 {
                    r.quota_refused = Some(runner::QuotaRefused { refusals, message });
                }
            }
            ctx.sync_mount(v)?;
            drop(mount);
            let changes = store.write(|db| {
                let mut ws = Workspace::open(db, &v.workspace)?;
                let after = ws.flush()?;
                let changes = diff_roots(db, &before, &after)?;
                let layered = layer_in_tx(
                    db,
                    v,
                    changes,
                    req,
                    &envelope.id,
                    checkpoint.as_deref(),
                    rollback,
                )?;
                Ok(layered)
            })?;
            if rollback {
                ctx.invalidate_mount(v)?;
            }
            changes
        }
    };
    store.write(|db| crate::store::pins::unpin(db, &envelope.id))?;
    envelope.engine = Some(engine_info);
    if rollback {
        envelope.rollback.performed = true;
        envelope.rollback.checkpoint = checkpoint.clone();
    }
    let Layered {
        changes,
        summary,
        mut page,
    } = changes;
    if let (Some(b), Some(a)) = (&page.before, &page.after) {
        page.rest = Some(report::rest_command(
            &v.name,
            b,
            a,
            page.shown,
            req.report.max_changes,
        ));
    }
    envelope.change_summary = summary;
    envelope.change_summary.ignored = ignored_count;
    envelope.changes = changes;
    envelope.changes_page = page;
    let r = run?;
    envelope.exit_code = if r.timed_out {
        EXIT_TIMED_OUT
    } else {
        r.exit_code.unwrap_or_else(|| 128 + r.signal.unwrap_or(0))
    };
    envelope.result = Some(r);
    if req.interactive {
        let detail = json!({"checkpoint": envelope.checkpoint, "exit_code": envelope.exit_code,
            "summary": envelope.change_summary, "exec": envelope.id, "engine": envelope.engine,
            "sandbox": envelope.sandbox});
        store.write(|db| {
            audit::append(
                db,
                Some(&v.workspace),
                crate::store::audit::cli_actor(),
                "shell.exit",
                &detail,
            )
        })?;
        return Ok(());
    }
    let record = audit_record(envelope);
    store.write(|db| audit::append(db, Some(&v.workspace), "exec", "exec.run", &record))?;
    crate::history::prune::after_run(&mut store, &v.workspace);
    Ok(())
}

/// Shapes the changes for the envelope (see `report`). When the list is cut and a
/// checkpoint holds the state before, the state after is checkpointed too, in the
/// run's own transaction, so that `avfs diff` between the two pages exactly this list.
/// With `rollback`, the workspace then goes back to the checkpoint before, in the same
/// transaction (both engines end this way).
fn layer_in_tx(
    db: &Connection,
    v: &VaultRef,
    changes: Vec<Change>,
    req: &ExecRequest,
    id: &str,
    before: Option<&str>,
    rollback: bool,
) -> Result<Layered> {
    let mut l = report::layer(db, changes, &req.report)?;
    l.page.before = before.map(String::from);
    if l.page.truncated && !rollback && before.is_some() && !req.interactive {
        let mut ws = Workspace::open(db, &v.workspace)?;
        let name = format!("exec-{}-after", &id[3..]);
        let s = ws.checkpoint(
            Some(&name),
            Some("after the run (its envelope lists only part of the changes)"),
            "exec",
        )?;
        l.page.after = Some(s.checkpoint.name);
    }
    if rollback {
        let mut ws = Workspace::open(db, &v.workspace)?;
        let cp = ws.find_checkpoint(before.unwrap_or_default())?;
        ws.restore(&cp)?;
    }
    Ok(l)
}

/// Ingests an overlay run's upper and (with `apply`) makes the result the workspace's
/// live state, in the caller's transaction; returns the ingest and the run's changes.
/// Over a quota, the whole transaction fails with `Error::Quota`.
pub(crate) fn take_in_tx(
    db: &Connection,
    workspace: &str,
    run: &OverlayRun,
    stored: Option<Stored>,
    opts: IngestRequest,
    apply: bool,
) -> Result<(Ingested, Vec<Change>)> {
    let ing = run.ingest(
        db,
        stored,
        IngestOptions {
            keep_owners: opts.keep_owners,
            keep_setuid: opts.keep_setuid,
        },
    )?;
    // What was stored ahead is referenced from here on (or, not applied, garbage).
    crate::store::pins::unpin(db, &run.ingest_pin())?;
    let changes = diff_roots(db, &run.head_root, &ing.root)?;
    if apply && ing.root != run.head_root {
        let mut ws = Workspace::open(db, workspace)?;
        let before = ws.quota_baseline()?;
        let current = ws.flush()?;
        if current == run.head_root {
            ws.set_root(&ing.root)?;
        } else {
            ws.apply_diff(&run.head_root, &ing.root)?;
        }
        ws.check_quota(&before)?;
    }
    Ok((ing, changes))
}

/// `take_in_tx` in a transaction of its own, with a live mount kept consistent (the
/// watchdog's way).
pub(crate) fn take_in(
    ctx: &Context,
    v: &VaultRef,
    run: &OverlayRun,
    opts: IngestRequest,
) -> Result<(Ingested, Vec<Change>)> {
    ctx.sync_mount(v)?;
    let mut store = Store::open(&v.path)?;
    store.read(|db| run.separate_ignored(db))?;
    let r = store.write(|db| take_in_tx(db, &v.workspace, run, None, opts, true))?;
    ctx.invalidate_mount(v)?;
    let root = store.read(|db| Workspace::open(db, &v.workspace).map(|w| w.info.base_root))?;
    overlay::remember_root(&ctx.home, &v.path, &v.workspace, &root);
    Ok(r)
}
