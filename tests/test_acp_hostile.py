"""`ctxd acp` (docs/acp.md) against editors and agents that do what tests/test_acp.py's do not: real
subprocesses throughout (the proxy, the scripted agent of tests/acp_agent.py, the owner)."""

# ruff: noqa: F811  (`repo` is tests/test_acp.py's fixture)
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.rpc import Client
from tests.test_acp import (  # noqa: F401
    AGENT,
    PROXY,
    RawEditor,
    agent_env,
    checkpoints,
    history,
    prompt,
    repo,
    start_session,
    thread_of,
    wait_until,
)


def texts(client: Client, workspace: Path, count: int) -> list[str] | None:
    found = [i["content"][0]["text"] for i in history(client, workspace, "acp:sess-1") if i["type"] == "message"]
    return found if len(found) >= count else None


def test_a_turn_after_session_load_does_not_record_the_replayed_answer_again(
        repo: Path, state_dir: Path, tmp_path: Path, client: Client) -> None:
    """The editor loads the session it is in (the agent replays it), then sends a turn. The last
    agent message of the replay was still open when the load was answered: it was recorded again,
    as the new turn's, after the thread already held it."""
    editor = RawEditor(PROXY + AGENT, agent_env(state_dir, tmp_path, "raw"), repo)
    try:
        session = start_session(editor, repo)
        for text in ("one", "two"):
            assert prompt(editor, session, text)["result"]["stopReason"] == "end_turn"
        assert wait_until(lambda: texts(client, repo, 4))
        got = editor.request("session/load", {"sessionId": session, "cwd": str(repo), "mcpServers": []})
        assert "result" in editor.wait(lambda m: m.get("id") == got)
        assert prompt(editor, session, "three")["result"]["stopReason"] == "end_turn"
        assert wait_until(lambda: texts(client, repo, 6))
        wait_until(lambda: texts(client, repo, 7), timeout=3)  # (one more would come within this)
        assert texts(client, repo, 0) == ["one", "Echo: one", "two", "Echo: two", "three", "Echo: three"]
    finally:
        assert editor.close() == 0


def test_turns_after_a_refused_session_load_are_recorded(repo: Path, state_dir: Path, tmp_path: Path,
                                                         client: Client) -> None:
    """The agent refuses a `session/load` of the session the editor is in (an error answer). The
    proxy took the session for one being replayed until that answer, and an error answer never
    ended it: every later turn went to the owner as replayed history, which a thread that holds
    something drops. The turns after it were lost."""
    editor = RawEditor(PROXY + AGENT, agent_env(state_dir, tmp_path, "raw", ACP_AGENT_REFUSE_LOAD="1"), repo)
    try:
        session = start_session(editor, repo)
        assert prompt(editor, session, "one")["result"]["stopReason"] == "end_turn"
        assert wait_until(lambda: texts(client, repo, 2))
        got = editor.request("session/load", {"sessionId": session, "cwd": str(repo), "mcpServers": []})
        assert "error" in editor.wait(lambda m: m.get("id") == got)
        assert prompt(editor, session, "two")["result"]["stopReason"] == "end_turn"
        assert wait_until(lambda: texts(client, repo, 4), timeout=15) == ["one", "Echo: one", "two", "Echo: two"]
    finally:
        assert editor.close() == 0


def test_a_turn_holding_half_a_surrogate_pair_is_recorded(repo: Path, state_dir: Path, tmp_path: Path,
                                                          client: Client) -> None:
    """A prompt cut in the middle of an emoji (JavaScript strings are UTF-16: a paste or a slice cut
    between the halves of a surrogate pair, which JSON.stringify writes as a lone `\\ud83d`). The
    turn passes unchanged; the owner refuses any message holding an unpaired surrogate (SQLite
    cannot store one), so the proxy's records of the prompt and of the agent's echo of it were
    refused, and so was every later record (each carries the session's title, its first prompt):
    nothing of the session reached the thread. The turn's checkpoint failed too (the owner refused
    it, and a commit message cannot hold the surrogate): none was taken before that turn."""
    editor = RawEditor(PROXY + AGENT, agent_env(state_dir, tmp_path, "raw"), repo)
    try:
        session = start_session(editor, repo)
        answer = prompt(editor, session, "cut \ud83d")
        assert answer["result"]["stopReason"] == "end_turn"
        taken = [c for c in checkpoints(client, repo) if c["trigger"] == "turn"]
        assert [c["turn"]["index"] for c in taken] == [1], "no checkpoint before the turn"
        assert prompt(editor, session, "two")["result"]["stopReason"] == "end_turn"
        found = wait_until(lambda: texts(client, repo, 4), timeout=15)
        assert found == ["cut \ufffd", "Echo: cut \ufffd", "two", "Echo: two"], texts(client, repo, 0)
    finally:
        assert editor.close() == 0


