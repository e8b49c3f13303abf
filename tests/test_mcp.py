"""`ctxd mcp` through the official MCP client (mcp.client.stdio + ClientSession), against
`python -m ctxd mcp` as a subprocess started in a folder inside the workspace, as an agent starts
it (protocol v3, "The agents' own way in"). The agent's session is a Claude Code transcript
written as Claude Code writes it (tests/session_fixtures.py)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests import session_fixtures as fx
from tests.ghost_repo import make_repo
from tests.rpc import REPO, Client, daemon_env

THREAD = f"claude:{fx.CLAUDE_ID}"
TOOLS = {"context_usage", "recall", "history_item", "checkpoints", "checkpoint", "restore_checkpoint"}


def server_params(state_dir: Path, cwd: Path, claude_home: Path, session: str | None = None) -> StdioServerParameters:
    env = daemon_env(state_dir, {"CLAUDE_CONFIG_DIR": str(claude_home), "PYTHONPATH": str(REPO)})
    if session is not None:
        env["CTXD_SESSION"] = session
    return StdioServerParameters(command=sys.executable, args=["-m", "ctxd", "mcp"], env=env, cwd=str(cwd))


async def call(session: ClientSession, tool: str, **arguments: Any) -> tuple[dict[str, Any] | str, bool]:
    """A tool's structured result (checked equal to its JSON text), or its error text."""
    result = await session.call_tool(tool, arguments)
    text = result.content[0].text  # type: ignore[union-attr]
    if result.is_error:
        return text, True
    assert json.loads(text) == result.structured_content
    return result.structured_content, False


async def until(session: ClientSession, tool: str, check: Any, **arguments: Any) -> dict[str, Any]:
    deadline = time.monotonic() + 15
    while True:
        value, error = await call(session, tool, **arguments)
        if not error and check(value):
            return value  # type: ignore[return-value]
        assert time.monotonic() < deadline, value
        await anyio.sleep(0.1)


def test_the_agent_recalls_what_its_compaction_replaced_and_restores_checkpoints(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "ws")
    state_dir, claude_home = tmp_path / "state", tmp_path / "claude-home"
    lines = fx.claude_session(repo.root)
    result = next(line for line in lines if line.get("uuid") == "u2")  # the Read tool's result
    result["message"]["content"][0]["content"] = "import argparse\n# listens on port 8443 (STAGING_PROXY_PORT)\n"
    transcript = fx.write_jsonl(fx.claude_path(claude_home, repo.root), lines)
    (repo.root / "src" / "deep").mkdir()

    async def scenario() -> None:
        async with stdio_client(server_params(state_dir, repo.root / "src" / "deep", claude_home)) as streams:
            async with ClientSession(*streams) as session:
                await session.initialize()
                assert {tool.name for tool in (await session.list_tools()).tools} == TOOLS
                usage, _ = await call(session, "context_usage")
                assert (usage["thread"], usage["agent"], usage["contextWindow"]) == (THREAD, "claude", 200_000)
                assert usage["usedTokens"] >= 15_506 and usage["compactAt"] <= 200_000 and usage["categories"]
                # The prompt cache of a session last active in 2025: long cold (issue #31).
                assert usage["cache"]["state"] == "cold" and usage["cache"]["lastRequestAt"].startswith("2025-10-03")
                assert usage["cache"]["rewriteTokens"] == usage["usedTokens"]
                found = await until(session, "recall", lambda v: v["results"], query="staging proxy port")
                assert found["results"][0]["archived"] is False

                # Claude Code compacts its session: the detail is now only in what was replaced.
                fx.append_jsonl(transcript, fx.claude_compact("c1", "a2", repo.root, "2025-10-03T11:05:00.000Z",
                                                              "We added the flag."))
                found = await until(session, "recall", lambda v: v["results"] and v["results"][0]["archived"],
                                    query="staging proxy port")
                hit = found["results"][0]
                assert hit["thread"] == THREAD and hit["type"] == "function_call_output" and "8443" in hit["snippet"]
                whole, _ = await call(session, "history_item", seq=hit["seq"])
                assert whole["archived"] is True and "STAGING_PROXY_PORT" in json.dumps(whole["item"])

                # Checkpoints: take one, change a file, preview a restore (nothing changes), restore.
                taken, _ = await call(session, "checkpoint", label="before the edit")
                listed, _ = await call(session, "checkpoints")
                assert taken["id"] in [c["id"] for c in listed["checkpoints"]]
                (repo.root / "src" / "app.py").write_text("print('broken')\n")
                preview, _ = await call(session, "restore_checkpoint", id=taken["id"])
                assert preview == {"preview": {"restored": ["src/app.py"], "removed": []}}
                assert (repo.root / "src" / "app.py").read_text() == "print('broken')\n"
                restored, _ = await call(session, "restore_checkpoint", id=taken["id"], confirm=True)
                assert restored["restored"] == ["src/app.py"] and restored["undoId"]
                assert (repo.root / "src" / "app.py").read_text() == "print('app')\n"

                # Bad input: a tool error naming the problem.
                for tool, arguments, named in [("recall", {"query": "x", "limit": 0}, "limit"),
                                               ("recall", {"query": "   "}, "query"),
                                               ("history_item", {"seq": 999}, "seq"),
                                               ("restore_checkpoint", {"id": "f" * 40}, "f" * 40)]:
                    text, error = await call(session, tool, **arguments)
                    assert error and named in text, (tool, text)

    anyio.run(scenario)
    # Nothing was written into the session's folder or the agent's files.
    assert fx.claude_path(claude_home, repo.root).read_text().count("\n") == len(lines) + 2


