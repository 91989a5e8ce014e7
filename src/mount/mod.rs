//! Serving a workspace over FUSE, the records of live mounts, and the control socket
//! other `avfs` processes use to get a consistent view of a mounted workspace.

mod buffer;
pub mod control;
mod fs;
mod ignored;
pub mod spawn;
mod wal;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::workspace::Store;
pub use fs::AvfsFs;
pub use ignored::{IgnoredPolicy, ReadRuleFile};

/// One live mount, as recorded under `$AVFS_HOME/run/mounts/`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MountRecord {
    pub id: String,
    pub vault: String,
    pub vault_path: PathBuf,
    pub workspace: String,
    pub mountpoint: PathBuf,
    pub pid: u32,
    pub socket: PathBuf,
    pub readonly: bool,
    pub started_at_ns: i64,
}

pub fn run_dir(home: &Path) -> PathBuf {
    home.join("run")
}

/// The directory of a workspace's ignored files (see `engine::ignored`), which the mount
/// shows, and changes when given an `IgnoredPolicy`.
pub fn ignored_dir(home: &Path, vault_path: &Path, workspace: &str) -> PathBuf {
    home.join("ignored").join(mount_id(vault_path, workspace))
}

/// Stable id of (vault file, workspace): one mount at a time per workspace.
pub fn mount_id(vault_path: &Path, workspace: &str) -> String {
    let mut h = blake3::Hasher::new();
    h.update(vault_path.as_os_str().as_encoded_bytes());
    h.update(b"\0");
    h.update(workspace.as_bytes());
    h.finalize().to_hex()[..16].to_string()
}

fn record_path(home: &Path, id: &str) -> PathBuf {
    run_dir(home).join("mounts").join(format!("{id}.json"))
}

pub fn pid_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let exists = unsafe {
        libc::kill(pid as i32, 0) == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
    };
    // A killed server stays a zombie until its parent (often init) reaps it: dead.
    exists && !crate::procs::stat(pid as i32).is_some_and(|p| p.zombie)
}

/// Is something mounted at `path` right now (per /proc/self/mountinfo)?
pub fn is_mountpoint(path: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = path.to_string_lossy();
    info.lines()
        .any(|l| l.split(' ').nth(4).map(|m| m.replace("\\040", " ")) == Some(want.to_string()))
}

/// Detaches whatever is mounted at `path` (also a dead server's "transport endpoint is
/// not connected" mount).
pub fn force_unmount(path: &Path) -> Result<()> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| Error::InvalidName(path.display().to_string()))?;
    // SAFETY: `c` is a valid NUL-terminated path.
    let r = unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EPERM) {
            let st = std::process::Command::new("fusermount3")
                .arg("-uz")
                .arg(path)
                .status();
            if st.map(|s| s.success()).unwrap_or(false) {
                return Ok(());
            }
        }
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(Error::host(format!("unmount {}", path.display()), e));
        }
    }
    Ok(())
}

/// All recorded mounts; records of dead servers are cleaned up (and their stale
/// mountpoints detached) on the way.
pub fn list_mounts(home: &Path) -> Result<Vec<MountRecord>> {
    let dir = run_dir(home).join("mounts");
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return Ok(out);
    };
    for e in rd.flatten() {
        // Only finished records: a server writes `<id>.tmp` and renames it.
        if e.path().extension().is_none_or(|x| x != "json") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        let Ok(rec) = serde_json::from_str::<MountRecord>(&text) else {
            let _ = std::fs::remove_file(e.path());
            continue;
        };
        if pid_alive(rec.pid) {
            out.push(rec);
        } else {
            if is_mountpoint(&rec.mountpoint) {
                let _ = force_unmount(&rec.mountpoint);
            }
            let _ = std::fs::remove_file(e.path());
            let _ = std::fs::remove_file(&rec.socket);
        }
    }
    out.sort_by(|a, b| a.mountpoint.cmp(&b.mountpoint));
    Ok(out)
}

/// A mountpoint must be an existing directory; a missing one is `not_found` with the
/// way to make it, not "not a directory".
pub fn check_mountpoint(mountpoint: &Path) -> Result<()> {
    if mountpoint.is_dir() || is_mountpoint(mountpoint) {
        return Ok(());
    }
    if std::fs::symlink_metadata(mountpoint).is_err() {
        return Err(Error::NotFound(format!(
            "{} (the mountpoint does not exist; create it first: mkdir -p {})",
            mountpoint.display(),
            mountpoint.display()
        )));
    }
    Err(Error::NotADirectory(format!(
        "{} (a mountpoint must be an existing directory)",
        mountpoint.display()
    )))
}

