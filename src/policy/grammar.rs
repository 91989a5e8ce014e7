//! The shell grammar: a line is parsed by `brush-parser` (the bash parser of the brush
//! shell) and lowered into the simple commands it can start, in order, with their words
//! as the shell would pass them (quotes removed, nothing run). Loops, conditionals,
//! `case`, functions, here-documents, subshells, command and process substitutions are
//! all walked; keywords are never programs. Variables the line sets (`X=...`, `for x in
//! a b`) are substituted; others stay as `${NAME}` markers, which path checks do not
//! judge. What cannot be parsed, or nests too deeply, is an error: the policy fails closed.

use std::collections::{HashMap, HashSet};

use brush_parser::ast::{self, Command, CompoundCommand, CompoundList, IoFileRedirectKind};
use brush_parser::word::{self, Parameter, ParameterExpr, TildeExpr, WordPiece};
use brush_parser::{Parser, ParserOptions};
use serde::Serialize;

use super::braces::brace_expand;
use super::shell_input;

/// How deep substitutions (and `sh -c` scripts, counted by the caller) may nest.
pub const MAX_NESTING: usize = 16;
/// Simple commands one line may lower to (loops over literal lists are unrolled).
const MAX_COMMANDS: usize = 4096;
/// Values a `for` loop is unrolled for; beyond, its variable is unknown.
const MAX_UNROLL: usize = 16;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Redirect {
    /// `>`, `>>`, `<`, `<>`, `>|`, `&>`, `&>>`, `>&`.
    pub op: String,
    pub target: String,
    /// The redirection writes the target.
    pub writes: bool,
}

/// What a command reads on its standard input, when the line tells.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub enum Stdin {
    #[default]
    Inherited,
    /// A here-document, a here-string or the output of `echo`/`printf` with fixed words.
    Text(String),
    /// The output of another command, or a file.
    Unknown,
}

/// One program invocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct SimpleCommand {
    /// `NAME=value` before the program (or alone on the line: then `argv` is empty).
    pub assignments: Vec<(String, String)>,
    pub argv: Vec<String>,
    pub redirects: Vec<Redirect>,
    /// The `cd` targets run before this command in the same shell, in order.
    pub cds: Vec<String>,
    pub stdin: Stdin,
    /// The program is a function the line defines (its body is classified on its own).
    pub function_call: bool,
}

/// A line lowered to commands, plus what could not be understood (each becomes an
/// `unknown` finding).
#[derive(Debug, Clone, Default)]
pub struct Lowered {
    pub commands: Vec<SimpleCommand>,
    pub problems: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ParseError(pub String);

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Parses a shell line into the commands it can start.
pub fn parse(line: &str) -> Result<Lowered, ParseError> {
    parse_at(line, 0)
}

/// Parses a script found at nesting level `depth` (inside `sh -c`, `eval`, ...).
pub fn parse_at(line: &str, depth: usize) -> Result<Lowered, ParseError> {
    let mut l = Lower::new(depth);
    l.text(line, depth, &[])?;
    if l.out.is_empty()
        && l.arithmetic_commands == 0
        && line.chars().any(|c| c.is_alphanumeric())
        && !only_comments(line)
    {
        // Words but no command: a construct the walk does not know hid them.
        l.problem("the line has words but no command was found in it".into());
    }
    Ok(Lowered {
        commands: l.out,
        problems: l.problems,
    })
}

/// True if every line of `text` is blank or a comment.
fn only_comments(text: &str) -> bool {
    text.lines()
        .map(str::trim)
        .all(|l| l.is_empty() || l.starts_with('#'))
}

/// Runs the parser; a panic inside it is an error like any other (fail closed), not a
/// crash of the boundary.
fn guarded<T>(f: impl FnOnce() -> Result<T, ParseError>) -> Result<T, ParseError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|_| Err(ParseError("the shell parser failed on this input".into())))
}

fn options() -> ParserOptions {
    ParserOptions {
        // `~` stays a word piece: the policy sees it, nothing expands it.
        tilde_expansion_at_word_start: true,
        ..ParserOptions::default()
    }
}

