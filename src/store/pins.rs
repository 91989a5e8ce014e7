//! Roots a running command still needs, kept from space reclaim while it runs.
//!
//! `avfs exec` diffs the state before its run against the state after. Without a
//! checkpoint (a read-only command), the tree before is referenced only by the live
//! state, and whatever changes that state during the run (the FUSE engine's mount, a
//! mount of the same workspace) lets the next reclaim delete it: the change report then
//! failed with "missing tree". A pin is a `meta` row `pin.exec.<run id>` holding the
//! root's hex hash (no schema change); both collectors treat pinned roots as live. A
//! pin left by a killed run keeps only what it names, until `avfs gc` after a day.

use rusqlite::{Connection, params};

use super::objects::Hash;
use crate::error::Result;

const PREFIX: &str = "pin.exec.";
/// A pin older than this is taken to belong to a run that died: `avfs gc` drops it.
const STALE_NS: i64 = 24 * 3600 * 1_000_000_000;

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// Keeps `root` (and everything below it) while run `id` needs it.
pub fn pin(db: &Connection, id: &str, root: &Hash) -> Result<()> {
    db.prepare_cached("INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)")?
        .execute(params![
            format!("{PREFIX}{id}"),
            format!("{} {}", root.to_hex(), now_ns())
        ])?;
    Ok(())
}

/// Releases run `id`'s pin.
pub fn unpin(db: &Connection, id: &str) -> Result<()> {
    db.prepare_cached("DELETE FROM meta WHERE key = ?1")?
        .execute([format!("{PREFIX}{id}")])?;
    Ok(())
}

/// Every pinned root. With `drop_stale`, pins older than a day are removed instead.
pub fn roots(db: &Connection, drop_stale: bool) -> Result<Vec<Hash>> {
    let rows: Vec<(String, String)> = db
        .prepare_cached("SELECT key, CAST(value AS TEXT) FROM meta WHERE key LIKE 'pin.exec.%'")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let now = now_ns();
    let mut out = vec![];
    for (key, value) in rows {
        let mut words = value.split_whitespace();
        let hash = words.next().and_then(crate::util::hex32).map(Hash);
        let at: i64 = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
        if drop_stale && now.saturating_sub(at) > STALE_NS {
            db.prepare_cached("DELETE FROM meta WHERE key = ?1")?
                .execute([&key])?;
            continue;
        }
        out.extend(hash);
    }
    Ok(out)
}
