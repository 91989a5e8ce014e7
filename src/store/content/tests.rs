use super::*;
use crate::store::Store;

fn vault() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("v.avfs")).unwrap();
    (dir, store)
}

fn rng(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n.max(1)
    }
}

/// Random writes, truncates, punched holes, reads, seeks and commits against a plain
/// byte vector.
#[test]
fn patch_matches_a_byte_vector_model() {
    let (_d, store) = vault();
    let db = &store.conn;
    let mut rnd = rng(0x2545_f491_4f6c_dd1d);
    for _ in 0..40 {
        let mut model: Vec<u8> = Vec::new();
        let empty = write_bytes(db, b"").unwrap().0;
        let mut f = Patch::new(db, &empty, 0).unwrap();
        for _ in 0..60 {
            match rnd(7) {
                0 | 1 => {
                    let off = rnd(3 * CS + 10);
                    let max = if rnd(4) == 0 { CS + 100 } else { 300 };
                    let len = rnd(max) as usize;
                    let byte = if rnd(5) == 0 { 0 } else { rnd(255) as u8 + 1 };
                    let data = vec![byte; len];
                    f.write(db, off, &data).unwrap();
                    if len > 0 {
                        if model.len() < off as usize + len {
                            model.resize(off as usize + len, 0);
                        }
                        model[off as usize..off as usize + len].copy_from_slice(&data);
                    }
                }
                2 => {
                    let size = rnd(3 * CS + 10);
                    f.truncate(db, size).unwrap();
                    model.resize(size as usize, 0);
                }
                3 => {
                    let off = rnd(model.len() as u64 + 10);
                    let len = rnd(2 * CS + 10);
                    f.punch(db, off, len).unwrap();
                    let end = ((off + len) as usize).min(model.len());
                    if (off as usize) < end {
                        model[off as usize..end].fill(0);
                    }
                }
                4 => {
                    let off = rnd(model.len() as u64 + 10);
                    let len = rnd(2 * CS) as usize;
                    let want: Vec<u8> =
                        model.iter().skip(off as usize).take(len).copied().collect();
                    assert_eq!(f.read(db, off, len).unwrap(), want);
                    // What SEEK_DATA/SEEK_HOLE answer must be consistent with the bytes:
                    // a hole reads as zeros, and the size is always a hole.
                    if let Some(d) = f.next_data(off) {
                        assert!(d >= off && d < model.len() as u64);
                        assert!(model[off as usize..d as usize].iter().all(|b| *b == 0));
                    } else if (off as usize) < model.len() {
                        assert!(model[off as usize..].iter().all(|b| *b == 0));
                    }
                    let h = f.next_hole(off.min(model.len() as u64));
                    assert!(h <= model.len() as u64);
                }
                _ => {
                    // Commit, then continue on top of the stored content.
                    let (hash, size) = f.commit(db).unwrap();
                    assert_eq!(size, model.len() as u64);
                    assert_eq!(read_all(db, &hash, size).unwrap(), model);
                    // The same bytes written in one go get the same hash.
                    assert_eq!(write_bytes(db, &model).unwrap().0, hash);
                    f = Patch::new(db, &hash, size).unwrap();
                }
            }
            assert_eq!(f.size(), model.len() as u64);
        }
    }
}

/// A 1 TiB file holding one byte costs one chunk and one extent; reading, seeking and
/// resizing it costs O(extents).
#[test]
fn a_sparse_terabyte_costs_one_extent() {
    let (_d, store) = vault();
    let db = &store.conn;
    let tib = 1u64 << 40;
    let empty = write_bytes(db, b"").unwrap().0;
    let mut p = Patch::new(db, &empty, 0).unwrap();
    p.truncate(db, tib).unwrap();
    p.write(db, tib / 2, b"x").unwrap();
    assert!(p.bytes() <= CHUNK_SIZE);
    let (hash, size) = p.commit(db).unwrap();
    assert_eq!(size, tib);
    let ext = extents(db, &hash, size).unwrap();
    assert_eq!(ext.list.len(), 1);
    assert_eq!(ext.allocated(), CS);
    assert_eq!(ext.next_data(0), Some(tib / 2 / CS * CS));
    assert_eq!(ext.next_hole(tib / 2), tib / 2 / CS * CS + CS);
    assert_eq!(ext.next_hole(0), 0);
    assert_eq!(ext.next_data(tib / 2 + CS), None);
    assert_eq!(read_at(db, &ext, tib / 2 - 1, 3).unwrap(), b"\0x\0");
    let chunks: i64 = db
        .query_row("SELECT COUNT(*) FROM chunk", [], |r| r.get(0))
        .unwrap();
    assert!(chunks <= 3, "{chunks} chunks stored");
    let smaller = resize(db, &hash, size, tib / 2).unwrap();
    assert_eq!(extents(db, &smaller, tib / 2).unwrap().list.len(), 0);
    // Grown to the largest size and punched whole: still nothing allocated.
    let mut p = Patch::new(db, &hash, size).unwrap();
    p.truncate(db, MAX_FILE_SIZE).unwrap();
    p.punch(db, 0, MAX_FILE_SIZE).unwrap();
    let (h, s) = p.commit(db).unwrap();
    assert_eq!(extents(db, &h, s).unwrap().list.len(), 0);
}

