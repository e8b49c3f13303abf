"""Issue #37: one history per session whatever runs, with the real Claude Code (tests/agents.py).

An editor's daemon is open on the project (so the owner of the state dir runs, docs/processes.md)
while the real Claude Code, given ctxd's hooks, status line and MCP server by `ctxd hooks install`,
runs two turns, its own `/compact`, a third turn and `/compact` again; the model calls ctxd's
`recall` through the MCP server Claude Code started, in the second turn and the third. With
several writers (the daemon and `ctxd mcp` each following the session) the history held items two
or three times and compactions that never happened, and recall answered a fact twice.

What is checked, against the transcript Claude Code wrote:
- every item of it is in `ctxd/history` (active and archived) exactly once, and nothing else;
- the compactions are the transcript's: as many, in order, at the times the file gives;
- recall (the MCP tool inside the turn, and the daemon's) finds the planted fact once;
- every process that ran was a client of the one owner: each Python process Claude Code and the
  daemon started logs its start and every SQLite database it opens (an audit hook, `sys.addaudithook`,
  in a `sitecustomize` on their PYTHONPATH: it observes, it changes nothing), and only the owner
  opened the workspace's ledger.

The model answers at once (the scripted server of tests/model_servers.py): a fast model showed the
duplicates every time. Waits are bounded and generous; nothing asserts a duration.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.agents import CLAUDE_MODEL, Claude, Run
from tests.ghost_repo import IDENTITY, make_repo
from tests.model_servers import MessagesServer, Reply, tool
from tests.rpc import Client

REPO = Path(__file__).resolve().parent.parent
WAIT = 60.0  # seconds: only a broken daemon comes near
FACT = "The staging proxy listens on port 8443 behind the VPN."

PROBE = '''\
"""Test instrumentation (tests/test_one_writer.py): logs this process's start and each SQLite
database it opens, and each fork, one JSON line each, to the file named below. It changes nothing."""
import json as _json
import os as _os
import sys as _sys

_LOG = {log!r}


def _line(kind, **fields):
    data = (_json.dumps({{"kind": kind, "pid": _os.getpid(), "argv": list(_sys.argv), **fields}}) + "\\n").encode()
    fd = _os.open(_LOG, _os.O_WRONLY | _os.O_APPEND | _os.O_CREAT, 0o600)
    try:
        _os.write(fd, data)
    finally:
        _os.close(fd)


def _audit(event, args):
    if event == "sqlite3.connect":
        _line("sqlite", database=str(args[0]))


_line("start")
_os.register_at_fork(after_in_child=lambda: _line("fork", parent=_os.getppid()))
_sys.addaudithook(_audit)
'''


def probe(tmp_path: Path) -> tuple[Path, Path]:
    """A folder holding the probe's `sitecustomize`, and the file it logs to."""
    folder, log = tmp_path / "probe", tmp_path / "probe.jsonl"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(PROBE.format(log=str(log)))
    return folder, log


def ctxd_bin(tmp_path: Path, python_path: str) -> Path:
    """The `ctxd` on the agent's PATH, which `ctxd hooks install` names in Claude Code's config:
    this tree's code, with the probe."""
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "ctxd"
    script.write_text(f"#!/bin/sh\nPYTHONPATH={python_path} exec {sys.executable} -m ctxd \"$@\"\n")
    script.chmod(0o755)
    return folder


