"""What in an agent's configuration is ctxd's: an entry is recognised by what it runs, wherever
it ended up, never by its place or a name alone."""

from __future__ import annotations

import os
import shlex
from typing import Any


def runs_ctxd(words: list[str]) -> bool:
    """Whether `words` are how install names ctxd: a Python running its launcher by absolute path
    (`…/python3 …/ctxd/launch.py`: `ctxd.places.ctxd_command`), or as an older ctxd did, its executable
    (`…/ctxd`) or a Python running the package (`…/python3 -m ctxd`). A command that merely
    mentions ctxd is not ctxd's."""
    if len(words) == 1:
        return os.path.basename(words[0]) == "ctxd"
    if len(words) == 2:  # (any interpreter: `sys.executable` may be named otherwise)
        interpreter, launcher = words
        return (os.path.isabs(interpreter) and os.path.isabs(launcher) and os.path.basename(launcher) == "launch.py"
                and os.path.basename(os.path.dirname(launcher)) == "ctxd")
    return len(words) == 3 and os.path.basename(words[0]).startswith("python") and words[1:] == ["-m", "ctxd"]


def command_words(command: Any) -> list[str]:
    """A shell command line's words (install writes them quoted with shlex), [] when it is not one."""
    if not isinstance(command, str):
        return []
    try:
        return shlex.split(command)
    except ValueError:
        return []


def is_our_hook(handler: Any) -> bool:
    """A hook entry whose whole command is `<ctxd> hook <agent> <Event>`, for an agent ctxd knows."""
    from ctxd import agents

    words = command_words(handler.get("command")) if isinstance(handler, dict) else []
    return (len(words) >= 4 and words[-3] == "hook" and words[-2] in agents.names()
            and words[-1].isalpha() and runs_ctxd(words[:-3]))


def is_our_mcp(entry: Any) -> bool:
    """An MCP server entry that runs `<ctxd> mcp`."""
    if not (isinstance(entry, dict) and isinstance(entry.get("command"), str) and isinstance(entry.get("args"), list)
            and all(isinstance(a, str) for a in entry["args"])):
        return False
    words = [entry["command"], *entry["args"]]
    return words[-1:] == ["mcp"] and runs_ctxd(words[:-1])


def mcp_entry(ctxd: list[str]) -> dict[str, Any]:
    """ctxd's MCP server as a JSON `mcpServers` entry (stdio)."""
    return {"type": "stdio", "command": ctxd[0], "args": [*ctxd[1:], "mcp"]}


def shell(words: list[str]) -> str:
    """`words` as one shell command line."""
    return " ".join(shlex.quote(w) for w in words)
