//! The space group: what sparse files and long write-heavy sessions cost in a mount
//! (issue 15). Two workloads, each beside a native directory on the same file system,
//! interleaved:
//!
//! - `sparse 1T`: `truncate -s 1T` and one byte written at 512 GiB, closed; the mount
//!   server's peak memory and the vault's growth are reported beside the time;
//! - `fsx`: fsx-like random operations (writes of up to 64 KiB, truncates, punched holes,
//!   reads checked against a model) on 4 files of at most 256 KiB; the vault's size while
//!   it runs and after unmount, and the time `avfs vault verify` then takes.
//!
//! fsx itself is not packaged by Debian (it comes with xfstests and LTP, neither in its
//! archive), so this is an fsx-like workload written here, with fsx's operation mix.

use std::os::unix::fs::FileExt;

use super::*;
use group_mount::{GroupResult, Unmount, mount};

/// Bytes of a vault file and its WAL.
fn vault_bytes(home: &Path, name: &str) -> u64 {
    let f = home.join("vaults").join(format!("{name}.avfs"));
    let wal = PathBuf::from(format!("{}-wal", f.display()));
    std::fs::metadata(&f).map_or(0, |m| m.len()) + std::fs::metadata(&wal).map_or(0, |m| m.len())
}

/// Peak resident memory of a process (VmHWM), in KiB.
fn peak_kib(pid: u64) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn sparse_once(dir: &Path, name: &str) -> BoxResult<Duration> {
    let p = dir.join(name);
    let t = Instant::now();
    let f = std::fs::File::create(&p)?;
    f.set_len(1 << 40)?;
    f.write_at(b"x", 1 << 39)?;
    drop(f);
    Ok(t.elapsed())
}