def probed(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.exists() else []


# --- the transcript, read here on its own -----------------------------------------------------------


def transcript(home: Path) -> list[dict[str, Any]]:
    [path] = [p for p in home.rglob("*.jsonl") if "subagents" not in p.parts]
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def item_key(item: dict[str, Any]) -> tuple[str, ...]:
    """What names an item: its kind and call id, or its role and text."""
    kind = str(item.get("type"))
    if kind in ("function_call", "function_call_output"):
        return (kind, str(item.get("call_id")))
    if kind == "message":
        content = item.get("content")
        text = content if isinstance(content, str) else "\n".join(
            str(p.get("text", "")) for p in content or [] if isinstance(p, dict))
        return (kind, str(item.get("role")), text)
    if kind == "reasoning":
        return (kind, json.dumps(item.get("content"), sort_keys=True))
    return (kind, json.dumps(item, sort_keys=True))


def transcript_keys(records: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """The conversation's items as the transcript holds them: the main chain's message blocks
    (an assistant message is streamed as several lines sharing its id, a block sometimes twice),
    tool results, and the compaction summaries."""
    keys: list[tuple[str, ...]] = []
    seen_blocks: set[tuple[str, str]] = set()
    for rec in records:
        if rec.get("isSidechain") or rec.get("type") not in ("user", "assistant"):
            continue
        message = rec.get("message") or {}
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        if rec["type"] == "assistant":
            for block in blocks:
                once = (str(message.get("id")), json.dumps(block, sort_keys=True))
                if once in seen_blocks:
                    continue
                seen_blocks.add(once)
                if block.get("type") == "text":
                    keys.append(("message", "assistant", block["text"]))
                elif block.get("type") == "tool_use":
                    keys.append(("function_call", block["id"]))
                elif block.get("type") == "thinking":
                    keys.append(("reasoning", json.dumps([{"type": "reasoning_text", "text": block["thinking"]}],
                                                         sort_keys=True)))
            continue
        texts = [b["text"] for b in blocks if b.get("type") == "text"]
        keys += [("function_call_output", b["tool_use_id"]) for b in blocks if b.get("type") == "tool_result"]
        if texts:
            keys.append(("message", "user", "\n".join(texts)))
    return keys


def compacted_at(records: list[dict[str, Any]]) -> list[datetime]:
    return [datetime.fromisoformat(r["timestamp"].replace("Z", "+00:00")) for r in records
            if r.get("subtype") == "compact_boundary"]


def tool_result(server: MessagesServer, call_id: str) -> str:
    """The text of the tool_result for `call_id` that Claude Code sent the model (each later
    request sends it again: one text)."""
    found = set()
    for request in server.requests:
        body = request.body if isinstance(request.body, dict) else {}
        for message in body.get("messages", []):
            content = message.get("content") if isinstance(message, dict) else None
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result" and block.get("tool_use_id") == call_id:
                    inner = block.get("content")
                    parts = inner if isinstance(inner, list) else [{"text": inner}]
                    found.add("".join(str(p.get("text", "")) for p in parts if isinstance(p, dict)))
    assert len(found) == 1, found
    return found.pop()


def status_line(claude: Claude, ws: Path, shown: list[str]) -> None:
    """What Claude Code runs after each message in its terminal UI: the configured status-line
    command, given the session's state as JSON on stdin. (`claude -p` runs no status line, so the
    test runs the installed command as the UI would, with the session's real transcript.)"""
    found = sorted(p for p in claude.home.rglob("*.jsonl") if "subagents" not in p.parts)
    if not found:
        return  # the session's first request: no transcript yet
    records = []
    for line in found[0].read_text().splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            pass  # a line being written
    replies = [r for r in records if r.get("type") == "assistant" and not r.get("isSidechain")]
    current = replies[-1]["message"]["usage"] if replies else None
    data = {"session_id": records[-1]["sessionId"], "transcript_path": str(found[0]), "cwd": str(ws),
            "model": {"id": CLAUDE_MODEL, "display_name": "Sonnet 4.5"}, "version": "2.1.332",
            "workspace": {"current_dir": str(ws), "project_dir": str(ws)}, "cost": {"total_cost_usd": 0.01},
            "context_window": {"context_window_size": 200_000, "current_usage": current}}
    command = json.loads((claude.home / "settings.json").read_text())["statusLine"]["command"]
    done = subprocess.run(command, shell=True, input=json.dumps(data), env=claude.env(), cwd=ws,
                          capture_output=True, text=True, timeout=30)
    shown.append(f"{done.returncode} {done.stdout}{done.stderr}")  # checked after the run


def fact_hits(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recall results that are the planted fact itself (the user's message that said it)."""
    return [h for h in results if h["type"] == "message" and h.get("role") == "user" and "8443" in h["snippet"]]


# --- the test ----------------------------------------------------------------------------------------


def test_one_history_per_session_with_the_daemon_owner_mcp_hooks_and_status_line(
        daemon_factory: Callable[..., Client], tmp_path: Path, state_dir: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    repo.write("app.py", "print('v1')\n")
    repo.commit_all("base")
    ws = repo.root
    claude_home = tmp_path / "claude-home"
    probe_dir, probe_log = probe(tmp_path)
    python_path = f"{probe_dir}{os.pathsep}{REPO}"
    bin_dir = ctxd_bin(tmp_path, python_path)
    path = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"

    # The editor's daemon, hence the owner (it follows Claude Code's sessions in claude_home).
    client = daemon_factory([ws], env={"CLAUDE_CONFIG_DIR": str(claude_home), "CODEX_HOME": str(tmp_path / "codex-home"),
                                       "PYTHONPATH": python_path})
    uri = ws.as_uri()
    owner = client.daemon_pid

    # ctxd's hooks, status line and MCP server in Claude Code's user configuration (CLAUDE_CONFIG_DIR).
    home = tmp_path / "agent" / "home"
    home.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXD_", "CLAUDE_", "CODEX_"))}
    env.update({"HOME": str(home), "CLAUDE_CONFIG_DIR": str(claude_home), "XDG_STATE_HOME": str(state_dir),
                "XDG_CONFIG_HOME": str(home / ".config"), "PATH": path, **IDENTITY})
    done = subprocess.run([str(bin_dir / "ctxd"), "hooks", "install", "--agent", "claude", "--scope", "user"],
                          cwd=ws, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    settings = json.loads((claude_home / "settings.json").read_text())
    assert "ctxd" in settings["statusLine"]["command"] and set(settings["hooks"]) >= {"UserPromptSubmit", "PreToolUse"}
    assert json.loads((claude_home / ".claude.json").read_text())["mcpServers"]["ctxd"]["args"][-1] == "mcp"

    with MessagesServer() as server:
        claude = Claude(tmp_path / "agent", claude_home, server, extra_env={
            "XDG_STATE_HOME": str(state_dir), "PATH": path, "PYTHONPATH": str(probe_dir), "MCP_TIMEOUT": "120000",
            "MCP_CONNECTION_NONBLOCKING": "false"})

        def run(prompt: str, resume: str | None = None) -> Run:
            args = ["-p", prompt, "--output-format", "json", "--dangerously-skip-permissions", "--model", CLAUDE_MODEL]
            return claude._run(args + (["--resume", resume] if resume else []), ws)

        lines: list[str] = []
        running: list[threading.Thread] = []

        def reply(**fields: Any) -> Reply:
            """A scripted answer; the status line runs before it, as after each message."""
            def show() -> None:  # beside the agent, which goes on meanwhile (the answer is not held)
                runner = threading.Thread(target=status_line, args=(claude, ws, lines))
                runner.start()
                running.append(runner)
            return Reply(before=show, **fields)

        usage = dict(input=10, cache_read=30_000, cache_write=500, output=20)
        summary_usage = dict(input=10, cache_read=30_000, output=30)
        server.script(
            reply(calls=[tool("t1", "Write", file_path=str(ws / "one.txt"), content="one\n")], usage=usage),
            reply(calls=[tool("t2", "Edit", file_path=str(ws / "one.txt"), old_string="one", new_string="two")],
                  usage=usage),
            reply(calls=[tool("t3", "Bash", command="echo three >> one.txt", description="append")], usage=usage),
            reply(calls=[tool("t4", "Read", file_path=str(ws / "app.py"))], usage=usage),
            reply(calls=[tool("t5", "Edit", file_path=str(ws / "app.py"), old_string="v1", new_string="v2")],
                  usage=usage),
            reply(text="one.txt is written and changed, app.py bumped.", usage=usage))
        session = run(f"Remember this: {FACT} Then write one.txt, change it twice and bump app.py.").json()["session_id"]
        thread = f"claude:{session}"

        server.script(
            reply(calls=[tool("t6", "Write", file_path=str(ws / "two.txt"), content="two\n")], usage=usage),
            reply(calls=[tool("r1", "mcp__ctxd__recall", query="staging proxy port")], usage=usage),
            reply(calls=[tool("t7", "Bash", command="cp two.txt three.txt", description="copy")], usage=usage),
            reply(text="two.txt and three.txt are written; ctxd keeps the proxy's port.", usage=usage))
        run("Write two.txt and three.txt, and ask ctxd what it keeps about the proxy.", session)

        server.script(reply(text="Summary: one.txt, two.txt and three.txt were written.", usage=summary_usage))
        run("/compact", session)

        server.script(
            reply(calls=[tool("t8", "Bash", command="rm two.txt", description="remove")], usage=usage),
            reply(calls=[tool("r2", "mcp__ctxd__recall", query="which port does the staging proxy use")],
                  usage=usage),
            reply(calls=[tool("t9", "Bash", command="sed -i s/two/3/ three.txt", description="change")], usage=usage),
            reply(text="Port 8443; two.txt is gone.", usage=usage))
        run("Remove two.txt, change three.txt, and which port does the staging proxy listen on?", session)

        server.script(reply(text="Summary: port 8443; two.txt was removed.", usage=summary_usage))
        run("/compact", session)
        assert server.pending == 0
    for runner in running:
        runner.join(30)
    files = repo.files()
    assert (files["app.py"], files["one.txt"], files["three.txt"], "two.txt" in files) == (
        "print('v2')\n", "two\nthree\n", "3\n", False), files
    assert len(lines) >= 10 and all(line.startswith("0 ") and "claude" in line for line in lines), lines

    records = transcript(claude_home)
    expected = transcript_keys(records)
    compactions = compacted_at(records)
    assert len(compactions) == 2 and len(expected) > 30, (len(compactions), expected)

    # The daemon has read the whole transcript (waited for, bounded): then it holds each item once.
    deadline = time.monotonic() + WAIT
    while True:
        kept = client.request("ctxd/history", {"workspace": uri, "thread": thread, "includeArchived": True})
        keys = [item_key(i) for i in kept["items"] if i.get("type") != "ghost_snapshot"]
        if Counter(keys) == Counter(expected) and len(kept["compactions"]) == len(compactions) or \
                time.monotonic() > deadline:
            break
        time.sleep(0.2)
    wanted = Counter(expected)
    more = {key: (n, wanted[key]) for key, n in Counter(keys).items() if n > wanted[key]}
    assert not more, f"items recorded more often than the transcript has them (kept, in the transcript): {more}"
    assert Counter(keys) == wanted, (f"{len(keys)} items kept, {len(expected)} in the transcript; "
                                                f"missing {Counter(expected) - Counter(keys)}, "
                                                f"extra {Counter(keys) - Counter(expected)}")
    assert [datetime.fromisoformat(c["createdAt"]) for c in kept["compactions"]] == compactions
    assert [c["strategy"] for c in kept["compactions"]] == ["claude", "claude"]
    # Each call id of the transcript once as a call and once as its output.
    calls = Counter(i["call_id"] for i in kept["items"] if i["type"] == "function_call")
    assert calls == Counter(["t1", "t2", "t3", "t4", "t5", "t6", "r1", "t7", "t8", "r2", "t9"]), calls

    # Recall: the MCP tool inside the third turn (after the first compaction), and the daemon's now.
    inside = json.JSONDecoder().raw_decode(tool_result(server, "r2"))[0]["results"]  # (Claude Code appends a note)
    assert len(fact_hits(inside)) == 1, inside
    assert fact_hits(inside)[0]["archived"] is True, inside
    found = client.request("ctxd/recall", {"workspace": uri, "thread": thread, "query": "staging proxy port 8443",
                                           "limit": 100})["results"]
    assert len(fact_hits(found)) == 1, found
    shown = Counter((h["type"], h.get("role"), h["snippet"]) for h in found)
    assert all(n == 1 for n in shown.values()), shown

    # Every process that ran was a client of the one owner: it alone opened the ledger, and the
    # hooks handed it their checkpoints.
    processes = probed(probe_log)
    role = {p["pid"]: " ".join(p["argv"][1:3]) for p in processes if p["kind"] in ("start", "fork")}
    ledgers = [p for p in processes if p["kind"] == "sqlite" and "/workspaces/" in p["database"]]
    others = [(p["pid"], role.get(p["pid"]), p["database"]) for p in ledgers if p["pid"] != owner]
    assert ledgers and not others, f"processes besides the owner (pid {owner}) opened the ledger: {others}"
    started = Counter(str(p["argv"][1]) for p in processes if p["kind"] == "start" and len(p["argv"]) > 1)
    assert started["mcp"] >= 2 and started["hook"] >= 10 and started["statusline"] >= 10, started
    assert started["owner"] == 1 and role.get(owner, "").startswith("owner"), (owner, role.get(owner), started)
    taken = [line for line in (state_dir / "ctxd" / "hooks.log").read_text().splitlines() if ": checkpoint " in line]
    assert len(taken) >= 5 and all("by the owner" in line for line in taken), taken
