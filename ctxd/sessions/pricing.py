"""Cost of a session from the usage its model API reported and a price table.

The table ships as package data (`prices.json`, with its sources and date) and the user's config
overrides or extends it (`[prices."model"]` in `~/.config/ctxd/config.toml`). A model is found by
its exact name, or that name without a provider prefix, a `[1m]` tag, a release date or a
`-latest`/`-vN:M` suffix; nothing else. A model that is not found has no price: the cost says
`priced: false` and never guesses from a similar name.

The cost's parts (`input`, `cachedInput`, `cacheWrite`, `output`) always add up to `total`:
`cacheWrite` is every cache write, the 1-hour ones at their own rate (`cacheWrite1h` says how much
of it they are).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ctxd.agents.session import Usage
from ctxd.settings import Problem
from ctxd.tokens import catalog

MILLION = 1_000_000
PARTS = ("input", "cachedInput", "cacheWrite", "output")  # the cost's parts, in the order shown
PART_LABELS = {"input": "in", "cachedInput": "cache read", "cacheWrite": "cache write", "output": "out"}


@dataclass(frozen=True)
class Price:
    """USD per million tokens; None where the vendor has no such rate."""

    input: float
    cached_input: float | None
    cache_write: float | None
    output: float
    cache_write_1h: float | None = None  # Anthropic's 1-hour cache write (2x input)


def _price(raw: Mapping[str, Any]) -> Price | None:
    def number(*keys: str) -> float | None:
        for key in keys:
            value = raw.get(key)
            # at most 1e9 per million: a 401-digit price would overflow float() and fail every cost
            if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1e9:
                return float(value)
        return None

    input_price = number("input")
    output_price = number("output")
    if input_price is None or output_price is None:
        return None
    return Price(input_price, number("cachedInput", "cached_input"), number("cacheWrite", "cache_write"), output_price,
                 number("cacheWrite1h", "cache_write_1h"))


@lru_cache(maxsize=1)
def builtin_prices() -> dict[str, Price]:
    # (beside this module: `importlib.resources` cost every `ctxd sessions` 12 ms of imports)
    raw = json.loads(Path(__file__).with_name("prices.json").read_text(encoding="utf-8"))
    return {name: price for name, entry in raw["models"].items() if (price := _price(entry)) is not None}


def price_table(overrides: Mapping[str, Any] | None = None, problems: list[Problem] | None = None) -> dict[str, Price]:
    """The built-in table with the user's `prices` table on top; bad entries are reported."""
    table = dict(builtin_prices())
    for name, entry in (overrides or {}).items():
        price = _price(entry) if isinstance(entry, Mapping) else None
        if price is None:
            if problems is not None:
                problems.append(Problem("settings", f"setting 'prices.{name}' needs non-negative numbers 'input' and "
                                        "'output'", f"prices.{name}"))
            continue
        table[name.lower()] = price
    return table


def candidates(model: str) -> list[str]:
    """The names a model may be listed under, most specific first (the catalogue's rule)."""
    return catalog.candidates(model)


def lookup(model: str | None, table: Mapping[str, Price] | None = None) -> Price | None:
    if not model:
        return None
    table = table if table is not None else builtin_prices()
    for name in candidates(model):
        if name in table:
            return table[name]
    return None


def cost(per_model: Mapping[str, Usage], table: Mapping[str, Price] | None = None) -> dict[str, Any]:
    """`Breakdown.cost` (protocol v2) for usage split by model: what is priced is added up; a model
    without a price (or a token kind its price lacks) makes `priced` false and is named. Always
    finite and >= 0: a model whose cost is not (absurd counts or prices) counts as unpriced."""
    amounts = {"input": 0.0, "cachedInput": 0.0, "cacheWrite": 0.0, "output": 0.0}
    hour = 0.0
    unpriced: list[str] = []
    for model, usage in per_model.items():
        if not (usage.input or usage.cached_input or usage.cache_write or usage.output):
            continue
        price = lookup(model, table)
        hour_tokens = min(usage.cache_write_1h, usage.cache_write)
        if price is None or (usage.cached_input and price.cached_input is None) or (
                usage.cache_write > hour_tokens and price.cache_write is None) or (
                hour_tokens and price.cache_write_1h is None):
            unpriced.append(model or "(unknown model)")
            continue
        try:
            hour_part = hour_tokens * (price.cache_write_1h or 0.0) / MILLION
            part = {"input": usage.input * price.input / MILLION,
                    "cachedInput": usage.cached_input * (price.cached_input or 0.0) / MILLION,
                    "cacheWrite": (usage.cache_write - hour_tokens) * (price.cache_write or 0.0) / MILLION + hour_part,
                    "output": usage.output * price.output / MILLION}
        except OverflowError:  # a count too large for a float
            part, hour_part = {"input": math.inf}, 0.0
        if min(part.values()) < 0 or not math.isfinite(sum(amounts.values()) + sum(part.values())):
            unpriced.append(model or "(unknown model)")
            continue
        for kind, value in part.items():
            amounts[kind] += value
        hour += hour_part
    rounded = {k: round(v, 6) for k, v in amounts.items()}
    result: dict[str, Any] = {"currency": "USD", **rounded}
    # The parts as shown add up to the total as shown.
    result["total"] = round(sum(rounded.values()), 6)
    if hour:
        result["cacheWrite1h"] = round(hour, 6)
    result["priced"] = not unpriced
    if unpriced:
        result["unpricedModels"] = sorted(unpriced)
    return result


def client_cost(spend: Mapping[str, Mapping[str, int]], overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """`Breakdown.cost` of a client's thread from the usage its client reported, per model
    (`{model: {input, cachedInput, output}}`, input at the full rate)."""
    per_model = {model: Usage(input=int(parts.get("input", 0)), cached_input=int(parts.get("cachedInput", 0)),
                              output=int(parts.get("output", 0))) for model, parts in spend.items()}
    return cost(per_model, price_table(overrides))


def cents(cost: Mapping[str, Any]) -> dict[str, int]:
    """The total and its parts in whole cents, the parts rounded so that they add up to the total
    as shown (largest remainder): what every display of a cost prints."""
    total = round(float(cost.get("total") or 0.0) * 100)
    exact = [max(0.0, float(cost.get(k) or 0.0) * 100) for k in PARTS]
    shown = [math.floor(v) for v in exact]
    left = total - sum(shown)
    for i in sorted(range(len(PARTS)), key=lambda i: (-(exact[i] - shown[i]), i))[:max(0, left)]:
        shown[i] += 1
    return {"total": total, **dict(zip(PARTS, shown, strict=True))}


def parts_text(cost: Mapping[str, Any]) -> str:
    """`$5.32 = in $0.00 + cache read $3.90 + cache write $0.78 + out $0.64`, or `n/a`."""
    if not cost.get("priced"):
        return "n/a"
    shown = cents(cost)
    parts = " + ".join(f"{PART_LABELS[k]} ${shown[k] / 100:.2f}" for k in PARTS)
    return f"${shown['total'] / 100:.2f} = {parts}"
