//! The engines group: real workloads as whole `avfs exec --json` runs (policy, checkpoint,
//! run in the sandbox at the workspace's stable path, ingest, change report, audit), with
//! the overlay engine and the FUSE engine, side by side with the same workload in a
//! native directory of the same file system, interleaved.
//!
//! Each exec's envelope says how long the command itself ran (`result.duration_ms`) and,
//! for overlay, how long the ingest took (`engine.ingest.ms`): the table shows both.

use super::*;

/// The workloads, in the order they run.
pub(crate) const ENGINE_WORKLOADS: &[&str] = &[
    "tar", "git", "status", "script", "io", "rm", "cargo", "true",
];

/// The workspace of the `true` workload: what issue 13's goal (`exec -- true` under
/// 10 ms) is stated for.
const TRUE_FILES: usize = 100_000;

/// Writes `n` small files under `dir`, 50 to a directory, 20 directories to a group.
fn small_files(dir: &Path, n: usize) -> BoxResult<()> {
    for i in 0..n {
        let d = dir
            .join(format!("d{:03}", i / 1000))
            .join(format!("s{:02}", (i / 50) % 20));
        if i % 50 == 0 {
            std::fs::create_dir_all(&d)?;
        }
        std::fs::write(d.join(format!("f{i}.txt")), format!("file {i}\n"))?;
    }
    Ok(())
}

/// A policy that lets the benchmark's commands run without approval: what is measured
/// is the engine, not the policy (which `policy check` covers).
const POLICY: &str = r#"
[[rule]]
name = "bench-tar"
program = "tar"
category = "mutating"
decision = "allow_with_checkpoint"

[[rule]]
name = "bench-git"
program = "git"
category = "mutating"
decision = "allow_with_checkpoint"

[[rule]]
name = "bench-python"
program = "python3"
category = "mutating"
decision = "allow_with_checkpoint"

[[rule]]
name = "bench-cargo"
program = "cargo"
category = "mutating"
decision = "allow_with_checkpoint"

[[rule]]
name = "bench-rm"
program = "rm"
category = "mutating"
decision = "allow_with_checkpoint"
"#;

