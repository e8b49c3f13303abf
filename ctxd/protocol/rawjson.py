"""A list whose elements are already JSON text: how a prompt of 100k items is sent without
encoding every item again (each item's JSON is what the store holds).

The domain returns a `RawJsonList` where a list of items belongs; the server's encoder
(`ctxd/server/codec.py`) writes its elements as they are.
"""

from __future__ import annotations


class RawJsonList:
    """Strict JSON texts (one per element, as `json.dumps(..., allow_nan=False)` wrote them)."""

    __slots__ = ("texts",)

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
