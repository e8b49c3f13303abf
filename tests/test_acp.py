"""`ctxd acp` (protocol v4, docs/acp.md) with real parts: the proxy as a subprocess, the scripted ACP
agent of tests/acp_agent.py behind it, the official ACP client library driving it from the editor's
side (tests/acp_client/client.mjs), and the owner (an editor's daemon) that records the session.
The reference for "unchanged" is the same client talking to the same agent without ctxd."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.agents import ACP_SDK, install_library
from tests.rpc import REPO, Client, RpcError, daemon_env

AGENT = [sys.executable, str(REPO / "tests" / "acp_agent.py")]
PROXY = [sys.executable, "-m", "ctxd", "acp", "--"]
CLIENT = REPO / "tests" / "acp_client" / "client.mjs"
RUN_SECONDS = 180


@pytest.fixture(scope="module")
def sdk() -> Path:
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the editor side is the ACP client library, run by node")
    return install_library(ACP_SDK)


@pytest.fixture
def repo(workspace: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    (workspace / "a.txt").write_text("before\n")
    return workspace


def run_client(sdk: Path, tmp: Path, scenario: dict[str, Any], command: list[str], env: dict[str, str]) -> dict[str, Any]:
    """One run of the ACP client library against `command`: what crossed the pipes, and how it ended."""
    path = tmp / f"scenario-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(scenario))
    done = subprocess.run(["node", str(CLIENT), str(path), "--", *command], env={**env, "ACP_SDK": str(sdk)},
                          capture_output=True, timeout=RUN_SECONDS, cwd=scenario["cwd"])
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    return dict(json.loads(done.stdout))


def agent_env(state_dir: Path, tmp: Path, name: str, **extra: str) -> dict[str, str]:
    log = tmp / f"{name}.agent.log"
    log.unlink(missing_ok=True)
    return daemon_env(state_dir, {"ACP_AGENT_LOG": str(log), **extra})


def received(tmp: Path, name: str) -> list[dict[str, Any]]:
    """What reached the agent, line by line."""
    return [json.loads(line) for line in (tmp / f"{name}.agent.log").read_text().splitlines() if line.strip()]


def ctxd_entries(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [server for m in messages if m.get("method") in ("session/new", "session/load")
            for server in m["params"].get("mcpServers", []) if server.get("name") == "ctxd"]


def without_ctxd_entry(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for message in messages:
        if message.get("method") in ("session/new", "session/load"):
            params = dict(message["params"])
            params["mcpServers"] = [s for s in params.get("mcpServers", []) if s.get("name") != "ctxd"]
            message = {**message, "params": params}
        out.append(message)
    return out


def ctxd_usage(message: dict[str, Any]) -> bool:
    update = (message.get("params") or {}).get("update") or {}
    return message.get("method") == "session/update" and "ctxd" in (update.get("_meta") or {})


def without_ctxd_meta(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The editor's side without what ctxd adds: `_meta.ctxd` on answers, its own usage_update."""
    out = []
    for message in messages:
        if ctxd_usage(message):
            continue
        result = message.get("result")
        if isinstance(result, dict) and "ctxd" in (result.get("_meta") or {}):
            meta = {k: v for k, v in result["_meta"].items() if k != "ctxd"}
            result = {k: v for k, v in result.items() if k != "_meta"} | ({"_meta": meta} if meta else {})
            message = {**message, "result": result}
        out.append(message)
    return out


def thread_of(client: Client, workspace: Path, thread: str) -> dict[str, Any] | None:
    listed = client.request("ctxd/threads", {"workspace": workspace.as_uri()})["threads"]
    return next((t for t in listed if t["thread"] == thread), None)


