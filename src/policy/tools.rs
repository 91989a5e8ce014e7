//! What common tools do through their arguments: `find -exec/-delete/-fprint`, `sort -o`,
//! `uniq IN OUT`, `xxd IN OUT`, `tar --to-command`, `ln -s /`, `chmod u+s`, `hostname
//! NAME`, `date -s`, patterns that are not paths. Wrappers, shells and interpreters are in
//! `wrappers`, sed and awk in `scripts`, git in `git`.

use super::analysis::{Analysis, option_value};
use super::decision::Category;
use super::grammar::Stdin;
use super::rules::basename;
use super::{git, payloads, scripts, wrappers};

/// Every analysis that applies to `argv`.
pub fn analyze(argv: &[String], stdin: &Stdin) -> Analysis {
    if let Some(a) = wrappers::analyze(argv, stdin) {
        return a;
    }
    let base = basename(&argv[0]);
    match base {
        "git" => git::analyze(argv),
        "sed" | "gsed" => scripts::sed(argv),
        "awk" | "gawk" | "mawk" | "nawk" | "busybox-awk" => scripts::awk(argv),
        "find" => find(argv),
        "jq" | "yq" | "gojq" | "jaq" => json_query(argv),
        "sqlite3" => payloads::sqlite(argv),
        "vim" | "vi" | "nvim" | "view" | "ex" | "vimdiff" => vim(argv),
        "echo" | "printf" | "expr" | "test" | "[" | "[[" | "seq" | "yes" | "export" | "local"
        | "declare" | "typeset" | "readonly" | "read" | "let" | "getopts" => {
            // Words to print or compare, not files (`export` values are checked as
            // environment).
            Analysis {
                not_paths: (1..argv.len()).collect(),
                ..Default::default()
            }
        }
        "grep" | "egrep" | "fgrep" | "rg" | "ag" | "ack" | "zgrep" => pattern_tool(argv),
        "sort" => {
            let mut a = Analysis::default();
            for (k, w) in argv.iter().enumerate().skip(1) {
                if let Some(v) = option_value(w, &['o'], &["output"]) {
                    let f = if v.is_empty() {
                        argv.get(k + 1).cloned()
                    } else {
                        Some(v.to_string())
                    };
                    if let Some(f) = f {
                        a.effect(
                            Category::Mutating,
                            "writes-file",
                            format!("sort writes {f}"),
                        );
                        a.writes.push(f);
                    }
                }
                if w.starts_with("--compress-program") {
                    a.effect(
                        Category::Unknown,
                        "runs-program",
                        format!("sort {w} runs a program"),
                    );
                }
            }
            a
        }
        "uniq" | "xxd" | "iconv" => {
            // `uniq IN OUT`, `xxd IN OUT`, `xxd -r`: the second operand is written.
            let mut a = Analysis::default();
            let operands: Vec<&String> = argv[1..].iter().filter(|w| !w.starts_with('-')).collect();
            let reverse = base == "xxd" && argv.iter().any(|w| w == "-r" || w == "-revert");
            if operands.len() >= 2 && base != "iconv" {
                let out = operands[1].clone();
                a.effect(
                    Category::Mutating,
                    "writes-file",
                    format!("{base} writes {out}"),
                );
                a.writes.push(out);
            } else if reverse {
                a.effect(
                    Category::Mutating,
                    "writes-file",
                    "xxd -r writes binary output",
                );
            }
            if base == "iconv" {
                for (k, w) in argv.iter().enumerate() {
                    if let Some(v) = option_value(w, &['o'], &["output"]) {
                        let f = if v.is_empty() {
                            argv.get(k + 1).cloned()
                        } else {
                            Some(v.to_string())
                        };
                        a.writes.extend(f.clone());
                        if let Some(f) = f {
                            a.effect(
                                Category::Mutating,
                                "writes-file",
                                format!("iconv writes {f}"),
                            );
                        }
                    }
                }
            }
            a
        }
        "tar" | "bsdtar" => payloads::tar(argv),
        "zip" | "unzip" => {
            let mut a = Analysis::default();
            if argv
                .iter()
                .any(|w| w == "-TT" || w.starts_with("--unzip-command"))
            {
                a.effect(Category::Unknown, "runs-program", "zip -TT runs a program");
            }
            a
        }
        "rsync" => {
            let mut a = Analysis::default();
            if argv
                .iter()
                .any(|w| w == "-e" || w.starts_with("--rsh") || w.starts_with("--rsync-path"))
            {
                a.effect(Category::Unknown, "runs-program", "rsync -e runs a program");
            }
            a
        }
        "less" | "more" | "most" | "man" => {
            let mut a = Analysis::default();
            if argv
                .iter()
                .any(|w| w.starts_with('+') && (w.contains('!') || w.contains('|')))
                || (base == "man"
                    && argv.iter().any(|w| {
                        w == "-P"
                            || w == "-H"
                            || w.starts_with("--pager")
                            || w.starts_with("--html")
                    }))
            {
                a.effect(
                    Category::Unknown,
                    "runs-program",
                    format!("{base} is told to run a program"),
                );
            }
            a
        }
        "hostname" | "domainname" => {
            let mut a = Analysis::default();
            let sets = argv[1..].iter().any(|w| {
                !w.starts_with('-') || matches!(w.as_str(), "-F" | "--file" | "-b" | "--boot")
            });
            if sets {
                a.effect(
                    Category::HostEscapeRisk,
                    "host-control",
                    "sets the host name",
                );
            }
            a
        }
        "date" => {
            let mut a = Analysis::default();
            let sets = argv[1..].iter().any(|w| {
                w == "-s"
                    || w.starts_with("--set")
                    || (w.starts_with("-s") && !w.starts_with("--"))
                    || (!w.starts_with('-')
                        && !w.starts_with('+')
                        && w.chars().all(|c| c.is_ascii_digit() || c == '.'))
            });
            if sets {
                a.effect(
                    Category::HostEscapeRisk,
                    "host-control",
                    "sets the host clock",
                );
            }
            a.not_paths = (1..argv.len())
                .filter(|k| argv[*k].starts_with('+'))
                .collect();
            a
        }
        "ln" => link(argv),
        "chmod" => {
            let mut a = Analysis::default();
            if let Some(mode) = argv[1..]
                .iter()
                .find(|w| !w.starts_with('-') || w.starts_with("-s") || w.contains('+'))
                && (sets_id_bits(mode) || mode.contains('$'))
            {
                a.effect(
                    Category::Unknown,
                    "setuid",
                    format!("chmod {mode} sets the setuid or setgid bit"),
                );
            }
            a
        }
        "chown" | "chgrp" => {
            let mut a = Analysis::default();
            if let Some(owner) = argv[1..].iter().find(|w| !w.starts_with('-'))
                && (owner.starts_with("root")
                    || owner.starts_with("0:")
                    || owner == "0"
                    || owner.starts_with(":0")
                    || owner.starts_with(":root"))
            {
                a.effect(
                    Category::Unknown,
                    "chown-root",
                    format!("{base} gives files to root"),
                );
            }
            a
        }
        "source" | "." => {
            let mut a = Analysis::default();
            match argv.get(1) {
                // A virtual environment's activation only sets variables.
                Some(f) if f.ends_with("bin/activate") => {}
                Some(f) => {
                    a.transparent = true;
                    a.effect(
                        Category::Unknown,
                        "workspace-script",
                        format!("runs the script {f} in this shell: no rule knows what it does"),
                    );
                }
                None => {}
            }
            a
        }
        "npm" | "yarn" | "pnpm" | "bun" | "pip" | "pip3" | "uv" | "poetry" | "cargo" | "go"
        | "gem" | "bundle" | "apt" | "apt-get" | "brew" => package_manager(argv),
        "make" | "gmake" => payloads::make(argv, stdin),
        "install" | "ginstall" => {
            let mut a = Analysis::default();
            for (i, w) in argv.iter().enumerate() {
                let mode = match option_value(w, &['m'], &["mode"]) {
                    Some("") => argv.get(i + 1).map(String::as_str),
                    v => v,
                };
                if let Some(m) = mode
                    && (sets_id_bits(m) || m.contains('$'))
                {
                    a.effect(
                        Category::Unknown,
                        "setuid",
                        format!("install -m {m} may set the setuid or setgid bit"),
                    );
                }
            }
            a
        }
        _ => Analysis::default(),
    }
}

