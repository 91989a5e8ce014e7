//! A service's processes: the supervisor that outlives `avfs service start`, and the
//! records and logs it keeps.
//!
//! `avfs service start` runs the boundary as a run does (policy, lock, checkpoint, the
//! kept overlay, the sandbox's plan) and then, instead of waiting for the command, starts
//! `avfs __avfs-service` (or, from a single-threaded start, has forked it earlier, with
//! the set-up forked ahead: `exec::supervisor`): it forks once more (nobody has to reap
//! it), starts the run's set-up (`setup`, the same namespaces, confinement and cgroup as
//! a run) with its stdout and stderr on a pipe, and stays its parent:
//!
//! - it copies the output into `log` (rotated to `log.1` past `LOG_MAX` bytes: at most
//!   twice that on disk);
//! - it writes `service.json` (the only writer once started): pids, state, and, when the
//!   set-up ends, its exit status;
//! - it ends the service when `--ttl` has passed, when the vault file is gone, or when
//!   the kept overlay the service runs in is no longer the workspace's (its keeper ended
//!   or was replaced: a restore, `gc`, `vault delete`);
//! - while the service runs, it marks the kept overlay used (its record's mtime), so the
//!   keeper's idle timeout never ends the overlay under a running service.
//!
//! Nothing outlives the supervisor: the set-up has PR_SET_PDEATHSIG=SIGKILL, PID 1 of
//! the run has it towards the set-up, and the kernel ends a PID namespace's processes
//! with its PID 1. `kill -9` of any avfs process so leaves no orphan.
//!
//! Directory of a service: `$AVFS_HOME/services/<workspace's mount id>/<service id>/`.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

use crate::pidfd::Pidfd;

/// First argument of avfs's own binary when it supervises a service.
pub const SERVICE_ARG: &str = "__avfs-service";

/// The environment variable the supervisor's plan travels in.
pub const SERVICE_VAR: &str = "AVFS_SERVICE_PLAN";

/// Bytes of output in `log` before it is rotated to `log.1`.
pub const LOG_MAX: u64 = 1 << 20;

/// The file a `stop` leaves before it signals. Empty: a person stopped it (the
/// supervisor records "stopped"); otherwise it holds why avfs ended it (the supervisor
/// records "ended" with that reason). Written before the signal, so the record never
/// depends on which side notices first.
const STOP: &str = "stop";

/// Why a service ends when its workspace's kept overlay is retired.
pub const OVERLAY_RETIRED: &str =
    "its workspace's overlay was retired (the workspace was restored, deleted or collected)";

/// The service directories of one workspace: `$AVFS_HOME/services/<mount id>`.
pub fn workspace_dir(home: &Path, mount_id: &str) -> PathBuf {
    home.join("services").join(mount_id)
}

/// One process, for good: its pid and start time (a reused pid is never taken for it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcId {
    pub pid: i32,
    pub start: u64,
}

impl ProcId {
    pub fn of(pid: i32) -> Option<ProcId> {
        crate::procs::stat(pid)
            .filter(|p| !p.zombie)
            .map(|p| ProcId {
                pid,
                start: p.start,
            })
    }

    pub fn alive(&self) -> bool {
        ProcId::of(self.pid).is_some_and(|p| p.start == self.start)
    }

    fn pidfd(&self) -> Option<Pidfd> {
        let fd = Pidfd::open(self.pid).ok()?;
        self.alive().then_some(fd)
    }
}

/// `service.json`: what `service list` shows.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ServiceRecord {
    pub id: String,
    pub name: String,
    pub vault_path: PathBuf,
    pub workspace: String,
    /// The command as given (argv, or `["bash", "-c", LINE]` for `--shell`).
    pub command: Vec<String>,
    pub cwd: String,
    pub env: Vec<(String, String)>,
    pub ttl_secs: Option<u64>,
    pub started_at_ns: i64,
    /// starting, running, exited, stopped, ended (its workspace's overlay or vault went,
    /// or its ttl passed), lost (its supervisor was killed).
    pub state: String,
    pub supervisor: Option<ProcId>,
    /// The `avfs service start` that wrote the record first: a record still `starting`
    /// whose starter and supervisor are gone was lost (avfs was killed mid-start).
    #[serde(default)]
    pub starter: Option<ProcId>,
    /// The run's set-up: its network namespace is the one the workspace's runs join.
    pub setup: Option<ProcId>,
    /// PID 1 of the service's PID namespace, as the host sees it.
    pub pid: Option<i32>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub ended_at_ns: Option<i64>,
    pub end_reason: Option<String>,
    /// The service's cgroups (removed when it ends).
    pub cgroups: Vec<PathBuf>,
    /// Ports of the host's 127.0.0.1 that reach it (`--publish`).
    #[serde(default)]
    pub published: Vec<u16>,
}

