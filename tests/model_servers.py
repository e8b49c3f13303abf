"""Scripted model servers for the real agents (tests/agents.py), all streamed (SSE) on 127.0.0.1:
the OpenAI Responses API for Codex CLI, the Anthropic Messages API for Claude Code, OpenAI Chat
Completions for qwen-code and OpenCode, and the Gemini API for Gemini CLI.

Each request that asks for the agent's main loop gets the next scripted reply; a request the
script does not cover (a title, a side question, the script ran out) gets a short plain answer,
so an agent never hangs on a test's mistake. Every request is recorded.

The events are the ones the agents parse: for Codex those of its own test helpers
(codex-rs/core/tests/common/responses.rs: `response.created`, `response.output_item.done`,
`response.completed` with `usage`); for Claude Code the Messages streaming events
(`message_start`, `content_block_start` / `_delta` / `_stop`, `message_delta` with `usage`,
`message_stop`); for Chat Completions the `chat.completion.chunk` deltas (`tool_calls` by index)
and a last chunk with `usage` (`stream_options.include_usage`); for Gemini the
`GenerateContentResponse` chunks of `streamGenerateContent?alt=sse` with `usageMetadata`.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Request:
    path: str
    body: Any
    scripted: bool  # answered from the script
    at: float = field(default_factory=time.monotonic)


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
                server._handle(self, None)

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

    def seen(self) -> str:
        """The requests so far, one line each: for an assertion's message."""
        with self._lock:
            return "\n".join(f"{r.path} scripted={r.scripted} tools={len(r.body.get('tools') or []) if isinstance(r.body, dict) else 0} "
                             f"first={_first_user_text(r.body)[:60]!r} at={r.at:.2f}" for r in self.requests)

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
    """The text of the first user message of a Messages, Responses, Chat Completions or Gemini request."""
    if not isinstance(body, dict):
        return ""
    messages = body.get("messages") or body.get("input") or body.get("contents")
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content", message.get("parts"))
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
        if handler.command == "GET":
            self._take(path, body)
            _send(handler, 404, b'{"error":{"message":"not found","type":"invalid_request_error"}}', "application/json")
            return
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
    those that offer the Write tool, i.e. the agent's main loop, not a title, a summary or a
    prompt suggestion)."""

    def __init__(self, main: Callable[[Any], bool] | None = None) -> None:
        self._is_main = main or _main_loop_request
        super().__init__()

    def _main_loop(self, path: str, body: Any) -> bool:
        return path.rstrip("/").endswith("/v1/messages") and self._is_main(body)

    def _handle(self, handler: BaseHTTPRequestHandler, body: Any) -> None:
        path = handler.path.split("?")[0]
        if handler.command == "GET":
            self._take(path, body)
            _send(handler, 404, b'{"type":"error","error":{"type":"not_found_error","message":"not found"}}',
                  "application/json")
            return
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


SUGGESTION = "[SUGGESTION MODE:"
"""How Claude Code's request for a prompt suggestion begins (its last user message)."""


def tool(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "input": arguments}


def _main_loop_request(body: Any) -> bool:
    """A request of the agent's main loop: it offers the Write tool, and it is not Claude Code's
    guess at the user's next prompt (sent after a turn ends, with the same tools, on its own
    timing: it would take the reply scripted for the next turn, or the next run's)."""
    tools = body.get("tools") if isinstance(body, dict) else None
    if not (isinstance(tools, list) and any(isinstance(t, dict) and t.get("name") == "Write" for t in tools)):
        return False
    last = (body.get("messages") or [{}])[-1]
    return not (isinstance(last.get("content"), str) and last["content"].startswith(SUGGESTION))


class ChatCompletionsServer(_Server):
    """OpenAI Chat Completions (`POST .../chat/completions`, streamed) as qwen-code and OpenCode call it.

    A `Reply`'s `calls` are `(name, arguments)` function calls: use `tool()`. `usage` keys: input
    (prompt_tokens, cached included), cached (prompt_tokens_details.cached_tokens), output,
    reasoning. The main loop is a request that offers tools and does not ask for a summary; any
    other request (a title, a side question) gets `fallback`, or `summary` when the agent asks to
    compress its history (its `usage` counts: qwen-code keeps a compression only when the
    summary's input - 1000 exceeds its output)."""

    model = "qwen3-coder-plus"

    def __init__(self) -> None:
        self.summary = Reply(text="<state_snapshot>The user asked for hello.txt; it was written and changed.</state_snapshot>",
                             usage={"input": 2000, "output": 200})
        super().__init__()

    def _main_loop(self, path: str, body: Any) -> bool:
        return (path.rstrip("/").endswith("/chat/completions") and isinstance(body, dict) and bool(body.get("tools"))
                and not _asks_summary(body))

    def _handle(self, handler: BaseHTTPRequestHandler, body: Any) -> None:
        path = handler.path.split("?")[0]
        if handler.command == "GET" and path.rstrip("/").endswith("/models"):
            self._take(path, body)
            data = {"object": "list", "data": [{"id": self.model, "object": "model", "created": 0, "owned_by": "test"}]}
            _send(handler, 200, json.dumps(data).encode(), "application/json")
            return
        if handler.command == "GET" or not path.rstrip("/").endswith("/chat/completions"):
            self._take(path, body)
            _send(handler, 404, b'{"error":{"message":"not found","type":"invalid_request_error"}}', "application/json")
            return
        reply = self._take(path, body)
        if reply is None:
            reply = self.summary if _asks_summary(body) else self.fallback
        if reply.before is not None:
            reply.before()
        model = body.get("model", self.model) if isinstance(body, dict) else self.model
        cid = f"chatcmpl-{next(self._ids)}"
        u = reply.usage
        usage = {"prompt_tokens": u.get("input", 0), "completion_tokens": u.get("output", 0),
                 "total_tokens": u.get("input", 0) + u.get("output", 0),
                 "prompt_tokens_details": {"cached_tokens": u.get("cached", 0)},
                 "completion_tokens_details": {"reasoning_tokens": u.get("reasoning", 0)}}
        finish = "tool_calls" if reply.calls else "stop"
        if not (isinstance(body, dict) and body.get("stream")):
            message: dict[str, Any] = {"role": "assistant", "content": reply.text}
            if reply.calls:
                message["tool_calls"] = [{"id": c["id"], "type": "function", "function": {
                    "name": c["name"], "arguments": json.dumps(c["input"])}} for c in reply.calls]
            data = {"id": cid, "object": "chat.completion", "created": 1700000000, "model": model,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}
            _send(handler, 200, json.dumps(data).encode(), "application/json")
            return

        def chunk(choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
            return {"id": cid, "object": "chat.completion.chunk", "created": 1700000000, "model": model,
                    "choices": choices, **extra}
        chunks = [chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])]
        if reply.text is not None:
            chunks.append(chunk([{"index": 0, "delta": {"content": reply.text}, "finish_reason": None}]))
        for i, call in enumerate(reply.calls):
            arguments = json.dumps(call["input"])
            half = len(arguments) // 2  # the arguments arrive in two pieces, as real servers stream them
            chunks.append(chunk([{"index": 0, "delta": {"tool_calls": [{
                "index": i, "id": call["id"], "type": "function",
                "function": {"name": call["name"], "arguments": arguments[:half]}}]}, "finish_reason": None}]))
            chunks.append(chunk([{"index": 0, "delta": {"tool_calls": [{
                "index": i, "function": {"arguments": arguments[half:]}}]}, "finish_reason": None}]))
        chunks.append(chunk([{"index": 0, "delta": {}, "finish_reason": finish}]))
        chunks.append(chunk([], usage=usage))
        data = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        _send(handler, 200, data.encode(), "text/event-stream")


