"""The real Codex CLI and Claude Code (pinned, tests/agents.py), followed by the real daemon.

Each test starts the daemon on a git repository, then runs the agent non-interactively against
a scripted model server on 127.0.0.1 (tests/model_servers.py): the agent's own tools change the
files (Codex: exec_command, apply_patch; Claude: Write, Edit, Bash, a subagent), the server
reports usage with cached input, a second turn resumes the session, and each agent compacts on
its own. What is checked is what a user sees: the thread, its fill by the rule of
docs/sessions.md, `usageChanged` while the agent runs, a checkpoint for every user turn that
restores the files exactly, `ctxd sessions`, and every item of the conversation.

Waits are generous (a loaded machine); nothing asserts a duration.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import pytest

from tests.agents import CLAUDE_MODEL, CODEX_MODEL, Claude, Codex
from tests.ghost_repo import Repo, make_repo
from tests.model_servers import MessagesServer, Reply, ResponsesServer, apply_patch, shell, tool
from tests.rpc import Client

REPO_ROOT = Path(__file__).resolve().parent.parent
WAIT = 60.0  # seconds: only a broken daemon comes near
PRICES = json.loads((REPO_ROOT / "ctxd" / "sessions" / "prices.json").read_text())["models"]


@dataclass
class Setup:
    repo: Repo
    client: Client
    uri: str
    codex_home: Path
    claude_home: Path
    base: Path


def setup(daemon_factory: Callable[..., Client], tmp_path: Path, start: bool = True) -> Setup:
    """A repository and the agents' homes, followed by a daemon (with `start`; else `start_daemon` later)."""
    repo = make_repo(tmp_path / "repo")
    repo.write("app.py", "print('v1')\n")
    repo.write("notes.txt", "keep me\n")
    repo.commit_all("base")
    codex_home, claude_home = tmp_path / "codex-home", tmp_path / "claude-home"
    s = Setup(repo, cast(Client, None), repo.root.as_uri(), codex_home, claude_home, tmp_path / "agent")
    if start:
        start_daemon(s, daemon_factory)
    return s


def start_daemon(s: Setup, daemon_factory: Callable[..., Client]) -> None:
    s.client = daemon_factory([s.repo.root], env={"CODEX_HOME": str(s.codex_home),
                                                  "CLAUDE_CONFIG_DIR": str(s.claude_home)})


def compacted_at(home: Path) -> list[datetime]:
    """When the agent compacted, as its one session file says (Codex's `compacted` records,
    Claude Code's `compact_boundary` lines)."""
    [path] = [p for p in home.rglob("*.jsonl") if "subagents" not in p.parts]
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [datetime.fromisoformat(r["timestamp"].replace("Z", "+00:00")) for r in records
            if r.get("type") == "compacted" or r.get("subtype") == "compact_boundary"]


def listed_at(compactions: list[dict[str, Any]]) -> list[datetime]:
    return [datetime.fromisoformat(c["createdAt"]) for c in compactions]


def thread_of(s: Setup, agent: str, check: Callable[[dict[str, Any]], bool] = lambda t: True) -> dict[str, Any]:
    """The agent's one thread, once `check` holds (polled: the daemon follows asynchronously)."""
    deadline = time.monotonic() + WAIT
    while True:
        threads = [t for t in s.client.request("ctxd/threads", {"workspace": s.uri})["threads"]
                   if t.get("source") == agent]
        if len(threads) == 1 and check(threads[0]):
            return threads[0]
        if time.monotonic() > deadline:
            raise AssertionError(f"no {agent} thread as expected: {threads}")
        time.sleep(0.05)


def snapshot_labelled(s: Setup, label: str, timeout: float = WAIT) -> dict[str, Any] | None:
    deadline = time.monotonic() + timeout
    while True:
        for snap in s.client.request("ctxd/ghost/list", {"workspace": s.uri})["snapshots"]:
            if snap["message"] == label:
                return snap
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)


