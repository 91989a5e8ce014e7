"""What a model relies on from `avfs mcp`, checked with the official MCP Python SDK: output
schemas and annotations on every tool, compact exec results, bad arguments as tool errors
naming the argument and the fix, fractional timeouts, the vault checked at start, and the
workspace's checkpoints and files as resources."""

from __future__ import annotations

import base64
import asyncio
import json
import os
import pathlib
import subprocess
from typing import Any

import jsonschema
import pytest
from mcp.shared.exceptions import MCPError

from test_mcp_server import AVFS, REPO, call, call_err, home, run, session  # noqa: F401

READ_ONLY = {
    "checkpoint_list",
    "diff",
    "approvals_list",
    "exec_output",
    "read_file",
    "list_dir",
    "stat",
    "log",
    "grep",
    "find",
    "search",
    "audit",
    "service_list",
    "service_logs",
}


def test_every_tool_has_an_output_schema_and_all_four_annotations(home: str) -> None:
    async def go() -> None:
        async with session(home) as s:
            tools = {t.name: t for t in (await s.list_tools()).tools}
            for name, t in tools.items():
                assert t.output_schema and t.output_schema["type"] == "object", name
                jsonschema.Draft202012Validator.check_schema(t.output_schema)
                a = t.annotations
                hints = (a.read_only_hint, a.destructive_hint, a.idempotent_hint, a.open_world_hint)
                assert None not in hints, (name, hints)
                assert a.read_only_hint is (name in READ_ONLY), name
                if a.read_only_hint:
                    assert a.destructive_hint is False, name
            ex = tools["exec"].annotations
            assert (ex.destructive_hint, ex.idempotent_hint, ex.open_world_hint) == (True, False, True)
            for name in ("write_file", "merge", "checkpoint_restore"):
                assert tools[name].annotations.destructive_hint is True, name
            assert tools["fork"].annotations.destructive_hint is False
            assert all(not tools[n].annotations.open_world_hint for n in tools if n != "exec")
            # exec's schema is the envelope's (schemas/execution-envelope.schema.json).
            envelope = json.loads((REPO / "schemas" / "execution-envelope.schema.json").read_text())
            assert tools["exec"].output_schema["title"] == envelope["title"]
            assert set(tools["exec"].output_schema["properties"]) == set(envelope["properties"])

    run(go())


# Each tool's outputSchema is the schema generated from its document's type
# (`agentvfs::schema`), committed as schemas/NAME.schema.json.
DOCUMENT_SCHEMAS = {
    "checkpoint_save": "checkpoint-save",
    "checkpoint_list": "checkpoint-list",
    "checkpoint_restore": "checkpoint-restore",
    "diff": "diff",
    "fork": "vault-fork",
    "approvals_list": "approvals",
    "read_file": "cat",
    "write_file": "write",
    "list_dir": "ls",
    "stat": "stat",
    "log": "log",
    "grep": "grep",
    "find": "find",
    "search": "search",
    "tag": "tag",
    "merge": "vault-merge",
    "audit": "audit",
    "exec_output": "output",
    "service_start": "service-start",
    "service_list": "service-list",
    "service_stop": "service-stop",
}


def schema_file(name: str) -> dict:
    return json.loads((REPO / "schemas" / f"{name}.schema.json").read_text())


def fields_only(full: dict) -> dict:
    """What a tool declares of its document's schema: the fields and their JSON types."""
    out: dict = {"type": "object"}
    out["properties"] = {
        k: ({"type": v["type"]} if "type" in v else {}) for k, v in full["properties"].items()
    }
    return out


def test_tools_list_is_at_most_20_kb(home: str) -> None:
    async def go() -> None:
        async with session(home) as s:
            tools = (await s.list_tools()).tools
            dumped = [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in tools]
            size = len(json.dumps(dumped, separators=(",", ":")))
            print(f"tools/list: {len(tools)} tools, {size} bytes")
            # Whole output schemas made it 70 KB (exec's alone 19.5 KB).
            assert size <= 20 * 1024, size

    run(go())


