"""History operations as data: what each one took out of a thread's active history and brought
in, and what undoing it, rolling back across it or going back to an earlier point means.

A compaction, a rollback, a restore of the conversation and an undo each replace a thread's active
history; the store archives what they remove under their id and records, in their info, the
history before them (`before`), the seqs they archived (`removed`) and brought in (`added`), and
the last seq recorded before them (`seqMark`). Pure functions of those records: no SQL.

Undoing an operation is exact only while nothing after it stands in the way (`blocker`): the rule
of docs/protocol.md ("Every history operation can be undone; nothing is deleted"), which
tests/history_model.py models on its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from ctxd.ledger.store import THIS_OPERATION, Row

if TYPE_CHECKING:
    from ctxd.protocol.shapes import CompactionRecord, OperationKind, OperationRecord


@dataclass
class Operation:
    id: int
    created_at: float
    info: dict[str, Any]
    undone_by: int | None = None
    """The operation in effect that took this one out of effect, if any (worked out by `load`)."""

    @property
    def kind(self) -> OperationKind:
        return cast("OperationKind", str(self.info.get("kind", "compaction")))  # ctxd's first versions recorded compactions only

    @property
    def undoes(self) -> int | None:
        """An undo's target."""
        value = self.info.get("undoes")
        return value if isinstance(value, int) else None

    @property
    def cancels(self) -> list[int]:
        """The operations this one took out of effect (an undo's target, the compactions a rollback crossed)."""
        return [op for op in self.info.get("cancels") or [] if isinstance(op, int)]


def load(rows: Iterable[tuple[int, float, dict[str, Any]]]) -> list[Operation]:
    """A thread's operations, oldest first, each with `undone_by` worked out from what every later
    one took out of effect (`cancels`), newest first: the latest operation is in effect, and one
    in effect takes what it cancels out of effect. Each toggle of an undo and its redo flips every
    operation down their chain, so the `undoneBy` marks stored in the infos are not read (they are
    what ctxd's versions before issue #36 read; see `stored_marks`)."""
    ops = [Operation(oid, created, info) for oid, created, info in rows]
    cancelled_by: dict[int, int] = {}
    for op in reversed(ops):
        op.undone_by = cancelled_by.get(op.id)
        if op.undone_by is None:
            for cancelled in op.cancels:
                cancelled_by.setdefault(cancelled, op.id)
    return ops


def changes(op: Operation, rows: list[Row]) -> tuple[set[int], set[int]]:
    """The seqs `op` took out of the active history and the ones it brought in. A compaction of
    ctxd's first versions recorded neither: what it archived and what it wrote say it."""
    if "removed" in op.info:
        return set(op.info["removed"]), set(op.info.get("added") or [])
    return {r.seq for r in rows if r.archived == op.id}, {r.seq for r in rows if r.origin == op.id}


def undo_target(op: Operation, active: list[int], rows: list[Row]) -> list[int]:
    """The active history after undoing `op`: what it removed comes back, what it brought in goes,
    and whatever happened since stays. Exact when nothing stands in the way (`blocker`): right
    after `op`, exactly the history it replaced, with what was recorded since."""
    removed, added = changes(op, rows)
    return sorted((set(active) - added) | removed)


def stored_marks(cancels: list[int], by_id: dict[int, Operation]) -> dict[int, int | None]:
    """The `undoneBy` marks a new operation that takes `cancels` out of effect stores, for ctxd's
    versions before issue #36, which read them (this one works them out: `load`): each is undone
    by it, the ones each had taken out of effect are in effect again, and theirs out again. Two
    levels, as those versions wrote them: a chain of undos of undos is not followed further."""
    marks: dict[int, int | None] = {}
    for cancelled in cancels:
        marks[cancelled] = THIS_OPERATION
        op = by_id.get(cancelled)
        for again in op.cancels if op is not None else []:
            marks[again] = None
            other = by_id.get(again)
            for older in other.cancels if other is not None else []:
                marks[older] = again
    return marks


def touched(op: Operation, by_id: dict[int, Operation], rows: list[Row],
            known: dict[int, frozenset[int]] | None = None) -> frozenset[int]:
    """The seqs `op` took out or brought in, and those of the operations it took out of effect (an
    undo's target, a rollback's crossed compactions), and so on down. `known`: the answers so far,
    for a caller that asks about many operations (a long chain of undos of undos is walked once)."""
    known = {} if known is None else known
    pending = [op]
    while pending:  # what an operation took out of effect is known before it is
        current = pending[-1]
        if current.id in known:
            pending.pop()
            continue
        older = [by_id[other] for other in current.cancels if other < current.id and other in by_id]
        missing = [other for other in older if other.id not in known]
        if missing:
            pending += missing
            continue
        removed, added = changes(current, rows)
        known[current.id] = frozenset(removed | added).union(*(known[other.id] for other in older))
        pending.pop()
    return known[op.id]


