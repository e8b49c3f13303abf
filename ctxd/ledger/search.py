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

import json
import re
import sqlite3
from typing import Any, NamedTuple

from ctxd.ledger.rules import is_real_user_message

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
_DROP = ("DROP TABLE IF EXISTS recall_fts", "DROP TABLE IF EXISTS recall_threads", "DROP TABLE IF EXISTS recall_turns")

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


# Recall's own calls and answers (`ctxd mcp`'s tools, as every agent names an MCP server's tool:
# `mcp__ctxd__recall` in Claude Code and qwen-code, `ctxd__recall` in Codex, `mcp_ctxd_recall` in
# Gemini CLI, `ctxd_recall` in OpenCode) are not indexed: a later search would find its earlier
# answers instead of the items they quote.
_OWN_TOOLS = frozenset(f"{prefix}{tool}" for prefix in ("mcp__ctxd__", "ctxd__", "mcp_ctxd_", "ctxd_")
                       for tool in ("recall", "history_item"))
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
        if isinstance(name, str) and name in _OWN_TOOLS:
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
    turn: the last body's text is kept."""

    def __init__(self) -> None:
        self._body: str | None = None
        self._text = ""

    def text(self, body: str) -> str:
        if body != self._body:
            self._text, self._body = body_text(body), body
        return self._text

    def parts(self, body: str) -> str:
        return identifier_parts(self.text(body))


def body_text(body: str) -> str:
    """The indexed text of a stored body (`index_text`)."""
    try:
        return index_text(json.loads(body))
    except (TypeError, ValueError):
        return ""


def install(db: sqlite3.Connection) -> bool:
    """Set up the index on a read-write connection, inside its open write transaction: this
    connection's SQL functions and TEMP triggers, and the tables when they are missing or of
    another INDEX_VERSION (every item then waits for `catch_up`). Without FTS5 this does nothing
    (recall then answers that it is unavailable) and returns False."""
    if not has_fts5(db):
        return False
    extractor = _Extractor()
    db.create_function("ctxd_recall_text", 1, extractor.text, deterministic=True)
    db.create_function("ctxd_recall_parts", 1, extractor.parts, deterministic=True)
    row = db.execute("SELECT value FROM meta WHERE key = 'recall_index'").fetchone()
    if row is None or row[0] != INDEX_VERSION or not present(db):
        for statement in (*_DROP, *_TABLES):
            db.execute(statement)
        db.execute("INSERT OR REPLACE INTO meta VALUES ('recall_index', ?)", (INDEX_VERSION,))
    if db.execute("SELECT v FROM recall_fts_config WHERE k = 'automerge'").fetchone() != (AUTOMERGE,):
        db.execute("INSERT INTO recall_fts (recall_fts, rank) VALUES ('automerge', ?)", (AUTOMERGE,))
    for statement in _TRIGGERS:
        db.execute(statement)
    return True


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
            item = json.loads(body)
        except ValueError:
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


# A query's first this many distinct terms are searched: a search runs a stage per term (every
# word but one), each an FTS5 query of them all, so a log pasted as a query would take minutes.
MAX_TERMS = 16


def query_terms(query: str) -> list[str]:
    """The query's words and "quoted phrases", as FTS5 strings (quoted, so that nothing the user
    types is read as FTS5 syntax), without STOPWORDS unless the query has nothing else, each
    once, the first MAX_TERMS. A camelCase word also matches its parts."""
    terms, plain = [], []
    for phrase, word in _TERM.findall(query):
        text = phrase if phrase else word
        words = _WORD.findall(text)
        if not words:
            continue
        quoted = '"' + " ".join(words) + '"'
        if not phrase and len(text) <= _MAX_PART_WORD and identifier_parts(text):
            quoted = f'({quoted} OR "{identifier_parts(text)}")'
        terms.append(quoted)
        plain.append(not phrase and len(words) == 1 and words[0].lower() in STOPWORDS)
    kept = [term for term, stop in zip(terms, plain) if not stop] or terms
    return list(dict.fromkeys(kept))[:MAX_TERMS]


# How close two query words must be for an item to rank first (in tokens); each further word
# widens the window by NEAR_PER_WORD (a fact's words sit in one sentence, not side by side).
NEAR_DISTANCE = 12
NEAR_PER_WORD = 5
# BM25 reads every match's positions: past this many matches a stage's newest matches come first
# (a query that common says little; `bench/bench_recall.py` measures what this keeps the p95 at).
RANKED_MATCHES = 500


class Stage(NamedTuple):
    kind: str  # "all", "all but one" or "any"
    expression: str  # the FTS5 query
    near: str | None  # the same words near one another (their matches rank first), or None


def stages(terms: list[str]) -> list[Stage]:
    """The FTS5 queries tried in turn, each one's matches ranked after the ones before: every
    word, every word but one (what the others find is still worth showing when one word is not
    in the history), and, when these found nothing, any word. In the first two, the items where
    the words are near one another rank first."""
    def near(subset: list[str]) -> str | None:
        if len(subset) < 2:
            return None
        firsts = " ".join(term.removeprefix("(").split(" OR ")[0] for term in subset)
        return f"NEAR({firsts}, {NEAR_DISTANCE + NEAR_PER_WORD * (len(subset) - 2)})"

    out = [Stage("all", " AND ".join(terms), near(terms))]
    if len(terms) > 2:
        out += [Stage("all but one", " AND ".join(subset), near(subset))
                for subset in (terms[:i] + terms[i + 1:] for i in range(len(terms)))]
    if len(terms) > 1:
        out.append(Stage("any", " OR ".join(terms), None))
    return out


