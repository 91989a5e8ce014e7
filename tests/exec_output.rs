//! `avfs output EXEC_ID`: an exec's full output, kept on disk beside the vault while the
//! envelope keeps only a head and a tail. The real binary, real runs.
//!
//! Tests that run a command need a working run engine (FUSE is probed as in
//! exec_cli.rs): without it they skip with a message, and with `AVFS_REQUIRE_FUSE=1`
//! they fail. Tests of refusals that run nothing always run.

mod common;
#[path = "common/envelope.rs"]
mod envelope;
#[path = "common/fuse.rs"]
mod fuse;

use common::Env;
use envelope::assert_envelope;
use fuse::can_mount;
use serde_json::Value;

fn setup() -> Env {
    let env = Env::new();
    env.ok(&["vault", "create", "t"]);
    env
}

/// `avfs --json --vault t exec --shell LINE` with extra environment for avfs itself;
/// returns the envelope and its size in bytes.
fn exec_with(env: &Env, vars: &[(&str, &str)], line: &str) -> (Value, usize) {
    let mut c = env.cmd(["--json", "--vault", "t", "exec", "--shell", line]);
    for (k, v) in vars {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "exec {line:?}: not one JSON document ({e}); stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(v.get("error").is_none(), "exec {line:?}: {v}");
    assert_envelope(&v);
    assert_eq!(v["exit_code"], 0, "{}", v["result"]);
    (v, out.stdout.len())
}

fn exec(env: &Env, line: &str) -> Value {
    exec_with(env, &[], line).0
}

fn id(v: &Value) -> String {
    v["id"].as_str().unwrap().to_string()
}

/// `avfs output ARGS` in text mode: its exit code, raw stdout and stderr.
fn output_raw(env: &Env, args: &[&str]) -> (i32, Vec<u8>, String) {
    let mut a = vec!["output"];
    a.extend_from_slice(args);
    let out = env.cmd(&a).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Decodes a page's `content` by its `encoding`.
fn content(doc: &Value) -> Vec<u8> {
    let c = doc["content"].as_str().unwrap();
    match doc["encoding"].as_str().unwrap() {
        "utf-8" => c.as_bytes().to_vec(),
        "hex" => (0..c.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&c[i..i + 2], 16).unwrap())
            .collect(),
        e => panic!("unknown encoding {e}"),
    }
}

/// Every page of a stream with `--json --limit`, joined; checks each page's fields.
fn paged(env: &Env, exec: &str, stream: &str, limit: u64) -> (Vec<u8>, usize) {
    let mut all = Vec::new();
    let mut offset = 0u64;
    let mut pages = 0;
    loop {
        let (o, l) = (offset.to_string(), limit.to_string());
        let doc = env.json(&[
            "output", exec, "--stream", stream, "--offset", &o, "--limit", &l,
        ]);
        pages += 1;
        assert_eq!(doc["exec"], exec);
        assert_eq!(doc["stream"], stream);
        assert_eq!(doc["offset"], offset);
        let data = content(&doc);
        assert_eq!(doc["bytes"], data.len() as u64);
        assert!(data.len() as u64 <= limit);
        all.extend_from_slice(&data);
        match doc["next_offset"].as_u64() {
            Some(n) => {
                assert_eq!(n, offset + data.len() as u64, "{doc}");
                assert!(n > offset, "paging must move on: {doc}");
                offset = n;
            }
            None => {
                assert_eq!(all.len() as u64, doc["size"].as_u64().unwrap());
                return (all, pages);
            }
        }
    }
}

/// `1\n2\n3\n...` cut to `n` bytes: what `seq 1 N | head -c n` prints.
fn seq_bytes(n: usize) -> Vec<u8> {
    let mut s = Vec::with_capacity(n + 8);
    let mut i = 1u64;
    while s.len() < n {
        s.extend_from_slice(format!("{i}\n").as_bytes());
        i += 1;
    }
    s.truncate(n);
    s
}

#[test]
fn a_megabyte_of_output_a_small_envelope_and_every_byte_afterwards() {
    if !can_mount("a_megabyte_of_output_a_small_envelope_and_every_byte_afterwards") {
        return;
    }
    let env = setup();
    let (v, size) = exec_with(
        &env,
        &[],
        "seq 1 200000 | head -c 1000000; seq 1 100000 | head -c 300000 >&2",
    );
    let r = &v["result"];
    // 8 KiB head + 8 KiB tail per stream by default, and the rest counted.
    assert_eq!(r["stdout_bytes"], 1_000_000);
    assert_eq!(r["stderr_bytes"], 300_000);
    assert_eq!(r["stdout_omitted"], 1_000_000 - 16384);
    assert_eq!(r["stderr_omitted"], 300_000 - 16384);
    assert_eq!(r["stdout_truncated"], true);
    // Bounded by the defaults, not by what was printed: 4 x 8 KiB of kept text (short
    // lines: JSON's `\n` adds a sixth), and the rest of the envelope.
    let kept = r["stdout"].as_str().unwrap().len() + r["stderr"].as_str().unwrap().len();
    assert!(kept <= 4 * 8192 + 200, "{kept} bytes of output kept");
    assert!(size <= 48 * 1024, "envelope of {size} bytes");
    eprintln!("envelope of 1 MB stdout + 300 KB stderr: {size} bytes ({kept} of output text)");
    let text = r["stdout"].as_str().unwrap();
    assert!(
        text.contains("[avfs: 983616 bytes of stdout omitted here; 1000000 in all]"),
        "{text}"
    );
    let ex = id(&v);

    let want_out = seq_bytes(1_000_000);
    let want_err = seq_bytes(300_000);
    // Text mode: the bytes as they are, byte-exact.
    let (code, got, err) = output_raw(&env, &[&ex]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(blake3::hash(&got), blake3::hash(&want_out));
    let (code, got, err) = output_raw(&env, &[&ex, "--stream", "stderr"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(blake3::hash(&got), blake3::hash(&want_err));
    // A page in text mode says where the rest starts.
    let (code, got, err) = output_raw(&env, &[&ex, "--offset", "10", "--limit", "5"]);
    assert_eq!(code, 0);
    assert_eq!(got, &want_out[10..15]);
    assert!(err.contains("--offset 15"), "{err}");

    // --json pages to the end, byte-exact.
    let (got, pages) = paged(&env, &ex, "stdout", 65536);
    assert_eq!(blake3::hash(&got), blake3::hash(&want_out));
    assert_eq!(pages, 1_000_000usize.div_ceil(65536));
    let (got, _) = paged(&env, &ex, "stderr", 100_000);
    assert_eq!(blake3::hash(&got), blake3::hash(&want_err));

    // --json without --limit: a bounded first page.
    let doc = env.json(&["output", &ex]);
    assert_eq!(doc["bytes"], 16384);
    assert_eq!(doc["next_offset"], 16384);
    assert_eq!(doc["size"], 1_000_000);
    assert_eq!(doc["total_bytes"], 1_000_000);
    assert_eq!(doc["truncated"], false);
    assert_eq!(doc["finished"], true);
    assert_eq!(doc["encoding"], "utf-8");

    // The exec id is in its audit row.
    let audit = env.json(&["--vault", "t", "audit", "--limit", "5"]);
    assert!(audit.to_string().contains(&ex), "{audit}");
}

#[test]
fn output_that_is_not_utf8_comes_back_as_hex_and_as_raw_bytes() {
    if !can_mount("output_that_is_not_utf8_comes_back_as_hex_and_as_raw_bytes") {
        return;
    }
    let env = setup();
    let v = exec(&env, r"printf '\377\376abc\303'; printf 'h\303\251' >&2");
    let ex = id(&v);
    let doc = env.json(&["output", &ex]);
    assert_eq!(doc["encoding"], "hex");
    assert_eq!(doc["content"], "fffe616263c3");
    assert_eq!(doc["bytes"], 6);
    let (code, got, _) = output_raw(&env, &[&ex]);
    assert_eq!(code, 0);
    assert_eq!(got, b"\xff\xfeabc\xc3");
    // A page never ends inside a character: "hé" with --limit 2 is "h", then "é".
    let doc = env.json(&["output", &ex, "--stream", "stderr", "--limit", "2"]);
    assert_eq!(
        (doc["content"].as_str(), doc["bytes"].as_u64()),
        (Some("h"), Some(1))
    );
    assert_eq!(doc["next_offset"], 1);
    let doc = env.json(&["output", &ex, "--stream", "stderr", "--offset", "1"]);
    assert_eq!(doc["content"], "é");
    assert_eq!(doc["next_offset"], Value::Null);
}

#[test]
fn a_stream_over_its_cap_is_cut_on_disk_and_says_so() {
    if !can_mount("a_stream_over_its_cap_is_cut_on_disk_and_says_so") {
        return;
    }
    let env = setup();
    let (v, _) = exec_with(
        &env,
        &[("AVFS_OUTPUT_STREAM_MAX", "100000")],
        "seq 1 100000 | head -c 300000",
    );
    let ex = id(&v);
    let (got, _) = paged(&env, &ex, "stdout", 1 << 20);
    assert_eq!(got, seq_bytes(100_000));
    let doc = env.json(&["output", &ex, "--limit", "10"]);
    assert_eq!(doc["size"], 100_000);
    assert_eq!(doc["total_bytes"], 300_000);
    assert_eq!(doc["truncated"], true);
    let (code, _, err) = output_raw(&env, &[&ex]);
    assert_eq!(code, 0);
    assert!(err.contains("cut on disk"), "{err}");
}

#[test]
fn the_vault_cap_drops_the_oldest_execs_output_first() {
    if !can_mount("the_vault_cap_drops_the_oldest_execs_output_first") {
        return;
    }
    let env = setup();
    let cap = [("AVFS_OUTPUTS_MAX", "250000")];
    let line = "seq 1 100000 | head -c 100000";
    let ids: Vec<String> = (0..3).map(|_| id(&exec_with(&env, &cap, line).0)).collect();
    // 300 000 bytes kept would be over 250 000: the first exec's output went.
    let e = env.json_err(&["output", &ids[0]], 1);
    assert_eq!(e["kind"], "no_such_output");
    assert!(e["message"].as_str().unwrap().contains("dropped"), "{e}");
    for ex in &ids[1..] {
        let (code, got, err) = output_raw(&env, &[ex]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(got, seq_bytes(100_000));
    }
}

#[test]
fn vault_delete_removes_the_outputs() {
    if !can_mount("vault_delete_removes_the_outputs") {
        return;
    }
    let env = setup();
    let v = env.json(&[
        "--vault",
        "t",
        "exec",
        "--checkpoint",
        "--shell",
        "echo kept",
    ]);
    let ex = id(&v);
    let (code, got, _) = output_raw(&env, &[&ex]);
    assert_eq!((code, got.as_slice()), (0, &b"kept\n"[..]));
    // The checkpoint the exec took (as `avfs log` and `checkpoint list` show it) names it
    // too; stderr was empty.
    let cp = v["checkpoint"].as_str().unwrap();
    assert_eq!(cp, format!("exec-{}", &ex[3..]));
    let doc = env.json(&["output", cp, "--stream", "stderr"]);
    assert_eq!(
        (doc["exec"].as_str(), doc["size"].as_u64()),
        (Some(ex.as_str()), Some(0))
    );
    let outputs = env.home().join("outputs");
    let held = |p: &std::path::Path| std::fs::read_dir(p).map_or(0, |d| d.count());
    assert_eq!(held(&outputs), 1);
    env.ok(&["vault", "delete", "t", "-y"]);
    assert_eq!(held(&outputs), 0, "outputs left after vault delete");
    let e = env.json_err(&["output", &ex], 1);
    assert_eq!(e["kind"], "no_such_output");
}

#[test]
fn unknown_and_malformed_ids_are_clear_errors() {
    let env = setup();
    let e = env.json_err(&["output", "ex-0000000000"], 1);
    assert_eq!(e["kind"], "no_such_output");
    let m = e["message"].as_str().unwrap();
    assert!(
        m.contains("ex-0000000000") && m.contains("avfs audit"),
        "{m}"
    );
    let r = env.run(&["output", "ex-0000000000"]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("no kept output"), "{}", r.stderr);
    let e = env.json_err(&["output", "../../etc/passwd"], 1);
    assert_eq!(e["kind"], "invalid_argument");
    let r = env.run(&["output", "ex-0000000000", "--stream", "both"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
}

#[test]
fn a_denied_run_has_no_output() {
    let env = setup();
    let v = env.json_exit(&["--vault", "t", "exec", "--shell", "sudo ls"], 126);
    assert_eq!(v["decision"]["action"], "deny");
    let e = env.json_err(&["output", v["id"].as_str().unwrap()], 1);
    assert_eq!(e["kind"], "no_such_output");
    assert!(!env.home().join("outputs").exists());
}
