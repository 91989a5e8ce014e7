//! Rules: a program name and argument patterns mapped to a category (and optionally a
//! decision). The built-in table (`builtin`) covers common tools; policy files put their
//! rules in front of it. What a program does through its arguments (sed scripts, git -c, wrappers)
//! is found by `tools`, not here.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::decision::{Action, Category};

/// One rule: matches a program and argument patterns. Its texts borrow from the built-in
/// table where they come from it: every `avfs exec` builds the ~1 400 built-in rules, and
/// owned copies of their names, programs and reasons were most of that (0.5 M of the CLI's
/// ~5.8 M instructions for `exec -- true`, callgrind).
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub name: Cow<'static, str>,
    /// Program name (basename), `*` for any; glob `*` and `?` allowed.
    pub program: Cow<'static, str>,
    /// Patterns for the leading arguments, in order (`*` one argument, `**` the rest).
    #[serde(default)]
    pub args: Vec<String>,
    /// The rule matches only if some argument matches one of these patterns.
    #[serde(default)]
    pub any_arg: Vec<String>,
    pub category: Option<Category>,
    /// Overrides the category's decision.
    pub decision: Option<Action>,
    #[serde(default)]
    pub reason: Cow<'static, str>,
    /// Command lines the rule must match (`avfs policy test`).
    #[serde(default)]
    pub examples: Vec<String>,
    /// Command lines the rule must not match.
    #[serde(default)]
    pub counter_examples: Vec<String>,
    /// A sandboxed command this rule matches gets the network (`avfs exec --sandbox`).
    #[serde(default)]
    pub network: bool,
    #[serde(skip_deserializing)]
    pub source: Cow<'static, str>,
}

pub(crate) fn glob(pat: &str, s: &str) -> bool {
    if !pat.contains(['*', '?']) {
        // Most rules name a program outright: no need to walk characters.
        return pat == s;
    }
    let (p, t): (Vec<char>, Vec<char>) = (pat.chars().collect(), s.chars().collect());
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(sp) = star {
            pi = sp + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

/// The program's name as rules see it: its basename.
pub(crate) fn basename(prog: &str) -> &str {
    prog.rsplit('/').next().unwrap_or(prog)
}

impl Rule {
    pub fn matches(&self, argv: &[String]) -> bool {
        let Some(prog) = argv.first() else {
            return false;
        };
        if !glob(&self.program, basename(prog)) {
            return false;
        }
        let args = &argv[1..];
        for (i, pat) in self.args.iter().enumerate() {
            if pat == "**" {
                break;
            }
            match args.get(i) {
                Some(a) if glob(pat, a) => {}
                _ => return false,
            }
        }
        if !self.any_arg.is_empty() && !args.iter().any(|a| self.any_arg.iter().any(|p| glob(p, a)))
        {
            return false;
        }
        true
    }
}
