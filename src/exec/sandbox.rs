//! The enforced boundary: `avfs exec --sandbox` runs the command under bubblewrap
//! (`bwrap`), so the kernel, not only the policy, keeps it inside the workspace.
//!
//! Inside the sandbox the mounted workspace (at the same path as outside, so the
//! envelope's paths and the `AVFS_*` variables stay right), a private `/tmp` and a
//! private `/dev/shm` are the only writable places. A configurable list of host paths is
//! visible read-only (system directories and toolchains by default); everything else on
//! the host is absent, and known secrets (`~/.ssh`, cloud credentials, the vault files)
//! are hidden even below a visible path. The command gets new PID, IPC, UTS and cgroup
//! namespaces and, unless the decision grants network, a new network namespace with only
//! a loopback interface of its own. Its environment is reduced to an allow-list plus the
//! `AVFS_*` variables and `--env`.
//!
//! avfs's own binary runs as PID 1 of the sandbox (`init_main`): it starts the command
//! in a session of its own (no controlling terminal), passes SIGTERM from the runner's
//! timeout on to every process of the sandbox, reports the command's exact exit status
//! and whether processes were left running on a pipe (fd 3), and ends those processes.
//! When it exits the kernel kills whatever is left in the PID namespace, so nothing the
//! command started (also with `setsid`, `nohup` or a double fork) outlives `avfs exec`.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The Debian (and most distributions') package that provides `bwrap`.
pub const BWRAP_PACKAGE: &str = "bubblewrap";

/// First argument of avfs's own binary when it runs as the sandbox's PID 1.
pub const INIT_ARG: &str = "__avfs-sandbox-init";

/// File descriptor the sandbox init writes its report to.
pub const REPORT_FD: i32 = 3;

/// Read-only host paths by default. `~` is the home directory of the user running avfs;
/// `$PATH` stands for every directory on `$PATH` (but never `/`, the home directory
/// itself or a directory above it).
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
    "~/.pyenv",
    "~/.nvm",
    "~/.local/bin",
    "$PATH",
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
const PROC_READ_ONLY: &[&str] = &["/proc/sys", "/proc/sysrq-trigger", "/proc/fs"];

/// Files of /proc that cannot be read in the sandbox.
const PROC_MASKED: &[&str] = &[
    "/proc/kcore",
    "/proc/keys",
    "/proc/timer_list",
    "/proc/sched_debug",
    "/proc/latency_stats",
];

/// The capabilities a command run by root keeps in the sandbox (bwrap also sets
/// `no_new_privs`, and binds everything `nosuid,nodev`).
pub const ROOT_CAPS: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FOWNER",
    "CAP_FSETID",
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
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            default: false,
            required: false,
            network: false,
            read_only_paths: DEFAULT_READ_ONLY_PATHS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            hidden_paths: Vec::new(),
            env: Vec::new(),
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
    if !(e.starts_with('/') || e == "~" || e.starts_with("~/")) {
        return bad("must be an absolute path, ~ or ~/PATH");
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
        Ok(())
    }
}

/// What the sandbox of one run was: recorded in the envelope (and so the audit log).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SandboxInfo {
    /// The command ran under bubblewrap.
    pub enforced: bool,
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
}

impl SandboxInfo {
    /// Nothing ran (denied, waiting for approval).
    pub fn nothing_ran() -> SandboxInfo {
        SandboxInfo {
            enforced: false,
            network: false,
            network_granted_by: None,
            writable_paths: Vec::new(),
            read_only_paths: Vec::new(),
            hidden_paths: Vec::new(),
        }
    }

    /// Ran with the user's full rights.
    pub fn unenforced() -> SandboxInfo {
        SandboxInfo {
            enforced: false,
            network: true,
            network_granted_by: None,
            writable_paths: vec!["/".into()],
            read_only_paths: Vec::new(),
            hidden_paths: Vec::new(),
        }
    }
}

