//! `avfs remote add/list/remove/gc`, `push`, `fetch`, `pull`, `clone`: parse, call
//! `crate::remote`, print.

use clap::{Args, Subcommand};
use serde_json::json;

use super::Ctx;
use super::checkpoint::print_changes;
use super::merge::ConflictMode;
use super::output::human_size;
use crate::error::{Error, Result};
use crate::registry::{VaultRef, validate_name};
use crate::remote::{self, Progress, RefStatus, Target};
use crate::workspace::MAIN;
use crate::workspace::Store;

#[derive(Subcommand, Debug)]
pub enum RemoteCmd {
    /// Name an object store this vault pushes to and fetches from
    /// (s3://bucket[/prefix] or file:///dir). Credentials are never stored in the vault.
    Add {
        name: String,
        url: String,
        /// Only this machine ever pushes to it: move refs even if the store ignores
        /// conditional writes (two pushers could then lose an update). Given again with the
        /// remote's own URL, declares an existing remote so.
        #[arg(long)]
        single_writer: bool,
    },
    /// List this vault's remotes and where their workspaces were when last seen.
    #[command(visible_alias = "ls")]
    List,
    /// Forget a remote (the objects on it stay there).
    #[command(visible_alias = "rm")]
    Remove {
        name: String,
        /// Also when this lazy clone still has contents only that remote holds.
        #[arg(long)]
        force: bool,
    },
    /// Delete packs that no index names (left by killed pushes) once older than --grace.
    Gc {
        name: String,
        /// Leave younger packs alone: a push may be uploading them right now.
        #[arg(long, default_value_t = 3600, value_name = "SECS")]
        grace: u64,
    },
}

#[derive(Args, Debug)]
pub struct PushArgs {
    /// The remote (default: origin, or the only one).
    remote: Option<String>,
    /// Push this checkpoint of the workspace (default: its head checkpoint).
    checkpoint: Option<String>,
    /// Push this workspace (a fork in the same vault file) instead of the current one.
    #[arg(long, value_name = "W", conflicts_with_all = ["all", "checkpoint"])]
    workspace: Option<String>,
    /// Push every workspace of the vault file that has a checkpoint.
    #[arg(long, conflicts_with = "checkpoint")]
    all: bool,
}

#[derive(Args, Debug)]
pub struct FetchArgs {
    /// The remote (default: origin, or the only one).
    remote: Option<String>,
    /// Also fetch every file content this vault lacks (a lazy clone becomes complete).
    #[arg(long)]
    full: bool,
}

#[derive(Args, Debug)]
pub struct PullArgs {
    /// The remote (default: origin, or the only one).
    remote: Option<String>,
    /// Conflicting text files: `report` keeps this workspace's version; `markers` writes
    /// a three-way line merge.
    #[arg(long, value_enum, default_value_t = ConflictMode::Report, value_name = "MODE")]
    conflicts: ConflictMode,
}

#[derive(Args, Debug)]
pub struct CloneArgs {
    /// s3://bucket[/prefix] or file:///dir
    url: String,
    /// Name of the new vault (default: the URL's last component).
    name: Option<String>,
    /// Clone this checkpoint (a name in the workspace's history) instead of its head.
    #[arg(long, value_name = "C")]
    checkpoint: Option<String>,
    /// The remote workspace to clone.
    #[arg(long, value_name = "W", default_value = MAIN)]
    workspace: String,
    /// Fetch every file now instead of on first read.
    #[arg(long)]
    full: bool,
    /// Where to put the vault file (default: $AVFS_HOME/vaults/NAME.avfs).
    #[arg(long, value_name = "FILE")]
    path: Option<std::path::PathBuf>,
}

/// Progress on a terminal: a spinner with the bytes moved.
struct Bar(Option<indicatif::ProgressBar>);

impl Bar {
    fn new(ctx: &Ctx) -> Bar {
        let pb = ctx.out.progress(None, "starting");
        if let Some(pb) = &pb
            && let Ok(style) = indicatif::ProgressStyle::with_template(
                "{spinner} {msg} {bytes} ({binary_bytes_per_sec}, {elapsed})",
            )
        {
            pb.set_style(style);
        }
        Bar(pb)
    }
    fn done(&self) {
        if let Some(pb) = &self.0 {
            pb.finish_and_clear();
        }
    }
}

