"""OpenCode 1.18.33 as one agent module (ctxd/agents/opencode.py, issue #39): its SQLite store read
read-only, records into items, the fill by its TUI's rule, usage with cached input, its own
compaction and reverts as window replacements, its limits from opencode.json, its plugin hook's
payloads, and hostile databases (a link to a FIFO, a huge row, bad JSON, a replaced file).

The database is the real one OpenCode 1.18.33 wrote (tests/opencode_db.py says how), appended to
in OpenCode's shapes."""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ctxd import agents
from ctxd.agents import opencode
from ctxd.agents.base import AgentConfig
from ctxd.agents.opencode import OpenCodeSessions, compact_limits, configured
from ctxd.places import ctxd_command
from tests.ghost_repo import Repo, make_repo
from tests.opencode_db import FIXTURE, FIXTURE_DIRECTORY, SESSION, Database, assistant, read_only_checkpoint_free, user
from tests.rpc import Client, RpcError, daemon_env
from tests.session_fixtures import mirror, mirrored_as
from tests.test_hooks import ctxd, env_for
from tests.test_hooks import make_repo as hooks_repo


def _read_all(store: OpenCodeSessions, key: str = SESSION) -> tuple[opencode.OpenCodeReader, list]:
    reader = store.reader(key)
    changes = [reader.read()]
    while not reader.caught_up:
        changes.append(reader.read())
    return reader, changes


def test_the_database_opencode_wrote_is_read_into_items_turns_usage_and_its_compaction(tmp_path: Path) -> None:
    store = OpenCodeSessions(FIXTURE.parent)
    assert store.keys() == [SESSION]
    assert store.peek_cwd(SESSION, None)[:2] == ("/home/user/app", True)  # type: ignore[arg-type]
    reader, [change] = _read_all(store)
    session = reader.session
    assert (session.id, session.cwd, session.version, session.model) == (SESSION, "/home/user/app", "1.18.33",
                                                                          "qwen3-coder-plus")
    assert session.title == "Done."  # the row's title (the small model's answer), not the placeholder
    assert [t.text for t in session.turns] == ['"Create hello.txt saying hello."', '"Change it to say hello, world."']
    # Before the compaction: prompt, text, write call and its output, text; prompt, read, edit...
    first, compaction, after = change.steps
    kinds = [(i["type"], i.get("name") or i.get("role")) for i in first.items]
    assert kinds[:6] == [("message", "user"), ("message", "assistant"), ("function_call", "write"),
                         ("function_call_output", None), ("message", "assistant"), ("message", "user")]
    assert [i["name"] for i in first.items if i["type"] == "function_call"] == ["write", "read", "edit"]
    assert json.loads(first.items[2]["arguments"]) == {"filePath": "/home/user/app/hello.txt", "content": "hello\n"}
    # Its compaction replaced the window: the summary starts the new one, nothing before it is in it.
    assert compaction.replace and compaction.compaction == 0
    assert "<state_snapshot>" in json.dumps(compaction.items) and len(compaction.items) == 1
    assert [i["content"][0]["text"] for i in after.items] == [
        "Continue if you have next steps, or stop and ask for clarification if you are unsure how to proceed.",
        "Changed."]
    assert session.compactions == 1 and session.agent_compactions[0]["trigger"] == "auto"
    assert (session.agent_compactions[0]["tokensBefore"], session.agent_compactions[0]["tokensAfter"]) == (17025, 2200)
    # The fill: the last assistant message with output, input + output + reasoning + cache (the TUI's).
    assert session.baseline == 2000 + 5 + 1000 == 3005
    # Usage with cached input adds up to the session row's own sums (OpenCode's input excludes cached).
    [(model, usage)] = session.cumulative.items()
    row = store_row(FIXTURE)
    assert (model, usage.input, usage.cached_input, usage.output) == (
        "qwen3-coder-plus", row["tokens_input"], row["tokens_cache_read"], row["tokens_output"])
    assert session.first_request == {"tokens": 12000, "messages": session.first_request["messages"]}
    assert not session.unknown and session.bad_lines == 0


def store_row(path: Path) -> sqlite3.Row:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        db.row_factory = sqlite3.Row
        found: sqlite3.Row = db.execute("SELECT * FROM session").fetchone()
    db.close()
    return found


def test_live_rows_are_read_once_each_when_settled_and_no_read_transaction_is_held(tmp_path: Path) -> None:
    db = Database(tmp_path / "data", tmp_path / "app")
    store = OpenCodeSessions(db.path.parent)
    reader, _ = _read_all(store)
    before = len(reader.session.items)
    assert read_only_checkpoint_free(db.path)  # the read closed its transaction and its connection
    other = OpenCodeSessions(db.path.parent)  # a store that follows nothing
    assert other.touched(str(db.path) + "-wal") == [SESSION]  # first sight
    prompt = db.prompt("Add a line")
    pending = db.reply("Adding.", prompt, prompt=4000, cached=3000, output=7, completed=False)
    assert other.touched(str(db.path) + "-wal") == [SESSION] and other.touched(str(db.path) + "-wal") == []
    assert other.touched(str(db.path) + "-shm") == [] and other.touched(str(db.path.parent / "x.db-wal")) == []
    assert store.touched(str(db.path) + "-wal") == [SESSION] == store.touched(str(db.path) + "-wal")  # followed
    change = reader.read()
    assert [t.text for t in change.turns] == ["Add a line"]
    assert [i["role"] for i in change.appended] == ["user"]  # the reply is still being written: not read
    assert reader.session.baseline == 3005
    info = json.loads(db.rows("SELECT data FROM message WHERE id = ?", pending)[0][0])
    info["time"]["completed"] = info["time"]["created"] + 10
    db.update(pending, info)
    change = reader.read()
    assert [i["content"][0]["text"] for i in change.appended] == ["Adding."]
    assert reader.session.baseline == 4007 and len(reader.session.items) == before + 2
    assert reader.read().empty  # nothing twice
    assert read_only_checkpoint_free(db.path)
    stamp = store.stamp(SESSION)
    assert stamp is not None and stamp.size == 12


def test_listing_the_sessions_never_reads_their_messages(tmp_path: Path) -> None:
    """The message table holds every session's conversation: the list OpenCode's every write makes
    ctxd look at again reads the session table alone (messages are counted for a followed session)."""
    db = Database(tmp_path / "data")
    with db.connect() as raw:
        raw.execute("ALTER TABLE message RENAME TO message_elsewhere")
    store = OpenCodeSessions(db.path.parent)
    assert store.keys() == [SESSION] and store.touched(str(db.path)) == [SESSION]
    assert store.peek_cwd(SESSION, None)[:2] == ("/home/user/app", True)  # type: ignore[arg-type]


