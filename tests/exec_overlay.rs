//! The overlay engine of `avfs exec`, driven as an agent drives it: one stable path per
//! vault (venvs and cargo's records survive between runs and into forks), runs at native
//! speed in overlayfs whose upper is ingested exactly (a differential test against a
//! native directory), one run at a time per workspace and forks in parallel, the FUSE
//! fallback, an unprivileged user, and `kill -9` of exec mid-run.
//!
//! Every test needs overlayfs in a private mount namespace; under `AVFS_REQUIRE_FUSE=1`
//! (CI) a machine without it fails them instead of skipping.

mod common;
#[path = "common/fuse.rs"]
mod fuse;
#[path = "common/overlay.rs"]
mod overlay;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Env;
use overlay::{changes, exec_in, ok_in, overlay_or_skip, setup_with, stdout};
use serde_json::Value;

/// Lets the test's scripts run without waiting for approval, whatever the built-in
/// rules say of interpreters: what is tested here is the engine, not the policy.
const POLICY: &str = r#"
[[rule]]
name = "test-python"
program = "python3"
category = "mutating"
decision = "allow_with_checkpoint"

[[rule]]
name = "test-pip"
program = "pip"
category = "mutating"
decision = "allow_with_checkpoint"

[[rule]]
name = "test-sh"
program = "sh"
category = "mutating"
decision = "allow_with_checkpoint"
"#;

fn setup() -> Env {
    setup_with(POLICY)
}

// ---------------------------------------------------------------- one stable path

#[test]
fn a_venv_made_in_one_exec_runs_in_the_next_and_in_a_fork() {
    if !overlay_or_skip("a_venv_made_in_one_exec_runs_in_the_next_and_in_a_fork") {
        return;
    }
    let env = setup();
    let made = ok_in(&env, "t", &["--", "python3", "-m", "venv", ".venv"]);
    let path = made["workspace_path"].as_str().unwrap().to_string();
    assert_eq!(path, env.home().join("ws/t").to_str().unwrap());
    assert_eq!(made["engine"]["name"], "overlay", "{}", made["engine"]);
    // The next exec: the venv's scripts name the same path, and work.
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
    assert_eq!(stdout(&v).trim(), format!("{path}/.venv"));
    let v = ok_in(&env, "t", &["--", ".venv/bin/pip", "--version"]);
    assert!(
        stdout(&v).contains(&format!("{path}/.venv")),
        "{}",
        stdout(&v)
    );
    // A fork runs at the same path, and the venv works there too.
    env.ok(&["vault", "fork", "t", "f1"]);
    let v = ok_in(&env, "f1", &["--", ".venv/bin/pip", "--version"]);
    assert_eq!(v["workspace_path"], path.as_str());
    assert!(
        stdout(&v).contains(&format!("{path}/.venv")),
        "{}",
        stdout(&v)
    );
    // Nothing names a host path of a run: the change report is in workspace paths.
    for c in made["changes"].as_array().unwrap() {
        assert!(c["path"].as_str().unwrap().starts_with("/.venv"), "{c}");
    }
}

#[test]
fn the_workspace_path_is_settable_per_vault() {
    if !overlay_or_skip("the_workspace_path_is_settable_per_vault") {
        return;
    }
    let env = setup();
    let proj = env.path("projects/app");
    let created = env.json(&[
        "vault",
        "create",
        "p",
        "--workspace-path",
        proj.to_str().unwrap(),
    ]);
    assert_eq!(created["created"]["name"], "p");
    let v = ok_in(&env, "p", &["--", "pwd"]);
    assert_eq!(stdout(&v).trim(), proj.to_str().unwrap());
    // Later, for every fork too.
    let other = env.path("elsewhere/app2");
    env.json(&["vault", "set-path", "--name", "p", other.to_str().unwrap()]);
    env.ok(&["vault", "fork", "p", "p2"]);
    let v = ok_in(&env, "p2", &["--", "pwd"]);
    assert_eq!(stdout(&v).trim(), other.to_str().unwrap());
    let info = env.json(&["vault", "info", "p2"]);
    assert_eq!(info["workspace_path"], other.to_str().unwrap());
    // Paths that would hide what avfs needs are refused.
    for bad in ["/", "relative/dir", "/proc/x", env.home().to_str().unwrap()] {
        let e = env.json_err(&["vault", "set-path", "--name", "p", bad], 1);
        assert_eq!(e["kind"], "invalid_argument", "{bad}: {e}");
    }
}

