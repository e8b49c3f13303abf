"""The gauge and the breakdown of a loaded thread: read-only, shared by the daemon and `ctxd usage`.

Nothing here writes, to the store or to the ledger: reading a thread creates nothing, and the gauge's
hot path (`ctxd/usage`, answered on the reader thread) must never wait for SQLite. The usage numbers
and the breakdown count the overhead (instructions, tools, memory files) with the same counter as
the items, so the categories always add up to the gauge.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ctxd.ledger.thread import ThreadLedger, thread_usage
from ctxd.settings import Settings
from ctxd.tokens import prompt_cache
from ctxd.tokens.catalog import context_window_for
from ctxd.tokens.counter import Counter
from ctxd.usage import breakdown as usage_mod

if TYPE_CHECKING:
    from ctxd.protocol.shapes import Breakdown, CacheState, UsageSnapshot

MAX_STORED_WINDOW = 100_000_000  # a stored context window above this is ignored (the default applies)

CounterFor = Callable[[Settings], Counter]
RECENT_THREADS = 256
"""How many threads' cached settings, overheads and breakdowns a view keeps."""


V = TypeVar("V")


class Recent(OrderedDict[str, V]):
    """A dict of the RECENT_THREADS entries stored last."""

    def __setitem__(self, key: str, value: V) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        if len(self) > RECENT_THREADS:
            self.popitem(last=False)


class UsageView:
    """Per thread, the settings its prompt context implies, its overhead counts and its last
    breakdown, each rebuilt only when what it depends on changed. Callers hold the workspace's lock."""

    def __init__(self, settings: Settings, counter_for: CounterFor, counted_overhead: int | None = None) -> None:
        self.base = settings
        self.counter_for = counter_for
        # `ctxd usage`: the overhead as the daemon last counted it, for the gauge's total (the
        # daemon's counter may have been better than the one at hand).
        self.counted_overhead = counted_overhead
        # Per thread: (prompt context object, its settings, their window, their auto-compact limit,
        # their counter).
        # Each keeps the threads used last (a client may touch thousands): past the bound, the least
        # recently stored entry goes and is computed again when asked.
        self._settings: Recent[tuple[Any, Settings, int, int, Counter]] = Recent()  # (context, settings, window, auto-compact limit, counter)
        self._overhead: Recent[tuple[Any, str, usage_mod.OverheadCounts]] = Recent()  # (context, counter name, OverheadCounts)
        self._breakdowns: Recent[tuple[tuple[Any, ...], Any, Breakdown]] = Recent()  # (inputs, context, breakdown)
        self._facts: Recent[tuple[Any, str, dict[str, Any]]] = Recent()  # (context, counter name, facts)

    def settings(self, ledger: ThreadLedger) -> Settings:
        """The workspace's settings, with the model and window the thread's prompt context names."""
        return self._thread_settings(ledger)[1]

    def _thread_settings(self, ledger: ThreadLedger) -> tuple[Any, Settings, int, int, Counter]:
        context = ledger.prompt_context
        cached = self._settings.get(ledger.thread)
        if cached is not None and cached[0] is context:
            return cached
        merged, window, limit = self._merged(context)
        cached = self._settings[ledger.thread] = (context, merged, window, limit, self.counter_for(merged))
        return cached

    def counter_of(self, context: dict[str, Any] | None) -> Counter:
        """The counter a thread whose prompt context were `context` would have (`counter`)."""
        return self.counter_for(self._merged(context)[0])

    def _merged(self, context: dict[str, Any] | None) -> tuple[Settings, int, int]:
        """The settings a prompt context implies, their window and their auto-compact limit."""
        merged = self.base
        window = context.get("contextWindow") if context else None
        if type(window) is not int or not 0 < window <= MAX_STORED_WINDOW:
            window = None  # a window stored by an older version from a hostile file: the default
        if context and (context.get("model") or window):
            merged = replace(self.base, model=context.get("model") or self.base.model,
                             context_window=window or self.base.context_window)
        window, limit = merged.effective_context_window(), merged.auto_compact_limit()
        agent = followed_limits(context)
        if agent is not None:
            # A followed session: the session's window and its agent's compaction point, never
            # the editor's settings (its agent's `limits`, ctxd/agents).
            window, limit = agent
        return merged, window, limit

    def counter(self, ledger: ThreadLedger) -> Counter:
        """The best counter for the thread's model right now (exact once its encoding is loaded)."""
        return self._thread_settings(ledger)[4]

    def overhead(self, ledger: ThreadLedger, counter: Counter) -> usage_mod.OverheadCounts:
        # The counter's name before counting: an encoding that finished loading meanwhile made
        # estimates cached under the exact name, shown beside an exact gauge until the context
        # changed (a CI run's 607 estimated tokens against `ctxd usage`'s exact 600).
        name = counter.name
        cached = self._overhead.get(ledger.thread)
        if cached is not None and cached[0] is ledger.prompt_context and cached[1] == name:
            return cached[2]
        counts = usage_mod.overhead_counts(ledger.prompt_context, counter.count)
        self._overhead[ledger.thread] = (ledger.prompt_context, name, counts)
        return counts

    def _overhead_tokens(self, ledger: ThreadLedger, counter: Counter) -> int:
        return self.counted_overhead if self.counted_overhead is not None else self.overhead(ledger, counter).tokens

    def usage(self, ledger: ThreadLedger) -> UsageSnapshot:
        """The gauge: `UsageSnapshot` with the counter that produced it; a followed session's tier
        by its agent's rule."""
        context, _, window, limit, counter = self._thread_settings(ledger)
        # (The overhead only counts before the first API total: a listing of thousands of followed
        # sessions, all reported, counts no instructions.)
        overhead = self._overhead_tokens(ledger, counter) if ledger.api_total is None else 0
        gauge = thread_usage(ledger, window, limit, overhead, counter.name, counter.status)
        if followed_limits(context) is not None:
            warn_at = int(context["followed"].get("warnAt") or 0)
            used = gauge["usedTokens"]
            gauge["tier"] = "compact" if limit and used >= limit else "warn" if warn_at and used >= warn_at else "ok"
        return gauge

    def breakdown(self, ledger: ThreadLedger) -> Breakdown:
        """`ctxd/usage`: where the window's tokens go. O(1) in the ledger's length: it reads the
        ledger's running sums, and is rebuilt only when one of its inputs changed."""
        context, settings, window, limit, counter = self._thread_settings(ledger)
        # Everything the result is made of: the settings and overhead follow from the context.
        key = (ledger.api_total, ledger.tokens_after_api, ledger.item_tokens, ledger.history_version, counter.name,
               counter.status)
        cached = self._breakdowns.get(ledger.thread)
        if cached is not None and cached[0] == key and cached[1] is context:
            return _with_cost(cached[2], ledger)
        overhead = self.overhead(ledger, counter)
        usage = self.usage(ledger)
        result = usage_mod.breakdown(model=settings.model, context_window=usage["contextWindow"],
                                     auto_compact_limit=usage["autoCompactLimit"], usage=usage,
                                     overhead=overhead, message_groups=dict(ledger.group_tokens),
                                     has_messages=ledger.item_tokens > 0)
        if followed_limits(context) is not None:
            agent = context["followed"]
            result["limitSource"] = f"window: {agent.get('windowSource')}; auto-compact: {agent.get('limitSource')}"
        elif not settings.context_window and settings.model and context_window_for(settings.model) is None:
            # Never a guess from a similar name: the model is unknown, and the window a default.
            result["limitSource"] = (f"window: model {settings.model!r} is not in ctxd's catalogue, so the default "
                                     f"{window:,} (set contextWindow for it)")
        # The context object is kept with the entry so that its identity cannot be reused.
        self._breakdowns[ledger.thread] = (key, context, result)
        return _with_cost(result, ledger)

    def facts(self, ledger: ThreadLedger) -> dict[str, Any]:
        """What `ctxd usage` (another process) cannot know by itself: the model, window, limit and
        counter the editor's options set, and the overhead as counted here. Writers keep it in
        the thread's state (`usageSettings`)."""
        context, settings, window, limit, counter = self._thread_settings(ledger)
        name = counter.name  # (before counting: see `overhead`)
        cached = self._facts.get(ledger.thread)
        if cached is not None and cached[0] is context and cached[1] == name:
            return cached[2]
        facts = {"model": settings.model, "contextWindow": window, "autoCompactLimit": limit, "tokenizer": settings.tokenizer,
                 "overheadTokens": self.overhead(ledger, counter).tokens}
        self._facts[ledger.thread] = (context, name, facts)
        return facts


