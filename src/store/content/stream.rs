//! Storing a whole file from a stream or a host path: blocks are read in batches, hashed
//! on every core, the ones the vault lacks compressed on every core, and inserted in
//! order by the calling thread (SQLite has one writer).
//! Blocks of zeros, and the holes of a sparse host file, are not stored.

use std::collections::HashSet;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use rusqlite::Connection;

use super::{CS, Extents, MAX_FILE_SIZE, check_size, store_extents};
use crate::error::{Error, Result};
use crate::store::objects::{
    CHUNK_SIZE, ChunkRow, Hash, Packing, compress_chunk, has_chunk, put_chunk_row,
};

/// Blocks read and hashed together (4 MiB).
const BATCH: usize = 64;

/// One block read from the source: its index and bytes.
type Block = (u64, Vec<u8>);

/// Runs `f` over `items` on every core; the results in order.
fn par_map<T: Sync, U: Send>(items: &[T], f: impl Fn(&T) -> U + Sync) -> Vec<U> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(items.len().div_ceil(4).max(1));
    if threads <= 1 {
        return items.iter().map(&f).collect();
    }
    let per = items.len().div_ceil(threads);
    let f = &f;
    std::thread::scope(|s| {
        let parts: Vec<_> = items
            .chunks(per)
            .map(|part| s.spawn(move || part.iter().map(f).collect::<Vec<_>>()))
            .collect();
        parts
            .into_iter()
            .flat_map(|p| p.join().unwrap_or_default())
            .collect()
    })
}

/// Collects blocks into an extent map, storing them batch by batch.
struct Builder<'a> {
    db: &'a Connection,
    list: Vec<(u64, Hash)>,
    batch: Vec<Block>,
    /// Block 0, kept until the file turns out larger than one block: a one-block file is
    /// stored as exactly its bytes, zeros included.
    first: Option<Vec<u8>>,
}

impl Builder<'_> {
    fn push(&mut self, idx: u64, data: Vec<u8>) -> Result<()> {
        if idx == 0 {
            self.first = Some(data.clone());
        }
        self.batch.push((idx, data));
        if self.batch.len() >= BATCH {
            self.store_batch()?;
        }
        Ok(())
    }

    /// Hashes the batch on every core, then compresses (on every core) and stores only
    /// the blocks the vault lacks: looked up on the writing connection, inside its
    /// transaction, so it sees the blocks this file stored already and nothing can take
    /// a chunk found there before the content referencing it is committed.
    fn store_batch(&mut self) -> Result<()> {
        let hashes = par_map(&self.batch, |(_, d)| {
            (!d.iter().all(|b| *b == 0)).then(|| Hash::of(d))
        });
        let mut seen = HashSet::new();
        let mut new = Vec::new();
        for (i, h) in hashes.iter().enumerate() {
            if let Some(h) = h
                && seen.insert(*h)
                && !has_chunk(self.db, h)?
            {
                new.push(i);
            }
        }
        let batch = &self.batch;
        let packed = par_map(&new, |&i| compress_chunk(&batch[i].1, Packing::Fast));
        let mut packed = new.into_iter().zip(packed).peekable();
        for (i, ((idx, data), h)) in self.batch.drain(..).zip(hashes).enumerate() {
            let Some(h) = h else { continue };
            if let Some((_, p)) = packed.next_if(|(j, _)| *j == i) {
                put_chunk_row(self.db, &ChunkRow::with(h, data, p))?;
            }
            self.list.push((idx, h));
        }
        Ok(())
    }

    fn finish(mut self, size: u64) -> Result<(Hash, u64)> {
        check_size(size)?;
        if size <= CS {
            let mut data = self.first.take().unwrap_or_default();
            data.resize(size as usize, 0);
            return Ok((crate::store::objects::put_chunk(self.db, &data)?, size));
        }
        self.store_batch()?;
        let ext = Extents {
            size,
            list: std::mem::take(&mut self.list),
        };
        Ok((store_extents(self.db, ext)?, size))
    }
}

