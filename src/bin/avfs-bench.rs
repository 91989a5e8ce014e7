//! `avfs-bench`: measures avfs side by side with a native directory on the same disk, and
//! prints markdown tables of medians, ratios and goals. Three groups of workloads:
//!
//! - `vault`: vault operations (import, fork, checkpoint save/restore, diff, cat) on
//!   workspaces of several sizes, against `cp -a`, git, `diff -rq`, `cat`;
//! - `mount`: real tools in a FUSE mount of a fresh vault and in a plain directory (tar,
//!   git, find/stat, ls -lR, rm -rf, sequential I/O, cargo build);
//! - `exec`: `avfs exec -- true` end to end with and without a live mount and with and
//!   without `--sandbox`, and the change report of 100 changes in a 100 000-file workspace.
//!
//! ```text
//! cargo run --release --bin avfs-bench -- [--groups vault,mount,exec] [--sizes ...] [--dir DIR] ...
//! ```
//!
//! See `--help` and docs/benchmarks.md. The machines this runs on are shared and noisy, so
//! only figures from one run are compared, avfs and native runs are interleaved, and
//! medians are quoted.

use std::collections::{BTreeMap, HashSet};
use std::ffi::OsStr;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::IntoRawFd as _;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentvfs::diff::{ChangeSummary, add_patches, diff_roots};
use agentvfs::registry::Registry;
use agentvfs::store::{Store, audit, objects};
use agentvfs::workspace::path::components;
use agentvfs::workspace::{MAIN, Workspace};
use serde_json::json;

type BoxResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const USAGE: &str =
    "usage: avfs-bench [--groups vault,mount,exec] [--dir DIR] [--keep] [--avfs PATH]
                  [--sizes 1000,10000,100000] [--reps N] [--native-reps N]
                  [--mount-workloads tree,io,cargo] [--mount-reps N] [--reps-cargo N]
                  [--tar-files N] [--io-mib N] [--cargo-release] [--cargo-src DIR]
                  [--exec-files N]

  --groups           which groups to run (default all): vault (vault operations), mount (real
                     tools in a FUSE mount vs a native directory), exec (avfs exec overhead,
                     with and without --sandbox, and the change report)
  --dir              where to put the trees, vaults and mounts (default: the system temp dir)
  --keep             keep the generated trees and vaults
  --avfs             the avfs binary to use (default: the one next to avfs-bench)

 vault group:
  --sizes            workspace sizes in files (default 1000,10000,100000)
  --reps             repetitions of each cheap measurement (default 7; `avfs cat`, `avfs exec`
                     and the warm mount workloads run 3x, 3x and 1x as many)
  --native-reps      repetitions of the expensive ones: import, cp -a, diff -rq (default 3)

 mount group:
  --mount-workloads  which to run (default all): rtt (one kernel round trip), tree (tar x, git
                     init+add+commit, git status, find+stat, ls -lR, rm -rf), io (sequential
                     write+read), cargo (cargo build)
  --mount-reps       repetitions of tar x, git commit, rm -rf and the sequential I/O (default 3)
  --reps-cargo       repetitions of cargo build (default 1; a few minutes each)
  --tar-files        files in the tarball (default 20000): the first half of the files under
                     ~/.cargo/registry/src, stored twice (a/ and b/)
  --io-mib           size of the sequential write+read in MiB (default 1024)
  --cargo-release    cargo build --release (default: a debug build)
  --cargo-src        the crate to build (default: this crate's committed HEAD: src/,
                     Cargo.toml and Cargo.lock from `git archive HEAD`)

 exec group:
  --exec-files       files in the workspace (default 100000; reuses the vault group's one
                     of that size when it ran)";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Group {
    Vault,
    Mount,
    Exec,
}

struct Args {
    groups: Vec<Group>,
    sizes: Vec<usize>,
    reps: usize,
    native_reps: usize,
    dir: Option<PathBuf>,
    keep: bool,
    avfs: Option<PathBuf>,
    mount_workloads: Vec<String>,
    mount_reps: usize,
    cargo_reps: usize,
    tar_files: usize,
    io_mib: usize,
    cargo_release: bool,
    cargo_src: Option<PathBuf>,
    exec_files: usize,
}

