//! A workspace's kept overlay: one overlayfs per workspace that outlives its runs, held
//! mounted by a keeper process (`sandbox::keeper`) whose mount namespace each run copies.
//!
//! ```text
//! $AVFS_HOME/kept/<mount id>/upper      what runs changed since the overlay was made
//! $AVFS_HOME/kept/<mount id>/work       overlayfs's work directory
//! $AVFS_HOME/kept/<mount id>/merged     where the keeper mounts it (in its namespace only)
//! $AVFS_HOME/kept/<mount id>/kept.json  {stack, root, keeper}
//! ```
//!
//! A run reuses the kept overlay when it still shows the workspace's head (`root`: the
//! head after the last ingest) and its layers are in place; anything else (a restore, a
//! CLI write, a merge, an edit through `avfs mount`, another machine's fetch) moved the
//! head, and the overlay is retired and made anew. The upper is ingested against the
//! stack's root after every run, so the vault holds everything it shows and retiring it
//! loses nothing: a retired upper becomes the layer of the root it shows, as a per-run
//! upper does. It is retired as soon as it holds more than `KEEP_FILES` files (each
//! ingest looks at them all; it reads only those changed since the last one, see
//! `memo`) or a run's ingest read more than `KEEP_BYTES`, and its keeper exits after
//! `AVFS_KEEP_IDLE_SECS` (default 600) without a run.
//!
//! Only root keeps overlays (entering the keeper's namespace needs CAP_SYS_ADMIN over
//! it); other users, ephemeral forks and `AVFS_KEEP_OVERLAY=0` get a fresh overlay per run.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use rusqlite::Connection;
use serde::{Deserialize, Serialize};

use super::ingest;
use super::layers::{LayerCache, Stack};
use super::materialize::remove_tree;
use crate::error::{Error, Result};
use crate::pidfd::Pidfd;
use crate::sandbox::keeper::{KEEP_ARG, KEEP_VAR, KeepPlan, LEAVING, READY};
use crate::store::objects::{Hash, get_tree};

/// An upper with more files than this after a run is retired (it becomes a layer):
/// every later run reads it again (measured: 2 000 small files, 19 ms per run).
pub const KEEP_FILES: u64 = 1_000;
/// Or when a run's ingest read more bytes than this (new content: the upper has grown by
/// about that much; unchanged files are not read again).
pub const KEEP_BYTES: u64 = 16 << 20;

/// The keeper process: its pid and start time (so a reused pid is never taken for it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeeperId {
    pub pid: i32,
    pub start: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KeptRecord {
    /// Whose overlay it is (for `retire_all`, which takes the workspace's run lock).
    pub vault_path: PathBuf,
    pub workspace: String,
    /// The lower layers; `stack.root` is the root the upper is ingested against.
    pub stack: Stack,
    /// The root the overlay shows: the workspace's head after the last ingest.
    pub root: String,
    pub keeper: Option<KeeperId>,
    /// The workspace's ignored directory, the overlay's topmost lower (see
    /// `engine::ignored`). It changes only in its own workspace's runs, after the run
    /// and with the keeper ended first (`OverlayRun::separate_ignored`), so it never
    /// changes under a mounted overlay.
    #[serde(default)]
    pub ignored: Option<PathBuf>,
}

pub struct Kept {
    pub dir: PathBuf,
    pub record: KeptRecord,
    /// A run's shared lock on the directory, from taking the overlay until the run
    /// ends: its keeper does not go idle meanwhile (see `sandbox::keeper`).
    _hold: Option<fs::File>,
}

/// Takes the shared lock a run holds on its kept overlay's directory (waiting, if the
/// keeper is just leaving, until it is gone).
fn hold(dir: &Path) -> Option<fs::File> {
    let f = fs::File::open(dir).ok()?;
    crate::util::flock(&f, libc::LOCK_SH).ok()?;
    Some(f)
}

fn host_err(p: &Path, e: std::io::Error) -> Error {
    Error::host(p.display(), e)
}

