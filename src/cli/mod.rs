//! The `avfs` command line: parses, calls the library, prints. One file per command group.

mod checkpoint;
mod complete;
mod examples;
mod exec;
mod exec_output;
mod fs;
mod history;
mod merge;
mod mount;
mod output;
mod quota;
mod remote;
mod service;
mod shell;
mod tools;
mod upkeep;
mod vault;
mod view;

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::error::Result;
use crate::registry::{Registry, VaultRef};
use crate::workspace::{Store, Workspace};
use output::Out;
pub use output::{EXIT_ERROR, EXIT_OK, EXIT_USAGE};

#[derive(Parser, Debug)]
#[command(
    name = "avfs",
    version,
    about = "Forkable, versioned workspaces for AI agents, in one file",
    propagate_version = true
)]
pub struct Cli {
    /// Print exactly one JSON document on stdout (errors too).
    #[arg(long, global = true)]
    pub json: bool,
    /// For scripts: no progress bars and no human summaries on stdout (errors are still
    /// printed; the exit code tells the outcome). `--json` output is unchanged.
    #[arg(short = 'q', long, global = true)]
    pub quiet: bool,
    /// Vault or fork to use: a registered name or a path to a .avfs file.
    #[arg(long, global = true, env = "AVFS_VAULT", value_name = "NAME|PATH")]
    pub vault: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create, list, fork, export and delete vaults.
    #[command(subcommand)]
    Vault(vault::VaultCmd),
    /// List a directory.
    Ls(view::LsArgs),
    /// Print a file (live, or as it was at a checkpoint).
    Cat(view::CatArgs),
    /// Write a file from an argument or stdin.
    Write(fs::WriteArgs),
    /// Create directories.
    Mkdir(fs::MkdirArgs),
    /// Remove files or directories.
    Rm(fs::RmArgs),
    /// Move or rename.
    Mv(fs::MvArgs),
    /// Copy files or directories (keeps modes and times; O(1) for untouched subtrees).
    Cp(fs::CpArgs),
    /// Show a directory tree.
    Tree(view::TreeArgs),
    /// Show a path's attributes.
    Stat(view::StatArgs),
    /// Make a hard link, or a symbolic link with -s.
    Ln(fs::LnArgs),
    /// Change permission bits (octal like 755, or symbolic like u+x,go-w).
    Chmod(fs::ChmodArgs),
    /// Copy a host directory into the workspace.
    Import(fs::ImportArgs),
    /// Copy a workspace directory out to the host.
    Export(fs::ExportArgs),
    /// Save, list, restore, delete and compare checkpoints.
    #[command(subcommand, visible_alias = "snapshot")]
    Checkpoint(checkpoint::CheckpointCmd),
    /// Show what changed between two checkpoints, or a checkpoint and the live state.
    Diff(checkpoint::DiffArgs),
    /// List the versions of one file where it changed, across checkpoints and the live state.
    Log(checkpoint::LogArgs),
    /// Show the workspace, its head checkpoint, unsaved changes, mounts, runs, kept overlays and approvals.
    Status,
    /// Restore one path from a checkpoint.
    Restore(checkpoint::RestoreArgs),
    /// Show the audit log, or verify its hash chain.
    Audit(upkeep::AuditArgs),
    /// Remove content nothing references any more.
    Gc,
    /// Show sizes and counts.
    Stats,
    /// Mount a workspace as a directory (FUSE).
    Mount(mount::MountArgs),
    /// Unmount (also cleans up after a mount server that died).
    #[command(visible_alias = "umount")]
    Unmount(mount::UnmountArgs),
    /// List live mounts.
    Mounts,
    /// Run a command through the policy boundary: decide, checkpoint, run in the mounted
    /// workspace, report exactly what changed.
    Exec(exec::ExecArgs),
    /// Long-lived processes of the workspace (a dev server, a database), in its sandbox:
    /// runs reach them on 127.0.0.1, the host does not.
    #[command(subcommand)]
    Service(service::ServiceCmd),
    /// Print the full stdout or stderr of an exec (the envelope keeps its head and tail).
    Output(exec_output::OutputArgs),
    /// Show, check and test the exec policy.
    #[command(subcommand)]
    Policy(exec::PolicyCmd),
    /// List approvals that are pending in every vault (or only --vault's; --all: every one).
    Approvals(exec::ApprovalsArgs),
    /// Approve a pending request; run it with `avfs exec --approve ID`.
    Approve(exec::DecideArgs),
    /// Deny a pending request.
    Deny(exec::DecideArgs),
    /// Show, set or clear quotas (total bytes, file count, single file size).
    Quota(quota::QuotaArgs),
    /// (internal) Started by `avfs exec`: finishes its work if it dies.
    #[command(name = "exec-watchdog", hide = true)]
    ExecWatchdog(exec::WatchdogArgs),
    /// Search file contents for a regular expression (ripgrep-like).
    Grep(tools::GrepArgs),
    /// Find files by name, type, size, tags, metadata or change since a checkpoint.
    Find(tools::FindArgs),
    /// Full-text search over text files, ranked, with snippets (index kept up to date).
    Search(tools::SearchArgs),
    /// Add tags to a file or directory.
    Tag(tools::TagArgs),
    /// Remove tags from a file or directory.
    Untag(tools::TagArgs),
    /// Show, set or remove metadata (key = value) of a file or directory.
    Meta(tools::MetaArgs),
    /// An interactive $SHELL in the mounted workspace: checkpoint on entry, change summary on exit.
    Shell(shell::ShellArgs),
    /// Print the script that makes SHELL complete avfs commands, flags and the names of
    /// vaults, forks, checkpoints and remotes (bash, zsh, fish, elvish, powershell).
    Completions(CompletionsArgs),
    /// Print the man page, or write one page per command into a directory.
    Man(ManArgs),
    /// Serve the Model Context Protocol on stdin/stdout: the avfs tools for an MCP client.
    Mcp(McpArgs),
    /// Add, list and remove the object stores this vault shares checkpoints through.
    #[command(subcommand)]
    Remote(remote::RemoteCmd),
    /// Upload checkpoints the remote lacks and move its refs (refused if someone else
    /// pushed since: pull first).
    Push(remote::PushArgs),
    /// Download the remote's checkpoints (and, unless this is a lazy clone, their files).
    Fetch(remote::FetchArgs),
    /// Fetch, then fast-forward or merge the remote's checkpoint into this workspace.
    Pull(remote::PullArgs),
    /// Make a new vault from a remote: trees now, file contents on first read (--full: all now).
    Clone(remote::CloneArgs),
}

