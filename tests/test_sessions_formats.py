"""The files today's agents write, read exactly (tests/fixtures/agents: real files, sanitized).

Earlier formats (Codex 0.46 rollouts, 2025 Claude Code transcripts) are tests/test_sessions_readers.py's.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ctxd.agents.claude import ClaudeReader
from ctxd.agents.codex import CodexReader
from ctxd.agents.session import Usage
from ctxd.protocol.items import validate_items

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "agents"


def test_codex_0_171_turns_usage_window_and_no_unread_records() -> None:
    reader = CodexReader(str(FIXTURES / "codex-0.171.0.jsonl"))
    reader.read()
    s = reader.session
    assert (s.version, s.model, s.cwd, s.title) == ("0.171.0", "gpt-5.5", "/home/user/app", "Add new.txt and bump app.py")
    # Each turn written as `item_completed` `UserMessage` (no `user_message` event any more).
    assert [t.text for t in s.turns] == ["Add new.txt and bump app.py", "Bump app.py again and drop the notes"]
    assert all(s.items[t.index - 1]["role"] == "user" for t in s.turns)
    assert s.baseline == 12_030 and s.context_window == 258_400 and s.baseline_items == len(s.items)
    # Six responses, three per process (a resume starts its running total again).
    assert s.cumulative == {"gpt-5.5": Usage(input=10_000, cached_input=52_300, output=330)}
    assert [(i["type"], i["call_id"]) for i in s.items if i["type"] in ("function_call", "custom_tool_call")] == [
        ("function_call", "c1"), ("custom_tool_call", "c2"), ("custom_tool_call", "c3"), ("function_call", "c4")]
    validate_items(s.items)
    assert s.unknown == {} and s.bad_lines == 0


def test_claude_2_1_turns_fill_subagent_cost_and_no_unread_records(tmp_path: Path) -> None:
    session = "2009bcc5-85ba-431c-b4e2-481f4e482c80"
    main = tmp_path / f"{session}.jsonl"
    shutil.copy(FIXTURES / "claude-2.1.332.jsonl", main)
    reader = ClaudeReader(str(main), session)
    reader.read()
    s = reader.session
    assert (s.version, s.model, s.title) == ("2.1.332", "claude-sonnet-4-5", "Add hello.txt and docs, drop the notes")
    assert [t.text for t in s.turns] == ["Add hello.txt and docs, drop the notes", "Bump app.py"]
    # The fill: the last main-chain reply's input + cache writes + cache reads + output, covering it.
    assert s.baseline == 20 + 100 + 5_000 + 15 and s.baseline_items == len(s.items)
    assert [i["name"] for i in s.items if i["type"] == "function_call"] == ["Write", "Edit", "Agent", "Bash", "Read",
                                                                          "Edit"]
    validate_items(s.items)
    assert s.unknown == {} and s.bad_lines == 0
    alone = s.cumulative["claude-sonnet-4-5"]
    assert alone == Usage(input=90, cached_input=31_420, cache_write=4_880, output=252)

    # The subagent's file, where Claude Code 2.1 keeps it: its requests are the session's cost too.
    subagents = tmp_path / session / "subagents"
    subagents.mkdir(parents=True)
    shutil.copy(FIXTURES / "claude-2.1.332-subagent.jsonl", subagents / "agent-a7bf686b5ede0ddbf.jsonl")
    reader = ClaudeReader(str(main), session)
    change = reader.read()
    s = reader.session
    assert change.usage and s.cumulative["claude-sonnet-4-5"] == Usage(input=100, cached_input=34_420,
                                                                       cache_write=7_960, output=280)
    assert s.baseline == 5_135 and "s1" not in {i.get("call_id") for i in s.items}  # not the main window
    # Read again with nothing new: counted once.
    reader.read()
    assert s.cumulative["claude-sonnet-4-5"].output == 280


def test_claude_subagents_behind_a_link_are_not_read(tmp_path: Path) -> None:
    session = "2009bcc5-85ba-431c-b4e2-481f4e482c80"
    main = tmp_path / "projects" / f"{session}.jsonl"
    main.parent.mkdir()
    shutil.copy(FIXTURES / "claude-2.1.332.jsonl", main)
    elsewhere = tmp_path / "elsewhere" / "subagents"
    elsewhere.mkdir(parents=True)
    shutil.copy(FIXTURES / "claude-2.1.332-subagent.jsonl", elsewhere / "agent-a.jsonl")
    (tmp_path / "projects" / session).symlink_to(elsewhere.parent)
    reader = ClaudeReader(str(main), session)
    reader.read()
    assert reader.session.cumulative["claude-sonnet-4-5"].output == 252  # the main chain's alone
