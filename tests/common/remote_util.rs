//! Helpers the remote tests share: a machine that reaches the S3 server, a project tree,
//! and comparing a vault's files with it.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

use super::common::Env;
use super::s3::S3;

/// A machine that reaches `s3` through `$AVFS_HOME/remotes.toml`.
pub fn machine(s3: &S3) -> Env {
    let env = Env::new();
    std::fs::create_dir_all(env.home()).unwrap();
    std::fs::write(
        env.home().join("remotes.toml"),
        format!(
            "[s3.default]\nendpoint = \"{}\"\nregion = \"us-east-1\"\naccess_key_id = \"{}\"\nsecret_access_key = \"{}\"\n",
            s3.endpoint(),
            super::s3::KEY_ID,
            super::s3::SECRET
        ),
    )
    .unwrap();
    env
}

/// A project tree on the host: small files in nested directories, a large file of
/// several chunks, an empty file, a symlink.
pub fn project(dir: &Path, files: usize) {
    for i in 0..files {
        let d = dir.join(format!("src/m{}", i % 7));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join(format!("f{i}.txt")),
            format!("file {i}\n").repeat(i % 5 + 1),
        )
        .unwrap();
    }
    let big: Vec<u8> = (0..700_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(dir.join("big.bin"), big).unwrap();
    std::fs::write(dir.join("empty"), b"").unwrap();
    std::os::unix::fs::symlink("src/m1/f1.txt", dir.join("link")).unwrap();
}

/// `len` bytes no compressor shrinks (xorshift), the same for a given `seed`.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ seed;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The vault's files, exported, are `original`'s.
pub fn exported_equals(env: &Env, vault: &str, original: &Path) {
    let out = env.path(&format!("export-{vault}"));
    env.ok(&["--vault", vault, "export", "/", out.to_str().unwrap()]);
    let d = Command::new("diff")
        .arg("-r")
        .arg("--no-dereference")
        .arg(original)
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        d.status.success(),
        "the clone differs from the original:\n{}",
        String::from_utf8_lossy(&d.stdout)
    );
}
