//! Little languages that programs run from their arguments: sed scripts (`e`, `w FILE`,
//! `s///e`), awk programs (`system()`, pipes, `print > FILE`) and inline code of other
//! interpreters (`python3 -c`), scanned for what they can do.

use super::analysis::{Analysis, option_value};
use super::decision::Category;

/// What a sed script does besides editing its input.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SedEffects {
    pub executes: bool,
    pub writes: Vec<String>,
    pub reads: Vec<String>,
}

/// Scans a GNU sed script. `Err` when it cannot be read (the caller fails closed).
pub fn sed_script(s: &str) -> Result<SedEffects, String> {
    let c: Vec<char> = s.chars().collect();
    let mut i = 0;
    let mut fx = SedEffects::default();
    let rest_of_line = |i: &mut usize| -> String {
        let start = *i;
        while *i < c.len() && c[*i] != '\n' {
            *i += 1;
        }
        c[start..*i].iter().collect::<String>().trim().to_string()
    };
    // Skips a delimited part (regex or replacement); returns false at the end.
    let delimited = |i: &mut usize, d: char| -> bool {
        while *i < c.len() {
            if c[*i] == '\\' {
                *i += 2;
                continue;
            }
            if c[*i] == d {
                *i += 1;
                return true;
            }
            *i += 1;
        }
        false
    };
    let address = |i: &mut usize| -> Result<(), String> {
        if *i >= c.len() {
            return Ok(());
        }
        match c[*i] {
            '0'..='9' => {
                while *i < c.len() && (c[*i].is_ascii_digit() || c[*i] == '~') {
                    *i += 1;
                }
            }
            '$' => *i += 1,
            '/' => {
                *i += 1;
                if !delimited(i, '/') {
                    return Err("unterminated address".into());
                }
                while *i < c.len() && matches!(c[*i], 'I' | 'M') {
                    *i += 1;
                }
            }
            '\\' if *i + 1 < c.len() => {
                let d = c[*i + 1];
                *i += 2;
                if !delimited(i, d) {
                    return Err("unterminated address".into());
                }
            }
            _ => {}
        }
        Ok(())
    };
    let mut guard = 0;
    while i < c.len() {
        guard += 1;
        if guard > 100_000 {
            return Err("script too long".into());
        }
        while i < c.len() && (c[i].is_whitespace() || c[i] == ';') {
            i += 1;
        }
        if i >= c.len() {
            break;
        }
        address(&mut i)?;
        if i < c.len() && c[i] == ',' {
            i += 1;
            if i < c.len() && (c[i] == '+' || c[i] == '~') {
                i += 1;
            }
            address(&mut i)?;
        }
        while i < c.len() && (c[i] == ' ' || c[i] == '\t' || c[i] == '!') {
            i += 1;
        }
        if i >= c.len() {
            return Err("an address without a command".into());
        }
        let cmd = c[i];
        i += 1;
        match cmd {
            '{' | '}' | '=' | 'd' | 'D' | 'g' | 'G' | 'h' | 'H' | 'n' | 'N' | 'p' | 'P' | 'x'
            | 'z' | 'F' => {}
            '#' | ':' | 'b' | 't' | 'T' | 'v' => {
                while i < c.len() && c[i] != '\n' && (cmd == '#' || cmd == ':' || c[i] != ';') {
                    i += 1;
                }
            }
            'q' | 'Q' | 'l' | 'L' => {
                while i < c.len() && (c[i].is_ascii_digit() || c[i] == ' ') {
                    i += 1;
                }
            }
            'a' | 'i' | 'c' => {
                // Text to the end of the line, continued by a trailing backslash.
                while i < c.len() {
                    if c[i] == '\\' && i + 1 < c.len() {
                        i += 2;
                        continue;
                    }
                    if c[i] == '\n' {
                        break;
                    }
                    i += 1;
                }
            }
            'r' | 'R' => fx.reads.push(rest_of_line(&mut i)),
            'w' | 'W' => fx.writes.push(rest_of_line(&mut i)),
            'e' => {
                fx.executes = true;
                rest_of_line(&mut i);
            }
            's' | 'y' => {
                let Some(&d) = c.get(i) else {
                    return Err(format!("{cmd} without a delimiter"));
                };
                if d == '\n' || d == '\\' {
                    return Err(format!("{cmd} with delimiter {d:?}"));
                }
                i += 1;
                if !delimited(&mut i, d) || !delimited(&mut i, d) {
                    return Err(format!("unterminated {cmd} command"));
                }
                if cmd == 's' {
                    while i < c.len() && !matches!(c[i], ';' | '\n' | '}') {
                        match c[i] {
                            'e' => {
                                fx.executes = true;
                                i += 1;
                            }
                            'w' => {
                                i += 1;
                                fx.writes.push(rest_of_line(&mut i));
                            }
                            ch if ch.is_ascii_alphanumeric() || ch == ' ' => i += 1,
                            ch => return Err(format!("unknown s flag {ch:?}")),
                        }
                    }
                }
            }
            other => return Err(format!("unknown command {other:?}")),
        }
    }
    Ok(fx)
}

