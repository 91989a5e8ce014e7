//! Changes buffered over a stored content: writes, truncations and punched holes land in
//! memory, per 64 KiB block, and become a new content in one `commit`. The mount keeps one
//! per file being written; `avfs write --append` and `resize` use one too.
//!
//! Every operation costs O(blocks it touches + extents), never O(size): growing a file to
//! 16 TiB or punching a 1 TiB hole allocates nothing.

use std::collections::BTreeMap;
use std::sync::Arc;

use rusqlite::Connection;

use super::{CS, Extents, check_size, end_of, extents, store_extents};
use crate::error::Result;
use crate::store::objects::{CHUNK_SIZE, Hash, get_chunk, put_chunk};

pub struct Patch {
    /// The stored content the changes apply to.
    base: Arc<Extents>,
    /// Bytes of `base` still in the file: a truncation cuts it, a later extension must
    /// read zeros there, not the old bytes.
    base_size: u64,
    /// The file's size with the changes.
    size: u64,
    /// Replaced blocks. A block holds its first `len()` bytes (at most CHUNK_SIZE); the
    /// rest reads as zeros, so an empty block is a hole and a small file costs its size.
    blocks: BTreeMap<u64, Vec<u8>>,
    /// Bytes held by `blocks`.
    held: usize,
}

impl Patch {
    pub fn new(db: &Connection, hash: &Hash, size: u64) -> Result<Patch> {
        let base = extents(db, hash, size)?;
        Ok(Patch {
            base,
            base_size: size,
            size,
            blocks: BTreeMap::new(),
            held: 0,
        })
    }

    /// The size of the file with the changes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Memory the buffered blocks take.
    pub fn bytes(&self) -> usize {
        self.held
    }

    /// The stored chunk of block `idx`, if it is still part of the file.
    fn base_chunk(&self, idx: u64) -> Option<&Hash> {
        if idx * CS >= self.base_size {
            return None;
        }
        let i = self.base.first_from(idx);
        match self.base.list.get(i) {
            Some((b, h)) if *b == idx => Some(h),
            _ => None,
        }
    }

    /// The stored bytes of block `idx` up to the old end of file (a hole: none).
    fn base_block(&self, db: &Connection, idx: u64) -> Result<Vec<u8>> {
        let Some(h) = self.base_chunk(idx) else {
            return Ok(vec![]);
        };
        let mut data = get_chunk(db, h)?;
        // Bytes beyond the old end of file are zeros, even if the stored chunk is longer.
        let valid = (self.base_size - idx * CS).min(CS) as usize;
        data.truncate(valid);
        Ok(data)
    }

    fn block_mut(&mut self, db: &Connection, idx: u64) -> Result<&mut Vec<u8>> {
        if !self.blocks.contains_key(&idx) {
            let b = self.base_block(db, idx)?;
            self.held += b.len();
            self.blocks.insert(idx, b);
        }
        Ok(self.blocks.get_mut(&idx).unwrap())
    }

    fn set_block(&mut self, idx: u64, data: Vec<u8>) {
        self.held += data.len();
        if let Some(old) = self.blocks.insert(idx, data) {
            self.held -= old.len();
        }
    }

    /// Cuts block `idx` to its first `keep` bytes (the rest reads as zeros).
    fn cut_block(&mut self, db: &Connection, idx: u64, keep: usize) -> Result<()> {
        let b = self.block_mut(db, idx)?;
        let before = b.len();
        b.truncate(keep);
        let after = b.len();
        self.held -= before - after;
        Ok(())
    }

    /// Before the file grows past a partial last block: the bytes between the old end and
    /// the new data read as zeros, whatever the stored chunk holds past the end.
    fn zero_tail(&mut self, db: &Connection) -> Result<()> {
        if !self.size.is_multiple_of(CS) {
            self.cut_block(db, self.size / CS, (self.size % CS) as usize)?;
        }
        Ok(())
    }

