//! The ingest's content stored ahead, in commits of its own: kept from both collectors
//! until the ingest's transaction references it.

use super::*;
use crate::workspace::{Workspace, create_workspace};

/// Bytes that do not deduplicate (a xorshift stream).
fn noise(len: usize, mut x: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

#[test]
fn content_stored_ahead_survives_collections_until_the_ingest() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::create(&dir.path().join("v.avfs")).unwrap();
    let base = store
        .write(|db| {
            create_workspace(db, "main", None, None)?;
            Workspace::open(db, "main")?.flush()
        })
        .unwrap();
    let upper = dir.path().join("upper");
    fs::create_dir(&upper).unwrap();
    // 3 commits' worth in one file, and small files after it.
    let big = noise(3 * COMMIT_BYTES + 12_345, 7);
    fs::write(upper.join("big"), &big).unwrap();
    for i in 0..50 {
        fs::write(upper.join(format!("f{i:02}")), format!("{i}\n")).unwrap();
    }
    let stored = store_upper(&mut store, &upper, "test.ingest", None).unwrap();
    assert!(
        stored.pending.len() < (COMMIT_BYTES / CHUNK_SIZE) + 1,
        "all but the last partial batch is committed"
    );
    // Both collectors run between the commits and the ingest: nothing references the
    // committed chunks but the pin.
    store
        .write(|db| crate::reclaim::reclaim(db).map(|_| ()))
        .unwrap();
    store
        .write(|db| crate::reclaim::collect_all(db).map(|_| ()))
        .unwrap();
    let opts = IngestOptions {
        keep_owners: true,
        keep_setuid: false,
    };
    let ing = store
        .write(|db| {
            let i = ingest_stored(db, &base, stored, opts)?;
            crate::store::pins::unpin(db, "test.ingest")?;
            Ok(i)
        })
        .unwrap();
    assert_eq!(ing.files_read, 51);
    // Referenced by the new root now: a collection after the pin went keeps it too.
    store
        .write(|db| {
            Workspace::open(db, "main")?.set_root(&ing.root)?;
            crate::reclaim::collect_all(db).map(|_| ())
        })
        .unwrap();
    store
        .read(|db| {
            let tree = get_tree(db, &ing.root)?;
            let e = tree.entries.iter().find(|e| e.name == b"big").unwrap();
            let back = crate::store::content::read_all(db, &e.hash.unwrap(), e.size)?;
            assert!(back == big, "the big file reads back whole");
            let f = tree.entries.iter().find(|e| e.name == b"f49").unwrap();
            let back = crate::store::content::read_all(db, &f.hash.unwrap(), f.size)?;
            assert_eq!(back, b"49\n");
            Ok(())
        })
        .unwrap();
}
