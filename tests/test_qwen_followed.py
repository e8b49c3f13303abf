"""A qwen-code session followed by the real daemon: the file qwen-code 0.24.4 wrote
(tests/fixtures/agents/qwen/session.jsonl) appears in its home as qwen writes it, and the daemon
shows it as the read-only thread `qwen:<id>` with qwen's own fill, window and compaction point,
pushes each new report, lists qwen's `/compress` in History with what it replaced archived, and
breaks the window down in qwen's `/context` categories; `ctxd sessions` and `ctxd usage` name it.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ctxd.agents.qwen import QwenReader, encode_project
from ctxd.ledger.store import database_path
from tests.rpc import Client

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "agents" / "qwen" / "session.jsonl"
SESSION = "2ffe4e28-b3a5-4bf4-b6b6-045e6b77ba91"
THREAD = f"qwen:{SESSION}"
WAIT = 30.0  # seconds: only a hang comes near (a write is followed within about one)


def until(what: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + WAIT
    while True:
        found = what()
        if found or time.monotonic() > deadline:
            assert found, "not within the time"
            return found
        time.sleep(0.05)


def mirrored(client: Client, uri: str) -> None:
    """Until what the owner found is mirrored: a session is listed from its summary before its
    items are, and the first read's push of its fill may come after the listing."""
    until(lambda: client.request("ctxd/sessions/sync", {"workspace": uri}, timeout=WAIT).get("idle"))


def qwen_session(tmp_path: Path, upto: int) -> tuple[Path, Path, Path, list[str]]:
    """The project folder, qwen's home, and the fixture's session written into it up to record
    `upto`: (work, home, the session file, every record's line)."""
    work = tmp_path / "app"
    work.mkdir()
    home = tmp_path / "qwen"
    chats = home / "projects" / encode_project(work) / "chats"
    chats.mkdir(parents=True)
    lines = FIXTURE.read_text().replace("/home/user/app", str(work)).splitlines(keepends=True)
    path = chats / f"{SESSION}.jsonl"
    path.write_text("".join(lines[:upto]))
    return work, home, path, lines


def test_a_qwen_session_is_followed_live_with_its_fill_compaction_and_categories(
        daemon_factory: Callable[..., Client], tmp_path: Path, state_dir: Path) -> None:
    work, home, path, lines = qwen_session(tmp_path, 4)  # the first prompt and its first reply
    client = daemon_factory([work], env={"QWEN_HOME": str(home)})
    uri = work.as_uri()

    def thread() -> dict[str, Any] | None:
        rows = client.request("ctxd/threads", {"workspace": uri})["threads"]
        return next((t for t in rows if t["thread"] == THREAD), None)

    first = until(thread)
    mirrored(client, uri)
    assert (first["source"], first["readOnly"], first["model"], first["title"]) == (
        "qwen", True, "qwen3-coder-plus", "Create hello.txt saying hello.")
    usage = first["usage"]
    assert (usage["usedTokens"], usage["contextWindow"], usage["autoCompactLimit"]) == (12_000, 1_000_000, 850_000)
    [source] = [s for s in client.request("ctxd/status", {"workspace": uri})["sources"] if s["agent"] == "qwen"]
    assert (source["version"], source["root"], source["sessions"]) == ("0.24.4", str(home / "projects"), 1)

    # Live: each write is pushed (the second turn's last report, then /compress's estimate).
    seen = len(client.notifications)
    with path.open("a") as f:
        f.write("".join(lines[4:22]))
    pushed = client.wait_for_notification("ctxd/usageChanged", lambda p: p["thread"] == THREAD, timeout=WAIT,
                                          after=seen)
    assert pushed["usedTokens"] in (12_100, 13_000, 13_500, 14_000)
    until(lambda: (t := thread()) is not None and t["usage"]["usedTokens"] == 14_000)
    with path.open("a") as f:
        f.write("".join(lines[22:24]))
    until(lambda: (t := thread()) is not None and t["usage"]["usedTokens"] == 11_577)

    # qwen's /compress in History; nothing it replaced is lost.
    history = client.request("ctxd/history", {"workspace": uri, "thread": THREAD, "includeArchived": True})
    [compaction] = history["compactions"]
    assert (compaction["tokensBefore"], compaction["tokensAfter"]) == (14_000, 11_577)
    archived = [i for i in history["items"] if i.get("archived")]
    assert [i["call_id"] for i in archived if i["type"] == "function_call"] == ["call_1", "call_2", "call_3"]
    with path.open("a") as f:
        f.write("".join(lines[24:]))
    until(lambda: (t := thread()) is not None and t["usage"]["usedTokens"] == 2_000)

    # The breakdown in qwen's /context categories, its overhead inferred from the first request.
    breakdown = client.request("ctxd/usage", {"workspace": uri, "thread": THREAD})
    categories = {c["name"]: c for c in breakdown["categories"]}
    for name in ("systemPrompt", "builtinTools", "memoryFiles", "skills"):
        assert categories[name]["tokens"] > 0, name
    assert categories["builtinTools"]["tokens"] > categories["systemPrompt"]["tokens"] > categories["skills"]["tokens"]
    assert any("QWEN.md" in d["name"] for d in categories["memoryFiles"]["details"])
    assert categories["autocompactBuffer"]["tokens"] == 150_000

    # `ctxd sessions` and `ctxd usage` show it by its own name.
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_STATE_HOME": str(state_dir)}
    rows = subprocess.run([sys.executable, "-m", "ctxd", "sessions", "--workspace", str(work), "--format", "json",
                           "--qwen-home", str(home)], cwd=REPO, capture_output=True, text=True, timeout=WAIT, env=env)
    [row] = [r for r in json.loads(rows.stdout) if r["agent"] == "qwen"]
    assert (row["thread"], row["usedTokens"], row["autoCompactLimit"]) == (THREAD, 2_000, 850_000)
    shown = subprocess.run([sys.executable, "-m", "ctxd", "usage", "--workspace", str(work), "--thread", THREAD,
                            "--format", "json", "--state-dir", str(state_dir / "ctxd")], cwd=REPO, capture_output=True,
                           text=True, timeout=WAIT, env=env)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["usage"]["usedTokens"] == 2_000


