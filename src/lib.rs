//! agentvfs: versioned, forkable workspaces in one SQLite file.

pub mod boundary;
pub mod candidates;
pub mod cli;
pub mod context;
pub mod diff;
pub mod documents;
pub mod engine;
pub mod error;
pub mod exec;
pub mod history;
pub mod mcp;
pub mod merge;
pub mod mergepending;
pub mod names;
pub mod pidfd;
pub mod reclaim;
pub mod recover;
pub mod registry;
pub mod relpath;
pub mod remote;
pub mod sandbox;
pub mod schema;
pub mod search;
pub mod store;
pub mod tags;
pub mod textmerge;
pub mod util;
pub mod vaultcopy;
pub mod vaultguard;
pub mod walk;
pub mod workspace;

pub use error::{Error, Result};
pub mod hostio;
pub mod maintenance;
pub mod mount;
pub mod policy;
