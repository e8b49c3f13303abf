"""`ctxd acp` in front of real ACP agents from the npm registry, pinned and cached (tests/agents.py):
qwen-code 0.24.4 (`qwen --acp`, against a Chat Completions server) and Claude Code through
@agentclientprotocol/claude-agent-acp 0.101.0 (Claude Code 2.1.318 inside, against a Messages
server), both on 127.0.0.1. The official ACP client library drives each twice, directly and
through the proxy, with an editor's daemon of the workspace running; what the editor received is
compared (the agents' own ids and timings normalised), then what ctxd made of the session."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.agents import ACP_SDK, CLAUDE_ACP, Claude, Qwen, install, install_library
from tests.model_servers import ChatCompletionsServer, MessagesServer, Reply, tool
from tests.rpc import Client
from tests.test_acp import PROXY, checkpoints, history, run_client, thread_of, wait_until, without_ctxd_meta

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
SERVER_IDS = re.compile(r"\b(msg|chatcmpl)[_-]\d+")  # the model server's answers, counted across both runs
TIMING_DEPENDENT = {"available_commands_update", "session_info_update"}
"""Updates an agent sends when its own background work ends, wherever the turn then is (or not
at all when the session ended first: claude-agent-acp's title, once Claude Code named it)."""
TIMINGS = {"durationMs", "duration_ms", "timestamp", "elapsedMs"}
"""Keys whose values are the agent's own clock readings."""


def _without_timings(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if k not in TIMINGS}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


@pytest.fixture(scope="module")
def sdk() -> Path:
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the editor side is the ACP client library, run by node")
    return install_library(ACP_SDK)


def normalised(messages: list[dict[str, Any]], session_id: str) -> list[Any]:
    """The editor's side with the session's id and the agent's random ids made alike, and the
    updates whose place depends on the agent's own timing left out."""
    kept = [m for m in without_ctxd_meta(messages)
            if ((m.get("params") or {}).get("update") or {}).get("sessionUpdate") not in TIMING_DEPENDENT]
    text = json.dumps(_without_timings(kept)).replace(session_id, "SESSION")
    return list(json.loads(SERVER_IDS.sub(r"\1_N", UUID.sub("UUID", text))))


def ctxd_env(state_dir: Path, workspace: Path) -> dict[str, str]:
    """What the proxy needs besides the agent's own environment: the test's state dir (its owner
    is the editor's daemon of the test), and the folder as a shell would name it."""
    return {"XDG_STATE_HOME": str(state_dir), "CTXD_OWNER_IDLE_SECONDS": "0", "PWD": str(workspace)}


def compare(direct: dict[str, Any], proxied: dict[str, Any], seen: str = "") -> None:
    assert not direct["errors"] and not proxied["errors"], (direct["errors"], proxied["errors"])
    ours = proxied["results"]["sessionNew"]["sessionId"]
    assert normalised(proxied["toEditor"], ours) == normalised(direct["toEditor"],
                                                               direct["results"]["sessionNew"]["sessionId"]), seen
    assert proxied["exit"] == direct["exit"]


def check_thread(client: Client, ws: Path, proxied: dict[str, Any], prompt: str, said: str) -> str:
    """The session as the daemon shows it: read-only, its turn, its tool call, the agent's gauge."""
    thread = "acp:" + proxied["results"]["sessionNew"]["sessionId"]
    reported = [u["update"] for u in proxied["updates"] if u["update"]["sessionUpdate"] == "usage_update"]
    last = reported[-1]
    info = wait_until(lambda: (lambda t: t if t and t["usage"]["usedTokens"] == last["used"] else None)(
        thread_of(client, ws, thread)))
    assert info is not None, thread_of(client, ws, thread)
    assert info["source"] == "acp" and info["readOnly"] is True
    assert info["usage"]["contextWindow"] == last["size"]
    items = history(client, ws, thread)
    texts = [part["text"] for item in items if item["type"] == "message" for part in item["content"]]
    assert texts[0] == prompt and said in texts
    calls = [item for item in items if item["type"] == "function_call"]
    assert calls and calls[0]["kind"] == "edit", calls
    assert any(item["type"] == "function_call_output" and item["call_id"] == calls[0]["call_id"] for item in items)
    return thread


def check_checkpoints(client: Client, ws: Path, thread: str, target: Path) -> None:
    """A turn checkpoint, then a tool checkpoint of the tree the model changed meanwhile
    (`other.txt`), which restores the folder as it was before the write."""
    taken = [c for c in checkpoints(client, ws) if c["thread"] == thread]
    assert [c["trigger"] for c in taken] == ["tool", "turn"], taken
    assert target.exists()
    client.request("ctxd/ghost/restore", {"workspace": ws.as_uri(), "id": taken[0]["id"]})
    assert not target.exists() and (ws / "other.txt").read_text() == "made while the model thought\n"


def runs(sdk: Path, tmp_path: Path, ws: Path, scenario: dict[str, Any], command: list[str], env: dict[str, str],
         script: Callable[[], None], reset: Callable[[], None]) -> tuple[dict[str, Any], dict[str, Any]]:
    script()
    direct = run_client(sdk, tmp_path, scenario, command, env)
    reset()
    script()
    proxied = run_client(sdk, tmp_path, scenario, PROXY + command, env)
    return direct, proxied


def test_qwen_code_behind_ctxd_acp(sdk: Path, tmp_path: Path, workspace: Path, state_dir: Path,
                                   client: Client) -> None:
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    target = workspace / "new.txt"
    with ChatCompletionsServer() as server:
        qwen = Qwen(tmp_path, tmp_path / "home" / ".qwen", server)

        def touch() -> None:  # the model's first answer: the tree changes after the turn's checkpoint
            (workspace / "other.txt").write_text("made while the model thought\n")

        def script() -> None:
            server.script(Reply(text="Writing.", calls=[tool("call_1", "write_file", file_path=str(target),
                                                             content="after\n")],
                                usage={"input": 12000, "cached": 11000, "output": 10}, before=touch),
                          Reply(text="Wrote new.txt.", usage={"input": 12100, "cached": 12000, "output": 10}))

        def reset() -> None:
            target.unlink(missing_ok=True)
            (workspace / "other.txt").unlink(missing_ok=True)

        env = qwen.env() | ctxd_env(state_dir, workspace)
        scenario = {"cwd": str(workspace), "prompts": ["write new"], "allow": True, "timeoutMs": 150000}
        direct, proxied = runs(sdk, tmp_path, workspace, scenario, [str(qwen.exe), "--acp"], env, script, reset)
    compare(direct, proxied)
    assert [w["path"] for w in proxied["writes"]] == [str(target)]  # qwen writes through the editor
    thread = check_thread(client, workspace, proxied, "write new", "Wrote new.txt.")
    check_checkpoints(client, workspace, thread, target)


def test_claude_code_through_claude_agent_acp_behind_ctxd_acp(sdk: Path, tmp_path: Path, workspace: Path,
                                                              state_dir: Path, client: Client) -> None:
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    exe = install(CLAUDE_ACP)
    target = workspace / "new.txt"
    with MessagesServer() as server:
        claude = Claude(tmp_path, tmp_path / "home" / ".claude", server)

        def touch() -> None:
            (workspace / "other.txt").write_text("made while the model thought\n")

        def script() -> None:
            server.script(Reply(text="Writing.", calls=[tool("toolu_1", "Write", file_path=str(target),
                                                             content="after\n")],
                                usage={"input": 12000, "cache_read": 11000, "output": 10}, before=touch),
                          Reply(text="Wrote new.txt.", usage={"input": 100, "cache_read": 12000, "output": 10}))

        def reset() -> None:
            target.unlink(missing_ok=True)
            (workspace / "other.txt").unlink(missing_ok=True)

        env = claude.env() | ctxd_env(state_dir, workspace)
        # "default": Claude Code asks before each change (its ACP mode "Manual"), so the editor allows it
        scenario = {"cwd": str(workspace), "prompts": ["write new"], "allow": True, "mode": "default",
                    "timeoutMs": 150000}
        direct, proxied = runs(sdk, tmp_path, workspace, scenario, [str(exe)], env, script, reset)
        # Claude Code names its MCP servers' tools to the model (deferred, behind ToolSearch)
        bodies = [json.dumps(r.body) for r in server.requests]
    compare(direct, proxied, server.seen())
    assert [p["toolCall"]["kind"] for p in proxied["permissions"]] == ["edit"]
    assert any("mcp__ctxd__recall" in body for body in bodies), "ctxd's MCP server never reached Claude Code"
    thread = check_thread(client, workspace, proxied, "write new", "Wrote new.txt.")
    check_checkpoints(client, workspace, thread, target)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
