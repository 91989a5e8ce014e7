//! The sandbox end to end: processes: leftovers, exit statuses and timeouts, inherited descriptors.

use super::*;

/// Everything the command started is gone when exec returns: background jobs, a
/// process in a new session (setsid) and one that ignores SIGTERM.
#[test]
fn a_process_left_running_is_gone_when_exec_returns() {
    if !can_sandbox("a_process_left_running_is_gone_when_exec_returns") {
        return;
    }
    let env = setup();
    env.allow_all_policy("t");
    let tag = format!(
        "{}.{}",
        4000 + std::process::id() % 1000,
        std::process::id()
    );
    write(
        &env,
        "leave.sh",
        &format!(
            "sleep {tag}1 &\nsetsid sleep {tag}2 &\nnohup sh -c 'trap \"\" TERM; sleep {tag}3' >/dev/null 2>&1 &\n\
             sleep 0.3\necho started\n"
        ),
    );
    let t = Instant::now();
    let x = exec(&env, &["--sandbox", "--", "sh", "leave.sh"]);
    assert_eq!(x.code, 0, "{}", x.env);
    assert_eq!(stdout(&x), "started\n");
    assert_eq!(x.env["result"]["lingering_processes_killed"], true);
    // The command's duration, not the grace period of what it left behind.
    let ms = x.env["result"]["duration_ms"].as_u64().unwrap();
    assert!((300..1900).contains(&ms), "duration_ms {ms}");
    let left = processes_with(&tag);
    assert!(left.is_empty(), "processes outlived exec: {left:?}");
    // The one that ignores SIGTERM got the grace period, then SIGKILL.
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    // Without the sandbox the setsid one leaves the process group: the run's PID
    // namespace ends it too, and it is reported.
    let x = exec(&env, &["--no-sandbox", "--", "sh", "leave.sh"]);
    assert_eq!(x.code, 0);
    let left = processes_with(&tag);
    for pid in &left {
        // SAFETY: ending a process this test started.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    assert!(left.is_empty(), "processes outlived exec: {left:?}");
    let escaped = x.env["result"]["escaped_processes"].as_array().unwrap();
    assert!(
        escaped.iter().any(|p| p["command"]
            .as_str()
            .unwrap_or("")
            .contains(&format!("{tag}2"))),
        "{escaped:?}"
    );
}

/// Exit codes, signals, timeouts and missing programs are reported as without the
/// sandbox.
#[test]
fn status_and_timeouts_are_exact_in_the_sandbox() {
    if !can_sandbox("status_and_timeouts_are_exact_in_the_sandbox") {
        return;
    }
    let env = setup();
    env.allow_all_policy("t");
    write(&env, "k.sh", "kill -9 $$\n");
    for sandbox in [false, true] {
        let with = |args: &[&str]| {
            let mut a = if sandbox { vec!["--sandbox"] } else { vec![] };
            a.extend_from_slice(args);
            exec(&env, &a)
        };
        let x = with(&["--", "sh", "-c", "exit 7"]);
        assert_eq!(x.code, 7, "{}", x.env);
        assert_eq!(x.env["result"]["exit_code"], 7);
        let x = with(&["--", "sh", "k.sh"]);
        assert_eq!(x.code, 137, "{}", x.env);
        assert!(x.env["result"]["exit_code"].is_null(), "{}", x.env);
        assert_eq!(x.env["result"]["signal"], 9);
        let x = with(&["--timeout", "0.3", "--", "sleep", "30"]);
        assert_eq!(x.code, 124, "{}", x.env);
        assert_eq!(x.env["result"]["timed_out"], true);
        assert_eq!(x.env["result"]["signal"], 15, "SIGTERM reached the command");
        let t = Instant::now();
        let x = with(&[
            "--timeout",
            "0.3",
            "--shell",
            "trap 'echo term; exit 3' TERM; sleep 30 & wait",
        ]);
        assert_eq!(x.code, 124, "{}", x.env);
        assert_eq!(x.env["result"]["exit_code"], 3, "{}", x.env);
        assert_eq!(stdout(&x), "term\n");
        assert!(t.elapsed() < Duration::from_secs(5));
        // A program that does not exist: 127, like a shell.
        std::fs::write(
            env.home().join("policy.toml"),
            "[[rule]]\nname = \"missing\"\nprogram = \"no-such-tool-*\"\ncategory = \"mutating\"\n",
        )
        .unwrap();
        let x = with(&["--", "no-such-tool-xyz"]);
        assert_eq!(x.code, 127, "{}", x.env);
        assert!(
            x.env["result"]["stderr"]
                .as_str()
                .unwrap()
                .contains("no-such-tool-xyz")
        );
        std::fs::remove_file(env.home().join("policy.toml")).unwrap();
    }
    // The environment is an allow-list plus AVFS_* and --env.
    let x = exec_with(
        &env,
        &[("AVFS_TEST_SECRET_TOKEN", "s3cret"), ("LC_TIME", "C")],
        &["--sandbox", "--env", "MINE=1", "--", "env"],
    );
    let out = stdout(&x);
    assert!(!out.contains("s3cret"), "{out}");
    for want in [
        "MINE=1",
        "LC_TIME=C",
        "AVFS_VAULT=t",
        "AVFS_EXEC_ID=ex-",
        "PATH=",
    ] {
        assert!(out.contains(want), "{want} missing:\n{out}");
    }
    assert!(!out.contains("AVFS_HOME="), "{out}");
}

/// A descriptor avfs inherited (here: a host directory) does not get into the sandbox,
/// where it would be a way out.
#[test]
fn inherited_descriptors_stay_outside() {
    if !can_sandbox("inherited_descriptors_stay_outside") {
        return;
    }
    let env = setup();
    env.allow_all_policy("t");
    let host = env.path("host");
    std::fs::create_dir_all(&host).unwrap();
    std::fs::write(host.join("outside.txt"), "outside\n").unwrap();
    let dir = std::fs::File::open(&host).unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&dir);
    // SAFETY: clearing close-on-exec of our own descriptor, so avfs inherits it.
    unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
    write(
        &env,
        "fd.sh",
        "if cat \"/proc/self/fd/$FD/outside.txt\" 2>/dev/null; then :; else echo no; fi\n",
    );
    let fd_s = format!("FD={fd}");
    // The descriptor reaches avfs (the test is real: avfs itself can read through it)...
    let through = std::fs::read_to_string(format!("/proc/self/fd/{fd}/outside.txt")).unwrap();
    assert_eq!(through, "outside\n");
    // ...but no run gets it, with or without the sandbox.
    let plain = exec(&env, &["--no-sandbox", "--env", &fd_s, "--", "sh", "fd.sh"]);
    let boxed = exec(&env, &["--sandbox", "--env", &fd_s, "--", "sh", "fd.sh"]);
    drop(dir);
    assert_eq!(stdout(&plain), "no\n", "{}", plain.env);
    assert_eq!(stdout(&boxed), "no\n", "{}", boxed.env);
}
