"""`ctxd/compact` and automatic compaction end to end: a real daemon, a fake OpenAI endpoint."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ctxd.tokens.counter import count_item
from ctxd.tokens.estimator import estimate_tokens
from tests.fake_openai import FakeOpenAI, Step
from tests.rpc import Client, RpcError
from tests.test_compact import GHOST, assistant, call, output, user

KEY = "sk-e2e-secret-abcdef123456"
KEY_ENV = {"FAKE_OPENAI_KEY": KEY}


def turn(n: int, size: int = 2000) -> list[dict[str, Any]]:
    body = "\n".join(f"{n}:{i} collecting tests from module_{i}.py" for i in range(size // 40))
    return [user(f"turn {n}: please fix bug {n} in src/mod_{n}.py"), call(f"c{n}", f"pytest tests/test_{n}.py"),
            output(f"c{n}", body + f"\nE   RuntimeError: bug-{n}\nexit code: 1"), assistant(f"Fixed bug {n}.")]


def estimated(items: list[dict[str, Any]]) -> int:
    """The items' tokens as the daemon estimates them (no model: the estimator's default profile)."""
    return sum(count_item(item, estimate_tokens) for item in items)


def thread_items(turns: int = 6) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for n in range(turns):
        items.extend(turn(n))
        if n == 2:
            items.append(GHOST)
    return items


@pytest.fixture
def fake():
    with FakeOpenAI() as server:
        yield server


def llm_options(fake: FakeOpenAI, api: str = "chat", **extra: Any) -> dict[str, Any]:
    return {"llm": {"baseUrl": fake.base_url, "model": "fake-model", "api": api, "apiKeyEnv": "FAKE_OPENAI_KEY",
                    "maxRetries": 2, "retryBudgetSeconds": 10, "timeoutSeconds": 10}, **extra}


def start(daemon_factory: Callable[..., Client], workspace: Path, options: dict[str, Any] | None = None) -> Client:
    return daemon_factory([workspace], options, env=KEY_ENV)


def wait_until(condition: Callable[[], Any], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def stored(client: Client, ws: str, thread: str = "default") -> Any:
    """Everything a client can see of a thread's ledger, archived items included."""
    return (client.request("ctxd/history", {"workspace": ws, "thread": thread, "includeArchived": True}),
            client.request("ctxd/history", {"workspace": ws, "thread": thread}),
            [t for t in client.request("ctxd/threads", {"workspace": ws})["threads"] if t["thread"] == thread])


def test_offline_compaction_swaps_archives_and_notifies(daemon_factory, workspace) -> None:
    client = start(daemon_factory, workspace)
    ws = workspace.as_uri()
    recorded = client.request("ctxd/record", {"workspace": ws, "items": thread_items()})
    result = client.request("ctxd/compact", {"workspace": ws, "strategy": "offline", "workDoneToken": "tok-1"})
    assert result["strategy"] == "offline"
    assert result["historyVersion"] == recorded["historyVersion"] + 1
    assert result["tokensAfter"] * 4 <= result["tokensBefore"]
    assert result["trimmedItems"] == 0 and result["summary"]

    compacted = client.wait_for_notification("ctxd/compacted")
    assert compacted == {"workspace": ws, "thread": "default", "tokensBefore": result["tokensBefore"],
                         "tokensAfter": result["tokensAfter"], "strategy": "offline"}
    names = [n["method"] for n in client.notifications]
    at = names.index("ctxd/compacted")
    fresh = [i for i, n in enumerate(client.notifications) if n["method"] == "ctxd/usageChanged"
             and n["params"]["historyVersion"] == result["historyVersion"]]
    assert fresh and fresh[0] < at, "the new usage goes out before ctxd/compacted"
    assert client.notifications[fresh[0]]["params"]["usedTokens"] == result["tokensAfter"]
    warning = client.wait_for_notification("window/showMessage", lambda p: "accurate" in p["message"])
    assert warning["type"] == 2, client.notes("window/showMessage")
    progress = [p["value"]["kind"] for p in client.notes("$/progress") if p["token"] == "tok-1"]
    assert progress[0] == "begin" and progress[-1] == "end"

    history = client.request("ctxd/history", {"workspace": ws})
    assert history["items"][-1] == GHOST
    assert "RuntimeError: bug-5" in json.dumps(history["items"])
    full = client.request("ctxd/history", {"workspace": ws, "includeArchived": True})
    assert sum(1 for item in full["items"] if item.get("archived")) == len(thread_items())
    prompt = client.request("ctxd/prompt", {"workspace": ws})
    assert prompt["reinjectContext"] is True
    assert all(item["type"] != "ghost_snapshot" for item in prompt["items"])


