"""Typed views of the JSON documents ``avfs --json`` prints (see ``docs/json.md``).

Every dataclass is built with ``from_json`` from the document, ignores fields it does not
know (avfs may add fields in any release) and keeps the object it was built from in
``raw``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from .tooltypes import MergeSummary

__all__ = [
    "Checkpoint",
    "Change",
    "ChangeSummary",
    "Diff",
    "Stat",
    "RestoreResult",
    "VaultInfo",
    "VaultDetails",
    "Conflict",
    "MergeResult",
    "Command",
    "ExecRequest",
    "Finding",
    "Decision",
    "Approval",
    "EscapedProcess",
    "QuotaRefused",
    "ExecResult",
    "Rollback",
    "Sandbox",
    "Envelope",
]

Json = Dict[str, Any]


def _opt_str(v: Any) -> Optional[str]:
    return None if v is None else str(v)


def _opt_int(v: Any) -> Optional[int]:
    return None if v is None else int(v)


def _obj(v: Any) -> Json:
    return dict(v) if isinstance(v, Mapping) else {}


def _strs(v: Any) -> List[str]:
    return [str(x) for x in v] if isinstance(v, list) else []


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint (``docs/json.md#checkpoint``)."""

    name: str
    workspace: str
    root: str
    """Hash of the checkpoint's root tree: equal roots mean equal content."""
    parent: Optional[str]
    created_at: str
    created_at_ns: int
    origin: str
    """``cli``, ``auto``, ``fork``, ``merge``, ``shell`` or ``exec`` (may gain members)."""
    message: Optional[str]
    raw: Json = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Checkpoint":
        return cls(
            name=str(d["name"]),
            workspace=str(d.get("workspace", "")),
            root=str(d.get("root", "")),
            parent=_opt_str(d.get("parent")),
            created_at=str(d.get("created_at", "")),
            created_at_ns=int(d.get("created_at_ns", 0)),
            origin=str(d.get("origin", "")),
            message=_opt_str(d.get("message")),
            raw=dict(d),
        )


@dataclass(frozen=True)
class Change:
    """One changed path (``docs/json.md#change``), in a diff, an envelope or a merge."""

    path: str
    kind: str
    """``added``, ``modified``, ``deleted``, ``type_changed``, ``mode_changed``,
    ``meta_changed`` (only tags, metadata or other ``user.*`` attributes) or ``renamed``
    (``from_`` is the old path)."""
    type_before: Optional[str]
    type_after: Optional[str]
    size_before: Optional[int]
    size_after: Optional[int]
    mode_before: Optional[str]
    mode_after: Optional[str]
    patch: Optional[str]
    """Unified diff; ``None`` unless asked for (``diff(patch=True)``; ``exec`` always asks)
    and both sides are small text files. In an envelope it may be cut to the patch
    budget (``raw["patch_truncated"]``)."""
    from_: Optional[str] = None
    """A rename's old path (only when ``kind == "renamed"``)."""
    similarity: Optional[int] = None
    """A rename's similarity in percent: 100 for the same content."""
    raw: Json = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Change":
        return cls(
            path=str(d["path"]),
            kind=str(d["kind"]),
            type_before=_opt_str(d.get("type_before")),
            type_after=_opt_str(d.get("type_after")),
            size_before=_opt_int(d.get("size_before")),
            size_after=_opt_int(d.get("size_after")),
            mode_before=_opt_str(d.get("mode_before")),
            mode_after=_opt_str(d.get("mode_after")),
            patch=_opt_str(d.get("patch")),
            from_=_opt_str(d.get("from")),
            similarity=_opt_int(d.get("similarity")),
            raw=dict(d),
        )


