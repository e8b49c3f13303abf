"""How a followed Codex / Claude Code session is shown (issue #26 "Followed sessions, shown as they
are"; issue #31 windows): the session's window and its agent's compaction point, the overhead its
files state or imply, and the agent's own compactions. Real daemon, session files as the agents
write them (tests/session_fixtures.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests import session_fixtures as fx
from tests.rpc import RpcError
from tests.test_sessions_e2e import CLAUDE_THREAD, CODEX_THREAD, homes, wait_thread

# The editor's `contextWindow` setting, which must not reach a followed session.
EDITOR_OPTIONS = {"contextWindow": 128_000}


def _claude_session(cwd: Path, model: str) -> list[dict[str, Any]]:
    return [{**line, "message": {**line["message"], "model": model}} if line.get("type") == "assistant" else line
            for line in fx.claude_session(cwd)]


def _codex_session(cwd: Path, model: str, window: int, meta: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    head = fx.codex_meta(cwd)
    head["payload"].update(meta or {})
    t = "2025-10-03T10:00:0{}.000Z".format
    return [head, *fx.codex_turn("Fix the failing test in parser.py please", t(2), model=model, cwd=str(cwd)),
            *fx.codex_tool_round("call_1", "pytest -q", "1 failed", t(3)),
            fx.codex_token_count(9_000, {"input_tokens": 8_700, "cached_input_tokens": 4_350, "output_tokens": 300,
                                         "reasoning_output_tokens": 128, "total_tokens": 9_000}, t(4), window=window)]


def _history(client, ws: Path, thread: str) -> dict[str, Any]:
    return client.request("ctxd/history", {"workspace": ws.as_uri(), "thread": thread, "includeArchived": True})


def test_a_followed_session_has_its_own_window_and_its_agents_compaction_point(daemon_factory, workspace: Path,
                                                                               tmp_path: Path) -> None:
    codex_home, claude_home, env = homes(tmp_path)
    fx.write_jsonl(fx.claude_path(claude_home, workspace), _claude_session(workspace, "claude-opus-4-7"))
    fx.write_jsonl(fx.codex_path(codex_home), _codex_session(workspace, "gpt-5.5", 258_400))
    client = daemon_factory([workspace], EDITOR_OPTIONS, env=env)
    claude = wait_thread(client, workspace, CLAUDE_THREAD)["usage"]
    # Opus 4.7 has 1,000,000 tokens in Claude Code, which compacts 20,000 (output) + 13,000 before it.
    assert (claude["contextWindow"], claude["autoCompactLimit"]) == (1_000_000, 967_000)
    assert claude["percent"] == round(100 * claude["usedTokens"] / 1_000_000, 1)
    codex = wait_thread(client, workspace, CODEX_THREAD, lambda t: t["usage"]["usedTokens"] == 9_000)["usage"]
    # The window the rollout states; Codex compacts at 90% of gpt-5.5's 272,000 (its models.json).
    assert (codex["contextWindow"], codex["autoCompactLimit"]) == (258_400, 244_800)
    breakdown = client.request("ctxd/usage", {"workspace": workspace.as_uri(), "thread": CLAUDE_THREAD})
    assert breakdown["contextWindow"] == 1_000_000 and "Claude Code 2.1.332" in breakdown["limitSource"]


def test_the_agents_own_settings_and_tiers(daemon_factory, workspace: Path, tmp_path: Path) -> None:
    codex_home, claude_home, env = homes(tmp_path)
    codex_home.mkdir(parents=True)
    (codex_home / "config.toml").write_text("model_auto_compact_token_limit = 8000\n")
    fx.write_jsonl(fx.claude_path(claude_home, workspace), fx.claude_session(workspace))  # Sonnet 4.5: 200k
    fx.write_jsonl(fx.codex_path(codex_home), _codex_session(workspace, "gpt-5.5", 258_400))
    client = daemon_factory([workspace], EDITOR_OPTIONS, env=env)
    claude = wait_thread(client, workspace, CLAUDE_THREAD)["usage"]
    assert (claude["contextWindow"], claude["autoCompactLimit"], claude["tier"]) == (200_000, 167_000, "ok")
    codex = wait_thread(client, workspace, CODEX_THREAD, lambda t: t["usage"]["usedTokens"] == 9_000)["usage"]
    # Codex's configured limit, and past it the compact tier (ctxd's 90% rule would say ok).
    assert (codex["autoCompactLimit"], codex["tier"]) == (8_000, "compact")


def test_the_breakdown_shows_the_overhead_the_files_state_and_imply(daemon_factory, workspace: Path,
                                                                    tmp_path: Path) -> None:
    codex_home, claude_home, env = homes(tmp_path)
    fx.write_jsonl(fx.claude_path(claude_home, workspace), fx.claude_session(workspace))
    tool = {"name": "lookup_ticket", "description": "Find a ticket", "input_schema": {
        "type": "object", "properties": {"id": {"type": "string", "description": "the ticket's id " * 20}}}}
    meta = {"base_instructions": {"text": "You are Codex, a coding agent. " * 200}, "dynamic_tools": [tool]}
    fx.write_jsonl(fx.codex_path(codex_home), _codex_session(workspace, "gpt-5.5", 258_400, meta))
    client = daemon_factory([workspace], env=env)
    uri = workspace.as_uri()
    wait_thread(client, workspace, CLAUDE_THREAD)
    wait_thread(client, workspace, CODEX_THREAD, lambda t: t["usage"]["usedTokens"] == 9_000)

    claude = client.request("ctxd/usage", {"workspace": uri, "thread": CLAUDE_THREAD})
    rows = {c["name"]: c for c in claude["categories"]}
    # The first request reported 15,004 tokens of input for one short prompt: the rest is Claude
    # Code's own tools, system prompt and memory, labelled as inferred, its tools apart as its own
    # /context shows them (issue #40: "Built-in tools 0" before), 62.5% of the two.
    inferred = rows["systemPrompt"]["tokens"] + rows["builtinTools"]["tokens"]
    assert inferred > 14_900
    assert abs(rows["builtinTools"]["tokens"] - inferred * 0.625) <= 1
    assert [d["name"] for d in rows["builtinTools"]["details"]] == ["Claude Code's built-in tools (inferred)"]
    assert [d["name"] for d in rows["systemPrompt"]["details"]] == [
        "Claude Code's system prompt and memory (inferred)"]
    assert "first request's reported input" in claude["inferred"]["systemPrompt"]
    assert "62.5% tools" in claude["inferred"]["builtinTools"]
    assert sum(rows[c]["tokens"] for c in rows if c not in ("freeSpace", "autocompactBuffer")) == \
        claude["usage"]["usedTokens"]

    codex = client.request("ctxd/usage", {"workspace": uri, "thread": CODEX_THREAD})
    rows = {c["name"]: c for c in codex["categories"]}
    assert rows["systemPrompt"]["tokens"] > 1_000  # the base instructions the meta line states
    tools = {d["name"] for d in rows["builtinTools"]["details"]}
    assert "lookup_ticket" in tools and "Codex's built-in tools and instructions (inferred)" in tools
    assert set(codex["inferred"]) == {"builtinTools"}


def test_the_compactions_list_each_agent_compaction_with_its_fill(daemon_factory, workspace: Path,
                                                                   tmp_path: Path) -> None:
    codex_home, claude_home, env = homes(tmp_path)
    claude_file = fx.write_jsonl(fx.claude_path(claude_home, workspace), fx.claude_session(workspace))
    codex_file = fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(workspace))
    client = daemon_factory([workspace], env=env)
    uri = workspace.as_uri()
    wait_thread(client, workspace, CLAUDE_THREAD)
    wait_thread(client, workspace, CODEX_THREAD, lambda t: t["usage"]["usedTokens"] == 12_000)
    # Found, not compacted: no compaction is listed.
    assert _history(client, workspace, CLAUDE_THREAD)["compactions"] == []
    assert _history(client, workspace, CODEX_THREAD)["compactions"] == []

    seen = len(client.notifications)
    fx.append_jsonl(claude_file, fx.claude_compact("c1", "a2", workspace, "2025-10-03T11:05:00.000Z", "We added it."))
    client.wait_for_notification("ctxd/threadsChanged", lambda p: p["workspace"] == uri
                                 and CLAUDE_THREAD in p.get("threads", [CLAUDE_THREAD]), timeout=10, after=seen)
    [compaction] = _history(client, workspace, CLAUDE_THREAD)["compactions"]
    assert {k: compaction[k] for k in ("strategy", "automatic", "tokensBefore", "tokensAfter", "archivedItems")} == {
        "strategy": "claude", "automatic": False, "tokensBefore": 15_546, "tokensAfter": None, "archivedItems": 6}
    # The next request reports the fill after it.
    fx.append_jsonl(claude_file, fx.claude_assistant([{"type": "text", "text": "Done."}], "msg_03", "a3", "c1-s",
                                                     workspace, "2025-10-03T11:06:00.000Z",
                                                     fx.claude_usage(5, 2_000, 1_000, 10)))
    _wait(lambda: _history(client, workspace, CLAUDE_THREAD)["compactions"][0]["tokensAfter"] == 3_015)  # the fill rule: input, cache and reply

    seen = len(client.notifications)
    fx.append_jsonl(codex_file, fx.codex_compacted("Summary of the work so far.", "2025-10-03T10:01:00.000Z"))
    client.wait_for_notification("ctxd/threadsChanged", lambda p: p["workspace"] == uri
                                 and CODEX_THREAD in p.get("threads", [CODEX_THREAD]), timeout=10, after=seen)
    [compaction] = _history(client, workspace, CODEX_THREAD)["compactions"]
    assert (compaction["strategy"], compaction["tokensBefore"], compaction["tokensAfter"]) == ("codex", 12_000, None)
    fx.append_jsonl(codex_file, [fx.codex_token_count(4_000, {"input_tokens": 24_100, "cached_input_tokens": 10_200,
                                                             "output_tokens": 900, "reasoning_output_tokens": 256,
                                                             "total_tokens": 25_000}, "2025-10-03T10:02:00.000Z")])
    _wait(lambda: _history(client, workspace, CODEX_THREAD)["compactions"][0]["tokensAfter"] == 4_000)


def test_a_session_compacted_before_ctxd_saw_it_lists_that_compaction_once(daemon_factory, workspace: Path,
                                                                            tmp_path: Path) -> None:
    codex_home, claude_home, env = homes(tmp_path)
    lines = fx.claude_session(workspace) + fx.claude_compact("c1", "a2", workspace, "2025-10-03T11:05:00.000Z", "S.")
    fx.write_jsonl(fx.claude_path(claude_home, workspace), lines)
    client = daemon_factory([workspace], env=env)
    wait_thread(client, workspace, CLAUDE_THREAD)
    history = _history(client, workspace, CLAUDE_THREAD)
    [compaction] = history["compactions"]
    assert (compaction["strategy"], compaction["tokensBefore"]) == ("claude", 15_546)
    # It is one of the thread's history operations (ctxd/ledger/operations.py), in effect, and the
    # agent's: undoing it here is refused and changes nothing.
    [operation] = history["operations"]
    assert (operation["id"], operation["kind"]) == (compaction["id"], "compaction")
    assert "undoneBy" not in operation and "undoneBy" not in compaction
    with pytest.raises(RpcError) as caught:
        client.request("ctxd/undo", {"workspace": workspace.as_uri(), "thread": CLAUDE_THREAD, "id": operation["id"]})
    assert caught.value.code == -32602
    assert _history(client, workspace, CLAUDE_THREAD)["historyVersion"] == history["historyVersion"]
    client.shutdown(timeout=5)
    again = daemon_factory([workspace], env=env)  # the same file read again: nothing new to list
    wait_thread(again, workspace, CLAUDE_THREAD)
    assert len(_history(again, workspace, CLAUDE_THREAD)["compactions"]) == 1


def _wait(check, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.05)


def test_an_unknown_model_is_said_to_be_unknown_not_guessed(daemon_factory, workspace: Path) -> None:
    client = daemon_factory([workspace])
    uri = workspace.as_uri()
    # Once a 200k Claude model by the prefix "claude"; now unknown, and the breakdown says so.
    client.request("ctxd/setPromptContext", {"workspace": uri, "model": "claude-opus-9"})
    unknown = client.request("ctxd/usage", {"workspace": uri})
    assert unknown["contextWindow"] == 128_000
    assert "model 'claude-opus-9' is not in ctxd's catalogue" in unknown["limitSource"]
    # Written as the agents write it, a known model is found, and nothing needs saying.
    client.request("ctxd/setPromptContext", {"workspace": uri, "model": "us.anthropic.claude-opus-4-7-v1:0"})
    known = client.request("ctxd/usage", {"workspace": uri})
    assert known["contextWindow"] == 1_000_000 and "limitSource" not in known


def test_ctxd_usage_without_a_thread_shows_the_newest_session(daemon_factory, workspace: Path, tmp_path: Path,
                                                              state_dir: Path) -> None:
    """In a folder of followed sessions (no thread "default"), `ctxd usage` shows the most recently
    active one, as the editors' gauge does (issue #38: it exited 1 with "no thread 'default'")."""
    import json
    import subprocess
    import sys

    from tests.rpc import REPO, daemon_env

    codex_home, claude_home, env = homes(tmp_path)
    fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(workspace))  # 2025-10-03 10:00
    fx.write_jsonl(fx.claude_path(claude_home, workspace), fx.claude_session(workspace))  # 11:00: the newest
    client = daemon_factory([workspace], env=env)
    wait_thread(client, workspace, CODEX_THREAD, lambda t: t["usage"]["usedTokens"] == 12_000)
    newest = wait_thread(client, workspace, CLAUDE_THREAD)["usage"]["usedTokens"]
    client.shutdown()
    run = subprocess.run([sys.executable, "-m", "ctxd", "usage", "--workspace", str(workspace), "--format", "json"],
                         capture_output=True, text=True, env=daemon_env(state_dir, env), cwd=str(REPO), timeout=60)
    assert run.returncode == 0, run.stderr
    breakdown = json.loads(run.stdout)
    assert breakdown["usage"]["usedTokens"] == newest == 15_546
    assert breakdown["model"] == "claude-sonnet-4-5-20250929"


