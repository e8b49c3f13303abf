"""A followed session's compactions as the agent made them (issue #36): Codex's zero-input
`token_count` around a compaction is a marker, never the window's fill; and a session ctxd first
sees after the agent compacted it keeps, archived and recallable, what came before each
compaction, dated from the file. Real daemon; session files as the agents write them
(tests/session_fixtures.py)."""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from ctxd.agents import claude
from ctxd.ledger.store import database_path
from tests import session_fixtures as fx
from tests.rpc import Client
from tests.test_sessions_e2e import CODEX_THREAD, homes, wait_thread
from tests.test_sessions_readers import long_claude_session

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


# --- sessions first seen after their agent compacted them --------------------------------------

CLAUDE_THREAD = f"claude:{fx.CLAUDE_ID}"
WORDS = ["zanzibar", "quetzalcoatl", "marmoset", "okapi"]


def _when(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def _compaction_times(records: list[dict[str, Any]]) -> list[datetime]:
    """When the agent compacted, as its file says (`compacted` / `compact_boundary` lines)."""
    return [_when(r["timestamp"]) for r in records
            if r.get("type") == "compacted" or r.get("subtype") == "compact_boundary"]


def _holding(items: list[dict[str, Any]], word: str) -> list[dict[str, Any]]:
    return [item for item in items if word in json.dumps(item)]


def _check_kept(client: Client, ws: Path, thread: str, words: list[str], records: list[dict[str, Any]]) -> None:
    """Every compaction listed once, dated by the file, having archived what came before it; each
    word in one stored item, archived but for the last stretch's, and found by recall."""
    history = _history(client, ws, thread)
    listed = history["compactions"]
    assert [_when(c["createdAt"]) for c in listed] == _compaction_times(records)
    assert all(c["strategy"] == thread.split(":")[0] and c["archivedItems"] >= 3 for c in listed), listed
    assert [o["kind"] for o in history["operations"]] == ["compaction"] * (len(words) - 1)
    for n, word in enumerate(words):
        holding = _holding(history["items"], word)
        assert len(holding) == 1, (word, len(holding), [json.dumps(i)[:100] for i in history["items"]])
        [item] = holding
        assert bool(item.get("archived")) == (n < len(words) - 1), (word, item)
        found = client.request("ctxd/recall", {"workspace": ws.as_uri(), "thread": thread, "query": word})["results"]
        assert found and word in found[0]["snippet"] and found[0]["archived"] == (n < len(words) - 1), (word, found)
    active = client.request("ctxd/history", {"workspace": ws.as_uri(), "thread": thread})["items"]
    assert _holding(active, words[-1]) and not any(_holding(active, word) for word in words[:-1])


def test_a_codex_session_first_seen_after_its_compactions_keeps_what_came_before_each(
        daemon_factory, workspace: Path, tmp_path: Path) -> None:
    codex_home, _, env = homes(tmp_path)
    # Three compactions: without `replacement_history` (Codex rebuilds it), with it, without.
    records = fx.codex_history(workspace, WORDS, replacement=[False, True, False])
    fx.write_jsonl(fx.codex_path(codex_home), records)
    client = daemon_factory([workspace], env=env)
    wait_thread(client, workspace, CODEX_THREAD, lambda t: t["usage"]["usedTokens"] == 23_000)
    _check_kept(client, workspace, CODEX_THREAD, WORDS, records)
    # The fill before each compaction is the last report before it, the fill after the first after it.
    listed = _history(client, workspace, CODEX_THREAD)["compactions"]
    assert [(c["tokensBefore"], c["tokensAfter"]) for c in listed] == [(20_000, 21_000), (21_000, 22_000),
                                                                       (22_000, 23_000)]


def test_a_claude_session_first_seen_after_several_compactions_keeps_what_came_before_each(
        daemon_factory, workspace: Path, tmp_path: Path) -> None:
    _, claude_home, env = homes(tmp_path)
    records = fx.claude_history(workspace, WORDS)
    fx.write_jsonl(fx.claude_path(claude_home, workspace), records)
    client = daemon_factory([workspace], env=env)
    wait_thread(client, workspace, CLAUDE_THREAD, lambda t: t["usage"]["source"] == "api")
    _check_kept(client, workspace, CLAUDE_THREAD, WORDS, records)
    # Each compaction wrote Claude Code's summary: the first item after it.
    history = _history(client, workspace, CLAUDE_THREAD)
    assert all(c["writtenItems"] == 1 for c in history["compactions"])


def test_a_daemon_restarted_over_its_store_archives_nothing_twice_and_loses_nothing(
        daemon_factory, workspace: Path, tmp_path: Path) -> None:
    codex_home, _, env = homes(tmp_path)
    records = fx.codex_history(workspace, WORDS, replacement=[True, False, True])
    cut = [n for n, r in enumerate(records) if r.get("type") == "compacted"]
    rollout = fx.write_jsonl(fx.codex_path(codex_home), records[:cut[0] - 1])  # before the first compaction
    client = daemon_factory([workspace], env=env)
    wait_thread(client, workspace, CODEX_THREAD, lambda t: t["usage"]["usedTokens"] == 20_000)
    fx.append_jsonl(rollout, records[cut[0] - 1:cut[1] + 2])  # the first compaction, seen as it happens
    _wait(lambda: _history(client, workspace, CODEX_THREAD)["compactions"])
    wait_thread(client, workspace, CODEX_THREAD)
    client.shutdown()
    fx.append_jsonl(rollout, records[cut[1] + 2:])  # two more while no ctxd ran
    client = daemon_factory([workspace], env=env)
    wait_thread(client, workspace, CODEX_THREAD, lambda t: t["usage"]["usedTokens"] == 23_000)
    _check_kept(client, workspace, CODEX_THREAD, WORDS, records)
    before = _history(client, workspace, CODEX_THREAD)
    client.shutdown()
    client = daemon_factory([workspace], env=env)  # and again, the file as it was
    client.request("ctxd/ghost/list", {"workspace": workspace.as_uri()})  # a round trip after its first read
    wait_thread(client, workspace, CODEX_THREAD, lambda t: t["usage"]["usedTokens"] == 23_000)
    assert _history(client, workspace, CODEX_THREAD) == before


def _let_go(state_dir: Path) -> bool:
    """The owner has let a dormant session's reader go (its log says so)."""
    log = state_dir / "ctxd" / "owner" / "owner.log"
    return log.is_file() and "dormant session readers" in log.read_text(errors="replace")


def _dormant(path: Path) -> None:
    """Written an hour ago."""
    old = time.time() - 3600
    os.utime(path, (old, old))


def test_a_dormant_sessions_reader_is_let_go_and_its_next_lines_are_mirrored_once(
        daemon_factory, workspace: Path, tmp_path: Path, state_dir: Path) -> None:
    """An owner lets the readers of dormant sessions go (thousands of old sessions: memory that grew
    with the history) once its store holds where each stood. The session's next lines are taken up
    from there: mirrored once, compactions included, as across a restart."""
    codex_home, _, env = homes(tmp_path)
    records = fx.codex_history(workspace, WORDS, replacement=[True, False, True])
    cut = [n for n, r in enumerate(records) if r.get("type") == "compacted"]
    rollout = fx.write_jsonl(fx.codex_path(codex_home), records[:cut[1] + 2])
    _dormant(rollout)
    client = daemon_factory([workspace], env={**env, "CTXD_DORMANT_SECONDS": "1"})
    wait_thread(client, workspace, CODEX_THREAD)
    _wait(lambda: _let_go(state_dir))
    fx.append_jsonl(rollout, records[cut[1] + 2:])  # two more compactions, and the last stretch
    wait_thread(client, workspace, CODEX_THREAD, lambda t: t["usage"]["usedTokens"] == 23_000)
    _check_kept(client, workspace, CODEX_THREAD, WORDS, records)


def test_a_restart_lets_an_old_sessions_reader_go_at_once_and_mirrors_its_next_lines_once(
        daemon_factory, workspace: Path, tmp_path: Path) -> None:
    """An owner that takes an old session up from its store with nothing new to read lets its reader
    go at once (a restart takes up thousands: issue #38); the session's next lines are taken up from
    the store again, mirrored once, compactions included."""
    codex_home, _, env = homes(tmp_path)
    records = fx.codex_history(workspace, WORDS, replacement=[True, False, True])
    cut = [n for n, r in enumerate(records) if r.get("type") == "compacted"]
    rollout = fx.write_jsonl(fx.codex_path(codex_home), records[:cut[1] + 2])
    _dormant(rollout)
    client = daemon_factory([workspace], env=env)
    wait_thread(client, workspace, CODEX_THREAD)
    client.shutdown()
    client = daemon_factory([workspace], env=env)
    wait_thread(client, workspace, CODEX_THREAD)
    client.request("ctxd/ghost/list", {"workspace": workspace.as_uri()})  # a round trip after its first read
    fx.append_jsonl(rollout, records[cut[1] + 2:])  # two more compactions, and the last stretch
    wait_thread(client, workspace, CODEX_THREAD, lambda t: t["usage"]["usedTokens"] == 23_000)
    _check_kept(client, workspace, CODEX_THREAD, WORDS, records)


@pytest.mark.parametrize("poll", [False, True], ids=["events", "polling"])
def test_a_dormant_claude_session_counts_what_its_subagent_writes(daemon_factory, workspace: Path, tmp_path: Path,
                                                                  state_dir: Path, poll: bool) -> None:
    """A subagent writes its own file while the session's transcript waits for it: a session let
    go as dormant is read again for it (its cost grows), its transcript unchanged. Without file
    events (`CTXD_SESSIONS_POLL=1`: no inotify) the session's stamp moves with its subagents' files."""
    _, claude_home, env = homes(tmp_path)
    path = fx.write_jsonl(fx.claude_path(claude_home, workspace), fx.claude_session(workspace))
    _dormant(path)
    client = daemon_factory([workspace], env={**env, "CTXD_DORMANT_SECONDS": "1", **({"CTXD_SESSIONS_POLL": "1"} if poll else {})})
    wait_thread(client, workspace, CLAUDE_THREAD)
    uri = workspace.as_uri()
    before = client.request("ctxd/usage", {"workspace": uri, "thread": CLAUDE_THREAD})["cost"]["total"]
    _wait(lambda: _let_go(state_dir))
    fx.write_jsonl(path.with_suffix("") / "subagents" / "agent-1.jsonl",
                   fx.claude_assistant([{"type": "text", "text": "sub"}], "msg_s1", "s1", None, workspace,
                                       "2025-10-03T11:00:09.000Z", fx.claude_usage(1_000, 0, 0, 500)))
    _wait(lambda: client.request("ctxd/usage", {"workspace": uri, "thread": CLAUDE_THREAD})["cost"]["total"] > before)


def test_a_subagent_that_wrote_while_no_owner_ran_is_counted_by_the_next(daemon_factory, workspace: Path,
                                                                          tmp_path: Path) -> None:
    """A subagent's file grew while no ctxd ran, its session's transcript unchanged: the next owner,
    taking the session up from its store, reads the subagent (its cost grows) without waiting for
    the transcript to move."""
    _, claude_home, env = homes(tmp_path)
    path = fx.write_jsonl(fx.claude_path(claude_home, workspace), fx.claude_session(workspace))
    uri = workspace.as_uri()
    client = daemon_factory([workspace], env=env)
    wait_thread(client, workspace, CLAUDE_THREAD)
    before = client.request("ctxd/usage", {"workspace": uri, "thread": CLAUDE_THREAD})["cost"]["total"]
    client.shutdown()
    fx.write_jsonl(path.with_suffix("") / "subagents" / "agent-1.jsonl",
                   fx.claude_assistant([{"type": "text", "text": "sub"}], "msg_s1", "s1", None, workspace,
                                       "2025-10-03T11:00:09.000Z", fx.claude_usage(1_000, 0, 0, 500)))
    client = daemon_factory([workspace], env=env)
    _wait(lambda: client.request("ctxd/usage", {"workspace": uri, "thread": CLAUDE_THREAD})["cost"]["total"] > before)


def test_ctxd_mcp_started_after_the_compactions_keeps_what_came_before_each(tmp_path: Path) -> None:
    """`ctxd mcp` mirrors too (no daemon runs): the agent recalls what its compactions replaced
    before ctxd ever saw the session."""
    import anyio
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    from tests.test_mcp import call, server_params, until

    workspace = tmp_path / "ws"
    workspace.mkdir()
    state_dir, claude_home = tmp_path / "state", tmp_path / "claude-home"
    fx.write_jsonl(fx.claude_path(claude_home, workspace), fx.claude_history(workspace, WORDS))

    async def scenario() -> None:
        async with stdio_client(server_params(state_dir, workspace, claude_home)) as streams:
            async with ClientSession(*streams) as session:
                await session.initialize()
                for n, word in enumerate(WORDS):
                    found = await until(session, "recall", lambda v: v["results"], query=word)
                    [hit] = found["results"]
                    assert word in hit["snippet"] and hit["archived"] == (n < len(WORDS) - 1), (word, hit)
                    whole, _ = await call(session, "history_item", seq=hit["seq"])
                    assert word in json.dumps(whole["item"])

    anyio.run(scenario)


def test_a_store_an_earlier_version_made_gets_what_its_compactions_missed(daemon_factory, workspace: Path,
                                                                          tmp_path: Path, state_dir: Path) -> None:
    """Issue #36 as users have it: their store lists the compactions of a session first seen after
    them, dated when ctxd read it, having archived nothing. The daemon reads the file again at
    its start: each gets the items the file had before it, and the file's date."""
    codex_home, _, env = homes(tmp_path)
    words = WORDS[:3]
    records = fx.codex_history(workspace, words, replacement=[False, True])
    fx.write_jsonl(fx.codex_path(codex_home), records)
    client = daemon_factory([workspace], env=env)
    wait_thread(client, workspace, CODEX_THREAD, lambda t: t["usage"]["usedTokens"] == 22_000)
    client.shutdown()
    with sqlite3.connect(database_path(state_dir / "ctxd", workspace)) as db:  # as the earlier version left it
        db.execute("DELETE FROM items WHERE thread = ? AND archived IS NOT NULL", (CODEX_THREAD,))
        for cid, info in db.execute("SELECT id, info FROM compactions WHERE thread = ?", (CODEX_THREAD,)).fetchall():
            info = {**json.loads(info), "removed": [], "before": []}
            db.execute("UPDATE compactions SET info = ?, created_at = ? WHERE id = ?", (json.dumps(info), time.time(), cid))
        for table in ("recall_fts", "recall_threads", "recall_turns"):  # indexed again at the next search
            db.execute(f"DROP TABLE IF EXISTS {table}")
        db.execute("DELETE FROM meta WHERE key = 'recall_index'")
        db.execute("DELETE FROM followed")  # an earlier version kept no reader's place: the file is read again
    client = daemon_factory([workspace], env=env)
    _wait(lambda: all(c["archivedItems"] for c in _history(client, workspace, CODEX_THREAD)["compactions"]))
    _check_kept(client, workspace, CODEX_THREAD, words, records)
    client.shutdown()
    again = daemon_factory([workspace], env=env)  # repaired once
    wait_thread(again, workspace, CODEX_THREAD)
    again.request("ctxd/ghost/list", {"workspace": workspace.as_uri()})
    _check_kept(again, workspace, CODEX_THREAD, words, records)


def test_a_claude_prompt_edited_and_resent_is_mirrored_once_across_restarts(daemon_factory, workspace: Path,
                                                                            tmp_path: Path) -> None:
    """A rewind (Claude Code: a prompt edited and resent, its parent an earlier line) archives the
    abandoned branch when seen live; a restart, which reads the file from its start again, leaves
    the thread as it is."""
    _, claude_home, env = homes(tmp_path)
    transcript = fx.write_jsonl(fx.claude_path(claude_home, workspace), fx.claude_session(workspace))
    client = daemon_factory([workspace], env=env)
    wait_thread(client, workspace, CLAUDE_THREAD, lambda t: t["itemCount"] == 6)
    fx.append_jsonl(transcript, [fx.claude_user("Actually, add --quiet instead", "u3", "a1-2", workspace,
                                                "2025-10-03T11:07:00.000Z")])
    wait_thread(client, workspace, CLAUDE_THREAD, lambda t: t["itemCount"] == 5)
    before = _history(client, workspace, CLAUDE_THREAD)
    [abandoned] = _holding([i for i in before["items"] if i.get("archived")], "Added --verbose.")
    assert [o["kind"] for o in before["operations"]] == ["compaction"]
    for _ in range(2):
        client.shutdown()
        client = daemon_factory([workspace], env=env)
        client.request("ctxd/ghost/list", {"workspace": workspace.as_uri()})  # a round trip after its first read
        wait_thread(client, workspace, CLAUDE_THREAD)
        assert _history(client, workspace, CLAUDE_THREAD) == before


def test_the_fill_after_a_compaction_is_the_compactions_never_a_rewinds_after_it(daemon_factory, workspace: Path,
                                                                                  tmp_path: Path) -> None:
    """The fill after a Claude Code compaction is known at the first report after it. When the user
    went back before that report (a prompt edited and resent), the figure still belongs to the
    compaction: the rewind, listed after it, has none, live and after a restart (which, reading the
    rewind again, gave it the compaction's figure)."""
    _, claude_home, env = homes(tmp_path)
    t = "2025-10-03T12:00:{:02d}.000Z".format
    lines = [fx.claude_user("Start the parser", "u1", None, workspace, t(1)),
             *fx.claude_assistant([{"type": "text", "text": "Started."}], "m1", "a1", "u1", workspace, t(2),
                                  fx.claude_usage(3, 100, 9_000, 20)),
             *fx.claude_compact("k1", "a1", workspace, t(3), "The parser was started."),
             fx.claude_user("Go on with the lexer", "u2", "k1-s", workspace, t(4)),
             fx.claude_user("Go on with the tests", "u3", "k1-s", workspace, t(5)),  # u2 edited: a rewind
             *fx.claude_assistant([{"type": "text", "text": "Tests."}], "m2", "a2", "u3", workspace, t(6),
                                  fx.claude_usage(3, 100, 4_000, 20))]
    fx.write_jsonl(fx.claude_path(claude_home, workspace), lines)

    def annotated(client: Client) -> list[tuple[str, int | None]] | None:
        listed = [(c["strategy"], c["tokensAfter"]) for c in _history(client, workspace, CLAUDE_THREAD)["compactions"]]
        return listed if len(listed) == 2 and any(after is not None for _, after in listed) else None

    for restart in range(2):
        client = daemon_factory([workspace], env=env)
        client.request("ctxd/ghost/list", {"workspace": workspace.as_uri()})  # a round trip after its first read
        wait_thread(client, workspace, CLAUDE_THREAD, lambda t: t["usage"]["source"] == "api")
        assert _wait(functools.partial(annotated, client)) == [("claude", 4_123), ("agent", None)], restart
        client.shutdown()


def test_a_rewind_further_back_than_the_owners_reader_remembers_is_followed(daemon_factory, workspace: Path,
                                                                           tmp_path: Path) -> None:
    """A Claude Code session longer than a reader remembers (claude.MAX_LINES lines) whose user went
    back to its first answer and asked again, before the owner started and while it follows: its
    gauge is the report after each rewind. Before, the owner's reader read the file again from its
    start, forgot that answer again on the way, and stopped at the rewind for good: the gauge, cost
    and turns of the session froze."""
    _, claude_home, env = homes(tmp_path)
    t = "2025-10-03T13:{:02d}:00.000Z".format

    def rewind(n: int, cache_read: int) -> list[dict[str, Any]]:
        return [fx.claude_user(f"Start over ({n})", f"back{n}", "a0", workspace, t(2 * n)),
                *fx.claude_assistant([{"type": "text", "text": "Started over."}], f"mb{n}", f"ab{n}", f"back{n}",
                                     workspace, t(2 * n + 1), fx.claude_usage(4, 10, cache_read, 5))]

    path = fx.write_jsonl(fx.claude_path(claude_home, workspace),
                          long_claude_session(claude.MAX_LINES // 2 + 100, rewind(1, 777), workspace))
    client = daemon_factory([workspace], env=env)
    wait_thread(client, workspace, CLAUDE_THREAD, lambda t: t["usage"]["usedTokens"] == 4 + 10 + 777 + 5)
    fx.append_jsonl(path, rewind(2, 888))
    thread = wait_thread(client, workspace, CLAUDE_THREAD, lambda t: t["usage"]["usedTokens"] == 4 + 10 + 888 + 5)
    assert thread["usage"]["source"] == "api"
