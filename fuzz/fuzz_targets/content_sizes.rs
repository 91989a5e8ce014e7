//! The sizes and offsets a mount's setattr, write and fallocate requests carry, applied to
//! a file's buffered content (`store::content::Patch`, what the mount uses): any u64, up to
//! 2^64 - 1. Nothing may panic or allocate in proportion to a size the input chose; past
//! the largest file size the answer is `file_too_large` (EFBIG).
#![no_main]

use agentvfs::error::Error;
use agentvfs::store::Store;
use agentvfs::store::content::{self, MAX_FILE_SIZE, Patch};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("avfs-fuzz-{}.avfs", std::process::id()));
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let store = Store::create(&path).unwrap();
    let db = &store.conn;
    let (empty, _) = content::write_bytes(db, b"").unwrap();
    let mut p = Patch::new(db, &empty, 0).unwrap();
    // Each operation: a kind byte, then two u64s (little-endian).
    for op in data.chunks_exact(17).take(64) {
        let a = u64::from_le_bytes(op[1..9].try_into().unwrap());
        let b = u64::from_le_bytes(op[9..17].try_into().unwrap());
        let r = match op[0] % 4 {
            0 => p.truncate(db, a),
            1 => p.write(db, a, &[op[0]; 7]),
            2 => p.punch(db, a, b),
            _ => p.read(db, a, (b % (1 << 20)) as usize).map(|_| ()),
        };
        match r {
            Ok(()) => assert!(p.size() <= MAX_FILE_SIZE),
            Err(Error::TooBig(_)) => {}
            Err(e) => panic!("unexpected error {e}"),
        }
        // A buffer never holds more than the blocks written (7 bytes at most each time).
        assert!(p.bytes() <= 64 * 2 * 65536);
    }
    let (h, size) = p.commit(db).unwrap();
    let ext = content::extents(db, &h, size).unwrap();
    assert!(ext.list.len() <= 128);
});
