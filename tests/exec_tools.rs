//! Real tools through `avfs exec` on the overlay engine, one exec per step as an agent
//! runs them: git, tar, Python, cargo and node. Each step starts from what the vault took
//! in from the step before, so every test checks the ingest as much as the run; what the
//! vault holds at the end is exported and checked natively (git fsck, tar, tree compare).
//!
//! The same workloads run in a FUSE mount in tests/mount_tools.rs. Every test needs
//! overlayfs and the tool; under `AVFS_REQUIRE_FUSE=1` (CI) a missing one fails the test.

mod common;
#[path = "common/overlay.rs"]
mod overlay;
#[path = "common/tools.rs"]
mod tools;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use common::Env;
use overlay::{exec_in, ok_in, overlay_or_skip, setup_with};
use serde_json::Value;
use tools::{
    TREE_DIGEST, adder_main, assert_same_tree, assert_same_tree_no_mtime, git, need, renamer, run,
};

/// The tools run without approval, with a checkpoint: what is tested is the engine.
fn policy() -> String {
    ["sh", "git", "tar", "python3", "cargo", "node", "npm"]
        .iter()
        .map(|p| {
            format!(
                "[[rule]]\nname = \"test-{p}\"\nprogram = \"{p}\"\ncategory = \"mutating\"\ndecision = \"allow_with_checkpoint\"\n\n"
            )
        })
        .collect()
}

fn ready(test: &str, tools: &[&str]) -> Option<Env> {
    if !overlay_or_skip(test) || !tools.iter().all(|t| need(t, test)) {
        return None;
    }
    Some(setup_with(&policy()))
}

/// One step: `sh -c SCRIPT` in the workspace directory `cwd`, with git's identity.
fn step(env: &Env, cwd: &str, script: &str) -> Value {
    ok_in(
        env,
        "t",
        &[
            "--cwd",
            cwd,
            "--env",
            "GIT_AUTHOR_NAME=Test",
            "--env",
            "GIT_AUTHOR_EMAIL=test@example.com",
            "--env",
            "GIT_COMMITTER_NAME=Test",
            "--env",
            "GIT_COMMITTER_EMAIL=test@example.com",
            "--env",
            "GIT_CONFIG_NOSYSTEM=1",
            "--env",
            "CARGO_TERM_COLOR=never",
            "--",
            "sh",
            "-c",
            script,
        ],
    )
}

fn out(v: &Value) -> String {
    overlay::stdout(v)
}

/// The workspace directory `dir` copied out to a new host directory.
fn export(env: &Env, dir: &str, name: &str) -> std::path::PathBuf {
    let to = env.path(name);
    env.ok(&["--vault", "t", "export", dir, to.to_str().unwrap()]);
    to
}

/// Every entry of the envelope names a workspace path, never a host path.
fn paths_are_workspace_paths(v: &Value, env: &Env) {
    let host = env.dir.path().to_str().unwrap();
    for c in v["changes"].as_array().unwrap() {
        let p = c["path"].as_str().unwrap();
        assert!(p.starts_with('/') && !p.contains(host), "{c}");
    }
}

