//! `avfs exec`, `avfs policy`, `avfs approvals`, `avfs approve`, `avfs deny`: the policy
//! boundary. Decide, record, checkpoint, mount, run, report, roll back.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::json;

use super::Ctx;
use crate::diff::{ChangeSummary, add_patches, diff_roots};
use crate::error::{Error, Result};
use crate::exec::envelope::{self, ApprovalInfo, Envelope, Rollback};
use crate::exec::runner::{self, RunSpec};
use crate::exec::sandbox::{self, SandboxConfig, SandboxInfo};
use crate::exec::{EXIT_APPROVAL_REQUIRED, EXIT_DENIED, EXIT_TIMED_OUT};
use crate::policy::{Action, Category, CommandLine, Decision, Policy, Request, corpus};
use crate::registry::{VaultRef, validate_name};
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
    /// Run under bubblewrap: the workspace and a private /tmp are the only writable
    /// places, no network unless granted (see docs/exec.md).
    #[arg(long, conflicts_with = "no_sandbox")]
    sandbox: bool,
    /// Run without the sandbox although the policy makes it the default (refused when
    /// the policy requires it).
    #[arg(long)]
    no_sandbox: bool,
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
        /// Environment the command would run with (as `exec --env`).
        #[arg(long = "env", value_name = "K=V")]
        env: Vec<String>,
        #[arg(long, conflicts_with = "argv")]
        shell: Option<String>,
        #[arg(last = true)]
        argv: Vec<String>,
    },
    /// Run every rule's inline examples and counter-examples, or a decision corpus.
    Test {
        /// A corpus file: `DECISION CATEGORY COMMAND` per line (docs/exec.md).
        #[arg(long, value_name = "FILE")]
        corpus: Option<PathBuf>,
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
    id: String,
}

const CAPTURE_LIMIT: usize = 1 << 20;
const PATCH_LIMIT: u64 = 64 * 1024;

/// The policy files, lowest precedence first: user-wide, the vault's, and (when the
/// command runs in a fork of it) the fork's own. A fork never escapes its vault's policy.
fn policy_files(ctx: &Ctx, v: &VaultRef, fork: Option<&str>) -> Vec<PathBuf> {
    let mut files = vec![
        ctx.home.join("policy.toml"),
        ctx.home.join("policies").join(format!("{}.toml", v.name)),
    ];
    if let Some(f) = fork.filter(|f| *f != v.name) {
        files.push(ctx.home.join("policies").join(format!("{f}.toml")));
    }
    files
}

