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


def counted(ws: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the store's listings (the SQL a listing runs over every thread's row)."""
    calls = [0]
    original: Callable[[], Any] = ws.store.listing

    def listing() -> Any:
        calls[0] += 1
        return original()

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