def test_qwens_compaction_hook_after_its_record_keeps_the_fill_the_record_states(
        daemon_factory: Callable[..., Client], tmp_path: Path, state_dir: Path) -> None:
    """qwen's chat_compression record states the fill after it (newTokenCount). Its PostCompact
    hook, handled after the daemon mirrored that record, must not drop that figure as the stale
    one from before the compaction (the gauge fell back to an estimate, and stayed there)."""
    work, home, _, _ = qwen_session(tmp_path, 24)  # up to /compress
    client = daemon_factory([work], env={"QWEN_HOME": str(home)})
    uri = work.as_uri()

    def usage() -> dict[str, Any] | None:
        rows = client.request("ctxd/threads", {"workspace": uri})["threads"]
        row = next((t for t in rows if t["thread"] == THREAD), None)
        return row["usage"] if row is not None else None

    until(lambda: (u := usage()) is not None and u["usedTokens"] == 11_577)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_STATE_HOME": str(state_dir)}

    def run_hook(event: str, fixture: str) -> None:
        payload = (REPO / "tests" / "fixtures" / "agents" / "qwen" / "hooks" / f"{fixture}.json").read_text()
        done = subprocess.run([sys.executable, "-m", "ctxd", "hook", "qwen", event], cwd=REPO, env=env,
                              input=payload.replace("/home/user/app", str(work)), capture_output=True, text=True,
                              timeout=WAIT)
        assert done.returncode == 0 and done.stdout == ""

    mark = state_dir / "ctxd" / "hooks" / "sessions"
    run_hook("UserPromptSubmit", "UserPromptSubmit")  # the session's hooks ran before: its note exists
    until(lambda: list(mark.glob("*.json")))
    time.sleep(3)  # the daemon's watch has seen the note (a slow tick re-checks every second or so)
    seen = len(client.notifications)
    run_hook("PostCompact", "PostCompact")
    until(lambda: any("compactedAt" in p.read_text() for p in mark.glob("*.json")))  # the hook noted it
    try:  # the daemon acts on the note at once; without the fix it pushes the estimate here
        client.wait_for_notification("ctxd/usageChanged", lambda p: p["thread"] == THREAD, timeout=10, after=seen)
    except TimeoutError:
        pass
    now = usage()
    assert now is not None and (now["usedTokens"], now["source"]) == (11_577, "api")


