//! The sandbox's settings, as the policy files name them (`[sandbox]`). The sandbox
//! itself lives in `crate::sandbox`; this re-export keeps the policy's import stable.

pub use crate::sandbox::config::*;
