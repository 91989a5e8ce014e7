//! The vault file: opening and format checks, schema migrations, objects and audit rows.
//! Knows nothing about FUSE, processes or the command line.

pub mod approvals;
pub mod audit;
pub mod missing;
pub mod objects;
pub mod quota;
pub mod schema;
mod treecodec;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior};

use crate::error::{Error, Result};
use schema::{APPLICATION_ID, FORMAT_VERSION, MIGRATIONS};

/// An open vault file.
pub struct Store {
    pub conn: Connection,
    pub path: PathBuf,
}

fn not_a_vault(path: &Path, reason: impl Into<String>) -> Error {
    Error::NotAVault {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Checks the file's header without letting SQLite touch it, so a foreign, truncated or
/// too-new file is refused before anything could be written to it.
fn check_header(path: &Path) -> Result<()> {
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::NoSuchVault(path.display().to_string()),
        _ => Error::host(path.display(), e),
    })?;
    if meta.is_dir() {
        return Err(not_a_vault(path, "it is a directory"));
    }
    if meta.len() == 0 {
        return Err(not_a_vault(path, "the file is empty"));
    }
    let mut header = [0u8; 100];
    let mut f = std::fs::File::open(path).map_err(|e| Error::host(path.display(), e))?;
    let mut got = 0;
    while got < header.len() {
        match f.read(&mut header[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => return Err(Error::host(path.display(), e)),
        }
    }
    if got < 16 || &header[..16] != b"SQLite format 3\0" {
        return Err(not_a_vault(path, "not a SQLite database"));
    }
    if got < 100 {
        return Err(Error::Corrupt {
            path: path.into(),
            reason: format!("truncated to {got} bytes"),
        });
    }
    let be32 = |o: usize| u32::from_be_bytes(header[o..o + 4].try_into().unwrap());
    let app_id = be32(68);
    if app_id != APPLICATION_ID {
        return Err(not_a_vault(path, "a SQLite database of another program"));
    }
    let version = be32(60) as i64;
    if version > FORMAT_VERSION {
        return Err(Error::TooNew {
            path: path.into(),
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let page_size = match u16::from_be_bytes([header[16], header[17]]) {
        1 => 65536u64,
        n => n as u64,
    };
    // The in-header page count is valid when the change counter matches "version valid for".
    // With a non-empty WAL the file may legitimately lag behind (an interrupted checkpoint,
    // say on a full disk): the WAL still holds those pages, so only SQLite can judge.
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let wal_pending = std::fs::metadata(&wal)
        .map(|m| m.len() > 0)
        .unwrap_or(false);
    if be32(24) == be32(92) && !wal_pending {
        let expected = be32(28) as u64 * page_size;
        if meta.len() < expected {
            return Err(Error::Corrupt {
                path: path.into(),
                reason: format!(
                    "truncated: {} bytes, its header says {expected}",
                    meta.len()
                ),
            });
        }
    }
    Ok(())
}

fn map_open_err(path: &Path, e: rusqlite::Error) -> Error {
    if let rusqlite::Error::SqliteFailure(f, _) = &e {
        match f.code {
            rusqlite::ErrorCode::NotADatabase => return not_a_vault(path, "not a SQLite database"),
            rusqlite::ErrorCode::DatabaseCorrupt => {
                return Error::Corrupt {
                    path: path.into(),
                    reason: e.to_string(),
                };
            }
            _ => {}
        }
    }
    Error::from(e)
}

impl Store {
    /// Creates a new, empty vault file; refuses to overwrite an existing file.
    pub fn create(path: &Path) -> Result<Store> {
        if path.exists() {
            return Err(Error::Exists(path.display().to_string()));
        }
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir).map_err(|e| Error::host(dir.display(), e))?;
        }
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.pragma_update(None, "application_id", APPLICATION_ID as i64)?;
        // Lets `gc` hand freed pages back to the file system (must precede any table).
        conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        let mut store = Store {
            conn,
            path: path.to_path_buf(),
        };
        store.configure()?;
        store.migrate()?;
        Ok(store)
    }

    /// Opens an existing vault. A file that is not a vault, is truncated or corrupt, or is
    /// of a newer format is refused with a clear error and left untouched.
    pub fn open(path: &Path) -> Result<Store> {
        check_header(path)?;
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| map_open_err(path, e))?;
        let mut store = Store {
            conn,
            path: path.to_path_buf(),
        };
        store.configure().map_err(|e| store.corrupt_if_sqlite(e))?;
        let version: i64 = store
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(|e| map_open_err(path, e))?;
        if version > FORMAT_VERSION {
            return Err(Error::TooNew {
                path: path.into(),
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        if version < FORMAT_VERSION {
            store.migrate()?;
        }
        Ok(store)
    }

    fn configure(&mut self) -> Result<()> {
        self.conn.busy_timeout(Duration::from_secs(30))?;
        self.conn.set_prepared_statement_cache_capacity(256);
        // Plans must not depend on bound values: otherwise SQLite re-prepares cached join
        // statements on every use (measured: 42% of a restore's instructions).
        self.conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
            true,
        )?;
        // Keep the -wal file between processes instead of deleting and recreating it on
        // every command (the last connection to close would remove it).
        persist_wal(&self.conn);
        // ...but keep it small: a large leftover WAL is re-read by every later command.
        self.conn
            .pragma_update(None, "journal_size_limit", 1_048_576)?;
        // Closing still checkpoints the WAL into the vault file: copying the .avfs file
        // alone must copy everything (the measured price: an fsync per command).
        self.conn.pragma_update(None, "journal_mode", "WAL")?;
        // NORMAL in WAL mode survives a killed process; fsync-class operations raise it to FULL.
        self.conn.pragma_update(None, "synchronous", "NORMAL")?;
        self.conn.pragma_update(None, "foreign_keys", false)?;
        self.conn.pragma_update(None, "cache_size", -32768)?;
        self.conn.pragma_update(None, "temp_store", "MEMORY")?;
        Ok(())
    }

    fn migrate(&mut self) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Exclusive)?;
        let version: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0))?;
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            tx.execute_batch(sql)?;
            tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Turns SQLite's corruption reports into a vault error naming this file.
    pub fn corrupt_if_sqlite(&self, e: Error) -> Error {
        match e {
            Error::Internal(msg) if msg.contains("malformed") || msg.contains("not a database") => {
                Error::Corrupt {
                    path: self.path.clone(),
                    reason: msg,
                }
            }
            Error::Corrupt { path, reason } if path.as_os_str().is_empty() => Error::Corrupt {
                path: self.path.clone(),
                reason,
            },
            other => other,
        }
    }

    /// Runs one cached statement that returns no rows (BEGIN, COMMIT, SAVEPOINT...).
    pub fn exec(conn: &Connection, sql: &str) -> Result<()> {
        conn.prepare_cached(sql)?.execute([])?;
        Ok(())
    }

    /// Runs `f` in an immediate (write) transaction; commits only when it returns Ok.
    pub fn write<T>(&mut self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        Self::exec(&self.conn, "BEGIN IMMEDIATE")?;
        match f(&self.conn) {
            Ok(v) => match Self::exec(&self.conn, "COMMIT") {
                Ok(()) => Ok(v),
                Err(e) => {
                    let _ = Self::exec(&self.conn, "ROLLBACK");
                    Err(self.corrupt_if_sqlite(e))
                }
            },
            Err(e) => {
                let _ = Self::exec(&self.conn, "ROLLBACK");
                Err(self.corrupt_if_sqlite(e))
            }
        }
    }

    /// Runs `f` in a read transaction: one consistent snapshot.
    pub fn read<T>(&mut self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        Self::exec(&self.conn, "BEGIN DEFERRED")?;
        let r = f(&self.conn);
        let _ = Self::exec(&self.conn, "ROLLBACK");
        r.map_err(|e| self.corrupt_if_sqlite(e))
    }
}

