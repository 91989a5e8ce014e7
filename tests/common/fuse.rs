//! Real FUSE mounts for tests: mount a workspace, compare operations against a native
//! directory, call libc directly and get the exact errno back.
//!
//! Include with `mod common; #[path = "common/fuse.rs"] mod fuse;`.
#![allow(clippy::macro_metavars_in_unsafe)]
#![allow(dead_code)]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::Env;

/// Why FUSE cannot be used here, if it cannot.
pub fn fuse_unusable() -> Option<String> {
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
    {
        Ok(_) => None,
        Err(e) => Some(format!("/dev/fuse: {e}")),
    }
}

/// True when the test may go on. With `AVFS_REQUIRE_FUSE=1` an unusable FUSE fails the test.
pub fn fuse_or_skip(test: &str) -> bool {
    match fuse_unusable() {
        None => true,
        Some(why) => {
            if std::env::var("AVFS_REQUIRE_FUSE").as_deref() == Ok("1") {
                panic!("{test}: FUSE is required (AVFS_REQUIRE_FUSE=1) but unusable: {why}");
            }
            eprintln!("SKIPPED {test}: FUSE unusable ({why})");
            false
        }
    }
}

fn mount_probe() -> &'static Result<(), String> {
    static P: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        if let Some(why) = fuse_unusable() {
            return Err(why);
        }
        let env = Env::new();
        env.ok(&["vault", "create", "probe"]);
        let mp = env.path("probe-mnt");
        std::fs::create_dir_all(&mp).unwrap();
        let r = env.run(&["mount", "probe", mp.to_str().unwrap()]);
        if r.code != 0 {
            return Err(format!("avfs mount failed: {}", r.stderr.trim()));
        }
        let r = env.run(&["unmount", mp.to_str().unwrap()]);
        if r.code != 0 {
            force_detach(&mp);
        }
        Ok(())
    })
}

/// True when a real mount works here (probed once per test binary), so a test may run
/// commands; with `AVFS_REQUIRE_FUSE=1` a failing mount fails the test.
pub fn can_mount(test: &str) -> bool {
    match mount_probe() {
        Ok(()) => true,
        Err(why) => {
            if std::env::var("AVFS_REQUIRE_FUSE").as_deref() == Ok("1") {
                panic!("{test}: FUSE is required (AVFS_REQUIRE_FUSE=1) but mounting fails: {why}");
            }
            eprintln!("SKIPPED {test}: cannot mount ({why})");
            false
        }
    }
}

/// A mounted workspace next to a native directory on the same disk.
pub struct Mount {
    pub env: Env,
    /// The mountpoint.
    pub mp: PathBuf,
    /// A native directory for differential checks.
    pub native: PathBuf,
    pub vault: String,
    pub args: Vec<String>,
    /// Environment variables of `avfs mount` (and so of its server).
    pub envs: Vec<(String, String)>,
    mounted: bool,
}

impl Mount {
    /// A fresh vault mounted at a fresh directory; `None` (skip) when FUSE is unusable.
    pub fn new(test: &str) -> Option<Mount> {
        Mount::with_args(test, &[])
    }

    pub fn with_args(test: &str, args: &[&str]) -> Option<Mount> {
        Mount::with_env(test, args, &[])
    }

    /// A mount whose server runs with `envs` in its environment.
    pub fn with_env(test: &str, args: &[&str], envs: &[(&str, &str)]) -> Option<Mount> {
        if !fuse_or_skip(test) {
            return None;
        }
        let env = Env::new();
        env.ok(&["vault", "create", "t"]);
        let mp = env.path("mnt");
        let native = env.path("native");
        std::fs::create_dir_all(&mp).unwrap();
        std::fs::create_dir_all(&native).unwrap();
        let mut m = Mount {
            env,
            mp,
            native,
            vault: "t".into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            envs: envs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            mounted: false,
        };
        m.mount();
        Some(m)
    }

    pub fn mount(&mut self) {
        let mp = self.mp.to_str().unwrap().to_string();
        let mut a: Vec<&str> = vec!["mount", &self.vault, &mp];
        a.extend(self.args.iter().map(|s| s.as_str()));
        let out = self
            .env
            .cmd(&a)
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "avfs {a:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.mounted = true;
        assert!(
            is_mountpoint(&self.mp),
            "{} is not a mountpoint",
            self.mp.display()
        );
    }

