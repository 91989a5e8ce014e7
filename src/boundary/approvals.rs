//! Approvals seen from the boundary: listing, deciding (never from inside a run), and
//! turning an approved request back into the request it was.

use std::time::Duration;

use serde_json::json;

use super::{CheckpointMode, Command, ExecRequest, SandboxMode};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::registry::VaultRef;
use crate::store::approvals::{self, Approval};
use crate::store::{Store, audit};

/// The vault files avfs knows, each once (forks share their vault's file): the selected
/// one first, then every registered one.
fn vault_files(ctx: &Context) -> Result<Vec<VaultRef>> {
    let reg = ctx.registry()?;
    let mut out: Vec<VaultRef> = Vec::new();
    let selected = reg.resolve(ctx.vault_sel.as_deref())?;
    for v in selected.into_iter().chain(reg.list()?) {
        if v.path.exists() && !out.iter().any(|o| o.path == v.path) {
            out.push(v);
        }
    }
    Ok(out)
}

/// The approvals of the selected vault with `--vault`, else of every vault, oldest first.
pub fn list(ctx: &Context, all: bool) -> Result<Vec<Approval>> {
    let files = if ctx.vault_sel.is_some() {
        vec![ctx.existing()?.1]
    } else {
        vault_files(ctx)?
    };
    let selected = ctx.vault_sel.is_some();
    let mut out = Vec::new();
    for v in files {
        let read = ctx.sync_mount(&v).and_then(|()| {
            let mut store = Store::open(&v.path)?;
            store.read(|db| approvals::list(db, all))
        });
        match read {
            Ok(aps) => out.extend(aps),
            Err(e) if selected => return Err(e),
            // One unreadable vault does not hide the others' requests.
            Err(e) => eprintln!("avfs: warning: vault {}: {e}", v.name),
        }
    }
    out.sort_by_key(|a| a.created_at_ns);
    Ok(out)
}

/// The vault an approval id belongs to (ids are random, so unique across vaults), and
/// the approval. The selected vault is searched first; a copied vault file holds the same
/// ids, and then only `--vault` can choose.
pub fn find(ctx: &Context, id: &str) -> Result<(VaultRef, Approval)> {
    let selected = ctx.vault_sel.is_some();
    if selected {
        // A selection that names nothing is an error of its own.
        ctx.existing()?;
    }
    let mut found: Vec<(VaultRef, Approval)> = Vec::new();
    let mut failed: Option<Error> = None;
    for (i, v) in vault_files(ctx)?.into_iter().enumerate() {
        let got =
            Store::open(&v.path).and_then(|mut store| store.read(|db| approvals::get(db, id)));
        match got {
            Ok(ap) => found.push((v, ap)),
            Err(Error::NotFound(_)) => {}
            Err(e) if selected && i == 0 => return Err(e),
            // One unreadable vault does not keep a person from deciding in another;
            // when the id is in none of the others, what failed is the answer.
            Err(e) => {
                eprintln!("avfs: warning: vault {}: {e}", v.name);
                failed.get_or_insert(e);
            }
        }
        if selected && i == 0 && !found.is_empty() {
            break;
        }
    }
    if found.len() > 1 {
        let names: Vec<&str> = found.iter().map(|(v, _)| v.name.as_str()).collect();
        return Err(Error::Refused(format!(
            "approval {id} is in more than one vault file ({}: copies of one vault); choose one with --vault",
            names.join(", ")
        )));
    }
    let Some((v, ap)) = found.pop() else {
        return Err(failed.unwrap_or_else(|| {
            Error::NotFound(format!("approval {id} in any vault (see `avfs approvals`)"))
        }));
    };
    // The vault it was asked in names the workspace its audit rows belong to.
    let reg = ctx.registry()?;
    let asked_in = reg
        .get(&ap.workspace)?
        .filter(|a| a.path == v.path)
        .unwrap_or(v);
    Ok((asked_in, ap))
}

/// Why this process must not decide approvals: it runs inside an `avfs exec` run (a
/// command must never approve its own request). PID 1 of every run is avfs's set-up,
/// which a command cannot replace; the marker variable catches runs of older engines.
pub fn inside_a_run() -> Option<String> {
    if std::env::var_os(crate::procs::MARKER).is_some() {
        return Some(format!("{} is set", crate::procs::MARKER));
    }
    let init = std::fs::read("/proc/1/cmdline").unwrap_or_default();
    let comm = std::fs::read("/proc/1/comm").unwrap_or_default();
    let forked = crate::exec::forked::RUN_INIT_COMM.to_bytes();
    if init
        .split(|b| *b == 0)
        .any(|a| a == crate::sandbox::RUN_INIT_ARG.as_bytes())
        || comm.strip_suffix(b"\n") == Some(forked)
    {
        return Some("this process runs in an avfs run's PID namespace".into());
    }
    None
}

