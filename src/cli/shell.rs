//! `avfs shell`: an interactive shell in the mounted workspace, with a checkpoint on entry
//! and a change summary on exit.

use std::os::fd::AsFd;
use std::process::{Command, Stdio};

use clap::Args;
use serde_json::json;

use super::Ctx;
use super::exec::MountGuard;
use crate::diff::{ChangeSummary, diff_roots};
use crate::error::{Error, Result};
use crate::store::{Store, audit};
use crate::workspace::Workspace;

#[derive(Args, Debug)]
pub struct ShellArgs {
    /// Directory inside the workspace to start in (default: its root).
    #[arg(long, default_value = "/")]
    cwd: String,
    /// Do not take a checkpoint on entry (the summary then compares with the state on entry).
    #[arg(long)]
    no_checkpoint: bool,
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
    let (_, v) = ctx.target()?;
    let mut cwd: Vec<String> = Vec::new();
    for part in a.cwd.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                cwd.pop();
            }
            p => cwd.push(p.into()),
        }
    }
    let program = std::env::var("SHELL")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "/bin/sh".into());
    let id = format!("sh-{}", crate::store::now_ns() / 1_000_000);
    let mount = MountGuard::acquire(ctx, &v, &id)?;
    let mut dir = mount.mountpoint.clone();
    for c in &cwd {
        dir.push(c);
    }
    if !std::fs::metadata(&dir).is_ok_and(|m| m.is_dir()) {
        return Err(Error::NotADirectory(format!("--cwd {}", a.cwd)));
    }
    ctx.sync_mount(&v)?;
    let mut store = Store::open(&v.path)?;
    let cp_name = format!("shell-{}", crate::store::now_ns() / 1_000_000);
    let (before, checkpoint) = store.write(|db| {
        let mut ws = Workspace::open(db, &v.workspace)?;
        if a.no_checkpoint {
            return Ok((ws.flush()?, None));
        }
        let s = ws.checkpoint(Some(&cp_name), Some("on entering avfs shell"), "shell")?;
        audit::append(
            db,
            Some(&v.workspace),
            crate::store::audit::cli_actor(),
            "shell.enter",
            &json!({"checkpoint": s.checkpoint.name, "shell": program}),
        )?;
        Ok((s.checkpoint.root, Some(s.checkpoint.name)))
    })?;
    eprintln!(
        "avfs shell: {} (vault {}, workspace {}){}; exit the shell to leave",
        dir.display(),
        v.name,
        v.workspace,
        checkpoint
            .as_deref()
            .map(|c| format!(", checkpoint {c}"))
            .unwrap_or_default()
    );
    let mut cmd = Command::new(&program);
    cmd.current_dir(&dir)
        .env("AVFS_VAULT", &v.name)
        .env("AVFS_WORKSPACE", &v.workspace)
        .env("AVFS_CHECKPOINT", checkpoint.as_deref().unwrap_or(""))
        .env("AVFS_SHELL", "1")
        .stdin(Stdio::inherit())
        .stderr(Stdio::inherit());
    if ctx.out.json {
        // Our stdout carries one JSON document: the shell writes to stderr.
        let err = std::io::stderr()
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| Error::host("stderr", e))?;
        cmd.stdout(Stdio::from(err));
    }
    let status = {
        let _signals = SignalsToChild::install();
        cmd.status().map_err(|e| Error::host(&program, e))?
    };
    let exit_code = match (
        status.code(),
        std::os::unix::process::ExitStatusExt::signal(&status),
    ) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        _ => 1,
    };
    ctx.sync_mount(&v)?;
    let changes = store.write(|db| {
        let mut ws = Workspace::open(db, &v.workspace)?;
        let after = ws.flush()?;
        let changes = diff_roots(db, &before, &after)?;
        let summary = ChangeSummary::of(&changes);
        audit::append(
            db,
            Some(&v.workspace),
            crate::store::audit::cli_actor(),
            "shell.exit",
            &json!({"checkpoint": checkpoint, "exit_code": exit_code, "summary": summary}),
        )?;
        Ok(changes)
    })?;
    let mountpoint = mount.mountpoint.display().to_string();
    drop(mount);
    let summary = ChangeSummary::of(&changes);
    let paint = ctx.out.paint_stderr();
    ctx.out.emit(
        &json!({"vault": v.name, "workspace": v.workspace, "checkpoint": checkpoint, "mountpoint": mountpoint,
                "shell": program, "exit_code": exit_code, "summary": summary, "changes": changes}),
        || {
            let s = &summary;
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
            if changes.len() > 50 {
                eprintln!("  ... and {} more (avfs diff {})", changes.len() - 50, checkpoint.as_deref().unwrap_or(""));
            }
            if let (Some(c), false) = (&checkpoint, changes.is_empty()) {
                eprintln!("undo with: avfs checkpoint restore {c}");
            }
        },
    );
    Ok(exit_code)
}
