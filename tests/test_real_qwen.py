"""The real qwen-code 0.24.4 (pinned, tests/agents.py), followed by the real daemon, with ctxd's
hooks, status line and MCP server installed by `ctxd hooks install --agent qwen`.

qwen runs headless against a scripted Chat Completions server on 127.0.0.1: a first turn writes
hello.txt (write_file), a resumed second turn reads and edits it (read_file, edit, a `sed` through run_shell_command), then qwen's
own `/compress` summarises the session. What is checked is what a user sees, as for Codex and
Claude Code in tests/test_real_agents.py: the thread `qwen:<id>` with qwen's own fill (its
footer's prompt tokens, then the compression's estimate), pushed while qwen runs; the cost of
every request with cached input apart; every item, and the compaction in History with what it
replaced archived; a checkpoint before each turn and before the edit, each restoring the files
exactly; `ctxd sessions` by its own name; and the user's settings.json given back byte for byte.

Waits are generous (a loaded machine); nothing asserts a duration.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.agents import QWEN_MODEL, Qwen
from tests.model_servers import ChatCompletionsServer, Reply, tool
from tests.rpc import Client
from tests.test_hooks import ctxd, env_for
from tests.test_hooks_real_agents import checkpoints, one, restore
from tests.test_real_agents import REPO_ROOT, WAIT, history, thread_of, unread, usage_gate, user_texts
from tests.test_real_agents import setup as real_setup

PRICE = {"input": 1.0, "cachedInput": 0.1, "output": 5.0}  # USD per million tokens, given in the editor's settings


def test_qwen_turns_usage_checkpoints_compression_and_install(daemon_factory: Callable[..., Client], tmp_path: Path,
                                                              state_dir: Path) -> None:
    s = real_setup(daemon_factory, tmp_path, start=False)
    qwen_home = tmp_path / "qwen-home"
    s.client = daemon_factory([s.repo.root], {"prices": {QWEN_MODEL: PRICE}}, env={"QWEN_HOME": str(qwen_home)})
    ws = s.repo.root
    target = str(ws / "hello.txt")
    env = {**env_for(tmp_path), "QWEN_HOME": str(qwen_home), "XDG_STATE_HOME": str(state_dir)}
    seen: dict[str, Any] = {}

    with ChatCompletionsServer() as server:
        qwen = Qwen(s.base, qwen_home, server, extra_env={"XDG_STATE_HOME": str(state_dir)})
        original = (qwen_home / "settings.json").read_bytes()  # the user's settings, as the driver wrote them
        done = ctxd(tmp_path, "hooks", "install", "--agent", "qwen", cwd=ws, env=env)
        assert done.returncode == 0, done.stderr
        installed = json.loads((qwen_home / "settings.json").read_text())
        assert "statusline --agent qwen" in installed["ui"]["statusLine"]["command"]

        # The read_file reply's report (13,000; turn 1 ended near 12,100), with or without the
        # tool's result that qwen writes after it: which one ctxd reads first is the machine's timing.
        pushed = usage_gate(s, "qwen", 13_000)
        turn1 = [dict(input=12_000, cached=10_000, output=30), dict(input=12_100, cached=12_000, output=10)]
        server.script(Reply(text="Writing.", calls=[tool("call_1", "write_file", file_path=target, content="hello\n")],
                            usage=turn1[0]),
                      Reply(text="Wrote hello.txt.", usage=turn1[1],
                            before=lambda: seen.setdefault("after write", s.repo.files())))
        session = qwen.session_id(qwen.prompt("Create hello.txt saying hello.", ws))
        thread = f"qwen:{session}"
        assert s.repo.files()["hello.txt"] == "hello\n"
        # qwen's edit refuses a file this process has not read: the resumed turn reads it first
        turn2 = [dict(input=13_000, cached=12_000, output=20), dict(input=13_500, cached=13_000, output=25),
                 dict(input=13_800, cached=13_500, output=15), dict(input=14_000, cached=13_800, output=5)]
        server.script(Reply(text="Reading.", calls=[tool("call_2", "read_file", file_path=target)], usage=turn2[0]),
                      Reply(text="Editing.", calls=[tool("call_3", "edit", file_path=target, old_string="hello",
                                                         new_string="hello, world")], usage=turn2[1], before=pushed),
                      Reply(text="Shouting.", calls=[tool("call_4", "run_shell_command", command="sed -i s/world/WORLD/ "
                                                          "hello.txt", description="shout", is_background=False)],
                            usage=turn2[2], before=lambda: seen.setdefault("after edit", s.repo.files())),
                      Reply(text="Changed.", usage=turn2[3]))
        assert qwen.session_id(qwen.prompt("Change it to say hello, world.", ws, resume=session)) == session
        qwen.compress(ws, session)
        assert server.pending == 0
        summaries = [r for r in server.requests if not r.scripted]
    assert s.repo.files()["hello.txt"] == "hello, WORLD\n"
    assert pushed.seen, "no ctxd/usageChanged with the read_file reply's report while qwen was still running"
    assert len(summaries) == 1, "qwen did not compress once"

    # The fill: qwen's footer, the compression's newTokenCount once it compressed.
    path = qwen.session_file(ws, session)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    [compression] = [r for r in records if r.get("subtype") == "chat_compression"]
    kept = compression["systemPayload"]["info"]["newTokenCount"]
    info = thread_of(s, "qwen", lambda t: t["usage"]["usedTokens"] == kept)
    assert (info["thread"], info["model"], info["readOnly"], info["title"]) == (
        thread, QWEN_MODEL, True, "Create hello.txt saying hello.")
    assert info["usage"]["contextWindow"] == 1_000_000 and info["usage"]["autoCompactLimit"] == 850_000

    # The cost: every request, the compression's included, cached input at its own price.
    summary = {"input": 2_000, "cached": 0, "output": 200}  # the server's usage for a summary
    reports = [*turn1, *turn2, summary]
    cost = sum((r["input"] - r["cached"]) * PRICE["input"] + r["cached"] * PRICE["cachedInput"]
               + r["output"] * PRICE["output"] for r in reports) / 1e6
    breakdown = s.client.request("ctxd/usage", {"workspace": s.uri, "thread": thread})
    assert breakdown["cost"]["priced"] is True and breakdown["cost"]["total"] == pytest.approx(cost, abs=1e-9)

    # History: the compaction qwen made, and nothing lost: what it replaced is archived.
    full = history(s, thread, archived=True)
    [compaction] = full["compactions"]
    assert (compaction["tokensBefore"], compaction["tokensAfter"]) == (14_000, kept)
    archived = [i for i in full["items"] if i.get("archived")]
    assert [i["call_id"] for i in archived if i["type"] == "function_call"] == ["call_1", "call_2", "call_3", "call_4"]
    assert user_texts(archived)[:2] == ["Create hello.txt saying hello.", "Change it to say hello, world."]
    active = history(s, thread)["items"]
    assert any("<state_snapshot>" in text for text in user_texts(active))
    assert not [i for i in active if i["type"] == "function_call"]
    assert unread(s, "qwen") == []  # every kind of record this qwen wrote is one ctxd reads

    # Checkpoints: one per typed prompt (not per repeated UserPromptSubmit), and one before each
    # file-changing tool (the write's and the edit's are their turn's: the same tree, listed once).
    found = checkpoints(s, thread)
    turns = {c["turn"]["text"]: c for c in found if c["trigger"] == "turn"}
    assert sorted(turns) == ["Change it to say hello, world.", "Create hello.txt saying hello."]
    shell = one(found, lambda c: c.get("tool", {}).get("name") == "run_shell_command")
    assert shell["message"] == "before run_shell_command: sed -i s/world/WORLD/ hello.txt"
    assert shell["tool"]["callId"] == "call_4" and len(found) == 3
    log = (state_dir / "ctxd" / "hooks.log").read_text()
    assert [m for m in ("(tool) by the owner", "before write_file hello.txt", "before edit hello.txt") if m not in log] == []
    assert "before read_file" not in log
    restore(s, shell)
    assert s.repo.files() == seen["after edit"] and seen["after edit"]["hello.txt"] == "hello, world\n"
    restore(s, turns["Change it to say hello, world."])  # before the edit: the files after the write
    assert s.repo.files() == seen["after write"]
    restore(s, turns["Create hello.txt saying hello."])
    assert "hello.txt" not in s.repo.files()

    # `ctxd sessions` shows it by its own name.
    listed = subprocess.run([sys.executable, "-m", "ctxd", "sessions", "--workspace", str(ws), "--format", "json",
                             "--qwen-home", str(qwen_home)], cwd=REPO_ROOT, capture_output=True, text=True,
                            timeout=WAIT)
    [row] = [r for r in json.loads(listed.stdout) if r["agent"] == "qwen"]
    assert (row["thread"], row["usedTokens"], row["contextWindow"]) == (thread, kept, 1_000_000)

    # Uninstall gives the user's settings.json back byte for byte, qwen having run with it.
    done = ctxd(tmp_path, "hooks", "uninstall", "--agent", "qwen", cwd=ws, env=env)
    assert done.returncode == 0, done.stderr
    assert (qwen_home / "settings.json").read_bytes() == original
    assert re.search(rb'"\$version": 4', original)
