//! One overlay run's directories and life cycle: prepare the layer stack and an empty
//! upper, hand the view to the run's set-up, ingest the upper afterwards, then keep the
//! upper as the next layer (or remove it).
//!
//! ```text
//! $AVFS_HOME/runs/<exec id>/upper   what the command changed
//! $AVFS_HOME/runs/<exec id>/work    overlayfs's work directory
//! $AVFS_HOME/runs/<exec id>/run.json the run's base root and stack (for the watchdog)
//! ```

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use rusqlite::Connection;
use serde::{Deserialize, Serialize};

use super::ignored::{self, IgnoredCount};
use super::ingest::{self, IngestOptions, Ingested};
use super::kept::{self, Kept};
use super::layers::{LayerCache, Stack};
use super::materialize::remove_tree;
use super::memo::Memo;
use crate::error::{Error, Result};
use crate::sandbox::View;
use crate::store::objects::{Hash, get_tree};

/// What a run directory records about itself.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunRecord {
    pub id: String,
    pub vault_path: PathBuf,
    pub workspace: String,
    pub base_root: String,
    pub stack: Stack,
    /// The workspace's kept overlay the run used (`kept`), if any: its upper is the
    /// run's, and `head_root` the root it showed when the run started.
    #[serde(default)]
    pub kept: Option<PathBuf>,
    #[serde(default)]
    pub head_root: Option<String>,
    /// The workspace's ignored directory (`ignored`), the run's topmost lower layer.
    #[serde(default)]
    pub ignored: Option<PathBuf>,
}

/// Whose run it is: `$AVFS_HOME`, the exec id, the vault file and the workspace.
pub struct RunSite<'a> {
    pub home: &'a Path,
    pub id: &'a str,
    pub vault_path: &'a Path,
    pub workspace: &'a str,
    /// The workspace's ignored directory (`ignored::ensure`).
    pub ignored: Option<&'a Path>,
}

pub struct OverlayRun {
    pub dir: PathBuf,
    pub upper: PathBuf,
    pub work: PathBuf,
    pub record: RunRecord,
    /// The root the upper is ingested against: the stack's.
    pub base_root: Hash,
    /// The root the run saw when it started (the workspace's head): the run's changes
    /// are the difference from it. The same as `base_root` but in a kept overlay, whose
    /// upper also holds earlier runs' changes.
    pub head_root: Hash,
    pub kept: Option<Kept>,
    /// The kept overlay's keeper was ended after the run (`separate_ignored`).
    kept_ended: std::cell::Cell<bool>,
}

pub fn runs_dir(home: &Path) -> PathBuf {
    home.join("runs")
}

/// Where the last root a workspace ran at is remembered (a hint for the next stack).
fn last_root_file(home: &Path, vault_path: &Path, workspace: &str) -> PathBuf {
    home.join("layers")
        .join("ws")
        .join(crate::mount::mount_id(vault_path, workspace))
}

pub fn last_root(home: &Path, vault_path: &Path, workspace: &str) -> Option<Hash> {
    let s = fs::read_to_string(last_root_file(home, vault_path, workspace)).ok()?;
    crate::util::hex32(s.trim()).map(Hash)
}

pub fn remember_root(home: &Path, vault_path: &Path, workspace: &str, root: &Hash) {
    let f = last_root_file(home, vault_path, workspace);
    if let Some(d) = f.parent() {
        let _ = fs::create_dir_all(d);
    }
    let tmp = f.with_extension(format!("tmp{}", std::process::id()));
    if fs::write(&tmp, root.to_hex()).is_ok() {
        let _ = fs::rename(&tmp, &f);
    }
}

/// Only avfs's user may enter a directory of uppers (`runs/`, `kept/`): what a command
/// made there is reachable by no one else on the host.
pub(crate) fn private(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o700));
}

fn host_err(p: &Path, e: std::io::Error) -> Error {
    Error::host(p.display(), e)
}

