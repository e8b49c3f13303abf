"""Projection of a ledger into a model-ready prompt.

The stored ledger keeps everything as recorded; the projection repairs what a model API would
reject. Every call gets an output (an `aborted` one is synthesized right after a call that has
none), outputs without a call are dropped, ghost snapshots are removed, and images are replaced by
a short text when the model takes no images. Two passes over the list, so linear in its length.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from ctxd.ledger.rules import CALL_TO_OUTPUT, TOOL_OUTPUT_TYPES

# Codex's words, so that a model sees the same text through either.
IMAGE_PLACEHOLDER = "image content omitted because you do not support image input"


def _without_images(value: Any) -> Any:
    if isinstance(value, list):
        return [_without_images(part) for part in value]
    if isinstance(value, dict) and value.get("type") == "input_image":
        return {"type": "input_text", "text": IMAGE_PLACEHOLDER}
    return value


def _strip_images(item: dict[str, Any]) -> dict[str, Any]:
    for field in ("content", "output"):
        value = item.get(field)
        if isinstance(value, list) and any(isinstance(p, dict) and p.get("type") == "input_image" for p in value):
            item = {**item, field: _without_images(value)}
    return item


def project(items: Iterable[dict[str, Any]], input_modalities: Iterable[str] = ("text", "image")) -> list[dict[str, Any]]:
    """Return a new list; the items themselves are shared, never mutated."""
    items = list(items)
    return [items[part] if isinstance(part, int) else part for part in project_indexed(items, input_modalities)]


def project_indexed(items: Sequence[dict[str, Any]], input_modalities: Iterable[str] = ("text", "image")
                    ) -> list[int | dict[str, Any]]:
    """The projection, as the index in `items` of each item it passes through unchanged and the
    item itself where it made or changed one (a synthesized output, images replaced). Indices,
    not pairs: a prompt of 100k items then allocates nothing the garbage collector must walk."""
    calls: set[tuple[str, Any]] = set()
    answered: set[tuple[str, Any]] = set()
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
        if kind == "ghost_snapshot" or (kind in TOOL_OUTPUT_TYPES and (kind, item.get("call_id")) not in calls):
            continue
        shown = item if keep_images else _strip_images(item)
        out.append(index if shown is item else shown)
        if kind in CALL_TO_OUTPUT:
            key = (CALL_TO_OUTPUT[kind], item.get("call_id"))
            if key not in answered:
                out.append({"type": key[0], "call_id": key[1], "output": "aborted"})
    return out
