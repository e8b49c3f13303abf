"""Storage faults (issue #13): each fails only its own workspace, with 1003 naming the file and
what to do, and never acknowledges what is not durable. A real daemon, real files.

Read-only is made with `chattr +i` (root ignores permission bits), a full disk with a small tmpfs
mounted in a private mount namespace (`unshare -m`); both need root and are skipped, saying so,
where they cannot run.
"""

from __future__ import annotations

import base64
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ctxd.ledger.store import Store, WouldWait, database_path
from tests.helpers import assistant, user
from tests.rpc import REPO, Client, RpcError, daemon_env

STORE_UNAVAILABLE = 1003
INVALID_PARAMS = -32602


@pytest.fixture
def two(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "alpha", tmp_path / "beta"
    a.mkdir()
    b.mkdir()
    return a, b


def db_of(state_dir: Path, folder: Path) -> Path:
    """Where the daemon keeps `folder`'s ledger (XDG_STATE_HOME is the test's state folder)."""
    return database_path(state_dir / "ctxd", folder)


def record(client: Client, folder: Path, *texts: str, thread: str = "default") -> dict[str, Any]:
    return client.request("ctxd/record", {"workspace": folder.as_uri(), "thread": thread,
                                          "items": [user(t) for t in texts]})


def texts(client: Client, folder: Path, thread: str = "default") -> list[str]:
    items = client.request("ctxd/history", {"workspace": folder.as_uri(), "thread": thread})["items"]
    return [item["content"][0]["text"] for item in items]


def unavailable(call: Callable[[], Any]) -> RpcError:
    with pytest.raises(RpcError) as caught:
        call()
    assert caught.value.code == STORE_UNAVAILABLE, caught.value
    return caught.value


def test_database_of_random_bytes_fails_only_its_workspace(daemon_factory, state_dir: Path, two) -> None:
    a, b = two
    path = db_of(state_dir, a)
    path.parent.mkdir(parents=True)
    junk = os.urandom(64 * 1024)
    path.write_bytes(junk)
    client = daemon_factory([a, b])  # initialize succeeds
    error = unavailable(lambda: record(client, a, "hello"))
    assert str(path) in error.message and "move it aside" in error.message
    assert record(client, b, "fine")["itemCount"] == 1  # the healthy workspace is unaffected
    assert texts(client, b) == ["fine"]
    unavailable(lambda: texts(client, a))  # reads say so too, every time
    assert path.read_bytes() == junk  # the damaged file is left as it was, for the user to keep
    path.rename(path.with_suffix(".broken"))  # what the message says to do: then it works again
    assert record(client, a, "fresh")["itemCount"] == 1


def test_truncated_database_fails_only_its_workspace(daemon_factory, state_dir: Path, two) -> None:
    a, b = two
    first = daemon_factory([a, b])
    record(first, a, *[f"item {i} " + "x" * 2000 for i in range(200)])
    record(first, b, "b stays")
    first.shutdown()
    path = db_of(state_dir, a)
    assert not Path(f"{path}-wal").exists()  # a clean shutdown checkpointed everything into the file
    with path.open("r+b") as handle:
        handle.truncate(path.stat().st_size // 2)
    client = daemon_factory([a, b])
    error = unavailable(lambda: texts(client, a))
    assert str(path) in error.message
    assert texts(client, b) == ["b stays"]
    assert record(client, b, "b again")["itemCount"] == 2


def test_leftover_wal_of_another_database_is_refused(daemon_factory, state_dir: Path, two) -> None:
    a, b = two
    first = daemon_factory([a, b])
    record(first, a, "a's own message")
    record(first, b, "b's private message")
    assert first.shutdown(timeout=60) == 0  # a clean exit (not a kill at the client's deadline) ...
    assert not Path(f"{db_of(state_dir, a)}-wal").exists()  # ... leaves a's ledger whole in its own file
    second = daemon_factory([b])
    record(second, b, "b again")
    second.kill()  # kill -9: b's -wal stays behind, full of b's pages
    path_a, path_b = db_of(state_dir, a), db_of(state_dir, b)
    assert Path(f"{path_b}-wal").stat().st_size > 0
    shutil.copy(f"{path_b}-wal", f"{path_a}-wal")  # a leftover -wal beside a's file
    before = path_a.read_bytes()
    client = daemon_factory([a, b])
    error = unavailable(lambda: texts(client, a))
    assert str(path_a) in error.message and "-wal" in error.message and str(b) in error.message
    assert "b's private message" not in error.message
    assert texts(client, b) == ["b's private message", "b again"]
    client.shutdown()
    assert path_a.read_bytes() == before  # the foreign -wal was never checkpointed into a's file
    os.rename(f"{path_a}-wal", f"{path_a}-wal.aside")
    Path(f"{path_a}-shm").unlink(missing_ok=True)
    again = daemon_factory([a])
    assert texts(again, a) == ["a's own message"]


def test_leftover_wal_after_a_checkpoint_still_names_its_owner(daemon_factory, state_dir: Path, two) -> None:
    """A long session: the `-wal` was checkpointed and restarted, so the pages written at open are
    no longer in it. The generation left behind must still say whose it is."""
    a, b = two
    first = daemon_factory([a, b])
    record(first, a, "a's own message")
    record(first, b, "b starts")
    first.shutdown()
    second = daemon_factory([b])
    record(second, b, "b again")
    path_a, path_b = db_of(state_dir, a), db_of(state_dir, b)
    salt = Path(f"{path_b}-wal").read_bytes()[12:24]  # the header's salts change when the log restarts
    # ~36 KB per item of text that does not compress (long items are stored compressed): 200 items
    # pass SQLite's 1000-page checkpoint.
    for n in range(20):
        second.request("ctxd/record", {"workspace": b.as_uri(), "items": [
            {"type": "function_call_output", "call_id": f"c{n}-{i}",
             "output": base64.b64encode(os.urandom(27_000)).decode()} for i in range(10)]})
    record(second, b, "after the restart")
    assert Path(f"{path_b}-wal").read_bytes()[12:24] != salt, "the -wal did not restart: write more"
    second.kill()
    shutil.copy(f"{path_b}-wal", f"{path_a}-wal")
    client = daemon_factory([a])
    error = unavailable(lambda: texts(client, a))
    assert str(path_a) in error.message and "-wal" in error.message


def test_a_ledger_made_with_the_full_archived_index_is_upgraded_at_open(daemon_factory, state_dir: Path,
                                                                        workspace: Path) -> None:
    """Ledgers written before kept every item in `items_archived`; the index now holds archived
    items only (one page less per record). An old file gets the new index at open, items intact."""
    first = daemon_factory([workspace])
    record(first, workspace, "one", "two")
    first.shutdown()
    path = db_of(state_dir, workspace)
    with sqlite3.connect(path) as db:
        db.execute("DROP INDEX items_archived")
        db.execute("CREATE INDEX items_archived ON items (thread, archived)")
    second = daemon_factory([workspace])
    assert texts(second, workspace) == ["one", "two"]
    record(second, workspace, "three")
    second.shutdown()
    with sqlite3.connect(path) as db:
        (sql,) = db.execute("SELECT sql FROM sqlite_master WHERE name = 'items_archived'").fetchone()
        indexed = db.execute("SELECT count(*) FROM items INDEXED BY items_archived WHERE archived IS NOT NULL").fetchone()
    assert sql.endswith("WHERE archived IS NOT NULL") and indexed == (0,)


@pytest.fixture
def exclusive() -> Iterator[Callable[[Path], sqlite3.Connection]]:
    """Another process's exclusive transaction on a database (a sqlite3 connection of ours)."""
    held: list[sqlite3.Connection] = []

    def hold(path: Path) -> sqlite3.Connection:
        conn = sqlite3.connect(path, timeout=0, isolation_level=None, check_same_thread=False)
        conn.execute("BEGIN EXCLUSIVE")
        held.append(conn)
        return conn

    yield hold
    for conn in held:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        conn.close()


def test_a_locked_database_fails_that_workspace_only_and_briefly(daemon_factory, state_dir: Path, two,
                                                                   exclusive) -> None:
    a, b = two
    client = daemon_factory([a, b])
    record(client, a, "before the lock")
    lock = exclusive(db_of(state_dir, a))
    error = unavailable(lambda: record(client, a, "while locked"))
    assert str(db_of(state_dir, a)) in error.message and "locked by another process" in error.message
    assert texts(client, a) == ["before the lock"]  # reads go on (WAL), nothing half-written
    # Ten requests queued on the locked workspace do not make another workspace wait for them.
    queued = [client.request_async("ctxd/record", {"workspace": a.as_uri(), "thread": f"t{i}",
                                                   "items": [user(f"queued {i}")]}) for i in range(10)]
    healthy = client.request_async("ctxd/record", {"workspace": b.as_uri(), "items": [user("b goes on")]})
    assert client.result(healthy, timeout=60)["itemCount"] == 1
    answered_first = [msg_id for msg_id in queued if msg_id in client._responses]
    assert answered_first == [], "the other workspace waited behind the locked one"
    for msg_id in queued:
        assert client.response(msg_id, timeout=120)["error"]["code"] == STORE_UNAVAILABLE
    lock.execute("ROLLBACK")
    assert record(client, a, "after the lock")["itemCount"] == 2


def test_a_small_record_into_a_locked_database_never_holds_up_reading(daemon_factory, state_dir: Path, two,
                                                                       exclusive) -> None:
    """A small record into a thread in memory is stored on the thread that reads requests (see
    ctxd/server/app.py), but only when nothing would wait: into a locked database it goes to a
    worker, and the next request is read and answered meanwhile."""
    a, b = two
    client = daemon_factory([a, b])
    record(client, a, "a is loaded")
    record(client, b, "b is loaded")
    lock = exclusive(db_of(state_dir, a))
    blocked = client.request_async("ctxd/record", {"workspace": a.as_uri(), "items": [user("while locked")]})
    other = client.request_async("ctxd/record", {"workspace": b.as_uri(), "items": [user("b goes on")]})
    assert client.result(other, timeout=60)["itemCount"] == 2
    assert blocked not in client._responses, "the reader waited for the locked database"
    assert client.response(blocked, timeout=60)["error"]["code"] == STORE_UNAVAILABLE
    lock.execute("ROLLBACK")
    assert texts(client, a) == ["a is loaded"]
    assert record(client, a, "after the lock")["itemCount"] == 2


def test_a_write_that_may_not_wait_writes_nothing_into_a_locked_database(tmp_path: Path, exclusive) -> None:
    store = Store(tmp_path / "ledger.sqlite3", workspace=tmp_path)
    store.append("t", [('"first"', 1)])
    lock = exclusive(store.path)
    with pytest.raises(WouldWait):
        store.append("t", [('"second"', 1)], wait=False)
    lock.execute("ROLLBACK")
    assert [row.body for row in store.all_rows("t")] == ['"first"']
    store.append("t", [('"second"', 1)], wait=False)  # nothing holds it now: written at once
    assert [row.body for row in store.all_rows("t")] == ['"first"', '"second"']
    store.close()


def test_adding_a_locked_workspace_never_blocks_the_event_loop(daemon_factory, state_dir: Path, two,
                                                                exclusive) -> None:
    a, b = two
    first = daemon_factory([b])
    record(first, b, "b exists")
    first.shutdown()
    client = daemon_factory([a])
    record(client, a, "a is loaded")
    lock = exclusive(db_of(state_dir, b))
    client.notify("workspace/didChangeWorkspaceFolders",
                  {"event": {"added": [{"uri": b.as_uri(), "name": "beta"}], "removed": []}})
    # The gauge of the other workspace is answered while b's database is still locked.
    usage = client.request("ctxd/usage", {"workspace": a.as_uri()}, timeout=20)
    assert usage["usage"]["usedTokens"] > 0
    assert lock.in_transaction
    deadline = time.monotonic() + 30
    while True:  # the folder is added on a worker, after the notification: wait until it is open
        with pytest.raises(RpcError) as caught:
            record(client, b, "blocked")
        if caught.value.code != INVALID_PARAMS or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert caught.value.code == STORE_UNAVAILABLE, caught.value
    lock.execute("ROLLBACK")
    assert texts(client, b) == ["b exists"]


def _delete_state_folder(state_dir: Path, workspace: Path) -> None:
    for _ in range(50):  # the running daemon may make a file in it meanwhile (its hooks' folders)
        shutil.rmtree(state_dir / "ctxd", ignore_errors=True)
        if not (state_dir / "ctxd").exists():
            return
        time.sleep(0.05)
    raise AssertionError(f"{state_dir / 'ctxd'} could not be deleted")


def _delete_the_database_alone(state_dir: Path, workspace: Path) -> None:
    db_of(state_dir, workspace).unlink()  # its -wal and -shm stay


def _move_another_file_onto_it(state_dir: Path, workspace: Path) -> None:
    path = db_of(state_dir, workspace)
    other = path.with_name("other.sqlite3")
    sqlite3.connect(other).close()
    other.replace(path)


@pytest.mark.parametrize("lose_the_file", [_delete_state_folder, _delete_the_database_alone, _move_another_file_onto_it])
def test_state_directory_deleted_while_running(daemon_factory, state_dir: Path, workspace: Path,
                                               lose_the_file: Callable[[Path, Path], None]) -> None:
    client = daemon_factory([workspace])
    record(client, workspace, "before")
    lose_the_file(state_dir, workspace)
    error = unavailable(lambda: record(client, workspace, "into the void"))
    assert "deleted" in error.message and "send the change again" in error.message
    assert record(client, workspace, "after")["itemCount"] == 1  # a new ledger, in a new file
    client.shutdown()
    again = daemon_factory([workspace])
    assert texts(again, workspace) == ["after"]  # everything acknowledged since is there


def chattr(flag: str, *paths: Path) -> bool:
    if shutil.which("chattr") is None:
        return False
    return subprocess.run(["chattr", flag, *map(str, paths)], capture_output=True).returncode == 0


def test_read_only_state_directory(daemon_factory, state_dir: Path, workspace: Path) -> None:
    a = workspace
    first = daemon_factory([a])
    record(first, a, "kept")
    first.shutdown()
    path = db_of(state_dir, a)
    if not chattr("+i", path, path.parent):
        pytest.skip("needs `chattr +i` (root on ext4/xfs): root ignores permission bits")
    try:
        client = daemon_factory([a])
        assert texts(client, a) == ["kept"]  # reads keep working
        error = unavailable(lambda: record(client, a, "lost?"))
        assert str(path) in error.message and "writable" in error.message
        assert client.request("ctxd/history", {"workspace": a.as_uri()})["total"] == 1
    finally:
        chattr("-i", path, path.parent)


def namespace_ok() -> bool:
    if sys.platform != "linux" or shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                           capture_output=True)
    return probe.returncode == 0


def test_full_disk_opens_read_only(daemon_factory, state_dir: Path, workspace: Path, tmp_path: Path) -> None:
    if not namespace_ok():
        pytest.skip("needs root and `unshare -m` to mount a small tmpfs as a full disk")
    first = daemon_factory([workspace])
    record(first, workspace, *[f"message {i}" for i in range(20)])
    first.shutdown()
    mount = tmp_path / "full"
    mount.mkdir()
    # In a private mount namespace: a 2 MiB tmpfs, the state copied in, then filled to the brim.
    script = ('mount -t tmpfs -o size=2m tmpfs "$1" && cp -a "$2/." "$1/" && '
              '(dd if=/dev/zero of="$1/filler" bs=4k 2>/dev/null; true) && shift 2 && exec "$@"')
    cmd = ["unshare", "-m", "sh", "-c", script, "sh", str(mount), str(state_dir), sys.executable, "-m", "ctxd",
           "--state-dir", str(mount / "ctxd"), "--log-file", str(tmp_path / "full.log")]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=daemon_env(state_dir), cwd=str(REPO))
    client = Client(proc)
    try:
        client.initialize([workspace])
        assert texts(client, workspace) == [f"message {i}" for i in range(20)]  # reads keep working
        error = unavailable(lambda: record(client, workspace, "no room"))
        assert "disk is full" in error.message and str(db_of(mount, workspace)) in error.message
        assert texts(client, workspace)[-1] == "message 19"
    finally:
        client.shutdown()


