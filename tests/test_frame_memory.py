"""Issue #27: one huge frame must not keep its size in memory once answered.

A loaded thread holds each item once, as the JSON it is stored as; past a bound of JSON held the
thread lets go of that too and reads it from SQLite; a thread of more items than the item bound is
not kept after its request; and the reader does not hold the last request while it waits for the
next one. Memory is measured on the daemon subprocess against its own RSS earlier in the same run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import assistant, call, output, user
from tests.rpc import Client


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    """The process's resident memory (`VmHWM`: its peak) in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0


def small_items(count: int) -> list[dict[str, Any]]:
    return [assistant(f"item {i}: looked at src/module_{i % 97}.py") for i in range(count)]


COUNT = 22_000  # items of 2 KB: a frame of about 47 MB, as in the issue


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc for RSS")
def test_a_big_frame_of_small_items_is_not_kept_once_answered(daemon_factory: Callable[..., Client],
                                                              workspace: Path) -> None:
    client = daemon_factory([workspace])
    uri = workspace.as_uri()
    client.request("ctxd/record", {"workspace": uri, "thread": "warm", "items": small_items(100)})
    client.request("ctxd/usage", {"workspace": uri, "thread": "warm"})
    baseline = rss_kib(client.daemon_pid)
    items = [assistant(f"item {i}: " + "looked at src/module.py and found nothing to change; " * 40)
             for i in range(COUNT)]
    frame_kib = len(json.dumps(items)) // 1024
    result = client.request("ctxd/record", {"workspace": uri, "thread": "big", "items": items}, timeout=300)
    last = items[-1]
    del items
    assert result["itemCount"] == COUNT
    # Before: the parsed frame stayed referenced until the next request, and the thread held every
    # item parsed and as JSON (over three times the frame). Now the thread, over the bound of JSON
    # held, leaves its items' JSON in SQLite. The reply is written before the request's objects are
    # freed and the heap trimmed: the RSS is read until it drops, for a while.
    deadline = time.monotonic() + 20
    while (growth := rss_kib(client.daemon_pid) - baseline) > frame_kib and time.monotonic() < deadline:
        time.sleep(0.1)
    assert growth <= frame_kib, f"the daemon kept {growth} KiB after a {frame_kib} KiB frame"
    tail = client.request("ctxd/history", {"workspace": uri, "thread": "big", "offset": COUNT - 1}, timeout=300)
    assert tail["total"] == COUNT and tail["items"] == [last]


PEAK_FRAME_MIB = 20
PEAK_BOUND = 6  # times the frame; ctxd's own bound is 3 (bench/hostile_storms.py frame_storm judges it)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc for RSS")
def test_a_big_frames_peak_stays_within_a_few_times_the_frame(daemon_factory: Callable[..., Client],
                                                              workspace: Path) -> None:
    """Issue #36: the daemon's peak while it takes a 20 MB frame of 200-byte items, not only what it
    keeps after. Before, the body, its decoded text and every item parsed were held at once, then
    the items beside their stored JSON: 8.5 times the frame at its peak (2.1 to 3.1 times now).
    Memory, unlike time, does not depend on the machine's load: a generous bound is safe."""
    client = daemon_factory([workspace])
    uri = workspace.as_uri()
    client.request("ctxd/record", {"workspace": uri, "thread": "warm", "items": small_items(100)})
    client.request("ctxd/usage", {"workspace": uri, "thread": "warm"})
    text = "looked at src/module.py and found nothing to change; " * 4
    count = PEAK_FRAME_MIB * 1024 * 1024 // (len(text) + 70)
    items = [assistant(f"{i}: {text}") for i in range(count)]
    params = {"workspace": uri, "thread": "big", "items": items}
    frame_kib = len(json.dumps(params)) // 1024
    try:
        Path(f"/proc/{client.daemon_pid}/clear_refs").write_text("5")  # the peak from now on
    except OSError:
        pass  # the peak since the start, which was lower than the frame's (the bound is generous)
    baseline = rss_kib(client.daemon_pid)
    result = client.request("ctxd/record", params, timeout=300)
    peak = rss_kib(client.daemon_pid, "VmHWM") - baseline
    last = items[-1]
    del items, params
    assert result["itemCount"] == count
    assert peak <= PEAK_BOUND * frame_kib, f"the daemon's peak grew {peak} KiB for a {frame_kib} KiB frame"
    tail = client.request("ctxd/history", {"workspace": uri, "thread": "big", "offset": count - 1}, timeout=300)
    assert tail["total"] == count and tail["items"] == [last]


def _workspace(tmp_path: Path) -> Any:
    from ctxd.workspace import Workspace
    root = tmp_path / "ws"
    root.mkdir()
    return Workspace(root.as_uri(), root, tmp_path / "state", None)


def test_a_loaded_item_is_held_once_as_its_json(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    try:
        ws.record("t", [user("hello"), assistant("hi")])
        ledger = ws.cache.peek("t")
        assert ledger is not None
        for entry in ledger.entries:
            assert entry.body is not None and json.loads(entry.body) == entry.item
            assert not any(isinstance(getattr(entry, name, None), dict) for name in getattr(entry, "__slots__", ()))
            assert not any(isinstance(value, dict) for value in getattr(entry, "__dict__", {}).values())
    finally:
        ws.close()


def test_a_thread_over_the_item_bound_is_not_kept_after_its_request(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from ctxd.ledger import cache
    monkeypatch.setattr(cache, "MAX_LOADED_ITEMS", 50)
    ws = _workspace(tmp_path)
    try:
        ws.record("small", [user("s")])
        answer = ws.record("big", [user(f"big-{i}") for i in range(80)])
        assert answer["itemCount"] == 80
        assert ws.cache.peek("big") is None, "a thread over the item bound stayed in memory"
        assert ws.usage("big")["usedTokens"] == answer["usage"]["usedTokens"]
        ws.record("big", [user("one more")])
        assert ws.cache.peek("big") is None
        assert [item["content"][0]["text"] for item in ws.history("big", 0, None, False)["items"]] == \
            [f"big-{i}" for i in range(80)] + ["one more"]
    finally:
        ws.close()


def test_past_the_bound_of_json_held_items_are_read_from_the_store(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from ctxd.ledger import cache
    monkeypatch.setattr(cache, "MAX_HELD_CHARS", 2_000)
    ws = _workspace(tmp_path)
    try:
        for i in range(30):
            ws.record("t", [user(f"u{i} " + "x" * 40), call(f"c{i}", "shell"), output(f"c{i}", "ok " * 10)])
        ledger = ws.cache.peek("t")
        assert ledger is not None and ledger.held_chars <= 2_000
        assert any(entry.body is None for entry in ledger.entries), "every item's JSON is still held"
        prompt = ws.prompt("t", ["text"])
        assert [json.loads(text) for text in prompt["items"].texts] == [item for item in
                                                                       ws.history("t", 0, None, False)["items"]]
        assert len(prompt["items"].texts) == 90 and json.loads(prompt["items"].texts[-1]) == output("c29", "ok " * 10)
        # A dangling call (the projection's repair path) reads the stored JSON too.
        ws.record("t", [call("open", "shell")])
        repaired = [json.loads(text) for text in ws.prompt("t", ["text"])["items"].texts]
        assert repaired[-1]["type"] == "function_call_output" and repaired[-2]["call_id"] == "open"
        assert ws.rollback("t", 1)["removedItems"] >= 1
    finally:
        ws.close()
