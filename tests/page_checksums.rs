//! Page checksums (issue 17): every page of a new vault carries a checksum that is
//! checked when the page is read, so a flipped byte anywhere in the file is `corrupt_vault`
//! where it is read, and the file is left as it was. Real vault files, the real binary.

mod common;

use std::path::Path;

use common::Env;
use serde_json::Value;

/// The read commands a flipped page is tried with, as a user would run them.
fn reads() -> Vec<Vec<&'static str>> {
    vec![
        vec!["ls", "-l", "/src"],
        vec!["cat", "/src/f1.txt"],
        vec!["cat", "/big.txt"],
        vec!["log", "/src/f1.txt"],
        vec!["checkpoint", "list"],
        vec!["diff", "one"],
        vec!["audit"],
    ]
}

/// A small vault: two checkpoints, a fork, a file over one chunk, unsaved changes.
fn small_vault(env: &Env) -> std::path::PathBuf {
    for i in 0..6 {
        env.ok(&[
            "write",
            "-p",
            &format!("/src/f{i}.txt"),
            &format!("file {i}\n"),
        ]);
    }
    env.ok(&["checkpoint", "save", "one"]);
    let big: String = (0..20_000).map(|i| format!("{i} ")).collect();
    env.ok(&["write", "/big.txt", &big]);
    env.ok(&["vault", "fork", "default", "fk"]);
    env.ok(&["checkpoint", "save", "two"]);
    env.ok(&["write", "/src/f1.txt", "changed after two\n"]);
    env.home().join("vaults/default.avfs")
}

fn page_size(file: &[u8]) -> usize {
    match u16::from_be_bytes([file[16], file[17]]) {
        1 => 65536,
        n => n as usize,
    }
}

/// Runs `args` with `--json` on the vault file at `path`: the document, and the error kind
/// when it is an error document.
fn read_json(env: &Env, path: &Path, args: &[&str]) -> (Value, Option<String>) {
    let mut a = vec!["--json", "--vault", path.to_str().unwrap()];
    a.extend(args);
    let r = env.run(&a);
    assert!(
        r.code >= 0 && r.code != 101 && !r.stderr.contains("panicked"),
        "`{}` died: {}",
        args.join(" "),
        r.stderr
    );
    let v: Value = serde_json::from_str(&r.stdout)
        .unwrap_or_else(|e| panic!("`{}` printed no JSON ({e}): {}", args.join(" "), r.stdout));
    let kind = v
        .get("error")
        .map(|e| e["kind"].as_str().unwrap_or_default().to_string());
    (v, kind)
}

#[test]
fn a_new_vault_keeps_a_checksum_in_every_page() {
    let env = Env::new();
    let vault = small_vault(&env);
    let file = std::fs::read(&vault).unwrap();
    assert_eq!(file[20], 8, "reserved bytes per page in the header");
    let v = env.json(&["vault", "verify"]);
    assert_eq!(v["report"]["ok"], true, "{v}");
    assert_eq!(v["report"]["page_checksums"], true, "{v}");
    // Nothing to upgrade.
    let u = env.json(&["vault", "upgrade"]);
    assert_eq!(u["report"]["upgraded"], false, "{u}");
    assert_eq!(std::fs::read(&vault).unwrap(), file);
}

