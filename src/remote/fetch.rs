//! Bringing objects from a remote: the shared download walk, `avfs fetch` and `avfs clone`.
//!
//! Objects are fetched level by level (a tree, then what it names), grouped by pack, with
//! neighbouring ranges joined into one request; each is checked against its hash before
//! it is stored, and each pack's worth is committed on its own, so a killed fetch keeps
//! what it verified and a re-run asks only for the rest. Refs and checkpoints are written
//! last, in one transaction: a vault never points at what it does not hold or have the
//! promise of.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::path::Path;
use std::time::Instant;

use futures_util::StreamExt;
use serde::Serialize;

use super::objects as wire;
use super::pack::{ObjKind, decode_content, pack_key, verify};
use super::refs;
use super::transport::{Traffic, Transport};
use super::{Progress, catalog, commits};
use crate::error::{Error, Result};
use crate::store::objects::{CHUNK_SIZE, HOLE, Hash, Kind, Tree};
use crate::store::{Store, audit, meta_get, meta_set};

/// A vault that holds trees but fetches file contents on first read.
pub const LAZY_KEY: &str = "remote_lazy";
/// Set while a fetch of contents runs: if it is still set, the next fetch checks below
/// trees it already has (a killed fetch may have stored a tree before its files).
const FETCHING_KEY: &str = "remote_fetch_incomplete";

/// Ranges of one pack closer than this are read in one request.
const GAP: u64 = 1024 * 1024;

/// An object to fetch and where it lies in its pack.
type Wanted = (ObjKind, Hash, Range<u64>);

/// What a closure fetch brings: file contents too, and whether to look below trees
/// already here.
#[derive(Clone, Copy, Debug)]
pub struct Walk {
    pub contents: bool,
    pub deep: bool,
}

#[derive(Clone, Copy, Debug, Default, Serialize, schemars::JsonSchema)]
pub struct Fetched {
    pub objects: u64,
    pub bytes: u64,
}

/// Fetches `wanted` objects, verifies and stores each; returns the bytes of the trees,
/// contents and checkpoints among them (what a walk reads next).
fn fetch_objects(
    store: &mut Store,
    t: &Transport,
    remote: &str,
    wanted: &[(ObjKind, Hash)],
    got: &mut Fetched,
    progress: &dyn Progress,
) -> Result<Vec<(ObjKind, Hash, Vec<u8>)>> {
    let mut by_pack: HashMap<String, Vec<Wanted>> = HashMap::new();
    store.read(|db| {
        let cat = catalog::Catalog::load(db)?;
        for (kind, h) in wanted {
            let loc = cat
                .locate(h, *kind, Some(remote))
                .ok_or_else(|| Error::RemoteCorrupt {
                    remote: remote.to_string(),
                    what: format!("{} {}", kind.name(), h.to_hex()),
                    reason: "referenced, but no index of the remote lists it".into(),
                })?;
            by_pack.entry(loc.pack_name).or_default().push((
                *kind,
                *h,
                loc.offset..loc.offset + loc.length,
            ));
        }
        Ok(())
    })?;
    let jobs: Vec<(String, Vec<Wanted>)> = by_pack.into_iter().collect();
    // Two threads: one downloads and verifies (hashing a 16 MiB range takes a while, and
    // downloads in flight wait meanwhile, not the inserts), the other stores; a bounded
    // channel between them keeps memory to a few ranges.
    let (tx, rx) = std::sync::mpsc::sync_channel::<Downloaded>(2);
    let mut out = Vec::new();
    let mut stored: Result<()> = Ok(());
    let downloaded = std::thread::scope(|s| {
        let downloader = s.spawn(|| download(t, remote, &jobs, tx));
        for (items, bytes) in rx.iter() {
            stored = store.write(|db| {
                for ((kind, h, _), b) in items.iter().zip(&bytes) {
                    wire::insert(db, *kind, h, b)?;
                }
                Ok(())
            });
            if stored.is_err() {
                break;
            }
            for ((kind, h, _), b) in items.iter().zip(bytes) {
                got.objects += 1;
                got.bytes += b.len() as u64;
                progress.advance(b.len() as u64);
                if *kind != ObjKind::Chunk {
                    out.push((*kind, *h, b.to_vec()));
                }
            }
        }
        // Dropping the receiver stops a downloader whose objects can no longer be stored.
        drop(rx);
        downloader.join().expect("download thread")
    });
    // A failed download explains a stopped store better than the store's own error.
    downloaded?;
    stored?;
    Ok(out)
}