/// `sed`: in-place editing, the script's `e`/`w`/`r`, and which words are not paths.
pub fn sed(argv: &[String]) -> Analysis {
    let mut a = Analysis::default();
    let mut scripts: Vec<String> = Vec::new();
    let mut script_files = false;
    let mut in_place = false;
    let mut sandboxed = false;
    let mut operands: Vec<usize> = Vec::new();
    let mut i = 1;
    let mut only_operands = false;
    while i < argv.len() {
        let w = argv[i].as_str();
        if only_operands || !w.starts_with('-') || w == "-" {
            operands.push(i);
            i += 1;
            continue;
        }
        if w == "--" {
            only_operands = true;
            i += 1;
            continue;
        }
        if let Some(long) = w.strip_prefix("--") {
            let name = long.split('=').next().unwrap_or(long);
            let is = |full: &str| name.len() >= 2 && full.starts_with(name);
            if is("in-place") {
                in_place = true;
            } else if is("expression") {
                match long.split_once('=') {
                    Some((_, v)) => scripts.push(v.to_string()),
                    None => {
                        scripts.extend(argv.get(i + 1).cloned());
                        a.not_paths.push(i + 1);
                        i += 1;
                    }
                }
            } else if is("file") {
                script_files = true;
                if !long.contains('=') {
                    i += 1;
                }
            } else if is("line-length") {
                if !long.contains('=') {
                    i += 1;
                }
            } else if name == "sandbox" {
                sandboxed = true;
            } else if ![
                "quiet",
                "silent",
                "regexp-extended",
                "separate",
                "unbuffered",
                "null-data",
                "zero-terminated",
                "posix",
                "debug",
                "follow-symlinks",
                "binary",
            ]
            .iter()
            .any(|f| is(f))
            {
                a.effect(
                    Category::Unknown,
                    "sed-option",
                    format!("sed option {w} is not understood"),
                );
            }
            i += 1;
            continue;
        }
        // Short options, possibly grouped: `-Ei`, `-ni.bak`, `-es/a/b/`, `-f script`.
        let chars: Vec<char> = w[1..].chars().collect();
        let mut k = 0;
        let mut next_used = false;
        while k < chars.len() {
            match chars[k] {
                'n' | 'E' | 'r' | 's' | 'u' | 'z' | 'b' => k += 1,
                'i' => {
                    in_place = true;
                    break;
                }
                'e' | 'f' | 'l' => {
                    let attached: String = chars[k + 1..].iter().collect();
                    let value = if attached.is_empty() {
                        next_used = true;
                        a.not_paths.push(i + 1);
                        argv.get(i + 1).cloned()
                    } else {
                        Some(attached)
                    };
                    match chars[k] {
                        'e' => scripts.extend(value),
                        'f' => {
                            script_files = true;
                            if let Some(f) = value {
                                a.reads.push(f);
                            }
                        }
                        _ => {}
                    }
                    break;
                }
                ch => {
                    a.effect(
                        Category::Unknown,
                        "sed-option",
                        format!("sed option -{ch} is not understood"),
                    );
                    k += 1;
                }
            }
        }
        i += if next_used { 2 } else { 1 };
    }
    if scripts.is_empty() && !script_files && !operands.is_empty() {
        let first = operands.remove(0);
        a.not_paths.push(first);
        scripts.push(argv[first].clone());
    }
    for s in &scripts {
        match sed_script(s) {
            Ok(fx) if !sandboxed => {
                if fx.executes {
                    a.effect(
                        Category::Unknown,
                        "sed-executes",
                        "the sed script runs commands (e): the policy cannot see which",
                    );
                }
                for f in fx.writes {
                    if !matches!(f.as_str(), "/dev/stdout" | "/dev/stderr") {
                        a.effect(
                            Category::Mutating,
                            "sed-writes",
                            format!("the sed script writes {f}"),
                        );
                    }
                    a.writes.push(f);
                }
                a.reads.extend(fx.reads);
            }
            Ok(_) => {}
            Err(e) => a.effect(
                Category::Unknown,
                "sed-unparseable",
                format!("cannot read the sed script: {e}"),
            ),
        }
    }
    if script_files && !sandboxed {
        a.effect(
            Category::Unknown,
            "workspace-script",
            "runs a sed script file: the policy cannot see what it does",
        );
    }
    if in_place {
        a.effect(Category::Mutating, "sed-in-place", "edits files in place");
    }
    a
}

