//! Runs one command in its own process group with a timeout (SIGTERM to the group, a
//! grace period, SIGKILL) and bounded output capture, optionally echoing output live.
//! Processes that leave the group (`setsid`, double forks) are found through /proc (see
//! `procs`) and ended with it; if this process dies, the command's leader gets SIGKILL
//! from the kernel and the exec watchdog ends the rest (see `watchdog`).

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::capture::{Capture, CaptureLimits};
use super::forked::{self, Forked, SelfStat};
use super::outputs::{OutputFiles, Spill, Stream};
use crate::error::{Error, Result};
use crate::procs::{self, MARKER};
use crate::sandbox::{REPORT_FD, RunPlan};

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct RunResult {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub duration_ms: u64,
    pub stdout: String,
    pub stderr: String,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    /// Bytes dropped between the kept head and tail of stdout (0: nothing dropped).
    pub stdout_omitted: u64,
    pub stderr_omitted: u64,
    /// Processes of the command's group still running after it exited (ended by avfs).
    pub lingering_processes_killed: bool,
    /// Processes the command started that had left its process group (a daemon that
    /// called `setsid`) and were still running when it ended; avfs ended them too.
    pub escaped_processes: Vec<EscapedProcess>,
    /// Writes the mount refused for a quota while the command ran (filled in by exec).
    pub quota_refused: Option<QuotaRefused>,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct EscapedProcess {
    pub pid: i32,
    pub command: String,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct QuotaRefused {
    /// Requests refused (each a failed write, close, create, link, ...).
    pub refusals: u64,
    /// The last refusal's message, which names the quota.
    pub message: String,
}

pub struct RunSpec<'a> {
    pub program: &'a OsStr,
    pub args: &'a [OsString],
    pub cwd: &'a Path,
    pub env: &'a [(String, String)],
    pub timeout: Option<Duration>,
    pub grace: Duration,
    /// How much of each stream is kept (its head and its tail).
    pub capture: CaptureLimits,
    /// Where the whole of each stream is written as it arrives (`avfs output`).
    pub outputs: Option<&'a OutputFiles>,
    /// Echo output to our own stdout/stderr as it arrives.
    pub stream: bool,
    /// `program` is avfs's run set-up (`sandbox::setup`): the environment is exactly
    /// `env`, the set-up ignores SIGTERM (the run's PID 1 passes a timeout's SIGTERM on
    /// to the command) and PID 1 reports the command's status on fd 3. A set-up that
    /// never started the command is an error, not a result.
    pub sandboxed: bool,
    /// The terminal goes to the command (stdin, stdout, stderr inherited, nothing
    /// captured; same process group, so it stays in the foreground).
    pub interactive: bool,
    /// Marks every process of the command (`AVFS_EXEC_ID=<id>` in its environment).
    pub id: &'a str,
    /// Every process that becomes a child of this one while the command runs is the
    /// command's (an orphan reparented to us: we are a child subreaper). True for the
    /// CLI, which starts nothing else meanwhile; false where other threads spawn too.
    pub adopt_children: bool,
    /// Called with the command's process group id once it started.
    pub on_start: Option<&'a dyn Fn(i32)>,
    /// `sandboxed` only: the set-up's plan, to start the set-up by forking this process
    /// rather than executing `program` (see `forked`), when this process runs one thread.
    pub setup: Option<&'a RunPlan>,
    /// `setup` only: the set-up forked ahead of the plan (`early`), handed the run when
    /// the fork path is taken.
    pub early: Option<&'a super::early::Early>,
}

/// The started process: by std's `Command`, or a forked set-up.
enum Proc {
    Std(Child),
    Forked(Forked),
}

impl Proc {
    fn id(&self) -> u32 {
        match self {
            Proc::Std(c) => c.id(),
            Proc::Forked(f) => f.id(),
        }
    }

    fn try_wait(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        match self {
            Proc::Std(c) => c.try_wait(),
            Proc::Forked(f) => f.try_wait(),
        }
    }

    fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        match self {
            Proc::Std(c) => c.wait(),
            Proc::Forked(f) => f.wait(),
        }
    }

    /// The read ends of the command's stdout and stderr pipes (when captured).
    fn take_output(&mut self) -> (Option<std::fs::File>, Option<std::fs::File>) {
        match self {
            Proc::Std(c) => (
                c.stdout.take().map(|o| OwnedFd::from(o).into()),
                c.stderr.take().map(|e| OwnedFd::from(e).into()),
            ),
            Proc::Forked(f) => (f.stdout.take(), f.stderr.take()),
        }
    }
}