pub fn kept_root(home: &Path) -> PathBuf {
    home.join("kept")
}

pub fn kept_dir(home: &Path, vault_path: &Path, workspace: &str) -> PathBuf {
    kept_root(home).join(crate::mount::mount_id(vault_path, workspace))
}

/// May runs of this process keep their overlay?
pub fn enabled() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() == 0 };
    root && std::env::var("AVFS_KEEP_OVERLAY").map_or(true, |v| v != "0")
}

fn idle_secs() -> u64 {
    std::env::var("AVFS_KEEP_IDLE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600)
}

/// The start time of `pid`, if it runs (not a zombie).
fn start_time(pid: i32) -> Option<u64> {
    crate::procs::stat(pid)
        .filter(|p| !p.zombie)
        .map(|p| p.start)
}

fn alive(k: &KeeperId) -> bool {
    start_time(k.pid) == Some(k.start)
}

/// The keeper's pidfd, if it is the keeper that still runs (not a reused pid).
fn pidfd(k: &KeeperId) -> Option<Pidfd> {
    let fd = Pidfd::open(k.pid).ok()?;
    // Checked after the pidfd is open: the pid cannot be reused from here on.
    alive(k).then_some(fd)
}

/// Sends the keeper SIGKILL, without waiting for it to end; false when it is gone.
fn kill(k: &KeeperId) -> bool {
    pidfd(k).is_some_and(|fd| fd.signal(libc::SIGKILL).is_ok())
}

/// Kills the keeper and waits (up to 5 s) until it is gone, its overlay with it.
fn stop(k: &KeeperId) {
    if let Some(fd) = pidfd(k)
        && fd.signal(libc::SIGKILL).is_ok()
    {
        fd.wait_exit(Some(Duration::from_secs(5)));
    }
}

fn write_record(dir: &Path, rec: &KeptRecord) -> Result<()> {
    let f = dir.join("kept.json");
    let tmp = dir.join(format!(".kept.json.{}", std::process::id()));
    let json = serde_json::to_vec_pretty(rec).expect("kept record serializes");
    fs::write(&tmp, json).map_err(|e| host_err(&tmp, e))?;
    fs::rename(&tmp, &f).map_err(|e| host_err(&f, e))
}

fn read_record(dir: &Path) -> Option<KeptRecord> {
    let text = fs::read(dir.join("kept.json")).ok()?;
    serde_json::from_slice(&text).ok()
}

/// Starts a keeper for the overlay of `dir`; returns it once the overlay is mounted.
fn start_keeper(dir: &Path, rec: &KeptRecord) -> Result<KeeperId> {
    let plan = KeepPlan {
        vault: rec.vault_path.clone(),
        lowers: rec.ignored.iter().chain(&rec.stack.dirs).cloned().collect(),
        upper: dir.join("upper"),
        work: dir.join("work"),
        merged: dir.join("merged"),
        record: dir.join("kept.json"),
        idle_secs: idle_secs(),
    };
    let exe: PathBuf = if Path::new("/proc/self/exe").exists() {
        "/proc/self/exe".into()
    } else {
        std::env::current_exe().map_err(|e| Error::host("locating the avfs binary", e))?
    };
    // The keeper is reparented when the first process leaves: to init, not to this
    // process should it be a child subreaper (a long-lived MCP server after its first
    // run), which would never reap it.
    let mut was_subreaper: libc::c_int = 0;
    // SAFETY: prctl reads and sets a flag of this process only.
    unsafe {
        libc::prctl(
            libc::PR_GET_CHILD_SUBREAPER,
            &mut was_subreaper as *mut libc::c_int,
        );
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
    }
    let spawned = spawn_keeper(&exe, &plan);
    // SAFETY: as above.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, was_subreaper, 0, 0, 0) };
    keeper_ready(spawned?.trim())
}

/// Starts `avfs __avfs-keep` and returns the line it answers with.
fn spawn_keeper(exe: &Path, plan: &KeepPlan) -> Result<String> {
    use std::os::unix::process::CommandExt;
    let mut child = Command::new(exe)
        .arg0("avfs")
        .arg(KEEP_ARG)
        .env(
            KEEP_VAR,
            serde_json::to_string(plan).expect("plan serializes"),
        )
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| Error::host("starting the overlay's keeper", e))?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = BufReader::new(out).read_line(&mut line);
    }
    // The first process only forks the keeper and leaves.
    let _ = child.wait();
    Ok(line)
}

