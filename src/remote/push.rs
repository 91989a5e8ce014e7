//! `avfs push`: uploads what the remote lacks, then moves its refs with conditional writes.
//!
//! Order is what makes it safe: packs first, each pack's index after its pack, indexes
//! in the order the packs were cut (a tree's objects always go in the same or an earlier
//! pack than the tree), and the refs last. So an index on the remote means its pack is
//! whole, a tree listed in an index means everything below it is listed too (the next
//! push skips the whole subtree), and a ref never names what is not there. A push killed
//! at any point leaves at most packs no index names (garbage for `remote gc`); run again,
//! it reads the indexes that did arrive and sends only the rest.

use std::collections::HashSet;
use std::time::Instant;

use bytes::Bytes;
use futures_util::StreamExt;
use rusqlite::Connection;
use serde::Serialize;

use super::commits;
use super::objects as wire;
use super::pack::{Finished, ObjKind, PACK_TARGET, PackBuilder, index_key, pack_key};
use super::refs::{self, RemoteRef, Written};
use super::transport::{Traffic, Transport};
use super::{Progress, catalog};
use crate::error::{Error, Result};
use crate::store::objects::{CHUNK_SIZE, HOLE, Hash, Kind, Tree};
use crate::store::{Store, audit};
use crate::workspace::{Workspace, list_workspaces};

/// What to push.
#[derive(Clone, Debug)]
pub enum Target {
    /// The current workspace's head checkpoint.
    Head,
    /// A checkpoint of the current workspace (its ref moves there).
    Checkpoint(String),
    /// Another workspace's head.
    Workspace(String),
    /// Every workspace that has a checkpoint.
    All,
}

/// What became of one ref.
#[derive(Clone, Copy, Debug, Serialize, schemars::JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RefStatus {
    /// The remote had no ref for the workspace; it has one now.
    Created,
    /// The ref moved from `old` to `new`.
    Updated,
    /// The ref was already at `new`; nothing was written.
    UpToDate,
    /// The store accepted the write, but the ref read back afterwards is not what this
    /// push wrote: another push won a race the store did not arbitrate. Nothing uploaded
    /// is lost; pull, then push again.
    LostRace,
}

#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct RefUpdate {
    pub workspace: String,
    /// The checkpoint pushed (its name).
    pub checkpoint: String,
    /// The remote's head before (checkpoint object hash), if it had one.
    pub old: Option<String>,
    /// The head this push wrote (checkpoint object hash).
    pub new: String,
    pub status: RefStatus,
    /// Only with `lost_race`: the head the ref holds instead (absent too when the ref
    /// was gone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub found: Option<String>,
}

/// `push --json`.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct PushReport {
    pub remote: String,
    pub url: String,
    pub refs: Vec<RefUpdate>,
    /// Only when this push probed the store's conditional writes (the first ref update
    /// to a remote, or after its URL changed): what it found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe: Option<super::probe::ConditionalWrites>,
    pub packs: u64,
    pub objects: u64,
    /// Bytes of the packs and indexes sent.
    pub bytes: u64,
    /// Requests and bytes this push sent, the probe's included.
    pub traffic: Traffic,
    pub seconds: f64,
    /// Workspaces whose live state has changes no checkpoint holds (not pushed).
    pub unsaved_changes: Vec<String>,
}

struct Plan {
    workspace: String,
    checkpoint: String,
    head: Hash,
    root: Hash,
}

