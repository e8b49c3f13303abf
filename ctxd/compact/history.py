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

import logging
from importlib import resources
from pathlib import Path
from typing import Any

from ctxd.ledger.rules import (
    SUMMARY_PREFIX,
    is_real_user_message,
    is_summary_message,
    message_text,
)
from ctxd.ledger.truncation import truncate_text
from ctxd.settings import PromptFileMoved, read_prompt_file
from ctxd.tokens.approx import approx_text_tokens

log = logging.getLogger(__name__)

DEFAULT_COMPACT_PROMPT = resources.files("ctxd").joinpath("templates", "compact_prompt.md").read_text(encoding="utf-8").strip()


def compact_prompt(prompt_file: str | None) -> str:
    """The handoff instruction: the user's `compact_prompt_file` when set, else ours; ours too when
    the file now leads elsewhere than when the settings were read (a repository's link swap)."""
    if prompt_file:
        try:
            text = read_prompt_file(Path(prompt_file).expanduser()).strip()
        except PromptFileMoved as error:
            log.warning("compact_prompt_file: %s; using the built-in prompt", error)
            return DEFAULT_COMPACT_PROMPT
        if text:
            return text
    return DEFAULT_COMPACT_PROMPT


# Fields of a user message that a compaction carries over to the message it writes in its place:
# Codex's per-message metadata (the turn a message belongs to). Its `id` is not carried: the
# written message is a new item.
PASSTHROUGH_FIELDS = ("internal_chat_message_metadata_passthrough",)


def user_message(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def summary_message(summary: str) -> dict[str, Any]:
    return user_message(f"{SUMMARY_PREFIX}\n{summary.strip()}")


def recent_user_messages(items: list[dict[str, Any]], max_tokens: int) -> list[dict[str, Any]]:
    """The newest real user messages within `max_tokens`, oldest first, written afresh as text
    (the one that overflows middle-truncated). Each keeps its source's `PASSTHROUGH_FIELDS`, as
    Codex's kept user messages keep their metadata, so that a client's turn ids survive a compaction."""
    sources = [item for item in items if is_real_user_message(item)]
    selected: list[dict[str, Any]] = []
    remaining = max(0, max_tokens)
    for source in reversed(sources):
        if remaining <= 0:
            break
        text = message_text(source)
        cost = approx_text_tokens(text)
        if cost > remaining:
            text = truncate_text(text, remaining)
        remaining -= cost
        message = user_message(text)
        message.update({name: source[name] for name in PASSTHROUGH_FIELDS if name in source})
        selected.append(message)
    selected.reverse()
    return selected


def ghost_snapshots(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [item for item in items if item.get("type") == "ghost_snapshot"]


EARLIER_HEADING = "## Earlier summary"


def earlier_summaries(items: list[dict[str, Any]]) -> list[str]:
    """The texts (behind the prefix) of the handoff summaries earlier compactions wrote."""
    return [message_text(item)[len(SUMMARY_PREFIX):].strip() for item in items if is_summary_message(item)]


def carry_forward(summary: str, items: list[dict[str, Any]]) -> str:
    """`summary` with the earlier summaries of `items` after it, word for word: a model may leave
    out what an earlier summary said, and a later compaction must never drop it."""
    earlier = [text for text in earlier_summaries(items) if text and text not in summary]
    return "\n\n".join([summary.strip(), *(f"{EARLIER_HEADING}\n{text}" for text in earlier)])


def build_compacted_history(items: list[dict[str, Any]], summary: str,
                            user_message_max_tokens: int) -> list[dict[str, Any]]:
    """Recent real user messages, then the summary (earlier ones carried forward) as a user
    message, then the ghost snapshots."""
    history = recent_user_messages(items, user_message_max_tokens)
    history.append(summary_message(carry_forward(summary, items)))
    history.extend(ghost_snapshots(items))
    return history


def least_kept(items: list[dict[str, Any]], user_message_max_tokens: int) -> list[dict[str, Any]]:
    """What every compaction of `items` keeps at the least: the recent user messages, a summary
    holding the earlier summaries, the ghost snapshots. A history not bigger than this cannot be
    made smaller."""
    return build_compacted_history(items, "", user_message_max_tokens)


def keep_remote_item(item: dict[str, Any]) -> bool:
    """Whether an item a remote compaction returned stays in the new history (Codex's
    `should_keep_compacted_history_item`): real user messages, handoff summaries, assistant
    messages and the opaque compaction do; developer and system messages (stale instructions),
    injected user context (instruction files, environment, aborted-turn markers, warnings) and
    anything else do not. The client re-sends fresh context with the next turn (`reinjectContext`)."""
    kind = item.get("type")
    if kind == "compaction":
        return True
    if kind != "message":
        return False
    role = item.get("role")
    if role == "assistant":
        return True
    return role == "user" and (is_real_user_message(item) or is_summary_message(item))