    pub fn write(&mut self, db: &Connection, offset: u64, data: &[u8]) -> Result<()> {
        let end = end_of(offset, data.len() as u64)?;
        if data.is_empty() {
            return Ok(());
        }
        if offset > self.size {
            self.zero_tail(db)?;
        }
        let mut done = 0usize;
        while done < data.len() {
            let pos = offset + done as u64;
            let idx = pos / CS;
            let within = (pos % CS) as usize;
            let n = (CHUNK_SIZE - within).min(data.len() - done);
            // A write covering a whole block needs no read of the old block.
            if within == 0 && n == CHUNK_SIZE {
                self.set_block(idx, data[done..done + n].to_vec());
            } else {
                let b = self.block_mut(db, idx)?;
                let before = b.len();
                if b.len() < within + n {
                    b.resize(within + n, 0);
                }
                b[within..within + n].copy_from_slice(&data[done..done + n]);
                let after = b.len();
                self.held += after - before;
            }
            done += n;
        }
        self.size = self.size.max(end);
        Ok(())
    }

    pub fn truncate(&mut self, db: &Connection, size: u64) -> Result<()> {
        check_size(size)?;
        if size < self.size {
            // Zero the cut-off tail of the new last block so a later extension reads zeros.
            if !size.is_multiple_of(CS) {
                self.cut_block(db, size / CS, (size % CS) as usize)?;
            }
            let keep = size.div_ceil(CS);
            for (_, b) in self.blocks.split_off(&keep) {
                self.held -= b.len();
            }
            self.base_size = self.base_size.min(size);
        } else if size > self.size {
            self.zero_tail(db)?;
        }
        self.size = size;
        Ok(())
    }

    /// Makes `[offset, offset + len)` read as zeros (FALLOC_FL_PUNCH_HOLE with KEEP_SIZE):
    /// whole blocks become holes, partial ones are zeroed. The size does not change.
    pub fn punch(&mut self, db: &Connection, offset: u64, len: u64) -> Result<()> {
        let end = offset.saturating_add(len).min(self.size);
        if offset >= end {
            return Ok(());
        }
        let first_full = offset.div_ceil(CS);
        let end_full = end / CS;
        // Partial blocks at either end: zero the covered bytes.
        let partial = |this: &mut Patch, from: u64, to: u64| -> Result<()> {
            let idx = from / CS;
            let b = this.block_mut(db, idx)?;
            let (f, t) = ((from % CS) as usize, ((to - 1) % CS) as usize + 1);
            if f < b.len() {
                let t = t.min(b.len());
                b[f..t].fill(0);
            }
            Ok(())
        };
        if first_full > end_full {
            // Inside one block.
            return partial(self, offset, end);
        }
        if offset < first_full * CS {
            partial(self, offset, first_full * CS)?;
        }
        if end > end_full * CS {
            partial(self, end_full * CS, end)?;
        }
        // Whole blocks: the buffered ones and the stored ones in the range become holes.
        let inside: Vec<u64> = self
            .blocks
            .range(first_full..end_full)
            .map(|(i, _)| *i)
            .collect();
        for i in inside {
            self.set_block(i, Vec::new());
        }
        let from = self.base.first_from(first_full);
        let stored: Vec<u64> = self.base.list[from..]
            .iter()
            .map(|(b, _)| *b)
            .take_while(|b| *b < end_full)
            .collect();
        for i in stored {
            self.set_block(i, Vec::new());
        }
        Ok(())
    }

    pub fn read(&self, db: &Connection, offset: u64, len: usize) -> Result<Vec<u8>> {
        if offset >= self.size || len == 0 {
            return Ok(vec![]);
        }
        let end = offset.saturating_add(len as u64).min(self.size);
        let mut out = vec![0u8; (end - offset) as usize];
        let mut pos = offset;
        while pos < end {
            let idx = pos / CS;
            let within = (pos % CS) as usize;
            let n = ((CS - within as u64).min(end - pos)) as usize;
            let stored;
            let b = match self.blocks.get(&idx) {
                Some(b) => b,
                None => {
                    stored = self.base_block(db, idx)?;
                    &stored
                }
            };
            if b.len() > within {
                let have = b.len().min(within + n);
                let at = (pos - offset) as usize;
                out[at..at + have - within].copy_from_slice(&b[within..have]);
            }
            pos += n as u64;
        }
        Ok(out)
    }

