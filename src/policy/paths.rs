//! Paths as the kernel would resolve them, decided before any prefix check: `..` is
//! resolved lexically, `/proc/*/root` is the root, `/dev/fd/N` is a descriptor and
//! nothing below it, `~` and `$HOME` are the host's home. A path is inside the workspace,
//! a harmless device, a network endpoint (`/dev/tcp`), outside, or not known (a variable
//! the line does not set).

use std::path::Path;

/// Where a command runs, as far as the line tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Where {
    /// A directory of the workspace, as components below its root.
    In(Vec<String>),
    /// Outside the workspace, and why.
    Outside(String),
    /// A directory the line does not name (`cd "$X"`).
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Inside,
    /// `/dev/null`, `/dev/stdout`, `/dev/fd/1`, `/proc/self/status`: not a host file.
    Device,
    /// `/dev/tcp/HOST/PORT`, `/dev/udp/...`: bash opens a connection.
    Network,
    Outside(String),
    /// Starts with a value the line does not give (`$X/...`, `$(cmd)`): not judged here.
    NotJudged,
}

const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/urandom",
    "/dev/random",
    "/dev/stdin",
    "/dev/stdout",
    "/dev/stderr",
    "/dev/tty",
];

/// Harmless files of /proc about the process itself or the machine.
const PROC_SELF_FILES: &[&str] = &[
    "status",
    "stat",
    "statm",
    "cmdline",
    "comm",
    "limits",
    "cgroup",
    "mountinfo",
    "mounts",
    "io",
    "oom_score",
    "sched",
    "schedstat",
    "loginuid",
    "sessionid",
    "personality",
];
const PROC_FILES: &[&str] = &[
    "cpuinfo",
    "meminfo",
    "loadavg",
    "uptime",
    "version",
    "stat",
    "mounts",
    "filesystems",
    "swaps",
];

/// True if the word names the host's home directory: `~`, `~user`, `$HOME` or `${HOME}`
/// anywhere in it (`hostroot$HOME/.ssh` too).
pub fn names_home(word: &str) -> bool {
    word.starts_with('~') || word.contains("$HOME") || word.contains("${HOME}")
}

/// Variables whose value is a host directory outside any workspace: avfs's own state
/// (vaults, policies, pending approvals: writing there would let a run approve itself),
/// the per-user directories and the host's temporary directory.
const HOST_DIR_VARS: &[(&str, &str)] = &[
    (
        "AVFS_HOME",
        "is avfs's own directory (vaults, policies, approvals) on the host",
    ),
    (
        "XDG_CONFIG_HOME",
        "is the user's configuration directory on the host",
    ),
    ("XDG_DATA_HOME", "is the user's data directory on the host"),
    (
        "XDG_CACHE_HOME",
        "is the user's cache directory on the host",
    ),
    (
        "XDG_STATE_HOME",
        "is the user's state directory on the host",
    ),
    (
        "XDG_RUNTIME_DIR",
        "is the user's runtime directory on the host",
    ),
    ("TMPDIR", "is the host's temporary directory"),
];

/// Why the word names a host directory through a variable (`$AVFS_HOME/...`), if it does.
fn names_host_dir(word: &str) -> Option<&'static str> {
    HOST_DIR_VARS.iter().find_map(|(name, why)| {
        (word.contains(&format!("${{{name}}}")) || contains_var(word, name)).then_some(*why)
    })
}

