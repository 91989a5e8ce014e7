//! status, checkpoint list --graph, checkpoint prune and retention, diff --stat output:
//! translation only; the work is in `crate::history` and `crate::diff`.

use clap::Args;
use serde_json::json;

use super::Ctx;
use crate::diff::stat::{FileStat, StatTotals};
use crate::error::{Error, Result};
use crate::history::prune::{self, Retention};

#[derive(Args, Debug)]
pub struct ListArgs {
    /// Every workspace's checkpoints as a graph of forks and merges, newest first.
    #[arg(long)]
    pub graph: bool,
    /// List the newest N checkpoints (before `--cursor`); `total` and `next_cursor` say
    /// what is left.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_PAGE)]
    pub limit: usize,
    /// Continue where a page ended: its `next_cursor`.
    #[arg(long, value_name = "C")]
    pub cursor: Option<String>,
}

pub use crate::page::DEFAULT_PAGE;

#[derive(Args, Debug)]
pub struct PruneArgs {
    /// Keep the newest N automatic checkpoints.
    #[arg(long, value_name = "N")]
    keep_last: Option<usize>,
    /// Keep automatic checkpoints younger than D days.
    #[arg(long, value_name = "D")]
    keep_days: Option<u64>,
    /// Show what would be deleted; delete nothing.
    #[arg(long)]
    dry_run: bool,
}

#[derive(Args, Debug)]
pub struct RetentionArgs {
    /// After each exec, keep only the newest N automatic checkpoints of its workspace.
    #[arg(long, value_name = "N")]
    keep_last: Option<usize>,
    /// Keep every checkpoint again (no automatic pruning).
    #[arg(long, conflicts_with = "keep_last")]
    off: bool,
}

pub fn status(ctx: &Ctx) -> Result<i32> {
    let st = crate::history::status::status(&ctx.lib())?;
    ctx.out.emit(&st, || {
        let fork = st
            .parent
            .as_deref()
            .map(|p| format!(" (fork of {p})"))
            .unwrap_or_default();
        println!("vault {} ({})", st.vault, st.vault_path.display());
        println!(
            "workspace {}{fork}, seen by runs at {}",
            st.workspace,
            st.workspace_path.display()
        );
        match &st.head {
            Some(h) => println!(
                "head checkpoint {} ({}, {}){}",
                h.name,
                &h.created_at[..19],
                h.origin,
                h.message
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            ),
            None => println!("no checkpoint yet"),
        }
        println!(
            "{} checkpoints, {} of them automatic{}",
            st.checkpoints,
            st.automatic_checkpoints,
            st.auto_prune_keep_last
                .map(|n| format!(" (the newest {n} kept after each exec)"))
                .unwrap_or_default()
        );
        println!();
        if st.clean {
            println!("nothing changed since the head checkpoint");
        } else {
            let s = &st.summary;
            let parts: Vec<String> = [
                (s.added, "added"),
                (s.modified, "modified"),
                (s.deleted, "deleted"),
                (s.renamed, "renamed"),
                (s.type_changed, "type changed"),
                (s.mode_changed, "mode changed"),
                (s.meta_changed, "metadata changed"),
            ]
            .iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, what)| format!("{n} {what}"))
            .collect();
            println!("unsaved changes: {}", parts.join(", "));
            for c in &st.changes {
                match &c.from {
                    Some(f) => println!("  {} {f} -> {}", c.kind_sigil(), c.path),
                    None => println!("  {} {}", c.kind_sigil(), c.path),
                }
            }
            if st.changes_truncated {
                println!("  ... (avfs diff --name-only lists them all)");
            }
        }
        for m in &st.mounts {
            println!(
                "mounted at {} (workspace {}, pid {}){}",
                m.mountpoint.display(),
                m.workspace,
                m.pid,
                if m.readonly { ", read-only" } else { "" }
            );
        }
        for r in &st.runs {
            println!(
                "running in {}: {} (pid {}, {})",
                r.workspace,
                r.command.as_deref().unwrap_or("?"),
                r.pid.map(|p| p.to_string()).unwrap_or_else(|| "?".into()),
                r.exec.as_deref().unwrap_or("?")
            );
        }
        for k in &st.kept_overlays {
            println!(
                "kept overlay of {}: {}, upper {} files ({} bytes){}",
                k.workspace,
                match k.keeper_pid {
                    Some(p) => format!("keeper pid {p}"),
                    None => "keeper ended (the next run mounts it again)".into(),
                },
                k.upper_files,
                k.upper_bytes,
                k.last_used_at
                    .as_deref()
                    .map(|t| format!(", last used {}", &t[..19]))
                    .unwrap_or_default()
            );
        }
        if let Some(i) = st.ignored.as_ref().filter(|i| i.files > 0) {
            println!(
                "ignored (not versioned, outside the vault file): {} files ({} bytes) in {}",
                i.files,
                i.bytes,
                i.path.display()
            );
        }
        for a in &st.pending_approvals {
            println!("waiting for approval: {} {}", a.id, a.command);
        }
        if !st.next.is_empty() {
            println!();
            for n in &st.next {
                println!("  {n}");
            }
        }
    });
    Ok(0)
}