# --- concurrency: a compaction commits only over the history it read ------------------------------

# Long enough answers that a compaction would shrink the thread (a compaction that would not is refused).
DETAIL = "\n" + "The parser now keeps escaped quotes inside fields. " * 20


def test_rollback_while_an_llm_compaction_runs(daemon_factory, workspace: Path) -> None:
    from tests.fake_openai import FakeOpenAI, Step

    with FakeOpenAI() as fake:
        fake.script(Step(delay=1.5))
        options = {"llm": {"baseUrl": fake.base_url, "model": "m", "maxRetries": 0, "timeoutSeconds": 20}}
        client = daemon_factory([workspace], options)
        uri = workspace.as_uri()
        for n in range(4):
            client.request("ctxd/record", {"workspace": uri, "items": [user(f"ask {n}"), assistant(f"answer {n}" + DETAIL)]})
        compacting = client.request_async("ctxd/compact", {"workspace": uri, "strategy": "llm"})
        while not fake.requests:
            threading.Event().wait(0.01)
        rolled = client.request("ctxd/rollback", {"workspace": uri, "turns": 1})
        assert rolled["removedItems"] == 2
        answer = client.response(compacting, timeout=60)
        assert answer["error"]["code"] == 1001 and "history changed" in answer["error"]["message"]
        history = client.request("ctxd/history", {"workspace": uri})
        shown = [item["content"][0]["text"].split("\n")[0] for item in history["items"]]
        assert shown == ["ask 0", "answer 0", "ask 1", "answer 1", "ask 2", "answer 2"]  # "ask 3" stays gone


