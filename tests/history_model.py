"""A reference model of one thread's history under its operations (issue #36), written from
docs/protocol.md's rule ("Every history operation can be undone; nothing is deleted"), not from
ctxd's code: the state machine of tests/test_history_property.py and bench/round3_history.py
compare the real daemon with it after every step.

The active history is a list of item identities (seqs: every item recorded or written gets the
next one, so the list is kept in seq order). An operation replaces it: its `removed` are the items
it took out, its `added` the items it brought in (new ones a compaction wrote, archived ones a
rollback, a restore or an undo brought back). The rule:

- a compaction replaces the whole active history with what it wrote;
- a rollback drops the last N user turns; with fewer in the active history, it first crosses the
  compactions in effect, newest first (each as an undo of it, so only while that undo is allowed,
  the ones crossed counting as undone), then drops every user turn it has;
- a restore with the conversation makes the active history what it was just after the snapshot
  was recorded; restoring a restore's (or its undo's) safety snapshot undoes that operation;
- undoing an operation X that is in effect: what X took out comes back, what X brought in goes,
  what came since stays. Exact only while nothing that came since stands in the way, so it is
  refused, naming the newest operation that does, while an operation after X is in effect that is
  a compaction (it summarised the history X left), or that changed items (took out or brought in,
  itself or through the operations it took out of effect) not all after the items X changed (all
  before them will do for an undo, which, unlike a rollback or a restore, cut nothing after what it
  changed). An operation that was undone, and the undo that undid it, leave no trace and never
  stand in the way; undoing the named operation first always makes progress, and undoing the
  latest operation is always allowed (that gives exactly the history before it, with what was
  recorded since). An undo is an operation: undoing it redoes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

UNDO_KINDS = ("compaction", "rollback", "restore", "undo")


@dataclass
class Item:
    seq: int
    body: dict[str, Any]
    writer: tuple[str, int]
    """("record", seq) for an item recorded, ("compaction", op id) for one a compaction wrote."""
    sources: frozenset[int]
    """The recorded items it stands for: itself, or everything the compaction that wrote it replaced."""
    turn_start: bool = False
    archived_by: int | None = None


@dataclass
class Op:
    id: int
    kind: str
    before: list[int]
    after: list[int]
    undoes: int | None = None
    cancels: list[int] = field(default_factory=list)
    """The operations it takes out of effect: an undo's target, the compactions a rollback crossed."""
    undone_by: int | None = None
    undo_snapshot: str | None = None

    @property
    def removed(self) -> set[int]:
        return set(self.before) - set(self.after)

    @property
    def added(self) -> set[int]:
        return set(self.after) - set(self.before)

    @property
    def in_effect(self) -> bool:
        return self.undone_by is None


@dataclass
class Change:
    """An operation about to be applied: its kind and the active history after it."""

    kind: str
    after: list[int]
    undoes: int | None = None
    cancels: list[int] = field(default_factory=list)
    undo_snapshot: str | None = None


class Refusal(Exception):
    """An undo the rule refuses. `reason`: "unknown", "already undone" (by `by`) or "in the way"
    (`by`, a later operation in effect, stands in the way)."""

    def __init__(self, reason: str, op: int, by: int | None = None) -> None:
        super().__init__(f"{reason}: {op} (by {by})")
        self.reason, self.op, self.by = reason, op, by


