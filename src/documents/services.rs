//! The documents of `avfs service` (docs/services.md).

use schemars::JsonSchema;
use serde::Serialize;

use crate::policy::Decision;

/// One service of a workspace.
#[derive(Serialize, JsonSchema, Debug, Clone)]
pub struct ServiceDoc {
    /// `svc-...`: names the service for good (a name is reused after a stop).
    pub id: String,
    /// The name it was started with (`--name`; the id when none was given).
    pub name: String,
    /// The vault (or fork) whose workspace it runs in.
    pub vault: String,
    pub workspace: String,
    /// running, exited (the command ended by itself), stopped (`service stop`), ended
    /// (its ttl passed, or its workspace's overlay or vault went: see `end_reason`),
    /// lost (its supervisor was killed; its processes ended with it), starting.
    pub state: String,
    /// PID 1 of the service's sandbox as the host sees it (null before it started).
    pub pid: Option<i32>,
    /// The command as given (a `--shell` line as `["bash", "-c", LINE]`).
    pub command: Vec<String>,
    /// Its working directory in the workspace.
    pub cwd: String,
    /// RFC 3339.
    pub started_at: String,
    /// RFC 3339; null while it runs.
    pub ended_at: Option<String>,
    /// The command's exit status, once it ended by itself or was stopped.
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// Why avfs ended it (ttl, workspace gone), when avfs did.
    pub end_reason: Option<String>,
    /// `--ttl`: seconds after which avfs ends it.
    pub ttl_secs: Option<u64>,
    /// `--publish`: ports of the host's 127.0.0.1 that reach the service's same port
    /// (nothing else of the host reaches it).
    pub published: Vec<u16>,
    /// Bytes of output kept on disk (its last output: at most 2 MiB).
    pub log_bytes: u64,
    /// Once it no longer runs: the last lines of its output (at most 20 lines and
    /// 4 KiB, lossy UTF-8), so a service that exited at once says why. Null while it
    /// runs (`avfs service logs` has all of it).
    pub last_output: Option<String>,
    /// What the workspace's services wrote while this one ran (docs/services.md, "What
    /// a service changes"): per workspace, not per process.
    pub writes: ServiceWrites,
}

/// What the workspace's services wrote while a service ran: what avfs took in and
/// audited before runs (`exec.service_writes` rows naming it), and what is not taken in
/// yet. The services of a workspace share one overlay: when two run at once, what either
/// writes is reported to both; what a service writes while a run runs is in that run's
/// changes, not here.
#[derive(Serialize, JsonSchema, Debug, Clone, Default)]
pub struct ServiceWrites {
    /// How many times avfs took in writes while it ran (before a run; one
    /// `exec.service_writes` audit row each).
    pub taken: u64,
    /// Paths added in all those takings.
    pub added: u64,
    /// Files whose content changed in all those takings.
    pub modified: u64,
    /// Paths deleted in all those takings.
    pub deleted: u64,
    /// Changes of every kind in all those takings (renames, type, mode and attribute
    /// changes too).
    pub total: u64,
    /// The latest taking, or null when there was none.
    pub last: Option<ServiceWritesTaken>,
    /// Written and not taken in yet, when this service ran since the workspace's last
    /// ingest; null otherwise (nothing not taken in is its).
    pub pending: Option<PendingWrites>,
}

/// One taking of services' writes (an `exec.service_writes` audit row).
#[derive(Serialize, JsonSchema, Debug, Clone)]
pub struct ServiceWritesTaken {
    /// RFC 3339.
    pub at: String,
    /// The run before which they were taken in (the envelope that had them as
    /// `service_changes`).
    pub exec: String,
    /// Its first paths (at most 20, sorted; a rename's old and new path).
    pub paths: Vec<String>,
    /// Paths changed beyond `paths`.
    pub more: u64,
}

/// Entries of the workspace's overlay changed since its last ingest, counted without
/// taking them in: files, links and deletions, and directories with nothing counted
/// below them. Close to what the next run takes in, not exact: a file written and
/// removed again still counts its directory, and writes to ignored paths count.
#[derive(Serialize, JsonSchema, Debug, Clone, Copy, Default)]
pub struct PendingWrites {
    /// Entries changed (at most 1 000).
    pub entries: u64,
    /// The count stopped at a bound (1 000 counted, 20 000 looked at): there may be more.
    pub at_least: bool,
}

/// `service start --json`.
#[derive(Serialize, JsonSchema, Debug)]
pub struct ServiceStarted {
    /// The policy's decision, as a run's envelope has it: the service started only
    /// when it allows (`allow`, `allow_with_checkpoint`).
    pub decision: Decision,
    /// The checkpoint taken before the service started, if the decision asked for one.
    pub checkpoint: Option<String>,
    /// The id of the start in the audit log (`service.start`).
    pub exec: String,
    /// The service, when it started.
    pub service: Option<ServiceDoc>,
    /// For `require_approval`: the approval request's id (the service is not started).
    pub approval: Option<String>,
}

/// `service list --json`.
#[derive(Serialize, JsonSchema, Debug)]
pub struct ServiceList {
    /// The services of the workspace, oldest first, ended ones included.
    pub services: Vec<ServiceDoc>,
}

/// `service stop --json` (and the stop half of `restart`).
#[derive(Serialize, JsonSchema, Debug)]
pub struct ServiceStopped {
    /// The service as it ended.
    pub service: ServiceDoc,
    /// False when it was not running.
    pub stopped: bool,
}
