//! Dynamic shell completion through the real binary: the shell's side of the protocol
//! (`AVFS_COMPLETE=SHELL avfs -- avfs WORDS...`), a real bash sourcing the script, and the
//! promise that completing never creates, locks or changes anything.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::Env;

/// A vault `proj` (checkpoints c1, c2, a remote `origin`), its fork `task` (checkpoint t1),
/// and a second vault `other`.
fn setup() -> Env {
    let env = Env::new();
    env.ok(&["vault", "create", "proj"]);
    env.ok(&["vault", "create", "other"]);
    env.ok(&["--vault", "proj", "write", "/f", "one"]);
    env.ok(&["--vault", "proj", "checkpoint", "save", "c1"]);
    env.ok(&["--vault", "proj", "write", "/f", "two"]);
    env.ok(&["--vault", "proj", "checkpoint", "save", "c2"]);
    env.ok(&["vault", "fork", "proj", "task"]);
    env.ok(&["--vault", "task", "write", "/g", "x"]);
    env.ok(&["--vault", "task", "checkpoint", "save", "t1"]);
    let remote = env.path("remote");
    std::fs::create_dir_all(&remote).unwrap();
    let url = format!("file://{}", remote.display());
    env.ok(&["--vault", "proj", "remote", "add", "origin", &url]);
    env
}