/// A small xorshift generator: the same operations on both sides.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// `ops` fsx-like operations on 4 files in `dir`; calls `sample` every 1000 operations.
fn fsx(dir: &Path, ops: usize, mut sample: impl FnMut()) -> BoxResult<Duration> {
    const MAX: u64 = 256 << 10;
    let names: Vec<PathBuf> = (0..4).map(|i| dir.join(format!("fsx{i}"))).collect();
    let mut model: Vec<Vec<u8>> = vec![Vec::new(); 4];
    for n in &names {
        std::fs::write(n, b"")?;
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let t = Instant::now();
    for i in 0..ops {
        let k = (rng.next() % 4) as usize;
        let (p, md) = (&names[k], &mut model[k]);
        match rng.next() % 20 {
            0..=8 => {
                let off = rng.next() % MAX;
                let len = 1 + rng.next() % 65536.min(MAX - off);
                let data = vec![(rng.next() % 255 + 1) as u8; len as usize];
                let f = std::fs::OpenOptions::new().write(true).open(p)?;
                f.write_all_at(&data, off)?;
                drop(f);
                let end = (off + len) as usize;
                if md.len() < end {
                    md.resize(end, 0);
                }
                md[off as usize..end].copy_from_slice(&data);
            }
            9..=11 => {
                let size = rng.next() % MAX;
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(p)?
                    .set_len(size)?;
                md.resize(size as usize, 0);
            }
            12 => {
                let off = rng.next() % MAX;
                let len = 1 + rng.next() % 131072;
                let f = std::fs::OpenOptions::new().write(true).open(p)?;
                // SAFETY: an open descriptor.
                let r = unsafe {
                    libc::fallocate(
                        std::os::fd::AsRawFd::as_raw_fd(&f),
                        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                        off as i64,
                        len as i64,
                    )
                };
                if r != 0 {
                    return Err(format!("fallocate: {}", std::io::Error::last_os_error()).into());
                }
                let end = ((off + len) as usize).min(md.len());
                if (off as usize) < end {
                    md[off as usize..end].fill(0);
                }
            }
            _ => {
                let off = rng.next() % MAX;
                let len = 1 + rng.next() % 65536;
                let f = std::fs::File::open(p)?;
                let mut buf = vec![0u8; len as usize];
                let mut got = 0;
                while got < buf.len() {
                    match f.read_at(&mut buf[got..], off + got as u64)? {
                        0 => break,
                        n => got += n,
                    }
                }
                buf.truncate(got);
                let want: Vec<u8> = md
                    .iter()
                    .skip(off as usize)
                    .take(len as usize)
                    .copied()
                    .collect();
                if buf != want {
                    return Err(
                        format!("fsx: op {i}: read of {} at {off} differs", p.display()).into(),
                    );
                }
            }
        }
        if i % 1000 == 0 {
            sample();
        }
    }
    Ok(t.elapsed())
}

pub(crate) fn bench_space(
    args: &Args,
    avfs: &Path,
    base: &Path,
    t0: Instant,
) -> BoxResult<GroupResult> {
    let tag = "space";
    let work = base.join("space");
    std::fs::create_dir_all(&work)?;
    let env = Env {
        avfs: avfs.to_path_buf(),
        home: work.join("home"),
    };
    let (mut rows, mut notes) = (Vec::new(), Vec::new());
    let native = work.join("native");
    std::fs::create_dir_all(&native)?;

    // sparse 1T: a fresh vault per rep, so growth and peak memory are the rep's own.
    let reps = args.mount_reps.max(3);
    let (mut a, mut n) = (Stat::default(), Stat::default());
    let (mut grew, mut peak) = (Vec::new(), Vec::new());
    for r in 0..reps {
        progress_tag(t0, tag, &format!("sparse 1T, rep {}/{reps}", r + 1));
        let name = format!("sparse{r}");
        run(&mut env.avfs(["vault", "create", &name]))?;
        let mnt = work.join(format!("mnt-{name}"));
        std::fs::create_dir_all(&mnt)?;
        let rec = mount(&env, &name, &mnt)?;
        let guard = Unmount {
            env: &env,
            mnt: mnt.clone(),
            done: false,
        };
        let before = vault_bytes(&env.home, &name);
        n.push(sparse_once(&native, &format!("big{r}"))?);
        a.push(sparse_once(&mnt, "big")?);
        peak.push(peak_kib(rec["pid"].as_u64().unwrap_or(0)));
        guard.finish()?;
        grew.push(vault_bytes(&env.home, &name).saturating_sub(before));
        std::fs::remove_file(native.join(format!("big{r}")))?;
    }
    rows.push(Row {
        op: "sparse 1T: truncate -s 1T + 1 byte at 512 GiB".into(),
        files: 1,
        avfs: a,
        native: Some(n),
        label: Some("1 TiB".into()),
        ..Default::default()
    });
    notes.push(format!(
        "sparse 1T: vault growth per run {:?} bytes (file + WAL after unmount); mount server peak RSS {:?} KiB",
        grew, peak
    ));

    // fsx: one run per side (long), native first.
    let ops = args.fsx_ops;
    progress_tag(t0, tag, &format!("fsx, {ops} ops, native"));
    let nd = native.join("fsx");
    std::fs::create_dir_all(&nd)?;
    let mut n = Stat::default();
    n.push(fsx(&nd, ops, || {})?);
    progress_tag(t0, tag, &format!("fsx, {ops} ops, mount"));
    run(&mut env.avfs(["vault", "create", "fsx"]))?;
    let mnt = work.join("mnt-fsx");
    std::fs::create_dir_all(&mnt)?;
    mount(&env, "fsx", &mnt)?;
    let guard = Unmount {
        env: &env,
        mnt: mnt.clone(),
        done: false,
    };
    let mut top = 0u64;
    let mut a = Stat::default();
    a.push(fsx(&mnt, ops, || {
        top = top.max(vault_bytes(&env.home, "fsx"))
    })?);
    guard.finish()?;
    let after = vault_bytes(&env.home, "fsx");
    let t = Instant::now();
    run(&mut env.avfs(["--vault", "fsx", "vault", "verify"]))?;
    let verify = t.elapsed();
    rows.push(Row {
        op: format!("fsx: {ops} ops on 4 files <= 256 KiB"),
        files: 4,
        avfs: a,
        native: Some(n),
        label: Some(format!("{ops} ops")),
        ..Default::default()
    });
    notes.push(format!(
        "fsx: vault + WAL at most {} while it ran (sampled every 1000 ops), {} after unmount; `avfs vault verify` {}",
        human(top),
        human(after),
        fmt_secs(verify.as_secs_f64())
    ));
    Ok(GroupResult {
        rows,
        notes,
        extra: Vec::new(),
    })
}

fn human(b: u64) -> String {
    format!("{:.1} MB", b as f64 / 1e6)
}

pub(crate) fn print(r: &GroupResult) {
    println!();
    println!("## space: sparse files and long sessions in a mount");
    println!();
    print_table(["workload", "size", "mount"], &r.rows, &r.extra);
    println!();
    println!(
        "each workload runs in a FUSE mount of a fresh vault and in a plain directory of the same file system (--dir). fsx is an fsx-like workload written for this benchmark (Debian packages no fsx): its operation mix is fsx's (45 % writes of up to 64 KiB at random offsets, 15 % truncates, 5 % punched holes, 35 % reads checked against an in-memory model), each operation on its own open/close."
    );
    println!();
    for n in &r.notes {
        println!("{n}");
    }
}
