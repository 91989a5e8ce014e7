//! Real tools in a mounted workspace: git, cargo, python, tar.
//!
//! Needs /dev/fuse; skips with a message without it, fails with `AVFS_REQUIRE_FUSE=1`.
#![allow(clippy::macro_metavars_in_unsafe)]

mod common;
#[macro_use]
#[path = "common/fuse.rs"]
mod fuse;
#[path = "common/tools.rs"]
mod tools;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use fuse::*;
use tools::*;

macro_rules! mount {
    ($name:expr) => {
        match Mount::new($name) {
            Some(m) => m,
            None => return,
        }
    };
}

#[test]
fn git_workflow() {
    if !need("git", "git_workflow") {
        return;
    }
    let mut m = mount!("git_workflow");
    let repo = m.p("repo");
    std::fs::create_dir(&repo).unwrap();
    run(git(&repo).arg("init"));
    for i in 0..50 {
        let d = repo.join(format!("dir{}", i % 5));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(format!("file{i}.txt")), format!("line one of {i}\n")).unwrap();
    }
    std::fs::write(repo.join("README"), "base\n").unwrap();
    std::os::unix::fs::symlink("README", repo.join("link")).unwrap();
    std::fs::write(repo.join("run.sh"), "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(repo.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    run(git(&repo).args(["add", "-A"]));
    run(git(&repo).args(["commit", "-q", "-m", "initial"]));
    let st = run(git(&repo).args(["status", "--porcelain"]));
    assert_eq!(stdout(&st), "", "clean after commit");
    // A topic branch with two commits.
    run(git(&repo).args(["checkout", "-q", "-b", "topic"]));
    std::fs::write(repo.join("dir0/file0.txt"), "changed on topic\n").unwrap();
    run(git(&repo).args(["commit", "-q", "-am", "topic 1"]));
    std::fs::write(repo.join("topic-only"), "t\n").unwrap();
    run(git(&repo).args(["add", "topic-only"]));
    run(git(&repo).args(["commit", "-q", "-m", "topic 2"]));
    // main moves on.
    run(git(&repo).args(["checkout", "-q", "main"]));
    assert!(!repo.join("topic-only").exists());
    assert_eq!(
        std::fs::read_to_string(repo.join("dir0/file0.txt")).unwrap(),
        "line one of 0\n"
    );
    std::fs::write(repo.join("README"), "base\nmain change\n").unwrap();
    std::fs::remove_file(repo.join("dir4/file4.txt")).unwrap();
    run(git(&repo).args(["commit", "-q", "-am", "main 1"]));
    // Rebase topic onto main.
    run(git(&repo).args(["checkout", "-q", "topic"]));
    run(git(&repo).args(["rebase", "-q", "main"]));
    let log = run(git(&repo).args(["log", "--format=%s"]));
    assert_eq!(stdout(&log), "topic 2\ntopic 1\nmain 1\ninitial\n");
    assert_eq!(
        std::fs::read_to_string(repo.join("README")).unwrap(),
        "base\nmain change\n"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("dir0/file0.txt")).unwrap(),
        "changed on topic\n"
    );
    assert!(!repo.join("dir4/file4.txt").exists());
    // gc packs everything; fsck agrees.
    run(git(&repo).args(["gc", "-q", "--aggressive", "--prune=now"]));
    run(git(&repo).args(["fsck", "--full", "--strict"]));
    let st = run(git(&repo).args(["status", "--porcelain"]));
    assert_eq!(stdout(&st), "");
    // A dirty change is seen by status, including mode changes.
    std::fs::write(repo.join("dir1/file1.txt"), "dirty\n").unwrap();
    std::fs::set_permissions(repo.join("README"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let st = run(git(&repo).args(["status", "--porcelain"]));
    assert_eq!(stdout(&st), " M README\n M dir1/file1.txt\n");
    run(git(&repo).args(["checkout", "--", "."]));
    // The repository survives a checkpoint and a remount intact.
    m.avfs(&["checkpoint", "save", "git"]);
    m.remount();
    let repo = m.p("repo");
    run(git(&repo).args(["fsck", "--full", "--strict"]));
    let st = run(git(&repo).args(["status", "--porcelain"]));
    assert_eq!(stdout(&st), "");
    let log = run(git(&repo).args(["log", "--format=%s", "main"]));
    assert_eq!(stdout(&log), "main 1\ninitial\n");
    // The CLI sees git's objects too.
    let head = m.avfs_cat("/repo/.git/HEAD");
    assert_eq!(head, b"ref: refs/heads/topic\n");
}

#[test]
fn cargo_new_build_test() {
    if !need("cargo", "cargo_new_build_test") {
        return;
    }
    let m = mount!("cargo_new_build_test");
    let cargo = |dir: &Path| {
        let mut c = Command::new("cargo");
        c.current_dir(dir)
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("CARGO_BUILD_TARGET_DIR")
            .env_remove("RUSTC_WRAPPER")
            .env_remove("CARGO_MANIFEST_DIR")
            .env("CARGO_TERM_COLOR", "never")
            .env("CARGO_NET_OFFLINE", "true");
        c
    };
    run(cargo(&m.mp).args(["new", "--vcs", "git", "hello"]));
    let dir = m.p("hello");
    std::fs::write(dir.join("src/main.rs"), adder_main("the mount")).unwrap();
    run(cargo(&dir).args(["build", "--offline"]));
    let out = run(&mut Command::new(dir.join("target/debug/hello")));
    assert_eq!(stdout(&out), "hello from the mount: 5\n");
    let t = run(cargo(&dir).args(["test", "--offline"]));
    assert!(
        stdout(&t).contains("test tests::adds ... ok"),
        "{}",
        stdout(&t)
    );
    // An incremental rebuild after an edit picks the change up.
    std::fs::write(
        dir.join("src/main.rs"),
        "fn main() { println!(\"edited\"); }\n",
    )
    .unwrap();
    run(cargo(&dir).args(["build", "--offline"]));
    let out = run(&mut Command::new(dir.join("target/debug/hello")));
    assert_eq!(stdout(&out), "edited\n");
    // A release build too (different codegen, more files).
    run(cargo(&dir).args(["build", "--offline", "--release"]));
    let out = run(&mut Command::new(dir.join("target/release/hello")));
    assert_eq!(stdout(&out), "edited\n");
}

#[test]
fn python_creates_and_renames_many_files() {
    if !need("python3", "python_creates_and_renames_many_files") {
        return;
    }
    let mut m = mount!("python_creates_and_renames_many_files");
    let n = "3000";
    let native = run(Command::new("python3")
        .arg("-c")
        .arg(renamer())
        .arg(&m.native)
        .arg(n));
    let mounted = run(Command::new("python3")
        .arg("-c")
        .arg(renamer())
        .arg(&m.mp)
        .arg(n));
    assert_eq!(stdout(&mounted), stdout(&native));
    assert!(stdout(&mounted).starts_with("3000 "));
    assert_same_tree_no_mtime(&m.native, &m.mp);
    m.remount();
    assert_same_tree_no_mtime(&m.native, &m.mp);
    let v = m.avfs_json(&["vault", "verify"]);
    assert!(v["report"]["ok"].as_bool().unwrap_or(false), "{v}");
}

#[test]
fn tar_round_trip() {
    if !need("tar", "tar_round_trip") {
        return;
    }
    let mut m = mount!("tar_round_trip");
    // Source: this repository's src/ and tests/ plus a few special cases.
    let src = m.env.path("src-tree");
    std::fs::create_dir(&src).unwrap();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    run(Command::new("cp")
        .arg("-a")
        .arg(repo.join("src"))
        .arg(repo.join("tests"))
        .arg(&src));
    std::os::unix::fs::symlink("src/lib.rs", src.join("link")).unwrap();
    std::os::unix::fs::symlink("dangling/target", src.join("dangling")).unwrap();
    std::fs::write(src.join("exec.sh"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(src.join("exec.sh"), std::fs::Permissions::from_mode(0o751)).unwrap();
    std::fs::write(src.join("big.bin"), Rng::new(9).bytes(5_000_000)).unwrap();
    let f = std::fs::File::create(src.join("sparse.bin")).unwrap();
    f.set_len(20 << 20).unwrap();
    drop(f);
    std::fs::hard_link(src.join("exec.sh"), src.join("exec-link.sh")).unwrap();
    std::fs::create_dir(src.join("empty-dir")).unwrap();
    let tarball = m.env.path("tree.tar");
    run(Command::new("tar")
        .arg("-cf")
        .arg(&tarball)
        .arg("-C")
        .arg(&src)
        .arg("."));
    // Extract into the mount and compare byte for byte.
    let into = m.p("x");
    std::fs::create_dir(&into).unwrap();
    run(Command::new("tar")
        .arg("-xpf")
        .arg(&tarball)
        .arg("-C")
        .arg(&into));
    assert_same_tree(&src, &into);
    assert_eq!(
        std::fs::metadata(into.join("exec.sh")).unwrap().ino(),
        std::fs::metadata(into.join("exec-link.sh")).unwrap().ino()
    );
    // What the vault stored, not what the kernel cached: after a remount, tar itself finds
    // no difference between the archive and the tree (contents, sizes, modes, owners,
    // modification times, link targets).
    m.remount();
    let cmp = Command::new("tar")
        .arg("--compare")
        .arg("-f")
        .arg(&tarball)
        .arg("-C")
        .arg(&into)
        .output()
        .unwrap();
    assert!(
        cmp.status.success(),
        "tar --compare after a remount: {}{}",
        String::from_utf8_lossy(&cmp.stdout),
        String::from_utf8_lossy(&cmp.stderr)
    );
    // Create a tarball from the mount and extract it natively: same tree again.
    let back = m.env.path("from-mount.tar");
    run(Command::new("tar")
        .arg("-cf")
        .arg(&back)
        .arg("-C")
        .arg(&into)
        .arg("."));
    let out = m.env.path("out");
    std::fs::create_dir(&out).unwrap();
    run(Command::new("tar")
        .arg("-xpf")
        .arg(&back)
        .arg("-C")
        .arg(&out));
    assert_same_tree(&src, &out);
    // Both archives list the same members.
    let list = |t: &Path| {
        let o = run(Command::new("tar").arg("-tvf").arg(t));
        let mut v: Vec<String> = stdout(&o).lines().map(|l| l.to_string()).collect();
        v.sort();
        v
    };
    let (a, b) = (list(&tarball), list(&back));
    assert_eq!(a.len(), b.len());
    // And a compressed round trip through a pipe.
    let gz = m.p("tree.tar.gz");
    run(Command::new("sh").arg("-c").arg(format!(
        "tar -czf {} -C {} .",
        gz.display(),
        into.display()
    )));
    let out2 = m.p("y");
    std::fs::create_dir(&out2).unwrap();
    run(Command::new("tar")
        .arg("-xzpf")
        .arg(&gz)
        .arg("-C")
        .arg(&out2));
    assert_same_tree(&src, &out2);
}

#[test]
fn ls_l_asks_for_labels_and_acls_once_not_per_file() {
    let m = mount!("ls_l_asks_for_labels_and_acls_once_not_per_file");
    for d in 0..4 {
        let dir = m.p(&format!("d{d}"));
        std::fs::create_dir(&dir).unwrap();
        for f in 0..50 {
            std::fs::write(dir.join(format!("f{f}")), b"x").unwrap();
        }
    }
    let asked = |c: &serde_json::Value| {
        c["getxattr"].as_u64().unwrap_or(0) + c["getxattr_unsupported"].as_u64().unwrap_or(0)
    };
    let before = asked(&m.counters());
    let out = run(Command::new("ls").arg("-lR").arg(&m.mp));
    assert_eq!(stdout(&out).matches(" f").count(), 200, "{}", stdout(&out));
    let after = asked(&m.counters());
    // No SELinux label and no ACL (EOPNOTSUPP): ls remembers that per filesystem, where
    // "none on this file" (ENODATA) would cost two kernel round trips per file.
    assert!(
        after - before <= 4,
        "ls -lR of 200 files asked for {} attributes",
        after - before
    );
    // user.* attributes still work, and other namespaces say they are not supported.
    let f = std::ffi::CString::new(m.p("d0/f0").into_os_string().into_encoded_bytes()).unwrap();
    let get = |name: &str| {
        let n = std::ffi::CString::new(name).unwrap();
        let mut buf = [0u8; 64];
        // SAFETY: valid C strings and a buffer of the size given.
        let r = unsafe { libc::lgetxattr(f.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), 64) };
        if r < 0 {
            Err(std::io::Error::last_os_error().raw_os_error().unwrap())
        } else {
            Ok(buf[..r as usize].to_vec())
        }
    };
    let n = std::ffi::CString::new("user.k").unwrap();
    // SAFETY: valid C strings and a value of the length given.
    let r = unsafe { libc::lsetxattr(f.as_ptr(), n.as_ptr(), b"v".as_ptr().cast(), 1, 0) };
    assert_eq!(r, 0);
    assert_eq!(get("user.k"), Ok(b"v".to_vec()));
    assert_eq!(get("user.none"), Err(libc::ENODATA));
    assert_eq!(get("security.selinux"), Err(libc::EOPNOTSUPP));
    assert_eq!(get("system.posix_acl_access"), Err(libc::EOPNOTSUPP));
}
