"""Hostile session files through the real daemon (issue 27): one file must never break the
workspace's threads, be mirrored into another session's thread, or delay a client's request."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from ctxd.agents.session import OTHER_KINDS
from ctxd.ledger.store import database_path
from ctxd.sessions import summaries
from tests import session_fixtures as fx
from tests.rpc import RpcError
from tests.test_sessions_e2e import CODEX_THREAD, homes, wait_thread

OTHER = "0199a213-7777-7800-8aa1-000000000001"


def test_numbers_and_strings_out_of_range_are_dropped_and_the_defaults_kept(daemon_factory, workspace: Path,
                                                                            tmp_path: Path, state_dir: Path) -> None:
    codex_home, _, env = homes(tmp_path)
    records = fx.codex_session(workspace)
    records.append({"timestamp": "2025-10-03T10:00:07.000Z", "type": "event_msg",
                    "payload": {"type": "task_started", "model_context_window": int("9" * 401)}})
    fx.write_jsonl(fx.codex_path(codex_home), records)
    huge_model = [fx.codex_meta(workspace, OTHER), *fx.codex_turn("hi", "2025-10-03T10:00:01.000Z", model="m" * 3_000_000,
                                                                  cwd=str(workspace))]
    fx.write_jsonl(fx.codex_path(codex_home, OTHER), huge_model)
    client = daemon_factory([workspace], env=env)
    uri = workspace.as_uri()
    codex = wait_thread(client, workspace, CODEX_THREAD, lambda t: t["itemCount"] == 6)
    other = wait_thread(client, workspace, f"codex:{OTHER}")
    # Not believed: Codex's own effective window for its model (95% of the catalogue's 400k,
    # ctxd/agents/codex.py), never the file's number.
    assert codex["usage"]["contextWindow"] == 380_000
    assert other["model"] is None
    gauge = client.request("ctxd/usage", {"workspace": uri, "thread": f"codex:{OTHER}"})
    assert len(json.dumps(gauge)) < 20_000 and gauge["model"] != "m" * 3_000_000
    # A window an earlier version stored from such a file (marked as the agent's own figures, as
    # followed sessions' are now): ignored, even with the file gone.
    client.shutdown()
    fx.codex_path(codex_home).unlink()
    stored = {"model": "gpt-5-codex", "contextWindow": int("9" * 401),
              "followed": {"agent": "codex", "autoCompactLimit": int("9" * 401)}}
    with sqlite3.connect(database_path(state_dir / "ctxd", workspace)) as db:
        db.execute("UPDATE threads SET prompt_context = ? WHERE thread = ?", (json.dumps(stored), CODEX_THREAD))
    client = daemon_factory([workspace], env=env)
    listed = {t["thread"]: t for t in client.request("ctxd/threads", {"workspace": uri})["threads"]}
    assert listed[CODEX_THREAD]["usage"]["contextWindow"] == 400_000  # gpt-5-codex's, from the catalogue


def test_a_second_file_claiming_a_session_id_does_not_take_its_thread(daemon_factory, workspace: Path,
                                                                      tmp_path: Path) -> None:
    codex_home, _, env = homes(tmp_path)
    fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(workspace))
    client = daemon_factory([workspace], env=env)
    uri = workspace.as_uri()
    before = wait_thread(client, workspace, CODEX_THREAD, lambda t: t["itemCount"] == 6)
    impostor = [fx.codex_meta(workspace), *fx.codex_turn("IMPOSTOR prompt", "2025-10-03T12:00:00.000Z", cwd=str(workspace)),
                fx.codex_answer("IMPOSTOR answer", "2025-10-03T12:00:01.000Z")]
    fx.write_jsonl(fx.codex_path(codex_home, day="2025/10/05"), impostor)
    fx.append_jsonl(fx.codex_path(codex_home), [fx.codex_answer("the real one goes on", "2025-10-03T10:00:09.000Z")])
    after = wait_thread(client, workspace, CODEX_THREAD, lambda t: t["itemCount"] == 7)
    history = client.request("ctxd/history", {"workspace": uri, "thread": CODEX_THREAD, "includeArchived": True})
    assert "IMPOSTOR" not in json.dumps(history) and after["historyVersion"] == before["historyVersion"]
    # After a restart too, whichever file is read first.
    client.shutdown()
    client = daemon_factory([workspace], env=env)
    wait_thread(client, workspace, CODEX_THREAD, lambda t: t["itemCount"] == 7)
    client.request("ctxd/threads", {"workspace": uri})
    history = client.request("ctxd/history", {"workspace": uri, "thread": CODEX_THREAD, "includeArchived": True})
    assert "IMPOSTOR" not in json.dumps(history) and history["total"] == 7


def test_an_empty_session_id_is_no_thread_and_codex_colon_is_read_only(daemon_factory, workspace: Path,
                                                                       tmp_path: Path) -> None:
    codex_home, _, env = homes(tmp_path)
    fx.write_jsonl(fx.codex_path(codex_home, "empty"), fx.codex_session(workspace, ""))
    fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(workspace))
    client = daemon_factory([workspace], env=env)
    uri = workspace.as_uri()
    wait_thread(client, workspace, CODEX_THREAD)
    threads = [t["thread"] for t in client.request("ctxd/threads", {"workspace": uri})["threads"]]
    assert threads == [CODEX_THREAD]
    for thread in ("codex:", "claude:"):
        with pytest.raises(RpcError) as refused:
            client.request("ctxd/record", {"workspace": uri, "thread": thread,
                                           "items": [{"type": "message", "role": "user", "content": "hi"}]})
        assert refused.value.code == -32602 and "read-only" in refused.value.message


def test_a_line_nested_300_deep_does_not_keep_the_session_from_being_mirrored(daemon_factory, workspace: Path,
                                                                               tmp_path: Path) -> None:
    codex_home, _, env = homes(tmp_path)
    deep: dict = {"x": 1}
    for _ in range(300):
        deep = {"a": deep}
    records = fx.codex_session(workspace)
    records.insert(4, {"timestamp": "2025-10-03T10:00:02.000Z", "type": "response_item", "payload": {
        "type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "x"}], "extra": deep}})
    fx.write_jsonl(fx.codex_path(codex_home), records)
    client = daemon_factory([workspace], env=env)
    wait_thread(client, workspace, CODEX_THREAD, lambda t: t["itemCount"] == 6)


def big_session(cwd: Path, turns: int) -> list[dict]:
    records = [fx.codex_meta(cwd)]
    for n in range(turns):
        ts = "2025-10-03T10:00:00.000Z"
        records += [*fx.codex_tool_round(f"call_{n}", f"cat f{n}", f"line {n}\n", ts)[1:], fx.codex_answer(f"ok {n}", ts)]
    return records


def test_a_client_request_during_a_big_import_is_answered_before_the_import_ends(daemon_factory, workspace: Path,
                                                                                 tmp_path: Path) -> None:
    codex_home, claude_home, env = homes(tmp_path)
    fx.write_jsonl(fx.claude_path(claude_home, workspace), fx.claude_session(workspace))
    client = daemon_factory([workspace], env=env)
    uri = workspace.as_uri()
    client.request("ctxd/record", {"workspace": uri, "thread": "mine",
                                   "items": [{"type": "message", "role": "user", "content": "my own work"}]})
    wait_thread(client, workspace, "claude:" + fx.CLAUDE_ID)
    records = big_session(workspace, 10_000)  # 30,000 items
    total = len(records) - 1
    seen = len(client.notifications)
    fx.write_jsonl(fx.codex_path(codex_home), records)
    client.wait_for_notification("ctxd/threadsChanged", lambda p: p["workspace"] == uri, after=seen, timeout=60)
    # The import has begun (its thread is listed). A client's own record and gauge now:
    recorded = client.request("ctxd/record", {"workspace": uri, "thread": "mine",
                                              "items": [{"type": "message", "role": "user", "content": "more"}]})
    gauge = client.request("ctxd/usage", {"workspace": uri, "thread": "mine"})
    mirrored = client.request("ctxd/history", {"workspace": uri, "thread": CODEX_THREAD, "limit": 1})["total"]
    assert recorded["itemCount"] == 2 and gauge["usage"]["usedTokens"] > 0
    assert mirrored < total, "the client's requests waited for the whole import"
    # A live session's new line waits for a slice of the import, not for all of it.
    mark = len(client.notifications)
    fx.append_jsonl(fx.claude_path(claude_home, workspace), fx.claude_assistant(
        [{"type": "text", "text": "Still here."}], "msg_03", "a3", "a2", workspace, "2025-10-03T11:00:09.000Z",
        fx.claude_usage(7, 100, 16_000, 20)))
    client.wait_for_notification("ctxd/usageChanged", lambda p: p["thread"] == "claude:" + fx.CLAUDE_ID
                                 and p["usedTokens"] >= 16_107, after=mark, timeout=60)
    mirrored = client.request("ctxd/history", {"workspace": uri, "thread": CODEX_THREAD, "limit": 1})["total"]
    assert mirrored < total, "the live session's line waited for the whole import"
    wait_thread(client, workspace, CODEX_THREAD, lambda t: t["itemCount"] == total, timeout=120)


def test_a_session_of_thousands_of_made_up_kinds_names_a_few(daemon_factory, workspace: Path, tmp_path: Path) -> None:
    """Format drift is named by kind (`ctxd/status`' `unread`, `ctxd sessions`' stderr): a file of
    5,000 kinds ctxd does not read, each 200 characters, names 32 of them cut to 64 characters, and
    counts the rest as one; its summary stays small. (Each kind was named whole: the summary was as
    large as the file, and `ctxd sessions` printed them all.)"""
    _, claude_home, env = homes(tmp_path)
    made_up = [{"type": f"kind-{n:04}-" + "x" * 190, "timestamp": "2025-10-03T11:00:09.000Z"} for n in range(5_000)]
    fx.write_jsonl(fx.claude_path(claude_home, workspace), [*fx.claude_session(workspace), *made_up])
    state = tmp_path / "cli-state"
    done = subprocess.run([sys.executable, "-m", "ctxd", "sessions", "--workspace", str(workspace), "--format", "json"],
                          capture_output=True, timeout=120, env={**os.environ, **env, "XDG_STATE_HOME": str(state)})
    assert done.returncode == 0, done.stderr.decode()
    [row] = json.loads(done.stdout)
    assert row["thread"] == f"claude:{fx.CLAUDE_ID}" and row["turns"] == 1
    assert b"33 kinds of record" in done.stderr and len(done.stderr) < 4_000
    with sqlite3.connect(summaries.database_path(state / "ctxd")) as db:
        [(facts, saved)] = db.execute("SELECT facts, state FROM file_summaries").fetchall()
    assert len(facts) + len(saved) < 20_000

    client = daemon_factory([workspace], env=env)
    wait_thread(client, workspace, f"claude:{fx.CLAUDE_ID}")
    [source] = [s for s in client.request("ctxd/status", {"workspace": workspace.as_uri()})["sources"]
                if s["agent"] == "claude"]
    [drift] = source["unread"]
    assert drift["records"] == 5_000 and len(drift["kinds"]) == 33 and OTHER_KINDS in drift["kinds"]
    assert all(len(kind) <= 64 for kind in drift["kinds"])
