//! Every shell example in README.md and docs/*.md runs as written on a fresh home.
//!
//! Each doc file is one test: its fenced shell blocks (```sh, ```bash, ```shell,
//! ```console) run in order, each in `bash -euo pipefail`, all in one fresh working
//! directory with a fresh `$HOME` and `$AVFS_HOME` (`$HOME/.avfs`, the documented
//! default), and `avfs` on `PATH` pointing at the built binary. In a block with `$ `
//! prompts only the prompted lines are commands (the rest is shown output).
//!
//! The doc marks what cannot run here, in an HTML comment on the line(s) right before
//! the fence (invisible when rendered):
//!
//! - `<!-- docs-test: skip (why) -->`: not run; counted and printed with its reason.
//! - `<!-- docs-test: setup: COMMAND -->`: runs before the block, in the same shell.
//!
//! A command whose trailing `#` comment says `exit N` must exit with N: the doc's claim
//! is checked, and the block goes on.
//!
//! Nothing is mocked: the blocks run the real binary on real vault files, mounts and
//! sandboxed runs, so they need what the rest of the suite needs (root, /dev/fuse).

mod common;
#[path = "common/fuse.rs"]
mod fuse;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one block may run before it is killed and reported. Long, because README's
/// first command is `cargo run --release`: in a target directory where only the test
/// build (`--all-targets`, whose dev-dependencies change some dependencies' features)
/// was made, it builds the library once more.
const BLOCK_TIMEOUT: Duration = Duration::from_secs(1200);

const SHELL_LANGS: &[&str] = &["sh", "bash", "shell", "console"];

#[derive(Debug)]
struct Block {
    /// Line of the opening fence, 1-based.
    line: usize,
    /// The commands, as (doc line, text), indentation of the fence removed.
    commands: Vec<(usize, String)>,
    skip: Option<String>,
    setup: Vec<String>,
}

/// The directive in `<!-- docs-test: ... -->`, if the line is one.
fn directive(line: &str) -> Option<&str> {
    let t = line.trim();
    let inner = t.strip_prefix("<!--")?.strip_suffix("-->")?.trim();
    Some(inner.strip_prefix("docs-test:")?.trim())
}

/// The shell blocks of a markdown file, with their directives. Panics on a directive
/// that is malformed or not right before a shell fence, so a typo cannot silently skip
/// or run something.
fn blocks(file: &str, text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut pending: Vec<(usize, &str)> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some(d) = directive(line) {
            pending.push((i + 1, d));
            i += 1;
            continue;
        }
        let trimmed = line.trim_start();
        if !trimmed.starts_with("```") {
            if let Some((at, _)) = pending.first() {
                panic!("{file}:{at}: a docs-test comment must be right before a ``` fence");
            }
            i += 1;
            continue;
        }
        // An opening fence: find its end (a bare ``` at any indentation).
        let indent = line.len() - trimmed.len();
        let lang = trimmed.trim_start_matches('`').trim().to_string();
        let start = i;
        let mut end = i + 1;
        while end < lines.len() && lines[end].trim() != "```" {
            end += 1;
        }
        assert!(end < lines.len(), "{file}:{}: unclosed fence", start + 1);
        let body: Vec<(usize, String)> = (start + 1..end)
            .map(|n| {
                let l = lines[n];
                let cut = l.len() - l.trim_start().len();
                (n + 1, l[cut.min(indent)..].to_string())
            })
            .collect();
        let is_shell = SHELL_LANGS.contains(&lang.as_str());
        let directives = std::mem::take(&mut pending);
        if !is_shell {
            if let Some((at, _)) = directives.first() {
                panic!(
                    "{file}:{at}: a docs-test comment before a ```{lang} block, which is not run"
                );
            }
        } else {
            let mut block = Block {
                line: start + 1,
                commands: commands(&body),
                skip: None,
                setup: Vec::new(),
            };
            for (at, d) in directives {
                if let Some(rest) = d.strip_prefix("skip") {
                    let reason = rest.trim();
                    assert!(
                        reason.starts_with('(') && reason.ends_with(')') && reason.len() > 2,
                        "{file}:{at}: write the reason: <!-- docs-test: skip (why) -->"
                    );
                    block.skip = Some(reason[1..reason.len() - 1].to_string());
                } else if let Some(cmd) = d.strip_prefix("setup:") {
                    block.setup.push(cmd.trim().to_string());
                } else {
                    panic!(
                        "{file}:{at}: unknown docs-test directive {d:?} (skip (why) or setup: CMD)"
                    );
                }
            }
            out.push(block);
        }
        i = end + 1;
    }
    if let Some((at, _)) = pending.first() {
        panic!("{file}:{at}: a docs-test comment must be right before a ``` fence");
    }
    out
}

