"""End-to-end tests of the spine: the real daemon, over stdio, driven by a real JSON-RPC client."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import assistant, call, output, user
from tests.rpc import Client, RpcError, daemon_env, start_daemon

METHODS = {"ctxd/record", "ctxd/reportTokenUsage", "ctxd/setPromptContext", "ctxd/usage", "ctxd/prompt",
           "ctxd/rollback", "ctxd/history", "ctxd/threads", "ctxd/undo"}


def rec(client: Client, ws: Path, items: list[dict[str, Any]], thread: str = "default") -> dict[str, Any]:
    return client.request("ctxd/record", {"workspace": ws.as_uri(), "thread": thread, "items": items})


def history(client: Client, ws: Path, thread: str = "default", **extra: Any) -> dict[str, Any]:
    return client.request("ctxd/history", {"workspace": ws.as_uri(), "thread": thread, **extra})


@pytest.fixture(params=["stdio", "tcp"])
def transport(request: pytest.FixtureRequest) -> str:
    """Every test in this file runs over both transports (as pygls' own end-to-end tests do)."""
    return request.param


def test_initialize_advertises_ctxd(daemon_factory: Callable[..., Client], workspace: Path) -> None:
    client = daemon_factory(initialize=False)
    result = client.initialize([workspace])
    ctxd = result["capabilities"]["experimental"]["ctxd"]
    assert ctxd["protocolVersion"] == 4
    assert METHODS <= set(ctxd["methods"])
    assert result["serverInfo"]["name"] == "ctxd"
    # Each agent's name as its users know it, from its module: the editors show this one, no name of their own.
    assert ctxd["agents"] == {"codex": "Codex", "claude": "Claude Code", "qwen": "Qwen Code", "gemini": "Gemini CLI",
                              "opencode": "OpenCode"}


def test_record_prompt_history_threads(client: Client, workspace: Path) -> None:
    first = rec(client, workspace, [user("fix the bug"), call("c1"), output("c1", "done"), assistant("fixed")])
    assert first["itemCount"] == 4 and first["historyVersion"] == 0
    assert first["usage"]["source"] == "estimate" and first["usage"]["usedTokens"] > 0
    stored = history(client, workspace)
    assert stored["total"] == 4 and stored["items"][0] == user("fix the bug")
    assert history(client, workspace, offset=1, limit=2)["items"] == [call("c1"), output("c1", "done")]
    prompt = client.request("ctxd/prompt", {"workspace": workspace.as_uri()})
    assert len(prompt["items"]) == 4 and prompt["reinjectContext"] is True
    threads = client.request("ctxd/threads", {"workspace": workspace.as_uri()})["threads"]
    assert [(t["thread"], t["itemCount"]) for t in threads] == [("default", 4)]


def test_threads_are_listed_most_recently_written_first(client: Client, workspace: Path) -> None:
    """A run of records to one thread may leave its `updatedAt` a moment old (Store.append), but
    never out of order: a record to another thread in between always counts."""
    order = ["a", "b", "a", "c", "a", "a", "b"]
    for thread in order:
        rec(client, workspace, [assistant(f"to {thread}")], thread=thread)
    threads = client.request("ctxd/threads", {"workspace": workspace.as_uri()})["threads"]
    assert [t["thread"] for t in threads] == ["b", "a", "c"]
    assert {t["thread"]: t["itemCount"] for t in threads} == {"a": 4, "b": 2, "c": 1}
    times = [t["updatedAt"] for t in threads]
    assert times == sorted(times, reverse=True)


def test_extra_fields_are_kept_and_system_messages_are_not_recorded(client: Client, workspace: Path) -> None:
    item = {**assistant("hi"), "id": "msg_123", "status": "completed", "x_vendor": {"nested": [1, 2]}}
    system = {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "be nice"}]}
    assert rec(client, workspace, [system, item])["itemCount"] == 1
    assert history(client, workspace)["items"] == [item]


@pytest.mark.parametrize("items, fragment", [
    ([user("ok"), {"type": "bogus"}], "items[1]: unknown item type 'bogus'"),
    ([user("ok"), {"type": "function_call", "name": "x", "arguments": "{}"}], "items[1] (function_call): missing required field 'call_id'"),
    ([{"type": "message", "role": "user", "content": [{"type": "input_text", "text": 5}]}], "items[0] (message): content.0.text"),
    ([user("ok"), "not an object"], "items[1]: must be an object"),
])
def test_bad_items_are_refused_and_nothing_is_recorded(client: Client, workspace: Path, items: list[Any], fragment: str) -> None:
    rec(client, workspace, [user("before")])
    with pytest.raises(RpcError) as error:
        rec(client, workspace, items)
    assert error.value.code == -32602 and fragment in error.value.message
    assert history(client, workspace)["total"] == 1


