//! `avfs service`: start, list, logs, stop, restart (the library's `service` module does
//! the work; this file parses and prints).

use std::io::Write;
use std::time::Duration;

use clap::{Args, Subcommand};

use super::Ctx;
use crate::boundary::Command;
use crate::documents::services::{ServiceDoc, ServiceList, ServiceStarted};
use crate::error::{Error, Result};
use crate::service::{self, StartRequest};

#[derive(Subcommand, Debug)]
pub enum ServiceCmd {
    /// Start a command as a service of the workspace: decided by the policy as a run is,
    /// in the same sandbox and limits, at the workspace's stable path; returns at once.
    Start(StartArgs),
    /// The workspace's services: name, state, pid, started at, exit status.
    List,
    /// A service's output (stdout and stderr as they came; the last 2 MiB are kept).
    Logs(LogsArgs),
    /// Stop a service (SIGTERM, then SIGKILL after 2 s); it keeps its exit status and
    /// its last output.
    Stop(WhichArgs),
    /// Stop a service and start its command again (same name, environment, cwd, ttl).
    Restart(WhichArgs),
}

#[derive(Args, Debug)]
pub struct StartArgs {
    /// Its name (unique among the workspace's running services; default: its id).
    #[arg(long)]
    name: Option<String>,
    /// Extra environment variables.
    #[arg(long = "env", value_name = "K=V")]
    env: Vec<String>,
    /// Directory inside the workspace to start it in (default: its root).
    #[arg(long, default_value = "/")]
    cwd: String,
    /// Publish this port on the host's 127.0.0.1 (loopback only): the host reaches the
    /// service's 127.0.0.1:PORT there. Repeatable.
    #[arg(long, value_name = "PORT")]
    publish: Vec<u16>,
    /// End it after this many seconds.
    #[arg(long, value_name = "SECS")]
    ttl: Option<f64>,
    /// Wait up to this many seconds for a run of the workspace to end (default 30).
    #[arg(long, value_name = "SECS")]
    wait: Option<f64>,
    /// A shell command line (bash, as `exec --shell`).
    #[arg(long, conflicts_with = "argv")]
    shell: Option<String>,
    /// The command and its arguments.
    #[arg(last = true)]
    argv: Vec<String>,
}

#[derive(Args, Debug)]
pub struct LogsArgs {
    /// The service's name or id.
    which: String,
    /// Only the last N lines.
    #[arg(long, value_name = "N")]
    tail: Option<usize>,
    /// Keep printing what it writes until it ends (or Ctrl-C).
    #[arg(long, short = 'f')]
    follow: bool,
}

#[derive(Args, Debug)]
pub struct WhichArgs {
    /// The service's name or id.
    which: String,
}

fn secs(flag: &str, v: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(v)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            Error::InvalidArgument(
                v.to_string(),
                format!("{flag} takes a positive number of seconds"),
            )
        })
}

pub fn run(ctx: &Ctx, c: ServiceCmd) -> Result<i32> {
    let lib = ctx.lib();
    match c {
        ServiceCmd::Start(a) => {
            let command = match a.shell {
                Some(s) => Command::Shell(s),
                None => Command::Argv(a.argv),
            };
            let mut env = vec![];
            for kv in &a.env {
                match kv.split_once('=') {
                    Some((k, v)) if !k.is_empty() => env.push((k.to_string(), v.to_string())),
                    _ => return Err(Error::InvalidArgument(kv.clone(), "--env takes K=V".into())),
                }
            }
            let req = StartRequest {
                command,
                name: a.name,
                env,
                cwd: a.cwd,
                ttl: a.ttl.map(|t| secs("--ttl", t)).transpose()?,
                publish: a.publish,
                wait: a.wait.map(|t| secs("--wait", t)).transpose()?,
            };
            let (started, code) = service::start(&lib, req)?;
            print_started(ctx, &started);
            Ok(code)
        }
        ServiceCmd::Restart(a) => {
            let (started, code) = service::restart(&lib, &a.which)?;
            print_started(ctx, &started);
            Ok(code)
        }
        ServiceCmd::List => {
            let doc = ServiceList {
                services: service::list(&lib)?,
            };
            ctx.out.emit(&doc, || {
                if doc.services.is_empty() {
                    println!("no services");
                }
                for s in &doc.services {
                    println!("{}", line(s));
                }
            });
            Ok(0)
        }
        ServiceCmd::Logs(a) => {
            let (bytes, dir, offset) = service::logs(&lib, &a.which, a.tail)?;
            let mut out = std::io::stdout();
            if ctx.out.json {
                let v = serde_json::json!({"output": String::from_utf8_lossy(&bytes)});
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
                return Ok(0);
            }
            let _ = out.write_all(&bytes);
            let _ = out.flush();
            if a.follow {
                service::follow(&dir, offset, |b| {
                    out.write_all(b).is_ok() && out.flush().is_ok()
                })?;
            }
            Ok(0)
        }
        ServiceCmd::Stop(a) => {
            let doc = service::stop(&lib, &a.which)?;
            ctx.out.emit(&doc, || {
                if doc.stopped {
                    println!("stopped {}", line(&doc.service));
                } else {
                    println!("not running: {}", line(&doc.service));
                }
            });
            Ok(0)
        }
    }
}

fn line(s: &ServiceDoc) -> String {
    let status = match (s.exit_code, s.signal) {
        (Some(c), _) => format!(" exit {c}"),
        (None, Some(sig)) => format!(" signal {sig}"),
        _ => String::new(),
    };
    format!(
        "{:<16} {:<8} pid {:<7} {} {}{}{}{}",
        s.name,
        s.state,
        s.pid.map_or("-".into(), |p| p.to_string()),
        s.started_at,
        s.command.join(" "),
        status,
        s.end_reason
            .as_ref()
            .map_or(String::new(), |r| format!(" ({r})")),
        wrote(s)
    )
}

/// What the services wrote while it ran, at the line's end: `; wrote 3 paths, 2 not taken
/// in yet` (nothing when they wrote nothing).
fn wrote(s: &ServiceDoc) -> String {
    let w = &s.writes;
    let mut parts = vec![];
    if w.total > 0 {
        let paths = if w.total == 1 { "path" } else { "paths" };
        parts.push(format!("wrote {} {paths}", w.total));
    }
    if let Some(p) = w.pending.filter(|p| p.entries > 0) {
        let more = if p.at_least { "+" } else { "" };
        parts.push(format!("{}{more} not taken in yet", p.entries));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("; {}", parts.join(", "))
    }
}

fn print_started(ctx: &Ctx, s: &ServiceStarted) {
    ctx.out.emit(s, || match &s.service {
        Some(svc) if svc.state != "running" => {
            println!("{}", line(svc));
            if let Some(out) = svc.last_output.as_deref().filter(|o| !o.is_empty()) {
                println!("its last output:\n{}", out.trim_end());
            }
        }
        Some(svc) => println!(
            "started {} ({}), pid {}",
            svc.name,
            svc.id,
            svc.pid.map_or("-".into(), |p| p.to_string())
        ),
        None => match &s.approval {
            Some(ap) => println!(
                "not started: approval required ({}): {}; avfs approve {ap}",
                s.decision.matched_rule, s.decision.reason
            ),
            None => println!(
                "not started: {:?} ({}): {}",
                s.decision.action, s.decision.matched_rule, s.decision.reason
            ),
        },
    });
}
