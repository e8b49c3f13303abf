"""Summaries under attack: whatever happened to a session file or to the state dir between two runs,
`ctxd sessions` shows what a run from an empty state dir shows, and never fails.

The CLI runs as a process over a state dir of the test's own (tests/test_summaries.py `sessions`).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ctxd.sessions import summaries
from tests import session_fixtures as fx
from tests.test_summaries import claude_lines, sessions


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    return folder


def fresh(tmp_path: Path, ws: Path, name: str) -> list[dict[str, Any]]:
    """The rows of a run from an empty state dir."""
    return sessions(tmp_path, ws, {"XDG_STATE_HOME": str(tmp_path / name)})


def bookkeeping(kind: str, ts: str | None, ws: Path) -> dict[str, Any]:
    """A Claude Code 2.1 bookkeeping line (an attachment, an `atis-latch` without a time)."""
    line: dict[str, Any] = {"type": kind, "sessionId": fx.CLAUDE_ID}
    if ts is not None:
        line.update(timestamp=ts, cwd=str(ws), uuid=f"b-{ts}")
    return line


def test_the_last_activity_of_a_file_read_in_two_parts_is_the_one_read_at_once(tmp_path: Path, ws: Path) -> None:
    """Claude Code 2.1 writes a prompt's attachments after it, timed before it, and lines without a
    time at the end of a turn. A file read up to its prompt, then grown by those, shows the last
    activity a read of it whole shows (the first line of the second read, an attachment, gave its
    time as the latest: the session listed as active earlier than it was, or sorted elsewhere)."""
    path = fx.write_jsonl(fx.claude_path(tmp_path / "claude", ws), [
        bookkeeping("queue-operation", "2025-10-03T11:00:00.000Z", ws),
        fx.claude_user("Add a flag", "u1", None, ws, "2025-10-03T11:00:01.084Z")])
    sessions(tmp_path, ws)
    fx.append_jsonl(path, [bookkeeping("attachment", "2025-10-03T11:00:01.076Z", ws),
                           bookkeeping("attachment", "2025-10-03T11:00:01.078Z", ws),
                           bookkeeping("atis-latch", None, ws)])
    assert sessions(tmp_path, ws) == fresh(tmp_path, ws, "fresh-1")
    fx.append_jsonl(path, [bookkeeping("atis-latch", None, ws)])  # (the attachment that ended the last read)
    assert sessions(tmp_path, ws) == fresh(tmp_path, ws, "fresh-2")
    fx.append_jsonl(path, fx.claude_assistant([{"type": "text", "text": "Done."}], "msg_01", "a1", "u1", ws,
                                              "2025-10-03T11:00:02.000Z", fx.claude_usage(4, 100, 15_000, 20)))
    [row] = sessions(tmp_path, ws)
    assert [row] == fresh(tmp_path, ws, "fresh-3") and row["lastActivity"] == "2025-10-03T11:00:02.000Z"


@pytest.mark.parametrize("column, value", [
    ("facts", "[1]"),  # JSON, not a summary
    ("facts", '{"used": 3}'),
    ("facts", '{"session": {"turn_count": "x", "cumulative": 5}}'),  # a session no summary makes
    ("file", "[1, 2]"),  # a stamp of another shape (also the row a write compares with)
    ("state", '{"offset": 1e999, "session": {}}'),  # an offset no reader can take up
    ("state", "[]"),
], ids=["facts-list", "facts-no-session", "facts-bad-session", "file-list", "state-infinite-offset", "state-list"])
def test_a_damaged_summary_row_is_read_again_never_fails(tmp_path: Path, ws: Path, column: str, value: str) -> None:
    """A row of the state dir's database damaged to another shape (the database itself sound) is
    no summary: the file is read again, as from an empty state dir, and its summary written anew
    (a list for the facts failed every run with a TypeError; an infinite offset left the session
    out of every listing, its row never replaced)."""
    path = fx.write_jsonl(fx.claude_path(tmp_path / "claude", ws), claude_lines(ws, "Add a flag"))
    fx.write_jsonl(fx.codex_path(tmp_path / "codex"), fx.codex_session(ws))
    assert len(sessions(tmp_path, ws)) == 2
    database = summaries.database_path(tmp_path / "state" / "ctxd")
    with sqlite3.connect(database) as db:
        db.execute(f"UPDATE file_summaries SET {column} = ?", (value,))  # noqa: S608 - the test's own columns
    if column == "state":  # (a file that changed since: its state is taken up)
        fx.append_jsonl(path, fx.claude_assistant([{"type": "text", "text": "More."}], "msg_02", "a2", "a1", ws,
                                                  "2025-10-03T11:00:09.000Z", fx.claude_usage(4, 100, 20_000, 20)))
    want = fresh(tmp_path, ws, "fresh")
    assert len(want) == 2
    assert sessions(tmp_path, ws) == want
    assert sessions(tmp_path, ws) == want


def test_the_owner_lists_a_session_whose_summary_row_is_damaged(daemon_factory, workspace: Path, tmp_path: Path,
                                                                state_dir: Path) -> None:
    """`ctxd sessions` left the summaries in the state dir the owner shares; a row damaged there
    (a session no summary makes) is read again by the owner's first listing, which lists every
    session as `ctxd sessions` does, and the owner lives on."""
    from tests.rpc import REPO, daemon_env
    from tests.test_sessions_e2e import CLAUDE_THREAD, CODEX_THREAD, homes, wait_thread

    codex_home, claude_home, env = homes(tmp_path)
    fx.write_jsonl(fx.claude_path(claude_home, workspace), claude_lines(workspace, "Add a flag"))
    fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(workspace))

    def cli_rows() -> dict[str, tuple[str, int]]:
        run = subprocess.run([sys.executable, "-m", "ctxd", "sessions", "--workspace", str(workspace), "--format",
                              "json"], capture_output=True, text=True, env=daemon_env(state_dir, env), cwd=str(REPO),
                             timeout=120)
        assert run.returncode == 0, run.stderr
        return {r["thread"]: (r["title"], r["usedTokens"]) for r in json.loads(run.stdout)}

    rows = cli_rows()
    assert sorted(rows) == sorted([CLAUDE_THREAD, CODEX_THREAD])
    with sqlite3.connect(summaries.database_path(state_dir / "ctxd")) as db:
        db.execute("UPDATE file_summaries SET facts = ?", ('{"session": {"turn_count": "x", "cumulative": 5}}',))
    client = daemon_factory([workspace], env=env)
    for thread, (title, used) in rows.items():
        wait_thread(client, workspace, thread, lambda t, title=title, used=used: (t["title"], t["usage"]["usedTokens"])
                    == (title, used))
    client.shutdown()
    assert cli_rows() == rows


def test_a_subagent_file_rewritten_in_place_is_not_taken_up(tmp_path: Path, ws: Path) -> None:
    """A Claude session's cost counts its subagents' files. One rewritten in place (the same size,
    another usage in its middle) makes the session's summary stale, and its reader is not taken up
    where it stood: its cost is the one a read from an empty state dir shows (it kept the old one)."""
    path = fx.write_jsonl(fx.claude_path(tmp_path / "claude", ws), claude_lines(ws, "Add a flag"))
    sub = path.with_suffix("") / "subagents" / "agent-1.jsonl"
    fx.write_jsonl(sub, [line for n in range(3) for line in fx.claude_assistant(
        [{"type": "text", "text": "sub"}], f"msg_s{n}", f"s{n}", None, ws, f"2025-10-03T11:00:0{n + 3}.000Z",
        fx.claude_usage(1_000, 0, 0, 500))])
    [before] = sessions(tmp_path, ws)
    data = sub.read_bytes()
    at = data.index(b'"input_tokens": 1000', data.index(b'"msg_s1"'))
    with sub.open("r+b") as out:  # in place: the same inode, the same size, the same first and last bytes
        out.seek(at)
        out.write(b'"input_tokens": 9000')
    [after] = sessions(tmp_path, ws)
    assert [after] == fresh(tmp_path, ws, "fresh") and after["cost"]["total"] > before["cost"]["total"]


def test_the_owner_follows_a_file_rewritten_in_place_without_growing(daemon_factory, workspace: Path,
                                                                     tmp_path: Path) -> None:
    """A followed file rewritten in place, the same size, its first and last bytes the same (another
    prompt in its first line): the owner reads it again, as `ctxd sessions` does (its reader
    checked only those bytes, and went on showing the old title)."""
    from tests.test_sessions_e2e import CLAUDE_THREAD, homes, wait_thread

    _, claude_home, env = homes(tmp_path)
    path = fx.write_jsonl(fx.claude_path(claude_home, workspace), claude_lines(workspace, "Add a flag AAAA"))
    client = daemon_factory([workspace], env=env)
    wait_thread(client, workspace, CLAUDE_THREAD, lambda t: t["title"] == "Add a flag AAAA")
    with path.open("r+b") as out:
        out.write(path.read_bytes().replace(b"AAAA", b"BBBB"))
    wait_thread(client, workspace, CLAUDE_THREAD, lambda t: t["title"] == "Add a flag BBBB")
    client.shutdown()


@pytest.mark.parametrize("planted", ["offset-past-the-file", "no-state"])
def test_a_summary_row_no_read_makes_hides_no_session_under_the_right_stamp(tmp_path: Path, ws: Path,
                                                                             planted: str) -> None:
    """A row written to the summaries with the file's stamp as it is (the file unchanged) but facts
    no read of it makes: its reader's offset past the size stamped, or no reader's state at all. It
    is no summary of the file: the file is read again and shown as a run from an empty state dir
    shows it (the planted title was shown, the row taken as fresh)."""
    fx.write_jsonl(fx.claude_path(tmp_path / "claude", ws), claude_lines(ws, "Add a flag"))
    [row] = sessions(tmp_path, ws)
    database = summaries.database_path(tmp_path / "state" / "ctxd")
    with sqlite3.connect(database) as db:
        [(file, facts, offset)] = db.execute("SELECT file, facts, offset FROM file_summaries").fetchall()
        shown = json.loads(facts)
        shown["session"]["title"] = "Planted"
        if planted == "offset-past-the-file":
            db.execute("UPDATE file_summaries SET facts = ?, offset = ?",
                       (json.dumps(shown), json.loads(file)["stamp"][2] + 1_000))
        else:
            db.execute("UPDATE file_summaries SET facts = ?, state = NULL, offset = NULL", (json.dumps(shown),))
    assert sessions(tmp_path, ws) == [row] == fresh(tmp_path, ws, "fresh")
    assert row["title"] == "Add a flag"


def test_a_restarted_owner_reads_again_a_file_rewritten_with_its_mtime_put_back(daemon_factory, workspace: Path,
                                                                                 tmp_path: Path) -> None:
    """An owner followed a session and stopped; the file was then rewritten in place, the same size,
    its mtime put back (`os.utime`: only its ctime moved). The next owner does not take its reader up
    where the one before stood (it did, the stamp being the same: the old fill was shown for good):
    it checks what was read, and shows the file as it is now."""
    import os

    from tests.test_sessions_e2e import CLAUDE_THREAD, homes, wait_thread

    _, claude_home, env = homes(tmp_path)
    path = fx.write_jsonl(fx.claude_path(claude_home, workspace), claude_lines(workspace, "Add a flag", 15_000))
    client = daemon_factory([workspace], env=env)
    wait_thread(client, workspace, CLAUDE_THREAD, lambda t: t["usage"]["usedTokens"] == 15_124)
    client.shutdown()
    st = path.stat()
    with path.open("r+b") as out:  # in place: the same inode, the same size
        out.write(path.read_bytes().replace(b"15000", b"16000"))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size
    client = daemon_factory([workspace], env=env)
    wait_thread(client, workspace, CLAUDE_THREAD, lambda t: t["usage"]["usedTokens"] == 16_124)
    client.shutdown()
