"""Durable ledger storage: one SQLite database (WAL) per workspace.

An item is acknowledged only after its transaction commits, so a `kill -9` after the response
loses nothing. Writers take SQLite's write lock up front (`BEGIN IMMEDIATE`) and compute sequence
numbers inside the transaction, so two daemons on one workspace interleave without losing or
duplicating items. Items a history operation (a compaction, a rollback, a restore, an undo) takes
out of the active history are archived under its id, never deleted.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, TypeVar, cast
from urllib.parse import quote

from ctxd.errors import StoreUnavailable
from ctxd.ledger import bodies, search
from ctxd.places import ledger_database

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2

# `body` is declared TEXT but holds a zlib BLOB for a long item (schema version 2, `bodies.py`):
# SQLite keeps a BLOB's storage class in a TEXT column, so each value says what it is.
# `items` is a rowid table, its key a unique index: a row keeps up to ~4 KB on its page, where a
# `WITHOUT ROWID` table's keeps ~1 KB and gives each longer item an overflow page of its own (a 4 KB
# page for the rest of a 1.5 KB item: 198 MB for 120 MB of items in `bench/bench_heavy.py`).
# Ledgers made before are rewritten once at open (`_ITEMS_WITH_ROWID`).
_ITEMS_COLUMNS = """(
    thread TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body TEXT NOT NULL,
    tokens INTEGER NOT NULL,
    origin INTEGER,
    archived INTEGER,
    UNIQUE (thread, seq)
)"""

_SCHEMA_V1 = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS threads (
    thread TEXT PRIMARY KEY,
    history_version INTEGER NOT NULL DEFAULT 0,
    api_total INTEGER,
    api_seq INTEGER NOT NULL DEFAULT 0,
    reference TEXT,
    prompt_context TEXT,
    state TEXT,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS items {_ITEMS_COLUMNS};
CREATE INDEX IF NOT EXISTS items_archived ON items (thread, archived) WHERE archived IS NOT NULL;
CREATE TABLE IF NOT EXISTS moved (
    thread TEXT NOT NULL,
    seq INTEGER NOT NULL,
    now INTEGER NOT NULL,
    PRIMARY KEY (thread, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS compactions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    thread TEXT NOT NULL,
    created_at REAL NOT NULL,
    info TEXT NOT NULL
);
"""

# The active items' count and token sum of each thread, on its row (`ctxd/threads` lists thousands
# of threads without counting their items), kept by triggers that every connection runs (an
# earlier version's too): an item added, archived, brought back or deleted moves them. Added with
# the columns when a database has none (and counted once then); the schema version stays 1.
_COUNTS = [
    """CREATE TRIGGER IF NOT EXISTS items_counted_insert AFTER INSERT ON items WHEN NEW.archived IS NULL BEGIN
    INSERT INTO threads (thread, updated_at, active_items, active_tokens) VALUES (NEW.thread, 0, 1, NEW.tokens)
    ON CONFLICT (thread) DO UPDATE SET active_items = active_items + 1, active_tokens = active_tokens + NEW.tokens;
    END""",
    """CREATE TRIGGER IF NOT EXISTS items_counted_archive AFTER UPDATE OF archived ON items
    WHEN (OLD.archived IS NULL) != (NEW.archived IS NULL) BEGIN
    UPDATE threads SET active_items = active_items + (CASE WHEN NEW.archived IS NULL THEN 1 ELSE -1 END),
        active_tokens = active_tokens + (CASE WHEN NEW.archived IS NULL THEN NEW.tokens ELSE -OLD.tokens END)
    WHERE thread = NEW.thread;
    END""",
    """CREATE TRIGGER IF NOT EXISTS items_counted_tokens AFTER UPDATE OF tokens ON items
    WHEN OLD.archived IS NULL AND NEW.archived IS NULL BEGIN
    UPDATE threads SET active_tokens = active_tokens + NEW.tokens - OLD.tokens WHERE thread = NEW.thread;
    END""",
    """CREATE TRIGGER IF NOT EXISTS items_counted_delete AFTER DELETE ON items WHEN OLD.archived IS NULL BEGIN
    UPDATE threads SET active_items = active_items - 1, active_tokens = active_tokens - OLD.tokens
    WHERE thread = OLD.thread;
    END""",
]
_COUNT_COLUMNS = """
ALTER TABLE threads ADD COLUMN active_items INTEGER NOT NULL DEFAULT 0;
ALTER TABLE threads ADD COLUMN active_tokens INTEGER NOT NULL DEFAULT 0;
UPDATE threads SET active_items = (SELECT count(*) FROM items i WHERE i.thread = threads.thread AND i.archived IS NULL),
    active_tokens = (SELECT coalesce(sum(tokens), 0) FROM items i WHERE i.thread = threads.thread AND i.archived IS NULL);
"""

# Where the reader of each followed session's file stands, as of the items the thread holds
# (`Store.follow_state`): written in the transaction that mirrors them, so that a restarted owner
# takes each file up there instead of reading it again from its start.
_FOLLOWED = """
CREATE TABLE IF NOT EXISTS followed (path TEXT PRIMARY KEY, thread TEXT NOT NULL, state TEXT NOT NULL) WITHOUT ROWID;
"""

# `moved`: the seqs a compaction's swap gave up (items recorded while it ran, moved after its
# summary) and where each item is now, so that a seq once given keeps naming its item
# (`Store.resolve`). Added with `IF NOT EXISTS`: earlier versions ignore it, the version stays 1.

# Migrations from version N-1 to N, in order. Version 1 is created by _SCHEMA_V1.
# 2: a long item's body may be a zlib BLOB (`bodies.py`, issue #38). Nothing to change in the file
# (its TEXT bodies stay valid); the version is what makes an older ctxd, which would read the
# BLOB as text, refuse the ledger with its "upgrade ctxd" error.
_MIGRATIONS: dict[int, str] = {2: ""}

# `items_archived` indexes archived items only: every query on active items reads the primary key
# anyway, and a record then writes one B-tree page instead of two (`bench/bench_speed.py`). Files
# made before hold an index of every item; it is rebuilt at open. Either index serves either
# version of the code, so the schema version stays 1.
_PARTIAL_ARCHIVED_INDEX = """
DROP INDEX items_archived;
CREATE INDEX items_archived ON items (thread, archived) WHERE archived IS NOT NULL;
"""

# A ledger whose `items` is `WITHOUT ROWID` (made before) gets the rowid table (`Store._rewrite_items`):
# every row copied in one transaction, so that a crash or an error before its commit leaves the old
# table whole (and the next open does it again). Dropping the old table drops its triggers (made
# again in the same transaction) and index. Either table serves either version of the code (the
# same columns, the same unique key), so the schema version stays 1. A compressed body is copied
# as the BLOB it is (a TEXT column converts numbers only).
_ITEMS_WITH_ROWID = f"""
CREATE TABLE items_with_rowid {_ITEMS_COLUMNS};
INSERT INTO items_with_rowid (thread, seq, body, tokens, origin, archived)
    SELECT thread, seq, body, tokens, origin, archived FROM items ORDER BY thread, seq;
DROP TABLE items;
ALTER TABLE items_with_rowid RENAME TO items;
CREATE INDEX items_archived ON items (thread, archived) WHERE archived IS NOT NULL;
"""

