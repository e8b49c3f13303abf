"""`ctxd/recall` and `ctxd/item`: search a thread's (or a workspace's) whole stored history, the
items compactions replaced included, and read one stored item whole.

The daemon's handlers and `ctxd mcp` both answer through here, from the workspace's store.
"""

from __future__ import annotations

import bisect
import json
import logging
import re
import sqlite3
import threading
import weakref
from collections.abc import Sequence
from typing import Any, Literal

from ctxd import redact
from ctxd.errors import InvalidParams, StoreUnavailable
from ctxd.ledger import bodies, search
from ctxd.ledger.rules import PLACEHOLDER_MAX_CHARS, is_placeholder, message_text
from ctxd.ledger.store import Store

SNIPPET_CHARS = 400
TURN_TEXT_CHARS = 120
MAX_LIMIT = 100
MAX_SEQ = (1 << search.SEQ_BITS) - 1  # a thread's seqs fit the index's rowid (`search.SEQ_BITS`)
_HITS_PER_WORD = 32
SNIPPET_WORDS = 16  # distinct query words a snippet looks for
_SEQ_MASK = (1 << search.SEQ_BITS) - 1
_PLACEHOLDER_BODY_CHARS = PLACEHOLDER_MAX_CHARS + 2048  # a placeholder's item, stored: no body is read past this
_WORD = re.compile(r"\w+")

Scope = Literal["thread", "workspace"]
log = logging.getLogger(__name__)


def recall(store: Store, thread: str, query: str, limit: int = 10, scope: Scope = "thread") -> dict[str, Any]:
    """`{results, total}`: the best matches of `query`, best first (see `search.search`). An index
    found damaged on the way is made anew (`Store.repair_index`) and the search asked again: it
    then indexes the ledger, or says that the index is being built."""
    terms = search.query_terms(query)
    if not terms:
        raise InvalidParams(f"query: {query[:80]!r} has no words to search for")
    limit = max(1, min(limit, MAX_LIMIT))
    try:
        return _recall(store, thread, query, terms, limit, scope)
    except (StoreUnavailable, sqlite3.IntegrityError) as error:
        if not store.repair_index(error):
            raise
    return _recall(store, thread, query, terms, limit, scope)


def _recall(store: Store, thread: str, query: str, terms: list[str], limit: int, scope: Scope) -> dict[str, Any]:
    with store.reading() as db:
        if store.index_problem is not None:
            raise StoreUnavailable(store.index_problem)
        if not search.present(db):
            raise StoreUnavailable(f"{store.path} has no recall index: this Python's SQLite has no FTS5, "
                                   "so ctxd cannot search the history")
        waiting = search.waiting(db, thread if scope == "thread" else None, SYNC_ITEMS + 1)
    # A search would wait for all of it: indexed in the background meanwhile (a store that cannot be
    # written is searched as it is indexed).
    if waiting > SYNC_ITEMS and store.readonly_reason is None:
        failed = _failures.pop(store, None)
        if failed is not None:  # the last attempt's reason (a full disk): the next search tries again
            raise failed
        index_in_background(store)
        with store.reading() as db:
            stored = int(db.execute("SELECT count(*) FROM items").fetchone()[0])
            left = search.waiting(db, None, stored)
        raise StoreUnavailable(f"the recall index of {store.path} is being built ({stored - left} of {stored} items "
                               "indexed): search again in a few seconds. The history itself can be read meanwhile.",
                               kind="indexing")
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
            # A compaction's placeholder leads to the tool output it stands for: shown in its place.
            originals = _originals(db, names, shown)
            placeholders: dict[int, int] = {}
            for rid in shown:
                if rid in originals:
                    placeholders.setdefault(originals[rid], rid)
            shown = list(dict.fromkeys(originals.get(rid, rid) for rid in shown))
            if len(shown) >= limit or len(found.rids) < wanted + limit or wanted >= MAX_LIMIT * 4:
                break
            wanted *= 2  # copies took the places: look further
        total = found.total
        if found.counted is not None:
            alike = _originals(db, names, found.counted)
            total = len({alike.get(rid, rid) for rid in {copies.get(rid, rid) for rid in found.counted}})
        turns = search.turns_of(db, shown[:limit])
        words = snippet_words(query)
        results = []
        for rid in shown[:limit]:
            name, seq = names.get(rid >> search.SEQ_BITS), rid & _SEQ_MASK
            row = db.execute("SELECT body, archived FROM items WHERE thread = ? AND seq = ?", (name, seq)).fetchone()
            if name is None or row is None:
                continue
            result = _result(db, name, seq, json.loads(bodies.decode(row[0])), row[1] is not None, words,
                             turns.get(rid))
            if rid in placeholders:
                result["placeholderSeq"] = placeholders[rid] & _SEQ_MASK
            results.append(result)
    # Never fewer than shown: the results are among what the query matches.
    return {"results": results, "total": max(total, len(results))}