def test_threads_changed_names_the_threads_and_threads_lists_only_those(daemon_factory, workspace: Path,
                                                                        tmp_path: Path) -> None:
    """`ctxd/threadsChanged` says which threads changed, and `ctxd/threads` with `threads` lists
    only those (v4): an editor reads again what changed, not every thread (issue #38)."""
    codex_home, claude_home, env = homes(tmp_path)
    fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(workspace))
    claude_file = fx.write_jsonl(fx.claude_path(claude_home, workspace), fx.claude_session(workspace))
    client = daemon_factory([workspace], env=env)
    uri = workspace.as_uri()
    wait_thread(client, workspace, CODEX_THREAD, lambda t: t["usage"]["usedTokens"] == 12_000)
    seen = len(client.notifications)
    fx.append_jsonl(claude_file, fx.claude_compact("c1", "a2", workspace, "2025-10-03T11:05:00.000Z", "Done so far."))
    told = client.wait_for_notification("ctxd/threadsChanged", lambda p: p["workspace"] == uri, timeout=15, after=seen)
    assert told["threads"] == [CLAUDE_THREAD]
    only = client.request("ctxd/threads", {"workspace": uri, "threads": [CLAUDE_THREAD, "nope"]})["threads"]
    assert [t["thread"] for t in only] == [CLAUDE_THREAD]
    assert {t["thread"] for t in client.request("ctxd/threads", {"workspace": uri})["threads"]} == {
        CLAUDE_THREAD, CODEX_THREAD}