#[derive(clap::Args, Debug)]
pub struct McpArgs {
    /// Keep the workspace mounted (FUSE) for the session: what exec's FUSE engine then
    /// reuses. The default where overlayfs cannot run (exec falls back to FUSE).
    #[arg(long, conflicts_with = "no_mount")]
    mount: bool,
    /// Never keep the workspace mounted for the session.
    #[arg(long)]
    no_mount: bool,
}

#[derive(clap::Args, Debug)]
pub struct CompletionsArgs {
    shell: clap_complete::Shell,
}

#[derive(clap::Args, Debug)]
pub struct ManArgs {
    /// Write avfs.1 and a page per command (avfs-vault-merge.1, ...) into DIR.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// The command line definition with the examples of every command: what parsing, `--help`,
/// the man pages and the completion scripts all use.
pub fn cli_command() -> clap::Command {
    examples::add(Cli::command(), "")
}

/// Prints the script registering avfs's dynamic completer (see `complete`): candidates
/// come from avfs at each <TAB>, so they include the names in the user's vaults.
fn completions(a: CompletionsArgs) -> Result<i32> {
    use std::io::Write;
    let script = complete::registration(a.shell)?;
    std::io::stdout()
        .write_all(&script)
        .map_err(|e| crate::error::Error::host("stdout", e))?;
    Ok(EXIT_OK)
}

fn man(ctx: &Ctx, a: ManArgs) -> Result<i32> {
    let cmd = cli_command();
    match a.dir {
        None => {
            let mut buf = Vec::new();
            clap_mangen::Man::new(cmd)
                .render(&mut buf)
                .map_err(|e| crate::error::Error::host("man page", e))?;
            use std::io::Write;
            std::io::stdout()
                .write_all(&buf)
                .map_err(|e| crate::error::Error::host("stdout", e))?;
        }
        Some(dir) => {
            std::fs::create_dir_all(&dir)
                .map_err(|e| crate::error::Error::host(dir.display(), e))?;
            clap_mangen::generate_to(cmd, &dir)
                .map_err(|e| crate::error::Error::host(dir.display(), e))?;
            let mut written: Vec<String> = std::fs::read_dir(&dir)
                .map_err(|e| crate::error::Error::host(dir.display(), e))?
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("avfs") && n.ends_with(".1"))
                .collect();
            written.sort();
            ctx.out
                .emit(&serde_json::json!({"dir": dir, "pages": written}), || {
                    println!("wrote {} man pages to {}", written.len(), dir.display())
                });
        }
    }
    Ok(EXIT_OK)
}

/// Everything a command needs to find and open its vault.
pub struct Ctx {
    pub out: Out,
    pub vault_sel: Option<String>,
    pub home: PathBuf,
}

impl Ctx {
    pub fn registry(&self) -> Result<Registry> {
        Registry::open(&self.home)
    }

