//! One namespace set-up per run: the workspace at its stable path and, unless the run is
//! `--no-sandbox`, the sandbox, in the same private mount namespace.
//!
//! `avfs exec` starts avfs's own binary with `RUN_INIT_ARG` and the plan in the
//! environment. That process (the set-up) enters a user namespace when it is not root
//! (mapping the caller to itself, so files keep their owner and tools see the real user),
//! new mount, PID, IPC and UTS namespaces and, without network, a network namespace with
//! only loopback. It mounts the workspace (an overlayfs over the layer cache, or a bind of
//! a FUSE mount), hides what must not be seen, and forks PID 1 of the run, which mounts a
//! /proc of its own, confines itself (`confine`) and runs the command (`init`).
//!
//! Two runs of two forks can so use the same path at the same time: each sees only its
//! own mount. A failure before the command starts is a message on stderr and exit 125
//! without a status report: the runner turns it into "the sandbox could not start".

use std::ffi::OsString;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::confine::{self, Access};
use super::root::{self, RootPlan};
use super::{init, limits, sys};

/// First argument of avfs's own binary when it sets a run up.
pub const RUN_INIT_ARG: &str = "__avfs-run";

/// The environment variable the plan travels in (removed before the command starts).
pub const PLAN_VAR: &str = "AVFS_RUN_PLAN";

/// Exit status of a set-up that failed before the command started.
pub const SETUP_FAILED: i32 = 125;

/// What the workspace is made of.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum View {
    /// overlayfs: the layer stack (top first), the run's upper and work directories.
    Overlay {
        lowers: Vec<PathBuf>,
        upper: PathBuf,
        work: PathBuf,
    },
    /// A bind of a directory that already shows the workspace (a FUSE mount).
    Bind { source: PathBuf },
    /// The workspace's kept overlay: mounted at `merged` in the mount namespace of the
    /// keeper process `keeper` (`keeper`), whose copy the run starts from.
    Kept { keeper: i32, merged: PathBuf },
}

/// The sandbox part of a plan: paths as the run sees them.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Confinement {
    pub network: bool,
    pub access: Access,
    /// What the run's fresh root holds.
    pub root: RootPlan,
    /// Directories shown empty and read-only (secrets, `$AVFS_HOME`) where a visible
    /// path holds them.
    pub hidden_dirs: Vec<PathBuf>,
    /// Files shown as an empty, read-only file (secrets, the vault file).
    pub hidden_files: Vec<PathBuf>,
    /// The `cgroup.procs` files of the run's cgroups (`limits`): the set-up is in them
    /// before it starts PID 1 (a helper joins it while it makes its mounts).
    pub cgroup_procs: Vec<PathBuf>,
}

/// Everything the set-up needs; built by the boundary, read by `run_init_main`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunPlan {
    /// The workspace's stable path.
    pub workspace: PathBuf,
    pub view: View,
    /// The command's working directory (at or below `workspace`).
    pub cwd: PathBuf,
    pub argv: Vec<OsString>,
    /// The command's whole environment.
    pub env: Vec<(String, String)>,
    /// Enter a user namespace first (callers other than root).
    pub user_namespace: bool,
    pub uid: u32,
    pub gid: u32,
    pub confine: Option<Confinement>,
    pub interactive: bool,
    /// Join the network namespace of this process (the set-up of a running service of
    /// the workspace) instead of making one: the workspace's runs and services share
    /// one loopback. Only without network (a run granted the network has the host's).
    #[serde(default)]
    pub net_of: Option<i32>,
}

/// Says why the set-up failed, on stderr (the runner quotes its last line), and gives
/// the status of a set-up that never started the command.
fn failed(e: io::Error) -> i32 {
    eprintln!("avfs: the run could not be set up: {e}");
    SETUP_FAILED
}

/// Leaves this process at once: no destructors, no exit handlers. The set-up may be a
/// fork of `avfs exec` (`forked`), whose objects (open vaults, buffered output) are the
/// parent's to close and flush, never a copy's.
pub fn leave(code: i32) -> ! {
    use std::io::Write;
    let _ = std::io::stderr().flush();
    // SAFETY: _exit ends the process without touching any shared state.
    unsafe { libc::_exit(code) }
}

/// `avfs __avfs-run`: sets the run up and waits for its PID 1. Never returns.
pub fn run_init_main() -> ! {
    let plan: RunPlan = match std::env::var(PLAN_VAR)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
    {
        Some(p) => p,
        None => leave(failed(io::Error::other(format!(
            "{PLAN_VAR} is missing or unreadable"
        )))),
    };
    // SAFETY: single-threaded at this point; removes our own variable.
    unsafe { std::env::remove_var(PLAN_VAR) };
    leave(set_up_and_wait(&plan))
}