@pytest.mark.parametrize("method, params, fragment", [
    ("ctxd/record", {"items": []}, "workspace"),
    ("ctxd/record", {"workspace": "file:///not/open", "items": []}, "not an open workspace"),
    ("ctxd/record", {"workspace": "https://example.com/x", "items": []}, "not an open workspace"),
    ("ctxd/record", {"workspace": "WS", "items": "nope"}, "items"),
    ("ctxd/rollback", {"workspace": "WS", "turns": 0}, "turns"),
    ("ctxd/rollback", {"workspace": "WS", "turns": "2"}, "turns"),
    ("ctxd/rollback", {"workspace": "WS"}, "turns"),
    ("ctxd/reportTokenUsage", {"workspace": "WS", "usage": {"inputTokens": -1, "totalTokens": 5}}, "inputTokens"),
    ("ctxd/history", {"workspace": "WS", "limit": -1}, "limit"),
    ("ctxd/prompt", {"workspace": "WS", "inputModalities": ["smell"]}, "inputModalities"),
    ("ctxd/usage", {"workspace": "WS", "thread": ""}, "thread"),
    ("ctxd/usage", [1, 2], "params"),
])
def test_bad_params_get_invalid_params(client: Client, workspace: Path, method: str, params: Any, fragment: str) -> None:
    if isinstance(params, dict) and params.get("workspace") == "WS":
        params = {**params, "workspace": workspace.as_uri()}
    with pytest.raises(RpcError) as error:
        client.request(method, params)
    assert error.value.code == -32602
    assert fragment in error.value.message


def test_lifecycle_errors(daemon_factory: Callable[..., Client], workspace: Path, transport: str) -> None:
    client = daemon_factory(initialize=False)
    with pytest.raises(RpcError) as error:
        client.request("ctxd/usage", {"workspace": workspace.as_uri()})
    if transport == "tcp":  # over TCP the first message must be the authenticated initialize
        assert error.value.code == -32600 and "authToken" in error.value.message
        client = daemon_factory(initialize=False)
    else:
        assert error.value.code == -32002
    client.initialize([workspace])
    with pytest.raises(RpcError) as error:
        client.request("no/such/method", {})
    assert error.value.code == -32601
    client.request("shutdown")
    with pytest.raises(RpcError) as error:
        client.request("ctxd/usage", {"workspace": workspace.as_uri()})
    assert error.value.code == -32600
    client.notify("exit")
    assert client.proc.wait(10) == 0


def test_tool_outputs_are_middle_truncated(daemon_factory: Callable[..., Client], workspace: Path) -> None:
    client = daemon_factory([workspace], options={"toolOutputTokenLimit": 10})
    long_text = "this is an example of a long output that should be truncated\nalso some other line"
    emoji = "😀😀😀😀😀😀😀😀😀😀\nsecond line with text\n"
    custom = {"type": "custom_tool_call_output", "call_id": "k", "output": emoji * 3}
    rec(client, workspace, [user(long_text), call("a"), output("a", long_text), assistant(long_text),
                            {"type": "custom_tool_call", "call_id": "k", "name": "apply_patch", "input": "x"}, custom])
    items = history(client, workspace)["items"]
    assert items[0] == user(long_text) and items[3] == assistant(long_text)
    # Codex records with 1.2x the limit (12 tokens here), so that a client's own truncation survives.
    assert items[2]["output"] == "this is an example of a …9 tokens truncated…ted\nalso some other line"
    assert items[5]["output"] == "😀😀😀😀😀😀…36 tokens truncated…\nsecond line with text\n"


def test_projection_invariants(client: Client, workspace: Path) -> None:
    ghost = {"type": "ghost_snapshot", "ghost_commit": {"id": "0" * 40, "parent": None}}
    image = {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "see"}, {"type": "input_image", "image_url": "data:image/png;base64,iVBOR"}]}
    rec(client, workspace, [user("start"), call("a"), ghost, image, output("zzz", "orphan"), call("b"), output("b")])
    prompt = client.request("ctxd/prompt", {"workspace": workspace.as_uri(), "inputModalities": ["text"]})
    items = prompt["items"]
    assert [i["type"] for i in items] == ["message", "function_call", "function_call_output", "message",
                                          "function_call", "function_call_output"]
    assert items[2] == {"type": "function_call_output", "call_id": "a", "output": "aborted"}
    assert all(part["type"] == "input_text" for part in items[3]["content"])
    calls = {i["call_id"] for i in items if i["type"] == "function_call"}
    assert {i["call_id"] for i in items if i["type"] == "function_call_output"} == calls
    assert history(client, workspace)["total"] == 7  # the stored ledger is untouched