impl ServiceRecord {
    pub fn read(dir: &Path) -> Option<ServiceRecord> {
        let text = std::fs::read(dir.join("service.json")).ok()?;
        serde_json::from_slice(&text).ok()
    }

    pub fn write(&self, dir: &Path) -> io::Result<()> {
        let tmp = dir.join(format!(".service.json.{}", std::process::id()));
        std::fs::write(
            &tmp,
            serde_json::to_vec_pretty(self).expect("record serializes"),
        )?;
        std::fs::rename(&tmp, dir.join("service.json"))
    }

    /// Running: its supervisor and set-up are the processes the record names.
    pub fn live(&self) -> bool {
        self.state == "running"
            && self.supervisor.is_some_and(|s| s.alive())
            && self.setup.is_some_and(|s| s.alive())
    }

    /// The state as it is now: a record that says running whose supervisor is gone was
    /// lost (its processes ended with it).
    pub fn current_state(&self) -> String {
        match self.state.as_str() {
            "running" | "starting" if !self.supervisor.is_some_and(|s| s.alive()) => {
                if self.state == "starting"
                    && self.supervisor.is_none()
                    && self.starter.is_some_and(|s| s.alive())
                {
                    "starting".into()
                } else {
                    "lost".into()
                }
            }
            s => s.into(),
        }
    }
}

/// What the supervisor is given.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SupervisorPlan {
    /// The service's directory (record, logs).
    pub dir: PathBuf,
    /// The set-up's plan (`setup::RunPlan`, as JSON).
    pub setup_plan: String,
    /// The vault file: the service ends when it is gone.
    pub vault: PathBuf,
    /// The kept overlay's record and keeper: the service ends when the keeper does.
    pub kept_record: PathBuf,
    pub keeper: i32,
    pub ttl_secs: Option<u64>,
    /// Milliseconds to wait for a command that exits at once.
    pub early_ms: u64,
    /// Ports of the host's 127.0.0.1 that reach the service (`--publish`).
    #[serde(default)]
    pub publish: Vec<u16>,
}

/// The line the supervisor prints once the service's set-up runs.
pub const READY: &str = "ready";

/// Starts the supervisor of `plan` and returns once the service runs (or failed to).
pub fn launch(plan: &SupervisorPlan) -> io::Result<()> {
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    let exe: PathBuf = if Path::new("/proc/self/exe").exists() {
        "/proc/self/exe".into()
    } else {
        std::env::current_exe()?
    };
    // As the keeper's: reparented to init, not to a subreaper that would never reap it.
    let mut was_subreaper: libc::c_int = 0;
    // SAFETY: prctl reads and sets a flag of this process only.
    unsafe {
        libc::prctl(
            libc::PR_GET_CHILD_SUBREAPER,
            &mut was_subreaper as *mut libc::c_int,
        );
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
    }
    let spawned = Command::new(exe)
        .arg0("avfs")
        .arg(SERVICE_ARG)
        .env(
            SERVICE_VAR,
            serde_json::to_string(plan).expect("plan serializes"),
        )
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    // SAFETY: as above.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, was_subreaper, 0, 0, 0) };
    let mut child = spawned?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = io::BufReader::new(out).read_line(&mut line);
    }
    let _ = child.wait();
    let line = line.trim();
    if line == READY {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "the service's supervisor did not start: {}",
            if line.is_empty() { "no answer" } else { line }
        )))
    }
}

