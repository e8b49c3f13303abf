"""Session summaries (issue #38): `ctxd sessions` reads a file once, and never shows a summary of
a file that changed under it (rewritten, truncated, replaced); a summary says what the full
reader says; slash-command sessions are titled and counted.

The CLI runs as a process (`python -m ctxd sessions`) over a state dir of the test's own.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ctxd.agents import claude, codex, skim
from ctxd.agents.claude import ClaudeReader, session_id
from ctxd.agents.codex import CodexReader
from ctxd.agents.session import Change
from ctxd.sessions import summaries
from tests import session_fixtures as fx
from tests.rpc import REPO

FIXTURES = REPO / "tests" / "fixtures" / "agents"


def sessions(tmp_path: Path, ws: Path, extra: dict[str, str] | None = None) -> list[dict[str, Any]]:
    env = {"HOME": str(tmp_path), "CODEX_HOME": str(tmp_path / "codex"), "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"),
           "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state"),
           "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", **(extra or {})}
    run = subprocess.run([sys.executable, "-m", "ctxd", "sessions", "--workspace", str(ws), "--format", "json"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    rows: list[dict[str, Any]] = json.loads(run.stdout)
    return rows


def claude_lines(ws: Path, prompt: str, reply_tokens: int = 15_000) -> list[dict[str, Any]]:
    return [fx.claude_user(prompt, "u1", None, ws, "2025-10-03T11:00:01.000Z"),
            *fx.claude_assistant([{"type": "text", "text": "Done."}], "msg_01", "a1", "u1", ws,
                                 "2025-10-03T11:00:02.000Z", fx.claude_usage(4, 100, reply_tokens, 20))]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    return folder


def test_a_file_that_did_not_change_is_shown_from_its_summary(tmp_path: Path, ws: Path) -> None:
    """The second run takes the summary (the file is not read again); a file changed in place with
    its size and mtime put back (its ctime moved) is read again, as one whose mtime moved."""
    path = fx.write_jsonl(fx.claude_path(tmp_path / "claude", ws), claude_lines(ws, "Add a flag AAAA"))
    assert [r["title"] for r in sessions(tmp_path, ws)] == ["Add a flag AAAA"]
    state = summaries.Summaries(tmp_path / "state" / "ctxd")
    updated = state._connect().execute("SELECT updated FROM file_summaries").fetchall()  # type: ignore[union-attr]
    assert [r["title"] for r in sessions(tmp_path, ws)] == ["Add a flag AAAA"]
    assert state._connect().execute("SELECT updated FROM file_summaries").fetchall() == updated  # type: ignore[union-attr]
    state.close()
    st = path.stat()
    path.write_bytes(path.read_bytes().replace(b"AAAA", b"BBBB"))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert [r["title"] for r in sessions(tmp_path, ws)] == ["Add a flag BBBB"]
    path.write_bytes(path.read_bytes().replace(b"BBBB", b"CCCC"))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert [r["title"] for r in sessions(tmp_path, ws)] == ["Add a flag CCCC"]


def test_a_summary_holding_what_strict_json_refuses_loads_as_it_was_saved(tmp_path: Path) -> None:
    """What strict JSON refuses (half a surrogate pair, escaped as `json` writes it: a row saved by
    an older ctxd, whose readers kept it; a number too large for it) loads as it was saved: such a
    row is not read again as if damaged."""
    facts = {"session": {"title": "Odd \udc80 name", "cost": 1e300}, "used": 12}
    store = summaries.Summaries(tmp_path)
    store.save([summaries.Stored("/s/a.jsonl", "claude", {"stamp": [1, 2, 3, 4]}, "/w", facts, "{}", 3)])
    loaded = store.load()
    store.close()
    assert list(loaded) == ["/s/a.jsonl"] and loaded["/s/a.jsonl"].facts == facts


@pytest.mark.parametrize("damage", ["not a database", "its schema's page overwritten", "its rows' page overwritten"])
def test_a_damaged_summaries_database_is_set_aside_and_made_again(tmp_path: Path, ws: Path, damage: str) -> None:
    """A summaries database SQLite finds damaged (garbage, or one of its pages overwritten, as a
    full disk or a copy made while it was written may leave it) is set aside with its journal,
    not kept: the rows are the same, and the run after takes its summaries from the new one
    (before, every run read every file again, and said nothing)."""
    fx.write_jsonl(fx.claude_path(tmp_path / "claude", ws), claude_lines(ws, "Add a flag AAAA"))
    first = sessions(tmp_path, ws)
    path = summaries.database_path(tmp_path / "state" / "ctxd")
    data = bytearray(path.read_bytes())
    if damage == "not a database":
        data = bytearray(b"not SQLite " * (len(data) // 11))
    elif damage == "its schema's page overwritten":  # (past the file's header): SQLite calls it malformed
        data[100:summaries.PAGE_BYTES] = b"\xff" * (summaries.PAGE_BYTES - 100)
    else:  # found as the rows are read, not as the database is opened
        data[summaries.PAGE_BYTES:2 * summaries.PAGE_BYTES] = b"\xff" * summaries.PAGE_BYTES
    path.write_bytes(data)
    damaged = bytes(data)
    assert sessions(tmp_path, ws) == first
    aside = path.with_name(path.name + summaries.DAMAGED)
    assert aside.read_bytes() == damaged  # kept as it was, beside the new one
    store = summaries.Summaries(tmp_path / "state" / "ctxd")
    updated = store._connect().execute("SELECT updated FROM file_summaries").fetchall()  # type: ignore[union-attr]
    assert len(updated) == 1
    assert sessions(tmp_path, ws) == first
    assert store._connect().execute("SELECT updated FROM file_summaries").fetchall() == updated  # type: ignore[union-attr]
    store.close()


def test_a_file_rewritten_in_place_under_its_summary_is_read_again(tmp_path: Path, ws: Path) -> None:
    """Same inode, same size, other bytes (the mtime moved): read from its start, never the old
    summary, also when the rewrite grew it."""
    path = fx.write_jsonl(fx.claude_path(tmp_path / "claude", ws), claude_lines(ws, "Add a flag AAAA", 15_000))
    assert [(r["title"], r["usedTokens"]) for r in sessions(tmp_path, ws)] == [("Add a flag AAAA", 15_124)]
    with path.open("r+b") as out:  # in place: the same inode
        out.write(path.read_bytes().replace(b"AAAA", b"BBBB").replace(b"15000", b"16000"))
    assert [(r["title"], r["usedTokens"]) for r in sessions(tmp_path, ws)] == [("Add a flag BBBB", 16_124)]
    with path.open("r+b") as out:  # in place, and longer: what was read is not what is there
        out.write(path.read_bytes().replace(b"BBBB", b"CCCC") + b"\n")
    assert [r["title"] for r in sessions(tmp_path, ws)] == ["Add a flag CCCC"]


def test_a_file_truncated_under_its_summary_is_read_again(tmp_path: Path, ws: Path) -> None:
    records = fx.codex_session(ws)
    path = fx.write_jsonl(fx.codex_path(tmp_path / "codex"), records)
    [row] = sessions(tmp_path, ws)
    assert (row["turns"], row["usedTokens"]) == (1, 12_000)
    fx.write_jsonl(path, records[:-2])  # cut before the last report (a shorter file)
    [row] = sessions(tmp_path, ws)
    assert row["usedTokens"] != 12_000 and row["cost"]["total"] < 0.02


def test_a_file_replaced_under_its_summary_is_read_again(tmp_path: Path, ws: Path) -> None:
    path = fx.write_jsonl(fx.claude_path(tmp_path / "claude", ws), claude_lines(ws, "Add a flag AAAA"))
    assert [r["title"] for r in sessions(tmp_path, ws)] == ["Add a flag AAAA"]
    other = fx.write_jsonl(tmp_path / "other.jsonl", claude_lines(ws, "Drop the flag ZZZZ"))
    st = path.stat()
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(other, path)  # another inode under the name, same mtime
    assert [r["title"] for r in sessions(tmp_path, ws)] == ["Drop the flag ZZZZ"]


def test_a_file_that_grew_is_read_from_where_its_summary_stopped(tmp_path: Path, ws: Path) -> None:
    """Appended lines are read on top of the summary: the same rows as reading it whole."""
    path = fx.write_jsonl(fx.codex_path(tmp_path / "codex"), fx.codex_session(ws))
    sessions(tmp_path, ws)
    state = summaries.Summaries(tmp_path / "state" / "ctxd").state(str(path))
    assert state is not None and state["offset"] == path.stat().st_size
    fx.append_jsonl(path, [*fx.codex_turn("and the docs too", "2025-10-03T10:01:00.000Z"),
                           fx.codex_token_count(15_000, {"input_tokens": 35_000, "cached_input_tokens": 17_000,
                                                         "output_tokens": 900, "reasoning_output_tokens": 300,
                                                         "total_tokens": 35_900}, "2025-10-03T10:01:05.000Z")])
    grown = sessions(tmp_path, ws)
    whole = summaries.summarize(str(path), "codex", None, None)
    assert whole is not None
    [row] = grown
    assert (row["turns"], row["usedTokens"], row["lastActivity"]) == (2, 15_000, "2025-10-03T10:01:05.000Z")
    assert row["usage"] == whole.session.total_usage().as_dict()


def test_a_summary_read_less_far_never_replaces_one_read_further(tmp_path: Path) -> None:
    """Two processes summarize one file: the row of the one that read less far is not written over
    the other's; a row for another file under that name (a new inode) is, and so is any row of a
    batch larger than one query's values."""
    store = summaries.Summaries(tmp_path / "state")
    same = {"stamp": [1, 2, 300, 5]}

    def row(path: str, file: dict[str, Any], offset: int) -> summaries.Stored:
        return summaries.Stored(path, "claude", file, "/w", {"session": {}, "read": offset}, json.dumps({"offset": offset}),
                                offset)

    store.save([row("/s.jsonl", same, 300)])
    store.save([row("/s.jsonl", same, 100)])
    assert store.state("/s.jsonl") == {"offset": 300}
    assert store.load()["/s.jsonl"].facts == {"session": {}, "read": 300}
    store.save([row("/s.jsonl", {"stamp": [1, 3, 100, 6]}, 100)])
    assert store.state("/s.jsonl") == {"offset": 100}
    many = [row(f"/{n}.jsonl", same, n) for n in range(2 * summaries.SAVE_BATCH + 5)]
    store.save(many)
    store.save([row(f"/{n}.jsonl", same, n - 1) for n in range(len(many))])
    assert [store.state(f"/{n}.jsonl") for n in range(len(many))] == [{"offset": n} for n in range(len(many))]
    store.close()


