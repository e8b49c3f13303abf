"""Another local user, and files planted in the state dir: what the daemon must never accept or
write through (docs/threat-model.md, "Another local user"). Real daemons over stdio, real files."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ctxd.places import ledger_database
from tests.helpers import call, output, user
from tests.rpc import Client, RpcError
from tests.test_hooks import ctxd, known_project
from tests.test_hooks_hostile import quiet_env

AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a folder another user's (os.chown); "
                             "runs where the tests run as root")
OTHER_UID = 65534  # nobody


def conversation(client: Client, folder: Path) -> None:
    client.request("ctxd/record", {"workspace": folder.as_uri(), "items": [
        user("the secret plan"), call("c1"), output("c1", "done")]})


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def umask_000() -> Iterator[None]:
    """Every process the test starts (the daemon, its owner, a hook) inherits a umask of 000."""
    before = os.umask(0)
    try:
        yield
    finally:
        os.umask(before)


def test_the_state_dir_its_ledgers_and_logs_are_private_whatever_the_umask(
        daemon_factory: Callable[..., Client], workspace: Path, state_dir: Path, tmp_path: Path,
        umask_000: None) -> None:
    client = daemon_factory([workspace])
    conversation(client, workspace)
    client.request("ctxd/ghost/snapshot", {"workspace": workspace.as_uri()})
    project = known_project(tmp_path / "hooked")
    data = {"session_id": "s-umask", "cwd": str(project), "prompt": "the secret plan"}
    assert ctxd(tmp_path, "hook", "claude", "UserPromptSubmit", cwd=project, stdin=json.dumps(data).encode(),
                env=quiet_env(tmp_path)).returncode == 0
    client.shutdown()
    ours = state_dir / "ctxd"
    ledger = ledger_database(ours, workspace)
    assert ledger.exists()
    assert mode(ours) == 0o700, f"the state dir is {mode(ours):o}"
    assert mode(ledger.parent) == 0o700 and mode(ledger) == 0o600
    assert mode(ours / "owner" / "owner.log") == 0o600
    assert mode(ours / "hooks") == 0o700
    assert mode(tmp_path / "daemon-0.log") == 0o600  # --log-file: it quotes requests too
    for path in ours.rglob("*"):
        if path.is_symlink() or "store" in path.relative_to(ours).parts[2:]:
            continue  # (a snapshot store is git's, made with the umask's modes, in a folder closed to others)
        assert not os.lstat(path).st_mode & stat.S_IWOTH, f"{path} is writable by every user"
    assert all(mode(folder) == 0o700 for folder in [*ours.iterdir(), *(ours / "ghost").iterdir()]
               if folder.is_dir()), {folder.name: f"{mode(folder):o}" for folder in ours.rglob("*") if folder.is_dir()}


def plant(where: Path, kind: str) -> Path:
    """A state dir another user prepared in a shared place; returns the folder they can read."""
    theirs = where.parent / "theirs"
    if kind == "other-owner":
        where.mkdir(mode=0o777)
        os.chmod(where, 0o777)
        os.chown(where, OTHER_UID, OTHER_UID)
        return where
    if kind == "link":
        theirs.mkdir(mode=0o777)
        os.chmod(theirs, 0o777)
        os.chown(theirs, OTHER_UID, OTHER_UID)
        where.symlink_to(theirs)
        return theirs
    assert kind == "open-parent"  # a folder every user may write into, without the sticky bit
    os.chmod(where.parent, 0o777)
    return where.parent


@pytest.mark.parametrize("kind", [pytest.param("other-owner", marks=AS_ROOT), pytest.param("link", marks=AS_ROOT),
                                  "open-parent"])
def test_a_state_dir_another_user_prepared_is_never_written_into(
        daemon_factory: Callable[..., Client], workspace: Path, tmp_path: Path, kind: str) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    chosen = shared / "ctxd"
    readable = plant(chosen, kind)
    client = daemon_factory([workspace], {"stateDir": str(chosen)}, args=("--state-dir", str(chosen)))
    with pytest.raises(RpcError) as refused:
        conversation(client, workspace)
    assert refused.value.code == 1003 and str(chosen) in refused.value.message
    client.shutdown()
    written = [p for p in readable.rglob("*") if not p.is_symlink() and os.lstat(p).st_uid == os.getuid()
               and p.name != "ws"]
    assert not [p for p in written if p.suffix == ".sqlite3" or "owner" in p.parts or "hooks" in p.parts], written
    assert all(b"the secret plan" not in p.read_bytes() for p in readable.rglob("*") if p.is_file())


def test_a_ledger_planted_as_a_link_is_never_written_through(daemon_factory: Callable[..., Client],
                                                              workspace: Path, state_dir: Path,
                                                              tmp_path: Path) -> None:
    """A link in the ledger's place (to another program's SQLite database): SQLite would make its
    tables there and write the conversation into it."""
    other = tmp_path / "other-app.sqlite3"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE bookmarks (url TEXT)")
    before = other.read_bytes()
    ledger = ledger_database(state_dir / "ctxd", workspace)
    ledger.parent.mkdir(parents=True, mode=0o700)
    ledger.symlink_to(other)
    client = daemon_factory([workspace])
    with pytest.raises(RpcError) as refused:
        conversation(client, workspace)
    assert refused.value.code == 1003 and "link" in refused.value.message
    client.shutdown()
    assert other.read_bytes() == before
    assert ledger.is_symlink()
