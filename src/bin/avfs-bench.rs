//! `avfs-bench`: measures vault operations on workspaces of several sizes, side by side with
//! a native directory on the same disk, and prints a table of medians, ratios and goals.
//!
//! ```text
//! cargo run --release --bin avfs-bench -- [--sizes 1000,10000,100000] [--reps N]
//!                                         [--native-reps N] [--dir DIR] [--keep]
//! ```
//!
//! Every workload runs against the same generated host tree. Vault operations are timed
//! twice: in process through the library (one write transaction including its commit, the
//! way the CLI command does it) and as a whole `avfs` process. The machines this runs on are
//! shared and noisy, so only figures from one run are compared, and medians are quoted.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::io::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentvfs::diff::{ChangeSummary, diff_roots};
use agentvfs::registry::Registry;
use agentvfs::store::{Store, audit, objects};
use agentvfs::workspace::path::components;
use agentvfs::workspace::{MAIN, Workspace};
use serde_json::json;

type BoxResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const USAGE: &str = "usage: avfs-bench [--sizes 1000,10000,100000] [--reps N] [--native-reps N] [--dir DIR] [--keep]

  --sizes        workspace sizes in files (default 1000,10000,100000)
  --reps         repetitions of each cheap measurement (default 7; `avfs cat` runs 3x as many)
  --native-reps  repetitions of the expensive ones: import, cp -a, diff -rq (default 3)
  --dir          where to put the trees and vaults (default: the system temp dir)
  --keep         keep the generated trees and vaults";

struct Args {
    sizes: Vec<usize>,
    reps: usize,
    native_reps: usize,
    dir: Option<PathBuf>,
    keep: bool,
}

fn parse_args() -> BoxResult<Args> {
    let mut a = Args {
        sizes: vec![1_000, 10_000, 100_000],
        reps: 7,
        native_reps: 3,
        dir: None,
        keep: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let (key, inline) = match arg.split_once('=') {
            Some((k, v)) if k.starts_with("--") => (k.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |name: &str| -> BoxResult<String> {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("{name} needs a value\n{USAGE}").into())
        };
        match key.as_str() {
            "--sizes" => {
                a.sizes = value("--sizes")?
                    .split(',')
                    .filter(|s| !s.trim().is_empty())
                    .map(|s| s.trim().replace('_', "").parse::<usize>())
                    .collect::<Result<_, _>>()?;
                if a.sizes.is_empty() || a.sizes.iter().any(|&n| n < 200) {
                    return Err("--sizes: each size must be at least 200 files".into());
                }
            }
            "--reps" => a.reps = value("--reps")?.parse::<usize>()?.max(1),
            "--native-reps" => a.native_reps = value("--native-reps")?.parse::<usize>()?.max(1),
            "--dir" => a.dir = Some(PathBuf::from(value("--dir")?)),
            "--keep" => a.keep = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}\n{USAGE}").into()),
        }
    }
    Ok(a)
}

// ---------------------------------------------------------------------------------------
// Deterministic generation of a source-code-like tree.

/// xorshift64* (Vigna): tiny, deterministic, good enough for shaping test data.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03 | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

struct FileSpec {
    /// Absolute path inside the workspace ("/a/b/c.rs"); relative to the tree root on the host.
    rel: String,
    size: usize,
    seed: u64,
}

struct TreePlan {
    dirs: Vec<String>,
    files: Vec<FileSpec>,
    /// Index in `files` of the 1 KiB file `avfs cat` reads.
    cat_target: usize,
    bytes: u64,
}

const DIR_NAMES: &[&str] = &[
    "src", "core", "util", "net", "io", "api", "db", "ui", "cmd", "internal", "pkg", "test",
];
const STEMS: &[&str] = &[
    "main", "lib", "mod", "util", "parser", "config", "handler", "client", "server", "types",
    "error", "model", "view", "store", "cache", "index",
];
const EXTS: &[&str] = &[
    "rs", "rs", "rs", "c", "h", "py", "ts", "js", "go", "md", "json", "toml",
];
const WORDS: &[&str] = &[
    "fn",
    "let",
    "mut",
    "self",
    "return",
    "if",
    "else",
    "for",
    "in",
    "match",
    "struct",
    "impl",
    "pub",
    "use",
    "{",
    "}",
    "(",
    ")",
    ";",
    "=",
    "+",
    "==",
    "=>",
    "->",
    "value",
    "count",
    "buffer",
    "index",
    "result",
    "Ok(())",
    "Err(e)",
    "//",
    "0",
    "1",
    "42",
    "name",
    "path",
    "len",
    "data",
    "config",
    "state",
    "const",
    "while",
    "loop",
    "break",
    "true",
    "false",
    "None",
    "Some(x)",
    "String::new()",
    "Vec::new()",
    "&mut",
    "&self",
    "as",
    "u64",
    "usize",
    "i32",
    "where",
];

