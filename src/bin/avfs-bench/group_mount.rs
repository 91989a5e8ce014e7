//! The mount group: real tools in a FUSE mount and in a native directory.

use super::*;

// ---------------------------------------------------------------------------------------
// Shared by the mount and exec groups.

pub(crate) struct GroupResult {
    pub(crate) rows: Vec<Row>,
    pub(crate) notes: Vec<String>,
    /// Lines printed right under the table.
    pub(crate) extra: Vec<String>,
}

/// Unmounts `mnt` when dropped (also on errors); `finish` unmounts and reports failures.
pub(crate) struct Unmount<'a> {
    pub(crate) env: &'a Env,
    pub(crate) mnt: PathBuf,
    pub(crate) done: bool,
}

impl Unmount<'_> {
    pub(crate) fn finish(mut self) -> BoxResult<()> {
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
pub(crate) fn mount(env: &Env, name: &str, mnt: &Path) -> BoxResult<serde_json::Value> {
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
pub(crate) struct Side {
    pub(crate) mount: bool,
    pub(crate) root: PathBuf,
}

/// Per-operation request counters of the mount, read through its control socket, with
/// the server's busy time (time spent serving requests under its lock) as `busy_ns`.
pub(crate) fn fuse_counters(socket: &Path) -> Option<BTreeMap<String, u64>> {
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
pub(crate) const BUSY: &str = "busy_ns";

/// FUSE requests caused by each workload's timed runs in the mount.
pub(crate) struct Counts {
    pub(crate) socket: Option<PathBuf>,
    /// (workload, runs, requests by operation summed over the runs)
    pub(crate) per: Vec<(String, u64, BTreeMap<String, u64>)>,
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
pub(crate) fn interleave(
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
pub(crate) fn walk_files(base: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
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
pub(crate) fn count_files(dir: &Path) -> std::io::Result<usize> {
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
pub(crate) fn read_through(path: &Path) -> BoxResult<u64> {
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

pub(crate) struct Tarball {
    pub(crate) path: PathBuf,
    pub(crate) files: usize,
    pub(crate) bytes: u64,
    pub(crate) from: PathBuf,
}

/// A tarball of real sources: the first `want / 2` files under ~/.cargo/registry/src, in
/// path order, stored twice under a/ and b/.
pub(crate) fn build_tarball(work: &Path, want: usize) -> BoxResult<Tarball> {
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
pub(crate) fn crate_tarball(args: &Args, work: &Path) -> BoxResult<(PathBuf, String)> {
    let path = work.join("crate.tar");
    // What a build reads: the sources, and what they include (the JSON schemas) or build
    // (a build script and what it compiles), where the crate has them.
    let parts_of = |dir: &Path| -> Vec<&'static str> {
        [
            "src",
            "Cargo.toml",
            "Cargo.lock",
            "schemas",
            "build.rs",
            "vendor",
        ]
        .into_iter()
        .filter(|p| dir.join(p).exists())
        .collect()
    };
    if let Some(dir) = &args.cargo_src {
        let parts = parts_of(dir);
        let mut c = Command::new("tar");
        c.arg("-cf").arg(&path).arg("-C").arg(dir).args(&parts);
        run(&mut c)?;
        return Ok((path, format!("{} ({})", dir.display(), parts.join(", "))));
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let parts = parts_of(repo);
    let head = run(git(repo).args(["rev-parse", "--short", "HEAD"]))?;
    let mut c = git(repo);
    c.args(["archive", "--format=tar", "-o"])
        .arg(&path)
        .arg("HEAD")
        .args(&parts);
    run(&mut c)?;
    Ok((
        path,
        format!(
            "agentvfs at HEAD {} ({} from git archive)",
            String::from_utf8_lossy(&head).trim(),
            parts.join(", ")
        ),
    ))
}

pub(crate) const MIB: usize = 1 << 20;
pub(crate) const POOL_MIB: usize = 64;

/// 64 MiB of pseudo-random bytes: incompressible; every 4 KiB page gets the block number
/// stamped on when written, so no 64 KiB chunk repeats (avfs stores content by hash).
pub(crate) fn io_pool() -> Vec<u8> {
    let mut rng = Rng::new(0x10_B10C);
    let mut v = Vec::with_capacity(POOL_MIB * MIB);
    while v.len() < POOL_MIB * MIB {
        v.extend_from_slice(&rng.next().to_le_bytes());
    }
    v
}

pub(crate) fn stamp(block: &mut [u8], i: usize) {
    for page in block.chunks_mut(4096) {
        page[..8].copy_from_slice(&(i as u64).to_le_bytes());
    }
}

/// Creates `path` and writes `mib` MiB with 1 MiB writes; timed until close() returned.
pub(crate) fn write_seq(path: &Path, pool: &mut [u8], mib: usize) -> BoxResult<Duration> {
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
pub(crate) fn read_seq(path: &Path, mib: usize, buf: &mut [u8]) -> BoxResult<Duration> {
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

pub(crate) fn bench_mount(
    args: &Args,
    avfs: &Path,
    base: &Path,
    t0: Instant,
) -> BoxResult<GroupResult> {
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
pub(crate) fn dir_size(dir: &Path) -> u64 {
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