def test_ctxd_session_names_the_session_and_a_daemon_mirrors_it_once(tmp_path: Path) -> None:
    """With a daemon following the same session, the server leaves its mirroring to it: the
    history holds each item once."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    state_dir, claude_home = tmp_path / "state", tmp_path / "claude-home"
    other = "0c0ffee0-1111-4222-8333-444455556666"
    fx.write_jsonl(fx.claude_path(claude_home, workspace, other), fx.claude_session(workspace, other))
    transcript = fx.write_jsonl(fx.claude_path(claude_home, workspace), fx.claude_session(workspace))
    from tests.rpc import start_daemon

    daemon: Client = start_daemon(state_dir, env={"CLAUDE_CONFIG_DIR": str(claude_home)})
    try:
        daemon.initialize([workspace])

        async def scenario() -> None:
            async with stdio_client(server_params(state_dir, workspace, claude_home, session=THREAD)) as streams:
                async with ClientSession(*streams) as session:
                    await session.initialize()
                    usage, _ = await call(session, "context_usage")
                    assert usage["thread"] == THREAD
                    fx.append_jsonl(transcript, [fx.claude_user("Now add --quiet too", "u3", "a2", workspace,
                                                                "2025-10-03T11:06:00.000Z")])
                    await until(session, "recall", lambda v: v["results"], query="quiet")
                    await anyio.sleep(2 * 1.2)  # past the server's grace for the daemon
                    text, error = await call(session, "recall", query="x", scope="everywhere")
                    assert error and "scope" in text

        anyio.run(scenario)
        history = daemon.request("ctxd/history", {"workspace": workspace.as_uri(), "thread": THREAD,
                                                  "includeArchived": True})
        texts = [json.dumps(item) for item in history["items"]]
        assert len(texts) == len(set(texts)) == 7, texts
    finally:
        daemon.shutdown()


def test_no_session_is_a_tool_error_that_says_what_to_do(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()

    async def scenario() -> None:
        async with stdio_client(server_params(tmp_path / "state", workspace, tmp_path / "none")) as streams:
            async with ClientSession(*streams) as session:
                await session.initialize()
                text, error = await call(session, "recall", query="anything")
                assert error and "CTXD_SESSION" in text and str(workspace) in text
                text, error = await call(session, "context_usage")
                assert error and "CTXD_SESSION" in text

    anyio.run(scenario)


@pytest.mark.parametrize("session", ["default", "claude:"])
def test_a_ctxd_session_that_is_no_agent_session_is_refused(tmp_path: Path, session: str) -> None:
    async def scenario() -> None:
        async with stdio_client(server_params(tmp_path / "state", tmp_path, tmp_path / "none", session)) as streams:
            async with ClientSession(*streams) as client:
                await client.initialize()
                text, error = await call(client, "recall", query="anything")
                assert error and "CTXD_SESSION" in text and repr(session) in text

    anyio.run(scenario)


def test_ctxd_mcp_answers_before_it_imports_anything_heavy(tmp_path: Path) -> None:
    """Agents start an MCP server with a timeout and often begin a turn with it still pending: `ctxd
    mcp` speaks the protocol with the standard library (no SDK, whose import alone took 0.75 s), and
    leaves the store, the follower and pydantic to the owner it asks; its worker threads wait for
    the first tool call. `-X importtime` lists every module the process imported; its speed is
    bench/bench_recall.py's."""
    import subprocess

    repo = make_repo(tmp_path / "repo")
    env = daemon_env(tmp_path / "state", {"CLAUDE_CONFIG_DIR": str(tmp_path / "claude"), "PYTHONPATH": str(REPO),
                                          "CTXD_OWNER": "0"})
    request = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                          "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                     "clientInfo": {"name": "test", "version": "1"}}}) + "\n"
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "ctxd", "mcp"], cwd=repo.root, env=env,
                          input=request, capture_output=True, text=True, timeout=120)
    assert json.loads(done.stdout.splitlines()[0])["result"]["serverInfo"]["name"] == "ctxd"
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "ctxd.agentmcp.protocol" in imported, done.stderr[-2000:]
    heavy = {"mcp", "pydantic", "ctxd.ledger.store", "ctxd.sessions.follower", "ctxd.workspace", "sqlite3",
             "concurrent.futures"}
    assert not heavy & imported, heavy & imported
