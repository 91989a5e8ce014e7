//! The sandbox's settings: what a confined run may read, what is hidden, which variables
//! it keeps. Built-in defaults overlaid with every policy file's `[sandbox]` table.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Read-only host paths by default. `~` is the home directory of the user running avfs;
/// `$PATH` stands for every directory on `$PATH`, `$NAME` or `$NAME/sub` for the
/// directory an environment variable names (a toolchain moved with `CARGO_HOME` or
/// `RUSTUP_HOME`); neither is ever `/`, the home directory itself or a directory above it.
pub const DEFAULT_READ_ONLY_PATHS: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/run/systemd/resolve",
    "~/.cargo/bin",
    "~/.rustup",
    "$CARGO_HOME/bin",
    "$RUSTUP_HOME",
    "~/.gitconfig",
    "~/.config/git",
    "~/.pyenv",
    "~/.nvm",
    "$PYENV_ROOT",
    "$RBENV_ROOT",
    "$NVM_DIR",
    "$ASDF_DATA_DIR",
    "$VOLTA_HOME",
    "~/.local/bin",
    "$PATH",
];

/// Package managers' caches, writable in the sandbox at the tools' default places. Each
/// is a directory per vault under `$AVFS_HOME/caches/<vault>/`, outside the history
/// (never checkpointed, diffed or ingested) and removed with the vault; where the host
/// has the directory, the run sees the host's content below its own (an overlay whose
/// lower is the host's directory, read-only), so what the host already downloaded is
/// there and what the run adds stays the vault's.
pub const DEFAULT_WRITABLE_CACHES: &[&str] = &[
    "~/.npm",
    "~/.cache/yarn",
    "~/.cache/pnpm",
    "~/.local/share/pnpm",
    "~/.cache/pip",
    "~/.cache/uv",
    "~/.cargo/registry",
    "~/.cargo/git",
    "$CARGO_HOME/registry",
    "$CARGO_HOME/git",
    "~/go/pkg/mod",
    "~/.cache/go-build",
];

/// Secrets that are hidden (an empty directory, or a file that cannot be opened, in their
/// place) even when
/// a read-only path above them is visible. Always applied; `hidden_paths` adds to it.
pub const SECRET_PATHS: &[&str] = &[
    "~/.ssh",
    "~/.gnupg",
    "~/.aws",
    "~/.azure",
    "~/.kube",
    "~/.docker",
    "~/.netrc",
    "~/.git-credentials",
    "~/.npmrc",
    "~/.pypirc",
    "~/.cargo/credentials",
    "~/.cargo/credentials.toml",
    "$CARGO_HOME/credentials",
    "$CARGO_HOME/credentials.toml",
    "~/.config/gcloud",
    "~/.config/gh",
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/ssh",
    "/etc/ssl/private",
    "/etc/letsencrypt",
    "/etc/krb5.keytab",
    "/etc/wireguard",
    "/etc/NetworkManager/system-connections",
];

/// Parts of /proc that are read-only in the sandbox (bound from the host's /proc: a
/// sysctl shows the values of the namespace that reads it, whichever mount it is read
/// through).
pub const PROC_READ_ONLY: &[&str] = &["/proc/sys", "/proc/sysrq-trigger", "/proc/fs"];

/// Files of /proc that cannot be read in the sandbox.
pub const PROC_MASKED: &[&str] = &[
    "/proc/kcore",
    "/proc/keys",
    "/proc/timer_list",
    "/proc/sched_debug",
    "/proc/latency_stats",
];

