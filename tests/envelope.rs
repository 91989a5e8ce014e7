//! Bounded exec results (issue 16): the envelope stays small however much a command
//! changed or printed, names the way to the rest, and the audit log keeps no bodies.
//! Real binary, real vault, real runs; sizes (not timings) are asserted.

mod common;
#[path = "common/envelope.rs"]
mod envelope;
#[path = "common/fuse.rs"]
mod fuse;

use common::Env;
use envelope::assert_envelope;
use serde_json::Value;

/// The bound of issue 16 for `python3 -m venv .venv`'s envelope.
const ENVELOPE_BOUND: usize = 32 * 1024;
/// The bound of issue 16 for the audit log's growth per exec.
const AUDIT_BOUND: usize = 4 * 1024;

fn setup() -> Env {
    let env = Env::new();
    env.ok(&["vault", "create", "t"]);
    env.ok(&["--vault", "t", "write", "a.txt", "hi\n"]);
    env
}

/// `avfs --json --vault t exec ARGS...`: one valid envelope; returns it and its size.
fn exec(env: &Env, args: &[&str]) -> (Value, usize) {
    let mut a = vec!["--json", "--vault", "t", "exec"];
    a.extend_from_slice(args);
    let run = env.run(&a);
    let v: Value = serde_json::from_str(&run.stdout).unwrap_or_else(|e| {
        panic!(
            "avfs exec {args:?}: not one JSON document ({e})\nexit {}\nstdout: {}\nstderr: {}",
            run.code,
            &run.stdout[..run.stdout.len().min(2000)],
            run.stderr
        )
    });
    assert!(v.get("error").is_none(), "avfs exec {args:?} failed: {v}");
    assert_envelope(&v);
    (v, run.stdout.len())
}

/// The `exec.run` audit rows' details, oldest first.
fn exec_rows(env: &Env) -> Vec<Value> {
    let a = env.json(&["--vault", "t", "audit"]);
    a["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "exec.run")
        .map(|e| e["detail"].clone())
        .collect()
}

/// Bytes an audit row takes: its detail as stored (JSON text) plus its fixed columns
/// (ids, times, names, two 32-byte hashes): what the audit table grows by.
fn row_bytes(detail: &Value) -> usize {
    serde_json::to_string(detail).unwrap().len() + 128
}

fn paths(changes: &Value) -> Vec<String> {
    changes
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap().to_string())
        .collect()
}

fn venv_works() -> bool {
    let dir = std::env::temp_dir().join(format!("avfs-venv-probe-{}", std::process::id()));
    let ok = std::process::Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&dir)
        .output()
        .is_ok_and(|o| o.status.success());
    let _ = std::fs::remove_dir_all(&dir);
    ok
}