#[test]
fn git_workflow_one_exec_per_step() {
    let Some(env) = ready("git_workflow_one_exec_per_step", &["git"]) else {
        return;
    };
    step(
        &env,
        "/",
        "mkdir repo && cd repo && git init -q -b main && \
         for i in $(seq 0 49); do d=dir$((i % 5)); mkdir -p $d; echo \"line one of $i\" > $d/file$i.txt; done && \
         echo base > README && ln -s README link && printf '#!/bin/sh\\necho hi\\n' > run.sh && chmod 755 run.sh",
    );
    let v = step(&env, "/repo", "git add -A && git commit -q -m initial");
    paths_are_workspace_paths(&v, &env);
    assert!(
        v["changes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["path"] == "/repo/.git/index"),
        "{}",
        v["changes"]
    );
    assert_eq!(out(&step(&env, "/repo", "git status --porcelain")), "");
    // A topic branch with two commits, each in its own exec.
    step(
        &env,
        "/repo",
        "git checkout -q -b topic && echo 'changed on topic' > dir0/file0.txt && git commit -q -am 'topic 1'",
    );
    step(
        &env,
        "/repo",
        "echo t > topic-only && git add topic-only && git commit -q -m 'topic 2'",
    );
    // main moves on.
    let v = step(
        &env,
        "/repo",
        "git checkout -q main && test ! -e topic-only && cat dir0/file0.txt",
    );
    assert_eq!(out(&v), "line one of 0\n");
    step(
        &env,
        "/repo",
        "printf 'base\\nmain change\\n' > README && rm dir4/file4.txt && git commit -q -am 'main 1'",
    );
    // Rebase topic onto main.
    let v = step(
        &env,
        "/repo",
        "git checkout -q topic && git rebase -q main && git log --format=%s",
    );
    assert_eq!(out(&v), "topic 2\ntopic 1\nmain 1\ninitial\n");
    // gc packs everything (many deletions and new packs in one run); fsck agrees.
    step(&env, "/repo", "git gc -q --aggressive --prune=now");
    let v = step(
        &env,
        "/repo",
        "git fsck --full --strict && git status --porcelain && cat README dir0/file0.txt",
    );
    assert_eq!(out(&v), "base\nmain change\nchanged on topic\n");
    // A dirty change is seen by status in the next exec, mode changes included.
    step(
        &env,
        "/repo",
        "echo dirty > dir1/file1.txt && chmod 755 README",
    );
    let v = step(&env, "/repo", "git status --porcelain");
    assert_eq!(out(&v), " M README\n M dir1/file1.txt\n");
    step(&env, "/repo", "git checkout -- .");
    // What the vault holds is a sound repository, read natively.
    let repo = export(&env, "/repo", "repo-out");
    run(git(&repo).args(["fsck", "--full", "--strict"]));
    let st = run(git(&repo).args(["status", "--porcelain"]));
    assert_eq!(tools::stdout(&st), "");
    let log = run(git(&repo).args(["log", "--format=%s", "main"]));
    assert_eq!(tools::stdout(&log), "main 1\ninitial\n");
    assert_eq!(
        std::fs::read(repo.join(".git/HEAD")).unwrap(),
        b"ref: refs/heads/topic\n"
    );
}

#[test]
fn tar_round_trip_one_exec_per_step() {
    let Some(env) = ready("tar_round_trip_one_exec_per_step", &["tar"]) else {
        return;
    };
    // Source: this repository's src/ plus the special cases tar must carry.
    let src = env.path("src-tree");
    std::fs::create_dir(&src).unwrap();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    run(Command::new("cp").arg("-a").arg(repo.join("src")).arg(&src));
    std::os::unix::fs::symlink("src/lib.rs", src.join("link")).unwrap();
    std::os::unix::fs::symlink("dangling/target", src.join("dangling")).unwrap();
    std::fs::write(src.join("exec.sh"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(src.join("exec.sh"), std::fs::Permissions::from_mode(0o751)).unwrap();
    let big: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(src.join("big.bin"), big).unwrap();
    std::fs::File::create(src.join("sparse.bin"))
        .unwrap()
        .set_len(20 << 20)
        .unwrap();
    std::fs::hard_link(src.join("exec.sh"), src.join("exec-link.sh")).unwrap();
    std::fs::create_dir(src.join("empty-dir")).unwrap();
    let seed = env.path("seed");
    std::fs::create_dir(&seed).unwrap();
    run(Command::new("tar")
        .arg("-cf")
        .arg(seed.join("tree.tar"))
        .arg("-C")
        .arg(&src)
        .arg("."));
    env.ok(&["--vault", "t", "import", seed.to_str().unwrap(), "/"]);

    let v = step(&env, "/", "mkdir x && tar -xpf tree.tar -C x");
    paths_are_workspace_paths(&v, &env);
    assert_same_tree(&src, &export(&env, "/x", "x-out"));
    // What the vault stored, seen by the next run: tar finds no difference (contents,
    // sizes, modes, owners, times, link targets), and the hard link is still one file.
    let v = step(
        &env,
        "/",
        "tar --compare -f tree.tar -C x && stat -c %i x/exec.sh x/exec-link.sh | uniq | wc -l",
    );
    assert_eq!(out(&v).trim(), "1", "exec.sh and exec-link.sh are one file");
    // A compressed round trip from the stored tree.
    step(
        &env,
        "/",
        "tar -czf tree.tar.gz -C x . && mkdir y && tar -xzpf tree.tar.gz -C y",
    );
    assert_same_tree(&src, &export(&env, "/y", "y-out"));
    // Removing the extracted tree in one run leaves only what was not in it.
    let v = step(&env, "/", "rm -rf x y && ls");
    assert_eq!(out(&v), "tree.tar\ntree.tar.gz\n");
    let ls = env.json(&["--vault", "t", "ls", "/"]);
    assert_eq!(ls["entries"].as_array().unwrap().len(), 2, "{ls}");
}

#[test]
fn python_creates_and_renames_many_files_in_one_exec() {
    let Some(env) = ready(
        "python_creates_and_renames_many_files_in_one_exec",
        &["python3"],
    ) else {
        return;
    };
    let native = env.path("native");
    std::fs::create_dir(&native).unwrap();
    let want = run(Command::new("python3")
        .arg("-c")
        .arg(renamer())
        .arg(&native)
        .arg("3000"));
    let want = tools::stdout(&want);
    assert!(want.starts_with("3000 "), "{want}");
    let v = ok_in(
        &env,
        "t",
        &["--", "python3", "-c", &renamer(), "gen", "3000"],
    );
    assert_eq!(out(&v), want);
    assert!(
        v["change_summary"]["added"].as_u64().unwrap() >= 3000,
        "{}",
        v["change_summary"]
    );
    // The next run reads what the vault took in: the same files, the same bytes.
    let v = ok_in(&env, "t", &["--", "python3", "-c", TREE_DIGEST, "gen"]);
    assert_eq!(out(&v), want);
    assert!(
        v["changes"].as_array().unwrap().is_empty(),
        "{}",
        v["changes"]
    );
    assert_same_tree_no_mtime(&native, &export(&env, "/gen", "gen-out"));
    let verify = env.json(&["--vault", "t", "vault", "verify"]);
    assert_eq!(verify["report"]["ok"], true, "{verify}");
}

#[test]
fn cargo_new_build_test_one_exec_per_step() {
    let Some(env) = ready("cargo_new_build_test_one_exec_per_step", &["cargo", "git"]) else {
        return;
    };
    step(&env, "/", "cargo new -q --vcs git hello");
    env.ok(&[
        "--vault",
        "t",
        "write",
        "/hello/src/main.rs",
        &adder_main("exec"),
    ]);
    step(&env, "/hello", "cargo build --offline");
    let v = step(&env, "/hello", "cargo run -q --offline");
    assert_eq!(out(&v), "hello from exec: 5\n");
    let v = step(&env, "/hello", "cargo test --offline 2>/dev/null");
    assert!(out(&v).contains("test tests::adds ... ok"), "{}", out(&v));
    // An edit made outside the run is picked up by an incremental build in the next.
    env.ok(&[
        "--vault",
        "t",
        "write",
        "/hello/src/main.rs",
        "fn main() { println!(\"edited\"); }\n",
    ]);
    let v = step(&env, "/hello", "cargo run --offline 2>&1");
    assert!(out(&v).contains("Compiling hello"), "{}", out(&v));
    assert!(out(&v).ends_with("edited\n"), "{}", out(&v));
}

#[test]
fn node_and_npm_keep_their_files_between_execs() {
    let Some(env) = ready(
        "node_and_npm_keep_their_files_between_execs",
        &["node", "npm"],
    ) else {
        return;
    };
    step(&env, "/", "mkdir app");
    let v = exec_in(&env, "t", &["--cwd", "/app", "--", "npm", "init", "-y"]);
    assert_eq!(v["exit_code"], 0, "{}", v["result"]["stderr"]);
    let script = r#"
const fs = require('fs');
fs.mkdirSync('lib/nested', { recursive: true });
for (let i = 0; i < 200; i++) fs.writeFileSync('lib/nested/m' + i + '.js', 'module.exports = ' + i + ';\n');
fs.writeFileSync('lib/index.js', "module.exports = { x: 41 + require('./nested/m1.js') };\n");
const pkg = JSON.parse(fs.readFileSync('package.json'));
pkg.main = 'lib/index.js';
fs.writeFileSync('package.json.tmp', JSON.stringify(pkg, null, 2));
fs.renameSync('package.json.tmp', 'package.json');
for (let i = 100; i < 200; i++) fs.unlinkSync('lib/nested/m' + i + '.js');
"#;
    ok_in(&env, "t", &["--cwd", "/app", "--", "node", "-e", script]);
    let v = ok_in(
        &env,
        "t",
        &[
            "--cwd",
            "/",
            "--",
            "node",
            "-e",
            "console.log(require('./app').x, require('fs').readdirSync('app/lib/nested').length)",
        ],
    );
    assert_eq!(out(&v), "42 100\n");
    let pkg: Value = serde_json::from_str(&env.cat(Some("t"), "/app/package.json")).unwrap();
    assert_eq!(pkg["main"], "lib/index.js");
}