fn builder(db: &Connection) -> Builder<'_> {
    Builder {
        db,
        list: Vec::new(),
        batch: Vec::with_capacity(BATCH),
        first: None,
    }
}

/// Reads `buf.len()` bytes or up to the end of the stream; returns how many.
fn read_full(r: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Stores everything `r` yields as one file; returns its content hash and size. Memory
/// stays at one batch (4 MiB) whatever the size.
pub fn write_from_reader(db: &Connection, r: &mut dyn Read) -> Result<(Hash, u64)> {
    let mut b = builder(db);
    let mut size = 0u64;
    loop {
        let mut buf = vec![0u8; CHUNK_SIZE];
        let got = read_full(r, &mut buf).map_err(|e| Error::host("read", e))?;
        if got == 0 {
            break;
        }
        buf.truncate(got);
        check_size(size + got as u64)?;
        b.push(size / CS, buf)?;
        size += got as u64;
        if got < CHUNK_SIZE {
            break;
        }
    }
    b.finish(size)
}

/// The data regions of an open file, from `SEEK_DATA`/`SEEK_HOLE`: (start, end) pairs.
/// A file system without them (or an error) yields the whole file as one region.
pub fn data_regions(f: &std::fs::File, size: u64) -> Vec<(u64, u64)> {
    let fd = f.as_raw_fd();
    let mut out = Vec::new();
    let mut pos = 0u64;
    while pos < size {
        // SAFETY: lseek on an fd this function's caller keeps open.
        let data = unsafe { libc::lseek(fd, pos as libc::off_t, libc::SEEK_DATA) };
        if data < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO) {
                break; // no data after pos
            }
            return vec![(0, size)];
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        if hole < 0 {
            return vec![(0, size)];
        }
        let (start, end) = (data as u64, (hole as u64).min(size));
        if end <= start {
            break;
        }
        out.push((start, end));
        pos = end;
    }
    out
}

/// Stores a host file (never following a symlink); returns its content hash and size.
/// Reads up to the size `fstat` reports when it starts; the holes of a sparse file are
/// skipped without reading them.
pub fn write_from_path(db: &Connection, path: &Path) -> Result<(Hash, u64)> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| Error::host(path.display(), e))?;
    let m = f.metadata().map_err(|e| Error::host(path.display(), e))?;
    if !m.is_file() {
        return Err(Error::InvalidArgument(
            path.display().to_string(),
            "not a regular file".into(),
        ));
    }
    write_from_file(db, &f, m.len(), &path.display().to_string())
}

/// `write_from_path` on a file the caller opened and checked (`size` from its fstat).
pub fn write_from_file(
    db: &Connection,
    f: &std::fs::File,
    size: u64,
    shown: &str,
) -> Result<(Hash, u64)> {
    if size > MAX_FILE_SIZE {
        check_size(size)?;
    }
    let mut b = builder(db);
    let mut next = 0u64; // first block not yet read
    // Set when a read ends early: the file shrank while it was read, and ends there.
    let mut shrunk: Option<u64> = None;
    'regions: for (start, stop) in data_regions(f, size) {
        let mut idx = (start / CS).max(next);
        while idx * CS < stop {
            let want = (size - idx * CS).min(CS) as usize;
            let mut buf = vec![0u8; want];
            let mut got = 0;
            while got < want {
                match f.read_at(&mut buf[got..], idx * CS + got as u64) {
                    Ok(0) => break,
                    Ok(n) => got += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(Error::host(shown, e)),
                }
            }
            buf.truncate(got);
            if got > 0 {
                b.push(idx, buf)?;
            }
            if got < want {
                shrunk = Some(idx * CS + got as u64);
                break 'regions;
            }
            idx += 1;
        }
        next = idx;
    }
    b.finish(shrunk.unwrap_or(size))
}