def wait_until(check: Callable[[], Any], timeout: float = 30.0) -> Any:
    """`check()`'s first true value; a hang only fails after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def history(client: Client, workspace: Path, thread: str) -> list[dict[str, Any]]:
    return list(client.request("ctxd/history", {"workspace": workspace.as_uri(), "thread": thread})["items"])


def test_every_message_passes_unchanged_both_ways_and_only_the_mcp_entry_is_added(
        sdk: Path, repo: Path, state_dir: Path, tmp_path: Path, client: Client) -> None:
    scenario = {"cwd": str(repo), "prompts": ["hello there", f"write {repo / 'a.txt'} after", "run make"],
                "allow": True}
    direct = run_client(sdk, tmp_path, scenario, AGENT, agent_env(state_dir, tmp_path, "direct", ACP_AGENT_USAGE="1"))
    (repo / "a.txt").write_text("before\n")
    proxied = run_client(sdk, tmp_path, scenario, PROXY + AGENT,
                         agent_env(state_dir, tmp_path, "proxied", ACP_AGENT_USAGE="1"))
    assert not direct["errors"] and not proxied["errors"]
    # what the agent received: the same messages in the same order, but for ctxd's MCP server
    assert without_ctxd_entry(received(tmp_path, "proxied")) == received(tmp_path, "direct")
    [entry] = ctxd_entries(received(tmp_path, "proxied"))
    assert os.path.isabs(entry["command"]) and entry["args"][-1] == "mcp"
    assert [e["name"] for e in entry["env"]] == ["CTXD_ACP_LINK"]
    # what the editor received: the same, but for `_meta.ctxd` (the agent reports usage: ctxd adds none)
    assert not any(ctxd_usage(m) for m in proxied["toEditor"])
    assert without_ctxd_meta(proxied["toEditor"]) == direct["toEditor"]
    assert proxied["toAgent"] == direct["toAgent"]  # the editor sent the same things
    assert proxied["results"]["initialize"]["_meta"]["ctxd"]["version"]
    assert proxied["results"]["sessionNew"]["_meta"]["ctxd"] == {"thread": "acp:sess-1", "workspace": repo.as_uri()}
    assert proxied["exit"] == direct["exit"] == {"code": 0, "signal": None}
    assert (repo / "a.txt").read_text() == "after"


def test_an_mcp_server_named_ctxd_already_there_is_left_alone(sdk: Path, repo: Path, state_dir: Path,
                                                              tmp_path: Path) -> None:
    theirs = {"name": "ctxd", "command": "/usr/bin/true", "args": [], "env": []}
    scenario = {"cwd": str(repo), "prompts": ["hi"], "mcpServers": [theirs]}
    run_client(sdk, tmp_path, scenario, PROXY + AGENT, agent_env(state_dir, tmp_path, "proxied"))
    assert ctxd_entries(received(tmp_path, "proxied")) == [theirs]


def test_the_session_is_a_read_only_thread_the_daemon_shows(sdk: Path, repo: Path, state_dir: Path,
                                                          tmp_path: Path, client: Client) -> None:
    scenario = {"cwd": str(repo), "prompts": ["hello there", f"write {repo / 'a.txt'} after"], "allow": True}
    run_client(sdk, tmp_path, scenario, PROXY + AGENT, agent_env(state_dir, tmp_path, "proxied"))
    info = wait_until(lambda: thread_of(client, repo, "acp:sess-1"))
    assert info is not None, "the ACP session is not among the workspace's threads"
    # the editor was told: a new thread, and checkpoints (as after a hook's)
    client.wait_for_notification("ctxd/threadsChanged", lambda p: p["workspace"] == repo.as_uri())
    client.wait_for_notification("ctxd/ghostChanged", lambda p: p["workspace"] == repo.as_uri())
    assert info["source"] == "acp" and info["readOnly"] is True and info["title"] == "hello there"
    items = wait_until(lambda: (lambda h: h if len(h) >= 6 else None)(history(client, repo, "acp:sess-1")))
    kinds = [(i["type"], i.get("role")) for i in items]
    assert kinds == [("message", "user"), ("message", "assistant"), ("message", "user"), ("function_call", None),
                     ("function_call_output", None), ("message", "assistant")]
    assert items[0]["content"][0]["text"] == "hello there"
    assert items[1]["content"][0]["text"] == "Echo: hello there"  # three chunks, one message
    call = items[3]
    assert call["title"] == "Write a.txt" and call["kind"] == "edit"
    assert call["locations"] == [{"path": str(repo / "a.txt")}]
    assert items[4]["call_id"] == call["call_id"] and items[4]["output"] == f"wrote {repo / 'a.txt'}"
    found = client.request("ctxd/recall", {"workspace": repo.as_uri(), "thread": "acp:sess-1", "query": "Echo"})
    assert found["total"] >= 1 and found["results"][0]["thread"] == "acp:sess-1"
    # an editor cannot write it, in any way
    with pytest.raises(RpcError) as refused:
        client.request("ctxd/record", {"workspace": repo.as_uri(), "thread": "acp:sess-1",
                                       "items": [{"type": "message", "role": "user", "content": []}]})
    assert refused.value.code == -32602
    with pytest.raises(RpcError) as refused:
        client.request("ctxd/acp/record", {"workspace": repo.as_uri(), "thread": "acp:sess-1", "items": []})
    assert refused.value.code == -32602 and "only a ctxd acp proxy" in refused.value.message
    with pytest.raises(RpcError) as refused:
        client.request("ctxd/acp/checkpoint", {"workspace": repo.as_uri(), "thread": "acp:sess-1", "trigger": "tool"})
    assert refused.value.code == -32602
    with pytest.raises(RpcError):
        client.request("ctxd/rollback", {"workspace": repo.as_uri(), "thread": "acp:sess-1", "turns": 1})
    assert len(history(client, repo, "acp:sess-1")) == 6


def test_only_a_session_opened_as_the_proxys_writes_acp_threads(repo: Path, state_dir: Path, client: Client) -> None:
    """The role travels on the owner's socket, which only ctxd's own processes (of this user) open."""
    from ctxd import ownerlink

    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "from the proxy"}]}
    params = {"workspace": repo.as_uri(), "thread": "acp:x", "items": [item]}
    plain = ownerlink.Session.open(state_dir / "ctxd", [repo])
    proxy = ownerlink.Session.open(state_dir / "ctxd", [repo], role="acp")
    assert plain is not None and proxy is not None
    try:
        with pytest.raises(ownerlink.RemoteError):
            plain.request("ctxd/acp/record", params, 30)
        assert proxy.request("ctxd/acp/record", params, 30)["itemCount"] == 1
        with pytest.raises(ownerlink.RemoteError):  # its own kind of thread only
            proxy.request("ctxd/acp/record", {**params, "thread": "default"}, 30)
    finally:
        plain.close()
        proxy.close()
    assert [i["content"][0]["text"] for i in history(client, repo, "acp:x")] == ["from the proxy"]


def test_a_model_of_another_tokenizer_counts_the_acp_history_again(repo: Path, state_dir: Path,
                                                                   client: Client) -> None:
    """An ACP session whose agent switches to a model of another tokenizer family (`session/set_model`)
    is counted as the same session recorded under that model from its start: the turns recorded
    before are counted again, not left with the first model's counts."""
    from ctxd import ownerlink

    def turn(n: int) -> list[dict[str, Any]]:
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"Step {n}: tidy parser.py"}]},
                {"type": "message", "role": "assistant", "content": [
                    {"type": "output_text", "text": f"Step {n} done: `parse_header()` keeps its comment. " * 8}]}]

    uri = repo.as_uri()
    proxy = ownerlink.Session.open(state_dir / "ctxd", [repo], role="acp")
    assert proxy is not None
    try:
        for thread, models in (("acp:moved", ("gpt-5.5", "claude-sonnet-4-5")), ("acp:fresh", ("claude-sonnet-4-5",) * 2)):
            for n, model in enumerate(models):
                proxy.request("ctxd/acp/record", {"workspace": uri, "thread": thread, "items": turn(n), "model": model}, 30)
    finally:
        proxy.close()
    ours, theirs = (client.request("ctxd/usage", {"workspace": uri, "thread": t}) for t in ("acp:moved", "acp:fresh"))
    assert ours["usage"]["tokenizer"] == theirs["usage"]["tokenizer"] == "estimate:claude"
    assert ours["usage"]["usedTokens"] == theirs["usage"]["usedTokens"]
    assert ours["categories"] == theirs["categories"]


