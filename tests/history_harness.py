"""One thread of a real daemon stepped together with its reference model (tests/history_model.py).

Each step sends the daemon one request (record, snapshot, compact, rollback, restore, undo), does
the same to the model, and returns the problems it found, each starting with its kind:
`disagree` (the daemon's history, operations or answer differ from the model's), `duplicate` (a
user turn active twice), `lost` (a recorded item in no listing) or `unclear refusal` (an undo
refused with another code, or a message that does not say which operation to undo first). The
state machine of tests/test_history_property.py asserts there are none; bench/round3_history.py
counts them over many random sequences.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from tests.history_model import Change, Refusal, ThreadModel
from tests.rpc import Client, RpcError

SUMMARY_PREFIX = "[Handoff summary]"
COUNT = re.compile(r" ×\d+$")
INVALID_PARAMS = -32602
COMPACTION_FAILED = 1001
STRATEGIES = ("offline", "auto", "llm", "remote")
_ids = itertools.count(1)


def message(role: str, text: str) -> dict[str, Any]:
    """A message with an `id` of its own: a compaction's copies carry none, so a recorded item is
    told from what a compaction wrote."""
    part = "input_text" if role == "user" else "output_text"
    return {"type": "message", "role": role, "id": f"m{next(_ids)}", "content": [{"type": part, "text": text}]}


def turn(n: int, size: int) -> list[dict[str, Any]]:
    """User turn `n`: the user's message, a tool call and its output of `size` lines, the answer."""
    log = "".join(f"tests/test_mod_{n}.py::test_{i} PASSED\n" for i in range(size))
    call_id = f"call{next(_ids)}"
    return [message("user", f"turn {n}: fix bug {n} in src/mod_{n}.py; never touch the public API"),
            {"type": "function_call", "call_id": call_id, "name": "shell",
             "arguments": json.dumps({"cmd": f"pytest -q tests/test_mod_{n}.py"})},
            {"type": "function_call_output", "call_id": call_id,
             "output": log + f"E   ValueError: bug {n} in src/mod_{n}.py\nexit code: 1"},
            message("assistant", f"Decided to rewrite src/mod_{n}.py; bug {n} is next.")]


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


def user_texts(items: list[dict[str, Any]]) -> list[str]:
    """The texts of the user turns among `items`, whether recorded or a compaction's copy."""
    return [part.get("text", "") for item in items if item.get("type") == "message" and item.get("role") == "user"
            for part in item.get("content") or [] if part.get("text", "").startswith("turn ")]


