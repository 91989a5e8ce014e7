//! The layer cache: read-only materializations of workspace roots, stacked as overlayfs
//! lower layers (Docker's overlay2 driver keeps images the same way).
//!
//! ```text
//! $AVFS_HOME/layers/<id>/tree/        the layer's files
//! $AVFS_HOME/layers/<id>/layer.json   {root, below, depth, bytes, ...}
//! $AVFS_HOME/layers/roots/<root>      symlink to the layer whose stack shows <root>
//! ```
//!
//! A layer is immutable once in place, and is only a cache: any stack can be rebuilt from
//! the vault. A root is reached from the nearest cached root by writing only the tree
//! diff as a new layer; a run's upper directory becomes the layer of the root it produced;
//! stacks deeper than `MAX_DEPTH` are squashed into one diff over their full bottom layer.
//! Layers are content-addressed by the root they show, so forks and vaults share them.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rusqlite::Connection;
use serde::{Deserialize, Serialize};

use super::materialize::{Writer, remove_tree};
use crate::error::{Error, Result};
use crate::store::objects::{Hash, Kind, get_tree};

/// Stacks deeper than this are squashed before a run uses them: every lookup that misses
/// (a compiler probing include paths) visits every layer.
pub const MAX_DEPTH: u32 = 8;

/// A diff larger than this many changed entries (or than a quarter of the tree) is
/// written as a full layer instead.
const DIFF_LIMIT: u64 = 20_000;

/// Unreferenced layers younger than this are left alone by trimming: a builder may be
/// between placing its layer and pointing a root at it.
const GRACE: Duration = Duration::from_secs(120);

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LayerInfo {
    pub id: String,
    /// The root this layer's stack shows.
    pub root: String,
    /// The layer below (None: a full layer, the bottom of its stack).
    pub below: Option<String>,
    pub depth: u32,
    /// Bytes of file content written into this layer (its own, not its stack's).
    pub bytes: u64,
    pub files: u64,
    pub created_ns: i64,
}

/// A stack of layers, top first: what overlayfs takes as `lowerdir`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Stack {
    pub root: String,
    /// Layer ids, top first.
    pub layers: Vec<String>,
    /// Their `tree/` directories, top first.
    pub dirs: Vec<PathBuf>,
    /// How the stack was reached for this run: "cached", "diff", "full", "squashed"
    /// (and, for a kept overlay, "kept" or "remounted": `engine::kept`).
    pub how: String,
    /// Entries written to reach it (0 when cached).
    pub written: u64,
}

pub struct LayerCache {
    pub dir: PathBuf,
}

fn host_err(p: &Path, e: io::Error) -> Error {
    Error::host(p.display(), e)
}

fn unique(prefix: &str) -> String {
    let mut b = [0u8; 6];
    let _ = getrandom(&mut b);
    let n: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{prefix}{}-{n}", std::process::id())
}

