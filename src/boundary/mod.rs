//! The boundary every command of an agent crosses: request in, envelope out.
//!
//! 1. decide (the policy), and stop there for `deny` and `require_approval`;
//! 2. take the workspace's run lock (one run at a time per workspace; forks in parallel);
//! 3. checkpoint when the decision or the request asks;
//! 4. run through an engine (overlay, or FUSE as the fallback) at the workspace's stable
//!    path, in the sandbox unless `--no-sandbox`, with a timeout and bounded output;
//! 5. take the changes in (ingest), report exactly what changed, roll back on failure
//!    when asked, and record the run in the audit log.
//!
//! The CLI, `avfs shell` and the MCP server (through the CLI) all call `exec`; the CLI
//! only parses arguments and prints the envelope. A watchdog process finishes the work
//! (ingest or roll back, discard, audit) if the calling process dies.

pub mod approvals;
pub mod links;
mod place;
pub mod report;
mod run;
pub mod service;
mod service_writes;
mod spawn;
pub mod watchdog;
mod watchdog_fork;

use std::path::PathBuf;
use std::time::Duration;

use crate::context::Context;
use crate::engine::EngineKind;
use crate::error::{Error, Result};
use crate::exec::envelope::{
    self, ApprovalInfo, ChangesPage, Envelope, ReportLimits, Rollback, Summary,
};
use crate::exec::policy::{Action, Category, Decision, Policy};
use crate::exec::{EXIT_APPROVAL_REQUIRED, EXIT_DENIED};
use crate::registry::VaultRef;
use crate::sandbox::SandboxInfo;
use crate::store::{Store, approvals as store_approvals, audit};
use crate::workspace::Workspace;

pub use place::Place;
pub use service_writes::{AUDITED_PATHS, pending_writes};
// The run lock and the stable path live below the boundary (the engine and `status` use
// them too); re-exported so `boundary::lock` and `boundary::path` keep working.
pub use crate::context::path;
pub use crate::runlock as lock;

/// The command of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    Shell(String),
    Argv(Vec<String>),
}

impl Command {
    pub fn is_empty(&self) -> bool {
        match self {
            Command::Shell(_) => false,
            Command::Argv(a) => a.is_empty(),
        }
    }

    pub fn shown(&self) -> String {
        match self {
            Command::Shell(s) => s.clone(),
            Command::Argv(a) => a.join(" "),
        }
    }

