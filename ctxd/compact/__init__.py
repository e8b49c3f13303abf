"""Compaction: replace a thread's history with a shorter one that still lets the work go on.

Four strategies. `llm` asks a configured model for a handoff summary; `remote` hands the thread to
OpenAI's `/responses/compact`; `offline` needs no model (masked tool outputs, then an extractive
summary); `auto` picks `remote` for OpenAI's own endpoint with the Responses API (as Codex does),
else `llm` when an endpoint is configured, else `offline`, and falls back to `offline` when the
model path fails, so that a full thread is never stuck. An explicit `llm` or `remote` that fails
raises CompactionFailed; one that succeeds always replaces the history (as Codex does), while
`auto` and `offline` refuse, before anything runs, a history no compaction could make smaller.
Every summary carries the earlier ones forward; a model's summary over `summary_max_tokens` is
middle-truncated to it first. This package is pure: it computes the new history and never touches the
ledger; the caller swaps it in.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ctxd.compact.history import (
    build_compacted_history,
    compact_prompt,
    ghost_snapshots,
    keep_remote_item,
    least_kept,
)
from ctxd.compact.model import (
    compact_remote,
    is_openai_host,
    resolve_endpoint,
    summarize,
)
from ctxd.compact.offline import Count, history_tokens, offline_compact
from ctxd.errors import Cancelled, CompactionFailed, InvalidParams
from ctxd.ledger.projection import project
from ctxd.ledger.rules import is_summary_message
from ctxd.ledger.truncation import truncate_text

STRATEGIES = ("auto", "llm", "remote", "offline")

__all__ = ["STRATEGIES", "CompactOutcome", "choose_strategy", "compact", "offline_target"]


@dataclass
class CompactOutcome:
    items: list[dict[str, Any]]
    """The new history, oldest first."""
    strategy: str
    """The strategy that ran (never `auto`)."""
    summary: str
    """The handoff summary (for `remote`, a note: its summary is opaque)."""
    trimmed_items: int = 0
    """Items dropped from the request because it overflowed the model's window."""
    fallback_reason: str | None = None
    """Why `auto` fell back to `offline`, when it did."""
    notes: list[str] = field(default_factory=list)


def choose_strategy(requested: str, settings: Any) -> str:
    """The strategy `auto` stands for with these settings (others stand for themselves)."""
    if requested != "auto":
        return requested
    llm = settings.llm
    if not llm.base_url:
        return "offline"
    if is_openai_host(llm.base_url) and llm.api == "responses":
        return "remote"
    return "llm"


