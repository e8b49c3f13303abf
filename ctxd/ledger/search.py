"""The full-text index of every stored item, active and archived, of every thread (`ctxd/recall`).

SQLite FTS5 in the workspace's own database: porter-stemmed unicode61 words ("failing" finds
"failed"; `snake_case`, paths, dotted names and error codes are split at their punctuation by the
tokenizer), plus a second column holding the parts of camelCase identifiers (`getUserName` is also
`get user name`). The table is contentless: the
text is in `items` already, so the index holds only its own b-trees.

Each thread has a watermark (`recall_threads.upto`): its items up to that seq are indexed, those
after it are not yet. A record appends after the watermark and so writes nothing to the index (a
record's commit stays one page write, `bench/bench_speed.py`); `catch_up` indexes what is past
the watermark in batches, each one transaction that moves the watermark with the rows it adds,
before every search. Every other change to `items` is followed in its own transaction by TEMP
triggers this connection creates when the store opens: a deleted or moved item leaves the index
at once, and an item written at or below the watermark lowers it. So the index never holds an
item that is not stored, whatever code path wrote, and a killed process leaves at most some
items still to index. A store made before the index gets the tables when opened and is indexed
by the first search.

A row of the index is `(thread id << 32) | seq`, so a thread's matches are one rowid range.
`recall_turns` lists the indexed items that start a user turn, each with its index in its thread
(`n`, counted from 1, archived turns included): a hit's turn is one lookup, not a count.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import sqlite3
from typing import Any, NamedTuple

from ctxd.ledger import bodies
from ctxd.ledger.rules import is_real_user_message

log = logging.getLogger(__name__)

# Bump when what is indexed changes: stores indexed by another version are indexed again (a
# contentless index must be told the exact text of a row it deletes).
INDEX_VERSION = "6"
SEQ_BITS = 32
BATCH = 2000  # items indexed per transaction: other writers wait at most one batch
# Each transaction that indexes writes one segment; FTS5 merges them this many at a time. Its
# default, 4, copies every word's entry about twice as often as 16 does, which shows in the cost of
# indexing text that repeats little (`bench/bench_recall.py --only source`). A search reads up to
# this many segments per level, which `bench/bench_recall.py --only speed` times.
AUTOMERGE = 16

FTS_TABLE = ("CREATE VIRTUAL TABLE recall_fts USING fts5(text, parts, content='', "
             "tokenize='porter unicode61 remove_diacritics 2')")
_TABLES = (
    FTS_TABLE,
    "CREATE TABLE recall_threads (id INTEGER PRIMARY KEY, thread TEXT NOT NULL UNIQUE, "
    "upto INTEGER NOT NULL DEFAULT 0)",
    "CREATE TABLE recall_turns (rid INTEGER PRIMARY KEY, n INTEGER NOT NULL)",
)
_SHADOWS = ("recall_fts_data", "recall_fts_idx", "recall_fts_docsize", "recall_fts_config")
# (Dropping the FTS5 table drops its shadow tables; they are dropped after it too, for an index
# whose FTS5 table was replaced by another.)
_DROP = tuple(f"DROP TABLE IF EXISTS {name}" for name in (*_SHADOWS, "recall_threads", "recall_turns"))
_UNTRIGGER = tuple(f"DROP TRIGGER IF EXISTS temp.{name}" for name in ("recall_insert", "recall_delete", "recall_update"))

_RID = "(((SELECT id FROM recall_threads WHERE thread = {r}.thread) << 32) | {r}.seq)"
_REMOVE = f"""
INSERT INTO recall_fts (recall_fts, rowid, text, parts)
  SELECT 'delete', {_RID}, ctxd_recall_text({{r}}.body), ctxd_recall_parts({{r}}.body)
  WHERE EXISTS (SELECT 1 FROM recall_fts_docsize WHERE id = {_RID});
UPDATE recall_turns SET n = n - 1 WHERE rid > {_RID} AND rid < ((({_RID} >> 32) + 1) << 32)
  AND EXISTS (SELECT 1 FROM recall_turns WHERE rid = {_RID});