    pub fn unmount(&mut self) {
        let mp = self.mp.to_str().unwrap().to_string();
        self.env.ok(&["unmount", &mp]);
        self.mounted = false;
        assert!(
            !is_mountpoint(&self.mp),
            "{} still mounted",
            self.mp.display()
        );
    }

    pub fn remount(&mut self) {
        self.unmount();
        self.mount();
    }

    /// A path inside the mount.
    /// The server's request counters (`counters` on its control socket): op -> count.
    pub fn counters(&self) -> serde_json::Value {
        use std::io::{BufRead, Write};
        let mounts = self.env.json(&["mounts"]);
        let socket = mounts["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| Path::new(m["mountpoint"].as_str().unwrap()) == self.mp)
            .map(|m| m["socket"].as_str().unwrap().to_string())
            .expect("the mount is listed");
        let mut s = std::os::unix::net::UnixStream::connect(socket).unwrap();
        writeln!(s, "{}", serde_json::json!({"op": "counters"})).unwrap();
        let mut line = String::new();
        std::io::BufReader::new(s).read_line(&mut line).unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["ok"], true, "{v}");
        v["counters"].clone()
    }

    pub fn p(&self, rel: &str) -> PathBuf {
        self.mp.join(rel)
    }

    /// `avfs --vault t ARGS...`, insisting on success; stdout.
    pub fn avfs(&self, args: &[&str]) -> String {
        let mut a = vec!["--vault", self.vault.as_str()];
        a.extend_from_slice(args);
        self.env.ok(&a).stdout
    }

    pub fn avfs_json(&self, args: &[&str]) -> serde_json::Value {
        let mut a = vec!["--vault", self.vault.as_str()];
        a.extend_from_slice(args);
        self.env.json(&a)
    }