struct Lower {
    opts: ParserOptions,
    out: Vec<SimpleCommand>,
    problems: Vec<String>,
    functions: HashSet<String>,
    /// Variables the line set: `Some(value)` when known.
    vars: HashMap<String, Option<String>>,
    base_depth: usize,
    /// The texts being lowered, innermost last (source positions index into them).
    sources: Vec<Vec<char>>,
    /// `((...))` commands seen (they start no program).
    arithmetic_commands: usize,
}

/// The marker a value the line does not give becomes.
fn unknown(name: &str) -> String {
    format!("${{{name}}}")
}

impl Lower {
    fn new(depth: usize) -> Lower {
        Lower {
            opts: options(),
            out: Vec::new(),
            problems: Vec::new(),
            functions: HashSet::new(),
            vars: HashMap::new(),
            base_depth: depth,
            sources: Vec::new(),
            arithmetic_commands: 0,
        }
    }

    fn problem(&mut self, p: String) {
        if self.problems.len() < 16 {
            self.problems.push(p);
        }
    }

    /// Parses `text` and lowers it with the current variables; `cds` are the directory
    /// changes in effect where it runs.
    fn text(&mut self, text: &str, depth: usize, cds: &[String]) -> Result<(), ParseError> {
        if depth > self.base_depth + MAX_NESTING || depth > 2 * MAX_NESTING {
            return Err(ParseError(format!(
                "substitutions nest more than {MAX_NESTING} levels deep"
            )));
        }
        shell_input::precheck(text)?;
        // brush-parser reads `input`: the text with a final newline (see shell_input).
        let input = shell_input::terminated(text)?;
        let opts = &self.opts;
        let program = guarded(|| {
            Parser::new(input.as_bytes(), opts)
                .parse_program()
                .map_err(|e| ParseError(shell_input::at_end(&e.to_string(), &input)))
        })?;
        let mut cds = cds.to_vec();
        self.sources.push(input.chars().collect());
        let mut result = Ok(());
        for cc in &program.complete_commands {
            result = self.list(cc, depth, &mut cds);
            if result.is_err() {
                break;
            }
        }
        self.sources.pop();
        result
    }

    fn list(
        &mut self,
        l: &CompoundList,
        depth: usize,
        cds: &mut Vec<String>,
    ) -> Result<(), ParseError> {
        for item in &l.0 {
            let ao = &item.0;
            self.pipeline(&ao.first, depth, cds)?;
            for next in &ao.additional {
                let (ast::AndOr::And(p) | ast::AndOr::Or(p)) = next;
                self.pipeline(p, depth, cds)?;
            }
        }
        Ok(())
    }

    fn pipeline(
        &mut self,
        p: &ast::Pipeline,
        depth: usize,
        cds: &mut Vec<String>,
    ) -> Result<(), ParseError> {
        if p.seq.len() == 1 {
            self.command(&p.seq[0], depth, cds)?;
            return Ok(());
        }
        // Each part of a pipeline runs in a subshell: its `cd` stays there.
        let mut fed: Option<Stdin> = None;
        for c in &p.seq {
            let mut local = cds.clone();
            let main = self.command(c, depth, &mut local)?;
            if let (Some(i), Some(s)) = (main, fed.take())
                && self.out[i].stdin == Stdin::Inherited
            {
                self.out[i].stdin = s;
            }
            fed = Some(match main {
                Some(i) => printed_text(&self.out[i]).map_or(Stdin::Unknown, Stdin::Text),
                None => Stdin::Unknown,
            });
        }
        Ok(())
    }

    /// Lowers one command; returns the index of its simple command, if it is one.
    fn command(
        &mut self,
        c: &Command,
        depth: usize,
        cds: &mut Vec<String>,
    ) -> Result<Option<usize>, ParseError> {
        match c {
            Command::Simple(s) => self.simple(s, depth, cds).map(Some),
            Command::Compound(cc, redirects) => {
                let mut rs = Vec::new();
                if let Some(r) = redirects {
                    for io in &r.0 {
                        self.redirect(io, depth, cds, &mut rs)?;
                    }
                }
                if !rs.is_empty() {
                    // The redirections of a compound command: recorded on a command of
                    // their own with no program, so they are checked like any other.
                    self.push(SimpleCommand {
                        redirects: rs,
                        cds: cds.clone(),
                        ..Default::default()
                    })?;
                }
                self.compound(cc, depth, cds)?;
                Ok(None)
            }
            Command::Function(f) => {
                self.functions.insert(f.fname.value.clone());
                let mut local = cds.clone();
                self.compound(&f.body.0, depth, &mut local)?;
                if let Some(r) = &f.body.1 {
                    let mut rs = Vec::new();
                    for io in &r.0 {
                        self.redirect(io, depth, cds, &mut rs)?;
                    }
                    if !rs.is_empty() {
                        self.push(SimpleCommand {
                            redirects: rs,
                            cds: cds.clone(),
                            ..Default::default()
                        })?;
                    }
                }
                Ok(None)
            }
            Command::ExtendedTest(t, _) => {
                self.extended_test(&t.expr, depth, cds)?;
                Ok(None)
            }
        }
    }

