//! Finding the vault a command works on, and keeping a mounted workspace consistent with
//! changes made from outside its mount. Shared by the CLI, the boundary and MCP.

mod change;
pub mod path;

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::registry::{DEFAULT_VAULT, Registry, VaultRef};
use crate::store::{Store, audit};
use crate::workspace::{MAIN, create_workspace};

pub use change::delete_fork;

/// The variable that names who asked (an MCP tool call, say) in the audit rows of the
/// avfs processes a front end starts.
pub use crate::store::audit::ORIGIN_ENV as AUDIT_ORIGIN_ENV;

/// `$AVFS_HOME` and the `--vault` selection.
#[derive(Clone, Debug)]
pub struct Context {
    pub home: PathBuf,
    pub vault_sel: Option<String>,
}

impl Context {
    pub fn new(home: PathBuf, vault_sel: Option<String>) -> Context {
        Context { home, vault_sel }
    }

    pub fn with_vault(&self, sel: Option<String>) -> Context {
        Context {
            home: self.home.clone(),
            vault_sel: sel,
        }
    }

    pub fn registry(&self) -> Result<Registry> {
        Registry::open(&self.home)
    }

    /// The selected vault for a command that only reads: a vault that does not exist is
    /// `no_such_vault`, never a new empty one (only a first mutating use creates
    /// `default`, see `target`).
    pub fn existing(&self) -> Result<(Registry, VaultRef)> {
        let reg = self.registry()?;
        let v = match reg.resolve(self.vault_sel.as_deref())? {
            Some(v) => v,
            None => reg.get(DEFAULT_VAULT)?.ok_or(Error::NoVaultYet)?,
        };
        // A registered name whose file was removed behind avfs's back, or a path
        // selector naming nothing: there is nothing to read.
        if !v.path.exists() {
            return Err(Error::NoSuchVault(format!(
                "{} (its file {} does not exist)",
                v.name,
                v.path.display()
            )));
        }
        Ok((reg, v))
    }

    /// The selected vault; with no selection and no vaults yet, creates `default`.
    pub fn target(&self) -> Result<(Registry, VaultRef)> {
        let reg = self.registry()?;
        if let Some(v) = reg.resolve(self.vault_sel.as_deref())? {
            return Ok((reg, v));
        }
        let v = match reg.get(DEFAULT_VAULT)? {
            Some(v) => v,
            None => {
                let path = reg.default_path_for(DEFAULT_VAULT);
                let v = VaultRef {
                    name: DEFAULT_VAULT.into(),
                    path: path.clone(),
                    workspace: MAIN.into(),
                };
                if !path.exists() {
                    create_vault_file(&path)?;
                }
                reg.add(&v)?;
                v
            }
        };
        reg.set_current(&v.name)?;
        Ok((reg, v))
    }

    /// If the workspace is mounted, has the serving process commit its buffered writes,
    /// so this process sees every write acknowledged so far.
    pub fn sync_mount(&self, v: &VaultRef) -> Result<()> {
        if let Some(m) = crate::mount::find_mount(&self.home, &v.path, &v.workspace)? {
            crate::mount::control::request(&m.socket, &serde_json::json!({"op": "sync"}))?;
        }
        Ok(())
    }

    /// After changing a mounted workspace from outside: the kernel must forget its caches.
    pub fn invalidate_mount(&self, v: &VaultRef) -> Result<()> {
        if let Some(m) = crate::mount::find_mount(&self.home, &v.path, &v.workspace)? {
            crate::mount::control::request(&m.socket, &serde_json::json!({"op": "invalidate"}))?;
        }
        Ok(())
    }
}

/// Creates a vault file with its `main` workspace.
pub fn create_vault_file(path: &Path) -> Result<()> {
    let mut store = Store::create(path)?;
    store.write(|db| {
        create_workspace(db, MAIN, None, None)?;
        audit::append(
            db,
            Some(MAIN),
            crate::store::audit::cli_actor(),
            "vault.create",
            &serde_json::json!({"path": path}),
        )?;
        Ok(())
    })
}