/// String literals of a program text (`"..."` and `'...'`), without their quotes.
fn string_literals(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let c: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < c.len() {
        let q = c[i];
        if q == '"' || q == '\'' {
            let mut s = String::new();
            i += 1;
            while i < c.len() && c[i] != q {
                if c[i] == '\\' && i + 1 < c.len() {
                    s.push(c[i + 1]);
                    i += 2;
                    continue;
                }
                s.push(c[i]);
                i += 1;
            }
            out.push(s);
        }
        i += 1;
    }
    out
}

/// Literals that look like host paths: absolute with a name, or the home directory.
fn path_literals(code: &str) -> Vec<String> {
    string_literals(code)
        .into_iter()
        // perl's and ruby's `open(F, ">/x")`: the mode is not part of the path.
        .map(|s| s.trim_start_matches(['>', '<', '+', '|', ' ']).to_string())
        .filter(|s| {
            (s.starts_with('/')
                && s.len() > 1
                && s[1..].starts_with(|c: char| c.is_alphanumeric() || c == '.'))
                || s.starts_with("~/")
        })
        .collect()
}

/// `print > "f"`, `printf ... >> f` in an awk program.
/// A mode with the setuid or setgid bit in inline code: a four-digit octal mode whose
/// first digit holds 4 or 2 (`0o4755`, `02755`, `0o6711`), the stat constants, or a
/// symbolic `u+s`/`g+s`. A plain `0o644` or `0o755` is not one.
static SETID_MODE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(r"\b0[oO]?[2-7][0-7]{3}\b|S_ISUID|S_ISGID|[ugoa]*[ug][ugoa]*\+[rwxXt]*s")
        .expect("valid regex")
});

static AWK_WRITE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(r#"print[f]?\b[^;}\n]*?>{1,2}\s*("([^"]*)"|[^;}\s]+)"#).expect("valid regex")
});