/// The keeper named by its answer (`ready PID`).
fn keeper_ready(line: &str) -> Result<KeeperId> {
    let pid = line
        .strip_prefix(READY)
        .and_then(|p| p.trim().parse::<i32>().ok())
        .ok_or_else(|| {
            Error::SandboxUnavailable(format!(
                "the overlay's keeper did not start: {}",
                if line.is_empty() { "no answer" } else { line }
            ))
        })?;
    let start = start_time(pid).ok_or_else(|| {
        Error::SandboxUnavailable("the overlay's keeper ended as it started".into())
    })?;
    Ok(KeeperId { pid, start })
}

/// Empties overlayfs's work directory (it must be empty when a new overlay mounts it).
fn clear_work(work: &Path) -> Result<()> {
    remove_tree(work).map_err(|e| host_err(work, e))?;
    fs::create_dir_all(work).map_err(|e| host_err(work, e))
}

impl Kept {
    pub fn upper(&self) -> PathBuf {
        self.dir.join("upper")
    }

    pub fn work(&self) -> PathBuf {
        self.dir.join("work")
    }

    pub fn merged(&self) -> PathBuf {
        self.dir.join("merged")
    }

    pub fn keeper_pid(&self) -> i32 {
        self.record.keeper.map_or(0, |k| k.pid)
    }

    pub fn stack_root(&self) -> Result<Hash> {
        crate::util::hex32(&self.record.stack.root)
            .map(Hash)
            .ok_or_else(|| Error::Internal("kept overlay: bad stack root".into()))
    }

    /// The kept overlay of `dir`, as a run of the same workspace left it.
    pub fn open(dir: &Path) -> Option<Kept> {
        Some(Kept {
            dir: dir.to_path_buf(),
            record: read_record(dir)?,
            _hold: None,
        })
    }

    /// The kept overlay for a run at `head`: the one in place when it shows `head` (its
    /// keeper started again if it had ended), else a new one over the stack for `head`.
    /// Returns it and how its stack was reached: "kept" when reused, "remounted" when
    /// its keeper had ended (idle) and the same upper is mounted again.
    #[allow(clippy::too_many_arguments)]
    pub fn acquire(
        home: &Path,
        db: &Connection,
        (vault_path, workspace): (&Path, &str),
        dir: &Path,
        (head, ignored): (&Hash, Option<&Path>),
        hints: &[Hash],
        keep_owners: bool,
    ) -> Result<(Kept, String)> {
        if let Some(mut k) = Kept::open(dir) {
            k._hold = hold(dir);
            let leaving = dir.join(LEAVING);
            if leaving.exists() {
                // Its keeper went idle and is ending: once it is gone, the same upper is
                // mounted again below.
                if let Some(id) = k.record.keeper {
                    stop(&id);
                }
                let _ = fs::remove_file(&leaving);
            }
            let layers_there = k.record.stack.dirs.iter().all(|d| d.is_dir());
            // A record naming no keeper: the exec that was starting one died, and the
            // keeper may still be up (it waits 10 s to be named). Its upper holds nothing
            // new (no command ran), so the overlay is made anew beside it, not mounted
            // again over the same upper.
            if k.record.root == head.to_hex()
                && layers_there
                && k.record.keeper.is_some()
                && k.record.ignored.as_deref() == ignored
            {
                match k.record.keeper {
                    Some(id) if alive(&id) => {
                        // Also marks it used, for the keeper's idle clock.
                        write_record(dir, &k.record)?;
                        return Ok((k, "kept".into()));
                    }
                    _ => {
                        clear_work(&k.work())?;
                        k.record.keeper = None;
                        write_record(dir, &k.record)?;
                        k.record.keeper = Some(start_keeper(dir, &k.record)?);
                        write_record(dir, &k.record)?;
                        return Ok((k, "remounted".into()));
                    }
                }
            }
            k.retire_in_background(home, None);
        }
        let cache = LayerCache::new(home);
        let stack = cache.prepare(db, head, hints)?;
        wait_for_dying(home, &stack);
        let _ = remove_tree(dir);
        for d in ["upper", "work", "merged"] {
            let p = dir.join(d);
            fs::create_dir_all(&p).map_err(|e| host_err(&p, e))?;
        }
        super::overlay::private(&kept_root(home));
        let attrs = get_tree(db, head)?
            .root_attrs
            .ok_or_else(|| Error::Internal("root tree without attributes".into()))?;
        ingest::prepare_upper_root(&dir.join("upper"), &attrs, keep_owners)?;
        let how = stack.how.clone();
        let mut record = KeptRecord {
            vault_path: vault_path.to_path_buf(),
            workspace: workspace.to_string(),
            stack,
            root: head.to_hex(),
            keeper: None,
            ignored: ignored.map(Path::to_path_buf),
        };
        write_record(dir, &record)?;
        let held = hold(dir);
        record.keeper = Some(start_keeper(dir, &record)?);
        write_record(dir, &record)?;
        Ok((
            Kept {
                dir: dir.to_path_buf(),
                record,
                _hold: held,
            },
            how,
        ))
    }

