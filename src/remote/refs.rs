//! Refs: which checkpoint each workspace of a remote points at (`refs/<workspace>`, a
//! small JSON document). They are the only mutable objects on a remote and move only by
//! conditional writes: created with If-None-Match, updated with If-Match on the version
//! read before, so of two pushers that read the same version one wins and the other is
//! told to pull. Every write is read back (after `Transport::settle`): a store whose
//! condition check and write are two steps can let a racing write land over ours, and
//! only reading the ref again shows it.

use rusqlite::{Connection, params};
use serde::{Deserialize, Serialize};

use super::transport::{Cas, Transport};
use crate::error::Result;
use crate::store::objects::Hash;

pub const REF_FORMAT: u32 = 1;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct RemoteRef {
    pub format: u32,
    /// The checkpoint object (hex).
    pub head: String,
    /// Its root tree (hex), for people reading the bucket.
    pub root: String,
    /// Its name.
    pub checkpoint: String,
    pub pushed_at: String,
}

impl RemoteRef {
    pub fn new(head: &Hash, root: &Hash, checkpoint: &str) -> RemoteRef {
        RemoteRef {
            format: REF_FORMAT,
            head: head.to_hex(),
            root: root.to_hex(),
            checkpoint: checkpoint.to_string(),
            pushed_at: crate::util::rfc3339(crate::store::now_ns()),
        }
    }

    pub fn head_hash(&self) -> std::result::Result<Hash, String> {
        parse_hash(&self.head)
    }
}

pub fn parse_hash(hex: &str) -> std::result::Result<Hash, String> {
    if hex.len() != 64 {
        return Err(format!("{hex:?} is not a 64-digit hex hash"));
    }
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
            .map_err(|_| format!("{hex:?} is not a 64-digit hex hash"))?;
    }
    Ok(Hash(out))
}

pub fn key(workspace: &str) -> String {
    format!("refs/{workspace}")
}

fn decode(t: &Transport, workspace: &str, data: &[u8]) -> Result<RemoteRef> {
    let r: RemoteRef =
        serde_json::from_slice(data).map_err(|e| crate::error::Error::RemoteCorrupt {
            remote: t.name.clone(),
            what: format!("ref {workspace}"),
            reason: e.to_string(),
        })?;
    if r.format != REF_FORMAT || r.head_hash().is_err() {
        return Err(crate::error::Error::RemoteCorrupt {
            remote: t.name.clone(),
            what: format!("ref {workspace}"),
            reason: format!("format {} or head {:?} not understood", r.format, r.head),
        });
    }
    Ok(r)
}

/// The ref of `workspace` and its version, if the remote has one.
pub async fn read(t: &Transport, workspace: &str) -> Result<Option<(RemoteRef, String)>> {
    match t.get_versioned(&key(workspace)).await? {
        None => Ok(None),
        Some((data, tag)) => Ok(Some((decode(t, workspace, &data)?, tag))),
    }
}

/// Every ref on the remote.
pub async fn list(t: &Transport) -> Result<Vec<(String, RemoteRef)>> {
    let mut out = Vec::new();
    for l in t.list("refs").await? {
        let Some(name) = l.key.strip_prefix("refs/") else {
            continue;
        };
        if name.contains('/') || name.starts_with('.') {
            continue;
        }
        if let Some((r, _)) = read(t, name).await? {
            out.push((name.to_string(), r));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// The outcome of a verified ref write.
#[derive(Debug, PartialEq, Eq)]
pub enum Written {
    /// Written, and still ours when read back.
    Held,
    /// Refused: the ref was not at `expected`.
    Conflict,
    /// The store accepted the write, but the ref read back is another (`None`: gone).
    Lost(Option<RemoteRef>),
}

/// Writes the ref only if it is still at version `expected` (None: only if absent), then
/// waits `t.settle` and reads it back.
pub async fn write_verified(
    t: &Transport,
    workspace: &str,
    r: &RemoteRef,
    expected: Option<&str>,
) -> Result<Written> {
    let body = serde_json::to_vec_pretty(r).expect("ref encoding");
    if t.put_if(&key(workspace), body.clone().into(), expected)
        .await?
        == Cas::Conflict
    {
        return Ok(Written::Conflict);
    }
    if !t.settle.is_zero() {
        tokio::time::sleep(t.settle).await;
    }
    match t.get_versioned(&key(workspace)).await? {
        Some((data, _)) if data[..] == body[..] => Ok(Written::Held),
        Some((data, _)) => Ok(Written::Lost(decode(t, workspace, &data).ok())),
        None => Ok(Written::Lost(None)),
    }
}

/// Remembers, in the vault, where a remote's ref was last seen.
pub fn remember(db: &Connection, remote: &str, workspace: &str, head: &Hash) -> Result<()> {
    db.prepare_cached(
        "INSERT OR REPLACE INTO remote_ref (remote, name, head, updated_at_ns) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![remote, workspace, &head.0[..], crate::store::now_ns()])?;
    Ok(())
}

/// The refs of `remote` as last seen: (workspace, head).
pub fn remembered(db: &Connection, remote: &str) -> Result<Vec<(String, Hash)>> {
    let mut st =
        db.prepare_cached("SELECT name, head FROM remote_ref WHERE remote = ?1 ORDER BY name")?;
    let rows = st.query_map([remote], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, Vec<u8>>(1)?))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (n, h) = row?;
        out.push((n, Hash::from_slice(&h)?));
    }
    Ok(out)
}
