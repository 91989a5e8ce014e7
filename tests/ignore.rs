//! Ignore rules, driven through the real binary: what `.gitignore` (any depth),
//! `.git/info/exclude` and `.avfsignore` match and the history does not hold stays in the
//! workspace (the next run and a fork see it) but out of the change report, checkpoints,
//! diffs and merges, and out of the vault file; `status` shows it; deleting the workspace
//! reclaims it.
//!
//! Every test needs the overlay engine; under `AVFS_REQUIRE_FUSE=1` a machine without it
//! fails them instead of skipping.

mod common;
#[path = "common/fuse.rs"]
mod fuse;
#[path = "common/overlay.rs"]
mod overlay;

use std::collections::BTreeSet;

use common::Env;
use overlay::{exec_in, ignored_dir, ok_in, overlay_or_skip, setup_with, sh_in as sh, stdout};
use serde_json::Value;

const POLICY: &str = r#"
[[rule]]
name = "test-sh"
program = "sh"
category = "mutating"
decision = "allow_with_checkpoint"

[[rule]]
name = "test-python"
program = "python3"
category = "mutating"
decision = "allow_with_checkpoint"
"#;

fn paths(v: &Value) -> BTreeSet<String> {
    v["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap().to_string())
        .collect()
}

const RULES: &str = "printf '.venv/\\n*.pyc\\nbuild/\\n*.txt\\n!keep.txt\\n' > .gitignore";

#[test]
fn ignored_files_stay_in_place_but_out_of_the_history() {
    if !overlay_or_skip("ignored_files_stay_in_place_but_out_of_the_history") {
        return;
    }
    let env = setup_with(POLICY);
    // The run writes its own rules: they count for what it writes.
    let v = sh(
        &env,
        "t",
        &format!(
            "{RULES}; mkdir -p .venv/bin build src/pkg && echo tool > .venv/bin/tool \
             && echo out > build/out && echo src > src/a.py && echo c > src/a.pyc \
             && echo n > notes.txt && echo k > keep.txt && echo deep > src/pkg/x.pyc"
        ),
    );
    let got = paths(&v);
    let want: BTreeSet<String> = ["/.gitignore", "/keep.txt", "/src", "/src/a.py", "/src/pkg"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(got, want, "{}", v["changes"]);
    assert_eq!(
        v["change_summary"]["ignored"]["files"], 5,
        "{}",
        v["change_summary"]
    );
    assert_eq!(v["change_summary"]["ignored"]["bytes"], 5 + 4 + 2 + 2 + 5);
    // The next run sees them at the same paths.
    let v = sh(
        &env,
        "t",
        "cat .venv/bin/tool build/out src/a.pyc notes.txt src/pkg/x.pyc",
    );
    assert_eq!(stdout(&v), "tool\nout\nc\nn\ndeep\n");
    assert!(paths(&v).is_empty(), "{}", v["changes"]);
    // Not in the history: not in the vault's tree, not in a diff from the empty tree.
    let ls = env.run(&["--vault", "t", "ls", "/"]);
    assert!(
        !ls.stdout.contains(".venv") && !ls.stdout.contains("build"),
        "{}",
        ls.stdout
    );
    let d = env.json(&["--vault", "t", "diff", "--name-only"]);
    let s = d.to_string();
    for p in [".venv", "build/out", "a.pyc", "notes.txt", "x.pyc"] {
        assert!(!s.contains(p), "{p} in the diff: {s}");
    }
    assert!(s.contains("keep.txt"), "{s}");
    // Status shows them.
    let st = env.json(&["--vault", "t", "status"]);
    assert_eq!(st["ignored"]["files"], 5, "{}", st["ignored"]);
    // Their bytes are not in the vault file.
    let marker = "ignored-bytes-marker-7f3a9c";
    // Made inside the run, so that the command line (which the audit log keeps) does not
    // hold it.
    sh(
        &env,
        "t",
        "printf '%s%s\\n' ignored-bytes- marker-7f3a9c > build/secret",
    );
    assert!(ignored_dir(&env, "t").join("build/secret").is_file());
    let vault_file = env.home().join("vaults/t.avfs");
    let mut bytes = std::fs::read(&vault_file).unwrap();
    let mut wal = vault_file.clone().into_os_string();
    wal.push("-wal");
    bytes.extend(std::fs::read(wal).unwrap_or_default());
    assert!(
        !bytes.windows(marker.len()).any(|w| w == marker.as_bytes()),
        "an ignored file's bytes reached the vault"
    );
    // Nor compressed: every stored chunk, decoded.
    let db = rusqlite::Connection::open(&vault_file).unwrap();
    let mut rows = db.prepare("SELECT codec, data FROM chunk").unwrap();
    let chunks = rows
        .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?)))
        .unwrap();
    for row in chunks {
        let (codec, stored) = row.unwrap();
        let bytes = agentvfs::store::objects::decode_chunk(codec, stored).unwrap();
        assert!(
            !bytes.windows(marker.len()).any(|w| w == marker.as_bytes()),
            "an ignored file's bytes reached the vault, compressed"
        );
    }
}

