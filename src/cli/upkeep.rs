//! audit, gc, stats.

use clap::{Args, Subcommand};
use serde_json::json;

use super::Ctx;
use super::output::human_size;
use crate::documents::history::{AuditEntry, AuditLog};
use crate::error::{Error, Result};
use crate::maintenance::audit;
use crate::util::rfc3339;
use crate::workspace::{Store, cli_actor, now_ns};

#[derive(Args, Debug)]
pub struct AuditArgs {
    #[command(subcommand)]
    cmd: Option<AuditCmd>,
    /// Show the newest N rows (before `--cursor`; default: 100 with --json, all
    /// otherwise); `total` and `next_cursor` say what is left.
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// Continue where a page ended: its `next_cursor`.
    #[arg(long, value_name = "C")]
    cursor: Option<String>,
    /// Only rows at or after T: RFC 3339 (2026-12-02T10:00:00Z) or an age like 10m, 2h, 3d.
    #[arg(long, value_name = "T")]
    since: Option<String>,
}

#[derive(Subcommand, Debug)]
enum AuditCmd {
    /// Check the hash chain: detects edited, inserted or removed rows, and rows cut off
    /// the end (workspaces and checkpoints record the row they were written after).
    Verify {
        /// Also check an anchor line printed earlier by `avfs audit anchor` (and kept
        /// outside the vault): its row must still be there with the same hash.
        #[arg(long, value_name = "LINE")]
        anchor: Option<String>,
    },
    /// Print a line naming the newest audit row and its hash. Keep it outside the vault
    /// (a ticket, a commit message, another machine); `audit verify --anchor LINE` then
    /// proves the log up to that row was neither cut nor rewritten.
    Anchor,
}

pub fn parse_since(s: &str) -> Result<i64> {
    if let Ok(t) = humantime::parse_rfc3339_weak(s) {
        return Ok(t
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
            .unwrap_or(0));
    }
    if let Ok(d) = humantime::parse_duration(s) {
        return Ok(now_ns() - d.as_nanos() as i64);
    }
    Err(Error::InvalidArgument(
        s.into(),
        "expected RFC 3339 time (2026-12-02T10:00:00Z) or an age (10m, 2h, 3d)".into(),
    ))
}

pub fn audit(ctx: &Ctx, a: AuditArgs) -> Result<i32> {
    let (_, mut store) = ctx.open_read()?;
    if let Some(AuditCmd::Anchor) = a.cmd {
        let (row, hash) = store
            .read(audit::head)?
            .ok_or_else(|| Error::NotFound("the audit log is empty: nothing to anchor".into()))?;
        let line = audit::anchor_line(row, &hash);
        ctx.out
            .emit(&json!({"anchor": line, "row": row, "hash": hash}), || {
                println!("{line}")
            });
        return Ok(0);
    }
    if let Some(AuditCmd::Verify { anchor }) = a.cmd {
        let anchor = anchor
            .map(|l| {
                audit::parse_anchor(&l).ok_or_else(|| {
                    Error::InvalidArgument(
                        l.clone(),
                        "not an anchor line (expected what `avfs audit anchor` prints)".into(),
                    )
                })
            })
            .transpose()?;
        let report = store.read(|db| audit::verify_anchored(db, anchor))?;
        ctx.out.emit(&report, || {
            if report.ok {
                println!("audit log ok: {} rows, hash chain intact", report.rows);
            } else {
                for p in &report.problems {
                    println!("row {}: {}", p.id, p.problem);
                }
            }
        });
        return Ok(if report.ok { 0 } else { 1 });
    }
    let since = a.since.as_deref().map(parse_since).transpose()?;
    // The cursor is the id of the oldest row listed: rows appended meanwhile (every
    // mutation appends one) do not shift the pages.
    let before = a
        .cursor
        .as_deref()
        .map(crate::page::parse_cursor)
        .transpose()?;
    let limit = crate::page::limit_for(a.limit, ctx.out.json);
    let (rows, total) = store.read(|db| audit::list(db, limit, since, before.map(|b| b as i64)))?;
    let older = match rows.first() {
        Some(r) if limit.is_some_and(|l| rows.len() >= l) => store.read(|db| {
            Ok(audit::list(db, Some(1), since, Some(r.id))?
                .0
                .first()
                .map(|_| r.id))
        })?,
        _ => None,
    };
    let doc = AuditLog {
        entries: rows.iter().map(AuditEntry::of).collect(),
        next_cursor: older.map(|id| id.to_string()),
        total,
    };
    ctx.out.emit(&doc, || {
        if let Some(n) = &doc.next_cursor {
            println!("... older rows: avfs audit --cursor {n}");
        }
        for r in &rows {
            println!(
                "{:>6} {} {:<10} {:<5} {:<20} {}",
                r.id,
                &rfc3339(r.ts_ns)[..23],
                r.workspace.as_deref().unwrap_or("-"),
                r.actor,
                r.action,
                r.detail
            );
        }
    });
    Ok(0)
}