DELETE FROM recall_turns WHERE rid = {_RID};
"""
# (A thread not yet in `recall_threads` has nothing indexed: `sync_threads` adds it with watermark 0.)
_LOWER = """
UPDATE recall_threads SET upto = {r}.seq - 1 WHERE thread = {r}.thread AND upto >= {r}.seq;
"""
_TRIGGERS = (
    f"CREATE TEMP TRIGGER IF NOT EXISTS recall_insert AFTER INSERT ON main.items BEGIN {_LOWER.format(r='NEW')} END",
    f"CREATE TEMP TRIGGER IF NOT EXISTS recall_delete AFTER DELETE ON main.items BEGIN {_REMOVE.format(r='OLD')} END",
    "CREATE TEMP TRIGGER IF NOT EXISTS recall_update AFTER UPDATE OF thread, seq, body, origin ON main.items BEGIN "
    f"{_REMOVE.format(r='OLD')} {_LOWER.format(r='NEW')} END",
)

# Fields that hold no words: kinds, ids, opaque blobs, images.
_SKIPPED_KEYS = frozenset({"type", "role", "id", "call_id", "status", "encrypted_content", "image_url", "detail",
                           "ghost_commit", "format"})
_PART = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_SHORT_TEXT = 512  # shorter texts are indexed as they are: too short for repeats to cost much
_SHORT_LINE = 12  # lines this long or shorter repeat in any source file ("    }", "return x")
_MAX_PART_WORD = 64  # longer runs are hashes or blobs, not identifiers


class Unavailable(Exception):
    """This SQLite has no FTS5: recall cannot be answered (nothing else is affected)."""


# Recall's own calls and answers (`ctxd mcp`'s tools) are not indexed: a later search would find
# its earlier answers instead of the items they quote. Each agent names an MCP server's tool its own
# way (`mcp__ctxd__recall`, `ctxd__recall`, `mcp_ctxd_recall`, `ctxd_recall`...): the server's name
# and the tool's, apart by separators, whatever the agent, so that a new agent needs nothing here.
_OWN_TOOL = re.compile(r"(?:^|[^A-Za-z0-9])ctxd[^A-Za-z0-9]{1,3}(?:recall|history_item)\Z")
_OWN_ANSWERS = ('{"results": [', '{"results":[', '{"item": {', '{"item":{')


def item_text(item: Any) -> str:
    """The words of an item: every string in it but ids, kinds and opaque data; a tool call's
    arguments (JSON text) by their string values. Recall's own calls and answers: nothing."""
    if isinstance(item, dict):  # the common shapes without the walk
        kind = item.get("type")
        whole = item.get("output")
        if kind == "function_call_output" and isinstance(whole, str) and len(item) <= 4 and "name" not in item:
            return "" if whole.startswith(_OWN_ANSWERS) and '"seq"' in whole[:2000] else whole
        name = item.get("name")
        if isinstance(name, str) and _OWN_TOOL.search(name):
            return ""
        if whole is not None:
            output = whole[0].get("text") if isinstance(whole, list) and whole and isinstance(whole[0], dict) else whole
            if isinstance(output, str) and output.startswith(_OWN_ANSWERS) and '"seq"' in output[:2000]:
                return ""
            if kind == "function_call_output" and isinstance(whole, str) and len(item) <= 4:
                return whole
        if kind == "message" and len(item) <= 4:
            text = _part_texts(item.get("content"))
            if text is not None:
                return text
        elif kind == "function_call":
            arguments = item.get("arguments")
            if isinstance(arguments, str) and isinstance(name, str):
                words = [name] if name else []
                _collect(arguments, words, "arguments")
                return "\n".join(words)
        elif kind == "reasoning" and not item.get("content"):
            text = _part_texts(item.get("summary"))
            if text is not None:
                return text
    out: list[str] = []
    _collect(item, out, None)
    return "\n".join(out)


def _part_texts(parts: Any) -> str | None:
    """The texts of a message's content or a reasoning summary, joined; None when a part that is
    an object has no text (the walk then reads it)."""
    if not isinstance(parts, list):
        return None
    if len(parts) == 1:  # most messages: one part
        part = parts[0]
        if not isinstance(part, dict):
            return ""
        text = part.get("text")
        return text if isinstance(text, str) else None
    texts = [part.get("text") for part in parts if isinstance(part, dict)]
    if all(isinstance(text, str) for text in texts):
        return "\n".join(text for text in texts if text)
    return None


def index_text(item: Any) -> str:
    """What the index holds of an item: its words (`item_text`), each distinct line once when
    its lines repeat. A line repeated in one item (a log's progress lines, the same warning, the
    same code) adds no word to find, and BM25 weighs repeats little; FTS5's cost is per word
    (`bench/bench_recall.py`). Snippets and `ctxd/item` read the whole text."""
    text = item_text(item)
    if len(text) < _SHORT_TEXT or not _repeats_lines(text):
        return text
    return "\n".join(dict.fromkeys(_one_period(text).split("\n")))