/// The set-up itself, in a single-threaded process of its own (re-executed avfs, or a
/// fork of `avfs exec`): namespaces, the workspace, the sandbox's mounts, PID 1. Returns
/// the run's exit status (PID 1's), or `SETUP_FAILED`.
pub fn set_up_and_wait(plan: &RunPlan) -> i32 {
    set_up_joined(plan, None)
}

/// What a set-up forked before its plan was known (`exec::early`) did meanwhile.
pub struct Ahead {
    /// The helper joining it to the run's cgroups.
    pub joiner: io::Result<libc::pid_t>,
    /// The package caches' mounts (`root::cache_mount`), by where the run sees them.
    pub caches: Vec<(PathBuf, OwnedFd)>,
}

/// `set_up_and_wait`, after what was done `ahead` of the plan.
pub fn set_up_joined(plan: &RunPlan, ahead: Option<Ahead>) -> i32 {
    let init_user_ns = in_init_user_ns();
    let (joiner, caches) = match ahead {
        Some(a) => (Some(a.joiner), a.caches),
        None => (None, vec![]),
    };
    let joiner = match (joiner, &plan.confine) {
        (Some(started), _) => match started {
            Ok(pid) => Some(pid),
            Err(e) => return failed(e),
        },
        (None, Some(c)) if !c.cgroup_procs.is_empty() => match start_join(&c.cgroup_procs) {
            Ok(pid) => Some(pid),
            Err(e) => return failed(e),
        },
        _ => None,
    };
    if let Err(e) = enter_namespaces(plan) {
        return failed(e);
    }
    let ws = match mount_workspace(&plan.view) {
        Ok(fd) => fd,
        Err(e) => return failed(e),
    };
    if let Err(e) = arrange(plan, ws, caches) {
        return failed(e);
    }
    // The host's tree goes here, while the helper above is still joining the cgroups:
    // detaching it waits for an RCU grace period, which so overlaps the join's. PID 1
    // needs it only to mount a /proc in a user namespace (`root::OLD_ROOT`).
    let host_left = plan.confine.is_some() && !plan.user_namespace && init_user_ns;
    if host_left && let Err(e) = root::leave_host() {
        return failed(e);
    }
    // Nothing of the run starts before the set-up is in its cgroups: PID 1 (and so
    // every process of the run) inherits them.
    if let Some(pid) = joiner
        && wait_child(pid) != Some(0)
    {
        return failed(io::Error::other("the run could not join its cgroup"));
    }
    // SAFETY: this process is single-threaded; the child only makes system calls and
    // runs init, which starts the command.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return failed(sys::err("fork"));
    }
    if pid == 0 {
        leave(pid1(plan, host_left));
    }
    // The set-up waits for PID 1 and leaves with its status. (It ignores SIGTERM, set by
    // the runner: a timeout reaches the command through PID 1.)
    let mut status = 0;
    loop {
        // SAFETY: waits for our one child.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        if r < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return SETUP_FAILED;
        }
    }
    // The run is over: PID 1 has reported and every process of its PID namespace is
    // gone. Our copies of the output pipes and the report descriptor are closed now, so
    // the runner sees the end at once; what follows, tearing down this process's
    // namespaces when it exits (dozens of mounts, tmpfs and overlay superblocks, a
    // network namespace: 10-20 ms on a busy machine), is not on its critical path.
    release_pipes();
    if libc::WIFSIGNALED(status) {
        return 128 + libc::WTERMSIG(status);
    }
    libc::WEXITSTATUS(status)
}

/// Closes standard input, output and error and the report descriptor.
fn release_pipes() {
    for fd in 0..=init::REPORT_FD {
        // SAFETY: closes descriptors of this process that nothing here uses any more.
        unsafe { libc::close(fd) };
    }
}

/// True in the initial user namespace (`/proc/self/uid_map` maps every uid to itself),
/// where mounting a /proc needs no other /proc visible in the mount namespace.
fn in_init_user_ns() -> bool {
    std::fs::read_to_string("/proc/self/uid_map")
        .is_ok_and(|m| m.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"])
}

/// Starts a helper that puts this process in the run's cgroups while it goes on with
/// its namespaces and mounts. Joining is a cgroup migration: on cgroup v1 the kernel
/// makes it wait for an RCU grace period (`cgroup_threadgroup_rwsem` taken for
/// writing), 10-20 ms on a busy machine, which so overlaps the set-up's own work instead
/// of adding to it. The helper is forked before any namespace is entered: it writes our
/// pid as the host sees it, with our original credentials.
pub fn start_join(procs_files: &[PathBuf]) -> io::Result<libc::pid_t> {
    let me = std::process::id();
    // SAFETY: the set-up is single-threaded; the child writes a few files and leaves.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(sys::err("fork"));
    }
    if pid == 0 {
        leave(match limits::join(procs_files, me) {
            Ok(()) => 0,
            Err(e) => failed(e),
        });
    }
    Ok(pid)
}

