from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentvfs import (
    AlreadyExists,
    Avfs,
    InvalidArgument,
    NoSuchVault,
    NotFound,
    Vault,
    VaultExists,
)


def test_create_registers_a_vault_file_under_home(avfs: Avfs, home: Path) -> None:
    v = Vault.create("demo", avfs=avfs)
    assert v.name == "demo"
    assert v.workspace_name == "main"
    assert Path(v.path) == home / "vaults" / "demo.avfs"
    assert os.path.isfile(v.path)

    listed = {i.name: i for i in Vault.list(avfs=avfs)}
    assert set(listed) == {"demo"}
    assert listed["demo"].path == v.path
    assert listed["demo"].parent is None
    assert not listed["demo"].is_fork


def test_create_with_explicit_path(avfs: Avfs, tmp_path: Path) -> None:
    file = tmp_path / "elsewhere" / "x.avfs"
    file.parent.mkdir()
    v = Vault.create("x", path=file, avfs=avfs)
    assert v.path == str(file)
    assert file.is_file()
    with pytest.raises(AlreadyExists) as e:
        Vault.create("y", path=file, avfs=avfs)
    assert e.value.kind == "already_exists"


def test_open_by_name_and_by_path(vault: Vault, avfs: Avfs) -> None:
    vault.workspace.write_file("/a.txt", "A")
    by_name = Vault.open("demo", avfs=avfs)
    by_path = Vault.open(vault.path, avfs=avfs)
    assert by_name == vault
    assert by_path.path == vault.path
    assert by_path.workspace.read_text("/a.txt") == "A"


def test_open_missing_vault_raises_no_such_vault(avfs: Avfs) -> None:
    with pytest.raises(NoSuchVault) as e:
        Vault.open("nope", avfs=avfs)
    assert isinstance(e.value, NotFound)
    assert e.value.kind == "no_such_vault"
    assert e.value.exit_code == 1
    assert "nope" in e.value.message
    # Opening it did not create it.
    assert Vault.list(avfs=avfs) == []


def test_duplicate_and_invalid_names(vault: Vault, avfs: Avfs) -> None:
    with pytest.raises(VaultExists) as e:
        Vault.create("demo", avfs=avfs)
    assert isinstance(e.value, AlreadyExists)
    with pytest.raises(InvalidArgument):
        Vault.create("bad name", avfs=avfs)


def test_homes_are_separate(avfs_bin: str, tmp_path: Path) -> None:
    a = Avfs(avfs_bin, home=tmp_path / "a")
    b = Avfs(avfs_bin, home=tmp_path / "b")
    Vault.create("only-in-a", avfs=a)
    assert [v.name for v in a.vaults()] == ["only-in-a"]
    assert b.vaults() == []
    with pytest.raises(NoSuchVault):
        Vault.open("only-in-a", avfs=b)


def test_home_and_binary_keywords(avfs_bin: str, tmp_path: Path) -> None:
    v = Vault.create("kw", binary=avfs_bin, home=tmp_path / "h")
    assert Path(v.path) == tmp_path / "h" / "vaults" / "kw.avfs"
    assert v.avfs.home == str(tmp_path / "h")
    with pytest.raises(ValueError):
        Vault.open("kw", avfs=v.avfs, home=tmp_path / "h")


def test_delete(vault: Vault, avfs: Avfs) -> None:
    fork = vault.fork("task")
    assert fork.delete() == ["task"]
    assert [v.name for v in avfs.vaults()] == ["demo"]
    assert vault.delete() == ["demo"]
    assert avfs.vaults() == []
    assert not os.path.exists(vault.path)


def test_version(avfs: Avfs) -> None:
    assert avfs.version().startswith("avfs ")
