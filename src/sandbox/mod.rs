//! Where a run happens and what it may touch: the workspace at its stable path in a
//! private mount namespace, and (unless `--no-sandbox`) the sandbox around the command.
//!
//! The sandbox is the kernel's own mechanisms, no helper binary: namespaces (mount, PID,
//! IPC, UTS, network; user when not root), a fresh root holding only the listed host
//! paths, read-only, `nosuid,nodev` (`root`), Landlock (the command reads only those,
//! writes only the workspace, a private /tmp and /dev/shm and the vault's package
//! caches, cannot signal or reach abstract sockets outside the run), seccomp (no mounts,
//! namespaces, modules, keyrings, device nodes, setuid/setgid bits), capabilities
//! dropped, `no_new_privs`, and a cgroup per run for its processes and memory
//! (`limits`). Secrets, `$AVFS_HOME` and the vault file are hidden.

pub mod config;
pub mod confine;
pub mod init;
pub mod keeper;
pub mod limits;
mod publish;
pub mod root;
pub mod service;
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

/// Paths a confined run may read besides the configured ones (its own /proc and /dev,
/// the host's /sys read-only).
const ALWAYS_READABLE: &[&str] = &["/proc", "/sys", "/dev"];

/// The directory of a vault's package caches: `$AVFS_HOME/caches/<key>`, named after
/// the vault file's absolute path (forks share the file, and so the caches); removed
/// with the vault.
pub fn caches_dir(avfs_home: &Path, vault_file: &Path) -> PathBuf {
    let abs = clean(&std::path::absolute(vault_file).unwrap_or(vault_file.into()));
    let key = blake3::hash(abs.as_os_str().as_encoded_bytes()).to_hex();
    avfs_home.join("caches").join(&key.as_str()[..16])
}

/// The caches of a run: their directories made (0700 above them: nothing a run puts
/// there is reachable by other users of the host).
fn caches(req: &Request) -> Vec<root::CacheMount> {
    let dir = caches_dir(req.avfs_home, req.vault_file);
    let mut out: Vec<root::CacheMount> = vec![];
    let mut paths: Vec<PathBuf> = req
        .config
        .writable_caches
        .iter()
        .flat_map(|e| expand(e, req.home, req.host_var))
        .collect();
    paths.sort();
    paths.dedup();
    for path in paths {
        // A cache inside another one is part of it.
        if out.iter().any(|c| under(&path, &c.path)) {
            continue;
        }
        let name: String = path
            .to_string_lossy()
            .trim_start_matches('/')
            .replace('/', "_");
        let (upper, work) = (dir.join(&name).join("upper"), dir.join(&name).join("work"));
        let lower = std::fs::canonicalize(&path).ok().filter(|p| p.is_dir());
        // Overlayfs's work directory only where there is an overlay (the host has the
        // directory): else the run sees `upper` itself (`root::cache_mount`), and an
        // unused cache costs two directories at rest rather than three.
        if std::fs::create_dir_all(&upper).is_err()
            || (lower.is_some() && std::fs::create_dir_all(&work).is_err())
        {
            continue;
        }
        out.push(root::CacheMount {
            path,
            upper,
            work,
            lower,
        });
    }
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(
        req.avfs_home.join("caches"),
        std::fs::Permissions::from_mode(0o700),
    );
    out
}

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
    /// The limits of the run (the policy's, with `avfs exec`'s flags applied).
    pub limits: limits::Limits,
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
        // Only what a visible path holds exists in the run at all; a path inside
        // another hidden one is hidden.
        if !shown.iter().any(|s| under(&h, s)) || hidden_dirs.iter().any(|d: &PathBuf| under(&h, d))
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
    let caches = caches(req);
    let mut writable = vec![workspace.clone()];
    writable.extend(PRIVATE_DIRS.iter().map(PathBuf::from));
    // The envelope lists the caches on their own.
    let shown_writable = writable.clone();
    writable.extend(caches.iter().map(|c| c.path.clone()));
    let mut visible = read_only.clone();
    visible.push(PathBuf::from("/sys"));
    let c = Confinement {
        network: req.network,
        access: confine::Access {
            read_only: readable,
            writable: writable.clone(),
            devices: DEVICES.iter().map(PathBuf::from).collect(),
            keep_root_caps: req.root,
        },
        root: root::RootPlan {
            visible,
            caches: caches.clone(),
            devices: DEVICES.iter().map(PathBuf::from).collect(),
            tmp_bytes: req.limits.tmp_bytes,
            shm_bytes: req.limits.shm_bytes,
        },
        hidden_dirs: hidden_dirs.clone(),
        hidden_files: hidden_files.clone(),
        cgroup_procs: vec![],
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
        writable_paths: shown_writable.iter().map(|p| lossy(p)).collect(),
        read_only_paths: shown.iter().map(|p| lossy(p)).collect(),
        hidden_paths: hidden_dirs
            .iter()
            .chain(hidden_files.iter())
            .map(|p| lossy(p))
            .collect(),
        writable_caches: caches.iter().map(|c| lossy(&c.path)).collect(),
        limits: None,
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
