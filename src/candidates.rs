//! The names a shell offers when completing a command line: registered vaults and forks,
//! the workspaces, checkpoints and remotes of the selected vault.
//!
//! Completion runs on every <TAB>, possibly while other avfs processes write, so everything
//! here only reads: the registry and the vault file are opened read-only, nothing is created
//! (no `$AVFS_HOME`, no registry, no `default` vault), no write lock is taken, and a lock
//! held by a writer is waited for only briefly. A selection that names nothing gives no
//! names rather than an error: the shell has nowhere to show one.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension};

use crate::error::Result;
use crate::registry::{DEFAULT_VAULT, VaultRef};
use crate::store::Store;
use crate::workspace::MAIN;

/// How long a listing waits for a writer's lock before giving up (a <TAB> must stay fast).
const BUSY_WAIT: Duration = Duration::from_millis(250);

/// One name to offer, with a short description some shells (zsh, fish) show beside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub name: String,
    pub help: Option<String>,
}

/// `$AVFS_HOME` and the `--vault` selection (or `AVFS_VAULT`) found on the command line.
#[derive(Clone, Debug)]
pub struct Lister {
    pub home: PathBuf,
    pub vault_sel: Option<String>,
}

impl Lister {
    pub fn new(home: PathBuf, vault_sel: Option<String>) -> Lister {
        Lister { home, vault_sel }
    }

    /// Every registered vault and fork name; forks say what they were forked from.
    pub fn vaults(&self) -> Result<Vec<Candidate>> {
        let Some(reg) = open_registry(&self.home)? else {
            return Ok(vec![]);
        };
        let all = registered(&reg)?;
        Ok(all
            .iter()
            .map(|v| Candidate {
                name: v.name.clone(),
                help: Some(describe(&all, v)),
            })
            .collect())
    }

    /// Registered forks (names of a workspace other than a file's `main`), in any vault.
    pub fn forks(&self) -> Result<Vec<Candidate>> {
        Ok(self
            .vaults()?
            .into_iter()
            .filter(|c| c.help.as_deref().is_some_and(|h| h.starts_with("fork")))
            .collect())
    }

    /// The other registered names of the selected vault's file: what `exec --fork` reuses.
    pub fn forks_of_selected(&self) -> Result<Vec<Candidate>> {
        let Some(reg) = open_registry(&self.home)? else {
            return Ok(vec![]);
        };
        let Some(sel) = resolve(&reg, self.vault_sel.as_deref())? else {
            return Ok(vec![]);
        };
        let all = registered(&reg)?;
        Ok(all
            .iter()
            .filter(|v| v.path == sel.path && v.workspace != sel.workspace)
            .map(|v| Candidate {
                name: v.name.clone(),
                help: Some(describe(&all, v)),
            })
            .collect())
    }

