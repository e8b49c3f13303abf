"""The rules that say what an item is: one place for each, used by the ledger, rollback,
projection, compaction and the usage breakdown alike.

- A *tool call* and its *tool output* are paired by `call_id`; `CALL_TO_OUTPUT` names the pairs.
- *Injected context* is a user-role message a client wrote rather than a person typed (instruction
  files, environment, skills, the daemon's own markers): it is not a user turn and a compaction does
  not carry it forward.
- A *summary message* is the handoff a compaction wrote; it is not a user turn either.
- A *placeholder* is what an offline compaction leaves of a tool output it masked (the output's
  item, its `output` replaced by one line); the output itself is archived.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

CALL_TO_OUTPUT = {"function_call": "function_call_output", "custom_tool_call": "custom_tool_call_output"}
TOOL_CALL_TYPES = frozenset(CALL_TO_OUTPUT)
TOOL_OUTPUT_TYPES = frozenset(CALL_TO_OUTPUT.values())

# The placeholder's text (`ctxd/compact/offline.py` writes it, `mask_placeholder`): the tool's name,
# the output's size, and the error lines and definitions it quotes.
PLACEHOLDER_RE = re.compile(r"\[output of `[^`]*` removed by compaction: [^;\]]*"
                            r"(?:; errors: (?P<errors>.*?))?(?:; definitions: (?P<definitions>.*?))?\]\Z", re.DOTALL)
PLACEHOLDER_MAX_CHARS = 8192  # longer than any placeholder written: a text that only looks like one


def is_placeholder(item: Any) -> bool:
    """Whether `item` is a tool output whose output is a compaction's placeholder."""
    if not isinstance(item, dict) or item.get("type") not in TOOL_OUTPUT_TYPES:
        return False
    output = item.get("output")
    return isinstance(output, str) and len(output) <= PLACEHOLDER_MAX_CHARS and PLACEHOLDER_RE.match(output) is not None

# Injected user messages, as Codex recognises them (`is_contextual_user_fragment`): a text part that
# opens with the start marker and ends with the end marker, both compared case-insensitively after
# trimming white space.
CONTEXTUAL_USER_MARKERS = (
    ("# agents.md instructions for ", "</instructions>"),
    ("<agents_instructions>", "</agents_instructions>"),
    ("<environment_context>", "</environment_context>"),
    ("<multiagent_context>", "</multiagent_context>"),
    ("<skill>", "</skill>"),
    ("<user_shell_command>", "</user_shell_command>"),
    ("<turn_aborted>", "</turn_aborted>"),
    ("<subagent_notification>", "</subagent_notification>"),
    ("<goal_context>", "</goal_context>"),
)
# Codex's own warnings, which it injects as user messages (its legacy `Warning: ...` fragments).
CONTEXTUAL_USER_WARNINGS = (
    "Warning: The maximum number of unified exec processes",
    "Warning: apply_patch was requested via ",
    "Warning: Your account was flagged for potentially high-risk cyber activity",
)
# Openings (case-insensitive, after leading white space) that mark a user message as injected
# whatever its ending: older Codex spellings and ctxd's own markers.
INJECTED_PREFIXES = (
    "<environment_context",
    "<user_instructions",
    "<user_shell_command",
    "<skills_instructions",
    "<instructions",
    "# agents.md",
    "<ctxd:",
)
# Developer messages that carry per-turn context updates (Codex's CONTEXTUAL_DEVELOPER_PREFIXES):
# a rollback removes them with the turn they preceded.
CONTEXTUAL_DEVELOPER_PREFIXES = (
    "<permissions instructions>",
    "<model_switch>",
    "<collaboration_mode>",
    "<realtime_conversation>",
    "<personality_spec>",
    "<skills_instructions>",
    "<token_budget>",
    "<apps_instructions>",
    "<plugins_instructions>",
    "<multi_agent_mode>",
)

# Read beside the package (plain files of an installed package; importlib.resources costs the start-up more).
SUMMARY_PREFIX = (Path(__file__).resolve().parent.parent / "templates" / "summary_prefix.md").read_text(encoding="utf-8").strip()


def message_text(item: dict[str, Any]) -> str:
    """The non-empty text parts of a message, joined by newlines; images and refusals are left out
    (Codex's `content_items_to_text`: an empty part adds no blank line to what a compaction keeps)."""
    content = item.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = [part.get("text", "") for part in content
             if isinstance(part, dict) and part.get("type") in ("input_text", "output_text", "text")]
    return "\n".join(text for text in parts if isinstance(text, str) and text)


def is_summary_message(item: dict[str, Any]) -> bool:
    return (item.get("type") == "message" and item.get("role") == "user"
            and message_text(item).startswith(SUMMARY_PREFIX))


def _text_parts(item: dict[str, Any]) -> list[str]:
    content = item.get("content")
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)]


def is_contextual_user_text(text: str) -> bool:
    """Text a client injected into a user message rather than one a person typed."""
    stripped = text.strip()
    lowered = stripped.lower()
    if lowered.startswith(INJECTED_PREFIXES):
        return True
    if any(lowered.startswith(start) and lowered.endswith(end) for start, end in CONTEXTUAL_USER_MARKERS):
        return True
    return stripped.startswith(CONTEXTUAL_USER_WARNINGS)


def is_contextual_user_message(item: dict[str, Any]) -> bool:
    """A user message holding injected context (any of its text parts is), as Codex decides."""
    if item.get("type") != "message" or item.get("role") != "user":
        return False
    return any(is_contextual_user_text(text) for text in _text_parts(item))


def _is_contextual_developer_text(text: str) -> bool:
    return text.lstrip().lower().startswith(CONTEXTUAL_DEVELOPER_PREFIXES)


def is_contextual_developer_message(item: dict[str, Any]) -> bool:
    """A developer message carrying a per-turn context update (any part is one)."""
    if item.get("type") != "message" or item.get("role") != "developer":
        return False
    return any(_is_contextual_developer_text(text) for text in _text_parts(item))


def has_persistent_developer_text(item: dict[str, Any]) -> bool:
    """A developer message that also carries text that is not a context update (a mixed bundle)."""
    content = item.get("content")
    parts = content if isinstance(content, list) else [{"type": "input_text", "text": content}]
    return any(not (isinstance(part, dict) and isinstance(part.get("text"), str)
                    and _is_contextual_developer_text(part["text"])) for part in parts)


def is_real_user_message(item: dict[str, Any]) -> bool:
    """A user message a person wrote: not a handoff summary, not injected context, not empty.
    These start user turns (rollback) and are what a compaction carries forward."""
    if item.get("type") != "message" or item.get("role") != "user":
        return False
    text = message_text(item)
    if not text.strip() or text.startswith(SUMMARY_PREFIX):
        return False
    return not is_contextual_user_message(item)


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