# The WAL-index header in the `-shm` file: written twice in a row, 48 bytes each.
SHM_HEADER_BYTES = 48

# How stale a thread's `updated_at` may be left by a run of appends to it (see `Store.append`).
TOUCH_INTERVAL_SECONDS = 1.0

# In `Store.operate`'s marks: the operation being written, whose id is not known yet.
THIS_OPERATION = 0

THREAD_FIELDS = ("history_version", "api_total", "api_seq", "reference", "prompt_context", "state")


@dataclass
class Row:
    """One stored item. `origin` is the compaction that wrote it, `archived` the one that replaced it."""

    seq: int
    body: str
    tokens: int
    origin: int | None = None
    archived: int | None = None


@dataclass
class ThreadRow:
    thread: str
    history_version: int = 0
    api_total: int | None = None
    api_seq: int = 0
    reference: Any = None
    prompt_context: Any = None
    state: Any = None
    updated_at: float = 0.0
    active_items: int = 0  # the active items' count and token sum (kept by triggers: `_COUNTS`)
    active_tokens: int = 0


# The `followed` rows of the paths in `IN ({})` whose thread still says it mirrors that very file.
_MIRRORED_FILES = ("FROM followed f JOIN threads t ON t.thread = f.thread WHERE f.path IN ({}) AND CASE WHEN json_valid(t.state)"
                   " THEN json_type(t.state, '$.followed.path') = 'text'"
                   " AND json_extract(t.state, '$.followed.path') = f.path END")

database_path = ledger_database
"""Where a workspace's database lives: named by a hash of its path, readable by its name (ctxd.places)."""


P = ParamSpec("P")
R = TypeVar("R")


