//! Stored extent lists (`content.format = 1`): any bytes and size decode to a checked list
//! or an error, never a panic; a list that decodes has sorted blocks inside the size.
#![no_main]

use agentvfs::store::content::decode_row;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 9 {
        return;
    }
    let size = u64::from_le_bytes(data[..8].try_into().unwrap());
    let format = (data[8] % 3) as i64;
    if let Ok(ext) = decode_row(format, &data[9..], size) {
        let blocks = size.div_ceil(65536);
        assert!(ext.list.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(ext.list.iter().all(|(b, _)| *b < blocks));
    }
});
