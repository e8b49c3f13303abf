"""`ctxd/threads` on an idle owner (issue #38): the whole listing's order is kept until the next
commit to the store (by this connection or another process's) or until an entry's state expires,
so that an idle owner lists thousands of threads without SQL; a kept listing is never shown stale."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import assistant, user


@pytest.fixture
def ws(tmp_path: Path) -> Iterator[Any]:
    workspace = _workspace(tmp_path)
    try:
        yield workspace
    finally:
        workspace.close()


def _workspace(tmp_path: Path) -> Any:
    from ctxd.workspace import Workspace

    root = tmp_path / "ws"
    root.mkdir(exist_ok=True)
    return Workspace(root.as_uri(), root, tmp_path / "state", {"model": "claude-sonnet-4-5"})


def listed(ws: Any, only: list[str] | None = None) -> list[dict[str, Any]]:
    """The entries as a client decodes them."""
    return [json.loads(text) for text in ws.threads(only)["threads"].texts]


def counted(ws: Any, monkeypatch: pytest.MonkeyPatch, named: list[list[str] | None] | None = None) -> list[int]:
    """Counts the store's listings (the SQL a listing runs over the threads' rows); `named`
    collects which threads each one read (None: every thread)."""
    calls = [0]
    original: Callable[[list[str] | None], Any] = ws.store.listing

    def listing(threads: list[str] | None = None) -> Any:
        calls[0] += 1
        if named is not None:
            named.append(threads)
        return original(threads)

    monkeypatch.setattr(ws.store, "listing", listing)
    return calls


def test_an_idle_listing_runs_no_sql_and_answers_the_same(ws: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    ws.record("a", [user("first"), assistant("one")])
    ws.record("b", [user("second")])
    calls = counted(ws, monkeypatch)
    first = listed(ws)
    assert [(t["thread"], t["itemCount"]) for t in first] == [("b", 1), ("a", 2)]
    assert calls == [1]
    for _ in range(3):
        assert listed(ws) == first
    assert listed(ws, ["a", "nothing"]) == [first[1]]
    assert calls == [1], "an idle listing read every thread's row again"


def test_a_commit_of_this_connection_is_listed_at_once(ws: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    ws.record("a", [user("first")])
    ws.record("b", [user("second")])
    assert [t["thread"] for t in listed(ws)] == ["b", "a"]
    calls = counted(ws, monkeypatch)
    ws.record("a", [assistant("again"), user("and again")])
    after = listed(ws)
    assert [(t["thread"], t["itemCount"]) for t in after] == [("a", 3), ("b", 1)]
    assert calls == [1]
    assert listed(ws, ["a"]) == [after[0]]


def test_threads_named_after_a_commit_are_read_alone_and_listed_as_the_whole_listing_has_them(
        ws: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An editor names the threads a `ctxd/threadsChanged` named: after a commit, only their rows
    are read (with 3,000 threads a named listing read every row again, 3.3 ms for each change),
    and they come as the whole listing orders and shows them; a name without a thread is left out."""
    for name in ("a", "b", "c", "d"):
        ws.record(name, [user(f"about {name}")])
    listed(ws)
    named: list[list[str] | None] = []
    counted(ws, monkeypatch, named)
    ws.record("b", [assistant("more"), user("and more")])
    ws.record("d", [assistant("again")])
    only = listed(ws, ["b", "d", "a", "d", "nothing"])
    assert named == [["a", "b", "d", "nothing"]], "a named listing read rows it was not asked for"
    whole = listed(ws)
    assert named[-1] is None
    assert only == [entry for entry in whole if entry["thread"] in ("a", "b", "d")]
    assert [(t["thread"], t["itemCount"]) for t in only] == [("d", 2), ("b", 3), ("a", 1)]
    assert listed(ws, []) == []


def test_another_processs_commit_is_listed(ws: Any, tmp_path: Path) -> None:
    ws.record("a", [user("first")])
    assert [t["thread"] for t in listed(ws)] == ["a"]
    other = _workspace(tmp_path)  # its own connection to the same store, as another process has
    try:
        other.record("c", [user("elsewhere"), assistant("yes")])
    finally:
        other.close()
    assert [(t["thread"], t["itemCount"]) for t in listed(ws)] == [("c", 2), ("a", 1)]