def _repeats_lines(text: str) -> bool:
    """Whether the first line past the middle of `text` that is longer than a closing brace or a
    short statement is there more than once: a cheap sign (one scan) that leaving out repeated
    lines is worth a split of every line. (A text whose lines differ, as a file's source mostly
    does, is then indexed as it is; that adds no word, only repeats.)"""
    start = text.find("\n", len(text) // 2)
    for _ in range(4):
        end = text.find("\n", start + 1)
        if end < 0:
            return False
        if end - start > _SHORT_LINE:
            return text.count(text[start:end + 1]) > 1
        start = end
    return False


def _one_period(text: str) -> str:
    """`text` without the repeats when it is one block of whole lines printed again and again (a
    loop's output, a file printed twice): the block and what follows its last whole copy, whose
    distinct lines are the text's. Else `text`. Two comparisons instead of a split of every line."""
    first = text.find("\n") + 1
    period = text.find("\n" + text[:first], first - 1) + 1
    if period <= 0 or text[period:2 * period] != text[:period] or text[period:] != text[:-period]:
        return text
    return text[:period] + text[len(text) - len(text) % period:]


def _collect(value: Any, out: list[str], key: str | None) -> None:
    if isinstance(value, str):
        if key == "arguments" and value[:1] in "{[":
            try:
                _collect(json.loads(value), out, None)
                return
            except ValueError:
                pass
        if value:
            out.append(value)
    elif isinstance(value, dict):
        for name, inner in value.items():
            if name in _SKIPPED_KEYS:
                continue
            if type(inner) is str and name != "arguments":  # the common leaf, without a call
                if inner:
                    out.append(inner)
            else:
                _collect(inner, out, name)
    elif isinstance(value, list):
        for inner in value:
            if type(inner) is str and key != "arguments":
                if inner:
                    out.append(inner)
            else:
                _collect(inner, out, key)


def _class_table() -> bytes:
    table = bytearray(b" " * 256)
    for start, end, mark in ((b"a", b"z", b"a"), (b"A", b"Z", b"A"), (b"0", b"9", b"0")):
        for code in range(start[0], end[0] + 1):
            table[code] = mark[0]
    return bytes(table)


# Every byte of a text as its class (`a` lower case, `A` upper case, `0` digit, ` ` anything
# else); a camelCase word is where `aA` occurs, found with `bytes.find` (the regular expression
# engine is several times slower over long tool outputs).
_CLASSES = _class_table()


def identifier_parts(text: str) -> str:
    """The parts of every camelCase word in `text` (`getUserName` -> `get User Name`, `HTTPServer2`
    -> `HTTP Server 2`), each word's parts together."""
    raw = text.encode("utf-8", "surrogatepass")
    classes = raw.translate(_CLASSES)
    at = classes.find(b"aA")
    if at < 0:
        return ""
    words: set[bytes] = set()
    while at >= 0:
        start = classes.rfind(b" ", 0, at) + 1
        end = classes.find(b" ", at)
        end = len(classes) if end < 0 else end
        if end - start <= _MAX_PART_WORD:
            words.add(raw[start:end])
        at = classes.find(b"aA", end)
    return "\n".join(" ".join(_PART.findall(word.decode("ascii"))) for word in sorted(words))


class _Extractor:
    """`ctxd_recall_text` and `ctxd_recall_parts`, which the delete trigger calls for one body in
    turn (as stored: `bodies`): the last body's text is kept."""

    def __init__(self) -> None:
        self._body: str | bytes | None = None
        self._text = ""

    def text(self, body: str | bytes) -> str:
        if body != self._body:
            self._text, self._body = body_text(body), body
        return self._text

    def parts(self, body: str | bytes) -> str:
        return identifier_parts(self.text(body))


def body_text(body: str | bytes) -> str:
    """The indexed text of a body as stored (`index_text`); none for one that cannot be read (the
    index is derived data: reading the item itself says what is wrong with it)."""
    try:
        return index_text(json.loads(bodies.decode(body)))
    except (TypeError, ValueError, bodies.DamagedBody):
        return ""


def install(db: sqlite3.Connection) -> bool:
    """Set up the index on a read-write connection, inside its open write transaction: this
    connection's SQL functions and TEMP triggers, and the tables when they are missing, of
    another INDEX_VERSION or damaged (`damage`): they are made anew, empty, and every item waits
    for `catch_up`. Without FTS5 this does nothing (recall then answers that it is unavailable)
    and returns False."""
    if not has_fts5(db):
        return False
    extractor = _Extractor()
    db.create_function("ctxd_recall_text", 1, extractor.text, deterministic=True)
    db.create_function("ctxd_recall_parts", 1, extractor.parts, deterministic=True)
    row = db.execute("SELECT value FROM meta WHERE key = 'recall_index'").fetchone()
    if row is None or row[0] != INDEX_VERSION or not present(db):
        rebuild(db)
        return True
    problem = damage(db)
    if problem is not None:
        log.warning("the recall index is damaged (%s): it is made anew and indexed again from the ledger", problem)
        rebuild(db)
        return True
    if db.execute("SELECT v FROM recall_fts_config WHERE k = 'automerge'").fetchone() != (AUTOMERGE,):
        db.execute("INSERT INTO recall_fts (recall_fts, rank) VALUES ('automerge', ?)", (AUTOMERGE,))
    for statement in _TRIGGERS:
        db.execute(statement)
    return True


def rebuild(db: sqlite3.Connection) -> None:
    """Drop the index's tables and triggers, whatever state they are in, and make them anew,
    inside the caller's write transaction: every item then waits for `catch_up`. The index is
    derived from `items`, so nothing recorded is lost."""
    for statement in _UNTRIGGER:
        db.execute(statement)
    _drop_fts(db)
    for statement in (*_DROP, *_TABLES):
        db.execute(statement)
    db.execute("INSERT OR REPLACE INTO meta VALUES ('recall_index', ?)", (INDEX_VERSION,))
    db.execute("INSERT INTO recall_fts (recall_fts, rank) VALUES ('automerge', ?)", (AUTOMERGE,))
    for statement in _TRIGGERS:
        db.execute(statement)


def _drop_fts(db: sqlite3.Connection) -> None:
    """Drop the FTS5 table. One FTS5 cannot open (a shadow table missing or damaged: dropping it
    opens it first) gets the shadow tables of an empty index first, copied from one made in
    memory."""
    try:
        db.execute("DROP TABLE IF EXISTS recall_fts")
        return
    except sqlite3.Error as error:
        if transient(error):
            raise
    fresh = sqlite3.connect(":memory:")
    try:
        fresh.execute(FTS_TABLE)
        for name in _SHADOWS:
            (sql,) = fresh.execute("SELECT sql FROM sqlite_master WHERE name = ?", (name,)).fetchone()
            rows = fresh.execute(f"SELECT * FROM {name}").fetchall()
            db.execute(f"DROP TABLE IF EXISTS {name}")
            db.execute(sql)
            if rows:
                db.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(rows[0]))})", rows)
    finally:
        fresh.close()
    db.execute("DROP TABLE recall_fts")


def uninstall(db: sqlite3.Connection) -> None:
    """This connection's triggers dropped: its writes no longer touch the index (when it is
    damaged beyond `rebuild`)."""
    for statement in _UNTRIGGER:
        db.execute(statement)


