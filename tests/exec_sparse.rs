//! Sparse files through `avfs exec`: a run that makes a 64 GiB file holding one byte
//! reads that byte's block, not 64 GiB; the workspace's kept overlay does not read the
//! file again on later runs; export writes it back with its holes.

mod common;
#[path = "common/overlay.rs"]
mod overlay;

use std::os::unix::fs::MetadataExt;

use overlay::{SH_ALLOWED as POLICY, ok_in, overlay_or_skip, setup_with};
use serde_json::Value;

const SIZE: u64 = 64 << 30;

fn ingest(v: &Value) -> (u64, u64, u64) {
    let i = &v["engine"]["ingest"];
    (
        i["files_read"].as_u64().unwrap(),
        i["bytes_read"].as_u64().unwrap(),
        i["files_unchanged"].as_u64().unwrap_or(0),
    )
}

#[test]
fn a_sparse_file_is_read_by_its_data_and_not_again_by_later_runs() {
    if !overlay_or_skip("a_sparse_file_is_read_by_its_data") {
        return;
    }
    let env = setup_with(POLICY);
    let script = format!(
        "truncate -s {SIZE} big && printf x | dd of=big bs=1 seek={} conv=notrunc status=none",
        SIZE - 1
    );
    let v = ok_in(&env, "t", &["--shell", &script]);
    let (files, bytes, _) = ingest(&v);
    assert_eq!(files, 1, "{}", v["engine"]);
    assert!(
        bytes <= 64 << 10,
        "only the block holding data is read: {}",
        v["engine"]
    );
    let size = env.json(&["--vault", "t", "stat", "/big"]);
    assert!(size.to_string().contains(&SIZE.to_string()), "stat: {size}");

    // Later runs in the kept overlay do not read the unchanged file again.
    for _ in 0..2 {
        let v = ok_in(&env, "t", &["--", "true"]);
        assert_eq!(v["engine"]["layers"]["how"], "kept", "{}", v["engine"]);
        let (files, bytes, unchanged) = ingest(&v);
        assert_eq!((files, bytes, unchanged), (0, 0, 1), "{}", v["engine"]);
    }
    // A change to it is seen (and read again, by its data only).
    let v = ok_in(
        &env,
        "t",
        &[
            "--shell",
            "printf y | dd of=big bs=1 seek=0 conv=notrunc status=none",
        ],
    );
    let (files, bytes, unchanged) = ingest(&v);
    assert_eq!((files, unchanged), (1, 0), "{}", v["engine"]);
    assert!(bytes <= 128 << 10, "{}", v["engine"]);
    let v = ok_in(&env, "t", &["--shell", "head -c 1 big; tail -c 1 big"]);
    assert_eq!(overlay::stdout(&v), "yx");

    // Export writes holes: the host file is as large and holds two blocks' worth.
    let out = env.path("out");
    env.ok(&["--vault", "t", "export", "/big", out.to_str().unwrap()]);
    let m = std::fs::metadata(&out).unwrap();
    assert_eq!(m.len(), SIZE);
    assert!(
        m.blocks() * 512 <= 1 << 20,
        "export is sparse: {} blocks",
        m.blocks()
    );
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(&out).unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, SIZE - 1).unwrap();
    assert_eq!(&b, b"x");
    f.read_exact_at(&mut b, 0).unwrap();
    assert_eq!(&b, b"y");
    f.read_exact_at(&mut b, SIZE / 2).unwrap();
    assert_eq!(&b, b"\0");
}

#[test]
fn an_unchanged_kept_file_is_read_again_when_its_attributes_change() {
    if !overlay_or_skip("an_unchanged_kept_file_is_read_again") {
        return;
    }
    let env = setup_with(POLICY);
    ok_in(&env, "t", &["--shell", "echo one > a && echo two > b"]);
    let v = ok_in(&env, "t", &["--", "true"]);
    assert_eq!(ingest(&v), (0, 0, 2), "{}", v["engine"]);
    // Same size, same mtime, new content: ctime tells.
    let v = ok_in(
        &env,
        "t",
        &[
            "--shell",
            "t=$(stat -c %y a); echo ONE > a; touch -d \"$t\" a",
        ],
    );
    assert_eq!(ingest(&v).0, 1, "{}", v["engine"]);
    assert_eq!(env.cat(Some("t"), "/a"), "ONE\n");
    let v = ok_in(&env, "t", &["--shell", "chmod 600 b"]);
    assert_eq!(ingest(&v).0, 1, "{}", v["engine"]);
    let v = ok_in(&env, "t", &["--", "true"]);
    assert_eq!(ingest(&v), (0, 0, 2), "{}", v["engine"]);
}
