//! The vault file: opening and format checks, schema migrations, objects and audit rows.
//! Knows nothing about FUSE, processes or the command line.

pub mod approvals;
pub mod audit;
pub mod chunkdedupe;
pub mod content;
mod creating;
pub mod homedb;
pub mod missing;
pub mod objects;
pub mod packrecords;
pub mod pagesum;
pub mod pins;
pub mod quota;
pub mod schema;
mod schema_check;
pub mod scratch;
pub mod search_rows;
pub mod stamp;
mod treecodec;
pub mod upgrade;
pub mod verify;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior};

use crate::error::{Error, Result};
use schema::{APPLICATION_ID, FORMAT_VERSION, MIGRATIONS};

/// The page size of vaults made from now on (vaults made before keep theirs: SQLite
/// changes it only by a full VACUUM outside WAL mode). A file's content is stored as
/// 64 KiB chunks, and SQLite's cost of writing them goes with the number of pages: each
/// is a WAL frame (two `pwrite`s), read back and written again by the checkpoint.
/// Measured on tmpfs for 1 GiB of chunks in one transaction (docs/benchmarks.md,
/// "big-file ingest"): 4.6 s of CPU at 4 KiB pages, 2.7 s at 16 KiB, 2.2 s at 64 KiB; a
/// small transaction (a few rows) costs 0.15 ms, 0.22 ms and 0.69 ms. 16 KiB takes most
/// of the first gain for little of the second loss.
pub const PAGE_SIZE: i64 = 16 * 1024;

/// An open vault file.
pub struct Store {
    pub conn: Connection,
    pub path: PathBuf,
    /// Declared after `conn`, so it is dropped after the connection closed (and SQLite's
    /// last checkpoint wrote the file): it then records the file's stamp. `None` for a
    /// read-only open, which never writes.
    _guard: Option<stamp::Guard>,
    /// A read-only open's hold on the file's shared `-wal` and `-shm`, also dropped
    /// after the connection closed: the last one out removes them (`stamp::Hold`).
    _hold: Option<stamp::Hold>,
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
    match Error::from(e) {
        Error::Corrupt { reason, .. } => Error::Corrupt {
            path: path.into(),
            reason,
        },
        other => other,
    }
}

/// Percent-encodes a path for an SQLite `file:` URI.
fn uri_of(path: &Path, query: &str) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut s = String::from("file:");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-_.~".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s.push('?');
    s.push_str(query);
    s
}

