//! Stored chunks in any codec (as they are, LZ4, zstd): a damaged row decodes to at most
//! a chunk's bytes, or is an error.
#![no_main]

use agentvfs::store::objects::{CHUNK_SIZE, decode_chunk};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((codec, stored)) = data.split_first() else {
        return;
    };
    let codec = i64::from(*codec % 4);
    if let Ok(bytes) = decode_chunk(codec, stored.to_vec()) {
        assert!(codec == 0 || bytes.len() <= CHUNK_SIZE);
    }
});