#[test]
fn a_tracked_file_stays_tracked_when_a_rule_later_matches_it() {
    if !overlay_or_skip("a_tracked_file_stays_tracked_when_a_rule_later_matches_it") {
        return;
    }
    let env = setup_with(POLICY);
    sh(&env, "t", "mkdir logs && echo 1 > logs/old.log");
    let v = sh(
        &env,
        "t",
        "echo '*.log' > .gitignore && echo 2 >> logs/old.log && echo new > logs/new.log",
    );
    let got = paths(&v);
    assert!(got.contains("/logs/old.log"), "{got:?}");
    assert!(!got.contains("/logs/new.log"), "{got:?}");
    assert_eq!(v["change_summary"]["ignored"]["files"], 1);
    assert_eq!(env.cat(Some("t"), "/logs/old.log"), "1\n2\n");
}

#[test]
fn deleting_ignored_files_and_exclude_and_avfsignore() {
    if !overlay_or_skip("deleting_ignored_files_and_exclude_and_avfsignore") {
        return;
    }
    let env = setup_with(POLICY);
    sh(
        &env,
        "t",
        "mkdir -p .git/info cache sub && echo 'cache/' > .git/info/exclude \
         && echo 'tmp*' > sub/.avfsignore && echo a > cache/a && echo b > cache/b \
         && echo t > sub/tmp1 && echo v > sub/kept",
    );
    let dir = ignored_dir(&env, "t");
    assert!(dir.join("cache/a").is_file() && dir.join("sub/tmp1").is_file());
    assert!(!dir.join("sub/kept").exists());
    // Deleting an ignored file is no change of the history, and it is gone for good.
    let v = sh(&env, "t", "rm cache/a sub/tmp1");
    assert!(paths(&v).is_empty(), "{}", v["changes"]);
    let v = exec_in(&env, "t", &["--", "sh", "-c", "ls cache sub"]);
    assert_eq!(stdout(&v), "cache:\nb\n\nsub:\nkept\n");
    assert!(!dir.join("cache/a").exists());
    // A whole ignored directory replaced: the old content goes.
    sh(&env, "t", "rm -rf cache && mkdir cache && echo c > cache/c");
    let v = sh(&env, "t", "ls cache");
    assert_eq!(stdout(&v), "c\n");
}

#[test]
fn a_fork_sees_its_parents_ignored_files_and_keeps_its_own() {
    if !overlay_or_skip("a_fork_sees_its_parents_ignored_files_and_keeps_its_own") {
        return;
    }
    let env = setup_with(POLICY);
    sh(
        &env,
        "t",
        &format!("{RULES} && mkdir -p .venv/bin && echo parent > .venv/bin/tool && echo s > a.py"),
    );
    env.ok(&["vault", "fork", "t", "f1"]);
    let v = sh(&env, "f1", "cat .venv/bin/tool");
    assert_eq!(stdout(&v), "parent\n");
    // The fork's writes to ignored files stay the fork's.
    let v = sh(
        &env,
        "f1",
        "echo fork > .venv/bin/tool && echo new > .venv/bin/new && echo f >> a.py",
    );
    assert_eq!(paths(&v), BTreeSet::from(["/a.py".to_string()]));
    let v = sh(&env, "t", "cat .venv/bin/tool; ls .venv/bin");
    assert_eq!(stdout(&v), "parent\ntool\n");
    let v = sh(&env, "f1", "cat .venv/bin/tool .venv/bin/new");
    assert_eq!(stdout(&v), "fork\nnew\n");
    // A merge brings the fork's versioned change, never its ignored files.
    env.ok(&["vault", "merge", "f1", "--into", "t"]);
    assert_eq!(env.cat(Some("t"), "/a.py"), "s\nf\n");
    let v = sh(&env, "t", "cat .venv/bin/tool; ls .venv/bin");
    assert_eq!(stdout(&v), "parent\ntool\n");
    // Deleting the fork reclaims its ignored files; the parent's stay.
    let fork_dir = ignored_dir(&env, "f1");
    let parent_dir = ignored_dir(&env, "t");
    assert!(fork_dir.join(".venv/bin/new").is_file());
    env.ok(&["vault", "delete", "f1", "-y"]);
    assert!(!fork_dir.exists());
    assert!(parent_dir.join(".venv/bin/tool").is_file());
    env.ok(&["vault", "delete", "t", "-y"]);
    assert!(!parent_dir.exists());
}

