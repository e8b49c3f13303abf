"""Durable ledger storage: one SQLite database (WAL) per workspace.

An item is acknowledged only after its transaction commits, so a `kill -9` after the response
loses nothing. Writers take SQLite's write lock up front (`BEGIN IMMEDIATE`) and compute sequence
numbers inside the transaction, so two daemons on one workspace interleave without losing or
duplicating items. Items replaced by a compaction are archived, not deleted.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

SCHEMA_VERSION = 1

_SCHEMA_V1 = """
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
CREATE TABLE IF NOT EXISTS items (
    thread TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body TEXT NOT NULL,
    tokens INTEGER NOT NULL,
    origin INTEGER,
    archived INTEGER,
    PRIMARY KEY (thread, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS items_archived ON items (thread, archived);
CREATE TABLE IF NOT EXISTS compactions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    thread TEXT NOT NULL,
    created_at REAL NOT NULL,
    info TEXT NOT NULL
);
"""

# Migrations from version N-1 to N, in order. Version 1 is created by _SCHEMA_V1.
_MIGRATIONS: dict[int, str] = {}

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


def database_path(state_dir: Path, workspace: Path) -> Path:
    """Where a workspace's database lives: named by a hash of its path, readable by its name."""
    digest = hashlib.sha256(str(workspace).encode("utf-8", "surrogatepass")).hexdigest()[:16]
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in workspace.name)[:40] or "root"
    return state_dir / "workspaces" / f"{safe}-{digest}.sqlite3"