/// One pack's verified objects: where each lay, and its bytes.
type Downloaded = (Vec<Wanted>, Vec<bytes::Bytes>);

/// Downloads the objects of `jobs` (grouped by pack), four packs at once, verifies each
/// against its hash and hands them to `tx`; stops when the receiver is gone.
fn download(
    t: &Transport,
    remote: &str,
    jobs: &[(String, Vec<Wanted>)],
    tx: std::sync::mpsc::SyncSender<Downloaded>,
) -> Result<()> {
    t.run(async {
        let mut stream = futures_util::stream::iter(jobs.iter())
            .map(|(pack, items)| async move {
                let ranges: Vec<Range<u64>> = items.iter().map(|i| i.2.clone()).collect();
                let bytes = t.get_ranges(&pack_key(pack), &ranges, GAP, 4).await?;
                Ok::<_, Error>((pack, items, bytes))
            })
            .buffer_unordered(4);
        while let Some(r) = stream.next().await {
            let (pack, items, bytes) = r?;
            for ((kind, h, _), b) in items.iter().zip(&bytes) {
                verify(*kind, h, b).map_err(|reason| Error::RemoteCorrupt {
                    remote: remote.to_string(),
                    what: format!("{} {} in pack {}", kind.name(), h.to_hex(), &pack[..12]),
                    reason,
                })?;
            }
            if tx.send((items.clone(), bytes)).is_err() {
                break;
            }
        }
        Ok::<_, Error>(())
    })
}

/// Fetches the checkpoint objects of `heads` and their ancestry that are not here.
///
/// Walking the ancestry asks for one generation per round trip; so first every
/// checkpoint object the remote's indexes list that is not here comes in one round
/// (ranged GETs per pack, in parallel: checkpoints are small), and the walk only
/// checks, or fetches what an index did not list under this remote.
pub fn fetch_history(
    store: &mut Store,
    t: &Transport,
    remote: &str,
    heads: &[Hash],
    got: &mut Fetched,
    progress: &dyn Progress,
) -> Result<()> {
    let listed: Vec<(ObjKind, Hash)> = store.read(|db| {
        let cat = catalog::Catalog::load(db)?;
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        for (h, kind, _, _) in cat.objects(Some(remote)) {
            if kind == ObjKind::Checkpoint && seen.insert(h) && !wire::has(db, kind, &h)? {
                out.push((kind, h));
            }
        }
        Ok(out)
    })?;
    if !listed.is_empty() {
        fetch_objects(store, t, remote, &listed, got, progress)?;
    }
    loop {
        let missing = store.read(|db| commits::missing_ancestry(db, heads))?;
        if missing.is_empty() {
            return Ok(());
        }
        let wanted: Vec<(ObjKind, Hash)> = missing
            .into_iter()
            .map(|h| (ObjKind::Checkpoint, h))
            .collect();
        fetch_objects(store, t, remote, &wanted, got, progress)?;
    }
}