pub fn find_mount(home: &Path, vault_path: &Path, workspace: &str) -> Result<Option<MountRecord>> {
    let id = mount_id(vault_path, workspace);
    Ok(list_mounts(home)?.into_iter().find(|r| r.id == id))
}

/// Set in the environment of `avfs mount` by a process the mount must not outlive (the
/// MCP server's session mount): its pid. The server unmounts when that process ends, also
/// when it is killed with SIGKILL and cannot unmount itself.
pub const OWNER_ENV: &str = "AVFS_MOUNT_OWNER";

pub struct ServeOptions {
    pub home: PathBuf,
    pub vault: String,
    pub vault_path: PathBuf,
    pub workspace: String,
    pub mountpoint: PathBuf,
    pub readonly: bool,
    pub allow_other: bool,
    /// Unmount when this process ends (see `OWNER_ENV`).
    pub owner: Option<u32>,
    /// Makes the workspace's ignored files writable through the mount (`None`: shown
    /// read-only).
    pub ignored: Option<Box<dyn IgnoredPolicy>>,
    /// Called once the mount is live and the control socket listens.
    pub on_ready: Box<dyn FnOnce(&MountRecord) + Send>,
}

fn stop_signals() -> libc::sigset_t {
    // SAFETY: plain signal-mask manipulation on a zeroed sigset.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Blocks SIGTERM/SIGINT/SIGHUP in this thread and the threads it starts later: one that
/// arrives before `catch_signals` waits for it stays pending instead of killing the
/// process between mounting and listening (exec's servers get SIGTERM when exec dies).
fn block_signals() {
    let set = stop_signals();
    // SAFETY: changes this thread's signal mask only.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
}

/// Blocks SIGTERM/SIGINT/SIGHUP in this thread (and the threads it starts) and waits for
/// them on a thread of its own, which unmounts cleanly.
fn catch_signals(unmount: impl FnOnce() + Send + 'static) {
    let set = stop_signals();
    // SAFETY: plain signal-mask manipulation; sigwait on the blocked set.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        std::thread::spawn(move || {
            let mut sig = 0;
            libc::sigwait(&set, &mut sig);
            unmount();
        });
    }
}

