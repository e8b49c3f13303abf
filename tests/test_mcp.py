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
TOOLS = {"context_usage", "recall", "history_item", "checkpoints", "checkpoint", "restore_checkpoint", "statusline"}


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


def test_ctxd_mcp_answers_from_the_store_of_a_daemon_with_a_state_dir_of_its_own(tmp_path: Path) -> None:
    """Issue #37: a daemon whose `stateDir` is elsewhere names it for each folder it opens
    (ctxd/places.py); `ctxd mcp` finds its workspace with that pointer, as the hooks do, so its
    checkpoints are that daemon's (a plain folder's store is in the state dir), not another's."""
    from ctxd.places import pointer_path
    from tests.rpc import start_daemon

    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "notes.txt").write_text("first\n")
    state_dir, claude_home, elsewhere = tmp_path / "state", tmp_path / "claude-home", tmp_path / "elsewhere"
    fx.write_jsonl(fx.claude_path(claude_home, folder), fx.claude_session(folder))
    daemon: Client = start_daemon(state_dir, env={"CLAUDE_CONFIG_DIR": str(claude_home)})
    try:
        daemon.initialize([folder], {"stateDir": str(elsewhere)})
        taken = daemon.request("ctxd/ghost/snapshot", {"workspace": folder.as_uri(), "message": "the daemon's",
                                                       "record": False})
        pointer = pointer_path(state_dir / "ctxd", folder.resolve())
        deadline = time.monotonic() + 30  # only a hang waits this long
        while not pointer.exists():
            assert time.monotonic() < deadline, "the daemon named no state dir for the folder"
            time.sleep(0.1)

        async def scenario() -> None:
            async with stdio_client(server_params(state_dir, folder, claude_home, session=THREAD)) as streams:
                async with ClientSession(*streams) as session:
                    await session.initialize()
                    listed, error = await call(session, "checkpoints")
                    assert not error, listed
                    assert [c["id"] for c in listed["checkpoints"]] == [taken["id"]]  # type: ignore[index]

        anyio.run(scenario)
    finally:
        daemon.shutdown()


def test_a_server_left_idle_past_the_owners_handshake_bound_still_answers(tmp_path: Path) -> None:
    """The agent calls a tool minutes after it started the server (a long turn, a user thinking):
    the owner's session is idle all that time. Each side's socket kept the bound of the handshake's
    last read (`ownerlink.ACK_SECONDS`), so the session ended after 30 s idle and every later tool
    call failed ("the ctxd owner did not answer: Broken pipe")."""
    from ctxd import ownerlink

    workspace = tmp_path / "ws"
    workspace.mkdir()
    state_dir, claude_home = tmp_path / "state", tmp_path / "claude-home"
    fx.write_jsonl(fx.claude_path(claude_home, workspace), fx.claude_session(workspace))

    async def scenario() -> None:
        async with stdio_client(server_params(state_dir, workspace, claude_home, session=THREAD)) as streams:
            async with ClientSession(*streams) as session:
                await session.initialize()
                usage, error = await call(session, "context_usage")
                assert not error and usage["thread"] == THREAD, usage  # type: ignore[index]
                await anyio.sleep(ownerlink.ACK_SECONDS + 3)
                usage, error = await call(session, "context_usage")
                assert not error and usage["thread"] == THREAD, usage  # type: ignore[index]
                found = await until(session, "recall", lambda v: v["results"], query="verbose")
                assert found["results"]

    anyio.run(scenario)


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
    """Agents start an MCP server with a timeout and wait for its `initialize` and `tools/list`
    before their first turn: `ctxd mcp` speaks the protocol with the standard library (no SDK,
    whose import alone took 0.75 s), and leaves the store, the follower and pydantic to the owner
    it asks. Until its tools are listed it imports neither `typing`, `pathlib`, `json` (and its
    `re`) nor the agents' modules: the owner is reached on a thread started after the list
    (`Backend.start`). Started as install names it (`ctxd/launch.py`, `-S`: not this checkout's
    development install, which an installed ctxd has not). `-X importtime` lists every module the
    process imported; its speed is bench/bench_recall.py's."""
    import subprocess

    repo = make_repo(tmp_path / "repo")
    env = daemon_env(tmp_path / "state", {"CLAUDE_CONFIG_DIR": str(tmp_path / "claude"), "CTXD_OWNER": "0"})
    request = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                          "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                     "clientInfo": {"name": "test", "version": "1"}}}) + "\n"
    request += json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n"
    done = subprocess.run([sys.executable, "-S", "-X", "importtime", str(REPO / "ctxd" / "launch.py"), "mcp"],
                          cwd=repo.root, env=env, input=request, capture_output=True, text=True, timeout=120)
    assert json.loads(done.stdout.splitlines()[0])["result"]["serverInfo"]["name"] == "ctxd"
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "ctxd.mcp.protocol" in imported, done.stderr[-2000:]
    heavy = {"mcp", "pydantic", "ctxd.ledger.store", "ctxd.sessions.follower", "ctxd.workspace", "sqlite3",
             "concurrent.futures", "typing", "pathlib", "json", "re", "ctxd.agents"}
    assert not heavy & imported, heavy & imported


