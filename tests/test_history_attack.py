"""History operations on long threads (found by attacking the ledger from outside): a compaction
of thousands of turns, its undo, and the gauge after them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ctxd.compact import offline
from tests.helpers import assistant, call, output, user
from tests.rpc import Client


def short_turns(count: int) -> list[dict[str, Any]]:
    """`count` short user turns of four items each (a user message, a tool call, its output, an answer)."""
    items: list[dict[str, Any]] = []
    for n in range(count):
        items += [user(f"turn {n}: rename x"), call(f"k{n}"), output(f"k{n}", f"out {n}"), assistant(f"done {n}")]
    return items


def test_an_offline_compaction_counts_each_kept_user_message_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kept user messages are trimmed to their budget by what their JSON costs. That cost was
    summed again over every message left each time the oldest was dropped: quadratic in the turns,
    15 s of the daemon's CPU (the thread locked) for an offline compaction of 10,000 items, minutes
    for a few thousand more. Each message is counted once now (no clock: the counting is counted)."""
    calls = 0
    counted = offline.item_tokens

    def spy(item: dict[str, Any]) -> int:
        nonlocal calls
        calls += 1
        return counted(item)

    monkeypatch.setattr(offline, "item_tokens", spy)
    items = short_turns(2000)
    result = offline.offline_compact(items, target_tokens=1000, user_message_max_tokens=20_000)
    kept = [item for item in result.items if item.get("role") == "user"][:-1]  # the summary last
    assert kept and all(item["content"][0]["text"].startswith("turn ") for item in kept)
    assert sum(map(offline.item_tokens, kept)) <= 20_000  # within the budget, JSON included
    assert calls <= 3 * len(items)


def test_ten_thousand_items_compact_undo_and_roll_back_exactly(daemon_factory: Callable[..., Client],
                                                               workspace: Path) -> None:
    """10,000 items: an offline compaction, its undo, a rollback of every turn and its undo each
    give back exactly the history before them, and the gauge is that of the same history recorded
    afresh."""
    client = daemon_factory([workspace])
    uri = workspace.as_uri()

    def call_(method: str, thread: str = "t", **params: Any) -> Any:
        return client.request(method, {"workspace": uri, "thread": thread, **params})

    call_("ctxd/record", items=short_turns(2500))
    before = call_("ctxd/history")["items"]
    assert len(before) == 10_000
    compacted = call_("ctxd/compact", strategy="offline")
    assert compacted["tokensAfter"] < compacted["tokensBefore"]
    call_("ctxd/undo", id=compacted["undoId"])
    assert call_("ctxd/history")["items"] == before
    rolled = call_("ctxd/rollback", turns=10_000)
    assert rolled["removedItems"] == 10_000 and call_("ctxd/history")["items"] == []
    call_("ctxd/undo", id=rolled["undoId"])
    assert call_("ctxd/history")["items"] == before
    call_("ctxd/record", "fresh", items=before)
    assert call_("ctxd/usage")["usage"]["usedTokens"] == call_("ctxd/usage", "fresh")["usage"]["usedTokens"]
