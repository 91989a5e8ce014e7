//! Vault maintenance: garbage collection, a full consistency check and statistics.
//!
//! All three run over an open vault inside a transaction the caller owns (`gc` and a
//! workspace `stats` need a write transaction; `verify` and vault-only `stats` only read).
//!
//! * [`gc`] marks every object reachable from a workspace base root, a checkpoint root or a
//!   live (not dead) layer, then sweeps unreferenced chunks, contents and trees. Shared
//!   subtrees (forks, checkpoints) are walked once: the mark is O(unique reachable objects),
//!   the sweep is one `DELETE ... NOT IN` per table against an indexed temp table. It refuses
//!   (and deletes nothing) when a reachable tree or chunk list is missing or damaged, because
//!   a sweep could then destroy objects that only the damaged one knew about; run [`verify`].
//! * [`verify`] re-hashes every stored object, checks every reference between objects, roots
//!   and the live layers, runs `PRAGMA integrity_check` and checks the audit chain. It reports
//!   every problem it finds and never stops at the first one.
//! * [`stats`] counts what the vault stores and, for one workspace, what its tree holds.
//! * [`audit`] reads the audit log and checks its hash chain.

pub mod audit;
mod gc;
mod stats;

pub use gc::{GcReport, gc};
pub use stats::{Stats, VaultStats, WorkspaceStats, stats};
// The full check lives with the file it checks (the store runs it when it opens a file
// avfs did not close cleanly, and before an upgrade); it is re-exported here, with the
// other whole-vault work.
pub use crate::store::verify::{Checked, Problem, VerifyReport, verify, verify_file};
// Adding page checksums to a vault file made before them (`vault upgrade`), whole-file
// work like the check.
pub use crate::store::upgrade::{UpgradeReport, add_page_checksums};

#[cfg(test)]
mod tests;
