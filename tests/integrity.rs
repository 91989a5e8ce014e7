//! The vault file under damage (issue 17): reads never write, a damaged file is never
//! written, corruption is reported as `corrupt_vault` (never an internal error), audit
//! truncation is caught, names round-trip as exact bytes. Real vault files, the real
//! binary.

mod common;
#[allow(unused_macros, unused_imports)]
#[macro_use]
#[path = "common/fuse.rs"]
mod fuse;

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use common::{Env, Run};
use fuse::Rng;
use serde_json::Value;

fn run_os(env: &Env, args: &[&OsStr]) -> Run {
    let out = env.cmd(args).output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Every file beside `dir`'s vault files and their bytes: what a read must not change.
fn dir_state(dir: &Path) -> Vec<(OsString, Vec<u8>)> {
    let mut v: Vec<(OsString, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.to_string_lossy().ends_with("-shm"))
        .map(|p| {
            (
                p.file_name().unwrap().to_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

/// A vault with checkpoints, a fork, a file over one chunk, and unsaved changes.
fn populated(env: &Env) -> PathBuf {
    for i in 0..12 {
        env.ok(&[
            "write",
            "-p",
            &format!("/src/f{i}.txt"),
            &format!("line {i}\nsecond line of f{i}\n"),
        ]);
    }
    env.ok(&["checkpoint", "save", "one"]);
    let big: String = (0..20_000).map(|i| format!("{i} ")).collect();
    env.ok(&["write", "/big.txt", &big]);
    env.ok(&["vault", "fork", "default", "fk"]);
    env.ok(&["--vault", "fk", "write", "/src/fork.txt", "in the fork"]);
    env.ok(&["rm", "/src/f3.txt"]);
    env.ok(&["checkpoint", "save", "two"]);
    env.ok(&["write", "/src/f1.txt", "changed after two"]);
    env.ok(&["mkdir", "/empty"]);
    env.home().join("vaults/default.avfs")
}

/// Some bytes from the end of the stored form of the chunk whose bytes start with `head`.
/// Chunks may be stored compressed, so the file holds these, not the text.
fn stored_probe(vault: &Path, head: &[u8]) -> Vec<u8> {
    let db = rusqlite::Connection::open_with_flags(
        format!("file:{}?immutable=1", vault.display()),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_URI,
    )
    .unwrap();
    let rows: Vec<(i64, Vec<u8>)> = db
        .prepare("SELECT codec, data FROM chunk")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    for (codec, stored) in rows {
        let bytes = agentvfs::store::objects::decode_chunk(codec, stored.clone()).unwrap();
        if bytes.starts_with(head) {
            // From its end: a stored chunk larger than a page ends in overflow pages of
            // its own, which no other file's reads touch.
            assert!(
                stored.len() > 16 * 1024 + 64,
                "{} stored bytes",
                stored.len()
            );
            return stored[stored.len() - 48..stored.len() - 16].to_vec();
        }
    }
    panic!("no chunk starts with {:?}", String::from_utf8_lossy(head));
}

/// The read commands of the issue, and their arguments.
fn reads() -> Vec<Vec<&'static str>> {
    vec![
        vec!["ls", "-l", "-a", "/src"],
        vec!["ls", "/"],
        vec!["cat", "/src/f1.txt"],
        vec!["cat", "/big.txt"],
        vec!["cat", "--at", "one", "/src/f3.txt"],
        vec!["stat", "/src/f2.txt"],
        vec!["tree", "/"],
        vec!["diff"],
        vec!["diff", "one", "--patch"],
        vec!["log", "/src/f1.txt"],
        vec!["grep", "-n", "second", "/src"],
        vec!["find", "/", "--name", "*.txt"],
        vec!["checkpoint", "list"],
        vec!["audit"],
        vec!["audit", "verify"],
        vec!["vault", "verify"],
    ]
}

#[test]
fn reads_leave_the_vault_byte_identical_and_work_read_only() {
    let env = Env::new();
    let vault = populated(&env);
    let dir = vault.parent().unwrap().to_path_buf();
    let before = dir_state(&dir);
    let mut answers = Vec::new();
    for r in reads() {
        let out = env.ok(&r);
        answers.push(out.stdout);
        assert!(
            dir_state(&dir) == before,
            "`avfs {}` changed the vault file or made a file beside it",
            r.join(" ")
        );
        let mut j = vec!["--json"];
        j.extend(&r);
        env.ok(&j).json();
        assert!(
            dir_state(&dir) == before,
            "`avfs --json {}` wrote",
            r.join(" ")
        );
    }

    // The file alone, on a read-only file system (or, without root, in a read-only
    // directory): every read gives the same answer and no file appears beside it.
    let ro_src = env.path("ro-src");
    std::fs::create_dir(&ro_src).unwrap();
    std::fs::copy(&vault, ro_src.join("v.avfs")).unwrap();
    let ro = env.path("ro");
    std::fs::create_dir(&ro).unwrap();
    let root = unsafe { libc::geteuid() } == 0;
    let mounted = root
        && std::process::Command::new("mount")
            .args(["--bind", "-o", "ro"])
            .arg(&ro_src)
            .arg(&ro)
            .status()
            .is_ok_and(|s| s.success());
    let ro = if mounted {
        // A bind mount made read-only needs a remount on older mount(8).
        let _ = std::process::Command::new("mount")
            .args(["-o", "remount,bind,ro"])
            .arg(&ro)
            .status();
        ro
    } else {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            ro_src.join("v.avfs"),
            std::fs::Permissions::from_mode(0o444),
        )
        .unwrap();
        std::fs::set_permissions(&ro_src, std::fs::Permissions::from_mode(0o555)).unwrap();
        ro_src.clone()
    };
    struct Unmount(PathBuf, bool);
    impl Drop for Unmount {
        fn drop(&mut self) {
            if self.1 {
                let _ = std::process::Command::new("umount").arg(&self.0).status();
            }
        }
    }
    let _guard = Unmount(ro.clone(), mounted);
    let sel = ro.join("v.avfs");
    let sel = sel.to_str().unwrap();
    let ro_before = dir_state(&ro);
    for (r, want) in reads().iter().zip(&answers) {
        let mut a = vec!["--vault", sel];
        a.extend(r);
        let out = env.ok(&a);
        // Paths of vault files differ; everything else must not.
        if !r.contains(&"verify") {
            assert_eq!(
                &out.stdout,
                want,
                "`avfs {}` on the read-only copy",
                r.join(" ")
            );
        }
        assert!(
            dir_state(&ro) == ro_before,
            "`avfs {}` wrote beside a read-only vault",
            r.join(" ")
        );
    }
    let w = env.json_err(&["--vault", sel, "write", "/x", "y"], 1);
    assert_eq!(w["kind"], "host_io", "{w}");
    assert!(w["message"].as_str().unwrap().contains("read-only"), "{w}");
    assert!(dir_state(&ro) == ro_before);
    println!(
        "RELIABILITY|integrity|reads|{} read commands (text and --json) on a vault with unsaved changes, then on its copy on a read-only {}|{}|vault file byte-identical, no -wal/-shm made, same answers read-only; a write there says read-only",
        reads().len(),
        if mounted { "file system" } else { "directory" },
        reads().len() * 3
    );
}

/// What one damaged copy did to one command.
#[derive(Default)]
struct Tally {
    right: u64,
    corrupt: u64,
    /// A read that succeeded with another answer than the intact vault's (metadata rows
    /// are not checksummed: see docs/reliability.md).
    other_answer: u64,
    writes_ok: u64,
}

fn damaged_round(env: &Env, pristine: &[u8], answers: &[String], seed: u64, t: &mut Tally) {
    let mut rng = Rng::new(seed);
    let mut bad = pristine.to_vec();
    let what = match rng.below(4) {
        0 => {
            let n = 1 + rng.below(bad.len() as u64 - 1) as usize;
            bad.truncate(n);
            format!("cut to {n} bytes")
        }
        _ => {
            let flips = 1 + rng.below(4);
            let mut at = Vec::new();
            for _ in 0..flips {
                let i = 100 + rng.below(bad.len() as u64 - 100) as usize;
                bad[i] ^= 0xff;
                at.push(i);
            }
            format!("bytes {at:?} ^0xff")
        }
    };
    let p = env.path(&format!("dmg-{seed}.avfs"));
    let sel = p.to_str().unwrap().to_string();
    let fresh = || {
        for s in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{sel}{s}"));
        }
        std::fs::write(&p, &bad).unwrap();
    };
    let check = |r: &Run, cmd: &str| -> Option<String> {
        assert!(
            r.code != 101 && !r.stderr.contains("panicked") && r.code >= 0,
            "seed {seed} ({what}): `{cmd}` panicked or died: {}",
            r.stderr
        );
        let v: Value = serde_json::from_str(&r.stdout).unwrap_or_else(|e| {
            panic!(
                "seed {seed} ({what}): `{cmd}` printed no JSON document ({e}): {}",
                r.stdout
            )
        });
        v.get("error").map(|e| {
            let kind = e["kind"].as_str().unwrap_or_default().to_string();
            assert_ne!(kind, "internal", "seed {seed} ({what}): `{cmd}`: {e}");
            kind
        })
    };
    // Reads.
    fresh();
    let mut verified_ok = false;
    for (r, want) in reads().iter().zip(answers) {
        let before = std::fs::read(&p).unwrap();
        let cmd = r.join(" ");
        let mut a: Vec<&str> = vec!["--vault", &sel];
        a.extend(r);
        let text = env.run(&a);
        let mut aj = vec!["--json"];
        aj.extend(&a);
        let j = env.run(&aj);
        let err = check(&j, &cmd);
        assert!(
            std::fs::read(&p).unwrap() == before,
            "seed {seed} ({what}): `{cmd}` changed the file"
        );
        if r == &["vault", "verify"] {
            verified_ok = j.code == 0;
        }
        match err {
            Some(kind) if ["corrupt_vault", "not_a_vault"].contains(&kind.as_str()) => {
                t.corrupt += 1
            }
            _ if r.contains(&"verify") && j.code == 1 => t.corrupt += 1,
            _ if text.code == 0 && &text.stdout == want => t.right += 1,
            _ => {
                // File content is hash-checked: it is right or refused, never other bytes.
                assert!(
                    r[0] != "cat",
                    "seed {seed} ({what}): `{cmd}` returned WRONG DATA (exit {}): {}",
                    text.code,
                    &text.stdout[..text.stdout.len().min(200)]
                );
                t.other_answer += 1;
            }
        }
    }
    // Writes: each on a fresh copy (a file avfs did not close last, so checked in full).
    let writes: Vec<Vec<String>> = vec![
        vec!["write".into(), "/new.txt".into(), "new".into()],
        vec!["mkdir".into(), "/newdir".into()],
        vec!["rm".into(), "/src/f2.txt".into()],
        vec!["checkpoint".into(), "save".into(), format!("s{seed}")],
        vec![
            "vault".into(),
            "fork".into(),
            sel.clone(),
            format!("f{seed}"),
        ],
        vec!["gc".into()],
    ];
    for w in &writes {
        fresh();
        let cmd = w.join(" ");
        let mut a: Vec<&str> = vec!["--json", "--vault", &sel];
        a.extend(w.iter().map(|s| s.as_str()));
        let r = env.run(&a);
        let err = check(&r, &cmd);
        match err {
            None => {
                // Written: only a file the full check found sound.
                assert!(
                    verified_ok,
                    "seed {seed} ({what}): `{cmd}` wrote to a vault verify rejects"
                );
                t.writes_ok += 1;
            }
            Some(kind) => {
                assert!(
                    std::fs::read(&p).unwrap() == bad,
                    "seed {seed} ({what}): `{cmd}` failed ({kind}) but changed the file"
                );
                if ["corrupt_vault", "not_a_vault"].contains(&kind.as_str()) {
                    t.corrupt += 1;
                } else {
                    t.other_answer += 1;
                }
            }
        }
        let _ = env.run(&["vault", "delete", &format!("f{seed}"), "-y"]);
    }
    for s in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{sel}{s}"));
    }
}

/// Seeded random byte flips (`^0xff`) and truncations of a vault with checkpoints, a fork
/// and unsaved changes, each followed by every read and write command on a fresh copy.
/// `AVFS_INTEGRITY_ROUNDS` rounds (see docs/reliability.md).
#[test]
fn damaged_copies_give_the_right_answer_or_corrupt_and_are_never_written() {
    let env = Env::new();
    let vault = populated(&env);
    let mut answers = Vec::new();
    for r in reads() {
        answers.push(env.ok(&r).stdout);
    }
    let pristine = std::fs::read(&vault).unwrap();
    let rounds: u64 = std::env::var("AVFS_INTEGRITY_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    let base: u64 = std::env::var("AVFS_INTEGRITY_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(17);
    let mut t = Tally::default();
    let started = std::time::Instant::now();
    for round in 0..rounds {
        damaged_round(&env, &pristine, &answers, base * 1000 + round, &mut t);
    }
    println!(
        "RELIABILITY|integrity|damage|seeded ^0xff flips (1-4 bytes) and truncations of a {} KiB vault (2 checkpoints, a fork, unsaved changes), each followed by {} reads and 6 writes on a fresh copy ({:.0} s)|{rounds}|no panic, no internal error; every failed command left the file byte-identical; no write to a file verify rejects; file content right or refused, never other bytes ({} right answers, {} reported corrupt, {} successful writes, {} other answers: metadata rows carry no checksum)",
        pristine.len() / 1024,
        reads().len(),
        started.elapsed().as_secs_f64(),
        t.right,
        t.corrupt,
        t.writes_ok,
        t.other_answer
    );
}

/// The first variation: a flipped byte in a column name of the schema. SQLite
/// opens the file and `PRAGMA integrity_check` passes, but every query on the table fails.
#[test]
fn a_damaged_schema_is_corrupt_for_reads_writes_and_verify() {
    let env = Env::new();
    let vault = populated(&env);
    let mut data = std::fs::read(&vault).unwrap();
    // Every copy of the text: old copies of the schema page may sit in free pages.
    let at: Vec<usize> = data
        .windows(8)
        .enumerate()
        .filter(|(_, w)| *w == b"ctime_ns")
        .map(|(i, _)| i)
        .collect();
    assert!(!at.is_empty(), "the schema names ctime_ns");
    for i in at {
        data[i + 7] = b'x';
    }
    let p = env.path("schema.avfs");
    let sel = p.to_str().unwrap();
    // As flipped, the bytes fail their pages' checksums: corrupt where read.
    std::fs::write(&p, &data).unwrap();
    let v = env
        .run(&["--json", "--vault", sel, "vault", "verify"])
        .json();
    assert!(
        v["report"]["problems"]
            .to_string()
            .contains("page_checksum"),
        "verify missed the flipped page: {v}"
    );
    let e = env.json_err(&["--vault", sel, "ls", "/"], 1);
    assert_eq!(e["kind"], "corrupt_vault", "{e}");
    assert!(
        std::fs::read(&p).unwrap() == data,
        "the damaged file was written"
    );
    // With the checksums made to match (a checksum-aware editor), the schema check
    // catches the change.
    reseal(&mut data);
    std::fs::write(&p, &data).unwrap();
    let v = env
        .run(&["--json", "--vault", sel, "vault", "verify"])
        .json();
    let problems = v["report"]["problems"].as_array().expect("a report");
    assert!(
        problems.iter().any(|p| p["kind"] == "schema"),
        "verify missed the schema damage: {v}"
    );
    for args in [
        vec!["ls", "/"],
        vec!["cat", "/src/f1.txt"],
        vec!["write", "/x", "y"],
    ] {
        let mut a = vec!["--vault", sel];
        a.extend(&args);
        let e = env.json_err(&a, 1);
        assert_eq!(e["kind"], "corrupt_vault", "{args:?}: {e}");
        assert!(e["message"].as_str().unwrap().contains("schema"), "{e}");
    }
    assert!(
        std::fs::read(&p).unwrap() == data,
        "the damaged file was written"
    );
}

/// Writes every page's checksum to match its bytes.
fn reseal(file: &mut [u8]) {
    let size = match u16::from_be_bytes([file[16], file[17]]) {
        1 => 65536,
        n => n as usize,
    };
    for page in file.chunks_exact_mut(size) {
        let sum = agentvfs::store::pagesum::page_sum(page);
        page[size - 8..].copy_from_slice(&sum);
    }
}

fn tamper(path: &Path, sql: &str) {
    let c = rusqlite::Connection::open(path).unwrap();
    c.execute_batch(sql).unwrap();
}

#[test]
fn audit_truncation_and_tampering_are_caught() {
    let env = Env::new();
    let vault = populated(&env);
    let anchor = env.ok(&["audit", "anchor"]).stdout.trim().to_string();
    assert!(anchor.starts_with("avfs-audit-anchor v1 row="), "{anchor}");
    env.ok(&["audit", "verify", "--anchor", &anchor]);
    let last: i64 = env.json(&["audit"])["entries"].as_array().unwrap().len() as i64;

    // The last rows cut off, meta.audit_head set to match.
    let cut = env.path("cut.avfs");
    std::fs::copy(&vault, &cut).unwrap();
    tamper(
        &cut,
        &format!(
            "DELETE FROM audit WHERE id > {k}; UPDATE meta SET value = {k} WHERE key = 'audit_head';",
            k = last - 2
        ),
    );
    let sel = cut.to_str().unwrap();
    let r = env.run(&["--json", "--vault", sel, "audit", "verify"]);
    assert_eq!(r.code, 1, "truncation not caught: {}", r.stdout);
    let v = r.json();
    assert!(
        v["problems"]
            .to_string()
            .contains("rows removed from the end"),
        "{v}"
    );
    // Rewritten so that every record agrees too: only the anchor catches it.
    tamper(
        &cut,
        "UPDATE workspace SET audit_head = NULL; UPDATE checkpoint SET audit_head = NULL;",
    );
    env.ok(&["--vault", sel, "audit", "verify"]);
    let r = env.run(&[
        "--json", "--vault", sel, "audit", "verify", "--anchor", &anchor,
    ]);
    assert_eq!(r.code, 1, "the anchor did not catch it: {}", r.stdout);
    assert_eq!(r.json()["anchor"]["ok"], false);

    // audit_head as text: a reported problem, not an internal error.
    let text = env.path("text.avfs");
    std::fs::copy(&vault, &text).unwrap();
    tamper(
        &text,
        "UPDATE meta SET value = 'abc' WHERE key = 'audit_head';",
    );
    let sel = text.to_str().unwrap();
    let r = env.run(&["--json", "--vault", sel, "audit", "verify"]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(r.stdout.contains("not an integer"), "{}", r.stdout);
    let before = std::fs::read(&text).unwrap();
    let e = env.json_err(&["--vault", sel, "write", "/x", "y"], 1);
    assert_eq!(e["kind"], "corrupt_vault", "{e}");
    assert!(std::fs::read(&text).unwrap() == before);
    println!(
        "RELIABILITY|integrity|audit|audit rows cut off the end with meta.audit_head set to match; then workspace/checkpoint heads cleared too; audit_head set to text|3|caught by audit verify, then by --anchor; text is a reported problem and refuses writes"
    );
}

/// A stored name that is no longer UTF-8 (a flipped byte in a checkpoint row, seen by the
/// targeted flips of docs/reliability.md) is `corrupt_vault` for every read that meets
/// it, never an internal error, and the file is left as it was.
#[test]
fn a_row_that_is_no_longer_text_is_corrupt_not_internal() {
    let env = Env::new();
    let vault = populated(&env);
    let bad = env.path("utf8.avfs");
    std::fs::copy(&vault, &bad).unwrap();
    tamper(
        &bad,
        "UPDATE checkpoint SET name = CAST(x'6f6eff' AS TEXT) WHERE name = 'one';",
    );
    let before = std::fs::read(&bad).unwrap();
    let sel = bad.to_str().unwrap();
    for args in [vec!["checkpoint", "list"], vec!["log", "/src/f1.txt"]] {
        let mut a = vec!["--vault", sel];
        a.extend(&args);
        let e = env.json_err(&a, 1);
        assert_eq!(e["kind"], "corrupt_vault", "{args:?}: {e}");
    }
    let r = env.run(&["--json", "--vault", sel, "vault", "verify"]);
    assert_eq!(
        r.code, 1,
        "verify passed a checkpoint name that is not text: {}",
        r.stdout
    );
    assert!(!r.stdout.contains("\"internal\""), "{}", r.stdout);
    assert!(
        std::fs::read(&bad).unwrap() == before,
        "a read wrote the file"
    );
}

/// A vault changed behind avfs's back after a clean close is checked in full before the
/// next write, which refuses it and leaves it as it was.
#[test]
fn a_file_changed_behind_avfs_is_checked_before_it_is_written() {
    let env = Env::new();
    let vault = populated(&env);
    env.ok(&["write", "/ok.txt", "fine"]);
    // A chunk's bytes changed in place (the big file's first chunk).
    let probe = stored_probe(&vault, b"0 1 2 3 ");
    let mut data = std::fs::read(&vault).unwrap();
    let at = data
        .windows(probe.len())
        .position(|w| w == probe)
        .expect("the big file is in the vault");
    data[at] ^= 0x01;
    std::fs::write(&vault, &data).unwrap();
    let e = env.json_err(&["write", "/y.txt", "y"], 1);
    assert_eq!(e["kind"], "corrupt_vault", "{e}");
    assert!(
        std::fs::read(&vault).unwrap() == data,
        "a damaged vault was written"
    );
    // Reads still work where the data is intact, and say what is damaged where not.
    assert_eq!(env.cat(None, "/ok.txt"), "fine");
    let e = env.json_err(&["cat", "/big.txt"], 1);
    assert_eq!(e["kind"], "corrupt_vault", "{e}");
    // What is intact can be copied out.
    let out = env.path("rescued.avfs");
    let r = env.run(&[
        "--json",
        "vault",
        "recover",
        "default",
        out.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 1, "something was lost: {}", r.stdout);
    let v = r.json();
    let recovered: Vec<&str> = v["report"]["recovered"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    assert_eq!(recovered, ["main/one"], "{v}");
    // Everything that holds /big.txt is lost, and said so.
    let mut lost: Vec<&str> = v["report"]["lost"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["what"].as_str().unwrap())
        .collect();
    lost.sort();
    assert_eq!(
        lost,
        ["fk (live)", "main (live)", "main/fork-fk", "main/two"],
        "{v}"
    );
    let sel = out.to_str().unwrap();
    env.ok(&["--vault", sel, "vault", "verify"]);
    assert_eq!(
        env.cat(Some(sel), "/src/f1.txt"),
        "line 1\nsecond line of f1\n",
        "checkpoint one is the recovered head"
    );
    env.ok(&["--vault", sel, "write", "/after.txt", "writable"]);
}

/// Every single-byte name (all but NUL, `/` and `.`) round-trips exactly: written from raw
/// argv bytes, listed in the escaped text form, read back by that form, exported to host
/// names byte for byte and imported back.
#[test]
fn all_single_byte_names_round_trip() {
    let env = Env::new();
    env.ok(&["mkdir", "/d"]);
    let mut want: Vec<Vec<u8>> = Vec::new();
    for b in 1..=255u8 {
        let mut path = b"/d/".to_vec();
        path.push(b);
        let r = run_os(
            &env,
            &[
                OsStr::new("write"),
                OsStr::new("--"),
                OsStr::from_bytes(&path),
                OsStr::from_bytes(&[b, b'!']),
            ],
        );
        match b {
            b'/' | b'.' => assert_ne!(r.code, 0, "name {b:#x} was accepted"),
            _ => {
                assert_eq!(r.code, 0, "name {b:#x}: {}", r.stderr);
                want.push(vec![b]);
            }
        }
    }
    want.sort();
    let ls = env.json(&["ls", "-a", "/d", "--limit", "1000"]);
    let names: Vec<String> = ls["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect();
    let got: Vec<Vec<u8>> = names
        .iter()
        .map(|n| agentvfs::names::unescape(n.as_bytes()))
        .collect();
    assert_eq!(got, want, "ls lost or merged names");
    // Each listed form is a path argument that reads that file.
    for (n, raw) in names.iter().zip(&want) {
        let c = env.json(&["cat", &format!("/d/{n}")]);
        let mut expect = raw.clone();
        expect.push(b'!');
        let content = c["content"].as_str().unwrap();
        let got: Vec<u8> = if c["encoding"] == "hex" {
            (0..content.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&content[i..i + 2], 16).unwrap())
                .collect()
        } else {
            content.as_bytes().to_vec()
        };
        assert_eq!(got, expect, "cat /d/{n}");
    }
    // find and diff print the same form.
    let found = env.json(&["find", "/d", "--type", "f", "--limit", "1000"]);
    assert_eq!(found["entries"].as_array().unwrap().len(), want.len());
    let diff = env.json(&["diff", "--limit", "100000"]);
    assert!(
        diff["changes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["path"] == "/d/\\xff")
    );
    // Export: host names are the exact bytes; import brings the same names back.
    let host = env.path("out");
    env.ok(&["export", "/d", host.to_str().unwrap()]);
    let mut on_host: Vec<Vec<u8>> = std::fs::read_dir(&host)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_vec())
        .collect();
    on_host.sort();
    assert_eq!(on_host, want, "export changed names");
    env.ok(&["import", host.to_str().unwrap(), "/back"]);
    let back = env.json(&["ls", "-a", "/back", "--limit", "1000"]);
    let back: Vec<String> = back["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(back, names);
}

/// Through a mount, names are the bytes themselves: every single-byte name made in the
/// mount lists in the CLI's escaped form, and every name the CLI makes from that form
/// shows in the mount as its bytes.
#[test]
fn single_byte_names_round_trip_through_the_mount() {
    let Some(mut m) = fuse::Mount::new("single_byte_names_round_trip_through_the_mount") else {
        return;
    };
    std::fs::create_dir(m.mp.join("d")).unwrap();
    let mut made: Vec<Vec<u8>> = Vec::new();
    for b in 1..=255u8 {
        if b == b'/' || b == b'.' {
            continue;
        }
        std::fs::write(m.mp.join("d").join(OsStr::from_bytes(&[b])), [b]).unwrap();
        made.push(vec![b]);
    }
    made.sort();
    let ls = m
        .env
        .json(&["--vault", "t", "ls", "-a", "/d", "--limit", "1000"]);
    let names: Vec<String> = ls["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect();
    let got: Vec<Vec<u8>> = names
        .iter()
        .map(|n| agentvfs::names::unescape(n.as_bytes()))
        .collect();
    assert_eq!(got, made, "the CLI lists the mount's names exactly");
    // Made by the CLI from the printed form, seen in the mount as bytes.
    m.env.ok(&["--vault", "t", "mkdir", "/e"]);
    for n in &names {
        m.env
            .ok(&["--vault", "t", "write", "--", &format!("/e/{n}"), "cli"]);
    }
    let mut seen: Vec<Vec<u8>> = std::fs::read_dir(m.mp.join("e"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_vec())
        .collect();
    seen.sort();
    assert_eq!(seen, made, "the mount shows the CLI's names as their bytes");
    assert_eq!(
        std::fs::read(m.mp.join("e").join(OsStr::from_bytes(b"\xff"))).unwrap(),
        b"cli"
    );
    m.unmount();
}