/// Sends this process SIGTERM (a clean unmount, see `catch_signals`) once `owner` has
/// ended. A pidfd makes the kernel say when, with no polling, and cannot confuse the owner
/// with a later process that reuses its pid.
fn unmount_when_gone(owner: u32) {
    let fd = crate::pidfd::Pidfd::open(owner as libc::pid_t);
    let gone_already = fd
        .as_ref()
        .is_err_and(|e| e.raw_os_error() == Some(libc::ESRCH));
    std::thread::spawn(move || {
        if let Ok(fd) = fd {
            fd.wait_exit(None);
        } else if !gone_already {
            // No pidfds (a kernel before 5.3): look once a second.
            while pid_alive(owner) {
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
        }
        // SAFETY: signals this process; the signal thread unmounts.
        unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
    });
}

/// Mounts and serves until unmounted. Refuses a workspace that is already mounted.
pub fn serve(mut opts: ServeOptions) -> Result<()> {
    block_signals();
    if let Some(m) = find_mount(&opts.home, &opts.vault_path, &opts.workspace)? {
        return Err(Error::Refused(format!(
            "workspace {} of {} is already mounted at {} (pid {})",
            opts.workspace,
            opts.vault,
            m.mountpoint.display(),
            m.pid
        )));
    }
    let mountpoint = std::path::absolute(&opts.mountpoint)
        .map_err(|e| Error::host(opts.mountpoint.display(), e))?;
    if !mountpoint.is_dir() && is_mountpoint(&mountpoint) {
        // A dead server's mount: clean it up and carry on.
        force_unmount(&mountpoint)?;
    }
    check_mountpoint(&mountpoint)?;
    let store = Store::open(&opts.vault_path)?;
    // Checkpoints run on the WAL thread (see `wal`), not in a request's commit, unless
    // the WAL passes `wal::CAP_BYTES`.
    wal::set_backstop(&store)?;
    let wal_upkeep = wal::WalUpkeep::start(&opts.vault_path)?;
    crate::workspace::find_workspace(&store.conn, &opts.workspace)?
        .ok_or_else(|| Error::NoSuchVault(opts.workspace.clone()))?;
    let fs = AvfsFs::new(store, &opts.workspace, opts.readonly)?;
    let policy = opts.ignored.take().filter(|_| !opts.readonly);
    fs.show_ignored(
        ignored_dir(&opts.home, &opts.vault_path, &opts.workspace),
        policy,
    );

    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName(format!("avfs:{}", opts.vault)),
        fuser::MountOption::Subtype("avfs".into()),
        fuser::MountOption::DefaultPermissions,
        fuser::MountOption::NoAtime,
        fuser::MountOption::NoDev,
        fuser::MountOption::NoSuid,
        if opts.readonly {
            fuser::MountOption::RO
        } else {
            fuser::MountOption::RW
        },
    ];
    if opts.allow_other {
        config.acl = fuser::SessionACL::All;
    }
    config.n_threads = Some(2);
    config.clone_fd = true;

    let id = mount_id(&opts.vault_path, &opts.workspace);
    let run = run_dir(&opts.home);
    std::fs::create_dir_all(run.join("mounts")).map_err(|e| Error::host(run.display(), e))?;
    let socket = run.join(format!("{id}.sock"));
    let _ = std::fs::remove_file(&socket);

    let fs = Arc::new(fs);
    let mut session = fuser::Session::new(SharedFs(fs.clone()), &mountpoint, &config)
        .map_err(|e| Error::host(format!("mount {}", mountpoint.display()), e))?;
    let notifier = session.notifier();
    let mut unmounter = session.unmount_callable();
    let record = MountRecord {
        id: id.clone(),
        vault: opts.vault.clone(),
        vault_path: opts.vault_path.clone(),
        workspace: opts.workspace.clone(),
        mountpoint: mountpoint.clone(),
        pid: std::process::id(),
        socket: socket.clone(),
        readonly: opts.readonly,
        started_at_ns: crate::workspace::now_ns(),
    };
    let listener = std::os::unix::net::UnixListener::bind(&socket)
        .map_err(|e| Error::host(socket.display(), e))?;
    let unmount_mp = mountpoint.clone();
    let server = control::Server {
        fs: fs.clone(),
        notifier,
        mountpoint: mountpoint.clone(),
        record: record.clone(),
    };
    spawn_upkeep("avfs-control", move || server.serve(listener))?;
    fs.audit_start(&mountpoint, opts.readonly)?;
    let batcher = fs.clone();
    let batch_notifier = session.notifier();
    let audit_every = fs::audit_every();
    spawn_upkeep("avfs-upkeep", move || {
        let (mut reclaimed, mut audited, mut trimmed) =
            (Instant::now(), Instant::now(), Instant::now());
        let (mut requests, mut trimmed_lull) = (0u64, false);
        loop {
            batcher.wait_for_work(std::time::Duration::from_millis(20));
            batcher.commit_if_stale();
            if batcher.take_refused() {
                let _ = control::invalidate(&batcher, &batch_notifier);
            }
            // Upkeep off the request path: space reclaim and the session's audit rows.
            if reclaimed.elapsed() >= fs::RECLAIM_EVERY || batcher.collection_wanted() {
                if let Err(e) = batcher.reclaim_if_due() {
                    eprintln!("avfs: space reclaim: {e}");
                }
                reclaimed = Instant::now();
            }
            // Memory goes back once no request came for a whole period, once per lull.
            if trimmed.elapsed() >= fs::TRIM_EVERY {
                let seen = batcher.requests();
                if seen == requests && !trimmed_lull {
                    if let Err(e) = batcher.reclaim_in_lull() {
                        eprintln!("avfs: space reclaim: {e}");
                    }
                    batcher.trim_memory();
                    trimmed_lull = true;
                } else if seen != requests {
                    trimmed_lull = false;
                }
                requests = seen;
                trimmed = Instant::now();
            }
            if audited.elapsed() >= audit_every {
                if let Err(e) = batcher.audit_changes() {
                    eprintln!("avfs: mount audit: {e}");
                }
                audited = Instant::now();
            }
        }
    })?;
    catch_signals(move || {
        let _ = unmounter.unmount();
        let _ = force_unmount(&unmount_mp);
    });
    if let Some(owner) = opts.owner {
        unmount_when_gone(owner);
    }
    let rec_path = record_path(&opts.home, &id);
    let tmp = rec_path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&record).unwrap_or_default())
        .map_err(|e| Error::host(tmp.display(), e))?;
    std::fs::rename(&tmp, &rec_path).map_err(|e| Error::host(rec_path.display(), e))?;
    (opts.on_ready)(&record);
    let result = session.run();
    let _ = fs.sync(true);
    if let Err(e) = fs.audit_end() {
        eprintln!("avfs: mount audit: {e}");
    }
    if !opts.readonly
        && let Err(e) = fs.reclaim_now()
    {
        eprintln!("avfs: space reclaim: {e}");
    }
    drop(wal_upkeep);
    // As after any other command, the .avfs file alone holds everything.
    let _ = fs.checkpoint_wal();
    let _ = std::fs::remove_file(&rec_path);
    let _ = std::fs::remove_file(&socket);
    if opts.owner.is_some() {
        // The owner made the (empty) mountpoint for this mount and may be gone.
        let _ = std::fs::remove_dir(&mountpoint);
    }
    result.map_err(|e| Error::host("fuse session", e))
}