def test_usage_the_agent_reports_is_the_threads_gauge(sdk: Path, repo: Path, state_dir: Path, tmp_path: Path,
                                                     client: Client) -> None:
    scenario = {"cwd": str(repo), "prompts": ["one", "two"]}
    run_client(sdk, tmp_path, scenario, PROXY + AGENT, agent_env(state_dir, tmp_path, "proxied", ACP_AGENT_USAGE="1"))
    usage = wait_until(lambda: (lambda t: t["usage"] if t and t["usage"]["usedTokens"] == 2000 else None)(
        thread_of(client, repo, "acp:sess-1")))
    assert usage is not None, thread_of(client, repo, "acp:sess-1")
    assert usage["contextWindow"] == 200000 and usage["source"] == "api"


def test_after_a_turn_without_usage_ctxd_sends_the_editor_its_own(sdk: Path, repo: Path, state_dir: Path,
                                                                 tmp_path: Path, client: Client) -> None:
    scenario = {"cwd": str(repo), "prompts": ["one", "two words"], "waitUsageMs": 30000}
    direct = run_client(sdk, tmp_path, scenario | {"waitUsageMs": 0}, AGENT, agent_env(state_dir, tmp_path, "direct"))
    proxied = run_client(sdk, tmp_path, scenario, PROXY + AGENT, agent_env(state_dir, tmp_path, "proxied"))
    assert not any(u["update"]["sessionUpdate"] == "usage_update" for u in direct["updates"])
    ours = [u["update"] for u in proxied["updates"] if u["update"]["sessionUpdate"] == "usage_update"]
    assert len(ours) == 2, ours
    assert 0 < ours[0]["used"] < ours[1]["used"]
    gauge = thread_of(client, repo, "acp:sess-1")
    assert gauge is not None
    assert ours[1]["used"] == gauge["usage"]["usedTokens"] and ours[1]["size"] == gauge["usage"]["contextWindow"]
    assert all(u["_meta"]["ctxd"]["thread"] == "acp:sess-1" for u in ours)
    assert without_ctxd_meta(proxied["toEditor"]) == direct["toEditor"]


