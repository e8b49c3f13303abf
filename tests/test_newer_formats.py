"""A newer agent version's files (the real fixtures, mutated as a next version plausibly writes
them): the summary reader says what the daemon's reader says, and what the unmutated file says."""

from __future__ import annotations

import json
from pathlib import Path

from ctxd.agents.claude import ClaudeReader, session_id
from ctxd.agents.codex import CodexReader
from ctxd.sessions import summaries
from tests.rpc import REPO

FIXTURES = REPO / "tests" / "fixtures" / "agents"


def full_session(path: str, agent: str):  # type: ignore[no-untyped-def]
    reader = CodexReader(path, window=True) if agent == "codex" else ClaudeReader(path, session_id(path), window=True)
    reader.read()
    return reader.session


def test_a_blank_line_at_a_files_edge_hides_no_lines_time(tmp_path: Path) -> None:
    """An extra newline at the end (or the start) of a rollout or transcript: the last activity and
    the start are those of the lines beside it, as without it, in the summary and the daemon's reader."""
    for name, agent in (("codex-0.171.0.jsonl", "codex"), ("claude-2.1.332.jsonl", "claude")):
        data = (FIXTURES / name).read_bytes()
        if agent == "claude":  # (its last line a bookkeeping one, whose time only the edge gives)
            data += json.dumps({"type": "last-prompt", "lastPrompt": "Bump app.py", "timestamp": "2026-11-26T21:30:00.000Z",
                                "sessionId": "2009bcc5-85ba-431c-b4e2-481f4e482c80"}).encode() + b"\n"
        plain = tmp_path / f"plain-{name}"
        plain.write_bytes(data)
        want = full_session(str(plain), agent)
        for shape, mutated in (("trailing", data + b"\n"), ("trailing-crlf", data + b"\r\n"), ("leading", b"\n" + data)):
            path = tmp_path / f"{shape}-{name}"
            path.write_bytes(mutated)
            read = summaries.summarize(str(path), agent, None, None)
            assert read is not None
            for session in (full_session(str(path), agent), read.session):
                assert (session.last_activity, session.started) == (want.last_activity, want.started), (name, shape)


def test_an_unknown_block_beside_a_tool_result_after_the_last_report_is_counted_once(tmp_path: Path) -> None:
    """A newer Claude Code's new content-block kind beside a tool result, in a line after the last
    reply (the session waits for the model): counted once as unread (format drift), by the summary as
    by the daemon's reader, and not again when the summary is taken up after the file grew."""
    lines = [json.loads(line) for line in (FIXTURES / "claude-2.1.332.jsonl").read_text().splitlines()]
    last_result = max(n for n, rec in enumerate(lines) if rec.get("type") == "user"
                      and isinstance(rec["message"]["content"], list))
    lines = lines[:last_result + 1]
    lines[-1]["message"]["content"].append({"type": "tool_reference", "tool_name": "Read"})
    path = tmp_path / "2009bcc5-85ba-431c-b4e2-481f4e482c80.jsonl"
    path.write_text("".join(json.dumps(rec) + "\n" for rec in lines))
    want = full_session(str(path), "claude").unknown
    assert want == {"user.tool_reference": 1}
    read = summaries.summarize(str(path), "claude", None, None)
    assert read is not None and read.session.unknown == want
    assert read.stored.state is not None
    with path.open("a") as out:  # a bookkeeping line: the kept line is read again for the tail
        out.write(json.dumps({"type": "queue-operation", "operation": "dequeue", "timestamp": "2026-11-26T21:20:00.000Z",
                              "sessionId": "2009bcc5-85ba-431c-b4e2-481f4e482c80"}) + "\n")
    later = summaries.summarize(str(path), "claude", json.loads(read.stored.state), None)
    assert later is not None and later.session.unknown == full_session(str(path), "claude").unknown == want