def _originals(db: Any, names: dict[int, str], rids: list[int]) -> dict[int, int]:
    """The matches that are a compaction's placeholder for a tool output (rid -> the rid of the
    output, archived whole). A compressed body (`bodies`) is looked into once decompressed."""
    by_thread: dict[int, list[int]] = {}
    for rid in rids:
        by_thread.setdefault(rid >> search.SEQ_BITS, []).append(rid & _SEQ_MASK)
    out: dict[int, int] = {}
    for tid, seqs in by_thread.items():
        name, base = names.get(tid), tid << search.SEQ_BITS
        for chunk in _chunks(sorted(set(seqs))):
            rows = db.execute(
                f"SELECT seq, body, origin FROM items WHERE thread = ? AND seq IN ({', '.join('?' * len(chunk))}) "
                "AND origin IS NOT NULL AND (typeof(body) = 'blob' OR instr(substr(body, 1, ?), 'removed by compaction') > 0)",
                (name, *chunk, _PLACEHOLDER_BODY_CHARS)).fetchall()
            for seq, stored, origin in rows:
                body = bodies.decode(stored)
                if "removed by compaction" not in body[:_PLACEHOLDER_BODY_CHARS]:
                    continue
                original = original_seq(db, name, seq, json.loads(body), origin)
                if original is not None:
                    out[base | seq] = base | original
    return out


def original_seq(db: Any, thread: str | None, seq: int, item: Any, origin: int | None) -> int | None:
    """The seq of the tool output that the placeholder `item` (at `seq`, written by compaction
    `origin`) stands for: the output with its call id that the compaction archived, through the
    placeholders earlier compactions wrote when a later one kept one. None when `item` is no
    placeholder or its output is not stored."""
    for _ in range(64):  # each compaction of a compaction's placeholder keeps it once more
        if origin is None or not is_placeholder(item):
            return None
        found = _archived_output(db, thread, seq, item, origin)
        if found is None:
            return None
        seq, item, origin = found
        if not is_placeholder(item):
            return seq
    return None


def _archived_output(db: Any, thread: str | None, seq: int, item: dict[str, Any],
                     origin: int) -> tuple[int, Any, int | None] | None:
    """The tool output (seq, item, origin) with `item`'s call id that compaction `origin`
    archived. A compaction that only masked outputs wrote the history again item for item: the
    one in the placeholder's place is looked at first, then the compaction's other archived items
    that hold the call id (a compressed body, `bodies`, is looked into once decompressed)."""
    call_id = item.get("call_id")
    first = db.execute("SELECT json_extract(info, '$.added[0]') FROM compactions WHERE id = ? AND thread = ? "
                       "AND json_valid(info)", (origin, thread)).fetchone()
    place = None
    if first is not None and isinstance(first[0], int) and seq >= first[0]:
        place = db.execute("SELECT json_extract(info, ?) FROM compactions WHERE id = ?",
                           (f"$.removed[{seq - first[0]}]", origin)).fetchone()
    candidates = []
    if place is not None and isinstance(place[0], int):
        candidates = db.execute("SELECT seq, body, origin FROM items WHERE thread = ? AND seq = ? AND archived = ?",
                                (thread, place[0], origin)).fetchall()
    needle = json.dumps(call_id)
    for pass_ in range(2):
        for other, stored, other_origin in candidates:
            body = bodies.decode(stored)
            if pass_ and needle not in body:
                continue
            other_item = json.loads(body)
            if (isinstance(other_item, dict) and other_item.get("type") == item.get("type")
                    and other_item.get("call_id") == call_id):
                return other, other_item, other_origin
        if pass_ or not isinstance(call_id, str):
            return None
        candidates = db.execute("SELECT seq, body, origin FROM items WHERE thread = ? AND archived = ? AND seq < ? "
                                "AND (typeof(body) = 'blob' OR instr(body, ?) > 0) ORDER BY seq DESC",
                                (thread, origin, seq, needle))
    return None