class RawEditor:
    """An editor written out by hand, to stop between two messages of a turn."""

    def __init__(self, command: list[str], env: dict[str, str], cwd: Path) -> None:
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=str(cwd))
        self.messages: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.next_id = 0

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.messages.put(json.loads(line))
            except ValueError:
                self.messages.put({"notJson": line.decode(errors="replace")})
        self.messages.put(None)

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> int:
        self.next_id += 1
        self.send({"id": self.next_id, "method": method, "params": params})
        return self.next_id

    def wait(self, check: Callable[[dict[str, Any]], bool], timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            message = self.messages.get(timeout=max(0.01, deadline - time.monotonic()))
            assert message is not None, "the output ended"
            if check(message):
                return message

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(timeout=30)


def start_session(editor: RawEditor, cwd: Path) -> str:
    got = editor.request("initialize", {"protocolVersion": 1, "clientCapabilities": {"fs": {"writeTextFile": True}}})
    editor.wait(lambda m: m.get("id") == got)
    got = editor.request("session/new", {"cwd": str(cwd), "mcpServers": []})
    return str(editor.wait(lambda m: m.get("id") == got)["result"]["sessionId"])


def checkpoints(client: Client, workspace: Path) -> list[dict[str, Any]]:
    return list(client.request("ctxd/ghost/list", {"workspace": workspace.as_uri()})["snapshots"])


def test_checkpoints_exist_before_each_change_reaches_the_tree_and_restore_what_was_there(
        repo: Path, state_dir: Path, tmp_path: Path, client: Client) -> None:
    editor = RawEditor(PROXY + AGENT, agent_env(state_dir, tmp_path, "raw"), repo)
    try:
        session = start_session(editor, repo)
        editor.request("session/prompt", {"sessionId": session, "prompt": [
            {"type": "text", "text": f"write {repo / 'a.txt'} after"}]})
        asked = editor.wait(lambda m: m.get("method") == "session/request_permission")
        turn = [c for c in checkpoints(client, repo) if c["trigger"] == "turn"]
        assert [c["thread"] for c in turn] == ["acp:sess-1"], "no checkpoint before the turn went on"
        assert turn[0]["turn"]["index"] == 1 and turn[0]["turn"]["text"].startswith("write ")
        # recorded while the turn is still open (the agent waits for the permission)
        items = wait_until(lambda: (lambda h: h if len(h) >= 2 else None)(history(client, repo, "acp:sess-1")))
        assert [i["type"] for i in items] == ["message", "function_call"]
        editor.send({"id": asked["id"], "result": {"outcome": {"outcome": "selected", "optionId": "yes"}}})
        write = editor.wait(lambda m: m.get("method") == "fs/write_text_file")
        # the tree did not change since the turn's: that checkpoint serves (an identical tree adds no commit)
        assert [c["id"] for c in checkpoints(client, repo)] == [turn[0]["id"]]
        (repo / "a.txt").write_text(write["params"]["content"])  # the editor writes it
        editor.send({"id": write["id"], "result": {}})
        editor.wait(lambda m: m.get("result", {}).get("stopReason") == "end_turn" if "result" in m else False)
        assert (repo / "a.txt").read_text() == "after"
        before_write = checkpoints(client, repo)[0]
        client.request("ctxd/ghost/restore", {"workspace": repo.as_uri(), "id": before_write["id"]})
        assert (repo / "a.txt").read_text() == "before\n"
    finally:
        assert editor.close() == 0


def test_a_tool_checkpoint_is_a_new_commit_when_the_tree_changed_since_the_turn(
        repo: Path, state_dir: Path, tmp_path: Path, client: Client) -> None:
    editor = RawEditor(PROXY + AGENT, agent_env(state_dir, tmp_path, "raw"), repo)
    try:
        session = start_session(editor, repo)
        editor.request("session/prompt", {"sessionId": session, "prompt": [
            {"type": "text", "text": f"write {repo / 'a.txt'} after"}]})
        asked = editor.wait(lambda m: m.get("method") == "session/request_permission")
        (repo / "b.txt").write_text("made by the user meanwhile\n")
        editor.send({"id": asked["id"], "result": {"outcome": {"outcome": "selected", "optionId": "yes"}}})
        write = editor.wait(lambda m: m.get("method") == "fs/write_text_file")
        tools = [c for c in checkpoints(client, repo) if c["trigger"] == "tool"]
        assert [c["tool"]["name"] for c in tools] == ["edit"]  # the write's found the same tree: no new commit
        assert tools[0]["tool"]["callId"] == "call-1" and tools[0]["tool"]["paths"] == [str(repo / "a.txt")]
        (repo / "a.txt").write_text(write["params"]["content"])
        editor.send({"id": write["id"], "result": {}})
        editor.wait(lambda m: "result" in m and m["result"].get("stopReason") == "end_turn")
        client.request("ctxd/ghost/restore", {"workspace": repo.as_uri(), "id": tools[0]["id"]})
        assert (repo / "a.txt").read_text() == "before\n" and (repo / "b.txt").exists()
    finally:
        editor.close()


@pytest.mark.parametrize("prompt,kind", [("run make", "execute"), ("tool delete Delete old.txt", "delete"),
                                         ("tool move Move a.txt to b.txt", "move")])
def test_an_allowed_execute_delete_or_move_takes_a_tool_checkpoint_first(
        repo: Path, state_dir: Path, tmp_path: Path, client: Client, prompt: str, kind: str) -> None:
    """Every kind of tool call that may change the tree (not only an edit) is checkpointed before
    the agent hears it is allowed: the checkpoint holds the tree as it was then."""
    editor = RawEditor(PROXY + AGENT, agent_env(state_dir, tmp_path, "raw"), repo)
    try:
        session = start_session(editor, repo)
        editor.request("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": prompt}]})
        asked = editor.wait(lambda m: m.get("method") == "session/request_permission")
        (repo / "c.txt").write_text("changed before the tool ran\n")  # the tree moved on since the turn's
        editor.send({"id": asked["id"], "result": {"outcome": {"outcome": "selected", "optionId": "yes"}}})
        editor.wait(lambda m: "result" in m and m["result"].get("stopReason") == "end_turn")
        tools = [c for c in checkpoints(client, repo) if c["trigger"] == "tool"]
        assert [c["tool"]["name"] for c in tools] == [kind]
        (repo / "c.txt").write_text("the tool's change\n")
        client.request("ctxd/ghost/restore", {"workspace": repo.as_uri(), "id": tools[0]["id"]})
        assert (repo / "c.txt").read_text() == "changed before the tool ran\n"
    finally:
        editor.close()


