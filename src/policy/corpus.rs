//! The decision corpus: command lines with the decision (and the deciding category) the
//! built-in policy must give them. One line per command:
//!
//! ```text
//! # comment
//! allow                  read_only         ls -la
//! ! deny                 host_escape_risk  cat /proc/self/root$HOME/.ssh/id_canary
//! ```
//!
//! `↵` stands for a newline (here-documents). A leading `!` marks an attack line: the end-to-end test runs it through `avfs exec`
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

/// Parses a corpus file. Errors name the line.
pub fn parse(text: &str) -> Result<Vec<CorpusLine>, String> {
    let mut out = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
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
    lines
        .iter()
        .map(|l| {
            let cmd = substitute(&l.command, "/tmp/avfs-canary", 9);
            let d = policy.decide_shell(&cmd, &[], workspace);
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