def damage(db: sqlite3.Connection) -> str | None:
    """What is wrong with the index's tables, or None: one missing, not as this version makes it,
    unreadable, or the newest indexed item not found by its first word (a damaged structure
    record reads as an empty index). A few lookups. Errors of the store itself (locked, I/O, a
    full disk) are raised: they say nothing of the index."""
    names = {*_SHADOWS, "recall_fts", "recall_threads", "recall_turns"}
    schema = {name: sql for name, sql in db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'")
              if name in names}
    for name in sorted(names):
        if name not in schema:
            return f"{name} is missing"
    for name, sql in (("recall_fts", FTS_TABLE), ("recall_threads", _TABLES[1]), ("recall_turns", _TABLES[2])):
        if " ".join(str(schema[name]).split()) != " ".join(sql.split()):
            return f"{name} is not the table the index makes"
    try:
        if db.execute("SELECT v FROM recall_fts_config WHERE k = 'version'").fetchone() is None:
            return "recall_fts_config has no version"
        db.execute("SELECT id, thread, upto FROM recall_threads LIMIT 1").fetchall()
        db.execute("SELECT rid, n FROM recall_turns LIMIT 1").fetchall()
        newest = db.execute("SELECT id FROM recall_fts_docsize ORDER BY id DESC LIMIT 1").fetchone()
        if newest is None:
            return None
        rid = int(newest[0])
        row = db.execute("SELECT i.body FROM items i JOIN recall_threads t ON t.thread = i.thread "
                         "WHERE t.id = ? AND i.seq = ?", (rid >> SEQ_BITS, rid & ((1 << SEQ_BITS) - 1))).fetchone()
        if row is None:
            return f"it holds row {rid}, which is no stored item"
        word = next(iter(_ASCII_WORD.findall(body_text(row[0])[:4096])), None)
        if word is not None and db.execute("SELECT 1 FROM recall_fts WHERE recall_fts MATCH ? AND rowid = ?",
                                           (f'"{word}"', rid)).fetchone() is None:
            return f"the newest indexed item (row {rid}) is not found by its first word"
    except sqlite3.Error as error:
        if transient(error):
            raise
        return str(error)
    return None


def transient(error: sqlite3.Error) -> bool:
    """Whether `error` is the store's state (busy, locked, read-only, full, I/O), not its content."""
    name = (getattr(error, "sqlite_errorname", "") or "").upper()
    text = str(error).lower()
    return (any(kind in name for kind in ("BUSY", "LOCKED", "READONLY", "FULL", "IOERR", "NOMEM", "INTERRUPT"))
            or any(kind in text for kind in ("locked", "readonly", "read-only", "is full", "disk i/o")))


def sync_threads(db: sqlite3.Connection) -> None:
    """Give every thread of the store (every thread with items has a `threads` row) its id."""
    db.execute("INSERT OR IGNORE INTO recall_threads (thread) SELECT thread FROM threads")


def behind(db: sqlite3.Connection, thread: int | None = None) -> list[tuple[int, str, int]]:
    """The threads (all, or the one with id `thread`) with items past their watermark:
    (id, name, watermark)."""
    rows = db.execute("SELECT id, thread, upto FROM recall_threads" + (" WHERE id = ?" if thread is not None else ""),
                      () if thread is None else (thread,)).fetchall()
    return [(tid, name, upto) for tid, name, upto in rows
            if db.execute("SELECT 1 FROM items WHERE thread = ? AND seq > ? LIMIT 1", (name, upto)).fetchone()]


def waiting(db: sqlite3.Connection, thread: str | None, cap: int) -> int:
    """How many items (of every thread, or of `thread`) are past their watermark, counted up to
    `cap`: each thread's range, read as far as the count needs."""
    rows = db.execute("SELECT t.thread, coalesce(r.upto, 0) FROM threads t LEFT JOIN recall_threads r "
                      "ON r.thread = t.thread" + (" WHERE t.thread = ?" if thread is not None else ""),
                      () if thread is None else (thread,)).fetchall()
    count = 0
    for name, upto in rows:
        if count >= cap:
            break
        count += int(db.execute("SELECT count(*) FROM (SELECT 1 FROM items WHERE thread = ? AND seq > ? LIMIT ?)",
                                (name, upto, cap - count)).fetchone()[0])
    return count


def catch_up_batch(db: sqlite3.Connection, tid: int, thread: str, upto: int) -> bool:
    """Index up to BATCH items of a thread past its watermark, inside the caller's write
    transaction, and move the watermark past them. True when the thread has more to index."""
    rows = db.execute("SELECT seq, body, origin FROM items WHERE thread = ? AND seq > ? ORDER BY seq LIMIT ?",
                      (thread, upto, BATCH)).fetchall()
    if not rows:
        return False
    base = tid << SEQ_BITS
    indexed = {rid for (rid,) in db.execute("SELECT id FROM recall_fts_docsize WHERE id > ? AND id <= ?",
                                            (base | upto, base | rows[-1][0]))}
    parsed = []
    for seq, body, origin in rows:
        if base | seq in indexed:
            continue  # indexed before the watermark was lowered below it
        try:
            item = json.loads(bodies.decode(body))
        except ValueError:
            item = None
        except bodies.DamagedBody as error:  # not indexed; reading the item gives the store's error
            log.warning("item %s of thread %r is not indexed: %s", seq, thread, error)
            item = None
        parsed.append((seq, item, origin))
    _add(db, base, parsed)
    db.execute("UPDATE recall_threads SET upto = ? WHERE id = ?", (rows[-1][0], tid))
    return len(rows) == BATCH


