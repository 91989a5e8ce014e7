//! grep, find, search, tag/untag/meta, completions, man, --help examples, colours and
//! the format 4 migration, through the real binary on real vault files.

mod common;
use common::*;
use serde_json::{Value, json};
use std::process::Command;

fn paths(entries: &Value) -> Vec<String> {
    entries
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_string())
        .collect()
}

fn lines(s: &str) -> Vec<&str> {
    s.lines().collect()
}

/// A small code-like tree.
fn tree() -> Env {
    let env = Env::new();
    for (p, c) in [
        (
            "/src/main.rs",
            "fn main() {\n    println!(\"Hello\");\n    helper();\n}\n",
        ),
        ("/src/lib.rs", "pub fn helper() {}\n// TODO: more\n"),
        ("/src/deep/util.rs", "// todo later\nconst A: u8 = 1;\n"),
        ("/README.md", "# Demo\nSay hello to the world.\n"),
        ("/.hidden/secret.txt", "hello from a hidden dir\n"),
        ("/crlf.txt", "hello windows\r\nbye\r\n"),
    ] {
        env.ok(&["write", "-p", p, c]);
    }
    // NUL cannot be in an argument: binary content comes on stdin.
    let r = env.run_stdin(&["write", "/data.bin"], b"hello\0binary");
    assert_eq!(r.code, 0, "{}", r.stderr);
    env
}

#[test]
fn grep_prints_ripgrep_style_lines_and_exits_1_on_no_match() {
    let env = tree();
    let r = env.ok(&["grep", "hel+o"]);
    assert_eq!(
        lines(&r.stdout),
        vec![
            "/README.md:Say hello to the world.",
            "/crlf.txt:hello windows"
        ]
    );
    let r = env.ok(&["grep", "-n", "-i", "todo"]);
    assert_eq!(
        lines(&r.stdout),
        vec![
            "/src/deep/util.rs:1:// todo later",
            "/src/lib.rs:2:// TODO: more"
        ]
    );
    let r = env.ok(&["grep", "-l", "helper", "/src"]);
    assert_eq!(lines(&r.stdout), vec!["/src/lib.rs", "/src/main.rs"]);
    // One file: no path prefix, as grep and ripgrep.
    let r = env.ok(&["grep", "-n", "helper", "/src/main.rs"]);
    assert_eq!(r.stdout, "3:    helper();\n");
    // Literal strings and whole words.
    assert_eq!(
        env.ok(&["grep", "-F", "println!(", "/src"]).stdout,
        "/src/main.rs:    println!(\"Hello\");\n"
    );
    assert_eq!(env.run(&["grep", "-w", "help"]).code, 1);
    assert_eq!(
        env.ok(&["grep", "-w", "helper", "/src/lib.rs"]).stdout,
        "pub fn helper() {}\n"
    );
    // Hidden names only with --hidden; binary files never.
    let r = env.ok(&["grep", "-l", "--hidden", "hello"]);
    assert_eq!(
        lines(&r.stdout),
        vec!["/.hidden/secret.txt", "/README.md", "/crlf.txt"]
    );
    // A match never spans lines.
    env.ok(&["write", "/two-lines.txt", "alpha\nbeta\n"]);
    assert_eq!(env.run(&["grep", r"alpha\sbeta"]).code, 1);
    // No match: exit 1, nothing printed.
    let r = env.run(&["grep", "no-such-text"]);
    assert_eq!((r.code, r.stdout.as_str(), r.stderr.as_str()), (1, "", ""));
    // Errors.
    assert_eq!(
        env.json_err(&["grep", "(unclosed"], 1)["kind"],
        "invalid_argument"
    );
    assert_eq!(
        env.json_err(&["grep", "x", "/nope"], 1)["kind"],
        "not_found"
    );
    // No colours when stdout is not a terminal.
    assert!(!env.ok(&["grep", "hello"]).stdout.contains('\x1b'));
}

