"""Running a compaction against a workspace: manual (`ctxd/compact`) and automatic (before a prompt).

`ctxd.compact` computes a new history; this module takes the thread's lock, swaps the history in
with one `Workspace.replace_history` transaction, and tells the client: the new usage at once,
then `ctxd/compacted`, then a warning that compactions cost accuracy. Nothing is written until the
new history is ready, so a failed or cancelled compaction leaves the ledger exactly as it was.

Automatic compaction has a circuit breaker: after three consecutive automatic compactions that
failed or left usage at or over the limit, it stops for that thread and says so, rather than
compacting again before every prompt. A compaction that brings usage under the limit re-arms it.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from pathlib import Path
from typing import Any, Protocol

from ctxd import redact
from ctxd.compact import compact
from ctxd.errors import Cancelled, CompactionFailed
from ctxd.tokens import prompt_cache
from ctxd.workspace import Workspace

log = logging.getLogger("ctxd")

BREAKER_LIMIT = 3
MAX_LISTED = 20  # compactions whose cache cost a thread keeps
BREAKER_KEY = "autoCompact"
ACCURACY_WARNING = (
    "ctxd compacted thread '{thread}' ({before} → {after} tokens, {strategy}). Every compaction drops "
    "detail, and models grow less accurate over long threads and repeated compactions: start a new "
    "thread when the task allows."
)


class Events(Protocol):
    """What a compaction tells the client; the server implements it."""

    def usage_now(self, uri: str, thread: str) -> None: ...
    def compacted(self, params: dict[str, Any]) -> None: ...
    def warn(self, message: str) -> None: ...
    def progress(self, token: int | str | None, value: dict[str, Any]) -> None: ...


def compact_thread(workspace: Workspace, thread: str, *, strategy: str, cancel: threading.Event, events: Events,
                   progress_token: int | str | None = None, automatic: bool = False) -> dict[str, Any]:
    """Compact `thread` now and swap the result in. Raises CompactionFailed or Cancelled with the
    ledger untouched."""
    events.progress(progress_token, {"kind": "begin", "title": "Compacting conversation", "cancellable": True,
                                     "message": f"thread '{thread}'"})

    def report(message: str) -> None:
        events.progress(progress_token, {"kind": "report", "message": message})

    try:
        with workspace.thread_lock(thread):
            result = _compact_locked(workspace, thread, strategy, cancel, report, automatic)
    except (CompactionFailed, Cancelled) as error:
        error.message = redact.redact(error.message)
        error.args = (error.message,)
        events.progress(progress_token, {"kind": "end", "message": f"compaction failed: {error.message}"})
        raise
    except BaseException:
        events.progress(progress_token, {"kind": "end", "message": "compaction failed"})
        raise
    events.usage_now(workspace.uri, thread)
    if result.get("cacheCost") is None:
        result.pop("cacheCost", None)
    events.compacted({"workspace": workspace.uri, "thread": thread, "tokensBefore": result["tokensBefore"],
                      "tokensAfter": result["tokensAfter"], "strategy": result["strategy"],
                      **({"cacheCost": result["cacheCost"]} if "cacheCost" in result else {})})
    warning = ACCURACY_WARNING.format(thread=thread, before=result["tokensBefore"], after=result["tokensAfter"],
                                      strategy=result["strategy"])
    if result.get("fallbackReason"):
        result["fallbackReason"] = redact.redact(result["fallbackReason"])
        warning += f" (The model endpoint failed, so it compacted offline instead: {result['fallbackReason']})"
    events.warn(redact.redact(warning))
    events.progress(progress_token, {"kind": "end",
                                     "message": f"{result['tokensBefore']} → {result['tokensAfter']} tokens"})
    return result


def _compact_locked(workspace: Workspace, thread: str, strategy: str, cancel: threading.Event,
                    report: Any, automatic: bool) -> dict[str, Any]:
    entries, version = workspace.active_history(thread)
    if not entries:
        raise CompactionFailed(f"thread '{thread}' is empty: nothing to compact")
    upto_seq = entries[-1].seq
    settings = workspace.settings_for(thread)
    prompt_file = settings.compact_prompt_file
    if prompt_file and not Path(prompt_file).expanduser().is_absolute():  # relative to the workspace
        settings = dataclasses.replace(settings, compact_prompt_file=str(workspace.root / prompt_file))
    before = workspace.usage(thread)["usedTokens"]
    cold = cache_cold(workspace, thread)
    instructions = workspace.prompt_context(thread).get("baseInstructions")
    outcome = compact([entry.item for entry in entries], strategy=strategy, settings=settings, cancel=cancel,
                      progress=report, instructions=instructions if isinstance(instructions, str) else None,
                      count=workspace.counter(thread).count)
    if cancel.is_set():
        raise Cancelled("the compaction was cancelled")
    info = {"strategy": outcome.strategy, "requested": strategy, "automatic": automatic, "tokensBefore": before,
            "trimmedItems": outcome.trimmed_items, "fallbackReason": outcome.fallback_reason}
    # Committed only if the history is still the version read above (another daemon's compaction,
    # a rollback or a restore meanwhile would otherwise be undone): else 1001, ledger unchanged.
    swapped = workspace.replace_history(thread, outcome.items, upto_seq=upto_seq, info=info, expected_version=version)
    before = swapped["tokensBefore"]  # with the items recorded while it ran, which it kept after the summary
    usage = swapped["usage"]
    if usage["autoCompactLimit"] and usage["usedTokens"] < usage["autoCompactLimit"]:
        _rearm(workspace, thread)
    spent = _cache_cost(workspace, thread, before, usage["usedTokens"], cold)
    return {"cacheCost": spent, "historyVersion": swapped["historyVersion"], "tokensBefore": before,
            "tokensAfter": usage["usedTokens"], "strategy": outcome.strategy, "summary": redact.redact(outcome.summary),
            "trimmedItems": outcome.trimmed_items, "undoId": swapped["operationId"],
            **({"fallbackReason": outcome.fallback_reason} if outcome.fallback_reason else {})}


def cache_cold(workspace: Workspace, thread: str) -> bool | None:
    """Whether the thread's prompt cache has likely expired (its last reported request is older
    than the provider's lifetime): the next request re-writes the whole prompt anyway, so a
    compaction now costs no cache write it would not pay. None when ctxd cannot tell."""
    facts = workspace.state(thread).get("cacheFacts")
    if not isinstance(facts, dict):
        return None
    label = prompt_cache.state(facts, 0)["state"]
    return None if label == "unknown" else label == "cold"


def _cache_cost(workspace: Workspace, thread: str, before: int, after: int, cold: bool | None) -> dict[str, Any] | None:
    """Spent against saved: the next request writes the compacted prompt (`after`) to the cache,
    and every request after it reads `before - after` fewer cached tokens. Listed with the
    thread's cache facts (`Breakdown.cache.compactions`)."""
    facts = workspace.state(thread).get("cacheFacts")
    if not isinstance(facts, dict):
        return None
    model = workspace.settings_for(thread).model or ""
    write = facts.get("writeRate")
    cost = prompt_cache.compaction_cost(prompt_cache.iso(time.time()), after,
                                        prompt_cache.money(after, write if isinstance(write, (int, float)) else None),
                                        before, after, workspace.rate(model, "cachedInput"), cold)
    kept = [c for c in facts.get("compactions") or [] if isinstance(c, dict)][-(MAX_LISTED - 1):]
    workspace.update_state(thread, cacheFacts={**facts, "compactions": [*kept, cost]})
    return cost


