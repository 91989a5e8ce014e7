//! git: global options (`-C`, `-c key=value`, `--git-dir`), configuration keys that make
//! git run a program (`core.fsmonitor`, `diff.external`, `alias.x=!cmd`, ...), and the
//! subcommand options that write files or run programs (`--output=`, `grep -O`,
//! `rebase --exec`). The subcommand itself is classified by the rules.

use super::analysis::Analysis;
use super::decision::Category;

/// Configuration keys that change nothing but output and metadata.
const SAFE_KEY_PREFIXES: &[&str] = &[
    "color.",
    "user.",
    "author.",
    "committer.",
    "advice.",
    "init.defaultbranch",
    "core.quotepath",
    "core.autocrlf",
    "core.safecrlf",
    "core.filemode",
    "core.ignorecase",
    "core.abbrev",
    "core.whitespace",
    "core.eol",
    "core.precomposeunicode",
    "commit.gpgsign",
    "tag.gpgsign",
    "safe.directory",
    "log.",
    "diff.renames",
    "diff.algorithm",
    "diff.noprefix",
    "diff.mnemonicprefix",
    "diff.indentheuristic",
    "diff.colormoved",
    "merge.conflictstyle",
    "pull.rebase",
    "pull.ff",
    "rebase.autostash",
    "rebase.autosquash",
    "status.",
    "column.",
    "i18n.",
    "gc.auto",
    "maintenance.auto",
    "fetch.prune",
    "push.default",
    "push.autosetupremote",
    "branch.autosetupmerge",
    "feature.",
    "index.",
    "format.pretty",
    "blame.",
    "grep.linenumber",
    "grep.patterntype",
    "grep.extendedregexp",
    "help.autocorrect",
    "checkout.defaultremote",
    "rerere.enabled",
    "commit.verbose",
];

/// Why a configuration key is unsafe to set, or `None` when it is safe.
fn unsafe_key(key: &str) -> Option<&'static str> {
    let k = key.to_ascii_lowercase();
    if SAFE_KEY_PREFIXES.iter().any(|p| k.starts_with(p)) {
        return None;
    }
    if k.starts_with("alias.") {
        return Some("defines a git alias");
    }
    if k.starts_with("url.")
        || k.starts_with("http.")
        || k.starts_with("remote.")
        || k.starts_with("protocol.")
    {
        return Some("changes where git connects");
    }
    Some("may make git run a program (pager, editor, hook, filter, diff or ssh command)")
}

/// The value of a value-taking global option, and how many words it took.
const VALUE_OPTS: &[&str] = &[
    "-C",
    "-c",
    "--git-dir",
    "--work-tree",
    "--namespace",
    "--super-prefix",
    "--config-env",
    "--exec-path",
    "--list-cmds",
    "--attr-source",
];
const FLAG_OPTS: &[&str] = &[
    "-p",
    "-P",
    "--paginate",
    "--no-pager",
    "--bare",
    "--no-replace-objects",
    "--no-lazy-fetch",
    "--literal-pathspecs",
    "--glob-pathspecs",
    "--noglob-pathspecs",
    "--icase-pathspecs",
    "--no-optional-locks",
    "--no-advice",
    "--html-path",
    "--man-path",
    "--info-path",
];

