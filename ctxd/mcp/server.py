"""`ctxd mcp`: a Model Context Protocol server on stdio for the agent running in the current
folder's workspace (protocol v3, "The agents' own way in").

Six tools: the session's context usage, recall over its whole history (what its compactions
replaced included), one stored item, and the workspace's checkpoints (list, take, restore; a
restore previews unless `confirm` is true). Each result is JSON text and `structuredContent`; a
bad input or a failure is a tool error (`isError`) whose text names the problem. The protocol is
`protocol.py` (standard library only, so `initialize` is answered as soon as Python is up); the
tools ask the owner (`backend.py`).
"""

from __future__ import annotations

import os
import sys

from ctxd.mcp import codex_statusline, limits, protocol
from ctxd.mcp.protocol import Resource, Tool

TYPE_CHECKING = False  # (neither `typing` nor `pathlib` before `initialize` is answered: ctxd.mcp.protocol)
if TYPE_CHECKING:
    from typing import Any

INSTRUCTIONS = (
    "ctxd keeps this session's whole history, the parts your compactions replaced included. Use `recall` "
    "to find a detail said or seen earlier (words, a question, or \"quoted phrases\"; results name the item's "
    "seq), `history_item` to read an item whole, `context_usage` for how full the context window is, and "
    "`checkpoints` / `checkpoint` / `restore_checkpoint` for snapshots of the working tree (a restore "
    "previews until you pass confirm: true; its undoId restores the state before it).")

def _optional(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}], "default": None}


def tools(backend: Any) -> list[Tool]:
    """The six tools, each calling the backend's method of the same name."""
    return [
        Tool("context_usage", "How full this session's context window is: tokens used, the window, the point "
             "where the agent compacts, cost so far, what the tokens are made of, and the prompt cache (warm or "
             "cold, what a cold cache makes the next turn re-write).", {}, backend.context_usage),
        Tool("recall", "Search this session's whole history, including what compactions replaced: keywords "
             "(stemmed), a question, or \"quoted phrases\". Results are best first, each with the item's seq (for "
             "history_item), a snippet, and whether a compaction replaced it.",
             {"query": {"type": "string", "maxLength": limits.MAX_QUERY_CHARS},
              "limit": {"type": "integer", "minimum": 1, "maximum": limits.MAX_LIMIT, "default": 5},
              "scope": {"type": "string", "enum": ["thread", "workspace"], "default": "thread"}},
             backend.recall, required=("query",)),
        Tool("history_item", "One item of the history, whole, by its seq (from recall). The seq of a compaction's "
             "placeholder gives the tool output it stands for.",
             {"seq": {"type": "integer", "minimum": 1, "maximum": limits.MAX_SEQ},
              "thread": _optional({"type": "string", "minLength": 1, "maxLength": limits.MAX_THREAD_CHARS})},
             backend.history_item, required=("seq",)),
        Tool("checkpoints", "The workspace's checkpoints (snapshots of the working tree), newest first.",
             {"limit": {"type": "integer", "minimum": 1, "maximum": limits.MAX_CHECKPOINTS, "default": 20}},
             backend.checkpoints),
        Tool("checkpoint", "Take a checkpoint of the working tree now (never touches git's own refs).",
             {"label": _optional({"type": "string", "maxLength": limits.MAX_LABEL_CHARS})}, backend.checkpoint),
        Tool("restore_checkpoint", "Put the working tree back as it was at a checkpoint. Without confirm: true it "
             "only previews the files it would restore and remove. Its undoId undoes it.",
             {"id": {"type": "string", "minLength": 1, "maxLength": limits.MAX_ID_CHARS},
              "confirm": {"type": "boolean", "default": False}}, backend.restore_checkpoint, required=("id",)),
        Tool("statusline", "ctxd's context gauge for Codex's footer (choose it in Codex's /statusline).", {},
             lambda: {"resource": codex_statusline.URI}, meta=codex_statusline.ENTRYPOINT,
             title="ctxd: context gauge"),
    ]


def resources(backend: Any) -> list[Resource]:
    """Codex's footer reads the gauge here (`codex_statusline`)."""
    return [Resource(codex_statusline.URI, "statusline", "application/json", backend.codex_statusline)]


def _closing_on_signals() -> None:
    """An agent ends its MCP servers with SIGINT, then SIGTERM a moment later: both end the
    server through its `finally`."""
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
    from ctxd import __version__
    from ctxd.mcp.backend import backend_from_environment

    backend = backend_from_environment(os.getcwd())
    server = protocol.Server("ctxd", __version__, INSTRUCTIONS, tools(backend), resources(backend),
                             on_listed=backend.start)
    _closing_on_signals()
    try:
        protocol.serve_stdio(server)
    except KeyboardInterrupt:
        pass
    finally:
        backend.close()
    return 0