def test_an_owner_that_stops_reading_does_not_hold_the_next_prompt_forever(
        repo: Path, state_dir: Path, tmp_path: Path, daemon_factory: Callable[..., Client]) -> None:
    """The owner stops reading its socket (here SIGSTOP: a hung or swapped-out daemon) while the
    proxy sends it a record larger than the socket's buffer (a prompt with a file attached). The
    record's write blocked, holding the session's write lock, and the turn's checkpoint, which
    waits at most 20 s for the owner and is then taken in the proxy (docs/acp.md), waited for that
    lock without a bound: the prompt never reached the agent. Once the owner reads again, the turn
    is recorded."""
    owner = daemon_factory([repo])
    editor = RawEditor(PROXY + AGENT, agent_env(state_dir, tmp_path, "raw"), repo)
    stopped = False
    try:
        session = start_session(editor, repo)
        assert prompt(editor, session, "one")["result"]["stopReason"] == "end_turn"
        assert wait_until(lambda: texts(owner, repo, 2))
        os.kill(owner.daemon_pid, signal.SIGSTOP)
        stopped = True
        attached = "x" * (2 << 20)
        got = editor.request("session/prompt", {"sessionId": session, "prompt": [
            {"type": "text", "text": "two"},
            {"type": "resource", "resource": {"uri": "file:///big.txt", "text": attached}}]})
        answer = editor.wait(lambda m: m.get("id") == got, timeout=90)
        assert answer["result"]["stopReason"] == "end_turn"
        got = editor.request("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "three"}]})
        answer = editor.wait(lambda m: m.get("id") == got, timeout=90)  # (a checkpoint waits 20 s, then one here)
        assert answer["result"]["stopReason"] == "end_turn"
        os.kill(owner.daemon_pid, signal.SIGCONT)
        stopped = False
        found = wait_until(lambda: texts(owner, repo, 6), timeout=90)
        assert found is not None and found[2].startswith("two\nxxx") and found[4:] == ["three", "Echo: three"]
    finally:
        if stopped:
            os.kill(owner.daemon_pid, signal.SIGCONT)
        assert editor.close() == 0


def test_an_answer_ctxd_adds_to_stays_strict_json(state_dir: Path, tmp_path: Path, repo: Path) -> None:
    """An agent's `initialize` answer with a number past a double's range in a field of a newer
    protocol (valid JSON; JavaScript reads it as Infinity). The proxy adds `_meta.ctxd` to that
    answer by parsing and writing it again, and wrote the number as `Infinity`, which is no JSON:
    the editor's parser (JSON.parse) refused the answer. It must reach the editor as JSON."""
    answer = b'{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1,"_meta":{"future":{"limit":1e400}}}}\n'
    script = ("import sys; sys.stdin.buffer.readline(); "
              f"sys.stdout.buffer.write({answer!r}); sys.stdout.buffer.flush()")
    request = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n'
    done = subprocess.run(PROXY + [sys.executable, "-c", script], input=request, capture_output=True, timeout=60,
                          env=agent_env(state_dir, tmp_path, "raw", CTXD_OWNER="0"), cwd=repo)
    assert done.returncode == 0

    def strict(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    got = json.loads(done.stdout, parse_constant=strict)
    assert got["result"]["_meta"]["future"]["limit"] == float("inf")  # (what the agent sent: 1e400)


def test_an_agent_does_not_outlive_a_proxy_killed_by_its_editor(state_dir: Path, tmp_path: Path, repo: Path) -> None:
    """An editor ends its agent with SIGKILL (Zed kills its agent servers on drop): behind `ctxd acp`
    that kill reaches the proxy, which cannot pass it on. An agent that does not end at its input's
    end (busy, or waiting on something of its own) kept running, orphaned, where without ctxd it
    would have been killed."""
    pid_file = tmp_path / "agent.pid"
    script = (f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
              "time.sleep(120)")  # reads nothing: its input's end goes unnoticed
    proxy = subprocess.Popen(PROXY + [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             env=agent_env(state_dir, tmp_path, "raw", CTXD_OWNER="0"), cwd=repo)
    agent = 0
    try:
        assert wait_until(lambda: pid_file.exists() and pid_file.read_text())
        agent = int(pid_file.read_text())
        proxy.kill()
        proxy.wait(timeout=30)

        def gone() -> bool:
            try:
                os.kill(agent, 0)
            except ProcessLookupError:
                return True
            with open(f"/proc/{agent}/stat") as stat:  # a zombie (not reaped yet by init) is gone too
                return stat.read().rsplit(")", 1)[1].split()[0] == "Z"

        assert wait_until(gone, timeout=10), "the agent outlived the proxy its editor killed"
    finally:
        if agent:
            with contextlib.suppress(OSError):
                os.kill(agent, signal.SIGKILL)
        if proxy.poll() is None:
            proxy.kill()


def proxy_log(state_dir: Path) -> str:
    path = state_dir / "ctxd" / "acp" / "proxy.log"
    return path.read_text() if path.exists() else ""


def two_turns_stored(editor: RawEditor, repo: Path, client: Client) -> None:
    """Two prompts through the proxy: both turns, asked and answered, reach the thread."""
    try:
        session = start_session(editor, repo)
        for text in ("one", "two"):
            assert prompt(editor, session, text)["result"]["stopReason"] == "end_turn"
        found = wait_until(lambda: texts(client, repo, 4), timeout=15)
        assert found == ["one", "Echo: one", "two", "Echo: two"], texts(client, repo, 0)
    finally:
        assert editor.close() == 0


def allowed_tool_then_two(editor: RawEditor, client: Client, repo: Path, text: str,
                          meanwhile: Callable[[], Any] | None = None) -> list[dict[str, Any]]:
    """A session whose first prompt (`text`) runs a tool the editor allows (after `meanwhile`, while
    it is asked), then a second turn: the six items the owner stores of them."""
    session = start_session(editor, repo)
    got = editor.request("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": text}]})
    asked = editor.wait(lambda m: m.get("method") == "session/request_permission")
    if meanwhile is not None:
        meanwhile()
    editor.send({"id": asked["id"], "result": {"outcome": {"outcome": "selected", "optionId": "yes"}}})
    assert editor.wait(lambda m: m.get("id") == got)["result"]["stopReason"] == "end_turn"
    assert prompt(editor, session, "two")["result"]["stopReason"] == "end_turn"
    items: list[dict[str, Any]] = wait_until(lambda: (lambda h: h if len(h) >= 6 else None)(
        history(client, repo, "acp:sess-1")))
    return items


