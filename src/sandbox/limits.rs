//! The limits of one sandboxed run: processes (and threads) and memory through a cgroup
//! made for the run, the sizes of its private /tmp and /dev/shm through tmpfs `size=`.
//!
//! The cgroup is cgroup v2 where the host delegates the controller to avfs's own cgroup
//! (`pids`/`memory` in its `cgroup.subtree_control`, or enabled there by avfs), else the
//! v1 hierarchy of that controller (`/sys/fs/cgroup/pids`, `/sys/fs/cgroup/memory`).
//! Where neither can be written (an unprivileged user without delegation), the run goes
//! on without that limit and the envelope says so (`not_enforced`): the rest of the
//! sandbox does not depend on it.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Processes and threads of a run by default: room for a parallel build (rustc and node
/// start many threads), none for a fork bomb to take the host's PID space.
pub const DEFAULT_PIDS: u64 = 4096;
/// The private /tmp by default (a tmpfs: it is memory).
pub const DEFAULT_TMP_BYTES: u64 = 1 << 30;
/// The private /dev/shm by default (as Docker's).
pub const DEFAULT_SHM_BYTES: u64 = 64 << 20;

/// What a run may use (policy `[sandbox]` values, overridden by `avfs exec` flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Processes and threads at most; None: no limit.
    pub pids: Option<u64>,
    /// Bytes of the private /tmp.
    pub tmp_bytes: u64,
    /// Bytes of the private /dev/shm.
    pub shm_bytes: u64,
    /// Bytes of memory (RAM, page cache and tmpfs pages charged to the run); None: none.
    pub memory_bytes: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            pids: Some(DEFAULT_PIDS),
            tmp_bytes: DEFAULT_TMP_BYTES,
            shm_bytes: DEFAULT_SHM_BYTES,
            memory_bytes: None,
        }
    }
}

/// Limits given for one run; None: the policy's. `Some(0)` for pids or memory: none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LimitOverrides {
    pub pids: Option<u64>,
    pub tmp_bytes: Option<u64>,
    pub shm_bytes: Option<u64>,
    pub memory_bytes: Option<u64>,
}

impl LimitOverrides {
    /// The policy's limits with these applied.
    pub fn apply(&self, mut l: Limits) -> Limits {
        if let Some(n) = self.pids {
            l.pids = (n > 0).then_some(n);
        }
        if let Some(b) = self.memory_bytes {
            l.memory_bytes = (b > 0).then_some(b);
        }
        l.tmp_bytes = self.tmp_bytes.unwrap_or(l.tmp_bytes);
        l.shm_bytes = self.shm_bytes.unwrap_or(l.shm_bytes);
        l
    }
}

/// The limits in force for a run, as the envelope reports them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct LimitsInfo {
    /// Processes and threads at most (null: no limit).
    pub pids: Option<u64>,
    /// Bytes of memory at most (null: no limit).
    pub memory_bytes: Option<u64>,
    /// Size of the private /tmp in bytes.
    pub tmp_bytes: u64,
    /// Size of the private /dev/shm in bytes.
    pub shm_bytes: u64,
    /// How the pid and memory limits are held: `cgroup2`, `cgroup1` or null (none asked).
    pub cgroup: Option<String>,
    /// Limits that were asked for but could not be set here, and why.
    pub not_enforced: Vec<String>,
}

/// The cgroup(s) of one run: made before it starts, removed when it is over.
pub struct RunCgroup {
    /// One directory (v2), or one per v1 controller.
    dirs: Vec<PathBuf>,
}

/// A mounted cgroup hierarchy: where, and whether it is v2.
struct Hierarchy {
    mount: PathBuf,
    v2: bool,
    /// The v1 controllers it carries.
    controllers: Vec<String>,
}

fn hierarchies() -> Vec<Hierarchy> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return vec![];
    };
    let mut out = vec![];
    for line in text.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mount = left.split(' ').nth(4).unwrap_or_default();
        let mut r = right.split(' ');
        let fstype = r.next().unwrap_or_default();
        let options = r.nth(1).unwrap_or_default();
        if fstype == "cgroup2" || fstype == "cgroup" {
            out.push(Hierarchy {
                mount: PathBuf::from(mount),
                v2: fstype == "cgroup2",
                controllers: options.split(',').map(String::from).collect(),
            });
        }
    }
    out
}

/// This process's cgroup in the hierarchy with `key` (`""` for v2, a controller for v1).
fn own_cgroup(key: &str) -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, ctl, path) = (f.next()?, f.next()?, f.next()?);
        let hit = if key.is_empty() {
            ctl.is_empty()
        } else {
            ctl.split(',').any(|c| c == key)
        };
        hit.then(|| PathBuf::from(path.trim_start_matches('/')))
    })
}

fn write(p: &Path, text: &str) -> io::Result<()> {
    std::fs::write(p, text).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))
}

