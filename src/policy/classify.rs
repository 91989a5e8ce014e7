//! Classification: every simple command of a line, and every program, script and code
//! it runs in turn (unwrapped to any depth, up to a limit past which the answer is
//! `require_approval`), becomes findings: the rules' category for the program, plus what
//! its arguments, redirections, environment and paths make it do.

use std::path::Path;

use super::analysis::Analysis;
use super::decision::{Category, Finding};
use super::grammar::{self, Lowered, MAX_NESTING, SimpleCommand, Stdin};
use super::paths::{self, Verdict, Where};
use super::sandboxed::{Protected, View};
use super::{Policy, envvars, scripts, tools};

/// Programs inside programs (`env timeout nice xargs sh -c ...`) followed before the
/// answer is `unknown`.
pub const MAX_WRAPPING: usize = 32;
/// Why a host path the sandbox does not show is contained.
const HIDDEN: &str = "is on the host outside what the sandbox shows: hidden or read-only there";

const ABOVE: &str = "is above the workspace: the sandbox shows it read-only or not at all";

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
    /// The sandbox's view of the host, for a sandboxed run.
    pub view: Option<&'a View>,
    pub protected: Option<&'a Protected>,
    pub out: Vec<Finding>,
    /// Findings were dropped at the cap: the line was not read to its end.
    pub truncated: bool,
}

