//! Finding a command's processes through /proc: the ones that left its process group
//! (`setsid`, a double fork) and, after `avfs exec` itself died, all of them.
//!
//! A command's processes are recognised by what they inherit: the marker variable
//! `AVFS_EXEC_ID=<id>` in their environment, the command's process group, and, while
//! `avfs exec` lives, descent (it is a child subreaper, so orphans become its children).
//!
//! A leaf: the runner, the exec watchdog, a run's PID 1 (`sandbox::init`), the kept
//! overlays and the mount all read /proc through it, so it imports none of them.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The environment variable that marks a command's processes.
pub const MARKER: &str = "AVFS_EXEC_ID";

/// One process, from /proc/PID/stat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proc {
    pub pid: i32,
    pub ppid: i32,
    pub pgid: i32,
    pub zombie: bool,
    /// When it started (clock ticks after boot): with the pid, names one process for
    /// good (0 when /proc did not say).
    pub start: u64,
}

fn parse_stat(pid: i32, text: &str) -> Option<Proc> {
    // "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
    let rest = &text[text.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    let state = f.next()?;
    let ppid = f.next()?.parse().ok()?;
    let pgid = f.next()?.parse().ok()?;
    // Field 22, 16 after the process group (field 5).
    let start = f.nth(16).and_then(|s| s.parse().ok()).unwrap_or(0);
    Some(Proc {
        pid,
        ppid,
        pgid,
        zombie: state == "Z" || state == "X",
        start,
    })
}

pub fn stat(pid: i32) -> Option<Proc> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(pid, &text)
}

/// Every process this one can see.
pub fn scan() -> Vec<Proc> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(stat)
        .collect()
}

/// Does `pid`'s environment hold `MARKER=value`? (False when it cannot be read.)
pub fn has_marker(pid: i32, value: &str) -> bool {
    let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
        return false;
    };
    let want = format!("{MARKER}={value}");
    env.split(|b| *b == 0).any(|kv| kv == want.as_bytes())
}

/// The command line of `pid`, for reports (at most 200 bytes).
pub fn command_line(pid: i32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let mut s: String = raw
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    if s.is_empty() {
        s = std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .unwrap_or_default()
            .trim()
            .to_string();
    }
    if s.len() > 200 {
        let mut cut = 200;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// `roots` and every process below them.
pub fn with_descendants(procs: &[Proc], roots: &[i32]) -> Vec<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for p in procs {
        children.entry(p.ppid).or_default().push(p.pid);
    }
    let mut out = Vec::new();
    let mut stack: Vec<i32> = roots.to_vec();
    while let Some(pid) = stack.pop() {
        if out.contains(&pid) {
            continue;
        }
        out.push(pid);
        if let Some(c) = children.get(&pid) {
            stack.extend(c);
        }
    }
    out
}

/// Children of this process (it may have several threads; any of them may be a parent).
pub fn own_children(procs: &[Proc]) -> Vec<i32> {
    let me = std::process::id() as i32;
    procs
        .iter()
        .filter(|p| p.ppid == me)
        .map(|p| p.pid)
        .collect()
}

fn alive(pid: i32) -> bool {
    // Reap it if it is our child (a zombie child still "exists" for kill(2)).
    // SAFETY: non-blocking waitpid of one pid; kill with signal 0 only checks existence.
    unsafe {
        libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG);
        libc::kill(pid, 0) == 0 && !stat(pid).is_none_or(|p| p.zombie)
    }
}

/// Ends `pids`: SIGTERM, up to `grace` for them to exit, then SIGKILL. Processes they
/// start meanwhile are found by `more` (called after each round) and ended too.
pub fn end_all(pids: &[i32], grace: Duration, more: impl Fn() -> Vec<i32>) {
    let mut live: Vec<i32> = pids.to_vec();
    for &p in &live {
        // SAFETY: signalling processes of the command we ran.
        unsafe { libc::kill(p, libc::SIGTERM) };
    }
    let until = Instant::now() + grace;
    loop {
        live.retain(|p| alive(*p));
        for p in more() {
            if !live.contains(&p) {
                // SAFETY: as above.
                unsafe { libc::kill(p, libc::SIGTERM) };
                live.push(p);
            }
        }
        if live.is_empty() || Instant::now() >= until {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    kill_until_gone(live, more);
}

/// SIGKILLs `pids` and whatever `more` finds, until nothing is left (bounded: a process
/// stuck in the kernel cannot be waited for forever).
pub fn kill_until_gone(mut live: Vec<i32>, more: impl Fn() -> Vec<i32>) {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        for p in more() {
            if !live.contains(&p) {
                live.push(p);
            }
        }
        for &p in &live {
            // SAFETY: signalling processes of the command we ran.
            unsafe { libc::kill(p, libc::SIGKILL) };
        }
        live.retain(|p| alive(*p));
        if live.is_empty() || Instant::now() >= until {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_names_parse() {
        let p = parse_stat(7, "7 (a) b (c)) S 3 7 7 0 -1 4194560 ...").unwrap();
        assert_eq!((p.ppid, p.pgid, p.zombie), (3, 7, false));
        let z = parse_stat(8, "8 (sh) Z 1 8 8").unwrap();
        assert!(z.zombie);
        assert!(stat(std::process::id() as i32).is_some());
    }
}
