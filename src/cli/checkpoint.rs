//! checkpoint save/list/restore/delete/diff, diff, log and per-path restore.

use std::ffi::OsString;

use clap::{Args, Subcommand};
use serde_json::json;

use super::Ctx;
use super::output::human_size;
use crate::diff::{
    Change, ChangeSummary, WHOLE_PATCH_LIMIT, add_patches, diff_roots, filter, renames,
};
use crate::documents::CheckpointDoc;
use crate::documents::files::{FileLog, Version};
use crate::documents::history::{
    CheckpointList, CheckpointRestored, CheckpointSaved, DiffReport, DiffStat,
};
use crate::error::{Error, Result};
use crate::util::rfc3339;
use crate::workspace::flush::entry_at;
use crate::workspace::path::{display, parse};
use crate::workspace::{Hash, Workspace};

#[derive(Subcommand, Debug)]
pub enum CheckpointCmd {
    /// Save the live state (a name is generated when none is given).
    Save {
        name: Option<String>,
        #[arg(short = 'm', long)]
        message: Option<String>,
    },
    /// List this workspace's checkpoints, oldest first (`--graph`: every workspace's,
    /// newest first, with forks and merges drawn).
    #[command(visible_alias = "ls")]
    List(super::history::ListArgs),
    /// Make a checkpoint the live state. Unsaved changes are kept in an automatic checkpoint first.
    Restore { name: String },
    /// Delete a checkpoint (its content goes at the next `avfs gc` unless still referenced).
    #[command(visible_alias = "rm")]
    Delete { name: String },
    /// Compare two checkpoints (default: the last checkpoint and the live state).
    Diff(DiffArgs),
    /// Delete automatic checkpoints (exec's and shell's) beyond a retention; named ones stay.
    Prune(super::history::PruneArgs),
    /// Show or set the vault's automatic retention of exec checkpoints (applied after each exec).
    Retention(super::history::RetentionArgs),
}

#[derive(Args, Debug)]
pub struct DiffArgs {
    /// From this checkpoint (default: the last one saved by a person or an agent, with
    /// `checkpoint save`, a merge or a fork; not the automatic ones exec takes).
    a: Option<String>,
    /// To this checkpoint (default: the live state).
    b: Option<String>,
    /// From the head checkpoint instead: the newest one, after an exec the one taken
    /// before it, so this shows what the last exec (and anything since) changed.
    #[arg(long, conflicts_with = "a")]
    head: bool,
    /// Add unified diffs of text files.
    #[arg(long, short = 'p')]
    patch: bool,
    /// Lines inserted and deleted per file, with totals.
    #[arg(long)]
    stat: bool,
    /// Only the changed paths, one a line.
    #[arg(long, conflicts_with_all = ["patch", "stat"])]
    name_only: bool,
    /// Only changes at or below this path (repeatable; or list paths after `--`).
    #[arg(long = "path", value_name = "PATH")]
    path: Vec<OsString>,
    /// Paths to limit the diff to, after `--`: `avfs diff A B -- /src`.
    #[arg(last = true, value_name = "PATH")]
    paths: Vec<OsString>,
    /// Least similarity, in percent, for a deleted and an added file to count as one
    /// renamed file (100: identical content only).
    #[arg(long, value_name = "PERCENT", default_value_t = crate::diff::renames::DEFAULT_THRESHOLD,
          value_parser = clap::value_parser!(u8).range(1..=100))]
    find_renames: u8,
    /// Show renames as a deletion and an addition.
    #[arg(long)]
    no_renames: bool,
    /// Skip the first N changes (paging; the summary still counts all).
    #[arg(long, value_name = "N", default_value_t = 0)]
    offset: usize,
    /// List at most N changes (paging; `next_offset` says where the next page starts).
    #[arg(long, value_name = "N", default_value_t = super::history::DEFAULT_PAGE)]
    limit: usize,
}

#[derive(Args, Debug)]
pub struct LogArgs {
    path: OsString,
    /// List every checkpoint, also those where the path did not change.
    #[arg(long)]
    all: bool,
    /// List the newest N versions (before `--cursor`; default: 100 with --json, all
    /// otherwise); `total` and `next_cursor` say what is left.
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// Continue where a page ended: its `next_cursor`.
    #[arg(long, value_name = "C")]
    cursor: Option<String>,
}