#[test]
fn a_virtualenv_envelope_is_small_pages_the_rest_and_audits_no_bodies() {
    if !fuse::fuse_or_skip("a_virtualenv_envelope_is_small") {
        return;
    }
    if !venv_works() {
        eprintln!("SKIPPED a_virtualenv_envelope_is_small: python3 -m venv does not work here");
        return;
    }
    let env = setup();
    let (v, size) = exec(&env, &["--", "python3", "-m", "venv", ".venv"]);
    assert_eq!(v["exit_code"], 0, "{}", v["result"]);
    let total = v["change_summary"]["total"].as_u64().unwrap() as usize;
    eprintln!("ENVELOPE|python3 -m venv .venv|default|{size} bytes|{total} changes");
    assert!(
        total > 1000,
        "a virtualenv with pip is over 1000 paths: {total}"
    );
    assert!(
        size < ENVELOPE_BOUND,
        "default envelope of {size} bytes (bound {ENVELOPE_BOUND})"
    );
    let page = &v["changes_page"];
    assert_eq!(page["mode"], "list");
    assert_eq!(page["shown"], 50);
    assert_eq!(page["total"], total);
    assert_eq!(page["truncated"], true);
    assert!(page["patch_bytes"].as_u64().unwrap() <= 64 * 1024);
    assert_eq!(v["changes"].as_array().unwrap().len(), 50);
    // A cut list carries patches of modified files only: here, none.
    assert_eq!(page["patch_bytes"], 0);
    // Counted by top directory: everything is in .venv.
    let dirs = v["change_summary"]["by_directory"].as_array().unwrap();
    assert_eq!(dirs[0]["path"], "/.venv");
    assert_eq!(dirs[0]["total"], total);
    assert_eq!(dirs[0]["added"], total);
    // The rest: the exact command in the envelope pages the whole list.
    let before = v["checkpoint"].as_str().unwrap();
    assert_eq!(page["before"], before);
    let after = page["after"].as_str().unwrap().to_string();
    let rest = page["rest"].as_str().unwrap();
    let words: Vec<&str> = rest.split_whitespace().collect();
    assert_eq!(words[0], "avfs");
    assert_eq!(
        words[1..],
        [
            "--vault", "t", "diff", before, &after, "--offset", "50", "--limit", "50", "--patch",
            "--json"
        ]
    );
    let p2 = env.ok(&words[1..]).json();
    assert_eq!(p2["total"], total);
    assert_eq!(p2["offset"], 50);
    assert_eq!(p2["next_offset"], 100);
    let whole = env.json(&["--vault", "t", "diff", before, &after, "--limit", "100000"]);
    let all = paths(&whole["changes"]);
    assert_eq!(all.len(), total);
    assert_eq!(whole["next_offset"], Value::Null);
    assert_eq!(paths(&v["changes"]), all[..50]);
    assert_eq!(paths(&p2["changes"]), all[50..100]);
    // The same run with --changes full lists everything (and is big).
    let (full, full_size) = exec(
        &env,
        &["--changes", "full", "--", "python3", "-m", "venv", ".venv2"],
    );
    eprintln!(
        "ENVELOPE|python3 -m venv .venv2|--changes full|{full_size} bytes|{} changes",
        full["change_summary"]["total"]
    );
    assert_eq!(full["changes_page"]["truncated"], false);
    assert_eq!(
        full["changes"].as_array().unwrap().len() as u64,
        full["change_summary"]["total"].as_u64().unwrap()
    );
    assert!(full_size > size);
    // The audit rows keep the counts and the digests, not the bodies: bounded per exec,
    // also for the full list.
    let rows = exec_rows(&env);
    assert_eq!(rows.len(), 2);
    for (row, env_doc) in rows.iter().zip([&v, &full]) {
        let bytes = row_bytes(row);
        eprintln!("AUDIT|exec.run row|{bytes} bytes");
        assert!(bytes < AUDIT_BOUND, "audit row of {bytes} bytes: {row}");
        assert_eq!(row["changes"], serde_json::json!([]));
        assert_eq!(row["result"]["stdout"], "");
        assert_eq!(row["change_summary"], env_doc["change_summary"]);
        let listed = env_doc["changes"].as_array().unwrap();
        assert_eq!(row["audit_digests"]["changes_listed"], listed.len());
        assert_envelope(row);
    }
}

