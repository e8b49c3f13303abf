"""The daemon's behaviour, without the wire: open workspaces and their threads.

`Service` maps workspace folder URIs to `Workspace`s. A `Workspace` owns its store and the loaded
threads' in-memory ledgers, and answers every request as plain dicts. The server calls it from
worker threads; one lock per workspace keeps a thread's store and memory in step.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable
from urllib.parse import unquote, urlparse

from ctxd import redact
from ctxd import settings as settings_mod
from ctxd.errors import CompactionFailed, CtxdError, GitFailed, InvalidParams
from ctxd.ledger import operations
from ctxd.ledger import projection as normalize
from ctxd.ledger.rules import is_real_user_message, message_text, snapshot_commit_id
from ctxd.ledger.cache import ThreadCache, summary_ledger
from ctxd.ledger.store import THIS_OPERATION, HistoryChanged, Row, Store, WouldWait, database_path
from ctxd.ledger.thread import Entry, ThreadLedger, is_user_turn_start, rollback_start
from ctxd.ledger.truncation import truncate_tool_output, with_serialization_allowance
from ctxd.protocol import jsontext
from ctxd.protocol.rawjson import RawJsonList
from ctxd.settings import Problem, Settings, is_trusted, load_settings
from ctxd.tokens.counter import TOKENIZERS, Counter, count_item
from ctxd.usage.view import UsageView

log = logging.getLogger("ctxd")

UsageListener = Callable[[str, str, dict[str, Any]], None]
# Threads named `codex:<id>` / `claude:<id>` mirror an agent's session file (ctxd/sessions): the
# agent owns that history, so no client may write to them.
FOLLOWED_AGENTS = {"codex": "Codex", "claude": "Claude Code"}
AWAITING_REPORT = "awaitingReport"
"""Thread state after an agent's hook announced a compaction: the stale baseline, until a new report."""


def uri_to_path(uri: str) -> Path:
    """A workspace folder URI as an absolute path; anything but a plain file URI is refused."""
    if not isinstance(uri, str) or not uri:
        raise InvalidParams("workspace: must be a file URI")
    try:
        parsed = urlparse(uri)
    except ValueError as error:  # a broken host part, such as `file://[::1/x`
        raise InvalidParams(f"workspace: {uri!r} is not a valid URI ({error})") from None
    if parsed.scheme != "file":
        raise InvalidParams(f"workspace: {uri!r} is not a file URI")
    if parsed.netloc not in ("", "localhost"):
        raise InvalidParams(f"workspace: {uri!r} names a remote host")
    raw = unquote(parsed.path)
    if "\x00" in raw or any(part == ".." for part in raw.split("/")):
        raise InvalidParams(f"workspace: {uri!r} has '..' or NUL in its path")
    path = Path(raw)
    if not path.is_absolute():
        raise InvalidParams(f"workspace: {uri!r} is not an absolute path")
    return path


def followed_agent(thread: str) -> str | None:
    """`codex` or `claude` for a followed session's thread, else None. `codex:` alone is one too:
    no client may write under an agent's name, whatever follows it."""
    agent, sep, _ = thread.partition(":")
    return agent if sep and agent in FOLLOWED_AGENTS else None


def _is_folder(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):  # a name too long for the file system
        return False


def _folder_identity(path: Path) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def path_to_uri(path: Path) -> str:
    return path.as_uri()


def _dump(item: dict[str, Any]) -> str:
    """An item as stored: strict JSON (what cannot be sent back is never stored), in the wire's
    format, so that a prompt can send an item as it is stored."""
    return jsontext.dumps(item).decode("utf-8")


