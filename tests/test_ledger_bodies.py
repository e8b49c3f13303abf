"""Long items' JSON is stored compressed (issue #38, `ctxd/ledger/bodies.py`): read back exactly
through every request, found by recall, compacted and undone exactly; the row really is a smaller
BLOB; a ledger of schema 1 (TEXT bodies) opens and keeps working; a newer schema is refused; a
damaged BLOB gives the store's error naming the file. A real daemon and real SQLite files.
"""

from __future__ import annotations

import json
import sqlite3
import zlib
from pathlib import Path
from typing import Any

import pytest

from ctxd.errors import StoreUnavailable
from ctxd.ledger import bodies
from ctxd.ledger.store import SCHEMA_VERSION, Store, database_path
from ctxd.protocol.jsontext import dumps
from tests.helpers import assistant, call, output, user
from tests.rpc import RpcError
from tests.test_ledger_rowid import make_old, without_rowid
from tests.test_undo import Thread

STORE_UNAVAILABLE = 1003


def big_output(call_id: str, word: str, size: int = 44_000) -> dict[str, Any]:
    """A tool output of `size` characters (45 KB: under the 48 KB a recorded output may have
    before it is truncated), as a build's log is: lines alike but for their numbers, `word` once in
    the middle, and some text JSON escapes."""
    lines = [f"[{n:05d}] compiling src/module_{n % 97}.rs ... ok \"quoted\" \\ tab\there é" for n in range(size // 60)]
    # Eight long error lines, `word` in one: a compaction's placeholder quotes them (over 1 KB).
    for n in range(8):
        lines.insert(len(lines) // 2, f"error[E{n:04d}]: cannot find value `{word if n == 3 else f'v{n}'}` in this "
                     f"scope --> src/module_{n}.rs:{n}:{n} " + " ".join(f"note-{n}-{k}" for k in range(20)))
    return output(call_id, "\n".join(lines)[:size])


def history(count: int, word: str) -> list[dict[str, Any]]:
    """Turns with one big tool output first, then `count` small ones after it (so that a
    compaction masks the big one), and a long user message kept by the compaction."""
    items = [user("build it"), call("c0", arguments='{"cmd": "cargo build"}'), big_output("c0", word)]
    for n in range(1, count + 1):
        items += [call(f"c{n}"), output(f"c{n}", f"small output {n}"), assistant(f"step {n} done")]
    items += [user("now the long request: " + " ".join(f"requirement-{n}" for n in range(400)))]
    return items


def rows(path: Path) -> list[tuple[str, int, str, int]]:
    """Every item's (thread, seq, storage class, stored length) as SQLite holds it."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return db.execute("SELECT thread, seq, typeof(body), length(CAST(body AS BLOB)) FROM items "
                          "ORDER BY thread, seq").fetchall()


def search(thread: Thread, query: str) -> list[dict[str, Any]]:
    return thread.call("ctxd/recall", query=query)["results"]


def test_a_large_item_is_stored_compressed_and_read_back_exactly(daemon_factory, workspace: Path,
                                                                  state_dir: Path) -> None:
    thread = Thread(daemon_factory([workspace]), workspace)
    items = history(5, "zebracorn")
    thread.call("ctxd/record", items=items)
    path = database_path(state_dir / "ctxd", workspace)

    assert thread.items() == items
    assert thread.call("ctxd/prompt")["items"] == items
    assert thread.call("ctxd/item", seq=3)["item"] == items[2]

    # The 50 KB output is a BLOB, much smaller than its JSON; a short item is TEXT, as it was.
    stored = {seq: (kind, size) for _, seq, kind, size in rows(path)}
    text = dumps(items[2])
    assert stored[3][0] == "blob" and stored[3][1] < len(text) // 3, stored[3]
    assert stored[1] == ("text", len(dumps(items[0])))
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        (blob,) = db.execute("SELECT body FROM items WHERE seq = 3").fetchone()
        (version,) = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    assert zlib.decompress(blob) == text  # exactly the JSON a prompt sends
    assert version == str(SCHEMA_VERSION) == "2"

    # Recall finds a word inside it.
    assert [hit["seq"] for hit in search(thread, "zebracorn")] == [3]

    # A compaction masks it (its placeholder is written, it is archived whole); undone, exactly.
    before = thread.items()
    result = thread.call("ctxd/compact", strategy="offline")
    compacted = thread.items()
    assert items[2] not in compacted and compacted != before
    # The placeholder quotes the word (its JSON over 1 KB: compressed too); the search shows the
    # output it stands for, archived whole.
    found = search(thread, "zebracorn")
    assert [hit["seq"] for hit in found] == [3] and found[0]["archived"] is True
    placeholder = found[0]["placeholderSeq"]
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        (stored,) = db.execute("SELECT body FROM items WHERE seq = ?", (placeholder,)).fetchone()
    assert isinstance(stored, bytes) and "removed by compaction" in bodies.decode(stored)
    assert thread.call("ctxd/item", seq=placeholder)["item"] == items[2]  # the output it stands for
    # The long user message, kept by the compaction (a copy, compressed too), is found once.
    long_hits = search(thread, "requirement-399")
    assert len(long_hits) == 1 and long_hits[0]["archived"] is False
    thread.call("ctxd/undo", id=result["undoId"])
    assert thread.items() == before == items
    assert thread.call("ctxd/prompt")["items"] == items
    assert 3 in [hit["seq"] for hit in search(thread, "zebracorn")]  # (with the placeholder, archived now)

    # A second daemon (a new process, nothing in memory) reads the same.
    thread.client.shutdown()
    again = Thread(daemon_factory([workspace]), workspace)
    assert again.items() == items
    assert any(kind == "blob" for _, _, kind, _ in rows(path))


def as_schema_1(path: Path) -> None:
    """What ctxd before compressed bodies wrote: every body TEXT, schema version 1."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        for rowid, body in db.execute("SELECT rowid, body FROM items WHERE typeof(body) = 'blob'").fetchall():
            db.execute("UPDATE items SET body = ? WHERE rowid = ?", (bodies.decode(body), rowid))
        db.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
        db.execute("COMMIT")
    finally:
        db.close()


@pytest.mark.parametrize("old_table", [False, True], ids=["rowid table", "WITHOUT ROWID table"])
def test_a_schema_1_ledger_opens_reads_and_compresses_what_is_written_since(
        daemon_factory, workspace: Path, state_dir: Path, old_table: bool) -> None:
    first = Thread(daemon_factory([workspace]), workspace)
    items = history(5, "quagga")
    first.call("ctxd/record", items=items)
    first.client.shutdown()
    path = database_path(state_dir / "ctxd", workspace)
    as_schema_1(path)
    if old_table:
        make_old(path)  # also rewritten as a rowid table at open (tests/test_ledger_rowid.py)
    old_rows = rows(path)
    assert {kind for _, _, kind, _ in old_rows} == {"text"}

    thread = Thread(daemon_factory([workspace]), workspace)
    assert thread.items() == items
    assert thread.call("ctxd/prompt")["items"] == items
    assert [hit["seq"] for hit in search(thread, "quagga")] == [3]
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        (version,) = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    assert version == "2" and not without_rowid(path)
    assert rows(path) == old_rows  # its TEXT rows are left as they are

    newer = big_output("c9", "okapi")
    thread.call("ctxd/record", items=[call("c9"), newer])
    assert thread.items() == [*items, call("c9"), newer]
    assert rows(path)[-1][2] == "blob"
    assert [hit["seq"] for hit in search(thread, "okapi")] == [len(items) + 2]

    # A compaction keeps the long user message (TEXT) as a new, compressed copy: one match still;
    # the old TEXT output it archived is found.
    result = thread.call("ctxd/compact", strategy="offline")
    long_text = dumps(items[-1])
    assert len(long_text) >= bodies.COMPRESS_FROM
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        stored = [(seq, origin is not None, archived is not None, isinstance(body, bytes))
                  for seq, body, origin, archived in db.execute("SELECT seq, body, origin, archived FROM items")
                  if bodies.decode(body).encode() == long_text]
    # The TEXT original, archived; the copy the compaction wrote, active and compressed.
    assert sorted(stored) == [(len(items), False, True, False), (stored[-1][0], True, False, True)], stored
    assert len(search(thread, "requirement-399")) == 1
    found = search(thread, "quagga")
    assert [hit["seq"] for hit in found] == [3] and found[0]["archived"] is True
    thread.call("ctxd/undo", id=result["undoId"])
    assert thread.items() == [*items, call("c9"), newer]


def test_a_ledger_of_a_newer_schema_is_refused_with_the_upgrade_message(daemon_factory, workspace: Path,
                                                                        state_dir: Path) -> None:
    first = Thread(daemon_factory([workspace]), workspace)
    first.call("ctxd/record", items=[user("recorded by a newer ctxd")])
    first.client.shutdown()
    path = database_path(state_dir / "ctxd", workspace)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    db.close()
    before = path.read_bytes()

    thread = Thread(daemon_factory([workspace]), workspace)
    for method in ("ctxd/history", "ctxd/record"):
        with pytest.raises(RpcError) as caught:
            thread.call(method, **({"items": [user("x")]} if method == "ctxd/record" else {}))
        assert caught.value.code == STORE_UNAVAILABLE
        assert str(path) in caught.value.message and "schema version 3" in caught.value.message
        assert "upgrade ctxd" in caught.value.message
    with pytest.raises(StoreUnavailable, match="upgrade ctxd"):  # the CLI's read-only opening too
        Store(path, readonly=True)
    thread.client.shutdown()
    assert path.read_bytes() == before  # left as it was


def test_a_damaged_compressed_body_gives_the_stores_error_naming_the_file(daemon_factory, workspace: Path,
                                                                         state_dir: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    first = Thread(daemon_factory([workspace]), workspace)
    items = history(2, "narwhal")
    first.call("ctxd/record", items=items)
    first.client.shutdown()
    path = database_path(state_dir / "ctxd", workspace)
    with sqlite3.connect(path) as db:
        (blob,) = db.execute("SELECT body FROM items WHERE seq = 3").fetchone()
        assert isinstance(blob, bytes)
        db.execute("UPDATE items SET body = ? WHERE seq = 3", (blob[:40] + bytes(40) + blob[80:],))
    db.close()

    client = daemon_factory([workspace, other])
    thread, elsewhere = Thread(client, workspace), Thread(client, other)
    calls: list[tuple[str, dict[str, Any]]] = [("ctxd/history", {}), ("ctxd/prompt", {}), ("ctxd/item", {"seq": 3}),
                                               ("ctxd/compact", {"strategy": "offline"})]
    for method, params in calls:
        with pytest.raises(RpcError) as caught:
            thread.call(method, **params)
        assert caught.value.code == STORE_UNAVAILABLE, (method, caught.value)
        assert str(path) in caught.value.message and "damaged" in caught.value.message, caught.value.message
        assert "move it aside" in caught.value.message
    # The other items are read, and recall answers (the damaged item is not indexed).
    assert thread.call("ctxd/item", seq=1)["item"] == items[0]
    assert search(thread, "narwhal") == []
    assert [hit["seq"] for hit in search(thread, "requirement-7")] == [len(items)]
    # The daemon serves on: another workspace, and this one's other threads.
    for fine in (elsewhere, Thread(client, workspace, "u")):
        fine.call("ctxd/record", items=[user("fine here")])
        assert fine.items() == [user("fine here")]


def test_a_new_ledger_gives_back_the_pages_its_writes_freed_and_an_old_one_keeps_them(tmp_path: Path) -> None:
    """A first import leaves pages free in the ledger, more or fewer as its writes were timed (the
    recall index merges its segments as it grows): the state dir measured 120 MB one run and 122 MB
    the next (`bench/bench_heavy.py` at 1/3 size). A ledger made now gives them back when its
    writer is idle, keeping FREE_PAGES_KEPT for later writes; one made before keeps its pages,
    and nothing recorded is lost either way."""
    from ctxd.ledger import store as store_module

    def freed(store: Store) -> sqlite3.Connection:
        """Items recorded, then a megabytes' table made and dropped beside them: its pages free."""
        store.append("t", [(dumps(user(f"item {n} " + "word " * 200)).decode(), 300) for n in range(50)])
        db = sqlite3.connect(store.path, isolation_level=None)
        db.execute("CREATE TABLE scratch (x)")
        db.executemany("INSERT INTO scratch VALUES (?)", [(bytes(3000),) for _ in range(4000)])
        db.execute("DROP TABLE scratch")
        return db

    new = Store(tmp_path / "new.sqlite3", tmp_path)
    db = freed(new)
    before = db.execute("PRAGMA page_count").fetchone()[0]
    assert db.execute("PRAGMA freelist_count").fetchone()[0] > 3000
    given = sum(iter(new.give_back_free_pages, 0))  # (at most FREE_PAGES_AT_ONCE a write)
    assert given > 2500 and db.execute("PRAGMA freelist_count").fetchone()[0] == store_module.FREE_PAGES_KEPT
    assert db.execute("PRAGMA page_count").fetchone()[0] <= before - given
    rows = new.active_rows("t")
    assert len(rows) == 50 and "item 49 " in json.dumps(json.loads(rows[-1].body))
    db.close()
    new.close()
    assert new.path.stat().st_size <= (before - given) * 4096  # the file itself shrank

    old_path = tmp_path / "old.sqlite3"
    made = sqlite3.connect(old_path, isolation_level=None)
    made.execute("CREATE TABLE placeholder (x)")  # a file with a table keeps its mode: NONE, as every ledger before
    made.close()
    old = Store(old_path, tmp_path)
    db = freed(old)
    kept = db.execute("PRAGMA freelist_count").fetchone()[0]
    assert old.give_back_free_pages() == 0 and db.execute("PRAGMA freelist_count").fetchone()[0] == kept > 3000
    assert len(old.active_rows("t")) == 50
    db.close()
    old.close()