def _copies(db: Any, names: dict[int, str], rids: list[int]) -> dict[int, int]:
    """The matches that copy another match (rid -> the rid of the first of them), each copy
    pointing at the earliest match with the same JSON. A compaction writes the items it keeps
    again after its summary (the same JSON, its own `origin`); undoing it and compacting again
    writes more. Items recorded as new are never copies, even of an item with the same text. The
    JSON is compared decompressed (`bodies`): one copy may be stored compressed and another not
    (an item of a ledger written before, kept by a compaction since)."""
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
            stored, tokens = db.execute("SELECT body, tokens FROM items WHERE thread = ? AND seq = ?",
                                        (name, seq)).fetchone()
            body = bodies.decode(stored)
            for chunk in _chunks(ordered[:bisect.bisect_left(ordered, seq)]):
                alike = [other for other, value in db.execute(
                    f"SELECT seq, body FROM items WHERE thread = ? AND tokens = ? "
                    f"AND seq IN ({', '.join('?' * len(chunk))}) ORDER BY seq", (name, tokens, *chunk))
                    if value == stored or bodies.decode(value) == body]
                if alike:
                    out[base | seq] = base | alike[0]
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


# Past this many items to index (a store indexed by an older version, or its index made anew), a
# search indexes them in the background and says so meanwhile: the first search would wait
# seconds (200k items: 8 s).
SYNC_ITEMS = 20_000
_indexers: weakref.WeakKeyDictionary[Store, threading.Thread] = weakref.WeakKeyDictionary()
_indexers_lock = threading.Lock()
_failures: weakref.WeakKeyDictionary[Store, StoreUnavailable] = weakref.WeakKeyDictionary()


def index_in_background(store: Store) -> None:
    """Index everything the index lacks on a thread of its own (one at a time per store), a
    batch per transaction: other requests wait at most one batch. It stops when the store closes."""
    with _indexers_lock:
        running = _indexers.get(store)
        if running is not None and running.is_alive():
            return
        worker = threading.Thread(target=_index_everything, args=(store,), name="ctxd-recall-index", daemon=True)
        _indexers[store] = worker
        worker.start()


def _index_everything(store: Store) -> None:
    try:
        catch_up(store, background=True)
    except (StoreUnavailable, sqlite3.Error) as error:
        if not store.repair_index(error):
            log.warning("%s: the recall index could not be built: %s", store.path, error)
            _failures[store] = error if isinstance(error, StoreUnavailable) else StoreUnavailable(
                f"{store.path}: the recall index could not be built: {error}")


def catch_up(store: Store, thread: str | None = None, background: bool = False) -> int | None:
    """Index what was stored since the last search (in every thread, or in `thread`), a batch per
    transaction; return `thread`'s id in the index (None if it has none). A store that cannot be
    written is searched as it is indexed. `background`: stop when the store is closed."""
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
            with store.writing_while_open() if background else store.writing() as db:
                if db is None:
                    return None  # closed meanwhile
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
        text = message_text(json.loads(bodies.decode(row[0]))) if row is not None else ""
        entry["turn"] = {"index": index, "text": _shorten(redact.redact(" ".join(text.split())), TURN_TEXT_CHARS)}
    return entry


def _stem(word: str) -> str:
    """A prefix that the word's other forms share (the index stems; the snippet only looks)."""
    return word[: max(4, len(word) - 3)] if len(word) > 5 else word