/// One line to `launch` on descriptor 1. An `avfs service start` killed meanwhile has
/// closed the pipe: the write fails (EPIPE; SIGPIPE is ignored) and the supervisor goes
/// on, as the service it keeps is recorded running (`println!` would panic here).
fn answer(line: &str) {
    let mut out = io::stdout();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn leave(code: i32) -> ! {
    super::setup::leave(code)
}

/// `avfs __avfs-service`: see the module's comment. Never returns. (Where `service
/// start` runs single-threaded, it forks its supervisor instead: `exec::supervisor`.)
pub fn supervise_main() -> ! {
    let plan: Option<SupervisorPlan> = std::env::var(SERVICE_VAR)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok());
    let Some(plan) = plan else {
        answer(&format!("error: {SERVICE_VAR} is missing or unreadable"));
        leave(1);
    };
    // SAFETY: removes our own variable; single-threaded. A closed answer pipe is an
    // error to `answer`, not a signal that ends the supervisor (main left SIGPIPE at its
    // default; the set-up's `Command` restores it for the run).
    unsafe {
        std::env::remove_var(SERVICE_VAR);
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    // SAFETY: single-threaded; the intermediate process leaves at once.
    match unsafe { libc::fork() } {
        -1 => {
            answer(&format!("error: fork: {}", io::Error::last_os_error()));
            leave(1);
        }
        0 => {}
        _ => leave(0),
    }
    // SAFETY: a session of our own: no terminal, no signals meant for the caller.
    unsafe { libc::setsid() };
    // No descriptor of the caller (a run lock, a vault) stays open here, but our
    // answer's pipe (1).
    // SAFETY: closes descriptors from 3 up in this process only.
    unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
    supervise(plan, |p| {
        spawn_setup(p).map(|(c, out)| (SetupProc::Spawned(c), out))
    })
}

/// The service's set-up, as its supervisor's child: spawned (`avfs __avfs-run`) or
/// forked ahead and handed its plan (`exec::early`).
pub enum SetupProc {
    Spawned(std::process::Child),
    Forked {
        pid: i32,
        status: Option<std::process::ExitStatus>,
    },
}

impl SetupProc {
    pub fn id(&self) -> u32 {
        match self {
            SetupProc::Spawned(c) => c.id(),
            SetupProc::Forked { pid, .. } => *pid as u32,
        }
    }

    fn reap(&mut self, flags: libc::c_int) -> io::Result<Option<std::process::ExitStatus>> {
        use std::os::unix::process::ExitStatusExt;
        let (pid, status) = match self {
            SetupProc::Spawned(c) => {
                return if flags == 0 {
                    c.wait().map(Some)
                } else {
                    c.try_wait()
                };
            }
            SetupProc::Forked { pid, status } => (*pid, status),
        };
        if let Some(s) = status {
            return Ok(Some(*s));
        }
        loop {
            let mut st = 0;
            // SAFETY: waitpid on our own child.
            let r = unsafe { libc::waitpid(pid, &mut st, flags) };
            if r == pid {
                *status = Some(std::process::ExitStatus::from_raw(st));
                return Ok(*status);
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

    pub fn try_wait(&mut self) -> io::Result<Option<std::process::ExitStatus>> {
        self.reap(libc::WNOHANG)
    }

    pub fn wait(&mut self) -> io::Result<std::process::ExitStatus> {
        self.reap(0)
            .map(|s| s.expect("a blocking wait returns a status"))
    }

    fn kill(&mut self) {
        match self {
            SetupProc::Spawned(c) => {
                let _ = c.kill();
            }
            SetupProc::Forked { pid, status: None } => {
                // SAFETY: our own child, not yet reaped (its pid is still ours).
                unsafe { libc::kill(*pid, libc::SIGKILL) };
            }
            SetupProc::Forked { .. } => {}
        }
    }
}

/// The supervisor's work once it runs on its own (a session of its own, only its
/// answer's descriptor 1 open): starts the set-up with `start`, answers, keeps the
/// service until it ends. Never returns.
pub fn supervise(
    plan: SupervisorPlan,
    start: impl FnOnce(&SupervisorPlan) -> io::Result<(SetupProc, std::fs::File)>,
) -> ! {
    let Some(mut rec) = ServiceRecord::read(&plan.dir) else {
        answer(&format!(
            "error: no service record in {}",
            plan.dir.display()
        ));
        leave(1);
    };
    let (mut child, out) = match start(&plan) {
        Ok(c) => c,
        Err(e) => {
            rec.state = "exited".into();
            rec.end_reason = Some(format!("the sandbox could not start: {e}"));
            rec.ended_at_ns = Some(now_ns());
            let _ = rec.write(&plan.dir);
            answer(&format!("error: {e}"));
            leave(1);
        }
    };
    rec.supervisor = ProcId::of(std::process::id() as i32);
    rec.setup = ProcId::of(child.id() as i32);
    rec.state = "running".into();
    // PID 1 of the service, once the set-up has forked it (a set-up that fails ends
    // first: the caller is answered and the record says how it ended).
    // Bounded generously (a loaded machine), but it ends as soon as PID 1 is there.
    let waited = Instant::now();
    while rec.pid.is_none() && waited.elapsed() < Duration::from_secs(10) {
        rec.pid = pid1_of(child.id() as i32);
        if rec.pid.is_none() {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    // The host side of a published port is bound before the service is reported
    // running: a port already taken fails the start.
    match super::publish::bind(&plan.publish) {
        Ok(listeners) if listeners.is_empty() => {}
        Ok(listeners) => {
            let _ = super::publish::serve(listeners, rec.pid.unwrap_or(child.id() as i32));
        }
        Err(e) => {
            end(child.id() as i32, rec.pid);
            let status = child.wait().ok();
            finish(&plan, rec, status, Some(e.to_string()));
            answer(&format!("error: {e}"));
            leave(1);
        }
    }
    let dir = plan.dir.clone();
    let pump = std::thread::spawn(move || pump(out, &dir));
    // A command that exits at once (not found, a bad argument, a missing interpreter)
    // is answered as exited, with its status and output, not as running: the wait
    // ends as soon as the set-up does (a pidfd), and at most after EARLY_EXIT.
    // PID 1's own exit, not the set-up's: the set-up then tears its namespaces down,
    // which takes longer than the wait.
    let watched = rec.pid.unwrap_or(child.id() as i32);
    let early = crate::pidfd::Pidfd::open(watched)
        .map(|fd| fd.wait_exit(Some(Duration::from_millis(plan.early_ms))))
        .unwrap_or(false);
    if early {
        let status = child.wait().ok();
        let _ = pump.join();
        finish(&plan, rec, status, None);
        answer(READY);
        leave(0);
    }
    if let Err(e) = rec.write(&plan.dir) {
        child.kill();
        answer(&format!("error: writing the service's record: {e}"));
        leave(1);
    }
    answer(READY);
    // SAFETY: replaces our own descriptor 1 with /dev/null: the caller's pipe goes.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY);
        if null >= 0 {
            libc::dup2(null, 1);
            libc::close(null);
        }
    }
    let (status, reason) = watch(&plan, &mut child, &mut rec);
    let _ = pump.join();
    let rec = ServiceRecord::read(&plan.dir).unwrap_or(rec);
    finish(&plan, rec, status, reason);
    leave(0)
}

/// How long `service start` waits for a command that exits at once, by default
/// (`AVFS_SERVICE_EARLY_MS`): long enough for a command that is not found or cannot be
/// executed (PID 1 fails its `execve` within microseconds), short against the start's
/// time (goal 20 ms): a command that fails after parsing its arguments (an interpreter
/// takes 20 ms or more to start) is seen by `service list`, not by the start.
pub const EARLY_EXIT_MS: u64 = 2;

/// Records how the service ended and removes its cgroups.
fn finish(
    plan: &SupervisorPlan,
    mut rec: ServiceRecord,
    status: Option<std::process::ExitStatus>,
    reason: Option<String>,
) {
    use std::os::unix::process::ExitStatusExt;
    rec.ended_at_ns = Some(now_ns());
    rec.exit_code = status.and_then(|s| s.code());
    rec.signal = status.and_then(|s| s.signal());
    // avfs's own reason (left in the stop file before the signal) wins over what the
    // supervisor saw after it: a retired keeper is a consequence, not the cause.
    let reason = match std::fs::read_to_string(plan.dir.join(STOP)) {
        Ok(why) if !why.is_empty() => Some(why),
        _ => reason,
    };
    rec.state = match &reason {
        Some(_) => "ended".into(),
        None if plan.dir.join(STOP).exists() => "stopped".into(),
        None => "exited".into(),
    };
    rec.end_reason = reason;
    let _ = rec.write(&plan.dir);
    let _ = std::fs::remove_file(plan.dir.join(STOP));
    for cg in &rec.cgroups {
        let _ = std::fs::remove_dir(cg);
    }
}

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// Starts the run's set-up with its output on one pipe (stdout and stderr as they come).
pub fn spawn_setup(plan: &SupervisorPlan) -> io::Result<(std::process::Child, std::fs::File)> {
    use std::os::fd::{FromRawFd, IntoRawFd};
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    let mut fds = [0; 2];
    // SAFETY: a pipe of our own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just made and are owned here.
    let (r, w) = unsafe {
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    };
    let w2 = w.try_clone()?;
    let exe: PathBuf = if Path::new("/proc/self/exe").exists() {
        "/proc/self/exe".into()
    } else {
        std::env::current_exe()?
    };
    let mut cmd = Command::new(exe);
    cmd.arg0("avfs")
        .arg(super::RUN_INIT_ARG)
        .env(super::setup::PLAN_VAR, &plan.setup_plan)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::from(std::os::fd::OwnedFd::from(w)))
        .stderr(Stdio::from(std::os::fd::OwnedFd::from(w2)));
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            // The service never outlives its supervisor.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            // PID 1 reports on descriptor 3: nobody reads a service's report.
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY);
            if null >= 0 && null != super::REPORT_FD {
                libc::dup2(null, super::REPORT_FD);
                libc::close(null);
            }
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    drop(cmd);
    let raw = r.into_raw_fd();
    // SAFETY: the read end, owned here.
    Ok((child, unsafe { std::fs::File::from_raw_fd(raw) }))
}

/// Copies the service's output into `log`, rotated to `log.1` past `LOG_MAX`.
fn pump(mut out: std::fs::File, dir: &Path) {
    let path = dir.join("log");
    let open = |p: &Path| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
    };
    let Ok(mut log) = open(&path) else { return };
    let mut size = log.metadata().map_or(0, |m| m.len());
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match out.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        if size + n as u64 > LOG_MAX && size > 0 {
            let _ = std::fs::rename(&path, dir.join("log.1"));
            match open(&path) {
                Ok(f) => {
                    log = f;
                    size = 0;
                }
                Err(_) => return,
            }
        }
        if log.write_all(&buf[..n]).is_err() {
            return;
        }
        size += n as u64;
    }
}

/// Waits for the set-up to end, ending it when its time, vault or overlay is over.
/// Returns its exit status and, when the supervisor ended it, why.
fn watch(
    plan: &SupervisorPlan,
    child: &mut SetupProc,
    rec: &mut ServiceRecord,
) -> (Option<std::process::ExitStatus>, Option<String>) {
    let started = Instant::now();
    let keeper = ProcId::of(plan.keeper);
    let mut reason: Option<String> = None;
    let mut last_touch = Instant::now() - Duration::from_secs(60);
    let mut tick = 0u32;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return (Some(s), reason),
            Ok(None) => {}
            Err(_) => return (None, reason),
        }
        if reason.is_none() {
            if rec.pid.is_none() && tick < 40 {
                // PID 1 of the service, once the set-up has forked it.
                rec.pid = pid1_of(child.id() as i32);
                if rec.pid.is_some() {
                    let _ = rec.write(&plan.dir);
                }
            }
            let why = if !plan.vault.exists() {
                Some("its vault was deleted".to_string())
            } else if !keeper.is_some_and(|k| k.alive()) {
                Some(OVERLAY_RETIRED.into())
            } else if plan
                .ttl_secs
                .is_some_and(|t| started.elapsed() >= Duration::from_secs(t))
            {
                Some(format!("its ttl ({} s) passed", plan.ttl_secs.unwrap_or(0)))
            } else {
                None
            };
            if let Some(why) = why {
                reason = Some(why);
                end(child.id() as i32, rec.pid);
            } else if last_touch.elapsed() >= Duration::from_secs(5) {
                // The keeper's idle clock: a running service uses its overlay.
                touch(&plan.kept_record);
                last_touch = Instant::now();
            }
        }
        tick += 1;
        std::thread::sleep(Duration::from_millis(if tick < 40 { 25 } else { 250 }));
    }
}

