"""Ledgers made with the `WITHOUT ROWID` items table (every ctxd before the rowid table) are
rewritten once at open, losing nothing: every item, seq, thread row, compaction and undo record is
the same after; a rewrite cut short (the process killed before its commit, a full disk) leaves the
old table whole and is done at the next open; another process reading or writing the ledger
meanwhile sees it whole. Real daemons and real processes on real files.
"""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ctxd.ledger import bodies
from ctxd.ledger import store as store_module
from ctxd.ledger.store import Store, database_path
from tests.helpers import assistant, output, user
from tests.rpc import REPO, Client, daemon_env
from tests.test_storage_faults import namespace_ok
from tests.test_undo import Thread, turns

# The table as every ctxd before the rowid table made it (ctxd/ledger/store.py before this change).
OLD_ITEMS = """CREATE TABLE items_old (
    thread TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body TEXT NOT NULL,
    tokens INTEGER NOT NULL,
    origin INTEGER,
    archived INTEGER,
    PRIMARY KEY (thread, seq)
) WITHOUT ROWID"""


def make_old(path: Path) -> None:
    """Give a ledger the old `WITHOUT ROWID` items table (with its index and the count triggers
    the old code kept on it), rows as they are."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        db.execute(OLD_ITEMS)
        db.execute("INSERT INTO items_old SELECT thread, seq, body, tokens, origin, archived FROM items")
        db.execute("DROP TABLE items")
        db.execute("ALTER TABLE items_old RENAME TO items")
        db.execute("CREATE INDEX items_archived ON items (thread, archived) WHERE archived IS NOT NULL")
        for trigger in store_module._COUNTS:
            db.execute(trigger)
        db.execute("COMMIT")
        db.execute("VACUUM")
    finally:
        db.close()
    assert without_rowid(path)


def without_rowid(path: Path) -> bool:
    with sqlite3.connect(path) as db:
        (sql,) = db.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'items'").fetchone()
    return "WITHOUT ROWID" in sql.upper()


def dump(path: Path) -> dict[str, list[Any]]:
    """Every row that records something: items, threads, compactions (the undo records), moved
    seqs, followed files, meta."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return {
            "items": db.execute("SELECT thread, seq, body, tokens, origin, archived FROM items ORDER BY thread, seq").fetchall(),
            "threads": db.execute("SELECT * FROM threads ORDER BY thread").fetchall(),
            "compactions": db.execute("SELECT * FROM compactions ORDER BY id").fetchall(),
            "moved": db.execute("SELECT * FROM moved ORDER BY thread, seq").fetchall(),
            "followed": db.execute("SELECT * FROM followed ORDER BY path").fetchall(),
            "meta": db.execute("SELECT * FROM meta WHERE key != 'recall_index' ORDER BY key").fetchall(),
        }


