"""The threads of one workspace held in memory, kept in step with the store.

A thread's ledger is read from SQLite once and then updated in place by the writes that go through
this daemon. Another daemon (or `ctxd` in a second editor) may write the same database: SQLite's
`data_version` tells, and every loaded thread is then dropped and read again on its next use.
Least recently used threads are dropped past either bound, whatever their number.

A loaded item is held once, as the JSON it is stored as (the parsed item is made again when read).
The JSON held is bounded too: past MAX_HELD_CHARS the thread in use lets go of its items' JSON and
reads it from SQLite when asked (a prompt reads it in one query). A thread of more items than
MAX_LOADED_ITEMS is not kept once its request is answered: the next request reads it again. So one
huge frame (issue #27: 47 MB of small items) leaves no thread of its size in memory.
"""

from __future__ import annotations

import sqlite3
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

from ctxd.errors import StoreUnavailable
from ctxd.ledger import bodies
from ctxd.ledger.store import Store, ThreadRow
from ctxd.ledger.thread import Entry, ThreadLedger

MAX_LOADED_THREADS = 64
# Loaded items: each a few numbers, plus its JSON while the JSON held is within MAX_HELD_CHARS.
MAX_LOADED_ITEMS = 200_000
# Characters of item JSON held in memory, over every loaded thread.
MAX_HELD_CHARS = 32 * 1024 * 1024

DataVersion = tuple[int, int]


@contextmanager
def _reading(store: Store) -> Iterator[sqlite3.Connection]:
    """`Store.reading`, which is annotated as a plain iterator."""
    with cast(Any, store.reading()) as db:
        yield db


class StoredItems:
    """A thread's items in the store, for the entries that let go of their JSON."""

    def __init__(self, store: Store, thread: str) -> None:
        self.store, self.thread = store, thread

    def body(self, seq: int) -> str:
        with _reading(self.store) as db:
            row = db.execute("SELECT body FROM items WHERE thread = ? AND seq = ?", (self.thread, seq)).fetchone()
            if row is None:
                raise StoreUnavailable(f"item {seq} of thread '{self.thread}' is no longer in the ledger: send the "
                                       "request again")
            return bodies.decode(row[0])

    def bodies(self) -> dict[int, str]:
        """The JSON of every active item, by sequence number (one query)."""
        with _reading(self.store) as db:
            return {seq: bodies.decode(body) for seq, body in db.execute(
                "SELECT seq, body FROM items WHERE thread = ? AND archived IS NULL", (self.thread,))}


def load_ledger(store: Store, thread: str, held_chars: int = MAX_HELD_CHARS) -> ThreadLedger:
    """A thread's active items and facts as stored (an empty ledger for a thread never written).
    Items are read one at a time; once `held_chars` characters of JSON are held, the rest is left
    in the store (and so is what was held: one rule for the whole thread)."""
    row = store.thread(thread) or ThreadRow(thread)
    ledger = ThreadLedger(thread=thread, history_version=row.history_version, api_total=row.api_total,
                          api_seq=row.api_seq, reference=row.reference, prompt_context=row.prompt_context,
                          state=row.state)
    stored, shedding, last = StoredItems(store, thread), False, 0
    with _reading(store) as db:
        cursor = db.execute("SELECT seq, body, tokens, origin, archived FROM items WHERE thread = ? ORDER BY seq",
                            (thread,))
        for seq, body, tokens, origin, archived in cursor:
            last = seq
            if archived is not None:
                continue
            entry = Entry(seq, None, tokens, origin, bodies.decode(body))
            ledger.append([entry])
            if shedding:
                ledger.held_chars -= entry.shed(stored)
            elif ledger.held_chars > held_chars:
                ledger.shed(stored)
                shedding = True
    ledger.next_seq = last + 1
    ledger.tokens_after_api = sum(e.tokens for e in ledger.entries if e.seq > ledger.api_seq)
    return ledger


def stored_bodies(store: Store, ledger: ThreadLedger, entries: list[Entry]) -> list[str]:
    """The JSON of `entries` (of `ledger`): held, or read from the store in one query."""
    held = [entry.body for entry in entries]
    if all(held):  # (a stored item's JSON is never empty)
        return held  # type: ignore[return-value]
    by_seq = StoredItems(store, ledger.thread).bodies()
    return [body or by_seq.get(entry.seq) or entry.stored_body() for body, entry in zip(held, entries, strict=True)]


def summary_ledger(row: ThreadRow, after_api: int) -> ThreadLedger:
    """A thread's facts and token sums without its items (enough for its usage): the sum its row
    keeps, and `after_api`, that of the items after its API report (`Store.tokens_after_reports`;
    all of them when it has none)."""
    return ThreadLedger(thread=row.thread, history_version=row.history_version, api_total=row.api_total,
                        api_seq=row.api_seq, reference=row.reference, prompt_context=row.prompt_context,
                        state=row.state, item_tokens=row.active_tokens,
                        tokens_after_api=after_api if row.api_seq > 0 else row.active_tokens)


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
            held = MAX_HELD_CHARS - sum(other.held_chars for other in self._threads.values())
            ledger = self._threads[thread] = load_ledger(store, thread, max(held, 0))
            self.fit(store)
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

    def forget(self, thread: str) -> None:
        """Drop a thread's ledger (written outside it): read again on its next use."""
        self._threads.pop(thread, None)

    def reload(self, store: Store, thread: str) -> ThreadLedger:
        self._threads.pop(thread, None)
        return self.get(store, thread)

    def fit(self, store: Store) -> None:
        """Keep within the bounds (after a load, or items added to a loaded thread): least recently
        used threads go first; then the newest lets go of its JSON past MAX_HELD_CHARS, and is
        dropped past MAX_LOADED_ITEMS (the caller keeps the ledger it holds for its request)."""
        loaded = sum(len(ledger.entries) for ledger in self._threads.values())
        held = sum(ledger.held_chars for ledger in self._threads.values())
        while len(self._threads) > 1 and (len(self._threads) > MAX_LOADED_THREADS or loaded > MAX_LOADED_ITEMS
                                          or held > MAX_HELD_CHARS):
            _, ledger = self._threads.popitem(last=False)
            loaded -= len(ledger.entries)
            held -= ledger.held_chars
        if not self._threads:
            return
        thread, newest = next(reversed(self._threads.items()))
        if len(newest.entries) > MAX_LOADED_ITEMS:
            del self._threads[thread]
        elif newest.held_chars > MAX_HELD_CHARS:
            newest.shed(StoredItems(store, thread))
