//! The mount's `-wal` file: copying committed pages into the vault file (SQLite's WAL
//! checkpoint) off the request path, and a bound on the file's size that holds however
//! the threads are scheduled.
//!
//! By default SQLite checkpoints inside the commit that pushes the WAL past 1 000 pages:
//! in a mount that commit is some close(), which then pays for copying 4 MB and two
//! fsyncs (measured: 30 % of the server's CPU during `cargo build`, all of it on the
//! path of a process waiting for close() to return). So a thread of its own (`WalUpkeep`),
//! with a connection of its own, runs a PASSIVE checkpoint every `PERIOD`: it copies what
//! is committed while the requests go on, and waits for nobody.
//!
//! That thread alone does not bound the file: under load it may not run for a while, and
//! a writer that never finds every frame copied never starts the WAL over (measured: 15 to
//! 80 MB of WAL for an fsx-like workload on 1 MB of files). So the writer itself, after a
//! commit, empties the file once it passes `CAP_BYTES` (`cap`): the WAL is never larger
//! than that plus one transaction. The thread normally starts it over well before
//! (`RESTART_BYTES`), so the writer pays only when the thread fell behind.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{RecvTimeoutError, Sender, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::workspace::Store;

const PERIOD: Duration = Duration::from_millis(200);

/// The WAL size at which the mount's own connection checkpoints anyway (SQLite's
/// autocheckpoint, PASSIVE). `cap` acts first; this is the last resort should its `stat`
/// fail.
const BACKSTOP_BYTES: i64 = 64 << 20;

/// The WAL size past which the thread makes the next commit start the WAL over. A
/// PASSIVE checkpoint copies frames but never empties the WAL while requests keep
/// committing (SQLite starts over only at a write that finds every frame copied), so a
/// steady writer would grow it to `CAP_BYTES`, where the writer pays.
const RESTART_BYTES: i64 = 4 << 20;

/// The `-wal` file size past which the writer empties it itself, between two
/// transactions (`cap`). Twice the thread's threshold, so that the writer pays only when
/// the thread fell behind. Measured (docs/storage.md): with the writer at 8 MiB and the
/// thread at 4 MiB, `tar x` of 6 000 files made the writer empty it 16 to 20 times and
/// sync 1.5 to 4 times as often as before (4 KiB pages); at 16/8 MiB the fsx test's vault +
/// WAL peaked at 42 MB of its 50 MB bound under load, and with 16 KiB pages the vault file
/// alone peaks at 30 MB there (12/6 MiB: 43 MB on a quiet machine). So 8 MiB: what a user
/// sees on disk stays bounded first, the syncs cost the mount's writes a little.
pub const CAP_BYTES: u64 = 8 << 20;

/// A size in bytes as a count of the vault's pages (new vaults have
/// 16 KiB pages, older ones 4 KiB): SQLite counts the WAL in frames of one page.
fn in_pages(store: &Store, bytes: i64) -> i64 {
    let page: i64 = store
        .conn
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .unwrap_or(4096)
        .max(512);
    bytes / page
}

/// Sets the mount connection's own autocheckpoint to the backstop.
pub fn set_backstop(store: &Store) -> Result<()> {
    store
        .conn
        .pragma_update(None, "wal_autocheckpoint", in_pages(store, BACKSTOP_BYTES))?;
    Ok(())
}

/// How long emptying the WAL may keep trying while another checkpoint runs (the thread's,
/// or another process's): SQLite answers such a checkpoint busy at once, without waiting.
const EMPTY_PATIENCE: Duration = Duration::from_millis(250);

/// A RESTART checkpoint: waits briefly for the commit in progress, copies every frame and
/// holds the next writer back until it is done, so that writer starts the WAL over
/// (`journal_size_limit` then cuts the file back). Waiting is bounded: a busy mount just
/// tries again next period.
fn restart(store: &Store) {
    let _ = store.conn.busy_timeout(Duration::from_millis(100));
    let _ = store
        .conn
        .query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(()));
    let _ = store.conn.busy_timeout(Duration::ZERO);
}

/// The vault's `-wal` file.
fn wal_path(vault: &Path) -> PathBuf {
    let mut wal = vault.as_os_str().to_owned();
    wal.push("-wal");
    PathBuf::from(wal)
}

/// The writer's bound, called after each commit (no transaction open): past `CAP_BYTES`,
/// empty the WAL now. One `stat` when under it (about a microsecond). True when it did
/// (the mount counts these: `wal_truncate` in its counters).
pub fn cap(store: &Store) -> Result<bool> {
    match std::fs::metadata(wal_path(&store.path)) {
        Ok(m) if m.len() > CAP_BYTES => empty(store).map(|()| true),
        _ => Ok(false),
    }
}

/// Copies every committed page into the vault file and empties the `-wal` file (TRUNCATE),
/// waiting a moment at most for readers and for another checkpoint to end; a PASSIVE
/// checkpoint when they stay (another process reading an old snapshot keeps its frames:
/// SQLite cannot start the WAL over under a reader).
pub fn empty(store: &Store) -> Result<()> {
    let conn = &store.conn;
    conn.busy_timeout(Duration::from_millis(100))?;
    let deadline = Instant::now() + EMPTY_PATIENCE;
    let busy = loop {
        let busy: i64 = conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
            .unwrap_or(1);
        if busy == 0 || Instant::now() >= deadline {
            break busy;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    conn.busy_timeout(Duration::from_secs(30))?;
    if busy != 0 {
        conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))?;
    }
    Ok(())
}

/// Makes every committed transaction survive power loss. Commits run with
/// synchronous=NORMAL, which leaves the newest ones in the WAL file unsynced: syncing that
/// file is what synchronous=FULL would have done at commit (older frames already
/// checkpointed into the database file were synced by the checkpoint).
pub fn make_durable(store: &Store) -> Result<()> {
    match std::fs::File::open(wal_path(&store.path)) {
        Ok(f) => f
            .sync_data()
            .map_err(|e| Error::host("sync the vault's WAL", e)),
        // Not in WAL mode (or no WAL yet): a checkpoint syncs whatever there is.
        Err(_) => {
            store
                .conn
                .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))?;
            Ok(())
        }
    }
}

pub struct WalUpkeep {
    /// Dropping it ends the thread at once (an unmount must not wait out a period).
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl WalUpkeep {
    pub fn start(vault: &Path) -> Result<WalUpkeep> {
        let store = Store::open(vault)?;
        let restart_frames = in_pages(&store, RESTART_BYTES);
        // A busy checkpointer (another process's) means try again next period, not wait.
        store.conn.busy_timeout(Duration::ZERO)?;
        let (stop, stopped) = channel::<()>();
        let thread = std::thread::Builder::new()
            .name("avfs-wal".into())
            .spawn(move || {
                let mut wait = PERIOD;
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(wait) {
                    // Nothing new: SQLite sees it in the WAL index and returns at once.
                    let frames = store
                        .conn
                        .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get::<_, i64>(1))
                        .unwrap_or(0);
                    // A WAL that grew past a period's worth is being written fast: start it
                    // over and look again soon.
                    wait = PERIOD;
                    if frames > restart_frames {
                        restart(&store);
                        wait = PERIOD / 10;
                    }
                }
            })
            .map_err(|e| Error::host("starting the WAL thread", e))?;
        Ok(WalUpkeep {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for WalUpkeep {
    /// Ends the thread and closes its connection, so the mount's connection is the last
    /// one and its final checkpoint can empty the WAL.
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
