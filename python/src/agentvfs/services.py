"""Services: processes of a workspace that outlive one ``exec`` (a dev server, a
database), in its sandbox (``docs/services.md``). Runs of the workspace reach them on
``127.0.0.1``; the host and other forks do not.

    with ws.service(["python3", "-m", "http.server", "8000"], name="web") as web:
        env = ws.exec("curl -s --retry 30 --retry-delay 1 --retry-connrefused "
                      "--retry-max-time 30 --max-time 5 http://127.0.0.1:8000/")
    # the service is stopped here, even on an exception
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from .errors import AvfsError

if TYPE_CHECKING:
    from .client import Workspace

__all__ = ["ServiceInfo", "Service", "ServiceNotStarted"]


class ServiceNotStarted(AvfsError):
    """``service start`` printed its document, but the service does not run: the policy
    asked a person (kind ``approval_required``; :attr:`approval_id`) or denied it
    (``denied``), or the command exited at once (``command_failed``: its status and
    last output are in the message). ``json`` is the start document."""

    approval_id: Optional[str] = None


@dataclass(frozen=True)
class ServiceInfo:
    """One service as ``service list --json`` shows it (``docs/json.md``)."""

    id: str
    name: str
    state: str
    pid: Optional[int]
    command: List[str]
    started_at: str
    ended_at: Optional[str]
    exit_code: Optional[int]
    signal: Optional[int]
    end_reason: Optional[str]
    last_output: Optional[str]
    #: What the workspace's services wrote while it ran (``docs/services.md``): ``taken``,
    #: ``added``, ``modified``, ``deleted``, ``total``, ``last`` (``paths``, ``more``) and
    #: ``pending`` (``entries``, ``at_least``; None unless it ran since the last ingest).
    writes: Dict[str, Any]
    raw: Dict[str, Any]

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "ServiceInfo":
        def opt_int(v: Any) -> Optional[int]:
            return None if v is None else int(v)

        return cls(
            id=str(d["id"]),
            name=str(d["name"]),
            state=str(d["state"]),
            pid=opt_int(d.get("pid")),
            command=[str(x) for x in d.get("command") or []],
            started_at=str(d.get("started_at", "")),
            ended_at=d.get("ended_at"),
            exit_code=opt_int(d.get("exit_code")),
            signal=opt_int(d.get("signal")),
            end_reason=d.get("end_reason"),
            last_output=d.get("last_output"),
            writes=dict(d.get("writes") or {}),
            raw=dict(d),
        )

    @property
    def running(self) -> bool:
        return self.state == "running"


class Service:
    """A started service; a context manager that stops it when the block ends.

    Made by :meth:`Workspace.service`. :attr:`info` is the service as it was when it
    started; :meth:`refresh` reads it again.
    """

    def __init__(self, ws: "Workspace", info: ServiceInfo, start: Dict[str, Any]) -> None:
        self.workspace = ws
        self.info = info
        #: ``service start --json``: the decision, the checkpoint taken before it.
        self.start_document = start

    def __repr__(self) -> str:
        return f"Service(name={self.info.name!r}, id={self.info.id!r}, state={self.info.state!r})"

    def __enter__(self) -> "Service":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def name(self) -> str:
        return self.info.name

    def refresh(self) -> ServiceInfo:
        """The service as ``service list`` shows it now."""
        for s in self.workspace.services():
            if s.id == self.info.id:
                self.info = s
                return s
        raise AvfsError("not_found", f"service {self.info.id} is no longer listed")

    def logs(self, *, tail: Optional[int] = None) -> str:
        """Its output (stdout and stderr as they came), or the last ``tail`` lines."""
        args = ["service", "logs", self.info.id]
        if tail is not None:
            args.append(f"--tail={int(tail)}")
        return str(self.workspace._run(*args)["output"])

    def stop(self) -> ServiceInfo:
        """Stops it (SIGTERM, SIGKILL after 2 s) if it runs; returns it as it ended."""
        doc = self.workspace._run("service", "stop", self.info.id)
        self.info = ServiceInfo.from_json(doc["service"])
        return self.info
