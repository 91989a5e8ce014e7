//! Concurrency through the real binary: parallel `exec` runs on their own forks, CLI
//! reads/writes/checkpoints of a workspace that is mounted and being written, `gc` while
//! forks are created and written, and 100 vaults used at once.
//!
//! The tests that mount need /dev/fuse: they skip with a message without it, and fail
//! with `AVFS_REQUIRE_FUSE=1`.
//!
//! Knobs (for the long mode of scripts/reliability.sh):
//! `AVFS_CONC_EXECS` (parallel execs, default 8), `AVFS_CONC_SECS` (seconds the mounted
//! writer and the gc loop run, default 6), `AVFS_CONC_VAULTS` (default 100).
#![allow(clippy::macro_metavars_in_unsafe)]

mod common;
#[allow(unused_macros, unused_imports)]
#[macro_use]
#[path = "common/fuse.rs"]
mod fuse;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Env, Run};
use fuse::*;
use serde_json::Value;

fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// One line for the reliability table (collected by scripts/reliability.sh).
fn report(area: &str, what: &str, count: u64, held: &str) {
    eprintln!("RELIABILITY|concurrency|{area}|{what}|{count}|{held}");
}

fn no_panic(r: &Run, what: &str) {
    assert!(
        r.code != 101 && !r.stderr.contains("panicked"),
        "{what}: avfs panicked\n{}",
        r.stderr
    );
}

fn verify_ok(env: &Env, vault: &str) {
    let v = env.json(&["--vault", vault, "vault", "verify"]);
    assert_eq!(v["report"]["ok"], true, "vault verify {vault}: {v}");
    let a = env.json(&["--vault", vault, "audit", "verify"]);
    assert_eq!(a["ok"], true, "audit verify {vault}: {a}");
}

/// Every file below `path` of a workspace, as (path, size), via `tree`.
fn files_of(env: &Env, vault: &str, path: &str) -> BTreeMap<String, u64> {
    let t = env.json(&["--vault", vault, "tree", "-a", path]);
    let mut out = BTreeMap::new();
    fn walk(n: &Value, prefix: &str, out: &mut BTreeMap<String, u64>) {
        for c in n["children"].as_array().into_iter().flatten() {
            let name = c["name"].as_str().unwrap();
            let p = format!("{}/{name}", prefix.trim_end_matches('/'));
            match c["type"].as_str() {
                Some("dir") => walk(c, &p, out),
                _ => {
                    out.insert(p, c["size"].as_u64().unwrap_or(0));
                }
            }
        }
    }
    walk(&t, path, &mut out);
    out
}

// ------------------------------------------------------------ parallel exec on forks

fn task_line(n: usize, files: usize) -> String {
    let mut parts = vec![format!("mkdir -p t{n}")];
    for i in 0..files {
        parts.push(format!("echo \"task {n} file {i}\" > t{n}/f{i}.txt"));
    }
    parts.push(format!("echo \"task {n}\" >> shared.txt"));
    parts.push(format!("printf 'x%.0s' 1 2 3 > t{n}/small.bin"));
    parts.join(" && ")
}