def test_a_rejected_or_read_only_tool_takes_no_tool_checkpoint(repo: Path, state_dir: Path, tmp_path: Path,
                                                               client: Client) -> None:
    editor = RawEditor(PROXY + AGENT, agent_env(state_dir, tmp_path, "raw"), repo)
    try:
        session = start_session(editor, repo)
        editor.request("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "run make"}]})
        asked = editor.wait(lambda m: m.get("method") == "session/request_permission")
        (repo / "c.txt").write_text("changed\n")
        editor.send({"id": asked["id"], "result": {"outcome": {"outcome": "selected", "optionId": "no"}}})
        editor.wait(lambda m: "result" in m and m["result"].get("stopReason") == "end_turn")
        assert [c for c in checkpoints(client, repo) if c["trigger"] == "tool"] == []
    finally:
        editor.close()


def test_the_mcp_server_learns_its_session_before_the_editor_can_prompt(
        sdk: Path, repo: Path, state_dir: Path, tmp_path: Path) -> None:
    from ctxd import acplink

    links = tmp_path / "links.jsonl"
    scenario = {"cwd": str(repo), "prompts": ["one"], "load": True}
    proxied = run_client(sdk, tmp_path, scenario, PROXY + AGENT,
                         agent_env(state_dir, tmp_path, "proxied", ACP_AGENT_LINKS=str(links)))
    assert [json.loads(line) for line in links.read_text().splitlines()] == [{"session": "sess-1",
                                                                             "served": "acp:sess-1"}]
    entries = ctxd_entries(received(tmp_path, "proxied"))
    assert len(entries) == 2  # session/new and session/load each get one
    folder = Path(entries[0]["env"][0]["value"]).parent
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert list(folder.glob("*.json")) == [], "the proxy left its link files behind"
    assert proxied["exit"]["code"] == 0
    assert acplink.served_thread({}) is None


def test_a_link_file_that_is_not_the_users_alone_is_not_read(tmp_path: Path) -> None:
    from ctxd import acplink

    folder = tmp_path / "state" / "acp"
    folder.mkdir(parents=True, mode=0o700)
    link = folder / "1-1.json"
    acplink.write(link, "acp:abc", tmp_path)
    assert acplink.served_thread({acplink.ENV: str(link)}) == "acp:abc"
    os.chmod(folder, 0o777)
    assert acplink.served_thread({acplink.ENV: str(link)}) is None
    os.chmod(folder, 0o700)
    (folder / "2-1.json").symlink_to(link)
    assert acplink.served_thread({acplink.ENV: str(folder / "2-1.json")}) is None
    (folder / "3-1.json").write_text(json.dumps({"thread": "claude:other"}))
    assert acplink.served_thread({acplink.ENV: str(folder / "3-1.json")}) is None


def test_a_loaded_session_is_not_recorded_twice(sdk: Path, repo: Path, state_dir: Path, tmp_path: Path,
                                                client: Client) -> None:
    scenario = {"cwd": str(repo), "prompts": ["one", "two"], "load": True}
    proxied = run_client(sdk, tmp_path, scenario, PROXY + AGENT, agent_env(state_dir, tmp_path, "proxied"))
    assert "sessionLoad" in proxied["results"]
    replayed = [u for u in proxied["updates"] if u["update"]["sessionUpdate"] == "user_message_chunk"]
    assert len(replayed) == 2
    texts = [i["content"][0]["text"] for i in history(client, repo, "acp:sess-1") if i["type"] == "message"]
    assert texts == ["one", "Echo: one", "two", "Echo: two"]


def test_when_the_agent_dies_the_editor_sees_the_same_end(sdk: Path, repo: Path, state_dir: Path,
                                                          tmp_path: Path) -> None:
    scenario = {"cwd": str(repo), "prompts": ["hello", "die 3"]}
    direct = run_client(sdk, tmp_path, scenario, AGENT, agent_env(state_dir, tmp_path, "direct", ACP_AGENT_USAGE="1"))
    proxied = run_client(sdk, tmp_path, scenario, PROXY + AGENT,
                         agent_env(state_dir, tmp_path, "proxied", ACP_AGENT_USAGE="1"))
    assert direct["exit"] == proxied["exit"] == {"code": 3, "signal": None}
    assert without_ctxd_meta(proxied["toEditor"]) == direct["toEditor"]
    assert proxied["results"]["prompts"][-1] == direct["results"]["prompts"][-1]


def test_killed_agent_the_proxy_ends_by_the_same_signal(repo: Path, state_dir: Path, tmp_path: Path) -> None:
    editor = RawEditor(PROXY + ["sh", "-c", "echo ready; kill -9 $$"], daemon_env(state_dir), repo)
    assert editor.wait(lambda m: True) == {"notJson": "ready\n"}  # a line that is not JSON passes as it is
    assert editor.proc.wait(timeout=30) == -9


@pytest.mark.parametrize("why", ["no owner", "state dir unusable"])
def test_when_ctxd_cannot_work_messages_still_pass_unchanged(sdk: Path, repo: Path, state_dir: Path, tmp_path: Path,
                                                             why: str, daemon_factory: Callable[..., Client]) -> None:
    scenario = {"cwd": str(repo), "prompts": ["hello", f"write {repo / 'a.txt'} after"], "allow": True}
    direct = run_client(sdk, tmp_path, scenario, AGENT, agent_env(state_dir, tmp_path, "direct"))
    (repo / "a.txt").write_text("before\n")
    if why == "no owner":
        env = agent_env(state_dir, tmp_path, "proxied", CTXD_OWNER="0")
    else:
        blocked = tmp_path / "not-a-folder"
        blocked.write_text("")
        env = agent_env(state_dir, tmp_path, "proxied") | {"XDG_STATE_HOME": str(blocked)}
    proxied = run_client(sdk, tmp_path, scenario, PROXY + AGENT, env)
    assert not proxied["errors"]
    assert without_ctxd_entry(received(tmp_path, "proxied")) == received(tmp_path, "direct")
    assert without_ctxd_meta(proxied["toEditor"]) == direct["toEditor"]
    assert proxied["exit"] == direct["exit"]
    assert (repo / "a.txt").read_text() == "after"
    if why == "no owner":  # the checkpoints were taken in the proxy itself, as a hook alone takes them
        taken = checkpoints(daemon_factory([repo]), repo)
        assert [(c["trigger"], c["thread"]) for c in taken] == [("turn", "acp:sess-1")]
        log = (state_dir / "ctxd" / "acp" / "proxy.log").read_text()
        assert "CTXD_OWNER=0" in log and "taking it here" in log


def test_a_line_too_long_to_read_still_passes_unchanged(state_dir: Path, tmp_path: Path, repo: Path) -> None:
    """Past 64 MiB without a newline the proxy passes the line on in pieces, unread."""
    script = ("import sys; out = sys.stdout.buffer; out.write(b'{\"x\": \"' + b'y' * (70 << 20) + b'\"}\\n'); "
              "out.write(b'{\"jsonrpc\": \"2.0\", \"method\": \"after\"}\\n'); out.flush()")
    done = subprocess.run(PROXY + [sys.executable, "-c", script], capture_output=True, timeout=120,
                          env=daemon_env(state_dir), cwd=repo, stdin=subprocess.DEVNULL)
    assert done.returncode == 0
    first, second, rest = done.stdout.split(b"\n")
    assert first == b'{"x": "' + b"y" * (70 << 20) + b'"}' and second == b'{"jsonrpc": "2.0", "method": "after"}'
    assert rest == b""


def prompt(editor: RawEditor, session: str, text: str) -> dict[str, Any]:
    """One turn, through `editor`: the agent's answer."""
    got = editor.request("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": text}]})
    return editor.wait(lambda m: m.get("id") == got, timeout=60)


