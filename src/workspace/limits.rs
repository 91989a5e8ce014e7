//! Quota enforcement for a workspace: single-file size on every content change, total
//! bytes and file count (of the workspace, and bytes of the whole vault) before commit.
//!
//! A CLI command checks the totals once, before it commits (`check_quota`). A long-lived
//! writer (the mount) holds a [`Budget`] instead: the limits, read once per transaction,
//! and the workspace's usage, computed once and then kept current by every change the
//! workspace API makes, so a check on the mount's hot path costs no SQL.

use std::cell::Cell;

use rusqlite::{Connection, params};

use super::{Inode, ROOT_INO, Workspace};
use crate::error::{Error, Result};
use crate::store::objects::{Kind, Usage, tree_usage};
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

    /// Bytes the vault file's stored contents take (what a vault-wide `max_bytes` limits).
    pub fn vault_bytes(&self) -> Result<u64> {
        quota::vault_bytes(self.db)
    }

    /// Sets the limits given (the vault's with `vault_wide`, else this workspace's); the
    /// others stay as they are. Returns the quota now in force; its audit row
    /// (`quota.set`, by `actor`) goes in the same transaction.
    pub fn set_quota(
        &self,
        vault_wide: bool,
        max_bytes: Option<u64>,
        max_files: Option<u64>,
        max_file_size: Option<u64>,
        actor: &str,
    ) -> Result<Quota> {
        let scope = self.quota_scope(vault_wide);
        let mut q = quota::get(self.db, &scope)?.unwrap_or(Quota {
            scope: scope.clone(),
            ..Default::default()
        });
        if max_bytes.is_some() {
            q.max_bytes = max_bytes;
        }
        if max_files.is_some() {
            q.max_files = max_files;
        }
        if max_file_size.is_some() {
            q.max_file_size = max_file_size;
        }
        quota::set(self.db, &q)?;
        super::record(
            self.db,
            Some(&self.info.name),
            actor,
            "quota.set",
            &serde_json::to_value(&q).unwrap_or_default(),
        )?;
        Ok(q)
    }

    /// Removes the limits (the vault's with `vault_wide`, else this workspace's), with
    /// its audit row (`quota.clear`).
    pub fn clear_quota(&self, vault_wide: bool, actor: &str) -> Result<()> {
        let scope = self.quota_scope(vault_wide);
        quota::clear(self.db, &scope)?;
        super::record(
            self.db,
            Some(&self.info.name),
            actor,
            "quota.clear",
            &serde_json::json!({"scope": scope}),
        )
    }

    /// The scope of a quota row: "" for the vault, else the workspace's name.
    fn quota_scope(&self, vault_wide: bool) -> String {
        if vault_wide {
            String::new()
        } else {
            self.info.name.clone()
        }
    }

    /// Refuses a file of `size` bytes if a single-file limit forbids it.
    pub fn check_file_size(&self, size: u64) -> Result<()> {
        if let Some(b) = self.budget {
            let l = b.limits.get();
            return file_size_ok(
                &self.info.name,
                l.ws.max_file_size,
                l.vault.max_file_size,
                size,
            );
        }
        let (ws, vault) = self.quotas()?;
        file_size_ok(
            &self.info.name,
            ws.and_then(|q| q.max_file_size),
            vault.and_then(|q| q.max_file_size),
            size,
        )
    }

    /// Current usage of the workspace (flushes the live layer: O(changes)).
    pub fn usage(&mut self) -> Result<Usage> {
        let root = self.flush()?;
        tree_usage(self.db, &root)
    }

    /// What the quotas compare a command's result with (see `check_quota`): the usage
    /// before it, when a limit needs it. Costs nothing without quotas.
    pub fn quota_baseline(&self) -> Result<QuotaBaseline> {
        let (ws, vault) = self.quotas()?;
        let l = Limits {
            ws: limit_of(ws),
            vault: limit_of(vault),
        };
        Ok(QuotaBaseline {
            usage: if l.counts() {
                Some(self.live_usage()?)
            } else {
                None
            },
            vault_bytes: match l.vault.max_bytes {
                Some(_) => Some(quota::vault_bytes(self.db)?),
                None => None,
            },
        })
    }

    /// Checks total bytes and file count against the quotas; call before committing.
    /// Refuses only what grew past a limit since `before`: a command that frees room
    /// (rm, a smaller file) always passes, also while a lowered limit is exceeded.
    pub fn check_quota(&mut self, before: &QuotaBaseline) -> Result<()> {
        let (ws, vault) = self.quotas()?;
        let l = Limits {
            ws: limit_of(ws),
            vault: limit_of(vault),
        };
        if l.counts() {
            let usage = self.usage()?;
            let grew = |now: u64, then: Option<u64>| then.is_none_or(|t| now > t);
            let b = before.usage;
            self.within(
                &l,
                usage,
                grew(usage.files, b.map(|u| u.files)),
                grew(usage.bytes, b.map(|u| u.bytes)),
            )?;
        }
        if let Some(max) = l.vault.max_bytes {
            let used = quota::vault_bytes(self.db)?;
            if used > max && before.vault_bytes.is_none_or(|b| used > b) {
                return Err(vault_bytes_error(max, used));
            }
        }
        Ok(())
    }
}