fn touch(p: &Path) {
    if let Ok(f) = std::fs::File::options().append(true).open(p) {
        let _ = f.set_modified(SystemTime::now());
    }
}

/// PID 1 of the run whose set-up is `setup`: the child of the set-up that is PID 1 of
/// its own PID namespace (`NSpid` ends in 1). Not merely its first child: the set-up
/// forks a short-lived helper (it joins the run's cgroup) before PID 1.
fn pid1_of(setup: i32) -> Option<i32> {
    let children = std::fs::read_to_string(format!("/proc/{setup}/task/{setup}/children")).ok()?;
    children
        .split_whitespace()
        .filter_map(|c| c.parse::<i32>().ok())
        .find(|c| {
            std::fs::read_to_string(format!("/proc/{c}/status")).is_ok_and(|st| {
                st.lines()
                    .find_map(|l| l.strip_prefix("NSpid:"))
                    .is_some_and(|ns| {
                        let ids: Vec<&str> = ns.split_whitespace().collect();
                        ids.len() > 1 && ids.last() == Some(&"1")
                    })
            })
        })
}

/// Ends a service: SIGTERM to its PID 1 (which passes it on to every process of the
/// run), then, after up to 2 s, SIGKILL to its set-up (PID 1 dies with it, and every
/// process of its PID namespace with PID 1).
fn end(setup: i32, pid1: Option<i32>) {
    let Some(setup) = ProcId::of(setup) else {
        return;
    };
    let Some(fd) = setup.pidfd() else { return };
    if let Some(p) = pid1.or_else(|| pid1_of(setup.pid))
        && let Some(p1) = ProcId::of(p)
        && let Some(pfd) = p1.pidfd()
    {
        let _ = pfd.signal(libc::SIGTERM);
        if fd.wait_exit(Some(Duration::from_secs(2))) {
            return;
        }
    }
    let _ = fd.signal(libc::SIGKILL);
    fd.wait_exit(Some(Duration::from_secs(5)));
}

