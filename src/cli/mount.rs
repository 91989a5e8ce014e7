//! mount, unmount, mounts.

use std::path::PathBuf;

use clap::Args;
use serde_json::json;

use super::Ctx;
use crate::error::{Error, Result};
use crate::mount::{self, ServeOptions};

#[derive(Args, Debug)]
pub struct MountArgs {
    /// [NAME] MOUNTPOINT: the vault or fork (default: the current one) and where to mount it.
    #[arg(num_args = 1..=2, required = true, value_names = ["NAME", "MOUNTPOINT"])]
    args: Vec<String>,
    /// Serve in this process until unmounted (default: return once the mount is ready).
    #[arg(long)]
    foreground: bool,
    /// Reject every change with EROFS.
    #[arg(long)]
    readonly: bool,
    /// Let other users access the mount.
    #[arg(long)]
    allow_other: bool,
}

#[derive(Args, Debug)]
pub struct UnmountArgs {
    mountpoint: PathBuf,
}

/// Set in the environment of a background server: print the record on stdout once ready.
use crate::mount::spawn::READY_ENV;

pub fn mount(ctx: &Ctx, a: MountArgs) -> Result<i32> {
    let (name, mp) = match a.args.as_slice() {
        [mp] => (None, PathBuf::from(mp)),
        [n, mp] => (Some(n.clone()), PathBuf::from(mp)),
        _ => unreachable!("clap enforces 1..=2 values"),
    };
    let sel = name.or_else(|| ctx.vault_sel.clone());
    let ctx2 = Ctx {
        out: super::output::Out {
            json: ctx.out.json,
            quiet: ctx.out.quiet,
        },
        vault_sel: sel,
        home: ctx.home.clone(),
    };
    let (_, v) = ctx2.target()?;
    let mp = std::path::absolute(&mp).map_err(|e| Error::host(mp.display(), e))?;
    if let Some(m) = mount::find_mount(&ctx.home, &v.path, &v.workspace)? {
        return Err(Error::Refused(format!(
            "{} is already mounted at {} (pid {})",
            v.name,
            m.mountpoint.display(),
            m.pid
        )));
    }
    mount::check_mountpoint(&mp)?;
    if a.foreground {
        let ready_pipe = std::env::var_os(READY_ENV).is_some();
        let json = ctx.out.json;
        let opts = ServeOptions {
            home: ctx.home.clone(),
            vault: v.name.clone(),
            vault_path: v.path.clone(),
            workspace: v.workspace.clone(),
            mountpoint: mp,
            readonly: a.readonly,
            allow_other: a.allow_other,
            ignored: Some(Box::new(crate::engine::ignored_mount::MountPolicy::new(
                &ctx.home,
                &v.path,
                &v.workspace,
            ))),
            owner: std::env::var(mount::OWNER_ENV)
                .ok()
                .and_then(|p| p.parse().ok()),
            on_ready: Box::new(move |rec| {
                if ready_pipe {
                    println!("{}", serde_json::to_string(rec).unwrap_or_default());
                    // The parent has what it waited for; stdout goes nowhere from now on.
                    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
                        use std::os::fd::AsRawFd;
                        // SAFETY: dup2 onto stdout with a valid, open descriptor.
                        unsafe { libc::dup2(null.as_raw_fd(), 1) };
                    }
                } else if json {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&json!({"mount": rec})).unwrap_or_default()
                    );
                } else {
                    eprintln!(
                        "serving {} at {} (pid {}); stop with Ctrl-C or `avfs unmount`",
                        rec.vault,
                        rec.mountpoint.display(),
                        rec.pid
                    );
                }
            }),
        };
        mount::serve(opts)?;
        return Ok(0);
    }
    let mut rec = spawn_background(&ctx.home, &v, &mp, a.readonly, a.allow_other, false)?;
    rec.vault = v.name.clone();
    ctx.out.emit(&json!({"mount": rec}), || {
        println!(
            "mounted {} at {} (pid {})",
            v.name,
            rec.mountpoint.display(),
            rec.pid
        );
    });
    Ok(0)
}

pub fn unmount(ctx: &Ctx, a: UnmountArgs) -> Result<i32> {
    let mp =
        std::path::absolute(&a.mountpoint).map_err(|e| Error::host(a.mountpoint.display(), e))?;
    // Before list_mounts, which detaches the mountpoints of dead servers on its way.
    let was_mounted = mount::is_mountpoint(&mp);
    let rec = mount::list_mounts(&ctx.home)?
        .into_iter()
        .find(|r| r.mountpoint == mp);
    let how = match &rec {
        Some(r) => {
            crate::vaultguard::unmount(r)?;
            "unmounted"
        }
        None if was_mounted || mount::is_mountpoint(&mp) => {
            mount::force_unmount(&mp)?;
            "cleaned up a stale mount"
        }
        None => {
            return Err(Error::NotFound(format!(
                "{} (nothing is mounted there)",
                mp.display()
            )));
        }
    };
    ctx.out.emit(&json!({"unmounted": mp, "result": how}), || {
        println!("{how}: {}", mp.display())
    });
    Ok(0)
}

pub fn mounts(ctx: &Ctx) -> Result<i32> {
    let list = mount::list_mounts(&ctx.home)?;
    ctx.out.emit(&json!({"mounts": list}), || {
        for m in &list {
            println!(
                "{:<40} {:<20} {:<12} pid {}{}",
                m.mountpoint.display(),
                m.vault,
                m.workspace,
                m.pid,
                if m.readonly { " (read-only)" } else { "" }
            );
        }
    });
    Ok(0)
}

pub(crate) use crate::mount::spawn::spawn_background;