/// Mostly 200 B - 8 KiB (log-uniform), a few up to 32 KiB, 1 % up to 100 KiB.
fn sample_size(rng: &mut Rng) -> usize {
    let u = rng.below(100);
    let (lo, hi): (f64, f64) = if u < 90 {
        (200.0, 8192.0)
    } else if u < 99 {
        (8192.0, 32768.0)
    } else {
        (32768.0, 102400.0)
    };
    (lo * (hi / lo).powf(rng.unit())) as usize
}

fn plan_tree(n: usize, seed: u64) -> TreePlan {
    let mut rng = Rng::new(seed);
    let mut plan = TreePlan {
        dirs: Vec::new(),
        files: Vec::new(),
        cat_target: 0,
        bytes: 0,
    };
    plan_dir(&mut rng, String::new(), 0, n - 1, &mut plan);
    let deepest = plan
        .dirs
        .iter()
        .max_by_key(|d| d.matches('/').count())
        .cloned()
        .unwrap_or_default();
    plan.cat_target = plan.files.len();
    plan.files.push(FileSpec {
        rel: format!("{deepest}/cat_target_1k.txt"),
        size: 1024,
        seed: rng.next(),
    });
    plan.bytes = plan.files.iter().map(|f| f.size as u64).sum();
    plan
}

/// 8-30 files per directory and 4-20 subdirectories while files remain; at most depth 5.
fn plan_dir(rng: &mut Rng, rel: String, depth: usize, budget: usize, plan: &mut TreePlan) {
    plan.dirs.push(rel.clone());
    let here = if depth >= 5 {
        budget
    } else {
        budget.min(rng.range(8, 30) as usize)
    };
    for i in 0..here {
        let stem = STEMS[rng.below(STEMS.len() as u64) as usize];
        let ext = EXTS[rng.below(EXTS.len() as u64) as usize];
        let size = sample_size(rng);
        plan.files.push(FileSpec {
            rel: format!("{rel}/{stem}_{i:03}.{ext}"),
            size,
            seed: rng.next(),
        });
    }
    let remaining = budget - here;
    if remaining == 0 {
        return;
    }
    let subdirs = (rng.range(4, 20) as usize)
        .min(remaining.div_ceil(10))
        .max(1);
    let weights: Vec<u64> = (0..subdirs).map(|_| rng.range(1, 4)).collect();
    let total: u64 = weights.iter().sum();
    let mut left = remaining;
    for (i, w) in weights.iter().enumerate() {
        let share = if i + 1 == subdirs {
            left
        } else {
            ((remaining as u64 * w / total) as usize).min(left)
        };
        left -= share;
        if share > 0 {
            let name = DIR_NAMES[rng.below(DIR_NAMES.len() as u64) as usize];
            plan_dir(rng, format!("{rel}/{name}_{i:02}"), depth + 1, share, plan);
        }
    }
}

/// Source-looking text: indented lines of keywords, punctuation and numbered identifiers.
fn content(seed: u64, size: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(size + 128);
    while out.len() < size {
        let indent = rng.below(4) as usize * 4;
        out.extend(std::iter::repeat_n(b' ', indent));
        for w in 0..rng.range(2, 10) {
            if w > 0 {
                out.push(b' ');
            }
            let r = rng.next();
            if r.is_multiple_of(5) {
                let _ = write!(out, "v{}", (r >> 8) % 100_000);
            } else {
                out.extend_from_slice(WORDS[((r >> 8) % WORDS.len() as u64) as usize].as_bytes());
            }
        }
        out.push(b'\n');
    }
    out.truncate(size);
    out
}

fn host_path(root: &Path, rel: &str) -> PathBuf {
    root.join(rel.trim_start_matches('/'))
}

