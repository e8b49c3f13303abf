"""A damaged recall index (ctxd/ledger/search.py) through the real daemon: the index is derived
data, so its damage is found (when the store opens, and when an index operation fails), the index
is made anew from the ledger, and no ledger request fails because of it (docs/threat-model.md,
"The recall index"). The SQLite file is damaged as another program (or a bad disk) would: with
the daemon stopped, and while it runs."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ctxd.ledger.store import database_path
from tests.helpers import assistant, output, shell_call, user
from tests.rpc import Client, RpcError

# Each damage, as SQL run on the workspace's database by another connection.
DAMAGES = {
    # A plain table where the FTS5 table was (its shadow tables go with it).
    "plain table": ["DROP TABLE recall_fts", "CREATE TABLE recall_fts (text, parts)"],
    # FTS5's own configuration table dropped: the FTS5 table cannot even be opened.
    "no config": ["DROP TABLE recall_fts_config"],
    # The structure record (which segments the index has) zeroed: reads as an empty index, and
    # the next write to it fails.
    "zeroed structure": ["UPDATE recall_fts_data SET block = zeroblob(length(block)) WHERE id = 10"],
}


def damage(path: Path, name: str) -> None:
    with sqlite3.connect(path, timeout=30) as db:
        for statement in DAMAGES[name]:
            db.execute(statement)


def req(client: Client, method: str, ws: Path, **params: Any) -> Any:
    return client.request(method, {"workspace": ws.as_uri(), **params})


def turns(start: int, count: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for n in range(start, start + count):
        items += [user(f"step {n}: look at the quokka module"), shell_call(f"c{n}", f"pytest -k quokka_{n}"),
                  output(f"c{n}", "\n".join(f"quokka_{n} case {i} passed in {i} ms" for i in range(80))),
                  assistant(f"Step {n}: the quokka tests pass.")]
    return items


@pytest.mark.parametrize("when", ["stopped", "running"])
@pytest.mark.parametrize("kind", list(DAMAGES))
def test_a_damaged_index_is_made_anew_and_no_ledger_request_fails(daemon_factory: Callable[..., Client],
                                                                 workspace: Path, state_dir: Path, kind: str,
                                                                 when: str) -> None:
    client = daemon_factory([workspace])
    req(client, "ctxd/record", workspace, items=turns(0, 8))
    assert req(client, "ctxd/recall", workspace, query="quokka tests")["total"] == 8
    path = database_path(state_dir / "ctxd", workspace)
    if when == "stopped":
        client.shutdown()
        damage(path, kind)
        client = daemon_factory([workspace])
    else:
        damage(path, kind)
    # Every ledger request answers, a compaction (whose swap runs the index's triggers) included.
    req(client, "ctxd/record", workspace, items=turns(8, 2))
    assert len(req(client, "ctxd/history", workspace)["items"]) == 40
    assert req(client, "ctxd/usage", workspace)["usage"]["usedTokens"] > 0
    compacted = req(client, "ctxd/compact", workspace, strategy="offline")
    assert compacted["tokensAfter"] < compacted["tokensBefore"]
    req(client, "ctxd/record", workspace, items=turns(10, 1))
    assert len(req(client, "ctxd/history", workspace, includeArchived=True)["items"]) > 44
    # And recall works again, over the whole ledger: what was recorded before the damage and after.
    found = req(client, "ctxd/recall", workspace, query="quokka tests", limit=100)
    said = {hit["snippet"] for hit in found["results"] if hit.get("role") == "assistant"}
    assert said >= {f"Step {n}: the quokka tests pass." for n in range(11)}, found
    assert found["total"] == len(found["results"]) >= 11, found
    assert req(client, "ctxd/recall", workspace, query="quokka_3")["results"][0]["seq"] == 15
    with sqlite3.connect(path) as db:  # the index is whole again
        db.execute("INSERT INTO recall_fts (recall_fts) VALUES ('integrity-check')")
        assert db.execute("SELECT sql FROM sqlite_master WHERE name = 'recall_fts'").fetchone()[0].startswith(
            "CREATE VIRTUAL TABLE")


def test_a_large_index_is_rebuilt_in_the_background_and_recall_says_so_meanwhile(
        daemon_factory: Callable[..., Client], workspace: Path, state_dir: Path) -> None:
    """Past 20,000 items to index, the first search does not wait for all of them: it answers
    that the index is being built (1003, saying so), the index is built in the background, and
    the ledger answers meanwhile."""
    from ctxd.ledger import recall

    client = daemon_factory([workspace])
    count = getattr(recall, "SYNC_ITEMS", 20_000) + 2_000
    for start in range(0, count, 2_000):
        req(client, "ctxd/record", workspace, items=[user(f"note {n}: the heron count is {n}")
                                                     for n in range(start, start + 2_000)])
    client.shutdown()
    damage(database_path(state_dir / "ctxd", workspace), "zeroed structure")
    client = daemon_factory([workspace])
    with pytest.raises(RpcError) as building:
        req(client, "ctxd/recall", workspace, query="heron count 777")
    assert building.value.code == 1003 and "being built" in building.value.message, building.value.message
    req(client, "ctxd/record", workspace, items=[user("and one more heron")])
    assert req(client, "ctxd/item", workspace, seq=count + 1)["item"]["content"][0]["text"] == "and one more heron"
    deadline = time.monotonic() + 120  # (a hang bound: it takes a few seconds)
    while True:
        try:
            found = req(client, "ctxd/recall", workspace, query="heron count 777")
            break
        except RpcError as error:
            assert error.code == 1003 and "being built" in error.message, error.message
            assert time.monotonic() < deadline, "the index was never built"
            time.sleep(0.5)
    assert found["results"][0]["seq"] == 778, found
    assert req(client, "ctxd/recall", workspace, query="heron", limit=1)["total"] == count + 1
