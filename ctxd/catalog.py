"""Built-in model catalogue: context window and tokenizer of common models (placeholder; issue 3 extends)."""

from __future__ import annotations

_WINDOWS = {
    "gpt-5": 400_000,
    "gpt-4.1": 1_047_576,
    "gpt-4o": 128_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
}


def context_window_for(model: str | None) -> int | None:
    if not model:
        return None
    for prefix in sorted(_WINDOWS, key=len, reverse=True):
        if model.startswith(prefix):
            return _WINDOWS[prefix]
    return None
