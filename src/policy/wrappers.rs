//! Programs that run other programs or scripts: wrappers (`env`, `timeout`, `xargs`,
//! `sudo`, ...), shells (`sh -c`, a script on stdin), interpreters with inline code
//! (`python3 -c`, `node -e`) and the shell's own `eval`, `trap`, `alias`. Each one hands
//! what it runs back to the classifier, which unwraps to any depth up to a limit.

use super::analysis::{Analysis, option_value};
use super::decision::Category;
use super::grammar::Stdin;

/// Skips a wrapper's options. `with_value` lists the short letters and long names that
/// take a value, `flags` those that do not. Returns the index of the first operand, or
/// the option no list knows (the caller fails closed on it).
fn skip_options(
    rest: &[String],
    short_value: &[char],
    long_value: &[&str],
    short_flags: &[char],
    long_flags: &[&str],
) -> Result<usize, String> {
    let mut i = 0;
    while i < rest.len() {
        let a = rest[i].as_str();
        if a == "--" {
            return Ok(i + 1);
        }
        if !a.starts_with('-') || a == "-" {
            return Ok(i);
        }
        if let Some(long) = a.strip_prefix("--") {
            let name = long.split('=').next().unwrap_or(long);
            if long_value.contains(&name) {
                i += if long.contains('=') { 1 } else { 2 };
                continue;
            }
            if long_flags.contains(&name) {
                i += 1;
                continue;
            }
            return Err(a.to_string());
        }
        // A group of short options: flags, then at most one that takes a value.
        let mut consumed_next = false;
        for (k, c) in a[1..].char_indices() {
            if short_value.contains(&c) {
                if k + c.len_utf8() == a.len() - 1 {
                    consumed_next = true;
                }
                break;
            }
            if !short_flags.contains(&c) && !c.is_ascii_digit() {
                return Err(a.to_string());
            }
        }
        i += if consumed_next { 2 } else { 1 };
    }
    Ok(i)
}

fn unwrap_after(a: &mut Analysis, rest: &[String], start: Result<usize, String>, who: &str) {
    match start {
        Ok(i) if i < rest.len() => a.inner.push(rest[i..].to_vec()),
        Ok(_) => {}
        Err(opt) => a.effect(
            Category::Unknown,
            "wrapper-option",
            format!("{who}: option {opt} is not understood, so what it runs is not known"),
        ),
    }
}

/// `env [OPTION]... [NAME=VALUE]... [COMMAND [ARG]...]`
fn env(rest: &[String]) -> Analysis {
    let mut a = Analysis::transparent();
    let mut i = 0;
    while i < rest.len() {
        let w = rest[i].as_str();
        if w == "--" {
            i += 1;
            break;
        }
        if w == "-"
            || matches!(
                w,
                "-i" | "--ignore-environment" | "-0" | "--null" | "-v" | "--debug"
            )
        {
            i += 1;
            continue;
        }
        if let Some(v) = option_value(w, &['u'], &["unset"]) {
            i += if v.is_empty() { 2 } else { 1 };
            continue;
        }
        if let Some(v) = option_value(w, &['C'], &["chdir"]) {
            let dir = if v.is_empty() {
                rest.get(i + 1).cloned()
            } else {
                Some(v.to_string())
            };
            if let Some(d) = dir {
                a.reads.push(d.clone());
                a.chdir = Some(d);
            }
            i += if v.is_empty() { 2 } else { 1 };
            continue;
        }
        if let Some(v) = option_value(w, &['S'], &["split-string"]) {
            // `env -S 'prog args'`: the string is split into words like a shell line.
            let (s, next) = if v.is_empty() {
                (rest.get(i + 1).cloned().unwrap_or_default(), i + 2)
            } else {
                (v.to_string(), i + 1)
            };
            let mut script = s;
            for more in rest.iter().skip(next) {
                script.push(' ');
                script.push_str(&quote(more));
            }
            a.scripts.push(script);
            return a;
        }
        if w.starts_with("--default-signal")
            || w.starts_with("--ignore-signal")
            || w.starts_with("--block-signal")
            || w == "--list-signal-handling"
        {
            i += 1;
            continue;
        }
        if w.starts_with('-') {
            a.effect(
                Category::Unknown,
                "wrapper-option",
                format!("env: option {w} is not understood, so what it runs is not known"),
            );
            return a;
        }
        break;
    }
    while i < rest.len() {
        match rest[i].split_once('=') {
            Some((k, v)) if !k.is_empty() && !k.contains('/') => {
                a.env.push((k.to_string(), v.to_string()));
                i += 1;
            }
            _ => break,
        }
    }
    if i < rest.len() {
        a.inner.push(rest[i..].to_vec());
    } else {
        // Only prints the environment.
        a.transparent = false;
    }
    a
}