def snippet_words(query: str) -> list[str]:
    """The words a snippet looks for: the query's distinct words, lower case, without STOPWORDS
    unless it has nothing else, the first SNIPPET_WORDS (a log pasted as a query has thousands,
    and the search itself reads only its first `search.MAX_TERMS` terms)."""
    kept: dict[str, None] = {}
    stops: dict[str, None] = {}
    for match in _WORD.finditer(query):  # (only as far as it needs: a query may be 100 KB)
        word = match.group().lower()
        (stops if word in search.STOPWORDS else kept)[word] = None
        if len(kept) >= SNIPPET_WORDS:
            break
    return list(kept or stops)[:SNIPPET_WORDS]


def snippet(text: str, words: list[str], size: int = SNIPPET_CHARS) -> str:
    """The part of `text` (whitespace collapsed, the key redacted) of at most `size` characters
    where the most of the query's words are."""
    text = redact.redact(" ".join(text.split()))
    if len(text) <= size:
        return text
    lowered = text.lower()
    hits: list[tuple[int, int]] = []
    for index, word in enumerate(dict.fromkeys(words[:SNIPPET_WORDS])):
        stem = _stem(word)
        start = lowered.find(stem)
        found = 0
        while start >= 0 and found < _HITS_PER_WORD:
            hits.append((start, index))
            found += 1
            start = lowered.find(stem, start + 1)
    hits.sort()
    width = size - 2  # room for the marks of the cut ends
    begin = min(best_window(hits, width), len(text) - width)
    cut = text[begin:begin + width]
    return ("…" if begin > 0 else "") + cut + ("…" if begin + width < len(text) else "")


def best_window(hits: Sequence[tuple[int, int]], width: int) -> int:
    """Where the window of `width` characters holding the most distinct words starts: each
    window starts a quarter width before a hit, and the first best one wins. `hits` are
    (position, word) in position order. One pass: the window's ends only move forward, each
    over every hit once, counting the hits of each word inside it."""
    best, best_count = 0, 0
    inside: dict[int, int] = {}
    left = right = 0
    for position, _ in hits:
        begin = max(0, position - width // 4)
        while right < len(hits) and hits[right][0] < begin + width:
            word = hits[right][1]
            inside[word] = inside.get(word, 0) + 1
            right += 1
        while hits[left][0] < begin:
            word = hits[left][1]
            inside[word] -= 1
            if not inside[word]:
                del inside[word]
            left += 1
        if len(inside) > best_count:
            best, best_count = begin, len(inside)
    return best


def _shorten(text: str, size: int) -> str:
    return text if len(text) <= size else text[: size - 1] + "…"


def item(store: Store, thread: str, seq: int) -> dict[str, Any]:
    """`{item, archived, seq}`: one stored item as it was recorded. A seq a compaction moved the
    item from still names it; `seq` says where it is now. The seq of a compaction's placeholder
    gives the tool output it stands for, whole (`placeholderSeq`: the placeholder's seq)."""
    if not 1 <= seq <= MAX_SEQ:
        raise InvalidParams(f"seq: must be a whole number from 1 to {MAX_SEQ}, not {seq!r}")
    seq = store.resolve(thread, seq)
    with store.reading() as db:
        row = db.execute("SELECT body, archived, origin FROM items WHERE thread = ? AND seq = ?",
                         (thread, seq)).fetchone()
        if row is None:
            raise InvalidParams(f"seq: thread '{thread}' has no item {seq}")
        body, archived, origin = row
        stored = json.loads(bodies.decode(body))
        original = original_seq(db, thread, seq, stored, origin)
        if original is not None:
            row = db.execute("SELECT body, archived FROM items WHERE thread = ? AND seq = ?",
                             (thread, original)).fetchone()
            return {"item": redact.redact_json(json.loads(bodies.decode(row[0]))), "archived": row[1] is not None,
                    "seq": original,
                    "placeholderSeq": seq}
    return {"item": redact.redact_json(stored), "archived": archived is not None, "seq": seq}
