//! Confining a run's PID 1 (and so everything it starts) once its mounts are in place:
//! capabilities dropped, `no_new_privs`, Landlock (where it may read, write and execute;
//! no signals or abstract sockets outside the run), and a seccomp filter against the
//! calls that would change the kernel's view of the run (mounts, new namespaces, modules,
//! keyrings, device nodes) and against setuid/setgid bits: chmod and file creation with
//! a mode carrying S_ISUID or S_ISGID fail with EPERM, so no such file is ever written
//! to the host's disk (the workspace's upper, a cache). The same set Codex CLI and
//! container runtimes use on Linux, plus the last.

use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;

use landlock::{
    ABI, Access as _, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope,
};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use serde::{Deserialize, Serialize};

/// What a confined run may touch (paths as the run sees them).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Access {
    /// Read and execute.
    pub read_only: Vec<PathBuf>,
    /// Everything (the workspace, the private /tmp and /dev/shm).
    pub writable: Vec<PathBuf>,
    /// Device files read and written in place (/dev/null, /dev/tty, ...).
    pub devices: Vec<PathBuf>,
    /// Keep the capabilities a root build needs (`config::ROOT_CAPS`); others go.
    pub keep_root_caps: bool,
}

const CAP_NUMBERS: &[(&str, u32)] = &[
    ("CAP_CHOWN", 0),
    ("CAP_DAC_OVERRIDE", 1),
    ("CAP_FOWNER", 3),
    ("CAP_FSETID", 4),
    ("CAP_KILL", 5),
    ("CAP_SETGID", 6),
    ("CAP_SETUID", 7),
    ("CAP_NET_BIND_SERVICE", 10),
];

fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(40)
}

/// Drops every capability from the bounding set but the ones a root build keeps, and
/// every ambient one: what the command gets at exec is at most what is left.
fn drop_caps(keep_root_caps: bool) -> io::Result<()> {
    let keep: Vec<u32> = if keep_root_caps {
        super::config::ROOT_CAPS
            .iter()
            .filter_map(|n| CAP_NUMBERS.iter().find(|(m, _)| m == n).map(|(_, v)| *v))
            .collect()
    } else {
        vec![]
    };
    // SAFETY: prctl calls on this process.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
    }
    for cap in 0..=last_cap() {
        if keep.contains(&cap) {
            continue;
        }
        // SAFETY: as above. EINVAL for a capability this kernel lacks is fine.
        let r = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        if r < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
            return Err(super::sys::err(format!("dropping capability {cap}")));
        }
    }
    Ok(())
}

/// The Landlock ABI this kernel speaks (0: none).
pub fn landlock_abi() -> i32 {
    // SAFETY: the version query of landlock_create_ruleset takes no ruleset.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    if r < 0 { 0 } else { r as i32 }
}

fn landlock(a: &Access) -> io::Result<()> {
    let abi = ABI::V6;
    let fail = |e: &dyn std::fmt::Display| io::Error::other(format!("landlock: {e}"));
    let read = AccessFs::from_read(abi);
    let all = AccessFs::from_all(abi);
    let device = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev | AccessFs::Truncate;
    // Listing directories anywhere shows names only; contents need a rule below.
    let mut rules: Vec<(PathBuf, landlock::BitFlags<AccessFs>)> =
        vec![(PathBuf::from("/"), AccessFs::ReadDir.into())];
    rules.extend(a.read_only.iter().map(|p| (p.clone(), read)));
    rules.extend(a.devices.iter().map(|p| (p.clone(), device)));
    rules.extend(a.writable.iter().map(|p| (p.clone(), all)));
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(|e| fail(&e))?
        .scope(Scope::from_all(abi))
        .map_err(|e| fail(&e))?
        .create()
        .map_err(|e| fail(&e))?;
    for (path, access) in rules {
        // A listed path that does not exist is simply not visible.
        let Ok(fd) = PathFd::new(&path) else { continue };
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| fail(&e))?;
    }
    let status = ruleset.restrict_self().map_err(|e| fail(&e))?;
    if status.ruleset == RulesetStatus::NotEnforced {
        return Err(io::Error::other(
            "landlock: this kernel does not enforce Landlock (needs Linux 5.13 with landlock in lsm=)",
        ));
    }
    Ok(())
}

