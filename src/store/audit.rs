//! The append-only audit log. Each row carries `hash = BLAKE3(prev_hash || row)`, and the
//! id of the newest row is kept in `meta`, so an edited, inserted or removed row is detected.

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use super::{meta_get, meta_set, now_ns};
use crate::error::Result;

#[derive(Debug, Clone, Serialize)]
pub struct AuditRow {
    pub id: i64,
    pub ts_ns: i64,
    pub workspace: Option<String>,
    pub actor: String,
    pub action: String,
    pub detail: serde_json::Value,
    pub hash: String,
}

fn row_hash(
    prev: &[u8],
    id: i64,
    ts_ns: i64,
    ws: Option<&str>,
    actor: &str,
    action: &str,
    detail: &str,
) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(b"avfs-audit-v1\0");
    h.update(prev);
    h.update(&id.to_le_bytes());
    h.update(&ts_ns.to_le_bytes());
    for s in [ws.unwrap_or("\u{0}none"), actor, action, detail] {
        h.update(&(s.len() as u64).to_le_bytes());
        h.update(s.as_bytes());
    }
    *h.finalize().as_bytes()
}

/// The environment variable that names who made a change in audit records and
/// checkpoints (`cli` when unset); the MCP server sets it for the commands it runs.
pub const ORIGIN_ENV: &str = "AVFS_ORIGIN";

/// Who a command-line process acts for, as audit records and checkpoints name it: `cli`,
/// or what `AVFS_ORIGIN` says when it is a short lowercase word (the MCP server sets `mcp`
/// for the commands it runs).
pub fn cli_actor() -> &'static str {
    static ACTOR: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
    ACTOR.get_or_init(|| match std::env::var(ORIGIN_ENV) {
        Ok(v)
            if (1..=16).contains(&v.len())
                && v.bytes().all(|b| b.is_ascii_lowercase() || b == b'-') =>
        {
            Box::leak(v.into_boxed_str())
        }
        _ => "cli",
    })
}

/// Appends one row; call inside the transaction that makes the change it records.
pub fn append(
    db: &Connection,
    workspace: Option<&str>,
    actor: &str,
    action: &str,
    detail: &serde_json::Value,
) -> Result<i64> {
    let (last_id, prev): (i64, Vec<u8>) = db
        .prepare_cached("SELECT id, hash FROM audit ORDER BY id DESC LIMIT 1")?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?
        .unwrap_or((0, vec![0; 32]));
    let id = last_id + 1;
    let ts = now_ns();
    let detail = detail.to_string();
    let hash = row_hash(&prev, id, ts, workspace, actor, action, &detail);
    db.prepare_cached(
        "INSERT INTO audit (id, ts_ns, workspace, actor, action, detail, prev_hash, hash) VALUES (?1,?2,?3,?4,?5,?6,?7,?8)",
    )?
    .execute(params![id, ts, workspace, actor, action, detail, prev, &hash[..]])?;
    meta_set(db, "audit_head", id)?;
    Ok(id)
}

pub fn list(db: &Connection, limit: Option<usize>, since_ns: Option<i64>) -> Result<Vec<AuditRow>> {
    let mut stmt = db.prepare(
        "SELECT id, ts_ns, workspace, actor, action, detail, hash FROM audit WHERE ts_ns >= ?1 ORDER BY id DESC LIMIT ?2",
    )?;
    let rows = stmt.query_map(
        params![
            since_ns.unwrap_or(i64::MIN),
            limit.map(|l| l as i64).unwrap_or(-1)
        ],
        |r| {
            let detail: String = r.get(5)?;
            let hash: Vec<u8> = r.get(6)?;
            Ok(AuditRow {
                id: r.get(0)?,
                ts_ns: r.get(1)?,
                workspace: r.get(2)?,
                actor: r.get(3)?,
                action: r.get(4)?,
                detail: serde_json::from_str(&detail).unwrap_or(serde_json::Value::String(detail)),
                hash: hash.iter().map(|b| format!("{b:02x}")).collect(),
            })
        },
    )?;
    let mut out: Vec<AuditRow> = rows.collect::<rusqlite::Result<_>>()?;
    out.reverse();
    Ok(out)
}

#[derive(Debug, Clone, Serialize)]
pub struct AuditProblem {
    pub id: i64,
    pub problem: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct AuditReport {
    pub rows: i64,
    pub ok: bool,
    pub problems: Vec<AuditProblem>,
}

pub fn verify(db: &Connection) -> Result<AuditReport> {
    let mut stmt = db.prepare("SELECT id, ts_ns, workspace, actor, action, detail, prev_hash, hash FROM audit ORDER BY id")?;
    let mut rows = stmt.query([])?;
    let mut problems = Vec::new();
    let mut prev = vec![0u8; 32];
    let mut expect_id = 1;
    let mut count = 0;
    while let Some(r) = rows.next()? {
        count += 1;
        let id: i64 = r.get(0)?;
        let ws: Option<String> = r.get(2)?;
        let actor: String = r.get(3)?;
        let action: String = r.get(4)?;
        let detail: String = r.get(5)?;
        let stored_prev: Vec<u8> = r.get(6)?;
        let stored: Vec<u8> = r.get(7)?;
        if id != expect_id {
            problems.push(AuditProblem {
                id,
                problem: format!("rows {expect_id}..{} are missing", id - 1),
            });
        }
        if stored_prev != prev {
            problems.push(AuditProblem {
                id,
                problem: "previous-hash link is broken (a row before it was changed or removed)"
                    .into(),
            });
        }
        let h = row_hash(
            &stored_prev,
            id,
            r.get(1)?,
            ws.as_deref(),
            &actor,
            &action,
            &detail,
        );
        if h[..] != stored[..] {
            problems.push(AuditProblem {
                id,
                problem: "row content does not match its hash (edited)".into(),
            });
        }
        prev = stored;
        expect_id = id + 1;
    }
    let head = meta_get(db, "audit_head")?.unwrap_or(0);
    if head != expect_id - 1 {
        problems.push(AuditProblem {
            id: head,
            problem: format!(
                "log ends at row {} but row {head} was written (rows removed from the end)",
                expect_id - 1
            ),
        });
    }
    Ok(AuditReport {
        rows: count,
        ok: problems.is_empty(),
        problems,
    })
}
