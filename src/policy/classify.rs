//! Classification: every simple command of a line, and every program, script and code
//! it runs in turn (unwrapped to any depth, up to a limit past which the answer is
//! `require_approval`), becomes findings: the rules' category for the program, plus what
//! its arguments, redirections, environment and paths make it do.

use std::path::Path;

use super::analysis::Analysis;
use super::decision::{Category, Finding};
use super::grammar::{self, Lowered, MAX_NESTING, SimpleCommand, Stdin};
use super::paths::{self, Verdict, Where};
use super::{Policy, envvars, scripts, tools};

/// Programs inside programs (`env timeout nice xargs sh -c ...`) followed before the
/// answer is `unknown`.
pub const MAX_WRAPPING: usize = 32;
/// Findings one decision collects before it stops looking (it is already strict).
const MAX_FINDINGS: usize = 512;

/// Directories programs may be run from by absolute path.
const SYSTEM_BIN: &[&str] = &[
    "/usr/bin/",
    "/bin/",
    "/usr/local/bin/",
    "/usr/sbin/",
    "/sbin/",
];

pub(super) struct Classifier<'a> {
    pub policy: &'a Policy,
    pub ws: Option<&'a Path>,
    pub links: Option<&'a dyn super::Links>,
    pub out: Vec<Finding>,
}

