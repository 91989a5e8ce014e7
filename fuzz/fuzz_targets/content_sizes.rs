//! The sizes and offsets a mount's setattr, write and fallocate requests carry, applied to
//! a file's buffered content (`store::content::Patch`, what the mount uses): any u64, up to
//! 2^64 - 1. Nothing may panic or allocate in proportion to a size the input chose; past
//! the largest file size the answer is `file_too_large` (EFBIG). The body is shared with
//! the seeded run in tests/content_sizes.rs.
#![no_main]

use agentvfs::store::Store;
use libfuzzer_sys::fuzz_target;

include!("content_sizes_ops.rs");

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("avfs-fuzz-{}.avfs", std::process::id()));
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let store = Store::create(&path).unwrap();
    apply_size_ops(&store, data);
});