fn pump(
    mut src: impl Read + Send + 'static,
    limits: CaptureLimits,
    spill: Option<Spill>,
    echo: Option<Box<dyn Write + Send>>,
) -> mpsc::Receiver<Capture> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut echo = echo;
        let mut spill = spill;
        let mut cap = Capture::new(limits);
        let mut buf = [0u8; 64 * 1024];
        loop {
            match src.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    cap.push(&buf[..n]);
                    if let Some(s) = spill.as_mut() {
                        s.push(&buf[..n]);
                    }
                    if let Some(w) = echo.as_mut() {
                        let _ = w.write_all(&buf[..n]);
                        let _ = w.flush();
                    }
                }
            }
        }
        let _ = tx.send(cap);
    });
    rx
}

/// Reaps every exited member of the group that is our child (the command's orphans are,
/// see `run`). Call only once the leader itself has been reaped through `Child`, or its
/// status would be lost.
fn reap_group(pgid: i32) {
    // SAFETY: non-blocking waitpid on members of the command's own process group.
    while unsafe { libc::waitpid(-pgid, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
}

/// True while some process of the group exists (zombies we could reap are reaped first).
fn group_alive(pgid: i32) -> bool {
    reap_group(pgid);
    // SAFETY: signal 0 to a process group only checks for existence.
    unsafe { libc::kill(-pgid, 0) == 0 }
}

fn signal_group(pgid: i32, sig: i32) {
    // SAFETY: sending a signal to the command's own process group.
    unsafe {
        libc::kill(-pgid, sig);
    }
}

/// Ends the whole group: SIGTERM, up to `grace` for every member to exit, then SIGKILL.
/// Reaps `child` (the group leader) on the way: an unreaped leader is a zombie that
/// still counts as a member of the group, so without reaping the wait would always
/// last the whole grace period.
fn end_group(pgid: i32, grace: Duration, child: &mut Proc) {
    signal_group(pgid, libc::SIGTERM);
    let until = Instant::now() + grace;
    loop {
        let leader_gone = !matches!(child.try_wait(), Ok(None));
        if leader_gone && !group_alive(pgid) {
            return;
        }
        if Instant::now() >= until {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    signal_group(pgid, libc::SIGKILL);
    // SIGKILL cannot be ignored: wait (briefly) until the group is really gone.
    let until = Instant::now() + Duration::from_millis(500);
    while Instant::now() < until {
        let leader_gone = !matches!(child.try_wait(), Ok(None));
        if leader_gone && !group_alive(pgid) {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A command that could not even start, reported like a shell would: 127 when the
/// program is missing, 126 when it cannot be executed.
fn not_started(program: &OsStr, e: &std::io::Error) -> RunResult {
    let code = match e.kind() {
        std::io::ErrorKind::NotFound => 127,
        _ => 126,
    };
    let msg = format!("avfs: cannot start {}: {e}\n", program.to_string_lossy());
    RunResult {
        exit_code: Some(code),
        signal: None,
        timed_out: false,
        duration_ms: 0,
        stdout: String::new(),
        stderr_bytes: msg.len() as u64,
        stderr: msg,
        stdout_truncated: false,
        stderr_truncated: false,
        stdout_bytes: 0,
        stdout_omitted: 0,
        stderr_omitted: 0,
        lingering_processes_killed: false,
        escaped_processes: vec![],
        quota_refused: None,
    }
}

/// Processes of the command still running outside its process group: children of ours
/// that carry its marker or group, or (with `adopt`) that we did not have before it
/// started, and everything below them.
fn escaped(spec: &RunSpec, pgid: i32, before: &[i32]) -> Vec<i32> {
    let all = procs::scan();
    let me = std::process::id() as i32;
    let roots: Vec<i32> = all
        .iter()
        .filter(|p| p.ppid == me && p.pid != pgid)
        .filter(|p| {
            p.pgid == pgid
                || procs::has_marker(p.pid, spec.id)
                || (spec.adopt_children && !before.contains(&p.pid))
        })
        .map(|p| p.pid)
        .collect();
    procs::with_descendants(&all, &roots)
        .into_iter()
        .filter(|pid| {
            let zombie = all.iter().any(|p| p.pid == *pid && p.zombie);
            if zombie {
                // An escaped process that already exited: reap it quietly.
                // SAFETY: non-blocking waitpid of one pid.
                unsafe { libc::waitpid(*pid, std::ptr::null_mut(), libc::WNOHANG) };
            }
            !zombie
        })
        .collect()
}

/// The read end of the sandbox init's report pipe, and the write end for the child.
fn report_pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two new descriptors, owned below.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Error::host(
            "creating the sandbox report pipe",
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: both descriptors are new and ours.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Marks every descriptor from `first` on close-on-exec. Async-signal-safe (called
/// between fork and exec); descriptors std itself uses are close-on-exec already.
/// Where a loop over this process's descriptors may stop: the soft `RLIMIT_NOFILE`
/// (at most 65 536), or 1 024 when it cannot be read. Async-signal-safe (a forked child
/// calls it too).
pub(super) fn descriptor_limit() -> i32 {
    // SAFETY: getrlimit writes into a zeroed rlimit we own.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur.min(1 << 16) as i32
        } else {
            1024
        }
    }
}

fn close_inherited_fds(first: i32) {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only changes descriptor flags.
    let r = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC as libc::c_uint,
        )
    };
    if r == 0 {
        return;
    }
    // Kernels before 5.11: one by one, up to the descriptor limit.
    // SAFETY: fcntl on our own descriptors.
    unsafe {
        for fd in first..descriptor_limit() {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
}

/// What the sandbox init reported: the command's exit code or signal (and when that
/// arrived: the command's end, before the init ends what it left running), then whether
/// it left processes running. Absent when the init was killed first.
#[derive(Default)]
struct InitReport {
    status: Option<(Option<i32>, Option<i32>, Instant)>,
    lingering: Option<bool>,
    /// Processes that had left the command's process group, as PID 1 saw them.
    escaped: Vec<EscapedProcess>,
}

/// Reads the init's report lines as they come, each with the time it arrived.
/// `done` is dropped once the report is sent: its pipe's read end then polls readable,
/// so the runner can wait for the report and for the set-up's exit at once.
fn read_report(src: std::fs::File, done: OwnedFd) -> mpsc::Receiver<InitReport> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut r = InitReport::default();
        for line in std::io::BufReader::new(src).lines() {
            let Ok(line) = line else { break };
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            if v.get("exit_code").is_some() {
                r.status = Some((
                    v["exit_code"].as_i64().map(|c| c as i32),
                    v["signal"].as_i64().map(|s| s as i32),
                    Instant::now(),
                ));
            }
            if let Some(l) = v["lingering"].as_bool() {
                r.lingering = Some(l);
            }
            for p in v["escaped"].as_array().into_iter().flatten() {
                r.escaped.push(EscapedProcess {
                    pid: p["pid"].as_i64().unwrap_or(0) as i32,
                    command: p["command"].as_str().unwrap_or("").to_string(),
                });
            }
        }
        let _ = tx.send(r);
        drop(done);
    });
    rx
}

pub fn run(spec: &RunSpec) -> Result<RunResult> {
    let mut cmd = Command::new(spec.program);
    cmd.args(spec.args).current_dir(spec.cwd);
    if spec.interactive {
        // Without `stream` our stdout carries one JSON document: the command's goes to
        // our stderr.
        let out = if spec.stream {
            Stdio::inherit()
        } else {
            use std::os::fd::AsFd;
            match std::io::stderr().as_fd().try_clone_to_owned() {
                Ok(fd) => Stdio::from(fd),
                Err(_) => Stdio::null(),
            }
        };
        cmd.stdin(Stdio::inherit())
            .stdout(out)
            .stderr(Stdio::inherit());
    } else {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd.process_group(0);
    }
    if spec.sandboxed {
        cmd.env_clear();
    }
    for (k, v) in spec.env {
        cmd.env(k, v);
    }
    cmd.env(MARKER, spec.id);
    let parent = std::process::id() as i32;
    let report = if spec.sandboxed {
        Some(report_pipe()?)
    } else {
        None
    };
    let report_w = report.as_ref().map(|(_, w)| w.as_raw_fd());
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            // If we die (even by SIGKILL), the kernel kills the command's leader.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            if libc::getppid() != parent {
                return Err(std::io::Error::other(
                    "avfs exec died before the command started",
                ));
            }
            if let Some(w) = report_w {
                if w == REPORT_FD {
                    libc::fcntl(w, libc::F_SETFD, 0);
                } else if libc::dup2(w, REPORT_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // Ignored dispositions survive exec: the set-up (and its PID 1, which
                // installs its own handler) ignore SIGTERM; PID 1 passes it on.
                libc::signal(libc::SIGTERM, libc::SIG_IGN);
                // No descriptor avfs holds gets into the run: one open on a host
                // directory (or the run lock) would be a way out.
                close_inherited_fds(REPORT_FD + 1);
            }
            Ok(())
        });
    }
    // A run in its own PID namespace (`sandboxed`) cannot leave anything behind: the
    // kernel ends every process of it with its PID 1. No /proc scans needed (they cost
    // tens of milliseconds on a busy machine).
    let before = if spec.adopt_children && !spec.sandboxed {
        procs::own_children(&procs::scan())
    } else {
        vec![]
    };
    // Orphans the command leaves behind (a background job whose shell exited) are
    // reparented to us rather than to init, so we can reap them: an unreaped zombie
    // keeps its process group alive as far as kill(-pgid, 0) can tell.
    // SAFETY: sets a flag on this process only.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    // Forking is safe only while this process runs one thread (see `forked`).
    let fork_plan = spec
        .setup
        .filter(|_| spec.sandboxed)
        .zip(SelfStat::read().filter(SelfStat::single_threaded));
    let start = Instant::now();
    let spawned = match (fork_plan, report_w) {
        (Some((plan, stat)), Some(w)) => forked::start(
            plan,
            spec.id,
            &forked::Stdio {
                interactive: spec.interactive,
                stream: spec.stream,
            },
            w,
            spec.early.map_or(&stat, |e| e.stat()),
            spec.early,
        )
        .map(Proc::Forked),
        _ => cmd.spawn().map(Proc::Std),
    };
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) if spec.sandboxed => {
            return Err(Error::SandboxUnavailable(format!(
                "cannot start {}: {e}",
                spec.program.to_string_lossy()
            )));
        }
        Err(e) => {
            if spec.stream {
                eprint!("{}", not_started(spec.program, &e).stderr);
            }
            return Ok(not_started(spec.program, &e));
        }
    };
    let pgid = child.id() as i32;
    if let Some(f) = spec.on_start {
        f(pgid);
    }
    // The report's end (`report_done` readable) is the run's end when it carries the
    // command's status: PID 1 and its whole PID namespace are gone, and the set-up only
    // has its own exit left (see `setup::set_up_and_wait`), which is not waited for.
    let mut report_done: Option<OwnedFd> = None;
    let report_rx = match report {
        Some((read, write)) => {
            drop(write);
            let (done_r, done_w) = report_pipe()?;
            report_done = Some(done_r);
            Some(read_report(std::fs::File::from(read), done_w))
        }
        None => None,
    };
    let mut early: Option<InitReport> = None;
    let empty = |data: &[u8]| {
        let (tx, rx) = mpsc::channel();
        let _ = tx.send(Capture::of(data));
        rx
    };
    let (stdout, stderr) = child.take_output();
    let out_rx = match stdout {
        None => empty(b""),
        Some(out) => pump(
            out,
            spec.capture,
            spec.outputs.and_then(|o| o.spill(Stream::Stdout)),
            spec.stream
                .then(|| Box::new(std::io::stdout()) as Box<dyn Write + Send>),
        ),
    };
    let err_rx = match stderr {
        None => empty(b""),
        Some(err) => pump(
            err,
            spec.capture,
            spec.outputs.and_then(|o| o.spill(Stream::Stderr)),
            spec.stream
                .then(|| Box::new(std::io::stderr()) as Box<dyn Write + Send>),
        ),
    };
    let mut timed_out = false;
    // A pidfd becomes readable when the command exits: no polling delay, no wake-ups
    // (kernels before 5.3 have none: then poll every few milliseconds).
    let pidfd = crate::pidfd::Pidfd::open(pgid).ok();
    let status = loop {
        if let Some(st) = child
            .try_wait()
            .map_err(|e| Error::host("waiting for the command", e))?
        {
            break Some(st);
        }
        if let (Some(done), Some(rx)) = (&report_done, &report_rx)
            && crate::pidfd::readable(done.as_raw_fd(), Some(Duration::ZERO))
        {
            report_done = None;
            let rep = rx.recv().unwrap_or_default();
            if rep.status.is_some() {
                early = Some(rep);
                break None;
            }
            // No status: the set-up failed or PID 1 was killed; the set-up's own exit
            // says what happened.
            early = Some(rep);
        }
        if spec.timeout.is_some_and(|t| start.elapsed() >= t) {
            timed_out = true;
            end_group(pgid, spec.grace, &mut child);
            break Some(
                child
                    .wait()
                    .map_err(|e| Error::host("waiting for the command", e))?,
            );
        }
        match &pidfd {
            Some(fd) => {
                let left = spec
                    .timeout
                    .map(|t| t.saturating_sub(start.elapsed()))
                    .unwrap_or(Duration::from_secs(1))
                    .min(Duration::from_secs(1));
                fd.wait_exit_or(report_done.as_ref().map(|d| d.as_raw_fd()), Some(left));
            }
            None => std::thread::sleep(Duration::from_millis(
                if start.elapsed() < Duration::from_millis(20) {
                    1
                } else {
                    5
                },
            )),
        }
    };
    let mut duration_ms = start.elapsed().as_millis() as u64;
    // Background processes the command left in its group are ended too. (A run that
    // ended by its report has nothing left but the exiting set-up: PID 1 reported.)
    let lingering = status.is_some() && group_alive(pgid);
    if lingering {
        end_group(pgid, spec.grace, &mut child);
    }
    // Processes that left the group are ended too, and reported.
    let gone = if spec.sandboxed {
        vec![]
    } else {
        escaped(spec, pgid, &before)
    };
    let mut escaped_processes: Vec<EscapedProcess> = gone
        .iter()
        .map(|&pid| EscapedProcess {
            pid,
            command: procs::command_line(pid),
        })
        .collect();
    if !gone.is_empty() {
        procs::end_all(&gone, spec.grace, || escaped(spec, pgid, &before));
    }
    // A daemon that left the group may hold the pipes open: do not wait for it forever.
    let wait = Duration::from_millis(500);
    let out = out_rx.recv_timeout(wait).unwrap_or_default();
    let err = err_rx.recv_timeout(wait).unwrap_or_default();
    let (mut exit_code, mut signal, mut lingering) = (
        status.and_then(|s| s.code()),
        status.and_then(|s| s.signal()),
        lingering,
    );
    if status.is_none() {
        // The set-up is reaped when its namespaces are torn down, off the critical path.
        std::thread::spawn(move || {
            let _ = child.wait();
        });
    }
    if let Some(rx) = report_rx {
        let mut rep = match early {
            Some(rep) => rep,
            None => rx.recv_timeout(wait).unwrap_or_default(),
        };
        escaped_processes.append(&mut rep.escaped);
        match rep.status {
            Some((code, sig, at)) => {
                (exit_code, signal) = (code, sig);
                duration_ms = duration_ms.min(at.duration_since(start).as_millis() as u64);
                lingering |= rep.lingering.unwrap_or(false);
            }
            // Killed with its PID 1 after a timeout: the set-up's status is the truth.
            None if timed_out => {}
            None => {
                let text = err.text("stderr");
                let last = text.trim().lines().last().unwrap_or("").to_string();
                return Err(Error::SandboxUnavailable(format!(
                    "the run could not be set up (exit {}){}",
                    status
                        .and_then(|s| s.code())
                        .map(|c| c.to_string())
                        .unwrap_or_else(|| format!(
                            "signal {}",
                            status.and_then(|s| s.signal()).unwrap_or(0)
                        )),
                    if last.is_empty() {
                        String::new()
                    } else {
                        format!(": {last}")
                    }
                )));
            }
        }
    }
    Ok(RunResult {
        exit_code,
        signal,
        timed_out,
        duration_ms,
        stdout: out.text("stdout"),
        stderr: err.text("stderr"),
        stdout_truncated: out.omitted() > 0,
        stderr_truncated: err.omitted() > 0,
        stdout_bytes: out.total,
        stderr_bytes: err.total,
        stdout_omitted: out.omitted(),
        stderr_omitted: err.omitted(),
        lingering_processes_killed: lingering,
        escaped_processes,
        quota_refused: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    static NEXT: AtomicU64 = AtomicU64::new(0);

    fn spec<'a>(args: &'a [OsString], timeout: Option<Duration>) -> RunSpec<'a> {
        RunSpec {
            program: OsStr::new("/bin/sh"),
            args,
            cwd: Path::new("/"),
            env: &[],
            timeout,
            grace: Duration::from_secs(2),
            capture: CaptureLimits { head: 16, tail: 0 },
            outputs: None,
            stream: false,
            sandboxed: false,
            interactive: false,
            // Tests run in parallel threads of one process: each its own marker.
            id: Box::leak(
                format!("ex-test-{}", NEXT.fetch_add(1, Ordering::Relaxed)).into_boxed_str(),
            ),
            adopt_children: false,
            on_start: None,
            setup: None,
            early: None,
        }
    }

    fn sh(line: &str) -> Vec<OsString> {
        vec!["-c".into(), line.into()]
    }

    #[test]
    fn a_process_that_obeys_sigterm_does_not_wait_out_the_grace_period() {
        let args = sh("sleep 30");
        let t = Instant::now();
        let r = run(&spec(&args, Some(Duration::from_millis(100)))).unwrap();
        assert!(r.timed_out);
        assert!(
            t.elapsed() < Duration::from_millis(1500),
            "{:?}",
            t.elapsed()
        );
        assert!(!r.lingering_processes_killed);
    }

    #[test]
    fn sigterm_ignored_means_sigkill_after_the_grace_period() {
        let args = sh("trap '' TERM; sleep 30");
        let t = Instant::now();
        let r = run(&spec(&args, Some(Duration::from_millis(100)))).unwrap();
        assert!(r.timed_out);
        assert_eq!(r.signal, Some(libc::SIGKILL));
        assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    }

    #[test]
    fn background_jobs_are_ended_and_output_is_bounded() {
        let args = sh("sleep 30 & echo 0123456789abcdefXYZ");
        let t = Instant::now();
        let r = run(&spec(&args, None)).unwrap();
        assert_eq!(r.exit_code, Some(0));
        assert!(r.lingering_processes_killed);
        assert!(
            t.elapsed() < Duration::from_millis(1500),
            "{:?}",
            t.elapsed()
        );
        assert_eq!(
            r.stdout,
            "0123456789abcdef\n[avfs: 4 bytes of stdout omitted here; 20 in all]\n"
        );
        assert!(r.stdout_truncated);
        assert_eq!(r.stdout_bytes, 20);
    }

    #[test]
    fn a_daemon_that_left_the_group_is_ended_and_reported() {
        // setsid(1) forks when it is a group leader; the daemon has a session and group
        // of its own, and its parent (the shell) is gone before the command ends.
        let args = sh("setsid sleep 30 & sleep 0.2; echo started");
        let t = Instant::now();
        let r = run(&spec(&args, None)).unwrap();
        assert_eq!(r.exit_code, Some(0));
        assert_eq!(r.escaped_processes.len(), 1, "{:?}", r.escaped_processes);
        assert!(r.escaped_processes[0].command.contains("sleep 30"));
        let pid = r.escaped_processes[0].pid;
        assert!(
            procs::stat(pid).is_none_or(|p| p.zombie),
            "{pid} still runs"
        );
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
        // And at a timeout.
        let args = sh("setsid sh -c 'trap \"\" TERM; sleep 30' & sleep 30");
        let r = run(&spec(&args, Some(Duration::from_millis(300)))).unwrap();
        assert!(r.timed_out);
        assert_eq!(r.escaped_processes.len(), 2, "{:?}", r.escaped_processes);
        for p in &r.escaped_processes {
            assert!(
                procs::stat(p.pid).is_none_or(|p| p.zombie),
                "{p:?} still runs"
            );
        }
    }

    #[test]
    fn a_missing_program_is_127() {
        let r = run(&RunSpec {
            program: OsStr::new("/nonexistent/program"),
            ..spec(&[], None)
        })
        .unwrap();
        assert_eq!(r.exit_code, Some(127));
        assert!(r.stderr.contains("/nonexistent/program"));
    }
}
