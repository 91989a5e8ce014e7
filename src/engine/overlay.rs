//! One overlay run's directories and life cycle: prepare the layer stack and an empty
//! upper, hand the view to the run's set-up, ingest the upper afterwards, then keep the
//! upper as the next layer (or remove it).
//!
//! ```text
//! $AVFS_HOME/runs/<exec id>/upper   what the command changed
//! $AVFS_HOME/runs/<exec id>/work    overlayfs's work directory
//! $AVFS_HOME/runs/<exec id>/run.json the run's base root and stack (for the watchdog)
//! ```

use std::fs;
use std::path::{Path, PathBuf};

use rusqlite::Connection;
use serde::{Deserialize, Serialize};

use super::ingest::{self, IngestOptions, Ingested};
use super::layers::{LayerCache, Stack};
use super::materialize::remove_tree;
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
}

/// Whose run it is: `$AVFS_HOME`, the exec id, the vault file and the workspace.
pub struct RunSite<'a> {
    pub home: &'a Path,
    pub id: &'a str,
    pub vault_path: &'a Path,
    pub workspace: &'a str,
}

pub struct OverlayRun {
    pub dir: PathBuf,
    pub upper: PathBuf,
    pub work: PathBuf,
    pub record: RunRecord,
    pub base_root: Hash,
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

fn host_err(p: &Path, e: std::io::Error) -> Error {
    Error::host(p.display(), e)
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
        let dir = runs_dir(home).join(id);
        let upper = dir.join("upper");
        let work = dir.join("work");
        for d in [&upper, &work] {
            fs::create_dir_all(d).map_err(|e| host_err(d, e))?;
        }
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
        };
        let json = serde_json::to_vec_pretty(&record).expect("run record serializes");
        let f = dir.join("run.json");
        fs::write(&f, json).map_err(|e| host_err(&f, e))?;
        Ok(OverlayRun {
            dir,
            upper,
            work,
            record,
            base_root: *base_root,
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
        Ok(OverlayRun {
            upper: dir.join("upper"),
            work: dir.join("work"),
            dir,
            record,
            base_root,
        })
    }

    pub fn view(&self) -> View {
        View::Overlay {
            lowers: self.record.stack.dirs.clone(),
            upper: self.upper.clone(),
            work: self.work.clone(),
        }
    }

    /// The run's changes as a new root, inside the caller's transaction.
    pub fn ingest(&self, db: &Connection, opts: IngestOptions) -> Result<Ingested> {
        ingest::ingest(db, &self.base_root, &self.upper, opts)
    }

    /// After the ingest committed: the upper becomes the layer of the new root when it
    /// describes it exactly; the run directory goes.
    pub fn finish(self, home: &Path, ingested: Option<&Ingested>) {
        if let Some(i) = ingested
            && i.exact
            && i.root != self.base_root
        {
            let cache = LayerCache::new(home);
            let _ = cache.adopt_upper(&self.upper, &self.record.stack, &i.root);
        }
        let _ = remove_tree(&self.dir);
    }

    /// Removes the run directory without taking anything in.
    pub fn discard(self) {
        let _ = remove_tree(&self.dir);
    }
}