def test_a_cold_owner_lists_every_session_the_newest_first(daemon_factory, workspace: Path, tmp_path: Path) -> None:
    """Issue #38: an owner that finds sessions it never read lists them before it mirrors them,
    the newest at once (its gauge is the one shown) and the others in batches, one write each:
    each of 150 sessions is listed and named by a `ctxd/threadsChanged`, the newest alone first."""
    codex_home, _, env = homes(tmp_path)
    ids = [f"0199a213-0000-7800-8aa1-{n:012d}" for n in range(150)]
    for n, session_id in enumerate(ids):  # ids[-1] the newest
        path = fx.write_jsonl(fx.codex_path(codex_home, session_id), fx.codex_session(workspace, session_id))
        os.utime(path, (1_700_000_000 + n, 1_700_000_000 + n))
    client = daemon_factory([workspace], env=env)
    uri = workspace.as_uri()
    threads = {f"codex:{session_id}" for session_id in ids}
    deadline = time.monotonic() + 60
    while {t["thread"] for t in client.request("ctxd/threads", {"workspace": uri})["threads"]} != threads:
        assert time.monotonic() < deadline, "not every session was listed"
        time.sleep(0.1)
    named = [note["params"]["threads"] for note in list(client.notifications)
             if note["method"] == "ctxd/threadsChanged" and note["params"]["workspace"] == uri]
    assert next(names for names in named if threads & set(names)) == [f"codex:{ids[-1]}"]
    assert threads <= {thread for names in named for thread in names}