/// Removes the cgroups of runs whose exec process is gone (killed before it removed its
/// own), named `<pid>-<id>`.
fn remove_stale(parent: &Path) {
    let Ok(rd) = std::fs::read_dir(parent) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

/// Makes `<base>/avfs/<name>` (v2: with the controllers enabled below `base`).
fn make_dir(base: &Path, name: &str, v2_controllers: &[&str]) -> io::Result<PathBuf> {
    let parent = base.join("avfs");
    if v2_controllers.is_empty() {
        std::fs::create_dir_all(&parent)?;
    } else {
        // Each level passes the controllers on to its children.
        for c in v2_controllers {
            let sub = std::fs::read_to_string(base.join("cgroup.subtree_control"))?;
            if !sub.split_whitespace().any(|s| s == *c) {
                write(&base.join("cgroup.subtree_control"), &format!("+{c}"))?;
            }
        }
        std::fs::create_dir_all(&parent)?;
        for c in v2_controllers {
            write(&parent.join("cgroup.subtree_control"), &format!("+{c}"))?;
        }
    }
    remove_stale(&parent);
    let dir = parent.join(name);
    std::fs::create_dir(&dir)?;
    Ok(dir)
}

impl RunCgroup {
    /// Makes the run's cgroup with `limits` set; says which limits are in force.
    pub fn create(run_id: &str, limits: &Limits) -> (Option<RunCgroup>, LimitsInfo) {
        let mut info = LimitsInfo {
            pids: None,
            memory_bytes: None,
            tmp_bytes: limits.tmp_bytes,
            shm_bytes: limits.shm_bytes,
            cgroup: None,
            not_enforced: vec![],
        };
        let wanted: Vec<(&str, &str, u64)> = [
            ("pids", "pids.max", limits.pids),
            ("memory", "memory.max", limits.memory_bytes),
        ]
        .into_iter()
        .filter_map(|(c, f, v)| v.map(|v| (c, f, v)))
        .collect();
        if wanted.is_empty() {
            return (None, info);
        }
        let name = format!("{}-{run_id}", std::process::id());
        let hs = hierarchies();
        let mut cg = RunCgroup { dirs: vec![] };
        // cgroup v2, where the controllers can be had below our own cgroup.
        let v2 = hs.iter().find(|h| h.v2).and_then(|h| {
            let base = h.mount.join(own_cgroup("")?);
            let have = std::fs::read_to_string(base.join("cgroup.controllers")).ok()?;
            let ctls: Vec<&str> = wanted.iter().map(|w| w.0).collect();
            if !ctls
                .iter()
                .all(|c| have.split_whitespace().any(|h| h == *c))
            {
                return None;
            }
            let dir = make_dir(&base, &name, &ctls).ok()?;
            for (_, file, v) in &wanted {
                let file = file.to_string();
                if write(&dir.join(&file), &v.to_string()).is_err() {
                    let _ = std::fs::remove_dir(&dir);
                    return None;
                }
            }
            Some(dir)
        });
        if let Some(dir) = v2 {
            cg.dirs.push(dir);
            info.cgroup = Some("cgroup2".into());
            info.pids = limits.pids;
            info.memory_bytes = limits.memory_bytes;
            return (Some(cg), info);
        }
        for (ctl, _, v) in &wanted {
            let v1_file = if *ctl == "pids" {
                "pids.max"
            } else {
                "memory.limit_in_bytes"
            };
            let made = hs
                .iter()
                .find(|h| !h.v2 && h.controllers.iter().any(|c| c == ctl))
                .ok_or_else(|| io::Error::other(format!("no cgroup {ctl} controller is mounted")))
                .and_then(|h| {
                    let own =
                        own_cgroup(ctl).ok_or_else(|| io::Error::other("not in a cgroup of it"))?;
                    let dir = make_dir(&h.mount.join(own), &name, &[])?;
                    if let Err(e) = write(&dir.join(v1_file), &v.to_string()) {
                        let _ = std::fs::remove_dir(&dir);
                        return Err(e);
                    }
                    Ok(dir)
                });
            match made {
                Ok(dir) => {
                    cg.dirs.push(dir);
                    info.cgroup = Some("cgroup1".into());
                    match *ctl {
                        "pids" => info.pids = Some(*v),
                        _ => info.memory_bytes = Some(*v),
                    }
                }
                Err(e) => info.not_enforced.push(format!(
                    "{ctl}: no cgroup avfs may write (cgroup v2 with {ctl} delegated, or the v1 {ctl} controller): {e}"
                )),
            }
        }
        let cg = (!cg.dirs.is_empty()).then_some(cg);
        (cg, info)
    }

    /// The files a process writes its PID to, to put itself (and what it starts) in.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }
}

impl RunCgroup {
    /// Leaves the cgroups in place (a service's, removed by its supervisor when it
    /// ends); returns their directories.
    pub fn keep(mut self) -> Vec<PathBuf> {
        std::mem::take(&mut self.dirs)
    }
}

impl Drop for RunCgroup {
    /// Removes the cgroups once the run's processes are gone. The run's PID 1 and its
    /// processes are; the set-up may still be tearing its namespaces down (the runner
    /// does not wait for that), so what cannot be removed yet is removed by a thread
    /// that waits for it, or, if avfs exits first, by the next run (`remove_stale`).
    fn drop(&mut self) {
        let left: Vec<PathBuf> = self
            .dirs
            .drain(..)
            .filter(|d| std::fs::remove_dir(d).is_err() && d.exists())
            .collect();
        if left.is_empty() {
            return;
        }
        std::thread::spawn(move || {
            let until = Instant::now() + Duration::from_secs(2);
            for d in &left {
                while std::fs::remove_dir(d).is_err() && d.exists() && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        });
    }
}

/// Puts the process `pid` (the set-up, before it starts anything) in the run's cgroups.
pub fn join(procs_files: &[PathBuf], pid: u32) -> io::Result<()> {
    let pid = pid.to_string();
    for f in procs_files {
        write(f, &pid)?;
    }
    Ok(())
}
