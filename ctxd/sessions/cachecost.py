"""A followed session's prompt-cache facts, priced (ctxd/tokens/prompt_cache.py works out the state).

From what the session recorded per request: the latest main-chain request's time, whether its
cache writes went to Anthropic's 1-hour cache, and for each of the agent's compactions the cache
write of the first request after it (Claude: `cache_creation_input_tokens`, split 5-minute / 1-hour;
Codex: `cache_write_input_tokens` where it reports one, else the input it did not read from the
cache, which OpenAI bills at the full input rate).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctxd import agents
from ctxd.agents.session import Session, Usage
from ctxd.sessions import pricing
from ctxd.tokens import prompt_cache


def write_rate(provider: str | None, price: pricing.Price | None, one_hour: bool) -> float | None:
    """USD per million tokens a cold cache's re-write costs: Anthropic's cache-write rate (its
    1-hour one when the writes are 1-hour), OpenAI's input rate (no cache-write premium)."""
    if price is None or provider is None:
        return None
    if provider == prompt_cache.ANTHROPIC:
        return price.cache_write_1h if one_hour else price.cache_write
    return price.cache_write if price.cache_write is not None else price.input


def _compaction(provider: str | None, entry: Mapping[str, Any], prices: Mapping[str, pricing.Price] | None,
                fallback_model: str | None) -> dict[str, Any] | None:
    first = entry.get("firstRequest")
    if not isinstance(first, dict):
        return None  # no request after it yet
    model = str(first.get("model") or fallback_model or "")
    written, hour = int(first.get("cacheWrite") or 0), int(first.get("cacheWrite1h") or 0)
    usage = Usage(cache_write=written, cache_write_1h=min(hour, written))
    if provider == prompt_cache.OPENAI and not written:
        written = int(first.get("input") or 0)  # written to OpenAI's cache at the input rate
        usage = Usage(input=written)
    priced = pricing.cost({model: usage}, prices)
    price = pricing.lookup(model, prices)
    read = price.cached_input if price is not None else None
    at = entry.get("at") if isinstance(entry.get("at"), str) else None
    return prompt_cache.compaction_cost(at, written, priced["total"] if priced["priced"] else None,
                                 entry.get("tokensBefore"), entry.get("tokensAfter"), read)


def facts(session: Session, prices: Mapping[str, pricing.Price] | None = None) -> dict[str, Any]:
    """The facts `prompt_cache.state` needs, kept with the mirrored thread (and `ctxd sessions`)."""
    agent = agents.find(session.agent)
    provider = prompt_cache.provider_of(agent.cache_provider if agent is not None else None, session.model)
    rate = write_rate(provider, pricing.lookup(session.model, prices), session.cache_1h)
    compactions = [c for c in (_compaction(provider, e, prices, session.model) for e in session.agent_compactions)
                   if c is not None]
    return prompt_cache.facts(provider, session.last_request_at, session.cache_1h, rate, compactions)
