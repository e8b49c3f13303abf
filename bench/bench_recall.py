"""Recall (`ctxd/recall`, issue #29): does it find what a compaction replaced, how fast, and what
the index costs.

- 60 planted facts, each queried with 2-3 words that are not its sentence, and asked as a question
  ("which port does the billing service listen on"), after a compaction: the fact's item in the
  top 3, per place (tool outputs, user messages, assistant text) and way of asking; goal >= 95%.
- `ctxd/recall` through the daemon on a 200k-item thread, p95; floor: the same queries on a plain
  SQLite FTS5 table of the same texts, in-process, p95; goal <= 3x, and the issue's <= 50 ms.
  Questions as an agent asks them: p95, the issue's <= 50 ms (no floor: a plain FTS5 query of
  their words finds nothing, where recall falls back to fewer words). Hostile queries (issue
  #36) over the same thread, whose last item is a 70 KB log: parts of the log pasted (200 and
  1,000 words), a long quoted part of it, one word repeated, every FTS5 operator, and 100 KB of
  it through `ctxd mcp`'s path (the daemon reads up to 10,000 characters): p95 of each kind, goal
  <= 50 ms and <= 4x the plain FTS5 floor (its keyword queries, one timed beside each hostile
  query); the log must come first (for the pasted and quoted parts of it) and `total` never be
  below the results.
- Indexing a 50 MB Codex rollout's items as the mirror appends them (CPU: the append with the
  index less the append without); floor: `json.loads` over the rollout's lines; goal <= 2x.
- The index's size against the text it indexes; goal <= 1.5x.
- `ctxd mcp` started to its `initialize` answer (median); floor: a bare `python -c pass`, timed
  to a line it prints; goal (issue #37) <= 3x the floor + 50 ms. A minimal server on the `mcp` SDK
  (one tool) and `import mcp` are printed beside it.

The facts' thread is recorded and compacted (offline) through the real daemon; the 200k-item
thread is written with the store's own append (as records write it), then searched through a
daemon started on it, after the warm-up searches that index it (in the background: its time is
printed).

    python bench/bench_recall.py [--items 200000] [--mb 50] [--queries 60] [--hostile 20] [--mcp-runs 5]
                                 [--only quality|indexing|source|speed|mcp ...] [--rounds 5]

`source` indexes a rollout whose tool outputs are windows of real source files; its ratios to
`json.loads` and to a bare FTS5 table of the same texts are printed without a goal (the issue's
goal is the shared rollout's, `bench_sessions.big_rollout`): there a bare FTS5 table of the same
text costs more than 2x `json.loads` by itself.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from bench_sessions import big_rollout  # noqa: E402
from table import Row, ms, report  # noqa: E402

from ctxd.ledger import recall as history  # noqa: E402
from ctxd.ledger import search  # noqa: E402
from ctxd.ledger.store import Store, database_path  # noqa: E402
from ctxd.sessions.codex import CodexReader  # noqa: E402
from tests import session_fixtures as fx  # noqa: E402
from tests.helpers import assistant, output, shell_call, user  # noqa: E402
from tests.rpc import start_daemon  # noqa: E402

PLACES = ("tool output", "user message", "assistant text")
# Each fact is looked for three ways; the third, a question about the conversation ("do you remember
# the error code when the billing deploy failed"), often has words the fact has not ("error code"):
# printed, with how often the fact's needle is in a top-3 snippet, and not judged.
ASKED = {"query": "keywords", "question": "questions", "chat": "questions about the conversation"}
JUDGED = ("query", "question")
# A search is a round trip to the daemon, a count and one to five FTS5 queries (ctxd/ledger/search.py's
# stages), and up to `limit` items read for their snippets; the floor is one FTS5 query in-process.
RATIO_GOAL = 3.0
# A hostile query (a pasted log, a quoted page, every operator) probes up to 24 words and runs a few
# FTS5 queries of its 6 rarest terms (ctxd/ledger/search.py): bounded, against one plain FTS5 query.
HOSTILE_RATIO_GOAL = 4.0
SLICE = 500  # items per append, as the mirror writes a session (ctxd/sessions/bridge.py's SLICE_ITEMS)




# --- quality ---------------------------------------------------------------------------------------

SERVICES = ["billing", "search", "metrics", "gateway", "scheduler", "thumbnailer", "notifier", "ledger",
            "auth", "webhook", "exporter", "indexer"]
MODULES = ["invoice", "session", "upload", "cache", "retry", "quota", "report", "profile", "tenant", "backup",
           "audit", "locale"]
LIBRARIES = [("httpx", "requests"), ("orjson", "ujson"), ("pydantic", "attrs"), ("structlog", "loguru"),
             ("polars", "pandas"), ("alembic", "yoyo"), ("tenacity", "backoff"), ("ruff", "flake8"),
             ("uv", "pip-tools"), ("msgspec", "marshmallow"), ("anyio", "trio"), ("pytest-xdist", "nose2")]


def facts() -> list[dict[str, Any]]:
    """60 facts of five kinds; each with its sentence, a query that shares two or three of its
    words (in other forms where English has them) but is not the sentence, and a question of the
    kind an agent asks `recall` ("which port does the billing service listen on")."""
    rng = random.Random(29)
    out = []
    for n in range(12):
        service, module = SERVICES[n], MODULES[n]
        lib, other = LIBRARIES[n]
        port = 3000 + rng.randrange(6000)
        code = f"E{rng.randrange(1000, 9999)}"
        out += [
            {"kind": "port", "text": f"The {service} service listens on port {port} in staging.",
             "query": f"{service} ports", "question": f"which port does the {service} service listen on",
             "chat": f"what did the user say about the {service} port earlier", "needle": str(port)},
            {"kind": "path", "text": f"The {module} settings live in config/{module}/{service}_settings.yaml.",
             "query": f"{module} setting yaml", "question": f"where are the {module} settings stored",
             "chat": f"where did we say the {module} settings file lives", "needle": f"{service}_settings.yaml"},
            {"kind": "flaky test", "text": f"tests/test_{module}.py::test_{module}_{service}_roundtrip is flaky: "
                                           "it times out about one run in ten on CI.",
             "query": f"flaky {module} roundtrip", "question": f"what test for {module} roundtrip was flaky on CI",
             "chat": f"remind me which flaky test in {module} we saw", "needle": f"test_{module}_{service}_roundtrip"},
            {"kind": "error code", "text": f"The {service} deploy failed with {code}: the {module} migration "
                                           "holds a lock.",
             "query": f"{code} deploy failing", "question": f"why did the deploy fail with {code}",
             "chat": f"do you remember the error code when the {service} deploy failed", "needle": code},
            {"kind": "decision", "text": f"We decided to use {lib} instead of {other} for the {module} code.",
             "query": f"decide {lib} {module}", "question": f"what library did we decide on for the {module} code",
             "chat": f"what was our decision about {lib}", "needle": f"use {lib} instead"},
        ]
    for n, fact in enumerate(out):
        fact["place"] = PLACES[n % 3]
    return out


def noise(rng: random.Random, n: int) -> str:
    """A build and test log of the kind that fills real tool outputs, with the same vocabulary."""
    lines = []
    for i in range(rng.randrange(40, 120)):
        service, module = rng.choice(SERVICES), rng.choice(MODULES)
        lines.append(rng.choice([
            f"PASSED tests/test_{module}.py::test_{module}_case_{i}",
            f"[{service}] GET /api/{module}/{i} 200 in {rng.randrange(2, 90)} ms",
            f"compiling {module}/{service}_{i}.py",
            f"warning: {module} deprecated option in config/{module}.yaml line {i}",
            f"INFO {service}: connected to 10.0.{n % 250}.{i % 250}:{rng.randrange(1024, 65000)}",
        ]))
    return "\n".join(lines)


def fact_thread(planted: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[int]]:
    """About 60 turns, one fact each, in its place; returns the items and each fact's item index."""
    rng = random.Random(7)
    items: list[dict[str, Any]] = []
    where = []
    for n, fact in enumerate(planted):
        asked = f"Step {n}: continue with the {rng.choice(MODULES)} work and run the checks."
        said = f"Done with step {n}; the checks pass."
        log = noise(rng, n)
        if fact["place"] == "user message":
            asked = f"{asked} Note: {fact['text']}"
        elif fact["place"] == "assistant text":
            said = f"{said} Also worth knowing: {fact['text']}"
        else:
            cut = rng.randrange(len(log))
            log = log[:cut] + "\n" + fact["text"] + "\n" + log[cut:]
        turn = [user(asked), shell_call(f"c{n}", "make check"), output(f"c{n}", log), assistant(said)]
        index = {"user message": 0, "tool output": 2, "assistant text": 3}[fact["place"]]
        where.append(len(items) + index + 1)  # seq: the store numbers a new thread's items from 1
        items += turn
    return items, where


