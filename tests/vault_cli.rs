//! Vaults, forks, export/import and refusal of bad vault files, through the real binary.

mod common;
use common::*;

#[test]
fn fresh_machine_write_then_cat_creates_default_vault() {
    let env = Env::new();
    env.ok(&["write", "/a", "x"]);
    assert_eq!(env.cat(None, "/a"), "x");
    let list = env.json(&["vault", "list"]);
    let v = &list["vaults"][0];
    assert_eq!(v["name"], "default");
    assert_eq!(v["current"], true);
    assert!(env.home().join("vaults/default.avfs").exists());
}

/// What the file's header says (SQLite's own format), as `sqlite3 v.avfs 'pragma ...'`
/// would show it: new vaults are made with 16 KiB pages (big files are stored at about
/// half the cost of 4 KiB pages) and incremental vacuum, both only settable at creation.
#[test]
fn new_vaults_have_16k_pages_and_incremental_vacuum() {
    let env = Env::new();
    env.json(&["vault", "create", "v"]);
    env.ok(&["--vault", "v", "write", "/a", "x"]);
    let c = rusqlite::Connection::open(env.home().join("vaults/v.avfs")).unwrap();
    let page: i64 = c.query_row("PRAGMA page_size", [], |r| r.get(0)).unwrap();
    let vacuum: i64 = c.query_row("PRAGMA auto_vacuum", [], |r| r.get(0)).unwrap();
    assert_eq!((page, vacuum), (16384, 2));
    drop(c);
    env.ok(&["--vault", "v", "vault", "verify"]);
    assert_eq!(env.cat(Some("v"), "/a"), "x");
}

#[test]
fn create_use_info_delete() {
    let env = Env::new();
    let custom = env.path("elsewhere/proj.avfs");
    env.json(&[
        "vault",
        "create",
        "proj",
        "--path",
        custom.to_str().unwrap(),
    ]);
    assert!(custom.exists());
    env.json(&["vault", "create", "other"]);
    let e = env.json_err(&["vault", "create", "proj"], 1);
    assert_eq!(e["kind"], "vault_exists");
    env.json(&["vault", "use", "other"]);
    env.ok(&["write", "/f", "in other"]);
    assert_eq!(env.cat(Some("other"), "/f"), "in other");
    assert_eq!(env.run(&["--vault", "proj", "cat", "/f"]).code, 1);
    let info = env.json(&["vault", "info", "proj"]);
    assert_eq!(info["vault"]["name"], "proj");
    assert_eq!(info["vault"]["path"], custom.to_str().unwrap());
    // A path works as a selector too.
    env.ok(&[
        "--vault",
        custom.to_str().unwrap(),
        "write",
        "/g",
        "by path",
    ]);
    assert_eq!(env.cat(Some("proj"), "/g"), "by path");
    // Deleting needs confirmation when not on a terminal.
    let e = env.json_err(&["vault", "delete", "proj"], 1);
    assert!(e["message"].as_str().unwrap().contains("-y"));
    assert!(custom.exists());
    env.json(&["vault", "delete", "proj", "-y"]);
    assert!(!custom.exists());
    assert_eq!(
        env.json_err(&["--vault", "proj", "ls"], 1)["kind"],
        "no_such_vault"
    );
}