fn write_run_record(dir: &Path, record: &RunRecord) -> Result<()> {
    let json = serde_json::to_vec_pretty(record).expect("run record serializes");
    let f = dir.join("run.json");
    fs::write(&f, json).map_err(|e| host_err(&f, e))
}

impl OverlayRun {
    /// Prepares the stack for `base_root` (reading the vault through `db`) and an empty
    /// upper whose root carries the base root's attributes.
    pub fn prepare(
        site: &RunSite,
        db: &Connection,
        base_root: &Hash,
        hints: &[Hash],
        keep_owners: bool,
    ) -> Result<OverlayRun> {
        let (home, id, vault_path, workspace) =
            (site.home, site.id, site.vault_path, site.workspace);
        let cache = LayerCache::new(home);
        let stack = cache.prepare(db, base_root, hints)?;
        kept::wait_for_dying(home, &stack);
        let dir = runs_dir(home).join(id);
        let upper = dir.join("upper");
        let work = dir.join("work");
        for d in [&upper, &work] {
            fs::create_dir_all(d).map_err(|e| host_err(d, e))?;
        }
        private(&runs_dir(home));
        let attrs = get_tree(db, base_root)?
            .root_attrs
            .ok_or_else(|| Error::Internal("root tree without attributes".into()))?;
        ingest::prepare_upper_root(&upper, &attrs, keep_owners)?;
        let record = RunRecord {
            id: id.into(),
            vault_path: vault_path.to_path_buf(),
            workspace: workspace.into(),
            base_root: base_root.to_hex(),
            stack,
            kept: None,
            head_root: None,
            ignored: site.ignored.map(Path::to_path_buf),
        };
        write_run_record(&dir, &record)?;
        Ok(OverlayRun {
            dir,
            upper,
            work,
            record,
            base_root: *base_root,
            head_root: *base_root,
            kept: None,
            kept_ended: Default::default(),
        })
    }

    /// Like `prepare`, in the workspace's kept overlay (reused when it shows `head`).
    pub fn prepare_kept(
        site: &RunSite,
        db: &Connection,
        head: &Hash,
        hints: &[Hash],
        keep_owners: bool,
    ) -> Result<OverlayRun> {
        let kept_dir = kept::kept_dir(site.home, site.vault_path, site.workspace);
        let (k, how) = Kept::acquire(
            site.home,
            db,
            (site.vault_path, site.workspace),
            &kept_dir,
            (head, site.ignored),
            hints,
            keep_owners,
        )?;
        let dir = runs_dir(site.home).join(site.id);
        fs::create_dir_all(&dir).map_err(|e| host_err(&dir, e))?;
        private(&runs_dir(site.home));
        let mut stack = k.record.stack.clone();
        stack.how = how;
        if stack.how == "kept" || stack.how == "remounted" {
            stack.written = 0;
        }
        let record = RunRecord {
            id: site.id.into(),
            vault_path: site.vault_path.to_path_buf(),
            workspace: site.workspace.into(),
            base_root: stack.root.clone(),
            stack,
            kept: Some(kept_dir),
            head_root: Some(head.to_hex()),
            ignored: site.ignored.map(Path::to_path_buf),
        };
        write_run_record(&dir, &record)?;
        Ok(OverlayRun {
            upper: k.upper(),
            work: k.work(),
            dir,
            base_root: k.stack_root()?,
            head_root: *head,
            record,
            kept: Some(k),
            kept_ended: Default::default(),
        })
    }

