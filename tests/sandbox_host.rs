//! The host stays as it was, whatever a default (sandboxed) `avfs exec` tries: the real
//! binary against real host files, sockets and processes.
//!
//! - host files (under /var/tmp, /root, and a visible path) keep their mode, owner,
//!   times and attributes, and cannot be linked;
//! - only the listed read paths exist in the run;
//! - host Unix sockets (pathname and abstract) get no connection;
//! - a fork bomb is held by the run's pid limit and ends with its timeout;
//! - the private /tmp and /dev/shm are bounded;
//! - no setuid or setgid file is ever made on the host's disk;
//! - package managers write their caches, outside the history.
//!
//! Each escape is also tried with `--no-sandbox` where that is harmless, to show the test
//! would notice if the sandbox did nothing. Without the sandbox (no Landlock, no
//! namespaces) the tests skip; with `AVFS_REQUIRE_FUSE=1` they fail instead.

mod common;
#[path = "common/envelope.rs"]
mod envelope;

use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::Env;
use serde_json::Value;

fn required() -> bool {
    std::env::var("AVFS_REQUIRE_FUSE").as_deref() == Ok("1")
}

/// True when sandboxed runs work here; fails the test under `AVFS_REQUIRE_FUSE=1`.
fn can_sandbox(test: &str) -> bool {
    let env = Env::new();
    let r = env.run(&["--json", "exec", "--", "true"]);
    let why = match serde_json::from_str::<Value>(&r.stdout) {
        Ok(v) if v["sandbox"]["enforced"] == true => return true,
        Ok(v) => v.to_string(),
        Err(e) => format!("{e}: {} {}", r.stdout, r.stderr),
    };
    if required() {
        panic!("{test}: the sandbox is required (AVFS_REQUIRE_FUSE=1), but: {why}");
    }
    eprintln!("SKIPPED {test}: {why}");
    false
}

fn setup() -> Env {
    let env = Env::new();
    env.ok(&["vault", "create", "t"]);
    env.allow_all_policy("t");
    env
}

fn write(env: &Env, path: &str, text: &str) {
    env.ok(&["--vault", "t", "write", "-p", path, text]);
}

/// `avfs --json --vault t exec ARGS`: the envelope, checked against its schema.
fn exec(env: &Env, args: &[&str]) -> Value {
    let mut a = vec!["--json", "--vault", "t", "exec"];
    a.extend_from_slice(args);
    let r = env.run(&a);
    let v: Value = serde_json::from_str(&r.stdout).unwrap_or_else(|e| {
        panic!(
            "exec {args:?}: not JSON ({e}): {}\nstderr: {}",
            r.stdout, r.stderr
        )
    });
    assert!(v.get("error").is_none(), "exec {args:?}: {v}\n{}", r.stderr);
    envelope::assert_envelope(&v);
    v
}

fn out(v: &Value) -> String {
    format!(
        "{}{}",
        v["result"]["stdout"].as_str().unwrap_or_default(),
        v["result"]["stderr"].as_str().unwrap_or_default()
    )
}

/// A host file removed when the test ends.
struct HostFile(PathBuf);

impl Drop for HostFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        let _ = std::fs::remove_file(self.0.with_extension("link"));
    }
}

fn canary(dir: &str, tag: &str) -> Option<HostFile> {
    let p = Path::new(dir).join(format!("avfs-canary-{tag}-{}", std::process::id()));
    std::fs::write(&p, "canary\n").ok()?;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: valid C strings and buffer.
    unsafe {
        libc::setxattr(
            c.as_ptr(),
            c"user.avfs".as_ptr(),
            b"1".as_ptr().cast(),
            1,
            0,
        )
    };
    Some(HostFile(p))
}

