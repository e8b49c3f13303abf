"""Strict JSON text (UTF-8, no NaN or Infinity), for everything the daemon sends or stores.

Written by pydantic_core's serializer (pydantic is a dependency anyway): about five times faster
than `json`'s encoder on a reply or an item, which was an eighth of a one-item `ctxd/record`'s CPU
(`bench/bench_speed.py`). It has no strict mode: NaN and Infinity come out as those bare words. So
when either word appears in the text (almost always inside a string), `json`'s strict encoder
checks the value once more; it raises ValueError on a real NaN or Infinity.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pydantic_core import to_json

from ctxd.protocol.rawjson import RawJsonList


def _checked_only(value: object) -> None:
    """The strict check's `default`: a `RawJsonList`'s texts are strict already."""
    if isinstance(value, RawJsonList):
        return None
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_STRICT = json.JSONEncoder(ensure_ascii=False, allow_nan=False, check_circular=False, default=_checked_only)


def dumps(value: Any, fallback: Callable[[Any], Any] | None = None) -> bytes:
    """`value` as strict JSON. `fallback` turns what JSON has no type for into something it has
    (the server's `RawJsonList` marker); anything else left raises ValueError, as NaN does."""
    text = to_json(value, fallback=fallback)
    # (`find`, not `in`: `bytes in bytes` first tries the needle as an integer, raising and
    # swallowing a TypeError each time.)
    if text.find(b"NaN") >= 0 or text.find(b"Infinity") >= 0:
        _STRICT.encode(value)
    return text