def test_a_warm_cache_is_listed_cold_once_it_expired(ws: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    ws.record("a", [user("first"), assistant("one")])
    ws.report_usage("a", 2_000, {"input": 10, "cachedInput": 1_990, "output": 5})
    [entry] = listed(ws)
    assert entry["cache"]["state"] == "warm"
    assert listed(ws) == [entry]
    later = time.time() + 3_600  # past Anthropic's 5 minutes, nothing committed since
    monkeypatch.setattr(time, "time", lambda: later)
    [entry] = listed(ws)
    assert entry["cache"]["state"] == "cold"


def test_each_entrys_usage_is_its_threads_gauge_with_the_sums_after_its_report_read_at_once(ws: Any) -> None:
    """A listing sums the tokens after every thread's API report in one statement (a restart's
    first listing of 3,000 read them one by one): each entry's usage is still the thread's own
    gauge, with items after its report, items after it archived by a rollback, no item after it,
    and no report at all."""
    ws.record("after", [user("first"), assistant("one")])
    ws.report_usage("after", 900)
    ws.record("after", [user("second question, after the report"), assistant("a longer answer " * 20)])
    ws.record("none", [user("only"), assistant("reported")])
    ws.report_usage("none", 700)
    ws.record("never", [user("no report yet"), assistant("none")])
    ws.record("undone", [user("first"), assistant("one")])
    ws.report_usage("undone", 800)
    ws.record("undone", [user("kept after the report"), assistant("yes")])
    ws.record("undone", [user("rolled back"), assistant("gone " * 50)])
    before_rollback = ws.usage("undone")["usedTokens"]
    ws.rollback("undone", 1)
    entries = {entry["thread"]: entry for entry in listed(ws)}
    assert set(entries) == {"after", "none", "never", "undone"}
    for name, entry in entries.items():
        assert entry["usage"] == ws.usage(name), name
    assert entries["none"]["usage"]["usedTokens"] == 700
    assert entries["after"]["usage"]["usedTokens"] > 900
    assert 800 < entries["undone"]["usage"]["usedTokens"] < before_rollback


def test_the_paths_a_listing_takes_as_followed_are_those_with_a_follow_state(ws: Any) -> None:
    """`Store.followed_paths` judges in SQL what `follow_state` judges in Python (a restart's
    first listing asks for thousands): a state that is a JSON object, of a thread whose own state
    says it follows that very path; damaged or foreign rows are not followed."""
    import sqlite3

    store = ws.store
    odd = '/tmp/sessions/é "quoted" \\ ☃.jsonl'
    cases = {  # path -> (thread, its followed path, the follow state's JSON)
        "/s/good.jsonl": ("t-good", "/s/good.jsonl", '{"offset": 10}'),
        odd: ("t-odd", odd, '{"offset": 1}'),
        "/s/moved.jsonl": ("t-moved", "/s/elsewhere.jsonl", '{"offset": 2}'),
        "/s/damaged.jsonl": ("t-damaged", "/s/damaged.jsonl", '{"offset": '),
        "/s/list.jsonl": ("t-list", "/s/list.jsonl", '[1, 2]'),
    }
    for path, (thread, follows, _) in cases.items():
        store.update_thread(thread, follow=(path, {}), state={"followed": {"path": follows}})
    store.update_thread("t-bad-thread", follow=("/s/bad-thread.jsonl", {}), state={"followed": {"path": "x"}})
    store.update_thread("t-no-dict", follow=("/s/no-dict.jsonl", {}), state={"followed": "/s/no-dict.jsonl"})
    store.close()
    db = sqlite3.connect(ws.db_path)
    with db:
        for path, (_, _, state) in cases.items():
            db.execute("UPDATE followed SET state = ? WHERE path = ?", (state, path))
        db.execute("UPDATE threads SET state = '{\"followed\": ' WHERE thread = 't-bad-thread'")
    db.close()
    paths = [*cases, "/s/bad-thread.jsonl", "/s/no-dict.jsonl", "/s/unknown.jsonl"]
    expected = {path for path in paths if store.follow_state(path) is not None}
    assert expected == {"/s/good.jsonl", odd}
    assert store.followed_paths(paths) == expected