#[test]
fn a_venv_is_ignored_and_works_in_the_next_run() {
    if !overlay_or_skip("a_venv_is_ignored_and_works_in_the_next_run") {
        return;
    }
    let env = setup_with(POLICY);
    sh(&env, "t", "echo '.venv/' > .gitignore");
    let made = ok_in(&env, "t", &["--", "python3", "-m", "venv", ".venv"]);
    assert!(paths(&made).is_empty(), "{}", made["changes"]);
    assert!(made["change_summary"]["ignored"]["files"].as_u64().unwrap() > 0);
    let v = ok_in(
        &env,
        "t",
        &[
            "--",
            ".venv/bin/python",
            "-c",
            "import sys; print(sys.prefix)",
        ],
    );
    assert!(stdout(&v).trim().ends_with("/.venv"), "{}", stdout(&v));
}

#[test]
fn export_include_ignored_brings_them_out_beside_the_tracked_files() {
    if !overlay_or_skip("export_include_ignored_brings_them_out_beside_the_tracked_files") {
        return;
    }
    let env = setup_with(POLICY);
    sh(
        &env,
        "t",
        &format!(
            "{RULES} && mkdir -p .venv/bin src/pkg && echo tool > .venv/bin/tool \
             && chmod 755 .venv/bin/tool && ln -s tool .venv/bin/alias \
             && echo src > src/a.py && echo c > src/pkg/x.pyc && echo n > notes.txt"
        ),
    );
    // A tracked file at a path the rules match, written after them (by the CLI): on the
    // host the history's version wins.
    env.ok(&["--vault", "t", "write", "/later.txt", "tracked"]);
    std::fs::write(ignored_dir(&env, "t").join("later.txt"), "stale").unwrap();
    let plain = env.path("plain");
    let x = env.json(&["--vault", "t", "export", "/", plain.to_str().unwrap()]);
    assert!(!plain.join(".venv").exists() && !plain.join("notes.txt").exists());
    assert_eq!(x["stats"]["files"], 3, "{x}");
    let all = env.path("all");
    let x = env.json(&[
        "--vault",
        "t",
        "export",
        "--include-ignored",
        "/",
        all.to_str().unwrap(),
    ]);
    let read = |p: &str| std::fs::read_to_string(all.join(p)).unwrap();
    assert_eq!(read(".venv/bin/tool"), "tool\n");
    assert_eq!(read("src/pkg/x.pyc"), "c\n");
    assert_eq!(read("notes.txt"), "n\n");
    assert_eq!(read("src/a.py"), "src\n");
    assert_eq!(read("later.txt"), "tracked");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(all.join(".venv/bin/tool"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    assert_eq!(
        std::fs::read_link(all.join(".venv/bin/alias")).unwrap(),
        std::path::Path::new("tool")
    );
    // 3 tracked + 3 ignored files; the stale ignored copy of a tracked path is skipped.
    assert_eq!(x["stats"]["files"], 6, "{x}");
    assert_eq!(x["stats"]["symlinks"], 1, "{x}");
    let skipped = x["stats"]["skipped"].to_string();
    assert!(skipped.contains("/later.txt"), "{skipped}");
    // An ignored directory alone, which the history does not hold.
    let venv = env.path("venv");
    env.ok(&[
        "--vault",
        "t",
        "export",
        "--include-ignored",
        "/.venv",
        venv.to_str().unwrap(),
    ]);
    assert_eq!(
        std::fs::read_to_string(venv.join("bin/tool")).unwrap(),
        "tool\n"
    );
    // Without the flag, it is not found; a non-empty host directory is refused; with
    // --force, a stale copy of an ignored file is replaced.
    let e = env.json_err(
        &[
            "--vault",
            "t",
            "export",
            "/.venv",
            env.path("x").to_str().unwrap(),
        ],
        1,
    );
    assert_eq!(e["kind"], "not_found", "{e}");
    let e = env.json_err(
        &[
            "--vault",
            "t",
            "export",
            "--include-ignored",
            "/.venv",
            venv.to_str().unwrap(),
        ],
        1,
    );
    assert_eq!(e["kind"], "refused", "{e}");
    std::fs::write(venv.join("bin/tool"), "old").unwrap();
    env.ok(&[
        "--vault",
        "t",
        "export",
        "--force",
        "--include-ignored",
        "/.venv",
        venv.to_str().unwrap(),
    ]);
    assert_eq!(
        std::fs::read_to_string(venv.join("bin/tool")).unwrap(),
        "tool\n"
    );
}

/// Unmounts when the test ends, whatever happened.
struct Mounted<'a>(&'a Env, std::path::PathBuf);

impl Drop for Mounted<'_> {
    fn drop(&mut self) {
        let _ = self.0.run(&["unmount", self.1.to_str().unwrap()]);
    }
}

