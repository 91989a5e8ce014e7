//! Stored file content lists (the chunk hashes of a file larger than one chunk).
#![no_main]

use agentvfs::store::objects::decode_chunk_list;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(list) = decode_chunk_list(data) {
        assert_eq!(list.len() * 32, data.len());
        let back: Vec<u8> = list.iter().flat_map(|h| h.0).collect();
        assert_eq!(back, data);
    }
});
