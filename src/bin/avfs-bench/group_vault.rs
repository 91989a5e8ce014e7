//! The vault group: vault operations on workspaces of several sizes.

use super::*;

// ---------------------------------------------------------------------------------------
// One size.

pub(crate) struct SizeResult {
    pub(crate) rows: Vec<Row>,
    pub(crate) notes: Vec<String>,
    pub(crate) fork_lib: f64,
    pub(crate) fork_proc: f64,
}

pub(crate) fn bench_size(
    args: &Args,
    avfs: &Path,
    base: &Path,
    n: usize,
    t0: Instant,
    keep_for_exec: bool,
) -> BoxResult<SizeResult> {
    let work = base.join(format!("n{n}"));
    std::fs::create_dir_all(&work)?;
    let src = work.join("src");
    let env = Env {
        avfs: avfs.to_path_buf(),
        home: work.join("home"),
    };
    let reps = args.reps;
    let nreps = args.native_reps;
    let mut rng = Rng::new(0xA5F5 ^ n as u64);
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let big = n >= 100_000;

    // The tree.
    progress(n, t0, "generating the host tree");
    let plan = plan_tree(n, 42 + n as u64);
    let tg = Instant::now();
    write_tree(&src, &plan)?;
    notes.push(format!(
        "tree: {} files in {} directories, {:.1} MB, written in {}",
        fmt_count(plan.files.len() as f64),
        plan.dirs.len(),
        plan.bytes as f64 / 1e6,
        fmt_secs(tg.elapsed().as_secs_f64())
    ));

    // Import, interleaved with its native analogue `cp -a`.
    progress(n, t0, &format!("import and cp -a, {nreps} reps each"));
    let mut import = Stat::default();
    let mut cp = Stat::default();
    for k in 0..nreps.max(2) {
        let copy = work.join(format!("cp-{k}"));
        let (d, _) = run_timed(
            &mut cmd("cp", [OsStr::new("-a"), src.as_os_str(), copy.as_os_str()]),
            &[0],
        )?;
        if k < nreps {
            cp.push(d);
            let name = if k == 0 {
                "bench".to_string()
            } else {
                format!("imp{k}")
            };
            run(&mut env.avfs(["vault", "create", &name]))?;
            let (d, _) = run_timed(
                &mut env.avfs([
                    OsStr::new("--vault"),
                    OsStr::new(&name),
                    OsStr::new("import"),
                    src.as_os_str(),
                    OsStr::new("/"),
                ]),
                &[0],
            )?;
            import.push(d);
            if k > 0 {
                run(&mut env.avfs(["vault", "delete", &name, "-y"]))?;
            }
        }
        if k >= 2 {
            std::fs::remove_dir_all(&copy)?;
        }
    }
    rows.push(Row {
        op: "import (process)".into(),
        files: n,
        avfs: import,
        native: Some(cp.clone()),
        goal: Some(Goal::Rate(20_000.0)),
        goal_applies: big,
        rate: true,
        ..Default::default()
    });
    let vault_path = Registry::open(&env.home)?
        .get("bench")?
        .ok_or("vault bench is not registered")?
        .path;
    notes.push(format!(
        "vault file after import: {:.1} MB (with -wal)",
        dir_bytes(&vault_path) as f64 / 1e6
    ));
    let git_dir = work.join("cp-0");
    let after_dir = work.join("cp-1");

    run(&mut env.avfs(["--vault", "bench", "checkpoint", "save", "base"]))?;
    // Library figures use one long-lived connection (as a mount or a host program would);
    // it is closed before whole-process figures, so that each `avfs` process is the only
    // connection, as when a user runs it (SQLite then checkpoints the WAL on close).
    let mut store = Store::open(&vault_path)?;

    // Fork.
    progress(n, t0, "fork");
    let mut fork_lib = Stat::default();
    let mut fork_phases = PhaseStats::default();
    for k in 0..reps {
        let name = format!("lf{k}");
        let (d, _, ph) = lib_timed(&mut store, |db, ph| {
            let mut m = Mark(Instant::now());
            let mut ws = Workspace::open(db, MAIN)?;
            let info = ws.fork(&name, None)?;
            m.lap(ph, "fork");
            audit::append(
                db,
                Some(MAIN),
                "cli",
                "vault.fork",
                &json!({"fork": name, "from": info.parent_checkpoint}),
            )?;
            m.lap(ph, "audit");
            Ok(())
        })?;
        fork_lib.push(d);
        fork_phases.add(&ph);
    }
    drop(store);
    let mut fork_proc = Stat::default();
    for k in 0..reps {
        let (d, _) = run_timed(
            &mut env.avfs(["vault", "fork", "bench", &format!("pf{k}")]),
            &[0],
        )?;
        fork_proc.push(d);
    }
    let (fl, fp) = (fork_lib.median(), fork_proc.median());
    rows.push(Row {
        op: "fork (library)".into(),
        files: n,
        avfs: fork_lib,
        native: Some(cp.clone()),
        goal: Some(Goal::Under(0.005)),
        goal_applies: big,
        rate: false,
        ..Default::default()
    });
    rows.push(Row {
        op: "fork (process)".into(),
        files: n,
        avfs: fork_proc,
        native: Some(cp.clone()),
        goal: None,
        goal_applies: false,
        rate: false,
        ..Default::default()
    });
    notes.push(format!("fork (library) phases: {}", fork_phases.describe()));

    // Git repository for the native checkpoint analogues (untimed setup, reported).
    progress(n, t0, "git init + add + commit of the native copy");
    run(git(&git_dir).args(["init", "-q"]))?;
    run(git(&git_dir).args(["config", "gc.auto", "0"]))?;
    run(git(&git_dir).args(["config", "commit.gpgsign", "false"]))?;
    let tgit = Instant::now();
    run(git(&git_dir).args(["add", "-A"]))?;
    run(git(&git_dir).args(["commit", "-q", "-m", "base"]))?;
    notes.push(format!(
        "git add -A + commit of the whole tree (untimed setup): {}",
        fmt_secs(tgit.elapsed().as_secs_f64())
    ));

    // Checkpoint save with 10 changed files, in a fork of the base.
    progress(n, t0, "checkpoint save (10 changed files)");
    run(&mut env.avfs(["vault", "fork", "bench", "save"]))?;
    let mut store = Store::open(&vault_path)?;
    let mut save_lib = Stat::default();
    let mut save_phases = PhaseStats::default();
    for k in 0..reps {
        let changes = pick_changes(&mut rng, &plan, 10, &format!("save lib {k}"));
        apply_vault(&vault_path, "save", &changes)?;
        let name = format!("ls{k}");
        let (d, _, ph) = lib_timed(&mut store, |db, ph| {
            let mut m = Mark(Instant::now());
            let mut ws = Workspace::open(db, "save")?;
            let s = ws.checkpoint(Some(&name), None, "cli")?;
            m.lap(ph, "checkpoint");
            audit::append(
                db,
                Some("save"),
                "cli",
                "checkpoint.save",
                &json!({"name": name, "message": null}),
            )?;
            m.lap(ph, "audit");
            Ok(s)
        })?;
        save_lib.push(d);
        save_phases.add(&ph);
    }
    drop(store);
    let mut save_proc = Stat::default();
    for k in 0..reps {
        let changes = pick_changes(&mut rng, &plan, 10, &format!("save proc {k}"));
        apply_vault(&vault_path, "save", &changes)?;
        let (d, _) = run_timed(
            &mut env.avfs(["--vault", "save", "checkpoint", "save", &format!("ps{k}")]),
            &[0],
        )?;
        save_proc.push(d);
    }
    let mut save_git = Stat::default();
    for k in 0..reps {
        let changes = pick_changes(&mut rng, &plan, 10, &format!("save git {k}"));
        apply_native(&git_dir, &changes)?;
        let (d1, _) = run_timed(git(&git_dir).args(["add", "-A"]), &[0])?;
        let (d2, _) = run_timed(
            git(&git_dir).args(["commit", "-q", "-m", &format!("save {k}")]),
            &[0],
        )?;
        save_git.push(d1 + d2);
    }
    rows.push(Row {
        op: "checkpoint save, 10 changed (library)".into(),
        files: n,
        avfs: save_lib,
        native: Some(save_git.clone()),
        goal: Some(Goal::Under(0.010)),
        goal_applies: big,
        rate: false,
        ..Default::default()
    });
    rows.push(Row {
        op: "checkpoint save, 10 changed (process)".into(),
        files: n,
        avfs: save_proc,
        native: Some(save_git),
        goal: None,
        goal_applies: false,
        rate: false,
        ..Default::default()
    });
    notes.push(format!(
        "checkpoint save (library) phases: {}",
        save_phases.describe()
    ));

    // Restore of the head checkpoint with 100 unsaved changes, in another fork.
    progress(n, t0, "checkpoint restore (100 changed files)");
    run(&mut env.avfs(["vault", "fork", "bench", "restore"]))?;
    run(&mut env.avfs(["--vault", "restore", "checkpoint", "save", "r0"]))?;
    let mut store = Store::open(&vault_path)?;
    let mut restore_lib = Stat::default();
    let mut restore_phases = PhaseStats::default();
    for k in 0..reps {
        let changes = pick_changes(&mut rng, &plan, 100, &format!("restore lib {k}"));
        apply_vault(&vault_path, "restore", &changes)?;
        let auto = format!("auto-lib-{k}");
        let (d, saved, ph) = lib_timed(&mut store, |db, ph| {
            let mut m = Mark(Instant::now());
            let mut ws = Workspace::open(db, "restore")?;
            let cp = ws.find_checkpoint("r0")?;
            let mut saved = false;
            if ws.is_modified()? {
                m.lap(ph, "is_modified (flush)");
                ws.checkpoint(
                    Some(&auto),
                    Some("unsaved changes before restoring r0"),
                    "auto",
                )?;
                saved = true;
                m.lap(ph, "auto checkpoint");
            }
            ws.restore(&cp)?;
            m.lap(ph, "restore");
            audit::append(
                db,
                Some("restore"),
                "cli",
                "checkpoint.restore",
                &json!({"name": "r0"}),
            )?;
            m.lap(ph, "audit");
            Ok(saved)
        })?;
        if !saved {
            return Err("restore: the 100 changes were not seen as unsaved changes".into());
        }
        restore_lib.push(d);
        restore_phases.add(&ph);
    }
    let mut restore_only = Stat::default();
    let mut restore_only_phases = PhaseStats::default();
    for k in 0..reps {
        let changes = pick_changes(&mut rng, &plan, 100, &format!("restore-only {k}"));
        apply_vault(&vault_path, "restore", &changes)?;
        let (d, _, ph) = lib_timed(&mut store, |db, ph| {
            let mut m = Mark(Instant::now());
            let mut ws = Workspace::open(db, "restore")?;
            let cp = ws.find_checkpoint("r0")?;
            ws.restore(&cp)?;
            m.lap(ph, "restore");
            Ok(())
        })?;
        restore_only.push(d);
        restore_only_phases.add(&ph);
    }
    drop(store);
    let mut restore_proc = Stat::default();
    for k in 0..reps {
        let changes = pick_changes(&mut rng, &plan, 100, &format!("restore proc {k}"));
        apply_vault(&vault_path, "restore", &changes)?;
        let (d, _) = run_timed(
            &mut env.avfs(["--vault", "restore", "checkpoint", "restore", "r0"]),
            &[0],
        )?;
        restore_proc.push(d);
    }
    let mut restore_git = Stat::default();
    for k in 0..reps {
        let changes = pick_changes(&mut rng, &plan, 100, &format!("restore git {k}"));
        apply_native(&git_dir, &changes)?;
        let (d, _) = run_timed(
            git(&git_dir).args(["stash", "push", "-q", "--include-untracked"]),
            &[0],
        )?;
        restore_git.push(d);
    }
    rows.push(Row {
        op: "checkpoint restore, 100 changed (library)".into(),
        files: n,
        avfs: restore_lib,
        native: Some(restore_git.clone()),
        goal: Some(Goal::Under(0.020)),
        goal_applies: big,
        rate: false,
        ..Default::default()
    });
    rows.push(Row {
        op: "checkpoint restore, 100 changed (process)".into(),
        files: n,
        avfs: restore_proc,
        native: Some(restore_git.clone()),
        goal: None,
        goal_applies: false,
        rate: false,
        ..Default::default()
    });
    rows.push(Row {
        op: "  restore only, no auto-save (library)".into(),
        files: n,
        avfs: restore_only,
        native: Some(restore_git),
        goal: None,
        goal_applies: false,
        rate: false,
        ..Default::default()
    });
    notes.push(format!(
        "checkpoint restore (library, as the CLI does it) phases: {}",
        restore_phases.describe()
    ));
    notes.push(format!(
        "restore only (library) phases: {}",
        restore_only_phases.describe()
    ));

    // Diff of two checkpoints 100 changed files apart.
    progress(n, t0, "diff (100 changes)");
    run(&mut env.avfs(["vault", "fork", "bench", "diffws"]))?;
    run(&mut env.avfs(["--vault", "diffws", "checkpoint", "save", "d0"]))?;
    let changes = pick_changes(&mut rng, &plan, 100, "diff");
    apply_vault(&vault_path, "diffws", &changes)?;
    apply_native(&after_dir, &changes)?;
    run(&mut env.avfs(["--vault", "diffws", "checkpoint", "save", "d1"]))?;
    let mut store = Store::open(&vault_path)?;
    let mut diff_lib = Stat::default();
    let mut diff_phases = PhaseStats::default();
    for _ in 0..reps {
        let (d, summary, ph) = lib_timed(&mut store, |db, ph| {
            let mut m = Mark(Instant::now());
            let ws = Workspace::open(db, "diffws")?;
            let a = ws.find_checkpoint("d0")?;
            let b = ws.find_checkpoint("d1")?;
            m.lap(ph, "find checkpoints");
            let changes = diff_roots(db, &a.root, &b.root)?;
            m.lap(ph, "diff_roots");
            let s = ChangeSummary::of(&changes);
            Ok(s)
        })?;
        if summary.modified != 100
            || summary.added + summary.deleted + summary.type_changed + summary.mode_changed != 0
        {
            return Err(format!(
                "diff: expected 100 modified files, got {}",
                serde_json::to_string(&summary)?
            )
            .into());
        }
        diff_lib.push(d);
        diff_phases.add(&ph);
    }
    drop(store);
    let mut diff_proc = Stat::default();
    for _ in 0..reps {
        let (d, out) = run_timed(
            &mut env.avfs(["--vault", "diffws", "--json", "diff", "d0", "d1"]),
            &[0],
        )?;
        let v: serde_json::Value = serde_json::from_slice(&out)?;
        if v["summary"]["modified"] != 100 {
            return Err(format!(
                "avfs diff: expected 100 modified files, got {}",
                v["summary"]
            )
            .into());
        }
        diff_proc.push(d);
    }
    let mut diff_native = Stat::default();
    for _ in 0..nreps {
        let (d, out) = run_timed(
            &mut cmd(
                "diff",
                [OsStr::new("-rq"), src.as_os_str(), after_dir.as_os_str()],
            ),
            &[1],
        )?;
        let lines = out.split(|b| *b == b'\n').filter(|l| !l.is_empty()).count();
        if lines != 100 {
            return Err(format!("diff -rq: expected 100 differing files, got {lines}").into());
        }
        diff_native.push(d);
    }
    rows.push(Row {
        op: "diff of 100 changes (library)".into(),
        files: n,
        avfs: diff_lib,
        native: Some(diff_native.clone()),
        goal: Some(Goal::Under(0.010)),
        goal_applies: big,
        rate: false,
        ..Default::default()
    });
    rows.push(Row {
        op: "diff of 100 changes (process, --json)".into(),
        files: n,
        avfs: diff_proc,
        native: Some(diff_native),
        goal: None,
        goal_applies: false,
        rate: false,
        ..Default::default()
    });
    notes.push(format!("diff (library) phases: {}", diff_phases.describe()));

    // `avfs cat` of a 1 KiB file vs /bin/cat, interleaved.
    progress(n, t0, "cat of a 1 KiB file");
    let target = &plan.files[plan.cat_target];
    let expected = content(target.seed, target.size);
    let host_file = host_path(&src, &target.rel);
    let mut cat_avfs = Stat::default();
    let mut cat_native = Stat::default();
    for _ in 0..reps * 3 {
        let (d, out) = run_timed(
            &mut env.avfs(["--vault", "bench", "cat", &target.rel]),
            &[0],
        )?;
        if out != expected {
            return Err(format!(
                "avfs cat {}: unexpected content ({} bytes)",
                target.rel,
                out.len()
            )
            .into());
        }
        cat_avfs.push(d);
        let (d, out) = run_timed(&mut cmd("cat", [&host_file]), &[0])?;
        if out != expected {
            return Err("cat: unexpected content".into());
        }
        cat_native.push(d);
    }
    rows.push(Row {
        op: "cat 1 KiB file (process)".into(),
        files: n,
        avfs: cat_avfs,
        native: Some(cat_native),
        goal: Some(Goal::Under(0.005)),
        goal_applies: true,
        rate: false,
        ..Default::default()
    });

    notes.push(format!(
        "vault file at the end: {:.1} MB (with -wal)",
        dir_bytes(&vault_path) as f64 / 1e6
    ));
    if keep_for_exec {
        // The exec group reuses this vault; it removes the directory when done.
        progress(n, t0, "cleaning up (keeping the vault for the exec group)");
        for entry in std::fs::read_dir(&work)? {
            let p = entry?.path();
            if p.file_name() != Some(OsStr::new("home")) {
                std::fs::remove_dir_all(&p)?;
            }
        }
    } else if !args.keep {
        progress(n, t0, "cleaning up");
        std::fs::remove_dir_all(&work)?;
    }
    Ok(SizeResult {
        rows,
        notes,
        fork_lib: fl,
        fork_proc: fp,
    })
}