fn write_tree(root: &Path, plan: &TreePlan) -> BoxResult<()> {
    for d in &plan.dirs {
        std::fs::create_dir_all(host_path(root, d))?;
    }
    // Creating files is mostly system time here; use every core.
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 8);
    let per = plan.files.len().div_ceil(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = plan
            .files
            .chunks(per)
            .map(|part| {
                s.spawn(move || -> std::io::Result<()> {
                    for f in part {
                        std::fs::write(host_path(root, &f.rel), content(f.seed, f.size))?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().expect("writer thread panicked"))
    })?;
    Ok(())
}

/// `k` distinct files (never the `cat` target) with new content of a similar size.
fn pick_changes(rng: &mut Rng, plan: &TreePlan, k: usize, tag: &str) -> Vec<(String, Vec<u8>)> {
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(k);
    while out.len() < k {
        let i = rng.below(plan.files.len() as u64) as usize;
        if i == plan.cat_target || !seen.insert(i) {
            continue;
        }
        let f = &plan.files[i];
        let mut data = format!("// edited: {tag}\n").into_bytes();
        data.extend_from_slice(&content(rng.next(), f.size));
        out.push((f.rel.clone(), data));
    }
    out
}

fn apply_native(root: &Path, changes: &[(String, Vec<u8>)]) -> BoxResult<()> {
    for (rel, data) in changes {
        std::fs::write(host_path(root, rel), data)?;
    }
    Ok(())
}

/// Writes the changes through the library, as `avfs write` does (untimed setup). Opens its
/// own connection and closes it, so when no other connection is open, SQLite checkpoints
/// the WAL on close and the next timed `avfs` process starts as it would for a user.
fn apply_vault(vault: &Path, ws_name: &str, changes: &[(String, Vec<u8>)]) -> BoxResult<()> {
    let mut store = Store::open(vault)?;
    store.write(|db| {
        let ws = Workspace::open(db, ws_name)?;
        for (rel, data) in changes {
            let node = ws.resolve_existing(&components(rel.as_bytes())?, true)?;
            let hash = objects::put_content(db, data)?;
            ws.set_content(node.ino, hash, data.len() as u64)?;
        }
        Ok(())
    })?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Timing.

#[derive(Clone, Default)]
struct Stat(Vec<f64>);

impl Stat {
    fn push(&mut self, d: Duration) {
        self.0.push(d.as_secs_f64());
    }
    fn sorted(&self) -> Vec<f64> {
        let mut v = self.0.clone();
        v.sort_by(f64::total_cmp);
        v
    }
    fn median(&self) -> f64 {
        let v = self.sorted();
        match v.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        }
    }
    fn min(&self) -> f64 {
        self.sorted().first().copied().unwrap_or(f64::NAN)
    }
    fn max(&self) -> f64 {
        self.sorted().last().copied().unwrap_or(f64::NAN)
    }
}

/// Named phases of one library measurement, plus the commit.
type Phases = Vec<(&'static str, Duration)>;

/// Runs `f` in one write transaction (as the CLI does) and times the whole of it, commit
/// included. `f` may record phases; "commit" is what remains after `f` returns.
fn lib_timed<T>(
    store: &mut Store,
    f: impl FnOnce(&rusqlite::Connection, &mut Phases) -> agentvfs::Result<T>,
) -> BoxResult<(Duration, T, Phases)> {
    let mut phases = Phases::new();
    let mut body = Duration::ZERO;
    let t = Instant::now();
    let v = store.write(|db| {
        let tb = Instant::now();
        let r = f(db, &mut phases);
        body = tb.elapsed();
        r
    })?;
    let total = t.elapsed();
    phases.push(("commit", total.saturating_sub(body)));
    Ok((total, v, phases))
}

struct Mark(Instant);

impl Mark {
    fn lap(&mut self, phases: &mut Phases, name: &'static str) {
        let now = Instant::now();
        phases.push((name, now - self.0));
        self.0 = now;
    }
}

/// Per-phase medians across reps.
#[derive(Default)]
struct PhaseStats(Vec<(&'static str, Stat)>);

impl PhaseStats {
    fn add(&mut self, phases: &Phases) {
        for (name, d) in phases {
            match self.0.iter_mut().find(|(n, _)| n == name) {
                Some((_, s)) => s.push(*d),
                None => {
                    let mut s = Stat::default();
                    s.push(*d);
                    self.0.push((name, s));
                }
            }
        }
    }
    fn describe(&self) -> String {
        self.0
            .iter()
            .map(|(n, s)| format!("{n} {}", fmt_secs(s.median())))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Runs a command to completion (stdout and stderr captured) and times it.
fn run_timed(cmd: &mut Command, ok: &[i32]) -> BoxResult<(Duration, Vec<u8>)> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let t = Instant::now();
    let out = cmd.output()?;
    let d = t.elapsed();
    match out.status.code() {
        Some(c) if ok.contains(&c) => Ok((d, out.stdout)),
        _ => Err(format!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into()),
    }
}

fn run(cmd: &mut Command) -> BoxResult<Vec<u8>> {
    Ok(run_timed(cmd, &[0])?.1)
}

fn fmt_secs(s: f64) -> String {
    if s.is_nan() {
        "-".into()
    } else if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 0.1 {
        format!("{:.0} ms", s * 1e3)
    } else if s >= 0.01 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{:.2} ms", s * 1e3)
    }
}

fn fmt_count(n: f64) -> String {
    let s = format!("{:.0}", n);
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

// ---------------------------------------------------------------------------------------
// Results.

#[derive(Clone, Copy)]
enum Goal {
    /// Median under this many seconds.
    Under(f64),
    /// At least this many files per second (figure = files / median).
    Rate(f64),
}

struct Row {
    op: String,
    files: usize,
    avfs: Stat,
    native: Option<Stat>,
    goal: Option<Goal>,
    /// The goal is stated for this size (otherwise it is shown for information only).
    goal_applies: bool,
    /// Show files/s next to the time.
    rate: bool,
}

impl Row {
    fn met(&self) -> Option<bool> {
        let m = self.avfs.median();
        self.goal.map(|g| match g {
            Goal::Under(s) => m < s,
            Goal::Rate(r) => self.files as f64 / m > r,
        })
    }
}

fn cell(s: &Stat, files: usize, rate: bool) -> String {
    let mut c = format!(
        "{} ({}-{}, n={})",
        fmt_secs(s.median()),
        fmt_secs(s.min()),
        fmt_secs(s.max()),
        s.0.len()
    );
    if rate {
        c = format!("{} = {} files/s", c, fmt_count(files as f64 / s.median()));
    }
    c
}

fn print_table(rows: &[Row], extra: &[String]) {
    println!(
        "| operation | files | avfs median (min-max, n) | native median (min-max, n) | ratio avfs/native | goal | met |"
    );
    println!("|---|---:|---|---|---:|---|---|");
    for r in rows {
        let native = r
            .native
            .as_ref()
            .map(|n| cell(n, r.files, r.rate))
            .unwrap_or_else(|| "-".into());
        let ratio = match &r.native {
            Some(n) => {
                let x = r.avfs.median() / n.median();
                if x >= 10.0 {
                    format!("{x:.0}x")
                } else if x >= 0.1 {
                    format!("{x:.2}x")
                } else {
                    format!("{x:.4}x")
                }
            }
            None => "-".into(),
        };
        let goal = match r.goal {
            Some(Goal::Under(s)) => format!("< {}", fmt_secs(s)),
            Some(Goal::Rate(x)) => format!("> {} files/s", fmt_count(x)),
            None => "-".into(),
        };
        let met = match (r.met(), r.goal_applies) {
            (Some(true), true) => "yes".to_string(),
            (Some(false), true) => "**NO**".to_string(),
            (Some(m), false) => format!("({}; goal is at 100 000)", if m { "yes" } else { "no" }),
            (None, _) => "-".into(),
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.op,
            fmt_count(r.files as f64),
            cell(&r.avfs, r.files, r.rate),
            native,
            ratio,
            goal,
            met
        );
    }
    for e in extra {
        println!("{e}");
    }
}

// ---------------------------------------------------------------------------------------
// The environment.

struct Env {
    avfs: PathBuf,
    home: PathBuf,
}

impl Env {
    fn avfs<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(&self, args: I) -> Command {
        let mut c = Command::new(&self.avfs);
        c.env("AVFS_HOME", &self.home)
            .env_remove("AVFS_VAULT")
            .env("RUST_BACKTRACE", "0")
            .args(args);
        c
    }
}

fn git(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@localhost")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@localhost");
    c
}

fn cmd<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(prog: &str, args: I) -> Command {
    let mut c = Command::new(prog);
    c.args(args);
    c
}

/// Device, filesystem type and free space of the filesystem holding `dir`.
fn describe_fs(dir: &Path) -> String {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut best: Option<(usize, String)> = None;
    if let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") {
        for line in info.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            let Some(sep) = f.iter().position(|x| *x == "-") else {
                continue;
            };
            if f.len() < sep + 3 || f.len() < 5 {
                continue;
            }
            let mnt = f[4].replace("\\040", " ");
            if dir.starts_with(&mnt) && best.as_ref().is_none_or(|(l, _)| mnt.len() >= *l) {
                best = Some((
                    mnt.len(),
                    format!(
                        "{} ({}, dev {}, mounted at {mnt})",
                        f[sep + 2],
                        f[sep + 1],
                        f[2]
                    ),
                ));
            }
        }
    }
    let mut s = best
        .map(|b| b.1)
        .unwrap_or_else(|| "unknown filesystem".into());
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap_or_default();
    // SAFETY: statvfs writes into a zeroed struct of the right type; `c` is a valid C string.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut st) == 0 {
            let free = st.f_bavail as f64 * st.f_frsize as f64 / 1e9;
            let total = st.f_blocks as f64 * st.f_frsize as f64 / 1e9;
            s.push_str(&format!(", {free:.0} GB free of {total:.0} GB"));
        }
    }
    s
}

fn progress(n: usize, start: Instant, what: &str) {
    eprintln!(
        "[{:>7.1}s] [{} files] {what}",
        start.elapsed().as_secs_f64(),
        fmt_count(n as f64)
    );
}

fn dir_bytes(path: &Path) -> u64 {
    let mut total = 0;
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        total += std::fs::metadata(PathBuf::from(p))
            .map(|m| m.len())
            .unwrap_or(0);
    }
    total
}