/// The capabilities a command run by root keeps in the sandbox, each because a build or
/// package manager run as root needs it *inside the run*, where the host is not
/// writable (every host mount the run sees is read-only, `nosuid,nodev`) and the run
/// has `no_new_privs`:
/// - CAP_CHOWN: `tar x`, `cp -a`, npm and pip as root keep the owners of what they
///   unpack in the workspace, /tmp or a cache;
/// - CAP_DAC_OVERRIDE: a root build writes files of the history that other users own;
/// - CAP_FOWNER: `chmod`, `touch -d` and `utimes` on such files (tar keeps times);
/// - CAP_SETUID, CAP_SETGID: tools that drop to another user for a step (npm's
///   lifecycle scripts, `su`, `setpriv`) inside the run's own namespaces;
/// - CAP_KILL: signalling those processes of other users, all inside the run;
/// - CAP_NET_BIND_SERVICE: a test server on a low port of the run's own loopback.
///
/// CAP_FSETID is dropped: without it a write by another user clears setuid/setgid
/// bits and chmod cannot set setgid for another group (seccomp refuses the rest: see
/// `confine`); CAP_SETFCAP, CAP_SYS_ADMIN, CAP_MKNOD and every other one go too.
pub const ROOT_CAPS: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FOWNER",
    "CAP_SETUID",
    "CAP_SETGID",
    "CAP_KILL",
    "CAP_NET_BIND_SERVICE",
];

/// Environment variables passed into the sandbox by default (`*` is a wildcard).
pub const DEFAULT_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "PYENV_ROOT",
    "PYENV_VERSION",
    "NVM_DIR",
    "GOROOT",
    "JAVA_HOME",
];

/// The `[sandbox]` table of a policy file. Every key is optional.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxFile {
    default: Option<bool>,
    required: Option<bool>,
    network: Option<bool>,
    read_only_paths: Option<Vec<String>>,
    #[serde(default)]
    extra_read_only_paths: Vec<String>,
    #[serde(default)]
    hidden_paths: Vec<String>,
    #[serde(default)]
    env: Vec<String>,
    writable_caches: Option<Vec<String>>,
    #[serde(default)]
    extra_writable_caches: Vec<String>,
    /// Processes and threads of a run at most (0: no limit).
    pids_limit: Option<u64>,
    /// Size of the run's private /tmp (`1G`, `512M`).
    tmp_size: Option<String>,
    /// Size of the run's private /dev/shm.
    shm_size: Option<String>,
    /// Memory of a run at most (`4G`; `0`: no limit), where the host lets avfs set it.
    memory: Option<String>,
}

/// The effective sandbox settings: built-in values overlaid with every policy file.
#[derive(Debug, Clone, Serialize)]
pub struct SandboxConfig {
    /// `avfs exec` runs sandboxed unless `--no-sandbox`.
    pub default: bool,
    /// Every `avfs exec` runs sandboxed; `--no-sandbox` is refused.
    pub required: bool,
    /// Every sandboxed command gets the host's network.
    pub network: bool,
    /// Host paths visible read-only (before `~` and `$PATH` are expanded).
    pub read_only_paths: Vec<String>,
    /// Hidden even below a visible path, in addition to the built-in secrets.
    pub hidden_paths: Vec<String>,
    /// Extra environment variable names (globs) passed in, besides the built-in ones.
    pub env: Vec<String>,
    /// Host paths (before `~` and `$NAME` are expanded) where the run finds a writable
    /// cache of the vault's own (`DEFAULT_WRITABLE_CACHES`).
    pub writable_caches: Vec<String>,
    /// The limits of a run (`avfs exec` flags override them).
    pub limits: super::limits::Limits,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            default: true,
            required: false,
            network: false,
            read_only_paths: DEFAULT_READ_ONLY_PATHS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            hidden_paths: Vec::new(),
            env: Vec::new(),
            writable_caches: DEFAULT_WRITABLE_CACHES
                .iter()
                .map(|s| s.to_string())
                .collect(),
            limits: super::limits::Limits::default(),
        }
    }
}

fn check_path_entry(file: &Path, key: &str, e: &str, allow_path_var: bool) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::InvalidArgument(
            file.display().to_string(),
            format!("[sandbox] {key}: {e:?} {why}"),
        ))
    };
    if e == "$PATH" {
        return if allow_path_var {
            Ok(())
        } else {
            bad("is not allowed here")
        };
    }
    if let Some(var) = e.strip_prefix('$') {
        let name = var.split('/').next().unwrap_or_default();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return bad("must name an environment variable: $NAME or $NAME/PATH");
        }
    } else if !(e.starts_with('/') || e == "~" || e.starts_with("~/")) {
        return bad("must be an absolute path, ~, ~/PATH, $NAME or $NAME/PATH");
    }
    if e.split('/').any(|c| c == "..") {
        return bad("must not contain ..");
    }
    Ok(())
}

