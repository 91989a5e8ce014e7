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
    /// The modification time the file gets when the buffer is stored: the time of the
    /// last write, unless a later utimensat (tar, `cp -p`, `touch -d`) set one.
    pub mtime_ns: i64,
    /// Replaced blocks. A block holds its first `len()` bytes, at most CHUNK_SIZE; the
    /// rest of it reads as zeros (so a small file costs its size, not a 64 KiB block).
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
            mtime_ns: crate::store::now_ns(),
            blocks: BTreeMap::new(),
        })
    }

    pub fn bytes(&self) -> usize {
        self.blocks.len() * CHUNK_SIZE
    }

    /// The stored bytes of block `idx` up to the old end of file (holes: none); what
    /// is missing up to CHUNK_SIZE reads as zeros.
    fn base_block(&self, db: &Connection, idx: u64) -> Result<Vec<u8>> {
        let start = idx * CHUNK_SIZE as u64;
        let mut data = match self.base.get(idx as usize) {
            Some(h) if *h != HOLE && start < self.base_size => objects::get_chunk(db, h)?,
            _ => vec![],
        };
        // Bytes beyond the old end of file are zeros, even if the stored chunk is longer.
        let valid = self.base_size.saturating_sub(start).min(CHUNK_SIZE as u64) as usize;
        data.truncate(valid);
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
        self.mtime_ns = crate::store::now_ns();
        let cs = CHUNK_SIZE as u64;
        // Growing past a partial last block: bytes between old end and the write are zeros.
        if offset > self.size && !self.size.is_multiple_of(cs) {
            let idx = self.size / cs;
            let from = (self.size % cs) as usize;
            self.block_mut(db, idx)?.truncate(from);
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
                if b.len() < within + n {
                    b.resize(within + n, 0);
                }
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
                self.block_mut(db, idx)?.truncate(from);
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
            self.block_mut(db, idx)?.truncate(from);
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
            let stored;
            let b = match self.blocks.get(&idx) {
                Some(b) => b,
                None => {
                    stored = self.base_block(db, idx)?;
                    &stored
                }
            };
            if b.len() > within {
                out.extend_from_slice(&b[within..b.len().min(within + n)]);
            }
            out.resize(
                out.len() + (within + n).saturating_sub(b.len().max(within)),
                0,
            );
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
                Some(b) if b[..b.len().min(len)].iter().all(|x| *x == 0) && nblocks > 1 => HOLE,
                Some(b) if b.len() >= len => objects::put_chunk(db, &b[..len])?,
                Some(b) => objects::put_chunk(db, &zero_padded(b, len))?,
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
                            let d = self.base_block(db, idx)?;
                            objects::put_chunk(db, &zero_padded(&d, len))?
                        }
                    }
                    Some(h) if *h != HOLE && idx * cs < self.base_size => {
                        let d = self.base_block(db, idx)?;
                        objects::put_chunk(db, &zero_padded(&d, len))?
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

/// The first `len` bytes of a block that holds `b` and zeros after it.
fn zero_padded(b: &[u8], len: usize) -> Vec<u8> {
    let mut v = b[..b.len().min(len)].to_vec();
    v.resize(len, 0);
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    /// Random writes, truncates, reads and commits against a plain byte vector.
    #[test]
    fn matches_a_byte_vector_model() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(&dir.path().join("v.avfs")).unwrap();
        let db = &store.conn;
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n.max(1)
        };
        let cs = CHUNK_SIZE as u64;
        for _ in 0..40 {
            let mut model: Vec<u8> = Vec::new();
            let mut f = DirtyFile::new(db, &HOLE, 0).unwrap();
            for _ in 0..60 {
                match rnd(5) {
                    0 | 1 => {
                        let off = rnd(3 * cs + 10);
                        let max = if rnd(4) == 0 { cs + 100 } else { 300 };
                        let len = rnd(max) as usize;
                        let byte = rnd(255) as u8 + 1;
                        let data = vec![byte; len];
                        f.write(db, off, &data).unwrap();
                        if model.len() < off as usize + len {
                            model.resize(off as usize + len, 0);
                        }
                        model[off as usize..off as usize + len].copy_from_slice(&data);
                    }
                    2 => {
                        let size = rnd(3 * cs + 10);
                        f.truncate(db, size).unwrap();
                        model.resize(size as usize, 0);
                    }
                    3 => {
                        let off = rnd(model.len() as u64 + 10);
                        let len = rnd(2 * cs) as usize;
                        let want: Vec<u8> =
                            model.iter().skip(off as usize).take(len).copied().collect();
                        assert_eq!(f.read(db, off, len).unwrap(), want);
                    }
                    _ => {
                        // Commit, then continue on top of the stored content.
                        let (hash, size) = f.commit(db).unwrap();
                        assert_eq!(size, model.len() as u64);
                        if size > 0 {
                            assert_eq!(objects::read_all(db, &hash, size).unwrap(), model);
                        }
                        f = DirtyFile::new(db, &hash, size).unwrap();
                    }
                }
            }
        }
    }
}
