"""The client: runs the ``avfs`` binary with ``--json`` and turns its documents into
dataclasses and its error documents into exceptions."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from .errors import (
    ApprovalRequired,
    BinaryNotFound,
    CommandFailed,
    NoSuchVault,
    NotFound,
    PolicyDenied,
    VaultExists,
    ProtocolError,
    error_from_json,
)
from .tools import ToolsMixin

if TYPE_CHECKING:
    from .services import Service, ServiceInfo
from .types import (
    Approval,
    Checkpoint,
    Diff,
    Envelope,
    MergeResult,
    RestoreResult,
    Stat,
    VaultDetails,
    VaultInfo,
)

__all__ = ["Avfs", "TempVault", "Vault", "Workspace", "find_binary"]

PathLike = Union[str, "os.PathLike[str]"]


def _is_executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def find_binary(binary: Optional[PathLike] = None) -> str:
    """The ``avfs`` executable to run: ``binary`` if given, else ``$AVFS_BIN``, else
    ``avfs`` on ``$PATH``. A value without a ``/`` is looked up on ``$PATH``.

    Raises:
        BinaryNotFound: it does not exist or is not executable.
    """
    if binary is not None:
        candidate, source = os.fspath(binary), "the binary argument"
    elif os.environ.get("AVFS_BIN"):
        candidate, source = os.environ["AVFS_BIN"], "$AVFS_BIN"
    else:
        candidate, source = "avfs", "the default"
    if os.sep in candidate or (os.altsep and os.altsep in candidate):
        if _is_executable(candidate):
            return os.path.abspath(candidate)
        why = "does not exist" if not os.path.exists(candidate) else "is not an executable file"
        raise BinaryNotFound(f"avfs binary {candidate!r} (from {source}) {why}")
    found = shutil.which(candidate)
    if found is None:
        hint = (
            "; pass binary=..., set $AVFS_BIN, or put avfs on $PATH"
            if source == "the default"
            else ""
        )
        raise BinaryNotFound(f"avfs binary {candidate!r} (from {source}) not found on $PATH{hint}")
    return found


class Avfs:
    """Runs one ``avfs`` binary, with one ``$AVFS_HOME``.

    Args:
        binary: path (or name on ``$PATH``) of the ``avfs`` executable. Default:
            ``$AVFS_BIN``, else ``avfs`` on ``$PATH``. Checked at once.
        home: the ``$AVFS_HOME`` to run with (where the registry of vault names, the
            default vault files, policies and mount records live). Default: the
            inherited ``$AVFS_HOME``, else ``~/.avfs``.
        env: more environment variables for every ``avfs`` process.

    ``$AVFS_VAULT`` is never passed on: every call that acts on a vault names it with
    ``--vault``.
    """

    binary: str
    home: Optional[str]

    def __init__(
        self,
        binary: Optional[PathLike] = None,
        *,
        home: Optional[PathLike] = None,
        env: Optional[Mapping[str, str]] = None,
    ) -> None:
        self.binary = find_binary(binary)
        self.home = os.fspath(home) if home is not None else None
        self._env_extra: Dict[str, str] = dict(env or {})

    def __repr__(self) -> str:
        return f"Avfs(binary={self.binary!r}, home={self.home!r})"

    def __enter__(self) -> "Avfs":
        """``with Avfs(...) as avfs:``; the client holds no process or file between
        calls, so leaving the block only ends the temporary home of :meth:`temp`."""
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to release for a client on a home of its own choosing; see
        :meth:`temp` for the one that removes its home."""

    @classmethod
    def temp(cls, name: str = "scratch", *, binary: Optional[PathLike] = None) -> "TempVault":
        """A context manager giving a new vault in a temporary ``$AVFS_HOME``, removed
        (mounts, vault file and home) when the block ends, even on an exception::

            with Avfs.temp() as vault:
                vault.workspace.write_file("/a.txt", "hi\\n")
        """
        return TempVault(name, binary=binary)

    def _env(self) -> Dict[str, str]:
        env = dict(os.environ)
        env.pop("AVFS_VAULT", None)
        if self.home is not None:
            env["AVFS_HOME"] = self.home
        env.update(self._env_extra)
        return env

    def call(
        self,
        *args: str,
        vault: Optional[str] = None,
        input: Optional[bytes] = None,
    ) -> Tuple[Dict[str, Any], int]:
        """Runs ``avfs --json [--vault=VAULT] ARGS...`` and returns its document and exit
        status. An error document is raised as an exception instead; a document printed
        with a non-zero status (an ``exec`` envelope, an unclean ``vault merge``, a
        ``grep`` without matches, a failed ``verify``) is returned.

        Raises:
            AvfsError: (a subclass for known kinds) ``avfs`` printed an error document.
            ProtocolError: ``avfs`` printed no JSON document.
            BinaryNotFound: the binary could not be started.
        """
        cmd = [self.binary, "--json"]
        if vault is not None:
            cmd.append(f"--vault={vault}")
        cmd.extend(args)
        try:
            proc = subprocess.run(
                cmd,
                input=input if input is not None else b"",
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self._env(),
                check=False,
            )
        except OSError as e:
            raise BinaryNotFound(f"cannot run avfs binary {self.binary!r}: {e}") from e
        try:
            doc = json.loads(proc.stdout)
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            stdout = proc.stdout.decode("utf-8", "replace")
            stderr = proc.stderr.decode("utf-8", "replace")
            tail = stderr.strip().splitlines()[-1:] or stdout.strip().splitlines()[:1]
            raise ProtocolError(
                f"{os.path.basename(self.binary)} {' '.join(args[:2])} exited with status "
                f"{proc.returncode} without printing a JSON document"
                + (f": {tail[0]}" if tail else ""),
                proc.returncode,
                stdout,
                stderr,
            )
        err = doc.get("error")
        if isinstance(err, dict):
            raise error_from_json(err, proc.returncode)
        return doc, proc.returncode

    def run(self, *args: str, vault: Optional[str] = None, input: Optional[bytes] = None) -> Dict[str, Any]:
        """Like :meth:`call`, returning only the document: ``avfs.run("grep", "TODO",
        vault="demo")`` for anything this client has no method for."""
        return self.call(*args, vault=vault, input=input)[0]

    def version(self) -> str:
        """``avfs --version``, e.g. ``"avfs 0.1.0"``."""
        try:
            proc = subprocess.run(
                [self.binary, "--version"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self._env(),
                check=False,
            )
        except OSError as e:
            raise BinaryNotFound(f"cannot run avfs binary {self.binary!r}: {e}") from e
        return proc.stdout.decode("utf-8", "replace").strip()

    # --- registry ---

    def vaults(self) -> List[VaultInfo]:
        """Every registered vault and fork, sorted by name (``vault list``)."""
        return [VaultInfo.from_json(v) for v in self.run("vault", "list")["vaults"]]

    def create_vault(
        self, name: str, *, path: Optional[PathLike] = None, exist_ok: bool = False
    ) -> "Vault":
        """``vault create NAME [--path FILE]``: a new vault file, registered as ``name``.

        With ``exist_ok=True``, a vault already registered as ``name`` is opened instead
        (get-or-create); with ``path`` too, it must be that file, else ``VaultExists``.
        """
        if exist_ok:
            try:
                v = self.open_vault(name)
            except NoSuchVault:
                pass
            else:
                if path is not None and os.path.realpath(v.path) != os.path.realpath(path):
                    raise VaultExists(
                        "vault_exists",
                        f"vault {name!r} exists with another file ({v.path}), not {os.fspath(path)}",
                        1,
                    )
                return v
        args = ["vault", "create"]
        if path is not None:
            args.append(f"--path={os.fspath(path)}")
        doc = self.run(*args, "--", name)
        c = doc["created"]
        return Vault(self, str(c["name"]), str(c["path"]), str(c["workspace"]))

    def open_vault(self, name: str) -> "Vault":
        """An existing vault or fork, by registered name or path of a ``.avfs`` file.

        Raises:
            NoSuchVault: there is none.
        """
        v = VaultDetails.from_json(self.run("vault", "info", vault=name)).vault
        return Vault(self, name, v.path, v.workspace)


def _avfs(avfs: Optional[Avfs], binary: Optional[PathLike], home: Optional[PathLike]) -> Avfs:
    if avfs is not None:
        if binary is not None or home is not None:
            raise ValueError("give either avfs= or binary=/home=, not both")
        return avfs
    return Avfs(binary, home=home)


class Vault:
    """A registered vault or fork: a name for one workspace of one ``.avfs`` file.

    Make one with :meth:`create` or :meth:`open` (or :meth:`fork` of another). The
    files, ``exec``, checkpoints and diffs are on :attr:`workspace`.

    Attributes:
        avfs: the :class:`Avfs` runner it uses.
        name: the registered name (or the path, when opened by path): what ``--vault``
            is given.
        path: absolute path of the vault file.
        workspace_name: the workspace inside the file (``main`` for a vault, the fork's
            name for a fork).
    """

    avfs: Avfs
    name: str
    path: str
    workspace_name: str

    def __init__(self, avfs: Avfs, name: str, path: str, workspace_name: str) -> None:
        self.avfs = avfs
        self.name = name
        self.path = path
        self.workspace_name = workspace_name

    def __repr__(self) -> str:
        return f"Vault(name={self.name!r}, path={self.path!r}, workspace={self.workspace_name!r})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Vault)
            and (self.path, self.workspace_name) == (other.path, other.workspace_name)
        )

    def __hash__(self) -> int:
        return hash((self.path, self.workspace_name))

    @classmethod
    def create(
        cls,
        name: str,
        *,
        path: Optional[PathLike] = None,
        avfs: Optional[Avfs] = None,
        binary: Optional[PathLike] = None,
        home: Optional[PathLike] = None,
        exist_ok: bool = False,
    ) -> "Vault":
        """Creates a vault file (``$AVFS_HOME/vaults/NAME.avfs``, or ``path``) and
        registers it as ``name``. With ``exist_ok=True`` an existing vault of that name
        is opened instead (get-or-create).

        Raises:
            VaultExists: the name is taken (and ``exist_ok`` is false).
            AlreadyExists: ``path`` exists.
            InvalidArgument: the name is not allowed.
        """
        return _avfs(avfs, binary, home).create_vault(name, path=path, exist_ok=exist_ok)

    @classmethod
    def open(
        cls,
        name: str,
        *,
        avfs: Optional[Avfs] = None,
        binary: Optional[PathLike] = None,
        home: Optional[PathLike] = None,
    ) -> "Vault":
        """An existing vault or fork, by registered name or by path of a ``.avfs`` file.

        Raises:
            NoSuchVault: there is none.
        """
        return _avfs(avfs, binary, home).open_vault(name)

    @classmethod
    def list(
        cls,
        *,
        avfs: Optional[Avfs] = None,
        binary: Optional[PathLike] = None,
        home: Optional[PathLike] = None,
    ) -> List[VaultInfo]:
        """Every registered vault and fork (``vault list``)."""
        return _avfs(avfs, binary, home).vaults()

    @property
    def workspace(self) -> "Workspace":
        """The vault's files, ``exec``, checkpoints and diffs."""
        return Workspace(self.avfs, self.name)

    def info(self) -> VaultDetails:
        """``vault info``: parent, fork point, head, checkpoint count, forks, file size."""
        return VaultDetails.from_json(self.avfs.run("vault", "info", vault=self.name))

    def fork(self, name: str, *, from_checkpoint: Optional[str] = None) -> "Vault":
        """``vault fork``: a new workspace in the same file, starting from this one's
        live state (or from checkpoint ``from_checkpoint``). O(1). Changes in the fork
        are invisible here and the other way round; bring them back with :meth:`merge`.

        Raises:
            VaultExists: the name is taken.
            NoSuchCheckpoint: ``from_checkpoint`` does not exist.
        """
        args = ["vault", "fork"]
        if from_checkpoint is not None:
            args.append(f"--from={from_checkpoint}")
        doc = self.avfs.run(*args, "--", self.name, name)
        f = doc["fork"]
        return Vault(self.avfs, str(f["name"]), str(f["path"]), str(f["workspace"]))

    def merge(
        self,
        fork: Union["Vault", str],
        *,
        paths: Sequence[str] = (),
        dry_run: bool = False,
        markers: bool = False,
    ) -> MergeResult:
        """``vault merge FORK --into SELF``: a three-way merge of what ``fork`` changed
        since it was forked; text files both sides edited are merged line by line.
        Conflicts do not raise: check ``result.clean`` and ``result.conflicts``. A merge
        with conflicts changes nothing (``result.refused``) unless ``markers=True``
        (``--conflicts=markers``): conflict markers in text files, the fork's copy of a
        binary file beside the target's. ``paths`` limits the merge to those paths.

        Raises:
            Refused: ``fork`` is not a fork (or its base checkpoint was deleted).
        """
        fork_name = fork.name if isinstance(fork, Vault) else fork
        args = ["vault", "merge", f"--into={self.name}"]
        args += [f"--path={p}" for p in paths]
        if dry_run:
            args.append("--dry-run")
        if markers:
            args.append("--conflicts=markers")
        return MergeResult.from_json(self.avfs.run(*args, "--", fork_name))

    def delete(self, *, force: bool = False) -> List[str]:
        """``vault delete NAME -y``: unregisters the name and, for a vault, deletes its
        file and its forks' names (``force=True`` is needed when it has forks). Returns
        every name removed."""
        args = ["vault", "delete", "-y"]
        if force:
            args.append("--force")
        return [str(n) for n in self.avfs.run(*args, "--", self.name)["deleted"]]