/// `bwrap`: `$AVFS_BWRAP` when set, else the first one on `$PATH`. Its absence is an
/// error that names the package; avfs never falls back to running unsandboxed.
pub fn find_bwrap() -> Result<PathBuf> {
    let missing = |detail: String| {
        Error::SandboxUnavailable(format!(
            "{detail}; install the {BWRAP_PACKAGE} package (Debian/Ubuntu: apt-get install {BWRAP_PACKAGE}) \
             or run without --sandbox"
        ))
    };
    if let Some(p) = std::env::var_os("AVFS_BWRAP").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if is_executable(&p) {
            Ok(p)
        } else {
            Err(missing(format!(
                "AVFS_BWRAP={} is not an executable bwrap",
                p.display()
            )))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let p = dir.join("bwrap");
        if dir.is_absolute() && is_executable(&p) {
            return Ok(p);
        }
    }
    Err(missing(
        "the sandbox needs bubblewrap, but bwrap is not on $PATH".into(),
    ))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A path without `.` components and trailing slashes (never `..`: entries are checked).
fn clean(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        if let Component::Normal(n) = c {
            out.push(n);
        }
    }
    out
}

/// `inner` is `outer` or below it.
fn under(inner: &Path, outer: &Path) -> bool {
    inner.starts_with(outer)
}

