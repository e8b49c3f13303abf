"""The session readers (issue #16): Codex rollouts and Claude Code transcripts, read incrementally.

Fixtures: tests/session_fixtures.py (each record's provenance is there).
"""

from __future__ import annotations

import functools
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from ctxd.agents import claude
from ctxd.agents import jsonl as reader
from ctxd.agents.claude import ClaudeReader, ClaudeSessions
from ctxd.agents.codex import CodexReader, CodexSessions
from ctxd.agents.folders import Folders
from ctxd.agents.gemini import GeminiReader
from ctxd.agents.qwen import QwenReader
from ctxd.agents.session import MAX_TOKENS, Session, Usage
from ctxd.protocol.items import validate_items
from ctxd.sessions import pricing, summaries
from tests import session_fixtures as fx


def test_codex_session_items_usage_title_and_turns(tmp_path: Path) -> None:
    path = fx.write_jsonl(fx.codex_path(tmp_path), fx.codex_session("/home/user/app"))
    reader = CodexReader(str(path))
    change = reader.read()
    s = reader.session
    assert (s.id, s.cwd, s.model, s.context_window) == (fx.CODEX_ID, "/home/user/app", "gpt-5-codex", 272000)
    assert s.title == "Fix the failing test in parser.py please"
    # The gauge: last_token_usage.total_tokens of the latest token_count (Codex's status line).
    assert s.baseline == 12_000
    # Items: injected context + user message + reasoning + call + output + answer, in ctxd's shapes.
    assert [i["type"] for i in s.items] == ["message", "message", "reasoning", "function_call",
                                            "function_call_output", "message"]
    validate_items(s.items)
    assert change.appended == s.items and not change.replaced
    assert [(t.index, t.text) for t in s.turns] == [(2, "Fix the failing test in parser.py please")]
    # Cost from total_token_usage: input excludes cached; output includes reasoning.
    assert s.cumulative["gpt-5-codex"] == Usage(input=10_200, cached_input=10_200, output=600, reasoning=256)
    assert s.unknown == {} and s.bad_lines == 0


def test_codex_growth_and_a_last_line_still_being_written(tmp_path: Path) -> None:
    records = fx.codex_session("/w")
    path = fx.write_jsonl(fx.codex_path(tmp_path), records[:4])
    reader = CodexReader(str(path))
    assert len(reader.read().appended) == 2
    # The agent writes one whole line (the user_message event) and half of the next.
    rest = b"".join(json.dumps(r).encode() + b"\n" for r in records[4:])
    first_end = rest.index(b"\n") + 1
    with path.open("ab") as f:
        f.write(rest[:first_end + 10])
    change = reader.read()
    assert reader.offset == path.stat().st_size - 10  # the half line waits for its newline
    assert [t.text for t in change.turns] == ["Fix the failing test in parser.py please"]
    with path.open("ab") as f:
        f.write(rest[first_end + 10:])
    change = reader.read()
    assert reader.offset == path.stat().st_size
    assert len(reader.session.items) == 6 and reader.session.baseline == 12_000 and change.usage
    assert change.turns == [] and len(reader.session.turns) == 1
    assert reader.session.bad_lines == 0


def test_codex_compaction_replaces_the_history(tmp_path: Path) -> None:
    records = fx.codex_session("/w")
    path = fx.write_jsonl(fx.codex_path(tmp_path), records)
    reader = CodexReader(str(path))
    reader.read()
    # Local compaction (no replacement_history): Codex keeps the user messages and adds the summary.
    fx.append_jsonl(path, fx.codex_compacted("Summary: parser fixed, tests green.", "2025-10-03T10:01:00.000Z"))
    change = reader.read()
    s = reader.session
    assert change.replaced and change.usage and s.compactions == 1
    texts = [i["content"][0]["text"] for i in s.items]
    assert texts == ["Fix the failing test in parser.py please", "Summary: parser fixed, tests green."]
    assert s.baseline is None  # until the next token_count reports the smaller window
    # Remote compaction: the replacement history is taken as it is.
    replacement = [records[3]["payload"], {"type": "compaction", "encrypted_content": "gAAAA-compacted"}]
    fx.append_jsonl(path, fx.codex_compacted("", "2025-10-03T10:02:00.000Z", replacement)
                    + [fx.codex_token_count(3_000, {"input_tokens": 30_000, "cached_input_tokens": 15_000,
                                                    "output_tokens": 900, "reasoning_output_tokens": 300,
                                                    "total_tokens": 30_900}, "2025-10-03T10:02:01.000Z")])
    change = reader.read()
    assert change.replaced and s is reader.session and reader.session.compactions == 2
    assert [i["type"] for i in reader.session.items] == ["message", "compaction"]
    assert reader.session.baseline == 3_000
    validate_items(reader.session.items)