impl crate::history::status::ChangedPath {
    fn kind_sigil(&self) -> &'static str {
        self.kind.sigil()
    }
}

pub fn graph(ctx: &Ctx) -> Result<i32> {
    let (g, head) = ctx.view(|ws| {
        Ok((
            crate::history::graph::graph(ws.db)?,
            ws.head()?.map(|h| h.name),
        ))
    })?;
    ctx.out.emit(
        &json!({"graph": {"nodes": g.nodes, "lines": g.lines}, "head": head}),
        || {
            for l in &g.lines {
                println!("{l}");
            }
        },
    );
    Ok(0)
}

pub fn prune(ctx: &Ctx, a: PruneArgs) -> Result<i32> {
    let r = Retention {
        keep_last: a.keep_last,
        keep_days: a.keep_days,
    };
    if r.keep_last.is_none() && r.keep_days.is_none() {
        return Err(Error::InvalidArgument(
            "checkpoint prune".into(),
            "say what to keep: --keep-last N and/or --keep-days D (add --dry-run to see what would go)"
                .into(),
        ));
    }
    let report = if a.dry_run {
        ctx.view(|ws| prune::prune(ws, r, true, None))?
    } else {
        let (_, v) = ctx.target()?;
        ctx.mutate_in(&v, "checkpoint.prune", |ws| {
            let rep = prune::prune(ws, r, false, None)?;
            let detail = json!({"retention": r, "pruned": rep.pruned});
            Ok((rep, detail))
        })?
    };
    ctx.out.emit(&report, || {
        let verb = if report.dry_run {
            "would delete"
        } else {
            "deleted"
        };
        for n in &report.pruned {
            println!("{verb} {n}");
        }
        println!(
            "{verb} {} automatic checkpoints; kept {} automatic and {} others",
            report.pruned.len(),
            report.kept_automatic,
            report.kept_other
        );
        if !report.dry_run && !report.pruned.is_empty() {
            println!("run `avfs gc` to give their space back");
        }
    });
    Ok(0)
}

pub fn retention(ctx: &Ctx, a: RetentionArgs) -> Result<i32> {
    let keep = if a.off || a.keep_last.is_some() {
        let (_, v) = ctx.target()?;
        let keep = a.keep_last;
        ctx.mutate_in(&v, "checkpoint.retention", |ws| {
            prune::set_auto_keep(ws.db, keep)?;
            Ok((keep, json!({"keep_last": keep})))
        })?
    } else {
        ctx.view(|ws| prune::auto_keep(ws.db))?
    };
    ctx.out.emit(&json!({"keep_last": keep}), || match keep {
        Some(n) => println!(
            "after each exec, the newest {n} automatic checkpoints of its workspace are kept (named ones always)"
        ),
        None => println!(
            "automatic checkpoints are all kept (set: avfs checkpoint retention --keep-last N)"
        ),
    });
    Ok(0)
}

/// `diff --stat`, as git prints it.
pub fn print_stat(files: &[FileStat], totals: &StatTotals) {
    let names: Vec<String> = files
        .iter()
        .map(|f| match &f.from {
            Some(old) => format!("{old} => {}", f.path),
            None => f.path.clone(),
        })
        .collect();
    let width = names.iter().map(|n| n.chars().count()).max().unwrap_or(0);
    let most = files
        .iter()
        .map(|f| f.insertions.unwrap_or(0) + f.deletions.unwrap_or(0))
        .max()
        .unwrap_or(0)
        .max(1);
    for (f, name) in files.iter().zip(&names) {
        let what = if f.binary {
            "Bin".to_string()
        } else {
            match (f.insertions, f.deletions) {
                (Some(i), Some(d)) => {
                    // Bars scaled to at most 40 characters.
                    let scale = |n: u64| (n * 40).div_ceil(most.max(40)) as usize;
                    format!(
                        "{:>5} {}{}",
                        i + d,
                        "+".repeat(scale(i)),
                        "-".repeat(scale(d))
                    )
                }
                _ => format!("{:?}", f.kind).to_lowercase(),
            }
        };
        println!(" {name:<width$} | {what}");
    }
    println!(
        " {} files changed, {} insertions(+), {} deletions(-)",
        totals.files, totals.insertions, totals.deletions
    );
}
