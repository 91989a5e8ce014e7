//! Here-documents and the shell parser's end of input.
//!
//! brush-parser 0.4.0's tokenizer looped forever, allocating, when a line ended while an
//! empty here-document tag was pending (`cat <<'' `, `$(<<  `): one odd line took
//! `avfs exec`'s decision to 24 GB and an OOM kill (see `src/policy/shell_input.rs`).
//! These lines are decided by the real binary under an address-space limit, so a
//! regression fails here (the process aborts) instead of taking the machine's memory;
//! ordinary here-documents must still be read as before.

mod common;

use std::os::unix::process::CommandExt;

use agentvfs::policy::Policy;
use agentvfs::policy::grammar::{self, Stdin};
use common::{Env, Run};

/// Address space the binary may use while deciding one line: far above what a decision
/// needs, far below what the runaway reached.
const LIMIT_BYTES: u64 = 1 << 30;

/// Lines that ran away before the fix, and are not understood (unterminated): the
/// policy must give them the decision of a line it cannot parse.
const BROKEN: &[&str] = &[
    // The line the hostile-input test drew (seed 0xA5F5, chunk inputs on the shared
    // stream), and its minimised form: blanks after `<<` inside `$(` become the tag.
    "$( $((1+2)) <<  sh |exec while fi xargsX=1 >\u{2799}x( ..  =for while \\; / ",
    "$(<<  ",
    "$(<<\t ",
    "$(<<-  ",
    "$(cat <<  EOF ",
    "echo \"$(cat <<  ",
    // A tag taken from inside an arithmetic expansion (brush's PR #1270 example).
    "<<E$[\t\t",
    // Found by a random search of here-document fragments.
    "() \t(E|<<-$(  ",
    // A lone backslash at the end, here in a comment: a line continuation once a newline
    // follows, so it is refused rather than given one.
    "cat <<'' #\\",
    "cat <<'' \\",
];

/// Lines that ran away before the fix and that the shell does run: `cat` with an empty
/// here-document (bash warns that it ends at end of file).
const EMPTY_TAG: &[&str] = &["cat <<'' ", "cat <<\"\" ", "cat <<-'' ", "cat <<''"];

