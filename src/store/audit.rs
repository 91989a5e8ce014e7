//! The append-only audit log. Each row carries `hash = BLAKE3(prev_hash || row)`, and the
//! id of the newest row is kept in `meta`, so an edited, inserted or removed row is detected.
//! Rows cut off the end with `meta` set to match are caught too: every workspace row
//! records the audit row written with its last change and every checkpoint the one before
//! it (`audit_head`, format 6), and none may point past the end of the log. Someone who
//! rewrites all of those as well is caught by an anchor kept outside the vault
//! (`avfs audit anchor`, checked by `audit verify --anchor`). Approvals are checked
//! against their rows too (`approvals::unattested`).

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use super::{meta_set, now_ns};
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
    if let Some(ws) = workspace {
        db.prepare_cached("UPDATE workspace SET audit_head = ?1 WHERE name = ?2")?
            .execute(params![id, ws])?;
    }
    Ok(id)
}

/// One audit row as stored, and whether it is intact: its hash re-derives from its
/// content and it links to the row before it.
#[derive(Debug, Clone)]
pub struct StoredRow {
    pub id: i64,
    pub ts_ns: i64,
    pub action: String,
    pub detail: serde_json::Value,
    pub intact: bool,
}

/// The rows whose action starts with `prefix`, oldest first, each checked on its own (its
/// hash and its link to the previous row; `verify` checks the whole chain).
pub fn rows_with_action_prefix(db: &Connection, prefix: &str) -> Result<Vec<StoredRow>> {
    let mut stmt = db.prepare_cached(
        "SELECT id, ts_ns, workspace, actor, action, detail, prev_hash, hash,
                (SELECT p.hash FROM audit p WHERE p.id = audit.id - 1)
         FROM audit WHERE substr(action, 1, length(?1)) = ?1 ORDER BY id",
    )?;
    let mut rows = stmt.query([prefix])?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        let id: i64 = r.get(0)?;
        let ts_ns: i64 = r.get(1)?;
        let ws: Option<String> = r.get(2)?;
        let actor: String = r.get(3)?;
        let action: String = r.get(4)?;
        let detail: String = r.get(5)?;
        let prev: Vec<u8> = r.get(6)?;
        let stored: Vec<u8> = r.get(7)?;
        let before: Option<Vec<u8>> = r.get(8)?;
        let linked = match before {
            Some(h) => h == prev,
            None => id == 1 && prev == [0u8; 32],
        };
        let h = row_hash(&prev, id, ts_ns, ws.as_deref(), &actor, &action, &detail);
        out.push(StoredRow {
            id,
            ts_ns,
            action,
            detail: serde_json::from_str(&detail).unwrap_or(serde_json::Value::String(detail)),
            intact: linked && h[..] == stored[..],
        });
    }
    Ok(out)
}

