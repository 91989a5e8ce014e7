//! Approvals: a command the policy sends to a human is recorded, runs nothing, and can
//! later be approved or denied; an approved command runs exactly once, exactly as asked.
//!
//! Every change of an approval's state is written with an audit row in the same
//! transaction (`approval.request`, `approval.approve` / `approval.deny`,
//! `approval.use`), and the state is only believed when those rows say the same: a state
//! (or a request, or an expiry) written into the vault file outside avfs does not match
//! the hash-chained log, so exec refuses it and `audit verify` reports it.

use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::store::audit::{self, StoredRow};
use crate::store::now_ns;

/// How long a request stays valid, from when it was asked: to be approved, and to run.
pub const APPROVAL_TTL_NS: i64 = 24 * 3600 * 1_000_000_000;

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Approval {
    pub id: String,
    pub state: String,
    pub workspace: String,
    pub created_at_ns: i64,
    pub expires_at_ns: i64,
    pub decided_at_ns: Option<i64>,
    pub used_at_ns: Option<i64>,
    /// The exact request (command, cwd, options) that was asked for.
    pub request: serde_json::Value,
    /// The policy decision that asked for approval (categories, rule, reason).
    pub decision: serde_json::Value,
}

fn from_row(r: &Row) -> rusqlite::Result<Approval> {
    let req: String = r.get(5)?;
    let dec: String = r.get(6)?;
    let mut a = Approval {
        id: r.get(0)?,
        state: r.get(1)?,
        workspace: r.get(2)?,
        created_at_ns: r.get(3)?,
        expires_at_ns: r.get(4)?,
        decided_at_ns: r.get(7)?,
        used_at_ns: r.get(8)?,
        request: serde_json::from_str(&req).unwrap_or_default(),
        decision: serde_json::from_str(&dec).unwrap_or_default(),
    };
    // The expiry bounds the request's whole life: an approval granted but not used in
    // time cannot run either.
    if (a.state == "pending" || a.state == "approved") && a.expires_at_ns < now_ns() {
        a.state = "expired".into();
    }
    Ok(a)
}

const COLS: &str = "id, state, workspace, created_at_ns, expires_at_ns, request, decision, decided_at_ns, used_at_ns";

/// Records a pending request and its `approval.request` audit row (`audit_ws`: the
/// workspace the audit row names).
pub fn create(
    db: &Connection,
    id: &str,
    workspace: &str,
    audit_ws: &str,
    request: &serde_json::Value,
    decision: &serde_json::Value,
) -> Result<Approval> {
    let now = now_ns();
    let expires = now + APPROVAL_TTL_NS;
    db.execute(
        "INSERT INTO approval (id, created_at_ns, expires_at_ns, workspace, request, decision, state) VALUES (?1,?2,?3,?4,?5,?6,'pending')",
        params![id, now, expires, workspace, request.to_string(), decision.to_string()],
    )?;
    audit::append(
        db,
        Some(audit_ws),
        "exec",
        "approval.request",
        &serde_json::json!({"approval": id, "request": request, "decision": decision, "expires_at_ns": expires}),
    )?;
    get(db, id)
}

pub fn get(db: &Connection, id: &str) -> Result<Approval> {
    db.query_row(
        &format!("SELECT {COLS} FROM approval WHERE id = ?1"),
        [id],
        from_row,
    )
    .optional()?
    .ok_or_else(|| Error::NotFound(format!("approval {id} (see `avfs approvals`)")))
}

pub fn list(db: &Connection, all: bool) -> Result<Vec<Approval>> {
    let mut stmt = db.prepare(&format!(
        "SELECT {COLS} FROM approval ORDER BY created_at_ns"
    ))?;
    let rows = stmt.query_map([], from_row)?;
    let v: Vec<Approval> = rows.collect::<rusqlite::Result<_>>()?;
    Ok(v.into_iter()
        .filter(|a| all || a.state == "pending" || a.state == "approved")
        .collect())
}

/// Approves or denies a pending approval, with its audit row (written by `actor`).
pub fn decide(
    db: &Connection,
    id: &str,
    approve: bool,
    audit_ws: &str,
    actor: &str,
) -> Result<Approval> {
    let a = get_attested(db, id)?;
    if a.state != "pending" {
        return Err(Error::Refused(format!(
            "approval {id} is {}, not pending",
            a.state
        )));
    }
    let state = if approve { "approved" } else { "denied" };
    db.execute(
        "UPDATE approval SET state = ?2, decided_at_ns = ?3 WHERE id = ?1",
        params![id, state, now_ns()],
    )?;
    audit::append(
        db,
        Some(audit_ws),
        actor,
        if approve {
            "approval.approve"
        } else {
            "approval.deny"
        },
        &serde_json::json!({"id": id, "state": state}),
    )?;
    get(db, id)
}

