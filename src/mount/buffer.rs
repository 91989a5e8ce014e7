//! Write buffering: kernel write requests land in memory, per inode, in 64 KiB blocks,
//! and reach SQLite as one transaction when the file is flushed (close, fsync, a
//! checkpoint request, memory pressure), never one transaction per write request.

use std::collections::BTreeMap;

use rusqlite::Connection;

use crate::error::Result;
use crate::store::objects::{self, CHUNK_SIZE, HOLE, Hash};

/// Unflushed changes to one file.
pub struct DirtyFile {
    /// Chunk list of the stored content the buffer applies to.
    base: Vec<Hash>,
    base_size: u64,
    /// Size of the stored content when the buffer began (what a quota already counts).
    pub stored_size: u64,
    /// New size of the file.
    pub size: u64,
    /// Replaced blocks, each exactly CHUNK_SIZE bytes (the tail past `size` is ignored).
    blocks: BTreeMap<u64, Vec<u8>>,
}

impl DirtyFile {
    pub fn new(db: &Connection, hash: &Hash, size: u64) -> Result<DirtyFile> {
        let base = if size == 0 {
            vec![]
        } else {
            objects::chunk_list(db, hash, size)?
        };
        Ok(DirtyFile {
            base,
            base_size: size,
            stored_size: size,
            size,
            blocks: BTreeMap::new(),
        })
    }

    pub fn bytes(&self) -> usize {
        self.blocks.len() * CHUNK_SIZE
    }

    /// The stored bytes of block `idx` (zeros for holes and past the old end).
    fn base_block(&self, db: &Connection, idx: u64) -> Result<Vec<u8>> {
        let start = idx * CHUNK_SIZE as u64;
        let mut data = match self.base.get(idx as usize) {
            Some(h) if *h != HOLE && start < self.base_size => objects::get_chunk(db, h)?,
            _ => vec![],
        };
        // Bytes beyond the old end of file are zeros, even if the stored chunk is longer.
        let valid = self.base_size.saturating_sub(start).min(CHUNK_SIZE as u64) as usize;
        data.truncate(valid);
        data.resize(CHUNK_SIZE, 0);
        Ok(data)
    }

    fn block_mut(&mut self, db: &Connection, idx: u64) -> Result<&mut Vec<u8>> {
        if !self.blocks.contains_key(&idx) {
            let b = self.base_block(db, idx)?;
            self.blocks.insert(idx, b);
        }
        Ok(self.blocks.get_mut(&idx).unwrap())
    }

    pub fn write(&mut self, db: &Connection, offset: u64, data: &[u8]) -> Result<()> {
        let cs = CHUNK_SIZE as u64;
        // Growing past a partial last block: bytes between old end and the write are zeros.
        if offset > self.size && !self.size.is_multiple_of(cs) {
            let idx = self.size / cs;
            let from = (self.size % cs) as usize;
            let b = self.block_mut(db, idx)?;
            b[from..].fill(0);
        }
        let mut done = 0usize;
        while done < data.len() {
            let pos = offset + done as u64;
            let idx = pos / cs;
            let within = (pos % cs) as usize;
            let n = (CHUNK_SIZE - within).min(data.len() - done);
            // A write covering a whole block needs no read of the old block.
            if within == 0 && n == CHUNK_SIZE {
                self.blocks.insert(idx, data[done..done + n].to_vec());
            } else {
                let b = self.block_mut(db, idx)?;
                b[within..within + n].copy_from_slice(&data[done..done + n]);
            }
            done += n;
        }
        self.size = self.size.max(offset + data.len() as u64);
        Ok(())
    }

    pub fn truncate(&mut self, db: &Connection, size: u64) -> Result<()> {
        let cs = CHUNK_SIZE as u64;
        if size < self.size {
            // Zero the cut-off tail of the new last block so a later extension reads zeros.
            if !size.is_multiple_of(cs) {
                let idx = size / cs;
                let from = (size % cs) as usize;
                let b = self.block_mut(db, idx)?;
                b[from..].fill(0);
            }
            let keep = size.div_ceil(cs);
            self.blocks.retain(|i, _| *i < keep);
            if self.base.len() as u64 > keep {
                self.base.truncate(keep as usize);
            }
            self.base_size = self.base_size.min(size);
        } else if size > self.size && !self.size.is_multiple_of(cs) {
            let idx = self.size / cs;
            let from = (self.size % cs) as usize;
            let b = self.block_mut(db, idx)?;
            b[from..].fill(0);
        }
        self.size = size;
        Ok(())
    }

    pub fn read(&self, db: &Connection, offset: u64, len: usize) -> Result<Vec<u8>> {
        if offset >= self.size {
            return Ok(vec![]);
        }
        let end = (offset + len as u64).min(self.size);
        let cs = CHUNK_SIZE as u64;
        let mut out = Vec::with_capacity((end - offset) as usize);
        let mut pos = offset;
        while pos < end {
            let idx = pos / cs;
            let within = (pos % cs) as usize;
            let n = ((cs - within as u64).min(end - pos)) as usize;
            match self.blocks.get(&idx) {
                Some(b) => out.extend_from_slice(&b[within..within + n]),
                None => out.extend_from_slice(&self.base_block(db, idx)?[within..within + n]),
            }
            pos += n as u64;
        }
        Ok(out)
    }

    /// Stores the changed blocks and returns the new content hash and size.
    pub fn commit(&self, db: &Connection) -> Result<(Hash, u64)> {
        let cs = CHUNK_SIZE as u64;
        let nblocks = self.size.div_ceil(cs) as usize;
        let mut chunks = Vec::with_capacity(nblocks);
        for idx in 0..nblocks as u64 {
            let len = (self.size - idx * cs).min(cs) as usize;
            let h = match self.blocks.get(&idx) {
                Some(b) if b[..len].iter().all(|x| *x == 0) && nblocks > 1 => HOLE,
                Some(b) => objects::put_chunk(db, &b[..len])?,
                None => match self.base.get(idx as usize) {
                    // An untouched stored block; the last one may need cutting to size.
                    Some(h)
                        if *h != HOLE
                            && idx * cs < self.base_size
                            && (idx as usize + 1 < nblocks || len == CHUNK_SIZE) =>
                    {
                        let stored_len = (self.base_size - idx * cs).min(cs) as usize;
                        if stored_len == len {
                            *h
                        } else {
                            let mut d = self.base_block(db, idx)?;
                            d.truncate(len);
                            objects::put_chunk(db, &d)?
                        }
                    }
                    Some(h) if *h != HOLE && idx * cs < self.base_size => {
                        let mut d = self.base_block(db, idx)?;
                        d.truncate(len);
                        objects::put_chunk(db, &d)?
                    }
                    _ if nblocks > 1 => HOLE,
                    _ => objects::put_chunk(db, &vec![0; len])?,
                },
            };
            chunks.push(h);
        }
        let hash = objects::put_chunk_list(db, &chunks, self.size)?;
        Ok((hash, self.size))
    }
}