// ---------------------------------------------------------------------------------------
// One size.

struct SizeResult {
    rows: Vec<Row>,
    notes: Vec<String>,
    fork_lib: f64,
    fork_proc: f64,
}

fn bench_size(
    args: &Args,
    avfs: &Path,
    base: &Path,
    n: usize,
    t0: Instant,
) -> BoxResult<SizeResult> {
    let work = base.join(format!("n{n}"));
    std::fs::create_dir_all(&work)?;
    let src = work.join("src");
    let env = Env {
        avfs: avfs.to_path_buf(),
        home: work.join("home"),
    };
    let reps = args.reps;
    let nreps = args.native_reps;
    let mut rng = Rng::new(0xA5F5 ^ n as u64);
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let big = n >= 100_000;

    // The tree.
    progress(n, t0, "generating the host tree");
    let plan = plan_tree(n, 42 + n as u64);
    let tg = Instant::now();
    write_tree(&src, &plan)?;
    notes.push(format!(
        "tree: {} files in {} directories, {:.1} MB, written in {}",
        fmt_count(plan.files.len() as f64),
        plan.dirs.len(),
        plan.bytes as f64 / 1e6,
        fmt_secs(tg.elapsed().as_secs_f64())
    ));

    // Import, interleaved with its native analogue `cp -a`.
    progress(n, t0, &format!("import and cp -a, {nreps} reps each"));
    let mut import = Stat::default();
    let mut cp = Stat::default();
    for k in 0..nreps.max(2) {
        let copy = work.join(format!("cp-{k}"));
        let (d, _) = run_timed(
            &mut cmd("cp", [OsStr::new("-a"), src.as_os_str(), copy.as_os_str()]),
            &[0],
        )?;
        if k < nreps {
            cp.push(d);
            let name = if k == 0 {
                "bench".to_string()
            } else {
                format!("imp{k}")
            };
            run(&mut env.avfs(["vault", "create", &name]))?;
            let (d, _) = run_timed(
                &mut env.avfs([
                    OsStr::new("--vault"),
                    OsStr::new(&name),
                    OsStr::new("import"),
                    src.as_os_str(),
                    OsStr::new("/"),
                ]),
                &[0],
            )?;
            import.push(d);
            if k > 0 {
                run(&mut env.avfs(["vault", "delete", &name, "-y"]))?;
            }
        }
        if k >= 2 {
            std::fs::remove_dir_all(&copy)?;
        }
    }
    rows.push(Row {
        op: "import (process)".into(),
        files: n,
        avfs: import,
        native: Some(cp.clone()),
        goal: Some(Goal::Rate(20_000.0)),
        goal_applies: big,
        rate: true,
    });
    let vault_path = Registry::open(&env.home)?
        .get("bench")?
        .ok_or("vault bench is not registered")?
        .path;
    notes.push(format!(
        "vault file after import: {:.1} MB (with -wal)",
        dir_bytes(&vault_path) as f64 / 1e6
    ));
    let git_dir = work.join("cp-0");
    let after_dir = work.join("cp-1");

    run(&mut env.avfs(["--vault", "bench", "checkpoint", "save", "base"]))?;
    // Library figures use one long-lived connection (as a mount or a host program would);
    // it is closed before whole-process figures, so that each `avfs` process is the only
    // connection, as when a user runs it (SQLite then checkpoints the WAL on close).
    let mut store = Store::open(&vault_path)?;

    // Fork.
    progress(n, t0, "fork");
    let mut fork_lib = Stat::default();
    let mut fork_phases = PhaseStats::default();
    for k in 0..reps {
        let name = format!("lf{k}");
        let (d, _, ph) = lib_timed(&mut store, |db, ph| {
            let mut m = Mark(Instant::now());
            let mut ws = Workspace::open(db, MAIN)?;
            let info = ws.fork(&name, None)?;
            m.lap(ph, "fork");
            audit::append(
                db,
                Some(MAIN),
                "cli",
                "vault.fork",
                &json!({"fork": name, "from": info.parent_checkpoint}),
            )?;
            m.lap(ph, "audit");
            Ok(())
        })?;
        fork_lib.push(d);
        fork_phases.add(&ph);
    }
    drop(store);
    let mut fork_proc = Stat::default();
    for k in 0..reps {
        let (d, _) = run_timed(
            &mut env.avfs(["vault", "fork", "bench", &format!("pf{k}")]),
            &[0],
        )?;
        fork_proc.push(d);
    }
    let (fl, fp) = (fork_lib.median(), fork_proc.median());
    rows.push(Row {
        op: "fork (library)".into(),
        files: n,
        avfs: fork_lib,
        native: Some(cp.clone()),
        goal: Some(Goal::Under(0.005)),
        goal_applies: big,
        rate: false,
    });
    rows.push(Row {
        op: "fork (process)".into(),
        files: n,
        avfs: fork_proc,
        native: Some(cp.clone()),
        goal: None,
        goal_applies: false,
        rate: false,
    });
    notes.push(format!("fork (library) phases: {}", fork_phases.describe()));

    // Git repository for the native checkpoint analogues (untimed setup, reported).
    progress(n, t0, "git init + add + commit of the native copy");
    run(git(&git_dir).args(["init", "-q"]))?;
    run(git(&git_dir).args(["config", "gc.auto", "0"]))?;
    run(git(&git_dir).args(["config", "commit.gpgsign", "false"]))?;
    let tgit = Instant::now();
    run(git(&git_dir).args(["add", "-A"]))?;
    run(git(&git_dir).args(["commit", "-q", "-m", "base"]))?;
    notes.push(format!(
        "git add -A + commit of the whole tree (untimed setup): {}",
        fmt_secs(tgit.elapsed().as_secs_f64())
    ));

    // Checkpoint save with 10 changed files, in a fork of the base.
    progress(n, t0, "checkpoint save (10 changed files)");
    run(&mut env.avfs(["vault", "fork", "bench", "save"]))?;
    let mut store = Store::open(&vault_path)?;
    let mut save_lib = Stat::default();
    let mut save_phases = PhaseStats::default();
    for k in 0..reps {
        let changes = pick_changes(&mut rng, &plan, 10, &format!("save lib {k}"));
        apply_vault(&vault_path, "save", &changes)?;
        let name = format!("ls{k}");
        let (d, _, ph) = lib_timed(&mut store, |db, ph| {
            let mut m = Mark(Instant::now());
            let mut ws = Workspace::open(db, "save")?;
            let s = ws.checkpoint(Some(&name), None, "cli")?;
            m.lap(ph, "checkpoint");
            audit::append(
                db,
                Some("save"),
                "cli",
                "checkpoint.save",
                &json!({"name": name, "message": null}),
            )?;
            m.lap(ph, "audit");
            Ok(s)
        })?;
        save_lib.push(d);
        save_phases.add(&ph);
    }
    drop(store);
    let mut save_proc = Stat::default();
    for k in 0..reps {
        let changes = pick_changes(&mut rng, &plan, 10, &format!("save proc {k}"));
        apply_vault(&vault_path, "save", &changes)?;
        let (d, _) = run_timed(
            &mut env.avfs(["--vault", "save", "checkpoint", "save", &format!("ps{k}")]),
            &[0],
        )?;
        save_proc.push(d);
    }
    let mut save_git = Stat::default();
    for k in 0..reps {
        let changes = pick_changes(&mut rng, &plan, 10, &format!("save git {k}"));
        apply_native(&git_dir, &changes)?;
        let (d1, _) = run_timed(git(&git_dir).args(["add", "-A"]), &[0])?;
        let (d2, _) = run_timed(
            git(&git_dir).args(["commit", "-q", "-m", &format!("save {k}")]),
            &[0],
        )?;
        save_git.push(d1 + d2);
    }
    rows.push(Row {
        op: "checkpoint save, 10 changed (library)".into(),
        files: n,
        avfs: save_lib,
        native: Some(save_git.clone()),
        goal: Some(Goal::Under(0.010)),
        goal_applies: big,
        rate: false,
    });
    rows.push(Row {
        op: "checkpoint save, 10 changed (process)".into(),
        files: n,
        avfs: save_proc,
        native: Some(save_git),
        goal: None,
        goal_applies: false,
        rate: false,
    });
    notes.push(format!(
        "checkpoint save (library) phases: {}",
        save_phases.describe()
    ));

    // Restore of the head checkpoint with 100 unsaved changes, in another fork.
    progress(n, t0, "checkpoint restore (100 changed files)");
    run(&mut env.avfs(["vault", "fork", "bench", "restore"]))?;
    run(&mut env.avfs(["--vault", "restore", "checkpoint", "save", "r0"]))?;
    let mut store = Store::open(&vault_path)?;
    let mut restore_lib = Stat::default();
    let mut restore_phases = PhaseStats::default();
    for k in 0..reps {
        let changes = pick_changes(&mut rng, &plan, 100, &format!("restore lib {k}"));
        apply_vault(&vault_path, "restore", &changes)?;
        let auto = format!("auto-lib-{k}");
        let (d, saved, ph) = lib_timed(&mut store, |db, ph| {
            let mut m = Mark(Instant::now());
            let mut ws = Workspace::open(db, "restore")?;
            let cp = ws.find_checkpoint("r0")?;
            let mut saved = false;
            if ws.is_modified()? {
                m.lap(ph, "is_modified (flush)");
                ws.checkpoint(
                    Some(&auto),
                    Some("unsaved changes before restoring r0"),
                    "auto",
                )?;
                saved = true;
                m.lap(ph, "auto checkpoint");
            }
            ws.restore(&cp)?;
            m.lap(ph, "restore");
            audit::append(
                db,
                Some("restore"),
                "cli",
                "checkpoint.restore",
                &json!({"name": "r0"}),
            )?;
            m.lap(ph, "audit");
            Ok(saved)
        })?;
        if !saved {
            return Err("restore: the 100 changes were not seen as unsaved changes".into());
        }
        restore_lib.push(d);
        restore_phases.add(&ph);
    }
    let mut restore_only = Stat::default();
    let mut restore_only_phases = PhaseStats::default();
    for k in 0..reps {
        let changes = pick_changes(&mut rng, &plan, 100, &format!("restore-only {k}"));
        apply_vault(&vault_path, "restore", &changes)?;
        let (d, _, ph) = lib_timed(&mut store, |db, ph| {
            let mut m = Mark(Instant::now());
            let mut ws = Workspace::open(db, "restore")?;
            let cp = ws.find_checkpoint("r0")?;
            ws.restore(&cp)?;
            m.lap(ph, "restore");
            Ok(())
        })?;
        restore_only.push(d);
        restore_only_phases.add(&ph);
    }
    drop(store);
    let mut restore_proc = Stat::default();
    for k in 0..reps {
        let changes = pick_changes(&mut rng, &plan, 100, &format!("restore proc {k}"));
        apply_vault(&vault_path, "restore", &changes)?;
        let (d, _) = run_timed(
            &mut env.avfs(["--vault", "restore", "checkpoint", "restore", "r0"]),
            &[0],
        )?;
        restore_proc.push(d);
    }
    let mut restore_git = Stat::default();
    for k in 0..reps {
        let changes = pick_changes(&mut rng, &plan, 100, &format!("restore git {k}"));
        apply_native(&git_dir, &changes)?;
        let (d, _) = run_timed(
            git(&git_dir).args(["stash", "push", "-q", "--include-untracked"]),
            &[0],
        )?;
        restore_git.push(d);
    }
    rows.push(Row {
        op: "checkpoint restore, 100 changed (library)".into(),
        files: n,
        avfs: restore_lib,
        native: Some(restore_git.clone()),
        goal: Some(Goal::Under(0.020)),
        goal_applies: big,
        rate: false,
    });
    rows.push(Row {
        op: "checkpoint restore, 100 changed (process)".into(),
        files: n,
        avfs: restore_proc,
        native: Some(restore_git.clone()),
        goal: None,
        goal_applies: false,
        rate: false,
    });
    rows.push(Row {
        op: "  restore only, no auto-save (library)".into(),
        files: n,
        avfs: restore_only,
        native: Some(restore_git),
        goal: None,
        goal_applies: false,
        rate: false,
    });
    notes.push(format!(
        "checkpoint restore (library, as the CLI does it) phases: {}",
        restore_phases.describe()
    ));
    notes.push(format!(
        "restore only (library) phases: {}",
        restore_only_phases.describe()
    ));

    // Diff of two checkpoints 100 changed files apart.
    progress(n, t0, "diff (100 changes)");
    run(&mut env.avfs(["vault", "fork", "bench", "diffws"]))?;
    run(&mut env.avfs(["--vault", "diffws", "checkpoint", "save", "d0"]))?;
    let changes = pick_changes(&mut rng, &plan, 100, "diff");
    apply_vault(&vault_path, "diffws", &changes)?;
    apply_native(&after_dir, &changes)?;
    run(&mut env.avfs(["--vault", "diffws", "checkpoint", "save", "d1"]))?;
    let mut store = Store::open(&vault_path)?;
    let mut diff_lib = Stat::default();
    let mut diff_phases = PhaseStats::default();
    for _ in 0..reps {
        let (d, summary, ph) = lib_timed(&mut store, |db, ph| {
            let mut m = Mark(Instant::now());
            let ws = Workspace::open(db, "diffws")?;
            let a = ws.find_checkpoint("d0")?;
            let b = ws.find_checkpoint("d1")?;
            m.lap(ph, "find checkpoints");
            let changes = diff_roots(db, &a.root, &b.root)?;
            m.lap(ph, "diff_roots");
            let s = ChangeSummary::of(&changes);
            Ok(s)
        })?;
        if summary.modified != 100
            || summary.added + summary.deleted + summary.type_changed + summary.mode_changed != 0
        {
            return Err(format!(
                "diff: expected 100 modified files, got {}",
                serde_json::to_string(&summary)?
            )
            .into());
        }
        diff_lib.push(d);
        diff_phases.add(&ph);
    }
    drop(store);
    let mut diff_proc = Stat::default();
    for _ in 0..reps {
        let (d, out) = run_timed(
            &mut env.avfs(["--vault", "diffws", "--json", "diff", "d0", "d1"]),
            &[0],
        )?;
        let v: serde_json::Value = serde_json::from_slice(&out)?;
        if v["summary"]["modified"] != 100 {
            return Err(format!(
                "avfs diff: expected 100 modified files, got {}",
                v["summary"]
            )
            .into());
        }
        diff_proc.push(d);
    }
    let mut diff_native = Stat::default();
    for _ in 0..nreps {
        let (d, out) = run_timed(
            &mut cmd(
                "diff",
                [OsStr::new("-rq"), src.as_os_str(), after_dir.as_os_str()],
            ),
            &[1],
        )?;
        let lines = out.split(|b| *b == b'\n').filter(|l| !l.is_empty()).count();
        if lines != 100 {
            return Err(format!("diff -rq: expected 100 differing files, got {lines}").into());
        }
        diff_native.push(d);
    }
    rows.push(Row {
        op: "diff of 100 changes (library)".into(),
        files: n,
        avfs: diff_lib,
        native: Some(diff_native.clone()),
        goal: Some(Goal::Under(0.010)),
        goal_applies: big,
        rate: false,
    });
    rows.push(Row {
        op: "diff of 100 changes (process, --json)".into(),
        files: n,
        avfs: diff_proc,
        native: Some(diff_native),
        goal: None,
        goal_applies: false,
        rate: false,
    });
    notes.push(format!("diff (library) phases: {}", diff_phases.describe()));

    // `avfs cat` of a 1 KiB file vs /bin/cat, interleaved.
    progress(n, t0, "cat of a 1 KiB file");
    let target = &plan.files[plan.cat_target];
    let expected = content(target.seed, target.size);
    let host_file = host_path(&src, &target.rel);
    let mut cat_avfs = Stat::default();
    let mut cat_native = Stat::default();
    for _ in 0..reps * 3 {
        let (d, out) = run_timed(
            &mut env.avfs(["--vault", "bench", "cat", &target.rel]),
            &[0],
        )?;
        if out != expected {
            return Err(format!(
                "avfs cat {}: unexpected content ({} bytes)",
                target.rel,
                out.len()
            )
            .into());
        }
        cat_avfs.push(d);
        let (d, out) = run_timed(&mut cmd("cat", [&host_file]), &[0])?;
        if out != expected {
            return Err("cat: unexpected content".into());
        }
        cat_native.push(d);
    }
    rows.push(Row {
        op: "cat 1 KiB file (process)".into(),
        files: n,
        avfs: cat_avfs,
        native: Some(cat_native),
        goal: Some(Goal::Under(0.005)),
        goal_applies: true,
        rate: false,
    });

    notes.push(format!(
        "vault file at the end: {:.1} MB (with -wal)",
        dir_bytes(&vault_path) as f64 / 1e6
    ));
    if !args.keep {
        progress(n, t0, "cleaning up");
        std::fs::remove_dir_all(&work)?;
    }
    Ok(SizeResult {
        rows,
        notes,
        fork_lib: fl,
        fork_proc: fp,
    })
}

