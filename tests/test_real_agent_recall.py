"""Issue #29's "done": the real Claude Code (pinned, tests/agents.py), given ctxd by `ctxd hooks
install --scope project` (its hooks, and `ctxd mcp` in the project's `.mcp.json`, which the user
then approves as Claude Code asks), compacts its own session (its /compact), then the model calls
`recall` through MCP and the tool result it gets back holds a fact only the compacted part had.
No daemon runs: the MCP server follows the session itself. The model is the scripted server of
tests/model_servers.py."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from ctxd.ledger import bodies
from tests.agents import CLAUDE_MODEL, Claude
from tests.ghost_repo import make_repo
from tests.model_servers import MessagesServer, Reply, tool
from tests.test_hooks import ctxd, env_for

FACT = "The staging proxy listens on port 8443 behind the VPN."


def tool_results(server: MessagesServer, call_id: str) -> list[str]:
    """The text of every tool_result for `call_id` that Claude Code sent the model."""
    found = []
    for request in server.requests:
        body = request.body if isinstance(request.body, dict) else {}
        for message in body.get("messages", []):
            content = message.get("content") if isinstance(message, dict) else None
            for block in content if isinstance(content, list) else []:
                if (isinstance(block, dict) and block.get("type") == "tool_result"
                        and block.get("tool_use_id") == call_id):
                    inner = block.get("content")
                    parts = inner if isinstance(inner, list) else [{"text": inner}]
                    found.append("".join(p.get("text", "") for p in parts if isinstance(p, dict)))
    return found


def mirrored(state: Path, text: str) -> bool:
    """Whether the workspace's store holds an item with `text` (the MCP server follows the session)."""
    for path in (state / "ctxd" / "workspaces").glob("*.sqlite3"):
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            try:
                if any(text in bodies.decode(body) for (body,) in db.execute("SELECT body FROM items")):
                    return True
            except sqlite3.Error:
                pass
    return False


def wait_mirrored(state: Path, text: str) -> None:
    """Claude Code starts a project's MCP servers beside the session, not before its first turn: a
    person's session lasts long enough for the server to follow it, a scripted one is held here
    until it has. (A guard against a hang, not a speed check: the assertions say what failed.)"""
    deadline = time.monotonic() + 120
    while not mirrored(state, text) and time.monotonic() < deadline:
        time.sleep(0.2)


def test_claude_recalls_through_ctxd_mcp_what_its_own_compaction_replaced(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    claude_home, state = tmp_path / "claude-home", tmp_path / "state"
    done = ctxd(tmp_path, "hooks", "install", "--agent", "claude", "--scope", "project", cwd=repo.root,
                env={**env_for(tmp_path), "XDG_STATE_HOME": str(state)})
    assert done.returncode == 0, done.stderr
    assert json.loads((repo.root / ".mcp.json").read_text())["mcpServers"]["ctxd"]["args"][-1] == "mcp"
    # Install trusts nothing on the user's behalf; the user approves the project's server, as
    # Claude Code asks them to (its answer is kept in the project's settings.local.json).
    written = [path.read_text() for path in (repo.root / ".claude").iterdir()]
    assert not any("enabledMcpjsonServers" in text or "enableAllProjectMcpServers" in text for text in written)
    (repo.root / ".claude" / "settings.local.json").write_text(json.dumps({"enabledMcpjsonServers": ["ctxd"]}))
    with MessagesServer() as server:
        claude = Claude(tmp_path / "agent", claude_home, server,
                        extra_env={"MCP_TIMEOUT": "120000", "XDG_STATE_HOME": str(state)})

        def run(prompt: str, resume: str | None = None) -> Any:
            args = ["-p", prompt, "--output-format", "json", "--dangerously-skip-permissions", "--model", CLAUDE_MODEL]
            return claude._run(args + (["--resume", resume] if resume else []), repo.root)

        usage = dict(input=10, cache_read=30_000, cache_write=500, output=20)
        write = tool("w1", "Write", file_path=str(repo.root / "one.txt"), content="one\n")
        server.script(Reply(calls=[write], usage=usage),
                      Reply(text="Noted, and one.txt is written.", usage=usage,
                            before=lambda: wait_mirrored(state, "8443")))
        session = run(f"Remember this: {FACT} Then write one.txt.").json()["session_id"]
        # Claude Code's own compaction; the summary leaves the port out.
        server.script(Reply(text="Summary: one.txt was written.", usage=dict(input=10, cache_read=30_000, output=30)))
        run("/compact", session)
        # The model no longer has the port in its context: it asks ctxd.
        # (Asked as models ask it: a question.)
        server.script(Reply(calls=[tool("r1", "mcp__ctxd__recall", query="which port does the staging proxy use")],
                            usage=usage),
                      Reply(text="Port 8443.", usage=usage))
        run("Which port does the staging proxy listen on?", session)
        assert server.pending == 0
    [text] = set(tool_results(server, "r1"))  # (each later request sends it again)
    hits = json.JSONDecoder().raw_decode(text)[0]["results"]  # (Claude Code appends a reminder after it)
    # (The question itself matches too: it is this turn's user message.)
    assert [h["role"] for h in hits if h["archived"] and "8443" in h["snippet"]] == ["user"], hits
    assert "8443" not in json.dumps(server.requests[-1].body["messages"][:-1]).replace(text, ""), \
        "the fact was still in the model's context: the test would prove nothing"
