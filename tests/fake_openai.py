"""A small OpenAI-compatible HTTP server for tests, with scripted failures.

Serves `/v1/chat/completions`, `/v1/responses` and `/v1/responses/compact` on 127.0.0.1 (a free
port) from a thread, records every request it gets, and answers from a script first: each scripted
step is used once, in order, by the next request to a matching path; when the script is empty it
answers successfully. Errors use OpenAI's JSON error shape so that the real `openai` client raises
its real exception classes.

    with FakeOpenAI() as fake:
        fake.script(Step(status=500), Step(status=429, retry_after=0), Step(garbage=True))
        ... point llm.base_url at fake.base_url ...
        assert fake.requests[0].path == "/v1/chat/completions"
"""

from __future__ import annotations

import base64
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 403: "permission_denied",
               404: "not_found_error", 429: "rate_limit_exceeded", 500: "server_error", 503: "server_error"}


@dataclass
class Step:
    """One scripted answer. By default a success; set `status` for an error."""

    status: int = 200
    code: str | None = None
    """OpenAI error code, e.g. `context_length_exceeded`, `invalid_api_key`, `insufficient_quota`."""
    message: str | None = None
    retry_after: float | None = None
    """Sent as a Retry-After header (seconds)."""
    garbage: bool = False
    """Answer 200 with a body that is not JSON."""
    body: Any = None
    """Answer 200 with this JSON body instead of the normal one (a malformed but parseable answer)."""
    delay: float = 0.0
    """Seconds to wait before answering (a slow endpoint)."""
    path: str | None = None
    """Only requests to this path (e.g. `/v1/responses/compact`) use this step."""

    @staticmethod
    def context_exceeded(**kwargs: Any) -> Step:
        return Step(status=400, code="context_length_exceeded",
                    message="This model's maximum context length is 1000 tokens. Please reduce the length of the input.",
                    **kwargs)


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeOpenAI:
    summary: str = "Progress: the parser is fixed.\nNext: run the tests in tests/test_parser.py."
    """The summary text that chat and responses answers carry."""
    max_input_items: int | None = None
    """When set, a request with more input items (or chat messages) fails with context_length_exceeded."""
    requests: list[Request] = field(default_factory=list)
    _script: list[Step] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopping: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                fake._handle(self, Request(self.path, {k.lower(): v for k, v in self.headers.items()}, body))

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="fake-openai", daemon=True)
        self._thread.start()

    # --- control -------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def script(self, *steps: Step) -> None:
        with self._lock:
            self._script.extend(steps)

    def clear(self) -> None:
        """Forget the scripted steps not used yet: answer normally from now on."""
        with self._lock:
            self._script.clear()

    def pending(self) -> int:
        """Scripted steps not used yet."""
        with self._lock:
            return len(self._script)

    def paths(self) -> list[str]:
        return [request.path for request in self.requests]

    def close(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeOpenAI:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- serving -------------------------------------------------------------------------------

    def _next_step(self, path: str) -> Step | None:
        with self._lock:
            for index, step in enumerate(self._script):
                if step.path is None or step.path == path:
                    return self._script.pop(index)
        return None

    def _handle(self, handler: BaseHTTPRequestHandler, request: Request) -> None:
        with self._lock:
            self.requests.append(request)
        step = self._next_step(request.path) or Step()
        if step.delay and self._stopping.wait(step.delay):
            return
        if step.garbage:
            return _send(handler, 200, b"<html>502 Bad Gateway</html> not json {", "application/json")
        if step.status != 200:
            return _send_error(handler, step.status, step.code, step.message, step.retry_after)
        if step.body is not None:
            return _send(handler, 200, json.dumps(step.body).encode(), "application/json")
        body = request.body if isinstance(request.body, dict) else {}
        size = len(body.get("messages") or body.get("input") or [])
        if self.max_input_items is not None and size > self.max_input_items:
            return _send_error(handler, 400, "context_length_exceeded",
                               f"Input has {size} items; this model takes at most {self.max_input_items}.", None)
        if request.path.endswith("/chat/completions"):
            return _send_json(handler, self._chat(body))
        if request.path.endswith("/responses/compact"):
            return _send_json(handler, self._compact(body))
        if request.path.endswith("/responses"):
            return _send_json(handler, self._response(body))
        return _send_error(handler, 404, "not_found", f"no route {request.path}", None)

    def _chat(self, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": 0,
            "model": body.get("model", "fake"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": self.summary}}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
        }

    def _response(self, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": f"resp_{len(self.requests)}", "object": "response", "created_at": 0, "status": "completed",
            "model": body.get("model", "fake"), "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
            "output": [{"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                        "content": [{"type": "output_text", "text": self.summary, "annotations": []}]}],
            "usage": _usage(),
        }

    def _compact(self, body: dict[str, Any]) -> dict[str, Any]:
        """User messages of the input, then one opaque compaction item, as OpenAI answers."""
        items = body.get("input") if isinstance(body.get("input"), list) else []
        users = [{"type": "message", "role": "user", "content": item.get("content")} for item in items
                 if isinstance(item, dict) and item.get("type") == "message" and item.get("role") == "user"]
        secret = base64.b64encode(("compacted:" + self.summary).encode() * 40).decode()
        return {"id": f"cmp_{len(self.requests)}", "object": "response.compaction", "created_at": 0,
                "output": users + [{"type": "compaction", "id": "cmp_item_1", "encrypted_content": secret}],
                "usage": _usage()}


def _usage() -> dict[str, Any]:
    return {"input_tokens": 100, "output_tokens": 20, "total_tokens": 120,
            "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}


def _send(handler: BaseHTTPRequestHandler, status: int, data: bytes, content_type: str,
          headers: dict[str, str] | None = None) -> None:
    try:
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(data)
    except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout, cancel)
        pass


def _send_json(handler: BaseHTTPRequestHandler, body: Any) -> None:
    _send(handler, 200, json.dumps(body).encode(), "application/json")


def _send_error(handler: BaseHTTPRequestHandler, status: int, code: str | None, message: str | None,
                retry_after: float | None) -> None:
    error = {"message": message or f"scripted HTTP {status}", "type": ERROR_TYPES.get(status, "server_error"),
             "param": None, "code": code}
    headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else None
    _send(handler, status, json.dumps({"error": error}).encode(), "application/json", headers)