    /// After a run whose changes the vault took in (`ingested`, which the upper shows):
    /// keeps the overlay for the next run at `head` (the workspace's head now), with a
    /// record of its files as read (the next ingest reads only those that changed); or
    /// retires it when the upper grew past what an ingest should go through again, or
    /// when `head` is not what the overlay shows. The bytes that count are those read
    /// (new data): an unchanged file, however large, is not read again.
    pub fn after_run(mut self, home: &Path, head: &Hash, ingested: &ingest::Ingested) {
        let shown = &ingested.root;
        let files = ingested.files_read + ingested.files_unchanged;
        // A running service holds this overlay: retiring it would end the service, so
        // its size does not count while one runs.
        let serving = self.serving(home);
        if shown == head && (serving || (files <= KEEP_FILES && ingested.bytes_read <= KEEP_BYTES))
        {
            self.record.root = head.to_hex();
            if write_record(&self.dir, &self.record).is_ok() {
                ingested.memo.save(&self.dir);
                return;
            }
        }
        self.retire_in_background(home, Some(shown));
    }

    /// `retire` without waiting for the keeper to end. Its overlay goes with its mount
    /// namespace, and that teardown evicts every inode the overlay cached (measured:
    /// 44-69 ms after a 20 000-file `tar x`, all of it on the exec's path when waited
    /// for). The directory moves under `kept/.dying/` with a note of the keeper and of
    /// the layer its upper became: a run about to mount that layer waits for the keeper
    /// first ([`wait_for_dying`]), so no layer is ever the upper of a live overlay too.
    pub fn retire_in_background(self, home: &Path, shows: Option<&Hash>) {
        self.end_services(home);
        let Some(keeper) = self.record.keeper.filter(kill) else {
            return self.retire(home, shows);
        };
        let adopted = self.adopt(home, shows);
        let dying = dying_root(home);
        let name = format!(
            "{}-{}",
            self.dir
                .file_name()
                .map_or("kept".into(), |n| n.to_string_lossy()),
            crate::store::now_ns()
        );
        let note = Dying { keeper, adopted };
        let json = serde_json::to_vec(&note).expect("dying note serializes");
        let moved = fs::create_dir_all(&dying).is_ok()
            && fs::write(dying.join(format!("{name}.json")), json).is_ok()
            && fs::rename(&self.dir, dying.join(&name)).is_ok();
        if !moved {
            let _ = fs::remove_file(dying.join(format!("{name}.json")));
            stop(&keeper);
            let _ = remove_tree(&self.dir);
        }
    }

