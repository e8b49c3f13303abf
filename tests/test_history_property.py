"""The time machine as a property (issues #26, #36): random sequences of record, snapshot, compact
(offline, auto, llm and remote, against tests/fake_openai.py), rollback, restore with and without
the conversation, and undo of any earlier operation (or of its safety snapshot), on one real daemon
(a fresh thread per example), compared after every step with the reference model of
tests/history_model.py (tests/history_harness.py does the comparing):

- the active history, every item with `includeArchived` (archived ones and by whom), and the
  operations (`kind`, `itemsBefore`, `itemsAfter`, `undoneBy`) are the model's;
- an undo the rule refuses is refused with -32602 and a message naming the operation to undo
  first, and changes nothing;
- no recorded item is ever lost, no user turn is active twice (as itself or a compaction's copy);
- a compaction never drops what an earlier summary said.

The model itself is checked on its own (many more sequences, no daemon): undoing the latest
operation gives exactly the history before it plus what was recorded since, an undo and its redo
give back the same history, and undoing the operation a refusal names, then the refused one,
always ends in the refused undo being done.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from tests.fake_openai import FakeOpenAI
from tests.history_harness import STRATEGIES, HistoryHarness
from tests.history_model import Refusal, ThreadModel
from tests.rpc import Client
from tests.test_codex_parity import KEY_ENV, llm_options

UNKNOWN = 10**9  # an operation id no thread has


class TimeMachine(RuleBasedStateMachine):
    client: Client
    folder: Path
    threads = itertools.count()

    def __init__(self) -> None:
        super().__init__()
        self.h = HistoryHarness(self.client, self.folder, f"prop-{next(self.threads)}")

    def done(self, problems: list[str]) -> None:
        assert not problems, problems

    @rule(count=st.integers(1, 2), size=st.sampled_from([5, 150]))
    def record(self, count: int, size: int) -> None:
        self.done(self.h.record(count, size))

    @rule()
    def snapshot(self) -> None:
        self.done(self.h.snapshot())

    @precondition(lambda self: self.h.turns)
    @rule(strategy=st.sampled_from(STRATEGIES))
    def compact(self, strategy: str) -> None:
        self.done(self.h.compact(strategy))

    @precondition(lambda self: self.h.turns)
    @rule(turns=st.integers(1, 3))
    def rollback(self, turns: int) -> None:
        self.done(self.h.rollback(turns))

    @precondition(lambda self: self.h.model.snapshots)
    @rule(data=st.data(), conversation=st.booleans())
    def restore(self, data: st.DataObject, conversation: bool) -> None:
        self.done(self.h.restore(data.draw(st.sampled_from(list(self.h.model.snapshots))), conversation))

    @precondition(lambda self: self.h.restore_ops())
    @rule(data=st.data())
    def restore_undo_id(self, data: st.DataObject) -> None:
        self.done(self.h.restore_undo_id(data.draw(st.sampled_from(self.h.restore_ops()))))

    @precondition(lambda self: self.h.op_ids())
    @rule(data=st.data())
    def undo(self, data: st.DataObject) -> None:
        """Undo an operation in effect (older ones included), or now and then any other id."""
        in_effect = [op.id for op in self.h.model.ops if op.in_effect]
        self.done(self.h.undo(data.draw(st.sampled_from(in_effect) | st.sampled_from([*self.h.op_ids(), UNKNOWN]))))

    @precondition(lambda self: len(self.h.op_ids()) > 1)
    @rule(data=st.data())
    def undo_older(self, data: st.DataObject) -> None:
        self.done(self.h.undo(data.draw(st.sampled_from(self.h.op_ids()[:-1]))))

    @invariant()
    def as_the_model_says(self) -> None:
        self.done(self.h.check())


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


def test_every_operation_composes_as_the_model_says(machine_daemon: tuple[Client, Path]) -> None:
    TimeMachine.client, TimeMachine.folder = machine_daemon
    run_state_machine_as_test(TimeMachine, settings=settings(
        max_examples=35, stateful_step_count=20, deadline=None, derandomize=True, database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))


# --- the model on its own ------------------------------------------------------------------------


class ModelMachine(RuleBasedStateMachine):
    """The rule's invariants, on the model alone (a compaction writes a copy of each user turn and
    a summary, as the offline one does)."""

    def __init__(self) -> None:
        super().__init__()
        self.m = ThreadModel()
        self.ids = itertools.count(1)
        self.turns = 0
        self.snapshot_ids = itertools.count(1)

    def record_turn(self) -> None:
        self.m.record([{"turn": self.turns}, {"answer": self.turns}], [True, False])
        self.turns += 1

    @rule(count=st.integers(1, 3))
    def record(self, count: int) -> None:
        for _ in range(count):
            self.record_turn()

    @rule()
    def snapshot(self) -> None:
        commit = f"s{next(self.snapshot_ids)}"
        self.m.snapshot(commit, {"snapshot": commit})

    @precondition(lambda self: self.m.active)
    @rule()
    def compact(self) -> None:
        copies = [{"copy": self.m.items[seq].body} for seq in self.m.active if self.m.items[seq].turn_start]
        self.m.compaction(next(self.ids), [*copies, {"summary": len(self.m.ops)}])

    @rule(turns=st.integers(1, 4))
    def rollback(self, turns: int) -> None:
        change, _ = self.m.plan_rollback(turns)
        if change is not None:
            self.m.apply(change, next(self.ids))

    @precondition(lambda self: self.m.snapshots)
    @rule(data=st.data())
    def restore(self, data: st.DataObject) -> None:
        commit = data.draw(st.sampled_from(list(self.m.snapshots)))
        try:
            change = self.m.plan_restore(commit, f"safety{next(self.snapshot_ids)}")
        except Refusal as refusal:
            assert refusal.reason == "in the way"
            return
        if change is not None:
            self.m.apply(change, next(self.ids))
            if change.kind == "restore":
                assert self.m.active == self.m.snapshots[commit]

    @precondition(lambda self: self.m.ops)
    @rule(data=st.data(), redo=st.booleans())
    def undo(self, data: st.DataObject, redo: bool) -> None:
        op = self.m.by_id(data.draw(st.sampled_from([op.id for op in self.m.ops])))
        assert op is not None
        latest = op is self.m.ops[-1]
        since = [seq for seq in self.m.active if seq > max(op.before + op.after, default=0)]
        before = list(self.m.active)
        try:
            undo = self.m.apply(self.m.plan_undo(op.id), next(self.ids))
        except Refusal as refusal:
            assert not latest and refusal.reason in ("already undone", "in the way")
            if refusal.reason == "in the way":
                self.follow(refusal)
            return
        if latest:  # exactly the history before it, and what was recorded since
            assert self.m.active == sorted(op.before + since)
        assert op.undone_by == undo.id
        if redo:
            self.m.apply(self.m.plan_undo(undo.id), next(self.ids))
            assert self.m.active == before and op.in_effect

    def follow(self, refusal: Refusal) -> None:
        """Undoing what a refusal names, again and again, ends in the refused undo being done."""
        pending = [refusal.op]
        while pending:
            try:
                self.m.apply(self.m.plan_undo(pending[-1]), next(self.ids))
                pending.pop()
            except Refusal as again:
                assert again.reason == "in the way" and again.by is not None and len(pending) < 100
                pending.append(again.by)

    @invariant()
    def holds(self) -> None:
        assert not self.m.duplicates()
        assert not self.m.consistent()
        assert len(set(self.m.active)) == len(self.m.active) and self.m.active == sorted(self.m.active)


def test_the_model_keeps_its_invariants() -> None:
    run_state_machine_as_test(ModelMachine, settings=settings(
        max_examples=400, stateful_step_count=30, deadline=None, derandomize=True, database=None,
        suppress_health_check=[HealthCheck.too_slow]))