#[test]
fn fork_isolation_both_ways_and_lineage() {
    let env = Env::new();
    env.json(&["vault", "create", "base"]);
    env.ok(&["--vault", "base", "write", "-p", "/src/lib.rs", "v1"]);
    env.json(&["--vault", "base", "checkpoint", "save", "c1"]);
    let f = env.json(&["vault", "fork", "base", "task"]);
    assert_eq!(
        f["checkpoint"], "c1",
        "an unchanged source forks at its head checkpoint"
    );
    env.ok(&["--vault", "task", "write", "/src/lib.rs", "fork change"]);
    env.ok(&["--vault", "task", "write", "/only-in-fork", "f"]);
    env.ok(&["--vault", "base", "write", "/only-in-base", "b"]);
    assert_eq!(env.cat(Some("base"), "/src/lib.rs"), "v1");
    assert_eq!(env.cat(Some("task"), "/src/lib.rs"), "fork change");
    assert_eq!(
        env.run(&["--vault", "base", "cat", "/only-in-fork"]).code,
        1
    );
    assert_eq!(
        env.run(&["--vault", "task", "cat", "/only-in-base"]).code,
        1
    );

    let list = env.json(&["vault", "list"]);
    let task = list["vaults"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "task")
        .unwrap()
        .clone();
    assert_eq!(task["parent"], "base");
    assert_eq!(task["forked_from_checkpoint"], "c1");
    let info = env.json(&["vault", "info", "base"]);
    assert_eq!(info["forks"], serde_json::json!(["task"]));

    // A modified source is checkpointed automatically for the fork.
    let f2 = env.json(&["vault", "fork", "base", "task2", "--use"]);
    assert_eq!(f2["checkpoint"], "fork-task2");
    assert_eq!(env.cat(None, "/only-in-base"), "b");

    // --from an older checkpoint.
    let f3 = env.json(&["vault", "fork", "base", "old", "--from", "c1"]);
    assert_eq!(f3["checkpoint"], "c1");
    assert_eq!(env.run(&["--vault", "old", "cat", "/only-in-base"]).code, 1);

    // Deleting a vault that has forks needs --force; deleting a fork keeps its source.
    let e = env.json_err(&["vault", "delete", "base", "-y"], 1);
    assert!(e["message"].as_str().unwrap().contains("--force"), "{e}");
    env.json(&["vault", "delete", "task", "-y"]);
    assert_eq!(env.cat(Some("base"), "/src/lib.rs"), "v1");
    assert_eq!(
        env.json_err(&["--vault", "task", "ls"], 1)["kind"],
        "no_such_vault"
    );
    let verify = env.json(&["vault", "verify", "base"]);
    assert_eq!(verify["report"]["ok"], true, "{verify}");
    env.json(&["vault", "delete", "base", "-y", "--force"]);
    assert_eq!(
        env.json_err(&["--vault", "task2", "ls"], 1)["kind"],
        "no_such_vault"
    );
}

#[test]
fn export_and_import_a_fork_as_standalone_file() {
    let env = Env::new();
    env.json(&["vault", "create", "big"]);
    env.ok(&["--vault", "big", "write", "/shared", "shared content"]);
    // Bytes that do not compress, so the stored sizes below differ by about 300 000.
    let big = env.run_stdin(
        &["--vault", "big", "write", "/base-only"],
        &noise(300_000, 7),
    );
    assert_eq!(big.code, 0, "{}", big.stderr);
    env.json(&["vault", "fork", "big", "slim"]);
    env.ok(&["--vault", "slim", "rm", "/base-only"]);
    env.ok(&["--vault", "slim", "write", "/mine", "fork file"]);
    env.json(&["--vault", "slim", "checkpoint", "save", "s1"]);
    let out = env.path("slim.avfs");
    env.json(&["vault", "export", "slim", out.to_str().unwrap()]);
    env.json(&["vault", "import", out.to_str().unwrap(), "slim2"]);
    // The standalone file does not carry content only the source references.
    let stored = |v: &str| {
        env.json(&["--vault", v, "stats"])["stats"]["vault"]["stored_bytes"]
            .as_u64()
            .unwrap()
    };
    let (size_big, size_slim) = (stored("big"), stored("slim2"));
    assert!(
        size_slim + 50_000 < size_big,
        "export should hold only what the fork references ({size_slim} vs {size_big} stored bytes)"
    );
    assert_eq!(env.cat(Some("slim2"), "/mine"), "fork file");
    assert_eq!(env.cat(Some("slim2"), "/shared"), "shared content");
    assert_eq!(env.run(&["--vault", "slim2", "cat", "/base-only"]).code, 1);
    let cps = env.json(&["--vault", "slim2", "checkpoint", "list"]);
    assert!(
        cps["checkpoints"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "s1")
    );
    assert_eq!(
        env.json(&["vault", "verify", "slim2"])["report"]["ok"],
        true
    );
}

