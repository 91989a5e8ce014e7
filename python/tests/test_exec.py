from __future__ import annotations

import pytest

from agentvfs import (
    ApprovalRequired,
    AvfsError,
    CommandFailed,
    Envelope,
    ExecError,
    NoSuchOutput,
    PolicyDenied,
    Refused,
    Vault,
)


def test_exec_returns_the_envelope_with_changes(vault: Vault) -> None:
    ws = vault.workspace
    ws.write_file("/old.txt", "old\n")
    env = ws.exec("mkdir -p demo && echo hi > demo/hello.txt && rm old.txt && cat demo/hello.txt")

    assert isinstance(env, Envelope)
    assert env.schema_version == 1
    assert env.id.startswith("ex-")
    assert env.request.command.kind == "shell"
    assert env.request.command.shell is not None and "demo/hello.txt" in env.request.command.shell
    assert env.request.vault == "demo"
    assert env.decision.action == "allow_with_checkpoint"
    assert "mutating" in env.decision.categories
    assert env.decision.findings

    assert env.ran and env.ok
    assert env.exit_code == 0
    assert env.result is not None and env.result.exit_code == 0
    assert env.stdout == "hi\n"
    assert env.stderr == ""

    by_path = {c.path: c for c in env.changes}
    assert env.changed_paths() == ["/demo", "/demo/hello.txt", "/old.txt"]
    assert by_path["/demo"].kind == "added" and by_path["/demo"].type_after == "dir"
    hello = by_path["/demo/hello.txt"]
    assert (hello.kind, hello.type_before, hello.type_after, hello.size_after) == ("added", None, "file", 3)
    assert hello.patch is not None and "+hi" in hello.patch
    assert by_path["/old.txt"].kind == "deleted"
    assert (env.change_summary.added, env.change_summary.deleted) == (2, 1)

    # The checkpoint taken before the run exists and holds the state before it.
    assert env.checkpoint is not None
    assert env.checkpoint in [c.name for c in ws.checkpoints()]
    assert ws.read_text("/old.txt", at=env.checkpoint) == "old\n"
    # The changes are in the workspace.
    assert ws.read_text("/demo/hello.txt") == "hi\n"
    assert not ws.exists("/old.txt")
    # The raw document is kept.
    assert env.raw["id"] == env.id and env.raw["changes"][1]["path"] == "/demo/hello.txt"


def test_exec_output_returns_what_the_envelope_cut(vault: Vault) -> None:
    ws = vault.workspace
    env = ws.exec("seq 1 100000; printf 'bin\\377' >&2")
    want = "".join(f"{i}\n" for i in range(1, 100001)).encode()
    # The envelope keeps 8 KiB head and tail; the rest is counted.
    assert env.raw["result"]["stdout_omitted"] == len(want) - 16384
    assert ws.exec_output(env.id) == want
    assert ws.exec_output(env.id, offset=5, limit=7) == want[5:12]
    assert ws.exec_output(env.id, stream="stderr") == b"bin\xff"
    with pytest.raises(NoSuchOutput):
        ws.exec_output("ex-0000000000")


def test_exec_argv_read_only(vault: Vault) -> None:
    ws = vault.workspace
    ws.write_file("/a file.txt", "content with spaces\n")
    env = ws.exec(["cat", "a file.txt"])
    assert env.request.command.kind == "argv"
    assert env.request.command.argv == ["cat", "a file.txt"]
    assert env.decision.action == "allow"
    assert env.checkpoint is None
    assert env.stdout == "content with spaces\n"
    assert env.changes == []


def test_exec_cwd_and_env(vault: Vault) -> None:
    ws = vault.workspace
    ws.mkdir("/sub")
    env = ws.exec('echo "$GREETING" > here.txt', cwd="/sub", env={"GREETING": "hey there"})
    assert env.changed_paths() == ["/sub/here.txt"]
    assert ws.read_text("/sub/here.txt") == "hey there\n"


@pytest.mark.parametrize("status", [1, 2, 3])
def test_exec_failure_returns_the_envelope(vault: Vault, status: int) -> None:
    # Exit 1 and 2 are also avfs's own error statuses: the client must tell them apart.
    env = vault.workspace.exec(f"echo out; echo err >&2; exit {status}")
    assert env.ran and not env.ok
    assert env.exit_code == status
    assert env.result is not None and env.result.exit_code == status
    assert env.stdout == "out\n"
    assert env.stderr == "err\n"


def test_exec_check_raises_command_failed(vault: Vault) -> None:
    ws = vault.workspace
    with pytest.raises(CommandFailed) as e:
        ws.exec("echo partial > p.txt; exit 4", check=True)
    assert isinstance(e.value, ExecError) and isinstance(e.value, AvfsError)
    assert e.value.exit_code == 4
    assert e.value.envelope.changed_paths() == ["/p.txt"]
    assert e.value.json is e.value.envelope.raw
    # It ran: what it wrote stays.
    assert ws.read_text("/p.txt") == "partial\n"
    assert ws.exec("true", check=True).ok


def test_exec_timeout(vault: Vault) -> None:
    env = vault.workspace.exec("sleep 30", timeout=0.5)
    assert env.timed_out
    assert env.exit_code == 124
    assert env.result is not None and env.result.signal is not None
    assert env.duration_ms < 10_000


def test_exec_rollback_on_failure(vault: Vault) -> None:
    ws = vault.workspace
    ws.write_file("/keep.txt", "keep\n")
    env = ws.exec("echo bad > keep.txt; exit 1", rollback_on_failure=True)
    assert env.exit_code == 1
    assert env.rollback.requested and env.rollback.performed
    assert env.rollback.checkpoint == env.checkpoint
    assert env.changed_paths() == ["/keep.txt"]
    assert ws.read_text("/keep.txt") == "keep\n"


