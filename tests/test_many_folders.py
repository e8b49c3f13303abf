"""Thousands of workspace folders added at once (issue #36): a followed session keeps being shown.

Every session file the follower knows is matched again against the open folders whenever folders
are added. With 2,000 folders and a user's few hundred old sessions, that held the follower's lock
for tens of seconds (each folder resolved again for each file), and a followed session's new line
waited for all of it. The real daemon, real session files (tests/session_fixtures.py).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests import session_fixtures as fx
from tests.rpc import Client, RpcError
from tests.test_sessions_e2e import CLAUDE_THREAD, CODEX_THREAD, homes, wait_thread

FOLDERS = 2000
OTHER_SESSIONS = 1000  # an agent's older sessions, of other projects
HANG_SECONDS = 30.0  # a hang, not a speed goal: the line arrives in well under a second


def other_sessions(agent: str, codex_home: Path, claude_home: Path, elsewhere: Path) -> None:
    for n in range(OTHER_SESSIONS):
        session_id = f"0199a213-81c0-7800-8aa1-{n:012d}"
        project = elsewhere / f"p{n}"
        if agent == "codex":
            fx.write_jsonl(fx.codex_path(codex_home, session_id), [fx.codex_meta(project, session_id)])
        else:
            fx.write_jsonl(fx.claude_path(claude_home, project, session_id),
                           [fx.claude_user("hello", "u1", None, project, "2025-10-03T11:00:00.000Z", session_id)])


def appended_line(agent: str, ws: Path) -> list[dict[str, Any]]:
    if agent == "codex":
        return [fx.codex_answer("written while 2,000 folders opened", "2025-10-03T10:01:00.000Z")]
    return fx.claude_assistant([{"type": "text", "text": "written while 2,000 folders opened"}], "msg_09", "a9",
                               "a2", ws, "2025-10-03T11:00:09.000Z", fx.claude_usage(6, 500, 15_100, 40))


def total(client: Client, ws: Path, thread: str) -> int:
    count: int = client.request("ctxd/history", {"workspace": ws.as_uri(), "thread": thread})["total"]
    return count


@pytest.mark.parametrize("agent", ["codex", "claude"])
def test_a_followed_sessions_new_line_is_shown_while_2000_folders_open(daemon_factory, workspace: Path,
                                                                       tmp_path: Path, agent: str) -> None:
    codex_home, claude_home, env = homes(tmp_path)
    if agent == "codex":
        thread, path = CODEX_THREAD, fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(workspace))
    else:
        thread = CLAUDE_THREAD
        path = fx.write_jsonl(fx.claude_path(claude_home, workspace), fx.claude_session(workspace))
    other_sessions(agent, codex_home, claude_home, tmp_path / "elsewhere")
    folders = [tmp_path / "many" / f"f{n}" for n in range(FOLDERS)]
    for folder in folders:
        folder.mkdir(parents=True)
    client = daemon_factory([workspace], env=env)
    wait_thread(client, workspace, thread, timeout=HANG_SECONDS)
    before = total(client, workspace, thread)

    client.notify("workspace/didChangeWorkspaceFolders", {"event": {
        "added": [{"uri": f.as_uri(), "name": f.name} for f in folders], "removed": []}})
    deadline = time.monotonic() + HANG_SECONDS
    while True:  # the last folder usable: the follower is told of the folders now
        try:
            client.request("ctxd/usage", {"workspace": folders[-1].as_uri()})
            break
        except RpcError:
            assert time.monotonic() < deadline, "the last folder never opened"
            time.sleep(0.05)
    seen = len(client.notifications)
    fx.append_jsonl(path, appended_line(agent, workspace))
    deadline = time.monotonic() + HANG_SECONDS
    while total(client, workspace, thread) == before:
        assert time.monotonic() < deadline, "the appended line was never shown"
        time.sleep(0.05)
    client.wait_for_notification("ctxd/usageChanged", lambda p: p["thread"] == thread, timeout=HANG_SECONDS, after=seen)
