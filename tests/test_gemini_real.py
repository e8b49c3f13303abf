"""The real Gemini CLI 0.61.0 (pinned, tests/agents.py) followed by the real daemon, with ctxd's
hooks and MCP server installed by `ctxd hooks install --agent gemini` (issue #39).

Gemini CLI runs headless (`gemini -p`, then `--resume`) against tests/model_servers.py's
GeminiServer on 127.0.0.1: its own write_file and replace tools create and change a file, the
server reports usage with cached input, the second turn resumes the session, and a reply of
600,000 prompt tokens (past half its 1,048,576-token window) makes it compress on its own. What
is checked is what a user sees, as in tests/test_real_agents.py: the read-only thread
`gemini:<id>`, its fill (tokens.input, the footer's), window, compression point and cost, every
item with the compression in History and nothing lost, a checkpoint before every turn and every
file-changing tool call that restores the files exactly, `ctxd sessions`, and the user's
settings.json byte for byte after uninstall.

Waits are generous (a loaded machine); nothing asserts a duration.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.agents import GEMINI_MODEL, Gemini
from tests.model_servers import GeminiServer, Reply, tool
from tests.rpc import Client
from tests.test_hooks import ctxd, env_for
from tests.test_real_agents import (
    REPO_ROOT,
    WAIT,
    Gate,
    Setup,
    history,
    setup,
    snapshot_labelled,
    thread_of,
    unread,
    user_texts,
)

PRICE = {"input": 1.25, "cached_input": 0.125, "output": 10.0}  # the user's own prices (config.toml)
TURN1 = "Create hello.txt saying hello."
TURN2 = "Change it to say hello, world."


def checkpoints(s: Setup, thread: str) -> list[dict[str, Any]]:
    listed = s.client.request("ctxd/ghost/list", {"workspace": s.uri})["snapshots"]
    return [c for c in listed if c.get("thread") == thread]


def restore(s: Setup, commit: dict[str, Any]) -> None:
    s.client.request("ctxd/ghost/restore", {"workspace": s.uri, "id": commit["id"]})


def one(found: list[dict[str, Any]], check: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    matching = [c for c in found if check(c)]
    assert len(matching) == 1, json.dumps(found, indent=1)
    return matching[0]


def cost(reports: list[dict[str, int]]) -> float:
    return sum((r["input"] - r["cached"]) * PRICE["input"] + r["cached"] * PRICE["cached_input"]
               + r["output"] * PRICE["output"] for r in reports) / 1e6


def test_gemini_cli_followed_hooked_compressed_and_installed(daemon_factory: Callable[..., Client], tmp_path: Path,
                                                             state_dir: Path) -> None:
    s = setup(daemon_factory, tmp_path, start=False)
    ws = s.repo.root
    gemini_home = tmp_path / "gemini-home"  # GEMINI_CLI_HOME: its state is gemini_home/.gemini
    config = state_dir / "config" / "ctxd"  # the daemon's XDG_CONFIG_HOME (tests/rpc.py)
    config.mkdir(parents=True)
    (config / "config.toml").write_text(f'[prices."{GEMINI_MODEL}"]\n'
                                        + "".join(f"{k} = {v}\n" for k, v in PRICE.items()))
    s.client = daemon_factory([ws], env={"GEMINI_CLI_HOME": str(gemini_home)})
    hook_env = env_for(tmp_path)
    with GeminiServer() as server:
        gemini = Gemini(s.base, gemini_home, server, trusted=[ws],
                        extra_env={"XDG_STATE_HOME": str(state_dir), "PATH": hook_env["PATH"]})
        settings = gemini_home / ".gemini" / "settings.json"
        settings.write_text(settings.read_text().rstrip("\n"))  # as `gemini mcp add` leaves it: no final newline
        users = settings.read_bytes()

        # `ctxd hooks install --agent gemini`: --dry-run shows the diff and writes nothing
        install_env = {**hook_env, "GEMINI_CLI_HOME": str(gemini_home)}
        dry = ctxd(tmp_path, "hooks", "install", "--agent", "gemini", "--dry-run", cwd=ws, env=install_env)
        assert dry.returncode == 0, dry.stderr
        assert b'"BeforeTool"' in dry.stdout and b"hook gemini BeforeTool" in dry.stdout
        assert settings.read_bytes() == users
        done = ctxd(tmp_path, "hooks", "install", "--agent", "gemini", cwd=ws, env=install_env)
        assert done.returncode == 0, done.stderr
        assert b"trust" in done.stdout + done.stderr  # the note: hooks run only in trusted folders
        installed = json.loads(settings.read_text())
        assert installed["security"] == {"auth": {"selectedType": "gemini-api-key"}}  # the user's, kept
        assert installed["hooks"]["BeforeTool"][0]["matcher"] == "^(write_file|replace|run_shell_command)$"
        assert installed["hooks"]["BeforeTool"][0]["hooks"][0]["timeout"] == 10_000  # milliseconds
        assert installed["mcpServers"]["ctxd"]["args"][-1] == "mcp"
        status = ctxd(tmp_path, "hooks", "status", cwd=ws, env=install_env).stdout.decode()
        assert "gemini user: hooks BeforeAgent, BeforeTool; MCP server yes; this folder trusted" in status

        target = str(ws / "hello.txt")
        seen: dict[str, dict[str, str]] = {}
        # The turn's checkpoint (BeforeAgent) is taken before the model is asked; the write_file's
        # before the tool runs. The fill reaches the daemon while Gemini still runs.
        live = Gate(lambda: thread_of(s, "gemini", lambda t: t["usage"]["usedTokens"] >= 12_000) is not None)
        turn1 = [dict(input=12_000, cached=10_000, output=30), dict(input=12_100, cached=12_000, output=20),
                 dict(input=12_300, cached=12_100, output=10)]
        server.script(Reply(text="Writing.", calls=[tool("call_1", "write_file", file_path=target, content="hello\n")],
                            usage=turn1[0],
                            before=Gate(lambda: snapshot_labelled(s, TURN1, timeout=WAIT / 3) is not None)),
                      Reply(text="Tidying.", calls=[tool("call_2", "run_shell_command", command="rm notes.txt",
                                                         description="remove the notes")],
                            usage=turn1[1], before=live),
                      Reply(text="Wrote hello.txt.", usage=turn1[2]))
        session = gemini.session_id(gemini.prompt(TURN1, ws))
        thread = f"gemini:{session}"
        assert live.seen, "the daemon did not show the first report while Gemini CLI was running"
        after_turn1 = s.repo.files()
        assert after_turn1["hello.txt"] == "hello\n" and "notes.txt" not in after_turn1

        # 600,000 prompt tokens: past half the window, Gemini CLI compresses before its next request
        # (its summary requests wait until the gauge showed the full window)
        full = Gate(lambda: thread_of(s, "gemini", lambda t: t["usage"]["usedTokens"] >= 600_000) is not None)
        server.summary = dataclasses.replace(server.summary, before=full)
        turn2 = [dict(input=600_000, cached=13_000, output=25), dict(input=4_000, cached=1_000, output=5)]
        server.script(Reply(text="Editing.", calls=[tool("call_3", "replace", file_path=target, instruction="greet",
                                                         old_string="hello", new_string="hello, world")],
                            usage=turn2[0], before=lambda: seen.setdefault("before turn 2", s.repo.files())),
                      Reply(text="Changed.", usage=turn2[1]))
        assert gemini.session_id(gemini.prompt(TURN2, ws, resume=session)) == session
        assert server.pending == 0
        summaries = [r for r in server.requests if r.path.endswith(":generateContent")]
        assert summaries, "Gemini CLI did not compress"
    assert s.repo.files()["hello.txt"] == "hello, world\n"
    assert full.seen, "the gauge never showed the full window before the compression"

    # The fill: the last reply's tokens.input, of tokenLimit's window; compression at half of it
    info = thread_of(s, "gemini", lambda t: t["usage"]["usedTokens"] == 4_000)
    assert (info["thread"], info["model"], info["readOnly"], info["title"]) == (thread, GEMINI_MODEL, True, TURN1)
    assert info["usage"]["contextWindow"] == 1_048_576 and info["usage"]["source"] == "api"
    breakdown = s.client.request("ctxd/usage", {"workspace": s.uri, "thread": thread})
    assert breakdown["usage"]["usedTokens"] == 4_000 and breakdown["usage"]["autoCompactLimit"] == 524_288
    assert breakdown["cost"]["priced"] is True
    assert breakdown["cost"]["total"] == pytest.approx(cost(turn1 + turn2), abs=1e-6)
    assert breakdown["cost"]["cachedInput"] == pytest.approx(sum(r["cached"] for r in turn1 + turn2)
                                                             * PRICE["cached_input"] / 1e6, abs=1e-6)

    # The compression: in History, Gemini's, with the fill before and after; nothing lost
    kept = history(s, thread, archived=True)
    [compaction] = kept["compactions"]
    assert compaction["strategy"] == "gemini" and compaction["tokensBefore"] == 600_000
    assert compaction["tokensAfter"] == 4_000
    archived = [i for i in kept["items"] if i.get("archived")]
    assert TURN1 in user_texts(archived)
    assert ("function_call", "write_file__call_1") in [(i["type"], i.get("call_id")) for i in archived]
    active = history(s, thread)["items"]
    assert any(t.startswith("<state_snapshot>") for t in user_texts(active))
    assert TURN1 not in user_texts(active)
    assert ("function_call_output", "replace__call_3") in [(i["type"], i.get("call_id")) for i in active]
    assert unread(s, "gemini") == []

    # A checkpoint before each turn and each file-changing tool call, each restoring exactly (one
    # before the write_file is the turn's own tree, and the replace's the second turn's: listed once)
    taken = [line for line in (state_dir / "ctxd" / "hooks.log").read_text().splitlines() if ": checkpoint " in line]
    assert [re.search(r"\((turn|tool)\) .*? in \d+ ms: (.*)$", line).groups() for line in taken] == [  # type: ignore[union-attr]
        ("turn", TURN1), ("tool", "before write_file hello.txt"), ("tool", "before run_shell_command: rm notes.txt"),
        ("turn", TURN2), ("tool", "before replace hello.txt")], taken  # every hook fired, each a checkpoint
    found = checkpoints(s, thread)
    shell = one(found, lambda c: c.get("tool", {}).get("name") == "run_shell_command")
    assert shell["trigger"] == "tool" and shell["message"] == "before run_shell_command: rm notes.txt"
    turns = {c["turn"]["text"]: c for c in found if c["trigger"] == "turn"}
    assert set(turns) == {TURN1, TURN2} and len(found) == 3
    restore(s, turns[TURN2])
    assert s.repo.files() == seen["before turn 2"] == after_turn1
    restore(s, shell)  # before the shell command: hello.txt written, notes.txt still there
    assert s.repo.files()["hello.txt"] == "hello\n" and s.repo.files()["notes.txt"] == "keep me\n"
    restore(s, turns[TURN1])
    assert "hello.txt" not in s.repo.files() and s.repo.files()["app.py"] == "print('v1')\n"

    # `ctxd sessions` names it by its own name
    listed = subprocess.run([sys.executable, "-m", "ctxd", "sessions", "--workspace", str(ws), "--format", "json",
                             "--gemini-home", str(gemini_home / ".gemini")], cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=WAIT, env={**hook_env, "XDG_CONFIG_HOME": str(state_dir / "config")})
    assert listed.returncode == 0, listed.stderr
    [row] = [r for r in json.loads(listed.stdout) if r["agent"] == "gemini"]
    assert (row["thread"], row["turns"], row["usedTokens"], row["contextWindow"]) == (thread, 2, 4_000, 1_048_576)
    assert row["cost"]["total"] == pytest.approx(cost(turn1 + turn2), abs=1e-6)

    # Uninstall gives the user's settings.json back byte for byte
    done = ctxd(tmp_path, "hooks", "uninstall", "--agent", "gemini", cwd=ws, env=install_env)
    assert done.returncode == 0, done.stderr
    assert settings.read_bytes() == users