class Workspace:
    """One open workspace folder: its settings, its database, its loaded threads (`ThreadCache`),
    and the ledger operations; the gauge and breakdown are read through `UsageView`, which never
    writes. One lock keeps the store and the loaded threads in step."""

    def __init__(self, uri: str, root: Path, state_dir: Path, init_options: dict[str, Any] | None,
                 listener: UsageListener | None = None) -> None:
        self.uri = uri
        self.root = root
        self._root_identity = _folder_identity(root)
        self.state_dir = state_dir
        self.trusted = is_trusted(init_options)
        self.problems: list[Problem] = []
        self.settings = load_settings(root, init_options, self.problems)
        TOKENIZERS.preload(self.settings.model, self.settings.tokenizer)  # in the background
        self.db_path = database_path(state_dir, root)
        self._store: Store | None = None  # opened by the first request, on a worker (see `store`)
        self.listener = listener
        self.lock = threading.RLock()
        self.cache = ThreadCache()
        self.view = UsageView(self.settings, lambda settings: TOKENIZERS.counter(settings.model, settings.tokenizer))
        self._thread_locks: dict[str, threading.Lock] = {}
        # Set by the server: compacts a thread before a prompt when it is over the limit.
        self.auto_compactor: Callable[["Workspace", str], None] | None = None
        # Set by the server: `Breakdown.cost` of a client thread's spend ({model: {input, cachedInput, output}}).
        self.pricer: Callable[[dict[str, dict[str, int]]], dict[str, Any]] | None = None

    def opened_root(self) -> Path:
        """The folder, if it is still the one that was opened. Snapshots and restores go through
        this: a folder replaced since (by a link to somewhere else, or another folder moved onto
        its name) is refused, so that they never read or write a folder the user did not open."""
        if _folder_identity(self.root) != self._root_identity:
            raise GitFailed(f"{self.root} is no longer the folder that was opened (it was replaced or "
                            "moved); reopen it to take or restore snapshots")
        return self.root

    @property
    def store(self) -> Store:
        """The workspace's store, opened on first use. Opening can wait (a database locked by
        another process, up to the store's bound) or fail (StoreUnavailable, 1003): it happens in
        the request that needs it, never while a folder is being added. A failed open is tried
        again by the next request (the user may have fixed it)."""
        store = self._store
        if store is None:
            with self.lock:
                if self._store is None:
                    self._store = Store(self.db_path, workspace=self.root)
                store = self._store
        return store

    def close(self) -> None:
        with self.lock:
            if self._store is not None:
                self._store.close()

    def thread_lock(self, thread: str) -> threading.Lock:
        """Held for a whole long operation on a thread (a compaction), so two never overlap."""
        with self.lock:
            return self._thread_locks.setdefault(thread, threading.Lock())

    def _ledger(self, thread: str) -> ThreadLedger:
        return self.cache.get(self.store, thread)

    # --- reads -----------------------------------------------------------------------------------

    def breakdown_now(self, thread: str) -> dict[str, Any] | None:
        """The breakdown if it can be had without waiting (the workspace free, the thread in memory
        and unchanged by any other process), else None. Lets the server answer the gauge on the
        thread that reads requests."""
        if self.cache.peek(thread) is None or not self.lock.acquire(blocking=False):
            return None
        try:
            if self._store is None or not self.cache.check(self._store.data_version()):
                return None
            ledger = self.cache.peek(thread)
            return None if ledger is None else self.view.breakdown(ledger)
        finally:
            self.lock.release()

    def breakdown(self, thread: str) -> dict[str, Any]:
        """`ctxd/usage` (see ctxd/usage/view.py)."""
        with self.lock:
            return self.view.breakdown(self._ledger(thread))

    def usage(self, thread: str) -> dict[str, Any]:
        with self.lock:
            return self.view.usage(self._ledger(thread))

    def settings_for(self, thread: str) -> Settings:
        """Workspace settings, with the model and window the thread's prompt context names."""
        with self.lock:
            return self.view.settings(self._ledger(thread))

    def counter(self, thread: str) -> Counter:
        """The thread's token counter: the one its items, overhead and compaction targets use."""
        with self.lock:
            return self.view.counter(self._ledger(thread))

    def prompt_context(self, thread: str) -> dict[str, Any]:
        with self.lock:
            return dict(self._ledger(thread).prompt_context or {})

    def state(self, thread: str) -> dict[str, Any]:
        with self.lock:
            return dict(self._ledger(thread).state or {})

    def snapshot(self, thread: str) -> tuple[list[Entry], int]:
        """The thread's active entries and the history version they belong to, read together."""
        with self.lock:
            ledger = self._ledger(thread)
            return list(ledger.entries), ledger.history_version

    def prompt(self, thread: str, input_modalities: list[str]) -> dict[str, Any]:
        if (self.auto_compactor is not None and followed_agent(thread) is None
                and self.usage(thread)["tier"] == "compact"):
            self.auto_compactor(self, thread)
        with self.lock:
            ledger = self._ledger(thread)
            entries = ledger.entries
            # Items the projection passes through unchanged go out as the JSON they are stored as.
            if not ledger.repairs.needed(len(entries), input_modalities):
                kept = normalize.without(entries, ledger.repairs.dropped())
                texts = [entry.body or _dump(entry.item) for entry in kept]
            else:
                projected = normalize.project_indexed([e.item for e in entries], input_modalities)
                texts = [(entries[part].body or _dump(entries[part].item)) if isinstance(part, int) else _dump(part)
                         for part in projected]
            return {
                "items": RawJsonList(texts),
                "historyVersion": ledger.history_version,
                "estimatedTokens": self.view.usage(ledger)["usedTokens"],
                "reinjectContext": ledger.reference is None,
            }

    def history(self, thread: str, offset: int, limit: int | None, include_archived: bool) -> dict[str, Any]:
        with self.lock:
            ledger = self._ledger(thread)
            extra: dict[str, Any] = {}
            if include_archived:
                rows = self.store.all_rows(thread)
                items = [json.loads(r.body) | ({"archived": True, "archivedBy": r.archived} if r.archived is not None else {})
                         for r in rows]
                ops = operations.load(self.store.operations(thread))
                extra["compactions"] = operations.compactions_wire(ops, rows)
                extra["operations"] = operations.wire(ops, rows)
            else:
                items = [e.item for e in ledger.entries]
            end = None if limit is None else offset + limit
            return {"items": items[offset:end], "historyVersion": ledger.history_version, "total": len(items), **extra}

    def threads(self) -> dict[str, Any]:
        """Every thread, newest activity first; followed sessions say so (protocol v2). A thread
        not in memory is summed in SQL, never loaded."""
        with self.lock:
            self.cache.check(self.store.data_version())
            listed = []
            for row, count in self.store.threads():
                ledger = self.cache.peek(row.thread) or summary_ledger(self.store, row.thread)
                state = ledger.state if isinstance(ledger.state, dict) else {}
                followed = state.get("followed")
                updated = datetime.fromtimestamp(row.updated_at, timezone.utc).isoformat()
                entry: dict[str, Any] = {"thread": row.thread, "itemCount": count,
                                         "historyVersion": row.history_version, "updatedAt": updated}
                if isinstance(followed, dict):
                    entry.update(source=followed.get("source"), title=followed.get("title"),
                                 model=followed.get("model"), lastActivity=followed.get("lastActivity") or updated,
                                 readOnly=True)
                    if isinstance(followed.get("cost"), dict):
                        entry["cost"] = followed["cost"]  # the pickers show it (issue #26)
                else:
                    entry.update(source="client", title=state.get("title"),
                                 model=(state.get("usageSettings") or {}).get("model"), lastActivity=updated,
                                 readOnly=followed_agent(row.thread) is not None)
                entry["usage"] = self.view.usage(ledger)
                listed.append(entry)
        listed.sort(key=lambda t: _instant(t["lastActivity"]), reverse=True)
        return {"threads": listed}

    def status_problems(self) -> list[dict[str, str]]:
        """Settings problems and the store's state, as `ctxd/status` lists them. Opens the store
        if needed (a worker's job): a store that cannot be opened, or only read, is a problem."""
        problems = [problem.as_dict() for problem in self.problems]
        try:
            store = self.store
            if store.readonly_reason is not None:
                problems.append({"source": str(self.db_path), "message": store.readonly_reason})
        except CtxdError as error:
            problems.append({"source": str(self.db_path), "message": error.message})
        return redact.redact_json(problems)

    # --- writes ----------------------------------------------------------------------------------

    def _changed(self, ledger: ThreadLedger) -> dict[str, Any]:
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
            raise InvalidParams(f"thread '{thread}' follows a {FOLLOWED_AGENTS[agent]} session: the agent owns "
                                "that history (read-only)")

    def _rows(self, thread: str, items: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[tuple[str, int]]]:
        """What is stored of valid items: system messages dropped, long tool outputs truncated,
        every item counted. Done outside the lock: counting a long output takes a while."""
        kept = self._kept(items)
        with self.lock:
            count = self.view.counter(self.cache.loaded(self.store, thread)).count
        return kept, [(_dump(item), count_item(item, count)) for item in kept]

    def _kept(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """What is stored of valid items, before counting: system messages dropped, long tool
        outputs truncated, the configured API key redacted."""
        limit = with_serialization_allowance(self.settings.tool_output_token_limit)
        kept = [truncate_tool_output(item, limit) for item in items
                if not (item.get("type") == "message" and item.get("role") == "system")]
        if redact.secrets():  # the configured API key is never stored, wherever it appears
            kept = [redact.redact_json(item) for item in kept]
        return kept

    def _append(self, ledger: ThreadLedger, kept: list[dict[str, Any]], rows: list[tuple[str, int]],
                wait: bool = True, index: bool = False) -> ThreadLedger:
        """Store rows after the thread's items and add them to its ledger. Whether another process
        wrote meanwhile is asked inside the append's transaction; if one did, the thread is read again.
        `index`: index them for recall in the same transaction (a mirror's slices; see `Store.append`)."""
        first, version = self.store.append(ledger.thread, rows, known=(self.cache.version, ledger.next_seq), wait=wait,
                                           items=kept if index else None)
        if not self.cache.check(version) or first != ledger.next_seq:
            return self.cache.reload(self.store, ledger.thread)
        ledger.append([Entry(first + i, item, tokens, body=body) for i, (item, (body, tokens)) in enumerate(zip(kept, rows))])
        return ledger

    def record(self, thread: str, items: list[dict[str, Any]], wait: bool = True) -> dict[str, Any]:
        """Store valid items (the handler checked them: `ctxd.protocol.items.validate_items`)."""
        self.check_writable(thread)
        kept, rows = self._rows(thread, items)
        with self.lock:
            ledger = self.cache.loaded(self.store, thread)  # checked for other writers in `_append`
            if rows:
                ledger = self._append(ledger, kept, rows, wait)
            title = _untitled(ledger, kept)
            if title is not None:
                self._update_state(ledger, title=title)
            usage = self._changed(ledger)
            return {"historyVersion": ledger.history_version, "itemCount": len(ledger.entries), "usage": usage}

    def record_now(self, thread: str, items: list[dict[str, Any]]) -> dict[str, Any] | None:
        """`record` if it needs no waiting: the thread in memory and unchanged by other processes
        (asked in the append's transaction), the workspace free, the database not locked, and no
        second write to follow. Otherwise None, having written nothing (the server then hands the
        request to a worker, which waits). Lets a small record be stored on the thread that read it,
        without a thread switch."""
        if self._store is None or not self.lock.acquire(blocking=False):
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

    def report_usage(self, thread: str, total_tokens: int, billed: dict[str, int] | None = None) -> dict[str, Any]:
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
            return self._changed(ledger)

    def set_prompt_context(self, thread: str, context: dict[str, Any]) -> dict[str, Any]:
        """Store the fixed overhead, and mark the current ledger as the reference baseline."""
        with self.lock:
            ledger = self._ledger(thread)
            merged = redact.redact_json({**(ledger.prompt_context or {}), **context})  # never store the key
            reference = {"seq": ledger.last_seq, "historyVersion": ledger.history_version, "setAt": time.time()}
            self.store.update_thread(thread, prompt_context=merged, reference=reference)
            ledger.prompt_context, ledger.reference = merged, reference
            settings = self.view.settings(ledger)
            TOKENIZERS.preload(settings.model, settings.tokenizer)  # in the background
            return self._changed(ledger)

    def rollback(self, thread: str, turns: int, dry_run: bool = False) -> dict[str, Any]:
        """Drop the last `turns` user turns. When the active history has fewer, the compactions in
        effect are crossed, newest first (what they replaced comes back) before turns are dropped.
        One undoable operation; with `dry_run`, only what it would do."""
        self.check_writable(thread)
        with self.lock:
            ledger = self._ledger(thread)
            entries, crossed = list(ledger.entries), []
            if sum(map(is_user_turn_start, entries)) < turns:
                rows = self.store.all_rows(thread)
                by_seq = {row.seq: row for row in rows}
                for op in reversed(operations.load(self.store.operations(thread))):
                    if sum(map(is_user_turn_start, entries)) >= turns:
                        break
                    removed, added = operations.changes(op, rows)
                    seqs = {entry.seq for entry in entries}
                    if op.kind != "compaction" or op.undone_by is not None or not added & seqs:
                        continue
                    entries = [_entry(by_seq[seq]) for seq in sorted((seqs - added) | removed) if seq in by_seq]
                    crossed.append(op.id)
            cut = rollback_start(entries, turns)
            kept = entries[:cut.index] if cut is not None else entries
            clears = cut is not None and cut.clears_reference
            result: dict[str, Any] = {"historyVersion": ledger.history_version, "removedItems": len(entries) - len(kept),
                                      "crossesCompaction": bool(crossed)}
            if [e.seq for e in kept] == [e.seq for e in ledger.entries]:
                usage = self.view.usage(ledger)
                return {**result, "removedItems": 0, "crossesCompaction": False, "usage": usage,
                        "tokensAfter": usage["usedTokens"], **({"dryRun": True} if dry_run else {})}
            if dry_run:
                after = self.view.usage(self._preview(ledger, kept, clears))["usedTokens"]
                return {**result, "usage": self.view.usage(ledger), "tokensAfter": after, "dryRun": True}
            info = {"turns": turns, "cancels": crossed}
            op_id, ledger, _ = self._operate(ledger, "rollback", kept, info, {c: THIS_OPERATION for c in crossed}, clears)
            usage = self.view.usage(ledger)
            return {**result, "historyVersion": ledger.history_version, "usage": usage, "tokensAfter": usage["usedTokens"],
                    "undoId": op_id}

    def undo(self, thread: str, op_id: int, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """`ctxd/undo`: put back the active history operation `op_id` replaced (items recorded since
        stay). Itself an operation: undoing it redoes `op_id`."""
        self.check_writable(thread)
        with self.lock:
            ledger = self._ledger(thread)
            ops = operations.load(self.store.operations(thread))
            by_id = {op.id: op for op in ops}
            op = by_id.get(op_id)
            if op is None:
                raise InvalidParams(f"id: thread '{thread}' has no history operation {op_id}")
            if op.undone_by is not None:
                raise InvalidParams(f"id: operation {op_id} of thread '{thread}' is already undone (by operation "
                                    f"{op.undone_by}; undo that one to redo it)")
            rows = self.store.all_rows(thread)
            by_seq = {row.seq: row for row in rows}
            target = operations.undo_target(op, [e.seq for e in ledger.entries], rows)
            kept = [_entry(by_seq[seq]) for seq in target if seq in by_seq]
            info = {"undoes": op_id, "cancels": [op_id], **(extra or {})}
            new_id, ledger, removed = self._operate(ledger, "undo", kept, info, operations.undo_marks(op, by_id))
            return {"historyVersion": ledger.history_version, "usage": self.view.usage(ledger), "undoId": new_id,
                    "removedItems": removed}

    def conversation_plan(self, thread: str, commit_id: str) -> tuple[str, Any]:
        """What restoring snapshot `commit_id` with the conversation does to `thread`:
        `("undo", op)` when the snapshot is the safety snapshot (`undoId`) of an earlier restore
        with the conversation (or of its undo): that operation is undone; `("none", None)` when it
        already is; else `("history", seqs)`: the thread's active history as it was just after
        the snapshot was recorded, compactions and rollbacks since included."""
        with self.lock:
            ledger = self._ledger(thread)
            ops = operations.load(self.store.operations(thread))
            for op in reversed(ops):
                if op.info.get("undoSnapshot") == commit_id:
                    return ("undo", op.id) if op.undone_by is None else ("none", None)
            rows = self.store.all_rows(thread)
            points = [r.seq for r in rows if r.origin is None and snapshot_commit_id(json.loads(r.body)) == commit_id]
            seqs = operations.history_as_of(points[-1], ops, [e.seq for e in ledger.entries]) if points else None
            if seqs is None:  # not recorded as such, or an old compaction in the way: its active copy
                active = [e.seq for e in ledger.entries if snapshot_commit_id(e.item) == commit_id]
                if not active:
                    raise InvalidParams(f"id: snapshot {commit_id} is not recorded in thread '{thread}'")
                seqs = [e.seq for e in ledger.entries if e.seq <= active[-1]]
            return "history", seqs

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

    def operations_list(self, thread: str) -> list[dict[str, Any]]:
        with self.lock:
            return operations.wire(operations.load(self.store.operations(thread)), self.store.all_rows(thread))

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
        count = self.counter(thread).count
        rows = [(_dump(redact.redact_json(item)), count_item(item, count)) for item in new_items]
        info = redact.redact_json(info)
        with self.lock:
            ledger = self._ledger(thread)
            base = ledger.history_version if expected_version is None else expected_version
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
            self.store.annotate_compaction(compaction, tokensAfter=usage["usedTokens"], itemsBefore=items_before,
                                           itemsAfter=len(ledger.entries))
            return {"historyVersion": ledger.history_version, "itemCount": len(ledger.entries), "usage": usage,
                    "operationId": compaction}

    def mirror(self, thread: str, items: list[dict[str, Any]], *, replace: bool, baseline: int | None,
               after_baseline: int, context: dict[str, Any], info: dict[str, Any],
               compactions: list[dict[str, Any]] | None = None) -> None:
        """Mirror a followed session (ctxd/sessions/bridge.py): append `items`, or with `replace`
        make them the whole history (a compaction or rewind in the agent; the old items are
        archived, as a compaction here archives them). `baseline` is the usage the agent's API
        reported, covering all but the last `after_baseline` items; `context` the model, window
        and instructions the file states; `info` what `ctxd/threads` shows. `compactions`: the
        agent's compactions this replacement stands for (their infos, oldest first), each listed
        by `ctxd/history`; a first read of a session is no compaction."""
        valid = [item for item in items if _valid(item)]
        with self.lock:  # items are counted for the session's model, also the first time it is seen
            ledger = self._ledger(thread)
            if ledger.prompt_context != context:
                ledger.prompt_context = context
        kept, rows = self._rows(thread, valid)
        with self.lock:
            ledger = self._ledger(thread)
            if replace:
                infos = [{"followed": info.get("source"), **c} for c in compactions or []]
                if infos:  # only those not listed yet: a restart reads the whole file again
                    infos = infos[sum(1 for _, _, i in self.store.compactions(thread) if i.get("followed") and "trigger" in i):]
                same = [e.item for e in ledger.entries] == kept
                if not ledger.entries and not infos:
                    ledger = self._append(ledger, kept, rows, index=True) if rows else ledger  # found: nothing replaced
                elif not same or infos:  # unchanged after a restart: kept as it is
                    for n, entry in enumerate(infos or [{"followed": info.get("source"), "strategy": "agent"}]):
                        last = n == max(0, len(infos) - 1)
                        self.store.replace(thread, ledger.last_seq, rows if last else [], entry,
                                           items=kept if last else [], history_version=ledger.history_version + 1)
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
            self.store.update_thread(thread, api_total=baseline, api_seq=api_seq, prompt_context=context, state=state)
            ledger.api_total, ledger.api_seq, ledger.state = baseline, api_seq, state
            ledger.tokens_after_api = sum(e.tokens for e in entries if e.seq > api_seq)
            if ledger.prompt_context != context:
                ledger.prompt_context = context  # the overhead is counted again by the view
            self._changed(ledger)

    def mirror_start(self, thread: str, items: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
        """A followed session read from its start: its items as `mirror` stores them, and how many
        of them the thread holds already (its whole active history is their first n), or -1 when
        it holds something else. Lets a session found again after a restart be appended to, and a
        large one be mirrored in slices (`mirror` with `replace` only for the first)."""
        kept = self._kept([item for item in items if _valid(item)])
        # Only the bridge's mirroring thread writes a followed thread, so its rows are compared
        # outside the workspace's lock (as stored text, nothing loaded): a client waits for none of it.
        rows = self.store.active_rows(thread)
        if len(rows) > len(kept) or any(row.body != _dump(item) for row, item in zip(rows, kept)):
            return kept, -1
        return kept, len(rows)

    def mirror_current(self, thread: str, baseline: int | None, context: dict[str, Any], info: dict[str, Any]) -> bool:
        """The followed thread stores these facts already (a restart, and nothing new in the file)."""
        row = self.store.thread(thread)
        state = row.state if row is not None and isinstance(row.state, dict) else {}
        return (row is not None and row.api_total == baseline and (row.prompt_context or {}) == context
                and state.get("followed") == info)

    def followed_path(self, thread: str) -> str | None:
        """The session file a followed thread was last mirrored from, without loading its items, and
        without waiting for the workspace's lock (a slice of an import may hold it): the store has it."""
        state = getattr(self.store.thread(thread), "state", None)
        followed = state.get("followed") if isinstance(state, dict) else None
        path = followed.get("path") if isinstance(followed, dict) else None
        return path if isinstance(path, str) else None

    def exists(self, thread: str) -> bool:
        """Whether the store has this thread (a followed session ctxd has read)."""
        with self.lock:
            return self.store.thread(thread) is not None

    def agent_reported(self, thread: str, used_tokens: int) -> dict[str, Any] | None:
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

    def agent_compacted(self, thread: str) -> dict[str, Any]:
        """The agent's hook says it compacted: the baseline reported before is not the window
        any more. It is dropped (the gauge estimates from the history) until a different report
        arrives; the stale figure, were it reported again, is ignored."""
        with self.lock:
            ledger = self._ledger(thread)
            awaiting = (ledger.state or {}).get(AWAITING_REPORT)
            stale = awaiting.get("stale") if isinstance(awaiting, dict) else ledger.api_total  # told twice
            state = {**(ledger.state or {}), AWAITING_REPORT: {"stale": stale, "at": time.time()}}
            self.store.update_thread(thread, api_total=None, api_seq=0, state=state)
            ledger.api_total, ledger.api_seq, ledger.state = None, 0, state
            ledger.tokens_after_api = sum(e.tokens for e in ledger.entries)
            return self._changed(ledger)

    def annotate_followed_compaction(self, thread: str, tokens_after: int) -> None:
        """The agent reported the fill after its latest compaction: the listing shows it."""
        with self.lock:
            listed = self.store.compactions(thread)
            if listed and listed[-1][2].get("followed") and listed[-1][2].get("tokensAfter") is None:
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


def _untitled(ledger: ThreadLedger, kept: list[dict[str, Any]]) -> str | None:
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
    return Entry(row.seq, json.loads(row.body), row.tokens, row.origin, row.body)


def _valid(item: dict[str, Any]) -> bool:
    try:
        from ctxd.protocol.items import validate_items

        validate_items([item])
        return True
    except InvalidParams:
        return False


def _instant(stamp: str | None) -> float:
    """An ISO timestamp (agents write `Z`) as seconds, for sorting; unknown sorts last."""
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


class Service:
    """The set of open workspace folders."""

    def __init__(self, state_dir: Path | None = None, listener: UsageListener | None = None) -> None:
        self.state_dir = state_dir or settings_mod.default_state_dir()
        self.listener = listener
        self.init_options: dict[str, Any] = {}
        self._workspaces: dict[str, Workspace] = {}
        self._lock = threading.Lock()
        self.on_open: Callable[[Workspace], None] | None = None

    @staticmethod
    def canonical(uri: str) -> str:
        return path_to_uri(uri_to_path(uri))

    def open_folder(self, uri: str) -> Workspace:
        root = uri_to_path(uri)
        key = path_to_uri(root)
        with self._lock:
            workspace = self._workspaces.get(key)
            if workspace is None:
                if not _is_folder(root):
                    raise InvalidParams(f"workspace: {uri} is not a folder")
                workspace = Workspace(key, root, self.state_dir, self.init_options, self.listener)
                self._workspaces[key] = workspace
                for problem in workspace.problems:
                    log.warning("%s: %s", key, problem)
                if self.on_open is not None:
                    self.on_open(workspace)
            return workspace

    def close_folder(self, uri: str) -> None:
        try:
            key = self.canonical(uri)
        except InvalidParams:
            return
        with self._lock:
            workspace = self._workspaces.pop(key, None)
        if workspace is not None:
            workspace.close()

    def workspace(self, uri: str) -> Workspace:
        """The open workspace named by `uri`; anything else is refused (-32602)."""
        fast = self._workspaces.get(uri)  # clients repeat the URI they opened: skip re-parsing it
        if fast is not None:
            return fast
        try:
            key = self.canonical(uri)
        except InvalidParams:
            raise InvalidParams(f"workspace: {uri!r} is not an open workspace folder") from None
        with self._lock:
            workspace = self._workspaces.get(key)
        if workspace is None:
            raise InvalidParams(f"workspace: {uri} is not an open workspace folder")
        return workspace

    def folders(self) -> list[Workspace]:
        with self._lock:
            return list(self._workspaces.values())

    def close(self) -> None:
        with self._lock:
            workspaces, self._workspaces = list(self._workspaces.values()), {}
        for workspace in workspaces:
            workspace.close()
