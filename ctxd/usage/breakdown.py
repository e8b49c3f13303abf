"""The context window's breakdown: where the tokens of a request go (`ctxd/usage`).

A pure function of the thread's prompt context (the fixed overhead every request carries), its
gauge (`UsageSnapshot`) and the window settings, like qwen-code's `/context`. Two invariants (protocol v2):

- the breakdown never contradicts the gauge: the categories other than `freeSpace` and
  `autocompactBuffer` add up to the gauge's `usedTokens` exactly, in every mode. `messages` is
  what the overhead leaves of it; when the overhead's count exceeds it, the overhead categories
  are scaled down to fit (largest-remainder rounding, so the sums are exact in integers);
- `estimated` mode (`totalTokens` null, no `messages` row) is only for a thread with no messages
  yet; once items are recorded, `messages` is there, estimated from the ledger until the model API
  reports a total.

`autocompactBuffer` is the window minus the auto-compact limit and `freeSpace` the rest, so the
categories add up to the window exactly while the thread fits. When `usedTokens` exceeds the window,
both are 0 and `overflowTokens` says by how much.

Token counts of the context's parts come from `overhead_counts`, computed once per prompt
context and counter and cached by the caller; a usage answer never re-tokenizes anything.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctxd.protocol.shapes import Breakdown, Category, CategoryName, Detail, UsageSnapshot

CATEGORY_ORDER: tuple[CategoryName, ...] = ("systemPrompt", "builtinTools", "mcpTools", "skills", "memoryFiles", "messages",
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
    inferred: dict[str, str] = field(default_factory=dict)  # category -> how its number was inferred

    def total(self, category: str) -> int:
        return sum(p.tokens for p in self.categories[category])

    @functools.cached_property
    def tokens(self) -> int:
        """All parts (asked on every usage answer; the parts never change once counted)."""
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
    _infer_fixed_overhead(context, out)
    return out


# A followed session's overhead the agent's files do not state, per agent: the categories it goes
# to, each with its detail's name and its share. Claude Code's transcripts state neither its system
# prompt nor its tools; its own /context counts them apart. Its first request (Claude Code 2.1.332,
# `claude -p` captured by the fake Messages server of tests/model_servers.py) carried a system
# prompt of 7.1k estimated tokens and 12 tool declarations of 11.9k: the tools are 62.5% of the two.
AGENT_OVERHEAD: dict[str, tuple[tuple[CategoryName, str, float], ...]] = {
    "claude": (("builtinTools", "Claude Code's built-in tools (inferred)", 0.625),
               ("systemPrompt", "Claude Code's system prompt and memory (inferred)", 0.375)),
    "codex": (("builtinTools", "Codex's built-in tools and instructions (inferred)", 1.0),),
}
INFERRED_HOW = "the first request's reported input less the messages it carried{}"
SPLIT_HOW = "; Claude Code's tools and system prompt split as its own first request carries them (62.5% tools)"


def _infer_fixed_overhead(context: dict[str, Any], out: OverheadCounts) -> None:
    """A followed session: its first request's reported input, less the messages it carried and
    the parts the file states, is the agent's fixed overhead (labelled as inferred), split between
    its tools and its system prompt as the agent's own requests carry them."""
    followed = context.get("followed")
    first = followed.get("firstRequest") if isinstance(followed, dict) else None
    parts = AGENT_OVERHEAD.get(str(followed.get("agent"))) if isinstance(followed, dict) else None
    if not isinstance(first, dict) or parts is None:
        return
    stated = sum(out.total(c) for c in OVERHEAD_CATEGORIES)
    rest = int(first.get("tokens") or 0) - int(first.get("messages") or 0) - stated
    if rest <= 0:
        return
    how = INFERRED_HOW.format(" and the instructions and tools the file states" if stated else "")
    shares = apportion(rest, [round(share * 1000) for _, _, share in parts])
    for (category, name, _), tokens in zip(parts, shares, strict=True):
        if tokens > 0:
            out.categories[category].append(Part(name, tokens))
            out.inferred[category] = how + (SPLIT_HOW if len(parts) > 1 else "")


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


def _details(parts: Iterable[Part], tokens: int) -> list[Detail]:
    """Details scaled to add up to the category's tokens, biggest first."""
    parts = [p for p in parts if p.tokens > 0]
    shares = apportion(tokens, [p.tokens for p in parts])
    rows: list[Detail] = [{"name": p.name, "tokens": s} for p, s in zip(parts, shares) if s > 0]
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
    usage: UsageSnapshot,
    overhead: OverheadCounts,
    message_groups: dict[str, int] | None = None,
    has_messages: bool | None = None,
) -> Breakdown:
    """The `Breakdown` of docs/protocol.md. `usage` is the thread's UsageSnapshot: its `usedTokens` is
    the total the categories explain. `has_messages` says whether the thread has recorded items
    (default: whether the API has reported a total)."""
    window = max(0, int(context_window))
    total = max(0, int(usage.get("usedTokens") or 0))
    if has_messages is None:
        has_messages = usage.get("source") != "estimate"
    estimated = usage.get("source") == "estimate" and not has_messages
    raw = {c: overhead.total(c) for c in OVERHEAD_CATEGORIES}
    raw_overhead = sum(raw.values())
    # Without messages the overhead is the whole total; with them, at most the whole total.
    if raw_overhead > total or (estimated and raw_overhead != total):
        scaled = dict(zip(OVERHEAD_CATEGORIES, apportion(total, list(raw.values()))))
    else:
        scaled = dict(raw)
    used = {**scaled, **({} if estimated else {"messages": total - sum(scaled.values())})}

    limit = auto_compact_limit if 0 < auto_compact_limit < window else window
    buffer = max(0, min(window - limit, window - total))
    free = max(0, window - total - buffer)

    categories: list[Category] = []
    for name in CATEGORY_ORDER:
        if name == "messages" and estimated:
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
    result: Breakdown = {
        "model": model,
        "contextWindow": window,
        "mode": "estimated" if estimated else "actual",
        "totalTokens": None if estimated else total,
        "usage": usage,
        "categories": categories,
        "overflowTokens": max(0, total - window),
        "overheadTokens": overhead_now,
        "idleCost": overhead_now + IDLE_MESSAGE_TOKENS,
    }
    if overhead.inferred:
        result["inferred"] = dict(overhead.inferred)
    return result