pub fn analyze(argv: &[String]) -> Analysis {
    let mut a = Analysis::default();
    let mut aliases: Vec<(String, String)> = Vec::new();
    let mut i = 1;
    while i < argv.len() {
        let w = argv[i].as_str();
        if FLAG_OPTS.contains(&w) {
            i += 1;
            continue;
        }
        let (opt, value, used) = match w.split_once('=') {
            Some((o, v)) if o.starts_with("--") && VALUE_OPTS.contains(&o) => {
                (o, Some(v.to_string()), 1)
            }
            _ if VALUE_OPTS.contains(&w) => (w, argv.get(i + 1).cloned(), 2),
            _ if w.starts_with('-') && w != "--version" && w != "--help" && w != "-h" => {
                a.effect(
                    Category::Unknown,
                    "git-option",
                    format!("git option {w} is not understood"),
                );
                i += 1;
                continue;
            }
            _ => break,
        };
        i += used;
        let Some(value) = value else { break };
        a.not_paths.push(i - 1);
        match opt {
            "-C" => {
                a.reads.push(value.clone());
                a.chdir = Some(value);
            }
            "--git-dir" | "--work-tree" => a.reads.push(value),
            "--exec-path" => {
                a.reads.push(value.clone());
                a.effect(
                    Category::Unknown,
                    "git-config-command",
                    format!("--exec-path={value} makes git run its commands from there"),
                );
            }
            "-c" | "--config-env" => {
                let (key, v) = value.split_once('=').unwrap_or((&value, ""));
                if let Some(why) = unsafe_key(key) {
                    if opt == "-c" && key.to_ascii_lowercase().starts_with("alias.") {
                        aliases.push((key[6..].to_string(), v.to_string()));
                    } else {
                        a.effect(
                            Category::Unknown,
                            "git-config-command",
                            format!("git {opt} {key}: {why}"),
                        );
                    }
                }
            }
            _ => {}
        }
    }
    let sub: Vec<String> = argv[i.min(argv.len())..].to_vec();
    let mut rule_argv = vec!["git".to_string()];
    rule_argv.extend(sub.iter().cloned());
    // An alias given on the command line: `!cmd` is a shell script, anything else is
    // another git command line.
    if let Some(name) = sub.first()
        && let Some((_, value)) = aliases.iter().find(|(n, _)| n == name)
    {
        if let Some(script) = value.strip_prefix('!') {
            a.scripts.push(script.to_string());
            a.transparent = true;
        } else {
            rule_argv = vec!["git".to_string()];
            rule_argv.extend(value.split_whitespace().map(String::from));
            rule_argv.extend(sub.iter().skip(1).cloned());
        }
    } else if !aliases.is_empty() {
        a.effect(
            Category::Unknown,
            "git-config-command",
            "defines a git alias the command may use",
        );
    }
    subcommand(&mut a, &sub, i);
    a.rule_argv.push(rule_argv);
    a
}