#[test]
fn a_second_cargo_build_in_a_later_exec_compiles_nothing() {
    if !overlay_or_skip("a_second_cargo_build_in_a_later_exec_compiles_nothing") {
        return;
    }
    if Command::new("cargo").arg("--version").output().is_err() {
        panic!("cargo is needed for this test");
    }
    let env = setup();
    std::fs::write(
        env.home().join("policy.toml"),
        format!(
            "{POLICY}\n[[rule]]\nname = \"test-cargo\"\nprogram = \"cargo\"\ncategory = \"mutating\"\ndecision = \"allow_with_checkpoint\"\n"
        ),
    )
    .unwrap();
    env.ok(&[
        "--vault",
        "t",
        "write",
        "-p",
        "hello/Cargo.toml",
        "[package]\nname = \"hello\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    ]);
    env.ok(&[
        "--vault",
        "t",
        "write",
        "-p",
        "hello/src/main.rs",
        "fn main() { println!(\"hi\"); }\n",
    ]);
    let first = ok_in(
        &env,
        "t",
        &["--cwd", "/hello", "--", "cargo", "build", "--offline"],
    );
    let err = first["result"]["stderr"].as_str().unwrap();
    assert!(err.contains("Compiling hello"), "{err}");
    let second = ok_in(
        &env,
        "t",
        &["--cwd", "/hello", "--", "cargo", "build", "--offline", "-v"],
    );
    let err = second["result"]["stderr"].as_str().unwrap();
    assert!(err.contains("Fresh hello"), "{err}");
    assert!(!err.contains("Compiling"), "{err}");
    assert!(
        second["changes"].as_array().unwrap().is_empty(),
        "{}",
        second["changes"]
    );
}

// ---------------------------------------------------------------- parallel runs

/// Starts `avfs --json --vault V exec ARGS` without waiting for it.
fn spawn_exec(env: &Env, vault: &str, args: &[&str]) -> std::process::Child {
    let mut a = vec!["--json", "--vault", vault, "exec"];
    a.extend_from_slice(args);
    env.cmd(&a)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait_json(c: std::process::Child) -> Value {
    let out = c.wait_with_output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn two_forks_run_at_the_same_path_at_once() {
    if !overlay_or_skip("two_forks_run_at_the_same_path_at_once") {
        return;
    }
    let env = setup();
    env.ok(&["--vault", "t", "write", "base.txt", "base\n"]);
    env.ok(&["vault", "fork", "t", "a"]);
    env.ok(&["vault", "fork", "t", "b"]);
    let script = |me: &str| format!("echo {me} > mine-{me}.txt; sleep 1.5; pwd; ls; cat base.txt");
    let sa = script("a");
    let sb = script("b");
    let start = Instant::now();
    let a = spawn_exec(&env, "a", &["--shell", &sa]);
    let b = spawn_exec(&env, "b", &["--shell", &sb]);
    let (a, b) = (wait_json(a), wait_json(b));
    // Concurrently, not one after the other.
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    for (v, me, other) in [(&a, "a", "b"), (&b, "b", "a")] {
        assert_eq!(v["exit_code"], 0, "{v}");
        let out = stdout(v);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], env.home().join("ws/t").to_str().unwrap());
        assert!(out.contains(&format!("mine-{me}.txt")), "{out}");
        assert!(
            !out.contains(&format!("mine-{other}.txt")),
            "{me} saw {other}'s file: {out}"
        );
        assert_eq!(
            changes(v),
            BTreeSet::from([("added".to_string(), format!("/mine-{me}.txt"))])
        );
    }
    assert_eq!(env.cat(Some("a"), "/mine-a.txt"), "a\n");
    assert!(env.run(&["--vault", "a", "cat", "/mine-b.txt"]).code != 0);
}

#[test]
fn a_second_run_on_a_running_workspace_waits_or_fails_busy() {
    if !overlay_or_skip("a_second_run_on_a_running_workspace_waits_or_fails_busy") {
        return;
    }
    let env = setup();
    let first = spawn_exec(
        &env,
        "t",
        &[
            "--shell",
            "echo one > one.txt; sleep 2; echo one >> one.txt",
        ],
    );
    // Until the first run holds the workspace.
    let lock_dir = env.home().join("locks");
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let held = std::fs::read_dir(&lock_dir)
            .map(|rd| {
                rd.flatten().any(|e| {
                    std::fs::read_to_string(e.path()).is_ok_and(|s| s.contains("echo one"))
                })
            })
            .unwrap_or(false);
        if held {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // A short wait: busy, naming the run that holds it.
    let e = env.json_err(
        &[
            "--vault",
            "t",
            "exec",
            "--wait",
            "0.2",
            "--shell",
            "echo two > two.txt",
        ],
        1,
    );
    assert_eq!(e["kind"], "busy", "{e}");
    assert!(e["message"].as_str().unwrap().contains("echo one"), "{e}");
    // The default wait: runs after the first, and each reports exactly its own changes.
    let second = spawn_exec(&env, "t", &["--shell", "echo two > two.txt"]);
    let (first, second) = (wait_json(first), wait_json(second));
    assert_eq!(first["exit_code"], 0, "{first}");
    assert_eq!(second["exit_code"], 0, "{second}");
    assert_eq!(
        changes(&first),
        BTreeSet::from([("added".to_string(), "/one.txt".to_string())])
    );
    assert_eq!(
        changes(&second),
        BTreeSet::from([("added".to_string(), "/two.txt".to_string())])
    );
    assert_eq!(env.cat(Some("t"), "/one.txt"), "one\none\n");
}

#[test]
fn eight_runs_on_eight_forks_at_once() {
    if !overlay_or_skip("eight_runs_on_eight_forks_at_once") {
        return;
    }
    let env = setup();
    env.ok(&["--vault", "t", "write", "-p", "src/lib.txt", "lib\n"]);
    let kids: Vec<_> = (0..8)
        .map(|i| {
            let line =
                format!("mkdir -p out && seq 1 {i}00 > out/n{i}.txt && echo {i} >> src/lib.txt");
            spawn_exec(&env, "t", &["--fork", &format!("f{i}"), "--shell", &line])
        })
        .collect();
    for (i, k) in kids.into_iter().enumerate() {
        let v = wait_json(k);
        assert_eq!(v["exit_code"], 0, "{v}");
        assert_eq!(
            changes(&v),
            BTreeSet::from([
                ("added".to_string(), "/out".to_string()),
                ("added".to_string(), format!("/out/n{i}.txt")),
                ("modified".to_string(), "/src/lib.txt".to_string()),
            ]),
            "fork f{i}"
        );
        assert_eq!(
            env.cat(Some(&format!("f{i}")), "/src/lib.txt"),
            format!("lib\n{i}\n")
        );
    }
    assert_eq!(env.cat(Some("t"), "/src/lib.txt"), "lib\n");
    env.json(&["vault", "verify", "t"]);
}

// ---------------------------------------------------------------- differential

/// Random operations, the same for a seed: files written, appended, cut and extended
/// (holes), directories made, renamed and removed, symlinks, hard links, modes, user
/// xattrs, entries replaced by another type. Times are set last, from the path, so that
/// two runs of the script agree on them.
const OPS: &str = r#"
import os, random, shutil, sys, hashlib, errno
seed, count = int(sys.argv[1]), int(sys.argv[2])
r = random.Random(seed)
made_dirs = []
made_files = []
def entries(kind):
    out = []
    for d, ds, fs in os.walk('.', topdown=True):
        ds.sort(); fs.sort()
        if kind == 'dir':
            out.append(d)
        for f in fs:
            p = os.path.join(d, f)
            if kind == 'file' and os.path.isfile(p) and not os.path.islink(p) and p != './ops.py':
                out.append(p)
            if kind == 'any' and p != './ops.py':
                out.append(p)
        if kind == 'any':
            out += [os.path.join(d, x) for x in ds]
    return sorted(out)
def name():
    return r.choice(['a', 'b', 'c', 'data', 'x.txt', 'lib.rs', 'n']) + str(r.randrange(40))
def payload():
    return r.randbytes(r.choice([0, 1, 17, 4096, 65536, 65537, 150000]))
def names_per_file(files):
    seen = {}
    for f in files:
        st = os.lstat(f)
        seen[(st.st_dev, st.st_ino)] = seen.get((st.st_dev, st.st_ino), 0) + 1
    return seen
def single(files):
    # overlayfs (without its index) copies a file up before changing it: a file with
    # several names changed in place through one of them would part from the others.
    # (Counted by names seen, not st_nlink: a file's lower inode keeps its old count.)
    n = names_per_file(files)
    return [f for f in files if n[(os.lstat(f).st_dev, os.lstat(f).st_ino)] == 1] or [None]
for i in range(count):
    op = r.randrange(14)
    dirs, files = entries('dir'), entries('file')
    try:
        if op < 3 or not files:
            p = os.path.join(r.choice(dirs), name())
            if not os.path.lexists(p):
                with open(p, 'wb') as f: f.write(payload())
                made_files.append(p)
        elif op == 3:
            f = r.choice(single(files))
            if f:
                with open(f, 'ab') as g: g.write(payload())
        elif op == 4:
            f = r.choice(single(files))
            if f: os.truncate(f, r.choice([0, 5, 70000, 300000]))
        elif op == 5:
            p = os.path.join(r.choice(dirs), 'd' + name())
            if not os.path.lexists(p): os.mkdir(p); made_dirs.append(p)
        elif op == 6:
            src = r.choice(single(files)); dst = os.path.join(r.choice(dirs), name())
            if src and (not os.path.lexists(dst) or dst in single(files)):
                os.rename(src, dst)
                if src in made_files: made_files.append(dst)
        elif op == 7:
            live = [d for d in made_dirs if os.path.isdir(d) and not os.path.islink(d)]
            if live:
                src = r.choice(live); dst = os.path.join('.', 'm' + name())
                if not os.path.lexists(dst) and not dst.startswith(src + '/'):
                    os.rename(src, dst); made_dirs = [x for x in made_dirs if not x.startswith(src)] + [dst]
                    made_files = [dst + f[len(src):] if f.startswith(src + '/') else f for f in made_files]
        elif op == 8:
            os.remove(r.choice(files))
        elif op == 9:
            ds = [d for d in dirs if d != '.']
            if ds: shutil.rmtree(r.choice(ds))
        elif op == 10:
            p = os.path.join(r.choice(dirs), 'l' + name())
            if not os.path.lexists(p): os.symlink(r.choice(['../x', 'a1', '/etc/hostname', 'missing/there']), p)
        elif op == 11:
            p = os.path.join(r.choice(dirs), 'h' + name())
            # Linking a file of an earlier run copies it up first (overlayfs without its
            # index), which parts it from names that link to it later in other runs:
            # link files this run made.
            mine = [f for f in single(files) if f in made_files] or [None]
            f = r.choice(mine)
            if f and not os.path.lexists(p): os.link(f, p); made_files.append(p)
        elif op == 12:
            f = r.choice(single(files))
            if f:
                os.chmod(f, r.choice([0o644, 0o600, 0o755, 0o400, 0o640]))
                if r.random() < 0.5: os.setxattr(f, 'user.k' + str(r.randrange(3)), r.randbytes(r.randrange(1, 40)))
        elif op == 13:
            f = r.choice(files); os.remove(f); os.mkdir(f); made_dirs.append(f)
            with open(os.path.join(f, 'inside'), 'wb') as g: g.write(payload())
    except OSError as e:
        print('op', op, 'failed:', e, file=sys.stderr)
        raise
# Times last, bottom-up, from the path: both sides agree. (Not on hard-linked files of
# earlier runs: changing their times would copy one name up, parting it from the others.)
shared = names_per_file(entries('file'))
# Deepest first and in name order, whatever order directories list in: of two names of
# one file, the same one is set last on both sides.
every = [os.path.join(d, x) for d, ds, fs in os.walk('.') for x in fs + ds]
every.sort(key=lambda p: (-p.count('/'), p))
for p in every:
    st = os.lstat(p)
    if p not in made_files and shared.get((st.st_dev, st.st_ino), 1) > 1:
        continue
    t = 1_600_000_000_000_000_000 + int(hashlib.sha256(p.encode()).hexdigest()[:12], 16)
    os.utime(p, ns=(t, t), follow_symlinks=False)
os.utime('.', ns=(1_650_000_000_000_000_000, 1_650_000_000_000_000_000))
"#;

/// What a tree is, entry by entry: type, mode, size, content hash or link target, mtime,
/// user xattrs, and which names are one file (hard links).
const MANIFEST: &str = r#"
import os, sys, hashlib, json
root = sys.argv[1]
out, inodes, names = {}, {}, {}
for d, ds, fs in os.walk(root):
    ds.sort()
    for x in sorted(fs + ds):
        p = os.path.join(d, x); rel = os.path.relpath(p, root)
        if rel == 'ops.py' or rel == 'manifest.py': continue
        st = os.lstat(p)
        e = {'mode': oct(st.st_mode), 'mtime': st.st_mtime_ns}
        if os.path.islink(p): e['target'] = os.readlink(p)
        elif os.path.isfile(p):
            e['size'] = st.st_size
            e['sha'] = hashlib.sha256(open(p, 'rb').read()).hexdigest()
            names.setdefault((st.st_dev, st.st_ino), []).append(rel)
        if not os.path.islink(p):
            e['xattrs'] = sorted((n, os.getxattr(p, n).hex()) for n in os.listxattr(p) if n.startswith('user.') and not n.startswith('user.overlay.'))
        out[rel] = e
# Hard links: the names seen here that are one file (first name in walk order).
for group in names.values():
    if len(group) > 1:
        for n in group: out[n]['link'] = group[0]
st = os.stat(root)
out['.'] = {'mode': oct(st.st_mode), 'mtime': st.st_mtime_ns}
print(json.dumps(out, sort_keys=True))
"#;

fn manifest_native(dir: &Path) -> BTreeMap<String, Value> {
    let out = Command::new("python3")
        .args(["-c", MANIFEST, dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn first_difference(a: &BTreeMap<String, Value>, b: &BTreeMap<String, Value>) -> Option<String> {
    for k in a.keys().chain(b.keys()) {
        if a.get(k) != b.get(k) {
            return Some(format!("{k}: vault {:?} native {:?}", a.get(k), b.get(k)));
        }
    }
    None
}

#[test]
fn overlay_runs_match_a_native_directory_operation_by_operation() {
    if !overlay_or_skip("overlay_runs_match_a_native_directory_operation_by_operation") {
        return;
    }
    let env = setup();
    let native = env.path("native");
    std::fs::create_dir_all(&native).unwrap();
    std::fs::write(native.join("ops.py"), OPS).unwrap();
    std::fs::write(env.path("manifest.py"), MANIFEST).unwrap();
    env.ok(&["--vault", "t", "write", "/ops.py", OPS]);
    // Twenty runs. The first eight share the workspace's kept overlay, whose upper
    // gathers every run's changes and is ingested again each time; a CLI edit between two
    // runs (round 4) retires it. The last twelve each mount an overlay of their own
    // (AVFS_KEEP_OVERLAY=0): the layer stack grows past its limit and is squashed on the
    // way, and the last two start from an empty layer cache.
    let rounds = 20;
    let mut depths = vec![];
    let mut hows = vec![];
    for round in 0..rounds {
        let keep = round < 8;
        let ok_in = |env: &Env, vault: &str, args: &[&str]| -> Value {
            let mut a = vec!["--json", "--vault", vault, "exec"];
            a.extend_from_slice(args);
            let out = env
                .cmd(&a)
                .env("AVFS_KEEP_OVERLAY", if keep { "1" } else { "0" })
                .output()
                .unwrap();
            let v: Value = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
            assert_eq!(v["exit_code"], 0, "exec {args:?}: {v}");
            v
        };
        let seed = (1000 + round).to_string();
        let v = ok_in(&env, "t", &["--", "python3", "ops.py", &seed, "60"]);
        assert_eq!(v["engine"]["name"], "overlay");
        depths.push(v["engine"]["layers"]["depth"].as_u64().unwrap());
        hows.push(v["engine"]["layers"]["how"].as_str().unwrap().to_string());
        let st = Command::new("python3")
            .args(["ops.py", &seed, "60"])
            .current_dir(&native)
            .status()
            .unwrap();
        assert!(st.success());
        if round == 4 {
            env.ok(&[
                "--vault",
                "t",
                "write",
                "-p",
                "cli/edit.txt",
                "from the CLI\n",
            ]);
            std::fs::create_dir_all(native.join("cli")).unwrap();
            std::fs::write(native.join("cli/edit.txt"), "from the CLI\n").unwrap();
        }
        // What the next run sees (the layer stack) is the native tree.
        // The manifest is JSON of every file: more than the envelope's default head and
        // tail, so the whole of it is kept.
        let whole = ["--output-head", "67108864", "--"];
        let seen = ok_in(
            &env,
            "t",
            &[&whole[..], &["python3", "-c", MANIFEST, "."]].concat(),
        );
        let seen: BTreeMap<String, Value> = serde_json::from_str(&stdout(&seen)).unwrap();
        let mut want = manifest_native(&native);
        if round >= 4 {
            // The CLI's own times on /cli and /cli/edit.txt (and the root it changed).
            for k in ["cli", "cli/edit.txt", "."] {
                if let (Some(w), Some(s)) = (want.get_mut(k), seen.get(k)) {
                    w["mtime"] = s["mtime"].clone();
                }
            }
        }
        if let Some(d) = first_difference(&seen, &want) {
            panic!("round {round}: the run's view differs: {d}");
        }
        // And so is the vault: with the layer cache emptied, a run sees the tree as it
        // is written out from the vault alone.
        if round + 2 >= rounds {
            let out = env
                .cmd(["--json", "gc"])
                .env("AVFS_LAYER_CACHE_BYTES", "0")
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let fresh = ok_in(
                &env,
                "t",
                &[&whole[..], &["python3", "-c", MANIFEST, "."]].concat(),
            );
            assert_eq!(
                fresh["engine"]["layers"]["how"], "full",
                "{}",
                fresh["engine"]
            );
            let fresh: BTreeMap<String, Value> = serde_json::from_str(&stdout(&fresh)).unwrap();
            if let Some(d) = first_difference(&fresh, &seen) {
                panic!("round {round}: the vault differs from the run's view: {d}");
            }
        }
    }
    assert!(
        depths.iter().any(|d| *d >= 8),
        "the stack never grew: {depths:?}"
    );
    // Rounds 1-7 reused the kept overlay (the first run after the CLI edit of round 4,
    // which checks the tree, made it anew).
    let kept: Vec<usize> = (0..8).filter(|i| hows[*i] == "kept").collect();
    assert_eq!(kept, (1..8).collect::<Vec<_>>(), "{hows:?}");
    assert!(
        depths.iter().all(|d| *d <= 9),
        "a stack was not squashed: {depths:?}"
    );
    env.json(&["vault", "verify", "t"]);
}

#[test]
fn a_file_copied_up_but_unchanged_is_not_a_change() {
    if !overlay_or_skip("a_file_copied_up_but_unchanged_is_not_a_change") {
        return;
    }
    let env = setup();
    env.ok(&["--vault", "t", "write", "-p", "d/f.txt", "same\n"]);
    // chmod to the same mode and touch -r to the same time: overlayfs copies the file
    // (and its directory) up; nothing changed.
    let same = "import os\nst = os.stat('d/f.txt')\ndata = open('d/f.txt', 'rb').read()\nos.chmod('d/f.txt', 0o644)\nopen('d/f.txt', 'wb').write(data)\nos.utime('d/f.txt', ns=(st.st_atime_ns, st.st_mtime_ns))";
    let v = ok_in(&env, "t", &["--", "python3", "-c", same]);
    assert!(
        v["changes"].as_array().unwrap().is_empty(),
        "{}",
        v["changes"]
    );
    // Written with other bytes of the same size: a change.
    let v = ok_in(&env, "t", &["--shell", "printf 'diff\\n' > d/f.txt"]);
    assert_eq!(
        changes(&v),
        BTreeSet::from([("modified".to_string(), "/d/f.txt".to_string())])
    );
}

// ---------------------------------------------------------------- fallback, users

#[test]
fn the_fuse_engine_runs_at_the_same_path_and_is_the_fallback() {
    if !overlay_or_skip("the_fuse_engine_runs_at_the_same_path_and_is_the_fallback") {
        return;
    }
    if !fuse::fuse_or_skip("the_fuse_engine_runs_at_the_same_path_and_is_the_fallback") {
        return;
    }
    let env = setup();
    let v = ok_in(
        &env,
        "t",
        &["--engine", "fuse", "--shell", "pwd; echo f > f.txt"],
    );
    assert_eq!(v["engine"]["name"], "fuse");
    assert_eq!(v["engine"]["reason"], "--engine fuse");
    assert_eq!(stdout(&v).trim(), env.home().join("ws/t").to_str().unwrap());
    assert_eq!(
        changes(&v),
        BTreeSet::from([("added".to_string(), "/f.txt".to_string())])
    );
    assert_eq!(v["sandbox"]["enforced"], true);
    // $AVFS_HOME on overlayfs cannot hold an overlay's upper: exec falls back to FUSE
    // and says why.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let ov = env.path("ovl");
    for d in ["lower", "upper", "work", "merged"] {
        std::fs::create_dir_all(ov.join(d)).unwrap();
    }
    let st = Command::new("mount")
        .args(["-t", "overlay", "overlay", "-o"])
        .arg(format!(
            "lowerdir={},upperdir={},workdir={}",
            ov.join("lower").display(),
            ov.join("upper").display(),
            ov.join("work").display()
        ))
        .arg(ov.join("merged"))
        .status()
        .unwrap();
    assert!(st.success());
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _guard = Unmount(ov.join("merged"));
    let home = ov.join("merged/home");
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_avfs"))
            .args(args)
            .env("AVFS_HOME", &home)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    run(&["--json", "write", "/x.txt", "x"]);
    let v = run(&["--json", "exec", "--shell", "cat x.txt; echo y > y.txt"]);
    assert_eq!(v["engine"]["name"], "fuse", "{v}");
    assert!(
        v["engine"]["reason"]
            .as_str()
            .unwrap()
            .contains("overlayfs"),
        "{v}"
    );
    assert_eq!(v["result"]["stdout"], "x");
    let e = run(&["--json", "exec", "--engine", "overlay", "--", "true"]);
    assert_eq!(e["error"]["kind"], "refused", "{e}");
}

#[test]
fn an_unprivileged_user_runs_in_the_overlay_engine_and_sandbox() {
    if !overlay_or_skip("an_unprivileged_user_runs_in_the_overlay_engine_and_sandbox") {
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        // Already unprivileged: the other tests cover it.
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("u");
    std::fs::create_dir_all(&home).unwrap();
    std::os::unix::fs::chown(dir.path(), Some(65534), Some(65534)).unwrap();
    std::os::unix::fs::chown(&home, Some(65534), Some(65534)).unwrap();
    let bin = env!("CARGO_BIN_EXE_avfs");
    let run = |args: &[&str]| {
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(bin)
            .args(args)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", &home)
            .env("AVFS_HOME", home.join(".avfs"))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{e}: {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        v
    };
    run(&["--json", "write", "/in.txt", "in\n"]);
    std::fs::write(home.join(".avfs/policy.toml"), POLICY).unwrap();
    // The host path is built at run time: the policy refuses a literal one, and this
    // is about the sandbox refusing the write.
    let script = "import os\nprint(os.getuid())\nprint(open('in.txt').read(), end='')\nopen('out.txt', 'w').write('out\\n')\ntry:\n    open(os.path.join(os.sep, 'etc', 'x'), 'w')\nexcept OSError:\n    print('denied')";
    let v = run(&["--json", "exec", "--", "python3", "-c", script]);
    assert!(v.get("error").is_none(), "{v}");
    assert_eq!(v["engine"]["name"], "overlay", "{v}");
    assert_eq!(v["sandbox"]["enforced"], true, "{v}");
    assert_eq!(v["result"]["stdout"], "65534\nin\ndenied\n", "{v}");
    assert_eq!(
        changes(&v),
        BTreeSet::from([("added".to_string(), "/out.txt".to_string())])
    );
    let cat = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(bin)
        .args(["cat", "/out.txt"])
        .env("AVFS_HOME", home.join(".avfs"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&cat.stdout), "out\n");
}

// ---------------------------------------------------------------- kill -9

fn overlay_mounts_under(dir: &Path) -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(dir.to_str().unwrap()))
        .map(String::from)
        .collect()
}

/// `kill -9` of exec mid-run: the watchdog ends the command and takes in what it wrote;
/// the vault verifies, nothing stays mounted, the next run waits for the watchdog and
/// then runs. Also `kill -9` of the command itself: exec reports the signal and its
/// changes.
#[test]
fn killed_runs_are_finished_by_the_watchdog() {
    if !overlay_or_skip("killed_runs_are_finished_by_the_watchdog") {
        return;
    }
    let env = setup();
    let rounds: u64 = std::env::var("AVFS_KILL_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    for round in 0..rounds {
        let script = format!(
            "import os, time\nos.makedirs('r{round}', exist_ok=True)\nfor i in range(400):\n    open(f'r{round}/f{{i}}', 'w').write(f'{{i}}\\n')\n    time.sleep(0.002)"
        );
        let mut child = env
            .cmd([
                "--json", "--vault", "t", "exec", "--", "python3", "-c", &script,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Killed while it writes: once its first files are in the upper directory (the
        // workspace's kept overlay's, or the run's own), a little later each round.
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            let started = ["kept", "runs"].iter().any(|d| {
                std::fs::read_dir(env.home().join(d)).is_ok_and(|rd| {
                    rd.flatten()
                        .any(|e| e.path().join(format!("upper/r{round}/f1")).exists())
                })
            });
            if started {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(37 * round));
        child.kill().unwrap();
        child.wait().unwrap();
        // The next run waits for the watchdog (it holds the run lock), then runs.
        let v = ok_in(&env, "t", &["--", "ls", &format!("r{round}")]);
        let listed = stdout(&v).lines().count();
        let stored = env.json(&["--vault", "t", "ls", &format!("/r{round}")]);
        let n = stored["entries"].as_array().unwrap().len();
        assert_eq!(n, listed, "round {round}");
        assert!(
            n >= 1,
            "round {round}: nothing of the killed run was taken in"
        );
        // Every file it holds is whole, but the one being written when it was killed.
        let mut partial = 0;
        for e in stored["entries"].as_array().unwrap() {
            let name = e["name"].as_str().unwrap();
            let body = env.cat(Some("t"), &format!("/r{round}/{name}"));
            if body.is_empty() {
                partial += 1;
            } else {
                assert_eq!(body, format!("{}\n", &name[1..]), "round {round}: {name}");
            }
        }
        assert!(
            partial <= 1,
            "round {round}: {partial} files without their line"
        );
        assert!(
            overlay_mounts_under(&env.home()).is_empty(),
            "round {round}: a mount is left"
        );
        let runs: Vec<_> = std::fs::read_dir(env.home().join("runs"))
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(
            runs.is_empty(),
            "round {round}: run directories left: {runs:?}"
        );
    }
    let audit = env.json(&["--vault", "t", "audit", "--limit", "500"]);
    let abandoned = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "exec.abandoned")
        .count() as u64;
    assert_eq!(abandoned, rounds, "{audit}");
    env.json(&["vault", "verify", "t"]);
    env.json(&["--vault", "t", "audit", "verify"]);
    // The command killed (not exec): a result, and its changes.
    let v = exec_in(
        &env,
        "t",
        &[
            "--",
            "python3",
            "-c",
            "import os\nopen('k.txt', 'w').write('before')\nos.kill(os.getpid(), 9)",
        ],
    );
    assert_eq!(v["result"]["signal"], 9, "{v}");
    assert_eq!(
        changes(&v),
        BTreeSet::from([("added".to_string(), "/k.txt".to_string())])
    );
}

#[test]
fn gc_trims_the_layer_cache() {
    if !overlay_or_skip("gc_trims_the_layer_cache") {
        return;
    }
    let env = setup();
    for i in 0..3 {
        ok_in(
            &env,
            "t",
            &["--shell", &format!("head -c 100000 /dev/urandom > f{i}")],
        );
    }
    let layers = env.home().join("layers");
    let count = || {
        std::fs::read_dir(&layers)
            .unwrap()
            .flatten()
            .filter(|e| {
                let n = e.file_name();
                let n = n.to_string_lossy();
                n != "roots" && n != "ws" && !n.starts_with('.')
            })
            .count()
    };
    // The three runs shared the workspace's kept overlay, on one layer.
    assert!(count() >= 1, "{}", count());
    let out = env
        .cmd(["--json", "gc"])
        .env("AVFS_LAYER_CACHE_BYTES", "0")
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    // gc retired the kept overlay (its upper became a second layer), then trimmed both.
    assert_eq!(v["layers"]["retired_kept"], 1, "{v}");
    assert!(v["layers"]["removed_layers"].as_u64().unwrap() >= 2, "{v}");
    assert_eq!(count(), 0);
    assert_eq!(
        std::fs::read_dir(env.home().join("kept")).unwrap().count(),
        0,
        "the kept overlay is gone"
    );
    // Only a cache: the next run rebuilds what it needs from the vault.
    let v = ok_in(&env, "t", &["--", "ls"]);
    assert_eq!(v["engine"]["layers"]["how"], "full");
    assert_eq!(stdout(&v), "f0\nf1\nf2\n");
}

/// A read-only run takes no checkpoint, so the state before it is referenced only by the
/// live state; the FUSE engine's mount changes that state (git status rewrites
/// .git/index) and its space reclaim used to delete the tree the change report diffs
/// against: "corrupt_vault: missing tree", and every later run failed the same way (the
/// layer cache named the lost root). Found by the issue 13 benchmark alternating engines.
#[test]
fn alternating_engines_on_a_git_repository_keeps_every_run_working() {
    if !overlay_or_skip("alternating_engines_on_a_git_repository_keeps_every_run_working") {
        return;
    }
    if !fuse::fuse_or_skip("alternating_engines_on_a_git_repository_keeps_every_run_working") {
        return;
    }
    let env = setup();
    env.ok(&["--vault", "t", "write", "/a.txt", "hi\n"]);
    ok_in(&env, "t", &["--shell", "git init -q"]);
    for engine in ["fuse", "overlay", "fuse", "overlay"] {
        let v = ok_in(
            &env,
            "t",
            &["--engine", engine, "--", "git", "status", "--short"],
        );
        assert_eq!(v["engine"]["name"], engine);
        // Read-only: no checkpoint holds the state before (the case that broke).
        assert_eq!(v["checkpoint"], Value::Null, "{v}");
        assert_eq!(stdout(&v), "?? a.txt\n", "{engine}: {v}");
    }
    let verify = env.json(&["--vault", "t", "vault", "verify"]);
    assert_eq!(verify["report"]["ok"], true, "{verify}");
    // No run is in progress: no root stays pinned.
    assert_eq!(env.json(&["--vault", "t", "gc"])["error"], Value::Null);
}
