//! The set-up of a sandboxed run forked ahead of its plan, as soon as the run's cgroup
//! exists, so that joining the cgroup overlaps the runner's own work (the checkpoint, the
//! overlay, the run record) instead of the set-up's few milliseconds of mounts alone.
//!
//! Joining a cgroup is a migration, and on cgroup v1 the kernel makes every migration
//! wait for an RCU grace period (`cgroup_threadgroup_rwsem` taken for writing): 10-20 ms,
//! even on a quiet machine, more than the whole sandbox is allowed to cost. A process
//! cannot be started inside a v1 cgroup (`clone3(CLONE_INTO_CGROUP)` is v2 only), so the
//! set-up is started early instead: forked from the single-threaded runner like
//! `forked::start` does, it keeps nothing of the runner's but a socket, starts the helper
//! that joins it to the cgroup (`setup::start_join`), makes the package caches' overlays
//! where it runs as root (as the run would, outside a user namespace), and waits for
//! the rest: its
//! standard streams, the report pipe and the plan, which `forked::start` sends when the
//! run starts. From there on it is the set-up `forked::start` would have forked.
//!
//! Never used (an error before the run starts, or the runner no longer single-threaded),
//! it is killed and reaped when dropped.

use std::cell::Cell;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::forked::{self, SelfStat};
use crate::sandbox::root::{self, CacheMount};
use crate::sandbox::{REPORT_FD, RunPlan, setup};

/// The descriptors handed over: stdin, stdout, stderr, the report pipe.
const FDS: usize = 4;

/// A set-up waiting for its run.
pub struct Early {
    pid: libc::pid_t,
    sock: OwnedFd,
    stat: SelfStat,
    used: Cell<bool>,
}

/// What the set-up is told when the run starts.
#[derive(Serialize)]
struct Handover<'a> {
    plan: &'a RunPlan,
    id: &'a str,
    interactive: bool,
}

#[derive(Deserialize)]
struct Received {
    plan: RunPlan,
    id: String,
    interactive: bool,
}

impl Early {
    /// Forks the set-up, which joins the cgroups of `procs_files` at once. None where
    /// this process runs more than one thread (a fork may then not run ordinary code)
    /// or the fork fails: the run then starts its set-up the usual way.
    pub fn start(procs_files: &[PathBuf], caches: &[CacheMount]) -> Option<Early> {
        let stat = SelfStat::read().filter(SelfStat::single_threaded)?;
        let (ours, theirs) = socket_pair()?;
        // The child's copy of our buffers must hold nothing still to be written.
        let _ = std::io::stdout().flush();
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: this process is single-threaded (checked above), so the child may run
        // ordinary code; it never returns from `wait_for_run`.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return None;
        }
        if pid == 0 {
            wait_for_run(theirs.as_raw_fd(), procs_files, caches, parent, &stat);
        }
        drop(theirs);
        Some(Early {
            pid,
            sock: ours,
            stat,
            used: Cell::new(false),
        })
    }

    /// The set-up's pid.
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// What `/proc/self/stat` said when the set-up was forked.
    pub fn stat(&self) -> &SelfStat {
        &self.stat
    }

    /// Starts the run: the set-up gets `fds` (stdin, stdout, stderr, the report pipe's
    /// write end) and the plan. Once only.
    pub fn hand_over(
        &self,
        plan: &RunPlan,
        id: &str,
        interactive: bool,
        fds: [RawFd; FDS],
    ) -> io::Result<()> {
        if self.used.replace(true) {
            return Err(io::Error::other("the early set-up was already used"));
        }
        let body = serde_json::to_vec(&Handover {
            plan,
            id,
            interactive,
        })
        .map_err(io::Error::other)?;
        send_fds(&self.sock, &(body.len() as u64).to_le_bytes(), &fds)?;
        let mut sock = std::fs::File::from(self.sock.try_clone()?);
        sock.write_all(&body)
    }
}