fn resolve(db: &Connection, current: &str, target: &Target) -> Result<(Vec<Plan>, Vec<String>)> {
    let names: Vec<String> = match target {
        Target::Head | Target::Checkpoint(_) => vec![current.to_string()],
        Target::Workspace(w) => vec![w.clone()],
        Target::All => list_workspaces(db)?.into_iter().map(|w| w.name).collect(),
    };
    let mut plans = Vec::new();
    let mut unsaved = Vec::new();
    for name in names {
        let mut ws = Workspace::open(db, &name)?;
        let cp = match target {
            Target::Checkpoint(c) => ws.find_checkpoint(c)?,
            _ => match ws.head()? {
                Some(h) => h,
                None if matches!(target, Target::All) => continue,
                None => {
                    return Err(Error::Refused(format!(
                        "workspace {name} has no checkpoint to push; save one first (`avfs checkpoint save`)"
                    )));
                }
            },
        };
        if !matches!(target, Target::Checkpoint(_)) && ws.is_modified()? {
            unsaved.push(name.clone());
        }
        let head = commits::object_for(db, cp.id)?;
        plans.push(Plan {
            workspace: name,
            checkpoint: cp.name,
            head,
            root: cp.root,
        });
    }
    Ok((plans, unsaved))
}

/// Cuts packs from objects in the order they are added (children before parents).
struct Packer<'a> {
    db: &'a Connection,
    remote: &'a str,
    /// The remote's indexes as synced before the walk.
    catalog: catalog::Catalog,
    data: PackBuilder,
    meta: PackBuilder,
    sent: HashSet<Hash>,
    out: tokio::sync::mpsc::Sender<Finished>,
    objects: u64,
    progress: &'a dyn Progress,
}