/// Waits for our child `pid`; its exit code (None: killed).
fn wait_child(pid: libc::pid_t) -> Option<i32> {
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            return libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
        }
        if r < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return None;
        }
    }
}

fn enter_namespaces(plan: &RunPlan) -> io::Result<()> {
    if let View::Kept { keeper, .. } = &plan.view {
        // The run's namespace is a copy of the keeper's, which holds the overlay.
        let ns = std::fs::File::open(format!("/proc/{keeper}/ns/mnt")).map_err(|e| {
            io::Error::new(e.kind(), format!("the overlay's keeper ({keeper}): {e}"))
        })?;
        sys::setns(&ns, libc::CLONE_NEWNS)?;
    }
    if plan.user_namespace {
        sys::unshare(libc::CLONE_NEWUSER)?;
        sys::write_proc("/proc/self/setgroups", "deny")?;
        sys::write_proc("/proc/self/uid_map", &format!("{0} {0} 1", plan.uid))?;
        sys::write_proc("/proc/self/gid_map", &format!("{0} {0} 1", plan.gid))?;
    }
    let no_network = plan.confine.as_ref().is_some_and(|c| !c.network);
    let mut joined = false;
    if let (true, Some(pid)) = (no_network, plan.net_of) {
        // Entered before a user namespace is made: the service's namespace belongs to
        // the host's user namespace. A service that has just ended leaves a fresh one.
        if let Ok(ns) = std::fs::File::open(format!("/proc/{pid}/ns/net")) {
            joined = sys::setns(&ns, libc::CLONE_NEWNET).is_ok();
        }
    }
    let mut flags =
        libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS;
    if no_network && !joined {
        flags |= libc::CLONE_NEWNET;
    }
    sys::unshare(flags)?;
    // Nothing mounted here may propagate back to the host.
    sys::mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        None,
    )
}

fn mount_workspace(view: &View) -> io::Result<OwnedFd> {
    match view {
        View::Overlay {
            lowers,
            upper,
            work,
        } => {
            let l: Vec<&Path> = lowers.iter().map(PathBuf::as_path).collect();
            sys::overlay(&l, upper, work)
        }
        View::Bind { source } | View::Kept { merged: source, .. } => sys::clone_tree(source),
    }
}

/// Creates a directory and its parents, as far as they are missing.
fn mkdirs(p: &Path) -> io::Result<()> {
    std::fs::create_dir_all(p)
        .map_err(|e| io::Error::new(e.kind(), format!("creating {}: {e}", p.display())))
}

fn arrange(plan: &RunPlan, ws: OwnedFd, caches: Vec<(PathBuf, OwnedFd)>) -> io::Result<()> {
    match &plan.confine {
        None => {
            mkdirs(&plan.workspace)?;
            sys::attach(&ws, &plan.workspace)
        }
        Some(c) => root::enter(
            &c.root,
            ws,
            &plan.workspace,
            &c.hidden_dirs,
            &c.hidden_files,
            caches,
        ),
    }
}

/// PID 1 of the run: a /proc of its own, loopback, confinement, then the command.
/// `host_left`: the set-up has detached the host's tree already.
fn pid1(plan: &RunPlan, host_left: bool) -> i32 {
    // SAFETY: prctl on ourselves: if the set-up dies (exec was killed), so do we, and with
    // us every process of the run.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    if let Err(e) = prepare_pid1(plan, host_left) {
        eprintln!("avfs: the run could not be set up: {e}");
        return SETUP_FAILED;
    }
    init::init_main(&init::Command {
        argv: &plan.argv,
        env: &plan.env,
        interactive: plan.interactive,
    })
}

fn prepare_pid1(plan: &RunPlan, host_left: bool) -> io::Result<()> {
    sys::mount(
        Some(Path::new("proc")),
        Path::new("/proc"),
        Some("proc"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        None,
    )?;
    if let Some(c) = &plan.confine {
        // /proc as a container has it: kernel knobs read-only, internals masked.
        for p in super::config::PROC_READ_ONLY {
            let p = Path::new(p);
            if p.exists() {
                sys::mount(Some(p), p, None, libc::MS_BIND | libc::MS_REC, None)?;
                sys::remount_ro(p)?;
            }
        }
        for p in super::config::PROC_MASKED {
            let p = Path::new(p);
            if p.exists() {
                sys::bind_ro(Path::new("/dev/null"), p)?;
            }
        }
        if !host_left {
            root::leave_host()?;
        }
        if !c.network {
            sys::loopback_up()?;
        }
    }
    std::env::set_current_dir(&plan.cwd)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", plan.cwd.display())))?;
    if let Some(c) = &plan.confine {
        confine::confine(&c.access)?;
    }
    Ok(())
}