def thread_id(db: sqlite3.Connection, thread: str) -> int | None:
    row = db.execute("SELECT id FROM recall_threads WHERE thread = ?", (thread,)).fetchone()
    return None if row is None else int(row[0])


class Found(NamedTuple):
    rids: list[int]  # the best matches, best first
    total: int  # how many items match every term (when none does, any term)
    counted: list[int] | None  # those items, when `total` was counted from them (else None)


def search(db: sqlite3.Connection, terms: list[str], thread: int | None, limit: int) -> Found:
    """Rowids of the best matches, best first, and how many items match every term (when none
    does, any term). Within each of `stages`, BM25 ranks (the identifier parts weigh half), or
    recency when the stage matches more than RANKED_MATCHES items.

    A query with a phrase (several words in one term) is slow to match, so each of its stages is
    run once: its matches come with their scores, sorted here, which also counts them. Single
    words match fast and the stages are first counted up to RANKED_MATCHES + 1, so that BM25
    scores no more than that. The words near one another are a stage's matches that its NEAR also
    finds, in the stage's order. In "any", the items holding more of the query's rare words come
    first."""
    if not present(db):
        raise Unavailable("the recall index is not available: this SQLite has no FTS5")
    where, args = "recall_fts MATCH ?", []
    if thread is not None:
        where += " AND rowid BETWEEN ? AND ?"
        args = [thread << SEQ_BITS, (thread << SEQ_BITS) | ((1 << SEQ_BITS) - 1)]

    phrases = any(" " in term for term in terms)

    def matches(expression: str, scored: bool = True) -> list[int] | None:
        """The stage's matches, best first; None when there are more than RANKED_MATCHES."""
        if scored and not phrases:
            probe = db.execute(f"SELECT count(*) FROM (SELECT 1 FROM recall_fts WHERE {where} LIMIT ?)",
                               (expression, *args, RANKED_MATCHES + 1)).fetchone()[0]
            if probe > RANKED_MATCHES or probe == 0:
                return None if probe else []
        score = "bm25(recall_fts, 1.0, 0.5)" if scored else "0"
        rows = db.execute(f"SELECT rowid, {score} FROM recall_fts WHERE {where} LIMIT ?",
                          (expression, *args, RANKED_MATCHES + 1)).fetchall()
        if len(rows) > RANKED_MATCHES:
            return None
        return [rid for rid, _ in sorted(rows, key=lambda row: row[1])] if scored else [rid for rid, _ in rows]

    def newest(expression: str) -> list[int]:
        return [rid for (rid,) in db.execute(f"SELECT rowid FROM recall_fts WHERE {where} ORDER BY rowid DESC LIMIT ?",
                                             (expression, *args, limit))]

    def count(expression: str) -> int:
        return int(db.execute(f"SELECT count(*) FROM recall_fts WHERE {where}", (expression, *args)).fetchone()[0])

    def near_first(stage: Stage, ranked: list[int]) -> list[int]:
        if stage.near is None or len(ranked) < 2:
            return ranked
        close = set(matches(stage.near, scored=False) or ())
        return [rid for rid in ranked if rid in close] + [rid for rid in ranked if rid not in close]

    found: dict[int, None] = {}
    counted: list[int] | None = None
    total = 0
    for stage in stages(terms):
        if stage.kind == "all":
            every = matches(stage.expression)
            if every is not None:
                total, counted = len(every), every
                found.update((rid, None) for rid in near_first(stage, every))
            else:
                total = count(stage.expression)
                if stage.near is not None:
                    near_ranked = matches(stage.near)
                    near_found = near_ranked if near_ranked is not None else newest(stage.near)
                    found.update((rid, None) for rid in near_found[:limit])
                found.update((rid, None) for rid in newest(stage.expression))
        elif stage.kind == "all but one" and len(found) < limit:
            ranked = matches(stage.expression)
            ranked = near_first(stage, ranked) if ranked is not None else newest(stage.expression)
            found.update((rid, None) for rid in ranked[:limit])
        elif stage.kind == "any" and not found:
            ranked = matches(stage.expression)
            total = len(ranked) if ranked is not None else count(stage.expression)
            counted = ranked
            # The words that match few items (but some) are what the query is about (a common word
            # weighs next to nothing in BM25): the items holding more of them come first, BM25 ranking
            # those holding as many; when the query matches too many items to rank, those words'.
            rare = {term: set(held) for term in terms if (held := matches(term, scored=False))}
            if ranked is None and rare and len(rare) < len(terms):
                ranked = matches(" OR ".join(rare))
            if ranked is not None and len(rare) > 1:
                ranked.sort(key=lambda rid: -sum(rid in held for held in rare.values()))
            found.update((rid, None) for rid in (ranked if ranked is not None else newest(stage.expression))[:limit])
    return Found(list(found)[:limit], total, counted)


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
