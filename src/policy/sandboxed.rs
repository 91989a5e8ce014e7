//! What a sandboxed run can reach, as the policy trusts it: the sandbox shows the system
//! directories read-only (`[sandbox] read_only_paths`), hides the secrets below them,
//! gives the run its own `/tmp` and `/dev/shm`, and hides the rest of the host. A path
//! the sandbox contains needs no person; avfs's own files (its home, vault files, the
//! policies) are never a run's business, sandboxed or not.

use std::path::{Path, PathBuf};

use super::decision::{Action, Category, Finding};
use crate::sandbox::config::{SECRET_PATHS, SandboxConfig};

/// Why a system path is contained: the sandbox shows it read-only.
pub const READ_ONLY: &str = "is read-only in the sandbox";

/// Directories each sandboxed run gets its own copy of.
const PRIVATE_DIRS: &[&str] = &["/tmp", "/var/tmp", "/dev/shm"];

/// Findings about what the policy could not read: they ask a person even in the sandbox
/// (the policy fails closed), where other `unknown` findings (a program or code no rule
/// knows) run unattended, contained.
pub const NOT_READ: &[&str] = &[
    "unparseable",
    "not-understood",
    "nested-too-deep",
    "wrapped-too-deep",
    "too-many-findings",
    "setuid",
    "chown",
    "sqlite-files",
    "make-stdin",
];

/// Rules about the user's configuration in the home directory (the sandbox shows it
/// read-only: the write fails there) and symlinks out of the workspace (a run without
/// the sandbox follows the workspace's links before it decides).
const CONTAINED_HOST_RULES: &[&str] = &["git-config-global", "user-config", "symlink-outside"];

/// A finding as a sandboxed run gets it: an `unknown` program or piece of code the
/// policy read (not one it failed to read) runs unattended with a checkpoint, the
/// sandbox holding what it does; a decision a policy file set outright stays.
pub fn trust(f: &mut Finding, unknown_default: Action) {
    let signals =
        f.rule == "host-control" && matches!(f.program.as_str(), "kill" | "pkill" | "killall");
    if f.category == Category::HostEscapeRisk
        && (CONTAINED_HOST_RULES.contains(&f.rule.as_str()) || signals)
    {
        f.action = Action::AllowWithCheckpoint;
        f.reason = format!("{} (contained by the sandbox)", f.reason);
        return;
    }
    if f.explicit {
        return;
    }
    if f.category == Category::Unknown
        && f.action == unknown_default
        && f.action > Action::AllowWithCheckpoint
        && !NOT_READ.contains(&f.rule.as_str())
    {
        f.action = Action::AllowWithCheckpoint;
        f.reason = format!("{} (runs contained by the sandbox)", f.reason);
    }
}

fn under(path: &str, dir: &str) -> bool {
    let dir = dir.trim_end_matches('/');
    path == dir || path.strip_prefix(dir).is_some_and(|r| r.starts_with('/')) || dir.is_empty()
}

/// The sandbox's view of the host, for the paths a line names.
#[derive(Debug, Clone)]
pub struct View {
    read_only: Vec<String>,
    hidden: Vec<String>,
    /// The secrets of the home directory, as names below it (`.ssh`, `.aws`).
    home_secrets: Vec<String>,
}

impl View {
    pub fn new(cfg: &SandboxConfig) -> View {
        let abs = |p: &&String| p.starts_with('/');
        View {
            read_only: cfg.read_only_paths.iter().filter(abs).cloned().collect(),
            hidden: SECRET_PATHS
                .iter()
                .map(|s| s.to_string())
                .chain(cfg.hidden_paths.iter().cloned())
                .filter(|p| p.starts_with('/'))
                .collect(),
            home_secrets: SECRET_PATHS
                .iter()
                .map(|s| s.to_string())
                .chain(cfg.hidden_paths.iter().cloned())
                .filter_map(|p| p.strip_prefix("~/").map(str::to_string))
                .collect(),
        }
    }

    /// True if the word or path names a secret the sandbox hides: below a hidden
    /// path, or a home secret (`.ssh`, `.aws/credentials`) anywhere in it (`~/.ssh`,
    /// `$HOME/.ssh`, `/root/.ssh`, `~user/.ssh`), or a process's environment.
    pub fn names_secret(&self, word: &str) -> bool {
        self.hidden.iter().any(|h| under(word, h))
            || self.home_secrets.iter().any(|s| {
                word.match_indices(s.as_str()).any(|(i, _)| {
                    let before = word[..i].ends_with('/');
                    let after = word[i + s.len()..].chars().next();
                    before && after.is_none_or(|c| c == '/')
                })
            })
            || word.ends_with("/environ")
    }

    /// Why the sandbox contains `path` (absolute, normalized), or `None` when it does not
    /// show it (a hidden secret, a host path outside what it shows).
    pub fn contains(&self, path: &str) -> Option<&'static str> {
        if self.hidden.iter().any(|h| under(path, h)) {
            return None;
        }
        if PRIVATE_DIRS.iter().any(|d| under(path, d)) {
            return Some("is private to the run in the sandbox");
        }
        if self.read_only.iter().any(|d| under(path, d)) {
            return Some(READ_ONLY);
        }
        None
    }
}

