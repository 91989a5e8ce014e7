//! What the tests of real tools share, whichever way the tools reach the workspace (a
//! FUSE mount, an `avfs exec` run): finding the tool, running it, comparing two trees,
//! and the Python workload that creates and renames many files.
//!
//! Include with `mod common; #[path = "common/tools.rs"] mod tools;`.
#![allow(dead_code)]

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output};

pub fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// A tool the test needs: missing fails under AVFS_REQUIRE_FUSE=1 (CI installs them),
/// otherwise skips.
pub fn need(tool: &str, test: &str) -> bool {
    if have(tool) {
        return true;
    }
    if std::env::var("AVFS_REQUIRE_FUSE").as_deref() == Ok("1") {
        panic!("{test}: {tool} is required");
    }
    eprintln!("SKIPPED {test}: {tool} not installed");
    false
}

pub fn run(cmd: &mut Command) -> Output {
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

pub fn git(dir: &Path) -> Command {
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

pub fn stdout(o: &Output) -> String {
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

/// Directory entry names (without . and ..), sorted.
fn names(dir: &Path) -> std::io::Result<Vec<Vec<u8>>> {
    let mut v: Vec<Vec<u8>> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.file_name().as_bytes().to_vec()))
        .collect::<std::io::Result<_>>()?;
    v.sort();
    Ok(v)
}

/// Prints the number of files under `sys.argv[1]` and a digest of every path and its
/// bytes, in a stable order.
pub const TREE_DIGEST: &str = r#"
import hashlib, os, sys
root = sys.argv[1]
digest, count = hashlib.sha256(), 0
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

/// The workload of [`renamer`].
const RENAME_MANY: &str = r#"
import os, sys
root = sys.argv[1]
n = int(sys.argv[2])
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
"#;

/// Creates N files in 37 directories, renames them all (temp file, then its final name),
/// rewrites a third with an atomic save, moves half the directories; then prints what
/// [`TREE_DIGEST`] prints (arguments: root, N).
pub fn renamer() -> String {
    format!("{RENAME_MANY}{TREE_DIGEST}")
}

/// A binary crate's `main.rs` with one unit test, printing "hello from WHERE: 5".
pub fn adder_main(place: &str) -> String {
    format!(
        r#"fn add(a: i32, b: i32) -> i32 {{ a + b }}

fn main() {{
    println!("hello from {place}: {{}}", add(2, 3));
}}

#[cfg(test)]
mod tests {{
    #[test]
    fn adds() {{
        assert_eq!(super::add(2, 3), 5);
    }}
}}
"#
    )
}

/// Like `assert_same_tree`, but mtimes (set by the writes themselves) are not compared.
pub fn assert_same_tree_no_mtime(a: &Path, b: &Path) {
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
