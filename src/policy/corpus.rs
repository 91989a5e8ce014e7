//! The decision corpus: command lines with the decision (and the deciding category) the
//! built-in policy must give them. One line per command:
//!
//! ```text
//! # comment
//! allow                  read_only         ls -la
//! ! deny                 host_escape_risk  cat /proc/self/root$HOME/.ssh/id_canary
//! ```
//!
//! `↵` stands for a newline (here-documents). A line `% sandbox` or `% no-sandbox`
//! says how the lines after it are decided: as for a default, sandboxed `avfs exec`
//! (the default) or for `avfs exec --no-sandbox` (the strict reading).
//! `@AVFS_HOME@` and `@VAULT@` stand for avfs's home and the vault file. A leading `!` marks an attack line: the end-to-end test runs it through `avfs exec`
//! against a canary directory (`@CANARY@`), a fake secret (`~/.ssh/id_canary`) and a
//! loopback listener (`@PORT@`).

use std::path::Path;

use serde::Serialize;

use super::{Action, Category, Decision, Policy};

#[derive(Debug, Clone, Serialize)]
pub struct CorpusLine {
    pub line: usize,
    pub attack: bool,
    pub action: Action,
    pub category: Category,
    pub command: String,
    /// Decided as for a sandboxed run.
    pub sandboxed: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct CorpusResult {
    pub line: usize,
    pub command: String,
    pub expected_action: Action,
    pub expected_category: Category,
    pub action: Action,
    pub category: Category,
    pub rule: String,
    pub reason: String,
    pub ok: bool,
}

/// Substitutes the placeholders of attack lines.
pub fn substitute(command: &str, canary: &str, port: u16) -> String {
    command
        .replace("@CANARY@", canary)
        .replace("@PORT@", &port.to_string())
}

/// avfs's home, vault file and workspace path the decision corpus is decided with.
pub const HOME: &str = "/srv/avfs-home";
pub const VAULT: &str = "/srv/avfs-home/vaults/t.avfs";
pub const WORKSPACE: &str = "/srv/avfs-home/ws/t";
/// Where the decision corpus puts the canary (a host directory no sandbox shows).
pub const CANARY: &str = "/srv/avfs-canary";

/// Substitutes avfs's home and vault file.
pub fn substitute_home(command: &str, home: &str, vault: &str) -> String {
    command
        .replace("@AVFS_HOME@", home)
        .replace("@VAULT@", vault)
}

/// Parses a corpus file. Errors name the line.
pub fn parse(text: &str) -> Result<Vec<CorpusLine>, String> {
    let mut out = Vec::new();
    let mut sandboxed = true;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(mode) = line.strip_prefix('%') {
            sandboxed = match mode.trim() {
                "sandbox" => true,
                "no-sandbox" => false,
                m => {
                    return Err(format!(
                        "line {}: {m:?} is not sandbox or no-sandbox",
                        n + 1
                    ));
                }
            };
            continue;
        }
        let (attack, rest) = match line.strip_prefix('!') {
            Some(r) => (true, r.trim_start()),
            None => (false, line),
        };
        let bad = || format!("line {}: expected DECISION CATEGORY COMMAND", n + 1);
        let (a, rest) = rest.split_once(char::is_whitespace).ok_or_else(bad)?;
        let (c, command) = rest
            .trim_start()
            .split_once(char::is_whitespace)
            .ok_or_else(bad)?;
        let action = Action::from_name(a)
            .ok_or_else(|| format!("line {}: {a:?} is not a decision", n + 1))?;
        let category = Category::from_name(c)
            .ok_or_else(|| format!("line {}: {c:?} is not a category", n + 1))?;
        out.push(CorpusLine {
            line: n + 1,
            attack,
            action,
            category,
            command: command.trim().replace('↵', "\n"),
            sandboxed,
        });
    }
    Ok(out)
}

/// The category of the finding that decided.
pub fn deciding_category(d: &Decision) -> Category {
    d.findings
        .iter()
        .max_by_key(|f| (f.action, f.category))
        .map(|f| f.category)
        .unwrap_or(Category::Unknown)
}

/// Decides every line (placeholders substituted) and compares.
pub fn run(policy: &Policy, lines: &[CorpusLine], workspace: Option<&Path>) -> Vec<CorpusResult> {
    let protected = super::sandboxed::protected(
        Path::new(HOME),
        Some(Path::new(VAULT)),
        Some(Path::new(WORKSPACE)),
    );
    lines
        .iter()
        .map(|l| {
            let cmd = substitute_home(&substitute(&l.command, CANARY, 9), HOME, VAULT);
            let d = policy.decide(&super::Request {
                command: super::CommandLine::Shell(&cmd),
                cwd: &[],
                env: &[],
                // A sandboxed line is judged where its workspace is (`..` climbs into
                // avfs's home there).
                workspace: workspace.or(l.sandboxed.then(|| Path::new(WORKSPACE))),
                links: None,
                sandboxed: l.sandboxed,
                protected: Some(&protected),
            });
            let category = deciding_category(&d);
            CorpusResult {
                line: l.line,
                command: l.command.clone(),
                expected_action: l.action,
                expected_category: l.category,
                action: d.action,
                category,
                rule: d.matched_rule.clone(),
                reason: d.reason.clone(),
                ok: d.action == l.action && category == l.category,
            }
        })
        .collect()
}

