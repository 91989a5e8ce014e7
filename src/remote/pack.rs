//! Packs and their indexes: how objects travel.
//!
//! A pack is many objects back to back (`packs/<hash>`, named by the BLAKE3 of its bytes),
//! so a push of 100 000 files is a few dozen PUTs, not 100 000. Its index
//! (`index/<hash>`, named by the BLAKE3 of the index bytes) lists each object's kind,
//! hash, offset and length, so a reader fetches one object by range. Both are immutable;
//! every object is checked against its hash when it arrives, so a corrupt or foreign
//! object is refused, never stored.
//!
//! Wire forms: a chunk is its bytes; a tree its stored encoding; a file content (chunk
//! list) is the size as 8 little-endian bytes then the chunk hashes; a checkpoint its
//! `CheckpointObject` encoding.

use serde::{Deserialize, Serialize};

use crate::store::content;
use crate::store::objects::{CHUNK_SIZE, Hash, Tree};

/// Packs are cut at about this size: large enough for few requests, small enough that
/// a lost upload costs little and several can be in flight.
pub const PACK_TARGET: usize = 16 * 1024 * 1024;

pub const INDEX_FORMAT: u32 = 1;

pub use crate::store::packrecords::{IndexEntry, ObjKind};

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PackIndex {
    pub format: u32,
    /// The pack's name (the hex BLAKE3 of its bytes) and size.
    pub pack: String,
    pub size: u64,
    pub entries: Vec<IndexEntry>,
}

impl PackIndex {
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_allocvec(self).expect("index encoding cannot fail")
    }

    /// Decodes an index fetched as `name`: its bytes must hash to its name, and every
    /// entry must lie inside the pack.
    pub fn decode(name: &str, data: &[u8]) -> std::result::Result<PackIndex, String> {
        if blake3::hash(data).to_hex().as_str() != name {
            return Err("the index does not hash to its name".into());
        }
        let idx: PackIndex =
            postcard::from_bytes(data).map_err(|e| format!("undecodable index: {e}"))?;
        if idx.format != INDEX_FORMAT {
            return Err(format!(
                "index format {} (this avfs reads {INDEX_FORMAT}); upgrade avfs",
                idx.format
            ));
        }
        if idx.pack.len() != 64 || !idx.pack.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err("bad pack name".into());
        }
        // A pack is its objects back to back, in index order: anything else is damage.
        let mut end = 0u64;
        for e in &idx.entries {
            if ObjKind::from_u8(e.kind).is_none() {
                return Err(format!("unknown object kind {}", e.kind));
            }
            if e.offset != end {
                return Err("the entries do not follow each other through the pack".into());
            }
            end = e.offset.saturating_add(e.length as u64);
            if end > idx.size {
                return Err("an entry lies outside its pack".into());
            }
        }
        if end != idx.size {
            return Err("the entries do not cover the pack".into());
        }
        Ok(idx)
    }
}

const CHECKPOINT_TAG: &[u8] = b"avfs-checkpoint-v1\0";

pub fn checkpoint_hash(data: &[u8]) -> Hash {
    let mut h = blake3::Hasher::new();
    h.update(CHECKPOINT_TAG);
    h.update(data);
    Hash(*h.finalize().as_bytes())
}

/// The size and the chunks (holes left out) of a content object in its wire form
/// (`store::content::wire_encode`).
pub fn decode_content(data: &[u8]) -> std::result::Result<(u64, Vec<Hash>), String> {
    let ext = content::wire_decode(data)?;
    Ok((ext.size, ext.list.into_iter().map(|(_, c)| c).collect()))
}

/// Checks that `data` is object `hash` of `kind`: the hash matches and it decodes.
pub fn verify(kind: ObjKind, hash: &Hash, data: &[u8]) -> std::result::Result<(), String> {
    let ok = match kind {
        ObjKind::Chunk => Hash::of(data) == *hash && data.len() <= CHUNK_SIZE,
        ObjKind::Tree => {
            if Tree::hash_of(data) != *hash {
                return Err("hash mismatch".into());
            }
            Tree::decode(data)?;
            true
        }
        ObjKind::Content => content::hash_of(&content::wire_decode(data)?) == *hash,
        ObjKind::Checkpoint => {
            if checkpoint_hash(data) != *hash {
                return Err("hash mismatch".into());
            }
            super::commits::CheckpointObject::decode(data)?;
            true
        }
    };
    if ok {
        Ok(())
    } else {
        Err("hash mismatch".into())
    }
}

/// Objects gathered into one pack.
#[derive(Default)]
pub struct PackBuilder {
    pub data: Vec<u8>,
    pub entries: Vec<IndexEntry>,
}

/// A finished pack and its index, ready to upload.
pub struct Finished {
    pub name: String,
    pub data: Vec<u8>,
    pub index_name: String,
    pub index: Vec<u8>,
    pub entries: Vec<IndexEntry>,
}

impl PackBuilder {
    pub fn add(&mut self, kind: ObjKind, hash: &Hash, bytes: &[u8]) {
        self.entries.push(IndexEntry {
            kind: kind as u8,
            hash: hash.0,
            offset: self.data.len() as u64,
            length: bytes.len() as u32,
        });
        self.data.extend_from_slice(bytes);
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn finish(&mut self) -> Finished {
        let data = std::mem::take(&mut self.data);
        let entries = std::mem::take(&mut self.entries);
        let name = blake3::hash(&data).to_hex().to_string();
        let index = PackIndex {
            format: INDEX_FORMAT,
            pack: name.clone(),
            size: data.len() as u64,
            entries: entries.clone(),
        }
        .encode();
        let index_name = blake3::hash(&index).to_hex().to_string();
        Finished {
            name,
            data,
            index_name,
            index,
            entries,
        }
    }
}

pub fn pack_key(name: &str) -> String {
    format!("packs/{name}")
}

pub fn index_key(name: &str) -> String {
    format!("index/{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_round_trip_and_refusals() {
        let mut b = PackBuilder::default();
        let data = b"hello".to_vec();
        b.add(ObjKind::Chunk, &Hash::of(&data), &data);
        let f = b.finish();
        let idx = PackIndex::decode(&f.index_name, &f.index).unwrap();
        assert_eq!(idx.entries, f.entries);
        assert_eq!(idx.size, 5);
        // Renamed or altered: refused.
        assert!(PackIndex::decode(&"0".repeat(64), &f.index).is_err());
        let mut bad = f.index.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert!(PackIndex::decode(&blake3::hash(&bad).to_hex(), &bad).is_err());
        assert!(verify(ObjKind::Chunk, &Hash::of(&data), &data).is_ok());
        assert!(verify(ObjKind::Chunk, &Hash::of(&data), b"hellO").is_err());
        assert!(verify(ObjKind::Tree, &Hash::of(&data), &data).is_err());
    }
}