#[test]
fn grep_json_and_checkpoints() {
    let env = tree();
    env.ok(&["checkpoint", "save", "v1"]);
    env.ok(&["write", "/src/lib.rs", "pub fn renamed() {}\n"]);
    let v = env.json(&["grep", "-n", "helper"]);
    assert_eq!(
        v,
        json!({
            "pattern": "helper",
            "path": "/",
            "matches": [{"path": "/src/main.rs", "line": 3, "text": "    helper();"}],
            "files": ["/src/main.rs"],
            "files_matched": 1,
            "files_searched": 6,
            "binary_files_skipped": 1,
            "total": 1,
            "next_cursor": null,
        })
    );
    let v = env.json(&["grep", "helper", "--at", "v1", "-l"]);
    assert_eq!(v["files"], json!(["/src/lib.rs", "/src/main.rs"]));
    assert_eq!(v["matches"], json!([]));
    // No match with --json: the same document, exit 1.
    let r = env.run(&["--json", "grep", "zzz"]);
    assert_eq!(r.code, 1);
    assert_eq!(r.json()["files"], json!([]));
    assert_eq!(
        env.json_err(&["grep", "x", "--at", "nope"], 1)["kind"],
        "no_such_checkpoint"
    );
}

#[test]
fn find_filters_by_name_type_size_depth_and_change() {
    let env = tree();
    env.ok(&["ln", "-s", "main.rs", "/src/link.rs"]);
    env.ok(&["write", "/big.dat", &"x".repeat(3000)]);
    let out = |args: &[&str]| {
        let mut a = vec!["find"];
        a.extend_from_slice(args);
        env.ok(&a).stdout
    };
    assert_eq!(
        lines(&out(&["/src", "--name", "*.rs"])),
        vec![
            "/src/deep/util.rs",
            "/src/lib.rs",
            "/src/link.rs",
            "/src/main.rs"
        ]
    );
    assert_eq!(
        lines(&out(&["/src", "--name", "*.rs", "--type", "l"])),
        vec!["/src/link.rs"]
    );
    assert_eq!(
        lines(&out(&["--type", "d"])),
        vec!["/", "/.hidden", "/src", "/src/deep"]
    );
    assert_eq!(
        lines(&out(&["--name", "*.md", "--name", "{main,lib}.rs"])),
        vec!["/README.md", "/src/lib.rs", "/src/main.rs"]
    );
    assert_eq!(lines(&out(&["--size", "+2k"])), vec!["/big.dat"]);
    assert_eq!(
        lines(&out(&["--type", "f", "--size", "-20"])),
        vec!["/data.bin"]
    );
    assert_eq!(lines(&out(&["--size", "20"])), vec!["/crlf.txt"]);
    assert_eq!(
        lines(&out(&["--size", "+1k", "--size", "-4k"])),
        vec!["/big.dat"]
    );
    assert_eq!(
        lines(&out(&["/src", "--max-depth", "1", "--name", "*.rs"])),
        vec!["/src/lib.rs", "/src/link.rs", "/src/main.rs"]
    );
    assert_eq!(lines(&out(&["/src", "--max-depth", "0"])), vec!["/src"]);
    assert_eq!(
        env.json_err(&["find", "--size", "lots"], 1)["kind"],
        "invalid_argument"
    );
    assert_eq!(
        env.json_err(&["find", "--name", "[oops"], 1)["kind"],
        "invalid_argument"
    );
    assert_eq!(env.json_err(&["find", "/nope"], 1)["kind"], "not_found");

    // --newer: what was added or changed since a checkpoint.
    env.ok(&["checkpoint", "save", "v1"]);
    env.ok(&["write", "/src/lib.rs", "changed\n"]);
    env.ok(&["write", "-p", "/new/file.txt", "n\n"]);
    env.ok(&["rm", "/README.md"]);
    env.ok(&["chmod", "600", "/big.dat"]);
    env.ok(&["tag", "/crlf.txt", "reviewed"]);
    assert_eq!(
        lines(&out(&["--newer", "v1"])),
        vec![
            "/big.dat",
            "/crlf.txt",
            "/new",
            "/new/file.txt",
            "/src/lib.rs"
        ]
    );
    assert_eq!(lines(&out(&["/src", "--newer", "v1"])), vec!["/src/lib.rs"]);
    assert_eq!(
        lines(&out(&["--newer", "v1", "--type", "f", "--name", "*.txt"])),
        vec!["/crlf.txt", "/new/file.txt"]
    );
    // --at: the tree of a checkpoint.
    assert_eq!(
        lines(&out(&["--at", "v1", "--name", "*.md"])),
        vec!["/README.md"]
    );

    let v = env.json(&["find", "/new"]);
    assert_eq!(v["path"], "/new");
    let e = &v["entries"][1];
    assert_eq!(e["path"], "/new/file.txt");
    assert_eq!(e["type"], "file");
    assert_eq!(e["size"], 2);
    assert_eq!(e["mode"], "0644");
    assert_eq!(e["tags"], json!([]));
    assert_eq!(e["meta"], json!({}));
    assert!(e["mtime"].as_str().unwrap().ends_with('Z'));
    assert_eq!(v["entries"][0]["type"], "dir");
    assert_eq!(v["entries"][0]["size"], 0);
}

