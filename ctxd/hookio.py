"""What the short-lived commands the agents run (`ctxd hook`, `ctxd statusline`) share: their JSON
input, read with a bound, and ctxd's hook log (`<state dir>/hooks.log`). Imports are lazy, and
none of typing, pathlib or socket: the agent pays for these processes at every tool call and
message (bench/bench_agents.py)."""

from __future__ import annotations

import os
import stat
import sys
import time

from ctxd import leanjson

TYPE_CHECKING = False  # (no typing nor pathlib here: ctxd.places)
if TYPE_CHECKING:
    from typing import Any

MAX_INPUT_BYTES = 4 * 1024 * 1024


def log(message: str, state_dir: str | os.PathLike[str] | None = None) -> None:
    """One line in ctxd's hook log (that of `state_dir`, else of the default state dir); a log
    that cannot be written is not the agent's problem. The message may quote the agent's cwd,
    prompt or command: the configured API key is redacted and every control character escaped (a
    newline would forge a line, an escape sequence act on the terminal that shows the log)."""
    from ctxd.redact import redact
    from ctxd.terminal import safe

    line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} [{os.getpid()}] {safe(redact(message))}\n".encode()
    try:
        from ctxd.places import hooks_log, state_dir_name

        path = hooks_log(state_dir if state_dir is not None else state_dir_name())
        os.makedirs(os.path.dirname(path), exist_ok=True)
        # Never through a link, never blocking on a FIFO planted in its place (ENXIO), one write per line.
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                os.write(fd, line)
        finally:
            os.close(fd)
    except OSError:
        pass


def log_once(key: str, message: str) -> None:
    """`log(message)` the first time `key` is logged (a folder the hooks skip, a settings problem):
    an agent's every tool call must not add the same line."""
    from ctxd.marks import first_time
    from ctxd.places import default_state_dir

    try:
        first = first_time(default_state_dir(), key)
    except OSError:
        first = True  # no marker can be written: nor, likely, the log
    if first:
        log(message)


def read_input(stream: Any = None, timeout: float = 1.0) -> dict[str, Any] | None:
    """The hook's JSON object, or None (nothing within `timeout`, too large, not a JSON object)."""
    import select

    stream = stream or sys.stdin.buffer
    chunks: list[bytes] = []
    size = 0
    end = time.monotonic() + timeout
    try:
        fd = stream.fileno()
        while size <= MAX_INPUT_BYTES:
            left = end - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                break
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except (OSError, ValueError):
        return None
    if size > MAX_INPUT_BYTES:
        log(f"hook input over {MAX_INPUT_BYTES} bytes: ignored")
        return None
    try:
        value = leanjson.loads(b"".join(chunks))
    except ValueError:
        log("hook input is not JSON: ignored")
        return None
    if not isinstance(value, dict):
        log("hook input is not a JSON object: ignored")
        return None
    return value


def describe(error: BaseException) -> str:
    message = getattr(error, "message", None) or str(error) or type(error).__name__
    return f"{type(error).__name__}: {message}"


