//! Which chunks a store running on several threads need not compress: those it has
//! already sent on (a tree with a second copy of its files) and those the vault already
//! holds (a tree extracted again after a restore). Compressing them was most of what
//! compression added to a run's ingest (the engines benchmark's `tar x`).
//!
//! Neither kind loses its reference: the reading thread still lists the chunk in its
//! file's content; it only skips the chunk's compression (a chunk the vault holds) or
//! its row altogether (one this store already sent, which the writer inserts before the
//! content that references it is stored, or the whole store fails).
//!
//! A chunk the vault holds is looked up on a read connection of the thread's own (SQLite
//! connections are not shared between threads), which sees only committed rows. A space
//! reclaim may delete an unreferenced chunk between that lookup and the writer's
//! transaction, so the chunk's uncompressed bytes still go to the writer as a held row
//! ([`ChunkRow::held`]): the writer checks inside its transaction and stores them when
//! the chunk is gone. From then on the writer's own protection applies (the transaction
//! that references it, or the ingest's pin on its committed batches).

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use rusqlite::{Connection, OpenFlags};

use super::objects::{ChunkRow, Hash, Packing, compress_chunk, has_chunk, worth_compressing};

/// At most this many hashes are remembered as sent (about 20 MiB, the chunks of 32 GiB of
/// distinct data): a bigger store still skips what the vault holds, and duplicates
/// among what it remembered.
const SENT_MAX: usize = 1 << 19;

/// What the threads of one store share: the chunks sent so far, and where the vault is.
pub struct Dedupe {
    sent: Mutex<HashSet<Hash>>,
    /// The vault file, for the threads' read connections; `None` for a database with no
    /// file (only this store's own duplicates are skipped then).
    vault: Option<PathBuf>,
    /// Chunks not compressed: already sent, or held by the vault.
    reused: AtomicU64,
}

impl Dedupe {
    /// For a store writing through `db`.
    pub fn new(db: &Connection) -> Dedupe {
        Dedupe {
            sent: Mutex::new(HashSet::new()),
            vault: db.path().filter(|p| !p.is_empty()).map(PathBuf::from),
            reused: AtomicU64::new(0),
        }
    }

    /// Chunks not compressed so far: this store had already sent them, or the vault held
    /// them when looked up.
    pub fn reused(&self) -> u64 {
        self.reused.load(Ordering::Relaxed)
    }

    /// A reading thread's view (one per thread: it holds that thread's connection).
    pub fn reader(&self) -> Reader<'_> {
        Reader {
            shared: self,
            conn: None,
        }
    }
}

/// One thread's side of a [`Dedupe`].
pub struct Reader<'a> {
    shared: &'a Dedupe,
    /// Opened at the first chunk worth looking up; `Some(None)` when it could not be (then
    /// every chunk is compressed, as without this module).
    conn: Option<Option<Connection>>,
}

impl Reader<'_> {
    /// The row to send for chunk `hash` of `data`: `None` when this store already sent
    /// it, a held (uncompressed) row when the vault holds it, or the compressed row.
    pub fn row(&mut self, hash: Hash, data: Vec<u8>, packing: Packing) -> Option<ChunkRow> {
        let fresh = self
            .shared
            .sent
            .lock()
            .map(|mut s| {
                if s.contains(&hash) {
                    false
                } else {
                    if s.len() < SENT_MAX {
                        s.insert(hash);
                    }
                    true
                }
            })
            .unwrap_or(true);
        if !fresh {
            self.shared.reused.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        if worth_compressing(data.len()) && self.vault_has(&hash) {
            self.shared.reused.fetch_add(1, Ordering::Relaxed);
            return Some(ChunkRow::held(hash, data, packing));
        }
        let packed = compress_chunk(&data, packing);
        Some(ChunkRow::with(hash, data, packed))
    }

    /// Does the vault hold `hash` (as last committed)? An error reads as no: the chunk is
    /// then compressed and stored as it would be without the lookup.
    fn vault_has(&mut self, hash: &Hash) -> bool {
        let shared = self.shared;
        let conn = self
            .conn
            .get_or_insert_with(|| shared.vault.as_deref().and_then(open_reader));
        conn.as_ref()
            .is_some_and(|c| has_chunk(c, hash).unwrap_or(false))
    }
}

/// A read-only connection to the vault at `path`, for lookups by hash; the process already
/// has it open for writing (the checksum VFS is registered, the `-wal` exists).
fn open_reader(path: &std::path::Path) -> Option<Connection> {
    super::pagesum::register();
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .ok()?;
    // Never remove the -wal file the writer keeps (see `Store::configure`).
    super::persist_wal(&conn);
    conn.busy_timeout(std::time::Duration::from_secs(5)).ok()?;
    Some(conn)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use crate::store::objects::{get_chunk, put_chunk, put_chunk_row};

    fn text(n: usize, seed: u8) -> Vec<u8> {
        (0..n).map(|i| b'a' + ((i / 7) as u8 ^ seed) % 26).collect()
    }

    fn codec(db: &Connection, h: &Hash) -> i64 {
        db.query_row("SELECT codec FROM chunk WHERE hash = ?1", [&h.0[..]], |r| {
            r.get(0)
        })
        .unwrap()
    }

    /// A chunk the vault holds comes back held (not compressed), one already sent comes
    /// back as nothing, a new one compressed; each reader of the store sees what the
    /// others sent.
    #[test]
    fn sent_and_held_chunks_are_not_compressed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("v.avfs")).unwrap();
        let old = text(5000, 1);
        let old_hash = put_chunk(&store.conn, &old).unwrap();
        let new = text(5000, 2);
        let new_hash = Hash::of(&new);
        let d = Dedupe::new(&store.conn);
        let (mut a, mut b) = (d.reader(), d.reader());
        let held = a.row(old_hash, old.clone(), Packing::Fast).unwrap();
        assert!(!held.packed(), "the vault holds it: not compressed");
        let packed = b.row(new_hash, new.clone(), Packing::Fast).unwrap();
        assert!(packed.packed());
        assert!(
            a.row(new_hash, new, Packing::Fast).is_none(),
            "sent already"
        );
        assert!(
            b.row(old_hash, old, Packing::Fast).is_none(),
            "sent already"
        );
        assert_eq!(d.reused(), 3);
        // Stored, the rows hold what was read; the held one leaves the vault's row as is.
        let before = codec(&store.conn, &old_hash);
        put_chunk_row(&store.conn, &held).unwrap();
        put_chunk_row(&store.conn, &packed).unwrap();
        assert_eq!(codec(&store.conn, &old_hash), before);
        assert_eq!(get_chunk(&store.conn, &new_hash).unwrap(), text(5000, 2));
    }

    /// A held row whose chunk went between the look-up and the writer's insert (a space
    /// reclaim committed in between) is stored, compressed, from the bytes it carries: a
    /// reference to it never dangles.
    #[test]
    fn a_held_chunk_that_went_meanwhile_is_stored() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("v.avfs")).unwrap();
        let data = text(20_000, 3);
        let h = put_chunk(&store.conn, &data).unwrap();
        let d = Dedupe::new(&store.conn);
        let row = d.reader().row(h, data.clone(), Packing::Small).unwrap();
        assert!(!row.packed());
        store
            .conn
            .execute("DELETE FROM chunk WHERE hash = ?1", [&h.0[..]])
            .unwrap();
        put_chunk_row(&store.conn, &row).unwrap();
        assert_eq!(get_chunk(&store.conn, &h).unwrap(), data);
        assert_eq!(
            codec(&store.conn, &h),
            crate::store::objects::CODEC_ZSTD,
            "compressed as its packing says"
        );
    }
}