def index_appended(db: sqlite3.Connection, thread: str, first: int, items: list[Any],
                   origin: int | None = None) -> None:
    """Index items just appended at seqs `first`... (the items as parsed, in the append's own
    transaction: the mirror has them already, so nothing is parsed again), when everything before
    them is indexed; else they wait for `catch_up` with the rest. `origin`: the compaction writing
    them (its summary starts no user turn)."""
    row = db.execute("SELECT id, upto FROM recall_threads WHERE thread = ?", (thread,)).fetchone()
    if row is None:
        if first != 1 and db.execute("SELECT 1 FROM items WHERE thread = ? AND seq < ? LIMIT 1",
                                     (thread, first)).fetchone():
            return
        tid = int(db.execute("INSERT INTO recall_threads (thread) VALUES (?)", (thread,)).lastrowid or 0)
        upto = 0
    else:
        tid, upto = row
    if upto != first - 1 or not items:
        return
    _add(db, tid << SEQ_BITS, [(first + i, item, origin) for i, item in enumerate(items)])
    db.execute("UPDATE recall_threads SET upto = ? WHERE id = ?", (first + len(items) - 1, tid))


def _add(db: sqlite3.Connection, base: int, items: list[tuple[int, Any, int | None]]) -> None:
    """Write (seq, parsed item, origin) to the index, with the user turns they start."""
    fts, turns = [], []
    for seq, item, origin in items:
        text = index_text(item)
        fts.append((base | seq, text, identifier_parts(text)))
        if origin is None and isinstance(item, dict) and item.get("role") == "user" and is_real_user_message(item):
            turns.append((base | seq,))
    db.executemany("INSERT INTO recall_fts (rowid, text, parts) VALUES (?, ?, ?)", fts)
    _add_turns(db, base, [rid for (rid,) in turns])


def _add_turns(db: sqlite3.Connection, base: int, rids: list[int]) -> None:
    """List a thread's user turns (rowids, ascending), each with its index: one more than the turn
    before it. Appended turns are numbered on from the last; a turn indexed again below the
    watermark (turns listed after it) moves those up one."""
    if not rids:
        return
    end = base + (1 << SEQ_BITS)
    if db.execute("SELECT 1 FROM recall_turns WHERE rid >= ? AND rid < ? LIMIT 1", (rids[0], end)).fetchone() is None:
        last = db.execute("SELECT n FROM recall_turns WHERE rid >= ? AND rid < ? ORDER BY rid DESC LIMIT 1",
                          (base, rids[0])).fetchone()
        first = (last[0] if last else 0) + 1
        db.executemany("INSERT INTO recall_turns (rid, n) VALUES (?, ?)",
                       [(rid, first + i) for i, rid in enumerate(rids)])
        return
    for rid in rids:
        if db.execute("SELECT 1 FROM recall_turns WHERE rid = ?", (rid,)).fetchone():
            continue
        before = db.execute("SELECT n FROM recall_turns WHERE rid >= ? AND rid < ? ORDER BY rid DESC LIMIT 1",
                            (base, rid)).fetchone()
        db.execute("UPDATE recall_turns SET n = n + 1 WHERE rid > ? AND rid < ?", (rid, end))
        db.execute("INSERT INTO recall_turns (rid, n) VALUES (?, ?)", (rid, (before[0] if before else 0) + 1))


def has_fts5(db: sqlite3.Connection) -> bool:
    try:
        return db.execute("SELECT 1 FROM pragma_module_list WHERE name = 'fts5'").fetchone() is not None
    except sqlite3.Error:
        return False


# --- queries -------------------------------------------------------------------------------------

_TERM = re.compile(r'"([^"]*)"?|(\S+)')
_WORD = re.compile(r"\w+")
_TOKEN = re.compile(r"[^\W_]+")  # what the tokenizer makes a word of (`test_auth` is two)
_ASCII_WORD = re.compile(r"[A-Za-z0-9]+")  # a word every tokenizer setting reads alike


# The words of a question that say nothing of what it is about ("which port does the billing
# service listen on", "do you remember what we said earlier about ..."): left out of a query that
# has other words, since an item must otherwise hold them all to rank first. Not "not" or "no":
# "command not found" means what it says.
STOPWORDS = frozenset("""
a an the and or of to in on at by for from with about into as than then so if
is are was were be been being am do does did done have has had having
i me my we us our you your he him his she her it its they them their this that these those there here
what which who whom whose when where why how can could should would will shall may might must
please any some just also too very
remember remind recall say said saw seen tell told mention mentioned earlier previously again know""".split())


# What a query can cost is bounded whatever it holds (a log pasted as a query, a quoted page):
# its first MAX_TERMS distinct terms are read, a longer phrase as its runs of MAX_PHRASE_WORDS
# words (each a term); of a query of more terms or words than MAX_SEARCHED / MAX_SEARCHED_WORDS,
# the rarest are searched, all of them or any (a stage per term, each an FTS5 query of them all,
# took 47 s for 1,000 words on 200k items; 16 terms, 0.6 s; now about 10 ms).
MAX_TERMS = 16
MAX_PHRASE_WORDS = 8
MAX_SEARCHED = 6
MAX_SEARCHED_WORDS = 16