def test_codex_unknown_records_are_skipped_and_counted(tmp_path: Path) -> None:
    records = fx.codex_session("/w")
    records.insert(3, {"timestamp": "2025-10-03T10:00:02.500Z", "type": "future_thing", "payload": {"x": 1}})
    records.insert(4, {"timestamp": "2025-10-03T10:00:02.600Z", "type": "response_item",
                       "payload": {"type": "ghost_snapshot", "ghost_commit": {"id": "abc"}}})
    records.insert(5, {"timestamp": "2025-10-03T10:00:02.700Z", "type": "response_item",
                       "payload": {"type": "brand_new_item", "x": 1}})
    path = fx.write_jsonl(fx.codex_path(tmp_path), records, tail=b"[1, 2]\n{not json\n")
    reader = CodexReader(str(path))
    reader.read()
    s = reader.session
    assert s.unknown == {"future_thing": 1, "response_item.brand_new_item": 1}
    assert s.bad_lines == 2
    assert len(s.items) == 6  # Codex's own ghost snapshots are not model-visible: not mirrored


def test_codex_fork_and_resume(tmp_path: Path) -> None:
    # A fork: a new meta line, then the source's history copied, its meta line included.
    source = fx.codex_session("/w")
    fork_id = "0199a213-ffff-7800-8aa1-bbab2a035a53"
    path = fx.write_jsonl(fx.codex_path(tmp_path, fork_id), [fx.codex_meta("/w", fork_id)] + source)
    reader = CodexReader(str(path))
    reader.read()
    assert reader.session.id == fork_id and reader.session.forked_from == fx.CODEX_ID
    # A resume appends to the file from a new process whose running total starts again: cost adds up.
    fx.append_jsonl(path, fx.codex_turn("and the docs", "2025-10-03T12:00:00.000Z") + [
        fx.codex_token_count(15_000, {"input_tokens": 14_700, "cached_input_tokens": 14_000, "output_tokens": 300,
                                      "reasoning_output_tokens": 0, "total_tokens": 15_000},
                             "2025-10-03T12:00:05.000Z")])
    reader.read()
    usage = reader.session.cumulative["gpt-5-codex"]
    assert (usage.input, usage.cached_input, usage.output) == (10_200 + 700, 10_200 + 14_000, 900)
    assert [t.text for t in reader.session.turns] == ["Fix the failing test in parser.py please", "and the docs"]


def test_claude_session_items_usage_and_dedup(tmp_path: Path) -> None:
    path = fx.write_jsonl(fx.claude_path(tmp_path, "/home/user/app"), fx.claude_session("/home/user/app"))
    reader = ClaudeReader(str(path), fx.CLAUDE_ID)
    reader.read()
    s = reader.session
    assert (s.id, s.cwd, s.model, s.title) == (fx.CLAUDE_ID, "/home/user/app", "claude-sonnet-4-5-20250929",
                                               "Add a --verbose flag to the CLI")
    assert s.context_window is None  # the transcript does not state it
    # thinking / text / tool_use / tool_result / text
    assert [i["type"] for i in s.items] == ["message", "reasoning", "message", "function_call",
                                            "function_call_output", "message"]
    validate_items(s.items)
    call = s.items[3]
    assert call["call_id"] == "toolu_01" and json.loads(call["arguments"]) == {"file_path": "/home/user/app/cli.py"}
    assert s.items[4] == {"type": "function_call_output", "call_id": "toolu_01", "output": "import argparse\n"}
    # Baseline: the latest main-chain assistant usage, input + cache creation + cache read + output
    # (docs/sessions.md), covering every item up to that reply's last block.
    assert s.baseline == 6 + 500 + 15_000 + 40 and s.baseline_items == len(s.items)
    # Cost: msg_01 was streamed as three lines with one usage: counted once.
    assert s.cumulative["claude-sonnet-4-5-20250929"] == Usage(input=10, cached_input=27_000, cache_write=3_500,
                                                               output=160)
    assert [t.index for t in s.turns] == [0] and s.unknown == {}


def test_claude_streamed_duplicate_blocks_are_mirrored_once(tmp_path: Path) -> None:
    records = fx.claude_session("/w")
    records.insert(4, dict(records[3]))  # Claude Code repeats a block line as it streams
    path = fx.write_jsonl(fx.claude_path(tmp_path, "/w"), records)
    reader = ClaudeReader(str(path), fx.CLAUDE_ID)
    reader.read()
    assert [i["type"] for i in reader.session.items].count("message") == 3
    assert reader.session.cumulative["claude-sonnet-4-5-20250929"].output == 160


def test_a_streamed_duplicate_block_after_a_restore_is_mirrored_once(tmp_path: Path) -> None:
    """The daemon restarted (or another owner took over) between a block's line and its streamed
    copy: the restored reader knew no block of that message, and mirrored the copy as a second item.
    The blocks seen of the latest message are in the reader's state."""
    records = fx.claude_session("/w")
    records.insert(4, dict(records[3]))  # Claude Code repeats a block line as it streams
    path = fx.write_jsonl(fx.claude_path(tmp_path, "/w"), records[:4])
    first = ClaudeReader(str(path), fx.CLAUDE_ID)
    first.read()
    state = json.loads(json.dumps(first.position()))  # as stored
    fx.append_jsonl(path, records[4:])
    later = ClaudeReader(str(path), fx.CLAUDE_ID)
    later.restore(state)
    change = later.read()
    whole = ClaudeReader(str(path), fx.CLAUDE_ID)
    whole.read()
    assert not change.replaced
    assert first.session.items + [i for step in change.steps for i in step.items] == whole.session.items
    assert [i["type"] for i in whole.session.items].count("message") == 3


