//! Names for vaults and forks under `$AVFS_HOME` (default `~/.avfs`).
//!
//! The registry only maps names to (vault file, workspace); everything that matters lives
//! in the vault file. It is a tiny SQLite database so concurrent `avfs` processes that
//! create forks never lose each other's entries.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use crate::error::{Error, Result};
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

pub struct Registry {
    /// Always `Some` until dropped (then it goes back to `IDLE`).
    conn: Option<Connection>,
    pub home: PathBuf,
    /// The registry file the connection has open (device, inode).
    file: (u64, u64),
}

/// Open registry connections not in use, for the next `Registry::open` of this process:
/// one `avfs exec` opens the registry about five times (the target, each vault open's
/// stamp look-up and record), and each fresh connection re-reads the schema and the WAL
/// index. Keyed by home and by the file's identity, so a registry removed and made anew
/// behind a long-running process (the MCP server) is opened afresh.
static IDLE: Mutex<Vec<Idle>> = Mutex::new(Vec::new());

/// An idle connection: its home, the registry file's (device, inode), the connection.
type Idle = (PathBuf, (u64, u64), Connection);

/// The WAL is checkpointed once it holds this many pages (SQLite's default is 1000, 4 MB)
/// and cut back to `WAL_LIMIT` bytes after: every process's first open reads the whole
/// WAL to rebuild its index, so a registry written a few pages per exec must keep it short.
const WAL_AUTOCHECKPOINT_PAGES: u32 = 32;
const WAL_LIMIT: i64 = 128 * 1024;

pub fn default_home() -> PathBuf {
    if let Some(h) = std::env::var_os("AVFS_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(h);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"));
    home.join(".avfs")
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

impl Registry {
    pub fn open(home: &Path) -> Result<Registry> {
        std::fs::create_dir_all(home).map_err(|e| Error::host(home.display(), e))?;
        let db = home.join("registry.db");
        if let Some(file) = file_id(&db) {
            let mut idle = IDLE.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(i) = idle.iter().position(|(h, f, _)| h == home && *f == file) {
                let (_, _, conn) = idle.swap_remove(i);
                return Ok(Registry {
                    conn: Some(conn),
                    home: home.to_path_buf(),
                    file,
                });
            }
        }
        crate::store::pagesum::register();
        let conn = Connection::open(&db)?;
        conn.busy_timeout(Duration::from_secs(30))?;
        retry_busy(|| conn.pragma_update(None, "journal_mode", "WAL"))?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "wal_autocheckpoint", WAL_AUTOCHECKPOINT_PAGES)?;
        conn.pragma_update(None, "journal_size_limit", WAL_LIMIT)?;
        crate::store::persist_wal(&conn);
        cut_wal(&conn, &db);
        conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
            true,
        )?;
        retry_busy(|| {
            conn.execute_batch(
                "CREATE TABLE IF NOT EXISTS vault (name TEXT PRIMARY KEY, path TEXT NOT NULL, workspace TEXT NOT NULL, created_at_ns INTEGER NOT NULL);
                 CREATE TABLE IF NOT EXISTS setting (key TEXT PRIMARY KEY, value TEXT NOT NULL);
                 CREATE TABLE IF NOT EXISTS stamp (path BLOB PRIMARY KEY, stamp TEXT NOT NULL, at_ns INTEGER NOT NULL);",
            )
        })?;
        Ok(Registry {
            conn: Some(conn),
            home: home.to_path_buf(),
            file: file_id(&db).unwrap_or_default(),
        })
    }

    fn conn(&self) -> &Connection {
        self.conn
            .as_ref()
            .expect("a registry's connection lives until it is dropped")
    }

    /// The stamp avfs recorded when it last finished writing the vault file at `path`
    /// (see `store::stamp`).
    pub fn stamp(&self, path: &Path) -> Result<Option<String>> {
        use std::os::unix::ffi::OsStrExt;
        Ok(self
            .conn()
            .query_row(
                "SELECT stamp FROM stamp WHERE path = ?1",
                [path.as_os_str().as_bytes()],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// Records the stamp `now` takes (or forgets it when `now` has none), inside a write
    /// transaction so concurrent recorders are ordered by when they took it.
    pub fn restamp(&self, path: &Path, now: impl FnOnce() -> Option<String>) -> Result<()> {
        use std::os::unix::ffi::OsStrExt;
        let key = path.as_os_str().as_bytes();
        self.conn().execute_batch("BEGIN IMMEDIATE")?;
        let r = (|| -> Result<()> {
            match now() {
                Some(st) => self.conn().execute(
                    "INSERT OR REPLACE INTO stamp (path, stamp, at_ns) VALUES (?1, ?2, ?3)",
                    params![key, st, crate::store::now_ns()],
                )?,
                None => self
                    .conn()
                    .execute("DELETE FROM stamp WHERE path = ?1", [key])?,
            };
            Ok(())
        })();
        let end = if r.is_ok() { "COMMIT" } else { "ROLLBACK" };
        let _ = self.conn().execute_batch(end);
        r
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

impl Drop for Registry {
    fn drop(&mut self) {
        // Only a connection outside any transaction is reused.
        if let Some(conn) = self.conn.take().filter(|c| c.is_autocommit())
            && self.file != (0, 0)
        {
            let mut idle = IDLE.lock().unwrap_or_else(|p| p.into_inner());
            idle.push((std::mem::take(&mut self.home), self.file, conn));
        }
    }
}

/// Runs a step of a registry's set-up again while SQLite answers busy. When several
/// processes open a new registry at the same moment (eight `vault create` on a fresh
/// home), switching it to WAL or creating its tables can answer `SQLITE_BUSY` at once,
/// without calling the busy handler (SQLite does not wait where waiting could deadlock,
/// e.g. while another connection recovers or changes the journal mode). Seen in CI as
/// `vault create v0: busy`, about 1 run in 20-40.
fn retry_busy<T>(mut step: impl FnMut() -> rusqlite::Result<T>) -> rusqlite::Result<T> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut pause = Duration::from_millis(1);
    loop {
        match step() {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if matches!(
                    e.code,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                ) && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            other => return other,
        }
    }
}

/// Checkpoints a WAL grown past `WAL_LIMIT` and truncates it (registries written before
/// the limit was set, or whose automatic checkpoints a concurrent reader kept from
/// restarting the log). Never waits: a busy registry is left for a later open.
fn cut_wal(conn: &Connection, db: &Path) {
    let wal = crate::store::stamp::sidecar(db, "-wal");
    if std::fs::metadata(&wal).is_ok_and(|m| m.len() as i64 > WAL_LIMIT) {
        let _ = conn.busy_timeout(Duration::ZERO);
        let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        let _ = conn.busy_timeout(Duration::from_secs(30));
    }
}

/// The (device, inode) of the file at `path`, if it exists.
fn file_id(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
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