def test_an_agents_model_id_over_its_bound_loses_no_turn(
        repo: Path, state_dir: Path, tmp_path: Path, client: Client) -> None:
    """The agent names its model with an id longer than the protocol's bound for it (200
    characters). Every record of the session carries the model, and the owner refused each whole:
    no turn of the session reached the thread. The model is left out (logged, without the id),
    the turns are stored."""
    model = "model-" + "x" * 300 + "-MODELMARK"
    editor = RawEditor(PROXY + AGENT, agent_env(state_dir, tmp_path, "raw", ACP_AGENT_MODEL=model), repo)
    two_turns_stored(editor, repo, client)
    info = wait_until(lambda: thread_of(client, repo, "acp:sess-1"))
    assert info is not None and "MODELMARK" not in json.dumps(info)
    logged = proxy_log(state_dir)
    assert "acp:sess-1: the agent's model id is longer than 200 characters: left out" in logged, logged
    assert "MODELMARK" not in logged and "xxxxxxxxxx" not in logged
    assert logged.count("model id is longer") == 1  # once, not at every record


def test_an_agents_usage_over_its_bound_loses_no_turn(
        repo: Path, state_dir: Path, tmp_path: Path, client: Client) -> None:
    """The agent reports a context fill past the protocol's bound for a count (2**53 - 1). The
    record that carried it, with the turn's answer, was refused whole: the answer never reached the
    thread. The report is ignored (logged), the items are stored."""
    editor = RawEditor(PROXY + AGENT, agent_env(state_dir, tmp_path, "raw", ACP_AGENT_USED=str(2**60)), repo)
    two_turns_stored(editor, repo, client)
    logged = proxy_log(state_dir)
    assert "acp:sess-1: the agent reported a context fill past 2**53 - 1 tokens: ignored" in logged, logged
    assert str(2**60) not in logged


