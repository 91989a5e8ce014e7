//! `avfs exec`, `avfs policy`, `avfs approvals`, `avfs approve`, `avfs deny`: parse the
//! arguments, call the boundary (`crate::boundary`), print the envelope.

use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::json;

use super::Ctx;
use crate::boundary::{
    self, CheckpointMode, Command, ExecRequest, LimitOverrides, SandboxMode, cwd_components,
};
use crate::documents::history::{ApprovalDecided, ApprovalList};
use crate::engine::EngineKind;
use crate::error::{Error, Result};
use crate::exec::capture::{self, CaptureLimits};
use crate::exec::envelope::{self, ChangesMode, Envelope, ReportLimits};
use crate::policy::{CommandLine, Policy, Request as PolicyRequest, corpus};

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
    #[arg(long, value_name = "SECS", allow_negative_numbers = true)]
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
    /// Run the command of this approved approval (exactly as approved, once); the id
    /// names its vault.
    #[arg(long, value_name = "ID")]
    approve: Option<String>,
    /// When the line requires approval: record the request, then wait up to SECS for a
    /// person to decide (`avfs approve ID` runs it now; `avfs deny ID` or the end of
    /// the wait returns the envelope, exit 126 or 75).
    #[arg(long, value_name = "SECS", conflicts_with = "approve")]
    wait_approval: Option<f64>,
    /// Run in the sandbox (the default: only the workspace and a private /tmp writable,
    /// no network unless granted, secrets hidden; see docs/exec.md).
    #[arg(long, conflicts_with = "no_sandbox")]
    sandbox: bool,
    /// Run without the sandbox, with the user's full rights on the host (refused when
    /// the policy requires the sandbox; recorded in the envelope and the audit log).
    #[arg(long)]
    no_sandbox: bool,
    /// Where the command runs: overlay (native speed; the default where overlayfs can
    /// be mounted) or fuse (the workspace's FUSE mount; the fallback).
    #[arg(long, value_enum)]
    engine: Option<EngineKind>,
    /// Wait up to this many seconds for another run of the same workspace (default 30);
    /// then fail with `busy`.
    #[arg(long, value_name = "SECS")]
    wait: Option<f64>,
    /// Keep setuid/setgid bits on files the command made (root only; dropped otherwise;
    /// in the sandbox no command can set them).
    #[arg(long)]
    keep_setuid: bool,
    /// Processes and threads the sandboxed command may have at once (0: no limit;
    /// default 4096 or the policy's `[sandbox] pids_limit`). Needs a cgroup avfs may
    /// write: the envelope's sandbox.limits says what was in force.
    #[arg(long, value_name = "N")]
    pids_limit: Option<u64>,
    /// Size of the sandbox's private /tmp, a tmpfs (default 1G or `[sandbox] tmp_size`).
    #[arg(long, value_name = "SIZE")]
    tmp_size: Option<String>,
    /// Size of the sandbox's private /dev/shm (default 64M or `[sandbox] shm_size`).
    #[arg(long, value_name = "SIZE")]
    shm_size: Option<String>,
    /// Memory the sandboxed command may use (0: no limit, the default; or `[sandbox]
    /// memory`), where the host lets avfs make a memory cgroup.
    #[arg(long, value_name = "SIZE")]
    memory: Option<String>,
    /// How much of the change list the envelope shows: list (the first --max-changes
    /// entries, patches within --max-patch-bytes; the default), full (everything),
    /// summary (counts by kind and by top directory), none (counts by kind).
    #[arg(long, value_enum, value_name = "MODE", default_value = "list")]
    changes: ChangesArg,
    /// Entries in the envelope's change list at most (--changes list).
    #[arg(long, value_name = "N", default_value_t = envelope::DEFAULT_MAX_CHANGES)]
    max_changes: usize,
    /// Bytes of patches in the envelope at most (--changes list); a larger patch is cut.
    #[arg(long, value_name = "BYTES", default_value_t = envelope::DEFAULT_MAX_PATCH_BYTES)]
    max_patch_bytes: usize,
    /// Bytes kept from the start of stdout and of stderr.
    #[arg(long, value_name = "BYTES", default_value_t = capture::DEFAULT_HEAD)]
    output_head: usize,
    /// Bytes kept from the end of stdout and of stderr.
    #[arg(long, value_name = "BYTES", default_value_t = capture::DEFAULT_TAIL)]
    output_tail: usize,
    /// Also write the JSON envelope to this host file (for callers that stream the
    /// output in human mode and still want the envelope, as the Python client does).
    #[arg(long, value_name = "PATH")]
    envelope_file: Option<std::path::PathBuf>,
    /// A shell command line (parsed as shell, run with sh -c).
    #[arg(long, conflicts_with = "argv")]
    shell: Option<String>,
    /// The command and its arguments.
    #[arg(last = true)]
    argv: Vec<String>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum ChangesArg {
    List,
    Full,
    Summary,
    None,
}

