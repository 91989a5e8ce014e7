//! Names for vaults and forks under `$AVFS_HOME` (default `~/.avfs`).
//!
//! The registry only maps names to (vault file, workspace); everything that matters lives
//! in the vault file. It is a tiny SQLite database so concurrent `avfs` processes that
//! create forks never lose each other's entries.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::store::homedb::HomeDb;
pub use crate::store::homedb::default_home;
use crate::workspace::MAIN;

pub const DEFAULT_VAULT: &str = "default";

#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct VaultRef {
    /// The name used with `--vault`.
    pub name: String,
    pub path: PathBuf,
    /// The workspace inside the file.
    pub workspace: String,
}

/// Names of vaults and forks: letters, digits, `-`, `_`, `.`; not starting with `.`.
pub fn validate_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !ok {
        return Err(Error::InvalidArgument(
            name.into(),
            "vault and fork names are 1-128 characters of letters, digits, '-', '_' and '.', not starting with '.'".into(),
        ));
    }
    Ok(())
}

/// The registry of a home: its names of vaults and forks, in the home's database.
pub struct Registry {
    db: HomeDb,
    pub home: PathBuf,
}

impl Registry {
    pub fn open(home: &Path) -> Result<Registry> {
        let db = HomeDb::open(home)?;
        Ok(Registry {
            home: db.home.clone(),
            db,
        })
    }

    fn conn(&self) -> &Connection {
        self.db.conn()
    }

    pub fn vault_dir(&self) -> PathBuf {
        self.home.join("vaults")
    }

    pub fn default_path_for(&self, name: &str) -> PathBuf {
        self.vault_dir().join(format!("{name}.avfs"))
    }

    pub fn get(&self, name: &str) -> Result<Option<VaultRef>> {
        Ok(self
            .conn()
            .query_row(
                "SELECT name, path, workspace FROM vault WHERE name = ?1",
                [name],
                |r| {
                    Ok(VaultRef {
                        name: r.get(0)?,
                        path: PathBuf::from(r.get::<_, String>(1)?),
                        workspace: r.get(2)?,
                    })
                },
            )
            .optional()?)
    }

    pub fn list(&self) -> Result<Vec<VaultRef>> {
        let mut stmt = self
            .conn()
            .prepare("SELECT name, path, workspace FROM vault ORDER BY name")?;
        let rows = stmt.query_map([], |r| {
            Ok(VaultRef {
                name: r.get(0)?,
                path: PathBuf::from(r.get::<_, String>(1)?),
                workspace: r.get(2)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    pub fn add(&self, v: &VaultRef) -> Result<()> {
        validate_name(&v.name)?;
        let path = v.path.to_str().ok_or_else(|| {
            Error::InvalidArgument(
                v.path.display().to_string(),
                "vault paths must be UTF-8".into(),
            )
        })?;
        let n = self.conn().execute(
            "INSERT OR IGNORE INTO vault (name, path, workspace, created_at_ns) VALUES (?1, ?2, ?3, ?4)",
            params![v.name, path, v.workspace, crate::store::now_ns()],
        )?;
        if n == 0 {
            return Err(Error::VaultExists(v.name.clone()));
        }
        Ok(())
    }

    pub fn remove(&self, name: &str) -> Result<()> {
        self.conn()
            .execute("DELETE FROM vault WHERE name = ?1", [name])?;
        if self.current()?.as_deref() == Some(name) {
            self.conn()
                .execute("DELETE FROM setting WHERE key = 'current'", [])?;
        }
        Ok(())
    }

    /// All names that point into one vault file.
    pub fn names_in(&self, path: &Path) -> Result<Vec<VaultRef>> {
        Ok(self
            .list()?
            .into_iter()
            .filter(|v| v.path == path)
            .collect())
    }

    pub fn current(&self) -> Result<Option<String>> {
        Ok(self
            .conn()
            .query_row("SELECT value FROM setting WHERE key = 'current'", [], |r| {
                r.get(0)
            })
            .optional()?)
    }

    pub fn set_current(&self, name: &str) -> Result<()> {
        if self.get(name)?.is_none() {
            return Err(Error::NoSuchVault(name.into()));
        }
        self.conn().execute(
            "INSERT OR REPLACE INTO setting (key, value) VALUES ('current', ?1)",
            [name],
        )?;
        Ok(())
    }

    /// What `--vault SEL` (or its absence) names. A selector with a `/` or ending in
    /// `.avfs` is a file path; otherwise a registered name.
    pub fn resolve(&self, sel: Option<&str>) -> Result<Option<VaultRef>> {
        match sel {
            Some(s) if s.contains('/') || s.ends_with(".avfs") => {
                let path = std::path::absolute(s).map_err(|e| Error::host(s, e))?;
                Ok(Some(VaultRef {
                    name: s.to_string(),
                    path,
                    workspace: MAIN.into(),
                }))
            }
            Some(s) => Ok(Some(
                self.get(s)?.ok_or_else(|| Error::NoSuchVault(s.into()))?,
            )),
            None => match self.current()? {
                Some(c) => Ok(Some(
                    self.get(&c)?.ok_or_else(|| Error::NoSuchVault(c.clone()))?,
                )),
                None => Ok(None),
            },
        }
    }
}

/// Makes the registry agree with a vault file after a command was killed between its two
/// commits (the vault file, then the registry): workspaces in the file that no name points
/// at get their own name, and names of workspaces the file no longer has are dropped.
/// Returns the names added.
pub fn reconcile(reg: &Registry, path: &Path) -> Result<Vec<String>> {
    // Names first: a fork commits to the file before its name is added, so a name read
    // here always has its workspace in the file read next.
    let names = reg.names_in(path)?;
    let Ok(mut store) = crate::store::Store::open_read(path) else {
        return Ok(vec![]);
    };
    let in_file = store.read(crate::workspace::list_workspaces)?;
    let mut added = Vec::new();
    for w in &in_file {
        if w.name == MAIN || names.iter().any(|n| n.workspace == w.name) {
            continue;
        }
        if reg.get(&w.name)?.is_none() && validate_name(&w.name).is_ok() {
            add_or_same(
                reg,
                &VaultRef {
                    name: w.name.clone(),
                    path: path.to_path_buf(),
                    workspace: w.name.clone(),
                },
            )?;
            added.push(w.name.clone());
        }
    }
    for n in names {
        if !in_file.iter().any(|w| w.name == n.workspace) {
            reg.remove(&n.name)?;
        }
    }
    Ok(added)
}

/// Registers `v`; an entry that already says the same (a concurrent process got there
/// first) is fine.
pub fn add_or_same(reg: &Registry, v: &VaultRef) -> Result<()> {
    match reg.add(v) {
        Err(Error::VaultExists(n)) => match reg.get(&n)? {
            Some(e) if e.path == v.path && e.workspace == v.workspace => Ok(()),
            _ => Err(Error::VaultExists(n)),
        },
        other => other,
    }
}
