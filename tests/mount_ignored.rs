//! Writes through `avfs mount` to ignored paths (issue 28): they go to the workspace's
//! ignored directory, never the history, as a run's do; the next run sees them (a kept
//! overlay is retired first); a fork keeps its own copy of what its parent then changes;
//! only a read-only mount answers EROFS.
//!
//! Every test needs FUSE and the overlay engine; under `AVFS_REQUIRE_FUSE=1` a machine
//! without them fails the tests instead of skipping.

mod common;
#[path = "common/fuse.rs"]
mod fuse;
#[path = "common/overlay.rs"]
mod overlay;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use common::Env;
use overlay::{
    SH_CHECKPOINTED as POLICY, ignored_dir, ok_in, overlay_or_skip, setup_with, sh_in as sh, stdout,
};
use serde_json::Value;

fn ready(test: &str) -> bool {
    overlay_or_skip(test) && fuse::fuse_or_skip(test)
}

fn paths(v: &Value) -> Vec<String> {
    v["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap().to_string())
        .collect()
}

/// `avfs mount VAULT MP ARGS`, unmounted when dropped (whatever happened).
struct Mounted<'a>(&'a Env, PathBuf);

impl<'a> Mounted<'a> {
    fn new(env: &'a Env, vault: &str, args: &[&str]) -> Mounted<'a> {
        let mp = env.path(&format!("mnt-{vault}"));
        std::fs::create_dir_all(&mp).unwrap();
        let mut a = vec!["mount", vault, mp.to_str().unwrap()];
        a.extend_from_slice(args);
        env.ok(&a);
        Mounted(env, mp)
    }

    fn at(&self, p: &str) -> PathBuf {
        self.1.join(p)
    }
}

impl Drop for Mounted<'_> {
    fn drop(&mut self) {
        let _ = self.0.run(&["unmount", self.1.to_str().unwrap()]);
    }
}

fn errno(r: std::io::Result<impl Sized>) -> Option<i32> {
    r.err().and_then(|e| e.raw_os_error())
}

