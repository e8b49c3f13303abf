"""A workspace folder's state, shared by its reads and its writes, and the URI rules of folders.

`ctxd.workspace.service.Workspace` puts `WorkspaceReads` (reads.py) and `WorkspaceWrites`
(writes.py) together over this core; the server calls it from worker threads.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from ctxd.errors import GitFailed, InvalidParams
from ctxd.ledger.cache import ThreadCache
from ctxd.ledger.store import Store, database_path
from ctxd.ledger.thread import ThreadLedger
from ctxd.protocol import jsontext
from ctxd.settings import Problem, is_trusted, load_settings
from ctxd.tokens.counter import TOKENIZERS
from ctxd.usage.view import UsageView

if TYPE_CHECKING:
    from ctxd.protocol.shapes import UsageSnapshot
    from ctxd.workspace.service import Workspace

UsageListener = Callable[[str, str, "UsageSnapshot"], None]
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


def is_folder(path: Path) -> bool:
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


def item_text(item: dict[str, Any]) -> str:
    """An item as stored: strict JSON (what cannot be sent back is never stored), in the wire's
    format, so that a prompt can send an item as it is stored."""
    return jsontext.dumps(item).decode("utf-8")


class WorkspaceCore:
    """One open workspace folder's state: its settings, its database, its loaded threads
    (`ThreadCache`) and the `UsageView` the gauge is read through. One lock keeps the store and
    the loaded threads in step. `WorkspaceReads` and `WorkspaceWrites` add the requests."""

    def __init__(self, uri: str, root: Path, state_dir: Path, init_options: dict[str, Any] | None,
                 listener: UsageListener | None = None) -> None:
        self.uri = uri
        self.root = root
        self._root_identity = _folder_identity(root)
        self.state_dir = state_dir
        self.db_path = database_path(state_dir, root)
        self._store: Store | None = None  # opened by the first request, on a worker (see `store`)
        self.listener = listener
        self.lock = threading.RLock()
        self.cache = ThreadCache()
        self.configure(init_options)
        self._thread_locks: dict[str, threading.Lock] = {}
        # Set by the server: compacts a thread before a prompt when it is over the limit.
        self.auto_compactor: Callable[[Workspace, str], None] | None = None
        # Set by the server: `Breakdown.cost` of a client thread's spend ({model: {input, cachedInput, output}}).
        self.pricer: Callable[[dict[str, dict[str, int]]], dict[str, Any]] | None = None

    def configure(self, init_options: dict[str, Any] | None) -> None:
        """The settings from the editor's options (and the config files): at open, and again when
        another editor opens the folder with options of its own (the owner serves several: the
        latest editor's options hold)."""
        problems: list[Problem] = []
        settings = load_settings(self.root, init_options, problems)
        TOKENIZERS.preload(settings.model, settings.tokenizer)  # in the background
        with self.lock:
            self.init_options = init_options
            self.trusted = is_trusted(init_options)
            self.problems = problems
            self.settings = settings
            self.view = UsageView(settings, lambda settings: TOKENIZERS.counter(settings.model, settings.tokenizer))

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