def test_every_document_tool_declares_its_generated_schema_and_its_results_match(home: str) -> None:
    async def go() -> None:
        async with session(home) as s:
            tools = {t.name: t for t in (await s.list_tools()).tools}
            # service_logs prints `{"output": TEXT}`, which has no document schema.
            assert set(tools) == set(DOCUMENT_SCHEMAS) | {"exec", "service_logs"}, set(tools)
            for tool, name in DOCUMENT_SCHEMAS.items():
                assert tools[tool].output_schema == fields_only(schema_file(name)), tool

            seen: set[str] = set()

            async def checked(tool: str, **args: Any) -> Any:
                # The SDK validates a result against outputSchema already; this checks
                # against the committed file itself, so a drift cannot hide in both.
                doc = await call(s, tool, **args)
                jsonschema.validate(doc, schema_file(DOCUMENT_SCHEMAS[tool]))
                seen.add(tool)
                return doc

            await checked("write_file", path="/src/a.py", content="print('a')\n", parents=True)
            await checked("read_file", path="/src/a.py")
            ls = await checked("list_dir", path="/src")
            # Compact: name, type and size of each entry, with the page's total.
            assert ls["entries"] == [{"name": "a.py", "size": 11, "type": "file"}], ls
            assert (ls["total"], ls["next_cursor"]) == (1, None), ls
            assert len(json.dumps(ls)) < 200, ls
            await checked("stat", path="/src/a.py")
            await checked("tag", path="/src/a.py", tags=["todo", "wip"])
            await checked("tag", path="/src/a.py", tags=["wip"], remove=True)
            await checked("checkpoint_save", name="c1", message="first")
            await checked("write_file", path="/src/a.py", content="more\n", append=True)
            await checked("diff", **{"from": "c1"}, patch=True)
            await checked("checkpoint_list")
            page = await checked("checkpoint_list", limit=1)
            assert [c["name"] for c in page["checkpoints"]] == ["c1"], page
            assert page["total"] == 1 and page["next_cursor"] is None, page
            log = await checked("log", path="/src/a.py", limit=1)
            assert log["total"] == 2 and log["next_cursor"] == "1", log
            assert [v["at"] for v in log["versions"]] == ["live"], log
            older = await checked("log", path="/src/a.py", cursor=log["next_cursor"])
            assert [v["at"] for v in older["versions"]] == ["c1"], older
            await checked("grep", pattern="print")
            g = await checked("grep", pattern="print", limit=0)
            assert (g["matches"], g["total"], g["next_cursor"]) == ([], 1, "0"), g
            await checked("find", tag=["todo"])
            f = await checked("find", limit=1, cursor="1")
            assert [e["path"] for e in f["entries"]] == ["/src"], f
            await checked("search", query="print")
            await checked("fork", name="task")
            await checked("write_file", path="/src/b.py", content="b\n", vault="task")
            await checked("merge", fork="task", dry_run=True)
            await checked("merge", fork="task")
            await checked("checkpoint_restore", name="c1")
            await checked("approvals_list", all=True)
            ran = await call(s, "exec", command="seq 1 5000; printf 'x\\377' >&2")
            out = await checked("exec_output", exec_id=ran["id"], offset=10, limit=100)
            assert (out["offset"], out["bytes"], out["next_offset"]) == (10, 100, 110), out
            assert out["content"] == "".join(f"{i}\n" for i in range(1, 5001)).encode()[10:110].decode()
            assert out["size"] == out["total_bytes"] == 23893 and not out["truncated"], out
            err = await checked("exec_output", exec_id=ran["id"], stream="stderr")
            assert (err["encoding"], err["content"], err["next_offset"]) == ("hex", "78ff", None), err
            gone = await call_err(s, "exec_output", exec_id="ex-0000000000")
            assert gone["kind"] == "no_such_output", gone
            svc = await checked("service_start", name="web", command="echo up; exec sleep 600")
            assert svc["service"]["state"] == "running", svc
            listed = await checked("service_list")
            assert [x["name"] for x in listed["services"]] == ["web"], listed
            for _ in range(100):
                logs = await call(s, "service_logs", service="web", tail=5)
                if logs["output"] == "up\n":
                    break
                await asyncio.sleep(0.1)
            assert logs["output"] == "up\n", logs
            stopped = await checked("service_stop", service="web")
            assert stopped["service"]["state"] != "running", stopped
            a = await checked("audit", limit=5)
            assert len(a["entries"]) == 5 and a["total"] > 5, a
            back = await checked("audit", limit=5, cursor=a["next_cursor"])
            assert back["entries"][-1]["id"] == a["entries"][0]["id"] - 1, back
            assert seen == set(DOCUMENT_SCHEMAS), set(DOCUMENT_SCHEMAS) - seen

    run(go())