fn main() {
    if let Err(e) = real_main() {
        eprintln!("avfs-bench: {e}");
        std::process::exit(1);
    }
}

fn real_main() -> BoxResult<()> {
    let args = parse_args()?;
    let t0 = Instant::now();
    let exe = std::env::current_exe()?;
    let avfs = exe
        .parent()
        .ok_or("no directory for the current executable")?
        .join("avfs");
    if !avfs.is_file() {
        return Err(format!(
            "{} not found: build it first (cargo build --release)",
            avfs.display()
        )
        .into());
    }
    let parent = match &args.dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir(),
    };
    std::fs::create_dir_all(&parent)?;
    let base = parent.join(format!("avfs-bench-{}", std::process::id()));
    std::fs::create_dir(&base)?;
    let base = std::fs::canonicalize(&base)?;

    let git_version = Command::new("git")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|_| "git: not found".into());
    let header = vec![
        format!(
            "avfs-bench: sizes {:?}, {} reps ({} for cat; {} for import, cp -a, diff -rq)",
            args.sizes,
            args.reps,
            args.reps * 3,
            args.native_reps
        ),
        format!("binary: {}", avfs.display()),
        format!("work dir: {} on {}", base.display(), describe_fs(&base)),
        format!(
            "cpus: {}, {}",
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(0),
            git_version
        ),
    ];
    for h in &header {
        eprintln!("{h}");
    }

    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let mut forks: Vec<(usize, f64, f64)> = Vec::new();
    let result = (|| -> BoxResult<()> {
        for &n in &args.sizes {
            let r = bench_size(&args, &avfs, &base, n, t0)?;
            rows.extend(r.rows);
            notes.push(format!("{} files:", fmt_count(n as f64)));
            notes.extend(r.notes.into_iter().map(|s| format!("  {s}")));
            forks.push((n, r.fork_lib, r.fork_proc));
        }
        Ok(())
    })();
    if !args.keep {
        let _ = std::fs::remove_dir_all(&base);
    }
    result?;

    let mut extra = Vec::new();
    if forks.len() >= 2 {
        let lo = forks.iter().min_by_key(|f| f.0).unwrap();
        let hi = forks.iter().max_by_key(|f| f.0).unwrap();
        let ratio = hi.1 / lo.1;
        let applies = lo.0 == 1_000 && hi.0 == 100_000;
        let met = match (ratio < 2.0, applies) {
            (true, true) => "yes".to_string(),
            (false, true) => "**NO**".to_string(),
            (m, false) => format!(
                "({}; goal is 100 000 vs 1 000)",
                if m { "yes" } else { "no" }
            ),
        };
        extra.push(String::new());
        extra.push(format!(
            "fork({}) / fork({}): library {ratio:.2} (goal < 2: {met}); whole process {:.2}",
            fmt_count(hi.0 as f64),
            fmt_count(lo.0 as f64),
            hi.2 / lo.2
        ));
    }
    println!();
    for h in &header {
        println!("{h}");
    }
    println!("total run time: {}", fmt_secs(t0.elapsed().as_secs_f64()));
    println!();
    print_table(&rows, &extra);
    println!();
    println!(
        "native analogues (same disk, same tree): import and fork: `cp -a TREE COPY`; checkpoint save: `git add -A` + `git commit` of the 10 changed files in a git work tree of the same files; restore: `git stash push --include-untracked` (keeps the unsaved changes and returns to the last commit, as `avfs checkpoint restore` keeps them in an automatic checkpoint); diff: `diff -rq BEFORE AFTER` of two trees; cat: `/bin/cat FILE`."
    );
    println!(
        "library figures: one write transaction through agentvfs (what the CLI command does, audit row and commit included), vault already open; process figures: the whole `avfs` process (startup, registry, open, transaction, output)."
    );
    println!();
    for n in &notes {
        println!("{n}");
    }
    Ok(())
}