/// Fetches the trees below `roots` (and, with `contents`, every file's chunks) that are
/// not here. With `deep`, trees already here are looked into too (after a killed fetch,
/// or to fill a lazy vault).
pub fn fetch_closure(
    store: &mut Store,
    t: &Transport,
    remote: &str,
    roots: &[Hash],
    walk: Walk,
    got: &mut Fetched,
    progress: &dyn Progress,
) -> Result<()> {
    let Walk { contents, deep } = walk;
    let mut seen: HashSet<Hash> = HashSet::new();
    // Chunks are leaves: nothing is read from them, so they wait until the walk is done
    // and then come in one pass over each pack (a range per pack, not one per level).
    let mut chunks: Vec<(ObjKind, Hash)> = Vec::new();
    // Trees (and contents) to look into that are here already.
    let mut local: Vec<(ObjKind, Hash)> = Vec::new();
    let mut level: Vec<(ObjKind, Hash)> = Vec::new();
    let classify = |db: &rusqlite::Connection,
                    kind: ObjKind,
                    h: Hash,
                    seen: &mut HashSet<Hash>,
                    level: &mut Vec<(ObjKind, Hash)>,
                    local: &mut Vec<(ObjKind, Hash)>|
     -> Result<()> {
        if h == HOLE || !seen.insert(h) {
            return Ok(());
        }
        if !wire::has(db, kind, &h)? {
            level.push((kind, h));
        } else if deep && kind != ObjKind::Chunk {
            local.push((kind, h));
        }
        Ok(())
    };
    store.read(|db| {
        for r in roots {
            classify(db, ObjKind::Tree, *r, &mut seen, &mut level, &mut local)?;
        }
        Ok(())
    })?;
    while !level.is_empty() || !local.is_empty() {
        let (leaves, inner): (Vec<_>, Vec<_>) =
            level.into_iter().partition(|(k, _)| *k == ObjKind::Chunk);
        chunks.extend(leaves);
        let mut read: Vec<(ObjKind, Hash, Vec<u8>)> = Vec::new();
        if !inner.is_empty() {
            read = fetch_objects(store, t, remote, &inner, got, progress)?;
        }
        let here = std::mem::take(&mut local);
        let mut next = Vec::new();
        store.read(|db| {
            for (kind, h) in here {
                read.push((kind, h, wire::read(db, kind, &h)?));
            }
            for (kind, _, data) in &read {
                match kind {
                    ObjKind::Tree => {
                        let tree = Tree::decode(data).map_err(Error::Internal)?;
                        for e in tree.entries {
                            match (e.kind, e.hash) {
                                (Kind::Dir, Some(sub)) => classify(
                                    db,
                                    ObjKind::Tree,
                                    sub,
                                    &mut seen,
                                    &mut next,
                                    &mut local,
                                )?,
                                (Kind::File, Some(c)) if contents => {
                                    let kind = if e.size as usize <= CHUNK_SIZE {
                                        ObjKind::Chunk
                                    } else {
                                        ObjKind::Content
                                    };
                                    classify(db, kind, c, &mut seen, &mut next, &mut local)?;
                                }
                                _ => {}
                            }
                        }
                    }
                    ObjKind::Content => {
                        let (_, chunks) = decode_content(data).map_err(Error::Internal)?;
                        for c in chunks {
                            classify(db, ObjKind::Chunk, c, &mut seen, &mut next, &mut local)?;
                        }
                    }
                    _ => {}
                }
            }
            Ok(())
        })?;
        level = next;
    }
    if !chunks.is_empty() {
        fetch_objects(store, t, remote, &chunks, got, progress)?;
    }
    Ok(())
}