def test_a_claude_reader_that_caught_up_keeps_only_its_latest_messages_usage(tmp_path: Path) -> None:
    """Issue #38: thousands of readers stay open; one that caught up keeps the usage of as many
    recent messages as its saved state does (a streamed copy comes right after its first line),
    not of every message of its session; the cost it counts is unchanged."""
    records = fx.claude_history("/w", [f"word{n}" for n in range(40)])
    path = fx.write_jsonl(fx.claude_path(tmp_path, "/w"), records)
    reader = ClaudeReader(str(path), fx.CLAUDE_ID)
    reader.read()
    cost = dict(reader.session.cumulative)
    reader.trim()
    assert len(reader._msg_usage) <= 16
    assert reader.session.cumulative == cost
    latest = [r for r in records if r.get("type") == "assistant"][-1]
    fx.append_jsonl(path, [latest])  # a streamed copy of the latest message: replaces, adds nothing
    reader.read()
    assert reader.session.cumulative == cost


def test_claude_sidechains_are_not_the_main_window(tmp_path: Path) -> None:
    records = fx.claude_session("/w")
    side = fx.claude_assistant([{"type": "text", "text": "subagent says hi"}], "msg_side", "s1", "a1-2", "/w",
                               "2025-10-03T11:00:03.500Z", fx.claude_usage(10, 0, 90_000, 50),
                               model="claude-haiku-4-5-20251001", isSidechain=True, agentId="a7")
    side_user = fx.claude_user("Search the repo for argparse", "s0", None, "/w", "2025-10-03T11:00:03.400Z",
                               isSidechain=True)
    path = fx.write_jsonl(fx.claude_path(tmp_path, "/w"), records[:5] + [side_user] + side + records[5:])
    reader = ClaudeReader(str(path), fx.CLAUDE_ID)
    reader.read()
    s = reader.session
    assert s.sidechain_lines == 2
    assert not any("subagent" in json.dumps(i) or "Search the repo" in json.dumps(i) for i in s.items)
    assert s.baseline == 15_546 and s.model == "claude-sonnet-4-5-20250929" and len(s.turns) == 1
    # The subagent's tokens are billed: they are in the cost, under its own model.
    assert s.cumulative["claude-haiku-4-5-20251001"].cached_input == 90_000


@pytest.mark.parametrize("link", ["", "session", "subagents"], ids=["folder", "session-link", "subagents-link"])
def test_claude_subagents_files_are_counted_never_through_a_link(tmp_path: Path, link: str) -> None:
    """A subagent's file (`<session>/subagents/agent-*.jsonl`) adds to the session's cost and to
    what its reader has left to read; through a link (the session's folder or its `subagents`
    made one) it is neither."""
    path = fx.write_jsonl(fx.claude_path(tmp_path, "/w"), fx.claude_session("/w"))
    linked = bool(link)
    folder = tmp_path / "elsewhere" if linked else path.with_suffix("")
    fx.write_jsonl(folder / "subagents" / "agent-1.jsonl",
                   fx.claude_assistant([{"type": "text", "text": "sub"}], "msg_s1", "s1", None, "/w",
                                       "2025-10-03T11:00:09.000Z", fx.claude_usage(1_000, 0, 0, 500),
                                       model="claude-haiku-4-5-20251001"))
    if link == "session":
        path.with_suffix("").symlink_to(folder)
    elif link == "subagents":
        path.with_suffix("").mkdir()
        (path.with_suffix("") / "subagents").symlink_to(folder / "subagents")
    reader = ClaudeReader(str(path), fx.CLAUDE_ID)
    stamp = ClaudeSessions(tmp_path).stamp(str(path))
    assert stamp is not None
    transcript = path.stat().st_size
    assert (reader.left(stamp) > transcript) if not linked else (reader.left(stamp) == transcript)
    reader.read()
    assert reader.left(stamp) == 0
    assert ("claude-haiku-4-5-20251001" in reader.session.cumulative) is not linked


def test_claude_compaction_starts_a_new_window(tmp_path: Path) -> None:
    path = fx.write_jsonl(fx.claude_path(tmp_path, "/w"), fx.claude_session("/w"))
    reader = ClaudeReader(str(path), fx.CLAUDE_ID)
    reader.read()
    fx.append_jsonl(path, fx.claude_compact("c1", "a2", "/w", "2025-10-03T11:05:00.000Z", "We added --verbose."))
    change = reader.read()
    s = reader.session
    assert change.replaced and s.compactions == 1 and s.baseline is None
    assert len(s.items) == 1 and "We added --verbose." in s.items[0]["content"][0]["text"]
    assert change.turns == []  # the summary is not a user turn
    fx.append_jsonl(path, [fx.claude_user("now add tests", "u9", "c1-s", "/w", "2025-10-03T11:06:00.000Z"),
                           *fx.claude_assistant([{"type": "text", "text": "ok"}], "msg_09", "a9", "u9", "/w",
                                                "2025-10-03T11:06:02.000Z", fx.claude_usage(3, 2_000, 4_000, 9))])
    change = reader.read()
    assert not change.replaced and len(change.appended) == 2 and [t.text for t in change.turns] == ["now add tests"]
    assert reader.session.baseline == 6_012