def test_history_lists_past_compactions_with_their_tokens(daemon_factory, workspace) -> None:
    """What the editors' Compactions tree shows after a reload: every compaction of the thread,
    its tokens before and after, and which archived items it replaced."""
    client = start(daemon_factory, workspace)
    ws = workspace.as_uri()
    assert client.request("ctxd/history", {"workspace": ws, "includeArchived": True})["compactions"] == []
    client.request("ctxd/record", {"workspace": ws, "items": thread_items()})
    first = client.request("ctxd/compact", {"workspace": ws, "strategy": "offline"})
    client.request("ctxd/record", {"workspace": ws, "items": turn(7) + turn(8)})
    second = client.request("ctxd/compact", {"workspace": ws, "strategy": "offline"})
    full = client.request("ctxd/history", {"workspace": ws, "includeArchived": True})
    assert "compactions" not in client.request("ctxd/history", {"workspace": ws})
    records = full["compactions"]
    assert [(c["tokensBefore"], c["tokensAfter"], c["strategy"], c["automatic"]) for c in records] == [
        (first["tokensBefore"], first["tokensAfter"], "offline", False),
        (second["tokensBefore"], second["tokensAfter"], "offline", False)]
    assert records[0]["id"] < records[1]["id"] and records[0]["createdAt"] <= records[1]["createdAt"]
    archived = [item for item in full["items"] if item.get("archived")]
    assert records[0]["archivedItems"] == len(thread_items())
    # The second compaction replaced what the first wrote and the two turns recorded after it.
    assert records[1]["archivedItems"] == records[0]["writtenItems"] + len(turn(7) + turn(8))
    assert len(archived) == records[0]["archivedItems"] + records[1]["archivedItems"]
    assert [i for i in archived[:records[0]["archivedItems"]] if i["type"] != "ghost_snapshot"] == [
        i | {"archived": True, "archivedBy": records[0]["id"]} for i in thread_items() if i["type"] != "ghost_snapshot"]
    active = client.request("ctxd/history", {"workspace": ws})
    assert records[1]["writtenItems"] <= active["total"]


def test_llm_compaction_through_the_openai_client(daemon_factory, workspace, fake) -> None:
    client = start(daemon_factory, workspace, llm_options(fake))
    ws = workspace.as_uri()
    client.request("ctxd/record", {"workspace": ws, "items": thread_items()})
    result = client.request("ctxd/compact", {"workspace": ws})
    assert result["strategy"] == "llm" and result["summary"] == fake.summary.strip()
    [request] = fake.requests
    assert request.path == "/v1/chat/completions" and request.headers["authorization"] == f"Bearer {KEY}"
    items = client.request("ctxd/history", {"workspace": ws})["items"]
    texts = [item["content"][0]["text"] for item in items if item["type"] == "message"]
    assert texts[:6] == [f"turn {n}: please fix bug {n} in src/mod_{n}.py" for n in range(6)]
    assert texts[6].endswith(fake.summary.strip())
    assert items[-1] == GHOST


