//! A shell-string parser for policy decisions: finds every program a command line will
//! start (through pipelines, `&&`, `||`, `;`, subshells, `$(...)`, backticks, `sh -c`)
//! and every redirection. It never runs or expands anything; what it cannot parse is an
//! error, and the policy fails closed on errors.

use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Redirect {
    /// `>`, `>>`, `<`, `2>`, `&>`, `>&`, ...
    pub op: String,
    pub target: String,
}

/// One program invocation, with the words as the shell would pass them (quotes removed,
/// nothing expanded).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct SimpleCommand {
    /// `NAME=value` words before the program.
    pub assignments: Vec<String>,
    pub argv: Vec<String>,
    pub redirects: Vec<Redirect>,
    /// The directory the command runs in, relative to where the line starts, as far as
    /// `cd` commands earlier in the same line tell (`None` when unknown).
    pub cd_path: Option<Vec<String>>,
    /// True if a word holds `$VAR`, a glob or other text the shell would expand.
    pub has_expansions: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ParseError(pub String);

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Word(String, bool),
    Op(String),
}

const MAX_DEPTH: usize = 16;

/// Splits a line into words and operators, pulling out command substitutions.
fn lex(s: &str, substs: &mut Vec<String>) -> Result<Vec<Tok>, ParseError> {
    let c: Vec<char> = s.chars().collect();
    let mut i = 0;
    let mut out = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut expands = false;
    macro_rules! end_word {
        () => {
            if in_word {
                out.push(Tok::Word(std::mem::take(&mut word), expands));
                in_word = false;
                expands = false;
            }
        };
    }
    while i < c.len() {
        let ch = c[i];
        match ch {
            ' ' | '\t' => {
                end_word!();
                i += 1;
            }
            '\n' => {
                end_word!();
                out.push(Tok::Op(";".into()));
                i += 1;
            }
            '#' if !in_word => {
                while i < c.len() && c[i] != '\n' {
                    i += 1;
                }
            }
            '\\' => {
                if i + 1 < c.len() {
                    if c[i + 1] != '\n' {
                        word.push(c[i + 1]);
                        in_word = true;
                    }
                    i += 2;
                } else {
                    return Err(ParseError("line ends with a backslash".into()));
                }
            }
            '\'' => {
                in_word = true;
                i += 1;
                while i < c.len() && c[i] != '\'' {
                    word.push(c[i]);
                    i += 1;
                }
                if i >= c.len() {
                    return Err(ParseError("unterminated single quote".into()));
                }
                i += 1;
            }
            '"' => {
                in_word = true;
                i += 1;
                loop {
                    if i >= c.len() {
                        return Err(ParseError("unterminated double quote".into()));
                    }
                    match c[i] {
                        '"' => {
                            i += 1;
                            break;
                        }
                        '\\' if i + 1 < c.len()
                            && matches!(c[i + 1], '"' | '\\' | '$' | '`' | '\n') =>
                        {
                            word.push(c[i + 1]);
                            i += 2;
                        }
                        '$' if i + 1 < c.len() && c[i + 1] == '(' => {
                            let (inner, next) = take_paren(&c, i + 1)?;
                            substs.push(inner);
                            expands = true;
                            word.push_str("$(...)");
                            i = next;
                        }
                        '`' => {
                            let (inner, next) = take_backtick(&c, i)?;
                            substs.push(inner);
                            expands = true;
                            word.push_str("$(...)");
                            i = next;
                        }
                        '$' => {
                            expands = true;
                            word.push('$');
                            i += 1;
                        }
                        ch => {
                            word.push(ch);
                            i += 1;
                        }
                    }
                }
            }
            '$' if i + 1 < c.len() && c[i + 1] == '(' => {
                if i + 2 < c.len() && c[i + 2] == '(' {
                    // $(( arithmetic )): no programs run inside.
                    let (_, next) = take_paren(&c, i + 1)?;
                    word.push_str("$((...))");
                    in_word = true;
                    expands = true;
                    i = next;
                } else {
                    let (inner, next) = take_paren(&c, i + 1)?;
                    substs.push(inner);
                    word.push_str("$(...)");
                    in_word = true;
                    expands = true;
                    i = next;
                }
            }
            '`' => {
                let (inner, next) = take_backtick(&c, i)?;
                substs.push(inner);
                word.push_str("$(...)");
                in_word = true;
                expands = true;
                i = next;
            }
            '$' | '*' | '?' | '[' => {
                expands = true;
                in_word = true;
                word.push(ch);
                i += 1;
            }
            '~' if !in_word => {
                expands = true;
                in_word = true;
                word.push(ch);
                i += 1;
            }
            '<' | '>' if i + 1 < c.len() && c[i + 1] == '(' => {
                // Process substitution runs a command too.
                let (inner, next) = take_paren(&c, i + 1)?;
                substs.push(inner);
                word.push_str("/dev/fd/N");
                in_word = true;
                i = next;
            }
            '|' | '&' | ';' | '(' | ')' | '<' | '>' => {
                // A redirection may carry a file descriptor number: 2>, 2>>, 1>&2.
                let mut op = String::new();
                if matches!(ch, '<' | '>')
                    && in_word
                    && word.chars().all(|d| d.is_ascii_digit())
                    && !word.is_empty()
                {
                    op.push_str(&std::mem::take(&mut word));
                    in_word = false;
                    expands = false;
                } else {
                    end_word!();
                }
                let two: String = c[i..(i + 2).min(c.len())].iter().collect();
                let three: String = c[i..(i + 3).min(c.len())].iter().collect();
                let taken = if ["&>>"].contains(&three.as_str()) {
                    three
                } else if [
                    "&&", "||", ";;", ">>", "<<", "&>", ">&", "<&", "|&", ">|", "<>",
                ]
                .contains(&two.as_str())
                {
                    two
                } else {
                    ch.to_string()
                };
                i += taken.chars().count();
                op.push_str(&taken);
                if op.ends_with("<<") {
                    return Err(ParseError("here-documents are not supported".into()));
                }
                out.push(Tok::Op(op));
            }
            '{' | '}'
                if !in_word
                    && (i + 1 >= c.len()
                        || c[i + 1] == ' '
                        || c[i + 1] == ';'
                        || c[i + 1] == '\n') =>
            {
                // Brace groups: treated like subshell grouping.
                out.push(Tok::Op(if ch == '{' { "(".into() } else { ")".into() }));
                i += 1;
            }
            ch => {
                in_word = true;
                word.push(ch);
                i += 1;
            }
        }
    }
    if in_word {
        out.push(Tok::Word(word, expands));
    }
    Ok(out)
}