/// Quotes a word for a shell line.
pub fn quote(w: &str) -> String {
    if !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        return w.to_string();
    }
    format!("'{}'", w.replace('\'', "'\\''"))
}

fn xargs(rest: &[String]) -> Analysis {
    let mut a = Analysis::transparent();
    let mut i = 0;
    while i < rest.len() {
        let w = rest[i].as_str();
        if w == "--" {
            i += 1;
            break;
        }
        if !w.starts_with('-') {
            break;
        }
        if let Some(v) = option_value(w, &['a'], &["arg-file"]) {
            let f = if v.is_empty() {
                rest.get(i + 1).cloned()
            } else {
                Some(v.to_string())
            };
            a.reads.extend(f);
            i += if v.is_empty() { 2 } else { 1 };
            continue;
        }
        if let Some(v) = option_value(
            w,
            &['d', 'E', 'I', 'L', 'n', 'P', 's'],
            &[
                "delimiter",
                "eof",
                "replace",
                "max-lines",
                "max-args",
                "max-procs",
                "max-chars",
                "process-slot-var",
            ],
        ) {
            i += if v.is_empty() && !w.starts_with("--") {
                2
            } else {
                1
            };
            continue;
        }
        if w.starts_with("-e")
            || w.starts_with("-i")
            || w.starts_with("-l")
            || w.starts_with("--eof")
            || w.starts_with("--replace")
            || w.starts_with("--max-lines")
        {
            // Optional-value forms: the value is attached or absent.
            i += 1;
            continue;
        }
        if matches!(
            w,
            "-0" | "--null"
                | "-r"
                | "--no-run-if-empty"
                | "-t"
                | "--verbose"
                | "-p"
                | "--interactive"
                | "-x"
                | "--exit"
                | "--open-tty"
                | "-o"
                | "--show-limits"
        ) {
            i += 1;
            continue;
        }
        a.effect(
            Category::Unknown,
            "wrapper-option",
            format!("xargs: option {w} is not understood, so what it runs is not known"),
        );
        return a;
    }
    if i < rest.len() {
        a.inner.push(rest[i..].to_vec());
    } else {
        a.inner.push(vec!["echo".into()]);
    }
    a
}

