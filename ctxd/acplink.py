"""How `ctxd mcp`, started by an agent behind a `ctxd acp` proxy, learns which ACP session it serves.

The proxy adds ctxd's MCP server to `session/new` before the agent has chosen the session's id,
so the id cannot be in the server's arguments. Instead each entry the proxy adds carries one
environment variable, `CTXD_ACP_LINK`: the path of a *link file* the proxy writes, in a folder
only this user can enter (`<state dir>/acp/`, mode 0700, not a link), as soon as it knows the id:
when the agent's answer to `session/new` arrives, before that answer goes on to the editor (so
before the editor can send a prompt); at once for `session/load`, which names the session. The
file holds one JSON object: `{"thread": "acp:<session id>", "workspace": "<folder>", "pid": <the
proxy's pid>}`. The proxy removes its files when it ends; files of proxies that are gone are
removed by the next one.

`served_thread(env)` is what `ctxd mcp` calls: the thread, or None when it runs behind no proxy
or the file is not there (yet), not this user's, or not a link file. Only the standard library:
`ctxd mcp` imports this at start.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ctxd import ownerlink
from ctxd.safefile import write_whole

ENV = "CTXD_ACP_LINK"
FOLDER = "acp"
MAX_BYTES = 64 * 1024


def folder(state_dir: Path, create: bool = True) -> Path:
    """`<state dir>/acp`, private to this user (created when `create`); raises OSError (Unsafe)
    when it is a link, another user's, or open to others."""
    return ownerlink.private_dir(Path(state_dir) / FOLDER, create=create)


def link_path(state_dir: Path, number: int) -> Path:
    """The link file of this process's `number`th MCP entry."""
    return folder(state_dir) / f"{os.getpid()}-{number}.json"


def write(path: Path, thread: str, workspace: Path) -> None:
    """Write a link file whole (a reader sees the old one or the new one, never half)."""
    write_whole(path, json.dumps({"thread": thread, "workspace": os.fspath(workspace), "pid": os.getpid()}).encode("utf-8"))


def remove_own(state_dir: Path) -> None:
    """This process's link files (the proxy is ending)."""
    with contextlib.suppress(OSError):
        for path in folder(state_dir, create=False).glob(f"{os.getpid()}-*.json"):
            path.unlink(missing_ok=True)


def remove_stale(state_dir: Path) -> None:
    """Link files of proxies that are no longer running."""
    with contextlib.suppress(OSError):
        for path in folder(state_dir, create=False).glob("*-*.json"):
            try:
                os.kill(int(path.name.split("-", 1)[0]), 0)
            except ProcessLookupError:
                path.unlink(missing_ok=True)
            except (ValueError, OSError):
                continue


def read(path: Path) -> dict[str, Any] | None:
    """A link file's object, when it is one: a regular file of this user's, in a private folder."""
    try:
        ownerlink.private_dir(path.parent, create=False)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_size > MAX_BYTES:
            return None
        value = json.loads(os.read(fd, MAX_BYTES))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    return value if isinstance(value, dict) else None


def served(env: Mapping[str, str]) -> dict[str, Any] | None:
    """The link of the ACP session this process serves (`thread`, `workspace`), or None."""
    raw = env.get(ENV)
    if not raw or not os.path.isabs(raw) or Path(raw).parent.name != FOLDER:
        return None
    value = read(Path(raw))
    if value is None:
        return None
    thread = value.get("thread")
    if not isinstance(thread, str) or not thread.startswith("acp:") or len(thread) <= 4:
        return None
    return value


def served_thread(env: Mapping[str, str]) -> str | None:
    """`acp:<session id>` when `ctxd mcp` runs behind a `ctxd acp` proxy that knows its session."""
    value = served(env)
    return str(value["thread"]) if value is not None else None
