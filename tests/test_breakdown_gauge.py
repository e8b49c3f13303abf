"""The breakdown never contradicts the gauge (protocol v2), checked through the daemon after every
step of random thread histories: records, API totals, prompt contexts, rollbacks, compactions,
windows small enough to overflow."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import assistant, call, output, user
from tests.rpc import Client, RpcError

FREE = ("freeSpace", "autocompactBuffer")


def check(breakdown: dict[str, Any], gauge: dict[str, Any] | None, has_items: bool) -> None:
    """Both v2 invariants, and agreement with the gauge the last request returned."""
    usage = breakdown["usage"]
    used, window = usage["usedTokens"], breakdown["contextWindow"]
    if gauge is not None:
        assert gauge["usedTokens"] == used and gauge["contextWindow"] == window
    cats = {c["name"]: c["tokens"] for c in breakdown["categories"]}
    assert all(tokens >= 0 for tokens in cats.values())
    assert sum(tokens for name, tokens in cats.items() if name not in FREE) == used
    if used <= window:
        assert sum(cats.values()) == window and breakdown["overflowTokens"] == 0
    else:
        assert cats["freeSpace"] == cats["autocompactBuffer"] == 0
        assert breakdown["overflowTokens"] == used - window
    # `estimated` only while there is neither a message nor an API total.
    if has_items or usage["source"] != "estimate":
        assert breakdown["mode"] == "actual" and "messages" in cats and breakdown["totalTokens"] == used
    else:
        assert breakdown["mode"] == "estimated" and "messages" not in cats and breakdown["totalTokens"] is None


def random_items(rng: random.Random, n: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [user(f"turn {n}: " + "please fix the parser " * rng.randint(1, 30))]
    for k in range(rng.randint(0, 3)):
        call_id = f"c{n}-{k}"
        items += [call(call_id, "shell", '{"cmd": "pytest -q"}'),
                  output(call_id, "tests/test_parser.py::test_x FAILED\n" * rng.randint(1, 400))]
    items.append(assistant("done " * rng.randint(1, 50)))
    return items


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_breakdown_follows_the_gauge_through_any_history(daemon_factory, workspace: Path, seed: int) -> None:
    rng = random.Random(seed)
    window = rng.choice([3_000, 8_000, 128_000])
    client: Client = daemon_factory([workspace], {"contextWindow": window, "autoCompactTokenLimit": 0})
    ws = workspace.as_uri()

    def req(method: str, **params: Any) -> Any:
        return client.request(method, {"workspace": ws, **params})

    check(req("ctxd/usage"), None, has_items=False)
    turns = 0
    for _ in range(30):
        op = rng.choice(["record", "record", "record", "api", "context", "rollback", "compact"])
        gauge = None
        if op == "record":
            turns += 1
            gauge = req("ctxd/record", items=random_items(rng, turns))["usage"]
        elif op == "api":
            total = rng.randint(0, window * 2)
            gauge = req("ctxd/reportTokenUsage", usage={"inputTokens": total, "outputTokens": 0, "totalTokens": total})
        elif op == "context":
            gauge = req("ctxd/setPromptContext", baseInstructions="Be careful. " * rng.randint(0, 400),
                        tools=[{"name": f"tool{i}", "kind": rng.choice(["builtin", "mcp", "skill"]),
                                "schema": {"description": "does things " * rng.randint(1, 40)}}
                               for i in range(rng.randint(0, 4))])
        elif op == "rollback":
            gauge = req("ctxd/rollback", turns=rng.randint(1, 2))["usage"]
        else:
            try:
                req("ctxd/compact", strategy="offline")
            except RpcError as error:  # nothing worth compacting, or an empty thread
                assert error.code not in (-32602, -32603), error.message
        has_items = req("ctxd/history")["total"] > 0
        check(req("ctxd/usage"), gauge, has_items)


def test_a_new_thread_after_a_compaction_or_rollback_has_messages(daemon_factory, workspace: Path) -> None:
    """VS Code showed a red 107% gauge beside "88% free": the breakdown had no `messages` row."""
    client: Client = daemon_factory([workspace], {"contextWindow": 2_000, "autoCompactTokenLimit": 0})
    ws = workspace.as_uri()
    gauge = client.request("ctxd/record", {"workspace": ws, "items": [user(" ".join(f"w{i}" for i in range(2000))), assistant("ok")]})["usage"]
    assert gauge["usedTokens"] > 2_000 and gauge["source"] == "estimate"
    breakdown = client.request("ctxd/usage", {"workspace": ws})
    check(breakdown, gauge, has_items=True)
    assert next(c for c in breakdown["categories"] if c["name"] == "freeSpace")["tokens"] == 0
    gauge = client.request("ctxd/rollback", {"workspace": ws, "turns": 1})["usage"]
    check(client.request("ctxd/usage", {"workspace": ws}), gauge, has_items=False)