def texts_of(client: Client, workspace: Path, count: int) -> list[str] | None:
    """The texts of the ACP session's thread, once it holds `count` items (else None)."""
    texts = [i["content"][0]["text"] for i in history(client, workspace, "acp:sess-1")]
    return texts if len(texts) == count else None


def kill_owner(client: Client, hold_start_of: Path | None = None) -> int | None:
    """SIGKILL the owner; with `hold_start_of` (its state dir), first take the lock an owner's
    starter takes (where ownerlink.reach takes it), so that none can start until the returned
    descriptor is closed."""
    import fcntl

    from tests.rpc import wait_gone

    held = None
    if hold_start_of is not None:
        start_lock = hold_start_of / "ctxd" / "owner" / "start.lock"
        assert start_lock.exists()
        held = os.open(start_lock, os.O_RDWR)
        fcntl.flock(held, fcntl.LOCK_EX)
    os.kill(client.daemon_pid, signal.SIGKILL)
    wait_gone(client.daemon_pid)
    return held


def first_turn(daemon_factory: Callable[..., Client], repo: Path, state_dir: Path,
               tmp_path: Path) -> tuple[Client, RawEditor, str]:
    """An owner, a proxy before the scripted agent, its session, and one turn the owner recorded."""
    owner = daemon_factory([repo])
    editor = RawEditor(PROXY + AGENT, agent_env(state_dir, tmp_path, "raw"), repo)
    try:
        session = start_session(editor, repo)
        prompt(editor, session, "one")
        assert wait_until(lambda: texts_of(owner, repo, 2))
    except BaseException:
        editor.close()
        raise
    return owner, editor, session


@pytest.mark.parametrize("next_owner", ["at once", "slow to start"])
def test_when_the_owner_dies_the_next_turn_is_recorded_by_the_next_owner(
        repo: Path, state_dir: Path, tmp_path: Path, daemon_factory: Callable[..., Client], next_owner: str) -> None:
    """The owner dies between two turns: the next owner records the second. "slow to start": the
    next owner cannot start for 12 s (a loaded machine; here the test holds the lock an owner's
    starter takes): the proxy's record of the turn waits for it, the records after it in their
    order, instead of being dropped once its 5 s wait for a session ran out ("not recorded
    (OSError: no owner)", seen in a newcomer check on a loaded machine)."""
    first, editor, session = first_turn(daemon_factory, repo, state_dir, tmp_path)
    held = None
    try:
        held = kill_owner(first, state_dir if next_owner == "slow to start" else None)
        sent = time.monotonic()
        assert prompt(editor, session, "two")["result"]["stopReason"] == "end_turn"
        if held is not None:
            time.sleep(max(0.0, sent + 12.0 - time.monotonic()))
            os.close(held)  # an owner may start now
            held = None
        second = daemon_factory([repo])
        assert second.daemon_pid != first.daemon_pid
        assert wait_until(lambda: texts_of(second, repo, 4)) == ["one", "Echo: one", "two", "Echo: two"]
    finally:
        if held is not None:
            os.close(held)
        assert editor.close() == 0