#[test]
fn parallel_execs_on_their_own_forks_see_only_their_own_changes() {
    if !fuse_or_skip("parallel_execs_on_their_own_forks_see_only_their_own_changes") {
        return;
    }
    let tasks = knob("AVFS_CONC_EXECS", 8) as usize;
    let files = 20;
    let env = Arc::new(Env::new());
    env.ok(&["vault", "create", "v"]);
    env.ok(&["--vault", "v", "write", "/shared.txt", "base\n"]);
    env.ok(&["--vault", "v", "write", "-p", "/base/keep.txt", "keep me"]);
    env.ok(&["--vault", "v", "checkpoint", "save", "base"]);
    let source_before = files_of(&env, "v", "/");
    let start = Arc::new(std::sync::Barrier::new(tasks));
    let handles: Vec<_> = (0..tasks)
        .map(|n| {
            let env = env.clone();
            let start = start.clone();
            std::thread::spawn(move || {
                let line = task_line(n, files);
                let fork = format!("task-{n}");
                start.wait();
                let t0 = Instant::now();
                let r = env.run(&[
                    "--json", "--vault", "v", "exec", "--fork", &fork, "--shell", &line,
                ]);
                (n, r, t0.elapsed())
            })
        })
        .collect();
    let mut results: Vec<(usize, Run, Duration)> =
        handles.into_iter().map(|h| h.join().unwrap()).collect();
    results.sort_by_key(|r| r.0);
    for (n, r, _) in &results {
        no_panic(r, &format!("exec task-{n}"));
        assert_eq!(
            r.code, 0,
            "exec task-{n}: exit {}\nstdout: {}\nstderr: {}",
            r.code, r.stdout, r.stderr
        );
        let env_doc = r.json();
        assert_eq!(env_doc["exit_code"], 0, "task-{n}: {env_doc}");
        assert_eq!(
            env_doc["result"]["exit_code"], 0,
            "task-{n}: {}",
            env_doc["result"]
        );
        let mut got: BTreeSet<(String, String)> = BTreeSet::new();
        for c in env_doc["changes"].as_array().unwrap() {
            got.insert((
                c["kind"].as_str().unwrap().into(),
                c["path"].as_str().unwrap().into(),
            ));
        }
        let mut want: BTreeSet<(String, String)> = BTreeSet::new();
        want.insert(("added".into(), format!("/t{n}")));
        for i in 0..files {
            want.insert(("added".into(), format!("/t{n}/f{i}.txt")));
        }
        want.insert(("added".into(), format!("/t{n}/small.bin")));
        want.insert(("modified".into(), "/shared.txt".into()));
        assert_eq!(
            got, want,
            "task-{n}: the change report is not exactly its own changes"
        );
        let s = &env_doc["change_summary"];
        assert_eq!(s["added"], files as u64 + 2, "task-{n}: {s}");
        assert_eq!(s["modified"], 1, "task-{n}: {s}");
    }
    // Each fork holds exactly the base plus its own files.
    for n in 0..tasks {
        let fork = format!("task-{n}");
        let got = files_of(&env, &fork, "/");
        let mut want: BTreeSet<String> = source_before.keys().cloned().collect();
        for i in 0..files {
            want.insert(format!("/t{n}/f{i}.txt"));
        }
        want.insert(format!("/t{n}/small.bin"));
        assert_eq!(
            got.keys().cloned().collect::<BTreeSet<_>>(),
            want,
            "{fork}: files leaked between forks"
        );
        assert_eq!(
            env.cat(Some(&fork), "/shared.txt"),
            format!("base\ntask {n}\n"),
            "{fork}"
        );
        assert_eq!(
            env.cat(Some(&fork), &format!("/t{n}/f7.txt")),
            format!("task {n} file 7\n")
        );
        assert_eq!(env.cat(Some(&fork), &format!("/t{n}/small.bin")), "xxx");
    }
    // The source is unchanged.
    assert_eq!(
        files_of(&env, "v", "/"),
        source_before,
        "the source vault changed"
    );
    assert_eq!(env.cat(Some("v"), "/shared.txt"), "base\n");
    let d = env.json(&["--vault", "v", "diff", "base"]);
    assert_eq!(
        d["changes"].as_array().unwrap().len(),
        0,
        "source changed since base: {d}"
    );
    // No mount is left behind.
    let m = env.json(&["mounts"]);
    assert_eq!(m["mounts"].as_array().unwrap().len(), 0, "{m}");
    verify_ok(&env, "v");
    let longest = results.iter().map(|r| r.2).max().unwrap();
    report(
        "exec",
        &format!(
            "{tasks} parallel `exec --fork` runs, {} files each",
            files + 2
        ),
        tasks as u64,
        &format!(
            "all exit 0; each report = exactly its own {} changes; no leaks; source unchanged (slowest {} ms)",
            files + 3,
            longest.as_millis()
        ),
    );
}

// ------------------------------------------- CLI on a mounted workspace being written

