"""`ctxd statusline`: Claude Code's status line, from the JSON Claude Code gives it on stdin.

One line: the agent, how full the context is against Claude Code's own compaction point, the
session's cost, until when the prompt cache is likely warm (ctxd/tokens/cache.py), the age of
the workspace's last checkpoint, coloured as the editors colour their
gauges (warn from 80% of the compaction point, compact at it). The exact usage it was handed is
written for ctxd (`<state dir>/hooks/usage/<thread>.json`). A user's own status-line command
(carried by `--user`, see `ctxd.hooks.install`) runs after it, its output printed after ctxd's.
Claude Code runs this after every message: it starts no git and imports little.

It never hangs and stays small whatever it is handed: the transcript is read only when it is a
regular file (opened without blocking, only its tail), and the user's command runs in a process
group of its own, with a bound on its time and on the output kept, then the group is killed and
reaped (no orphan each refresh). `NO_COLOR` (any non-empty value, https://no-color.org) or
`--no-colour` turn the colours off.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import sys
import time
from pathlib import Path
from typing import Any

SUMMARY_OUTPUT_TOKENS = 20_000
"""Claude Code keeps room for the compaction's summary (at most the model's output limit)..."""
COMPACT_BUFFER_TOKENS = 13_000
"""...and a buffer below that: it compacts at window - 20,000 - 13,000 (167,000 of 200,000)."""
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


def compaction_point(window: int) -> int:
    """Where Claude Code compacts a window of `window` tokens (CLAUDE_AUTOCOMPACT_PCT_OVERRIDE
    lowers it, as it does in Claude Code)."""
    effective = window - min(SUMMARY_OUTPUT_TOKENS, window // 2)
    point = effective - COMPACT_BUFFER_TOKENS
    try:
        override = float(os.environ.get("CLAUDE_AUTOCOMPACT_PCT_OVERRIDE") or "")
    except ValueError:
        override = 0.0
    if 0 < override <= 100:
        point = min(int(effective * override / 100), point)
    return max(1, point)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def usage_of(data: dict[str, Any]) -> dict[str, Any]:
    """The session's usage as Claude Code states it: input + cache writes + cache reads of the
    latest request, against its window and compaction point."""
    raw_context = data.get("context_window")
    context: dict[str, Any] = raw_context if isinstance(raw_context, dict) else {}
    raw_current = context.get("current_usage")
    current: dict[str, Any] | None = raw_current if isinstance(raw_current, dict) else None
    used = (_int(current.get("input_tokens")) + _int(current.get("cache_creation_input_tokens"))
            + _int(current.get("cache_read_input_tokens"))) if current else 0
    window = _int(context.get("context_window_size")) or 200_000
    point = compaction_point(window)
    tier = "compact" if used >= point else "warn" if used >= WARN_RATIO * point else "ok"
    raw_cost, raw_model = data.get("cost"), data.get("model")
    cost: dict[str, Any] = raw_cost if isinstance(raw_cost, dict) else {}
    total = cost.get("total_cost_usd")
    model: dict[str, Any] = raw_model if isinstance(raw_model, dict) else {}
    output = _int(current.get("output_tokens")) if current else 0
    return {"usedTokens": used, "outputTokens": output, "contextWindow": window, "compactAt": point, "tier": tier,
            "known": current is not None,
            "percent": round(100 * used / point, 1), "costUsd": total if isinstance(total, (int, float)) else None,
            "model": model.get("id") if isinstance(model.get("id"), str) else None}


TAIL_BYTES = 65_536  # the transcript's end read for the latest request (never the whole file)


def read_tail(path: str, size: int) -> bytes:
    """The last `size` bytes of the regular file at `path`. Opened without blocking and checked on
    what was opened: a FIFO or a device raises FileRefused (`ctxd.safefile`) instead of blocking
    or never ending."""
    from ctxd.safefile import OPEN_FLAGS, FileRefused

    fd = os.open(path, OPEN_FLAGS)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FileRefused(f"{path}: not a regular file; not read")
        os.lseek(fd, max(0, info.st_size - size), os.SEEK_SET)
        chunks: list[bytes] = []
        left = size
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def last_request(transcript: Any) -> tuple[float, bool] | None:
    """The latest main-chain reply in the transcript's tail: when it came, and whether its cache
    writes went to Anthropic's 1-hour cache."""
    from ctxd.tokens.cache import parse_time

    if not isinstance(transcript, str) or not os.path.isabs(transcript):
        return None
    try:
        tail = read_tail(transcript, TAIL_BYTES).splitlines()
    except (OSError, ValueError):  # ValueError: a NUL in the path
        return None
    for raw in reversed(tail):
        if b'"assistant"' not in raw or b'"usage"' not in raw:
            continue
        try:
            rec = json.loads(raw)
        except ValueError:
            continue
        message = rec.get("message") if isinstance(rec, dict) and not rec.get("isSidechain") else None
        usage = message.get("usage") if isinstance(message, dict) else None
        at = parse_time(rec.get("timestamp")) if isinstance(usage, dict) else None
        if at is not None and isinstance(usage, dict):
            split = usage.get("cache_creation")
            return at, isinstance(split, dict) and _int(split.get("ephemeral_1h_input_tokens")) > 0
    return None