    /// Ends the keeper and waits for its overlay to go, keeping the directory: the
    /// upper can then be changed (its ignored files move out) before it is retired.
    pub fn end_keeper(&self) {
        // The directory is `$AVFS_HOME/kept/<mount id>`.
        if let Some(home) = self.dir.parent().and_then(Path::parent) {
            self.end_services(home);
        }
        if let Some(k) = &self.record.keeper {
            stop(k);
        }
    }

    /// The directory of the workspace's services (`sandbox::service`): the kept
    /// overlay's directory is named by the workspace's mount id, as theirs is.
    fn services_dir(&self, home: &Path) -> Option<PathBuf> {
        let id = self.dir.file_name()?.to_str()?;
        Some(crate::sandbox::service::workspace_dir(home, id))
    }

    fn serving(&self, home: &Path) -> bool {
        self.services_dir(home)
            .is_some_and(|d| crate::sandbox::service::network_of(&d).is_some())
    }

    /// Services run in this overlay and write to its upper: they end before it is
    /// retired (its upper becomes a layer, which nothing may write any more).
    fn end_services(&self, home: &Path) {
        if let Some(d) = self.services_dir(home) {
            crate::sandbox::service::stop_all(&d, crate::sandbox::service::OVERLAY_RETIRED);
        }
    }

    /// The upper becomes the cached layer of `shows` (when the overlay showed a root of
    /// its own); returns the layer's id.
    fn adopt(&self, home: &Path, shows: Option<&Hash>) -> Option<String> {
        let root = shows.filter(|r| self.record.stack.root != r.to_hex())?;
        LayerCache::new(home)
            .adopt_upper(&self.upper(), &self.record.stack, root)
            .ok()
            .flatten()
    }

    /// Ends the keeper (and so the overlay) and removes the directory; with `shows`, the
    /// upper first becomes the cached layer of that root (which the vault holds).
    pub fn retire(self, home: &Path, shows: Option<&Hash>) {
        self.end_services(home);
        if let Some(k) = &self.record.keeper {
            stop(k);
        }
        self.adopt(home, shows);
        let _ = remove_tree(&self.dir);
    }

    /// Ends the keeper and moves the upper to `to` (a person looks at what a refused
    /// ingest did not take in); the kept overlay is gone.
    pub fn retire_keeping_upper(self, to: &Path) -> PathBuf {
        if let Some(k) = &self.record.keeper {
            stop(k);
        }
        let kept = if fs::rename(self.upper(), to).is_ok() {
            to.to_path_buf()
        } else {
            self.upper()
        };
        if kept != self.upper() {
            let _ = remove_tree(&self.dir);
        } else {
            let _ = fs::remove_file(self.dir.join("kept.json"));
        }
        kept
    }
}

/// Ends the kept overlay of a workspace that is going away (`vault delete`, under its run
/// lock): its keeper stops and its directory goes.
pub fn discard(home: &Path, vault_path: &Path, workspace: &str) {
    let dir = kept_dir(home, vault_path, workspace);
    match Kept::open(&dir) {
        Some(k) => k.retire(home, None),
        None => {
            let _ = remove_tree(&dir);
        }
    }
}

/// A retired overlay whose keeper may still be ending (`kept/.dying/<name>.json`, beside
/// the directory it left).
#[derive(Serialize, Deserialize)]
struct Dying {
    keeper: KeeperId,
    /// The layer its upper became, if any.
    adopted: Option<String>,
}

fn dying_root(home: &Path) -> PathBuf {
    kept_root(home).join(".dying")
}

/// Before `stack` is mounted: waits for the keepers of retired overlays whose upper is
/// one of its layers (overlayfs must not see a directory as a lower of one mount and the
/// upper of another), and removes what ended keepers left.
pub fn wait_for_dying(home: &Path, stack: &Stack) {
    reap_dying(home, |note| {
        note.adopted
            .as_ref()
            .is_some_and(|id| stack.layers.contains(id))
    });
}

