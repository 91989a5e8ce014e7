//! Environment a command is given (`--env K=V`, `K=V cmd`, `export K=V`, `env K=V cmd`):
//! variables that make programs load or run other code (`LD_PRELOAD`, `PATH`, `GIT_*`,
//! `PAGER`, `BASH_ENV`, ...), route traffic (`*_PROXY`) or point at host paths.

use super::analysis::Effect;
use super::decision::Category;
use super::paths::{self, Verdict, Where};
use std::path::Path;

/// Variables whose value is a program (or a command line) that tools run.
const COMMAND_VARS: &[&str] = &[
    "PAGER",
    "MANPAGER",
    "GIT_PAGER",
    "EDITOR",
    "VISUAL",
    "GIT_EDITOR",
    "GIT_SEQUENCE_EDITOR",
    "BROWSER",
    "GIT_EXTERNAL_DIFF",
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
    "SUDO_ASKPASS",
    "GIT_PROXY_COMMAND",
    "LESSOPEN",
    "LESSCLOSE",
    "PROMPT_COMMAND",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "RUSTC",
    "RUSTDOC",
    "CARGO_BUILD_RUSTC_WRAPPER",
    "CC",
    "CXX",
    "LD",
    "AR",
    "CPP",
    "FC",
    "SHELL",
    "CONFIG_SHELL",
    "MAKESHELL",
    "npm_config_script_shell",
    "NPM_CONFIG_SCRIPT_SHELL",
    "PYTHON",
    "TAR_RSH",
    "RSYNC_RSH",
    "CVS_RSH",
    "FCEDIT",
    "TERMINAL",
    "DIFF",
    "GIT_DIFF_OPTS",
];
/// Programs such variables may harmlessly name.
const HARMLESS_PROGRAMS: &[&str] = &[
    "",
    "cat",
    "less",
    "less -R",
    "less -FRX",
    "more",
    "true",
    "false",
    "head",
    "tail",
    "vi",
    "vim",
    "nano",
    "ed",
    "gcc",
    "g++",
    "cc",
    "c++",
    "clang",
    "clang++",
    "ld",
    "ar",
    "cpp",
    "rustc",
    "rustdoc",
    "sccache",
    "ccache",
    "sh",
    "bash",
    "/bin/sh",
    "/bin/bash",
    "/usr/bin/env bash",
    "python3",
    "python",
    "diff",
    "git",
    "cat -v",
];
/// Variables whose value makes a program load code: the sandbox is the boundary for
/// what that code does; without it a person decides.
const LOADER_VARS: &[&str] = &[
    "BASH_ENV",
    "ENV",
    "PS4",
    "SHELLOPTS",
    "BASHOPTS",
    "PYTHONSTARTUP",
    "PYTHONHOME",
    "PYTHONINSPECT",
    "NODE_OPTIONS",
    "PERL5OPT",
    "RUBYOPT",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "GIT_EXEC_PATH",
    "GIT_TEMPLATE_DIR",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GCONV_PATH",
    "IFS",
    "BASH_XTRACEFD",
    "HISTFILE",
    "NPM_CONFIG_USERCONFIG",
    "npm_config_userconfig",
    "PIP_CONFIG_FILE",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "DOCKER_HOST",
    "KUBECONFIG",
    "SSH_AUTH_SOCK",
];
/// Variables holding lists of directories programs load code from.
const SEARCH_PATH_VARS: &[&str] = &[
    "PYTHONPATH",
    "NODE_PATH",
    "PERL5LIB",
    "PERLLIB",
    "RUBYLIB",
    "CLASSPATH",
    "GEM_PATH",
    "GEM_HOME",
    "GOPATH",
    "MANPATH",
];
/// Directories a `PATH` may hold without question.
const SYSTEM_BIN: &[&str] = &[
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
    "/usr/games",
    "/usr/local/games",
    "/snap/bin",
];
/// Toolchain directories in the home directory a `PATH` may hold.
const HOME_BIN: &[&str] = &[
    ".cargo/bin",
    ".local/bin",
    "go/bin",
    ".bun/bin",
    ".deno/bin",
    ".npm-global/bin",
    ".yarn/bin",
    ".pyenv/bin",
    ".pyenv/shims",
    ".rustup/toolchains",
];

fn effect(category: Category, rule: &'static str, reason: String) -> Effect {
    Effect {
        category,
        rule,
        reason,
    }
}

fn home_toolchain(dir: &str) -> bool {
    let rest = dir
        .strip_prefix("~/")
        .or_else(|| dir.strip_prefix("$HOME/"))
        .or_else(|| dir.strip_prefix("${HOME}/"));
    rest.is_some_and(|r| {
        HOME_BIN
            .iter()
            .any(|b| r == *b || r.starts_with(&format!("{b}/")))
    })
}