/// The command lines of a block: all of it, or with `$ ` prompts, the prompted lines
/// and their `\` continuations.
fn commands(body: &[(usize, String)]) -> Vec<(usize, String)> {
    if !body.iter().any(|(_, l)| l.starts_with("$ ")) {
        return body.to_vec();
    }
    let mut out = Vec::new();
    let mut continued = false;
    for (n, l) in body {
        if let Some(cmd) = l.strip_prefix("$ ") {
            out.push((*n, cmd.to_string()));
            continued = cmd.trim_end().ends_with('\\');
        } else if continued {
            out.push((*n, l.clone()));
            continued = l.trim_end().ends_with('\\');
        }
    }
    out
}

/// The trailing `#` comment of a shell line (outside quotes), if any.
fn comment(line: &str) -> Option<&str> {
    let (mut single, mut double) = (false, false);
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single && prev != '\\' => double = !double,
            '#' if !single && !double && prev.is_whitespace() => return Some(&line[i + 1..]),
            _ => {}
        }
        prev = c;
    }
    None
}

/// The exit status a line's comment promises (`... exit 75 ...`), if it promises one.
fn expected_exit(line: &str) -> Option<i32> {
    let c = comment(line)?;
    let words: Vec<&str> = c
        .split(|ch: char| !ch.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    words
        .windows(2)
        .find(|w| w[0] == "exit")
        .and_then(|w| w[1].parse().ok())
}

/// The bash script for one block: setup, then the commands, with promised exit
/// statuses checked and the failing command named on stderr.
fn script(file: &str, block: &Block) -> String {
    let mut s = String::new();
    let trap = "trap 'echo \"docs-test: failed (exit $?): $BASH_COMMAND\" >&2' ERR\n";
    s.push_str(trap);
    for cmd in &block.setup {
        s.push_str(cmd);
        s.push('\n');
    }
    let mut continued = false;
    for (n, line) in &block.commands {
        let expect = if continued { None } else { expected_exit(line) };
        continued = line.trim_end().ends_with('\\');
        match expect {
            None => {
                s.push_str(line);
                s.push('\n');
            }
            Some(code) => {
                s.push_str("trap - ERR\nset +e\n");
                s.push_str(line);
                s.push_str("\n__docs_rc=$?\nset -e\n");
                s.push_str(&format!(
                    "if [ \"$__docs_rc\" != {code} ]; then echo \"docs-test: {file}:{n}: the doc says exit {code}, it exited $__docs_rc\" >&2; exit 1; fi\n"
                ));
                s.push_str(trap);
            }
        }
    }
    s
}

/// An environment variable a user's shell would not have: the caller's avfs settings,
/// and what cargo sets for the test binary it runs.
fn leaks_in(var: &str) -> bool {
    const CARGO_SETS: &[&str] = &[
        "CARGO",
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_MANIFEST_LINKS",
        "CARGO_CRATE_NAME",
        "CARGO_BIN_NAME",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
        "CARGO_RUSTC_CURRENT_DIR",
        "OUT_DIR",
    ];
    var.starts_with("AVFS_")
        || var.starts_with("CARGO_PKG_")
        || var.starts_with("CARGO_BIN_EXE_")
        || var.starts_with("CARGO_CFG_")
        || CARGO_SETS.contains(&var)
}

/// `CARGO_HOME` and `RUSTUP_HOME` as the caller has them: with a fresh `$HOME` cargo
/// would otherwise look for its registry under it, and every dependency's source path,
/// so its fingerprint, would change: README's `cargo run` would rebuild the whole tree
/// (and leave the shared target directory rebuilt for another home).
fn toolchain_env() -> Vec<(&'static str, PathBuf)> {
    let real_home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    [("CARGO_HOME", ".cargo"), ("RUSTUP_HOME", ".rustup")]
        .into_iter()
        .filter_map(|(var, dir)| match std::env::var_os(var) {
            Some(v) => Some((var, PathBuf::from(v))),
            None => real_home
                .join(dir)
                .is_dir()
                .then(|| (var, real_home.join(dir))),
        })
        .collect()
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A fresh world for one doc file: a working directory, `$HOME`, and a bin directory
/// holding only `avfs`.
struct World {
    dir: tempfile::TempDir,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        for d in ["home", "work", "bin"] {
            std::fs::create_dir(dir.path().join(d)).unwrap();
        }
        // A link to the built binary's inode, not its path: README's `cargo run` links a
        // new target/release/avfs in place while other examples may be running.
        let bin = dir.path().join("bin/avfs");
        if std::fs::hard_link(env!("CARGO_BIN_EXE_avfs"), &bin).is_err() {
            std::fs::copy(env!("CARGO_BIN_EXE_avfs"), &bin).unwrap();
        }
        // No `~/.cargo` or `~/.rustup` in the fresh home: the examples that build find
        // the toolchain through `CARGO_HOME` and `RUSTUP_HOME` (`toolchain_env`), which
        // the sandbox shows as it shows `~/.cargo` and `~/.rustup`.
        World { dir }
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        // Nothing of the caller's avfs setup leaks in, nor what cargo sets for a test
        // process: a nested `cargo run` (README's first command) that sees
        // CARGO_MANIFEST_DIR would record it in build scripts' fingerprints (ring tracks
        // it) and leave the target directory dirty for every later plain build.
        for (k, _) in std::env::vars_os() {
            if leaks_in(&k.to_string_lossy()) {
                c.env_remove(k);
            }
        }
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut paths = vec![self.dir.path().join("bin")];
        paths.extend(std::env::split_paths(&path));
        c.env("PATH", std::env::join_paths(paths).unwrap())
            .env("HOME", self.home())
            .env("AVFS_HOME", self.home().join(".avfs"))
            .env("AVFS_DOCS_CHECKOUT", repo())
            .envs(toolchain_env())
            .env_remove("NO_COLOR")
            .current_dir(self.work())
            .stdin(Stdio::null());
        c
    }

    /// Unmounts whatever the examples left mounted, so the temp dir can go.
    fn unmount_all(&self) {
        let Ok(out) = self.command("avfs").args(["--json", "mounts"]).output() else {
            return;
        };
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&out.stdout) else {
            return;
        };
        for m in v["mounts"].as_array().into_iter().flatten() {
            if let Some(mp) = m["mountpoint"].as_str() {
                let _ = self.command("avfs").args(["unmount", mp]).output();
            }
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.unmount_all();
    }
}

struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    timed_out: bool,
}