impl SandboxConfig {
    /// Overlays one file's `[sandbox]` table. Later files override earlier ones key by
    /// key, lists of extras accumulate, and `required` once set stays set (a fork's or a
    /// vault's file cannot loosen what the user-wide file requires, nor the other way).
    pub fn merge(&mut self, file: &Path, f: SandboxFile) -> Result<()> {
        for e in f.read_only_paths.iter().flatten() {
            check_path_entry(file, "read_only_paths", e, true)?;
        }
        for e in &f.extra_read_only_paths {
            check_path_entry(file, "extra_read_only_paths", e, true)?;
        }
        for e in &f.hidden_paths {
            check_path_entry(file, "hidden_paths", e, false)?;
        }
        for e in f.writable_caches.iter().flatten() {
            check_path_entry(file, "writable_caches", e, false)?;
        }
        for e in &f.extra_writable_caches {
            check_path_entry(file, "extra_writable_caches", e, false)?;
        }
        let size = |key: &str, v: &Option<String>| -> Result<Option<u64>> {
            v.as_deref()
                .map(|s| {
                    crate::util::parse_size(s).map_err(|e| {
                        Error::InvalidArgument(
                            file.display().to_string(),
                            format!("[sandbox] {key}: {e}"),
                        )
                    })
                })
                .transpose()
        };
        let tmp = size("tmp_size", &f.tmp_size)?;
        let shm = size("shm_size", &f.shm_size)?;
        if tmp == Some(0) || shm == Some(0) {
            return Err(Error::InvalidArgument(
                file.display().to_string(),
                "[sandbox] tmp_size and shm_size take a size above 0 (like 512M)".into(),
            ));
        }
        let memory = size("memory", &f.memory)?;
        for e in &f.env {
            if e.is_empty() || e.contains('=') {
                return Err(Error::InvalidArgument(
                    file.display().to_string(),
                    format!("[sandbox] env: {e:?} is not a variable name"),
                ));
            }
        }
        if let Some(d) = f.default {
            self.default = d;
        }
        if f.required == Some(true) {
            self.required = true;
        }
        if let Some(n) = f.network {
            self.network = n;
        }
        if let Some(list) = f.read_only_paths {
            self.read_only_paths = list;
        }
        self.read_only_paths.extend(f.extra_read_only_paths);
        self.hidden_paths.extend(f.hidden_paths);
        self.env.extend(f.env);
        if let Some(list) = f.writable_caches {
            self.writable_caches = list;
        }
        self.writable_caches.extend(f.extra_writable_caches);
        if let Some(n) = f.pids_limit {
            self.limits.pids = (n > 0).then_some(n);
        }
        if let Some(b) = tmp {
            self.limits.tmp_bytes = b;
        }
        if let Some(b) = shm {
            self.limits.shm_bytes = b;
        }
        if let Some(b) = memory {
            self.limits.memory_bytes = (b > 0).then_some(b);
        }
        Ok(())
    }
}

/// What the sandbox of one run was: recorded in the envelope (and so the audit log).
#[derive(Debug, Clone, Serialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct SandboxInfo {
    /// The kernel confined the command (namespaces, Landlock, seccomp: docs/exec.md).
    pub enforced: bool,
    /// How: "namespaces+landlock+seccomp" (Landlock's ABI version appended), or "none".
    pub mechanism: String,
    /// The command could reach the network (always true for a run without the sandbox).
    pub network: bool,
    /// Why a sandboxed command got the network: `policy`, `approval ID` or `rule NAME`.
    pub network_granted_by: Option<String>,
    /// Where the command could write: the mountpoint, `/tmp` and `/dev/shm` in the
    /// sandbox; `/` (whatever the user may write) without it; empty when nothing ran.
    pub writable_paths: Vec<String>,
    /// Host paths the sandbox showed read-only.
    pub read_only_paths: Vec<String>,
    /// Paths hidden below them (secrets, the vault).
    pub hidden_paths: Vec<String>,
    /// The writable package caches of the vault, at the paths the run sees them;
    /// absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub writable_caches: Vec<String>,
    /// The limits in force; absent when nothing ran sandboxed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<super::limits::LimitsInfo>,
}

