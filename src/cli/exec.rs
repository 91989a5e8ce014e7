//! `avfs exec`, `avfs policy`, `avfs approvals`, `avfs approve`, `avfs deny`: the policy
//! boundary. Decide, record, checkpoint, mount, run, report, roll back.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::json;

use super::Ctx;
use crate::diff::{ChangeSummary, add_patches, diff_roots};
use crate::error::{Error, Result};
use crate::exec::envelope::{self, ApprovalInfo, Envelope, Rollback};
use crate::exec::policy::{Action, Decision, Policy};
use crate::exec::runner::{self, RunSpec};
use crate::exec::{EXIT_APPROVAL_REQUIRED, EXIT_DENIED, EXIT_TIMED_OUT};
use crate::registry::VaultRef;
use crate::store::{Store, approvals, audit};
use crate::workspace::Workspace;

#[derive(Args, Debug)]
pub struct ExecArgs {
    /// Run in this task fork of the vault (created on first use, reused after).
    #[arg(long, conflicts_with = "ephemeral")]
    fork: Option<String>,
    /// Run in a fresh fork that is discarded afterwards.
    #[arg(long)]
    ephemeral: bool,
    /// Keep the ephemeral fork (its name is in the envelope).
    #[arg(long, requires = "ephemeral")]
    keep: bool,
    /// Directory inside the workspace to run in (default: its root).
    #[arg(long, default_value = "/")]
    cwd: String,
    /// Stop the command after this many seconds (SIGTERM, then SIGKILL).
    #[arg(long, value_name = "SECS")]
    timeout: Option<f64>,
    /// Extra environment variables.
    #[arg(long = "env", value_name = "K=V")]
    env: Vec<String>,
    /// Always take a checkpoint before running.
    #[arg(long, conflicts_with = "no_checkpoint")]
    checkpoint: bool,
    /// Never take a checkpoint (even when the policy asks for one).
    #[arg(long)]
    no_checkpoint: bool,
    /// Restore the pre-run checkpoint if the command fails or times out.
    #[arg(long, conflicts_with = "no_checkpoint")]
    rollback_on_failure: bool,
    /// Run the command of this approved approval (exactly as approved, once).
    #[arg(long, value_name = "ID")]
    approve: Option<String>,
    /// A shell command line (parsed as shell, run with sh -c).
    #[arg(long, conflicts_with = "argv")]
    shell: Option<String>,
    /// The command and its arguments.
    #[arg(last = true)]
    argv: Vec<String>,
}

#[derive(Subcommand, Debug)]
pub enum PolicyCmd {
    /// Show the effective policy: decisions per category and every rule with its source.
    Show,
    /// Show what the policy decides for a command, and which rule decided it.
    Check {
        #[arg(long, default_value = "/")]
        cwd: String,
        #[arg(long, conflicts_with = "argv")]
        shell: Option<String>,
        #[arg(last = true)]
        argv: Vec<String>,
    },
    /// Run every rule's inline examples and counter-examples.
    Test,
}

#[derive(Args, Debug)]
pub struct ApprovalsArgs {
    /// Also show decided, used and expired approvals.
    #[arg(long)]
    all: bool,
}

#[derive(Args, Debug)]
pub struct DecideArgs {
    id: String,
}

const CAPTURE_LIMIT: usize = 1 << 20;
const PATCH_LIMIT: u64 = 64 * 1024;

fn policy_files(ctx: &Ctx, v: &VaultRef) -> Vec<PathBuf> {
    vec![
        ctx.home.join("policy.toml"),
        ctx.home.join("policies").join(format!("{}.toml", v.name)),
    ]
}

pub fn load_policy(ctx: &Ctx, v: &VaultRef) -> Result<Policy> {
    let files = policy_files(ctx, v);
    let refs: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    Policy::load(&refs)
}