impl Progress for Bar {
    fn phase(&self, what: &str, _total: Option<u64>) {
        if let Some(pb) = &self.0 {
            pb.set_message(what.to_string());
        }
    }
    fn advance(&self, n: u64) {
        if let Some(pb) = &self.0 {
            pb.inc(n);
        }
    }
}

/// Runs long remote work with a progress line on a terminal, cleared when it ends.
fn with_progress<T>(ctx: &Ctx, work: impl FnOnce(&dyn Progress) -> Result<T>) -> Result<T> {
    let bar = Bar::new(ctx);
    let r = work(&bar);
    bar.done();
    r
}

/// "fetched N object(s), SIZE in N request(s), SECONDS" and what a lazy vault leaves.
fn print_fetched(
    fetched: &remote::fetch::Fetched,
    traffic: &remote::transport::Traffic,
    seconds: f64,
    lazy_note: &str,
) {
    println!(
        "fetched {} object(s), {} in {} request(s), {seconds:.2}s{lazy_note}",
        fetched.objects,
        human_size(fetched.bytes),
        traffic.requests,
    );
}

fn remote_or_default(v: &VaultRef, name: Option<String>) -> Result<String> {
    match name {
        Some(n) => Ok(n),
        None => Store::open(&v.path)?.read(remote::default_remote),
    }
}

pub fn run(ctx: &Ctx, cmd: RemoteCmd) -> Result<i32> {
    let (_, v) = ctx.target()?;
    match cmd {
        RemoteCmd::Add {
            name,
            url,
            single_writer,
        } => {
            let r = remote::add(&v.path, &v.workspace, &name, &url, single_writer)?;
            ctx.out.emit(&json!({"added": r}), || {
                let note = if single_writer {
                    " (single writer)"
                } else {
                    ""
                };
                println!("added remote {name} -> {url}{note}")
            });
        }
        RemoteCmd::List => {
            let list = remote::list(&v.path)?;
            ctx.out.emit(&json!({"remotes": list}), || {
                for r in &list {
                    let mut notes = Vec::new();
                    if r.single_writer {
                        notes.push("single writer");
                    }
                    match &r.conditional_writes {
                        Some(c) if c.honoured() => notes.push("conditional writes honoured"),
                        Some(_) => notes.push("conditional writes NOT honoured"),
                        None => {}
                    }
                    let notes = if notes.is_empty() {
                        String::new()
                    } else {
                        format!("  ({})", notes.join("; "))
                    };
                    println!("{:<16} {}{notes}", r.name, r.url);
                    for f in &r.refs {
                        println!("  {:<14} {}", f.workspace, &f.head[..12]);
                    }
                }
            });
        }
        RemoteCmd::Remove { name, force } => {
            let r = remote::remove(&v.path, &v.workspace, &name, force)?;
            ctx.out.emit(&json!({"removed": r}), || {
                println!("removed remote {name} ({})", r.url)
            });
        }
        RemoteCmd::Gc { name, grace } => {
            let r = remote::gc(&ctx.home, &v.path, &name, grace)?;
            ctx.out.emit(&r, || {
                println!(
                    "{}: deleted {} unreferenced pack(s), {} freed; {} younger than {grace}s kept",
                    r.remote,
                    r.packs_deleted,
                    human_size(r.bytes_freed),
                    r.packs_kept_young
                )
            });
        }
    }
    Ok(0)
}

