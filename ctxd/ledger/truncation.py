"""Middle truncation of large tool outputs.

The head of a tool's output usually says what ran and the tail says how it ended; the middle is
the cheapest part to lose. A token budget becomes a byte budget (4 bytes a token), split in half
between head and tail, both cut on UTF-8 character boundaries, joined by `…N tokens truncated…`
where N is the text's estimate (bytes / 4, rounded up) less the budget, as Codex reports it.

Recording allows 1.2x the configured limit (Codex's `with_serialization_allowance`), so that an
output a client already truncated to the limit, with its own marker and framing, is not cut again.
"""

from __future__ import annotations

from typing import Any

from ctxd.ledger.rules import TOOL_OUTPUT_TYPES
from ctxd.tokens.approx import approx_tokens_from_bytes

BYTES_PER_TOKEN = 4
SERIALIZATION_ALLOWANCE = 1.2


def with_serialization_allowance(max_tokens: int) -> int:
    """The budget a recorded tool output gets for a configured limit: 1.2x, rounded up (Codex)."""
    return -(-max(0, max_tokens) * 12 // 10)


def _head(data: bytes, budget: int) -> bytes:
    """The longest prefix of at most `budget` bytes that ends on a character boundary."""
    end = min(budget, len(data))
    while end > 0 and end < len(data) and (data[end] & 0xC0) == 0x80:
        end -= 1
    return data[:end]


def _tail(data: bytes, budget: int) -> bytes:
    """The longest suffix of at most `budget` bytes that starts on a character boundary."""
    start = max(0, len(data) - budget)
    while start < len(data) and (data[start] & 0xC0) == 0x80:
        start += 1
    return data[start:]


def truncate_text(text: str, max_tokens: int) -> str:
    """Keep head and tail within `max_tokens` (approximate), marking what was removed."""
    data = text.encode("utf-8", "surrogatepass")
    budget = max(0, max_tokens) * BYTES_PER_TOKEN
    if len(data) <= budget:
        return text
    left_budget = budget // 2
    head = _head(data, left_budget)
    tail = _tail(data, budget - left_budget)
    removed_tokens = approx_tokens_from_bytes(len(data)) - max(0, max_tokens)
    marker = f"…{removed_tokens} tokens truncated…"
    return head.decode("utf-8", "surrogatepass") + marker + tail.decode("utf-8", "surrogatepass")




def truncate_tool_output(item: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    """Bound a tool output's text to `max_tokens`; other items, and images, pass through unchanged.

    A list output shares one budget across its text parts in order (Codex's
    `truncate_function_output_items_with_policy`): parts that fit are kept, the first that does
    not is middle-truncated to what is left, and the text parts after it are replaced by one
    `[omitted N text items ...]` note. Empty text parts are dropped, as Codex drops them.
    """
    if item.get("type") not in TOOL_OUTPUT_TYPES:
        return item
    output = item.get("output")
    if isinstance(output, str):
        truncated = truncate_text(output, max_tokens)
        return item if truncated is output else {**item, "output": truncated}
    if not isinstance(output, list):
        return item
    remaining = max(0, max_tokens)
    parts: list[Any] = []
    omitted = 0
    changed = False
    for part in output:
        text = part.get("text") if isinstance(part, dict) else None
        if not isinstance(text, str):
            parts.append(part)
            continue
        if not text:
            changed = True
            continue
        if remaining == 0:
            omitted += 1
            continue
        cost = approx_tokens_from_bytes(len(text.encode("utf-8", "surrogatepass")))
        if cost <= remaining:
            remaining -= cost
            parts.append(part)
            continue
        snippet = truncate_text(text, remaining)
        if snippet:
            parts.append({**part, "text": snippet})
        else:
            omitted += 1
        remaining = 0
        changed = True
    if omitted:
        parts.append({"type": "input_text", "text": f"[omitted {omitted} text items ...]"})
        changed = True
    return {**item, "output": parts} if changed else item
