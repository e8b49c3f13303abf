"""A followed session's compactions as the agent made them (issue #36): Codex's zero-input
`token_count` around a compaction is a marker, never the window's fill; and a session ctxd first
sees after the agent compacted it keeps, archived and recallable, what came before each
compaction, dated from the file. Real daemon; session files as the agents write them
(tests/session_fixtures.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests import session_fixtures as fx
from tests.rpc import Client
from tests.test_sessions_e2e import CODEX_THREAD, homes, wait_thread

WINDOW = 258_400  # gpt-5.5's window as Codex 0.171 states it


def _history(client: Client, ws: Path, thread: str) -> dict[str, Any]:
    return client.request("ctxd/history", {"workspace": ws.as_uri(), "thread": thread, "includeArchived": True})


def _wait(check: Callable[[], Any], timeout: float = 15.0) -> Any:
    """Poll until `check` gives something true (only a broken daemon reaches the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.05)


def _running(total: int) -> dict[str, int]:
    return {"input_tokens": total - 500, "cached_input_tokens": 1_000, "output_tokens": 500,
            "reasoning_output_tokens": 0, "total_tokens": total}


def _codex_full(cwd: Path) -> list[dict[str, Any]]:
    """A gpt-5.5 session whose first request carried 12,000 tokens and its latest 240,000 (Codex
    compacts at 244,800)."""
    t = "2026-02-10T09:00:0{}.000Z".format
    return [fx.codex_meta(cwd, ts=t(0)),
            *fx.codex_turn("Refactor the billing module", t(1), model="gpt-5.5", cwd=str(cwd)),
            *fx.codex_tool_round("call_1", "pytest -q", "3 failed", t(2)),
            fx.codex_token_count(12_000, _running(12_000), t(3), window=WINDOW),
            *fx.codex_tool_round("call_2", "cat billing.py", "x = 1\n" * 500, t(4)),
            fx.codex_token_count(240_000, _running(252_000), t(5), window=WINDOW)]


def _codex_compaction(ts: str, after: int) -> list[dict[str, Any]]:
    """Codex 0.171 compacting: a marker, the `compacted` record, a marker with `after` (its figure)."""
    summary = {"type": "message", "role": "user",
               "content": [{"type": "input_text", "text": "Summary: the billing module was refactored."}]}
    return [fx.codex_marker(ts, 0, WINDOW, _running(240_000)),
            *fx.codex_compacted("Summary: the billing module was refactored.", ts, replacement=[summary]),
            fx.codex_marker(ts, after, WINDOW, _running(240_000))]


def test_codex_zero_input_report_after_compacting_is_a_marker_not_the_fill(daemon_factory, workspace: Path,
                                                                           tmp_path: Path) -> None:
    codex_home, _, env = homes(tmp_path)
    rollout = fx.write_jsonl(fx.codex_path(codex_home), _codex_full(workspace))
    client = daemon_factory([workspace], env=env)
    uri = workspace.as_uri()
    wait_thread(client, workspace, CODEX_THREAD, lambda t: t["usage"]["usedTokens"] == 240_000)

    # Issue #36: Codex's marker after the compaction said 940,500 (364% of the window).
    fx.append_jsonl(rollout, _codex_compaction("2026-02-10T09:05:00.000Z", 940_500))
    [compaction] = _wait(lambda: _history(client, workspace, CODEX_THREAD)["compactions"])
    usage = client.request("ctxd/usage", {"workspace": uri, "thread": CODEX_THREAD})["usage"]
    # The fill after a compaction is not known until Codex reports a request: estimated from the
    # new history (one summary message and Codex's overhead inferred from its first request),
    # never the marker's figure.
    assert usage["source"] == "estimate" and 12_000 <= usage["usedTokens"] + 500 < 20_000, usage
    assert usage["percent"] < 8 and usage["tier"] == "ok", usage
    assert (compaction["tokensBefore"], compaction["tokensAfter"]) == (240_000, None)
    [operation] = _history(client, workspace, CODEX_THREAD)["operations"]
    assert (operation["tokensBefore"], operation["tokensAfter"]) == (240_000, None)

    # The first request after it reports the fill after it.
    fx.append_jsonl(rollout, [fx.codex_answer("Done.", "2026-02-10T09:06:00.000Z"),
                              fx.codex_token_count(31_000, _running(271_000), "2026-02-10T09:06:01.000Z",
                                                   window=WINDOW)])
    _wait(lambda: _history(client, workspace, CODEX_THREAD)["compactions"][0]["tokensAfter"] == 31_000)
    usage = client.request("ctxd/usage", {"workspace": uri, "thread": CODEX_THREAD})["usage"]
    assert (usage["usedTokens"], usage["source"], usage["percent"]) == (31_000, "api", round(100 * 31_000 / WINDOW, 1))


def test_codex_zero_input_report_before_compacting_keeps_the_fill(daemon_factory, workspace: Path,
                                                                  tmp_path: Path) -> None:
    codex_home, _, env = homes(tmp_path)
    rollout = fx.write_jsonl(fx.codex_path(codex_home), _codex_full(workspace))
    client = daemon_factory([workspace], env=env)
    uri = workspace.as_uri()
    wait_thread(client, workspace, CODEX_THREAD, lambda t: t["usage"]["usedTokens"] == 240_000)
    seen = len(client.notifications)
    # Codex writes a marker of 0 before the summary request; the window is as full as it was.
    fx.append_jsonl(rollout, [fx.codex_marker("2026-02-10T09:04:59.000Z", 0, WINDOW, _running(240_000)),
                              fx.codex_answer("Compacting.", "2026-02-10T09:04:59.500Z")])
    client.wait_for_notification("ctxd/usageChanged", lambda p: p["thread"] == CODEX_THREAD, timeout=15, after=seen)
    usage = client.request("ctxd/usage", {"workspace": uri, "thread": CODEX_THREAD})["usage"]
    assert usage["usedTokens"] > 240_000 and usage["source"] == "api+estimate", usage
