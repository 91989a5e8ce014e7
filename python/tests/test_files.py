from __future__ import annotations

import pytest

from agentvfs import AvfsError, NotFound, Vault


def test_write_and_read_text(vault: Vault) -> None:
    ws = vault.workspace
    assert ws.write_file("/notes.txt", "héllo\n") == len("héllo\n".encode())
    assert ws.read_text("/notes.txt") == "héllo\n"
    assert ws.read_file("/notes.txt") == "héllo\n".encode()


def test_binary_content_round_trips(vault: Vault) -> None:
    ws = vault.workspace
    data = bytes(range(256)) + b"\x00\xff\xfe"
    assert ws.write_file("/blob.bin", data) == len(data)
    assert ws.read_file("/blob.bin") == data


def test_content_is_never_parsed_as_options(vault: Vault) -> None:
    ws = vault.workspace
    ws.write_file("/flags.txt", "--help")
    assert ws.read_text("/flags.txt") == "--help"
    ws.write_file("/empty.txt", b"")
    assert ws.read_file("/empty.txt") == b""


def test_append_and_parents(vault: Vault) -> None:
    ws = vault.workspace
    with pytest.raises(NotFound):
        ws.write_file("/a/b/c.txt", "x")
    ws.write_file("/a/b/c.txt", "one\n", parents=True)
    assert ws.write_file("/a/b/c.txt", "two\n", append=True) == 8
    assert ws.read_text("/a/b/c.txt") == "one\ntwo\n"


def test_stat_and_list_dir(vault: Vault) -> None:
    ws = vault.workspace
    ws.mkdir("/src")
    ws.write_file("/src/main.py", "print(1)\n")
    ws.write_file("/src/.hidden", "h")

    st = ws.stat("/src/main.py")
    assert st.path == "/src/main.py"
    assert st.name == "main.py"
    assert st.is_file and not st.is_dir
    assert st.size == 9
    assert st.mode == "0644" and st.mode_bits == 0o644
    assert st.content_hash is not None and len(st.content_hash) == 64
    assert ws.stat("/src").is_dir

    assert [e.name for e in ws.list_dir("/src")] == ["main.py"]
    assert [e.name for e in ws.list_dir("/src", all=True)] == [".hidden", "main.py"]
    assert [e.path for e in ws.list_dir("/")] == ["/src"]


def test_exists_mkdir_remove(vault: Vault) -> None:
    ws = vault.workspace
    assert not ws.exists("/d")
    ws.mkdir("/d/e", parents=True)
    ws.write_file("/d/e/f", "x")
    assert ws.exists("/d/e/f")
    with pytest.raises(AvfsError) as e:
        ws.remove("/d")
    assert e.value.kind == "is_a_directory"
    assert ws.remove("/d", recursive=True) == ["/d"]
    assert not ws.exists("/d")
    assert ws.remove("/d", force=True) == []


def test_raw_run_for_other_commands(vault: Vault) -> None:
    ws = vault.workspace
    ws.write_file("/src/a.py", "# TODO: fix\n", parents=True)
    doc = vault.avfs.run("grep", "-n", "TODO", "/", vault=vault.name)
    assert doc["files"] == ["/src/a.py"]
    assert doc["matches"][0]["line"] == 1
    # grep exits 1 when nothing matched but prints its normal document: not an error.
    doc, status = vault.avfs.call("grep", "nothing-matches-this", vault=vault.name)
    assert status == 1
    assert doc["files"] == []