@dataclass(frozen=True)
class ChangeSummary:
    """Counts of changes per kind (``docs/json.md#summary``)."""

    added: int = 0
    modified: int = 0
    deleted: int = 0
    type_changed: int = 0
    mode_changed: int = 0
    meta_changed: int = 0
    renamed: int = 0

    @classmethod
    def from_json(cls, d: Any) -> "ChangeSummary":
        d = _obj(d)
        return cls(
            renamed=int(d.get("renamed", 0)),
            added=int(d.get("added", 0)),
            modified=int(d.get("modified", 0)),
            deleted=int(d.get("deleted", 0)),
            type_changed=int(d.get("type_changed", 0)),
            mode_changed=int(d.get("mode_changed", 0)),
            meta_changed=int(d.get("meta_changed", 0)),
        )

    @property
    def total(self) -> int:
        return (
            self.added
            + self.modified
            + self.deleted
            + self.type_changed
            + self.mode_changed
            + self.meta_changed
            + self.renamed
        )


def _changes(v: Any) -> List[Change]:
    return [Change.from_json(c) for c in v] if isinstance(v, list) else []


@dataclass(frozen=True)
class Diff:
    """What ``diff A B`` printed: the changes from ``from_`` to ``to``, sorted by path."""

    from_: str
    """A checkpoint name, ``live``, or ``(empty)`` when there was no head checkpoint."""
    to: str
    """A checkpoint name or ``live``."""
    summary: ChangeSummary
    changes: List[Change]
    raw: Json = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Diff":
        return cls(
            from_=str(d.get("from", "")),
            to=str(d.get("to", "")),
            summary=ChangeSummary.from_json(d.get("summary")),
            changes=_changes(d.get("changes")),
            raw=dict(d),
        )

    def paths(self) -> List[str]:
        """The changed paths, sorted."""
        return [c.path for c in self.changes]

    def __bool__(self) -> bool:
        """``True`` when something changed."""
        return bool(self.changes)

    def __len__(self) -> int:
        return len(self.changes)


@dataclass(frozen=True)
class Stat:
    """A path's attributes (``docs/json.md#stat``)."""

    path: str
    name: str
    type: str
    """``file``, ``dir``, ``symlink``, ``fifo``, ``socket``, ``char_device``,
    ``block_device`` (may gain members)."""
    mode: str
    """Permission bits as a 4-digit octal string, e.g. ``"0644"``."""
    size: int
    nlink: int
    uid: int
    gid: int
    mtime: str
    mtime_ns: int
    ctime_ns: int
    ino: Optional[int]
    """``None`` for an entry the live layer has not loaded yet (reads do not load)."""
    target: Optional[str]
    """The link target, for a symlink."""
    content_hash: Optional[str]
    """The content's hash, for a file."""
    raw: Json = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Stat":
        return cls(
            path=str(d["path"]),
            name=str(d.get("name", "")),
            type=str(d.get("type", "")),
            mode=str(d.get("mode", "")),
            size=int(d.get("size", 0)),
            nlink=int(d.get("nlink", 0)),
            uid=int(d.get("uid", 0)),
            gid=int(d.get("gid", 0)),
            mtime=str(d.get("mtime", "")),
            mtime_ns=int(d.get("mtime_ns", 0)),
            ctime_ns=int(d.get("ctime_ns", 0)),
            ino=None if d.get("ino") is None else int(d["ino"]),
            target=_opt_str(d.get("target")),
            content_hash=_opt_str(d.get("content_hash")),
            raw=dict(d),
        )

    @property
    def is_file(self) -> bool:
        return self.type == "file"

    @property
    def is_dir(self) -> bool:
        return self.type == "dir"

    @property
    def is_symlink(self) -> bool:
        return self.type == "symlink"

    @property
    def mode_bits(self) -> int:
        """``mode`` as an integer (``0o644``)."""
        return int(self.mode, 8)


@dataclass(frozen=True)
class RestoreResult:
    """What ``checkpoint restore`` printed."""

    restored: Checkpoint
    saved_unsaved_changes_as: Optional[str]
    """The automatic checkpoint that holds the changes that were not saved, or ``None``."""
    raw: Json = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "RestoreResult":
        return cls(
            restored=Checkpoint.from_json(d["restored"]),
            saved_unsaved_changes_as=_opt_str(d.get("saved_unsaved_changes_as")),
            raw=dict(d),
        )