pub fn load_policy(ctx: &Ctx, v: &VaultRef, fork: Option<&str>) -> Result<Policy> {
    let files = policy_files(ctx, v, fork);
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
    let p = load_policy(ctx, &v, None)?;
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
            let d = p.decide(&Request {
                command,
                cwd: &cwd,
                env: &env,
                workspace: None,
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
        PolicyCmd::Test { corpus: Some(file) } => return corpus_test(ctx, &p, &file),
        PolicyCmd::Test { corpus: None } => {
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
fn corpus_test(ctx: &Ctx, p: &Policy, file: &Path) -> Result<i32> {
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
                ap.request["vault"].as_str().unwrap_or(&ap.workspace),
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
            crate::store::audit::cli_actor(),
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

/// Where the command will run, decided before anything is created: the policy decides
/// first, and a denied or unapproved command leaves no fork behind.
enum Place {
    /// The target vault itself, or a fork that already exists.
    Existing(VaultRef),
    /// A fork of `base` to create under this name (`--fork NAME` on first use).
    NewFork(String),
    /// A fresh ephemeral fork of `base`, named in advance (so the watchdog can discard
    /// it if exec dies right after making it).
    Ephemeral(String),
}

fn plan_workspace(reg: &crate::registry::Registry, base: &VaultRef, a: &ExecArgs) -> Result<Place> {
    if a.ephemeral {
        return Ok(Place::Ephemeral(new_id("eph")));
    }
    let Some(name) = &a.fork else {
        return Ok(Place::Existing(base.clone()));
    };
    // A fork whose creation was killed between its two commits is picked up again.
    super::vault::reconcile(reg, &base.path)?;
    match reg.get(name)? {
        Some(existing) if existing.path == base.path => Ok(Place::Existing(existing)),
        Some(existing) => Err(Error::Refused(format!(
            "--fork {name}: {name} is registered for another vault file ({}), not a fork of {}",
            existing.path.display(),
            base.name
        ))),
        None => {
            validate_name(name)?;
            Ok(Place::NewFork(name.clone()))
        }
    }
}

/// Creates the fork of `base` the plan asks for; returns it and whether it is ephemeral.
fn create_workspace_for(
    ctx: &Ctx,
    reg: &crate::registry::Registry,
    base: &VaultRef,
    place: Place,
) -> Result<(VaultRef, bool)> {
    let (name, ephemeral) = match place {
        Place::Existing(v) => return Ok((v, false)),
        Place::NewFork(n) => (n, false),
        Place::Ephemeral(n) => (n, true),
    };
    ctx.sync_mount(base)?;
    let mut store = Store::open(&base.path)?;
    store.write(|db| {
        let mut ws = Workspace::open(db, &base.workspace)?;
        if ephemeral && ws.is_modified()? {
            // Forking a modified workspace would checkpoint the source first (and move its
            // head); an ephemeral fork must leave nothing behind, so it starts from the
            // live tree directly.
            let root = ws.flush()?;
            crate::workspace::create_workspace(db, &name, Some(root), Some((&ws.info, None)))?;
        } else {
            ws.fork(&name, None)?;
        }
        audit::append(
            db,
            Some(&base.workspace),
            "exec",
            "vault.fork",
            &json!({"fork": name, "ephemeral": ephemeral}),
        )?;
        Ok(())
    })?;
    let v = VaultRef {
        name: name.clone(),
        path: base.path.clone(),
        workspace: name,
    };
    if let Err(e) = super::vault::add_or_same(reg, &v) {
        let _ = store.write(|db| crate::workspace::delete_workspace(db, &v.workspace).map(|_| ()));
        return Err(e);
    }
    Ok((v, ephemeral))
}

/// Deletes an ephemeral fork (its workspace and its registration).
fn discard_fork(ctx: &Ctx, v: &VaultRef) -> Result<()> {
    let reg = ctx.registry()?;
    let mut store = Store::open(&v.path)?;
    store.write(|db| {
        crate::workspace::delete_workspace(db, &v.workspace)?;
        audit::append(
            db,
            Some(&v.workspace),
            "exec",
            "vault.delete",
            &json!({"fork": v.name, "ephemeral": true}),
        )
    })?;
    reg.remove(&v.name)
}

/// The exec watchdog (see `exec::watchdog`), seen from `avfs exec`: notes go down a
/// pipe only this process holds; dropping the handle says "done".
struct Watchdog {
    pipe: Option<std::process::ChildStdin>,
    child: std::process::Child,
}

impl Watchdog {
    fn start(ctx: &Ctx, id: &str, base: &VaultRef) -> Result<Watchdog> {
        let mut cmd = super::mount::avfs_command()?;
        cmd.arg("exec-watchdog")
            .arg("--id")
            .arg(id)
            .env("AVFS_HOME", &ctx.home)
            .env_remove(crate::exec::procs::MARKER)
            .current_dir("/")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        // A process group of its own: the terminal's signals (Ctrl-C, Ctrl-Z, hangup) go
        // to the foreground group, which ends `avfs exec`, not its watchdog.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
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

    fn tell(&self, note: serde_json::Value) {
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

#[derive(Args, Debug)]
pub struct WatchdogArgs {
    /// The exec run to watch.
    #[arg(long)]
    id: String,
}

fn vault_ref(v: &serde_json::Value) -> Option<VaultRef> {
    Some(VaultRef {
        name: v["name"].as_str()?.to_string(),
        path: PathBuf::from(v["path"].as_str()?),
        workspace: v["workspace"].as_str()?.to_string(),
    })
}

/// `avfs exec-watchdog` (internal): waits for its `avfs exec` to finish; if it died
/// instead, ends the command, waits for the temporary mount to go, rolls back
/// (`--rollback-on-failure`) or discards (`--ephemeral`) as exec would have, and says
/// so in the audit log.
pub fn watchdog(ctx: &Ctx, a: WatchdogArgs) -> Result<i32> {
    let Some(st) = crate::exec::watchdog::listen(std::io::stdin().lock()) else {
        return Ok(0);
    };
    let pgid = st.get("pgid").and_then(|v| v.as_i64()).map(|v| v as i32);
    let killed = crate::exec::watchdog::end_command(pgid, &a.id);
    if let Some(pid) = st.get("server").and_then(|v| v.as_i64()) {
        // It got SIGTERM from the kernel when exec died, and is unmounting.
        crate::exec::watchdog::wait_gone(pid as i32, Duration::from_secs(20));
    }
    if let Some(mp) = st.get("mountpoint").and_then(|v| v.as_str()) {
        remove_exec_mountpoint(Path::new(mp));
        let _ = crate::mount::list_mounts(&ctx.home);
    }
    let base = st.get("base").and_then(vault_ref);
    let target = st.get("workspace").and_then(vault_ref);
    let finished_ok =
        st.get("finished") == Some(&json!(true)) && st.get("failed") == Some(&json!(false));
    let mut rolled_back = None;
    if let (Some(v), Some(cp), true) = (
        &target,
        st.get("checkpoint").and_then(|v| v.as_str()),
        st.get("rollback") == Some(&json!(true)),
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
    if let (Some(name), Some(b)) = (st.get("ephemeral").and_then(|v| v.as_str()), &base) {
        let v = VaultRef {
            name: name.to_string(),
            path: b.path.clone(),
            workspace: name.to_string(),
        };
        let r = (|| {
            let mut store = Store::open(&v.path)?;
            store.write(
                |db| match crate::workspace::delete_workspace(db, &v.workspace) {
                    Ok(_) | Err(Error::NoSuchVault(_)) => Ok(()),
                    Err(e) => Err(e),
                },
            )?;
            let reg = ctx.registry()?;
            if reg.get(&v.name)?.is_some() {
                reg.remove(&v.name)?;
            }
            Ok::<(), Error>(())
        })();
        discarded = Some(r.is_ok());
    }
    if let Some(b) = &base {
        let ws = match (&target, discarded) {
            (Some(t), None) => t.workspace.clone(),
            _ => b.workspace.clone(),
        };
        let detail = json!({
            "exec": a.id, "reason": "avfs exec ended before its command (killed or crashed)",
            "command_finished": st.get("finished").cloned().unwrap_or(json!(false)),
            "killed_processes": killed, "rolled_back": rolled_back, "discarded_fork": discarded,
            "fork": st.get("ephemeral").cloned().unwrap_or(serde_json::Value::Null),
        });
        let mut store = Store::open(&b.path)?;
        store.write(|db| audit::append(db, Some(&ws), "exec", "exec.abandoned", &detail))?;
    }
    Ok(0)
}

/// Unmounts and removes exec's own mountpoint. exec may have died while its server was
/// still starting, so a mount can appear after a first look: only once the directory is
/// gone can none appear any more.
fn remove_exec_mountpoint(mp: &Path) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if crate::mount::is_mountpoint(mp) {
            let _ = crate::mount::force_unmount(mp);
        }
        match std::fs::remove_dir(mp) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(_) => return,
        }
    }
}

/// Where exec mounts a workspace that is not mounted already.
fn exec_mountpoint(home: &Path, id: &str) -> PathBuf {
    crate::mount::run_dir(home).join("exec").join(id)
}

/// A mount of a workspace for the duration of a command: the running mount when there is
/// one, otherwise one started here and unmounted when the guard goes.
pub(super) struct MountGuard {
    home: PathBuf,
    pub(super) mountpoint: PathBuf,
    ours: bool,
    /// The server of a mount we made.
    server: Option<u32>,
    /// The mount's control socket.
    socket: Option<PathBuf>,
}

impl MountGuard {
    pub(super) fn acquire(ctx: &Ctx, v: &VaultRef, id: &str) -> Result<MountGuard> {
        if let Some(m) = crate::mount::find_mount(&ctx.home, &v.path, &v.workspace)? {
            return Ok(MountGuard {
                home: ctx.home.clone(),
                mountpoint: m.mountpoint,
                ours: false,
                server: None,
                socket: Some(m.socket),
            });
        }
        let mp = exec_mountpoint(&ctx.home, id);
        std::fs::create_dir_all(&mp).map_err(|e| Error::host(mp.display(), e))?;
        // The server dies with this process: killed, exec leaves no mount behind.
        let rec = super::mount::spawn_background(&ctx.home, v, &mp, false, false, true)?;
        Ok(MountGuard {
            home: ctx.home.clone(),
            mountpoint: rec.mountpoint,
            ours: true,
            server: Some(rec.pid),
            socket: Some(rec.socket),
        })
    }

    fn release(&mut self) {
        if !std::mem::take(&mut self.ours) {
            return;
        }
        if let Ok(list) = crate::mount::list_mounts(&self.home)
            && let Some(m) = list.into_iter().find(|m| m.mountpoint == self.mountpoint)
        {
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
        if crate::mount::is_mountpoint(&self.mountpoint) {
            let _ = crate::mount::force_unmount(&self.mountpoint);
        }
        let _ = std::fs::remove_dir(&self.mountpoint);
    }
}

impl Drop for MountGuard {
    fn drop(&mut self) {
        self.release();
    }
}

/// How many requests the mount refused for a quota so far, and the last message.
fn quota_refusals(socket: Option<&Path>) -> Option<(u64, String)> {
    let v = crate::mount::control::request(socket?, &json!({"op": "quota"})).ok()?;
    Some((
        v["refused"].as_u64()?,
        v["message"].as_str().unwrap_or_default().to_string(),
    ))
}

fn show_command(c: &envelope::Command) -> String {
    c.shell
        .clone()
        .unwrap_or_else(|| c.argv.clone().unwrap_or_default().join(" "))
}

fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .map(|v| {
            v.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The request an approval was given for, as exec arguments (the command line given
/// with `--approve`, if any, must be exactly that one).
fn approved_args(ctx: &Ctx, a: &ExecArgs, ap_id: &str) -> Result<(ExecArgs, approvals::Approval)> {
    let (_, mut store) = ctx.open()?;
    let ap = store.read(|db| approvals::get(db, ap_id))?;
    if ap.state != "approved" {
        return Err(Error::Refused(format!(
            "approval {ap_id} is {}; only an approved request can run",
            ap.state
        )));
    }
    let req = &ap.request;
    let opts = &req["options"];
    let stored = ExecArgs {
        fork: opts["fork"].as_str().map(String::from),
        ephemeral: opts["ephemeral"].as_bool().unwrap_or(false),
        keep: opts["keep"].as_bool().unwrap_or(false),
        cwd: req["cwd"].as_str().unwrap_or("/").to_string(),
        timeout: opts["timeout_secs"].as_f64(),
        env: strings(&opts["env"]),
        checkpoint: opts["checkpoint"].as_bool().unwrap_or(false),
        no_checkpoint: opts["no_checkpoint"].as_bool().unwrap_or(false),
        rollback_on_failure: opts["rollback_on_failure"].as_bool().unwrap_or(false),
        approve: Some(ap_id.to_string()),
        sandbox: opts["sandbox"].as_bool().unwrap_or(false),
        no_sandbox: opts["no_sandbox"].as_bool().unwrap_or(false),
        shell: req["command"]["shell"].as_str().map(String::from),
        argv: strings(&req["command"]["argv"]),
    };
    let given = a.shell.is_some() || !a.argv.is_empty();
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
    Ok((stored, ap))
}

pub fn exec(ctx: &Ctx, a: ExecArgs) -> Result<i32> {
    let id = new_id("ex");
    // An approved request replaces whatever command line was given, and runs in the
    // vault it was asked in.
    let (a, approved) = match &a.approve {
        Some(ap_id) => {
            let (stored, ap) = approved_args(ctx, &a, ap_id)?;
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
        Some(ap) => with_vault(ctx, Some(ap.workspace.clone())),
        None => with_vault(ctx, ctx.vault_sel.clone()),
    };
    let cwd = cwd_components(&a.cwd)?;
    let timeout = match a.timeout {
        None => None,
        Some(t) => Some(
            Duration::try_from_secs_f64(t)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| {
                    Error::InvalidArgument(
                        t.to_string(),
                        "--timeout takes a positive number of seconds".into(),
                    )
                })?,
        ),
    };
    let env_pairs = env_pairs(&a.env)?;
    let (reg, base) = ctx_target.target()?;
    let place = plan_workspace(&reg, &base, &a)?;
    let (planned_vault, planned_ws) = match &place {
        Place::Existing(v) => (v.name.clone(), v.workspace.clone()),
        Place::NewFork(n) => (n.clone(), n.clone()),
        Place::Ephemeral(_) => (base.name.clone(), base.workspace.clone()),
    };
    let fork_name = match &place {
        Place::Ephemeral(_) => None,
        _ => Some(planned_vault.as_str()),
    };
    let policy = load_policy(ctx, &base, fork_name)?;
    let command = envelope::Command {
        kind: if a.shell.is_some() { "shell" } else { "argv" },
        argv: (!a.argv.is_empty()).then(|| a.argv.clone()),
        shell: a.shell.clone(),
    };
    let request = envelope::Request {
        command: command.clone(),
        cwd: format!("/{}", cwd.join("/")),
        vault: planned_vault,
        workspace: planned_ws,
        options: json!({
            "timeout_secs": a.timeout, "env": a.env, "checkpoint": a.checkpoint, "no_checkpoint": a.no_checkpoint,
            "rollback_on_failure": a.rollback_on_failure, "fork": a.fork, "ephemeral": a.ephemeral, "keep": a.keep,
            "approve": a.approve, "sandbox": a.sandbox, "no_sandbox": a.no_sandbox,
        }),
    };
    let mut decision: Decision = policy.decide(&Request {
        command: match &a.shell {
            Some(s) => CommandLine::Shell(s),
            None => CommandLine::Argv(&a.argv),
        },
        cwd: &cwd,
        env: &env_pairs,
        // Not known before the run is set up: absolute paths count as outside.
        workspace: None,
    });
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
        sandbox: SandboxInfo::nothing_ran(),
        exit_code: 0,
    };
    // Sandboxed unless the policy allows --no-sandbox to turn its default off.
    let sandboxed = if a.no_sandbox {
        if policy.sandbox.required {
            return Err(Error::Refused(format!(
                "--no-sandbox: the policy requires the sandbox ([sandbox] required = true in {})",
                policy.sources.join(", ")
            )));
        }
        false
    } else {
        a.sandbox || policy.sandbox.default || policy.sandbox.required
    };
    // Nothing is created before the policy has said yes.
    match decision.action {
        Action::Deny => {
            envelope.exit_code = EXIT_DENIED;
            let mut store = Store::open(&base.path)?;
            store.write(|db| {
                audit::append(
                    db,
                    Some(&envelope.request.workspace),
                    "exec",
                    "exec.deny",
                    &serde_json::to_value(&envelope).unwrap_or_default(),
                )
            })?;
            return finish(ctx, &envelope, None, false);
        }
        Action::RequireApproval if approved.is_none() => {
            let ap_id = new_id("ap");
            let req = serde_json::to_value(&envelope.request).unwrap_or_default();
            let dec = serde_json::to_value(&decision).unwrap_or_default();
            let mut store = Store::open(&base.path)?;
            // The approval names the vault the command was asked in; a fork (or a fresh
            // ephemeral one) is made from it when the approved command runs.
            let ap = store.write(|db| {
                let ap = approvals::create(db, &ap_id, &base.name, &req, &dec)?;
                audit::append(
                    db,
                    Some(&envelope.request.workspace),
                    "exec",
                    "approval.request",
                    &json!({"approval": ap_id, "request": req, "decision": dec}),
                )?;
                Ok(ap)
            })?;
            envelope.approval = Some(ApprovalInfo {
                id: ap.id,
                state: ap.state,
                expires_at_ns: Some(ap.expires_at_ns),
            });
            envelope.exit_code = EXIT_APPROVAL_REQUIRED;
            return finish(ctx, &envelope, None, false);
        }
        _ => {}
    }
    // Checked before the approval is used or anything is created: a missing bubblewrap
    // is an error, never a silent run without the sandbox.
    let sandbox_run = if sandboxed {
        let (network, granted_by) = if policy.sandbox.network {
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
        };
        Some(SandboxRun {
            bwrap: sandbox::find_bwrap()?,
            config: policy.sandbox.clone(),
            network,
            granted_by,
        })
    } else {
        None
    };
    if let Some(ap) = &approved {
        // Used before anything is created or run: at most once, even when two runs race.
        let mut store = Store::open(&base.path)?;
        let used = store.write(|db| {
            let used = approvals::consume(db, &ap.id)?;
            audit::append(
                db,
                Some(&envelope.request.workspace),
                "exec",
                "approval.use",
                &json!({"approval": ap.id, "exec": envelope.id}),
            )?;
            Ok(used)
        })?;
        envelope.approval = Some(ApprovalInfo {
            id: used.id,
            state: used.state,
            expires_at_ns: Some(used.expires_at_ns),
        });
    }
    // From here on, if this process dies, the watchdog finishes for it.
    let dog = Watchdog::start(ctx, &id, &base)?;
    if let (Place::Ephemeral(name), false) = (&place, a.keep) {
        dog.tell(json!({"ephemeral": name}));
    }
    let (v, ephemeral) = create_workspace_for(ctx, &reg, &base, place)?;
    dog.tell(json!({"workspace": {"name": v.name, "path": v.path, "workspace": v.workspace}}));
    envelope.request.vault = v.name.clone();
    envelope.request.workspace = v.workspace.clone();
    let job = Run {
        cwd: &cwd,
        timeout,
        env: &env_pairs,
        sandbox: sandbox_run,
        dog: &dog,
    };
    let result = run_command(ctx, &a, &v, &job, &decision, &mut envelope);
    let discard = ephemeral && !a.keep;
    if discard {
        // Also when the run failed: an ephemeral fork never outlives its command.
        let gone = discard_fork(ctx, &v);
        result?;
        gone?;
    } else {
        result?;
    }
    drop(dog);
    finish(
        ctx,
        &envelope,
        ephemeral.then_some(v.name.as_str()),
        ephemeral && a.keep,
    )
}

/// What the run needs besides the arguments: checked and parsed before anything started.
struct Run<'a> {
    cwd: &'a [String],
    timeout: Option<Duration>,
    env: &'a [(String, String)],
    sandbox: Option<SandboxRun>,
    dog: &'a Watchdog,
}

/// How a sandboxed run is enforced.
struct SandboxRun {
    bwrap: PathBuf,
    config: SandboxConfig,
    network: bool,
    granted_by: Option<String>,
}

/// Mounts (or reuses the live mount), runs and reports.
fn run_command(
    ctx: &Ctx,
    a: &ExecArgs,
    v: &VaultRef,
    job: &Run,
    decision: &Decision,
    envelope: &mut Envelope,
) -> Result<()> {
    // The watchdog learns where exec's own mount will be before it exists: exec may die
    // while the server is starting.
    job.dog
        .tell(json!({"mountpoint": exec_mountpoint(&ctx.home, &envelope.id)}));
    // Released when dropped, also if anything below fails or panics.
    let mount = MountGuard::acquire(ctx, v, &envelope.id)?;
    if let Some(pid) = mount.server {
        job.dog.tell(json!({"server": pid}));
    }
    envelope.mountpoint = Some(mount.mountpoint.display().to_string());
    let result = run_in_mount(ctx, a, v, &mount, job, decision, envelope);
    drop(mount);
    result
}

fn run_in_mount(
    ctx: &Ctx,
    a: &ExecArgs,
    v: &VaultRef,
    mount: &MountGuard,
    job: &Run,
    decision: &Decision,
    envelope: &mut Envelope,
) -> Result<()> {
    let mut store = Store::open(&v.path)?;
    let store = &mut store;
    let want_checkpoint = !a.no_checkpoint
        && (a.checkpoint
            || a.rollback_on_failure
            || decision.action == Action::AllowWithCheckpoint);
    // Every component must be a real directory of the workspace: following a symlink
    // (`sub -> /etc`) would start the command outside it.
    let mut dir = mount.mountpoint.clone();
    for c in job.cwd {
        dir.push(c);
        let what = || format!("--cwd {} ({} in the workspace)", envelope.request.cwd, c);
        match std::fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(Error::NotADirectory(what())),
            Err(_) => return Err(Error::NotFound(what())),
        }
    }
    // The sandbox is planned before the checkpoint: a plan that fails leaves nothing.
    let plan = match &job.sandbox {
        Some(sb) => {
            let init = std::env::current_exe()
                .map_err(|e| Error::host("locating the avfs binary for the sandbox", e))?;
            let home = std::env::var_os("HOME").map(PathBuf::from);
            let path_var = std::env::var_os("PATH");
            let plan = sandbox::plan(&sandbox::Request {
                config: &sb.config,
                network: sb.network,
                network_granted_by: sb.granted_by.clone(),
                mountpoint: &mount.mountpoint,
                cwd: &dir,
                avfs_home: &ctx.home,
                vault_file: &v.path,
                init: &init,
                home: home.as_deref().filter(|h| h.is_absolute()),
                path_var: path_var.as_deref(),
            })?;
            envelope.sandbox = plan.info.clone();
            Some(plan)
        }
        None => {
            envelope.sandbox = SandboxInfo::unenforced();
            None
        }
    };
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
    if let Some(cp) = &checkpoint {
        job.dog
            .tell(json!({"checkpoint": cp, "rollback": a.rollback_on_failure}));
    }
    // A mount made for this run has refused nothing yet.
    let quota_before = if mount.server.is_some() {
        Some((0, String::new()))
    } else {
        quota_refusals(mount.socket.as_deref())
    };
    let mut env = vec![
        ("AVFS_VAULT".to_string(), v.name.clone()),
        ("AVFS_WORKSPACE".to_string(), v.workspace.clone()),
        (
            "AVFS_CHECKPOINT".to_string(),
            checkpoint.clone().unwrap_or_default(),
        ),
    ];
    env.extend(job.env.iter().cloned());
    let (mut program, mut args): (OsString, Vec<OsString>) = match &a.shell {
        Some(s) => ("/bin/sh".into(), vec!["-c".into(), s.into()]),
        None => (
            a.argv[0].clone().into(),
            a.argv[1..].iter().map(OsString::from).collect(),
        ),
    };
    if let (Some(sb), Some(plan)) = (&job.sandbox, plan) {
        // bwrap ARGS... -- avfs INIT -- PROGRAM ARGS...
        let mut full = plan.args;
        full.push(program);
        full.append(&mut args);
        (program, args) = (sb.bwrap.clone().into_os_string(), full);
        env = sandbox::environment(&sb.config, std::env::vars_os(), &env);
    }
    let spec = RunSpec {
        program: &program,
        args: &args,
        cwd: &dir,
        env: &env,
        timeout: job.timeout,
        grace: Duration::from_secs(2),
        capture_limit: CAPTURE_LIMIT,
        stream: !ctx.out.json,
        sandboxed: job.sandbox.is_some(),
        // The runner also sets AVFS_EXEC_ID, the marker of the command's processes.
        id: &envelope.id,
        adopt_children: true,
        on_start: Some(&|pgid| job.dog.tell(json!({"pgid": pgid}))),
    };
    let mut run = runner::run(&spec);
    if let Ok(r) = &run {
        job.dog
            .tell(json!({"finished": true, "failed": r.timed_out || r.exit_code != Some(0)}));
    }
    if let (Ok(r), Some((n, message))) = (&mut run, quota_refusals(mount.socket.as_deref())) {
        let refusals = n.saturating_sub(quota_before.map_or(0, |b| b.0));
        if refusals > 0 {
            r.quota_refused = Some(runner::QuotaRefused { refusals, message });
        }
    }
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
        let sb = &env.sandbox;
        if sb.enforced {
            eprintln!(
                "sandbox:    bwrap; network {}; writable: {}",
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
        } else if let Some(name) = ephemeral {
            eprintln!("ephemeral fork {name} discarded");
        }
    });
    Ok(env.exit_code)
}