def test_claude_truncated_line_unknown_type_and_meta_lines(tmp_path: Path) -> None:
    records = fx.claude_session("/w")
    records.insert(1, {"type": "file-history-snapshot", "messageId": "u1", "snapshot": {}, "isSnapshotUpdate": False})
    records.insert(2, {"type": "hologram", "uuid": "h1"})
    records.append(fx.claude_user("Caveat: The messages below were generated by the user while running local "
                                  "commands.", "m1", "a2", "/w", "2025-10-03T11:00:05.000Z", isMeta=True))
    partial = json.dumps(fx.claude_user("half", "u5", "m1", "/w", "2025-10-03T11:00:06.000Z")).encode()[:40]
    path = fx.write_jsonl(fx.claude_path(tmp_path, "/w"), records, tail=partial)
    reader = ClaudeReader(str(path), fx.CLAUDE_ID)
    reader.read()
    s = reader.session
    assert s.unknown == {"hologram": 1} and s.bad_lines == 0
    assert len(s.turns) == 1  # a meta message is model-visible but not a turn
    assert reader.offset == path.stat().st_size - len(partial)


def test_claude_rewind_drops_the_abandoned_branch(tmp_path: Path) -> None:
    path = fx.write_jsonl(fx.claude_path(tmp_path, "/w"), fx.claude_session("/w"))
    reader = ClaudeReader(str(path), fx.CLAUDE_ID)
    reader.read()
    # The user went back and re-asked the first question: the new prompt's parent is the root.
    fx.append_jsonl(path, [fx.claude_user("Add a --quiet flag instead", "u1b", None, "/w", "2025-10-03T11:09:00.000Z")])
    change = reader.read()
    assert not change.replaced  # a prompt with no parent appends (a new chain root is not a rewind)
    fx.append_jsonl(path, [fx.claude_user("No: a --debug flag", "u1c", "a1-2", "/w", "2025-10-03T11:10:00.000Z")])
    change = reader.read()
    s = reader.session
    assert change.replaced and s.rewinds == 1
    assert [i["type"] for i in s.items] == ["message", "reasoning", "message", "function_call", "message"]
    assert s.items[-1]["content"][0]["text"] == "No: a --debug flag"


def long_claude_session(rounds: int, then: list[dict[str, Any]], ws: Path | str = "/w") -> list[dict[str, Any]]:
    """A prompt and its answer (`a0`), `rounds` tool calls and their results, then `then`."""
    t = "2025-10-03T11:{:02d}:00.000Z".format
    lines = [fx.claude_user("Start the parser", "u0", None, ws, t(0)),
             *fx.claude_assistant([{"type": "text", "text": "Started."}], "m0", "a0", "u0", ws, t(1),
                                  fx.claude_usage(3, 100, 1_000, 10))]
    parent = "a0"
    for n in range(1, rounds + 1):
        lines += fx.claude_assistant([{"type": "tool_use", "id": f"t{n}", "name": "Bash", "input": {"command": "ls"}}],
                                     f"m{n}", f"a{n}", parent, ws, t(2), fx.claude_usage(3, 100, 1_000 + n, 10))
        lines.append(fx.claude_user([{"type": "tool_result", "tool_use_id": f"t{n}", "content": "ok"}], f"r{n}",
                                    f"a{n}", ws, t(3)))
        parent = f"r{n}"
    return lines + then


def _read_whole(path: Path, mode: str) -> tuple[Session, int, int]:
    """The session `mode` reads ("window": held, "daemon": the owner's reader, "summary": `ctxd
    sessions`'), where it stopped, and how many times it read the file again from its start (as
    the follower and the summaries do, once a read asks for it: `replay`)."""
    if mode == "summary":
        resets = 0
        reset = ClaudeReader.reset

        def counted(self: ClaudeReader) -> None:
            nonlocal resets
            resets += 1
            reset(self)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(ClaudeReader, "reset", counted)
            read = summaries.summarize(str(path), "claude", None, None)
        assert read is not None
        return read.session, read.stored.offset, resets
    reader_ = ClaudeReader(str(path), fx.CLAUDE_ID, window=mode == "window")
    reader_.read()
    resets = 0
    while reader_.replay and resets < 100:
        resets += 1
        reader_.reset()
        reader_.read()
    return reader_.session, reader_.offset, resets