def summary_max_tokens(settings: Any) -> int:
    """The longest handoff summary kept whole: a quarter of the model's window, and at most half
    the auto-compact limit (longer ones are middle-truncated)."""
    cap = int(settings.effective_context_window()) // 4
    limit = int(settings.auto_compact_limit())
    return min(cap, limit // 2) if limit else cap


def offline_target(items: list[dict[str, Any]], settings: Any, count: Count | None = None) -> int:
    """Tokens the offline strategy aims for: a 4x reduction, and at most half the auto-compact
    limit (counted as the gauge counts, with the thread's counter)."""
    target = history_tokens(items, count) // 4
    limit = settings.auto_compact_limit()
    return min(target, limit // 2) if limit else target


def compact(
    items: list[dict[str, Any]],
    *,
    strategy: str,
    settings: Any,
    cancel: threading.Event | None = None,
    progress: Callable[[str], None] | None = None,
    instructions: str | None = None,
    count: Count | None = None,
) -> CompactOutcome:
    """Compute the compacted history of `items` (a thread's active items, oldest first).

    `instructions` are the agent's base instructions, sent with a remote compaction; the handoff
    instruction is used when there are none. `count` is the thread's token counter, the one its
    gauge uses: targets and the "did it shrink" check are in its tokens.
    """
    if strategy not in STRATEGIES:
        raise InvalidParams(f"strategy: must be one of {', '.join(STRATEGIES)}")
    cancel = cancel or threading.Event()
    chosen = choose_strategy(strategy, settings)
    if strategy not in NAMED:
        _refuse_if_not_smaller(items, settings, count)
    if chosen != "offline":
        try:
            # Named or not, a model's answer is kept: a summary is never paid for and thrown away.
            return _model_compact(items, chosen, settings, cancel, progress, instructions)
        except Cancelled:
            raise
        except CompactionFailed as error:
            if strategy != "auto":
                raise
            if progress is not None:
                progress(f"{chosen} compaction failed ({error.message}); compacting offline instead")
            outcome = _worth_it(items, _offline(items, settings, progress, count), count)
            outcome.fallback_reason = error.message
            return outcome
    return _worth_it(items, _offline(items, settings, progress, count), count)


# Strategies a client names: they always replace the history, as Codex's compaction does.
NAMED = ("llm", "remote")


def _refuse_if_not_smaller(items: list[dict[str, Any]], settings: Any, count: Count | None) -> None:
    """Before anything runs (no request sent): refuse a history that no compaction can make
    smaller, because what every compaction keeps is already as big."""
    before = history_tokens(items, count)
    least = history_tokens(least_kept(items, settings.compact_user_message_max_tokens), count)
    if least >= before:
        raise CompactionFailed(f"nothing worth compacting: a compaction would keep at least {least} tokens of "
                               f"this {before}-token history")


def _worth_it(items: list[dict[str, Any]], outcome: CompactOutcome, count: Count | None) -> CompactOutcome:
    """Refuse an offline compaction that would not make the thread smaller: it would only lose detail."""
    before, after = history_tokens(items, count), history_tokens(outcome.items, count)
    if after >= before:
        raise CompactionFailed(f"nothing worth compacting: the {outcome.strategy} compaction would leave "
                               f"{after} tokens of a {before}-token history")
    return outcome


def _offline(items: list[dict[str, Any]], settings: Any, progress: Callable[[str], None] | None,
             count: Count | None) -> CompactOutcome:
    if progress is not None:
        progress("compacting offline")
    result = offline_compact(items, target_tokens=offline_target(items, settings, count),
                             user_message_max_tokens=settings.compact_user_message_max_tokens, count=count)
    return CompactOutcome(result.items, "offline", result.summary)


def _model_compact(items: list[dict[str, Any]], strategy: str, settings: Any, cancel: threading.Event,
                   progress: Callable[[str], None] | None, instructions: str | None) -> CompactOutcome:
    endpoint = resolve_endpoint(settings)
    try:
        prompt = compact_prompt(settings.compact_prompt_file)
    except (OSError, ValueError) as error:  # ValueError: not UTF-8
        raise CompactionFailed(f"cannot read compact_prompt_file: {error.strerror or error}"
                               if isinstance(error, OSError) else "compact_prompt_file is not UTF-8 text") from None
    projected = project(items)
    if not projected:
        raise CompactionFailed("nothing to send: the thread has no items a model can read")
    if strategy == "remote":
        output, trimmed = compact_remote(endpoint, projected, instructions or prompt, cancel=cancel, progress=progress)
        kept = [item for item in output if keep_remote_item(item)]
        if not kept:
            raise CompactionFailed("the compact endpoint's answer held nothing to keep")
        # Earlier handoff summaries the endpoint left out are carried forward as they were.
        kept = [item for item in items if is_summary_message(item) and item not in kept] + kept
        note = f"remote compaction by {endpoint.model}: {len(kept)} items"
        return CompactOutcome(kept + ghost_snapshots(items), "remote", note, trimmed)
    summary, trimmed = summarize(endpoint, projected, prompt, cancel=cancel, progress=progress)
    # Kept, but not whole when it is enormous: every later compaction carries it forward word for
    # word, so a summary bigger than the thread would leave it where no compaction can shrink it.
    summary = truncate_text(summary, summary_max_tokens(settings))
    new_items = build_compacted_history(items, summary, settings.compact_user_message_max_tokens)
    return CompactOutcome(new_items, "llm", summary, trimmed)
