//! Real tools in a mounted workspace: git, cargo, python, tar.
//!
//! Needs /dev/fuse; skips with a message without it, fails with `AVFS_REQUIRE_FUSE=1`.
#![allow(clippy::macro_metavars_in_unsafe)]

mod common;
#[macro_use]
#[path = "common/fuse.rs"]
mod fuse;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output};

use fuse::*;

macro_rules! mount {
    ($name:expr) => {
        match Mount::new($name) {
            Some(m) => m,
            None => return,
        }
    };
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// A tool the test needs: missing fails under AVFS_REQUIRE_FUSE=1 (CI installs them),
/// otherwise skips.
fn need(tool: &str, test: &str) -> bool {
    if have(tool) {
        return true;
    }
    if std::env::var("AVFS_REQUIRE_FUSE").as_deref() == Ok("1") {
        panic!("{test}: {tool} is required");
    }
    eprintln!("SKIPPED {test}: {tool} not installed");
    false
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({})\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn git(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Test")
        .env("GIT_AUTHOR_EMAIL", "test@example.com")
        .env("GIT_COMMITTER_NAME", "Test")
        .env("GIT_COMMITTER_EMAIL", "test@example.com")
        .args(["-c", "init.defaultBranch=main", "-c", "gc.auto=0"]);
    c
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Asserts two trees are equal: names, kinds, file bytes, symlink targets, modes.
pub fn assert_same_tree(a: &Path, b: &Path) {
    let mut stack = vec![std::path::PathBuf::new()];
    let mut count = 0;
    while let Some(rel) = stack.pop() {
        let (pa, pb) = (a.join(&rel), b.join(&rel));
        let ma = std::fs::symlink_metadata(&pa).unwrap();
        let mb = std::fs::symlink_metadata(&pb).unwrap_or_else(|e| panic!("{}: {e}", pb.display()));
        assert_eq!(ma.file_type(), mb.file_type(), "{}", rel.display());
        assert_eq!(
            ma.permissions().mode() & 0o7777,
            mb.permissions().mode() & 0o7777,
            "mode of {}",
            rel.display()
        );
        count += 1;
        if ma.is_dir() {
            let na = names(&pa).unwrap();
            let nb = names(&pb).unwrap();
            assert_eq!(na, nb, "entries of {}", rel.display());
            for n in na {
                stack.push(rel.join(std::ffi::OsStr::from_bytes(&n)));
            }
        } else if ma.file_type().is_symlink() {
            assert_eq!(
                std::fs::read_link(&pa).unwrap(),
                std::fs::read_link(&pb).unwrap()
            );
        } else if ma.is_file() {
            assert_eq!(ma.size(), mb.size(), "size of {}", rel.display());
            assert!(
                std::fs::read(&pa).unwrap() == std::fs::read(&pb).unwrap(),
                "bytes of {}",
                rel.display()
            );
            assert_eq!(ma.mtime(), mb.mtime(), "mtime of {}", rel.display());
        }
    }
    assert!(count > 1);
}

use std::os::unix::ffi::OsStrExt;

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
    std::fs::write(
        dir.join("src/main.rs"),
        r#"fn add(a: i32, b: i32) -> i32 { a + b }

fn main() {
    println!("hello from the mount: {}", add(2, 3));
}

#[cfg(test)]
mod tests {
    #[test]
    fn adds() {
        assert_eq!(super::add(2, 3), 5);
    }
}
"#,
    )
    .unwrap();
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

const RENAMER: &str = r#"
import os, sys, hashlib
root = sys.argv[1]
n = int(sys.argv[2])
digest = hashlib.sha256()
for i in range(n):
    d = os.path.join(root, "d%02d" % (i % 37))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "f%05d.tmp" % i), "wb") as f:
        data = (("%d:" % i) * (i % 300 + 1)).encode()
        f.write(data)
# Atomic-save pattern: write a temp file, rename it over the final name.
for i in range(n):
    d = os.path.join(root, "d%02d" % (i % 37))
    os.rename(os.path.join(d, "f%05d.tmp" % i), os.path.join(d, "f%05d.txt" % i))
for i in range(0, n, 3):
    d = os.path.join(root, "d%02d" % (i % 37))
    tmp = os.path.join(d, ".f%05d.new" % i)
    with open(tmp, "wb") as f:
        f.write(b"rewritten %d" % i)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(d, "f%05d.txt" % i))
# Move whole directories around.
os.makedirs(os.path.join(root, "moved"), exist_ok=True)
for k in range(0, 37, 2):
    os.rename(os.path.join(root, "d%02d" % k), os.path.join(root, "moved", "m%02d" % k))
# Digest of everything in a stable order.
count = 0
for dirpath, dirnames, filenames in os.walk(root):
    dirnames.sort()
    for fn in sorted(filenames):
        p = os.path.join(dirpath, fn)
        digest.update(os.path.relpath(p, root).encode())
        with open(p, "rb") as f:
            digest.update(f.read())
        count += 1
print(count, digest.hexdigest())
"#;

#[test]
fn python_creates_and_renames_many_files() {
    if !need("python3", "python_creates_and_renames_many_files") {
        return;
    }
    let mut m = mount!("python_creates_and_renames_many_files");
    let n = "3000";
    let native = run(Command::new("python3")
        .arg("-c")
        .arg(RENAMER)
        .arg(&m.native)
        .arg(n));
    let mounted = run(Command::new("python3")
        .arg("-c")
        .arg(RENAMER)
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

/// Like `assert_same_tree`, but mtimes (set by the writes themselves) are not compared.
fn assert_same_tree_no_mtime(a: &Path, b: &Path) {
    let list = |root: &Path| {
        let out = run(Command::new("find")
            .arg(".")
            .arg("-printf")
            .arg("%y %m %s %l %p\n")
            .current_dir(root));
        let mut v: Vec<String> = stdout(&out)
            .lines()
            .map(|l| {
                // Directory sizes differ between filesystems.
                if l.starts_with("d ") {
                    let f: Vec<&str> = l.splitn(4, ' ').collect();
                    format!("d {} - {}", f[1], f[3])
                } else {
                    l.to_string()
                }
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(list(b), list(a));
    let sums = |root: &Path| {
        let out = run(Command::new("sh")
            .arg("-c")
            .arg("find . -type f -print0 | sort -z | xargs -0 -r sha256sum")
            .current_dir(root));
        stdout(&out)
    };
    assert_eq!(sums(b), sums(a));
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
