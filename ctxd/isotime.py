"""ISO 8601 times as the agents and ctxd write them (`2026-11-26T21:18:51.325Z`), read one way.

Session files, snapshots and thread states carry such times, and a damaged or hostile file any
string in their place: every reader takes them here, so that a time without a zone is UTC
everywhere (not the machine's local time in some places) and a value that is no time is None.
"""

from __future__ import annotations

from datetime import UTC, datetime

MAX_CHARS = 64  # longer is no time (and is not parsed)


def seconds(value: object) -> float | None:
    """Seconds since the epoch of an ISO time, UTC when it names no zone; None when `value` is not
    a string that is one."""
    if not isinstance(value, str) or len(value) > MAX_CHARS:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()  # (aware: arithmetic, which no year 1-9999 time overflows)
