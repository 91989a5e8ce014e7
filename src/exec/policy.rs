//! The policy: classifies every program a command will start and decides what happens.
//! Built-in rules cover common tools; a TOML file (user-wide and per vault) adds rules
//! and changes the decision per category. The strictest finding wins, and anything that
//! cannot be parsed or classified requires approval (fail closed).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::sandbox::{SandboxConfig, SandboxFile};
use super::shell::{self, SimpleCommand};
use crate::error::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    ReadOnly,
    Mutating,
    Destructive,
    Networked,
    HostEscapeRisk,
    Unknown,
}

/// Ordered from least to most strict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Allow,
    AllowWithCheckpoint,
    RequireApproval,
    Deny,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::AllowWithCheckpoint => "allow_with_checkpoint",
            Action::RequireApproval => "require_approval",
            Action::Deny => "deny",
        }
    }
}

/// One rule: matches a program and argument patterns.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub name: String,
    /// Program name (basename), `*` for any; glob `*` and `?` allowed.
    pub program: String,
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
    pub reason: String,
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
    pub source: String,
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
    /// `[sandbox]`: whether and how `avfs exec` runs commands under bubblewrap.
    pub sandbox: SandboxConfig,
}

#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub program: String,
    pub category: Category,
    pub action: Action,
    pub rule: String,
    pub reason: String,
    /// The rule grants a sandboxed command the network (not part of the JSON: the
    /// envelope's `sandbox.network_granted_by` names the rule).
    #[serde(skip)]
    pub network: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Decision {
    pub action: Action,
    pub categories: Vec<Category>,
    pub matched_rule: String,
    pub reason: String,
    pub findings: Vec<Finding>,
}