impl SandboxInfo {
    /// Nothing ran (denied, waiting for approval).
    pub fn nothing_ran() -> SandboxInfo {
        SandboxInfo {
            enforced: false,
            mechanism: "none".into(),
            network: false,
            network_granted_by: None,
            writable_paths: Vec::new(),
            read_only_paths: Vec::new(),
            hidden_paths: Vec::new(),
            writable_caches: Vec::new(),
            limits: None,
        }
    }

    /// Ran with the user's full rights.
    pub fn unenforced() -> SandboxInfo {
        SandboxInfo {
            enforced: false,
            mechanism: "none".into(),
            network: true,
            network_granted_by: None,
            writable_paths: vec!["/".into()],
            read_only_paths: Vec::new(),
            hidden_paths: Vec::new(),
            writable_caches: Vec::new(),
            limits: None,
        }
    }
}

/// A path without `.` components and trailing slashes (never `..`: entries are checked).
pub(crate) fn clean(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        if let Component::Normal(n) = c {
            out.push(n);
        }
    }
    out
}

/// `inner` is `outer` or below it.
pub(crate) fn under(inner: &Path, outer: &Path) -> bool {
    inner.starts_with(outer)
}

/// Looks up a host environment variable (`std::env::var_os` outside tests).
pub type HostVar<'a> = &'a dyn Fn(&str) -> Option<OsString>;

/// Expands one list entry to host paths.
pub(crate) fn expand(entry: &str, home: Option<&Path>, var: HostVar) -> Vec<PathBuf> {
    // A directory named by the environment is shown only when it is absolute, not `/`,
    // and neither the home directory nor a directory that contains it.
    let acceptable =
        |d: &Path| d.is_absolute() && d != Path::new("/") && home.is_none_or(|h| !under(h, d));
    if entry == "$PATH" {
        let Some(pv) = var("PATH") else {
            return Vec::new();
        };
        return std::env::split_paths(&pv)
            .filter(|d| d.is_absolute())
            .map(|d| clean(&d))
            // A version manager's shim (pyenv's `shims/python3`) runs the manager's own
            // scripts and the versions it installed, elsewhere in its tree: the tree is
            // shown with the PATH entry, or the command fails in the sandbox (exit 127)
            // whenever `~` is not where the tree is (`HOME` set elsewhere).
            .flat_map(|d| {
                let tree = manager_tree(&d);
                std::iter::once(d).chain(tree)
            })
            .filter(|d| acceptable(d))
            .collect();
    }
    if let Some(rest) = entry.strip_prefix('$') {
        let (name, sub) = rest.split_once('/').unwrap_or((rest, ""));
        let Some(dir) = var(name).map(PathBuf::from).filter(|d| d.is_absolute()) else {
            return Vec::new();
        };
        let dir = clean(&dir);
        if !acceptable(&dir) || sub.split('/').any(|c| c == "..") {
            return Vec::new();
        }
        return vec![clean(&dir.join(sub))];
    }
    if entry == "~" || entry.starts_with("~/") {
        return match home {
            Some(h) => vec![clean(
                &h.join(entry.trim_start_matches('~').trim_start_matches('/')),
            )],
            None => Vec::new(),
        };
    }
    vec![clean(Path::new(entry))]
}

/// Directories of version managers whose shims and `bin` directories on `$PATH` need the
/// rest of their tree (the manager's scripts, the versions, its settings).
const MANAGER_TREES: &[&str] = &[
    ".pyenv",
    ".rbenv",
    ".nodenv",
    ".goenv",
    ".jenv",
    ".plenv",
    ".phpenv",
    ".asdf",
    ".nvm",
    ".volta",
    ".fnm",
    ".sdkman",
    ".local/share/mise",
    ".local/share/fnm",
];

