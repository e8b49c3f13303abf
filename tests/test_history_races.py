"""History operations that meet other requests on the same thread (found by attacking the ledger
from outside): what the operation records about itself must describe the history it replaced."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fake_openai import FakeOpenAI, Request
from tests.rpc import Client
from tests.test_codex_parity import KEY_ENV, llm_options
from tests.test_undo import Thread, turns


class GatedOpenAI(FakeOpenAI):
    """A FakeOpenAI whose answers wait until the test opens the gate: the compaction is held
    between reading the thread and swapping its history in, with no clock involved."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.asked = threading.Event()

    def _handle(self, handler: Any, request: Request) -> None:
        self.asked.set()
        self.gate.wait(60)
        super()._handle(handler, request)


@pytest.fixture
def gated() -> Iterator[GatedOpenAI]:
    with GatedOpenAI() as server:
        try:
            yield server
        finally:
            server.gate.set()


def test_a_compaction_records_the_tokens_of_the_history_it_replaced(daemon_factory: Callable[..., Client],
                                                                    workspace: Path, gated: GatedOpenAI) -> None:
    """Turns recorded while a compaction waits for its model are kept after the summary, and are
    part of the history the swap replaced (`itemsBefore` counts them): the compaction's
    `tokensBefore` (its result, `ctxd/compacted`, its listing in `ctxd/history`) must be the usage
    right before the swap, not the usage when it started, or the saving it reports is wrong."""
    client = daemon_factory([workspace], llm_options(gated), env=KEY_ENV)
    t = Thread(client, workspace)
    t.call("ctxd/record", items=turns(0, 3))
    pending = client.request_async("ctxd/compact", {"workspace": t.ws, "thread": t.name, "strategy": "llm"})
    assert gated.asked.wait(30)  # the compaction read the thread and waits for its summary
    t.call("ctxd/record", items=turns(3, 2))
    before = t.call("ctxd/usage")["usage"]["usedTokens"]
    items_before = len(t.items())
    gated.gate.set()
    result = client.result(pending)
    op = next(op for op in t.everything()["operations"] if op["id"] == result["undoId"])
    assert op["itemsBefore"] == items_before
    assert (result["tokensBefore"], op["tokensBefore"]) == (before, before)
    compacted = client.wait_for_notification("ctxd/compacted")
    assert compacted["tokensBefore"] == before
    # Undone, the history has the tokens the compaction said it replaced.
    undone = t.call("ctxd/undo", id=result["undoId"])
    assert undone["usage"]["usedTokens"] == before


def test_a_followed_thread_takes_no_usage_or_context_from_a_client(daemon_factory: Callable[..., Client],
                                                                   workspace: Path, tmp_path: Path) -> None:
    """A followed session's gauge is the agent's own report (docs/protocol.md, "Followed threads"):
    a client's `ctxd/reportTokenUsage` or `ctxd/setPromptContext` on its thread is a write to a
    history the agent owns, refused like a record, and the gauge keeps the agent's figure. (Before:
    both were taken, and the followed thread showed the client's number and window.)"""
    from tests import session_fixtures as fx
    from tests.rpc import RpcError
    from tests.test_sessions_e2e import CODEX_THREAD, homes, wait_thread

    codex_home, _, env = homes(tmp_path)
    fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(workspace))
    client = daemon_factory([workspace], env=env)
    uri = workspace.as_uri()
    listed = wait_thread(client, workspace, CODEX_THREAD, lambda t: t["usage"]["usedTokens"] == 12_000)
    writes = [("ctxd/reportTokenUsage", {"usage": {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}}),
              ("ctxd/setPromptContext", {"model": "gpt-4o", "contextWindow": 1000, "baseInstructions": "x" * 4000})]
    for method, params in writes:
        with pytest.raises(RpcError) as refused:
            client.request(method, {"workspace": uri, "thread": CODEX_THREAD, **params})
        assert refused.value.code == -32602 and "the agent owns that history" in refused.value.message, method
    usage = client.request("ctxd/usage", {"workspace": uri, "thread": CODEX_THREAD})["usage"]
    assert (usage["usedTokens"], usage["contextWindow"], usage["source"]) == (
        12_000, listed["usage"]["contextWindow"], "api")
    # No client writes under an agent's name either: a thread no agent wrote is not made.
    with pytest.raises(RpcError):
        client.request("ctxd/reportTokenUsage", {"workspace": uri, "thread": "codex:not-a-session", **writes[0][1]})
    assert "codex:not-a-session" not in [t["thread"] for t in client.request("ctxd/threads", {"workspace": uri})["threads"]]
