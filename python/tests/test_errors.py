from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from agentvfs import (
    Avfs,
    AvfsError,
    BinaryNotFound,
    NoSuchCheckpoint,
    NotFound,
    ProtocolError,
    UsageError,
    Vault,
)
from agentvfs.errors import error_from_json


def test_missing_file_raises_not_found_with_the_json_error(vault: Vault) -> None:
    with pytest.raises(NotFound) as e:
        vault.workspace.read_file("/nope.txt")
    err = e.value
    assert type(err) is NotFound
    assert err.kind == "not_found"
    assert err.exit_code == 1
    assert "/nope.txt" in err.message
    assert err.json == {"kind": "not_found", "message": err.message, "exit_code": 1}
    assert str(err) == f"not_found: {err.message}"


def test_missing_file_at_a_checkpoint(vault: Vault) -> None:
    ws = vault.workspace
    ws.checkpoint("empty")
    ws.write_file("/later.txt", "x")
    with pytest.raises(NotFound):
        ws.read_file("/later.txt", at="empty")
    with pytest.raises(NoSuchCheckpoint):
        ws.read_file("/later.txt", at="no-such-checkpoint")


def test_kinds_without_a_class_are_plain_avfs_errors(vault: Vault) -> None:
    vault.workspace.mkdir("/d")
    with pytest.raises(AvfsError) as e:
        vault.workspace.read_file("/d")
    assert type(e.value) is AvfsError
    assert e.value.kind == "is_a_directory"
    assert e.value.json is not None and e.value.json["kind"] == "is_a_directory"


def test_unknown_kind_maps_to_the_base_class() -> None:
    err = error_from_json({"kind": "something_new", "message": "m", "exit_code": 1})
    assert type(err) is AvfsError
    assert (err.kind, err.message, err.exit_code) == ("something_new", "m", 1)


def test_usage_error(avfs: Avfs) -> None:
    with pytest.raises(UsageError) as e:
        avfs.run("ls", "--bogus")
    assert e.value.kind == "usage"
    assert e.value.exit_code == 2
    assert "--bogus" in e.value.message


def test_missing_binary_path(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "avfs"
    with pytest.raises(BinaryNotFound) as e:
        Avfs(missing)
    assert str(missing) in str(e.value)
    assert "does not exist" in str(e.value)
    assert isinstance(e.value, AvfsError)
    assert e.value.kind == "binary_not_found"
    with pytest.raises(BinaryNotFound):
        Vault.create("x", binary=missing, home=tmp_path / "h")


def test_avfs_bin_environment_variable(
    avfs_bin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AVFS_BIN", avfs_bin)
    assert Avfs(home=tmp_path / "h").binary == os.path.abspath(avfs_bin)
    monkeypatch.setenv("AVFS_BIN", str(tmp_path / "gone"))
    with pytest.raises(BinaryNotFound) as e:
        Avfs(home=tmp_path / "h")
    assert "$AVFS_BIN" in str(e.value)


def test_binary_not_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AVFS_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BinaryNotFound) as e:
        Avfs()
    assert "AVFS_BIN" in str(e.value) and "PATH" in str(e.value)


def test_non_executable_binary(tmp_path: Path) -> None:
    f = tmp_path / "avfs"
    f.write_text("not a program")
    f.chmod(stat.S_IRUSR | stat.S_IWUSR)
    with pytest.raises(BinaryNotFound) as e:
        Avfs(f)
    assert "not an executable" in str(e.value)


def test_binary_that_prints_no_json(tmp_path: Path) -> None:
    fake = tmp_path / "fake-avfs"
    fake.write_text("#!/bin/sh\necho 'this is not json'\necho 'it broke' >&2\nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(ProtocolError) as e:
        Avfs(fake, home=tmp_path / "h").vaults()
    err = e.value
    assert err.exit_code == 3
    assert err.stdout == "this is not json\n"
    assert "it broke" in err.stderr
    assert "it broke" in err.message
    assert err.json is None
