// The body of the `content_sizes` fuzz target, shared with its seeded run in
// tests/content_sizes.rs (both `include!` this file): the sizes and offsets a mount's
// setattr, write and fallocate requests carry (any u64), applied to a file's buffered
// content (`store::content::Patch`, what the mount uses). Panics on a broken property.

/// Applies the operations `data` encodes (17 bytes each: a kind byte, then two u64s,
/// little-endian; 64 at most) to an empty file in `store`, then stores it.
pub fn apply_size_ops(store: &agentvfs::store::Store, data: &[u8]) {
    use agentvfs::error::Error;
    use agentvfs::store::content::{self, MAX_FILE_SIZE, Patch};
    let db = &store.conn;
    let (empty, _) = content::write_bytes(db, b"").unwrap();
    let mut p = Patch::new(db, &empty, 0).unwrap();
    for op in data.chunks_exact(17).take(64) {
        let a = u64::from_le_bytes(op[1..9].try_into().unwrap());
        let b = u64::from_le_bytes(op[9..17].try_into().unwrap());
        let r = match op[0] % 4 {
            0 => p.truncate(db, a),
            1 => p.write(db, a, &[op[0]; 7]),
            2 => p.punch(db, a, b),
            _ => p.read(db, a, (b % (1 << 20)) as usize).map(|_| ()),
        };
        // Nothing may panic; past the largest file size the answer is `file_too_large`
        // (EFBIG), and the size never passes it.
        match r {
            Ok(()) => assert!(p.size() <= MAX_FILE_SIZE),
            Err(Error::TooBig(_)) => {}
            Err(e) => panic!("unexpected error {e}"),
        }
        // No allocation in proportion to a size: the buffer holds at most the blocks
        // written (7 bytes at most each time, so two blocks per operation).
        assert!(p.bytes() <= 64 * 2 * 65536);
    }
    let (h, size) = p.commit(db).unwrap();
    let ext = content::extents(db, &h, size).unwrap();
    assert!(ext.list.len() <= 128);
}