def counted(path: Path) -> tuple[list[Any], list[Any]]:
    """Each thread's active items and tokens as its row says, and as its items say."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        kept = db.execute("SELECT thread, active_items, active_tokens FROM threads WHERE active_items > 0 "
                          "ORDER BY thread").fetchall()
        real = db.execute("SELECT thread, count(*), sum(tokens) FROM items WHERE archived IS NULL GROUP BY thread "
                          "ORDER BY thread").fetchall()
    return kept, real


def noise(chars: int, seed: int) -> str:
    """`chars` random punctuation marks: compressed (ctxd/ledger/bodies.py), a long item stays
    long as stored (5 bits a character), and it holds no word to index (the recall index of
    random words would outgrow what the rewrite gives back)."""
    return "".join(random.Random(seed).choices("!#$%&()*+,-./:;<=>?@[]^{|}~", k=chars))


def fill(thread: Thread, workspace: Path) -> None:
    """A history with every kind of record: items short and long (over 1 KB and over 4 KB, the
    sizes the old table kept off its page), a compaction and its undo, a rollback, records since."""
    thread.call("ctxd/record", items=turns(0, 6))
    thread.call("ctxd/record", items=[output("big", noise(9000, 0))] + [assistant(f"{n} " + noise(2000, n + 1))
                                                                           for n in range(60)])
    compacted = thread.call("ctxd/compact", strategy="offline")
    undone = thread.call("ctxd/undo", id=compacted["undoId"])
    thread.call("ctxd/undo", id=undone["undoId"])  # redone
    thread.call("ctxd/record", items=turns(6, 2))
    thread.call("ctxd/rollback", turns=1)
    thread.call("ctxd/record", items=[user("meanwhile, a note on the flux capacitor")])
    other = Thread(thread.client, workspace, "second")
    other.call("ctxd/record", items=[user(f"second thread {n}") for n in range(5)])


def test_an_old_ledger_is_rewritten_at_open_and_keeps_every_record(daemon_factory, workspace: Path,
                                                                  state_dir: Path) -> None:
    first = Thread(daemon_factory([workspace]), workspace)
    fill(first, workspace)
    history = first.everything()
    first.client.shutdown()
    path = database_path(state_dir / "ctxd", workspace)
    make_old(path)
    before = dump(path)
    size_before = path.stat().st_size
    assert len(before["items"]) > 40 and len(before["compactions"]) >= 4

    second = Thread(daemon_factory([workspace]), workspace)
    assert second.everything() == history
    found = second.client.request("ctxd/recall", {"workspace": workspace.as_uri(), "thread": "t", "query": "flux capacitor"})
    assert [hit["seq"] for hit in found["results"]]
    second.call("ctxd/record", items=[user("after the rewrite")])
    assert second.items()[-1] == user("after the rewrite")
    second.client.shutdown()

    assert not without_rowid(path)
    after = dump(path)
    new = [row for row in after["items"] if row not in before["items"]]
    assert [json.loads(row[2]) for row in new] == [user("after the rewrite")]
    assert [row for row in after["items"] if row not in new] == before["items"]
    assert after["compactions"] == before["compactions"] and after["moved"] == before["moved"]
    assert after["meta"] == before["meta"] and after["followed"] == before["followed"]
    # The thread rows are the same but for the record made since (its count, sum and time).
    assert [row for row in after["threads"] if row[0] != "t"] == [row for row in before["threads"] if row[0] != "t"]
    kept, real = counted(path)
    assert kept == real  # the count triggers came back with the new table
    assert path.stat().st_size < size_before  # the old table's pages were given back


# A process that opens the ledger and is killed (SIGKILL) in the middle of the rewrite: after
# every statement of it, before its commit.
KILLED_MID_REWRITE = """
import os, signal, sys
from pathlib import Path
from ctxd.ledger import store
real = store._run_script
def run(db, script):
    real(db, script)
    if script is store._ITEMS_WITH_ROWID:
        print("rewritten, not committed", flush=True)
        sys.stdin.readline()  # the test looks at the ledger now, then kills us
        os.kill(os.getpid(), signal.SIGKILL)