def test_remote_compaction_with_context_overflow_trimming(daemon_factory, workspace, fake) -> None:
    client = start(daemon_factory, workspace, llm_options(fake, api="responses"))
    ws = workspace.as_uri()
    client.request("ctxd/record", {"workspace": ws, "items": thread_items()})
    fake.script(Step.context_exceeded(), Step.context_exceeded())
    result = client.request("ctxd/compact", {"workspace": ws, "strategy": "remote"})
    assert result["strategy"] == "remote" and result["trimmedItems"] >= 2
    # Down the ladder: the full history, then its tool outputs stripped, then only the last turns.
    sent = [r.body["input"] for r in fake.requests]
    assert len(sent) == 3 and len(sent[0]) == len(sent[1]) > len(sent[2])
    assert "RuntimeError: bug-0" in json.dumps(sent[0]) and "collecting tests" not in json.dumps(sent[1])
    items = client.request("ctxd/history", {"workspace": ws})["items"]
    assert [i["type"] for i in items[-2:]] == ["compaction", "ghost_snapshot"]


@pytest.mark.parametrize("strategy, steps", [
    ("llm", [Step(status=401, code="invalid_api_key", message=f"bad key {KEY}")]),
    ("llm", [Step(garbage=True)]),
    ("remote", [Step(status=500, retry_after=0)] * 3),
])
def test_failed_compaction_leaves_the_ledger_exactly_as_before(daemon_factory, workspace, fake, strategy, steps) -> None:
    client = start(daemon_factory, workspace, llm_options(fake, api="responses"))
    ws = workspace.as_uri()
    client.request("ctxd/record", {"workspace": ws, "items": thread_items()})
    before = stored(client, ws)
    fake.script(*steps)
    with pytest.raises(RpcError) as caught:
        client.request("ctxd/compact", {"workspace": ws, "strategy": strategy, "workDoneToken": 7})
    assert caught.value.code == 1001
    assert KEY not in caught.value.message
    assert stored(client, ws) == before
    assert not client.notes("ctxd/compacted")
    assert [p["value"]["kind"] for p in client.notes("$/progress")][-1] == "end"


def test_auto_falls_back_to_offline_when_the_endpoint_fails(daemon_factory, workspace, fake) -> None:
    client = start(daemon_factory, workspace, llm_options(fake))
    ws = workspace.as_uri()
    client.request("ctxd/record", {"workspace": ws, "items": thread_items()})
    fake.script(Step(status=403))
    result = client.request("ctxd/compact", {"workspace": ws, "strategy": "auto"})
    assert result["strategy"] == "offline" and "403" in result["fallbackReason"]


def test_cancel_leaves_the_ledger_as_before(daemon_factory, workspace, fake) -> None:
    client = start(daemon_factory, workspace, llm_options(fake))
    ws = workspace.as_uri()
    client.request("ctxd/record", {"workspace": ws, "items": thread_items()})
    before = stored(client, ws)
    fake.script(Step(delay=20))
    msg_id = client.request_async("ctxd/compact", {"workspace": ws, "strategy": "llm"})
    wait_until(lambda: fake.requests)  # the request reached the model
    client.notify("$/cancelRequest", {"id": msg_id})
    with pytest.raises(RpcError) as caught:
        client.result(msg_id, timeout=10)
    assert caught.value.code == -32800
    assert stored(client, ws) == before


def test_records_during_a_compaction_are_kept_after_it(daemon_factory, workspace, fake) -> None:
    client = start(daemon_factory, workspace, llm_options(fake))
    ws = workspace.as_uri()
    client.request("ctxd/record", {"workspace": ws, "items": thread_items()})
    fake.script(Step(delay=1.0))
    msg_id = client.request_async("ctxd/compact", {"workspace": ws, "strategy": "llm"})
    wait_until(lambda: fake.requests)
    client.request("ctxd/record", {"workspace": ws, "items": [user("meanwhile: also update README.md")]})
    client.result(msg_id, timeout=20)
    items = client.request("ctxd/history", {"workspace": ws})["items"]
    assert items[-1] == user("meanwhile: also update README.md")
    assert items[-2] == GHOST


def test_rollback_crosses_a_compaction(daemon_factory, workspace) -> None:
    client = start(daemon_factory, workspace)
    ws = workspace.as_uri()
    client.request("ctxd/record", {"workspace": ws, "items": thread_items(3)})
    client.request("ctxd/compact", {"workspace": ws, "strategy": "offline"})
    result = client.request("ctxd/rollback", {"workspace": ws, "turns": 2})
    items = client.request("ctxd/history", {"workspace": ws})["items"]
    assert items[0] == user("turn 0: please fix bug 0 in src/mod_0.py")
    assert "turn 1" not in json.dumps(items) and result["removedItems"] > 0


