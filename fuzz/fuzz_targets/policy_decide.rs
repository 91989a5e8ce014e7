//! The built-in policy deciding on arbitrary shell lines (and the same bytes as an argv),
//! from a cwd given by the first input byte.
#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use agentvfs::policy::Policy;
use libfuzzer_sys::fuzz_target;

fn policy() -> &'static Policy {
    static P: OnceLock<Policy> = OnceLock::new();
    P.get_or_init(Policy::builtin)
}

fuzz_target!(|data: &[u8]| {
    let Some((&depth, rest)) = data.split_first() else {
        return;
    };
    let Ok(line) = std::str::from_utf8(rest) else {
        return;
    };
    let cwd: Vec<String> = (0..depth % 4).map(|i| format!("d{i}")).collect();
    let d = policy().decide_shell(line, &cwd, None);
    serde_json_check(&d);
    let argv: Vec<String> = line.split('\u{1f}').map(String::from).collect();
    let _ = policy().decide_argv(&argv, &cwd, Some(Path::new("/mnt/ws")));
});

fn serde_json_check(d: &agentvfs::policy::Decision) {
    // The decision goes into the envelope as JSON: it must serialize.
    serde_json::to_string(d).expect("a decision serializes");
}