fn cwd_components(cwd: &str) -> Result<Vec<String>> {
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

fn new_id(prefix: &str) -> String {
    let mut h = blake3::Hasher::new();
    h.update(&crate::store::now_ns().to_le_bytes());
    h.update(&std::process::id().to_le_bytes());
    format!("{prefix}-{}", &h.finalize().to_hex()[..10])
}

fn with_vault(ctx: &Ctx, sel: Option<String>) -> Ctx {
    Ctx {
        out: super::output::Out { json: ctx.out.json },
        vault_sel: sel,
        home: ctx.home.clone(),
    }
}

pub fn policy(ctx: &Ctx, cmd: PolicyCmd) -> Result<i32> {
    let (_, v) = ctx.target()?;
    let p = load_policy(ctx, &v)?;
    match cmd {
        PolicyCmd::Show => {
            ctx.out.emit(&p, || {
                println!("policy files: {}", p.sources.join(", "));
                for (c, a) in &p.defaults {
                    println!(
                        "  {:<18} -> {}",
                        serde_json::to_value(c).unwrap().as_str().unwrap_or(""),
                        a.name()
                    );
                }
                for r in &p.rules {
                    println!(
                        "  [{}] {} {} {} -> {}{}",
                        r.source,
                        r.name,
                        r.program,
                        r.args.join(" "),
                        r.category
                            .map(|c| serde_json::to_value(c)
                                .unwrap()
                                .as_str()
                                .unwrap_or("")
                                .to_string())
                            .unwrap_or_default(),
                        r.decision
                            .map(|d| format!(" ({})", d.name()))
                            .unwrap_or_default()
                    );
                }
            });
        }
        PolicyCmd::Check { cwd, shell, argv } => {
            let cwd = cwd_components(&cwd)?;
            let d = match (&shell, argv.is_empty()) {
                (Some(s), _) => p.decide_shell(s, &cwd, None),
                (None, false) => p.decide_argv(&argv, &cwd, None),
                (None, true) => {
                    return Err(Error::InvalidArgument(
                        "command".into(),
                        "give --shell \"...\" or -- ARGV".into(),
                    ));
                }
            };
            ctx.out.emit(&d, || {
                println!("{} ({}): {}", d.action.name(), d.matched_rule, d.reason);
                for f in &d.findings {
                    println!(
                        "  {:<12} {:<18} {:<22} {}",
                        f.program,
                        format!("{:?}", f.category),
                        f.rule,
                        f.reason
                    );
                }
            });
        }
        PolicyCmd::Test => {
            let results = p.test_examples();
            let ok = results.iter().all(|r| r.ok);
            ctx.out.emit(&json!({"ok": ok, "results": results}), || {
                for r in &results {
                    println!(
                        "{} {} {:?} should {}match",
                        if r.ok { "ok  " } else { "FAIL" },
                        r.rule,
                        r.example,
                        if r.should_match { "" } else { "not " }
                    );
                }
                println!(
                    "{} examples, {} failed",
                    results.len(),
                    results.iter().filter(|r| !r.ok).count()
                );
            });
            return Ok(if ok { 0 } else { 1 });
        }
    }
    Ok(0)
}

pub fn approvals(ctx: &Ctx, a: ApprovalsArgs) -> Result<i32> {
    let (_, mut store) = ctx.open()?;
    let list = store.read(|db| approvals::list(db, a.all))?;
    ctx.out.emit(&json!({"approvals": list}), || {
        for ap in &list {
            let cmd = &ap.request["command"];
            let shown = cmd["shell"].as_str().map(String::from).unwrap_or_else(|| {
                cmd["argv"]
                    .as_array()
                    .map(|v| {
                        v.iter()
                            .filter_map(|x| x.as_str())
                            .collect::<Vec<_>>()
                            .join(" ")
                    })
                    .unwrap_or_default()
            });
            println!(
                "{} {:<9} {:<10} {}  ({})",
                ap.id,
                ap.state,
                ap.workspace,
                shown,
                ap.decision["reason"].as_str().unwrap_or("")
            );
        }
    });
    Ok(0)
}

pub fn decide(ctx: &Ctx, a: DecideArgs, approve: bool) -> Result<i32> {
    let (v, mut store) = ctx.open()?;
    let ap = store.write(|db| {
        let ap = approvals::decide(db, &a.id, approve)?;
        audit::append(
            db,
            Some(&v.workspace),
            "cli",
            if approve {
                "approval.approve"
            } else {
                "approval.deny"
            },
            &json!({"id": a.id}),
        )?;
        Ok(ap)
    })?;
    ctx.out.emit(&json!({"approval": ap}), || {
        println!(
            "{} {}; run it with `avfs exec --approve {}`",
            ap.id,
            ap.state,
            if approve { &ap.id } else { "" }
        );
    });
    Ok(0)
}

/// Where the command runs: a fork (created or reused), an ephemeral fork, or the target.
fn resolve_workspace(ctx: &Ctx, a: &ExecArgs) -> Result<(VaultRef, Option<String>)> {
    let (reg, base) = ctx.target()?;
    let fork_name = if a.ephemeral {
        Some(new_id("eph"))
    } else {
        a.fork.clone()
    };
    let Some(name) = fork_name else {
        return Ok((base, None));
    };
    if let Some(existing) = reg.get(&name)? {
        return Ok((existing, None));
    }
    ctx.sync_mount(&base)?;
    let mut store = Store::open(&base.path)?;
    store.write(|db| {
        let mut ws = Workspace::open(db, &base.workspace)?;
        ws.fork(&name, None)?;
        audit::append(
            db,
            Some(&base.workspace),
            "exec",
            "vault.fork",
            &json!({"fork": name}),
        )?;
        Ok(())
    })?;
    let v = VaultRef {
        name: name.clone(),
        path: base.path.clone(),
        workspace: name.clone(),
    };
    reg.add(&v)?;
    Ok((v, a.ephemeral.then_some(name)))
}

struct MountGuard {
    home: PathBuf,
    mountpoint: PathBuf,
    ours: bool,
}

impl MountGuard {
    fn acquire(ctx: &Ctx, v: &VaultRef, id: &str) -> Result<MountGuard> {
        if let Some(m) = crate::mount::find_mount(&ctx.home, &v.path, &v.workspace)? {
            return Ok(MountGuard {
                home: ctx.home.clone(),
                mountpoint: m.mountpoint,
                ours: false,
            });
        }
        let mp = crate::mount::run_dir(&ctx.home).join("exec").join(id);
        std::fs::create_dir_all(&mp).map_err(|e| Error::host(mp.display(), e))?;
        let rec = super::mount::spawn_background(&ctx.home, v, &mp, false, false)?;
        Ok(MountGuard {
            home: ctx.home.clone(),
            mountpoint: rec.mountpoint,
            ours: true,
        })
    }

    fn release(&self) {
        if !self.ours {
            return;
        }
        if let Ok(list) = crate::mount::list_mounts(&self.home) {
            if let Some(m) = list.into_iter().find(|m| m.mountpoint == self.mountpoint) {
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
        }
        if crate::mount::is_mountpoint(&self.mountpoint) {
            let _ = crate::mount::force_unmount(&self.mountpoint);
        }
        let _ = std::fs::remove_dir(&self.mountpoint);
    }
}

fn show_command(c: &envelope::Command) -> String {
    c.shell
        .clone()
        .unwrap_or_else(|| c.argv.clone().unwrap_or_default().join(" "))
}

pub fn exec(ctx: &Ctx, a: ExecArgs) -> Result<i32> {
    let id = new_id("ex");
    // An approved request replaces whatever command line was given.
    let (mut a, approved) = match &a.approve {
        Some(ap_id) => {
            let (v0, mut store) = ctx.open()?;
            let ap = store.read(|db| approvals::get(db, ap_id))?;
            if ap.state != "approved" {
                return Err(Error::Refused(format!(
                    "approval {ap_id} is {}; only an approved request can run",
                    ap.state
                )));
            }
            let req = &ap.request;
            let given = a.shell.is_some() || !a.argv.is_empty();
            let stored = ExecArgs {
                fork: None,
                ephemeral: false,
                keep: false,
                cwd: req["cwd"].as_str().unwrap_or("/").to_string(),
                timeout: req["options"]["timeout_secs"].as_f64(),
                env: req["options"]["env"]
                    .as_array()
                    .map(|v| {
                        v.iter()
                            .filter_map(|x| x.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default(),
                checkpoint: req["options"]["checkpoint"].as_bool().unwrap_or(false),
                no_checkpoint: req["options"]["no_checkpoint"].as_bool().unwrap_or(false),
                rollback_on_failure: req["options"]["rollback_on_failure"]
                    .as_bool()
                    .unwrap_or(false),
                approve: Some(ap_id.clone()),
                shell: req["command"]["shell"].as_str().map(String::from),
                argv: req["command"]["argv"]
                    .as_array()
                    .map(|v| {
                        v.iter()
                            .filter_map(|x| x.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default(),
            };
            if given && (stored.shell != a.shell || stored.argv != a.argv) {
                return Err(Error::Refused(format!(
                    "approval {ap_id} is for `{}`, not for this command",
                    show_command(&envelope::Command {
                        kind: "",
                        argv: Some(stored.argv.clone()),
                        shell: stored.shell.clone()
                    })
                )));
            }
            let _ = v0;
            (stored, Some(ap))
        }
        None => (a, None),
    };
    if a.shell.is_none() && a.argv.is_empty() {
        return Err(Error::InvalidArgument(
            "command".into(),
            "give --shell \"...\" or -- ARGV...".into(),
        ));
    }
    let ctx_target = match &approved {
        Some(ap) => with_vault(ctx, Some(ap.workspace_ref())),
        None => with_vault(ctx, ctx.vault_sel.clone()),
    };
    if let Some(ap) = &approved {
        a.fork = None;
        let _ = ap;
    }
    let cwd = cwd_components(&a.cwd)?;
    let (v, ephemeral) = resolve_workspace(&ctx_target, &a)?;
    let policy = load_policy(ctx, &v)?;
    let command = envelope::Command {
        kind: if a.shell.is_some() { "shell" } else { "argv" },
        argv: (!a.argv.is_empty()).then(|| a.argv.clone()),
        shell: a.shell.clone(),
    };
    let request = envelope::Request {
        command: command.clone(),
        cwd: format!("/{}", cwd.join("/")),
        vault: v.name.clone(),
        workspace: v.workspace.clone(),
        options: json!({
            "timeout_secs": a.timeout, "env": a.env, "checkpoint": a.checkpoint, "no_checkpoint": a.no_checkpoint,
            "rollback_on_failure": a.rollback_on_failure, "fork": a.fork, "ephemeral": a.ephemeral, "keep": a.keep,
            "approve": a.approve,
        }),
    };
    let mut decision: Decision = match &a.shell {
        Some(s) => policy.decide_shell(s, &cwd, None),
        None => policy.decide_argv(&a.argv, &cwd, None),
    };
    let mut env_pairs: Vec<(String, String)> = Vec::new();
    for kv in &a.env {
        let (k, val) = kv
            .split_once('=')
            .ok_or_else(|| Error::InvalidArgument(kv.clone(), "--env takes K=V".into()))?;
        env_pairs.push((k.into(), val.into()));
    }
    let mut approval_info = None;
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
        change_summary: ChangeSummary::default(),
        rollback: Rollback {
            requested: a.rollback_on_failure,
            performed: false,
            checkpoint: None,
        },
        mountpoint: None,
        exit_code: 0,
    };
    let mut store = Store::open(&v.path)?;
    match decision.action {
        Action::Deny => {
            envelope.exit_code = EXIT_DENIED;
            store.write(|db| {
                audit::append(
                    db,
                    Some(&v.workspace),
                    "exec",
                    "exec.deny",
                    &serde_json::to_value(&envelope).unwrap_or_default(),
                )
            })?;
            return finish(ctx, &envelope, ephemeral.as_deref(), &v, a.keep);
        }
        Action::RequireApproval if approved.is_none() => {
            let ap_id = new_id("ap");
            let req = serde_json::to_value(&envelope.request).unwrap_or_default();
            let dec = serde_json::to_value(&decision).unwrap_or_default();
            let ap = store.write(|db| {
                let ap = approvals::create(db, &ap_id, &v.name, &req, &dec)?;
                audit::append(
                    db,
                    Some(&v.workspace),
                    "exec",
                    "approval.request",
                    &json!({"approval": ap_id, "request": req, "decision": dec}),
                )?;
                Ok(ap)
            })?;
            approval_info = Some(ApprovalInfo {
                id: ap.id,
                state: ap.state,
                expires_at_ns: Some(ap.expires_at_ns),
            });
            envelope.approval = approval_info;
            envelope.exit_code = EXIT_APPROVAL_REQUIRED;
            return finish(ctx, &envelope, ephemeral.as_deref(), &v, a.keep);
        }
        _ => {}
    }
    if let Some(ap) = &approved {
        let used = store.write(|db| {
            let used = approvals::consume(db, &ap.id)?;
            audit::append(
                db,
                Some(&v.workspace),
                "exec",
                "approval.use",
                &json!({"approval": ap.id, "exec": id}),
            )?;
            Ok(used)
        })?;
        approval_info = Some(ApprovalInfo {
            id: used.id,
            state: used.state,
            expires_at_ns: Some(used.expires_at_ns),
        });
    }
    envelope.approval = approval_info;

    let mount = MountGuard::acquire(ctx, &v, &id)?;
    envelope.mountpoint = Some(mount.mountpoint.display().to_string());
    let result = run_in_mount(
        ctx,
        &a,
        &v,
        &mut store,
        &mount,
        &cwd,
        &decision,
        &env_pairs,
        &mut envelope,
    );
    mount.release();
    result?;
    finish(ctx, &envelope, ephemeral.as_deref(), &v, a.keep)
}

#[allow(clippy::too_many_arguments)]
fn run_in_mount(
    ctx: &Ctx,
    a: &ExecArgs,
    v: &VaultRef,
    store: &mut Store,
    mount: &MountGuard,
    cwd: &[String],
    decision: &Decision,
    env_pairs: &[(String, String)],
    envelope: &mut Envelope,
) -> Result<()> {
    let want_checkpoint = !a.no_checkpoint
        && (a.checkpoint
            || a.rollback_on_failure
            || decision.action == Action::AllowWithCheckpoint);
    ctx.sync_mount(v)?;
    let cp_name = format!("exec-{}", &envelope.id[3..]);
    let shown = show_command(&envelope.request.command);
    let (before, checkpoint) = store.write(|db| {
        let mut ws = Workspace::open(db, &v.workspace)?;
        if want_checkpoint {
            let s = ws.checkpoint(Some(&cp_name), Some(&format!("before: {shown}")), "exec")?;
            Ok((s.checkpoint.root, Some(s.checkpoint.name)))
        } else {
            Ok((ws.flush()?, None))
        }
    })?;
    envelope.checkpoint = checkpoint.clone();
    let dir = cwd.iter().fold(mount.mountpoint.clone(), |p, c| p.join(c));
    if !dir.is_dir() {
        return Err(Error::NotADirectory(format!(
            "--cwd {}",
            envelope.request.cwd
        )));
    }
    let mut env = vec![
        ("AVFS_VAULT".to_string(), v.name.clone()),
        ("AVFS_WORKSPACE".to_string(), v.workspace.clone()),
        (
            "AVFS_CHECKPOINT".to_string(),
            checkpoint.clone().unwrap_or_default(),
        ),
        ("AVFS_EXEC_ID".to_string(), envelope.id.clone()),
    ];
    env.extend(env_pairs.iter().cloned());
    let (program, args): (String, Vec<String>) = match &a.shell {
        Some(s) => ("/bin/sh".into(), vec!["-c".into(), s.clone()]),
        None => (a.argv[0].clone(), a.argv[1..].to_vec()),
    };
    let spec = RunSpec {
        program: &program,
        args: &args,
        cwd: &dir,
        env: &env,
        timeout: a.timeout.map(Duration::from_secs_f64),
        grace: Duration::from_secs(2),
        capture_limit: CAPTURE_LIMIT,
        stream: !ctx.out.json,
    };
    let run = runner::run(&spec);
    // Whatever happened, report what changed: a diff of the workspace itself.
    ctx.sync_mount(v)?;
    let failed = match &run {
        Ok(r) => r.timed_out || r.exit_code != Some(0),
        Err(_) => true,
    };
    let rollback = a.rollback_on_failure && failed && checkpoint.is_some();
    let changes = store.write(|db| {
        let mut ws = Workspace::open(db, &v.workspace)?;
        let after = ws.flush()?;
        let mut changes = diff_roots(db, &before, &after)?;
        add_patches(db, &mut changes, PATCH_LIMIT)?;
        if rollback {
            let cp = ws.find_checkpoint(checkpoint.as_deref().unwrap_or_default())?;
            ws.restore(&cp)?;
        }
        Ok(changes)
    })?;
    if rollback {
        ctx.invalidate_mount(v)?;
        envelope.rollback.performed = true;
        envelope.rollback.checkpoint = checkpoint.clone();
    }
    envelope.change_summary = ChangeSummary::of(&changes);
    envelope.changes = changes;
    let r = run?;
    envelope.exit_code = if r.timed_out {
        EXIT_TIMED_OUT
    } else {
        r.exit_code.unwrap_or_else(|| 128 + r.signal.unwrap_or(0))
    };
    envelope.result = Some(r);
    let record = serde_json::to_value(&*envelope).unwrap_or_default();
    store.write(|db| audit::append(db, Some(&v.workspace), "exec", "exec.run", &record))?;
    Ok(())
}

fn finish(
    ctx: &Ctx,
    env: &Envelope,
    ephemeral: Option<&str>,
    v: &VaultRef,
    keep: bool,
) -> Result<i32> {
    if let (Some(name), false) = (ephemeral, keep) {
        let reg = ctx.registry()?;
        let mut store = Store::open(&v.path)?;
        store.write(|db| {
            crate::workspace::delete_workspace(db, name)?;
            audit::append(
                db,
                Some(name),
                "exec",
                "vault.delete",
                &json!({"fork": name, "ephemeral": true}),
            )
        })?;
        reg.remove(name)?;
    }
    ctx.out.emit(env, || {
        let d = &env.decision;
        eprintln!("--- avfs exec {}", env.id);
        eprintln!(
            "decision:   {} ({}: {})",
            d.action.name(),
            d.matched_rule,
            d.reason
        );
        if let Some(ap) = &env.approval {
            eprintln!(
                "approval:   {} {}{}",
                ap.id,
                ap.state,
                if ap.state == "pending" {
                    format!(
                        " (approve with `avfs approve {}`, then `avfs exec --approve {}`)",
                        ap.id, ap.id
                    )
                } else {
                    String::new()
                }
            );
        }
        if let Some(cp) = &env.checkpoint {
            eprintln!("checkpoint: {cp}");
        }
        if let Some(r) = &env.result {
            eprintln!(
                "exit:       {}{} in {} ms",
                r.exit_code
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| format!("signal {}", r.signal.unwrap_or(0))),
                if r.timed_out { " (timed out)" } else { "" },
                r.duration_ms
            );
        }
        let s = &env.change_summary;
        eprintln!(
            "changes:    {} added, {} modified, {} deleted, {} type, {} mode",
            s.added, s.modified, s.deleted, s.type_changed, s.mode_changed
        );
        for c in env.changes.iter().take(50) {
            eprintln!("  {} {}", c.kind.sigil(), c.path);
        }
        if env.rollback.performed {
            eprintln!(
                "rolled back to {}",
                env.rollback.checkpoint.as_deref().unwrap_or("?")
            );
        }
        if let (Some(name), true) = (ephemeral, keep) {
            eprintln!("kept fork:  {name}");
        }
    });
    Ok(env.exit_code)
}

trait WorkspaceRef {
    fn workspace_ref(&self) -> String;
}

impl WorkspaceRef for approvals::Approval {
    /// Approvals record the registry name of the vault or fork they were asked in.
    fn workspace_ref(&self) -> String {
        self.workspace.clone()
    }
}