/// `$NAME` in `word`, not as the start of a longer name (`$TMPDIRS`).
fn contains_var(word: &str, name: &str) -> bool {
    let pat = format!("${name}");
    word.match_indices(&pat).any(|(i, _)| {
        !word[i + pat.len()..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// True if the component is a glob that can match `..` (`.[.]`, `.?`, `?.`, `*`): the
/// shell may turn it into `..` (with `shopt -u globskipdots`), so it climbs.
pub fn may_climb(part: &str) -> bool {
    // `.` and `..` are only ever matched by a pattern that starts with them spelled out
    // or in a bracket: `*` and `?` never match them.
    part.contains(['*', '?', '['])
        && !part.starts_with(['*', '?'])
        && glob_matches(part.as_bytes(), b"..")
}

/// A shell glob (`*`, `?`, `[...]`) against a name.
fn glob_matches(p: &[u8], t: &[u8]) -> bool {
    match p.first() {
        None => t.is_empty(),
        Some(b'*') => (0..=t.len()).any(|k| glob_matches(&p[1..], &t[k..])),
        Some(b'?') => !t.is_empty() && glob_matches(&p[1..], &t[1..]),
        Some(b'[') => {
            let Some(close) = p.iter().skip(2).position(|c| *c == b']').map(|k| k + 2) else {
                return t.first() == Some(&b'[') && glob_matches(&p[1..], &t[1..]);
            };
            let Some(&c) = t.first() else { return false };
            let set = &p[1..close];
            let (negate, set) = match set.first() {
                Some(b'!' | b'^') => (true, &set[1..]),
                _ => (false, set),
            };
            let mut hit = false;
            let mut k = 0;
            while k < set.len() {
                if k + 2 < set.len() && set[k + 1] == b'-' {
                    hit |= set[k] <= c && c <= set[k + 2];
                    k += 3;
                } else {
                    hit |= set[k] == c;
                    k += 1;
                }
            }
            hit != negate && glob_matches(&p[close + 1..], &t[1..])
        }
        Some(&c) => t.first() == Some(&c) && glob_matches(&p[1..], &t[1..]),
    }
}

/// Lexically normalized components of an absolute path (`..` above `/` stays at `/`).
fn normalize_abs(path: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for part in path.split('/') {
        let part = if may_climb(part) { ".." } else { part };
        match part {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            p => out.push(p.to_string()),
        }
    }
    out
}

fn is_proc_pid(s: &str) -> bool {
    s == "self" || s == "thread-self" || (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
}

/// Follows the kernel's magic links that lead back to the root: `/proc/PID/root` (also
/// through `/proc/PID/task/TID/root`). Returns the path they lead to, or why the path
/// cannot be judged (`/proc/PID/cwd`, `/proc/PID/fd/N/...`).
fn through_proc(mut comps: Vec<String>) -> Result<Vec<String>, String> {
    for _ in 0..64 {
        if comps.first().map(String::as_str) != Some("proc") {
            return Ok(comps);
        }
        let mut i = 1;
        if !comps.get(i).is_some_and(|p| is_proc_pid(p)) {
            return Ok(comps);
        }
        i += 1;
        if comps.get(i).map(String::as_str) == Some("task") && comps.get(i + 1).is_some() {
            i += 2;
        }
        match comps.get(i).map(String::as_str) {
            Some("root") => comps = comps.split_off(i + 1),
            Some("cwd") | Some("exe") | Some("map_files") => {
                return Err("goes through another process's directory or files in /proc".into());
            }
            Some("fd") if comps.len() > i + 2 => {
                return Err("goes through a descriptor as a directory".into());
            }
            _ => return Ok(comps),
        }
    }
    Err("goes through /proc too many times".into())
}

/// Judges an absolute path.
fn judge_abs(path: &str, ws: Option<&Path>) -> Verdict {
    let comps = match through_proc(normalize_abs(path)) {
        Ok(c) => c,
        Err(why) => return Verdict::Outside(why),
    };
    let full = format!("/{}", comps.join("/"));
    if DEVICES.contains(&full.as_str()) {
        return Verdict::Device;
    }
    let c: Vec<&str> = comps.iter().map(String::as_str).collect();
    match c.as_slice() {
        ["dev", "fd", n] | ["proc", _, "fd", n] if n.bytes().all(|b| b.is_ascii_digit()) => {
            return Verdict::Device;
        }
        ["dev", "tcp" | "udp", ..] => return Verdict::Network,
        ["proc", f] if PROC_FILES.contains(f) => return Verdict::Device,
        ["proc", p, f] if is_proc_pid(p) && PROC_SELF_FILES.contains(f) => return Verdict::Device,
        _ => {}
    }
    if let Some(ws) = ws {
        let root = normalize_abs(&ws.to_string_lossy());
        if comps.starts_with(&root) {
            return Verdict::Inside;
        }
    }
    Verdict::Outside("is an absolute path on the host, outside the workspace".into())
}

/// Judges `word` as a path used by a command that runs in `dir`, with the workspace at
/// `ws` on the host (when known).
pub fn judge(word: &str, dir: &Where, ws: Option<&Path>) -> Verdict {
    if names_home(word) {
        return Verdict::Outside("is in the home directory on the host".into());
    }
    if let Some(why) = names_host_dir(word) {
        return Verdict::Outside(why.into());
    }
    if word.starts_with('$') {
        return Verdict::NotJudged;
    }
    if word.starts_with('/') {
        return judge_abs(word, ws);
    }
    let base = match dir {
        Where::In(d) => d,
        Where::Outside(why) => {
            return Verdict::Outside(format!(
                "is relative to a directory outside the workspace ({why})"
            ));
        }
        Where::Unknown => return Verdict::NotJudged,
    };
    let mut depth = base.len();
    for part in word.split('/') {
        let part = if may_climb(part) { ".." } else { part };
        match part {
            "" | "." => {}
            ".." => {
                if depth == 0 {
                    return Verdict::Outside("climbs above the workspace root".into());
                }
                depth -= 1;
            }
            _ => depth += 1,
        }
    }
    Verdict::Inside
}

/// The components below the workspace root of a path [`judge`] finds `Inside`, as the
/// line names it: `..` is kept where it is, since after a symlink the kernel climbs from
/// where the link led, not from the link (`link/../x`). `None` for any other path.
pub fn inside(word: &str, dir: &Where, ws: Option<&Path>) -> Option<Vec<String>> {
    if judge(word, dir, ws) != Verdict::Inside {
        return None;
    }
    let (mut comps, rest) = match (word.starts_with('/'), dir, ws) {
        (true, _, Some(ws)) => {
            let root = normalize_abs(&ws.to_string_lossy());
            let all = through_proc(normalize_abs(word)).ok()?;
            (Vec::new(), all.get(root.len()..)?.join("/"))
        }
        (false, Where::In(base), _) => (base.clone(), word.to_string()),
        _ => return None,
    };
    comps.extend(
        rest.split('/')
            .filter(|p| !p.is_empty() && *p != ".")
            .map(str::to_string),
    );
    Some(comps)
}

/// The directory `target` leads to from `dir` (a `cd`), in the workspace or not.
pub fn change_dir(dir: &Where, target: &str, ws: Option<&Path>) -> Where {
    if names_home(target) {
        return Where::Outside("is the host's home directory".into());
    }
    if target.starts_with('$') || target == "-" {
        return Where::Unknown;
    }
    if target.starts_with('/') {
        let comps = match through_proc(normalize_abs(target)) {
            Ok(c) => c,
            Err(why) => return Where::Outside(why),
        };
        if let Some(ws) = ws {
            let root = normalize_abs(&ws.to_string_lossy());
            if comps.starts_with(&root) {
                return Where::In(comps[root.len()..].to_vec());
            }
        }
        return Where::Outside(format!("{target} is outside the workspace"));
    }
    let Where::In(base) = dir else {
        return dir.clone();
    };
    let mut d = base.clone();
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if d.pop().is_none() {
                    return Where::Outside(format!("{target} climbs above the workspace root"));
                }
            }
            p => d.push(p.to_string()),
        }
    }
    Where::In(d)
}

/// The absolute host path a word leads to, normalized (`..`, `/proc/*/root`), for an
/// absolute word, or a relative one in a known directory with the workspace's host path
/// known. `None` when the line does not give it (variables, the home, an unknown `cd`).
pub fn host_path(word: &str, dir: &Where, ws: Option<&Path>) -> Option<String> {
    if names_home(word) || word.starts_with('$') {
        return None;
    }
    let comps = if word.starts_with('/') {
        through_proc(normalize_abs(word)).ok()?
    } else {
        let Where::In(base) = dir else {
            return None;
        };
        let mut full = normalize_abs(&ws?.to_string_lossy());
        full.extend(base.iter().cloned());
        normalize_abs(&format!("/{}/{word}", full.join("/")))
    };
    Some(format!("/{}", comps.join("/")))
}

/// True if the word could name a file: it has a `/`, is `..`, or names the home.
pub fn looks_like_path(a: &str) -> bool {
    a.contains('/') || a == ".." || names_home(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn j(p: &str) -> Verdict {
        judge(p, &Where::In(vec![]), Some(Path::new("/ws/main")))
    }

    #[test]
    fn inside_keeps_dotdot_where_the_line_puts_it() {
        let ws = Some(Path::new("/ws/main"));
        let base = Where::In(vec!["src".into()]);
        let v = |c: &[&str]| Some(c.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            inside("link/../x", &base, ws),
            v(&["src", "link", "..", "x"])
        );
        assert_eq!(inside("./a//b", &base, ws), v(&["src", "a", "b"]));
        assert_eq!(inside("/ws/main/a", &base, ws), v(&["a"]));
        assert_eq!(inside("/etc/x", &base, ws), None);
        assert_eq!(inside("../../x", &base, ws), None);
        assert_eq!(inside("$X/a", &base, ws), None);
    }

    #[test]
    fn normalizes_before_deciding() {
        assert!(matches!(j("/proc/self/root/tmp/x"), Verdict::Outside(_)));
        assert!(matches!(j("/proc/self/root/ws/main/a"), Verdict::Inside));
        assert!(matches!(
            j("/dev/fd/../../../root/.ssh/k"),
            Verdict::Outside(_)
        ));
        assert!(matches!(j("/dev/fd/3/../x"), Verdict::Outside(_)));
        assert!(matches!(j("/proc/1/cwd/x"), Verdict::Outside(_)));
        assert!(matches!(
            j("/proc/self/task/1/root/etc"),
            Verdict::Outside(_)
        ));
        assert!(matches!(j("/ws/main/../other/x"), Verdict::Outside(_)));
        assert!(matches!(j("/ws/main/a/../b"), Verdict::Inside));
        assert_eq!(j("/dev/null"), Verdict::Device);
        assert_eq!(j("/dev/fd/2"), Verdict::Device);
        assert_eq!(j("/proc/self/status"), Verdict::Device);
        assert_eq!(j("/dev/tcp/127.0.0.1/80"), Verdict::Network);
        assert!(matches!(j("hostroot$HOME/.ssh/k"), Verdict::Outside(_)));
        assert!(matches!(
            j("${AVFS_HOME}/policies/t.toml"),
            Verdict::Outside(_)
        ));
        assert!(matches!(j("$AVFS_HOME/vaults/t.avfs"), Verdict::Outside(_)));
        assert!(matches!(j("$TMPDIR/x"), Verdict::Outside(_)));
        assert!(matches!(j("$TMPDIRS/x"), Verdict::NotJudged));
        assert!(matches!(j("a/../../x"), Verdict::Outside(_)));
        assert_eq!(j("a/../b"), Verdict::Inside);
        assert_eq!(j("$X/y"), Verdict::NotJudged);
    }
}
