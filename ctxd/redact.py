"""The values that must never leave the daemon: the configured API key, whatever its shape.

Settings register the key's actual value when they are loaded (`register`); every way out (the
log, error messages, notifications, what is stored) passes text through `redact`. A value shorter
than MIN_LENGTH is not registered: replacing it would mangle ordinary text and it is no real key.
"""

from __future__ import annotations

import _thread

from ctxd import leanjson

TYPE_CHECKING = False  # (a hook imports this: no typing, no threading, which cost it milliseconds)
if TYPE_CHECKING:
    from typing import Any

MIN_LENGTH = 8
MARK = "[redacted]"
DEFAULT_KEY_ENV = "OPENAI_API_KEY"
"""The variable that holds the key unless the settings name another (`llm.api_key_env`)."""

_lock = _thread.allocate_lock()
_values: tuple[str, ...] = ()


def register(value: str | None) -> None:
    """Remember `value` (and its JSON-escaped spelling) as a secret."""
    if not isinstance(value, str) or len(value.strip()) < MIN_LENGTH:
        return
    adopt((value, leanjson.quoted(value)[1:-1], leanjson.quoted(value, ascii_only=False)[1:-1]))


def secrets() -> tuple[str, ...]:
    return _values


def adopt(values: tuple[str, ...]) -> None:
    """Another process's `secrets()`, as they are: a worker process it spawns starts with none (one
    it forks has its parent's)."""
    global _values
    with _lock:  # longest first: a secret that contains another is replaced whole
        _values = tuple(sorted(set(_values) | set(values), key=len, reverse=True))


def redact(text: str) -> str:
    """`text` with every registered secret replaced by MARK."""
    for value in _values:
        if value in text:
            text = text.replace(value, MARK)
    return text


def redact_json(value: Any) -> Any:
    """A JSON value with every registered secret in its strings (and keys) replaced."""
    if not _values:
        return value
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [redact_json(v) for v in value]
    if isinstance(value, dict):
        return {redact(k) if isinstance(k, str) else k: redact_json(v) for k, v in value.items()}
    return value
