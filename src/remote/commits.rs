//! Checkpoints as immutable, content-addressed objects, so two machines agree on which
//! checkpoint is which and which descends from which.
//!
//! A local checkpoint is a row with an id that means nothing elsewhere and a parent that
//! `checkpoint delete` may rewire. Its object (root, parents, name, time, origin,
//! message) is made once, the first time it is pushed or compared, and then kept in
//! `checkpoint_object`: the history a remote saw never changes under it. A merge made by
//! `avfs pull` has two parents, so pushing it afterwards is a fast-forward.

use std::collections::{HashSet, VecDeque};

use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};

use super::pack::checkpoint_hash;
use crate::error::{Error, Result};
use crate::store::objects::Hash;
use crate::workspace::validate_checkpoint_name;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct CheckpointObject {
    pub root: Hash,
    pub parents: Vec<Hash>,
    pub name: String,
    pub created_at_ns: i64,
    pub origin: String,
    pub message: Option<String>,
}

impl CheckpointObject {
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_allocvec(self).expect("checkpoint encoding cannot fail")
    }

    pub fn decode(data: &[u8]) -> std::result::Result<CheckpointObject, String> {
        let (o, rest): (CheckpointObject, _) =
            postcard::take_from_bytes(data).map_err(|e| format!("undecodable checkpoint: {e}"))?;
        if !rest.is_empty() {
            return Err("undecodable checkpoint: trailing bytes".into());
        }
        if o.parents.len() > 16 {
            return Err("a checkpoint with more than 16 parents".into());
        }
        Ok(o)
    }

    pub fn hash(&self) -> Hash {
        checkpoint_hash(&self.encode())
    }
}

/// Stores a checkpoint object (verified by the caller) and returns its hash.
pub fn put(db: &Connection, data: &[u8], hash: &Hash) -> Result<()> {
    db.prepare_cached("INSERT OR IGNORE INTO checkpoint_object (hash, data) VALUES (?1, ?2)")?
        .execute(params![&hash.0[..], data])?;
    Ok(())
}

pub fn has(db: &Connection, hash: &Hash) -> Result<bool> {
    Ok(db
        .prepare_cached("SELECT 1 FROM checkpoint_object WHERE hash = ?1")?
        .query_row([&hash.0[..]], |_| Ok(()))
        .optional()?
        .is_some())
}

pub fn load(db: &Connection, hash: &Hash) -> Result<Option<CheckpointObject>> {
    let data: Option<Vec<u8>> = db
        .prepare_cached("SELECT data FROM checkpoint_object WHERE hash = ?1")?
        .query_row([&hash.0[..]], |r| r.get(0))
        .optional()?;
    match data {
        None => Ok(None),
        Some(d) => CheckpointObject::decode(&d)
            .map(Some)
            .map_err(|reason| Error::Corrupt {
                path: Default::default(),
                reason: format!("checkpoint object {}: {reason}", hash.to_hex()),
            }),
    }
}

pub fn raw(db: &Connection, hash: &Hash) -> Result<Vec<u8>> {
    db.prepare_cached("SELECT data FROM checkpoint_object WHERE hash = ?1")?
        .query_row([&hash.0[..]], |r| r.get(0))
        .optional()?
        .ok_or_else(|| Error::Internal(format!("checkpoint object {} vanished", hash.to_hex())))
}

fn object_of_local(db: &Connection, checkpoint_id: i64) -> Result<Option<Hash>> {
    let h: Option<Vec<u8>> = db
        .prepare_cached("SELECT hash FROM checkpoint_object WHERE checkpoint = ?1")?
        .query_row([checkpoint_id], |r| r.get(0))
        .optional()?;
    h.map(|h| Hash::from_slice(&h)).transpose()
}

/// The local checkpoint that object `hash` stands for, if it is here.
pub fn local_of(db: &Connection, hash: &Hash) -> Result<Option<i64>> {
    Ok(db
        .prepare_cached(
            "SELECT o.checkpoint FROM checkpoint_object o JOIN checkpoint c ON c.id = o.checkpoint
             WHERE o.hash = ?1",
        )?
        .query_row([&hash.0[..]], |r| r.get(0))
        .optional()?)
}

/// The object of local checkpoint `id`, made (with those of its ancestors) if it has none.
pub fn object_for(db: &Connection, id: i64) -> Result<Hash> {
    // Walk up to the nearest ancestor that has an object, then make them downwards.
    let mut chain = Vec::new();
    let mut cur = Some(id);
    let mut above: Option<Hash> = None;
    while let Some(c) = cur {
        if let Some(h) = object_of_local(db, c)? {
            above = Some(h);
            break;
        }
        let row: (Vec<u8>, Option<i64>, i64, String, String, Option<String>) = db
            .prepare_cached(
                "SELECT root, parent, created_at_ns, name, origin, message FROM checkpoint WHERE id = ?1",
            )?
            .query_row([c], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?))
            })?;
        cur = row.1;
        chain.push((c, row));
        if chain.len() > 1_000_000 {
            return Err(Error::Internal("checkpoint parents form a cycle".into()));
        }
    }
    let mut parent = above;
    for (cid, (root, _, created, name, origin, message)) in chain.into_iter().rev() {
        let obj = CheckpointObject {
            root: Hash::from_slice(&root)?,
            parents: parent.into_iter().collect(),
            name,
            created_at_ns: created,
            origin,
            message,
        };
        let data = obj.encode();
        let h = checkpoint_hash(&data);
        db.prepare_cached(
            "INSERT INTO checkpoint_object (hash, data, checkpoint) VALUES (?1, ?2, ?3)
             ON CONFLICT (hash) DO UPDATE SET checkpoint = COALESCE(checkpoint, excluded.checkpoint)",
        )?
        .execute(params![&h.0[..], data, cid])?;
        parent = Some(h);
    }
    parent.ok_or_else(|| Error::Internal("no checkpoint object".into()))
}

