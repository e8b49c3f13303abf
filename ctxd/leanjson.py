"""JSON for the processes an agent waits for at every tool call (`ctxd hook`), without importing
the `json` package: its modules import `re`, which imports `enum`, about 5 ms of a hook that
otherwise takes 35. The work is done by `_json`, the C module `json.loads` and `json.dumps` use
themselves; this module only calls it as they do (compact separators, no indent), so the values
read and the text written are the same. Everything else in ctxd uses `json`."""

from __future__ import annotations

import _json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_BLANK = " \t\n\r"
_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


class JSONDecodeError(ValueError):
    """Not one JSON value (a ValueError, as json.JSONDecodeError is)."""


class _Options:
    """What `_json`'s scanner reads from a `json.JSONDecoder` (its defaults)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__


_scan = _json.make_scanner(_Options())  # type: ignore[arg-type]  # (typeshed's stub asks for a scanner: it reads these)


def loads(text: str | bytes) -> Any:
    """`json.loads(text)`, for text that is UTF-8 when given as bytes."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    start = len(text) - len(text.lstrip(_BLANK))
    try:
        value, end = _scan(text, start)
    except StopIteration as error:
        raise JSONDecodeError(f"expecting a value at {error.value}") from None
    except RecursionError:
        raise JSONDecodeError("nested too deeply") from None
    if text[end:].strip(_BLANK):
        raise JSONDecodeError(f"extra data at {end}")
    return value


def _unencodable(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def dumps(value: Any, ascii_only: bool = True) -> str:
    """`json.dumps(value, separators=(",", ":"))` (`ensure_ascii=False` without `ascii_only`): an
    encoder per call, as json's, whose circular check (`markers`) is then this call's alone (the
    owner sends from several threads)."""
    strings = _json.encode_basestring_ascii if ascii_only else _json.encode_basestring
    encode = _json.make_encoder({}, _unencodable, strings, None, ":", ",", False, False, True)
    return "".join(encode(value, 0))


def quoted(text: str, ascii_only: bool = True) -> str:
    """`json.dumps(text)` (or with `ensure_ascii=False`) of a string."""
    return str(_json.encode_basestring_ascii(text) if ascii_only else _json.encode_basestring(text))
