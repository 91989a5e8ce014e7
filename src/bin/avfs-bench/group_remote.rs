//! The remote group: `avfs push`, `clone` (lazy and full) against a real S3-compatible
//! server (moto via scripts/s3-server.py, on loopback), side by side in the same run with
//! `restic backup`/`restore` to the same server and `git push`/`clone` of the same tree
//! to a bare repository (git cannot speak S3). Reps are interleaved: avfs, restic, git.
//! Requests are counted by the server (one log line per request), for every tool alike.

use super::*;

struct Server {
    child: std::process::Child,
    port: u16,
    log: PathBuf,
}

impl Server {
    fn start(base: &Path) -> BoxResult<Server> {
        let py = std::env::var_os("AVFS_S3_PYTHON")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("target/py-venv/bin/python"));
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/s3-server.py");
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let log = base.join("s3-server.log");
        let mut child = Command::new(&py)
            .arg(&script)
            .arg(port.to_string())
            .arg("bench")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .map_err(|e| {
                format!(
                    "{}: {e} (set AVFS_S3_PYTHON to a Python with moto[server])",
                    py.display()
                )
            })?;
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().ok_or("no stdout")?),
            &mut line,
        )?;
        if line.trim() != "ready" {
            return Err("the S3 server did not start".into());
        }
        Ok(Server { child, port, log })
    }

    /// Requests served so far (werkzeug logs one line per request).
    fn requests(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .map(|s| s.lines().filter(|l| l.contains("\" ")).count())
            .unwrap_or(0)
    }

    fn env(&self, c: &mut Command) {
        c.env(
            "AWS_ENDPOINT_URL",
            format!("http://127.0.0.1:{}", self.port),
        )
        .env("AWS_ACCESS_KEY_ID", "bench")
        .env("AWS_SECRET_ACCESS_KEY", "bench-secret")
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("RESTIC_PASSWORD", "bench");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Default)]
struct Line {
    what: String,
    avfs: Stat,
    restic: Stat,
    git: Stat,
    req: [Vec<usize>; 3],
    bytes: Option<u64>,
}

fn med(v: &[usize]) -> String {
    if v.is_empty() {
        return "-".into();
    }
    let mut v = v.to_vec();
    v.sort();
    v[v.len() / 2].to_string()
}

fn show(s: &Stat, bytes: Option<u64>) -> String {
    if s.0.is_empty() {
        return "-".into();
    }
    match bytes {
        Some(b) => format!(
            "{} = {:.0} MB/s",
            fmt_secs(s.median()),
            b as f64 / 1e6 / s.median()
        ),
        None => fmt_secs(s.median()),
    }
}