def test_two_daemons_compacting_one_thread(daemon_factory, workspace: Path) -> None:
    from tests.fake_openai import FakeOpenAI, Step

    with FakeOpenAI() as fake:
        fake.script(Step(delay=1.0), Step(delay=1.0))
        options = {"llm": {"baseUrl": fake.base_url, "model": "m", "maxRetries": 0, "timeoutSeconds": 20}}
        alone = {"CTXD_OWNER": "0"}  # two processes on one ledger: each serves alone (docs/processes.md)
        one, two_ = daemon_factory([workspace], options, env=alone), daemon_factory([workspace], options, env=alone)
        uri = workspace.as_uri()
        items = []
        for n in range(10):  # answers long enough that a summary makes the thread smaller
            items += [user(f"ask {n}"), assistant(f"answer {n}: " + "some detail " * 20)]
        one.request("ctxd/record", {"workspace": uri, "items": items})
        assert two_.request("ctxd/history", {"workspace": uri})["total"] == 20
        ids = [(c, c.request_async("ctxd/compact", {"workspace": uri, "strategy": "llm"})) for c in (one, two_)]
        answers = [c.response(i, timeout=60) for c, i in ids]
        assert len(fake.requests) == 2  # both really ran at once
        ok = [a for a in answers if "result" in a]
        failed = [a for a in answers if "error" in a]
        assert len(ok) == 1 and len(failed) == 1, answers
        assert failed[0]["error"]["code"] == 1001 and "history changed" in failed[0]["error"]["message"]
        history = one.request("ctxd/history", {"workspace": uri})["items"]
        kept_users = [i["content"][0]["text"] for i in history if i.get("role") == "user"]
        assert len(kept_users) == len(set(kept_users)), "a kept user message is there twice"
        assert len(history) < 20