/// What the shell gets for the command line `words` (after `avfs`) with the cursor on its
/// last word, as bash's registered function asks for it.
fn complete_in(env: &Env, shell: &str, words: &[&str], vault_env: Option<&str>) -> Vec<String> {
    let mut c = env.cmd(["--", "avfs"].iter().chain(words));
    // Path candidates come from the working directory: one the test controls.
    c.current_dir(env.dir.path())
        .env("AVFS_COMPLETE", shell)
        .env("_CLAP_COMPLETE_INDEX", words.len().to_string())
        .env("_CLAP_IFS", "\n");
    if let Some(v) = vault_env {
        c.env("AVFS_VAULT", v);
    }
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "completion of {words:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// The names offered (on an empty word the engine offers the flags too: left out here).
fn complete(env: &Env, words: &[&str]) -> Vec<String> {
    let mut got = complete_in(env, "bash", words, None);
    got.retain(|w| !w.starts_with('-'));
    got
}

#[test]
fn checkpoint_names_of_the_selected_vault() {
    let env = setup();
    // Newest first, only the ones matching what is typed.
    let restore = complete(&env, &["--vault", "proj", "checkpoint", "restore", "c"]);
    assert_eq!(restore, ["c2", "c1"]);
    assert_eq!(
        complete(&env, &["--vault=proj", "checkpoint", "delete", "c1"]),
        ["c1"]
    );
    // The alias and every other argument that takes a checkpoint.
    for words in [
        &["--vault", "proj", "snapshot", "restore", "c"][..],
        &["--vault", "proj", "checkpoint", "diff", "c"],
        &["--vault", "proj", "checkpoint", "diff", "c1", "c"],
        &["--vault", "proj", "diff", "c"],
        &["--vault", "proj", "diff", "c1", "c"],
        &["--vault", "proj", "restore", "/f", "--from", "c"],
        &["--vault", "proj", "cat", "/f", "--at", "c"],
        &["--vault", "proj", "grep", "one", "--at", "c"],
        &["--vault", "proj", "find", "--newer", "c"],
        &["--vault", "proj", "find", "--at", "c"],
        &["--vault", "proj", "push", "origin", "c"],
        // --vault after the subcommand counts too.
        &["checkpoint", "restore", "--vault", "proj", "c"],
    ] {
        let got = complete(&env, words);
        assert!(
            got.contains(&"c1".to_string()) && got.contains(&"c2".to_string()),
            "{words:?}: {got:?}"
        );
        assert!(!got.contains(&"t1".to_string()), "{words:?}: {got:?}");
    }
    // `--from` of `vault fork SRC` lists SRC's checkpoints, whatever --vault says.
    assert_eq!(
        complete(&env, &["vault", "fork", "proj", "new", "--from", "c"]),
        ["c2", "c1"]
    );
    assert_eq!(
        complete(
            &env,
            &[
                "--vault", "proj", "vault", "fork", "task", "n", "--from", ""
            ]
        ),
        ["t1"]
    );
    // AVFS_VAULT selects as --vault does; a fork has its own checkpoints.
    assert_eq!(
        complete_in(&env, "bash", &["checkpoint", "restore", "c"], Some("proj")),
        ["c2", "c1"]
    );
    assert_eq!(
        complete_in(&env, "bash", &["checkpoint", "restore", "t"], Some("task")),
        ["t1"]
    );
    assert_eq!(
        complete_in(
            &env,
            "bash",
            &["--vault", "task", "checkpoint", "restore", "t"],
            Some("proj")
        ),
        ["t1"],
        "--vault on the line wins over AVFS_VAULT"
    );
    // A vault given by its file path.
    let file = env.home().join("vaults/proj.avfs");
    assert!(file.exists());
    assert_eq!(
        complete(
            &env,
            &[
                "--vault",
                file.to_str().unwrap(),
                "checkpoint",
                "restore",
                ""
            ]
        ),
        ["c2", "c1"]
    );
    // An unknown vault: nothing, and no error on the terminal.
    assert!(complete(&env, &["--vault", "nope", "checkpoint", "restore", ""]).is_empty());
}

#[test]
fn vault_fork_workspace_and_remote_names() {
    let env = setup();
    assert_eq!(complete(&env, &["--vault", "p"]), ["proj"]);
    assert_eq!(complete(&env, &["--vault", ""]), ["other", "proj", "task"]);
    assert_eq!(
        complete_in(&env, "bash", &["--vault=p"], None),
        ["--vault=proj"]
    );
    for words in [
        &["vault", "delete", "p"][..],
        &["vault", "rm", "p"],
        &["vault", "export", "p"],
        &["vault", "info", "p"],
        &["vault", "use", "p"],
        &["vault", "verify", "p"],
        &["vault", "fork", "p"],
        &["vault", "merge", "task", "--into", "p"],
        &["mount", "p"],
        // The global flag after a subcommand.
        &["checkpoint", "restore", "--vault", "p"],
    ] {
        assert_eq!(complete(&env, words), ["proj"], "{words:?}");
    }
    // Only forks are merged; `exec --fork` reuses forks of the selected vault's file.
    assert_eq!(complete(&env, &["vault", "merge", ""]), ["task"]);
    assert_eq!(
        complete(&env, &["--vault", "proj", "exec", "--fork", ""]),
        ["task"]
    );
    assert!(complete(&env, &["--vault", "other", "exec", "--fork", ""]).is_empty());
    assert_eq!(
        complete(&env, &["--vault", "proj", "push", "--workspace", ""]),
        ["main", "task"]
    );
    for words in [
        &["--vault", "proj", "remote", "remove", "o"][..],
        &["--vault", "proj", "remote", "rm", ""],
        &["--vault", "proj", "remote", "gc", ""],
        &["--vault", "proj", "push", "o"],
        &["--vault", "proj", "fetch", ""],
        &["--vault", "proj", "pull", ""],
    ] {
        assert_eq!(complete(&env, words), ["origin"], "{words:?}");
    }
    assert!(complete(&env, &["--vault", "other", "fetch", ""]).is_empty());
    // Commands and flags still complete.
    assert_eq!(complete(&env, &["checkp"]), ["checkpoint"]);
    assert!(
        complete_in(&env, "bash", &["checkpoint", "restore", "--"], None)
            .contains(&"--vault".to_string())
    );
    // Once the word is a path, --vault offers files.
    let got = complete(&env, &["--vault", &format!("{}/", env.home().display())]);
    assert!(
        got.iter().any(|g| g.ends_with("/vaults/")),
        "path completion for --vault: {got:?}"
    );
}

#[test]
fn zsh_and_fish_get_the_names_with_descriptions() {
    let env = setup();
    let zsh = complete_in(
        &env,
        "zsh",
        &["--vault", "proj", "checkpoint", "restore", "c"],
        None,
    );
    assert_eq!(zsh.len(), 2, "{zsh:?}");
    // name:description, the description being when and by whom it was saved.
    assert!(
        zsh[0].starts_with("c2:20") && zsh[0].ends_with("Z cli"),
        "{zsh:?}"
    );
    assert!(
        zsh[1].starts_with("c1:20") && zsh[1].ends_with("Z cli"),
        "{zsh:?}"
    );
    let fish = complete_in(&env, "fish", &["vault", "merge", "t"], None);
    assert_eq!(fish, ["task\tfork of proj"]);
    let vaults = complete_in(&env, "fish", &["--vault", "o"], None);
    assert_eq!(vaults, ["other\tvault"]);
}

#[test]
fn completing_never_creates_locks_or_changes_anything() {
    // A fresh home: nothing is created, not even $AVFS_HOME.
    let env = Env::new();
    assert!(complete(&env, &["checkpoint", "restore", ""]).is_empty());
    assert!(complete(&env, &["--vault", ""]).is_empty());
    assert!(complete(&env, &["fetch", ""]).is_empty());
    assert!(!env.home().exists(), "completion created $AVFS_HOME");

    // Without --vault, the current vault's names (`vault create` made it current).
    env.ok(&["vault", "create", "proj"]);
    env.ok(&["--vault", "proj", "checkpoint", "save", "c1"]);
    assert_eq!(complete(&env, &["checkpoint", "restore", ""]), ["c1"]);
    // No current vault and no `default` (a registry where none was ever made current):
    // no candidates, and no `default` appears.
    let reg = rusqlite::Connection::open(env.home().join("registry.db")).unwrap();
    reg.execute_batch("DELETE FROM setting WHERE key = 'current'")
        .unwrap();
    drop(reg);
    assert!(complete(&env, &["checkpoint", "restore", ""]).is_empty());
    assert!(complete(&env, &["push", "--workspace", ""]).is_empty());
    assert!(!env.home().join("vaults/default.avfs").exists());
    let names: Vec<String> = env.json(&["vault", "list"])["vaults"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["proj"]);

    // Another process holds the write lock of the vault and of the registry: completion
    // still answers at once, and leaves both files as they were.
    let file = env.home().join("vaults/proj.avfs");
    let before = std::fs::read(&file).unwrap();
    let mtime = std::fs::metadata(&file).unwrap().modified().unwrap();
    let vault_db = rusqlite::Connection::open(&file).unwrap();
    vault_db.execute_batch("BEGIN IMMEDIATE").unwrap();
    let reg_db = rusqlite::Connection::open(env.home().join("registry.db")).unwrap();
    reg_db.execute_batch("BEGIN IMMEDIATE").unwrap();
    let t = Instant::now();
    assert_eq!(
        complete(&env, &["--vault", "proj", "checkpoint", "restore", ""]),
        ["c1"]
    );
    assert_eq!(complete(&env, &["--vault", "p"]), ["proj"]);
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "completion waited for a lock: {:?}",
        t.elapsed()
    );
    reg_db.execute_batch("ROLLBACK").unwrap();
    vault_db.execute_batch("ROLLBACK").unwrap();
    drop(vault_db);
    assert_eq!(std::fs::read(&file).unwrap(), before);
    assert_eq!(std::fs::metadata(&file).unwrap().modified().unwrap(), mtime);
}

