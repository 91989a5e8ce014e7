//! The exec boundary's parts: the process runner and the envelope every run returns.
//! `crate::boundary` puts them together with the policy (`crate::policy`, also reachable
//! as `exec::policy`), the workspace, checkpoints and the engines. Nothing here touches
//! SQL.

pub mod capture;
pub mod early;
pub mod envelope;
pub mod forked;
pub mod outputs;
pub use crate::policy;
pub mod runner;
pub mod sandbox;
pub mod supervisor;
pub mod watchdog;

/// Exit status of `avfs exec` when the policy denies the command.
pub const EXIT_DENIED: i32 = 126;
/// Exit status when the command waits for approval (nothing ran).
pub const EXIT_APPROVAL_REQUIRED: i32 = 75;
/// Exit status when the command ran out of time.
pub const EXIT_TIMED_OUT: i32 = 124;