/// The rows of `workspace` with exactly `action` written at or after `since_ns`, oldest
/// first: (time, detail). The log's ids are dense and its times rise with them, so the
/// first row at or after `since_ns` is found by bisection and only the rows after it are
/// read (the table has no index but its id).
pub fn rows_since(
    db: &Connection,
    workspace: &str,
    action: &str,
    since_ns: i64,
) -> Result<Vec<(i64, serde_json::Value)>> {
    let Some((last, _)) = head(db)? else {
        return Ok(vec![]);
    };
    let mut ts_of = db.prepare_cached("SELECT ts_ns FROM audit WHERE id = ?1")?;
    let (mut lo, mut hi) = (1i64, last + 1);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let ts: Option<i64> = ts_of.query_row([mid], |r| r.get(0)).optional()?;
        // A missing row (never, in an intact log) is taken as early: read past it.
        if ts.is_some_and(|t| t >= since_ns) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    let mut stmt = db.prepare_cached(
        "SELECT ts_ns, detail FROM audit WHERE id >= ?1 AND action = ?2 AND workspace = ?3 \
         ORDER BY id",
    )?;
    let rows = stmt.query_map(params![lo, action, workspace], |r| {
        let detail: String = r.get(1)?;
        Ok((
            r.get::<_, i64>(0)?,
            serde_json::from_str(&detail).unwrap_or(serde_json::Value::String(detail)),
        ))
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// The newest audit row: its id and hash (`None` for an empty log).
pub fn head(db: &Connection) -> Result<Option<(i64, String)>> {
    Ok(db
        .prepare_cached("SELECT id, hash FROM audit ORDER BY id DESC LIMIT 1")?
        .query_row([], |r| {
            let h: Vec<u8> = r.get(1)?;
            Ok((r.get(0)?, hex(&h)))
        })
        .optional()?)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

/// The line `avfs audit anchor` prints for the newest row, to keep outside the vault.
pub fn anchor_line(id: i64, hash: &str) -> String {
    format!("avfs-audit-anchor v1 row={id} hash={hash}")
}

/// Reads an anchor line back: (row, hash).
pub fn parse_anchor(line: &str) -> Option<(i64, String)> {
    let mut row = None;
    let mut hash = None;
    let mut words = line.split_whitespace();
    if words.next()? != "avfs-audit-anchor" || words.next()? != "v1" {
        return None;
    }
    for w in words {
        if let Some(v) = w.strip_prefix("row=") {
            row = v.parse().ok();
        } else if let Some(v) = w.strip_prefix("hash=") {
            hash = Some(v.to_ascii_lowercase()).filter(|h| h.len() == 64);
        }
    }
    Some((row?, hash?))
}

/// The newest `limit` rows at or after `since_ns` with an id below `before_id`, oldest
/// first, and how many rows are at or after `since_ns` in all.
pub fn list(
    db: &Connection,
    limit: Option<usize>,
    since_ns: Option<i64>,
    before_id: Option<i64>,
) -> Result<(Vec<AuditRow>, usize)> {
    let since = since_ns.unwrap_or(i64::MIN);
    let total: i64 = db.query_row(
        "SELECT count(*) FROM audit WHERE ts_ns >= ?1",
        params![since],
        |r| r.get(0),
    )?;
    let mut stmt = db.prepare(
        "SELECT id, ts_ns, workspace, actor, action, detail, hash FROM audit WHERE ts_ns >= ?1 AND id < ?3 ORDER BY id DESC LIMIT ?2",
    )?;
    let rows = stmt.query_map(
        params![
            since,
            limit.map(|l| l as i64).unwrap_or(-1),
            before_id.unwrap_or(i64::MAX)
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
    Ok((out, total as usize))
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
    /// The anchor checked (`audit verify --anchor`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub anchor: Option<AnchorCheck>,
}

/// What an anchor check found.
#[derive(Debug, Clone, Serialize)]
pub struct AnchorCheck {
    pub row: i64,
    pub hash: String,
    pub ok: bool,
}

/// `verify`, and the anchor `(row, hash)` must name a row of the log with that hash.
pub fn verify_anchored(db: &Connection, anchor: Option<(i64, String)>) -> Result<AuditReport> {
    let mut report = verify(db)?;
    if let Some((row, hash)) = anchor {
        let stored: Option<Vec<u8>> = db
            .prepare_cached("SELECT hash FROM audit WHERE id = ?1")?
            .query_row([row], |r| r.get(0))
            .optional()?;
        let problem = match stored {
            None => Some(format!(
                "the anchored row {row} is missing: the log was cut short"
            )),
            Some(h) if hex(&h) != hash => Some(format!(
                "row {row} does not have the anchored hash: the log was rewritten"
            )),
            Some(_) => None,
        };
        report.anchor = Some(AnchorCheck {
            row,
            hash,
            ok: problem.is_none(),
        });
        if let Some(p) = problem {
            report.problems.push(AuditProblem {
                id: row,
                problem: p,
            });
            report.ok = false;
        }
    }
    Ok(report)
}

/// Rows that say the log reached further than it does: workspaces and checkpoints whose
/// `audit_head` is past the last row.
fn heads_past(db: &Connection, last: i64) -> Result<Vec<AuditProblem>> {
    let version: i64 = db.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if version < 5 {
        return Ok(vec![]);
    }
    let mut out = Vec::new();
    let mut stmt = db.prepare(
        "SELECT 'workspace ' || name, audit_head FROM workspace WHERE audit_head > ?1
         UNION ALL
         SELECT 'checkpoint ' || (SELECT w.name FROM workspace w WHERE w.id = c.workspace) || '/' || c.name,
                audit_head FROM checkpoint c WHERE audit_head > ?1",
    )?;
    let mut rows = stmt.query([last])?;
    while let Some(r) = rows.next()? {
        let what: String = r.get::<_, Option<String>>(0)?.unwrap_or_default();
        let head: i64 = match r.get_ref(1)? {
            rusqlite::types::ValueRef::Integer(i) => i,
            _ => continue,
        };
        out.push(AuditProblem {
            id: head,
            problem: format!(
                "{what} was written after audit row {head}, but the log ends at row {last} (rows removed from the end)"
            ),
        });
    }
    Ok(out)
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
    let last = expect_id - 1;
    let stored_head = db
        .prepare_cached("SELECT value FROM meta WHERE key = 'audit_head'")?
        .query_row([], |r| Ok(r.get_ref(0)?.as_i64().ok()))
        .optional()?;
    match stored_head {
        Some(None) => problems.push(AuditProblem {
            id: last,
            problem: "meta.audit_head is not an integer (the vault was edited)".into(),
        }),
        other => {
            let head = other.flatten().unwrap_or(0);
            if head != last {
                problems.push(AuditProblem {
                    id: head,
                    problem: format!(
                        "log ends at row {last} but row {head} was written (rows removed from the end)"
                    ),
                });
            }
        }
    }
    problems.extend(heads_past(db, last)?);
    // An approval's state is only what its audit rows say it is.
    for (id, problem) in super::approvals::unattested(db)? {
        problems.push(AuditProblem { id, problem });
    }
    Ok(AuditReport {
        rows: count,
        ok: problems.is_empty(),
        problems,
        anchor: None,
    })
}
