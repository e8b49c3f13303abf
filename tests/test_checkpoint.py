"""Automatic checkpoints have one home (issue #37): a typed job (`ctxd.ghost.checkpoint.Job`), sent to
the owner as JSON, and one `take` that holds the policy (`ghost.auto`, the retention class, what is
logged) for every caller: the hooks, the owner, the session bridge and the `ctxd/ghost/snapshot`
request. Real git repositories, a real owner process on its socket."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ctxd import ownerlink
from ctxd.errors import GitFailed
from ctxd.ghost import api as ghost
from ctxd.ghost.checkpoint import Job, Outcome, take
from ctxd.settings import Settings
from tests.ghost_repo import isolated_git_env, make_repo
from tests.rpc import REPO


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in isolated_git_env(tmp_path / "home").items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


class Folder:
    """A place as the daemon's workspaces and the owner's kept folders are one: settings, a watch."""

    def __init__(self, root: Path, settings: Settings) -> None:
        self.root, self.settings, self.tree_watch = root, settings, None

    def opened_root(self) -> Path:
        return self.root


def job(folder: Path, state: Path, trigger: str = "tool", **fields: Any) -> Job:
    return Job(folder, state, fields.pop("thread", "claude:s-1"), trigger, **fields)


def test_a_job_goes_over_the_wire_and_back_and_a_bad_one_is_named() -> None:
    sent = Job(Path("/w/proj"), Path("/s/ctxd"), "codex:s", "tool", {"index": 2, "text": "fix it"},
               {"name": "apply_patch", "callId": "c1", "paths": ["a.py"]}, "before apply_patch a.py")
    assert Job.from_wire(sent.to_wire()) == sent
    manual = Job(Path("/w/proj"), Path("/s/ctxd"), None, "manual")
    assert Job.from_wire(manual.to_wire()) == manual and not manual.automatic
    wire = sent.to_wire()
    for field, value, named in [("folder", "relative/proj", "job.folder"), ("stateDir", None, "job.stateDir"),
                                ("trigger", "restore", "job.trigger"), ("thread", 7, "job.thread"),
                                ("turn", {"index": "2", "text": ""}, "job.turn"), ("turn", [1], "job.turn"),
                                ("tool", {"callId": "c"}, "job.tool"), ("tool", {"name": "x", "paths": "a.py"},
                                                                        "job.tool.paths"),
                                ("message", {"x": 1}, "job.message")]:
        with pytest.raises(ValueError, match=named.replace(".", r"\.")):
            Job.from_wire({**wire, field: value})
    with pytest.raises(ValueError, match="not an object"):
        Job.from_wire(["not", "a", "job"])


def test_take_holds_the_policy_for_automatic_checkpoints_and_never_for_the_users_own(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    state = tmp_path / "state" / "ctxd"
    off = Settings()
    off.ghost.auto = "off"
    lines: list[str] = []
    skipped = take(job(repo.root, state, message="before Bash"), Folder(repo.root, off), log=lines.append)
    assert skipped == Outcome(skipped="ghost.auto is off") and lines == ["claude:s-1: ghost.auto is off: no checkpoint"]
    mine = take(job(repo.root, state, "manual", thread=None, message="mine"), Folder(repo.root, off), log=lines.append)
    assert mine.commit is not None and mine.commit["trigger"] == "manual" and len(lines) == 1  # a manual one says nothing
    assert [s["id"] for s in ghost.list_snapshots(repo.root, state_dir=state)] == [mine.commit["id"]]

    on = Settings()
    repo.write("a.txt", "changed\n")
    taken = take(job(repo.root, state, turn={"index": 3, "text": "go"}, tool={"name": "Bash"}, message="before Bash"),
                 Folder(repo.root, on), log=lines.append)
    assert taken.commit is not None and taken.commit["trigger"] == "tool" and taken.commit["turn"]["index"] == 3
    assert lines[-1].startswith(f"claude:s-1: checkpoint {taken.commit['id'][:12]} (tool) in ")
    again = take(job(repo.root, state, message="unchanged"), Folder(repo.root, on))
    assert again.commit is not None and again.commit["id"] == taken.commit["id"]  # an unchanged tree adds none

    # A folder whose store is not ctxd's: an automatic checkpoint's failure is its outcome (an agent must
    # never fail for it), said in the caller's log; the user's own snapshot raises, so the client is told.
    other = make_repo(tmp_path / "other")
    subprocess.run(["git", "init", "-q", "--bare", str(other.git_dir / "ctxd" / "store")], check=True)
    failed = take(job(other.root, state), Folder(other.root, on), log=lines.append)
    assert failed.commit is None and failed.failed and "was not made by ctxd" in failed.failed
    assert lines[-1].startswith("no checkpoint for claude:s-1: GitFailed: ")
    with pytest.raises(GitFailed, match="was not made by ctxd"):
        take(job(other.root, state, "manual"), Folder(other.root, on))


@pytest.mark.skipif(not hasattr(socket, "SO_PEERCRED"), reason="the owner's socket is Linux's (SO_PEERCRED)")
def test_the_owner_answers_every_job_it_is_sent(tmp_path: Path) -> None:
    """The owner reads a hook's job as a `Job`: one it cannot read is answered (`taken` false, the
    field named), so the hook takes its checkpoint itself at once; before, a turn of the wrong shape
    made the owner drop the connection, and the hook waited for nothing."""
    repo = make_repo(tmp_path / "repo")
    state = tmp_path / "state" / "ctxd"
    env = {**os.environ, "PYTHONPATH": str(REPO), "CTXD_OWNER_IDLE_SECONDS": "30"}
    subprocess.run([sys.executable, "-m", "ctxd", "owner", "--state-dir", str(state), "--detach"], env=env,
                   check=True, timeout=60)
    pid = None
    try:
        deadline = time.monotonic() + 30
        while pid is None and time.monotonic() < deadline:
            answer = ownerlink.ask(state, {"op": "ping"}, 2)
            pid = answer.get("pid") if answer else None
            time.sleep(0.05)
        assert isinstance(pid, int), "the owner never answered"
        good = job(repo.root, state, turn={"index": 1, "text": "go"}, message="before Bash").to_wire()
        for bad, named in [({**good, "turn": {"index": "x"}}, "job.turn"), ({**good, "folder": "repo"}, "job.folder"),
                           ({**good, "trigger": "manual", "thread": None}, "not a hook's checkpoint"), ("job", "job")]:
            answer = ownerlink.ask(state, {"op": "checkpoint", "job": bad}, 30)
            assert answer is not None and answer["taken"] is False and named in answer["reason"], (bad, answer)
        answer = ownerlink.ask(state, {"op": "checkpoint", "job": good}, 60)
        assert answer is not None and answer["taken"] is True and answer["by"] == "owner", answer
        outcome = Outcome.from_answer(answer, 5)
        assert outcome.commit is not None
        assert [s["id"] for s in ghost.list_snapshots(repo.root, state_dir=state)] == [outcome.commit["id"]]
        assert outcome.line(Job.from_wire(good), by="the owner").startswith(
            f"claude:s-1: checkpoint {outcome.commit['id'][:12]} (tool) by the owner in 5 ms")
    finally:
        if isinstance(pid, int):
            os.kill(pid, signal.SIGTERM)