fn getrandom(buf: &mut [u8]) -> io::Result<()> {
    // SAFETY: fills our own buffer.
    let r = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl LayerCache {
    pub fn new(home: &Path) -> LayerCache {
        LayerCache {
            dir: home.join("layers"),
        }
    }

    /// Creates the cache directories: only their owner can enter them, so a file of a
    /// layer (a setuid program, say) is never reachable by other users of the host.
    pub fn ensure(&self) -> Result<()> {
        let roots = self.dir.join("roots");
        if !roots.is_dir() {
            fs::create_dir_all(&roots).map_err(|e| host_err(&roots, e))?;
        }
        let _ = fs::set_permissions(&self.dir, fs::Permissions::from_mode(0o700));
        Ok(())
    }

    fn root_link(&self, root: &Hash) -> PathBuf {
        self.dir.join("roots").join(root.to_hex())
    }

    pub fn info(&self, id: &str) -> Option<LayerInfo> {
        let text = fs::read(self.dir.join(id).join("layer.json")).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// The intact stack cached for `root`, if any.
    pub fn cached(&self, root: &Hash) -> Option<Stack> {
        let top = fs::read_link(self.root_link(root)).ok()?;
        let top = top.file_name()?.to_str()?.to_string();
        self.stack_from(&top, "cached", 0)
    }

    fn stack_from(&self, top: &str, how: &str, written: u64) -> Option<Stack> {
        let mut layers = vec![];
        let mut dirs = vec![];
        let mut cur = Some(top.to_string());
        let mut root = None;
        while let Some(id) = cur {
            let info = self.info(&id)?;
            let tree = self.dir.join(&id).join("tree");
            if !tree.is_dir() || layers.len() > 64 {
                return None;
            }
            root.get_or_insert(info.root.clone());
            layers.push(id);
            dirs.push(tree);
            cur = info.below;
        }
        Some(Stack {
            root: root?,
            layers,
            dirs,
            how: how.into(),
            written,
        })
    }

    /// Points `root` at layer `id` (atomically; the last writer wins).
    fn point(&self, root: &Hash, id: &str) -> Result<()> {
        let tmp = self.dir.join("roots").join(unique(".tmp-"));
        std::os::unix::fs::symlink(Path::new("..").join(id), &tmp)
            .map_err(|e| host_err(&tmp, e))?;
        let link = self.root_link(root);
        fs::rename(&tmp, &link).map_err(|e| host_err(&link, e))
    }

    /// Moves a filled layer directory (`<tmp>/tree`) into place as a new layer.
    fn place(&self, tmp: &Path, mut info: LayerInfo) -> Result<String> {
        let id = unique(&format!("{}-", &info.root[..16]));
        info.id = id.clone();
        let json = serde_json::to_vec_pretty(&info).expect("layer info serializes");
        let meta = tmp.join("layer.json");
        fs::write(&meta, json).map_err(|e| host_err(&meta, e))?;
        let dest = self.dir.join(&id);
        fs::rename(tmp, &dest).map_err(|e| host_err(&dest, e))?;
        Ok(id)
    }

    fn new_tmp(&self) -> Result<PathBuf> {
        self.ensure()?;
        let tmp = self.dir.join(unique(".build-"));
        fs::create_dir_all(tmp.join("tree")).map_err(|e| host_err(&tmp, e))?;
        Ok(tmp)
    }

    /// Writes `root` whole as a new bottom layer.
    fn build_full(&self, db: &Connection, root: &Hash) -> Result<Stack> {
        let tmp = self.new_tmp()?;
        let mut w = Writer::new(db);
        let r = w.full(root, &tmp.join("tree"));
        if let Err(e) = r {
            let _ = remove_tree(&tmp);
            return Err(e);
        }
        let id = self.place(
            &tmp,
            LayerInfo {
                id: String::new(),
                root: root.to_hex(),
                below: None,
                depth: 1,
                bytes: w.stats.bytes,
                files: w.stats.files,
                created_ns: crate::store::now_ns(),
            },
        )?;
        self.point(root, &id)?;
        let n = w.stats.files + w.stats.dirs;
        self.stack_from(&id, "full", n)
            .ok_or_else(|| Error::Internal("a new layer vanished".into()))
    }

    /// Writes the difference `from -> to` as a layer on top of `below` (a stack of `from`).
    fn build_diff(
        &self,
        db: &Connection,
        below: &Stack,
        from: &Hash,
        to: &Hash,
        how: &str,
    ) -> Result<Stack> {
        let tmp = self.new_tmp()?;
        let mut w = Writer::new(db);
        if let Err(e) = w.diff(from, to, &tmp.join("tree")) {
            let _ = remove_tree(&tmp);
            return Err(e);
        }
        let depth = below.layers.len() as u32 + 1;
        let id = self.place(
            &tmp,
            LayerInfo {
                id: String::new(),
                root: to.to_hex(),
                below: Some(below.layers[0].clone()),
                depth,
                bytes: w.stats.bytes,
                files: w.stats.files,
                created_ns: crate::store::now_ns(),
            },
        )?;
        self.point(to, &id)?;
        let n = w.stats.files + w.stats.dirs + w.stats.whiteouts;
        self.stack_from(&id, how, n)
            .ok_or_else(|| Error::Internal("a new layer vanished".into()))
    }

    /// Makes a run's upper directory the layer of the root it produced, on top of the
    /// stack it ran on. The upper must describe `root` exactly (see `ingest`). Returns
    /// the new layer's id (none when the cache already had a layer of `root`).
    pub fn adopt_upper(&self, upper: &Path, below: &Stack, root: &Hash) -> Result<Option<String>> {
        if self.cached(root).is_some() {
            return Ok(None);
        }
        self.ensure()?;
        let tmp = self.dir.join(unique(".adopt-"));
        fs::create_dir(&tmp).map_err(|e| host_err(&tmp, e))?;
        let tree = tmp.join("tree");
        if let Err(e) = fs::rename(upper, &tree) {
            let _ = fs::remove_dir(&tmp);
            return Err(host_err(upper, e));
        }
        let id = self.place(
            &tmp,
            LayerInfo {
                id: String::new(),
                root: root.to_hex(),
                below: Some(below.layers[0].clone()),
                depth: below.layers.len() as u32 + 1,
                bytes: 0,
                files: 0,
                created_ns: crate::store::now_ns(),
            },
        )?;
        self.point(root, &id)?;
        Ok(Some(id))
    }

    /// A stack showing `root`: the cached one, else the diff from the nearest of `hints`
    /// (roots that likely have a stack: the workspace's last run, its parent's), else a
    /// full layer. Deep stacks are squashed.
    pub fn prepare(&self, db: &Connection, root: &Hash, hints: &[Hash]) -> Result<Stack> {
        if let Some(s) = self.cached(root) {
            if s.layers.len() as u32 <= MAX_DEPTH {
                self.touch(&s);
                return Ok(s);
            }
            return self.squash(db, root, &s);
        }
        let mut best: Option<(u64, Hash, Stack)> = None;
        for h in hints {
            if h == root {
                continue;
            }
            let Some(s) = self.cached(h) else { continue };
            // The cache may show a root the vault never kept (a run's result that was
            // changed again before any checkpoint, e.g. through a mount): nothing to diff
            // from, so it is not a starting point.
            if !crate::store::objects::tree_readable(db, h)? {
                continue;
            }
            let limit = best.as_ref().map_or(DIFF_LIMIT, |b| b.0);
            if let Some(n) = count_diff(db, h, root, limit)?
                && best.as_ref().is_none_or(|b| n < b.0)
            {
                best = Some((n, *h, s));
            }
        }
        let total = crate::store::objects::tree_usage(db, root)?.files;
        match best {
            Some((n, from, below)) if n <= (total / 4).max(64) => {
                let s = self.build_diff(db, &below, &from, root, "diff")?;
                if s.layers.len() as u32 > MAX_DEPTH {
                    return self.squash(db, root, &s);
                }
                Ok(s)
            }
            _ => self.build_full(db, root),
        }
    }

    /// Replaces a deep stack by one diff over its bottom (full) layer, or a full layer
    /// when that diff would be large.
    fn squash(&self, db: &Connection, root: &Hash, deep: &Stack) -> Result<Stack> {
        let bottom_id = deep.layers.last().expect("a stack has layers");
        let Some(bottom) = self.stack_from(bottom_id, "cached", 0) else {
            return self.build_full(db, root);
        };
        let Ok(bottom_root) = crate::util::hex32(&bottom.root).map(Hash).ok_or(()) else {
            return self.build_full(db, root);
        };
        if !crate::store::objects::tree_readable(db, &bottom_root)? {
            return self.build_full(db, root);
        }
        let total = crate::store::objects::tree_usage(db, root)?.files;
        match count_diff(db, &bottom_root, root, DIFF_LIMIT)? {
            Some(n) if n <= (total / 4).max(64) => {
                self.build_diff(db, &bottom, &bottom_root, root, "squashed")
            }
            _ => self.build_full(db, root),
        }
    }

    /// Marks a stack as used now (trimming drops the least recently used first).
    fn touch(&self, s: &Stack) {
        if let Ok(h) = crate::util::hex32(&s.root).map(Hash).ok_or(()) {
            let link = self.root_link(&h);
            let now = libc::timespec {
                tv_sec: 0,
                tv_nsec: libc::UTIME_NOW,
            };
            if let Ok(c) = std::ffi::CString::new(link.as_os_str().as_encoded_bytes()) {
                // SAFETY: valid path, two timespecs; the link itself, not its target.
                unsafe {
                    libc::utimensat(
                        libc::AT_FDCWD,
                        c.as_ptr(),
                        [now, now].as_ptr(),
                        libc::AT_SYMLINK_NOFOLLOW,
                    )
                };
            }
        }
    }

    /// Bytes and layer count of the cache.
    pub fn usage(&self) -> (u64, usize) {
        let mut bytes = 0;
        let mut n = 0;
        if let Ok(rd) = fs::read_dir(&self.dir) {
            for e in rd.flatten() {
                let name = e.file_name();
                let name = name.to_string_lossy();
                if name == "roots" || name.starts_with('.') {
                    continue;
                }
                n += 1;
                bytes += super::scan::tree_size(&e.path());
            }
        }
        (bytes, n)
    }

    /// Removes layers that no root points at (or that live runs no longer use), then,
    /// while the cache is over `budget` bytes, forgets the least recently used roots and
    /// removes what that leaves unreferenced. `in_use`: layers live runs stand on.
    pub fn trim(&self, budget: Option<u64>, in_use: &[String]) -> Result<TrimStats> {
        let mut stats = TrimStats::default();
        // Leftovers of builders that died.
        if let Ok(rd) = fs::read_dir(&self.dir) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if (name.starts_with(".build-") || name.starts_with(".adopt-")) && old(&e.path()) {
                    let _ = remove_tree(&e.path());
                }
            }
        }
        loop {
            let mut roots: Vec<(SystemTime, PathBuf, String)> = vec![];
            if let Ok(rd) = fs::read_dir(self.dir.join("roots")) {
                for e in rd.flatten() {
                    let p = e.path();
                    let used = fs::symlink_metadata(&p)
                        .and_then(|m| m.modified())
                        .unwrap_or(SystemTime::UNIX_EPOCH);
                    match fs::read_link(&p)
                        .ok()
                        .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()))
                    {
                        Some(top) if self.stack_from(&top, "", 0).is_some() => {
                            roots.push((used, p, top))
                        }
                        _ => {
                            let _ = fs::remove_file(&p);
                        }
                    }
                }
            }
            let mut keep: std::collections::HashSet<String> = in_use.iter().cloned().collect();
            for (_, _, top) in &roots {
                if let Some(s) = self.stack_from(top, "", 0) {
                    keep.extend(s.layers);
                }
            }
            let mut total = 0u64;
            if let Ok(rd) = fs::read_dir(&self.dir) {
                for e in rd.flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if name == "roots" || name.starts_with('.') {
                        continue;
                    }
                    if keep.contains(&name) || !old(&e.path()) {
                        total += super::scan::tree_size(&e.path());
                        continue;
                    }
                    stats.freed_bytes += super::scan::tree_size(&e.path());
                    if remove_tree(&e.path()).is_ok() {
                        stats.removed_layers += 1;
                    }
                }
            }
            stats.bytes = total;
            match budget {
                Some(b) if total > b && !roots.is_empty() => {
                    roots.sort();
                    // Forget the least recently used root, then look again.
                    let (_, p, _) = &roots[0];
                    let _ = fs::remove_file(p);
                    stats.forgotten_roots += 1;
                    // Layers just forgotten are old enough: they were in use until now.
                    self.expire(&roots[0].2);
                }
                _ => return Ok(stats),
            }
        }
    }

    /// Backdates a layer's directory so that trimming may remove it at once.
    fn expire(&self, top: &str) {
        if let Some(s) = self.stack_from(top, "", 0) {
            for id in s.layers {
                let p = self.dir.join(id);
                let _ = super::materialize::set_times(&p, 0);
            }
        }
    }
}