/// Runs a script in its own process group, killed as a whole on timeout.
fn run(world: &World, script_path: &Path) -> Outcome {
    use std::os::unix::process::CommandExt;
    let mut child = world
        .command("bash")
        .args(["-euo", "pipefail"])
        .arg(script_path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let started = Instant::now();
    let mut timed_out = false;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if started.elapsed() > BLOCK_TIMEOUT {
            timed_out = true;
            // SAFETY: a plain kill(2) of the group this test started.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // A background process the block left holding the pipes must not hang the test.
    let grab = |t: std::thread::JoinHandle<Vec<u8>>| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !t.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if t.is_finished() {
            String::from_utf8_lossy(&t.join().unwrap()).into_owned()
        } else {
            "(output still held open by a background process)".to_string()
        }
    };
    Outcome {
        code: status.code(),
        stdout: grab(t_out),
        stderr: grab(t_err),
        timed_out,
    }
}

fn tail(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut cut = s.len() - max;
    while !s.is_char_boundary(cut) {
        cut += 1;
    }
    &s[cut..]
}

/// Runs every shell block of one doc file in order; fails naming the first block that
/// fails, with its text and its output.
fn check_doc(rel: &str) {
    if !fuse::fuse_or_skip(&format!("docs_examples {rel}")) {
        return;
    }
    let text = std::fs::read_to_string(repo().join(rel)).unwrap();
    let blocks = blocks(rel, &text);
    let world = World::new();
    let (mut ran, mut skipped) = (0, 0);
    for (k, block) in blocks.iter().enumerate() {
        if let Some(why) = &block.skip {
            skipped += 1;
            eprintln!("docs-test: {rel}:{}: skipped ({why})", block.line);
            continue;
        }
        let path = world.dir.path().join(format!("block-{k}.sh"));
        std::fs::write(&path, script(rel, block)).unwrap();
        let t = Instant::now();
        let out = run(&world, &path);
        ran += 1;
        if out.timed_out || out.code != Some(0) {
            let shown: String = block
                .commands
                .iter()
                .map(|(n, l)| format!("  {n:>4} | {l}\n"))
                .collect();
            let setup: String = block
                .setup
                .iter()
                .map(|l| format!("  setup: {l}\n"))
                .collect();
            panic!(
                "{rel}:{}: the example fails ({})\n{setup}{shown}--- stdout (tail) ---\n{}\n--- stderr (tail) ---\n{}",
                block.line,
                if out.timed_out {
                    format!("killed after {}s", BLOCK_TIMEOUT.as_secs())
                } else {
                    format!("exit {:?}", out.code)
                },
                tail(&out.stdout, 2000),
                tail(&out.stderr, 4000)
            );
        }
        eprintln!(
            "docs-test: {rel}:{}: ok ({:.1}s)",
            block.line,
            t.elapsed().as_secs_f64()
        );
    }
    eprintln!("docs-test: {rel}: {ran} blocks ran, {skipped} skipped");
    assert!(
        ran + skipped == blocks.len(),
        "{rel}: every block either runs or is skipped"
    );
}

#[test]
fn readme() {
    check_doc("README.md");
}

#[test]
fn docs_readme() {
    check_doc("docs/README.md");
}

#[test]
fn docs_benchmarks() {
    check_doc("docs/benchmarks.md");
}

#[test]
fn docs_cli() {
    check_doc("docs/cli.md");
}

#[test]
fn docs_services() {
    check_doc("docs/services.md");
}

#[test]
fn docs_exec() {
    check_doc("docs/exec.md");
}

#[test]
fn docs_integrations() {
    check_doc("docs/integrations.md");
}

#[test]
fn docs_integrity() {
    check_doc("docs/integrity.md");
}

#[test]
fn docs_json() {
    check_doc("docs/json.md");
}

#[test]
fn docs_reliability() {
    check_doc("docs/reliability.md");
}

#[test]
fn docs_remote() {
    check_doc("docs/remote.md");
}

#[test]
fn docs_storage() {
    check_doc("docs/storage.md");
}

/// A new doc file must get its own test above, or its examples would never run.
#[test]
fn every_doc_file_has_a_test() {
    let this = std::fs::read_to_string(repo().join("tests/docs_examples.rs")).unwrap();
    let mut files = vec!["README.md".to_string()];
    for e in std::fs::read_dir(repo().join("docs")).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") {
            files.push(format!("docs/{name}"));
        }
    }
    for f in files {
        assert!(
            this.contains(&format!("check_doc(\"{f}\")")),
            "{f} has no test in tests/docs_examples.rs: add `#[test] fn ...() {{ check_doc(\"{f}\"); }}`"
        );
    }
}

