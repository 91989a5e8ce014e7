//! Quotas and a full host disk, through the real binary.

mod common;
use common::*;

#[test]
fn quotas_are_enforced_on_cli_and_import_with_clear_messages() {
    let env = Env::new();
    env.ok(&["write", "/seed", "x"]);
    let q = env.json(&[
        "quota",
        "set",
        "--max-bytes",
        "100K",
        "--max-files",
        "5",
        "--max-file-size",
        "40K",
    ]);
    assert_eq!(q["quota"]["max_bytes"], 100 * 1024);
    let shown = env.json(&["quota"]);
    assert_eq!(shown["workspace_quota"]["max_files"], 5);
    assert_eq!(shown["usage"]["files"], 1);

    // Single file size.
    let r = env.run_stdin(&["--json", "write", "/big"], &vec![7u8; 50 * 1024]);
    assert_eq!(r.code, 1);
    let e = r.json()["error"].clone();
    assert_eq!(e["kind"], "quota_exceeded");
    assert!(
        e["message"].as_str().unwrap().contains("at most 40.0 KiB"),
        "{e}"
    );
    assert_eq!(
        env.json_err(&["cat", "/big"], 1)["kind"],
        "not_found",
        "a refused write leaves nothing behind"
    );

    // File count.
    for i in 0..4 {
        env.ok(&["write", &format!("/f{i}"), "data"]);
    }
    let e = env.json_err(&["write", "/f5", "data"], 1);
    assert_eq!(e["kind"], "quota_exceeded");
    assert!(e["message"].as_str().unwrap().contains("files"), "{e}");

    // Total bytes, through import: the whole import is refused.
    env.ok(&["rm", "/f0", "/f1", "/f2", "/f3"]);
    let host = env.path("host");
    std::fs::create_dir_all(&host).unwrap();
    for i in 0..3 {
        std::fs::write(host.join(format!("part{i}")), vec![i as u8 + 1; 39 * 1024]).unwrap();
    }
    let e = env.json_err(&["import", host.to_str().unwrap(), "/imported"], 1);
    assert_eq!(e["kind"], "quota_exceeded", "{e}");
    assert_eq!(env.json_err(&["ls", "/imported"], 1)["kind"], "not_found");

    // Raising or clearing the quota lets the same work through.
    env.json(&["quota", "set", "--max-bytes", "1M"]);
    env.json(&["import", host.to_str().unwrap(), "/imported"]);
    env.json(&["quota", "clear"]);
    assert_eq!(
        env.run_stdin(&["write", "/big"], &vec![7u8; 50 * 1024])
            .code,
        0
    );
    let audit = env.json(&["audit"]);
    assert!(
        audit["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["action"] == "quota.set")
    );
}

#[test]
fn vault_wide_quota_limits_the_file() {
    let env = Env::new();
    env.ok(&["write", "/seed", "x"]);
    env.json(&["quota", "set", "--vault-wide", "--max-bytes", "2M"]);
    let mut refused = false;
    for i in 0..20 {
        let data: Vec<u8> = (0..300_000u32)
            .map(|j| ((j * 31 + i * 7) % 251) as u8)
            .collect();
        let r = env.run_stdin(&["--json", "write", &format!("/blob{i}")], &data);
        if r.code != 0 {
            assert_eq!(r.json()["error"]["kind"], "quota_exceeded");
            refused = true;
            break;
        }
    }
    assert!(
        refused,
        "a 2 MiB vault quota must stop 6 MB of incompressible writes"
    );
    assert_eq!(env.json(&["vault", "verify"])["report"]["ok"], true);
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn full_host_disk_gives_enospc_and_the_vault_survives() {
    if !is_root() {
        eprintln!("skipped: needs root to mount a small tmpfs");
        return;
    }
    let env = Env::new();
    let small = env.path("small");
    std::fs::create_dir_all(&small).unwrap();
    let st = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=6m", "tmpfs"])
        .arg(&small)
        .status()
        .unwrap();
    assert!(st.success(), "mounting a tmpfs failed");
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.0)
                .status();
        }
    }
    let _guard = Unmount(small.clone());
    let vault = small.join("v.avfs");
    env.json(&["vault", "create", "tiny", "--path", vault.to_str().unwrap()]);
    env.ok(&["--vault", "tiny", "write", "/keep", "precious"]);
    // Leave about 1 MB free.
    let filler = small.join("filler");
    let free = {
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        let c = std::ffi::CString::new(small.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut s) }, 0);
        s.f_bavail * s.f_frsize
    };
    std::fs::write(&filler, vec![0u8; (free as usize).saturating_sub(1 << 20)]).unwrap();
    let mut saw_enospc = false;
    for i in 0..40 {
        let data: Vec<u8> = (0..200_000u32)
            .map(|j| ((j * 13 + i * 101) % 253) as u8)
            .collect();
        let r = env.run_stdin(
            &["--json", "--vault", "tiny", "write", &format!("/f{i}")],
            &data,
        );
        if r.code != 0 {
            assert_eq!(r.json()["error"]["kind"], "no_space", "{}", r.stdout);
            assert!(!r.stderr.contains("panicked"));
            saw_enospc = true;
            break;
        }
    }
    assert!(saw_enospc, "the disk never filled up");
    // Space comes back: the vault is consistent and usable.
    std::fs::remove_file(&filler).unwrap();
    assert_eq!(env.cat(Some("tiny"), "/keep"), "precious");
    env.ok(&["--vault", "tiny", "write", "/after", "works again"]);
    assert_eq!(env.json(&["vault", "verify", "tiny"])["report"]["ok"], true);
    assert_eq!(
        env.json(&["--vault", "tiny", "audit", "verify"])["ok"],
        true
    );
}
