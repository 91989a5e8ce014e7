//! A run's ingest does not compress nor store again the chunks it already sent (a second
//! copy of a file) or that the vault already holds (a tree copied or extracted again):
//! `engine.ingest.chunks_reused` counts them, the vault stores each chunk once, every
//! file reads back byte-exact, and `vault verify` passes. Import takes the same path.

mod common;
#[path = "common/overlay.rs"]
mod overlay;

use std::collections::BTreeMap;
use std::path::Path;

use common::Env;
use overlay::{SH_ALLOWED as POLICY, ok_in, overlay_or_skip, setup_with};
use serde_json::Value;

const CHUNK: usize = 64 << 10;

/// Compressible, distinct text of `len` bytes (lines numbered from `seed`).
fn text(len: usize, seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 32);
    let mut i = seed;
    while out.len() < len {
        out.extend_from_slice(format!("line {i} of file {seed}: some words to pack\n").as_bytes());
        i += 1;
    }
    out.truncate(len);
    out
}

/// The host tree imported: files of one chunk, several, and more than the ingest sends
/// in one message (16 chunks), one below the size worth compressing, and `dup/`, a copy.
fn host_tree(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let files: BTreeMap<String, Vec<u8>> = [
        ("tiny", text(30, 1)),
        ("small", text(5_000, 2)),
        ("two", text(CHUNK + 100, 3)),
        ("big", text(20 * CHUNK + 7, 4)),
    ]
    .into_iter()
    .map(|(n, d)| (n.to_string(), d))
    .collect();
    let mut all = BTreeMap::new();
    for dir in ["orig", "dup"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
        for (n, d) in &files {
            std::fs::write(root.join(dir).join(n), d).unwrap();
            all.insert(format!("{dir}/{n}"), d.clone());
        }
    }
    all
}

fn chunks_of(files: &BTreeMap<String, Vec<u8>>) -> usize {
    files
        .iter()
        .filter(|(n, _)| n.starts_with("orig/"))
        .map(|(_, d)| d.len().div_ceil(CHUNK))
        .sum()
}

fn chunk_rows(env: &Env) -> i64 {
    let db = rusqlite::Connection::open(env.home().join("vaults/t.avfs")).unwrap();
    db.query_row("SELECT COUNT(*) FROM chunk", [], |r| r.get(0))
        .unwrap()
}

fn reused(v: &Value) -> u64 {
    v["engine"]["ingest"]["chunks_reused"]
        .as_u64()
        .unwrap_or_else(|| panic!("no ingest.chunks_reused: {}", v["engine"]))
}

/// Exports `path` of the workspace and checks every file against `want` (names relative
/// to `path`).
fn reads_back(env: &Env, path: &str, want: &BTreeMap<String, Vec<u8>>) {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let out = env.path(&format!("out{n}"));
    env.ok(&["--vault", "t", "export", path, out.to_str().unwrap()]);
    for (name, data) in want {
        let got = std::fs::read(out.join(name)).unwrap();
        assert!(got == *data, "{path}/{name} does not read back byte-exact");
    }
}

fn verify_ok(env: &Env) {
    let v = env.json(&["--vault", "t", "vault", "verify"]);
    assert_eq!(v["report"]["ok"], true, "vault verify: {v}");
}

#[test]
fn duplicates_and_content_the_vault_holds_are_stored_once_and_read_back() {
    if !overlay_or_skip("duplicates_and_content_the_vault_holds") {
        return;
    }
    let env = setup_with(POLICY);
    let host = env.path("host");
    let files = host_tree(&host);
    let distinct = chunks_of(&files) as i64;

    // Import: `dup/` repeats `orig/`, each chunk is stored once.
    let before = chunk_rows(&env);
    env.ok(&["--vault", "t", "import", host.to_str().unwrap(), "/src"]);
    assert_eq!(
        chunk_rows(&env) - before,
        distinct,
        "import stores each chunk once"
    );
    reads_back(&env, "/src", &files);
    // Imported again: every chunk is one the vault holds.
    env.ok(&["--vault", "t", "import", host.to_str().unwrap(), "/src2"]);
    assert_eq!(chunk_rows(&env) - before, distinct, "nothing stored again");
    reads_back(&env, "/src2", &files);

    // A run copies the tree twice: every chunk is one the vault holds (the first copy)
    // or one this ingest already sent (the second); none is stored again. Only the first
    // copy of a chunk under 64 bytes is neither (not worth a look-up: the tiny file and
    // big's 7-byte tail).
    let rows = chunk_rows(&env);
    let v = ok_in(&env, "t", &["--shell", "cp -r src c1 && cp -r src c2"]);
    let copied = 2 * 2 * chunks_of(&files) as u64; // 2 copies of orig/ and dup/
    assert_eq!(reused(&v), copied - 2, "{}", v["engine"]);
    assert_eq!(chunk_rows(&env), rows, "no chunk stored again");
    reads_back(&env, "/c1", &files);
    reads_back(&env, "/c2", &files);

    // New content written three times in one run: stored once, the other two copies'
    // chunks are reused.
    let seq: Vec<u8> = (1..=200_000u32)
        .flat_map(|i| format!("{i}\n").into_bytes())
        .collect();
    let n = seq.len().div_ceil(CHUNK);
    let rows = chunk_rows(&env);
    let v = ok_in(
        &env,
        "t",
        &[
            "--shell",
            "mkdir n && seq 1 200000 > n/x && cp n/x n/y && cp n/x n/z",
        ],
    );
    assert_eq!(reused(&v), 2 * n as u64, "{}", v["engine"]);
    assert_eq!(
        chunk_rows(&env) - rows,
        n as i64,
        "each new chunk stored once"
    );
    let want: BTreeMap<String, Vec<u8>> = ["x", "y", "z"]
        .into_iter()
        .map(|f| (f.to_string(), seq.clone()))
        .collect();
    reads_back(&env, "/n", &want);

    // The copies removed, n/x written again: its chunks are garbage now (held by no
    // checkpoint's tree but the runs', or reclaimed already); whether reused or stored
    // again, the file reads back and the vault verifies.
    ok_in(&env, "t", &["--shell", "rm -rf c1 c2 n"]);
    ok_in(&env, "t", &["--shell", "mkdir n && seq 1 200000 > n/x"]);
    let want: BTreeMap<String, Vec<u8>> = [("x".to_string(), seq)].into_iter().collect();
    reads_back(&env, "/n", &want);
    verify_ok(&env);
}