def _index_safe(write: Callable[P, R]) -> Callable[P, R]:
    """A ledger write (a method of Store) that the recall index made fail (damaged: its triggers
    write to it in the same transaction) is written again once the index is made anew
    (`Store.repair_index`): the index is derived data, and never fails a write."""
    @functools.wraps(write)
    def safe(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return write(*args, **kwargs)
        except (StoreUnavailable, sqlite3.IntegrityError) as error:
            store = cast("Store", args[0])
            problem = store.index_damage(error)
            if problem is None:
                raise
            if kwargs.get("wait") is False:
                raise WouldWait from error  # a write that may not wait: the repair waits, on the caller's worker
            store.rebuild_index(problem)
        return write(*args, **kwargs)
    return safe


class WouldWait(Exception):
    """A write asked not to wait (`wait=False`) found the store busy (the connection in use, the
    database locked by another process) or, for an append, written by another process since the
    caller looked (its view must be read again first). Nothing was written."""


class HistoryChanged(Exception):
    """A compaction's swap found the thread's history version moved since the compaction read it."""


# How long a write waits for another process's transaction before giving up (1003).
BUSY_TIMEOUT_SECONDS = 2.0
BUSY_TIMEOUT_MS = int(BUSY_TIMEOUT_SECONDS * 1000)
FREE_PAGES_KEPT = 64
"""`give_back_free_pages` leaves a ledger this many free pages (256 KB): later writes reuse them."""
FREE_PAGES_AT_ONCE = 2048
"""...and gives back at most this many (8 MB, about 25 ms) in one write, which holds the store's lock."""


class Store:
    """All SQL lives here. Safe to call from several threads: one lock serialises the connection.

    Opening refuses a database that belongs to another workspace (a leftover `-wal` replayed over
    this one's file), falls back to read-only when the file cannot be written (reads keep
    working), and every SQLite failure becomes StoreUnavailable naming the file and the fix.
    After every commit the file is checked to still be the one opened: a write into a file that
    was deleted meanwhile is not durable, so it is refused (and a new file started)."""

    def __init__(self, path: Path, workspace: Path | None = None, readonly: bool = False) -> None:
        self.path = path
        self.workspace = workspace
        self._lock = threading.RLock()
        self.readonly_reason: str | None = None
        self.generation = 0  # bumps when the file is reopened (after it was deleted)
        # The database file, opened by us to see it unlinked (`_check_durable`). Closed only after
        # the connection: closing a descriptor drops every POSIX lock this process holds on the
        # file, SQLite's included.
        self._file_fd: int | None = None
        self._counts_links = True  # False on a file system that says 0 links for a file that is there
        # The `-shm`, read to skip asking SQLite for the data version while nobody wrote (see
        # `data_version`); closed only after the connection, as SQLite locks it too.
        self._shm_path = f"{path}-shm"
        self._shm_fd: int | None = None
        self._seen: tuple[bytes, tuple[int, int]] | None = None  # a -shm header, and the version then
        self._wal_generation: bytes | None = None  # the `-wal` header's salt last marked with the owner
        self._wal_path = f"{path}-wal"
        self._wal_fd: int | None = None  # the `-wal`, open while the connection is (see `_read_wal_generation`)
        self._busy_ms = 0  # the connection's busy timeout (see `_set_busy_timeout`)
        # The thread an append last touched, the data version it saw, and when (see `append`).
        self._last_touch: tuple[str, tuple[int, int], float] | None = None
        self._marking = False
        self._indexing = False  # the recall index is set up on this connection (`search.install`)
        self.index_problem: str | None = None  # why the index is not written (damaged beyond a rebuild)
        self.index_rebuilds = 0  # times a damaged index was made anew while open (`repair_index`)
        self._db: sqlite3.Connection | None = None
        self.closed = False  # closed by `close` (a background writer stops: it must not open it again)
        self._readonly = readonly
        if readonly:
            with self._guard():
                self._db = self._connect_readonly()
                self._check_read_version()
            return
        self._open()

    # --- opening ---------------------------------------------------------------------------------

    def _connect_readonly(self) -> sqlite3.Connection:
        """A read-only connection. In a folder where not even the `-shm` file can be created, the
        file is read as immutable, which is right only when no `-wal` holds newer pages."""
        self._busy_ms = BUSY_TIMEOUT_MS
        uri = f"file:{quote(str(self.path))}?mode=ro"
        for attempt in (uri, uri + "&immutable=1"):
            db = sqlite3.connect(attempt, uri=True, check_same_thread=False, isolation_level=None,
                                 timeout=BUSY_TIMEOUT_SECONDS)
            try:
                db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                db.execute("PRAGMA schema_version").fetchone()  # opens the file (and its -wal) now
                return db
            except sqlite3.Error as error:
                db.close()
                wal = Path(f"{self.path}-wal")
                if (_kind(error) not in ("cantopen", "ioerr") or (wal.exists() and wal.stat().st_size > 0)
                        or "immutable" in attempt):
                    raise
        raise AssertionError("unreachable")

    def _open(self) -> None:
        with self._guard():
            if self.path.exists():
                self._check_owner()
            try:
                self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            except OSError as error:
                raise StoreUnavailable(f"cannot create the state folder {self.path.parent}: "
                                       f"{error.strerror or error}. Make it writable, or set state_dir to a "
                                       "writable folder, then retry.", kind="cantopen") from None
            _make_private(self.path)
            try:
                db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None,
                                     timeout=BUSY_TIMEOUT_SECONDS)
                self._db = db
                db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                self._busy_ms = BUSY_TIMEOUT_MS
                if db.execute("PRAGMA page_count").fetchone()[0] == 0:
                    # A new ledger (set before its first table): the pages its writes free (the
                    # recall index's merges) can be given back to the file system (`give_back_free_pages`).
                    db.execute("PRAGMA auto_vacuum = INCREMENTAL")
                if db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    db.execute("PRAGMA journal_mode = WAL")
                # NORMAL in WAL mode: a committed transaction survives the process being killed;
                # only a power loss can take the last ones back. FULL would fsync every record.
                db.execute("PRAGMA synchronous = NORMAL")
                self._migrate(self.workspace)
            except (sqlite3.Error, StoreUnavailable) as error:
                self.close()
                kind = error.kind if isinstance(error, StoreUnavailable) else _kind(error)
                if kind not in ("readonly", "full", "ioerr", "cantopen") or not self.path.exists():
                    raise
                # Writing is impossible: open read-only, so that the history can still be read.
                self.readonly_reason = (error if isinstance(error, StoreUnavailable)
                                        else _unavailable(self.path, error)).message
                self._db = self._connect_readonly()
                self._check_owner(self._db)
                self._check_read_version()
            self._file_fd = _open_fd(self.path)
            self._counts_links = self._file_fd is not None and os.fstat(self._file_fd).st_nlink > 0
            self.closed = False

    def _check_owner(self, db: sqlite3.Connection | None = None) -> None:
        """Refuse a database written for another workspace. Read through a read-only connection
        first, so that a foreign `-wal` is never checkpointed into this workspace's file."""
        if self.workspace is None:
            return
        own = db is None
        if own:
            try:
                db = self._connect_readonly()
            except sqlite3.Error:
                return  # cannot even read it: the read-write open reports why
        assert db is not None
        try:
            row = db.execute("SELECT value FROM meta WHERE key = 'workspace'").fetchone()
        except sqlite3.OperationalError as error:
            if "no such table" in str(error):
                return  # a new, empty database
            raise
        finally:
            if own:
                db.close()
        if row is not None and row[0] != str(self.workspace):
            wal = Path(f"{self.path}-wal")
            hint = (f" A leftover {wal} from another database may have been replayed over it: move {wal} "
                    f"(and {self.path}-shm) aside, then retry." if wal.exists() else
                    f" Move {self.path} aside (ctxd then starts a new ledger for this workspace).")
            raise StoreUnavailable(f"{self.path} holds the ledger of another workspace ({row[0]}), not of "
                                   f"{self.workspace}; ctxd will not use it.{hint}")

    def _check_read_version(self) -> None:
        """`_check_version` of a read-only connection, closed when refused."""
        assert self._db is not None
        try:
            self._check_version(self._db)
        except BaseException:
            self.close()
            raise

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """SQLite failures as StoreUnavailable, naming the file and what to do."""
        try:
            yield
        except sqlite3.IntegrityError:
            raise  # a bug of ours, not the store's state
        except sqlite3.Error as error:
            raise _unavailable(self.path, error) from None
        except bodies.DamagedBody as error:
            raise _damaged(self.path, error) from None

    def _connection(self) -> sqlite3.Connection:
        """The open connection, reopening a file that could not be opened before (fixed since?)."""
        if self._db is None:
            self._open()
        assert self._db is not None
        return self._db

    def close(self) -> None:
        """Close the connection. What the `-wal` holds is copied into the file first (a passive
        checkpoint, which waits for no one): a ledger closed cleanly is whole in its own file, even
        when another connection keeps SQLite from doing so as it closes."""
        with self._lock:
            self.closed = True
            if self._db is not None:
                if not (self._readonly or self.readonly_reason or self._db.in_transaction):
                    try:
                        self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    except sqlite3.Error as error:
                        log.info("%s: no checkpoint before closing (%s)", self.path, error)
                self._db.close()
                self._db = None
            self._close_wal_fd()
            for fd in (self._file_fd, self._shm_fd):
                if fd is not None:
                    os.close(fd)
            self._file_fd = self._shm_fd = self._seen = None

    def _close_wal_fd(self) -> None:
        if self._wal_fd is not None:
            os.close(self._wal_fd)
            self._wal_fd = None

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._guard():
            db = self._connection()
            self._set_busy_timeout(db, True)
            yield db

    @contextmanager
    def _write(self, wait: bool = True) -> Iterator[sqlite3.Connection]:
        """One write transaction, acknowledged only once it is durable in the file we opened.
        With `wait=False`, raises WouldWait instead of waiting for the store."""
        if not self._lock.acquire(blocking=wait):
            raise WouldWait
        try:
            try:  # `_guard`, written out: one generator less on every record's path
                db = self._connection()
                if self.readonly_reason is not None:
                    raise StoreUnavailable(self.readonly_reason)
                self._set_busy_timeout(db, wait)
                try:
                    db.execute("BEGIN IMMEDIATE")
                except sqlite3.OperationalError as error:
                    if not wait and _kind(error) == "locked":
                        raise WouldWait from None
                    raise
                try:
                    yield db
                    db.execute("COMMIT")
                except BaseException:
                    if db.in_transaction:
                        try:
                            db.execute("ROLLBACK")
                        except sqlite3.Error:
                            pass  # the connection gives the transaction up when it closes
                    raise
            except sqlite3.IntegrityError:
                raise
            except sqlite3.Error as error:
                raise _unavailable(self.path, error) from None
            except bodies.DamagedBody as error:
                raise _damaged(self.path, error) from None
            self._check_durable()
            self._mark_wal_generation(wait)
        finally:
            self._lock.release()

    def give_back_free_pages(self) -> int:
        """Shrink the file by the pages its writes freed, beyond FREE_PAGES_KEPT; the pages given
        back. A first import of thousands of sessions leaves megabytes free, more or fewer as its
        writes were timed (the recall index merges its segments as it grows). Only a ledger made
        with `auto_vacuum = INCREMENTAL` can (older ones reuse theirs); never waits for another
        writer, and a failure only leaves the pages where they were."""
        if self.closed or self._readonly:
            return 0
        try:
            with self._read() as db:  # (most calls: nothing to give back, and no write made)
                if db.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:  # 2: INCREMENTAL
                    return 0
                if db.execute("PRAGMA freelist_count").fetchone()[0] <= FREE_PAGES_KEPT:
                    return 0
            with self._write(wait=False) as db:
                free = int(db.execute("PRAGMA freelist_count").fetchone()[0])
                pages = min(free - FREE_PAGES_KEPT, FREE_PAGES_AT_ONCE)
                # (Python's sqlite3 steps a pragma once, and one step of `incremental_vacuum` frees
                # one page.)
                for _ in range(pages):
                    db.execute("PRAGMA incremental_vacuum(1)")
                return max(0, pages)
        except (WouldWait, StoreUnavailable) as error:
            log.info("%s: its free pages were not given back (%s)", self.path, error)
            return 0

    def _set_busy_timeout(self, db: sqlite3.Connection, wait: bool) -> None:
        """SQLite's wait for another process's lock: BUSY_TIMEOUT_SECONDS, or none for a write
        that may not wait. Set only when it changes (a run of such writes sets it once)."""
        busy_ms = BUSY_TIMEOUT_MS if wait else 0
        if busy_ms != self._busy_ms:
            db.execute(f"PRAGMA busy_timeout = {busy_ms}")
            self._busy_ms = busy_ms

    def _mark_wal_generation(self, wait: bool = True) -> None:
        """Write the owner row into every `-wal` generation this store writes to: when the log
        restarts after a checkpoint (its header's salt changes), the pages written before are gone
        from it, and a leftover `-wal` must still say whose it is (see `_check_owner`)."""
        if self.workspace is None or self._marking:
            return
        generation = self._read_wal_generation()
        if generation is None or generation == self._wal_generation:
            return
        self._wal_generation = generation
        self._marking = True
        try:
            with self._write(wait) as db:
                db.execute("INSERT OR REPLACE INTO meta VALUES ('workspace', ?)", (str(self.workspace),))
        except WouldWait:  # the caller's own write is committed: the next write marks it
            self._wal_generation = None
            return
        except StoreUnavailable as error:  # the caller's own write is committed: do not fail it
            log.warning("could not mark %s-wal with its owner: %s", self.path, error.message)
        finally:
            self._marking = False
        self._wal_generation = self._read_wal_generation()  # our own write may have restarted it

    def _read_wal_generation(self) -> bytes | None:
        """The `-wal` header's checkpoint sequence and salts (bytes 12-24); one `pread`, as this
        runs after every commit. The file stays open while the connection is: SQLite removes a
        `-wal` only when its last connection closes, and ours is open."""
        try:
            if self._wal_fd is None:
                self._wal_fd = os.open(self._wal_path, os.O_RDONLY)
            header = os.pread(self._wal_fd, 12, 12)
        except OSError:
            self._close_wal_fd()
            return None
        return header if len(header) == 12 else None

    def _check_durable(self) -> None:
        """The file we wrote must still be linked (not deleted, with its folder or alone, nor
        replaced by another file moved onto its name): a commit into an unlinked file is lost at
        the next start. Start a new file and refuse the write. One `fstat` of a descriptor we hold,
        not a `stat` of the path: this runs after every commit. (A file moved elsewhere, folder and
        all, is still linked: what was written is still on disk, where it was moved to. A file
        system that reports no links for a file that is there gets no check.)"""
        if self._file_fd is None or not self._counts_links or os.fstat(self._file_fd).st_nlink > 0:
            return
        self.close()
        self.generation += 1
        message = (f"{self.path} was deleted or replaced while ctxd was running (was the state folder "
                   f"{self.path.parent.parent} removed?), so this change was not saved.")
        try:
            self._open()
        except StoreUnavailable as error:
            raise StoreUnavailable(f"{message} A new ledger could not be started: {error.message}") from None
        raise StoreUnavailable(f"{message} A new, empty ledger was started in its place: send the change again.")

    def _migrate(self, workspace: Path | None) -> None:
        """Create or upgrade the schema, and write the owner (meta.workspace) again: every
        session's `-wal` then carries it, so a leftover `-wal` beside another workspace's file is
        recognised. When this write fails (read-only, disk full), the store opens read-only."""
        self._marking = True  # this write is the mark
        try:
            if self._rewrite_items():
                self._give_back_space()
            self._migrate_locked(workspace)
        finally:
            self._marking = False
        self._wal_generation = self._read_wal_generation()

    def _rewrite_items(self) -> bool:
        """Rewrite a ledger's `WITHOUT ROWID` items as a rowid table (`_ITEMS_WITH_ROWID`), in a
        transaction of its own before the opening's, with the count triggers the old table took
        with it. True when done. A failure (a full disk, another process's long write) leaves the
        old table, which this code uses as well; the next open tries again."""
        if not self._items_without_rowid(self._connection()):
            return False
        try:
            with self._write() as db:
                if not self._items_without_rowid(db):
                    return False  # another process did it meanwhile
                log.info("%s: rewriting the items as a rowid table (once)", self.path)
                _run_script(db, _ITEMS_WITH_ROWID)
                for trigger in _COUNTS:
                    db.execute(trigger)
        except (StoreUnavailable, sqlite3.Error) as error:
            # The old table stays in use. What keeps the ledger from being written (read-only,
            # damaged) fails the opening's transaction next, which says so.
            log.warning("%s: its items were not rewritten (%s); the next open tries again", self.path, error)
            if (error.kind if isinstance(error, StoreUnavailable) else _kind(error)) == "full":
                self._empty_wal()  # the copy rolled back grew it: give that back
            return False
        return True

    @staticmethod
    def _items_without_rowid(db: sqlite3.Connection) -> bool:
        """`items` is the `WITHOUT ROWID` table of the ledgers made before, in a schema this code
        may change (a newer one is refused by the opening)."""
        table = db.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'items'").fetchone()
        if table is None or "WITHOUT ROWID" not in table[0].upper():
            return False
        row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        return row is None or int(row[0]) <= SCHEMA_VERSION

    def _give_back_space(self) -> None:
        """After the rewrite, the old table's pages are free but still in the file: `VACUUM` gives
        them back to the disk (the file shrinks by about a third), and the `-wal` it filled is
        emptied. Nothing is lost if either fails (a full disk: VACUUM needs a copy's room)."""
        db = self._connection()
        try:
            db.execute("VACUUM")
        except sqlite3.Error as error:
            log.warning("%s: the space of its old items was not given back (%s)", self.path, error)
        self._empty_wal()

    def _empty_wal(self) -> None:
        """Checkpoint and truncate the `-wal` (a reader still in it keeps it: that is no error)."""
        try:
            self._connection().execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except (sqlite3.Error, StoreUnavailable) as error:
            log.info("%s: its -wal was not emptied (%s)", self.path, error)

    def _migrate_locked(self, workspace: Path | None) -> None:
        with self._write() as db:
            _run_script(db, _SCHEMA_V1)
            version = self._check_version(db)
            for target in range(version + 1, SCHEMA_VERSION + 1):
                _run_script(db, _MIGRATIONS[target])
            index = db.execute("SELECT sql FROM sqlite_master WHERE type = 'index' AND name = 'items_archived'"
                               ).fetchone()
            if index is not None and "WHERE" not in index[0]:
                _run_script(db, _PARTIAL_ARCHIVED_INDEX)
            columns = {row[1] for row in db.execute("PRAGMA table_info(threads)")}
            if "active_items" not in columns:
                _run_script(db, _COUNT_COLUMNS)
            for trigger in _COUNTS:
                db.execute(trigger)
            _run_script(db, _FOLLOWED)
            db.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            if workspace is not None:
                owner = db.execute("SELECT value FROM meta WHERE key = 'workspace'").fetchone()
                if owner is not None and owner[0] != str(workspace):
                    raise StoreUnavailable(f"{self.path} holds the ledger of another workspace ({owner[0]}), "
                                           f"not of {workspace}; move it aside, then retry.")
                db.execute("INSERT OR REPLACE INTO meta VALUES ('workspace', ?)", (str(workspace),))
            self._install_index(db)

    def _check_version(self, db: sqlite3.Connection) -> int:
        """The ledger's schema version; one newer than this code's is refused (a newer ctxd may
        have stored what this one would misread: schema 2's compressed bodies, for ctxd before it)."""
        try:
            row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except sqlite3.OperationalError as error:
            if "no such table" in str(error):
                return SCHEMA_VERSION  # a new, empty database
            raise
        version = int(row[0]) if row else SCHEMA_VERSION
        if version > SCHEMA_VERSION:
            raise StoreUnavailable(f"{self.path} has schema version {version}; this ctxd reads up to "
                                   f"{SCHEMA_VERSION}: upgrade ctxd.")
        return version

    def _install_index(self, db: sqlite3.Connection) -> None:
        """The recall index on this connection (its triggers; built if missing or damaged), in
        the opening's transaction. An index that cannot even be made anew is left alone: the
        ledger opens without it (recall then says why)."""
        db.execute("SAVEPOINT recall_index")
        try:
            self._indexing = search.install(db)
            self.index_problem = None
        except sqlite3.Error as error:
            if search.transient(error):
                raise
            db.execute("ROLLBACK TO recall_index")
            self._give_up_index(db, error)
        db.execute("RELEASE recall_index")

    def _give_up_index(self, db: sqlite3.Connection, error: sqlite3.Error | StoreUnavailable) -> None:
        try:
            search.uninstall(db)
        except sqlite3.Error:
            pass  # (its triggers went with the connection's TEMP schema)
        self._indexing = False
        self.index_problem = (f"{self.path}: the recall index is damaged and could not be made anew "
                              f"({error}); the history is kept and can be read, but not searched. Restart ctxd "
                              "to try again.")
        log.warning("%s", self.index_problem)

    def repair_index(self, error: Exception) -> bool:
        """After `error`: when the recall index is damaged (the TEMP triggers and a mirror's
        indexing write to it in the ledger's own transactions, and a search reads it), make it
        anew, empty (the next searches index the ledger again), or when even that fails, stop
        writing to it. True when the index was the cause (the caller may try again); False when
        it is whole, and for errors of the store's state (locked, read-only, a full disk)."""
        problem = self.index_damage(error)
        if problem is None:
            return False
        self.rebuild_index(problem)
        return True

    def index_damage(self, error: Exception) -> str | None:
        """What is wrong with the recall index after `error`, or None: it is whole, or the error is
        the store's state (locked, read-only, a full disk), or this connection does not index."""
        if not self._indexing or (isinstance(error, StoreUnavailable) and error.kind not in ("corrupt", "other")):
            return None
        try:
            with self._read() as db:
                return search.damage(db)
        except StoreUnavailable:
            return None

    def rebuild_index(self, problem: str) -> None:
        """Make the damaged index anew, empty; when even that fails, stop writing to it."""
        with self._lock:
            log.warning("%s: the recall index is damaged (%s): it is made anew from the ledger", self.path, problem)
            self.index_rebuilds += 1
            try:
                with self._write() as db:
                    search.rebuild(db)
            except (StoreUnavailable, sqlite3.IntegrityError) as failure:
                if isinstance(failure, StoreUnavailable) and failure.kind not in ("corrupt", "other"):
                    raise
                self._give_up_index(self._connection(), failure)

    def data_version(self) -> tuple[int, int]:
        """Changes whenever another connection (another daemon) commits to this database, or the
        file was reopened. Asked before most requests (the gauge's too), so it is answered without
        SQLite while the `-shm` header is as it was when SQLite last answered: every commit, by any
        connection, rewrites that header (https://www.sqlite.org/walformat.html, "WAL-Index
        Header"). The header is read before SQLite is asked, so a commit in between is seen next
        time; its two copies differ while a writer is updating it, and SQLite is asked then."""
        with self._lock:
            try:
                db = self._connection()
                header = self._read_shm_header()
                if header is not None and self._seen is not None and self._seen[0] == header:
                    return self._seen[1]
                version = self._data_version(db)
                self._seen = (header, version) if header is not None else None
                return version
            except sqlite3.Error as error:
                raise _unavailable(self.path, error) from None

    def commit_mark(self) -> tuple[int, bytes] | None:
        """What changes with every commit to the database by any connection, this one's included:
        the `-shm` header (see `data_version`) and the file's generation. None when the header
        cannot be read whole: then no commit may be assumed absent."""
        with self._lock:
            try:
                self._connection()
            except sqlite3.Error:
                return None
            header = self._read_shm_header()
            return None if header is None else (self.generation, header)

    def _read_shm_header(self) -> bytes | None:
        """The `-shm` header's first copy when both copies agree (one `pread`), else None."""
        try:
            if self._shm_fd is None:
                self._shm_fd = os.open(self._shm_path, os.O_RDONLY | os.O_CLOEXEC)
            copies = os.pread(self._shm_fd, 2 * SHM_HEADER_BYTES, 0)
        except OSError:
            return None  # (never closed here: see `_shm_fd`)
        first = copies[:SHM_HEADER_BYTES]
        return first if len(copies) == 2 * SHM_HEADER_BYTES and first == copies[SHM_HEADER_BYTES:] else None

    def _data_version(self, db: sqlite3.Connection) -> tuple[int, int]:
        return self.generation, int(db.execute("PRAGMA data_version").fetchone()[0])

    # --- reads -----------------------------------------------------------------------------------

    def reading(self) -> AbstractContextManager[sqlite3.Connection]:
        """The connection, for one read by a module that keeps its own tables here (the recall
        index: ctxd/ledger/search.py)."""
        return self._read()

    def writing(self) -> AbstractContextManager[sqlite3.Connection]:
        """One write transaction, for the same modules (the index catching up with the items)."""
        return self._write()

    @contextmanager
    def writing_while_open(self) -> Iterator[sqlite3.Connection | None]:
        """One write transaction, or None once the store was closed: for a writer in the
        background, which must stop then rather than open the store again."""
        with self._lock:
            if self.closed:
                yield None
                return
            with self._write() as db:
                yield db

    def thread(self, thread: str) -> ThreadRow | None:
        with self._read() as db:
            row = db.execute(f"SELECT {_ROW} FROM threads WHERE thread = ?", (thread,)).fetchone()
        return _row(row) if row is not None else None

    def thread_rows(self, threads: list[str]) -> dict[str, ThreadRow]:
        """Several threads' rows at once (a listing's changed threads)."""
        return {row[0]: _row(row) for row in self._of_threads(f"SELECT {_ROW} FROM threads", threads)}

    def listing(self, threads: list[str] | None = None) -> list[tuple[str, float, int, int | None, int, int, int]]:
        """Every thread's (or those of `threads` that exist) (name, updated_at, history version, API
        total and seq, active items and tokens): what says whether a listed thread changed, without
        its JSON."""
        select = "SELECT thread, updated_at, history_version, api_total, api_seq, active_items, active_tokens FROM threads"
        if threads is not None:
            return self._of_threads(select, threads)
        with self._read() as db:
            return db.execute(select).fetchall()

    def _of_threads(self, select: str, threads: list[str]) -> list[Any]:
        """The rows `select` (over `threads`) gives for these threads, 500 names per statement."""
        found: list[Any] = []
        with self._read() as db:
            for start in range(0, len(threads), 500):
                part = threads[start:start + 500]
                found += db.execute(f"{select} WHERE thread IN ({', '.join('?' * len(part))})", part).fetchall()
        return found

    def follow_state(self, path: str) -> dict[str, Any] | None:
        """Where the reader of a followed session's file stood with what its thread holds (None:
        never mirrored, or its thread no longer says it mirrors that file)."""
        with self._read() as db:
            row = db.execute(f"SELECT f.state {_MIRRORED_FILES.format('?')}", (path,)).fetchone()
        try:
            state = json.loads(row[0]) if row is not None else None
        except ValueError:
            return None
        return state if isinstance(state, dict) else None

    def followed_paths(self, paths: list[str]) -> set[str]:
        """Those of `paths` that have a `follow_state`, judged by SQLite's JSON functions: a
        restart's listing asks for thousands, and decoding each state in Python (several KB) only
        to drop it took a warm owner 0.15 s on the path to its first listing (bench/README.md)."""
        found: set[str] = set()
        for start in range(0, len(paths), 500):  # 500 paths per statement
            part = paths[start:start + 500]
            with self._read() as db:
                found.update(path for (path,) in db.execute(
                    f"SELECT f.path {_MIRRORED_FILES.format(', '.join('?' * len(part)))}"
                    " AND CASE WHEN json_valid(f.state) THEN json_type(f.state) = 'object' END", part))
        return found

    def resolve(self, thread: str, seq: int) -> int:
        """Where the item given `seq` is stored now: `seq` itself, unless a compaction's swap moved
        the item (it was recorded while the compaction ran) and nothing is stored there."""
        with self._read() as db:
            if db.execute("SELECT 1 FROM items WHERE thread = ? AND seq = ?", (thread, seq)).fetchone():
                return seq
            row = db.execute("SELECT now FROM moved WHERE thread = ? AND seq = ?", (thread, seq)).fetchone()
        return seq if row is None else int(row[0])

    def active_rows(self, thread: str) -> list[Row]:
        with self._read() as db:
            rows = db.execute(
                "SELECT seq, body, tokens, origin FROM items WHERE thread = ? AND archived IS NULL ORDER BY seq",
                (thread,),
            )
            return [Row(seq, bodies.decode(body), tokens, origin) for seq, body, tokens, origin in rows]

    def all_rows(self, thread: str) -> list[Row]:
        """Active and archived items, in the order they were first recorded."""
        with self._read() as db:
            rows = db.execute(
                "SELECT seq, body, tokens, origin, archived FROM items WHERE thread = ? ORDER BY seq", (thread,)
            )
            return [Row(seq, bodies.decode(body), tokens, origin, archived)
                    for seq, body, tokens, origin, archived in rows]

    def bodies_from(self, thread: str, after_seq: int, limit: int) -> list[tuple[int, int, str | bytes]]:
        """Up to `limit` of a thread's items (active and archived) after `after_seq`, in seq order:
        (seq, rowid, body as stored). A recount reads a long thread by pages (`Workspace.set_prompt_context`)."""
        with self._read() as db:
            return db.execute("SELECT seq, rowid, body FROM items WHERE thread = ? AND seq > ? ORDER BY seq LIMIT ?",
                              (thread, after_seq, limit)).fetchall()

    def threads(self) -> list[tuple[ThreadRow, int]]:
        """Every thread with its count of active items."""
        with self._read() as db:
            rows = db.execute("SELECT thread, history_version, updated_at, active_items FROM threads"
                              " ORDER BY updated_at DESC").fetchall()
        return [(ThreadRow(name, version, updated_at=updated), count) for name, version, updated, count in rows]

    def tokens_after_reports(self, rows: Mapping[str, ThreadRow]) -> dict[str, int]:
        """Per thread of `rows` that has an API report (`api_seq`), the tokens of its active items
        after it; a thread with none after it is left out. One statement per 400 threads: a
        restart's first listing read 3,000 threads' sums one statement each, each waiting for the
        store's lock while the follower took up its files (bench/README.md, round twenty-three)."""
        reported = [(name, row.api_seq) for name, row in rows.items() if row.api_seq > 0]
        found: dict[str, int] = {}
        for start in range(0, len(reported), 400):  # (two values each: under SQLite's oldest limit, 999)
            part = reported[start:start + 400]
            with self._read() as db:
                found.update(db.execute(
                    f"WITH r(thread, after) AS (VALUES {', '.join(['(?, ?)'] * len(part))}) "
                    "SELECT r.thread, sum(i.tokens) FROM r JOIN items i ON i.thread = r.thread AND i.seq > r.after "
                    "AND i.archived IS NULL GROUP BY r.thread", [value for pair in part for value in pair]))
        return found

    def operations(self, thread: str) -> list[tuple[int, float, dict[str, Any]]]:
        """The thread's history operations, oldest first: (id, created_at, info). They share the
        `compactions` table (and its ids) with compactions: an info without `kind` is a compaction
        of ctxd's first versions."""
        with self._read() as db:
            rows = db.execute("SELECT id, created_at, info FROM compactions WHERE thread = ? ORDER BY id", (thread,))
            return [(cid, created, json.loads(info)) for cid, created, info in rows]

    def compactions(self, thread: str) -> list[tuple[int, float, dict[str, Any]]]:
        """The thread's compactions, oldest first: (id, created_at, info)."""
        return [op for op in self.operations(thread) if op[2].get("kind", "compaction") == "compaction"]

    @_index_safe
    def annotate_compaction(self, compaction_id: int, **info: Any) -> None:
        """Add what is known only after it is written (the tokens after it) to an operation's info."""
        with self._write() as db:
            self._merge_info(db, compaction_id, info)

    # --- writes ----------------------------------------------------------------------------------

    def _touch(self, db: sqlite3.Connection, thread: str, **fields: Any) -> None:
        """Create the thread's row if needed and set `fields` and `updated_at`: one statement."""
        self._last_touch = None
        names = ["updated_at"]
        values: list[Any] = [time.time()]
        for name, value in fields.items():
            if name not in THREAD_FIELDS:
                raise KeyError(name)
            names.append(name)
            stored = name in ("reference", "prompt_context", "state") and value is not None
            values.append(json.dumps(value) if stored else value)
        updates = ", ".join(f"{name} = excluded.{name}" for name in names)
        db.execute(f"INSERT INTO threads (thread, {', '.join(names)}) VALUES (?{', ?' * len(names)}) "
                   f"ON CONFLICT (thread) DO UPDATE SET {updates}", (thread, *values))

    def _next_seq(self, db: sqlite3.Connection, thread: str) -> int:
        return int(db.execute("SELECT coalesce(max(seq), 0) FROM items WHERE thread = ?", (thread,)).fetchone()[0]) + 1

    @_index_safe
    def append(self, thread: str, rows: list[tuple[str, int]], known: tuple[tuple[int, int] | None, int] | None = None,
               wait: bool = True, items: list[Any] | None = None) -> tuple[int, tuple[int, int]]:
        """Store `(body, tokens)` rows after every existing item; return the first new seq and the
        data version seen in the transaction. `known` is (data version, next seq) as the caller
        last saw them: when no other connection wrote since, the next seq is taken from it instead
        of being looked up (a record's hot path). `wait=False`: see WouldWait.

        The thread's `updated_at` is left as it is when this connection set it, in an append to the
        same thread, less than TOUCH_INTERVAL_SECONDS ago, with no other write since (by another
        connection, or to another thread here): the order of threads by recency stays the same,
        and a run of records saves a page write per commit (`bench/bench_speed.py`).

        `items`, the rows' items as parsed, are indexed for recall in the same transaction (a
        mirrored session's slices: nothing is parsed again). Without them (a record: one page
        write per commit) the next search indexes the rows."""
        with self._write(wait) as db:
            version = self._data_version(db)
            if known is not None and known[0] == version:
                first = known[1]
            elif known is not None and not wait:
                raise WouldWait  # another process wrote: the caller's view of the thread is stale
            else:
                first = self._next_seq(db, thread)
            db.executemany(  # (rows made as they are inserted: a huge record's are not held twice)
                "INSERT INTO items (thread, seq, body, tokens) VALUES (?, ?, ?, ?)",
                ((thread, first + i, bodies.encode(body), tokens) for i, (body, tokens) in enumerate(rows)),
            )
            if items is not None and self._indexing:
                search.index_appended(db, thread, first, items)
            last, now = self._last_touch, time.monotonic()
            touch = last is None or last[:2] != (thread, version) or now - last[2] >= TOUCH_INTERVAL_SECONDS
            if touch:
                self._touch(db, thread)
        if touch:  # committed: the row exists, with this `updated_at`
            self._last_touch = (thread, version, now)
        return first, version

    @_index_safe
    def update_thread(self, thread: str, follow: tuple[str, dict[str, Any]] | None = None, **fields: Any) -> None:
        """Set a thread's fields; `follow`: its followed file and where that file's reader stands
        (`follow_state`), in the same transaction."""
        with self._write() as db:
            self._touch(db, thread, **fields)
            if follow is not None:
                db.execute("INSERT OR REPLACE INTO followed VALUES (?, ?, ?)", (follow[0], thread, json.dumps(follow[1])))

    def create_threads(self, threads: list[tuple[str, dict[str, Any]]]) -> list[str]:
        """Make each thread with its fields unless it exists, in one transaction; the ones made."""
        made = []
        with self._write() as db:
            for thread, fields in threads:
                if db.execute("SELECT 1 FROM threads WHERE thread = ?", (thread,)).fetchone() is None:
                    self._touch(db, thread, **fields)
                    made.append(thread)
        return made

    @_index_safe
    def recount(self, thread: str, counted: Mapping[int, tuple[bytes, int]], count: Callable[[str], int],
                **fields: Any) -> int:
        """Give every item of a thread (active and archived: an undo brings the archived back) the
        tokens of another counter, and set `fields`, in one transaction: a crash leaves the old
        counts with the old fields. `counted`: by rowid, the digest of the body counted outside the
        transaction (`body_digest`) and its tokens; an item it lacks, or whose body is not that one,
        is counted here with `count` (its JSON). The thread row's token sum follows (`_COUNTS`).
        Returns how many items changed."""
        with self._write() as db:
            changes = []
            for rowid, stored, tokens in db.execute("SELECT rowid, body, tokens FROM items WHERE thread = ?",
                                                    (thread,)).fetchall():
                known = counted.get(rowid)
                new = (known[1] if known is not None and known[0] == body_digest(stored)
                       else count(bodies.decode(stored)))
                if new != tokens:
                    changes.append((new, rowid))
            db.executemany("UPDATE items SET tokens = ? WHERE rowid = ?", changes)
            self._touch(db, thread, **fields)
        return len(changes)

    @_index_safe
    def replace(self, thread: str, upto_seq: int, rows: list[tuple[str, int]], info: dict[str, Any],
                expected_version: int | None = None, items: list[Any] | None = None,
                created_at: float | None = None, **fields: Any) -> int:
        """Compaction swap: archive active items up to `upto_seq`, write `rows` in their place, and
        move the items recorded since (seq > upto_seq) after them. One transaction, and only if the
        thread's history version is still `expected_version` (else HistoryChanged, nothing written):
        another daemon's compaction, a rollback or a restore in between would otherwise be undone.
        A moved item's earlier seq keeps naming it (`resolve`). `items`: as in `append`.
        `created_at`: when it happened, if not now (an agent's compaction, dated by its file)."""
        with self._write() as db:
            if expected_version is not None:
                row = db.execute("SELECT history_version FROM threads WHERE thread = ?", (thread,)).fetchone()
                current = row[0] if row else 0
                if current != expected_version:
                    raise HistoryChanged(f"history version {current}, expected {expected_version}")
            removed = self._active_seqs(db, thread, upto_seq)
            mark = self._next_seq(db, thread) - 1
            cid = int(db.execute("INSERT INTO compactions (thread, created_at, info) VALUES (?, ?, ?)",
                                 (thread, time.time() if created_at is None else created_at,
                                  json.dumps(info))).lastrowid or 0)
            db.execute("UPDATE items SET archived = ? WHERE thread = ? AND seq <= ? AND archived IS NULL",
                       (cid, thread, upto_seq))
            later = db.execute("SELECT seq FROM items WHERE thread = ? AND seq > ? AND archived IS NULL ORDER BY seq",
                               (thread, upto_seq)).fetchall()
            seq = self._next_seq(db, thread)
            db.executemany(
                "INSERT INTO items (thread, seq, body, tokens, origin) VALUES (?, ?, ?, ?, ?)",
                [(thread, seq + i, bodies.encode(body), tokens, cid) for i, (body, tokens) in enumerate(rows)],
            )
            if items is not None and self._indexing:
                search.index_appended(db, thread, seq, items, origin=cid)
            added = list(range(seq, seq + len(rows)))
            seq += len(rows)
            for i, (old,) in enumerate(later):
                db.execute("UPDATE items SET seq = ? WHERE thread = ? AND seq = ?", (seq + i, thread, old))
                db.execute("UPDATE moved SET now = ? WHERE thread = ? AND now = ?", (seq + i, thread, old))
                db.execute("INSERT OR REPLACE INTO moved (thread, seq, now) VALUES (?, ?, ?)", (thread, old, seq + i))
            moved = list(range(seq, seq + len(later)))
            # What undoing it needs (see `operate`); the items recorded meanwhile stay where they are.
            self._merge_info(db, cid, {"kind": "compaction", "before": removed + moved, "removed": removed,
                                       "added": added, "seqMark": mark})
            self._touch(db, thread, **fields)
        return cid

    def archive(self, thread: str, operation: int, rows: list[tuple[str, int]], items: list[Any] | None = None,
                created_at: float | None = None) -> None:
        """Store `rows` after every item as archived by `operation`, which its info then lists as
        removed: what an earlier version's operation took out without storing it (a followed
        session's compaction that version first saw after the fact). `items`: as in `append`;
        `created_at`: the operation's date, when it was recorded wrong."""
        with self._write() as db:
            row = db.execute("SELECT info FROM compactions WHERE id = ? AND thread = ?", (operation, thread)).fetchone()
            if row is None:
                return
            first = self._next_seq(db, thread)
            db.executemany("INSERT INTO items (thread, seq, body, tokens, archived) VALUES (?, ?, ?, ?, ?)",
                           [(thread, first + i, bodies.encode(body), tokens, operation)
                            for i, (body, tokens) in enumerate(rows)])
            if items is not None and self._indexing:
                search.index_appended(db, thread, first, items)
            info = json.loads(row[0])
            added = list(range(first, first + len(rows)))
            self._merge_info(db, operation, {"removed": [*(info.get("removed") or []), *added],
                                             "before": [*(info.get("before") or []), *added]})
            if created_at is not None:
                db.execute("UPDATE compactions SET created_at = ? WHERE id = ?", (created_at, operation))
            self._touch(db, thread)

    # --- history operations (protocol v3: every one can be undone, nothing is deleted) -----------

    @_index_safe
    def operate(self, thread: str, info: dict[str, Any], *, active: list[int], expected_version: int,
                marks: dict[int, int | None] | None = None, **fields: Any) -> int:
        """A history operation other than a compaction (a rollback, a restore of the conversation,
        an undo): make the items `active` names (seqs, active or archived) the thread's active
        history, archiving the others under the operation's id. Its info records the history
        before it and what it removed and brought back, so that it can be undone exactly; `marks`
        sets other operations' `undoneBy` (None clears it, THIS_OPERATION names this one). One
        transaction, and only if the
        thread's history version is still `expected_version` (else HistoryChanged)."""
        with self._write() as db:
            row = db.execute("SELECT history_version FROM threads WHERE thread = ?", (thread,)).fetchone()
            current_version = row[0] if row else 0
            if current_version != expected_version:
                raise HistoryChanged(f"history version {current_version}, expected {expected_version}")
            current = self._active_seqs(db, thread)
            wanted = set(active)
            removed = [seq for seq in current if seq not in wanted]
            added = sorted(wanted.difference(current))
            info = {**info, "before": current, "removed": removed, "added": added,
                    "seqMark": self._next_seq(db, thread) - 1}
            oid = int(db.execute("INSERT INTO compactions (thread, created_at, info) VALUES (?, ?, ?)",
                                 (thread, time.time(), json.dumps(info))).lastrowid or 0)
            db.executemany("UPDATE items SET archived = ? WHERE thread = ? AND seq = ?",
                           [(oid, thread, seq) for seq in removed])
            db.executemany("UPDATE items SET archived = NULL WHERE thread = ? AND seq = ?",
                           [(thread, seq) for seq in added])
            for other, by in (marks or {}).items():
                self._merge_info(db, other, {"undoneBy": oid if by == THIS_OPERATION else by})
            self._touch(db, thread, **fields)
        return oid

    def _active_seqs(self, db: sqlite3.Connection, thread: str, upto_seq: int | None = None) -> list[int]:
        query = "SELECT seq FROM items WHERE thread = ? AND archived IS NULL"
        args: tuple[Any, ...] = (thread,)
        if upto_seq is not None:
            query, args = query + " AND seq <= ?", (thread, upto_seq)
        return [seq for (seq,) in db.execute(query + " ORDER BY seq", args)]

    def _merge_info(self, db: sqlite3.Connection, operation: int, info: dict[str, Any]) -> None:
        row = db.execute("SELECT info FROM compactions WHERE id = ?", (operation,)).fetchone()
        if row is not None:
            merged = {key: value for key, value in (json.loads(row[0]) | info).items() if value is not None}
            db.execute("UPDATE compactions SET info = ? WHERE id = ?", (json.dumps(merged), operation))


