//! Shell completion: `avfs completions SHELL` prints a script that registers avfs's own
//! completer with the shell; on <TAB> the shell runs `AVFS_COMPLETE=SHELL avfs -- WORDS...`
//! and avfs answers with candidates (clap_complete's dynamic engine), including the real
//! names of vaults, forks, workspaces, checkpoints and remotes, listed by
//! `crate::candidates`. This module only wires those listings to the arguments that take
//! them.

use std::ffi::OsString;
use std::sync::OnceLock;

use clap::Command;
use clap_complete::engine::{
    ArgValueCompleter, CompletionCandidate, PathCompleter, ValueCompleter,
};
use clap_complete::env::{Bash, Elvish, EnvCompleter, Fish, Powershell, Zsh};

use crate::candidates::{Candidate, Lister};
use crate::error::{Error, Result};

/// The environment variable that turns an avfs run into a completion request. Not the
/// generic `COMPLETE`: a variable of that name set for another tool must not change what
/// every avfs command does.
pub const COMPLETE_VAR: &str = "AVFS_COMPLETE";

/// Answers a completion request and exits, if this run is one; otherwise returns.
pub fn complete_if_asked() {
    if std::env::var_os(COMPLETE_VAR).is_none_or(|v| v.is_empty() || v == "0") {
        return;
    }
    let args: Vec<OsString> = std::env::args_os().collect();
    let _ = SCAN.set(scan(&args));
    clap_complete::CompleteEnv::with_factory(|| with_completers(super::cli_command()))
        .var(COMPLETE_VAR)
        .complete();
}

/// `avfs completions SHELL`: the script registering the completer, as
/// `AVFS_COMPLETE=SHELL avfs` prints it.
pub fn registration(shell: clap_complete::Shell) -> Result<Vec<u8>> {
    let adapter: &dyn EnvCompleter = match shell {
        clap_complete::Shell::Bash => &Bash,
        clap_complete::Shell::Zsh => &Zsh,
        clap_complete::Shell::Fish => &Fish,
        clap_complete::Shell::Elvish => &Elvish,
        clap_complete::Shell::PowerShell => &Powershell,
        other => {
            return Err(Error::InvalidArgument(
                other.to_string(),
                "no completion support for this shell: use bash, zsh, fish, elvish or powershell"
                    .into(),
            ));
        }
    };
    let mut buf = Vec::new();
    adapter
        .write_registration(COMPLETE_VAR, "avfs", "avfs", &completer_path(), &mut buf)
        .map_err(|e| Error::host("completion script", e))?;
    Ok(buf)
}

/// How the script calls avfs back: as this run was called (`avfs` stays a PATH lookup, so
/// an upgraded binary is picked up; a relative path is made absolute), like `CompleteEnv`.
fn completer_path() -> String {
    let argv0 = std::path::PathBuf::from(std::env::args_os().next().unwrap_or_default());
    let path = if argv0.components().count() > 1 {
        std::path::absolute(&argv0).unwrap_or(argv0)
    } else {
        argv0
    };
    path.to_string_lossy().into_owned()
}

/// What the command line being completed selects, read before clap sees it (a completer
/// is only given the word under the cursor).
#[derive(Debug, Default)]
struct Scan {
    /// `--vault X` / `--vault=X` on the line, else `AVFS_VAULT`.
    vault: Option<String>,
    /// SRC of `vault fork SRC NAME`: whose checkpoints `--from` takes.
    fork_src: Option<String>,
}

static SCAN: OnceLock<Scan> = OnceLock::new();

/// Reads `avfs -- avfs WORDS...`: the words after the first `--` are the command line; the
/// word under the cursor (bash passes its index, the other shells complete the last one)
/// is skipped, being unfinished.
fn scan(args: &[OsString]) -> Scan {
    let words: Vec<String> = args
        .iter()
        .skip_while(|a| *a != "--")
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let cursor = std::env::var("_CLAP_COMPLETE_INDEX")
        .ok()
        .and_then(|i| i.parse::<usize>().ok())
        .unwrap_or(words.len().saturating_sub(1));
    // Finished words only, up to a `--` ending the options.
    let done: Vec<&str> = words
        .iter()
        .enumerate()
        .skip(1)
        .filter(|(i, _)| *i != cursor)
        .map(|(_, w)| w.as_str())
        .take_while(|w| *w != "--")
        .collect();
    let mut s = Scan::default();
    let mut it = done.iter().copied();
    let mut after_vault_fork = 0u8; // 1: saw `vault`, 2: saw `vault fork`
    while let Some(w) = it.next() {
        if w == "--vault" {
            s.vault = it.next().map(str::to_string);
        } else if let Some(v) = w.strip_prefix("--vault=") {
            s.vault = Some(v.to_string());
        } else if w == "--from" {
            it.next();
        } else if w.starts_with('-') {
            // Another flag: not a positional word.
        } else if after_vault_fork == 0 && w == "vault" {
            after_vault_fork = 1;
        } else if after_vault_fork == 1 && w == "fork" {
            after_vault_fork = 2;
        } else if after_vault_fork == 2 && s.fork_src.is_none() {
            s.fork_src = Some(w.to_string());
        }
    }
    if s.vault.is_none() {
        s.vault = std::env::var("AVFS_VAULT").ok().filter(|v| !v.is_empty());
    }
    s
}

