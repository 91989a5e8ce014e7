//! Rules: a program name and argument patterns mapped to a category (and optionally a
//! decision). The built-in table covers common tools; policy files put their rules in
//! front of it. What a program does through its arguments (sed scripts, git -c, wrappers)
//! is found by `tools`, not here.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::decision::{Action, Category};

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

pub(crate) fn glob(pat: &str, s: &str) -> bool {
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

/// The `[defaults]` of the built-in policy.
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

/// (rule name, program glob, leading argument patterns, any-argument patterns, category,
/// reason). Most specific first: the first match wins.
type Row = (
    &'static str,
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
    Category,
    &'static str,
);

const NPM_INSTALL: &[&str] = &[
    "install", "i", "in", "ins", "inst", "insta", "instal", "isnt", "isnta", "isntal",
    "isntall", "add", "ci", "clean-install", "install-clean", "update", "up", "upgrade",
    "udpate", "install-test", "it", "install-ci-test", "cit", "exec", "x", "publish",
    "unpublish", "login", "adduser", "outdated", "view", "info", "show", "search", "audit",
    "dedupe", "ddp", "rebuild", "create",
];

fn table() -> Vec<Row> {
    use Category::*;
    let mut t: Vec<Row> = vec![
        ("git-network", "git", &["push"], &[], Networked, "git push talks to a remote"),
        ("git-network", "git", &["fetch"], &[], Networked, "git fetch talks to a remote"),
        ("git-network", "git", &["pull"], &[], Networked, "git pull talks to a remote"),
        ("git-network", "git", &["clone"], &[], Networked, "git clone downloads a repository"),
        ("git-network", "git", &["ls-remote"], &[], Networked, "git ls-remote talks to a remote"),
        ("git-network", "git", &["submodule", "update"], &[], Networked, "fetches submodules"),
        ("git-network", "git", &["remote", "update"], &[], Networked, "fetches from remotes"),
        ("git-network", "git", &["archive"], &["--remote*"], Networked, "talks to a remote"),
        ("git-network", "git", &["send-email"], &[], Networked, "sends mail"),
        ("npm-init", "npm", &["init"], &[], Mutating, "creates package.json"),
        ("package-install", "npx", &[], &[], Networked, "npx may download packages"),
        ("package-install", "yarn", &["add"], &[], Networked, "installs packages from a registry"),
        ("package-install", "yarn", &["install"], &[], Networked, "installs packages from a registry"),
        ("package-install", "yarn", &["up*"], &[], Networked, "installs packages from a registry"),
        ("package-install", "yarn", &["dlx"], &[], Networked, "downloads and runs a package"),
        ("package-install", "yarn", &["publish"], &[], Networked, "publishes to a registry"),
        ("package-install", "pnpm", &["add"], &[], Networked, "installs packages from a registry"),
        ("package-install", "pnpm", &["install"], &[], Networked, "installs packages from a registry"),
        ("package-install", "pnpm", &["i"], &[], Networked, "installs packages from a registry"),
        ("package-install", "pnpm", &["up*"], &[], Networked, "installs packages from a registry"),
        ("package-install", "pnpm", &["dlx"], &[], Networked, "downloads and runs a package"),
        ("package-install", "pnpm", &["publish"], &[], Networked, "publishes to a registry"),
        ("package-install", "bun", &["add"], &[], Networked, "installs packages from a registry"),
        ("package-install", "bun", &["install"], &[], Networked, "installs packages from a registry"),
        ("package-install", "bunx", &[], &[], Networked, "may download packages"),
        ("package-install", "pip", &["install"], &[], Networked, "installs packages from PyPI"),
        ("package-install", "pip", &["download"], &[], Networked, "downloads packages from PyPI"),
        ("package-install", "pip3", &["install"], &[], Networked, "installs packages from PyPI"),
        ("package-install", "pip3", &["download"], &[], Networked, "downloads packages from PyPI"),
        ("package-install", "pipx", &[], &[], Networked, "installs packages from PyPI"),
        ("package-install", "uv", &["pip", "install"], &[], Networked, "installs packages from PyPI"),
        ("package-install", "uv", &["add"], &[], Networked, "installs packages from PyPI"),
        ("package-install", "uv", &["sync"], &[], Networked, "installs packages from PyPI"),
        ("package-install", "uvx", &[], &[], Networked, "downloads and runs a package"),
        ("package-install", "poetry", &["install"], &[], Networked, "installs packages"),
        ("package-install", "poetry", &["add"], &[], Networked, "installs packages"),
        ("package-install", "poetry", &["update"], &[], Networked, "installs packages"),
        ("package-install", "gem", &["install"], &[], Networked, "installs gems"),
        ("package-install", "bundle", &["install"], &[], Networked, "installs gems"),
        ("package-install", "bundle", &["update"], &[], Networked, "installs gems"),
        ("package-install", "cargo", &["install"], &[], Networked, "downloads crates"),
        ("package-install", "cargo", &["add"], &[], Networked, "resolves crates from the registry"),
        ("package-install", "cargo", &["update"], &[], Networked, "updates from the registry"),
        ("package-install", "cargo", &["fetch"], &[], Networked, "downloads crates"),
        ("package-install", "cargo", &["publish"], &[], Networked, "publishes a crate"),
        ("package-install", "cargo", &["search"], &[], Networked, "queries the registry"),
        ("package-install", "apt*", &["install"], &[], Networked, "installs system packages"),
        ("package-install", "apt*", &["update"], &[], Networked, "downloads package lists"),
        ("package-install", "apt*", &["upgrade"], &[], Networked, "installs system packages"),
        ("package-install", "brew", &["install"], &[], Networked, "installs packages"),
        ("package-install", "go", &["get"], &[], Networked, "downloads modules"),
        ("package-install", "go", &["install"], &["*@*"], Networked, "downloads modules"),
        ("package-install", "go", &["mod", "download"], &[], Networked, "downloads modules"),
        ("network-tool", "curl", &[], &[], Networked, "transfers data over the network"),
        ("network-tool", "wget", &[], &[], Networked, "downloads over the network"),
        ("network-tool", "ssh", &[], &[], Networked, "opens a remote shell"),
        ("network-tool", "scp", &[], &[], Networked, "copies over the network"),
        ("network-tool", "sftp", &[], &[], Networked, "copies over the network"),
        ("network-tool", "rsync", &[], &["*:*"], Networked, "copies to or from a remote host"),
        ("network-tool", "nc", &[], &[], Networked, "opens network connections"),
        ("network-tool", "ncat", &[], &[], Networked, "opens network connections"),
        ("network-tool", "netcat", &[], &[], Networked, "opens network connections"),
        ("network-tool", "socat", &[], &[], Networked, "opens network connections"),
        ("network-tool", "telnet", &[], &[], Networked, "opens network connections"),
        ("network-tool", "ftp", &[], &[], Networked, "transfers over the network"),
        ("network-tool", "ping", &[], &[], Networked, "sends packets"),
        ("network-tool", "dig", &[], &[], Networked, "queries DNS"),
        ("network-tool", "nslookup", &[], &[], Networked, "queries DNS"),
        ("network-tool", "host", &[], &[], Networked, "queries DNS"),
        ("network-tool", "gh", &[], &[], Networked, "talks to GitHub"),
        ("network-tool", "aws", &[], &[], Networked, "talks to a cloud API"),
        ("network-tool", "gcloud", &[], &[], Networked, "talks to a cloud API"),
        ("network-tool", "kubectl", &[], &[], Networked, "talks to a cluster"),
        ("privilege", "sudo", &[], &[], HostEscapeRisk, "runs as another user on the host"),
        ("privilege", "doas", &[], &[], HostEscapeRisk, "runs as another user on the host"),
        ("privilege", "su", &[], &[], HostEscapeRisk, "runs as another user on the host"),
        ("privilege", "pkexec", &[], &[], HostEscapeRisk, "runs as another user on the host"),
        ("privilege", "setcap", &[], &[], HostEscapeRisk, "gives a program privileges"),
        ("host-control", "chroot", &[], &[], HostEscapeRisk, "changes the root directory"),
        ("host-control", "nsenter", &[], &[], HostEscapeRisk, "enters host namespaces"),
        ("host-control", "unshare", &[], &[], HostEscapeRisk, "changes namespaces"),
        ("host-control", "mount", &[], &[], HostEscapeRisk, "changes host mounts"),
        ("host-control", "umount", &[], &[], HostEscapeRisk, "changes host mounts"),
        ("host-control", "swapon", &[], &[], HostEscapeRisk, "changes host swap"),
        ("host-control", "systemctl", &[], &[], HostEscapeRisk, "controls host services"),
        ("host-control", "service", &[], &[], HostEscapeRisk, "controls host services"),
        ("host-control", "docker", &[], &[], HostEscapeRisk, "controls containers on the host"),
        ("host-control", "podman", &[], &[], HostEscapeRisk, "controls containers on the host"),
        ("host-control", "kill", &["%*"], &[], Mutating, "signals a job of this shell"),
        ("host-control", "kill", &[], &[], HostEscapeRisk, "signals host processes"),
        ("host-control", "pkill", &[], &[], HostEscapeRisk, "signals host processes"),
        ("host-control", "killall", &[], &[], HostEscapeRisk, "signals host processes"),
        ("host-control", "reboot", &[], &[], HostEscapeRisk, "restarts the host"),
        ("host-control", "shutdown", &[], &[], HostEscapeRisk, "stops the host"),
        ("host-control", "halt", &[], &[], HostEscapeRisk, "stops the host"),
        ("host-control", "poweroff", &[], &[], HostEscapeRisk, "stops the host"),
        ("host-control", "insmod", &[], &[], HostEscapeRisk, "loads kernel modules"),
        ("host-control", "modprobe", &[], &[], HostEscapeRisk, "loads kernel modules"),
        ("host-control", "rmmod", &[], &[], HostEscapeRisk, "unloads kernel modules"),
        ("host-control", "sysctl", &[], &["-w", "--write", "*=*"], HostEscapeRisk, "changes kernel settings"),
        ("host-control", "iptables", &[], &[], HostEscapeRisk, "changes the host firewall"),
        ("host-control", "crontab", &[], &[], HostEscapeRisk, "schedules host jobs"),
        ("host-control", "at", &[], &[], HostEscapeRisk, "schedules host jobs"),
        ("host-control", "timedatectl", &[], &[], HostEscapeRisk, "changes the host clock"),
        ("host-control", "useradd", &[], &[], HostEscapeRisk, "changes host users"),
        ("host-control", "usermod", &[], &[], HostEscapeRisk, "changes host users"),
        ("host-control", "passwd", &[], &[], HostEscapeRisk, "changes host users"),
        ("host-control", "chsh", &[], &[], HostEscapeRisk, "changes host users"),
        ("host-control", "mknod", &[], &[], HostEscapeRisk, "creates device nodes"),
        ("host-control", "avfs", &["approve", "**"], &[], HostEscapeRisk, "approves a pending request: only a person does that"),
        ("host-control", "avfs", &["deny", "**"], &[], HostEscapeRisk, "decides a pending request: only a person does that"),
        ("host-control", "avfs", &[], &[], HostEscapeRisk, "controls vaults on the host"),
        ("rm-recursive-or-force", "rm", &[], &["-*r*", "-*R*", "-*f*", "--recursive", "--force"], Destructive, "removes recursively or without asking"),
        ("git-reset-hard", "git", &["reset"], &["--hard"], Destructive, "discards uncommitted work"),
        ("git-clean", "git", &["clean"], &["-*f*", "--force"], Destructive, "deletes untracked files"),
        ("git-checkout-discard", "git", &["checkout", "--", "**"], &[], Destructive, "discards changes to files"),
        ("git-checkout-discard", "git", &["checkout", "."], &[], Destructive, "discards changes to files"),
        ("git-restore", "git", &["restore"], &[], Destructive, "discards changes to files"),
        ("git-branch-delete", "git", &["branch"], &["-D", "--delete", "-d"], Destructive, "deletes a branch"),
        ("git-stash-drop", "git", &["stash", "drop"], &[], Destructive, "drops stashed work"),
        ("git-stash-drop", "git", &["stash", "clear"], &[], Destructive, "drops stashed work"),
        ("disk-tool", "dd", &[], &[], Destructive, "writes raw data"),
        ("disk-tool", "truncate", &[], &[], Destructive, "cuts files"),
        ("disk-tool", "mkfs*", &[], &[], Destructive, "formats a file system"),
        ("disk-tool", "shred", &[], &[], Destructive, "destroys files"),
        ("disk-tool", "wipefs", &[], &[], Destructive, "destroys file systems"),
        ("disk-tool", "fallocate", &[], &[], Destructive, "changes file allocation"),
        ("git-read", "git", &["status"], &[], ReadOnly, "shows state"),
        ("git-read", "git", &["log"], &[], ReadOnly, "shows history"),
        ("git-read", "git", &["diff"], &[], ReadOnly, "shows changes"),
        ("git-read", "git", &["show"], &[], ReadOnly, "shows objects"),
        ("git-read", "git", &["blame"], &[], ReadOnly, "shows history"),
        ("git-read", "git", &["grep"], &[], ReadOnly, "searches"),
        ("git-read", "git", &["ls-files"], &[], ReadOnly, "lists files"),
        ("git-read", "git", &["ls-tree"], &[], ReadOnly, "lists a tree"),
        ("git-read", "git", &["cat-file"], &[], ReadOnly, "shows objects"),
        ("git-read", "git", &["rev-parse"], &[], ReadOnly, "resolves names"),
        ("git-read", "git", &["rev-list"], &[], ReadOnly, "lists commits"),
        ("git-read", "git", &["describe"], &[], ReadOnly, "describes a commit"),
        ("git-read", "git", &["shortlog"], &[], ReadOnly, "summarizes history"),
        ("git-read", "git", &["reflog"], &[], ReadOnly, "shows the reflog"),
        ("git-read", "git", &["branch"], &["--list", "-a", "-r", "-v", "-vv", "--show-current", "--contains*", "--merged*"], ReadOnly, "lists branches"),
        ("git-read", "git", &["branch"], &[], ReadOnly, "lists branches"),
        ("git-read", "git", &["remote", "-v"], &[], ReadOnly, "lists remotes"),
        ("git-read", "git", &["remote"], &[], ReadOnly, "lists remotes"),
        ("git-read", "git", &["tag", "-l"], &[], ReadOnly, "lists tags"),
        ("git-read", "git", &["tag", "--list"], &[], ReadOnly, "lists tags"),
        ("git-read", "git", &["stash", "list"], &[], ReadOnly, "lists stashed work"),
        ("git-read", "git", &["config", "--get*"], &[], ReadOnly, "reads configuration"),
        ("git-read", "git", &["config", "--list"], &[], ReadOnly, "reads configuration"),
        ("git-read", "git", &["config", "-l"], &[], ReadOnly, "reads configuration"),
        ("git-read", "git", &["merge-base"], &[], ReadOnly, "finds a common ancestor"),
        ("git-read", "git", &["--version"], &[], ReadOnly, "shows the version"),
        ("git-read", "git", &["help"], &[], ReadOnly, "shows help"),
        ("git-other", "git", &[], &[], Mutating, "changes the repository"),
        ("cargo-read", "cargo", &["--version"], &[], ReadOnly, "shows the version"),
        ("cargo-read", "cargo", &["metadata"], &["--offline"], ReadOnly, "describes the package"),
        ("cargo-read", "cargo", &["tree"], &["--offline"], ReadOnly, "shows dependencies"),
    ];
    t.extend(
        NPM_INSTALL
            .iter()
            .map(|s| -> Row {
                (
                    "package-install",
                    "npm",
                    std::slice::from_ref(s),
                    &[],
                    Networked,
                    "talks to the package registry",
                )
            }),
    );
    t
}

const READ_ONLY: &[&str] = &[
    "ls", "cat", "tac", "grep", "egrep", "fgrep", "rg", "ag", "ack", "find", "fd", "head",
    "tail", "wc", "echo", "printf", "pwd", "true", "false", "test", "[", "[[", "stat", "file",
    "diff", "cmp", "sort", "uniq", "cut", "tr", "which", "type", "whereis", "whoami", "id",
    "groups", "uname", "tree", "du", "df", "less", "more", "most", "sed", "awk", "gawk",
    "mawk", "nawk", "jq", "yq", "basename", "dirname", "realpath", "readlink", "seq", "sleep",
    "printenv", "md5sum", "sha1sum", "sha224sum", "sha256sum", "sha384sum", "sha512sum",
    "b2sum", "b3sum", "cksum", "sum", "xxd", "od", "hexdump", "strings", "nl", "column",
    "comm", "join", "paste", "fold", "fmt", "expr", "bc", "yes", "cd", "pushd", "popd",
    "dirs", "exit", "hostname", "nproc", "ps", "pgrep", "uptime", "free", "lscpu", "arch",
    "date", "cal", "locale", "tput", "tty", "export", "set", "unset", "shift", "wait",
    "read", "readarray", "mapfile", "local", "declare", "typeset", "readonly", "return",
    "break", "continue", "getopts", "let", "shopt", "umask", "ulimit", "hash", "help",
    "history", "jobs", "times", "caller", ":", "trap", "alias", "unalias", "eval", "column",
    "numfmt", "rev", "shuf", "split", "csplit", "expand", "unexpand", "iconv", "base64",
    "base32", "zcat", "zless", "zgrep", "bzcat", "xzcat", "lsof", "getent", "ldd",
    "man", "info", "apropos", "whatis", "envsubst", "look", "tsort", "factor", "dircolors",
    "git-lfs", "rustc-demangle", "cloc", "tokei", "wait", "disown", "bg", "fg", "complete",
    "compgen", "builtin", "enable", "logname", "users", "who", "w", "last", "env",
];

const MUTATING: &[(&str, &str)] = &[
    ("touch", "creates or touches files"),
    ("mkdir", "creates directories"),
    ("rmdir", "removes empty directories"),
    ("rm", "removes files"),
    ("unlink", "removes a file"),
    ("cp", "copies files"),
    ("mv", "moves files"),
    ("install", "copies files"),
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
    ("bzip2", "compresses files"),
    ("xz", "compresses files"),
    ("zstd", "compresses files"),
    ("7z", "creates or extracts archives"),
    ("make", "builds"),
    ("cmake", "builds"),
    ("ctest", "runs tests"),
    ("ninja", "builds"),
    ("meson", "builds"),
    ("bazel", "builds"),
    ("cargo", "builds and runs Rust code"),
    ("rustc", "compiles"),
    ("rustfmt", "formats files"),
    ("rustup", "manages toolchains"),
    ("gcc", "compiles"),
    ("g++", "compiles"),
    ("cc", "compiles"),
    ("c++", "compiles"),
    ("clang", "compiles"),
    ("clang++", "compiles"),
    ("ld", "links"),
    ("ar", "creates archives"),
    ("go", "builds and runs Go code"),
    ("gofmt", "formats files"),
    ("javac", "compiles"),
    ("java", "runs a program"),
    ("mvn", "builds"),
    ("gradle", "builds"),
    ("dotnet", "builds"),
    ("npm", "runs package scripts"),
    ("yarn", "runs package scripts"),
    ("pnpm", "runs package scripts"),
    ("bun", "runs package scripts"),
    ("deno", "runs a script"),
    ("tsc", "compiles"),
    ("eslint", "lints files"),
    ("prettier", "formats files"),
    ("jest", "runs tests"),
    ("vitest", "runs tests"),
    ("mocha", "runs tests"),
    ("node", "runs a script"),
    ("python", "runs a script"),
    ("python3", "runs a script"),
    ("pytest", "runs tests"),
    ("tox", "runs tests"),
    ("nox", "runs tests"),
    ("black", "formats files"),
    ("ruff", "lints or formats files"),
    ("flake8", "lints files"),
    ("mypy", "checks types"),
    ("pylint", "lints files"),
    ("isort", "formats files"),
    ("pip", "manages Python packages"),
    ("pip3", "manages Python packages"),
    ("uv", "manages Python projects"),
    ("poetry", "manages Python projects"),
    ("virtualenv", "creates a virtual environment"),
    ("venv", "creates a virtual environment"),
    ("ruby", "runs a script"),
    ("rake", "runs tasks"),
    ("bundle", "runs Ruby tools"),
    ("perl", "runs a script"),
    ("php", "runs a script"),
    ("lua", "runs a script"),
    ("sh", "runs a shell"),
    ("bash", "runs a shell"),
    ("dash", "runs a shell"),
    ("zsh", "runs a shell"),
    ("ksh", "runs a shell"),
    ("source", "runs a script in this shell"),
    (".", "runs a script in this shell"),
    ("vim", "edits files"),
    ("vi", "edits files"),
    ("nano", "edits files"),
    ("ed", "edits files"),
    ("sqlite3", "opens a database"),
    ("flock", "takes a lock file"),
    ("mktemp", "creates a temporary file"),
    ("mkfifo", "creates a pipe"),
    ("diff3", "compares files"),
    ("git-lfs", "manages large files"),
    ("pre-commit", "runs hooks"),
    ("shellcheck", "checks scripts"),
];

fn row(name: &str, program: &str, args: &[&str], any: &[&str], c: Category, why: &str) -> Rule {
    Rule {
        name: name.into(),
        program: program.into(),
        args: args.iter().map(|s| s.to_string()).collect(),
        any_arg: any.iter().map(|s| s.to_string()).collect(),
        category: Some(c),
        decision: None,
        reason: why.into(),
        source: "built-in".into(),
        ..Default::default()
    }
}

/// The built-in rules, most specific first.
pub fn builtin_rules() -> Vec<Rule> {
    let mut v: Vec<Rule> = table()
        .into_iter()
        .map(|(n, p, a, any, c, why)| row(n, p, a, any, c, why))
        .collect();
    for p in READ_ONLY {
        v.push(row("read-only-tool", p, &[], &[], Category::ReadOnly, "only reads"));
    }
    for (p, why) in MUTATING {
        v.push(row("build-or-edit", p, &[], &[], Category::Mutating, why));
    }
    v
}