/// The version manager's tree a `$PATH` directory lies in (`/root/.pyenv` for
/// `/root/.pyenv/plugins/pyenv-virtualenv/shims`), if any.
fn manager_tree(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .skip(1)
        .find(|a| {
            MANAGER_TREES.iter().any(|t| {
                let t = Path::new(t);
                a.ends_with(t) && a.components().count() > t.components().count()
            })
        })
        .map(Path::to_path_buf)
}

fn glob(pat: &str, name: &str) -> bool {
    match pat.split_once('*') {
        None => pat == name,
        Some((pre, post)) => {
            name.len() >= pre.len() + post.len() && name.starts_with(pre) && name.ends_with(post)
        }
    }
}

/// The sandboxed command's environment: the host's variables whose names are allowed
/// (built-in list plus `env` of the policy), then `fixed` (the `AVFS_*` variables and
/// `--env`), which win.
pub fn environment(
    config: &SandboxConfig,
    host: impl Iterator<Item = (OsString, OsString)>,
    fixed: &[(String, String)],
) -> Vec<(String, String)> {
    let allowed = |k: &str| {
        DEFAULT_ENV
            .iter()
            .copied()
            .chain(config.env.iter().map(String::as_str))
            .any(|p| glob(p, k))
    };
    let mut out: Vec<(String, String)> = host
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| allowed(k) && !fixed.iter().any(|(f, _)| f == k))
        .collect();
    out.sort();
    out.extend(fixed.iter().cloned());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion_never_shows_home_or_root_through_path() {
        let home = Path::new("/home/u");
        let pv =
            std::ffi::OsStr::new("/usr/bin:/:/home/u:/home:relative:/home/u/.cargo/bin:/opt/x/");
        let got = expand("$PATH", Some(home), &|k| (k == "PATH").then(|| pv.into()));
        assert_eq!(
            got,
            [
                PathBuf::from("/usr/bin"),
                PathBuf::from("/home/u/.cargo/bin"),
                PathBuf::from("/opt/x")
            ]
        );
        let none = &|_: &str| None;
        assert_eq!(
            expand("~/.rustup", Some(home), none),
            [PathBuf::from("/home/u/.rustup")]
        );
        assert_eq!(expand("~", Some(home), none), [PathBuf::from("/home/u")]);
        assert!(expand("~/.rustup", None, none).is_empty());
    }

    #[test]
    fn a_version_managers_path_entry_shows_its_tree() {
        let home = Path::new("/home/u");
        let pv = "/opt/pyenv/shims:/home/u/.pyenv/plugins/pyenv-virtualenv/shims:/home/u/.nvm/versions/node/v20/bin:/.pyenv/shims:/usr/bin";
        let got = expand("$PATH", Some(home), &|k| (k == "PATH").then(|| pv.into()));
        assert_eq!(
            got,
            [
                PathBuf::from("/opt/pyenv/shims"),
                PathBuf::from("/home/u/.pyenv/plugins/pyenv-virtualenv/shims"),
                PathBuf::from("/home/u/.pyenv"),
                PathBuf::from("/home/u/.nvm/versions/node/v20/bin"),
                PathBuf::from("/home/u/.nvm"),
                PathBuf::from("/.pyenv/shims"),
                PathBuf::from("/.pyenv"),
                PathBuf::from("/usr/bin"),
            ]
        );
    }

    #[test]
    fn variables_name_a_toolchain_but_never_home_or_root() {
        let home = Path::new("/home/u");
        let vars = |k: &str| -> Option<OsString> {
            match k {
                "CARGO_HOME" => Some("/opt/cargo/".into()),
                "RUSTUP_HOME" => Some("/home".into()),
                "ROOTED" => Some("/".into()),
                "REL" => Some("rel/dir".into()),
                "INSIDE" => Some("/home/u/tools".into()),
                _ => None,
            }
        };
        let got = |e: &str| expand(e, Some(home), &vars);
        assert_eq!(got("$CARGO_HOME/bin"), [PathBuf::from("/opt/cargo/bin")]);
        assert_eq!(got("$CARGO_HOME"), [PathBuf::from("/opt/cargo")]);
        assert_eq!(got("$INSIDE"), [PathBuf::from("/home/u/tools")]);
        for hidden in [
            "$RUSTUP_HOME",
            "$ROOTED/x",
            "$REL",
            "$UNSET/bin",
            "$CARGO_HOME/../x",
        ] {
            assert!(got(hidden).is_empty(), "{hidden}");
        }
    }

    #[test]
    fn policy_entries_are_checked() {
        let f = Path::new("p.toml");
        let mut c = SandboxConfig::default();
        for bad in ["relative", "/a/../b", "~user/x"] {
            let sf = SandboxFile {
                extra_read_only_paths: vec![bad.into()],
                ..Default::default()
            };
            assert!(c.merge(f, sf).is_err(), "{bad}");
        }
        let sf = SandboxFile {
            hidden_paths: vec!["$PATH".into()],
            ..Default::default()
        };
        assert!(c.merge(f, sf).is_err());
        let sf = SandboxFile {
            env: vec!["A=B".into()],
            ..Default::default()
        };
        assert!(c.merge(f, sf).is_err());
        let sf = SandboxFile {
            required: Some(true),
            default: Some(false),
            extra_read_only_paths: vec!["/srv".into()],
            ..Default::default()
        };
        c.merge(f, sf).unwrap();
        let sf = SandboxFile {
            required: Some(false),
            ..Default::default()
        };
        c.merge(f, sf).unwrap();
        assert!(c.required, "a later file cannot unset required");
        assert!(c.read_only_paths.contains(&"/srv".to_string()));
        assert!(c.read_only_paths.contains(&"/usr".to_string()));
    }

    #[test]
    fn limits_and_caches_come_from_the_policy() {
        let f = Path::new("p.toml");
        let mut c = SandboxConfig::default();
        assert_eq!(c.limits.pids, Some(super::super::limits::DEFAULT_PIDS));
        assert!(c.writable_caches.contains(&"~/.npm".to_string()));
        let parse = |t: &str| toml::from_str::<SandboxFile>(t).unwrap();
        c.merge(
            f,
            parse("pids_limit = 0\ntmp_size = \"8M\"\nmemory = \"1G\"\nwritable_caches = [\"~/.m2\"]\n"),
        )
        .unwrap();
        assert_eq!(c.limits.pids, None, "0 is no limit");
        assert_eq!(c.limits.tmp_bytes, 8 << 20);
        assert_eq!(c.limits.memory_bytes, Some(1 << 30));
        assert_eq!(c.writable_caches, ["~/.m2"]);
        for bad in [
            "tmp_size = \"0\"",
            "shm_size = \"lots\"",
            "writable_caches = [\"relative\"]",
        ] {
            assert!(c.merge(f, parse(bad)).is_err(), "{bad}");
        }
        let given = crate::sandbox::limits::LimitOverrides {
            pids: Some(64),
            shm_bytes: Some(1 << 20),
            ..Default::default()
        };
        let l = given.apply(c.limits);
        assert_eq!(
            (l.pids, l.shm_bytes, l.tmp_bytes),
            (Some(64), 1 << 20, 8 << 20)
        );
    }

    #[test]
    fn environment_is_an_allow_list() {
        let mut c = SandboxConfig::default();
        c.env.push("MY_*".into());
        let host = [
            ("PATH", "/usr/bin"),
            ("LC_ALL", "C"),
            ("AWS_SECRET_ACCESS_KEY", "x"),
            ("MY_TOOL", "1"),
            ("AVFS_HOME", "/h"),
            ("HOME", "/root"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let fixed = vec![
            ("AVFS_EXEC_ID".to_string(), "ex-1".to_string()),
            ("HOME".to_string(), "/elsewhere".to_string()),
        ];
        let env = environment(&c, host.into_iter(), &fixed);
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["LC_ALL", "MY_TOOL", "PATH", "AVFS_EXEC_ID", "HOME"]);
        assert_eq!(env.last().unwrap().1, "/elsewhere");
    }
}
