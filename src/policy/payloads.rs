//! What tools do through the text they are given rather than their options: sqlite3's
//! SQL and dot-commands (files it attaches, reads and writes; programs it runs), make
//! code given on the command line or on standard input, and tar's rewriting of the names
//! in an archive. Files become paths the classifier judges, programs become scripts it
//! reads, and what cannot be read is `unknown`.

use super::analysis::{Analysis, option_value};
use super::decision::Category;
use super::grammar::Stdin;

/// The single-quoted SQL literals in `sql` (`''` is a quote inside one).
fn sql_literals(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\'' {
            continue;
        }
        let mut lit = String::new();
        loop {
            match chars.next() {
                Some('\'') if chars.peek() == Some(&'\'') => {
                    chars.next();
                    lit.push('\'');
                }
                Some('\'') | None => break,
                Some(ch) => lit.push(ch),
            }
        }
        out.push(lit);
    }
    out
}

/// The file an SQLite name or URI opens: `file:/x/y?mode=ro` is `/x/y`.
fn sqlite_file(name: &str) -> String {
    let Some(uri) = name.strip_prefix("file:") else {
        return name.to_string();
    };
    let path = uri.split(['?', '#']).next().unwrap_or("");
    // `file://localhost/x` and `file:///x` name `/x`.
    let path = path
        .strip_prefix("//localhost")
        .or_else(|| path.strip_prefix("//"))
        .unwrap_or(path);
    path.replace("%2f", "/").replace("%2F", "/")
}

/// SQL keywords and functions that open files, with their file as the first literal
/// after them.
const SQL_FILES: &[&str] = &["attach", "vacuum", "readfile(", "writefile(", "fsdir("];

/// Dot-commands whose operands are files.
const DOT_FILES: &[&str] = &[
    ".output", ".once", ".read", ".import", ".backup", ".save", ".restore", ".open", ".clone",
    ".log", ".trace", ".cd",
];

/// Dot-commands and functions that run programs or load code.
const DOT_RUNS: &[&str] = &[".shell", ".system"];
const LOADS: &[&str] = &[".load", "load_extension(", "edit(", ".excel"];

/// `sqlite3 [OPTIONS] DB [SQL...]`: the database (a `file:` URI too) is a path; in the
/// SQL, `ATTACH`, `VACUUM INTO`, `readfile()`, `writefile()` and the file dot-commands
/// name files (judged as paths when they are literals, `unknown` when they are not);
/// `.shell`/`.system` run a shell command (read as a script); extensions are code.
pub fn sqlite(argv: &[String]) -> Analysis {
    let mut a = Analysis::default();
    let mut db_seen = false;
    let mut sql: Vec<String> = Vec::new();
    let mut i = 1;
    while i < argv.len() {
        let w = &argv[i];
        if w == "-cmd" {
            a.not_paths.push(i + 1);
            if let Some(s) = argv.get(i + 1) {
                sql.push(s.clone());
            }
            i += 2;
            continue;
        }
        if w == "-init" {
            a.effect(
                Category::Unknown,
                "sqlite-commands",
                format!("sqlite3 {w} runs commands from a file the policy does not read"),
            );
            i += 1;
            continue;
        }
        if w.starts_with('-') {
            i += 1;
            continue;
        }
        if !db_seen {
            db_seen = true;
            if w.starts_with("file:") {
                a.not_paths.push(i);
                a.writes.push(sqlite_file(w));
            }
        } else {
            // SQL and dot-commands after the database: not paths themselves.
            a.not_paths.push(i);
            sql.push(w.clone());
        }
        i += 1;
    }
    for text in &sql {
        sqlite_text(text, &mut a);
    }
    a
}