/// avfs's own files on the host: its home (policies, approvals, registry), the vault
/// file. A line that names one is denied, sandboxed or not: a run that could write them
/// could approve itself or rewrite history behind the audit.
#[derive(Debug, Clone, Default)]
pub struct Protected {
    /// `$AVFS_HOME`, as a path.
    pub home: Option<PathBuf>,
    /// The vault files the run's workspace lives in.
    pub vaults: Vec<PathBuf>,
    /// The workspace's host path (below the home by default: not protected).
    pub workspace: Option<PathBuf>,
}

impl Protected {
    /// Why the absolute normalized `path` is avfs's own, if it is. The ancestors of the
    /// workspace (`ls ..`) and the workspaces' directory itself are not.
    pub fn covers(&self, path: &str) -> Option<String> {
        for v in &self.vaults {
            let v = v.to_string_lossy();
            if path.starts_with(v.as_ref()) {
                return Some(format!("{path} is the vault file"));
            }
        }
        let home = self.home.as_ref()?.to_string_lossy().into_owned();
        if !under(path, &home) {
            return None;
        }
        if let Some(ws) = &self.workspace {
            let ws = ws.to_string_lossy();
            let ancestor = under(&ws, path);
            let workspaces = ws
                .rsplit_once('/')
                .map(|(parent, _)| under(path, parent) && parent.len() > home.len())
                .unwrap_or(false);
            if ancestor || workspaces {
                return None;
            }
        }
        Some(format!("{path} is in avfs's own directory ({home})"))
    }

    /// Why the text of a line names avfs's own files, if it does: `$AVFS_HOME`, a file
    /// named `*.avfs` (or its `-wal`/`-shm`/`-journal`), the home's path or the vault's
    /// path spelled out anywhere (in an SQL string, a script, a URI).
    pub fn named_in(&self, text: &str) -> Option<String> {
        if text.contains("AVFS_HOME") {
            return Some("the line names $AVFS_HOME, avfs's own directory".into());
        }
        let b = text.as_bytes();
        for (i, _) in text.match_indices(".avfs") {
            // `t.avfs`, `*.avfs`, `t.avfs-wal`, not `user.avfs.tag` or `.avfsignore`.
            let next = b.get(i + 5).copied();
            let ends = match next {
                None => true,
                Some(c) => c.is_ascii_whitespace() || b"'\"-/;)|&<>?,`".contains(&c),
            };
            let before_ok =
                i > 0 && (b[i - 1].is_ascii_alphanumeric() || b"_*}".contains(&b[i - 1]));
            if ends && before_ok {
                return Some("the line names a vault file (*.avfs)".into());
            }
        }
        let mut rest = text.to_string();
        if let Some(ws) = &self.workspace {
            rest = rest.replace(ws.to_string_lossy().as_ref(), "");
        }
        for v in &self.vaults {
            if rest.contains(v.to_string_lossy().as_ref()) {
                return Some(format!("the line names the vault file {}", v.display()));
            }
        }
        if let Some(home) = &self.home {
            let h = home.to_string_lossy();
            if h.len() > 1 && rest.contains(h.as_ref()) {
                return Some(format!("the line names avfs's own directory {h}"));
            }
        }
        None
    }
}

/// The protected set for a run of a workspace at `ws` in `vault`, with avfs's home.
pub fn protected(home: &Path, vault: Option<&Path>, ws: Option<&Path>) -> Protected {
    Protected {
        home: Some(home.to_path_buf()),
        vaults: vault.map(Path::to_path_buf).into_iter().collect(),
        workspace: ws.map(Path::to_path_buf),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_view_shows_system_dirs_and_hides_secrets() {
        let v = View::new(&SandboxConfig::default());
        assert!(v.contains("/usr/bin/ls").is_some());
        assert!(v.contains("/etc/os-release").is_some());
        assert!(v.contains("/tmp/x").is_some());
        assert!(v.contains("/etc/shadow").is_none());
        assert!(v.contains("/etc/ssh/ssh_host_rsa_key").is_none());
        assert!(v.contains("/root/.bashrc").is_none());
        assert!(v.contains("/srv/x").is_none());
        assert!(v.contains("/usrx").is_none());
    }

    #[test]
    fn avfs_files_are_protected() {
        let p = protected(
            Path::new("/h/.avfs"),
            Some(Path::new("/h/.avfs/vaults/t.avfs")),
            Some(Path::new("/h/.avfs/ws/t")),
        );
        assert!(p.covers("/h/.avfs/policies/t.toml").is_some());
        assert!(p.covers("/h/.avfs/vaults/t.avfs-wal").is_some());
        assert!(p.covers("/h/.avfs/ws/t/a.txt").is_none());
        assert!(p.covers("/h/.avfs/ws").is_none());
        assert!(p.covers("/h/.avfs").is_none());
        assert!(p.covers("/h/.avfs/ws/other/a").is_none());
        assert!(
            p.named_in("sqlite3 x.db \"ATTACH '/h/.avfs/vaults/t.avfs' AS v\"")
                .is_some()
        );
        assert!(p.named_in("cat t.avfs").is_some());
        assert!(p.named_in("cp x.avfs-wal y").is_some());
        assert!(p.named_in("echo $AVFS_HOME").is_some());
        assert!(p.named_in("cat /h/.avfs/ws/t/a.txt").is_none());
        assert!(p.named_in("cat .avfsignore").is_none());
        assert!(p.named_in("echo x >> .avfsignore").is_none());
        assert!(p.named_in("setfattr -n user.avfs.tag.x a").is_none());
        assert!(p.named_in("cat /h/.avfs/policies/t.toml").is_some());
    }
}
