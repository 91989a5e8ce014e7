//! PID 1 of a run: avfs's own binary, started by the run's set-up (`setup`) as the first
//! process of the run's PID namespace. Runs the command in a session of its own (no
//! controlling terminal), passes SIGTERM from the runner's timeout on to every process
//! of the run, reports the command's exact exit status and whether processes were left
//! running on a pipe (fd 3), and ends those processes. When it exits the kernel kills
//! whatever is left in the PID namespace, so nothing the command started (also with
//! `setsid`, `nohup` or a double fork) outlives the run.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

/// File descriptor the init writes its report to.
pub const REPORT_FD: i32 = 3;

fn report(line: &serde_json::Value) {
    let mut text = line.to_string();
    text.push('\n');
    // SAFETY: writing a buffer to our report descriptor (which may be closed: then the
    // write fails harmlessly).
    unsafe {
        libc::write(REPORT_FD, text.as_ptr().cast(), text.len());
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Reaps every exited child; returns the wait status of `pid` if it was among them.
fn reap(pid: i32) -> Option<i32> {
    let mut found = None;
    loop {
        let mut st = 0;
        // SAFETY: non-blocking waitpid for any child of ours.
        let r = unsafe { libc::waitpid(-1, &mut st, libc::WNOHANG) };
        if r <= 0 {
            return found;
        }
        if r == pid {
            found = Some(st);
        }
    }
}

/// True while a process other than us exists in the sandbox.
fn others_alive() -> bool {
    // SAFETY: signal 0 to every process we may signal in our PID namespace (PID 1, us,
    // is never included) only checks for existence.
    unsafe { libc::kill(-1, 0) == 0 }
}

fn signal_all(sig: i32) {
    // SAFETY: as PID 1 of the sandbox, -1 means every other process of the sandbox.
    unsafe {
        libc::kill(-1, sig);
    }
}

/// Waits for SIGCHLD or SIGTERM (both blocked) up to `timeout`; returns the signal.
fn wait_signal(set: &libc::sigset_t, timeout: Option<Duration>) -> Option<i32> {
    let r = match timeout {
        None => {
            // SAFETY: waits for one of the blocked signals in `set`.
            unsafe { libc::sigwaitinfo(set, std::ptr::null_mut()) }
        }
        Some(t) => {
            let ts = libc::timespec {
                tv_sec: t.as_secs() as libc::time_t,
                tv_nsec: t.subsec_nanos() as libc::c_long,
            };
            // SAFETY: as above, with a timeout.
            unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &ts) }
        }
    };
    (r > 0).then_some(r)
}

extern "C" fn ignore_signal(_: libc::c_int) {}

/// What PID 1 runs.
pub struct Command<'a> {
    pub argv: &'a [OsString],
    /// The command's whole environment.
    pub env: &'a [(String, String)],
    /// Keep the terminal: the command stays in our session and process group, so an
    /// interactive shell keeps its controlling terminal (`avfs shell`).
    pub interactive: bool,
}

/// PID 1 of a run: runs the command, passes SIGTERM on, reports on fd 3, ends what the
/// command left behind. Returns the exit status for PID 1 itself.
pub fn init_main(c: &Command) -> i32 {
    let argv: Vec<&OsString> = c.argv.iter().collect();
    // kill(-1, ...) below means "every other process of the run" only for PID 1 of a
    // PID namespace; anywhere else it would reach every process of the user.
    if std::process::id() != 1 {
        eprintln!("avfs: the run's init must be PID 1 of its PID namespace");
        return 126;
    }
    // SAFETY: fcntl on our own report descriptor: the command must not inherit it; and
    // not dumpable, so that the command (same uid) can neither ptrace us nor open our
    // report pipe through /proc/1/fd.
    unsafe {
        libc::fcntl(REPORT_FD, libc::F_SETFD, libc::FD_CLOEXEC);
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
    let Some((prog, rest)) = argv.split_first() else {
        eprintln!("avfs: run init: no command");
        return 126;
    };
    // SIGCHLD and SIGTERM are taken with sigwaitinfo. A handler is installed as well:
    // PID 1 of a namespace never receives a signal with the default disposition from
    // outside (the runner's timeout reaches the command through us).
    // SAFETY: plain signal-mask and disposition calls in a single-threaded process.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::sigaddset(&mut set, libc::SIGTERM);
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = ignore_signal as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    let mut cmd = std::process::Command::new(prog);
    cmd.args(rest)
        .env_clear()
        .envs(c.env.iter().map(|(k, v)| (k, v)));
    let interactive = c.interactive;
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
            // A session of its own: no controlling terminal to inject input into.
            if !interactive {
                libc::setsid();
            }
            Ok(())
        });
    }
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            eprintln!("avfs: cannot start {}: {e}", prog.to_string_lossy());
            report(&serde_json::json!({"exit_code": code, "signal": null}));
            report(&serde_json::json!({"lingering": false}));
            return code;
        }
    };
    let pid = child.id() as i32;
    drop(child);
    let status = loop {
        if let Some(st) = reap(pid) {
            break st;
        }
        match wait_signal(&set, None) {
            Some(libc::SIGTERM) => signal_all(libc::SIGTERM),
            Some(_) => {}
            None if errno() == libc::EINTR => {}
            None => std::thread::sleep(Duration::from_millis(1)),
        }
    };
    let (code, sig) = if libc::WIFSIGNALED(status) {
        (None, Some(libc::WTERMSIG(status)))
    } else {
        (Some(libc::WEXITSTATUS(status)), None)
    };
    report(&serde_json::json!({"exit_code": code, "signal": sig}));
    let _ = std::io::stdout().flush();
    // What the command left running: SIGTERM, 2 s to exit, then SIGKILL.
    reap(-1);
    let lingering = others_alive();
    // What is left, told apart as the runner reports it: still in the command's process
    // group (`lingering`), or gone off on its own (`setsid`, a daemon: `escaped`). PIDs
    // are the run's own; the kernel ends them all with us in any case.
    let mut in_group = false;
    let mut escaped = vec![];
    if lingering {
        for p in crate::procs::scan() {
            if p.pid == 1 || p.zombie {
                continue;
            }
            if p.pgid == pid {
                in_group = true;
            } else {
                escaped.push(serde_json::json!({
                    "pid": p.pid, "command": crate::procs::command_line(p.pid)
                }));
            }
        }
    }
    // Said at once: a timeout's SIGKILL may end us before they are gone.
    if !escaped.is_empty() {
        report(&serde_json::json!({"escaped": escaped}));
    }
    if lingering {
        signal_all(libc::SIGTERM);
        let until = Instant::now() + Duration::from_secs(2);
        loop {
            reap(-1);
            if !others_alive() {
                break;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                signal_all(libc::SIGKILL);
                // SAFETY: blocking waitpid for any child until none is left.
                while unsafe { libc::waitpid(-1, std::ptr::null_mut(), 0) } > 0 {}
                break;
            }
            wait_signal(&set, Some(left.min(Duration::from_millis(50))));
        }
    }
    report(&serde_json::json!({"lingering": in_group}));
    code.unwrap_or_else(|| 128 + sig.unwrap_or(0))
}
