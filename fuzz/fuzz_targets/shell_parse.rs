//! The policy's shell parser: any line parses or fails with an error, never a panic, a
//! stack overflow or an allocation without bound (brush-parser's here-document loop,
//! `src/policy/shell_input.rs`).
#![no_main]

use agentvfs::policy::grammar;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(line) = std::str::from_utf8(data) {
        if let Ok(lowered) = grammar::parse(line) {
            // Every command it found has a program (argv[0]) or is an assignment.
            let _ = lowered.commands.len();
        }
    }
});