pub fn push(ctx: &Ctx, a: PushArgs) -> Result<i32> {
    let (_, v) = ctx.target()?;
    let name = remote_or_default(&v, a.remote)?;
    let target = match (a.all, a.workspace, a.checkpoint) {
        (true, _, _) => Target::All,
        (_, Some(w), _) => Target::Workspace(w),
        (_, _, Some(c)) => Target::Checkpoint(c),
        _ => Target::Head,
    };
    if matches!(target, Target::All) {
        // Every mounted workspace of the file commits what it buffers.
        for other in ctx.registry()?.names_in(&v.path)? {
            ctx.sync_mount(&other)?;
        }
    } else {
        ctx.sync_mount(&v)?;
    }
    let r = with_progress(ctx, |bar| {
        remote::push(&ctx.home, &v.path, &name, &v.workspace, &target, bar)
    })?;
    ctx.out.emit(&r, || {
        for u in &r.refs {
            let short = |h: &str| h[..12.min(h.len())].to_string();
            let what = match u.status {
                RefStatus::UpToDate => "already there".to_string(),
                RefStatus::Created => "new".to_string(),
                RefStatus::Updated => format!(
                    "{}..{}",
                    short(u.old.as_deref().unwrap_or("")),
                    short(&u.new)
                ),
                RefStatus::LostRace => format!(
                    "LOST RACE: the remote holds {} instead",
                    u.found.as_deref().map(short).unwrap_or_else(|| "no ref".into())
                ),
            };
            println!(
                "{} -> {}/{}  checkpoint {}  ({what})",
                u.workspace, r.remote, u.workspace, u.checkpoint
            );
        }
        println!(
            "sent {} object(s) in {} pack(s), {} in {} request(s), {:.2}s",
            r.objects,
            r.packs,
            human_size(r.bytes),
            r.traffic.requests,
            r.seconds
        );
        for w in &r.unsaved_changes {
            eprintln!(
                "note: {w} has changes no checkpoint holds; they were not pushed (`avfs checkpoint save`, then push)"
            );
        }
    });
    let lost: Vec<&str> = r
        .refs
        .iter()
        .filter(|u| u.status == RefStatus::LostRace)
        .map(|u| u.workspace.as_str())
        .collect();
    if lost.is_empty() {
        return Ok(0);
    }
    eprintln!(
        "error: another push to {} won a race the store did not settle ({}): the ref was overwritten after this push wrote it. What this push uploaded stays on the remote; run `avfs pull {}`, then push again",
        r.remote,
        lost.join(", "),
        r.remote
    );
    Ok(1)
}

pub fn fetch(ctx: &Ctx, a: FetchArgs) -> Result<i32> {
    let (_, v) = ctx.target()?;
    let name = remote_or_default(&v, a.remote)?;
    let r = with_progress(ctx, |bar| {
        remote::fetch(&ctx.home, &v.path, &name, a.full, bar)
    })?;
    ctx.out.emit(&r, || {
        for f in &r.refs {
            let moved = match &f.previous {
                Some(p) if *p == f.head => "unchanged".to_string(),
                Some(p) => format!("{}..{}", &p[..12], &f.head[..12]),
                None => "new".to_string(),
            };
            println!(
                "{}/{}  checkpoint {}  ({moved})",
                r.remote, f.workspace, f.checkpoint
            );
        }
        let note = if r.lazy {
            "; file contents come on first read"
        } else {
            ""
        };
        print_fetched(&r.fetched, &r.traffic, r.seconds, note);
    });
    Ok(0)
}

pub fn pull(ctx: &Ctx, a: PullArgs) -> Result<i32> {
    let (_, v) = ctx.target()?;
    let name = remote_or_default(&v, a.remote)?;
    ctx.sync_mount(&v)?;
    let r = with_progress(ctx, |bar| {
        remote::pull(
            &ctx.home,
            &v.path,
            &v.workspace,
            &name,
            a.conflicts == ConflictMode::Markers,
            bar,
        )
    })?;
    ctx.invalidate_mount(&v)?;
    ctx.out.emit(&r, || {
        let paint = ctx.out.paint();
        match r.status {
            "up_to_date" => println!(
                "{}: already up to date with {}/{}",
                r.workspace, r.remote, r.workspace
            ),
            "fast_forward" => println!(
                "{}: fast-forwarded to {}",
                r.workspace,
                r.checkpoint.as_deref().unwrap_or("?")
            ),
            _ => {
                if let Some(b) = &r.before {
                    println!("unsaved changes saved first as checkpoint {b}");
                }
                print_changes(&r.taken, paint);
                for c in &r.conflicts {
                    println!("{} {} ({:?})", paint.bad("C"), c.path, c.kind);
                }
                println!(
                    "merged {}/{} into {}: checkpoint {}, {} change(s) taken, {} conflict(s)",
                    r.remote,
                    r.workspace,
                    r.workspace,
                    r.checkpoint.as_deref().unwrap_or("?"),
                    r.taken.len(),
                    r.conflicts.len()
                );
            }
        }
    });
    Ok(0)
}

/// A vault name from a URL: its last path component (or the bucket).
fn name_from_url(url: &str) -> String {
    let last = url
        .trim_end_matches('/')
        .rsplit('/')
        .find(|s| !s.is_empty())
        .unwrap_or("clone");
    let clean: String = last
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    clean.trim_start_matches('.').to_string()
}