def test_a_revert_is_a_rewind_and_undoing_it_brings_the_messages_back(tmp_path: Path) -> None:
    db = Database(tmp_path / "data")
    store = OpenCodeSessions(db.path.parent)
    first = db.prompt("one")
    db.reply("did one", first, 4000, 3000, 5)
    second = db.prompt("two")
    db.reply("did two", second, 5000, 4000, 6)
    reader, _ = _read_all(store)
    window = list(reader.session.items)
    assert [i["content"][0]["text"] for i in window[-4:]] == ["one", "did one", "two", "did two"]
    db.set_session("revert", json.dumps({"messageID": second}))
    change = reader.read()
    assert change.replaced and [s.compaction for s in change.steps] == [None]
    assert reader.session.items == window[:-2] and reader.session.rewinds == 1
    db.set_session("revert", None)  # OpenCode's unrevert: the rows are still there
    change = reader.read()
    assert change.replaced and reader.session.items == window
    # A revert that OpenCode cleaned up (its next prompt removes the rows): fewer messages, read afresh.
    db.set_session("revert", json.dumps({"messageID": second}))
    reader.read()
    count = store.stamp(SESSION).size  # type: ignore[union-attr]
    with db.connect() as raw:
        raw.execute("DELETE FROM message WHERE session_id = ? AND time_created >= ?",
                    (SESSION, raw.execute("SELECT time_created FROM message WHERE id = ?", (second,)).fetchone()[0]))
        raw.execute("UPDATE session SET revert = NULL, time_updated = time_updated + 1 WHERE id = ?", (SESSION,))
    assert store.stamp(SESSION).size < count  # type: ignore[union-attr]
    change = reader.read()
    assert reader.session.items == window[:-2]


@pytest.mark.parametrize("target", ["before its compaction", "of no message"])
def test_an_undo_outside_the_window_is_not_read_again_at_every_read(tmp_path: Path, target: str) -> None:
    """A revert naming a message before the latest compaction (or none of the session) takes
    nothing out of the window. A reader trimmed to its latest messages read the whole session
    again from its start to look for it, at every read: in the daemon, at every write to the
    database by any session. It looks once."""
    db = Database(tmp_path / "data")
    store = OpenCodeSessions(db.path.parent)
    with db.connect() as raw:  # the fixture's first prompt, before its compaction
        [(early,)] = raw.execute("SELECT id FROM message WHERE session_id = ? ORDER BY time_created LIMIT 1", (SESSION,))
    for n in range(40):  # more messages since the compaction than a trimmed reader remembers
        db.reply(f"did {n}", db.prompt(f"do {n}"), 4000 + n, 3000, 5)
    reader, _ = _read_all(store)
    reader.holds_window = False
    shown = _shown(reader)
    db.set_session("revert", json.dumps({"messageID": early if target == "before its compaction" else "msg_none"}))
    reads = []
    for n in range(4):
        reader.trim()
        if n == 2:  # (taken up from its saved state, as after a restart)
            saved = json.loads(json.dumps(reader.state()))
            reader = store.reader(SESSION)
            reader.holds_window = False
            assert reader.resume({**saved, "stamp": list(store.stamp(SESSION).key())}, store.stamp(SESSION))  # type: ignore[union-attr]
        before = reader.bytes_read
        reads.append((reader.read().from_start, reader.bytes_read - before))
    assert reads[0][0] is True and reads[1:] == [(False, 0)] * 3, reads  # (the first looks for it, once)
    assert _shown(reader) == shown


def test_a_reply_still_streaming_when_a_queued_prompt_is_written_is_read_once_it_ends(tmp_path: Path) -> None:
    """OpenCode writes a prompt typed while a reply streams at once, before that reply has its
    tokens and its last parts: a read then went past the reply, and its tool call and usage were
    never read. A reply neither completed nor failed is read once it is, or once a later step's
    message follows it."""
    db = Database(tmp_path / "data")
    store = OpenCodeSessions(db.path.parent)
    reader, _ = _read_all(store)
    first = db.prompt("Refactor it")
    streaming = assistant(first, db.clock + 1000, 0, 0, 0, 0.0, completed=False)
    streaming["tokens"] = {"input": 0, "output": 0, "reasoning": 0, "cache": {"read": 0, "write": 0}}
    reply = db.message(streaming, [{"type": "step-start"}, {"type": "text", "text": "Looking."}])
    queued = db.prompt("Also add tests")
    window = list(reader.session.items)
    mirror(window, reader.read())  # the daemon reads at that write
    db.part(reply, {"type": "tool", "tool": "read", "callID": "call_q",
                    "state": {"status": "completed", "input": {"filePath": "a.py"}, "output": "x = 1"}})
    db.update(reply, assistant(first, streaming["time"]["created"], 9000, 8000, 50, 0.01))
    db.reply("Tests added.", queued, 9500, 9000, 30)
    mirror(window, reader.read())
    whole, _ = _read_all(OpenCodeSessions(db.path.parent))
    assert window == whole.session.items and _shown(reader) == _shown(whole)
    assert "call_q" in json.dumps(window)
    # A reply an OpenCode that stopped left unfinished: read as it is once a later step follows it.
    left = db.message(streaming | {"time": {"created": db.clock}}, [{"type": "text", "text": "Half"}])
    db.reply("Again.", db.prompt("Go on"), 9800, 9000, 20)
    mirror(window, reader.read())
    whole, _ = _read_all(OpenCodeSessions(db.path.parent))
    assert window == whole.session.items and "Half" in json.dumps(window) and left