/// One byte flipped in every page of a small vault, one page at a time, each on a fresh
/// copy: every read gives the intact vault's answer or `corrupt_vault`, `vault verify`
/// names the page, and the file is byte-identical afterwards.
#[test]
fn a_flipped_byte_in_any_page_is_corrupt_where_read_and_the_file_is_unchanged() {
    let env = Env::new();
    let vault = small_vault(&env);
    let pristine = std::fs::read(&vault).unwrap();
    let size = page_size(&pristine);
    let pages = pristine.len() / size;
    assert!(pages >= 8, "{pages} pages");
    let copy = env.path("copy.avfs");
    let fresh = |bytes: &[u8]| {
        for s in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{s}", copy.display()));
        }
        std::fs::write(&copy, bytes).unwrap();
    };
    fresh(&pristine);
    let answers: Vec<Value> = reads()
        .iter()
        .map(|r| {
            let (v, kind) = read_json(&env, &copy, r);
            assert_eq!(kind, None, "intact copy: `{}`: {v}", r.join(" "));
            v
        })
        .collect();
    let (mut right, mut corrupt) = (0, 0);
    for page in 0..pages {
        let mut bad = pristine.clone();
        // A byte in the middle of the page: a key, a value, or free space; the sum
        // covers all of them.
        let at = page * size + size / 2;
        bad[at] ^= 0xff;
        fresh(&bad);
        for (r, want) in reads().iter().zip(&answers) {
            let (v, kind) = read_json(&env, &copy, r);
            match kind.as_deref() {
                None => {
                    assert_eq!(
                        &v,
                        want,
                        "page {}: `{}` gave another answer",
                        page + 1,
                        r.join(" ")
                    );
                    right += 1;
                }
                Some("corrupt_vault") => {
                    let msg = v["error"]["message"].as_str().unwrap();
                    assert!(
                        msg.contains("avfs vault verify") && msg.contains("avfs vault recover"),
                        "{msg}"
                    );
                    corrupt += 1;
                }
                Some(other) => panic!("page {}: `{}`: {other}: {v}", page + 1, r.join(" ")),
            }
            assert!(
                std::fs::read(&copy).unwrap() == bad,
                "page {}: `{}` changed the file",
                page + 1,
                r.join(" ")
            );
        }
        let (v, _) = read_json(&env, &copy, &["vault", "verify"]);
        assert_eq!(v["report"]["ok"], false, "page {}: {v}", page + 1);
        let named =
            v["report"]["problems"].as_array().unwrap().iter().any(|p| {
                p["kind"] == "page_checksum" && p["object"] == format!("page {}", page + 1)
            });
        assert!(named, "page {}: verify does not name it: {v}", page + 1);
        assert!(
            std::fs::read(&copy).unwrap() == bad,
            "verify changed the file"
        );
        // A write refuses the damaged file and leaves it as it was.
        let (w, kind) = read_json(&env, &copy, &["write", "/new.txt", "x"]);
        assert_eq!(
            kind.as_deref(),
            Some("corrupt_vault"),
            "page {}: {w}",
            page + 1
        );
        assert!(
            std::fs::read(&copy).unwrap() == bad,
            "a refused write changed the file"
        );
    }
    println!(
        "RELIABILITY|page checksums|every page|one byte ^0xff in each of the {pages} pages of a {} KiB vault, one page at a time on a fresh copy, each followed by {} reads, vault verify and a write|{pages}|every read right or corrupt_vault ({right} right, {corrupt} corrupt_vault); verify names the page every time; every write refused; the file byte-identical after each",
        pristine.len() / 1024,
        reads().len()
    );
}

