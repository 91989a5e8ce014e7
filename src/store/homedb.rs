//! The database of an avfs home (`$AVFS_HOME/registry.db`): the registry's names of vaults
//! and forks and settings (see `registry`), and the stamps of the vault files avfs last
//! left (see `stamp`). A tiny SQLite file that concurrent `avfs` processes share; the
//! store opens it the way it opens a vault (page checksums, a WAL kept short), pools its
//! connections per process, and owns its schema. `registry` is the API over its names.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};

use crate::error::{Error, Result};

/// An open connection to a home's database.
pub struct HomeDb {
    /// Always `Some` until dropped (then it goes back to `IDLE`).
    conn: Option<Connection>,
    pub home: PathBuf,
    /// The database file the connection has open (device, inode).
    file: (u64, u64),
}

/// Open connections not in use, for the next `HomeDb::open` of this process:
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

/// `$AVFS_HOME`, else `~/.avfs`.
pub fn default_home() -> PathBuf {
    if let Some(h) = std::env::var_os("AVFS_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(h);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"));
    home.join(".avfs")
}

impl HomeDb {
    pub fn open(home: &Path) -> Result<HomeDb> {
        std::fs::create_dir_all(home).map_err(|e| Error::host(home.display(), e))?;
        let db = home.join("registry.db");
        if let Some(file) = file_id(&db) {
            let mut idle = IDLE.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(i) = idle.iter().position(|(h, f, _)| h == home && *f == file) {
                let (_, _, conn) = idle.swap_remove(i);
                return Ok(HomeDb {
                    conn: Some(conn),
                    home: home.to_path_buf(),
                    file,
                });
            }
        }
        super::pagesum::register();
        let conn = Connection::open(&db)?;
        conn.busy_timeout(Duration::from_secs(30))?;
        retry_busy(|| conn.pragma_update(None, "journal_mode", "WAL"))?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "wal_autocheckpoint", WAL_AUTOCHECKPOINT_PAGES)?;
        conn.pragma_update(None, "journal_size_limit", WAL_LIMIT)?;
        super::persist_wal(&conn);
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
        Ok(HomeDb {
            conn: Some(conn),
            home: home.to_path_buf(),
            file: file_id(&db).unwrap_or_default(),
        })
    }

    pub fn conn(&self) -> &Connection {
        self.conn
            .as_ref()
            .expect("a registry's connection lives until it is dropped")
    }

    /// The stamp avfs recorded when it last finished writing the vault file at `path`
    /// (see `stamp`).
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
                    params![key, st, super::now_ns()],
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
}

impl Drop for HomeDb {
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
    let wal = super::stamp::sidecar(db, "-wal");
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