store._run_script = run
store.Store(Path(sys.argv[1]), Path(sys.argv[2]))
"""


def old_ledger(daemon_factory, workspace: Path, state_dir: Path) -> Path:
    thread = Thread(daemon_factory([workspace]), workspace)
    fill(thread, workspace)
    thread.client.shutdown()
    path = database_path(state_dir / "ctxd", workspace)
    make_old(path)
    return path


def test_a_rewrite_killed_before_its_commit_leaves_the_old_ledger_whole_and_is_done_at_the_next_open(
        daemon_factory, workspace: Path, state_dir: Path) -> None:
    path = old_ledger(daemon_factory, workspace, state_dir)
    before = dump(path)
    killed = subprocess.Popen([sys.executable, "-c", KILLED_MID_REWRITE, str(path), str(workspace)], cwd=REPO,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert killed.stdout is not None and killed.stdin is not None
        assert killed.stdout.readline().strip() == "rewritten, not committed"
        # Meanwhile another process (the CLI reads ledgers) sees the old ledger whole.
        cli = Store(path, readonly=True)
        try:
            assert [row.seq for row in cli.all_rows("t")] == [row[1] for row in before["items"] if row[0] == "t"]
        finally:
            cli.close()
        assert dump(path) == before
        killed.stdin.write("\n")
        killed.stdin.flush()
        assert killed.wait(timeout=30) == -signal.SIGKILL
    finally:
        if killed.poll() is None:
            killed.kill()
            killed.wait()
    assert without_rowid(path) and dump(path) == before  # the old table, whole
    again = Store(path, workspace)
    try:
        assert not without_rowid(path)
        assert [(r.seq, r.body, r.tokens, r.origin, r.archived) for r in again.all_rows("t")] == [
            (row[1], bodies.decode(row[2]), *row[3:]) for row in before["items"] if row[0] == "t"]
    finally:
        again.close()
    assert dump(path) == before


def test_a_full_disk_during_the_rewrite_keeps_the_old_table_in_use_and_the_next_open_rewrites(
        daemon_factory, workspace: Path, state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = old_ledger(daemon_factory, workspace, state_dir)
    before = dump(path)
    real = store_module._run_script

    def full(db: sqlite3.Connection, script: str) -> None:
        real(db, script)
        if script is store_module._ITEMS_WITH_ROWID:
            raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(store_module, "_run_script", full)
    store = Store(path, workspace)
    try:
        assert store.readonly_reason is None and without_rowid(path) and dump(path) == before
        store.append("t", [(json.dumps(user("recorded on the old table")), 5)])  # it still records
    finally:
        store.close()
    kept, real_counts = counted(path)
    assert kept == real_counts
    monkeypatch.undo()
    grown = dump(path)
    assert len(grown["items"]) == len(before["items"]) + 1
    store = Store(path, workspace)
    store.close()
    assert not without_rowid(path) and dump(path)["items"] == grown["items"]


# A second process that has the ledger open (a daemon of this code: its recall index's triggers are
# TEMP, on its own connection) while another rewrites it, then writes and compacts.
def test_a_daemon_with_the_ledger_open_keeps_writing_and_indexing_through_a_rewrite(
        daemon_factory, workspace: Path, state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = old_ledger(daemon_factory, workspace, state_dir)
    before = dump(path)
    # Opened before the rewrite, without rewriting (as a process whose rewrite found the ledger
    # busy, or an older ctxd): its connection stays open through another process's rewrite.
    monkeypatch.setattr(Store, "_rewrite_items", lambda self: False)
    old_open = Store(path, workspace)
    monkeypatch.undo()
    assert without_rowid(path)
    try:
        rewriting = subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; "
                                    "from ctxd.ledger.store import Store; Store(Path(sys.argv[1]), Path(sys.argv[2])).close()",
                                    str(path), str(workspace)], cwd=REPO, timeout=60, capture_output=True, text=True)
        assert rewriting.returncode == 0, rewriting.stderr
        assert not without_rowid(path)
        old_open.append("second", [(json.dumps(user("written by the older connection")), 7)])
        assert old_open.all_rows("second")[-1].body == json.dumps(user("written by the older connection"))
    finally:
        old_open.close()
    kept, real = counted(path)
    assert kept == real
    after = dump(path)["items"]
    assert [row for row in after if row not in before["items"]] == [
        ("second", 6, json.dumps(user("written by the older connection")), 7, None, None)]
    assert [row for row in after if row in before["items"]] == before["items"]
    daemon = Thread(daemon_factory([workspace]), workspace, "second")
    assert daemon.items()[-1] == user("written by the older connection")
    found = daemon.client.request("ctxd/recall", {"workspace": workspace.as_uri(), "thread": "second", "query": "older connection"})
    assert [hit["seq"] for hit in found["results"]] == [6]
    main = Thread(daemon.client, workspace)
    items = main.items()
    compacted = main.call("ctxd/compact", strategy="offline")
    main.call("ctxd/record", items=[user("after the compaction")])
    main.call("ctxd/undo", id=compacted["undoId"])
    assert main.items() == items + [user("after the compaction")]
    daemon.client.shutdown()
    assert counted(path)[0] == counted(path)[1]


def test_on_a_really_full_disk_the_old_table_stays_in_use_and_records_go_on(daemon_factory, workspace: Path,
                                                                             state_dir: Path, tmp_path: Path) -> None:
    """No room for the rewrite's copy (a tmpfs filled to within 64 KB): the ledger opens on its
    old table, reads all, and records."""
    if not namespace_ok():
        pytest.skip("needs root and `unshare -m` to mount a small tmpfs as a full disk")
    path = old_ledger(daemon_factory, workspace, state_dir)
    before = dump(path)
    mount = tmp_path / "full"
    mount.mkdir()
    script = ('mount -t tmpfs -o size=4m tmpfs "$1" && cp -a "$2/." "$1/" && '
              'avail=$(df -k --output=avail "$1" | tail -1) && '
              'dd if=/dev/zero of="$1/filler" bs=1k count=$((avail - 64)) 2>/dev/null && shift 2 && exec "$@"')
    log = tmp_path / "full.log"
    cmd = ["unshare", "-m", "sh", "-c", script, "sh", str(mount), str(state_dir), sys.executable, "-m", "ctxd",
           "--state-dir", str(mount / "ctxd"), "--log-file", str(log)]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=daemon_env(state_dir), cwd=str(REPO))
    client = Client(proc)
    try:
        client.initialize([workspace])
        thread = Thread(client, workspace)
        assert len(thread.everything()["items"]) == len([row for row in before["items"] if row[0] == "t"])
        thread.call("ctxd/record", items=[user("recorded on a full disk")])
        assert thread.items()[-1] == user("recorded on a full disk")
    finally:
        client.shutdown()
    assert "its items were not rewritten" in log.read_text() and "full" in log.read_text()
    assert without_rowid(path) and dump(path) == before  # (the copy on the tmpfs went with it)
