//! Quota enforcement for a workspace: single-file size on every content change, total
//! bytes and file count (of the workspace, and bytes of the whole vault) before commit.

use super::Workspace;
use crate::error::{Error, Result};
use crate::store::objects::{Usage, tree_usage};
use crate::store::quota::{self, Quota};

fn human(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut v, mut u) = (n as f64, 0);
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

impl Workspace<'_> {
    /// The quotas that apply here: the workspace's own and the vault's.
    pub fn quotas(&self) -> Result<(Option<Quota>, Option<Quota>)> {
        Ok((
            quota::get(self.db, &self.info.name)?,
            quota::get(self.db, "")?,
        ))
    }

    /// Refuses a file of `size` bytes if a single-file limit forbids it.
    pub fn check_file_size(&self, size: u64) -> Result<()> {
        let (ws, vault) = self.quotas()?;
        for q in [ws, vault].into_iter().flatten() {
            if let Some(max) = q.max_file_size
                && size > max
            {
                return Err(Error::Quota(format!(
                    "{} allows files of at most {} (this one would be {}); see `avfs quota`",
                    scope_name(&q, &self.info.name),
                    human(max),
                    human(size)
                )));
            }
        }
        Ok(())
    }

    /// Current usage of the workspace (flushes the live layer: O(changes)).
    pub fn usage(&mut self) -> Result<Usage> {
        let root = self.flush()?;
        tree_usage(self.db, &root)
    }

    /// Checks total bytes and file count against the quotas; call before committing.
    pub fn check_quota(&mut self) -> Result<()> {
        let (ws, vault) = self.quotas()?;
        if ws
            .as_ref()
            .is_none_or(|q| q.max_bytes.is_none() && q.max_files.is_none())
            && vault
                .as_ref()
                .is_none_or(|q| q.max_bytes.is_none() && q.max_files.is_none())
        {
            return Ok(());
        }
        let usage = self.usage()?;
        if let Some(q) = &ws {
            if let Some(max) = q.max_bytes
                && usage.bytes > max
            {
                return Err(Error::Quota(format!(
                    "workspace {} may hold at most {} (it would hold {}); raise it with `avfs quota set --max-bytes`",
                    self.info.name,
                    human(max),
                    human(usage.bytes)
                )));
            }
            if let Some(max) = q.max_files
                && usage.files > max
            {
                return Err(Error::Quota(format!(
                    "workspace {} may hold at most {max} files (it would hold {}); raise it with `avfs quota set --max-files`",
                    self.info.name, usage.files
                )));
            }
        }
        if let Some(q) = &vault {
            if let Some(max) = q.max_bytes {
                let used = quota::vault_bytes(self.db)?;
                if used > max {
                    return Err(Error::Quota(format!(
                        "the vault file may use at most {} (it would use {}); run `avfs gc` or raise it with `avfs quota set --vault-wide --max-bytes`",
                        human(max),
                        human(used)
                    )));
                }
            }
            if let Some(max) = q.max_files
                && usage.files > max
            {
                return Err(Error::Quota(format!(
                    "the vault allows at most {max} files per workspace (this one would hold {})",
                    usage.files
                )));
            }
        }
        Ok(())
    }
}

fn scope_name(q: &Quota, ws: &str) -> String {
    if q.scope.is_empty() {
        "the vault's quota".into()
    } else {
        format!("workspace {ws}'s quota")
    }
}
