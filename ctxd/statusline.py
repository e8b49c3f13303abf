"""`ctxd statusline [--agent <name>]`: an agent's status line, from the JSON the agent gives it on
stdin (Claude Code's without `--agent`; the agent's module reads its input: `statusline_usage`).

One line: the agent, how full the context is against the agent's own compaction point, the
session's cost, until when the prompt cache is likely warm (ctxd/tokens/prompt_cache.py), the age of
the workspace's last checkpoint, coloured as the editors colour their
gauges (warn from 80% of the compaction point, compact at it). The exact usage it was handed is
written for ctxd (`<state dir>/hooks/usage/<agent>-<session id>.json`). A user's own status-line
command (carried by `--user`, see `ctxd.agents.config.json_settings`) runs after it, its output
printed after ctxd's. The agent runs this after every message: it starts no git and imports little.

It never hangs and stays small whatever it is handed: the agent's files are read only when they are
regular files (opened without blocking, only a tail), and the user's command runs in a process
group of its own, with a bound on its time and on the output kept, then the group is killed and
reaped (no orphan each refresh). `NO_COLOR` (any non-empty value, https://no-color.org) or
`--no-colour` turn the colours off.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctxd.agents.base import Agent

WARN_RATIO = 0.8
COLOURS = {"ok": "\033[32m", "warn": "\033[33m", "compact": "\033[31m"}
RESET = "\033[0m"
USER_COMMAND_DEADLINE = 1.5
"""The user's command is waited for until this many seconds after the status line started, so
that the whole status line stays within the 2 s any agent hook is given..."""
USER_COMMAND_MIN_SECONDS = 0.25
"""...though never less than this."""
USER_OUTPUT_BYTES = 64 * 1024
"""At most this much of the user's command's output is read; then it is stopped."""


def usage_of(agent: Agent, data: dict[str, Any]) -> dict[str, Any] | None:
    """The session's usage as the agent states it, against its window and compaction point."""
    stated = agent.statusline_usage(data)
    if stated is None:
        return None
    used, point = stated.used_tokens, stated.compact_at
    tier = "compact" if used >= point else "warn" if used >= WARN_RATIO * point else "ok"
    return {"usedTokens": used, "outputTokens": stated.output_tokens, "contextWindow": stated.context_window,
            "compactAt": point, "tier": tier, "known": stated.known, "percent": round(100 * used / point, 1),
            "costUsd": stated.cost_usd, "model": stated.model, "sessionId": stated.session_id, "cwd": stated.cwd}


def cache_of(agent: Agent, data: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any] | None:
    """Until when the prompt cache is likely warm (the latest request plus its provider's
    lifetime), and what the next turn re-writes after it."""
    from ctxd.tokens import prompt_cache

    if not usage["known"]:
        return None
    found = agent.statusline_cache(data)
    at, one_hour = found if found is not None else (time.time(), False)  # the request just reported
    provider = prompt_cache.provider_of(agent.cache_provider, usage["model"])
    return {"until": at + prompt_cache.lifetime(provider, one_hour),
            "rewriteTokens": usage["usedTokens"] + usage["outputTokens"]}


def _cache_text(state: dict[str, Any]) -> str:
    if time.time() < state["until"]:
        return f"cache until {time.strftime('%H:%M', time.localtime(state['until']))}"
    return f"cache cold: next turn re-writes {state['rewriteTokens'] // 1000}k"


def _age(seconds: float) -> str:
    if seconds < 60:
        return f"{int(seconds)}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m"
    if seconds < 86400:
        return f"{int(seconds // 3600)}h"
    return f"{int(seconds // 86400)}d"


def last_checkpoint(folder: Path, state_dir: Path) -> float | None:
    """When the workspace's newest snapshot was taken (from the store's files: no git)."""
    from ctxd.places import git_common_dir, plain_store

    common = git_common_dir(folder)
    store = common / "ctxd" / "store" if common is not None else plain_store(state_dir, folder)
    newest = None
    try:
        for entry in os.scandir(store):
            if entry.name.startswith("last-") and entry.name.endswith(".json"):
                when = entry.stat().st_mtime
                newest = when if newest is None or when > newest else newest
    except OSError:
        return None
    return newest


def render(agent: Agent, usage: dict[str, Any], checkpoint_at: float | None, colour: bool,
           cache: dict[str, Any] | None = None) -> str:
    parts = [agent.name]
    if usage["known"]:
        parts.append(f"{usage['percent']:.0f}% of {usage['compactAt'] // 1000}k")
    else:
        parts.append(f"0% of {usage['compactAt'] // 1000}k")
    if usage["costUsd"] is not None:
        parts.append(f"${usage['costUsd']:.2f}")
    if cache is not None:
        parts.append(_cache_text(cache))
    parts.append(f"checkpoint {_age(max(0.0, time.time() - checkpoint_at))} ago" if checkpoint_at else "no checkpoint")
    line = " · ".join(parts)
    return f"{COLOURS[usage['tier']]}{line}{RESET}" if colour else line


