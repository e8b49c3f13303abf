"""A session file with one hostile value anywhere is summarized and shown, never a failure.

`ctxd sessions` and the daemon's listing make every session's row in one pass: a value that makes
one row raise failed them for the whole workspace (a time at the end of year 9999 did, in the
cache's expiry), and a file that makes its reader raise is left out (a Qwen Code record whose
`subtype` was a list was). Hypothesis takes a line of the real Claude Code, Codex, Gemini CLI and
Qwen Code fixtures, a value in it (any depth), and puts a hostile one there: a time at the edge of
what datetime holds, numbers too large for a machine word or a float's range, negative counts,
wrong types, a lone surrogate. (In one line, or in every line that has that place.) The file is
summarized as a first `ctxd sessions` reads it, its fill counted, and its row made in both
formats, from the read and again from the summary as stored; nothing may raise.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ctxd import agents
from ctxd.agents.base import AgentConfig
from ctxd.sessions import overview, pricing, summaries

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "agents"
FILES = {"claude": ("claude-2.1.332.jsonl", "2009bcc5-85ba-431c-b4e2-481f4e482c80.jsonl"),
         "codex": ("codex-0.171.0.jsonl", "rollout-2026-11-26T21-18-00-019ac2b8-0000-7000-8000-000000000000.jsonl"),
         "gemini": ("gemini/session.jsonl", "session-2026-12-02T01-18-3863ff50.jsonl"),
         "qwen": ("qwen/session.jsonl", "2ffe4e28-b3a5-4bf4-b6b6-045e6b77ba91.jsonl")}
LINES = {agent: [json.loads(line) for line in (FIXTURES / name).read_text().splitlines() if line.strip()]
         for agent, (name, _) in FILES.items()}
HOSTILE = st.sampled_from([
    "9999-12-31T23:59:59Z", "9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00", "0001-01-01T00:00:00",
    2**63, -2**63, 2**70, -1, 10**30, 1e308, -1e308, 0.5, "", "x" * 300, None, True, [], {}, [1, "a"], {"a": {}},
    "NaN", "\ud800", "claude-opus-4-9[1m]",
])


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Where each value in a line is (a scalar's path, and each container's)."""
    found = [path] if path else []
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in children:
        found += _paths(child, (*path, key))
    return found


def _put(line: Any, path: tuple[Any, ...], value: Any) -> None:
    """`value` at `path` in `line`, when the line has that place."""
    try:
        place = line
        for key in path[:-1]:
            place = place[key]
        place[path[-1]]  # (there already: a place is replaced, none is made)
        place[path[-1]] = value
    except (IndexError, KeyError, TypeError):
        return


CASES = [(agent, n, path) for agent, lines in LINES.items() for n, line in enumerate(lines) for path in _paths(line)]
# Half the examples put the value in a field the readers take (the rest anywhere): a line's own
# fields are a few of the hundreds of values its content holds.
READ = {"timestamp", "type", "subtype", "model", "cwd", "sessionId", "id", "uuid", "parentUuid", "isSidechain",
        "message", "usage", "input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens",
        "cache_creation", "ephemeral_1h_input_tokens", "ephemeral_5m_input_tokens", "payload", "info",
        "total_token_usage", "last_token_usage", "cached_input_tokens", "reasoning_output_tokens", "total_tokens",
        "model_context_window", "compactMetadata", "preTokens",
        # Gemini CLI's and Qwen Code's
        "$set", "messages", "tokens", "input", "output", "cached", "thoughts", "tool", "total", "startTime",
        "lastUpdated", "kind", "systemPayload", "uiEvent", "usageMetadata", "promptTokenCount",
        "candidatesTokenCount", "cachedContentTokenCount", "totalTokenCount", "input_token_count",
        "output_token_count", "cached_content_token_count", "total_token_count", "compressedHistory",
        "originalTokenCount", "newTokenCount", "contextWindowSize", "provenance", "parts", "version"}
READ_CASES = [case for case in CASES if case[2][-1] in READ]
SETTINGS = settings(max_examples=400, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
PRICES = pricing.price_table({}, [])
CONFIGS = {agent.name: AgentConfig() for agent in agents.every()}
NOW = 1_795_000_000.0  # (2026-11: the fixtures' caches cold, a hostile time's maybe warm)


# Found by it, kept as examples: a Qwen Code `system` record whose `subtype` is a list.
QWEN_SUBTYPE = ("qwen", next(n for n, line in enumerate(LINES["qwen"]) if "subtype" in line), ("subtype",))


@SETTINGS
@example(case=QWEN_SUBTYPE, value=[], everywhere=False)
@example(case=QWEN_SUBTYPE, value={"a": {}}, everywhere=True)
@given(case=st.one_of(st.sampled_from(READ_CASES), st.sampled_from(CASES)), value=HOSTILE, everywhere=st.booleans())
def test_one_hostile_value_anywhere_in_a_session_is_summarized_and_shown(tmp_path: Path, case: tuple[str, int, tuple[Any, ...]],
                                                                        value: Any, everywhere: bool) -> None:
    """`everywhere`: the value in every line that has that place (every line's time, say), not one."""
    agent, n, path = case
    lines = copy.deepcopy(LINES[agent])
    for line in lines if everywhere else [lines[n]]:
        _put(line, path, value)
    file = tmp_path / FILES[agent][1]
    file.write_bytes("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines).encode("utf-8", "surrogatepass"))
    read = summaries.summarize(str(file), agent, None, None)
    assert read is not None
    used = summaries.fill(read.session, read.tail)
    for table in (True, False):
        shown = overview.Shown(PRICES, CONFIGS, table)
        with pytest.MonkeyPatch.context() as patch:  # (the cache's state at one time: made and kept alike)
            patch.setattr(time, "time", lambda: NOW)
            printed = shown(read.session, used)
            kept = shown.taken_up(shown.kept(printed))  # what the next run shows of it
        assert kept is not None and (kept.cells, kept.line) == (printed.cells, printed.line)
        again = summaries.shown_session(read.stored)
        if again is not None:
            shown(again, used)
