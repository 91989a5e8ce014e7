//! Starting the exec watchdog by `fork` alone. Executing avfs's ~140 MB binary again
//! for the watchdog cost ~2 ms of CPU on every `avfs exec` (dynamic loading, relocations,
//! page faults, std's and clap's start-up: 18 % of an `exec -- true`, `perf`), for a
//! process that in almost every run only reads a few lines from a pipe and exits.
//!
//! So the forked copy only listens. When `avfs exec` says "done", it exits. When the
//! pipe closes without that (exec was killed or crashed), there is work that needs
//! SQLite, which a forked copy of a process with open connections must not use (their
//! locks and SQLite's per-file state belong to the parent): only then does it execute
//! `avfs exec-watchdog` as `spawn::spawn` would have started it, with the notes it
//! heard on a memfd as its stdin and the run lock at `INHERITED_FD`. The recovery path
//! is the same code as before; only the common path is cheaper.
//!
//! Forking is only sound from a single-threaded process (the caller checks, as
//! `exec::forked` does): the child allocates while it reads.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use super::spawn::{ExecStrings, INHERITED_FD, Spawned};
use crate::exec::forked::{close_from, reset_signals};

/// The listener's process name (`/proc/PID/comm`), where `ps` would otherwise show
/// another `avfs`.
const LISTENER_COMM: &std::ffi::CStr = c"avfs-watchdog";

/// Forks the watchdog: the same contract as `spawn::spawn` (a new process group, in
/// `/`, stdin a new pipe, stdout and stderr /dev/null, signals as after an exec,
/// `inherit` at `INHERITED_FD`, no other descriptor of ours), executing `program` with
/// `argv` and `env` only if the pipe closes before a `{"done": true}` note.
pub fn start(
    program: &Path,
    argv: &[OsString],
    env: &[(OsString, OsString)],
    inherit: Option<RawFd>,
) -> io::Result<Spawned> {
    // Everything the child needs is made before the fork: it only moves descriptors,
    // reads, and perhaps executes.
    let strings = ExecStrings::new(program, argv, env)?;
    let (arg_ptrs, env_ptrs) = (strings.argv(), strings.envp());

    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 fills our array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors are new and ours.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let null: OwnedFd = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")?
        .into();
    {
        // The child's copy of our buffers must hold nothing still to be written.
        use std::io::Write;
        let _ = std::io::stdout().flush();
    }
    // SAFETY: this process is single-threaded (checked by the caller), so the child may
    // run ordinary code; it never returns from `child`.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        let fds = ChildFds {
            read: read.as_raw_fd(),
            null: null.as_raw_fd(),
            inherit,
        };
        child(fds, &strings.path, &arg_ptrs, &env_ptrs);
    }
    drop(read);
    Ok(Spawned {
        pid,
        stdin: std::fs::File::from(write),
    })
}

struct ChildFds {
    read: RawFd,
    null: RawFd,
    inherit: Option<RawFd>,
}

/// Moves `fd` to `target` (not close-on-exec there), first out of the way of 0-3.
///
/// # Safety
/// Only in the forked child, on descriptors it holds.
unsafe fn place(fd: RawFd, target: RawFd) -> bool {
    // SAFETY: see the function's contract.
    unsafe {
        if fd == target {
            return libc::fcntl(fd, libc::F_SETFD, 0) == 0;
        }
        libc::dup2(fd, target) == target
    }
}