/// Approves or denies a pending request, outside any run. The id names the vault.
pub fn decide(ctx: &Context, id: &str, approve: bool) -> Result<Approval> {
    if let Some(why) = inside_a_run() {
        return Err(Error::Refused(format!(
            "approvals cannot be decided from inside an avfs exec run ({why}); a person decides them outside"
        )));
    }
    let (v, _) = find(ctx, id)?;
    ctx.sync_mount(&v)?;
    let mut store = Store::open(&v.path)?;
    store.write(|db| approvals::decide(db, id, approve, &v.workspace, audit::cli_actor()))
}

/// The state of an approval now, as the audit log confirms it.
pub fn current(v: &VaultRef, id: &str) -> Result<Approval> {
    let mut store = Store::open(&v.path)?;
    store.read(|db| approvals::get_attested(db, id))
}

/// Waits up to `within` for a person to approve or deny a pending request; returns it as
/// it is then (still `pending` when nobody decided in time).
pub fn wait_for_decision(v: &VaultRef, id: &str, within: Duration) -> Result<Approval> {
    let start = std::time::Instant::now();
    // Short steps first (a person who is watching answers within seconds), then 1 s.
    let mut step = Duration::from_millis(100);
    loop {
        let ap = current(v, id)?;
        let left = within.saturating_sub(start.elapsed());
        if ap.state != "pending" || left.is_zero() {
            return Ok(ap);
        }
        std::thread::sleep(step.min(left));
        step = (step * 2).min(Duration::from_secs(1));
    }
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

/// The options of a request as the envelope and an approval record them.
pub fn options_json(r: &ExecRequest) -> serde_json::Value {
    json!({
        "timeout_secs": r.timeout.map(|d| d.as_secs_f64()),
        "env": r.env.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
        "checkpoint": r.checkpoint == CheckpointMode::Always,
        "no_checkpoint": r.checkpoint == CheckpointMode::Never,
        "rollback_on_failure": r.rollback_on_failure,
        "fork": r.fork, "ephemeral": r.ephemeral, "keep": r.keep,
        "approve": r.approve,
        "sandbox": r.sandbox == SandboxMode::On,
        "no_sandbox": r.sandbox == SandboxMode::Off,
        "engine": r.engine.map(|e| e.name()),
        "keep_setuid": r.keep_setuid,
    })
}

/// The request an approval was given for, and the vault it was asked in. A command line
/// given with `--approve` must be exactly that one.
pub fn approved_request(
    ctx: &Context,
    given: &ExecRequest,
    ap_id: &str,
) -> Result<(ExecRequest, Approval, VaultRef)> {
    let (v, _) = find(ctx, ap_id)?;
    let ap = current(&v, ap_id)?;
    if ap.state != "approved" {
        return Err(Error::Refused(format!(
            "approval {ap_id} is {}; only an approved request can run",
            ap.state
        )));
    }
    let req = &ap.request;
    let opts = &req["options"];
    let command = match req["command"]["shell"].as_str() {
        Some(s) => Command::Shell(s.to_string()),
        None => Command::Argv(strings(&req["command"]["argv"])),
    };
    if !given.command.is_empty() && given.command != command {
        return Err(Error::Refused(format!(
            "approval {ap_id} is for `{}`, not for this command",
            command.shown()
        )));
    }
    let mut env = vec![];
    for kv in strings(&opts["env"]) {
        if let Some((k, v)) = kv.split_once('=') {
            env.push((k.to_string(), v.to_string()));
        }
    }
    let stored = ExecRequest {
        command,
        cwd: req["cwd"].as_str().unwrap_or("/").to_string(),
        fork: opts["fork"].as_str().map(String::from),
        ephemeral: opts["ephemeral"].as_bool().unwrap_or(false),
        keep: opts["keep"].as_bool().unwrap_or(false),
        timeout: opts["timeout_secs"]
            .as_f64()
            .and_then(|t| Duration::try_from_secs_f64(t).ok()),
        env,
        checkpoint: if opts["checkpoint"].as_bool() == Some(true) {
            CheckpointMode::Always
        } else if opts["no_checkpoint"].as_bool() == Some(true) {
            CheckpointMode::Never
        } else {
            CheckpointMode::Auto
        },
        rollback_on_failure: opts["rollback_on_failure"].as_bool().unwrap_or(false),
        approve: Some(ap_id.to_string()),
        sandbox: if opts["no_sandbox"].as_bool() == Some(true) {
            SandboxMode::Off
        } else if opts["sandbox"].as_bool() == Some(true) {
            SandboxMode::On
        } else {
            SandboxMode::Default
        },
        engine: opts["engine"].as_str().and_then(|e| match e {
            "overlay" => Some(crate::engine::EngineKind::Overlay),
            "fuse" => Some(crate::engine::EngineKind::Fuse),
            _ => None,
        }),
        keep_setuid: opts["keep_setuid"].as_bool().unwrap_or(false),
        wait: given.wait,
        wait_approval: None,
        stream: given.stream,
        interactive: false,
        // How much the envelope shows is the caller's choice, not part of what was approved.
        report: given.report,
        // Limits too: they bound the run, they grant nothing the approval did not.
        limits: given.limits,
        service: None,
    };
    Ok((stored, ap, v))
}
