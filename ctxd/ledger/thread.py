"""In-memory state of one thread's ledger, and the rules that read it.

Pure Python, no SQL. The service keeps one `ThreadLedger` per loaded thread and updates
its running sums as items come and go, so a usage answer is O(1) in the ledger's length.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

from ctxd.ledger.projection import Repairs
from ctxd.ledger.rules import (
    has_persistent_developer_text,
    is_contextual_developer_message,
    is_contextual_user_message,
    is_real_user_message,
    item_group,
)
from ctxd.protocol import jsontext

if TYPE_CHECKING:
    from ctxd.protocol.shapes import Tier, TokenizerStatus, UsageSnapshot, UsageSource

WARN_FRACTION = 0.8


class StoredBodies(Protocol):
    """Where a ledger's items are kept when their JSON is not held in memory (the store)."""

    def body(self, seq: int) -> str: ...


class Entry:
    """One active item of a ledger. Its JSON as stored (`body`) is what a prompt sends; the parsed
    item is made again when read, not kept beside it (both forms held a loaded thread twice over).
    A ledger over its memory bound lets go of `body` too (`shed`): then the store is asked."""

    __slots__ = ("seq", "tokens", "origin", "body", "_item", "_stored")

    def __init__(self, seq: int, item: dict[str, Any] | None, tokens: int, origin: int | None = None,
                 body: str | None = None) -> None:
        self.seq = seq
        self.tokens = tokens
        self.origin = origin  # the compaction that wrote this item, if any
        self.body = body  # the item's JSON as stored, or None once shed
        self._item = item if body is None else None
        self._stored: StoredBodies | None = None

    @property
    def item(self) -> dict[str, Any]:
        if self._item is not None:
            return self._item
        body = self.body if self.body is not None else self.stored_body()
        item: dict[str, Any] = json.loads(body)
        return item

    def stored_body(self) -> str:
        """The item's JSON: held, or read from the store it was shed to."""
        if self.body is not None:
            return self.body
        if self._stored is None:
            return jsontext.dumps(self.item).decode("utf-8")
        return self._stored.body(self.seq)

    def shed(self, stored: StoredBodies) -> int:
        """Let go of the held JSON (the store keeps it); returns the characters let go."""
        if self.body is None:
            return 0
        held = len(self.body)
        self.body, self._stored = None, stored
        return held

    def __repr__(self) -> str:
        return f"Entry(seq={self.seq}, tokens={self.tokens}, origin={self.origin}, held={self.body is not None})"


@dataclass
class ThreadLedger:
    thread: str
    entries: list[Entry] = field(default_factory=list)
    history_version: int = 0
    api_total: int | None = None
    api_seq: int = 0
    reference: dict[str, Any] | None = None
    prompt_context: dict[str, Any] | None = None
    state: dict[str, Any] | None = None
    next_seq: int = 1
    item_tokens: int = 0
    tokens_after_api: int = 0
    group_tokens: dict[str, int] = field(default_factory=dict)  # by kind of item, for the breakdown
    repairs: Repairs = field(default_factory=Repairs)  # what a prompt of the entries must repair
    held_chars: int = 0  # characters of item JSON held in memory (`Entry.body`), for the cache's bound

    def recount(self) -> None:
        """Recompute the running sums (after a load or a rewrite)."""
        self.item_tokens = self.tokens_after_api = self.held_chars = 0
        self.group_tokens = {}
        self.repairs = Repairs()
        self._add(self.entries)
        self.tokens_after_api = sum(e.tokens for e in self.entries if e.seq > self.api_seq)

    def append(self, entries: list[Entry], items: Sequence[dict[str, Any]] | None = None) -> None:
        """Add entries after the others; `items`, their parsed items when the caller has them."""
        self.entries.extend(entries)
        self.tokens_after_api += self._add(entries, items)
        if entries:
            self.next_seq = entries[-1].seq + 1

    def _add(self, entries: list[Entry], items: Sequence[dict[str, Any]] | None = None) -> int:
        added = 0
        for n, entry in enumerate(entries):
            item = items[n] if items is not None else entry.item
            added += entry.tokens
            group = item_group(item)
            self.group_tokens[group] = self.group_tokens.get(group, 0) + entry.tokens
            self.repairs.add(item)
            if entry.body is not None:
                self.held_chars += len(entry.body)
        self.item_tokens += added
        return added

    def shed(self, stored: StoredBodies) -> None:
        """Let go of every entry's held JSON: the store keeps it (see `Entry.shed`)."""
        for entry in self.entries:
            entry.shed(stored)
        self.held_chars = 0

    @property
    def last_seq(self) -> int:
        return self.entries[-1].seq if self.entries else 0


def is_user_turn_start(entry: Entry) -> bool:
    return entry.origin is None and is_real_user_message(entry.item)


@dataclass
class RollbackCut:
    index: int
    """The first item to drop."""
    clears_reference: bool
    """A dropped developer message mixed context updates with persistent text, so the surviving
    history no longer holds what the reference baseline was set from (Codex clears it too)."""


def rollback_start(entries: list[Entry], turns: int) -> RollbackCut | None:
    """Where to cut so that the last `turns` user turns go, or None if the ledger has no user turn.
    With fewer turns than asked, every user turn goes; items before the first turn stay.

    As in Codex (`drop_last_n_user_turns`), the context updates that sat just above the first
    dropped turn (contextual developer messages, injected user context) go with it: they were
    written for that turn, and the next turn re-sends what it needs."""
    starts = [i for i, entry in enumerate(entries) if is_user_turn_start(entry)]
    if not starts:
        return None
    cut = starts[max(0, len(starts) - turns)]
    clears = False
    while cut > starts[0]:
        item = entries[cut - 1].item
        if is_contextual_developer_message(item):
            clears = clears or has_persistent_developer_text(item)
        elif not is_contextual_user_message(item):
            break
        cut -= 1
    return RollbackCut(cut, clears)


def thread_usage(ledger: ThreadLedger, window: int, limit: int, overhead_tokens: int, tokenizer: str,
                 tokenizer_status: str) -> UsageSnapshot:
    """The gauge's numbers in a window of `window` tokens compacted at `limit`: the last API total
    plus the counts of what came after it; before any API total, the overhead (instructions,
    tools) plus every item. `tokenizer` and its status: the counter's (`Counter.name`, `.status`)."""
    if ledger.api_total is not None:
        used = ledger.api_total + ledger.tokens_after_api
        source: UsageSource = "api" if ledger.tokens_after_api == 0 else "api+estimate"
    else:
        used = overhead_tokens + ledger.item_tokens
        source = "estimate"
    return {
        "usedTokens": used,
        "contextWindow": window,
        "percent": round(100.0 * used / window, 1) if window else 0.0,
        "autoCompactLimit": limit,
        "tier": tier_for(used, limit, window),
        "source": source,
        "historyVersion": ledger.history_version,
        "tokenizer": tokenizer,
        "tokenizerStatus": cast("TokenizerStatus", tokenizer_status),  # a `Counter.status`
    }


def tier_for(used: int, limit: int, window: int) -> Tier:
    """`compact` at or over the auto-compact limit, `warn` from 80% of it (of the window when
    auto-compaction is off), else `ok`."""
    if limit > 0:
        if used >= limit:
            return "compact"
        return "warn" if used >= WARN_FRACTION * limit else "ok"
    return "warn" if window and used >= WARN_FRACTION * window else "ok"
