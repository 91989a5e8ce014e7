//! The sandbox end to end: tools that must work inside: version managers, git, cargo, node.

use super::*;

/// A command found through a version manager's shim (pyenv's `python3`, which runs
/// `$PYENV_ROOT/libexec/pyenv`) runs in the sandbox when `HOME` is elsewhere: the
/// manager's tree is shown with its PATH entry, not only `~/.pyenv` (issue 29: the
/// services example exited 127 under the docs tests' fresh HOME).
#[test]
fn a_version_managers_shim_runs_when_home_is_elsewhere() {
    if !can_sandbox("a_version_managers_shim_runs_when_home_is_elsewhere") {
        return;
    }
    let env = setup();
    let home = env.path("elsewhere");
    std::fs::create_dir_all(&home).unwrap();
    let x = exec_with(
        &env,
        &[("HOME", home.to_str().unwrap())],
        &["--", "python3", "-c", "print(1)"],
    );
    assert_eq!(x.code, 0, "{}\n{}", x.env, x.run.stderr);
    assert_eq!(stdout(&x), "1\n", "{}", x.env);
}

/// git, cargo and node work inside the sandbox, in the mounted workspace.
#[test]
fn git_cargo_and_node_work_inside() {
    if !can_sandbox("git_cargo_and_node_work_inside") {
        return;
    }
    let env = setup();
    let ident = [
        "--env",
        "GIT_AUTHOR_NAME=a",
        "--env",
        "GIT_AUTHOR_EMAIL=a@example.com",
        "--env",
        "GIT_COMMITTER_NAME=a",
        "--env",
        "GIT_COMMITTER_EMAIL=a@example.com",
    ];
    let mut args = vec!["--sandbox"];
    args.extend(ident);
    args.extend([
        "--shell",
        "git init -q && git add a.txt && git commit -qm first && git log --format=%s",
    ]);
    let x = exec(&env, &args);
    assert_eq!(x.code, 0, "{}\n{}", x.env, x.run.stderr);
    assert_eq!(stdout(&x), "first\n");
    assert_sandboxed(&x.env, false);
    let x = exec(&env, &["--sandbox", "--", "git", "status", "--short"]);
    assert_eq!(x.code, 0, "{}", x.env);
    // cargo: a fresh crate, built offline (no dependencies) into the workspace.
    write(
        &env,
        "hello/Cargo.toml",
        "[package]\nname = \"hello\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    );
    write(
        &env,
        "hello/src/main.rs",
        "fn main() { println!(\"hello from the sandbox\"); }\n",
    );
    let x = exec(
        &env,
        &[
            "--sandbox",
            "--cwd",
            "hello",
            "--",
            "cargo",
            "run",
            "--offline",
            "-q",
        ],
    );
    assert_eq!(x.code, 0, "{}\n{}", x.env, x.run.stderr);
    assert_eq!(stdout(&x), "hello from the sandbox\n");
    assert!(
        x.env["changes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["path"] == "/hello/target/debug/hello"),
        "the build output is in the workspace"
    );
    // node: a script that reads and writes workspace files.
    write(
        &env,
        "script.js",
        "const fs = require('fs');\nconst t = fs.readFileSync('a.txt', 'utf8');\n\
         fs.writeFileSync('from-node.txt', t.toUpperCase());\nconsole.log('node', process.version.startsWith('v'));\n",
    );
    let x = exec(&env, &["--sandbox", "--", "node", "script.js"]);
    assert_eq!(x.code, 0, "{}\n{}", x.env, x.run.stderr);
    assert_eq!(stdout(&x), "node true\n");
    assert_eq!(env.cat(Some("t"), "from-node.txt"), "HI\n");
}
