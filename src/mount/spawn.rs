//! Starting avfs's own binary: a mount server in the background (for `avfs mount` and
//! exec's FUSE engine), and the helpers other parts start (the exec watchdog, a run).

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::mount;

/// Set in a mount server's environment: print the mount record on stdout when ready.
pub const READY_ENV: &str = "AVFS_MOUNT_READY_PIPE";

/// A command that runs this very avfs binary.
pub fn avfs_command() -> Result<Command> {
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
pub fn spawn_background(
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