def bench_quality(tmp: Path) -> list[Row]:
    ws = tmp / "ws-facts"
    ws.mkdir()
    client = start_daemon(tmp / "state-facts", env={"HOME": str(tmp)})
    try:
        client.initialize([ws])
        uri = ws.as_uri()
        planted = facts()
        items, where = fact_thread(planted)
        for start in range(0, len(items), 100):
            client.request("ctxd/record", {"workspace": uri, "items": items[start:start + 100]})
        compacted = client.request("ctxd/compact", {"workspace": uri, "strategy": "offline"})
        history_ = client.request("ctxd/history", {"workspace": uri, "includeArchived": True})
        archived = sum(1 for item in history_["items"] if item.get("archived"))
        hits: dict[tuple[str, str], list[bool]] = {(asked, place): [] for asked in ASKED for place in PLACES}
        seen: dict[str, int] = {asked: 0 for asked in ASKED}  # the needle in a top-3 snippet
        misses = []
        as_copy = 0
        for asked in ASKED:
            for fact, seq in zip(planted, where, strict=True):
                found = client.request("ctxd/recall", {"workspace": uri, "query": fact[asked], "limit": 3})
                top = [hit["seq"] for hit in found["results"]]
                seen[asked] += any(fact["needle"] in hit["snippet"] for hit in found["results"])
                # The compaction kept some items (written again after its summary): recall shows
                # such an item once, by its copy in the conversation, which is the fact's item too.
                copy = seq not in top and any(client.request("ctxd/item", {"workspace": uri, "seq": other})["item"]
                                              == items[seq - 1] for other in top)
                as_copy += copy
                ok = seq in top or copy
                hits[asked, fact["place"]].append(ok)
                if not ok and asked in JUDGED:
                    misses.append(f"{fact[asked]!r} ({fact['place']}): wanted seq {seq}, got {top}")
    finally:
        client.shutdown()
    print(f"1. {len(planted)} facts in a {len(items)}-item thread, compacted offline ({compacted['tokensBefore']} -> "
          f"{compacted['tokensAfter']} tokens, {archived} items archived); the fact's item in the top 3:")
    for asked in ASKED:
        for place in PLACES:
            print(f"   {place}, by {ASKED[asked]}: {sum(hits[asked, place])}/{len(hits[asked, place])}")
        print(f"   the needle in a top-3 snippet, by {ASKED[asked]}: {seen[asked]}/{len(planted)}")
    print(f"   ({as_copy} of them found as the copy the compaction kept in the conversation)")
    for miss in misses:
        print(f"   missed: {miss}")
    rows = []
    chat = [ok for place in PLACES for ok in hits["chat", place]]
    for asked in JUDGED:
        for place in PLACES:
            share = sum(hits[asked, place]) / len(hits[asked, place])
            rows.append(Row(f"recall: planted facts in top 3, {place}s, by {ASKED[asked]}", f"{share:.0%}", "-", "-",
                            ">= 95%", share >= 0.95))
        total = [ok for place in PLACES for ok in hits[asked, place]]
        share = sum(total) / len(total)
        rows.append(Row(f"recall: planted facts in top 3, all places, by {ASKED[asked]}", f"{share:.0%}", "-", "-",
                        ">= 95%", share >= 0.95))
    rows.append(Row(f"recall: planted facts in top 3, by {ASKED['chat']} (not judged)", f"{sum(chat) / len(chat):.0%}",
                    "-", "-", "-", True))
    return rows