#[derive(Args, Debug)]
pub struct RestoreArgs {
    path: OsString,
    /// The checkpoint to take the path from.
    #[arg(long, value_name = "CHECKPOINT")]
    from: String,
}

pub fn run(ctx: &Ctx, cmd: CheckpointCmd) -> Result<i32> {
    match cmd {
        CheckpointCmd::Save { name, message } => {
            let detail = json!({"name": name, "message": message});
            let s = ctx.mutate("checkpoint.save", detail, |ws| {
                ws.checkpoint(
                    name.as_deref(),
                    message.as_deref(),
                    crate::workspace::cli_actor(),
                )
            })?;
            ctx.out.emit(
                &CheckpointSaved {
                    changed: s.changed,
                    checkpoint: CheckpointDoc::of(&s.checkpoint),
                },
                || {
                    println!(
                        "saved checkpoint {}{}",
                        s.checkpoint.name,
                        if s.changed {
                            ""
                        } else {
                            " (no changes since the last one)"
                        }
                    );
                },
            );
        }
        CheckpointCmd::List(a) if a.graph => return super::history::graph(ctx),
        CheckpointCmd::List(a) => {
            let (all, head) = ctx.view(|ws| Ok((ws.checkpoints()?, ws.head()?.map(|h| h.name))))?;
            // Pages go back in time from the newest: the cursor is how many newer ones
            // were listed already.
            let skip = match &a.cursor {
                None => 0,
                Some(c) => c.parse::<usize>().map_err(|_| {
                    Error::InvalidArgument(
                        c.clone(),
                        "not a cursor: pass the `next_cursor` of the previous page".into(),
                    )
                })?,
            };
            let total = all.len();
            let end = total.saturating_sub(skip);
            let start = end.saturating_sub(a.limit);
            let cps = &all[start..end];
            let doc = CheckpointList {
                checkpoints: cps.iter().map(CheckpointDoc::of).collect(),
                head: head.clone(),
                total,
                next_cursor: (start > 0).then(|| (total - start).to_string()),
            };
            ctx.out.emit(&doc, || {
                if let Some(n) = &doc.next_cursor {
                    println!("... {start} older: avfs checkpoint list --cursor {n}");
                }
                for c in cps {
                    let mark = if head.as_deref() == Some(&c.name) {
                        "*"
                    } else {
                        " "
                    };
                    println!(
                        "{mark} {:<32} {}  {:<8} {}",
                        c.name,
                        &rfc3339(c.created_at_ns)[..19],
                        c.origin,
                        c.message.as_deref().unwrap_or("")
                    );
                }
            });
        }
        CheckpointCmd::Restore { name } => {
            let (cp, saved) = ctx.mutate("checkpoint.restore", json!({"name": name}), |ws| {
                let cp = ws.find_checkpoint(&name)?;
                let mut saved = None;
                if ws.is_modified()? {
                    let auto = format!(
                        "auto-before-restore-{}",
                        crate::workspace::now_ns() / 1_000_000
                    );
                    saved = Some(
                        ws.checkpoint(
                            Some(&auto),
                            Some(&format!("unsaved changes before restoring {name}")),
                            "auto",
                        )?
                        .checkpoint
                        .name,
                    );
                }
                ws.restore(&cp)?;
                Ok((cp, saved))
            })?;
            ctx.out.emit(
                &CheckpointRestored {
                    restored: CheckpointDoc::of(&cp),
                    saved_unsaved_changes_as: saved.clone(),
                },
                || {
                    if let Some(s) = &saved {
                        println!("unsaved changes kept in checkpoint {s}");
                    }
                    println!("restored checkpoint {}", cp.name);
                },
            );
        }
        CheckpointCmd::Delete { name } => {
            let cp = ctx.mutate("checkpoint.delete", json!({"name": name}), |ws| {
                ws.delete_checkpoint(&name)
            })?;
            // What only that checkpoint held goes now, and the file shrinks.
            ctx.reclaim_all()?;
            ctx.out
                .emit(&json!({"deleted": CheckpointDoc::of(&cp)}), || {
                    println!("deleted checkpoint {}", cp.name)
                });
        }
        CheckpointCmd::Diff(a) => return diff(ctx, a),
        CheckpointCmd::Prune(a) => return super::history::prune(ctx, a),
        CheckpointCmd::Retention(a) => return super::history::retention(ctx, a),
    }
    Ok(0)
}