/// A writer process in the mount: writes bg/f<i> (content "bg <i>\n" repeated i % 50 + 1
/// times), appends to bg/log, renames bg/tmp into bg/r<i % 10>; prints i after each close.
const MOUNT_WRITER: &str = r#"
import os, sys
mnt, stop = sys.argv[1], sys.argv[2]
os.makedirs(os.path.join(mnt, "bg"), exist_ok=True)
i = 0
while not os.path.exists(stop):
    data = (("bg %d\n" % i) * (i % 50 + 1)).encode()
    with open(os.path.join(mnt, "bg", "f%05d" % i), "wb") as f:
        f.write(data)
    with open(os.path.join(mnt, "bg", "log"), "ab") as f:
        f.write(b"%d\n" % i)
    tmp = os.path.join(mnt, "bg", "tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.rename(tmp, os.path.join(mnt, "bg", "r%d" % (i % 10)))
    print(i, flush=True)
    i += 1
"#;

fn bg_content(i: u64) -> String {
    format!("bg {i}\n").repeat((i % 50 + 1) as usize)
}

struct Writer {
    child: Child,
    done: Arc<Mutex<Vec<u64>>>,
    reader: Option<std::thread::JoinHandle<()>>,
    stop: std::path::PathBuf,
}

impl Writer {
    fn start(mp: &Path, stop: &Path) -> Writer {
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(MOUNT_WRITER)
            .arg(mp)
            .arg(stop)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python3");
        let done = Arc::new(Mutex::new(Vec::new()));
        let d2 = done.clone();
        let out = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if let Ok(n) = line.trim().parse::<u64>() {
                    d2.lock().unwrap().push(n);
                }
            }
        });
        Writer {
            child,
            done,
            reader: Some(reader),
            stop: stop.to_path_buf(),
        }
    }
    fn closed(&self) -> Vec<u64> {
        self.done.lock().unwrap().clone()
    }
    fn finish(mut self) -> Vec<u64> {
        std::fs::write(&self.stop, "stop").unwrap();
        let st = self.child.wait().unwrap();
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut err);
        }
        assert!(st.success(), "the writer in the mount failed: {st}\n{err}");
        self.reader.take().unwrap().join().unwrap();
        self.closed()
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.stop, "stop");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn have_python() -> bool {
    let ok = Command::new("python3").arg("--version").output().is_ok();
    if !ok {
        assert!(
            std::env::var("AVFS_REQUIRE_FUSE").as_deref() != Ok("1"),
            "python3 is required"
        );
        eprintln!("SKIPPED: python3 not installed");
    }
    ok
}