/// True if a chmod mode sets the setuid or setgid bit (`u+s`, `4755`, `g=s`, ...).
pub(super) fn sets_id_bits(mode: &str) -> bool {
    if mode.bytes().all(|b| b.is_ascii_digit()) {
        return mode.len() >= 4
            && mode
                .as_bytes()
                .get(mode.len() - 4)
                .is_some_and(|d| (d - b'0') & 0o6 != 0);
    }
    mode.split(',').any(|clause| {
        clause
            .split_once(['+', '='])
            .is_some_and(|(_, perms)| perms.contains('s'))
    })
}

/// `grep PATTERN FILE...`: the pattern (first operand unless `-e`/`-f` gave one) is not
/// a path.
fn pattern_tool(argv: &[String]) -> Analysis {
    let mut a = Analysis::default();
    let mut explicit = false;
    let mut i = 1;
    while i < argv.len() {
        let w = argv[i].as_str();
        if w == "--" {
            i += 1;
            break;
        }
        if !w.starts_with('-') || w == "-" {
            break;
        }
        if let Some(v) = option_value(w, &['e'], &["regexp"]) {
            explicit = true;
            a.not_paths.push(if v.is_empty() { i + 1 } else { i });
            i += if v.is_empty() { 2 } else { 1 };
            continue;
        }
        if let Some(v) = option_value(w, &['f'], &["file"]) {
            explicit = true;
            i += if v.is_empty() { 2 } else { 1 };
            continue;
        }
        if let Some(v) = option_value(
            w,
            &['A', 'B', 'C', 'm', 'g', 't', 'T', 'M', 'j', 'd', 'D'],
            &[
                "after-context",
                "before-context",
                "context",
                "max-count",
                "glob",
                "type",
                "type-not",
                "include",
                "exclude",
                "exclude-dir",
                "max-columns",
                "threads",
                "label",
                "color",
                "colour",
                "replace",
                "sort",
                "sortr",
                "max-depth",
            ],
        ) {
            a.not_paths.push(if v.is_empty() && !w.starts_with("--") {
                i + 1
            } else {
                i
            });
            i += if v.is_empty() && !w.starts_with("--") {
                2
            } else {
                1
            };
            continue;
        }
        if w == "--pre" || w.starts_with("--pre=") {
            a.effect(
                Category::Unknown,
                "runs-program",
                "rg --pre runs a program on every file",
            );
        }
        i += 1;
    }
    if !explicit && i < argv.len() {
        a.not_paths.push(i);
    }
    a
}