impl Classifier<'_> {
    pub fn add(&mut self, program: &str, category: Category, rule: &str, reason: String) {
        if self.out.len() >= MAX_FINDINGS {
            self.truncated = true;
            return;
        }
        self.out.push(Finding {
            program: program.to_string(),
            category,
            action: self.policy.action_for(category),
            rule: rule.to_string(),
            reason,
            network: false,
            explicit: false,
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
        let sandbox_dir = match &dir {
            Where::Outside(_) if self.view.is_some() => self.host_dir(base, &c.cds),
            _ => None,
        };
        match &dir {
            Where::Outside(_) if sandbox_dir.is_some() => self.add(
                prog,
                Category::ReadOnly,
                "cd-outside",
                format!(
                    "runs in {} ({})",
                    sandbox_dir.as_deref().unwrap_or_default(),
                    "outside the workspace, contained by the sandbox"
                ),
            ),
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
        let dir = match sandbox_dir {
            Some(abs) => Where::Outside(format!("sandbox:{abs}")),
            None => dir,
        };
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
            match self.verdict_for(&r.target, &dir, r.writes) {
                Verdict::Outside(why) => {
                    self.add(
                        prog,
                        Category::HostEscapeRisk,
                        "path-outside",
                        format!("redirection to {}: {why}", r.target),
                    );
                    self.secret_asks(&r.target, &dir);
                }
                Verdict::Network => self.add(
                    prog,
                    Category::Networked,
                    "dev-tcp",
                    format!("redirection to {} opens a network connection", r.target),
                ),
                Verdict::Device => {}
                Verdict::Inside | Verdict::NotJudged => {
                    if r.writes {
                        self.git_config_write(prog, &r.target);
                    }
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

    pub fn env(&mut self, prog: &str, name: &str, value: &str, dir: &Where) {
        let contained = |p: &str| self.contained(p, dir).is_some();
        let effects = envvars::classify(name, value, dir, self.ws, &contained);
        for e in effects {
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
            match self.verdict(prog, dir) {
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
            let mut f = self.policy.finding_for(argv, &a.rule_argv);
            if self.view.is_some() {
                super::loopback::contain(&mut f, argv);
            }
            if self.out.len() < MAX_FINDINGS {
                self.out.push(f);
            } else {
                self.truncated = true;
            }
        }
        for e in &a.effects {
            self.add(prog, e.category, e.rule, e.reason.clone());
        }
        if let Some(w) = publishes(argv) {
            self.add(
                prog,
                Category::Networked,
                "publishes",
                format!("{w}: publishing, uploading or deploying goes out of the sandbox"),
            );
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
        let preserves = matches!(super::rules::basename(prog), "cp" | "rsync")
            && argv.iter().skip(1).any(|w| {
                w.starts_with("--preserve")
                    || w == "--archive"
                    || (w.starts_with('-') && !w.starts_with("--") && w.contains(['a', 'p']))
            });
        for (i, w) in argv.iter().enumerate().skip(1) {
            if a.not_paths.contains(&i) {
                continue;
            }
            for cand in candidates(w) {
                self.judge(prog, cand, dir, false);
                if preserves && cand.starts_with('/') && self.contained(cand, dir).is_some() {
                    // A system file copied with its modes keeps a setuid bit into the
                    // workspace, and from there to wherever it is exported.
                    self.add(
                        prog,
                        Category::Unknown,
                        "setuid",
                        format!("copies {cand} with its modes (a setuid bit too)"),
                    );
                }
            }
        }
        self.paths(prog, &a.reads, false, dir);
        self.paths(prog, &a.writes, true, dir);
        for w in &a.writes {
            self.git_config_write(prog, w);
        }
        if matches!(
            super::rules::basename(prog),
            "cp" | "mv" | "tee" | "install" | "ln" | "rsync" | "dd" | "sed" | "patch"
        ) {
            for w in argv.iter().skip(1) {
                self.git_config_write(prog, w);
            }
        }
    }

    /// In the sandbox, a path outside it is contained unless it is avfs's own (denied)
    /// or a secret: a person is asked for a secret (the finding just added).
    fn secret_asks(&mut self, word: &str, dir: &Where) {
        let Some(view) = self.view else { return };
        let own = self
            .host_path(word, dir)
            .is_some_and(|abs| self.protected.is_some_and(|p| p.covers(&abs).is_some()));
        if own || !view.names_secret(word) {
            return;
        }
        if let Some(f) = self.out.last_mut()
            && f.rule == "path-outside"
        {
            // A person is asked for a secret unless the policy says less.
            f.action = f.action.min(super::Action::RequireApproval);
            f.rule = "secret".into();
            f.reason = format!("{}: a secret the sandbox hides; a person decides", f.reason);
        }
    }

    /// A write to git's own configuration or hooks: later git commands run what it
    /// says (`echo '[alias] x = !cmd' >> .git/config && git x`).
    fn git_config_write(&mut self, prog: &str, target: &str) {
        let t = target.trim_start_matches("of=");
        let hit = t == ".git/config"
            || t.ends_with("/.git/config")
            || t.contains(".git/hooks/")
            || t.ends_with(".git/hooks")
            || t.contains(".git/info/attributes");
        if hit {
            self.add(
                prog,
                Category::Unknown,
                "git-config-write",
                format!("writes {t}: later git commands run what git's configuration says"),
            );
        }
    }

    fn paths(&mut self, prog: &str, list: &[String], writes: bool, dir: &Where) {
        for p in list {
            self.judge_for(prog, p, dir, true, writes);
        }
    }

    /// Where a path the line names leads: as the line says, then, for a run that sees the
    /// host (`links` given), through the workspace's symlinks.
    fn verdict(&self, word: &str, dir: &Where) -> Verdict {
        self.verdict_for(word, dir, false)
    }

    /// [`Self::verdict`] for a path the program writes (`writes`): the sandbox shows the
    /// system directories read-only, so a write there is no business of the run.
    fn verdict_for(&self, word: &str, dir: &Where, _writes: bool) -> Verdict {
        let v = paths::judge(word, dir, self.ws);
        if let Verdict::Outside(why) = &v {
            let abs = self.host_path(word, dir);
            if let (Some(p), Some(abs)) = (self.protected, &abs)
                && let Some(own) = p.covers(abs)
            {
                return Verdict::Outside(own);
            }
            if self.view.is_some() {
                return match self.contained(word, dir) {
                    Some(_) => Verdict::Inside,
                    None => Verdict::Outside(why.clone()),
                };
            }
        }
        match (v, self.links) {
            (Verdict::Inside, Some(links)) => match paths::inside(word, dir, self.ws) {
                Some(comps) => links.follow(&comps),
                None => Verdict::Inside,
            },
            (v, _) => v,
        }
    }

    /// The host path `word` leads to, where the line gives it (also after a `cd` out of
    /// the workspace, in a sandboxed run).
    fn host_path(&self, word: &str, dir: &Where) -> Option<String> {
        match dir {
            Where::Outside(abs) if abs.starts_with("sandbox:") => {
                let base = &abs["sandbox:".len()..];
                if word.starts_with('/') {
                    paths::host_path(word, dir, self.ws)
                } else {
                    paths::host_path(&format!("{base}/{word}"), dir, self.ws)
                }
            }
            _ => paths::host_path(word, dir, self.ws),
        }
    }

    /// Why the sandbox contains what `word` names, when the run is sandboxed: a path it
    /// shows read-only or gives the run privately, or a relative climb above the
    /// workspace (the host there is hidden or read-only). Never avfs's own files.
    pub fn contained(&self, word: &str, dir: &Where) -> Option<&'static str> {
        let view = self.view?;
        if paths::names_home(word) {
            // The sandbox hides the home but for the toolchains; its secrets are asked
            // for by name.
            return (!view.names_secret(word)).then_some(HIDDEN);
        }
        if word.starts_with('$') {
            return None;
        }
        match self.host_path(word, dir) {
            Some(abs) => self.contains_abs(&abs, !word.starts_with('/')),
            None if !word.starts_with('/') && !matches!(dir, Where::Unknown) => Some(ABOVE),
            None => None,
        }
    }

    fn contains_abs(&self, abs: &str, relative: bool) -> Option<&'static str> {
        let view = self.view?;
        if self.protected.is_some_and(|p| p.covers(abs).is_some()) {
            return None;
        }
        if let Some(why) = view.contains(abs) {
            return Some(why);
        }
        if view.names_secret(abs) {
            return None;
        }
        Some(if relative { ABOVE } else { HIDDEN })
    }

    /// The host directory a line's `cd`s lead to from `base`, for a sandboxed run, when
    /// the sandbox contains it; `None` otherwise (the home, a variable, a hidden path).
    fn host_dir(&self, base: &Where, cds: &[String]) -> Option<String> {
        let mut dir = base.clone();
        let mut abs: Option<String> = None;
        for t in cds {
            if paths::names_home(t) || t.starts_with('$') || t == "-" {
                return None;
            }
            let from = match &abs {
                Some(a) => Where::Outside(format!("sandbox:{a}")),
                None => dir.clone(),
            };
            if abs.is_none()
                && let w @ Where::In(_) = paths::change_dir(&from, t, self.ws)
            {
                dir = w;
                continue;
            }
            let p = self.host_path(t, &from)?;
            if let w @ Where::In(_) = paths::change_dir(&Where::In(vec![]), &p, self.ws) {
                dir = w;
                abs = None;
                continue;
            }
            self.contains_abs(&p, !t.starts_with('/'))?;
            abs = Some(p);
        }
        abs
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
        self.judge_for(prog, cand, dir, named, false)
    }

    fn judge_for(&mut self, prog: &str, cand: &str, dir: &Where, named: bool, writes: bool) {
        // Run from a host directory (a sandboxed `cd ..`), any word may name a file there.
        let on_host = matches!(dir, Where::Outside(d) if d.starts_with("sandbox:"));
        let may_name_a_file = named
            || paths::looks_like_path(cand)
            || self.is_link(cand, dir)
            || (on_host && !cand.is_empty());
        if !may_name_a_file {
            return;
        }
        let verdict = self.verdict_for(cand, dir, writes);
        if let Some(view) = self.view
            && !matches!(verdict, Verdict::Outside(_))
            && view.names_secret(cand)
        {
            // `H=$HOME; cat $H/.ssh/id`: the line does not give the path, but it names a
            // secret the sandbox hides.
            self.add(
                prog,
                Category::HostEscapeRisk,
                "path-outside",
                format!("{cand}: names a secret"),
            );
            if let Some(f) = self.out.last_mut() {
                // A person is asked for a secret unless the policy says less.
                f.action = f.action.min(super::Action::RequireApproval);
                f.rule = "secret".into();
            }
        }
        match verdict {
            Verdict::Outside(why) => {
                self.add(
                    prog,
                    Category::HostEscapeRisk,
                    "path-outside",
                    format!("{cand}: {why}"),
                );
                self.secret_asks(cand, dir);
            }
            Verdict::Network => self.add(
                prog,
                Category::Networked,
                "dev-tcp",
                format!("{cand} opens a network connection"),
            ),
            Verdict::NotJudged
                if self.view.is_none()
                    && cand.contains('/')
                    && (cand.starts_with("$(") || cand.starts_with("${")) =>
            {
                // Unconfined, a path the line builds from output or a variable it does
                // not set could be any host path.
                self.add(
                    prog,
                    Category::Unknown,
                    "unknown-path",
                    format!("{cand}: a path the line does not give"),
                )
            }
            _ => {}
        }
    }
}

/// Words that say a command publishes, uploads or deploys.
const PUBLISH_WORDS: &[&str] = &["publish", "deploy", "upload"];

/// The word that says `argv` publishes, uploads or deploys, if one does: a subcommand or
/// package script (`uv publish`, `wrangler pages deploy`, `yarn crowdin:upload`), a flag
/// (`--publish`, `--push`), or a program or script named for it (`publish-crates.py`,
/// `ui_release.sh`). Paths and file names among the arguments are not words.
pub(super) fn publishes(argv: &[String]) -> Option<&str> {
    let segments = |w: &str| -> bool {
        w.split([':', '-', '_', '=', '.'])
            .any(|s| PUBLISH_WORDS.contains(&s.to_ascii_lowercase().as_str()))
    };
    let named = |w: &str| segments(super::rules::basename(w));
    if matches!(
        super::rules::basename(&argv[0]),
        "echo" | "printf" | "test" | "[" | "export" | "grep" | "rg"
    ) {
        // Words they print or look for.
        return None;
    }
    if named(&argv[0]) {
        return Some(&argv[0]);
    }
    for (i, w) in argv.iter().enumerate().skip(1) {
        if w.starts_with("--") {
            if matches!(w.as_str(), "--push" | "--publish" | "--deploy" | "--upload")
                || w.strip_prefix("--")
                    .and_then(|o| o.split_once('='))
                    .is_some_and(|(_, v)| v.split(',').any(|x| PUBLISH_WORDS.contains(&x)))
            {
                return Some(w);
            }
            continue;
        }
        if w.starts_with('-') {
            continue;
        }
        // An interpreter's script: `python3 scripts/publish-crates.py`.
        if i == 1
            && w.contains('/')
            && (w.ends_with(".py") || w.ends_with(".sh") || w.ends_with(".js"))
            && named(w)
        {
            return Some(w);
        }
        if !w.contains(['/', '.', ' ']) && segments(w) {
            return Some(w);
        }
    }
    None
}

/// Directories where package managers install tools into a project.
fn tool_dir(prog: &str) -> bool {
    [
        "node_modules/.bin/",
        ".venv/bin/",
        "venv/bin/",
        "env/bin/",
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
