"""The Model Context Protocol on stdio, as small as an agent needs it: newline-delimited JSON-RPC
2.0, `initialize`, `ping`, `tools/list`, `tools/call`, `resources/list`, `resources/read`.

Why not the `mcp` SDK: importing it takes about 0.75 s, and agents start their MCP servers at the
start of every session and often begin the first turn with a server still pending. This module
imports only the standard library (not even `typing`, nor `json` and its `re`: `ctxd.leanjson`),
so `initialize` is answered as soon as Python is up; the tools' work (and everything it imports)
starts after the tools are listed. The official MCP client checks it in the tests
(tests/test_mcp.py).

Tools are declared with their JSON Schema; arguments are checked against it here (types,
required, enums; unknown arguments refused), so a wrong argument gets a tool error naming it,
never a traceback. A call runs on a worker thread: the reader keeps answering `ping` meanwhile.
"""

from __future__ import annotations

import collections
import sys
import threading

from ctxd import leanjson

TYPE_CHECKING = False  # (`typing` alone is milliseconds of an agent's wait for `initialize`)
if TYPE_CHECKING:
    from collections.abc import Callable
    from concurrent.futures import ThreadPoolExecutor
    from typing import Any, BinaryIO, NamedTuple

PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
"""The versions answered, newest first: a client's own is echoed when it is one of them."""
MAX_LINE_BYTES = 16 * 1024 * 1024
MAX_INTEGER = 2**53 - 1  # JSON numbers past this are not exact in most clients

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603


class ToolError(Exception):
    """A tool's failure, told to the model as the tool's result (`isError`), never as a crash."""


if TYPE_CHECKING:
    class _ToolFields(NamedTuple):
        name: str
        description: str
        properties: dict[str, dict[str, Any]]  # argument -> its JSON Schema (with "default" when optional)
        run: Callable[..., dict[str, Any]]  # called with the checked arguments; raises ToolError
        required: tuple[str, ...] = ()
        meta: dict[str, Any] | None = None
        title: str | None = None

    class _ResourceFields(NamedTuple):
        uri: str
        name: str
        mime_type: str
        read: Callable[[dict[str, Any]], str]  # given the read's `params._meta` (a client may pass state there)
        meta: dict[str, Any] | None = None
else:  # the same, without `typing`
    _ToolFields = collections.namedtuple("_ToolFields", "name description properties run required meta title",
                                         defaults=[(), None, None])
    _ResourceFields = collections.namedtuple("_ResourceFields", "uri name mime_type read meta", defaults=[None])


class Tool(_ToolFields):
    """One tool. (Named tuples, not dataclasses: importing `dataclasses` imports `inspect`, a
    quarter of what `ctxd mcp` imported before answering `initialize`.)"""

    __slots__ = ()

    def listing(self) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "object", "properties": self.properties}
        if self.required:
            schema["required"] = list(self.required)
        entry: dict[str, Any] = {"name": self.name, "description": self.description, "inputSchema": schema}
        if self.title:
            entry["title"] = self.title
        if self.meta:
            entry["_meta"] = self.meta
        return entry


class Resource(_ResourceFields):
    __slots__ = ()

    def listing(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"uri": self.uri, "name": self.name, "mimeType": self.mime_type}
        if self.meta:
            entry["_meta"] = self.meta
        return entry


def _type_error(name: str, schema: dict[str, Any], value: Any) -> str | None:
    """Why `value` does not fit `schema`, or None."""
    options = schema.get("anyOf")
    if isinstance(options, list):
        problems = [_type_error(name, s, value) for s in options]
        if None in problems:
            return None
        fitting = [p for s, p in zip(options, problems) if _type_error(name, {"type": s.get("type")}, value) is None]
        return fitting[0] if fitting else \
            f"{name}: must be {' or '.join(str(s.get('type')) for s in options)}, not {_shown(value)}"
    kind = schema.get("type")
    fits = {
        "string": isinstance(value, str),
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "boolean": isinstance(value, bool),
        "null": value is None,
        "object": isinstance(value, dict),
        "number": isinstance(value, (int, float)) and not isinstance(value, bool),
    }.get(str(kind), True)
    if not fits:
        article = "an" if str(kind)[:1] in "aeiou" else "a"
        return f"{name}: must be {article} {kind}, not {_shown(value)}"
    if kind == "integer" and not -MAX_INTEGER <= value <= MAX_INTEGER:
        return f"{name}: must be at most {MAX_INTEGER}, not {_shown(value)}"
    if "minimum" in schema and value < schema["minimum"]:
        return f"{name}: must be at least {schema['minimum']}, not {_shown(value)}"
    if "maximum" in schema and value > schema["maximum"]:
        return f"{name}: must be at most {schema['maximum']}, not {_shown(value)}"
    if "minLength" in schema and len(value) < schema["minLength"]:
        return f"{name}: must be at least {schema['minLength']} characters long"
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        return f"{name}: must be at most {schema['maxLength']} characters long, not {len(value)}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{name}: must be one of {', '.join(repr(v) for v in schema['enum'])}, not {_shown(value)}"
    return None