#[test]
fn the_mount_shows_ignored_files() {
    if !overlay_or_skip("the_mount_shows_ignored_files")
        || !fuse::fuse_or_skip("the_mount_shows_ignored_files")
    {
        return;
    }
    let env = setup_with(POLICY);
    sh(
        &env,
        "t",
        &format!(
            "{RULES} && mkdir -p .venv/bin src && echo tool > .venv/bin/tool \
             && chmod 755 .venv/bin/tool && ln -s tool .venv/bin/alias \
             && echo s > src/a.py && echo c > src/a.pyc"
        ),
    );
    let mp = env.path("mnt");
    std::fs::create_dir_all(&mp).unwrap();
    env.ok(&["mount", "t", mp.to_str().unwrap()]);
    let _m = Mounted(&env, mp.clone());
    let read = |p: &str| std::fs::read_to_string(mp.join(p));
    assert_eq!(read(".venv/bin/tool").unwrap(), "tool\n");
    assert_eq!(read("src/a.pyc").unwrap(), "c\n");
    assert_eq!(read("src/a.py").unwrap(), "s\n");
    use std::os::unix::fs::PermissionsExt;
    let m = std::fs::metadata(mp.join(".venv/bin/tool")).unwrap();
    assert_eq!(m.permissions().mode() & 0o777, 0o755);
    assert_eq!(m.len(), 5);
    assert_eq!(
        std::fs::read_link(mp.join(".venv/bin/alias")).unwrap(),
        std::path::Path::new("tool")
    );
    let names = |p: &str| -> BTreeSet<String> {
        std::fs::read_dir(mp.join(p))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect()
    };
    assert_eq!(
        names(""),
        BTreeSet::from([".gitignore", ".venv", "src"].map(String::from))
    );
    assert_eq!(
        names("src"),
        BTreeSet::from(["a.py", "a.pyc"].map(String::from))
    );
    assert_eq!(
        names(".venv/bin"),
        BTreeSet::from(["alias", "tool"].map(String::from))
    );
    // Writes to them go to the ignored directory (tests/mount_ignored.rs has the rest).
    std::fs::write(mp.join(".venv/bin/new2"), "x").unwrap();
    assert!(ignored_dir(&env, "t").join(".venv/bin/new2").is_file());
    assert_eq!(read(".venv/bin/tool").unwrap(), "tool\n");
    // The tracked files stay writable, and into the vault.
    std::fs::write(mp.join("src/b.py"), "b").unwrap();
    assert_eq!(env.cat(Some("t"), "/src/b.py"), "b");
    // A run while mounted: what it adds to the ignored files shows up.
    sh(&env, "t", "echo new > .venv/bin/new");
    assert_eq!(read(".venv/bin/new").unwrap(), "new\n");
}