/// The seccomp filter: the listed calls fail with EPERM (clone3 with ENOSYS, so that C
/// libraries fall back to clone, whose flags the filter can see).
fn seccomp() -> io::Result<()> {
    let arch = match std::env::consts::ARCH {
        "x86_64" => TargetArch::x86_64,
        "aarch64" => TargetArch::aarch64,
        "riscv64" => TargetArch::riscv64,
        other => return Err(io::Error::other(format!("seccomp: no filter for {other}"))),
    };
    let fail = |e: &dyn std::fmt::Display| io::Error::other(format!("seccomp: {e}"));
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for nr in [
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_move_mount,
        libc::SYS_open_tree,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_reboot,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_bpf,
        libc::SYS_userfaultfd,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_setns,
        libc::SYS_unshare,
        libc::SYS_open_by_handle_at,
        libc::SYS_acct,
        libc::SYS_quotactl,
        libc::SYS_syslog,
        libc::SYS_perf_event_open,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_settimeofday,
        libc::SYS_clock_settime,
        libc::SYS_clock_adjtime,
        libc::SYS_adjtimex,
        libc::SYS_sethostname,
        libc::SYS_setdomainname,
    ] {
        rules.insert(nr, vec![]);
    }
    #[cfg(target_arch = "x86_64")]
    for nr in [libc::SYS_iopl, libc::SYS_ioperm] {
        rules.insert(nr, vec![]);
    }
    let cond = |arg: u8, op, v: u64| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Qword, op, v).map_err(|e| fail(&e))
    };
    // New user namespaces through clone.
    rules.insert(
        libc::SYS_clone,
        vec![
            SeccompRule::new(vec![cond(
                0,
                SeccompCmpOp::MaskedEq(libc::CLONE_NEWUSER as u64),
                libc::CLONE_NEWUSER as u64,
            )?])
            .map_err(|e| fail(&e))?,
        ],
    );
    // Device nodes (FIFOs and sockets are fine).
    let ifmt = libc::S_IFMT as u64;
    let dev_rules = |arg: u8| -> io::Result<Vec<SeccompRule>> {
        Ok(vec![
            SeccompRule::new(vec![cond(
                arg,
                SeccompCmpOp::MaskedEq(ifmt),
                libc::S_IFCHR as u64,
            )?])
            .map_err(|e| fail(&e))?,
            SeccompRule::new(vec![cond(
                arg,
                SeccompCmpOp::MaskedEq(ifmt),
                libc::S_IFBLK as u64,
            )?])
            .map_err(|e| fail(&e))?,
        ])
    };
    // Setuid/setgid bits in a mode argument (`mode_arg`), with `flags_arg` carrying
    // one of `creating` when given (open: the mode counts only when it creates).
    let set_id = |mode_arg: u8, flags: Option<(u8, &[u64])>| -> io::Result<Vec<SeccompRule>> {
        let mut out = vec![];
        for bit in [libc::S_ISUID as u64, libc::S_ISGID as u64] {
            let mode = cond(mode_arg, SeccompCmpOp::MaskedEq(bit), bit)?;
            match flags {
                None => out.push(SeccompRule::new(vec![mode]).map_err(|e| fail(&e))?),
                Some((flags_arg, creating)) => {
                    for f in creating {
                        let fl = cond(flags_arg, SeccompCmpOp::MaskedEq(*f), *f)?;
                        out.push(SeccompRule::new(vec![fl, mode.clone()]).map_err(|e| fail(&e))?);
                    }
                }
            }
        }
        Ok(out)
    };
    let creating: &[u64] = &[libc::O_CREAT as u64, libc::O_TMPFILE as u64];
    #[cfg(target_arch = "x86_64")]
    {
        let mut mknod = dev_rules(1)?;
        mknod.extend(set_id(1, None)?);
        rules.insert(libc::SYS_mknod, mknod);
        rules.insert(libc::SYS_chmod, set_id(1, None)?);
        rules.insert(libc::SYS_mkdir, set_id(1, None)?);
        rules.insert(libc::SYS_creat, set_id(1, None)?);
        rules.insert(libc::SYS_open, set_id(2, Some((1, creating)))?);
    }
    let mut mknodat = dev_rules(2)?;
    mknodat.extend(set_id(2, None)?);
    rules.insert(libc::SYS_mknodat, mknodat);
    rules.insert(libc::SYS_fchmod, set_id(1, None)?);
    rules.insert(libc::SYS_fchmodat, set_id(2, None)?);
    rules.insert(libc::SYS_fchmodat2, set_id(2, None)?);
    rules.insert(libc::SYS_mkdirat, set_id(2, None)?);
    rules.insert(libc::SYS_openat, set_id(3, Some((2, creating)))?);
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| fail(&e))?;
    let mut prog: BpfProgram = filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| fail(&e))?;
    // clone3's flags and openat2's mode live in memory the filter cannot read: ENOSYS
    // makes C libraries use clone and openat instead, whose arguments it sees.
    // Prepended: the first matching return wins.
    let mut unseen = vec![seccompiler::sock_filter {
        code: 0x20, // BPF_LD | BPF_W | BPF_ABS: load the syscall number
        jt: 0,
        jf: 0,
        k: 0,
    }];
    for nr in [libc::SYS_clone3, libc::SYS_openat2] {
        unseen.push(seccompiler::sock_filter {
            code: 0x15, // BPF_JMP | BPF_JEQ | BPF_K
            jt: 0,
            jf: 1,
            k: nr as u32,
        });
        unseen.push(seccompiler::sock_filter {
            code: 0x06, // BPF_RET | BPF_K
            jt: 0,
            jf: 0,
            k: 0x0005_0000 | libc::ENOSYS as u32, // SECCOMP_RET_ERRNO
        });
    }
    // The compiled program starts by checking the architecture (3 instructions, the
    // third kills a foreign one); insert after it. seccompiler's own program reloads
    // the syscall number where it needs it.
    let at = 3.min(prog.len());
    for (i, ins) in unseen.into_iter().enumerate() {
        prog.insert(at + i, ins);
    }
    seccompiler::apply_filter(&prog).map_err(|e| fail(&e))
}

/// Confines this process for good. Order matters: capabilities first (Landlock and
/// seccomp need none), Landlock sets `no_new_privs`, seccomp last.
pub fn confine(a: &Access) -> io::Result<()> {
    drop_caps(a.keep_root_caps)?;
    landlock(a)?;
    seccomp()
}
