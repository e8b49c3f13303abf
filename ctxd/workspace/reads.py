"""A workspace's reads: the gauge, the breakdown, the prompt, the history and the thread list.

None of these changes a thread (a prompt may first have the server compact one, through
`auto_compactor`); the writes are in writes.py.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from ctxd import isotime, redact
from ctxd.errors import CtxdError, InvalidParams
from ctxd.ledger import operations, projection
from ctxd.ledger.cache import DataVersion, stored_bodies, summary_ledger
from ctxd.ledger.rules import snapshot_commit_id
from ctxd.ledger.store import ThreadRow
from ctxd.ledger.thread import Entry, ThreadLedger
from ctxd.protocol import jsontext
from ctxd.protocol.rawjson import RawJsonList
from ctxd.settings import Settings
from ctxd.tokens import prompt_cache
from ctxd.tokens.counter import Counter
from ctxd.workspace.core import ACP, WorkspaceCore, followed_agent, item_text

if TYPE_CHECKING:
    from ctxd.protocol.shapes import (
        Breakdown,
        CacheState,
        HistoryResult,
        Item,
        OperationRecord,
        Problem,
        PromptResult,
        ThreadInfo,
        ThreadsResult,
        UsageSnapshot,
    )
    from ctxd.workspace.service import Workspace

# A listing builds the entries of this many changed threads at a time: their rows hold the prompt
# context (base instructions, tools), and 3,000 at once raised a heavy history's owner's peak by
# 20 MiB after its first import (issue #38).
ROWS_AT_ONCE = 500


class WorkspaceReads(WorkspaceCore):
    """The requests that read a workspace's threads."""

    def breakdown_now(self, thread: str) -> Breakdown | None:
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

    def committed_elsewhere(self) -> DataVersion | None:
        """The store's data version, which moves only when another process commits to it (the one
        following the agents' sessions, `Daemon._watch_follower`); None while no request opened the
        store: nothing of it was shown, so there is nothing to tell again."""
        store = self._store
        return None if store is None or store.closed else store.data_version()

    def followed_rows(self) -> dict[str, tuple[Any, ...]]:
        """Each followed session's thread's listing key (updated, history version, counters): what
        changes when its follower writes it. `acp:` threads are left out: any daemon, this one too,
        writes them, and the one that does tells its own clients."""
        return {row[0]: tuple(row[1:]) for row in self.store.listing()
                if (agent := followed_agent(row[0])) is not None and agent != ACP}

    def breakdown(self, thread: str) -> Breakdown:
        """`ctxd/usage` (see ctxd/usage/view.py)."""
        with self.lock:
            return self.view.breakdown(self._ledger(thread))

    def usage(self, thread: str) -> UsageSnapshot:
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

    def active_history(self, thread: str) -> tuple[list[Entry], int]:
        """The thread's active entries and the history version they belong to, read together."""
        with self.lock:
            ledger = self._ledger(thread)
            return list(ledger.entries), ledger.history_version

    def prompt(self, thread: str, input_modalities: list[str]) -> PromptResult:
        # At the limit, or past the warning point (where a cold cache is a reason too: the
        # compactor decides, docs/protocol.md).
        if (self.auto_compactor is not None and followed_agent(thread) is None
                and self.usage(thread)["tier"] in ("compact", "warn")):
            self.auto_compactor(cast("Workspace", self), thread)  # every workspace is one (service.py)
        with self.lock:
            ledger = self._ledger(thread)
            entries = ledger.entries
            # Items the projection passes through unchanged go out as the JSON they are stored as.
            if not ledger.repairs.needed(len(entries), input_modalities):
                kept = projection.without(entries, ledger.repairs.dropped())
                texts = stored_bodies(self.store, ledger, kept)
            else:
                projected = projection.project_indexed([e.item for e in entries], input_modalities)
                bodies = stored_bodies(self.store, ledger, entries)
                texts = [bodies[part] if isinstance(part, int) else item_text(part) for part in projected]
            return {
                # Items as the JSON text they are stored as: written out as they are.
                "items": cast("list[Item]", RawJsonList(texts)),
                "historyVersion": ledger.history_version,
                "estimatedTokens": self.view.usage(ledger)["usedTokens"],
                "reinjectContext": ledger.reference is None,
            }

    def history(self, thread: str, offset: int, limit: int | None, include_archived: bool) -> HistoryResult:
        with self.lock:
            ledger = self._ledger(thread)
            if include_archived:
                rows = self.store.all_rows(thread)
                items = [json.loads(r.body) | ({"archived": True, "archivedBy": r.archived} if r.archived is not None else {})
                         for r in rows]
            else:  # only the page is parsed (items are held as their JSON: ctxd/ledger/cache.py)
                page = ledger.entries[offset:None if limit is None else offset + limit]
                return {"items": [json.loads(body) for body in stored_bodies(self.store, ledger, page)],
                        "historyVersion": ledger.history_version, "total": len(ledger.entries)}
            end = None if limit is None else offset + limit
            result: HistoryResult = {"items": items[offset:end], "historyVersion": ledger.history_version,
                                     "total": len(items)}
            if include_archived:
                ops = operations.load(self.store.operations(thread))
                result["compactions"] = operations.compactions_wire(ops, rows)
                result["operations"] = operations.wire(ops, rows)
            return result

    def threads(self, only: list[str] | None = None) -> ThreadsResult:
        """Every thread (or those of `only` that exist), newest activity first; followed sessions
        say so (protocol v2). A thread's entry is kept as JSON text until its row changes (its
        counters, its API report, its `updated_at`) or its prompt cache's state would: a listing of
        thousands of threads reads the rows' small columns and builds again only what changed, its
        sums from its row, never its items. Threads named (an editor's, after `ctxd/threadsChanged`)
        are read alone: after a change, only what it names is listed again, not the thousands."""
        now = time.time()
        with self.lock:
            mark = self.store.commit_mark()
            kept = self._listing
            if (isinstance(kept, _Listing) and mark is not None and kept.mark == mark and kept.view is self.view
                    and kept.until > now):  # nothing committed since, nothing expired: the same order
                return {"threads": cast("list[ThreadInfo]", RawJsonList(kept.texts(only)))}
            self.cache.check(self.store.data_version())
            keys = self.store.listing(None if only is None else sorted(set(only)))
            view = self.view
            listed = self._listed
            stale = [key[0] for key in keys if (known := listed.get(key[0])) is None or known.key != key
                     or known.view is not view or known.until <= now]
            by_name = {key[0]: key for key in keys}
            for start in range(0, len(stale), ROWS_AT_ONCE):
                rows = self.store.thread_rows(stale[start:start + ROWS_AT_ONCE])
                after_reports = self.store.tokens_after_reports(rows)
                for name, row in rows.items():
                    entry = self._thread_info(row, summary_ledger(row, after_reports.get(name, 0)), now)
                    listed[name] = _Listed(by_name[name], view, _until(entry, now), isotime.seconds(entry["lastActivity"]) or 0.0,
                                           jsontext.dumps(entry).decode("utf-8"))
            if only is None and len(listed) > len(keys):
                for gone in [name for name in listed if name not in by_name]:
                    del listed[gone]
            # Newest activity first; on a tie, the latest written (as the store's order was).
            order = sorted((listed[name] for name in by_name if name in listed),
                           key=lambda e: (e.activity, e.key[1]), reverse=True)
            if only is None:
                self._listing = _Listing(mark, view, min((entry.until for entry in order), default=float("inf")),
                                         order) if mark is not None else None
        return {"threads": cast("list[ThreadInfo]", RawJsonList([entry.text for entry in order]))}

    def _thread_info(self, row: ThreadRow, ledger: ThreadLedger, now: float) -> ThreadInfo:
        state = ledger.state if isinstance(ledger.state, dict) else {}
        followed = state.get("followed")
        updated = datetime.fromtimestamp(row.updated_at, UTC).isoformat()
        entry: ThreadInfo = {"thread": row.thread, "itemCount": row.active_items,
                             "historyVersion": row.history_version, "updatedAt": updated}
        if isinstance(followed, dict):
            source: Any = followed.get("source")  # the bridge writes the agent's name
            entry.update({"source": source, "title": followed.get("title"),
                          "model": followed.get("model"),
                          "lastActivity": followed.get("lastActivity") or updated, "readOnly": True})
            if isinstance(followed.get("cost"), dict):
                entry["cost"] = followed["cost"]  # the pickers show it (issue #26)
        else:
            entry.update({"source": "client", "title": state.get("title"),
                          "model": (state.get("usageSettings") or {}).get("model"), "lastActivity": updated,
                          "readOnly": followed_agent(row.thread) is not None})
        entry["usage"] = self.view.usage(ledger)
        facts = followed.get("cache") if isinstance(followed, dict) else state.get("cacheFacts")
        if isinstance(facts, dict):  # the prompt cache now (ctxd/tokens/prompt_cache.py)
            entry["cache"] = cast("CacheState", prompt_cache.state(facts, entry["usage"]["usedTokens"], now))
        return entry

    def status_problems(self) -> list[Problem]:
        """Settings problems and the store's state, as `ctxd/status` lists them. Opens the store
        if needed (a worker's job): a store that cannot be opened, or only read, is a problem."""
        problems = [problem.as_dict() for problem in self.problems]
        try:
            store = self.store
            if store.readonly_reason is not None:
                problems.append({"source": str(self.db_path), "message": store.readonly_reason})
        except CtxdError as error:
            problems.append({"source": str(self.db_path), "message": error.message})
        redacted: list[Problem] = redact.redact_json(problems)
        return redacted

    def conversation_plan(self, thread: str, commit_id: str) -> tuple[str, Any]:
        """What restoring snapshot `commit_id` with the conversation does to `thread`:
        `("undo", op)` when the snapshot is the safety snapshot (`undoId`) of an earlier restore
        with the conversation (or of its undo): that operation is undone (refused here, before any
        file is restored, while a later operation stands in the way); `("none", None)` when it
        already is; else `("history", seqs)`: the thread's active history as it was just after
        the snapshot was recorded, compactions and rollbacks since included."""
        with self.lock:
            ledger = self._ledger(thread)
            ops = operations.load(self.store.operations(thread))
            rows = self.store.all_rows(thread)
            for op in reversed(ops):
                if op.info.get("undoSnapshot") == commit_id:
                    if op.undone_by is not None:
                        return "none", None
                    blocking = operations.blocker(op, ops, rows)
                    if blocking is not None:
                        raise InvalidParams(operations.refusal(op, blocking, thread, rows))
                    return "undo", op.id
            points = [r.seq for r in rows if r.origin is None and snapshot_commit_id(json.loads(r.body)) == commit_id]
            seqs = operations.history_as_of(points[-1], ops, [e.seq for e in ledger.entries]) if points else None
            if seqs is None:  # not recorded as such, or an old compaction in the way: its active copy
                active = [e.seq for e in ledger.entries if snapshot_commit_id(e.item) == commit_id]
                if not active:
                    raise InvalidParams(f"id: snapshot {commit_id} is not recorded in thread '{thread}'")
                seqs = [e.seq for e in ledger.entries if e.seq <= active[-1]]
            return "history", seqs

    def operations_list(self, thread: str) -> list[OperationRecord]:
        with self.lock:
            return operations.wire(operations.load(self.store.operations(thread)), self.store.all_rows(thread))

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