/// Options of subcommands that write files or run programs. `at` is the index of the
/// subcommand in argv.
fn subcommand(a: &mut Analysis, sub: &[String], at: usize) {
    let Some(name) = sub.first().map(String::as_str) else {
        return;
    };
    let args = &sub[1..];
    for (k, w) in args.iter().enumerate() {
        let idx = at + 1 + k;
        if matches!(
            w.as_str(),
            "-m" | "--message" | "--grep" | "--author" | "-S" | "-G" | "--format" | "--pretty"
        ) {
            a.not_paths.push(idx + 1);
        }
        if w.starts_with("--message=")
            || w.starts_with("--grep=")
            || w.starts_with("--format=")
            || w.starts_with("--pretty=")
            || w.starts_with("--author=")
        {
            a.not_paths.push(idx);
        }
        if let Some(f) = w.strip_prefix("--output=") {
            a.writes.push(f.to_string());
            a.effect(
                Category::Mutating,
                "git-writes",
                format!("git {name} writes {f}"),
            );
        } else if (w == "--output"
            || (name == "format-patch" && (w == "-o" || w == "--output-directory")))
            && let Some(f) = args.get(k + 1)
        {
            a.writes.push(f.clone());
            a.effect(
                Category::Mutating,
                "git-writes",
                format!("git {name} writes {f}"),
            );
        }
        if name == "grep" && (w.starts_with("-O") || w.starts_with("--open-files-in-pager")) {
            a.effect(
                Category::Unknown,
                "git-runs-program",
                format!("git grep {w} runs a program on the files found"),
            );
        }
        if name == "filter-branch" && w.ends_with("-filter") && w.starts_with("--") {
            // `--tree-filter 'cmd'`, `--index-filter`, `--msg-filter`, ...: shell
            // commands git runs for every commit.
            a.scripts.extend(args.get(k + 1).cloned());
            a.not_paths.push(idx + 1);
        }
        if matches!(name, "rebase") && (w == "-x" || w == "--exec") {
            a.scripts.extend(args.get(k + 1).cloned());
            a.not_paths.push(idx + 1);
        }
        if let Some(s) = w.strip_prefix("--exec=").filter(|_| name == "rebase") {
            a.scripts.push(s.to_string());
            a.not_paths.push(idx);
        }
        if w.starts_with("--upload-pack")
            || w.starts_with("--receive-pack")
            || w.starts_with("--exec=") && name != "rebase"
        {
            a.effect(
                Category::Unknown,
                "git-runs-program",
                format!("git {name} {w} runs a program"),
            );
        }
        if matches!(name, "log" | "show" | "diff") && w == "--ext-diff" {
            a.effect(
                Category::Unknown,
                "git-runs-program",
                "--ext-diff runs the configured external diff program",
            );
        }
    }
    match name {
        "submodule" if args.first().map(String::as_str) == Some("foreach") => {
            let script: Vec<&str> = args[1..]
                .iter()
                .filter(|w| !w.starts_with("--"))
                .map(String::as_str)
                .collect();
            a.scripts.push(script.join(" "));
        }
        "bisect" if args.first().map(String::as_str) == Some("run") && args.len() > 1 => {
            a.inner.push(args[1..].to_vec());
        }
        "difftool" | "mergetool" | "instaweb" | "web--browse" => a.effect(
            Category::Unknown,
            "git-runs-program",
            format!("git {name} runs an external tool"),
        ),
        "daemon" | "http-backend" | "upload-pack" | "receive-pack" => a.effect(
            Category::Networked,
            "git-network",
            format!("git {name} serves repositories"),
        ),
        "config" => config(a, args),
        _ => {}
    }
}

/// `git config KEY VALUE` persists a key: the unsafe ones make a later git command run
/// a program, so they need approval.
fn config(a: &mut Analysis, args: &[String]) {
    let reading = args.iter().any(|w| {
        w.starts_with("--get")
            || matches!(
                w.as_str(),
                "-l" | "--list" | "--show-origin" | "--show-scope" | "get" | "list"
            )
    });
    if reading {
        return;
    }
    let operands: Vec<&String> = args
        .iter()
        .filter(|w| !w.starts_with('-') && !matches!(w.as_str(), "set" | "unset"))
        .collect();
    if let Some(key) = operands.first()
        && operands.len() >= 2
        && let Some(why) = unsafe_key(key)
    {
        a.effect(
            Category::Unknown,
            "git-config-command",
            format!("git config {key}: {why}"),
        );
    }
    if args.iter().any(|w| w == "--global" || w == "--system") {
        a.effect(
            Category::HostEscapeRisk,
            "git-config-global",
            "changes git configuration outside the workspace",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    #[test]
    fn globals_and_config() {
        let a = analyze(&v("git -C sub -c color.ui=never log"));
        assert!(a.effects.is_empty());
        assert_eq!(a.rule_argv, [v("git log")]);
        assert_eq!(a.chdir.as_deref(), Some("sub"));
        let a = analyze(&v("git -c core.fsmonitor=x status"));
        assert_eq!(a.effects[0].category, Category::Unknown);
        let a = analyze(&["git", "-c", "alias.x=!curl y", "x"].map(String::from));
        assert_eq!(a.scripts, ["curl y"]);
        let a = analyze(&v("git -c alias.p=push p origin"));
        assert_eq!(a.rule_argv, [v("git push origin")]);
        let a = analyze(&v("git diff --no-index --output=/tmp/x a b"));
        assert_eq!(a.writes, ["/tmp/x"]);
        let a = analyze(&v("git grep -Ocurl x"));
        assert_eq!(a.effects[0].rule, "git-runs-program");
    }
}