def test_rollback_and_reference_baseline(client: Client, workspace: Path) -> None:
    ws = workspace.as_uri()
    rec(client, workspace, [user("<environment_context>cwd=/x</environment_context>"), user("one"), assistant("1")])
    client.request("ctxd/setPromptContext", {"workspace": ws, "baseInstructions": "You are a helpful agent."})
    assert client.request("ctxd/prompt", {"workspace": ws})["reinjectContext"] is False
    rec(client, workspace, [user("two"), call("c"), output("c"), assistant("2"), user("three"), assistant("3")])
    result = client.request("ctxd/rollback", {"workspace": ws, "turns": 2})
    assert result["removedItems"] == 6 and result["historyVersion"] == 1
    assert history(client, workspace)["items"][-1] == assistant("1")
    assert client.request("ctxd/prompt", {"workspace": ws})["reinjectContext"] is False  # baseline intact
    result = client.request("ctxd/rollback", {"workspace": ws, "turns": 5})
    assert result["removedItems"] == 2  # the injected context stays; every user turn goes
    assert client.request("ctxd/prompt", {"workspace": ws})["reinjectContext"] is True


def test_usage_baseline_from_api(client: Client, workspace: Path) -> None:
    ws = workspace.as_uri()
    rec(client, workspace, [user("hello")])
    snap = client.request("ctxd/reportTokenUsage", {"workspace": ws, "usage": {
        "inputTokens": 900, "cachedInputTokens": 100, "outputTokens": 100, "totalTokens": 1000}})
    assert snap["usedTokens"] == 1000 and snap["source"] == "api"
    after = rec(client, workspace, [assistant(" ".join(f"word{i}" for i in range(100)))])["usage"]
    assert after["source"] == "api+estimate" and after["usedTokens"] > 1100
    usage = client.request("ctxd/usage", {"workspace": ws})["usage"]
    assert usage["usedTokens"] == after["usedTokens"]
    assert usage["contextWindow"] == 128000 and usage["autoCompactLimit"] == 115200 and usage["tier"] == "ok"


def test_tiers(daemon_factory: Callable[..., Client], workspace: Path) -> None:
    client = daemon_factory([workspace], options={"contextWindow": 1000, "autoCompactTokenLimit": 0})
    ws = workspace.as_uri()
    report = lambda total: client.request("ctxd/reportTokenUsage", {"workspace": ws, "thread": "t", "usage": {"inputTokens": total, "totalTokens": total}})  # noqa: E731 - a one-line helper, named for the reader
    assert report(100)["tier"] == "ok" and report(850)["tier"] == "warn"
    client.request("ctxd/setPromptContext", {"workspace": ws, "thread": "t2", "contextWindow": 1000})
    client2 = daemon_factory([workspace], options={"contextWindow": 1000})
    snap = client2.request("ctxd/reportTokenUsage", {"workspace": ws, "usage": {"inputTokens": 0, "totalTokens": 720}})
    assert snap["tier"] == "warn" and snap["autoCompactLimit"] == 900
    snap = client2.request("ctxd/reportTokenUsage", {"workspace": ws, "usage": {"inputTokens": 0, "totalTokens": 900}})
    assert snap["tier"] == "compact"


def test_threads_are_isolated(client: Client, workspace: Path) -> None:
    rec(client, workspace, [user("a")], thread="one")
    rec(client, workspace, [user("b"), user("c")], thread="two")
    assert history(client, workspace, thread="one")["items"] == [user("a")]
    assert history(client, workspace, thread="two")["total"] == 2
    names = {t["thread"]: t["itemCount"] for t in client.request("ctxd/threads", {"workspace": workspace.as_uri()})["threads"]}
    assert names == {"one": 1, "two": 2}


