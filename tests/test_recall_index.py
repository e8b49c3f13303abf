"""The recall index against the store's every kind of write (ctxd/ledger/search.py): whatever
changes `items` (an append, a compaction's swap, its undo, a delete, a moved seq), the index
follows, and what it finds is what is stored. The store is the real one, on a real file."""

from __future__ import annotations

import hashlib
import json
import random
import sqlite3
from pathlib import Path

from ctxd.ledger import recall, search
from ctxd.ledger.store import Store


def body(text: str, role: str = "user") -> tuple[str, int]:
    kind = "input_text" if role == "user" else "output_text"
    return json.dumps({"type": "message", "role": role, "content": [{"type": kind, "text": text}]}), 1


def found(store: Store, query: str, thread: str = "t") -> list[int]:
    return [hit["seq"] for hit in recall.recall(store, thread, query, limit=100)["results"]]


def check(path: Path) -> None:
    with sqlite3.connect(path) as db:
        stored = {rid for (rid,) in db.execute(
            "SELECT (t.id << 32) | i.seq FROM items i JOIN recall_threads t ON t.thread = i.thread")}
        indexed = {rid for (rid,) in db.execute("SELECT id FROM recall_fts_docsize")}
        db.execute("INSERT INTO recall_fts (recall_fts) VALUES ('integrity-check')")
    assert indexed <= stored