/// Which names an argument takes.
#[derive(Clone, Copy)]
enum Kind {
    /// Registered vault and fork names (or a path, once the word has a `/`).
    Vault,
    /// Registered forks, in any vault.
    Fork,
    /// Other names registered in the selected vault's file.
    ForkOfSelected,
    /// Workspaces in the selected vault's file.
    Workspace,
    /// Checkpoints of the selected workspace.
    Checkpoint,
    /// Checkpoints of `vault fork`'s SRC.
    CheckpointOfForkSrc,
    Remote,
    /// `mount [NAME] MOUNTPOINT`: a vault name or a directory.
    VaultOrDir,
}

/// (subcommand path, argument id, names it takes). An entry whose argument is gone is
/// skipped (tests/completions_cli.rs checks each kind through the real binary).
const TARGETS: &[(&[&str], &str, Kind)] = &[
    (&[], "vault", Kind::Vault),
    (&["vault", "set-path"], "name", Kind::Vault),
    (&["vault", "use"], "name", Kind::Vault),
    (&["vault", "info"], "name", Kind::Vault),
    (&["vault", "delete"], "name", Kind::Vault),
    (&["vault", "fork"], "src", Kind::Vault),
    (&["vault", "fork"], "from", Kind::CheckpointOfForkSrc),
    (&["vault", "export"], "name", Kind::Vault),
    (&["vault", "verify"], "name", Kind::Vault),
    (&["vault", "recover"], "name", Kind::Vault),
    (&["vault", "merge"], "fork", Kind::Fork),
    (&["vault", "merge"], "into", Kind::Vault),
    (&["checkpoint", "restore"], "name", Kind::Checkpoint),
    (&["checkpoint", "delete"], "name", Kind::Checkpoint),
    (&["checkpoint", "diff"], "a", Kind::Checkpoint),
    (&["checkpoint", "diff"], "b", Kind::Checkpoint),
    (&["diff"], "a", Kind::Checkpoint),
    (&["diff"], "b", Kind::Checkpoint),
    (&["restore"], "from", Kind::Checkpoint),
    (&["cat"], "at", Kind::Checkpoint),
    (&["grep"], "at", Kind::Checkpoint),
    (&["find"], "at", Kind::Checkpoint),
    (&["find"], "newer", Kind::Checkpoint),
    (&["exec"], "fork", Kind::ForkOfSelected),
    (&["mount"], "args", Kind::VaultOrDir),
    (&["remote", "remove"], "name", Kind::Remote),
    (&["remote", "gc"], "name", Kind::Remote),
    (&["push"], "remote", Kind::Remote),
    (&["push"], "checkpoint", Kind::Checkpoint),
    (&["push"], "workspace", Kind::Workspace),
    (&["fetch"], "remote", Kind::Remote),
    (&["pull"], "remote", Kind::Remote),
];

/// The command line definition with a completer on every argument that takes a name.
fn with_completers(mut cmd: Command) -> Command {
    for (path, arg, kind) in TARGETS {
        let kind = *kind;
        cmd = attach(
            cmd,
            path,
            arg,
            ArgValueCompleter::new(move |cur: &std::ffi::OsStr| complete(kind, cur)),
        );
    }
    cmd
}

fn attach(cmd: Command, path: &[&str], arg: &str, c: ArgValueCompleter) -> Command {
    match path.split_first() {
        // Changed in place: `mut_arg` moves the argument last, which would renumber
        // the positionals.
        None if cmd.get_arguments().any(|a| a.get_id() == arg) => cmd.mut_args(|a| {
            if a.get_id() == arg {
                a.add(c.clone())
            } else {
                a
            }
        }),
        None => cmd,
        Some((sub, rest)) if cmd.find_subcommand(sub).is_some() => {
            cmd.mut_subcommand(sub, |s| attach(s, rest, arg, c))
        }
        Some(_) => cmd,
    }
}

fn complete(kind: Kind, current: &std::ffi::OsStr) -> Vec<CompletionCandidate> {
    let scan = SCAN.get_or_init(Scan::default);
    let home = crate::registry::default_home();
    let lister = Lister::new(home.clone(), scan.vault.clone());
    let word = current.to_string_lossy();
    let looks_like_path = word.contains('/') || word.starts_with('.') || word.starts_with('~');
    // A listing that fails (no vault yet, a damaged file) offers nothing: the shell has
    // nowhere to show an error.
    let names = match kind {
        Kind::Vault | Kind::VaultOrDir if looks_like_path => Ok(vec![]),
        Kind::Vault | Kind::VaultOrDir => lister.vaults(),
        Kind::Fork => lister.forks(),
        Kind::ForkOfSelected => lister.forks_of_selected(),
        Kind::Workspace => lister.workspaces(),
        Kind::Checkpoint => lister.checkpoints(),
        Kind::CheckpointOfForkSrc => {
            Lister::new(home, scan.fork_src.clone().or_else(|| scan.vault.clone())).checkpoints()
        }
        Kind::Remote => lister.remotes(),
    };
    let mut out: Vec<CompletionCandidate> = names
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.name.starts_with(word.as_ref()))
        .map(candidate)
        .collect();
    match kind {
        Kind::Vault if looks_like_path => out.extend(PathCompleter::any().complete(current)),
        Kind::VaultOrDir => out.extend(PathCompleter::dir().complete(current)),
        _ => {}
    }
    out
}

fn candidate(c: Candidate) -> CompletionCandidate {
    CompletionCandidate::new(c.name).help(c.help.map(Into::into))
}