def query_terms(query: str) -> list[str]:
    """The query's words and "quoted phrases", as FTS5 strings (quoted, so that nothing the user
    types is read as FTS5 syntax), without STOPWORDS unless the query has nothing else, each
    once, the first MAX_TERMS. A camelCase word also matches its parts. Reads the query only as
    far as it needs."""
    kept: dict[str, None] = {}
    stops: dict[str, None] = {}
    for match in _TERM.finditer(query):
        phrase, word = match.groups()
        text = phrase if phrase is not None else word
        tokens = [token.group() for token in itertools.islice(_TOKEN.finditer(text), MAX_TERMS * MAX_PHRASE_WORDS)]
        if not tokens:
            continue
        if len(tokens) > MAX_PHRASE_WORDS:  # a long phrase: its runs of MAX_PHRASE_WORDS words, each a term
            for start in range(0, len(tokens), MAX_PHRASE_WORDS):
                kept['"' + " ".join(tokens[start:start + MAX_PHRASE_WORDS]) + '"'] = None
                if len(kept) >= MAX_TERMS:
                    return list(kept)
            continue
        quoted = '"' + " ".join(_WORD.findall(text)) + '"'
        if phrase is None and len(text) <= _MAX_PART_WORD and identifier_parts(text):
            quoted = f'({quoted} OR "{identifier_parts(text)}")'
        if phrase is None and len(tokens) == 1 and _WORD.findall(text)[0].lower() in STOPWORDS:
            if len(stops) < MAX_TERMS:
                stops[quoted] = None
        else:
            kept[quoted] = None
            if len(kept) >= MAX_TERMS:
                break
    return list(kept or stops)


# How close two query words must be for an item to rank first (in tokens); each further word
# widens the window by NEAR_PER_WORD (a fact's words sit in one sentence, not side by side).
NEAR_DISTANCE = 12
NEAR_PER_WORD = 5
# A term matching more items than this is common: BM25 would read every one of its matches (to
# weigh it, next to nothing), so it is left out of the ranking; a stage matching more than this
# shows its newest matches first (a query that common says little; `bench/bench_recall.py`
# measures what this keeps the p95 at).
RANKED_MATCHES = 500
PROBES = 24  # words probed for how common they are, at most, per search


class Stage(NamedTuple):
    kind: str  # "all", "all but one" or "any"
    terms: list[str]  # the terms the stage asks for (all of them, or any)

    @property
    def expression(self) -> str:
        """The FTS5 query."""
        return (" OR " if self.kind == "any" else " AND ").join(self.terms)

    @property
    def near(self) -> str | None:
        """The same words near one another (their matches rank first), or None."""
        if self.kind == "any" or len(self.terms) < 2:
            return None
        firsts = " ".join(_alternatives(term)[0] for term in self.terms)
        return f"NEAR({firsts}, {NEAR_DISTANCE + NEAR_PER_WORD * (len(self.terms) - 2)})"


def stages(terms: list[str]) -> list[Stage]:
    """The FTS5 queries tried in turn, each one's matches ranked after the ones before: every
    word, every word but one (what the others find is still worth showing when one word is not
    in the history), and, when these found nothing, any word. In the first two, the items where
    the words are near one another rank first."""
    out = [Stage("all", terms)]
    if len(terms) > 2:
        out += [Stage("all but one", terms[:i] + terms[i + 1:]) for i in range(len(terms))]
    if len(terms) > 1:
        out.append(Stage("any", terms))
    return out


def thread_id(db: sqlite3.Connection, thread: str) -> int | None:
    row = db.execute("SELECT id FROM recall_threads WHERE thread = ?", (thread,)).fetchone()
    return None if row is None else int(row[0])


class Found(NamedTuple):
    rids: list[int]  # the best matches, best first
    total: int  # how many items the stages that gave `rids` match (see `search`)
    counted: list[int] | None  # those items, when `total` was counted from them (else None)


class _Scope:
    """FTS5 queries over one thread's rows (or every thread's)."""

    def __init__(self, db: sqlite3.Connection, thread: int | None) -> None:
        self.db = db
        self.weights: dict[str, dict[int, float]] = {}  # a term's BM25 in each of its rows (`scored`)
        self.scoring = True  # whether `scored` reads BM25 (a long query ranks without it)
        self.where, self.args = "recall_fts MATCH ?", []
        if thread is not None:
            self.where += " AND rowid BETWEEN ? AND ?"
            self.args = [thread << SEQ_BITS, (thread << SEQ_BITS) | ((1 << SEQ_BITS) - 1)]

    def rowids(self, expression: str, limit: int, newest: bool = False) -> list[int]:
        order = " ORDER BY rowid DESC" if newest else ""
        return [rid for (rid,) in self.db.execute(f"SELECT rowid FROM recall_fts WHERE {self.where}{order} LIMIT ?",
                                                  (expression, *self.args, limit))]

    def matches(self, expression: str) -> list[int] | None:
        """The rows matching `expression`; None when there are more than RANKED_MATCHES."""
        rows = self.rowids(expression, RANKED_MATCHES + 1)
        return rows if len(rows) <= RANKED_MATCHES else None

    def scored(self, term: str) -> list[int] | None:
        """`matches` of one term, each with the term's BM25 (the identifier parts weigh half) kept
        in `weights`: BM25 adds up over a query's terms, so a rare term's is read once, here."""
        score = "bm25(recall_fts, 1.0, 0.5)" if self.scoring else "0"
        rows = self.db.execute(f"SELECT rowid, {score} FROM recall_fts WHERE {self.where} LIMIT ?",
                               (term, *self.args, RANKED_MATCHES + 1)).fetchall()
        if len(rows) > RANKED_MATCHES:
            return None
        self.weights[term] = dict(rows)
        return [rid for rid, _ in rows]

    def probe(self, word: str) -> list[int] | None:
        """`scored` of one word, counted first: a common word's rows are not read into Python."""
        count = self.db.execute(f"SELECT count(*) FROM (SELECT 1 FROM recall_fts WHERE {self.where} LIMIT ?)",
                                (word, *self.args, RANKED_MATCHES + 1)).fetchone()[0]
        return None if count > RANKED_MATCHES else self.scored(word) if count else []

    def count(self, expression: str) -> int:
        return int(self.db.execute(f"SELECT count(*) FROM recall_fts WHERE {self.where}",
                                   (expression, *self.args)).fetchone()[0])


