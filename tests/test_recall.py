"""`ctxd/recall` and `ctxd/item` through the real daemon (protocol v3, "Recall"): the whole history
is searchable, compacted parts and followed sessions included, the index is kept in step by every
write (kill -9 included) and rebuilt when a store has none."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from ctxd.ledger.store import database_path
from tests import session_fixtures as fx
from tests.helpers import assistant, output, shell_call, user
from tests.rpc import Client, RpcError

KEY = "sk-test-0123456789abcdefTOPSECRET"




def filler(n: int) -> str:
    return "\n".join(f"line {i} of build log {n}: compiling module_{i} ok" for i in range(300))


def long_thread() -> list[dict[str, Any]]:
    """Six turns with long tool outputs (an offline compaction masks them); one fact in each place."""
    items: list[dict[str, Any]] = [
        user("The staging proxy must listen on port 8443, not 8080; remember that."),
        shell_call("c1", "pytest tests/test_auth.py"),
        output("c1", filler(1) + "\nFAILED tests/test_auth.py::testRefreshTokenExpiry - AssertionError\n" + filler(2)),
        assistant("We decided to pin cryptography below 44 because the wheel breaks on musl."),
    ]
    for n in range(2, 7):
        items += [user(f"Step {n}: keep going with the refactor"), shell_call(f"c{n}", f"make step{n}"),
                  output(f"c{n}", filler(n * 10)), assistant(f"Step {n} done.")]
    return items


def req(client: Client, method: str, ws: Path, **params: Any) -> Any:
    return client.request(method, {"workspace": ws.as_uri(), **params})


def seqs(result: dict[str, Any]) -> list[tuple[str, int]]:
    return [(hit["thread"], hit["seq"]) for hit in result["results"]]


def test_recall_finds_what_a_compaction_replaced_and_item_reads_it_whole(client: Client, workspace: Path) -> None:
    items = long_thread()
    req(client, "ctxd/record", workspace, items=items)
    req(client, "ctxd/record", workspace, thread="other", items=[user("Unrelated: the flaky test is testRefreshTokenExpiry")])
    before = req(client, "ctxd/recall", workspace, query="refresh token expiry")
    assert before["results"][0]["seq"] == 3 and before["results"][0]["archived"] is False

    compacted = req(client, "ctxd/compact", workspace, strategy="offline")
    assert compacted["tokensAfter"] < compacted["tokensBefore"]
    # Stemmed ("failing" finds "FAILED"), camelCase parts ("refresh token"), paths by their parts.
    found = req(client, "ctxd/recall", workspace, query="failing refresh token")
    top = next(hit for hit in found["results"] if hit["seq"] == 3)  # (the summary may quote the failure too)
    assert (top["thread"], top["type"], top["archived"]) == ("default", "function_call_output", True)
    assert "testRefreshTokenExpiry" in top["snippet"] and len(top["snippet"]) <= 400
    assert top["turn"] == {"index": 1, "text": "The staging proxy must listen on port 8443, not 8080; remember that."}
    assert found["total"] >= 1
    whole = req(client, "ctxd/item", workspace, seq=3)
    assert whole == {"item": items[2], "archived": True, "seq": 3}

    # The compaction kept the user message (a copy after its summary): it is found once, as the
    # copy the model still sees; the summary may carry the fact too.
    port = req(client, "ctxd/recall", workspace, query="staging port", limit=2)["results"]
    said = [hit for hit in port if hit["snippet"] == items[0]["content"][0]["text"]]
    assert len(said) == 1 and said[0]["seq"] > 1 and said[0]["archived"] is False, port
    assert req(client, "ctxd/item", workspace, seq=said[0]["seq"])["item"] == items[0]
    decision = {h["seq"]: h for h in req(client, "ctxd/recall", workspace, query='"pin cryptography" musl', limit=2)["results"]}
    assert decision[4]["role"] == "assistant"
    path = req(client, "ctxd/recall", workspace, query="test_auth.py")
    assert {s for _, s in seqs(path)} >= {2, 3}
    # The thread's scope stays in the thread; the workspace's covers every thread.
    assert "other" not in {t for t, _ in seqs(req(client, "ctxd/recall", workspace, query="testRefreshTokenExpiry"))}
    wide = req(client, "ctxd/recall", workspace, query="testRefreshTokenExpiry", scope="workspace")
    assert {t for t, _ in seqs(wide)} == {"default", "other"}
    assert req(client, "ctxd/recall", workspace, query="zebra quokka")["results"] == []
    limited = req(client, "ctxd/recall", workspace, query="step", limit=2)
    assert len(limited["results"]) == 2 and limited["total"] > 2


@pytest.mark.parametrize(("method", "params", "field"), [
    ("ctxd/recall", {"query": ""}, "query"),
    ("ctxd/recall", {"query": "!!! ---"}, "query"),
    ("ctxd/recall", {"query": "x", "limit": 101}, "limit"),
    ("ctxd/recall", {"query": "x", "limit": 0}, "limit"),
    ("ctxd/recall", {"query": "x", "scope": "everything"}, "scope"),
    ("ctxd/recall", {}, "query"),
    ("ctxd/item", {"seq": 0}, "seq"),
    ("ctxd/item", {"seq": "3"}, "seq"),
    ("ctxd/item", {"seq": 99}, "seq"),
])
def test_bad_params_name_the_field(client: Client, workspace: Path, method: str, params: dict[str, Any], field: str) -> None:
    req(client, "ctxd/record", workspace, items=[user("hello there")])
    with pytest.raises(RpcError) as error:
        req(client, method, workspace, **params)
    assert error.value.code == -32602 and field in error.value.message


def test_the_configured_key_never_shows_in_a_snippet(daemon_factory, workspace: Path) -> None:
    """Recorded before the key was configured (so stored as it came): recall still redacts it."""
    first = daemon_factory([workspace])
    req(first, "ctxd/record", workspace, items=[output("c1", f"export OPENAI_API_KEY={KEY} # deploy credentials")])
    first.shutdown()
    second = daemon_factory([workspace], env={"OPENAI_API_KEY": KEY})
    found = req(second, "ctxd/recall", workspace, query="deploy credentials")
    assert found["results"], found
    assert KEY not in json.dumps(found) and "[redacted]" in found["results"][0]["snippet"]
    assert KEY not in json.dumps(req(second, "ctxd/item", workspace, seq=1))


def test_a_followed_session_is_searchable_after_the_agent_compacts_it(daemon_factory, workspace: Path, tmp_path: Path) -> None:
    claude_home = tmp_path / "claude-home"
    path = fx.write_jsonl(fx.claude_path(claude_home, workspace), fx.claude_session(workspace))
    client = daemon_factory([workspace], env={"CLAUDE_CONFIG_DIR": str(claude_home)})
    thread = f"claude:{fx.CLAUDE_ID}"
    wait_found(client, workspace, thread, "verbose flag", archived=False)
    fx.append_jsonl(path, fx.claude_compact("c1", "a2", workspace, "2025-10-03T11:05:00.000Z", "We added it."))
    hit = wait_found(client, workspace, thread, "verbose flag", archived=True)
    assert (hit["thread"], hit["archived"], hit["role"]) == (thread, True, "user")
    assert hit["snippet"] == "Add a --verbose flag to the CLI"
    assert req(client, "ctxd/item", workspace, thread=thread, seq=hit["seq"])["item"]["role"] == "user"
    wide = req(client, "ctxd/recall", workspace, query="argparse", scope="workspace")
    assert [(h["thread"], h["type"]) for h in wide["results"]] == [(thread, "function_call_output")]


def wait_found(client: Client, workspace: Path, thread: str, query: str, archived: bool) -> dict[str, Any]:
    """The first match of `query` in a followed thread once the daemon has mirrored it."""
    deadline = time.monotonic() + 15
    while True:
        found = req(client, "ctxd/recall", workspace, thread=thread, query=query)["results"]
        if found and found[0]["archived"] is archived:
            return found[0]
        assert time.monotonic() < deadline, found
        time.sleep(0.05)


def _index_tables(db: sqlite3.Connection) -> None:
    for table in ("recall_fts", "recall_threads", "recall_turns"):
        db.execute(f"DROP TABLE IF EXISTS {table}")
    db.execute("DELETE FROM meta WHERE key = 'recall_index'")


def test_a_store_without_the_index_is_indexed_when_opened(daemon_factory, workspace: Path, state_dir: Path) -> None:
    first = daemon_factory([workspace])
    req(first, "ctxd/record", workspace, items=[user("the cache key uses sha256 of the lockfile")])
    first.shutdown()
    with sqlite3.connect(database_path(state_dir / "ctxd", workspace)) as db:  # as a store made before the index
        _index_tables(db)
    second = daemon_factory([workspace])
    assert seqs(req(second, "ctxd/recall", workspace, query="lockfile sha256")) == [("default", 1)]
    req(second, "ctxd/record", workspace, items=[user("and the lockfile is poetry.lock")])
    assert {s for _, s in seqs(req(second, "ctxd/recall", workspace, query="lockfile"))} == {1, 2}


def _consistent(path: Path) -> int:
    """The index never holds an item that is not stored, and holds every item up to its thread's
    watermark (the rest waits for the next search). Returns how many items are stored."""
    with sqlite3.connect(path) as db:
        stored = set(db.execute("SELECT (t.id << 32) | i.seq FROM items i JOIN recall_threads t ON t.thread = i.thread"))
        count = db.execute("SELECT count(*) FROM items").fetchone()[0]
        upto = dict(db.execute("SELECT id, upto FROM recall_threads"))
        indexed = set(db.execute("SELECT id FROM recall_fts_docsize"))
        db.execute("INSERT INTO recall_fts (recall_fts) VALUES ('integrity-check')")
    assert len(stored) == count and indexed <= stored
    assert {(rid,) for (rid,) in stored if rid & 0xFFFFFFFF <= upto[rid >> 32]} <= indexed
    return count


def test_kill_9_never_leaves_the_index_and_the_items_apart(daemon_factory, workspace: Path, state_dir: Path) -> None:
    client = daemon_factory([workspace])
    for n in range(20):
        req(client, "ctxd/record", workspace, items=[user(f"acknowledged note {n}")])
    assert req(client, "ctxd/recall", workspace, query="acknowledged note")["total"] == 20
    for n in range(300):  # a stream of records and searches that the kill cuts into
        client.request_async("ctxd/record", {"workspace": workspace.as_uri(), "items": [output(f"c{n}", f"burst {n} " * 50)]})
        if n % 50 == 0:
            client.request_async("ctxd/recall", {"workspace": workspace.as_uri(), "query": "burst"})
    time.sleep(0.3)
    client.kill()
    path = database_path(state_dir / "ctxd", workspace)
    stored = _consistent(path)
    assert stored > 20
    again = daemon_factory([workspace])
    assert req(again, "ctxd/recall", workspace, query="acknowledged note", limit=100)["total"] == 20
    assert req(again, "ctxd/recall", workspace, query="burst")["total"] == stored - 20
    _consistent(path)


def test_an_item_compacted_again_after_an_undo_is_found_once(client: Client, workspace: Path) -> None:
    """A compaction writes the items it keeps again (copies, after its summary); undoing it and
    compacting again makes more copies of the same items. A match is shown once: the copy in the
    conversation when there is one, else the newest; `total` counts it once."""
    req(client, "ctxd/record", workspace, items=long_thread())
    for _ in range(2):
        operation = req(client, "ctxd/compact", workspace, strategy="offline")["undoId"]
        req(client, "ctxd/undo", workspace, id=operation)
    req(client, "ctxd/compact", workspace, strategy="offline")
    history = req(client, "ctxd/history", workspace, includeArchived=True)["items"]
    copies = [item for item in history if item.get("content") == long_thread()[0]["content"]]
    assert len(copies) >= 3, history  # the first user message: kept by each compaction
    found = req(client, "ctxd/recall", workspace, query="staging proxy port 8443")
    texts = [hit["snippet"] for hit in found["results"]]
    assert len(texts) == len(set(texts)), texts
    first = next(hit for hit in found["results"] if "must listen on port 8443" in hit["snippet"])
    assert first["archived"] is False, first
    assert found["total"] == len(found["results"]), found


def planted_outputs(count: int) -> tuple[list[dict[str, Any]], list[str]]:
    """`count` turns, each a shell call whose 30-line output holds one fact on an error line (a
    compaction's placeholder quotes error lines); returns the items and each fact's ticket."""
    items: list[dict[str, Any]] = []
    tickets = []
    for n in range(count):
        ticket = f"T{4100 + n * 37}"
        lines = [f"step {i} of deploy {n}: copied shard_{i} to the staging bucket, checksum verified, "
                 f"{i * 4096} bytes in {i % 7 + 1} parts" for i in range(30)]
        lines[17] = f"ERROR: deploy {n} failed: ticket {ticket} says the replica on port {5400 + n} refused"
        items += [user(f"Deploy number {n}, please"), shell_call(f"d{n}", f"./deploy.sh {n}"),
                  output(f"d{n}", "\n".join(lines)), assistant(f"Deploy {n} finished.")]
        tickets.append(ticket)
    return items, tickets


def test_a_fact_in_a_masked_tool_output_leads_to_the_output_not_its_placeholder(client: Client, workspace: Path) -> None:
    """An offline compaction puts a one-line placeholder where each old tool output was. A search
    that matches the placeholder (it quotes the output's error lines) answers with the archived
    output itself, and `ctxd/item` on the placeholder's seq reads the output, saying where the
    placeholder is."""
    items, tickets = planted_outputs(20)
    req(client, "ctxd/record", workspace, items=items)
    compacted = req(client, "ctxd/compact", workspace, strategy="offline")
    assert compacted["tokensAfter"] < compacted["tokensBefore"]
    stored = req(client, "ctxd/history", workspace, includeArchived=True)["items"]
    masked = {item["call_id"]: seq for seq, item in enumerate(stored, 1)
              if not item.get("archived") and "removed by compaction" in json.dumps(item)}
    assert len(masked) >= 15, stored  # placeholders in the conversation; the newest outputs are kept
    stubs = 0
    for n, ticket in enumerate(tickets):
        found = req(client, "ctxd/recall", workspace, query=f"{ticket} replica", limit=3)
        assert found["results"] and found["total"] >= len(found["results"]), (ticket, found)
        for hit in found["results"]:
            assert "removed by compaction" not in hit["snippet"], (ticket, found)
        top = found["results"][0]
        assert top["type"] == "function_call_output" and ticket in top["snippet"], (ticket, found)
        whole = req(client, "ctxd/item", workspace, seq=top["seq"])
        assert whole["item"] == items[4 * n + 2], (ticket, whole)
        if f"d{n}" in masked:  # the archived output; where its placeholder is, when that matched
            assert (top["seq"], top["archived"], whole["archived"]) == (4 * n + 3, True, True), (ticket, top)
            quoted = ticket in json.dumps(stored[masked[f"d{n}"] - 1])
            assert top.get("placeholderSeq") == (masked[f"d{n}"] if quoted else None), (ticket, found)
            stubs += quoted
        else:  # kept: its copy in the conversation
            assert top["archived"] is False and "placeholderSeq" not in top
    assert stubs >= 10  # (the placeholders that quote the fact matched it)
    # The placeholder's own seq: the output whole, and where its placeholder is.
    for call_id, seq in masked.items():
        whole = req(client, "ctxd/item", workspace, seq=seq)
        n = int(call_id[1:])
        assert whole == {"item": items[4 * n + 2], "archived": True, "seq": 4 * n + 3, "placeholderSeq": seq}, whole
        assert len(whole["item"]["output"].splitlines()) == 30


def build_log(lines: int) -> str:
    """A service log of the kind pasted into a search box: lines that share most words."""
    services = ["billing", "gateway", "scheduler", "auth", "webhook"]
    return "\n".join(f"[{services[i % 5]}] GET /api/invoice/{i % 97} 200 in {i % 89} ms request_id=r{i:05d} "
                     f"user=u{i % 13} cache={'hit' if i % 3 else 'miss'}" for i in range(lines))


def test_a_pasted_log_or_any_hostile_query_is_answered_and_finds_the_log(daemon_factory, workspace: Path) -> None:
    """A 70 KB log in the history, and queries an agent or a person may paste: 1,000 words of it
    (once over two minutes: the snippet compared every hit with every other), a long quoted part
    of it, a word repeated, every FTS5 operator. Each is answered within a bound only a hang
    reaches, the log's item first where the query is its text, and `total` never below the
    results."""
    client = daemon_factory([workspace], {"toolOutputTokenLimit": 100_000})  # the log is stored whole
    log = build_log(900)
    assert len(log) > 70_000
    req(client, "ctxd/record", workspace, items=[user("deploy the billing service"), shell_call("c1", "tail -n 900 app.log"),
                                                output("c1", log), assistant("The log shows no errors.")])
    req(client, "ctxd/record", workspace, items=[output(f"n{i}", build_log(40)[i * 50:]) for i in range(30)])
    words = log.split()
    pasted = " ".join(words[3000:4000])
    while len(pasted) > 10_000:  # the daemon reads queries of up to 10,000 characters
        pasted = pasted[:pasted.rindex(" ")]
    queries = {
        "pasted": pasted,
        "quoted": '"' + " ".join(words[5000:5200])[:9000] + '"',
        "repeated": " ".join(["request_id=r00042"] * 500),
        "operators": " ".join(f'{c}r00042{c}' for c in '"*^:()-+{}[],.<>!=\'\\/?&|~`@#$%;') + " NEAR AND OR NOT",
    }
    for name, query in queries.items():
        found = client.request("ctxd/recall", {"workspace": workspace.as_uri(), "query": query}, timeout=20)
        assert found["total"] >= len(found["results"]) >= 1, (name, found)
        assert found["results"][0]["seq"] == 3, (name, [hit["seq"] for hit in found["results"]])
        assert len(found["results"][0]["snippet"]) <= 400
    assert req(client, "ctxd/item", workspace, seq=3)["item"]["output"] == log


def test_total_counts_what_the_query_matches_and_never_fewer_than_the_results(client: Client, workspace: Path) -> None:
    """No item holds every word: the results are those holding all but one, and `total` counts
    them (it said 0 beside two results: "9 of 1 matches"), in the scope asked."""
    req(client, "ctxd/record", workspace, items=[user("alpha bravo"), user("alpha charlie"), user("delta echo")])
    req(client, "ctxd/record", workspace, thread="other", items=[user("bravo charlie"), user("alpha bravo")])
    found = req(client, "ctxd/recall", workspace, query="alpha bravo charlie")
    assert sorted(seqs(found)) == [("default", 1), ("default", 2)] and found["total"] == 2, found
    wide = req(client, "ctxd/recall", workspace, query="alpha bravo charlie", scope="workspace")
    assert len(wide["results"]) == 4 and wide["total"] == 4, wide
    for query in ("alpha", "alpha bravo", "zulu alpha", "bravo charlie alpha delta"):
        for scope in ("thread", "workspace"):
            found = req(client, "ctxd/recall", workspace, query=query, scope=scope, limit=1)
            assert found["total"] >= len(found["results"]), (query, scope, found)


def test_a_placeholder_kept_by_a_later_compaction_still_leads_to_the_output(client: Client, workspace: Path) -> None:
    """A second offline compaction keeps the first one's placeholders (written again, as copies):
    a hit on the copy, and `ctxd/item` on its seq, still lead to the output archived by the first."""
    items, tickets = planted_outputs(20)
    req(client, "ctxd/record", workspace, items=items)
    req(client, "ctxd/compact", workspace, strategy="offline")
    more, _ = planted_outputs(60)
    more = [{**item, "call_id": "m" + item["call_id"]} if "call_id" in item else item for item in more[4 * 20:]]
    req(client, "ctxd/record", workspace, items=more)
    req(client, "ctxd/compact", workspace, strategy="offline")
    stored = req(client, "ctxd/history", workspace, includeArchived=True)["items"]
    active = {item["call_id"]: seq for seq, item in enumerate(stored, 1)
              if not item.get("archived") and "removed by compaction" in json.dumps(item)}
    kept = [n for n in range(17) if f"d{n}" in active and active[f"d{n}"] > len(items) + 60]
    assert len(kept) >= 10, active  # the first compaction's placeholders, written again by the second
    for n in kept:
        whole = req(client, "ctxd/item", workspace, seq=active[f"d{n}"])
        assert whole == {"item": items[4 * n + 2], "archived": True, "seq": 4 * n + 3,
                         "placeholderSeq": active[f"d{n}"]}, whole
        found = req(client, "ctxd/recall", workspace, query=f"{tickets[n]} replica", limit=3)
        assert found["results"][0]["seq"] == 4 * n + 3, (tickets[n], found)
