"""`avfs mcp` driven by the official MCP Python SDK (`mcp` on PyPI), as an MCP host would:
a real server process on stdio, real vault files in a temporary AVFS_HOME, every tool
called and its result checked the way an agent would read it."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import signal
import subprocess
import tempfile
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

REPO = pathlib.Path(__file__).resolve().parents[2]
AVFS = os.environ.get("AVFS_BIN", str(REPO / "target" / "release" / "avfs"))

REQUIRED_TOOLS = {
    "exec",
    "checkpoint_save",
    "checkpoint_list",
    "checkpoint_restore",
    "diff",
    "fork",
    "approvals_list",
    "read_file",
    "write_file",
    "list_dir",
    "stat",
    "log",
}


@pytest.fixture
def home() -> Any:
    with tempfile.TemporaryDirectory(prefix="avfs-mcp-") as d:
        yield d
        # A failed test may leave a mount behind; the directory cannot go before it.
        for m in mounts(d):
            subprocess.run(
                [AVFS, "unmount", m["mountpoint"]],
                env={**os.environ, "AVFS_HOME": d},
                capture_output=True,
            )


@asynccontextmanager
async def session(
    home: str, *global_args: str, mcp_args: tuple = ()
) -> AsyncIterator[ClientSession]:
    # The SDK passes only a few variables through to the server; AVFS_HOME keeps the
    # test's vaults out of the real ~/.avfs.
    params = StdioServerParameters(
        command=AVFS,
        args=[*global_args, "mcp", *mcp_args],
        env={"AVFS_HOME": home, "PATH": os.environ["PATH"]},
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            yield s


async def call(s: ClientSession, tool: str, **args: Any) -> Any:
    """Calls a tool that must succeed; returns its structured result."""
    r = await s.call_tool(tool, args)
    assert not r.is_error, f"{tool} failed: {r.structured_content or r.content}"
    assert isinstance(r.structured_content, dict), r
    return r.structured_content


async def call_err(s: ClientSession, tool: str, **args: Any) -> dict:
    """Calls a tool that must fail as a tool error; returns the JSON error object."""
    r = await s.call_tool(tool, args)
    assert r.is_error, f"{tool} should have failed: {r.structured_content}"
    return r.structured_content["error"]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def mounts(home: str) -> list:
    """`avfs mounts`: the live mounts of this AVFS_HOME."""
    out = subprocess.run(
        [AVFS, "--json", "mounts"],
        env={**os.environ, "AVFS_HOME": home},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)["mounts"]


def test_lists_every_tool_with_an_input_schema(home: str) -> None:
    async def go() -> None:
        async with session(home) as s:
            tools = {t.name: t for t in (await s.list_tools()).tools}
            assert REQUIRED_TOOLS <= set(tools), REQUIRED_TOOLS - set(tools)
            for t in tools.values():
                assert t.description, t.name
                assert t.input_schema["type"] == "object", t.name
            assert "command" in tools["exec"].input_schema["properties"]
            assert tools["read_file"].annotations.read_only_hint is True
            # Approving is a person's job: the agent cannot approve its own request.
            assert "approve" not in tools

    run(go())


def test_every_tool_round_trip(home: str) -> None:
    async def go() -> None:
        async with session(home) as s:
            w = await call(s, "write_file", path="/src/app.py", content="print('v1')\n", parents=True)
            assert w == {"path": "/src/app.py", "size": 12}
            r = await call(s, "read_file", path="/src/app.py")
            assert (r["content"], r["encoding"]) == ("print('v1')\n", "utf-8")

            await call(s, "write_file", path="/blob.bin", content="AP8Q", encoding="base64")
            r = await call(s, "read_file", path="/blob.bin")
            assert (r["content"], r["encoding"]) == ("00ff10", "hex")

            ls = await call(s, "list_dir", path="/src")
            assert [e["name"] for e in ls["entries"]] == ["app.py"]
            st = await call(s, "stat", path="/src/app.py")
            assert st["type"] == "file" and st["size"] == 12

            cp = await call(s, "checkpoint_save", name="v1", message="first")
            assert cp["checkpoint"]["name"] == "v1"

            # exec runs at the vault's stable workspace path (the overlay engine); the
            # session keeps nothing mounted for it.
            assert mounts(home) == []
            env = await call(
                s, "exec", command="echo 'print(2)' > src/app.py && echo new > src/new.txt"
            )
            assert env["workspace_path"] == os.path.join(home, "ws", "default"), env["workspace_path"]
            assert env["engine"]["name"] == "overlay", env["engine"]
            assert env["decision"]["action"] == "allow_with_checkpoint"
            assert env["result"]["exit_code"] == 0
            changed = {(c["path"], c["kind"]) for c in env["changes"]}
            assert ("/src/app.py", "modified") in changed, changed
            assert ("/src/new.txt", "added") in changed, changed

            env = await call(s, "exec", argv=["sh", "-c", "echo out; echo err >&2; exit 3"])
            assert env["result"]["exit_code"] == 3
            assert env["result"]["stdout"] == "out\n" and env["result"]["stderr"] == "err\n"

            d = await call(s, "diff", **{"from": "v1"}, patch=True)
            paths = {c["path"] for c in d["changes"]}
            assert {"/src/app.py", "/src/new.txt"} <= paths, paths

            lst = await call(s, "checkpoint_list")
            assert "v1" in [c["name"] for c in lst["checkpoints"]]

            log = await call(s, "log", path="/src/app.py")
            assert len(log["versions"]) >= 2, log

            f = await call(s, "fork", name="task-1")
            assert (f["fork"]["name"], f["parent"]) == ("task-1", "default")
            await call(s, "write_file", path="/only-in-fork.txt", content="x", vault="task-1")
            assert (await call(s, "stat", path="/only-in-fork.txt", vault="task-1"))["size"] == 1
            e = await call_err(s, "stat", path="/only-in-fork.txt")
            assert e["kind"] == "not_found"

            await call(s, "checkpoint_restore", name="v1")
            r = await call(s, "read_file", path="/src/app.py")
            assert r["content"] == "print('v1')\n"
            await call_err(s, "read_file", path="/src/new.txt")

            env = await call(s, "exec", command="curl https://example.com")
            assert env["decision"]["action"] == "require_approval"
            assert env["result"] is None
            pending = await call(s, "approvals_list")
            assert [a["id"] for a in pending["approvals"]] == [env["approval"]["id"]]

            env = await call(s, "exec", command="sudo cat /etc/passwd")
            assert env["decision"]["action"] == "deny" and env["result"] is None

            audit = await call(s, "audit")
            actors = {rec["actor"] for rec in audit["entries"]}
            assert "mcp" in actors, actors

    run(go())


def test_exec_waits_for_a_persons_decision(home: str) -> None:
    """`wait_approval_secs`: the call returns when a person decides (here: denies, from
    another process) or the wait ends; the request stays pending after the wait."""
    env_vars = {**os.environ, "AVFS_HOME": home}

    def deny_when_pending() -> None:
        for _ in range(600):
            out = subprocess.run(
                [AVFS, "--json", "approvals"], env=env_vars, capture_output=True, text=True
            )
            pending = [a for a in json.loads(out.stdout)["approvals"] if a["state"] == "pending"]
            if pending:
                subprocess.run([AVFS, "deny", pending[0]["id"]], env=env_vars, check=True)
                return
            time.sleep(0.05)

    async def go() -> None:
        async with session(home) as s:
            await call(s, "write_file", path="/seed.txt", content="x")
            t0 = time.monotonic()
            env = await call(s, "exec", command="curl https://example.com/a", wait_approval_secs=0.3)
            assert time.monotonic() - t0 >= 0.3
            assert env["approval"]["state"] == "pending" and env["result"] is None
            subprocess.run([AVFS, "deny", env["approval"]["id"]], env=env_vars, check=True)

            import threading

            person = threading.Thread(target=deny_when_pending)
            person.start()
            env = await call(s, "exec", command="curl https://example.com/b", wait_approval_secs=60)
            person.join()
            assert env["approval"]["state"] == "denied", env
            assert env["result"] is None

    run(go())


def test_errors_are_tool_errors_with_the_json_error(home: str) -> None:
    async def go() -> None:
        async with session(home) as s:
            # Before any write there is no vault: reads say so and create none.
            e = await call_err(s, "read_file", path="/missing.txt")
            assert e["kind"] == "no_such_vault", e
            await call(s, "write_file", path="/seed.txt", content="x")
            e = await call_err(s, "read_file", path="/missing.txt")
            assert e["kind"] == "not_found" and "/missing.txt" in e["message"]
            e = await call_err(s, "write_file", path="/a/b/c.txt", content="x")
            assert e["kind"] == "not_found"
            e = await call_err(s, "checkpoint_restore", name="no-such-checkpoint")
            assert e["kind"] == "no_such_checkpoint"
            e = await call_err(s, "read_file", path="/../../etc/passwd")
            assert e["exit_code"] == 1 and e["message"]
            e = await call_err(s, "list_dir", path="/x", vault="no-such-vault")
            assert e["kind"] == "no_such_vault"
            # A path that looks like a flag is a path.
            e = await call_err(s, "read_file", path="--help")
            assert e["message"]
            # Bad arguments are tool errors too, naming the argument, before anything runs
            # (tests/mcp/test_mcp_contract.py checks every kind).
            e = await call_err(s, "exec")
            assert (e["kind"], e["argument"]) == ("invalid_argument", "command")
            e = await call_err(s, "write_file", path="/x", content="0", encoding="hex")
            assert (e["kind"], e["argument"]) == ("invalid_argument", "content")

    run(go())


def test_server_bound_to_a_vault_uses_it_by_default(home: str) -> None:
    async def go() -> None:
        async with session(home) as s:
            await call(s, "write_file", path="/base.txt", content="base")
            await call(s, "fork", name="task-2")
        async with session(home, "--vault", "task-2") as s:
            await call(s, "write_file", path="/t2.txt", content="t2")
            assert (await call(s, "read_file", path="/base.txt"))["content"] == "base"
            await call_err(s, "read_file", path="/t2.txt", vault="default")

    run(go())


def start_server_with_its_mount(home: str) -> tuple[subprocess.Popen, list]:
    """`avfs mcp` started as a host starts it (no client yet), once its mount is live."""
    proc = subprocess.Popen(
        [AVFS, "mcp", "--mount"],
        env={**os.environ, "AVFS_HOME": home},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 30
    while not mounts(home) and time.time() < deadline:
        time.sleep(0.05)
    live = mounts(home)
    assert len(live) == 1
    return proc, live


def test_the_session_mount_goes_with_the_session(home: str) -> None:
    async def mounted_while_connected() -> None:
        # `--mount`: the workspace stays mounted (FUSE) while the session lasts (the
        # default only where exec falls back to its FUSE engine).
        async with session(home, mcp_args=("--mount",)) as s:
            await call(s, "write_file", path="/a.txt", content="a")
            assert len(mounts(home)) == 1
        assert mounts(home) == [], "unmounted when the client disconnected"

    async def no_mount() -> None:
        # The default with the overlay engine: nothing stays mounted; exec sees the
        # workspace at its stable path.
        async with session(home) as s:
            assert mounts(home) == []
            env = await call(s, "exec", argv=["cat", "a.txt"])
            assert env["result"]["stdout"] == "a"
            assert env["workspace_path"] == os.path.join(home, "ws", "default"), env
            assert mounts(home) == []

    run(mounted_while_connected())
    run(no_mount())

    # SIGTERM (what a host sends to stop a server) unmounts too.
    proc, _ = start_server_with_its_mount(home)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert mounts(home) == []

    # SIGKILL: the server cannot clean up; its mount's server sees it end and unmounts.
    proc, live = start_server_with_its_mount(home)
    proc.kill()
    proc.wait(timeout=30)
    deadline = time.time() + 30
    while mounts(home) and time.time() < deadline:
        time.sleep(0.05)
    assert mounts(home) == [], "the session mount outlived a killed server"
    assert not os.path.ismount(live[0]["mountpoint"])
    assert not os.path.exists(live[0]["mountpoint"]), "its empty mountpoint is left"


def test_a_venv_made_through_mcp_runs_in_the_next_call_and_session(home: str) -> None:
    """Absolute paths a tool records (a venv's scripts) stay right: every run of the
    workspace sees it at the same path, call after call and session after session."""

    async def make() -> str:
        async with session(home) as s:
            env = await call(s, "exec", argv=["python3", "-m", "venv", ".venv"])
            assert env["result"]["exit_code"] == 0, env["result"]["stderr"]
            env = await call(s, "exec", argv=[".venv/bin/python", "-c", "import sys; print(sys.prefix)"])
            assert env["result"]["exit_code"] == 0, env["result"]["stderr"]
            return env["result"]["stdout"].strip()

    async def again(prefix: str) -> None:
        async with session(home) as s:
            env = await call(s, "exec", argv=[".venv/bin/pip", "--version"])
            assert env["result"]["exit_code"] == 0, env["result"]["stderr"]
            assert prefix in env["result"]["stdout"], (prefix, env["result"]["stdout"])

    prefix = run(make())
    assert prefix == os.path.join(home, "ws", "default", ".venv"), prefix
    run(again(prefix))


def test_grep_find_search_tag_and_merge(home: str) -> None:
    async def go() -> None:
        async with session(home) as s:
            await call(s, "write_file", path="/src/a.rs", content="fn main() {}\n// TODO: auth\n", parents=True)
            await call(s, "write_file", path="/src/b.py", content="print('payment gateway')\n")
            await call(s, "write_file", path="/notes.md", content="todo later\n")

            g = await call(s, "grep", pattern="todo", ignore_case=True)
            hits = {(m["path"], m["line"]) for m in g["matches"]}
            assert hits == {("/src/a.rs", 2), ("/notes.md", 1)}, g
            g = await call(s, "grep", pattern="TODO", path="/src", files_only=True)
            assert g["files"] == ["/src/a.rs"], g

            f = await call(s, "find", name=["*.rs", "*.py"], type=["f"])
            assert sorted(e["path"] for e in f["entries"]) == ["/src/a.rs", "/src/b.py"], f

            r = await call(s, "search", query="payment")
            assert r["results"][0]["path"] == "/src/b.py", r

            await call(s, "tag", path="/src/a.rs", tags=["reviewed"])
            f = await call(s, "find", tag=["reviewed"])
            assert [e["path"] for e in f["entries"]] == ["/src/a.rs"], f
            await call(s, "tag", path="/src/a.rs", tags=["reviewed"], remove=True)
            assert (await call(s, "find", tag=["reviewed"]))["entries"] == []

            await call(s, "checkpoint_save", name="base")
            await call(s, "fork", name="task")
            await call(s, "write_file", path="/src/b.py", content="print('v2')\n", vault="task")
            dry = await call(s, "merge", fork="task", dry_run=True)
            assert dry["dry_run"] is True
            assert [c["path"] for c in dry["taken"]] == ["/src/b.py"], dry
            assert (await call(s, "read_file", path="/src/b.py"))["content"] == "print('payment gateway')\n"
            done = await call(s, "merge", fork="task")
            assert done["clean"] is True and done["checkpoint"]["name"].startswith("merge-task-")
            assert (await call(s, "read_file", path="/src/b.py"))["content"] == "print('v2')\n"

    run(go())