def test_history_item_on_a_placeholder_gives_the_output_and_recall_leads_to_it(tmp_path: Path) -> None:
    """A thread of the workspace compacted offline by the daemon (its old tool outputs masked): the
    agent's `recall` over the workspace finds the archived output, not the placeholder, and
    `history_item` on the placeholder's seq reads the output whole."""
    from tests.rpc import start_daemon
    from tests.test_recall import planted_outputs

    workspace = tmp_path / "ws"
    workspace.mkdir()
    state_dir, claude_home = tmp_path / "state", tmp_path / "claude-home"
    fx.write_jsonl(fx.claude_path(claude_home, workspace), fx.claude_session(workspace))
    items, tickets = planted_outputs(20)
    daemon: Client = start_daemon(state_dir, env={"CLAUDE_CONFIG_DIR": str(claude_home)})
    try:
        daemon.initialize([workspace])
        uri = workspace.as_uri()
        daemon.request("ctxd/record", {"workspace": uri, "items": items})
        daemon.request("ctxd/compact", {"workspace": uri, "strategy": "offline"})
        stored = daemon.request("ctxd/history", {"workspace": uri, "includeArchived": True})["items"]
    finally:
        daemon.shutdown()
    placeholders = {item["call_id"]: seq for seq, item in enumerate(stored, 1)
                    if not item.get("archived") and "removed by compaction" in json.dumps(item)}
    assert len(placeholders) >= 15, stored

    async def scenario() -> None:
        async with stdio_client(server_params(state_dir, workspace, claude_home)) as streams:
            async with ClientSession(*streams) as session:
                await session.initialize()
                for call_id, seq in placeholders.items():
                    n = int(call_id[1:])
                    whole, error = await call(session, "history_item", seq=seq, thread="default")
                    assert not error and whole == {"item": items[4 * n + 2], "archived": True, "seq": 4 * n + 3,
                                                   "placeholderSeq": seq}, whole
                    found, error = await call(session, "recall", query=f"{tickets[n]} replica", scope="workspace")
                    assert not error and found["results"], found
                    top = found["results"][0]
                    assert (top["thread"], top["seq"], top["archived"]) == ("default", 4 * n + 3, True), found
                    assert tickets[n] in top["snippet"] and "removed by compaction" not in top["snippet"]

    anyio.run(scenario)


def test_every_tool_argument_out_of_range_or_of_the_wrong_type_is_a_tool_error_naming_it(tmp_path: Path) -> None:
    """Through the official client: a number past its bound (a seq of 2**63 once gave only "Error
    executing tool"), a string for a number, a number for a string, a string for a boolean:
    each answer is a tool error whose text names the argument, and nothing is done."""
    repo = make_repo(tmp_path / "ws")
    claude_home = tmp_path / "claude-home"
    fx.write_jsonl(fx.claude_path(claude_home, repo.root), fx.claude_session(repo.root))
    cases = [
        ("history_item", {"seq": 2**63}, "seq"), ("history_item", {"seq": 2**64 + 5}, "seq"),
        ("history_item", {"seq": -(2**63)}, "seq"), ("history_item", {"seq": 0}, "seq"),
        ("history_item", {"seq": "3"}, "seq"), ("history_item", {"seq": 1.5}, "seq"),
        ("history_item", {"seq": True}, "seq"), ("history_item", {"seq": 1, "thread": 5}, "thread"),
        ("history_item", {"seq": 1, "thread": "t" * 300}, "thread"), ("history_item", {}, "seq"),
        ("recall", {"query": 5}, "query"), ("recall", {"query": "x" * 100_001}, "query"),
        ("recall", {"query": "x", "limit": "many"}, "limit"), ("recall", {"query": "x", "limit": 2**70}, "limit"),
        ("recall", {"query": "x", "limit": 101}, "limit"), ("recall", {"query": "x", "scope": 5}, "scope"),
        ("recall", {"query": "x", "scope": "everything"}, "scope"), ("recall", {}, "query"),
        ("checkpoints", {"limit": 2**64}, "limit"), ("checkpoints", {"limit": "x"}, "limit"),
        ("checkpoints", {"limit": 0}, "limit"), ("checkpoint", {"label": 5}, "label"),
        ("checkpoint", {"label": "x" * 10_001}, "label"), ("restore_checkpoint", {"id": 5}, "id"),
        ("restore_checkpoint", {"id": "f" * 40, "confirm": "yes"}, "confirm"),
        ("restore_checkpoint", {"id": "f" * 65}, "id"), ("restore_checkpoint", {}, "id"),
    ]

    async def scenario() -> None:
        async with stdio_client(server_params(tmp_path / "state", repo.root, claude_home)) as streams:
            async with ClientSession(*streams) as session:
                await session.initialize()
                for tool, arguments, named in cases:
                    text, error = await call(session, tool, **arguments)
                    assert error and isinstance(text, str), (tool, arguments, text)
                    assert text.startswith((f"{tool}: {named}:", f"{named}:")), (tool, str(arguments)[:80], text)
                    assert "errors.pydantic.dev" not in text and len(text) < 400, text
                listed, error = await call(session, "checkpoints")
                assert not error and listed == {"checkpoints": []}  # no checkpoint was taken

    anyio.run(scenario)