    /// The workspaces inside the selected vault's file.
    pub fn workspaces(&self) -> Result<Vec<Candidate>> {
        self.in_selected(|db, _| {
            let mut stmt = db.prepare("SELECT name, parent_name FROM workspace ORDER BY id")?;
            let rows = stmt.query_map([], |r| {
                let parent: Option<String> = r.get(1)?;
                Ok(Candidate {
                    name: r.get(0)?,
                    help: parent.map(|p| format!("fork of {p}")),
                })
            })?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    /// The checkpoints of the selected workspace, newest first (what one usually wants).
    pub fn checkpoints(&self) -> Result<Vec<Candidate>> {
        self.in_selected(|db, v| {
            let mut stmt = db.prepare(
                "SELECT c.name, c.origin, c.created_at_ns, c.message FROM checkpoint c \
                 JOIN workspace w ON w.id = c.workspace WHERE w.name = ?1 ORDER BY c.id DESC",
            )?;
            let rows = stmt.query_map([&v.workspace], |r| {
                let origin: String = r.get(1)?;
                let at: i64 = r.get(2)?;
                let message: Option<String> = r.get(3)?;
                // To the second: a description, not a record.
                let time = crate::util::rfc3339(at);
                let mut help = format!("{}Z {origin}", time.get(..19).unwrap_or(&time));
                if let Some(m) = message.filter(|m| !m.is_empty()) {
                    help.push_str(": ");
                    help.push_str(m.lines().next().unwrap_or_default());
                }
                Ok(Candidate {
                    name: r.get(0)?,
                    help: Some(help),
                })
            })?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    /// The remotes of the selected vault's file, with their URLs.
    pub fn remotes(&self) -> Result<Vec<Candidate>> {
        self.in_selected(|db, _| {
            let mut stmt = db.prepare("SELECT name, url FROM remote ORDER BY name")?;
            let rows = stmt.query_map([], |r| {
                Ok(Candidate {
                    name: r.get(0)?,
                    help: Some(r.get(1)?),
                })
            })?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    /// Runs `f` on one read snapshot of the selected vault's file, opened read-only; no
    /// selection and no `default` vault, or a file that is not there, gives no names.
    fn in_selected(
        &self,
        f: impl FnOnce(&Connection, &VaultRef) -> Result<Vec<Candidate>>,
    ) -> Result<Vec<Candidate>> {
        let sel = match self.vault_sel.as_deref() {
            // A path needs no registry (and must not make one).
            Some(s) if is_path(s) => Some(path_ref(s)),
            _ => match open_registry(&self.home)? {
                Some(reg) => resolve(&reg, self.vault_sel.as_deref())?,
                None => None,
            },
        };
        let Some(v) = sel else {
            return Ok(vec![]);
        };
        if !v.path.is_file() {
            return Ok(vec![]);
        }
        let mut store = Store::open_read(&v.path)?;
        store.conn.busy_timeout(BUSY_WAIT)?;
        store.read(|db| f(db, &v))
    }
}

/// The registry, opened read-only; `None` when there is none yet (nothing is created).
fn open_registry(home: &Path) -> Result<Option<Connection>> {
    let path = home.join("registry.db");
    if !path.is_file() {
        return Ok(None);
    }
    crate::store::pagesum::register();
    let conn = Connection::open_with_flags(
        &path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(BUSY_WAIT)?;
    Ok(Some(conn))
}

fn registered(reg: &Connection) -> Result<Vec<VaultRef>> {
    let mut stmt = reg.prepare("SELECT name, path, workspace FROM vault ORDER BY name")?;
    let rows = stmt.query_map([], |r| {
        Ok(VaultRef {
            name: r.get(0)?,
            path: PathBuf::from(r.get::<_, String>(1)?),
            workspace: r.get(2)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

fn get(reg: &Connection, name: &str) -> Result<Option<VaultRef>> {
    Ok(reg
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

/// What `--vault SEL` (or its absence) names, as `Context::existing` resolves it, except
/// that nothing found is `None` rather than an error.
fn resolve(reg: &Connection, sel: Option<&str>) -> Result<Option<VaultRef>> {
    match sel {
        Some(s) if is_path(s) => Ok(Some(path_ref(s))),
        Some(s) => get(reg, s),
        None => {
            let current: Option<String> = reg
                .query_row("SELECT value FROM setting WHERE key = 'current'", [], |r| {
                    r.get(0)
                })
                .optional()?;
            get(reg, current.as_deref().unwrap_or(DEFAULT_VAULT))
        }
    }
}

/// The registry's rule: a selector with a `/` or ending in `.avfs` is a file path.
fn is_path(sel: &str) -> bool {
    sel.contains('/') || sel.ends_with(".avfs")
}

fn path_ref(sel: &str) -> VaultRef {
    VaultRef {
        name: sel.to_string(),
        path: std::path::absolute(sel).unwrap_or_else(|_| PathBuf::from(sel)),
        workspace: MAIN.into(),
    }
}

/// "vault" or "fork of NAME" (the registered name of the file's `main`, if any).
fn describe(all: &[VaultRef], v: &VaultRef) -> String {
    if v.workspace == MAIN {
        return "vault".into();
    }
    match all.iter().find(|o| o.path == v.path && o.workspace == MAIN) {
        Some(main) => format!("fork of {}", main.name),
        None => "fork".into(),
    }
}