fn check(env: &Env, line: &str) -> Run {
    let mut c = env.cmd(["--json", "--vault", "w", "policy", "check", "--shell", line]);
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        c.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: LIMIT_BYTES,
                rlim_max: LIMIT_BYTES,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = c.output().expect("avfs runs");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn decided(env: &Env, line: &str) -> (String, String) {
    let r = check(env, line);
    assert_eq!(
        r.code, 0,
        "{line:?}: exit {} (an abort is the parser running away)\n{}",
        r.code, r.stderr
    );
    assert!(!r.stderr.contains("panicked"), "{line:?}: {}", r.stderr);
    let j = r.json();
    (
        j["action"].as_str().expect("an action").to_string(),
        j["matched_rule"].as_str().unwrap_or_default().to_string(),
    )
}

#[test]
fn lines_that_ran_the_parser_away_are_decided_in_bounded_memory() {
    let env = Env::new();
    env.ok(&["vault", "create", "w"]);
    for line in BROKEN {
        let (action, rule) = decided(&env, line);
        assert_eq!(action, "require_approval", "{line:?}");
        assert_eq!(rule, "unparseable", "{line:?}");
    }
    // The same lines one level down, as the script of `sh -c` / `bash -c`.
    for line in ["$(<<  ", "cat <<'' #\\", "<<E$[\t\t"] {
        let quoted = format!("'{}'", line.replace('\'', "'\\''"));
        let (action, _) = decided(&env, &format!("sh -c {quoted}"));
        assert_ne!(action, "allow", "sh -c {quoted}");
    }
    for line in EMPTY_TAG {
        let (action, rule) = decided(&env, line);
        assert_eq!(
            (action.as_str(), rule.as_str()),
            ("allow", "read-only-tool"),
            "{line:?}"
        );
    }
    // An empty tag ends the here-document at the first empty line: the script a shell
    // reads from it is judged.
    let (action, _) = decided(&env, "bash <<''\nrm -rf /\n\nls");
    assert_ne!(action, "allow");
}

#[test]
fn lines_that_ran_the_parser_away_lower_in_process() {
    // Safe in-process only because the binary test above bounds the same lines first
    // (the test harness runs both; a regression there aborts under its limit).
    for line in BROKEN {
        assert!(grammar::parse(line).is_err(), "{line:?} parsed");
    }
    for line in EMPTY_TAG {
        let l = grammar::parse(line).unwrap_or_else(|e| panic!("{line:?}: {e:?}"));
        assert_eq!(l.commands.len(), 1, "{line:?}");
        assert_eq!(l.commands[0].argv, ["cat"], "{line:?}");
        assert_eq!(l.commands[0].stdin, Stdin::Text(String::new()), "{line:?}");
    }
}

fn one(line: &str) -> grammar::SimpleCommand {
    let l = grammar::parse(line).unwrap_or_else(|e| panic!("{line:?}: {e:?}"));
    assert!(l.problems.is_empty(), "{line:?}: {:?}", l.problems);
    assert_eq!(l.commands.len(), 1, "{line:?}: {:?}", l.commands);
    l.commands.into_iter().next().unwrap()
}

fn stdin_text(c: &grammar::SimpleCommand) -> &str {
    match &c.stdin {
        Stdin::Text(t) => t,
        other => panic!("stdin is {other:?}"),
    }
}

#[test]
fn ordinary_here_documents_read_as_before() {
    let c = one("cat <<EOF\nhello\nworld\nEOF");
    assert_eq!(c.argv, ["cat"]);
    assert_eq!(stdin_text(&c), "hello\nworld\n");
    // With the newline after the end tag, and quoted tags.
    for line in [
        "cat <<EOF\nhello\nworld\nEOF\n",
        "cat <<'EOF'\nhello\nworld\nEOF",
        "cat <<\"EOF\"\nhello\nworld\nEOF\n",
        "cat <<-EOF\n\thello\n\tworld\n\tEOF",
    ] {
        assert_eq!(stdin_text(&one(line)), "hello\nworld\n", "{line:?}");
    }
    // A body that is not a tag, and quotes in it, stay text.
    let c = one("tee out.txt <<'END'\nit's \"quoted\" $HOME `x`\n<<''\nEND");
    assert_eq!(c.argv, ["tee", "out.txt"]);
    assert_eq!(stdin_text(&c), "it's \"quoted\" $HOME `x`\n<<''\n");
    // Two here-documents, then a command after them.
    let l = grammar::parse("cat <<A; cat <<B\none\nA\ntwo\nB\nls -l").unwrap();
    let argv: Vec<_> = l.commands.iter().map(|c| c.argv.join(" ")).collect();
    assert_eq!(argv, ["cat", "cat", "ls -l"]);
    // In a command substitution; the command inside is seen.
    let l = grammar::parse("x=$(python3 - <<'PY'\nprint(1)\nPY\n)\necho \"$x\"").unwrap();
    let progs: Vec<_> = l.commands.iter().filter_map(|c| c.argv.first()).collect();
    assert!(progs.contains(&&"python3".to_string()), "{:?}", l.commands);
    // `<<` that is no here-document: a here-string, a shift, quoted text.
    assert_eq!(stdin_text(&one("cat <<< 'some text'")), "some text");
    assert_eq!(one("echo $((1<<4)) $((x << 2))").argv[0], "echo");
    assert_eq!(
        one("grep -n '<<' notes.txt").argv,
        ["grep", "-n", "<<", "notes.txt"]
    );
    assert_eq!(
        one("grep -c '<<<<<<< HEAD' a.rs").argv,
        ["grep", "-c", "<<<<<<< HEAD", "a.rs"]
    );
    // An unterminated here-document is still not understood.
    assert!(grammar::parse("cat <<EOF\nhello").is_err());
    assert!(grammar::parse("cat <<EOF").is_err());
    // A parser message points into the line, not past the newline the parser is given.
    let e = grammar::parse("echo $(ls").unwrap_err();
    assert!(e.0.contains("near the end of the line"), "{e:?}");
    let e = grammar::parse("echo 'a\nb").unwrap_err();
    assert!(!e.0.contains("line 3"), "{e:?}");
}

#[test]
fn long_build_lines_and_trailing_backslashes() {
    // A long compiler line is read whole.
    let mut line = String::from("gcc -O2 -Wall");
    for i in 0..400 {
        line.push_str(&format!(" -Iinclude/dir{i} -DFLAG_{i}=1 src/file_{i}.c"));
    }
    line.push_str(" -o build/app");
    let c = one(&line);
    assert_eq!(c.argv.len(), 3 + 400 * 3 + 2);
    // An escaped backslash at the end is a backslash; a lone one escapes nothing.
    assert_eq!(one("echo foo\\\\").argv, ["echo", "foo\\"]);
    assert_eq!(one("printf '%s\\\\'").argv, ["printf", "%s\\\\"]);
    assert!(grammar::parse("echo foo\\").is_err());
    assert!(grammar::parse("ls # trailing \\").is_err());
    // A line continuation inside the line still joins.
    assert_eq!(one("ls \\\n-l").argv, ["ls", "-l"]);
    // The policy's decision for such lines: the one for a line it cannot parse.
    let d = Policy::builtin().decide_shell("echo foo\\", &[], None);
    assert_eq!(d.matched_rule, "unparseable");
}
