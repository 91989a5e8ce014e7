//! agentvfs: versioned, forkable workspaces in one SQLite file.

pub mod diff;
pub mod error;
pub mod store;
pub mod registry;
pub mod cli;
pub mod util;
pub mod vaultcopy;
pub mod workspace;

pub use error::{Error, Result};
pub mod hostio;
pub mod maintenance;