pub fn persist_wal(conn: &Connection) {
    let mut on: std::os::raw::c_int = 1;
    let main = c"main";
    // SAFETY: a valid connection handle, a NUL-terminated schema name and an int argument,
    // as SQLITE_FCNTL_PERSIST_WAL requires.
    unsafe {
        rusqlite::ffi::sqlite3_file_control(
            conn.handle(),
            main.as_ptr(),
            rusqlite::ffi::SQLITE_FCNTL_PERSIST_WAL,
            (&mut on as *mut std::os::raw::c_int).cast(),
        );
    }
}

pub fn meta_get(db: &Connection, key: &str) -> Result<Option<i64>> {
    Ok(db
        .prepare_cached("SELECT value FROM meta WHERE key = ?1")?
        .query_row([key], |r| r.get(0))
        .optional()?)
}

pub fn meta_set(db: &Connection, key: &str, value: i64) -> Result<()> {
    db.prepare_cached("INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)")?
        .execute(rusqlite::params![key, value])?;
    Ok(())
}

/// Allocates `n` consecutive values of a vault-wide counter.
pub fn counter_take(db: &Connection, key: &str, n: i64) -> Result<i64> {
    let cur = meta_get(db, key)?.unwrap_or(1);
    meta_set(db, key, cur + n)?;
    Ok(cur)
}

pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// A text value of the vault's settings (`meta`), if set.
pub fn meta_get_text(db: &Connection, key: &str) -> Result<Option<String>> {
    Ok(db
        .prepare_cached("SELECT value FROM meta WHERE key = ?1 AND typeof(value) = 'text'")?
        .query_row([key], |r| r.get(0))
        .optional()?)
}

pub fn meta_set_text(db: &Connection, key: &str, value: &str) -> Result<()> {
    db.prepare_cached("INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)")?
        .execute(rusqlite::params![key, value])?;
    Ok(())
}