fn glob(pat: &str, s: &str) -> bool {
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

impl Rule {
    pub fn matches(&self, argv: &[String]) -> bool {
        let Some(prog) = argv.first() else {
            return false;
        };
        let base = prog.rsplit('/').next().unwrap_or(prog);
        if !glob(&self.program, base) {
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

fn r(
    name: &str,
    program: &str,
    args: &[&str],
    any_arg: &[&str],
    category: Category,
    reason: &str,
) -> Rule {
    Rule {
        name: name.into(),
        program: program.into(),
        args: args.iter().map(|s| s.to_string()).collect(),
        any_arg: any_arg.iter().map(|s| s.to_string()).collect(),
        category: Some(category),
        decision: None,
        reason: reason.into(),
        source: "built-in".into(),
        ..Default::default()
    }
}

/// The built-in rules, most specific first.
pub fn builtin_rules() -> Vec<Rule> {
    use Category::*;
    let mut v = vec![
        // Networked.
        r(
            "git-network",
            "git",
            &["push"],
            &[],
            Networked,
            "git push talks to a remote",
        ),
        r(
            "git-network",
            "git",
            &["fetch"],
            &[],
            Networked,
            "git fetch talks to a remote",
        ),
        r(
            "git-network",
            "git",
            &["pull"],
            &[],
            Networked,
            "git pull talks to a remote",
        ),
        r(
            "git-network",
            "git",
            &["clone"],
            &[],
            Networked,
            "git clone downloads a repository",
        ),
        r(
            "git-network",
            "git",
            &["ls-remote"],
            &[],
            Networked,
            "git ls-remote talks to a remote",
        ),
        r(
            "git-network",
            "git",
            &["submodule", "update"],
            &[],
            Networked,
            "fetches submodules",
        ),
        r(
            "package-install",
            "npm",
            &["i*"],
            &[],
            Networked,
            "installs packages from a registry",
        ),
        r(
            "package-install",
            "npm",
            &["add"],
            &[],
            Networked,
            "installs packages from a registry",
        ),
        r(
            "package-install",
            "npm",
            &["ci"],
            &[],
            Networked,
            "installs packages from a registry",
        ),
        r(
            "package-install",
            "npm",
            &["update"],
            &[],
            Networked,
            "installs packages from a registry",
        ),
        r(
            "package-install",
            "npm",
            &["publish"],
            &[],
            Networked,
            "publishes to a registry",
        ),
        r(
            "package-install",
            "npx",
            &[],
            &[],
            Networked,
            "npx may download packages",
        ),
        r(
            "package-install",
            "yarn",
            &["add"],
            &[],
            Networked,
            "installs packages from a registry",
        ),
        r(
            "package-install",
            "yarn",
            &["install"],
            &[],
            Networked,
            "installs packages from a registry",
        ),
        r(
            "package-install",
            "pnpm",
            &["add"],
            &[],
            Networked,
            "installs packages from a registry",
        ),
        r(
            "package-install",
            "pnpm",
            &["i*"],
            &[],
            Networked,
            "installs packages from a registry",
        ),
        r(
            "package-install",
            "pip",
            &["install"],
            &[],
            Networked,
            "installs packages from PyPI",
        ),
        r(
            "package-install",
            "pip3",
            &["install"],
            &[],
            Networked,
            "installs packages from PyPI",
        ),
        r(
            "package-install",
            "cargo",
            &["install"],
            &[],
            Networked,
            "downloads crates",
        ),
        r(
            "package-install",
            "cargo",
            &["add"],
            &[],
            Networked,
            "resolves crates from the registry",
        ),
        r(
            "package-install",
            "cargo",
            &["update"],
            &[],
            Networked,
            "updates from the registry",
        ),
        r(
            "package-install",
            "cargo",
            &["fetch"],
            &[],
            Networked,
            "downloads crates",
        ),
        r(
            "package-install",
            "cargo",
            &["publish"],
            &[],
            Networked,
            "publishes a crate",
        ),
        r(
            "package-install",
            "apt*",
            &["install"],
            &[],
            Networked,
            "installs system packages",
        ),
        r(
            "package-install",
            "apt*",
            &["update"],
            &[],
            Networked,
            "downloads package lists",
        ),
        r(
            "package-install",
            "go",
            &["get"],
            &[],
            Networked,
            "downloads modules",
        ),
        r(
            "network-tool",
            "curl",
            &[],
            &[],
            Networked,
            "transfers data over the network",
        ),
        r(
            "network-tool",
            "wget",
            &[],
            &[],
            Networked,
            "downloads over the network",
        ),
        r(
            "network-tool",
            "ssh",
            &[],
            &[],
            Networked,
            "opens a remote shell",
        ),
        r(
            "network-tool",
            "scp",
            &[],
            &[],
            Networked,
            "copies over the network",
        ),
        r(
            "network-tool",
            "sftp",
            &[],
            &[],
            Networked,
            "copies over the network",
        ),
        r(
            "network-tool",
            "rsync",
            &[],
            &["*:*"],
            Networked,
            "copies to or from a remote host",
        ),
        r(
            "network-tool",
            "nc",
            &[],
            &[],
            Networked,
            "opens network connections",
        ),
        r(
            "network-tool",
            "ncat",
            &[],
            &[],
            Networked,
            "opens network connections",
        ),
        r(
            "network-tool",
            "telnet",
            &[],
            &[],
            Networked,
            "opens network connections",
        ),
        r(
            "network-tool",
            "ftp",
            &[],
            &[],
            Networked,
            "transfers over the network",
        ),
        // Leaving the workspace.
        r(
            "privilege",
            "sudo",
            &[],
            &[],
            HostEscapeRisk,
            "runs as another user on the host",
        ),
        r(
            "privilege",
            "doas",
            &[],
            &[],
            HostEscapeRisk,
            "runs as another user on the host",
        ),
        r(
            "privilege",
            "su",
            &[],
            &[],
            HostEscapeRisk,
            "runs as another user on the host",
        ),
        r(
            "host-control",
            "chroot",
            &[],
            &[],
            HostEscapeRisk,
            "changes the root directory",
        ),
        r(
            "host-control",
            "nsenter",
            &[],
            &[],
            HostEscapeRisk,
            "enters host namespaces",
        ),
        r(
            "host-control",
            "mount",
            &[],
            &[],
            HostEscapeRisk,
            "changes host mounts",
        ),
        r(
            "host-control",
            "umount",
            &[],
            &[],
            HostEscapeRisk,
            "changes host mounts",
        ),
        r(
            "host-control",
            "systemctl",
            &[],
            &[],
            HostEscapeRisk,
            "controls host services",
        ),
        r(
            "host-control",
            "docker",
            &[],
            &[],
            HostEscapeRisk,
            "controls containers on the host",
        ),
        r(
            "host-control",
            "kill",
            &[],
            &[],
            HostEscapeRisk,
            "signals host processes",
        ),
        r(
            "host-control",
            "pkill",
            &[],
            &[],
            HostEscapeRisk,
            "signals host processes",
        ),
        r(
            "host-control",
            "killall",
            &[],
            &[],
            HostEscapeRisk,
            "signals host processes",
        ),
        r(
            "host-control",
            "reboot",
            &[],
            &[],
            HostEscapeRisk,
            "restarts the host",
        ),
        r(
            "host-control",
            "shutdown",
            &[],
            &[],
            HostEscapeRisk,
            "stops the host",
        ),
        // Destructive.
        r(
            "rm-recursive-or-force",
            "rm",
            &[],
            &["-*r*", "-*R*", "-*f*", "--recursive", "--force"],
            Destructive,
            "removes recursively or without asking",
        ),
        r(
            "git-reset-hard",
            "git",
            &["reset"],
            &["--hard"],
            Destructive,
            "discards uncommitted work",
        ),
        r(
            "git-clean",
            "git",
            &["clean"],
            &["-*f*", "--force"],
            Destructive,
            "deletes untracked files",
        ),
        r(
            "git-checkout-discard",
            "git",
            &["checkout", "--", "**"],
            &[],
            Destructive,
            "discards changes to files",
        ),
        r(
            "git-restore",
            "git",
            &["restore"],
            &[],
            Destructive,
            "discards changes to files",
        ),
        r(
            "git-branch-delete",
            "git",
            &["branch"],
            &["-D", "--delete"],
            Destructive,
            "deletes a branch",
        ),
        r("disk-tool", "dd", &[], &[], Destructive, "writes raw data"),
        r("disk-tool", "truncate", &[], &[], Destructive, "cuts files"),
        r(
            "disk-tool",
            "mkfs*",
            &[],
            &[],
            Destructive,
            "formats a file system",
        ),
        r(
            "disk-tool",
            "shred",
            &[],
            &[],
            Destructive,
            "destroys files",
        ),
        r(
            "disk-tool",
            "wipefs",
            &[],
            &[],
            Destructive,
            "destroys file systems",
        ),
        // Read-only git.
        r("git-read", "git", &["status"], &[], ReadOnly, "shows state"),
        r("git-read", "git", &["log"], &[], ReadOnly, "shows history"),
        r("git-read", "git", &["diff"], &[], ReadOnly, "shows changes"),
        r("git-read", "git", &["show"], &[], ReadOnly, "shows objects"),
        r(
            "git-read",
            "git",
            &["blame"],
            &[],
            ReadOnly,
            "shows history",
        ),
        r("git-read", "git", &["grep"], &[], ReadOnly, "searches"),
        r(
            "git-read",
            "git",
            &["ls-files"],
            &[],
            ReadOnly,
            "lists files",
        ),
        r(
            "git-read",
            "git",
            &["rev-parse"],
            &[],
            ReadOnly,
            "resolves names",
        ),
        r(
            "git-read",
            "git",
            &["describe"],
            &[],
            ReadOnly,
            "describes a commit",
        ),
        r(
            "git-read",
            "git",
            &["shortlog"],
            &[],
            ReadOnly,
            "summarizes history",
        ),
        r(
            "git-read",
            "git",
            &["branch"],
            &[],
            ReadOnly,
            "lists branches",
        ),
        r(
            "git-read",
            "git",
            &["--version"],
            &[],
            ReadOnly,
            "shows the version",
        ),
        r(
            "git-other",
            "git",
            &[],
            &[],
            Mutating,
            "changes the repository",
        ),
        r(
            "sed-in-place",
            "sed",
            &[],
            &["-i*", "--in-place*"],
            Mutating,
            "edits files in place",
        ),
        r(
            "find-delete",
            "find",
            &[],
            &["-delete"],
            Destructive,
            "deletes what it finds",
        ),
    ];
    for p in [
        "ls",
        "cat",
        "grep",
        "egrep",
        "fgrep",
        "rg",
        "ag",
        "find",
        "head",
        "tail",
        "wc",
        "echo",
        "printf",
        "pwd",
        "true",
        "false",
        "test",
        "[",
        "stat",
        "file",
        "diff",
        "cmp",
        "sort",
        "uniq",
        "cut",
        "tr",
        "which",
        "type",
        "date",
        "whoami",
        "id",
        "uname",
        "tree",
        "du",
        "df",
        "less",
        "more",
        "sed",
        "awk",
        "jq",
        "basename",
        "dirname",
        "realpath",
        "readlink",
        "seq",
        "sleep",
        "env",
        "printenv",
        "md5sum",
        "sha256sum",
        "sha1sum",
        "b2sum",
        "xxd",
        "od",
        "hexdump",
        "nl",
        "column",
        "comm",
        "join",
        "paste",
        "fold",
        "fmt",
        "expr",
        "yes",
        "cd",
        "exit",
        "hostname",
        "nproc",
        "ps",
        "trap",
        "export",
        "set",
        "unset",
        "shift",
        "wait",
        "read",
        "local",
        "declare",
        "alias",
        "return",
        ":",
    ] {
        v.push(r("read-only-tool", p, &[], &[], ReadOnly, "only reads"));
    }
    for (p, why) in [
        ("touch", "creates or touches files"),
        ("mkdir", "creates directories"),
        ("rmdir", "removes empty directories"),
        ("rm", "removes files"),
        ("cp", "copies files"),
        ("mv", "moves files"),
        ("ln", "creates links"),
        ("chmod", "changes modes"),
        ("chown", "changes owners"),
        ("chgrp", "changes groups"),
        ("tee", "writes files"),
        ("patch", "edits files"),
        ("tar", "creates or extracts archives"),
        ("unzip", "extracts archives"),
        ("zip", "creates archives"),
        ("gzip", "compresses files"),
        ("gunzip", "decompresses files"),
        ("make", "builds"),
        ("cmake", "builds"),
        ("ninja", "builds"),
        ("cargo", "builds and runs Rust code"),
        ("rustc", "compiles"),
        ("rustfmt", "formats files"),
        ("gcc", "compiles"),
        ("g++", "compiles"),
        ("cc", "compiles"),
        ("clang", "compiles"),
        ("go", "builds and runs Go code"),
        ("npm", "runs package scripts"),
        ("yarn", "runs package scripts"),
        ("pnpm", "runs package scripts"),
        ("node", "runs a script"),
        ("python", "runs a script"),
        ("python3", "runs a script"),
        ("pytest", "runs tests"),
        ("ruby", "runs a script"),
        ("perl", "runs a script"),
        ("sh", "runs a shell"),
        ("bash", "runs a shell"),
        ("dash", "runs a shell"),
        ("zsh", "runs a shell"),
        ("xargs", "runs commands"),
        ("nohup", "runs a command"),
        ("timeout", "runs a command"),
        ("nice", "runs a command"),
        ("time", "runs a command"),
        ("command", "runs a command"),
        ("exec", "runs a command"),
        ("vim", "edits files"),
        ("vi", "edits files"),
        ("nano", "edits files"),
        ("ed", "edits files"),
    ] {
        v.push(r("build-or-edit", p, &[], &[], Mutating, why));
    }
    v
}

pub fn builtin_defaults() -> BTreeMap<Category, Action> {
    use Action::*;
    use Category::*;
    BTreeMap::from([
        (ReadOnly, Allow),
        (Mutating, AllowWithCheckpoint),
        (Destructive, AllowWithCheckpoint),
        (Networked, RequireApproval),
        (HostEscapeRisk, Deny),
        (Unknown, RequireApproval),
    ])
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
                rule.source = f.display().to_string();
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

    fn finding_for(&self, argv: &[String]) -> Finding {
        let prog = argv.first().cloned().unwrap_or_default();
        for rule in &self.rules {
            if rule.matches(argv) {
                let category = rule.category.unwrap_or(Category::Mutating);
                let action = rule.decision.unwrap_or_else(|| self.action_for(category));
                return Finding {
                    program: prog,
                    category,
                    action,
                    rule: rule.name.clone(),
                    reason: rule.reason.clone(),
                    network: rule.network,
                };
            }
        }
        Finding {
            program: prog.clone(),
            category: Category::Unknown,
            action: self.action_for(Category::Unknown),
            rule: "unknown-program".into(),
            reason: format!("no rule knows {prog:?}"),
            network: false,
        }
    }

    fn action_for(&self, c: Category) -> Action {
        self.defaults
            .get(&c)
            .copied()
            .unwrap_or(Action::RequireApproval)
    }

    fn category_finding(
        &self,
        program: &str,
        category: Category,
        rule: &str,
        reason: String,
    ) -> Finding {
        Finding {
            program: program.into(),
            category,
            action: self.action_for(category),
            rule: rule.into(),
            reason,
            network: false,
        }
    }

    /// Decides on a shell line run with cwd `cwd` (components below the workspace root).
    pub fn decide_shell(&self, line: &str, cwd: &[String], mountpoint: Option<&Path>) -> Decision {
        match shell::parse(line) {
            Ok(cmds) => self.decide_commands(&cmds, cwd, mountpoint),
            Err(e) => {
                let f = self.category_finding(
                    "",
                    Category::Unknown,
                    "unparseable",
                    format!("cannot parse the command: {e}"),
                );
                combine(vec![f])
            }
        }
    }

    pub fn decide_argv(
        &self,
        argv: &[String],
        cwd: &[String],
        mountpoint: Option<&Path>,
    ) -> Decision {
        let cmd = SimpleCommand {
            argv: argv.to_vec(),
            cd_path: Some(vec![]),
            ..Default::default()
        };
        let mut cmds = vec![cmd];
        if let Some(inner) = shell::shell_c_argument(argv) {
            match shell::parse(inner) {
                Ok(more) => cmds.extend(more),
                Err(e) => {
                    let f = self.category_finding(
                        "sh",
                        Category::Unknown,
                        "unparseable",
                        format!("cannot parse the shell script: {e}"),
                    );
                    return combine(vec![f]);
                }
            }
        }
        self.decide_commands(&cmds, cwd, mountpoint)
    }

    pub fn decide_commands(
        &self,
        cmds: &[SimpleCommand],
        cwd: &[String],
        mountpoint: Option<&Path>,
    ) -> Decision {
        let mut findings = Vec::new();
        for c in cmds {
            self.classify(c, cwd, mountpoint, &mut findings, 0);
        }
        if findings.is_empty() {
            findings.push(self.category_finding(
                "",
                Category::ReadOnly,
                "empty",
                "nothing to run".into(),
            ));
        }
        combine(findings)
    }

    fn classify(
        &self,
        c: &SimpleCommand,
        cwd: &[String],
        mp: Option<&Path>,
        out: &mut Vec<Finding>,
        depth: usize,
    ) {
        let prog = c.argv.first().cloned().unwrap_or_default();
        // Where the command runs: cwd plus the cds before it in the line.
        let dir: Option<Vec<String>> = c.cd_path.as_ref().map(|cd| {
            let mut d = cwd.to_vec();
            d.extend(cd.iter().cloned());
            d
        });
        if c.cd_path.is_none() {
            out.push(self.category_finding(
                &prog,
                Category::HostEscapeRisk,
                "cd-outside",
                "runs after a cd to a directory outside the workspace (or an unknown one)".into(),
            ));
        }
        for r in &c.redirects {
            let fd_dup =
                r.op.ends_with('&') && r.target.chars().all(|ch| ch.is_ascii_digit() || ch == '-');
            if fd_dup {
                continue;
            }
            if let Some(why) = escapes(&r.target, dir.as_deref(), mp) {
                out.push(self.category_finding(
                    &prog,
                    Category::HostEscapeRisk,
                    "path-outside",
                    format!("redirection to {}: {why}", r.target),
                ));
            } else if r.op.contains('>') && r.target != "/dev/null" {
                out.push(self.category_finding(
                    &prog,
                    Category::Mutating,
                    "redirect-write",
                    format!("writes {} with {}", r.target, r.op),
                ));
            }
        }
        if c.argv.is_empty() {
            return;
        }
        // The program itself: only system locations or the workspace.
        if prog.contains('/')
            && ![
                "/usr/bin/",
                "/bin/",
                "/usr/local/bin/",
                "/usr/sbin/",
                "/sbin/",
            ]
            .iter()
            .any(|p| prog.starts_with(p))
            && let Some(why) = escapes(&prog, dir.as_deref(), mp)
        {
            out.push(self.category_finding(
                &prog,
                Category::HostEscapeRisk,
                "path-outside",
                format!("program {prog}: {why}"),
            ));
        }
        let base = prog.rsplit('/').next().unwrap_or(&prog).to_string();
        if base == "git" {
            // Classify the subcommand, not the global options before it (`git -C DIR
            // status` is read-only); user rules may still match the line as written.
            let (sub, dirs) = git_without_globals(&c.argv);
            out.push(self.finding_for_git(&c.argv, &sub));
            for (opt, p) in dirs {
                if let Some(why) = escapes(&p, dir.as_deref(), mp) {
                    out.push(self.category_finding(
                        &prog,
                        Category::HostEscapeRisk,
                        "path-outside",
                        format!("git {opt} {p}: {why}"),
                    ));
                }
            }
        } else {
            out.push(self.finding_for(&c.argv));
        }
        // Arguments that name paths.
        let skip_paths = matches!(base.as_str(), "echo" | "printf");
        if !skip_paths {
            for a in c.argv.iter().skip(1) {
                let candidate = match a.split_once('=') {
                    Some((k, v)) if k.starts_with('-') => v,
                    _ => a.as_str(),
                };
                if candidate.starts_with('-') || candidate.contains("://") {
                    continue;
                }
                if looks_like_path(candidate)
                    && let Some(why) = escapes(candidate, dir.as_deref(), mp)
                {
                    out.push(self.category_finding(
                        &prog,
                        Category::HostEscapeRisk,
                        "path-outside",
                        format!("{candidate}: {why}"),
                    ));
                }
            }
        }
        if depth > 8 {
            return;
        }
        // Wrappers run another program: classify that one too.
        if let Some(inner) = wrapped_command(&c.argv) {
            let sub = SimpleCommand {
                argv: inner,
                cd_path: c.cd_path.clone(),
                ..Default::default()
            };
            self.classify(&sub, cwd, mp, out, depth + 1);
        }
        if base == "find" {
            let mut it = c.argv.iter().skip(1).peekable();
            while let Some(a) = it.next() {
                if matches!(a.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir") {
                    let inner: Vec<String> = it
                        .by_ref()
                        .take_while(|x| *x != ";" && *x != "+")
                        .cloned()
                        .collect();
                    let sub = SimpleCommand {
                        argv: inner,
                        cd_path: c.cd_path.clone(),
                        ..Default::default()
                    };
                    self.classify(&sub, cwd, mp, out, depth + 1);
                }
            }
        }
    }
}

/// `git` global options that take a value, and whether that value is a directory.
const GIT_VALUE_OPTS: &[(&str, bool)] = &[
    ("-C", true),
    ("-c", false),
    ("--git-dir", true),
    ("--work-tree", true),
    ("--namespace", false),
    ("--super-prefix", false),
    ("--config-env", false),
    ("--exec-path", true),
];

const GIT_FLAG_OPTS: &[&str] = &[
    "-p",
    "-P",
    "--paginate",
    "--no-pager",
    "--bare",
    "--no-replace-objects",
    "--literal-pathspecs",
    "--glob-pathspecs",
    "--noglob-pathspecs",
    "--icase-pathspecs",
    "--no-optional-locks",
];

/// A git command line without its global options (`git -C d -c k=v status` becomes
/// `git status`), and the directories those options name, as (option, directory).
fn git_without_globals(argv: &[String]) -> (Vec<String>, Vec<(String, String)>) {
    let mut dirs = Vec::new();
    let mut i = 1;
    while i < argv.len() {
        let a = argv[i].as_str();
        if GIT_FLAG_OPTS.contains(&a) {
            i += 1;
            continue;
        }
        if let Some((opt, is_dir)) = GIT_VALUE_OPTS.iter().find(|(o, _)| *o == a) {
            if let Some(v) = argv.get(i + 1)
                && *is_dir
            {
                dirs.push((opt.to_string(), v.clone()));
            }
            i += 2;
            continue;
        }
        if let Some((opt, v)) = a.split_once('=')
            && let Some((o, is_dir)) = GIT_VALUE_OPTS.iter().find(|(o, _)| *o == opt)
        {
            if *is_dir {
                dirs.push((o.to_string(), v.to_string()));
            }
            i += 1;
            continue;
        }
        break;
    }
    let mut sub = vec![argv[0].clone()];
    sub.extend(argv[i.min(argv.len())..].iter().cloned());
    (sub, dirs)
}

impl Policy {
    /// The first rule that matches: a user rule may match the git line as written or
    /// without its global options; built-in rules see it without them.
    fn finding_for_git(&self, raw: &[String], sub: &[String]) -> Finding {
        if raw.len() == sub.len() {
            return self.finding_for(raw);
        }
        for rule in &self.rules {
            let user = rule.source != "built-in";
            if rule.matches(sub) || (user && rule.matches(raw)) {
                let category = rule.category.unwrap_or(Category::Mutating);
                return Finding {
                    program: raw[0].clone(),
                    category,
                    action: rule.decision.unwrap_or_else(|| self.action_for(category)),
                    rule: rule.name.clone(),
                    reason: rule.reason.clone(),
                    network: rule.network,
                };
            }
        }
        self.finding_for(sub)
    }
}

/// The program a wrapper (env, sudo, xargs, nohup, timeout, ...) runs, if any.
fn wrapped_command(argv: &[String]) -> Option<Vec<String>> {
    let base = argv[0].rsplit('/').next().unwrap_or(&argv[0]);
    let rest = &argv[1..];
    let skip_opts = |v: &[String], with_value: &[&str]| -> usize {
        let mut i = 0;
        while i < v.len() && v[i].starts_with('-') {
            if with_value.contains(&v[i].as_str()) {
                i += 1;
            }
            i += 1;
        }
        i
    };
    let start = match base {
        "env" => {
            let mut i = skip_opts(rest, &["-u", "-C", "-S"]);
            while i < rest.len() && rest[i].contains('=') {
                i += 1;
            }
            i
        }
        "sudo" | "doas" => skip_opts(rest, &["-u", "-g", "-C", "-h", "-p"]),
        "nohup" | "command" | "exec" | "time" => skip_opts(rest, &[]),
        "nice" => skip_opts(rest, &["-n"]),
        "xargs" => skip_opts(rest, &["-n", "-I", "-P", "-L", "-d", "-s", "-E", "-a"]),
        "timeout" => skip_opts(rest, &["-s", "-k", "--signal", "--kill-after"]) + 1,
        _ => return None,
    };
    (start < rest.len()).then(|| rest[start..].to_vec())
}

fn looks_like_path(a: &str) -> bool {
    a.contains('/')
        || a == ".."
        || a.starts_with('~')
        || a.starts_with("$HOME")
        || a.starts_with("${HOME}")
}

const HOST_OK: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/urandom",
    "/dev/random",
    "/dev/stdin",
    "/dev/stdout",
    "/dev/stderr",
    "/dev/tty",
];

/// Why `path` (seen from `dir`, components below the workspace root; `None` = unknown)
/// leaves the workspace, or `None` if it stays inside.
fn escapes(path: &str, dir: Option<&[String]>, mp: Option<&Path>) -> Option<String> {
    if path.starts_with('~') || path.starts_with("$HOME") || path.starts_with("${HOME}") {
        return Some("is in the home directory on the host".into());
    }
    if path.starts_with('/') {
        if HOST_OK.contains(&path)
            || path.starts_with("/dev/fd/")
            || path.starts_with("/proc/self/")
        {
            return None;
        }
        if let Some(m) = mp {
            let inside = Path::new(path).components().collect::<Vec<_>>();
            let root = m.components().collect::<Vec<_>>();
            if inside.starts_with(&root) && !path.split('/').any(|c| c == "..") {
                return None;
            }
        }
        return Some("is an absolute path on the host, outside the workspace".into());
    }
    let Some(dir) = dir else {
        return Some("is relative to a directory outside the workspace".into());
    };
    let mut depth = dir.iter().filter(|c| *c != "..").count() as i64
        - dir.iter().filter(|c| *c == "..").count() as i64;
    if depth < 0 {
        return Some("is relative to a directory above the workspace root".into());
    }
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return Some("climbs above the workspace root".into());
                }
            }
            _ => depth += 1,
        }
    }
    None
}