def test_a_subagent_file_that_grew_is_read_again(tmp_path: Path, ws: Path) -> None:
    """A Claude session's cost includes its subagents' files: one that changes makes the summary stale."""
    path = fx.write_jsonl(fx.claude_path(tmp_path / "claude", ws), claude_lines(ws, "Add a flag"))
    [before] = sessions(tmp_path, ws)
    sub = path.with_suffix("") / "subagents" / "agent-1.jsonl"
    fx.write_jsonl(sub, fx.claude_assistant([{"type": "text", "text": "sub"}], "msg_s1", "s1", None, ws,
                                            "2025-10-03T11:00:03.000Z", fx.claude_usage(1_000, 0, 0, 500)))
    [after] = sessions(tmp_path, ws)
    assert after["cost"]["total"] > before["cost"]["total"]


def test_a_session_started_by_a_slash_command_is_titled_and_counted(tmp_path: Path, ws: Path) -> None:
    """`/init` (the command, then the prompt it stands for, isMeta, then the reply) is the title
    and a turn; a local command (`/model`, answered by its own output) is neither."""
    t = "2025-10-03T11:00:0{}.000Z".format
    command = ("<command-message>init is analyzing your codebase…</command-message>\n"
               "<command-name>/init</command-name>")
    records = [
        fx.claude_user("<command-name>/model</command-name>\n<command-message>model</command-message>\n"
                       "<command-args></command-args>", "m1", None, ws, t(0)),
        fx.claude_user("<local-command-stdout>Set model to opus</local-command-stdout>", "m2", "m1", ws, t(0)),
        fx.claude_user(command, "u1", "m2", ws, t(1)),
        fx.claude_user([{"type": "text", "text": "Please analyze this codebase and create a CLAUDE.md file"}],
                       "u2", "u1", ws, t(1), isMeta=True),
        *fx.claude_assistant([{"type": "text", "text": "Wrote CLAUDE.md."}], "msg_01", "a1", "u2", ws, t(2),
                             fx.claude_usage(4, 100, 9_000, 20)),
    ]
    fx.write_jsonl(fx.claude_path(tmp_path / "claude", ws), records)
    [row] = sessions(tmp_path, ws)
    assert (row["title"], row["turns"]) == ("/init", 1)
    reader = ClaudeReader(str(fx.claude_path(tmp_path / "claude", ws)), fx.CLAUDE_ID)  # the daemon's reader
    change = reader.read()
    assert reader.session.title == "/init" and [t.text for t in change.turns] == ["/init"]
    # A command with arguments names them; a turn before it keeps the title.
    fx.append_jsonl(fx.claude_path(tmp_path / "claude", ws), [
        fx.claude_user("<command-name>/review</command-name>\n<command-args>the last change</command-args>",
                       "u3", "a1", ws, t(3)),
        *fx.claude_assistant([{"type": "text", "text": "Looks fine."}], "msg_02", "a2", "u3", ws, t(4),
                             fx.claude_usage(4, 100, 9_500, 20))])
    [row] = sessions(tmp_path, ws)
    assert (row["title"], row["turns"]) == ("/init", 2)
    assert [t.text for t in reader.read().turns] == ["/review the last change"]


def codex_repeated(ws: str, both_forms: bool) -> list[dict[str, Any]]:
    """A Codex session whose user typed the same prompt twice ("continue"), each its own turn; in
    `both_forms`, each turn written as `user_message` and as `item_completed` `UserMessage` (one
    turn in two forms, as some versions write it)."""
    t = "2025-10-03T10:00:{:02d}.000Z".format
    records = [fx.codex_meta(ws)]
    for n, text in enumerate(["Fix the parser", "continue", "continue"]):
        records += fx.codex_turn(text, t(4 * n + 1), cwd=ws)
        if both_forms:
            records.append({"timestamp": t(4 * n + 1), "type": "event_msg", "payload": {
                "type": "item_completed", "item": {"type": "UserMessage", "content": [{"type": "text", "text": text}]}}})
        records.append(fx.codex_answer(f"Step {n} done.", t(4 * n + 2)))
        total = 1_000 * (n + 1)
        records.append(fx.codex_token_count(1_000, {"input_tokens": total - 300, "cached_input_tokens": 0,
                                                    "output_tokens": 300, "reasoning_output_tokens": 0,
                                                    "total_tokens": total}, t(4 * n + 3)))
    return records


def fixture_files(tmp_path: Path) -> list[tuple[str, str]]:
    """Session files of every shape the readers know, for the summary against the full reader."""
    ws = "/home/user/app"
    files = [(str(FIXTURES / "claude-2.1.332.jsonl"), "claude"),
             (str(FIXTURES / "codex-0.171.0.jsonl"), "codex")]
    made = {
        "codex-old": (fx.codex_session(ws), "codex"),
        "codex-compacted": (fx.codex_history(ws, ["alpha", "beta", "gamma"], replacement=[False, True]),
                            "codex"),
        "codex-repeated": (codex_repeated(ws, both_forms=False), "codex"),
        "codex-repeated-both-forms": (codex_repeated(ws, both_forms=True), "codex"),
        "claude-old": (fx.claude_session(ws), "claude"),
        "claude-compacted": (fx.claude_history(ws, ["alpha", "beta", "gamma"]), "claude"),
        "claude-rewound": (fx.claude_session(ws) + [
            fx.claude_user("No: a --debug flag", "u1c", "a1-2", ws, "2025-10-03T11:10:00.000Z"),
            fx.claude_user([{"type": "tool_result", "tool_use_id": "x", "content": "after"}], "u1d", "u1c", ws,
                           "2025-10-03T11:10:01.000Z")], "claude"),
    }
    for name, (records, agent) in made.items():
        files.append((str(fx.write_jsonl(tmp_path / f"{name}.jsonl", records)), agent))
    return files


def test_a_summary_says_what_the_full_reader_says(tmp_path: Path) -> None:
    """Title, turns, fill and what comes after it, cost, model, times, compactions and the cache's
    facts: the summary reader (which skims the lines) and the daemon's reader agree on every shape."""
    for path, agent in fixture_files(tmp_path):
        full = CodexReader(path, window=False) if agent == "codex" else ClaudeReader(
            path, session_id(path), window=False)
        full.read()
        read = summaries.summarize(path, agent, None, None)
        assert read is not None
        a, b = full.session, read.session
        for name in ("title", "turn_count", "baseline", "last_activity", "started", "model", "compactions",
                     "agent_compactions", "cwd", "id", "version", "context_window", "last_request_at", "cache_1h",
                     "unknown"):
            assert getattr(a, name) == getattr(b, name), (path, name)
        assert b.first_request is None  # (the owner's mirror estimates it: jsonl.py `_skim_lines`)
        assert a.total_usage() == b.total_usage(), path
        assert read.tail == a.tail, path