_ROW = ("thread, history_version, api_total, api_seq, reference, prompt_context, state, updated_at, active_items,"
        " active_tokens")


def _row(row: tuple[Any, ...]) -> ThreadRow:
    return ThreadRow(row[0], row[1], row[2], row[3], _loads(row[4]), _loads(row[5]), _loads(row[6]), row[7], row[8],
                     row[9])


def body_digest(stored: str | bytes) -> bytes:
    """What names an item's body as stored (`Store.recount`): a stored body never changes."""
    return hashlib.blake2b(stored.encode("utf-8") if isinstance(stored, str) else stored, digest_size=16).digest()


def _run_script(db: sqlite3.Connection, script: str) -> None:
    """Statement by statement: `executescript` would commit the open transaction first."""
    for statement in script.split(";"):
        if statement.strip():
            db.execute(statement)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _make_private(path: Path) -> None:
    """The database file created 0600 whatever the umask (SQLite gives its `-wal` and `-shm` the
    file's mode), and one of the user's that is open to others closed to them. A link in its
    place is refused: SQLite would write its tables into whatever file it leads to. An existing
    file is never opened here: closing a descriptor of a database drops every POSIX lock this
    process holds on it, the locks of SQLite's connections to it included (a daemon's second
    store of a ledger corrupted it)."""
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
        return  # (made here: no connection holds it)
    except FileExistsError:
        pass
    except OSError:
        return  # (a read-only folder, say: opening reports it)
    try:
        info = os.lstat(path)
    except OSError:
        return
    if stat.S_ISLNK(info.st_mode):
        raise StoreUnavailable(f"{path} is a symbolic link; ctxd will not write a ledger through it. Move it "
                               "aside, then retry.")
    if not stat.S_ISREG(info.st_mode):
        raise StoreUnavailable(f"{path} is not a regular file; ctxd will not use it. Move it aside, then retry.")
    if info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) & 0o077:
        with contextlib.suppress(OSError):
            os.chmod(path, stat.S_IMODE(info.st_mode) & 0o700)  # (a regular file a moment ago)


