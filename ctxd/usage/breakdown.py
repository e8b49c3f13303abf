"""The context window's breakdown: where the tokens of a request go (`ctxd/usage`).

A pure function of the thread's prompt context (the fixed overhead every request carries), its
usage snapshot and the window settings, like qwen-code's `/context`:

- before the model API has reported any usage (`mode: "estimated"`) the overhead categories are
  local counts, there is no `messages` row and `totalTokens` is null;
- afterwards (`mode: "actual"`) the API's total (plus the estimate of what was recorded since) is
  the truth: `messages` is what the overhead leaves of it, and when the overhead's local count
  exceeds the total, the overhead categories are scaled down to fit it exactly;
- `autocompactBuffer` is the window minus the auto-compact limit and `freeSpace` the rest, so the
  categories add up to the window exactly, in integers, always (largest-remainder rounding).

Token counts of the context's parts come from `overhead_counts`, computed once per prompt
context and counter and cached by the caller; a usage answer never re-tokenizes anything.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

CATEGORY_ORDER = ("systemPrompt", "builtinTools", "mcpTools", "skills", "memoryFiles", "messages",
                  "freeSpace", "autocompactBuffer")
OVERHEAD_CATEGORIES = ("systemPrompt", "builtinTools", "mcpTools", "skills", "memoryFiles")
UNATTRIBUTED = "(unattributed)"
SKILL_INSTRUCTIONS = "(skill tool instructions)"
# A one-message conversation pays the overhead plus about this much for the message's framing and
# a short question.
IDLE_MESSAGE_TOKENS = 8


@dataclass
class Part:
    name: str
    tokens: int


@dataclass
class OverheadCounts:
    """Token counts of a prompt context's parts, per category (before any scaling)."""

    categories: dict[str, list[Part]] = field(default_factory=lambda: {c: [] for c in OVERHEAD_CATEGORIES})

    def total(self, category: str) -> int:
        return sum(p.tokens for p in self.categories[category])

    @property
    def tokens(self) -> int:
        return sum(self.total(c) for c in OVERHEAD_CATEGORIES)


def tool_display_name(tool: dict[str, Any]) -> str:
    """MCP tools as `server__tool` (qwen-code's spelling); others by their name."""
    name = str(tool.get("name") or "?")
    server = tool.get("server")
    if tool.get("kind") == "mcp" and server and not name.startswith(f"{server}__"):
        return f"{server}__{name}"
    return name


def _declaration_text(tool: dict[str, Any]) -> str:
    """What a tool declaration costs: its name and schema as the model API sends them."""
    body = {"name": tool.get("name"), **({"schema": tool["schema"]} if tool.get("schema") is not None else {})}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def overhead_counts(context: dict[str, Any] | None, count: Callable[[str], int]) -> OverheadCounts:
    """Count each part of the prompt context once (camelCase keys, as `ctxd/setPromptContext` sends)."""
    out = OverheadCounts()
    context = context or {}
    instructions = context.get("baseInstructions") or ""
    if instructions:
        out.categories["systemPrompt"].append(Part("baseInstructions", count(instructions)))
    skill_tools = 0
    for tool in context.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        tokens = count(_declaration_text(tool))
        kind = tool.get("kind") or "builtin"
        if kind == "mcp":
            out.categories["mcpTools"].append(Part(tool_display_name(tool), tokens))
        elif kind == "skill":
            skill_tools += tokens
        else:
            out.categories["builtinTools"].append(Part(tool_display_name(tool), tokens))
    skills = [Part(str(s.get("name") or "?"), count(f"{s.get('name') or ''}: {s.get('description') or ''}"))
              for s in context.get("skills") or [] if isinstance(s, dict)]
    # The skill tool's declaration embeds every skill's name and description (seed 001): the
    # category is the declaration, the skills are its details, and the rest is its instructions.
    listed = sum(p.tokens for p in skills)
    if skill_tools > listed:
        skills.append(Part(SKILL_INSTRUCTIONS, skill_tools - listed))
    out.categories["skills"] = skills
    out.categories["memoryFiles"] = [Part(str(m.get("path") or "?"), count(m.get("content") or ""))
                                     for m in context.get("memoryFiles") or [] if isinstance(m, dict)]
    return out


