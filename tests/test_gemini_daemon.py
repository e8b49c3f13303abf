"""Gemini CLI sessions followed by the real daemon, from the files Gemini CLI 0.61.0 wrote
(tests/fixtures/agents/gemini/session.jsonl, written here line by line as it wrote them), and
ctxd's entries in its settings.json installed and taken out byte for byte.

Nothing asserts a duration: the waits are bounds only a hang reaches."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.rpc import REPO, Client
from tests.session_fixtures import mirrored_as
from tests.test_hooks import ctxd, env_for, make_repo

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "agents" / "gemini"
SESSION = "3863ff50-b97a-41c5-8309-110c16f9d66b"
THREAD = f"gemini:{SESSION}"
FIXTURE_ROOT = "/home/user/app"
WAIT = 30.0


def _lines(work: Path) -> list[str]:
    """The fixture's lines as Gemini CLI writes them for a project in `work`."""
    digest = hashlib.sha256(FIXTURE_ROOT.encode()).hexdigest()
    mine = hashlib.sha256(str(work).encode()).hexdigest()
    return [line.replace(digest, mine).replace(FIXTURE_ROOT, str(work))
            for line in (FIXTURES / "session.jsonl").read_text().splitlines()]


def _chats(home: Path, work: Path) -> Path:
    chats = home / ".gemini" / "tmp" / "app" / "chats"
    chats.mkdir(parents=True)
    (chats.parent / ".project_root").write_text(str(work))
    return chats


