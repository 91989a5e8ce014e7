//! Process descriptors (`pidfd_open`, Linux 5.3): a handle on one process that a later
//! process reusing its pid can never be taken for, which becomes readable when the process
//! ends, so waiting for it needs no polling.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

pub struct Pidfd(OwnedFd);

impl Pidfd {
    /// A descriptor of `pid` (fails with ESRCH when there is no such process).
    pub fn open(pid: i32) -> io::Result<Pidfd> {
        // SAFETY: pidfd_open takes a pid and flags; the result is checked.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned this descriptor to us.
        Ok(Pidfd(unsafe { OwnedFd::from_raw_fd(fd as i32) }))
    }

    /// Sends `sig` to the process (not to whoever has its pid now).
    pub fn signal(&self, sig: i32) -> io::Result<()> {
        // SAFETY: a valid pidfd; no siginfo.
        let r = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.0.as_raw_fd(),
                sig,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits until the process has ended, at most `limit` (`None`: however long it
    /// takes); whether it has.
    pub fn wait_exit(&self, limit: Option<Duration>) -> bool {
        self.wait_exit_or(None, limit)
    }

    /// Like `wait_exit`, and returns early when `other` becomes readable (or its writers
    /// are gone).
    pub fn wait_exit_or(&self, other: Option<RawFd>, limit: Option<Duration>) -> bool {
        let deadline = limit.map(|l| Instant::now() + l);
        loop {
            let timeout = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    // Rounded up: a wait of 0 ms for a sub-millisecond rest would spin.
                    left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
                }
                None => -1,
            };
            let mut p = [
                libc::pollfd {
                    fd: self.0.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    // A negative descriptor is ignored by poll.
                    fd: other.unwrap_or(-1),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: polls two pollfds of ours.
            let r = unsafe { libc::poll(p.as_mut_ptr(), 2, timeout) };
            if r > 0 {
                return p[0].revents != 0;
            }
            if r == 0 && timeout >= 0 {
                return false;
            }
            if r < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                return false;
            }
        }
    }
}

/// Whether `fd` is readable (or its writers are gone) within `limit`.
pub fn readable(fd: RawFd, limit: Option<Duration>) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let timeout = limit.map_or(-1, |l| l.as_millis().min(i32::MAX as u128) as i32);
    // SAFETY: polls one pollfd.
    unsafe { libc::poll(&mut p, 1, timeout) > 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_for_a_child_and_times_out_on_a_live_one() {
        let mut quick = std::process::Command::new("true").spawn().unwrap();
        let fd = Pidfd::open(quick.id() as i32).unwrap();
        assert!(fd.wait_exit(Some(Duration::from_secs(10))));
        quick.wait().unwrap();

        let mut slow = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let fd = Pidfd::open(slow.id() as i32).unwrap();
        let t = Instant::now();
        assert!(!fd.wait_exit(Some(Duration::from_millis(50))));
        assert!(t.elapsed() >= Duration::from_millis(50));
        fd.signal(libc::SIGKILL).unwrap();
        assert!(fd.wait_exit(None));
        slow.wait().unwrap();
    }
}