def cache_of(data: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any] | None:
    """Until when the prompt cache is likely warm (the latest request plus Anthropic's lifetime),
    and what the next turn re-writes after it."""
    from ctxd.tokens import cache

    if not usage["known"]:
        return None
    found = last_request(data.get("transcript_path"))
    at, one_hour = found if found is not None else (time.time(), False)  # the request just reported
    return {"until": at + cache.lifetime(cache.ANTHROPIC, one_hour),
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
    from ctxd.hooks.locate import git_common_dir, plain_store

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


def render(data: dict[str, Any], usage: dict[str, Any], checkpoint_at: float | None, colour: bool,
           cache: dict[str, Any] | None = None) -> str:
    parts = ["claude"]
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


def hand_over(state_dir: Path, data: dict[str, Any], usage: dict[str, Any]) -> None:
    """The exact usage for ctxd: one small file per session, replaced atomically."""
    session = data.get("session_id")
    if not isinstance(session, str) or not session or not usage["known"]:
        return
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in session)[:120]
    from ctxd.hooks.marks import hooks_dir

    path = hooks_dir(state_dir) / "usage" / f"claude-{safe}.json"
    path.parent.mkdir(exist_ok=True)
    pending = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    record = {"thread": f"claude:{session}", "cwd": data.get("cwd"), "at": time.time(),
              **{k: usage[k] for k in ("usedTokens", "outputTokens", "contextWindow", "compactAt", "costUsd",
                                       "model")}}
    pending.write_text(json.dumps(record), "utf-8")
    os.replace(pending, path)


def run_user_command(encoded: str, raw: bytes, seconds: float) -> str:
    """The user's own status line, given the same JSON; its output, or nothing on failure."""
    from ctxd.hooks.install import user_status_line

    entry = user_status_line(encoded)
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
        from ctxd.hooks.hook import read_input  # reads with a bound: a silent stdin does not hang us

        data = read_input(timeout=1.0) or {}
        raw = json.dumps(data).encode()
        from ctxd.hooks.hook import _state_dir

        state_dir = _state_dir()
        usage = usage_of(data)
        workspace = data.get("workspace")
        cwd = data.get("cwd") or (workspace.get("current_dir") if isinstance(workspace, dict) else None)
        checkpoint_at = None
        if isinstance(cwd, str) and os.path.isabs(cwd):
            from ctxd.hooks.locate import find_workspace

            located = find_workspace(Path(cwd), state_dir)
            state_dir = located.state_dir  # the workspace's daemon may keep a state dir of its own
            checkpoint_at = last_checkpoint(located.folder, state_dir)
        colour = "--no-colour" not in argv and not os.environ.get("NO_COLOR")
        sys.stdout.write(render(data, usage, checkpoint_at, colour=colour, cache=cache_of(data, usage)) + "\n")
        sys.stdout.flush()
        try:
            hand_over(state_dir, data, usage)
        except OSError:
            pass
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