/// Usage before a command, for `check_quota`.
#[derive(Clone, Copy, Debug, Default)]
pub struct QuotaBaseline {
    usage: Option<Usage>,
    vault_bytes: Option<u64>,
}

fn limit_of(q: Option<Quota>) -> Limit {
    q.map(|q| Limit {
        max_bytes: q.max_bytes,
        max_files: q.max_files,
        max_file_size: q.max_file_size,
    })
    .unwrap_or_default()
}

fn file_size_ok(ws: &str, ws_max: Option<u64>, vault_max: Option<u64>, size: u64) -> Result<()> {
    for (max, scope) in [
        (ws_max, format!("workspace {ws}'s quota")),
        (vault_max, "the vault's quota".to_string()),
    ] {
        if let Some(max) = max
            && size > max
        {
            return Err(Error::Quota(format!(
                "{scope} allows files of at most {} (this one would be {}); see `avfs quota`",
                human(max),
                human(size)
            )));
        }
    }
    Ok(())
}

/// The limits of one scope, without its name (so they fit in a `Cell`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limit {
    pub max_bytes: Option<u64>,
    pub max_files: Option<u64>,
    pub max_file_size: Option<u64>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Limits {
    ws: Limit,
    vault: Limit,
}

impl Limits {
    /// Does any limit depend on the workspace's totals?
    fn counts(&self) -> bool {
        self.ws.max_bytes.is_some() || self.ws.max_files.is_some() || self.vault.max_files.is_some()
    }
}

/// Quota accounting for a long-lived writer of one workspace (the mount). Requests are
/// single-threaded per budget (the mount's state lock), hence `Cell`s.
///
/// `usage` is the workspace's usage after the last finished request; `delta` is what the
/// current request changed so far. A request that fails (its savepoint rolled back)
/// drops its delta; a transaction that fails to commit, or a change made from outside,
/// forgets `usage`, which is then computed again (from the live layer, without writing)
/// the next time a change needs it.
#[derive(Debug, Default)]
pub struct Budget {
    limits: Cell<Limits>,
    usage: Cell<Option<Usage>>,
    delta: Cell<(i64, i64)>,
    /// `usage` was computed during the current request (from rows it may roll back).
    fresh: Cell<bool>,
}

fn add(u: u64, d: i64) -> u64 {
    (u as i64).saturating_add(d).max(0) as u64
}

impl Budget {
    /// Reads the limits of `workspace` and of the vault (one query).
    pub fn reload(&self, db: &Connection, workspace: &str) -> Result<()> {
        let mut l = Limits::default();
        let mut stmt = db.prepare_cached(
            "SELECT scope, max_bytes, max_files, max_file_size FROM quota WHERE scope IN (?1, '')",
        )?;
        let mut rows = stmt.query(params![workspace])?;
        while let Some(r) = rows.next()? {
            let scope: String = r.get(0)?;
            let get = |i| {
                r.get::<_, Option<i64>>(i)
                    .map(|v| v.map(|v| v.max(0) as u64))
            };
            let limit = Limit {
                max_bytes: get(1)?,
                max_files: get(2)?,
                max_file_size: get(3)?,
            };
            if scope.is_empty() {
                l.vault = limit;
            } else {
                l.ws = limit;
            }
        }
        self.limits.set(l);
        Ok(())
    }

    /// True when some limit applies: only then do checks cost anything.
    pub fn limited(&self) -> bool {
        self.limits.get() != Limits::default()
    }

    /// The workspace changed behind this budget's back (or a commit failed): its usage is
    /// computed again when next needed.
    pub fn forget_usage(&self) {
        self.usage.set(None);
        self.delta.set((0, 0));
        self.fresh.set(false);
    }

    /// Ends a request: its changes count (`ok`) or were rolled back.
    pub fn finish_request(&self, ok: bool) {
        let (f, b) = self.delta.replace((0, 0));
        if ok {
            if let Some(u) = self.usage.get() {
                self.usage.set(Some(Usage {
                    files: add(u.files, f),
                    bytes: add(u.bytes, b),
                }));
            }
        } else if self.fresh.get() {
            self.usage.set(None);
        }
        self.fresh.set(false);
    }

    fn current(&self) -> Option<Usage> {
        let (f, b) = self.delta.get();
        self.usage.get().map(|u| Usage {
            files: add(u.files, f),
            bytes: add(u.bytes, b),
        })
    }
}