    fn envelope(&self) -> envelope::Command {
        match self {
            Command::Shell(s) => envelope::Command {
                kind: "shell",
                argv: None,
                shell: Some(s.clone()),
            },
            Command::Argv(a) => envelope::Command {
                kind: "argv",
                argv: Some(a.clone()),
                shell: None,
            },
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckpointMode {
    /// As the decision says (`allow_with_checkpoint`).
    Auto,
    Always,
    Never,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SandboxMode {
    /// On, unless the policy turns its default off.
    Default,
    /// On (`--sandbox`).
    On,
    /// Off (`--no-sandbox`), unless the policy requires it.
    Off,
}

pub use crate::sandbox::limits::LimitOverrides;

/// One request to run a command.
#[derive(Clone, Debug)]
pub struct ExecRequest {
    pub command: Command,
    /// Directory inside the workspace.
    pub cwd: String,
    pub fork: Option<String>,
    pub ephemeral: bool,
    pub keep: bool,
    pub timeout: Option<Duration>,
    pub env: Vec<(String, String)>,
    pub checkpoint: CheckpointMode,
    pub rollback_on_failure: bool,
    pub approve: Option<String>,
    pub sandbox: SandboxMode,
    pub engine: Option<EngineKind>,
    /// Keep setuid/setgid bits of files the command made (root only).
    pub keep_setuid: bool,
    /// How long to wait for another run of the workspace.
    pub wait: Option<Duration>,
    /// How long to wait for a person to decide, when the line requires approval.
    pub wait_approval: Option<Duration>,
    /// Echo the command's output live (a terminal), besides capturing it.
    pub stream: bool,
    /// `avfs shell`: the terminal goes to the command, nothing is captured.
    pub interactive: bool,
    /// How much of the changes and the output the envelope shows (`--changes`,
    /// `--max-changes`, `--max-patch-bytes`, `--output-head`, `--output-tail`).
    pub report: ReportLimits,
    /// Limits of a sandboxed run given for this one (`--pids-limit`, `--tmp-size`,
    /// `--shm-size`, `--memory`), over the policy's.
    pub limits: LimitOverrides,
    /// `avfs service start`: start the command as a service of the workspace instead of
    /// running it (see `crate::service`).
    pub service: Option<ServiceLaunch>,
}

/// A service to start (`avfs service start`).
#[derive(Clone, Debug)]
pub struct ServiceLaunch {
    pub id: String,
    pub name: String,
    pub ttl_secs: Option<u64>,
    /// Ports of the host's 127.0.0.1 that reach it (`--publish`).
    pub publish: Vec<u16>,
}

impl ExecRequest {
    pub fn new(command: Command) -> ExecRequest {
        ExecRequest {
            command,
            cwd: "/".into(),
            fork: None,
            ephemeral: false,
            keep: false,
            timeout: None,
            env: vec![],
            checkpoint: CheckpointMode::Auto,
            rollback_on_failure: false,
            approve: None,
            sandbox: SandboxMode::Default,
            engine: None,
            keep_setuid: false,
            wait: None,
            wait_approval: None,
            stream: false,
            interactive: false,
            report: ReportLimits::default(),
            limits: LimitOverrides::default(),
            service: None,
        }
    }
}

/// What happened: the envelope, and (for an ephemeral fork) its fate.
pub struct Outcome {
    pub envelope: Envelope,
    /// The ephemeral fork the command ran in, and whether it was kept.
    pub ephemeral: Option<(String, bool)>,
}

pub fn new_id(prefix: &str) -> String {
    let mut h = blake3::Hasher::new();
    h.update(&crate::store::now_ns().to_le_bytes());
    h.update(&std::process::id().to_le_bytes());
    let mut r = [0u8; 8];
    // SAFETY: fills our own buffer.
    unsafe { libc::getrandom(r.as_mut_ptr().cast(), r.len(), 0) };
    h.update(&r);
    format!("{prefix}-{}", &h.finalize().to_hex()[..10])
}

/// `--cwd` as components inside the workspace.
pub fn cwd_components(cwd: &str) -> Result<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for part in cwd.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if out.pop().is_none() {
                    return Err(Error::InvalidArgument(
                        cwd.into(),
                        "--cwd climbs above the workspace root".into(),
                    ));
                }
            }
            p => out.push(p.into()),
        }
    }
    Ok(out)
}

/// The policy files, lowest precedence first: user-wide, the vault's, and (when the
/// command runs in a fork of it) the fork's own. A fork never escapes its vault's policy.
fn policy_files(ctx: &Context, v: &VaultRef, fork: Option<&str>) -> Vec<PathBuf> {
    let mut files = vec![
        ctx.home.join("policy.toml"),
        ctx.home.join("policies").join(format!("{}.toml", v.name)),
    ];
    if let Some(f) = fork.filter(|f| *f != v.name) {
        files.push(ctx.home.join("policies").join(format!("{f}.toml")));
    }
    files
}

pub fn load_policy(ctx: &Context, v: &VaultRef, fork: Option<&str>) -> Result<Policy> {
    let files = policy_files(ctx, v, fork);
    let refs: Vec<&std::path::Path> = files.iter().map(PathBuf::as_path).collect();
    Policy::load(&refs)
}