/// Removes what retired overlays left under `kept/.dying/`: those whose keeper has ended,
/// and those `wait_for` names after waiting for their keeper (an unreadable note's
/// directory goes too).
fn reap_dying(home: &Path, wait_for: impl Fn(&Dying) -> bool) {
    let Ok(rd) = fs::read_dir(dying_root(home)) else {
        return;
    };
    for e in rd.flatten() {
        let note_path = e.path();
        if note_path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let note = fs::read(&note_path)
            .ok()
            .and_then(|t| serde_json::from_slice::<Dying>(&t).ok());
        if let Some(note) = note {
            if wait_for(&note) {
                stop(&note.keeper);
            } else if alive(&note.keeper) {
                continue;
            }
        }
        let _ = remove_tree(&note_path.with_extension(""));
        let _ = fs::remove_file(&note_path);
    }
}

/// A workspace's kept overlay as `avfs status` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct KeptInfo {
    pub workspace: String,
    /// The keeper holding it mounted, or null when it has ended (idle): the next run
    /// mounts the same upper again.
    pub keeper_pid: Option<i32>,
    /// The root it shows; a run reuses it while that is the workspace's head.
    pub root: String,
    /// Files (regular, symlinks, whiteouts) and bytes in its upper: what each run's
    /// ingest looks at (it reads only the files changed since the last one; the overlay
    /// is retired past 1 000 files, or when one run's ingest read more than 16 MiB).
    pub upper_files: u64,
    pub upper_bytes: u64,
    /// When a run last took or left it (RFC 3339).
    pub last_used_at: Option<String>,
}

/// The kept overlay of `workspace`, if it has one.
pub fn describe(home: &Path, vault_path: &Path, workspace: &str) -> Option<KeptInfo> {
    let dir = kept_dir(home, vault_path, workspace);
    let k = Kept::open(&dir)?;
    let (mut files, mut bytes) = (0u64, 0u64);
    let mut stack = vec![k.upper()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let Ok(m) = e.metadata() else { continue };
            if m.is_dir() {
                stack.push(e.path());
            } else {
                files += 1;
                bytes += m.len();
            }
        }
    }
    let used = fs::metadata(dir.join("kept.json"))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| crate::util::rfc3339(d.as_nanos() as i64));
    Some(KeptInfo {
        workspace: workspace.to_string(),
        keeper_pid: k.record.keeper.filter(alive).map(|id| id.pid),
        root: k.record.root.clone(),
        upper_files: files,
        upper_bytes: bytes,
        last_used_at: used,
    })
}

/// Retires every kept overlay no run is using (`avfs gc`: the cache is trimmed after),
/// each under its workspace's run lock; returns how many.
pub fn retire_all(home: &Path) -> u64 {
    use crate::runlock::{Holder, RunLock};
    reap_dying(home, |_| true);
    let _ = fs::remove_dir(dying_root(home));
    let mut n = 0;
    let Ok(rd) = fs::read_dir(kept_root(home)) else {
        return 0;
    };
    for e in rd.flatten() {
        let Some(k) = Kept::open(&e.path()) else {
            continue;
        };
        let holder = Holder {
            exec: "gc".into(),
            pid: std::process::id(),
            command: "avfs gc".into(),
            started_at_ns: crate::store::now_ns(),
        };
        let Ok(lock) = RunLock::acquire(
            home,
            &k.record.vault_path,
            &k.record.workspace,
            &holder,
            Duration::ZERO,
        ) else {
            continue;
        };
        let shows = crate::util::hex32(&k.record.root).map(Hash);
        k.retire(home, shows.as_ref());
        drop(lock);
        n += 1;
    }
    n
}

/// The layers kept overlays stand on (`avfs gc` leaves them).
pub fn layers_in_use(home: &Path) -> Vec<String> {
    let mut out = vec![];
    if let Ok(rd) = fs::read_dir(kept_root(home)) {
        for e in rd.flatten() {
            if let Some(r) = read_record(&e.path()) {
                out.extend(r.stack.layers);
            }
        }
    }
    out
}