impl Workspace<'_> {
    /// Usage of the live state (names and bytes, as `tree_usage` counts them), read from
    /// the live layer and the stored totals of clean subtrees: O(dirty directories), and
    /// nothing is written (unlike `usage`, which flushes).
    pub fn live_usage(&self) -> Result<Usage> {
        let mut u = Usage::default();
        let mut stack = vec![self.get(ROOT_INO)?];
        while let Some(dir) = stack.pop() {
            if !dir.dirty && dir.hash.is_some() || !dir.materialized {
                let hash = dir.hash.ok_or_else(|| {
                    Error::Internal(format!("clean directory {} has no tree", dir.ino))
                })?;
                let s = tree_usage(self.db, &hash)?;
                u.files += s.files;
                u.bytes += s.bytes;
                continue;
            }
            for (_, child) in self.children(dir.ino)? {
                if child.kind == Kind::Dir {
                    stack.push(child);
                } else {
                    u.files += 1;
                    u.bytes += child.size;
                }
            }
        }
        Ok(u)
    }

    /// Accounts a change of `files` names and `bytes` bytes in the budget (if any),
    /// refusing one that would exceed a quota. Call before making the change.
    pub(super) fn charge(&self, files: i64, bytes: i64) -> Result<()> {
        let Some(b) = self.budget else {
            return Ok(());
        };
        let limits = b.limits.get();
        if !limits.counts() && limits.vault.max_bytes.is_none() {
            return Ok(());
        }
        if files > 0 || bytes > 0 {
            if limits.counts() {
                let cur = self.budget_usage(b)?;
                let would = Usage {
                    files: add(cur.files, files),
                    bytes: add(cur.bytes, bytes),
                };
                self.within(&limits, would, files > 0, bytes > 0)?;
            }
            if bytes > 0
                && let Some(max) = limits.vault.max_bytes
            {
                let used = quota::vault_bytes(self.db)?;
                if used > max {
                    return Err(vault_bytes_error(max, used));
                }
            }
        }
        if b.usage.get().is_some() {
            let (f, by) = b.delta.get();
            b.delta.set((f + files, by + bytes));
        }
        Ok(())
    }

    /// Refuses to let a buffered file grow from `stored` (its size in the vault) to
    /// `size` bytes when a quota forbids it; accounts nothing (the growth is charged when
    /// the buffer is stored). Without quotas this costs nothing.
    pub fn check_growth(&self, stored: u64, size: u64) -> Result<()> {
        let Some(b) = self.budget else {
            return Ok(());
        };
        if size <= stored || !b.limited() {
            return Ok(());
        }
        self.check_file_size(size)?;
        let limits = b.limits.get();
        if limits.ws.max_bytes.is_some() {
            let cur = self.budget_usage(b)?;
            let would = Usage {
                files: cur.files,
                bytes: cur.bytes.saturating_add(size - stored),
            };
            self.within(&limits, would, false, true)?;
        }
        Ok(())
    }

    fn budget_usage(&self, b: &Budget) -> Result<Usage> {
        if let Some(u) = b.current() {
            return Ok(u);
        }
        let u = self.live_usage()?;
        b.usage.set(Some(u));
        b.delta.set((0, 0));
        b.fresh.set(true);
        Ok(u)
    }

    fn within(&self, l: &Limits, would: Usage, more_files: bool, more_bytes: bool) -> Result<()> {
        let name = &self.info.name;
        if more_bytes
            && let Some(max) = l.ws.max_bytes
            && would.bytes > max
        {
            return Err(Error::Quota(format!(
                "workspace {name} may hold at most {} (it would hold {}); raise it with `avfs quota set --max-bytes`",
                human(max),
                human(would.bytes)
            )));
        }
        if more_files {
            if let Some(max) = l.ws.max_files
                && would.files > max
            {
                return Err(Error::Quota(format!(
                    "workspace {name} may hold at most {max} files (it would hold {}); raise it with `avfs quota set --max-files`",
                    would.files
                )));
            }
            if let Some(max) = l.vault.max_files
                && would.files > max
            {
                return Err(Error::Quota(format!(
                    "the vault allows at most {max} files per workspace (this one would hold {})",
                    would.files
                )));
            }
        }
        Ok(())
    }

    /// Names and bytes a stored subtree holds (for charging a graft or a removal).
    pub(super) fn subtree_usage(&self, dir: &Inode) -> Result<Usage> {
        match dir.hash {
            Some(h) if self.budget.is_some() => tree_usage(self.db, &h),
            _ => Ok(Usage::default()),
        }
    }
}

fn vault_bytes_error(max: u64, used: u64) -> Error {
    Error::Quota(format!(
        "the vault file may use at most {} (it would use {}); run `avfs gc` or raise it with `avfs quota set --vault-wide --max-bytes`",
        human(max),
        human(used)
    ))
}