pub(crate) fn bench_remote(args: &Args, avfs: &Path, base: &Path, t0: Instant) -> BoxResult<()> {
    let tag = "remote";
    let n = args.remote_files;
    let reps = args.remote_reps;
    let dir = base.join("remote");
    std::fs::create_dir_all(&dir)?;
    let server = Server::start(&dir)?;
    let has_restic = Command::new("restic").arg("version").output().is_ok();
    progress_tag(t0, tag, &format!("writing a {n}-file tree"));
    let plan = plan_tree(n, 0x5eed_0018);
    let tree = dir.join("tree");
    write_tree(&tree, &plan)?;
    let home = dir.join("home");
    let av = |args: &[&str]| {
        let mut c = Command::new(avfs);
        c.args(args).env("AVFS_HOME", &home);
        server.env(&mut c);
        c
    };
    run(&mut av(&["vault", "create", "w"]))?;
    progress_tag(t0, tag, "import + checkpoint");
    run(&mut av(&[
        "--vault",
        "w",
        "import",
        tree.to_str().unwrap(),
        "/",
    ]))?;
    run(&mut av(&["--vault", "w", "checkpoint", "save", "v1"]))?;
    // git: the same tree committed once (untimed); pushes go to fresh bare repos.
    run(git(&tree).args(["init", "-q", "-b", "main"]))?;
    run(git(&tree).args(["add", "-A"]))?;
    run(git(&tree).args(["commit", "-q", "-m", "v1"]))?;
    let mut lines: Vec<Line> = [
        "push, full",
        "push after 10 changed files",
        "lazy clone + ls + cat (1 file)",
        "full clone",
    ]
    .iter()
    .map(|w| Line {
        what: w.to_string(),
        bytes: None,
        ..Default::default()
    })
    .collect();
    lines[0].bytes = Some(plan.bytes);
    lines[3].bytes = Some(plan.bytes);
    let mut rng = Rng::new(18);
    for rep in 0..reps {
        progress_tag(t0, tag, &format!("rep {}/{reps}", rep + 1));
        let prefix = format!("s3://bench/avfs-{rep}");
        let rname = format!("r{rep}");
        run(&mut av(&["--vault", "w", "remote", "add", &rname, &prefix]))?;
        // 1. full push
        let r0 = server.requests();
        let (d, _) = run_timed(&mut av(&["--json", "--vault", "w", "push", &rname]), &[0])?;
        lines[0].avfs.push(d);
        lines[0].req[0].push(server.requests() - r0);
        let repo = format!("s3:http://127.0.0.1:{}/bench/restic-{rep}", server.port);
        if has_restic {
            let mut init = Command::new("restic");
            init.args(["-r", &repo, "init", "-q"]);
            server.env(&mut init);
            run(&mut init)?;
            let r0 = server.requests();
            let mut b = Command::new("restic");
            b.args(["-r", &repo, "backup", "-q", "."])
                .current_dir(&tree);
            server.env(&mut b);
            let (d, _) = run_timed(&mut b, &[0])?;
            lines[0].restic.push(d);
            lines[0].req[1].push(server.requests() - r0);
        }
        let bare = dir.join(format!("bare-{rep}.git"));
        run(git(&dir).args(["init", "-q", "--bare", bare.to_str().unwrap()]))?;
        let (d, _) = run_timed(
            git(&tree).args(["push", "-q", bare.to_str().unwrap(), "main"]),
            &[0],
        )?;
        lines[0].git.push(d);

        // 2. ten changed files, then push again
        let changes = pick_changes(&mut rng, &plan, 10, &format!("r{rep}"));
        apply_native(&tree, &changes)?;
        for (rel, data) in &changes {
            let mut c = av(&["--vault", "w", "write", rel]);
            c.stdin(Stdio::piped()).stdout(Stdio::null());
            let mut ch = c.spawn()?;
            std::io::Write::write_all(&mut ch.stdin.take().ok_or("stdin")?, data)?;
            if !ch.wait()?.success() {
                return Err("avfs write failed".into());
            }
        }
        run(&mut av(&[
            "--vault",
            "w",
            "checkpoint",
            "save",
            &format!("c{rep}"),
        ]))?;
        let r0 = server.requests();
        let (d, _) = run_timed(&mut av(&["--json", "--vault", "w", "push", &rname]), &[0])?;
        lines[1].avfs.push(d);
        lines[1].req[0].push(server.requests() - r0);
        if has_restic {
            let r0 = server.requests();
            let mut b = Command::new("restic");
            b.args(["-r", &repo, "backup", "-q", "."])
                .current_dir(&tree);
            server.env(&mut b);
            let (d, _) = run_timed(&mut b, &[0])?;
            lines[1].restic.push(d);
            lines[1].req[1].push(server.requests() - r0);
        }
        run(git(&tree).args(["commit", "-q", "-a", "-m", "ten"]))?;
        let (d, _) = run_timed(
            git(&tree).args(["push", "-q", bare.to_str().unwrap(), "main"]),
            &[0],
        )?;
        lines[1].git.push(d);

        // 3. lazy clone, then the first `ls` and `cat` of one file
        let cat = &plan.files[plan.cat_target].rel;
        let parent = Path::new(cat)
            .parent()
            .and_then(|p| p.to_str())
            .unwrap_or("/")
            .to_string();
        let lazy = format!("lazy{rep}");
        let r0 = server.requests();
        let t = Instant::now();
        run(&mut av(&["clone", &prefix, &lazy]))?;
        run(&mut av(&["--vault", &lazy, "ls", &parent]))?;
        let got = run(&mut av(&["--vault", &lazy, "cat", cat]))?;
        lines[2].avfs.push(t.elapsed());
        lines[2].req[0].push(server.requests() - r0);
        if got.len() != 1024 {
            return Err("lazy cat returned the wrong bytes".into());
        }
        if has_restic {
            let r0 = server.requests();
            let t = Instant::now();
            let mut l = Command::new("restic");
            l.args([
                "-r",
                &repo,
                "ls",
                "-q",
                "latest",
                &format!("/{}", parent.trim_start_matches('/')),
            ]);
            server.env(&mut l);
            run(&mut l)?;
            let mut c = Command::new("restic");
            c.args([
                "-r",
                &repo,
                "dump",
                "-q",
                "latest",
                &format!("/{}", cat.trim_start_matches('/')),
            ]);
            server.env(&mut c);
            run(&mut c)?;
            lines[2].restic.push(t.elapsed());
            lines[2].req[1].push(server.requests() - r0);
        }

        // 4. full clone
        let full = format!("full{rep}");
        let r0 = server.requests();
        let (d, _) = run_timed(&mut av(&["clone", &prefix, &full, "--full"]), &[0])?;
        lines[3].avfs.push(d);
        lines[3].req[0].push(server.requests() - r0);
        if has_restic {
            let out = dir.join(format!("restore-{rep}"));
            let r0 = server.requests();
            let mut c = Command::new("restic");
            c.args([
                "-r",
                &repo,
                "restore",
                "-q",
                "latest",
                "--target",
                out.to_str().unwrap(),
            ]);
            server.env(&mut c);
            let (d, _) = run_timed(&mut c, &[0])?;
            lines[3].restic.push(d);
            lines[3].req[1].push(server.requests() - r0);
            let _ = std::fs::remove_dir_all(&out);
        }
        let gout = dir.join(format!("git-clone-{rep}"));
        let (d, _) = run_timed(
            git(&dir).args([
                "clone",
                "-q",
                bare.to_str().unwrap(),
                gout.to_str().unwrap(),
            ]),
            &[0],
        )?;
        lines[3].git.push(d);
        let _ = std::fs::remove_dir_all(&gout);
        for v in [&lazy, &full] {
            run(&mut av(&["vault", "delete", v, "-y"]))?;
        }
    }
    println!();
    println!(
        "remote group: {n} files, {:.0} MB, {reps} reps, S3 server moto (scripts/s3-server.py) on 127.0.0.1; {}; git to a bare repository on the same filesystem",
        plan.bytes as f64 / 1e6,
        if has_restic {
            "restic to the same server"
        } else {
            "restic not installed: its column is empty"
        }
    );
    println!("files under: {}", describe_fs(&dir));
    println!();
    println!(
        "| workload | files | avfs median | restic median | git median | avfs/restic | requests avfs | requests restic |"
    );
    println!("|---|---:|---|---|---|---:|---:|---:|");
    for l in &lines {
        let ratio = if l.restic.0.is_empty() {
            "-".into()
        } else {
            fmt_ratio(l.avfs.median() / l.restic.median())
        };
        println!(
            "| {} | {n} | {} | {} | {} | {ratio} | {} | {} |",
            l.what,
            show(&l.avfs, l.bytes),
            show(&l.restic, l.bytes),
            show(&l.git, l.bytes),
            med(&l.req[0]),
            med(&l.req[1]),
        );
    }
    let lazy = lines[2].avfs.median();
    println!();
    println!(
        "goal: lazy clone + first ls + cat < 1 s at 100 000 files on loopback: {} ({})",
        fmt_secs(lazy),
        if n < 100_000 {
            "size below the goal's"
        } else if lazy < 1.0 {
            "met"
        } else {
            "not met"
        }
    );
    Ok(())
}