/// Runs one request through the boundary.
pub fn exec(ctx: &Context, req: ExecRequest) -> Result<Outcome> {
    let id = new_id("ex");
    // An approved request replaces whatever command line was given, and runs in the
    // vault it was asked in.
    let (req, approved) = match &req.approve {
        Some(ap_id) => {
            let (stored, ap, v) = approvals::approved_request(ctx, &req, ap_id)?;
            (stored, Some((ap, v)))
        }
        None => (req, None),
    };
    if req.command.is_empty() {
        return Err(Error::InvalidArgument(
            "command".into(),
            "give --shell \"...\" or -- ARGV...".into(),
        ));
    }
    for (k, _) in &req.env {
        if k.is_empty() || k.contains('=') {
            return Err(Error::InvalidArgument(k.clone(), "--env takes K=V".into()));
        }
    }
    let target = match &approved {
        Some((_, v)) => ctx.with_vault(Some(v.name.clone())),
        None => ctx.clone(),
    };
    let approved = approved.map(|(ap, _)| ap);
    let cwd = cwd_components(&req.cwd)?;
    let (reg, base) = target.target()?;
    let place = place::plan(&reg, &base, &req)?;
    let (planned_vault, planned_ws) = place.names(&base);
    let fork_name = match &place {
        Place::Ephemeral(_) => None,
        _ => Some(planned_vault.as_str()),
    };
    let policy = load_policy(&target, &base, fork_name)?;
    // Where the command will see the workspace: absolute paths below it are its own.
    // Opened once for the whole request (each open checks the file and its stamp): forks
    // live in the same file.
    let mut store = Store::open(&base.path)?;
    let ws_path = store.read(|db| path::workspace_path(db, &target.home, &reg, &base))?;
    let request = envelope::Request {
        command: req.command.envelope(),
        cwd: format!("/{}", cwd.join("/")),
        vault: planned_vault,
        workspace: planned_ws,
        options: approvals::options_json(&req),
    };
    // Sandboxed unless --no-sandbox where the policy allows it.
    let sandboxed = match req.sandbox {
        SandboxMode::Off if policy.sandbox.required => {
            return Err(Error::Refused(format!(
                "--no-sandbox: the policy requires the sandbox ([sandbox] required = true in {})",
                policy.sources.join(", ")
            )));
        }
        SandboxMode::Off => false,
        SandboxMode::On => true,
        SandboxMode::Default => policy.sandbox.default || policy.sandbox.required,
    };
    let mut decision: Decision = if req.interactive {
        // `avfs shell`: a person types the commands; the sandbox still applies.
        let mut d = policy.decide_argv(&["true".to_string()], &cwd, Some(&ws_path));
        d.action = Action::AllowWithCheckpoint;
        d.matched_rule = "interactive".into();
        d.reason = "an interactive shell: a person at the terminal decides".into();
        d
    } else {
        // avfs's own files: a line naming them is denied, sandboxed or not.
        let protected =
            crate::policy::sandboxed::protected(&target.home, Some(&base.path), Some(&ws_path));
        let policy_request = crate::policy::Request {
            command: match &req.command {
                Command::Shell(s) => crate::policy::CommandLine::Shell(s),
                Command::Argv(a) => crate::policy::CommandLine::Argv(a),
            },
            cwd: &cwd,
            env: &req.env,
            workspace: Some(&ws_path),
            links: None,
            sandboxed,
            protected: Some(&protected),
        };
        if sandboxed {
            policy.decide(&policy_request)
        } else {
            // Unconfined, the command follows the workspace's symlinks on the host: the
            // paths the line names are judged where they really lead.
            store.read(|db| {
                let ws = Workspace::open(db, &base.workspace)?;
                let peek = ws.peek();
                let links = links::TreeLinks {
                    peek: &peek,
                    ws_path: &ws_path,
                };
                Ok(policy.decide(&crate::policy::Request {
                    links: Some(&links),
                    ..policy_request
                }))
            })?
        }
    };
    if let Some(ap) = &approved {
        // A human approved exactly this request: it runs once, with a checkpoint.
        if decision.action == Action::RequireApproval {
            decision.action = Action::AllowWithCheckpoint;
            decision.reason = format!("approved ({}): {}", ap.id, decision.reason);
        }
    }
    let mut envelope = Envelope {
        schema_version: envelope::SCHEMA_VERSION,
        id: id.clone(),
        request,
        decision: decision.clone(),
        approval: None,
        checkpoint: None,
        result: None,
        changes: vec![],
        change_summary: Summary::default(),
        changes_page: ChangesPage::nothing(req.report.changes),
        service_changes: None,
        rollback: Rollback {
            requested: req.rollback_on_failure,
            performed: false,
            checkpoint: None,
        },
        mountpoint: None,
        workspace_path: None,
        engine: None,
        sandbox: SandboxInfo::nothing_ran(),
        exit_code: 0,
    };
    // Nothing is created before the policy has said yes.
    match decision.action {
        Action::Deny => {
            envelope.exit_code = EXIT_DENIED;
            store.write(|db| {
                audit::append(
                    db,
                    Some(&envelope.request.workspace),
                    "exec",
                    "exec.deny",
                    &audit_record(&envelope),
                )
            })?;
            return Ok(Outcome {
                envelope,
                ephemeral: None,
            });
        }
        Action::RequireApproval if approved.is_none() => {
            let ap_id = new_id("ap");
            let rq = serde_json::to_value(&envelope.request).unwrap_or_default();
            let dec = serde_json::to_value(&decision).unwrap_or_default();
            // The approval names the vault the command was asked in; a fork (or a fresh
            // ephemeral one) is made from it when the approved command runs.
            let ap = store.write(|db| {
                store_approvals::create(
                    db,
                    &ap_id,
                    &base.name,
                    &envelope.request.workspace,
                    &rq,
                    &dec,
                )
            })?;
            drop(store);
            // `--wait-approval`: block until a person decides, then run as `--approve`
            // would; a denial or the end of the wait is the envelope's answer.
            let ap = match req.wait_approval {
                Some(within) => approvals::wait_for_decision(&base, &ap.id, within)?,
                None => ap,
            };
            if ap.state == "approved" {
                let mut again = req.clone();
                again.approve = Some(ap.id);
                again.wait_approval = None;
                return exec(ctx, again);
            }
            envelope.exit_code = if ap.state == "denied" {
                EXIT_DENIED
            } else {
                EXIT_APPROVAL_REQUIRED
            };
            envelope.approval = Some(ApprovalInfo {
                id: ap.id,
                state: ap.state,
                expires_at_ns: Some(ap.expires_at_ns),
            });
            return Ok(Outcome {
                envelope,
                ephemeral: None,
            });
        }
        _ => {}
    }
    // Checked before the approval is used or anything is created: a machine that cannot
    // confine the run is an error, never a silent run without the sandbox.
    let network = if !sandboxed {
        None
    } else {
        if let Some(why) = crate::sandbox::unavailable() {
            return Err(Error::SandboxUnavailable(why));
        }
        Some(if policy.sandbox.network {
            (true, Some("policy".to_string()))
        } else if let Some(ap) = approved
            .as_ref()
            .filter(|_| decision.categories.contains(&Category::Networked))
        {
            (true, Some(format!("approval {}", ap.id)))
        } else if let Some(rule) = decision.network_rule() {
            (true, Some(format!("rule {rule}")))
        } else {
            (false, None)
        })
    };
    if let Some(ap) = &approved {
        // Used before anything is created or run: at most once, even when two runs race.
        let used = store.write(|db| {
            store_approvals::consume(db, &ap.id, &envelope.request.workspace, &envelope.id)
        })?;
        envelope.approval = Some(ApprovalInfo {
            id: used.id,
            state: used.state,
            expires_at_ns: Some(used.expires_at_ns),
        });
    }
    let job = run::Job {
        ctx: &target,
        reg: &reg,
        base: &base,
        place,
        req: &req,
        cwd: &cwd,
        decision: &decision,
        policy: &policy,
        network,
        ws_path: &ws_path,
        store,
    };
    let ephemeral = run::run(job, &mut envelope)?;
    Ok(Outcome {
        envelope,
        ephemeral,
    })
}

pub(crate) use report::audit_record;
