//! Whether a store can be trusted to move refs: a push moves a ref with If-Match (or
//! creates it with If-None-Match: *) so that of two pushers from the same old head one is
//! refused. A store that ignores those headers would let both writes land and both
//! pushes report success, one of them lost. So before the first ref update to a store
//! (and again when the remote's URL changes) three writes to a key of avfs's own check
//! that it refuses a put with a wrong If-Match and a put with If-None-Match: * on an
//! existing key. The verdict is kept in the vault, per remote.
//!
//! The probe sees conditions that come one at a time. A store that checks a condition and
//! then writes, not atomically, passes it and still lets two racing writes through; the
//! read-back after each ref write (`refs::write_verified`) is what catches those.

use rusqlite::Connection;
use serde::{Deserialize, Serialize};

use super::transport::{Cas, Transport};
use crate::error::{Error, Result};
use crate::store::{meta_get, meta_get_text, meta_set, meta_set_text};

/// The probe's key, below the remote's prefix (not under `refs/`: no workspace has it).
pub const KEY: &str = "probe/conditional-writes";

/// A version no object has: a put conditioned on it must be refused.
const NO_SUCH_VERSION: &str = "\"avfs-probe-no-such-version-00000000\"";

/// What a store did with conditional writes, as the probe found.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, PartialEq, Eq)]
pub struct ConditionalWrites {
    /// The URL probed (a remote whose URL differs is probed again).
    pub url: String,
    /// A put with an If-Match no version has was refused.
    pub if_match: bool,
    /// A put with If-None-Match: * on an existing key was refused.
    pub if_none_match: bool,
    /// Requests the probe sent.
    pub requests: u64,
}

impl ConditionalWrites {
    pub fn honoured(&self) -> bool {
        self.if_match && self.if_none_match
    }

    /// What the store does not guarantee, in words, for the error.
    fn missing(&self) -> String {
        let mut m = Vec::new();
        if !self.if_match {
            m.push("it accepted a put with an If-Match no version has");
        }
        if !self.if_none_match {
            m.push("it accepted a put with If-None-Match: * on an existing key");
        }
        m.join(" and ")
    }
}

fn verdict_key(remote: &str) -> String {
    format!("remote.{remote}.conditional_writes")
}

fn single_writer_key(remote: &str) -> String {
    format!("remote.{remote}.single_writer")
}

/// The cached verdict for `remote`, if it was probed at `url`.
pub fn cached(db: &Connection, remote: &str, url: &str) -> Result<Option<ConditionalWrites>> {
    let Some(text) = meta_get_text(db, &verdict_key(remote))? else {
        return Ok(None);
    };
    Ok(serde_json::from_str::<ConditionalWrites>(&text)
        .ok()
        .filter(|c| c.url == url))
}

pub fn remember(db: &Connection, remote: &str, c: &ConditionalWrites) -> Result<()> {
    meta_set_text(
        db,
        &verdict_key(remote),
        &serde_json::to_string(c).expect("verdict encoding"),
    )
}

/// `remote add --single-writer`: refs move on this remote whatever the probe finds.
pub fn set_single_writer(db: &Connection, remote: &str, on: bool) -> Result<()> {
    meta_set(db, &single_writer_key(remote), on as i64)
}

pub fn single_writer(db: &Connection, remote: &str) -> Result<bool> {
    Ok(meta_get(db, &single_writer_key(remote))?.unwrap_or(0) == 1)
}

/// Forgets what the vault knows of `remote` (it was removed).
pub fn forget(db: &Connection, remote: &str) -> Result<()> {
    db.execute(
        "DELETE FROM meta WHERE key IN (?1, ?2)",
        [verdict_key(remote), single_writer_key(remote)],
    )?;
    Ok(())
}

/// Sends the probe: three conditional puts of `KEY`.
pub async fn probe(t: &Transport, url: &str) -> Result<ConditionalWrites> {
    let before = t.traffic().requests;
    let body = bytes::Bytes::from_static(b"avfs: a probe of conditional writes; safe to delete\n");
    // Make sure the key exists (created now, or left by an earlier probe).
    t.put_if(KEY, body.clone(), None).await?;
    let if_match = t.put_if(KEY, body.clone(), Some(NO_SUCH_VERSION)).await? == Cas::Conflict;
    let if_none_match = t.put_if(KEY, body, None).await? == Cas::Conflict;
    Ok(ConditionalWrites {
        url: url.to_string(),
        if_match,
        if_none_match,
        requests: t.traffic().requests - before,
    })
}

/// Checks, before a ref update, that `remote` may have its refs moved: a directory remote
/// always (avfs swaps its refs under a lock); a store once it passed the probe (sent now
/// unless the vault remembers a verdict for this URL) or when the remote is declared
/// single-writer. Returns the probe's result when one was sent.
pub fn ensure(
    store: &mut crate::store::Store,
    t: &Transport,
    remote: &str,
    url: &str,
) -> Result<Option<ConditionalWrites>> {
    if t.is_directory() {
        return Ok(None);
    }
    let (known, single) =
        store.read(|db| Ok((cached(db, remote, url)?, single_writer(db, remote)?)))?;
    let (verdict, sent) = match known {
        Some(v) => (v, false),
        None => {
            let v = t.run(probe(t, url))?;
            store.write(|db| remember(db, remote, &v))?;
            (v, true)
        }
    };
    if !verdict.honoured() && !single && !t.single_writer {
        return Err(Error::RemoteUnsafe {
            remote: remote.to_string(),
            missing: verdict.missing(),
        });
    }
    Ok(sent.then_some(verdict))
}