/// Everything about a file a command could change without writing its bytes.
fn stat(p: &Path) -> (u32, u32, u32, i64, i64, i64, i64, Vec<u8>) {
    let m = std::fs::symlink_metadata(p).unwrap();
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: valid C strings and buffer.
    let n = unsafe { libc::listxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    buf.truncate(n.max(0) as usize);
    (
        m.mode(),
        m.uid(),
        m.gid(),
        m.mtime(),
        m.mtime_nsec(),
        m.atime(),
        m.nlink() as i64,
        buf,
    )
}

/// Tries every metadata change on each path given; prints one line per attempt and
/// exits 1 if any succeeded.
const META_SCRIPT: &str = r#"import os, sys
ok = 0
for p in sys.argv[1:]:
    tries = [
        ("chmod 4755", lambda: os.chmod(p, 0o4755)),
        ("chmod 600", lambda: os.chmod(p, 0o600)),
        ("chown", lambda: os.chown(p, 1234, 1234)),
        ("utime", lambda: os.utime(p, (0, 0))),
        ("setxattr", lambda: os.setxattr(p, "user.avfs", b"2")),
        ("removexattr", lambda: os.removexattr(p, "user.avfs")),
        ("link", lambda: os.link(p, p + ".link")),
        ("link into ws", lambda: os.link(p, "hardlink")),
        ("mknod", lambda: os.mknod(p + ".fifo", 0o10644)),
        ("write", lambda: open(p, "a").write("x")),
    ]
    for name, f in tries:
        try:
            f()
            print(p, name, "SUCCEEDED")
            ok += 1
        except OSError as e:
            print(p, name, "failed:", e.strerror)
sys.exit(1 if ok else 0)
"#;

/// chmod, chown, utimes, setxattr, link and mknod on host files fail in a default run:
/// under /var/tmp and /root (not there at all) and under a visible read-only path.
#[test]
fn host_files_keep_mode_owner_times_and_xattrs() {
    if !can_sandbox("host_files_keep_mode_owner_times_and_xattrs") {
        return;
    }
    let env = setup();
    let files: Vec<HostFile> = [("/var/tmp", "vartmp"), ("/root", "root")]
        .into_iter()
        .filter_map(|(d, t)| canary(d, t))
        .collect();
    assert_eq!(files.len(), 2, "the test needs /var/tmp and /root");
    // A visible path: the directory of the test's own home is not listed, so a host
    // file is made visible through a policy's extra read-only path.
    let visible = env.path("visible");
    std::fs::create_dir_all(&visible).unwrap();
    std::fs::write(
        env.home().join("policy.toml"),
        format!(
            "[sandbox]\nextra_read_only_paths = [\"{}\"]\n",
            visible.display()
        ),
    )
    .unwrap();
    let shown = canary(visible.to_str().unwrap(), "visible").unwrap();
    write(&env, "meta.py", META_SCRIPT);
    let paths: Vec<String> = files
        .iter()
        .chain([&shown])
        .map(|f| f.0.display().to_string())
        .collect();
    let before: Vec<_> = files.iter().chain([&shown]).map(|f| stat(&f.0)).collect();
    let mut args = vec!["--", "python3", "meta.py"];
    args.extend(paths.iter().map(String::as_str));
    let v = exec(&env, &args);
    assert_eq!(v["exit_code"], 0, "an attempt succeeded: {}", out(&v));
    assert_eq!(v["sandbox"]["enforced"], true);
    let after: Vec<_> = files.iter().chain([&shown]).map(|f| stat(&f.0)).collect();
    assert_eq!(before, after, "a host file changed: {}", out(&v));
    assert!(
        out(&v).contains("Read-only file system"),
        "the visible file is read-only: {}",
        out(&v)
    );
    // Without the sandbox the same script changes them: the test can see a change.
    let v = exec(
        &env,
        &["--no-sandbox", "--", "python3", "meta.py", &paths[0]],
    );
    assert_eq!(v["exit_code"], 1, "{}", out(&v));
    assert_ne!(stat(&files[0].0), before[0]);
}

/// Only the listed read paths exist: not /root, /var/tmp, /home, /run (but for what is
/// listed), `$AVFS_HOME` or the vault file.
#[test]
fn only_listed_host_paths_exist() {
    if !can_sandbox("only_listed_host_paths_exist") {
        return;
    }
    let env = setup();
    let marks = [
        canary("/var/tmp", "exists").unwrap(),
        canary("/root", "exists").unwrap(),
    ];
    let home = env.home();
    // /root holds the listed paths below it (~/.cargo/bin, ...), nothing else.
    let script = format!(
        "for p in {m0} {m1} /var /home /run/user /var/run /srv /mnt /boot /root/.bashrc; do \
         [ -e \"$p\" ] && echo \"SEEN $p\"; done; \
         echo \"AVFS_HOME: $(ls -A {home})\"; \
         for p in /usr/bin/env /etc/passwd /dev/null /proc/self/status /tmp /dev/shm; do \
         [ -e \"$p\" ] || echo \"MISSING $p\"; done; \
         touch /newfile 2>/dev/null && echo \"ROOT WRITABLE\"; \
         mkdir -p /tmp/x && echo ok > /tmp/x/y && cat /tmp/x/y",
        m0 = marks[0].0.display(),
        m1 = marks[1].0.display(),
        home = home.display()
    );
    let v = exec(&env, &["--shell", &script]);
    let o = out(&v);
    assert_eq!(v["exit_code"], 0, "{o}");
    assert!(
        !o.contains("SEEN"),
        "a host path outside the list is there: {o}"
    );
    assert!(
        o.contains("AVFS_HOME: ws\n"),
        "only the workspace's path: {o}"
    );
    assert!(!o.contains("MISSING"), "{o}");
    assert!(!o.contains("ROOT WRITABLE"), "{o}");
    assert!(o.contains("ok"), "{o}");
    // The workspace is at its stable path, writable.
    let v = exec(&env, &["--shell", "echo hi > made.txt && pwd"]);
    assert_eq!(v["exit_code"], 0, "{}", out(&v));
    assert_eq!(env.cat(Some("t"), "made.txt"), "hi\n");
    assert_eq!(
        v["result"]["stdout"].as_str().unwrap().trim(),
        v["workspace_path"].as_str().unwrap()
    );
}

/// A host listener on a pathname socket (under /var/tmp) and on an abstract one, that
/// counts the connections it gets.
struct Listeners {
    path: PathBuf,
    abstract_name: String,
    accepted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Listeners {
    fn start() -> Listeners {
        use std::os::linux::net::SocketAddrExt;
        let path = PathBuf::from(format!("/var/tmp/avfs-sock-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let abstract_name = format!("avfs-abstract-{}", std::process::id());
        let accepted = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let by_path = UnixListener::bind(&path).unwrap();
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(&abstract_name).unwrap();
        let by_name = UnixListener::bind_addr(&addr).unwrap();
        for l in [by_path, by_name] {
            l.set_nonblocking(true).unwrap();
            let (a, s) = (accepted.clone(), stop.clone());
            std::thread::spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    match l.accept() {
                        Ok((mut c, _)) => {
                            a.fetch_add(1, Ordering::SeqCst);
                            let _ = std::io::Write::write_all(&mut c, b"pong\n");
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
            });
        }
        Listeners {
            path,
            abstract_name,
            accepted,
            stop,
        }
    }
}

impl Drop for Listeners {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = std::fs::remove_file(&self.path);
    }
}

const SOCK_SCRIPT: &str = r#"import socket, sys
for name, addr in [("path", sys.argv[1]), ("abstract", "\0" + sys.argv[2])]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(addr)
        print(name, "CONNECTED", s.recv(8))
    except OSError as e:
        print(name, "no connection:", e.strerror)
"#;

/// No host Unix socket can be reached: the pathname one is not in the run's tree, the
/// abstract one is out of scope (Landlock), also when the network is granted.
#[test]
fn host_unix_sockets_get_no_connection() {
    if !can_sandbox("host_unix_sockets_get_no_connection") {
        return;
    }
    let env = setup();
    let l = Listeners::start();
    write(&env, "sock.py", SOCK_SCRIPT);
    let p = l.path.display().to_string();
    let args = ["--", "python3", "sock.py", &p, &l.abstract_name];
    let v = exec(&env, &args);
    assert_eq!(v["exit_code"], 0, "{}", out(&v));
    assert!(!out(&v).contains("CONNECTED"), "{}", out(&v));
    std::fs::write(
        env.home().join("policy.toml"),
        "[sandbox]\nnetwork = true\n",
    )
    .unwrap();
    let v = exec(&env, &args);
    assert_eq!(v["sandbox"]["network"], true, "{v}");
    assert!(!out(&v).contains("CONNECTED"), "with network: {}", out(&v));
    assert_eq!(l.accepted.load(Ordering::SeqCst), 0);
    // Without the sandbox both answer: the listeners work.
    let mut a = vec!["--no-sandbox"];
    a.extend_from_slice(&args);
    let v = exec(&env, &a);
    assert_eq!(out(&v).matches("CONNECTED").count(), 2, "{}", out(&v));
    assert_eq!(l.accepted.load(Ordering::SeqCst), 2);
}

/// Host processes whose environment holds `needle`.
fn processes_with_env(needle: &[u8]) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if !e.file_name().as_encoded_bytes()[0].is_ascii_digit() {
            continue;
        }
        let mut buf = vec![];
        if std::fs::File::open(e.path().join("environ"))
            .and_then(|mut f| f.read_to_end(&mut buf))
            .is_ok()
            && buf.windows(needle.len()).any(|w| w == needle)
        {
            n += 1;
        }
    }
    n
}

/// A fork bomb is held by the run's pid limit (a cgroup) and ends with its timeout;
/// the envelope reports the limits in force, the default ones without flags.
#[test]
fn a_fork_bomb_is_held_by_the_pid_limit() {
    if !can_sandbox("a_fork_bomb_is_held_by_the_pid_limit") {
        return;
    }
    let env = setup();
    let v = exec(&env, &["--", "true"]);
    let limits = &v["sandbox"]["limits"];
    assert_eq!(limits["pids"], 4096, "{v}");
    assert_eq!(limits["tmp_bytes"], 1u64 << 30);
    assert_eq!(limits["shm_bytes"], 64u64 << 20);
    assert!(limits["memory_bytes"].is_null());
    let tag = format!("AVFS_BOMB_{}", std::process::id());
    let needle = format!("{tag}=1");
    let stop = Arc::new(AtomicBool::new(false));
    let most = Arc::new(AtomicUsize::new(0));
    let watcher = {
        let (stop, most, needle) = (stop.clone(), most.clone(), needle.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let n = processes_with_env(needle.as_bytes());
                most.fetch_max(n, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    // Every process forks for good; a refused fork is tried again.
    write(
        &env,
        "bomb.py",
        "import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        time.sleep(0.01)\n",
    );
    let started = Instant::now();
    let env_arg = format!("{tag}=1");
    let v = exec(
        &env,
        &[
            "--timeout",
            "5",
            "--pids-limit",
            "64",
            "--env",
            &env_arg,
            "--",
            "python3",
            "bomb.py",
        ],
    );
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    watcher.join().unwrap();
    assert_eq!(v["result"]["timed_out"], true, "{v}");
    assert_eq!(v["sandbox"]["limits"]["pids"], 64, "{v}");
    assert!(v["sandbox"]["limits"]["cgroup"].is_string(), "{v}");
    let most = most.load(Ordering::SeqCst);
    assert!(most > 8, "the bomb did not run: {most} processes, {v}");
    assert!(most <= 64, "{most} processes of the run at once");
    assert!(
        took < Duration::from_secs(7),
        "exec took {took:?} with --timeout 5"
    );
    assert_eq!(processes_with_env(needle.as_bytes()), 0);
}

/// The private /tmp and /dev/shm are as big as asked, no bigger; bad sizes are refused.
#[test]
fn private_tmp_and_shm_are_bounded() {
    if !can_sandbox("private_tmp_and_shm_are_bounded") {
        return;
    }
    let env = setup();
    for (flag, dir) in [("--tmp-size", "/tmp"), ("--shm-size", "/dev/shm")] {
        let line = format!(
            "dd if=/dev/zero of={dir}/big bs=1M count=12 2>&1; ls -l {dir}/big | awk '{{print $5}}'"
        );
        let v = exec(&env, &[flag, "8M", "--shell", &line]);
        let o = out(&v);
        assert!(o.contains("No space left"), "{flag}: {o}");
        let size: u64 = o.lines().last().unwrap().trim().parse().unwrap();
        assert!(size <= 8 << 20, "{flag}: {size} bytes written");
        let v = exec(&env, &[flag, "16M", "--shell", &line]);
        assert_eq!(v["exit_code"], 0, "{flag} 16M: {}", out(&v));
        let key = if dir == "/tmp" {
            "tmp_bytes"
        } else {
            "shm_bytes"
        };
        assert_eq!(v["sandbox"]["limits"][key], 16u64 << 20, "{v}");
    }
    let r = env.run(&[
        "--json",
        "--vault",
        "t",
        "exec",
        "--tmp-size",
        "lots",
        "--",
        "true",
    ]);
    assert_ne!(r.code, 0);
    assert!(r.stdout.contains("--tmp-size"), "{}", r.stdout);
}

/// `--memory` bounds what the run may allocate, where the host lets avfs make a memory
/// cgroup: a 200 MiB allocation under 64 MiB is killed.
#[test]
fn memory_is_bounded_where_the_host_allows_it() {
    if !can_sandbox("memory_is_bounded_where_the_host_allows_it") {
        return;
    }
    let env = setup();
    let v = exec(
        &env,
        &[
            "--memory",
            "64M",
            "--",
            "python3",
            "-c",
            "b = bytearray(200 << 20); print('allocated')",
        ],
    );
    let limits = &v["sandbox"]["limits"];
    if limits["memory_bytes"].is_null() {
        assert!(
            !required(),
            "no memory cgroup with AVFS_REQUIRE_FUSE=1: {limits}"
        );
        eprintln!("SKIPPED: no memory cgroup here: {limits}");
        return;
    }
    assert_eq!(limits["memory_bytes"], 64u64 << 20, "{v}");
    assert_ne!(v["exit_code"], 0, "{v}");
    assert!(!out(&v).contains("allocated"), "{}", out(&v));
    let v = exec(
        &env,
        &[
            "--",
            "python3",
            "-c",
            "b = bytearray(200 << 20); print('allocated')",
        ],
    );
    assert_eq!(v["exit_code"], 0, "without --memory: {}", out(&v));
}

/// Files below `dir` with a setuid or setgid bit.
fn setid_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let Ok(m) = e.path().symlink_metadata() else {
            continue;
        };
        if m.is_dir() {
            out.extend(setid_files(&e.path()));
        }
        if !m.file_type().is_symlink() && m.mode() & 0o6000 != 0 {
            out.push(e.path());
        }
    }
    out
}

const SETUID_SCRIPT: &str = r#"import os, shutil, stat
tries = [
    ("chmod u+s", lambda: os.chmod("rootsh", 0o4755)),
    ("chmod g+s", lambda: os.chmod("rootsh", 0o2755)),
    ("fchmod u+s", lambda: os.fchmod(os.open("rootsh", os.O_RDONLY), 0o4755)),
    ("open O_CREAT 4755", lambda: os.open("made", os.O_CREAT | os.O_WRONLY, 0o4755)),
    ("mkdir 2775", lambda: os.mkdir("dir", 0o2775)),
    ("chmod dir g+s", lambda: os.chmod("plain", 0o2755)),
    ("in /tmp", lambda: (shutil.copy("rootsh", "/tmp/r"), os.chmod("/tmp/r", 0o4755))),
]
ok = 0
for name, f in tries:
    try:
        f()
        print(name, "SUCCEEDED")
        ok += 1
    except OSError as e:
        print(name, "failed:", e.strerror)
for p in ["rootsh", "made", "dir", "plain"]:
    if os.path.exists(p) and os.stat(p).st_mode & 0o6000:
        print(p, "HAS THE BIT")
        ok += 1
exit(1 if ok else 0)
"#;

/// No setuid or setgid bit is set in a run, none is left anywhere under `$AVFS_HOME`,
/// and the directories of uppers are 0700.
#[test]
fn setuid_bits_never_reach_the_host_disk() {
    if !can_sandbox("setuid_bits_never_reach_the_host_disk") {
        return;
    }
    let env = setup();
    write(&env, "setuid.py", SETUID_SCRIPT);
    let v = exec(
        &env,
        &[
            "--shell",
            "cp /bin/sh rootsh && mkdir plain && python3 setuid.py",
        ],
    );
    assert_eq!(v["exit_code"], 0, "{}", out(&v));
    assert!(
        out(&v).contains("chmod u+s failed: Operation not permitted"),
        "{}",
        out(&v)
    );
    let left = setid_files(&env.home());
    assert!(
        left.is_empty(),
        "setuid/setgid files under $AVFS_HOME: {left:?}"
    );
    for d in ["runs", "kept", "layers"] {
        let p = env.home().join(d);
        if let Ok(m) = std::fs::metadata(&p) {
            assert_eq!(m.mode() & 0o777, 0o700, "{d}");
        }
    }
    // Without the sandbox (root) chmod u+s works; the bit is dropped from the history
    // and from the upper alike.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let v = exec(&env, &["--no-sandbox", "--shell", "chmod 4755 rootsh"]);
        assert_eq!(v["exit_code"], 0, "{}", out(&v));
        let left = setid_files(&env.home());
        assert!(left.is_empty(), "after --no-sandbox: {left:?}");
        let st = env.json(&["--vault", "t", "stat", "rootsh"]);
        assert_eq!(st["mode"], "0755", "{st}");
    }
}

/// npm and pip write their caches at their default places; the caches are the vault's,
/// outside its history, the host's stay as they were, and they go with the vault.
#[test]
fn package_caches_are_writable_and_outside_the_history() {
    if !can_sandbox("package_caches_are_writable_and_outside_the_history") {
        return;
    }
    let env = setup();
    let home = std::env::var("HOME").unwrap();
    let probe = format!("avfs-probe-{}", std::process::id());
    let host_pip = Path::new(&home).join(".cache/pip").join(&probe);
    let line = format!(
        "mkdir -p ~/.cache/pip && echo cached > ~/.cache/pip/{probe} && cat ~/.cache/pip/{probe}"
    );
    let v = exec(&env, &["--shell", &line]);
    assert_eq!(v["exit_code"], 0, "{}", out(&v));
    assert!(!host_pip.exists(), "the run wrote the host's cache");
    let caches: Vec<&str> = v["sandbox"]["writable_caches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(caches.iter().any(|c| c.ends_with("/.npm")), "{caches:?}");
    assert!(
        v["changes"].as_array().unwrap().is_empty(),
        "a cache is not part of the history: {v}"
    );
    // The next run sees what the last one cached.
    let v = exec(&env, &["--shell", &format!("cat ~/.cache/pip/{probe}")]);
    assert_eq!(v["result"]["stdout"], "cached\n", "{}", out(&v));
    // npm caches a package: `npm cache add` of a local tarball, no network.
    if Path::new("/usr/bin/npm").exists() {
        write(
            &env,
            "pkg/package.json",
            "{\"name\": \"avfs-cache-probe\", \"version\": \"1.0.0\"}\n",
        );
        let host_npm = Path::new(&home).join(".npm");
        let before = entry_count(&host_npm);
        let v = exec(
            &env,
            &[
                "--shell",
                "cd pkg && npm pack --silent && npm cache add ./avfs-cache-probe-1.0.0.tgz && \
                 npm cache ls 2>/dev/null | head -3; ls ~/.npm/_cacache",
            ],
        );
        assert_eq!(v["exit_code"], 0, "{}", out(&v));
        assert!(out(&v).contains("content-v2"), "{}", out(&v));
        assert_eq!(entry_count(&host_npm), before, "the host's ~/.npm changed");
    }
    let dir = env.home().join("caches");
    assert!(std::fs::read_dir(&dir).unwrap().count() == 1);
    env.ok(&["vault", "delete", "t", "--yes"]);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "caches left");
}

/// Entries below `dir` (to see that a host cache did not change).
fn entry_count(dir: &Path) -> usize {
    fn walk(d: &Path) -> usize {
        let Ok(rd) = std::fs::read_dir(d) else {
            return 0;
        };
        rd.flatten()
            .map(|e| {
                1 + if e.path().is_dir() && !e.path().is_symlink() {
                    walk(&e.path())
                } else {
                    0
                }
            })
            .sum()
    }
    walk(dir)
}
