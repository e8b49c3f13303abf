"""A list whose elements are already JSON text: how a prompt of 100k items is sent without
encoding every item again (each item's JSON is what the store holds).

The domain returns a `RawJsonList` where a list of items belongs; the server's encoder
(`ctxd/server/framing.py`) writes its elements as they are. Anything else that reads it (a test, a
handler) can still iterate it as parsed items.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any


class RawJsonList:
    """Strict JSON texts (one per element, as `json.dumps(..., allow_nan=False)` wrote them)."""

    __slots__ = ("texts",)

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts

    def __len__(self) -> int:
        return len(self.texts)

    def __iter__(self) -> Iterator[Any]:
        return (json.loads(text) for text in self.texts)

    def json(self) -> str:
        return "[" + ",".join(self.texts) + "]"
