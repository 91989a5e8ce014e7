//! Trees deeper than PATH_MAX (4 096 bytes of path): a chain of 5 000 directories, made
//! on the host and imported, or made by a run, goes through every command that walks a
//! tree (import, ls, find, checkpoint, diff, merge, export, verify, gc, exec and the layers a
//! later run stands on; the removal of a kept overlay; the ignored files, exported and
//! through the mount), and nothing needs a path that long on the host side.

mod common;
#[path = "common/fuse.rs"]
mod fuse;
#[path = "common/overlay.rs"]
mod overlay;

use std::ffi::CString;
use std::path::Path;

use common::Env;
use overlay::{SH_ALLOWED as POLICY, ok_in, overlay_or_skip, setup_with};

const DEPTH: usize = 5_000;

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

/// Opens `name` in the directory `dir` (a descriptor), never through a symlink.
fn open_at(dir: i32, name: &str, flags: i32) -> i32 {
    // SAFETY: a valid descriptor and C string.
    let fd = unsafe {
        libc::openat(
            dir,
            c(name).as_ptr(),
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    assert!(
        fd >= 0,
        "openat {name}: {}",
        std::io::Error::last_os_error()
    );
    fd
}

/// Makes `top/d/d/.../d/f` (`depth` directories named `d`, the file holding `text`),
/// one directory at a time relative to the last: no path is ever longer than a name.
fn make_chain(top: &Path, depth: usize, text: &str) {
    std::fs::create_dir_all(top).unwrap();
    let mut fd = open_at(libc::AT_FDCWD, top.to_str().unwrap(), libc::O_DIRECTORY);
    for _ in 0..depth {
        // SAFETY: valid descriptor and C string.
        assert_eq!(unsafe { libc::mkdirat(fd, c("d").as_ptr(), 0o755) }, 0);
        let next = open_at(fd, "d", libc::O_DIRECTORY);
        // SAFETY: ours to close.
        unsafe { libc::close(fd) };
        fd = next;
    }
    let f = open_at(fd, "f", libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL);
    // SAFETY: a valid descriptor and buffer.
    let n = unsafe { libc::write(f, text.as_ptr().cast(), text.len()) };
    assert_eq!(n, text.len() as isize);
    // SAFETY: ours to close.
    unsafe {
        libc::close(f);
        libc::close(fd);
    }
}

/// Walks `top/d/d/...` down as far as it goes; returns the depth and what `f` holds there.
fn read_chain(top: &Path) -> (usize, String) {
    let mut fd = open_at(libc::AT_FDCWD, top.to_str().unwrap(), libc::O_DIRECTORY);
    let mut depth = 0;
    loop {
        // SAFETY: a valid descriptor and C string.
        let next = unsafe {
            libc::openat(
                fd,
                c("d").as_ptr(),
                libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if next < 0 {
            break;
        }
        // SAFETY: ours to close.
        unsafe { libc::close(fd) };
        fd = next;
        depth += 1;
    }
    // SAFETY: a valid descriptor and C string.
    let f = unsafe { libc::openat(fd, c("f").as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    let mut text = String::new();
    if f >= 0 {
        let mut buf = [0u8; 256];
        // SAFETY: a valid descriptor and buffer.
        let n = unsafe { libc::read(f, buf.as_mut_ptr().cast(), buf.len()) };
        text = String::from_utf8_lossy(&buf[..n.max(0) as usize]).into_owned();
        // SAFETY: ours to close.
        unsafe { libc::close(f) };
    }
    // SAFETY: ours to close.
    unsafe { libc::close(fd) };
    (depth, text)
}

/// The workspace path of the chain's file: `/d/d/.../d/f` below `under`.
fn chain_path(under: &str, depth: usize) -> String {
    let mut p = under.trim_end_matches('/').to_string();
    for _ in 0..depth {
        p.push_str("/d");
    }
    p.push_str("/f");
    p
}

#[test]
fn a_tree_deeper_than_path_max_goes_through_the_cli() {
    let env = Env::new();
    env.ok(&["vault", "create", "t"]);
    let host = env.path("host");
    make_chain(&host, DEPTH, "bottom\n");
    let deep = chain_path("/", DEPTH);
    assert!(deep.len() > 4096 * 2, "the chain is deeper than PATH_MAX");

    env.ok(&["--vault", "t", "import", host.to_str().unwrap(), "/"]);
    assert_eq!(env.cat(Some("t"), &deep), "bottom\n");
    let found = env.json(&["--vault", "t", "find", "/", "--name", "f"]);
    assert!(
        found.to_string().contains("/d/d/d"),
        "find reaches the bottom: {found}"
    );
    // `tree` and `stat` walk it deep as well. (The whole chain through `tree` would be
    // hundreds of MB of indentation, so 1 000 levels of it.)
    let tree = env.ok(&["--vault", "t", "tree", "/", "-L", "1000"]);
    assert!(
        tree.stdout.ends_with("\n1000 directories, 0 files\n"),
        "tree --level 1000 ends: {}",
        &tree.stdout[tree.stdout.len().saturating_sub(200)..]
    );
    let tree = env.ok(&["--json", "--vault", "t", "tree", "/", "-L", "300"]);
    assert_eq!(
        tree.stdout.matches("\"name\": \"d\"").count(),
        300,
        "tree --json nests 300 levels"
    );
    let stat = env.json(&["--vault", "t", "stat", &deep]);
    assert_eq!(stat["size"], 7, "stat at the bottom: {stat}");
    let ls = env.ok(&[
        "--vault",
        "t",
        "ls",
        chain_path("/", DEPTH).trim_end_matches("/f"),
    ]);
    assert!(
        ls.stdout.contains('f'),
        "ls at depth {}: {}",
        DEPTH - 1,
        ls.stdout
    );

    env.ok(&["--vault", "t", "checkpoint", "save", "imported"]);
    // A change at the bottom, then the diff between the two checkpoints names it.
    env.run_stdin(&["--vault", "t", "write", &deep], b"changed\n");
    env.ok(&["--vault", "t", "checkpoint", "save", "edited"]);
    let diff = env.json(&["--vault", "t", "diff", "imported", "edited"]);
    let text = diff.to_string();
    assert!(
        text.contains(&format!("\"{deep}\"")),
        "the diff names the deep file: {}",
        &text[..text.len().min(400)]
    );

    let out = env.path("out");
    env.ok(&["--vault", "t", "export", "/", out.to_str().unwrap()]);
    assert_eq!(read_chain(&out), (DEPTH, "changed\n".to_string()));

    // A fork adds a file at the bottom while the vault edits the one there: the merge
    // walks both chains to the bottom and takes the fork's file.
    env.ok(&["vault", "fork", "t", "deepfork"]);
    let beside = format!("{}/g", deep.trim_end_matches("/f"));
    env.run_stdin(
        &["--vault", "deepfork", "write", &beside],
        b"from the fork\n",
    );
    env.run_stdin(&["--vault", "t", "write", &deep], b"changed again\n");
    env.ok(&["--vault", "t", "checkpoint", "save", "before-merge"]);
    let merged = env.json(&["--vault", "t", "vault", "merge", "deepfork"]);
    assert!(
        merged.to_string().contains(&format!("\"{beside}\"")),
        "the merge names the fork's deep file: {}",
        &merged.to_string()[..merged.to_string().len().min(400)]
    );
    assert_eq!(env.cat(Some("t"), &beside), "from the fork\n");
    assert_eq!(env.cat(Some("t"), &deep), "changed again\n");
    env.ok(&["--vault", "t", "checkpoint", "restore", "edited"]);

    let v = env.json(&["vault", "verify", "t"]);
    assert_eq!(v["report"]["ok"], true, "verify: {v}");
    env.ok(&["--vault", "t", "checkpoint", "restore", "imported"]);
    env.ok(&["gc"]);
    assert_eq!(env.cat(Some("t"), &deep), "bottom\n");
    let v = env.json(&["vault", "verify", "t"]);
    assert_eq!(v["report"]["ok"], true, "verify after gc: {v}");
}

#[test]
fn a_run_that_makes_a_chain_deeper_than_path_max_is_taken_in_and_later_runs_work() {
    if !overlay_or_skip("a_run_that_makes_a_chain_deeper_than_path_max") {
        return;
    }
    let env = setup_with(POLICY);
    // `mkdir -p` and `cd -P` 500 levels at a time: a shell's `cd` to a directory deeper
    // than PATH_MAX must be physical (`-P`), and each one walks back up to learn where it
    // is, which is slow in an overlay at this depth.
    let step = vec!["d"; 500].join("/");
    let script = format!(
        "i=0; while [ $i -lt {} ]; do mkdir -p {step} && cd -P {step} || exit 1; i=$((i+1)); done; echo bottom > f",
        DEPTH / 500
    );
    let v = ok_in(&env, "t", &["--shell", &script]);
    assert_eq!(
        v["change_summary"]["added"].as_u64(),
        Some(DEPTH as u64 + 1),
        "{}",
        v["change_summary"]
    );
    let deep = chain_path("/", DEPTH);
    assert_eq!(env.cat(Some("t"), &deep), "bottom\n");

    // The next run, in the kept overlay and after it is retired (`avfs gc`: its upper
    // becomes a layer), sees the chain; a restore makes the next run's layer a diff
    // that removes it, and going back writes it as a layer again.
    ok_in(&env, "t", &["--", "true"]);
    env.ok(&["--vault", "t", "checkpoint", "save", "deep"]);
    env.ok(&["gc"]);
    let v = ok_in(&env, "t", &["--shell", "cd -P d/d/d && ls"]);
    assert_eq!(overlay::stdout(&v), "d\n");
    let list = env.json(&["--vault", "t", "checkpoint", "list"]);
    let before = list["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| {
            c["message"]
                .as_str()
                .is_some_and(|m| m.contains("mkdir -p"))
        })
        .map(|c| c["name"].as_str().unwrap().to_string())
        .expect("the checkpoint before the deep run");
    env.ok(&["--vault", "t", "checkpoint", "restore", &before]);
    let v = ok_in(&env, "t", &["--shell", "test ! -e d"]);
    assert_eq!(v["exit_code"], 0);
    env.ok(&["--vault", "t", "checkpoint", "restore", "deep"]);
    env.ok(&["gc"]);
    let script = format!(
        "i=0; while [ $i -lt {} ]; do cd -P {step} || exit 1; i=$((i+1)); done; cat f",
        DEPTH / 500
    );
    let v = ok_in(&env, "t", &["--shell", &script]);
    assert_eq!(overlay::stdout(&v), "bottom\n");
    let out = env.path("out");
    env.ok(&["--vault", "t", "export", "/", out.to_str().unwrap()]);
    assert_eq!(read_chain(&out), (DEPTH, "bottom\n".to_string()));
}

/// A failed run that made a chain deeper than PATH_MAX, with `--rollback-on-failure`:
/// an envelope (the command's status, no error), the workspace back where it was, an
/// audit row, and the next run works; the same run without rollback keeps the chain.
#[test]
fn a_failed_deep_run_rolls_back_or_keeps_as_asked_and_later_runs_work() {
    if !overlay_or_skip("a_failed_deep_run_rolls_back_or_keeps_as_asked") {
        return;
    }
    let env = setup_with(POLICY);
    let step = vec!["d"; 500].join("/");
    let script = format!(
        "i=0; while [ $i -lt {} ]; do mkdir -p {step} && cd -P {step} || exit 1; i=$((i+1)); done; echo bottom > f; exit 3",
        DEPTH / 500
    );
    let deep = chain_path("/", DEPTH);
    let v = overlay::exec_in(&env, "t", &["--rollback-on-failure", "--shell", &script]);
    assert_eq!(v["exit_code"], 3, "{v}");
    assert_eq!(v["rollback"]["performed"], true, "{v}");
    let ls = env.json(&["--vault", "t", "ls", "/"]);
    assert!(!ls.to_string().contains("\"d\""), "rolled back: {ls}");
    let v = ok_in(&env, "t", &["--shell", "test ! -e d && echo clean"]);
    assert_eq!(overlay::stdout(&v), "clean\n");

    // Without rollback the failed run's chain is kept, and later runs see it.
    let v = overlay::exec_in(&env, "t", &["--shell", &script]);
    assert_eq!(v["exit_code"], 3, "{v}");
    assert_eq!(v["rollback"]["performed"], false, "{v}");
    assert_eq!(env.cat(Some("t"), &deep), "bottom\n");
    let v = ok_in(&env, "t", &["--shell", "cd -P d/d/d && ls"]);
    assert_eq!(overlay::stdout(&v), "d\n");
    let audit = env.json(&["--vault", "t", "audit"]);
    let rows = audit.to_string().matches("exec").count();
    assert!(rows >= 3, "every run has its audit row: {audit}");
}

/// The shell script that goes `DEPTH` levels down (making the chain with `mkdir`),
/// then runs `then` at the bottom.
fn down(make: bool, then: &str) -> String {
    let step = vec!["d"; 500].join("/");
    let mk = if make {
        format!("mkdir -p {step} && ")
    } else {
        String::new()
    };
    format!(
        "i=0; while [ $i -lt {} ]; do {mk}cd -P {step} || exit 1; i=$((i+1)); done; {then}",
        DEPTH / 500
    )
}

/// The workspace's ignored directory on the host (`status` names it).
fn ignored_dir(env: &Env) -> std::path::PathBuf {
    overlay::ignored_dir(env, "t")
}

/// Walks `top/d/d/...` down `depth` levels (no further) and says whether `name` is there.
fn exists_at(top: &Path, depth: usize, name: &str) -> bool {
    let mut fd = open_at(libc::AT_FDCWD, top.to_str().unwrap(), libc::O_DIRECTORY);
    for _ in 0..depth {
        let next = open_at(fd, "d", libc::O_DIRECTORY);
        // SAFETY: ours to close.
        unsafe { libc::close(fd) };
        fd = next;
    }
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a valid descriptor, C string and buffer.
    let r = unsafe {
        libc::fstatat(
            fd,
            c(name).as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    // SAFETY: ours to close.
    unsafe { libc::close(fd) };
    r == 0
}

/// The ignore rules hold at any depth: a run that makes a chain deeper than PATH_MAX with
/// `f.txt` and `f.log` at the bottom (`.gitignore`: `*.log`) puts `f.txt` in the history
/// and `f.log` in the ignored directory; later runs see `f.log` at its path, a run that
/// deletes it deletes it there, and runs after that work.
#[test]
fn ignore_rules_apply_below_path_max() {
    if !overlay_or_skip("ignore_rules_apply_below_path_max") {
        return;
    }
    let env = setup_with(POLICY);
    ok_in(&env, "t", &["--shell", "echo '*.log' > .gitignore"]);
    let v = ok_in(
        &env,
        "t",
        &[
            "--shell",
            &down(true, "echo txt > f.txt && echo log > f.log"),
        ],
    );
    let s = &v["change_summary"];
    assert_eq!(s["ignored"]["files"], 1, "the deep f.log is ignored: {s}");
    assert_eq!(s["ignored"]["bytes"], 4, "{s}");
    assert_eq!(s["added"].as_u64(), Some(DEPTH as u64 + 1), "{s}");
    let deep = chain_path("/", DEPTH);
    let (txt, log) = (format!("{deep}.txt"), format!("{deep}.log"));
    assert_eq!(env.cat(Some("t"), &txt), "txt\n");
    let r = env.run(&["--vault", "t", "stat", &log]);
    assert_ne!(r.code, 0, "f.log is not in the history: {}", r.stdout);
    let ign = ignored_dir(&env);
    assert!(exists_at(&ign, DEPTH, "f.log"), "f.log is in {ign:?}");
    assert!(!exists_at(&ign, DEPTH, "f.txt"), "f.txt is not");

    // A later run sees it at its path; one that deletes it deletes it; runs go on.
    let v = ok_in(&env, "t", &["--shell", &down(false, "cat f.log f.txt")]);
    assert_eq!(overlay::stdout(&v), "log\ntxt\n");
    let v = ok_in(&env, "t", &["--shell", &down(false, "rm f.log")]);
    assert_eq!(v["change_summary"]["total"], 0, "{}", v["change_summary"]);
    assert!(
        !exists_at(&ign, DEPTH, "f.log"),
        "the deletion reached {ign:?}"
    );
    let v = ok_in(
        &env,
        "t",
        &["--shell", &down(false, "test ! -e f.log && cat f.txt")],
    );
    assert_eq!(overlay::stdout(&v), "txt\n");
    env.ok(&["gc"]);
    let v = ok_in(&env, "t", &["--shell", &down(false, "ls")]);
    assert_eq!(overlay::stdout(&v), "f.txt\n");
    let v = env.json(&["vault", "verify", "t"]);
    assert_eq!(v["report"]["ok"], true, "verify: {v}");
}

/// A whole ignored directory (`build/`) below PATH_MAX moves out of the history as one,
/// with what it holds; the source beside it is taken in.
#[test]
fn an_ignored_directory_below_path_max_stays_out_of_the_history() {
    if !overlay_or_skip("an_ignored_directory_below_path_max") {
        return;
    }
    let env = setup_with(POLICY);
    let v = ok_in(
        &env,
        "t",
        &[
            "--shell",
            &format!(
                "echo 'build/' > .gitignore && {}",
                down(
                    true,
                    "echo src > main.c && mkdir -p build/obj && echo o > build/obj/main.o \
                     && echo b > build/main"
                )
            ),
        ],
    );
    let s = &v["change_summary"];
    assert_eq!(s["ignored"]["files"], 2, "{s}");
    assert_eq!(s["ignored"]["bytes"], 4, "{s}");
    // The chain, `main.c` and `.gitignore`.
    assert_eq!(s["added"].as_u64(), Some(DEPTH as u64 + 2), "{s}");
    let deep = chain_path("/", DEPTH);
    let bottom = deep.trim_end_matches("/f");
    assert_eq!(env.cat(Some("t"), &format!("{bottom}/main.c")), "src\n");
    let r = env.run(&["--vault", "t", "stat", &format!("{bottom}/build")]);
    assert_ne!(r.code, 0, "build/ is not in the history: {}", r.stdout);
    let ign = ignored_dir(&env);
    assert!(exists_at(&ign, DEPTH, "build"), "build/ is in {ign:?}");

    // Later runs see it and add to it; removing it removes it.
    let v = ok_in(
        &env,
        "t",
        &[
            "--shell",
            &down(
                false,
                "cat build/obj/main.o build/main && echo 2 > build/two",
            ),
        ],
    );
    assert_eq!(overlay::stdout(&v), "o\nb\n");
    assert_eq!(v["change_summary"]["total"], 0, "{}", v["change_summary"]);
    assert_eq!(v["change_summary"]["ignored"]["files"], 1);
    let v = ok_in(&env, "t", &["--shell", &down(false, "ls build")]);
    assert_eq!(overlay::stdout(&v), "main\nobj\ntwo\n");
    ok_in(&env, "t", &["--shell", &down(false, "rm -r build")]);
    assert!(!exists_at(&ign, DEPTH, "build"), "removed from {ign:?}");
    let v = ok_in(&env, "t", &["--shell", &down(false, "ls")]);
    assert_eq!(overlay::stdout(&v), "main.c\n");
}

/// A fork and its parent both change a chain deeper than PATH_MAX: edits of the bottom
/// file that do not overlap merge line by line (with files both sides added beside it),
/// and the same line edited on both sides is a conflict named at its depth, the target's
/// text kept. The merge walks the chain level by level without recursion.
#[test]
fn a_chain_deeper_than_path_max_changed_on_both_sides_merges() {
    let env = Env::new();
    env.ok(&["vault", "create", "t"]);
    let host = env.path("host");
    make_chain(&host, DEPTH, "1\n2\n3\n4\n5\n6\n7\n8\n");
    env.ok(&["--vault", "t", "import", host.to_str().unwrap(), "/"]);
    env.ok(&["--vault", "t", "checkpoint", "save", "base"]);
    env.ok(&["vault", "fork", "t", "f1"]);
    let deep = chain_path("/", DEPTH);
    let bottom = deep.trim_end_matches("/f").to_string();
    let (g, h) = (format!("{bottom}/g"), format!("{bottom}/h"));
    env.ok(&[
        "--vault",
        "f1",
        "write",
        &deep,
        "ONE\n2\n3\n4\n5\n6\n7\n8\n",
    ]);
    env.ok(&["--vault", "f1", "write", &g, "from the fork\n"]);
    env.ok(&[
        "--vault",
        "t",
        "write",
        &deep,
        "1\n2\n3\n4\n5\n6\n7\nEIGHT\n",
    ]);
    env.ok(&["--vault", "t", "write", &h, "from the target\n"]);
    env.ok(&["--vault", "t", "checkpoint", "save", "target-edits"]);
    let r = env.json(&["--vault", "t", "vault", "merge", "f1"]);
    assert_eq!(
        r["clean"],
        true,
        "{}",
        &r.to_string()[..r.to_string().len().min(600)]
    );
    assert_eq!(r["line_merged"], serde_json::json!([deep]));
    assert_eq!(env.cat(Some("t"), &deep), "ONE\n2\n3\n4\n5\n6\n7\nEIGHT\n");
    assert_eq!(env.cat(Some("t"), &g), "from the fork\n");
    assert_eq!(env.cat(Some("t"), &h), "from the target\n");

    // Both sides edit line 4: a conflict at the bottom; the target keeps its text.
    env.ok(&["vault", "fork", "t", "f2"]);
    let (fork4, target4) = (
        "ONE\n2\n3\nFOUR (fork)\n5\n6\n7\nEIGHT\n",
        "ONE\n2\n3\nFOUR (target)\n5\n6\n7\nEIGHT\n",
    );
    env.ok(&["--vault", "f2", "write", &deep, fork4]);
    env.ok(&["--vault", "t", "write", &deep, target4]);
    env.ok(&["--vault", "t", "checkpoint", "save", "target-four"]);
    let r = env.json_exit(&["--vault", "t", "vault", "merge", "f2"], 1);
    assert_eq!(
        r["refused"],
        true,
        "{}",
        &r.to_string()[..r.to_string().len().min(600)]
    );
    let conflicts = r["conflicts"].as_array().unwrap();
    assert_eq!(conflicts.len(), 1, "{:?}", conflicts.len());
    assert_eq!(conflicts[0]["path"], deep.as_str());
    assert_eq!(conflicts[0]["kind"], "both_modified");
    assert_eq!(env.cat(Some("t"), &deep), target4);
    let v = env.json(&["vault", "verify", "t"]);
    assert_eq!(v["report"]["ok"], true, "verify: {v}");
}

/// How deep the deepest directory below `top` is, counted up to `cap` (a walk by paths,
/// which stay short up to there; symlinks are not followed, unreadable directories are
/// not entered).
fn deepest(top: &Path, cap: usize) -> usize {
    let mut most = 0;
    let mut stack = vec![(top.to_path_buf(), 0)];
    while let Some((dir, depth)) = stack.pop() {
        most = most.max(depth);
        if depth >= cap {
            continue;
        }
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push((e.path(), depth + 1));
            }
        }
    }
    most
}

/// A run makes a chain deeper than PATH_MAX in a fork; the fork's kept overlay holds it
/// in its upper. Deleting the fork retires the overlay and removes its directory: nothing
/// of the chain is left under $AVFS_HOME (std's `remove_dir_all` keeps a descriptor per
/// level and left it there), and the parent's runs go on.
#[test]
fn a_kept_overlay_deeper_than_path_max_is_removed_with_its_workspace() {
    if !overlay_or_skip("a_kept_overlay_deeper_than_path_max_is_removed") {
        return;
    }
    let env = setup_with(POLICY);
    ok_in(&env, "t", &["--", "true"]);
    env.ok(&["vault", "fork", "t", "deep"]);
    ok_in(&env, "deep", &["--shell", &down(true, "echo bottom > f")]);
    let st = env.json(&["--vault", "deep", "status"]);
    let kept = st["kept_overlays"].as_array().unwrap();
    assert!(
        kept.iter().any(|k| k["workspace"] == "deep"),
        "the fork has a kept overlay: {kept:?}"
    );
    let home = env.home();
    assert!(
        deepest(&home, 200) >= 200,
        "the chain is in the kept overlay under {home:?}"
    );
    env.ok(&["vault", "delete", "deep", "-y"]);
    let left = deepest(&home, 200);
    assert!(
        left < 100,
        "a tree {left}+ levels deep is left under {home:?}"
    );
    let v = ok_in(&env, "t", &["--shell", "echo still > here && cat here"]);
    assert_eq!(overlay::stdout(&v), "still\n");
}

/// Opens `name` below `dir` as a directory; the errno when it cannot.
fn try_open_dir(dir: i32, name: &str) -> Result<i32, i32> {
    // SAFETY: a valid descriptor and C string.
    let fd = unsafe {
        libc::openat(
            dir,
            c(name).as_ptr(),
            libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(fd)
    }
}

/// An ignored `node_modules/` a run made 5 000 levels deep (deeper than PATH_MAX on the
/// host, where the ignored files live): `export --include-ignored` copies all of it, of
/// the workspace and of the ignored directory alone; the mount shows it as deep as its
/// host path fits and below answers ENAMETOOLONG (a lookup and a create), never "no such
/// file", a crash or a hang; the mount keeps working.
#[test]
fn an_ignored_chain_deeper_than_path_max_exports_and_shows_in_the_mount() {
    if !overlay_or_skip("an_ignored_chain_deeper_than_path_max") {
        return;
    }
    let env = setup_with(POLICY);
    let v = ok_in(
        &env,
        "t",
        &[
            "--shell",
            &format!(
                "echo 'node_modules/' > .gitignore && echo top > top.txt && mkdir node_modules \
                 && echo shallow > node_modules/index.js && cd node_modules && {}",
                down(true, "echo bottom > f")
            ),
        ],
    );
    let s = &v["change_summary"];
    assert_eq!(s["ignored"]["files"], 2, "{s}");
    assert_eq!(
        s["added"], 2,
        "only .gitignore and top.txt are history: {s}"
    );

    let out = env.path("out");
    env.ok(&[
        "--vault",
        "t",
        "export",
        "--include-ignored",
        "/",
        out.to_str().unwrap(),
    ]);
    assert_eq!(
        std::fs::read_to_string(out.join("top.txt")).unwrap(),
        "top\n"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("node_modules/index.js")).unwrap(),
        "shallow\n"
    );
    assert_eq!(
        read_chain(&out.join("node_modules")),
        (DEPTH, "bottom\n".to_string())
    );
    let only = env.path("only");
    env.ok(&[
        "--vault",
        "t",
        "export",
        "--include-ignored",
        "/node_modules",
        only.to_str().unwrap(),
    ]);
    assert_eq!(read_chain(&only), (DEPTH, "bottom\n".to_string()));
    // Again over the first export (`--force`): the deep files are replaced in place.
    env.ok(&[
        "--vault",
        "t",
        "export",
        "--force",
        "--include-ignored",
        "/",
        out.to_str().unwrap(),
    ]);
    assert_eq!(
        read_chain(&out.join("node_modules")),
        (DEPTH, "bottom\n".to_string())
    );

    if !fuse::fuse_or_skip("an_ignored_chain_deeper_than_path_max (mount)") {
        return;
    }
    let mp = env.path("mnt");
    std::fs::create_dir_all(&mp).unwrap();
    env.ok(&["mount", "t", mp.to_str().unwrap()]);
    struct Unmount<'a>(&'a Env, &'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = self.0.run(&["unmount", self.1.to_str().unwrap()]);
        }
    }
    let _unmount = Unmount(&env, &mp);
    assert_eq!(
        std::fs::read_to_string(mp.join("node_modules/index.js")).unwrap(),
        "shallow\n"
    );
    let mut fd = open_at(
        libc::AT_FDCWD,
        mp.join("node_modules").to_str().unwrap(),
        libc::O_DIRECTORY,
    );
    let mut depth = 0;
    let errno = loop {
        match try_open_dir(fd, "d") {
            Ok(next) => {
                // SAFETY: ours to close.
                unsafe { libc::close(fd) };
                fd = next;
                depth += 1;
            }
            Err(e) => break e,
        }
    };
    assert_eq!(
        errno,
        libc::ENAMETOOLONG,
        "below depth {depth}: {}",
        std::io::Error::from_raw_os_error(errno)
    );
    assert!(
        depth > 1_000 && depth < DEPTH,
        "the mount shows {depth} levels"
    );
    // A new entry there is refused the same way, and the mount goes on working.
    // SAFETY: a valid descriptor and C string.
    let r = unsafe { libc::mkdirat(fd, c("x").as_ptr(), 0o755) };
    let e = std::io::Error::last_os_error().raw_os_error();
    assert_eq!(
        (r, e),
        (-1, Some(libc::ENAMETOOLONG)),
        "mkdir at depth {depth}"
    );
    // SAFETY: ours to close.
    unsafe { libc::close(fd) };
    assert_eq!(
        std::fs::read_to_string(mp.join("top.txt")).unwrap(),
        "top\n"
    );
    std::fs::write(mp.join("node_modules/new.js"), "new\n").unwrap();
    assert_eq!(
        std::fs::read_to_string(mp.join("node_modules/new.js")).unwrap(),
        "new\n"
    );
}