def test_exec_results_are_compact_and_match_the_schema(home: str) -> None:
    async def go() -> None:
        async with session(home) as s:
            schema = {t.name: t for t in (await s.list_tools()).tools}["exec"].output_schema
            r = await s.call_tool("exec", {"argv": ["true"]})
            env = r.structured_content
            jsonschema.validate(env, schema)
            # Nothing asked for, nothing echoed: no options; no mountpoint repeating
            # workspace_path.
            assert "options" not in env["request"], env["request"]
            assert "mountpoint" not in env
            assert "rollback" not in env and "findings" not in env["decision"], env
            assert env["workspace_path"] and env["exit_code"] == 0
            assert set(env["result"]) >= {"exit_code", "timed_out", "stdout", "stderr", "duration_ms"}
            assert "signal" not in env["result"] and "escaped_processes" not in env["result"]
            size = len(json.dumps(env, separators=(",", ":")))
            print(f"trivial exec: structured content {size} bytes")
            # The CLI's envelope of the same run was 1 971 bytes (compact JSON).
            assert size < 1500, size

            # What was asked for is echoed.
            env = await call(
                s, "exec", argv=["false"], timeout_secs=2.5, env=["A=1"], checkpoint=True,
                rollback_on_failure=True,
            )
            assert env["request"]["options"] == {
                "timeout_secs": 2.5, "env": ["A=1"], "checkpoint": True, "rollback_on_failure": True,
            }
            assert env["rollback"]["requested"] is True, env
            assert env["result"]["exit_code"] == 1
            jsonschema.validate(env, schema)
            # A denied run matches the schema too, and says nothing ran.
            env = await call(s, "exec", argv=["sudo", "kill", "1"])
            assert env["decision"]["action"] == "deny" and env["result"] is None
            jsonschema.validate(env, schema)

    run(go())


BAD = [
    ("exec", {}, "command"),
    ("exec", {"command": "true", "argv": ["true"]}, "command"),
    ("exec", {"command": "true", "timeout_secs": "ten"}, "timeout_secs"),
    ("exec", {"command": "true", "timeout_secs": -1}, "timeout_secs"),
    ("exec", {"command": "true", "timeout": 5}, "timeout"),
    ("exec", {"command": "true", "env": "A=1"}, "env"),
    ("read_file", {}, "path"),
    ("read_file", {"path": 7}, "path"),
    ("write_file", {"path": "/x"}, "content"),
    ("write_file", {"path": "/x", "content": "0", "encoding": "hex"}, "content"),
    ("write_file", {"path": "/x", "content": "x", "encoding": "rot13"}, "encoding"),
    ("write_file", {"path": "/x", "content": "x", "append": "yes"}, "append"),
    ("diff", {"to": "v1"}, "to"),
    ("tag", {"path": "/x", "tags": []}, "tags"),
    ("find", {"max_depth": -2}, "max_depth"),
    ("search", {"query": "x", "limit": 1.5}, "limit"),
    ("merge", {}, "fork"),
]


def test_every_bad_argument_is_a_tool_error_naming_it_and_the_fix(home: str) -> None:
    async def go() -> None:
        async with session(home) as s:
            for tool, args, argument in BAD:
                r = await s.call_tool(tool, args)
                assert r.is_error, (tool, args)
                err = (r.structured_content or {}).get("error")
                assert err, (tool, args, r.content)
                assert err["kind"] == "invalid_argument", (tool, args, err)
                assert err["argument"] == argument, (tool, args, err)
                assert err["fix"] and err["message"], (tool, args, err)
                # The text content says the same, for clients that only show text.
                assert json.loads(r.content[0].text) == r.structured_content
            # Nothing ran: no vault was even created (reads never create one), so no
            # checkpoint and no audit record of an exec.
            r = await s.call_tool("audit", {})
            assert r.is_error and r.structured_content["error"]["kind"] == "no_such_vault", r
            # An unknown tool is not an argument to fix: a protocol error, as before.
            with pytest.raises(MCPError):
                await s.call_tool("no_such_tool", {})

    run(go())


def test_timeout_takes_fractions(home: str) -> None:
    async def go() -> None:
        async with session(home) as s:
            env = await call(s, "exec", argv=["sleep", "5"], timeout_secs=0.5)
            assert env["result"]["timed_out"] is True, env["result"]
            assert env["result"]["duration_ms"] < 4000, env["result"]
            assert env["request"]["options"]["timeout_secs"] == 0.5

    run(go())