/// Makes 20 000 small files in nested directories, renames half of them, deletes a
/// quarter (argument: the number of files).
const SCRIPT: &str = r#"
import os, sys
n = int(sys.argv[1])
paths = []
for i in range(n):
    d = os.path.join('gen', 'd%02d' % (i % 50), 'e%02d' % (i // 50 % 20))
    os.makedirs(d, exist_ok=True)
    p = os.path.join(d, 'f%06d.txt' % i)
    with open(p, 'w') as f:
        f.write('file %d\n' % i * (1 + i % 7))
    paths.append(p)
for p in paths[::2]:
    os.rename(p, p + '.moved')
for p in paths[1::4]:
    os.remove(p)
"#;

/// Writes then reads MIB MiB sequentially in 1 MiB calls, every 64 KiB stamped so that
/// nothing deduplicates (argument: MiB).
const IO: &str = r#"
import os, sys
mib = int(sys.argv[1])
block = bytearray(os.urandom(1 << 20))
with open('big.bin', 'wb') as f:
    for i in range(mib):
        for o in range(0, 1 << 20, 65536):
            block[o:o + 8] = (i * 16 + o).to_bytes(8, 'little')
        f.write(block)
with open('big.bin', 'rb') as f:
    while f.read(1 << 20):
        pass
"#;

struct Timing {
    total: Stat,
    command: Stat,
    ingest: Stat,
}

impl Timing {
    fn new() -> Timing {
        Timing {
            total: Stat::default(),
            command: Stat::default(),
            ingest: Stat::default(),
        }
    }
}

/// One workload's figures.
struct Line {
    name: String,
    size: String,
    native: Stat,
    engines: Vec<(&'static str, Timing)>,
    goal: Option<Goal>,
    bytes: Option<u64>,
    /// The command in a plain overlayfs mount over the same state (empty when it could
    /// not be mounted): the kernel's share.
    bare: Stat,
    /// For a row of bytes: copying the written file once more on the same file system,
    /// the least any ingest that stores the bytes must cost.
    store_once: Stat,
}

fn exec_cmd(env: &Env, vault: &str, engine: &str, cwd: &str, argv: &[&str]) -> Command {
    let mut c = env.avfs([
        "--json", "--vault", vault, "exec", "--engine", engine, "--cwd", cwd,
    ]);
    for kv in [
        "GIT_AUTHOR_NAME=bench",
        "GIT_AUTHOR_EMAIL=bench@example.com",
        "GIT_COMMITTER_NAME=bench",
        "GIT_COMMITTER_EMAIL=bench@example.com",
    ] {
        c.args(["--env", kv]);
    }
    c.arg("--").args(argv);
    c
}

/// Runs one exec and records its wall time, the command's own time and the ingest.
fn timed_exec(c: &mut Command, t: &mut Timing) -> BoxResult<serde_json::Value> {
    let (d, out) = run_timed(c, &[0])?;
    let v: serde_json::Value = serde_json::from_slice(&out)?;
    if v["exit_code"] != 0 {
        return Err(format!(
            "avfs exec failed: exit {} ({}): {}",
            v["exit_code"], v["decision"]["reason"], v["result"]["stderr"]
        )
        .into());
    }
    t.total.push(d);
    let ms = |x: &serde_json::Value| Duration::from_millis(x.as_u64().unwrap_or(0));
    t.command.push(ms(&v["result"]["duration_ms"]));
    t.ingest.push(ms(&v["engine"]["ingest"]["ms"]));
    Ok(v)
}

fn native_cmd(dir: &Path, argv: &[&str]) -> Command {
    let mut c = git_env(Command::new(argv[0]), dir);
    c.args(&argv[1..])
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.com")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@example.com");
    c
}

pub(crate) fn bench_engines(
    args: &Args,
    avfs: &Path,
    base: &Path,
    t0: Instant,
) -> BoxResult<GroupResult> {
    let tag = "engines";
    let work = base.join("engines");
    std::fs::create_dir_all(&work)?;
    let env = Env {
        avfs: avfs.to_path_buf(),
        home: work.join("home"),
    };
    std::fs::create_dir_all(&env.home)?;
    std::fs::write(env.home.join("policy.toml"), POLICY)?;
    let mut notes = Vec::new();
    let want = |w: &str| args.engine_workloads.iter().any(|x| x == w);
    let engines: Vec<&'static str> = args
        .engines
        .iter()
        .map(|e| if e == "fuse" { "fuse" } else { "overlay" })
        .collect();
    let reps = args.mount_reps;
    // The plain overlayfs beside each run (root only: it mounts).
    let bare = std::cell::RefCell::new(BareOverlay::new(work.join("bare")));
    let bare_ok = std::cell::Cell::new(true);
    let bare_note: std::cell::RefCell<Vec<String>> = Default::default();

    progress_tag(t0, tag, "building the source tarball");
    let tb = build_tarball(&work, args.tar_files)?;
    notes.push(format!(
        "tarball: {} files, {} of sources from {} (stored twice, under a/ and b/)",
        fmt_count(tb.files as f64),
        fmt_bytes(tb.bytes),
        tb.from.display()
    ));
    // The workspace holds the tarball, as the native directory does.
    let seed = work.join("seed");
    std::fs::create_dir_all(&seed)?;
    std::fs::copy(&tb.path, seed.join("src.tar"))?;
    std::fs::write(seed.join("script.py"), SCRIPT)?;
    std::fs::write(seed.join("io.py"), IO)?;
    run(&mut env.avfs(["vault", "create", "bench"]))?;
    run(&mut env.avfs([
        OsStr::new("--vault"),
        OsStr::new("bench"),
        OsStr::new("import"),
        seed.as_os_str(),
        OsStr::new("/"),
    ]))?;
    run(&mut env.avfs(["--vault", "bench", "checkpoint", "save", "base"]))?;
    let native = work.join("native");
    let reset_native = |from: &Path| -> BoxResult<()> {
        if native.exists() {
            run(&mut cmd("rm", [OsStr::new("-rf"), native.as_os_str()]))?;
        }
        run(&mut cmd(
            "cp",
            [OsStr::new("-a"), from.as_os_str(), native.as_os_str()],
        ))?;
        Ok(())
    };
    let restore = |cp: &str| -> BoxResult<()> {
        run(&mut env.avfs(["--vault", "bench", "checkpoint", "restore", cp]))?;
        Ok(())
    };
    // Warm each engine's view of the base tree (the overlay layer cache).
    for e in &engines {
        timed_exec(
            &mut exec_cmd(&env, "bench", e, "/", &["true"]),
            &mut Timing::new(),
        )?;
    }
    let mut lines: Vec<Line> = Vec::new();
    let files = fmt_count(tb.files as f64);
    // Builds a Line by running `argv` `reps` times on each side, restoring `state` (and
    // the native copy of it) before each run.
    let mut measure = |name: &str,
                       size: String,
                       state: Option<(&str, &Path)>,
                       cwd: &str,
                       argv: &[&str],
                       reps: usize,
                       goal: Option<Goal>,
                       bytes: Option<u64>|
     -> BoxResult<()> {
        progress_tag(t0, tag, &format!("{name}, {reps} reps"));
        let mut line = Line {
            name: name.into(),
            size,
            native: Stat::default(),
            engines: engines.iter().map(|e| (*e, Timing::new())).collect(),
            goal,
            bytes,
            bare: Stat::default(),
            store_once: Stat::default(),
        };
        let rel = cwd.trim_start_matches('/');
        let ndir = native.join(rel);
        for rep in 0..reps {
            // Each side takes each place in the order in turn: what runs right after
            // a lot of memory was freed is slower on this kind of guest (the host takes
            // freed memory back at once), and a fixed order would hand that to one side.
            for place in 0..3 {
                match (place + rep) % 3 {
                    0 => {
                        if let Some((_, seed)) = state {
                            reset_native(seed)?;
                        }
                        line.native
                            .push(run_timed(&mut native_cmd(&ndir, argv), &[0])?.0);
                    }
                    1 if bare_ok.get() => {
                        let mut b = bare.borrow_mut();
                        let mounted = match state {
                            Some((_, seed)) => b.mount(seed),
                            None => Ok(()), // the status row mounts a warm one first
                        };
                        match mounted {
                            Ok(()) => {
                                let bdir = b.merged().join(rel);
                                line.bare
                                    .push(run_timed(&mut native_cmd(&bdir, argv), &[0])?.0);
                                if bytes.is_some() {
                                    let copied = work.join("store-once.bin");
                                    let t = Instant::now();
                                    std::fs::copy(bdir.join("big.bin"), &copied)?;
                                    line.store_once.push(t.elapsed());
                                    std::fs::remove_file(&copied)?;
                                }
                                if state.is_some() {
                                    b.unmount()?;
                                }
                            }
                            Err(e) => {
                                bare_ok.set(false);
                                bare_note.borrow_mut().push(format!(
                                    "no plain overlayfs column: mounting one failed ({e})"
                                ));
                            }
                        }
                    }
                    1 => {}
                    _ => {
                        for (e, t) in line.engines.iter_mut() {
                            if let Some((cp, _)) = state {
                                restore(cp)?;
                            }
                            timed_exec(&mut exec_cmd(&env, "bench", e, cwd, argv), t)?;
                        }
                    }
                }
            }
        }
        lines.push(line);
        Ok(())
    };

    // First, while the machine's memory is least used: a guest of this kind of host
    // writes new memory several times slower once its tmpfs holds ~10 GB (measured:
    // 4 GB in 1.5 s, the next 4 GB in 6.8 s), and the tree workloads leave that much.
    if want("io") {
        let mib = args.io_mib.to_string();
        measure(
            "write then read sequentially, 1 MiB calls",
            fmt_bytes((args.io_mib * MIB) as u64),
            Some(("base", &seed)),
            "/",
            &["python3", "io.py", &mib],
            reps,
            Some(Goal::ThroughputAtLeast(0.8)),
            Some(2 * (args.io_mib * MIB) as u64),
        )?;
    }
    reset_native(&seed)?;
    // `rm -rf tree` first: the crates' own `.gitignore` rules ignore some of what the
    // tarball holds (their `Cargo.lock`s), and ignored files outlive a checkpoint restore,
    // as git's outlive a checkout, so a restored workspace still has a `tree/` of them.
    let tar = [
        "sh",
        "-c",
        "rm -rf tree && mkdir tree && tar xf src.tar -C tree",
    ];
    if want("tar") || want("git") || want("status") || want("rm") {
        measure(
            "`tar x` of the source tarball",
            files.clone(),
            Some(("base", &seed)),
            "/",
            &tar,
            reps,
            Some(Goal::RatioAtMost(2.0)),
            None,
        )?;
    }
    // The extracted tree as a state of its own, for git and rm.
    let extracted = work.join("extracted");
    run(&mut cmd(
        "cp",
        [OsStr::new("-a"), seed.as_os_str(), extracted.as_os_str()],
    ))?;
    run(&mut native_cmd(&extracted, &tar))?;
    restore("base")?;
    timed_exec(
        &mut exec_cmd(&env, "bench", "overlay", "/", &tar),
        &mut Timing::new(),
    )?;
    run(&mut env.avfs(["--vault", "bench", "checkpoint", "save", "extracted"]))?;
    // No automatic gc: past ~6 700 loose objects git starts one in the background,
    // which a run's end kills and which deletes objects under a native copy in progress.
    let commit = [
        "sh",
        "-c",
        "git init -q && git add -A && git -c gc.auto=0 commit -qm import",
    ];
    if want("git") {
        measure(
            "`git init && git add -A && git commit`",
            files.clone(),
            Some(("extracted", &extracted)),
            "/tree",
            &commit,
            reps,
            Some(Goal::RatioAtMost(1.5)),
            None,
        )?;
    }
    let committed = work.join("committed");
    run(&mut cmd(
        "cp",
        [
            OsStr::new("-a"),
            extracted.as_os_str(),
            committed.as_os_str(),
        ],
    ))?;
    run(&mut native_cmd(&committed.join("tree"), &commit))?;
    restore("extracted")?;
    timed_exec(
        &mut exec_cmd(&env, "bench", "overlay", "/tree", &commit),
        &mut Timing::new(),
    )?;
    run(&mut env.avfs(["--vault", "bench", "checkpoint", "save", "committed"]))?;
    if want("status") {
        // Warm: the same state, two untimed runs on each side first.
        reset_native(&committed)?;
        restore("committed")?;
        let status = ["git", "status", "--porcelain"];
        if bare_ok.get()
            && let Err(e) = bare.borrow_mut().mount(&committed)
        {
            bare_ok.set(false);
            bare_note.borrow_mut().push(format!(
                "no plain overlayfs column: mounting one failed ({e})"
            ));
        }
        for _ in 0..2 {
            run(&mut native_cmd(&native.join("tree"), &status))?;
            if bare_ok.get() {
                run(&mut native_cmd(
                    &bare.borrow().merged().join("tree"),
                    &status,
                ))?;
            }
            for e in &engines {
                timed_exec(
                    &mut exec_cmd(&env, "bench", e, "/tree", &status),
                    &mut Timing::new(),
                )?;
            }
        }
        measure(
            "`git status`, warm",
            files.clone(),
            None,
            "/tree",
            &status,
            args.reps,
            Some(Goal::RatioAtMost(1.3)),
            None,
        )?;
        bare.borrow_mut().unmount()?;
    }
    if want("rm") {
        measure(
            "`rm -rf` of the tree (with .git)",
            files.clone(),
            Some(("committed", &committed)),
            "/",
            &["rm", "-rf", "tree"],
            reps,
            Some(Goal::RatioAtMost(1.5)),
            None,
        )?;
    }
    if want("script") {
        let n = 20_000.to_string();
        measure(
            "a script: 20 000 small files in nested dirs, rename half, delete a quarter",
            "20 000".into(),
            Some(("base", &seed)),
            "/",
            &["python3", "script.py", &n],
            reps,
            Some(Goal::RatioAtMost(2.0)),
            None,
        )?;
    }
    if want("cargo") {
        progress_tag(t0, tag, "importing this crate for cargo build");
        let (crate_tar, from) = crate_tarball(args, &work)?;
        let src = work.join("crate");
        std::fs::create_dir_all(&src)?;
        run(&mut cmd(
            "tar",
            [
                OsStr::new("xf"),
                crate_tar.as_os_str(),
                OsStr::new("-C"),
                src.as_os_str(),
            ],
        ))?;
        run(&mut env.avfs(["--vault", "bench", "checkpoint", "restore", "base"]))?;
        run(&mut env.avfs([
            OsStr::new("--vault"),
            OsStr::new("bench"),
            OsStr::new("import"),
            src.as_os_str(),
            OsStr::new("/crate"),
        ]))?;
        run(&mut env.avfs(["--vault", "bench", "checkpoint", "save", "crate"]))?;
        let with_crate = work.join("with-crate");
        run(&mut cmd(
            "cp",
            [OsStr::new("-a"), seed.as_os_str(), with_crate.as_os_str()],
        ))?;
        run(&mut cmd(
            "cp",
            [
                OsStr::new("-a"),
                src.as_os_str(),
                with_crate.join("crate").as_os_str(),
            ],
        ))?;
        notes.push(format!("cargo build: {from}"));
        let mut build = vec!["cargo", "build", "--offline", "--locked"];
        if args.cargo_release {
            build.push("--release");
        }
        measure(
            "`cargo build --offline` of this crate, empty target dir",
            "1 crate".into(),
            Some(("crate", &with_crate)),
            "/crate",
            &build,
            args.cargo_reps,
            Some(Goal::RatioAtMost(1.05)),
            None,
        )?;
    }
    if want("true") {
        // The fixed cost of one exec (policy, run lock, watchdog, overlay mount, sandbox,
        // change report, audit row): nothing in it is O(workspace) once the layer cache
        // is warm, which the untimed first run makes it.
        let size = fmt_count(TRUE_FILES as f64);
        progress_tag(t0, tag, &format!("`exec -- true` on {size} files"));
        let tree = work.join("true-tree");
        small_files(&tree, TRUE_FILES)?;
        run(&mut env.avfs(["vault", "create", "bench-true"]))?;
        run(&mut env.avfs([
            OsStr::new("--vault"),
            OsStr::new("bench-true"),
            OsStr::new("import"),
            tree.as_os_str(),
            OsStr::new("/"),
        ]))?;
        std::fs::remove_dir_all(&tree)?;
        let argv = ["true"];
        for e in &engines {
            timed_exec(
                &mut exec_cmd(&env, "bench-true", e, "/", &argv),
                &mut Timing::new(),
            )?;
        }
        let mut line = Line {
            name: "`exec -- true` (the fixed cost of one exec)".into(),
            size,
            native: Stat::default(),
            engines: engines.iter().map(|e| (*e, Timing::new())).collect(),
            goal: Some(Goal::Under(0.010)),
            bytes: None,
            bare: Stat::default(),
            store_once: Stat::default(),
        };
        for _ in 0..args.reps {
            line.native
                .push(run_timed(&mut native_cmd(&work, &argv), &[0])?.0);
            for (e, t) in line.engines.iter_mut() {
                timed_exec(&mut exec_cmd(&env, "bench-true", e, "/", &argv), t)?;
            }
        }
        lines.push(line);
    }
    let mut extra = vec![
        String::new(),
        format!(
            "| workload | size | native median (n) | plain overlayfs: command median (ratio to native) | {} | goal | met |",
            engines
                .iter()
                .map(|e| format!("{e}: exec median (command + ingest) | ratio {e}/native"))
                .collect::<Vec<_>>()
                .join(" | ")
        ),
        format!(
            "|---|---:|---|---|{}---|---|",
            "---|---:|".repeat(engines.len())
        ),
    ];
    let mut floor_notes = Vec::new();
    for l in &lines {
        let nat = l.native.median();
        let mut cells = vec![];
        let mut met = "-".to_string();
        for (e, t) in &l.engines {
            let ratio = t.total.median() / nat;
            let shown = match l.bytes {
                Some(b) => format!(
                    "{} ({:.0} MB/s; command {} + ingest {})",
                    fmt_secs(t.total.median()),
                    b as f64 / t.total.median() / 1e6,
                    fmt_secs(t.command.median()),
                    fmt_secs(t.ingest.median())
                ),
                None => format!(
                    "{} (command {} + ingest {}; min-max {}-{}, n={})",
                    fmt_secs(t.total.median()),
                    fmt_secs(t.command.median()),
                    fmt_secs(t.ingest.median()),
                    fmt_secs(t.total.min()),
                    fmt_secs(t.total.max()),
                    t.total.0.len()
                ),
            };
            cells.push(shown);
            cells.push(match l.bytes {
                Some(_) => format!("{} (throughput {:.2})", fmt_ratio(ratio), 1.0 / ratio),
                None => fmt_ratio(ratio),
            });
            if *e == "overlay" {
                met = match l.goal {
                    Some(Goal::Under(s)) => if t.total.median() < s {
                        "yes"
                    } else {
                        "**NO**"
                    }
                    .into(),
                    Some(Goal::RatioAtMost(x)) => if ratio <= x { "yes" } else { "**NO**" }.into(),
                    Some(Goal::ThroughputAtLeast(x)) => {
                        if 1.0 / ratio >= x { "yes" } else { "**NO**" }.into()
                    }
                    _ => "-".into(),
                };
            }
        }
        let goal = match l.goal {
            Some(Goal::Under(s)) => format!("overlay median < {}", fmt_secs(s)),
            Some(Goal::RatioAtMost(x)) => format!("overlay ratio <= {x:.2}"),
            Some(Goal::ThroughputAtLeast(x)) => format!("overlay throughput >= {x:.1} of native"),
            _ => "-".into(),
        };
        let native_cell = match l.bytes {
            Some(b) => format!(
                "{} ({:.0} MB/s, n={})",
                fmt_secs(nat),
                b as f64 / nat / 1e6,
                l.native.0.len()
            ),
            None => format!("{} (n={})", fmt_secs(nat), l.native.0.len()),
        };
        let bare_cell = if l.bare.0.is_empty() {
            "-".to_string()
        } else {
            format!(
                "{} ({})",
                fmt_secs(l.bare.median()),
                fmt_ratio(l.bare.median() / nat)
            )
        };
        if !l.store_once.0.is_empty()
            && let (Some(b), Some(Goal::ThroughputAtLeast(x))) = (l.bytes, l.goal)
        {
            // The goal's budget: the exec may take native/x in all; the command at
            // native speed leaves the rest for storing what it wrote.
            let budget = nat / x - l.bare.median();
            floor_notes.push(format!(
                "{}: storing the written {} once more (a copy on the same file system) took {} (median of {}); the goal leaves {} beyond a plain overlayfs run for the whole ingest",
                l.name,
                fmt_bytes(b / 2),
                fmt_secs(l.store_once.median()),
                l.store_once.0.len(),
                fmt_secs(budget.max(0.0))
            ));
        }
        extra.push(format!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            l.name,
            l.size,
            native_cell,
            bare_cell,
            cells.join(" | "),
            goal,
            met
        ));
    }
    extra.push(String::new());
    extra.push(
        "\"plain overlayfs\" is the same command in an overlayfs mount (avfs's options) over a copy of the same state on the same file system, with nothing of avfs around it: the kernel's share, a floor under the overlay engine's command time.".into(),
    );
    extra.extend(floor_notes);
    notes.extend(bare_note.into_inner());
    drop(bare);
    if !args.keep {
        progress_tag(t0, tag, "cleaning up");
        let _ = std::fs::remove_dir_all(&work);
    }
    Ok(GroupResult {
        rows: vec![],
        notes,
        extra,
    })
}
