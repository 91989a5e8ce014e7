"""Services through the Python client: the real binary starts a real server in the
workspace's sandbox, a run reaches it, and the context manager stops it."""

from __future__ import annotations

import pytest

from agentvfs import ServiceNotStarted, Vault


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_service_is_reached_by_a_run_and_stopped_by_the_context_manager(vault: Vault) -> None:
    ws = vault.workspace
    ws.write_file("/index.html", "hello from the workspace\n")
    with ws.service(["python3", "-m", "http.server", "18434"], name="web") as web:
        assert web.info.state == "running" and web.info.name == "web"
        assert web.info.pid is not None and _alive(web.info.pid)
        env = ws.exec(
            "curl -s --retry 30 --retry-delay 1 --retry-max-time 30 --retry-connrefused "
            "--max-time 5 http://127.0.0.1:18434/index.html"
        )
        assert env.stdout == "hello from the workspace\n", env.raw
        assert [s.name for s in ws.services() if s.running] == ["web"]
        assert "GET /index.html" in web.logs()
        pid = web.info.pid
    assert not _alive(pid)
    assert web.info.state == "stopped"
    assert [s.state for s in ws.services()] == ["stopped"]


def test_a_service_that_exits_at_once_raises(vault: Vault, monkeypatch: pytest.MonkeyPatch) -> None:
    # The early-exit wait is a few ms by default: generous here, so a loaded machine
    # cannot make the start return before the command has ended (the wait ends with it).
    monkeypatch.setenv("AVFS_SERVICE_EARLY_MS", "10000")
    ws = vault.workspace
    with pytest.raises(ServiceNotStarted) as e:
        ws.service("echo going away; exit 3", name="brief")
    assert e.value.kind == "command_failed"
    assert e.value.exit_code == 3
    assert "going away" in e.value.message
    assert [s.state for s in ws.services()] == ["exited"]


def test_what_a_service_writes_is_reported_as_its_own(vault: Vault) -> None:
    import time

    ws = vault.workspace
    with ws.service("echo hi > svc.txt && echo written && exec sleep 600", name="writer") as w:
        deadline = time.monotonic() + 180  # a bound against hanging, not a timing check
        while "written" not in w.logs() and time.monotonic() < deadline:
            time.sleep(0.1)
        env = ws.exec("echo run > run.txt")
        assert [c.path for c in env.changes] == ["/run.txt"], env.raw
        assert env.service_changes is not None, env.raw
        assert env.service_changes["services"] == ["writer"]
        assert [c["path"] for c in env.service_changes["changes"]] == ["/svc.txt"]
        assert ws.exec("true").service_changes is None
        # `service list` says it too: one taking, its path, nothing pending.
        [info] = [s for s in ws.services() if s.name == "writer"]
        assert info.writes["taken"] == 1, info.raw
        assert info.writes["last"]["paths"] == ["/svc.txt"], info.raw
        assert info.writes["pending"] == {"entries": 0, "at_least": False}, info.raw