/// Brings what checking out trees `roots` needs: in a lazy vault their root listings
/// only (the rest comes on first read, see `lazy`); otherwise every listing and file
/// below them that is not here (with `deep`, looking below listings already here too:
/// after a killed fetch, or to fill a lazy vault). Clone, fetch and `vault fork
/// --remote` all check out this way.
#[allow(clippy::too_many_arguments)]
pub fn fetch_trees(
    store: &mut Store,
    t: &Transport,
    remote: &str,
    roots: &[Hash],
    lazy: bool,
    deep: bool,
    got: &mut Fetched,
    progress: &dyn Progress,
) -> Result<()> {
    if !lazy {
        let walk = Walk {
            contents: true,
            deep,
        };
        return fetch_closure(store, t, remote, roots, walk, got, progress);
    }
    let missing: Vec<(ObjKind, Hash)> = store.read(|db| {
        let mut out = Vec::new();
        for r in roots {
            if *r != HOLE
                && !out.contains(&(ObjKind::Tree, *r))
                && !wire::has(db, ObjKind::Tree, r)?
            {
                out.push((ObjKind::Tree, *r));
            }
        }
        Ok(out)
    })?;
    if !missing.is_empty() {
        fetch_objects(store, t, remote, &missing, got, progress)?;
    }
    Ok(())
}

#[derive(Clone, Debug, Serialize)]
pub struct RefSeen {
    pub workspace: String,
    pub checkpoint: String,
    pub head: String,
    /// Where this vault last saw it (hex), if it had.
    pub previous: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct FetchReport {
    pub remote: String,
    pub url: String,
    pub refs: Vec<RefSeen>,
    /// True when file contents were left on the remote, to be read on first use.
    pub lazy: bool,
    pub fetched: Fetched,
    pub traffic: Traffic,
    pub seconds: f64,
}

/// `avfs fetch`: reads the remote's refs, fetches their checkpoints and trees (and, in a
/// vault that is not lazy, or with `full`, the file contents), and remembers the refs.
pub fn fetch(
    home: &Path,
    vault: &Path,
    remote: &str,
    full: bool,
    progress: &dyn Progress,
) -> Result<FetchReport> {
    let started = Instant::now();
    let mut store = Store::open(vault)?;
    let (remote, url) = store.read(|db| super::remote_url(db, remote))?;
    let t = super::open_transport(home, &remote, &url)?;
    let before = t.traffic();
    progress.phase("reading the remote's indexes", None);
    catalog::sync(&mut store, &t, &remote)?;
    let remote_refs = t.run(refs::list(&t))?;
    let lazy = store.read(|db| Ok(meta_get(db, LAZY_KEY)?.unwrap_or(0) == 1))? && !full;
    let heads: Vec<Hash> = remote_refs
        .iter()
        .map(|(n, r)| {
            r.head_hash().map_err(|reason| Error::RemoteCorrupt {
                remote: remote.clone(),
                what: format!("ref {n}"),
                reason,
            })
        })
        .collect::<Result<_>>()?;
    let mut got = Fetched::default();
    progress.phase("fetching", None);
    fetch_history(&mut store, &t, &remote, &heads, &mut got, progress)?;
    // The roots to bring: every checkpoint of the refs' histories (a full vault keeps its
    // history whole); a lazy vault takes the root trees of the heads only.
    let mut roots = Vec::new();
    store.read(|db| {
        if lazy {
            for h in &heads {
                roots.push(commits::load(db, h)?.map(|o| o.root).unwrap_or(HOLE));
            }
        } else {
            let mut seen = HashSet::new();
            let mut stack = heads.clone();
            while let Some(h) = stack.pop() {
                if !seen.insert(h) {
                    continue;
                }
                if let Some(o) = commits::load(db, &h)? {
                    roots.push(o.root);
                    stack.extend(o.parents);
                }
            }
        }
        Ok(())
    })?;
    if full {
        // Everything this vault references too: a lazy vault becomes complete.
        store.read(|db| {
            let mut st =
                db.prepare("SELECT base_root FROM workspace UNION SELECT root FROM checkpoint")?;
            let rows = st.query_map([], |r| r.get::<_, Vec<u8>>(0))?;
            for r in rows {
                roots.push(Hash::from_slice(&r?)?);
            }
            Ok(())
        })?;
    }
    let deep = full || store.read(|db| Ok(meta_get(db, FETCHING_KEY)?.unwrap_or(0) == 1))?;
    if !lazy {
        store.write(|db| meta_set(db, FETCHING_KEY, 1))?;
    }
    fetch_trees(
        &mut store, &t, &remote, &roots, lazy, deep, &mut got, progress,
    )?;
    let mut seen_refs = Vec::new();
    store.write(|db| {
        let previous: HashMap<String, Hash> = refs::remembered(db, &remote)?.into_iter().collect();
        for ((name, r), head) in remote_refs.iter().zip(&heads) {
            seen_refs.push(RefSeen {
                workspace: name.clone(),
                checkpoint: r.checkpoint.clone(),
                head: head.to_hex(),
                previous: previous.get(name).map(|h| h.to_hex()),
            });
            refs::remember(db, &remote, name, head)?;
        }
        if !lazy {
            meta_set(db, FETCHING_KEY, 0)?;
        }
        if full {
            meta_set(db, LAZY_KEY, 0)?;
        }
        audit::append(
            db,
            None,
            audit::cli_actor(),
            "remote.fetch",
            &serde_json::json!({"remote": remote, "url": url, "refs": seen_refs.len(), "objects": got.objects, "lazy": lazy}),
        )?;
        Ok(())
    })?;
    Ok(FetchReport {
        remote,
        url,
        refs: seen_refs,
        lazy,
        fetched: got,
        traffic: t.traffic() - before,
        seconds: started.elapsed().as_secs_f64(),
    })
}

#[derive(Clone, Debug, Serialize)]
pub struct CloneReport {
    pub url: String,
    pub path: std::path::PathBuf,
    pub workspace: String,
    pub checkpoint: String,
    pub head: String,
    pub lazy: bool,
    /// True when this run finished a clone an earlier, interrupted run began.
    pub resumed: bool,
    pub fetched: Fetched,
    pub traffic: Traffic,
    pub seconds: f64,
}

pub struct CloneOptions<'a> {
    pub url: &'a str,
    pub dest: &'a Path,
    /// The remote workspace (ref) to clone.
    pub workspace: &'a str,
    pub checkpoint: Option<&'a str>,
    pub full: bool,
}

