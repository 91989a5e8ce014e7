//! The one stable path of a vault's workspaces: every run of the vault and of every fork
//! of it sees its workspace there, session after session, so absolute paths that tools
//! record (a venv's scripts, cargo's dep-info, npm's logs) stay right. Runs happen in
//! private mount namespaces, so forks can run at the same path at the same time.
//!
//! Kept in the vault file (`meta.workspace_path`), so forks share it and a copied vault
//! keeps it. Default: `$AVFS_HOME/ws/<vault name>`.

use std::path::{Component, Path, PathBuf};

use rusqlite::Connection;

use crate::error::{Error, Result};
use crate::registry::{Registry, VaultRef};
use crate::store::{Store, audit, meta_get_text, meta_set_text};
use crate::workspace::MAIN;

const KEY: &str = "workspace_path";

/// The default path of a vault's workspaces: named after the vault (the name of its
/// `main` workspace's registration), under `$AVFS_HOME/ws`.
pub fn default_path(home: &Path, reg: &Registry, v: &VaultRef) -> Result<PathBuf> {
    let names = reg.names_in(&v.path)?;
    let name = names
        .iter()
        .find(|n| n.workspace == MAIN)
        .map(|n| n.name.clone())
        .unwrap_or_else(|| {
            v.path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| v.name.clone())
        });
    Ok(home.join("ws").join(name))
}

/// The vault's workspace path: the one set, else the default.
pub fn workspace_path(
    db: &Connection,
    home: &Path,
    reg: &Registry,
    v: &VaultRef,
) -> Result<PathBuf> {
    match meta_get_text(db, KEY)? {
        Some(p) => Ok(PathBuf::from(p)),
        None => default_path(home, reg, v),
    }
}

/// Checks a path given for a vault's workspaces.
pub fn check(path: &Path, home: &Path, vault_file: &Path) -> Result<PathBuf> {
    let bad = |why: &str| {
        Err(Error::InvalidArgument(
            path.display().to_string(),
            format!("a workspace path {why}"),
        ))
    };
    if !path.is_absolute() {
        return bad("must be absolute");
    }
    if path.components().any(|c| matches!(c, Component::ParentDir)) {
        return bad("must not contain ..");
    }
    let clean: PathBuf = path.components().collect();
    if clean == Path::new("/") {
        return bad("cannot be /");
    }
    for sys in ["/proc", "/sys", "/dev", "/tmp"] {
        if clean == Path::new(sys) || (sys != "/tmp" && clean.starts_with(sys)) {
            return bad(&format!("cannot be {sys} or below it"));
        }
    }
    let home_abs = std::path::absolute(home).unwrap_or(home.to_path_buf());
    if home_abs.starts_with(&clean) {
        return bad("cannot contain $AVFS_HOME");
    }
    let file = std::path::absolute(vault_file).unwrap_or(vault_file.to_path_buf());
    if file.starts_with(&clean) {
        return bad("cannot contain the vault file");
    }
    Ok(clean)
}

/// `vault set-path`: sets the workspace path of vault `v` (and of every fork of it),
/// with its audit row (`vault.set_path`).
pub fn change(v: &VaultRef, path: &Path) -> Result<()> {
    let mut store = Store::open(&v.path)?;
    store.write(|db| {
        set(db, path)?;
        audit::append(
            db,
            Some(&v.workspace),
            audit::cli_actor(),
            "vault.set_path",
            &serde_json::json!({"workspace_path": path}),
        )
        .map(|_| ())
    })
}

/// Sets the vault's workspace path (for every fork of it).
pub fn set(db: &Connection, path: &Path) -> Result<()> {
    let text = path.to_str().ok_or_else(|| {
        Error::InvalidArgument(
            path.display().to_string(),
            "a workspace path must be UTF-8".into(),
        )
    })?;
    meta_set_text(db, KEY, text)
}