pub fn gc(ctx: &Ctx) -> Result<i32> {
    let (v, mut store) = ctx.open()?;
    let (report, converted) = crate::reclaim::gc(&mut store, &v.workspace, cli_actor())?;
    if let Some(e) = converted {
        eprintln!("avfs: could not convert the vault to incremental vacuum: {e}");
    }
    // The exec engine's layer cache: only a cache, rebuilt from vaults on demand.
    let layers = crate::engine::layers::trim_cache(&ctx.home)?;
    let mut doc = serde_json::to_value(&report).unwrap_or_default();
    doc["layers"] = serde_json::to_value(&layers).unwrap_or_default();
    ctx.out.emit(&doc, || {
        println!(
            "removed {} chunks, {} contents, {} trees ({} freed)",
            report.chunks_removed,
            report.contents_removed,
            report.trees_removed,
            human_size(report.bytes_freed)
        );
        println!(
            "layer cache: removed {} layers ({} freed), {} now",
            layers.removed_layers,
            human_size(layers.freed_bytes),
            human_size(layers.bytes)
        );
    });
    Ok(0)
}

pub fn stats(ctx: &Ctx) -> Result<i32> {
    let (_, v) = ctx.existing()?;
    ctx.sync_mount(&v)?;
    let mut store = Store::open(&v.path)?;
    let s = store.write(|db| crate::maintenance::stats(db, Some(&v.workspace)))?;
    let file_bytes = std::fs::metadata(&v.path).map(|m| m.len()).unwrap_or(0);
    let value = json!({"vault": v.name, "path": v.path, "workspace": v.workspace, "file_bytes": file_bytes, "stats": s});
    ctx.out.emit(&value, || {
        println!(
            "vault {} ({}), workspace {}",
            v.name,
            v.path.display(),
            v.workspace
        );
        if let Some(w) = &s.workspace {
            println!(
                "  files {}, dirs {}, symlinks {}, other {}, extra hard links {}: {}",
                w.files,
                w.dirs,
                w.symlinks,
                w.other,
                w.hard_links,
                human_size(w.logical_bytes)
            );
            println!(
                "  head {}, {} checkpoint{}{}",
                w.head.as_deref().unwrap_or("-"),
                w.checkpoints,
                if w.checkpoints == 1 { "" } else { "s" },
                w.parent
                    .as_deref()
                    .map(|p| format!(", forked from {p}"))
                    .unwrap_or_default()
            );
        }
        let t = &s.vault;
        println!(
            "vault file: {} on disk, {} of file contents stored once ({} chunks, {} contents)",
            human_size(file_bytes),
            human_size(t.stored_bytes),
            t.chunks,
            t.contents
        );
        println!(
            "  {} trees ({} with chunk lists), {} checkpoints, {} workspaces ({} forks), {} live inodes",
            t.trees,
            human_size(t.tree_bytes + t.chunk_list_bytes),
            t.checkpoints,
            t.workspaces,
            t.forks,
            t.live_inodes
        );
    });
    Ok(0)
}