def test_a_prompt_is_read_with_every_part_opencode_writes_after_its_message(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenCode writes a prompt's message, then its parts one write each (an attached file's after
    its text): a read between two of them took the prompt without the rest, for good. A prompt is
    read once a message follows it, or SETTLE_SECONDS after it was made."""
    db = Database(tmp_path / "data")
    db.clock = int(time.time() * 1000)  # made now
    store = OpenCodeSessions(db.path.parent)
    reader, _ = _read_all(store)
    window = list(reader.session.items)
    db.clock += 1000
    prompt = db._id("msg")
    with db.connect() as raw:
        raw.execute("INSERT INTO message (id, session_id, time_created, time_updated, data) VALUES (?, ?, ?, ?, ?)",
                    (prompt, SESSION, db.clock, db.clock, json.dumps(user(db.clock))))
    db.part(prompt, {"type": "text", "text": "Explain @notes.md"})
    mirror(window, reader.read())  # between two of OpenCode's writes
    db.part(prompt, {"type": "text", "synthetic": True, "text": "Called the Read tool with the following input: ..."})
    db.part(prompt, {"type": "file", "filename": "notes.md", "url": "file:///notes.md", "mime": "text/plain"})
    db.reply("It says hi.", prompt, 5000, 4000, 9)
    mirror(window, reader.read())
    whole, _ = _read_all(OpenCodeSessions(db.path.parent))
    assert window == whole.session.items and "[attached: notes.md]" in json.dumps(window)
    last = db.prompt("And then?")  # an OpenCode that stopped before its reply: read after a while
    mirror(window, reader.read())
    assert last not in reader.state()["cursor"]  # type: ignore[index]
    later = db.clock / 1000 + opencode.SETTLE_SECONDS + 1
    monkeypatch.setattr(opencode.time, "time", lambda: later)
    mirror(window, reader.read())
    assert reader.state()["cursor"][1] == last and window[-1]["content"][0]["text"] == "And then?"  # type: ignore[index]


def _shown(reader: opencode.OpenCodeReader) -> dict[str, Any]:
    """What a session shows and the gauge counts from."""
    session = reader.session
    return {"window": session.window, "turns": session.turn_total, "cost": session.cumulative,
            "baseline": session.baseline,
            "tail": session.tail, "title": session.title, "compactions": session.compactions,
            "first": session.first_request}


def test_a_reader_taken_up_at_any_write_ends_as_one_read_of_the_whole_session(tmp_path: Path) -> None:
    """The daemon's readers hold no window and are taken up where they stood (a restart, a dormant
    session's reader let go), not read again whole: from its state after any write (what it
    remembers trimmed to two messages), through undos, an undo undone and one OpenCode cleaned up,
    a reader ends where one read of the whole session does, and the window its steps leave is the
    one a reader holding it holds (a read that finds its last message removed starts again: what
    the cleanup took out is counted by neither)."""
    db = Database(tmp_path / "data")
    store = OpenCodeSessions(db.path.parent)
    live = store.reader(SESSION)
    live.holds_window = False
    window: list[dict[str, Any]] = []
    saved: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []

    def written() -> None:
        while True:
            mirror(window, live.read())
            if live.caught_up:
                break
        live.trim(2)
        stamp = store.stamp(SESSION)
        assert stamp is not None
        saved.append((json.loads(json.dumps({**(live.state() or {}), "stamp": list(stamp.key())})), list(window)))

    written()
    texts = iter(["one", "two", "three", "four", "five", "six"])
    prompts = []
    for _ in range(3):
        prompts.append(db.prompt(next(texts)))
        db.reply("did it", prompts[-1], 4000 + 100 * len(prompts), 3000, 5)
        written()
    db.set_session("revert", json.dumps({"messageID": prompts[0]}))  # an undo far back
    written()
    db.set_session("revert", None)  # undone: the messages are back
    written()
    db.set_session("revert", json.dumps({"messageID": prompts[2]}))
    written()
    with db.connect() as raw:  # OpenCode's cleanup at its next prompt: the messages go
        raw.execute("DELETE FROM message WHERE session_id = ? AND time_created >= ?",
                    (SESSION, raw.execute("SELECT time_created FROM message WHERE id = ?", (prompts[2],)).fetchone()[0]))
        raw.execute("UPDATE session SET revert = NULL, time_updated = time_updated + 1 WHERE id = ?", (SESSION,))
    written()
    for _ in range(2):
        prompts.append(db.prompt(next(texts)))
        db.reply("did it", prompts[-1], 5000, 4000, 7)
        written()
    whole, _ = _read_all(store)
    assert window == whole.session.items and _shown(live) == _shown(whole)
    taken = 0
    for state, before in saved:
        later = store.reader(SESSION)
        later.holds_window = False
        stamp = store.stamp(SESSION)
        assert stamp is not None
        taken += later.resume(state, stamp)
        mirrored = list(before)
        while True:
            mirror(mirrored, later.read())
            if later.caught_up:
                break
        assert mirrored == whole.session.items and _shown(later) == _shown(whole), state["cursor"]
    assert taken == len(saved)  # (those from before the cleanup read the session again from its start)


@pytest.mark.parametrize("seed", range(60))
def test_a_reader_trimmed_and_taken_up_at_random_follows_undos_as_one_holding_the_window(
        tmp_path: Path, seed: int) -> None:
    """Turns, undos, undos undone and undos OpenCode cleaned up at its next prompt, at random, read
    (or not) between them, the reader trimmed to 1, 2 or 64 messages and taken up from its saved
    state at random: the window its steps leave is the one a reader holding it reads at the end.
    (Before: a new turn read with the cleanup of an undo it had seen was dropped with the undo's
    messages, and an undo cleaned up unseen left them in the window.)"""
    rng = random.Random(seed)
    db = Database(tmp_path / "data")
    store = OpenCodeSessions(db.path.parent)

    def new_reader() -> opencode.OpenCodeReader:
        reader = store.reader(SESSION)
        reader.holds_window = False
        return reader

    def read_all(reader: opencode.OpenCodeReader) -> None:
        mirror(window, reader.read())
        while not reader.caught_up:
            mirror(window, reader.read())

    reader, window = new_reader(), []
    prompts: list[str] = []
    undone: str | None = None
    for step in range(rng.randint(5, 25)):
        roll = rng.random()
        if roll < 0.45:
            if undone is not None:  # OpenCode's next prompt removes what the undo took out
                with db.connect() as raw:
                    at = raw.execute("SELECT time_created FROM message WHERE id = ?", (undone,)).fetchone()[0]
                    raw.execute("DELETE FROM message WHERE session_id = ? AND time_created >= ?", (SESSION, at))
                    raw.execute("UPDATE session SET revert = NULL WHERE id = ?", (SESSION,))
                prompts, undone = prompts[:prompts.index(undone)], None
            prompts.append(db.prompt(f"p{step}"))
            db.reply(f"r{step}", prompts[-1], 4000 + step, 3000, 5 + step)
        elif roll < 0.65 and prompts:
            undone = rng.choice(prompts)
            db.set_session("revert", json.dumps({"messageID": undone}))
        elif roll < 0.8 and undone is not None:
            db.set_session("revert", None)
            undone = None
        if rng.random() < 0.7:
            read_all(reader)
            reader.trim(rng.choice([1, 2, 64]))
            if rng.random() < 0.5:
                stamp = store.stamp(SESSION)
                assert stamp is not None
                state = json.loads(json.dumps({**(reader.state() or {}), "stamp": list(stamp.key())}))
                reader = new_reader()
                assert reader.resume(state, stamp)
    read_all(reader)
    held, _ = _read_all(store)
    assert window == held.session.items and reader.session.window == len(window)
    assert _shown(reader) == _shown(held)


def test_hostile_databases_are_never_opened_through_links_fifos_or_devices(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    os.mkfifo(data / "fifo")
    (data / "opencode.db").symlink_to(data / "fifo")
    store = OpenCodeSessions(data)
    done: list[object] = []
    thread = threading.Thread(target=lambda: done.append((store.keys(), store.stamp(SESSION))), daemon=True)
    thread.start()
    thread.join(30)  # a FIFO opened would block forever: only a hang gets near this
    assert done == [([], None)]
    (data / "opencode.db").unlink()
    (data / "opencode.db").symlink_to("/dev/zero")
    assert store.keys() == [] and opencode.connect(data / "opencode.db") is None
    # A real database whose WAL is a FIFO: not opened either (SQLite would open the WAL).
    (data / "opencode.db").unlink()
    db = Database(tmp_path / "real")
    os.replace(db.path, data / "opencode.db")
    assert OpenCodeSessions(data).keys() == [SESSION]
    # read while no OpenCode has it open: nothing created in OpenCode's folder (no -wal, no -shm)
    assert sorted(p.name for p in data.iterdir()) == ["fifo", "opencode.db"]
    os.mkfifo(data / "opencode.db-wal")
    assert OpenCodeSessions(data).keys() == [] and opencode.connect(data / "opencode.db") is None
    # Not a database at all, or an empty file: no sessions, no exception.
    os.unlink(data / "opencode.db-wal")
    (data / "opencode.db").write_bytes(b"not sqlite\n" * 100)
    assert OpenCodeSessions(data).keys() == []
    (data / "opencode.db").write_bytes(b"")
    assert OpenCodeSessions(data).keys() == []


def test_a_huge_row_bad_json_and_a_replaced_database_lose_nothing_else(tmp_path: Path) -> None:
    db = Database(tmp_path / "data")
    store = OpenCodeSessions(db.path.parent)
    reader, _ = _read_all(store)
    prompt = db.prompt("big")
    with db.connect() as raw:  # a part larger than a row ctxd reads, and one torn JSON
        raw.execute("INSERT INTO part (id, message_id, session_id, time_created, time_updated, data) VALUES "
                    "('prt_zzzz1', ?, ?, 1, 1, ?)", (prompt, SESSION, json.dumps({"type": "text", "text": "x" * (9 << 20)})))
        raw.execute("INSERT INTO part (id, message_id, session_id, time_created, time_updated, data) VALUES "
                    "('prt_zzzz2', ?, ?, 1, 1, ?)", (prompt, SESSION, '{"type": "text", "text": "tor'))
    db.reply("still here", prompt, 4000, 3000, 5)
    change = reader.read()
    assert [i["content"][0]["text"] for i in change.appended] == ["big", "still here"]
    assert reader.session.bad_lines == 2 and reader.bytes_read < 1 << 20
    # A read takes about its budget of bytes, then leaves the rest for the next read.
    budgeted = store.reader(SESSION)
    first = budgeted.read(budget=2000)
    assert not budgeted.caught_up and first.from_start
    while not budgeted.caught_up:
        budgeted.read(budget=2000)
    assert budgeted.session.items == reader.session.items
    # The database replaced by another file (a new inode): its stamp says another ident.
    ident = store.stamp(SESSION).ident  # type: ignore[union-attr]
    copy = tmp_path / "copy.db"
    with sqlite3.connect(db.path) as source, sqlite3.connect(copy) as target:
        source.backup(target)
    source.close()
    target.close()
    os.replace(copy, db.path)
    os.unlink(str(db.path) + "-wal") if os.path.exists(str(db.path) + "-wal") else None
    assert store.stamp(SESSION).ident != ident  # type: ignore[union-attr]
    assert reader.read(ident).empty  # a read for the old file reads nothing of the new


def test_a_database_of_another_schema_is_format_drift_not_an_error(tmp_path: Path) -> None:
    """A newer OpenCode whose migrations renamed a column: the session shows as unread, nothing raises."""
    db = Database(tmp_path / "data")
    store = OpenCodeSessions(db.path.parent)
    with db.connect() as raw:
        raw.execute("ALTER TABLE session RENAME COLUMN revert TO revert_state")
    reader = store.reader(SESSION)
    assert reader.read().empty and reader.caught_up
    assert reader.session.unknown == {"database": 1}


def test_a_database_opencode_is_still_making_is_not_warned_of(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """At OpenCode's first start ctxd may read the database between OpenCode opening it and its
    migrations making the tables: no warning that its sessions are not followed (they are, once the
    tables are there); a table still missing after MIGRATION_SECONDS is warned of, once."""
    data = tmp_path / "data"
    data.mkdir()
    sqlite3.connect(data / "opencode.db").execute("PRAGMA journal_mode = WAL").fetchall()  # no tables yet
    store = OpenCodeSessions(data)
    with caplog.at_level("WARNING", logger="ctxd.agents.opencode"):
        assert store.keys() == []
        Database(data)  # the migrations ran: OpenCode's tables and its session
        assert store.keys() == [SESSION]
        assert not caplog.records
        later = tmp_path / "later"
        later.mkdir()
        sqlite3.connect(later / "opencode.db").execute("PRAGMA journal_mode = WAL").fetchall()
        monkeypatch.setattr(opencode, "MIGRATION_SECONDS", 0.0)
        other = OpenCodeSessions(later)
        assert other.keys() == [] and other.keys() == []
    assert [r.getMessage() for r in caplog.records if "no such table" in r.getMessage()] == [
        f"{later / 'opencode.db'}: not a database of OpenCode {opencode.VERSION} ctxd can read (no such table: "
        "session); its sessions are not followed"]


def test_the_window_and_compaction_point_are_opencodes_from_its_configuration(tmp_path: Path) -> None:
    config = tmp_path / "opencode.json"
    config.write_text("""{
      // a comment, as OpenCode allows
      "provider": {"fake": {"models": {
        "small": {"limit": {"context": 20000, "output": 4000}},
        "big": {"limit": {"context": 400000, "output": 128000}},
        "capped": {"limit": {"context": 400000, "input": 272000, "output": 128000}},
      }}},
    }""")
    read = configured([config], {})
    small = compact_limits("small", read)
    assert (small.window, small.limit) == (20000, 16000)  # context - min(output, 32,000): seen compacting at 17,025
    assert "limit.context of small" in small.window_source
    assert compact_limits("big", read).limit == 400000 - 32000
    assert compact_limits("capped", read).limit == 272000 - 20000  # input - min(20,000, max output)
    assert compact_limits("capped", configured([config], {"OPENCODE_DISABLE_AUTOCOMPACT": "1"})).limit == 400000
    unknown = compact_limits("no-such-model", AgentConfig())
    assert (unknown.window, unknown.limit) == (128000, 96000) and "inferred" in unknown.window_source
    reserved = tmp_path / "reserved.json"
    reserved.write_text(json.dumps({"compaction": {"reserved": 10000},
                                    "provider": {"p": {"models": {"m": {"limit": {"context": 100, "input": 50000}}}}}}))
    assert compact_limits("p/m", configured([reserved], {})).limit == 40000


def test_the_plugin_payloads_map_to_a_turn_a_tool_checkpoint_and_the_compaction() -> None:
    agent = agents.get("opencode")
    base = {"sessionID": SESSION, "directory": "/home/user/app"}
    turn = agent.hook_input("chat.message", {**base, "prompt": "Make it blue"})
    assert turn is not None and (turn.action, turn.session_id, turn.cwd, turn.prompt) == (
        "turn", SESSION, "/home/user/app", "Make it blue")
    edit = {"filePath": "/home/user/app/hello.txt", "oldString": "hello", "newString": "hello, world"}
    tool = agent.hook_input("tool.execute.before", {**base, "tool": "edit", "callID": "call_3", "args": edit})
    assert tool is not None and (tool.action, tool.tool_name, tool.tool_id, tool.tool_input) == (
        "tool", "edit", "call_3", edit)
    assert agent.changes_files("edit", edit) and agent.changes_files("bash", {}) and not agent.changes_files("read", {})
    assert agent.tool_paths("edit", edit) == ["/home/user/app/hello.txt"]
    assert agent.shell_command("bash", {"command": "sed -i s/a/b/ x"}) == "sed -i s/a/b/ x"
    assert agent.shell_command("edit", edit) is None
    patch = "*** Begin Patch\n*** Update File: a.py\n@@\n-x\n+y\n*** End Patch"
    assert agent.tool_paths("apply_patch", {"patchText": patch}) == ["a.py"]
    compacted = agent.hook_input("session.compacted", base)
    assert compacted is not None and compacted.action == "compacted"
    assert agent.hook_input("session.idle", base).action is None  # type: ignore[union-attr]


# --- followed by the real daemon ----------------------------------------------------------------------

FAKE_CONFIG = {"provider": {"fake": {"npm": "@ai-sdk/openai-compatible", "models": {
    "qwen3-coder-plus": {"limit": {"context": 20000, "output": 4000},
                         "cost": {"input": 1.0, "output": 5.0, "cache_read": 0.1, "cache_write": 1.25}}}}},
    "model": "fake/qwen3-coder-plus"}
# The fake provider's prices (OpenCode's config above) are not ctxd's table's (DashScope's, without a
# cached rate for qwen3-coder-plus): the user's config gives ctxd the same prices as OpenCode.
PRICES_TOML = '[prices."qwen3-coder-plus"]\ninput = 1.0\noutput = 5.0\ncachedInput = 0.1\ncacheWrite = 1.25\n'


def test_ctxd_reading_opencodes_database_does_not_wake_its_own_watcher(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite opens the `-wal` for writing even on a read-only connection: closing it raises
    inotify's "closed after a write", which woke the watcher, which read again: a loop that took
    a core for as long as OpenCode's `-wal` was there (all the time OpenCode runs), and held
    SQLite's locks nearly all the time, so that an OpenCode starting then (its `journal_mode =
    WAL` runs before it sets a busy timeout) often exited with "database is locked"."""
    db = Database(tmp_path / "data")
    agent = sqlite3.connect(db.path, isolation_level=None)  # an OpenCode running, idle, its -wal written
    agent.execute("UPDATE session SET time_updated = 1 WHERE id = ?", (SESSION,))
    reads: list[Path] = []
    real = opencode.connect
    monkeypatch.setattr(opencode, "connect", lambda path: reads.append(path) or real(path))
    from ctxd.sessions.discovery import Source
    from ctxd.sessions.follower import Follower

    updates: list[Any] = []
    follower = Follower(updates.append, [Source("opencode", db.path.parent, True, OpenCodeSessions(db.path.parent))],
                        poll=False)
    follower.set_folders([Path(FIXTURE_DIRECTORY)])
    follower.start()
    try:
        assert follower.wait_idle(30)
        time.sleep(0.5)  # the events of the reads above, delivered
        assert follower.wait_idle(30)
        reads.clear()
        time.sleep(2.0)  # nothing written meanwhile: nothing to read
        assert reads == []
        db.prompt("still seen")  # and a write is read at once
        _until(lambda: any(t.text == "still seen" for u in updates for t in u.change.turns), timeout=30)
    finally:
        follower.stop()
        agent.close()