/// The root a diff side names: a checkpoint, or the live state when `None`.
fn side(ws: &mut Workspace, name: Option<&str>) -> Result<(String, Hash)> {
    match name {
        Some("live") | None => Ok(("live".into(), ws.live_root()?)),
        Some(n) => {
            let cp = ws.find_checkpoint(n)?;
            Ok((cp.name, cp.root))
        }
    }
}

/// The default "from" side: the head checkpoint, or an empty tree when there is none.
/// The `from` side of `diff`: the named checkpoint, else the head (`--head`), else the
/// last checkpoint a person or an agent saved; the empty tree when there is none.
fn base_side(ws: &mut Workspace, name: Option<&str>, head: bool) -> Result<(String, Hash)> {
    if name.is_some() {
        return side(ws, name);
    }
    let from = if head { ws.head()? } else { ws.last_saved()? };
    match from {
        Some(h) => Ok((h.name, h.root)),
        None => Ok(("(empty)".into(), ws.empty_tree()?)),
    }
}

pub fn print_changes(changes: &[Change], paint: super::output::Paint) {
    for c in changes {
        let sizes = match (c.size_before, c.size_after) {
            (Some(a), Some(b)) if a != b => format!("  {} -> {}", human_size(a), human_size(b)),
            (Some(a), None) => format!("  {}", human_size(a)),
            (None, Some(b)) => format!("  {}", human_size(b)),
            _ => String::new(),
        };
        let extra = match c.kind {
            crate::diff::ChangeKind::ModeChanged => format!(
                "  {} -> {}",
                c.mode_before.as_deref().unwrap_or("?"),
                c.mode_after.as_deref().unwrap_or("?")
            ),
            crate::diff::ChangeKind::TypeChanged => format!(
                "  {} -> {}",
                c.type_before.unwrap_or("?"),
                c.type_after.unwrap_or("?")
            ),
            _ => String::new(),
        };
        let shown = match &c.from {
            Some(old) => format!(
                "{old} -> {}  ({}% similar)",
                c.path,
                c.similarity.unwrap_or(100)
            ),
            None => c.path.clone(),
        };
        println!(
            "{} {}{}{}",
            paint.sigil(c.kind.sigil()),
            shown,
            sizes,
            extra
        );
        if let Some(p) = &c.patch {
            print!("{p}");
        }
    }
}

pub fn diff(ctx: &Ctx, a: DiffArgs) -> Result<i32> {
    let prefixes = a
        .path
        .iter()
        .chain(&a.paths)
        .map(|p| parse(p).map(|c| display(&c)))
        .collect::<Result<Vec<_>>>()?;
    let (from, to, changes, stat) = ctx.view(|ws| {
        let (from, ra) = base_side(ws, a.a.as_deref(), a.head)?;
        let (to, rb) = side(ws, a.b.as_deref())?;
        let mut all = diff_roots(ws.db, &ra, &rb)?;
        if !a.no_renames {
            all = renames::detect(ws.db, all, a.find_renames)?;
        }
        let all = filter::keep_under(all, &prefixes);
        let summary = ChangeSummary::of(&all);
        let total = all.len();
        // Patches and stats are made for the page only: paging a long list stays cheap.
        let mut changes: Vec<Change> = all.into_iter().skip(a.offset).take(a.limit).collect();
        if a.patch {
            add_patches(ws.db, &mut changes, WHOLE_PATCH_LIMIT)?;
        }
        let stat = if a.stat {
            Some(crate::diff::stat::stats(ws.db, &changes)?)
        } else {
            None
        };
        Ok((from, to, (changes, summary, total), stat))
    })?;
    let (changes, summary, total) = changes;
    let end = a.offset.saturating_add(changes.len());
    let next_offset = (end < total).then_some(end);
    let doc = DiffReport {
        names: a
            .name_only
            .then(|| changes.iter().map(|c| c.path.clone()).collect()),
        changes,
        from,
        next_offset,
        offset: a.offset,
        paths: (!prefixes.is_empty()).then_some(prefixes),
        stat: stat.map(|(files, totals)| DiffStat { files, totals }),
        summary,
        to,
        total,
    };
    let (from, to) = (&doc.from, &doc.to);
    ctx.out.emit(&doc, || {
        if a.name_only {
            for c in &doc.changes {
                println!("{}", c.path);
            }
        } else if let Some(stat) = &doc.stat {
            super::history::print_stat(&stat.files, &stat.totals);
        } else if total == 0 {
            println!("no changes between {from} and {to}");
        } else {
            print_changes(&doc.changes, ctx.out.paint());
        }
        if let Some(n) = next_offset {
            println!("... {} more: avfs diff {from} {to} --offset {n}", total - n);
        }
    });
    Ok(0)
}

