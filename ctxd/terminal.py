"""Text from files and clients made safe to print on a terminal.

A session title, a model or a tool name is written by whoever wrote the agent's file or the
client's request; printed raw, an escape sequence in it could set the clipboard (OSC 52), clear the
screen or retitle the window, and a bidirectional override could reorder what the user reads.
"""

from __future__ import annotations

import re

_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe(text: str) -> str:
    """`text` with every control character, bidirectional control and lone surrogate shown as
    its escape (`\\x1b`, `\\u202e`), so that printing it does nothing but show it."""
    return _UNSAFE.sub(_escape, text)