/// The shells, and what they run: `-c SCRIPT`, a script file, or their standard input.
fn shell(argv: &[String], stdin: &Stdin) -> Analysis {
    let rest = &argv[1..];
    let mut a = Analysis::default();
    let mut c_mode = false;
    let mut read_stdin = false;
    let mut i = 0;
    while i < rest.len() {
        let w = rest[i].as_str();
        if w == "--" || w == "-" {
            i += 1;
            break;
        }
        if let Some(long) = w.strip_prefix("--") {
            if matches!(long, "rcfile" | "init-file") {
                if let Some(f) = rest.get(i + 1) {
                    a.reads.push(f.clone());
                    a.effect(
                        Category::Mutating,
                        "workspace-script",
                        format!("runs the startup file {f}: the policy cannot see what it does"),
                    );
                }
                i += 2;
                continue;
            }
            i += 1;
            continue;
        }
        if !(w.starts_with('-') || w.starts_with('+')) || w.len() < 2 {
            break;
        }
        let mut takes_next = 0;
        for c in w[1..].chars() {
            match c {
                'c' => c_mode = true,
                's' => read_stdin = true,
                'o' | 'O' => takes_next += 1,
                _ => {}
            }
        }
        i += 1 + takes_next;
    }
    let operands = &rest[i.min(rest.len())..];
    if c_mode {
        match operands.first() {
            Some(script) => {
                a.transparent = true;
                a.scripts.push(script.clone());
                a.not_paths.push(argv.len() - operands.len());
            }
            None => a.effect(
                Category::Unknown,
                "unparseable",
                "-c without a script".to_string(),
            ),
        }
        return a;
    }
    if !read_stdin && let Some(file) = operands.first() {
        // `sh ./x.sh` is `./x.sh`: a program from the workspace no rule knows.
        a.transparent = true;
        a.effect(
            Category::Unknown,
            "workspace-script",
            format!("runs the script {file}: no rule knows what it does"),
        );
        return a;
    }
    match stdin {
        Stdin::Text(t) => {
            a.transparent = true;
            a.scripts.push(t.clone());
        }
        Stdin::Unknown => a.effect(
            Category::Unknown,
            "script-from-input",
            "runs a script it reads from its input, which the line does not show",
        ),
        Stdin::Inherited => {}
    }
    a
}

/// Interpreters: inline code is scanned (`code`), `-m MODULE` is classified as the
/// module's own command (`python3 -m pip install` = `pip install`), a script file runs
/// workspace code.
fn interpreter(argv: &[String], stdin: &Stdin) -> Analysis {
    let base = super::rules::basename(&argv[0]);
    let family = if base.starts_with("python") || base.starts_with("pypy") {
        "python"
    } else if matches!(base, "node" | "nodejs" | "deno" | "bun") {
        "node"
    } else {
        base
    };
    let (code_opts, value_opts): (&[&str], &[&str]) = match family {
        "python" => (&["-c"], &["-W", "-X", "--check-hash-based-pycs"]),
        "node" => (
            &["-e", "--eval", "-p", "--print"],
            &[
                "-r",
                "--require",
                "--import",
                "--loader",
                "--experimental-loader",
                "--env-file",
                "--input-type",
                "--conditions",
                "-C",
            ],
        ),
        "ruby" => (&["-e"], &["-r", "-I", "-C", "-E"]),
        "perl" => (&["-e", "-E"], &["-M", "-m", "-I", "-x"]),
        "php" => (&["-r"], &["-d", "-c", "-z"]),
        "lua" | "luajit" => (&["-e"], &["-l"]),
        _ => (&[], &[]),
    };
    let mut a = Analysis::default();
    let mut i = 1;
    let mut saw_code = false;
    while i < argv.len() {
        let w = argv[i].as_str();
        if w == "--" {
            i += 1;
            break;
        }
        if let Some(opt) = code_opts
            .iter()
            .find(|o| w == **o || (o.len() == 2 && w.starts_with(**o) && w.len() > 2))
        {
            let code = if w == *opt {
                argv.get(i + 1).cloned()
            } else {
                Some(w[opt.len()..].to_string())
            };
            if let Some(c) = code {
                a.code.push(c);
                a.not_paths.push(if w == *opt { i + 1 } else { i });
            }
            saw_code = true;
            i += if w == *opt { 2 } else { 1 };
            continue;
        }
        if let Some(eq) = w
            .strip_prefix("--eval=")
            .or_else(|| w.strip_prefix("--print="))
        {
            a.code.push(eq.to_string());
            a.not_paths.push(i);
            saw_code = true;
            i += 1;
            continue;
        }
        if family == "python" && (w == "-m" || (w.starts_with("-m") && w.len() > 2)) {
            let (module, next) = if w == "-m" {
                (argv.get(i + 1).cloned(), i + 2)
            } else {
                (Some(w[2..].to_string()), i + 1)
            };
            if let Some(m) = module {
                let mut as_cmd = vec![m.replace('_', "-")];
                as_cmd.extend(argv.iter().skip(next).cloned());
                a.rule_argv.push(as_cmd);
            }
            return a;
        }
        if family == "node" && matches!(w, "run" | "x" | "eval") && i == 1 {
            // `deno run`, `bun x`, `deno eval CODE`
            if w == "eval" {
                a.code.extend(argv.get(2).cloned());
                return a;
            }
            i += 1;
            continue;
        }
        if value_opts.contains(&w) {
            i += 2;
            continue;
        }
        if w.starts_with('-') {
            i += 1;
            continue;
        }
        break;
    }
    if saw_code {
        return a;
    }
    if i < argv.len() && argv[i] != "-" {
        // A script file: the rule's own category (runs code from the workspace).
        return a;
    }
    if let Stdin::Text(t) = stdin {
        a.code.push(t.clone());
    } else if *stdin == Stdin::Unknown {
        a.effect(
            Category::Unknown,
            "script-from-input",
            "runs code it reads from its input, which the line does not show",
        );
    }
    a
}

