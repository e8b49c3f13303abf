"""qwen-code, Gemini CLI and OpenCode, run for real through tests/agents.py's drivers.

Each agent runs headless against its scripted model server on 127.0.0.1: two turns that create
hello.txt and change it with the agent's own tools (the second resumes the session), usage with
cached input, and one compaction by the agent itself. The checks are the records
docs/agents-research.md describes, read where it says each agent keeps them, so a newer agent
version that moves or reshapes them fails here first. Nothing of ctxd runs: these keep the
drivers and the documented formats honest for the agent modules that will follow them.
"""

from __future__ import annotations

import json
import re
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from tests.agents import GEMINI_MODEL, OPENCODE_MODEL, QWEN_MODEL, Gemini, OpenCode, Qwen
from tests.model_servers import ChatCompletionsServer, GeminiServer, Reply, tool

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "agents"


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _workspace(tmp_path: Path) -> Path:
    work = tmp_path / "home" / "app"
    work.mkdir(parents=True)
    return work


def test_qwen_two_turns_resume_and_compress(tmp_path: Path) -> None:
    work = _workspace(tmp_path)
    target = str(work / "hello.txt")
    with ChatCompletionsServer() as server:
        qwen = Qwen(tmp_path, tmp_path / "home" / ".qwen", server)
        server.script(Reply(text="Writing.", calls=[tool("call_1", "write_file", file_path=target, content="hello\n")],
                            usage={"input": 12000, "cached": 10000, "output": 30}),
                      Reply(text="Wrote hello.txt.", usage={"input": 12100, "cached": 12000, "output": 10}))
        session = qwen.session_id(qwen.prompt("Create hello.txt saying hello.", work))
        assert (work / "hello.txt").read_text() == "hello\n"
        # qwen's edit refuses a file this process has not read: the resumed turn reads it first
        server.script(Reply(text="Reading.", calls=[tool("call_2", "read_file", file_path=target)],
                            usage={"input": 13000, "cached": 12000, "output": 20}),
                      Reply(text="Editing.", calls=[tool("call_3", "edit", file_path=target, old_string="hello",
                                                         new_string="hello, world")],
                            usage={"input": 13500, "cached": 13000, "output": 25}),
                      Reply(text="Changed.", usage={"input": 14000, "cached": 13500, "output": 5}))
        assert qwen.session_id(qwen.prompt("Change it to say hello, world.", work, resume=session)) == session
        qwen.compress(work, session)
        assert server.pending == 0
        assert {r.path for r in server.requests} == {"/v1/chat/completions"}  # nothing else was asked for
    assert (work / "hello.txt").read_text() == "hello, world\n"

    # QWEN_HOME/projects/<cwd, each non-alphanumeric as '-'>/chats/<session>.jsonl, appended by every run
    path = tmp_path / "home" / ".qwen" / "projects" / re.sub("[^a-zA-Z0-9]", "-", str(work)) / "chats"
    assert sorted(p.name for p in path.glob("*.jsonl")) == [f"{session}.jsonl"]
    records = _records(path / f"{session}.jsonl")
    assert all(r["sessionId"] == session for r in records)
    for previous, record in zip(records, records[1:]):
        assert record["parentUuid"] == previous["uuid"]  # one chain: no rewind in this session
    prompts = [r["message"]["parts"][0]["text"] for r in records if r["type"] == "user"]
    assert prompts == ["Create hello.txt saying hello.", "Change it to say hello, world."]
    assistants = [r for r in records if r["type"] == "assistant"]
    assert {r["model"] for r in assistants} == {QWEN_MODEL}
    assert {r["contextWindowSize"] for r in assistants} == {1_000_000}
    assert assistants[-1]["usageMetadata"] == {"promptTokenCount": 14000, "candidatesTokenCount": 5,
                                               "thoughtsTokenCount": 0, "totalTokenCount": 14005,
                                               "cachedContentTokenCount": 13500}
    results = [part["functionResponse"]["name"] for r in records if r["type"] == "tool_result"
               for part in r["message"]["parts"]]
    assert results == ["write_file", "read_file", "edit"]
    [compression] = [r for r in records if r.get("subtype") == "chat_compression"]
    info = compression["systemPayload"]["info"]
    assert info["triggerReason"] == "manual" and info["originalTokenCount"] == 14000
    assert 0 < info["newTokenCount"] < info["originalTokenCount"]  # what qwen's footer shows once compressed
    assert "<state_snapshot>" in json.dumps(compression["systemPayload"]["compressedHistory"])