def test_a_summary_taken_up_again_says_what_one_read_says(tmp_path: Path) -> None:
    """A file read in two parts (its summary kept between them) ends as one read of it whole."""
    for path, agent in fixture_files(tmp_path):
        data = Path(path).read_bytes()
        cut = data.rfind(b"\n", 0, len(data) // 2) + 1
        part = tmp_path / "part" / Path(path).name
        part.parent.mkdir(exist_ok=True)
        part.write_bytes(data[:cut])
        first = summaries.summarize(str(part), agent, None, None)
        assert first is not None and first.stored.state is not None
        state = json.loads(first.stored.state)  # as stored
        with part.open("ab") as out:
            out.write(data[cut:])
        later = summaries.summarize(str(part), agent, state, None)
        whole = summaries.summarize(path, agent, None, None)
        assert later is not None and whole is not None
        assert later.read < len(data)  # only what was added was read
        for name in ("title", "turn_count", "baseline", "last_activity", "model", "compactions"):
            assert getattr(later.session, name) == getattr(whole.session, name), (path, name)
        assert later.session.total_usage() == whole.session.total_usage(), path
        assert later.tail == whole.tail, path


def test_a_state_strict_json_cannot_hold_is_stored_as_json_reads_it_back() -> None:
    """A reader's state is written by the protocol's strict encoder; what strict JSON cannot hold
    (an infinite number, a lone surrogate) is written by `json` instead, and reads back the same."""
    for state in ({"offset": 3, "title": "caf\u00e9 \u2028"}, {"offset": 3, "cost": float("inf")},
                  {"offset": 3, "title": "\udc80"}):
        assert json.loads(summaries.json_text(state)) == state


def odd_claude_lines(ws: str) -> list[dict[str, Any]]:
    """Claude Code lines that `ClaudeReader._take_plain` must leave to `record`, or read as it does:
    escapes, a sidechain, streamed copies keyed by requestId or uuid, a synthetic reply, blocks of
    unknown kinds beside tool results, a slash command waiting for the model, a compaction."""
    t = "2025-10-03T12:00:{:02d}.000Z".format
    result: list[Any] = [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]
    usage = fx.claude_usage(3, 50, 2_000, 10)
    lines: list[dict[str, Any]] = [
        fx.claude_user("Fix the \"quoted\" path", "p1", None, "C:\\Users\\dev\\app", t(1)),
        *fx.claude_assistant([{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}], "m1", "a1", "p1", ws,
                             t(2), usage),
        fx.claude_user(result, "r1", "a1", ws, t(3), version="2.1.3 \"beta\""),
        fx.claude_user(result + [{"type": "text", "text": "note"}, {"type": "image", "source": {}}], "r2", "r1", ws,
                       t(4)),
        fx.claude_user(result + [{"type": "document"}], "r3", "r2", ws, t(5)),
        fx.claude_user(result + ["not a block"], "r4", "r3", ws, t(6)),
        fx.claude_user(result, "r5", "r4", ws, t(7), isSidechain=True),
        fx.claude_user(result, "r6", "r5", ws, t(8), isCompactSummary=True),
        *fx.claude_assistant([{"type": "text", "text": "a"}], "m2", "a2", "r6", ws, t(9), usage, isSidechain=True),
        *fx.claude_assistant([{"type": "text", "text": "b"}], "m3", "a3", "r6", ws, t(10), usage,
                             model="<synthetic>"),
        *fx.claude_assistant([{"type": "text", "text": "c"}, {"type": "text", "text": "d"}], "m4", "a4", "a3", ws,
                             t(11), fx.claude_usage(4, 60, 2_100, 12)),
        {**fx.claude_assistant([{"type": "text", "text": "e"}], "m5", "a5", "a4-1", ws, t(12), usage)[0],
         "message": {"role": "assistant", "model": "claude-sonnet-4-5-20250929", "content": [], "usage": usage}},
        {**fx.claude_assistant([{"type": "text", "text": "f"}], "m6", "a6", "a5", ws, t(13), usage)[0],
         "requestId": None, "message": {"role": "assistant", "content": [], "usage": {"input_tokens": "many"}}},
        fx.claude_user("<command-name>/review</command-name>", "c1", "a6", ws, t(14)),
        fx.claude_user(result + [{"type": "text", "text": "meta"}], "r7", "c1", ws, t(15), isMeta=True),
        *fx.claude_assistant([{"type": "text", "text": "g"}], "m7", "a7", "r7", ws, t(16), usage),
        *fx.claude_compact("k1", "a7", ws, t(17), "Summary."),
        fx.claude_user(result, "r8", "k1-s", ws, t(18)),
        *fx.claude_assistant([{"type": "text", "text": "h"}], "m8", "a8", "r8", ws, t(19), usage),
        fx.claude_user(result, "r9", "a8", ws, t(20)),
    ]
    return lines


def counted_runs(native: Any) -> tuple[Any, list[int]]:
    """`native` (_claude or _codex, or None where it is not built) as a reader uses it, with the count
    of the rows its `run` read at once."""
    folded = [0]

    def run(*args: Any) -> Any:
        found = native.run(*args)
        folded[0] += found[0] - args[2] if found is not None else 0
        return found

    return (SimpleNamespace(run=run) if native is not None else None), folded


def summarized_ways(path: str) -> tuple[list[summaries.Read], int, int]:
    """`path` summarized three ways: runs of plain lines read at once (`ClaudeReader.fold`, _claude.c,
    where it is built), each plain line by `ClaudeReader._take_plain`, and every line's record built;
    with how many lines the first way read at once and the second took plain."""
    real_plain, real_native = ClaudeReader._take_plain, claude._claude
    taken = 0

    def counted(reader: ClaudeReader, data: bytes, row: tuple[Any, ...], change: Change) -> bool:
        nonlocal taken
        took = real_plain(reader, data, row, change)
        taken += took
        return took

    reads = []
    try:
        claude._claude, folded = counted_runs(real_native)
        reads.append(summaries.summarize(path, "claude", None, None))
        claude._claude = None  # type: ignore[assignment]
        ClaudeReader._take_plain = counted  # type: ignore[method-assign, assignment]
        reads.append(summaries.summarize(path, "claude", None, None))
        ClaudeReader._take_plain = lambda *_: False  # type: ignore[method-assign]
        reads.append(summaries.summarize(path, "claude", None, None))
    finally:
        ClaudeReader._take_plain, claude._claude = real_plain, real_native  # type: ignore[method-assign]
    assert all(read is not None for read in reads)
    return [read for read in reads if read is not None], folded[0], taken


def assert_same_summaries(reads: list[summaries.Read]) -> None:
    first, *others = reads
    for other in others:
        assert json.loads(first.stored.state or "") == json.loads(other.stored.state or "")
        assert first.stored.facts == other.stored.facts
        assert first.session.total_usage() == other.session.total_usage()
        assert first.tail == other.tail


def test_the_plain_lines_ways_read_a_summary_as_the_records_way(tmp_path: Path) -> None:
    """`ClaudeReader.fold` (runs of assistant replies and tool results read at once, in C) and
    `ClaudeReader._take_plain` (each such line read from the skimmed row) end where building each
    line's record ends: the same saved reader, session, cost and tail."""
    files = [path for path, agent in fixture_files(tmp_path) if agent == "claude"]
    odd = odd_claude_lines("/home/user/app")
    files += [str(fx.write_jsonl(tmp_path / f"odd-{n}.jsonl", odd[:n])) for n in range(1, len(odd) + 1)]  # each its last
    folded = taken = 0
    for path in files:
        reads, run, took = summarized_ways(path)
        assert_same_summaries(reads)
        folded, taken = folded + run, taken + took
    assert taken > 10  # the plain way was taken, for most lines
    assert folded > 10 or claude._claude is None  # and most were read in runs


@pytest.mark.skipif(claude._claude is None, reason="the C extension is not built here (setup.py: no compiler)")
def test_a_run_read_at_once_keeps_the_readers_bounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run longer than the messages and lines a reader remembers: a streamed copy of a message it
    forgot is billed again, and a rewind past the lines it forgot reads the file again, as line by
    line (bounds made small here)."""
    monkeypatch.setattr(claude, "MAX_MESSAGES", 3)
    monkeypatch.setattr(claude, "MAX_LINES", 5)
    monkeypatch.setattr(claude, "_RUN_LIMITS", (3, claude.MAX_TOKENS))
    ws, session = "/w", "00000000-0000-4000-8000-000000000001"
    lines = [fx.claude_user("start", "u0", None, ws, "2025-10-03T11:00:00.000Z", session)]
    parent = "u0"
    # Streamed copies next to their message (replacing its usage), and copies of messages forgotten
    # by then (billed again).
    for n, message in enumerate(["m0", "m0", "m1", "m2", "m3", "m4", "m1", "m5", "m5", "m6", "m2", "m7"]):
        lines += fx.claude_assistant([{"type": "text", "text": f"part {n}"}], message, f"a{n}", parent, ws,
                                     f"2025-10-03T11:00:{n + 1:02d}.000Z", fx.claude_usage(10 + n, 100, 1_000, 20),
                                     session_id=session)
        parent = f"a{n}"
    lines.append(fx.claude_user("again", "u9", "a1", ws, "2025-10-03T11:01:00.000Z", session))  # a rewind
    path = str(fx.write_jsonl(tmp_path / "bounded.jsonl", lines))
    reads, folded, _ = summarized_ways(path)
    assert_same_summaries(reads)
    assert folded >= 5


@pytest.mark.skipif(claude._claude is None, reason="the C extension is not built here (setup.py: no compiler)")
def test_prompts_are_read_in_the_runs_around_them_as_record_reads_them(tmp_path: Path) -> None:
    """A conversation's prompts (one of several lines, escaped in the file) and Claude Code's own
    texts (a caveat, a command's output) are read in the runs of replies and tool results around
    them, each prompt a turn; a slash command and a prompt that rewinds are left to `record`, which
    reads them as it always did: the same summary all three ways."""
    ws, t = "/w", "2025-10-03T12:00:{:02d}.000Z".format
    result = [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]
    usage = fx.claude_usage(3, 50, 2_000, 10)
    plain = [
        fx.claude_user("Fix the parser", "u1", None, ws, t(1)),
        *fx.claude_assistant([{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}], "m1", "a1", "u1", ws,
                             t(2), usage),
        fx.claude_user(result, "r1", "a1", ws, t(3)),
        *fx.claude_assistant([{"type": "text", "text": "Done."}], "m2", "a2", "r1", ws, t(4), usage),
        fx.claude_user("Caveat: the messages below were generated by the user", "c1", "a2", ws, t(5)),
        fx.claude_user("<local-command-stdout>ok</local-command-stdout>", "c2", "c1", ws, t(6)),
        fx.claude_user("Now the tests,\nand \"quoted\" names", "u2", "c2", ws, t(7)),
        *fx.claude_assistant([{"type": "text", "text": "Sure."}], "m3", "a3", "u2", ws, t(8), usage),
    ]
    path = str(fx.write_jsonl(tmp_path / "prompts.jsonl", plain))
    reads, folded, _ = summarized_ways(path)
    assert_same_summaries(reads)
    assert folded == len(plain)  # every line in runs
    session = reads[0].session
    assert (session.title, session.turn_count) == ("Fix the parser", 2)
    assert session.turns[-1].text == "Now the tests, and \"quoted\" names"

    odd = [*plain, fx.claude_user("<command-name>/review</command-name>", "k1", "a3", ws, t(9)),
           fx.claude_user("Try again", "u3", "a1", ws, t(10))]  # a command, then a rewind to a1
    path = str(fx.write_jsonl(tmp_path / "odd.jsonl", odd))
    reads, folded, _ = summarized_ways(path)
    assert_same_summaries(reads)
    assert folded == len(plain)
    assert reads[0].session.rewinds == 1


@pytest.mark.skipif(codex._codex is None, reason="the C extension is not built here (setup.py: no compiler)")
def test_codex_turns_are_read_in_the_runs_around_them_as_take_reads_them(tmp_path: Path) -> None:
    """A rollout's turns (`user_message`, an escaped one, and the `UserMessage` item written beside
    it) are read in the runs of reports around them, each turn once: the same summary as line by line."""
    t = "2026-02-10T10:00:{:02d}.000Z".format
    total = {"input_tokens": 900, "cached_input_tokens": 0, "output_tokens": 10, "total_tokens": 910}
    lines = [fx.codex_meta("/w"), *fx.codex_turn("Fix it", t(1), cwd="/w"), fx.codex_token_count(910, total, t(2)),
             {"timestamp": t(3), "type": "event_msg", "payload": {"type": "user_message", "message": 'And "this",\ntoo'}},
             {"timestamp": t(3), "type": "event_msg", "payload": {"type": "item_completed", "item": {
                 "type": "UserMessage", "content": [{"type": "text", "text": 'And "this",\ntoo'}]}}},
             fx.codex_token_count(1_000, {**total, "input_tokens": 1_900, "total_tokens": 1_910}, t(4))]
    path = str(fx.write_jsonl(tmp_path / "rollout.jsonl", lines))
    reads, folded = summarized_codex_ways(path)
    assert_same_summaries(reads)
    session = reads[0].session
    assert (session.title, session.turn_count) == ("Fix it", 2)
    assert folded >= 4  # the second turn's lines with the reports around them


_IDS = st.sampled_from(["u1", "u2", "u3", "a1", "a2", "m1", "m2"])
_ODD: st.SearchStrategy[Any] = st.none() | st.booleans() | st.integers(-2, 2) | st.text(max_size=4) | st.just(1.5) | st.just([]) | st.just({})
_USAGE = st.fixed_dictionaries({"input_tokens": st.integers(0, 9), "output_tokens": st.integers(0, 9)}, optional={
    "cache_read_input_tokens": st.integers(-5, 10**12), "cache_creation_input_tokens": st.integers(0, 50),
    "cache_creation": st.fixed_dictionaries({"ephemeral_1h_input_tokens": st.integers(0, 60)}),
    "service_tier": st.just("standard")})


def _claude_line(kind: str, uuid: str, parent: str, request: str, message: dict[str, Any], odd: dict[str, Any],
                 odd_message: dict[str, Any], timestamp: str) -> dict[str, Any]:
    line = {"type": kind, "uuid": uuid, "parentUuid": parent, "timestamp": timestamp,
            "isSidechain": False, "cwd": "/w", "sessionId": "s1", "version": "2.1.3", "requestId": request,
            "message": {**message, **odd_message}}
    if kind == "system":
        line.update(subtype="compact_boundary", compactMetadata={"trigger": "auto", "preTokens": 100})
    return {**line, **odd}


_TEXT = st.sampled_from(["Fix it", "<command-name>/init</command-name>", "<local-command-stdout>ok",
                         "Caveat: x", 'say "hi"'])
_BLOCKS = st.lists(st.sampled_from([{"type": "tool_result", "tool_use_id": "t", "content": "ok"},
                                    {"type": "text", "text": "note"}, {"type": "image", "source": {}},
                                    {"type": "document"}, "not a block"]), min_size=1, max_size=3)
_MESSAGES = {
    "user": st.fixed_dictionaries({"role": st.just("user"), "content": _TEXT | _BLOCKS}),
    "assistant": st.fixed_dictionaries({"role": st.just("assistant"), "id": _IDS, "usage": _USAGE,
                                        "model": st.sampled_from(["claude-sonnet-4-5", "claude-opus-4-1", "<synthetic>"]),
                                        "content": st.just([{"type": "text", "text": "ok"}])}),
    "system": st.just({}),
}
_LINE = st.sampled_from(sorted(_MESSAGES)).flatmap(lambda kind: st.builds(
    _claude_line, st.just(kind), _IDS, _IDS, _IDS, _MESSAGES[kind],
    st.dictionaries(st.sampled_from(["isSidechain", "isMeta", "isCompactSummary", "cwd", "version", "timestamp",
                                     "uuid", "requestId", "subtype", "message"]), _ODD | st.just('a"b'), max_size=2),
    st.dictionaries(st.sampled_from(["id", "model", "usage", "content"]), _ODD | st.just('a"b'), max_size=1),
    st.sampled_from(["2025-10-03T12:00:00.000Z", "2025-10-03T12:00:07.000Z", "2025-10-03T12:00:00.000Z" * 3])))


@settings(max_examples=200, deadline=None)
@given(st.lists(_LINE, min_size=1, max_size=14))
def test_the_plain_lines_way_and_the_records_way_agree_on_any_lines(lines: list[dict[str, Any]]) -> None:
    """Lines of any shape (fields of the wrong type, escapes, sidechains, synthetic replies, streamed
    copies, slash commands, compactions, rewinds): the two ways end in the same summary."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = str(fx.write_jsonl(Path(folder) / "any.jsonl", lines))
        reads, _, _ = summarized_ways(path)
        assert_same_summaries(reads)


@pytest.mark.skipif(not skim.NATIVE, reason="the C extension is not built here (setup.py: no compiler)")
@settings(max_examples=300, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
                    max_leaves=12),
       st.sampled_from([None, 3, 7]))