    fn extended_test(
        &mut self,
        e: &ast::ExtendedTestExpr,
        depth: usize,
        cds: &[String],
    ) -> Result<(), ParseError> {
        use ast::ExtendedTestExpr as E;
        match e {
            E::And(a, b) | E::Or(a, b) => {
                self.extended_test(a, depth, cds)?;
                self.extended_test(b, depth, cds)
            }
            E::Not(a) | E::Parenthesized(a) => self.extended_test(a, depth, cds),
            E::UnaryTest(_, w) => self.word(&w.value, depth, cds).map(|_| ()),
            E::BinaryTest(_, a, b) => {
                self.word(&a.value, depth, cds)?;
                self.word(&b.value, depth, cds).map(|_| ())
            }
        }
    }

    fn compound(
        &mut self,
        cc: &CompoundCommand,
        depth: usize,
        cds: &mut Vec<String>,
    ) -> Result<(), ParseError> {
        match cc {
            CompoundCommand::Arithmetic(a) => {
                // The parser reads `( (cmd) )` as `((...))`; bash reads subshells unless the
                // two parentheses touch. The text between the outer ones is lowered again.
                let span = self.sources.last().and_then(|src| {
                    let (from, to) = (a.loc.start.index, a.loc.end.index);
                    (to <= src.len() && from + 2 <= to).then(|| src[from..to].to_vec())
                });
                match span {
                    Some(t) if !t.starts_with(&['(', '(']) => {
                        let inner: String = t[1..t.len() - 1].iter().collect();
                        self.text(&inner, depth + 1, cds)
                    }
                    Some(_) => {
                        self.arithmetic_commands += 1;
                        self.arithmetic(&a.expr.value, depth, cds)
                    }
                    None => Err(ParseError(
                        "an arithmetic command whose text cannot be found".into(),
                    )),
                }
            }
            CompoundCommand::ArithmeticForClause(f) => {
                for e in [&f.initializer, &f.condition, &f.updater]
                    .into_iter()
                    .flatten()
                {
                    self.arithmetic(&e.value, depth, cds)?;
                }
                self.list(&f.body.list, depth, cds)
            }
            CompoundCommand::BraceGroup(b) => self.list(&b.list, depth, cds),
            CompoundCommand::Subshell(s) => {
                let mut local = cds.clone();
                self.list(&s.list, depth, &mut local)
            }
            CompoundCommand::ForClause(f) => self.for_loop(f, depth, cds),
            CompoundCommand::CaseClause(c) => {
                self.word(&c.value.value, depth, cds)?;
                for item in &c.cases {
                    for p in &item.patterns {
                        self.word(&p.value, depth, cds)?;
                    }
                    if let Some(body) = &item.cmd {
                        self.list(body, depth, cds)?;
                    }
                }
                Ok(())
            }
            CompoundCommand::IfClause(i) => {
                self.list(&i.condition, depth, cds)?;
                self.list(&i.then, depth, cds)?;
                for e in i.elses.iter().flatten() {
                    if let Some(c) = &e.condition {
                        self.list(c, depth, cds)?;
                    }
                    self.list(&e.body, depth, cds)?;
                }
                Ok(())
            }
            CompoundCommand::WhileClause(w) | CompoundCommand::UntilClause(w) => {
                self.list(&w.0, depth, cds)?;
                self.list(&w.1.list, depth, cds)
            }
            CompoundCommand::Coprocess(c) => {
                let mut local = cds.clone();
                self.command(&c.body, depth, &mut local).map(|_| ())
            }
        }
    }