    /// The library's view of `$AVFS_HOME` and the `--vault` selection.
    pub fn lib(&self) -> crate::context::Context {
        crate::context::Context::new(self.home.clone(), self.vault_sel.clone())
    }

    /// The selected vault; with no selection and no vaults yet, creates `default`.
    pub fn target(&self) -> Result<(Registry, VaultRef)> {
        self.lib().target()
    }

    /// The selected vault for a command that only reads: never creates one.
    pub fn existing(&self) -> Result<(Registry, VaultRef)> {
        self.lib().existing()
    }

    pub fn open(&self) -> Result<(VaultRef, Store)> {
        let (_, v) = self.target()?;
        self.sync_mount(&v)?;
        let store = Store::open(&v.path)?;
        Ok((v, store))
    }

    /// The selected vault, opened read-only (see `Store::open_read`).
    pub fn open_read(&self) -> Result<(VaultRef, Store)> {
        let (_, v) = self.existing()?;
        self.sync_mount(&v)?;
        let store = Store::open_read(&v.path)?;
        Ok((v, store))
    }

    /// If the workspace is mounted, has the serving process commit its buffered writes.
    pub fn sync_mount(&self, v: &VaultRef) -> Result<()> {
        self.lib().sync_mount(v)
    }

    /// After changing a mounted workspace from outside: the kernel must forget its caches.
    pub fn invalidate_mount(&self, v: &VaultRef) -> Result<()> {
        self.lib().invalidate_mount(v)
    }

    /// Runs a mutating command on the selected workspace in one transaction, with its audit row.
    pub fn mutate<T>(
        &self,
        action: &str,
        detail: serde_json::Value,
        f: impl FnOnce(&mut Workspace) -> Result<T>,
    ) -> Result<T> {
        let (_, v) = self.target()?;
        self.mutate_in(&v, action, |ws| Ok((f(ws)?, detail)))
    }

    /// Runs a mutating command on workspace `v` in one transaction; `f` returns the
    /// result and the audit row's detail, written in the same transaction. A mount of the
    /// workspace commits its buffers first and drops the kernel's caches afterwards.
    pub fn mutate_in<T>(
        &self,
        v: &VaultRef,
        action: &str,
        f: impl FnOnce(&mut Workspace) -> Result<(T, serde_json::Value)>,
    ) -> Result<T> {
        self.lib().mutate_in(v, action, f)
    }

    /// A full collection (every root marked) on the selected vault, then the file shrinks:
    /// after a command that may leave settled garbage (`checkpoint delete`).
    pub fn reclaim_all(&self) -> Result<()> {
        let (v, mut store) = self.open()?;
        if let Err(e) = store.write(|db| crate::reclaim::collect_all(db).map(|_| ())) {
            eprintln!("avfs: space reclaim in {}: {e}", v.name);
        }
        Ok(())
    }

    /// Runs `f` on workspace `v` as `mutate_in` would, then rolls everything back: what a
    /// change would do, with nothing changed (`--dry-run`).
    pub fn trial_in<T>(
        &self,
        v: &VaultRef,
        f: impl FnOnce(&mut Workspace) -> Result<T>,
    ) -> Result<T> {
        self.sync_mount(v)?;
        let store = Store::open(&v.path)?;
        Store::exec(&store.conn, "BEGIN IMMEDIATE")?;
        let r = (|| {
            let mut ws = Workspace::open(&store.conn, &v.workspace)?;
            f(&mut ws)
        })();
        let _ = Store::exec(&store.conn, "ROLLBACK");
        r.map_err(|e| store.corrupt_if_sqlite(e))
    }

    /// Runs a read-only command on one consistent snapshot of a vault opened read-only:
    /// `f` reads through `Workspace::peek`, `live_root` and the stored trees, which load
    /// nothing into the live layer, so the vault file is left exactly as it was.
    pub fn view<T>(&self, f: impl FnOnce(&mut Workspace) -> Result<T>) -> Result<T> {
        let (v, mut store) = self.open_read()?;
        store.read(|db| {
            let mut ws = Workspace::open(db, &v.workspace)?;
            f(&mut ws)
        })
    }

    /// A read that still goes through the live layer (loading directories into it, a
    /// write): `export`, whose walk works on live inodes.
    pub fn view_loading<T>(&self, f: impl FnOnce(&mut Workspace) -> Result<T>) -> Result<T> {
        let (_, v) = self.existing()?;
        self.sync_mount(&v)?;
        let mut store = Store::open(&v.path)?;
        store.write(|db| {
            let mut ws = Workspace::open(db, &v.workspace)?;
            f(&mut ws)
        })
    }
}

pub use crate::context::create_vault_file;

fn wants_json(args: &[OsString]) -> bool {
    args.iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "--json")
}

