"""ctxd's gauge in Codex's own footer: a status-line provider as Codex 0.171 reads one from an MCP
server (its bundled `create-statusline` skill, `references/statusline.d.ts`).

`ctxd mcp` advertises one tool whose `_meta["openai/ui"].entrypoints` holds a `statusline` entry
naming a resource; Codex reads that resource every second with the displayed thread's snapshot in
`params._meta["com.openai/codex-statusline-state"]` (`StatuslineState`: `thread.id`,
`thread.workspace.cwd`, `thread.usage.context`...) and draws the UI tree the resource's text holds.
Codex's limits: the tree's JSON at most 64 KiB, 256 non-null nodes, depth 16, 16 KiB of text;
each read answered within 1 s (an error or a timeout stops the polling until the user selects the
provider again in `/statusline`). So the gauge is asked of the owner with a short deadline, and
when it cannot answer in time the footer shows Codex's own numbers instead of failing.
"""

from __future__ import annotations

import time

from ctxd import leanjson

TYPE_CHECKING = False  # (`ctxd mcp` imports this before it answers `initialize`: no `typing`, no `json`)
if TYPE_CHECKING:
    from typing import Any

URI = "ui://ctxd/statusline"
STATE_KEY = "com.openai/codex-statusline-state"
ENTRYPOINT = {"openai/ui": {"entrypoints": [{"type": "statusline", "resourceUri": URI}]}}
OWNER_SECONDS = 0.6
"""How long a read waits for the owner's gauge (Codex gives the whole read one second)."""
MAX_TREE_BYTES = 64 * 1024
WARN, COMPACT = 0.8, 1.0  # the editors' tiers, against the agent's own compaction point


def field(value: Any, key: str) -> dict[str, Any]:
    """`value[key]` when both are objects, else an empty one (the snapshot is Codex's to shape)."""
    found = value.get(key) if isinstance(value, dict) else None
    return found if isinstance(found, dict) else {}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _short(tokens: float) -> str:
    if tokens >= 1_000_000:
        return f"{tokens / 1_000_000:.1f}M"
    return f"{tokens / 1000:.1f}k" if tokens >= 1000 else f"{tokens:.0f}"


def _ago(seconds: float) -> str:
    if seconds < 90:
        return "just now"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.0f}h ago" if seconds < 86400 else f"{seconds / 86400:.0f}d ago"


def tree(gauge: dict[str, Any] | None, state: dict[str, Any], checkpoint_at: float | None = None) -> dict[str, Any]:
    """The footer: `ctxd`, the fill against the compaction point (coloured by tier), the cost and
    the last checkpoint's age. From ctxd's gauge when it has one, else from Codex's own numbers."""
    parts: list[Any] = [{"type": "text", "props": {"color": "status-metadata"}, "children": ["ctxd"]}]
    if gauge is not None:
        used, point = _number(gauge.get("usedTokens")), _number(gauge.get("compactAt"))
        cost = gauge.get("costUsd")
    else:
        usage = field(field(state, "thread"), "usage")
        context = field(usage, "context")
        used, point = _number(context.get("used_tokens")), _number(context.get("context_window_size"))
        cost = field(usage, "cost").get("total_cost_usd")
    if used is not None and point:
        ratio = used / point
        colour = "red" if ratio >= COMPACT else "yellow" if ratio >= WARN else "status-usage"
        parts.append({"type": "text", "props": {"color": colour},
                      "children": [f"{100 * ratio:.0f}% of {_short(point)}"]})
    dollars = _number(cost)
    if dollars is not None:
        parts.append(f"${dollars:.2f}")
    if checkpoint_at is not None:
        parts.append({"type": "text", "props": {"color": "status-metadata"},
                      "children": [f"checkpoint {_ago(max(0.0, time.time() - checkpoint_at))}"]})
    return {"type": "row", "props": {"gap": 1, "wrap": "nowrap"}, "children": parts}


def resource_text(ui: dict[str, Any]) -> str:
    text = leanjson.dumps(ui, ascii_only=False)
    if len(text.encode("utf-8")) > MAX_TREE_BYTES:  # never: a handful of short leaves
        text = leanjson.dumps("ctxd")
    return text
