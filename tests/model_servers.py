"""Scripted model servers for the real agents (tests/agents.py): the OpenAI Responses API for
Codex CLI and the Anthropic Messages API for Claude Code, both streamed (SSE), on 127.0.0.1.

Each request that asks for the agent's main loop gets the next scripted reply; a request the
script does not cover (a title, a side question, the script ran out) gets a short plain answer,
so an agent never hangs on a test's mistake. Every request is recorded.

The events are the ones the agents parse: for Codex those of its own test helpers
(codex-rs/core/tests/common/responses.rs: `response.created`, `response.output_item.done`,
`response.completed` with `usage`); for Claude Code the Messages streaming events
(`message_start`, `content_block_start` / `_delta` / `_stop`, `message_delta` with `usage`,
`message_stop`).
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Request:
    path: str
    body: Any
    scripted: bool  # answered from the script


@dataclass
class Reply:
    """One scripted model answer: what it says or calls, and the usage it reports."""

    text: str | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)  # Codex items / Claude tool_use inputs
    usage: dict[str, int] = field(default_factory=dict)
    to: str | None = None  # only for a conversation whose first user message contains this (a subagent's)
    before: Callable[[], None] | None = None  # runs before the answer is sent (the agent is waiting)


class _Server:
    """A threaded HTTP server answering POSTs with SSE from a script."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self._script: list[Reply] = []
        self.fallback = Reply(text="Done.")  # the answer to a request the script does not cover
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                _send(self, 404, b'{"error":{"type":"not_found_error","message":"not found"}}', "application/json")

            def do_HEAD(self) -> None:
                _send(self, 200, b"", "text/plain")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                server._handle(self, body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._script.extend(replies)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._script)

    def scripted_requests(self) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.scripted]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _take(self, path: str, body: Any) -> Reply | None:
        """The first pending reply addressed to this conversation, else the first unaddressed one."""
        with self._lock:
            reply = None
            if self._main_loop(path, body):
                first = _first_user_text(body)
                fits = [r for r in self._script if r.to is not None and r.to in first] or \
                    [r for r in self._script if r.to is None]
                if fits:
                    reply = fits[0]
                    self._script.remove(reply)
            self.requests.append(Request(path, body, reply is not None))
            return reply

    # --- per API ---

    def _main_loop(self, path: str, body: Any) -> bool:
        raise NotImplementedError

    def _handle(self, handler: BaseHTTPRequestHandler, body: Any) -> None:
        raise NotImplementedError


def _first_user_text(body: Any) -> str:
    """The text of the first user message of a Messages or Responses request."""
    messages = body.get("messages") or body.get("input") if isinstance(body, dict) else None
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            return "\n".join(str(part.get("text", "")) for part in content or [] if isinstance(part, dict))
    return ""


def _send(handler: BaseHTTPRequestHandler, status: int, data: bytes, content_type: str) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def _sse(handler: BaseHTTPRequestHandler, events: list[dict[str, Any]]) -> None:
    data = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()
    _send(handler, 200, data, "text/event-stream")


class ResponsesServer(_Server):
    """The OpenAI Responses API (`POST /v1/responses`, streamed) as Codex CLI calls it.

    A `Reply`'s `calls` are output items as Codex reads them: use `shell()` and `apply_patch()`.
    `usage` keys: input, cached, output, reasoning (total is input + output)."""

    def _main_loop(self, path: str, body: Any) -> bool:
        return path.rstrip("/").endswith("/responses") and isinstance(body, dict) and bool(body.get("tools"))

    def _handle(self, handler: BaseHTTPRequestHandler, body: Any) -> None:
        path = handler.path.split("?")[0]
        if path.rstrip("/").endswith("/responses/compact"):
            reply = self._take(path, body) or self.fallback
            summary = reply.text or "Summary of the earlier conversation."
            output = [{"type": "compaction_summary", "encrypted_content": summary}]
            _send(handler, 200, json.dumps({"output": output}).encode(), "application/json")
            return
        if not path.rstrip("/").endswith("/responses"):
            self._take(path, body)
            _send(handler, 404, b'{"error":{"message":"not found","type":"invalid_request_error"}}',
                  "application/json")
            return
        reply = self._take(path, body) or self.fallback
        if reply.before is not None:
            reply.before()
        rid = f"resp_{next(self._ids)}"
        events: list[dict[str, Any]] = [{"type": "response.created", "response": {"id": rid}}]
        if reply.text is not None:
            events.append({"type": "response.output_item.done", "item": {
                "type": "message", "role": "assistant", "id": f"msg_{rid}",
                "content": [{"type": "output_text", "text": reply.text}]}})
        for call in reply.calls:
            events.append({"type": "response.output_item.done", "item": call})
        u = reply.usage
        usage = {"input_tokens": u.get("input", 0), "input_tokens_details": {"cached_tokens": u.get("cached", 0)},
                 "output_tokens": u.get("output", 0),
                 "output_tokens_details": {"reasoning_tokens": u.get("reasoning", 0)},
                 "total_tokens": u.get("input", 0) + u.get("output", 0)}
        events.append({"type": "response.completed", "response": {"id": rid, "usage": usage}})
        _sse(handler, events)


