//! vault create/list/use/info/delete/fork/export/import/verify/upgrade.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use clap::Subcommand;
use serde::Serialize;
use serde_json::json;

use super::{Ctx, create_vault_file};
use crate::documents::history::ForkReport;
use crate::error::{Error, Result};
use crate::registry::{VaultRef, validate_name};
use crate::util::rfc3339;
use crate::workspace::{MAIN, Store, Workspace, list_workspaces};

#[derive(Subcommand, Debug)]
pub enum VaultCmd {
    /// Create a vault (a new .avfs file).
    Create {
        name: String,
        /// Where to put the file (default: $AVFS_HOME/vaults/NAME.avfs).
        #[arg(long)]
        path: Option<PathBuf>,
        /// Where every run of the vault and its forks sees the workspace (default:
        /// $AVFS_HOME/ws/NAME), e.g. the project's real path.
        #[arg(long, value_name = "DIR")]
        workspace_path: Option<PathBuf>,
    },
    /// Set where every run of a vault and its forks sees the workspace (an absolute
    /// path; runs mount the workspace there in a namespace of their own).
    SetPath {
        /// The vault or fork (default: the current one); forks share their vault's path.
        #[arg(long)]
        name: Option<String>,
        path: PathBuf,
    },
    /// List vaults and forks with their lineage.
    #[command(visible_alias = "ls")]
    List,
    /// Make NAME the vault used when --vault is not given.
    Use { name: String },
    /// Show one vault or fork (default: the current one).
    Info { name: Option<String> },
    /// Delete a vault (its file) or a fork (its workspace inside the file).
    #[command(visible_alias = "rm")]
    Delete {
        name: String,
        /// Do not ask for confirmation.
        #[arg(short = 'y', long)]
        yes: bool,
        /// Also delete a vault that has forks, and unmount it first if it is mounted (a
        /// run in progress still refuses: wait for it to finish).
        #[arg(long)]
        force: bool,
    },
    /// Fork a workspace in O(1): a new workspace in the same file sharing all content.
    Fork {
        src: String,
        name: String,
        /// Make the fork the current vault.
        #[arg(long = "use")]
        use_it: bool,
        /// Fork from this checkpoint of SRC instead of its live state (with --remote: a
        /// checkpoint of the remote workspace's history).
        #[arg(long, value_name = "CHECKPOINT")]
        from: Option<String>,
        /// Fork from a checkpoint of a remote of SRC's vault file (default: the head of
        /// the remote's workspace of SRC's name), fetching only what the file lacks.
        #[arg(long, value_name = "REMOTE[/WORKSPACE]")]
        remote: Option<String>,
    },
    /// Write a vault or fork as a standalone .avfs file with only what it references.
    Export { name: String, file: PathBuf },
    /// Register an existing .avfs file under a name (default: the file's stem).
    Import { file: PathBuf, name: Option<String> },
    /// Check the whole vault: its schema, SQLite's pages, every object's hash, every
    /// reference and the audit chain. Reads only: the file is left as it was.
    Verify { name: Option<String> },
    /// Give a vault made before page checksums a checksum in every page (checked on every
    /// read): the file is copied whole, checked, and replaces the old one. Needs the vault
    /// to be open nowhere else.
    Upgrade { name: Option<String> },
    /// Copy every checkpoint and workspace of a damaged vault whose objects are all
    /// intact into a new vault file, and list what was lost. The damaged file is only read.
    Recover {
        /// The damaged vault: a registered name or a path to a .avfs file.
        name: String,
        /// The new vault file to write (must not exist); register it with `vault import`.
        file: PathBuf,
    },
    /// Merge a fork back: take what it changed since it was forked, report conflicts, and
    /// save the result as a checkpoint of the target.
    Merge(super::merge::MergeArgs),
}