@pytest.mark.parametrize("mode", ["window", "daemon", "summary"])
def test_a_rewind_further_back_than_a_reader_remembers_is_followed_to_the_files_end(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """A long session (more lines than a reader remembers: MAX_LINES, made small here) whose user
    went back to its first answer and asked again: the file is read once more from its start,
    that line remembered this time, and the rewind is followed to the end of the file. Before,
    the second read forgot the line again and stopped there for good: the session's gauge, cost
    and turns froze at the line before the rewind, whatever was written after it."""
    monkeypatch.setattr(claude, "MAX_LINES", 8)
    ws, t = "/w", "2025-10-03T12:{:02d}:00.000Z".format
    path = fx.write_jsonl(tmp_path / "long.jsonl", long_claude_session(30, [
        fx.claude_user("Start the lexer instead", "u1", "a0", ws, t(1)),  # back to the first answer
        *fx.claude_assistant([{"type": "text", "text": "Lexer started."}], "mz", "az", "u1", ws, t(2),
                             fx.claude_usage(4, 10, 777, 5))]))
    session, offset, resets = _read_whole(path, mode)
    assert (offset, resets) == (path.stat().st_size, 1)
    assert (session.rewinds, session.turn_total, session.baseline) == (1, 2, 4 + 10 + 777 + 5)
    if mode == "window":
        assert [item["content"][0]["text"] for item in session.items] == [
            "Start the parser", "Started.", "Start the lexer instead", "Lexer started."]


def test_rewinds_to_lines_no_file_holds_read_it_again_a_bounded_number_of_times(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hostile file: prompts whose parents no line has, after more lines than a reader remembers.
    Each of the first MAX_REPLAYS has the file read again once; the rest are read as prompts, and
    every read reaches the end of the file."""
    monkeypatch.setattr(claude, "MAX_LINES", 8)
    monkeypatch.setattr(reader, "MAX_REPLAYS", 3)  # (jsonl.py)
    ws, t = "/w", "2025-10-03T12:{:02d}:00.000Z".format
    ghosts = [fx.claude_user(f"Prompt {n}", f"p{n}", f"nowhere-{n}", ws, t(n)) for n in range(10)]
    path = fx.write_jsonl(tmp_path / "hostile.jsonl", long_claude_session(30, ghosts))
    for mode in ("window", "daemon", "summary"):
        session, offset, resets = _read_whole(path, mode)
        assert (offset, resets, session.rewinds, session.turn_total) == (path.stat().st_size, 3, 0, 11), mode


DAMAGES = {"claude": [{"end": [["x", 1]]}, {"end": [[1]]}, {"end": "x"}, {"messages": [["k"]]}, {"command": [1]},
                      {"subagents": [1]}],
           "qwen": [{"end": [["x", 1]]}, {"end": [[1]]}, {"end": "x"}, {"billed": {"m": 1}}, {"billed": [1]},
                    {"replied": {"m": {"input": "x"}}}],
           "gemini": [{"messages": [["x", 1]]}, {"messages": [[1, "a", 0, 0, []]]}, {"messages": "x"},
                      {"usage": [["k", "m", 1]]}, {"subagents": {"a.jsonl": {"offset": "x"}}}, {"last": 5}]}


@pytest.mark.parametrize("agent", ["claude", "qwen", "gemini"])
def test_a_damaged_saved_state_has_the_file_read_from_its_start(tmp_path: Path, agent: str) -> None:
    """A reader's saved state with entries too short or of the wrong type (a store damaged,
    another version's) is not taken up, by the owner's reader nor by a summary: the session is
    read from its start, as if never seen, and nothing raises."""
    if agent == "claude":
        path = str(fx.write_jsonl(fx.claude_path(tmp_path, "/w"), fx.claude_session("/w")))
        make = functools.partial(ClaudeReader, path, fx.CLAUDE_ID, window=False)
    elif agent == "gemini":
        path = str(tmp_path / "session-2026-12-02T01-18-3863ff50.jsonl")
        Path(path).write_bytes((Path(__file__).parent / "fixtures" / "agents" / "gemini" / "session.jsonl").read_bytes())
        make = functools.partial(GeminiReader, path, window=False)
    else:
        path = str(tmp_path / "qwen.jsonl")
        Path(path).write_bytes((Path(__file__).parent / "fixtures" / "agents" / "qwen" / "session.jsonl").read_bytes())
        make = functools.partial(QwenReader, path, None, window=False)
    owners = make()
    owners.read()
    fresh = summaries.summarize(path, agent, None, None)
    assert fresh is not None
    st = os.stat(path)
    now = reader.Stamp((st.st_dev, st.st_ino), st.st_size, st.st_mtime_ns)
    saved = json.dumps({**(owners.state() or {}), "stamp": list(now.key())})  # as the bridge saves it
    assert make().resume(json.loads(saved), now)  # (undamaged: taken up)
    for damage in DAMAGES[agent]:
        state = json.loads(saved)
        state["reader"].update(damage)
        assert not make().resume(state, now), damage
        state = json.loads(fresh.stored.state or "{}")
        state["reader"].update(damage)
        read = summaries.summarize(path, agent, state, None)
        assert read is not None and read.session.to_state() == fresh.session.to_state(), damage
    state = json.loads(saved)
    state["reader"] = ["not", "a", "dict"]
    assert not make().resume(state, now)


def test_a_rewritten_file_is_read_again(tmp_path: Path) -> None:
    path = fx.write_jsonl(fx.claude_path(tmp_path, "/w"), fx.claude_session("/w"))
    reader = ClaudeReader(str(path), fx.CLAUDE_ID)
    reader.read()
    fx.write_jsonl(path, fx.claude_session("/w")[:2])
    reader.read()
    assert len(reader.session.items) == 1 and reader.offset == path.stat().st_size


# --- hostile files -----------------------------------------------------------------------------


def test_bad_lines_are_skipped_and_nothing_unencodable_leaves_a_reader(tmp_path: Path) -> None:
    records = fx.codex_session("/w")
    lines = [json.dumps(r).encode() for r in records]
    lines[3:3] = [b"[" * 100_000 + b"]" * 100_000,  # too deeply nested: RecursionError, not ValueError
                  b'{"type": "response_item", "payload": {"type": "message", "score": NaN}}',
                  b'{"type": "response_item", "payload": {"type": "message", "t": Infinity}}',
                  b'{"type": "response_item", "payload": {"type": "message", "t": 1e999}}',
                  b'{"type": "response_item", "payload": {"type": "message"}} {"type": "response_item"}']
    lines[0] = b"  " + lines[0] + b" \r"  # whitespace around a record is not part of it
    lines += [json.dumps(r).encode() for r in fx.codex_turn("undo \ud800 that", "2025-10-03T10:09:00.000Z")]
    path = tmp_path / "rollout-x.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    reader_ = CodexReader(str(path))
    change = reader_.read()
    s = reader_.session
    assert s.bad_lines == 5 and len(s.items) == 7 and s.turns[-1].text == "undo \ufffd that" and s.id == fx.CODEX_ID
    json.dumps([s.items, s.title, [t.text for t in s.turns]], allow_nan=False).encode("utf-8")  # strict, encodable
    assert change.appended == s.items
    nested = tmp_path / "rollout-nested.jsonl"
    nested.write_bytes(b"[" * 100_000 + b"\n")
    assert reader.head(str(nested)) == ([{}], 100_001)


def test_token_counts_are_clamped_and_the_cost_is_finite(tmp_path: Path) -> None:
    total = {"input_tokens": 10**400, "cached_input_tokens": 10**500, "output_tokens": 10**308,
             "reasoning_output_tokens": -5, "total_tokens": 10**400}
    path = fx.write_jsonl(tmp_path / "rollout-x.jsonl",
                          fx.codex_session("/w") + [fx.codex_token_count(1000, total, "2025-10-03T10:09:00.000Z")])
    codex = CodexReader(str(path))
    codex.read()
    usage = codex.session.cumulative["gpt-5-codex"]
    assert min(usage.as_dict().values()) >= 0 and max(usage.as_dict().values()) <= MAX_TOKENS
    claude_file = fx.write_jsonl(fx.claude_path(tmp_path, "/w"), fx.claude_session("/w") + fx.claude_assistant(
        [{"type": "text", "text": "done"}], "msg_99", "a99", "a2", "/w", "2025-10-03T11:00:09.000Z",
        fx.claude_usage(10, 0, 0, 10**308)))
    claude = ClaudeReader(str(claude_file), fx.CLAUDE_ID)
    claude.read()
    for session in (codex.session, claude.session):
        cost = pricing.cost(session.cumulative)
        assert cost["priced"] and all(0 <= cost[k] < 1e6 for k in ("input", "cachedInput", "output", "total"))
    # An absurd price from the user's config cannot make it Infinity either.
    table = pricing.price_table({"big": {"input": 1e308, "output": 1e308}})
    cost = pricing.cost({"big": Usage(input=MAX_TOKENS, output=MAX_TOKENS)}, table)
    assert cost["total"] == 0 and cost["priced"] is False


def test_only_regular_files_are_read(tmp_path: Path) -> None:
    secret = tmp_path / "id_rsa"
    fx.write_jsonl(secret, fx.codex_session("/w"))
    link = tmp_path / "rollout-link.jsonl"
    link.symlink_to(secret)
    fifo = tmp_path / "rollout-fifo.jsonl"
    os.mkfifo(fifo)
    results: list[tuple] = []

    def read_all() -> None:
        for path in (link, fifo):
            codex = CodexReader(str(path))
            results.append((reader.head(str(path)), codex.read().empty, codex.bytes_read))

    worker = threading.Thread(target=read_all, daemon=True)  # a plain open() of a FIFO blocks for good
    worker.start()
    worker.join(10)
    unblock(fifo)
    assert results == [(([], 0), True, 0)] * 2


def unblock(fifo: Path) -> None:
    """Release a reader left waiting on `fifo` (when the code under test blocks on it)."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass  # nobody waiting


def test_a_first_line_longer_than_the_head_limit_is_no_session(tmp_path: Path) -> None:
    path = tmp_path / "rollout-big.jsonl"
    path.write_bytes(b'{"type":"session_meta","payload":{"cwd":"/w","x":"' + b"a" * reader.HEAD_LIMIT)
    assert CodexSessions(path.parent).peek_cwd(str(path), Folders([Path("/w")])) == (None, True, reader.HEAD_LIMIT)
    path.write_bytes(b'{"type":"session_meta","payload":{"cwd":"/w","x":"' + b"a" * 1000)
    assert CodexSessions(path.parent).peek_cwd(str(path), Folders([Path("/w")]))[1] is False  # not written yet: ask again


def test_a_line_over_the_limit_is_skipped_not_held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reader, "READ_CHUNK", 1024)  # (a line longer than a chunk is read again, larger)
    monkeypatch.setattr(reader, "MAX_LINE", 4096)
    records = fx.codex_session("/w")
    path = fx.write_jsonl(tmp_path / "rollout-x.jsonl", records[:3])
    codex = CodexReader(str(path))
    codex.read()
    huge = json.dumps(fx.codex_answer("Q" * 20_000, "2025-10-03T10:00:09.000Z")).encode()
    with open(path, "ab") as f:  # streamed: the line grows past the limit before its newline comes
        f.write(huge[:10_000])
    codex.read()
    with open(path, "ab") as f:
        f.write(huge[10_000:] + b"\n" + b"".join(json.dumps(r).encode() + b"\n" for r in records[3:]))
    change = codex.read()
    assert codex.session.bad_lines == 1 and codex.offset == path.stat().st_size
    assert not any("QQQQ" in json.dumps(i) for i in codex.session.items)
    assert len(change.appended) == len(CodexReader(str(fx.write_jsonl(tmp_path / "rollout-y.jsonl", records)))
                                       .read().appended) - 1


@pytest.mark.parametrize("summary", [False, True], ids=["full", "summary"])
def test_a_line_longer_than_a_read_but_under_the_limit_is_read_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, summary: bool) -> None:
    """A read is a chunk much smaller than the longest line kept: a line that does not fit is read
    again in a larger chunk, never skipped, wherever it falls and however the file is read."""
    monkeypatch.setattr(reader, "READ_CHUNK", 1024)
    records = fx.codex_session("/w")
    records.insert(3, fx.codex_answer("Q" * 20_000, "2025-10-03T10:00:09.000Z"))
    path = fx.write_jsonl(tmp_path / "rollout-x.jsonl", records)
    whole = CodexReader(str(path), summary=summary)
    whole.read()
    monkeypatch.setattr(reader, "READ_CHUNK", 1 << 20)
    expected = CodexReader(str(path), summary=summary)
    expected.read()
    assert whole.session.bad_lines == 0 and whole.offset == path.stat().st_size
    assert whole.session.to_state() == expected.session.to_state()
    if not summary:
        assert any("Q" * 20_000 in json.dumps(item) for item in whole.session.items)