def _alternatives(term: str) -> list[str]:
    """A term's phrases: one, or a camelCase word's two (`("getUserName" OR "get User Name")`).
    Its quoted phrases, not its parts between ` OR `: a phrase may hold the word OR (`"cats OR
    dogs"` was cut into `"cats` and `dogs"`, and FTS5 failed on the quote left open)."""
    return _PHRASE.findall(term)


_PHRASE = re.compile(r'"[^"]*"')


def frequencies(scope: _Scope, terms: list[str]) -> dict[str, list[int] | None]:
    """The items each term matches when at most RANKED_MATCHES (none: an empty list), else None.
    Words are probed first (`_Scope.probe`), at most PROBES, each term's likeliest rare word
    first (numbers, long words), then each term's next. A phrase of common words costs a read
    of every position of each: in a long query (`is_long`) or one of more than one phrase, a phrase is probed only when one of its words is rare (FTS5 then reads only around
    that word's matches), and only the MAX_SEARCHED whose rarest words are the rarest; the others
    are taken as common."""
    cheap_only = is_long(terms) or sum(" " in text for term in terms for text in _alternatives(term)) > 1
    phrases = [text for term in terms for text in _alternatives(term)]
    tokens = {text: sorted(set(_TOKEN.findall(text)), key=_specific) for text in phrases}
    words: dict[str, list[int] | None] = {}
    for depth in range(max((len(found) for found in tokens.values()), default=0)):
        for text in phrases:
            if depth < len(tokens[text]) and len(words) < PROBES and tokens[text][depth] not in words:
                words[tokens[text][depth]] = scope.probe(f'"{tokens[text][depth]}"')

    def rarest(text: str) -> list[int] | None:
        """The matches of the phrase's rarest probed word (a bound on the phrase's), or None."""
        found = [rows for token in tokens[text] if (rows := words.get(token)) is not None]
        return min(found, key=len) if found else None

    # Of a query too long to search whole, only the phrases that may be among its rarest terms
    # (by their rarest word) are probed whole.
    bounds = {term: max((len(rows) if (rows := rarest(text)) is not None else RANKED_MATCHES + 1)
                        for text in _alternatives(term)) for term in terms}
    probed = set(sorted(terms, key=bounds.__getitem__)[:MAX_SEARCHED]) if cheap_only else set(terms)

    def phrase(term: str, text: str) -> list[int] | None:
        found = [words[token] for token in tokens[text] if token in words]
        if [] in found:
            return []
        if len(tokens[text]) == 1:
            return found[0] if found else None
        if term not in probed or (cheap_only and all(rows is None for rows in found)):
            return None
        return scope.scored(text)

    out: dict[str, list[int] | None] = {}
    for term in terms:
        found = [phrase(term, text) for text in _alternatives(term)]
        if len(found) == 1 or all(rows == [] for rows in found):
            out[term] = found[0]
        else:
            out[term] = None if None in found or term not in probed else scope.scored(term)
    return out


def _specific(token: str) -> tuple[bool, int]:
    """Words with digits, then longer words, first: the likeliest to be rare."""
    return not any(char.isdigit() for char in token), -len(token)


def is_long(terms: list[str]) -> bool:
    """Whether a query is too long to search whole: more than MAX_SEARCHED terms, or more than
    MAX_SEARCHED_WORDS words (a quoted page is a few terms of 8 words)."""
    return len(terms) > MAX_SEARCHED or sum(len(_TOKEN.findall(_alternatives(term)[0])) for term in terms) > MAX_SEARCHED_WORDS


def searched(terms: list[str], known: dict[str, list[int] | None]) -> list[str]:
    """The terms a search asks for: all of them, or of a long query (`is_long`), the rarest that
    some item holds, rarest first, at most MAX_SEARCHED of MAX_SEARCHED_WORDS words in all (each word of an FTS5 query
    costs a look-up in every segment of the index, whatever the others)."""
    if not is_long(terms):
        return terms

    def rarity(term: str) -> tuple[bool, int, int]:
        """Rare first, then (of common terms) the fewest words: a phrase of common words is the
        dearest term to match."""
        rows = known.get(term)
        return rows is None, len(rows or ()), len(_TOKEN.findall(_alternatives(term)[0]))

    held = [term for term in terms if known.get(term) != []] or terms
    chosen: list[str] = []  # rarest first: FTS5 reads the others only around it
    words = 0
    for term in sorted(held, key=rarity):
        size = len(_TOKEN.findall(_alternatives(term)[0]))
        if not chosen or words + size <= MAX_SEARCHED_WORDS:
            chosen.append(term)
            words += size
        if len(chosen) == MAX_SEARCHED:
            break
    return chosen


