"""Typed Python client for ``avfs`` (agentvfs): forkable, versioned workspaces for AI
agents, driven through the ``avfs`` binary's JSON interface (``avfs --json``).

    from agentvfs import Vault

    vault = Vault.create("demo", home="/tmp/avfs-home")
    ws = vault.workspace
    ws.write_file("/notes.txt", "hello\\n")
    env = ws.exec("sed -i s/hello/bye/ notes.txt")
    print(env.exit_code, [c.path for c in env.changes])
"""

from .client import Avfs, TempVault, Vault, Workspace, find_binary
from .services import Service, ServiceInfo, ServiceNotStarted
from .aio import AsyncAvfs
from .errors import (
    CLI_ERROR_KINDS,
    CLIENT_KINDS,
    AlreadyExists,
    ApprovalRequired,
    AvfsError,
    BinaryNotFound,
    CheckpointExists,
    CommandFailed,
    ExecError,
    InvalidArgument,
    NoSuchCheckpoint,
    NoSuchVault,
    NotFound,
    PolicyDenied,
    ProtocolError,
    Refused,
    SandboxUnavailable,
    UsageError,
    VaultExists,
)
from .tooltypes import (
    CopyResult,
    CopyStats,
    FindEntry,
    FindResult,
    GrepMatch,
    GrepResult,
    MergeSummary,
    MountRecord,
    SearchHit,
    SearchIndex,
    SearchResult,
    TagResult,
)
from .types import (
    Approval,
    Change,
    ChangeSummary,
    Checkpoint,
    Command,
    Conflict,
    Decision,
    Diff,
    Engine,
    Envelope,
    EscapedProcess,
    ExecRequest,
    ExecResult,
    Finding,
    MergeResult,
    QuotaRefused,
    RestoreResult,
    Rollback,
    Sandbox,
    Stat,
    VaultDetails,
    VaultInfo,
)

__version__ = "0.1.0"

__all__ = [
    "Avfs",
    "AsyncAvfs",
    "TempVault",
    "CLI_ERROR_KINDS",
    "CLIENT_KINDS",
    "Vault",
    "Workspace",
    "Service",
    "ServiceInfo",
    "ServiceNotStarted",
    "find_binary",
    # errors
    "AvfsError",
    "UsageError",
    "NotFound",
    "NoSuchVault",
    "NoSuchCheckpoint",
    "AlreadyExists",
    "VaultExists",
    "CheckpointExists",
    "InvalidArgument",
    "Refused",
    "SandboxUnavailable",
    "ExecError",
    "PolicyDenied",
    "ApprovalRequired",
    "CommandFailed",
    "BinaryNotFound",
    "ProtocolError",
    # documents
    "CopyResult",
    "CopyStats",
    "FindEntry",
    "FindResult",
    "GrepMatch",
    "GrepResult",
    "MergeSummary",
    "MountRecord",
    "SearchHit",
    "SearchIndex",
    "SearchResult",
    "TagResult",
    "Approval",
    "Change",
    "ChangeSummary",
    "Checkpoint",
    "Command",
    "Conflict",
    "Decision",
    "Diff",
    "Engine",
    "Envelope",
    "EscapedProcess",
    "ExecRequest",
    "ExecResult",
    "Finding",
    "MergeResult",
    "QuotaRefused",
    "RestoreResult",
    "Rollback",
    "Sandbox",
    "Stat",
    "VaultDetails",
    "VaultInfo",
]
