//! The new commands with real mounts: `avfs shell`, tags and metadata seen and set through
//! a mount, a merge into a mounted workspace, search over writes made through a mount.
//!
//! Needs /dev/fuse; skips with a message without it, fails with `AVFS_REQUIRE_FUSE=1`.
#![allow(clippy::macro_metavars_in_unsafe)]

mod common;
#[macro_use]
#[path = "common/fuse.rs"]
mod fuse;

use std::ffi::CString;
use std::io::Write;
use std::path::Path;
use std::process::Stdio;

use common::{Env, Run};
use fuse::*;
use serde_json::json;

/// `avfs ARGS` with `SHELL=/bin/sh` and `script` on its stdin.
fn shell(env: &Env, args: &[&str], script: &str) -> Run {
    let mut child = env
        .cmd(args)
        .env("SHELL", "/bin/sh")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn mounts(env: &Env) -> usize {
    env.json(&["mounts"])["mounts"].as_array().unwrap().len()
}

#[test]
fn shell_runs_in_the_mount_with_a_checkpoint_and_a_summary() {
    if !fuse_or_skip("shell_runs_in_the_mount_with_a_checkpoint_and_a_summary") {
        return;
    }
    let env = Env::new();
    env.ok(&["write", "/old.txt", "old\n"]);
    env.ok(&["write", "/keep.txt", "keep\n"]);
    let r = shell(
        &env,
        &["--json", "shell"],
        "echo hi > from-shell.txt\nmkdir d\nrm old.txt\necho \"cwd=$(pwd) shell=$AVFS_SHELL cp=$AVFS_CHECKPOINT\"\nexit 3\n",
    );
    assert_eq!(r.code, 3, "stdout: {}\nstderr: {}", r.stdout, r.stderr);
    let v = r.json();
    let cp = v["checkpoint"].as_str().unwrap().to_string();
    assert!(cp.starts_with("shell-"), "{cp}");
    let mp = v["mountpoint"].as_str().unwrap();
    // The shell's own output went to stderr: stdout holds the one document.
    assert!(
        r.stderr.contains(&format!("cwd={mp} shell=1 cp={cp}\n")),
        "{}",
        r.stderr
    );
    assert_eq!(v["exit_code"], 3);
    assert_eq!(v["shell"], "/bin/sh");
    assert_eq!(v["vault"], "default");
    assert_eq!(v["workspace"], "main");
    assert_eq!(
        v["summary"],
        json!({"added": 2, "modified": 0, "deleted": 1, "type_changed": 0, "mode_changed": 0, "meta_changed": 0, "total": 3,
               "ignored": {"files": 0, "bytes": 0}})
    );
    assert_eq!(
        common::changes(&v),
        vec![
            ("added".to_string(), "/d".to_string()),
            ("added".into(), "/from-shell.txt".into()),
            ("deleted".into(), "/old.txt".into()),
        ]
    );
    // The changes are in the workspace; the checkpoint holds the state on entry.
    assert_eq!(env.cat(None, "/from-shell.txt"), "hi\n");
    assert_eq!(env.ok(&["cat", "/old.txt", "--at", &cp]).stdout, "old\n");
    let list = env.json(&["checkpoint", "list"]);
    let entry = list["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == cp.as_str())
        .unwrap()
        .clone();
    assert_eq!(entry["origin"], "shell");
    // The shell ran at the workspace's stable path; nothing stays mounted.
    assert_eq!(mp, env.home().join("ws/default").to_str().unwrap());
    assert_eq!(mounts(&env), 0);
    let audit = env.json(&["audit"])["entries"].as_array().unwrap().clone();
    let n = audit.len();
    assert_eq!(audit[n - 2]["action"], "shell.enter");
    assert_eq!(audit[n - 1]["action"], "shell.exit");
    assert_eq!(audit[n - 1]["detail"]["exit_code"], 3);
    assert_eq!(audit[n - 1]["detail"]["checkpoint"], cp.as_str());

    // Human output: the summary on stderr, the shell's output on stdout; --cwd.
    env.ok(&["mkdir", "/sub"]);
    let r = shell(
        &env,
        &["shell", "--cwd", "/sub"],
        "pwd\necho x > here.txt\n",
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.trim_end().ends_with("/sub"), "{}", r.stdout);
    assert!(
        r.stderr
            .contains("avfs shell: 1 added, 0 modified, 0 deleted, 0 type, 0 mode since shell-"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("\n  A /sub/here.txt\n"), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("undo with: avfs checkpoint restore shell-"),
        "{}",
        r.stderr
    );
    // As for exec: a missing --cwd is not_found.
    let e = env.json_err(&["shell", "--cwd", "/missing"], 1);
    assert_eq!(e["kind"], "not_found");
    assert_eq!(mounts(&env), 0);
}

#[test]
fn shell_keeps_a_running_mount_consistent() {
    let m = match Mount::new("shell_keeps_a_running_mount_consistent") {
        Some(m) => m,
        None => return,
    };
    let r = shell(
        &m.env,
        &["--vault", "t", "shell", "--no-checkpoint"],
        "pwd\necho y > y.txt\n",
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    // The shell runs at the workspace's stable path; the live mount shows its changes.
    assert_eq!(
        r.stdout.trim_end(),
        m.env.home().join("ws/t").to_str().unwrap()
    );
    assert!(is_mountpoint(&m.mp));
    assert_eq!(std::fs::read_to_string(m.p("y.txt")).unwrap(), "y\n");
    assert!(r.stderr.contains("since entering"), "{}", r.stderr);
    assert!(
        m.avfs_json(&["checkpoint", "list"])["checkpoints"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

fn getxattr(p: &Path, name: &str) -> Result<Vec<u8>, i32> {
    let (cp, cn) = (cs(p), CString::new(name).unwrap());
    let mut buf = vec![0u8; 256];
    // SAFETY: valid NUL-terminated strings and a buffer of the given size.
    let n = unsafe { libc::getxattr(cp.as_ptr(), cn.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(last_errno());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

fn setxattr(p: &Path, name: &str, value: &[u8]) -> Result<(), i32> {
    let (cp, cn) = (cs(p), CString::new(name).unwrap());
    // SAFETY: valid NUL-terminated strings and a value of the given length.
    let r = unsafe {
        libc::setxattr(
            cp.as_ptr(),
            cn.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if r < 0 { Err(last_errno()) } else { Ok(()) }
}

#[test]
fn tags_and_metadata_are_attributes_in_the_mount() {
    let m = match Mount::new("tags_and_metadata_are_attributes_in_the_mount") {
        Some(m) => m,
        None => return,
    };
    std::fs::write(m.p("report.md"), "# report\n").unwrap();
    m.avfs(&["tag", "/report.md", "final"]);
    m.avfs(&["meta", "/report.md", "owner", "alice"]);
    // The CLI's changes are visible through the mount at once.
    assert_eq!(
        getxattr(&m.p("report.md"), "user.avfs.tag.final"),
        Ok(vec![])
    );
    assert_eq!(
        getxattr(&m.p("report.md"), "user.avfs.meta.owner"),
        Ok(b"alice".to_vec())
    );
    // And what a tool sets through the mount is seen by the CLI.
    setxattr(&m.p("report.md"), "user.avfs.meta.owner", b"bob").unwrap();
    setxattr(&m.p("report.md"), "user.avfs.tag.urgent", b"").unwrap();
    assert_eq!(m.avfs(&["meta", "/report.md", "owner"]), "bob\n");
    assert_eq!(
        m.avfs_json(&["meta", "/report.md"]),
        json!({"path": "/report.md", "tags": ["final", "urgent"], "meta": {"owner": "bob"}})
    );
    assert_eq!(
        m.avfs(&["find", "--tag", "urgent", "--meta", "owner=bob"]),
        "/report.md\n"
    );
    m.avfs(&["untag", "/report.md", "final"]);
    assert_eq!(
        getxattr(&m.p("report.md"), "user.avfs.tag.final"),
        Err(libc::ENODATA)
    );
}

#[test]
fn merge_into_a_mounted_workspace_shows_at_once() {
    let m = match Mount::new("merge_into_a_mounted_workspace_shows_at_once") {
        Some(m) => m,
        None => return,
    };
    std::fs::write(m.p("a.txt"), "a\n").unwrap();
    std::fs::write(m.p("b.txt"), "b\n").unwrap();
    m.avfs(&["checkpoint", "save", "base"]);
    m.env.ok(&["vault", "fork", "t", "task"]);
    m.env
        .ok(&["--vault", "task", "write", "/a.txt", "a from the fork\n"]);
    m.env.ok(&["--vault", "task", "write", "/new.txt", "new\n"]);
    m.env.ok(&["--vault", "task", "rm", "/b.txt"]);
    // The kernel has these cached.
    assert_eq!(std::fs::read_to_string(m.p("a.txt")).unwrap(), "a\n");
    assert!(m.p("b.txt").exists());
    assert!(!m.p("new.txt").exists());
    // A write through the mount the merge must not lose.
    std::fs::write(m.p("mine.txt"), "mine\n").unwrap();
    let r = m.env.json(&["vault", "merge", "task"]);
    assert_eq!(r["into"], "t");
    assert_eq!(r["summary"]["taken"], 3);
    assert_eq!(
        std::fs::read_to_string(m.p("a.txt")).unwrap(),
        "a from the fork\n"
    );
    assert_eq!(std::fs::read_to_string(m.p("new.txt")).unwrap(), "new\n");
    assert!(!m.p("b.txt").exists());
    assert_eq!(std::fs::read_to_string(m.p("mine.txt")).unwrap(), "mine\n");
    let cp = r["checkpoint"]["name"].as_str().unwrap();
    assert_eq!(
        m.env
            .ok(&["--vault", "t", "cat", "/mine.txt", "--at", cp])
            .stdout,
        "mine\n"
    );
}

#[test]
fn search_and_grep_see_writes_made_through_the_mount() {
    let m = match Mount::new("search_and_grep_see_writes_made_through_the_mount") {
        Some(m) => m,
        None => return,
    };
    std::fs::write(m.p("notes.txt"), "remember the milk\n").unwrap();
    let v = m.avfs_json(&["search", "milk"]);
    assert_eq!(v["results"][0]["path"], "/notes.txt");
    // Written and still open: the search sees what write() returned for.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(m.p("notes.txt"))
        .unwrap();
    f.write_all(b"and the bread\n").unwrap();
    let v = m.avfs_json(&["search", "bread"]);
    assert_eq!(v["results"][0]["path"], "/notes.txt");
    assert_eq!(v["results"][0]["line"], 2);
    assert_eq!(
        m.avfs(&["grep", "-n", "bread"]),
        "/notes.txt:2:and the bread\n"
    );
    drop(f);
}