def shell(call_id: str, script: str) -> dict[str, Any]:
    """A Codex shell call: 0.171 offers `exec_command` (one command line, `cmd`)."""
    return {"type": "function_call", "call_id": call_id, "name": "exec_command",
            "arguments": json.dumps({"cmd": script})}


def apply_patch(call_id: str, patch: str) -> dict[str, Any]:
    """Codex's `apply_patch` as the freeform (custom) tool the Responses API calls."""
    return {"type": "custom_tool_call", "call_id": call_id, "name": "apply_patch", "input": patch}


class MessagesServer(_Server):
    """The Anthropic Messages API (`POST /v1/messages`, streamed) as Claude Code calls it.

    A `Reply`'s `calls` are `(name, input)` tool uses: use `tool()`. `usage` keys: input,
    cache_read, cache_write, output. `main` picks the requests the script answers (default:
    those that offer the Write tool, i.e. the agent's main loop, not a title or a summary)."""

    def __init__(self, main: Callable[[Any], bool] | None = None) -> None:
        self._is_main = main or _offers_write
        super().__init__()

    def _main_loop(self, path: str, body: Any) -> bool:
        return path.rstrip("/").endswith("/v1/messages") and self._is_main(body)

    def _handle(self, handler: BaseHTTPRequestHandler, body: Any) -> None:
        path = handler.path.split("?")[0]
        if path.rstrip("/").endswith("/count_tokens"):
            self._take(path, body)
            _send(handler, 200, json.dumps({"input_tokens": 100}).encode(), "application/json")
            return
        if not path.rstrip("/").endswith("/v1/messages"):
            self._take(path, body)
            _send(handler, 404, b'{"type":"error","error":{"type":"not_found_error","message":"not found"}}',
                  "application/json")
            return
        reply = self._take(path, body) or self.fallback
        if reply.before is not None:
            reply.before()
        model = body.get("model", "claude-sonnet-4-5") if isinstance(body, dict) else "claude-sonnet-4-5"
        mid = f"msg_{next(self._ids):04d}"
        u = reply.usage
        start_usage = {"input_tokens": u.get("input", 0), "cache_creation_input_tokens": u.get("cache_write", 0),
                       "cache_read_input_tokens": u.get("cache_read", 0), "output_tokens": 1}
        events: list[dict[str, Any]] = [{"type": "message_start", "message": {
            "id": mid, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": start_usage}}]
        index = 0
        if reply.text is not None:
            events += [{"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
                       {"type": "content_block_delta", "index": index,
                        "delta": {"type": "text_delta", "text": reply.text}},
                       {"type": "content_block_stop", "index": index}]
            index += 1
        for call in reply.calls:
            events += [{"type": "content_block_start", "index": index, "content_block": {
                           "type": "tool_use", "id": call["id"], "name": call["name"], "input": {}}},
                       {"type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": json.dumps(call["input"])}},
                       {"type": "content_block_stop", "index": index}]
            index += 1
        events += [{"type": "message_delta", "delta": {"stop_reason": "tool_use" if reply.calls else "end_turn",
                                                      "stop_sequence": None},
                    "usage": {**start_usage, "output_tokens": u.get("output", 0)}},
                   {"type": "message_stop"}]
        _sse(handler, events)


def tool(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "input": arguments}


def _offers_write(body: Any) -> bool:
    tools = body.get("tools") if isinstance(body, dict) else None
    return isinstance(tools, list) and any(isinstance(t, dict) and t.get("name") == "Write" for t in tools)