def test_restart_and_kill_9_keep_every_acknowledged_item(daemon_factory: Callable[..., Client], workspace: Path) -> None:
    client = daemon_factory([workspace])
    for i in range(20):
        rec(client, workspace, [user(f"message {i}"), assistant(f"answer {i}")])
    client.shutdown()
    client = daemon_factory([workspace])
    assert history(client, workspace)["total"] == 40
    acknowledged = 40
    for i in range(30):
        rec(client, workspace, [user(f"more {i}")])
        acknowledged += 1
    client.kill()
    client = daemon_factory([workspace])
    items = history(client, workspace)["items"]
    assert len(items) == acknowledged and items[-1] == user("more 29")


def test_usage_changed_is_throttled_and_the_last_value_arrives(client: Client, workspace: Path) -> None:
    start = time.monotonic()
    last = None
    for i in range(60):
        last = rec(client, workspace, [user(f"m{i}")])["usage"]
    elapsed = time.monotonic() - start
    final = client.wait_for_notification("ctxd/usageChanged", lambda p: p["usedTokens"] == last["usedTokens"], timeout=5)
    assert final["workspace"] == workspace.as_uri() and final["thread"] == "default"
    notes = client.notes("ctxd/usageChanged")
    assert len(notes) <= elapsed / 0.1 + 3
    assert notes[-1]["usedTokens"] == last["usedTokens"]


def test_workspace_folders_change(client: Client, workspace: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(RpcError):
        rec(client, other, [user("x")])
    client.notify("workspace/didChangeWorkspaceFolders", {"event": {
        "added": [{"uri": other.as_uri(), "name": "other"}], "removed": [{"uri": workspace.as_uri(), "name": "ws"}]}})
    deadline = time.monotonic() + 10
    while True:
        try:
            rec(client, other, [user("x")])
            break
        except RpcError:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    with pytest.raises(RpcError) as error:
        rec(client, workspace, [user("x")])
    assert error.value.code == -32602


def test_two_daemons_on_one_workspace_lose_nothing(daemon_factory: Callable[..., Client], workspace: Path) -> None:
    a, b = daemon_factory([workspace]), daemon_factory([workspace])
    pending = []
    for i in range(50):
        pending.append((a, a.request_async("ctxd/record", {"workspace": workspace.as_uri(), "items": [user(f"a{i}")]})))
        pending.append((b, b.request_async("ctxd/record", {"workspace": workspace.as_uri(), "items": [user(f"b{i}")]})))
        pending.append((b, b.request_async("ctxd/record", {"workspace": workspace.as_uri(), "thread": "b", "items": [user(f"b{i}")]})))
    for client, msg_id in pending:
        client.result(msg_id)
    texts = [i["content"][0]["text"] for i in history(a, workspace)["items"]]
    assert sorted(texts) == sorted([f"a{i}" for i in range(50)] + [f"b{i}" for i in range(50)])
    assert [t for t in texts if t.startswith("a")] == [f"a{i}" for i in range(50)]  # each daemon's order kept
    assert history(b, workspace)["total"] == 100 and history(a, workspace, thread="b")["total"] == 50


def test_a_gauge_sees_another_daemons_record_at_once(daemon_factory: Callable[..., Client], workspace: Path) -> None:
    """The gauge (answered from memory) asks whether another process wrote; it skips asking
    SQLite while the -shm header is unchanged, so every write of the other daemon must show."""
    a, b = daemon_factory([workspace]), daemon_factory([workspace])
    uri = workspace.as_uri()

    def used(client: Client) -> int:
        return client.request("ctxd/usage", {"workspace": uri})["usage"]["usedTokens"]

    a.request("ctxd/record", {"workspace": uri, "items": [user("start")]})
    before = used(a)
    for i in range(20):
        writer = b if i % 3 else a  # the other daemon's writes, and a few of a's own among them
        writer.request("ctxd/record", {"workspace": uri, "items": [user(f"item {i} " + "word " * i)]})
        assert used(a) == used(b) > before, i
        assert used(a) == used(a)  # asked again with nothing written: the same answer
        before = used(a)


def test_stdio_flag(state_dir: Path, workspace: Path) -> None:
    client = start_daemon(state_dir, "--stdio")
    try:
        client.initialize([workspace])
        assert rec(client, workspace, [user("hi")])["itemCount"] == 1
    finally:
        client.shutdown()


def test_version_and_logs_stay_off_stdout(state_dir: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "ctxd", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("ctxd ")
    proc = subprocess.run([sys.executable, "-m", "ctxd", "-v"], input=b"", capture_output=True, env=daemon_env(state_dir), timeout=30)
    assert proc.stdout == b""
