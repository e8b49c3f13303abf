"""The rules that say what an item is: one place for each, used by the ledger, rollback,
projection, compaction and the usage breakdown alike.

- A *tool call* and its *tool output* are paired by `call_id`; `CALL_TO_OUTPUT` names the pairs.
- *Injected context* is a user-role message a client wrote rather than a person typed (instruction
  files, environment, skills, the daemon's own markers): it is not a user turn and a compaction does
  not carry it forward.
- A *summary message* is the handoff a compaction wrote; it is not a user turn either.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

CALL_TO_OUTPUT = {"function_call": "function_call_output", "custom_tool_call": "custom_tool_call_output"}
TOOL_CALL_TYPES = frozenset(CALL_TO_OUTPUT)
TOOL_OUTPUT_TYPES = frozenset(CALL_TO_OUTPUT.values())

# Openings (compared case-insensitively, after leading white space) of user messages that a client
# injects: Codex's markers and ctxd's own.
INJECTED_PREFIXES = (
    "<environment_context",
    "<user_instructions",
    "<user_shell_command",
    "<skills_instructions",
    "<instructions",
    "# agents.md",
    "<ctxd:",
)

SUMMARY_PREFIX = resources.files("ctxd").joinpath("templates", "summary_prefix.md").read_text(encoding="utf-8").strip()


def message_text(item: dict[str, Any]) -> str:
    """The text parts of a message, joined by newlines; images and refusals are left out."""
    content = item.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = [part.get("text", "") for part in content
             if isinstance(part, dict) and part.get("type") in ("input_text", "output_text", "text")]
    return "\n".join(text for text in parts if isinstance(text, str))


def is_summary_message(item: dict[str, Any]) -> bool:
    return (item.get("type") == "message" and item.get("role") == "user"
            and message_text(item).startswith(SUMMARY_PREFIX))


def is_real_user_message(item: dict[str, Any]) -> bool:
    """A user message a person wrote: not a handoff summary, not injected context, not empty."""
    if item.get("type") != "message" or item.get("role") != "user":
        return False
    text = message_text(item)
    if not text.strip() or text.startswith(SUMMARY_PREFIX):
        return False
    return not text.lstrip().lower().startswith(INJECTED_PREFIXES)


def item_group(item: dict[str, Any]) -> str:
    """Which `messages` detail of the usage breakdown an item's tokens belong to."""
    kind = item.get("type")
    if kind == "message":
        role = item.get("role")
        return {"user": "userMessages", "assistant": "assistantMessages"}.get(str(role), "otherMessages")
    if kind in TOOL_CALL_TYPES:
        return "toolCalls"
    if kind in TOOL_OUTPUT_TYPES:
        return "toolResults"
    if kind == "reasoning":
        return "reasoning"
    if kind == "compaction":
        return "compactedHistory"
    return "other"


def snapshot_commit_id(item: dict[str, Any]) -> str | None:
    """The ghost commit a `ghost_snapshot` item records, if it is one."""
    if item.get("type") != "ghost_snapshot" or not isinstance(item.get("ghost_commit"), dict):
        return None
    commit_id = item["ghost_commit"].get("id")
    return commit_id if isinstance(commit_id, str) else None