fn sqlite_text(text: &str, a: &mut Analysis) {
    for stmt in text.split(['\n', ';']) {
        let trimmed = stmt.trim();
        let lower = trimmed.to_ascii_lowercase();
        let first = lower.split_whitespace().next().unwrap_or("");
        if DOT_RUNS.contains(&first) {
            let cmd = trimmed[first.len()..].trim();
            a.effect(
                Category::Unknown,
                "runs-program",
                format!("sqlite3 {first} runs a program"),
            );
            a.scripts.push(cmd.trim_matches(['\'', '"']).to_string());
            continue;
        }
        if LOADS.iter().any(|l| {
            if l.starts_with('.') {
                first == *l
            } else {
                lower.contains(l)
            }
        }) {
            a.effect(
                Category::Unknown,
                "runs-program",
                "sqlite3 loads code or runs a program (an extension, an editor)",
            );
        }
        if DOT_FILES.contains(&first) {
            for arg in trimmed.split_whitespace().skip(1) {
                if arg.starts_with('-') {
                    if matches!(arg, "-e" | "-x") {
                        a.effect(
                            Category::Unknown,
                            "runs-program",
                            format!("sqlite3 {first} {arg} opens a program"),
                        );
                    }
                    continue;
                }
                let f = arg.trim_matches(['\'', '"']);
                if let Some(cmd) = f.strip_prefix('|') {
                    a.effect(
                        Category::Unknown,
                        "runs-program",
                        format!("sqlite3 {first} {f} pipes to a program"),
                    );
                    a.scripts.push(cmd.to_string());
                } else {
                    a.writes.push(sqlite_file(f));
                }
            }
            continue;
        }
        let opens = SQL_FILES.iter().any(|k| {
            if k.ends_with('(') {
                lower.contains(k)
            } else {
                lower
                    .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                    .any(|t| t == *k)
            }
        });
        if !opens {
            continue;
        }
        let literals = sql_literals(trimmed);
        let computed = [
            "||", "char(", "printf(", "format(", "x'", "replace(", "substr(",
        ]
        .iter()
        .any(|c| lower.contains(c));
        if literals.is_empty() || computed {
            a.effect(
                Category::Unknown,
                "sqlite-files",
                format!("sqlite3 opens a file the SQL computes: {trimmed}"),
            );
        }
        for l in literals {
            a.writes.push(sqlite_file(&l));
        }
    }
}

/// The `$(shell ...)` calls in make code.
fn make_shell_calls(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for opener in ["$(shell ", "${shell "] {
        let close = if opener.starts_with("$(") { ')' } else { '}' };
        let open = if close == ')' { '(' } else { '{' };
        let mut rest = code;
        while let Some(at) = rest.find(opener) {
            let body = &rest[at + opener.len()..];
            let mut depth = 1;
            let mut end = body.len();
            for (k, c) in body.char_indices() {
                if c == open {
                    depth += 1;
                } else if c == close {
                    depth -= 1;
                    if depth == 0 {
                        end = k;
                        break;
                    }
                }
            }
            out.push(body[..end].to_string());
            rest = &body[end..];
        }
    }
    out
}

/// Make code the line gives: recipes (tab-indented lines) and `$(shell ...)` calls are
/// shell scripts.
fn make_code(code: &str, a: &mut Analysis) {
    for l in code.lines() {
        if let Some(recipe) = l.strip_prefix('\t') {
            a.scripts
                .push(recipe.trim_start_matches(['@', '-', '+']).to_string());
        }
    }
    a.scripts.extend(make_shell_calls(code));
}

/// `make`: `SHELL=` changes the program that runs recipes; `--eval CODE` and a makefile
/// read from standard input (`-f -`, `-f /dev/stdin`) are make code the line gives, read
/// for the commands they run; from an input the line does not give, they are unknown.
pub fn make(argv: &[String], stdin: &Stdin) -> Analysis {
    let mut a = Analysis::default();
    let mut i = 1;
    while i < argv.len() {
        let w = &argv[i];
        if let Some((k, _)) = w.split_once('=')
            && matches!(k, "SHELL" | "MAKESHELL" | ".SHELLFLAGS")
        {
            a.effect(
                Category::Unknown,
                "runs-program",
                format!("make {w} changes the shell that runs recipes"),
            );
        }
        if let Some(v) = option_value(w, &['E'], &["eval"]) {
            let (code, next) = if v.is_empty() {
                (argv.get(i + 1).cloned().unwrap_or_default(), i + 1)
            } else {
                (v.to_string(), i)
            };
            a.not_paths.push(next);
            a.effect(
                Category::Unknown,
                "make-eval",
                "make --eval runs make code given on the line",
            );
            make_code(&code, &mut a);
            i = next + 1;
            continue;
        }
        if let Some(v) = option_value(w, &['f'], &["file", "makefile"]) {
            let (file, next) = if v.is_empty() {
                (argv.get(i + 1).cloned().unwrap_or_default(), i + 1)
            } else {
                (v.to_string(), i)
            };
            if matches!(
                file.as_str(),
                "-" | "/dev/stdin" | "/proc/self/fd/0" | "/dev/fd/0"
            ) {
                match stdin {
                    Stdin::Text(t) => make_code(t, &mut a),
                    _ => a.effect(
                        Category::Unknown,
                        "make-stdin",
                        "make reads a makefile from an input the line does not give",
                    ),
                }
            }
            i = next + 1;
            continue;
        }
        i += 1;
    }
    a
}