class Workspace(ToolsMixin):
    """The files, ``exec``, checkpoints and diffs of one vault or fork.

    Paths are workspace paths: absolute (``/src/main.rs``), never on the host.

    Attributes:
        avfs: the :class:`Avfs` runner it uses.
        vault: the vault or fork name (or vault file path) given to ``--vault``.
    """

    avfs: Avfs
    vault: str

    def __init__(self, avfs: Avfs, vault: str) -> None:
        self.avfs = avfs
        self.vault = vault

    def __repr__(self) -> str:
        return f"Workspace(vault={self.vault!r})"

    def _run(self, *args: str, input: Optional[bytes] = None) -> Dict[str, Any]:
        return self.avfs.run(*args, vault=self.vault, input=input)

    # --- services ---

    def service(
        self,
        command: Union[str, Sequence[str]],
        *,
        name: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        ttl_secs: Optional[float] = None,
    ) -> "Service":
        """Starts ``command`` (a bash line, or an argv list) as a service of the
        workspace (``avfs service start``): decided by the policy, in the sandbox;
        returns once it runs. Use it as a context manager to stop it at the end::

            with ws.service(["python3", "-m", "http.server", "8000"], name="web"):
                ws.exec("curl -s --max-time 5 http://127.0.0.1:8000/")

        Raises:
            ServiceNotStarted: the policy asked a person or denied it (nothing
                started), or the command exited at once (its status and last output
                are in the message).
            SandboxUnavailable: services cannot run here (see docs/services.md).
        """
        from .services import Service, ServiceInfo, ServiceNotStarted

        args = ["service", "start"]
        if name is not None:
            args.append(f"--name={name}")
        for k, v in (env or {}).items():
            args.append(f"--env={k}={v}")
        if cwd is not None:
            args.append(f"--cwd={cwd}")
        if ttl_secs is not None:
            args.append(f"--ttl={ttl_secs}")
        if isinstance(command, str):
            args.extend(["--shell", command])
        else:
            args.append("--")
            args.extend(command)
        doc, code = self.avfs.call(*args, vault=self.vault)
        svc = doc.get("service")
        if svc is None:
            decision = doc.get("decision") or {}
            why = f"{decision.get('action')} ({decision.get('matched_rule')}): {decision.get('reason', '')}"
            err = ServiceNotStarted(
                "approval_required" if doc.get("approval") else "denied",
                f"service not started: {why}",
                code,
                doc,
            )
            err.approval_id = doc.get("approval")
            raise err
        info = ServiceInfo.from_json(svc)
        if info.state != "running":
            raise ServiceNotStarted(
                "command_failed",
                f"service {info.name} {info.state} at once (exit {info.exit_code}): "
                f"{(info.last_output or '').strip()}",
                code,
                doc,
            )
        return Service(self, info, doc)

    def services(self) -> "List[ServiceInfo]":
        """The workspace's services, ended ones included (``service list``)."""
        from .services import ServiceInfo

        return [ServiceInfo.from_json(s) for s in self._run("service", "list")["services"]]

    # --- files ---

    def read_file(self, path: str, *, at: Optional[str] = None) -> bytes:
        """The content of a file, live or as it was at checkpoint ``at``.

        Raises:
            NotFound: it does not exist (or not at ``at``).
            NoSuchCheckpoint: ``at`` is not a checkpoint.
            AvfsError: of kind ``is_a_directory`` for a directory.
        """
        args = ["cat"]
        if at is not None:
            args.append(f"--at={at}")
        doc = self._run(*args, "--", path)
        content = str(doc["content"])
        if doc.get("encoding") == "hex":
            return bytes.fromhex(content)
        return content.encode("utf-8")

    def read_text(
        self, path: str, *, at: Optional[str] = None, encoding: str = "utf-8", errors: str = "strict"
    ) -> str:
        """:meth:`read_file`, decoded."""
        return self.read_file(path, at=at).decode(encoding, errors)

    def write_file(
        self,
        path: str,
        data: Union[bytes, str],
        *,
        append: bool = False,
        parents: bool = False,
    ) -> int:
        """Writes (or with ``append=True`` appends to) a file; ``str`` is written as
        UTF-8. ``parents=True`` creates missing parent directories. Returns the file's
        size afterwards."""
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        args = ["write"]
        if append:
            args.append("--append")
        if parents:
            args.append("-p")
        return int(self._run(*args, "--", path, input=raw)["size"])

    def list_dir(self, path: str = "/", *, all: bool = False) -> List[Stat]:
        """The entries of a directory, sorted by name; names starting with ``.`` only
        with ``all=True``. For a file, one entry describing it."""
        args = ["ls"]
        if all:
            args.append("-a")
        return [Stat.from_json(e) for e in self._whole(args, ["--", path], "entries")["entries"]]

    def stat(self, path: str) -> Stat:
        """A path's attributes (a final symlink is not followed)."""
        return Stat.from_json(self._run("stat", "--", path))

    def exists(self, path: str) -> bool:
        """Whether the path exists (a dangling symlink exists)."""
        try:
            self.stat(path)
        except NotFound:
            return False
        return True

    def mkdir(self, path: str, *, parents: bool = False) -> None:
        """Creates a directory (``parents=True``: and its parents, no error if it exists)."""
        args = ["mkdir"]
        if parents:
            args.append("-p")
        self._run(*args, "--", path)

    def remove(self, path: str, *, recursive: bool = False, force: bool = False) -> List[str]:
        """Removes a file (a directory with ``recursive=True``); ``force=True`` ignores a
        missing path. Returns the paths removed."""
        args = ["rm"]
        if recursive:
            args.append("-r")
        if force:
            args.append("-f")
        return [str(p) for p in self._run(*args, "--", path)["removed"]]

    # --- exec ---

    def exec(
        self,
        command: Union[str, Sequence[str], None] = None,
        *,
        cwd: Optional[str] = None,
        timeout: Optional[float] = None,
        env: Optional[Mapping[str, str]] = None,
        checkpoint: Optional[bool] = None,
        rollback_on_failure: bool = False,
        fork: Optional[str] = None,
        ephemeral: bool = False,
        keep: bool = False,
        sandbox: Optional[bool] = None,
        approve: Optional[str] = None,
        wait_approval: Optional[float] = None,
        changes: Optional[str] = None,
        max_changes: Optional[int] = None,
        max_patch_bytes: Optional[int] = None,
        output_head: Optional[int] = None,
        output_tail: Optional[int] = None,
        check: bool = False,
    ) -> Envelope:
        """Runs a command through the policy boundary (``avfs exec``) in the mounted
        workspace and returns the execution envelope.

        Args:
            command: a ``str`` is a shell line (``--shell``, run with ``sh -c``); a
                sequence is an argv (``-- ARGV...``). May be omitted with ``approve``.
            cwd: directory inside the workspace to run in (default ``/``).
            timeout: seconds before the command is stopped (``envelope.timed_out``).
            env: extra environment variables for the command.
            checkpoint: ``True`` always checkpoints first, ``False`` never does,
                ``None`` lets the policy decide.
            rollback_on_failure: restore the pre-run checkpoint if the command fails.
            fork: run in this task fork of the vault (made on first use).
            ephemeral: run in a throw-away fork (``keep=True`` keeps it).
            sandbox: ``False`` runs without the sandbox (``--no-sandbox``: the user's
                full rights; refused where the policy requires it), ``True`` asks for it
                explicitly, ``None`` follows the policy (the sandbox is the default).
            approve: run the command of this approved approval id.
            wait_approval: when the command requires approval, wait up to this many
                seconds for a person to decide (``avfs approve ID``): approved, it runs
                and its envelope is returned; denied, :class:`PolicyDenied` is raised;
                undecided in time, :class:`ApprovalRequired`.
            changes: how much of the change list the envelope shows: ``"list"`` (the
                default: the first ``max_changes``, patches within ``max_patch_bytes``),
                ``"full"`` (everything), ``"summary"`` (counts by kind and top
                directory) or ``"none"`` (counts by kind).
                ``envelope.changes_page["rest"]`` is the ``avfs diff`` command that
                pages the rest; :meth:`diff` with ``offset``/``limit`` does the same.
            max_changes: entries listed at most (default 50).
            max_patch_bytes: bytes of patches at most (default 65536).
            output_head, output_tail: bytes of stdout and of stderr kept from their
                start and their end (default 8192 each; the middle is omitted, and
                :meth:`exec_output` fetches it).
            check: raise :class:`CommandFailed` when the command exits non-zero, is
                killed or times out (like ``subprocess.run(check=True)``).

        A command that ran is returned whatever its exit status (``envelope.exit_code``,
        ``envelope.ok``), unless ``check=True``. Its standard input is empty.

        Raises:
            PolicyDenied: the policy denied the command (avfs exit 126); nothing ran.
                ``e.envelope.decision`` says why.
            ApprovalRequired: the command needs an approval (exit 75); nothing ran.
                ``e.approval_id`` is the pending approval.
            CommandFailed: with ``check=True``, the command did not succeed.
            AvfsError: avfs itself failed (e.g. :class:`InvalidArgument` for a bad
                ``cwd``, :class:`SandboxUnavailable`).
        """
        args = exec_args(
            command,
            cwd=cwd,
            timeout=timeout,
            env=env,
            checkpoint=checkpoint,
            rollback_on_failure=rollback_on_failure,
            fork=fork,
            ephemeral=ephemeral,
            keep=keep,
            sandbox=sandbox,
            approve=approve,
            wait_approval=wait_approval,
            changes=changes,
            max_changes=max_changes,
            max_patch_bytes=max_patch_bytes,
            output_head=output_head,
            output_tail=output_tail,
        )
        return judge_envelope(Envelope.from_json(self._run(*args)), check)

    def approve(self, approval_id: str) -> Approval:
        """``avfs approve ID``: approve a pending request; then run it with
        ``exec(approve=ID)``."""
        return Approval.from_json(self._run("approve", "--", approval_id)["approval"])

    def deny(self, approval_id: str) -> Approval:
        """``avfs deny ID``: deny a pending request."""
        return Approval.from_json(self._run("deny", "--", approval_id)["approval"])

    def approvals(self, *, all: bool = False) -> List[Approval]:
        """Pending approvals of this vault (every one with ``all=True``)."""
        args = ["approvals"] + (["--all"] if all else [])
        return [Approval.from_json(a) for a in self._run(*args)["approvals"]]

    def exec_output(
        self,
        exec_id: str,
        *,
        stream: str = "stdout",
        offset: int = 0,
        limit: Optional[int] = None,
    ) -> bytes:
        """``avfs output``: the full stdout (or ``stream="stderr"``) of an exec, byte
        for byte, from ``offset`` (``limit`` bytes at most; ``None``: to the end, read
        a page at a time). The envelope keeps only its head and tail; ``exec_id`` is
        the envelope's ``id``. A stream keeps its first 16 MiB on disk, a vault its
        newest execs' output, 64 MiB in all.

        Raises:
            NoSuchOutput: no output is kept for ``exec_id`` (unknown, nothing ran, or
                dropped by the vault's cap).
        """
        out = bytearray()
        while limit is None or len(out) < limit:
            page = 1 << 20 if limit is None else min(1 << 20, limit - len(out))
            doc = self._run(
                "output", f"--stream={stream}", f"--offset={offset}", f"--limit={page}", "--", exec_id
            )
            data = doc["content"]
            out += bytes.fromhex(data) if doc["encoding"] == "hex" else data.encode("utf-8")
            if doc["next_offset"] is None or doc["bytes"] == 0:
                break
            offset = int(doc["next_offset"])
        return bytes(out)

    # --- history ---

    def checkpoint(self, name: Optional[str] = None, message: Optional[str] = None) -> Checkpoint:
        """``checkpoint save``: saves the live state (a name is made up when ``None``).

        Raises:
            CheckpointExists: the name is taken.
        """
        args = ["checkpoint", "save"]
        if message is not None:
            args.append(f"--message={message}")
        if name is not None:
            args += ["--", name]
        return Checkpoint.from_json(self._run(*args)["checkpoint"])

    def checkpoints(self) -> List[Checkpoint]:
        """This workspace's checkpoints, oldest first (every page of them)."""
        doc = self._whole(["checkpoint", "list"], [], "checkpoints", back=True)
        return [Checkpoint.from_json(c) for c in doc["checkpoints"]]

    def head(self) -> Optional[str]:
        """The head checkpoint (for a fresh fork, the parent's checkpoint it started
        from), or ``None``."""
        head = self._run("checkpoint", "list").get("head")
        return None if head is None else str(head)

    def restore(self, name: str) -> RestoreResult:
        """``checkpoint restore``: the live state becomes checkpoint ``name``. Unsaved
        changes are kept first in an automatic checkpoint
        (``result.saved_unsaved_changes_as``).

        Raises:
            NoSuchCheckpoint: there is none.
        """
        return RestoreResult.from_json(self._run("checkpoint", "restore", "--", name))

    def diff(
        self,
        a: Optional[str] = None,
        b: Optional[str] = None,
        *,
        patch: bool = False,
        paths: Optional[Sequence[str]] = None,
        offset: Optional[int] = None,
        limit: Optional[int] = None,
    ) -> Diff:
        """What changed from checkpoint ``a`` (default: the head) to checkpoint ``b``
        (default: the live state), renames detected. ``patch=True`` adds unified diffs
        of small text files to the changes; ``paths`` keeps only changes at or below
        those paths; ``offset``/``limit`` list one page (``Diff.raw["next_offset"]``
        says where the next starts), as an exec envelope's ``changes_page["rest"]``.

        Raises:
            NoSuchCheckpoint: ``a`` or ``b`` does not exist.
        """
        if b is not None and a is None:
            raise ValueError("diff: b given without a")
        args = ["diff"]
        if patch:
            args.append("--patch")
        for p in paths or ():
            args.append(f"--path={p}")
        if offset is not None:
            args.append(f"--offset={int(offset)}")
        if limit is not None:
            args.append(f"--limit={int(limit)}")
        # Checkpoint names go before `--`: after it, `avfs diff` takes path filters.
        args += [x for x in (a, b) if x is not None]
        return Diff.from_json(self._run(*args))