/// Expands one list entry to host paths.
fn expand(entry: &str, home: Option<&Path>, path_var: Option<&OsStr>) -> Vec<PathBuf> {
    if entry == "$PATH" {
        let Some(pv) = path_var else {
            return Vec::new();
        };
        return std::env::split_paths(pv)
            .filter(|d| d.is_absolute())
            .map(|d| clean(&d))
            .filter(|d| d != Path::new("/"))
            // Never the home directory, nor a directory that contains it.
            .filter(|d| home.is_none_or(|h| !under(h, d)))
            .collect();
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

/// Everything the sandbox of one run needs.
pub struct Request<'a> {
    pub config: &'a SandboxConfig,
    pub network: bool,
    pub network_granted_by: Option<String>,
    /// The workspace's mountpoint (bound writable at the same path).
    pub mountpoint: &'a Path,
    /// The command's working directory, inside the mountpoint.
    pub cwd: &'a Path,
    /// `$AVFS_HOME` and the vault file: hidden when a read-only path would show them.
    pub avfs_home: &'a Path,
    pub vault_file: &'a Path,
    /// avfs's own binary, run as the sandbox's PID 1.
    pub init: &'a Path,
    pub home: Option<&'a Path>,
    pub path_var: Option<&'a OsStr>,
}

/// The bwrap command line (everything before the command's own argv) and what it means.
#[derive(Debug)]
pub struct Plan {
    pub args: Vec<OsString>,
    pub info: SandboxInfo,
}

/// Builds the bwrap arguments for one run. The command's argv follows them.
pub fn plan(req: &Request) -> Result<Plan> {
    let mut a: Vec<OsString> = Vec::new();
    let push = |a: &mut Vec<OsString>, items: &[&OsStr]| {
        a.extend(items.iter().map(|x| x.to_os_string()));
    };
    // Read-only paths: the ones that exist, parents before children, each once. A
    // symlink (`/bin -> usr/bin`) is recreated as a symlink, and what it points to is
    // shown too (a listed link that dangles would not be what listing it means).
    let mut ro: Vec<(PathBuf, Option<PathBuf>)> = req
        .config
        .read_only_paths
        .iter()
        .flat_map(|e| expand(e, req.home, req.path_var))
        .filter_map(|p| {
            let meta = std::fs::symlink_metadata(&p).ok()?;
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&p).ok()?;
                Some((p, Some(target)))
            } else {
                Some((p, None))
            }
        })
        .collect();
    let mut dirs: Vec<PathBuf> = ro
        .iter()
        .filter(|(_, t)| t.is_none())
        .map(|(p, _)| p.clone())
        .collect();
    for (p, t) in &ro {
        if t.is_some()
            && let Ok(canon) = std::fs::canonicalize(p)
        {
            dirs.push(canon);
        }
    }
    dirs.sort();
    dirs.dedup();
    let mut shown: Vec<PathBuf> = Vec::new(); // host paths visible (bind sources)
    for d in dirs {
        if !shown.iter().any(|s| under(&d, s)) {
            shown.push(d);
        }
    }
    ro.retain(|(p, t)| t.is_some() && !shown.iter().any(|s| under(p, s)));
    ro.sort();
    ro.dedup();
    let mut binds: Vec<(PathBuf, Option<PathBuf>)> =
        shown.iter().map(|p| (p.clone(), None)).collect();
    binds.extend(ro);
    let tmp = Path::new("/tmp");
    let bind_all = |a: &mut Vec<OsString>, below_tmp: bool| {
        for (p, target) in &binds {
            if under(p, tmp) != below_tmp {
                continue;
            }
            match target {
                Some(t) => push(a, &[OsStr::new("--symlink"), t.as_os_str(), p.as_os_str()]),
                None => push(a, &[OsStr::new("--ro-bind"), p.as_os_str(), p.as_os_str()]),
            }
        }
    };
    bind_all(&mut a, false);
    push(
        &mut a,
        &[
            OsStr::new("--dev"),
            OsStr::new("/dev"),
            OsStr::new("--proc"),
            OsStr::new("/proc"),
            OsStr::new("--tmpfs"),
            OsStr::new("/tmp"),
            OsStr::new("--tmpfs"),
            OsStr::new("/dev/shm"),
        ],
    );
    // The sandbox's /proc as a container has it: sysctls and the other kernel knobs
    // read-only (root may write a 0644 sysctl without any capability, and
    // kernel.core_pattern runs a program on the host), kernel internals masked.
    for p in PROC_READ_ONLY {
        if Path::new(p).exists() {
            push(
                &mut a,
                &[OsStr::new("--ro-bind"), OsStr::new(p), OsStr::new(p)],
            );
        }
    }
    for p in PROC_MASKED {
        if Path::new(p).exists() {
            push(
                &mut a,
                &[
                    OsStr::new("--ro-bind"),
                    OsStr::new("/dev/null"),
                    OsStr::new(p),
                ],
            );
        }
    }
    bind_all(&mut a, true);
    // Secrets, the vault file and $AVFS_HOME: hidden where a visible path would show them.
    let mut hide: Vec<PathBuf> = SECRET_PATHS
        .iter()
        .map(|e| e.to_string())
        .chain(req.config.hidden_paths.iter().cloned())
        .flat_map(|e| expand(&e, req.home, None))
        .collect();
    let vault = clean(&std::path::absolute(req.vault_file).unwrap_or(req.vault_file.into()));
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut f = vault.clone().into_os_string();
        f.push(suffix);
        hide.push(PathBuf::from(f));
    }
    let avfs_home = clean(&std::path::absolute(req.avfs_home).unwrap_or(req.avfs_home.into()));
    hide.push(avfs_home.clone());
    let mut hidden: Vec<PathBuf> = Vec::new();
    let mut remount: Vec<PathBuf> = Vec::new();
    for h in hide {
        let Ok(meta) = std::fs::symlink_metadata(&h) else {
            continue;
        };
        // A secret behind a symlink is hidden where it really is.
        let (h, is_dir) = if meta.file_type().is_symlink() {
            match std::fs::canonicalize(&h) {
                Ok(c) => {
                    let d = c.is_dir();
                    (c, d)
                }
                Err(_) => continue,
            }
        } else {
            (h, meta.is_dir())
        };
        // Hidden when something visible shows it (or lies inside it: an explicitly
        // listed `~/.ssh/config` does not make `~/.ssh` visible).
        let visible = shown.iter().any(|s| under(&h, s) || under(s, &h));
        if !visible || hidden.iter().any(|x| under(&h, x)) {
            continue;
        }
        if is_dir {
            push(&mut a, &[OsStr::new("--tmpfs"), h.as_os_str()]);
            remount.push(h.clone());
        } else {
            push(
                &mut a,
                &[
                    OsStr::new("--ro-bind"),
                    OsStr::new("/dev/null"),
                    h.as_os_str(),
                ],
            );
        }
        hidden.push(h);
    }
    let init = clean(&std::path::absolute(req.init).unwrap_or(req.init.into()));
    push(
        &mut a,
        &[OsStr::new("--ro-bind"), init.as_os_str(), init.as_os_str()],
    );
    let mp = clean(req.mountpoint);
    push(
        &mut a,
        &[OsStr::new("--bind"), mp.as_os_str(), mp.as_os_str()],
    );
    for r in &remount {
        push(&mut a, &[OsStr::new("--remount-ro"), r.as_os_str()]);
    }
    push(
        &mut a,
        &[
            OsStr::new("--remount-ro"),
            OsStr::new("/dev"),
            OsStr::new("--remount-ro"),
            OsStr::new("/"),
            OsStr::new("--chdir"),
            req.cwd.as_os_str(),
            OsStr::new("--unshare-pid"),
            OsStr::new("--unshare-ipc"),
            OsStr::new("--unshare-uts"),
            OsStr::new("--unshare-cgroup-try"),
        ],
    );
    if !req.network {
        push(&mut a, &[OsStr::new("--unshare-net")]);
    }
    // Run by root, bwrap keeps every capability: CAP_SYS_ADMIN could remount the host's
    // paths writable, CAP_MKNOD make a disk's device node in the workspace (mounted
    // with `dev`), CAP_DAC_READ_SEARCH open any host file by handle. Only what builds
    // and archives need to manage file ownership inside the workspace stays. Others run
    // bwrap in a user namespace, where it drops every capability itself.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        push(&mut a, &[OsStr::new("--cap-drop"), OsStr::new("ALL")]);
        for cap in ROOT_CAPS {
            push(&mut a, &[OsStr::new("--cap-add"), OsStr::new(cap)]);
        }
    }
    push(
        &mut a,
        &[
            OsStr::new("--die-with-parent"),
            OsStr::new("--as-pid-1"),
            OsStr::new("--"),
            init.as_os_str(),
            OsStr::new(INIT_ARG),
            OsStr::new("--"),
        ],
    );
    let lossy = |p: &Path| p.to_string_lossy().into_owned();
    let info = SandboxInfo {
        enforced: true,
        network: req.network,
        network_granted_by: if req.network {
            req.network_granted_by.clone()
        } else {
            None
        },
        writable_paths: vec![lossy(&mp), "/tmp".into(), "/dev/shm".into()],
        read_only_paths: binds.iter().map(|(p, _)| lossy(p)).collect(),
        hidden_paths: hidden.iter().map(|p| lossy(p)).collect(),
    };
    Ok(Plan { args: a, info })
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