def test_the_owner_stores_the_items_of_a_record_whose_fields_are_over_their_bounds(
        repo: Path, state_dir: Path, tmp_path: Path, client: Client) -> None:
    """A record whose title, model and gauge are over the protocol's bounds (a proxy of an earlier
    version sent them; its spool keeps them for the next owner). The owner refused it whole, its
    items with it. The title is cut, the model and gauge left out, logged without their text."""
    from ctxd import ownerlink

    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "kept"}]}
    params = {"workspace": repo.as_uri(), "thread": "acp:long", "items": [item], "title": "TITLEMARK " * 200,
              "model": "MODELMARK" * 30, "used": 2**60, "size": 200000}
    proxy = ownerlink.Session.open(state_dir / "ctxd", [repo], role="acp")
    assert proxy is not None
    try:
        assert proxy.request("ctxd/acp/record", params, 30)["itemCount"] == 1
    finally:
        proxy.close()
    assert [i["content"][0]["text"] for i in history(client, repo, "acp:long")] == ["kept"]
    info = thread_of(client, repo, "acp:long")
    assert info is not None and "MODELMARK" not in json.dumps(info)
    assert info["title"].startswith("TITLEMARK") and len(info["title"]) <= 1000
    logged = (tmp_path / "daemon-0.log").read_text()
    assert ("ctxd/acp/record of acp:long: title cut (2000 characters, the bound is 1000), model left out "
            "(270 characters, the bound is 200), used left out") in logged, logged[-3000:]
    assert "MARK" not in logged


def test_a_tool_calls_title_and_kind_over_their_bounds_are_cut_and_the_turn_kept(
        repo: Path, state_dir: Path, tmp_path: Path, client: Client) -> None:
    """A tool call whose title and kind are far longer than any label (an agent that puts a whole
    command or file in its title). The title was stored whole three times over (the call, its
    arguments, its output), and at a few megabytes the owner stopped reading the records after it:
    the rest of the turn never reached the thread. The title is cut, the kind kept as "other",
    logged once without their text."""
    kind, title = "KINDMARK" * 40, "TOOLMARK " * 4000
    editor = RawEditor(PROXY + AGENT, agent_env(state_dir, tmp_path, "raw"), repo)
    try:
        items = allowed_tool_then_two(editor, client, repo, f"tool {kind} {title}")
    finally:
        assert editor.close() == 0
    assert [(i["type"], i.get("role")) for i in items] == [
        ("message", "user"), ("function_call", None), ("function_call_output", None), ("message", "assistant"),
        ("message", "user"), ("message", "assistant")]
    call, output = items[1], items[2]
    assert call["name"] == call["kind"] == output["kind"] == "other"
    assert call["title"] == output["title"] and call["title"].startswith("TOOLMARK") and call["title"].endswith("…")
    assert len(call["title"]) == 1000 and len(call["arguments"]) < 2000 and "KINDMARK" not in call["arguments"]
    assert [items[3]["content"][0]["text"], items[5]["content"][0]["text"]] == ["Ran.", "Echo: two"]
    notes = [line for line in proxy_log(state_dir).splitlines() if "a tool call's" in line]
    assert [line.split("] ", 1)[1] for line in notes] == [
        "acp:sess-1: a tool call's title is longer than 1000 characters: cut",
        "acp:sess-1: a tool call's kind is longer than 100 characters: kept as \"other\""], notes


