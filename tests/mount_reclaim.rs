//! Space reclaim on a live mount (issue 30: deleted data reclaimed within seconds of the
//! writes that freed it), on a real FUSE mount. Needs /dev/fuse; fails instead of skipping
//! with `AVFS_REQUIRE_FUSE=1`.

mod common;
#[path = "common/fuse.rs"]
mod fuse;

use std::time::{Duration, Instant};

use fuse::{Mount, Rng};

/// Issue 30: what deletions in a mount free goes while the mount stays up, though a
/// deletion stores nothing that would make a collection due: the mount collects once it
/// goes quiet. (The deadline is generous; the lull comes 5 to 10 s after the last request.)
#[test]
fn deleted_files_give_space_back_while_the_mount_stays_up() {
    let Some(m) = Mount::new("deleted_files_give_space_back_while_the_mount_stays_up") else {
        return;
    };
    let mut rng = Rng::new(30);
    for i in 0..40 {
        let blob: Vec<u8> = (0..1 << 20).map(|_| rng.next() as u8).collect();
        std::fs::write(m.p(&format!("f{i}")), blob).unwrap();
    }
    let file = m
        .env
        .home()
        .join("vaults")
        .join(format!("{}.avfs", m.vault));
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::metadata(&file).unwrap().len() < 40 << 20 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    let with = std::fs::metadata(&file).unwrap().len();
    assert!(with >= 40 << 20, "40 MiB written: a {with}-byte vault");
    for i in 0..40 {
        std::fs::remove_file(m.p(&format!("f{i}"))).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut now = with;
    while now > 8 << 20 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        now = std::fs::metadata(&file).unwrap().len();
    }
    assert!(
        now <= 8 << 20,
        "40 MiB deleted in a mount that stays up: {with} -> {now} bytes after 60 s"
    );
    assert!(std::fs::read_dir(&m.mp).is_ok(), "the mount still answers");
}