def test_another_file_under_the_same_name_is_read_from_the_start(tmp_path: Path) -> None:
    path = fx.write_jsonl(tmp_path / "rollout-x.jsonl", fx.codex_session("/w"))
    codex = CodexReader(str(path))
    codex.read()
    new = [fx.codex_meta("/w")] + fx.codex_turn("A brand new conversation " + "z" * 3000, "2025-10-03T11:00:00.000Z")
    os.replace(fx.write_jsonl(tmp_path / "tmp.json", new), path)  # larger, and a new inode
    codex.read()
    assert [t.text[:24] for t in codex.session.turns] == ["A brand new conversation"]
    assert codex.read(ident=(0, 0)).empty  # not the file the caller looked at: not read


# --- pricing -----------------------------------------------------------------------------------


def test_cost_from_reported_usage() -> None:
    usage = {"claude-sonnet-4-5-20250929": Usage(input=1_000_000, cached_input=2_000_000, cache_write=1_000_000,
                                                 output=100_000)}
    cost = pricing.cost(usage)
    assert cost == {"currency": "USD", "input": 3.0, "cachedInput": 0.6, "cacheWrite": 3.75, "output": 1.5,
                    "total": 8.85, "priced": True}
    codex = pricing.cost({"gpt-5-codex": Usage(input=10_200, cached_input=10_200, output=600, reasoning=256)})
    assert codex["priced"] and codex["total"] == pytest.approx(10_200 * 1.25e-6 + 10_200 * 0.125e-6 + 600 * 10e-6)