def _until(what: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + WAIT
    while True:
        found = what()
        if found or time.monotonic() > deadline:
            assert found, "not within the time"
            return found
        time.sleep(0.05)


def test_a_session_is_followed_live_with_its_compression_and_a_stub_is_no_session(
        daemon_factory: Callable[..., Client], tmp_path: Path, state_dir: Path) -> None:
    work = tmp_path / "app"
    work.mkdir()
    home = tmp_path / "gemini-home"
    chats = _chats(home, work)
    lines = _lines(work)
    # A resume in a later minute leaves the header and the session context alone in a file
    (chats / "session-2026-12-02T01-19-3863ff50.jsonl").write_text("\n".join(lines[11:13]) + "\n")
    client = daemon_factory([work], env={"GEMINI_CLI_HOME": str(home)})
    uri = work.as_uri()
    path = chats / "session-2026-12-02T01-18-3863ff50.jsonl"
    path.write_text("\n".join(lines[:5]) + "\n")  # up to the first reply: 12,000 prompt tokens

    def thread(check: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
        found = [t for t in client.request("ctxd/threads", {"workspace": uri})["threads"] if t["source"] == "gemini"]
        return found[0] if len(found) == 1 and check(found[0]) else None

    first = _until(lambda: thread(lambda t: t["usage"]["usedTokens"] == 12_000))
    assert (first["thread"], first["readOnly"], first["model"]) == (THREAD, True, "gemini-2.5-pro")
    assert first["usage"]["contextWindow"] == 1_048_576 and first["usage"]["autoCompactLimit"] == 524_288
    # Each write reaches the gauge without a request for it: the daemon pushes ctxd/usageChanged
    seen = len(client.notifications)
    with path.open("a") as f:
        f.write("\n".join(lines[5:22]) + "\n")  # the rest of turn 1, the resume, 600,000 tokens, the compression
    client.wait_for_notification("ctxd/usageChanged", lambda p: p["thread"] == THREAD, timeout=WAIT, after=seen)
    with path.open("a") as f:
        f.write("\n".join(lines[22:]) + "\n")
    # the last report: 5,000 (the reply after it reported none: ctxd counts it on top)
    last = _until(lambda: thread(lambda t: t["usage"]["source"] == "api+estimate"))
    assert 5_000 < last["usage"]["usedTokens"] < 5_100

    kept = client.request("ctxd/history", {"workspace": uri, "thread": THREAD, "includeArchived": True})
    [compaction] = kept["compactions"]
    assert (compaction["strategy"], compaction["tokensBefore"], compaction["tokensAfter"]) == ("gemini", 600_000, 4_000)
    archived = [i for i in kept["items"] if i.get("archived")]
    assert any(i.get("call_id") == "write_file__call_1" for i in archived)  # what the compression dropped
    # The breakdown in /context's shape: what Gemini CLI sends besides the messages (its system
    # instruction and its tools, inferred from its first request's reported input, half each)
    breakdown = client.request("ctxd/usage", {"workspace": uri, "thread": THREAD})
    rows = {c["name"]: c for c in breakdown["categories"]}
    assert set(breakdown["inferred"]) == {"systemPrompt", "builtinTools"}
    assert [d["name"] for d in rows["systemPrompt"]["details"]] == ["Gemini CLI's system instruction (inferred)"]
    assert [d["name"] for d in rows["builtinTools"]["details"]] == ["Gemini CLI's built-in tool declarations (inferred)"]
    assert abs(rows["systemPrompt"]["tokens"] - rows["builtinTools"]["tokens"]) <= 1 and rows["systemPrompt"]["tokens"] > 0
    assert sum(rows[c]["tokens"] for c in rows if c not in ("freeSpace", "autocompactBuffer")) == \
        breakdown["usage"]["usedTokens"]
    [source] = [s for s in client.request("ctxd/status", {"workspace": uri})["sources"] if s["agent"] == "gemini"]
    assert source["version"] == "0.61.0" and source["root"] == str(home / ".gemini" / "tmp") and source["unread"] == []

    # A rewind (`/rewind` to the third prompt) is an operation in History: what it took back is archived
    with path.open("a") as f:
        f.write(json.dumps({"$rewindTo": "ff5b114d-db9a-4a5c-928a-8adc27b62415"}) + "\n")

    def rewound() -> dict[str, Any] | None:
        found = client.request("ctxd/history", {"workspace": uri, "thread": THREAD, "includeArchived": True})
        return found if len(found["operations"]) == 2 else None

    before = _until(rewound)
    assert not any("How many files" in json.dumps(i) for i in before["items"] if not i.get("archived"))
    assert any("How many files" in json.dumps(i) for i in before["items"] if i.get("archived"))
    # A restart reads the file from its start again: the thread stays as it was, nothing twice
    client.shutdown()
    client = daemon_factory([work], env={"GEMINI_CLI_HOME": str(home)})
    client.request("ctxd/ghost/list", {"workspace": uri})  # a round trip after its first read
    _until(lambda: thread(lambda t: True))
    assert client.request("ctxd/history", {"workspace": uri, "thread": THREAD, "includeArchived": True}) == before

    # `ctxd usage --thread gemini:<id>` shows its breakdown: its model and Gemini CLI's window
    shown = subprocess.run([sys.executable, "-m", "ctxd", "usage", "--workspace", str(work), "--thread", THREAD,
                            "--detail", "--color", "never"], cwd=REPO, capture_output=True, text=True, timeout=60,
                           env={**env_for(tmp_path), "XDG_STATE_HOME": str(state_dir)})
    assert shown.returncode == 0, shown.stderr
    assert "gemini-2.5-pro" in shown.stdout and "/1.05M tokens" in shown.stdout and "System prompt" in shown.stdout

    # `ctxd sessions` shows it by its own name, once (the stub has no session id)
    done = subprocess.run([sys.executable, "-m", "ctxd", "sessions", "--workspace", str(work), "--format", "json",
                           "--gemini-home", str(home / ".gemini")], cwd=REPO, capture_output=True, text=True,
                          timeout=60, env=env_for(tmp_path))
    assert done.returncode == 0, done.stderr
    rows = [r for r in json.loads(done.stdout) if r["agent"] == "gemini"]
    assert [(r["thread"], r["turns"], r["compactions"]) for r in rows] == [(THREAD, 2, 1)]
    # (the rewind took back the turn Gemini's last report counted: no fill until it reports again)
    assert rows[0]["usedTokens"] is None and rows[0]["contextWindow"] == 1_048_576


def test_install_keeps_every_byte_and_uninstall_gives_them_back(tmp_path: Path) -> None:
    project = make_repo(tmp_path / "proj")
    env = {**env_for(tmp_path), "GEMINI_CLI_HOME": str(tmp_path / "gh")}
    settings = tmp_path / "gh" / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True)
    # the user's file as `gemini mcp add` leaves it (no final newline), with a server and a hook of the user's own
    users = json.loads((FIXTURES / "settings.after-mcp-add.json").read_text())
    users["mcpServers"] = {"tools": {"command": "my-tools", "args": ["--serve"]}}
    users["hooks"] = {"BeforeTool": [{"matcher": "run_shell_command", "hooks": [{"type": "command", "command": "audit"}]}]}
    original = json.dumps(users, indent=2).encode()
    settings.write_bytes(original)
    dry = ctxd(tmp_path, "hooks", "install", "--agent", "gemini", "--dry-run", cwd=project, env=env)
    assert dry.returncode == 0 and b"+++ " + str(settings).encode() in dry.stdout and settings.read_bytes() == original
    assert ctxd(tmp_path, "hooks", "install", "--agent", "gemini", cwd=project, env=env).returncode == 0
    installed = json.loads(settings.read_text())
    assert installed["hooks"]["BeforeTool"][0] == users["hooks"]["BeforeTool"][0]  # the user's hook, kept first
    assert [h["hooks"][0]["command"].split()[-3:] for h in installed["hooks"]["BeforeTool"][1:]] == [
        ["hook", "gemini", "BeforeTool"]]
    assert installed["mcpServers"]["ctxd"]["args"][-1] == "mcp" and len(installed["mcpServers"]) == 2
    assert ctxd(tmp_path, "hooks", "install", "--agent", "gemini", cwd=project, env=env).returncode == 0
    assert json.loads(settings.read_text()) == installed  # installed twice: once
    status = ctxd(tmp_path, "hooks", "status", cwd=project, env=env).stdout.decode()
    assert "gemini user: hooks BeforeAgent, BeforeTool; MCP server yes; this folder not trusted yet" in status
    assert ctxd(tmp_path, "hooks", "uninstall", "--agent", "gemini", cwd=project, env=env).returncode == 0
    assert settings.read_bytes() == original
    # a project's own settings: created by install, gone after uninstall
    assert ctxd(tmp_path, "hooks", "install", "--agent", "gemini", "--scope", "project", cwd=project, env=env).returncode == 0
    assert (project / ".gemini" / "settings.json").exists()
    assert ctxd(tmp_path, "hooks", "uninstall", "--agent", "gemini", "--scope", "project", cwd=project,
                env=env).returncode == 0
    assert not (project / ".gemini" / "settings.json").exists() and settings.read_bytes() == original


def test_the_hooks_checkpoint_before_a_turn_and_a_file_change_and_skip_reads(
        daemon_factory: Callable[..., Client], tmp_path: Path, state_dir: Path) -> None:
    project = make_repo(tmp_path / "proj")
    client = daemon_factory([project])
    env = {**env_for(tmp_path), "XDG_STATE_HOME": str(state_dir)}

    def hook(event: str, name: str, **over: Any) -> None:
        payload = {**json.loads((FIXTURES / "hooks" / f"{name}.json").read_text()), "cwd": str(project), **over}
        if "tool_input" in payload and "file_path" in payload["tool_input"]:
            payload["tool_input"]["file_path"] = str(project / "hello.txt")
        done = ctxd(tmp_path, "hook", "gemini", event, cwd=project, stdin=json.dumps(payload).encode(), env=env)
        assert done.returncode == 0 and done.stdout == b"", done  # nothing Gemini CLI would read as a decision

    hook("BeforeAgent", "BeforeAgent")
    (project / "hello.txt").write_text("hello\n")
    hook("BeforeTool", "BeforeTool-replace")
    (project / "hello.txt").write_text("hello, world\n")
    hook("BeforeTool", "BeforeTool-write_file", tool_name="read_file", tool_input={"file_path": str(project / "hello.txt")})
    hook("PreCompress", "PreCompress-auto")  # fired before every request: not installed, nothing done

    def listed() -> list[dict[str, Any]] | None:
        found = [c for c in client.request("ctxd/ghost/list", {"workspace": project.as_uri()})["snapshots"]
                 if c.get("thread") == THREAD]
        return found if len(found) == 2 else None

    by_trigger = {c["trigger"]: c for c in _until(listed)}
    assert by_trigger["turn"]["turn"]["text"] == "Create hello.txt saying hello."
    assert by_trigger["tool"]["tool"]["name"] == "replace" and by_trigger["tool"]["tool"]["paths"] == ["hello.txt"]
    client.request("ctxd/ghost/restore", {"workspace": project.as_uri(), "id": by_trigger["tool"]["id"]})
    assert (project / "hello.txt").read_text() == "hello\n"
    client.request("ctxd/ghost/restore", {"workspace": project.as_uri(), "id": by_trigger["turn"]["id"]})
    assert not (project / "hello.txt").exists()


def test_a_sessions_reader_is_let_go_when_dormant_and_taken_up_where_it_stood(
        daemon_factory: Callable[..., Client], tmp_path: Path, state_dir: Path) -> None:
    """A dormant Gemini CLI session's reader is let go once the store holds where it stood, and
    taken up from there, live and across a restart: what follows (a resume, a compression) is
    mirrored once, and the file is not read again (a heavy history held every window in memory
    and read every file again at each start)."""
    from ctxd.agents.gemini import GeminiReader

    work = tmp_path / "app"
    work.mkdir()
    home = tmp_path / "gemini-home"
    path = _chats(home, work) / "session-2026-12-02T01-18-3863ff50.jsonl"
    lines = _lines(work)
    path.write_text("\n".join(lines[:11]) + "\n")  # the first run
    old = time.time() - 3600
    os.utime(path, (old, old))
    env = {"GEMINI_CLI_HOME": str(home), "CTXD_DORMANT_SECONDS": "1"}
    client = daemon_factory([work], env=env)
    uri = work.as_uri()

    def history() -> dict[str, Any]:
        return client.request("ctxd/history", {"workspace": uri, "thread": THREAD, "includeArchived": True})

    def mirrored_as_read() -> bool:
        """The thread's window is the one a reader holding it reads from the file as it is."""
        held = GeminiReader(str(path))
        held.read()
        return mirrored_as(client, uri, THREAD, held.session.items)

    log = state_dir / "ctxd" / "owner" / "owner.log"
    _until(lambda: log.is_file() and "let go of 1 dormant session readers" in log.read_text(errors="replace"))
    with path.open("a") as f:
        f.write("\n".join(lines[11:27]) + "\n")  # a resume, its turn and the compression
    _until(mirrored_as_read)
    client.shutdown()
    with path.open("a") as f:
        f.write("\n".join(lines[27:]) + "\n")  # written while no ctxd ran: another resume and turn
    client = daemon_factory([work], env=env)
    _until(mirrored_as_read)
    before = history()
    assert len(before["compactions"]) == 1
    calls = [i["call_id"] for i in before["items"] if i["type"] == "function_call" and not i.get("archived")]
    assert calls and len(calls) == len(set(calls))  # nothing mirrored twice
    client.shutdown()
    client = daemon_factory([work], env=env)  # and again, the file as it was: taken up, nothing read
    _until(mirrored_as_read)
    assert history() == before


def test_a_rewind_to_an_unknown_id_then_a_resume_is_mirrored_as_gemini_cli_loads_it(
        daemon_factory: Callable[..., Client], tmp_path: Path) -> None:
    """A `$rewindTo` naming no message the daemon's reader remembers: the file is read again from
    its start, where Gemini CLI's loader drops every message. Before, that read left the thread's
    window as it was (only the next lines replaced it; after a restart they were appended to it:
    the window held both); now what it dropped is archived at once, then the turn after it and a
    resume are mirrored as the loader has them, nothing lost, nothing twice."""
    from tests.test_gemini_reader import _rewound_to_nothing_then_resumed

    work = tmp_path / "app"
    work.mkdir()
    home = tmp_path / "gemini-home"
    path = _chats(home, work) / "session-2026-12-02T01-18-3863ff50.jsonl"
    fixture = len(_lines(work))
    lines = [line.replace(FIXTURE_ROOT, str(work)) for line in _rewound_to_nothing_then_resumed()]
    lines[:fixture] = _lines(work)
    env = {"GEMINI_CLI_HOME": str(home)}
    uri = work.as_uri()

    def window_as_read() -> bool:
        from ctxd.agents.gemini import GeminiReader

        held = GeminiReader(str(path))
        held.read()
        return mirrored_as(client, uri, THREAD, held.session.items)

    path.write_text("\n".join(lines[:fixture]) + "\n")
    client = daemon_factory([work], env=env)
    _until(window_as_read)
    before = client.request("ctxd/history", {"workspace": uri, "thread": THREAD})["items"]
    with path.open("a") as f:
        f.write(lines[fixture] + "\n")  # the rewind alone
    _until(window_as_read)  # the window is empty
    client.shutdown()
    with path.open("a") as f:  # the turn after it and the resume, while no ctxd ran
        f.write("\n".join(lines[fixture + 1:]) + "\n")
    client = daemon_factory([work], env=env)
    _until(window_as_read)
    history = client.request("ctxd/history", {"workspace": uri, "thread": THREAD, "includeArchived": True})
    archived = [json.dumps({k: v for k, v in i.items() if k not in ("archived", "archivedBy")}, sort_keys=True)
                for i in history["items"] if i.get("archived")]
    for item in before:  # what the rewind dropped is archived
        assert json.dumps(item, sort_keys=True) in archived, item
    assert sum('"How many files are there?"' in i for i in archived) == 1
    found = client.request("ctxd/recall", {"workspace": uri, "thread": THREAD, "query": "How many files"})["results"]
    assert found and found[0]["archived"]
    [row] = [t for t in client.request("ctxd/threads", {"workspace": uri})["threads"] if t["thread"] == THREAD]
    assert (row["usage"]["usedTokens"], row["usage"]["source"]) == (3_500, "api")


def test_after_a_rewind_the_gauge_keeps_no_report_of_what_it_took_back(
        daemon_factory: Callable[..., Client], tmp_path: Path) -> None:
    """A `/rewind` past Gemini's last report: that report counted the turn taken back, so the gauge
    estimates from the items (as after a compaction), the same as for the same file read fresh,
    until Gemini reports again."""
    work = tmp_path / "app"
    work.mkdir()
    home = tmp_path / "gemini-home"
    chats = _chats(home, work)
    lines = _lines(work)[:11]  # the first run: its last reply reported 12,100 prompt tokens
    stamp = "2026-12-02T01:18:5{}.000Z".format

    def message(key: str, kind: str, content: Any, prompt: int | None = None) -> str:
        record: dict[str, Any] = {"id": key, "timestamp": stamp(key[-1]), "type": kind, "content": content}
        if prompt is not None:
            record.update(thoughts=[], model="gemini-2.5-pro", tokens={
                "input": prompt, "output": 20, "cached": 12_000, "thoughts": 0, "tool": 0, "total": prompt + 20})
        return json.dumps(record)

    taken_back = [message("p2", "user", [{"text": "Now explain every line of hello.txt in detail."}]),
                  message("r2", "gemini", "It has one line. " * 40, prompt=13_000)]
    rewind = json.dumps({"$rewindTo": "p2"})
    path = chats / "session-2026-12-02T01-18-3863ff50.jsonl"
    path.write_text("\n".join(lines + taken_back) + "\n")
    client = daemon_factory([work], env={"GEMINI_CLI_HOME": str(home)})
    uri = work.as_uri()

    def gauge(thread: str) -> dict[str, Any]:
        return dict(client.request("ctxd/usage", {"workspace": uri, "thread": thread}))

    def listed(thread: str, check: Callable[[dict[str, Any]], bool]) -> bool:
        found = [t for t in client.request("ctxd/threads", {"workspace": uri})["threads"] if t["thread"] == thread]
        return bool(found) and check(found[0]["usage"])

    _until(lambda: listed(THREAD, lambda u: (u["source"], u["usedTokens"]) == ("api", 13_000)))
    with path.open("a") as f:
        f.write(rewind + "\n")  # live, to a reader that caught up
    _until(lambda: listed(THREAD, lambda u: u["source"] == "estimate"))
    # The same file, read fresh from its start, as another session
    fresh_id = "5a1c0e2b-0d6f-4c1e-9f43-2b7d8e9a0c11"
    fresh = chats / "session-2026-12-02T01-30-5a1c0e2b.jsonl"
    fresh.write_text("\n".join(line.replace(SESSION, fresh_id) for line in [*lines, *taken_back, rewind]) + "\n")
    _until(lambda: listed(f"gemini:{fresh_id}", lambda u: u["source"] == "estimate"))
    ours, theirs = gauge(THREAD), gauge(f"gemini:{fresh_id}")
    assert ours["usage"]["usedTokens"] == theirs["usage"]["usedTokens"] < 13_000
    assert ours["categories"] == theirs["categories"]
    # Gemini reports again: that is the fill
    with path.open("a") as f:
        f.write("\n".join([message("p3", "user", [{"text": "Make it say hi."}]),
                           message("r3", "gemini", "Done.", prompt=12_400)]) + "\n")
    _until(lambda: listed(THREAD, lambda u: (u["source"], u["usedTokens"]) == ("api", 12_400)))
