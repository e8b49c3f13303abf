"""History operations as data: what each one took out of a thread's active history and brought
in, and what undoing it, rolling back across it or going back to an earlier point means.

A compaction, a rollback, a restore of the conversation and an undo each replace a thread's active
history; the store archives what they remove under their id and records, in their info, the
history before them (`before`), the seqs they archived (`removed`) and brought in (`added`), and
the last seq recorded before them (`seqMark`). Pure functions of those records: no SQL.
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

    @property
    def kind(self) -> OperationKind:
        return cast("OperationKind", str(self.info.get("kind", "compaction")))  # ctxd's first versions recorded compactions only

    @property
    def undone_by(self) -> int | None:
        value = self.info.get("undoneBy")
        return value if isinstance(value, int) else None

    @property
    def cancels(self) -> list[int]:
        """The operations this one took out of effect (an undo's target, the compactions a rollback crossed)."""
        return [op for op in self.info.get("cancels") or [] if isinstance(op, int)]


def load(rows: Iterable[tuple[int, float, dict[str, Any]]]) -> list[Operation]:
    return [Operation(oid, created, info) for oid, created, info in rows]


def changes(op: Operation, rows: list[Row]) -> tuple[set[int], set[int]]:
    """The seqs `op` took out of the active history and the ones it brought in. A compaction of
    ctxd's first versions recorded neither: what it archived and what it wrote say it."""
    if "removed" in op.info:
        return set(op.info["removed"]), set(op.info.get("added") or [])
    return {r.seq for r in rows if r.archived == op.id}, {r.seq for r in rows if r.origin == op.id}


def undo_target(op: Operation, active: list[int], rows: list[Row]) -> list[int]:
    """The active history after undoing `op`: what it removed comes back, what it brought in goes,
    and whatever happened since (items recorded after it) stays. Right after `op`, exactly the
    history it replaced."""
    removed, added = changes(op, rows)
    return sorted((set(active) - added) | removed)


def undo_marks(op: Operation, by_id: dict[int, Operation]) -> dict[int, int | None]:
    """The `undoneBy` changes undoing `op` makes: `op` is undone by the new operation, the
    operations it had undone are in effect again, and so the ones those had undone are out again."""
    marks: dict[int, int | None] = {op.id: THIS_OPERATION}
    for cancelled in op.cancels:
        marks[cancelled] = None
        other = by_id.get(cancelled)
        for again in other.cancels if other is not None else []:
            marks[again] = cancelled
    return marks


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
        removed, added = changes(op, rows)
        record: OperationRecord = {
            "id": op.id, "kind": op.kind, "createdAt": _instant(op.created_at),
            "itemsBefore": op.info.get("itemsBefore", len(op.info.get("before") or removed)),
            "itemsAfter": op.info.get("itemsAfter", len(added)),
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