fn list(v: &str) -> Vec<String> {
    v.split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

fn parse_args() -> BoxResult<Args> {
    let mut a = Args {
        groups: vec![Group::Vault, Group::Mount, Group::Exec],
        sizes: vec![1_000, 10_000, 100_000],
        reps: 7,
        native_reps: 3,
        dir: None,
        keep: false,
        avfs: None,
        mount_workloads: vec!["rtt".into(), "tree".into(), "io".into(), "cargo".into()],
        mount_reps: 3,
        cargo_reps: 1,
        tar_files: 20_000,
        io_mib: 1024,
        cargo_release: false,
        cargo_src: None,
        exec_files: 100_000,
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
        let count = |v: String| -> BoxResult<usize> { Ok(v.trim().replace('_', "").parse()?) };
        match key.as_str() {
            "--groups" => {
                let mut g = Vec::new();
                for name in list(&value("--groups")?) {
                    let x = match name.as_str() {
                        "vault" => Group::Vault,
                        "mount" => Group::Mount,
                        "exec" => Group::Exec,
                        "all" => {
                            g.extend([Group::Vault, Group::Mount, Group::Exec]);
                            continue;
                        }
                        other => return Err(format!("--groups: unknown group {other:?}").into()),
                    };
                    g.push(x);
                }
                a.groups = Vec::new();
                for x in g {
                    if !a.groups.contains(&x) {
                        a.groups.push(x);
                    }
                }
                if a.groups.is_empty() {
                    return Err("--groups: name at least one group".into());
                }
            }
            "--sizes" => {
                a.sizes = list(&value("--sizes")?)
                    .into_iter()
                    .map(count)
                    .collect::<Result<_, _>>()?;
                if a.sizes.is_empty() || a.sizes.iter().any(|&n| n < 200) {
                    return Err("--sizes: each size must be at least 200 files".into());
                }
            }
            "--reps" => a.reps = count(value("--reps")?)?.max(1),
            "--native-reps" => a.native_reps = count(value("--native-reps")?)?.max(1),
            "--dir" => a.dir = Some(PathBuf::from(value("--dir")?)),
            "--keep" => a.keep = true,
            "--avfs" => a.avfs = Some(PathBuf::from(value("--avfs")?)),
            "--mount-workloads" => {
                a.mount_workloads = list(&value("--mount-workloads")?);
                if let Some(w) = a
                    .mount_workloads
                    .iter()
                    .find(|w| !["tree", "io", "cargo", "rtt"].contains(&w.as_str()))
                {
                    return Err(format!("--mount-workloads: unknown workload {w:?}").into());
                }
            }
            "--mount-reps" => a.mount_reps = count(value("--mount-reps")?)?.max(1),
            "--reps-cargo" => a.cargo_reps = count(value("--reps-cargo")?)?.max(1),
            "--tar-files" => a.tar_files = count(value("--tar-files")?)?.max(2),
            "--io-mib" => a.io_mib = count(value("--io-mib")?)?.max(1),
            "--cargo-release" => a.cargo_release = true,
            "--cargo-src" => a.cargo_src = Some(PathBuf::from(value("--cargo-src")?)),
            "--exec-files" => {
                a.exec_files = count(value("--exec-files")?)?;
                if a.exec_files < 200 {
                    return Err("--exec-files: at least 200 files".into());
                }
            }
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

/// `k` distinct files (never the `cat` target), each with one line in the middle
/// replaced: the kind of change an agent's edit makes.
fn pick_edits(rng: &mut Rng, plan: &TreePlan, k: usize, tag: &str) -> Vec<(String, Vec<u8>)> {
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(k);
    while out.len() < k {
        let i = rng.below(plan.files.len() as u64) as usize;
        if i == plan.cat_target || !seen.insert(i) {
            continue;
        }
        let f = &plan.files[i];
        let old = content(f.seed, f.size);
        let mid = old.len() / 2;
        let start = old[..mid]
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |p| p + 1);
        let end = old[mid..]
            .iter()
            .position(|b| *b == b'\n')
            .map_or(old.len(), |p| mid + p);
        let mut data = old[..start].to_vec();
        data.extend_from_slice(format!("    // edited: {tag} {}", rng.next()).as_bytes());
        data.extend_from_slice(&old[end..]);
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

/// One line of a sysfs file, or "-" where there is none.
fn sysfs(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|_| "-".into())
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
    } else if s >= 0.001 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{:.1} µs", s * 1e6)
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
    /// Median at most this many times the native median.
    RatioAtMost(f64),
    /// Throughput at least this fraction of the native throughput (native median / median).
    ThroughputAtLeast(f64),
}

#[derive(Default)]
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
    /// Shown in the size column instead of `files`.
    label: Option<String>,
    /// Bytes moved per run: show MB/s next to the time.
    bytes: Option<u64>,
}

impl Row {
    fn ratio(&self) -> Option<f64> {
        self.native
            .as_ref()
            .map(|n| self.avfs.median() / n.median())
    }
    fn met(&self) -> Option<bool> {
        let m = self.avfs.median();
        match self.goal? {
            Goal::Under(s) => Some(m < s),
            Goal::Rate(r) => Some(self.files as f64 / m > r),
            Goal::RatioAtMost(x) => self.ratio().map(|r| r <= x),
            Goal::ThroughputAtLeast(x) => self.ratio().map(|r| 1.0 / r >= x),
        }
    }
}

fn cell(s: &Stat, files: usize, rate: bool, bytes: Option<u64>) -> String {
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
    if let Some(b) = bytes {
        c = format!("{} = {:.0} MB/s", c, b as f64 / 1e6 / s.median());
    }
    c
}

fn fmt_ratio(x: f64) -> String {
    if x >= 10.0 {
        format!("{x:.0}x")
    } else if x >= 0.1 {
        format!("{x:.2}x")
    } else {
        format!("{x:.4}x")
    }
}

/// `cols`: the operation column, the size column, and what the measured side is called.
fn print_table(cols: [&str; 3], rows: &[Row], extra: &[String]) {
    let [op, size, who] = cols;
    println!(
        "| {op} | {size} | {who} median (min-max, n) | native median (min-max, n) | ratio {who}/native | goal | met |"
    );
    println!("|---|---:|---|---|---:|---|---|");
    for r in rows {
        let native = r
            .native
            .as_ref()
            .map(|n| cell(n, r.files, r.rate, r.bytes))
            .unwrap_or_else(|| "-".into());
        let ratio = match r.ratio() {
            Some(x) if r.bytes.is_some() => {
                format!("{} (throughput {:.2})", fmt_ratio(x), 1.0 / x)
            }
            Some(x) => fmt_ratio(x),
            None => "-".into(),
        };
        let goal = match r.goal {
            Some(Goal::Under(s)) => format!("< {}", fmt_secs(s)),
            Some(Goal::Rate(x)) => format!("> {} files/s", fmt_count(x)),
            Some(Goal::RatioAtMost(x)) => format!("ratio <= {x:.1}"),
            Some(Goal::ThroughputAtLeast(x)) => format!("throughput >= {x:.1} of native"),
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
            r.label.clone().unwrap_or_else(|| fmt_count(r.files as f64)),
            cell(&r.avfs, r.files, r.rate, r.bytes),
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
    git_env(Command::new("git"), dir)
}

/// `sh -c SCRIPT` in `dir`, with the same git environment as `git`.
fn sh(dir: &Path, script: &str) -> Command {
    let mut c = git_env(Command::new("sh"), dir);
    c.arg("-c").arg(script);
    c
}

/// A git environment independent of the user's configuration.
fn git_env(mut c: Command, dir: &Path) -> Command {
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
    progress_tag(start, &format!("{} files", fmt_count(n as f64)), what);
}

fn progress_tag(start: Instant, tag: &str, what: &str) {
    eprintln!("[{:>7.1}s] [{tag}] {what}", start.elapsed().as_secs_f64());
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
    keep_for_exec: bool,
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
        ..Default::default()
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
        ..Default::default()
    });
    rows.push(Row {
        op: "fork (process)".into(),
        files: n,
        avfs: fork_proc,
        native: Some(cp.clone()),
        goal: None,
        goal_applies: false,
        rate: false,
        ..Default::default()
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
        ..Default::default()
    });
    rows.push(Row {
        op: "checkpoint save, 10 changed (process)".into(),
        files: n,
        avfs: save_proc,
        native: Some(save_git),
        goal: None,
        goal_applies: false,
        rate: false,
        ..Default::default()
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
        ..Default::default()
    });
    rows.push(Row {
        op: "checkpoint restore, 100 changed (process)".into(),
        files: n,
        avfs: restore_proc,
        native: Some(restore_git.clone()),
        goal: None,
        goal_applies: false,
        rate: false,
        ..Default::default()
    });
    rows.push(Row {
        op: "  restore only, no auto-save (library)".into(),
        files: n,
        avfs: restore_only,
        native: Some(restore_git),
        goal: None,
        goal_applies: false,
        rate: false,
        ..Default::default()
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
        ..Default::default()
    });
    rows.push(Row {
        op: "diff of 100 changes (process, --json)".into(),
        files: n,
        avfs: diff_proc,
        native: Some(diff_native),
        goal: None,
        goal_applies: false,
        rate: false,
        ..Default::default()
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
        ..Default::default()
    });

    notes.push(format!(
        "vault file at the end: {:.1} MB (with -wal)",
        dir_bytes(&vault_path) as f64 / 1e6
    ));
    if keep_for_exec {
        // The exec group reuses this vault; it removes the directory when done.
        progress(n, t0, "cleaning up (keeping the vault for the exec group)");
        for entry in std::fs::read_dir(&work)? {
            let p = entry?.path();
            if p.file_name() != Some(OsStr::new("home")) {
                std::fs::remove_dir_all(&p)?;
            }
        }
    } else if !args.keep {
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

// ---------------------------------------------------------------------------------------
// Shared by the mount and exec groups.

struct GroupResult {
    rows: Vec<Row>,
    notes: Vec<String>,
    /// Lines printed right under the table.
    extra: Vec<String>,
}

/// Unmounts `mnt` when dropped (also on errors); `finish` unmounts and reports failures.
struct Unmount<'a> {
    env: &'a Env,
    mnt: PathBuf,
    done: bool,
}

impl Unmount<'_> {
    fn finish(mut self) -> BoxResult<()> {
        self.done = true;
        run(&mut self.env.avfs([OsStr::new("unmount"), self.mnt.as_os_str()]))?;
        Ok(())
    }
}

impl Drop for Unmount<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = run(&mut self.env.avfs([OsStr::new("unmount"), self.mnt.as_os_str()]));
        }
    }
}