def test_restore_with_the_conversation_while_an_llm_compaction_runs(daemon_factory, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.fake_openai import FakeOpenAI, Step
    from tests.ghost_repo import isolated_git_env, make_repo

    for key, value in isolated_git_env(tmp_path / "home").items():
        monkeypatch.setenv(key, value)
    repo = make_repo(tmp_path / "repo")
    with FakeOpenAI() as fake:
        fake.script(Step(delay=1.5))
        options = {"llm": {"baseUrl": fake.base_url, "model": "m", "maxRetries": 0, "timeoutSeconds": 20}}
        client = daemon_factory([repo.root], options)
        uri = repo.root.as_uri()
        client.request("ctxd/record", {"workspace": uri, "items": [user("ask 0"), assistant("answer 0" + DETAIL)]})
        snap = client.request("ctxd/ghost/snapshot", {"workspace": uri})
        client.request("ctxd/record", {"workspace": uri, "items": [user("ask 1"), assistant("answer 1" + DETAIL)]})
        compacting = client.request_async("ctxd/compact", {"workspace": uri, "strategy": "llm"})
        while not fake.requests:
            threading.Event().wait(0.01)
        restored = client.request("ctxd/ghost/restore", {"workspace": uri, "id": snap["id"], "conversation": True})
        assert restored["removedItems"] == 2
        answer = client.response(compacting, timeout=60)
        assert answer["error"]["code"] == 1001 and "history changed" in answer["error"]["message"]
        items = client.request("ctxd/history", {"workspace": uri})["items"]
        assert [i.get("content", [{}])[0].get("text").split("\n")[0] for i in items
                if i["type"] == "message"] == ["ask 0", "answer 0"]
