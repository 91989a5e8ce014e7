//! The command line of `avfs-bench`: its usage text, the groups and every option.

use super::*;

pub(crate) const USAGE: &str =
    "usage: avfs-bench [--groups vault,mount,exec,engines,policy,space,integrity] [--dir DIR] [--keep] [--avfs PATH]
                  [--sizes 1000,10000,100000] [--reps N] [--native-reps N]
                  [--mount-workloads tree,io,cargo] [--mount-reps N] [--reps-cargo N]
                  [--tar-files N] [--io-mib N] [--cargo-release] [--cargo-src DIR]
                  [--exec-files N] [--engine-workloads tar,git,...] [--engines overlay,fuse]
                  [--policy-old-avfs PATH] [--fsx-ops N] [--bigdir-sizes N,N]
                  [--remote-files N] [--remote-reps N]

  --groups           which groups to run (default all but space and integrity; `all` adds
                     them): vault (vault operations), mount (real tools in a FUSE mount vs a native directory),
                     exec (avfs exec overhead, with and without the sandbox, and the change
                     report), engines (real workloads as whole `avfs exec` runs, overlay and
                     FUSE engines, vs native), policy (decision time for the lines of the
                     decision corpus), space (a sparse terabyte and an fsx-like workload in a
                     mount: time, server memory, vault size)
  --dir              where to put the trees, vaults and mounts (default: the system temp dir)
  --keep             keep the generated trees and vaults
  --avfs             the avfs binary to use (default: the one next to avfs-bench)

 vault group:
  --sizes            workspace sizes in files (default 1000,10000,100000)
  --reps             repetitions of each cheap measurement (default 7; `avfs cat`, `avfs exec`
                     and the warm mount workloads run 3x, 3x and 1x as many)
  --native-reps      repetitions of the expensive ones: import, cp -a, diff -rq (default 3)

 mount group:
  --mount-workloads  which to run (default all): rtt (one kernel round trip), tree (tar x, git
                     init+add+commit, git status, find+stat, ls -lR, rm -rf), io (sequential
                     write+read), cargo (cargo build)
  --mount-reps       repetitions of tar x, git commit, rm -rf and the sequential I/O (default 3)
  --reps-cargo       repetitions of cargo build (default 1; a few minutes each)
  --tar-files        files in the tarball (default 20000): the first half of the files under
                     ~/.cargo/registry/src, stored twice (a/ and b/)
  --io-mib           size of the sequential write+read in MiB (default 1024)
  --cargo-release    cargo build --release (default: a debug build)
  --cargo-src        the crate to build (default: this crate's committed HEAD: src/,
                     Cargo.toml and Cargo.lock from `git archive HEAD`)

 exec group:
  --exec-files       files in the workspace (default 100000; reuses the vault group's one
                     of that size when it ran)

 engines group (also uses --tar-files, --io-mib, --mount-reps, --reps, --reps-cargo):
  --engine-workloads which to run (default all): tar, git, status, script, io, rm, cargo,
                     true (`exec -- true` on a workspace of 100 000 files)
  --engines          which engines (default overlay,fuse)

 policy group:
  --policy-old-avfs  an older avfs binary whose `policy check` is timed beside this one's

 space group:
  --fsx-ops          operations of the fsx-like workload (default 125000)

 integrity group (not in the default groups; in `all`):
  --bigdir-sizes     entries of the one big directory listed (default 100000,1000000)

 remote group (not in the default groups; in `all`; needs moto, see AVFS_S3_PYTHON, and restic):
  --remote-files     files in the tree pushed and cloned (default 100000)
  --remote-reps      repetitions, interleaved avfs / restic / git (default 3)";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Group {
    Vault,
    Mount,
    Exec,
    Policy,
    Integrity,
    Engines,
    Space,
    Remote,
}

pub(crate) struct Args {
    pub(crate) groups: Vec<Group>,
    pub(crate) sizes: Vec<usize>,
    pub(crate) reps: usize,
    pub(crate) native_reps: usize,
    pub(crate) dir: Option<PathBuf>,
    pub(crate) keep: bool,
    pub(crate) avfs: Option<PathBuf>,
    pub(crate) mount_workloads: Vec<String>,
    pub(crate) mount_reps: usize,
    pub(crate) cargo_reps: usize,
    pub(crate) tar_files: usize,
    pub(crate) io_mib: usize,
    pub(crate) cargo_release: bool,
    pub(crate) cargo_src: Option<PathBuf>,
    pub(crate) exec_files: usize,
    pub(crate) policy_old_avfs: Option<PathBuf>,
    pub(crate) bigdir_sizes: Vec<usize>,
    pub(crate) engine_workloads: Vec<String>,
    pub(crate) engines: Vec<String>,
    /// Operations of the space group's fsx workload.
    pub(crate) fsx_ops: usize,
    pub(crate) remote_files: usize,
    pub(crate) remote_reps: usize,
}