/// What trimming did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TrimStats {
    /// Kept overlays retired first (`engine::kept`).
    pub retired_kept: u64,
    pub removed_layers: u64,
    pub forgotten_roots: u64,
    pub freed_bytes: u64,
    /// What the cache holds afterwards.
    pub bytes: u64,
}

fn old(p: &Path) -> bool {
    fs::symlink_metadata(p)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_none_or(|age| age > GRACE)
}

/// Counts the entries that differ between two roots, skipping equal subtrees; `None`
/// once the count passes `limit` (the caller then writes a full layer).
pub fn count_diff(db: &Connection, a: &Hash, b: &Hash, limit: u64) -> Result<Option<u64>> {
    let mut n = 0u64;
    let mut stack = vec![(Some(*a), *b)];
    while let Some((from, to)) = stack.pop() {
        if from == Some(to) {
            continue;
        }
        let old = match from {
            Some(h) => get_tree(db, &h)?.entries,
            None => vec![],
        };
        let new = get_tree(db, &to)?.entries;
        let (mut i, mut j) = (0, 0);
        while i < old.len() || j < new.len() {
            let ord = match (old.get(i), new.get(j)) {
                (Some(x), Some(y)) => x.name.cmp(&y.name),
                (Some(_), None) => std::cmp::Ordering::Less,
                _ => std::cmp::Ordering::Greater,
            };
            match ord {
                std::cmp::Ordering::Less => {
                    n += 1;
                    i += 1;
                }
                std::cmp::Ordering::Greater => {
                    let e = &new[j];
                    n += if e.kind == Kind::Dir {
                        crate::store::objects::tree_usage(db, e.hash.as_ref().unwrap())?.files + 1
                    } else {
                        1
                    };
                    j += 1;
                }
                std::cmp::Ordering::Equal => {
                    let (x, y) = (&old[i], &new[j]);
                    if x != y {
                        n += 1;
                        if x.kind == Kind::Dir && y.kind == Kind::Dir && x.hash != y.hash {
                            stack.push((x.hash, y.hash.unwrap()));
                        } else if y.kind == Kind::Dir && x.kind != Kind::Dir {
                            n += crate::store::objects::tree_usage(db, y.hash.as_ref().unwrap())?
                                .files;
                        }
                    }
                    i += 1;
                    j += 1;
                }
            }
            if n > limit {
                return Ok(None);
            }
        }
    }
    Ok(Some(n))
}