@dataclass(frozen=True)
class VaultInfo:
    """A registered vault or fork, as ``vault list`` and ``vault info`` print it."""

    name: str
    path: str
    workspace: str
    current: bool
    parent: Optional[str]
    """For a fork, the name of the vault or fork it was forked from."""
    forked_from_checkpoint: Optional[str]
    created_at: Optional[str]
    error: Optional[str]
    """Why the file could not be read; ``None`` when it could."""
    raw: Json = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "VaultInfo":
        return cls(
            name=str(d["name"]),
            path=str(d.get("path", "")),
            workspace=str(d.get("workspace", "")),
            current=bool(d.get("current", False)),
            parent=_opt_str(d.get("parent")),
            forked_from_checkpoint=_opt_str(d.get("forked_from_checkpoint")),
            created_at=_opt_str(d.get("created_at")),
            error=_opt_str(d.get("error")),
            raw=dict(d),
        )

    @property
    def is_fork(self) -> bool:
        return self.parent is not None


@dataclass(frozen=True)
class VaultDetails:
    """What ``vault info`` printed."""

    vault: VaultInfo
    checkpoints: int
    """Number of the workspace's own checkpoints."""
    head: Optional[str]
    forks: List[str]
    file_bytes: int
    raw: Json = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "VaultDetails":
        return cls(
            vault=VaultInfo.from_json(d["vault"]),
            checkpoints=int(d.get("checkpoints", 0)),
            head=_opt_str(d.get("head")),
            forks=_strs(d.get("forks")),
            file_bytes=int(d.get("file_bytes", 0)),
            raw=dict(d),
        )


@dataclass(frozen=True)
class Conflict:
    """A path both sides of a merge changed differently."""

    path: str
    kind: str
    """``both_modified``, ``both_added``, ``deleted_in_fork``, ``deleted_in_target``,
    ``type_changed``."""
    fork: str
    target: str
    resolution: str
    """``kept_target``, ``markers`` or ``both_kept`` (the fork's copy at
    ``raw["kept_as"]``)."""
    raw: Json = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Conflict":
        return cls(
            path=str(d["path"]),
            kind=str(d.get("kind", "")),
            fork=str(d.get("fork", "")),
            target=str(d.get("target", "")),
            resolution=str(d.get("resolution", "")),
            raw=dict(d),
        )


@dataclass(frozen=True)
class MergeResult:
    """What ``vault merge`` printed (clean or not: conflicts are not an exception)."""

    fork: str
    into: str
    base: str
    dry_run: bool
    clean: bool
    """No conflict is left unresolved."""
    before: Optional[str]
    """The checkpoint holding the target as it was before the merge: restore it to undo."""
    checkpoint: Optional[Checkpoint]
    """The new checkpoint of the target; ``None`` on a dry run or when nothing changed."""
    taken: List[Change]
    conflicts: List[Conflict]
    summary: MergeSummary
    """The counts: taken, conflicts, and unresolved (what a person still has to look at)."""
    paths: List[str]
    """The path filters the merge was limited to; empty: everything."""
    refused: bool = False
    """Conflicts without ``markers=True``: nothing was changed (``taken`` is what the
    merge would take)."""
    line_merged: List[str] = field(default_factory=list)
    """Text files both sides edited without overlap: they hold both sides' edits."""
    raw: Json = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "MergeResult":
        cp = d.get("checkpoint")
        return cls(
            fork=str(d.get("fork", "")),
            into=str(d.get("into", "")),
            base=str(d.get("base", "")),
            dry_run=bool(d.get("dry_run", False)),
            clean=bool(d.get("clean", False)),
            before=_opt_str(d.get("before")),
            checkpoint=Checkpoint.from_json(cp) if isinstance(cp, Mapping) else None,
            taken=_changes(d.get("taken")),
            conflicts=[Conflict.from_json(c) for c in d.get("conflicts") or []],
            summary=MergeSummary.from_json(d.get("summary")),
            paths=_strs(d.get("paths")),
            refused=bool(d.get("refused", False)),
            line_merged=_strs(d.get("line_merged")),
            raw=dict(d),
        )