def test_denied_command_raises_policy_denied(vault: Vault) -> None:
    ws = vault.workspace
    before = ws.checkpoints()
    with pytest.raises(PolicyDenied) as e:
        # avfs's own files are denied in any run (a default run reads /etc/passwd
        # contained by the sandbox).
        ws.exec("cat $AVFS_HOME/policy.toml > stolen.txt")
    err = e.value
    assert isinstance(err, AvfsError)
    assert err.kind == "denied"
    assert err.exit_code == 126
    env = err.envelope
    assert env.decision.action == "deny"
    assert "host_escape_risk" in env.decision.categories
    assert "AVFS_HOME" in err.message
    assert env.result is None and not env.ran
    assert env.stdout == ""
    assert env.checkpoint is None
    assert err.json is not None and err.json["exit_code"] == 126
    # Nothing ran, nothing was checkpointed.
    assert not ws.exists("/stolen.txt")
    assert ws.checkpoints() == before


def test_approval_flow(vault: Vault) -> None:
    ws = vault.workspace
    ws.write_file("/tool.sh", "#!/bin/sh\necho tool ran > out.txt\necho done\n")
    vault.avfs.run("chmod", "755", "/tool.sh", vault=vault.name)

    # A workspace script runs unattended in the sandbox; one that says it publishes asks.
    with pytest.raises(ApprovalRequired) as e:
        ws.exec(["./tool.sh", "--publish"])
    err = e.value
    assert err.exit_code == 75
    assert err.kind == "approval_required"
    assert err.approval_id is not None and err.approval_id.startswith("ap-")
    assert err.envelope.decision.action == "require_approval"
    assert err.envelope.approval is not None and err.envelope.approval.state == "pending"
    assert not ws.exists("/out.txt")
    assert [a.id for a in ws.approvals()] == [err.approval_id]

    approval = ws.approve(err.approval_id)
    assert approval.state == "approved"
    env = ws.exec(approve=err.approval_id)
    assert env.ok and env.stdout == "done\n"
    assert env.approval is not None and env.approval.state == "used"
    assert env.changed_paths() == ["/out.txt"]
    assert ws.approvals() == []

    # An approval runs once.
    with pytest.raises(Refused):
        ws.exec(approve=err.approval_id)


def test_denied_approval_cannot_run(vault: Vault) -> None:
    ws = vault.workspace
    with pytest.raises(ApprovalRequired) as e:
        ws.exec("curl https://example.com")
    aid = e.value.approval_id
    assert aid is not None
    assert "networked" in e.value.envelope.decision.categories
    assert ws.deny(aid).state == "denied"
    with pytest.raises(Refused):
        ws.exec(approve=aid)


def test_wait_approval_runs_once_approved_and_raises_on_denial(vault: Vault) -> None:
    import threading
    import time

    ws = vault.workspace
    ws.write_file("/tool.sh", "#!/bin/sh\necho waited > out.txt\n")
    vault.avfs.run("chmod", "755", "/tool.sh", vault=vault.name)

    # A sandboxed run of a workspace script goes unattended; without the sandbox the
    # policy reads it strictly and asks a person. Nobody decides in time:
    # ApprovalRequired, still pending.
    with pytest.raises(ApprovalRequired) as e:
        ws.exec(["./tool.sh"], wait_approval=0.3, sandbox=False)
    assert e.value.envelope.approval is not None
    assert e.value.envelope.approval.state == "pending"
    ws.deny(e.value.approval_id or "")

    def decide(approve: bool) -> None:
        # A person, in another process, decides what is pending.
        for _ in range(300):
            pending = [a for a in vault.avfs.run("approvals")["approvals"] if a["state"] == "pending"]
            if pending:
                vault.avfs.run("approve" if approve else "deny", "--", pending[0]["id"])
                return
            time.sleep(0.05)

    person = threading.Thread(target=decide, args=(False,))
    person.start()
    with pytest.raises(PolicyDenied) as d:
        ws.exec(["./tool.sh"], wait_approval=60, sandbox=False)
    person.join()
    assert d.value.exit_code == 126
    assert d.value.envelope.approval is not None and d.value.envelope.approval.state == "denied"
    assert not ws.exists("/out.txt")

    person = threading.Thread(target=decide, args=(True,))
    person.start()
    env = ws.exec(["./tool.sh"], wait_approval=60, sandbox=False)
    person.join()
    assert env.ok
    assert env.approval is not None and env.approval.state == "used"
    assert env.changed_paths() == ["/out.txt"]


def test_exec_bad_cwd_is_an_avfs_error_not_an_envelope(vault: Vault) -> None:
    with pytest.raises(AvfsError) as e:
        vault.workspace.exec("true", cwd="/does-not-exist")
    assert not isinstance(e.value, ExecError)
    assert e.value.exit_code == 1
    assert e.value.json is not None and e.value.json["kind"] == e.value.kind


def test_exec_needs_a_command(vault: Vault) -> None:
    with pytest.raises(ValueError):
        vault.workspace.exec()
    with pytest.raises(ValueError):
        vault.workspace.exec([])


def test_exec_in_a_task_fork_leaves_the_vault_alone(vault: Vault) -> None:
    ws = vault.workspace
    ws.write_file("/a.txt", "base\n")
    env = ws.exec("echo task > a.txt", fork="task-1")
    assert env.request.vault == "task-1"
    assert env.changed_paths() == ["/a.txt"]
    assert ws.read_text("/a.txt") == "base\n"
    task = Vault.open("task-1", avfs=vault.avfs)
    assert task.workspace.read_text("/a.txt") == "task\n"
    assert task.info().vault.parent == "demo"
