//! Deterministic generation of a source-code-like tree, and the changes applied to it
//! natively and in a vault, for the workloads that need a workspace of N files.

use super::*;

/// xorshift64* (Vigna): tiny, deterministic, good enough for shaping test data.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03 | 1)
    }
    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Uniform in `lo..=hi`.
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

pub(crate) struct FileSpec {
    /// Absolute path inside the workspace ("/a/b/c.rs"); relative to the tree root on the host.
    pub(crate) rel: String,
    pub(crate) size: usize,
    pub(crate) seed: u64,
}

pub(crate) struct TreePlan {
    pub(crate) dirs: Vec<String>,
    pub(crate) files: Vec<FileSpec>,
    /// Index in `files` of the 1 KiB file `avfs cat` reads.
    pub(crate) cat_target: usize,
    pub(crate) bytes: u64,
}

pub(crate) const DIR_NAMES: &[&str] = &[
    "src", "core", "util", "net", "io", "api", "db", "ui", "cmd", "internal", "pkg", "test",
];
pub(crate) const STEMS: &[&str] = &[
    "main", "lib", "mod", "util", "parser", "config", "handler", "client", "server", "types",
    "error", "model", "view", "store", "cache", "index",
];
pub(crate) const EXTS: &[&str] = &[
    "rs", "rs", "rs", "c", "h", "py", "ts", "js", "go", "md", "json", "toml",
];
pub(crate) const WORDS: &[&str] = &[
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
pub(crate) fn sample_size(rng: &mut Rng) -> usize {
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

pub(crate) fn plan_tree(n: usize, seed: u64) -> TreePlan {
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
pub(crate) fn plan_dir(
    rng: &mut Rng,
    rel: String,
    depth: usize,
    budget: usize,
    plan: &mut TreePlan,
) {
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
pub(crate) fn content(seed: u64, size: usize) -> Vec<u8> {
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

pub(crate) fn host_path(root: &Path, rel: &str) -> PathBuf {
    root.join(rel.trim_start_matches('/'))
}

pub(crate) fn write_tree(root: &Path, plan: &TreePlan) -> BoxResult<()> {
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
pub(crate) fn pick_changes(
    rng: &mut Rng,
    plan: &TreePlan,
    k: usize,
    tag: &str,
) -> Vec<(String, Vec<u8>)> {
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
pub(crate) fn pick_edits(
    rng: &mut Rng,
    plan: &TreePlan,
    k: usize,
    tag: &str,
) -> Vec<(String, Vec<u8>)> {
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

pub(crate) fn apply_native(root: &Path, changes: &[(String, Vec<u8>)]) -> BoxResult<()> {
    for (rel, data) in changes {
        std::fs::write(host_path(root, rel), data)?;
    }
    Ok(())
}

/// Writes the changes through the library, as `avfs write` does (untimed setup). Opens its
/// own connection and closes it, so when no other connection is open, SQLite checkpoints
/// the WAL on close and the next timed `avfs` process starts as it would for a user.
pub(crate) fn apply_vault(
    vault: &Path,
    ws_name: &str,
    changes: &[(String, Vec<u8>)],
) -> BoxResult<()> {
    let mut store = Store::open(vault)?;
    store.write(|db| {
        let ws = Workspace::open(db, ws_name)?;
        for (rel, data) in changes {
            let node = ws.resolve_existing(&components(rel.as_bytes())?, true)?;
            let hash = agentvfs::store::content::write_bytes(db, data)?.0;
            ws.set_content(node.ino, hash, data.len() as u64)?;
        }
        Ok(())
    })?;
    Ok(())
}