@dataclass
class _Listed:
    """A thread's entry in `ctxd/threads`, as JSON text, with what says it is still right: its row's
    `Store.listing` key, the view it was computed with, and until when its prompt cache's state holds."""

    key: Any
    view: Any
    until: float
    activity: float
    text: str


@dataclass
class _Listing:
    """A whole listing's order, kept while no commit was made (`Store.commit_mark`), the view is
    the same and no entry's state expired: an idle owner answers `ctxd/threads` without SQL."""

    mark: tuple[int, bytes] | None
    view: Any
    until: float
    order: list[_Listed]

    def texts(self, only: list[str] | None) -> list[str]:
        if only is None:
            return [entry.text for entry in self.order]
        wanted = set(only)
        return [entry.text for entry in self.order if entry.key[0] in wanted]


def _until(entry: ThreadInfo, now: float) -> float:
    """Until when a listed entry holds: a warm cache turns cold when it expires; a count made while
    the tokenizer loads is made again (a second later)."""
    usage = entry.get("usage")
    if isinstance(usage, dict) and usage.get("tokenizerStatus") in ("loading", "idle"):
        return now + 1.0
    cache = entry.get("cache")
    if isinstance(cache, dict) and cache.get("state") == "warm":
        return isotime.seconds(cache.get("expiresAt")) or now
    return float("inf")


