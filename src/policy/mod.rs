//! The policy: decides what a command may do before anything runs. It parses the line
//! with a real shell grammar (`grammar`), normalizes every path before checking it
//! (`paths`), follows wrappers, nested scripts and inline code (`wrappers`, `scripts`,
//! `git`, `tools`), classifies the environment (`envvars`) and each program by the rules
//! (`rules`): the strictest finding wins, and what it cannot understand needs approval
//! (it never fails open). No SQL, no processes: the boundary calls [`Policy::decide`].

mod analysis;
mod braces;
mod builtin;
mod classify;
pub mod corpus;
mod decision;
mod envvars;
mod git;
pub mod grammar;
mod loopback;
pub mod paths;
mod payloads;
mod rules;
pub mod sandboxed;
mod scripts;
mod shell_input;
mod tools;
mod wrappers;

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::sandbox::config::{SandboxConfig, SandboxFile};

pub use builtin::{builtin_defaults, builtin_rules};
pub use decision::{Action, Category, Decision, Finding};
pub use rules::Rule;

use classify::Classifier;
use decision::combine;
use grammar::{SimpleCommand, Stdin};
use paths::Where;

/// A command as the agent gave it.
#[derive(Debug, Clone, Copy)]
pub enum CommandLine<'a> {
    /// A shell line, run with `sh -c`.
    Shell(&'a str),
    /// A program and its arguments, run as they are.
    Argv(&'a [String]),
}

/// What the boundary asks the policy about.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub command: CommandLine<'a>,
    /// The directory it runs in, as components below the workspace root.
    pub cwd: &'a [String],
    /// `--env K=V` pairs it runs with.
    pub env: &'a [(String, String)],
    /// The workspace's path on the host as the command sees it, when known: absolute
    /// paths below it are inside the workspace.
    pub workspace: Option<&'a Path>,
    /// The workspace's own tree, when the command will see it unconfined
    /// (`--no-sandbox`): a path the line names inside the workspace is then judged where
    /// its symlinks really lead (`hostroot/etc/x` with `hostroot -> /` is a host path).
    pub links: Option<&'a dyn Links>,
    /// The command runs in the sandbox: what it contains runs unattended (unknown
    /// programs, reads of the system directories it shows, its private `/tmp`). Without
    /// it the strict reading holds.
    pub sandboxed: bool,
    /// avfs's own files (its home, the vault file): a line naming them is denied.
    pub protected: Option<&'a sandboxed::Protected>,
}

/// Follows the symlinks of the workspace's tree along a path the line names.
pub trait Links {
    /// The verdict for `comps` (components below the workspace root) once the symlinks
    /// on it are followed: `Inside` when they stay in the workspace (or nothing there is
    /// a symlink, or the path does not exist yet), `Outside` when one leads out of it.
    fn follow(&self, comps: &[String]) -> paths::Verdict;
}

impl std::fmt::Debug for dyn Links + '_ {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Links")
    }
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    defaults: BTreeMap<Category, Action>,
    #[serde(default, rename = "rule")]
    rules: Vec<Rule>,
    #[serde(default)]
    sandbox: Option<SandboxFile>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Policy {
    pub defaults: BTreeMap<Category, Action>,
    /// User rules first (per vault, then user-wide), then the built-in ones.
    pub rules: Vec<Rule>,
    pub sources: Vec<String>,
    /// `[sandbox]`: whether and how `avfs exec` runs commands sandboxed.
    pub sandbox: SandboxConfig,
}

impl Policy {
    pub fn builtin() -> Policy {
        Policy {
            defaults: builtin_defaults(),
            rules: builtin_rules(),
            sources: vec!["built-in".into()],
            sandbox: SandboxConfig::default(),
        }
    }