/// `awk`: `system()`, pipes to or from commands, `print > FILE`, `getline < FILE`.
pub fn awk(argv: &[String]) -> Analysis {
    let mut a = Analysis::default();
    let mut program: Option<(usize, String)> = None;
    let mut from_file = false;
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
        if let Some(v) = option_value(w, &['f'], &["file", "include", "load"]) {
            from_file = true;
            let f = if v.is_empty() {
                argv.get(i + 1).cloned()
            } else {
                Some(v.to_string())
            };
            a.reads.extend(f);
            i += if v.is_empty() { 2 } else { 1 };
            continue;
        }
        if let Some(v) = option_value(w, &['e'], &["source"]) {
            let (text, at) = if v.is_empty() {
                (argv.get(i + 1).cloned(), i + 1)
            } else {
                (Some(v.to_string()), i)
            };
            if let Some(t) = text {
                program = Some((at, t));
            }
            a.not_paths.push(at);
            i += if v.is_empty() { 2 } else { 1 };
            continue;
        }
        if let Some(v) = option_value(w, &['v', 'F'], &["assign", "field-separator"]) {
            a.not_paths.push(if v.is_empty() { i + 1 } else { i });
            i += if v.is_empty() { 2 } else { 1 };
            continue;
        }
        i += 1;
    }
    if program.is_none() && !from_file && i < argv.len() {
        a.not_paths.push(i);
        program = Some((i, argv[i].clone()));
    }
    if from_file {
        a.effect(
            Category::Unknown,
            "workspace-script",
            "runs an awk program file: the policy cannot see what it does",
        );
    }
    let Some((_, prog)) = program else {
        return a;
    };
    let runs = prog.contains("system(")
        || prog.contains("system (")
        || prog.replace("||", "").contains('|');
    if runs {
        a.effect(
            Category::Unknown,
            "awk-runs-programs",
            "the awk program runs commands (system() or a pipe): the policy cannot see which",
        );
    }
    // `print > "f"`, `printf ... >> "f"`: a literal target is checked, any other is not
    // known.
    for cap in AWK_WRITE.captures_iter(&prog) {
        match cap.get(2) {
            Some(f) => {
                let f = f.as_str().to_string();
                if !matches!(f.as_str(), "/dev/stdout" | "/dev/stderr") {
                    a.effect(
                        Category::Mutating,
                        "awk-writes",
                        format!("the awk program writes {f}"),
                    );
                }
                a.writes.push(f);
            }
            None => a.effect(
                Category::Unknown,
                "awk-writes",
                "the awk program writes to a file named at run time",
            ),
        }
    }
    a.reads.extend(path_literals(&prog));
    a
}

const NETWORK_MARKERS: &[&str] = &[
    "socket",
    "Socket",
    "Net::HTTP",
    "open-uri",
    "LWP::",
    "HTTP::Tiny",
    "urllib",
    "requests.",
    "import requests",
    "http.client",
    "httpx",
    "aiohttp",
    "fetch(",
    "XMLHttpRequest",
    "require('http",
    "require(\"http",
    "require('net",
    "require(\"net",
    "from 'http",
    "from \"http",
    "node:http",
    "node:net",
    "Net::HTTP",
    "open-uri",
    "LWP::",
    "IO::Socket",
    "/dev/tcp/",
    "/dev/udp/",
    "http://",
    "https://",
    "ftp://",
    "smtplib",
    "ftplib",
    "telnetlib",
    "paramiko",
    "websocket",
    "curl_",
    "fsockopen",
    "file_get_contents('http",
    "file_get_contents(\"http",
];
const PROCESS_MARKERS: &[&str] = &[
    "subprocess",
    "os.system",
    "os.popen",
    "os.exec",
    "os.spawn",
    "os.fork",
    "pty.spawn",
    "child_process",
    "execSync",
    "spawnSync",
    "execFile",
    "exec(",
    "system(",
    "popen(",
    "Process.spawn",
    "IO.popen",
    "%x{",
    "%x(",
    "`",
    "shell_exec",
    "passthru",
    "proc_open",
    "Deno.run",
    "Deno.Command",
    "Bun.spawn",
    "ctypes",
    "__import__",
    "importlib",
    "eval(",
];
const HOME_MARKERS: &[&str] = &[
    "expanduser",
    "Path.home",
    "os.environ['HOME']",
    "os.environ[\"HOME\"]",
    "getenv('HOME')",
    "getenv(\"HOME\")",
    "process.env.HOME",
    "homedir()",
    "ENV['HOME']",
    "ENV[\"HOME\"]",
    "$ENV{HOME}",
    "$ENV{'HOME'}",
];

