//! The `content_sizes` fuzz target (fuzz/fuzz_targets/content_sizes.rs) as a seeded loop,
//! for machines without cargo-fuzz: the same body (`apply_size_ops`, shared), fed inputs
//! built around the sizes that matter (0, block and chunk edges, the largest file size and
//! its neighbours, 2^62, 2^63, 2^64 - 1) plus random ones, and byte-level mutations of them.
//!
//! `AVFS_FUZZ_ITERS` inputs (default 300); the ignored `content_sizes_long_run` runs for
//! `AVFS_FUZZ_SECS` seconds (default 300) and prints the count.

use agentvfs::store::Store;
use agentvfs::store::content::MAX_FILE_SIZE;

include!("../fuzz/fuzz_targets/content_sizes_ops.rs");

/// xorshift64*: deterministic for a seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A size or offset: mostly one that sits on an edge, sometimes any u64.
fn size(rng: &mut Rng) -> u64 {
    const EDGES: [u64; 12] = [
        0,
        1,
        4095,
        65535,
        65536,
        65537,
        MAX_FILE_SIZE - 1,
        MAX_FILE_SIZE,
        MAX_FILE_SIZE + 1,
        1 << 62,
        1 << 63,
        u64::MAX,
    ];
    match rng.below(4) {
        0 => EDGES[rng.below(EDGES.len() as u64) as usize],
        1 => {
            EDGES[rng.below(EDGES.len() as u64) as usize].wrapping_add(rng.below(9).wrapping_sub(4))
        }
        2 => rng.below(4 << 20),
        _ => rng.next(),
    }
}

/// One input: up to 64 operations of 17 bytes, sometimes mutated byte by byte (and so
/// with a truncated last operation), as a fuzzer would.
fn input(rng: &mut Rng) -> Vec<u8> {
    let mut data = Vec::new();
    for _ in 0..=rng.below(64) {
        data.push(rng.next() as u8);
        data.extend_from_slice(&size(rng).to_le_bytes());
        data.extend_from_slice(&size(rng).to_le_bytes());
    }
    if rng.below(3) == 0 {
        for _ in 0..=rng.below(8) {
            let i = rng.below(data.len() as u64) as usize;
            data[i] ^= 1 << rng.below(8);
        }
        data.truncate(data.len() - rng.below(17) as usize);
    }
    data
}

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::create(&dir.path().join("sizes.avfs")).unwrap();
    (dir, s)
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

#[test]
fn content_sizes_survive_seeded_inputs() {
    let (_dir, store) = store();
    let n = env_u64("AVFS_FUZZ_ITERS", 300);
    let mut rng = Rng(0x5eed_0015);
    for _ in 0..n {
        apply_size_ops(&store, &input(&mut rng));
    }
    println!(
        "RELIABILITY|content_sizes|fuzz|seeded inputs to the `content_sizes` fuzz target's body (setattr/write/punch/read sizes and offsets on a mount's write buffer)|{n}|0 panics, no allocation in proportion to a size, EFBIG past the largest file"
    );
}

#[test]
#[ignore = "long: AVFS_FUZZ_SECS seconds of inputs (scripts/reliability.sh --long)"]
fn content_sizes_long_run() {
    let (_dir, store) = store();
    let secs = env_u64("AVFS_FUZZ_SECS", 300);
    let seed = env_u64("AVFS_FUZZ_SEED", 0x5eed_0015);
    let mut rng = Rng(seed | 1);
    let end = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    let mut n = 0u64;
    while std::time::Instant::now() < end {
        apply_size_ops(&store, &input(&mut rng));
        n += 1;
    }
    println!(
        "RELIABILITY|content_sizes|fuzz|{secs} s of seeded inputs (seed {seed:#x}) to the `content_sizes` fuzz target's body|{n}|0 panics"
    );
}
