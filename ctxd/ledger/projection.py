"""Projection of a ledger into a model-ready prompt.

The stored ledger keeps everything as recorded; the projection repairs what a model API would
reject. Every call gets an output (an `aborted` one is synthesized right after a call that has
none), outputs without a call are dropped, ghost snapshots are removed, and images are replaced by
a short text when the model takes no images. Reasoning items that came before the latest real user
message are left out (Codex's prompt does the same: reasoning belongs to the turn it was made for,
and the Responses API discards a finished turn's reasoning anyway). Two passes over the list, so
linear in its length.

Most ledgers need no repair but dropping items (ghost snapshots, finished turns' reasoning).
`Repairs` follows, as items are added, what a projection would change: when it is only drops, the
prompt is the ledger less the items at `Repairs.dropped()`, taken by slices without the two passes
(which read every item and, on a long ledger, cost several times as much).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from ctxd.ledger.rules import CALL_TO_OUTPUT, TOOL_OUTPUT_TYPES, is_real_user_message

# Codex's words, so that a model sees the same text through either.
IMAGE_PLACEHOLDER = "image content omitted because you do not support image input"


def _without_images(value: Any) -> Any:
    if isinstance(value, list):
        return [_without_images(part) for part in value]
    if isinstance(value, dict) and value.get("type") == "input_image":
        return {"type": "input_text", "text": IMAGE_PLACEHOLDER}
    return value


def _has_image(value: Any) -> bool:
    return isinstance(value, list) and any(isinstance(p, dict) and p.get("type") == "input_image" for p in value)


def _strip_images(item: dict[str, Any]) -> dict[str, Any]:
    for field in ("content", "output"):
        value = item.get(field)
        if _has_image(value):
            item = {**item, field: _without_images(value)}
    return item


def project(items: Iterable[dict[str, Any]], input_modalities: Iterable[str] = ("text", "image")) -> list[dict[str, Any]]:
    """Return a new list; the items themselves are shared, never mutated."""
    items = list(items)
    return [items[part] if isinstance(part, int) else part for part in project_indexed(items, input_modalities)]


def latest_user_message(items: Sequence[dict[str, Any]]) -> int:
    """The index of the latest real user message, or -1. Searched from the end: it is near it."""
    for index in range(len(items) - 1, -1, -1):
        if is_real_user_message(items[index]):
            return index
    return -1


def project_indexed(items: Sequence[dict[str, Any]], input_modalities: Iterable[str] = ("text", "image")
                    ) -> list[int | dict[str, Any]]:
    """The projection, as the index in `items` of each item it passes through unchanged and the
    item itself where it made or changed one (a synthesized output, images replaced). Indices,
    not pairs: a prompt of 100k items then allocates nothing the garbage collector must walk."""
    calls: set[tuple[str, Any]] = set()
    answered: set[tuple[str, Any]] = set()
    boundary = latest_user_message(items)  # reasoning before it is resolved
    for item in items:
        kind = item.get("type")
        if kind in CALL_TO_OUTPUT:
            calls.add((CALL_TO_OUTPUT[kind], item.get("call_id")))
        elif kind in TOOL_OUTPUT_TYPES:
            answered.add((kind, item.get("call_id")))

    keep_images = "image" in input_modalities
    out: list[int | dict[str, Any]] = []
    for index, item in enumerate(items):
        kind = item.get("type")
        if (kind == "ghost_snapshot" or (kind == "reasoning" and index < boundary)
                or (kind in TOOL_OUTPUT_TYPES and (kind, item.get("call_id")) not in calls)):
            continue
        shown = item if keep_images else _strip_images(item)
        out.append(index if shown is item else shown)
        if kind in CALL_TO_OUTPUT:
            key = (CALL_TO_OUTPUT[kind], item.get("call_id"))
            if key not in answered:
                out.append({"type": key[0], "call_id": key[1], "output": "aborted"})
    return out


class Repairs:
    """What the projection of a list of items would repair, counted as items are added (in order),
    so that a ledger knows when its prompt is itself: `needed` is False exactly when
    `project_indexed` would pass every item through unchanged."""

    def __init__(self) -> None:
        self.items = 0  # items counted: a ledger whose list has another length must not trust the counts
        self.calls: set[tuple[str, Any]] = set()  # (output type, call id) of every call
        self.outputs: Counter[tuple[str, Any]] = Counter()  # outputs per (type, call id)
        self.unanswered = 0  # calls with no output: the projection adds one
        self.orphans = 0  # outputs with no call: the projection drops them
        self.images = 0  # items with image parts: changed for a model without image input
        self.drops: list[int] = []  # positions of ghost snapshots and of resolved reasoning: dropped
        self.open_reasoning: list[int] = []  # positions of reasoning since the latest real user message

    def add(self, item: dict[str, Any]) -> None:
        self.items += 1
        kind = item.get("type")
        if kind == "ghost_snapshot":
            self.drops.append(self.items - 1)
        elif kind == "reasoning":
            self.open_reasoning.append(self.items - 1)
        elif is_real_user_message(item):
            self.drops += self.open_reasoning
            self.open_reasoning = []
        elif kind in CALL_TO_OUTPUT:
            key = (CALL_TO_OUTPUT[kind], item.get("call_id"))
            if key not in self.calls:
                self.calls.add(key)
                waiting = self.outputs[key]
                if waiting:
                    self.orphans -= waiting  # its outputs came first: no longer orphans
                else:
                    self.unanswered += 1
        elif kind in TOOL_OUTPUT_TYPES:
            key = (kind, item.get("call_id"))
            self.outputs[key] += 1
            if key not in self.calls:
                self.orphans += 1
            elif self.outputs[key] == 1:
                self.unanswered -= 1
        if _has_image(item.get("content")) or _has_image(item.get("output")):
            self.images += 1

    def needed(self, count: int, input_modalities: Iterable[str]) -> bool:
        """Whether a list of `count` items (the ones added) needs the full projection: when not,
        the projection is the list less the items at `dropped()`."""
        return (count != self.items or self.unanswered > 0 or self.orphans > 0
                or (self.images > 0 and "image" not in input_modalities))

    def dropped(self) -> list[int]:
        """The positions the projection drops, in order (when it is not `needed`)."""
        return sorted(self.drops)


def without(items: Sequence[Any], positions: list[int]) -> list[Any]:
    """`items` less those at `positions` (sorted), taken by slices."""
    kept: list[Any] = []
    start = 0
    for position in positions:
        kept += items[start:position]
        start = position + 1
    kept += items[start:]
    return kept
