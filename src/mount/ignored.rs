//! What the mount asks about the workspace's ignored files before it changes them. The
//! answers are the engine's (`engine::ignored_mount`, which the CLI hands to `serve`):
//! the mount only carries requests to the host's ignored directory.

use std::path::Path;

use crate::error::Result;

/// Reads a file of the workspace (a path below its root) for the rules: its bytes and
/// its inode, or `None` when the workspace has no such file.
pub type ReadRuleFile<'a> = dyn FnMut(&Path) -> Option<(u64, Vec<u8>)> + 'a;

pub trait IgnoredPolicy: Send {
    /// Is `rel`, a new entry the workspace does not hold, ignored by its rules (so that
    /// it goes to the ignored directory, as a run's would)?
    fn ignores(&mut self, rel: &Path, is_dir: bool, read: &mut ReadRuleFile) -> bool;
    /// Is a file of this name a rule file (its change may change what is ignored)?
    fn is_rule_file(&self, name: &[u8]) -> bool;
    /// A rule file may have changed: rules read so far are read again when next asked.
    fn forget_rules(&mut self);
    /// Before the mount changes the ignored directory: makes it (a fork's from its
    /// parent's, as a first run would) and ends what has it mounted as a lower layer.
    fn before_change(&mut self, parent: Option<&str>) -> Result<()>;
    /// Before the mount changes the file at host path `p` in place: makes it the
    /// workspace's own when it is shared with another workspace's ignored directory (a
    /// fork's hard link), keeping its bytes unless `truncate`.
    fn unshare(&self, p: &Path, truncate: bool) -> Result<()>;
}