/// One line of the everyday corpus: what kind of step it is (`build`, `fetch`,
/// `publish`, `host`), where it comes from (`owner/repo:path`) and the command.
#[derive(Debug, Clone, Serialize)]
pub struct EverydayLine {
    pub line: usize,
    pub kind: String,
    pub source: String,
    pub command: String,
}

/// Parses the everyday corpus: `KIND<TAB>SOURCE<TAB>COMMAND` per line, `#` comments.
pub fn parse_everyday(text: &str) -> Result<Vec<EverydayLine>, String> {
    let mut out = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        if raw.trim().is_empty() || raw.starts_with('#') {
            continue;
        }
        let mut it = raw.splitn(3, '\t');
        let (Some(kind), Some(source), Some(command)) = (it.next(), it.next(), it.next()) else {
            return Err(format!(
                "line {}: expected KIND<TAB>SOURCE<TAB>COMMAND",
                n + 1
            ));
        };
        if !matches!(kind, "build" | "fetch" | "publish" | "host") {
            return Err(format!(
                "line {}: {kind:?} is not build, fetch, publish or host",
                n + 1
            ));
        }
        out.push(EverydayLine {
            line: n + 1,
            kind: kind.into(),
            source: source.into(),
            command: command.replace('↵', "\n"),
        });
    }
    Ok(out)
}

/// How one kind of everyday line was decided.
#[derive(Debug, Clone, Serialize, Default)]
pub struct KindCount {
    pub lines: usize,
    /// `allow` or `allow_with_checkpoint`: ran without a person.
    pub unattended: usize,
    pub approval: usize,
    pub denied: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct EverydayResult {
    pub line: usize,
    pub kind: String,
    pub source: String,
    pub command: String,
    pub action: Action,
    pub category: Category,
    pub rule: String,
    pub reason: String,
}

/// The everyday corpus decided as a default run decides it (sandboxed, or not when
/// `sandboxed` is false): counts per kind, and every line that did not run unattended.
#[derive(Debug, Clone, Serialize)]
pub struct EverydayReport {
    pub sandboxed: bool,
    pub kinds: std::collections::BTreeMap<String, KindCount>,
    pub not_unattended: Vec<EverydayResult>,
}

pub fn run_everyday(policy: &Policy, lines: &[EverydayLine], sandboxed: bool) -> EverydayReport {
    let protected = super::sandboxed::protected(
        Path::new(HOME),
        Some(Path::new(VAULT)),
        Some(Path::new(WORKSPACE)),
    );
    let mut kinds: std::collections::BTreeMap<String, KindCount> = Default::default();
    let mut not_unattended = Vec::new();
    for l in lines {
        // A package.json script or a Makefile recipe runs in the file's directory.
        let file = l.source.split_once(':').map_or("", |(_, p)| p);
        let cwd: Vec<String> = if file.starts_with(".github/") {
            Vec::new()
        } else {
            let mut c: Vec<String> = file.split('/').map(str::to_string).collect();
            c.pop();
            c
        };
        let d = policy.decide(&super::Request {
            command: super::CommandLine::Shell(&l.command),
            cwd: &cwd,
            env: &[],
            workspace: Some(Path::new(WORKSPACE)),
            links: None,
            sandboxed,
            protected: Some(&protected),
        });
        let k = kinds.entry(l.kind.clone()).or_default();
        k.lines += 1;
        match d.action {
            Action::Allow | Action::AllowWithCheckpoint => k.unattended += 1,
            Action::RequireApproval => k.approval += 1,
            Action::Deny => k.denied += 1,
        }
        if d.action > Action::AllowWithCheckpoint {
            not_unattended.push(EverydayResult {
                line: l.line,
                kind: l.kind.clone(),
                source: l.source.clone(),
                command: l.command.clone(),
                action: d.action,
                category: deciding_category(&d),
                rule: d.matched_rule.clone(),
                reason: d.reason.clone(),
            });
        }
    }
    EverydayReport {
        sandboxed,
        kinds,
        not_unattended,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lines() {
        let l = parse("# c\n\nallow read_only ls -la\n! deny host_escape_risk  cat /etc/x | wc\n")
            .unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].command, "ls -la");
        assert!(l[1].attack);
        assert_eq!(l[1].command, "cat /etc/x | wc");
        assert!(parse("maybe read_only ls").is_err());
        assert!(parse("allow").is_err());
    }
}