def test_unknown_models_are_never_guessed() -> None:
    assert pricing.lookup("gpt-5.9-codex-ultra") is None  # no prefix matching
    assert pricing.lookup("claude-sonnet-4-5-20250929[1m]") == pricing.lookup("claude-sonnet-4-5")
    assert pricing.lookup("anthropic/claude-opus-4-1-20250805") == pricing.lookup("claude-opus-4-1")
    cost = pricing.cost({"gpt-5-codex": Usage(input=1_000), "my-local-llm": Usage(input=5, output=5)})
    assert cost["priced"] is False and cost["unpricedModels"] == ["my-local-llm"]
    assert cost["input"] == pytest.approx(1_000 * 1.25e-6)


def test_user_prices_override_and_extend_the_table() -> None:
    problems: list = []
    table = pricing.price_table({"my-local-llm": {"input": 0, "output": 0},
                                 "gpt-5-codex": {"input": 2.0, "cached_input": 0.2, "output": 20},
                                 "broken": {"input": "cheap"}}, problems)
    assert pricing.cost({"my-local-llm": Usage(input=5, output=5)}, table)["priced"] is True
    assert pricing.cost({"gpt-5-codex": Usage(input=1_000_000)}, table)["input"] == 2.0
    assert [(p.key, p.message) for p in problems] == [
        ("prices.broken", "setting 'prices.broken' needs non-negative numbers 'input' and 'output'")]


def test_a_read_replays_compactions_in_order_and_holds_a_bounded_number_of_replaced_items(tmp_path: Path) -> None:
    """Issue #36: a read's steps say what each compaction replaced; a file of many compactions,
    each replacing the window with 300 items, is read in several reads, none holding more than
    MAX_HELD_ITEMS items in replacements (and the one that crossed it)."""
    from ctxd.agents.session import MAX_HELD_ITEMS

    kept = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"kept {n}"}]}
            for n in range(300)]
    records = [fx.codex_meta("/w"), *fx.codex_turn("the first prompt", "2026-02-10T09:00:00.000Z")]
    records += [fx.codex_compacted(f"summary {n}", f"2026-02-10T10:{n // 60:02d}:{n % 60:02d}.000Z", kept)[0]
                for n in range(500)]
    path = fx.write_jsonl(fx.codex_path(tmp_path), records)
    reader = CodexReader(str(path))
    changes = []
    while True:
        changes.append(reader.read())
        held = sum(len(step.items) for step in changes[-1].steps if step.replace)
        assert held <= MAX_HELD_ITEMS + len(kept), held
        if reader.caught_up:
            break
        assert len(changes) < 10, "the reads do not move on"
    assert len(changes) >= 2 and reader.session.compactions == 500
    steps = [step for change in changes for step in change.steps]
    assert [step.compaction for step in steps if step.replace] == list(range(500))
    assert [len(step.items) for step in steps[:2]] == [1, 300]  # the history, then the first compaction's
    assert steps[1].at == "2026-02-10T10:00:00.000Z" and steps[0].items[0]["content"][0]["text"] == "the first prompt"