    /// `for x in a b c`: the body is lowered once per value when the values are fixed and
    /// few, so `cat "$x"` is checked for each; otherwise `$x` is unknown.
    fn for_loop(
        &mut self,
        f: &ast::ForClauseCommand,
        depth: usize,
        cds: &[String],
    ) -> Result<(), ParseError> {
        let mut values = Vec::new();
        let mut fixed = f.values.is_some();
        for w in f.values.iter().flatten() {
            for raw in brace_expand(&w.value)? {
                let v = self.word(&raw, depth, cds)?;
                fixed &= !v.contains('$');
                values.push(v);
            }
        }
        let saved = self.vars.get(&f.variable_name).cloned();
        if fixed && !values.is_empty() && values.len() <= MAX_UNROLL {
            for v in values {
                self.vars.insert(f.variable_name.clone(), Some(v));
                let mut local = cds.to_vec();
                self.list(&f.body.list, depth, &mut local)?;
            }
        } else {
            self.vars.insert(f.variable_name.clone(), None);
            let mut local = cds.to_vec();
            self.list(&f.body.list, depth, &mut local)?;
        }
        match saved {
            Some(v) => self.vars.insert(f.variable_name.clone(), v),
            None => self.vars.insert(f.variable_name.clone(), None),
        };
        Ok(())
    }

    fn arithmetic(&mut self, expr: &str, depth: usize, cds: &[String]) -> Result<(), ParseError> {
        if expr.contains("$(") || expr.contains('`') {
            // `$(( $(cmd) + 1 ))`: the expression read as a plain word lowers its
            // substitutions (wrapped in `$((..))` again it would come back here forever).
            self.word(expr, depth + 1, cds)?;
            self.problem(format!(
                "a command substitution inside arithmetic ({expr}) is not followed"
            ));
        }
        Ok(())
    }

    fn push(&mut self, c: SimpleCommand) -> Result<usize, ParseError> {
        if self.out.len() >= MAX_COMMANDS {
            return Err(ParseError(format!(
                "the line starts more than {MAX_COMMANDS} commands"
            )));
        }
        self.out.push(c);
        Ok(self.out.len() - 1)
    }