class Gate:
    """Run by the model server before it answers: waits (bounded) for what the daemon must have
    done by then, and remembers whether it saw it. The agent waits meanwhile."""

    def __init__(self, wait: Callable[[], bool]) -> None:
        self._wait = wait
        self.seen: bool | None = None

    def __call__(self) -> None:
        try:
            self.seen = self._wait()
        except TimeoutError:
            self.seen = False


def usage_gate(s: Setup, agent: str, at_least: int) -> Gate:
    """`ctxd/usageChanged` for the agent's thread reaching `at_least` tokens."""
    def wait() -> bool:
        s.client.wait_for_notification(
            "ctxd/usageChanged", lambda p: p["workspace"] == s.uri and p["thread"].startswith(agent + ":")
            and p["usedTokens"] >= at_least, timeout=WAIT)
        return True
    return Gate(wait)


def checkpoint_gate(s: Setup, label: str) -> Gate:
    """A checkpoint takes a second or so: a third of WAIT is still far beyond it."""
    return Gate(lambda: snapshot_labelled(s, label, timeout=WAIT / 3) is not None)


def restore(s: Setup, label: str, thread: str) -> dict[str, Any]:
    snap = snapshot_labelled(s, label, timeout=0)
    assert snap is not None, f"no checkpoint labelled {label!r}"
    return s.client.request("ctxd/ghost/restore", {"workspace": s.uri, "thread": thread, "id": snap["id"]})