def _rearm(workspace: Workspace, thread: str) -> None:
    if workspace.state(thread).get(BREAKER_KEY):
        workspace.update_state(thread, **{BREAKER_KEY: None})


def auto_compact(workspace: Workspace, thread: str, events: Events) -> None:
    """Before a prompt: compact a thread at or over its limit, unless the breaker has tripped.

    Never raises: the prompt goes on with whatever history there is, and the user is told.
    """
    breaker = workspace.state(thread).get(BREAKER_KEY) or {}
    if breaker.get("disabled"):
        return
    with workspace.thread_lock(thread):
        # Another prompt may have compacted the thread while this one waited for the lock. Past
        # the warning point, a cold cache is a reason too: the next request re-writes the whole
        # prompt anyway, so compacting now makes that write smaller instead of adding one.
        tier = workspace.usage(thread)["tier"]
        if tier != "compact" and not (tier == "warn" and cache_cold(workspace, thread)):
            return
    try:
        result = compact_thread(workspace, thread, strategy="auto", cancel=threading.Event(), events=events,
                                automatic=True)
    except (CompactionFailed, Cancelled) as error:
        _trip(workspace, thread, events, f"automatic compaction failed: {error.message}")
        return
    except Exception as error:  # a bug must not take the prompt down with it
        log.exception("automatic compaction of %s failed", thread)
        _trip(workspace, thread, events, f"automatic compaction failed: {type(error).__name__}")
        return
    usage = workspace.usage(thread)
    if usage["autoCompactLimit"] and usage["usedTokens"] >= usage["autoCompactLimit"]:
        _trip(workspace, thread, events, f"automatic compaction left the thread at {result['tokensAfter']} tokens, "
                                         f"not under the limit of {usage['autoCompactLimit']}")


def _trip(workspace: Workspace, thread: str, events: Events, reason: str) -> None:
    """Count a failed or useless automatic compaction; at BREAKER_LIMIT in a row, stop trying."""
    reason = redact.redact(reason)
    breaker = dict(workspace.state(thread).get(BREAKER_KEY) or {})
    failures = int(breaker.get("failures", 0)) + 1
    disabled = failures >= BREAKER_LIMIT
    workspace.update_state(thread, **{BREAKER_KEY: {"failures": failures, "disabled": disabled, "reason": reason}})
    if disabled:
        events.warn(f"ctxd: {reason}. That is {failures} automatic compactions in a row that did not help, so "
                    f"automatic compaction is now off for thread '{thread}'. Compact by hand (ctxd/compact), "
                    f"roll back, or start a new thread; a compaction that gets under the limit turns it back on.")
    else:
        events.warn(f"ctxd: {reason} (attempt {failures} of {BREAKER_LIMIT} before automatic compaction stops).")