    /// Built-in rules overlaid with the user-wide file and then the vault's file (either
    /// may be missing). A malformed file is an error, never ignored.
    pub fn load(files: &[&Path]) -> Result<Policy> {
        let mut p = Policy::builtin();
        let mut user_rules: Vec<Rule> = Vec::new();
        for f in files {
            let text = match std::fs::read_to_string(f) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::host(f.display(), e)),
            };
            let parsed: PolicyFile = toml::from_str(&text).map_err(|e| {
                Error::InvalidArgument(
                    f.display().to_string(),
                    format!("malformed policy file: {e}"),
                )
            })?;
            for (c, a) in parsed.defaults {
                p.defaults.insert(c, a);
            }
            if let Some(sb) = parsed.sandbox {
                p.sandbox.merge(f, sb)?;
            }
            let mut rules = parsed.rules;
            for rule in rules.iter_mut() {
                rule.source = f.display().to_string().into();
                if rule.category.is_none() && rule.decision.is_none() {
                    return Err(Error::InvalidArgument(
                        f.display().to_string(),
                        format!(
                            "rule {:?} sets neither a category nor a decision",
                            rule.name
                        ),
                    ));
                }
            }
            // Later files (the vault's) take precedence over earlier ones (the user's).
            rules.extend(user_rules);
            user_rules = rules;
            p.sources.push(f.display().to_string());
        }
        user_rules.extend(p.rules);
        p.rules = user_rules;
        Ok(p)
    }

    fn action_for(&self, c: Category) -> Action {
        self.defaults
            .get(&c)
            .copied()
            .unwrap_or(Action::RequireApproval)
    }

    fn rule_finding(&self, rule: &Rule, program: &str) -> Finding {
        let category = rule.category.unwrap_or(Category::Mutating);
        Finding {
            program: program.to_string(),
            category,
            action: rule.decision.unwrap_or_else(|| self.action_for(category)),
            rule: rule.name.to_string(),
            reason: rule.reason.to_string(),
            network: rule.network,
            explicit: rule.decision.is_some(),
        }
    }

    /// The finding of the first rule that matches. User rules see the line as written
    /// and as normalized (`alternatives`: `git` without its global options, `pip
    /// install` for `python3 -m pip install`); built-in rules see the normalized forms,
    /// and the strictest of those wins. When no rule knows a normalized form, the
    /// program's own rule decides.
    fn finding_for(&self, raw: &[String], alternatives: &[Vec<String>]) -> Finding {
        let program = raw[0].as_str();
        let forms: Vec<&[String]> = if alternatives.is_empty() {
            vec![raw]
        } else {
            alternatives.iter().map(Vec::as_slice).collect()
        };
        let mut best: Option<Finding> = None;
        for form in &forms {
            let found = self
                .rules
                .iter()
                .find(|r| r.matches(form) || (r.source != "built-in" && r.matches(raw)));
            if let Some(rule) = found {
                let f = self.rule_finding(rule, program);
                if best
                    .as_ref()
                    .is_none_or(|b| (f.action, f.category) > (b.action, b.category))
                {
                    best = Some(f);
                }
            }
        }
        if let Some(f) = best {
            return f;
        }
        if let Some(rule) = self.rules.iter().find(|r| r.matches(raw)) {
            return self.rule_finding(rule, program);
        }
        Finding {
            program: program.to_string(),
            category: Category::Unknown,
            action: self.action_for(Category::Unknown),
            rule: "unknown-program".into(),
            reason: format!("no rule knows {program:?}"),
            network: false,
            explicit: false,
        }
    }

    /// The decision for one request: the one entry point the boundary calls.
    pub fn decide(&self, req: &Request) -> Decision {
        let view = req.sandboxed.then(|| sandboxed::View::new(&self.sandbox));
        let mut c = Classifier {
            policy: self,
            ws: req.workspace,
            links: req.links,
            view: view.as_ref(),
            protected: req.protected,
            out: Vec::new(),
            truncated: false,
        };
        let dir = Where::In(req.cwd.to_vec());
        for (k, v) in req.env {
            c.env(&format!("--env {k}"), k, v, &dir);
        }
        if let Some(p) = req.protected {
            let mut texts: Vec<String> = req.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
            match req.command {
                CommandLine::Shell(line) => texts.push(line.to_string()),
                CommandLine::Argv(argv) => texts.extend(argv.iter().cloned()),
            }
            for t in &texts {
                if let Some(why) = p.named_in(t) {
                    c.add("", Category::HostEscapeRisk, "avfs-own-files", why);
                    break;
                }
            }
        }
        match req.command {
            CommandLine::Shell(line) => c.script("", line, 0, &dir),
            CommandLine::Argv([]) => {}
            CommandLine::Argv(argv) => c.command(
                &SimpleCommand {
                    argv: argv.to_vec(),
                    stdin: Stdin::Inherited,
                    ..Default::default()
                },
                0,
                &dir,
            ),
        }
        if c.truncated {
            c.out.push(Finding {
                program: String::new(),
                category: Category::Unknown,
                action: self.action_for(Category::Unknown),
                rule: "too-many-findings".into(),
                reason:
                    "the line holds more than the policy reads of one line: not read to its end"
                        .into(),
                network: false,
                explicit: false,
            });
        }
        let mut findings = c.out;
        if req.sandboxed {
            for f in findings.iter_mut() {
                sandboxed::trust(f, self.action_for(Category::Unknown));
            }
        }
        if findings.is_empty() {
            findings.push(Finding {
                program: String::new(),
                category: Category::ReadOnly,
                action: self.action_for(Category::ReadOnly),
                rule: "empty".into(),
                reason: "nothing to run".into(),
                network: false,
                explicit: false,
            });
        }
        combine(findings)
    }

    /// [`Policy::decide`] for a shell line with no `--env`.
    pub fn decide_shell(&self, line: &str, cwd: &[String], workspace: Option<&Path>) -> Decision {
        self.decide(&Request {
            command: CommandLine::Shell(line),
            cwd,
            env: &[],
            workspace,
            links: None,
            sandboxed: false,
            protected: None,
        })
    }

    /// [`Policy::decide`] for an argv with no `--env`.
    pub fn decide_argv(
        &self,
        argv: &[String],
        cwd: &[String],
        workspace: Option<&Path>,
    ) -> Decision {
        self.decide(&Request {
            command: CommandLine::Argv(argv),
            cwd,
            env: &[],
            workspace,
            links: None,
            sandboxed: false,
            protected: None,
        })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ExampleResult {
    pub rule: String,
    pub source: String,
    pub example: String,
    pub should_match: bool,
    pub matched: bool,
    pub ok: bool,
}

impl Policy {
    /// Runs every user rule's inline examples and counter-examples.
    pub fn test_examples(&self) -> Vec<ExampleResult> {
        let mut out = Vec::new();
        for rule in self.rules.iter().filter(|r| r.source != "built-in") {
            for (ex, should) in rule
                .examples
                .iter()
                .map(|e| (e, true))
                .chain(rule.counter_examples.iter().map(|e| (e, false)))
            {
                let matched = match grammar::parse(ex) {
                    Ok(l) => l.commands.iter().any(|c| rule.matches(&c.argv)),
                    Err(_) => false,
                };
                out.push(ExampleResult {
                    rule: rule.name.to_string(),
                    source: rule.source.to_string(),
                    example: ex.clone(),
                    should_match: should,
                    matched,
                    ok: matched == should,
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
