//! File content: the one API for writing and reading the bytes of a file.
//!
//! A file's content is a map of extents over a fixed grid of 64 KiB blocks: `(block,
//! chunk)` pairs, sorted by block; a block that is not listed is a hole and reads as
//! zeros. So a 1 TiB file holding one byte costs one chunk and one extent, and every
//! operation here (read, resize, patch, store, hash) is O(extents), never O(size).
//!
//! A content is addressed by a hash. A file of one block or less is addressed by its only
//! chunk's hash (the chunk then holds exactly its bytes, zeros included), and needs no
//! content row. A larger file has a `content` row: its size and its extent list.
//!
//! Writing: [`write_bytes`] (a buffer), [`write_from_reader`] (a stream),
//! [`write_from_path`] (a host file: its holes are skipped with `SEEK_DATA`, and blocks
//! are hashed on every core before they are inserted in order), [`Patch`] (changes
//! buffered over a stored content, as the mount does; also appends and truncations).
//! Reading: [`read_at`], [`copy_to`] (streamed, holes as zeros), [`copy_to_file`]
//! (sparse: holes stay holes), [`extents`] (the map itself, for `SEEK_HOLE`/`SEEK_DATA`
//! and FIEMAP-style questions).

mod patch;
mod stream;

pub use patch::Patch;
pub use stream::{data_regions, write_from_file, write_from_path, write_from_reader};

use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OptionalExtension, params};

use super::objects::{CHUNK_SIZE, HOLE, Hash, get_chunk, put_chunk};
use crate::error::{Error, Result};

/// The largest file size: ext4's with 4 KiB blocks (16 TiB - 4 KiB). Sizes and offsets past
/// it are refused (`EFBIG` in a mount, `invalid_argument` in the CLI) before anything is
/// allocated.
pub const MAX_FILE_SIZE: u64 = (1 << 44) - 4096;

const CS: u64 = CHUNK_SIZE as u64;

/// Up to this size a content hash is the chunk-list hash of formats 1-4 (one 32-byte
/// entry per block, zeros for holes), so a file written again with the same bytes keeps
/// the hash an older avfs gave it; hashing that list costs at most 512 KiB of input.
/// Larger files hash their extents, which costs O(extents) whatever the size.
pub const LEGACY_HASH_MAX: u64 = 1 << 30;

const CONTENT_TAG: &[u8] = b"avfs-content-v1\0";
const EXTENT_TAG: &[u8] = b"avfs-extents-v1\0";

/// `content.format`: 0 = a dense chunk list (32 bytes per block, zeros for a hole; vault
/// formats 1-4), 1 = an extent list (8-byte little-endian block + 32-byte chunk each).
const FORMAT_DENSE: i64 = 0;
const FORMAT_EXTENTS: i64 = 1;
const EXTENT_BYTES: usize = 40;

/// Refuses a size or an end offset past [`MAX_FILE_SIZE`].
pub fn check_size(size: u64) -> Result<()> {
    if size > MAX_FILE_SIZE {
        return Err(Error::TooBig(format!(
            "{size} bytes is past the largest file size, {MAX_FILE_SIZE} bytes"
        )));
    }
    Ok(())
}

/// `offset + len`, refused past [`MAX_FILE_SIZE`] (and on overflow).
pub fn end_of(offset: u64, len: u64) -> Result<u64> {
    let end = offset.saturating_add(len);
    check_size(end)?;
    Ok(end)
}

/// A file's content as a map: which blocks hold a chunk. Blocks not listed read as zeros.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Extents {
    pub size: u64,
    /// (block index, chunk hash), strictly increasing blocks, all below `blocks()`. A file
    /// of one block or less always lists its one chunk at block 0.
    pub list: Vec<(u64, Hash)>,
}

impl Extents {
    /// Number of blocks the size spans.
    pub fn blocks(&self) -> u64 {
        self.size.div_ceil(CS)
    }

    /// Bytes held in chunks (what the file costs, holes excluded): what `st_blocks` and
    /// `du` report.
    pub fn allocated(&self) -> u64 {
        self.list
            .iter()
            .map(|(b, _)| (self.size - b * CS).min(CS))
            .sum()
    }