impl Classifier<'_> {
    pub fn add(&mut self, program: &str, category: Category, rule: &str, reason: String) {
        if self.out.len() >= MAX_FINDINGS {
            return;
        }
        self.out.push(Finding {
            program: program.to_string(),
            category,
            action: self.policy.action_for(category),
            rule: rule.to_string(),
            reason,
            network: false,
        });
    }

    /// A shell script found at nesting `depth`, run in `dir`.
    pub fn script(&mut self, program: &str, text: &str, depth: usize, dir: &Where) {
        if depth > MAX_NESTING {
            self.add(
                program,
                Category::Unknown,
                "nested-too-deep",
                format!("scripts nest more than {MAX_NESTING} levels deep"),
            );
            return;
        }
        match grammar::parse_at(text, depth) {
            Ok(l) => self.lowered(program, &l, depth, dir),
            Err(e) => self.add(
                program,
                Category::Unknown,
                "unparseable",
                format!("cannot parse the command: {e}"),
            ),
        }
    }

    pub fn lowered(&mut self, program: &str, l: &Lowered, depth: usize, dir: &Where) {
        for p in &l.problems {
            self.add(program, Category::Unknown, "not-understood", p.clone());
        }
        for c in &l.commands {
            self.command(c, depth, dir);
        }
    }

    pub fn command(&mut self, c: &SimpleCommand, depth: usize, base: &Where) {
        let dir = c
            .cds
            .iter()
            .fold(base.clone(), |d, t| paths::change_dir(&d, t, self.ws));
        let prog = c.argv.first().map(String::as_str).unwrap_or("");
        match &dir {
            Where::Outside(why) => self.add(
                prog,
                Category::HostEscapeRisk,
                "cd-outside",
                format!("runs after a cd outside the workspace ({why})"),
            ),
            Where::Unknown => self.add(
                prog,
                Category::Unknown,
                "cd-unknown",
                "runs after a cd to a directory the line does not give".into(),
            ),
            Where::In(_) => {}
        }
        for (n, v) in &c.assignments {
            self.env(prog, n, v, &dir);
        }
        if matches!(
            prog,
            "export" | "declare" | "typeset" | "local" | "readonly"
        ) {
            // `export PATH=/evil:$PATH; ls` changes what later commands run just as a
            // `PATH=/evil ls` prefix does (PATH, LD_* and the like are exported already,
            // so even a plain `declare` or `local` counts).
            for a in c.argv.iter().skip(1).filter(|a| !a.starts_with('-')) {
                if let Some((n, v)) = a.split_once('=') {
                    self.env(prog, n, v, &dir);
                }
            }
        }
        for r in &c.redirects {
            match self.verdict(&r.target, &dir) {
                Verdict::Outside(why) => self.add(
                    prog,
                    Category::HostEscapeRisk,
                    "path-outside",
                    format!("redirection to {}: {why}", r.target),
                ),
                Verdict::Network => self.add(
                    prog,
                    Category::Networked,
                    "dev-tcp",
                    format!("redirection to {} opens a network connection", r.target),
                ),
                Verdict::Device => {}
                Verdict::Inside | Verdict::NotJudged => {
                    if r.writes {
                        self.add(
                            prog,
                            Category::Mutating,
                            "redirect-write",
                            format!("writes {} with {}", r.target, r.op),
                        );
                    }
                }
            }
        }
        if c.argv.is_empty() {
            return;
        }
        self.program(&c.argv, depth, &dir, &c.stdin, c.function_call, 0);
    }

    fn env(&mut self, prog: &str, name: &str, value: &str, dir: &Where) {
        for e in envvars::classify(name, value, dir, self.ws) {
            self.add(prog, e.category, e.rule, e.reason);
        }
    }

    /// One program with its arguments; `wrapping` counts the programs around it.
    pub fn program(
        &mut self,
        argv: &[String],
        depth: usize,
        dir: &Where,
        stdin: &Stdin,
        function_call: bool,
        wrapping: usize,
    ) {
        let prog = argv[0].as_str();
        if wrapping > MAX_WRAPPING {
            self.add(
                prog,
                Category::Unknown,
                "wrapped-too-deep",
                format!("programs run programs more than {MAX_WRAPPING} levels deep"),
            );
            return;
        }
        if prog.is_empty() || prog.starts_with('$') {
            self.add(
                prog,
                Category::Unknown,
                "dynamic-program",
                format!("runs a program the line does not name ({prog:?})"),
            );
            self.arguments(argv, &Analysis::default(), dir);
            return;
        }
        if function_call {
            // Its body was classified where the line defines it.
            self.arguments(argv, &Analysis::default(), dir);
            return;
        }
        if prog.contains('/')
            && !SYSTEM_BIN
                .iter()
                .any(|p| prog.starts_with(p) && !prog.contains(".."))
        {
            match paths::judge(prog, dir, self.ws) {
                Verdict::Outside(why) => self.add(
                    prog,
                    Category::HostEscapeRisk,
                    "path-outside",
                    format!("program {prog}: {why}"),
                ),
                Verdict::Inside if tool_dir(prog) => {
                    // A tool installed in the workspace (`.venv/bin/pytest`,
                    // `node_modules/.bin/jest`): classified as that tool, at least
                    // `mutating` (it is workspace code).
                    let f = self.policy.finding_for(argv, &[]);
                    let c = f.category.max(Category::Mutating);
                    self.add(
                        prog,
                        c,
                        "workspace-tool",
                        format!("runs {prog}, installed in the workspace"),
                    );
                }
                Verdict::Inside => self.add(
                    prog,
                    Category::Unknown,
                    "workspace-program",
                    format!("runs {prog} from the workspace: no rule knows what it does"),
                ),
                _ => self.add(
                    prog,
                    Category::Unknown,
                    "dynamic-program",
                    format!("runs {prog}, which the line does not give"),
                ),
            }
        }
        let a = tools::analyze(argv, stdin);
        // A program named by a path outside the system's bin directories is judged by
        // the workspace-program rule, not by the rules for its basename.
        let system_program = !prog.contains('/') || SYSTEM_BIN.iter().any(|p| prog.starts_with(p));
        if !a.transparent && system_program {
            let f = self.policy.finding_for(argv, &a.rule_argv);
            if self.out.len() < MAX_FINDINGS {
                self.out.push(f);
            }
        }
        for e in &a.effects {
            self.add(prog, e.category, e.rule, e.reason.clone());
        }
        self.arguments(argv, &a, dir);
        for (n, v) in &a.env {
            self.env(prog, n, v, dir);
        }
        for code in &a.code {
            let c = scripts::code(code, prog);
            for e in &c.effects {
                self.add(prog, e.category, e.rule, e.reason.clone());
            }
            self.paths(prog, &c.reads, false, dir);
        }
        let inner_dir = match &a.chdir {
            Some(d) => paths::change_dir(dir, d, self.ws),
            None => dir.clone(),
        };
        for inner in &a.inner {
            if !inner.is_empty() {
                self.program(
                    inner,
                    depth,
                    &inner_dir,
                    &Stdin::Inherited,
                    false,
                    wrapping + 1,
                );
            }
        }
        for s in &a.scripts {
            self.script(prog, s, depth + 1, &inner_dir);
        }
    }

    /// Checks every word that could be a path: operands, values attached to options
    /// (`-o/x`, `--output=/x`, `-C/dir`), `key=value` operands (`of=/x`), and the files
    /// the analysis found.
    fn arguments(&mut self, argv: &[String], a: &Analysis, dir: &Where) {
        let prog = argv[0].as_str();
        for (i, w) in argv.iter().enumerate().skip(1) {
            if a.not_paths.contains(&i) {
                continue;
            }
            for cand in candidates(w) {
                self.judge(prog, cand, dir, false);
            }
        }
        self.paths(prog, &a.reads, false, dir);
        self.paths(prog, &a.writes, true, dir);
    }

    fn paths(&mut self, prog: &str, list: &[String], _writes: bool, dir: &Where) {
        for p in list {
            self.judge(prog, p, dir, true);
        }
    }

    /// Where a path the line names leads: as the line says, then, for a run that sees the
    /// host (`links` given), through the workspace's symlinks.
    fn verdict(&self, word: &str, dir: &Where) -> Verdict {
        let v = paths::judge(word, dir, self.ws);
        match (v, self.links) {
            (Verdict::Inside, Some(links)) => match paths::inside(word, dir, self.ws) {
                Some(comps) => links.follow(&comps),
                None => Verdict::Inside,
            },
            (v, _) => v,
        }
    }

    /// True if a bare word (`cat leak`) names a symlink of the workspace that leads out of
    /// it: only asked when the run sees the host.
    fn is_link(&self, word: &str, dir: &Where) -> bool {
        self.links.is_some()
            && !word.is_empty()
            && !word.starts_with('-')
            && matches!(self.verdict(word, dir), Verdict::Outside(_))
    }

    fn judge(&mut self, prog: &str, cand: &str, dir: &Where, named: bool) {
        if !named && !paths::looks_like_path(cand) && !self.is_link(cand, dir) {
            return;
        }
        match self.verdict(cand, dir) {
            Verdict::Outside(why) => self.add(
                prog,
                Category::HostEscapeRisk,
                "path-outside",
                format!("{cand}: {why}"),
            ),
            Verdict::Network => self.add(
                prog,
                Category::Networked,
                "dev-tcp",
                format!("{cand} opens a network connection"),
            ),
            _ => {}
        }
    }
}