def test_a_missing_vault_refuses_to_start(home: str, tmp_path: pathlib.Path) -> None:
    environ = {**os.environ, "AVFS_HOME": home}
    missing_file = tmp_path / "nowhere" / "gone.avfs"
    for sel, kind in (("no-such-vault", "no_such_vault"), (str(missing_file), "not_found")):
        p = subprocess.run(
            [AVFS, "--json", "--vault", sel, "mcp"],
            env=environ,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert p.returncode == 1, (sel, p)
        err = json.loads(p.stdout)["error"]
        assert err["kind"] == kind, (sel, err)
        assert "vault" in err["message"], err
    assert not missing_file.exists()
    assert not (pathlib.Path(home) / "vaults").exists() or not any((pathlib.Path(home) / "vaults").iterdir())


def test_checkpoints_and_files_are_resources(home: str) -> None:
    async def go() -> None:
        async with session(home) as s:
            await call(s, "write_file", path="/notes/a b.txt", content="v1\n", parents=True)
            await call(s, "write_file", path="/bin.dat", content="AP8Q", encoding="base64")
            await call(s, "checkpoint_save", name="v1")
            await call(s, "write_file", path="/notes/a b.txt", content="v2\n")

            listed = {str(r.uri): r for r in (await s.list_resources()).resources}
            assert "avfs://checkpoints" in listed, listed
            assert "avfs://files/notes/a%20b.txt" in listed, listed
            assert listed["avfs://files/bin.dat"].size == 3
            templates = [t.uri_template for t in (await s.list_resource_templates()).resource_templates]
            assert "avfs://files{+path}" in templates, templates

            text = (await s.read_resource("avfs://files/notes/a%20b.txt")).contents[0]
            assert text.text == "v2\n"
            old = (await s.read_resource("avfs://checkpoints/v1/files/notes/a%20b.txt")).contents[0]
            assert old.text == "v1\n"
            blob = (await s.read_resource("avfs://files/bin.dat")).contents[0]
            assert base64.b64decode(blob.blob) == b"\x00\xff\x10"
            cps = json.loads((await s.read_resource("avfs://checkpoints")).contents[0].text)
            assert "v1" in [c["name"] for c in cps["checkpoints"]]

            for bad in ("avfs://files/missing.txt", "avfs://nope", "avfs://checkpoints/zz/files/x"):
                with pytest.raises(MCPError):
                    await s.read_resource(bad)

    run(go())


def test_transcript_for_the_docs(home: str, tmp_path: pathlib.Path) -> None:
    """Drives the server through a tee, so docs/integrations.md can show the real wire
    messages. Set AVFS_MCP_TRANSCRIPT=FILE to keep them."""
    wire_in, wire_out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    async def go() -> None:
        params = StdioServerParameters(
            command="sh",
            args=["-c", f'tee "{wire_in}" | "{AVFS}" mcp | tee "{wire_out}"'],
            env={"AVFS_HOME": home, "PATH": os.environ["PATH"]},
        )
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                await s.call_tool("write_file", {"path": "/hello.txt", "content": "hi\n"})
                await s.call_tool("exec", {"command": "wc -l hello.txt && echo bye >> hello.txt"})
                await s.call_tool("exec", {"command": "true", "timeout_secs": "soon"})
                await s.read_resource("avfs://files/hello.txt")

    run(go())
    sent = [json.loads(line) for line in wire_in.read_text().splitlines() if line.strip()]
    got = [json.loads(line) for line in wire_out.read_text().splitlines() if line.strip()]
    by_id = {m["id"]: m for m in got if "id" in m}
    pairs = [(m, by_id.get(m["id"])) for m in sent if "id" in m]
    calls = [(q, a) for q, a in pairs if q["method"] in ("tools/call", "resources/read")]
    assert len(calls) == 4 and all(a is not None for _, a in calls)
    assert calls[2][1]["result"]["isError"] is True
    out = os.environ.get("AVFS_MCP_TRANSCRIPT")
    if out:
        with open(out, "w") as f:
            for q, a in calls:
                f.write(json.dumps(q) + "\n" + json.dumps(a) + "\n")


def test_every_single_byte_name_round_trips_through_mcp(home: str) -> None:
    """Issue 17: a name is bytes. Every single-byte name (all but NUL, '/' and '.') made on
    the host lists as a distinct name in list_dir, reads back by that printed name, and a
    file written through MCP under it has exactly those bytes in the vault."""
    host = pathlib.Path(home) / "names"
    host.mkdir()
    names = [bytes([b]) for b in range(1, 256) if b not in (0x2F, 0x2E)]
    for n in names:
        (host / os.fsdecode(n)).write_bytes(b"%02x" % n[0])
    env = {**os.environ, "AVFS_HOME": home}
    subprocess.run([AVFS, "vault", "create", "default"], env=env, check=True, capture_output=True)
    subprocess.run([AVFS, "import", str(host), "/d"], env=env, check=True, capture_output=True)

    async def go() -> None:
        async with session(home) as s:
            ls = await call(s, "list_dir", path="/d", limit=300)
            printed = [e["name"] for e in ls["entries"]]
            assert len(printed) == len(names) == len(set(printed))
            for p in printed:
                r = await call(s, "read_file", path="/d/" + p)
                assert r["encoding"] == "utf-8", (p, r)
                await call(s, "write_file", path="/e/" + p, content=r["content"], parents=True)
            again = await call(s, "list_dir", path="/e", limit=300)
            assert [e["name"] for e in again["entries"]] == printed

    run(go())
    # The bytes in the vault: exported back to the host, each file is its byte's hex.
    out = pathlib.Path(home) / "out"
    subprocess.run([AVFS, "export", "/e", str(out)], env=env, check=True, capture_output=True)
    got = {os.fsencode(p.name): p.read_bytes() for p in out.iterdir()}
    assert got == {n: b"%02x" % n[0] for n in names}