class TempVault:
    """What :meth:`Avfs.temp` returns: ``with`` it to get a :class:`Vault` in a fresh
    temporary ``$AVFS_HOME``; at the end of the block its mounts are unmounted and the
    home (vault files included) is removed."""

    def __init__(self, name: str = "scratch", *, binary: Optional[PathLike] = None) -> None:
        self._name = name
        self._binary = binary
        self.home: Optional[str] = None
        self.vault: Optional[Vault] = None

    def __enter__(self) -> Vault:
        import tempfile

        self.home = tempfile.mkdtemp(prefix="avfs-temp-")
        try:
            avfs = Avfs(self._binary, home=self.home)
            self.vault = avfs.create_vault(self._name)
        except BaseException:
            shutil.rmtree(self.home, ignore_errors=True)
            raise
        return self.vault

    def __exit__(self, *exc: Any) -> None:
        if self.home is None:
            return
        if self.vault is not None:
            # A mount left by the block would keep the directory busy: unmount first.
            try:
                for m in self.vault.avfs.run("mounts").get("mounts", []):
                    self.vault.avfs.call("unmount", "--", str(m["mountpoint"]))
            except Exception:  # noqa: BLE001 - best effort; the removal below says the rest
                pass
        shutil.rmtree(self.home, ignore_errors=True)
        self.home = None