    /// A run directory left by an exec that died (for its watchdog).
    pub fn open(home: &Path, id: &str) -> Result<OverlayRun> {
        let dir = runs_dir(home).join(id);
        let f = dir.join("run.json");
        let text = fs::read(&f).map_err(|e| host_err(&f, e))?;
        let record: RunRecord = serde_json::from_slice(&text)
            .map_err(|e| Error::Internal(format!("{}: {e}", f.display())))?;
        let base_root = crate::util::hex32(&record.base_root)
            .map(Hash)
            .ok_or_else(|| Error::Internal(format!("{}: bad base root", f.display())))?;
        let head_root = match &record.head_root {
            Some(h) => crate::util::hex32(h)
                .map(Hash)
                .ok_or_else(|| Error::Internal(format!("{}: bad head root", f.display())))?,
            None => base_root,
        };
        let kept = match &record.kept {
            Some(k) => Some(Kept::open(k).ok_or_else(|| {
                Error::Internal(format!("{}: its kept overlay is gone", f.display()))
            })?),
            None => None,
        };
        let (upper, work) = match &kept {
            Some(k) => (k.upper(), k.work()),
            None => (dir.join("upper"), dir.join("work")),
        };
        Ok(OverlayRun {
            upper,
            work,
            dir,
            record,
            base_root,
            head_root,
            kept,
            kept_ended: Default::default(),
        })
    }

    pub fn view(&self) -> View {
        if let Some(k) = &self.kept {
            return View::Kept {
                keeper: k.keeper_pid(),
                merged: k.merged(),
            };
        }
        // The ignored directory lies above the history's layers (a run's changes to it
        // land in the upper, and `separate_ignored` moves them back).
        let mut lowers: Vec<PathBuf> = self.record.ignored.iter().cloned().collect();
        lowers.extend(self.record.stack.dirs.iter().cloned());
        View::Overlay {
            lowers,
            upper: self.upper.clone(),
            work: self.work.clone(),
        }
    }

    /// The run's changes as a new root, inside the caller's transaction: from what
    /// `store_upper` stored, or reading the upper now (all in that transaction).
    pub fn ingest(
        &self,
        db: &Connection,
        stored: Option<ingest::Stored>,
        opts: IngestOptions,
    ) -> Result<Ingested> {
        match stored {
            Some(s) => ingest::ingest_stored(db, &self.base_root, s, opts),
            None => ingest::ingest(db, &self.base_root, &self.upper, opts),
        }
    }

    /// Reads the upper and stores its content ahead of `ingest`, in transactions of its
    /// own (see `ingest::store_upper`), pinned under [`OverlayRun::ingest_pin`].
    /// A kept overlay's upper is read as the last ingest left it (`memo`): files unchanged
    /// since are not read again.
    pub fn store_upper(&self, store: &mut crate::store::Store) -> Result<ingest::Stored> {
        let memo = self.kept.as_ref().and_then(|k| Memo::load(&k.dir));
        ingest::store_upper(store, &self.upper, &self.ingest_pin(), memo.as_ref())
    }

    /// Moves the ignored, untracked entries of the upper into the workspace's ignored
    /// directory (see `ignored`), before anything reads the upper for the history;
    /// returns what moved. A kept overlay's keeper ends first when there is anything to
    /// move (its upper must not change under a live overlay); `finish` then retires it.
    pub fn separate_ignored(&self, db: &Connection) -> Result<IgnoredCount> {
        let Some(dir) = &self.record.ignored else {
            return Ok(IgnoredCount::default());
        };
        self.with_ignored_view(db, |view| {
            if let Some(k) = &self.kept {
                let (_, any) = ignored::separate(view, dir, true)?;
                if !any {
                    return Ok(IgnoredCount::default());
                }
                k.end_keeper();
                self.kept_ended.set(true);
            }
            Ok(ignored::separate(view, dir, false)?.0)
        })
    }

    /// Whether the upper holds ignored, untracked entries that `separate_ignored` would
    /// move (and, in a kept overlay, end its keeper for); moves nothing.
    pub fn has_ignored(&self, db: &Connection) -> Result<bool> {
        let Some(dir) = &self.record.ignored else {
            return Ok(false);
        };
        self.with_ignored_view(db, |view| Ok(ignored::separate(view, dir, true)?.1))
    }