def test_the_tools_bounds_are_the_stores() -> None:
    from ctxd.ledger import recall
    from ctxd.mcp import limits
    from ctxd.protocol.params import RecallParams

    assert (limits.MAX_SEQ, limits.MAX_LIMIT) == (recall.MAX_SEQ, recall.MAX_LIMIT)
    query = RecallParams.model_fields["query"].metadata
    assert [m.max_length for m in query if hasattr(m, "max_length")] == [limits.ASKED_QUERY_CHARS]



def test_codex_reads_ctxds_gauge_as_its_status_line(tmp_path: Path) -> None:
    """Codex 0.171's status-line providers (its `create-statusline` skill, `statusline.d.ts`): one tool
    advertises a `statusline` entrypoint, and a read of its resource with the displayed thread's
    snapshot in `_meta` answers a UI tree within Codex's limits: ctxd's gauge of that session, or
    Codex's own numbers for a session ctxd does not follow."""
    from ctxd.mcp import codex_statusline as footer

    repo = make_repo(tmp_path / "ws")
    codex_home = tmp_path / "codex-home"
    fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(repo.root))
    params = server_params(tmp_path / "state", repo.root, tmp_path / "claude-home")
    params.env = {**(params.env or {}), "CODEX_HOME": str(codex_home)}

    def snapshot(thread_id: str) -> dict[str, Any]:
        return {footer.STATE_KEY: {"thread": {"id": thread_id, "name": None, "agent": {"state": "ready"},
                                              "model": {"display_name": "gpt-5.5", "provider": "openai"},
                                              "workspace": {"cwd": str(repo.root)},
                                              "usage": {"context": {"context_window_size": 258_400,
                                                                    "used_tokens": 12_000},
                                                        "cost": {"total_cost_usd": 0.5}}},
                                   "account": {"rate_limits": []}, "app": {"cli_version": "0.171.0",
                                                                           "display_mode": "standard"},
                                   "config": {"statusline_items": []}}}

    def texts(node: Any) -> list[str]:
        if isinstance(node, str):
            return [node]
        return [t for child in (node or {}).get("children", []) for t in texts(child)]

    async def scenario() -> None:
        async with stdio_client(params) as streams:
            async with ClientSession(*streams) as session:
                await session.initialize()
                listed = {tool.name: tool for tool in (await session.list_tools()).tools}
                entry = listed["statusline"].model_dump(by_alias=True)["_meta"]["openai/ui"]["entrypoints"]
                assert entry == [{"type": "statusline", "resourceUri": footer.URI}]
                await until(session, "context_usage", lambda v: v["thread"] == f"codex:{fx.CODEX_ID}")
                for thread_id, ours in ((fx.CODEX_ID, True), ("0199aaaa-0000-7000-8000-000000000000", False)):
                    started = time.monotonic()
                    read = await session.read_resource(footer.URI, meta=snapshot(thread_id))
                    took = time.monotonic() - started
                    content = read.contents[0]
                    assert content.mime_type == "application/json" and len(content.text.encode()) <= 64 * 1024
                    ui = json.loads(content.text)
                    assert ui["type"] == "row" and ui["props"]["gap"] == 1 and texts(ui)[0] == "ctxd"
                    shown = " ".join(texts(ui))
                    if ours:  # ctxd's fill against Codex's compaction point, and the cost ctxd priced
                        assert "% of " in shown and "of 258.4k" not in shown and "$0.50" not in shown, shown
                    else:  # Codex's own numbers
                        assert "5% of 258.4k" in shown and "$0.50" in shown, shown
                    assert took < 30, took  # a hang guard only: Codex's own bound is 1 s (bench_recall)

    anyio.run(scenario)


