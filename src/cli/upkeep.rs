//! audit, gc, stats.

use clap::{Args, Subcommand};
use serde_json::json;

use super::Ctx;
use super::output::human_size;
use crate::error::{Error, Result};
use crate::store::audit;
use crate::util::rfc3339;

#[derive(Args, Debug)]
pub struct AuditArgs {
    #[command(subcommand)]
    cmd: Option<AuditCmd>,
    /// Show at most N of the newest rows.
    #[arg(long)]
    limit: Option<usize>,
    /// Only rows at or after T: RFC 3339 (2026-12-02T10:00:00Z) or an age like 10m, 2h, 3d.
    #[arg(long, value_name = "T")]
    since: Option<String>,
}

#[derive(Subcommand, Debug)]
enum AuditCmd {
    /// Check the hash chain: detects edited, inserted or removed rows.
    Verify,
}

pub fn parse_since(s: &str) -> Result<i64> {
    if let Ok(t) = humantime::parse_rfc3339_weak(s) {
        return Ok(t
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
            .unwrap_or(0));
    }
    if let Ok(d) = humantime::parse_duration(s) {
        return Ok(crate::store::now_ns() - d.as_nanos() as i64);
    }
    Err(Error::InvalidArgument(
        s.into(),
        "expected RFC 3339 time (2026-12-02T10:00:00Z) or an age (10m, 2h, 3d)".into(),
    ))
}

pub fn audit(ctx: &Ctx, a: AuditArgs) -> Result<i32> {
    let (_, mut store) = ctx.open()?;
    if let Some(AuditCmd::Verify) = a.cmd {
        let report = store.read(audit::verify)?;
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
    let rows = store.read(|db| audit::list(db, a.limit, since))?;
    let out: Vec<_> = rows
        .iter()
        .map(|r| {
            json!({"id": r.id, "time": rfc3339(r.ts_ns), "ts_ns": r.ts_ns, "workspace": r.workspace, "actor": r.actor,
                   "action": r.action, "detail": r.detail, "hash": r.hash})
        })
        .collect();
    ctx.out.emit(&json!({"entries": out}), || {
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
    let report = store.write(|db| {
        let r = crate::maintenance::gc(db)?;
        audit::append(
            db,
            Some(&v.workspace),
            crate::store::audit::cli_actor(),
            "gc",
            &serde_json::to_value(&r).unwrap_or_default(),
        )?;
        Ok(r)
    })?;
    // Shrink the file: return freed pages (incremental auto-vacuum) and empty the WAL.
    // Best effort: the sweep above is already committed.
    let _ = store
        .conn
        .execute_batch("PRAGMA incremental_vacuum; PRAGMA wal_checkpoint(TRUNCATE);");
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
    let (v, mut store) = ctx.open()?;
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
        println!("{}", serde_json::to_string_pretty(&s).unwrap_or_default());
        println!("file size: {}", human_size(file_bytes));
    });
    Ok(0)
}
