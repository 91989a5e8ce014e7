//! Immutable, content-addressed objects: chunks, file contents and trees.

use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};

use super::missing::{self, Missing};
use crate::error::{Error, Result};

/// Fixed block size: a write in the middle of a large file re-stores only the blocks it touched.
pub const CHUNK_SIZE: usize = 64 * 1024;

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Hash(pub [u8; 32]);

/// A block that was never written (in a dense chunk list of formats 1-4): reads as zeros.
pub const HOLE: Hash = Hash([0; 32]);

impl Hash {
    pub fn of(data: &[u8]) -> Hash {
        Hash(*blake3::hash(data).as_bytes())
    }
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
    pub fn short(&self) -> String {
        self.to_hex()[..12].to_string()
    }
    pub fn from_slice(b: &[u8]) -> Result<Hash> {
        let a: [u8; 32] = b.try_into().map_err(|_| {
            Error::Internal(format!("stored hash has {} bytes, expected 32", b.len()))
        })?;
        Ok(Hash(a))
    }
}

impl std::fmt::Debug for Hash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.short())
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[repr(u8)]
pub enum Kind {
    File = 1,
    Dir = 2,
    Symlink = 3,
    Fifo = 4,
    Socket = 5,
    CharDev = 6,
    BlockDev = 7,
}

impl Kind {
    pub fn from_i64(v: i64) -> Result<Kind> {
        Ok(match v {
            1 => Kind::File,
            2 => Kind::Dir,
            3 => Kind::Symlink,
            4 => Kind::Fifo,
            5 => Kind::Socket,
            6 => Kind::CharDev,
            7 => Kind::BlockDev,
            _ => return Err(Error::Internal(format!("unknown inode kind {v}"))),
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            Kind::File => "file",
            Kind::Dir => "dir",
            Kind::Symlink => "symlink",
            Kind::Fifo => "fifo",
            Kind::Socket => "socket",
            Kind::CharDev => "char_device",
            Kind::BlockDev => "block_device",
        }
    }
    /// The S_IFMT bits for this kind.
    pub fn ifmt(self) -> u32 {
        match self {
            Kind::File => libc::S_IFREG,
            Kind::Dir => libc::S_IFDIR,
            Kind::Symlink => libc::S_IFLNK,
            Kind::Fifo => libc::S_IFIFO,
            Kind::Socket => libc::S_IFSOCK,
            Kind::CharDev => libc::S_IFCHR,
            Kind::BlockDev => libc::S_IFBLK,
        }
    }
}

/// Extended attributes: (name, value) pairs sorted by name.
pub type Xattrs = Vec<(Vec<u8>, Vec<u8>)>;

/// Attributes of the root directory, kept in the root tree object itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DirAttrs {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime_ns: i64,
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

impl DirAttrs {
    /// The root directory described as a directory entry (no name), for code that
    /// compares or walks entries.
    pub fn root_entry(&self, hash: Option<Hash>, has_links: bool) -> Entry {
        Entry {
            name: vec![],
            kind: Kind::Dir,
            mode: self.mode,
            uid: self.uid,
            gid: self.gid,
            mtime_ns: self.mtime_ns,
            size: 0,
            hash,
            target: None,
            rdev: 0,
            link_group: 0,
            has_links,
            xattrs: self.xattrs.clone(),
        }
    }
}

/// One directory entry. For directories `hash` is the subtree's tree hash and the
/// attributes are the directory's own; for files it is the content hash.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub name: Vec<u8>,
    pub kind: Kind,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime_ns: i64,
    pub size: u64,
    pub hash: Option<Hash>,
    pub target: Option<Vec<u8>>,
    pub rdev: u64,
    /// Non-zero for hard-linked files: all entries of one tree sharing a group are one inode.
    pub link_group: u64,
    /// For directories: some entry below has a non-zero link group.
    pub has_links: bool,
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tree {
    pub root_attrs: Option<DirAttrs>,
    pub entries: Vec<Entry>,
}

const TREE_TAG: &[u8] = b"avfs-tree-v1\0";

pub fn validate_name(name: &[u8]) -> std::result::Result<(), &'static str> {
    if name.is_empty() || name == b"." || name == b".." {
        return Err("empty, '.' or '..'");
    }
    if name.len() > 255 {
        return Err("longer than 255 bytes");
    }
    if name.contains(&b'/') || name.contains(&0) {
        return Err("contains '/' or NUL");
    }
    Ok(())
}

