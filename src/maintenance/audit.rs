//! The audit log as `avfs audit` reads it: pages of rows, an anchor line naming the newest
//! row, and the check of the hash chain (with an anchor kept outside the vault). The rows
//! themselves are written by the operations they record, in their transactions.

pub use crate::store::audit::{
    AuditReport, anchor_line, head, list, parse_anchor, verify_anchored,
};