    /// The raw bytes `avfs cat PATH` prints.
    pub fn avfs_cat(&self, path: &str) -> Vec<u8> {
        let out = self
            .env
            .cmd(["--vault", self.vault.as_str(), "cat", path])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "avfs cat {path}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// Runs `f` on a fresh subdirectory `name` of the native dir and of the mount and
    /// asserts both give the same result; returns it.
    pub fn same<T: PartialEq + std::fmt::Debug>(&self, name: &str, f: impl Fn(&Path) -> T) -> T {
        let a = self.native.join(name);
        let b = self.mp.join(name);
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        let want = f(&a);
        let got = f(&b);
        assert_eq!(
            got, want,
            "{name}: mount (left) differs from native (right)"
        );
        got
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if self.mounted {
            let mp = self.mp.to_str().unwrap().to_string();
            let r = self.env.run(&["unmount", &mp]);
            if r.code != 0 || is_mountpoint(&self.mp) {
                force_detach(&self.mp);
            }
        }
    }
}

pub fn is_mountpoint(path: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = path.to_string_lossy().to_string();
    info.lines()
        .any(|l| l.split(' ').nth(4).map(|m| m.replace("\\040", " ")) == Some(want.clone()))
}

pub fn force_detach(path: &Path) {
    let c = cs(path);
    // SAFETY: valid NUL-terminated path.
    unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
}

// ---------------------------------------------------------------- libc helpers

pub fn cs(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

pub fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// `-1` becomes `Err(errno)`.
pub fn ck(r: i64) -> Result<i64, i32> {
    if r == -1 { Err(last_errno()) } else { Ok(r) }
}

/// Calls a libc function (unsafe) and turns `-1` into `Err(errno)`.
#[macro_export]
macro_rules! sc {
    ($e:expr) => {
        $crate::fuse::ck(unsafe { $e } as i64)
    };
}

/// An owned fd that closes on drop (and whose close result can be checked).
pub struct Fd(pub i32);

impl Fd {
    pub fn close(mut self) -> Result<(), i32> {
        let fd = std::mem::replace(&mut self.0, -1);
        sc!(libc::close(fd)).map(|_| ())
    }
    pub fn write(&self, data: &[u8]) -> Result<usize, i32> {
        sc!(libc::write(self.0, data.as_ptr().cast(), data.len())).map(|n| n as usize)
    }
    pub fn pwrite(&self, data: &[u8], off: i64) -> Result<usize, i32> {
        sc!(libc::pwrite(self.0, data.as_ptr().cast(), data.len(), off)).map(|n| n as usize)
    }
    pub fn read(&self, n: usize) -> Result<Vec<u8>, i32> {
        let mut buf = vec![0u8; n];
        let got = sc!(libc::read(self.0, buf.as_mut_ptr().cast(), n))?;
        buf.truncate(got as usize);
        Ok(buf)
    }
    pub fn pread(&self, n: usize, off: i64) -> Result<Vec<u8>, i32> {
        let mut buf = vec![0u8; n];
        let got = sc!(libc::pread(self.0, buf.as_mut_ptr().cast(), n, off))?;
        buf.truncate(got as usize);
        Ok(buf)
    }
    /// Reads until EOF from offset 0.
    pub fn read_all(&self) -> Result<Vec<u8>, i32> {
        let mut out = Vec::new();
        loop {
            let b = self.pread(1 << 20, out.len() as i64)?;
            if b.is_empty() {
                return Ok(out);
            }
            out.extend_from_slice(&b);
        }
    }
    pub fn lseek(&self, off: i64, whence: i32) -> Result<i64, i32> {
        sc!(libc::lseek(self.0, off, whence))
    }
    pub fn fstat(&self) -> Result<libc::stat, i32> {
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        sc!(libc::fstat(self.0, &mut st))?;
        Ok(st)
    }
    pub fn ftruncate(&self, len: i64) -> Result<(), i32> {
        sc!(libc::ftruncate(self.0, len)).map(|_| ())
    }
    pub fn fsync(&self) -> Result<(), i32> {
        sc!(libc::fsync(self.0)).map(|_| ())
    }
    pub fn fdatasync(&self) -> Result<(), i32> {
        sc!(libc::fdatasync(self.0)).map(|_| ())
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        if self.0 >= 0 {
            unsafe { libc::close(self.0) };
        }
    }
}

pub fn open(p: &Path, flags: i32, mode: u32) -> Result<Fd, i32> {
    let c = cs(p);
    sc!(libc::open(c.as_ptr(), flags | libc::O_CLOEXEC, mode)).map(|fd| Fd(fd as i32))
}

pub fn lstat(p: &Path) -> Result<libc::stat, i32> {
    let c = cs(p);
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    sc!(libc::lstat(c.as_ptr(), &mut st))?;
    Ok(st)
}

pub fn stat(p: &Path) -> Result<libc::stat, i32> {
    let c = cs(p);
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    sc!(libc::stat(c.as_ptr(), &mut st))?;
    Ok(st)
}

/// The parts of a stat that a workspace keeps exactly like a native filesystem.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct St {
    pub fmt: u32,
    pub perm: u32,
    pub size: i64,
    pub nlink: u64,
    pub uid: u32,
    pub gid: u32,
}

/// lstat reduced to `St`; directory sizes and nlink are filesystem-specific, so they are zeroed.
pub fn st(p: &Path) -> Result<St, i32> {
    lstat(p).map(|s| st_of(&s))
}

pub fn st_of(s: &libc::stat) -> St {
    let fmt = s.st_mode & libc::S_IFMT;
    let dir = fmt == libc::S_IFDIR;
    St {
        fmt,
        perm: s.st_mode & 0o7777,
        size: if dir { 0 } else { s.st_size },
        nlink: if dir { 0 } else { s.st_nlink },
        uid: s.st_uid,
        gid: s.st_gid,
    }
}

pub fn file_size(p: &Path) -> u64 {
    std::fs::symlink_metadata(p).unwrap().size()
}

/// Directory entry names (without . and ..), sorted.
pub fn names(dir: &Path) -> Result<Vec<Vec<u8>>, i32> {
    let rd = std::fs::read_dir(dir).map_err(|e| e.raw_os_error().unwrap_or(0))?;
    let mut v: Vec<Vec<u8>> = rd
        .map(|e| e.unwrap().file_name().as_bytes().to_vec())
        .collect();
    v.sort();
    Ok(v)
}

/// std::io results reduced to their errno.
pub fn en<T>(r: std::io::Result<T>) -> Result<T, i32> {
    r.map_err(|e| e.raw_os_error().unwrap_or(-1))
}

/// Polls `f` until true (for the few things that are asynchronous by design).
pub fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..200 {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("timed out waiting for {what}");
}

/// A tiny deterministic PRNG (xorshift*), so tests need no extra crates.
pub struct Rng(pub u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n + 8);
        while v.len() < n {
            v.extend_from_slice(&self.next().to_le_bytes());
        }
        v.truncate(n);
        v
    }
}
