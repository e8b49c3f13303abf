"""A scripted ACP agent for the proxy's tests and benchmark: newline-delimited JSON-RPC on stdio,
standard library only, every answer deterministic (session ids count from 1).

What a prompt's text asks for:
- `write <path> <text>`: a tool call (kind edit, the path as its location), a permission request;
  when allowed, `fs/write_text_file` of <text> to <path> through the editor, the tool call
  completed; then "Done." streamed;
- `run <command>`: a tool call of kind execute, a permission request, completed (nothing runs);
- `tool <kind> <title>`: a tool call of that kind (delete, move...), a permission request, completed
  (nothing is done);
- `die <code>`: one chunk, then the process exits with <code> (a crash mid-turn);
- `quiet`: the turn ends at once, nothing streamed;
- anything else: its words streamed back in three chunks ("Echo: …").
After each turn but `quiet` it reports `usage_update` when ACP_AGENT_USAGE is set (used = 1000 per
turn, size 200000; ACP_AGENT_USED, when set, is reported as `used` instead). With ACP_AGENT_MODEL set,
`session/new` answers that model id as the session's (`models.currentModelId`); with
ACP_AGENT_SESSION_PREFIX set, its session ids start with it. With ACP_AGENT_LOCATIONS set to
`<count>:<chars>`, a `tool` call names a location whose path is <chars> long, then <count> short ones. `session/load` replays the session's turns (user and agent chunks); with
ACP_AGENT_REFUSE_LOAD set it is refused (an error answer, nothing replayed). Every line it receives is appended to ACP_AGENT_LOG when set, so a test sees exactly what reached the agent.
With ACP_AGENT_LINKS set, each prompt appends there the thread that `ctxd.acplink.served_thread`
finds for the environment of the MCP server named "ctxd" in that session's `session/new` (what
`ctxd mcp`, started by the agent with that environment, would serve at that moment).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

LOG = os.environ.get("ACP_AGENT_LOG")
USAGE = bool(os.environ.get("ACP_AGENT_USAGE") or os.environ.get("ACP_AGENT_USED"))
USED = os.environ.get("ACP_AGENT_USED")
MODEL = os.environ.get("ACP_AGENT_MODEL")
SESSION_PREFIX = os.environ.get("ACP_AGENT_SESSION_PREFIX", "")
LOCATIONS = os.environ.get("ACP_AGENT_LOCATIONS")
out = sys.stdout.buffer
sessions: dict[str, list[tuple[str, str]]] = {}  # id -> [(user text, agent text)]
mcp_env: dict[str, dict[str, str]] = {}  # id -> the environment of the MCP server named "ctxd"
next_request = [0]
pending: list[dict[str, Any]] = []  # messages read while waiting for an answer


def send(message: dict[str, Any]) -> None:
    out.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
    out.flush()


def read() -> dict[str, Any] | None:
    if pending:
        return pending.pop(0)
    line = sys.stdin.buffer.readline()
    if not line:
        return None
    if LOG:
        with open(LOG, "ab") as handle:
            handle.write(line if line.endswith(b"\n") else line + b"\n")
    return json.loads(line)


def ask(method: str, params: dict[str, Any]) -> Any:
    """A request to the editor; waits for its answer (other messages wait their turn)."""
    next_request[0] += 1
    msg_id = next_request[0] + 100
    send({"id": msg_id, "method": method, "params": params})
    held = []
    while True:
        message = read()
        if message is None:
            sys.exit(0)
        if message.get("id") == msg_id and "method" not in message:
            pending.extend(held)
            return message.get("result")
        held.append(message)


def update(session: str, body: dict[str, Any]) -> None:
    send({"method": "session/update", "params": {"sessionId": session, "update": body}})


def chunk(session: str, text: str) -> None:
    update(session, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})


def tool_turn(session: str, call_id: str, title: str, kind: str, path: str | None) -> bool:
    call: dict[str, Any] = {"toolCallId": call_id, "title": title, "kind": kind, "status": "pending"}
    if path:
        call["locations"] = [{"path": path}]
    elif LOCATIONS:
        count, chars = map(int, LOCATIONS.split(":"))
        call["locations"] = [{"path": "/LOCMARK" + "p" * chars}, *({"path": f"src/{i}.py", "line": i} for i in range(count))]
    update(session, {"sessionUpdate": "tool_call", **call})
    answer = ask("session/request_permission", {
        "sessionId": session, "toolCall": {"toolCallId": call_id, "title": title, "kind": kind},
        "options": [{"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                    {"optionId": "no", "name": "Reject", "kind": "reject_once"}]})
    outcome = (answer or {}).get("outcome") or {}
    return outcome.get("outcome") == "selected" and outcome.get("optionId") == "yes"


def prompt(session: str, text: str) -> str:
    words = text.split(" ", 2)
    turn_number = len(sessions[session]) + 1
    said = ""
    if words[0] == "write" and len(words) == 3:
        path, content = words[1], words[2]
        call_id = f"call-{turn_number}"
        if tool_turn(session, call_id, f"Write {os.path.basename(path)}", "edit", path):
            ask("fs/write_text_file", {"sessionId": session, "path": path, "content": content})
            update(session, {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "completed",
                             "content": [{"type": "content", "content": {"type": "text", "text": f"wrote {path}"}}]})
        else:
            update(session, {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "failed"})
        said = "Done."
        chunk(session, said)
    elif words[0] in ("run", "tool"):
        call_id = f"call-{turn_number}"
        kind, title = ("execute", f"Run {text[4:]}") if words[0] == "run" else (words[1], " ".join(words[2:]))
        allowed = tool_turn(session, call_id, title, kind, None)
        update(session, {"sessionUpdate": "tool_call_update", "toolCallId": call_id,
                         "status": "completed" if allowed else "failed", "rawOutput": {"exitCode": 0}})
        said = "Ran."
        chunk(session, said)
    elif words[0] == "die":
        chunk(session, "dying")
        sys.exit(int(words[1]) if len(words) > 1 else 1)
    elif words[0] == "quiet":
        sessions[session].append((text, ""))
        return "end_turn"
    else:
        said = f"Echo: {text}"
        for part in (said[:3], said[3:9], said[9:]):
            chunk(session, part)
    sessions[session].append((text, said))
    if USAGE:
        used = int(USED) if USED else 1000 * len(sessions[session])
        update(session, {"sessionUpdate": "usage_update", "used": used, "size": 200000})
    return "end_turn"


def note_mcp(session: str, params: dict[str, Any]) -> None:
    for server in params.get("mcpServers") or []:
        if server.get("name") == "ctxd":
            mcp_env[session] = {e["name"]: e["value"] for e in server.get("env") or []}


def main() -> None:
    while True:
        message = read()
        if message is None:
            return
        method, msg_id, params = message.get("method"), message.get("id"), message.get("params") or {}
        if method == "initialize":
            send({"id": msg_id, "result": {"protocolVersion": 1, "agentCapabilities": {"loadSession": True},
                                           "authMethods": [], "agentInfo": {"name": "scripted", "version": "1.0"}}})
        elif method == "session/new":
            session = f"{SESSION_PREFIX}sess-{len(sessions) + 1}"
            sessions[session] = []
            note_mcp(session, params)
            result: dict[str, Any] = {"sessionId": session}
            if MODEL:
                result["models"] = {"currentModelId": MODEL, "availableModels": [{"modelId": MODEL, "name": "model"}]}
            send({"id": msg_id, "result": result})
        elif method == "session/load":
            session = params["sessionId"]
            if os.environ.get("ACP_AGENT_REFUSE_LOAD"):  # an agent that cannot load the session (its history is gone)
                send({"id": msg_id, "error": {"code": -32002, "message": f"Resource not found: {session}"}})
                continue
            note_mcp(session, params)
            for user, agent in sessions.setdefault(session, []):
                update(session, {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": user}})
                if agent:
                    chunk(session, agent)
            send({"id": msg_id, "result": {}})
        elif method == "session/prompt":
            text = "".join(b.get("text", "") for b in params.get("prompt", []) if isinstance(b, dict))
            if os.environ.get("ACP_AGENT_LINKS"):
                from ctxd.acplink import served_thread

                with open(os.environ["ACP_AGENT_LINKS"], "a") as handle:
                    handle.write(json.dumps({"session": params["sessionId"],
                                             "served": served_thread(mcp_env.get(params["sessionId"], {}))}) + "\n")
            send({"id": msg_id, "result": {"stopReason": prompt(params["sessionId"], text)}})
        elif method == "session/cancel":
            pass
        elif isinstance(method, str) and msg_id is not None:
            if method == "_bench/echo":
                send({"id": msg_id, "result": params})
            else:
                send({"id": msg_id, "error": {"code": -32601, "message": f"Method not found: {method}"}})


if __name__ == "__main__":
    main()
