"""The time machine as a property (issue #26): random sequences of record, compact (offline, auto,
llm and remote, against tests/fake_openai.py), rollback, snapshot, restore with and without the
conversation, and undo, on one real daemon (a fresh thread per example). After every step:

- no recorded item is ever lost: each is in `ctxd/history` with `includeArchived`, active or archived;
- undoing the latest operation (by `ctxd/undo`, or by restoring a restore's `undoId` with the
  conversation) puts back exactly the active history before it, plus what was recorded since;
- a compaction never drops what an earlier summary said; one that is refused changes nothing;
- a rollback does what its dry run said; a restore with the conversation brings back the
  conversation as it was when the snapshot was recorded.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from tests.fake_openai import FakeOpenAI
from tests.rpc import Client, RpcError
from tests.test_codex_parity import KEY_ENV, llm_options

SUMMARY_PREFIX = "[Handoff summary]"
COUNT = re.compile(r" ×\d+$")
_ids = itertools.count(1)


def _item(kind: str, text: str) -> dict[str, Any]:
    """A message with an `id` of its own: a compaction's copies carry none, so a recorded item is
    told from what a compaction wrote."""
    part = "input_text" if kind == "user" else "output_text"
    return {"type": "message", "role": kind, "id": f"m{next(_ids)}", "content": [{"type": part, "text": text}]}


def turn(n: int, size: int) -> list[dict[str, Any]]:
    log = "".join(f"tests/test_mod_{n}.py::test_{i} PASSED\n" for i in range(size))
    call_id = f"call{next(_ids)}"
    return [_item("user", f"turn {n}: fix bug {n} in src/mod_{n}.py; never touch the public API"),
            {"type": "function_call", "call_id": call_id, "name": "shell",
             "arguments": json.dumps({"cmd": f"pytest -q tests/test_mod_{n}.py"})},
            {"type": "function_call_output", "call_id": call_id,
             "output": log + f"E   ValueError: bug {n} in src/mod_{n}.py\nexit code: 1"},
            _item("assistant", f"Decided to rewrite src/mod_{n}.py; bug {n} is next.")]


def summary_facts(items: list[dict[str, Any]]) -> list[str]:
    """Every line the handoff summaries among `items` say (headings and counts aside)."""
    facts = []
    for item in items:
        for part in item.get("content") or [] if item.get("role") == "user" else []:
            text = part.get("text", "")
            if not text.startswith(SUMMARY_PREFIX):
                continue
            for line in text.splitlines()[1:]:
                fact = COUNT.sub("", line.strip().removeprefix("- "))
                if fact and not fact.startswith(("## ", "(+")) and not fact.startswith(SUMMARY_PREFIX):
                    facts.append(fact)
    return facts


def summaries(items: list[dict[str, Any]]) -> str:
    return "\n".join(part.get("text", "") for item in items if item.get("role") == "user"
                     for part in item.get("content") or [] if part.get("text", "").startswith(SUMMARY_PREFIX))


def plain(item: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in item.items() if key not in ("archived", "archivedBy")}


class TimeMachine(RuleBasedStateMachine):
    client: Client
    folder: Path
    threads = itertools.count()

    def __init__(self) -> None:
        super().__init__()
        self.thread = f"prop-{next(self.threads)}"
        self.recorded: list[dict[str, Any]] = []
        self.turns = 0
        self.snapshots: dict[str, list[dict[str, Any]]] = {}  # id -> the active history just after it
        self.before: dict[int, tuple[list[dict[str, Any]], int]] = {}  # op -> (active before it, records then)
        self.known_ops: list[int] = []
        self.restore_undo: dict[int, str] = {}  # op -> the snapshot whose restore undoes it

    # --- helpers ---------------------------------------------------------------------------------

    def call(self, method: str, **params: Any) -> Any:
        return self.client.request(method, {"workspace": self.folder.as_uri(), "thread": self.thread, **params})

    def active(self) -> list[dict[str, Any]]:
        return self.call("ctxd/history")["items"]

    def operations(self) -> list[dict[str, Any]]:
        return self.call("ctxd/history", includeArchived=True)["operations"]

    def note_operation(self, before: list[dict[str, Any]]) -> int | None:
        """The operation the last step made, if any, with the history before it."""
        new = [op["id"] for op in self.operations() if op["id"] not in self.known_ops]
        assert len(new) <= 1, new
        for op in new:
            self.known_ops.append(op)
            self.before[op] = (before, len(self.recorded))
        return new[0] if new else None

    def latest(self) -> int | None:
        return self.known_ops[-1] if self.known_ops else None

    def expect_undone(self, op: int) -> None:
        before, records = self.before[op]
        assert self.active() == before + self.recorded[records:]

    # --- steps -----------------------------------------------------------------------------------

    @rule(count=st.integers(1, 2), size=st.sampled_from([5, 150]))
    def record(self, count: int, size: int) -> None:
        items = [item for n in range(count) for item in turn(self.turns + n, size)]
        self.turns += count
        self.call("ctxd/record", items=items)
        self.recorded += items

    @precondition(lambda self: self.turns)
    @rule(strategy=st.sampled_from(["offline", "auto", "llm", "remote"]))
    def compact(self, strategy: str) -> None:
        before = self.active()
        try:
            result = self.call("ctxd/compact", strategy=strategy)
        except RpcError as error:
            readable = any(item["type"] != "ghost_snapshot" for item in before)
            # Only an unnamed strategy may refuse a thread a model could read (nothing worth compacting).
            assert error.code == 1001 and (strategy in ("offline", "auto") or not readable), (strategy, error)
            assert self.active() == before
            event(f"compact {strategy}: refused")
            return
        event(f"compact {strategy}: done")
        after = self.active()
        assert result["undoId"] == self.note_operation(before)
        said = summaries(after)
        for fact in summary_facts(before):
            assert fact in said, f"{strategy} compaction dropped {fact!r}"

    @precondition(lambda self: self.recorded)
    @rule(turns=st.integers(1, 3))
    def rollback(self, turns: int) -> None:
        before = self.active()
        preview = self.call("ctxd/rollback", turns=turns, dryRun=True)
        assert self.active() == before
        result = self.call("ctxd/rollback", turns=turns)
        assert result["removedItems"] == preview["removedItems"]
        assert result["crossesCompaction"] == preview["crossesCompaction"]
        assert result["usage"]["usedTokens"] == preview["tokensAfter"]
        assert result.get("undoId") == self.note_operation(before)
        event(f"rollback: crosses a compaction {result['crossesCompaction']}")

    @rule()
    def snapshot(self) -> None:
        commit = self.call("ctxd/ghost/snapshot")
        active = self.active()
        assert active[-1]["type"] == "ghost_snapshot" and active[-1]["ghost_commit"]["id"] == commit["id"]
        self.recorded.append(active[-1])
        self.snapshots[commit["id"]] = active

    @precondition(lambda self: self.snapshots)
    @rule(data=st.data(), conversation=st.booleans())
    def restore(self, data: st.DataObject, conversation: bool) -> None:
        commit = data.draw(st.sampled_from(sorted(self.snapshots)))
        before = self.active()
        result = self.call("ctxd/ghost/restore", id=commit, conversation=conversation)
        if not conversation:
            assert self.active() == before and "operationId" not in result
            return
        assert self.active() == self.snapshots[commit]
        assert result["operationId"] == self.note_operation(before)
        self.restore_undo[result["operationId"]] = result["undoId"]

    @precondition(lambda self: self.known_ops)
    @rule()
    def undo_latest(self) -> None:
        op = self.latest()
        assert op is not None
        before = self.active()
        result = self.call("ctxd/undo", id=op)
        self.expect_undone(op)
        event(f"undo of the latest: {next(o['kind'] for o in self.operations() if o['id'] == op)}")
        assert result["undoId"] == self.note_operation(before)

    @precondition(lambda self: self.latest() in self.restore_undo)
    @rule()
    def restore_undo_id(self) -> None:
        op = self.latest()
        assert op is not None
        before = self.active()
        result = self.call("ctxd/ghost/restore", id=self.restore_undo[op], conversation=True)
        self.expect_undone(op)
        event("restore of an undoId")
        assert result["operationId"] == self.note_operation(before)
        self.restore_undo[result["operationId"]] = result["undoId"]

    @precondition(lambda self: len(self.known_ops) > 1)
    @rule(data=st.data())
    def undo_older(self, data: st.DataObject) -> None:
        op = data.draw(st.sampled_from(self.known_ops[:-1]))
        before = self.active()
        try:
            result = self.call("ctxd/undo", id=op)
        except RpcError as error:
            assert error.code == -32602 and "already undone" in error.message
            assert self.active() == before
            return
        assert result["undoId"] == self.note_operation(before)

    # --- after every step ----------------------------------------------------------------------

    @invariant()
    def nothing_is_lost(self) -> None:
        stored = [plain(item) for item in self.call("ctxd/history", includeArchived=True)["items"]]
        missing = [item for item in self.recorded if item not in stored]
        assert not missing, f"lost: {missing[:2]}"


@pytest.fixture(scope="module")
def machine_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Client, Path]]:
    from tests.rpc import start_daemon

    root = tmp_path_factory.mktemp("time-machine")
    folder, state = root / "ws", root / "state"
    folder.mkdir()
    state.mkdir()
    with FakeOpenAI() as fake:
        client = start_daemon(state, env=KEY_ENV, log_file=root / "daemon.log")
        try:
            client.initialize([folder], llm_options(fake))
            yield client, folder
        finally:
            if client.proc.poll() is None:
                client.shutdown(timeout=5)


def test_every_operation_composes_and_nothing_is_lost(machine_daemon: tuple[Client, Path]) -> None:
    TimeMachine.client, TimeMachine.folder = machine_daemon
    run_state_machine_as_test(TimeMachine, settings=settings(
        max_examples=15, stateful_step_count=12, deadline=None, derandomize=True, database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