def exec_args(
    command: Union[str, Sequence[str], None] = None,
    *,
    cwd: Optional[str] = None,
    timeout: Optional[float] = None,
    env: Optional[Mapping[str, str]] = None,
    checkpoint: Optional[bool] = None,
    rollback_on_failure: bool = False,
    fork: Optional[str] = None,
    ephemeral: bool = False,
    keep: bool = False,
    sandbox: Optional[bool] = None,
    approve: Optional[str] = None,
    wait_approval: Optional[float] = None,
    changes: Optional[str] = None,
    max_changes: Optional[int] = None,
    max_patch_bytes: Optional[int] = None,
    output_head: Optional[int] = None,
    output_tail: Optional[int] = None,
) -> List[str]:
    """The ``avfs exec ...`` arguments for the options of :meth:`Workspace.exec`
    (shared by the synchronous and the asyncio clients)."""
    args: List[str] = ["exec"]
    if fork is not None:
        args.append(f"--fork={fork}")
    if ephemeral:
        args.append("--ephemeral")
    if keep:
        args.append("--keep")
    if cwd is not None:
        args.append(f"--cwd={cwd}")
    if timeout is not None:
        args.append(f"--timeout={timeout}")
    for k, v in (env or {}).items():
        args.append(f"--env={k}={v}")
    if checkpoint is True:
        args.append("--checkpoint")
    elif checkpoint is False:
        args.append("--no-checkpoint")
    if rollback_on_failure:
        args.append("--rollback-on-failure")
    if sandbox is True:
        args.append("--sandbox")
    elif sandbox is False:
        args.append("--no-sandbox")
    if approve is not None:
        args.append(f"--approve={approve}")
    if wait_approval is not None:
        args.append(f"--wait-approval={wait_approval}")
    if changes is not None:
        args.append(f"--changes={changes}")
    for flag, value in (
        ("max-changes", max_changes),
        ("max-patch-bytes", max_patch_bytes),
        ("output-head", output_head),
        ("output-tail", output_tail),
    ):
        if value is not None:
            args.append(f"--{flag}={int(value)}")
    if isinstance(command, str):
        args.append(f"--shell={command}")
    elif command is not None:
        argv = [str(a) for a in command]
        if not argv:
            raise ValueError("exec: empty argv")
        args.append("--")
        args.extend(argv)
    elif approve is None:
        raise ValueError("exec: give a command (str: shell line, sequence: argv) or approve=")
    return args


def judge_envelope(envelope: Envelope, check: bool) -> Envelope:
    """Raises what an envelope means for the caller (:class:`PolicyDenied`,
    :class:`ApprovalRequired`, and with ``check`` :class:`CommandFailed`), else returns it."""
    action = envelope.decision.action
    d = envelope.decision
    if envelope.result is None and action == "deny":
        raise PolicyDenied("denied", f"rule {d.matched_rule}: {d.reason}", envelope)
    if envelope.result is None and action == "require_approval":
        approval = envelope.approval.id if envelope.approval else "?"
        if envelope.approval is not None and envelope.approval.state == "denied":
            raise PolicyDenied("denied", f"approval {approval} was denied by a person", envelope)
        raise ApprovalRequired(
            "approval_required",
            f"approval {approval} pending (rule {d.matched_rule}: {d.reason})",
            envelope,
        )
    if check and not envelope.ok:
        r = envelope.result
        if r is not None and r.timed_out:
            why = "timed out"
        elif r is not None and r.signal is not None:
            why = f"was killed by signal {r.signal}"
        else:
            why = f"exited with status {envelope.exit_code}"
        raise CommandFailed("command_failed", f"command {why}", envelope)
    return envelope