// ---------------------------------------------------------------- the sandbox's PID 1

fn report(line: &serde_json::Value) {
    let mut text = line.to_string();
    text.push('\n');
    // SAFETY: writing a buffer to our report descriptor (which may be closed: then the
    // write fails harmlessly).
    unsafe {
        libc::write(REPORT_FD, text.as_ptr().cast(), text.len());
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Reaps every exited child; returns the wait status of `pid` if it was among them.
fn reap(pid: i32) -> Option<i32> {
    let mut found = None;
    loop {
        let mut st = 0;
        // SAFETY: non-blocking waitpid for any child of ours.
        let r = unsafe { libc::waitpid(-1, &mut st, libc::WNOHANG) };
        if r <= 0 {
            return found;
        }
        if r == pid {
            found = Some(st);
        }
    }
}

/// True while a process other than us exists in the sandbox.
fn others_alive() -> bool {
    // SAFETY: signal 0 to every process we may signal in our PID namespace (PID 1, us,
    // is never included) only checks for existence.
    unsafe { libc::kill(-1, 0) == 0 }
}

fn signal_all(sig: i32) {
    // SAFETY: as PID 1 of the sandbox, -1 means every other process of the sandbox.
    unsafe {
        libc::kill(-1, sig);
    }
}

/// Waits for SIGCHLD or SIGTERM (both blocked) up to `timeout`; returns the signal.
fn wait_signal(set: &libc::sigset_t, timeout: Option<Duration>) -> Option<i32> {
    let r = match timeout {
        None => {
            // SAFETY: waits for one of the blocked signals in `set`.
            unsafe { libc::sigwaitinfo(set, std::ptr::null_mut()) }
        }
        Some(t) => {
            let ts = libc::timespec {
                tv_sec: t.as_secs() as libc::time_t,
                tv_nsec: t.subsec_nanos() as libc::c_long,
            };
            // SAFETY: as above, with a timeout.
            unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &ts) }
        }
    };
    (r > 0).then_some(r)
}

extern "C" fn ignore_signal(_: libc::c_int) {}