    /// Position in `list` of the first extent at or after `block`.
    pub fn first_from(&self, block: u64) -> usize {
        self.list.partition_point(|(b, _)| *b < block)
    }

    /// `SEEK_DATA`: the first offset at or after `offset` inside a stored block, if any.
    pub fn next_data(&self, offset: u64) -> Option<u64> {
        if offset >= self.size {
            return None;
        }
        let i = self.first_from(offset / CS);
        self.list.get(i).map(|(b, _)| (b * CS).max(offset))
    }

    /// `SEEK_HOLE`: the first offset at or after `offset` that is in a hole, or the size.
    pub fn next_hole(&self, offset: u64) -> u64 {
        if offset >= self.size {
            return self.size;
        }
        let mut block = offset / CS;
        let mut i = self.first_from(block);
        while let Some((b, _)) = self.list.get(i) {
            if *b != block {
                break;
            }
            block += 1;
            i += 1;
        }
        (block * CS).clamp(offset, self.size)
    }

    /// Data ranges (offset, length), holes left out: a FIEMAP-style view.
    pub fn data_ranges(&self) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        for (b, _) in &self.list {
            let start = b * CS;
            let len = (self.size - start).min(CS);
            match out.last_mut() {
                Some((s, l)) if *s + *l == start => *l += len,
                _ => out.push((start, len)),
            }
        }
        out
    }
}

/// The content hash of `ext` (canonical: for a multi-block file, no block of zeros is
/// listed). One block or less: its chunk's hash.
pub fn hash_of(ext: &Extents) -> Hash {
    if ext.size <= CS {
        return ext
            .list
            .first()
            .map(|(_, h)| *h)
            .unwrap_or_else(|| Hash::of(b""));
    }
    let mut h = blake3::Hasher::new();
    if ext.size <= LEGACY_HASH_MAX {
        h.update(CONTENT_TAG);
        h.update(&ext.size.to_le_bytes());
        let mut next = 0u64;
        for (b, c) in &ext.list {
            for _ in next..*b {
                h.update(&HOLE.0);
            }
            h.update(&c.0);
            next = b + 1;
        }
        for _ in next..ext.blocks() {
            h.update(&HOLE.0);
        }
    } else {
        h.update(EXTENT_TAG);
        h.update(&ext.size.to_le_bytes());
        for (b, c) in &ext.list {
            h.update(&b.to_le_bytes());
            h.update(&c.0);
        }
    }
    Hash(*h.finalize().as_bytes())
}

/// Decodes a stored content row (`format`, `chunks` blob) of a `size`-byte file, checking
/// it; every malformed input is an error, never a panic.
pub fn decode_row(format: i64, blob: &[u8], size: u64) -> std::result::Result<Extents, String> {
    if size > MAX_FILE_SIZE {
        return Err(format!("size {size} is past the largest file size"));
    }
    let blocks = size.div_ceil(CS);
    let mut list = Vec::new();
    match format {
        FORMAT_DENSE => {
            let chunks = super::objects::decode_chunk_list(blob)?;
            if chunks.len() as u64 != blocks {
                return Err(format!(
                    "{} chunks listed, a {size}-byte file needs {blocks}",
                    chunks.len()
                ));
            }
            for (i, c) in chunks.into_iter().enumerate() {
                if c != HOLE {
                    list.push((i as u64, c));
                }
            }
        }
        FORMAT_EXTENTS => {
            if !blob.len().is_multiple_of(EXTENT_BYTES) {
                return Err(format!(
                    "extent list of {} bytes is not a multiple of {EXTENT_BYTES}",
                    blob.len()
                ));
            }
            list.reserve(blob.len() / EXTENT_BYTES);
            let mut prev: Option<u64> = None;
            for e in blob.chunks_exact(EXTENT_BYTES) {
                let b = u64::from_le_bytes(e[..8].try_into().unwrap());
                let c = Hash(e[8..].try_into().unwrap());
                if b >= blocks {
                    return Err(format!(
                        "extent at block {b}, past the {blocks} blocks of a {size}-byte file"
                    ));
                }
                if prev.is_some_and(|p| p >= b) {
                    return Err("extents not sorted or duplicated".into());
                }
                if c == HOLE {
                    return Err(format!("extent at block {b} names no chunk"));
                }
                prev = Some(b);
                list.push((b, c));
            }
        }
        other => return Err(format!("unknown content format {other}")),
    }
    Ok(Extents { size, list })
}