# --- the execution envelope (docs/exec.md, schemas/execution-envelope.schema.json) ---


@dataclass(frozen=True)
class Command:
    """The command as it was given: an argv vector or a shell line."""

    kind: str
    """``argv`` or ``shell``."""
    argv: Optional[List[str]]
    shell: Optional[str]

    @classmethod
    def from_json(cls, d: Any) -> "Command":
        d = _obj(d)
        argv = d.get("argv")
        return cls(
            kind=str(d.get("kind", "")),
            argv=_strs(argv) if argv is not None else None,
            shell=_opt_str(d.get("shell")),
        )


@dataclass(frozen=True)
class ExecRequest:
    """What was asked: the command, where, and the options (``options`` is kept as the
    dict avfs printed: ``timeout_secs``, ``env``, ``checkpoint``, ``fork``, ...)."""

    command: Command
    cwd: str
    vault: str
    workspace: str
    options: Json

    @classmethod
    def from_json(cls, d: Any) -> "ExecRequest":
        d = _obj(d)
        return cls(
            command=Command.from_json(d.get("command")),
            cwd=str(d.get("cwd", "/")),
            vault=str(d.get("vault", "")),
            workspace=str(d.get("workspace", "")),
            options=_obj(d.get("options")),
        )


@dataclass(frozen=True)
class Finding:
    """One classification of a program (or redirection, or path) by a policy rule."""

    program: str
    category: str
    action: str
    rule: str
    reason: str

    @classmethod
    def from_json(cls, d: Any) -> "Finding":
        d = _obj(d)
        return cls(
            program=str(d.get("program", "")),
            category=str(d.get("category", "")),
            action=str(d.get("action", "")),
            rule=str(d.get("rule", "")),
            reason=str(d.get("reason", "")),
        )


@dataclass(frozen=True)
class Decision:
    """The policy's decision: the strictest finding wins."""

    action: str
    """``allow``, ``allow_with_checkpoint``, ``require_approval`` or ``deny``."""
    categories: List[str]
    """``read_only``, ``mutating``, ``destructive``, ``networked``, ``host_escape_risk``,
    ``unknown``."""
    matched_rule: str
    reason: str
    findings: List[Finding]

    @classmethod
    def from_json(cls, d: Any) -> "Decision":
        d = _obj(d)
        return cls(
            action=str(d.get("action", "")),
            categories=_strs(d.get("categories")),
            matched_rule=str(d.get("matched_rule", "")),
            reason=str(d.get("reason", "")),
            findings=[Finding.from_json(f) for f in d.get("findings") or []],
        )


@dataclass(frozen=True)
class Approval:
    """The approval a run asked for (``require_approval``) or used (``approve=``)."""

    id: str
    state: str
    """``pending``, ``approved``, ``denied``, ``used`` or ``expired``."""
    expires_at_ns: Optional[int]
    raw: Json = field(default_factory=dict, repr=False, compare=False)
    """The object as printed: ``approve``/``deny``/``approvals`` also print ``workspace``,
    ``request``, ``decision`` and the ``*_at_ns`` times."""

    @classmethod
    def from_json(cls, d: Any) -> "Approval":
        d = _obj(d)
        return cls(
            id=str(d.get("id", "")),
            state=str(d.get("state", "")),
            expires_at_ns=_opt_int(d.get("expires_at_ns")),
            raw=d,
        )


@dataclass(frozen=True)
class EscapedProcess:
    pid: int
    command: str


@dataclass(frozen=True)
class QuotaRefused:
    refusals: int
    message: str