def opened(editor: RawEditor, method: str, params: dict[str, Any]) -> tuple[str, str]:
    """The session a `session/new` or `session/load` opened, and the thread ctxd named for it."""
    got = editor.request(method, params)
    answer = editor.wait(lambda m: m.get("id") == got)
    return str(answer["result"].get("sessionId", params.get("sessionId"))), answer["result"]["_meta"]["ctxd"]["thread"]


def test_a_session_whose_id_is_too_long_for_a_threads_name_keeps_every_turn(
        repo: Path, state_dir: Path, tmp_path: Path, client: Client) -> None:
    """An agent whose session ids are longer than a thread's name may be (`acp:` and 252
    characters). The thread was named `acp:<session id>`, and the owner refused every record of
    it: no turn of the session was stored. It is named by the id's first characters and a digest
    of it whole: bounded, the same for the same id (a proxy started again loads it: its turns join
    the thread), different for two ids alike in their first characters. The checkpoints and the
    link file `ctxd mcp` reads name the same thread; the proxy's log says so once per session."""
    links = tmp_path / "links.jsonl"
    env = agent_env(state_dir, tmp_path, "raw", ACP_AGENT_SESSION_PREFIX="L" * 300 + "-",
                    ACP_AGENT_LINKS=str(links))
    editor = RawEditor(PROXY + AGENT, env, repo)
    try:
        start_session(editor, repo)  # (sess-1: opened, nothing said)
        first, thread = opened(editor, "session/new", {"cwd": str(repo), "mcpServers": []})
        second, other = opened(editor, "session/new", {"cwd": str(repo), "mcpServers": []})
        assert prompt(editor, first, "one")["result"]["stopReason"] == "end_turn"
        assert prompt(editor, second, "two")["result"]["stopReason"] == "end_turn"

        def stored() -> dict[str, int]:
            listed = client.request("ctxd/threads", {"workspace": repo.as_uri()})["threads"]
            return {t["thread"]: t["itemCount"] for t in listed if t["thread"].startswith("acp:LLLL")}

        assert wait_until(lambda: stored().get(thread) == stored().get(other) == 2, timeout=15), stored()
        assert first.endswith("-sess-2") and second.endswith("-sess-3")
        assert thread != other and len(thread) <= 256 and len(other) <= 256
    finally:
        assert editor.close() == 0
    assert [json.loads(line)["served"] for line in links.read_text().splitlines()] == [thread, other]
    turns = [c["thread"] for c in checkpoints(client, repo) if c["trigger"] == "turn"]
    assert thread in turns and set(turns) <= {thread, other}, turns  # (an unchanged tree: one checkpoint)
    notes = [line for line in proxy_log(state_dir).splitlines() if "cannot name its thread" in line]
    assert len(notes) == 3 and sum(thread in line for line in notes) == 1, notes  # sess-1's too

    editor = RawEditor(PROXY + AGENT, agent_env(state_dir, tmp_path, "again"), repo)
    try:
        start_session(editor, repo)
        assert opened(editor, "session/load", {"sessionId": first, "cwd": str(repo), "mcpServers": []})[1] == thread
        assert prompt(editor, first, "three")["result"]["stopReason"] == "end_turn"
        said = lambda: [i["content"][0]["text"] for i in history(client, repo, thread)]  # noqa: E731
        assert wait_until(lambda: len(said()) >= 4, timeout=15), said()
        assert said() == ["one", "Echo: one", "three", "Echo: three"]
    finally:
        assert editor.close() == 0


def test_the_owner_stores_a_record_whose_session_id_is_too_long_for_a_threads_name(
        repo: Path, state_dir: Path, tmp_path: Path, client: Client) -> None:
    """A record of a session whose id is longer than a thread's name may be (a proxy of an earlier
    version named its thread `acp:<session id>`; its spool keeps the record for the next owner).
    The owner refused it whole, its items with it. It is stored in the thread a proxy names for
    that session now, and so is the session's checkpoint."""
    from ctxd import ownerlink

    session_id = "IDMARK" * 60
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "kept"}]}
    proxy = ownerlink.Session.open(state_dir / "ctxd", [repo], role="acp")
    assert proxy is not None
    try:
        params = {"workspace": repo.as_uri(), "thread": f"acp:{session_id}"}
        assert proxy.request("ctxd/acp/record", {**params, "items": [item]}, 30)["itemCount"] == 1
        assert proxy.request("ctxd/acp/checkpoint", {**params, "trigger": "turn", "message": "one"}, 60)["id"]
    finally:
        proxy.close()
    from ctxd.protocol.threadnames import acp_thread

    named = acp_thread(session_id)
    assert len(named) <= 256 and named.startswith("acp:IDMARK")
    assert [i["content"][0]["text"] for i in history(client, repo, named)] == ["kept"]
    assert [c["thread"] for c in checkpoints(client, repo)] == [named]