pub fn main() -> i32 {
    // A shell asking for completions (`AVFS_COMPLETE=bash avfs -- avfs ...`): answered
    // here, before anything else runs, and the process exits.
    complete::complete_if_asked();
    // A lazy clone's missing file contents are fetched on first read, by any reader.
    crate::remote::lazy::install();
    let args: Vec<OsString> = std::env::args_os().collect();
    // The examples only show in help and error text; adding them to every command costs
    // about as much as the parse (and each `avfs exec` starts avfs twice), so a command
    // line that parses is parsed without them, and anything else again with them.
    let parsed = Cli::command()
        .try_get_matches_from(&args)
        .or_else(|_| cli_command().try_get_matches_from(&args))
        .and_then(|m| Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return EXIT_OK;
            }
            if wants_json(&args) {
                let v = serde_json::json!({"error": {"kind": "usage", "message": e.to_string().trim(), "exit_code": EXIT_USAGE}});
                println!("{}", serde_json::to_string_pretty(&v).unwrap());
            } else {
                let _ = e.print();
            }
            return EXIT_USAGE;
        }
    };
    let ctx = Ctx {
        out: Out {
            json: cli.json,
            quiet: cli.quiet,
        },
        vault_sel: cli.vault.clone(),
        home: crate::registry::default_home(),
    };
    match run(&ctx, cli.command) {
        Ok(code) => code,
        Err(e) => ctx.out.error(&e),
    }
}

fn run(ctx: &Ctx, cmd: Command) -> Result<i32> {
    match cmd {
        Command::Vault(c) => vault::run(ctx, c),
        Command::Ls(a) => view::ls(ctx, a),
        Command::Cat(a) => view::cat(ctx, a),
        Command::Write(a) => fs::write(ctx, a),
        Command::Mkdir(a) => fs::mkdir(ctx, a),
        Command::Rm(a) => fs::rm(ctx, a),
        Command::Mv(a) => fs::mv(ctx, a),
        Command::Cp(a) => fs::cp(ctx, a),
        Command::Tree(a) => view::tree(ctx, a),
        Command::Stat(a) => view::stat(ctx, a),
        Command::Ln(a) => fs::ln(ctx, a),
        Command::Chmod(a) => fs::chmod(ctx, a),
        Command::Import(a) => fs::import(ctx, a),
        Command::Export(a) => fs::export(ctx, a),
        Command::Checkpoint(c) => checkpoint::run(ctx, c),
        Command::Diff(a) => checkpoint::diff(ctx, a),
        Command::Log(a) => checkpoint::log(ctx, a),
        Command::Status => history::status(ctx),
        Command::Restore(a) => checkpoint::restore_path(ctx, a),
        Command::Audit(a) => upkeep::audit(ctx, a),
        Command::Gc => upkeep::gc(ctx),
        Command::Stats => upkeep::stats(ctx),
        Command::Mount(a) => mount::mount(ctx, a),
        Command::Unmount(a) => mount::unmount(ctx, a),
        Command::Mounts => mount::mounts(ctx),
        Command::Exec(a) => exec::exec(ctx, a),
        Command::Output(a) => exec_output::output(ctx, a),
        Command::Policy(c) => exec::policy(ctx, c),
        Command::Service(c) => service::run(ctx, c),
        Command::Approvals(a) => exec::approvals(ctx, a),
        Command::Approve(a) => exec::decide(ctx, a, true),
        Command::Deny(a) => exec::decide(ctx, a, false),
        Command::Quota(a) => quota::run(ctx, a),
        Command::ExecWatchdog(a) => exec::watchdog(ctx, a),
        Command::Grep(a) => tools::grep(ctx, a),
        Command::Find(a) => tools::find(ctx, a),
        Command::Search(a) => tools::search(ctx, a),
        Command::Tag(a) => tools::tag(ctx, a, true),
        Command::Untag(a) => tools::tag(ctx, a, false),
        Command::Meta(a) => tools::meta(ctx, a),
        Command::Shell(a) => shell::shell(ctx, a),
        Command::Completions(a) => completions(a),
        Command::Man(a) => man(ctx, a),
        Command::Mcp(a) => {
            // With the overlay engine every exec runs at the workspace's stable path on
            // the host's own file system: a session mount would only cost.
            let mount =
                a.mount || (!a.no_mount && crate::engine::overlay_unavailable(&ctx.home).is_some());
            crate::mcp::serve(&ctx.home, ctx.vault_sel.clone(), mount)
        }
        Command::Remote(c) => remote::run(ctx, c),
        Command::Push(a) => remote::push(ctx, a),
        Command::Fetch(a) => remote::fetch(ctx, a),
        Command::Pull(a) => remote::pull(ctx, a),
        Command::Clone(a) => remote::clone(ctx, a),
    }
}