def test_every_write_to_items_is_followed(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    store = Store(path, workspace=tmp_path)
    store.append("t", [body("alpha falcon"), body("bravo heron", "assistant"), body("charlie falcon")])
    assert sorted(found(store, "falcon")) == [1, 3]
    # A compaction archives 1-2 and writes a summary after them; 3, recorded meanwhile, stays
    # active (after the summary): each is found at the seq it is stored at now.
    store.replace("t", 2, [body("summary: falcons and herons")], {})
    seqs = {row.seq: json.loads(row.body)["content"][0]["text"] for row in store.all_rows("t")}
    assert len(seqs) == 4
    for word in ("falcon", "heron", "charlie", "summary"):
        assert sorted(found(store, word)) == sorted(seq for seq, text in seqs.items() if word in text), word
    check(path)
    # Deleting rows (any code path) takes them out of the index at once.
    with store.writing() as db:
        db.execute("DELETE FROM items WHERE thread = 't' AND seq >= 3")
    assert found(store, "summary") == [] and found(store, "charlie") == []
    check(path)
    # A seq given again below the watermark is indexed again, with its new text.
    store.append("t", [body("delta osprey")])
    assert found(store, "osprey") == [3] and found(store, "charlie") == []
    # The turn an item belongs to: user turns counted from the start, archived ones included.
    hit = recall.recall(store, "t", "osprey")["results"][0]
    assert hit["turn"]["index"] == 2 and hit["turn"]["text"] == "delta osprey"
    check(path)
    store.close()


def test_a_store_indexed_by_another_version_is_indexed_again(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    store = Store(path, workspace=tmp_path)
    store.append("t", [body("the cache key is sha256 of poetry.lock")])
    assert found(store, "poetry lock") == [1]
    store.close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = 'old' WHERE key = 'recall_index'")
        db.execute("DELETE FROM recall_turns")
    store = Store(path, workspace=tmp_path)
    assert found(store, "sha256 poetry") == [1]
    assert recall.recall(store, "t", "poetry")["results"][0]["turn"]["index"] == 1
    check(path)
    store.close()


def test_the_index_merges_its_segments_sixteen_at_a_time_in_old_stores_too(tmp_path: Path) -> None:
    """FTS5's default merges four segments at a time, copying every entry more often than 16 does
    (bench/bench_recall.py --only source); a store whose index was made with it is set on open."""
    path = tmp_path / "s.sqlite3"
    store = Store(path, workspace=tmp_path)
    store.append("t", [body("the cache key is sha256 of poetry.lock")])
    store.close()

    def automerge() -> int:
        with sqlite3.connect(path) as db:
            return int(db.execute("SELECT v FROM recall_fts_config WHERE k = 'automerge'").fetchone()[0])

    assert automerge() == search.AUTOMERGE == 16
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO recall_fts (recall_fts, rank) VALUES ('automerge', 4)")
    assert automerge() == 4
    store = Store(path, workspace=tmp_path)
    assert found(store, "poetry lock") == [1]
    store.close()
    assert automerge() == 16


def test_a_question_finds_the_fact_in_a_long_output_among_many_items_of_common_words(tmp_path: Path) -> None:
    """Agents ask in sentences. The question's function words are left out, the items where its
    other words are near one another rank first (here the fact's sentence, not the logs that
    name the service and a port apart), and when only some words match, the rare ones rank
    rather than the newest of the hundreds of items holding "the" or "service"."""
    store = Store(tmp_path / "s.sqlite3", workspace=tmp_path)
    rng = random.Random(5)
    rows = []
    for n in range(300):
        rows.append(body(f"Step {n}: did the service work on the {rng.choice(['cache', 'queue', 'api'])} code?"))
        log = "\n".join(f"[billing] GET /api/{n}/{i} 200 in {i} ms; listening port {9000 + i}" if i % 7 == 0 else
                        f"INFO service {n}: connected to 10.0.0.{i}:{rng.randrange(1024, 65000)}" for i in range(60))
        rows.append(body(log, "assistant"))
    fact = 2 * 150 + 2  # the 150th log
    text = json.loads(rows[fact - 1][0])["content"][0]["text"].split("\n")
    text.insert(31, "The billing service listens on port 4521 in staging.")
    rows[fact - 1] = body("\n".join(text), "assistant")
    store.append("t", rows)
    assert search.query_terms("which port does the billing service listen on") == [
        '"port"', '"billing"', '"service"', '"listen"']
    assert search.query_terms("what is this") == ['"what"', '"is"', '"this"']
    assert fact in found(store, "which port does the billing service listen on")[:3]
    assert fact in found(store, "where is staging for billing")[:3]  # "all": staging billing
    assert fact in found(store, "when did billing start listening in staging on 4521")[:3]  # "start": all but one
    assert fact in found(store, "could you find the 4521 thing again")[:3]  # "any": 4521 is rare
    # Words no item holds are not rare ones: the 600 items holding "service" are shown, newest first.
    assert found(store, "service xyzzy plugh")[:2] == [600, 599]
    store.close()


def test_when_only_some_words_match_the_items_holding_more_of_them_come_first(tmp_path: Path) -> None:
    """No item holds all the words or all but one: the item holding two of them (a long log)
    ranks before short items holding one, which BM25 alone would put first."""
    store = Store(tmp_path / "s.sqlite3", workspace=tmp_path)
    rows = [body(f"port {n} is open") for n in range(5)] + [body(f"billing run {n} done") for n in range(5)]
    log = "\n".join(f"INFO worker {i}: step {i} took {i * 3} ms" for i in range(80))
    rows.append(body(log.replace("step 40 ", "billing step 40 ").replace("step 60 ", "port step 60 "), "assistant"))
    store.append("t", rows)
    assert found(store, "billing port zebra quokka")[0] == len(rows)
    store.close()


def test_queries_are_never_read_as_fts_syntax() -> None:
    assert search.query_terms('NEAR(a b) OR "x y" -z col:w getUserName') == [
        '"NEAR a"', '"b"', '"x y"', '"z"', '"col w"', '("getUserName" OR "get User Name")']
    assert search.query_terms('OR AND') == ['"OR"', '"AND"']  # nothing else: kept (and quoted)
    # A log pasted as a query: its first 16 distinct terms (a stage per term, each of them all).
    pasted = " ".join(f"word{n % 400}" for n in range(2000))
    assert search.query_terms(pasted) == [f'"word{n}"' for n in range(search.MAX_TERMS)]
    parts = search.identifier_parts("call getUserName and parseJSONValue2 at E1234")
    assert parts == "get User Name\nparse JSON Value 2"


def test_an_item_is_indexed_by_its_distinct_lines_in_their_order() -> None:
    """A text made of one block printed again and again is read by two comparisons rather than a
    split of every copy, and a text whose middle lines repeat is split and each line kept once:
    both give exactly the distinct lines of the whole text. Any other text gives every one of its
    lines, in their order, and no other."""
    rng = random.Random(29)
    lines = ["def f(x):", "    return x", "", "ok", "a b", "progress: 40% of the download", "warning: unused import"]
    deduplicated = 0
    for _ in range(3000):
        block = "\n".join(rng.choice(lines) for _ in range(rng.randrange(1, 5)))
        text = (block + "\n") * rng.randrange(1, 60) + rng.choice(["", "def", "ok\n", "tail line"])
        if rng.random() < 0.3:
            text = "".join(rng.choice("ab\n ") for _ in range(rng.randrange(40)))
        elif rng.random() < 0.3:
            text = "\n".join(rng.choice(lines) for _ in range(rng.randrange(120)))
        item = {"type": "function_call_output", "call_id": "c", "output": text}
        indexed = search.index_text(item)
        distinct = "\n".join(dict.fromkeys(text.split("\n")))
        if len(text) < search._SHORT_TEXT:
            assert indexed == text
        elif indexed == distinct:
            deduplicated += 1
        else:
            assert list(dict.fromkeys(indexed.split("\n"))) == list(dict.fromkeys(text.split("\n")))
    assert deduplicated > 500
    progress = "".join(f"step {n}: compiled crate_{n}\nprogress: 40% of the download\n" for n in range(50))
    assert search.index_text({"type": "function_call_output", "call_id": "c", "output": progress}).count("40%") == 1
    source = "".join(f"def f_{n}(x):\n    return x + {n}\n" for n in range(50))
    assert search.index_text({"type": "function_call_output", "call_id": "c", "output": source}) == source


def test_any_shape_of_item_gives_its_words() -> None:
    """An item's fields are whatever its source wrote: a tool name that is not a string is a word
    like any other (one that is a list used to raise TypeError)."""
    assert search.item_text({"type": "tool_use", "name": ["lint", "fix"], "input": {"path": "src/a.py"}}) == \
        "lint\nfix\nsrc/a.py"
    assert search.item_text({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"},
                                                                           {"type": "input_image"}]}) == "a"
    assert search.item_text({"type": "message", "role": "user", "content": [{"text": 3}]}) == ""
    assert search.item_text({"type": "reasoning", "summary": [{"type": "summary_text", "text": "plan"}],
                             "content": [{"type": "reasoning_text", "text": "think"}]}) == "plan\nthink"


def test_recalls_own_calls_are_not_indexed_however_the_agent_names_them() -> None:
    """Each agent names an MCP server's tool its own way (docs/agents-research.md): recall's own
    calls are left out for every one of them (issue #37: no agent's name in the ledger's rules)."""
    arguments = json.dumps({"query": "which port does the staging proxy use"})
    for name in ("mcp__ctxd__recall", "ctxd__recall", "mcp_ctxd_recall", "ctxd_recall", "mcp_ctxd_history_item",
                 "ctxd.recall", "mcp:ctxd/history_item"):  # (spellings of agents to come)
        assert search.item_text({"type": "function_call", "call_id": "c", "name": name, "arguments": arguments}) == ""
    for name in ("my_recall", "ctxdx_recall", "notctxd_recall_more", "recall"):
        assert "staging" in search.item_text({"type": "function_call", "call_id": "c", "name": name,
                                              "arguments": arguments})


def test_a_seq_once_given_keeps_naming_its_item(tmp_path: Path) -> None:
    """An item recorded while a compaction ran is moved after its summary; the seq a search gave
    for it before still reads it, after a second compaction and an operation putting items back."""
    store = Store(tmp_path / "s.sqlite3", workspace=tmp_path)
    store.append("t", [body("alpha falcon"), body("bravo heron", "assistant"), body("charlie osprey")])
    [given] = found(store, "osprey")
    assert given == 3

    def text(seq: int) -> str:
        return str(recall.item(store, "t", seq)["item"]["content"][0]["text"])

    store.replace("t", 2, [body("summary: falcons and herons")], {})  # 3 was recorded meanwhile
    store.replace("t", 4, [body("summary: all of it")], {})  # and again
    assert text(given) == "charlie osprey"
    [now] = found(store, "osprey")
    assert now != given and text(now) == "charlie osprey"
    assert recall.item(store, "t", given)["seq"] == now
    row = store.thread("t")
    store.operate("t", {"kind": "rollback"}, active=[1, 2, now], expected_version=row.history_version if row else 0)
    assert text(given) == "charlie osprey" and recall.item(store, "t", given)["archived"] is False
    store.close()


def test_a_mirrored_append_is_indexed_in_its_own_transaction(tmp_path: Path) -> None:
    """Rows appended with their parsed items are searchable with no catch-up (nothing is parsed
    again); rows after items still to index wait for the catch-up, which indexes them all."""
    path = tmp_path / "s.sqlite3"
    store = Store(path, workspace=tmp_path)
    rows = [body("alpha falcon"), body("bravo heron", "assistant")]
    store.append("m", rows, items=[json.loads(text) for text, _ in rows])

    def indexed(query: str, thread: str) -> list[int]:
        with store.reading() as db:
            tid = search.thread_id(db, thread)
            assert tid is not None
            return [rid & 0xFFFFFFFF for rid in search.search(db, search.query_terms(query), tid, 10)[0]]

    assert indexed("falcon", "m") == [1] and indexed("heron", "m") == [2]
    store.append("r", [body("charlie osprey")])  # a record: indexed by the next search
    more = [body("delta osprey")]
    store.append("r", more, items=[json.loads(text) for text, _ in more])
    with store.reading() as db:
        assert search.thread_id(db, "r") is None  # nothing indexed out of order
    assert sorted(found(store, "osprey", "r")) == [1, 2]
    check(path)
    store.close()


def _indexed_fingerprint() -> str:
    """What the index makes of a fixed set of items (their indexed text and camelCase parts)."""
    rng = random.Random(6)
    lines = ["def f(x):", "    return x", "", "}", "progress: 40% of the download", "warning: unused import os",
             "parseJSONValue(getUserName())", "tests/test_cache.py::test_cache_roundtrip PASSED", "E1234 at 0x7f"]
    digest = hashlib.sha256()
    for n in range(400):
        block = "\n".join(rng.choice(lines) for _ in range(rng.randrange(1, 6)))
        text = (block + "\n") * rng.randrange(1, 40) + "\n".join(rng.choice(lines) for _ in range(rng.randrange(60)))
        items = [{"type": "function_call_output", "call_id": f"c{n}", "output": text},
                 {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text[:300]}]}]
        for item in items:
            indexed = search.index_text(item)
            digest.update(indexed.encode("utf-8") + b"\0" + search.identifier_parts(indexed).encode("utf-8") + b"\0")
    return digest.hexdigest()[:16]