    fn simple(
        &mut self,
        s: &ast::SimpleCommand,
        depth: usize,
        cds: &mut Vec<String>,
    ) -> Result<usize, ParseError> {
        use ast::CommandPrefixOrSuffixItem as Item;
        let mut cmd = SimpleCommand {
            cds: cds.clone(),
            ..Default::default()
        };
        let mut items: Vec<&Item> = Vec::new();
        if let Some(p) = &s.prefix {
            items.extend(p.0.iter());
        }
        let prog_at = items.len();
        if let Some(p) = &s.suffix {
            items.extend(p.0.iter());
        }
        let mut argv_items: Vec<String> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            if i == prog_at
                && let Some(w) = &s.word_or_name
            {
                for raw in brace_expand(&w.value)? {
                    let v = self.word(&raw, depth, cds)?;
                    argv_items.push(v);
                }
            }
            match item {
                Item::IoRedirect(io) => {
                    let mut rs = Vec::new();
                    self.redirect(io, depth, cds, &mut rs)?;
                    if let ast::IoRedirect::HereDocument(_, h) = io {
                        cmd.stdin = Stdin::Text(self.heredoc(h, depth, cds)?);
                    } else if let ast::IoRedirect::HereString(_, w) = io {
                        cmd.stdin = Stdin::Text(self.word(&w.value, depth, cds)?);
                    } else if rs.iter().any(|r| r.op == "<") {
                        cmd.stdin = Stdin::Unknown;
                    }
                    cmd.redirects.extend(rs);
                }
                Item::Word(w) => {
                    for raw in brace_expand(&w.value)? {
                        let v = self.word(&raw, depth, cds)?;
                        // An unquoted expansion that is empty is no word at all.
                        if v.is_empty() && raw.starts_with('$') && !raw.contains(['"', '\'']) {
                            continue;
                        }
                        argv_items.push(v);
                    }
                }
                Item::AssignmentWord(a, w) => {
                    let name = match &a.name {
                        ast::AssignmentName::VariableName(n) => n.clone(),
                        ast::AssignmentName::ArrayElementName(n, _) => n.clone(),
                    };
                    let value = match &a.value {
                        ast::AssignmentValue::Scalar(v) => self.word(&v.value, depth, cds)?,
                        ast::AssignmentValue::Array(items) => {
                            let mut vs = Vec::new();
                            for (_, v) in items {
                                vs.push(self.word(&v.value, depth, cds)?);
                            }
                            vs.join(" ")
                        }
                    };
                    if i < prog_at || s.word_or_name.is_none() {
                        cmd.assignments.push((name, value));
                    } else {
                        // `export A=b` after the program: an argument, as written.
                        let _ = w;
                        argv_items.push(format!("{name}={value}"));
                    }
                }
                Item::ProcessSubstitution(_, sub) => {
                    let mut local = cds.clone();
                    self.list(&sub.list, depth + 1, &mut local)?;
                    argv_items.push("/dev/fd/63".into());
                }
            }
        }
        if prog_at == items.len()
            && let Some(w) = &s.word_or_name
        {
            for raw in brace_expand(&w.value)? {
                let v = self.word(&raw, depth, cds)?;
                argv_items.push(v);
            }
        }
        cmd.argv = argv_items;
        // What the shell itself remembers for the rest of the line.
        match cmd.argv.first().map(String::as_str) {
            None => {
                for (n, v) in &cmd.assignments {
                    let known = (!v.contains('$')).then(|| v.clone());
                    self.vars.insert(n.clone(), known);
                }
            }
            Some("cd" | "pushd") => {
                let target = cmd
                    .argv
                    .iter()
                    .skip(1)
                    .find(|a| !a.starts_with('-') || a.as_str() == "-")
                    .cloned()
                    .unwrap_or_else(|| "~".into());
                // With CDPATH set, `cd name` may go to any directory CDPATH lists.
                let searched = !(target.starts_with('/')
                    || target.starts_with("./")
                    || target.starts_with("../")
                    || target == "."
                    || target == "..");
                if searched && self.vars.contains_key("CDPATH") {
                    cds.push(unknown("CDPATH"));
                } else {
                    cds.push(target);
                }
            }
            Some("printf") if cmd.argv.iter().skip(1).any(|a| a.starts_with("-v")) => {
                self.problem(
                    "printf -v sets a variable from a format: its value is not followed".into(),
                );
            }
            Some("popd") => cds.push(unknown("OLDPWD")),
            Some("export" | "local" | "declare" | "typeset" | "readonly") => {
                if cmd
                    .argv
                    .iter()
                    .skip(1)
                    .any(|a| a.starts_with('-') && a.contains('n'))
                {
                    self.problem(format!(
                        "{} -n makes a name stand for another variable: not followed",
                        cmd.argv[0]
                    ));
                }
                for a in cmd.argv.iter().skip(1) {
                    if let Some((n, v)) = a.split_once('=') {
                        let known = (!v.contains('$')).then(|| v.to_string());
                        self.vars.insert(n.to_string(), known);
                    }
                }
            }
            Some("read" | "mapfile" | "readarray" | "getopts") => {
                for a in cmd.argv.iter().skip(1).filter(|a| !a.starts_with('-')) {
                    self.vars.insert(a.clone(), None);
                }
            }
            Some(p) => cmd.function_call = self.functions.contains(p),
        }
        self.push(cmd)
    }

    fn heredoc(
        &mut self,
        h: &ast::IoHereDocument,
        depth: usize,
        cds: &[String],
    ) -> Result<String, ParseError> {
        if !h.requires_expansion {
            return Ok(h.doc.value.clone());
        }
        let opts = &self.opts;
        match guarded(|| {
            word::parse_heredoc(&h.doc.value, opts).map_err(|e| ParseError(e.to_string()))
        }) {
            Ok(pieces) => {
                let mut s = String::new();
                self.pieces(&pieces, depth, cds, &mut s)?;
                Ok(s)
            }
            Err(e) => Err(ParseError(format!("cannot parse a here-document: {e}"))),
        }
    }

    fn redirect(
        &mut self,
        io: &ast::IoRedirect,
        depth: usize,
        cds: &[String],
        out: &mut Vec<Redirect>,
    ) -> Result<(), ParseError> {
        use ast::IoFileRedirectTarget as T;
        match io {
            ast::IoRedirect::File(_, kind, target) => {
                let (op, writes) = match kind {
                    IoFileRedirectKind::Read => ("<", false),
                    IoFileRedirectKind::Write => (">", true),
                    IoFileRedirectKind::Append => (">>", true),
                    IoFileRedirectKind::ReadAndWrite => ("<>", true),
                    IoFileRedirectKind::Clobber => (">|", true),
                    IoFileRedirectKind::DuplicateInput => ("<&", false),
                    IoFileRedirectKind::DuplicateOutput => (">&", true),
                };
                match target {
                    T::Filename(w) => {
                        let t = self.word(&w.value, depth, cds)?;
                        out.push(Redirect {
                            op: op.into(),
                            target: t,
                            writes,
                        });
                    }
                    T::Fd(_) => {}
                    T::Duplicate(w) => {
                        let t = self.word(&w.value, depth, cds)?;
                        // `>&2`, `2>&-`: descriptors, not files.
                        if !t.bytes().all(|b| b.is_ascii_digit() || b == b'-') {
                            out.push(Redirect {
                                op: op.into(),
                                target: t,
                                writes,
                            });
                        }
                    }
                    T::ProcessSubstitution(_, sub) => {
                        let mut local = cds.to_vec();
                        self.list(&sub.list, depth + 1, &mut local)?;
                    }
                }
            }
            ast::IoRedirect::OutputAndError(w, append) => {
                let t = self.word(&w.value, depth, cds)?;
                out.push(Redirect {
                    op: if *append { "&>>" } else { "&>" }.into(),
                    target: t,
                    writes: true,
                });
            }
            ast::IoRedirect::HereDocument(..) | ast::IoRedirect::HereString(..) => {}
        }
        Ok(())
    }

    /// A word as the program would receive it; command substitutions in it are lowered
    /// (they run first) and stand as `$(...)` in the result.
    fn word(&mut self, w: &str, depth: usize, cds: &[String]) -> Result<String, ParseError> {
        if !w.contains(['\'', '"', '\\', '$', '`', '~']) {
            return Ok(w.to_string());
        }
        let opts = &self.opts;
        match guarded(|| word::parse(w, opts).map_err(|e| ParseError(e.to_string()))) {
            Ok(pieces) => {
                let mut s = String::new();
                self.pieces(&pieces, depth, cds, &mut s)?;
                Ok(s)
            }
            Err(e) => Err(ParseError(format!("cannot parse the word {w:?}: {e}"))),
        }
    }

    fn pieces(
        &mut self,
        pieces: &[word::WordPieceWithSource],
        depth: usize,
        cds: &[String],
        s: &mut String,
    ) -> Result<(), ParseError> {
        for p in pieces {
            match &p.piece {
                WordPiece::Text(t)
                | WordPiece::SingleQuotedText(t)
                | WordPiece::AnsiCQuotedText(t) => s.push_str(t),
                WordPiece::EscapeSequence(t) => s.push_str(t.strip_prefix('\\').unwrap_or(t)),
                WordPiece::DoubleQuotedSequence(inner)
                | WordPiece::GettextDoubleQuotedSequence(inner) => {
                    self.pieces(inner, depth, cds, s)?
                }
                WordPiece::TildeExpansion(t) => match t {
                    TildeExpr::Home => s.push('~'),
                    TildeExpr::UserHome(u) => {
                        s.push('~');
                        s.push_str(u);
                    }
                    TildeExpr::WorkingDir => s.push('.'),
                    _ => s.push_str(&unknown("OLDPWD")),
                },
                WordPiece::ParameterExpansion(e) => s.push_str(&self.parameter(e)),
                WordPiece::CommandSubstitution(inner)
                | WordPiece::BackquotedCommandSubstitution(inner) => {
                    self.text(inner, depth + 1, cds)?;
                    s.push_str("$(...)");
                }
                WordPiece::ArithmeticExpression(e) => {
                    self.arithmetic(&e.value, depth, cds)?;
                    // A number the line computes: not known here (`chmod 0$((4755))`).
                    s.push_str(&unknown("?"));
                }
            }
        }
        Ok(())
    }

    fn parameter(&mut self, e: &ParameterExpr) -> String {
        if let ParameterExpr::Parameter {
            parameter: Parameter::Named(name),
            indirect: false,
        } = e
        {
            return match (name.as_str(), self.vars.get(name)) {
                (_, Some(Some(v))) => v.clone(),
                (_, Some(None)) => unknown(name),
                ("HOME", None) => "$HOME".into(),
                ("PWD", None) => ".".into(),
                _ => unknown(name),
            };
        }
        if let ParameterExpr::Parameter { indirect: true, .. } = e {
            self.problem(format!(
                "an indirect expansion ({e:?}) names a variable by the value of another: not followed"
            ));
            return unknown("?");
        }
        let dbg = format!("{e:?}");
        if dbg.contains("$(") || dbg.contains('`') || dbg.contains("<(") {
            self.problem(format!(
                "a command substitution inside a parameter expansion ({dbg}) is not followed"
            ));
        }
        if dbg.contains("Named(\"HOME\")") {
            "$HOME".into()
        } else {
            unknown("?")
        }
    }
}