impl Drop for Early {
    fn drop(&mut self) {
        if self.used.get() {
            return;
        }
        // SAFETY: our own child, never handed a run: killed and reaped.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

/// `bytes` with the descriptors `fds` attached (SCM_RIGHTS).
fn send_fds(sock: &OwnedFd, bytes: &[u8], fds: &[RawFd; FDS]) -> io::Result<()> {
    // SAFETY: CMSG_SPACE is a size computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of_val(fds) as u32) } as usize;
    let mut control = vec![0u8; space];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: msghdr is plain data; every pointer set below outlives the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: the control buffer holds one header with room for the descriptors.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of_val(fds) as u32) as _;
        std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c).cast::<RawFd>(), FDS);
    }
    // SAFETY: a valid socket and message.
    let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if n != bytes.len() as isize {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The length prefix and the descriptors sent with it.
fn recv_fds(sock: RawFd) -> io::Result<(u64, [RawFd; FDS])> {
    let mut len = [0u8; 8];
    // SAFETY: CMSG_SPACE is a size computation.
    let space = unsafe { libc::CMSG_SPACE((FDS * std::mem::size_of::<RawFd>()) as u32) } as usize;
    let mut control = vec![0u8; space];
    let mut iov = libc::iovec {
        iov_base: len.as_mut_ptr().cast(),
        iov_len: len.len(),
    };
    // SAFETY: msghdr is plain data; every pointer set below outlives the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    let n = loop {
        // SAFETY: a valid socket and message buffers.
        let n =
            unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC | libc::MSG_WAITALL) };
        if n >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            break n;
        }
    };
    if n != len.len() as isize {
        return Err(io::Error::other(
            "the runner went away before the run started",
        ));
    }
    let mut fds = [-1; FDS];
    // SAFETY: reading the header the kernel filled, if any.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        if c.is_null()
            || (*c).cmsg_type != libc::SCM_RIGHTS
            || (*c).cmsg_len as usize != libc::CMSG_LEN(std::mem::size_of_val(&fds) as u32) as usize
        {
            return Err(io::Error::other("no descriptors came with the run"));
        }
        std::ptr::copy_nonoverlapping(libc::CMSG_DATA(c).cast::<RawFd>(), fds.as_mut_ptr(), FDS);
    }
    Ok((u64::from_le_bytes(len), fds))
}

/// The forked set-up until its run starts: nothing of the runner's kept but the socket
/// (a copy of a descriptor would hold the runner's file locks and files open for as
/// long as the run lasts), the cgroup helper started, then the plan awaited.
fn wait_for_run(
    sock: RawFd,
    procs_files: &[PathBuf],
    caches: &[CacheMount],
    parent: libc::pid_t,
    stat: &SelfStat,
) -> ! {
    // SAFETY: system calls on this process and its own descriptors.
    let sock = unsafe {
        // If `avfs exec` dies (even by SIGKILL), so does the set-up.
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        if libc::getppid() != parent {
            libc::_exit(setup::SETUP_FAILED);
        }
        let placed = libc::dup2(sock, REPORT_FD);
        if placed < 0 {
            libc::_exit(setup::SETUP_FAILED);
        }
        forked::close_from(REPORT_FD + 1);
        placed
    };
    let joiner = setup::start_join(procs_files);
    // Each cache is a new overlayfs (1-13 ms apiece on a busy machine): made now, while
    // the runner works. One that fails is made again, or reported, by the set-up.
    let caches = caches
        .iter()
        .filter_map(|c| Some((c.path.clone(), root::cache_mount(c).ok()?)))
        .collect();
    let got = recv_fds(sock).and_then(|(len, fds)| {
        let mut body = vec![0u8; len as usize];
        // SAFETY: our socket, read once into `body` and closed with the File.
        let mut s = unsafe { std::fs::File::from_raw_fd(sock) };
        s.read_exact(&mut body)?;
        let r: Received = serde_json::from_slice(&body).map_err(io::Error::other)?;
        Ok((r, fds))
    });
    let Ok((r, fds)) = got else {
        setup::leave(setup::SETUP_FAILED);
    };
    let environ = forked::environ(&r.id, &r.plan);
    forked::become_set_up(
        &r.plan,
        r.interactive,
        [fds[0], fds[1], fds[2]],
        fds[3],
        parent,
        stat,
        &environ,
        Some(setup::Ahead { joiner, caches }),
    )
}

/// A connected pair of Unix stream sockets (close-on-exec): one end for this process,
/// one for the child it forks. None when the kernel refuses.
pub(super) fn socket_pair() -> Option<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: socketpair fills two new descriptors, owned below.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return None;
    }
    // SAFETY: both descriptors are new and ours.
    Some(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}
