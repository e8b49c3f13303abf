"""The history that replaces a compacted one.

After a compaction the next model sees, in order: the most recent real user messages (newest
first up to a token budget, the one that overflows middle-truncated, then put back in
chronological order), one user message holding the handoff summary behind a fixed prefix, and
every ghost snapshot (they cost nothing and keep undo working across the compaction).

"Real" user messages are the ones a person typed: earlier handoff summaries and the context a
client injects (instruction files, environment) are user messages too, but carrying them forward
would duplicate what the next turn re-injects or what the new summary already says.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from ctxd import ledger
from ctxd.tokens import approx_text_tokens
from ctxd.truncate import truncate_text

# Openings of user messages that a client injects rather than a person types: the ledger's list
# (used for rollback turns) and a few more that only matter here.
INJECTED_PREFIXES = tuple(prefix.lower() for prefix in ledger.INJECTED_PREFIXES) + (
    "<environment_context",
    "<user_instructions",
    "<skills_instructions",
    "<instructions",
    "# agents.md",
)


def _template(name: str) -> str:
    return resources.files("ctxd").joinpath("templates", name).read_text(encoding="utf-8")


SUMMARY_PREFIX = _template("summary_prefix.md").strip()
DEFAULT_COMPACT_PROMPT = _template("compact_prompt.md").strip()


def compact_prompt(prompt_file: str | None) -> str:
    """The handoff instruction: the user's `compact_prompt_file` when set, else ours."""
    if prompt_file:
        text = Path(prompt_file).expanduser().read_text(encoding="utf-8").strip()
        if text:
            return text
    return DEFAULT_COMPACT_PROMPT


def message_text(item: dict[str, Any]) -> str:
    """The text parts of a message, joined; images and refusals are left out."""
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
    """A user message a person wrote: not a handoff summary, not injected context."""
    if item.get("type") != "message" or item.get("role") != "user":
        return False
    text = message_text(item)
    if not text.strip() or text.startswith(SUMMARY_PREFIX):
        return False
    return not text.lstrip().lower().startswith(INJECTED_PREFIXES)


def user_message(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def summary_message(summary: str) -> dict[str, Any]:
    return user_message(f"{SUMMARY_PREFIX}\n{summary.strip()}")


def recent_user_messages(items: list[dict[str, Any]], max_tokens: int) -> list[str]:
    """Texts of the newest real user messages within `max_tokens`, oldest first."""
    texts = [message_text(item) for item in items if is_real_user_message(item)]
    selected: list[str] = []
    remaining = max(0, max_tokens)
    for text in reversed(texts):
        if remaining <= 0:
            break
        cost = approx_text_tokens(text)
        if cost <= remaining:
            selected.append(text)
            remaining -= cost
        else:
            selected.append(truncate_text(text, remaining))
            break
    selected.reverse()
    return selected


def ghost_snapshots(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [item for item in items if item.get("type") == "ghost_snapshot"]


def build_compacted_history(items: list[dict[str, Any]], summary: str,
                            user_message_max_tokens: int) -> list[dict[str, Any]]:
    """Recent real user messages, then the summary as a user message, then the ghost snapshots."""
    history = [user_message(text) for text in recent_user_messages(items, user_message_max_tokens)]
    history.append(summary_message(summary))
    history.extend(ghost_snapshots(items))
    return history
