//! Quotas and a full host disk, through the real binary: the CLI, import, a real mount
//! (EDQUOT) and exec.
#![allow(clippy::macro_metavars_in_unsafe)]

mod common;
#[allow(unused_macros, unused_imports)]
#[macro_use]
#[path = "common/fuse.rs"]
mod fuse;

use common::*;
use fuse::{Mount, open};

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
    report(
        "CLI `write` and `import` over the workspace's file size, file count and total bytes",
        3,
        "exit 1, quota_exceeded naming the limit; nothing written (an import refused whole); a raised or cleared limit lets the same work through",
    );
}

/// One line for the reliability table (collected by scripts/reliability.sh).
fn report(what: &str, times: u64, held: &str) {
    eprintln!("RELIABILITY|limits_cli|quota|{what}|{times}|{held}");
}

#[test]
fn vault_wide_quota_limits_the_file() {
    let env = Env::new();
    env.ok(&["write", "/seed", "x"]);
    env.json(&["quota", "set", "--vault-wide", "--max-bytes", "2M"]);
    let mut refused = false;
    for i in 0..20 {
        let data = noise(300_000, i);
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
        let data = noise(200_000, i);
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

fn edquot<T: std::fmt::Debug>(r: Result<T, i32>, what: &str) {
    assert_eq!(r.as_ref().err(), Some(&libc::EDQUOT), "{what}: {r:?}");
}

fn io_edquot<T: std::fmt::Debug>(r: std::io::Result<T>, what: &str) {
    edquot(fuse::en(r), what)
}

/// Writes a whole file and closes it, with the close's result (std's File ignores it).
fn write_close(path: &std::path::Path, data: &[u8]) -> Result<(), i32> {
    let f = open(path, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, 0o644)?;
    f.write(data)?;
    f.close()
}

fn quota_usage(m: &Mount) -> (u64, u64) {
    let q = m.avfs_json(&["quota"]);
    (
        q["usage"]["files"].as_u64().unwrap(),
        q["usage"]["bytes"].as_u64().unwrap(),
    )
}

/// Every limit through a real mount: the kernel request that would exceed it fails with
/// EDQUOT, nothing over the limit is stored, the mount shows what is stored, and freeing
/// room (rm, truncate, a raised limit) lets writes through again at once.
#[test]
fn quotas_are_enforced_through_the_mount() {
    let Some(mut m) = Mount::new("quotas_are_enforced_through_the_mount") else {
        return;
    };
    m.avfs(&[
        "quota",
        "set",
        "--max-files",
        "4",
        "--max-bytes",
        "100K",
        "--max-file-size",
        "40K",
    ]);
    // File count: regular files, fifos, symlinks and hard links are names; directories are not.
    std::fs::write(m.p("a"), vec![1u8; 30_000]).unwrap();
    std::fs::create_dir(m.p("dir")).unwrap();
    std::fs::write(m.p("dir/b"), vec![2u8; 30_000]).unwrap();
    std::os::unix::fs::symlink("a", m.p("link")).unwrap();
    std::fs::write(m.p("c"), b"").unwrap();
    assert_eq!(quota_usage(&m), (4, 60_001));
    edquot(write_close(&m.p("d"), b"x"), "create over the file count");
    io_edquot(
        std::os::unix::fs::symlink("a", m.p("l2")),
        "symlink over the count",
    );
    io_edquot(
        std::fs::hard_link(m.p("a"), m.p("h2")),
        "link over the count",
    );
    let fifo = fuse::cs(&m.p("fifo"));
    edquot(
        sc!(libc::mkfifo(fifo.as_ptr(), 0o644)),
        "mkfifo over the count",
    );
    std::fs::create_dir(m.p("dir2")).unwrap();
    assert!(!m.p("d").exists());
    // Removing a name makes room at once; so does a rename over another name.
    std::fs::remove_file(m.p("c")).unwrap();
    std::fs::write(m.p("d"), b"d").unwrap();
    edquot(write_close(&m.p("e"), b"e"), "create over the count again");
    std::fs::rename(m.p("d"), m.p("link")).unwrap();
    std::fs::write(m.p("e"), b"e").unwrap();
    assert_eq!(quota_usage(&m), (4, 60_002));

    // Single file size: refused at the write itself (the mount has no writeback cache),
    // so a program learns it where it writes; the close then succeeds, and the vault and
    // the mount keep the file as it was.
    let f = open(&m.p("e"), libc::O_WRONLY, 0).unwrap();
    edquot(
        f.write(&[3u8; 41 * 1024]).map(|n| n as i64),
        "write of a file over the size limit",
    );
    f.close().unwrap();
    assert_eq!(m.avfs_cat("/e"), b"e");
    assert_eq!(std::fs::read(m.p("e")).unwrap(), b"e");
    let f = open(&m.p("e"), libc::O_WRONLY, 0).unwrap();
    edquot(
        f.pwrite(&vec![4u8; 45_000], 0).map(|n| n as i64),
        "pwrite over the size limit",
    );
    f.fsync().unwrap();
    f.close().unwrap();
    assert_eq!(m.avfs_cat("/e"), b"e");
    let f = open(&m.p("e"), libc::O_WRONLY, 0).unwrap();
    edquot(f.ftruncate(50_000), "ftruncate over the size limit");
    drop(f);
    let f = open(&m.p("e"), libc::O_WRONLY | libc::O_DIRECT, 0).unwrap();
    let layout = std::alloc::Layout::from_size_align(64 * 1024, 4096).unwrap();
    // SAFETY: an aligned buffer for O_DIRECT, freed below.
    let buf = unsafe { std::alloc::alloc_zeroed(layout) };
    let r = sc!(libc::pwrite(f.0, buf.cast(), 64 * 1024, 0));
    unsafe { std::alloc::dealloc(buf, layout) };
    edquot(r, "O_DIRECT write over the size limit");
    drop(f);
    assert_eq!(m.avfs_cat("/e"), b"e");

    // Total bytes: 60 002 stored; 39 000 more fit, 41 000 more do not.
    std::fs::write(m.p("e"), vec![5u8; 39_000]).unwrap();
    assert_eq!(quota_usage(&m), (4, 99_001));
    let f = open(&m.p("link"), libc::O_WRONLY, 0).unwrap();
    edquot(f.write(&[6u8; 5_000]), "write over the byte limit");
    f.close().unwrap();
    assert_eq!(m.avfs_cat("/link"), b"d");
    let f = open(&m.p("link"), libc::O_WRONLY, 0).unwrap();
    edquot(f.ftruncate(5_000), "ftruncate over the byte limit");
    drop(f);
    // A smaller file makes room.
    std::fs::write(m.p("a"), vec![1u8; 10_000]).unwrap();
    std::fs::write(m.p("link"), vec![6u8; 20_000]).unwrap();
    assert_eq!(quota_usage(&m), (4, 99_000));

    // A raised limit holds at once (the mount reads limits per transaction).
    m.avfs(&["quota", "set", "--max-files", "10", "--max-bytes", "1M"]);
    std::fs::write(m.p("f"), vec![7u8; 39_000]).unwrap();
    std::fs::hard_link(m.p("f"), m.p("dir/f2")).unwrap();
    assert_eq!(quota_usage(&m), (6, 177_000));
    // Usage the mount kept in memory agrees with the vault after a remount, and with the CLI.
    m.remount();
    assert_eq!(quota_usage(&m), (6, 177_000));
    m.avfs(&["quota", "set", "--max-files", "6"]);
    edquot(
        write_close(&m.p("g"), b"g"),
        "create at the limit after a remount",
    );
    for (path, want) in [
        ("a", vec![1u8; 10_000]),
        ("link", vec![6u8; 20_000]),
        ("e", vec![5u8; 39_000]),
    ] {
        assert_eq!(std::fs::read(m.p(path)).unwrap(), want, "{path}");
        assert_eq!(m.avfs_cat(&format!("/{path}")), want, "{path}");
    }
    assert_eq!(m.avfs_json(&["vault", "verify"])["report"]["ok"], true);
    assert_eq!(m.avfs_json(&["audit", "verify"])["ok"], true);
    report(
        "through a mount: create/symlink/link/mkfifo over the file count; write, pwrite, ftruncate and O_DIRECT writes over the file size and the total bytes",
        14,
        "every one EDQUOT at the call itself (close and fsync then succeed); the vault keeps what it had and the mount shows that, not the refused bytes; rm, rename over a name, a smaller file and a raised limit make room at once; usage kept in memory = the CLI's after a remount; verify + audit ok",
    );
}

/// The vault-wide file-count limit and the vault file's size, through the mount.
#[test]
fn vault_wide_quotas_hold_in_the_mount() {
    let Some(m) = Mount::new("vault_wide_quotas_hold_in_the_mount") else {
        return;
    };
    m.avfs(&[
        "quota",
        "set",
        "--vault-wide",
        "--max-files",
        "3",
        "--max-bytes",
        "3M",
    ]);
    for i in 0..3 {
        std::fs::write(m.p(&format!("f{i}")), b"x").unwrap();
    }
    edquot(
        write_close(&m.p("f3"), b"x"),
        "create over the vault's per-workspace count",
    );
    let mut refused = false;
    for i in 0..3 {
        let data = noise(1_500_000, i);
        if let Err(e) = write_close(&m.p(&format!("f{i}")), &data) {
            assert_eq!(e, libc::EDQUOT);
            refused = true;
            break;
        }
    }
    assert!(
        refused,
        "a 3 MiB vault must stop 4.5 MB of incompressible writes"
    );
    assert_eq!(m.avfs_json(&["vault", "verify"])["report"]["ok"], true);
    report(
        "through a mount: the vault-wide file count and vault file size",
        2,
        "EDQUOT at create / close; verify ok",
    );
}

/// exec writes through the mount: the command sees EDQUOT, the envelope names the quota,
/// and nothing over it is stored.
#[test]
fn exec_reports_quota_refusals_with_the_quota() {
    if !fuse::fuse_or_skip("exec_reports_quota_refusals_with_the_quota") {
        return;
    }
    let env = Env::new();
    env.ok(&["vault", "create", "t"]);
    env.ok(&[
        "--vault",
        "t",
        "quota",
        "set",
        "--max-files",
        "2",
        "--max-file-size",
        "10K",
    ]);
    // The FUSE engine refuses each write over a quota as it happens.
    let r = env.run(&[
        "--json",
        "--vault",
        "t",
        "exec",
        "--engine",
        "fuse",
        "--shell",
        "echo 1 > a; echo 2 > b; echo 3 > c; head -c 20000 /dev/zero >> a",
    ]);
    let v = r.json();
    assert_ne!(v["exit_code"], 0, "{v}");
    let res = &v["result"];
    assert!(
        res["stderr"]
            .as_str()
            .unwrap()
            .contains("Disk quota exceeded"),
        "{res}"
    );
    // c's create and a's close at least (head may report more).
    assert!(
        res["quota_refused"]["refusals"].as_u64().unwrap() >= 2,
        "{res}"
    );
    let msg = res["quota_refused"]["message"].as_str().unwrap();
    assert!(msg.contains("at most 10.0 KiB"), "{msg}");
    let kinds: Vec<&str> = v["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["/a", "/b"], "{v}");
    // `head` writes in pieces: those within the limit are kept (as on ext4 under a
    // quota), the one that would pass it is refused.
    let a = env.cat(Some("t"), "/a");
    assert!(
        a.starts_with("1\n") && a.len() <= 10 * 1024 && a[2..].bytes().all(|b| b == 0),
        "{:?}",
        &a[..a.len().min(40)]
    );
    // A run without refusals says so.
    let v = env.json(&["--vault", "t", "exec", "--", "cat", "a"]);
    assert!(v["result"]["quota_refused"].is_null(), "{v}");
    // The overlay engine takes a run's changes in whole or not at all: over a quota,
    // nothing is taken in, the envelope names the quota, and the run's files are kept.
    let v = env.json(&["--vault", "t", "exec", "--shell", "echo 3 > c; echo 4 > d"]);
    assert_eq!(v["engine"]["name"], "overlay", "{v}");
    let q = &v["result"]["quota_refused"];
    let msg = q["message"].as_str().unwrap_or_else(|| panic!("{v}"));
    assert!(msg.contains("at most 2 files"), "{msg}");
    assert!(msg.contains("kept in"), "{msg}");
    assert!(v["changes"].as_array().unwrap().is_empty(), "{v}");
    assert_eq!(env.run(&["--vault", "t", "cat", "/c"]).code, 1);
    // The files are where the message says, and the next run does not see them.
    let kept = msg.split("kept in ").nth(1).unwrap().trim_end_matches(')');
    assert_eq!(
        std::fs::read_to_string(std::path::Path::new(kept).join("d")).unwrap(),
        "4\n",
        "{msg}"
    );
    let next = env.json(&["--vault", "t", "exec", "--", "ls"]);
    assert_eq!(next["result"]["stdout"], "a\nb\n", "{next}");
    // The CLI names the quota too.
    let e = env.json_err(&["--vault", "t", "write", "/c", "x"], 1);
    assert_eq!(e["kind"], "quota_exceeded");
    assert!(
        e["message"].as_str().unwrap().contains("at most 2 files"),
        "{e}"
    );
    report(
        "`exec` of a command that creates a file over the count and appends over the size",
        2,
        "the command gets EDQUOT (\"Disk quota exceeded\"); the envelope's result.quota_refused counts the refusals and names the quota; nothing over it stored",
    );
}

/// A limit lowered below the current usage: whatever frees room passes (CLI and mount),
/// whatever adds is refused.
#[test]
fn a_lowered_limit_still_lets_room_be_freed() {
    let env = Env::new();
    for i in 0..4 {
        env.ok(&["write", &format!("/f{i}"), "0123456789"]);
    }
    env.json(&["quota", "set", "--max-files", "2", "--max-bytes", "15"]);
    env.ok(&["rm", "/f0"]);
    env.ok(&["write", "/f1", "x"]);
    assert_eq!(
        env.json_err(&["write", "/f9", "x"], 1)["kind"],
        "quota_exceeded"
    );
    assert_eq!(
        env.json_err(&["write", "/f2", "0123456789-more"], 1)["kind"],
        "quota_exceeded"
    );
    if let Some(m) = Mount::new("a_lowered_limit_still_lets_room_be_freed") {
        m.avfs(&["write", "/a", "0123456789"]);
        m.avfs(&["write", "/b", "0123456789"]);
        m.avfs(&["quota", "set", "--max-files", "1", "--max-bytes", "5"]);
        // Each request counts on its own in a mount: the unlink frees room, then the
        // truncation, then the write of 1 byte fits.
        std::fs::remove_file(m.p("b")).unwrap();
        write_close(&m.p("a"), b"x").unwrap();
        edquot(write_close(&m.p("c"), b""), "create over the lowered count");
        assert_eq!(quota_usage(&m), (1, 1));
    }
    report(
        "a limit lowered below the usage: rm and smaller files through the CLI and a mount",
        2,
        "what frees room passes, what adds is refused",
    );
}
