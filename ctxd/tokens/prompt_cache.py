"""The prompt cache of a thread: warm or cold, what a cold cache makes the next turn re-write, and
what each compaction cost in cache writes against what it saves on every turn after it.

Providers keep a prompt's prefix cached for a while after the last request that read or wrote it
(`LIFETIMES`; the sources are in ctxd/sessions/prices.json, `cacheLifetimes`). Past that, the next
request writes the whole prompt again: at Anthropic's cache-write rate, at OpenAI's full input rate
instead of the cached one. A compaction makes the prompt shorter, so it writes a new (smaller)
prefix once and then reads fewer tokens on every request after it.

The facts are plain data kept with the thread (`facts`), priced when they were recorded; the state
is worked out when it is asked for (`state`), because it depends on the time. No I/O here.
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from typing import Any

from ctxd import isotime

ANTHROPIC = "anthropic"
OPENAI = "openai"
# Seconds a cached prefix is kept after its last use, as each provider documents it.
LIFETIMES = {ANTHROPIC: 300, OPENAI: 600}
ANTHROPIC_1H = 3600  # a prefix written to Anthropic's 1-hour cache (cache_creation.ephemeral_1h_input_tokens)
MILLION = 1_000_000


def provider_of(agent_provider: str | None, model: str | None) -> str | None:
    """Whose cache holds the thread's prompt: the agent's provider (its module's `cache_provider`:
    ANTHROPIC, OPENAI), else the model's; None unknown."""
    if agent_provider is not None:
        return agent_provider
    name = (model or "").lower()
    if "claude" in name:
        return ANTHROPIC
    from ctxd.tokens import catalog

    info = catalog.lookup(model)
    return OPENAI if info is not None and info.encoding is not None else None


def lifetime(provider: str | None, one_hour: bool = False) -> int:
    """The lifetime applied: Anthropic's 1-hour cache when the latest writes went there."""
    if provider == ANTHROPIC and one_hour:
        return ANTHROPIC_1H
    return LIFETIMES.get(provider or "", LIFETIMES[ANTHROPIC])


# The seconds `iso` writes by `time.strftime`: from 1970 up to the end of year 9999.
_STRFTIME_END = 253_402_300_800


def iso(seconds: float) -> str:
    """`seconds` as datetime writes them to the second (`2026-11-26T21:18:51Z`). By `time.strftime`
    where it writes the same (after 1970, before year 10000, a fraction that datetime's rounding to
    microseconds does not carry into the next second), twice as fast: `ctxd sessions` writes two for
    each of thousands of sessions; else (NaN too: ValueError, as datetime raises) by datetime."""
    whole = math.floor(seconds)
    if 0 <= whole < _STRFTIME_END and seconds - whole < 0.999999:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(whole))
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _iso_or_none(seconds: float) -> str | None:
    """`iso`, or None for a time datetime cannot write: a session's last request at the end of year
    9999 (a damaged or hostile file) expires in year 10000, and one such session failed the
    whole `ctxd/threads` listing and `ctxd sessions`."""
    try:
        return iso(seconds)
    except (OverflowError, OSError, ValueError):
        return None


def money(tokens: int, rate: float | None) -> float | None:
    """USD for `tokens` at `rate` per million, rounded as costs are (6 places); None unpriced."""
    return None if rate is None else round(tokens * rate / MILLION, 6)


def compaction_cost(at: str | None, written: int, write_cost: float | None, before: int | None,
                    after: int | None, read_rate: float | None, cold: bool | None = None) -> dict[str, Any]:
    """`CompactionCost`: the cache write the first request after a compaction made, and what every
    later request saves by reading `before - after` fewer cached tokens."""
    saved = max(0, (before or 0) - (after or 0)) if before is not None and after is not None else 0
    at = at if isinstance(at, str) and len(at) <= 64 else None
    result: dict[str, Any] = {"at": at or "", "cacheWriteTokens": written, "cacheWriteCost": write_cost,
                              "savedTokensPerTurn": saved, "savedCostPerTurn": money(saved, read_rate)}
    if cold is not None:
        result["coldCache"] = cold
    return result


def facts(provider: str | None, last_request_at: str | None, one_hour: bool, write_rate: float | None,
          compactions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """What a thread keeps to answer `state` later: when its last request was, the lifetime that
    applies, the rate a re-write costs (USD per million) and its compactions' costs."""
    return {"provider": provider, "lastRequestAt": last_request_at, "lifetimeSeconds": lifetime(provider, one_hour),
            "writeRate": write_rate, "compactions": list(compactions or [])}


def state(kept: dict[str, Any], prompt_tokens: int, now: float | None = None) -> dict[str, Any]:
    """`CacheState` now: warm until the last request's time plus the lifetime, cold after it (the
    next request re-writes `prompt_tokens`, the prompt so far); unknown without a known request
    time or provider."""
    now = time.time() if now is None else now
    span = kept.get("lifetimeSeconds")
    span = span if type(span) is int and 0 < span <= 86_400 else LIFETIMES[ANTHROPIC]
    last = isotime.seconds(kept.get("lastRequestAt"))
    rate = kept.get("writeRate")
    rate = float(rate) if isinstance(rate, (int, float)) and not isinstance(rate, bool) and 0 <= rate <= 1e9 else None
    prompt_tokens = max(0, int(prompt_tokens or 0))
    if last is None or kept.get("provider") is None:
        label, expires = "unknown", None
    else:
        label, expires = ("warm" if now < last + span else "cold"), _iso_or_none(last + span)
    result: dict[str, Any] = {"state": label, "lastRequestAt": _iso_or_none(last) if last is not None else None,
                              "lifetimeSeconds": span, "expiresAt": expires,
                              "rewriteTokens": prompt_tokens, "rewriteCost": money(prompt_tokens, rate)}
    compactions = kept.get("compactions")
    if isinstance(compactions, list) and compactions:
        result["compactions"] = [c for c in compactions if isinstance(c, dict)]
    return result


def text(cache: dict[str, Any], now: float | None = None) -> str:
    """One short phrase for a table or a status line: `cache warm 3m left`, `cache cold: next turn
    re-writes 120k ($0.45)`, `cache ?`."""
    if cache.get("state") == "warm":
        expires = isotime.seconds(cache.get("expiresAt"))
        if expires is None:  # (past what datetime writes: `_iso_or_none`)
            return "cache warm"
        left = max(0.0, expires - (time.time() if now is None else now))
        return f"cache warm {int(left // 60)}m left" if left >= 60 else f"cache warm {int(left)}s left"
    if cache.get("state") == "cold":
        cost = cache.get("rewriteCost")
        price = f" (${cost:.2f})" if isinstance(cost, (int, float)) else ""
        return f"cache cold: next turn re-writes {_k(int(cache.get('rewriteTokens') or 0))}{price}"
    return "cache ?"


def _k(tokens: int) -> str:
    return f"{tokens // 1000}k" if tokens >= 1000 else str(tokens)
