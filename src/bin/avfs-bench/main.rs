//! `avfs-bench`: measures avfs side by side with a native directory on the same disk, and
//! prints markdown tables of medians, ratios and goals. Four groups of workloads:
//!
//! - `vault`: vault operations (import, fork, checkpoint save/restore, diff, cat) on
//!   workspaces of several sizes, against `cp -a`, git, `diff -rq`, `cat`;
//! - `mount`: real tools in a FUSE mount of a fresh vault and in a plain directory (tar,
//!   git, find/stat, ls -lR, rm -rf, sequential I/O, cargo build);
//! - `exec`: `avfs exec -- true` end to end with and without a live mount and with and
//!   without `--sandbox`, and the change report of 100 changes in a 100 000-file workspace;
//! - `policy`: the decision time for the lines of the decision corpus.
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
use agentvfs::store::{Store, audit};
use agentvfs::workspace::path::components;
use agentvfs::workspace::{MAIN, Workspace};
use serde_json::json;

type BoxResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

mod args;
mod tree_gen;
use args::*;
use tree_gen::*;

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

mod bare_overlay;
mod group_engines;
mod group_exec;
mod group_integrity;
mod group_mount;
mod group_policy;
mod group_remote;
mod group_space;
mod group_vault;

use bare_overlay::*;
use group_engines::*;
use group_exec::*;
use group_integrity::*;
use group_mount::*;
use group_policy::*;
use group_vault::*;

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
    let mut engines_result = None;
    let mut exec_result = None;
    let mut policy_result = None;
    let mut space_result = None;
    let mut integrity_result = None;
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
        if has(Group::Integrity) {
            integrity_result = Some(bench_integrity(&args, &avfs, &base, t0)?);
        }
        if has(Group::Engines) {
            engines_result = Some(bench_engines(&args, &avfs, &base, t0)?);
        }
        if has(Group::Policy) {
            policy_result = Some(bench_policy(&args, &avfs, &base, t0)?);
        }
        if has(Group::Space) {
            space_result = Some(group_space::bench_space(&args, &avfs, &base, t0)?);
        }
        if has(Group::Remote) {
            group_remote::bench_remote(&args, &avfs, &base, t0)?;
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
    if let Some(r) = &integrity_result {
        println!();
        println!("## integrity: big directories, checked reads");
        println!();
        print_table(["operation", "entries", "avfs"], &r.rows, &[]);
        println!();
        println!(
            "native analogues: `ls -1` / `ls -l` of the host directory the vault's was imported from (same disk); `/bin/cat` of the same 64 MiB file. avfs runs are whole processes, output to /dev/null."
        );
        println!();
        for n in &r.notes {
            println!("{n}");
        }
    }
    if let Some(r) = &engines_result {
        println!();
        println!("## engines: workloads through avfs exec");
        for l in &r.extra {
            println!("{l}");
        }
        println!();
        println!(
            "each workload is one whole `avfs --json exec --engine E -- CMD` process (policy, checkpoint, the sandbox, the command at the workspace's stable path, ingest of the changes (overlay), change report, audit) against CMD in a native directory on the same file system, interleaved in an order that rotates each repetition, from the same state (`checkpoint restore` and a fresh `cp -a` before each run, untimed). \"command\" is the command's own time as the envelope reports it (result.duration_ms), \"ingest\" the overlay engine's taking in of the run's upper directory (engine.ingest.ms); the rest is avfs's own work around them."
        );
        println!();
        for n in &r.notes {
            println!("{n}");
        }
    }
    if let Some(r) = &space_result {
        group_space::print(r);
    }
    if let Some(r) = &exec_result {
        println!();
        println!("## exec");
        println!();
        print_table(["measure", "workspace files", "avfs"], &r.rows, &r.extra);
        println!();
        println!(
            "native analogue: `sh -c true` spawned and waited for (the same process work without avfs). avfs exec runs are whole `avfs --json exec ... -- true` processes (policy, run lock, checkpoint or flush, the run's namespaces and sandbox at the workspace's stable path, ingest, change report, audit, envelope), interleaved. The change report is timed through the library on the vault file, as src/boundary/run.rs computes it."
        );
        println!();
        for n in &r.notes {
            println!("{n}");
        }
    }
    if let Some(r) = &policy_result {
        println!();
        println!("## policy");
        println!();
        print_table(["measure", "lines", "avfs"], &r.rows, &r.extra);
        println!();
        println!(
            "library: Policy::decide for each line of tests/data/policy-corpus.txt (median of repeated decisions per line; the table shows the median and the range over the lines). process: a whole `avfs --json policy check --shell LINE`, once per line."
        );
        println!();
        for n in &r.notes {
            println!("{n}");
        }
    }
    Ok(())
}

fn fmt_bytes(b: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut x = b as f64;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < UNITS.len() {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{x:.1} {}", UNITS[u])
    }
}