def ctxd_sessions(s: Setup, fmt: str) -> str:
    done = subprocess.run([sys.executable, "-m", "ctxd", "sessions", "--workspace", str(s.repo.root), "--format", fmt,
                           "--codex-home", str(s.codex_home), "--claude-home", str(s.claude_home)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=WAIT)
    assert done.returncode == 0, done.stderr
    return done.stdout


def kept_after(s: Setup, thread: str, index: int) -> int:
    """The fill after the thread's `index`th compaction, as `ctxd/history` lists it."""
    return int(history(s, thread, archived=True)["compactions"][index]["tokensAfter"])


def history(s: Setup, thread: str, archived: bool = False) -> dict[str, Any]:
    return s.client.request("ctxd/history", {"workspace": s.uri, "thread": thread, "includeArchived": archived})


def unread(s: Setup, agent: str) -> list[dict[str, Any]]:
    """`ctxd/status`'s kinds of record the agent wrote that ctxd does not read."""
    [source] = [src for src in s.client.request("ctxd/status", {"workspace": s.uri})["sources"] if src["agent"] == agent]
    return source["unread"]


def user_texts(items: list[dict[str, Any]]) -> list[str]:
    return [part.get("text", "") for item in items if item.get("type") == "message" and item.get("role") == "user"
            for part in (item["content"] if isinstance(item["content"], list) else [{"text": item["content"]}])]


def openai_cost(model: str, reports: list[dict[str, int]]) -> float:
    price = PRICES[model]
    return sum((r["input"] - r.get("cached", 0)) * price["input"] + r.get("cached", 0) * price["cachedInput"]
               + r["output"] * price["output"] for r in reports) / 1e6


# --- Codex CLI ---------------------------------------------------------------------------------

PATCH_V2 = "*** Begin Patch\n*** Update File: app.py\n@@\n-print('v1')\n+print('v2')\n*** End Patch\n"
PATCH_V3 = "*** Begin Patch\n*** Update File: app.py\n@@\n-print('v2')\n+print('v3')\n*** End Patch\n"


def test_codex_turns_usage_checkpoints_and_sessions(daemon_factory, tmp_path: Path) -> None:
    s = setup(daemon_factory, tmp_path)
    with ResponsesServer() as server:
        codex = Codex(s.base, s.codex_home, server)
        live = usage_gate(s, "codex", 9_100)
        turn1 = [dict(input=9_000, cached=2_000, output=100), dict(input=9_300, cached=9_000, output=80),
                 dict(input=9_500, cached=9_300, output=20)]
        # The first turn's checkpoint before Codex acts (else it may capture the tree after the turn,
        # which the second turn's checkpoint, the same tree, then reuses under the first turn's label).
        first = checkpoint_gate(s, "Add new.txt and bump app.py")
        server.script(Reply(calls=[shell("c1", "printf 'made by codex\\n' > new.txt")], usage=turn1[0], before=first),
                      Reply(calls=[apply_patch("c2", PATCH_V2)], usage=turn1[1], before=live),
                      Reply(text="Turn one done.", usage=turn1[2]))
        session = Codex.thread_id(codex.exec("Add new.txt and bump app.py", s.repo.root))
        thread = f"codex:{session}"
        s.client.wait_for_notification("ctxd/threadsChanged", lambda p: p["workspace"] == s.uri, timeout=WAIT)
        assert live.seen, "no ctxd/usageChanged with the first report while Codex was still running"
        assert first.seen, "no checkpoint for the first turn before Codex acted"
        after_turn1 = s.repo.files()
        assert after_turn1["new.txt"] == "made by codex\n" and after_turn1["app.py"] == "print('v2')\n"

        # The second turn resumes the session; its checkpoint comes before Codex changes anything.
        second = "Bump app.py again and drop the notes"
        checkpoint = checkpoint_gate(s, second)
        turn2 = [dict(input=11_000, cached=9_500, output=60), dict(input=11_500, cached=11_000, output=40),
                 dict(input=12_000, cached=11_500, output=30)]
        server.script(Reply(calls=[apply_patch("c3", PATCH_V3)], usage=turn2[0], before=checkpoint),
                      Reply(calls=[shell("c4", "rm notes.txt")], usage=turn2[1]),
                      Reply(text="Turn two done.", usage=turn2[2]))
        assert Codex.thread_id(codex.exec(second, s.repo.root, resume=session)) == session
        assert checkpoint.seen, "no checkpoint for the resumed turn before Codex acted"
        assert server.pending == 0

    # The fill: the latest token_count's last_token_usage.total_tokens, of the window Codex states
    # there (gpt-5.5's 272,000 less Codex's 5% reserve).
    info = thread_of(s, "codex", lambda t: t["usage"]["usedTokens"] == 12_030)
    assert info["thread"] == thread and info["model"] == CODEX_MODEL and info["readOnly"] is True
    assert info["title"] == "Add new.txt and bump app.py"
    assert info["usage"]["contextWindow"] == 258_400 and info["usage"]["source"] == "api"
    breakdown = s.client.request("ctxd/usage", {"workspace": s.uri, "thread": thread})
    assert breakdown["usage"]["usedTokens"] == 12_030
    cost = openai_cost(CODEX_MODEL, turn1 + turn2)
    assert breakdown["cost"]["priced"] is True and breakdown["cost"]["total"] == pytest.approx(cost, abs=1e-9)

    # Every item: both prompts, every call and its output, the answers.
    items = history(s, thread)["items"]
    assert [u for u in user_texts(items) if not u.startswith("<")] == ["Add new.txt and bump app.py", second]
    calls = [(i["type"], i["call_id"]) for i in items if i["type"] in ("function_call", "custom_tool_call")]
    outputs = [(i["type"], i["call_id"]) for i in items if i["type"].endswith("_output")]
    assert calls == [("function_call", "c1"), ("custom_tool_call", "c2"), ("custom_tool_call", "c3"),
                     ("function_call", "c4")]
    assert outputs == [("function_call_output", "c1"), ("custom_tool_call_output", "c2"),
                       ("custom_tool_call_output", "c3"), ("function_call_output", "c4")]
    assert [i["content"][0]["text"] for i in items if i["type"] == "message" and i["role"] == "assistant"] == [
        "Turn one done.", "Turn two done."]

    # `ctxd sessions`, as JSON and as the table.
    [row] = json.loads(ctxd_sessions(s, "json"))
    assert (row["thread"], row["turns"], row["usedTokens"], row["contextWindow"], row["model"]) == (
        thread, 2, 12_030, 258_400, CODEX_MODEL)
    assert row["cost"]["total"] == pytest.approx(cost, abs=1e-9)
    table = ctxd_sessions(s, "table").splitlines()
    assert table[0].split()[:2] == ["AGENT", "TITLE"]
    assert table[1].startswith("codex") and "Add new.txt and bump app.py" in table[1] and "12k/258k" in table[1]

    # Every kind of record this Codex wrote is one ctxd reads (a new version's new kinds show here).
    assert unread(s, "codex") == []

    # Restoring the second turn's checkpoint gives back the files as the first turn left them.
    result = restore(s, second, thread)
    assert s.repo.files() == after_turn1 and "notes.txt" in result["restored"]


def test_codex_first_turn_of_a_new_session_is_checkpointed(daemon_factory, tmp_path: Path) -> None:
    s = setup(daemon_factory, tmp_path)
    before = s.repo.files()
    prompt = "Rewrite app.py"
    with ResponsesServer() as server:
        codex = Codex(s.base, s.codex_home, server)
        checkpoint = checkpoint_gate(s, prompt)
        server.script(Reply(calls=[shell("c1", "echo \"print('new')\" > app.py && rm notes.txt")],
                            usage=dict(input=5_000, output=10), before=checkpoint),
                      Reply(text="Rewritten.", usage=dict(input=5_100, cached=5_000, output=5)))
        session = Codex.thread_id(codex.exec(prompt, s.repo.root))
    assert s.repo.files() != before
    assert checkpoint.seen, "no checkpoint for the first turn of a new session before Codex acted"
    restore(s, prompt, f"codex:{session}")
    assert s.repo.files() == before


def test_codex_compaction_shows_in_the_thread_and_keeps_the_history(daemon_factory, tmp_path: Path) -> None:
    s = setup(daemon_factory, tmp_path)
    with ResponsesServer() as server:
        codex = Codex(s.base, s.codex_home, server, auto_compact_limit=20_000)
        # The first report is over Codex's compaction limit: Codex summarises (a request without
        # tools, answered by the fallback once the gauge has shown the full window) and carries on.
        full = usage_gate(s, "codex", 30_050)
        server.fallback = Reply(text="Summary: one.txt was made.", before=full)
        # Before its first request after the compaction Codex writes a report of 0 input whose
        # total is its own figure for the new history: a marker, not the fill (issue #36).
        after: dict[str, Any] = {}
        server.script(Reply(calls=[shell("c1", "echo one > one.txt")], usage=dict(input=30_000, cached=1_000, output=50)),
                      Reply(text="Done after compacting.", usage=dict(input=4_000, cached=1_000, output=10),
                            before=Gate(lambda: after.update(compacted_gauge(s)) or True)))
        session = Codex.thread_id(codex.exec("Make one.txt", s.repo.root))
        summaries = [r for r in server.requests if not r.scripted]
    thread = f"codex:{session}"
    assert summaries, "Codex did not compact"
    assert full.seen, "the gauge never showed the full window before the compaction"
    assert after.get("source") == "estimate" and after["percent"] < 100, after
    info = thread_of(s, "codex", lambda t: t["usage"]["usedTokens"] == 4_010)
    assert info["usage"]["source"] == "api"  # the gauge dropped from 30,050 to the new report
    # The prompt cache (issue #31): warm after the last request (OpenAI's 10 minutes); the
    # compaction's cost is the first request after it, 3,000 of its 4,000 input tokens not read
    # from the cache (not Codex's report of 0 input right after compacting), against the fill
    # before less the fill after, read on every request after it.
    assert info["cache"]["state"] == "warm" and info["cache"]["lifetimeSeconds"] == 600
    assert info["cache"]["compactions"][-1]["cacheWriteTokens"] == 3_000
    assert info["cache"]["compactions"][0]["savedTokensPerTurn"] == 30_050 - kept_after(s, thread, 0)
    kept = history(s, thread, archived=True)
    # Each one Codex ran, with its name and the fill before it (issue #26).
    assert [c["strategy"] for c in kept["compactions"]] == ["codex"] * len(summaries)
    assert kept["compactions"][0]["tokensBefore"] == 30_050  # not the 0 Codex reports for the summary request
    assert kept["compactions"][-1]["tokensAfter"] == 4_010  # the first request after it, not Codex's marker
    archived = [i for i in kept["items"] if i.get("archived")]
    assert ("function_call", "c1") in [(i["type"], i.get("call_id")) for i in archived]
    assert "Make one.txt" in user_texts(archived)
    active = history(s, thread)["items"]
    # The active history is Codex's own replacement: its summary in, the tool call out.
    assert ("function_call", "c1") not in [(i["type"], i.get("call_id")) for i in active]
    assert any("Summary: one.txt was made." in text for text in user_texts(active))


def mirrored_history(s: Setup, thread: str, compactions: int) -> dict[str, Any]:
    """The thread's history once its `compactions` are mirrored (bounded): a session is listed, with
    its gauge, from its summary before its items are mirrored (issue #38)."""
    deadline = time.monotonic() + WAIT
    while True:
        kept = history(s, thread, archived=True)
        if len(kept["compactions"]) >= compactions or time.monotonic() > deadline:
            return kept
        time.sleep(0.05)


def compacted_gauge(s: Setup) -> dict[str, Any]:
    """The Codex thread's gauge once the daemon lists its compaction (waited for, bounded)."""
    deadline = time.monotonic() + WAIT / 3
    while True:
        # The history first, then the row: a row read before a compaction the history then lists
        # would show the gauge from before it (seen once: the mirror wrote both between the reads).
        [thread] = [t["thread"] for t in s.client.request("ctxd/threads", {"workspace": s.uri})["threads"]
                    if t.get("source") == "codex"] or [None]
        if thread is not None and history(s, thread, archived=True)["compactions"]:
            [row] = s.client.request("ctxd/threads", {"workspace": s.uri, "threads": [thread]})["threads"]
            return dict(row["usage"])
        if time.monotonic() > deadline:
            return {}
        time.sleep(0.05)


def test_codex_session_compacted_before_ctxd_ran_keeps_what_came_before(daemon_factory, tmp_path: Path) -> None:
    """Issue #36: a session ctxd first sees after Codex compacted it (no daemon while Codex ran)."""
    s = setup(daemon_factory, tmp_path, start=False)
    with ResponsesServer() as server:
        codex = Codex(s.base, s.codex_home, server, auto_compact_limit=20_000)
        server.fallback = Reply(text="Summary: one.txt was made.")
        server.script(Reply(calls=[shell("c1", "echo one > one.txt")], usage=dict(input=30_000, cached=1_000, output=50)),
                      Reply(text="Done after compacting.", usage=dict(input=4_000, cached=1_000, output=10)))
        session = Codex.thread_id(codex.exec("Make one.txt", s.repo.root))
        assert [r for r in server.requests if not r.scripted], "Codex did not compact"
    start_daemon(s, daemon_factory)
    thread = f"codex:{session}"
    thread_of(s, "codex", lambda t: t["usage"]["usedTokens"] == 4_010)
    kept = mirrored_history(s, thread, 1)
    assert listed_at(kept["compactions"]) == compacted_at(s.codex_home)  # Codex's time, not ctxd's
    assert [(c["tokensBefore"], c["tokensAfter"]) for c in kept["compactions"]] == [(30_050, 4_010)]
    archived = [i for i in kept["items"] if i.get("archived")]
    assert ("function_call", "c1") in [(i["type"], i.get("call_id")) for i in archived]
    assert "Make one.txt" in user_texts(archived)
    found = s.client.request("ctxd/recall", {"workspace": s.uri, "thread": thread, "query": "echo one.txt"})
    assert any(hit["archived"] and hit["type"] == "function_call" for hit in found["results"]), found


# --- Claude Code -------------------------------------------------------------------------------

def claude_fill(usage: dict[str, int]) -> int:
    """docs/sessions.md: the latest main-chain reply's input, cache reads and writes, and output."""
    return usage.get("input", 0) + usage.get("cache_read", 0) + usage.get("cache_write", 0) + usage.get("output", 0)


def test_claude_turns_subagent_usage_checkpoints_and_sessions(daemon_factory, tmp_path: Path) -> None:
    s = setup(daemon_factory, tmp_path)
    ws = s.repo.root
    with MessagesServer() as server:
        claude = Claude(s.base, s.claude_home, server)
        live = usage_gate(s, "claude", 4_010)
        helper = "Write docs.txt for the project"
        server.script(
            Reply(calls=[tool("t1", "Write", file_path=str(ws / "hello.txt"), content="hello\n")],
                  usage=dict(input=10, cache_write=4_000, output=60),
                  before=checkpoint_gate(s, "Add hello.txt and docs, drop the notes")),
            Reply(calls=[tool("t2", "Edit", file_path=str(ws / "hello.txt"), old_string="hello", new_string="hello world")],
                  usage=dict(input=10, cache_read=4_000, cache_write=200, output=50), before=live),
            Reply(calls=[tool("t3", "Agent", description="Write the docs", prompt=helper,
                              subagent_type="general-purpose", run_in_background=False)],
                  usage=dict(input=10, cache_read=4_200, cache_write=150, output=40)),
            Reply(to=helper, calls=[tool("s1", "Write", file_path=str(ws / "docs.txt"), content="docs\n")],
                  usage=dict(input=5, cache_write=3_000, output=20)),
            Reply(to=helper, text="Docs written.", usage=dict(input=5, cache_read=3_000, cache_write=80, output=8)),
            Reply(calls=[tool("t4", "Bash", command="rm notes.txt", description="Remove the notes")],
                  usage=dict(input=10, cache_read=4_350, cache_write=120, output=30)),
            Reply(text="Turn one done.", usage=dict(input=10, cache_read=4_470, cache_write=60, output=12)))
        first = claude.prompt("Add hello.txt and docs, drop the notes", ws).json()
        session = first["session_id"]
        thread = f"claude:{session}"
        s.client.wait_for_notification("ctxd/threadsChanged", lambda p: p["workspace"] == s.uri, timeout=WAIT)
        assert live.seen, "no ctxd/usageChanged with the first report while Claude Code was still running"
        after_turn1 = s.repo.files()
        assert after_turn1["hello.txt"] == "hello world\n" and after_turn1["docs.txt"] == "docs\n"
        assert "notes.txt" not in after_turn1

        second = "Bump app.py"
        checkpoint = checkpoint_gate(s, second)
        last = dict(input=20, cache_read=5_000, cache_write=100, output=15)
        server.script(
            Reply(calls=[tool("t5", "Read", file_path=str(ws / "app.py"))],
                  usage=dict(input=10, cache_read=4_600, cache_write=100, output=20), before=checkpoint),
            Reply(calls=[tool("t6", "Edit", file_path=str(ws / "app.py"), old_string="v1", new_string="v2")],
                  usage=dict(input=10, cache_read=4_800, cache_write=150, output=25)),
            Reply(text="Turn two done.", usage=last))
        final = claude.prompt(second, ws, resume=session).json()
        assert final["session_id"] == session and s.repo.files()["app.py"] == "print('v2')\n"
        assert checkpoint.seen, "no checkpoint for the resumed turn before Claude Code acted"
        assert server.pending == 0

    info = thread_of(s, "claude", lambda t: t["usage"]["usedTokens"] == claude_fill(last))
    assert info["thread"] == thread and info["model"] == CLAUDE_MODEL and info["title"] == "Add hello.txt and docs, drop the notes"
    assert info["usage"]["contextWindow"] == 200_000 and info["usage"]["source"] == "api"
    breakdown = s.client.request("ctxd/usage", {"workspace": s.uri, "thread": thread})
    assert breakdown["usage"]["usedTokens"] == claude_fill(last)
    # The session's cost, the subagent's requests included, is what Claude Code itself says.
    assert breakdown["cost"]["total"] == pytest.approx(final["total_cost_usd"], abs=1e-9)
    parts = ("input", "cachedInput", "cacheWrite", "output")
    assert sum(breakdown["cost"][k] for k in parts) == pytest.approx(breakdown["cost"]["total"], abs=1e-9)
    # Claude Code's own overhead, inferred from its first request (4,010 tokens of input for one
    # short prompt), and its own compaction point for the model (issue #26).
    rows = {c["name"]: c for c in breakdown["categories"]}
    overhead = rows["systemPrompt"]["tokens"] + rows["builtinTools"]["tokens"]
    assert "systemPrompt" in breakdown["inferred"] and 3_900 < overhead <= 4_010
    assert abs(rows["builtinTools"]["tokens"] - overhead * 0.625) <= 1  # its tools apart, as its /context does
    assert info["usage"]["autoCompactLimit"] == 167_000 and "Claude Code 2.1.332" in breakdown["limitSource"]

    # Every main-chain item; the subagent's conversation is not in the main window.
    items = history(s, thread)["items"]
    prompts = [u for u in user_texts(items) if not u.lstrip().startswith("<")]
    assert prompts == ["Add hello.txt and docs, drop the notes", second]
    calls = [(i["call_id"], i["name"]) for i in items if i["type"] == "function_call"]
    assert calls == [("t1", "Write"), ("t2", "Edit"), ("t3", "Agent"), ("t4", "Bash"), ("t5", "Read"), ("t6", "Edit")]
    assert [i["call_id"] for i in items if i["type"] == "function_call_output"] == ["t1", "t2", "t3", "t4", "t5", "t6"]
    assert "s1" not in {i.get("call_id") for i in items}

    [row] = json.loads(ctxd_sessions(s, "json"))
    assert (row["thread"], row["turns"], row["usedTokens"], row["contextWindow"], row["model"]) == (
        thread, 2, claude_fill(last), 200_000, CLAUDE_MODEL)
    assert row["cost"]["total"] == pytest.approx(final["total_cost_usd"], abs=1e-9)
    table = ctxd_sessions(s, "table").splitlines()
    assert table[1].startswith("claude") and "Add hello.txt and docs" in table[1] and "5k/200k" in table[1]

    assert unread(s, "claude") == []

    result = restore(s, second, thread)
    assert s.repo.files() == after_turn1 and "app.py" in result["restored"]


def test_claude_first_turn_of_a_new_session_is_checkpointed(daemon_factory, tmp_path: Path) -> None:
    s = setup(daemon_factory, tmp_path)
    ws = s.repo.root
    before = s.repo.files()
    prompt = "Replace the notes"
    with MessagesServer() as server:
        claude = Claude(s.base, s.claude_home, server)
        checkpoint = checkpoint_gate(s, prompt)
        server.script(Reply(calls=[tool("t1", "Bash", command="rm notes.txt && echo new > other.txt",
                                        description="Replace")],
                            usage=dict(input=10, cache_write=3_000, output=20), before=checkpoint),
                      Reply(text="Replaced.", usage=dict(input=10, cache_read=3_000, output=5)))
        session = claude.prompt(prompt, ws).json()["session_id"]
    assert s.repo.files() != before
    assert checkpoint.seen, "no checkpoint for the first turn of a new session before Claude Code acted"
    restore(s, prompt, f"claude:{session}")
    assert s.repo.files() == before


def test_claude_session_compacted_before_ctxd_ran_keeps_what_came_before(daemon_factory, tmp_path: Path) -> None:
    """Issue #36: Claude Code's own /compact, twice, before any ctxd read the transcript."""
    s = setup(daemon_factory, tmp_path, start=False)
    ws = s.repo.root
    with MessagesServer() as server:
        claude = Claude(s.base, s.claude_home, server)
        big = dict(input=10, cache_read=30_000, cache_write=500, output=20)
        server.script(Reply(calls=[tool("t1", "Write", file_path=str(ws / "one.txt"), content="one\n")], usage=big),
                      Reply(text="One written.", usage=big))
        session = claude.prompt("Make one.txt", ws).json()["session_id"]
        server.script(Reply(text="Summary: one.txt was written.", usage=dict(input=10, cache_read=30_000, output=30)))
        claude.prompt("/compact", ws, resume=session)
        server.script(Reply(calls=[tool("t2", "Write", file_path=str(ws / "two.txt"), content="two\n")], usage=big),
                      Reply(text="Two written.", usage=big))
        claude.prompt("Make two.txt", ws, resume=session)
        server.script(Reply(text="Summary: two.txt was written too.", usage=dict(input=10, cache_read=30_000, output=30)))
        claude.prompt("/compact", ws, resume=session)
        small = dict(input=10, cache_read=2_000, output=10)
        server.script(Reply(text="All done.", usage=small))
        claude.prompt("Now say done", ws, resume=session)
        assert server.pending == 0
    start_daemon(s, daemon_factory)
    thread = f"claude:{session}"
    thread_of(s, "claude", lambda t: t["usage"]["usedTokens"] == claude_fill(small))
    kept = mirrored_history(s, thread, 2)
    assert len(kept["compactions"]) == 2
    assert listed_at(kept["compactions"]) == compacted_at(s.claude_home)  # Claude Code's time, not ctxd's
    archived = [i for i in kept["items"] if i.get("archived")]
    assert [i["call_id"] for i in archived if i["type"] == "function_call"] == ["t1", "t2"]
    assert {"Make one.txt", "Make two.txt"} <= set(user_texts(archived))
    for call in ("t1", "t2"):  # each kept once
        assert len([i for i in kept["items"] if i.get("call_id") == call and i["type"] == "function_call"]) == 1
    current = history(s, thread)["items"]
    assert any("Summary: two.txt was written too." in u for u in user_texts(current))
    assert not any("Make one.txt" in u for u in user_texts(current))


def test_claude_compaction_shows_in_the_thread_and_keeps_the_history(daemon_factory, tmp_path: Path) -> None:
    s = setup(daemon_factory, tmp_path)
    ws = s.repo.root
    with MessagesServer() as server:
        claude = Claude(s.base, s.claude_home, server)
        big = dict(input=10, cache_read=30_000, cache_write=500, output=20)
        server.script(Reply(calls=[tool("t1", "Write", file_path=str(ws / "one.txt"), content="one\n")], usage=big),
                      Reply(text="One written.", usage=big))
        session = claude.prompt("Make one.txt", ws).json()["session_id"]
        thread = f"claude:{session}"
        thread_of(s, "claude", lambda t: t["usage"]["usedTokens"] == claude_fill(big))
        # Claude Code's own compaction (its /compact command): it asks the model for a summary
        # and starts the window again from it.
        server.script(Reply(text="Summary: one.txt was written.", usage=dict(input=10, cache_read=30_000, output=30)))
        claude.prompt("/compact", ws, resume=session)
        small = dict(input=10, cache_read=2_000, output=10)
        server.script(Reply(text="Two done.", usage=small))
        claude.prompt("Now say done", ws, resume=session)
        assert server.pending == 0
    assert (ws / "one.txt").read_text() == "one\n"
    info = thread_of(s, "claude", lambda t: t["usage"]["usedTokens"] == claude_fill(small))
    assert info["usage"]["source"] == "api"  # dropped from 30,530 to the first report after the summary
    kept = history(s, thread, archived=True)
    [compaction] = kept["compactions"]
    assert compaction["strategy"] == "claude" and compaction["tokensBefore"] > 30_000
    # The prompt cache (issue #31): warm (Anthropic's 5 minutes); the request after the compaction
    # wrote nothing to the cache, and each turn after it reads the fill before it less the fill
    # after (Claude Code's `postTokens`) fewer tokens.
    assert info["cache"]["state"] == "warm" and info["cache"]["lifetimeSeconds"] == 300
    [spent] = info["cache"]["compactions"]
    assert spent["cacheWriteTokens"] == 0
    assert spent["savedTokensPerTurn"] == compaction["tokensBefore"] - compaction["tokensAfter"] > 0
    assert compaction["tokensAfter"] is not None and compaction["tokensAfter"] < 30_000
    archived = [i for i in kept["items"] if i.get("archived")]
    assert [i["call_id"] for i in archived if i["type"] == "function_call"] == ["t1"]
    assert "Make one.txt" in user_texts(archived)
    current = history(s, thread)["items"]
    assert any("Summary: one.txt was written." in u for u in user_texts(current))
    assert "Now say done" in user_texts(current)
    # The /compact command and the notes Claude Code writes around it are not user turns.
    [row] = json.loads(ctxd_sessions(s, "json"))
    assert row["turns"] == 2 and row["compactions"] == 1
    labels = [snap["message"] for snap in s.client.request("ctxd/ghost/list", {"workspace": s.uri})["snapshots"]]
    assert not [label for label in labels if label.startswith("<")], labels