def test_prompt_compacts_automatically_and_warns_first(daemon_factory, workspace) -> None:
    client = start(daemon_factory, workspace, {"autoCompactTokenLimit": 4000})
    ws = workspace.as_uri()
    usage = client.request("ctxd/record", {"workspace": ws, "items": turn(0, 8000)})["usage"]
    assert usage["tier"] == "ok"
    # Turn 1 brings the thread to about 3,600 estimated tokens, the middle of the warn band (3,200
    # to 4,000), sized with the estimator the daemon uses: the C extension's or, without it, the
    # byte classes', ~18% higher on this synthetic log.
    size = next(s for s in range(1000, 8000, 40) if estimated(turn(0, 8000) + turn(1, s)) >= 3600)
    usage = client.request("ctxd/record", {"workspace": ws, "items": turn(1, size)})["usage"]
    assert usage["tier"] == "warn" and usage["usedTokens"] < 4000
    client.wait_for_notification("ctxd/usageChanged", lambda p: p["tier"] == "warn")
    client.request("ctxd/record", {"workspace": ws, "items": turn(2, 4000)})
    assert client.request("ctxd/usage", {"workspace": ws})["usage"]["tier"] == "compact"
    prompt = client.request("ctxd/prompt", {"workspace": ws})
    compacted = client.wait_for_notification("ctxd/compacted")
    assert compacted["strategy"] == "offline" and compacted["tokensAfter"] < 4000
    assert prompt["estimatedTokens"] == compacted["tokensAfter"] and prompt["reinjectContext"] is True
    assert client.request("ctxd/usage", {"workspace": ws})["usage"]["tier"] == "ok"


def test_breaker_stops_auto_compaction_after_three_useless_tries(daemon_factory, workspace) -> None:
    client = start(daemon_factory, workspace, {"autoCompactTokenLimit": 3000})
    ws = workspace.as_uri()
    # The fixed overhead alone is over the limit: no compaction can get the thread under it.
    client.request("ctxd/setPromptContext", {"workspace": ws, "baseInstructions": "be careful. " * 4000})
    client.request("ctxd/record", {"workspace": ws, "items": thread_items(3)})
    counts = []
    for _ in range(4):
        client.request("ctxd/prompt", {"workspace": ws})
        counts.append(len(client.notes("ctxd/compacted")))
    # The first try compacts; later ones compact again or are refused (nothing worth compacting):
    # either way they do not help, and after three tries there is no fourth.
    assert counts[0] == 1 and counts[3] == counts[2] <= 3
    messages = [m["message"] for m in client.notes("window/showMessage")]
    assert any("automatic compaction is now off" in m for m in messages)
    # A manual compaction still works when asked for; once one gets under the limit, auto is back.
    client.request("ctxd/setPromptContext", {"workspace": ws, "baseInstructions": "be brief."})
    client.request("ctxd/record", {"workspace": ws, "items": thread_items(3)})
    assert client.request("ctxd/compact", {"workspace": ws, "strategy": "offline"})["strategy"] == "offline"
    usage = client.request("ctxd/record", {"workspace": ws, "items": thread_items(9)})["usage"]
    assert usage["tier"] == "compact"
    client.request("ctxd/prompt", {"workspace": ws})
    assert len(client.notes("ctxd/compacted")) == counts[3] + 2


def test_compact_prompt_file_from_the_workspace(daemon_factory, workspace, fake) -> None:
    (workspace / "handoff.md").write_text("Write the handoff as three bullet points.\n")
    client = start(daemon_factory, workspace, {**llm_options(fake), "compactPromptFile": "handoff.md"})
    ws = workspace.as_uri()
    client.request("ctxd/record", {"workspace": ws, "items": thread_items(2)})
    client.request("ctxd/compact", {"workspace": ws, "strategy": "llm"})
    assert fake.requests[0].body["messages"][-1]["content"] == "Write the handoff as three bullet points."