fn encode_extents(list: &[(u64, Hash)]) -> Vec<u8> {
    let mut blob = Vec::with_capacity(list.len() * EXTENT_BYTES);
    for (b, c) in list {
        blob.extend_from_slice(&b.to_le_bytes());
        blob.extend_from_slice(&c.0);
    }
    blob
}

/// Recently read extent maps of larger files, shared by every connection of the process:
/// a map is immutable and named by its hash, so it can be kept without asking the vault,
/// and a mount reading a large file request by request decodes its map once.
static CACHE: Mutex<Vec<(Hash, Arc<Extents>)>> = Mutex::new(Vec::new());
const CACHE_ENTRIES: usize = 16;
/// Maps with fewer extents than this are cheaper to read again than to cache.
const CACHE_MIN_EXTENTS: usize = 32;

fn cached(hash: &Hash) -> Option<Arc<Extents>> {
    let mut c = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    let pos = c.iter().position(|(h, _)| h == hash)?;
    let e = c.remove(pos);
    let ext = e.1.clone();
    c.push(e);
    Some(ext)
}

fn remember(hash: Hash, ext: &Arc<Extents>) {
    if ext.list.len() < CACHE_MIN_EXTENTS {
        return;
    }
    let mut c = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    if c.len() >= CACHE_ENTRIES {
        c.remove(0);
    }
    c.push((hash, ext.clone()));
}

fn missing(what: &str, hash: &Hash) -> Error {
    Error::Corrupt {
        path: Default::default(),
        reason: format!("missing {what} {}", hash.to_hex()),
    }
}

/// The extent map of the `size`-byte content `hash`.
pub fn extents(db: &Connection, hash: &Hash, size: u64) -> Result<Arc<Extents>> {
    if size <= CS {
        return Ok(Arc::new(Extents {
            size,
            list: vec![(0, *hash)],
        }));
    }
    if let Some(e) = cached(hash) {
        return Ok(e);
    }
    let row: Option<(i64, i64, Vec<u8>)> = db
        .prepare_cached("SELECT format, size, chunks FROM content WHERE hash = ?1")?
        .query_row([&hash.0[..]], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    let (format, stored_size, blob) = match row {
        Some(r) => r,
        None => {
            // A lazy clone's promised content comes from its remote (checked there).
            let wire = super::missing::fetch(db, super::missing::Missing::Content, hash)?
                .ok_or_else(|| missing("content", hash))?;
            let ext = wire_decode(&wire).map_err(|reason| Error::Corrupt {
                path: Default::default(),
                reason: format!("content {}: {reason}", hash.to_hex()),
            })?;
            (FORMAT_EXTENTS, ext.size as i64, encode_extents(&ext.list))
        }
    };
    let corrupt = |reason: String| Error::Corrupt {
        path: Default::default(),
        reason: format!("content {}: {reason}", hash.to_hex()),
    };
    if stored_size != size as i64 {
        return Err(corrupt(format!(
            "stored for {stored_size} bytes, the file has {size}"
        )));
    }
    let ext = decode_row(format, &blob, size).map_err(corrupt)?;
    // Content is addressed by the hash of its extent list: a flipped byte in the list
    // must not send a read to the wrong chunk.
    if hash_of(&ext) != *hash {
        return Err(corrupt("fails its hash".into()));
    }
    let ext = Arc::new(ext);
    remember(*hash, &ext);
    Ok(ext)
}

/// The wire form of a content object (what `avfs push` sends and a lazy clone fetches):
/// the size, 8 bytes little-endian, then the extent list of format 1. Its hash is
/// [`hash_of`] of what it decodes to, whatever form the sender stored it in.
pub fn wire_encode(ext: &Extents) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + ext.list.len() * EXTENT_BYTES);
    v.extend_from_slice(&ext.size.to_le_bytes());
    v.extend_from_slice(&encode_extents(&ext.list));
    v
}