def spools(state_dir: Path) -> list[Path]:
    folder = state_dir / "ctxd" / "acp" / "spool"
    return sorted(folder.glob("*.jsonl")) if folder.is_dir() else []


@pytest.mark.parametrize("end", ["editor closed", "proxy killed"])
def test_records_a_proxy_ends_with_unsent_are_stored_by_the_next_owner_once(
        repo: Path, state_dir: Path, tmp_path: Path, daemon_factory: Callable[..., Client], end: str) -> None:
    """The owner dies and none can start (the test holds the lock a starter takes) while the
    proxy records a turn, then the editor closes the session (or the proxy is killed): the proxy
    ends with the turn unsent, which stays in its spool (ctxd/acpspool.py), and the next owner
    stores it at its start. A spool stored again (an owner killed while it stored one) adds
    nothing: each record carries its proxy's id and number. Before the spool, the proxy's 2-s wait
    at its end dropped them."""
    first, editor, session = first_turn(daemon_factory, repo, state_dir, tmp_path)
    held = None
    try:
        held = kill_owner(first, state_dir)
        assert prompt(editor, session, "two")["result"]["stopReason"] == "end_turn"  # (recorded before it goes on)
        if end == "proxy killed":
            editor.proc.kill()
            assert editor.close() == -signal.SIGKILL
        else:
            assert editor.close() == 0  # the agent ends, and the proxy with it
        [spooled] = spools(state_dir)
        assert stat.S_IMODE(spooled.stat().st_mode) == 0o600
        lines = [json.loads(line) for line in spooled.read_text().splitlines()]
        assert [item["content"][0]["text"] for line in lines for item in line["params"]["items"]] == ["two", "Echo: two"]
        kept = spooled.read_bytes()
    finally:
        if held is not None:
            os.close(held)  # an owner may start now
    second = daemon_factory([repo])
    texts = wait_until(lambda: texts_of(second, repo, 4))
    assert texts == ["one", "Echo: one", "two", "Echo: two"]
    assert wait_until(lambda: not spools(state_dir)), "the stored spool is removed"
    spooled.write_bytes(kept)  # as an owner killed while storing it would have left it
    kill_owner(second)
    third = daemon_factory([repo])
    assert wait_until(lambda: not spools(state_dir))
    assert [i["content"][0]["text"] for i in history(third, repo, "acp:sess-1")] == texts


def test_a_proxy_keeps_its_records_on_disk_until_the_owner_answers_them(
        repo: Path, state_dir: Path, tmp_path: Path, daemon_factory: Callable[..., Client]) -> None:
    """While no owner can be reached the proxy's records wait in its spool (a proxy killed then
    loses none); once one answers they are stored in their order, the spool is emptied, and a
    proxy that ends with nothing unsent leaves no spool behind."""
    first, editor, session = first_turn(daemon_factory, repo, state_dir, tmp_path)
    held = None
    try:
        [spooled] = spools(state_dir)
        assert wait_until(lambda: spooled.stat().st_size == 0), "answered: emptied"
        held = kill_owner(first, state_dir)
        for text in ("two", "three"):
            assert prompt(editor, session, text)["result"]["stopReason"] == "end_turn"
        waiting = wait_until(lambda: (lambda t: t if "Echo: three" in t else None)(spooled.read_text()))
        assert waiting.index('"two"') < waiting.index('"three"')
        assert held is not None
        os.close(held)
        held = None
        second = daemon_factory([repo])
        assert wait_until(lambda: texts_of(second, repo, 6), timeout=60) == [
            "one", "Echo: one", "two", "Echo: two", "three", "Echo: three"]
        assert wait_until(lambda: spooled.stat().st_size == 0)
    finally:
        if held is not None:
            os.close(held)
        assert editor.close() == 0
    assert not spools(state_dir)


def test_an_owner_stores_only_the_records_of_a_spool_that_is_one(
        repo: Path, state_dir: Path, tmp_path: Path, daemon_factory: Callable[..., Client]) -> None:
    """A spool left by a proxy that crashed, with a line that is no JSON, a record for a thread that
    is not an ACP session's and its last line cut short; beside it a FIFO, a link to a spool
    elsewhere and a spool a proxy died making (empty, not named yet). The owner stores the record,
    removes that spool and the unnamed one, and neither waits on the FIFO nor reads through the link."""
    folder = state_dir / "ctxd" / "acp" / "spool"
    folder.mkdir(parents=True, mode=0o700)
    for part in (state_dir / "ctxd", state_dir / "ctxd" / "acp"):
        part.chmod(0o700)

    def line(thread: str, seq: int, text: str) -> str:
        return json.dumps({"folder": str(repo), "params": {"thread": thread, "proxy": "crashed", "seq": seq, "items": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}]}}) + "\n"

    crashed = folder / "1-1.jsonl"
    crashed.write_text(line("acp:left", 1, "kept") + "not json\n" + line("default", 2, "refused") + line("acp:left", 3, "cut")[:40])
    crashed.chmod(0o600)
    os.mkfifo(folder / "2-2.jsonl", 0o600)
    (folder / "4-4.new").write_bytes(b"")  # a proxy that died while it made its spool
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_text(line("acp:linked", 1, "through a link"))
    (folder / "3-3.jsonl").symlink_to(elsewhere)
    client = daemon_factory([repo])
    assert wait_until(lambda: not crashed.exists())
    assert [i["content"][0]["text"] for i in history(client, repo, "acp:left")] == ["kept"]
    listed = {t["thread"] for t in client.request("ctxd/threads", {"workspace": repo.as_uri()})["threads"]}
    assert "acp:linked" not in listed and "default" not in listed
    assert (folder / "2-2.jsonl").exists() and (folder / "3-3.jsonl").is_symlink() and elsewhere.exists()
    assert not (folder / "4-4.new").exists()