class ThreadModel:
    def __init__(self) -> None:
        self.items: dict[int, Item] = {}
        self.active: list[int] = []
        self.ops: list[Op] = []
        self.snapshots: dict[str, list[int]] = {}  # commit id -> the active history just after it was recorded
        self.next_seq = 1

    # --- what is recorded and written --------------------------------------------------------------

    def record(self, bodies: list[dict[str, Any]], turn_starts: list[bool]) -> list[int]:
        seqs = []
        for body, start in zip(bodies, turn_starts, strict=True):
            seq = self._new_seq()
            self.items[seq] = Item(seq, body, ("record", seq), frozenset({seq}), start)
            self.active.append(seq)
            seqs.append(seq)
        return seqs

    def snapshot(self, commit: str, body: dict[str, Any]) -> None:
        self.record([body], [False])
        self.snapshots[commit] = list(self.active)

    def compaction(self, op_id: int, bodies: list[dict[str, Any]]) -> Op:
        """The whole active history replaced by `bodies`, written as new items."""
        sources = frozenset().union(*(self.items[seq].sources for seq in self.active))
        written = []
        for body in bodies:
            seq = self._new_seq()
            self.items[seq] = Item(seq, body, ("compaction", op_id), sources)
            written.append(seq)
        return self.apply(Change("compaction", written), op_id)

    def _new_seq(self) -> int:
        seq, self.next_seq = self.next_seq, self.next_seq + 1
        return seq

    # --- the rule --------------------------------------------------------------------------------

    def by_id(self, op_id: int) -> Op | None:
        return next((op for op in self.ops if op.id == op_id), None)

    def touched(self, op: Op) -> set[int]:
        """The items `op` took out or brought in, and those of the operations it took out of effect
        (a rollback's crossed compactions, an undo's target), and so on down."""
        found: set[int] = set()
        pending = [op]
        while pending:
            current = pending.pop()
            found |= current.removed | current.added
            pending += [cancelled for oid in current.cancels if (cancelled := self.by_id(oid)) is not None]
        return found

    def blocker(self, op: Op, ignoring: set[int] | None = None) -> Op | None:
        """The newest operation after `op` that stands in the way of undoing it, if any."""
        touched = self.touched(op)
        for later in reversed(self.ops):
            if later.id == op.id:
                return None
            if later.id in (ignoring or set()) or not later.in_effect:
                continue
            if later.kind == "undo" and later.undoes is not None and later.undoes > op.id:
                continue  # it undid an operation after `op`: the two left no trace
            if not self.cuts_after(later, op, touched):
                return later
        return None

    def cuts_after(self, later: Op, op: Op, touched: set[int]) -> bool:
        """Whether `later`, in effect after `op`, leaves undoing `op` exact: every item it changed
        comes after every item `op` changed (`touched`), or it is an undo (of an operation before
        `op`: a rollback or a restore cut the history, and what follows its cut stays out) and
        every item it changed comes before them."""
        theirs = self.touched(later)
        if later.kind == "compaction":
            return False
        return (min(theirs, default=0) > max(touched, default=0)
                or later.kind == "undo" and max(theirs, default=0) < min(touched, default=0))

    def plan_undo(self, op_id: int) -> Change:
        op = self.by_id(op_id)
        if op is None:
            raise Refusal("unknown", op_id)
        if not op.in_effect:
            raise Refusal("already undone", op_id, op.undone_by)
        blocker = self.blocker(op)
        if blocker is not None:
            raise Refusal("in the way", op_id, blocker.id)
        return Change("undo", sorted((set(self.active) - op.added) | op.removed), undoes=op.id, cancels=[op.id])

    def turns(self, seqs: list[int]) -> int:
        return sum(self.items[seq].turn_start for seq in seqs)

    def plan_rollback(self, turns: int) -> tuple[Change | None, int]:
        """The rollback of `turns` user turns (None when it changes nothing) and how many items it drops."""
        entries, crossed = list(self.active), []
        for op in reversed(self.ops):
            if self.turns(entries) >= turns:
                break
            if op.kind != "compaction" or not op.in_effect or not op.added & set(entries):
                continue
            if self.blocker(op, set(crossed)) is not None:
                break
            entries = sorted((set(entries) - op.added) | op.removed)
            crossed.append(op.id)
        starts = [n for n, seq in enumerate(entries) if self.items[seq].turn_start]
        kept = entries[:starts[max(0, len(starts) - turns)]] if starts else entries
        if kept == self.active:
            return None, 0
        return Change("rollback", kept, cancels=crossed), len(entries) - len(kept)

    def plan_restore(self, commit: str, safety: str | None) -> Change | None:
        """Restoring snapshot `commit` with the conversation (`safety`: the restore's own safety
        snapshot). None when it is the safety snapshot of an operation already undone."""
        for op in reversed(self.ops):
            if op.undo_snapshot == commit:
                if not op.in_effect:
                    return None
                change = self.plan_undo(op.id)
                change.undo_snapshot = safety
                return change
        return Change("restore", list(self.snapshots[commit]), undo_snapshot=safety)

    def apply(self, change: Change, op_id: int) -> Op:
        op = Op(op_id, change.kind, list(self.active), list(change.after), change.undoes, list(change.cancels),
                undo_snapshot=change.undo_snapshot)
        for seq in op.removed:
            self.items[seq].archived_by = op_id
        for seq in op.added:
            self.items[seq].archived_by = None
        self.active = list(change.after)
        self.ops.append(op)
        for cancelled in op.cancels:
            self._mark(cancelled, op_id)
        return op

    def _mark(self, op_id: int, by: int | None) -> None:
        """`op_id` undone by `by` (or in effect again, None): the operations it had taken out of
        effect are in effect again (or out again, undone by it), and so on down."""
        pending = [(op_id, by)]
        while pending:
            target, undone_by = pending.pop()
            op = self.by_id(target)
            assert op is not None
            op.undone_by = undone_by
            pending += [(cancelled, op.id if undone_by is None else None) for cancelled in op.cancels]

    # --- what ctxd/history must show ---------------------------------------------------------------

    def active_bodies(self) -> list[dict[str, Any]]:
        return [self.items[seq].body for seq in self.active]

    def all_bodies(self) -> list[dict[str, Any]]:
        """`ctxd/history` with `includeArchived`: every item, in seq order, archived ones marked."""
        listed = []
        for seq in sorted(self.items):
            item = self.items[seq]
            extra = {} if item.archived_by is None else {"archived": True, "archivedBy": item.archived_by}
            listed.append(item.body | extra)
        return listed

    def operations(self) -> list[dict[str, Any]]:
        """`operations` of `ctxd/history`, less the times and tokens."""
        listed = []
        for op in self.ops:
            record: dict[str, Any] = {"id": op.id, "kind": op.kind, "itemsBefore": len(op.before),
                                      "itemsAfter": len(op.after)}
            if op.undone_by is not None:
                record["undoneBy"] = op.undone_by
            listed.append(record)
        return listed

    # --- invariants ----------------------------------------------------------------------------

    def duplicates(self) -> list[str]:
        """Recorded items the active history holds twice (as themselves or in what a compaction wrote)."""
        seen: dict[int, tuple[str, int]] = {}
        found = []
        for seq in self.active:
            item = self.items[seq]
            for source in item.sources:
                if seen.setdefault(source, item.writer) != item.writer:
                    found.append(f"item {source} is active as {seen[source]} and as {item.writer}")
        return found

    def consistent(self) -> list[str]:
        """Every item is active or archived by an operation, never both, never neither."""
        active = set(self.active)
        return [f"item {seq}: active {seq in active}, archived by {item.archived_by}"
                for seq, item in self.items.items() if (seq in active) == (item.archived_by is not None)]
