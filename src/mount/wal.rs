//! Copying the mount's committed pages from the vault's `-wal` file into the vault file
//! (SQLite's WAL checkpoint) on a thread of its own, off the request path.
//!
//! By default SQLite checkpoints inside the commit that pushes the WAL past 1 000 pages:
//! in a mount that commit is some close(), which then pays for copying 4 MB and two
//! fsyncs (measured: 30 % of the server's CPU during `cargo build`, all of it on the
//! path of a process waiting for close() to return). The mount's own connection only
//! checkpoints past `BACKSTOP_PAGES` (in case this thread cannot keep up), and this
//! thread, with a connection of its own, runs a PASSIVE checkpoint every `PERIOD`: it
//! copies what is committed while the requests go on, and waits for nobody.

use std::path::Path;
use std::sync::mpsc::{RecvTimeoutError, Sender, channel};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::Result;
use crate::store::Store;

const PERIOD: Duration = Duration::from_millis(200);

/// The WAL size (in pages) at which the mount's own connection checkpoints anyway.
pub const BACKSTOP_PAGES: i64 = 4_096;

/// The WAL size (in pages) past which this thread makes the next commit start the WAL
/// over. A PASSIVE checkpoint copies frames but never empties the WAL while requests keep
/// committing (SQLite starts over only at a write that finds every frame copied), so
/// a steady writer grew it to the backstop (measured: 85 MB of vault and WAL for an
/// fsx-like workload on 1 MB of files).
const RESTART_PAGES: i64 = 2_048;

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

pub struct WalUpkeep {
    /// Dropping it ends the thread at once (an unmount must not wait out a period).
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl WalUpkeep {
    pub fn start(vault: &Path) -> Result<WalUpkeep> {
        let store = Store::open(vault)?;
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
                    if frames > RESTART_PAGES {
                        restart(&store);
                        wait = PERIOD / 10;
                    }
                }
            })
            .map_err(|e| crate::error::Error::host("starting the WAL thread", e))?;
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
