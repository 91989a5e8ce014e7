//! File commands through the real binary.

mod common;
use common::*;

#[test]
fn write_cat_append_stdin_and_errors() {
    let env = Env::new();
    env.ok(&["write", "/a.txt", "one"]);
    env.ok(&["write", "--append", "/a.txt", " two"]);
    assert_eq!(env.cat(None, "/a.txt"), "one two");
    let r = env.run_stdin(&["write", "/bin.dat"], &[0, 1, 2, 255, 0]);
    assert_eq!(r.code, 0);
    assert_eq!(
        env.cmd(["cat", "/bin.dat"]).output().unwrap().stdout,
        vec![0, 1, 2, 255, 0]
    );
    let j = env.json(&["cat", "/bin.dat"]);
    assert_eq!(j["encoding"], "hex");
    assert_eq!(j["content"], "000102ff00");
    // A large file spanning many chunks round-trips.
    let big: Vec<u8> = (0..1_000_003u32).map(|i| (i * 7 % 251) as u8).collect();
    assert_eq!(env.run_stdin(&["write", "/big"], &big).code, 0);
    let out = env.cmd(["cat", "/big"]).output().unwrap();
    assert_eq!(out.stdout, big);
    assert_eq!(env.json(&["stat", "/big"])["size"], 1_000_003);

    assert_eq!(env.json_err(&["cat", "/missing"], 1)["kind"], "not_found");
    assert_eq!(
        env.json_err(&["write", "/no/such/dir/f", "x"], 1)["kind"],
        "not_found"
    );
    env.ok(&["write", "-p", "/no/such/dir/f", "x"]);
    assert_eq!(env.cat(None, "/no/such/dir/f"), "x");
    assert_eq!(env.json_err(&["cat", "/no"], 1)["kind"], "is_a_directory");
    let long = format!("/{}", "n".repeat(256));
    assert_eq!(
        env.json_err(&["write", &long, "x"], 1)["kind"],
        "name_too_long"
    );
    let ok255 = format!("/{}", "n".repeat(255));
    env.ok(&["write", &ok255, "x"]);
}

#[test]
fn dotdot_never_escapes_the_workspace() {
    let env = Env::new();
    env.ok(&["write", "-p", "/../../../etc/escape", "x"]);
    // It landed at /etc/escape inside the workspace, not on the host.
    assert_eq!(env.cat(None, "/etc/escape"), "x");
    assert_ne!(
        std::fs::read_to_string("/etc/escape").ok().as_deref(),
        Some("x")
    );
    assert_eq!(env.cat(None, "/a/../../etc/escape"), "x");
    // Symlinks with absolute targets resolve inside the workspace too.
    env.ok(&["ln", "-s", "/etc", "/link"]);
    assert_eq!(env.cat(None, "/link/escape"), "x");
    env.ok(&["ln", "-s", "../../../../etc/hostname", "/rel"]);
    assert_eq!(env.json_err(&["cat", "/rel"], 1)["kind"], "not_found");
}

