//! Policy files (`$AVFS_HOME/policy.toml`): any bytes load or give an error, and the
//! inline examples of whatever loaded run without a panic.
#![no_main]

use std::sync::OnceLock;

use agentvfs::policy::Policy;
use libfuzzer_sys::fuzz_target;

fn path() -> &'static std::path::PathBuf {
    static P: OnceLock<std::path::PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        std::env::temp_dir().join(format!("avfs-fuzz-policy-{}.toml", std::process::id()))
    })
}

fuzz_target!(|data: &[u8]| {
    std::fs::write(path(), data).unwrap();
    if let Ok(p) = Policy::load(&[path().as_path()]) {
        let _ = p.test_examples();
        let _ = p.decide_shell("rm -rf build && cargo test", &[], None);
    }
});
