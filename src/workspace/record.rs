//! Audit rows of work done on a workspace by a process that owns the transaction (a
//! mount session, a library operation): written in the transaction that makes the change
//! they record, so the log and the vault never disagree.

use rusqlite::Connection;

use crate::error::Result;
use crate::store::audit;

/// Who a command-line process acts for (`cli`, or `mcp` for the commands the MCP server
/// runs): the actor of the audit rows and checkpoints it writes.
pub use crate::store::audit::cli_actor;

/// Appends one audit row about `workspace` (none: the vault as a whole); call inside the
/// transaction that makes the change it records.
pub fn record(
    db: &Connection,
    workspace: Option<&str>,
    actor: &str,
    action: &str,
    detail: &serde_json::Value,
) -> Result<()> {
    audit::append(db, workspace, actor, action, detail).map(|_| ())
}