def _open_fd(path: Path) -> int | None:
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None


def _kind(error: sqlite3.Error) -> str:
    """What went wrong, from SQLite's error name (Python 3.11+) or, failing that, its message."""
    name = (getattr(error, "sqlite_errorname", "") or "").upper()
    text = str(error).lower()
    if "BUSY" in name or "LOCKED" in name or "locked" in text:
        return "locked"
    if "READONLY" in name or "readonly" in text or "read-only" in text:
        return "readonly"
    if "FULL" in name or "is full" in text:
        return "full"
    if "CORRUPT" in name or "NOTADB" in name or "malformed" in text or "not a database" in text:
        return "corrupt"
    if "CANTOPEN" in name or "unable to open" in text:
        return "cantopen"
    if "IOERR" in name or "disk i/o" in text:
        return "ioerr"
    return "other"


def _disk_full(folder: Path) -> bool:
    try:
        info = os.statvfs(folder)
    except OSError:
        return False
    return info.f_bavail * info.f_frsize < 64 * 1024


def _damaged(path: Path, error: bodies.DamagedBody) -> StoreUnavailable:
    """The 1003 error for an item whose stored body cannot be read back (`bodies.decode`)."""
    return StoreUnavailable(f"{path} is damaged: {error}. The items that can be read are kept; to start a new, "
                            f"empty ledger for this workspace, move it aside (for example `mv {path} {path}.broken`).",
                            "corrupt")