/// Directories where package managers install tools into a project.
fn tool_dir(prog: &str) -> bool {
    [
        "node_modules/.bin/",
        ".venv/bin/",
        "venv/bin/",
        ".tox/",
        "target/debug/build/",
    ]
    .iter()
    .any(|d| prog.contains(d))
}

/// The parts of one argument that may be paths.
fn candidates(w: &str) -> Vec<&str> {
    if w == "-" || w == "--" || w.contains("://") {
        return vec![];
    }
    if let Some(long) = w.strip_prefix("--") {
        return long
            .split_once('=')
            .map(|(_, v)| vec![v])
            .unwrap_or_default();
    }
    if let Some(short) = w.strip_prefix('-') {
        if let Some((_, v)) = short.split_once('=') {
            return vec![v];
        }
        // `-o/tmp/x`, `-C../x`, `-t~/x`: the value starts where a path would.
        let at = [short.find('/'), short.find('~'), short.find("..")]
            .into_iter()
            .flatten()
            .min();
        return at.map(|k| vec![&short[k..]]).unwrap_or_default();
    }
    let mut out = vec![w];
    if let Some((k, v)) = w.split_once('=')
        && !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
    {
        out.push(v);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::candidates;

    #[test]
    fn attached_values_are_candidates() {
        assert_eq!(candidates("-o/tmp/x"), ["/tmp/x"]);
        assert_eq!(candidates("-C../x"), ["../x"]);
        assert_eq!(candidates("--output=/tmp/x"), ["/tmp/x"]);
        assert_eq!(candidates("of=/tmp/x"), ["of=/tmp/x", "/tmp/x"]);
        assert_eq!(candidates("-la"), Vec::<&str>::new());
        assert_eq!(candidates("https://x/y"), Vec::<&str>::new());
    }
}
