"""`ctxd/recall` and `ctxd/item`: search a thread's (or a workspace's) whole stored history, the
items compactions replaced included, and read one stored item whole.

The daemon's handlers and `ctxd mcp` both answer through here, from the workspace's store.
"""

from __future__ import annotations

import bisect
import json
import re
from typing import Any, Literal

from ctxd import redact
from ctxd.errors import InvalidParams, StoreUnavailable
from ctxd.ledger import search
from ctxd.ledger.rules import message_text
from ctxd.ledger.store import Store

SNIPPET_CHARS = 400
TURN_TEXT_CHARS = 120
MAX_LIMIT = 100
_HITS_PER_WORD = 64
_SEQ_MASK = (1 << search.SEQ_BITS) - 1
_WORD = re.compile(r"\w+")

Scope = Literal["thread", "workspace"]


def recall(store: Store, thread: str, query: str, limit: int = 10, scope: Scope = "thread") -> dict[str, Any]:
    """`{results, total}`: the best matches of `query`, best first (see `search.search`)."""
    terms = search.query_terms(query)
    if not terms:
        raise InvalidParams(f"query: {query[:80]!r} has no words to search for")
    limit = max(1, min(limit, MAX_LIMIT))
    with store.reading() as db:
        if not search.present(db):
            raise StoreUnavailable(f"{store.path} has no recall index: this Python's SQLite has no FTS5, "
                                   "so ctxd cannot search the history")
    tid = catch_up(store, thread if scope == "thread" else None)
    if scope == "thread" and tid is None:
        return {"results": [], "total": 0}
    with store.reading() as db:
        names = dict(db.execute("SELECT id, thread FROM recall_threads"))
        wanted = limit
        while True:
            try:
                found = search.search(db, terms, tid, wanted + limit)
            except search.Unavailable as error:
                raise StoreUnavailable(str(error)) from None
            copies = _copies(db, names, found.rids + (found.counted or []))
            shown = _once(db, names, found.rids, found.counted or [], copies)
            if len(shown) >= limit or len(found.rids) < wanted + limit or wanted >= MAX_LIMIT * 4:
                break
            wanted *= 2  # copies took the places: look further
        total = found.total if found.counted is None else len({copies.get(rid, rid) for rid in found.counted})
        turns = search.turns_of(db, shown[:limit])
        words = [word.lower() for word in _WORD.findall(query)]
        results = []
        for rid in shown[:limit]:
            name, seq = names.get(rid >> search.SEQ_BITS), rid & _SEQ_MASK
            row = db.execute("SELECT body, archived FROM items WHERE thread = ? AND seq = ?", (name, seq)).fetchone()
            if name is None or row is None:
                continue
            results.append(_result(db, name, seq, json.loads(row[0]), row[1] is not None, words, turns.get(rid)))
    return {"results": results, "total": total}


def _copies(db: Any, names: dict[int, str], rids: list[int]) -> dict[int, int]:
    """The matches that copy another match (rid -> the rid of the first of them), each copy
    pointing at the earliest match with the same stored body. A compaction writes the items it
    keeps again after its summary (the same body, its own `origin`); undoing it and compacting
    again writes more. Items recorded as new are never copies, even of an item with the same text."""
    by_thread: dict[int, set[int]] = {}
    for rid in rids:
        by_thread.setdefault(rid >> search.SEQ_BITS, set()).add(rid & _SEQ_MASK)
    out: dict[int, int] = {}
    for tid, seqs in by_thread.items():
        name, base, ordered = names.get(tid), tid << search.SEQ_BITS, sorted(seqs)
        written = [seq for chunk in _chunks(ordered) for (seq,) in db.execute(
            f"SELECT seq FROM items WHERE thread = ? AND seq IN ({', '.join('?' * len(chunk))}) AND origin IS NOT NULL",
            (name, *chunk))]
        for seq in written:
            for chunk in _chunks(ordered[:bisect.bisect_left(ordered, seq)]):
                row = db.execute(
                    f"SELECT min(o.seq) FROM items c JOIN items o ON o.thread = c.thread AND o.tokens = c.tokens "
                    f"AND o.body = c.body WHERE c.thread = ? AND c.seq = ? AND o.seq IN ({', '.join('?' * len(chunk))})",
                    (name, seq, *chunk)).fetchone()
                if row[0] is not None:
                    out[base | seq] = base | row[0]
                    break
    return out


def _chunks(seqs: list[int], size: int = 400) -> list[list[int]]:
    """`seqs` in lists short enough for one statement's parameters (999 in older SQLites)."""
    return [seqs[start:start + size] for start in range(0, len(seqs), size)]


