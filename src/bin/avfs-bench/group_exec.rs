//! The exec group: the overhead of `avfs exec` and its change report.

use super::*;

// ---------------------------------------------------------------------------------------
// Exec workloads: the overhead of `avfs exec` and its change report.

/// The patch size limit `avfs exec` uses for its change report (src/boundary/run.rs).
pub(crate) const EXEC_PATCH_LIMIT: u64 = 64 * 1024;

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

    // `avfs exec -- true`, end to end, against `sh -c true`: what an agent types (read-only,
    // so no checkpoint), in each engine, with and without the sandbox.
    run(&mut env.avfs(["vault", "fork", "bench", "exec"]))?;
    let xreps = args.reps * 3;
    let variant = |flags: &[&str]| {
        let mut c = env.avfs(["--vault", "exec", "--json", "exec"]);
        c.args(flags).args(["--", "true"]);
        c
    };
    type Variant = (&'static str, &'static [&'static str], bool, Option<f64>);
    let variants: &[Variant] = &[
        (
            "avfs exec -- true (overlay engine, sandbox)",
            &[],
            true,
            Some(0.010),
        ),
        (
            "avfs exec --no-sandbox -- true (overlay engine)",
            &["--no-sandbox"],
            false,
            None,
        ),
        (
            "avfs exec --checkpoint -- true (overlay engine, sandbox)",
            &["--checkpoint"],
            true,
            None,
        ),
        (
            "avfs exec --engine fuse -- true (a mount for the run)",
            &["--engine", "fuse"],
            true,
            None,
        ),
    ];
    // The first run of a workspace writes its layer (the whole tree, once): not timed.
    progress_tag(t0, tag, "avfs exec: first run (writes the layer cache)");
    let first = Instant::now();
    let out = run(&mut variant(&[]))?;
    let v: serde_json::Value = serde_json::from_slice(&out)?;
    notes.push(format!(
        "first overlay run of the workspace: {} (the layer cache written: {} entries, {} ms), not in the table",
        fmt_secs(first.elapsed().as_secs_f64()),
        v["engine"]["layers"]["written"],
        v["engine"]["layers"]["prepare_ms"]
    ));
    for (_, flags, sandbox, _) in variants {
        let out = run(&mut variant(flags))?;
        check_envelope_sandbox(&out, flags.contains(&"--checkpoint"), *sandbox)?;
    }
    progress_tag(t0, tag, &format!("avfs exec -- true, {xreps} reps of each"));
    let native = || cmd("sh", ["-c", "true"]);
    let mut sh_true = Stat::default();
    let mut stats: Vec<Stat> = variants.iter().map(|_| Stat::default()).collect();
    for _ in 0..xreps {
        sh_true.push(run_timed(&mut native(), &[0])?.0);
        for (i, (_, flags, sandbox, _)) in variants.iter().enumerate() {
            let (d, out) = run_timed(&mut variant(flags), &[0])?;
            check_envelope_sandbox(&out, flags.contains(&"--checkpoint"), *sandbox)?;
            stats[i].push(d);
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
    let extra = vec![
        String::new(),
        format!(
            "sandbox overhead (overlay engine), `exec -- true` against `exec --no-sandbox -- true`: medians {} with, {} without, +{} (goal < 5 ms); minima {} and {}; {} interleaved rounds, load {}",
            fmt_secs(stats[0].median()),
            fmt_secs(stats[1].median()),
            fmt_secs(stats[0].median() - stats[1].median()),
            fmt_secs(stats[0].min()),
            fmt_secs(stats[1].min()),
            stats[0].0.len(),
            std::fs::read_to_string("/proc/loadavg")
                .ok()
                .and_then(|l| l.split_whitespace().next().map(String::from))
                .unwrap_or_else(|| "unknown".into())
        ),
    ];
    for ((op, _, _, goal), s) in variants.iter().zip(stats) {
        rows.push(Row {
            op: (*op).into(),
            files: n,
            avfs: s,
            native: Some(sh_true.clone()),
            goal: goal.map(Goal::Under),
            goal_applies: true,
            ..Default::default()
        });
    }
    rows.push(Row {
        op: "  for scale: avfs --version (process start only)".into(),
        files: n,
        avfs: floor,
        native: Some(sh_true.clone()),
        ..Default::default()
    });

    if !args.keep {
        progress_tag(t0, tag, "cleaning up");
        std::fs::remove_dir_all(&work)?;
    }
    Ok(GroupResult { rows, notes, extra })
}