pub fn clone(ctx: &Ctx, a: CloneArgs) -> Result<i32> {
    let name = a.name.clone().unwrap_or_else(|| name_from_url(&a.url));
    validate_name(&name)?;
    let reg = ctx.registry()?;
    if reg.get(&name)?.is_some() {
        return Err(Error::VaultExists(name));
    }
    let path = match &a.path {
        Some(p) => std::path::absolute(p).map_err(|e| Error::host(p.display(), e))?,
        None => reg.default_path_for(&name),
    };
    if path.to_str().is_none() {
        return Err(Error::InvalidArgument(
            path.display().to_string(),
            "vault paths must be UTF-8".into(),
        ));
    }
    let options = remote::CloneOptions {
        url: &a.url,
        dest: &path,
        workspace: &a.workspace,
        checkpoint: a.checkpoint.as_deref(),
        full: a.full,
    };
    let r = with_progress(ctx, |bar| remote::clone(&ctx.home, &options, bar))?;
    let v = VaultRef {
        name: name.clone(),
        path: path.clone(),
        workspace: MAIN.into(),
    };
    reg.add(&v)?;
    if reg.current()?.is_none() {
        reg.set_current(&name)?;
    }
    ctx.out.emit(&json!({"vault": v, "clone": r}), || {
        println!(
            "cloned {} ({}, checkpoint {}) into vault {name} at {}",
            r.url,
            r.workspace,
            r.checkpoint,
            path.display()
        );
        let note = if r.lazy {
            "; file contents come on first read (--full fetches all)"
        } else {
            ""
        };
        print_fetched(&r.fetched, &r.traffic, r.seconds, note);
    });
    Ok(0)
}

/// `vault fork SRC NAME --remote REMOTE[/WORKSPACE] [--from C]`: a new workspace in SRC's
/// vault file at a checkpoint of one of its remotes (see `remote::fork`).
pub fn fork(
    ctx: &Ctx,
    src: &str,
    name: &str,
    spec: &str,
    from: Option<&str>,
    use_it: bool,
) -> Result<i32> {
    validate_name(name)?;
    let (remote_name, remote_ws) = remote::fork::parse_spec(spec)?;
    let reg = ctx.registry()?;
    let source = reg
        .resolve(Some(src))?
        .ok_or_else(|| Error::NoSuchVault(src.into()))?;
    // A fork killed after its vault-file commit is registered here (so it is usable);
    // running the same fork again then finishes it when it is what was asked (the
    // library checks), and says what is there when it is not.
    crate::registry::reconcile(&reg, &source.path)?;
    let v = VaultRef {
        name: name.into(),
        path: source.path.clone(),
        workspace: name.into(),
    };
    match reg.get(name)? {
        Some(e) if e.path != v.path || e.workspace != v.workspace => {
            return Err(Error::VaultExists(name.into()));
        }
        _ => {}
    }
    ctx.sync_mount(&source)?;
    let spec = remote::fork::RemoteForkSpec {
        remote: remote_name,
        workspace: remote_ws,
        checkpoint: from,
    };
    let r = with_progress(ctx, |bar| {
        remote::fork::fork(&ctx.home, &source.path, &source.workspace, name, &spec, bar)
    })?;
    crate::registry::add_or_same(&reg, &v)?;
    if use_it {
        reg.set_current(name)?;
    }
    let doc = crate::documents::history::ForkReport {
        checkpoint: Some(r.checkpoint.clone()),
        completed_interrupted_fork: r.already_there,
        fork: v,
        parent: source.name.clone(),
        remote: Some(r),
    };
    ctx.out.emit(&doc, || {
        let r = doc.remote.as_ref().expect("a remote fork");
        println!(
            "{} {}/{} at checkpoint {} into {name}{}",
            if r.already_there {
                "already there (nothing to do): the fork of"
            } else {
                "forked"
            },
            r.remote,
            r.workspace,
            r.checkpoint,
            r.base
                .as_deref()
                .map(|b| format!(" (shares checkpoint {b} with {})", doc.parent))
                .unwrap_or_default()
        );
        let note = if r.lazy {
            "; file contents come on first read"
        } else {
            ""
        };
        print_fetched(&r.fetched, &r.traffic, r.seconds, note);
    });
    Ok(0)
}