/// The extraction itself: prompts, output lines, directives and promised exit codes.
#[test]
fn extraction_follows_the_markers() {
    let md = "text\n\n<!-- docs-test: skip (needs a network host) -->\n```sh\ncurl x\n```\n\n```json\n{}\n```\n<!-- docs-test: setup: mkdir -p p -->\n```console\n$ avfs ls /   # exit 0\nshown output\n$ echo a \\\n  b\n```\n";
    let b = blocks("t.md", md);
    assert_eq!(b.len(), 2);
    assert_eq!(b[0].skip.as_deref(), Some("needs a network host"));
    assert_eq!(b[1].setup, vec!["mkdir -p p".to_string()]);
    let cmds: Vec<&str> = b[1].commands.iter().map(|(_, l)| l.as_str()).collect();
    assert_eq!(cmds, vec!["avfs ls /   # exit 0", "echo a \\", "  b"]);
    assert_eq!(
        expected_exit("avfs exec -- curl x   # networked: exit 75, id"),
        Some(75)
    );
    assert_eq!(expected_exit("echo 'no # exit 3 here'"), None);
    assert_eq!(expected_exit("echo exit 3"), None);
    let r = std::panic::catch_unwind(|| {
        blocks("t.md", "<!-- docs-test: skip (x) -->\n\n```sh\nls\n```\n")
    });
    assert!(r.is_err(), "a directive separated from its fence must fail");
    let r =
        std::panic::catch_unwind(|| blocks("t.md", "<!-- docs-test: skip -->\n```sh\nls\n```\n"));
    assert!(r.is_err(), "a skip without a reason must fail");
}
