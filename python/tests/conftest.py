"""Fixtures: the real ``avfs`` binary and a scratch ``$AVFS_HOME`` per test.

The binary is ``$AVFS_BIN`` or, by default, ``target/release/avfs`` of this repository
(``cargo build --release``). Tests fail, not skip, when it is missing: they exist to run
against the real binary.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

from agentvfs import Avfs, Vault

REPO = Path(__file__).resolve().parents[2]
DEFAULT_BIN = REPO / "target" / "release" / "avfs"


@pytest.fixture(scope="session")
def avfs_bin() -> str:
    path = os.environ.get("AVFS_BIN") or str(DEFAULT_BIN)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(
            f"avfs binary not found at {path}: run `cargo build --release` in {REPO} "
            "or set AVFS_BIN",
            pytrace=False,
        )
    return path


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ``$AVFS_HOME``. Also exported, so nothing in a test can reach ~/.avfs."""
    h = tmp_path / "avfs-home"
    monkeypatch.setenv("AVFS_HOME", str(h))
    monkeypatch.delenv("AVFS_VAULT", raising=False)
    return h


@pytest.fixture
def avfs(avfs_bin: str, home: Path) -> Avfs:
    return Avfs(avfs_bin, home=home)


@pytest.fixture
def vault(avfs: Avfs) -> Iterator[Vault]:
    yield Vault.create("demo", avfs=avfs)