def test_the_owner_refuses_a_checkpoints_tool_past_its_bounds_and_takes_a_bounded_one(
        repo: Path, state_dir: Path, client: Client) -> None:
    """A proxy's checkpoint whose tool names a megabyte-long call id, or 5,000 paths, or is no
    tool at all: the owner stored each as it came in the checkpoint's record. It refuses them as a
    hook's checkpoint is refused (invalid params, no checkpoint taken), and takes one in bounds."""
    from ctxd import ownerlink

    proxy = ownerlink.Session.open(state_dir / "ctxd", [repo], role="acp")
    assert proxy is not None
    params = {"workspace": repo.as_uri(), "thread": "acp:bounds", "trigger": "tool", "message": "before edit"}
    try:
        for tool in ({"name": "edit", "callId": "C" * 1_000_000}, {"name": "edit", "paths": ["a.txt"] * 5_000},
                     {"paths": ["a.txt"]}, {"name": "edit", "paths": "a.txt"}):
            with pytest.raises(ownerlink.RemoteError) as refused:
                proxy.request("ctxd/acp/checkpoint", {**params, "tool": tool}, 60)
            assert refused.value.code == -32602 and "tool" in str(refused.value), refused.value
        with pytest.raises(ownerlink.RemoteError):
            proxy.request("ctxd/acp/checkpoint", {**params, "turn": {"index": -1, "text": "x"}}, 60)
        (repo / "a.txt").write_text("changed\n")
        taken = proxy.request("ctxd/acp/checkpoint", {**params, "tool": {"name": "edit", "callId": "call-1",
                                                                          "paths": ["a.txt"]}}, 60)
    finally:
        proxy.close()
    listed = checkpoints(client, repo)
    assert [c["id"] for c in listed] == [taken["id"]]
    assert listed[0]["tool"] == {"name": "edit", "callId": "call-1", "paths": ["a.txt"]}


def test_a_tool_calls_locations_over_their_bounds_are_left_out_and_the_turn_kept(
        repo: Path, state_dir: Path, tmp_path: Path, client: Client) -> None:
    """A tool call naming thousands of locations, one of them a path far longer than any path can
    be. Every location was stored whole three times over (the call, its arguments, its output) and
    sent as the checkpoint's paths. A location whose path is over 4,096 characters is left out,
    and so is any past the first 100; each is logged once, without the paths."""
    env = agent_env(state_dir, tmp_path, "raw", ACP_AGENT_LOCATIONS="5000:100000")
    editor = RawEditor(PROXY + AGENT, env, repo)
    try:
        items = allowed_tool_then_two(editor, client, repo, "tool edit Edit them all",
                                      meanwhile=lambda: (repo / "b.txt").write_text("made by the user meanwhile\n"))
    finally:
        assert editor.close() == 0
    kept = [{"path": f"src/{i}.py", "line": i} for i in range(100)]
    call, output = items[1], items[2]
    assert call["locations"] == output["locations"] == kept
    assert json.loads(call["arguments"])["locations"] == kept
    assert [items[3]["content"][0]["text"], items[5]["content"][0]["text"]] == ["Ran.", "Echo: two"]
    tools = [c["tool"] for c in checkpoints(client, repo) if c["trigger"] == "tool"]
    assert [t["paths"] for t in tools] == [[f"src/{i}.py" for i in range(50)]]  # (a checkpoint keeps 50)
    logged = proxy_log(state_dir)
    notes = [line.split("] ", 1)[1] for line in logged.splitlines() if "location" in line]
    assert notes == ["acp:sess-1: a tool call's location path is longer than 4096 characters: left out",
                     "acp:sess-1: a tool call has more than 100 locations: the rest are left out"], notes
    assert "LOCMARK" not in logged