#[derive(Serialize)]
struct VaultJson {
    name: String,
    path: PathBuf,
    workspace: String,
    current: bool,
    /// Name of the fork's source, for forks.
    parent: Option<String>,
    /// Checkpoint of the source it was forked from.
    forked_from_checkpoint: Option<String>,
    created_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

fn registry_name_for(all: &[VaultRef], path: &Path, ws: &str) -> Option<String> {
    all.iter()
        .find(|v| v.path == path && v.workspace == ws)
        .map(|v| v.name.clone())
}

fn describe(all: &[VaultRef], v: &VaultRef, current: Option<&str>) -> VaultJson {
    let mut j = VaultJson {
        name: v.name.clone(),
        path: v.path.clone(),
        workspace: v.workspace.clone(),
        current: current == Some(v.name.as_str()),
        parent: None,
        forked_from_checkpoint: None,
        created_at: None,
        error: None,
    };
    let info = Store::open_read(&v.path)
        .and_then(|mut s| s.read(|db| crate::workspace::find_workspace(db, &v.workspace)));
    match info {
        Ok(Some(w)) => {
            j.parent = w
                .parent
                .as_deref()
                .map(|p| registry_name_for(all, &v.path, p).unwrap_or_else(|| p.to_string()));
            j.forked_from_checkpoint = w.parent_checkpoint;
            j.created_at = Some(rfc3339(w.created_at_ns));
        }
        Ok(None) => {
            j.error = Some(format!(
                "workspace {} is missing from the file",
                v.workspace
            ))
        }
        Err(e) => j.error = Some(e.to_string()),
    }
    j
}

pub fn run(ctx: &Ctx, cmd: VaultCmd) -> Result<i32> {
    match cmd {
        VaultCmd::SetPath { name, path } => {
            let sel = name.or_else(|| ctx.vault_sel.clone());
            let lib = ctx.lib().with_vault(sel);
            let (reg, v) = lib.target()?;
            let p = crate::context::path::check(&path, &ctx.home, &v.path)?;
            crate::context::path::change(&v, &p)?;
            let _ = reg;
            ctx.out
                .emit(&json!({"vault": v.name, "workspace_path": p}), || {
                    println!(
                        "runs of {} (and its forks) see the workspace at {}",
                        v.name,
                        p.display()
                    )
                });
        }
        VaultCmd::Create {
            name,
            path,
            workspace_path,
        } => {
            validate_name(&name)?;
            let reg = ctx.registry()?;
            if reg.get(&name)?.is_some() {
                return Err(Error::VaultExists(name));
            }
            let path = match path {
                Some(p) => std::path::absolute(&p).map_err(|e| Error::host(p.display(), e))?,
                None => reg.default_path_for(&name),
            };
            if path.to_str().is_none() {
                return Err(Error::InvalidArgument(
                    path.display().to_string(),
                    "vault paths must be UTF-8".into(),
                ));
            }
            let wp = workspace_path
                .map(|p| crate::context::path::check(&p, &ctx.home, &path))
                .transpose()?;
            create_vault_file(&path)?;
            if let Some(p) = &wp {
                let mut store = Store::open(&path)?;
                store.write(|db| crate::context::path::set(db, p))?;
            }
            let v = VaultRef {
                name: name.clone(),
                path: path.clone(),
                workspace: MAIN.into(),
            };
            reg.add(&v)?;
            if reg.current()?.is_none() {
                reg.set_current(&name)?;
            }
            ctx.out.emit(&json!({"created": v}), || {
                println!("created vault {name} at {}", path.display())
            });
        }
        VaultCmd::List => {
            let reg = ctx.registry()?;
            let mut paths: Vec<PathBuf> = reg.list()?.into_iter().map(|v| v.path).collect();
            paths.sort();
            paths.dedup();
            for p in &paths {
                reconcile(&reg, p)?;
            }
            let all = reg.list()?;
            let current = reg.current()?;
            let list: Vec<VaultJson> = all
                .iter()
                .map(|v| describe(&all, v, current.as_deref()))
                .collect();
            ctx.out.emit(&json!({"vaults": list}), || {
                for v in &list {
                    let lineage = match (&v.parent, &v.forked_from_checkpoint) {
                        (Some(p), Some(c)) => format!("fork of {p} at {c}"),
                        (Some(p), None) => format!("fork of {p}"),
                        _ => String::new(),
                    };
                    let err = v
                        .error
                        .as_deref()
                        .map(|e| format!("  ERROR: {e}"))
                        .unwrap_or_default();
                    println!(
                        "{} {:<24} {:<40} {lineage}{err}",
                        if v.current { "*" } else { " " },
                        v.name,
                        v.path.display()
                    );
                }
            });
        }
        VaultCmd::Use { name } => {
            let reg = ctx.registry()?;
            reg.set_current(&name)?;
            ctx.out
                .emit(&json!({"current": name}), || println!("now using {name}"));
        }
        VaultCmd::Info { name } => {
            let sel = name.or_else(|| ctx.vault_sel.clone());
            let ctx2 = Ctx {
                out: super::output::Out {
                    json: ctx.out.json,
                    quiet: ctx.out.quiet,
                },
                vault_sel: sel,
                home: ctx.home.clone(),
            };
            let (reg, v) = ctx2.existing()?;
            let all = reg.list()?;
            let mut store = Store::open_read(&v.path)?;
            let (checkpoints, forks, head, wpath) = store.read(|db| {
                let ws = Workspace::open(db, &v.workspace)?;
                let cps = ws.checkpoints()?.len();
                let forks: Vec<String> = list_workspaces(db)?
                    .into_iter()
                    .filter(|w| w.parent.as_deref() == Some(v.workspace.as_str()))
                    .map(|w| registry_name_for(&all, &v.path, &w.name).unwrap_or(w.name))
                    .collect();
                let wpath = crate::context::path::workspace_path(db, &ctx.home, &reg, &v)?;
                Ok((cps, forks, ws.head()?.map(|h| h.name), wpath))
            })?;
            let d = describe(&all, &v, reg.current()?.as_deref());
            let value = json!({"vault": d, "checkpoints": checkpoints, "head": head, "forks": forks,
                "workspace_path": wpath,
                "file_bytes": std::fs::metadata(&v.path).map(|m| m.len()).unwrap_or(0)});
            ctx.out.emit(&value, || {
                println!("name:        {}", d.name);
                println!("file:        {}", d.path.display());
                println!("workspace:   {}", d.workspace);
                println!("runs see it: {}", wpath.display());
                if let Some(p) = &d.parent {
                    println!(
                        "forked from: {p} at checkpoint {}",
                        d.forked_from_checkpoint.as_deref().unwrap_or("?")
                    );
                }
                println!(
                    "checkpoints: {checkpoints} (head: {})",
                    head.as_deref().unwrap_or("none")
                );
                println!(
                    "forks:       {}",
                    if forks.is_empty() {
                        "none".into()
                    } else {
                        forks.join(", ")
                    }
                );
            });
        }
        VaultCmd::Delete { name, yes, force } => return delete(ctx, &name, yes, force),
        VaultCmd::Merge(a) => return super::merge::merge(ctx, a),
        VaultCmd::Fork {
            src,
            name,
            use_it,
            from,
            remote: Some(spec),
        } => return super::remote::fork(ctx, &src, &name, &spec, from.as_deref(), use_it),
        VaultCmd::Fork {
            src,
            name,
            use_it,
            from,
            remote: None,
        } => {
            validate_name(&name)?;
            let reg = ctx.registry()?;
            let source = reg
                .resolve(Some(&src))?
                .ok_or_else(|| Error::NoSuchVault(src.clone()))?;
            // A fork killed after its vault-file commit is completed here, not refused.
            let adopted = reconcile(&reg, &source.path)?.contains(&name);
            if adopted && from.is_none() {
                let v = reg
                    .get(&name)?
                    .ok_or_else(|| Error::NoSuchVault(name.clone()))?;
                if use_it {
                    reg.set_current(&name)?;
                }
                let doc = ForkReport {
                    checkpoint: None,
                    completed_interrupted_fork: true,
                    fork: v,
                    parent: source.name.clone(),
                    remote: None,
                };
                ctx.out.emit(&doc, || {
                    println!("completed the interrupted fork {name} of {}", source.name);
                });
                return Ok(0);
            }
            if reg.get(&name)?.is_some() {
                return Err(Error::VaultExists(name));
            }
            let info = ctx.lib().fork_workspace(&source, &name, from.as_deref())?;
            let v = VaultRef {
                name: name.clone(),
                path: source.path.clone(),
                workspace: name.clone(),
            };
            add_or_same(&reg, &v)?;
            if use_it {
                reg.set_current(&name)?;
            }
            ctx.out.emit(
                &ForkReport {
                    checkpoint: info.parent_checkpoint.clone(),
                    completed_interrupted_fork: false,
                    fork: v,
                    parent: source.name.clone(),
                    remote: None,
                },
                || {
                    println!(
                        "forked {} into {name} at checkpoint {}",
                        source.name,
                        info.parent_checkpoint.as_deref().unwrap_or("?")
                    );
                },
            );
        }
        VaultCmd::Export { name, file } => {
            let reg = ctx.registry()?;
            let v = reg
                .resolve(Some(&name))?
                .ok_or_else(|| Error::NoSuchVault(name.clone()))?;
            let file = std::path::absolute(&file).map_err(|e| Error::host(file.display(), e))?;
            ctx.sync_mount(&v)?;
            let report = crate::vaultcopy::export_workspace(&v.path, &v.workspace, &file)?;
            ctx.out.emit(
                &json!({"exported": v.name, "file": file.display().to_string(), "report": report}),
                || {
                    println!("exported {} to {}", v.name, file.display());
                },
            );
        }
        VaultCmd::Import { file, name } => {
            let file = std::path::absolute(&file).map_err(|e| Error::host(file.display(), e))?;
            let mut store = Store::open(&file)?;
            let workspaces = store.read(list_workspaces)?;
            if !workspaces.iter().any(|w| w.name == MAIN) {
                return Err(Error::Corrupt {
                    path: file,
                    reason: "it has no main workspace".into(),
                });
            }
            let name = match name {
                Some(n) => n,
                None => file
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            };
            validate_name(&name)?;
            let reg = ctx.registry()?;
            reg.add(&VaultRef {
                name: name.clone(),
                path: file.clone(),
                workspace: MAIN.into(),
            })?;
            let mut forks = Vec::new();
            for w in workspaces.iter().filter(|w| w.name != MAIN) {
                if reg
                    .add(&VaultRef {
                        name: w.name.clone(),
                        path: file.clone(),
                        workspace: w.name.clone(),
                    })
                    .is_ok()
                {
                    forks.push(w.name.clone());
                }
            }
            ctx.out.emit(
                &json!({"imported": name, "file": file, "forks": forks}),
                || {
                    println!("registered {} as {name}", file.display());
                },
            );
        }
        VaultCmd::Recover { name, file } => {
            let reg = ctx.registry()?;
            let v = reg
                .resolve(Some(&name))?
                .ok_or_else(|| Error::NoSuchVault(name.clone()))?;
            let file = std::path::absolute(&file).map_err(|e| Error::host(file.display(), e))?;
            let report = crate::recover::recover(&v.path, &file)?;
            ctx.out.emit(
                &json!({"vault": v.name, "path": v.path, "file": file, "report": report}),
                || {
                    for r in &report.recovered {
                        println!("recovered {r}");
                    }
                    for l in &report.lost {
                        println!("LOST {}: {}", l.what, l.reason);
                    }
                    println!(
                        "wrote {} ({} recovered, {} lost); register it with `avfs vault import {}`",
                        file.display(),
                        report.recovered.len(),
                        report.lost.len(),
                        file.display()
                    );
                },
            );
            return Ok(if report.lost.is_empty() { 0 } else { 1 });
        }
        VaultCmd::Verify { name } => {
            let reg = ctx.registry()?;
            let v = match name.or_else(|| ctx.vault_sel.clone()) {
                Some(n) => reg.resolve(Some(&n))?.ok_or(Error::NoSuchVault(n))?,
                None => ctx.existing()?.1,
            };
            let report = crate::maintenance::verify_file(&v.path)?;
            ctx.out.emit(
                &json!({"vault": v.name, "path": v.path, "report": report}),
                || {
                    if report.ok {
                        println!("vault {} ok", v.name);
                        if !report.page_checksums {
                            println!(
                                "note: no page checksums (a vault made before them); `avfs vault upgrade {}` adds them",
                                v.name
                            );
                        }
                    } else {
                        for p in &report.problems {
                            println!("{}: {}: {}", p.kind, p.object, p.message);
                        }
                    }
                },
            );
            return Ok(if report.ok { 0 } else { 1 });
        }
        VaultCmd::Upgrade { name } => {
            let reg = ctx.registry()?;
            let v = match name.or_else(|| ctx.vault_sel.clone()) {
                Some(n) => reg.resolve(Some(&n))?.ok_or(Error::NoSuchVault(n))?,
                None => ctx.existing()?.1,
            };
            let report = crate::maintenance::add_page_checksums(&v.path)?;
            ctx.out.emit(
                &json!({"vault": v.name, "path": v.path, "report": report}),
                || {
                    if report.upgraded {
                        println!(
                            "vault {}: page checksums added ({} pages, {} bytes, was {})",
                            v.name, report.pages, report.bytes_after, report.bytes_before
                        );
                    } else {
                        println!("vault {} already has page checksums", v.name);
                    }
                },
            );
        }
    }
    Ok(0)
}

fn delete(ctx: &Ctx, name: &str, yes: bool, force: bool) -> Result<i32> {
    let reg = ctx.registry()?;
    let v = reg
        .get(name)?
        .ok_or_else(|| Error::NoSuchVault(name.into()))?;
    if v.workspace != MAIN {
        // A fork whose earlier delete was killed after the vault-file commit: only the
        // name is left.
        let gone = Store::open_read(&v.path)
            .and_then(|mut s| s.read(|db| crate::workspace::find_workspace(db, &v.workspace)))
            .map(|w| w.is_none())
            .unwrap_or(false);
        if gone {
            reg.remove(name)?;
            ctx.out
                .emit(&json!({"deleted": [name], "unmounted": []}), || {
                    println!("deleted {name}")
                });
            return Ok(0);
        }
    }
    let opened = Store::open_read(&v.path);
    let is_vault = opened.is_ok();
    let workspaces = match opened {
        Ok(mut s) => s.read(list_workspaces)?,
        Err(_) => vec![],
    };
    let children: Vec<String> = workspaces
        .iter()
        .filter(|w| {
            w.parent.as_deref() == Some(v.workspace.as_str())
                || (v.workspace == MAIN && w.name != MAIN)
        })
        .map(|w| w.name.clone())
        .collect();
    // The workspaces that go away: a vault's all, a fork only its own.
    let going: Vec<String> = if v.workspace == MAIN {
        let mut all: Vec<String> = workspaces.iter().map(|w| w.name.clone()).collect();
        if !all.iter().any(|w| w == MAIN) {
            all.push(MAIN.into());
        }
        all
    } else {
        vec![v.workspace.clone()]
    };
    // A run in progress refuses even with --force: stopping it is the user's call.
    drop(crate::vaultguard::hold_runs(&ctx.home, &v.path, &going)?);
    let mounts = crate::vaultguard::mounts_of(&ctx.home, &v.path, &going)?;
    if !mounts.is_empty() && !force {
        let at: Vec<String> = mounts
            .iter()
            .map(|m| format!("{} at {}", m.workspace, m.mountpoint.display()))
            .collect();
        return Err(Error::RunBusy(format!(
            "{name} is mounted ({}); deleting it would lose what is written there. \
             Unmount first (`avfs unmount {}`), or pass --force to unmount and delete",
            at.join(", "),
            mounts[0].mountpoint.display()
        )));
    }
    if !children.is_empty() && !force {
        return Err(Error::Refused(format!(
            "{name} has forks ({}); deleting it {}; pass --force to delete anyway",
            children.join(", "),
            if v.workspace == MAIN {
                "deletes them too"
            } else {
                "keeps them"
            }
        )));
    }
    if !yes {
        if ctx.out.json || !std::io::stdin().is_terminal() {
            return Err(Error::Refused(format!(
                "deleting {name} needs confirmation: pass -y"
            )));
        }
        eprint!(
            "delete {} {name}? [y/N] ",
            if v.workspace == MAIN { "vault" } else { "fork" }
        );
        let mut answer = String::new();
        std::io::stdin()
            .read_line(&mut answer)
            .map_err(|e| Error::host("stdin", e))?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            return Err(Error::Refused("not deleted".into()));
        }
    }
    // Held until the deletion is done: no run starts in between.
    let _runs = crate::vaultguard::hold_runs(&ctx.home, &v.path, &going)?;
    for ws in &going {
        crate::service::end_all(&ctx.home, &v.path, ws);
        crate::engine::kept::discard(&ctx.home, &v.path, ws);
        crate::engine::ignored::discard(&ctx.home, &v.path, ws);
    }
    let mut unmounted = Vec::new();
    for m in &mounts {
        crate::vaultguard::unmount(m)?;
        unmounted.push(m.mountpoint.clone());
    }
    let mut removed = vec![name.to_string()];
    if v.workspace == MAIN {
        for other in reg.names_in(&v.path)? {
            reg.remove(&other.name)?;
            if other.name != name {
                removed.push(other.name);
            }
        }
        // Only delete a file that is really a vault; a foreign file is left alone.
        if is_vault {
            for suffix in ["", "-wal", "-shm"] {
                let mut p = v.path.clone().into_os_string();
                p.push(suffix);
                let _ = std::fs::remove_file(PathBuf::from(p));
            }
            // The vault's package caches and kept exec output go with it (forks share
            // them: only here).
            let _ = std::fs::remove_dir_all(crate::sandbox::caches_dir(&ctx.home, &v.path));
            crate::exec::outputs::discard_vault(&ctx.home, &v.path);
        }
    } else {
        let mut store = Store::open(&v.path)?;
        crate::context::delete_fork(&mut store, &v, name)?;
        reg.remove(name)?;
        // What only the fork held goes now, and the file shrinks. Best effort: the
        // deletion is committed.
        if let Err(e) = store.write(|db| crate::reclaim::collect_all(db).map(|_| ())) {
            eprintln!("avfs: space reclaim after deleting {name}: {e}");
        }
    }
    ctx.out
        .emit(&json!({"deleted": removed, "unmounted": unmounted}), || {
            for m in &unmounted {
                println!("unmounted {}", m.display());
            }
            println!("deleted {}", removed.join(", "))
        });
    Ok(0)
}

pub use crate::registry::{add_or_same, reconcile};