fn combine(findings: Vec<Finding>) -> Decision {
    let worst = findings
        .iter()
        .max_by_key(|f| (f.action, f.category))
        .cloned()
        .expect("at least one finding");
    let mut categories: Vec<Category> = findings.iter().map(|f| f.category).collect();
    categories.sort();
    categories.dedup();
    Decision {
        action: worst.action,
        categories,
        matched_rule: worst.rule.clone(),
        reason: worst.reason.clone(),
        findings,
    }
}

impl Decision {
    /// The first rule among the findings that grants a sandboxed command the network.
    pub fn network_rule(&self) -> Option<&str> {
        self.findings
            .iter()
            .find(|f| f.network)
            .map(|f| f.rule.as_str())
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
                let matched = match shell::parse(ex) {
                    Ok(cmds) => cmds.iter().any(|c| rule.matches(&c.argv)),
                    Err(_) => false,
                };
                out.push(ExampleResult {
                    rule: rule.name.clone(),
                    source: rule.source.clone(),
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
mod tests {
    use super::*;

    fn decide(line: &str) -> Decision {
        Policy::builtin().decide_shell(line, &[], None)
    }

    #[test]
    fn defaults_per_category() {
        assert_eq!(decide("ls -la").action, Action::Allow);
        assert_eq!(decide("git status").action, Action::Allow);
        assert_eq!(decide("echo x > f").action, Action::AllowWithCheckpoint);
        assert_eq!(decide("rm -rf build").action, Action::AllowWithCheckpoint);
        assert!(
            decide("rm -rf build")
                .categories
                .contains(&Category::Destructive)
        );
        assert_eq!(
            decide("curl https://example.com").action,
            Action::RequireApproval
        );
        assert_eq!(decide("cat /etc/passwd").action, Action::Deny);
        assert_eq!(decide("cat ~/.ssh/id_rsa").action, Action::Deny);
        assert_eq!(decide("ls ../../..").action, Action::Deny);
        assert_eq!(decide("cd / && ls").action, Action::Deny);
        assert_eq!(decide("frobnicate --all").action, Action::RequireApproval);
        assert_eq!(decide("echo 'unterminated").action, Action::RequireApproval);
    }

    #[test]
    fn strictest_wins_through_nesting() {
        let d = decide("cd .. && curl x");
        assert_eq!(d.action, Action::Deny, "{d:?}");
        assert!(d.categories.contains(&Category::Networked));
        let d = decide("bash -c \"rm -rf .\"");
        assert!(d.categories.contains(&Category::Destructive));
        assert_eq!(decide("ls $(curl x)").action, Action::RequireApproval);
        assert_eq!(decide("env FOO=1 sudo ls").action, Action::Deny);
        assert!(
            decide("find . -name '*.o' -delete")
                .categories
                .contains(&Category::Destructive)
        );
        assert!(
            decide("find . -exec rm -rf {} ;")
                .categories
                .contains(&Category::Destructive)
        );
        assert_eq!(decide("git -C /etc status").action, Action::Deny);
        assert_eq!(decide("git -C sub push").action, Action::RequireApproval);
        assert_eq!(decide("xargs curl < urls").action, Action::RequireApproval);
        assert_eq!(decide("ls > /dev/null 2>&1").action, Action::Allow);
    }

    #[test]
    fn git_global_options_do_not_hide_the_subcommand() {
        let d = decide("git -C sub status");
        assert_eq!(d.action, Action::Allow, "{d:?}");
        assert_eq!(d.categories, [Category::ReadOnly]);
        assert_eq!(
            decide("git --no-pager -c color.ui=never log").action,
            Action::Allow
        );
        assert_eq!(
            decide("git -C sub --git-dir=.git push").action,
            Action::RequireApproval
        );
        assert_eq!(decide("git --git-dir=/etc/x log").action, Action::Deny);
        assert_eq!(decide("git --work-tree ../.. status").action, Action::Deny);
        assert_eq!(
            decide("git -C sub commit -m x").action,
            Action::AllowWithCheckpoint
        );
        assert_eq!(decide("git --version").action, Action::Allow);
    }

    #[test]
    fn user_rules_override_and_test_examples() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p.toml");
        std::fs::write(
            &f,
            r#"
[defaults]
networked = "deny"

[[rule]]
name = "npm-install-ok"
program = "npm"
args = ["install", "**"]
decision = "allow_with_checkpoint"
category = "networked"
examples = ["npm install left-pad"]
counter_examples = ["npm publish"]
"#,
        )
        .unwrap();
        let p = Policy::load(&[&f]).unwrap();
        assert_eq!(
            p.decide_shell("npm install x", &[], None).action,
            Action::AllowWithCheckpoint
        );
        assert_eq!(p.decide_shell("curl x", &[], None).action, Action::Deny);
        assert!(p.test_examples().iter().all(|e| e.ok));
        std::fs::write(&f, "[[rule]]\nname = 1\n").unwrap();
        assert!(Policy::load(&[&f]).is_err());
        std::fs::write(&f, "[defaults]\nnetworked = \"maybe\"\n").unwrap();
        assert!(Policy::load(&[&f]).is_err());
    }

    #[test]
    fn sandbox_settings_and_network_grants() {
        let dir = tempfile::tempdir().unwrap();
        let (user, vault) = (dir.path().join("u.toml"), dir.path().join("v.toml"));
        std::fs::write(
            &user,
            "[sandbox]\nrequired = true\nnetwork = true\nenv = [\"A\"]\n\n\
             [[rule]]\nname = \"registry\"\nprogram = \"npm\"\nargs = [\"ci\"]\n\
             category = \"networked\"\ndecision = \"allow\"\nnetwork = true\n",
        )
        .unwrap();
        std::fs::write(
            &vault,
            "[sandbox]\ndefault = true\nrequired = false\nnetwork = false\n\
             read_only_paths = [\"/usr\"]\nextra_read_only_paths = [\"~/tools\"]\nenv = [\"B\"]\n",
        )
        .unwrap();
        let p = Policy::load(&[&user, &vault]).unwrap();
        assert!(p.sandbox.default);
        assert!(p.sandbox.required, "the vault's file cannot unset required");
        assert!(!p.sandbox.network, "the vault's file overrides network");
        assert_eq!(p.sandbox.read_only_paths, ["/usr", "~/tools"]);
        assert_eq!(p.sandbox.env, ["A", "B"]);
        let d = p.decide_shell("npm ci && ls", &[], None);
        assert_eq!(d.action, Action::Allow);
        assert_eq!(d.network_rule(), Some("registry"));
        assert!(
            !serde_json::to_string(&d).unwrap().contains("\"network\""),
            "the grant is not part of the decision's JSON"
        );
        assert_eq!(p.decide_shell("npm test", &[], None).network_rule(), None);
        assert_eq!(
            Policy::builtin()
                .decide_shell("curl x", &[], None)
                .network_rule(),
            None
        );
    }
}
