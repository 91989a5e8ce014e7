//! Work the mount does besides answering requests, on its own thread (never on the
//! request path): space reclaim, and the audit rows of the mount session.
//!
//! A mount session writes `mount` when it starts, `mount.changes` (a tree diff between the
//! root last accounted for and the current one) every `AUDIT_EVERY`, when another avfs
//! process asks it to sync, and at unmount, and `unmount` at the end. So `avfs audit`
//! accounts for what processes changed through the mount, as it does for CLI commands.

use std::time::Duration;

use serde_json::json;

use rusqlite::Connection;

use super::{AvfsFs, End, State};
use crate::error::Result;
use crate::workspace::Store;
use crate::workspace::record;

/// How often the mount writes a `mount.changes` row while changes come in.
pub const AUDIT_EVERY: Duration = Duration::from_secs(60);

/// `AUDIT_EVERY`, or `AVFS_MOUNT_AUDIT_SECS` seconds when set (tests make the
/// background work run soon after a change).
pub fn audit_every() -> Duration {
    std::env::var("AVFS_MOUNT_AUDIT_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map_or(AUDIT_EVERY, Duration::from_secs_f64)
}
/// How often the mount gives idle memory back (`trim_memory`).
pub const TRIM_EVERY: Duration = Duration::from_secs(5);
/// How often the mount checks whether a space reclaim is due (two queries).
pub const RECLAIM_EVERY: Duration = Duration::from_millis(250);
/// File data a mount stores before its upkeep thread is woken to see whether a collection
/// is due, rather than at its next `RECLAIM_EVERY`: a writer rewriting files at 30 MB/s
/// made 8 MB of garbage between two periodic checks.
const COLLECT_NUDGE_BYTES: u64 = 4 << 20;
/// File data stored past which the writer itself looks, between two transactions (as it
/// bounds the WAL): the upkeep thread fell behind (a busy machine). Measured with the
/// fsx-like test (`tests/mountfs.rs`), periodic checks alone let the vault file reach
/// 30-36 MB on a quiet machine and 48 MB under load, for 1 MB of files.
const COLLECT_CAP_BYTES: u64 = 16 << 20;
/// At most this many paths are listed in one `mount.changes` row; the counts cover all.
const MAX_PATHS: usize = 200;

const ACTOR: &str = "mount";

impl AvfsFs {
    /// The `mount` row: the session starts from the workspace's current root.
    pub fn audit_start(&self, mountpoint: &std::path::Path, readonly: bool) -> Result<()> {
        self.with_commit("audit", End::Commit, |db, st| {
            let root = st.ws(db)?.flush()?;
            record(
                db,
                Some(&st.ws_name),
                ACTOR,
                "mount",
                &json!({"mountpoint": mountpoint, "root": root.to_hex(), "readonly": readonly,
                    "pid": std::process::id()}),
            )?;
            st.audited = Some(root);
            Ok(())
        })
    }

    /// A `mount.changes` row for what changed since the last one, if anything did.
    pub fn audit_changes(&self) -> Result<()> {
        self.with_commit("audit", End::Commit, |db, st| {
            let Some(from) = st.audited else {
                return Ok(());
            };
            let to = st.ws(db)?.flush()?;
            if to == from {
                return Ok(());
            }
            let changes = crate::diff::diff_roots(db, &from, &to)?;
            let summary = crate::diff::ChangeSummary::of(&changes);
            let paths: Vec<String> = changes
                .iter()
                .take(MAX_PATHS)
                .map(|c| format!("{} {}", c.kind.sigil(), c.path))
                .collect();
            record(
                db,
                Some(&st.ws_name),
                ACTOR,
                "mount.changes",
                &json!({"from": from.to_hex(), "to": to.to_hex(), "summary": summary,
                    "changes": paths, "truncated": changes.len() > MAX_PATHS}),
            )?;
            st.audited = Some(to);
            Ok(())
        })
    }

    /// The last `mount.changes` and the `unmount` row.
    pub fn audit_end(&self) -> Result<()> {
        self.audit_changes()?;
        self.with_commit("audit", End::Commit, |db, st| {
            if let Some(root) = st.audited {
                record(
                    db,
                    Some(&st.ws_name),
                    ACTOR,
                    "unmount",
                    &json!({"root": root.to_hex(), "pid": std::process::id()}),
                )?;
            }
            Ok(())
        })
    }

    /// Gives memory back while the mount is idle (no write buffers): the maps of what
    /// the kernel was told shrink to what they hold, SQLite drops the page cache it is
    /// not using, and the allocator returns freed pages to the system (glibc keeps them
    /// otherwise: a server that once buffered hundreds of MB kept that RSS for good).
    pub fn trim_memory(&self) {
        {
            let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            let (store, st) = &mut *guard;
            if !st.dirty.is_empty() {
                return;
            }
            st.dirty.shrink_to_fit();
            st.listings.shrink_to_fit();
            st.known.shrink_to_fit();
            st.lookups.shrink_to_fit();
            st.files.shrink_to_fit();
            st.gens.shrink_to_fit();
            st.open.shrink_to_fit();
            st.open_set.shrink_to_fit();
            st.writers.shrink_to_fit();
            st.forgotten.shrink_to_fit();
            let _ = store.conn.release_memory();
        }
        #[cfg(target_env = "gnu")]
        // SAFETY: malloc_trim only returns free heap memory to the system.
        unsafe {
            libc::malloc_trim(0);
        }
    }

    /// Collects young garbage when enough was stored since the last collection
    /// (`reclaim::due`), in a transaction of its own that commits at once. The freed pages
    /// stay in the file for the next writes (`reclaim::collect_young`); a lull gives them
    /// back.
    pub fn reclaim_if_due(&self) -> Result<Option<crate::reclaim::ReclaimReport>> {
        if self.readonly {
            return Ok(None);
        }
        self.with_commit("reclaim", End::Commit, |db, st| {
            st.stored = 0;
            collect_if_due(db)
        })
    }

    /// Has the mount stored enough since the last look for a collection to be worth
    /// checking now (`COLLECT_NUDGE_BYTES`)?
    pub fn collection_wanted(&self) -> bool {
        let guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        guard.1.stored >= COLLECT_NUDGE_BYTES
    }

    /// The writer's bound on garbage, after a commit (no transaction open, under the lock):
    /// wakes the upkeep thread once enough was stored, and collects itself past
    /// `COLLECT_CAP_BYTES` if one is due (counted as `reclaim_inline`, its time in
    /// `busy_ns`). A failed collection is only
    /// counted: the data is committed, and the next one tries again.
    pub(super) fn bound_garbage(&self, store: &Store, state: &mut State) {
        if state.stored < COLLECT_NUDGE_BYTES || self.readonly {
            return;
        }
        if state.stored < COLLECT_CAP_BYTES {
            self.wake.notify_all();
            return;
        }
        state.stored = 0;
        let started = std::time::Instant::now();
        let db = &store.conn;
        if Store::exec(db, "BEGIN IMMEDIATE").is_err() {
            return;
        }
        let (end, collected) = match collect_if_due(db) {
            Ok(report) => ("COMMIT", report.is_some()),
            Err(_) => ("ROLLBACK", false),
        };
        if Store::exec(db, end).is_err() {
            let _ = Store::exec(db, "ROLLBACK");
        }
        // Counted only when it collected; its time, look included, in any case.
        if collected {
            *state.counters.entry("reclaim_inline").or_default() += 1;
        }
        *state.busy_ns.entry("reclaim_inline").or_default() += started.elapsed().as_nanos() as u64;
    }

    /// When the mount has gone quiet: a collection if the last one kept rows only the
    /// live state referenced (`reclaim::kept_live`), so what deletions freed goes within
    /// seconds, not at the next writes that make a collection due or at unmount; and the
    /// free pages go back to the file system.
    pub fn reclaim_in_lull(&self) -> Result<Option<crate::reclaim::ReclaimReport>> {
        if self.readonly {
            return Ok(None);
        }
        self.with_commit("reclaim", End::Commit, |db, _| {
            if crate::reclaim::kept_live(db)? || crate::reclaim::due(db)? {
                Ok(Some(crate::reclaim::reclaim(db)?))
            } else {
                let pages_freed = crate::reclaim::give_back_pages(db)?;
                Ok((pages_freed > 0).then(|| crate::reclaim::ReclaimReport {
                    pages_freed,
                    ..Default::default()
                }))
            }
        })
    }

    /// A collection whether due or not (at unmount).
    pub fn reclaim_now(&self) -> Result<crate::reclaim::ReclaimReport> {
        self.with_commit("reclaim", End::Commit, |db, _| crate::reclaim::reclaim(db))
    }
}

/// A collection without giving pages back, if one is due.
fn collect_if_due(db: &Connection) -> Result<Option<crate::reclaim::ReclaimReport>> {
    if crate::reclaim::due(db)? {
        Ok(Some(crate::reclaim::collect_young(db)?))
    } else {
        Ok(None)
    }
}
