"""A followed session's window and auto-compact point, as its agent computes them (docs/sessions.md).

The gauge of a followed session must say what the agent will do, not what ctxd would: the window
is the session's (never the editor's `contextWindow` setting) and the auto-compact point is the
agent's own rule for that model, in the agent's version named below. Each result says where its
numbers come from, so an inferred one is labelled as such.

- Codex 0.171 (codex-rs `ModelContextMetadata::auto_compact_token_limit_with_override`): the
  configured `model_auto_compact_token_limit` (or the model's own `auto_compact_token_limit`),
  never above 90% of the model's context window; without either, 90% of it. The rollout's
  `model_context_window` is the *effective* window (95% of the model's, Codex's
  `effective_context_window_percent`), so the model's window comes from the catalogue.
- Claude Code 2.1.332: it compacts at its effective window (the model's window less
  min(default output tokens, 20,000)) less a 13,000-token buffer, and warns 20,000 tokens before
  that; `CLAUDE_AUTOCOMPACT_PCT_OVERRIDE` lowers the point to that percent of the effective
  window. A model it does not know gets a 200,000-token window.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxd.tokens import catalog

CODEX_VERSION = "0.171"
CLAUDE_VERSION = "2.1.332"
CODEX_COMPACT_FRACTION = (9, 10)  # context_window * 9 / 10
CODEX_EFFECTIVE_PERCENT = 95  # default effective_context_window_percent
CLAUDE_UNKNOWN_WINDOW = 200_000  # Claude Code's window for a model it does not recognise
CLAUDE_OUTPUT_RESERVE = 20_000  # at most this much of the default output is set aside
CLAUDE_COMPACT_BUFFER = 13_000
CLAUDE_WARN_BEFORE = 20_000
CLAUDE_DEFAULT_OUTPUT = 32_000  # an unknown model's default output (reserve: 20,000 either way)


@dataclass(frozen=True)
class AgentLimits:
    window: int
    window_source: str
    limit: int  # tokens at which the agent compacts by itself
    limit_source: str
    warn_at: int  # tokens from which the gauge warns


def codex(model: str | None, stated_window: int | None, configured: int | None = None) -> AgentLimits:
    """Codex's window (what the rollout states, else the catalogue's effective one) and its
    auto-compact limit for `model` with the user's `model_auto_compact_token_limit`."""
    info = catalog.lookup(model)
    if info is not None and (info.source == "codex" or not stated_window):
        model_window = info.context_window
        model_source = f"Codex {CODEX_VERSION}'s models.json ({model})" if info.source == "codex" else \
            f"ctxd's model catalogue ({model})"
    elif stated_window:
        model_window = stated_window * 100 // CODEX_EFFECTIVE_PERCENT
        model_source = f"inferred: the rollout's window / {CODEX_EFFECTIVE_PERCENT}% (model {model!r} is unknown)"
    else:
        model_window = 0
        model_source = "unknown"
    window = stated_window or model_window * CODEX_EFFECTIVE_PERCENT // 100
    window_source = "the rollout's model_context_window" if stated_window else model_source
    num, den = CODEX_COMPACT_FRACTION
    cap = model_window * num // den
    if configured and configured > 0 and (not cap or configured < cap):
        limit, source = configured, "model_auto_compact_token_limit in Codex's config.toml"
    else:
        limit, source = cap, f"Codex {CODEX_VERSION}'s default: 90% of the model's window ({model_source})"
    return AgentLimits(window, window_source, limit, source, _warn(limit))


def claude(model: str | None, pct_override: float | None = None) -> AgentLimits:
    """Claude Code's window for `model` and where it compacts by itself."""
    info = catalog.lookup(model)
    window = catalog.context_window_for(model)
    if info is None or window is None:
        window, window_source = CLAUDE_UNKNOWN_WINDOW, \
            f"Claude Code {CLAUDE_VERSION}'s window for a model it does not recognise ({model!r})"
        output = CLAUDE_DEFAULT_OUTPUT
    else:
        window_source = f"Claude Code {CLAUDE_VERSION}'s model catalogue ({info.prefix}" + (
            ", [1m])" if catalog.one_million_tag(model) else ")")
        output = info.max_output or CLAUDE_DEFAULT_OUTPUT
    effective = window - min(output, CLAUDE_OUTPUT_RESERVE)
    limit = effective - CLAUDE_COMPACT_BUFFER
    source = (f"Claude Code {CLAUDE_VERSION}: window - min(default output, {CLAUDE_OUTPUT_RESERVE:,}) - "
              f"{CLAUDE_COMPACT_BUFFER:,}")
    if pct_override and 0 < pct_override <= 100:
        limit = min(int(effective * pct_override / 100), limit)
        source += f", CLAUDE_AUTOCOMPACT_PCT_OVERRIDE={pct_override:g}"
    return AgentLimits(window, window_source, limit, source, max(0, limit - CLAUDE_WARN_BEFORE))


def _warn(limit: int) -> int:
    """Codex has no warning tier of its own: ctxd's (80% of the limit)."""
    return limit * 4 // 5


def codex_configured_limit(codex_home: Path) -> int | None:
    """`model_auto_compact_token_limit` from `$CODEX_HOME/config.toml` (read only), if set."""
    try:
        with open(codex_home / "config.toml", "rb") as handle:
            value = tomllib.load(handle).get("model_auto_compact_token_limit")
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return None
    return value if type(value) is int and value > 0 else None


def claude_pct_override(claude_home: Path) -> float | None:
    """`CLAUDE_AUTOCOMPACT_PCT_OVERRIDE` as Claude Code's user settings set it (`env` in
    settings.json), if any."""
    try:
        settings = json.loads((claude_home / "settings.json").read_text(encoding="utf-8"))
        raw: Any = (settings.get("env") or {}).get("CLAUDE_AUTOCOMPACT_PCT_OVERRIDE")
        value = float(raw)  # None or a non-number: TypeError, ValueError
    except (OSError, ValueError, TypeError, AttributeError):
        return None
    return value if 0 < value <= 100 else None
