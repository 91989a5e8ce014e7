//! mount, unmount, mounts.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use clap::Args;
use serde_json::json;

use super::Ctx;
use crate::error::{Error, Result};
use crate::mount::{self, ServeOptions, control};

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
const READY_ENV: &str = "AVFS_MOUNT_READY_PIPE";

pub fn mount(ctx: &Ctx, a: MountArgs) -> Result<i32> {
    let (name, mp) = match a.args.as_slice() {
        [mp] => (None, PathBuf::from(mp)),
        [n, mp] => (Some(n.clone()), PathBuf::from(mp)),
        _ => unreachable!("clap enforces 1..=2 values"),
    };
    let sel = name.or_else(|| ctx.vault_sel.clone());
    let ctx2 = Ctx {
        out: super::output::Out { json: ctx.out.json },
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
            if let Err(e) = control::request(&r.socket, &json!({"op": "unmount"})) {
                // Another `avfs unmount` may have got there first: the server is going
                // away. Only a server that stays up and mounted is an error.
                for _ in 0..100 {
                    if !mount::pid_alive(r.pid) && !mount::is_mountpoint(&mp) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                if mount::pid_alive(r.pid) && mount::is_mountpoint(&mp) {
                    return Err(e);
                }
            }
            // Wait for the server to finish writing and exit.
            for _ in 0..600 {
                if !mount::pid_alive(r.pid) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            // A server that died on its own leaves its mount behind.
            if !mount::pid_alive(r.pid) && mount::is_mountpoint(&mp) {
                mount::force_unmount(&mp)?;
            }
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

/// A command that runs this very avfs binary.
pub(crate) fn avfs_command() -> Result<Command> {
    let exe = std::env::current_exe().map_err(|e| Error::host("current executable", e))?;
    // /proc/self/exe still runs this very binary if its file was replaced meanwhile
    // (a rebuild): the path would then name a different or missing file.
    Ok(if std::path::Path::new("/proc/self/exe").exists() {
        let mut c = Command::new("/proc/self/exe");
        c.arg0(&exe);
        c
    } else {
        Command::new(&exe)
    })
}

/// Starts a mount server in the background and waits until it reports the mount ready.
/// With `die_with_caller` (exec's temporary mounts) the server unmounts and exits when
/// the calling thread's process dies, however it dies.
pub(crate) fn spawn_background(
    home: &std::path::Path,
    v: &crate::registry::VaultRef,
    mp: &std::path::Path,
    readonly: bool,
    allow_other: bool,
    die_with_caller: bool,
) -> Result<mount::MountRecord> {
    // Background: start a server and wait until it says the mount is ready.
    let run = mount::run_dir(home);
    std::fs::create_dir_all(&run).map_err(|e| Error::host(run.display(), e))?;
    let log_path = run.join(format!("{}.log", mount::mount_id(&v.path, &v.workspace)));
    let log = std::fs::File::create(&log_path).map_err(|e| Error::host(log_path.display(), e))?;
    let mut cmd = avfs_command()?;
    cmd.arg("--vault")
        .arg(&v.name)
        .arg("mount")
        .arg(mp)
        .arg("--foreground");
    if readonly {
        cmd.arg("--readonly");
    }
    if allow_other {
        cmd.arg("--allow-other");
    }
    cmd.env(READY_ENV, "1")
        .env("AVFS_HOME", home)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log);
    let parent = std::process::id() as i32;
    // SAFETY: only async-signal-safe syscalls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            // The server outlives this terminal session.
            libc::setsid();
            if die_with_caller {
                // SIGTERM makes the server unmount cleanly (see `mount::serve`).
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0);
                if libc::getppid() != parent {
                    return Err(std::io::Error::other("the caller died"));
                }
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| Error::host("starting the mount server", e))?;
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(Duration::from_secs(60)).unwrap_or_default();
    let rec: Option<mount::MountRecord> = serde_json::from_str(line.trim()).ok();
    let Some(rec) = rec else {
        let _ = child.kill();
        let _ = child.wait();
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        let why = log
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("it exited without saying why");
        return Err(Error::Refused(format!(
            "mount server did not start: {}",
            why.trim_start_matches("avfs: error: ")
        )));
    };
    Ok(rec)
}
