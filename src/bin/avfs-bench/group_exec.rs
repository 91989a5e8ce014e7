//! The exec group: the overhead of `avfs exec` and its change report.

use super::*;

// ---------------------------------------------------------------------------------------
// Exec workloads: the overhead of `avfs exec` and its change report.

/// The patch size limit `avfs exec` uses for its change report (src/cli/exec.rs).
pub(crate) const EXEC_PATCH_LIMIT: u64 = 64 * 1024;

pub(crate) fn check_envelope(out: &[u8], checkpoint: bool) -> BoxResult<()> {
    check_envelope_sandbox(out, checkpoint, false)
}

pub(crate) fn check_envelope_sandbox(out: &[u8], checkpoint: bool, sandbox: bool) -> BoxResult<()> {
    let v: serde_json::Value = serde_json::from_slice(out)?;
    if v["exit_code"] != 0
        || v["checkpoint"].is_null() == checkpoint
        || v["sandbox"]["enforced"] != sandbox
    {
        return Err(format!(
            "avfs exec: unexpected envelope (exit_code {}, checkpoint {}, sandbox {})",
            v["exit_code"], v["checkpoint"], v["sandbox"]
        )
        .into());
    }
    Ok(())
}

/// Whether bwrap runs here (the sandbox rows are left out, with a note, when not).
pub(crate) fn bwrap_usable() -> Result<(), String> {
    match Command::new("bwrap")
        .args([
            "--ro-bind",
            "/",
            "/",
            "--unshare-pid",
            "--unshare-net",
            "--",
            "true",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
    {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(String::from_utf8_lossy(&o.stderr).trim().to_string()),
        Err(e) => Err(format!("bwrap: {e}")),
    }
}

pub(crate) fn bench_exec(
    args: &Args,
    avfs: &Path,
    base: &Path,
    reuse: Option<PathBuf>,
    t0: Instant,
) -> BoxResult<GroupResult> {
    let tag = "exec";
    let n = args.exec_files;
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let plan = plan_tree(n, 42 + n as u64);
    let work = match &reuse {
        Some(w) => w.clone(),
        None => base.join(format!("exec-n{n}")),
    };
    let env = Env {
        avfs: avfs.to_path_buf(),
        home: work.join("home"),
    };
    if reuse.is_some() {
        notes.push(format!(
            "workspace: the vault group's {}-file vault (imported tree, forks `exec` and `report` of it)",
            fmt_count(n as f64)
        ));
    } else {
        progress_tag(
            t0,
            tag,
            &format!("generating and importing a {n}-file tree"),
        );
        let src = work.join("src");
        write_tree(&src, &plan)?;
        run(&mut env.avfs(["vault", "create", "bench"]))?;
        run(&mut env.avfs([
            OsStr::new("--vault"),
            OsStr::new("bench"),
            OsStr::new("import"),
            src.as_os_str(),
            OsStr::new("/"),
        ]))?;
        std::fs::remove_dir_all(&src)?;
        notes.push(format!(
            "workspace: a generated {}-file tree (the vault group's generator), imported (forks `exec` and `report` of it)",
            fmt_count(n as f64)
        ));
    }
    let vault_path = Registry::open(&env.home)?
        .get("bench")?
        .ok_or("vault bench is not registered")?
        .path;

    // The change report of 100 changed files, as `avfs exec` computes it after the command:
    // flush the live layer to a root, diff it against the root from before, add patches.
    progress_tag(t0, tag, "change report of 100 changes");
    run(&mut env.avfs(["vault", "fork", "bench", "report"]))?;
    let mut rng = Rng::new(0xE7EC ^ n as u64);
    let mut store = Store::open(&vault_path)?;
    for rewrite in [false, true] {
        let mut full = Stat::default();
        let mut diff_patch = Stat::default();
        let mut phases = PhaseStats::default();
        let mut patched = 0;
        for k in 0..args.reps {
            let before = store.write(|db| Workspace::open(db, "report")?.flush())?;
            let changes = if rewrite {
                pick_changes(&mut rng, &plan, 100, &format!("report {k}"))
            } else {
                pick_edits(&mut rng, &plan, 100, &format!("report {k}"))
            };
            apply_vault(&vault_path, "report", &changes)?;
            let (d, (summary, with_patch), ph) = lib_timed(&mut store, |db, ph| {
                let mut m = Mark(Instant::now());
                let mut ws = Workspace::open(db, "report")?;
                let after = ws.flush()?;
                m.lap(ph, "flush");
                let mut changes = diff_roots(db, &before, &after)?;
                m.lap(ph, "diff_roots");
                add_patches(db, &mut changes, EXEC_PATCH_LIMIT)?;
                m.lap(ph, "add_patches");
                let with_patch = changes.iter().filter(|c| c.patch.is_some()).count();
                Ok((ChangeSummary::of(&changes), with_patch))
            })?;
            if summary.modified != 100
                || summary.added + summary.deleted + summary.type_changed + summary.mode_changed
                    != 0
            {
                return Err(format!(
                    "change report: expected 100 modified files, got {}",
                    serde_json::to_string(&summary)?
                )
                .into());
            }
            patched = with_patch;
            full.push(d);
            diff_patch.push(
                ph.iter()
                    .filter(|(name, _)| *name == "diff_roots" || *name == "add_patches")
                    .map(|(_, d)| *d)
                    .sum(),
            );
            phases.add(&ph);
        }
        let what = if rewrite {
            "100 rewritten files (all new content)"
        } else {
            "100 edited files (one line each)"
        };
        rows.push(Row {
            op: format!("change report, {what}: diff_roots + add_patches (library)"),
            files: n,
            avfs: diff_patch,
            goal: Some(Goal::Under(0.010)),
            goal_applies: true,
            ..Default::default()
        });
        rows.push(Row {
            op: "  as exec does it: flush + diff_roots + add_patches + commit (library)".into(),
            files: n,
            avfs: full,
            goal: Some(Goal::Under(0.010)),
            goal_applies: true,
            ..Default::default()
        });
        notes.push(format!(
            "change report, {what}, phases: {}; {patched} of the 100 changes got a patch (text files up to 64 KiB)",
            phases.describe()
        ));
    }
    drop(store);

    // `avfs exec -- true`, end to end, against `sh -c true`.
    run(&mut env.avfs(["vault", "fork", "bench", "exec"]))?;
    let xreps = args.reps * 3;
    let exec = |checkpoint: bool| {
        env.avfs([
            "--vault",
            "exec",
            "--json",
            "exec",
            if checkpoint {
                "--checkpoint"
            } else {
                "--no-checkpoint"
            },
            "--",
            "true",
        ])
    };
    // `avfs exec -- true` as an agent types it (read-only: no checkpoint), with and
    // without --sandbox: the sandbox's own overhead.
    let plain = |sandbox: bool| {
        let mut c = env.avfs(["--vault", "exec", "--json", "exec"]);
        if sandbox {
            c.arg("--sandbox");
        }
        c.args(["--", "true"]);
        c
    };
    let sandbox_ok = bwrap_usable();
    let native = || cmd("sh", ["-c", "true"]);
    let mut sh_true = Stat::default();
    let mut live = [Stat::default(), Stat::default()];
    let mut cold = [Stat::default(), Stat::default()];
    // [plain, sandboxed] with a live mount and without.
    let mut live_sb = [Stat::default(), Stat::default()];
    let mut cold_sb = [Stat::default(), Stat::default()];
    let variants: Vec<bool> = if sandbox_ok.is_ok() {
        vec![false, true]
    } else {
        Vec::new()
    };

    progress_tag(
        t0,
        tag,
        &format!("avfs exec with a live mount, {xreps} reps"),
    );
    let mnt = work.join("exec-mnt");
    std::fs::create_dir_all(&mnt)?;
    let rec = mount(&env, "exec", &mnt)?;
    let guard = Unmount {
        env: &env,
        mnt: mnt.clone(),
        done: false,
    };
    for checkpoint in [true, false] {
        for _ in 0..2 {
            check_envelope(&run(&mut exec(checkpoint))?, checkpoint)?;
        }
    }
    for &sandbox in &variants {
        check_envelope_sandbox(&run(&mut plain(sandbox))?, false, sandbox)?;
    }
    for _ in 0..xreps {
        sh_true.push(run_timed(&mut native(), &[0])?.0);
        for (i, checkpoint) in [true, false].into_iter().enumerate() {
            let (d, out) = run_timed(&mut exec(checkpoint), &[0])?;
            check_envelope(&out, checkpoint)?;
            live[i].push(d);
        }
        for &sandbox in &variants {
            let (d, out) = run_timed(&mut plain(sandbox), &[0])?;
            check_envelope_sandbox(&out, false, sandbox)?;
            live_sb[sandbox as usize].push(d);
        }
    }
    notes.push(format!(
        "live mount: server pid {}, mounted with `avfs mount exec DIR` before the runs",
        rec["pid"]
    ));
    guard.finish()?;

    progress_tag(
        t0,
        tag,
        &format!("avfs exec without a live mount, {xreps} reps"),
    );
    for checkpoint in [true, false] {
        check_envelope(&run(&mut exec(checkpoint))?, checkpoint)?;
    }
    for &sandbox in &variants {
        check_envelope_sandbox(&run(&mut plain(sandbox))?, false, sandbox)?;
    }
    for _ in 0..xreps {
        sh_true.push(run_timed(&mut native(), &[0])?.0);
        for (i, checkpoint) in [true, false].into_iter().enumerate() {
            let (d, out) = run_timed(&mut exec(checkpoint), &[0])?;
            check_envelope(&out, checkpoint)?;
            cold[i].push(d);
        }
        for &sandbox in &variants {
            let (d, out) = run_timed(&mut plain(sandbox), &[0])?;
            check_envelope_sandbox(&out, false, sandbox)?;
            cold_sb[sandbox as usize].push(d);
        }
    }
    let left: serde_json::Value =
        serde_json::from_slice(&run(&mut env.avfs(["--json", "mounts"]))?)?;
    if left["mounts"].as_array().is_some_and(|a| !a.is_empty()) {
        return Err(format!("avfs exec left mounts behind: {}", left["mounts"]).into());
    }
    let mut floor = Stat::default();
    for _ in 0..xreps {
        floor.push(run_timed(&mut env.avfs(["--version"]), &[0])?.0);
    }
    let mut extra = Vec::new();
    if let Err(why) = &sandbox_ok {
        notes.push(format!(
            "sandbox: not measured, bwrap does not run here ({why}); install bubblewrap"
        ));
    } else {
        extra.push(String::new());
        for (where_, [p, s]) in [("live mount", &live_sb), ("no live mount", &cold_sb)] {
            let (pm, sm) = (p.median(), s.median());
            extra.push(format!(
                "sandbox overhead, {where_}: `avfs exec --sandbox -- true` {} vs `avfs exec -- true` {} (medians of {}, interleaved): ratio {:.2}, +{}",
                fmt_secs(sm),
                fmt_secs(pm),
                s.0.len(),
                sm / pm,
                fmt_secs(sm - pm)
            ));
        }
        let mut bw = Stat::default();
        for _ in 0..xreps {
            let mut c = cmd(
                "bwrap",
                [
                    "--ro-bind",
                    "/usr",
                    "/usr",
                    "--symlink",
                    "usr/bin",
                    "/bin",
                    "--symlink",
                    "usr/lib",
                    "/lib",
                    "--symlink",
                    "usr/lib64",
                    "/lib64",
                    "--unshare-pid",
                    "--unshare-net",
                    "--",
                    "/bin/true",
                ],
            );
            bw.push(run_timed(&mut c, &[0])?.0);
        }
        extra.push(format!(
            "  for scale: a bare `bwrap --ro-bind /usr /usr ... --unshare-pid --unshare-net -- /bin/true` {} (median of {})",
            fmt_secs(bw.median()),
            bw.0.len()
        ));
    }
    let [live_ck, live_nock] = live;
    let [cold_ck, cold_nock] = cold;
    for (op, s, goal) in [
        (
            "avfs exec --checkpoint -- true, live mount",
            live_ck,
            Some(0.015),
        ),
        (
            "avfs exec --no-checkpoint -- true, live mount",
            live_nock,
            None,
        ),
        (
            "avfs exec --checkpoint -- true, no live mount",
            cold_ck,
            Some(0.100),
        ),
        (
            "avfs exec --no-checkpoint -- true, no live mount",
            cold_nock,
            None,
        ),
        ("avfs exec -- true, live mount", live_sb[0].clone(), None),
        (
            "avfs exec --sandbox -- true, live mount",
            live_sb[1].clone(),
            None,
        ),
        ("avfs exec -- true, no live mount", cold_sb[0].clone(), None),
        (
            "avfs exec --sandbox -- true, no live mount",
            cold_sb[1].clone(),
            None,
        ),
        (
            "  for scale: avfs --version (process start only)",
            floor,
            None,
        ),
    ] {
        if s.0.is_empty() {
            continue;
        }
        rows.push(Row {
            op: op.into(),
            files: n,
            avfs: s,
            native: Some(sh_true.clone()),
            goal: goal.map(Goal::Under),
            goal_applies: true,
            ..Default::default()
        });
    }

    if !args.keep {
        progress_tag(t0, tag, "cleaning up");
        std::fs::remove_dir_all(&work)?;
    }
    Ok(GroupResult { rows, notes, extra })
}
