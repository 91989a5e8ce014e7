//! Starting a run's set-up (`sandbox::setup`) by `fork` alone, without executing avfs's
//! binary a second time. Re-executing the ~140 MB binary cost ~2.7 ms from `execve` to
//! the set-up's first system call (dynamic loading, relocations, page faults, std's
//! start-up), on the critical path of every `avfs exec`; a fork of the CLI process
//! costs a fraction of that (its page tables), and the plan is already in memory.
//!
//! A fork may only run ordinary code (allocate, format, take std's locks) when the
//! process that forked was single-threaded: another thread could have held a lock that
//! the copy then never sees released. So this path is taken only when `/proc/self/stat`
//! says one thread (the CLI: nothing has started a thread before the run); elsewhere
//! (the MCP server, tests in threads) the runner re-executes avfs as before.
//!
//! What an `execve` would have done is done by hand in the child: stdio in place,
//! caught signals back at their defaults, the signal mask empty, every other descriptor
//! closed (no exec would close the close-on-exec ones), and the set-up's command line
//! and environment in memory overwritten: `/proc/1/cmdline` of a run names the set-up
//! (`__avfs-run`, what `boundary::approvals::inside_a_run` looks for), and the host's
//! environment, which the sandbox's allow-list keeps from the command, is not left in
//! the set-up's and PID 1's memory; what stays there is what the re-executed set-up
//! carried: the run's marker (`AVFS_EXEC_ID`, which the watchdog looks for) and where
//! the workspace is.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use super::early::Early;
use crate::procs::MARKER;
use crate::sandbox::{REPORT_FD, RUN_INIT_ARG, RunPlan, setup};

/// The set-up's (and its PID 1's) process name when forked (`/proc/1/comm` in a run):
/// the command line may be too short to hold `RUN_INIT_ARG`.
pub const RUN_INIT_COMM: &std::ffi::CStr = c"__avfs-run";

/// What `/proc/self/stat` says about this process: whether it runs one thread, and where
/// its command line and environment strings lie in memory.
pub struct SelfStat {
    threads: u64,
    args: (usize, usize),
    env: (usize, usize),
}

impl SelfStat {
    pub fn read() -> Option<SelfStat> {
        let text = std::fs::read_to_string("/proc/self/stat").ok()?;
        // The command name (field 2) is in parentheses and may hold spaces.
        let rest = &text[text.rfind(')')? + 1..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        // Field n of proc(5) is f[n - 3].
        let num = |n: usize| -> Option<usize> { f.get(n - 3)?.parse().ok() };
        Some(SelfStat {
            threads: num(20)? as u64,
            args: (num(48)?, num(49)?),
            env: (num(50)?, num(51)?),
        })
    }

    pub fn single_threaded(&self) -> bool {
        self.threads == 1
    }
}

/// How the set-up's standard streams are connected.
pub struct Stdio {
    /// The terminal stays: stdin and stderr inherited, no process group of its own.
    pub interactive: bool,
    /// Interactive only: stdout inherited too (else it goes to our stderr, our stdout
    /// carrying one JSON document).
    pub stream: bool,
}

/// A started set-up: what std's `Child` offers the runner.
pub struct Forked {
    pid: libc::pid_t,
    pub stdout: Option<File>,
    pub stderr: Option<File>,
    status: Option<ExitStatus>,
}

impl Forked {
    pub fn id(&self) -> u32 {
        self.pid as u32
    }