impl Packer<'_> {
    /// Already on the remote (its indexes say so) or already in a pack of this push.
    fn skip(&self, h: &Hash) -> Result<bool> {
        Ok(self.sent.contains(h) || self.catalog.known(self.remote, h))
    }

    fn ship(&mut self, f: Finished) -> Result<()> {
        self.out
            .blocking_send(f)
            .map_err(|_| Error::Internal("the upload stopped".into()))
    }

    fn add(&mut self, kind: ObjKind, h: Hash, bytes: &[u8]) -> Result<()> {
        self.sent.insert(h);
        self.objects += 1;
        self.progress.advance(bytes.len() as u64);
        if kind == ObjKind::Chunk {
            self.data.add(kind, &h, bytes);
            if self.data.len() >= PACK_TARGET {
                let f = self.data.finish();
                self.ship(f)?;
            }
        } else {
            self.meta.add(kind, &h, bytes);
            if self.meta.len() >= PACK_TARGET {
                self.flush()?;
            }
        }
        Ok(())
    }

    /// Ships the data pack before the metadata pack, so trees follow their chunks.
    fn flush(&mut self) -> Result<()> {
        if !self.data.is_empty() {
            let f = self.data.finish();
            self.ship(f)?;
        }
        if !self.meta.is_empty() {
            let f = self.meta.finish();
            self.ship(f)?;
        }
        Ok(())
    }

    fn file(&mut self, hash: Hash, size: u64) -> Result<()> {
        if hash == HOLE || self.skip(&hash)? {
            return Ok(());
        }
        if size as usize <= CHUNK_SIZE {
            let d = wire::read(self.db, ObjKind::Chunk, &hash)?;
            return self.add(ObjKind::Chunk, hash, &d);
        }
        let content = wire::read(self.db, ObjKind::Content, &hash)?;
        let (_, chunks) = super::pack::decode_content(&content).map_err(Error::Internal)?;
        for c in chunks {
            if c != HOLE && !self.skip(&c)? {
                let d = wire::read(self.db, ObjKind::Chunk, &c)?;
                self.add(ObjKind::Chunk, c, &d)?;
            }
        }
        self.add(ObjKind::Content, hash, &content)
    }

    /// Sends a tree and everything below it the remote lacks, children first. A subtree
    /// the remote has is skipped whole.
    fn tree(&mut self, root: Hash) -> Result<()> {
        let mut stack: Vec<(Hash, Option<Vec<u8>>)> = vec![(root, None)];
        while let Some((h, done)) = stack.pop() {
            if let Some(bytes) = done {
                if !self.sent.contains(&h) {
                    self.add(ObjKind::Tree, h, &bytes)?;
                }
                continue;
            }
            if self.skip(&h)? {
                continue;
            }
            let bytes = wire::read(self.db, ObjKind::Tree, &h)?;
            let tree = Tree::decode(&bytes).map_err(|reason| Error::Corrupt {
                path: Default::default(),
                reason,
            })?;
            stack.push((h, Some(bytes)));
            for e in tree.entries {
                match (e.kind, e.hash) {
                    (Kind::Dir, Some(sub)) => stack.push((sub, None)),
                    (Kind::File, Some(c)) => self.file(c, e.size)?,
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// A checkpoint's history the remote lacks, parents before children (so a listed
    /// checkpoint always has its parents listed), each after its tree.
    fn history(&mut self, head: Hash) -> Result<()> {
        let mut seen = HashSet::new();
        let mut stack: Vec<(Hash, bool)> = vec![(head, false)];
        while let Some((h, expanded)) = stack.pop() {
            if expanded {
                let o = commits::load(self.db, &h)?.ok_or_else(|| {
                    Error::Internal(format!("checkpoint object {} missing", h.to_hex()))
                })?;
                self.tree(o.root)?;
                let raw = commits::raw(self.db, &h)?;
                self.add(ObjKind::Checkpoint, h, &raw)?;
                continue;
            }
            if !seen.insert(h) || self.skip(&h)? {
                continue;
            }
            let o = commits::load(self.db, &h)?.ok_or_else(|| {
                Error::Internal(format!("checkpoint object {} missing", h.to_hex()))
            })?;
            stack.push((h, true));
            for p in o.parents {
                stack.push((p, false));
            }
        }
        Ok(())
    }
}

/// Uploads packs (a few at once) and their indexes (one at a time, in order).
async fn upload(
    t: &Transport,
    rx: tokio::sync::mpsc::Receiver<Finished>,
) -> Result<Vec<(String, String, Vec<super::pack::IndexEntry>, u64)>> {
    let stream =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|f| (f, rx)) });
    let mut done = Vec::new();
    let uploads = stream
        .map(|f| async move {
            let data = Bytes::from(f.data);
            let n = data.len() as u64;
            t.put(&pack_key(&f.name), data).await?;
            Ok::<_, Error>((f.name, f.index_name, f.index, f.entries, n))
        })
        .buffered(3);
    let mut uploads = std::pin::pin!(uploads);
    while let Some(r) = uploads.next().await {
        let (name, index_name, index, entries, n) = r?;
        let ilen = index.len() as u64;
        t.put(&index_key(&index_name), Bytes::from(index)).await?;
        done.push((index_name, name, entries, n + ilen));
    }
    Ok(done)
}