/// A vault file as avfs made them before page checksums (0 reserved bytes per page): the
/// schema and every row of `src`, copied into a new SQLite file of the same page size.
fn without_checksums(src: &Path, dst: &Path) {
    let c = rusqlite::Connection::open(dst).unwrap();
    let page_size: i64 = rusqlite::Connection::open(src)
        .unwrap()
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .unwrap();
    c.execute_batch(&format!(
        "PRAGMA page_size = {page_size}; PRAGMA auto_vacuum = INCREMENTAL;"
    ))
    .unwrap();
    c.execute("ATTACH ?1 AS src", [src.to_str().unwrap()])
        .unwrap();
    let schema: Vec<(String, String, String)> = c
        .prepare(
            "SELECT type, name, sql FROM src.sqlite_schema WHERE sql IS NOT NULL ORDER BY rowid",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    let exists = |name: &str| -> bool {
        c.query_row(
            "SELECT count(*) FROM main.sqlite_schema WHERE name = ?1",
            [name],
            |r| r.get::<_, i64>(0),
        )
        .unwrap()
            > 0
    };
    // Tables and indexes (a virtual table makes its own shadow tables), then the rows,
    // then triggers, so that copying fires none.
    for (kind, name, sql) in &schema {
        if kind != "trigger" && !name.starts_with("sqlite_") && !exists(name) {
            c.execute_batch(sql).unwrap();
        }
    }
    for (kind, name, sql) in &schema {
        if kind == "table" && !sql.starts_with("CREATE VIRTUAL") {
            c.execute_batch(&format!(
                "INSERT OR REPLACE INTO main.\"{name}\" SELECT * FROM src.\"{name}\""
            ))
            .unwrap();
        }
    }
    for (kind, _, sql) in &schema {
        if kind == "trigger" {
            c.execute_batch(sql).unwrap();
        }
    }
    for pragma in ["user_version", "application_id"] {
        let v: i64 = c
            .query_row(&format!("PRAGMA src.{pragma}"), [], |r| r.get(0))
            .unwrap();
        c.execute_batch(&format!("PRAGMA main.{pragma} = {v}"))
            .unwrap();
    }
    c.execute_batch("DETACH src; PRAGMA journal_mode = WAL;")
        .unwrap();
}

#[test]
fn an_old_vault_is_read_unchecked_and_upgrade_gives_it_checksums() {
    let env = Env::new();
    let vault = small_vault(&env);
    let answers: Vec<Value> = reads()
        .iter()
        .map(|r| read_json(&env, &vault, r).0)
        .collect();
    let old = env.path("old.avfs");
    without_checksums(&vault, &old);
    assert_eq!(
        std::fs::read(&old).unwrap()[20],
        0,
        "reserved bytes of the old file"
    );
    env.ok(&["vault", "import", old.to_str().unwrap(), "old"]);
    let v = env.json(&["vault", "verify", "old"]);
    assert_eq!(v["report"]["ok"], true, "{v}");
    assert_eq!(v["report"]["page_checksums"], false, "{v}");
    let text = env.ok(&["vault", "verify", "old"]).stdout;
    assert!(text.contains("avfs vault upgrade old"), "{text}");

    // Refused while another avfs process has the vault open; nothing changes.
    let before = std::fs::read(&old).unwrap();
    let holder = std::fs::File::open(&old).unwrap();
    // SAFETY: a valid descriptor; the shared lock every avfs process holds on its vault.
    assert_eq!(
        unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&holder), libc::LOCK_SH) },
        0
    );
    let e = env.json_err(&["vault", "upgrade", "old"], 1);
    assert_eq!(e["kind"], "busy", "{e}");
    drop(holder);
    assert!(
        std::fs::read(&old).unwrap() == before,
        "a refused upgrade changed the file"
    );

    let u = env.json(&["vault", "upgrade", "old"]);
    assert_eq!(u["report"]["upgraded"], true, "{u}");
    let file = std::fs::read(&old).unwrap();
    assert_eq!(file[20], 8, "reserved bytes after the upgrade");
    let v = env.json(&["vault", "verify", "old"]);
    assert_eq!(v["report"]["ok"], true, "{v}");
    assert_eq!(v["report"]["page_checksums"], true, "{v}");
    // Everything reads as before, and the fork and checkpoints are still there.
    for (r, want) in reads().iter().zip(&answers) {
        let (got, kind) = read_json(&env, &old, r);
        assert_eq!(kind, None, "`{}`: {got}", r.join(" "));
        assert_eq!(&got, want, "`{}` after the upgrade", r.join(" "));
    }
    // And the upgraded file is checked: a flipped byte is corrupt where read.
    let size = page_size(&file);
    let mut bad = file.clone();
    bad[size * 2 + size / 2] ^= 0xff;
    let flipped = env.path("flipped.avfs");
    std::fs::write(&flipped, &bad).unwrap();
    let (v, _) = read_json(&env, &flipped, &["vault", "verify"]);
    assert!(
        v["report"]["problems"]
            .to_string()
            .contains("page_checksum"),
        "{v}"
    );
}
