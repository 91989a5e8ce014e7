"""Context managers, get-or-create, the asyncio client and output streaming, against the
real binary."""

from __future__ import annotations

import asyncio
import os
import re
import time
from pathlib import Path

import pytest

from agentvfs import (
    CLI_ERROR_KINDS,
    CLIENT_KINDS,
    AsyncAvfs,
    Avfs,
    PolicyDenied,
    Vault,
    VaultExists,
)

REPO = Path(__file__).resolve().parents[2]


def test_temp_vault_is_removed_at_exit_even_on_error(avfs_bin: str) -> None:
    with Avfs.temp(binary=avfs_bin) as vault:
        vault.workspace.write_file("/a.txt", "hi\n")
        assert vault.workspace.read_text("/a.txt") == "hi\n"
        home = vault.avfs.home
        assert home is not None and os.path.isfile(vault.path)
    assert not os.path.exists(home)

    with pytest.raises(RuntimeError):
        with Avfs.temp(binary=avfs_bin) as vault:
            home = vault.avfs.home
            raise RuntimeError("boom")
    assert home is not None and not os.path.exists(home)


def test_client_is_a_context_manager(avfs_bin: str, home: Path) -> None:
    with Avfs(avfs_bin, home=home) as avfs:
        v = avfs.create_vault("cm")
        assert [x.name for x in avfs.vaults()] == ["cm"]
    # The client's vaults stay: only a temporary home goes away.
    assert os.path.isfile(v.path)


def test_create_exist_ok_is_get_or_create(avfs: Avfs) -> None:
    a = Vault.create("same", avfs=avfs)
    a.workspace.write_file("/keep.txt", "kept\n")
    b = Vault.create("same", avfs=avfs, exist_ok=True)
    assert b == a
    assert b.workspace.read_text("/keep.txt") == "kept\n"
    with pytest.raises(VaultExists):
        Vault.create("same", avfs=avfs)
    # exist_ok with another file than the registered one is still an error.
    with pytest.raises(VaultExists):
        Vault.create("same", avfs=avfs, exist_ok=True, path=str(Path(a.path).with_name("x.avfs")))
    c = Vault.create("fresh", avfs=avfs, exist_ok=True)
    assert c.name == "fresh" and os.path.isfile(c.path)


def test_error_kinds_are_the_clis_documented_list() -> None:
    doc = (REPO / "docs" / "cli.md").read_text()
    section = doc.split("## Error kinds", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| `([a-z_]+)` \|", section, flags=re.M)
    assert documented, "no error kinds found in docs/cli.md"
    assert list(CLI_ERROR_KINDS) == documented
    # And the CLI's source: every kind `Error::kind()` returns is in the list.
    src = (REPO / "src" / "error.rs").read_text()
    body = src.split("pub fn kind(&self)", 1)[1].split("\n    }\n", 1)[0]
    in_source = set(re.findall(r'=> "([a-z_]+)"', body))
    assert in_source and in_source <= set(CLI_ERROR_KINDS), in_source - set(CLI_ERROR_KINDS)
    # The client's own kinds are never CLI kinds: exec outcomes are envelopes, not errors.
    assert not set(CLIENT_KINDS) & set(CLI_ERROR_KINDS)


def test_denied_is_an_envelope_not_an_error_document(avfs: Avfs, vault: Vault) -> None:
    # What the CLI really emits for a denied command: an envelope with decision.action
    # `deny` (exit 126), not an error document; the client names that outcome `denied`.
    doc, code = avfs.call("exec", "--", "kill", "1", vault=vault.name)
    assert "error" not in doc
    assert doc["decision"]["action"] == "deny" and code == 126
    with pytest.raises(PolicyDenied) as e:
        vault.workspace.exec(["kill", "1"])
    assert e.value.kind == "denied" and e.value.kind in CLIENT_KINDS


def test_async_client_runs_and_raises_like_the_sync_one(avfs_bin: str, home: Path) -> None:
    async def go() -> None:
        async with AsyncAvfs(avfs_bin, home=home) as a:
            await a.run("vault", "create", "--", "av")
            env = await a.exec("av", "echo hi > out.txt")
            assert env.exit_code == 0
            assert [c.path for c in env.changes] == ["/out.txt"]
            assert (await a.run("cat", "--", "/out.txt", vault="av"))["content"] == "hi\n"
            with pytest.raises(PolicyDenied):
                await a.exec("av", ["kill", "1"])
            # Two calls at once: the API is really concurrent.
            r1, r2 = await asyncio.gather(a.run("vault", "list"), a.run("checkpoint", "list", vault="av"))
            assert r1["vaults"][0]["name"] == "av" and "checkpoints" in r2

    asyncio.run(go())


def test_exec_stream_yields_lines_as_they_come_then_the_envelope(avfs_bin: str, home: Path) -> None:
    async def go() -> None:
        a = AsyncAvfs(avfs_bin, home=home)
        await a.run("vault", "create", "--", "st")
        stream = a.exec_stream(
            "st", "echo one; echo warn >&2; sleep 1.5; echo two; echo done > f.txt"
        )
        seen = []
        async for line in stream:
            seen.append((line.stream, line.text, time.monotonic()))
        assert [(s, t) for s, t, _ in seen if s == "stdout"] == [("stdout", "one\n"), ("stdout", "two\n")]
        assert ("stderr", "warn\n") in [(s, t) for s, t, _ in seen]
        # "one" came before the command slept: streamed, not collected at the end.
        t_one = next(t for s, x, t in seen if x == "one\n")
        t_two = next(t for s, x, t in seen if x == "two\n")
        assert t_two - t_one > 1.0
        env = stream.envelope
        assert env is not None and env.exit_code == 0
        assert [c.path for c in env.changes] == ["/f.txt"]

    asyncio.run(go())


def test_leaving_a_stream_early_stops_the_command(avfs_bin: str, home: Path) -> None:
    async def go() -> None:
        a = AsyncAvfs(avfs_bin, home=home)
        await a.run("vault", "create", "--", "early")
        stream = a.exec_stream("early", "echo first; sleep 60; echo never")
        start = time.monotonic()
        async for line in stream:
            assert line.text == "first\n"
            break
        # The run was stopped, not waited out.
        assert time.monotonic() - start < 30

    asyncio.run(go())