def _shown(value: Any) -> str:
    text = leanjson.dumps(value, ascii_only=False)
    return text if len(text) <= 60 else text[:57] + "..."


def check_arguments(tool: Tool, arguments: Any) -> dict[str, Any]:
    """The arguments, checked against the tool's schema and completed with defaults."""
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise ToolError(f"the arguments of {tool.name} must be an object, not {_shown(arguments)}")
    unknown = sorted(set(arguments) - set(tool.properties))
    if unknown:
        raise ToolError(f"{tool.name} takes no argument {', '.join(unknown)} (it takes: "
                        f"{', '.join(tool.properties) or 'none'})")
    checked: dict[str, Any] = {}
    for name, schema in tool.properties.items():
        if name not in arguments:
            if name in tool.required:
                raise ToolError(f"{name}: required")
            checked[name] = schema.get("default")
            continue
        problem = _type_error(name, schema, arguments[name])
        if problem is not None:
            raise ToolError(problem)
        checked[name] = arguments[name]
    return checked


class Server:
    """One client on a pair of byte streams, until it closes them."""

    def __init__(self, name: str, version: str, instructions: str, tools: list[Tool],
                 resources: list[Resource] | None = None, on_listed: Callable[[], None] | None = None) -> None:
        self.name, self.version, self.instructions = name, version, instructions
        self.tools = {tool.name: tool for tool in tools}
        self.resources = {resource.uri: resource for resource in resources or []}
        self.on_listed = on_listed  # after the tools/list answer: the agent has what it waits for at its start
        self._write_lock = threading.Lock()
        self._out: BinaryIO | None = None
        self._workers: ThreadPoolExecutor | None = None  # made at the first call: not on `initialize`'s path

    def serve(self, stdin: BinaryIO, stdout: BinaryIO) -> None:
        self._out = stdout
        try:
            while True:
                line = stdin.readline(MAX_LINE_BYTES + 1)
                if not line:
                    return
                if len(line) > MAX_LINE_BYTES:
                    self._error(None, INVALID_REQUEST, f"a message over {MAX_LINE_BYTES} bytes")
                    while line and not line.endswith(b"\n"):  # the rest of that line
                        line = stdin.readline(MAX_LINE_BYTES)
                    continue
                if line.strip():
                    self._message(line)
        finally:
            if self._workers is not None:
                self._workers.shutdown(wait=True)

    def _submit(self, work: Callable[..., None], *args: Any) -> None:
        """`work` on a worker thread (the reader goes on answering `ping`)."""
        if self._workers is None:
            from concurrent.futures import ThreadPoolExecutor

            self._workers = ThreadPoolExecutor(max_workers=4, thread_name_prefix="ctxd-mcp-call")
        self._workers.submit(self._answered, work, *args)

    def _answered(self, work: Callable[..., None], msg_id: Any, *args: Any) -> None:
        """`work`, and an error answer when it failed before it answered (else the agent waits for
        the answer until its own timeout)."""
        try:
            work(msg_id, *args)
        except Exception as error:  # noqa: BLE001 - answered, never the session's end
            self._error(msg_id, INTERNAL_ERROR, f"failed inside ctxd: {type(error).__name__}")

    # --- one message ---

    def _message(self, line: bytes) -> None:
        try:
            message = leanjson.loads(line)
        except ValueError:
            self._error(None, PARSE_ERROR, "Parse error: not JSON")
            return
        batch = message if isinstance(message, list) else [message]
        for one in batch:
            self._one(one)

    def _one(self, message: Any) -> None:
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            self._error(message.get("id") if isinstance(message, dict) else None, INVALID_REQUEST,
                        "Invalid Request")
            return
        method, msg_id, params = message.get("method"), message.get("id"), message.get("params")
        if not isinstance(method, str):
            return  # a response to nothing we asked, or garbage without an id worth answering
        if "id" not in message:
            return  # notifications (cancelled, progress, roots): nothing to answer
        if method == "initialize":
            asked = params.get("protocolVersion") if isinstance(params, dict) else None
            version = asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0]
            capabilities: dict[str, Any] = {"tools": {"listChanged": False}}
            if self.resources:
                capabilities["resources"] = {"listChanged": False, "subscribe": False}
            self._reply(msg_id, {"protocolVersion": version, "capabilities": capabilities,
                                 "serverInfo": {"name": self.name, "version": self.version},
                                 "instructions": self.instructions})
        elif method == "ping":
            self._reply(msg_id, {})
        elif method == "tools/list":
            self._reply(msg_id, {"tools": [tool.listing() for tool in self.tools.values()]})
            if self.on_listed is not None:
                self.on_listed()
        elif method == "tools/call":
            self._submit(self._call, msg_id, params)
        elif method == "resources/list":
            self._reply(msg_id, {"resources": [resource.listing() for resource in self.resources.values()]})
        elif method == "resources/templates/list":
            self._reply(msg_id, {"resourceTemplates": []})
        elif method == "resources/read":
            self._submit(self._read_resource, msg_id, params)
        elif method in ("prompts/list",):
            self._reply(msg_id, {"prompts": []})
        else:
            self._error(msg_id, METHOD_NOT_FOUND, f"Method not found: {method}")

    def _call(self, msg_id: Any, params: Any) -> None:
        name = params.get("name") if isinstance(params, dict) else None
        tool = self.tools.get(name) if isinstance(name, str) else None
        if tool is None:
            self._error(msg_id, INVALID_PARAMS, f"Unknown tool: {name!r}")
            return
        try:
            value = tool.run(**check_arguments(tool, params.get("arguments")))
        except ToolError as error:
            self._reply(msg_id, {"content": [{"type": "text", "text": str(error)}], "isError": True})
            return
        except Exception as error:  # noqa: BLE001 - a bug of ours is the tool's error, never the session's end
            self._reply(msg_id, {"content": [{"type": "text", "text": f"{tool.name} failed inside ctxd: "
                                              f"{type(error).__name__}"}], "isError": True})
            return
        text = leanjson.dumps(value, ascii_only=False)
        self._reply(msg_id, {"content": [{"type": "text", "text": text}], "structuredContent": value,
                             "isError": False})

    def _read_resource(self, msg_id: Any, params: Any) -> None:
        uri = params.get("uri") if isinstance(params, dict) else None
        resource = self.resources.get(uri) if isinstance(uri, str) else None
        if resource is None:
            self._error(msg_id, INVALID_PARAMS, f"Unknown resource: {uri!r}")
            return
        meta = params.get("_meta") if isinstance(params.get("_meta"), dict) else {}
        try:
            text = resource.read(meta)
        except Exception as error:  # noqa: BLE001 - told to the client, never the session's end
            self._error(msg_id, INTERNAL_ERROR, f"{resource.uri} could not be read: {error}")
            return
        contents: dict[str, Any] = {"uri": resource.uri, "mimeType": resource.mime_type, "text": text}
        if resource.meta:
            contents["_meta"] = resource.meta
        self._reply(msg_id, {"contents": [contents]})

    # --- out ---

    def _send(self, message: dict[str, Any]) -> None:
        text = leanjson.dumps(message, ascii_only=False)
        try:
            data = text.encode("utf-8") + b"\n"
        except UnicodeEncodeError:  # a lone surrogate (an argument quoted back): as JSON's escape, or
            data = leanjson.dumps(message, ascii_only=True).encode("ascii") + b"\n"  # no answer went at all
        with self._write_lock:
            assert self._out is not None
            try:
                self._out.write(data)
                self._out.flush()
            except (OSError, ValueError):
                pass  # the client is gone: the reader sees the end next

    def _reply(self, msg_id: Any, result: Any) -> None:
        self._send({"jsonrpc": "2.0", "id": msg_id, "result": result})

    def _error(self, msg_id: Any, code: int, message: str) -> None:
        if not (msg_id is None or isinstance(msg_id, (int, str)) and not isinstance(msg_id, bool)):
            msg_id = None
        self._send({"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}})


def serve_stdio(server: Server) -> None:
    server.serve(sys.stdin.buffer, sys.stdout.buffer)
