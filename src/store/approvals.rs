//! Approvals: a command the policy sends to a human is recorded, runs nothing, and can
//! later be approved or denied; an approved command runs exactly once, exactly as asked.

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::Serialize;

use crate::error::{Error, Result};
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

pub fn create(
    db: &Connection,
    id: &str,
    workspace: &str,
    request: &serde_json::Value,
    decision: &serde_json::Value,
) -> Result<Approval> {
    let now = now_ns();
    db.execute(
        "INSERT INTO approval (id, created_at_ns, expires_at_ns, workspace, request, decision, state) VALUES (?1,?2,?3,?4,?5,?6,'pending')",
        params![id, now, now + APPROVAL_TTL_NS, workspace, request.to_string(), decision.to_string()],
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

/// Approves or denies a pending approval.
pub fn decide(db: &Connection, id: &str, approve: bool) -> Result<Approval> {
    let a = get(db, id)?;
    if a.state != "pending" {
        return Err(Error::Refused(format!(
            "approval {id} is {}, not pending",
            a.state
        )));
    }
    db.execute(
        "UPDATE approval SET state = ?2, decided_at_ns = ?3 WHERE id = ?1",
        params![id, if approve { "approved" } else { "denied" }, now_ns()],
    )?;
    get(db, id)
}

/// Marks an approved request used; a second use is refused.
pub fn consume(db: &Connection, id: &str) -> Result<Approval> {
    let a = get(db, id)?;
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
    get(db, id)
}