# What each INDEX_VERSION makes of `_indexed_fingerprint`'s items.
INDEXED_BY_VERSION = {"6": "15bb3b683558fd3c"}


def test_what_is_indexed_changes_only_with_the_index_version() -> None:
    """The index is contentless: deleting a row tells FTS5 the row's text again, computed by the
    running code. A store indexed by code that computed other text must be indexed again, which
    only a new INDEX_VERSION makes happen: a change to what is indexed without one fails here."""
    assert INDEXED_BY_VERSION.get(search.INDEX_VERSION) == _indexed_fingerprint(), (
        "what the index holds of an item changed: give search.INDEX_VERSION a new value and record "
        "the new fingerprint here")


class _Reads(list):  # type: ignore[type-arg]
    """A list that counts how often its elements are read."""

    reads = 0

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        _Reads.reads += 1
        return super().__getitem__(index)

    def __iter__(self):  # type: ignore[no-untyped-def]
        for value in super().__iter__():
            _Reads.reads += 1
            yield value


def test_the_snippet_window_reads_each_hit_a_few_times_whatever_the_query() -> None:
    """The snippet's window over the query's hits in an item: each hit read a bounded number of
    times (it compared every hit with every other: a 1,000-word query over a 70 KB item never
    finished); and a query's words beyond the first SNIPPET_WORDS distinct ones are not looked for."""
    rng = random.Random(3)
    reads = {}
    for count in (2_000, 8_000):
        hits = _Reads(sorted((rng.randrange(70_000), rng.randrange(32)) for _ in range(count)))
        _Reads.reads = 0
        recall.best_window(hits, 398)
        reads[count] = _Reads.reads
    assert reads[8_000] <= 8 * 8_000 and reads[8_000] <= 4.5 * reads[2_000], reads  # linear, not 16x
    pasted = " ".join(f"w{n}" for n in range(5_000))
    assert recall.snippet_words(pasted) == [f"w{n}" for n in range(recall.SNIPPET_WORDS)]