def _once(db: Any, names: dict[int, str], rids: list[int], more: list[int], copies: dict[int, int]) -> list[int]:
    """The matches `rids` in rank order, an item and its copies once: at the place of the
    best-ranked of them, shown by the copy in the conversation when there is one (in `rids` or
    `more`, the other matches), else by the newest."""
    groups: dict[int, list[int]] = {}
    for rid in rids:
        groups.setdefault(copies.get(rid, rid), []).append(rid)
    for rid in more:
        if copies.get(rid, rid) in groups and rid not in groups[copies.get(rid, rid)]:
            groups[copies.get(rid, rid)].append(rid)
    shown = []
    for members in groups.values():
        if len(members) > 1:
            name, base = names.get(members[0] >> search.SEQ_BITS), (members[0] >> search.SEQ_BITS) << search.SEQ_BITS
            seqs = [rid & _SEQ_MASK for rid in members]
            row = db.execute(f"SELECT max(seq) FROM items WHERE thread = ? AND seq IN ({', '.join('?' * len(seqs))}) "
                             "AND archived IS NULL", (name, *seqs)).fetchone()
            shown.append(base | row[0] if row[0] is not None else max(members))
        else:
            shown.append(members[0])
    return shown


def catch_up(store: Store, thread: str | None = None) -> int | None:
    """Index what was stored since the last search (in every thread, or in `thread`), a batch per
    transaction; return `thread`'s id in the index (None if it has none). A store that cannot be
    written is searched as it is indexed."""
    tid: int | None = None
    with store.reading() as db:  # most searches find nothing to index: no write transaction then
        if thread is not None:
            tid = search.thread_id(db, thread)
        if tid is not None and not search.behind(db, tid):
            return tid
    more = True
    while more:
        more = False
        try:
            with store.writing() as db:
                search.sync_threads(db)
                if thread is not None:
                    tid = search.thread_id(db, thread)
                    if tid is None:
                        return None
                for pending, name, upto in search.behind(db, tid):
                    more = search.catch_up_batch(db, pending, name, upto) or more
        except StoreUnavailable:
            if store.readonly_reason is None:
                raise
            with store.reading() as db:
                return None if thread is None else search.thread_id(db, thread)
    return tid


def _result(db: Any, thread: str, seq: int, item: Any, archived: bool, words: list[str],
            turn: tuple[int, int] | None) -> dict[str, Any]:
    kind = item.get("type") if isinstance(item, dict) else None
    entry: dict[str, Any] = {"thread": thread, "seq": seq, "type": kind if isinstance(kind, str) else "unknown"}
    if kind == "message" and isinstance(item.get("role"), str):
        entry["role"] = item["role"]
    entry["snippet"] = snippet(search.item_text(item), words)
    entry["archived"] = archived
    if turn is not None:
        index, turn_rid = turn
        row = db.execute("SELECT body FROM items WHERE thread = ? AND seq = ?",
                         (thread, turn_rid & ((1 << search.SEQ_BITS) - 1))).fetchone()
        text = message_text(json.loads(row[0])) if row is not None else ""
        entry["turn"] = {"index": index, "text": _shorten(redact.redact(" ".join(text.split())), TURN_TEXT_CHARS)}
    return entry


def _stem(word: str) -> str:
    """A prefix that the word's other forms share (the index stems; the snippet only looks)."""
    return word[: max(4, len(word) - 3)] if len(word) > 5 else word


def snippet(text: str, words: list[str], size: int = SNIPPET_CHARS) -> str:
    """The part of `text` (whitespace collapsed, the key redacted) of at most `size` characters
    where the most of the query's words are."""
    text = redact.redact(" ".join(text.split()))
    if len(text) <= size:
        return text
    lowered = text.lower()
    hits: list[tuple[int, int]] = []
    for index, word in enumerate(dict.fromkeys(words)):
        stem = _stem(word)
        start = lowered.find(stem)
        found = 0
        while start >= 0 and found < _HITS_PER_WORD:
            hits.append((start, index))
            found += 1
            start = lowered.find(stem, start + 1)
    hits.sort()
    best, best_count = 0, 0
    width = size - 2  # room for the marks of the cut ends
    for position, _ in hits:
        begin = max(0, position - width // 4)
        count = len({word for at, word in hits if begin <= at < begin + width})
        if count > best_count:
            best, best_count = begin, count
    begin = min(best, len(text) - width)
    cut = text[begin:begin + width]
    return ("…" if begin > 0 else "") + cut + ("…" if begin + width < len(text) else "")


def _shorten(text: str, size: int) -> str:
    return text if len(text) <= size else text[: size - 1] + "…"


def item(store: Store, thread: str, seq: int) -> dict[str, Any]:
    """`{item, archived, seq}`: one stored item as it was recorded. A seq a compaction moved the
    item from still names it; `seq` says where it is now."""
    seq = store.resolve(thread, seq)
    with store.reading() as db:
        row = db.execute("SELECT body, archived FROM items WHERE thread = ? AND seq = ?", (thread, seq)).fetchone()
    if row is None:
        raise InvalidParams(f"seq: thread '{thread}' has no item {seq}")
    return {"item": redact.redact_json(json.loads(row[0])), "archived": row[1] is not None, "seq": seq}