    fn reap(&mut self, flags: libc::c_int) -> io::Result<Option<ExitStatus>> {
        if let Some(s) = self.status {
            return Ok(Some(s));
        }
        loop {
            let mut st = 0;
            // SAFETY: waitpid on our own child.
            let r = unsafe { libc::waitpid(self.pid, &mut st, flags) };
            if r == self.pid {
                self.status = Some(ExitStatus::from_raw(st));
                return Ok(self.status);
            }
            if r == 0 {
                return Ok(None);
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }

    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        self.reap(libc::WNOHANG)
    }

    pub fn wait(&mut self) -> io::Result<ExitStatus> {
        self.reap(0)
            .map(|s| s.expect("a blocking waitpid returns a status"))
    }
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two new descriptors, owned below.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors are new and ours.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// What is left of the set-up's environment strings in its memory (see the module's
/// comment): the first that fits.
pub(crate) fn environ(id: &str, plan: &RunPlan) -> [String; 2] {
    let marker = format!("{MARKER}={id}");
    [
        format!("{marker}\0AVFS_WORKSPACE_PATH={}", plan.workspace.display()),
        marker,
    ]
}

/// Forks the set-up of `plan` for the run marked `id`, or hands the run to the set-up
/// forked `early` (`early`). `report_w` becomes its `REPORT_FD`; `stat` is this
/// process's, read just before (single-threaded, checked by the caller).
pub fn start(
    plan: &RunPlan,
    id: &str,
    stdio: &Stdio,
    report_w: RawFd,
    stat: &SelfStat,
    early: Option<&Early>,
) -> io::Result<Forked> {
    let environ = environ(id, plan);
    // The child's copy of our buffers must hold nothing still to be written.
    {
        use std::io::Write;
        let _ = std::io::stdout().flush();
    }
    let (out, err) = if stdio.interactive {
        (None, None)
    } else {
        (Some(pipe()?), Some(pipe()?))
    };
    // Every descriptor the child needs, numbered before the fork (it only dup2s).
    let stdin = if stdio.interactive {
        0
    } else {
        File::open("/dev/null")?.into_raw_fd()
    };
    let stdout = match (&out, stdio.stream) {
        (Some((_, w)), _) => w.as_raw_fd(),
        (None, true) => 1,
        (None, false) => 2,
    };
    let stderr = err.as_ref().map_or(2, |(_, w)| w.as_raw_fd());
    let parent = std::process::id() as libc::pid_t;
    let pid = match early {
        Some(e) => e
            .hand_over(
                plan,
                id,
                stdio.interactive,
                [stdin, stdout, stderr, report_w],
            )
            .map(|()| e.pid()),
        // SAFETY: this process is single-threaded (checked by the caller), so the child
        // may run ordinary code; it never returns from `become_set_up`.
        None => match unsafe { libc::fork() } {
            0 => become_set_up(
                plan,
                stdio.interactive,
                [stdin, stdout, stderr],
                report_w,
                parent,
                stat,
                &environ,
                None,
            ),
            pid if pid < 0 => Err(io::Error::last_os_error()),
            pid => Ok(pid),
        },
    };
    let pid = match pid {
        Ok(pid) => pid,
        Err(e) => {
            if stdin > 2 {
                // SAFETY: our own descriptor from above.
                unsafe { libc::close(stdin) };
            }
            return Err(e);
        }
    };
    if stdin > 2 {
        // SAFETY: our own descriptor from above, now the child's alone.
        unsafe { libc::close(stdin) };
    }
    Ok(Forked {
        pid,
        stdout: out.map(|(r, _)| File::from(r)),
        stderr: err.map(|(r, _)| File::from(r)),
        status: None,
    })
}

/// The forked child: becomes the set-up as an `execve` of `avfs __avfs-run` would have.
/// `ahead`: what it did before the plan came (`early`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn become_set_up(
    plan: &RunPlan,
    interactive: bool,
    stdio: [RawFd; 3],
    report_w: RawFd,
    parent: libc::pid_t,
    stat: &SelfStat,
    environ: &[String],
    ahead: Option<setup::Ahead>,
) -> ! {
    // SAFETY: system calls on this process and its own descriptors and memory.
    unsafe {
        // If `avfs exec` dies (even by SIGKILL), so does the set-up, and with it the run.
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        if libc::getppid() != parent {
            libc::_exit(setup::SETUP_FAILED);
        }
        if !interactive {
            libc::setpgid(0, 0);
        }
        // Into place. A source numbered where another one goes (0-3) moves away first.
        let away = |fd: RawFd, target: RawFd| {
            if fd != target && fd <= REPORT_FD {
                libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10)
            } else {
                fd
            }
        };
        let report = away(report_w, REPORT_FD);
        let moved: Vec<RawFd> = (0..3).map(|t| away(stdio[t as usize], t)).collect();
        for (target, fd) in moved.into_iter().chain([report]).enumerate() {
            let target = target as RawFd;
            let placed = if fd == target {
                libc::fcntl(fd, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, target)
            };
            if fd < 0 || placed < 0 {
                libc::_exit(setup::SETUP_FAILED);
            }
        }
        // No descriptor of avfs's gets into the run: one open on a host directory (or
        // the run lock) would be a way out.
        // (Except the caches' mounts made ahead, the set-up's own.)
        let mut keep: Vec<RawFd> = ahead
            .iter()
            .flat_map(|a| a.caches.iter().map(|(_, fd)| fd.as_raw_fd()))
            .collect();
        keep.sort_unstable();
        let mut first = REPORT_FD + 1;
        for k in keep {
            if k > first {
                close_range(first, k - 1);
            }
            first = first.max(k + 1);
        }
        close_from(first);
        reset_signals();
        // The set-up ignores SIGTERM: a timeout reaches the command through PID 1.
        libc::signal(libc::SIGTERM, libc::SIG_IGN);
        libc::chdir(c"/".as_ptr());
        // The first that fits; else nothing at all is left there.
        if !environ.iter().any(|e| overwrite(stat.env, e.as_bytes())) {
            overwrite(stat.env, b"");
        }
        overwrite(stat.args, RUN_INIT_ARG.as_bytes());
        libc::prctl(libc::PR_SET_NAME, RUN_INIT_COMM.as_ptr(), 0, 0, 0);
    }
    setup::leave(setup::set_up_joined(plan, ahead))
}

/// Closes the descriptors `first` to `last`.
fn close_range(first: RawFd, last: RawFd) {
    // SAFETY: close_range on our own descriptor table; one by one where it is missing.
    unsafe {
        let r = libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            last as libc::c_uint,
            0 as libc::c_uint,
        );
        if r != 0 {
            for fd in first..=last {
                libc::close(fd);
            }
        }
    }
}