/// Analyzes the programs of this module; `None` for any other program.
pub fn analyze(argv: &[String], stdin: &Stdin) -> Option<Analysis> {
    let base = super::rules::basename(&argv[0]);
    let rest = &argv[1..];
    let a = match base {
        "env" => env(rest),
        "xargs" => {
            // Words fed on standard input by the line become arguments.
            let mut a = xargs(rest);
            if let Stdin::Text(t) = stdin {
                let words: Vec<String> = t.split_whitespace().map(str::to_string).collect();
                for inner in a.inner.iter_mut() {
                    inner.extend(words.iter().cloned());
                }
            }
            a
        }
        "nohup" | "setsid" | "chronic" | "unbuffer" | "catchsegv" => {
            let mut a = Analysis::transparent();
            let start = skip_options(
                rest,
                &[],
                &[],
                &['f', 'w', 'c', 'p'],
                &["fork", "wait", "ctty"],
            );
            unwrap_after(&mut a, rest, start, base);
            if base == "setsid" {
                // A new session: the process is out of the run's process group.
                a.effect(
                    Category::Unknown,
                    "detaches",
                    "setsid starts a process that can outlive the command",
                );
            }
            a
        }
        "nice" => {
            let mut a = Analysis::transparent();
            let start = skip_options(rest, &['n'], &["adjustment"], &[], &[]);
            unwrap_after(&mut a, rest, start, base);
            if a.inner.is_empty() && a.effects.is_empty() {
                a.transparent = false;
            }
            a
        }
        "ionice" => {
            let mut a = Analysis::transparent();
            let start = skip_options(
                rest,
                &['c', 'n'],
                &["class", "classdata"],
                &['t'],
                &["ignore"],
            );
            unwrap_after(&mut a, rest, start, base);
            a
        }
        "stdbuf" => {
            let mut a = Analysis::transparent();
            let start = skip_options(
                rest,
                &['i', 'o', 'e'],
                &["input", "output", "error"],
                &[],
                &[],
            );
            unwrap_after(&mut a, rest, start, base);
            a
        }
        "timeout" => {
            let mut a = Analysis::transparent();
            match skip_options(
                rest,
                &['s', 'k'],
                &["signal", "kill-after"],
                &['v'],
                &["preserve-status", "foreground", "verbose"],
            ) {
                // The first operand is the duration.
                Ok(i) => unwrap_after(&mut a, rest, Ok(i + 1), base),
                Err(e) => unwrap_after(&mut a, rest, Err(e), base),
            }
            a
        }
        "time" => {
            let mut a = Analysis::transparent();
            let start = skip_options(
                rest,
                &['o', 'f'],
                &["output", "format"],
                &['p', 'v', 'a', 'q'],
                &["portability", "verbose", "append", "quiet"],
            );
            for (k, w) in rest.iter().enumerate() {
                if let Some(v) = option_value(w, &['o'], &["output"]) {
                    let f = if v.is_empty() {
                        rest.get(k + 1).cloned()
                    } else {
                        Some(v.to_string())
                    };
                    a.writes.extend(f);
                }
                if !w.starts_with('-') {
                    break;
                }
            }
            unwrap_after(&mut a, rest, start, base);
            a
        }
        "command" => {
            let mut a = Analysis::transparent();
            if rest.first().is_some_and(|f| f == "-v" || f == "-V") {
                a.effect(Category::ReadOnly, "read-only-tool", "looks up a command");
                return Some(a);
            }
            let start = skip_options(rest, &[], &[], &['p'], &[]);
            unwrap_after(&mut a, rest, start, base);
            a
        }
        "exec" => {
            let mut a = Analysis::transparent();
            let start = skip_options(rest, &['a'], &[], &['c', 'l'], &[]);
            unwrap_after(&mut a, rest, start, base);
            a
        }
        "builtin" => {
            let mut a = Analysis::transparent();
            unwrap_after(&mut a, rest, Ok(0), base);
            a
        }
        "sudo" | "doas" => {
            // Not transparent: its own rule (another user on the host) stays.
            let mut a = Analysis::default();
            let start = skip_options(
                rest,
                &['u', 'g', 'C', 'h', 'p', 'U', 'r', 't', 'T', 'D', 'R'],
                &[
                    "user",
                    "group",
                    "close-from",
                    "host",
                    "prompt",
                    "other-user",
                    "role",
                    "type",
                    "command-timeout",
                    "chdir",
                    "chroot",
                ],
                &[
                    'A', 'b', 'E', 'e', 'H', 'i', 'K', 'k', 'l', 'n', 'P', 'S', 's', 'V', 'v', 'B',
                    'N',
                ],
                &[
                    "askpass",
                    "background",
                    "preserve-env",
                    "edit",
                    "set-home",
                    "login",
                    "remove-timestamp",
                    "reset-timestamp",
                    "list",
                    "non-interactive",
                    "preserve-groups",
                    "stdin",
                    "shell",
                    "version",
                    "validate",
                    "bell",
                    "no-update",
                ],
            );
            unwrap_after(&mut a, rest, start, base);
            a
        }
        "flock" => {
            let mut a = Analysis::default();
            let mut i = 0;
            while i < rest.len() && rest[i].starts_with('-') {
                let w = rest[i].as_str();
                if w == "-c" || w == "--command" {
                    a.scripts.extend(rest.get(i + 1).cloned());
                    a.not_paths.push(i + 2);
                    i += 2;
                    continue;
                }
                i += if matches!(w, "-w" | "-E" | "--timeout" | "--conflict-exit-code") {
                    2
                } else {
                    1
                };
            }
            if let Some(f) = rest.get(i) {
                a.writes.push(f.clone());
            }
            if i + 1 < rest.len() && a.scripts.is_empty() {
                a.inner.push(rest[i + 1..].to_vec());
            }
            a
        }
        "watch" => {
            let mut a = Analysis::transparent();
            match skip_options(
                rest,
                &['n', 'd', 'q'],
                &["interval", "differences", "equexit"],
                &['t', 'b', 'e', 'g', 'c', 'x', 'p', 'w', 'r', 'C'],
                &[
                    "no-title", "beep", "errexit", "chgexit", "color", "exec", "precise",
                    "no-wrap", "no-rerun", "no-color",
                ],
            ) {
                Ok(i) if i < rest.len() => {
                    let script: Vec<String> = rest[i..].iter().map(|w| w.to_string()).collect();
                    a.scripts.push(script.join(" "));
                }
                Ok(_) => {}
                Err(e) => unwrap_after(&mut a, rest, Err(e), base),
            }
            a
        }
        "strace" | "ltrace" | "valgrind" | "perf" | "gdb" => {
            let mut a = Analysis::default();
            let mut i = 0;
            while i < rest.len() && rest[i].starts_with('-') {
                let w = rest[i].as_str();
                if let Some(v) = option_value(w, &['o'], &["output", "log-file"]) {
                    let f = if v.is_empty() {
                        rest.get(i + 1).cloned()
                    } else {
                        Some(v.to_string())
                    };
                    a.writes.extend(f);
                    i += if v.is_empty() { 2 } else { 1 };
                    continue;
                }
                i += if matches!(
                    w,
                    "-e" | "-p" | "-s" | "-E" | "-u" | "-a" | "-P" | "-b" | "-S" | "-X"
                ) {
                    2
                } else {
                    1
                };
            }
            if base == "perf" || base == "gdb" {
                a.effect(
                    Category::Unknown,
                    "debugger",
                    format!("{base} can run and change other programs"),
                );
            }
            if i < rest.len() {
                a.inner.push(rest[i..].to_vec());
            }
            a
        }
        "busybox" => {
            let mut a = Analysis::transparent();
            unwrap_after(&mut a, rest, Ok(0), base);
            a
        }
        "sh" | "bash" | "dash" | "zsh" | "ksh" | "ash" | "mksh" | "rbash" | "fish" => {
            shell(argv, stdin)
        }
        "eval" => {
            let mut a = Analysis::transparent();
            a.scripts.push(rest.join(" "));
            a.not_paths.extend(1..argv.len());
            a
        }
        "trap" => {
            let mut a = Analysis::default();
            if let Some(first) = rest.first()
                && !first.starts_with('-')
                && rest.len() >= 2
            {
                a.scripts.push(first.clone());
                a.not_paths.push(1);
            }
            a
        }
        "alias" => {
            let mut a = Analysis::default();
            for (k, w) in rest.iter().enumerate() {
                if let Some((_, v)) = w.split_once('=') {
                    a.scripts.push(v.to_string());
                    a.not_paths.push(k + 1);
                }
            }
            a
        }
        b if b.starts_with("python")
            || b.starts_with("pypy")
            || matches!(
                b,
                "node" | "nodejs" | "deno" | "bun" | "ruby" | "perl" | "php" | "lua" | "luajit"
            ) =>
        {
            interpreter(argv, stdin)
        }
        _ => return None,
    };
    Some(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    #[test]
    fn wrappers_hand_back_what_they_run() {
        let a = analyze(&v("env -i -C/tmp A=1 curl x"), &Stdin::Inherited).unwrap();
        assert_eq!(a.inner, [v("curl x")]);
        assert_eq!(a.chdir.as_deref(), Some("/tmp"));
        assert_eq!(a.env, [("A".to_string(), "1".to_string())]);
        let a = analyze(&v("timeout -s KILL 10 sh -c ls"), &Stdin::Inherited).unwrap();
        assert_eq!(a.inner, [v("sh -c ls")]);
        let a = analyze(&v("bash -o posix -c ls"), &Stdin::Inherited).unwrap();
        assert_eq!(a.scripts, ["ls"]);
        let a = analyze(&v("bash +x -ec ls"), &Stdin::Inherited).unwrap();
        assert_eq!(a.scripts, ["ls"]);
        let a = analyze(&v("sh"), &Stdin::Text("curl x".into())).unwrap();
        assert_eq!(a.scripts, ["curl x"]);
        let a = analyze(&v("python3 -m pip install x"), &Stdin::Inherited).unwrap();
        assert_eq!(a.rule_argv, [v("pip install x")]);
        let a = analyze(&v("xargs -a/etc/passwd -n1 rm"), &Stdin::Inherited).unwrap();
        assert_eq!(a.reads, ["/etc/passwd"]);
        assert_eq!(a.inner, [v("rm")]);
        let a = analyze(&v("env --frobnicate curl"), &Stdin::Inherited).unwrap();
        assert_eq!(a.effects[0].category, Category::Unknown);
    }
}