def opencode_world(state_dir: Path, tmp_path: Path) -> tuple[Repo, Database]:
    """A repository an OpenCode session worked in, OpenCode's database and configuration where
    the daemon (tests/rpc.py's environment) looks for them, and the model's price for ctxd."""
    repo = make_repo(tmp_path / "repo")
    db = Database(state_dir / "data" / "opencode", repo.root)
    config = state_dir / "config" / "opencode" / "opencode.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps(FAKE_CONFIG, indent=2) + "\n")
    (state_dir / "config" / "ctxd").mkdir(parents=True)
    (state_dir / "config" / "ctxd" / "config.toml").write_text(PRICES_TOML)
    return repo, db


def _until(what: Callable[[], Any], timeout: float = 60.0) -> Any:
    """`what()` once it is truthy; fails after `timeout` (only a broken daemon gets there)."""
    deadline = time.monotonic() + timeout
    while not (found := what()):
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.05)
    return found


def test_the_daemon_follows_an_opencode_session_read_only_with_its_fill_cost_and_compaction(
        daemon_factory: Callable[..., Client], state_dir: Path, tmp_path: Path) -> None:
    repo, db = opencode_world(state_dir, tmp_path)
    client = daemon_factory([repo.root])
    uri = repo.root.as_uri()
    thread = f"opencode:{SESSION}"

    def listed() -> dict[str, Any] | None:
        return next((t for t in client.request("ctxd/threads", {"workspace": uri})["threads"]
                     if t["thread"] == thread), None)

    info = _until(listed)
    assert (info["source"], info["title"], info["readOnly"], info["model"]) == ("opencode", "Done.", True,
                                                                                "qwen3-coder-plus")
    [source] = [s for s in client.request("ctxd/status", {"workspace": uri})["sources"] if s["agent"] == "opencode"]
    assert (source["version"], source["enabled"], source["sessions"]) == ("1.18.33", True, 1)
    assert source["unread"] == []  # every kind of row this OpenCode wrote is one ctxd reads
    # Listed before every row is mirrored (a thread is listed at its first slice): the fill once
    # the database is read to its end.
    breakdown = _until(lambda: (lambda b: b if b["usage"]["usedTokens"] == 3005 else None)(
        client.request("ctxd/usage", {"workspace": uri, "thread": thread})))
    usage = breakdown["usage"]
    # The TUI's fill, of the window opencode.json declares, compacting at context - min(output, 32,000).
    assert (usage["usedTokens"], usage["contextWindow"], usage["autoCompactLimit"]) == (3005, 20000, 16000)
    # ctxd's cost from the reported usage equals the cost OpenCode recorded itself.
    assert breakdown["cost"]["priced"] is True
    assert breakdown["cost"]["total"] == pytest.approx(store_row(db.path)["cost"], abs=1e-9)
    # Its compaction in history, at OpenCode's time, with what it replaced archived and recallable.
    kept = client.request("ctxd/history", {"workspace": uri, "thread": thread, "includeArchived": True})
    assert [(c["tokensBefore"], c["tokensAfter"]) for c in kept["compactions"]] == [(17025, 2200)]
    archived = [i for i in kept["items"] if i.get("archived")]
    assert [i["call_id"] for i in archived if i["type"] == "function_call"] == ["call_1", "call_2", "call_3"]
    found = client.request("ctxd/recall", {"workspace": uri, "thread": thread, "query": "hello world edit"})
    assert any(hit["archived"] for hit in found["results"]), found
    with pytest.raises(RpcError) as refused:
        client.request("ctxd/record", {"workspace": uri, "thread": thread,
                                       "items": [{"type": "message", "role": "user", "content": "x"}]})
    assert "follows OpenCode's session" in str(refused.value)

    # Live: a new prompt and reply, written as OpenCode writes them, reach the gauge.
    seen = len(client.notifications)
    prompt = db.prompt("Add a line")
    db.reply("Added.", prompt, prompt=6000, cached=5000, output=40)
    # (the prompt may be read before the reply is written: the gauge then adds its estimate first)
    pushed = client.wait_for_notification("ctxd/usageChanged", lambda p: p["thread"] == thread and
                                          p["usedTokens"] == 6040, timeout=60, after=seen)
    assert pushed["source"] == "api"
    # (the gauge may come from the reply's usage before its item is mirrored: wait for the item, bounded)
    said = _until(lambda: (lambda texts: texts if texts[-2:] == ["Add a line", "Added."] else None)(
        [i["content"][0]["text"] for i in client.request("ctxd/history", {"workspace": uri, "thread": thread})["items"]
         if i["type"] == "message"]))
    assert said[-2:] == ["Add a line", "Added."]

    # `ctxd sessions` shows it by its own name.
    done = subprocess.run([sys.executable, "-m", "ctxd", "sessions", "--workspace", str(repo.root), "--format", "json"],
                          env=daemon_env(state_dir), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    [row] = json.loads(done.stdout)
    assert (row["agent"], row["thread"], row["usedTokens"], row["contextWindow"]) == ("opencode", thread, 6040, 20000)
    # `ctxd usage` shows the thread's breakdown, OpenCode's own overhead named as OpenCode's.
    shown = subprocess.run([sys.executable, "-m", "ctxd", "usage", "--workspace", str(repo.root), "--thread", thread,
                            "--format", "json"], env=daemon_env(state_dir), capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    breakdown = json.loads(shown.stdout)
    assert (breakdown["usage"]["usedTokens"], breakdown["usage"]["contextWindow"]) == (6040, 20000)
    assert "OpenCode's built-in tools and instructions (inferred)" in shown.stdout


def test_ctxd_sessions_takes_opencodes_readers_up_where_its_last_run_left_them(state_dir: Path, tmp_path: Path) -> None:
    """`ctxd sessions` read every OpenCode session whole at each run (5.7 s for 900 sessions of a
    heavy history): it now keeps each reader's state beside the summaries and takes it up, and
    shows what a run with no state shows, through new turns, an undo and one OpenCode cleaned up."""
    repo, db = opencode_world(state_dir, tmp_path)

    def listed(state: Path) -> list[dict[str, Any]]:
        done = subprocess.run([sys.executable, "-m", "ctxd", "sessions", "--workspace", str(repo.root), "--format", "json"],
                              env={**daemon_env(state_dir), "XDG_STATE_HOME": str(state)}, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        rows: list[dict[str, Any]] = json.loads(done.stdout)
        return rows

    kept = tmp_path / "kept-state"
    fresh = iter(tmp_path / f"fresh-{n}" for n in range(10))
    first = listed(kept)
    assert first == listed(next(fresh)) and first[0]["turns"] == 2
    summaries = sqlite3.connect(kept / "ctxd" / "sessions" / "summaries.sqlite3")
    [(path, state)] = summaries.execute("SELECT path, state FROM file_summaries WHERE agent = 'opencode'").fetchall()
    summaries.close()
    assert path == f"{db.path}#{SESSION}" and json.loads(state)["cursor"]  # where its reader stood
    assert listed(kept) == first  # taken up: nothing new
    prompt = db.prompt("Add a line")
    db.reply("Added.", prompt, 6000, 5000, 40)
    grown = listed(kept)
    assert grown == listed(next(fresh)) and grown[0]["turns"] == 3 and grown[0]["usedTokens"] == 6040
    db.set_session("revert", json.dumps({"messageID": prompt}))  # an undo
    undone = listed(kept)
    assert undone == listed(next(fresh))
    with db.connect() as raw:  # OpenCode's cleanup: the messages go, the state's last one with them
        raw.execute("DELETE FROM message WHERE session_id = ? AND time_created >= ?",
                    (SESSION, raw.execute("SELECT time_created FROM message WHERE id = ?", (prompt,)).fetchone()[0]))
        raw.execute("UPDATE session SET revert = NULL, time_updated = time_updated + 1 WHERE id = ?", (SESSION,))
    assert listed(kept) == listed(next(fresh))


def test_ctxd_sessions_lists_a_session_of_more_messages_than_one_read_takes_whole(state_dir: Path,
                                                                                    tmp_path: Path) -> None:
    """One read takes at most MESSAGES_PER_READ (500) messages and leaves the rest for later: the
    daemon reads it next, but `ctxd sessions` showed the session as its 500th message left it, at
    every run (OpenCode writes a message per model step: a long session passes 500 soon)."""
    repo, db = opencode_world(state_dir, tmp_path)
    with db.connect() as raw:  # 300 more turns, in one write
        for n in range(300):
            parent = ""
            for role in ("user", "assistant"):
                db.clock += 1000
                mid = db._id("msg")
                info = user(db.clock) if role == "user" else assistant(parent, db.clock, 4000 + n, 3000, 5 + n, 0.001)
                parent = mid
                raw.execute("INSERT INTO message (id, session_id, time_created, time_updated, data) VALUES (?, ?, ?, ?, ?)",
                            (mid, SESSION, db.clock, db.clock, json.dumps(info)))
                db.part(mid, {"type": "text", "text": f"{role} {n}"}, db=raw)
        raw.execute("UPDATE session SET time_updated = ? WHERE id = ?", (db.clock, SESSION))
    assert opencode.MESSAGES_PER_READ < 600
    whole, _ = _read_all(OpenCodeSessions(db.path.parent))
    assert whole.session.turn_total == 302
    kept = tmp_path / "kept-state"
    for _ in range(2):  # the first run, then one taking its readers up
        done = subprocess.run([sys.executable, "-m", "ctxd", "sessions", "--workspace", str(repo.root), "--format", "json"],
                              env={**daemon_env(state_dir), "XDG_STATE_HOME": str(kept)}, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        [row] = json.loads(done.stdout)
        assert (row["turns"], row["usedTokens"]) == (302, whole.session.baseline)


# --- hooks: ctxd's plugin, and what `ctxd hook opencode <event>` does -----------------------------------

USER_CONFIG = ('{\n\t"$schema": "https://opencode.ai/config.json",\n\t"model": "fake/qwen3-coder-plus",\n'
               '\t"mcp": {\n\t\t"docs": {"type": "local", "command": ["docs-mcp"]}\n\t}\n}')  # tabs, no final newline


def test_a_sessions_reader_is_let_go_when_dormant_and_taken_up_where_it_stood(
        daemon_factory: Callable[..., Client], state_dir: Path, tmp_path: Path) -> None:
    """A dormant OpenCode session's reader is let go once the store holds where it stood, and
    taken up from there, live and across restarts: what follows (an undo, new turns) is mirrored
    once, and the session is not read again (each owner read every session whole, every window
    held in memory)."""
    repo, db = opencode_world(state_dir, tmp_path)
    env = {"CTXD_DORMANT_SECONDS": "1"}
    client = daemon_factory([repo.root], env=env)
    uri = repo.root.as_uri()
    thread = f"opencode:{SESSION}"

    def history() -> dict[str, Any]:
        return client.request("ctxd/history", {"workspace": uri, "thread": thread, "includeArchived": True})

    def mirrored_as_read() -> bool:
        """The thread's window is the one a reader holding it reads from the database as it is."""
        return mirrored_as(client, uri, thread, _read_all(OpenCodeSessions(db.path.parent))[0].session.items)

    log = state_dir / "ctxd" / "owner" / "owner.log"
    _until(lambda: log.is_file() and "let go of 1 dormant session readers" in log.read_text(errors="replace"))
    first = db.prompt("Add a line")
    db.reply("Added.", first, 4000, 3000, 7)
    _until(mirrored_as_read)
    db.set_session("revert", json.dumps({"messageID": first}))  # an undo
    _until(mirrored_as_read)
    client.shutdown()
    db.set_session("revert", None)  # undone while no ctxd ran: the turn is back
    second = db.prompt("And another")
    db.reply("Another.", second, 4200, 3000, 8)
    client = daemon_factory([repo.root], env=env)
    _until(mirrored_as_read)
    before = history()
    calls = [i["call_id"] for i in before["items"] if i["type"] == "function_call" and not i.get("archived")]
    assert len(calls) == len(set(calls))  # nothing mirrored twice
    texts = [i["content"][0]["text"] for i in before["items"] if i["type"] == "message" and not i.get("archived")]
    assert texts[-4:] == ["Add a line", "Added.", "And another", "Another."]
    client.shutdown()
    client = daemon_factory([repo.root], env=env)  # and again, the session as it was: taken up, nothing read
    _until(mirrored_as_read)
    assert history() == before


def test_install_writes_the_plugin_and_mcp_server_and_uninstall_gives_back_every_byte(tmp_path: Path) -> None:
    project = hooks_repo(tmp_path / "proj")
    folder = tmp_path / "home" / ".config" / "opencode"
    folder.mkdir(parents=True)
    config = folder / "opencode.json"
    config.write_text(USER_CONFIG)
    plugin = folder / "plugins" / "ctxd.js"

    dry = ctxd(tmp_path, "hooks", "install", "--agent", "opencode", "--dry-run", cwd=project)
    assert dry.returncode == 0, dry.stderr
    assert f"+++ {plugin}" in dry.stdout.decode() and '"ctxd": {' in dry.stdout.decode()
    assert not plugin.exists() and config.read_text() == USER_CONFIG  # a dry run writes nothing

    done = ctxd(tmp_path, "hooks", "install", "--agent", "opencode", cwd=project)
    assert done.returncode == 0, done.stderr
    text = plugin.read_text()
    assert text.startswith(opencode.PLUGIN_MARK) and json.dumps(ctxd_command()[1]) in text
    installed = json.loads(config.read_text())
    assert installed["mcp"]["docs"] == {"type": "local", "command": ["docs-mcp"]}
    assert installed["mcp"]["ctxd"] == {"type": "local", "command": [*ctxd_command(), "mcp"], "enabled": True}
    assert config.read_text().startswith('{\n\t"$schema"') and not config.read_text().endswith("\n")  # its own format
    status = ctxd(tmp_path, "hooks", "status", cwd=project).stdout.decode()
    assert "opencode user: hooks chat.message, tool.execute.before, session.compacted" in status
    assert "MCP server yes" in status.split("opencode user:")[1].splitlines()[0]
    again = ctxd(tmp_path, "hooks", "install", "--agent", "opencode", cwd=project)
    assert again.returncode == 0 and json.loads(config.read_text()) == installed  # once, not twice

    done = ctxd(tmp_path, "hooks", "uninstall", "--agent", "opencode", cwd=project)
    assert done.returncode == 0, done.stderr
    assert config.read_text() == USER_CONFIG and not plugin.exists()
    assert "opencode user: hooks none" in ctxd(tmp_path, "hooks", "status", cwd=project).stdout.decode()


def test_a_plugin_of_the_users_named_ctxd_js_is_never_overwritten_or_removed(tmp_path: Path) -> None:
    project = hooks_repo(tmp_path / "proj")
    plugin = tmp_path / "home" / ".config" / "opencode" / "plugins" / "ctxd.js"
    plugin.parent.mkdir(parents=True)
    plugin.write_text("export const Mine = async () => ({})\n")
    done = ctxd(tmp_path, "hooks", "install", "--agent", "opencode", cwd=project)
    assert done.returncode == 1 and "a plugin of your own" in done.stderr.decode()
    assert not (plugin.parent.parent / "opencode.json").exists()  # nothing written: all or nothing
    assert ctxd(tmp_path, "hooks", "uninstall", "--agent", "opencode", cwd=project).returncode == 0
    assert plugin.read_text() == "export const Mine = async () => ({})\n"


def test_the_plugins_events_take_a_turn_and_a_tool_checkpoint_and_note_the_compaction(
        tmp_path: Path, daemon_factory: Callable[..., Client], state_dir: Path) -> None:
    project = hooks_repo(tmp_path / "proj")
    env = env_for(tmp_path)
    env["XDG_STATE_HOME"] = str(state_dir)  # the daemon's state dir: the hooks hand it their checkpoints
    client = daemon_factory([project])
    uri = project.as_uri()
    base = {"sessionID": SESSION, "directory": str(project)}

    def hook(event: str, payload: dict[str, Any]) -> None:
        done = ctxd(tmp_path, "hook", "opencode", event, cwd=project, env=env, stdin=json.dumps(payload).encode())
        assert done.returncode == 0 and done.stdout == b""

    hook("chat.message", {**base, "prompt": "Make it blue"})
    (project / "app.py").write_text("print('v2')\n")
    hook("tool.execute.before", {**base, "tool": "edit", "callID": "call_3",
                                 "args": {"filePath": str(project / "app.py"), "oldString": "v2", "newString": "v3"}})
    hook("tool.execute.before", {**base, "tool": "read", "callID": "call_4", "args": {"filePath": "app.py"}})
    hook("session.compacted", base)

    def snapshots() -> dict[str, dict[str, Any]] | None:
        found = client.request("ctxd/ghost/list", {"workspace": uri})["snapshots"]
        mine = {s["message"]: s for s in found if s.get("thread") == f"opencode:{SESSION}"}
        return mine if len(mine) == 2 else None

    by_message = _until(snapshots)
    turn, tool = by_message["Make it blue"], by_message["before edit app.py"]
    assert turn["trigger"] == "turn" and turn["turn"] == {"index": 1, "text": "Make it blue"}
    assert tool["trigger"] == "tool" and tool["tool"] == {"name": "edit", "callId": "call_3", "paths": ["app.py"]}
    restored = client.request("ctxd/ghost/restore", {"workspace": uri, "thread": f"opencode:{SESSION}",
                                                     "id": turn["id"]})
    assert restored and (project / "app.py").read_text() == "print('v1')\n"
    from ctxd import marks

    assert marks.read(state_dir / "ctxd", f"opencode:{SESSION}").get("compactedAt")


def _inotify_watches() -> int:
    """How many inotify watches this process holds (Linux: its inotify descriptors' `wd` lines)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify":
                count += sum(line.startswith("inotify wd:") for line in Path(f"/proc/self/fdinfo/{fd}").read_text().splitlines())
        except OSError:
            continue
    return count


@pytest.mark.skipif(not Path("/proc/self/fdinfo").is_dir(), reason="counts inotify watches through Linux's /proc")
def test_opencodes_own_folder_tree_beside_its_database_uses_no_watches(tmp_path: Path) -> None:
    """OpenCode keeps git stores of every project beside opencode.db (`snapshot/<project>/objects/..`):
    watching that tree would use up the user's inotify watches, and the follower would poll instead."""
    from ctxd.sessions.discovery import Source
    from ctxd.sessions.follower import Follower

    db = Database(tmp_path / "data")
    for project in range(3):
        for sub in range(100):
            (db.path.parent / "snapshot" / f"p{project}" / "objects" / f"{sub:02x}").mkdir(parents=True)
    updates: list[Any] = []
    follower = Follower(updates.append, [Source("opencode", db.path.parent, True, OpenCodeSessions(db.path.parent))],
                        poll=False)
    before = _inotify_watches()
    follower.start()
    try:
        follower.set_folders([Path(FIXTURE_DIRECTORY)])
        assert follower.wait_idle(30)
        assert follower.status()[0].watching == "inotify"
        assert _inotify_watches() - before < 10  # the data folder, not its 300 folders below
        db.prompt("seen live")  # a write to the database (its WAL) is still seen at once
        _until(lambda: any(t.text == "seen live" for u in updates for t in u.change.turns), timeout=30)
    finally:
        follower.stop()


PLUGIN_HARNESS = r"""
// OpenCode's side of the plugin contract, as 1.18.33 calls it (docs/agents-research.md), with
// Bun.spawn recorded: a command that answers, one that never does, one missing (spawn throws).
const calls = []
let mode = "answer"
globalThis.Bun = { spawn(argv, options) {
  if (mode === "missing") throw new Error("ENOENT")
  calls.push({ argv, stdin: options.stdin })
  return { exited: mode === "hang" ? new Promise(() => {}) : Promise.resolve(0), kill() { calls.push({ killed: true }) } }
} }
const plugin = await import(process.argv[2])
const hooks = await plugin.Ctxd({ directory: "/home/user/app", worktree: "/" })
const session = "ses_dcba9c604ffeKhk0JORT9UoCkC"
await hooks["chat.message"]({ sessionID: session }, { message: { id: "msg_1" }, parts: [
  { type: "text", text: "Make it blue" }, { type: "text", text: "Continue", synthetic: true }] })
await hooks["tool.execute.before"]({ tool: "read", sessionID: session, callID: "c1" }, { args: { filePath: "a" } })
await hooks["tool.execute.before"]({ tool: "edit", sessionID: session, callID: "c2" }, { args: { filePath: "a" } })
await hooks.event({ event: { type: "session.idle", properties: { sessionID: session } } })
await hooks.event({ event: { type: "session.compacted", properties: { sessionID: session } } })
mode = "hang"

await hooks["tool.execute.before"]({ tool: "bash", sessionID: session, callID: "c3" }, { args: { command: "ls" } })

mode = "missing"
await hooks["tool.execute.before"]({ tool: "write", sessionID: session, callID: "c4" }, { args: {} })
const shown = []
for (const call of calls) shown.push(call.killed ? { killed: true } : { argv: call.argv, payload: JSON.parse(await call.stdin.text()) })
console.log(JSON.stringify({ calls: shown }))
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="node (to load the plugin as OpenCode's Bun does) is not installed")
def test_the_plugin_runs_ctxd_for_prompts_file_changes_and_compactions_and_never_throws(tmp_path: Path) -> None:
    plugin = tmp_path / "ctxd.mjs"
    plugin.write_text(opencode.plugin_text(["/usr/bin/ctxd"]))
    harness = tmp_path / "harness.mjs"
    harness.write_text(PLUGIN_HARNESS)
    done = subprocess.run(["node", str(harness), plugin.as_uri()], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    base = {"sessionID": SESSION, "directory": "/home/user/app"}
    assert seen["calls"] == [
        {"argv": ["/usr/bin/ctxd", "hook", "opencode", "chat.message"], "payload": {**base, "prompt": "Make it blue"}},
        {"argv": ["/usr/bin/ctxd", "hook", "opencode", "tool.execute.before"],
         "payload": {**base, "tool": "edit", "callID": "c2", "args": {"filePath": "a"}}},  # not the read
        {"argv": ["/usr/bin/ctxd", "hook", "opencode", "session.compacted"], "payload": base},
        {"argv": ["/usr/bin/ctxd", "hook", "opencode", "tool.execute.before"],
         "payload": {**base, "tool": "bash", "callID": "c3", "args": {"command": "ls"}}},
        {"killed": True}]  # the command that never answered, killed after its 2 s; the missing one: nothing, no throw


def test_opencodes_jsonc_is_read_with_strings_untouched_and_cut_without_losing_a_comment() -> None:
    """Comments and trailing commas, as OpenCode reads its configuration, outside strings only (a
    string `"x, }"` lost its comma); `without_member` keeps every other byte."""
    text = ('{\n  // the theme\n  "theme": "x, }", /* kept */\n  "mcp": {\n    "docs": {"command": ["//no"]}, // docs\n'
            '    "ctxd": {"type": "local"},\n  },\n}\n')
    assert opencode.jsonc(text) == {"theme": "x, }", "mcp": {"docs": {"command": ["//no"]}, "ctxd": {"type": "local"}}}
    cut = opencode.without_member(text, ("mcp", "ctxd"))
    assert cut == text.replace('    "ctxd": {"type": "local"},\n', "")
    assert opencode.jsonc(cut)["mcp"] == {"docs": {"command": ["//no"]}}
    assert opencode.without_member(text, ("mcp", "nothing")) is None


@pytest.mark.parametrize("text", [
    '{\n  "theme": "x", // last\n}\n',  # a trailing comma, then a comment
    '{\n  "a": 1 // c, d\n}\n',  # a comment holding a comma after the last member
    '{"theme": "x, }" /* c */}',  # one line; a string that looks like the end
    '{\n  // nothing yet\n}\n',
    "{}",
    '{\n  "mcp": {"ctxd": {"type": "local"}}, /* old */\n}',  # replaced in place
])
def test_a_member_is_added_to_opencodes_jsonc_with_every_comment_kept(text: str) -> None:
    added = opencode.with_member(text, (), "mcp", {"ctxd": {"type": "local", "enabled": True}})
    assert added is not None
    assert opencode.jsonc(added) == {**opencode.jsonc(text), "mcp": {"ctxd": {"type": "local", "enabled": True}}}
    for comment in ("// last", "// c, d", "/* c */", "// nothing yet", "/* old */"):
        assert (comment in added) == (comment in text)
    assert opencode.with_member(text, ("nothing",), "a", 1) is None