#[test]
fn patches_are_cut_and_lists_can_be_summaries() {
    if !fuse::fuse_or_skip("patches_are_cut_and_lists_can_be_summaries") {
        return;
    }
    let env = setup();
    // A 40 KB text file (a lock file), and 60 small ones in a directory.
    let big: String = (0..4000).map(|i| format!("line {i:05}\n")).collect();
    env.ok(&["--vault", "t", "write", "big.lock", &big]);
    let (v, _) = exec(&env, &["--", "rm", "big.lock"]);
    let c = &v["changes"][0];
    assert_eq!(c["kind"], "deleted");
    assert_eq!(c["patch_truncated"], true);
    let whole = c["patch_bytes"].as_u64().unwrap();
    assert!(whole > 40_000, "{whole}");
    let patch = c["patch"].as_str().unwrap();
    // A deleted file's patch gets a thirty-second of 64 KiB, cut at a line end.
    assert!(patch.len() <= 2048 && patch.len() > 1000, "{}", patch.len());
    assert!(patch.ends_with('\n'));
    assert!(patch.contains("-line 00000\n"));
    assert_eq!(v["changes_page"]["patches_truncated"], 1);
    assert_eq!(v["changes_page"]["truncated"], false);
    assert_eq!(v["changes_page"]["rest"], Value::Null);
    // --max-patch-bytes 0: no patches at all; the list itself is whole.
    let (v, _) = exec(
        &env,
        &["--max-patch-bytes", "0", "--shell", "echo x > small.txt"],
    );
    assert_eq!(v["changes"][0]["path"], "/small.txt");
    assert!(
        v["changes"][0].get("patch").is_none(),
        "{}",
        v["changes"][0]
    );
    // 60 files: `--max-changes 10` lists ten; summary lists none but counts by
    // directory; none counts by kind only.
    let files: Vec<String> = (10..70).map(|i| format!("d/f{i}")).collect();
    let make = format!("mkdir d && touch {}", files.join(" "));
    let (v, _) = exec(&env, &["--max-changes", "10", "--shell", &make]);
    assert_eq!(v["change_summary"]["total"], 61);
    assert_eq!(v["changes"].as_array().unwrap().len(), 10);
    assert_eq!(v["changes_page"]["truncated"], true);
    assert!(
        v["changes_page"]["rest"]
            .as_str()
            .unwrap()
            .contains("--offset 10 --limit 10")
    );
    assert_eq!(v["change_summary"]["by_directory"][0]["path"], "/d");
    assert_eq!(v["change_summary"]["by_directory"][0]["added"], 61);
    let (v, _) = exec(
        &env,
        &[
            "--changes",
            "summary",
            "--shell",
            "rm -r d && echo y > y.txt",
        ],
    );
    assert_eq!(v["changes"], serde_json::json!([]));
    assert_eq!(v["changes_page"]["mode"], "summary");
    assert_eq!(v["change_summary"]["deleted"], 61);
    assert_eq!(v["change_summary"]["added"], 1);
    let dirs = v["change_summary"]["by_directory"].as_array().unwrap();
    assert_eq!(dirs.len(), 2, "{dirs:?}");
    assert_eq!(dirs[1]["path"], "/");
    let (v, _) = exec(&env, &["--changes", "none", "--shell", "echo z > z.txt"]);
    assert_eq!(v["changes"], serde_json::json!([]));
    assert_eq!(v["change_summary"]["added"], 1);
    assert!(v["change_summary"].get("by_directory").is_none());
    // A bad mode is a usage error naming the choices.
    let r = env.run(&["--vault", "t", "exec", "--changes", "some", "--", "true"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("list"), "{}", r.stderr);
}

#[test]
fn output_keeps_its_head_and_its_tail() {
    if !fuse::fuse_or_skip("output_keeps_its_head_and_its_tail") {
        return;
    }
    let env = setup();
    // 588 895 bytes on stdout; the summary line a test runner prints comes last.
    let (v, size) = exec(
        &env,
        &[
            "--output-head",
            "1000",
            "--output-tail",
            "2000",
            "--shell",
            "seq 1 100000; echo 'test result: ok' >&2",
        ],
    );
    let r = &v["result"];
    assert_eq!(r["stdout_bytes"], 588_895);
    assert_eq!(r["stdout_truncated"], true);
    assert_eq!(r["stdout_omitted"], 588_895 - 3000);
    let out = r["stdout"].as_str().unwrap();
    assert!(out.starts_with("1\n2\n3\n"), "{out}");
    assert!(out.ends_with("99999\n100000\n"), "{out}");
    assert!(
        out.contains("\n[avfs: 585895 bytes of stdout omitted here; 588895 in all]\n"),
        "{out}"
    );
    assert_eq!(r["stderr"], "test result: ok\n");
    assert_eq!(r["stderr_omitted"], 0);
    assert_eq!(r["stderr_truncated"], false);
    assert!(size < 16 * 1024, "envelope of {size} bytes");
    // Tail only.
    let (v, _) = exec(
        &env,
        &[
            "--output-head",
            "0",
            "--output-tail",
            "7",
            "--shell",
            "seq 1 1000",
        ],
    );
    assert_eq!(
        v["result"]["stdout"],
        // Exactly the last 7 bytes, cut mid-line ("9\n1000\n" of "999\n1000\n").
        "[avfs: 3886 bytes of stdout omitted here; 3893 in all]\n9\n1000\n"
    );
}

#[test]
fn a_one_line_edit_of_a_large_text_file_gets_its_hunk() {
    if !fuse::fuse_or_skip("a_one_line_edit_of_a_large_text_file_gets_its_hunk") {
        return;
    }
    let env = setup();
    // 175 KB of text (a lock file): over the size a whole-file patch may have.
    let big: String = (0..16_000).map(|i| format!("line {i:05}\n")).collect();
    let r = env.run_stdin(&["--vault", "t", "write", "big.lock"], big.as_bytes());
    assert_eq!(r.code, 0, "{}", r.stderr);
    let (v, _) = exec(
        &env,
        &["--", "sed", "-i", "s/^line 08000$/changed/", "big.lock"],
    );
    let c = &v["changes"][0];
    assert_eq!(c["kind"], "modified", "{v}");
    let patch = c["patch"]
        .as_str()
        .unwrap_or_else(|| panic!("no patch: {c}"));
    assert!(patch.contains("-line 08000\n+changed\n"), "{patch}");
    assert!(patch.len() < 300, "{patch}");
    assert!(c.get("patch_truncated").is_none(), "{c}");
}