/// Set in a vault while `avfs clone` fills it; a clone finding it resumes.
const CLONING_KEY: &str = "remote_clone_incomplete";

/// `avfs clone`: a new vault file at `dest` holding workspace `main` at the remote's
/// checkpoint. Lazy unless `full`: checkpoints and trees first, contents on first read.
/// The report of a clone that finished in an earlier run, from its vault: the workspace
/// it made, the head it remembered. None when the vault holds no finished clone of
/// `o.workspace`.
fn finished_clone(
    s: &mut Store,
    o: &CloneOptions,
    remote: &str,
    started: Instant,
) -> Result<Option<CloneReport>> {
    s.read(|db| {
        let Some((_, head)) = refs::remembered(db, remote)?
            .into_iter()
            .find(|(w, _)| w == o.workspace)
        else {
            return Ok(None);
        };
        let Ok(ws) = crate::workspace::Workspace::open(db, crate::workspace::MAIN) else {
            return Ok(None);
        };
        let Some(cp) = ws.head()? else {
            return Ok(None);
        };
        Ok(Some(CloneReport {
            url: o.url.to_string(),
            path: o.dest.to_path_buf(),
            workspace: o.workspace.to_string(),
            checkpoint: cp.name,
            head: head.to_hex(),
            lazy: meta_get(db, LAZY_KEY)?.unwrap_or(0) == 1,
            resumed: true,
            fetched: Fetched::default(),
            traffic: Traffic::default(),
            seconds: started.elapsed().as_secs_f64(),
        }))
    })
}