#[test]
fn cli_reads_writes_and_checkpoints_while_mounted_and_written() {
    let Some(m) = Mount::new("cli_reads_writes_and_checkpoints_while_mounted_and_written") else {
        return;
    };
    if !have_python() {
        return;
    }
    let secs = knob("AVFS_CONC_SECS", 6);
    let env = &m.env;
    m.avfs(&["checkpoint", "save", "empty"]);
    let stop = env.path("stop-writer");
    let writer = Writer::start(&m.mp, &stop);
    // Wait until the writer is going.
    let t0 = Instant::now();
    while writer.closed().len() < 5 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "writer did not start"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let ops = Arc::new(AtomicU64::new(0));
    let checkpoints = Arc::new(Mutex::new(Vec::<(String, Vec<u64>, Vec<u64>)>::new()));
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mp = m.mp.clone();
    // The checkpoint thread ends the run: at the deadline, once it saved 4 checkpoints.
    let finished = AtomicBool::new(false);
    let cp_ms = AtomicU64::new(0);
    let (finished, cp_ms) = (&finished, &cp_ms);
    // Two CLI threads: one writes and reads its own files, one checkpoints and reads the
    // writer's files.
    std::thread::scope(|s| {
        let errs = errors.clone();
        let ops1 = ops.clone();
        let mp = &mp;
        s.spawn(move || {
            let mut k = 0u64;
            while !finished.load(Ordering::Relaxed) {
                let path = format!("/cli/c{k:04}");
                let content = format!("cli {k}\n").repeat((k % 7 + 1) as usize);
                let r = env.run(&["--json", "--vault", "t", "write", "-p", &path, &content]);
                no_panic(&r, "write");
                if r.code != 0 {
                    errs.lock()
                        .unwrap()
                        .push(format!("write {path}: {} {}", r.stdout, r.stderr));
                }
                let r = env.run(&["--vault", "t", "cat", &path]);
                if r.code != 0 || r.stdout != content {
                    errs.lock()
                        .unwrap()
                        .push(format!("cat {path}: {:?} {}", r.stdout, r.stderr));
                }
                // The mount shows it at once (the CLI invalidated the kernel's caches).
                match std::fs::read_to_string(mp.join(&path[1..])) {
                    Ok(c) if c == content => {}
                    other => errs
                        .lock()
                        .unwrap()
                        .push(format!("{path} through the mount: {other:?}")),
                }
                ops1.fetch_add(3, Ordering::Relaxed);
                k += 1;
            }
        });
        let errs = errors.clone();
        let ops2 = ops.clone();
        let cps = checkpoints.clone();
        let writer = &writer;
        s.spawn(move || {
            let mut k = 0;
            while Instant::now() < deadline || k < 4 {
                // Files closed before the checkpoint started must be in it.
                let closed_before = writer.closed();
                let name = format!("cp{k:03}");
                let t0 = Instant::now();
                let r = env.run(&["--json", "--vault", "t", "checkpoint", "save", &name]);
                let ms = t0.elapsed().as_millis() as u64;
                cp_ms.fetch_max(ms, Ordering::Relaxed);
                no_panic(&r, "checkpoint save");
                if r.code != 0 {
                    errs.lock()
                        .unwrap()
                        .push(format!("checkpoint save {name}: {} {}", r.stdout, r.stderr));
                } else {
                    let closed_after = writer.closed();
                    cps.lock()
                        .unwrap()
                        .push((name, closed_before.clone(), closed_after));
                }
                // Reading the writer's files through the CLI: every closed one is complete.
                if let Some(&i) = closed_before.last() {
                    let path = format!("/bg/f{i:05}");
                    let r = env.run(&["--vault", "t", "cat", &path]);
                    if r.code != 0 || r.stdout != bg_content(i) {
                        errs.lock().unwrap().push(format!(
                            "cat {path} (closed): {:?} {}",
                            r.stdout.len(),
                            r.stderr
                        ));
                    }
                }
                let r = env.run(&["--json", "--vault", "t", "ls", "/bg"]);
                if r.code != 0 {
                    errs.lock().unwrap().push(format!("ls /bg: {}", r.stdout));
                }
                ops2.fetch_add(3, Ordering::Relaxed);
                k += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
            finished.store(true, Ordering::Relaxed);
        });
    });
    let closed = writer.finish();
    let errors = errors.lock().unwrap().clone();
    assert!(
        errors.is_empty(),
        "{} CLI errors while mounted:\n{}",
        errors.len(),
        errors.join("\n")
    );
    let cps = checkpoints.lock().unwrap().clone();
    assert!(cps.len() >= 4, "only {} checkpoints", cps.len());
    assert!(
        closed.len() >= 20,
        "the writer closed only {} files",
        closed.len()
    );
    // Every checkpoint: every file closed before it began is in it with its full content;
    // every file it lists reads back with `cat --at`; nothing closed after it ended is in it.
    let mut cat_at = 0;
    for (name, before, after) in &cps {
        // Every change, not the default page.
        let d = m.avfs_json(&["diff", "empty", name, "--limit", "1000000"]);
        let listed: BTreeSet<String> = d["changes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["type_after"] == "file")
            .map(|c| c["path"].as_str().unwrap().to_string())
            .collect();
        for i in before {
            let p = format!("/bg/f{i:05}");
            assert!(
                listed.contains(&p),
                "{name}: {p} was closed before the checkpoint but is missing"
            );
        }
        let before_set: BTreeSet<u64> = before.iter().copied().collect();
        let _ = after;
        let mut sample: Vec<&String> = listed.iter().filter(|p| p.starts_with("/bg/f")).collect();
        // Check every file of small checkpoints, a spread of the others.
        let step = (sample.len() / 25).max(1);
        sample = sample.into_iter().step_by(step).collect();
        for p in sample {
            let i: u64 = p["/bg/f".len()..].parse().unwrap();
            let r = env.run(&["--vault", "t", "cat", "--at", name, p]);
            assert_eq!(r.code, 0, "cat --at {name} {p}: {}", r.stderr);
            // A file closed before the checkpoint began is complete in it; one still
            // being written may be partial.
            if r.stdout != bg_content(i) {
                assert!(
                    !before_set.contains(&i),
                    "{name}: {p} was closed before the checkpoint but is incomplete in it"
                );
            }
            cat_at += 1;
        }
        for p in listed.iter().filter(|p| p.starts_with("/cli/")).take(5) {
            let r = env.run(&["--vault", "t", "cat", "--at", name, p]);
            assert_eq!(r.code, 0, "cat --at {name} {p}: {}", r.stderr);
            cat_at += 1;
        }
    }
    // Restore a checkpoint from the middle while mounted: the mount shows exactly it.
    let (mid, _, _) = &cps[cps.len() / 2];
    m.avfs(&["checkpoint", "restore", mid]);
    let d = m.avfs_json(&["diff", mid]);
    assert_eq!(
        d["changes"].as_array().unwrap().len(),
        0,
        "restore of {mid}: {d}"
    );
    let in_ckpt = files_of(env, "t", "/bg");
    let on_mount: BTreeSet<String> = std::fs::read_dir(m.mp.join("bg"))
        .unwrap()
        .map(|e| format!("/bg/{}", e.unwrap().file_name().to_string_lossy()))
        .collect();
    assert_eq!(
        on_mount,
        in_ckpt.keys().cloned().collect::<BTreeSet<_>>(),
        "the mount does not show {mid}"
    );
    verify_ok(env, "t");
    let total_ops = ops.load(Ordering::Relaxed);
    report(
        "mounted",
        &format!("CLI write/cat/checkpoint/ls while a process writes in the mount ({secs} s)"),
        total_ops,
        &format!(
            "0 errors; {} files closed in the mount; {} checkpoints each hold every file closed before them (slowest save {} ms); {cat_at} `cat --at` reads; restore shows the checkpoint in the mount",
            closed.len(),
            cps.len(),
            cp_ms.load(Ordering::Relaxed)
        ),
    );
}

// ----------------------------------------------------------- gc during forks and writes

fn content_for(fork: &str, i: u64) -> Vec<u8> {
    // Some files share blocks with the base, some are unique, one spans chunks.
    let mut v = format!("{fork} file {i}\n").into_bytes();
    if i.is_multiple_of(3) {
        v.extend(std::iter::repeat_n(b'a' + (i % 26) as u8, 70_000));
    }
    v
}

#[test]
fn gc_during_fork_creation_and_writes_deletes_nothing_referenced() {
    let secs = knob("AVFS_CONC_SECS", 6);
    let env = Env::new();
    let host = env.path("base");
    std::fs::create_dir_all(host.join("src")).unwrap();
    let mut rng = Rng::new(42);
    let mut base_files = BTreeMap::new();
    for i in 0..40 {
        let data = rng.bytes(if i % 10 == 0 { 150_000 } else { 3000 });
        std::fs::write(host.join(format!("src/b{i}")), &data).unwrap();
        base_files.insert(format!("/src/b{i}"), data);
    }
    env.ok(&["vault", "create", "v"]);
    env.ok(&["--vault", "v", "import", host.to_str().unwrap()]);
    env.ok(&["--vault", "v", "checkpoint", "save", "base"]);
    env.ok(&["vault", "fork", "v", "junk"]);
    let stop = Arc::new(AtomicBool::new(false));
    let gcs = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    // fork name -> files it should hold (path -> content); deleted base files.
    let forks = Arc::new(Mutex::new(BTreeMap::<
        String,
        (BTreeMap<String, Vec<u8>>, BTreeSet<String>),
    >::new()));
    let deadline = Instant::now() + Duration::from_secs(secs);
    std::thread::scope(|s| {
        // gc in a loop.
        {
            let env = &env;
            let stop = stop.clone();
            let gcs = gcs.clone();
            let errs = errors.clone();
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let r = env.run(&["--json", "--vault", "v", "gc"]);
                    no_panic(&r, "gc");
                    if r.code != 0 {
                        errs.lock().unwrap().push(format!("gc: {}", r.stdout));
                    }
                    gcs.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        // Another fork keeps making garbage: files written, checkpointed, deleted.
        {
            let env = &env;
            let errs = errors.clone();
            s.spawn(move || {
                let mut k = 0;
                while Instant::now() < deadline {
                    let p = format!("/tmp/garbage{k}");
                    let data = "g".repeat(100_000 + k);
                    for args in [
                        vec!["--vault", "junk", "write", "-p", p.as_str(), data.as_str()],
                        vec!["--vault", "junk", "checkpoint", "save", &format!("g{k}")],
                        vec!["--vault", "junk", "rm", p.as_str()],
                        vec!["--vault", "junk", "checkpoint", "delete", &format!("g{k}")],
                    ] {
                        let r = env.run(&args);
                        no_panic(&r, "garbage");
                        if r.code != 0 {
                            errs.lock().unwrap().push(format!("{args:?}: {}", r.stderr));
                        }
                    }
                    k += 1;
                }
            });
        }
        // Two fork makers: fork, write own files, checkpoint, delete a base file,
        // overwrite part of a large one, fork a fork.
        for t in 0..2 {
            let env = &env;
            let errs = errors.clone();
            let forks = forks.clone();
            let base_files = base_files.clone();
            s.spawn(move || {
                let mut k = 0;
                while Instant::now() < deadline {
                    let name = format!("f{t}-{k}");
                    let parent = if k > 0 && k % 3 == 0 {
                        format!("f{t}-{}", k - 1)
                    } else {
                        "v".to_string()
                    };
                    let mut expect = {
                        let all = forks.lock().unwrap();
                        let files = all
                            .get(&parent)
                            .map(|x| x.0.clone())
                            .unwrap_or_else(|| base_files.clone());
                        // Only what this fork deletes after its own checkpoint.
                        (files, BTreeSet::new())
                    };
                    let run = |args: Vec<String>| -> bool {
                        let a: Vec<&str> = args.iter().map(String::as_str).collect();
                        let r = env.run(&a);
                        no_panic(&r, &format!("{a:?}"));
                        if r.code != 0 {
                            errs.lock().unwrap().push(format!("{a:?}: {}", r.stderr));
                        }
                        r.code == 0
                    };
                    if !run(vec![
                        "vault".into(),
                        "fork".into(),
                        parent.clone(),
                        name.clone(),
                    ]) {
                        k += 1;
                        continue;
                    }
                    let v = |a: &[&str]| -> Vec<String> {
                        let mut x = vec!["--vault".to_string(), name.clone()];
                        x.extend(a.iter().map(|s| s.to_string()));
                        x
                    };
                    for i in 0..4 {
                        let p = format!("/own/{name}/x{i}");
                        let data = content_for(&name, i);
                        // write from stdin keeps binary content exact.
                        let r = env.run_stdin(&["--vault", &name, "write", "-p", &p], &data);
                        if r.code != 0 {
                            errs.lock()
                                .unwrap()
                                .push(format!("write {p}: {}", r.stderr));
                        }
                        expect.0.insert(p, data);
                    }
                    if run(v(&["checkpoint", "save", "mine"])) {
                        let victim = format!("/src/b{}", (k * 7 + t) % 40);
                        if expect.0.contains_key(&victim) && run(v(&["rm", &victim])) {
                            expect.0.remove(&victim);
                            expect.1.insert(victim);
                        }
                    }
                    forks.lock().unwrap().insert(name, expect);
                    k += 1;
                }
            });
        }
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        // Let the gc loop run once more after the last writes.
        std::thread::sleep(Duration::from_millis(200));
        stop.store(true, Ordering::Relaxed);
    });
    let errors = errors.lock().unwrap().clone();
    assert!(
        errors.is_empty(),
        "{} errors:\n{}",
        errors.len(),
        errors.join("\n")
    );
    env.ok(&["--vault", "v", "gc"]);
    verify_ok(&env, "v");
    let forks = forks.lock().unwrap().clone();
    assert!(forks.len() >= 4, "only {} forks were made", forks.len());
    let mut files_checked = 0;
    for (name, (files, deleted)) in &forks {
        let listed = files_of(&env, name, "/");
        let want: BTreeSet<String> = files.keys().cloned().collect();
        assert_eq!(
            listed.keys().cloned().collect::<BTreeSet<_>>(),
            want,
            "{name}: wrong set of files"
        );
        // Its own files all; the shared base files a spread (gc would lose whole chunks).
        for (j, (p, data)) in files.iter().enumerate() {
            if p.starts_with("/src/") && j % 5 != 0 {
                continue;
            }
            let out = env
                .cmd(["--vault", name.as_str(), "cat", p.as_str()])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{name}: cat {p}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                out.stdout == *data,
                "{name}: {p} has the wrong content after gc"
            );
            files_checked += 1;
        }
        // Its checkpoint still reads, deleted base files included.
        for p in deleted {
            let out = env
                .cmd(["--vault", name.as_str(), "cat", "--at", "mine", p.as_str()])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{name}: cat --at mine {p}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(out.stdout == base_files[p], "{name}: {p} at mine");
            files_checked += 1;
        }
    }
    // The source's base checkpoint is intact too.
    for (p, data) in base_files.iter().take(10) {
        let out = env
            .cmd(["--vault", "v", "cat", "--at", "base", p.as_str()])
            .output()
            .unwrap();
        assert!(
            out.status.success() && out.stdout == *data,
            "v: {p} at base"
        );
    }
    report(
        "gc",
        &format!("`gc` in a loop while 2 threads fork, write, checkpoint and delete ({secs} s)"),
        gcs.load(Ordering::Relaxed),
        &format!(
            "{} forks made, {files_checked} files read back exactly; vault verify ok",
            forks.len()
        ),
    );
}

#[test]
fn gc_while_a_mounted_fork_is_written() {
    let Some(m) = Mount::new("gc_while_a_mounted_fork_is_written") else {
        return;
    };
    if !have_python() {
        return;
    }
    let secs = knob("AVFS_CONC_SECS", 6);
    let env = &m.env;
    m.avfs(&["write", "-p", "/seed/a", &"seed".repeat(30_000)]);
    m.avfs(&["checkpoint", "save", "s"]);
    let stop = env.path("stop");
    let writer = Writer::start(&m.mp, &stop);
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut gcs = 0;
    let mut k = 0;
    while Instant::now() < deadline {
        let r = env.run(&["--json", "--vault", "t", "gc"]);
        no_panic(&r, "gc");
        assert_eq!(r.code, 0, "gc: {}", r.stdout);
        gcs += 1;
        if gcs % 3 == 0 {
            m.avfs(&["checkpoint", "save", &format!("k{k}")]);
            k += 1;
        }
    }
    let closed = writer.finish();
    env.ok(&["--vault", "t", "gc"]);
    for &i in &closed {
        let got = std::fs::read_to_string(m.p(&format!("bg/f{i:05}"))).unwrap();
        assert_eq!(got, bg_content(i), "bg/f{i:05} after gc");
    }
    let mp = m.mp.to_str().unwrap().to_string();
    env.ok(&["unmount", &mp]);
    for &i in closed.iter().step_by(7) {
        assert_eq!(m.avfs(&["cat", &format!("/bg/f{i:05}")]), bg_content(i));
    }
    verify_ok(env, "t");
    m.env.ok(&["mount", "t", &mp]);
    report(
        "gc",
        &format!("`gc` in a loop while a process writes in the mount ({secs} s)"),
        gcs,
        &format!(
            "{} files closed in the mount all intact after gc and remount; verify ok",
            closed.len()
        ),
    );
}

// ---------------------------------------------------------------- 100 vaults at once

#[test]
fn a_hundred_vaults_used_at_once() {
    let n = knob("AVFS_CONC_VAULTS", 100) as usize;
    let env = Arc::new(Env::new());
    // Create them (8 at a time).
    let next = Arc::new(AtomicU64::new(0));
    let hs: Vec<_> = (0..8)
        .map(|_| {
            let env = env.clone();
            let next = next.clone();
            std::thread::spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst) as usize;
                    if i >= n {
                        break;
                    }
                    let r = env.run(&["--json", "vault", "create", &format!("v{i}")]);
                    no_panic(&r, "vault create");
                    assert_eq!(r.code, 0, "vault create v{i}: {}", r.stdout);
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    // All at once: one process per vault writes, then reads, its file. Start together.
    let t0 = Instant::now();
    let mut writers: Vec<(usize, Child)> = (0..n)
        .map(|i| {
            let child = env
                .cmd([
                    "--json",
                    "--vault",
                    &format!("v{i}"),
                    "write",
                    "/f",
                    &format!("x{i}"),
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            (i, child)
        })
        .collect();
    let mut max_live = 0;
    // How many were running at the same time (they must overlap).
    loop {
        let live = writers
            .iter_mut()
            .filter_map(|(_, c)| matches!(c.try_wait(), Ok(None)).then_some(()))
            .count();
        max_live = max_live.max(live);
        if live == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    for (i, c) in writers.drain(..) {
        let out = c.wait_with_output().unwrap();
        let r = Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into(),
            stderr: String::from_utf8_lossy(&out.stderr).into(),
        };
        no_panic(&r, "write");
        assert_eq!(r.code, 0, "write in v{i}: {} {}", r.stdout, r.stderr);
    }
    let readers: Vec<(usize, Child)> = (0..n)
        .map(|i| {
            let child = env
                .cmd(["--vault", &format!("v{i}"), "cat", "/f"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            (i, child)
        })
        .collect();
    for (i, c) in readers {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "cat in v{i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("x{i}"),
            "v{i}"
        );
    }
    let elapsed = t0.elapsed();
    assert!(
        max_live >= 2,
        "the writes did not overlap (max {max_live} at once)"
    );
    // Each vault is its own file and lists fine.
    let list = env.json(&["vault", "list"]);
    let vaults = list["vaults"].as_array().unwrap();
    assert_eq!(vaults.len(), n, "{list}");
    let paths: BTreeSet<&str> = vaults.iter().map(|v| v["path"].as_str().unwrap()).collect();
    assert_eq!(paths.len(), n, "vaults share files");
    for v in vaults {
        assert!(v.get("error").is_none_or(|e| e.is_null()), "{v}");
    }
    for i in (0..n).step_by(17) {
        verify_ok(&env, &format!("v{i}"));
    }
    report(
        "vaults",
        &format!("{n} vaults: {n} concurrent `write` then {n} concurrent `cat`"),
        2 * n as u64,
        &format!(
            "all succeed, up to {max_live} processes at once, {} ms; each vault its own file",
            elapsed.as_millis()
        ),
    );
}

// ------------------------------------------------------------- concurrent unmounts

/// Two `avfs unmount` of one mount at the same time (two agents cleaning up, or an exec's
/// own cleanup racing a user's): each must succeed or say nothing is mounted there
/// (`not_found`); neither may fail with an I/O or internal error.
#[test]
fn concurrent_unmounts_of_one_mount() {
    if !fuse_or_skip("concurrent_unmounts_of_one_mount") {
        return;
    }
    let rounds = knob("AVFS_CONC_UNMOUNT_ROUNDS", 10);
    let env = Env::new();
    env.ok(&["vault", "create", "v"]);
    let mp = env.path("mnt");
    std::fs::create_dir_all(&mp).unwrap();
    let mps = mp.to_str().unwrap().to_string();
    let mut bad = Vec::new();
    for round in 0..rounds {
        env.ok(&["mount", "v", &mps]);
        let rs: Vec<Run> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..2)
                .map(|_| s.spawn(|| env.run(&["--json", "unmount", &mps])))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for r in &rs {
            no_panic(r, "unmount");
            let fine = r.code == 0 || (r.code == 1 && r.json()["error"]["kind"] == "not_found");
            if !fine {
                bad.push(format!("round {round}: exit {}: {}", r.code, r.stdout));
            }
        }
        if is_mountpoint(&mp) {
            let _ = env.run(&["unmount", &mps]);
        }
        assert!(!is_mountpoint(&mp), "round {round}: still mounted");
        // Wait for the server to be gone before mounting again.
        eventually("the mount record to go", || {
            env.json(&["mounts"])["mounts"]
                .as_array()
                .unwrap()
                .is_empty()
        });
    }
    assert!(
        bad.is_empty(),
        "BUG: concurrent `avfs unmount` of one mount failed {} of {} times:\n{}",
        bad.len(),
        2 * rounds,
        bad.join("\n")
    );
    report(
        "unmount",
        "2 concurrent `avfs unmount` of one mount",
        2 * rounds,
        "each succeeds or says not_found",
    );
}

// --------------------------------------------- mounting while others list the mounts

/// `avfs mount` (and so `exec`) while other processes run `avfs mounts`/`find_mount`
/// (every CLI command on a vault does): the new server's record must survive them.
#[test]
fn mounting_while_other_processes_list_mounts() {
    if !fuse_or_skip("mounting_while_other_processes_list_mounts") {
        return;
    }
    let rounds = knob("AVFS_CONC_UNMOUNT_ROUNDS", 10);
    let env = Env::new();
    env.ok(&["vault", "create", "v"]);
    let mp = env.path("mnt");
    std::fs::create_dir_all(&mp).unwrap();
    let mps = mp.to_str().unwrap().to_string();
    let stop = AtomicBool::new(false);
    let mut bad = Vec::new();
    let listed = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let r = env.run(&["--json", "mounts"]);
                    no_panic(&r, "mounts");
                    listed.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        for round in 0..rounds {
            let r = env.run(&["--json", "mount", "v", &mps]);
            no_panic(&r, "mount");
            if r.code != 0 {
                bad.push(format!("round {round}: mount: {}", r.stdout));
                continue;
            }
            let r = env.run(&["--json", "unmount", &mps]);
            if r.code != 0 {
                bad.push(format!("round {round}: unmount: {}", r.stdout));
            }
            if is_mountpoint(&mp) {
                force_detach(&mp);
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(
        bad.is_empty(),
        "BUG: `avfs mount` failed {} of {rounds} times while other processes listed mounts:\n{}",
        bad.len(),
        bad.join("\n")
    );
    report(
        "mount",
        "`avfs mount`/`unmount` while 3 processes run `avfs mounts` in a loop",
        rounds,
        &format!(
            "every mount starts ({} listings meanwhile)",
            listed.load(Ordering::Relaxed)
        ),
    );
}