def hand_over(state_dir: Path, agent: Agent, usage: dict[str, Any]) -> None:
    """The exact usage for ctxd: one small file per session, replaced atomically."""
    session = usage["sessionId"]
    if session is None or not usage["known"]:
        return
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in session)[:120]
    from ctxd.places import hooks_dir, usage_dir

    hooks_dir(state_dir)  # the user's alone, or nothing is written
    path = usage_dir(state_dir) / f"{agent.name}-{safe}.json"
    path.parent.mkdir(mode=0o700, exist_ok=True)
    record = {"thread": agent.thread(session), "cwd": usage["cwd"], "at": time.time(),
              **{k: usage[k] for k in ("usedTokens", "outputTokens", "contextWindow", "compactAt", "costUsd",
                                       "model")}}
    from ctxd.safefile import write_whole

    write_whole(path, json.dumps(record).encode("utf-8"))  # 0600 whatever the umask, never through a link


def run_user_command(encoded: str, raw: bytes, seconds: float) -> str:
    """The user's own status line, given the same JSON; its output, or nothing on failure."""
    from ctxd.agents.config.json_settings import carried_status_line

    entry = carried_status_line(encoded)
    command = entry.get("command") if isinstance(entry, dict) else None
    if not isinstance(command, str) or not command:
        return ""
    try:
        output = run_capped(command, raw, seconds, USER_OUTPUT_BYTES)
    except (OSError, ValueError):
        return ""
    return output.decode("utf-8", "replace").rstrip("\n")


def run_capped(command: str, stdin: bytes, seconds: float, limit: int) -> bytes:
    """Run a shell command in a process group of its own, given `stdin`; the first `limit` bytes
    of its output, read until it closes it, `seconds` pass or `limit` is reached. Then the whole
    group is killed (what it left running in the background too) and the shell reaped."""
    import select
    import signal
    import subprocess

    proc = subprocess.Popen(command, shell=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    assert proc.stdin is not None and proc.stdout is not None
    output = bytearray()
    pending = memoryview(stdin)
    deadline = time.monotonic() + seconds
    try:
        os.set_blocking(proc.stdin.fileno(), False)
        if not pending:
            proc.stdin.close()
        while len(output) < limit:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            writing = [proc.stdin] if not proc.stdin.closed else []
            readable, writable, _ = select.select([proc.stdout], writing, [], left)
            if writable:
                try:
                    pending = pending[os.write(proc.stdin.fileno(), pending[:65536]):]
                except BlockingIOError:
                    pass
                except OSError:  # it stopped reading (EPIPE): what it has is all it gets
                    pending = pending[:0]
                if not pending:
                    proc.stdin.close()
            if readable:
                chunk = os.read(proc.stdout.fileno(), min(65536, limit - len(output)))
                if not chunk:
                    break
                output += chunk
    finally:
        with contextlib.suppress(OSError):
            proc.stdin.close()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # the shell is not reaped yet: its group id is still its own
        proc.wait()
        proc.stdout.close()
    return bytes(output)


def main(argv: list[str]) -> int:
    started = time.monotonic()
    raw = b""
    user = argv[argv.index("--user") + 1] if "--user" in argv[:-1] else None
    try:
        from ctxd import agents
        from ctxd.hookio import read_input  # reads with a bound: a silent stdin does not hang us

        name = argv[argv.index("--agent") + 1] if "--agent" in argv[:-1] else agents.STATUS_LINE_AGENT
        data = read_input(timeout=1.0) or {}
        raw = json.dumps(data).encode()
        agent = agents.find(name)
        usage = usage_of(agent, data) if agent is not None else None
        if agent is None or usage is None:
            sys.stdout.write(f"ctxd: no status line for agent {name!r}\n")
        else:
            show(agent, data, usage, colour="--no-colour" not in argv and not os.environ.get("NO_COLOR"))
    except Exception as error:  # noqa: BLE001 - a status line never fails
        sys.stdout.write(f"ctxd: {type(error).__name__}\n")
    if user:
        try:
            seconds = max(USER_COMMAND_MIN_SECONDS, started + USER_COMMAND_DEADLINE - time.monotonic())
            output = run_user_command(user, raw, seconds)
        except Exception:  # noqa: BLE001
            output = ""
        if output:
            sys.stdout.write(output + "\n")
    return 0


def show(agent: Agent, data: dict[str, Any], usage: dict[str, Any], colour: bool) -> None:
    """Print the line, then hand the usage over to ctxd."""
    from ctxd.places import default_state_dir

    state_dir = default_state_dir()
    cwd = usage["cwd"]
    checkpoint_at = None
    if isinstance(cwd, str) and os.path.isabs(cwd):
        from ctxd.places import find_workspace

        located = find_workspace(Path(cwd), state_dir)
        state_dir = located.state_dir  # the workspace's daemon may keep a state dir of its own
        checkpoint_at = last_checkpoint(located.folder, state_dir)
    sys.stdout.write(render(agent, usage, checkpoint_at, colour=colour, cache=cache_of(agent, data, usage)) + "\n")
    sys.stdout.flush()
    try:
        hand_over(state_dir, agent, usage)
    except OSError:
        pass