/// `find`: `-exec`/`-ok` run programs, `-delete` removes, `-fprint`/`-fls` write.
fn find(argv: &[String]) -> Analysis {
    let mut a = Analysis::default();
    let mut i = 1;
    while i < argv.len() {
        let w = argv[i].as_str();
        match w {
            "-exec" | "-execdir" | "-ok" | "-okdir" => {
                let start = i + 1;
                let mut end = start;
                while end < argv.len() && argv[end] != ";" && argv[end] != "+" {
                    end += 1;
                }
                if end > start {
                    a.inner.push(argv[start..end].to_vec());
                }
                a.not_paths.extend(start..end.min(argv.len()));
                i = end + 1;
                continue;
            }
            "-delete" => a.effect(
                Category::Destructive,
                "find-delete",
                "deletes what it finds",
            ),
            "-fprint" | "-fprint0" | "-fls" | "-fprintf" => {
                if let Some(f) = argv.get(i + 1) {
                    a.effect(
                        Category::Mutating,
                        "find-writes",
                        format!("find {w} writes {f}"),
                    );
                    a.writes.push(f.clone());
                }
                if w == "-fprintf" {
                    a.not_paths.push(i + 2);
                }
            }
            "-name" | "-iname" | "-path" | "-ipath" | "-regex" | "-iregex" | "-wholename"
            | "-iwholename" | "-lname" | "-ilname" | "-printf" | "-regextype" | "-type"
            | "-user" | "-group" | "-perm" | "-size" | "-newermt" => a.not_paths.push(i + 1),
            _ => {}
        }
        i += 1;
    }
    a
}

/// `ln -s TARGET LINK`: a symbolic link to a host path (or one the line does not give)
/// lets anything run in the workspace reach the host through it.
fn link(argv: &[String]) -> Analysis {
    let mut a = Analysis::default();
    let mut symbolic = false;
    let mut target_dir = false;
    let mut operands: Vec<usize> = Vec::new();
    let mut i = 1;
    while i < argv.len() {
        let w = argv[i].as_str();
        if w == "--symbolic" {
            symbolic = true;
        } else if w == "-t" || w == "--target-directory" {
            target_dir = true;
            i += 1;
        } else if w.starts_with("--target-directory=") {
            target_dir = true;
        } else if w.starts_with('-') && !w.starts_with("--") && w.len() > 1 {
            symbolic |= w.contains('s');
            if w.contains('t') {
                target_dir = true;
                if w.ends_with('t') {
                    i += 1;
                }
            }
        } else if !w.starts_with('-') {
            operands.push(i);
        }
        i += 1;
    }
    if !symbolic {
        return a;
    }
    // Relative targets resolve from the link's directory: `-t DIR`, or the last
    // operand's parent.
    let (targets, link_dir): (&[usize], String) = if target_dir {
        let dir = argv
            .iter()
            .enumerate()
            .find_map(|(k, w)| {
                if w == "-t" || w == "--target-directory" {
                    argv.get(k + 1).cloned()
                } else {
                    w.strip_prefix("--target-directory=").map(String::from)
                }
            })
            .unwrap_or_default();
        (&operands, dir)
    } else if operands.len() == 1 {
        (&operands, String::new())
    } else {
        let last = argv[*operands.last().unwrap()].trim_end_matches('/');
        let parent = last
            .rsplit_once('/')
            .map(|(p, _)| p.to_string())
            .unwrap_or_default();
        (&operands[..operands.len() - 1], parent)
    };
    for &t in targets {
        let target = &argv[t];
        a.not_paths.push(t);
        if target.starts_with('$') {
            a.effect(
                Category::Unknown,
                "symlink-unknown",
                format!("links to {target}, a target the line does not give"),
            );
        } else if target.starts_with('/') || super::paths::names_home(target) {
            a.effect(
                Category::HostEscapeRisk,
                "symlink-outside",
                format!(
                    "links to {target}: anything run in the workspace would follow it to the host"
                ),
            );
        } else if link_dir.is_empty() {
            a.reads.push(target.clone());
        } else {
            a.reads.push(format!("{link_dir}/{target}"));
        }
    }
    a
}

