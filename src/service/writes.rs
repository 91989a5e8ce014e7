//! A service's `writes` in `avfs service list` (docs/services.md): what the workspace's
//! services wrote while it ran, from the `exec.service_writes` audit rows that name it
//! (written when a run took their writes in, `boundary::service_writes`), and what the
//! overlay holds that no ingest took in yet (`boundary::pending_writes`).
//!
//! Read-only: the vault is opened for reading, the upper is counted without a lock, and
//! nothing is taken in or checkpointed. Bounded: each row names at most
//! `AUDITED_PATHS` paths, and the pending count stops at its caps.

use serde_json::Value;

use crate::boundary;
use crate::context::Context;
use crate::documents::services::{PendingWrites, ServiceWrites, ServiceWritesTaken};
use crate::error::Result;
use crate::registry::VaultRef;
use crate::sandbox::service::ServiceRecord;
use crate::store::{Store, audit};

/// The writes of a workspace's services, read once for a list of them.
pub(super) struct Writes {
    /// `exec.service_writes` rows since the oldest listed service started: (time, detail).
    rows: Vec<(i64, Value)>,
    /// The ids of the services the pending writes are ascribed to, and their count.
    pending: Option<(Vec<String>, PendingWrites)>,
}

impl Writes {
    /// Reads what `services` of `v`'s workspace wrote.
    pub fn read<'a>(
        ctx: &Context,
        v: &VaultRef,
        services: impl IntoIterator<Item = &'a ServiceRecord>,
    ) -> Result<Writes> {
        let Some(since) = services.into_iter().map(|r| r.started_at_ns).min() else {
            return Ok(Writes {
                rows: vec![],
                pending: None,
            });
        };
        let rows = Store::open_read(&v.path)?
            .read(|db| audit::rows_since(db, &v.workspace, "exec.service_writes", since))?;
        let pending = boundary::pending_writes(&ctx.home, v).map(|(ids, p)| {
            let p = PendingWrites {
                entries: p.entries,
                at_least: p.at_least,
            };
            (ids, p)
        });
        Ok(Writes { rows, pending })
    }

    /// What the workspace's services wrote while `r` ran.
    pub fn of(&self, r: &ServiceRecord) -> ServiceWrites {
        let mut w = ServiceWrites::default();
        for (ts, d) in self.rows.iter().filter(|(ts, d)| names(r, *ts, d)) {
            let n = |k: &str| d["summary"][k].as_u64().unwrap_or(0);
            w.taken += 1;
            w.added += n("added");
            w.modified += n("modified");
            w.deleted += n("deleted");
            w.total += n("total");
            let paths: Vec<String> = d["paths"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p.as_str().map(String::from))
                .take(boundary::AUDITED_PATHS)
                .collect();
            w.last = Some(ServiceWritesTaken {
                at: crate::util::rfc3339(*ts),
                exec: d["exec"].as_str().unwrap_or_default().to_string(),
                // A row from before rows named their paths says only how many.
                more: d["more"]
                    .as_u64()
                    .unwrap_or_else(|| n("total").saturating_sub(paths.len() as u64)),
                paths,
            });
        }
        w.pending = self
            .pending
            .as_ref()
            .filter(|(ids, _)| ids.contains(&r.id))
            .map(|(_, p)| *p);
        w
    }
}

/// Whether the row `d` written at `ts` names the service `r`: by id, or, in a row from
/// before rows named ids, by name (and written after it started).
fn names(r: &ServiceRecord, ts: i64, d: &Value) -> bool {
    if ts < r.started_at_ns {
        return false;
    }
    let has = |key: &str, want: &str| {
        d[key]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x.as_str() == Some(want)))
    };
    match d.get("service_ids") {
        Some(_) => has("service_ids", &r.id),
        None => has("services", &r.name),
    }
}