def _gemini_messages(path: Path) -> list[dict[str, Any]]:
    """The conversation as Gemini CLI loads it (loadConversationRecord): a message id written again
    replaces the earlier one, `$set.messages` replaces them all, `$rewindTo` drops from that id on."""
    messages: dict[str, dict[str, Any]] = {}
    for record in _records(path):
        if "$rewindTo" in record:
            ids = list(messages)
            cut = ids.index(record["$rewindTo"]) if record["$rewindTo"] in ids else 0
            messages = {i: messages[i] for i in ids[:cut]}
        elif "id" in record:
            messages[record["id"]] = record
        elif "messages" in record.get("$set", {}):
            messages = {m["id"]: m for m in record["$set"]["messages"]}
    return list(messages.values())


def test_gemini_two_turns_resume_and_compress(tmp_path: Path) -> None:
    work = _workspace(tmp_path)
    target = str(work / "hello.txt")
    with GeminiServer() as server:
        gemini = Gemini(tmp_path, tmp_path / "home", server, trusted=[work])
        server.script(Reply(text="Writing.", calls=[tool("call_1", "write_file", file_path=target, content="hello\n")],
                            usage={"input": 12000, "cached": 10000, "output": 30}),
                      Reply(text="Wrote hello.txt.", usage={"input": 12100, "cached": 12000, "output": 10}))
        session = gemini.session_id(gemini.prompt("Create hello.txt saying hello.", work))
        assert (work / "hello.txt").read_text() == "hello\n"
        # 600,000 prompt tokens are past half of the 1,048,576 window: Gemini CLI compresses before
        # its next request, within the same run (a resumed run starts from an estimate instead)
        server.script(Reply(text="Editing.", calls=[tool("call_2", "replace", file_path=target, instruction="greet the world",
                                                         old_string="hello", new_string="hello, world")],
                            usage={"input": 600000, "cached": 13000, "output": 25}),
                      Reply(text="Changed.", usage={"input": 4000, "cached": 1000, "output": 5}))
        assert gemini.session_id(gemini.prompt("Change it to say hello, world.", work, resume=session)) == session
        assert server.pending == 0
        paths = {r.path for r in server.requests}
        assert paths == {f"/v1beta/models/{GEMINI_MODEL}:streamGenerateContent",
                         f"/v1beta/models/{GEMINI_MODEL}:generateContent"}  # the compression's two requests
    assert (work / "hello.txt").read_text() == "hello, world\n"

    # GEMINI_CLI_HOME/.gemini/tmp/<the folder's short id in projects.json>/chats/session-<minute>-<id[:8]>.jsonl
    projects = json.loads((tmp_path / "home" / ".gemini" / "projects.json").read_text())["projects"]
    assert projects == {str(work): "app"}
    path = gemini.session_file(work, session)
    assert path.parent == tmp_path / "home" / ".gemini" / "tmp" / "app" / "chats"
    records = _records(path)
    headers = [r for r in records if "projectHash" in r]
    assert headers[0] == records[0] and {h["sessionId"] for h in headers} == {session}
    replies = [r for r in records if r.get("type") == "gemini"]
    assert {r["model"] for r in replies} == {GEMINI_MODEL}
    assert {"input": 600000, "output": 25, "cached": 13000, "thoughts": 0, "tool": 0, "total": 600025} in \
        [r["tokens"] for r in replies]
    calls = {call["name"] for r in replies for call in r.get("toolCalls", [])}
    assert calls == {"write_file", "replace"}
    compressed = [r["$set"]["messages"] for r in records if "messages" in r.get("$set", {})
                  and "<state_snapshot>" in json.dumps(r["$set"]["messages"])]
    assert len(compressed) == 1  # the compression is a `$set` of the whole, shorter history
    final = _gemini_messages(path)
    texts = json.dumps(final)
    assert "<state_snapshot>" in texts and "Create hello.txt saying hello." not in texts
    assert final[-1]["type"] == "gemini" and final[-1]["content"] == "Changed."