pub fn clone(home: &Path, o: &CloneOptions, progress: &dyn Progress) -> Result<CloneReport> {
    let started = Instant::now();
    super::config::parse_url(o.url)?;
    let remote = super::ORIGIN.to_string();
    let (mut store, resumed) = if o.dest.exists() {
        let mut s = Store::open(o.dest)?;
        let pending = s.read(|db| Ok(meta_get(db, CLONING_KEY)?.unwrap_or(0) == 1))?;
        let same = s
            .read(|db| super::remote_url(db, &remote))
            .map(|(_, u)| u == o.url)
            .unwrap_or(false);
        if same && !pending {
            // A clone of this URL that finished but was never registered (killed between
            // its last commit and the registry): whole as it is, taken as it is.
            if let Some(r) = finished_clone(&mut s, o, &remote, started)? {
                return Ok(r);
            }
        }
        if !(pending && same) {
            return Err(Error::Exists(o.dest.display().to_string()));
        }
        (s, true)
    } else {
        let s = Store::create_with(o.dest, |db| {
            meta_set(db, CLONING_KEY, 1)?;
            super::add_remote_row(db, &remote, o.url)?;
            Ok(())
        })?;
        (s, false)
    };
    let t = super::open_transport(home, &remote, o.url)?;
    let before = t.traffic();
    progress.phase("reading the remote's indexes", None);
    catalog::sync(&mut store, &t, &remote)?;
    let (r, _) = t.run(refs::read(&t, o.workspace))?.ok_or_else(|| {
        let have = t
            .run(refs::list(&t))
            .map(|l| l.into_iter().map(|(n, _)| n).collect::<Vec<_>>().join(", "))
            .unwrap_or_default();
        Error::Remote {
            remote: o.url.to_string(),
            message: if have.is_empty() {
                "it has no workspaces yet (push one first)".into()
            } else {
                format!(
                    "it has no workspace {:?} (it has: {have}); choose one with --workspace",
                    o.workspace
                )
            },
        }
    })?;
    let head = r.head_hash().map_err(|reason| Error::RemoteCorrupt {
        remote: remote.clone(),
        what: format!("ref {}", o.workspace),
        reason,
    })?;
    let mut got = Fetched::default();
    progress.phase("fetching", None);
    fetch_history(&mut store, &t, &remote, &[head], &mut got, progress)?;
    let target = match o.checkpoint {
        None => head,
        Some(name) => store
            .read(|db| commits::find_named(db, &head, name))?
            .ok_or_else(|| {
                Error::NoSuchCheckpoint(format!(
                    "{name} (in {}'s history on the remote)",
                    o.workspace
                ))
            })?,
    };
    let obj = store
        .read(|db| commits::load(db, &target))?
        .ok_or_else(|| Error::Internal("checkpoint object not fetched".into()))?;
    let lazy = !o.full;
    fetch_trees(
        &mut store,
        &t,
        &remote,
        &[obj.root],
        lazy,
        resumed,
        &mut got,
        progress,
    )?;
    store.write(|db| {
        let info = crate::workspace::create_workspace(db, crate::workspace::MAIN, Some(obj.root), None)?;
        let id = commits::import(db, info.id, &target, &remote)?;
        db.execute("UPDATE workspace SET head = ?1 WHERE id = ?2", rusqlite::params![id, info.id])?;
        refs::remember(db, &remote, o.workspace, &head)?;
        meta_set(db, LAZY_KEY, lazy as i64)?;
        meta_set(db, CLONING_KEY, 0)?;
        audit::append(
            db,
            Some(crate::workspace::MAIN),
            audit::cli_actor(),
            "remote.clone",
            &serde_json::json!({"url": o.url, "workspace": o.workspace, "checkpoint": obj.name, "lazy": lazy}),
        )?;
        Ok(())
    })?;
    Ok(CloneReport {
        url: o.url.to_string(),
        path: o.dest.to_path_buf(),
        workspace: o.workspace.to_string(),
        checkpoint: obj.name,
        head: target.to_hex(),
        lazy,
        resumed,
        fetched: got,
        traffic: t.traffic() - before,
        seconds: started.elapsed().as_secs_f64(),
    })
}