/// The forked child: the watchdog's listening part; never returns.
fn child(
    fds: ChildFds,
    path: &CString,
    argv: &[*mut libc::c_char],
    envp: &[*mut libc::c_char],
) -> ! {
    // SAFETY: system calls on this process and its own descriptors.
    unsafe {
        libc::setpgid(0, 0);
        // Sources numbered 0-3 move away before anything is placed there.
        let away = |fd: RawFd| {
            if fd <= INHERITED_FD {
                libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10)
            } else {
                fd
            }
        };
        let read = away(fds.read);
        let null = away(fds.null);
        let inherit = fds.inherit.map(away);
        let placed = place(read, 0)
            && place(null, 1)
            && place(null, 2)
            && inherit.is_none_or(|fd| place(fd, INHERITED_FD));
        if !placed {
            libc::_exit(1);
        }
        close_from(if inherit.is_some() {
            INHERITED_FD + 1
        } else {
            INHERITED_FD
        });
        reset_signals();
        libc::chdir(c"/".as_ptr());
        libc::prctl(libc::PR_SET_NAME, LISTENER_COMM.as_ptr(), 0, 0, 0);
    }
    let heard = match listen() {
        Heard::Done => {
            // SAFETY: leaving without running the parent's destructors or atexit hooks.
            unsafe { libc::_exit(0) }
        }
        Heard::Closed(notes) => notes,
    };
    // exec died: the notes go to `avfs exec-watchdog` on a memfd as its stdin.
    // SAFETY: as above; execve only returns on failure.
    unsafe {
        let memfd = libc::memfd_create(c"avfs-watchdog-notes".as_ptr(), 0);
        if memfd >= 0 && write_all(memfd, &heard) && libc::lseek(memfd, 0, libc::SEEK_SET) == 0 {
            libc::dup2(memfd, 0);
            libc::close(memfd);
            libc::execve(path.as_ptr(), argv.as_ptr().cast(), envp.as_ptr().cast());
        }
        libc::_exit(1)
    }
}

enum Heard {
    /// `{"done": true}` arrived: exec finished its own work.
    Done,
    /// The pipe closed first; everything read, as read.
    Closed(Vec<u8>),
}

/// Reads stdin until a "done" note or the end.
fn listen() -> Heard {
    let mut all = Vec::with_capacity(4096);
    let mut scanned = 0;
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: reads into our own buffer.
        let n = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Heard::Closed(all);
        }
        if n == 0 {
            return Heard::Closed(all);
        }
        all.extend_from_slice(&buf[..n as usize]);
        // Only complete lines are judged, by the same reader the recovery uses.
        if let Some(end) = all.iter().rposition(|b| *b == b'\n')
            && end + 1 > scanned
        {
            if crate::exec::watchdog::listen(&all[scanned..=end]).is_none() {
                return Heard::Done;
            }
            scanned = end + 1;
        }
    }
}

fn write_all(fd: RawFd, mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        // SAFETY: writes from our own buffer to our own descriptor.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n <= 0 {
            return false;
        }
        bytes = &bytes[n as usize..];
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// The common path: "done" ends the listener without executing anything; the
    /// program named would fail loudly if it ran.
    #[test]
    fn done_ends_the_listener_without_executing() {
        // Test threads make this process multi-threaded; the child here only reads and
        // exits, which is the part under test.
        let argv: Vec<OsString> = vec!["false".into()];
        let mut w = start(Path::new("/bin/false"), &argv, &[], None).unwrap();
        w.stdin
            .write_all(b"{\"base\": 1}\n{\"done\": true}\n")
            .unwrap();
        drop(w.stdin);
        let mut st = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(w.pid, &mut st, 0) };
        assert!(
            libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0,
            "status {st}"
        );
    }

    /// The pipe closing first executes the program with the notes as its stdin.
    #[test]
    fn a_closed_pipe_executes_the_recovery_with_the_notes() {
        let out = std::env::temp_dir().join(format!("avfs-dogfork-{}", std::process::id()));
        let script = format!("cat > {}", out.display());
        let argv: Vec<OsString> = vec!["sh".into(), "-c".into(), script.into()];
        let mut w = start(Path::new("/bin/sh"), &argv, &[], None).unwrap();
        w.stdin.write_all(b"{\"base\": 1}\n{\"pgid\": 7}").unwrap();
        drop(w.stdin);
        let mut st = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(w.pid, &mut st, 0) };
        assert!(
            libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0,
            "status {st}"
        );
        let got = std::fs::read(&out).unwrap();
        let _ = std::fs::remove_file(&out);
        assert_eq!(got, b"{\"base\": 1}\n{\"pgid\": 7}");
    }
}