/// `avfs --json mount NAME DIR`: returns once the mount is ready, with its record.
fn mount(env: &Env, name: &str, mnt: &Path) -> BoxResult<serde_json::Value> {
    let out = run(&mut env.avfs([
        OsStr::new("--json"),
        OsStr::new("mount"),
        OsStr::new(name),
        mnt.as_os_str(),
    ]))?;
    let v: serde_json::Value = serde_json::from_slice(&out)?;
    Ok(v["mount"].clone())
}

// ---------------------------------------------------------------------------------------
// Mount workloads: real tools in a FUSE mount and in a native directory on the same disk.

/// Where a workload runs: the FUSE mount or the plain directory next to it.
struct Side {
    mount: bool,
    root: PathBuf,
}

/// Per-operation request counters of the mount, read through its control socket, with
/// the server's busy time (time spent serving requests under its lock) as `busy_ns`.
fn fuse_counters(socket: &Path) -> Option<BTreeMap<String, u64>> {
    let mut s = UnixStream::connect(socket).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    writeln!(s, "{}", json!({"op": "counters"})).ok()?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).ok()?;
    let v: serde_json::Value = serde_json::from_str(&line).ok()?;
    let mut m: BTreeMap<String, u64> = v["counters"]
        .as_object()?
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), v.as_u64()?)))
        .collect();
    if let Some(busy) = v["busy_ns"].as_object() {
        m.insert(
            BUSY.into(),
            busy.values().filter_map(|v| v.as_u64()).sum::<u64>(),
        );
    }
    Some(m)
}

/// The pseudo-operation under which `fuse_counters` reports the server's busy time.
const BUSY: &str = "busy_ns";

/// FUSE requests caused by each workload's timed runs in the mount.
struct Counts {
    socket: Option<PathBuf>,
    /// (workload, runs, requests by operation summed over the runs)
    per: Vec<(String, u64, BTreeMap<String, u64>)>,
}

impl Counts {
    /// Runs `f` (which times itself); in the mount, adds up the requests it caused.
    fn time(
        &mut self,
        name: &str,
        side: &Side,
        f: impl FnOnce() -> BoxResult<Duration>,
    ) -> BoxResult<Duration> {
        let sock = match (&self.socket, side.mount) {
            (Some(s), true) => s.clone(),
            _ => return f(),
        };
        let before = fuse_counters(&sock);
        let d = f()?;
        if let (Some(b), Some(a)) = (before, fuse_counters(&sock)) {
            let i = match self.per.iter().position(|(n, _, _)| n == name) {
                Some(i) => i,
                None => {
                    self.per.push((name.to_string(), 0, BTreeMap::new()));
                    self.per.len() - 1
                }
            };
            let e = &mut self.per[i];
            e.1 += 1;
            for (op, n) in a {
                let delta = n.saturating_sub(b.get(&op).copied().unwrap_or(0));
                if delta > 0 {
                    *e.2.entry(op).or_default() += delta;
                }
            }
        }
        Ok(d)
    }