#[test]
fn mkdir_rm_mv_cp_ls_tree_stat() {
    let env = Env::new();
    env.ok(&["mkdir", "-p", "/a/b/c"]);
    assert_eq!(env.json_err(&["mkdir", "/a"], 1)["kind"], "already_exists");
    env.ok(&["mkdir", "-p", "/a"]);
    env.ok(&["write", "/a/b/c/f", "deep"]);
    env.ok(&["write", "/a/.hidden", "h"]);
    let ls = env.json(&["ls", "/a"]);
    let names: Vec<&str> = ls["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["b"]);
    let ls = env.json(&["ls", "-a", "/a"]);
    assert_eq!(ls["entries"].as_array().unwrap().len(), 2);
    let long = env.ok(&["ls", "-l", "/a"]).stdout;
    assert!(long.starts_with("drwxr-xr-x"), "{long}");

    assert_eq!(env.json_err(&["rm", "/a"], 1)["kind"], "is_a_directory");
    assert_eq!(env.json_err(&["rm", "/nope"], 1)["kind"], "not_found");
    env.ok(&["rm", "-f", "/nope"]);

    env.ok(&["cp", "-r", "/a", "/copy"]);
    assert_eq!(env.cat(None, "/copy/b/c/f"), "deep");
    assert_eq!(
        env.json_err(&["cp", "/a", "/x"], 1)["kind"],
        "is_a_directory"
    );
    env.ok(&["write", "/copy/b/c/f", "changed copy"]);
    assert_eq!(env.cat(None, "/a/b/c/f"), "deep", "a copy is independent");

    env.ok(&["mv", "/a/b", "/moved"]);
    assert_eq!(env.cat(None, "/moved/c/f"), "deep");
    assert_eq!(
        env.json_err(&["mv", "/moved", "/moved/c/inside"], 1)["kind"],
        "invalid_argument"
    );
    env.ok(&["mkdir", "/dest"]);
    env.ok(&["mv", "/moved", "/dest"]);
    assert_eq!(env.cat(None, "/dest/moved/c/f"), "deep");

    let t = env.json(&["tree", "-L", "1", "/dest"]);
    assert_eq!(t["children"][0]["name"], "moved");
    assert!(t["children"][0].get("children").is_none());
    let human = env.ok(&["tree", "/dest"]).stdout;
    assert!(human.contains("└── f"), "{human}");

    env.ok(&["rm", "-r", "/dest"]);
    assert_eq!(env.json_err(&["ls", "/dest"], 1)["kind"], "not_found");
    let st = env.json(&["stat", "/copy/b/c/f"]);
    assert_eq!(st["type"], "file");
    assert_eq!(st["size"], 12);
    assert_eq!(st["mode"], "0644");
    assert_eq!(env.json_err(&["rm", "-r", "/"], 1)["kind"], "refused");
}

#[test]
fn links_and_chmod() {
    let env = Env::new();
    env.ok(&["write", "/orig", "data"]);
    env.ok(&["ln", "/orig", "/hard"]);
    assert_eq!(env.json(&["stat", "/orig"])["nlink"], 2);
    env.ok(&["write", "/hard", "through the link"]);
    assert_eq!(env.cat(None, "/orig"), "through the link");
    env.ok(&["ln", "-s", "orig", "/soft"]);
    let st = env.json(&["stat", "/soft"]);
    assert_eq!(st["type"], "symlink");
    assert_eq!(st["target"], "orig");
    assert_eq!(env.cat(None, "/soft"), "through the link");
    env.ok(&["ln", "-s", "/does/not/exist", "/dangling"]);
    assert_eq!(
        env.json(&["stat", "/dangling"])["target"],
        "/does/not/exist"
    );
    env.ok(&["rm", "/orig"]);
    assert_eq!(env.json(&["stat", "/hard"])["nlink"], 1);
    assert_eq!(env.cat(None, "/hard"), "through the link");

    env.ok(&["chmod", "750", "/hard"]);
    assert_eq!(env.json(&["stat", "/hard"])["mode"], "0750");
    env.ok(&["chmod", "u-w,o+r", "/hard"]);
    assert_eq!(env.json(&["stat", "/hard"])["mode"], "0554");
    assert_eq!(
        env.json_err(&["chmod", "99x", "/hard"], 1)["kind"],
        "invalid_argument"
    );
    assert!(env.ok(&["ls", "-l", "/"]).stdout.contains("-r-xr-xr--"));
}

#[test]
fn import_export_keep_modes_times_links_and_refuse_overwrite() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(src.join("sub/deeper")).unwrap();
    std::fs::write(src.join("sub/deeper/file.rs"), "fn main() {}\n").unwrap();
    std::fs::write(src.join("exec.sh"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(src.join("exec.sh"), std::fs::Permissions::from_mode(0o751)).unwrap();
    std::fs::hard_link(src.join("exec.sh"), src.join("sub/hardlink.sh")).unwrap();
    std::os::unix::fs::symlink("../exec.sh", src.join("sub/sym")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", src.join("abs-sym")).unwrap();
    let old =
        std::time::SystemTime::UNIX_EPOCH + std::time::Duration::new(1_600_000_000, 123_456_789);
    std::fs::File::options()
        .write(true)
        .open(src.join("sub/deeper/file.rs"))
        .unwrap()
        .set_modified(old)
        .unwrap();

    let j = env.json(&["import", src.to_str().unwrap(), "/proj"]);
    assert_eq!(j["stats"]["files"], 2, "{j}");
    assert_eq!(j["stats"]["hardlinks"], 1, "{j}");
    assert_eq!(env.cat(None, "/proj/sub/deeper/file.rs"), "fn main() {}\n");
    assert_eq!(env.json(&["stat", "/proj/exec.sh"])["mode"], "0751");
    assert_eq!(env.json(&["stat", "/proj/sub/hardlink.sh"])["nlink"], 2);
    assert_eq!(
        env.json(&["stat", "/proj/abs-sym"])["target"],
        "/etc/passwd"
    );
    assert_eq!(
        env.json(&["stat", "/proj/sub/deeper/file.rs"])["mtime_ns"],
        1_600_000_000_123_456_789i64
    );

    // Through a checkpoint round trip and restore, links stay links.
    env.json(&["checkpoint", "save", "imported"]);
    env.ok(&["rm", "-r", "/proj/sub"]);
    env.json(&["checkpoint", "restore", "imported"]);
    env.ok(&[
        "write",
        "/proj/sub/hardlink.sh",
        "#!/bin/sh\necho changed\n",
    ]);
    assert_eq!(env.cat(None, "/proj/exec.sh"), "#!/bin/sh\necho changed\n");
    env.json(&["checkpoint", "save", "after"]);

    let out = env.path("out");
    env.json(&["export", "/proj", out.to_str().unwrap()]);
    let a = std::fs::metadata(out.join("exec.sh")).unwrap();
    let b = std::fs::metadata(out.join("sub/hardlink.sh")).unwrap();
    assert_eq!(a.ino(), b.ino(), "hard links are exported as hard links");
    assert_eq!(a.mode() & 0o7777, 0o751);
    assert_eq!(
        std::fs::read_link(out.join("sub/sym")).unwrap().to_str(),
        Some("../exec.sh")
    );
    assert_eq!(
        std::fs::read_link(out.join("abs-sym")).unwrap().to_str(),
        Some("/etc/passwd")
    );
    let m = std::fs::metadata(out.join("sub/deeper/file.rs")).unwrap();
    assert_eq!((m.mtime(), m.mtime_nsec()), (1_600_000_000, 123_456_789));

    // Export refuses to overwrite unless --force, and then changes nothing before refusing.
    std::fs::write(out.join("exec.sh"), "local edit").unwrap();
    let e = env.json_err(&["export", "/proj", out.to_str().unwrap()], 1);
    assert!(e["message"].as_str().unwrap().contains("--force"), "{e}");
    assert_eq!(
        std::fs::read_to_string(out.join("exec.sh")).unwrap(),
        "local edit"
    );
    env.json(&["export", "--force", "/proj", out.to_str().unwrap()]);
    assert_eq!(
        std::fs::read_to_string(out.join("exec.sh")).unwrap(),
        "#!/bin/sh\necho changed\n"
    );
}