/// Decodes and checks the wire form (see [`wire_encode`]); never panics.
pub fn wire_decode(data: &[u8]) -> std::result::Result<Extents, String> {
    let Some((size, list)) = data.split_first_chunk::<8>() else {
        return Err("content shorter than its size field".into());
    };
    let size = u64::from_le_bytes(*size);
    if size <= CS {
        return Err(format!("a {size}-byte file has no content object"));
    }
    decode_row(FORMAT_EXTENTS, list, size)
}

/// Stores a content object received in its wire form, after checking it is `hash`.
pub fn insert_wire(db: &Connection, hash: &Hash, data: &[u8]) -> Result<()> {
    let ext = wire_decode(data).map_err(|reason| Error::Corrupt {
        path: Default::default(),
        reason: format!("content {}: {reason}", hash.to_hex()),
    })?;
    if hash_of(&ext) != *hash {
        return Err(Error::Corrupt {
            path: Default::default(),
            reason: format!("content {} fails its hash", hash.to_hex()),
        });
    }
    db.prepare_cached(
        "INSERT OR IGNORE INTO content (hash, size, chunks, format) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![
        &hash.0[..],
        ext.size as i64,
        encode_extents(&ext.list),
        FORMAT_EXTENTS
    ])?;
    Ok(())
}

/// The wire form of stored (or promised) content `hash`.
pub fn wire_of(db: &Connection, hash: &Hash) -> Result<Vec<u8>> {
    let size: Option<i64> = db
        .prepare_cached("SELECT size FROM content WHERE hash = ?1")?
        .query_row([&hash.0[..]], |r| r.get(0))
        .optional()?;
    match size {
        Some(size) => Ok(wire_encode(&*extents(db, hash, size as u64)?)),
        None => super::missing::fetch(db, super::missing::Missing::Content, hash)?
            .ok_or_else(|| missing("content", hash)),
    }
}

/// Records the extent map of a file whose chunks are stored already; returns its content
/// hash. Blocks of zeros are dropped (holes), so sparse and dense writes of the same bytes
/// get the same hash; a file of one block or less is stored as exactly its bytes.
pub fn store_extents(db: &Connection, mut ext: Extents) -> Result<Hash> {
    check_size(ext.size)?;
    if ext.size <= CS {
        let data = match ext.list.first() {
            Some((0, h)) => {
                let d = get_chunk(db, h)?;
                if d.len() as u64 == ext.size {
                    return Ok(*h);
                }
                d
            }
            _ => vec![],
        };
        let mut data = data;
        data.resize(ext.size as usize, 0);
        return put_chunk(db, &data);
    }
    let zero = zero_block_hash();
    let last = ext.blocks() - 1;
    let last_len = (ext.size - last * CS) as usize;
    let last_zero = (last_len < CHUNK_SIZE && ext.list.last().is_some_and(|(b, _)| *b == last))
        .then(|| Hash::of(&vec![0u8; last_len]));
    ext.list
        .retain(|(b, h)| *h != zero && *h != HOLE && !(*b == last && Some(*h) == last_zero));
    let hash = hash_of(&ext);
    db.prepare_cached(
        "INSERT OR IGNORE INTO content (hash, size, chunks, format) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![
        &hash.0[..],
        ext.size as i64,
        encode_extents(&ext.list),
        FORMAT_EXTENTS
    ])?;
    Ok(hash)
}

/// Hash of a full block of zeros.
pub fn zero_block_hash() -> Hash {
    static ZERO: std::sync::OnceLock<Hash> = std::sync::OnceLock::new();
    *ZERO.get_or_init(|| Hash::of(&[0u8; CHUNK_SIZE]))
}

/// Stores a whole file's bytes; returns its content hash and size.
pub fn write_bytes(db: &Connection, data: &[u8]) -> Result<(Hash, u64)> {
    let size = data.len() as u64;
    check_size(size)?;
    if data.len() <= CHUNK_SIZE {
        return Ok((put_chunk(db, data)?, size));
    }
    let mut list = Vec::new();
    for (i, c) in data.chunks(CHUNK_SIZE).enumerate() {
        if c.iter().any(|b| *b != 0) {
            list.push((i as u64, put_chunk(db, c)?));
        }
    }
    Ok((store_extents(db, Extents { size, list })?, size))
}