/// Whether this process may write `path` (false on a read-only file system too).
fn writable(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// The check a file gets before its first write when avfs did not close it cleanly last:
/// everything `avfs vault verify` checks. Any problem refuses the write.
fn full_check(path: &Path) -> Result<()> {
    let mut store = Store::open_read(path)?;
    let report = store.read(verify::verify)?;
    if report.ok {
        return Ok(());
    }
    let mut shown: Vec<String> = report
        .problems
        .iter()
        .take(3)
        .map(|p| format!("{}: {}", p.object, p.message))
        .collect();
    if report.problems.len() > 3 {
        shown.push(format!("{} more", report.problems.len() - 3));
    }
    Err(Error::Corrupt {
        path: path.into(),
        reason: shown.join("; "),
    })
}

impl Store {
    /// Creates a new, empty vault file; refuses to overwrite an existing file.
    pub fn create(path: &Path) -> Result<Store> {
        Self::create_with(path, |_| Ok(()))
    }

    /// `create`, with `init` run on the new vault before it appears at `path`: what it
    /// writes is there from the first moment anyone can open the file (a clone marks
    /// itself incomplete this way, so a clone killed at any point can be resumed).
    pub fn create_with(path: &Path, init: impl FnOnce(&Connection) -> Result<()>) -> Result<Store> {
        if path.exists() {
            return Err(Error::Exists(path.display().to_string()));
        }
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir).map_err(|e| Error::host(dir.display(), e))?;
        }
        // The vault is made whole under a temporary name and then linked into place, so a
        // process killed while creating it leaves no half-made file at `path` (which the
        // next command would refuse as "not an avfs vault", and a resumed clone too).
        let tmp = creating::temp_name(path);
        creating::remove_stale(path);
        let made = Self::create_at(&tmp)
            .and_then(|mut s| s.write(init).map(|()| s))
            .and_then(|s| s.close_for_rename());
        let placed = made.and_then(|()| {
            std::fs::hard_link(&tmp, path).map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => Error::Exists(path.display().to_string()),
                _ => Error::host(path.display(), e),
            })
        });
        creating::remove(&tmp);
        placed?;
        Store::open(path)
    }

    /// Builds a new, empty vault at `path` (a temporary name: see `create`).
    fn create_at(path: &Path) -> Result<Store> {
        pagesum::register();
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        // First of all, `auto_vacuum` included: setting that on an empty file fixes the
        // page size at the default (measured: 4 KiB pages when set after it).
        conn.pragma_update(None, "page_size", PAGE_SIZE)?;
        // Page checksums (`pagesum`): 8 reserved bytes at the end of every page, set before
        // the first page is written (later, only a VACUUM can change it).
        pagesum::reserve_bytes(&conn);
        // Lets freed pages go back to the file system (`vacuum`). It must come before
        // anything is written to the file, the header included (application_id): set
        // later, it is silently ignored, as it was in vaults made before format 5.
        conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")?;
        conn.pragma_update(None, "application_id", APPLICATION_ID as i64)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        // No stamp guard: nobody else knows this temporary name, and its stamp would
        // only leave a stale entry in the registry.
        let mut store = Store {
            conn,
            path: path.to_path_buf(),
            _guard: None,
            _hold: None,
        };
        store.configure()?;
        store.migrate()?;
        Ok(store)
    }

    /// Moves everything from the -wal into the file and closes it, so the file alone
    /// is the vault and can be linked under another name.
    fn close_for_rename(self) -> Result<()> {
        self.conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        let Store { conn, .. } = self;
        conn.close().map_err(|(_, e)| Error::from(e))?;
        Ok(())
    }

    /// Opens an existing vault for writing. A file that is not a vault, is truncated or
    /// corrupt, or is of a newer format is refused with a clear error and left untouched.
    /// Before anything is written the file is established to be sound: at once when avfs
    /// closed it cleanly last (its stamp, see `stamp`), by a full check otherwise.
    pub fn open(path: &Path) -> Result<Store> {
        check_header(path)?;
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if !writable(path) || !writable(dir) {
            return Err(Error::Host {
                what: path.display().to_string(),
                message: "the vault file or its directory is read-only: commands that read \
                          work, this one writes (copy the file somewhere writable)"
                    .into(),
            });
        }
        let guard = stamp::Guard::take(path, || full_check(path))?;
        pagesum::register();
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| map_open_err(path, e))?;
        let mut store = Store {
            conn,
            path: path.to_path_buf(),
            _guard: Some(guard),
            _hold: None,
        };
        store.configure().map_err(|e| store.corrupt_if_sqlite(e))?;
        let version = store.format_version()?;
        if version < FORMAT_VERSION {
            store.migrate()?;
        }
        Ok(store)
    }

    /// Opens an existing vault for reading only: nothing is written to the file, no
    /// `-wal` or `-shm` file is left next to it, and it works on a read-only file, in a
    /// read-only directory or on read-only media. The schema is checked against the one
    /// its format defines; objects are checked against their hashes as they are read.
    ///
    /// How: when the file has a `-wal` and `-shm` this process may write (while another
    /// avfs process has the vault open), or has neither and its directory is writable
    /// (a vault at rest: the last process removed them, `stamp::tidy`), it is opened
    /// read-only the usual way, so writers in other processes are seen consistently;
    /// SQLite makes the side files it lacks and the read's hold (`stamp::Hold`) removes
    /// them after, if it is the last. Otherwise, with no pending `-wal` content, the
    /// file alone is the whole database and is opened `immutable` (no locks, no
    /// side files). A pending `-wal` that cannot be shared is read through SQLite's
    /// read-only WAL support, or refused with a clear error.
    pub fn open_read(path: &Path) -> Result<Store> {
        Self::open_read_inner(path, true)
    }

    /// `open_read` without refusing a damaged schema: for `vault verify` and `vault
    /// recover`, which report the damage and read what they still can.
    pub fn open_read_unchecked(path: &Path) -> Result<Store> {
        Self::open_read_inner(path, false)
    }

    fn open_read_inner(path: &Path, check_schema: bool) -> Result<Store> {
        check_header(path)?;
        let wal = stamp::sidecar(path, "-wal");
        let shm = stamp::sidecar(path, "-shm");
        // Taken before the side files are looked at, so none is removed meanwhile.
        let hold = stamp::Hold::take(path).ok();
        let wal_len = std::fs::metadata(&wal).map(|m| m.len()).ok();
        let shm_exists = shm.exists();
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let shared = (wal_len.is_some() && shm_exists && writable(&wal) && writable(&shm))
            // The last process out removed them (`stamp::tidy`): SQLite makes them again
            // while this reads, and the hold removes them after.
            || (hold.is_some()
                && wal_len.is_none()
                && !shm_exists
                && writable(dir)
                && writable(path));
        let query = if shared || wal_len.unwrap_or(0) > 0 {
            "mode=ro"
        } else {
            "mode=ro&immutable=1"
        };
        pagesum::register();
        let conn = Connection::open_with_flags(
            uri_of(path, query),
            OpenFlags::SQLITE_OPEN_READ_ONLY
                | OpenFlags::SQLITE_OPEN_URI
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| map_open_err(path, e))?;
        let store = Store {
            conn,
            path: path.to_path_buf(),
            _guard: None,
            _hold: match hold {
                Some(h) if !shared => {
                    h.release();
                    None
                }
                h => h,
            },
        };
        store
            .configure_read()
            .map_err(|e| store.corrupt_if_sqlite(e))?;
        let version = if check_schema {
            store.format_version()?
        } else {
            store
                .conn
                .pragma_query_value(None, "user_version", |r| r.get(0))
                .map_err(|e| map_open_err(path, e))?
        };
        // A damaged schema may not take the views: `verify` and `recover` read what they can.
        if let Err(e) = store.read_as_current_format(version)
            && check_schema
        {
            return Err(store.corrupt_if_sqlite(e));
        }
        Ok(store)
    }

    /// Lets the queries of the current format read an older file that a read must not
    /// upgrade: temporary views (in the connection's memory, never in the file) that
    /// shadow the older tables and give the columns added since their old-format
    /// values. The first command that writes upgrades the file for real (`migrate`).
    fn read_as_current_format(&self, version: i64) -> Result<()> {
        let mut views = Vec::new();
        if version < 5 {
            // Format 5: dense chunk lists are content format 0; no access time set.
            views.push("CREATE TEMP VIEW content AS SELECT *, 0 AS format FROM main.content;");
            views.push("CREATE TEMP VIEW inode AS SELECT *, NULL AS atime_ns FROM main.inode;");
        }
        if version < 6 {
            // Format 6: no audit head recorded.
            views.push(
                "CREATE TEMP VIEW workspace AS SELECT *, NULL AS audit_head FROM main.workspace;",
            );
            views.push(
                "CREATE TEMP VIEW checkpoint AS SELECT *, NULL AS audit_head FROM main.checkpoint;",
            );
        }
        if version < 7 {
            // Format 7: no remotes. Empty tables, so `remote list` and a lookup of a
            // promised object find nothing rather than fail.
            views.push(
                "CREATE TEMP TABLE remote (name TEXT PRIMARY KEY, url TEXT NOT NULL, created_at_ns INTEGER NOT NULL);
                 CREATE TEMP TABLE remote_pack (id INTEGER PRIMARY KEY, remote TEXT NOT NULL, index_name TEXT NOT NULL, pack_name TEXT NOT NULL, entries BLOB);
                 CREATE TEMP TABLE remote_object (hash BLOB NOT NULL, pack INTEGER NOT NULL, kind INTEGER NOT NULL, offset INTEGER NOT NULL, length INTEGER NOT NULL);
                 CREATE TEMP TABLE remote_ref (remote TEXT NOT NULL, name TEXT NOT NULL, head BLOB NOT NULL, updated_at_ns INTEGER NOT NULL);
                 CREATE TEMP TABLE checkpoint_object (hash BLOB PRIMARY KEY, data BLOB NOT NULL, checkpoint INTEGER UNIQUE);",
            );
        }
        if version == 7 {
            // Format 8: pack indexes as rows only (`catalog` reads them where `entries` is NULL).
            views.push(
                "CREATE TEMP VIEW remote_pack AS SELECT *, NULL AS entries FROM main.remote_pack;",
            );
        }
        if version < 9 {
            // Format 9: chunks may be compressed; older files hold them as they are.
            views.push("CREATE TEMP VIEW chunk AS SELECT *, 0 AS codec FROM main.chunk;");
        }
        if !views.is_empty() {
            self.conn.execute_batch(&views.concat())?;
        }
        Ok(())
    }

    /// The file's format version, after checking that its schema is the one that format
    /// defines (a damaged schema fails every later query in confusing ways).
    fn format_version(&self) -> Result<i64> {
        let app: i64 = self
            .conn
            .pragma_query_value(None, "application_id", |r| r.get(0))
            .map_err(|e| map_open_err(&self.path, e))?;
        if app as u32 != APPLICATION_ID {
            return Err(not_a_vault(
                &self.path,
                "a SQLite database of another program",
            ));
        }
        let version: i64 = self
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(|e| map_open_err(&self.path, e))?;
        if version > FORMAT_VERSION {
            return Err(Error::TooNew {
                path: self.path.clone(),
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let diffs = schema_check::differences(&self.conn, version)?;
        if !diffs.is_empty() {
            return Err(Error::Corrupt {
                path: self.path.clone(),
                reason: format!("its schema is damaged: {}", diffs.join("; ")),
            });
        }
        Ok(version)
    }

    /// What the file's schema lacks or has beyond what its format defines (for `verify`).
    pub fn schema_differences(db: &Connection) -> Result<Vec<String>> {
        let version: i64 = db.pragma_query_value(None, "user_version", |r| r.get(0))?;
        schema_check::differences(db, version)
    }

    fn configure_read(&self) -> Result<()> {
        self.conn.busy_timeout(Duration::from_secs(30))?;
        self.conn.set_prepared_statement_cache_capacity(256);
        self.conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
            true,
        )?;
        // Never remove a -wal file another process keeps.
        persist_wal(&self.conn);
        self.conn.pragma_update(None, "cache_size", -32768)?;
        // Scratch trees (`scratch`) live in memory.
        self.conn.pragma_update(None, "temp_store", "MEMORY")?;
        Ok(())
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
        // A read-only connection can only have written its private temp schema (scratch
        // trees a later read of this connection may still need): keep that.
        let end = if self._guard.is_none() {
            "COMMIT"
        } else {
            "ROLLBACK"
        };
        if Self::exec(&self.conn, end).is_err() {
            let _ = Self::exec(&self.conn, "ROLLBACK");
        }
        r.map_err(|e| self.corrupt_if_sqlite(e))
    }
}

/// Returns every free page to the file system (incremental auto-vacuum), so the file
/// shrinks to what it holds; returns the number of pages freed. Runs inside the caller's
/// transaction or on its own. The pragma frees pages as it is stepped, so it is stepped to
/// the end (a single step, as `execute_batch` does, frees at most one).
pub fn vacuum(conn: &Connection) -> Result<u64> {
    let free: i64 = conn.query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
    if free == 0 {
        return Ok(0);
    }
    let mut stmt = conn.prepare_cached("PRAGMA incremental_vacuum")?;
    let mut rows = stmt.query([])?;
    while rows.next()?.is_some() {}
    drop(rows);
    let after: i64 = conn.query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
    Ok((free - after).max(0) as u64)
}

/// Is the file set up to give free pages back (`vacuum`)? Vaults made before format 5 are
/// not; [`enable_incremental_vacuum`] converts them.
pub fn incremental_vacuum_on(conn: &Connection) -> Result<bool> {
    let mode: i64 = conn.query_row("PRAGMA auto_vacuum", [], |r| r.get(0))?;
    Ok(mode == 2)
}

/// Turns on incremental vacuum in a vault made before format 5: a full VACUUM, which
/// rewrites the file once (outside any transaction; `avfs gc` runs it).
pub fn enable_incremental_vacuum(conn: &Connection) -> Result<bool> {
    if incremental_vacuum_on(conn)? {
        return Ok(false);
    }
    conn.execute_batch("PRAGMA auto_vacuum = INCREMENTAL; VACUUM;")?;
    Ok(true)
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
