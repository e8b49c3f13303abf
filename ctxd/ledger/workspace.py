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
from ctxd.ledger import projection as normalize
from ctxd.ledger.rules import snapshot_commit_id
from ctxd.ledger.cache import ThreadCache, summary_ledger
from ctxd.ledger.store import HistoryChanged, Row, Store, WouldWait, database_path
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
    """`codex` or `claude` for a followed session's thread, else None."""
    agent, sep, rest = thread.partition(":")
    return agent if sep and rest and agent in FOLLOWED_AGENTS else None


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
                items = [json.loads(r.body) | ({"archived": True} if r.archived is not None else {}) for r in rows]
                extra["compactions"] = _compactions(self.store.compactions(thread), rows)
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
        limit = with_serialization_allowance(self.settings.tool_output_token_limit)
        kept = [truncate_tool_output(item, limit) for item in items
                if not (item.get("type") == "message" and item.get("role") == "system")]
        if redact.secrets():  # the configured API key is never stored, wherever it appears
            kept = [redact.redact_json(item) for item in kept]
        with self.lock:
            count = self.view.counter(self.cache.loaded(self.store, thread)).count
        return kept, [(_dump(item), count_item(item, count)) for item in kept]

    def _append(self, ledger: ThreadLedger, kept: list[dict[str, Any]], rows: list[tuple[str, int]],
                wait: bool = True) -> ThreadLedger:
        """Store rows after the thread's items and add them to its ledger. Whether another process
        wrote meanwhile is asked inside the append's transaction; if one did, the thread is read again."""
        first, version = self.store.append(ledger.thread, rows, known=(self.cache.version, ledger.next_seq), wait=wait)
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
            return self.record(thread, items, wait=False)
        except WouldWait:
            return None
        finally:
            self.lock.release()

    def report_usage(self, thread: str, total_tokens: int) -> dict[str, Any]:
        with self.lock:
            ledger = self._ledger(thread)
            self.store.update_thread(thread, api_total=total_tokens, api_seq=ledger.last_seq)
            ledger.api_total, ledger.api_seq, ledger.tokens_after_api = total_tokens, ledger.last_seq, 0
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

    def rollback(self, thread: str, turns: int) -> dict[str, Any]:
        """Drop the last `turns` user turns; crosses compactions when the active history is short."""
        self.check_writable(thread)
        with self.lock:
            ledger = self._ledger(thread)
            crossed = False
            compactions = self.store.compaction_ids(thread)
            while compactions and sum(map(is_user_turn_start, ledger.entries)) < turns:
                self.store.uncompact(thread, compactions.pop(), api_total=None, reference=None,
                                     history_version=ledger.history_version + 1)
                ledger = self.cache.reload(self.store, thread)
                crossed = True
            cut = rollback_start(ledger.entries, turns)
            removed = 0
            if cut is not None:
                removed = self._drop_from(ledger, ledger.entries[cut.index].seq, clear_reference=cut.clears_reference)
            elif crossed:
                self._changed(ledger)
            return {"historyVersion": ledger.history_version, "removedItems": removed, "usage": self.view.usage(ledger)}

    def snapshot_point(self, thread: str, commit_id: str) -> int:
        """Where a restore with the conversation rolls `thread` back to: just after the item that
        recorded snapshot `commit_id` (the snapshot's own item stays)."""
        with self.lock:
            seqs = [e.seq for e in self._ledger(thread).entries if snapshot_commit_id(e.item) == commit_id]
        if not seqs:
            raise InvalidParams(f"id: snapshot {commit_id} is not recorded in thread '{thread}'")
        return seqs[-1] + 1

    def rollback_to(self, thread: str, seq: int) -> int:
        """Drop every active item from `seq` on (used by ghost restore with the conversation)."""
        with self.lock:
            return self._drop_from(self._ledger(thread), seq)

    def _drop_from(self, ledger: ThreadLedger, seq: int, clear_reference: bool = False) -> int:
        """Delete from `seq` on; the API baseline and the reference baseline go when their source
        does (or, with `clear_reference`, whenever the caller says the reference is stale)."""
        keep = [e for e in ledger.entries if e.seq < seq]
        if len(keep) == len(ledger.entries):
            return 0
        fields: dict[str, Any] = {"history_version": ledger.history_version + 1}
        if ledger.api_total is not None and seq <= ledger.api_seq:
            fields["api_total"] = None
        if ledger.reference is not None and (clear_reference or seq <= ledger.reference.get("seq", 0)):
            fields["reference"] = None
        removed = self.store.delete_from(ledger.thread, seq, **fields)
        ledger.entries = keep
        ledger.history_version = fields["history_version"]
        if "api_total" in fields:
            ledger.api_total = None
        if "reference" in fields:
            ledger.reference = None
        ledger.recount()
        self._changed(ledger)
        return removed

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
            ledger = self.cache.reload(self.store, thread)
            usage = self._changed(ledger)
            self.store.annotate_compaction(compaction, tokensAfter=usage["usedTokens"])
            return {"historyVersion": ledger.history_version, "itemCount": len(ledger.entries), "usage": usage}

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
                    ledger = self._append(ledger, kept, rows) if rows else ledger  # found: nothing replaced
                elif not same or infos:  # unchanged after a restart: kept as it is
                    for n, entry in enumerate(infos or [{"followed": info.get("source"), "strategy": "agent"}]):
                        last = n == max(0, len(infos) - 1)
                        self.store.replace(thread, ledger.last_seq, rows if last else [], entry,
                                           history_version=ledger.history_version + 1)
                    ledger = self.cache.reload(self.store, thread)
            elif rows:
                ledger = self._append(ledger, kept, rows)
            entries = ledger.entries
            api_seq = entries[max(0, len(entries) - 1 - after_baseline)].seq if entries and baseline is not None else 0
            state = {**(ledger.state or {}), "followed": info}
            self.store.update_thread(thread, api_total=baseline, api_seq=api_seq, prompt_context=context, state=state)
            ledger.api_total, ledger.api_seq, ledger.state = baseline, api_seq, state
            ledger.tokens_after_api = sum(e.tokens for e in entries if e.seq > api_seq)
            if ledger.prompt_context != context:
                ledger.prompt_context = context  # the overhead is counted again by the view
            self._changed(ledger)

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


def _valid(item: dict[str, Any]) -> bool:
    try:
        from ctxd.protocol.items import validate_items

        validate_items([item])
        return True
    except InvalidParams:
        return False


def _compactions(compactions: list[tuple[int, float, dict[str, Any]]], rows: list[Row]) -> list[dict[str, Any]]:
    """`ctxd/history`'s compactions, oldest first: what each replaced and wrote, and its tokens."""
    listed = []
    for cid, created, info in compactions:
        listed.append({
            "id": cid,
            "createdAt": datetime.fromtimestamp(created, timezone.utc).isoformat(),
            "strategy": info.get("strategy"),
            "automatic": bool(info.get("automatic")),
            "tokensBefore": info.get("tokensBefore"),
            "tokensAfter": info.get("tokensAfter"),
            "archivedItems": sum(1 for r in rows if r.archived == cid),
            "writtenItems": sum(1 for r in rows if r.origin == cid),
        })
    return listed


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