pub(crate) fn list(v: &str) -> Vec<String> {
    v.split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

pub(crate) fn parse_args() -> BoxResult<Args> {
    let mut a = Args {
        groups: vec![
            Group::Vault,
            Group::Mount,
            Group::Exec,
            Group::Engines,
            Group::Policy,
        ],
        sizes: vec![1_000, 10_000, 100_000],
        reps: 7,
        native_reps: 3,
        dir: None,
        keep: false,
        avfs: None,
        mount_workloads: vec!["rtt".into(), "tree".into(), "io".into(), "cargo".into()],
        mount_reps: 3,
        cargo_reps: 1,
        tar_files: 20_000,
        io_mib: 1024,
        cargo_release: false,
        cargo_src: None,
        exec_files: 100_000,
        policy_old_avfs: None,
        bigdir_sizes: vec![100_000, 1_000_000],
        engine_workloads: ENGINE_WORKLOADS.iter().map(|s| s.to_string()).collect(),
        engines: vec!["overlay".into(), "fuse".into()],
        fsx_ops: 125_000,
        remote_files: 100_000,
        remote_reps: 3,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let (key, inline) = match arg.split_once('=') {
            Some((k, v)) if k.starts_with("--") => (k.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |name: &str| -> BoxResult<String> {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("{name} needs a value\n{USAGE}").into())
        };
        let count = |v: String| -> BoxResult<usize> { Ok(v.trim().replace('_', "").parse()?) };
        match key.as_str() {
            "--groups" => {
                let mut g = Vec::new();
                for name in list(&value("--groups")?) {
                    let x = match name.as_str() {
                        "vault" => Group::Vault,
                        "mount" => Group::Mount,
                        "exec" => Group::Exec,
                        "engines" => Group::Engines,
                        "policy" => Group::Policy,
                        "space" => Group::Space,
                        "integrity" => Group::Integrity,
                        "remote" => Group::Remote,
                        "all" => {
                            g.extend([
                                Group::Vault,
                                Group::Mount,
                                Group::Exec,
                                Group::Engines,
                                Group::Policy,
                                Group::Space,
                                Group::Integrity,
                                Group::Remote,
                            ]);
                            continue;
                        }
                        other => return Err(format!("--groups: unknown group {other:?}").into()),
                    };
                    g.push(x);
                }
                a.groups = Vec::new();
                for x in g {
                    if !a.groups.contains(&x) {
                        a.groups.push(x);
                    }
                }
                if a.groups.is_empty() {
                    return Err("--groups: name at least one group".into());
                }
            }
            "--bigdir-sizes" => {
                a.bigdir_sizes = list(&value("--bigdir-sizes")?)
                    .into_iter()
                    .map(count)
                    .collect::<Result<_, _>>()?;
            }
            "--sizes" => {
                a.sizes = list(&value("--sizes")?)
                    .into_iter()
                    .map(count)
                    .collect::<Result<_, _>>()?;
                if a.sizes.is_empty() || a.sizes.iter().any(|&n| n < 200) {
                    return Err("--sizes: each size must be at least 200 files".into());
                }
            }
            "--reps" => a.reps = count(value("--reps")?)?.max(1),
            "--native-reps" => a.native_reps = count(value("--native-reps")?)?.max(1),
            "--dir" => a.dir = Some(PathBuf::from(value("--dir")?)),
            "--keep" => a.keep = true,
            "--avfs" => a.avfs = Some(PathBuf::from(value("--avfs")?)),
            "--mount-workloads" => {
                a.mount_workloads = list(&value("--mount-workloads")?);
                if let Some(w) = a
                    .mount_workloads
                    .iter()
                    .find(|w| !["tree", "io", "cargo", "rtt"].contains(&w.as_str()))
                {
                    return Err(format!("--mount-workloads: unknown workload {w:?}").into());
                }
            }
            "--mount-reps" => a.mount_reps = count(value("--mount-reps")?)?.max(1),
            "--fsx-ops" => a.fsx_ops = count(value("--fsx-ops")?)?.max(1),
            "--reps-cargo" => a.cargo_reps = count(value("--reps-cargo")?)?.max(1),
            "--tar-files" => a.tar_files = count(value("--tar-files")?)?.max(2),
            "--io-mib" => a.io_mib = count(value("--io-mib")?)?.max(1),
            "--cargo-release" => a.cargo_release = true,
            "--cargo-src" => a.cargo_src = Some(PathBuf::from(value("--cargo-src")?)),
            "--exec-files" => {
                a.exec_files = count(value("--exec-files")?)?;
                if a.exec_files < 200 {
                    return Err("--exec-files: at least 200 files".into());
                }
            }
            "--policy-old-avfs" => {
                a.policy_old_avfs = Some(PathBuf::from(value("--policy-old-avfs")?))
            }
            "--engine-workloads" => {
                a.engine_workloads = list(&value("--engine-workloads")?);
                if let Some(w) = a
                    .engine_workloads
                    .iter()
                    .find(|w| !ENGINE_WORKLOADS.contains(&w.as_str()))
                {
                    return Err(format!("--engine-workloads: unknown workload {w:?}").into());
                }
            }
            "--engines" => {
                a.engines = list(&value("--engines")?);
                if let Some(e) = a
                    .engines
                    .iter()
                    .find(|e| !["overlay", "fuse"].contains(&e.as_str()))
                {
                    return Err(format!("--engines: unknown engine {e:?}").into());
                }
            }
            "--remote-files" => a.remote_files = count(value("--remote-files")?)?.max(200),
            "--remote-reps" => a.remote_reps = count(value("--remote-reps")?)?.max(1),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}\n{USAGE}").into()),
        }
    }
    Ok(a)
}
