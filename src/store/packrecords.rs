//! The records of remote packs' indexes as the vault file keeps them (`remote_pack`): which
//! objects a remote promises, of what kind, and where they lie in its packs. They are
//! rows of the vault's schema, so the store owns their format: `remote` finds objects
//! through them, and `verify` counts a promised object as present.

use rusqlite::Connection;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::store::objects::Hash;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum ObjKind {
    Chunk = 1,
    Content = 2,
    Tree = 3,
    Checkpoint = 4,
}

impl ObjKind {
    pub fn from_u8(v: u8) -> Option<ObjKind> {
        Some(match v {
            1 => ObjKind::Chunk,
            2 => ObjKind::Content,
            3 => ObjKind::Tree,
            4 => ObjKind::Checkpoint,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            ObjKind::Chunk => "chunk",
            ObjKind::Content => "content",
            ObjKind::Tree => "tree",
            ObjKind::Checkpoint => "checkpoint",
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct IndexEntry {
    pub kind: u8,
    pub hash: [u8; 32],
    pub offset: u64,
    pub length: u32,
}

/// An object of a pack: hash, kind, offset and length.
pub type Item = (Hash, ObjKind, u64, u64);

/// One record of a stored index: hash (32), offset (8, LE), length (4, LE), kind (1).
const RECORD: usize = 45;

/// One pack's index entries as stored: records sorted by (hash, kind).
pub struct PackEntries {
    records: Box<[u8]>,
}

impl PackEntries {
    pub fn encode(entries: &[IndexEntry]) -> Vec<u8> {
        let mut sorted: Vec<&IndexEntry> = entries.iter().collect();
        sorted.sort_unstable_by_key(|e| (e.hash, e.kind));
        let mut out = Vec::with_capacity(sorted.len() * RECORD);
        for e in sorted {
            out.extend_from_slice(&e.hash);
            out.extend_from_slice(&e.offset.to_le_bytes());
            out.extend_from_slice(&e.length.to_le_bytes());
            out.push(e.kind);
        }
        out
    }

    pub fn from_blob(blob: Vec<u8>) -> std::result::Result<PackEntries, String> {
        if !blob.len().is_multiple_of(RECORD) {
            return Err(format!(
                "a stored pack index of {} bytes is not whole records",
                blob.len()
            ));
        }
        Ok(PackEntries {
            records: blob.into_boxed_slice(),
        })
    }

    pub fn len(&self) -> usize {
        self.records.len() / RECORD
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    fn hash_at(&self, i: usize) -> &[u8] {
        &self.records[i * RECORD..i * RECORD + 32]
    }

    fn item(&self, i: usize) -> Option<Item> {
        let r = &self.records[i * RECORD..(i + 1) * RECORD];
        let hash = Hash(r[..32].try_into().ok()?);
        let offset = u64::from_le_bytes(r[32..40].try_into().ok()?);
        let length = u32::from_le_bytes(r[40..44].try_into().ok()?) as u64;
        Some((hash, ObjKind::from_u8(r[44])?, offset, length))
    }

    /// The entries for `hash` (of any kind).
    pub fn find(&self, hash: &Hash) -> impl Iterator<Item = Item> + '_ {
        let hash = *hash;
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.hash_at(mid) < &hash.0[..] {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        (lo..self.len())
            .take_while(move |&i| self.hash_at(i) == &hash.0[..])
            .filter_map(|i| self.item(i))
    }

    pub fn items(&self) -> impl Iterator<Item = Item> + '_ {
        (0..self.len()).filter_map(|i| self.item(i))
    }
}

/// One pack's stored index entries (`remote_pack.entries`, or the `remote_object` rows an
/// older build wrote).
pub fn read_entries(db: &Connection, pack_id: i64) -> Result<PackEntries> {
    let blob: Option<Vec<u8>> = db
        .prepare_cached("SELECT entries FROM remote_pack WHERE id = ?1")?
        .query_row([pack_id], |r| r.get(0))?;
    let blob = match blob {
        Some(b) => b,
        None => {
            let mut st = db.prepare_cached(
                "SELECT hash, kind, offset, length FROM remote_object WHERE pack = ?1",
            )?;
            let rows = st.query_map([pack_id], |r| {
                Ok((
                    r.get::<_, Vec<u8>>(0)?,
                    r.get::<_, u8>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, i64>(3)?,
                ))
            })?;
            let mut entries = Vec::new();
            for row in rows {
                let (h, kind, offset, length) = row?;
                if let Ok(h) = Hash::from_slice(&h) {
                    entries.push(IndexEntry {
                        kind,
                        hash: h.0,
                        offset: offset as u64,
                        length: length as u32,
                    });
                }
            }
            PackEntries::encode(&entries)
        }
    };
    PackEntries::from_blob(blob).map_err(|reason| Error::Corrupt {
        path: Default::default(),
        reason,
    })
}

/// Every object some remote promises, with its kind (for `vault verify`).
pub fn promised_all(db: &Connection) -> Result<Vec<(ObjKind, Hash)>> {
    let ids: Vec<i64> = db
        .prepare_cached("SELECT id FROM remote_pack ORDER BY id")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut out = Vec::new();
    for id in ids {
        out.extend(read_entries(db, id)?.items().map(|(h, k, _, _)| (k, h)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_entries_find_every_object_and_only_those() {
        let entries: Vec<IndexEntry> = (0..500u32)
            .map(|i| IndexEntry {
                kind: (i % 3 + 1) as u8,
                hash: Hash::of(&i.to_le_bytes()).0,
                offset: i as u64 * 10,
                length: 10,
            })
            .collect();
        let p = PackEntries::from_blob(PackEntries::encode(&entries)).unwrap();
        assert_eq!(p.len(), 500);
        for e in &entries {
            let got: Vec<Item> = p.find(&Hash(e.hash)).collect();
            assert_eq!(got.len(), 1);
            assert_eq!(got[0].1 as u8, e.kind);
            assert_eq!(got[0].2, e.offset);
        }
        assert_eq!(p.find(&Hash::of(b"absent")).count(), 0);
        assert!(PackEntries::from_blob(vec![0; RECORD + 1]).is_err());
    }
}