/// Stack of the threads that flush, audit and answer the control socket. Their work
/// walks trees whose depth a user chooses; the walks loop over explicit stacks where they
/// can, and this bounds what is left (the audit's tree diff descends one call per
/// directory level): 5 000 levels need about 20 MiB in a debug build. Untouched stack
/// costs address space, not memory.
const UPKEEP_STACK: usize = 256 << 20;

fn spawn_upkeep(name: &str, f: impl FnOnce() + Send + 'static) -> Result<()> {
    std::thread::Builder::new()
        .name(name.into())
        .stack_size(UPKEEP_STACK)
        .spawn(f)
        .map(|_| ())
        .map_err(|e| Error::host(format!("starting the thread {name}"), e))
}

/// fuser takes the filesystem by value; the control socket needs it too.
struct SharedFs(Arc<AvfsFs>);

macro_rules! forward {
    ($( fn $name:ident(&self $(, $arg:ident : $ty:ty)* ); )*) => {
        $( fn $name(&self $(, $arg: $ty)*) { self.0.$name($($arg),*) } )*
    };
}

impl fuser::Filesystem for SharedFs {
    fn init(
        &mut self,
        req: &fuser::Request,
        config: &mut fuser::KernelConfig,
    ) -> std::io::Result<()> {
        // init only adjusts kernel options; it needs no exclusive access to the state.
        match Arc::get_mut(&mut self.0) {
            Some(fs) => fuser::Filesystem::init(fs, req, config),
            None => AvfsFs::configure_kernel(config),
        }
    }
    fn destroy(&mut self) {
        let _ = self.0.sync(true);
    }
    forward! {
        fn lookup(&self, req: &fuser::Request, parent: fuser::INodeNo, name: &std::ffi::OsStr, reply: fuser::ReplyEntry);
        fn forget(&self, req: &fuser::Request, ino: fuser::INodeNo, nlookup: u64);
        fn getattr(&self, req: &fuser::Request, ino: fuser::INodeNo, fh: Option<fuser::FileHandle>, reply: fuser::ReplyAttr);
        fn readlink(&self, req: &fuser::Request, ino: fuser::INodeNo, reply: fuser::ReplyData);
        fn mknod(&self, req: &fuser::Request, parent: fuser::INodeNo, name: &std::ffi::OsStr, mode: u32, umask: u32, rdev: u32, reply: fuser::ReplyEntry);
        fn mkdir(&self, req: &fuser::Request, parent: fuser::INodeNo, name: &std::ffi::OsStr, mode: u32, umask: u32, reply: fuser::ReplyEntry);
        fn unlink(&self, req: &fuser::Request, parent: fuser::INodeNo, name: &std::ffi::OsStr, reply: fuser::ReplyEmpty);
        fn rmdir(&self, req: &fuser::Request, parent: fuser::INodeNo, name: &std::ffi::OsStr, reply: fuser::ReplyEmpty);
        fn symlink(&self, req: &fuser::Request, parent: fuser::INodeNo, link_name: &std::ffi::OsStr, target: &Path, reply: fuser::ReplyEntry);
        fn rename(&self, req: &fuser::Request, parent: fuser::INodeNo, name: &std::ffi::OsStr, newparent: fuser::INodeNo, newname: &std::ffi::OsStr, flags: fuser::RenameFlags, reply: fuser::ReplyEmpty);
        fn link(&self, req: &fuser::Request, ino: fuser::INodeNo, newparent: fuser::INodeNo, newname: &std::ffi::OsStr, reply: fuser::ReplyEntry);
        fn open(&self, req: &fuser::Request, ino: fuser::INodeNo, flags: fuser::OpenFlags, reply: fuser::ReplyOpen);
        fn read(&self, req: &fuser::Request, ino: fuser::INodeNo, fh: fuser::FileHandle, offset: u64, size: u32, flags: fuser::OpenFlags, lock_owner: Option<fuser::LockOwner>, reply: fuser::ReplyData);
        fn write(&self, req: &fuser::Request, ino: fuser::INodeNo, fh: fuser::FileHandle, offset: u64, data: &[u8], write_flags: fuser::WriteFlags, flags: fuser::OpenFlags, lock_owner: Option<fuser::LockOwner>, reply: fuser::ReplyWrite);
        fn flush(&self, req: &fuser::Request, ino: fuser::INodeNo, fh: fuser::FileHandle, lock_owner: fuser::LockOwner, reply: fuser::ReplyEmpty);
        fn release(&self, req: &fuser::Request, ino: fuser::INodeNo, fh: fuser::FileHandle, flags: fuser::OpenFlags, lock_owner: Option<fuser::LockOwner>, flush: bool, reply: fuser::ReplyEmpty);
        fn fsync(&self, req: &fuser::Request, ino: fuser::INodeNo, fh: fuser::FileHandle, datasync: bool, reply: fuser::ReplyEmpty);
        fn opendir(&self, req: &fuser::Request, ino: fuser::INodeNo, flags: fuser::OpenFlags, reply: fuser::ReplyOpen);
        fn readdir(&self, req: &fuser::Request, ino: fuser::INodeNo, fh: fuser::FileHandle, offset: u64, reply: fuser::ReplyDirectory);
        fn readdirplus(&self, req: &fuser::Request, ino: fuser::INodeNo, fh: fuser::FileHandle, offset: u64, reply: fuser::ReplyDirectoryPlus);
        fn releasedir(&self, req: &fuser::Request, ino: fuser::INodeNo, fh: fuser::FileHandle, flags: fuser::OpenFlags, reply: fuser::ReplyEmpty);
        fn fsyncdir(&self, req: &fuser::Request, ino: fuser::INodeNo, fh: fuser::FileHandle, datasync: bool, reply: fuser::ReplyEmpty);
        fn statfs(&self, req: &fuser::Request, ino: fuser::INodeNo, reply: fuser::ReplyStatfs);
        fn setxattr(&self, req: &fuser::Request, ino: fuser::INodeNo, name: &std::ffi::OsStr, value: &[u8], flags: i32, position: u32, reply: fuser::ReplyEmpty);
        fn getxattr(&self, req: &fuser::Request, ino: fuser::INodeNo, name: &std::ffi::OsStr, size: u32, reply: fuser::ReplyXattr);
        fn listxattr(&self, req: &fuser::Request, ino: fuser::INodeNo, size: u32, reply: fuser::ReplyXattr);
        fn removexattr(&self, req: &fuser::Request, ino: fuser::INodeNo, name: &std::ffi::OsStr, reply: fuser::ReplyEmpty);
        fn access(&self, req: &fuser::Request, ino: fuser::INodeNo, mask: fuser::AccessFlags, reply: fuser::ReplyEmpty);
        fn create(&self, req: &fuser::Request, parent: fuser::INodeNo, name: &std::ffi::OsStr, mode: u32, umask: u32, flags: i32, reply: fuser::ReplyCreate);
        fn fallocate(&self, req: &fuser::Request, ino: fuser::INodeNo, fh: fuser::FileHandle, offset: u64, length: u64, mode: i32, reply: fuser::ReplyEmpty);
        fn lseek(&self, req: &fuser::Request, ino: fuser::INodeNo, fh: fuser::FileHandle, offset: i64, whence: i32, reply: fuser::ReplyLseek);
    }
    #[allow(clippy::too_many_arguments)]
    fn setattr(
        &self,
        req: &fuser::Request,
        ino: fuser::INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<fuser::TimeOrNow>,
        mtime: Option<fuser::TimeOrNow>,
        ctime: Option<std::time::SystemTime>,
        fh: Option<fuser::FileHandle>,
        crtime: Option<std::time::SystemTime>,
        chgtime: Option<std::time::SystemTime>,
        bkuptime: Option<std::time::SystemTime>,
        flags: Option<fuser::BsdFileFlags>,
        reply: fuser::ReplyAttr,
    ) {
        fuser::Filesystem::setattr(
            &*self.0, req, ino, mode, uid, gid, size, atime, mtime, ctime, fh, crtime, chgtime,
            bkuptime, flags, reply,
        )
    }
}
