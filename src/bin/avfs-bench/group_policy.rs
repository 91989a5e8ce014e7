//! The policy group: how long a decision takes for the lines of the decision corpus
//! (tests/data/policy-corpus.txt), in the library and as a whole `avfs policy check`
//! process, against an older avfs binary when `--policy-old-avfs` names one.

use super::*;

use agentvfs::policy::{Policy, corpus};

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/policy-corpus.txt");

pub(crate) fn bench_policy(
    args: &Args,
    avfs: &Path,
    base: &Path,
    t0: Instant,
) -> BoxResult<GroupResult> {
    let text = std::fs::read_to_string(CORPUS)?;
    let lines: Vec<String> = corpus::parse(&text)?
        .into_iter()
        .map(|l| corpus::substitute(&l.command, "/tmp/avfs-canary", 9))
        .collect();
    let policy = Policy::builtin();
    let reps = args.reps.max(3) * 3;
    let mut rows = Vec::new();
    let mut notes = Vec::new();

    // In the library: the median of `reps` decisions of each line, then the median and
    // the maximum over the lines.
    let mut per_line = Stat::default();
    let mut worst = (0.0f64, String::new());
    for line in &lines {
        let mut s = Stat::default();
        for _ in 0..reps {
            let t = Instant::now();
            let d = policy.decide_shell(line, &[], None);
            s.push(t.elapsed());
            std::hint::black_box(d);
        }
        let m = s.median();
        if m > worst.0 {
            worst = (m, line.clone());
        }
        per_line.0.push(m);
    }
    progress_tag(t0, "policy", "decided the corpus in the library");
    rows.push(Row {
        op: "decide one corpus line (library)".into(),
        files: lines.len(),
        avfs: per_line,
        label: Some(format!("{} lines", lines.len())),
        goal: Some(Goal::Under(1e-3)),
        goal_applies: true,
        ..Default::default()
    });
    notes.push(format!(
        "slowest line ({}): {}",
        fmt_secs(worst.0),
        worst.1.replace('\n', "\\n")
    ));

    // What `avfs exec -- true` pays for its decision.
    let argv = vec!["true".to_string()];
    let mut t_true = Stat::default();
    for _ in 0..reps * 10 {
        let t = Instant::now();
        let d = policy.decide_argv(&argv, &[], None);
        t_true.push(t.elapsed());
        std::hint::black_box(d);
    }
    rows.push(Row {
        op: "decide `-- true` (library)".into(),
        files: 1,
        avfs: t_true,
        label: Some("1 argv".into()),
        goal: Some(Goal::Under(1e-3)),
        goal_applies: true,
        ..Default::default()
    });

    // Whole processes: `avfs policy check --shell LINE`, this binary and (when given)
    // the old one, interleaved line by line.
    let home = base.join("policy-home");
    std::fs::create_dir_all(&home)?;
    run(Command::new(avfs)
        .env("AVFS_HOME", &home)
        .args(["vault", "create", "b"]))?;
    let check = |bin: &Path, line: &str| -> BoxResult<Duration> {
        let (d, _) = run_timed(
            Command::new(bin)
                .env("AVFS_HOME", &home)
                .args(["--json", "--vault", "b", "policy", "check", "--shell", line]),
            &[0],
        )?;
        Ok(d)
    };
    let mut new = Stat::default();
    let mut old = args.policy_old_avfs.as_ref().map(|_| Stat::default());
    for line in &lines {
        new.push(check(avfs, line)?);
        if let (Some(bin), Some(s)) = (&args.policy_old_avfs, old.as_mut()) {
            s.push(check(bin, line)?);
        }
    }
    progress_tag(t0, "policy", "ran avfs policy check for every line");
    rows.push(Row {
        op: "avfs policy check --shell LINE (process)".into(),
        files: lines.len(),
        avfs: new,
        native: old,
        label: Some(format!("{} lines", lines.len())),
        ..Default::default()
    });
    match &args.policy_old_avfs {
        Some(p) => notes.push(format!(
            "\"native\" column of the process row: the same command with {} (an older avfs), interleaved line by line",
            p.display()
        )),
        None => notes.push(
            "pass --policy-old-avfs PATH to time an older avfs binary's policy check beside this one".into(),
        ),
    }
    Ok(GroupResult {
        rows,
        notes,
        extra: Vec::new(),
    })
}
