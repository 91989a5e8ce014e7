//! `avfs shell`: an interactive shell in the workspace (at its stable path, in the
//! sandbox unless `--no-sandbox`), through the boundary: a checkpoint on entry and a
//! change summary on exit.

use clap::Args;
use serde_json::json;

use super::Ctx;
use crate::boundary::{self, CheckpointMode, Command, ExecRequest, SandboxMode};
use crate::engine::EngineKind;
use crate::error::Result;

#[derive(Args, Debug)]
pub struct ShellArgs {
    /// Directory inside the workspace to start in (default: its root).
    #[arg(long, default_value = "/")]
    cwd: String,
    /// Do not take a checkpoint on entry (the summary then compares with the state on entry).
    #[arg(long)]
    no_checkpoint: bool,
    /// Leave the sandbox off: the shell gets the user's full rights on the host.
    #[arg(long)]
    no_sandbox: bool,
    /// The engine (see `avfs exec --engine`).
    #[arg(long, value_enum)]
    engine: Option<EngineKind>,
}

extern "C" fn ignore(_: libc::c_int) {}

/// While the shell runs, Ctrl-C and Ctrl-\ are for the shell, not for us. A handler
/// (not SIG_IGN) is used so the shell starts with the default dispositions.
struct SignalsToChild {
    old: [(libc::c_int, libc::sigaction); 2],
}

impl SignalsToChild {
    fn install() -> SignalsToChild {
        let mut old = [
            (libc::SIGINT, unsafe { std::mem::zeroed() }),
            (libc::SIGQUIT, unsafe { std::mem::zeroed() }),
        ];
        for (sig, prev) in old.iter_mut() {
            // SAFETY: a valid signal number and handler; the previous action is saved to
            // restore it.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = ignore as *const () as usize;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(*sig, &sa, prev);
            }
        }
        SignalsToChild { old }
    }
}

impl Drop for SignalsToChild {
    fn drop(&mut self) {
        for (sig, prev) in &self.old {
            // SAFETY: restores the action saved by `install`.
            unsafe {
                libc::sigaction(*sig, prev, std::ptr::null_mut());
            }
        }
    }
}

pub fn shell(ctx: &Ctx, a: ShellArgs) -> Result<i32> {
    let program = std::env::var("SHELL")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "/bin/sh".into());
    let mut req = ExecRequest::new(Command::Argv(vec![program.clone()]));
    req.cwd = a.cwd;
    req.checkpoint = if a.no_checkpoint {
        CheckpointMode::Never
    } else {
        CheckpointMode::Always
    };
    req.env = vec![("AVFS_SHELL".into(), "1".into())];
    req.interactive = true;
    req.stream = !ctx.out.json;
    req.sandbox = if a.no_sandbox {
        SandboxMode::Off
    } else {
        SandboxMode::Default
    };
    req.engine = a.engine;
    let (_, v) = ctx.target()?;
    eprintln!(
        "avfs shell: vault {}, workspace {}{}; exit the shell to leave",
        v.name,
        v.workspace,
        if a.no_checkpoint {
            ""
        } else {
            ", checkpoint on entry"
        }
    );
    let out = {
        let _signals = SignalsToChild::install();
        boundary::exec(&ctx.lib(), req)?
    };
    let env = &out.envelope;
    let exit_code = env.exit_code;
    let checkpoint = env.checkpoint.clone();
    let changes = &env.changes;
    let summary = &env.change_summary;
    let paint = ctx.out.paint_stderr();
    ctx.out.emit(
        &json!({"vault": env.request.vault, "workspace": env.request.workspace, "checkpoint": checkpoint,
                "workspace_path": env.workspace_path, "mountpoint": env.workspace_path, "engine": env.engine,
                "sandbox": env.sandbox, "shell": program, "exit_code": exit_code, "summary": summary, "changes": changes}),
        || {
            let s = summary;
            eprintln!(
                "avfs shell: {} added, {} modified, {} deleted, {} type, {} mode since {}",
                s.added,
                s.modified,
                s.deleted,
                s.type_changed,
                s.mode_changed,
                checkpoint.as_deref().unwrap_or("entering")
            );
            for c in changes.iter().take(50) {
                eprintln!("  {} {}", paint.sigil(c.kind.sigil()), c.path);
            }
            if summary.total > 50 {
                eprintln!("  ... and {} more (avfs diff {})", summary.total - 50, checkpoint.as_deref().unwrap_or(""));
            }
            if let (Some(c), false) = (&checkpoint, changes.is_empty()) {
                eprintln!("undo with: avfs checkpoint restore {c}");
            }
        },
    );
    Ok(exit_code)
}
