"""`ctxd mcp`: a Model Context Protocol server on stdio, built on the official `mcp` SDK, for the
agent running in the current folder's workspace (protocol v3, "The agents' own way in").

Six tools: the session's context usage, recall over its whole history (what its compactions
replaced included), one stored item, and the workspace's checkpoints (list, take, restore; a
restore previews unless `confirm` is true). Each result is JSON text and `structuredContent`;
a bad input or a failure is a tool error (`isError`) whose text names the problem. The
workspace is opened beside the SDK's start, on a thread of its own; nothing here opens a socket.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxd.agentmcp import limits  # the tools' arguments: their schemas (strings the SDK reads here)

if TYPE_CHECKING:
    from ctxd.agentmcp.backend import Backend

INSTRUCTIONS = (
    "ctxd keeps this session's whole history, the parts your compactions replaced included. Use `recall` "
    "to find a detail said or seen earlier (words or \"quoted phrases\"; results name the item's seq), "
    "`history_item` to read an item whole, `context_usage` for how full the context window is, and "
    "`checkpoints` / `checkpoint` / `restore_checkpoint` for snapshots of the working tree (a restore "
    "previews until you pass confirm: true; its undoId restores the state before it).")


def _result(value: dict[str, Any]) -> Any:
    from mcp_types import CallToolResult, TextContent

    return CallToolResult(content=[TextContent(type="text", text=json.dumps(value, ensure_ascii=False))],
                          structured_content=value)


def _error(message: str) -> Any:
    from mcp_types import CallToolResult, TextContent

    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


class _Opening:
    """The backend, opened on a thread of its own once the SDK has started serving (it follows
    the session from then on; started sooner, its imports would slow the SDK's own start, which
    agents time); a tool call waits for it."""

    def __init__(self, factory: Callable[[], Backend]) -> None:
        import threading

        self.backend: Backend | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._open, args=(factory,), name="ctxd-mcp-open", daemon=True)

    def start(self) -> None:
        if self._thread.ident is None:
            self._thread.start()

    def _open(self, factory: Callable[[], Backend]) -> None:
        try:
            self.backend = factory()
        except BaseException as error:  # noqa: BLE001 - each tool call reports it
            self.error = error

    def get(self) -> Backend:
        self.start()
        self._thread.join()
        if self.error is not None:
            raise self.error
        assert self.backend is not None
        return self.backend

    def close(self) -> None:
        if self._thread.ident is None:
            return
        self._thread.join()
        if self.backend is not None:
            self.backend.close()


def arguments_problems(errors: list[Any]) -> list[str]:
    """Each of pydantic's errors as `argument: what is wrong (not <value>)`, the value shortened."""
    out = []
    for error in errors:
        where = ".".join(str(part) for part in error.get("loc", ())) or "arguments"
        given = "" if error.get("type") == "missing" else f", not {_shown(error.get('input'))}"
        out.append(f"{where}: {str(error.get('msg', 'invalid')).removeprefix('Input ').lower()}{given}")
    return out


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str | int | float | bool) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def build(backend_factory: Callable[[], Backend]) -> Any:
    """The MCP server with its six tools; the backend is opened at once, beside the server."""
    from contextlib import asynccontextmanager

    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from pydantic import ValidationError

    from ctxd import redact
    from ctxd.errors import CtxdError

    opening = _Opening(backend_factory)

    @asynccontextmanager
    async def serving(_: Any) -> AsyncIterator[dict[str, Any]]:
        opening.start()
        yield {}

    class Server(MCPServer):
        """The SDK's server, whose answer to arguments that do not fit a tool's input schema (a
        wrong type, a number out of range) names each argument and what it must be, one line each
        (the SDK's own answer is pydantic's report, with its codes and links)."""

        async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
            try:
                return await super().call_tool(name, arguments, context)
            except ToolError as error:
                cause = error.__cause__
                if not isinstance(cause, ValidationError):
                    raise
                raise ToolError(f"{name}: " + "; ".join(arguments_problems(cause.errors()))) from cause

    server = Server("ctxd", instructions=INSTRUCTIONS, lifespan=serving)

    def call(name: str, **arguments: Any) -> Any:
        try:
            return _result(getattr(opening.get(), name)(**arguments))
        except CtxdError as error:
            return _error(redact.redact(error.message))

    @server.tool(description="How full this session's context window is: tokens used, the window, the point "
                             "where the agent compacts, cost so far, what the tokens are made of, and the prompt "
                             "cache (warm or cold, what a cold cache makes the next turn re-write).")
    def context_usage() -> Any:
        return call("context_usage")

    @server.tool(description="Search this session's whole history, including what compactions replaced: "
                             "keywords (stemmed), a question, or \"quoted phrases\". Results are best first, "
                             "each with the item's seq (for history_item), a snippet, and whether a compaction "
                             "replaced it.")
    def recall(query: limits.Query, limit: limits.Limit = 5, scope: limits.Scope = "thread") -> Any:
        return call("recall", query=query, limit=limit, scope=scope)

    @server.tool(description="One item of the history, whole, by its seq (from recall). The seq of a "
                             "compaction's placeholder gives the tool output it stands for.")
    def history_item(seq: limits.Seq, thread: limits.Thread = None) -> Any:
        return call("history_item", seq=seq, thread=thread)

    @server.tool(description="The workspace's checkpoints (snapshots of the working tree), newest first.")
    def checkpoints(limit: limits.Count = 20) -> Any:
        return call("checkpoints", limit=limit)

    @server.tool(description="Take a checkpoint of the working tree now (never touches git's own refs).")
    def checkpoint(label: limits.Label = None) -> Any:
        return call("checkpoint", label=label)

    @server.tool(description="Put the working tree back as it was at a checkpoint. Without confirm: true it "
                             "only previews the files it would restore and remove. Its undoId undoes it.")
    def restore_checkpoint(id: limits.SnapshotId, confirm: limits.Confirm = False) -> Any:
        return call("restore_checkpoint", id=id, confirm=confirm)

    server._ctxd_opening = opening  # type: ignore[attr-defined]  # closed by `main`
    return server


def _closing_on_signals() -> None:
    """An agent ends its MCP servers with SIGINT, then SIGTERM a moment later: both end the
    server through its `finally`, so that what the session wrote last is mirrored first."""
    import signal

    def stop(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the close below is short; let it finish
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


def main(argv: list[str]) -> int:
    """Serve on stdin/stdout until the client closes them."""
    if argv:
        print(f"ctxd mcp: takes no arguments (got {' '.join(argv)}); it serves the agent session named by "
              "CTXD_SESSION, else the newest session of the current folder's workspace", file=sys.stderr)
        return 2
    cwd = Path.cwd()

    def backend() -> Backend:  # imported on the opening's thread: the SDK starts meanwhile
        from ctxd.agentmcp.backend import backend_from_environment

        return backend_from_environment(cwd)

    server = build(backend)
    _closing_on_signals()
    try:
        server.run("stdio")
    except KeyboardInterrupt:
        pass
    finally:
        server._ctxd_opening.close()
    return 0
