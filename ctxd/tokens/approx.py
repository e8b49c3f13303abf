"""Per-item token estimates, cached at record time.

The ledger's numbers follow Codex's coarse rules so that they are cheap and conservative:
serialized JSON bytes / 4 rounded up; encrypted reasoning decoded to about `len*3/4 - 650` bytes;
an inline (base64) image costs a fixed 7,373 bytes; ghost snapshots cost nothing because they are
never sent to a model.
"""

from __future__ import annotations

import json
from typing import Any

IMAGE_BYTES = 7373
REASONING_OVERHEAD_BYTES = 650


def approx_tokens_from_bytes(byte_count: int) -> int:
    """Bytes / 4, rounded up: the estimate errs on the side of compacting early."""
    return (max(0, byte_count) + 3) // 4


def approx_text_tokens(text: str) -> int:
    return approx_tokens_from_bytes(len(text.encode("utf-8", "surrogatepass")))


def _strip_images(value: Any) -> tuple[Any, int]:
    """Return a copy with inline image payloads emptied, and how many images there were."""
    if isinstance(value, dict):
        if value.get("type") == "input_image":
            url = value.get("image_url")
            if isinstance(url, str):
                return {**value, "image_url": ""}, 1
        count = 0
        out: dict[str, Any] = {}
        for key, inner in value.items():
            out[key], n = _strip_images(inner)
            count += n
        return out, count
    if isinstance(value, list):
        count = 0
        items = []
        for inner in value:
            stripped, n = _strip_images(inner)
            items.append(stripped)
            count += n
        return items, count
    return value, 0


def json_bytes(item: dict[str, Any]) -> int:
    return len(json.dumps(item, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass"))


def item_tokens(item: dict[str, Any]) -> int:
    """The estimate for one ledger item (Codex's rules)."""
    kind = item.get("type")
    if kind == "ghost_snapshot":
        return 0
    encrypted = item.get("encrypted_content")
    if kind in ("reasoning", "compaction") and isinstance(encrypted, str) and encrypted:
        decoded = max(0, len(encrypted) * 3 // 4 - REASONING_OVERHEAD_BYTES)
        return approx_tokens_from_bytes(decoded)
    stripped, images = _strip_images(item)
    return approx_tokens_from_bytes(json_bytes(stripped) + images * IMAGE_BYTES)
