//! Starting the exec watchdog with `posix_spawn`. std's `Command` forks whenever a
//! descriptor must be inherited through a `pre_exec` hook (the watchdog inherits the run
//! lock), and `spawn` waits until the child has exec'd: measured ~2.4 ms on the way of
//! every `avfs exec` (strace, fork to execve). glibc's `posix_spawn` starts the child with
//! a vfork-like clone that shares our memory until the exec, so nothing is copied.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Where the child finds the inherited descriptor (the run lock).
pub const INHERITED_FD: RawFd = 3;

/// A started child: its pid and the write end of the pipe that is its stdin.
pub struct Spawned {
    pub pid: libc::pid_t,
    pub stdin: std::fs::File,
}

fn cstring(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| io::Error::other("a NUL byte in an argument"))
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(r))
    }
}

/// What `execve` takes, as C strings made before any fork: the program, `argv`, and
/// `env` as `KEY=VALUE`.
pub struct ExecStrings {
    pub path: CString,
    args: Vec<CString>,
    envs: Vec<CString>,
}

impl ExecStrings {
    pub fn new(
        program: &Path,
        argv: &[OsString],
        env: &[(OsString, OsString)],
    ) -> io::Result<ExecStrings> {
        Ok(ExecStrings {
            path: cstring(program.as_os_str())?,
            args: argv.iter().map(|a| cstring(a)).collect::<io::Result<_>>()?,
            envs: env
                .iter()
                .map(|(k, v)| {
                    let mut kv = k.clone();
                    kv.push("=");
                    kv.push(v);
                    cstring(&kv)
                })
                .collect::<io::Result<_>>()?,
        })
    }

    fn pointers(strings: &[CString]) -> Vec<*mut libc::c_char> {
        let mut p: Vec<*mut libc::c_char> = strings.iter().map(|s| s.as_ptr().cast_mut()).collect();
        p.push(std::ptr::null_mut());
        p
    }

    /// `argv` for `execve`, NULL-terminated; valid while `self` lives.
    pub fn argv(&self) -> Vec<*mut libc::c_char> {
        Self::pointers(&self.args)
    }

    /// `envp` for `execve`, NULL-terminated; valid while `self` lives.
    pub fn envp(&self) -> Vec<*mut libc::c_char> {
        Self::pointers(&self.envs)
    }
}

/// A close-on-exec copy of `fd` numbered 10 or more, so the dup2s into 0 and
/// `INHERITED_FD` never read from a slot an earlier one wrote.
fn high_copy(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: duplicates a descriptor we hold; the copy is ours.
    let c = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10) };
    if c < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `c` is a new descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(c) })
}

/// Runs `program` (`argv[0]` shown as given) with `env` only, in a new process group,
/// in `/`, stdin a new pipe, stdout and stderr /dev/null, the signal mask empty and
/// SIGPIPE at its default; `inherit` (if any) appears in the child as `INHERITED_FD`.
/// Every other descriptor of ours is close-on-exec already.
pub fn spawn(
    program: &Path,
    argv: &[OsString],
    env: &[(OsString, OsString)],
    inherit: Option<RawFd>,
) -> io::Result<Spawned> {
    let strings = ExecStrings::new(program, argv, env)?;
    let (path, arg_ptrs, env_ptrs) = (&strings.path, strings.argv(), strings.envp());

    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 fills our array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors are new and ours.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let read = high_copy(read.as_raw_fd())?;
    let inherit = inherit.map(high_copy).transpose()?;

    // SAFETY: the attribute and file-action objects are initialised before use and
    // destroyed on every path; every pointer handed to posix_spawn outlives the call.
    unsafe {
        let mut fa: libc::posix_spawn_file_actions_t = std::mem::zeroed();
        let mut attr: libc::posix_spawnattr_t = std::mem::zeroed();
        check(libc::posix_spawn_file_actions_init(&mut fa))?;
        if let Err(e) = check(libc::posix_spawnattr_init(&mut attr)) {
            libc::posix_spawn_file_actions_destroy(&mut fa);
            return Err(e);
        }
        let r = (|| -> io::Result<libc::pid_t> {
            check(libc::posix_spawn_file_actions_adddup2(
                &mut fa,
                read.as_raw_fd(),
                0,
            ))?;
            check(libc::posix_spawn_file_actions_addopen(
                &mut fa,
                1,
                c"/dev/null".as_ptr(),
                libc::O_WRONLY,
                0,
            ))?;
            check(libc::posix_spawn_file_actions_adddup2(&mut fa, 1, 2))?;
            if let Some(fd) = &inherit {
                check(libc::posix_spawn_file_actions_adddup2(
                    &mut fa,
                    fd.as_raw_fd(),
                    INHERITED_FD,
                ))?;
            }
            check(libc::posix_spawn_file_actions_addchdir_np(
                &mut fa,
                c"/".as_ptr(),
            ))?;
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            check(libc::posix_spawnattr_setsigmask(&mut attr, &empty))?;
            let mut pipe_default: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut pipe_default);
            libc::sigaddset(&mut pipe_default, libc::SIGPIPE);
            check(libc::posix_spawnattr_setsigdefault(
                &mut attr,
                &pipe_default,
            ))?;
            check(libc::posix_spawnattr_setpgroup(&mut attr, 0))?;
            check(libc::posix_spawnattr_setflags(
                &mut attr,
                (libc::POSIX_SPAWN_SETPGROUP
                    | libc::POSIX_SPAWN_SETSIGMASK
                    | libc::POSIX_SPAWN_SETSIGDEF) as libc::c_short,
            ))?;
            let mut pid: libc::pid_t = 0;
            check(libc::posix_spawn(
                &mut pid,
                path.as_ptr(),
                &fa,
                &attr,
                arg_ptrs.as_ptr(),
                env_ptrs.as_ptr(),
            ))?;
            Ok(pid)
        })();
        libc::posix_spawn_file_actions_destroy(&mut fa);
        libc::posix_spawnattr_destroy(&mut attr);
        let pid = r?;
        Ok(Spawned {
            pid,
            stdin: std::fs::File::from(write),
        })
    }
}