fn assert_refused_untouched(env: &Env, file: &std::path::Path, kind: &str) {
    let before = std::fs::read(file).ok();
    let sel = file.to_str().unwrap();
    for args in [
        vec!["ls"],
        vec!["write", "/x", "y"],
        vec!["checkpoint", "save"],
        vec!["gc"],
    ] {
        let mut a = vec!["--vault", sel];
        a.extend(args.iter());
        let e = env.json_err(&a, 1);
        assert_eq!(e["kind"], kind, "{file:?} {args:?}: {e}");
        let r = env.run(&a[..]);
        assert!(
            r.stderr.contains("error"),
            "human error message expected: {}",
            r.stderr
        );
    }
    assert_eq!(std::fs::read(file).ok(), before, "{file:?} was modified");
    let mut wal = file.as_os_str().to_owned();
    wal.push("-wal");
    assert!(
        !std::path::Path::new(&wal).exists() || kind == "corrupt_vault",
        "a -wal file appeared next to {file:?}"
    );
}

#[test]
fn corrupt_and_foreign_files_are_refused_and_left_untouched() {
    let env = Env::new();
    let empty = env.path("empty.avfs");
    std::fs::write(&empty, b"").unwrap();
    assert_refused_untouched(&env, &empty, "not_a_vault");

    let text = env.path("notes.avfs");
    std::fs::write(
        &text,
        b"just some text, not a database at all\n".repeat(100),
    )
    .unwrap();
    assert_refused_untouched(&env, &text, "not_a_vault");

    let foreign = env.path("other-program.avfs");
    {
        let c = rusqlite::Connection::open(&foreign).unwrap();
        c.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
            .unwrap();
    }
    assert_refused_untouched(&env, &foreign, "not_a_vault");

    let dir = env.path("dir.avfs");
    std::fs::create_dir(&dir).unwrap();
    let e = env.json_err(&["--vault", dir.to_str().unwrap(), "ls"], 1);
    assert_eq!(e["kind"], "not_a_vault");

    // A real vault, then damaged copies of it.
    env.json(&["vault", "create", "good"]);
    for i in 0..200 {
        env.ok(&[
            "--vault",
            "good",
            "write",
            &format!("/f{i}"),
            &format!("{i}").repeat(500),
        ]);
    }
    let good = env.home().join("vaults/good.avfs");
    {
        // Fold the WAL into the main file so copies are self-contained.
        let c = rusqlite::Connection::open(&good).unwrap();
        c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);").unwrap();
    }
    let bytes = std::fs::read(&good).unwrap();
    assert!(bytes.len() > 16 * 4096);

    let truncated = env.path("truncated.avfs");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    assert_refused_untouched(&env, &truncated, "corrupt_vault");

    let newer = env.path("newer.avfs");
    let mut b = bytes.clone();
    b[60..64].copy_from_slice(&99u32.to_be_bytes());
    std::fs::write(&newer, &b).unwrap();
    assert_refused_untouched(&env, &newer, "vault_too_new");
    let e = env.json_err(&["--vault", newer.to_str().unwrap(), "ls"], 1);
    assert!(e["message"].as_str().unwrap().contains("newer"));

    // Garbage over every page but the header: SQLite's b-trees are broken.
    let garbled = env.path("garbled.avfs");
    let mut g = bytes.clone();
    let mut x: u32 = 12345;
    for byte in g[4096..].iter_mut() {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
        *byte = (x >> 16) as u8;
    }
    std::fs::write(&garbled, &g).unwrap();
    assert_refused_untouched(&env, &garbled, "corrupt_vault");
}