    /// Is block `idx` data (buffered with bytes, or stored and not replaced)?
    fn is_data(&self, idx: u64) -> bool {
        match self.blocks.get(&idx) {
            Some(b) => !b.is_empty(),
            None => self.base_chunk(idx).is_some(),
        }
    }

    /// `SEEK_DATA` over the changed file.
    pub fn next_data(&self, offset: u64) -> Option<u64> {
        if offset >= self.size {
            return None;
        }
        let start = offset / CS;
        let buffered = self
            .blocks
            .range(start..)
            .find(|(_, b)| !b.is_empty())
            .map(|(i, _)| *i);
        let mut stored = None;
        for (b, _) in &self.base.list[self.base.first_from(start)..] {
            if b * CS >= self.base_size {
                break;
            }
            if !self.blocks.contains_key(b) {
                stored = Some(*b);
                break;
            }
        }
        let idx = match (buffered, stored) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        (idx * CS < self.size).then(|| (idx * CS).max(offset))
    }

    /// `SEEK_HOLE` over the changed file: the first hole at or after `offset`, or the size.
    pub fn next_hole(&self, offset: u64) -> u64 {
        if offset >= self.size {
            return self.size;
        }
        let mut idx = offset / CS;
        while idx * CS < self.size && self.is_data(idx) {
            idx += 1;
        }
        (idx * CS).clamp(offset, self.size)
    }

    /// Stores the changed blocks and returns the new content hash and size: O(extents +
    /// changed blocks).
    pub fn commit(&self, db: &Connection) -> Result<(Hash, u64)> {
        let size = self.size;
        let nblocks = size.div_ceil(CS);
        let len_of = |idx: u64| (size - idx * CS).min(CS) as usize;
        let mut list: Vec<(u64, Hash)> = Vec::new();
        let mut buffered = self.blocks.range(..nblocks).peekable();
        let mut stored = self
            .base
            .list
            .iter()
            .filter(|(b, _)| *b < nblocks)
            .peekable();
        loop {
            let next_b = buffered.peek().map(|(i, _)| **i);
            let next_s = stored.peek().map(|(b, _)| *b);
            let (idx, from_buffer) = match (next_b, next_s) {
                (None, None) => break,
                (Some(b), Some(s)) if b <= s => (b, true),
                (Some(b), None) => (b, true),
                (_, Some(s)) => (s, false),
            };
            if from_buffer {
                let (_, data) = buffered.next().unwrap();
                if next_s == Some(idx) {
                    stored.next();
                }
                let len = len_of(idx);
                let data = &data[..data.len().min(len)];
                if nblocks > 1 && data.iter().all(|x| *x == 0) {
                    continue;
                }
                list.push((idx, put_chunk(db, &zero_padded(data, len))?));
            } else {
                let (_, h) = stored.next().unwrap();
                if idx * CS >= self.base_size {
                    continue;
                }
                // An untouched stored block; the last one may need cutting or padding.
                let stored_len = (self.base_size - idx * CS).min(CS) as usize;
                let len = len_of(idx);
                if stored_len == len {
                    list.push((idx, *h));
                } else {
                    let d = self.base_block(db, idx)?;
                    list.push((idx, put_chunk(db, &zero_padded(&d, len))?));
                }
            }
        }
        if nblocks <= 1 && list.is_empty() {
            // One block or less is stored as exactly its bytes, even all zeros.
            list.push((0, put_chunk(db, &vec![0; size as usize])?));
        }
        let hash = store_extents(db, Extents { size, list })?;
        Ok((hash, size))
    }
}

/// The first `len` bytes of a block that holds `b` and zeros after it.
fn zero_padded(b: &[u8], len: usize) -> Vec<u8> {
    let mut v = b[..b.len().min(len)].to_vec();
    v.resize(len, 0);
    v
}