def test_a_running_owner_stores_what_a_proxy_left_once_its_session_ends(
        repo: Path, state_dir: Path, tmp_path: Path, daemon_factory: Callable[..., Client]) -> None:
    """A proxy killed while the owner keeps running leaves its unanswered records in its spool. The
    owner looked for such spools only at its warm-up and when a proxy opened a session: with no new
    session they waited for the next owner. It now also looks a moment after a proxy's session
    with it ends (here a spool put there while the session ran, as a proxy killed beside it leaves)."""
    owner, editor, _ = first_turn(daemon_factory, repo, state_dir, tmp_path)
    try:
        left = state_dir / "ctxd" / "acp" / "spool" / "1-1.jsonl"
        left.write_text(json.dumps({"folder": str(repo), "params": {"thread": "acp:killed", "proxy": "killed", "seq": 1,
                                    "items": [{"type": "message", "role": "user",
                                               "content": [{"type": "input_text", "text": "left"}]}]}}) + "\n")
        left.chmod(0o600)
        time.sleep(1.5)
        assert left.exists()  # (not taken while the session runs)
    finally:
        assert editor.close() == 0
    assert wait_until(lambda: not left.exists(), timeout=10)
    assert [i["content"][0]["text"] for i in history(owner, repo, "acp:killed")] == ["left"]


def test_a_full_disk_under_the_spool_only_leaves_the_records_unkept(repo: Path, state_dir: Path, tmp_path: Path,
                                                                     client: Client) -> None:
    """The proxy's spool cannot be written (its folder is a full file system): the records still
    reach the owner, and the proxy's log says they were not kept on disk."""
    from tests.test_restore_full_disk import ROOT, small_fs

    if not ROOT:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    acp = state_dir / "ctxd" / "acp"
    acp.mkdir(parents=True, exist_ok=True)
    acp.chmod(0o700)
    with small_fs(acp / "spool", "64k") as small:
        small.chmod(0o700)
        with contextlib.suppress(OSError), open(small / "filler", "wb") as filler:
            while True:
                filler.write(b"x" * 4096)
                filler.flush()
        editor = RawEditor(PROXY + AGENT, agent_env(state_dir, tmp_path, "raw"), repo)
        try:
            session = start_session(editor, repo)
            got = editor.request("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "one"}]})
            assert editor.wait(lambda m: m.get("id") == got)["result"]["stopReason"] == "end_turn"
            texts = wait_until(lambda: (lambda h: h if len(h) == 2 else None)(
                [i["content"][0]["text"] for i in history(client, repo, "acp:sess-1")]))
            assert texts == ["one", "Echo: one"]
        finally:
            assert editor.close() == 0
        assert "records are not kept on disk" in (acp / "proxy.log").read_text()
        assert [p.name for p in small.iterdir()] == ["filler"]  # (an empty spool goes with its proxy)


def test_no_api_key_reaches_the_proxys_log(repo: Path, state_dir: Path, tmp_path: Path) -> None:
    """A checkpoint's label holds the prompt's first words, and a prompt may hold a key."""
    key = "sk-test-" + "q7" * 12
    env = agent_env(state_dir, tmp_path, "raw", CTXD_OWNER="0", SOME_API_KEY=key)
    editor = RawEditor(PROXY + AGENT, env, repo)
    try:
        session = start_session(editor, repo)
        got = editor.request("session/prompt", {"sessionId": session, "prompt": [
            {"type": "text", "text": f"use {key} please"}]})
        editor.wait(lambda m: m.get("id") == got)
    finally:
        editor.close()
    log = (state_dir / "ctxd" / "acp" / "proxy.log").read_text()
    assert "checkpoint" in log and "use [redacted] please" in log and key not in log


def test_bad_command_lines_say_how_to_call_it(tmp_path: Path) -> None:
    for argv in ([], ["--workspace"], ["--"], ["--bogus", "x", "--", "true"]):
        done = subprocess.run([sys.executable, "-m", "ctxd", "acp", *argv], capture_output=True, timeout=30,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == 2 and b"usage: ctxd acp" in done.stderr
    done = subprocess.run([sys.executable, "-m", "ctxd", "acp", "--", str(tmp_path / "missing")],
                          capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    assert done.returncode == 127 and b"cannot run" in done.stderr
