from __future__ import annotations

import pytest

from agentvfs import NoSuchCheckpoint, NotFound, Vault


def test_checkpoint_and_restore_round_trip(vault: Vault) -> None:
    ws = vault.workspace
    ws.write_file("/a.txt", "v1\n")
    cp = ws.checkpoint("v1", "first version")
    assert (cp.name, cp.message, cp.origin, cp.workspace) == ("v1", "first version", "cli", "main")
    assert len(cp.root) == 64
    assert ws.head() == "v1"

    ws.write_file("/a.txt", "v2\n")
    ws.write_file("/b.txt", "new\n")
    res = ws.restore("v1")
    assert res.restored.name == "v1"
    assert res.restored.root == cp.root
    assert ws.read_text("/a.txt") == "v1\n"
    assert not ws.exists("/b.txt")

    # The unsaved changes were kept in an automatic checkpoint.
    auto = res.saved_unsaved_changes_as
    assert auto is not None
    assert ws.read_text("/a.txt", at=auto) == "v2\n"
    assert ws.read_text("/b.txt", at=auto) == "new\n"
    assert [c.name for c in ws.checkpoints()] == ["v1", auto]
    assert {c.name: c.origin for c in ws.checkpoints()}[auto] == "auto"

    # Restoring with nothing unsaved saves nothing.
    assert ws.restore("v1").saved_unsaved_changes_as is None


def test_checkpoint_without_a_name(vault: Vault) -> None:
    ws = vault.workspace
    cp = ws.checkpoint()
    assert cp.name
    assert cp.message is None
    assert [c.name for c in ws.checkpoints()] == [cp.name]


def test_restore_missing_checkpoint(vault: Vault) -> None:
    with pytest.raises(NoSuchCheckpoint) as e:
        vault.workspace.restore("nope")
    assert isinstance(e.value, NotFound)
    assert e.value.kind == "no_such_checkpoint"


def test_fork_isolation(vault: Vault) -> None:
    parent = vault.workspace
    parent.write_file("/shared.txt", "base\n")
    parent.checkpoint("base")

    fork = vault.fork("task")
    assert fork.name == "task"
    assert fork.path == vault.path
    assert fork.workspace_name == "task"
    info = fork.info()
    assert info.vault.parent == "demo"
    assert info.vault.forked_from_checkpoint == "base"
    assert "task" in vault.info().forks

    child = fork.workspace
    assert child.read_text("/shared.txt") == "base\n"
    child.write_file("/shared.txt", "fork\n")
    child.write_file("/fork-only.txt", "x")
    parent.write_file("/parent-only.txt", "y")

    assert parent.read_text("/shared.txt") == "base\n"
    assert not parent.exists("/fork-only.txt")
    assert not child.exists("/parent-only.txt")
    assert child.read_text("/shared.txt") == "fork\n"
    # Only each side's own changes, relative to where the fork started. (In the fork,
    # the parent's checkpoint is its head, but cannot be named: diff() without
    # arguments compares the head.)
    fork_diff = child.diff()
    assert fork_diff.from_ == "base"
    assert fork_diff.paths() == ["/fork-only.txt", "/shared.txt"]
    assert parent.diff("base").paths() == ["/parent-only.txt"]


def test_fork_from_checkpoint(vault: Vault) -> None:
    ws = vault.workspace
    ws.write_file("/a.txt", "one\n")
    ws.checkpoint("one")
    ws.write_file("/a.txt", "two\n")
    ws.checkpoint("two")
    old = vault.fork("old", from_checkpoint="one")
    assert old.workspace.read_text("/a.txt") == "one\n"
    with pytest.raises(NoSuchCheckpoint):
        vault.fork("bad", from_checkpoint="zzz")


def test_diff_between_checkpoints(vault: Vault) -> None:
    ws = vault.workspace
    ws.write_file("/keep.txt", "same\n")
    ws.write_file("/edit.txt", "before\n")
    ws.write_file("/gone.txt", "bye\n")
    ws.checkpoint("a")
    ws.write_file("/edit.txt", "after\n")
    ws.remove("/gone.txt")
    ws.write_file("/dir/new.txt", "hi\n", parents=True)
    ws.checkpoint("b")

    d = ws.diff("a", "b")
    assert (d.from_, d.to) == ("a", "b")
    assert d.paths() == ["/dir", "/dir/new.txt", "/edit.txt", "/gone.txt"]
    kinds = {c.path: c.kind for c in d.changes}
    assert kinds == {
        "/dir": "added",
        "/dir/new.txt": "added",
        "/edit.txt": "modified",
        "/gone.txt": "deleted",
    }
    assert (d.summary.added, d.summary.modified, d.summary.deleted) == (2, 1, 1)
    assert d.summary.total == 4 == len(d)
    edit = next(c for c in d.changes if c.path == "/edit.txt")
    assert (edit.size_before, edit.size_after) == (7, 6)
    assert edit.patch is None

    patched = ws.diff("a", "b", patch=True)
    edit = next(c for c in patched.changes if c.path == "/edit.txt")
    assert edit.patch is not None and "-before" in edit.patch and "+after" in edit.patch

    # b against the live state: nothing since.
    live = ws.diff("b")
    assert (live.from_, live.to) == ("b", "live")
    assert not live and live.changes == []
    # The head against the live state.
    ws.write_file("/keep.txt", "changed\n")
    assert ws.diff().paths() == ["/keep.txt"]

    with pytest.raises(NoSuchCheckpoint):
        ws.diff("a", "nope")
    with pytest.raises(ValueError):
        ws.diff(None, "b")


def test_merge_fork_back(vault: Vault) -> None:
    ws = vault.workspace
    ws.write_file("/app.py", "print('v1')\n")
    ws.write_file("/notes.txt", "line\n")
    ws.checkpoint("v1")
    fork = vault.fork("task")
    fork.workspace.write_file("/app.py", "print('v2')\n")
    fork.workspace.write_file("/util.py", "x = 1\n")

    dry = vault.merge(fork, dry_run=True)
    assert dry.dry_run and dry.clean and dry.checkpoint is None
    assert [c.path for c in dry.taken] == ["/app.py", "/util.py"]
    assert not ws.exists("/util.py")

    res = vault.merge(fork)
    assert res.clean and res.conflicts == []
    assert res.checkpoint is not None and res.checkpoint.origin == "merge"
    assert ws.read_text("/app.py") == "print('v2')\n"
    assert ws.read_text("/util.py") == "x = 1\n"


def test_merge_conflict_is_a_result_not_an_exception(vault: Vault) -> None:
    ws = vault.workspace
    ws.write_file("/notes.txt", "base\n")
    ws.checkpoint("v1")
    fork = vault.fork("task")
    fork.workspace.write_file("/notes.txt", "fork\n")
    ws.write_file("/notes.txt", "target\n")

    res = vault.merge("task")
    assert not res.clean
    assert [(c.path, c.kind, c.resolution) for c in res.conflicts] == [
        ("/notes.txt", "both_modified", "kept_target")
    ]
    assert ws.read_text("/notes.txt") == "target\n"
    assert res.refused and not res.line_merged