/// What `echo`/`printf` with fixed words prints (to feed the next command of a pipe).
fn printed_text(c: &SimpleCommand) -> Option<String> {
    let prog = c.argv.first()?;
    if c.argv.iter().any(|a| a.contains("$(...)")) {
        return None;
    }
    match prog.as_str() {
        "echo" => {
            let words: Vec<&str> = c.argv[1..]
                .iter()
                .map(String::as_str)
                .skip_while(|a| matches!(*a, "-n" | "-e" | "-E" | "-ne" | "-en"))
                .collect();
            Some(words.join(" ").replace("\\n", "\n"))
        }
        "printf" => {
            let mut rest = c.argv[1..].iter().map(String::as_str);
            let fmt = rest.next()?;
            let fmt = if fmt == "--" { rest.next()? } else { fmt };
            let args: Vec<&str> = rest.collect();
            Some(format!("{}\n{}", fmt.replace("\\n", "\n"), args.join("\n")))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progs(line: &str) -> Vec<String> {
        parse(line)
            .unwrap()
            .commands
            .iter()
            .filter_map(|c| c.argv.first().cloned())
            .collect()
    }

    #[test]
    fn control_flow_keywords_are_not_programs() {
        assert_eq!(
            progs("for f in a b; do wc -l \"$f\"; done"),
            ["wc", "wc"],
            "unrolled over fixed values"
        );
        assert_eq!(
            progs("if test -f x; then cat x; elif true; then :; else echo no; fi"),
            ["test", "cat", "true", ":", "echo"]
        );
        assert_eq!(
            progs("while read l; do echo \"$l\"; done < f"),
            ["read", "echo"]
        );
        assert_eq!(progs("case $x in a) ls;; *) pwd;; esac"), ["ls", "pwd"]);
        assert_eq!(progs("f() { rm x; }; f"), ["rm", "f"]);
        assert!(parse("f() { rm x; }; f").unwrap().commands[1].function_call);
    }

    #[test]
    fn substitutions_heredocs_and_words() {
        assert_eq!(
            progs("echo $(date) `whoami` <(ls) > >(cat)"),
            ["date", "whoami", "ls", "cat", "echo"]
        );
        let c = parse("cat <<'EOF' > out\nhello $x\nEOF\n").unwrap();
        assert_eq!(c.commands[0].stdin, Stdin::Text("hello $x\n".into()));
        assert_eq!(c.commands[0].redirects[0].target, "out");
        let c = parse("X=/etc; cat \"$X/passwd\" ~/k 'a b'").unwrap();
        assert_eq!(c.commands[1].argv, ["cat", "/etc/passwd", "~/k", "a b"]);
        let c = parse("printf 'curl x\\n' | sh").unwrap();
        assert!(matches!(&c.commands[1].stdin, Stdin::Text(t) if t.starts_with("curl x\n")));
        let c = parse("cd sub && (cd .. ; ls) && ls").unwrap();
        assert_eq!(c.commands[2].cds, ["sub", ".."]);
        assert_eq!(c.commands[3].cds, ["sub"]);
    }

    #[test]
    fn errors_fail_closed() {
        assert!(parse("echo 'unterminated").is_err());
        assert!(parse(&("$(".repeat(100) + "ls" + &")".repeat(100))).is_err());
        assert!(parse(&("(".repeat(10_000) + "ls" + &")".repeat(10_000))).is_err());
        assert!(parse("if true; then").is_err());
        let deep = "if true; then ".repeat(5000) + "ls" + &"; fi".repeat(5000);
        assert!(parse(&deep).is_err());
    }
}
