//! Big directories (issue 17): `ls` of a directory of 100 000 entries streams, in text,
//! long and JSON form, with peak memory that does not grow with the entry count. Real
//! vault, real binary; the peak is the kernel's (wait4's `ru_maxrss`).

mod common;

use std::fs::File;
use std::process::Stdio;

use common::Env;
use serde_json::Value;

const ENTRIES: usize = 100_000;

/// Runs `avfs ARGS` with stdout into a file; returns the output and the peak RSS in MiB.
fn run_measured(env: &Env, args: &[&str]) -> (String, i64) {
    let out = env.path("ls.out");
    let child = env
        .cmd(args)
        .stdout(File::create(&out).unwrap())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let mut status = 0;
    // SAFETY: zeroed rusage filled in by wait4 for our own child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::wait4(pid, &mut status, 0, &mut ru) }, pid);
    // Reaped by wait4 (dropping a `Child` neither waits nor kills).
    drop(child);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{args:?} failed: {status}"
    );
    (std::fs::read_to_string(&out).unwrap(), ru.ru_maxrss / 1024)
}

#[test]
fn ls_of_a_hundred_thousand_entries_streams_in_little_memory() {
    let env = Env::new();
    // Long names, so the stored tree spans many of the pieces it is read in.
    let host = env.path("big");
    std::fs::create_dir(&host).unwrap();
    let name = |i: usize| format!("entry-{i:06}-with-a-name-long-enough-to-matter.txt");
    for i in 0..ENTRIES {
        std::fs::write(host.join(name(i)), b"x").unwrap();
    }
    env.ok(&["import", host.to_str().unwrap(), "/d"]);

    let (text, plain_mib) = run_measured(&env, &["ls", "/d"]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), ENTRIES);
    assert!(lines.iter().enumerate().all(|(i, l)| *l == name(i)));

    let (long, long_mib) = run_measured(&env, &["ls", "-l", "/d"]);
    let lines: Vec<&str> = long.lines().collect();
    assert_eq!(lines.len(), ENTRIES);
    assert!(
        lines[0].starts_with("-rw") && lines[0].ends_with(&name(0)),
        "{}",
        lines[0]
    );
    assert!(lines[ENTRIES - 1].ends_with(&name(ENTRIES - 1)));

    // One page as large as the directory: the default page is 100.
    let all = ENTRIES.to_string();
    let (json, json_mib) = run_measured(&env, &["--json", "ls", "--limit", &all, "/d"]);
    let v: Value = serde_json::from_str(&json).unwrap();
    let entries = v["entries"].as_array().unwrap();
    assert_eq!(entries.len(), ENTRIES);
    assert_eq!(entries[7]["name"], name(7));
    assert_eq!(entries[7]["size"], 1);
    assert_eq!(entries[ENTRIES - 1]["name"], name(ENTRIES - 1));
    assert_eq!(v["total"], ENTRIES);
    assert_eq!(v["next_cursor"], Value::Null);

    // The stored tree alone is about 7 MB here; the bound is 50 MB.
    for (what, mib) in [
        ("ls", plain_mib),
        ("ls -l", long_mib),
        ("--json ls", json_mib),
    ] {
        assert!(mib < 50, "{what} of {ENTRIES} entries peaked at {mib} MiB");
    }
    println!(
        "RELIABILITY|integrity_scale|big directories|ls, ls -l and --json ls of one stored directory of {ENTRIES} entries|3|every entry, in order; peak RSS {plain_mib} / {long_mib} / {json_mib} MiB (bound 50)"
    );
}