/// What makes two versions of a path equal: content, link target, mode, existence.
type VersionKey = (Option<Hash>, Option<Vec<u8>>, u32, bool);

pub fn log(ctx: &Ctx, a: LogArgs) -> Result<i32> {
    let comps = parse(&a.path)?;
    let versions = ctx.view(|ws| {
        let mut roots: Vec<(String, Option<i64>, Hash)> = ws
            .checkpoints()?
            .into_iter()
            .map(|c| (c.name, Some(c.created_at_ns), c.root))
            .collect();
        roots.push(("live".into(), None, ws.live_root()?));
        let mut out: Vec<Version> = Vec::new();
        let mut prev: Option<VersionKey> = None;
        for (name, at, root) in roots {
            let e = entry_at(ws.db, &root, &comps)?;
            let key = (
                e.as_ref().and_then(|e| e.hash),
                e.as_ref().and_then(|e| e.target.clone()),
                e.as_ref().map_or(0, |e| e.mode),
                e.is_some(),
            );
            let changed = prev.as_ref() != Some(&key);
            prev = Some(key);
            // Only the versions where the path changed, unless asked for every one; the
            // live state is listed when it differs from the last checkpoint.
            if !changed && !a.all {
                continue;
            }
            out.push(Version {
                at: name,
                created_at: at.map(rfc3339),
                exists: e.is_some(),
                kind: e.as_ref().map(|e| e.kind.name()),
                size: e.as_ref().map(|e| e.size),
                mode: e.as_ref().map(|e| format!("{:04o}", e.mode)),
                content_hash: e.as_ref().and_then(|e| e.hash).map(|h| h.to_hex()),
                changed,
            });
        }
        Ok(out)
    })?;
    if versions.iter().all(|v| !v.exists) {
        return Err(Error::NotFound(format!(
            "{} (in no checkpoint and not live)",
            display(&comps)
        )));
    }
    // Pages go back in time from the newest version, as `checkpoint list` does.
    let total = versions.len();
    let limit = crate::page::limit_for(a.limit, ctx.out.json);
    let (range, next_cursor) = crate::page::from_end(total, a.cursor.as_deref(), limit)?;
    let doc = FileLog {
        next_cursor,
        path: display(&comps),
        total,
        versions: versions
            .into_iter()
            .skip(range.start)
            .take(range.len())
            .collect(),
    };
    ctx.out.emit(&doc, || {
        if let Some(n) = &doc.next_cursor {
            println!(
                "... {} older: avfs log {} --cursor {n}",
                range.start, doc.path
            );
        }
        for v in &doc.versions {
            let what = if !v.exists {
                "(absent)".to_string()
            } else {
                format!(
                    "{} {} bytes {}",
                    v.kind.unwrap_or("?"),
                    v.size.unwrap_or(0),
                    v.content_hash.as_deref().map(|h| &h[..12]).unwrap_or("")
                )
            };
            println!(
                "{} {:<32} {:<20} {}",
                if v.changed { "*" } else { " " },
                v.at,
                v.created_at.as_deref().map(|t| &t[..19]).unwrap_or("now"),
                what
            );
        }
    });
    Ok(0)
}

pub fn restore_path(ctx: &Ctx, a: RestoreArgs) -> Result<i32> {
    let comps = parse(&a.path)?;
    let shown = display(&comps);
    let detail = json!({"path": shown, "from": a.from});
    let changed = ctx.mutate("restore", detail, |ws| {
        let cp = ws.find_checkpoint(&a.from)?;
        if comps.is_empty() && ws.is_modified()? {
            // Restoring "/" replaces everything: keep unsaved changes, as `checkpoint restore` does.
            let auto = format!(
                "auto-before-restore-{}",
                crate::workspace::now_ns() / 1_000_000
            );
            ws.checkpoint(
                Some(&auto),
                Some(&format!(
                    "unsaved changes before restoring / from {}",
                    a.from
                )),
                "auto",
            )?;
        }
        ws.restore_path(&comps, &cp)
    })?;
    ctx.out.emit(
        &json!({"path": shown, "from": a.from, "changed": changed}),
        || {
            println!("restored {shown} from {}", a.from);
        },
    );
    Ok(0)
}