/// Returns the text inside the parentheses starting at `open` and the index after them.
fn take_paren(c: &[char], open: usize) -> Result<(String, usize), ParseError> {
    let mut depth = 0;
    let mut i = open;
    let mut quote: Option<char> = None;
    while i < c.len() {
        let ch = c[i];
        match quote {
            Some(q) => {
                if ch == q {
                    quote = None;
                } else if ch == '\\' && q == '"' {
                    i += 1;
                }
            }
            None => match ch {
                '\'' | '"' => quote = Some(ch),
                '\\' => i += 1,
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        return Ok((c[open + 1..i].iter().collect(), i + 1));
                    }
                }
                _ => {}
            },
        }
        i += 1;
    }
    Err(ParseError("unterminated $( or (".into()))
}

fn take_backtick(c: &[char], open: usize) -> Result<(String, usize), ParseError> {
    let mut i = open + 1;
    let mut inner = String::new();
    while i < c.len() {
        match c[i] {
            '`' => return Ok((inner, i + 1)),
            '\\' if i + 1 < c.len() => {
                inner.push(c[i + 1]);
                i += 2;
            }
            ch => {
                inner.push(ch);
                i += 1;
            }
        }
    }
    Err(ParseError("unterminated backtick".into()))
}

fn is_assignment(w: &str) -> bool {
    match w.find('=') {
        Some(p) if p > 0 => {
            w[..p]
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !w.starts_with(|c: char| c.is_ascii_digit())
        }
        _ => false,
    }
}

/// Lexical `cd` tracking: the directory is a list of components relative to the start.
fn apply_cd(cur: &Option<Vec<String>>, arg: Option<&str>) -> Option<Vec<String>> {
    let arg = arg?;
    if arg.starts_with('/') || arg.starts_with('~') || arg.contains('$') || arg == "-" {
        return None;
    }
    let mut p = cur.clone()?;
    for part in arg.split('/') {
        match part {
            "" | "." => {}
            ".." => p.push("..".into()),
            x => p.push(x.into()),
        }
    }
    Some(p)
}

/// Parses a shell line into every simple command it contains, including those inside
/// `$(...)`, backticks, subshells and nested `sh -c` / `bash -c` strings.
pub fn parse(line: &str) -> Result<Vec<SimpleCommand>, ParseError> {
    parse_depth(line, 0, Some(vec![]))
}