/// Reads up to `len` bytes at `offset` (fewer at the end of the file).
pub fn read_at(db: &Connection, ext: &Extents, offset: u64, len: usize) -> Result<Vec<u8>> {
    if offset >= ext.size || len == 0 {
        return Ok(vec![]);
    }
    let end = offset.saturating_add(len as u64).min(ext.size);
    let mut out = vec![0u8; (end - offset) as usize];
    let mut i = ext.first_from(offset / CS);
    while let Some((b, h)) = ext.list.get(i) {
        let start = b * CS;
        if start >= end {
            break;
        }
        let data = get_chunk(db, h)?;
        // The part of this block inside [offset, end), and what of it the chunk holds (a
        // short chunk reads as zeros after its end).
        let from = offset.max(start);
        let to = end.min(start + CS);
        let have = (start + data.len() as u64).min(to);
        if have > from {
            out[(from - offset) as usize..(have - offset) as usize]
                .copy_from_slice(&data[(from - start) as usize..(have - start) as usize]);
        }
        i += 1;
    }
    Ok(out)
}

/// Reads a whole file into memory. Only for files a caller has bounded the size of
/// (patches, merges, indexing): everything else streams with [`copy_to`].
pub fn read_all(db: &Connection, hash: &Hash, size: u64) -> Result<Vec<u8>> {
    let ext = extents(db, hash, size)?;
    read_at(db, &ext, 0, size as usize)
}

/// Writes a file's bytes to `out` one block at a time (holes as zeros): memory stays at
/// one block whatever the size.
pub fn copy_to(
    db: &Connection,
    hash: &Hash,
    size: u64,
    out: &mut dyn std::io::Write,
) -> Result<()> {
    let ext = extents(db, hash, size)?;
    let zeros = vec![0u8; CHUNK_SIZE];
    let mut pos = 0u64;
    let mut write = |data: &[u8]| out.write_all(data).map_err(|e| Error::host("write", e));
    for (b, h) in &ext.list {
        let start = b * CS;
        while pos < start {
            let n = (start - pos).min(CS) as usize;
            write(&zeros[..n])?;
            pos += n as u64;
        }
        let want = (size - start).min(CS) as usize;
        let data = get_chunk(db, h)?;
        let have = data.len().min(want);
        write(&data[..have])?;
        write(&zeros[..want - have])?;
        pos = start + want as u64;
    }
    while pos < size {
        let n = (size - pos).min(CS) as usize;
        write(&zeros[..n])?;
        pos += n as u64;
    }
    Ok(())
}

/// Writes a file's bytes into a new, empty host file, leaving holes as holes (only the
/// stored blocks are written; the size is set at the end).
pub fn copy_to_file(db: &Connection, hash: &Hash, size: u64, file: &std::fs::File) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let ext = extents(db, hash, size)?;
    for (b, h) in &ext.list {
        let start = b * CS;
        let want = (size - start).min(CS) as usize;
        let mut data = get_chunk(db, h)?;
        data.truncate(want);
        file.write_all_at(&data, start)
            .map_err(|e| Error::host("write", e))?;
    }
    file.set_len(size).map_err(|e| Error::host("write", e))?;
    Ok(())
}

/// The content of a file cut or extended (with a hole) to `new_size`: O(extents).
pub fn resize(db: &Connection, hash: &Hash, size: u64, new_size: u64) -> Result<Hash> {
    if new_size == size {
        return Ok(*hash);
    }
    let mut p = Patch::new(db, hash, size)?;
    p.truncate(db, new_size)?;
    Ok(p.commit(db)?.0)
}

/// Does the stored content `hash` of a `size`-byte file still exist (with its chunks)?
/// A writer that kept a hash across transactions checks this before it builds on it.
pub fn exists(db: &Connection, hash: &Hash, size: u64) -> Result<bool> {
    let sql = if size <= CS {
        "SELECT 1 FROM chunk WHERE hash = ?1"
    } else {
        "SELECT 1 FROM content WHERE hash = ?1"
    };
    Ok(db
        .prepare_cached(sql)?
        .query_row([&hash.0[..]], |_| Ok(()))
        .optional()?
        .is_some())
}

#[cfg(test)]
mod tests;