    fn describe(&self) -> Vec<String> {
        self.per
            .iter()
            .filter(|(_, _, m)| !m.is_empty())
            .map(|(name, runs, m)| {
                let runs = (*runs).max(1);
                let busy = m.get(BUSY).copied().unwrap_or(0);
                let total: u64 = m.iter().filter(|(k, _)| *k != BUSY).map(|(_, n)| n).sum();
                let mut ops: Vec<_> = m.iter().filter(|(k, _)| *k != BUSY).collect();
                ops.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
                format!(
                    "{name}: {} requests per run, server busy {:.0} ms per run ({})",
                    fmt_count((total / runs) as f64),
                    busy as f64 / 1e6 / runs as f64,
                    ops.iter()
                        .map(|(op, n)| format!("{op} {}", fmt_count((**n / runs) as f64)))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
            .collect()
    }
}

/// Runs `timed` `reps` times on each side, alternating native and mount (native first),
/// with an untimed `setup` before each run. Returns (mount, native).
fn interleave(
    sides: &[Side; 2],
    counts: &mut Counts,
    name: &str,
    reps: usize,
    mut setup: impl FnMut(&Side, usize) -> BoxResult<()>,
    mut timed: impl FnMut(&Side, usize) -> BoxResult<Duration>,
) -> BoxResult<(Stat, Stat)> {
    let (mut m, mut n) = (Stat::default(), Stat::default());
    for k in 0..reps {
        for side in sides {
            setup(side, k)?;
            let d = counts.time(name, side, || timed(side, k))?;
            if side.mount {
                m.push(d);
            } else {
                n.push(d);
            }
        }
    }
    Ok((m, n))
}

/// Regular files under `dir`, as paths relative to `base`, in a stable order.
fn walk_files(base: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries = std::fs::read_dir(dir)?.collect::<Result<Vec<_>, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let ft = e.file_type()?;
        let p = e.path();
        if ft.is_dir() {
            walk_files(base, &p, out)?;
        } else if ft.is_file() {
            out.push(p.strip_prefix(base).unwrap_or(&p).to_path_buf());
        }
    }
    Ok(())
}

/// Regular files under `dir`, recursively.
fn count_files(dir: &Path) -> std::io::Result<usize> {
    let mut n = 0;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let ft = e.file_type()?;
        if ft.is_dir() {
            n += count_files(&e.path())?;
        } else if ft.is_file() {
            n += 1;
        }
    }
    Ok(n)
}

/// Reads a file to the end (to have it in the page cache), returns its size.
fn read_through(path: &Path) -> BoxResult<u64> {
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0;
    loop {
        match f.read(&mut buf)? {
            0 => return Ok(total),
            k => total += k as u64,
        }
    }
}

struct Tarball {
    path: PathBuf,
    files: usize,
    bytes: u64,
    from: PathBuf,
}

/// A tarball of real sources: the first `want / 2` files under ~/.cargo/registry/src, in
/// path order, stored twice under a/ and b/.
fn build_tarball(work: &Path, want: usize) -> BoxResult<Tarball> {
    let cargo_home = match std::env::var_os("CARGO_HOME") {
        Some(h) => PathBuf::from(h),
        None => PathBuf::from(std::env::var_os("HOME").ok_or("HOME is not set")?).join(".cargo"),
    };
    let reg = cargo_home.join("registry").join("src");
    let mut files = Vec::new();
    walk_files(&reg, &reg, &mut files).map_err(|e| format!("listing {}: {e}", reg.display()))?;
    if files.is_empty() {
        return Err(format!("no sources under {} to make a tarball of", reg.display()).into());
    }
    files.truncate(want.div_ceil(2));
    let list = work.join("tarball-files.list");
    let mut buf = Vec::new();
    for f in &files {
        buf.extend_from_slice(f.as_os_str().as_bytes());
        buf.push(0);
    }
    std::fs::write(&list, buf)?;
    let path = work.join("registry-src.tar");
    for (i, prefix) in ["a", "b"].iter().enumerate() {
        let mut c = Command::new("tar");
        c.arg(if i == 0 { "-cf" } else { "-rf" })
            .arg(&path)
            .args(["--null", "--no-recursion", "--transform"])
            .arg(format!("s,^,{prefix}/,S"))
            .arg("-C")
            .arg(&reg)
            .arg("-T")
            .arg(&list);
        run(&mut c)?;
    }
    std::fs::remove_file(&list)?;
    Ok(Tarball {
        bytes: std::fs::metadata(&path)?.len(),
        path,
        files: files.len() * 2,
        from: reg,
    })
}

/// A tarball of the crate `cargo build` builds, and what it is. Default: this crate's
/// committed HEAD (`git archive`), so that concurrent edits of the work tree cannot break it.
fn crate_tarball(args: &Args, work: &Path) -> BoxResult<(PathBuf, String)> {
    let path = work.join("crate.tar");
    let parts = ["src", "Cargo.toml", "Cargo.lock"];
    if let Some(dir) = &args.cargo_src {
        let mut c = Command::new("tar");
        c.arg("-cf").arg(&path).arg("-C").arg(dir).args(parts);
        run(&mut c)?;
        return Ok((
            path,
            format!("{} (src/, Cargo.toml, Cargo.lock)", dir.display()),
        ));
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let head = run(git(repo).args(["rev-parse", "--short", "HEAD"]))?;
    let mut c = git(repo);
    c.args(["archive", "--format=tar", "-o"])
        .arg(&path)
        .arg("HEAD")
        .args(parts);
    run(&mut c)?;
    Ok((
        path,
        format!(
            "agentvfs at HEAD {} (src/, Cargo.toml, Cargo.lock from git archive)",
            String::from_utf8_lossy(&head).trim()
        ),
    ))
}

const MIB: usize = 1 << 20;
const POOL_MIB: usize = 64;

/// 64 MiB of pseudo-random bytes: incompressible; every 4 KiB page gets the block number
/// stamped on when written, so no 64 KiB chunk repeats (avfs stores content by hash).
fn io_pool() -> Vec<u8> {
    let mut rng = Rng::new(0x10_B10C);
    let mut v = Vec::with_capacity(POOL_MIB * MIB);
    while v.len() < POOL_MIB * MIB {
        v.extend_from_slice(&rng.next().to_le_bytes());
    }
    v
}

fn stamp(block: &mut [u8], i: usize) {
    for page in block.chunks_mut(4096) {
        page[..8].copy_from_slice(&(i as u64).to_le_bytes());
    }
}

/// Creates `path` and writes `mib` MiB with 1 MiB writes; timed until close() returned.
fn write_seq(path: &Path, pool: &mut [u8], mib: usize) -> BoxResult<Duration> {
    let t = Instant::now();
    let mut f = std::fs::File::create(path)?;
    for i in 0..mib {
        let off = (i % POOL_MIB) * MIB;
        let block = &mut pool[off..off + MIB];
        stamp(block, i);
        f.write_all(block)?;
    }
    let fd = f.into_raw_fd();
    // SAFETY: `fd` is an open descriptor we own (just taken out of the File).
    if unsafe { libc::close(fd) } != 0 {
        return Err(format!(
            "close {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        )
        .into());
    }
    Ok(t.elapsed())
}

/// Opens `path` afresh and reads it to the end with 1 MiB reads, checking each block.
fn read_seq(path: &Path, mib: usize, buf: &mut [u8]) -> BoxResult<Duration> {
    let t = Instant::now();
    let mut f = std::fs::File::open(path)?;
    for i in 0..mib {
        f.read_exact(&mut buf[..MIB])?;
        if buf[..8] != (i as u64).to_le_bytes() {
            return Err(format!("{}: block {i} reads back wrong", path.display()).into());
        }
    }
    if f.read(buf)? != 0 {
        return Err(format!("{}: longer than what was written", path.display()).into());
    }
    drop(f);
    Ok(t.elapsed())
}

fn bench_mount(args: &Args, avfs: &Path, base: &Path, t0: Instant) -> BoxResult<GroupResult> {
    let tag = "mount";
    let work = base.join("mount");
    let env = Env {
        avfs: avfs.to_path_buf(),
        home: work.join("home"),
    };
    let native = work.join("native");
    let mnt = work.join("mnt");
    std::fs::create_dir_all(&native)?;
    std::fs::create_dir_all(&mnt)?;
    let want = |w: &str| args.mount_workloads.iter().any(|x| x == w);
    let mut rows = Vec::new();
    let mut notes = Vec::new();

    // Inputs (untimed).
    let tarball = if want("tree") {
        progress_tag(t0, tag, "building the source tarball");
        let tb = build_tarball(&work, args.tar_files)?;
        notes.push(format!(
            "tarball: {} files ({} MB) from {}, stored twice (a/ and b/)",
            fmt_count(tb.files as f64),
            tb.bytes / 1_000_000,
            tb.from.display()
        ));
        Some(tb)
    } else {
        None
    };
    let krate = if want("cargo") {
        let (path, what) = crate_tarball(args, &work)?;
        notes.push(format!("cargo build: {what}"));
        Some(path)
    } else {
        None
    };

    // A fresh vault, mounted; the native side is a plain directory on the same disk.
    run(&mut env.avfs(["vault", "create", "mbench"]))?;
    let rec = mount(&env, "mbench", &mnt)?;
    let guard = Unmount {
        env: &env,
        mnt: mnt.clone(),
        done: false,
    };
    let pid = rec["pid"].as_u64().unwrap_or(0);
    progress_tag(
        t0,
        tag,
        &format!(
            "mounted a fresh vault at {} (server pid {pid})",
            mnt.display()
        ),
    );
    let vault_path = PathBuf::from(rec["vault_path"].as_str().unwrap_or_default());
    let mut counts = Counts {
        socket: rec["socket"].as_str().map(PathBuf::from),
        per: Vec::new(),
    };
    let sides = [
        Side {
            mount: false,
            root: native.clone(),
        },
        Side {
            mount: true,
            root: mnt.clone(),
        },
    ];
    let reps = args.mount_reps;
    let warm_reps = args.reps;

    if let Some(tb) = &tarball {
        let tree = |s: &Side, k: usize| s.root.join(format!("t{k}"));
        read_through(&tb.path)?;

        progress_tag(t0, tag, &format!("tar x, {reps} reps each"));
        let (m, n) = interleave(
            &sides,
            &mut counts,
            "tar x",
            reps,
            |s, k| Ok(std::fs::create_dir(tree(s, k))?),
            |s, k| {
                let mut c = cmd("tar", [OsStr::new("-xf"), tb.path.as_os_str()]);
                c.arg("-C").arg(tree(s, k));
                Ok(run_timed(&mut c, &[0])?.0)
            },
        )?;
        for s in &sides {
            let found = count_files(&tree(s, 0))?;
            if found != tb.files {
                return Err(format!(
                    "tar x into {}: {found} files, expected {}",
                    tree(s, 0).display(),
                    tb.files
                )
                .into());
            }
        }
        rows.push(Row {
            op: "tar x of the source tarball (empty target)".into(),
            files: tb.files,
            avfs: m,
            native: Some(n),
            goal: Some(Goal::RatioAtMost(2.0)),
            goal_applies: true,
            ..Default::default()
        });

        progress_tag(
            t0,
            tag,
            &format!("git init + add -A + commit, {reps} reps each"),
        );
        let (m, n) = interleave(
            &sides,
            &mut counts,
            "git init + add + commit",
            reps,
            |_, _| Ok(()),
            |s, k| {
                let script = "git -c init.defaultBranch=main init -q && git add -A && \
                              git -c gc.auto=0 -c commit.gpgsign=false commit -q -m import";
                Ok(run_timed(&mut sh(&tree(s, k), script), &[0])?.0)
            },
        )?;
        rows.push(Row {
            op: "git init && git add -A && git commit (fresh tree)".into(),
            files: tb.files,
            avfs: m,
            native: Some(n),
            goal: Some(Goal::RatioAtMost(2.0)),
            goal_applies: true,
            ..Default::default()
        });

        progress_tag(
            t0,
            tag,
            &format!("git status (warm), {warm_reps} reps each"),
        );
        for s in &sides {
            for _ in 0..2 {
                let out = run(git(&tree(s, 0)).args(["status"]))?;
                let out = String::from_utf8_lossy(&out);
                if !out.contains("working tree clean") {
                    notes.push(format!(
                        "git status in the {} tree is not clean: {}",
                        if s.mount { "mount" } else { "native" },
                        out.lines().take(6).collect::<Vec<_>>().join(" / ")
                    ));
                }
            }
        }
        let (m, n) = interleave(
            &sides,
            &mut counts,
            "git status",
            warm_reps,
            |_, _| Ok(()),
            |s, _| Ok(run_timed(git(&tree(s, 0)).args(["status"]), &[0])?.0),
        )?;
        rows.push(Row {
            op: "git status, warm".into(),
            files: tb.files,
            avfs: m,
            native: Some(n),
            goal: Some(Goal::RatioAtMost(1.5)),
            goal_applies: true,
            ..Default::default()
        });

        for (name, script) in [
            (
                "find -type f | xargs stat",
                "find . -type f -print0 | xargs -0 stat > /dev/null",
            ),
            ("ls -lR", "ls -lR . > /dev/null"),
        ] {
            progress_tag(t0, tag, &format!("{name} (warm), {warm_reps} reps each"));
            for s in &sides {
                run(&mut sh(&tree(s, 0), script))?;
            }
            let (m, n) = interleave(
                &sides,
                &mut counts,
                name,
                warm_reps,
                |_, _| Ok(()),
                |s, _| Ok(run_timed(&mut sh(&tree(s, 0), script), &[0])?.0),
            )?;
            rows.push(Row {
                op: format!("`{}`, warm (tree with .git)", script.replace('|', "\\|")),
                files: tb.files,
                avfs: m,
                native: Some(n),
                goal: Some(Goal::RatioAtMost(1.5)),
                goal_applies: true,
                ..Default::default()
            });
        }

        progress_tag(t0, tag, &format!("rm -rf, {reps} reps each"));
        let (m, n) = interleave(
            &sides,
            &mut counts,
            "rm -rf",
            reps,
            |_, _| Ok(()),
            |s, k| {
                let mut c = cmd("rm", [OsStr::new("-rf"), tree(s, k).as_os_str()]);
                Ok(run_timed(&mut c, &[0])?.0)
            },
        )?;
        for s in &sides {
            if s.root.join("t0").exists() {
                return Err(format!("rm -rf {}: still there", tree(s, 0).display()).into());
            }
        }
        rows.push(Row {
            op: "rm -rf of the tree (with .git)".into(),
            files: tb.files,
            avfs: m,
            native: Some(n),
            goal: Some(Goal::RatioAtMost(2.0)),
            goal_applies: true,
            ..Default::default()
        });
    }

    if want("rtt") {
        // The floor under every other workload: one request the server answers at once,
        // without the vault (it stores only user.* attributes), so what is timed is the
        // kernel's round trip to the server and back.
        const CALLS: u32 = 20_000;
        progress_tag(
            t0,
            tag,
            &format!("round trip, {CALLS} calls x {reps} reps each"),
        );
        let probe = |s: &Side| s.root.join("rtt-probe");
        for s in &sides {
            std::fs::write(probe(s), b"")?;
        }
        let (m, n) = interleave(
            &sides,
            &mut counts,
            "round trip",
            reps,
            |_, _| Ok(()),
            |s, _| {
                let path = std::ffi::CString::new(probe(s).into_os_string().into_encoded_bytes())?;
                let name = c"security.avfs-bench-probe";
                let start = Instant::now();
                for _ in 0..CALLS {
                    // SAFETY: valid C strings; a zero-size query writes nothing.
                    let r = unsafe {
                        libc::getxattr(path.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0)
                    };
                    if r >= 0 {
                        return Err("the probe attribute exists".into());
                    }
                }
                Ok(start.elapsed() / CALLS)
            },
        )?;
        for s in &sides {
            std::fs::remove_file(probe(s))?;
        }
        rows.push(Row {
            op: "one kernel round trip (getxattr of an absent security.* name), per call".into(),
            files: 1,
            avfs: m,
            native: Some(n),
            label: Some(format!("{} calls", fmt_count(CALLS as f64))),
            ..Default::default()
        });
    }

    if want("io") {
        let mib = args.io_mib;
        progress_tag(
            t0,
            tag,
            &format!("sequential write + read of {mib} MiB, {reps} reps each"),
        );
        let mut pool = io_pool();
        let mut buf = vec![0u8; MIB];
        let (mut wm, mut wn, mut rm, mut rn) = Default::default();
        for _ in 0..reps {
            for s in &sides {
                let f = s.root.join("seq.bin");
                let w = counts.time("sequential write", s, || write_seq(&f, &mut pool, mib))?;
                let r = counts.time("sequential read", s, || read_seq(&f, mib, &mut buf))?;
                std::fs::remove_file(&f)?;
                let (ws, rs): (&mut Stat, &mut Stat) = if s.mount {
                    (&mut wm, &mut rm)
                } else {
                    (&mut wn, &mut rn)
                };
                ws.push(w);
                rs.push(r);
            }
        }
        let label = if mib.is_multiple_of(1024) {
            format!("{} GiB", mib / 1024)
        } else {
            format!("{mib} MiB")
        };
        rows.push(Row {
            op: "sequential write, 1 MiB writes, until close()".into(),
            files: 1,
            avfs: wm,
            native: Some(wn),
            goal: Some(Goal::ThroughputAtLeast(0.5)),
            goal_applies: true,
            label: Some(label.clone()),
            bytes: Some((mib * MIB) as u64),
            ..Default::default()
        });
        rows.push(Row {
            op: "sequential read after the write, fresh open, 1 MiB reads".into(),
            files: 1,
            avfs: rm,
            native: Some(rn),
            goal: Some(Goal::ThroughputAtLeast(0.5)),
            goal_applies: true,
            label: Some(label),
            bytes: Some((mib * MIB) as u64),
            ..Default::default()
        });
    }

    if let Some(krate) = &krate {
        let creps = args.cargo_reps;
        let profile = if args.cargo_release {
            "release"
        } else {
            "debug"
        };
        progress_tag(
            t0,
            tag,
            &format!("cargo build --offline ({profile}), {creps} reps each"),
        );
        let dir = |s: &Side| s.root.join("crate");
        let mut compiled = 0;
        let (m, n) = interleave(
            &sides,
            &mut counts,
            "cargo build",
            creps,
            |s, k| {
                if k == 0 {
                    std::fs::create_dir(dir(s))?;
                    let mut c = cmd("tar", [OsStr::new("-xf"), krate.as_os_str()]);
                    c.arg("-C").arg(dir(s));
                    run(&mut c)?;
                } else {
                    std::fs::remove_dir_all(dir(s).join("target"))?;
                }
                Ok(())
            },
            |s, _| {
                let mut c = Command::new("cargo");
                c.current_dir(dir(s))
                    .args(["build", "--offline", "--locked"])
                    .env("CARGO_TARGET_DIR", dir(s).join("target"))
                    .env("CARGO_TERM_COLOR", "never");
                if args.cargo_release {
                    c.arg("--release");
                }
                c.stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                let t = Instant::now();
                let out = c.output()?;
                let d = t.elapsed();
                if !out.status.success() {
                    return Err(format!(
                        "cargo build in {} failed ({}): {}",
                        dir(s).display(),
                        out.status,
                        String::from_utf8_lossy(&out.stderr).trim()
                    )
                    .into());
                }
                compiled = String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .filter(|l| l.trim_start().starts_with("Compiling "))
                    .count();
                Ok(d)
            },
        )?;
        rows.push(Row {
            op: format!("cargo build --offline ({profile}), empty target dir"),
            files: compiled,
            avfs: m,
            native: Some(n),
            goal: Some(Goal::RatioAtMost(1.2)),
            goal_applies: true,
            label: Some(format!("{compiled} crates compiled")),
            ..Default::default()
        });
        notes.push(format!(
            "cargo target dir after the build: {:.0} MB, {} files",
            dir_size(&native.join("crate").join("target")) as f64 / 1e6,
            fmt_count(count_files(&native.join("crate").join("target"))? as f64)
        ));
    }

    notes.push(format!(
        "vault file at the end (before unmount): {:.1} MB (with -wal); mount server pid {pid}",
        dir_bytes(&vault_path) as f64 / 1e6
    ));
    let described = counts.describe();
    if described.is_empty() {
        notes.push("FUSE request counts: not available (no control socket answer)".into());
    } else {
        notes.push(
            "FUSE requests per timed run in the mount, and the time the server spent serving \
             them (the rest of the mount's time is kernel round trips and waiting):"
                .into(),
        );
        notes.extend(described.into_iter().map(|s| format!("  {s}")));
    }
    progress_tag(t0, tag, "unmounting");
    guard.finish()?;
    if !args.keep {
        progress_tag(t0, tag, "cleaning up");
        std::fs::remove_dir_all(&work)?;
    }
    Ok(GroupResult {
        rows,
        notes,
        extra: Vec::new(),
    })
}

/// Bytes in regular files under `dir`.
fn dir_size(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.filter_map(|e| e.ok())
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_size(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map(|m| m.len()).unwrap_or(0),
            _ => 0,
        })
        .sum()
}

// ---------------------------------------------------------------------------------------
// Exec workloads: the overhead of `avfs exec` and its change report.

/// The patch size limit `avfs exec` uses for its change report (src/cli/exec.rs).
const EXEC_PATCH_LIMIT: u64 = 64 * 1024;

fn check_envelope(out: &[u8], checkpoint: bool) -> BoxResult<()> {
    check_envelope_sandbox(out, checkpoint, false)
}

fn check_envelope_sandbox(out: &[u8], checkpoint: bool, sandbox: bool) -> BoxResult<()> {
    let v: serde_json::Value = serde_json::from_slice(out)?;
    if v["exit_code"] != 0
        || v["checkpoint"].is_null() == checkpoint
        || v["sandbox"]["enforced"] != sandbox
    {
        return Err(format!(
            "avfs exec: unexpected envelope (exit_code {}, checkpoint {}, sandbox {})",
            v["exit_code"], v["checkpoint"], v["sandbox"]
        )
        .into());
    }
    Ok(())
}

/// Whether bwrap runs here (the sandbox rows are left out, with a note, when not).
fn bwrap_usable() -> Result<(), String> {
    match Command::new("bwrap")
        .args([
            "--ro-bind",
            "/",
            "/",
            "--unshare-pid",
            "--unshare-net",
            "--",
            "true",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
    {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(String::from_utf8_lossy(&o.stderr).trim().to_string()),
        Err(e) => Err(format!("bwrap: {e}")),
    }
}

fn bench_exec(
    args: &Args,
    avfs: &Path,
    base: &Path,
    reuse: Option<PathBuf>,
    t0: Instant,
) -> BoxResult<GroupResult> {
    let tag = "exec";
    let n = args.exec_files;
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let plan = plan_tree(n, 42 + n as u64);
    let work = match &reuse {
        Some(w) => w.clone(),
        None => base.join(format!("exec-n{n}")),
    };
    let env = Env {
        avfs: avfs.to_path_buf(),
        home: work.join("home"),
    };
    if reuse.is_some() {
        notes.push(format!(
            "workspace: the vault group's {}-file vault (imported tree, forks `exec` and `report` of it)",
            fmt_count(n as f64)
        ));
    } else {
        progress_tag(
            t0,
            tag,
            &format!("generating and importing a {n}-file tree"),
        );
        let src = work.join("src");
        write_tree(&src, &plan)?;
        run(&mut env.avfs(["vault", "create", "bench"]))?;
        run(&mut env.avfs([
            OsStr::new("--vault"),
            OsStr::new("bench"),
            OsStr::new("import"),
            src.as_os_str(),
            OsStr::new("/"),
        ]))?;
        std::fs::remove_dir_all(&src)?;
        notes.push(format!(
            "workspace: a generated {}-file tree (the vault group's generator), imported (forks `exec` and `report` of it)",
            fmt_count(n as f64)
        ));
    }
    let vault_path = Registry::open(&env.home)?
        .get("bench")?
        .ok_or("vault bench is not registered")?
        .path;

    // The change report of 100 changed files, as `avfs exec` computes it after the command:
    // flush the live layer to a root, diff it against the root from before, add patches.
    progress_tag(t0, tag, "change report of 100 changes");
    run(&mut env.avfs(["vault", "fork", "bench", "report"]))?;
    let mut rng = Rng::new(0xE7EC ^ n as u64);
    let mut store = Store::open(&vault_path)?;
    for rewrite in [false, true] {
        let mut full = Stat::default();
        let mut diff_patch = Stat::default();
        let mut phases = PhaseStats::default();
        let mut patched = 0;
        for k in 0..args.reps {
            let before = store.write(|db| Workspace::open(db, "report")?.flush())?;
            let changes = if rewrite {
                pick_changes(&mut rng, &plan, 100, &format!("report {k}"))
            } else {
                pick_edits(&mut rng, &plan, 100, &format!("report {k}"))
            };
            apply_vault(&vault_path, "report", &changes)?;
            let (d, (summary, with_patch), ph) = lib_timed(&mut store, |db, ph| {
                let mut m = Mark(Instant::now());
                let mut ws = Workspace::open(db, "report")?;
                let after = ws.flush()?;
                m.lap(ph, "flush");
                let mut changes = diff_roots(db, &before, &after)?;
                m.lap(ph, "diff_roots");
                add_patches(db, &mut changes, EXEC_PATCH_LIMIT)?;
                m.lap(ph, "add_patches");
                let with_patch = changes.iter().filter(|c| c.patch.is_some()).count();
                Ok((ChangeSummary::of(&changes), with_patch))
            })?;
            if summary.modified != 100
                || summary.added + summary.deleted + summary.type_changed + summary.mode_changed
                    != 0
            {
                return Err(format!(
                    "change report: expected 100 modified files, got {}",
                    serde_json::to_string(&summary)?
                )
                .into());
            }
            patched = with_patch;
            full.push(d);
            diff_patch.push(
                ph.iter()
                    .filter(|(name, _)| *name == "diff_roots" || *name == "add_patches")
                    .map(|(_, d)| *d)
                    .sum(),
            );
            phases.add(&ph);
        }
        let what = if rewrite {
            "100 rewritten files (all new content)"
        } else {
            "100 edited files (one line each)"
        };
        rows.push(Row {
            op: format!("change report, {what}: diff_roots + add_patches (library)"),
            files: n,
            avfs: diff_patch,
            goal: Some(Goal::Under(0.010)),
            goal_applies: true,
            ..Default::default()
        });
        rows.push(Row {
            op: "  as exec does it: flush + diff_roots + add_patches + commit (library)".into(),
            files: n,
            avfs: full,
            goal: Some(Goal::Under(0.010)),
            goal_applies: true,
            ..Default::default()
        });
        notes.push(format!(
            "change report, {what}, phases: {}; {patched} of the 100 changes got a patch (text files up to 64 KiB)",
            phases.describe()
        ));
    }
    drop(store);

    // `avfs exec -- true`, end to end, against `sh -c true`.
    run(&mut env.avfs(["vault", "fork", "bench", "exec"]))?;
    let xreps = args.reps * 3;
    let exec = |checkpoint: bool| {
        env.avfs([
            "--vault",
            "exec",
            "--json",
            "exec",
            if checkpoint {
                "--checkpoint"
            } else {
                "--no-checkpoint"
            },
            "--",
            "true",
        ])
    };
    // `avfs exec -- true` as an agent types it (read-only: no checkpoint), with and
    // without --sandbox: the sandbox's own overhead.
    let plain = |sandbox: bool| {
        let mut c = env.avfs(["--vault", "exec", "--json", "exec"]);
        if sandbox {
            c.arg("--sandbox");
        }
        c.args(["--", "true"]);
        c
    };
    let sandbox_ok = bwrap_usable();
    let native = || cmd("sh", ["-c", "true"]);
    let mut sh_true = Stat::default();
    let mut live = [Stat::default(), Stat::default()];
    let mut cold = [Stat::default(), Stat::default()];
    // [plain, sandboxed] with a live mount and without.
    let mut live_sb = [Stat::default(), Stat::default()];
    let mut cold_sb = [Stat::default(), Stat::default()];
    let variants: Vec<bool> = if sandbox_ok.is_ok() {
        vec![false, true]
    } else {
        Vec::new()
    };

    progress_tag(
        t0,
        tag,
        &format!("avfs exec with a live mount, {xreps} reps"),
    );
    let mnt = work.join("exec-mnt");
    std::fs::create_dir_all(&mnt)?;
    let rec = mount(&env, "exec", &mnt)?;
    let guard = Unmount {
        env: &env,
        mnt: mnt.clone(),
        done: false,
    };
    for checkpoint in [true, false] {
        for _ in 0..2 {
            check_envelope(&run(&mut exec(checkpoint))?, checkpoint)?;
        }
    }
    for &sandbox in &variants {
        check_envelope_sandbox(&run(&mut plain(sandbox))?, false, sandbox)?;
    }
    for _ in 0..xreps {
        sh_true.push(run_timed(&mut native(), &[0])?.0);
        for (i, checkpoint) in [true, false].into_iter().enumerate() {
            let (d, out) = run_timed(&mut exec(checkpoint), &[0])?;
            check_envelope(&out, checkpoint)?;
            live[i].push(d);
        }
        for &sandbox in &variants {
            let (d, out) = run_timed(&mut plain(sandbox), &[0])?;
            check_envelope_sandbox(&out, false, sandbox)?;
            live_sb[sandbox as usize].push(d);
        }
    }
    notes.push(format!(
        "live mount: server pid {}, mounted with `avfs mount exec DIR` before the runs",
        rec["pid"]
    ));
    guard.finish()?;

    progress_tag(
        t0,
        tag,
        &format!("avfs exec without a live mount, {xreps} reps"),
    );
    for checkpoint in [true, false] {
        check_envelope(&run(&mut exec(checkpoint))?, checkpoint)?;
    }
    for &sandbox in &variants {
        check_envelope_sandbox(&run(&mut plain(sandbox))?, false, sandbox)?;
    }
    for _ in 0..xreps {
        sh_true.push(run_timed(&mut native(), &[0])?.0);
        for (i, checkpoint) in [true, false].into_iter().enumerate() {
            let (d, out) = run_timed(&mut exec(checkpoint), &[0])?;
            check_envelope(&out, checkpoint)?;
            cold[i].push(d);
        }
        for &sandbox in &variants {
            let (d, out) = run_timed(&mut plain(sandbox), &[0])?;
            check_envelope_sandbox(&out, false, sandbox)?;
            cold_sb[sandbox as usize].push(d);
        }
    }
    let left: serde_json::Value =
        serde_json::from_slice(&run(&mut env.avfs(["--json", "mounts"]))?)?;
    if left["mounts"].as_array().is_some_and(|a| !a.is_empty()) {
        return Err(format!("avfs exec left mounts behind: {}", left["mounts"]).into());
    }
    let mut floor = Stat::default();
    for _ in 0..xreps {
        floor.push(run_timed(&mut env.avfs(["--version"]), &[0])?.0);
    }
    let mut extra = Vec::new();
    if let Err(why) = &sandbox_ok {
        notes.push(format!(
            "sandbox: not measured, bwrap does not run here ({why}); install bubblewrap"
        ));
    } else {
        extra.push(String::new());
        for (where_, [p, s]) in [("live mount", &live_sb), ("no live mount", &cold_sb)] {
            let (pm, sm) = (p.median(), s.median());
            extra.push(format!(
                "sandbox overhead, {where_}: `avfs exec --sandbox -- true` {} vs `avfs exec -- true` {} (medians of {}, interleaved): ratio {:.2}, +{}",
                fmt_secs(sm),
                fmt_secs(pm),
                s.0.len(),
                sm / pm,
                fmt_secs(sm - pm)
            ));
        }
        let mut bw = Stat::default();
        for _ in 0..xreps {
            let mut c = cmd(
                "bwrap",
                [
                    "--ro-bind",
                    "/usr",
                    "/usr",
                    "--symlink",
                    "usr/bin",
                    "/bin",
                    "--symlink",
                    "usr/lib",
                    "/lib",
                    "--symlink",
                    "usr/lib64",
                    "/lib64",
                    "--unshare-pid",
                    "--unshare-net",
                    "--",
                    "/bin/true",
                ],
            );
            bw.push(run_timed(&mut c, &[0])?.0);
        }
        extra.push(format!(
            "  for scale: a bare `bwrap --ro-bind /usr /usr ... --unshare-pid --unshare-net -- /bin/true` {} (median of {})",
            fmt_secs(bw.median()),
            bw.0.len()
        ));
    }
    let [live_ck, live_nock] = live;
    let [cold_ck, cold_nock] = cold;
    for (op, s, goal) in [
        (
            "avfs exec --checkpoint -- true, live mount",
            live_ck,
            Some(0.015),
        ),
        (
            "avfs exec --no-checkpoint -- true, live mount",
            live_nock,
            None,
        ),
        (
            "avfs exec --checkpoint -- true, no live mount",
            cold_ck,
            Some(0.100),
        ),
        (
            "avfs exec --no-checkpoint -- true, no live mount",
            cold_nock,
            None,
        ),
        ("avfs exec -- true, live mount", live_sb[0].clone(), None),
        (
            "avfs exec --sandbox -- true, live mount",
            live_sb[1].clone(),
            None,
        ),
        ("avfs exec -- true, no live mount", cold_sb[0].clone(), None),
        (
            "avfs exec --sandbox -- true, no live mount",
            cold_sb[1].clone(),
            None,
        ),
        (
            "  for scale: avfs --version (process start only)",
            floor,
            None,
        ),
    ] {
        if s.0.is_empty() {
            continue;
        }
        rows.push(Row {
            op: op.into(),
            files: n,
            avfs: s,
            native: Some(sh_true.clone()),
            goal: goal.map(Goal::Under),
            goal_applies: true,
            ..Default::default()
        });
    }

    if !args.keep {
        progress_tag(t0, tag, "cleaning up");
        std::fs::remove_dir_all(&work)?;
    }
    Ok(GroupResult { rows, notes, extra })
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
    let avfs = match &args.avfs {
        Some(p) => std::fs::canonicalize(p).map_err(|e| format!("--avfs {}: {e}", p.display()))?,
        None => std::env::current_exe()?
            .parent()
            .ok_or("no directory for the current executable")?
            .join("avfs"),
    };
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
    let has = |g: Group| args.groups.contains(&g);

    let version = |prog: &str, arg: &str| {
        Command::new(prog)
            .arg(arg)
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_string()
            })
            .unwrap_or_else(|_| format!("{prog}: not found"))
    };
    let mem_gb = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0 / 1024.0)
        .unwrap_or(f64::NAN);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_string();
    let mut header = vec![format!(
        "avfs-bench: groups {}",
        args.groups
            .iter()
            .map(|g| format!("{g:?}").to_lowercase())
            .collect::<Vec<_>>()
            .join(",")
    )];
    if has(Group::Vault) {
        header.push(format!(
            "vault: sizes {:?}, {} reps ({} for cat; {} for import, cp -a, diff -rq)",
            args.sizes,
            args.reps,
            args.reps * 3,
            args.native_reps
        ));
    }
    if has(Group::Mount) {
        header.push(format!(
            "mount: workloads {}; {} reps (tar x, git commit, rm -rf, sequential I/O), {} reps (warm: git status, find+stat, ls -lR), {} for cargo build",
            args.mount_workloads.join(","),
            args.mount_reps,
            args.reps,
            args.cargo_reps
        ));
    }
    if has(Group::Exec) {
        header.push(format!(
            "exec: {}-file workspace; {} reps (change report), {} reps (each avfs exec variant; sh -c true twice as many)",
            fmt_count(args.exec_files as f64),
            args.reps,
            args.reps * 3
        ));
    }
    header.extend([
        format!(
            "binary: {} (source {})",
            avfs.display(),
            String::from_utf8_lossy(
                &git(Path::new(env!("CARGO_MANIFEST_DIR")))
                    .args(["describe", "--always", "--dirty"])
                    .output()
                    .map(|o| o.stdout)
                    .unwrap_or_default()
            )
            .trim()
        ),
        format!("work dir: {} on {}", base.display(), describe_fs(&base)),
        format!(
            "machine: {} cpus, {mem_gb:.0} GiB RAM, kernel {kernel}",
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(0),
        ),
        // What sets the FUSE round trip on this machine (see the `rtt` row).
        format!(
            "wake-ups: cpuidle {}, guest_halt_poll_ns {}; FUSE over io_uring (fuse.enable_uring): {}",
            sysfs("/sys/devices/system/cpu/cpuidle/current_driver"),
            sysfs("/sys/module/haltpoll/parameters/guest_halt_poll_ns"),
            sysfs("/sys/module/fuse/parameters/enable_uring"),
        ),
        format!(
            "tools: {}; {}; {}",
            version("git", "--version"),
            version("tar", "--version"),
            version("cargo", "--version")
        ),
    ]);
    for h in &header {
        eprintln!("{h}");
    }

    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let mut forks: Vec<(usize, f64, f64)> = Vec::new();
    let mut mount_result = None;
    let mut exec_result = None;
    let result = (|| -> BoxResult<()> {
        let mut reuse = None;
        if has(Group::Vault) {
            for &n in &args.sizes {
                let keep_for_exec = has(Group::Exec) && n == args.exec_files;
                let r = bench_size(&args, &avfs, &base, n, t0, keep_for_exec)?;
                if keep_for_exec {
                    reuse = Some(base.join(format!("n{n}")));
                }
                rows.extend(r.rows);
                notes.push(format!("{} files:", fmt_count(n as f64)));
                notes.extend(r.notes.into_iter().map(|s| format!("  {s}")));
                forks.push((n, r.fork_lib, r.fork_proc));
            }
        }
        if has(Group::Exec) {
            exec_result = Some(bench_exec(&args, &avfs, &base, reuse, t0)?);
        }
        if has(Group::Mount) {
            mount_result = Some(bench_mount(&args, &avfs, &base, t0)?);
        }
        Ok(())
    })();
    if !args.keep {
        let _ = std::fs::remove_dir_all(&base);
    }
    result?;

    println!();
    for h in &header {
        println!("{h}");
    }
    println!("total run time: {}", fmt_secs(t0.elapsed().as_secs_f64()));

    if has(Group::Vault) {
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
        println!("## vault operations");
        println!();
        print_table(["operation", "files", "avfs"], &rows, &extra);
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
    }
    if let Some(r) = &mount_result {
        println!();
        println!("## mount workloads");
        println!();
        print_table(["workload", "files", "mount"], &r.rows, &[]);
        println!();
        println!(
            "each workload runs in a FUSE mount of a fresh vault (`avfs mount`, release build unless --avfs says otherwise) and in a plain directory on the same disk, alternating native and mount runs; warm workloads had one or two untimed runs on each side first. The tree is the tarball's, committed to git by the git workload (so find, ls -lR and rm -rf include its .git). Sequential I/O: one file written with 1 MiB write() calls (incompressible data, timed until close() returned, no fsync), then read back through a new open with 1 MiB reads; page caches are not dropped (not possible for the mount), so the read is warm on both sides."
        );
        println!();
        for n in &r.notes {
            println!("{n}");
        }
    }
    if let Some(r) = &exec_result {
        println!();
        println!("## exec");
        println!();
        print_table(["measure", "workspace files", "avfs"], &r.rows, &r.extra);
        println!();
        println!(
            "native analogue: `sh -c true` spawned and waited for (the same process work without avfs). avfs exec runs are whole `avfs --json exec ... -- true` processes (policy, checkpoint or flush, run, change report, audit, envelope); \"live mount\": the workspace was mounted with `avfs mount` before; \"no live mount\": exec mounts it for the command and unmounts after. `avfs exec [--sandbox] -- true` without checkpoint flags is what an agent types (`true` is read-only: no checkpoint); the two are interleaved, and the sandbox overhead is their difference (bwrap's namespaces and mounts, avfs as the sandbox's PID 1). The change report is timed through the library on the vault file, as src/cli/exec.rs computes it."
        );
        println!();
        for n in &r.notes {
            println!("{n}");
        }
    }
    Ok(())
}