@dataclass(frozen=True)
class ExecResult:
    """What the process did."""

    exit_code: Optional[int]
    """The process's exit status; ``None`` when a signal ended it."""
    signal: Optional[int]
    timed_out: bool
    duration_ms: int
    stdout: str
    """Captured standard output, decoded as UTF-8 (lossily): its first and last 8 KiB by
    default, with a line saying what was omitted between (``Workspace.exec_output`` has
    all of it)."""
    stderr: str
    stdout_truncated: bool
    stderr_truncated: bool
    stdout_bytes: int
    stderr_bytes: int
    lingering_processes_killed: bool
    escaped_processes: List[EscapedProcess]
    quota_refused: Optional[QuotaRefused]

    @classmethod
    def from_json(cls, d: Any) -> "ExecResult":
        d = _obj(d)
        qr = d.get("quota_refused")
        return cls(
            exit_code=_opt_int(d.get("exit_code")),
            signal=_opt_int(d.get("signal")),
            timed_out=bool(d.get("timed_out", False)),
            duration_ms=int(d.get("duration_ms", 0)),
            stdout=str(d.get("stdout", "")),
            stderr=str(d.get("stderr", "")),
            stdout_truncated=bool(d.get("stdout_truncated", False)),
            stderr_truncated=bool(d.get("stderr_truncated", False)),
            stdout_bytes=int(d.get("stdout_bytes", 0)),
            stderr_bytes=int(d.get("stderr_bytes", 0)),
            lingering_processes_killed=bool(d.get("lingering_processes_killed", False)),
            escaped_processes=[
                EscapedProcess(pid=int(p.get("pid", 0)), command=str(p.get("command", "")))
                for p in d.get("escaped_processes") or []
            ],
            quota_refused=(
                QuotaRefused(refusals=int(qr.get("refusals", 0)), message=str(qr.get("message", "")))
                if isinstance(qr, Mapping)
                else None
            ),
        )


@dataclass(frozen=True)
class Rollback:
    requested: bool
    """``rollback_on_failure=True`` was given."""
    performed: bool
    """The workspace was restored to the pre-run checkpoint."""
    checkpoint: Optional[str]

    @classmethod
    def from_json(cls, d: Any) -> "Rollback":
        d = _obj(d)
        return cls(
            requested=bool(d.get("requested", False)),
            performed=bool(d.get("performed", False)),
            checkpoint=_opt_str(d.get("checkpoint")),
        )


@dataclass(frozen=True)
class Sandbox:
    """What boundary the kernel enforced for the run."""

    enforced: bool
    mechanism: str
    """``namespaces+landlock(abi N)+seccomp``, or ``none``."""
    network: bool
    network_granted_by: Optional[str]
    writable_paths: List[str]
    read_only_paths: List[str]
    hidden_paths: List[str]

    @classmethod
    def from_json(cls, d: Any) -> "Sandbox":
        d = _obj(d)
        return cls(
            enforced=bool(d.get("enforced", False)),
            mechanism=str(d.get("mechanism", "none")),
            network=bool(d.get("network", False)),
            network_granted_by=_opt_str(d.get("network_granted_by")),
            writable_paths=_strs(d.get("writable_paths")),
            read_only_paths=_strs(d.get("read_only_paths")),
            hidden_paths=_strs(d.get("hidden_paths")),
        )


@dataclass(frozen=True)
class Engine:
    """Where the command ran: ``overlay`` (native speed, the default) or ``fuse`` (the
    fallback), and why; for overlay, how the layer cache was reached and what the ingest of
    the run's changes cost."""

    name: str
    reason: str
    layers: Optional[Json]
    ingest: Optional[Json]

    @classmethod
    def from_json(cls, d: Any) -> "Engine":
        d = _obj(d)
        layers = d.get("layers")
        ingest = d.get("ingest")
        return cls(
            name=str(d.get("name", "")),
            reason=str(d.get("reason", "")),
            layers=dict(layers) if isinstance(layers, Mapping) else None,
            ingest=dict(ingest) if isinstance(ingest, Mapping) else None,
        )


