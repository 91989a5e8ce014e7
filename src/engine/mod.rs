//! Where a command runs: the engines behind `avfs exec`.
//!
//! - **overlay** (default on Linux): the command works on the host's own file system, in
//!   an overlayfs over a cached materialization of the workspace's base tree (`layers`);
//!   when it ends, the run's upper directory is ingested into the vault (`ingest`).
//!   Native speed; cost of the report O(changed files + bytes).
//! - **fuse** (fallback): the command works in a FUSE mount of the workspace (`fuse`),
//!   where every change reaches the vault as it happens. Used where overlayfs cannot be
//!   mounted (no user namespaces, `$AVFS_HOME` itself on overlayfs, no permission).
//!
//! Either way the run sees the workspace at its stable path (`sandbox::setup`).

pub mod fuse;
pub mod ignored;
pub mod ignored_mount;
pub mod ingest;
pub mod kept;
pub mod layers;
pub mod materialize;
pub mod memo;
pub mod overlay;
pub mod pending;
pub(crate) mod scan;
mod upper;

use std::path::Path;

use serde::Serialize;

use crate::error::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum EngineKind {
    Overlay,
    Fuse,
}

impl EngineKind {
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Overlay => "overlay",
            EngineKind::Fuse => "fuse",
        }
    }
}

/// Which engine ran, and why (in the envelope).
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct EngineInfo {
    pub name: &'static str,
    pub reason: String,
    /// overlay: how the base tree was reached ("cached", "diff", "full", "squashed"; "kept"
    /// when the workspace's kept overlay was reused, "remounted" when mounted again),
    /// the number of entries written for it, and the stack's depth.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layers: Option<LayersInfo>,
    /// overlay: the ingest of the run's changes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ingest: Option<IngestInfo>,
}

#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct LayersInfo {
    pub how: String,
    pub written: u64,
    pub depth: usize,
    pub prepare_ms: u64,
}

#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct IngestInfo {
    /// Regular files read and hashed, and the bytes read from them (only their data: the
    /// holes of sparse files are skipped).
    pub files_read: u64,
    pub bytes_read: u64,
    /// Regular files of the workspace's kept overlay not read again: an earlier run's
    /// ingest read them, and they have not changed since.
    #[serde(default)]
    pub files_unchanged: u64,
    /// Chunks of the files read that the vault already held or this ingest had already
    /// sent: neither compressed nor stored again.
    #[serde(default)]
    pub chunks_reused: u64,
    pub ms: u64,
    /// Entries of the upper that could not be taken in.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
}

const OVERLAYFS_SUPER_MAGIC: i64 = 0x794c_7630;

/// Why the overlay engine cannot run here (`None`: it can).
pub fn overlay_unavailable(home: &Path) -> Option<String> {
    if std::env::consts::OS != "linux" {
        return Some("overlayfs needs Linux".into());
    }
    let filesystems = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if !filesystems
        .lines()
        .any(|l| l.trim_end().ends_with("overlay"))
    {
        return Some("this kernel has no overlayfs (modprobe overlay)".into());
    }
    // The layer cache and the runs' upper directories live under $AVFS_HOME: overlayfs
    // cannot take its upper from another overlayfs.
    let probe = if home.exists() {
        home.to_path_buf()
    } else {
        home.ancestors()
            .find(|p| p.exists())
            .unwrap_or(Path::new("/"))
            .to_path_buf()
    };
    if let Ok(c) = std::ffi::CString::new(probe.as_os_str().as_encoded_bytes()) {
        // SAFETY: statfs into a zeroed struct with a valid path.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statfs(c.as_ptr(), &mut st) } == 0
            && st.f_type as i64 == OVERLAYFS_SUPER_MAGIC
        {
            return Some(format!(
                "$AVFS_HOME ({}) is itself on overlayfs, which cannot hold an overlay's upper directory",
                home.display()
            ));
        }
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        if std::fs::read_to_string("/proc/sys/kernel/unprivileged_userns_clone")
            .is_ok_and(|s| s.trim() == "0")
        {
            return Some(
                "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0)"
                    .into(),
            );
        }
        if std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
            .is_ok_and(|s| s.trim() == "0")
        {
            return Some("user namespaces are disabled (user.max_user_namespaces = 0)".into());
        }
    }
    None
}

/// The engine for a run: the one asked for, or overlay where it can run, else FUSE.
pub fn choose(home: &Path, asked: Option<EngineKind>) -> Result<(EngineKind, String)> {
    let why_not = overlay_unavailable(home);
    match (asked, why_not) {
        (Some(EngineKind::Overlay), Some(why)) => Err(Error::Refused(format!(
            "--engine overlay: {why}; use --engine fuse"
        ))),
        (Some(k), _) => Ok((k, format!("--engine {}", k.name()))),
        (None, None) => Ok((EngineKind::Overlay, "default".into())),
        (None, Some(why)) => Ok((EngineKind::Fuse, format!("fallback: {why}"))),
    }
}