#[test]
fn a_fork_shares_its_parents_ignored_files_until_either_writes() {
    if !overlay_or_skip("a_fork_shares_its_parents_ignored_files_until_either_writes") {
        return;
    }
    let env = setup_with(POLICY);
    sh(
        &env,
        "t",
        &format!(
            "{RULES} && mkdir -p .venv/bin && echo one > .venv/bin/a && echo two > .venv/bin/b"
        ),
    );
    env.ok(&["vault", "fork", "t", "f1"]);
    let v = sh(&env, "f1", "cat .venv/bin/a");
    assert_eq!(stdout(&v), "one\n");
    // The fork's files are the parent's (one inode, no second copy of the bytes).
    use std::os::unix::fs::MetadataExt;
    let (pd, fd) = (ignored_dir(&env, "t"), ignored_dir(&env, "f1"));
    assert_ne!(pd, fd);
    for f in [".venv/bin/a", ".venv/bin/b"] {
        let (p, k) = (
            std::fs::metadata(pd.join(f)).unwrap(),
            std::fs::metadata(fd.join(f)).unwrap(),
        );
        assert_eq!((p.dev(), p.ino()), (k.dev(), k.ino()), "{f} is not shared");
    }
    // Either side's writes, appends and deletions stay its own, in both directions.
    sh(&env, "t", "echo parent >> .venv/bin/a && rm .venv/bin/b");
    sh(
        &env,
        "f1",
        "echo fork >> .venv/bin/b && chmod 700 .venv/bin/a",
    );
    let v = sh(&env, "t", "cat .venv/bin/a; ls .venv/bin");
    assert_eq!(stdout(&v), "one\nparent\na\n");
    let v = sh(
        &env,
        "f1",
        "cat .venv/bin/a .venv/bin/b; stat -c %a .venv/bin/a",
    );
    assert_eq!(stdout(&v), "one\ntwo\nfork\n700\n");
    let v = sh(&env, "t", "stat -c %a .venv/bin/a");
    assert_ne!(stdout(&v), "700\n");
}

fn how(v: &Value) -> String {
    v["engine"]["layers"]["how"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

#[test]
fn a_workspace_with_ignored_files_keeps_its_overlay() {
    if !overlay_or_skip("a_workspace_with_ignored_files_keeps_its_overlay") {
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!(
            "SKIPPED a_workspace_with_ignored_files_keeps_its_overlay: kept overlays need root"
        );
        return;
    }
    let env = setup_with(POLICY);
    sh(
        &env,
        "t",
        &format!("{RULES} && mkdir -p .venv/bin && echo tool > .venv/bin/tool && echo s > a.py"),
    );
    // Runs that write no ignored file reuse the overlay, and see the ignored files.
    let v = sh(&env, "t", "cat .venv/bin/tool");
    let v2 = sh(&env, "t", "cat .venv/bin/tool && echo t >> a.py");
    assert_eq!(stdout(&v), "tool\n");
    assert_eq!(stdout(&v2), "tool\n");
    assert_eq!(how(&v2), "kept", "{}", v2["engine"]);
    assert_eq!(paths(&v2), BTreeSet::from(["/a.py".to_string()]));
    // A run that writes one: it still leaves the history, and the next runs see it.
    let w = sh(&env, "t", "echo new > .venv/bin/new && echo u >> a.py");
    assert_eq!(paths(&w), BTreeSet::from(["/a.py".to_string()]));
    assert_eq!(w["change_summary"]["ignored"]["files"], 1);
    assert!(ignored_dir(&env, "t").join(".venv/bin/new").is_file());
    sh(&env, "t", "true");
    let v = sh(&env, "t", "cat .venv/bin/new a.py");
    assert_eq!(stdout(&v), "new\ns\nt\nu\n");
    assert_eq!(how(&v), "kept", "{}", v["engine"]);
    assert_eq!(env.cat(Some("t"), "/a.py"), "s\nt\nu\n");
}

#[test]
fn gits_global_excludes_file_counts_weakest() {
    if !overlay_or_skip("gits_global_excludes_file_counts_weakest") {
        return;
    }
    let env = setup_with(POLICY);
    // The user's global excludes file, where git looks for it by default.
    let xdg = env.path("xdg");
    std::fs::create_dir_all(xdg.join("git")).unwrap();
    std::fs::write(xdg.join("git/ignore"), "*.tmp\n.idea/\n").unwrap();
    let run = |script: &str| -> Value {
        let out = env
            .cmd(["--json", "--vault", "t", "exec", "--", "sh", "-c", script])
            .env("XDG_CONFIG_HOME", &xdg)
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["exit_code"], 0, "{v}");
        v
    };
    // A .gitignore (stronger) re-includes one of them.
    let v = run(
        "echo '!keep.tmp' > .gitignore && mkdir .idea && echo x > .idea/ws.xml \
         && echo a > a.tmp && echo k > keep.tmp && echo s > s.py",
    );
    assert_eq!(
        paths(&v),
        ["/.gitignore", "/keep.tmp", "/s.py"]
            .into_iter()
            .map(String::from)
            .collect()
    );
    assert_eq!(
        v["change_summary"]["ignored"]["files"], 2,
        "{}",
        v["change_summary"]
    );
    // Without the global file (another user), the same names are versioned.
    let v = sh(&env, "t", "echo b > b.tmp");
    assert_eq!(paths(&v), BTreeSet::from(["/b.tmp".to_string()]));
}
