"""A workspace's writes: record, report usage, set the prompt context, the history operations
(rollback, undo, restore, compaction) and the mirroring of followed sessions.

Every write goes to the store and the loaded ledger together, under the workspace's lock, and
tells the listener the new usage (`_changed`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, overload

from ctxd import redact
from ctxd.errors import CompactionFailed, InvalidParams
from ctxd.ledger import bodies, operations
from ctxd.ledger.rules import is_real_user_message, message_text
from ctxd.ledger.store import THIS_OPERATION, HistoryChanged, Row, WouldWait, body_digest
from ctxd.ledger.thread import Entry, ThreadLedger, is_user_turn_start, rollback_start
from ctxd.ledger.truncation import truncate_tool_output, with_serialization_allowance
from ctxd.tokens import prompt_cache
from ctxd.tokens.counter import TOKENIZERS, Counter, count_item
from ctxd.workspace.core import AWAITING_REPORT, WorkspaceCore, agent_title, followed_agent, item_text

if TYPE_CHECKING:
    from ctxd.protocol.shapes import RecordResult, RollbackResult, UndoResult, UsageSnapshot

# How many senders' last record numbers an `acp:` thread keeps (`record_followed`): one proxy per
# run of the session, so only a thread loaded again and again forgets its oldest.
MAX_SENDERS = 64
# A followed session listed before it is mirrored: its thread, fill, context (model, window) and info.
Listed = tuple[str, int | None, dict[str, Any], dict[str, Any]]


class WorkspaceWrites(WorkspaceCore):
    """The requests that change a workspace's threads."""

    def _changed(self, ledger: ThreadLedger) -> UsageSnapshot:
        """After a write: keep the facts `ctxd usage` needs (written only when they changed), tell
        the listener (the status-bar push), and return the new usage."""
        facts = self.view.facts(ledger)
        if (ledger.state or {}).get("usageSettings") != facts:
            self._update_state(ledger, usageSettings=facts)
        usage = self.view.usage(ledger)
        if self.listener is not None:
            self.listener(self.uri, ledger.thread, usage)
        return usage

    def check_writable(self, thread: str) -> None:
        """Refuse a client's write to a followed session's thread (-32602)."""
        agent = followed_agent(thread)
        if agent is not None:
            raise InvalidParams(f"thread '{thread}' follows {agent_title(agent)}'s session: the agent owns "
                                "that history (read-only)")

    def _rows(self, thread: str, items: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[tuple[str, int]]]:
        """What is stored of valid items: system messages dropped, long tool outputs truncated,
        every item counted. Done outside the lock: counting a long output takes a while."""
        kept = self._kept(items)
        count = self._counter(thread)
        return kept, [(item_text(item), count_item(item, count)) for item in kept]

    def _rows_of_each(self, thread: str, items: Iterator[dict[str, Any]]) -> list[tuple[str, int]]:
        """`_rows` of items that come one at a time (a huge frame's: `ctxd.protocol.items.record_items`),
        none of them kept parsed once its row is made."""
        count = self._counter(thread)
        return [(item_text(item), count_item(item, count)) for item in map(self._kept_item, items) if item is not None]

    def _counter(self, thread: str) -> Callable[[str], int]:
        with self.lock:
            return self.view.counter(self.cache.loaded(self.store, thread)).count

    def _kept(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """What is stored of valid items, before counting: system messages dropped, long tool
        outputs truncated, the configured API key redacted."""
        return [kept for kept in map(self._kept_item, items) if kept is not None]

    def _kept_item(self, item: dict[str, Any]) -> dict[str, Any] | None:
        """What is stored of one valid item (`_kept`); None for a system message."""
        if item.get("type") == "message" and item.get("role") == "system":
            return None
        item = truncate_tool_output(item, with_serialization_allowance(self.settings.tool_output_token_limit))
        return redact.redact_json(item) if redact.secrets() else item  # the configured API key is never stored

    def _append(self, ledger: ThreadLedger, kept: Sequence[dict[str, Any]], rows: list[tuple[str, int]],
                wait: bool = True, index: bool = False) -> ThreadLedger:
        """Store rows after the thread's items and add them to its ledger. Whether another process
        wrote meanwhile is asked inside the append's transaction; if one did, the thread is read again.
        `index`: index them for recall in the same transaction (a mirror's slices; see `Store.append`)."""
        first, version = self.store.append(ledger.thread, rows, known=(self.cache.version, ledger.next_seq), wait=wait,
                                           items=list(kept) if index else None)
        if not self.cache.check(version) or first != ledger.next_seq:
            return self.cache.reload(self.store, ledger.thread)
        ledger.append([Entry(first + i, None, tokens, body=body) for i, (body, tokens) in enumerate(rows)], kept)
        self.cache.fit(self.store)
        return ledger

    def record(self, thread: str, items: list[dict[str, Any]] | Iterator[dict[str, Any]],
               wait: bool = True) -> RecordResult:
        """Store valid items (the handler checked them, or checks them as they come:
        `ctxd.protocol.items.record_items`). Nothing is stored unless every item is valid."""
        self.check_writable(thread)
        kept: Sequence[dict[str, Any]]
        if isinstance(items, list):
            kept, rows = self._rows(thread, items)
        else:  # what is stored of them is read back from their rows when needed
            rows = self._rows_of_each(thread, items)
            kept = _FromRows(rows)
        with self.lock:
            ledger = self.cache.loaded(self.store, thread)  # checked for other writers in `_append`
            if rows:
                ledger = self._append(ledger, kept, rows, wait)
            title = _untitled(ledger, kept)
            if title is not None:
                self._update_state(ledger, title=title)
            usage = self._changed(ledger)
            return {"historyVersion": ledger.history_version, "itemCount": len(ledger.entries), "usage": usage}

    def record_now(self, thread: str, items: list[dict[str, Any]] | Iterator[dict[str, Any]]) -> RecordResult | None:
        """`record` if it needs no waiting: the thread in memory and unchanged by other processes
        (asked in the append's transaction), the workspace free, the database not locked, and no
        second write to follow. Otherwise None, having written nothing (the server then hands the
        request to a worker, which waits). Lets a small record be stored on the thread that read it,
        without a thread switch."""
        if not isinstance(items, list) or self._store is None or not self.lock.acquire(blocking=False):
            return None
        try:
            ledger = self.cache.peek(thread)
            if ledger is None:
                return None  # reading it from the store is a worker's job
            if (ledger.state or {}).get("usageSettings") != self.view.facts(ledger):
                return None  # `_changed` would write the new facts, waiting for the store
            if (ledger.state or {}).get("title") is None and any(map(is_real_user_message, items)):
                return None  # the thread's title would be written too
            return self.record(thread, items, wait=False)
        except WouldWait:
            return None
        finally:
            self.lock.release()

    def report_usage(self, thread: str, total_tokens: int, billed: dict[str, int] | None = None) -> UsageSnapshot:
        """The API's total for the latest request; `billed` (`input` at the full rate, `cachedInput`,
        `output`) is added to what the thread has cost, priced by `pricer` when one is set."""
        with self.lock:
            ledger = self._ledger(thread)
            self.store.update_thread(thread, api_total=total_tokens, api_seq=ledger.last_seq)
            ledger.api_total, ledger.api_seq, ledger.tokens_after_api = total_tokens, ledger.last_seq, 0
            if billed and self.pricer is not None:
                model = self.view.settings(ledger).model or ""
                spend = {name: dict(parts) for name, parts in ((ledger.state or {}).get("spend") or {}).items()}
                parts = spend.setdefault(model, {})
                for kind, tokens in billed.items():
                    parts[kind] = int(parts.get(kind, 0)) + tokens
                self._update_state(ledger, spend=spend, cost=self.pricer(spend))
            self._note_request(ledger)
            return self._changed(ledger)

    def _note_request(self, ledger: ThreadLedger) -> None:
        """A client's request just reported: the prompt cache's clock starts again (its state and
        re-write rate, ctxd/tokens/prompt_cache.py; the compactions ctxd ran stay listed)."""
        model = self.view.settings(ledger).model or ""
        kept = (ledger.state or {}).get("cacheFacts") or {}
        facts = prompt_cache.facts(prompt_cache.provider_of(None, model), prompt_cache.iso(time.time()), False,
                                   self.rate(model, "input"), kept.get("compactions"))
        self._update_state(ledger, cacheFacts=facts)

    def rate(self, model: str, kind: str) -> float | None:
        """USD per million tokens of `kind` (`input`, `cachedInput`) for a client thread's model, by
        the pricer; None when there is none or the model is unpriced."""
        if self.pricer is None:
            return None
        priced = self.pricer({model: {kind: prompt_cache.MILLION}})
        return float(priced["total"]) if priced.get("priced") else None

    def set_prompt_context(self, thread: str, context: dict[str, Any]) -> UsageSnapshot:
        """Store the fixed overhead, and mark the current ledger as the reference baseline. When it
        changes the thread's counter (a model of another tokenizer family), every item the thread
        stored, active or archived, is counted again with the new one, in the transaction that
        stores the context: the gauge is then the one of the same history recorded under the new
        model (and an undo brings items back counted alike). The items are counted outside the
        workspace's lock (a long thread takes a while); the ones recorded meanwhile, or moved, are
        counted in the transaction (`Store.recount`)."""
        with self.lock:
            ledger = self._ledger(thread)
            merged = redact.redact_json({**(ledger.prompt_context or {}), **context})  # never store the key
            counter = self.view.counter_of(merged)
            if ledger.next_seq <= 1 or _counter_key(self.view.counter(ledger)) == _counter_key(counter):
                return self._set_prompt_context(ledger, merged)
        counted = self._recounted(thread, counter.count)
        with self.lock:
            ledger = self._ledger(thread)
            merged = redact.redact_json({**(ledger.prompt_context or {}), **context})
            again = self.view.counter_of(merged)
            if _counter_key(again) != _counter_key(counter):
                counted, counter = {}, again  # changed again meanwhile: all counted in the transaction
            return self._set_prompt_context(ledger, merged, counter.count, counted)

    def _set_prompt_context(self, ledger: ThreadLedger, merged: dict[str, Any],
                            count: Callable[[str], int] | None = None,
                            counted: dict[int, tuple[bytes, int]] | None = None) -> UsageSnapshot:
        """`set_prompt_context` under the lock: with `count`, the items counted again (`Store.recount`)."""
        reference = {"seq": ledger.last_seq, "historyVersion": ledger.history_version, "setAt": time.time()}
        if count is None:
            self.store.update_thread(ledger.thread, prompt_context=merged, reference=reference)
            ledger.prompt_context, ledger.reference = merged, reference
        else:
            self.store.recount(ledger.thread, counted or {}, _body_counter(count), prompt_context=merged,
                               reference=reference)
            ledger = self.cache.reload(self.store, ledger.thread)
        settings = self.view.settings(ledger)
        TOKENIZERS.preload(settings.model, settings.tokenizer)  # in the background
        return self._changed(ledger)

    def _recounted(self, thread: str, count: Callable[[str], int]) -> dict[int, tuple[bytes, int]]:
        """Every stored item of a thread counted with `count`, read a page at a time without the
        workspace's lock: by rowid, its body's digest and its tokens (`Store.recount`)."""
        counted: dict[int, tuple[bytes, int]] = {}
        by_body = _body_counter(count)
        after = 0
        while True:
            page = self.store.bodies_from(thread, after, RECOUNT_PAGE)
            for seq, rowid, stored in page:
                counted[rowid] = (body_digest(stored), by_body(bodies.decode(stored)))
                after = seq
            if len(page) < RECOUNT_PAGE:
                return counted

    def rollback(self, thread: str, turns: int, dry_run: bool = False) -> RollbackResult:
        """Drop the last `turns` user turns. When the active history has fewer, the compactions in
        effect are crossed, newest first (what they replaced comes back) before turns are dropped.
        One undoable operation; with `dry_run`, only what it would do."""
        self.check_writable(thread)
        with self.lock:
            ledger = self._ledger(thread)
            entries = list(ledger.entries)
            crossed: list[int] = []
            if sum(map(is_user_turn_start, entries)) < turns:
                rows = self.store.all_rows(thread)
                by_seq = {row.seq: row for row in rows}
                ops = operations.load(self.store.operations(thread))
                for op in reversed(ops):
                    if sum(map(is_user_turn_start, entries)) >= turns:
                        break
                    removed, added = operations.changes(op, rows)
                    seqs = {entry.seq for entry in entries}
                    if op.kind != "compaction" or op.undone_by is not None or not added & seqs:
                        continue
                    if operations.blocker(op, ops, rows, ignoring=crossed) is not None:
                        break  # crossing it is undoing it, and that is refused: the turns before it stay
                    entries = [_entry(by_seq[seq]) for seq in sorted((seqs - added) | removed) if seq in by_seq]
                    crossed.append(op.id)
            cut = rollback_start(entries, turns)
            kept = entries[:cut.index] if cut is not None else entries
            clears = cut is not None and cut.clears_reference
            if [e.seq for e in kept] == [e.seq for e in ledger.entries]:
                usage = self.view.usage(ledger)
                unchanged: RollbackResult = {"historyVersion": ledger.history_version, "removedItems": 0,
                                             "crossesCompaction": False, "usage": usage, "tokensAfter": usage["usedTokens"]}
                if dry_run:
                    unchanged["dryRun"] = True
                return unchanged
            dropped, crosses = len(entries) - len(kept), bool(crossed)
            if dry_run:
                after = self.view.usage(self._preview(ledger, kept, clears))["usedTokens"]
                return {"historyVersion": ledger.history_version, "removedItems": dropped, "crossesCompaction": crosses,
                        "usage": self.view.usage(ledger), "tokensAfter": after, "dryRun": True}
            info = {"turns": turns, "cancels": crossed}
            op_id, ledger, _ = self._operate(ledger, "rollback", kept, info, {c: THIS_OPERATION for c in crossed}, clears)
            usage = self.view.usage(ledger)
            return {"historyVersion": ledger.history_version, "removedItems": dropped, "crossesCompaction": crosses,
                    "usage": usage, "tokensAfter": usage["usedTokens"], "undoId": op_id}

    def undo(self, thread: str, op_id: int, extra: dict[str, Any] | None = None) -> UndoResult:
        """`ctxd/undo`: put back the active history operation `op_id` replaced (items recorded since
        stay). Refused while a later operation stands in the way (`operations.blocker`). Itself an
        operation: undoing it redoes `op_id`."""
        self.check_writable(thread)
        with self.lock:
            ledger = self._ledger(thread)
            ops = operations.load(self.store.operations(thread))
            by_id = {op.id: op for op in ops}
            op = by_id.get(op_id)
            if op is None:
                raise InvalidParams(f"id: thread '{thread}' has no history operation {op_id}.")
            if op.undone_by is not None:
                raise InvalidParams(f"id: operation {op_id} of thread '{thread}' is already undone (by operation "
                                    f"{op.undone_by}): undo operation {op.undone_by} to redo it.")
            rows = self.store.all_rows(thread)
            blocking = operations.blocker(op, ops, rows)
            if blocking is not None:
                raise InvalidParams(operations.refusal(op, blocking, thread, rows))
            by_seq = {row.seq: row for row in rows}
            target = operations.undo_target(op, [e.seq for e in ledger.entries], rows)
            kept = [_entry(by_seq[seq]) for seq in target if seq in by_seq]
            info = {"undoes": op_id, "cancels": [op_id], **(extra or {})}
            new_id, ledger, removed = self._operate(ledger, "undo", kept, info, operations.stored_marks([op_id], by_id))
            return {"historyVersion": ledger.history_version, "usage": self.view.usage(ledger), "undoId": new_id,
                    "removedItems": removed}

    def restore_conversation(self, thread: str, commit_id: str, plan: tuple[str, Any],
                             undo_snapshot: str | None) -> dict[str, Any]:
        """Apply a `conversation_plan` after the files were restored; `undo_snapshot` is that
        restore's `undoId`, so that restoring it with the conversation undoes this too."""
        kind, value = plan
        if kind == "none":
            return {"removedItems": 0}
        if kind == "undo":
            done = self.undo(thread, value, {"undoSnapshot": undo_snapshot})
            return {"removedItems": done["removedItems"], "operationId": done["undoId"]}
        with self.lock:
            ledger = self._ledger(thread)
            rows = {row.seq: row for row in self.store.all_rows(thread)}
            kept = [_entry(rows[seq]) for seq in value if seq in rows]
            info = {"snapshot": commit_id, "undoSnapshot": undo_snapshot}
            op_id, _, removed = self._operate(ledger, "restore", kept, info, {})
            return {"removedItems": removed, "operationId": op_id}

    def _preview(self, ledger: ThreadLedger, kept: list[Entry], clear_reference: bool = False) -> ThreadLedger:
        """The ledger as it would be with only `kept` active (for a dry run's tokens)."""
        fields = self._baselines(ledger, kept, clear_reference)
        preview = ThreadLedger(ledger.thread, entries=list(kept), history_version=ledger.history_version,
                               api_total=None if "api_total" in fields else ledger.api_total, api_seq=ledger.api_seq,
                               reference=None if "reference" in fields else ledger.reference,
                               prompt_context=ledger.prompt_context, state=ledger.state)
        preview.recount()
        return preview

    @staticmethod
    def _baselines(ledger: ThreadLedger, kept: list[Entry], clear_reference: bool) -> dict[str, Any]:
        """The API and reference baselines that go when the active history becomes `kept`: each
        goes when anything at or before its point changes (or the caller says the reference is stale)."""
        before, after = {e.seq for e in ledger.entries}, {e.seq for e in kept}
        changed = before ^ after
        first = min(changed) if changed else None
        fields: dict[str, Any] = {}
        if ledger.api_total is not None and first is not None and first <= ledger.api_seq:
            fields["api_total"] = None
        if ledger.reference is not None and (clear_reference or (first is not None and first <= ledger.reference.get("seq", 0))):
            fields["reference"] = None
        return fields

    def _operate(self, ledger: ThreadLedger, kind: str, kept: list[Entry], info: dict[str, Any],
                 marks: dict[int, int | None], clear_reference: bool = False) -> tuple[int, ThreadLedger, int]:
        """Make `kept` the thread's active history as one undoable operation (nothing deleted).
        Returns its id, the new ledger and how many items it took out of the active history."""
        fields = self._baselines(ledger, kept, clear_reference)
        before = self.view.usage(ledger)["usedTokens"]
        info = {"kind": kind, **info, "itemsBefore": len(ledger.entries), "itemsAfter": len(kept), "tokensBefore": before}
        try:
            op_id = self.store.operate(ledger.thread, redact.redact_json(info), active=[e.seq for e in kept],
                                       expected_version=ledger.history_version, marks=marks,
                                       history_version=ledger.history_version + 1, **fields)
        except HistoryChanged:
            self.cache.reload(self.store, ledger.thread)
            raise InvalidParams(f"thread '{ledger.thread}' changed meanwhile (another ctxd wrote to it); nothing was "
                                "changed: try again") from None
        removed = len({e.seq for e in ledger.entries} - {e.seq for e in kept})
        ledger = self.cache.reload(self.store, ledger.thread)
        usage = self._changed(ledger)
        self.store.annotate_compaction(op_id, tokensAfter=usage["usedTokens"])
        return op_id, ledger, removed

    def replace_history(self, thread: str, new_items: list[dict[str, Any]], *, upto_seq: int,
                        info: dict[str, Any], expected_version: int | None = None) -> dict[str, Any]:
        """Swap the items up to `upto_seq` for `new_items` (a compaction). One transaction; the old
        items are archived; the API and reference baselines are cleared; the version bumps. With
        `expected_version`, the swap happens only if the history is still that version (checked
        in the same transaction); otherwise CompactionFailed and the ledger is unchanged."""
        with self.lock:
            count = self.view.counter(self._ledger(thread)).count
        rows = [(item_text(redact.redact_json(item)), count_item(item, count)) for item in new_items]
        info = redact.redact_json(info)
        with self.lock:
            ledger = self._ledger(thread)
            base = ledger.history_version if expected_version is None else expected_version
            # The history the swap replaces is the one now, items recorded since the compaction read
            # the thread included (they are kept after the summary): its usage is the one before.
            tokens_before = self.view.usage(ledger)["usedTokens"]
            try:
                compaction = self.store.replace(thread, upto_seq, rows, info, expected_version=expected_version,
                                                history_version=base + 1, api_total=None, reference=None)
            except HistoryChanged:
                self.cache.reload(self.store, thread)
                raise CompactionFailed(f"the history changed while the compaction ran (thread '{thread}' was "
                                       "compacted, rolled back or restored meanwhile); nothing was changed: "
                                       "compact again if it is still needed") from None
            items_before = len(ledger.entries)
            ledger = self.cache.reload(self.store, thread)
            usage = self._changed(ledger)
            self.store.annotate_compaction(compaction, tokensBefore=tokens_before, tokensAfter=usage["usedTokens"],
                                           itemsBefore=items_before, itemsAfter=len(ledger.entries))
            return {"historyVersion": ledger.history_version, "itemCount": len(ledger.entries), "usage": usage,
                    "operationId": compaction, "tokensBefore": tokens_before}

    def mirror(self, thread: str, items: list[dict[str, Any]], *, baseline: int | None, after_baseline: int,
               context: dict[str, Any], info: dict[str, Any], replace: dict[str, Any] | None = None,
               at: float | None = None, follow: tuple[str, dict[str, Any]] | None = None) -> None:
        """Mirror a followed session (ctxd/sessions/bridge.py): append `items`, or with `replace`
        make them the whole active history, the items it held archived under an operation whose
        info is `replace` (the agent's compaction, or `{"strategy": "agent"}` for a rewind), dated
        `at` (the session file's time; None: now). `baseline` is the usage the agent's API
        reported, covering all but the last `after_baseline` items; `context` the model, window
        and instructions the file states; `info` what `ctxd/threads` shows; `follow` the file and
        where its reader stands with these items (a restart takes it up there)."""
        valid = [item for item in items if _valid(item)]
        self._follow_context(thread, context)  # items are counted for the session's model, also the first time
        kept, rows = self._rows(thread, valid)
        with self.lock:
            ledger = self._ledger(thread)
            if replace is not None:
                self.store.replace(thread, ledger.last_seq, rows, {"followed": info.get("source"), **replace},
                                   items=kept, created_at=at, history_version=ledger.history_version + 1)
                ledger = self.cache.reload(self.store, thread)
            elif rows:
                ledger = self._append(ledger, kept, rows, index=True)
            entries = ledger.entries
            state = {**(ledger.state or {}), "followed": info}
            awaiting = state.get(AWAITING_REPORT)
            if isinstance(awaiting, dict) and baseline is not None:
                if baseline == awaiting.get("stale"):
                    baseline = None  # the report from before the compaction: not the window now
                else:
                    state.pop(AWAITING_REPORT)  # the first report after it
            api_seq = entries[max(0, len(entries) - 1 - after_baseline)].seq if entries and baseline is not None else 0
            self.store.update_thread(thread, follow, api_total=baseline, api_seq=api_seq, prompt_context=context,
                                     state=state)
            ledger.api_total, ledger.api_seq, ledger.state = baseline, api_seq, state
            ledger.tokens_after_api = sum(e.tokens for e in entries if e.seq > api_seq)
            if ledger.prompt_context != context:
                ledger.prompt_context = context  # the overhead is counted again by the view
            self._changed(ledger)

    def _follow_context(self, thread: str, context: dict[str, Any]) -> None:
        """A followed session's (or an `acp:` thread's) context, before its new items are counted.
        A model of another tokenizer family (the agent switched models mid-session) has the items
        the thread stored, active and archived, counted again as `set_prompt_context` does: the
        gauge is then the one of the same history recorded under that model, not the first
        model's counts beside the new one's."""
        with self.lock:
            ledger = self._ledger(thread)
            if ledger.prompt_context == context:
                return
            counter = self.view.counter_of(context)
            if ledger.next_seq <= 1 or _counter_key(self.view.counter(ledger)) == _counter_key(counter):
                ledger.prompt_context = context  # stored with what the mirror writes
                return
        counted = self._recounted(thread, counter.count)  # outside the lock, as `set_prompt_context`
        with self.lock:
            self.store.recount(thread, counted, _body_counter(counter.count), prompt_context=context)
            self.cache.reload(self.store, thread)

    def note_followed(self, thread: str, path: str, state: dict[str, Any]) -> None:
        """Where a followed file's reader stands, when what it read changed nothing stored."""
        self.store.update_thread(thread, (path, state))

    def list_followed(self, threads: list[Listed]) -> list[str]:
        """Followed sessions listed before their items are mirrored (ctxd/sessions/bridge.py), in one
        write: each thread made with what `ctxd/threads` shows, its fill as the agent's report (no
        item is stored yet to count after it). A thread that exists is left as it is; the ones made."""
        with self.lock:
            made = self.store.create_threads([(thread, {"api_total": used, "api_seq": 0, "prompt_context": context,
                                                        "state": {"followed": info}})
                                              for thread, used, context, info in threads])
            for thread in made:
                self.cache.forget(thread)  # read before it was made (as empty): this connection's write
            return made

    def active_items(self, thread: str) -> list[dict[str, Any]]:
        """A thread's active items as stored (a followed session's window: its readers hold none)."""
        return [json.loads(row.body) for row in self.store.active_rows(thread)]

    def record_followed(self, thread: str, items: list[dict[str, Any]], *, info: dict[str, Any],
                        context: dict[str, Any], used: int | None, replay: bool = False,
                        sent: tuple[str, int] | None = None) -> RecordResult:
        """Append to a thread that one of ctxd's own processes keeps for an agent (a `ctxd acp`
        proxy's `acp:` thread): the items after what it holds, `info` as `ctxd/threads` shows it,
        `context` (model, window) for the gauge, and `used`, when given, as the exact fill the
        agent reported after these items (its API baseline; otherwise the last one stands).
        `replay`: the history the agent replays when a session is loaded, which the thread holds
        already unless it is empty. `sent`: the record's sender and number (a proxy's spool,
        ctxd/acpspool.py); one the thread stored already changes nothing."""
        valid = [item for item in items if _valid(item)]
        if context:  # items are counted for the session's model
            self._follow_context(thread, context)
        kept, rows = self._rows(thread, valid)
        with self.lock:
            ledger = self._ledger(thread)
            known = (ledger.state or {}).get("acpRecords")
            stored = dict(known) if isinstance(known, dict) else {}
            last = stored.get(sent[0]) if sent is not None else None
            if sent is not None and isinstance(last, int) and last >= sent[1]:
                return {"historyVersion": ledger.history_version, "itemCount": len(ledger.entries),
                        "usage": self.view.usage(ledger)}
            if rows and not (replay and ledger.entries):
                ledger = self._append(ledger, kept, rows, index=True)
            state = {**(ledger.state or {}), "followed": info}
            if sent is not None:
                stored.pop(sent[0], None)
                stored[sent[0]] = sent[1]
                state["acpRecords"] = dict(list(stored.items())[-MAX_SENDERS:])
            api_total, api_seq = (used, ledger.last_seq) if used is not None else (ledger.api_total, ledger.api_seq)
            context = context or ledger.prompt_context or {}
            self.store.update_thread(thread, api_total=api_total, api_seq=api_seq, prompt_context=context, state=state)
            ledger.api_total, ledger.api_seq, ledger.state, ledger.prompt_context = api_total, api_seq, state, context
            ledger.tokens_after_api = sum(e.tokens for e in ledger.entries if e.seq > api_seq)
            usage = self._changed(ledger)
            return {"historyVersion": ledger.history_version, "itemCount": len(ledger.entries), "usage": usage}

    def mirror_start(self, thread: str, items: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
        """How a followed thread stands against `items`, the session's window as its file has it
        (a session found, or found again after a restart): those items as `mirror` stores them,
        and how many of them the thread's active history holds already (it is their first n); -1
        when it holds something else; -2 when it holds all of them and more (the file's later
        lines, not read yet, bring the rest). Lets a restart append to what it mirrored before."""
        kept = self._kept([item for item in items if _valid(item)])
        # Only the bridge's mirroring thread writes a followed thread, so its rows are compared
        # outside the workspace's lock (as stored text, nothing loaded): a client waits for none of it.
        rows = self.store.active_rows(thread)
        if any(row.body != item_text(item) for row, item in zip(rows, kept)):
            return kept, -1
        return kept, -2 if len(rows) > len(kept) else len(rows)

    def followed_compactions(self, thread: str) -> list[tuple[int, dict[str, Any]]]:
        """The agent's own compactions a followed thread lists, oldest first: (id, info). A
        restart reads the session file from its start again: these are archived already."""
        agent = followed_agent(thread)
        return [(cid, info) for cid, _, info in self.store.compactions(thread)
                if info.get("followed") and info.get("strategy") == agent]

    def mirror_archive(self, thread: str, compaction: int, items: list[dict[str, Any]], at: float | None) -> None:
        """A followed thread's compaction an earlier version listed having archived nothing (it
        first saw the session after it): the items the session file had before it, archived under
        it, and the file's date for it (issue #36)."""
        kept, rows = self._rows(thread, [item for item in items if _valid(item)])
        with self.lock:
            self.store.archive(thread, compaction, rows, kept, created_at=at)
            self.cache.reload(self.store, thread)  # the next seq moved

    def agent_reported(self, thread: str, used_tokens: int) -> UsageSnapshot | None:
        """The exact usage an agent handed over outside its session file (Claude Code's status
        line), as the thread's API baseline; ignored (None) when it is the report from before a
        compaction the agent's hook announced."""
        with self.lock:
            ledger = self._ledger(thread)
            awaiting = (ledger.state or {}).get(AWAITING_REPORT)
            if isinstance(awaiting, dict):
                if used_tokens == awaiting.get("stale"):
                    return None
                self._update_state(ledger, **{AWAITING_REPORT: None})
            if ledger.api_total == used_tokens and ledger.api_seq == ledger.last_seq:
                return None
            return self.report_usage(thread, used_tokens)

    def agent_compacted(self, thread: str) -> UsageSnapshot:
        """The agent's hook says it compacted: the baseline reported before is not the window
        any more. It is dropped (the gauge estimates from the history) until a different report
        arrives; the stale figure, were it reported again, is ignored. A baseline the agent's
        file gave with or after the compaction already mirrored (the listing's `tokensAfter`:
        qwen-code's record states its fill after it) is the window now, and stays."""
        with self.lock:
            ledger = self._ledger(thread)
            listed = self.store.compactions(thread) if ledger.api_total is not None else []
            if listed and listed[-1][2].get("followed") and listed[-1][2].get("tokensAfter") == ledger.api_total:
                return self.view.usage(ledger)
            awaiting = (ledger.state or {}).get(AWAITING_REPORT)
            stale = awaiting.get("stale") if isinstance(awaiting, dict) else ledger.api_total  # told twice
            state = {**(ledger.state or {}), AWAITING_REPORT: {"stale": stale, "at": time.time()}}
            self.store.update_thread(thread, api_total=None, api_seq=0, state=state)
            ledger.api_total, ledger.api_seq, ledger.state = None, 0, state
            ledger.tokens_after_api = sum(e.tokens for e in ledger.entries)
            return self._changed(ledger)

    def annotate_followed_compaction(self, thread: str, tokens_after: int) -> None:
        """The agent reported the fill after its latest compaction: the listing shows it. On that
        compaction, never on a rewind listed after it (an operation of strategy "agent"): a restart
        that read the rewind again gave it the compaction's figure."""
        with self.lock:
            listed = self.followed_compactions(thread)
            if listed and listed[-1][1].get("tokensAfter") is None:
                self.store.annotate_compaction(listed[-1][0], tokensAfter=tokens_after)

    def update_state(self, thread: str, **values: Any) -> dict[str, Any]:
        """Small per-thread facts the daemon keeps (e.g. the auto-compaction circuit breaker)."""
        with self.lock:
            return self._update_state(self._ledger(thread), **values)

    def _update_state(self, ledger: ThreadLedger, **values: Any) -> dict[str, Any]:
        state = {**(ledger.state or {}), **redact.redact_json(values)}
        self.store.update_thread(ledger.thread, state=state)
        ledger.state = state
        return state


TITLE_CHARS = 80
RECOUNT_PAGE = 500  # items read at a time by a recount (`WorkspaceWrites._recounted`)


def _counter_key(counter: Counter) -> tuple[str | None, str]:
    """What a counter counts with: two counters of one key give every text the same tokens (once
    loaded: a counter estimates while its encoding loads, as a thread recorded then does)."""
    return counter.encoding, counter.profile


def _body_counter(count: Callable[[str], int]) -> Callable[[str], int]:
    """Tokens of an item from its stored JSON, as `_rows` counts it."""
    return lambda body: count_item(json.loads(body), count)


def _untitled(ledger: ThreadLedger, kept: Sequence[dict[str, Any]]) -> str | None:
    """A client thread's title, when it has none yet and a user message was just recorded: its
    first user message (recorded now or before), on one short line."""
    if (ledger.state or {}).get("title") is not None or not any(map(is_real_user_message, kept)):
        return None
    first = next((entry.item for entry in ledger.entries if is_real_user_message(entry.item)), None)
    if first is None:
        return None
    line = " ".join(message_text(first).split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"


def _entry(row: Row) -> Entry:
    return Entry(row.seq, None, row.tokens, row.origin, row.body)


def _valid(item: dict[str, Any]) -> bool:
    try:
        from ctxd.protocol.items import validate_items

        validate_items([item])
        return True
    except InvalidParams:
        return False


class _FromRows(Sequence[dict[str, Any]]):
    """The items stored as `rows`, each parsed from its JSON when it is read: a huge record's
    items are never all held parsed at once (ctxd/server/bigframe.py)."""

    def __init__(self, rows: list[tuple[str, int]]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [json.loads(body) for body, _ in self.rows[index]]
        item: dict[str, Any] = json.loads(self.rows[index][0])
        return item