fn parse_depth(
    line: &str,
    depth: usize,
    start_dir: Option<Vec<String>>,
) -> Result<Vec<SimpleCommand>, ParseError> {
    if depth > MAX_DEPTH {
        return Err(ParseError("commands nested too deeply".into()));
    }
    let mut substs = Vec::new();
    let toks = lex(line, &mut substs)?;
    let mut out = Vec::new();
    let mut cur = SimpleCommand {
        cd_path: start_dir.clone(),
        ..Default::default()
    };
    let mut dir = start_dir.clone();
    let mut parens: Vec<Option<Vec<String>>> = Vec::new();
    let mut i = 0;
    let mut expect_target: Option<String> = None;
    let flush =
        |cur: &mut SimpleCommand, out: &mut Vec<SimpleCommand>, dir: &mut Option<Vec<String>>| {
            if !cur.argv.is_empty() || !cur.redirects.is_empty() || !cur.assignments.is_empty() {
                if cur.argv.first().map(String::as_str) == Some("cd") {
                    *dir = if cur.argv.len() == 1 {
                        None
                    } else {
                        apply_cd(dir, cur.argv.get(1).map(String::as_str))
                    };
                }
                out.push(std::mem::take(cur));
            }
            cur.cd_path = dir.clone();
        };
    while i < toks.len() {
        match &toks[i] {
            Tok::Word(w, exp) => {
                if let Some(op) = expect_target.take() {
                    cur.redirects.push(Redirect {
                        op,
                        target: w.clone(),
                    });
                    cur.has_expansions |= *exp;
                } else if cur.argv.is_empty() && is_assignment(w) {
                    cur.assignments.push(w.clone());
                    cur.has_expansions |= *exp;
                } else {
                    cur.argv.push(w.clone());
                    cur.has_expansions |= *exp;
                }
            }
            Tok::Op(op) => {
                if expect_target.is_some() {
                    return Err(ParseError(format!(
                        "redirection without a target before {op:?}"
                    )));
                }
                match op.as_str() {
                    "|" | "|&" | "&&" | "||" | ";" | "&" | ";;" => {
                        flush(&mut cur, &mut out, &mut dir)
                    }
                    "(" => {
                        flush(&mut cur, &mut out, &mut dir);
                        parens.push(dir.clone());
                    }
                    ")" => {
                        flush(&mut cur, &mut out, &mut dir);
                        // A subshell's cd does not leak out.
                        dir = parens
                            .pop()
                            .ok_or_else(|| ParseError("unbalanced ')'".into()))?;
                        cur.cd_path = dir.clone();
                    }
                    r if r.contains('<') || r.contains('>') => {
                        if r.ends_with('&') {
                            // >&2 style: the target is a descriptor number or a file.
                            expect_target = Some(r.to_string());
                        } else {
                            expect_target = Some(r.to_string());
                        }
                    }
                    other => return Err(ParseError(format!("unsupported operator {other:?}"))),
                }
            }
        }
        i += 1;
    }
    if expect_target.is_some() {
        return Err(ParseError("redirection without a target".into()));
    }
    if !parens.is_empty() {
        return Err(ParseError("unbalanced '('".into()));
    }
    flush(&mut cur, &mut out, &mut dir);
    for s in substs {
        out.extend(parse_depth(&s, depth + 1, start_dir.clone())?);
    }
    // sh -c / bash -c "..." run another shell line.
    let mut nested = Vec::new();
    for cmd in &out {
        if let Some(inner) = shell_c_argument(&cmd.argv) {
            nested.extend(parse_depth(inner, depth + 1, cmd.cd_path.clone())?);
        }
    }
    out.extend(nested);
    Ok(out)
}

/// The script of `sh -c SCRIPT` (also bash, dash, zsh, with other flags before -c).
pub fn shell_c_argument(argv: &[String]) -> Option<&str> {
    let prog = argv.first()?.rsplit('/').next()?;
    if !matches!(prog, "sh" | "bash" | "dash" | "zsh" | "ksh") {
        return None;
    }
    let mut it = argv.iter().skip(1);
    while let Some(a) = it.next() {
        if a.starts_with('-') && a.contains('c') && !a.starts_with("--") {
            return it.next().map(String::as_str);
        }
        if !a.starts_with('-') {
            return None;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progs(line: &str) -> Vec<String> {
        parse(line)
            .unwrap()
            .into_iter()
            .filter_map(|c| c.argv.first().cloned())
            .collect()
    }

    #[test]
    fn pipelines_lists_subshells_and_substitutions() {
        assert_eq!(
            progs("ls -l | grep x && echo ok || false; true"),
            ["ls", "grep", "echo", "false", "true"]
        );
        assert_eq!(
            progs("(cd sub && make) ; echo $(date) `whoami`"),
            ["cd", "make", "echo", "date", "whoami"]
        );
        assert_eq!(
            progs("bash -c \"rm -rf . && curl x\""),
            ["bash", "rm", "curl"]
        );
        assert_eq!(progs("sh -c 'sh -c \"wget y\"'"), ["sh", "sh", "wget"]);
        assert_eq!(progs("echo \"$(curl evil)\""), ["echo", "curl"]);
    }

    #[test]
    fn quotes_redirects_and_assignments() {
        let c = parse("FOO=1 echo 'a b' \"c d\" > out.txt 2>&1 >> log").unwrap();
        assert_eq!(c[0].assignments, ["FOO=1"]);
        assert_eq!(c[0].argv, ["echo", "a b", "c d"]);
        let ops: Vec<&str> = c[0].redirects.iter().map(|r| r.op.as_str()).collect();
        assert_eq!(ops, [">", "2>&", ">>"]);
        assert_eq!(c[0].redirects[0].target, "out.txt");
    }

    #[test]
    fn cd_is_tracked_lexically() {
        let c = parse("cd .. && curl x").unwrap();
        assert_eq!(c[1].cd_path, Some(vec!["..".to_string()]));
        let c = parse("cd / ; ls").unwrap();
        assert_eq!(c[1].cd_path, None);
        let c = parse("(cd a) && ls").unwrap();
        assert_eq!(c[1].cd_path, Some(vec![]));
    }

    #[test]
    fn errors_fail_closed() {
        for bad in [
            "echo 'unterminated",
            "echo \"x",
            "cat <<EOF",
            "echo $(ls",
            "ls >",
            "a )",
            "echo \\",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