def test_opencode_two_turns_continue_and_compact(tmp_path: Path) -> None:
    work = _workspace(tmp_path)
    target = str(work / "hello.txt")
    # the example plugin of the research note, running a command that saves each payload
    payloads = tmp_path / "payloads"
    payloads.mkdir()
    saver = tmp_path / "save-payload"
    saver.write_text(f'#!/bin/sh\ncat > "{payloads}/$1-$(date +%s%N).json"\n')
    saver.chmod(0o755)
    with ChatCompletionsServer() as server:
        # OpenCode compacts once a step's tokens reach context - min(output, 32,000) = 16,000 here
        opencode = OpenCode(tmp_path, server, context=20000, output=4000, extra_env={"CTXD_OPENCODE_HOOK": str(saver)})
        (opencode.config_dir / "plugins").mkdir()
        (opencode.config_dir / "plugins" / "ctxd.js").write_text((FIXTURES / "opencode" / "ctxd-plugin.example.js").read_text())
        server.script(Reply(text="Writing.", calls=[tool("call_1", "write", filePath=target, content="hello\n")],
                            usage={"input": 12000, "cached": 10000, "output": 30}),
                      Reply(text="Wrote hello.txt.", usage={"input": 12100, "cached": 12000, "output": 10}))
        session = opencode.session_id(opencode.run("Create hello.txt saying hello.", work))
        assert (work / "hello.txt").read_text() == "hello\n"
        server.script(Reply(text="Reading.", calls=[tool("call_2", "read", filePath=target)],
                            usage={"input": 13000, "cached": 12000, "output": 20}),
                      Reply(text="Editing.", calls=[tool("call_3", "edit", filePath=target, oldString="hello",
                                                         newString="hello, world")],
                            usage={"input": 17000, "cached": 13000, "output": 25}),
                      Reply(text="Changed.", usage={"input": 3000, "cached": 1000, "output": 5}))
        assert opencode.session_id(opencode.run("Change it to say hello, world.", work, session=session)) == session
        assert server.pending == 0
        assert {r.path for r in server.requests} == {"/v1/chat/completions"}
    assert (work / "hello.txt").read_text() == "hello, world\n"

    # XDG_DATA_HOME/opencode/opencode.db, WAL: read through a read-only URI, never `immutable`
    assert opencode.database == tmp_path / "home" / ".local" / "share" / "opencode" / "opencode.db"
    with closing(sqlite3.connect(f"file:{opencode.database}?mode=ro", uri=True)) as db:
        db.row_factory = sqlite3.Row
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        [row] = db.execute("SELECT * FROM session").fetchall()
        messages = [json.loads(m["data"]) | {"id": m["id"]} for m in
                    db.execute("SELECT id, data FROM message WHERE session_id = ? ORDER BY time_created, id", (session,))]
        parts = [json.loads(p["data"]) for p in
                 db.execute("SELECT data FROM part WHERE session_id = ? ORDER BY time_created, id", (session,))]
    assert row["id"] == session and row["directory"] == str(work) and row["version"] == "1.18.33"
    assert json.loads(row["model"])["id"] == OPENCODE_MODEL
    steps = [p for p in parts if p["type"] == "step-finish"]
    # OpenCode's input excludes the cached part; the session's columns add up every step
    assert steps[0]["tokens"] == {"total": 12030, "input": 2000, "output": 30, "reasoning": 0,
                                  "cache": {"write": 0, "read": 10000}}
    assert row["tokens_input"] == sum(s["tokens"]["input"] for s in steps)
    assert row["tokens_cache_read"] == sum(s["tokens"]["cache"]["read"] for s in steps)
    assert abs(row["cost"] - sum(s["cost"] for s in steps)) < 1e-9 and row["cost"] > 0
    # priced per million tokens by the config: input 1.0, output 5.0, cache read 0.1
    assert abs(steps[0]["cost"] - (2000 * 1.0 + 30 * 5.0 + 10000 * 0.1) / 1e6) < 1e-9
    tools = [p["tool"] for p in parts if p["type"] == "tool"]
    assert tools == ["write", "read", "edit"]
    [compaction] = [p for p in parts if p["type"] == "compaction"]
    assert compaction["auto"] is True
    [summary] = [m for m in messages if m.get("summary") is True]
    assert summary["mode"] == "compaction" and summary["role"] == "assistant"
    assert messages[-1]["role"] == "assistant" and messages[-1]["finish"] == "stop"

    # the plugin saw each file-changing call before it ran, each typed prompt, and the compaction
    seen = [(p.name.split("-")[0], json.loads(p.read_text())) for p in
            sorted(payloads.iterdir(), key=lambda p: int(p.stem.rsplit("-", 1)[1]))]
    before = [(s["tool"], s["args"]) for name, s in seen if name == "tool.execute.before"]
    assert before == [("write", {"filePath": target, "content": "hello\n"}), ("read", {"filePath": target}),
                      ("edit", {"filePath": target, "oldString": "hello", "newString": "hello, world"})]
    assert all(s["sessionID"] == session and s["directory"] == str(work) for _, s in seen)
    assert [name for name, _ in seen].count("chat.message") == 2
    assert ("session.compacted", {"sessionID": session, "directory": str(work)}) in seen