/// Records `obj` as the object of the new local checkpoint `id` (a merge with two
/// parents), before anything could make a one-parent object for it.
pub fn bind(db: &Connection, id: i64, obj: &CheckpointObject) -> Result<Hash> {
    let data = obj.encode();
    let h = checkpoint_hash(&data);
    db.prepare_cached(
        "INSERT INTO checkpoint_object (hash, data, checkpoint) VALUES (?1, ?2, ?3)
         ON CONFLICT (hash) DO UPDATE SET checkpoint = excluded.checkpoint",
    )?
    .execute(params![&h.0[..], data, id])?;
    Ok(h)
}

/// Every ancestor of `from` (itself included) whose object is here, breadth first.
fn ancestors(db: &Connection, from: &Hash) -> Result<Vec<Hash>> {
    let mut seen = HashSet::new();
    let mut order = Vec::new();
    let mut queue = VecDeque::from([*from]);
    while let Some(h) = queue.pop_front() {
        if !seen.insert(h) {
            continue;
        }
        order.push(h);
        if let Some(o) = load(db, &h)? {
            queue.extend(o.parents);
        }
    }
    Ok(order)
}

pub fn is_ancestor(db: &Connection, anc: &Hash, desc: &Hash) -> Result<bool> {
    Ok(ancestors(db, desc)?.contains(anc))
}

/// The nearest common ancestor of `a` and `b`, if they share one.
pub fn merge_base(db: &Connection, a: &Hash, b: &Hash) -> Result<Option<Hash>> {
    let of_a: HashSet<Hash> = ancestors(db, a)?.into_iter().collect();
    Ok(ancestors(db, b)?.into_iter().find(|h| of_a.contains(h)))
}

/// Objects reachable from `head` (itself included) that are not here yet.
pub fn missing_ancestry(db: &Connection, heads: &[Hash]) -> Result<Vec<Hash>> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut queue: VecDeque<Hash> = heads.iter().copied().collect();
    while let Some(h) = queue.pop_front() {
        if !seen.insert(h) {
            continue;
        }
        match load(db, &h)? {
            Some(o) => queue.extend(o.parents),
            None => out.push(h),
        }
    }
    Ok(out)
}

/// A free checkpoint name in workspace `ws` for an imported checkpoint called `name`.
fn free_name(db: &Connection, ws: i64, name: &str, hash: &Hash, remote: &str) -> Result<String> {
    let taken = |n: &str| -> Result<bool> {
        Ok(db
            .prepare_cached("SELECT 1 FROM checkpoint WHERE workspace = ?1 AND name = ?2")?
            .query_row(params![ws, n], |_| Ok(()))
            .optional()?
            .is_some())
    };
    let mut candidates = vec![name.to_string(), format!("{name}@{remote}")];
    candidates.push(format!("{name}@{remote}-{}", &hash.to_hex()[..12]));
    for c in candidates {
        if validate_checkpoint_name(&c).is_ok() && !taken(&c)? {
            return Ok(c);
        }
    }
    Ok(format!("imported-{}", hash.to_hex()))
}

/// Makes object `hash` (and, first, its first-parent ancestors) local checkpoints of
/// workspace `ws`, reusing any that already are. Returns the local checkpoint id.
pub fn import(db: &Connection, ws: i64, hash: &Hash, remote: &str) -> Result<i64> {
    let mut chain = Vec::new();
    let mut cur = Some(*hash);
    let mut parent_id: Option<i64> = None;
    while let Some(h) = cur {
        if let Some(id) = local_of(db, &h)? {
            parent_id = Some(id);
            break;
        }
        let o = load(db, &h)?.ok_or_else(|| {
            Error::Internal(format!("checkpoint object {} not fetched", h.to_hex()))
        })?;
        cur = o.parents.first().copied();
        chain.push((h, o));
    }
    for (h, o) in chain.into_iter().rev() {
        let name = free_name(db, ws, &o.name, &h, remote)?;
        db.prepare_cached(
            "INSERT INTO checkpoint (workspace, name, root, parent, created_at_ns, origin, message) VALUES (?1,?2,?3,?4,?5,?6,?7)",
        )?
        .execute(params![ws, name, &o.root.0[..], parent_id, o.created_at_ns, o.origin, o.message])?;
        let id = db.last_insert_rowid();
        db.prepare_cached("UPDATE checkpoint_object SET checkpoint = ?1 WHERE hash = ?2")?
            .execute(params![id, &h.0[..]])?;
        parent_id = Some(id);
    }
    parent_id.ok_or_else(|| Error::Internal("import of nothing".into()))
}

/// The checkpoint named `name` in the history of `head` (nearest first), for
/// `clone --checkpoint`.
pub fn find_named(db: &Connection, head: &Hash, name: &str) -> Result<Option<Hash>> {
    for h in ancestors(db, head)? {
        if load(db, &h)?.is_some_and(|o| o.name == name) {
            return Ok(Some(h));
        }
    }
    Ok(None)
}
