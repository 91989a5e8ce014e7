//! Where a run happens and what it may touch: the workspace at its stable path in a
//! private mount namespace, and (unless `--no-sandbox`) the sandbox around the command.
//!
//! The sandbox is the kernel's own mechanisms, no helper binary: namespaces (mount, PID,
//! IPC, UTS, network; user when not root), Landlock (the command reads only the listed
//! host paths, writes only the workspace, a private /tmp and /dev/shm, cannot signal or
//! reach abstract sockets outside the run) and seccomp (no mounts, namespaces, modules,
//! keyrings, device nodes), with capabilities dropped and `no_new_privs`; every mount it
//! sees is `nosuid,nodev`. Secrets, `$AVFS_HOME` and the vault file are hidden.

pub mod config;
pub mod confine;
pub mod init;
pub mod keeper;
pub mod setup;
mod sys;
pub mod unpin;

use std::path::{Path, PathBuf};

pub use config::{SandboxConfig, SandboxFile, SandboxInfo, environment};
pub use init::REPORT_FD;
pub use setup::{Confinement, RUN_INIT_ARG, RunPlan, View};

use config::{SECRET_PATHS, clean, expand, under};

/// Device files a confined command reads and writes in place.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
];

/// Fresh private file systems of a confined run.
const PRIVATE_DIRS: &[&str] = &["/tmp", "/dev/shm"];

/// Host paths a confined run may read besides the configured ones.
const ALWAYS_READABLE: &[&str] = &["/proc", "/sys", "/dev"];

/// What a confined run needs to know about the host.
pub struct Request<'a> {
    pub config: &'a SandboxConfig,
    pub network: bool,
    pub network_granted_by: Option<String>,
    /// The workspace's stable path.
    pub workspace: &'a Path,
    pub avfs_home: &'a Path,
    pub vault_file: &'a Path,
    pub home: Option<&'a Path>,
    /// The host's environment: `$PATH` and `$NAME` entries of the path lists.
    pub host_var: config::HostVar<'a>,
    /// Root keeps the capabilities a build needs to manage ownership in the workspace.
    pub root: bool,
}

/// The confinement of one run, and how the envelope describes it.
pub fn confinement(req: &Request) -> (Confinement, SandboxInfo) {
    let mut read_only: Vec<PathBuf> = req
        .config
        .read_only_paths
        .iter()
        .flat_map(|e| expand(e, req.home, req.host_var))
        .filter(|p| p.exists())
        .collect();
    // What a listed symlink (`/bin -> usr/bin`) points to is shown too.
    for p in read_only.clone() {
        if let Ok(c) = std::fs::canonicalize(&p)
            && c != p
        {
            read_only.push(c);
        }
    }
    read_only.sort();
    read_only.dedup();
    let shown = read_only.clone();
    let mut hidden_dirs = vec![];
    let mut hidden_files = vec![];
    let mut hide: Vec<PathBuf> = SECRET_PATHS
        .iter()
        .map(|e| e.to_string())
        .chain(req.config.hidden_paths.iter().cloned())
        .flat_map(|e| expand(&e, req.home, req.host_var))
        .collect();
    let vault = clean(&std::path::absolute(req.vault_file).unwrap_or(req.vault_file.into()));
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut f = vault.clone().into_os_string();
        f.push(suffix);
        hide.push(PathBuf::from(f));
    }
    let avfs_home = clean(&std::path::absolute(req.avfs_home).unwrap_or(req.avfs_home.into()));
    hide.push(avfs_home);
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
        // Below /tmp only what a read-only path carries into the run's own /tmp is
        // there; a path inside another hidden one is hidden.
        if (under(&h, Path::new("/tmp")) && !shown.iter().any(|s| under(&h, s)))
            || hidden_dirs.iter().any(|d: &PathBuf| under(&h, d))
        {
            continue;
        }
        if is_dir {
            hidden_dirs.push(h);
        } else {
            hidden_files.push(h);
        }
    }
    let mut readable = read_only.clone();
    readable.extend(ALWAYS_READABLE.iter().map(PathBuf::from));
    let workspace = clean(req.workspace);
    let mut writable = vec![workspace.clone()];
    writable.extend(PRIVATE_DIRS.iter().map(PathBuf::from));
    let c = Confinement {
        network: req.network,
        access: confine::Access {
            read_only: readable,
            writable: writable.clone(),
            devices: DEVICES.iter().map(PathBuf::from).collect(),
            keep_root_caps: req.root,
        },
        private_dirs: PRIVATE_DIRS.iter().map(PathBuf::from).collect(),
        hidden_dirs: hidden_dirs.clone(),
        hidden_files: hidden_files.clone(),
    };
    let lossy = |p: &Path| p.to_string_lossy().into_owned();
    let info = SandboxInfo {
        enforced: true,
        mechanism: format!(
            "namespaces+landlock(abi {})+seccomp",
            confine::landlock_abi()
        ),
        network: req.network,
        network_granted_by: if req.network {
            req.network_granted_by.clone()
        } else {
            None
        },
        writable_paths: writable.iter().map(|p| lossy(p)).collect(),
        read_only_paths: shown.iter().map(|p| lossy(p)).collect(),
        hidden_paths: hidden_dirs
            .iter()
            .chain(hidden_files.iter())
            .map(|p| lossy(p))
            .collect(),
    };
    (c, info)
}

/// Why this machine cannot confine a run, if it cannot (checked before anything runs).
pub fn unavailable() -> Option<String> {
    if confine::landlock_abi() < 1 {
        return Some(
            "the kernel does not offer Landlock (Linux 5.13 or later, with landlock in the \
             lsm= boot parameter); run with --no-sandbox where a policy allows it"
                .into(),
        );
    }
    None
}