def _asks_summary(body: Any) -> bool:
    """A request to compress the history: its last message asks for a summary (qwen-code's and Gemini
    CLI's `<state_snapshot>`, OpenCode's compaction prompt)."""
    if not isinstance(body, dict):
        return False
    messages = body.get("messages") or body.get("contents")
    last = messages[-1] if isinstance(messages, list) and messages else None
    if not isinstance(last, dict):
        return False
    content = last.get("content", last.get("parts"))
    text = content if isinstance(content, str) else " ".join(
        str(part.get("text", "")) for part in content or [] if isinstance(part, dict))
    return "state_snapshot" in text or "summar" in text.lower()


class GeminiServer(_Server):
    """The Gemini API as Gemini CLI calls it: `POST /v1beta/models/<model>:streamGenerateContent?alt=sse`,
    `:generateContent` and `:countTokens`.

    A `Reply`'s `calls` are `(name, args)` function calls: use `tool()`. `usage` keys: input
    (promptTokenCount, cached included), cached (cachedContentTokenCount), output
    (candidatesTokenCount), reasoning (thoughtsTokenCount). The main loop is a request that offers
    tools and does not ask for a summary; any other request gets `fallback`, or `summary` when the
    agent asks to compress its history."""

    def __init__(self) -> None:
        self.summary = Reply(text="<state_snapshot>The user asked for hello.txt; it was written and changed.</state_snapshot>",
                             usage={"input": 2000, "output": 200})
        super().__init__()

    def _main_loop(self, path: str, body: Any) -> bool:
        return (":streamGenerateContent" in path and isinstance(body, dict) and bool(body.get("tools"))
                and not _asks_summary(body))

    def _handle(self, handler: BaseHTTPRequestHandler, body: Any) -> None:
        path = handler.path.split("?")[0]
        model = path.rsplit("/", 1)[-1].split(":", 1)[0]
        if handler.command == "GET" and path.rstrip("/").endswith("/models"):
            self._take(path, body)
            data = {"models": [{"name": "models/gemini-2.5-pro", "inputTokenLimit": 1048576}]}
            _send(handler, 200, json.dumps(data).encode(), "application/json")
            return
        if path.endswith(":countTokens"):
            self._take(path, body)
            size = len(json.dumps(body)) // 4 if body is not None else 0
            _send(handler, 200, json.dumps({"totalTokens": size}).encode(), "application/json")
            return
        if handler.command == "GET" or not path.endswith((":streamGenerateContent", ":generateContent")):
            self._take(path, body)
            _send(handler, 404, b'{"error":{"code":404,"message":"not found","status":"NOT_FOUND"}}',
                  "application/json")
            return
        reply = self._take(path, body)
        if reply is None:
            reply = self.summary if _asks_summary(body) else self.fallback
        if reply.before is not None:
            reply.before()
        parts: list[dict[str, Any]] = []
        if reply.text is not None:
            parts.append({"text": reply.text})
        for call in reply.calls:
            parts.append({"functionCall": {"id": call["id"], "name": call["name"], "args": call["input"]}})
        u = reply.usage
        usage = {"promptTokenCount": u.get("input", 0), "candidatesTokenCount": u.get("output", 0),
                 "cachedContentTokenCount": u.get("cached", 0), "thoughtsTokenCount": u.get("reasoning", 0),
                 "totalTokenCount": u.get("input", 0) + u.get("output", 0) + u.get("reasoning", 0)}
        response = {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
                    "usageMetadata": usage, "modelVersion": model, "responseId": f"resp-{next(self._ids)}"}
        if path.endswith(":generateContent"):
            _send(handler, 200, json.dumps(response).encode(), "application/json")
            return
        _send(handler, 200, f"data: {json.dumps(response)}\r\n\r\n".encode(), "text/event-stream")
