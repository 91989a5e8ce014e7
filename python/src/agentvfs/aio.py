"""The asyncio client: the same ``avfs`` processes as :class:`~agentvfs.Avfs`, awaited
instead of waited for, and an ``exec`` whose output lines arrive as they are printed."""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from typing import Any, AsyncIterator, Dict, List, Optional, Tuple

from .client import Avfs, PathLike, exec_args, judge_envelope
from .errors import BinaryNotFound, ProtocolError, error_from_json
from .types import Envelope

__all__ = ["AsyncAvfs", "OutputLine"]

# What `avfs exec` prints on stderr after the command ended, in human mode.
_TRAILER = "--- avfs exec "


@dataclass(frozen=True)
class OutputLine:
    """One line the command printed, as it came.

    Attributes:
        stream: ``"stdout"`` or ``"stderr"``.
        text: the line, with its newline (decoded as utf-8, bad bytes replaced).
    """

    stream: str
    text: str


class ExecStream:
    """What :meth:`AsyncAvfs.exec_stream` returns: iterate it (``async for``) for the
    output lines as the command prints them; afterwards :attr:`envelope` is the run's
    envelope (as the audit log recorded it)."""

    envelope: Optional[Envelope]

    def __init__(self, client: "AsyncAvfs", vault: Optional[str], args: List[str], check: bool):
        self._client = client
        self._vault = vault
        self._args = args
        self._check = check
        self.envelope = None

    def __aiter__(self) -> AsyncIterator[OutputLine]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[OutputLine]:
        # Without --json, `avfs exec` passes the command's output through as it comes
        # and ends stderr with a summary naming the run; `--envelope-file` has it write
        # the envelope (the same document --json prints) to a file as well.
        import tempfile

        fd, envelope_path = tempfile.mkstemp(prefix="avfs-envelope-", suffix=".json")
        os.close(fd)
        try:
            async for line in self._run(envelope_path):
                yield line
        finally:
            try:
                os.unlink(envelope_path)
            except OSError:
                pass

    async def _run(self, envelope_path: str) -> AsyncIterator[OutputLine]:
        cmd = [self._client.avfs.binary]
        if self._vault is not None:
            cmd.append(f"--vault={self._vault}")
        cmd.extend(self._args[:1])
        cmd.append(f"--envelope-file={envelope_path}")
        cmd.extend(self._args[1:])
        try:
            proc = await asyncio.create_subprocess_exec(
                *cmd,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self._client.avfs._env(),
            )
        except OSError as e:
            raise BinaryNotFound(f"cannot run avfs binary {cmd[0]!r}: {e}") from e
        queue: "asyncio.Queue[Optional[Tuple[str, str]]]" = asyncio.Queue()
        summary: List[str] = []

        async def pump(name: str, pipe: Any) -> None:
            trailer = False
            async for raw in pipe:
                text = raw.decode("utf-8", "replace")
                if name == "stderr" and text.startswith(_TRAILER):
                    trailer = True
                    summary.clear()
                if trailer:
                    summary.append(text)
                else:
                    await queue.put((name, text))
            await queue.put(None)

        tasks = [
            asyncio.ensure_future(pump("stdout", proc.stdout)),
            asyncio.ensure_future(pump("stderr", proc.stderr)),
        ]
        done = 0
        finished = False
        try:
            while done < 2:
                item = await queue.get()
                if item is None:
                    done += 1
                    continue
                yield OutputLine(*item)
            finished = True
        finally:
            if not finished:
                # The caller left the loop early: stop the run (exec's watchdog still
                # records it), as a cancelled `exec` would.
                for t in tasks:
                    t.cancel()
                if proc.returncode is None:
                    try:
                        proc.terminate()
                    except ProcessLookupError:
                        pass
            await proc.wait()
        if not summary:
            raise ProtocolError(
                f"avfs exec exited with status {proc.returncode} without naming its run",
                proc.returncode,
                "",
                "".join(summary),
            )
        with open(envelope_path, "rb") as f:
            text = f.read()
        if not text:
            raise ProtocolError(
                f"avfs exec exited with status {proc.returncode} without writing its envelope",
                proc.returncode,
                "",
                "".join(summary),
            )
        self.envelope = judge_envelope(Envelope.from_json(json.loads(text)), self._check)


class AsyncAvfs:
    """The asyncio form of :class:`~agentvfs.Avfs`: the same arguments, the same
    documents and exceptions, but every call is a coroutine, and :meth:`exec_stream`
    streams a command's output lines.

    ``async with AsyncAvfs(home=...) as avfs:`` works too (nothing to release).
    """

    avfs: Avfs

    def __init__(
        self,
        binary: Optional[PathLike] = None,
        *,
        home: Optional[PathLike] = None,
        env: Optional[Dict[str, str]] = None,
    ) -> None:
        self.avfs = Avfs(binary, home=home, env=env)

    async def __aenter__(self) -> "AsyncAvfs":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        return None

    async def call(
        self, *args: str, vault: Optional[str] = None, input: Optional[bytes] = None
    ) -> Tuple[Dict[str, Any], int]:
        """Awaitable :meth:`Avfs.call <agentvfs.Avfs.call>`: runs ``avfs --json ARGS``,
        returns its document and exit status, raises its error document."""
        cmd = [self.avfs.binary, "--json"]
        if vault is not None:
            cmd.append(f"--vault={vault}")
        cmd.extend(args)
        try:
            proc = await asyncio.create_subprocess_exec(
                *cmd,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self.avfs._env(),
            )
        except OSError as e:
            raise BinaryNotFound(f"cannot run avfs binary {cmd[0]!r}: {e}") from e
        out, err = await proc.communicate(input if input is not None else b"")
        try:
            doc = json.loads(out)
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            raise ProtocolError(
                f"{os.path.basename(cmd[0])} {' '.join(args[:2])} exited with status "
                f"{proc.returncode} without printing a JSON document",
                proc.returncode,
                out.decode("utf-8", "replace"),
                err.decode("utf-8", "replace"),
            )
        if isinstance(doc.get("error"), dict):
            raise error_from_json(doc["error"], proc.returncode)
        return doc, proc.returncode or 0

    async def run(self, *args: str, vault: Optional[str] = None, input: Optional[bytes] = None) -> Dict[str, Any]:
        """Like :meth:`call`, returning only the document."""
        return (await self.call(*args, vault=vault, input=input))[0]

    async def exec(self, vault: Optional[str], command: Any = None, *, check: bool = False, **options: Any) -> Envelope:
        """Awaitable :meth:`Workspace.exec <agentvfs.Workspace.exec>` in ``vault`` (a
        name or path; ``None``: the current one). Same options, same exceptions."""
        args = exec_args(command, **options)
        return judge_envelope(Envelope.from_json(await self.run(*args, vault=vault)), check)

    def exec_stream(self, vault: Optional[str], command: Any = None, *, check: bool = False, **options: Any) -> ExecStream:
        """Runs a command like :meth:`exec`, streaming its output::

            stream = avfs.exec_stream("demo", "make test")
            async for line in stream:
                print(line.stream, line.text, end="")
            print(stream.envelope.exit_code)

        A line is yielded as soon as the command prints it. After the loop,
        ``stream.envelope`` holds the envelope; a denied command or one waiting for
        approval raises :class:`PolicyDenied` / :class:`ApprovalRequired` at the end of
        the loop, as :meth:`exec` does.
        """
        return ExecStream(self, vault, exec_args(command, **options), check)