def test_a_model_of_another_tokenizer_mid_session_counts_the_followed_history_again(
        daemon_factory, workspace: Path, tmp_path: Path) -> None:
    """A Codex session whose second turn runs a model of another tokenizer family (the user's
    `/model`, a provider's Claude) is counted, gauge and breakdown, as the same session recorded
    under that model from its start: the items mirrored before the switch are counted again
    (they kept the first model's counts, under the new model's report rule)."""
    codex_home, _, env = homes(tmp_path)
    fresh_id = "0199a213-81c0-7800-8aa1-00000000f7e5"
    t = "2025-10-03T10:00:{:02d}.000Z".format
    answer = "Fixed: the tokenizer skipped blank lines, and `parse_header()` now keeps the trailing comment. " * 3

    def turn_one(session_id: str, model: str) -> list[dict[str, Any]]:
        return [fx.codex_meta(workspace, session_id),
                *fx.codex_turn("Fix the failing test in parser.py please", t(2), model=model, cwd=str(workspace)),
                *fx.codex_tool_round("call_1", "pytest -q", "1 failed: test_header (expected '# x')", t(3)),
                fx.codex_token_count(9_000, {"input_tokens": 8_700, "cached_input_tokens": 4_350, "output_tokens": 300,
                                             "reasoning_output_tokens": 128, "total_tokens": 9_000}, t(4)),
                fx.codex_answer(answer, t(5))]

    # The second turn: no report yet, so ctxd counts every item after the first one's report.
    turn_two = [*fx.codex_turn("Now document the header grammar in README.md", t(6), model="claude-sonnet-4-5",
                               cwd=str(workspace)),
                *fx.codex_tool_round("call_2", "sed -n 1,40p README.md", "# Parser\n\nReads headers. " * 20, t(7)),
                fx.codex_answer("Documented the grammar: `#` starts a comment, to the end of the line.", t(8))]
    moved = fx.write_jsonl(fx.codex_path(codex_home), turn_one(fx.CODEX_ID, "gpt-5.5"))
    client = daemon_factory([workspace], env=env)
    uri = workspace.as_uri()
    wait_thread(client, workspace, CODEX_THREAD, lambda t: t["usage"]["source"] == "api+estimate")
    fx.append_jsonl(moved, turn_two)  # live: the switch reaches a thread counted for gpt-5.5
    wait_thread(client, workspace, CODEX_THREAD, lambda t: t["model"] == "claude-sonnet-4-5")
    fx.write_jsonl(fx.codex_path(codex_home, fresh_id, day="2025/10/04"),
                   [*turn_one(fresh_id, "claude-sonnet-4-5"), *turn_two])
    wait_thread(client, workspace, f"codex:{fresh_id}", lambda t: t["model"] == "claude-sonnet-4-5")

    ours = client.request("ctxd/usage", {"workspace": uri, "thread": CODEX_THREAD})
    theirs = client.request("ctxd/usage", {"workspace": uri, "thread": f"codex:{fresh_id}"})
    assert ours["usage"]["tokenizer"] == theirs["usage"]["tokenizer"] == "estimate:claude"
    assert ours["usage"]["source"] == theirs["usage"]["source"] == "api+estimate"
    assert ours["usage"]["usedTokens"] == theirs["usage"]["usedTokens"]
    assert ours["categories"] == theirs["categories"]