impl From<ChangesArg> for ChangesMode {
    fn from(a: ChangesArg) -> ChangesMode {
        match a {
            ChangesArg::List => ChangesMode::List,
            ChangesArg::Full => ChangesMode::Full,
            ChangesArg::Summary => ChangesMode::Summary,
            ChangesArg::None => ChangesMode::None,
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum PolicyCmd {
    /// Show the effective policy: decisions per category and every rule with its source.
    Show,
    /// Show what the policy decides for a command, and which rule decided it.
    Check {
        #[arg(long, default_value = "/")]
        cwd: String,
        /// Environment the command would run with (as `exec --env`).
        #[arg(long = "env", value_name = "K=V")]
        env: Vec<String>,
        #[arg(long, conflicts_with = "argv")]
        shell: Option<String>,
        /// Decide as for `exec --no-sandbox` (the strict reading) instead of a default,
        /// sandboxed run.
        #[arg(long)]
        no_sandbox: bool,
        #[arg(last = true)]
        argv: Vec<String>,
    },
    /// Run every rule's inline examples and counter-examples, or a decision corpus.
    Test {
        /// A corpus file: `DECISION CATEGORY COMMAND` per line (docs/exec.md).
        #[arg(long, value_name = "FILE", conflicts_with = "everyday")]
        corpus: Option<std::path::PathBuf>,
        /// An everyday corpus: `KIND<TAB>SOURCE<TAB>COMMAND` per line; prints how many
        /// lines of each kind run unattended, ask or are denied.
        #[arg(long, value_name = "FILE")]
        everyday: Option<std::path::PathBuf>,
        /// Decide the everyday corpus as for `exec --no-sandbox`.
        #[arg(long, requires = "everyday")]
        no_sandbox: bool,
    },
}

#[derive(Args, Debug)]
pub struct ApprovalsArgs {
    /// Also show decided, used and expired approvals.
    #[arg(long)]
    all: bool,
}

#[derive(Args, Debug)]
pub struct DecideArgs {
    /// The approval's id (`ap-...`); it names its vault, so no --vault is needed.
    id: String,
}

fn seconds(flag: &str, v: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(v)
        .ok()
        .filter(|d| !d.is_zero() || flag != "--timeout")
        .ok_or_else(|| {
            Error::InvalidArgument(
                v.to_string(),
                format!("{flag} takes a positive number of seconds"),
            )
        })
}

/// A size flag's value in bytes; a tmpfs of 0 bytes would have no limit, so it is refused.
fn size(flag: &'static str) -> impl Fn(&str) -> Result<u64> {
    move |v| match crate::util::parse_size(v) {
        Ok(0) if flag != "--memory" => Err(Error::InvalidArgument(
            v.to_string(),
            format!("{flag} takes a size above 0 (like 512M)"),
        )),
        Ok(b) => Ok(b),
        Err(e) => Err(Error::InvalidArgument(
            v.to_string(),
            format!("{flag}: {e}"),
        )),
    }
}

/// The boundary's request for these arguments.
fn request(ctx: &Ctx, a: ExecArgs) -> Result<ExecRequest> {
    let command = match a.shell {
        Some(s) => Command::Shell(s),
        None => Command::Argv(a.argv),
    };
    let mut env = Vec::new();
    for kv in &a.env {
        match kv.split_once('=') {
            Some((k, val)) if !k.is_empty() => env.push((k.to_string(), val.to_string())),
            _ => return Err(Error::InvalidArgument(kv.clone(), "--env takes K=V".into())),
        }
    }
    Ok(ExecRequest {
        command,
        cwd: a.cwd,
        fork: a.fork,
        ephemeral: a.ephemeral,
        keep: a.keep,
        timeout: a.timeout.map(|t| seconds("--timeout", t)).transpose()?,
        env,
        checkpoint: if a.checkpoint {
            CheckpointMode::Always
        } else if a.no_checkpoint {
            CheckpointMode::Never
        } else {
            CheckpointMode::Auto
        },
        rollback_on_failure: a.rollback_on_failure,
        approve: a.approve,
        sandbox: if a.no_sandbox {
            SandboxMode::Off
        } else if a.sandbox {
            SandboxMode::On
        } else {
            SandboxMode::Default
        },
        engine: a.engine,
        keep_setuid: a.keep_setuid,
        limits: LimitOverrides {
            pids: a.pids_limit,
            tmp_bytes: a.tmp_size.as_deref().map(size("--tmp-size")).transpose()?,
            shm_bytes: a.shm_size.as_deref().map(size("--shm-size")).transpose()?,
            memory_bytes: a.memory.as_deref().map(size("--memory")).transpose()?,
        },
        wait: a.wait.map(|w| seconds("--wait", w)).transpose()?,
        wait_approval: a
            .wait_approval
            .map(|w| seconds("--wait-approval", w))
            .transpose()?,
        stream: !ctx.out.json,
        interactive: false,
        report: ReportLimits {
            changes: a.changes.into(),
            max_changes: a.max_changes,
            max_patch_bytes: a.max_patch_bytes,
            output: CaptureLimits {
                head: a.output_head,
                tail: a.output_tail,
            },
        },
        service: None,
    })
}

pub fn exec(ctx: &Ctx, mut a: ExecArgs) -> Result<i32> {
    let envelope_file = a.envelope_file.take();
    let req = request(ctx, a)?;
    let out = boundary::exec(&ctx.lib(), req)?;
    if let Some(path) = envelope_file {
        let text = serde_json::to_vec_pretty(&out.envelope)
            .map_err(|e| crate::error::Error::Internal(format!("envelope as JSON: {e}")))?;
        std::fs::write(&path, text).map_err(|e| crate::error::Error::host(path.display(), e))?;
    }
    let (eph, keep) = match &out.ephemeral {
        Some((name, keep)) => (Some(name.as_str()), *keep),
        None => (None, false),
    };
    finish(ctx, &out.envelope, eph, keep)
}

#[derive(Args, Debug)]
pub struct WatchdogArgs {
    /// The exec run to watch.
    #[arg(long)]
    id: String,
}

/// `avfs exec-watchdog` (internal): see `boundary::watchdog`.
pub fn watchdog(ctx: &Ctx, a: WatchdogArgs) -> Result<i32> {
    boundary::watchdog::main(&ctx.lib(), &a.id)
}

pub fn approvals(ctx: &Ctx, a: ApprovalsArgs) -> Result<i32> {
    let list = boundary::approvals::list(&ctx.lib(), a.all)?;
    let doc = ApprovalList { approvals: list };
    ctx.out.emit(&doc, || {
        for ap in &doc.approvals {
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
                ap.request["vault"].as_str().unwrap_or(&ap.workspace),
                shown,
                ap.decision["reason"].as_str().unwrap_or("")
            );
        }
    });
    Ok(0)
}

pub fn decide(ctx: &Ctx, a: DecideArgs, approve: bool) -> Result<i32> {
    let approval = boundary::approvals::decide(&ctx.lib(), &a.id, approve)?;
    let doc = ApprovalDecided { approval };
    ctx.out.emit(&doc, || {
        let ap = &doc.approval;
        if approve {
            println!(
                "{} approved; run it with `avfs exec --approve {}` (an `exec --wait-approval` waiting for it runs it now)",
                ap.id, ap.id
            );
        } else {
            println!("{} denied; it will not run", ap.id);
        }
    });
    Ok(0)
}

pub fn policy(ctx: &Ctx, cmd: PolicyCmd) -> Result<i32> {
    let (reg, v) = ctx.target()?;
    let p = boundary::load_policy(&ctx.lib(), &v, None)?;
    match cmd {
        PolicyCmd::Show => {
            ctx.out.emit(&p, || {
                println!("policy files: {}", p.sources.join(", "));
                let sb = &p.sandbox;
                println!(
                    "sandbox: default {}, required {}, network {}",
                    sb.default, sb.required, sb.network
                );
                println!("  read-only: {}", sb.read_only_paths.join(" "));
                if !sb.hidden_paths.is_empty() {
                    println!(
                        "  hidden (besides the built-in secrets): {}",
                        sb.hidden_paths.join(" ")
                    );
                }
                if !sb.env.is_empty() {
                    println!("  extra environment: {}", sb.env.join(" "));
                }
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
                            + if r.network { " +network" } else { "" }
                    );
                }
            });
        }
        PolicyCmd::Check {
            cwd,
            env,
            shell,
            no_sandbox,
            argv,
        } => {
            let cwd = cwd_components(&cwd)?;
            let env = env_pairs(&env)?;
            let command = match (&shell, argv.is_empty()) {
                (Some(s), _) => CommandLine::Shell(s),
                (None, false) => CommandLine::Argv(&argv),
                (None, true) => {
                    return Err(Error::InvalidArgument(
                        "command".into(),
                        "give --shell \"...\" or -- ARGV".into(),
                    ));
                }
            };
            // As exec judges it: absolute paths below the vault's workspace path are inside.
            let ws = crate::workspace::Store::open(&v.path)
                .and_then(|mut st| {
                    st.read(|db| boundary::path::workspace_path(db, &ctx.home, &reg, &v))
                })
                .ok();
            let protected =
                crate::policy::sandboxed::protected(&ctx.lib().home, Some(&v.path), ws.as_deref());
            let d = p.decide(&PolicyRequest {
                command,
                cwd: &cwd,
                env: &env,
                workspace: ws.as_deref(),
                // The line alone (an unsandboxed exec also follows the workspace's
                // symlinks).
                links: None,
                sandboxed: !no_sandbox && (p.sandbox.default || p.sandbox.required),
                protected: Some(&protected),
            });
            ctx.out.emit(&d, || {
                println!("{} ({}): {}", d.action.name(), d.matched_rule, d.reason);
                for f in &d.findings {
                    println!(
                        "  {:<12} {:<18} {:<22} {}",
                        f.program,
                        f.category.name(),
                        f.rule,
                        f.reason
                    );
                }
            });
        }
        PolicyCmd::Test {
            corpus: Some(file), ..
        } => return corpus_test(ctx, &p, &file),
        PolicyCmd::Test {
            everyday: Some(file),
            no_sandbox,
            ..
        } => return everyday_test(ctx, &p, &file, !no_sandbox),
        PolicyCmd::Test { .. } => {
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

fn env_pairs(env: &[String]) -> Result<Vec<(String, String)>> {
    env.iter()
        .map(|kv| match kv.split_once('=') {
            Some((k, val)) if !k.is_empty() => Ok((k.to_string(), val.to_string())),
            _ => Err(Error::InvalidArgument(kv.clone(), "--env takes K=V".into())),
        })
        .collect()
}

/// `avfs policy test --corpus FILE`: decides every line of a decision corpus and
/// reports those whose decision or deciding category differ; exit 1 if one does.
fn corpus_test(ctx: &Ctx, p: &Policy, file: &std::path::Path) -> Result<i32> {
    let text = std::fs::read_to_string(file).map_err(|e| Error::host(file.display(), e))?;
    let lines =
        corpus::parse(&text).map_err(|e| Error::InvalidArgument(file.display().to_string(), e))?;
    let results = corpus::run(p, &lines, None);
    let failed: Vec<&corpus::CorpusResult> = results.iter().filter(|r| !r.ok).collect();
    let ok = failed.is_empty();
    ctx.out.emit(
        &json!({"ok": ok, "lines": results.len(), "failed": failed}),
        || {
            for r in &failed {
                println!(
                    "FAIL line {}: {}\n     expected {} {}, got {} {} ({}: {})",
                    r.line,
                    r.command,
                    r.expected_action.name(),
                    r.expected_category.name(),
                    r.action.name(),
                    r.category.name(),
                    r.rule,
                    r.reason
                );
            }
            println!("{} lines, {} failed", results.len(), failed.len());
        },
    );
    Ok(if ok { 0 } else { 1 })
}

fn everyday_test(ctx: &Ctx, p: &Policy, file: &std::path::Path, sandboxed: bool) -> Result<i32> {
    let text = std::fs::read_to_string(file).map_err(|e| Error::host(file.display(), e))?;
    let lines = corpus::parse_everyday(&text)
        .map_err(|e| Error::InvalidArgument(file.display().to_string(), e))?;
    let report = corpus::run_everyday(p, &lines, sandboxed);
    ctx.out.emit(&report, || {
        for r in &report.not_unattended {
            println!(
                "{:<8} {} line {}: {} ({}: {})\n         {}",
                r.kind,
                r.action.name(),
                r.line,
                r.source,
                r.rule,
                r.reason,
                r.command.replace('\n', "↵")
            );
        }
        for (kind, k) in &report.kinds {
            println!(
                "{kind:<8} {} lines: {} unattended ({:.1} %), {} ask, {} denied",
                k.lines,
                k.unattended,
                100.0 * k.unattended as f64 / k.lines.max(1) as f64,
                k.approval,
                k.denied
            );
        }
    });
    Ok(0)
}

fn finish(ctx: &Ctx, env: &Envelope, ephemeral: Option<&str>, keep: bool) -> Result<i32> {
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
        if let Some(e) = &env.engine {
            eprintln!(
                "engine:     {} ({}) at {}",
                e.name,
                e.reason,
                env.workspace_path.as_deref().unwrap_or("?")
            );
        }
        let sb = &env.sandbox;
        if sb.enforced {
            eprintln!(
                "sandbox:    on; network {}; writable: {}",
                match (&sb.network_granted_by, sb.network) {
                    (Some(by), true) => format!("on ({by})"),
                    (None, true) => "on".into(),
                    _ => "off".into(),
                },
                sb.writable_paths.join(", ")
            );
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
            for p in &r.escaped_processes {
                eprintln!(
                    "ended:      {} {} (had left the command's process group)",
                    p.pid, p.command
                );
            }
            if let Some(q) = &r.quota_refused {
                eprintln!(
                    "quota:      {} request(s) refused: {}",
                    q.refusals, q.message
                );
            }
        }
        if env.result.is_none() {
            return;
        }
        if !sb.enforced {
            eprintln!("sandbox:    off (--no-sandbox): the command had the user's full rights");
        }
        let s = &env.change_summary;
        eprintln!(
            "changes:    {} added, {} modified, {} deleted, {} type, {} mode",
            s.added, s.modified, s.deleted, s.type_changed, s.mode_changed
        );
        for c in env.changes.iter().take(50) {
            eprintln!("  {} {}", c.kind.sigil(), c.path);
        }
        if s.total > env.changes.len().min(50) {
            eprintln!(
                "  ... and {} more{}",
                s.total - env.changes.len().min(50),
                env.changes_page
                    .rest
                    .as_ref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            );
        }
        if let Some(sc) = &env.service_changes {
            let s = &sc.change_summary;
            eprintln!(
                "services:   {} wrote {} added, {} modified, {} deleted before the run (not its changes)",
                sc.services.join(", "),
                s.added,
                s.modified,
                s.deleted
            );
        }
        if env.rollback.performed {
            eprintln!(
                "rolled back to {}",
                env.rollback.checkpoint.as_deref().unwrap_or("?")
            );
        }
        if let (Some(name), true) = (ephemeral, keep) {
            eprintln!("kept fork:  {name}");
        } else if let Some(name) = ephemeral {
            eprintln!("ephemeral fork {name} discarded");
        }
    });
    Ok(env.exit_code)
}