/// `avfs __avfs-sandbox-init -- PROGRAM ARGS...`: PID 1 of the sandbox. Runs the
/// command, passes SIGTERM on, reports on fd 3, ends what the command left behind.
pub fn init_main(args: &[OsString]) -> i32 {
    let argv: Vec<&OsString> = match args.first() {
        Some(a) if a == "--" => args[1..].iter().collect(),
        _ => args.iter().collect(),
    };
    // kill(-1, ...) below means "every other process of the sandbox" only for PID 1 of
    // a PID namespace; anywhere else it would reach every process of the user.
    if std::process::id() != 1 {
        eprintln!("avfs: {INIT_ARG} runs only as PID 1 of an avfs exec --sandbox run");
        return 126;
    }
    // SAFETY: fcntl on our own report descriptor: the command must not inherit it; and
    // not dumpable, so that the command (same uid) can neither ptrace us nor open our
    // report pipe through /proc/1/fd.
    unsafe {
        libc::fcntl(REPORT_FD, libc::F_SETFD, libc::FD_CLOEXEC);
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
    let Some((prog, rest)) = argv.split_first() else {
        eprintln!("avfs: sandbox init: no command");
        return 126;
    };
    // SIGCHLD and SIGTERM are taken with sigwaitinfo. A handler is installed as well:
    // PID 1 of a namespace never receives a signal with the default disposition from
    // outside, and bwrap passes SIGTERM on as ignored (the runner ignores it for bwrap,
    // so that a timeout reaches the command through us).
    // SAFETY: plain signal-mask and disposition calls in a single-threaded process.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::sigaddset(&mut set, libc::SIGTERM);
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = ignore_signal as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    let mut cmd = std::process::Command::new(prog);
    cmd.args(rest);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
            // A session of its own: no controlling terminal to inject input into.
            libc::setsid();
            Ok(())
        });
    }
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            eprintln!("avfs: cannot start {}: {e}", prog.to_string_lossy());
            report(&serde_json::json!({"exit_code": code, "signal": null}));
            report(&serde_json::json!({"lingering": false}));
            return code;
        }
    };
    let pid = child.id() as i32;
    drop(child);
    let status = loop {
        if let Some(st) = reap(pid) {
            break st;
        }
        match wait_signal(&set, None) {
            Some(libc::SIGTERM) => signal_all(libc::SIGTERM),
            Some(_) => {}
            None if errno() == libc::EINTR => {}
            None => std::thread::sleep(Duration::from_millis(1)),
        }
    };
    let (code, sig) = if libc::WIFSIGNALED(status) {
        (None, Some(libc::WTERMSIG(status)))
    } else {
        (Some(libc::WEXITSTATUS(status)), None)
    };
    report(&serde_json::json!({"exit_code": code, "signal": sig}));
    let _ = std::io::stdout().flush();
    // What the command left running: SIGTERM, 2 s to exit, then SIGKILL.
    reap(-1);
    let lingering = others_alive();
    if lingering {
        signal_all(libc::SIGTERM);
        let until = Instant::now() + Duration::from_secs(2);
        loop {
            reap(-1);
            if !others_alive() {
                break;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                signal_all(libc::SIGKILL);
                // SAFETY: blocking waitpid for any child until none is left.
                while unsafe { libc::waitpid(-1, std::ptr::null_mut(), 0) } > 0 {}
                break;
            }
            wait_signal(&set, Some(left.min(Duration::from_millis(50))));
        }
    }
    report(&serde_json::json!({"lingering": lingering}));
    code.unwrap_or_else(|| 128 + sig.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion_never_shows_home_or_root_through_path() {
        let home = Path::new("/home/u");
        let pv = OsStr::new("/usr/bin:/:/home/u:/home:relative:/home/u/.cargo/bin:/opt/x/");
        let got = expand("$PATH", Some(home), Some(pv));
        assert_eq!(
            got,
            [
                PathBuf::from("/usr/bin"),
                PathBuf::from("/home/u/.cargo/bin"),
                PathBuf::from("/opt/x")
            ]
        );
        assert_eq!(
            expand("~/.rustup", Some(home), None),
            [PathBuf::from("/home/u/.rustup")]
        );
        assert_eq!(expand("~", Some(home), None), [PathBuf::from("/home/u")]);
        assert!(expand("~/.rustup", None, None).is_empty());
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