def test_behind_a_ctxd_acp_proxy_it_serves_the_acp_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`ctxd acp` adds ctxd's MCP server before the session has an id, and names the session in a
    link file once it has one (ctxd/acplink.py): the server serves that `acp:` thread."""
    from ctxd import acplink, ownerlink

    repo = make_repo(tmp_path / "ws")
    state_dir = tmp_path / "state"
    params = server_params(state_dir, repo.root, tmp_path / "claude-home")
    for key, value in (params.env or {}).items():  # the owner this test starts: the tests' environment
        monkeypatch.setenv(key, value)
    owner_state = state_dir / "ctxd"
    proxy = ownerlink.Session.open(owner_state, [repo.root], role="acp")
    assert proxy is not None
    try:
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "the zebra protocol"}]}
        proxy.request("ctxd/acp/record", {"workspace": repo.root.as_uri(), "thread": "acp:sess-7", "items": [item]})
        link = acplink.link_path(owner_state, 1)
        acplink.write(link, "acp:sess-7", repo.root)
        params.env = {**(params.env or {}), acplink.ENV: str(link)}

        async def scenario() -> None:
            async with stdio_client(params) as streams:
                async with ClientSession(*streams) as session:
                    await session.initialize()
                    usage, error = await call(session, "context_usage")
                    assert not error and usage["thread"] == "acp:sess-7" and usage["agent"] == "acp", usage
                    found, error = await call(session, "recall", query="zebra protocol")
                    assert not error and found["results"][0]["thread"] == "acp:sess-7", found

        anyio.run(scenario)
    finally:
        proxy.close()


def test_the_modules_that_answer_initialize_import_neither_dataclasses_nor_a_thread_pool() -> None:
    """What `ctxd mcp` imports before it answers `initialize` (its entry, the protocol, the tools'
    declarations and the backend's module), in a fresh interpreter: not `dataclasses` (which
    imports `inspect`, `dis` and `tokenize`: a quarter of that import time), nor a thread pool,
    nor the settings. The backend's own imports run on its thread, beside the protocol."""
    import subprocess

    code = ("import json, sys\nimport ctxd.entry, ctxd.mcp.server, ctxd.mcp.backend\n"
            "print(json.dumps(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    imported = set(json.loads(done.stdout))
    assert "ctxd.mcp.protocol" in imported and "ctxd.ownerlink" in imported, sorted(imported)
    heavy = {"dataclasses", "inspect", "concurrent.futures", "subprocess", "ctxd.settings", "sqlite3", "mcp"}
    assert not heavy & imported, heavy & imported


def test_a_server_whose_owner_went_away_reaches_the_next_one(tmp_path: Path) -> None:
    """The owner a server reached is killed (an upgrade, a crash): every later tool call failed
    for the rest of the agent's session ("Broken pipe"). The next call reaches a new owner. A
    query longer than the owner takes (a log pasted whole, which the tool's schema allows) is
    asked as its first words."""
    import os
    import signal

    from ctxd import ownerlink

    workspace = tmp_path / "ws"
    workspace.mkdir()
    state_dir, claude_home = tmp_path / "state", tmp_path / "claude-home"
    fx.write_jsonl(fx.claude_path(claude_home, workspace), fx.claude_session(workspace))

    def owner_pid() -> int:
        conn = ownerlink.connect(state_dir / "ctxd")
        assert conn is not None
        try:
            return ownerlink.peer_pid(conn)
        finally:
            conn.close()

    async def scenario() -> None:
        async with stdio_client(server_params(state_dir, workspace, claude_home, session=THREAD)) as streams:
            async with ClientSession(*streams) as session:
                await session.initialize()
                await until(session, "recall", lambda v: v["results"], query="verbose")
                first = owner_pid()
                os.kill(first, signal.SIGKILL)
                await anyio.sleep(0.5)
                found = await until(session, "recall", lambda v: v["results"], query="verbose " + "log line " * 6_000)
                assert found["results"] and owner_pid() != first

    anyio.run(scenario)


def test_a_lone_surrogate_in_an_argument_is_answered() -> None:
    """Valid JSON (`"\\ud800"`) that the tool's schema refuses: its error quoted the value, the
    answer could not be encoded as UTF-8, and the call was never answered."""
    import select
    import subprocess

    env = daemon_env(Path("/nonexistent-state"), {"PYTHONPATH": str(REPO), "CTXD_SESSION": THREAD})
    proc = subprocess.Popen([sys.executable, "-m", "ctxd", "mcp"], cwd="/", env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        for message in ('{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": '
                        '"2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}',
                        '{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "recall", '
                        '"arguments": {"query": "x", "scope": "\\ud800"}}}'):
            proc.stdin.write(message.encode() + b"\n")
            proc.stdin.flush()
            assert select.select([proc.stdout], [], [], 30)[0], "never answered"
            answer = json.loads(proc.stdout.readline())
        assert answer["id"] == 2 and answer["result"]["isError"] and "scope" in answer["result"]["content"][0]["text"]
    finally:
        proc.kill()
        proc.wait(timeout=20)