/// Marks an approved request used by run `exec_id`; a second use is refused.
pub fn consume(db: &Connection, id: &str, audit_ws: &str, exec_id: &str) -> Result<Approval> {
    let a = get_attested(db, id)?;
    if a.state != "approved" {
        return Err(Error::Refused(format!(
            "approval {id} is {}{}",
            a.state,
            if a.state == "pending" {
                ": run `avfs approve` first"
            } else {
                "; it cannot run (again)"
            }
        )));
    }
    db.execute(
        "UPDATE approval SET state = 'used', used_at_ns = ?2 WHERE id = ?1",
        params![id, now_ns()],
    )?;
    audit::append(
        db,
        Some(audit_ws),
        "exec",
        "approval.use",
        &serde_json::json!({"approval": id, "exec": exec_id}),
    )?;
    get(db, id)
}

/// An approval whose state the audit log confirms; one it does not is refused.
pub fn get_attested(db: &Connection, id: &str) -> Result<Approval> {
    let a = get(db, id)?;
    let trails = trails(db)?;
    match check(&a, trails.get(id)) {
        None => Ok(a),
        Some(why) => Err(Error::Refused(format!(
            "approval {id} cannot be trusted: {why}; the vault file was changed outside avfs (see `avfs audit verify`)"
        ))),
    }
}

/// Every approval whose state, request or expiry the audit log does not confirm: (the
/// audit row that asked for it, when there is one; the problem).
pub fn unattested(db: &Connection) -> Result<Vec<(i64, String)>> {
    let version: i64 = db.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if version < 2 {
        return Ok(vec![]);
    }
    let trails = trails(db)?;
    let mut out = Vec::new();
    for a in list(db, true)? {
        let trail = trails.get(&a.id);
        if let Some(why) = check(&a, trail) {
            let row = trail
                .and_then(|t| t.requests.first())
                .map(|r| r.id)
                .unwrap_or(0);
            out.push((row, format!("approval {}: {why}", a.id)));
        }
    }
    Ok(out)
}

/// The audit rows of one approval.
#[derive(Default)]
struct Trail {
    requests: Vec<StoredRow>,
    decisions: Vec<StoredRow>,
    uses: Vec<StoredRow>,
}

/// The audit rows of every approval, by approval id.
fn trails(db: &Connection) -> Result<HashMap<String, Trail>> {
    let mut out: HashMap<String, Trail> = HashMap::new();
    for row in audit::rows_with_action_prefix(db, "approval.")? {
        let key = match row.action.as_str() {
            "approval.request" | "approval.use" => "approval",
            "approval.approve" | "approval.deny" => "id",
            _ => continue,
        };
        let Some(id) = row.detail[key].as_str().map(String::from) else {
            continue;
        };
        let t = out.entry(id).or_default();
        match row.action.as_str() {
            "approval.request" => t.requests.push(row),
            "approval.use" => t.uses.push(row),
            _ => t.decisions.push(row),
        }
    }
    Ok(out)
}

/// Why the audit rows do not confirm this approval as stored (`None`: they do).
fn check(a: &Approval, trail: Option<&Trail>) -> Option<String> {
    let Some(t) = trail else {
        return Some("no audit row records its request".into());
    };
    let Some(req) = t.requests.first() else {
        return Some("no audit row records its request".into());
    };
    if let Some(bad) = t
        .requests
        .iter()
        .chain(&t.decisions)
        .chain(&t.uses)
        .find(|r| !r.intact)
    {
        return Some(format!(
            "audit row {} about it does not match its hash or the row before it",
            bad.id
        ));
    }
    if t.requests.len() > 1 {
        return Some("its request is recorded more than once".into());
    }
    if req.detail["request"] != a.request {
        return Some(format!(
            "its request differs from the one audit row {} recorded",
            req.id
        ));
    }
    // Rows written before the request row recorded its expiry are bounded by its time.
    let latest_expiry = req.detail["expires_at_ns"]
        .as_i64()
        .unwrap_or(req.ts_ns.saturating_add(APPROVAL_TTL_NS));
    if a.expires_at_ns > latest_expiry {
        return Some(format!(
            "its expiry is later than the one audit row {} recorded",
            req.id
        ));
    }
    let recorded = match (t.decisions.as_slice(), t.uses.as_slice()) {
        ([], []) => "pending",
        ([d], []) if d.id > req.id && d.action == "approval.approve" => "approved",
        ([d], []) if d.id > req.id => "denied",
        ([d], [u]) if d.id > req.id && d.action == "approval.approve" && u.id > d.id => "used",
        _ => return Some("its audit rows are out of order or repeated".into()),
    };
    // Expiry is computed when read: a pending or approved request can read as expired.
    let stored_ok =
        a.state == recorded || (a.state == "expired" && matches!(recorded, "pending" | "approved"));
    if !stored_ok {
        return Some(format!(
            "the vault says it is {}, but the audit log records it {recorded}",
            a.state
        ));
    }
    None
}