#[test]
fn tags_and_metadata_are_stored_kept_and_found() {
    let env = tree();
    let t = env.json(&["tag", "/src/main.rs", "reviewed", "entry-point"]);
    assert_eq!(
        t,
        json!({"path": "/src/main.rs", "added": ["reviewed", "entry-point"], "tags": ["entry-point", "reviewed"]})
    );
    // Tagging again adds nothing; the human output lists the tags.
    assert_eq!(
        env.ok(&["tag", "/src/main.rs", "reviewed"]).stdout,
        "/src/main.rs: entry-point reviewed\n"
    );
    env.ok(&["tag", "/src/lib.rs", "reviewed"]);
    env.ok(&["tag", "/src", "module"]);
    let m = env.json(&["meta", "/src/main.rs", "owner", "alice"]);
    assert_eq!(
        m,
        json!({"path": "/src/main.rs", "key": "owner", "value": "alice"})
    );
    env.ok(&["meta", "/src/lib.rs", "owner", "bob"]);
    env.ok(&["meta", "/src/lib.rs", "status", "draft=1"]);
    assert_eq!(env.ok(&["meta", "/src/main.rs", "owner"]).stdout, "alice\n");
    assert_eq!(
        env.json(&["meta", "/src/lib.rs"]),
        json!({"path": "/src/lib.rs", "tags": ["reviewed"], "meta": {"owner": "bob", "status": "draft=1"}})
    );
    assert_eq!(
        env.ok(&["meta", "/src/lib.rs"]).stdout,
        "tags: reviewed\nowner=bob\nstatus=draft=1\n"
    );
    let find = |args: &[&str]| {
        let mut a = vec!["find"];
        a.extend_from_slice(args);
        lines(&env.ok(&a).stdout)
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        find(&["--tag", "reviewed"]),
        vec!["/src/lib.rs", "/src/main.rs"]
    );
    assert_eq!(
        find(&["--tag", "reviewed", "--tag", "entry-point"]),
        vec!["/src/main.rs"]
    );
    assert_eq!(find(&["--tag", "module"]), vec!["/src"]);
    assert_eq!(
        find(&["--meta", "owner"]),
        vec!["/src/lib.rs", "/src/main.rs"]
    );
    assert_eq!(find(&["--meta", "owner=bob"]), vec!["/src/lib.rs"]);
    assert_eq!(
        find(&["--meta", "status=draft=1", "--tag", "reviewed"]),
        vec!["/src/lib.rs"]
    );
    let v = env.json(&["find", "--meta", "owner=alice"]);
    assert_eq!(v["entries"][0]["tags"], json!(["entry-point", "reviewed"]));
    assert_eq!(v["entries"][0]["meta"], json!({"owner": "alice"}));

    // Kept by checkpoints, forks and copies; changes are audited.
    env.ok(&["checkpoint", "save", "tagged"]);
    env.ok(&["vault", "fork", "default", "f"]);
    env.ok(&["cp", "/src/main.rs", "/copy.rs"]);
    assert_eq!(
        find(&["--tag", "entry-point"]),
        vec!["/copy.rs", "/src/main.rs"]
    );
    let u = env.json(&["untag", "/src/main.rs", "reviewed", "never-there"]);
    assert_eq!(
        u,
        json!({"path": "/src/main.rs", "removed": ["reviewed"], "tags": ["entry-point"]})
    );
    let d = env.json(&["meta", "/src/main.rs", "owner", "--unset"]);
    assert_eq!(
        d,
        json!({"path": "/src/main.rs", "key": "owner", "removed": true})
    );
    assert_eq!(
        env.json_err(&["meta", "/src/main.rs", "owner"], 1)["kind"],
        "not_found"
    );
    // The copy keeps the tags it was copied with.
    assert_eq!(
        find(&["--tag", "reviewed"]),
        vec!["/copy.rs", "/src/lib.rs"]
    );
    assert_eq!(
        find(&["--tag", "reviewed", "--at", "tagged"]),
        vec!["/src/lib.rs", "/src/main.rs"]
    );
    assert_eq!(
        env.json(&["--vault", "f", "meta", "/src/main.rs"])["meta"],
        json!({"owner": "alice"})
    );
    let actions: Vec<String> = env.json(&["audit"])["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap().to_string())
        .filter(|a| ["tag", "untag", "meta.set", "meta.unset"].contains(&a.as_str()))
        .collect();
    assert_eq!(
        actions,
        vec![
            "tag",
            "tag",
            "tag",
            "tag",
            "meta.set",
            "meta.set",
            "meta.set",
            "untag",
            "meta.unset"
        ]
    );
    // Names are checked; a missing path is not_found.
    assert_eq!(
        env.json_err(&["meta", "/src/lib.rs", "a=b", "c"], 1)["kind"],
        "invalid_argument"
    );
    assert_eq!(
        env.json_err(&["tag", "/src/lib.rs", "bad\ttag"], 1)["kind"],
        "invalid_argument"
    );
    assert_eq!(env.json_err(&["tag", "/nope", "x"], 1)["kind"], "not_found");
    // They are plain user.avfs.* attributes in the tree.
    env.ok(&["checkpoint", "save", "after"]);
    let db = rusqlite::Connection::open(env.home().join("vaults/default.avfs")).unwrap();
    let n: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM xattr WHERE name = CAST('user.avfs.tag.entry-point' AS BLOB)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(n >= 1);
}

#[test]
fn search_ranks_snippets_and_updates_incrementally() {
    let env = Env::new();
    env.ok(&["write", "-p", "/docs/pool.md", "# Pools\nThe connection pool keeps connections.\nA pool of connection objects: connection pool sizing.\n"]);
    env.ok(&[
        "write",
        "-p",
        "/docs/other.md",
        "Nothing about that here.\nBut one connection is mentioned, and a pool too.\n",
    ]);
    env.ok(&[
        "write",
        "-p",
        "/src/net.rs",
        "// retry with backoff\nfn retrying_connect() {}\n",
    ]);
    assert_eq!(
        env.run_stdin(&["write", "/image.bin"], b"connection pool\0\x01")
            .code,
        0
    );
    let v = env.json(&["search", "connection", "pool"]);
    assert_eq!(v["query"], "connection pool");
    assert_eq!(v["fts_query"], "\"connection\" \"pool\"");
    assert_eq!(v["index"]["full"], true);
    assert_eq!(v["index"]["files_updated"], 4);
    assert_eq!(v["index"]["contents_indexed"], 3);
    assert_eq!(v["index"]["documents"], 3);
    let res = v["results"].as_array().unwrap();
    assert_eq!(
        paths(&v["results"]),
        vec!["/docs/pool.md", "/docs/other.md"]
    );
    assert!(res[0]["score"].as_f64().unwrap() > res[1]["score"].as_f64().unwrap());
    // The first line holding every word.
    assert_eq!(res[0]["line"], 2);
    assert_eq!(res[0]["snippet"], "The connection pool keeps connections.");
    assert_eq!(res[1]["line"], 2);

    // The second search changes nothing in the index.
    let v = env.json(&["search", "retr*"]);
    assert_eq!(v["index"]["full"], false);
    assert_eq!(v["index"]["files_updated"], 0);
    assert_eq!(paths(&v["results"]), vec!["/src/net.rs"]);
    assert_eq!(v["results"][0]["snippet"], "// retry with backoff");

    // Changes are picked up from a diff: only what changed is looked at.
    env.ok(&["write", "/docs/other.md", "Rewritten: nothing relevant.\n"]);
    env.ok(&["rm", "/src/net.rs"]);
    env.ok(&["write", "/docs/copy.md", "# Pools\nThe connection pool keeps connections.\nA pool of connection objects: connection pool sizing.\n"]);
    env.ok(&["chmod", "600", "/docs/pool.md"]);
    let v = env.json(&["search", "connection", "pool"]);
    assert_eq!(v["index"]["full"], false);
    assert_eq!(v["index"]["files_updated"], 3);
    assert_eq!(
        v["index"]["contents_indexed"], 1,
        "the copy's content was indexed before"
    );
    assert_eq!(v["index"]["documents"], 3);
    assert_eq!(paths(&v["results"]), vec!["/docs/copy.md", "/docs/pool.md"]);
    assert_eq!(
        env.json(&["search", "retrying_connect"])["results"],
        json!([])
    );

    // --path, --limit, --fts.
    assert_eq!(
        paths(&env.json(&["search", "pool", "--path", "/docs/pool.md"])["results"]),
        vec!["/docs/pool.md"]
    );
    assert_eq!(
        env.json(&["search", "pool", "--path", "/src"])["results"],
        json!([])
    );
    assert_eq!(
        env.json(&["search", "pool", "--limit", "1"])["results"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let v = env.json(&["search", "--fts", "rewritten OR sizing"]);
    let mut found = paths(&v["results"]);
    found.sort();
    assert_eq!(
        found,
        vec!["/docs/copy.md", "/docs/other.md", "/docs/pool.md"]
    );
    assert_eq!(
        env.json_err(&["search", "--fts", "AND AND"], 1)["kind"],
        "invalid_argument"
    );
    assert_eq!(env.run(&["search"]).code, 2);

    // Restoring a checkpoint, and a fork with its own index that reuses indexed text.
    env.ok(&["checkpoint", "save", "now"]);
    env.ok(&["write", "/late.txt", "connection pool arrives late\n"]);
    assert_eq!(
        env.json(&["search", "arrives"])["results"][0]["path"],
        "/late.txt"
    );
    env.ok(&["checkpoint", "restore", "now"]);
    assert_eq!(env.json(&["search", "arrives"])["results"], json!([]));
    env.ok(&["vault", "fork", "default", "f"]);
    let v = env.json(&["--vault", "f", "search", "pool"]);
    assert_eq!(v["index"]["full"], true);
    assert_eq!(v["index"]["contents_indexed"], 0);
    assert_eq!(paths(&v["results"]).len(), 2);
    env.ok(&["vault", "delete", "f", "-y"]);
    // The deleted fork's index went with it: a new fork of the same state (which may get
    // the same workspace id) builds its own from scratch rather than trusting f's.
    env.ok(&["vault", "fork", "default", "g"]);
    let v = env.json(&["--vault", "g", "search", "pool"]);
    assert_eq!(v["index"]["full"], true, "{v}");
    assert_eq!(paths(&v["results"]).len(), 2);
    // Human output: path:line  snippet.
    let r = env.ok(&["search", "backoff"]);
    assert_eq!(r.stdout, "");
    let r = env.ok(&["search", "sizing"]);
    assert_eq!(
        lines(&r.stdout),
        vec![
            "/docs/copy.md:3  A pool of connection objects: connection pool sizing.",
            "/docs/pool.md:3  A pool of connection objects: connection pool sizing."
        ]
    );
    assert!(
        r.stderr.is_empty(),
        "no progress bar when not on a terminal: {}",
        r.stderr
    );
}

/// A vault is made without the search index's tables (format 10): its first search makes
/// them, and a vault never searched forks, deletes workspaces and verifies without them.
#[test]
fn the_first_search_makes_the_index_tables() {
    let env = Env::new();
    env.ok(&["write", "/notes.md", "the lazy index\n"]);
    let path = env.home().join("vaults/default.avfs");
    let tables = || -> Vec<String> {
        let db = rusqlite::Connection::open(&path).unwrap();
        let mut st = db
            .prepare("SELECT name FROM sqlite_schema WHERE name LIKE 'search%' ORDER BY name")
            .unwrap();
        st.query_map([], |r| r.get(0))
            .unwrap()
            .map(|r| r.unwrap())
            .collect()
    };
    assert_eq!(tables(), Vec::<String>::new());
    let pages_before = std::fs::metadata(&path).unwrap().len();
    // Without them: a fork made and deleted, a full check.
    env.ok(&["vault", "fork", "default", "side"]);
    env.ok(&["vault", "delete", "side", "--yes"]);
    assert_eq!(env.json(&["vault", "verify"])["report"]["ok"], true);
    let v = env.json(&["search", "lazy"]);
    assert_eq!(v["results"][0]["path"], "/notes.md", "{v}");
    let made = tables();
    for t in ["search_doc", "search_fts", "search_state", "search_text"] {
        assert!(made.contains(&t.to_string()), "{t} not made: {made:?}");
    }
    assert_eq!(env.json(&["vault", "verify"])["report"]["ok"], true);
    // Nine pages were not there before.
    assert!(std::fs::metadata(&path).unwrap().len() >= pages_before + 9 * 4096);
    // A workspace deleted now leaves no document of it behind.
    env.ok(&["vault", "fork", "default", "side2"]);
    env.ok(&["--vault", "side2", "search", "lazy"]);
    env.ok(&["vault", "delete", "side2", "--yes"]);
    assert_eq!(
        env.json(&["search", "lazy"])["results"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn old_vaults_migrate_to_the_current_format_and_newer_ones_are_refused() {
    let env = Env::new();
    env.ok(&["write", "/a.txt", "migrated text\n"]);
    let path = env.home().join("vaults/default.avfs");
    {
        // Turn the file back into format 3: no search tables (format 4; since format 10 made by the first search), no extents,
        // access times or reclaim table (format 5), no audit heads (format 6), no remotes (format 7), chunks as they are (format 9). Dropping a column added by ALTER TABLE restores the schema text.
        let db = rusqlite::Connection::open(&path).unwrap();
        db.execute_batch(
            "ALTER TABLE chunk DROP COLUMN codec;
             DROP TABLE IF EXISTS search_fts; DROP TABLE IF EXISTS search_text;
             DROP TABLE IF EXISTS search_doc; DROP TABLE IF EXISTS search_state;
             ALTER TABLE content DROP COLUMN format; ALTER TABLE inode DROP COLUMN atime_ns;
             DROP TABLE reclaim_young;
             ALTER TABLE workspace DROP COLUMN audit_head; ALTER TABLE checkpoint DROP COLUMN audit_head;
             DROP TRIGGER checkpoint_object_forget; DROP TABLE checkpoint_object; DROP TABLE remote_ref;
             DROP TABLE remote_object; DROP TABLE remote_pack; DROP TABLE remote;
             PRAGMA user_version = 3;",
        )
        .unwrap();
    }
    let v = env.json(&["search", "migrated"]);
    assert_eq!(v["results"][0]["path"], "/a.txt");
    let db = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = db
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, agentvfs::store::schema::FORMAT_VERSION);
    db.execute_batch("PRAGMA user_version = 99;").unwrap();
    drop(db);
    let e = env.json_err(&["search", "migrated"], 1);
    assert_eq!(e["kind"], "vault_too_new");
}

#[test]
fn completions_man_pages_and_examples_in_help() {
    let env = Env::new();
    let bash = env.ok(&["completions", "bash"]).stdout;
    assert!(
        bash.contains("-F _clap_complete_avfs avfs") && bash.contains("AVFS_COMPLETE"),
        "{}",
        &bash[..200.min(bash.len())]
    );
    assert!(
        env.ok(&["completions", "zsh"])
            .stdout
            .starts_with("#compdef avfs")
    );
    assert!(
        env.ok(&["completions", "fish"])
            .stdout
            .contains("complete --keep-order --exclusive --command avfs")
    );
    assert_eq!(env.run(&["completions", "tcsh"]).code, 2);
    let man = env.ok(&["man"]).stdout;
    assert!(man.contains(".TH avfs 1"), "{}", &man[..200]);
    assert!(man.contains("Examples:"));
    let dir = env.path("man1");
    let v = env.json(&["man", "--dir", dir.to_str().unwrap()]);
    let pages: Vec<&str> = v["pages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    for p in [
        "avfs.1",
        "avfs-vault-merge.1",
        "avfs-grep.1",
        "avfs-shell.1",
        "avfs-checkpoint-save.1",
    ] {
        assert!(pages.contains(&p), "{p} not in {pages:?}");
        assert!(dir.join(p).exists());
    }
    let merge = std::fs::read_to_string(dir.join("avfs-vault-merge.1")).unwrap();
    assert!(merge.contains("\\-\\-dry\\-run"), "{merge}");
    // Every command's --help ends with examples.
    for cmd in [
        vec!["grep"],
        vec!["find"],
        vec!["search"],
        vec!["tag"],
        vec!["meta"],
        vec!["shell"],
        vec!["vault", "merge"],
        vec!["ls"],
        vec!["checkpoint", "save"],
        vec!["exec"],
        vec!["completions"],
    ] {
        let mut a = cmd.clone();
        a.push("--help");
        let out = env.ok(&a).stdout;
        let want = format!("Examples:\n  avfs {}", cmd.join(" "));
        assert!(out.contains(&want), "{cmd:?}: {out}");
    }
    assert!(
        env.ok(&["--help"])
            .stdout
            .contains("Examples:\n  avfs write")
    );
}

/// Runs `avfs ARGS` on a pseudo-terminal (util-linux `script`); `None` without `script`.
fn on_tty(env: &Env, args: &str, no_color: bool) -> Option<String> {
    let bin = env!("CARGO_BIN_EXE_avfs");
    let mut c = Command::new("script");
    c.args(["-qec", &format!("{bin} {args}"), "/dev/null"])
        .env("AVFS_HOME", env.home())
        .env_remove("AVFS_VAULT")
        .env_remove("NO_COLOR");
    if no_color {
        c.env("NO_COLOR", "1");
    }
    let out = c.stdin(std::process::Stdio::null()).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn colours_only_on_a_terminal_and_never_with_no_color() {
    let env = tree();
    let Some(tty) = on_tty(&env, "grep -n hello /README.md", false) else {
        eprintln!("SKIPPED: no `script` to make a terminal");
        return;
    };
    assert!(tty.contains("\x1b[1;31mhello\x1b[0m"), "{tty:?}");
    assert!(tty.contains("\x1b[32m2\x1b[0m:"), "{tty:?}");
    let plain = on_tty(&env, "grep -n hello /README.md", true).unwrap();
    assert!(!plain.contains('\x1b'), "{plain:?}");
    assert!(plain.contains("2:Say hello to the world."), "{plain:?}");
    let json = on_tty(&env, "--json grep hello", false).unwrap();
    assert!(!json.contains('\x1b'), "{json:?}");
    env.ok(&["checkpoint", "save", "v1"]);
    env.ok(&["write", "/added", "x"]);
    let diff = on_tty(&env, "diff", false).unwrap();
    assert!(diff.contains("\x1b[32mA\x1b[0m /added"), "{diff:?}");
}

#[test]
fn search_rebuilds_from_the_tree_when_gc_removed_the_indexed_root() {
    let env = Env::new();
    env.ok(&["write", "/a.txt", "alpha words\n"]);
    let v = env.json(&["search", "alpha"]);
    assert_eq!(v["index"]["full"], true);
    // The indexed root was never saved in a checkpoint: once nothing else refers to it
    // (the checkpoint flushes the live layer to a new root), gc removes it.
    env.ok(&["write", "/b.txt", "beta words\n"]);
    env.ok(&["checkpoint", "save", "later"]);
    assert!(env.json(&["gc"])["trees_removed"].as_u64().unwrap() >= 1);
    let v = env.json(&["search", "words"]);
    assert_eq!(v["index"]["full"], true);
    assert_eq!(v["index"]["files_updated"], 2);
    assert_eq!(
        v["index"]["contents_indexed"], 1,
        "alpha's text is still indexed"
    );
    assert_eq!(paths(&v["results"]), vec!["/a.txt", "/b.txt"]);
    // Back to incremental.
    env.ok(&["rm", "/a.txt"]);
    let v = env.json(&["search", "words"]);
    assert_eq!(v["index"]["full"], false);
    assert_eq!(v["index"]["files_updated"], 1);
    assert_eq!(paths(&v["results"]), vec!["/b.txt"]);
}

/// Follows `next_cursor` from the default page to the end; returns every item of `key`
/// (mapped by `item`) in order, checking `total` on every page.
fn all_pages(
    env: &Env,
    args: &[&str],
    key: &str,
    item: impl Fn(&Value) -> String,
) -> (Vec<String>, Value) {
    let first = env.json(args);
    let total = first["total"].clone();
    let mut out: Vec<String> = first[key].as_array().unwrap().iter().map(&item).collect();
    assert_eq!(out.len(), 100, "the default page: {key}");
    let mut cursor = first["next_cursor"].as_str().map(str::to_string);
    while let Some(c) = cursor {
        let mut a: Vec<&str> = args.to_vec();
        a.extend(["--limit", "70", "--cursor", &c]);
        let page = env.json(&a);
        assert_eq!(page["total"], total);
        let items = page[key].as_array().unwrap();
        assert!(items.len() <= 70);
        out.extend(items.iter().map(&item));
        cursor = page["next_cursor"].as_str().map(str::to_string);
    }
    (out, first)
}

#[test]
fn ls_grep_and_find_return_a_page_with_totals_and_a_cursor() {
    let env = Env::new();
    let host = env.path("many");
    std::fs::create_dir(&host).unwrap();
    let name = |i: usize| format!("f{i:03}.txt");
    for i in 0..250 {
        std::fs::write(host.join(name(i)), "a needle\nhay\nneedle again\n").unwrap();
    }
    env.ok(&["import", host.to_str().unwrap(), "/d"]);
    let names: Vec<String> = (0..250).map(name).collect();
    let paths: Vec<String> = names.iter().map(|n| format!("/d/{n}")).collect();

    // ls: 250 entries, pages of them, each exactly once, in name order.
    let (got, first) = all_pages(&env, &["ls", "/d"], "entries", |e| {
        e["name"].as_str().unwrap().to_string()
    });
    assert_eq!(first["total"], 250);
    assert_eq!(first["next_cursor"], "100");
    assert_eq!(got, names);
    // --brief: name, type and size only.
    let b = env.json(&["ls", "--brief", "--limit", "1", "/d"]);
    assert_eq!(
        b["entries"],
        json!([{"name": "f000.txt", "size": 26, "type": "file"}])
    );
    assert_eq!((&b["total"], &b["next_cursor"]), (&json!(250), &json!("1")));
    // Text output is whole unless a page is asked for; a cut page says so on stderr.
    assert_eq!(env.ok(&["ls", "/d"]).stdout.lines().count(), 250);
    let r = env.ok(&["ls", "/d", "--limit", "3", "--cursor", "248"]);
    assert_eq!(lines(&r.stdout), ["f248.txt", "f249.txt"]);
    assert!(!r.stderr.contains("--cursor"), "{}", r.stderr);
    let r = env.ok(&["ls", "/d", "--limit", "3"]);
    assert_eq!(lines(&r.stdout), ["f000.txt", "f001.txt", "f002.txt"]);
    assert!(r.stderr.contains("showed 3 of 250") && r.stderr.contains("--cursor 3"));

    // find: 251 entries (the directory itself too).
    let (got, first) = all_pages(&env, &["find", "/d"], "entries", |e| {
        e["path"].as_str().unwrap().to_string()
    });
    assert_eq!(first["total"], 251);
    let mut want = vec!["/d".to_string()];
    want.extend(paths.iter().cloned());
    assert_eq!(got, want);

    // grep: 500 matching lines in 250 files.
    let (got, first) = all_pages(&env, &["grep", "needle", "/d"], "matches", |m| {
        format!("{}:{}", m["path"].as_str().unwrap(), m["line"])
    });
    assert_eq!(
        (&first["total"], &first["files_matched"]),
        (&json!(500), &json!(250))
    );
    // The files of the first page's 100 matches.
    assert_eq!(first["files"].as_array().unwrap().len(), 50);
    let want: Vec<String> = paths
        .iter()
        .flat_map(|p| [format!("{p}:1"), format!("{p}:3")])
        .collect();
    assert_eq!(got, want);
    // -l pages the files.
    let (got, first) = all_pages(&env, &["grep", "-l", "needle", "/d"], "files", |f| {
        f.as_str().unwrap().to_string()
    });
    assert_eq!(first["total"], 250);
    assert_eq!(got, paths);
    let e = env.json_err(&["grep", "needle", "/d", "--cursor", "next"], 1);
    assert_eq!(e["kind"], "invalid_argument");
}