/// Interpreters whose backticks are not commands: JavaScript's template literals
/// (`` `v=${x}` ``) and Python (where they are a syntax error). In Ruby, Perl, PHP and the
/// shells a backtick runs a program.
fn backticks_are_text(interpreter: &str) -> bool {
    let base = interpreter.rsplit('/').next().unwrap_or(interpreter);
    matches!(base, "node" | "nodejs" | "deno" | "bun") || base.starts_with("python")
}

/// Inline code of an interpreter (`python3 -c`, `node -e`, a here-document fed to it):
/// it can do anything, so what it names decides: the network, other programs, host paths.
pub fn code(text: &str, interpreter: &str) -> Analysis {
    let mut a = Analysis::default();
    if let Some(m) = NETWORK_MARKERS.iter().find(|m| text.contains(**m)) {
        a.effect(
            Category::Networked,
            "code-network",
            format!("the inline code uses the network ({m})"),
        );
    }
    if let Some(m) = PROCESS_MARKERS
        .iter()
        .filter(|m| **m != "`" || !backticks_are_text(interpreter))
        .find(|m| text.contains(**m))
    {
        a.effect(
            Category::Unknown,
            "code-runs-programs",
            format!(
                "the inline code can run other programs or code ({m}): the policy cannot see which"
            ),
        );
    }
    if let Some(m) = HOME_MARKERS.iter().find(|m| text.contains(**m)) {
        a.effect(
            Category::HostEscapeRisk,
            "code-home",
            format!("the inline code reaches the home directory on the host ({m})"),
        );
    }
    if text.contains("chmod") && SETID_MODE.is_match(text) {
        a.effect(
            Category::Unknown,
            "setuid",
            "the inline code may set the setuid or setgid bit",
        );
    }
    a.reads.extend(path_literals(text));
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setuid_modes_in_inline_code() {
        let setuid = |t: &str| {
            code(t, "python3")
                .effects
                .iter()
                .any(|e| e.rule == "setuid")
        };
        assert!(setuid("import os; os.chmod('x', 0o4755)"));
        assert!(setuid("os.chmod('x', 0o2755)"));
        assert!(setuid("os.chmod('x', stat.S_ISUID | 0o755)"));
        assert!(setuid("subprocess.run(['chmod', 'u+s', 'x'])"));
        assert!(setuid("fs.chmodSync('x', 0o6711)"));
        assert!(!setuid("os.chmod('d/f.txt', 0o644)"));
        assert!(!setuid("os.chmod('x', 0o755); os.chmod('y', 0o600)"));
        assert!(!setuid("fs.chmodSync('x', 0o644)"));
    }

    #[test]
    fn sed_scripts() {
        assert!(sed_script("1e curl x").unwrap().executes);
        assert!(sed_script("s/a/b/e").unwrap().executes);
        assert_eq!(sed_script("1w /tmp/x").unwrap().writes, ["/tmp/x"]);
        assert_eq!(sed_script("s/a/b/gw out").unwrap().writes, ["out"]);
        assert_eq!(
            sed_script("/x/r /etc/passwd").unwrap().reads,
            ["/etc/passwd"]
        );
        let fx = sed_script("s/e/w/g; /w/d; 1,$ { p; }").unwrap();
        assert!(!fx.executes && fx.writes.is_empty(), "{fx:?}");
        assert!(sed_script("s|/usr|/opt|g").unwrap().writes.is_empty());
        assert!(sed_script("s/a").is_err());
    }

    #[test]
    fn awk_programs() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let a = awk(&v(&["awk", "BEGIN{system(\"curl x\")}"]));
        assert_eq!(a.effects[0].rule, "awk-runs-programs");
        let a = awk(&v(&["awk", "{print > \"/tmp/x\"}", "f"]));
        assert_eq!(a.writes, ["/tmp/x"]);
        let a = awk(&v(&["awk", "-F:", "{print $1}", "/etc/passwd"]));
        assert!(a.effects.is_empty());
        assert_eq!(a.not_paths, [1, 2]);
        let a = awk(&v(&["awk", "{ if ($1 > 3) n++ } END { print n }", "f"]));
        assert!(a.effects.is_empty(), "{:?}", a.effects);
    }
}