/// Runs a program on the host in `dir`; panics with its output when it fails.
fn run_in(dir: &Path, prog: &str, args: &[&str]) {
    let out = std::process::Command::new(prog)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{prog} {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn writes_to_ignored_paths_go_to_the_ignored_directory() {
    if !ready("writes_to_ignored_paths_go_to_the_ignored_directory") {
        return;
    }
    let env = setup_with(POLICY);
    sh(
        &env,
        "t",
        "printf '.venv/\\n*.log\\nbuild/\\n' > .gitignore && mkdir -p .venv/bin src \
         && echo tool > .venv/bin/tool && echo s > src/a.py",
    );
    // The run before keeps its overlay (as root), with the ignored directory as a lower.
    sh(&env, "t", "cat .venv/bin/tool");
    let ign = ignored_dir(&env, "t");
    let m = Mounted::new(&env, "t", &[]);
    // A change to an ignored file, new files an ignored directory holds, new files the
    // rules ignore (at the root and in a tracked directory), a new ignored directory.
    std::fs::write(m.at(".venv/bin/tool"), "changed\n").unwrap();
    std::fs::create_dir(m.at(".venv/lib")).unwrap();
    std::fs::write(m.at(".venv/lib/mod.py"), "m\n").unwrap();
    std::fs::write(m.at("x.log"), "log\n").unwrap();
    std::fs::write(m.at("src/y.log"), "ylog\n").unwrap();
    std::fs::create_dir_all(m.at("build/obj")).unwrap();
    std::fs::write(m.at("build/obj/out.o"), "o\n").unwrap();
    // A tracked file's change still goes to the vault.
    std::fs::write(m.at("src/b.py"), "b\n").unwrap();
    std::fs::write(m.at("src/c.py"), "c\n").unwrap();
    for (p, want) in [
        (".venv/bin/tool", "changed\n"),
        (".venv/lib/mod.py", "m\n"),
        ("x.log", "log\n"),
        ("src/y.log", "ylog\n"),
        ("build/obj/out.o", "o\n"),
    ] {
        assert_eq!(std::fs::read_to_string(ign.join(p)).unwrap(), want, "{p}");
        assert_eq!(std::fs::read_to_string(m.at(p)).unwrap(), want, "{p}");
    }
    assert!(!ign.join("src/b.py").exists());
    assert_eq!(env.cat(Some("t"), "/src/b.py"), "b\n");
    // The ignored directory's `src` has the vault's directory's mode.
    let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o7777;
    assert_eq!(mode(&ign.join("src")), mode(&m.at("src")));
    // Renames inside the ignored files work; between them and the history, EXDEV (`mv`
    // copies, so the file lands where the rules say).
    std::fs::rename(m.at(".venv/lib/mod.py"), m.at(".venv/lib/mod2.py")).unwrap();
    assert!(ign.join(".venv/lib/mod2.py").is_file());
    assert!(!ign.join(".venv/lib/mod.py").exists());
    assert_eq!(
        errno(std::fs::rename(m.at("x.log"), m.at("src/x.py"))),
        Some(libc::EXDEV)
    );
    assert_eq!(
        errno(std::fs::rename(m.at("src/b.py"), m.at("b.log"))),
        Some(libc::EXDEV)
    );
    run_in(&m.1, "mv", &["src/b.py", "b.log"]);
    assert_eq!(std::fs::read_to_string(ign.join("b.log")).unwrap(), "b\n");
    // Removal, chmod, truncate, symlinks.
    std::fs::remove_file(m.at("build/obj/out.o")).unwrap();
    std::fs::remove_dir(m.at("build/obj")).unwrap();
    assert!(!ign.join("build/obj").exists());
    run_in(&m.1, "chmod", &["700", ".venv/bin/tool"]);
    assert_eq!(mode(&ign.join(".venv/bin/tool")), 0o700);
    std::os::unix::fs::symlink("tool", m.at(".venv/bin/alias")).unwrap();
    assert_eq!(
        std::fs::read_link(ign.join(".venv/bin/alias")).unwrap(),
        Path::new("tool")
    );
    run_in(&m.1, "truncate", &["-s", "3", "x.log"]);
    assert_eq!(std::fs::read_to_string(m.at("x.log")).unwrap(), "log");
    // None of it is in the history: the diff since the run names only the tracked
    // changes, and a checkpoint holds no ignored file.
    let d = env
        .json(&["--vault", "t", "diff", "--name-only"])
        .to_string();
    for p in [".venv", ".log", "build"] {
        assert!(!d.contains(p), "{p} in the diff: {d}");
    }
    assert!(d.contains("src/c.py"), "{d}");
    env.ok(&["--vault", "t", "checkpoint", "save", "c1"]);
    let ls = env.ok(&["--vault", "t", "ls", "-a", "/"]).stdout
        + &env.ok(&["--vault", "t", "ls", "-a", "/src"]).stdout;
    for p in [".venv", "x.log", "y.log", "build"] {
        assert!(!ls.contains(p), "{p} in the vault: {ls}");
    }
    // The next run sees every change, in a fresh overlay (the kept one was retired
    // before the mount changed its lower).
    let v = sh(
        &env,
        "t",
        "cat .venv/bin/tool x.log src/y.log b.log .venv/lib/mod2.py; ls build; \
         stat -c %a .venv/bin/tool; readlink .venv/bin/alias",
    );
    assert_eq!(stdout(&v), "changed\nlogylog\nb\nm\n700\ntool\n", "{v}");
    assert_ne!(v["engine"]["layers"]["how"], "kept", "{}", v["engine"]);
    assert!(paths(&v).is_empty(), "{}", v["changes"]);
    let st = env.json(&["--vault", "t", "status"]);
    assert!(st["ignored"]["files"].as_u64().unwrap() >= 5, "{st}");
}

#[test]
fn a_venv_made_in_the_mount_works_in_runs_and_forks_keep_their_copy() {
    if !ready("a_venv_made_in_the_mount_works_in_runs_and_forks_keep_their_copy") {
        return;
    }
    let env = setup_with(POLICY);
    sh(
        &env,
        "t",
        "echo '.venv/' > .gitignore && echo 'print(2)' > main.py",
    );
    env.ok(&["--vault", "t", "checkpoint", "save", "before"]);
    let m = Mounted::new(&env, "t", &[]);
    // A real venv, pip and all (ensurepip installs pip into it through the mount).
    run_in(&m.1, "python3", &["-m", "venv", ".venv"]);
    run_in(&m.1, ".venv/bin/python", &["-c", "import pip; print(1)"]);
    let ign = ignored_dir(&env, "t");
    assert!(ign.join(".venv/pyvenv.cfg").is_file());
    // Out of the history.
    let d = env
        .json(&["--vault", "t", "diff", "before", "--name-only"])
        .to_string();
    assert!(!d.contains(".venv"), "{d}");
    env.ok(&["--vault", "t", "checkpoint", "save", "after"]);
    let d = env
        .json(&["--vault", "t", "diff", "before", "after", "--name-only"])
        .to_string();
    assert!(!d.contains(".venv"), "{d}");
    // A run uses it.
    let v = ok_in(&env, "t", &["--", ".venv/bin/python", "-c", "print(1)"]);
    assert_eq!(stdout(&v), "1\n");
    assert!(paths(&v).is_empty(), "{}", v["changes"]);
    // A fork's first run shares the parent's files; the parent then changes one through
    // the mount: the fork keeps what it had.
    env.ok(&["vault", "fork", "t", "f1"]);
    let v = sh(&env, "f1", "cat .venv/pyvenv.cfg");
    let cfg = stdout(&v);
    assert!(cfg.contains("home"), "{cfg}");
    let fork_ign = ignored_dir(&env, "f1");
    let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
    assert_eq!(
        ino(&ign.join(".venv/pyvenv.cfg")),
        ino(&fork_ign.join(".venv/pyvenv.cfg")),
        "not shared"
    );
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(m.at(".venv/pyvenv.cfg"))
        .unwrap();
    std::io::Write::write_all(&mut f, b"parent = 1\n").unwrap();
    drop(f);
    assert!(
        std::fs::read_to_string(m.at(".venv/pyvenv.cfg"))
            .unwrap()
            .ends_with("parent = 1\n")
    );
    assert_eq!(
        std::fs::read_to_string(fork_ign.join(".venv/pyvenv.cfg")).unwrap(),
        cfg
    );
    let v = sh(&env, "f1", "cat .venv/pyvenv.cfg");
    assert_eq!(stdout(&v), cfg);
    let v = sh(&env, "t", "tail -n 1 .venv/pyvenv.cfg");
    assert_eq!(stdout(&v), "parent = 1\n");
    // A file the parent removes through the mount stays in the fork.
    std::fs::remove_file(m.at(".venv/bin/activate")).unwrap();
    let v = sh(&env, "f1", "test -f .venv/bin/activate && echo yes");
    assert_eq!(stdout(&v), "yes\n");
}

#[test]
fn a_read_only_mount_refuses_writes_to_ignored_files() {
    if !ready("a_read_only_mount_refuses_writes_to_ignored_files") {
        return;
    }
    let env = setup_with(POLICY);
    sh(&env, "t", "echo '*.log' > .gitignore && echo old > a.log");
    let m = Mounted::new(&env, "t", &["--readonly"]);
    assert_eq!(std::fs::read_to_string(m.at("a.log")).unwrap(), "old\n");
    assert_eq!(errno(std::fs::write(m.at("a.log"), "x")), Some(libc::EROFS));
    assert_eq!(errno(std::fs::write(m.at("b.log"), "x")), Some(libc::EROFS));
    assert_eq!(
        errno(std::fs::remove_file(m.at("a.log"))),
        Some(libc::EROFS)
    );
    assert_eq!(
        std::fs::read_to_string(ignored_dir(&env, "t").join("a.log")).unwrap(),
        "old\n"
    );
}