def _unavailable(path: Path, error: sqlite3.Error) -> StoreUnavailable:
    """A StoreUnavailable that names the file and says what to do about `error`."""
    folder = path.parent
    advice = {
        "locked": f"{path} is locked by another process for more than {BUSY_TIMEOUT_SECONDS:g} s (another "
                  "ctxd, or a program holding a transaction open): close it or wait, then retry.",
        "readonly": f"{path} cannot be written (read-only): make {folder} and the file writable, or set "
                    "state_dir to a writable folder, then retry. The history can still be read.",
        "full": f"{path} cannot be written: the disk is full. Free space on that disk, then retry. The "
                "history can still be read.",
        "corrupt": f"{path} is damaged (not a readable SQLite database, or truncated): move it aside (for "
                   f"example `mv {path} {path}.broken`) and ctxd starts a new, empty ledger for this workspace.",
        "cantopen": f"cannot open {path}: check that {folder} exists and is writable, or set state_dir to a "
                    "writable folder, then retry.",
        "ioerr": f"{path} could not be read or written (I/O error: {error}): check the disk, then retry.",
    }
    kind = _kind(error)
    if kind in ("ioerr", "cantopen", "other") and _disk_full(folder):
        kind = "full"  # a full disk often shows as an I/O error on the -shm or -wal file
    return StoreUnavailable(advice.get(kind, f"{path}: {error}: check the file and its folder, then retry."), kind)