def search(db: sqlite3.Connection, terms: list[str], thread: int | None, limit: int) -> Found:
    """Rowids of the best matches, best first, and how many items the stages they came from
    match. Stages (`stages`): every term; while that found fewer than `limit`, every term but
    one; when nothing did, any term. A term no item holds is known from the probes
    (`frequencies`), and a stage needing it is not run. Within a stage, the matches where the
    words are near one another come first, then BM25 over the query's rare terms ranks (the
    identifier parts weigh half), then the newest; a stage matching more than RANKED_MATCHES
    items shows its newest first. In "any", the items holding more of the rare terms come first.
    Of a long query (`is_long`; `searched`: its rarest terms), every term or any rare one, ranked
    by the rare terms an item holds, then the newest.

    `total` counts the items matched by the stages that gave results: from their matches when
    each has at most RANKED_MATCHES (then `counted` lists them), else by FTS5."""
    if not present(db):
        raise Unavailable("the recall index is not available: this SQLite has no FTS5")
    scope = _Scope(db, thread)
    long = is_long(terms)
    scope.scoring = not long
    known = frequencies(scope, terms)
    terms = searched(terms, known)
    rare = {term: set(rows) for term in terms if (rows := known.get(term))}
    # (Of a long query, the items holding more of the rare terms rank first, then the newest: BM25
    # would read every position of each phrase, and a pasted log is mostly phrases.)
    scores: dict[int, float] = {}
    for term in rare if not long else ():
        for rid, weight in scope.weights.get(term, {}).items():
            scores[rid] = scores.get(rid, 0.0) + weight

    def order(rid: int) -> tuple[float, int]:
        return scores.get(rid, 0.0), -rid

    def holding(rid: int) -> int:
        return -sum(rid in rows for rows in rare.values())

    found: dict[int, None] = {}
    matched: set[int] = set()
    gave: list[str] = []  # the expressions of the stages that gave results
    uncounted = False  # one of them matches too many items to list
    for stage in stages(terms):
        if stage.kind == "any":
            if found:
                break
            # (Of a long query, any of its rare terms: common words that no item holds together say
            # nothing, and counting the items holding any of them reads every match of each.)
            stage = Stage("any", [term for term in stage.terms if (rare.get(term) if long else known.get(term) != [])])
            if not stage.terms:
                break
        elif stage.kind == "all but one" and (len(found) >= limit or long):
            continue  # (a long query: its rarest terms, all of them, or any)
        elif any(known.get(term) == [] for term in stage.terms):
            continue  # a term no item holds
        if all(known.get(term) is not None for term in stage.terms):  # every term's matches known: no FTS5
            sets = [set(known[term] or ()) for term in stage.terms]
            joined = set.union(*sets) if stage.kind == "any" else set.intersection(*sets)
            every: list[int] | None = sorted(joined) if len(joined) <= RANKED_MATCHES else None
        else:
            every = scope.matches(stage.expression)
        if every is not None:
            if not every:
                continue
            matched.update(every)
            gave.append(stage.expression)
            if stage.kind == "any":
                shown = sorted(every, key=lambda rid: (holding(rid), *order(rid)))
            else:
                shown = sorted(every, key=lambda rid: (holding(rid), *order(rid)) if long else order(rid))
                near = stage.near if _near_worth(stage, long) and len(shown) > 1 else None
                close = set(scope.matches(near) or ()) if near else set()
                shown = [rid for rid in shown if rid in close] + [rid for rid in shown if rid not in close]
        else:
            gave.append(stage.expression)
            uncounted = True
            if stage.kind == "any":  # the items holding the rare terms, then the newest
                shown = sorted(set().union(*rare.values()), key=lambda rid: (holding(rid), *order(rid)))[:limit]
            elif stage.near and _near_worth(stage, long):
                close_rows = scope.matches(stage.near)
                shown = (sorted(close_rows, key=order)[:limit] if close_rows is not None
                         else scope.rowids(stage.near, limit, True))
            else:
                shown = []
            shown += scope.rowids(stage.expression, limit, newest=True)
        found.update((rid, None) for rid in shown[:limit] if rid not in found)
    if uncounted:
        total = scope.count(" OR ".join(f"({expression})" for expression in gave))
        return Found(list(found)[:limit], max(total, len(found)), None)
    return Found(list(found)[:limit], len(matched), sorted(matched))


def _near_worth(stage: Stage, long: bool) -> bool:
    """Whether the stage's words near one another rank first: not in a long query, nor in a stage
    with a phrase (its words are near one another already, and NEAR reads every position of each
    again)."""
    return stage.near is not None and not long and not any(" " in _alternatives(term)[0] for term in stage.terms)


def present(db: sqlite3.Connection) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE name = 'recall_fts'").fetchone() is not None


def turns_of(db: sqlite3.Connection, rids: list[int]) -> dict[int, tuple[int, int]]:
    """The user turn each item belongs to: rowid -> (the turn's index counted from 1, the turn's
    rowid); items before their thread's first user turn are left out. One lookup each."""
    out: dict[int, tuple[int, int]] = {}
    for rid in rids:
        base = (rid >> SEQ_BITS) << SEQ_BITS
        row = db.execute("SELECT n, rid FROM recall_turns WHERE rid >= ? AND rid <= ? ORDER BY rid DESC LIMIT 1",
                         (base, rid)).fetchone()
        if row is not None:
            out[rid] = (int(row[0]), int(row[1]))
    return out