impl Tree {
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_allocvec(self).expect("tree encoding cannot fail")
    }

    /// Decodes and checks a stored tree; every malformed input is an error, never a panic.
    pub fn decode(data: &[u8]) -> std::result::Result<Tree, String> {
        let tree = super::treecodec::decode_tree(data)?;
        let mut prev: Option<&[u8]> = None;
        for e in &tree.entries {
            validate_name(&e.name).map_err(|why| format!("bad entry name: {why}"))?;
            if let Some(p) = prev
                && p >= e.name.as_slice()
            {
                return Err("entries not sorted or duplicated".into());
            }
            prev = Some(&e.name);
            match e.kind {
                Kind::File | Kind::Dir if e.hash.is_none() => {
                    return Err("entry without hash".into());
                }
                Kind::Symlink if e.target.is_none() => return Err("symlink without target".into()),
                _ => {}
            }
        }
        Ok(tree)
    }

    pub fn hash_of(encoded: &[u8]) -> Hash {
        let mut h = blake3::Hasher::new();
        h.update(TREE_TAG);
        h.update(encoded);
        Hash(*h.finalize().as_bytes())
    }
}

pub fn empty_root(uid: u32, gid: u32, mtime_ns: i64) -> Tree {
    Tree {
        root_attrs: Some(DirAttrs {
            mode: 0o755,
            uid,
            gid,
            mtime_ns,
            xattrs: vec![],
        }),
        entries: vec![],
    }
}

pub fn put_tree(db: &Connection, tree: &Tree) -> Result<Hash> {
    store_tree(db, tree, false)
}

/// `put_tree` for a command that must not write the vault: the tree is kept in the
/// connection's scratch space (`super::scratch`), where `get_tree` finds it too.
pub fn put_tree_scratch(db: &Connection, tree: &Tree) -> Result<Hash> {
    store_tree(db, tree, true)
}

fn store_tree(db: &Connection, tree: &Tree, scratch: bool) -> Result<Hash> {
    let data = tree.encode();
    let hash = Tree::hash_of(&data);
    let (mut files, mut bytes) = (0u64, 0u64);
    for e in &tree.entries {
        match (e.kind, e.hash) {
            (Kind::Dir, Some(sub)) => {
                let u = tree_usage(db, &sub)?;
                files += u.files;
                bytes += u.bytes;
            }
            (Kind::Dir, None) => {}
            _ => {
                files += 1;
                bytes += e.size;
            }
        }
    }
    if scratch {
        super::scratch::put(db, &hash, &data, files, bytes)?;
        return Ok(hash);
    }
    db.prepare_cached(
        "INSERT OR IGNORE INTO tree (hash, data, files, bytes) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![&hash.0[..], data, files as i64, bytes as i64])?;
    Ok(hash)
}

/// Names (non-directories) and bytes below a tree; a hard-linked file counts per name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Usage {
    pub files: u64,
    pub bytes: u64,
}