def test_qwens_status_line_reaches_the_followed_threads_gauge(daemon_factory: Callable[..., Client], tmp_path: Path,
                                                              state_dir: Path) -> None:
    """qwen's `ui.statusLine` command (`ctxd statusline --agent qwen`) with the stdin qwen-code
    0.24.4 gave it (tests/fixtures/agents/qwen/statusline-stdin.json): the line shows qwen's fill
    against its own compaction point, and the followed thread's gauge takes that usage at once."""
    work, home, _, _ = qwen_session(tmp_path, 4)
    client = daemon_factory([work], env={"QWEN_HOME": str(home)})
    uri = work.as_uri()
    until(lambda: any(t["thread"] == THREAD for t in client.request("ctxd/threads", {"workspace": uri})["threads"]))
    mirrored(client, uri)
    stdin = json.loads((REPO / "tests" / "fixtures" / "agents" / "qwen" / "statusline-stdin.json").read_text())
    stdin.update(session_id=SESSION, workspace={"current_dir": str(work)})
    stdin["context_window"]["current_usage"] = 425_000
    seen = len(client.notifications)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_STATE_HOME": str(state_dir), "QWEN_HOME": str(home)}
    shown = subprocess.run([sys.executable, "-m", "ctxd", "statusline", "--agent", "qwen", "--no-colour"], cwd=REPO,
                           env=env, input=json.dumps(stdin), capture_output=True, text=True, timeout=WAIT)
    assert shown.returncode == 0 and shown.stdout.startswith("qwen · 50% of 850k"), shown.stdout
    pushed = client.wait_for_notification("ctxd/usageChanged", lambda p: p["thread"] == THREAD, timeout=WAIT,
                                          after=seen)
    assert pushed["usedTokens"] == 425_000


def test_a_qwen_sessions_reader_is_let_go_when_dormant_and_taken_up_where_it_stood(
        daemon_factory: Callable[..., Client], tmp_path: Path, state_dir: Path) -> None:
    """A dormant qwen-code session's reader is let go once the store holds where it stood, and taken
    up from there, live and across a restart: what follows is mirrored once, the /compress between
    included, and the file is not read again (a heavy history held every window in memory and read
    every file again at each start)."""
    work, home, path, lines = qwen_session(tmp_path, 14)  # two turns, before /compress
    old = time.time() - 3600
    os.utime(path, (old, old))
    env = {"QWEN_HOME": str(home), "CTXD_DORMANT_SECONDS": "1"}
    client = daemon_factory([work], env=env)
    uri = work.as_uri()

    def history() -> dict[str, Any]:
        return client.request("ctxd/history", {"workspace": uri, "thread": THREAD, "includeArchived": True})

    def fill() -> int | None:
        rows = client.request("ctxd/threads", {"workspace": uri})["threads"]
        return next((t["usage"]["usedTokens"] for t in rows if t["thread"] == THREAD), None)

    log = state_dir / "ctxd" / "owner" / "owner.log"
    until(lambda: log.is_file() and "let go of 1 dormant session readers" in log.read_text(errors="replace"))
    with path.open("a") as f:
        f.write("".join(lines[14:24]))  # the rest of the second turn, then /compress
    until(lambda: fill() == 11_577)
    client.shutdown()
    with path.open("a") as f:
        f.write("".join(lines[24:]))  # written while no ctxd ran
    client = daemon_factory([work], env=env)
    until(lambda: fill() == 2_000)
    before = history()
    [compaction] = before["compactions"]
    assert (compaction["tokensBefore"], compaction["tokensAfter"]) == (14_000, 11_577)
    whole = QwenReader(str(path), SESSION)
    whole.read()  # the window, read at once
    active = [json.dumps(i, sort_keys=True) for i in before["items"] if not i.get("archived")]
    assert active == [json.dumps(i, sort_keys=True) for i in whole.session.items]
    calls = [i["call_id"] for i in before["items"] if i["type"] == "function_call"]
    assert len(calls) == len(set(calls))  # nothing mirrored twice
    [source] = [s for s in client.request("ctxd/status", {"workspace": uri})["sources"] if s["agent"] == "qwen"]
    assert source["sessions"] == 1
    client.shutdown()
    client = daemon_factory([work], env=env)  # and again, the file as it was: taken up, nothing read
    until(lambda: fill() == 2_000)
    client.request("ctxd/ghost/list", {"workspace": uri})  # a round trip after its first read
    assert history() == before