#[test]
fn completion_is_fast() {
    let env = setup();
    let mut times = Vec::new();
    for _ in 0..9 {
        let t = Instant::now();
        let got = complete(&env, &["--vault", "proj", "checkpoint", "restore", ""]);
        times.push(t.elapsed());
        assert_eq!(got, ["c2", "c1"]);
    }
    times.sort();
    let median = times[times.len() / 2];
    eprintln!("checkpoint completion: median {median:?} of {times:?}");
    // A <TAB> must feel instant; generous for a loaded test machine.
    assert!(median < Duration::from_secs(1), "median {median:?}");
}

/// Runs `script` in a real bash with the avfs binary on PATH, as a user's shell has it.
fn bash(env: &Env, script: &str) -> String {
    let bin = Path::new(env!("CARGO_BIN_EXE_avfs")).parent().unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", script])
        .env("PATH", path)
        .env("AVFS_HOME", env.home())
        .env_remove("AVFS_VAULT")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "bash failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn bash_sources_the_script_and_completes_real_names() {
    let env = setup();
    // The documented install line, then what bash does on <TAB>: set COMP_WORDS and
    // COMP_CWORD and call the registered function with (command, word, previous word).
    let got = bash(
        &env,
        r#"source <(avfs completions bash)
complete -p avfs
COMP_WORDS=(avfs --vault proj checkpoint restore c); COMP_CWORD=5
fn=$(complete -p avfs | sed 's/.*-F \([^ ]*\) .*/\1/')
"$fn" avfs c restore
printf 'reply:%s\n' "${COMPREPLY[@]}"
COMP_WORDS=(avfs vault merge t); COMP_CWORD=3
"$fn" avfs t merge
printf 'merge:%s\n' "${COMPREPLY[@]}"
COMP_WORDS=(avfs --vault p); COMP_CWORD=2
"$fn" avfs p --vault
printf 'vault:%s\n' "${COMPREPLY[@]}"
"#,
    );
    let lines: Vec<&str> = got.lines().collect();
    assert!(lines[0].contains("-F _clap_complete_avfs avfs"), "{got}");
    assert_eq!(
        lines[1..],
        ["reply:c2", "reply:c1", "merge:task", "vault:proj"],
        "{got}"
    );
    // The script calls back the avfs it was printed by: as a PATH lookup when run as
    // `avfs`, by its absolute path otherwise.
    assert!(bash(&env, "avfs completions bash").contains("\"avfs\" -- "));
    let abs = env.ok(&["completions", "bash"]).stdout;
    assert!(abs.contains(env!("CARGO_BIN_EXE_avfs")), "{abs}");
    assert!(abs.contains("AVFS_COMPLETE=\"bash\""), "{abs}");
}

#[test]
fn every_shell_gets_a_registration_script() {
    let env = Env::new();
    let zsh = env.ok(&["completions", "zsh"]).stdout;
    assert!(zsh.starts_with("#compdef avfs"), "{zsh}");
    assert!(zsh.contains("AVFS_COMPLETE=\"zsh\""), "{zsh}");
    let fish = env.ok(&["completions", "fish"]).stdout;
    assert!(fish.contains("--command avfs"), "{fish}");
    assert!(fish.contains("AVFS_COMPLETE=fish"), "{fish}");
    assert!(
        env.ok(&["completions", "elvish"])
            .stdout
            .contains("AVFS_COMPLETE=\"elvish\"")
    );
    assert!(
        env.ok(&["completions", "powershell"])
            .stdout
            .contains("Register-ArgumentCompleter")
    );
    assert_eq!(env.run(&["completions", "tcsh"]).code, 2);
    // The same script `AVFS_COMPLETE=bash avfs` prints.
    let direct = env
        .cmd(Vec::<&str>::new())
        .env("AVFS_COMPLETE", "bash")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&direct.stdout),
        env.ok(&["completions", "bash"]).stdout
    );
    // Printing a script needs no home either.
    assert!(!env.home().exists());
}
