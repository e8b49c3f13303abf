"""JSON kept as text. A list whose elements are already JSON text: how a prompt of 100k items is
sent without encoding every item again (each item's JSON is what the store holds). An item of a
huge request kept as the text it came in (`RawItem`).

The domain returns a `RawJsonList` where a list of items belongs; the server's encoder
(`ctxd/server/codec.py`) writes its elements as they are.
"""

from __future__ import annotations

import json
from typing import Any


class RawJsonList:
    """Strict JSON texts (one per element, as `json.dumps(..., allow_nan=False)` wrote them)."""

    __slots__ = ("texts",)

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts


class RawItem:
    """One item of a huge `ctxd/record`, kept as the JSON text it arrived in (the reader checked
    it: valid, strict, not too deep, Unicode) instead of parsed: 47 MB of 200-byte items parsed at
    once took 3.3 times the frame (issue #36; `ctxd/server/bigframe.py`). Parsed when it is stored,
    once: `take` hands the item over and lets go of the text, so the frame's texts are freed as
    its rows are made."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text: str | None = text

    def take(self) -> Any:
        """The parsed item; the text is let go of (a second `take` raises ValueError)."""
        text, self.text = self.text, None
        if text is None:
            raise ValueError("this item was taken already")
        return json.loads(text)

    def __repr__(self) -> str:
        shown = "taken" if self.text is None else f"{self.text[:60]!r}"
        return f"RawItem({shown})"
