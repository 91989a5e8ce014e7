//! Temporary names of vault files being created (see `Store::create`): `.NAME.creating-PID`
//! beside the vault. A process killed while creating leaves one behind; the next create of
//! the same name removes those whose process is gone.

use std::path::{Path, PathBuf};

use super::stamp::sidecar;

const MARK: &str = ".creating-";

fn prefix(path: &Path) -> String {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    format!(".{name}{MARK}")
}

/// The temporary name this process creates `path` under.
pub fn temp_name(path: &Path) -> PathBuf {
    path.with_file_name(format!("{}{}", prefix(path), std::process::id()))
}

/// Removes a temporary file and its SQLite sidecars (errors ignored: nothing to keep).
pub fn remove(tmp: &Path) {
    for p in [
        tmp.to_path_buf(),
        sidecar(tmp, "-wal"),
        sidecar(tmp, "-shm"),
        sidecar(tmp, "-journal"),
    ] {
        let _ = std::fs::remove_file(p);
    }
}

/// Removes what killed creators of `path` left (their process no longer exists).
pub fn remove_stale(path: &Path) {
    let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return;
    };
    let prefix = prefix(path);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(&prefix) else {
            continue;
        };
        // The main file only (`PID`, not `PID-wal`): `remove` takes its sidecars too.
        let Ok(pid) = rest.parse::<u32>() else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            remove(&e.path());
        }
    }
}
