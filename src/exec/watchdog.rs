//! The exec watchdog: a small process `avfs exec` starts before it creates anything, in a
//! process group of its own, holding the read end of a pipe only `avfs exec` can write to. exec
//! tells it, one JSON object per line, what it made (the fork, the temporary mount, the
//! checkpoint, the command's process group) and finally `{"done": true}`. If the pipe
//! closes without that line, `avfs exec` died (SIGKILL, a crash, a closed terminal), and
//! the watchdog finishes its work for it: it ends the command (every process carrying its
//! marker or group, see `procs`), waits for the temporary mount to go (its server got
//! SIGTERM from the kernel when exec died), and the CLI side rolls back or discards what
//! the options asked for and records it in the audit log.

use std::io::BufRead;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use crate::procs;

/// Reads exec's notes until the pipe closes; `None` when exec said it is done.
pub fn listen(input: impl BufRead) -> Option<Map<String, Value>> {
    let mut state = Map::new();
    for line in input.lines() {
        let Ok(line) = line else { break };
        if let Ok(Value::Object(m)) = serde_json::from_str::<Value>(&line) {
            state.extend(m);
        }
        if state.get("done") == Some(&Value::Bool(true)) {
            return None;
        }
    }
    Some(state)
}

/// Kills (SIGKILL) every process of the command: its process group and every process
/// whose environment carries its marker, with everything below them; again until none
/// is left. Returns how many it killed.
pub fn end_command(pgid: Option<i32>, id: &str) -> usize {
    let me = std::process::id() as i32;
    let find = || {
        let all = procs::scan();
        let roots: Vec<i32> = all
            .iter()
            .filter(|p| p.pid != me && !p.zombie)
            .filter(|p| Some(p.pgid) == pgid || procs::has_marker(p.pid, id))
            .map(|p| p.pid)
            .collect();
        procs::with_descendants(&all, &roots)
            .into_iter()
            .filter(|pid| *pid != me && all.iter().any(|p| p.pid == *pid && !p.zombie))
            .collect::<Vec<i32>>()
    };
    let first = find();
    let n = first.len();
    procs::kill_until_gone(first, find);
    n
}

/// Waits until `pid` is gone; SIGTERM after `patience`, SIGKILL after twice that.
pub fn wait_gone(pid: i32, patience: Duration) {
    let start = Instant::now();
    let mut termed = false;
    while procs::stat(pid).is_some_and(|p| !p.zombie) {
        let waited = start.elapsed();
        if waited > patience * 2 {
            // SAFETY: ending the mount server of the exec that died.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        } else if waited > patience && !termed {
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            termed = true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_merge_until_done() {
        let s = listen(&b"{\"pgid\": 5}\n{\"checkpoint\": \"c\"}\nnot json\n"[..]).unwrap();
        assert_eq!(s["pgid"], 5);
        assert_eq!(s["checkpoint"], "c");
        assert!(listen(&b"{\"pgid\": 5}\n{\"done\": true}\n"[..]).is_none());
    }
}