class Store:
    """All SQL lives here. Safe to call from several threads: one lock serialises the connection."""

    def __init__(self, path: Path, workspace: Path | None = None, readonly: bool = False) -> None:
        self.path = path
        self._lock = threading.RLock()
        if readonly:
            self._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA busy_timeout = 10000")
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        self._db.execute("PRAGMA busy_timeout = 30000")
        self._db.execute("PRAGMA journal_mode = WAL")
        # NORMAL in WAL mode: a committed transaction survives the process being killed; only a
        # power loss can take the last ones back. FULL would add an fsync to every record.
        self._db.execute("PRAGMA synchronous = NORMAL")
        self._migrate(workspace)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _migrate(self, workspace: Path | None) -> None:
        with self._write() as db:
            _run_script(db, _SCHEMA_V1)
            row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            version = int(row[0]) if row else SCHEMA_VERSION
            if version > SCHEMA_VERSION:
                raise RuntimeError(f"{self.path} has schema version {version}; this ctxd reads up to {SCHEMA_VERSION}")
            for target in range(version + 1, SCHEMA_VERSION + 1):
                _run_script(db, _MIGRATIONS[target])
            db.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            if workspace is not None:
                db.execute("INSERT OR REPLACE INTO meta VALUES ('workspace', ?)", (str(workspace),))

    def data_version(self) -> int:
        """Changes whenever another connection (another daemon) commits to this database."""
        with self._lock:
            return int(self._db.execute("PRAGMA data_version").fetchone()[0])

    # --- reads -----------------------------------------------------------------------------------

    def thread(self, thread: str) -> ThreadRow | None:
        with self._lock:
            row = self._db.execute(
                "SELECT thread, history_version, api_total, api_seq, reference, prompt_context, state, updated_at"
                " FROM threads WHERE thread = ?",
                (thread,),
            ).fetchone()
        if row is None:
            return None
        return ThreadRow(row[0], row[1], row[2], row[3], _loads(row[4]), _loads(row[5]), _loads(row[6]), row[7])

    def active_rows(self, thread: str) -> list[Row]:
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, body, tokens, origin FROM items WHERE thread = ? AND archived IS NULL ORDER BY seq",
                (thread,),
            ).fetchall()
        return [Row(seq, body, tokens, origin) for seq, body, tokens, origin in rows]

    def all_rows(self, thread: str) -> list[Row]:
        """Active and archived items, in the order they were first recorded."""
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, body, tokens, origin, archived FROM items WHERE thread = ? ORDER BY seq", (thread,)
            ).fetchall()
        return [Row(*row) for row in rows]

    def threads(self) -> list[tuple[ThreadRow, int]]:
        """Every thread with its count of active items."""
        with self._lock:
            rows = self._db.execute(
                "SELECT t.thread, t.history_version, t.updated_at,"
                " (SELECT count(*) FROM items i WHERE i.thread = t.thread AND i.archived IS NULL)"
                " FROM threads t ORDER BY t.updated_at DESC"
            ).fetchall()
        return [(ThreadRow(name, version, updated_at=updated), count) for name, version, updated, count in rows]

    def compaction_ids(self, thread: str) -> list[int]:
        with self._lock:
            return [r[0] for r in self._db.execute("SELECT id FROM compactions WHERE thread = ? ORDER BY id", (thread,))]

    # --- writes ----------------------------------------------------------------------------------

    def _touch(self, db: sqlite3.Connection, thread: str, **fields: Any) -> None:
        db.execute("INSERT OR IGNORE INTO threads (thread, updated_at) VALUES (?, ?)", (thread, time.time()))
        sets = ["updated_at = ?"]
        values: list[Any] = [time.time()]
        for name, value in fields.items():
            if name not in THREAD_FIELDS:
                raise KeyError(name)
            sets.append(f"{name} = ?")
            values.append(json.dumps(value) if name in ("reference", "prompt_context", "state") and value is not None else value)
        db.execute(f"UPDATE threads SET {', '.join(sets)} WHERE thread = ?", (*values, thread))

    def _next_seq(self, db: sqlite3.Connection, thread: str) -> int:
        return int(db.execute("SELECT coalesce(max(seq), 0) FROM items WHERE thread = ?", (thread,)).fetchone()[0]) + 1

    def append(self, thread: str, rows: list[tuple[str, int]]) -> int:
        """Store `(body, tokens)` rows after every existing item; return the first new seq."""
        with self._write() as db:
            first = self._next_seq(db, thread)
            db.executemany(
                "INSERT INTO items (thread, seq, body, tokens) VALUES (?, ?, ?, ?)",
                [(thread, first + i, body, tokens) for i, (body, tokens) in enumerate(rows)],
            )
            self._touch(db, thread)
        return first

    def update_thread(self, thread: str, **fields: Any) -> None:
        with self._write() as db:
            self._touch(db, thread, **fields)

    def delete_from(self, thread: str, seq: int, **fields: Any) -> int:
        """Rollback: delete active items from `seq` on, and update the thread, in one transaction."""
        with self._write() as db:
            removed = db.execute(
                "DELETE FROM items WHERE thread = ? AND seq >= ? AND archived IS NULL", (thread, seq)
            ).rowcount
            self._touch(db, thread, **fields)
        return removed

    def replace(self, thread: str, upto_seq: int, rows: list[tuple[str, int]], info: dict[str, Any], **fields: Any) -> int:
        """Compaction swap: archive active items up to `upto_seq`, write `rows` in their place, and
        move the items recorded since (seq > upto_seq) after them. One transaction."""
        with self._write() as db:
            cid = db.execute(
                "INSERT INTO compactions (thread, created_at, info) VALUES (?, ?, ?)", (thread, time.time(), json.dumps(info))
            ).lastrowid
            db.execute(
                "UPDATE items SET archived = ? WHERE thread = ? AND seq <= ? AND archived IS NULL", (cid, thread, upto_seq)
            )
            later = db.execute(
                "SELECT seq FROM items WHERE thread = ? AND seq > ? AND archived IS NULL ORDER BY seq", (thread, upto_seq)
            ).fetchall()
            seq = self._next_seq(db, thread)
            db.executemany(
                "INSERT INTO items (thread, seq, body, tokens, origin) VALUES (?, ?, ?, ?, ?)",
                [(thread, seq + i, body, tokens, cid) for i, (body, tokens) in enumerate(rows)],
            )
            seq += len(rows)
            for i, (old,) in enumerate(later):
                db.execute("UPDATE items SET seq = ? WHERE thread = ? AND seq = ?", (seq + i, thread, old))
            self._touch(db, thread, **fields)
        return int(cid)

    def uncompact(self, thread: str, compaction_id: int, **fields: Any) -> None:
        """Undo a compaction: drop what it wrote, bring back what it archived (rollback across it)."""
        with self._write() as db:
            db.execute("DELETE FROM items WHERE thread = ? AND origin = ? AND archived IS NULL", (thread, compaction_id))
            db.execute("UPDATE items SET archived = NULL WHERE thread = ? AND archived = ?", (thread, compaction_id))
            db.execute("DELETE FROM compactions WHERE id = ?", (compaction_id,))
            self._touch(db, thread, **fields)


def _run_script(db: sqlite3.Connection, script: str) -> None:
    """Statement by statement: `executescript` would commit the open transaction first."""
    for statement in script.split(";"):
        if statement.strip():
            db.execute(statement)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)