def test_a_query_runs_a_bounded_number_of_fts5_statements_whatever_its_length(tmp_path: Path) -> None:
    """However long the query (a log pasted whole, 100 KB), a search runs at most a fixed number
    of FTS5 statements: its words are probed up to a bound, and past MAX_SEARCHED terms only its
    rarest are searched, all of them or any."""
    store = Store(tmp_path / "s.sqlite3", workspace=tmp_path)
    lines = [f"[svc{i % 7}] GET /api/item/{i % 50} 200 in {i % 90} ms id=r{i:05d} user=u{i % 13}" for i in range(3000)]
    store.append("t", [body("\n".join(lines[k:k + 30]), "assistant") for k in range(0, 3000, 30)])
    recall.recall(store, "t", "warm up")
    statements: list[str] = []
    with store.reading() as db:
        db.set_trace_callback(lambda sql: statements.append(sql) if "recall_fts MATCH" in sql else None)
    try:
        counts = {}
        text = "\n".join(lines)
        for name, query in {"200 words": " ".join(text.split()[:200]), "1,000 words": " ".join(text.split()[:1000]),
                            "100 KB": text[:100_000]}.items():
            statements.clear()
            found = recall.recall(store, "t", query)
            assert found["results"] and found["total"] >= len(found["results"]), name
            counts[name] = len(statements)
    finally:
        with store.reading() as db:
            db.set_trace_callback(None)
    assert max(counts.values()) <= 2 * getattr(search, "PROBES", 24) + 12, counts  # (a rare word: counted, then read)
    store.close()


def test_a_quoted_phrase_holding_the_word_or_is_searched_as_its_words(tmp_path: Path) -> None:
    """A camelCase word's term is `("getUserName" OR "get User Name")`, and a term's phrases were
    its parts between ` OR `: the phrase `"cats OR dogs"` was cut into `"cats` and `dogs"`, and
    FTS5 failed on the quote left open (recall said the database was damaged)."""
    store = Store(tmp_path / "s.sqlite3", workspace=tmp_path)
    store.append("t", [body("cats or dogs are pets, said the vet"), body("cats or dogs: pets again"), body("nothing here"),
                       body("the getUserName helper or the pets store")])
    assert search.query_terms('"cats OR dogs" pets') == ['"cats OR dogs"', '"pets"']
    assert sorted(found(store, '"cats OR dogs" pets')) == [1, 2]
    assert found(store, "getUserName pets") == [4]
    store.close()
