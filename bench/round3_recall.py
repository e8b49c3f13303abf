"""A storm of issue #36's attacks on recall, against a real daemon: hostile queries and damaged
recall indexes.

A workspace's thread holds tool outputs with planted facts (an offline compaction masks them:
placeholders in the conversation) and a 70 KB log. Each cycle asks hostile queries in turn (a
part of the log pasted, of 200 and 1,000 words; a long quoted part; one word repeated; every
FTS5 operator; random punctuation and symbols; only function words) and a planted fact; every
third cycle damages the index (a plain table in place of the FTS5 table, FTS5's config table
dropped, its structure record zeroed), while the daemon runs or with it stopped, then records,
reads the history and the gauge, and searches again.

Counts: answers over SLOW_SECONDS, errors (any error answer to a query or a ledger request),
totals below the number of results, placeholders returned without the output they stand for,
searches that did not find their fact after a damage, and an index not whole at the end. Goal:
every count is 0.

    recall_storm(root, cycles) -> dict      recall_failed(report) -> list[str]

`python bench/stress.py --only recall` runs it among the storms; alone: `python
bench/round3_recall.py [--cycles 30]`.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import string
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ctxd.ledger.store import database_path  # noqa: E402
from tests.helpers import output, shell_call, user  # noqa: E402
from tests.rpc import RpcError, start_daemon  # noqa: E402
from tests.test_recall import build_log, planted_outputs  # noqa: E402
from tests.test_recall_damage import DAMAGES, damage  # noqa: E402

SLOW_SECONDS = 1.0
QUERY_CHARS = 10_000  # the daemon reads queries of up to this many characters
COUNTS = ("slow", "errors", "totals_below_results", "placeholders_without_output", "facts_lost", "index_left_damaged")


def _cut(text: str) -> str:
    return text if len(text) <= QUERY_CHARS else text[:text.rindex(" ", 0, QUERY_CHARS)]


def hostile_queries(log: str, rng: random.Random) -> list[str]:
    """One query of each hostile kind, each from another place in the log."""
    words = log.split()

    def part(count: int) -> str:
        start = rng.randrange(len(words) - count)
        return " ".join(words[start:start + count])

    operators = '"*^:()-+{}[],.<>!=\'\\/?&|~`@#$%;'
    noise = "".join(rng.choice(string.punctuation + " \t\n" + "ñ漢🙂\u200b") for _ in range(3_000))
    return [part(200), _cut(part(1_000)), '"' + _cut(part(rng.randrange(50, 400)))[:9_000] + '"',
            _cut(" ".join([rng.choice(words)] * 3_000)),
            _cut(" ".join(o + rng.choice(words) + o for o in operators) + " NEAR( AND OR NOT " + operators * 100),
            noise + " " + rng.choice(words), " ".join(["the", "which", "of", "what", "does"] * 200)]


def recall_storm(root: Path, cycles: int) -> dict[str, Any]:
    workspace, state = root / "ws", root / "state"
    workspace.mkdir(parents=True, exist_ok=True)  # (bench/stress.py makes it)
    rng = random.Random(36)
    log = build_log(900)
    items, tickets = planted_outputs(20)
    figures: dict[str, Any] = {"cycles": 0, "queries": 0, "damages": 0, "slowest_seconds": 0.0,
                               **{name: 0 for name in COUNTS}}
    problems: list[str] = []
    client = start_daemon(state)

    def ask(method: str, **params: Any) -> Any:
        started = time.perf_counter()
        try:
            return client.request(method, {"workspace": workspace.as_uri(), **params}, timeout=60)
        except (RpcError, TimeoutError) as error:
            figures["errors"] += 1
            problems.append(f"{method}: {error}"[:200])
            return None
        finally:
            took = time.perf_counter() - started
            figures["slowest_seconds"] = max(figures["slowest_seconds"], took)
            if took > SLOW_SECONDS and method == "ctxd/recall":
                figures["slow"] += 1

    def search(query: str, limit: int = 10) -> Any:
        found = ask("ctxd/recall", query=query, limit=limit)
        figures["queries"] += 1
        if found is not None:
            if found["total"] < len(found["results"]):
                figures["totals_below_results"] += 1
            figures["placeholders_without_output"] += sum(hit["snippet"].startswith("[output of `")
                                                          for hit in found["results"])
        return found

    try:
        client.initialize([workspace], {"toolOutputTokenLimit": 100_000})
        ask("ctxd/record", items=items)
        ask("ctxd/compact", strategy="offline")
        ask("ctxd/record", items=[shell_call("log", "tail -n 900 app.log"), output("log", log)])
        path = database_path(state / "ctxd", workspace)
        for cycle in range(cycles):
            for query in hostile_queries(log, rng):
                search(query)
            n = rng.randrange(len(tickets))
            found = search(f"{tickets[n]} replica", limit=3)
            # The output itself (archived, or the copy a compaction kept), never only its placeholder.
            if found is not None and not any(hit["type"] == "function_call_output" and tickets[n] in hit["snippet"]
                                             and not hit["snippet"].startswith("[output of `")
                                             for hit in found["results"]):
                figures["facts_lost"] += 1
                problems.append(f"cycle {cycle}: {tickets[n]} not found as its output: {found}"[:300])
            if cycle % 3 == 2:
                kind = list(DAMAGES)[(cycle // 3) % len(DAMAGES)]
                if cycle % 2:  # with the daemon stopped
                    client.shutdown()
                    damage(path, kind)
                    client = start_daemon(state)
                    client.initialize([workspace], {"toolOutputTokenLimit": 100_000})
                else:
                    damage(path, kind)
                figures["damages"] += 1
                ask("ctxd/record", items=[user(f"cycle {cycle}: the damage was {kind}")])
                ask("ctxd/history")
                ask("ctxd/usage")
                found = search(f"cycle {cycle} damage")
                if found is not None and not found["results"]:
                    figures["facts_lost"] += 1
                    problems.append(f"cycle {cycle}: nothing found after the damage {kind}")
            figures["cycles"] += 1
        try:  # whole again at the end
            with sqlite3.connect(path) as db:
                db.execute("INSERT INTO recall_fts (recall_fts) VALUES ('integrity-check')")
        except sqlite3.Error as error:
            figures["index_left_damaged"] += 1
            problems.append(f"the index at the end: {error}")
    finally:
        client.shutdown()
    figures["problems"] = problems[:10]
    return figures


def recall_failed(report: dict[str, Any]) -> list[str]:
    """The counts of the storm (`report`, or `report["recall"]` in bench/stress.py's report) that
    are not 0."""
    figures = report.get("recall", report)
    if not figures or "cycles" not in figures:
        return []
    return [f"recall ({name}: {figures[name]})" for name in COUNTS if figures[name]]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=30)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ctxd-round3-recall-") as name:
        report = recall_storm(Path(name), args.cycles)
    print(json.dumps(report, indent=2))
    failed = recall_failed(report)
    print("failed: " + ", ".join(failed) if failed else "every count is 0")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
