"""Live following: one watcher over every session root, one worker that reads what changed.

What a session is, where it is and how it is read, each agent's store says (ctxd/agents: keys,
stamps, the folders to watch, the head, an incremental reader); this module only schedules.

The watcher is watchdog's native observer (inotify on Linux). When it cannot start (no inotify,
watches exhausted) or `CTXD_SESSIONS_POLL=1`, a polling loop takes its place. Either way a slow
tick re-checks the followed files' sizes, so a lost event costs a delay, never a line. A root
that does not exist yet (an agent never run) is waited for by watching its nearest existing
parent, so a first-time user's first session is seen as soon as its folder is made.

Events go to a single worker thread, which reads each changed file from where it stopped and
calls `on_update` with the session and what changed. `on_update` runs on that thread: a consumer
with slow work (a snapshot, a large import) hands it off. One read takes at most `READ_BUDGET`
bytes of a file before the other files get their turn, so a huge file delays no other session.
Nothing here writes into the agents' folders.

A file first seen after the initial scan (or whose head was not written at that scan) is `fresh`:
a session that started while following, whose user turns are live. Files found by the initial
scan are caught up: their turns are history.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxd.agents.base import SessionReader, SessionStore, Stamp
from ctxd.agents.folders import Folders
from ctxd.agents.jsonl import printable
from ctxd.agents.session import Change, Session
from ctxd.sessions.discovery import Source
from ctxd.settings import env_seconds

if TYPE_CHECKING:
    from watchdog.events import FileSystemEvent
    from watchdog.observers.api import BaseObserver, ObservedWatch

log = logging.getLogger(__name__)

TICK_SECONDS = 2.0  # the safety net: sizes of followed files, roots that appeared
POLL_SECONDS = 0.25  # the fallback's period when there are no file events
# With file events, files whose head is not written yet (there can be thousands, left empty by
# agents that never started) are re-checked by the safety net only this often.
UNDECIDED_SECONDS = 30.0
# Not "closed" (a descriptor opened for writing closed): every write raises "modified" first, and
# SQLite opens a database's `-wal` for writing even on a read-only connection, so closing ctxd's
# own reads of OpenCode's database raised it: a read loop that took a core while the `-wal` was there.
WRITE_EVENTS = frozenset({"created", "modified", "moved"})
READ_BUDGET = 8 * 1024 * 1024  # bytes of one file per read before the other files get a turn
DEFER_BYTES = 256 * 1024  # more than this to read waits while the consumer is behind (`backlog`)
MAX_ID_CHARS = 200  # a session id longer than this (or empty, or with control characters) is none
# A followed file neither written nor read again for this long is dormant: its reader is let go
# once the consumer's store holds where it stood (`_let_go_dormant`), at most DORMANT_BATCH of
# them checked a tick. CTXD_DORMANT_SECONDS sets it (tests).
DORMANT_SECONDS = 600.0
DORMANT_BATCH = 512
DEFERRED_BATCH = 64  # files put off while the consumer was behind, taken up at a time once it is not


@dataclass
class Update:
    """A followed session changed (or was found: `new`). `change` says what the read added."""

    folder: Path
    session: Session
    change: Change
    new: bool = False
    fresh: bool = False  # the session started while following: its turns are live, the first included
    caught_up: bool = True  # the read reached the end of the file (else more follows at once)
    resumed: bool = False  # taken up where an earlier owner left it (`resume`): the change follows what is stored
    state: dict[str, Any] | None = None  # where the reader stands after this read (`Reader.state`), when asked


# `resume(folder, path)`: where an earlier reader of the session stood with what is stored (None:
# read it from its start); `path` is its `Session.path`, which the consumer stores it under (an
# OpenCode session's is its database's and its id, its key only the id). `listing(files)`: before
# the first scan's files are read, newest first, the consumer may list them quickly ((path,
# folder, agent) of each): the newest alone, as a list, then the others as their heads are peeked
# at (an iterator: the consumer's readers need not wait for the thousands).
# `known_cwds(paths)`: for those of `paths` whose folder an earlier read found, their stamps then and
# their cwds: a file with the same stamp now is decided without its head peeked at (a restart
# peeked at 3,000 heads before it listed: bench/README.md, round twenty-three).
Resume = Callable[[Path, str], "dict[str, Any] | None"]
Listing = Callable[[Iterable[tuple[str, Path, str]]], None]
KnownCwd = tuple[tuple[int, ...], str]  # (the stamp `Stamp.key` gave then, the cwd found)
KnownCwds = Callable[[list[str]], Mapping[str, KnownCwd]]


@dataclass
class _File:
    agent: str
    cwd: str | None = None
    decided: bool = False  # the head was read (cwd known, or known to be absent)
    peeked: int = 0  # bytes read to decide
    folder: Path | None = None
    reader: SessionReader | None = None
    size: int = -1
    announced: bool = False
    ident: tuple[int, int] | None = None  # (st_dev, st_ino): another file under this name starts over
    stamp: tuple[int, ...] | None = None  # the file as last looked at: nothing to do while it is the same
    fresh: bool = False  # first seen after the initial scan (see the module's docstring)
    bad_id: bool = False  # its session id is not one (logged once)
    reread: bool = False  # read from its start again (its folder changed)
    session: Session | None = None  # a dormant file's session, its reader let go (`sessions()` shows it)
    # Not let go before this (monotonic): set by a read once caught up (a subagent's writes too), and
    # by a check that found the store behind.
    dormant_after: float = 0.0


@dataclass
class SourceStatus:
    agent: str
    root: str
    enabled: bool
    sessions: int = 0
    watching: str = "off"  # "inotify", "polling" or "off"


class Follower:
    def __init__(self, on_update: Callable[[Update], None], sources: list[Source], *,
                 poll: bool | None = None, window: bool = True, resume: Resume | None = None,
                 listing: Listing | None = None, known_cwds: KnownCwds | None = None,
                 backlog: Callable[[], bool] | None = None,
                 quiet: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext) -> None:
        """`window`: the readers keep each session's window (`Reader.holds_window`); the owner's do
        not (its store does). `resume`, `listing`, `known_cwds`: see above. `backlog()`: the
        consumer has more than it can take; a file with more than DEFER_BYTES to read waits until it
        has not.
        `quiet()` is held while the first scan peeks at the files' heads and lists them: thousands
        of system calls, each slowed by a thread that runs Python code beside them (the owner's:
        `Tokenizers.quiet`)."""
        self.on_update = on_update
        self._backlog = backlog
        self._deferred: dict[str, None] = {}  # files put off while the consumer is behind
        self._window = window
        self._resume = resume
        self._listing = listing
        self._known_cwds = known_cwds
        self._quiet = quiet
        self._dormant = env_seconds("CTXD_DORMANT_SECONDS", DORMANT_SECONDS)
        self.sources = sources
        # Per agent followed: its sessions (ctxd/agents: a store each) and the folders they are under.
        self.stores: dict[str, SessionStore] = {s.agent: s.store for s in sources if s.enabled and s.store is not None}
        self.roots = {agent: store.root for agent, store in self.stores.items()}
        self._watch_roots = list(dict.fromkeys(root for store in self.stores.values() for root in store.watched()))
        # A folder is watched with everything below it when any store watching it asks for that.
        self._recursive = {root: any(store.recursive for store in self.stores.values() if root in store.watched())
                           for root in self._watch_roots}
        self._poll = poll if poll is not None else os.environ.get("CTXD_SESSIONS_POLL") == "1"
        self._folders: dict[str, Folders] = {}  # per agent: the open folders that follow it
        self._files: dict[str, _File] = {}
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._lifecycle = threading.Lock()  # start and stop, one at a time
        self._dirty: dict[str, None] = {}  # paths to read, in arrival order, each once
        self._rescan = True
        self._stop = False
        self._observer: BaseObserver | None = None
        self._events: list[type[FileSystemEvent]] = []  # the kinds of event watched (`_start_observer`)
        self._scheduled: dict[Path, ObservedWatch] = {}  # root -> watchdog's watch (recursive)
        self._mode = "off"
        self._worker: threading.Thread | None = None
        self._last_scan = 0.0
        self._last_undecided = 0.0
        self._busy = False  # the worker is reading
        self._failed: set[str] = set()  # files whose reading raised (logged once each)
        self._scanned = False  # the initial scan is done: files found from now on are fresh
        self.listed = threading.Event()  # the first scan listed the sessions it found (or none will)
        self._parents: dict[Path, Path] = {}  # root not there yet -> the existing parent watched for it
        self._parent_watches: dict[Path, ObservedWatch] = {}  # parent -> watchdog's watch (non-recursive)
        self._polled: set[Path] = set()  # polling: roots seen to exist
        self._roots_pending = False  # a folder appeared in a parent watched for a root

    # --- lifecycle ---

    def start(self) -> None:
        with self._lifecycle:  # a stop on another thread (the daemon closing) waits for this
            if not self.roots or self._stop:
                self.listed.set()  # (nothing to list)
                return
            # (The file watch starts on the worker once the first scan has listed the sessions:
            # `_watch_after_listing`.)
            self._worker = threading.Thread(target=self._run, name="ctxd-sessions", daemon=True)
            self._worker.start()

    def stop(self) -> None:
        with self._lifecycle:
            with self._wake:
                self._stop = True
                self._wake.notify_all()
            self.listed.set()  # (no listing comes: nothing waits for one)
            stop_observer(self._observer)
            if self._worker is not None:
                self._worker.join(timeout=5)

    def set_folders(self, folders: list[Path], without: Mapping[str, Collection[Path]] | None = None) -> None:
        """The open workspace folders changed: sessions are matched again (from the cwd already
        known; nothing is read again). `without`: per agent, the folders that do not follow its
        sessions (their `.ctxd.toml` turned it off). The folders are indexed before the lock is
        taken: a file event waits for that lock."""
        skip = without or {}
        forms = {folder: found for index in self._folders.values() for folder, found in index.forms.items()}
        indexes: dict[str, Folders] = {}
        for agent in self.stores:  # each folder resolved once, for every agent
            indexes[agent] = Folders([f for f in folders if f not in skip.get(agent, ())], known=forms)
            forms.update(indexes[agent].forms)
        with self._wake:
            self._folders = indexes
            for path, state in self._files.items():
                if not state.decided:
                    continue
                folder = indexes[state.agent].folder_of(state.cwd)
                if folder != state.folder:
                    state.folder = folder
                    state.announced = False
                    state.fresh = False  # its turns were written before the folder was opened
                    state.reread = True  # its whole history goes to the new folder's thread
                    self._dirty[path] = None
            # Files never opened (their folder's name did not match, as Claude Code's) may match now.
            for path, state in self._files.items():
                if state.decided and state.cwd is None and state.peeked == 0:
                    state.decided, state.stamp, state.fresh = False, None, False
                    self._dirty[path] = None
            self._rescan = True
            self._wake.notify_all()

    def reread(self, path: str) -> None:
        """Read the file again from its start (its consumer needs its whole history)."""
        with self._wake:
            state = self._files.get(path)
            if state is not None:
                state.reread = True
                self._dirty[path] = None
                self._wake.notify_all()

    def touch(self, path: str) -> None:
        """A file event: `path` may have changed."""
        with self._wake:
            self._dirty[path] = None
            self._wake.notify_all()

    def written(self, path: str) -> None:
        """A write to `path` in a watched folder: the sessions it may have changed are read."""
        for store in self.stores.values():
            for key in store.touched(path):
                self.touch(key)

    # --- what is known ---

    def sessions(self, folder: Path | None = None) -> list[Session]:
        """The sessions followed (in `folder`): a file that states no session id yet is none (a
        Gemini CLI resume leaves a file of its header alone)."""
        with self._lock:
            found = [s.reader.session if s.reader is not None else s.session for s in self._files.values()
                     if s.folder is not None and (folder is None or s.folder == folder)]
            return [session for session in found if session is not None and session.id is not None
                    and valid_id(session.id)]

    def reader_states(self) -> list[tuple[Session, dict[str, Any]]]:
        """Of the sessions whose readers can be taken up later (`SessionReader.state`) and read to
        their end, each one and where its reader stands (with the stamp it was read at)."""
        with self._lock:
            held = [(state.reader, state) for state in self._files.values()
                    if state.reader is not None and state.folder is not None and state.reader.caught_up]
        found = []
        for reader, state in held:
            saved = self._saved(reader, state)
            if saved is not None:
                found.append((reader.session, saved))
        return found

    def bytes_read(self, path: str) -> int:
        with self._lock:
            state = self._files.get(path)
            if state is None:
                return 0
            return state.peeked + (state.reader.bytes_read if state.reader else 0)

    def status(self) -> list[SourceStatus]:
        with self._lock:
            out = []
            for source in self.sources:
                count = sum(1 for s in self._files.values() if s.agent == source.agent and s.folder is not None)
                out.append(SourceStatus(source.agent, str(source.root), source.enabled, count,
                                        self._mode if source.enabled else "off"))
            return out

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Block until every pending path was read (tests and the CLI)."""
        deadline = time.monotonic() + timeout
        with self._wake:
            while (self._dirty or self._rescan or self._roots_pending or self._busy or self._deferred) and \
                    time.monotonic() < deadline:
                self._wake.wait(0.02)
            return not (self._dirty or self._rescan or self._roots_pending or self._busy or self._deferred)

    def scan_once(self) -> None:
        """Find and read every session now, on the caller's thread, without watching (the CLI):
        each to its end. One read stops at its budget (`READ_BUDGET`, an OpenCode reader's
        MESSAGES_PER_READ) and leaves the rest for later; a CLI has no later, so the sessions left
        are read again while that reads anything (an OpenCode session of over 500 messages was
        listed as its 500th left it, at every run)."""
        self._scan()
        read = self._total_read()
        while self._dirty:
            with self._lock:
                paths = list(self._dirty)
                self._dirty.clear()
            for path in paths:
                self._read(path)
            before, read = read, self._total_read()
            if read == before:
                return  # (nothing more to read: a message still being written, say)

    def _total_read(self) -> int:
        with self._lock:
            return sum(state.reader.bytes_read for state in self._files.values() if state.reader is not None)

    # --- the watcher ---

    def _start_observer(self) -> None:
        if self._poll:
            self._mode = "polling"
            return
        try:
            from watchdog.events import (
                DirCreatedEvent,
                DirMovedEvent,
                FileCreatedEvent,
                FileModifiedEvent,
                FileMovedEvent,
                FileSystemEventHandler,
            )
            from watchdog.observers import Observer

            follower = self
            # Asked of the kernel (the watch's inotify mask): without it every open and close of a
            # session file, ours included, is an event for watchdog's thread to build and drop (a
            # cold owner listing 3,000 sessions spent 0.9 s more CPU, and listed them 0.5 s later).
            self._events = [FileCreatedEvent, FileModifiedEvent, FileMovedEvent, DirCreatedEvent, DirMovedEvent]

            class Handler(FileSystemEventHandler):
                def on_any_event(self, event: FileSystemEvent) -> None:
                    # Only writes: our own reads raise "opened" / "closed" events, and reacting
                    # to those would read again, forever.
                    if event.event_type not in WRITE_EVENTS:
                        return
                    if event.is_directory:
                        if event.event_type in ("created", "moved"):
                            follower._directory_made(os.fsdecode(getattr(event, "dest_path", "") or event.src_path))
                        return
                    path = getattr(event, "dest_path", "") or event.src_path
                    if isinstance(path, bytes):
                        path = os.fsdecode(path)
                    follower.written(path)

            self._handler = Handler()
            self._observer = Observer()
            self._observer.start()
            self._mode = "inotify"
            self._schedule_roots()
        except Exception as error:  # noqa: BLE001 - any failure of the native watcher means: poll
            log.warning("session watcher unavailable (%s); polling instead", error)
            self._observer = None
            self._mode = "polling"

    def _schedule_roots(self) -> bool:
        """Watch every root that exists; for one that does not, watch its nearest existing parent
        (not recursively) for the folder on the way to appear. True when a root became watched."""
        if self._observer is None:
            return False
        for root in [r for r in self._scheduled if not r.is_dir()]:  # deleted: waited for again
            self._unwatch(self._scheduled.pop(root))
        appeared = False
        for root in self._watch_roots:
            if root in self._scheduled:
                continue
            try:
                if root.is_dir():
                    self._scheduled[root] = self._observer.schedule(self._handler, str(root),
                                                                    recursive=self._recursive.get(root, True),
                                                                    event_filter=self._events)
                    self._parents.pop(root, None)
                    appeared = True
                    continue
                parent = _nearest_existing(root)
                if parent is not None and self._parents.get(root) != parent:
                    self._parents[root] = parent
                    if parent not in self._parent_watches:
                        self._parent_watches[parent] = self._observer.schedule(self._handler, str(parent),
                                                                               event_filter=self._events)
                    if root.is_dir():  # made while the watch was being set up: not missed
                        return self._schedule_roots() or True
            except Exception as error:  # noqa: BLE001 - e.g. inotify watch limit reached
                log.warning("cannot watch %s (%s); polling instead", root, error)
                self._mode = "polling"
        self._unwatch_parents()
        if appeared:
            self._request_rescan()
        return appeared

    def _unwatch_parents(self) -> None:
        """Parents no root waits for any more are not watched any more."""
        for parent in [p for p in self._parent_watches if p not in self._parents.values()]:
            self._unwatch(self._parent_watches.pop(parent))

    def _unwatch(self, watch: ObservedWatch) -> None:
        try:
            if self._observer is not None:  # (stopped: nothing is watched)
                self._observer.unschedule(watch)
        except Exception:  # noqa: BLE001 - already gone with its folder
            pass

    def _directory_made(self, path: str) -> None:
        """A folder appeared: inside a root (a day's folder, a project), look for new files; in a
        parent watched for a root, only see whether the root is on its way."""
        if any(path.startswith(str(root) + os.sep) or path == str(root) for root in tuple(self._scheduled)):
            self._request_rescan()
        else:
            with self._wake:
                self._roots_pending = True
                self._wake.notify_all()

    def _request_rescan(self) -> None:
        with self._wake:
            self._rescan = True
            self._wake.notify_all()

    # --- the worker ---

    def _run(self) -> None:
        last_tick = 0.0
        while True:
            with self._wake:
                period = POLL_SECONDS if self._mode == "polling" else TICK_SECONDS
                timeout = max(0.0, last_tick + period - time.monotonic())
                if self._deferred:
                    timeout = min(timeout, 0.05)  # until the consumer caught up
                if not (self._dirty or self._rescan or self._roots_pending or self._stop):
                    self._wake.wait(timeout)
                if self._stop:
                    return
                if self._deferred and not (self._backlog is not None and self._backlog()):
                    # A batch at a time, in the order they were put off (the newest first): the
                    # consumer may be behind again after a few of them, and each put off again is
                    # looked at again (thousands, after a first scan).
                    for path in list(itertools.islice(self._deferred, DEFERRED_BATCH)):
                        self._dirty[path] = None
                        del self._deferred[path]
                rescan, self._rescan = self._rescan, False
                roots, self._roots_pending = self._roots_pending, False
                paths = list(self._dirty)
                self._dirty.clear()
                self._busy = True
            try:
                now = time.monotonic()
                if now - last_tick >= period:
                    last_tick = now
                    self._tick()
                if roots and not rescan:
                    rescan = self._schedule_roots()  # a root that appeared is scanned at once
                    with self._wake:
                        self._rescan = False  # (asked for by _schedule_roots: done here)
                if rescan:
                    self._schedule_roots()
                    self._scan()
                for path in paths:
                    self._read(path)
            except Exception:  # noqa: BLE001 - the worker must outlive any bug (files fail one by one)
                log.exception("following sessions failed")
            finally:
                with self._wake:
                    self._busy = False
                    self._wake.notify_all()

    def _tick(self) -> None:
        """Roots that appeared; followed files whose size changed without an event; in polling
        mode, new files too."""
        if self._observer is not None:
            self._schedule_roots()  # roots that appeared without an event seen, or were deleted
        if self._mode == "polling":
            appeared = [root for root in self._watch_roots if root not in self._polled and root.is_dir()]
            self._polled.update(appeared)
            if appeared or time.monotonic() - self._last_scan >= TICK_SECONDS:
                self._scan()  # new files: every tick (a root that appeared: at once); sizes: every poll
        now = time.monotonic()
        undecided = self._mode == "polling" or now - self._last_undecided >= UNDECIDED_SECONDS
        if undecided:
            self._last_undecided = now
        with self._lock:
            followed = [(p, s.agent, s.stamp) for p, s in self._files.items()
                        if s.folder is not None or (undecided and not s.decided)]
        for path, agent, stamp in followed:
            current = self.stores[agent].stamp(path)
            if current is not None and current.key() != stamp:
                self._read(path)
        self._let_go_dormant()

    def stored(self, path: str) -> None:
        """The consumer's store now holds where `path`'s reader stood (an `Update.state`): a reader
        put off while the store was behind is looked at again at the next tick (`_let_go_dormant`),
        not DORMANT_SECONDS later. A first scan reads thousands of old files long before they are
        all mirrored: their readers went only ten minutes after (issue #38: memory that grew with
        the history)."""
        with self._lock:
            state = self._files.get(path)
            if state is not None:
                state.dormant_after = 0.0

    def _let_go_dormant(self) -> None:
        """Let the readers of dormant files go (not written, nor read again, for DORMANT_SECONDS),
        each once the consumer's store holds exactly where it stood: thousands of old sessions held
        memory that grew with the history. A change takes the file up from the store (`_take_up`),
        as a new owner does."""
        if self._resume is None:
            return
        now = time.monotonic()
        cutoff = time.time() - self._dormant
        with self._lock:
            held = [(path, state) for path, state in self._files.items()
                    if state.reader is not None and state.folder is not None
                    and state.reader.caught_up and not state.reread and state.dormant_after <= now]
        let_go, warned = 0, False
        for path, state in held[:DORMANT_BATCH]:
            reader, folder, written = state.reader, state.folder, _mtime(path)
            if reader is None or folder is None:
                continue
            if written > cutoff:  # written lately: not before it is as old
                state.dormant_after = now + (written - cutoff)
                continue
            saved = self._saved(reader, state)  # None: a reader that cannot be taken up later
            stored = None
            if saved is not None:
                try:
                    stored = self._resume(folder, reader.session.path)
                except Exception as error:  # noqa: BLE001 - kept, as when the store is behind (told once a tick)
                    if not warned:
                        warned = True
                        log.warning("cannot read where %s stood (%s): its reader is kept", printable(path), error)
            with self._lock:
                if state.reader is not reader:
                    continue  # read meanwhile
                if saved is not None and stored == json.loads(json.dumps(saved)):
                    state.session, state.reader = reader.session, None
                    let_go += 1
                else:  # the store is behind (still mirroring), or it cannot be: not asked again for a while
                    state.dormant_after = now + self._dormant
        if let_go:
            with self._lock:
                kept = sum(1 for state in self._files.values() if state.reader is not None)
            log.info("let go of %d dormant session readers (%d kept)", let_go, kept)

    def _scan(self) -> None:
        """Every session file not known yet, the most recently written first (its gauge is the one
        shown); before the first scan reads them, `listing` may list them all quickly."""
        self._last_scan = time.monotonic()
        found: list[tuple[float, str, str]] = []
        for source in self.sources:
            if not source.enabled or source.store is None:
                continue
            if source.root.is_dir():
                self._polled.add(source.root)
            for path in source.store.keys():
                with self._lock:
                    known = path in self._files
                if not known:
                    found.append((_mtime(path), path, source.agent))
        found.sort(reverse=True)
        log.debug("scan: %d new session files", len(found))
        if self._listing is not None and found:
            with self._quiet() if not self._scanned else contextlib.nullcontext():
                decided = self._decided(found)
                newest = next(decided, None)
                if newest is not None:
                    self._list([newest])  # at once (its gauge is the one shown), not after every head
                if (second := next(decided, None)) is not None:
                    self._list(itertools.chain([second], decided))
        self.listed.set()
        if self._mode == "off":
            self._watch_after_listing()
        for _, path, _ in found:
            self._read(path)
        self._scanned = True

    def _watch_after_listing(self) -> None:
        """Start the file watch, on the worker, after the first scan listed the sessions: a cold
        listing waited for watchdog's import and a watch on every folder of the agents' stores
        (0.1 s) before it found a file. Each root watched asks for another scan (`_schedule_roots`),
        which finds the files made meanwhile; those found already are read after this, to their end."""
        if self._stop:
            return
        self._start_observer()
        with self._wake:
            stopped = self._stop
        if stopped:  # (`stop` ran while the watch started: it found none to stop)
            stop_observer(self._observer)

    def _decided(self, found: list[tuple[float, str, str]]) -> Iterator[tuple[str, Path, str]]:
        """The files found that are in an open folder, each as its head is peeked at (or its cwd
        is known: `known_cwds`)."""
        known: Mapping[str, KnownCwd] = {}
        if self._known_cwds is not None:
            try:
                known = self._known_cwds([path for _, path, _ in found])
            except Exception:  # noqa: BLE001 - then every head is peeked at
                log.exception("the known folders of the session files cannot be read")
        for _, path, agent in found:
            state = self._decide(path, agent, known.get(path))
            if state is not None and state.folder is not None:
                yield path, state.folder, state.agent

    def _list(self, files: Iterable[tuple[str, Path, str]]) -> None:
        if self._listing is not None:
            try:
                self._listing(files)
            except Exception:  # noqa: BLE001 - the files are read all the same
                log.exception("listing the sessions failed")

    def _decide(self, path: str, agent: str, known: KnownCwd | None = None) -> _File | None:
        """A file of `agent` found by a scan, its head peeked at (its folder decided), not read further."""
        try:
            self._follow(path, decide_only=True, agent=agent, known=known)
        except Exception:  # noqa: BLE001 - read (and logged) with the others
            return None
        with self._lock:
            return self._files.get(path)

    def _read(self, path: str) -> None:
        """Read one file; a file that fails is logged once and does not stop the others."""
        try:
            self._follow(path)
        except Exception:  # one bad file must not stop following the others
            if path not in self._failed:
                self._failed.add(path)
                log.exception("cannot follow session file %s", printable(path))

    def _agent_of(self, key: str) -> str | None:
        """Which agent's session `key` is (its store owns it), or None."""
        return next((agent for agent, store in self.stores.items() if store.owns(key)), None)

    def _follow(self, path: str, decide_only: bool = False, agent: str | None = None,
                known: KnownCwd | None = None) -> None:
        """Decide and read `path` (`agent`'s, when the caller knows: asking every store whose each of
        3,000 files is took 0.24 s of the cold owner's wait before it lists them; `known`: its stamp
        and cwd when an earlier read found them, see `known_cwds`)."""
        with self._lock:
            state = self._files.get(path)
            indexes = self._folders
        agent = state.agent if state is not None else agent or self._agent_of(path)
        if agent is None:
            return
        store = self.stores[agent]
        st = store.stamp(path)
        if st is None:
            return
        if state is None or (state.ident is not None and (state.ident != st.ident or st.size < state.size)):
            # New, or another file now (replaced, or rewritten shorter): decided and read afresh.
            # A file the initial scan did not see started while following; one rewritten is not new.
            state = _File(agent, fresh=self._scanned and state is None)
            with self._lock:
                self._files[path] = state
        state.ident = st.ident
        if not st.regular:
            state.decided, state.cwd, state.folder = True, None, None  # a link, FIFO or device: never read
            return
        if not state.decided:
            if state.stamp == st.key():
                return  # peeked at as it is now: undecided until it changes
            folders = indexes.get(state.agent) or Folders([])
            cwd: str | None
            if known is not None and known[0] == st.key():
                cwd, complete, read = known[1], True, 0  # (the file as it was read: the same head)
            else:
                cwd, complete, read = store.peek_cwd(path, folders)
            with self._wake:
                if self._folders is not indexes:
                    # Folders opened or closed during the peek: `set_folders` passed over this file
                    # (undecided then), so it is peeked again with the folders as they are now.
                    self._dirty[path] = None
                    return
                state.stamp, state.size = st.key(), st.size
                state.peeked += read
                if not complete:
                    state.fresh = True  # its head is being written: a session starting now
                    return
                state.cwd, state.decided = cwd, True
                state.folder = folders.folder_of(cwd)
        if state.folder is None or decide_only:
            return  # outside every open workspace folder: never read further
        resumed = False
        if state.reader is None:
            woken = state.session is not None  # let go while dormant: something changed (a subagent's file?)
            state.reader, state.session = self._new_reader(store, path), None
            resumed = self._take_up(state, store, path, st)
            if resumed and state.reader.left(st) == 0 and not state.reread and not woken:
                state.size, state.stamp, state.announced = st.size, st.key(), True
                if _mtime(path) < time.time() - self._dormant:  # dormant: its reader goes at once (a
                    state.session, state.reader = state.reader.session, None  # restart takes up thousands)
                return  # as the store has it: nothing to read, nothing to tell
        reader = state.reader
        if self._backlog is not None and self._backlog() and (
                (st.size if state.reread else reader.left(st)) > DEFER_BYTES or self._unread_history(state, store, path, st)):
            with self._lock:
                self._deferred[path] = None  # read once the consumer caught up (`_run`)
            return
        state.size, state.stamp = st.size, st.key()
        if state.announced and reader.caught_up:
            state.dormant_after = time.monotonic() + self._dormant
        if state.reread:
            state.reread, resumed = False, False
            reader.reset()
        change = reader.read(state.ident, budget=READ_BUDGET)
        while reader.replay:  # a rewind to a line the reader no longer remembers: the whole file again
            reader.reset()
            resumed = False
            change = reader.read(state.ident, budget=READ_BUDGET)
        if reader.rewritten:  # another file under the same inode: decided and read afresh
            with self._lock:
                self._files[path] = _File(state.agent, ident=state.ident)
            self._follow(path)
            return
        if not reader.caught_up:
            self.touch(path)  # the rest after the other files' turn
        session = reader.session
        if session.id is None:
            return
        if not valid_id(session.id):
            if not state.bad_id:
                state.bad_id = True
                log.warning("%s: session id %r is not one; not followed", printable(path), session.id[:40])
            return
        new = not state.announced
        if new or not change.empty:
            state.announced = True
            self.on_update(Update(state.folder, session, change, new, state.fresh, reader.caught_up,
                                  resumed and not change.from_start,
                                  self._saved(reader, state) if self._resume is not None else None))
        if reader.caught_up:
            reader.trim()  # thousands of readers: each remembers only its last lines

    def _unread_history(self, state: _File, store: SessionStore, path: str, st: Stamp) -> bool:
        """A session the first scan found, not read yet and not written lately: while the consumer is
        behind it waits, however small (a first scan finds thousands: each one read would hold its
        reader until the consumer stored it); a session written lately is read at once."""
        return not (state.announced or state.fresh) and 0 < store.written(path, st) < time.time() - self._dormant

    def _new_reader(self, store: SessionStore, path: str) -> SessionReader:
        reader = store.reader(path)
        reader.holds_window = self._window
        reader.stop_when_rewritten = True  # its head is checked again first (privacy rule)
        return reader

    @staticmethod
    def _saved(reader: SessionReader, state: _File) -> dict[str, Any] | None:
        saved = reader.state()
        return None if saved is None else {**saved, "stamp": list(state.stamp or ())}

    def _take_up(self, state: _File, store: SessionStore, path: str, st: Stamp) -> bool:
        """Take the session's reader up where the consumer's store says an earlier one stood
        (`SessionReader.resume`: without reading when the session is as it was then, else once what
        it read is checked to be the same). False when it is read from its start."""
        if self._resume is None or state.folder is None or state.reread or state.reader is None:
            return False
        try:
            saved = self._resume(state.folder, state.reader.session.path)
        except Exception:  # noqa: BLE001 - then it is read from its start
            log.exception("cannot take %s up where it was", printable(path))
            return False
        if not saved:
            return False
        reader = state.reader
        assert reader is not None
        if reader.resume(saved, st):
            return True
        state.reader = self._new_reader(store, path)
        return False


def _mtime(path: str) -> float:
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return 0.0


def valid_id(session_id: str) -> bool:
    """A session id a thread can be named by: not empty, not too long, printable, one word."""
    return 0 < len(session_id) <= MAX_ID_CHARS and session_id.isprintable() and session_id.split() == [session_id]


def _nearest_existing(path: Path) -> Path | None:
    """The deepest existing folder on the way to `path` (which does not exist)."""
    for parent in path.parents:
        try:
            if parent.is_dir():
                return parent
        except OSError:
            continue
    return None


def stop_observer(observer: Any) -> None:
    """Stop a watchdog observer, if there is one; stopping must not fail the daemon's shutdown."""
    if observer is None:
        return
    try:
        observer.stop()
        observer.join(timeout=2)
    except Exception:  # noqa: BLE001 - see the docstring
        pass