/// Stops the service of `dir` and waits (up to 10 s) until its supervisor has recorded
/// how it ended. False when it was not running.
pub fn stop(dir: &Path, why: Option<&str>) -> bool {
    let Some(rec) = ServiceRecord::read(dir) else {
        return false;
    };
    if !rec.live() {
        return false;
    }
    let _ = std::fs::write(dir.join(STOP), why.unwrap_or_default());
    if let Some(s) = rec.setup {
        end(s.pid, rec.pid);
    }
    if let Some(sup) = rec.supervisor.and_then(|s| s.pidfd()) {
        sup.wait_exit(Some(Duration::from_secs(10)));
    }
    true
}

/// Ends every running service under `ws_dir` (one workspace's) for the reason `why`;
/// returns how many.
pub fn stop_all(ws_dir: &Path, why: &str) -> usize {
    let Ok(rd) = std::fs::read_dir(ws_dir) else {
        return 0;
    };
    rd.flatten().filter(|e| stop(&e.path(), Some(why))).count()
}

/// The records of the services under `ws_dir`, oldest first.
pub fn records(ws_dir: &Path) -> Vec<(PathBuf, ServiceRecord)> {
    let Ok(rd) = std::fs::read_dir(ws_dir) else {
        return vec![];
    };
    let mut out: Vec<(PathBuf, ServiceRecord)> = rd
        .flatten()
        .filter_map(|e| ServiceRecord::read(&e.path()).map(|r| (e.path(), r)))
        .collect();
    out.sort_by_key(|(_, r)| r.started_at_ns);
    out
}

/// A running service of the workspace whose network namespace its runs and new services
/// join (they then share one loopback): the pid of its set-up.
pub fn network_of(ws_dir: &Path) -> Option<i32> {
    records(ws_dir)
        .into_iter()
        .filter(|(_, r)| r.live())
        .find_map(|(_, r)| r.setup.map(|s| s.pid))
}