/// Closes every descriptor from `first` on.
pub(crate) fn close_from(first: RawFd) {
    // SAFETY: close_range on our own descriptor table.
    let r = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            libc::c_uint::MAX,
            0 as libc::c_uint,
        )
    };
    if r == 0 {
        return;
    }
    // Kernels before 5.11: one by one, up to the descriptor limit.
    // SAFETY: close on our own descriptors.
    unsafe {
        for fd in first..super::runner::descriptor_limit() {
            libc::close(fd);
        }
    }
}

/// What `execve` does to signals: caught ones back to their defaults (ignored ones stay
/// ignored); and what std's `Command` does: the mask emptied, SIGPIPE at its default.
pub(crate) fn reset_signals() {
    // SAFETY: sigaction and sigprocmask on this process.
    unsafe {
        for sig in 1..=libc::SIGRTMAX() {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                continue;
            }
            let ignored = old.sa_sigaction == libc::SIG_IGN;
            if old.sa_sigaction != libc::SIG_DFL && (!ignored || sig == libc::SIGPIPE) {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    }
}

/// Writes `text` over this process's command line (what `/proc/PID/cmdline` shows, with
/// NULs between arguments) when it fits; false otherwise.
///
/// # Safety
/// As [`overwrite`]: only in a forked child.
pub(crate) unsafe fn rename(stat: &SelfStat, text: &[u8]) -> bool {
    // SAFETY: the caller's contract.
    unsafe { overwrite(stat.args, text) }
}

/// Writes `text` and NULs over the memory range `[start, end)` of this process (its
/// command line or environment strings, as `/proc/self/stat` gave them); false (and
/// nothing written) when `text` and its NUL do not fit.
///
/// # Safety
/// Only in the forked child, before anything reads those strings again: nothing in
/// Rust refers to them (std copies arguments and variables out when asked).
unsafe fn overwrite(range: (usize, usize), text: &[u8]) -> bool {
    let (start, end) = range;
    if start == 0 || end <= start || end - start < text.len() + 1 {
        return false;
    }
    // SAFETY: the range is this process's own argument or environment area, mapped and
    // writable (it lies on the initial stack); see the function's contract.
    unsafe {
        let p = start as *mut u8;
        std::ptr::copy_nonoverlapping(text.as_ptr(), p, text.len());
        std::ptr::write_bytes(p.add(text.len()), 0, end - start - text.len());
    }
    true
}