class HistoryHarness:
    def __init__(self, client: Client, folder: Path, thread: str) -> None:
        self.client, self.folder, self.thread = client, folder, thread
        self.model = ThreadModel()
        self.turns = 0
        self.recorded: list[dict[str, Any]] = []
        self.tally: Counter[str] = Counter()  # what the steps did (the bench reports it)

    def call(self, method: str, **params: Any) -> Any:
        return self.client.request(method, {"workspace": self.folder.as_uri(), "thread": self.thread, **params})

    def active(self) -> list[dict[str, Any]]:
        return self.call("ctxd/history")["items"]

    def op_ids(self) -> list[int]:
        return [op.id for op in self.model.ops]

    def restore_ops(self) -> list[int]:
        """The operations whose safety snapshot a restore with the conversation would undo."""
        return [op.id for op in self.model.ops if op.undo_snapshot is not None]

    # --- steps -----------------------------------------------------------------------------------

    def record(self, count: int, size: int) -> list[str]:
        items = [item for n in range(count) for item in turn(self.turns + n, size)]
        self.turns += count
        self.call("ctxd/record", items=items)
        self.recorded += items
        self.model.record(items, [item.get("role") == "user" for item in items])
        return []

    def snapshot(self) -> list[str]:
        commit = self.call("ctxd/ghost/snapshot")
        item = self.active()[-1]
        if item.get("type") != "ghost_snapshot" or item["ghost_commit"]["id"] != commit["id"]:
            return [f"disagree: the snapshot {commit['id']} is not the last active item"]
        self.recorded.append(item)
        self.model.snapshot(commit["id"], item)
        return []

    def compact(self, strategy: str) -> list[str]:
        before = self.active()
        try:
            result = self.call("ctxd/compact", strategy=strategy)
        except RpcError as error:
            # Only an unnamed strategy may refuse a thread a model can read (nothing worth compacting).
            readable = any(item["type"] != "ghost_snapshot" for item in before)
            if error.code != COMPACTION_FAILED or (strategy not in ("offline", "auto") and readable):
                return [f"disagree: compaction {strategy} failed: {error.code} {error.message}"]
            return []
        after = self.active()
        self.tally[f"compaction {strategy}"] += 1
        self.model.compaction(result["undoId"], after)
        said = "\n".join(part.get("text", "") for item in after if item.get("role") == "user"
                         for part in item.get("content") or [])
        return [f"lost: the {strategy} compaction dropped the summary's {fact!r}"
                for fact in summary_facts(before) if fact not in said]

    def rollback(self, turns: int) -> list[str]:
        change, dropped = self.model.plan_rollback(turns)
        preview = self.call("ctxd/rollback", turns=turns, dryRun=True)
        crosses = bool(change and change.cancels)
        problems = []
        if (preview["removedItems"], preview["crossesCompaction"]) != (dropped, crosses):
            problems.append(f"disagree: rollback {turns} dry run says {preview['removedItems']} items, crossing "
                            f"{preview['crossesCompaction']}; the model {dropped}, {crosses}")
        result = self.call("ctxd/rollback", turns=turns)
        self.tally["rollback across a compaction" if crosses else "rollback"] += change is not None
        return problems + self._applied(change, result.get("undoId"), f"rollback {turns}")

    def restore(self, commit: str, conversation: bool) -> list[str]:
        try:
            change = self.model.plan_restore(commit, None) if conversation else None
        except Refusal as refusal:
            return self._refused(refusal, "ghost/restore", id=commit, conversation=True)
        result = self.call("ctxd/ghost/restore", id=commit, conversation=conversation)
        self.tally[f"restore ({change.kind if change else 'files only'})"] += 1
        if change is not None:
            change.undo_snapshot = result["undoId"]
        return self._applied(change, result.get("operationId"), f"restore of {commit} (conversation {conversation})")

    def restore_undo_id(self, op_id: int) -> list[str]:
        """Restore with the conversation the safety snapshot of operation `op_id`."""
        op = self.model.by_id(op_id)
        assert op is not None and op.undo_snapshot is not None
        return self.restore(op.undo_snapshot, True)

    def undo(self, op_id: int) -> list[str]:
        try:
            change = self.model.plan_undo(op_id)
        except Refusal as refusal:
            return self._refused(refusal, "undo", id=op_id)
        op = self.model.by_id(op_id)
        self.tally[f"undo of the {'latest' if op is self.model.ops[-1] else 'older'} {op.kind if op else ''}"] += 1
        try:
            result = self.call("ctxd/undo", id=op_id)
        except RpcError as error:
            return [f"disagree: undo of {op_id} refused ({error.message}); the model allows it"]
        return self._applied(change, result["undoId"], f"undo of {op_id}")

    # --- checks ----------------------------------------------------------------------------------

    def _applied(self, change: Change | None, op_id: int | None, what: str) -> list[str]:
        if (change is None) != (op_id is None):
            return [f"disagree: {what} made operation {op_id}; the model expected "
                    f"{'none' if change is None else 'one'}"]
        if change is not None and op_id is not None:
            self.model.apply(change, op_id)
        return []

    def _refused(self, refusal: Refusal, method: str, **params: Any) -> list[str]:
        """The daemon must refuse as the model does, with a message that says what to do."""
        before = self.active()
        try:
            self.call(f"ctxd/{method}", **params)
        except RpcError as error:
            self.tally[f"{method} refused: {refusal.reason}"] += 1
            problems = [] if self.active() == before else [f"disagree: a refused {method} changed the history"]
            if error.code != INVALID_PARAMS:
                return problems + [f"unclear refusal: {method} {params} answered {error.code}: {error.message}"]
            wanted = {"unknown": [f"no history operation {refusal.op}"],
                      "already undone": ["already undone", f"operation {refusal.by}"],
                      "in the way": [f"Undo operation {refusal.by} first"]}[refusal.reason]
            if not all(words in error.message for words in wanted):
                problems.append(f"unclear refusal: {method} {params} ({refusal.reason}, by {refusal.by}): "
                                f"{error.message!r}")
            return problems
        return [f"disagree: {method} {params} was done; the model refuses it ({refusal.reason}, by {refusal.by})"]

    def check(self) -> list[str]:
        """The daemon's history against the model's, and the invariants of both."""
        everything = self.call("ctxd/history", includeArchived=True)
        stored = [{k: v for k, v in item.items() if k not in ("archived", "archivedBy")} for item in everything["items"]]
        problems = [f"lost: {json.dumps(item)[:120]}" for item in self.recorded if item not in stored]
        active = self.active()
        texts = user_texts(active)
        problems += [f"duplicate: {text[:40]!r} is active {texts.count(text)} times" for text in sorted(set(texts))
                     if texts.count(text) > 1]
        problems += [f"duplicate (model): {found}" for found in self.model.duplicates()]
        problems += [f"disagree (model): {found}" for found in self.model.consistent()]
        if active != self.model.active_bodies():
            problems.append(f"disagree: active history {_brief(active)}; the model {_brief(self.model.active_bodies())}")
        if everything["items"] != self.model.all_bodies():
            problems.append("disagree: the archived items or their archivedBy differ from the model's")
        listed = [{k: op[k] for k in ("id", "kind", "itemsBefore", "itemsAfter", "undoneBy") if k in op}
                  for op in everything["operations"]]
        if listed != self.model.operations():
            problems.append(f"disagree: operations {listed}; the model {self.model.operations()}")
        return problems


def _brief(items: list[dict[str, Any]]) -> str:
    """A history in a few words: each user turn's number, S for a summary, g for a snapshot, . for the rest."""
    marks = []
    for item in items:
        text = next((part.get("text", "") for part in item.get("content") or []), "") if item.get("role") == "user" else ""
        if text.startswith("turn "):
            marks.append(text.split(":")[0].removeprefix("turn ") + ("'" if "id" not in item else ""))
        elif text.startswith(SUMMARY_PREFIX):
            marks.append("S")
        else:
            marks.append("g" if item.get("type") == "ghost_snapshot" else ".")
    return " ".join(marks)