    /// `f` with the upper as `ignored` reads it: which of its paths the workspace's
    /// head tracks.
    fn with_ignored_view<R>(
        &self,
        db: &Connection,
        f: impl FnOnce(&mut ignored::View) -> Result<R>,
    ) -> Result<R> {
        let mut trees: HashMap<Hash, crate::store::objects::Tree> = HashMap::new();
        let head = self.head_root;
        let mut tracked = |comps: &[Vec<u8>]| -> Result<bool> {
            let mut at = head;
            for (i, c) in comps.iter().enumerate() {
                if let std::collections::hash_map::Entry::Vacant(v) = trees.entry(at) {
                    v.insert(get_tree(db, &at)?);
                }
                let t = &trees[&at];
                let Ok(k) = t.entries.binary_search_by(|e| e.name.as_slice().cmp(c)) else {
                    return Ok(false);
                };
                let e = &t.entries[k];
                if i + 1 == comps.len() {
                    return Ok(true);
                }
                match e.hash {
                    Some(h) if e.kind == crate::store::objects::Kind::Dir => at = h,
                    _ => return Ok(false),
                }
            }
            Ok(true)
        };
        let mut view = ignored::View {
            upper: &self.upper,
            lowers: &self.record.stack.dirs,
            tracked: &mut tracked,
        };
        f(&mut view)
    }

    /// The pin that keeps content stored ahead of the ingest until it is referenced.
    pub fn ingest_pin(&self) -> String {
        format!("{}.ingest", self.record.id)
    }

    /// After the ingest committed: the upper becomes the layer of the new root when it
    /// describes it exactly; the run directory goes. A kept overlay stays for the next
    /// run when `head` (the workspace's head now) is what it shows and its upper is
    /// small; else it is retired the same way.
    pub fn finish(self, home: &Path, ingested: Option<&Ingested>, head: Option<&Hash>) {
        if let Some(k) = self.kept {
            if self.kept_ended.get() {
                // Its keeper ended so that ignored files could leave the upper: the upper
                // becomes the layer of what it shows, and the next run mounts anew.
                k.retire(home, ingested.filter(|i| i.exact).map(|i| &i.root));
                let _ = remove_tree(&self.dir);
                return;
            }
            match (ingested, head) {
                (Some(i), Some(h)) if i.exact => k.after_run(home, h, i),
                (Some(i), None) if i.exact => k.retire_in_background(home, Some(&i.root)),
                _ => k.retire_in_background(home, None),
            }
            let _ = remove_tree(&self.dir);
            return;
        }
        if let Some(i) = ingested
            && i.exact
            && i.root != self.base_root
        {
            let cache = LayerCache::new(home);
            let _ = cache.adopt_upper(&self.upper, &self.record.stack, &i.root);
        }
        let _ = remove_tree(&self.dir);
    }

    /// The kept overlay a service starts in: its keeper's pid and record.
    pub fn kept_keeper(&self) -> Option<(i32, PathBuf)> {
        let k = self.kept.as_ref()?;
        Some((k.keeper_pid(), k.dir.join("kept.json")))
    }

    /// Leaves the kept overlay as it is (a service was started in it: nothing ran to
    /// take in) and removes the run directory.
    pub fn leave_kept(self) {
        let _ = remove_tree(&self.dir);
    }

    /// Removes the run directory without taking anything in (a kept overlay goes too:
    /// its upper holds what is not taken in).
    pub fn discard(self, home: &Path) {
        if let Some(k) = self.kept {
            k.retire(home, None);
        }
        let _ = remove_tree(&self.dir);
    }

    /// Keeps the run's files for a person to look at (an ingest was refused); returns
    /// where they are. A kept overlay's upper moves into the run directory.
    pub fn keep_for_inspection(self) -> PathBuf {
        match self.kept {
            Some(k) => k.retire_keeping_upper(&self.dir.join("upper")),
            None => self.upper,
        }
    }
}
