"""The threads of one workspace held in memory, kept in step with the store.

A thread's ledger is read from SQLite once and then updated in place by the writes that go through
this daemon. Another daemon (or `ctxd` in a second editor) may write the same database: SQLite's
`data_version` tells, and every loaded thread is then dropped and read again on its next use.
Least recently used threads are dropped past either bound, whatever their number.
"""

from __future__ import annotations

import json
from collections import OrderedDict

from ctxd.ledger.store import Store, ThreadRow
from ctxd.ledger.thread import Entry, ThreadLedger

MAX_LOADED_THREADS = 64
# Loaded items cost about 1 KB each in memory.
MAX_LOADED_ITEMS = 200_000

DataVersion = tuple[int, int]


def load_ledger(store: Store, thread: str) -> ThreadLedger:
    """A thread's active items and facts as stored (an empty ledger for a thread never written)."""
    row = store.thread(thread) or ThreadRow(thread)
    rows = store.all_rows(thread)
    ledger = ThreadLedger(
        thread=thread,
        entries=[Entry(r.seq, json.loads(r.body), r.tokens, r.origin, r.body) for r in rows if r.archived is None],
        history_version=row.history_version,
        api_total=row.api_total,
        api_seq=row.api_seq,
        reference=row.reference,
        prompt_context=row.prompt_context,
        state=row.state,
        next_seq=(rows[-1].seq + 1) if rows else 1,
    )
    ledger.recount()
    return ledger


def summary_ledger(store: Store, thread: str) -> ThreadLedger:
    """A thread's facts and token sums without its items (enough for its usage), summed in SQL."""
    row = store.thread(thread) or ThreadRow(thread)
    item_tokens, after_api = store.token_sums(thread, row.api_seq)
    return ThreadLedger(thread=thread, history_version=row.history_version, api_total=row.api_total,
                        api_seq=row.api_seq, reference=row.reference, prompt_context=row.prompt_context,
                        state=row.state, item_tokens=item_tokens, tokens_after_api=after_api)


class ThreadCache:
    """Loaded ledgers of one store. Not thread-safe: the workspace's lock is held around every call."""

    def __init__(self) -> None:
        self._threads: OrderedDict[str, ThreadLedger] = OrderedDict()
        self.version: DataVersion | None = None  # the store's data version the loaded threads match

    def get(self, store: Store, thread: str) -> ThreadLedger:
        """The thread's ledger, read again if another process wrote since it was loaded."""
        self.check(store.data_version())
        return self.loaded(store, thread)

    def loaded(self, store: Store, thread: str) -> ThreadLedger:
        """The thread's ledger as loaded, without asking the store whether it changed (the caller
        checks in its own transaction, see `check`)."""
        if self.version is None:
            self.version = store.data_version()
        ledger = self._threads.get(thread)
        if ledger is None:
            ledger = self._threads[thread] = load_ledger(store, thread)
            self._evict()
        else:
            self._threads.move_to_end(thread)
        return ledger

    def peek(self, thread: str) -> ThreadLedger | None:
        """The ledger if it is in memory, without touching the store."""
        return self._threads.get(thread)

    def check(self, version: DataVersion) -> bool:
        """Forget every thread if the store's data version moved; True if nothing did."""
        if version == self.version:
            return True
        self._threads.clear()
        self.version = version
        return False

    def reload(self, store: Store, thread: str) -> ThreadLedger:
        self._threads.pop(thread, None)
        return self.get(store, thread)

    def _evict(self) -> None:
        """Drop least recently used threads past either bound; the newest one always stays."""
        loaded = sum(len(ledger.entries) for ledger in self._threads.values())
        while len(self._threads) > 1 and (len(self._threads) > MAX_LOADED_THREADS or loaded > MAX_LOADED_ITEMS):
            _, ledger = self._threads.popitem(last=False)
            loaded -= len(ledger.entries)