def apportion(total: int, weights: Sequence[int]) -> list[int]:
    """Split `total` in proportion to `weights` into integers that add up to `total` exactly
    (largest remainder; ties go to the earlier weight)."""
    if total <= 0 or not weights:
        return [0] * len(weights)
    whole = sum(weights)
    if whole <= 0:
        return [total] + [0] * (len(weights) - 1)
    shares = [total * w // whole for w in weights]
    left = total - sum(shares)
    order = sorted(range(len(weights)), key=lambda i: (-(total * weights[i] % whole), i))
    for i in order[:left]:
        shares[i] += 1
    return shares


def _details(parts: Iterable[Part], tokens: int) -> list[dict[str, Any]]:
    """Details scaled to add up to the category's tokens, biggest first."""
    parts = [p for p in parts if p.tokens > 0]
    shares = apportion(tokens, [p.tokens for p in parts])
    rows = [{"name": p.name, "tokens": s} for p, s in zip(parts, shares) if s > 0]
    return sorted(rows, key=lambda d: (-d["tokens"], d["name"]))


def message_parts(groups: dict[str, int], messages: int) -> list[Part]:
    """The `messages` row's details: the ledger's cached estimates per kind of item, scaled down
    if they exceed what the API total leaves, with what they do not explain as unattributed."""
    parts = [Part(name, tokens) for name, tokens in groups.items() if tokens > 0]
    estimated = sum(p.tokens for p in parts)
    if estimated < messages:
        parts.append(Part(UNATTRIBUTED, messages - estimated))
    return parts


def breakdown(
    *,
    model: str | None,
    context_window: int,
    auto_compact_limit: int,
    usage: dict[str, Any],
    overhead: OverheadCounts,
    message_groups: dict[str, int] | None = None,
) -> dict[str, Any]:
    """The `Breakdown` of PROTOCOL.md. `usage` is the thread's UsageSnapshot; its `source` tells
    the mode ("estimate": no API usage yet) and its `usedTokens` is the total in actual mode."""
    window = max(0, int(context_window))
    actual = usage.get("source") != "estimate"
    raw = {c: overhead.total(c) for c in OVERHEAD_CATEGORIES}
    raw_overhead = sum(raw.values())
    total = max(0, int(usage.get("usedTokens") or 0)) if actual else None

    if total is not None and raw_overhead > total:
        scaled = dict(zip(OVERHEAD_CATEGORIES, apportion(total, list(raw.values()))))
    else:
        scaled = dict(raw)
    messages = total - sum(scaled.values()) if total is not None else 0
    used = {**scaled, **({"messages": messages} if actual else {})}

    # Everything must fit in the window: a total over it (a wrong window setting, an overhead
    # bigger than the window) is shown as a full window, each part in proportion.
    if sum(used.values()) > window:
        used = dict(zip(used, apportion(window, list(used.values()))))
    in_use = sum(used.values())
    limit = auto_compact_limit if 0 < auto_compact_limit < window else window
    buffer = min(window - limit, window - in_use)
    free = window - in_use - buffer

    categories: list[dict[str, Any]] = []
    for name in CATEGORY_ORDER:
        if name == "messages" and not actual:
            continue
        if name in OVERHEAD_CATEGORIES:
            tokens = used[name]
            details = _details(overhead.categories[name], tokens)
        elif name == "messages":
            tokens = used["messages"]
            details = _details(message_parts(message_groups or {}, tokens), tokens)
        else:
            tokens = free if name == "freeSpace" else buffer
            details = []
        categories.append({
            "name": name,
            "tokens": tokens,
            "percent": round(100.0 * tokens / window, 1) if window else 0.0,
            "details": details,
        })

    overhead_now = sum(used[c] for c in OVERHEAD_CATEGORIES)
    return {
        "model": model,
        "contextWindow": window,
        "mode": "actual" if actual else "estimated",
        "totalTokens": total,
        "usage": usage,
        "categories": categories,
        "overheadTokens": overhead_now,
        "idleCost": overhead_now + IDLE_MESSAGE_TOKENS,
    }
