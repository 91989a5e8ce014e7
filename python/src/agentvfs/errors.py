"""Exceptions raised by the client.

Every exception this package raises is an :class:`AvfsError`. There are three families:

* ``avfs`` printed an error document (``{"error": {"kind", "message", "exit_code"}}``):
  an :class:`AvfsError`, or the subclass registered for its ``kind`` (:class:`NotFound`,
  :class:`NoSuchCheckpoint`, ...). ``.json`` is the error object exactly as printed.
* ``avfs exec`` printed an envelope but the command did not run, or (with ``check=True``)
  failed: an :class:`ExecError` (:class:`PolicyDenied`, :class:`ApprovalRequired`,
  :class:`CommandFailed`). ``.envelope`` holds the parsed envelope and ``.json`` the raw one.
* The binary could not be used at all: :class:`BinaryNotFound`, :class:`ProtocolError`.
  ``.json`` is ``None``: ``avfs`` printed no document.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Optional, Type

if TYPE_CHECKING:  # pragma: no cover
    from .types import Envelope

__all__ = [
    "AvfsError",
    "UsageError",
    "NotFound",
    "NoSuchVault",
    "NoSuchCheckpoint",
    "NoSuchOutput",
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
    "error_from_json",
    "CLI_ERROR_KINDS",
    "CLIENT_KINDS",
]


class AvfsError(Exception):
    """Base class of every error of this package.

    Attributes:
        kind: the error kind. For an error document this is ``error.kind`` as printed by
            ``avfs`` (``not_found``, ``usage``, ...; see ``docs/cli.md#error-kinds``; new
            kinds may appear). For the client's own errors it is one of
            ``binary_not_found``, ``protocol``, and for exec outcomes ``denied``,
            ``approval_required`` or ``command_failed``.
        message: the message, for people.
        exit_code: the exit status of ``avfs`` (``None`` when it did not run).
        json: the JSON object ``avfs`` printed for this error: the ``error`` object of an
            error document, the whole envelope for an :class:`ExecError`, ``None`` when
            ``avfs`` printed no document.
    """

    kind: str
    message: str
    exit_code: Optional[int]
    json: Optional[Dict[str, Any]]

    def __init__(
        self,
        kind: str,
        message: str,
        exit_code: Optional[int] = None,
        json: Optional[Dict[str, Any]] = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.exit_code = exit_code
        self.json = json

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(kind={self.kind!r}, message={self.message!r}, "
            f"exit_code={self.exit_code!r})"
        )


class UsageError(AvfsError):
    """``usage``: the command line did not parse (a bug in the caller or this client)."""


class NotFound(AvfsError):
    """``not_found``: a workspace path (or a parent directory) does not exist.

    Also the base class of :class:`NoSuchVault` and :class:`NoSuchCheckpoint`, so
    ``except NotFound`` catches every "does not exist".
    """


class NoSuchVault(NotFound):
    """``no_such_vault``: no vault or fork has that name, or its file is gone."""


class NoSuchCheckpoint(NotFound):
    """``no_such_checkpoint``: the workspace has no checkpoint with that name."""


class NoSuchOutput(NotFound):
    """``no_such_output``: no output is kept for that exec id (unknown, nothing ran,
    its vault was deleted, or the vault's cap on kept output dropped it)."""


class AlreadyExists(AvfsError):
    """``already_exists``: the path to create exists already.

    Also the base class of :class:`VaultExists` and :class:`CheckpointExists`.
    """


class VaultExists(AlreadyExists):
    """``vault_exists``: a vault or fork with that name is already registered."""


class CheckpointExists(AlreadyExists):
    """``checkpoint_exists``: the workspace already has a checkpoint with that name."""


class InvalidArgument(AvfsError):
    """``invalid_argument``: an argument has a bad value (the message names it)."""


class Refused(AvfsError):
    """``refused``: avfs refused something destructive or impossible."""


class SandboxUnavailable(AvfsError):
    """``sandbox_unavailable``: ``exec(sandbox=True)`` could not be enforced; nothing ran."""


#: Every ``kind`` an ``avfs`` error document can carry, exactly the CLI's documented list
#: (docs/cli.md#error-kinds, ``Error::kind()`` in src/error.rs, plus ``usage``).
#: A test compares the two. New kinds may appear: treat an unknown one like ``internal``.
CLI_ERROR_KINDS = (
    "usage",
    "not_a_vault",
    "corrupt_vault",
    "vault_too_new",
    "no_such_vault",
    "vault_exists",
    "no_such_checkpoint",
    "checkpoint_exists",
    "not_found",
    "no_such_output",
    "already_exists",
    "not_a_directory",
    "is_a_directory",
    "directory_not_empty",
    "name_too_long",
    "invalid_name",
    "invalid_argument",
    "file_too_large",
    "xattrs_full",
    "symlink_loop",
    "refused",
    "host_io",
    "busy",
    "no_space",
    "quota_exceeded",
    "sandbox_unavailable",
    "no_such_remote",
    "remote",
    "push_rejected",
    "remote_unsafe",
    "remote_corrupt",
    "internal",
)

#: Kinds this client gives its own exceptions. They are never in an ``avfs`` error
#: document: ``denied`` and ``approval_required`` are exec envelopes whose
#: ``decision.action`` is ``deny`` / ``require_approval`` (exit 126 / 75),
#: ``command_failed`` an envelope of a command that failed under ``check=True``, and
#: ``binary_not_found`` / ``protocol`` mean ``avfs`` printed no document at all.
CLIENT_KINDS = ("denied", "approval_required", "command_failed", "binary_not_found", "protocol")

_BY_KIND: Dict[str, Type[AvfsError]] = {
    "usage": UsageError,
    "not_found": NotFound,
    "no_such_vault": NoSuchVault,
    "no_such_checkpoint": NoSuchCheckpoint,
    "no_such_output": NoSuchOutput,
    "already_exists": AlreadyExists,
    "vault_exists": VaultExists,
    "checkpoint_exists": CheckpointExists,
    "invalid_argument": InvalidArgument,
    "refused": Refused,
    "sandbox_unavailable": SandboxUnavailable,
}


def error_from_json(error: Dict[str, Any], exit_code: Optional[int] = None) -> AvfsError:
    """The exception for an ``error`` object of an avfs error document.

    Unknown kinds give a plain :class:`AvfsError` (avfs may add kinds).
    """
    kind = str(error.get("kind", "internal"))
    message = str(error.get("message", ""))
    code = error.get("exit_code", exit_code)
    cls = _BY_KIND.get(kind, AvfsError)
    return cls(kind, message, code if isinstance(code, int) else exit_code, error)


class ExecError(AvfsError):
    """``exec`` printed an envelope, but the command did not run or (``check=True``) failed.

    Attributes:
        envelope: the parsed :class:`~agentvfs.Envelope`.
    """

    envelope: "Envelope"

    def __init__(self, kind: str, message: str, envelope: "Envelope") -> None:
        super().__init__(kind, message, envelope.exit_code, envelope.raw)
        self.envelope = envelope


class PolicyDenied(ExecError):
    """The policy denied the command (decision ``deny``, avfs exit 126): nothing ran.

    ``envelope.decision`` says which rule decided and why.
    """


class ApprovalRequired(ExecError):
    """The command needs an approval (decision ``require_approval``, exit 75): nothing ran.

    Attributes:
        approval_id: the pending approval's id (``ap-...``). Approve it with
            :meth:`Workspace.approve(ID) <agentvfs.Workspace.approve>` (or ``avfs approve ID``), then run
            ``Workspace.exec(approve=ID)``.
    """

    approval_id: Optional[str]

    def __init__(self, kind: str, message: str, envelope: "Envelope") -> None:
        super().__init__(kind, message, envelope)
        self.approval_id = envelope.approval.id if envelope.approval else None


class CommandFailed(ExecError):
    """Raised only with ``exec(..., check=True)``: the command ran and exited non-zero,
    was killed by a signal or timed out. Its changes are in the workspace (unless
    ``rollback_on_failure=True``), and listed in ``envelope.changes``."""


class BinaryNotFound(AvfsError):
    """The ``avfs`` binary could not be found or is not executable."""

    def __init__(self, message: str) -> None:
        super().__init__("binary_not_found", message, None, None)


class ProtocolError(AvfsError):
    """``avfs`` did not print one JSON document (crashed, or is not avfs).

    Attributes:
        stdout, stderr: what the process printed (decoded leniently).
    """

    stdout: str
    stderr: str

    def __init__(self, message: str, exit_code: Optional[int], stdout: str, stderr: str) -> None:
        super().__init__("protocol", message, exit_code, None)
        self.stdout = stdout
        self.stderr = stderr