@pytest.mark.parametrize("agent,bad", [
    ("claude", {"type": {"x": 1}, "uuid": "z", "timestamp": "2025-10-03T11:00:05.000Z"}),
    ("claude", {"type": ["user"], "uuid": "z"}),
    ("codex", {"timestamp": "2025-10-03T10:00:07.000Z", "type": ["event_msg"], "payload": {}}),
    ("codex", {"timestamp": "2025-10-03T10:00:07.000Z", "type": "response_item", "payload": {"type": {"k": 1}}}),
    ("codex", {"timestamp": "2025-10-03T10:00:07.000Z", "type": "event_msg", "payload": {"type": ["token_count"]}}),
    ("codex", {"timestamp": "2025-10-03T10:00:07.000Z", "type": "compacted",
               "payload": {"message": "s", "replacement_history": [{"type": []}, {"type": "message", "role": "user",
                                                                                  "content": []}]}}),
])
def test_a_line_whose_type_is_no_string_is_skipped_and_the_session_read_on(tmp_path: Path, agent: str,
                                                                            bad: dict[str, Any]) -> None:
    """A `type` that is an object or an array raised TypeError (a set was asked whether it held
    it): the daemon's reader stopped at that line for good, its gauge frozen, and `ctxd
    sessions` left the session out."""
    workspace = "/home/u/ws"
    if agent == "claude":
        good, more = fx.claude_session(workspace), fx.claude_user("And the tests", "u9", "a2", workspace,
                                                                  "2025-10-03T11:00:09.000Z")
    else:
        good, more = fx.codex_session(workspace), fx.codex_turn("And the tests", "2025-10-03T10:00:09.000Z",
                                                                cwd=workspace)[1]
    name = "rollout-x.jsonl" if agent == "codex" else "s.jsonl"
    readers = []
    history = bad.get("payload", {}).get("replacement_history")
    clean = [{**bad, "payload": {**bad["payload"], "replacement_history": history[1:]}}] if history else []
    for folder, records in (("with", [*good, bad, more]), ("without", [*good, *clean, more])):
        path = tmp_path / folder / name
        path.parent.mkdir()
        path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in records))
        daemon = CodexReader(str(path), window=False) if agent == "codex" else ClaudeReader(
            str(path), claude.session_id(str(path)), window=False)
        daemon.read()
        assert daemon.caught_up and daemon.offset == path.stat().st_size
        read = summaries.summarize(str(path), agent, None, None)
        assert read is not None
        readers.append((daemon.session.turn_total, daemon.session.baseline, read.session.turn_total))
    assert readers[0] == readers[1] and readers[0][0] >= 1


@pytest.mark.parametrize("taken_up", [False, True])
def test_a_subagents_streamed_reply_is_billed_once_however_many_messages_come_between(tmp_path: Path,
                                                                                      taken_up: bool) -> None:
    """A reply streamed as two lines (its thinking, then its text) is billed once: the second
    replaces the first's usage. A reader that caught up keeps the session's latest 16 messages,
    and subagents running side by side shared them: once another subagent wrote 17 replies
    between the two lines, the second was billed again. Each subagent's file keeps its own."""
    workspace = "/home/u/ws"

    def replies(name: str, count: int) -> list[dict[str, Any]]:
        return [line for k in range(count) for line in fx.claude_assistant(
            [{"type": "thinking", "thinking": "x", "signature": "s"}, {"type": "text", "text": f"{name} {k}"}],
            f"{name}m{k}", f"{name}a{k}", None, workspace, "2026-01-01T10:00:01.000Z", fx.claude_usage(1, 10, 1_000, 7),
            isSidechain=True)]

    def written(path: Path, records: list[dict[str, Any]]) -> None:
        path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in records))

    main = tmp_path / "s.jsonl"
    written(main, [fx.claude_user("Run two agents", "u1", None, workspace, "2026-01-01T10:00:00.000Z")])
    folder = tmp_path / "s" / "subagents"
    folder.mkdir(parents=True)
    one, other = replies("a", 1), replies("b", 17)
    assert len(one) == 2  # (one reply, streamed as two lines)
    written(folder / "agent-a.jsonl", one[:1])
    written(folder / "agent-b.jsonl", [])
    live = ClaudeReader(str(main), "s", window=False)
    for step in (lambda: written(folder / "agent-b.jsonl", other), lambda: written(folder / "agent-a.jsonl", one)):
        live.read()
        live.trim()  # (as the follower does once a reader caught up)
        if taken_up:
            state = json.loads(json.dumps(live.position()))
            live = ClaudeReader(str(main), "s", window=False)
            live.restore(state)
        step()
    live.read()
    whole = ClaudeReader(str(main), "s", window=False)
    whole.read()
    assert live.session.total_usage() == whole.session.total_usage()