pub fn push(
    home: &std::path::Path,
    vault: &std::path::Path,
    remote: &str,
    current: &str,
    target: &Target,
    progress: &dyn Progress,
) -> Result<PushReport> {
    let started = Instant::now();
    let mut store = Store::open(vault)?;
    let (remote, url) = store.read(|db| super::remote_url(db, remote))?;
    let t = super::open_transport(home, &remote, &url)?;
    let before = t.traffic();
    let (plans, unsaved) = store.write(|db| resolve(db, current, target))?;
    progress.phase("reading the remote's indexes", None);
    catalog::sync(&mut store, &t, &remote)?;

    // Where the remote's refs are now, and whether each push is a fast-forward.
    let mut current_refs = Vec::new();
    for p in &plans {
        let got = t.run(refs::read(&t, &p.workspace))?;
        if let Some((r, _)) = &got {
            let old = r.head_hash().map_err(|reason| Error::RemoteCorrupt {
                remote: remote.clone(),
                what: format!("ref {}", p.workspace),
                reason,
            })?;
            let ff = old == p.head || store.read(|db| commits::is_ancestor(db, &old, &p.head))?;
            if !ff {
                return Err(Error::PushRejected {
                    remote: remote.clone(),
                    workspace: p.workspace.clone(),
                });
            }
        }
        current_refs.push(got);
    }
    // Before anything moves (or is uploaded for nothing): may this store move refs?
    let moves = plans.iter().zip(&current_refs).any(|(p, got)| {
        got.as_ref()
            .is_none_or(|(r, _)| r.head_hash().ok() != Some(p.head))
    });
    let probe = if moves {
        super::probe::ensure(&mut store, &t, &remote, &url)?
    } else {
        None
    };

    // Send what the remote lacks.
    progress.phase("uploading", None);
    let (tx, rx) = tokio::sync::mpsc::channel::<Finished>(2);
    let (walked, uploaded) = std::thread::scope(|s| {
        let up = s.spawn(|| t.run(upload(&t, rx)));
        let walked = store.read(|db| {
            let mut p = Packer {
                db,
                remote: &remote,
                catalog: catalog::Catalog::load(db)?,
                data: PackBuilder::default(),
                meta: PackBuilder::default(),
                sent: HashSet::new(),
                out: tx,
                objects: 0,
                progress,
            };
            for plan in &plans {
                p.history(plan.head)?;
            }
            p.flush()?;
            Ok(p.objects)
            // `p` (and the sender) drops here, which ends the upload stream.
        });
        let uploaded = up.join().expect("upload thread");
        (walked, uploaded)
    });
    // An upload error explains a stopped walk better than the walk's own error.
    let uploaded = uploaded?;
    let objects = walked?;
    let packs = uploaded.len() as u64;
    let bytes: u64 = uploaded.iter().map(|u| u.3).sum();
    store.write(|db| {
        for (index_name, pack_name, entries, _) in &uploaded {
            catalog::record(db, &remote, index_name, pack_name, entries)?;
        }
        Ok(())
    })?;

    // Move the refs: each only from the version read above.
    progress.phase("moving refs", None);
    let mut updates = Vec::new();
    for (p, got) in plans.iter().zip(current_refs) {
        let old = got.as_ref().and_then(|(r, _)| r.head_hash().ok());
        let mut update = RefUpdate {
            workspace: p.workspace.clone(),
            checkpoint: p.checkpoint.clone(),
            old: old.map(|h| h.to_hex()),
            new: p.head.to_hex(),
            status: RefStatus::UpToDate,
            found: None,
        };
        if old == Some(p.head) {
            updates.push(update);
            continue;
        }
        let new = RemoteRef::new(&p.head, &p.root, &p.checkpoint);
        let written = t.run(refs::write_verified(
            &t,
            &p.workspace,
            &new,
            got.as_ref().map(|(_, tag)| tag.as_str()),
        ))?;
        update.status = match written {
            Written::Conflict => {
                return Err(Error::PushRejected {
                    remote: remote.clone(),
                    workspace: p.workspace.clone(),
                });
            }
            Written::Lost(found) => {
                update.found = found.map(|r| r.head);
                RefStatus::LostRace
            }
            Written::Held if old.is_some() => RefStatus::Updated,
            Written::Held => RefStatus::Created,
        };
        updates.push(update);
    }
    store.write(|db| {
        for u in updates.iter().filter(|u| u.status != RefStatus::LostRace) {
            refs::remember(db, &remote, &u.workspace, &refs::parse_hash(&u.new).map_err(Error::Internal)?)?;
        }
        audit::append(
            db,
            Some(current),
            audit::cli_actor(),
            "remote.push",
            &serde_json::json!({"remote": remote, "url": url, "refs": updates, "packs": packs, "objects": objects}),
        )?;
        Ok(())
    })?;
    Ok(PushReport {
        remote,
        url,
        refs: updates,
        probe,
        packs,
        objects,
        bytes,
        traffic: t.traffic() - before,
        seconds: started.elapsed().as_secs_f64(),
        unsaved_changes: unsaved,
    })
}
