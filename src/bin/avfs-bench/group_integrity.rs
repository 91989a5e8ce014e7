//! The integrity group (issue 17): listing big directories, and what checking objects
//! against their hashes costs a read.
//!
//! * `ls` of one directory of 10^5 and 10^6 entries (imported from a host directory, so
//!   stored as one tree), text and `--json`, beside `ls -1` / `ls -l` of the host
//!   directory; each run's peak memory (wait4's ru_maxrss) is in the notes.
//! * `cat` of a 64 MiB file, beside `/bin/cat`, and the BLAKE3 hashing of the same bytes
//!   in this process: the part of the read spent checking every 64 KiB chunk.

use super::*;

pub(crate) struct IntegrityResult {
    pub(crate) rows: Vec<Row>,
    pub(crate) notes: Vec<String>,
}

/// Runs `cmd` with stdout to /dev/null; its wall time and peak resident memory in KiB.
fn run_rss(cmd: &mut Command) -> BoxResult<(Duration, i64)> {
    let t = Instant::now();
    let child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value to be filled in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child and fills `status` and `usage`.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let d = t.elapsed();
    if r != pid || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(format!("{cmd:?} failed (status {status})").into());
    }
    std::mem::forget(child);
    Ok((d, usage.ru_maxrss))
}

pub(crate) fn bench_integrity(
    args: &Args,
    avfs: &Path,
    base: &Path,
    t0: Instant,
) -> BoxResult<IntegrityResult> {
    let work = base.join("integrity");
    std::fs::create_dir_all(&work)?;
    let env = Env {
        avfs: avfs.to_path_buf(),
        home: work.join("home"),
    };
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for &n in &args.bigdir_sizes {
        progress_tag(t0, "integrity", &format!("a directory of {n} entries"));
        let host = work.join(format!("dir{n}"));
        std::fs::create_dir_all(&host)?;
        for i in 0..n {
            std::fs::write(host.join(format!("entry-{i:07}.txt")), b"x")?;
        }
        let name = format!("big{n}");
        run(&mut env.avfs(["vault", "create", &name]))?;
        let ti = Instant::now();
        run(&mut env.avfs([
            OsStr::new("--vault"),
            OsStr::new(&name),
            OsStr::new("import"),
            host.as_os_str(),
            OsStr::new("/d"),
        ]))?;
        notes.push(format!(
            "{} entries: imported in {}",
            fmt_count(n as f64),
            fmt_secs(ti.elapsed().as_secs_f64())
        ));
        let reps = args.reps.clamp(3, 5);
        let cases: [(&str, Vec<&str>, Vec<&str>); 3] = [
            ("ls DIR", vec!["ls", "/d"], vec!["-1"]),
            ("ls -l DIR", vec!["ls", "-l", "/d"], vec!["-l"]),
            ("--json ls DIR", vec!["--json", "ls", "/d"], vec!["-l"]),
        ];
        for (op, a, native) in cases {
            let (mut s, mut nat) = (Stat::default(), Stat::default());
            let mut rss = 0;
            let mut nrss = 0;
            for _ in 0..reps {
                let (d, r) = run_rss(env.avfs(["--vault", name.as_str()]).args(&a))?;
                s.push(d);
                rss = rss.max(r);
                let (d, r) = run_rss(cmd("ls", native.iter().copied().map(OsStr::new)).arg(&host))?;
                nat.push(d);
                nrss = nrss.max(r);
            }
            notes.push(format!(
                "{} entries, {op}: peak memory {:.1} MB (native ls {:.1} MB)",
                fmt_count(n as f64),
                rss as f64 / 1024.0,
                nrss as f64 / 1024.0
            ));
            rows.push(Row {
                op: op.into(),
                files: n,
                avfs: s,
                native: Some(nat),
                goal: (n == 100_000).then_some(Goal::Under(1.0)),
                goal_applies: n == 100_000,
                rate: true,
                ..Row::default()
            });
        }
        let _ = std::fs::remove_dir_all(&host);
        run(&mut env.avfs(["vault", "delete", &name, "-y"]))?;
    }

    // The cost of checking every chunk against its hash on read.
    progress_tag(t0, "integrity", "cat of a 64 MiB file");
    let mib = 64usize;
    let data = content(7, mib << 20);
    let dir = work.join("blob");
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("big.bin");
    std::fs::write(&file, &data)?;
    run(&mut env.avfs(["vault", "create", "blob"]))?;
    run(&mut env.avfs([
        OsStr::new("--vault"),
        OsStr::new("blob"),
        OsStr::new("import"),
        dir.as_os_str(),
        OsStr::new("/w"),
    ]))?;
    let (mut s, mut nat, mut hash) = (Stat::default(), Stat::default(), Stat::default());
    for _ in 0..args.reps.max(3) {
        let (d, _) = run_rss(&mut env.avfs(["--vault", "blob", "cat", "/w/big.bin"]))?;
        s.push(d);
        let (d, _) = run_rss(&mut cmd("cat", [file.as_os_str()]))?;
        nat.push(d);
        let t = Instant::now();
        for c in data.chunks(64 * 1024) {
            std::hint::black_box(blake3::hash(c));
        }
        hash.push(t.elapsed());
    }
    notes.push(format!(
        "BLAKE3 check of every 64 KiB chunk of the 64 MiB file, in process: {} ({:.1} µs per chunk, {:.0} MB/s), {:.0} % of `avfs cat`'s {}",
        fmt_secs(hash.median()),
        hash.median() / (mib * 16) as f64 * 1e6,
        (mib << 20) as f64 / 1e6 / hash.median(),
        100.0 * hash.median() / s.median(),
        fmt_secs(s.median())
    ));
    rows.push(Row {
        op: "cat 64 MiB (every chunk hash-checked)".into(),
        files: 1,
        avfs: s,
        native: Some(nat),
        bytes: Some((mib << 20) as u64),
        label: Some("64 MiB".into()),
        ..Row::default()
    });
    rows.push(Row {
        op: "BLAKE3 of the same 64 MiB (the check alone)".into(),
        files: 1,
        avfs: hash,
        bytes: Some((mib << 20) as u64),
        label: Some("64 MiB".into()),
        ..Row::default()
    });
    Ok(IntegrityResult { rows, notes })
}