REWIND_FIXTURE = REPO / "tests" / "fixtures" / "agents" / "qwen" / "session-rewind.jsonl"


def _rewind_session(tmp_path: Path) -> tuple[Path, Path, Path, list[str], str]:
    """qwen-code's rewound session (two prompts, a rewind to the first answer, a third prompt) in a
    project folder: (work, home, the session file, its lines, its thread)."""
    work = tmp_path / "app"
    work.mkdir()
    home = tmp_path / "qwen"
    chats = home / "projects" / encode_project(work) / "chats"
    chats.mkdir(parents=True)
    lines = REWIND_FIXTURE.read_text().replace("/home/user/app", str(work)).splitlines(keepends=True)
    session = json.loads(lines[0])["sessionId"]
    return work, home, chats / f"{session}.jsonl", lines, f"qwen:{session}"


def _texts(items: list[dict[str, Any]]) -> list[str]:
    return [part["text"] for item in items if item["type"] == "message" for part in item["content"]]


@pytest.mark.parametrize("seen", ["none", "the branch", "the rewind"])
def test_what_a_rewind_in_a_file_read_from_its_start_dropped_is_archived_once(
        daemon_factory: Callable[..., Client], tmp_path: Path, state_dir: Path, seen: str) -> None:
    """A qwen-code session read from its start with a rewind in it (the daemon started after the
    rewind; the rewind and the branch it drops in one read): the branch it dropped reaches the
    ledger archived, once, and recall finds it, whether the thread held none of the session
    before, its branch (mirrored live, the rewind not yet), or all of it (the rewind seen live).
    Before, the branch of a session first seen whole never reached the ledger."""
    work, home, path, lines, thread = _rewind_session(tmp_path)
    rewind = next(n for n, line in enumerate(lines) if '"subtype":"rewind"' in line.replace(" ", ""))
    env = {"QWEN_HOME": str(home)}
    uri = work.as_uri()
    if seen != "none":  # a daemon followed it before, up to the branch, or live to its end
        path.write_text("".join(lines[:rewind]))
        client = daemon_factory([work], env=env)
        until(lambda: any(t["thread"] == thread for t in client.request("ctxd/threads", {"workspace": uri})["threads"]))
        mirrored(client, uri)
        if seen == "the rewind":
            with path.open("a") as f:
                f.write("".join(lines[rewind:]))
            until(lambda: "Answer 2b." in _texts(client.request("ctxd/history", {"workspace": uri,
                                                                             "thread": thread})["items"]))
            mirrored(client, uri)
        client.shutdown()
        with sqlite3.connect(database_path(state_dir / "ctxd", work)) as db:
            db.execute("DELETE FROM followed")  # where its reader stood is gone: the file is read from its start
    path.write_text("".join(lines))
    client = daemon_factory([work], env=env)
    until(lambda: any(t["thread"] == thread for t in client.request("ctxd/threads", {"workspace": uri})["threads"]))
    mirrored(client, uri)
    history = client.request("ctxd/history", {"workspace": uri, "thread": thread, "includeArchived": True})
    whole = QwenReader(str(path))
    whole.read()
    active = [json.dumps(i, sort_keys=True) for i in history["items"] if not i.get("archived")]
    assert active == [json.dumps(i, sort_keys=True) for i in whole.session.items]
    assert _texts(whole.session.items) == ["First question.", "Answer 1.", "Second question, again.", "Answer 2b."]
    archived = _texts([i for i in history["items"] if i.get("archived")])
    assert archived.count("Second question.") == 1 and archived.count("Answer 2.") == 1, archived
    for word, text in (("Second question", "Second question."), ("Answer", "Answer 2.")):
        found = client.request("ctxd/recall", {"workspace": uri, "thread": thread, "query": word})["results"]
        assert any(hit["archived"] and text in hit["snippet"] for hit in found), (word, found)
    client.shutdown()
    client = daemon_factory([work], env=env)  # and again, taken up where it stood: nothing changes
    until(lambda: any(t["thread"] == thread for t in client.request("ctxd/threads", {"workspace": uri})["threads"]))
    client.request("ctxd/ghost/list", {"workspace": uri})  # a round trip after its first read
    mirrored(client, uri)
    assert client.request("ctxd/history", {"workspace": uri, "thread": thread, "includeArchived": True}) == history