/// Sizes and offsets past the largest file size are refused before anything is allocated.
#[test]
fn sizes_past_the_maximum_are_refused() {
    let (_d, store) = vault();
    let db = &store.conn;
    let empty = write_bytes(db, b"").unwrap().0;
    let mut p = Patch::new(db, &empty, 0).unwrap();
    for bad in [999_999_999_999_999u64, 1 << 62, u64::MAX, MAX_FILE_SIZE + 1] {
        assert!(
            matches!(p.truncate(db, bad), Err(Error::TooBig(_))),
            "{bad}"
        );
        assert!(
            matches!(p.write(db, bad, b"x"), Err(Error::TooBig(_))),
            "{bad}"
        );
    }
    assert!(matches!(
        p.write(db, MAX_FILE_SIZE, b"x"),
        Err(Error::TooBig(_))
    ));
    p.write(db, MAX_FILE_SIZE - 1, b"x").unwrap();
    assert_eq!(p.size(), MAX_FILE_SIZE);
    assert!(matches!(
        resize(db, &empty, 0, 1 << 62),
        Err(Error::TooBig(_))
    ));
}

/// A content stored by formats 1-4 (a dense chunk list) reads the same, and the same
/// bytes written now get the same hash.
#[test]
fn dense_chunk_lists_of_older_vaults_still_read() {
    let (_d, store) = vault();
    let db = &store.conn;
    let a = crate::store::objects::put_chunk(db, &[7u8; CHUNK_SIZE]).unwrap();
    let b = crate::store::objects::put_chunk(db, b"tail").unwrap();
    let size = 3 * CS + 4;
    // The old hash: tag, size, one 32-byte entry per block (zeros for the hole).
    let mut h = blake3::Hasher::new();
    h.update(b"avfs-content-v1\0");
    h.update(&size.to_le_bytes());
    for c in [a, HOLE, a, b] {
        h.update(&c.0);
    }
    let old = Hash(*h.finalize().as_bytes());
    let mut blob = Vec::new();
    for c in [a, HOLE, a, b] {
        blob.extend_from_slice(&c.0);
    }
    db.execute(
        "INSERT INTO content (hash, size, chunks) VALUES (?1, ?2, ?3)",
        rusqlite::params![&old.0[..], size as i64, blob],
    )
    .unwrap();
    let mut want = vec![7u8; CHUNK_SIZE];
    want.extend(vec![0u8; CHUNK_SIZE]);
    want.extend(vec![7u8; CHUNK_SIZE]);
    want.extend(b"tail");
    assert_eq!(read_all(db, &old, size).unwrap(), want);
    assert_eq!(write_bytes(db, &want).unwrap().0, old);
    assert_eq!(hash_of(&extents(db, &old, size).unwrap()), old);
}

/// A stream and a (sparse) host file store the same content as the bytes in one go.
#[test]
fn streams_and_host_files_store_the_same_content() {
    let (dir, store) = vault();
    let db = &store.conn;
    let mut rnd = rng(99);
    for size in [0u64, 1, CS - 1, CS, CS + 1, 5 * CS + 17, 200 * CS + 3] {
        let mut data: Vec<u8> = (0..size).map(|_| rnd(256) as u8).collect();
        // Some blocks of zeros in the middle.
        if size > 3 * CS {
            data[CS as usize..3 * CS as usize].fill(0);
        }
        let want = write_bytes(db, &data).unwrap();
        let got = write_from_reader(db, &mut &data[..]).unwrap();
        assert_eq!(got, want, "reader, {size} bytes");
        let p = dir.path().join(format!("f{size}"));
        std::fs::write(&p, &data).unwrap();
        assert_eq!(write_from_path(db, &p).unwrap(), want, "path, {size} bytes");
        let mut out = Vec::new();
        copy_to(db, &want.0, size, &mut out).unwrap();
        assert_eq!(out, data);
    }
    // A sparse host file: 1 TiB with a few bytes; only they are read.
    let p = dir.path().join("sparse");
    let f = std::fs::File::create(&p).unwrap();
    f.set_len(1 << 40).unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(b"middle", 1 << 39).unwrap();
    let (h, s) = write_from_path(db, &p).unwrap();
    assert_eq!(s, 1 << 40);
    let ext = extents(db, &h, s).unwrap();
    assert_eq!(ext.list.len(), 1);
    assert_eq!(read_at(db, &ext, 1 << 39, 6).unwrap(), b"middle");
    // And back out as a sparse file.
    let back = dir.path().join("back");
    let out = std::fs::File::create(&back).unwrap();
    copy_to_file(db, &h, s, &out).unwrap();
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(&back).unwrap();
    assert_eq!(m.len(), 1 << 40);
    assert!(m.blocks() * 512 < 1 << 20, "{} blocks", m.blocks());
}