@dataclass(frozen=True)
class Envelope:
    """The execution envelope ``avfs exec --json`` prints (``docs/exec.md``).

    ``result`` is ``None`` when nothing ran (denied, waiting for approval). The
    shortcuts ``stdout``, ``stderr`` and ``duration_ms`` read ``result`` and give ``""`` /
    ``0`` then.
    """

    schema_version: int
    id: str
    request: ExecRequest
    decision: Decision
    approval: Optional[Approval]
    checkpoint: Optional[str]
    """The checkpoint taken before the run, or ``None`` when none was taken."""
    result: Optional[ExecResult]
    changes: List[Change]
    """The paths the run changed, sorted by path, with ``patch`` for small text files:
    all of them with ``changes="full"``, else the first ``max_changes`` (50);
    ``changes_page`` says how many there are and how to page the rest."""
    change_summary: ChangeSummary
    """Counts by kind of *all* the changes (``raw["change_summary"]`` also has
    ``total`` and, for long lists, ``by_directory``)."""
    rollback: Rollback
    mountpoint: Optional[str]
    workspace_path: Optional[str]
    """The workspace's stable path, where the command ran (the same in every run of the
    vault and its forks); ``None`` when nothing ran."""
    engine: Optional[Engine]
    sandbox: Sandbox
    exit_code: int
    """The status ``avfs exec`` exited with: the command's own, 124 (timed out),
    128+N (signal N), 126 (denied) or 75 (waiting for approval)."""
    changes_page: Json = field(default_factory=dict)
    """How much of the list ``changes`` shows (``shown``, ``total``, ``truncated``) and
    the way to the rest: ``before``/``after`` checkpoints for :meth:`Workspace.diff`
    with ``offset``/``limit``, and ``rest``, the same as an ``avfs`` command line."""
    service_changes: Optional[Json] = None
    """What the workspace's services wrote since its last run (``services``,
    ``changes``, ``change_summary``, ``truncated``), taken in before this run and so
    not in ``changes``; None when no service ran since."""
    raw: Json = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Envelope":
        approval = d.get("approval")
        result = d.get("result")
        return cls(
            schema_version=int(d.get("schema_version", 0)),
            id=str(d.get("id", "")),
            request=ExecRequest.from_json(d.get("request")),
            decision=Decision.from_json(d.get("decision")),
            approval=Approval.from_json(approval) if isinstance(approval, Mapping) else None,
            checkpoint=_opt_str(d.get("checkpoint")),
            result=ExecResult.from_json(result) if isinstance(result, Mapping) else None,
            changes=_changes(d.get("changes")),
            change_summary=ChangeSummary.from_json(d.get("change_summary")),
            rollback=Rollback.from_json(d.get("rollback")),
            mountpoint=_opt_str(d.get("mountpoint")),
            workspace_path=_opt_str(d.get("workspace_path")),
            engine=Engine.from_json(d["engine"]) if isinstance(d.get("engine"), Mapping) else None,
            sandbox=Sandbox.from_json(d.get("sandbox")),
            exit_code=int(d.get("exit_code", 0)),
            changes_page=dict(_obj(d.get("changes_page"))),
            service_changes=(
                dict(d["service_changes"]) if isinstance(d.get("service_changes"), Mapping) else None
            ),
            raw=dict(d),
        )

    @property
    def ran(self) -> bool:
        """The command ran (the decision was ``allow`` or ``allow_with_checkpoint``)."""
        return self.result is not None

    @property
    def ok(self) -> bool:
        """The command ran and exited 0 (not killed, not timed out)."""
        return self.result is not None and self.result.exit_code == 0 and not self.result.timed_out

    @property
    def timed_out(self) -> bool:
        return self.result is not None and self.result.timed_out

    @property
    def stdout(self) -> str:
        return self.result.stdout if self.result is not None else ""

    @property
    def stderr(self) -> str:
        return self.result.stderr if self.result is not None else ""

    @property
    def duration_ms(self) -> int:
        return self.result.duration_ms if self.result is not None else 0

    def changed_paths(self) -> List[str]:
        """The paths the run changed, sorted."""
        return [c.path for c in self.changes]
