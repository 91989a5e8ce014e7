//! History tools people expect from version control: `status`, a graph of checkpoints,
//! and retention of the automatic checkpoints that exec and shell leave behind.

pub mod graph;
pub mod prune;
pub mod status;