#[test]
fn usage_errors_are_json_with_exit_2() {
    let env = Env::new();
    let r = env.run(&["--json", "frobnicate"]);
    assert_eq!(r.code, 2);
    assert_eq!(r.json()["error"]["kind"], "usage");
    let r = env.run(&["ls", "--no-such-flag"]);
    assert_eq!(r.code, 2);
    assert!(r.stdout.is_empty());
}

/// Every command that changes a vault leaves its audit row, written by the library
/// operation that makes the change (not by the CLI beside it): the rows name the action,
/// the workspace, who asked (`cli`, or `AVFS_ORIGIN`) and the same details as before the
/// operations moved out of the CLI (issue 31). The chain still verifies.
#[test]
fn each_change_writes_its_audit_row_with_its_detail() {
    let env = Env::new();
    env.json(&["vault", "create", "base"]);
    env.ok(&["vault", "use", "base"]);
    env.json(&["write", "/a", "x"]);
    env.json(&["write", "--append", "/a", "y"]);
    assert_eq!(env.cat(None, "/a"), "xy");
    env.json(&["checkpoint", "save", "c1"]);
    env.json(&["quota", "set", "--vault-wide", "--max-files", "50"]);
    env.json(&["quota", "clear", "--vault-wide"]);
    let wp = env.path("stable/base");
    env.json(&["vault", "set-path", wp.to_str().unwrap()]);
    env.json(&["vault", "fork", "base", "task", "--from", "c1"]);
    env.json(&["vault", "delete", "task", "-y"]);
    env.json(&["gc"]);
    let out = env
        .cmd(["--json", "quota", "set", "--max-bytes", "1M"])
        .env("AVFS_ORIGIN", "mcp")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");

    let rows = env.json(&["audit"])["entries"].as_array().unwrap().clone();
    let row = |action: &str| -> serde_json::Value {
        rows.iter()
            .rev()
            .find(|e| e["action"] == action)
            .unwrap_or_else(|| panic!("no {action} row in {rows:#?}"))
            .clone()
    };
    for action in [
        "write",
        "checkpoint.save",
        "quota.set",
        "quota.clear",
        "vault.set_path",
        "vault.fork",
        "vault.delete",
        "gc",
    ] {
        let r = rows
            .iter()
            .find(|e| e["action"] == action)
            .unwrap_or_else(|| panic!("no {action} row in {rows:#?}"));
        assert_eq!(r["actor"], "cli", "{r}");
    }
    let append = row("write");
    assert_eq!(append["detail"]["append"], true, "{append}");
    assert_eq!(append["workspace"], "main");
    let clear = row("quota.clear");
    assert_eq!(clear["detail"], serde_json::json!({"scope": ""}), "{clear}");
    assert_eq!(clear["workspace"], "main");
    let set = rows.iter().find(|e| e["action"] == "quota.set").unwrap();
    assert_eq!(set["detail"]["scope"], "", "{set}");
    assert_eq!(set["detail"]["max_files"], 50, "{set}");
    // The last `quota set` ran for MCP, and sets the workspace's own quota.
    let mcp = row("quota.set");
    assert_eq!(mcp["actor"], "mcp", "{mcp}");
    assert_eq!(mcp["detail"]["scope"], "main", "{mcp}");
    assert_eq!(mcp["detail"]["max_bytes"], 1024 * 1024, "{mcp}");
    let path = row("vault.set_path");
    assert_eq!(path["detail"]["workspace_path"], wp.to_str().unwrap());
    let fork = row("vault.fork");
    assert_eq!(
        fork["detail"],
        serde_json::json!({"fork": "task", "from": "c1"}),
        "{fork}"
    );
    assert_eq!(fork["workspace"], "main");
    let delete = row("vault.delete");
    assert_eq!(delete["detail"], serde_json::json!({"fork": "task"}));
    assert_eq!(delete["workspace"], "task");
    let gc = row("gc");
    assert!(gc["detail"]["trees_removed"].is_u64(), "{gc}");
    assert_eq!(env.json(&["audit", "verify"])["ok"], true);
}