#[test]
fn decode_row_refuses_malformed_lists() {
    let h = Hash::of(b"x");
    let mut blob = Vec::new();
    blob.extend_from_slice(&5u64.to_le_bytes());
    blob.extend_from_slice(&h.0);
    assert!(decode_row(1, &blob, 10 * CS).is_ok());
    assert!(decode_row(1, &blob, 5 * CS).is_err(), "block past the size");
    assert!(decode_row(1, &blob[..39], 10 * CS).is_err(), "short");
    let mut twice = blob.clone();
    twice.extend_from_slice(&blob);
    assert!(decode_row(1, &twice, 10 * CS).is_err(), "duplicated");
    assert!(decode_row(2, &blob, 10 * CS).is_err(), "unknown format");
    assert!(
        decode_row(1, &blob, u64::MAX).is_err(),
        "size past the maximum"
    );
}

/// Text is stored compressed and random bytes as they are (compressing them gains
/// nothing); both read back exactly, whole and from the middle.
#[test]
fn chunks_are_stored_compressed_when_that_pays() {
    let (_d, store) = vault();
    let db = &store.conn;
    let line = b"    assert_eq!(read_at(db, &ext, offset, len)?, model[offset..]);\n";
    let text: Vec<u8> = line
        .iter()
        .copied()
        .cycle()
        .take(3 * CS as usize + 5000)
        .collect();
    let mut rnd = rng(0x9e37_79b9_7f4a_7c15);
    let noise: Vec<u8> = (0..CS + 5).map(|_| rnd(256) as u8).collect();
    let (t, _) = write_bytes(db, &text).unwrap();
    let (n, _) = write_bytes(db, &noise).unwrap();
    assert_eq!(read_all(db, &t, text.len() as u64).unwrap(), text);
    assert_eq!(read_all(db, &n, noise.len() as u64).unwrap(), noise);
    let ext = extents(db, &t, text.len() as u64).unwrap();
    assert_eq!(
        read_at(db, &ext, CS - 10, 30).unwrap(),
        text[CS as usize - 10..][..30]
    );
    let rows: Vec<(i64, i64)> = db
        .prepare("SELECT codec, length(data) FROM chunk ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    // The text's 4 distinct blocks, then the noise's 2.
    assert_eq!(rows.len(), 6, "{rows:?}");
    for (codec, len) in &rows[..4] {
        assert_eq!(*codec, 1, "{rows:?}");
        assert!(
            *len < 4096,
            "a block of repeated lines stored in {len} bytes"
        );
    }
    assert_eq!(rows[4..], [(0, CS as i64), (0, 5)], "{rows:?}");
}

/// Both encodings give back the bytes; a frame cut short, or a codec this build does not
/// know, is an error that names the problem, never wrong bytes.
#[test]
fn both_encodings_round_trip_and_damage_is_an_error() {
    use crate::store::objects::{CODEC_LZ4, CODEC_ZSTD, Packing, compress_chunk, decode_chunk};
    let line = b"fn both_encodings_round_trip() -> Result<(), String> { Ok(()) }\n";
    let text: Vec<u8> = line.iter().copied().cycle().take(CS as usize).collect();
    for (packing, want) in [(Packing::Fast, CODEC_LZ4), (Packing::Small, CODEC_ZSTD)] {
        let (codec, stored) = compress_chunk(&text, packing).unwrap();
        assert_eq!(codec, want);
        assert!(
            stored.len() < text.len() / 8,
            "{packing:?}: {} bytes",
            stored.len()
        );
        assert_eq!(decode_chunk(codec, stored.clone()).unwrap(), text);
        let cut = stored[..stored.len() / 2].to_vec();
        assert!(decode_chunk(codec, cut).is_err(), "{packing:?}");
    }
    let e = decode_chunk(9, b"x".to_vec()).unwrap_err();
    assert!(e.contains("unknown codec 9"), "{e}");
    // Too small to gain anything: kept as it is.
    assert_eq!(compress_chunk(&text[..40], Packing::Small), None);
}