def blocker(op: Operation, ops: list[Operation], rows: list[Row], ignoring: Iterable[int] = ()) -> Operation | None:
    """The newest operation after `op` that stands in the way of undoing it exactly, or None.

    An operation after `op` that is in effect stands in the way when it is a compaction (it
    summarised the history `op` left: undoing `op` under it would put back items beside the summary
    that stands for them), or when the items it changed (took out or brought in, its own and those
    of the operations it took out of effect) are not all after the items `op` changed: undoing `op`
    would take out what it brought back, bring back what it took out (or what its summary stands
    for), or bring items back past its cut. All before them will do for an undo (of an earlier
    operation), which cut nothing. An undo of an operation that came after `op` never stands in the
    way: the two leave no trace. `ignoring`: the compactions a rollback crosses on its way (taken
    out with it)."""
    by_id = {other.id: other for other in ops}
    skip = set(ignoring)
    known: dict[int, frozenset[int]] = {}
    mine: frozenset[int] | None = None
    for later in reversed(ops):
        if later.id <= op.id:
            return None
        if later.id in skip or later.undone_by is not None:
            continue
        if later.kind == "undo" and later.undoes is not None and later.undoes > op.id:
            continue  # it undid an operation after `op`, which is out of effect: together, no trace
        if later.kind == "compaction":
            return later
        if mine is None:
            mine = touched(op, by_id, rows, known)
        theirs = touched(later, by_id, rows, known)
        after = min(theirs, default=0) > max(mine, default=0)
        if not (after or later.kind == "undo" and max(theirs, default=0) < min(mine, default=0)):
            return later
    return None


KIND_NAMES = {"compaction": "a compaction", "rollback": "a rollback", "restore": "a restore with the conversation",
              "undo": "an undo"}


def refusal(op: Operation, blocking: Operation, thread: str, rows: list[Row]) -> str:
    """What an undo of `op` that `blocking` stands in the way of answers: which operation to undo
    first and why, in words a user reads in an editor's error message (the kinds and item counts
    are the ones the editors' history lists show)."""
    if blocking.kind == "rollback":
        why = ("it reached back past a compaction" if blocking.cancels else
               f"it dropped turns among those operation {op.id} changed or would bring back")
    else:
        why = {"compaction": f"it summarised the history as operation {op.id} left it",
               "restore": f"it put back the conversation of a snapshot, among the items operation {op.id} changed",
               "undo": f"it undid operation {blocking.undoes}, which came before operation {op.id}",
               }.get(blocking.kind, "it changed the history since")
    return (f"operation {op.id} ({_described(op, rows)}) of thread '{thread}' cannot be undone while a later "
            f"operation is in effect: operation {blocking.id} ({_described(blocking, rows)}) came after it and "
            f"{why.removeprefix('it ')}. Undo operation {blocking.id} first, then operation {op.id}. "
            "Nothing was changed.")


def _described(op: Operation, rows: list[Row]) -> str:
    before, after = _counts(op, rows)
    return f"{KIND_NAMES.get(op.kind, op.kind)}, {before} → {after} items"


def _counts(op: Operation, rows: list[Row]) -> tuple[int, int]:
    """The active history's length before and after `op` (worked out when its info does not say)."""
    before, after = op.info.get("itemsBefore"), op.info.get("itemsAfter")
    if isinstance(before, int) and isinstance(after, int):
        return before, after
    removed, added = changes(op, rows)
    return (before if isinstance(before, int) else len(op.info.get("before") or removed),
            after if isinstance(after, int) else len(added))


def history_as_of(point: int, ops: list[Operation], active: list[int]) -> list[int] | None:
    """The active history just after the item at seq `point` was recorded: the history before the
    first operation that came after it, up to that item (only records came in between). None when
    a compaction of ctxd's first versions (which recorded no history) may be in the way."""
    for op in ops:
        mark = op.info.get("seqMark")
        if not isinstance(mark, int) or not isinstance(op.info.get("before"), list):
            return None
        if mark >= point:
            return [seq for seq in op.info["before"] if seq <= point]
    return [seq for seq in active if seq <= point]


def _instant(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, UTC).isoformat()


def wire(ops: list[Operation], rows: list[Row]) -> list[OperationRecord]:
    """`ctxd/history`'s `operations`, oldest first."""
    listed: list[OperationRecord] = []
    for op in ops:
        before, after = _counts(op, rows)
        record: OperationRecord = {
            "id": op.id, "kind": op.kind, "createdAt": _instant(op.created_at), "itemsBefore": before, "itemsAfter": after,
            "tokensBefore": op.info.get("tokensBefore"), "tokensAfter": op.info.get("tokensAfter"),
        }
        if op.undone_by is not None:
            record["undoneBy"] = op.undone_by
        listed.append(record)
    return listed


def compactions_wire(ops: list[Operation], rows: list[Row]) -> list[CompactionRecord]:
    """`ctxd/history`'s `compactions` (protocol v2), oldest first: what each replaced and wrote."""
    listed: list[CompactionRecord] = []
    for op in ops:
        if op.kind != "compaction":
            continue
        removed, added = changes(op, rows)
        compaction: CompactionRecord = {
            "id": op.id, "createdAt": _instant(op.created_at), "strategy": op.info.get("strategy"),
            "automatic": bool(op.info.get("automatic")), "tokensBefore": op.info.get("tokensBefore"),
            "tokensAfter": op.info.get("tokensAfter"), "archivedItems": len(removed), "writtenItems": len(added),
        }
        if op.undone_by is not None:
            compaction["undoneBy"] = op.undone_by
        listed.append(compaction)
    return listed
