//! The exec shell parser: any line parses or fails with an error, never a panic or a
//! stack overflow.
#![no_main]

use agentvfs::exec::shell;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(line) = std::str::from_utf8(data) {
        if let Ok(cmds) = shell::parse(line) {
            for c in &cmds {
                let _ = shell::shell_c_argument(&c.argv);
            }
        }
    }
});
