//! A service's supervisor (`sandbox::service`) forked from `avfs service start` as soon
//! as the service's cgroup exists, instead of `avfs __avfs-service` executed once the
//! boundary is done. Measured on the exec'd path (strace, one start): executing the
//! ~150 MB binary twice (the supervisor, then the set-up), the set-up's cgroup join
//! (a v1 migration waits for an RCU grace period, 10-20 ms) only after both, and the
//! starter killing and reaping the early set-up it had forked for nothing were most of
//! a start.
//!
//! Forked here, the supervisor leaves the starter's process tree at once (a second fork,
//! as the exec'd one does), keeps nothing of the starter's but a socket (on its
//! descriptor 1, where `sandbox::service::answer` writes), and forks the set-up ahead
//! (`exec::early`): the set-up joins the cgroup while the starter takes the checkpoint
//! and prepares the overlay. The starter then sends the supervisor's plan over the
//! socket and reads its answer; the supervisor hands the run's plan to its early set-up
//! and goes on as the exec'd one does (`sandbox::service::supervise`).
//!
//! Only from a single-threaded process (see `forked`): the MCP server and tests in
//! threads take the exec'd path. A starter that fails or dies before it sends the plan
//! closes the socket: the supervisor then ends, and its early set-up with it.

use std::fs::File;
use std::io::{self, BufRead, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::early::{Early, socket_pair};
use super::forked::{self, SelfStat};
use crate::sandbox::RunPlan;
use crate::sandbox::root::CacheMount;
use crate::sandbox::service::{self as proc_service, SetupProc, SupervisorPlan};

/// A forked supervisor waiting for its plan.
pub struct Supervisor {
    sock: OwnedFd,
}

#[derive(Serialize)]
struct Sent<'a> {
    plan: &'a SupervisorPlan,
    /// The run's id (the marker its processes carry, as a run's do).
    id: &'a str,
}

#[derive(Deserialize)]
struct Received {
    plan: SupervisorPlan,
    id: String,
}

impl Supervisor {
    /// Forks the supervisor, which forks the set-up (joining the cgroups of
    /// `procs_files`) at once. None where this process runs more than one thread or a
    /// fork fails: the start then executes `avfs __avfs-service` (`service::launch`).
    pub fn fork(procs_files: &[PathBuf], caches: &[CacheMount]) -> Option<Supervisor> {
        SelfStat::read().filter(SelfStat::single_threaded)?;
        let (ours, theirs) = socket_pair()?;
        // The children's copies of our buffers must hold nothing still to be written.
        let _ = io::stdout().flush();
        // As the keeper's: reparented to init, not to a subreaper that would never
        // reap it.
        let mut was_subreaper: libc::c_int = 0;
        // SAFETY: prctl reads and sets a flag of this process only; fork in a
        // single-threaded process (checked above), whose children so may run ordinary
        // code; they never return.
        let pid = unsafe {
            libc::prctl(
                libc::PR_GET_CHILD_SUBREAPER,
                &mut was_subreaper as *mut libc::c_int,
            );
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
            let pid = libc::fork();
            if pid == 0 {
                match libc::fork() {
                    0 => supervisor(theirs.as_raw_fd(), procs_files, caches),
                    -1 => libc::_exit(1),
                    _ => libc::_exit(0),
                }
            }
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, was_subreaper, 0, 0, 0);
            pid
        };
        drop(theirs);
        if pid < 0 {
            return None;
        }
        let mut st = 0;
        // SAFETY: reaps the intermediate child, which exits at once.
        while unsafe { libc::waitpid(pid, &mut st, 0) } < 0
            && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
        {}
        Some(Supervisor { sock: ours })
    }

    /// Sends the supervisor its plan (`id`: the run's) and returns once the service
    /// runs (or failed to), as `service::launch` does.
    pub fn launch(self, plan: &SupervisorPlan, id: &str) -> io::Result<()> {
        let body = serde_json::to_vec(&Sent { plan, id }).map_err(io::Error::other)?;
        let mut sock = File::from(self.sock);
        sock.write_all(&(body.len() as u64).to_le_bytes())?;
        sock.write_all(&body)?;
        let mut line = String::new();
        let _ = io::BufReader::new(sock).read_line(&mut line);
        let line = line.trim();
        if line == proc_service::READY {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "the service's supervisor did not start: {}",
                if line.is_empty() { "no answer" } else { line }
            )))
        }
    }
}

/// The forked supervisor: off the starter's tree and session, its socket on descriptor
/// 1, nothing else of the starter's open; its set-up forked ahead; then the plan.
fn supervisor(sock: RawFd, procs_files: &[PathBuf], caches: &[CacheMount]) -> ! {
    // SAFETY: system calls on this process and its own descriptors.
    unsafe {
        libc::setsid();
        if libc::dup2(sock, 1) < 0 {
            libc::_exit(1);
        }
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            libc::dup2(null, 0);
            libc::dup2(null, 2);
        }
        // No descriptor of the starter's (its run lock, its vault) stays open here.
        forked::close_from(3);
        forked::reset_signals();
        // A starter gone meanwhile: `answer` fails (EPIPE) and the supervisor goes on.
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        libc::prctl(libc::PR_SET_NAME, c"avfs-service".as_ptr(), 0, 0, 0);
        libc::chdir(c"/".as_ptr());
    }
    // `ps` shows what it is, not the start it was forked from.
    if let Some(stat) = SelfStat::read() {
        // SAFETY: a forked child, before anything reads its arguments again.
        unsafe { forked::rename(&stat, b"avfs\0__avfs-service") };
    }
    let early = Early::start(procs_files, caches);
    let Ok(got) = receive() else {
        // The start failed (or its process died) before the service was recorded.
        drop(early);
        crate::sandbox::setup::leave(1);
    };
    let id = got.id;
    proc_service::supervise(got.plan, move |plan| match early {
        Some(e) => hand_over(e, plan, &id),
        None => proc_service::spawn_setup(plan).map(|(c, out)| (SetupProc::Spawned(c), out)),
    })
}

/// The plan, length first, from descriptor 1.
fn receive() -> io::Result<Received> {
    // SAFETY: descriptor 1 is the socket (`supervisor`); ManuallyDrop keeps it open.
    let mut sock = std::mem::ManuallyDrop::new(unsafe { File::from_raw_fd(1) });
    let mut len = [0u8; 8];
    sock.read_exact(&mut len)?;
    let mut body = vec![0u8; u64::from_le_bytes(len) as usize];
    sock.read_exact(&mut body)?;
    serde_json::from_slice(&body).map_err(io::Error::other)
}

/// Starts the service's run in the set-up forked ahead: its output (stdout and stderr)
/// on one pipe, its report to nobody.
fn hand_over(
    early: Early,
    plan: &SupervisorPlan,
    id: &str,
) -> io::Result<(SetupProc, std::fs::File)> {
    let run: RunPlan = serde_json::from_str(&plan.setup_plan).map_err(io::Error::other)?;
    let mut fds = [0; 2];
    // SAFETY: a pipe of our own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just made and are owned here.
    let (r, w) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
    let stdin = File::open("/dev/null")?;
    let report = File::options().write(true).open("/dev/null")?;
    early.hand_over(
        &run,
        id,
        false,
        [
            stdin.as_raw_fd(),
            w.as_raw_fd(),
            w.as_raw_fd(),
            report.as_raw_fd(),
        ],
    )?;
    Ok((
        SetupProc::Forked {
            pid: early.pid(),
            status: None,
        },
        r,
    ))
}
