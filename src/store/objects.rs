//! Immutable, content-addressed objects: chunks, file contents and trees.

use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};

use super::missing::{self, Missing};
use crate::error::{Error, Result};

/// Fixed block size: a write in the middle of a large file re-stores only the blocks it touched.
pub const CHUNK_SIZE: usize = 64 * 1024;

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Hash(pub [u8; 32]);

/// A block that was never written: reads as zeros and is not stored.
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
const CONTENT_TAG: &[u8] = b"avfs-content-v1\0";

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
            db.prepare_cached("UPDATE tree SET files = ?2, bytes = ?3 WHERE hash = ?1")?
                .execute(params![&hash.0[..], u.files as i64, u.bytes as i64])?;
            Ok(u)
        }
        None if missing::fetch(db, Missing::Tree, hash)?.is_some() => {
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
        None => Err(Error::Corrupt {
            path: Default::default(),
            reason: format!("missing tree {}", hash.to_hex()),
        }),
    }
}

pub fn get_tree(db: &Connection, hash: &Hash) -> Result<Tree> {
    let data: Option<Vec<u8>> = db
        .prepare_cached("SELECT data FROM tree WHERE hash = ?1")?
        .query_row([&hash.0[..]], |r| r.get(0))
        .optional()?;
    let data = match data {
        Some(d) => Some(d),
        None => missing::fetch(db, Missing::Tree, hash)?,
    };
    let data = data.ok_or_else(|| Error::Corrupt {
        path: Default::default(),
        reason: format!("missing tree {}", hash.to_hex()),
    })?;
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

pub fn put_chunk(db: &Connection, data: &[u8]) -> Result<Hash> {
    let hash = Hash::of(data);
    put_chunk_hashed(db, &hash, data)?;
    Ok(hash)
}

pub fn put_chunk_hashed(db: &Connection, hash: &Hash, data: &[u8]) -> Result<()> {
    db.prepare_cached("INSERT OR IGNORE INTO chunk (hash, data) VALUES (?1, ?2)")?
        .execute(params![&hash.0[..], data])?;
    Ok(())
}

pub fn get_chunk(db: &Connection, hash: &Hash) -> Result<Vec<u8>> {
    if *hash == HOLE {
        return Ok(vec![0; CHUNK_SIZE]);
    }
    let data: Option<Vec<u8>> = db
        .prepare_cached("SELECT data FROM chunk WHERE hash = ?1")?
        .query_row([&hash.0[..]], |r| r.get(0))
        .optional()?;
    let data = match data {
        Some(d) => Some(d),
        None => missing::fetch(db, Missing::Chunk, hash)?,
    };
    let data = data.ok_or_else(|| Error::Corrupt {
        path: Default::default(),
        reason: format!("missing chunk {}", hash.to_hex()),
    })?;
    if Hash::of(&data) != *hash {
        return Err(Error::Corrupt {
            path: Default::default(),
            reason: format!("chunk {} fails its hash", hash.to_hex()),
        });
    }
    Ok(data)
}

/// The content hash of a file made of `chunks` and `size` bytes. A file of one chunk
/// or less is addressed by its only chunk's hash, so it needs no chunk list.
pub fn content_hash(chunks: &[Hash], size: u64) -> Hash {
    if size as usize <= CHUNK_SIZE && chunks.len() <= 1 {
        return chunks.first().copied().unwrap_or_else(|| Hash::of(b""));
    }
    let mut h = blake3::Hasher::new();
    h.update(CONTENT_TAG);
    h.update(&size.to_le_bytes());
    for c in chunks {
        h.update(&c.0);
    }
    Hash(*h.finalize().as_bytes())
}

/// Stores a whole file's bytes; returns its content hash.
pub fn put_content(db: &Connection, data: &[u8]) -> Result<Hash> {
    if data.len() <= CHUNK_SIZE {
        return put_chunk(db, data);
    }
    let chunks: Vec<Hash> = data
        .chunks(CHUNK_SIZE)
        .map(|c| put_chunk(db, c))
        .collect::<Result<_>>()?;
    put_chunk_list(db, &chunks, data.len() as u64)
}

/// Hash of a full block of zeros.
pub fn zero_chunk_hash() -> Hash {
    static ZERO: std::sync::OnceLock<Hash> = std::sync::OnceLock::new();
    *ZERO.get_or_init(|| Hash::of(&[0u8; CHUNK_SIZE]))
}

/// Records a chunk list (chunks must already be stored) and returns its content hash.
pub fn put_chunk_list(db: &Connection, chunks: &[Hash], size: u64) -> Result<Hash> {
    if size as usize <= CHUNK_SIZE && chunks.len() > 1 {
        // A file of one chunk or less is addressed by that chunk alone.
        let mut data = if chunks[0] == HOLE {
            vec![]
        } else {
            get_chunk(db, &chunks[0])?
        };
        data.resize(size as usize, 0);
        return put_chunk(db, &data);
    }
    // In a multi-chunk file a block of zeros is a hole, so sparse and dense writes of the
    // same bytes get the same content hash.
    let zero = zero_chunk_hash();
    let canonical: Vec<Hash> = chunks
        .iter()
        .map(|c| {
            if *c == zero && chunks.len() > 1 {
                HOLE
            } else {
                *c
            }
        })
        .collect();
    let chunks = &canonical[..];
    let hash = content_hash(chunks, size);
    if size as usize > CHUNK_SIZE || chunks.len() > 1 {
        let mut blob = Vec::with_capacity(chunks.len() * 32);
        for c in chunks {
            blob.extend_from_slice(&c.0);
        }
        db.prepare_cached(
            "INSERT OR IGNORE INTO content (hash, size, chunks) VALUES (?1, ?2, ?3)",
        )?
        .execute(params![&hash.0[..], size as i64, blob])?;
    } else if chunks.is_empty() {
        put_chunk(db, b"")?;
    }
    Ok(hash)
}

/// The chunk hashes of a file's content.
pub fn chunk_list(db: &Connection, hash: &Hash, size: u64) -> Result<Vec<Hash>> {
    if size as usize <= CHUNK_SIZE {
        return Ok(vec![*hash]);
    }
    let blob: Option<Vec<u8>> = db
        .prepare_cached("SELECT chunks FROM content WHERE hash = ?1")?
        .query_row([&hash.0[..]], |r| r.get(0))
        .optional()?;
    let blob = match blob {
        Some(b) => Some(b),
        // The wire form leads with the size; the stored list is what follows.
        None => missing::fetch(db, Missing::Content, hash)?
            .map(|d| d.get(8..).unwrap_or_default().to_vec()),
    };
    let blob = blob.ok_or_else(|| Error::Corrupt {
        path: Default::default(),
        reason: format!("missing content {}", hash.to_hex()),
    })?;
    decode_chunk_list(&blob).map_err(|reason| Error::Corrupt {
        path: Default::default(),
        reason,
    })
}

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

/// Reads `len` bytes at `offset` of a stored file content.
pub fn read_content(
    db: &Connection,
    hash: &Hash,
    size: u64,
    offset: u64,
    len: usize,
) -> Result<Vec<u8>> {
    if offset >= size {
        return Ok(vec![]);
    }
    let end = (offset + len as u64).min(size);
    let chunks = chunk_list(db, hash, size)?;
    let mut out = Vec::with_capacity((end - offset) as usize);
    let first = (offset / CHUNK_SIZE as u64) as usize;
    let last = ((end - 1) / CHUNK_SIZE as u64) as usize;
    for (i, c) in chunks.iter().enumerate().take(last + 1).skip(first) {
        let data = get_chunk(db, c)?;
        let base = i as u64 * CHUNK_SIZE as u64;
        let from = offset.saturating_sub(base) as usize;
        let to = ((end - base) as usize).min(CHUNK_SIZE);
        if from < data.len() {
            out.extend_from_slice(&data[from..to.min(data.len())]);
        }
        // A short stored chunk (the last one) or a hole reads as zeros up to `to`.
        let want = to - from;
        let have = data.len().saturating_sub(from).min(want);
        out.resize(out.len() + (want - have), 0);
    }
    Ok(out)
}

pub fn read_all(db: &Connection, hash: &Hash, size: u64) -> Result<Vec<u8>> {
    read_content(db, hash, size, 0, size as usize)
}

/// The content of a file cut or extended (with a hole) to `new_size`.
pub fn resize_content(db: &Connection, hash: &Hash, size: u64, new_size: u64) -> Result<Hash> {
    if new_size == size {
        return Ok(*hash);
    }
    let mut chunks = chunk_list(db, hash, size)?;
    if size == 0 {
        chunks.clear();
    }
    let cs = CHUNK_SIZE as u64;
    let want = new_size.div_ceil(cs) as usize;
    if new_size < size {
        chunks.truncate(want);
        let tail = (new_size % cs) as usize;
        if tail != 0
            && let Some(last) = chunks.last_mut()
            && *last != HOLE
        {
            let data = get_chunk(db, last)?;
            let mut cut = data[..tail.min(data.len())].to_vec();
            cut.resize(tail, 0);
            *last = put_chunk(db, &cut)?;
        }
    } else {
        // Zero-fill the stored tail of the old last chunk up to a full chunk, then add holes.
        if !size.is_multiple_of(cs)
            && let Some(last) = chunks.last_mut()
            && *last != HOLE
        {
            let mut data = get_chunk(db, last)?;
            let fill = ((new_size - (size - size % cs)).min(cs)) as usize;
            data.resize(fill, 0);
            *last = put_chunk(db, &data)?;
        }
        chunks.resize(want, HOLE);
    }
    if new_size as usize <= CHUNK_SIZE {
        // A one-chunk file is addressed by its chunk, which must hold exactly its bytes.
        let data = match chunks.first() {
            None => vec![],
            Some(c) => {
                let mut d = if *c == HOLE {
                    vec![]
                } else {
                    get_chunk(db, c)?
                };
                d.resize(new_size as usize, 0);
                d
            }
        };
        return put_chunk(db, &data);
    }
    put_chunk_list(db, &chunks, new_size)
}
