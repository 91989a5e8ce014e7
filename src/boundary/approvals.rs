//! Approvals seen from the boundary: listing, deciding (never from inside a run), and
//! turning an approved request back into the request it was.

use std::time::Duration;

use serde_json::json;

use super::{CheckpointMode, Command, ExecRequest, SandboxMode};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::store::approvals::{self, Approval};
use crate::store::{Store, audit};

pub fn list(ctx: &Context, all: bool) -> Result<Vec<Approval>> {
    let (_, v) = ctx.target()?;
    ctx.sync_mount(&v)?;
    let mut store = Store::open(&v.path)?;
    store.read(|db| approvals::list(db, all))
}

/// Why this process must not decide approvals: it runs inside an `avfs exec` run (a
/// command must never approve its own request). PID 1 of every run is avfs's set-up,
/// which a command cannot replace; the marker variable catches runs of older engines.
pub fn inside_a_run() -> Option<String> {
    if std::env::var_os(crate::exec::procs::MARKER).is_some() {
        return Some(format!("{} is set", crate::exec::procs::MARKER));
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

/// Approves or denies a pending request, outside any run.
pub fn decide(ctx: &Context, id: &str, approve: bool) -> Result<Approval> {
    if let Some(why) = inside_a_run() {
        return Err(Error::Refused(format!(
            "approvals cannot be decided from inside an avfs exec run ({why}); a person decides them outside"
        )));
    }
    let (v, _) = {
        let (reg, v) = ctx.target()?;
        (v, reg)
    };
    ctx.sync_mount(&v)?;
    let mut store = Store::open(&v.path)?;
    store.write(|db| {
        let ap = approvals::decide(db, id, approve)?;
        audit::append(
            db,
            Some(&v.workspace),
            crate::store::audit::cli_actor(),
            if approve {
                "approval.approve"
            } else {
                "approval.deny"
            },
            &json!({"id": id}),
        )?;
        Ok(ap)
    })
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

/// The request an approval was given for. A command line given with `--approve` must be
/// exactly that one.
pub fn approved_request(
    ctx: &Context,
    given: &ExecRequest,
    ap_id: &str,
) -> Result<(ExecRequest, Approval)> {
    let (v, _) = {
        let (reg, v) = ctx.target()?;
        (v, reg)
    };
    let mut store = Store::open(&v.path)?;
    let ap = store.read(|db| approvals::get(db, ap_id))?;
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
        stream: given.stream,
        interactive: false,
        // How much the envelope shows is the caller's choice, not part of what was approved.
        report: given.report,
        // Limits too: they bound the run, they grant nothing the approval did not.
        limits: given.limits,
    };
    Ok((stored, ap))
}

/// The vault an approval belongs to is the one it was asked in.
pub fn approval_vault(ap: &Approval) -> Option<String> {
    Some(ap.workspace.clone())
}