def test_the_skimmer_and_its_python_twin_agree(value: Any, cut: int | None) -> None:
    """skim.py's Python functions answer as the C extension does, on JSON and on JSON cut short."""
    line = json.dumps({"type": "x", "v": value, "w": [value, {"k": value}, {"type": value}]}, ensure_ascii=False).encode()
    if cut is not None:
        line = line[:-cut]
    keys = (b"type", b"v", b"w", b"k", b"missing")
    assert skim.fields(line, 0, keys) == skim.py_fields(line, 0, keys)
    assert skim.values(line, 0, len(line), keys) == skim.py_values(line, 0, len(line), keys)
    found = skim.py_fields(line, 0, keys)
    if found is not None and found[4] >= 0:
        assert skim.kinds(line, found[4], found[5]) == skim.py_kinds(line, found[4], found[5])
    text = line + b"\n" + line + b"\n\n" + b'{"type":"skip"}\n'
    for skip in ((), (b'"x"',), (b'"skip"',)):
        assert skim.lines(text, 0, len(text), b"type", skip, (b"k",)) == skim.py_lines(
            text, 0, len(text), b"type", skip, (b"k",))


def test_sessions_read_in_worker_processes_are_shown_as_read_in_one(tmp_path: Path, ws: Path) -> None:
    """More than PARALLEL_BYTES to read: `ctxd sessions` reads in forked workers, which hand each
    session back as its summary, made again on arrival (`summaries.Read.shown_only`). Every row is
    the one made from the reader's own session in this process, and the one a second run shows."""
    from ctxd.sessions import overview, pricing

    padding = json.dumps({"type": "file-history-snapshot", "messageId": "m", "snapshot": {"pad": "x" * 8000}}).encode()
    paths = []
    for n in (1, 2, 3):
        session = f"0000000{n}-0000-4000-8000-000000000000"
        lines = [fx.claude_user(f"prompt {n}", "u1", None, ws, "2025-10-03T11:00:01.000Z", session),
                 *fx.claude_assistant([{"type": "text", "text": "Done."}], f"msg_{n}", "a1", "u1", ws,
                                      "2025-10-03T11:00:02.000Z", fx.claude_usage(4, 100, 1_000 * n, 20),
                                      session_id=session)]
        path = fx.write_jsonl(fx.claude_path(tmp_path / "claude", ws, session), lines)
        if n < 3:
            with path.open("ab") as handle:
                handle.write((padding + b"\n") * ((summaries.PARALLEL_BYTES // 2 + 1024 * 1024) // len(padding)))
        paths.append(str(path))
    first = sessions(tmp_path, ws)
    assert sessions(tmp_path, ws) == first
    prices = pricing.price_table()
    expected = []
    for name in paths:
        read = summaries.summarize(name, "claude", None, None)
        assert read is not None
        expected.append(overview.summary(read.session, prices, None, summaries.fill(read.session, read.tail)))
    by_path = {row["path"]: row for row in first}
    assert [by_path[row["path"]] for row in expected] == expected
    assert [row["title"] for row in expected] == ["prompt 1", "prompt 2", "prompt 3"]


def test_each_row_has_its_own_sessions_window_and_compaction_point() -> None:
    """`ctxd sessions` looks each agent's limits up once per model and stated window: every row
    still has the window and compaction point of its own agent, model, stated window and config."""
    from ctxd.agents.base import AgentConfig
    from ctxd.agents.session import Session
    from ctxd.sessions import overview, pricing

    def session(agent: str, model: str | None, window: int | None) -> Session:
        made = Session(agent=agent, path=f"/s/{agent}-{model}-{window}.jsonl")
        made.id, made.model, made.context_window = f"{agent}-{model}-{window}", model, window
        return made

    configs = {"codex": AgentConfig(compact_limit=150_000), "claude": AgentConfig(compact_percent=50.0)}
    shown = overview.Shown(pricing.price_table(), configs, table=True)
    made = [session("claude", "claude-sonnet-4-5", None), session("codex", "gpt-5-codex", 258_400),
            session("claude", "claude-opus-4-1", None), session("codex", "gpt-5-codex", 120_000),
            session("codex", "gpt-5-codex", 258_400), session("claude", None, None), session("codex", None, None)]
    rows = [shown(one, 10_000).row for one in made]
    expected = [overview.summary(one, shown.prices, configs[one.agent], 10_000) for one in made]
    assert rows == expected
    assert len({(row["contextWindow"], row["autoCompactLimit"]) for row in rows}) >= 4


@pytest.mark.parametrize("made", ["list", "generator"])
def test_the_jobs_of_a_worker_that_dies_are_read_here_each_once_in_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, made: str) -> None:
    """A worker killed mid-read (the OOM killer, say): `reads` reads what it had not given back in
    this process, every job once and in the jobs' order, whether they came as a list (the owner's
    listing, which takes each read as the next file's) or as they are made (`ctxd sessions`)."""
    files = fixture_files(tmp_path)
    victim, parent = files[2][0], os.getpid()
    summarize = summaries.summarize

    def dying(path: str, *rest: Any) -> summaries.Read | None:
        if path == victim and os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
        return summarize(path, *rest)

    monkeypatch.setattr(summaries, "summarize", dying)  # (the workers are forked: they have it too)
    jobs: list[summaries.Job] = [(path, agent, None, None, None) for path, agent in files]
    given_jobs = jobs if made == "list" else (job for job in jobs)
    reads = list(summaries.reads(given_jobs, 2, "fork", parallel=True))
    assert [read.stored.path if read is not None else None for read in reads] == [path for path, _ in files]
    assert [read.session.title for read in reads if read is not None] == [
        one.session.title for path, agent in files if (one := summarize(path, agent, None, None)) is not None]


def summarized_codex_ways(path: str) -> tuple[list[summaries.Read], int]:
    """`path` summarized with the lines around reports read at once (`CodexReader.fold`, _codex.c,
    where it is built) and each line by `CodexReader.take`; with how many lines the first way read
    at once."""
    real = codex._codex
    reads = []
    try:
        codex._codex, folded = counted_runs(real)
        reads.append(summaries.summarize(path, "codex", None, None))
        codex._codex = None  # type: ignore[assignment]
        reads.append(summaries.summarize(path, "codex", None, None))
    finally:
        codex._codex = real
    assert all(read is not None for read in reads)
    return [read for read in reads if read is not None], folded[0]


def test_codex_lines_read_at_once_read_a_summary_as_line_by_line(tmp_path: Path) -> None:
    """`CodexReader.fold` (reports, turn contexts and the lines around them read at once, in C) ends
    where `CodexReader.take`, a line at a time, ends: the same saved reader, session, cost and tail."""
    folded = 0
    for path in [path for path, agent in fixture_files(tmp_path) if agent == "codex"]:
        reads, run = summarized_codex_ways(path)
        assert_same_summaries(reads)
        folded += run
    assert folded > 10 or codex._codex is None


def test_codex_reports_read_at_once_keep_every_rule_of_line_by_line(tmp_path: Path) -> None:
    """The rules a run of reports keeps: after a compaction, the first report's fill and the first
    request's cache write; the latest request's time (unless too long to be one) and cache; cached
    input never more than the input; a total that shrinks (a resume) added on top; a window given as
    `true`; the model changing between two reports."""
    def report(stamp: str, last: dict[str, int], total: dict[str, int], window: Any = 272_000) -> dict[str, Any]:
        return {"timestamp": stamp, "type": "event_msg", "payload": {"type": "token_count", "info": {
            "last_token_usage": last, "total_token_usage": total, "model_context_window": window}}}

    t = "2026-02-10T10:00:{:02d}.000Z".format
    lines = [fx.codex_meta("/w"), *fx.codex_turn("Fix it", t(1), cwd="/w"),
             report(t(2), {"input_tokens": 900, "output_tokens": 10, "total_tokens": 910},
                    {"input_tokens": 900, "cached_input_tokens": 0, "output_tokens": 10, "total_tokens": 910}),
             *fx.codex_compacted("so far", t(3)),
             report(t(4), {"input_tokens": 100, "cache_write_input_tokens": 40, "output_tokens": 20, "total_tokens": 120},
                    {"total_tokens": 910}),
             report(t(5), {"input_tokens": 300, "cache_write_input_tokens": 7, "output_tokens": 5, "total_tokens": 305},
                    {"input_tokens": 1_200, "cached_input_tokens": 500, "output_tokens": 15, "total_tokens": 1_215},
                    window=True),
             {"timestamp": t(6), "type": "turn_context", "payload": {"model": "gpt-5.1"}},
             {"timestamp": t(6), "type": "event_msg", "payload": {"type": "task_started", "model_context_window": True}},
             report(t(7), {"input_tokens": 400, "cached_input_tokens": 350, "output_tokens": 5, "total_tokens": 405},
                    {"input_tokens": 300, "cached_input_tokens": 280, "output_tokens": 5, "total_tokens": 305}),
             report(t(8) * 3, {"input_tokens": 500, "cached_input_tokens": 400, "cache_write_input_tokens": 9,
                           "output_tokens": 7, "total_tokens": 507},
                    {"input_tokens": 800, "cached_input_tokens": 900, "output_tokens": 12, "total_tokens": 812})]
    path = str(fx.write_jsonl(tmp_path / "rollout.jsonl", lines))
    reads, folded = summarized_codex_ways(path)
    assert_same_summaries(reads)
    session = reads[0].session
    assert session.agent_compactions[0]["tokensAfter"] == 120
    assert session.agent_compactions[0]["firstRequest"] == {"model": "gpt-5-codex", "input": 100, "cacheWrite": 40,
                                                            "cacheWrite1h": 0}
    assert (session.last_request_at, session.cache_1h, session.model) == (t(7), False, "gpt-5.1")
    assert sorted(session.cumulative) == ["gpt-5-codex", "gpt-5.1"]
    assert folded >= 5 or codex._codex is None


_COUNT = st.integers(-3, 40) | st.just(10**12) | _ODD
_COUNTS = ["input_tokens", "cached_input_tokens", "cache_write_input_tokens", "output_tokens", "reasoning_output_tokens",
           "total_tokens"]
# A report of counts (of any kind, some wrong), and totals that grow, shrink (a resume) or stay.
_REPORT = st.fixed_dictionaries({"input_tokens": st.integers(0, 50), "output_tokens": st.integers(0, 9),
                                 "total_tokens": st.integers(0, 80)},
                                optional={"cached_input_tokens": st.integers(0, 60), "reasoning_output_tokens": st.integers(0, 9),
                                          "cache_write_input_tokens": st.integers(0, 9)}) | st.dictionaries(
    st.sampled_from(_COUNTS), _COUNT)
_STAMP = st.sampled_from(["2026-02-10T10:00:00.000Z", "2026-02-10T10:00:05.000Z", "2026-02-10T10:00:00.000Z" * 3])
_CODEX_PAYLOADS = [
    st.builds(lambda last, total, window: {"type": "token_count", "info": {
        "last_token_usage": last, "total_token_usage": total, "model_context_window": window}},
        _REPORT | _ODD, _REPORT | _ODD, st.just(272_000) | st.booleans() | _COUNT),
    st.builds(lambda window: {"type": "task_started", "model_context_window": window},
              st.just(200_000) | st.booleans() | _COUNT),
    st.builds(lambda kind, item: {"type": "item_completed", "item": item if item is not None else {
        "type": kind, "content": [{"type": "text", "text": "go on"}]}},
        st.sampled_from(["UserMessage", "AgentMessage"]), st.none() | _ODD),
    st.builds(lambda text: {"type": "user_message", "message": text}, st.sampled_from(["go", 'say "hi"']) | _ODD),
    st.just({"type": "thread_settings_applied", "info": "token_count"}),
]
_CODEX_LINE = st.one_of(
    st.builds(lambda payload, stamp: {"timestamp": stamp, "type": "event_msg", "payload": payload},
              st.one_of(*_CODEX_PAYLOADS), _STAMP | _ODD | st.just('a"b')),
    st.builds(lambda model, stamp: {"timestamp": stamp, "type": "turn_context", "payload": {"model": model}},
              st.sampled_from(["gpt-5-codex", "gpt-5.1", 'a"b']) | _ODD, st.just("2026-02-10T10:00:01.000Z")),
    st.builds(lambda role, stamp: {"timestamp": stamp, "type": "response_item", "payload": {
        "type": "message", "role": role, "content": [{"type": "input_text", "text": "Fix it"}]}},
        st.sampled_from(["user", "assistant"]), st.just("2026-02-10T10:00:02.000Z") | _ODD),
    st.just({"timestamp": "2026-02-10T10:00:03.000Z", "type": "compacted", "payload": {"message": "so far"}}))


@settings(max_examples=300, deadline=None)
@given(st.lists(_CODEX_LINE, min_size=1, max_size=16))
def test_codex_lines_read_at_once_agree_with_line_by_line_on_any_lines(lines: list[dict[str, Any]]) -> None:
    """Rollout lines of any shape (counts of the wrong type, huge or negative; escapes; models and
    windows changing; turns; compactions): the two ways end in the same summary."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = str(fx.write_jsonl(Path(folder) / "rollout.jsonl", [fx.codex_meta("/w"), *lines]))
        reads, _ = summarized_codex_ways(path)
        assert_same_summaries(reads)


def _full_reader(path: str, agent: str) -> ClaudeReader | CodexReader:
    """The daemon's reader of `path` (full mode), read to its end."""
    full = CodexReader(path, window=False) if agent == "codex" else ClaudeReader(path, session_id(path), window=False)
    full.read()
    return full


def assert_summary_reads_as_the_daemon(path: str, agent: str) -> None:
    """`path`'s summary takes the lines the daemon's reader takes and refuses those it refuses: the
    same cost, fill, turns, times and bad lines."""
    full = _full_reader(path, agent)
    read = summaries.summarize(path, agent, None, None)
    assert read is not None
    a, b = full.session, read.session
    for name in ("title", "turn_count", "baseline", "last_usage", "model", "compactions", "last_activity",
                 "bad_lines"):
        assert getattr(a, name) == getattr(b, name), name
    assert a.total_usage() == b.total_usage()
    assert {model: usage.values() for model, usage in a.cumulative.items()} == {
        model: usage.values() for model, usage in b.cumulative.items()}
    assert read.tail == a.tail


def _streamed(uuid: str, parent: str, message: str, usage: dict[str, Any], model: str = "claude-sonnet-4-5",
              blocks: list[Any] | None = None, second: int = 0) -> str:
    """One line of a reply Claude Code streams: `message`'s id, one block, its usage repeated."""
    return json.dumps(_claude_line("assistant", uuid, parent, "req_1", {
        "role": "assistant", "id": message, "usage": usage, "model": model,
        "content": blocks if blocks is not None else [{"type": "text", "text": "ok"}]}, {}, {},
        f"2025-10-03T12:00:{second:02d}.000Z"))


def assert_summary_fill_is_the_daemons(path: Path, fill: int, tail: int) -> None:
    """`path` read by the daemon's reader and summarized (each way, and taken up from the state a read
    of each shorter part of it saved): the same tail, and the fill `fill` with `tail` items after the
    report."""
    full = _full_reader(str(path), "claude")
    assert (summaries.fill(full.session), len(full.session.after_report())) == (fill, tail)
    assert_summary_reads_as_the_daemon(str(path), "claude")
    reads, _, _ = summarized_ways(str(path))
    assert_same_summaries(reads)
    assert [summaries.fill(read.session, read.tail) for read in reads] == [fill] * len(reads)
    whole = path.read_bytes()
    cuts = [n + 1 for n, byte in enumerate(whole) if byte == 0x0A][:-1]
    for cut in cuts:  # a summary of the file as it was, taken up once it grew
        path.write_bytes(whole[:cut])
        first = summaries.summarize(str(path), "claude", None, None)
        assert first is not None and first.stored.state is not None
        path.write_bytes(whole)
        taken = summaries.summarize(str(path), "claude", json.loads(first.stored.state), None)
        assert taken is not None
        assert (summaries.fill(taken.session, taken.tail), taken.tail) == (fill, full.session.tail)


def test_a_streamed_copy_reporting_no_tokens_brings_no_block_of_its_message_again(tmp_path: Path) -> None:
    """A reply's streamed copy whose usage is all zero is no report (docs/sessions.md): the fill is
    the copy before it's, and its block, one the report covered, is not counted again: `ctxd
    sessions` shows the daemon's fill (1, not 1 + the block's count). A block of its own it brings
    is counted, by both."""
    zero = {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
    path = tmp_path / "zero.jsonl"
    path.write_text(_streamed("a1", "u1", "m1", {"input_tokens": 0, "output_tokens": 1}) + "\n"
                    + _streamed("a2", "a1", "m1", zero, second=1) + "\n")
    assert_summary_fill_is_the_daemons(path, 1, 0)
    more = [{"type": "text", "text": "ok"}, {"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]
    path.write_text(_streamed("a1", "u1", "m1", {"input_tokens": 0, "output_tokens": 1}) + "\n"
                    + _streamed("a2", "a1", "m1", zero, blocks=more, second=1) + "\n")
    full = _full_reader(str(path), "claude")
    assert summaries.fill(full.session) is not None and summaries.fill(full.session) > 1
    assert_summary_fill_is_the_daemons(path, summaries.fill(full.session) or 0, 1)


def test_a_synthetic_line_between_streamed_copies_brings_no_block_of_their_message_again(tmp_path: Path) -> None:
    """Copies of one message with Claude Code's own `<synthetic>` line (same id) between them, the
    last copy a line the daemon refuses (NaN in its usage): the synthetic line reports nothing and
    repeats a block the report covered; the tail is the daemon's (none), so is the fill."""
    usage = {"input_tokens": 3, "output_tokens": 1}
    refused = _streamed("a3", "a2", "m1", {"input_tokens": 3, "output_tokens": 2}, second=2)
    path = tmp_path / "synthetic.jsonl"
    path.write_text(_streamed("a1", "u1", "m1", usage) + "\n"
                    + _streamed("a2", "a1", "m1", usage, model="<synthetic>", second=1) + "\n"
                    + refused.replace('"output_tokens": 2', '"output_tokens": NaN') + "\n")
    assert _full_reader(str(path), "claude").session.bad_lines == 1
    assert_summary_fill_is_the_daemons(path, 4, 0)
    # The same, a prompt rewinding to the first copy between: the daemon still knows the block.
    prompt = json.dumps(_claude_line("user", "u2", "a1", "req_2", {"role": "user", "content": "Fix it"}, {}, {},
                                     "2025-10-03T12:00:03.000Z"))
    path.write_text(_streamed("a1", "u1", "m1", usage) + "\n"
                    + _streamed("a2", "a1", "m1", {"input_tokens": 0, "output_tokens": 0}, second=1) + "\n"
                    + prompt + "\n"
                    + _streamed("a4", "u2", "m1", usage, model="<synthetic>", second=4) + "\n")
    full = _full_reader(str(path), "claude")
    assert_summary_fill_is_the_daemons(path, summaries.fill(full.session) or 0, len(full.session.after_report()))


# What a line `parse` refuses may hold: a number JSON has not (NaN, Infinity) or one no double holds.
_REFUSED = st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-1E999", "9" * 320 + ".5"])


def _damaged(texts: list[str], damage: list[tuple[str, int, int, str]]) -> list[str]:
    """`texts` (JSON lines) with `damage` done: a number (the `at`-th) made one `parse` refuses, a value
    added that holds one, two lines glued by a torn append (`glue`: the first whole; `tear`: cut at
    `at`), a line cut short (`cut`)."""
    import re

    lines = list(texts)
    for kind, index, at, refused in damage:
        k = index % len(lines)
        line = lines[k]
        if kind == "number":
            numbers = list(re.finditer(r"(?<=[:\[,] )-?\d+(?=[,}\]])", line))
            if numbers:
                found = numbers[at % len(numbers)]
                lines[k] = line[:found.start()] + refused + line[found.end():]
        elif kind == "value" and line.endswith("}"):
            lines[k] = line[:-1] + ', "extra": [1, {"q": ' + refused + "}]}"
        elif kind in ("glue", "tear") and k + 1 < len(lines):
            cut = len(line) if kind == "glue" else at % max(1, len(line))
            lines[k:k + 2] = [line[:cut] + lines[k + 1]]
        elif kind == "cut" and len(line) > 1:
            lines[k] = line[:at % len(line)]
    return lines


_DAMAGE = st.lists(st.tuples(st.sampled_from(["number", "value", "glue", "tear", "cut"]), st.integers(0, 40),
                             st.integers(0, 400), _REFUSED), min_size=1, max_size=3)


_REPLY = {"role": "assistant", "id": "m1", "model": "claude-sonnet-4-5", "content": [{"type": "text", "text": "ok"}]}


@settings(max_examples=150, deadline=None)
@given(st.lists(_LINE, min_size=1, max_size=10), _DAMAGE)
# A copy reporting no tokens after one that reports, the first line refused.
@example([_claude_line("assistant", "a1", "u1", "r", {**_REPLY, "usage": {"input_tokens": 0, "output_tokens": 0}}, {}, {},
                       "2025-10-03T12:00:00.000Z"),
          _claude_line("assistant", "a2", "a1", "r", {**_REPLY, "usage": {"input_tokens": 0, "output_tokens": 1}}, {}, {},
                       "2025-10-03T12:00:01.000Z"),
          _claude_line("assistant", "a3", "a2", "r", {**_REPLY, "usage": {"input_tokens": 0, "output_tokens": 0}}, {}, {},
                       "2025-10-03T12:00:02.000Z")],
         [("number", 0, 0, "NaN")])
# A compaction's summary written after the report that follows its boundary.
@example([_claude_line("system", "s1", "u1", "r", {}, {}, {}, "2025-10-03T12:00:00.000Z"),
          _claude_line("assistant", "a1", "s1", "r", {**_REPLY, "usage": {"input_tokens": 0, "output_tokens": 1}}, {}, {},
                       "2025-10-03T12:00:01.000Z"),
          _claude_line("user", "u2", "a1", "r", {"role": "user", "content": "Fix it"}, {"isCompactSummary": True}, {},
                       "2025-10-03T12:00:02.000Z")],
         [("glue", 2, 0, "NaN")])  # (the last line: nothing to glue it to, no damage)
def test_a_claude_summary_refuses_the_lines_the_daemon_refuses(lines: list[dict[str, Any]],
                                                              damage: list[tuple[str, int, int, str]]) -> None:
    """NaN, Infinity or 1e999 in a usage or a content, two lines glued by a torn append, a line cut
    short: the summary (each of its ways) counts such a line bad and skips it as the daemon's reader
    does, so that its cost, fill and tail are the daemon's (streamed copies around the refused
    line, reporting nothing or of Claude Code's own, included)."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        texts = _damaged([json.dumps(line) for line in lines], damage)
        path = Path(folder) / "any.jsonl"
        path.write_text("".join(text + "\n" for text in texts))
        assert_summary_reads_as_the_daemon(str(path), "claude")
        reads, _, _ = summarized_ways(str(path))
        assert_same_summaries(reads)


@settings(max_examples=150, deadline=None)
@given(st.lists(_CODEX_LINE, min_size=1, max_size=12), _DAMAGE)
def test_a_codex_summary_refuses_the_lines_the_daemon_refuses(lines: list[dict[str, Any]],
                                                             damage: list[tuple[str, int, int, str]]) -> None:
    """As for Claude Code: a rollout's damaged lines are refused by its summary (either way) as by the
    daemon's reader."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        texts = [json.dumps(fx.codex_meta("/w")), *_damaged([json.dumps(line) for line in lines], damage)]
        path = Path(folder) / "rollout.jsonl"
        path.write_text("".join(text + "\n" for text in texts))
        assert_summary_reads_as_the_daemon(str(path), "codex")
        reads, _ = summarized_codex_ways(str(path))
        assert_same_summaries(reads)


def test_the_fixtures_damaged_are_summarized_as_the_daemon_reads_them(tmp_path: Path) -> None:
    """Every line of every fixture, in turn, made one the daemon's reader refuses (a usage's count NaN
    or 1e999, a content holding -Infinity, glued to the next line, torn into it): the summary's cost,
    fill, turns and bad lines are the daemon's."""
    for n, (path, agent) in enumerate(fixture_files(tmp_path)):
        texts = Path(path).read_text().splitlines()
        for k in range(len(texts)):
            for damage in (("number", k, 0, "NaN"), ("number", k, 1, "1e999"), ("value", k, 0, "-Infinity"),
                           ("glue", k, 0, ""), ("tear", k, len(texts[k]) // 2, "")):
                damaged = tmp_path / "damaged" / f"{n}-{Path(path).name}"
                damaged.parent.mkdir(exist_ok=True)
                damaged.write_text("".join(text + "\n" for text in _damaged(texts, [damage])))
                assert_summary_reads_as_the_daemon(str(damaged), agent)


def test_ctxd_sessions_shows_the_cost_and_fill_the_daemon_reads(tmp_path: Path, ws: Path) -> None:
    """A reply whose usage holds NaN, one with 1e999 in its content and one glued to the next line by
    a torn append are lines the daemon's reader refuses: `ctxd sessions` shows the cost and fill it
    shows, not theirs."""
    lines = [json.dumps(line) for line in claude_lines(ws, "Fix the parser")]
    big = fx.claude_usage(9, 5_000, 150_000, 40_000)

    def reply(message: str, uuid: str, parent: str, second: int) -> str:
        return json.dumps(fx.claude_assistant([{"type": "text", "text": "More."}], message, uuid, parent, ws,
                                              f"2025-10-03T11:00:{second:02d}.000Z", big)[0])

    nan = reply("msg_02", "a2", "a1", 3).replace('"output_tokens": 40000', '"output_tokens": NaN')
    infinite = reply("msg_03", "a3", "a1", 4).replace('"text": "More."', '"text": "More.", "score": 1e999')
    glued = reply("msg_04", "a4", "a1", 5) + lines[0]
    path = fx.claude_path(tmp_path / "claude", ws)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in [*lines, nan, infinite, glued]))
    full = _full_reader(str(path), "claude")
    assert full.session.bad_lines == 3
    [row] = sessions(tmp_path, ws)
    from ctxd.sessions import overview

    expected = overview.summary(full.session)
    assert (row["usedTokens"], row["usage"], row["turns"]) == (expected["usedTokens"], expected["usage"], 1)
    assert row["cost"] == expected["cost"]
    assert row["usedTokens"] == 4 + 100 + 15_000 + 20  # the last reply the daemon reads


def test_the_daemons_session_readers_import_nothing_from_the_folder_it_runs_in(tmp_path: Path, ws: Path) -> None:
    """More than PARALLEL_BYTES to list: the daemon summarizes the sessions in spawned workers, each
    `python -c …` in the daemon's current folder, which Python puts first on their `sys.path`. An
    editor starts the daemon in the workspace: a repository's `multiprocessing/` folder ran in every
    worker. The daemon (alone here, `CTXD_OWNER=0`, started by the launcher as install names it)
    gives its Python children PYTHONSAFEPATH (`ctxd.server.process.safe_python_children`)."""
    mark = tmp_path / "trap-ran"
    (ws / "multiprocessing").mkdir()
    (ws / "multiprocessing" / "__init__.py").write_text(f"open({str(mark)!r}, 'a').write('ran')\n")
    listed_by_spawned_workers(tmp_path, ws, lambda n: f"prompt {n}")
    assert not mark.exists(), "a worker imported the workspace's multiprocessing folder"


def test_a_daemon_imports_the_modules_its_threads_share_before_any_thread_runs() -> None:
    """A request's first pydantic validator imports `importlib.metadata` while the warm-up imports
    `ctxd.compact` (`importlib.resources`), each on its own thread: Python raised `_DeadlockError`
    in one of them and the request failed (a CI run: `ctxd/ghost/list failed inside ctxd`). Every
    daemon process imports them first, while it runs one thread (`daemon_process`)."""
    code = ("import sys, threading\n"
            "from ctxd.imports import SHARED_MODULES\n"
            "from ctxd.server.process import daemon_process\n"
            "before = [m for m in SHARED_MODULES if m in sys.modules]\n"
            "daemon_process()\n"
            "print(before, [m for m in SHARED_MODULES if m not in sys.modules], threading.active_count())")
    assert _fresh_python(code).split() == ["[]", "[]", "1"]  # none before, all after, one thread


def test_a_tokenizers_load_thread_starts_after_the_modules_it_shares_are_imported() -> None:
    """`ctxd usage` builds its report while a thread loads the tokenizer: each may import the
    same modules at once (a CI run: the report came out estimated, 600 tokens where the daemon
    counted 607). The modules are imported before the load thread starts; a load that meets an
    import deadlock anyway tries once more."""
    code = ("import sys, threading\n"
            "from ctxd.imports import SHARED_MODULES\n"
            "from ctxd.tokens.counter import _Quiet, _Slot\n"
            "seen = []\n"
            "def loader(name):\n"
            "    seen.append([m for m in SHARED_MODULES if m not in sys.modules])\n"
            "    if len(seen) == 1:\n"
            "        raise RuntimeError('deadlock detected by _ModuleLock')\n"
            "    return 'encoding'\n"
            "slot = _Slot('test', loader, _Quiet())\n"
            "print(bool(slot.wait(30)), seen)")
    assert _fresh_python(code).strip() == "True [[], []]"  # all imported first; loaded at the second try


def test_a_tokenizer_load_that_failed_is_tried_once_more_by_the_caller_waiting_for_it() -> None:
    """A load in its thread can fail for a reason of the moment (beside another thread's
    imports); `ctxd usage` then counted estimates for its whole run (a CI run again: 600 tokens
    where the daemon counted 607). The caller waiting for it tries once more, in its own thread."""
    code = ("import threading\n"
            "from ctxd.tokens.counter import _Quiet, _Slot\n"
            "threads = []\n"
            "def loader(name):\n"
            "    threads.append(threading.current_thread().name)\n"
            "    if len(threads) == 1:\n"
            "        raise ImportError('a reason of the moment')\n"
            "    return 'encoding'\n"
            "slot = _Slot('test', loader, _Quiet())\n"
            "print(bool(slot.wait(30)), slot.status, threads)")
    assert _fresh_python(code).strip() == "True exact ['ctxd-tokenizer-test', 'MainThread']"


def _fresh_python(code: str) -> str:
    """What `code` prints in a Python of its own (nothing imported before it), from the repository."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stderr
    return done.stdout


def listed_by_spawned_workers(tmp_path: Path, ws: Path, prompt: Callable[[int], str],
                              extra: dict[str, str] | None = None, owner: bool = False) -> dict[str, Any]:
    """Three Claude Code sessions, two of them large enough that a daemon alone (`CTXD_OWNER=0`,
    started by the launcher in `ws`, as install names it) summarizes them in spawned workers to list
    them: its `ctxd/threads` once all three are listed. `owner`: an owner lists them, in the workers
    it forked at its start (`summaries.fork_readers`)."""
    from tests.rpc import Client, daemon_env

    padding = json.dumps({"type": "file-history-snapshot", "messageId": "m", "snapshot": {"pad": "x" * 8000}}).encode()
    each = summaries.PARALLEL_BYTES // 2 + 1024 * 1024
    for n in (1, 2, 3):  # the newest (3) is listed alone first (its gauge); the two others together
        session = f"0000000{n}-0000-4000-8000-000000000000"
        path = fx.write_jsonl(fx.claude_path(tmp_path / "state" / "claude-home", ws, session),
                              [fx.claude_user(prompt(n), "u1", None, ws, "2025-10-03T11:00:01.000Z", session)])
        if n < 3:
            with path.open("ab") as handle:
                handle.write((padding + b"\n") * (each // len(padding)))
        os.utime(path, (1_700_000_000 + n, 1_700_000_000 + n))
    env = daemon_env(tmp_path / "state", {**({} if owner else {"CTXD_OWNER": "0"}), **(extra or {})})
    proc = subprocess.Popen([sys.executable, str(REPO / "ctxd" / "launch.py")], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=ws)
    client = Client(proc)
    try:
        client.initialize([ws])
        deadline = time.monotonic() + 120
        while len((listed := client.request("ctxd/threads", {"workspace": ws.as_uri()}))["threads"]) < 3:
            assert time.monotonic() < deadline, "the three sessions were never listed"
            time.sleep(0.2)
    finally:
        client.shutdown()
    threads: dict[str, Any] = listed
    return threads


KEY = "sk-proj-summary-" + "Ab3" * 14  # the configured API key's value, in the tests below


def stored_with_the_key(state: Path) -> list[str]:
    """The files of ctxd's state dir under XDG_STATE_HOME `state` that hold KEY."""
    return [str(path) for path in (state / "ctxd").rglob("*") if path.is_file() and KEY.encode() in path.read_bytes()]


def test_ctxd_sessions_never_shows_or_stores_the_configured_api_key(tmp_path: Path, ws: Path) -> None:
    """A prompt that holds the configured API key (the user pasted it): `ctxd sessions` shows its
    title with the key redacted, and its summaries keep none of it, whichever variable the user's
    settings name (`llm.api_key_env`). Before, the CLI never loaded the settings, so it knew no key:
    it printed the title whole and stored it."""
    fx.write_jsonl(fx.codex_path(tmp_path / "codex"), [fx.codex_meta(ws), *fx.codex_turn(
        f"deploy with {KEY} please", "2025-10-03T10:00:02.000Z", cwd=str(ws))])
    rows = sessions(tmp_path, ws, {"OPENAI_API_KEY": KEY})
    assert rows[0]["title"] == "deploy with [redacted] please"
    assert stored_with_the_key(tmp_path / "state") == []
    config = tmp_path / "config" / "ctxd" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[llm]\napi_key_env = "DEPLOY_KEY"\n')
    shutil.rmtree(tmp_path / "state")
    rows = sessions(tmp_path, ws, {"DEPLOY_KEY": KEY})
    assert rows[0]["title"] == "deploy with [redacted] please" and KEY not in json.dumps(rows)
    assert stored_with_the_key(tmp_path / "state") == []


def test_ctxd_sessions_follows_the_users_sources_settings(tmp_path: Path, ws: Path) -> None:
    """`sources.<agent> = false` and `sources.<agent>_home` in the user's settings, as the daemon
    has them: an agent turned off is not listed, a home named there is read."""
    fx.write_jsonl(fx.codex_path(tmp_path / "elsewhere"), fx.codex_session(ws))
    fx.write_jsonl(fx.claude_path(tmp_path / "claude", ws), fx.claude_session(ws))
    assert sorted(row["agent"] for row in sessions(tmp_path, ws)) == ["claude"]
    config = tmp_path / "config" / "ctxd" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'[sources]\nclaude = false\ncodex_home = "{tmp_path / "elsewhere"}"\n')
    assert [row["agent"] for row in sessions(tmp_path, ws)] == ["codex"]


def test_ctxd_sessions_keeps_its_summaries_in_the_state_dir_the_user_configured(tmp_path: Path, ws: Path) -> None:
    """`state_dir` in the user's settings: the owner's state dir (its clients pick it so), and so
    the one `ctxd sessions` shares with it. It wrote to the default one instead (`--state-dir`'s
    help said "as the owner")."""
    fx.write_jsonl(fx.codex_path(tmp_path / "codex"), fx.codex_session(ws))
    config = tmp_path / "config" / "ctxd" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'state_dir = "{tmp_path / "chosen"}"\n')
    assert [row["agent"] for row in sessions(tmp_path, ws)] == ["codex"]
    assert summaries.database_path(tmp_path / "chosen").is_file()
    assert not (tmp_path / "state").exists()


def test_a_price_the_user_gives_a_model_is_used_whatever_the_case_of_its_name(tmp_path: Path, ws: Path) -> None:
    """`[prices."GPT-5-Codex"]`: a model's name is the user's, not a setting's name. The settings
    snake-cased it with the setting names ("g_p_t-5-_codex"), so no model matched it and the daemon
    priced the session from the built-in table (`ctxd sessions`, now on the same settings, too)."""
    fx.write_jsonl(fx.codex_path(tmp_path / "codex"), fx.codex_session(ws))
    config = tmp_path / "config" / "ctxd" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[prices."GPT-5-Codex"]\ninput = 1000000.0\ncachedInput = 0.0\noutput = 0.0\n')
    row = sessions(tmp_path, ws)[0]
    assert row["model"] == "gpt-5-codex" and row["usage"]["input"] > 0
    assert row["cost"]["input"] == row["usage"]["input"] and row["cost"]["output"] == 0


def test_the_lines_a_summary_keeps_after_the_last_report_never_keep_the_configured_api_key(
        tmp_path: Path, ws: Path) -> None:
    """A summary keeps the lines after the agent's last report as they are (the fill counts their
    items, and a file that grows is taken up there): a prompt pasted with the key after a reply was
    stored whole in the state dir. Both agents' kept lines are stored redacted; the fill still
    counts them."""
    codex = fx.write_jsonl(fx.codex_path(tmp_path / "codex"), fx.codex_session(ws))
    claude = fx.write_jsonl(fx.claude_path(tmp_path / "claude", ws), claude_lines(ws, "hello"))
    before = {row["agent"]: row["usedTokens"] for row in sessions(tmp_path, ws, {"OPENAI_API_KEY": KEY})}
    fx.append_jsonl(codex, fx.codex_turn(f"now deploy with {KEY}", "2025-10-03T10:01:00.000Z", cwd=str(ws)))
    fx.append_jsonl(claude, [fx.claude_user(f"now deploy with {KEY}", "u2", "a1", ws, "2025-10-03T11:00:03.000Z")])
    for run in ("taken up", "read again"):
        rows = sessions(tmp_path, ws, {"OPENAI_API_KEY": KEY})
        assert {row["agent"]: row["usedTokens"] > before[row["agent"]] for row in rows} == \
            {"claude": True, "codex": True}, (run, rows)  # (the kept lines are counted)
        assert KEY not in json.dumps(rows), run
        assert stored_with_the_key(tmp_path / "state") == [], run
        shutil.rmtree(tmp_path / "state")


@pytest.mark.parametrize("made", ["spawned", "forked ahead"])
def test_the_daemons_session_readers_redact_the_configured_api_key(tmp_path: Path, ws: Path, made: str) -> None:
    """The sessions a daemon lists from summaries read in worker processes: a spawned worker is a
    new process that knew no secret, so a title holding the key reached `ctxd/threads` and the
    summaries whole; an owner's workers are forked before it reads the settings that name the key.
    The workers now take the daemon's secrets (`ctxd.redact.adopt`) with their jobs."""
    owner = made == "forked ahead"
    listed = listed_by_spawned_workers(tmp_path, ws, lambda n: f"prompt {n} with {KEY}", {"OPENAI_API_KEY": KEY},
                                       owner=owner)
    assert KEY not in json.dumps(listed)
    assert sorted(t["title"] for t in listed["threads"]) == [f"prompt {n} with [redacted]" for n in (1, 2, 3)]
    assert stored_with_the_key(tmp_path / "state") == []
    if owner and sys.platform.startswith("linux"):
        log = (tmp_path / "state" / "ctxd" / "owner" / "owner.log").read_text()
        assert "reading in the workers forked ahead" in log, log
        assert "listed 2 sessions, 2 read as their heads were peeked at" in log, log  # (the newest alone before)


READING_PARENT = """
import sys, time
from ctxd.sessions import summaries
summaries.READY_SECONDS = float(sys.argv[2])
if sys.argv[1] == "fork":
    summaries.fork_readers(2)
    pool = summaries._ready
else:
    pool = summaries._pool(2, "spawn")
    for started in [pool.submit(time.sleep, 0.5) for _ in range(2)]:  # (a spawn pool starts one per job)
        started.result()
print(*pool._processes, flush=True)
time.sleep(600)
"""


def reading_parent(made: str, ready_seconds: str) -> subprocess.Popen[str]:
    """A process whose two reading workers are `made` ("fork": `fork_readers`, "spawn"), that prints
    their pids and sleeps."""
    return subprocess.Popen([sys.executable, "-c", READING_PARENT, made, ready_seconds], cwd=REPO,
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork_readers forks on Linux only")
@pytest.mark.parametrize("made", ["fork", "spawn"])
def test_reading_workers_leave_when_the_process_they_read_for_is_killed(made: str) -> None:
    """An owner killed while its reading workers wait (for their next job, or to hand back their last
    one) left them waiting forever: the pool's pipes stay open in the workers themselves. Each
    worker now leaves once its parent is gone (`summaries._worker_start`)."""
    parent = reading_parent(made, "600")
    try:
        assert parent.stdout is not None
        workers = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(workers) == 2 and all(running(pid) for pid in workers)
    finally:
        parent.kill()
        parent.wait()
    assert gone(workers, 10 * summaries.PARENT_CHECK_SECONDS + 5)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork_readers forks on Linux only")
def test_workers_forked_ahead_that_no_reads_took_are_let_go() -> None:
    """An owner whose first listing reads nothing (a warm one), or that lists nothing (started by a
    hook), does not keep the workers it forked at its start beyond READY_SECONDS."""
    parent = reading_parent("fork", "0.5")
    try:
        assert parent.stdout is not None
        workers = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(workers) == 2
        assert gone(workers, 15)
        assert parent.poll() is None  # (they left on their own: their parent still runs)
    finally:
        parent.kill()
        parent.wait()


FORK_FAILS_SECOND_TIME = """
import multiprocessing, os
from ctxd.sessions import summaries
real, forks = os.fork, []
def fork():
    forks.append(1)
    if len(forks) > 1:
        raise OSError(11, "Resource temporarily unavailable")
    return real()
os.fork = fork
summaries.fork_readers(2)
print(summaries._ready is None, len(forks), len(multiprocessing.active_children()), flush=True)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork_readers forks on Linux only")
def test_an_owner_that_can_fork_only_some_of_its_readers_keeps_none_and_still_exits() -> None:
    """No process to be had for the second worker (a user's process limit, no memory): the first one
    forked would wait for a job forever, and the owner's exit would wait for it. It is killed; the
    listing spawns its workers later, or reads in the owner."""
    done = subprocess.run([sys.executable, "-c", FORK_FAILS_SECOND_TIME], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "2", "0"]


def gone(pids: list[int], seconds: float) -> bool:
    """Whether the processes `pids` all end within `seconds`."""
    deadline = time.monotonic() + seconds
    while any(running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(running(pid) for pid in pids)


def running(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, dead but not reaped by whoever adopted it, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_the_cwds_summaries_found_come_with_the_stamp_a_session_store_gives_the_file(tmp_path: Path, ws: Path) -> None:
    """`Summaries.cwds` (a restart decides a file unchanged since by it, without its head peeked at:
    `Follower`'s `known_cwds`) gives each file's stamp as its session store stamps it now, and the
    cwd its read found; a file it has no row for, or no cwd, is not in it."""
    claude_home, codex_home = tmp_path / "claude", tmp_path / "codex"
    claude_file = fx.write_jsonl(fx.claude_path(claude_home, ws), claude_lines(ws, "Add a flag"))
    codex_file = fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(ws))
    assert len(sessions(tmp_path, ws)) == 2
    store = summaries.Summaries(tmp_path / "state" / "ctxd")
    unknown = str(tmp_path / "unknown.jsonl")
    found = store.cwds([str(claude_file), str(codex_file), unknown])
    claude_stamp = claude.ClaudeSessions(claude_home / "projects").stamp(str(claude_file))
    codex_stamp = codex.CodexSessions(codex_home / "sessions").stamp(str(codex_file))
    assert claude_stamp is not None and codex_stamp is not None
    assert found == {str(claude_file): (claude_stamp.key(), str(ws)), str(codex_file): (codex_stamp.key(), str(ws))}


def test_the_fill_counts_the_tail_redacted_whether_read_fresh_or_taken_up(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A key in an item after the agent's last report: a fresh read counted the key's tokens, a
    summary taken up from its saved state (redacted) counted "[redacted]"'s, and the daemon's
    ledger holds the items redacted. The same file, two fills. The tail is counted as the state
    keeps it."""
    from ctxd import redact

    key = "sk-proj-" + "Zq7Xk2Vw9Lp4Rt6Yb8Nm3Hc5Jd1Fg0Ks" * 3
    monkeypatch.setattr(redact, "_values", redact.secrets())  # (the secret is forgotten after the test)
    redact.register(key)

    def record(uuid: str, parent: str | None, kind: str, text: str, **more: Any) -> str:
        role = "model" if kind == "assistant" else "user"
        return json.dumps({"uuid": uuid, "parentUuid": parent, "sessionId": "s", "type": kind, "cwd": "/w",
                           "message": {"role": role, "parts": [{"text": text}]}, **more}) + "\n"

    path = tmp_path / "s.jsonl"
    path.write_text(record("u1", None, "user", "hi") + record("u2", "u1", "assistant", "ok", model="qwen3-coder-plus",
                                                               usageMetadata={"promptTokenCount": 5000})
                    + record("u3", "u2", "user", f"use the key {key} please"))
    first = summaries.summarize(str(path), "qwen", None, None)
    assert first is not None and key not in json.dumps(first.tail)
    with path.open("a") as handle:
        handle.write(record("u4", "u3", "user", "and more"))
    fresh = summaries.summarize(str(path), "qwen", None, None)
    taken = summaries.summarize(str(path), "qwen", json.loads(first.stored.state), None)
    assert fresh is not None and taken is not None
    assert summaries.fill(fresh.session, fresh.tail) == summaries.fill(taken.session, taken.tail)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pipe sizes are set on Linux only (F_SETPIPE_SZ)")
def test_the_pipes_to_and_from_the_reading_workers_hold_a_batch_of_reads() -> None:
    """A worker's batch of reads (their readers' states) is larger than a default pipe: it waited
    while its parent's busy owner took it a pipeful at a time. Both of the pool's pipes are widened
    (as far as the system's pipe-max-size lets an unprivileged process)."""
    import fcntl

    if int(Path("/proc/sys/fs/pipe-max-size").read_text()) < summaries.PIPE_BYTES and os.geteuid() != 0:
        pytest.skip("this system's pipe-max-size is below PIPE_BYTES: the pipes keep their size")
    pool = summaries._pool(2, "spawn")
    try:
        for queue in ("_call_queue", "_result_queue"):
            reader = getattr(pool, queue)._reader
            assert fcntl.fcntl(reader.fileno(), 1032) >= summaries.PIPE_BYTES  # F_GETPIPE_SZ
    finally:
        pool.shutdown()


def table(tmp_path: Path, ws: Path) -> str:
    env = {"HOME": str(tmp_path), "CODEX_HOME": str(tmp_path / "codex"), "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"),
           "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state"),
           "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    run = subprocess.run([sys.executable, "-m", "ctxd", "sessions", "--workspace", str(ws)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return run.stdout


def kept_rows(tmp_path: Path) -> list[tuple[str, str]]:
    db = summaries.Summaries(tmp_path / "state" / "ctxd")
    try:
        return db._connect().execute("SELECT path, kept FROM kept_rows ORDER BY path").fetchall()  # type: ignore[union-attr]
    finally:
        db.close()


def test_a_row_kept_beside_its_summary_is_shown_as_it_was_made(tmp_path: Path, ws: Path) -> None:
    """With nothing changed, `ctxd sessions` shows each session from the row it kept the run
    before (a third of such a run was making them): the same table and JSON as rows made afresh."""
    fx.write_jsonl(fx.codex_path(tmp_path / "codex"), fx.codex_session(ws))
    fx.write_jsonl(fx.claude_path(tmp_path / "claude", ws), claude_lines(ws, "Add a flag"))
    made = sessions(tmp_path, ws)  # read, and kept as their summaries are saved
    assert len(kept_rows(tmp_path)) == 2
    assert sessions(tmp_path, ws) == made  # from the rows kept
    shown = table(tmp_path, ws)
    db = summaries.Summaries(tmp_path / "state" / "ctxd")
    db._connect().execute("DELETE FROM kept_rows")  # type: ignore[union-attr]
    db.close()
    assert table(tmp_path, ws) == shown and len(kept_rows(tmp_path)) == 2
    db = summaries.Summaries(tmp_path / "state" / "ctxd")
    db._connect().execute("UPDATE kept_rows SET kept = replace(kept, char(31) || '$', char(31) || 'kept $')")  # type: ignore[union-attr]
    db.close()
    assert table(tmp_path, ws).count("kept $") == 2  # (shown from them, not made again)
    db = summaries.Summaries(tmp_path / "state" / "ctxd")
    db._connect().execute("UPDATE kept_rows SET kept = '[1'")  # type: ignore[union-attr]
    db.close()
    assert table(tmp_path, ws) == shown  # a damaged kept row: made again


def test_a_row_kept_is_made_again_when_its_summary_or_a_price_changes(tmp_path: Path, ws: Path) -> None:
    """A kept row is shown while its summary's row is the one it was made from and the prices,
    the agents' configurations and ctxd's own files are the same: a summary written again by another
    process (the same file, its row rewritten) and a price the user gives show at once."""
    fx.write_jsonl(fx.codex_path(tmp_path / "codex"), fx.codex_session(ws))
    before = sessions(tmp_path, ws)[0]
    assert len(kept_rows(tmp_path)) == 1
    db = summaries.Summaries(tmp_path / "state" / "ctxd")
    connection = db._connect()
    assert connection is not None
    facts = json.loads(connection.execute("SELECT facts FROM file_summaries").fetchone()[0])
    facts["session"]["title"] = "written again by the owner"
    connection.execute("UPDATE file_summaries SET facts = ?, updated = updated + 1", (json.dumps(facts),))
    db.close()
    assert sessions(tmp_path, ws)[0]["title"] == "written again by the owner"
    config = tmp_path / "config" / "ctxd" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[prices."gpt-5-codex"]\ninput = 1000000.0\ncachedInput = 0.0\noutput = 0.0\n')
    row = sessions(tmp_path, ws)[0]
    assert row["cost"]["input"] == row["usage"]["input"] != before["cost"]["input"]


def test_a_kept_rows_cache_state_is_worked_out_when_it_is_shown(tmp_path: Path, ws: Path) -> None:
    """A row keeps its cache's facts, and its state only once that cannot change (cold after its
    lifetime): the same kept row shows the cache warm at a time within its lifetime (a clock set
    back) and cold after it (the state depends on the time, not on the file)."""
    from ctxd import agents
    from ctxd.agents.base import AgentConfig
    from ctxd.sessions import overview, pricing

    fx.write_jsonl(fx.claude_path(tmp_path / "claude", ws), claude_lines(ws, "Add a flag"))
    assert "cache cold" in table(tmp_path, ws)
    [(_, kept)] = kept_rows(tmp_path)
    shown = overview.Shown(pricing.price_table({}), {agent.name: AgentConfig() for agent in agents.every()}, True)
    last = json.loads(kept.partition("\n")[0])[0]["lastRequestAt"]
    assert last == "2025-10-03T11:00:02.000Z"
    from ctxd import isotime

    at = isotime.seconds(last)
    assert at is not None
    for now, state in ((at + 60, "warm"), (at + 400, "cold")):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(time, "time", lambda now=now: now)
            printed = shown.taken_up(kept)
        assert printed is not None and printed.cells[5].startswith(f"cache {state}")