def followed_limits(context: dict[str, Any] | None) -> tuple[int, int] | None:
    """(window, auto-compact limit) a followed session's context states, else None."""
    followed = (context or {}).get("followed")
    window = (context or {}).get("contextWindow")
    if not isinstance(followed, dict) or type(window) is not int or not 0 < window <= MAX_STORED_WINDOW:
        return None  # (a window stored by an older version from a hostile file: not the agent's)
    limit = followed.get("autoCompactLimit")
    return window, limit if type(limit) is int and 0 <= limit <= MAX_STORED_WINDOW else 0


def with_facts(settings: Settings, facts: dict[str, Any]) -> Settings:
    """`settings` (from the config files) with what the daemon last used for the thread."""
    changes: dict[str, Any] = {}
    if facts.get("model"):
        changes["model"] = facts["model"]
    if facts.get("contextWindow"):
        changes["context_window"] = facts["contextWindow"]
    if facts.get("autoCompactLimit") is not None:
        changes["auto_compact_token_limit"] = facts["autoCompactLimit"]
    if facts.get("tokenizer"):
        changes["tokenizer"] = facts["tokenizer"]
    return replace(settings, **changes)


def _with_cost(result: Breakdown, ledger: ThreadLedger) -> Breakdown:
    """`Breakdown.cost` of a followed session, priced when it was mirrored (ctxd/sessions), or of a
    client thread, priced when its client reported usage (`Workspace.report_usage`)."""
    state = ledger.state or {}
    followed = state.get("followed")
    facts = followed.get("cache") if isinstance(followed, dict) else state.get("cacheFacts")
    if isinstance(facts, dict):  # the prompt cache now (ctxd/tokens/prompt_cache.py)
        result = {**result, "cache": cast("CacheState", prompt_cache.state(facts, result["usage"]["usedTokens"]))}
    if isinstance(followed, dict) and isinstance(followed.get("cost"), dict):
        return {**result, "cost": followed["cost"]}
    if followed is None and isinstance(state.get("cost"), dict):
        return {**result, "cost": state["cost"]}
    return result