/// `tar`: options that run programs (read as scripts where they name one), and the
/// options that let an archive's names land anywhere (`-P`, `--transform`).
pub fn tar(argv: &[String]) -> Analysis {
    const RUNS: &[&str] = &[
        "--to-command",
        "--use-compress-program",
        "--info-script",
        "--new-volume-script",
        "--checkpoint-action",
        "--rsh-command",
        "--rmt-command",
    ];
    let mut a = Analysis::default();
    for (i, w) in argv.iter().enumerate().skip(1) {
        if let Some(opt) = RUNS.iter().find(|o| w.starts_with(*o)) {
            a.effect(
                Category::Unknown,
                "runs-program",
                format!("tar {opt} runs a program"),
            );
            let value = match w.split_once('=') {
                Some((_, v)) => Some(v.to_string()),
                None => argv.get(i + 1).cloned(),
            };
            if let Some(v) = value {
                let v = v.strip_prefix("exec=").unwrap_or(&v).to_string();
                a.scripts.push(v);
                a.not_paths.push(i + 1);
            }
        } else if w == "-I" || w == "-F" {
            a.effect(
                Category::Unknown,
                "runs-program",
                format!("tar {w} runs a program"),
            );
            if let Some(v) = argv.get(i + 1) {
                a.scripts.push(v.clone());
                a.not_paths.push(i + 1);
            }
        } else if w.starts_with("--transform") || w.starts_with("--xform") {
            a.effect(
                Category::Unknown,
                "tar-names",
                "tar --transform rewrites the names in the archive (to `../x` or `/x` too)",
            );
            a.not_paths.push(i);
            if !w.contains('=') {
                a.not_paths.push(i + 1);
            }
        } else if w == "--absolute-names"
            || (w.starts_with('-') && !w.starts_with("--") && w.contains('P'))
            || (i == 1 && !w.starts_with('-') && w.contains('P') && w.len() <= 8)
        {
            a.effect(
                Category::Unknown,
                "tar-names",
                "tar -P keeps absolute names and `..` in the archive: it writes where they say",
            );
        }
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn sqlite_names_its_files_and_programs() {
        let a = sqlite(&s(&[
            "sqlite3",
            "x.db",
            "ATTACH '/h/v.avfs' AS v; select 1",
        ]));
        assert_eq!(a.writes, ["/h/v.avfs"]);
        let a = sqlite(&s(&[
            "sqlite3",
            "x.db",
            "vacuum into 'file:/tmp/y?mode=rwc'",
        ]));
        assert_eq!(a.writes, ["/tmp/y"]);
        let a = sqlite(&s(&["sqlite3", "x.db", "select readfile('~/.ssh/id')"]));
        assert_eq!(a.writes, ["~/.ssh/id"]);
        let a = sqlite(&s(&["sqlite3", "x.db", ".shell curl x"]));
        assert_eq!(a.scripts, ["curl x"]);
        let a = sqlite(&s(&["sqlite3", "file:/etc/x?mode=ro", ".tables"]));
        assert_eq!(a.writes, ["/etc/x"]);
        let a = sqlite(&s(&["sqlite3", "x.db", "attach (select 'a'||'b') as v"]));
        assert_eq!(a.effects[0].rule, "sqlite-files");
        let a = sqlite(&s(&["sqlite3", "x.db", "attach x as v"]));
        assert_eq!(a.effects[0].rule, "sqlite-files");
        let a = sqlite(&s(&["sqlite3", "app.db", "select u.login from users u"]));
        assert!(a.effects.is_empty() && a.writes.is_empty());
    }

    #[test]
    fn make_code_on_the_line_is_read() {
        let a = make(
            &s(&["make", "--eval", "x:=$(shell curl y)"]),
            &Stdin::Inherited,
        );
        assert_eq!(a.scripts, ["curl y"]);
        let a = make(
            &s(&["make", "-f", "/dev/stdin"]),
            &Stdin::Text("all:\n\t@curl z\n".into()),
        );
        assert_eq!(a.scripts, ["curl z"]);
        let a = make(&s(&["make", "-f", "-"]), &Stdin::Unknown);
        assert_eq!(a.effects[0].rule, "make-stdin");
        assert!(
            make(&s(&["make", "-j4", "test"]), &Stdin::Inherited)
                .effects
                .is_empty()
        );
    }

    #[test]
    fn tar_names_and_programs() {
        assert_eq!(
            tar(&s(&["tar", "-xPf", "a.tar"])).effects[0].rule,
            "tar-names"
        );
        assert_eq!(
            tar(&s(&["tar", "-xf", "a.tar", "--transform", "s,^,../,"])).effects[0].rule,
            "tar-names"
        );
        let a = tar(&s(&["tar", "--to-command=curl x", "-xf", "a.tar"]));
        assert_eq!(a.scripts, ["curl x"]);
        assert!(tar(&s(&["tar", "-czf", "b.tgz", "src"])).effects.is_empty());
    }
}