# --- speed on a large thread ---------------------------------------------------------------------

VERBS = ["refactor", "fix", "test", "rename", "profile", "document", "migrate", "review"]


def big_thread(store: Store, items: int) -> list[str]:
    """A coding session of `items` items (five per turn), written as records write them; returns
    the texts, for the floor."""
    rng = random.Random(200)
    texts: list[str] = []
    rows: list[tuple[str, int]] = []
    n = 0
    while len(texts) < items:
        module, verb, service = rng.choice(MODULES), rng.choice(VERBS), rng.choice(SERVICES)
        turn = [
            user(f"{verb} the {module} code in {service} (task {n})"),
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": f"Look at {module}_{n}.py first"}]},
            shell_call(f"c{n}", f"pytest tests/test_{module}.py -k {verb}_{n}"),
            output(f"c{n}", noise(rng, n)[:rng.randrange(200, 1500)]),
            assistant(f"I did {verb} {module}_{n}.py; {service} tests pass."),
        ][: items - len(texts)]
        for item in turn:
            rows.append((json.dumps(item), 10))
            texts.append(search.item_text(item))
        if len(rows) >= 5000:
            store.append("big", rows)
            rows = []
        n += 1
    if rows:
        store.append("big", rows)
    return texts


def speed_queries(count: int) -> list[str]:
    """Keywords, as a person types them into a search box."""
    rng = random.Random(50)
    queries = []
    for _ in range(count):
        module, verb, service = rng.choice(MODULES), rng.choice(VERBS), rng.choice(SERVICES)
        queries.append(rng.choice([f"{verb} {module} {rng.randrange(40000)}", f"{module} {service} failing",
                                   f"\"{verb} the {module}\" {service}", f"{module}_{rng.randrange(40000)}.py",
                                   f"{service} timeout {module}"]))
    return queries


