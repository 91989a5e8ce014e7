"""Typed results of grep, find, search, tag, import/export, mount and the merge summary,
against the real binary."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from agentvfs import (
    CopyResult,
    FindResult,
    GrepResult,
    MergeSummary,
    MountRecord,
    SearchResult,
    TagResult,
    Vault,
)


@pytest.fixture
def ws(vault: Vault):
    w = vault.workspace
    w.write_file("/README.md", "# demo\nSay hello.\n")
    w.write_file("/src/app.py", "def main():\n    print('hello, world')\n", parents=True)
    w.write_file("/src/data.bin", b"\x00\x01hello")
    return w


def test_grep_is_typed_and_no_match_is_empty(ws) -> None:
    r = ws.grep("hello")
    assert isinstance(r, GrepResult)
    assert [(m.path, m.line) for m in r.matches] == [("/README.md", 2), ("/src/app.py", 2)]
    assert r.matches[0].text == "Say hello."
    assert r.files == ["/README.md", "/src/app.py"]
    assert r.binary_files_skipped == 1
    assert ws.grep("HELLO", ignore_case=True, files_only=True).files == ["/README.md", "/src/app.py"]
    none = ws.grep("no such words here")
    assert none.matches == [] and none.files == []


def test_find_by_name_type_and_tag(ws) -> None:
    r = ws.find(name="*.py")
    assert isinstance(r, FindResult) and r.paths == ["/src/app.py"]
    assert r.entries[0].type == "file" and r.entries[0].size > 0
    assert ws.find("/src", type="d").paths == ["/src"]
    t = ws.tag("/README.md", "docs", "reviewed")
    assert isinstance(t, TagResult)
    assert t.changed == ["docs", "reviewed"] and t.tags == ["docs", "reviewed"]
    assert ws.tag("/README.md", "docs").changed == []
    assert ws.find(tag="reviewed").paths == ["/README.md"]
    u = ws.untag("/README.md", "docs")
    assert u.changed == ["docs"] and u.tags == ["reviewed"]


def test_search_ranks_with_snippets(ws) -> None:
    r = ws.search("hello world")
    assert isinstance(r, SearchResult)
    assert [h.path for h in r.results] == ["/src/app.py"]
    assert r.results[0].line == 2 and "hello" in r.results[0].snippet
    assert r.index.documents >= 2 and r.index.full


def test_import_and_export_round_trip(ws, tmp_path: Path) -> None:
    host = tmp_path / "host"
    (host / "sub").mkdir(parents=True)
    (host / "sub" / "x.txt").write_text("x\n")
    imp = ws.import_dir(host, "/imported")
    assert isinstance(imp, CopyResult)
    assert imp.destination == "/imported" and imp.stats.files == 1 and imp.stats.bytes == 2
    assert ws.read_text("/imported/sub/x.txt") == "x\n"
    out = tmp_path / "out"
    exp = ws.export_dir("/imported", out)
    assert exp.source == "/imported" and exp.stats.files == 1
    assert (out / "sub" / "x.txt").read_text() == "x\n"


def test_mount_gives_a_typed_record(ws, tmp_path: Path) -> None:
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse")
    mp = tmp_path / "mnt"
    mp.mkdir()
    m = ws.mount(mp)
    try:
        assert isinstance(m, MountRecord)
        assert m.mountpoint == str(mp) and m.pid > 0 and not m.readonly
        assert (mp / "README.md").read_text() == "# demo\nSay hello.\n"
        assert [x.mountpoint for x in ws.mounts()] == [str(mp)]
    finally:
        assert ws.unmount(mp) == "unmounted"
    assert ws.mounts() == []


def test_merge_result_has_a_typed_summary(vault: Vault) -> None:
    w = vault.workspace
    w.write_file("/a.txt", "base\n")
    w.checkpoint("base")
    fork = vault.fork("task")
    fork.workspace.write_file("/a.txt", "fork\n")
    fork.workspace.write_file("/new.txt", "new\n")
    w.write_file("/a.txt", "target\n")
    r = vault.merge(fork)
    assert isinstance(r.summary, MergeSummary)
    assert (r.summary.taken, r.summary.conflicts, r.summary.unresolved) == (1, 1, 1)
    assert r.summary.taken == len(r.taken) and r.paths == []


def test_lists_longer_than_a_page_come_back_whole(vault: Vault, tmp_path: Path) -> None:
    """`avfs --json` returns pages of 100 (ls, grep, find, checkpoint list); the client
    follows `next_cursor` so a method's result is still the whole list, each item once."""
    host = tmp_path / "many"
    host.mkdir()
    for i in range(150):
        (host / f"f{i:03}.txt").write_text("needle\nhay\nneedle\n")
    ws = vault.workspace
    ws.import_dir(host, "/d")
    names = [f"f{i:03}.txt" for i in range(150)]
    assert [e.name for e in ws.list_dir("/d")] == names
    found = ws.find("/d", type="f")
    assert found.paths == [f"/d/{n}" for n in names]
    g = ws.grep("needle", "/d")
    assert len(g.matches) == 300
    assert [(m.path, m.line) for m in g.matches[:3]] == [("/d/f000.txt", 1), ("/d/f000.txt", 3), ("/d/f001.txt", 1)]
    assert g.files == [f"/d/{n}" for n in names]
    # A single page, as the CLI gives it.
    page = vault.avfs.run("ls", "--limit=2", "--", "/d", vault=vault.name)
    assert (len(page["entries"]), page["total"], page["next_cursor"]) == (2, 150, "2")