/// What setting `name=value` for a command running in `dir` can do.
///
/// `contained` says whether a sandboxed run's sandbox holds a host path (always false
/// without the sandbox): a value naming one is harmless there.
pub fn classify(
    name: &str,
    value: &str,
    dir: &Where,
    ws: Option<&Path>,
    contained: &dyn Fn(&str) -> bool,
) -> Vec<Effect> {
    let mut out = Vec::new();
    let upper = name.to_ascii_uppercase();
    if upper.starts_with("LD_") || upper.starts_with("DYLD_") {
        out.push(effect(
            Category::Unknown,
            "env-loader",
            format!("{name} makes every program load other code"),
        ));
    } else if name == "PATH" {
        for d in value.split(':') {
            if d.is_empty()
                || d == "$PATH"
                || d == "${PATH}"
                || SYSTEM_BIN.contains(&d)
                || home_toolchain(d)
                || contained(d)
            {
                continue;
            }
            match paths::judge(d, dir, ws) {
                Verdict::Inside => out.push(effect(
                    Category::Mutating,
                    "env-path",
                    format!("PATH finds programs in {d}, in the workspace"),
                )),
                Verdict::NotJudged => out.push(effect(
                    Category::Unknown,
                    "env-path",
                    format!("PATH finds programs in {d}, a directory the line does not give"),
                )),
                _ => out.push(effect(
                    Category::HostEscapeRisk,
                    "env-path",
                    format!("PATH finds programs in {d}, outside the workspace"),
                )),
            }
        }
        return out;
    } else if upper.ends_with("_PROXY") && upper != "NO_PROXY" {
        out.push(effect(
            Category::Networked,
            "env-proxy",
            format!("{name} routes network traffic through {value}"),
        ));
    } else if COMMAND_VARS.contains(&name)
        || (upper.starts_with("CARGO_TARGET_")
            && (upper.ends_with("_RUNNER") || upper.ends_with("_LINKER")))
    {
        if !HARMLESS_PROGRAMS.contains(&value.trim()) {
            out.push(effect(
                Category::Unknown,
                "env-command",
                format!("{name}={value} makes programs run {value}"),
            ));
        }
    } else if LOADER_VARS.contains(&name)
        || upper.starts_with("GIT_CONFIG_KEY_")
        || upper.starts_with("GIT_CONFIG_VALUE_")
    {
        out.push(effect(
            Category::Unknown,
            "env-loader",
            format!("{name} makes programs load other code or configuration"),
        ));
    } else if SEARCH_PATH_VARS.contains(&name) {
        for d in value
            .split(':')
            .filter(|d| !d.is_empty() && !d.starts_with("$"))
        {
            if contained(d) {
                continue;
            }
            if let Verdict::Outside(why) = paths::judge(d, dir, ws) {
                out.push(effect(
                    Category::HostEscapeRisk,
                    "env-path",
                    format!("{name} loads code from {d}, which {why}"),
                ));
            }
        }
        return out;
    }
    // Any value that names a host path: `CARGO_TARGET_DIR=/tmp/t`, `HOME=/root`.
    if (value.starts_with('/') || paths::names_home(value)) && name != "PATH" {
        let first = value.split(':').next().unwrap_or(value);
        match paths::judge(first, dir, ws) {
            Verdict::Outside(_) if contained(first) => {}
            Verdict::Outside(why) => out.push(effect(
                Category::HostEscapeRisk,
                "env-host-path",
                format!("{name}={value}: {first} {why}"),
            )),
            Verdict::Network => out.push(effect(
                Category::Networked,
                "env-host-path",
                format!("{name}={value} names a network endpoint"),
            )),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cats(n: &str, v: &str) -> Vec<Category> {
        classify(n, v, &Where::In(vec![]), None, &|_| false)
            .into_iter()
            .map(|e| e.category)
            .collect()
    }

    #[test]
    fn variables_that_run_code_or_leave() {
        assert_eq!(cats("LD_PRELOAD", "./x.so"), [Category::Unknown]);
        assert_eq!(cats("PATH", "/evil:/usr/bin"), [Category::HostEscapeRisk]);
        assert!(cats("PATH", "$HOME/.cargo/bin:$PATH").is_empty());
        assert_eq!(cats("PATH", "./bin:$PATH"), [Category::Mutating]);
        assert_eq!(cats("GIT_EXTERNAL_DIFF", "sh -c x"), [Category::Unknown]);
        assert!(cats("GIT_PAGER", "cat").is_empty());
        assert_eq!(cats("HTTPS_PROXY", "http://x"), [Category::Networked]);
        assert!(cats("RUST_LOG", "debug").is_empty());
        assert_eq!(
            cats("CARGO_TARGET_DIR", "/tmp/t"),
            [Category::HostEscapeRisk]
        );
        assert_eq!(cats("LESSOPEN", "|curl x"), [Category::Unknown]);
    }
}