def speed_questions(count: int) -> list[str]:
    """Questions, as an agent asks `recall` through MCP: their words match far more items."""
    rng = random.Random(51)
    questions = []
    for _ in range(count):
        module, verb, service = rng.choice(MODULES), rng.choice(VERBS), rng.choice(SERVICES)
        questions.append(rng.choice([f"which {module} test failed when we ran {service} in task {rng.randrange(40000)}",
                                     f"what did you {verb} in {module} for {service}",
                                     f"where is the {module} code of the {service} service"]))
    return questions


def p95(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=20)[-1]


# --- hostile queries (issue #36) -------------------------------------------------------------------

HOSTILE_KINDS = ("a pasted log, 200 words", "a pasted log, 1,000 words", "a long quoted phrase",
                 "a word repeated", "every FTS5 operator", "100 KB of text (ctxd mcp's path)")
DAEMON_QUERY_CHARS = 10_000  # the daemon reads queries of up to this many characters (ctxd/protocol/params.py)


def pasted_log() -> str:
    """A 70 KB build and service log, the thread's last tool output: what an agent pastes back."""
    rng = random.Random(36)
    return "\n".join(noise(rng, n) for n in range(400))[:70_000]


def hostile_queries(log: str, count: int) -> dict[str, list[str]]:
    """`count` queries of each kind of HOSTILE_KINDS, each from another place in the log."""
    rng = random.Random(37)
    words = log.split()

    def cut(text: str, chars: int = DAEMON_QUERY_CHARS) -> str:
        return text if len(text) <= chars else text[:text.rindex(" ", 0, chars)]

    def at(n: int) -> int:
        return rng.randrange(len(words) - n)

    operators = '"*^:()-+{}[],.<>!=\'\\/?&|~`@#$%;'
    out: dict[str, list[str]] = {kind: [] for kind in HOSTILE_KINDS}
    for _ in range(count):
        a, b, c = at(200), at(1000), at(300)
        out[HOSTILE_KINDS[0]].append(" ".join(words[a:a + 200]))
        out[HOSTILE_KINDS[1]].append(cut(" ".join(words[b:b + 1000])))
        out[HOSTILE_KINDS[2]].append('"' + cut(" ".join(words[c:c + rng.randrange(20, 300)]), 9_000) + '"')
        out[HOSTILE_KINDS[3]].append(cut(" ".join([rng.choice(words)] * 2_000)))
        out[HOSTILE_KINDS[4]].append(cut(" ".join(o * rng.randrange(1, 4) + rng.choice(words) + o for o in operators)
                                         + " NEAR( AND OR NOT " + operators * 200))
        start = rng.randrange(len(log) // 2)
        out[HOSTILE_KINDS[5]].append((log[start:] + log)[:100_000])
    return out


def warm(client: Any, uri: str, thread: str) -> float:
    """Index the thread: the first search indexes it, in the background past 20,000 items
    (`ctxd/ledger/recall.py`), answering 1003 meanwhile. Returns the seconds it took."""
    from tests.rpc import RpcError

    started = time.perf_counter()
    while True:
        try:
            client.request("ctxd/recall", {"workspace": uri, "thread": thread, "query": "warm up"}, timeout=600)
            return time.perf_counter() - started
        except RpcError as error:
            if error.code != 1003 or "being built" not in error.message:
                raise
            time.sleep(0.2)


def bench_speed(tmp: Path, items: int, count: int, hostile: int) -> list[Row]:
    ws = tmp / "ws-big"
    ws.mkdir()
    state = tmp / "state-big"
    store = Store(database_path(state / "ctxd", ws), workspace=ws)
    texts = big_thread(store, items)
    log = pasted_log()
    store.append("big", [(json.dumps(output("pasted", log)), 10)])
    texts.append(log)
    queries = speed_queries(count)
    questions = speed_questions(count // 2)
    attacks = hostile_queries(log, hostile)
    # The floor: the same texts in a plain FTS5 table, queried in-process.
    floor_db = sqlite3.connect(tmp / "floor.sqlite3")
    floor_db.execute("CREATE VIRTUAL TABLE f USING fts5(text, tokenize='porter unicode61')")
    floor_db.executemany("INSERT INTO f (rowid, text) VALUES (?, ?)", enumerate(texts, 1))
    floor_db.commit()
    client = start_daemon(state, env={"HOME": str(tmp)})
    hostile_times: dict[str, list[float]] = {kind: [] for kind in HOSTILE_KINDS}
    hostile_floor: list[float] = []  # the plain FTS5 queries timed in turns with the hostile ones
    misses: list[str] = []
    try:
        client.initialize([ws])
        uri = ws.as_uri()
        warmed = warm(client, uri, "big")
        store.close()
        store = Store(database_path(state / "ctxd", ws), workspace=ws)  # ctxd mcp's own connection
        ours, floor, asked = [], [], []
        for _ in range(2):
            for query in queries:
                started = time.perf_counter()
                found = client.request("ctxd/recall", {"workspace": uri, "thread": "big", "query": query})
                ours.append(time.perf_counter() - started)
                terms = search.query_terms(query)
                started = time.perf_counter()
                plain = floor_db.execute("SELECT rowid FROM f WHERE f MATCH ? ORDER BY rank LIMIT 10",
                                         (" AND ".join(terms),)).fetchall()
                floor.append(time.perf_counter() - started)
                assert found["results"] or not plain, query
            for question in questions:
                started = time.perf_counter()
                found = client.request("ctxd/recall", {"workspace": uri, "thread": "big", "query": question})
                asked.append(time.perf_counter() - started)
                assert found["results"], question
            # Hostile queries, in turns with the rest: through the daemon, and 100 KB (over the
            # daemon's bound) as `ctxd mcp` answers it, from the store in its own process.
            for n in range(hostile):
                for k, kind in enumerate(HOSTILE_KINDS):
                    # The floor again, beside each: a loaded machine's speed drifts between sections.
                    plain_terms = search.query_terms(queries[(n * len(HOSTILE_KINDS) + k) % len(queries)])
                    started = time.perf_counter()
                    floor_db.execute("SELECT rowid FROM f WHERE f MATCH ? ORDER BY rank LIMIT 10",
                                     (" AND ".join(plain_terms),)).fetchall()
                    hostile_floor.append(time.perf_counter() - started)
                    query = attacks[kind][n]
                    started = time.perf_counter()
                    if kind == HOSTILE_KINDS[-1]:
                        found = history.recall(store, "big", query, 5)
                    else:
                        found = client.request("ctxd/recall", {"workspace": uri, "thread": "big", "query": query})
                    hostile_times[kind].append(time.perf_counter() - started)
                    if found["total"] < len(found["results"]):
                        misses.append(f"{kind}: total {found['total']} below {len(found['results'])} results")
                    # (A word repeated, or operators around a few words, is a short query: BM25 ranks.)
                    if kind not in HOSTILE_KINDS[3:5] and (not found["results"] or found["results"][0]["seq"] != items + 1):
                        misses.append(f"{kind}: the log is not the first result: {query[:60]!r}")
    finally:
        client.shutdown()
        store.close()
    ratio = p95(ours) / p95(floor)
    print(f"2. {items} items: the first search indexed them in {warmed:.1f} s; {len(ours)} searches by keywords: "
          f"ctxd/recall p95 {ms(p95(ours))} (median {ms(statistics.median(ours))}); a plain FTS5 query p95 "
          f"{ms(p95(floor))}; ratio {ratio:.1f}. {len(asked)} questions: p95 {ms(p95(asked))} (median "
          f"{ms(statistics.median(asked))})")
    print(f"   hostile queries, {hostile} of each kind (slowest: "
          + "; ".join(f"{kind} {ms(max(times))}" for kind, times in hostile_times.items()) + ")")
    for miss in misses[:10]:
        print(f"   {miss}")
    rows = [Row(f"ctxd/recall p95, {items // 1000}k-item thread", ms(p95(ours)), f"{ms(p95(floor))} (plain FTS5)",
                f"{ratio:.1f}x", f"<= {RATIO_GOAL:g}x", ratio <= RATIO_GOAL),
            Row(f"ctxd/recall p95, {items // 1000}k-item thread (the issue's absolute goal)", ms(p95(ours)), "-", "-",
                "<= 50 ms", p95(ours) <= 0.050),
            Row(f"ctxd/recall p95, {items // 1000}k-item thread, questions (the issue's absolute goal)",
                ms(p95(asked)), "-", "-", "<= 50 ms", p95(asked) <= 0.050)]
    for kind, times in hostile_times.items():
        hostile_ratio = p95(times) / p95(hostile_floor)
        rows.append(Row(f"ctxd/recall p95, {items // 1000}k items, hostile: {kind}", ms(p95(times)),
                        f"{ms(p95(hostile_floor))} (plain FTS5, in turns)", f"{hostile_ratio:.1f}x",
                        f"<= 50 ms, <= {HOSTILE_RATIO_GOAL:g}x", p95(times) <= 0.050 and hostile_ratio <= HOSTILE_RATIO_GOAL))
    rows.append(Row("recall, hostile queries: the log first, total never below the results",
                    f"{len(misses)} misses", "-", "-", "0", not misses))
    return rows


# --- indexing cost and size ----------------------------------------------------------------------

def source_windows() -> Iterator[tuple[str, int, str]]:
    """200-line windows of the Python standard library's own modules, in name order, again and
    again: real source text, the same for a given Python."""
    root = Path(sysconfig.get_paths()["stdlib"])
    paths = sorted(root.glob("*.py"))
    while True:
        for path in paths:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
            for at in range(0, len(lines), 200):
                yield path.name, at, "".join(lines[at:at + 200])


def source_rollout(path: Path, megabytes: int, cwd: Path) -> int:
    """`big_rollout`'s turns, but each tool output is a window of a real source file, as an agent
    reading files gets (`source_windows`): dense text whose lines seldom repeat."""
    target = megabytes * 1024 * 1024
    size = n = 0
    windows = source_windows()
    with path.open("wb") as f:
        for record in fx.codex_session(cwd):
            f.write(json.dumps(record).encode() + b"\n")
        while size < target:
            ts = f"2025-10-03T11:{(n // 60) % 60:02d}:{n % 60:02d}.000Z"
            batch = fx.codex_turn(f"step {n}: refactor module_{n}.py", ts)
            for k in range(4):
                name, at, text = next(windows)
                batch += fx.codex_tool_round(f"call_{n}_{k}", f"sed -n {at + 1},{at + 200}p {name}", text, ts)
            batch.append(fx.codex_answer(f"Refactored module_{n}.py.", ts))
            data = b"".join(json.dumps(record).encode() + b"\n" for record in batch)
            f.write(data)
            size += len(data)
            n += 1
    return path.stat().st_size


def bench_indexing(tmp: Path, megabytes: int, source: bool = False, rounds: int = 3) -> list[Row]:
    """The mirror's path: a followed rollout's items, parsed once by its reader, appended in
    slices with the index written in the same transactions; its cost is that append's CPU less
    the same append without the index. The three are timed slice by slice in turn (the slice's
    share of the lines through `json.loads`, the append without the index, the append with it),
    so that a machine whose speed drifts during a round slows all three alike; each round gives a
    ratio and the median counts. Printed too: the part of the cost that is the items' text
    (`search.index_text` and the camelCase parts alone), and the rebuild (a store without the
    index, indexed by a search: each item parsed again). `source`: the rollout's tool outputs are
    source files (`source_rollout`) rather than one function printed again and again.

    The floor that does not share the cost is `json.loads` (the issue's goal: <= 2x on the shared
    rollout). On source files, a bare FTS5 table alone costs more than that, so what ctxd adds is
    printed there (no goal): its cost over the same texts inserted into a bare FTS5 table of the
    index's settings, in the same slices."""
    path = tmp / "rollout-big.jsonl"
    size = (source_rollout if source else big_rollout)(path, megabytes, tmp)
    lines = [line for line in path.read_bytes().split(b"\n") if line]
    reader = CodexReader(str(path))
    reader.read()
    items = reader.session.items
    bodies = [(json.dumps(item), 1) for item in items]
    starts = range(0, len(bodies), SLICE)
    line_slices = [lines[len(lines) * i // len(starts):len(lines) * (i + 1) // len(starts)] for i in range(len(starts))]
    index_texts = [search.index_text(item) for item in items]
    texts_of = [(text, search.identifier_parts(text)) for text in index_texts]
    clock = time.process_time
    ratios: list[float] = []
    rounds_seen: list[tuple[float, float, float, float, float]] = []  # floor, with, without, text, bare FTS5
    rebuild: list[float] = []
    text_bytes = index_bytes = 0
    for round_ in range(rounds):
        stores = {indexed: Store(tmp / f"index-{round_}-{indexed}" / "s.sqlite3", workspace=tmp / f"index-{round_}-{indexed}")
                  for indexed in (False, True)}
        bare = sqlite3.connect(tmp / f"bare-{round_}.sqlite3", isolation_level=None)
        bare.execute("PRAGMA journal_mode = WAL")
        bare.execute("PRAGMA synchronous = NORMAL")
        bare.execute(search.FTS_TABLE.replace("recall_fts", "bare"))
        bare.execute("INSERT INTO bare (bare, rank) VALUES ('automerge', ?)", (search.AUTOMERGE,))
        floor = plain = ours = texts = fts = 0.0
        for first, chunk in zip(starts, line_slices):
            start = clock()
            for line in chunk:
                json.loads(line)
            floor += clock() - start
            start = clock()
            stores[False].append("rollout", bodies[first:first + SLICE])
            plain += clock() - start
            start = clock()
            stores[True].append("rollout", bodies[first:first + SLICE], items=items[first:first + SLICE])
            ours += clock() - start
            start = clock()
            for item in items[first:first + SLICE]:
                search.identifier_parts(search.index_text(item))
            texts += clock() - start
            start = clock()
            bare.execute("BEGIN")
            bare.executemany("INSERT INTO bare (rowid, text, parts) VALUES (?, ?, ?)",
                             [(first + i + 1, *pair) for i, pair in enumerate(texts_of[first:first + SLICE])])
            bare.execute("COMMIT")
            fts += clock() - start
        bare.close()
        ratios.append((ours - plain) / floor)
        rounds_seen.append((floor, ours, plain, texts, fts))
        with stores[True].reading() as db:
            assert not search.behind(db), "the mirror's appends left items to index"
            text_bytes = sum(len(search.item_text(item).encode()) for item in items)
            index_bytes = _index_bytes(db)
        start = clock()
        history.catch_up(stores[False])
        rebuild.append(clock() - start)
        for store in stores.values():
            store.close()
    ratio = statistics.median(ratios)
    floor, ours, plain, texts, fts = rounds_seen[ratios.index(sorted(ratios)[(len(ratios) - 1) // 2])]
    cost = ours - plain
    size_ratio = index_bytes / text_bytes
    kind = "rollout (tool outputs: source files)" if source else "rollout"
    print(f"3. indexing a {size / 1e6:.1f} MB {kind}'s {len(bodies)} items as the mirror appends them, the "
          f"median of {rounds} rounds: {cost:.2f} s CPU ({ours:.2f} s appending with the index, {plain:.2f} s without; "
          f"of the cost, the items' text {texts:.2f} s, FTS5 and the rest {cost - texts:.2f} s); json.loads over its "
          f"lines {floor:.2f} s; ratio {ratio:.2f} (each round: {', '.join(f'{r:.2f}' for r in ratios)}). "
          f"The same texts in a bare FTS5 table of the same settings, in the same slices: {fts:.2f} s "
          f"({fts / floor:.2f}x json.loads; ctxd {cost / fts:.2f}x it). "
          f"Rebuilt from the store (each item parsed again): {min(rebuild):.2f} s ({min(rebuild) / floor:.2f}x). "
          f"Index {index_bytes / 1e6:.1f} MB for {text_bytes / 1e6:.1f} MB of text ({size_ratio:.2f}x)")
    name = f"index a {size / 1e6:.0f} MB Codex rollout{' of source files' if source else ''} as mirrored (CPU)"
    if source:  # text FTS5 alone costs more than 2x json.loads for: shown, with what ctxd adds to FTS5
        rows = [Row(name, ms(cost), ms(floor) + " json.loads", f"{ratio:.2f}x", "-", True),
                Row(f"{name}, over FTS5 itself", ms(cost), ms(fts) + " bare FTS5", f"{cost / fts:.2f}x", "-", True)]
    else:
        rows = [Row(name, ms(cost), ms(floor) + " json.loads", f"{ratio:.2f}x", "<= 2x", ratio <= 2.0)]
    return [*rows,
            Row("recall index size", f"{index_bytes / 1e6:.1f} MB", f"{text_bytes / 1e6:.1f} MB text",
                f"{size_ratio:.2f}x", "<= 1.5x", size_ratio <= 1.5)]


def _index_bytes(db: sqlite3.Connection) -> int:
    """The pages of the index's tables (dbstat when SQLite has it, else the rows' payload)."""
    names = [name for (name,) in db.execute(
        "SELECT name FROM sqlite_master WHERE name LIKE 'recall_%' AND type IN ('table', 'index')")]
    try:
        return int(db.execute(f"SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name IN "
                              f"({', '.join('?' * len(names))})", names).fetchone()[0])
    except sqlite3.Error:
        total = 0
        for table in ("recall_fts_data", "recall_fts_idx", "recall_fts_docsize"):
            row = db.execute(f"SELECT sum(length(CAST(block AS BLOB))) FROM {table}" if table.endswith("data")
                             else f"SELECT count(*) * 24 FROM {table}").fetchone()
            total += int(row[0] or 0)
        return total


# --- ctxd mcp's start ------------------------------------------------------------------------------

MCP_GOAL = (3.0, 0.050)  # <= 3x a bare Python's start + 50 ms (issue #37)
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "bench", "version": "1"}}}


MINIMAL_SERVER = """
from mcp.server.mcpserver import MCPServer

server = MCPServer("minimal")


@server.tool(description="Answers pong.")
def ping() -> str:
    return "pong"


server.run("stdio")
"""


def bench_mcp_start(tmp: Path, runs: int) -> list[Row]:
    """`ctxd mcp` started as an agent starts it, timed to its answer to `initialize`, against a bare
    Python timed to a line it prints. Printed beside: a minimal server on the `mcp` SDK and one
    importing `mcp` (not to its exit, which tears the SDK's models down). Medians, the commands
    taken in turns."""
    ws = tmp / "ws-mcp"
    ws.mkdir()
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    minimal = tmp / "minimal_mcp_server.py"
    minimal.write_text(MINIMAL_SERVER)
    env = {**os.environ, "HOME": str(tmp), "XDG_STATE_HOME": str(tmp / "state-mcp"), "PYTHONPATH": str(HERE.parent)}
    line = (json.dumps(INITIALIZE) + "\n").encode()

    def server(command: list[str]) -> float:
        started = time.perf_counter()
        proc = subprocess.Popen(command, cwd=ws, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(line)
        proc.stdin.flush()
        answer = proc.stdout.readline()
        took = time.perf_counter() - started
        assert b'"result"' in answer, answer
        proc.stdin.close()
        proc.wait(60)
        return took

    def python(code: str) -> float:
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", code + "; print('ready', flush=True)"], env=env,
                                stdout=subprocess.PIPE)
        assert proc.stdout is not None
        answer = proc.stdout.readline()
        took = time.perf_counter() - started
        assert answer.strip() == b"ready", answer
        proc.wait(60)
        return took

    bare: list[float] = []
    sdk: list[float] = []
    floor: list[float] = []
    ours: list[float] = []
    for _ in range(runs):
        bare.append(python("import sys"))
        sdk.append(python("import mcp"))
        floor.append(server([sys.executable, str(minimal)]))
        ours.append(server([sys.executable, "-m", "ctxd", "mcp"]))
    median = statistics.median
    times, plus = MCP_GOAL
    goal = times * median(bare) + plus
    ratio = median(ours) / median(bare)
    print(f"4. to the initialize answer: ctxd mcp {ms(median(ours))}, a bare python {ms(median(bare))} "
          f"({ratio:.2f}x); a minimal server on the mcp SDK {ms(median(floor))}; python -c 'import mcp' "
          f"{ms(median(sdk))} (medians of {runs})")
    return [Row("ctxd mcp: start to the initialize answer", ms(median(ours)), f"{ms(median(bare))} (python -c pass)",
                f"{ratio:.2f}x", f"<= {times:g}x + {plus * 1000:.0f} ms ({ms(goal)})", median(ours) <= goal)]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--mb", type=int, default=50)
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--hostile", type=int, default=20, help="queries of each hostile kind")
    parser.add_argument("--mcp-runs", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5,
                        help="indexing: rounds of the appends (the median round counts)")
    parser.add_argument("--only", action="append", choices=SECTIONS,
                        help="run this section only (repeatable); default: all")
    args = parser.parse_args(argv)
    sections = args.only or SECTIONS
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="ctxd-bench-recall-") as name:
        tmp = Path(name)
        if "quality" in sections:
            rows += bench_quality(tmp)
        if "indexing" in sections:
            rows += bench_indexing(tmp, args.mb, rounds=args.rounds)
        if "source" in sections:
            (tmp / "source").mkdir()
            rows += bench_indexing(tmp / "source", args.mb, source=True, rounds=args.rounds)
        if "speed" in sections:
            rows += bench_speed(tmp, args.items, args.queries, args.hostile)
        if "mcp" in sections:
            rows += bench_mcp_start(tmp, args.mcp_runs)
    return report(rows)


SECTIONS = ("quality", "indexing", "source", "speed", "mcp")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