/// The totals of a stored tree, computed (and remembered) when a tree from an older
/// format has none yet.
pub fn tree_usage(db: &Connection, hash: &Hash) -> Result<Usage> {
    let row: Option<(Option<i64>, Option<i64>)> = db
        .prepare_cached("SELECT files, bytes FROM tree WHERE hash = ?1")?
        .query_row([&hash.0[..]], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    match row {
        Some((Some(f), Some(b))) => Ok(Usage {
            files: f as u64,
            bytes: b as u64,
        }),
        Some(_) => {
            let u = usage_of_entries(db, hash)?;
            db.prepare_cached("UPDATE tree SET files = ?2, bytes = ?3 WHERE hash = ?1")?
                .execute(params![&hash.0[..], u.files as i64, u.bytes as i64])?;
            Ok(u)
        }
        None => match super::scratch::get(db, hash)? {
            Some((_, files, bytes)) => Ok(Usage { files, bytes }),
            // A promised tree (lazy clone): fetched, stored without totals, summed here.
            None => usage_of_entries(db, hash),
        },
    }
}

/// Sums the totals of a tree's entries (subtrees through `tree_usage`).
fn usage_of_entries(db: &Connection, hash: &Hash) -> Result<Usage> {
    let tree = get_tree(db, hash)?;
    let mut u = Usage::default();
    for e in &tree.entries {
        match (e.kind, e.hash) {
            (Kind::Dir, Some(sub)) => {
                let s = tree_usage(db, &sub)?;
                u.files += s.files;
                u.bytes += s.bytes;
            }
            (Kind::Dir, None) => {}
            _ => {
                u.files += 1;
                u.bytes += e.size;
            }
        }
    }
    Ok(u)
}

/// The encoded bytes of tree `hash`: stored, in the connection's scratch space, or
/// promised by a remote (fetched now). Not yet checked against the hash.
fn tree_data(db: &Connection, hash: &Hash) -> Result<Vec<u8>> {
    let data: Option<Vec<u8>> = db
        .prepare_cached("SELECT data FROM tree WHERE hash = ?1")?
        .query_row([&hash.0[..]], |r| r.get(0))
        .optional()?;
    if let Some(d) = data {
        return Ok(d);
    }
    if let Some((d, _, _)) = super::scratch::get(db, hash)? {
        return Ok(d);
    }
    missing::fetch(db, Missing::Tree, hash)?.ok_or_else(|| Error::Corrupt {
        path: Default::default(),
        reason: format!("missing tree {}", hash.to_hex()),
    })
}

/// Whether tree `hash` can be read (stored, scratch, or promised by a remote). A root a
/// run computed but nobody checkpointed is not stored once the live state moves on.
pub fn tree_readable(db: &Connection, hash: &Hash) -> Result<bool> {
    match tree_data(db, hash) {
        Ok(_) => Ok(true),
        Err(Error::Corrupt { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

pub fn get_tree(db: &Connection, hash: &Hash) -> Result<Tree> {
    let data = tree_data(db, hash)?;
    if Tree::hash_of(&data) != *hash {
        return Err(Error::Corrupt {
            path: Default::default(),
            reason: format!("tree {} fails its hash", hash.to_hex()),
        });
    }
    Tree::decode(&data).map_err(|reason| Error::Corrupt {
        path: Default::default(),
        reason,
    })
}

/// Calls `f` with each entry of stored tree `hash`, in name order, until it returns false.
/// The tree's hash is checked before the first entry is given out, and entries are
/// decoded one at a time. A tree stored in the vault is read twice in pieces through
/// SQLite's incremental blob I/O (once to hash, once to decode), so a directory of a
/// million entries costs neither its encoding nor its entries in memory.
pub fn visit_tree(
    db: &Connection,
    hash: &Hash,
    f: &mut dyn FnMut(&mut Entry) -> Result<bool>,
) -> Result<()> {
    let corrupt = |reason: String| Error::Corrupt {
        path: Default::default(),
        reason: format!("tree {}: {reason}", hash.to_hex()),
    };
    let row: Option<i64> = db
        .prepare_cached("SELECT id FROM tree WHERE hash = ?1")?
        .query_row([&hash.0[..]], |r| r.get(0))
        .optional()?;
    // Scratch and remote trees are held whole anyway.
    let whole = match row {
        Some(_) => None,
        None => Some(tree_data(db, hash)?),
    };
    let mut hasher = blake3::Hasher::new();
    let stored = match (&whole, row) {
        (Some(data), _) => Tree::hash_of(data),
        (None, Some(id)) => {
            hasher.update(TREE_TAG);
            let mut blob = db.blob_open("main", "tree", "data", id, true)?;
            let mut buf = vec![0u8; TREE_PIECE];
            loop {
                let n = read_blob(&mut blob, &mut buf)?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
            }
            Hash(*hasher.finalize().as_bytes())
        }
        (None, None) => unreachable!("no row means the tree was read whole"),
    };
    if stored != *hash {
        return Err(corrupt("fails its hash".into()));
    }
    let mut prev: Vec<u8> = Vec::new();
    let mut failed: Option<Error> = None;
    let mut check_and_give = |e: &mut Entry| -> std::result::Result<bool, String> {
        validate_name(&e.name).map_err(|why| format!("bad entry name: {why}"))?;
        if !prev.is_empty() && prev.as_slice() >= e.name.as_slice() {
            return Err("entries not sorted or duplicated".into());
        }
        prev.clear();
        prev.extend_from_slice(&e.name);
        match f(e) {
            Ok(go) => Ok(go),
            Err(err) => {
                failed = Some(err);
                Ok(false)
            }
        }
    };
    match (&whole, row) {
        (Some(data), _) => super::treecodec::for_each_entry(data, &mut check_and_give),
        (None, Some(id)) => {
            let mut blob = db.blob_open("main", "tree", "data", id, true)?;
            super::treecodec::for_each_entry_from(
                &mut |buf| {
                    let at = buf.len();
                    buf.resize(at + TREE_PIECE, 0);
                    let n = read_blob(&mut blob, &mut buf[at..]).map_err(|e| e.to_string())?;
                    buf.truncate(at + n);
                    Ok(n > 0)
                },
                &mut check_and_give,
            )
        }
        (None, None) => unreachable!("no row means the tree was read whole"),
    }
    .map_err(corrupt)?;
    match failed {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// How much of a tree's encoding `visit_tree` reads at a time.
const TREE_PIECE: usize = 64 * 1024;

/// One read of a blob, with SQLite's own error (a damaged page is `corrupt_vault`) rather
/// than the `io::Error` rusqlite wraps it in.
fn read_blob(blob: &mut rusqlite::blob::Blob, buf: &mut [u8]) -> Result<usize> {
    std::io::Read::read(blob, buf).map_err(|e| {
        match e
            .into_inner()
            .and_then(|inner| inner.downcast::<rusqlite::Error>().ok())
        {
            Some(sqlite) => Error::from(*sqlite),
            None => Error::Internal("reading a stored tree failed".into()),
        }
    })
}

pub fn put_chunk(db: &Connection, data: &[u8]) -> Result<Hash> {
    let hash = Hash::of(data);
    put_chunk_hashed(db, &hash, data)?;
    Ok(hash)
}

pub fn put_chunk_hashed(db: &Connection, hash: &Hash, data: &[u8]) -> Result<()> {
    put_chunk_packing(db, hash, data, Packing::Fast)
}

/// Compresses `data` as `packing` says (or keeps it as it is) and inserts it.
fn put_chunk_packing(db: &Connection, hash: &Hash, data: &[u8], packing: Packing) -> Result<()> {
    match compress_chunk(data, packing) {
        Some((codec, packed)) => put_chunk_stored(db, hash, codec, &packed),
        None => put_chunk_stored(db, hash, CODEC_RAW, data),
    }
}

/// Inserts a chunk in its stored form (`codec`, `bytes`).
fn put_chunk_stored(db: &Connection, hash: &Hash, codec: i64, bytes: &[u8]) -> Result<()> {
    db.prepare_cached("INSERT OR IGNORE INTO chunk (hash, data, codec) VALUES (?1, ?2, ?3)")?
        .execute(params![&hash.0[..], bytes, codec])?;
    Ok(())
}

/// A chunk ready to insert, compressed (or not) on the thread that read it, so that
/// the one thread that writes to SQLite only inserts.
pub struct ChunkRow {
    pub hash: Hash,
    /// The chunk's length (not its stored length).
    pub len: usize,
    form: Form,
}

enum Form {
    /// The row as stored: its codec and bytes.
    Packed { codec: i64, stored: Vec<u8> },
    /// The vault held the chunk when the reading thread looked (`store::chunkdedupe`), so
    /// it was not compressed. Its bytes come along for the one case where it is gone by
    /// the time the writer inserts (a space reclaim committed in between): the writer
    /// then compresses and stores them, so a reference never dangles.
    Held { data: Vec<u8>, packing: Packing },
}

impl ChunkRow {
    pub fn new(hash: Hash, data: Vec<u8>, packing: Packing) -> ChunkRow {
        let packed = compress_chunk(&data, packing);
        ChunkRow::with(hash, data, packed)
    }

    /// The row of `data`, given what [`compress_chunk`] made of it.
    pub fn with(hash: Hash, data: Vec<u8>, packed: Option<(i64, Vec<u8>)>) -> ChunkRow {
        let len = data.len();
        let form = match packed {
            Some((codec, stored)) => Form::Packed { codec, stored },
            None => Form::Packed {
                codec: CODEC_RAW,
                stored: data,
            },
        };
        ChunkRow { hash, len, form }
    }

    /// The row of a chunk the vault was seen to hold: not compressed unless the writer
    /// finds it gone.
    pub fn held(hash: Hash, data: Vec<u8>, packing: Packing) -> ChunkRow {
        ChunkRow {
            hash,
            len: data.len(),
            form: Form::Held { data, packing },
        }
    }

    /// Was it compressed (false: the vault was seen to hold it)?
    pub fn packed(&self) -> bool {
        matches!(self.form, Form::Packed { .. })
    }
}

/// Inserts `row` unless the vault holds its chunk. Called inside the writer's transaction:
/// a held row's chunk is checked there, so it exists when that transaction commits.
pub fn put_chunk_row(db: &Connection, row: &ChunkRow) -> Result<()> {
    match &row.form {
        Form::Packed { codec, stored } => put_chunk_stored(db, &row.hash, *codec, stored),
        Form::Held { data, packing } => {
            if has_chunk(db, &row.hash)? {
                return Ok(());
            }
            put_chunk_packing(db, &row.hash, data, *packing)
        }
    }
}

/// Does the vault hold chunk `h`? (An index lookup: the row's data is not read.)
pub fn has_chunk(db: &Connection, h: &Hash) -> Result<bool> {
    Ok(db
        .prepare_cached("SELECT 1 FROM chunk WHERE hash = ?1")?
        .query_row([&h.0[..]], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Below this a chunk is not compressed ([`compress_chunk`]): nothing to save by
/// looking it up first.
pub fn worth_compressing(len: usize) -> bool {
    len >= COMPRESS_MIN
}

/// `chunk.codec`: `data` holds the chunk's bytes as they are.
pub const CODEC_RAW: i64 = 0;
/// `chunk.codec`: `data` is the chunk's length (4 bytes, little-endian) and then one LZ4
/// block of its bytes; no checksum of its own, the chunk's hash checks what it decodes to.
pub const CODEC_LZ4: i64 = 1;
/// `chunk.codec`: `data` is one zstd frame of the chunk's bytes (its size in the frame's
/// header, no checksum of its own).
pub const CODEC_ZSTD: i64 = 2;

/// Which compression a path that stores chunks can afford.
///
/// On 282 MB of Rust sources (`import`, 2 cores), zstd level 1 made the vault 3.5x smaller
/// and LZ4 2.6x, but zstd added 0.95 s of CPU to the import's 0.7 s and LZ4 0.4 s. A run's
/// ingest and a mount's writes are waited for: they take LZ4. An import stores a tree
/// once, and the tree it stores is what most of a vault holds: it takes zstd.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packing {
    Fast,
    Small,
}

/// zstd's fastest standard level; higher levels gained 4 % on a Python tree for twice
/// the CPU.
const ZSTD_LEVEL: i32 = 1;

/// Below this a block's costs leave too little to gain.
const COMPRESS_MIN: usize = 64;

/// Bytes of a big chunk tried first.
const SAMPLE: usize = 4096;

thread_local! {
    static ZSTD: std::cell::RefCell<Option<(zstd::bulk::Compressor<'static>, zstd::bulk::Decompressor<'static>)>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `f` with this thread's zstd contexts (made once per thread, so worker threads
/// compress in parallel without making one per chunk).
fn with_zstd<T>(
    f: impl FnOnce(
        &mut zstd::bulk::Compressor<'static>,
        &mut zstd::bulk::Decompressor<'static>,
    ) -> Option<T>,
) -> Option<T> {
    ZSTD.with(|z| {
        let mut z = z.borrow_mut();
        if z.is_none() {
            *z = Some((
                zstd::bulk::Compressor::new(ZSTD_LEVEL).ok()?,
                zstd::bulk::Decompressor::new().ok()?,
            ));
        }
        let (c, d) = z.as_mut()?;
        f(c, d)
    })
}

/// The chunk compressed (its codec and stored bytes), when that saves at least an eighth
/// of it; `None` keeps it as it is (already compressed media, archives, random bytes, tiny
/// files).
pub fn compress_chunk(data: &[u8], packing: Packing) -> Option<(i64, Vec<u8>)> {
    if data.len() < COMPRESS_MIN {
        return None;
    }
    // A big chunk whose first 4 KiB do not compress is taken for media, an archive or
    // random bytes: trying the whole of it would cost 16 times as much for nothing.
    if data.len() > 2 * SAMPLE {
        compressed_within(&data[..SAMPLE], Packing::Fast)?;
    }
    compressed_within(data, packing)
}

/// `data` compressed, if that takes at most seven eighths of its size.
fn compressed_within(data: &[u8], packing: Packing) -> Option<(i64, Vec<u8>)> {
    let limit = data.len() - data.len() / 8;
    match packing {
        Packing::Fast => {
            let packed = lz4_flex::block::compress_prepend_size(data);
            (packed.len() <= limit).then_some((CODEC_LZ4, packed))
        }
        Packing::Small => with_zstd(|c, _| {
            let mut out = Vec::with_capacity(limit);
            // A frame that does not fit in `limit` bytes fails: then it is not worth it.
            c.compress_to_buffer(data, &mut out).ok()?;
            (out.len() <= limit).then_some((CODEC_ZSTD, out))
        }),
    }
}

/// The chunk's bytes from its stored form; `Err` names what is wrong with a damaged row.
pub fn decode_chunk(codec: i64, stored: Vec<u8>) -> std::result::Result<Vec<u8>, String> {
    match codec {
        CODEC_RAW => Ok(stored),
        CODEC_LZ4 => {
            let (len, block) = stored
                .split_first_chunk::<4>()
                .ok_or("is too short to be compressed")?;
            let len = u32::from_le_bytes(*len) as usize;
            if len > CHUNK_SIZE {
                return Err(format!("says it decompresses to {len} bytes"));
            }
            match lz4_flex::block::decompress(block, len) {
                Ok(bytes) if bytes.len() == len => Ok(bytes),
                Ok(bytes) => Err(format!("decompresses to {} bytes, not {len}", bytes.len())),
                Err(e) => Err(format!("does not decompress: {e}")),
            }
        }
        CODEC_ZSTD => {
            let mut why = String::from("does not decompress");
            with_zstd(|_, d| match d.decompress(&stored, CHUNK_SIZE) {
                Ok(bytes) => Some(bytes),
                Err(e) => {
                    why = format!("does not decompress: {e}");
                    None
                }
            })
            .ok_or(why)
        }
        other => Err(format!("has unknown codec {other}")),
    }
}

/// A chunk's bytes as stored in this vault, decoded but not checked against the hash;
/// `None` when the vault lacks it.
fn stored_chunk(db: &Connection, hash: &Hash) -> Result<Option<Vec<u8>>> {
    let row: Option<(Vec<u8>, i64)> = db
        .prepare_cached("SELECT data, codec FROM chunk WHERE hash = ?1")?
        .query_row([&hash.0[..]], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    match row {
        None => Ok(None),
        Some((stored, codec)) => {
            decode_chunk(codec, stored)
                .map(Some)
                .map_err(|why| Error::Corrupt {
                    path: Default::default(),
                    reason: format!("chunk {} {why}", hash.to_hex()),
                })
        }
    }
}

pub fn get_chunk(db: &Connection, hash: &Hash) -> Result<Vec<u8>> {
    if *hash == HOLE {
        return Ok(vec![0; CHUNK_SIZE]);
    }
    let data = match stored_chunk(db, hash)? {
        Some(d) => Some(d),
        None => missing::fetch(db, Missing::Chunk, hash)?,
    };
    let data = data.ok_or_else(|| Error::Corrupt {
        path: Default::default(),
        reason: format!("missing chunk {}", hash.to_hex()),
    })?;
    // Whether stored here (and decoded) or fetched from a remote: the bytes must be the
    // ones the name says.
    if Hash::of(&data) != *hash {
        return Err(Error::Corrupt {
            path: Default::default(),
            reason: format!("chunk {} fails its hash", hash.to_hex()),
        });
    }
    Ok(data)
}

/// Decodes a dense chunk list (vault formats 1-4: 32 bytes per block, zeros for a hole).
pub fn decode_chunk_list(blob: &[u8]) -> std::result::Result<Vec<Hash>, String> {
    if !blob.len().is_multiple_of(32) {
        return Err(format!(
            "chunk list of {} bytes is not a multiple of 32",
            blob.len()
        ));
    }
    Ok(blob
        .chunks_exact(32)
        .map(|c| Hash(c.try_into().unwrap()))
        .collect())
}