/// Package managers take options before their subcommand (`npm --prefix x install`,
/// `cargo +nightly install`, `pip -q install`): rules are matched with and without them.
fn package_manager(argv: &[String]) -> Analysis {
    let mut a = Analysis::default();
    let lead = argv[1..]
        .iter()
        .take_while(|w| w.starts_with('-') || w.starts_with('+'))
        .count();
    if lead == 0 {
        return a;
    }
    let mut plain = vec![argv[0].clone()];
    plain.extend(argv[1 + lead..].iter().cloned());
    a.rule_argv.push(argv.to_vec());
    a.rule_argv.push(plain);
    // Each leading option may also take the next word as its value.
    for skip in 1..=lead {
        let from = 1 + lead + skip;
        if from <= argv.len() {
            let mut v = vec![argv[0].clone()];
            v.extend(argv[from.min(argv.len())..].iter().cloned());
            a.rule_argv.push(v);
        }
    }
    a
}

/// `jq FILTER [FILES]`: the filter (and `--arg NAME VALUE` words) are not paths; the
/// files are (`jq . ~/.docker/config.json` reads a secret).
fn json_query(argv: &[String]) -> Analysis {
    let mut a = Analysis::default();
    let mut filter_seen = false;
    // After `--args`/`--jsonargs`, positional words past the filter are values.
    let mut values_follow = false;
    let mut i = 1;
    while i < argv.len() {
        let w = argv[i].as_str();
        match w {
            "--arg" | "--argjson" => {
                a.not_paths.extend([i + 1, i + 2]);
                i += 2;
            }
            "--slurpfile" | "--rawfile" => {
                a.not_paths.push(i + 1);
                i += 2;
            }
            "--indent" | "--tab-width" => {
                a.not_paths.push(i + 1);
                i += 1;
            }
            "-f" | "--from-file" => filter_seen = true,
            "--args" | "--jsonargs" => values_follow = true,
            _ if w.starts_with('-') && w.len() > 1 => {}
            _ if !filter_seen => {
                filter_seen = true;
                a.not_paths.push(i);
            }
            _ if values_follow => a.not_paths.push(i),
            _ => {}
        }
        i += 1;
    }
    a
}

/// vim and friends: `-c CMD`, `+CMD`, `--cmd CMD` and `-S FILE` run Ex commands, which can
/// run programs (`:!curl ...`) and write anywhere. `+N` (go to line N) does not.
fn vim(argv: &[String]) -> Analysis {
    let mut a = Analysis::default();
    for (i, w) in argv.iter().enumerate().skip(1) {
        let ex_command =
            matches!(
                w.as_str(),
                "-c" | "--cmd" | "-S" | "-s" | "-u" | "-W" | "-w"
            ) || (w.len() > 1 && w.starts_with('+') && !w[1..].bytes().all(|b| b.is_ascii_digit()));
        if ex_command {
            a.effect(
                Category::Unknown,
                "editor-commands",
                format!(
                    "{} {w} runs editor commands, which can run programs",
                    argv[0]
                ),
            );
            a.not_paths.push(i + 1);
        }
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_bits() {
        assert!(sets_id_bits("4755"));
        assert!(sets_id_bits("u+s"));
        assert!(sets_id_bits("g=rxs"));
        assert!(!sets_id_bits("755"));
        assert!(!sets_id_bits("0755"));
        assert!(!sets_id_bits("+x"));
    }
}