/// The cache's size limit: `$AVFS_LAYER_CACHE_BYTES`, default 10 GiB.
pub fn budget() -> u64 {
    std::env::var("AVFS_LAYER_CACHE_BYTES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10 << 30)
}

/// What `avfs gc` does to the cache: layers no root points at go, and the least recently
/// used roots are forgotten while the cache is over its budget. Layers a run stands on
/// (its run directory still exists) stay.
pub fn trim_cache(home: &Path) -> Result<TrimStats> {
    let cache = LayerCache::new(home);
    if !cache.dir.is_dir() {
        return Ok(TrimStats::default());
    }
    // Kept overlays no run is using are retired first: their uppers become layers, and
    // their layers are trimmed like any other.
    let retired = super::kept::retire_all(home);
    let mut in_use = vec![];
    if let Ok(rd) = fs::read_dir(super::overlay::runs_dir(home)) {
        for e in rd.flatten() {
            if let Ok(text) = fs::read(e.path().join("run.json"))
                && let Ok(r) = serde_json::from_slice::<super::overlay::RunRecord>(&text)
            {
                in_use.extend(r.stack.layers);
            }
        }
    }
    in_use.extend(super::kept::layers_in_use(home));
    let mut stats = cache.trim(Some(budget()), &in_use)?;
    stats.retired_kept = retired;
    Ok(stats)
}
