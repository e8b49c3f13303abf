"""Summaries of the agents' session files, kept in the state dir: each file is read once.

A summary is what `ctxd sessions` and the owner's thread list show of a session file (title,
model, fill, cost, turns, last activity, ...) and where its summary reader stands (its offset,
the first bytes and those before the offset as read, and the little state it carries), with the
file as it was then (device, inode, size, mtime). Whoever reads a file writes its summary: the
CLI, and the owner as it follows the sessions. They live in one SQLite database
(`<state dir>/sessions/summaries.sqlite3`, WAL), so the CLI and the owner share them, each write
a transaction under SQLite's lock; a write never takes a summary back to an earlier offset of the
same file.

Only the agents whose module gives a summary reader (`Agent.summary_reader`: Codex and Claude
Code, whose lines are skimmed) are summarized; the others' sessions are read whole, as the daemon
reads them (`collect`).

A summary is shown only while the file is exactly as it was read (same inode, size, mtime and ctime;
the files its agent names beside it too, `Agent.summary_files`: Claude Code's subagents'). A file that grew is read from the summary's offset on,
once its first bytes and those before the offset are checked to be the ones read; one that was
replaced, truncated, rewritten in place, or whose mtime moved without it growing, is read again
from its start. So a summary is never shown for a file that changed under it.

Files outside the folder asked about are never read beyond their head (docs/sessions.md,
Privacy): for those only the head's `cwd` is kept (a "peek"), so that the next run need not
open them again.
"""

from __future__ import annotations

import functools
import gc
import itertools
import json
import logging
import os
import sqlite3
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ctxd import agents, heap, redact
from ctxd.agents.base import Agent
from ctxd.agents.folders import Folders
from ctxd.agents.jsonl import Reader, open_regular
from ctxd.agents.session import Session
from ctxd.sessions import discovery

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

log = logging.getLogger(__name__)

# Of what a summary holds: a summary of another version is read again (and replaced). 3: the lines
# kept after the last report are stored redacted (version 2 stored a key pasted there as it was).
# 4: a table of its own (`_SCHEMA`); versions up to 3 keep theirs, `summaries`. 5: a Codex prompt
# typed twice in a row is two turns (4 counted one); a blank line at a file's edge hides no time;
# Claude's unknown blocks after the last report counted once. 6: a Claude reply's streamed copy after
# the last report (one reporting no tokens, or Claude Code's own) brings into the tail only the blocks
# its message had not, and a compaction's summary written after a report is in it, as the daemon has them.
VERSION = 6
PARALLEL_BYTES = 64 * 1024 * 1024  # more to read than this: in worker processes, one per core
BUSY_SECONDS = 5.0
SAVE_BATCH = 256  # summaries written a transaction at a time as a first run reads them
# `ctxd sessions` hands its workers the jobs in about this many batches each: one job at a time cost
# the pool's parent ~0.4 ms of CPU a job (0.4 s of a 1.4 s read of 1,000 files on 2 cores).
BATCHES = 16
# Workers forked ahead for the first reads (`fork_readers`) that no reads took are let go after this:
# an editor's owner lists within a second of its start; a warm one reads nothing, and one a hook
# started may have no editor for hours (its first listing, if any, spawns its workers).
READY_SECONDS = 10.0
# How often a worker looks whether the process it works for is still there (`_worker_start`).
PARENT_CHECK_SECONDS = 0.5
# The pipes to and from the workers, this large (Linux; 64 KiB by default): a worker's batch of
# reads, with their readers' states, is larger, and it waited while the parent's pool thread took
# it a pipeful at a time, each after waiting for the interpreter's lock among the owner's busy
# threads (0.2 s per worker over a cold listing of 3,000 sessions).
PIPE_BYTES = 1024 * 1024
F_SETPIPE_SZ = 1031  # (fcntl's name for it, from Python 3.10, on Linux only)

# A row is a few kB (its reader's state): a table with rowids, as SQLite advises for rows larger
# than a twentieth of a page (WITHOUT ROWID made each first run's writes twice as slow). `offset`:
# how far the state read, kept beside it so that a write need not parse the state it replaces.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS file_summaries (
    path TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    version INTEGER NOT NULL,
    file TEXT NOT NULL,
    cwd TEXT,
    facts TEXT,
    state TEXT,
    offset INTEGER,
    updated REAL NOT NULL
);
"""


# What `ctxd sessions` shows of a session (`Shower.kept`), kept beside its summary while that row is
# the one it was made from (`file` and `updated` the same: any write of the row, by any process, moves
# `updated`) and what else the showing depends on is the same (`key`): a table of its own, so that
# the summaries' rows keep the shape the owner (and older ctxd) write.
_KEPT_SCHEMA = """
CREATE TABLE IF NOT EXISTS kept_rows (
    path TEXT PRIMARY KEY,
    file TEXT NOT NULL,
    updated REAL NOT NULL,
    key TEXT NOT NULL,
    kept TEXT NOT NULL
);
"""

# A row (a summary and its reader's state, ~4.5 kB) fits a page this large: in SQLite's default
# 4 kB pages most rows ran over into a second page, and writing 3,000 of them took 40% more CPU.
PAGE_BYTES = 16384
DAMAGED = ".damaged"  # a damaged database's name, beside its own (`Summaries._failed`): the last one


def database_path(state_dir: Path) -> Path:
    return state_dir / "sessions" / "summaries.sqlite3"


FileStamp = tuple[int, int, int, int]  # device, inode, size, mtime (ns)


def stamp(st: os.stat_result) -> FileStamp:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


@dataclass
class Stored:
    """One file's row: `file` its stamp then (and its agent's `summary_files`'), `cwd` from its head,
    `facts` what is shown (None: a peek only), `state` where its reader stands, as JSON (made in a
    worker: the parent only writes it, so it travels as text), and `offset` that reader's offset."""

    path: str
    agent: str
    file: dict[str, Any]
    cwd: str | None
    facts: dict[str, Any] | None = None
    state: str | None = field(default=None, repr=False, compare=False)
    offset: int = -1
    # (`load`'s) the row as written: its `file` text and when; and the row kept of its session, when asked
    written: tuple[str, float] | None = field(default=None, repr=False, compare=False)
    kept: str | None = field(default=None, repr=False, compare=False)


def file_facts(path: str, agent: str) -> dict[str, Any] | None:
    """The file's stamp, and those of the files its agent names beside it (Claude Code's subagents
    add to its cost); None when it is not a regular file."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    # (and its ctime: a file rewritten in place with its size and mtime put back, `os.utime`, is
    # not the one summarized; its reader checks every byte it read before taking it up)
    facts: dict[str, Any] = {"stamp": list(stamp(st)), "ctime": st.st_ctime_ns}
    found = agents.find(agent)
    beside = []
    for other in found.summary_files(path) if found is not None else []:
        try:
            st = os.lstat(other)
        except OSError:
            continue
        beside.append([os.path.basename(other), *stamp(st), st.st_ctime_ns])
    if beside:
        facts["beside"] = sorted(beside)
    return facts


def summarizes(agent: str) -> bool:
    """Whether `agent`'s sessions are summarized (its module gives a summary reader)."""
    found = agents.find(agent)
    return found is not None and type(found).summary_reader is not Agent.summary_reader


class Summaries:
    """The state dir's summaries. Any process may open it; every write is one transaction."""

    def __init__(self, state_dir: Path) -> None:
        self.path = database_path(state_dir)
        self._db: sqlite3.Connection | None = None
        self._file: tuple[int, int] | None = None  # the database file connected to: device, inode
        self._damaged_kept = False  # a damaged database that could not be set aside: not opened again
        self._keeps = False  # whether it has `kept_rows` (one that cannot be written may not)

    def _connect(self) -> sqlite3.Connection | None:
        if self._db is not None or self._damaged_kept:
            return self._db
        for attempt in (1, 2):  # (a damaged database is set aside, and a new one made)
            db = None
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                db = sqlite3.connect(self.path, timeout=BUSY_SECONDS, isolation_level=None, check_same_thread=False)
                st = os.stat(self.path)
                self._file = st.st_dev, st.st_ino
                db.execute(f"PRAGMA busy_timeout = {int(BUSY_SECONDS * 1000)}")
                db.execute(f"PRAGMA page_size = {PAGE_BYTES}")  # (a new database's; an older one keeps its own)
                if db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    db.execute("PRAGMA journal_mode = WAL")
                db.execute("PRAGMA synchronous = NORMAL")
                db.execute(_SCHEMA)
                self._keeps = _kept_table(db)
            except (OSError, sqlite3.Error) as error:
                if db is not None:
                    db.close()
                if attempt == 1 and self._failed(error, "open"):
                    continue
                log.info("summaries unavailable at %s (%s): every file is read", self.path, error)
                return None
            self._db = db
            return db
        return None

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def _failed(self, error: Exception, doing: str) -> bool:
        """Log a failed `doing`; a database SQLite finds damaged (malformed, or not a database) is
        set aside (`DAMAGED`, with its journal), so that the next connection makes a new one:
        otherwise every run would read every file again, and say nothing. The summaries are made
        again from the agents' files; nothing else is kept in them. True when set aside."""
        log.info("cannot %s %s (%s)", doing, self.path, error)
        if getattr(error, "sqlite_errorcode", None) not in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
            return False
        connected, self._file = self._file, None
        self.close()
        try:
            st = os.stat(self.path)
            if connected is not None and (st.st_dev, st.st_ino) != connected:
                return True  # another process set it aside already: this one's is the new one
            for suffix in ("-wal", "-shm", ""):  # (its journal first: a new database must not take it up)
                try:
                    os.replace(f"{self.path}{suffix}", f"{self.path}{DAMAGED}{suffix}")
                except FileNotFoundError:
                    pass
        except OSError as failure:
            log.warning("the damaged summaries at %s cannot be set aside (%s): every file is read", self.path, failure)
            self._damaged_kept = True
            return False
        log.warning("the summaries at %s were damaged (%s): set aside as %s%s, made again as files are read",
                    self.path, error, self.path.name, DAMAGED)
        return True

    def load(self, paths: Iterable[str] | None = None, kept: str | None = None) -> dict[str, Stored]:
        """The rows (of `paths`, or all), without their readers' state; with `kept` (a key), each
        with the row kept of its session under that key while the summary's row is the one it was
        made from."""
        db = self._connect()
        if db is None:
            return {}
        select = "SELECT path, agent, version, file, cwd, facts, offset, updated, NULL FROM file_summaries"
        rows = self._with_kept(db, kept) if paths is None and kept is not None else None
        try:
            if rows is None and paths is None:
                rows = db.execute(select).fetchall()
            elif rows is None:  # (an owner's listing asks for those its store has not: few, after its first)
                wanted = list(paths or ())
                rows = []
                for start in range(0, len(wanted), 500):
                    part = wanted[start:start + 500]
                    rows += db.execute(f"{select} WHERE path IN ({','.join('?' * len(part))})", part).fetchall()
        except sqlite3.Error as error:
            self._failed(error, "read")
            return {}
        out = {}
        for path, agent, version, file, cwd, facts, offset, updated, kept_row in rows:
            if version != VERSION:
                continue
            try:
                stamped, shown = json.loads(file), json.loads(facts) if facts else None
            except (TypeError, ValueError):
                continue
            # (a row of another shape, from a damaged database: not a summary, the file is read again)
            if not isinstance(stamped, dict) or not (shown is None or isinstance(shown, dict)
                                                     and isinstance(shown.get("session"), dict)):
                continue
            # (-1: no reader's state, which a summary always has: `fresh`)
            out[path] = Stored(path, agent, stamped, cwd, shown, offset=offset if type(offset) is int else -1,
                               written=(file, updated) if isinstance(file, str) and isinstance(updated, float) else None,
                               kept=kept_row if isinstance(kept_row, str) else None)
        return out

    def cwds(self, paths: list[str]) -> dict[str, tuple[FileStamp, str]]:
        """Of `paths`, those whose row states a cwd: their stamps when it was read, and that cwd
        (`Follower`'s `known_cwds`: a file unchanged since need not have its head peeked at)."""
        db = self._connect()
        if db is None:
            return {}
        out: dict[str, tuple[FileStamp, str]] = {}
        try:
            for start in range(0, len(paths), 500):
                part = paths[start:start + 500]
                for path, file, cwd in db.execute(
                        f"SELECT path, file, cwd FROM file_summaries WHERE path IN ({','.join('?' * len(part))})"
                        " AND version = ? AND cwd IS NOT NULL", (*part, VERSION)):
                    try:
                        found = json.loads(file).get("stamp")
                    except (ValueError, AttributeError):
                        continue
                    if isinstance(found, list) and len(found) == 4 and isinstance(cwd, str):
                        out[path] = (tuple(found), cwd)
        except sqlite3.Error as error:
            self._failed(error, "read")
        return out

    def state(self, path: str) -> dict[str, Any] | None:
        db = self._connect()
        if db is None:
            return None
        try:
            row = db.execute("SELECT state FROM file_summaries WHERE path = ? AND version = ?", (path, VERSION)).fetchone()
            state = json.loads(row[0]) if row and row[0] else None
        except sqlite3.Error as error:
            self._failed(error, "read")
            return None
        except (TypeError, ValueError):
            return None
        return state if isinstance(state, dict) else None

    def save(self, rows: Iterable[Stored], kept: tuple[str, dict[str, str]] | None = None) -> None:
        """Write rows in one transaction. A row whose file is the one stored (same device and
        inode) but read less far than the stored row is not written (another reader got further).
        `kept`: a key, and by path what a caller keeps of the sessions of rows written (`keep`)."""
        db = self._connect()
        if db is None:
            return
        rows = list(rows)
        if not rows:
            return
        now = time.time()
        try:
            with _transaction(db):
                old: dict[str, tuple[str, int | None]] = {}
                for start in range(0, len(rows), SAVE_BATCH):  # (SQLite's bound on a statement's values: 999)
                    paths = [row.path for row in rows[start:start + SAVE_BATCH]]
                    old.update((path, (file, offset)) for path, file, offset in db.execute(
                        f"SELECT path, file, offset FROM file_summaries WHERE path IN ({','.join('?' * len(paths))})",
                        paths))
                values = []
                for row in rows:
                    found = old.get(row.path)
                    if found is not None and isinstance(found[1], int) and row.state is not None:
                        before = _stamp_of(found[0])[:2]
                        if before == row.file.get("stamp", [])[:2] and found[1] > row.offset:
                            continue
                    values.append((row.path, row.agent, VERSION, json_text(row.file), row.cwd,
                                   json_text(row.facts) if row.facts is not None else None, row.state,
                                   row.offset if row.state is not None else None, now))
                db.executemany("INSERT OR REPLACE INTO file_summaries VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", values)
        except (sqlite3.Error, ValueError) as error:
            self._failed(error, "write")
            return
        if kept is not None:
            key, texts = kept
            self._keep([(path, file, now, key, texts[path]) for path, _, _, file, *_ in values if path in texts])

    def _with_kept(self, db: sqlite3.Connection, key: str) -> list[Any] | None:
        """`load`'s rows, each with its kept row under `key` (or None); None when the kept rows cannot
        be read (a table another ctxd made otherwise, say): the summaries are then read without them."""
        if not self._keeps:
            return None
        try:
            return db.execute("SELECT s.path, s.agent, s.version, s.file, s.cwd, s.facts, s.offset, s.updated, k.kept"
                              " FROM file_summaries s LEFT JOIN kept_rows k ON k.path = s.path AND k.file = s.file"
                              " AND k.updated = s.updated AND k.key = ?", (key,)).fetchall()
        except sqlite3.Error as error:
            log.info("the kept rows of %s cannot be read (%s)", self.path, error)
            self._keeps = False
            return None

    def keep(self, key: str, rows: list[tuple[Stored, str]]) -> None:
        """Keep what was shown of sessions under `key`, each with the summary it was made from (as
        `load` gave it)."""
        self._keep([(stored.path, *stored.written, key, kept) for stored, kept in rows if stored.written])

    def _keep(self, rows: list[tuple[str, str, float, str, str]]) -> None:
        """Write kept rows (path, the summary's `file` and `updated`, key, text) in one transaction of
        their own (one that fails leaves the summaries written); nothing without their table."""
        db = self._connect()
        if db is None or not rows or not self._keeps:
            return
        try:
            with _transaction(db):
                db.executemany("INSERT OR REPLACE INTO kept_rows VALUES (?, ?, ?, ?, ?)", rows)
        except sqlite3.Error as error:
            self._failed(error, "write")


def _kept_table(db: sqlite3.Connection) -> bool:
    """Whether `kept_rows` is there (made now if need be): not in a database this process cannot
    write, where the summaries are read all the same."""
    try:
        db.execute(_KEPT_SCHEMA)
    except sqlite3.Error as error:
        log.info("no table of kept rows (%s)", error)
        return False
    return True


def _stamp_of(file: Any) -> list[Any]:
    """The stamp a row's `file` holds; none when it holds none (a damaged row)."""
    try:
        found = json.loads(file).get("stamp")
    except (AttributeError, TypeError, ValueError):
        return []
    return found if isinstance(found, list) else []


@contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def new_reader(agent: str, path: str) -> Reader:
    reader = agents.get(agent).summary_reader(path)
    if reader is None:
        raise ValueError(f"{agent}'s sessions are not summarized")
    return reader


@dataclass
class Read:
    """One file summarized: its row, its session and the items after its last report."""

    stored: Stored
    session: Session
    tail: list[dict[str, Any]] = field(default_factory=list)
    read: int = 0  # bytes read
    shown_only: bool = False  # its reader wants the session as the summary shows it (`ctxd sessions`)

    def __getstate__(self) -> dict[str, Any]:
        """From a worker, a session `shown_only` travels as its summary (`stored.facts`), made again
        on arrival: unpickling 3,000 session objects cost `ctxd sessions` 0.09 s of its CPU."""
        state = dict(self.__dict__)
        if self.shown_only and self.stored.facts is not None:
            del state["session"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if "session" not in state:
            assert self.stored.facts is not None
            self.session = Session.from_state(self.stored.agent, self.stored.path, self.stored.facts["session"])


def summarize(path: str, agent: str, state: dict[str, Any] | None, cwd: str | None,
              before: dict[str, Any] | None = None) -> Read | None:
    """Bring a file's summary up to date: from `state` (where its reader stood) when the file is
    still the one read and only grew, else from its start. None when it is not a regular file.
    `before`: its `file_facts`, when the caller took them (before this read)."""
    before = before or file_facts(path, agent)
    if before is None:
        return None
    reader = new_reader(agent, path)
    if state is not None:
        opened = open_regular(path)
        if opened is not None:
            fd, st = opened
            try:
                reader.restore(state)
                if not reader.matches(fd, st) or (st.st_size == reader.offset and
                                                  list(stamp(st)) != state.get("stamp")):
                    reader = new_reader(agent, path)  # replaced, shorter, rewritten in place
            except (ArithmeticError, AttributeError, LookupError, TypeError, ValueError):  # a damaged state: from the start
                reader = new_reader(agent, path)
            finally:
                os.close(fd)
    start = reader.offset
    reader.read()
    while reader.replay:  # a rewind to a line it no longer remembers: the whole file again
        reader.reset()
        start = 0
        reader.read()
    session = reader.session
    saved = reader.position()
    saved["stamp"] = before["stamp"]  # the file as it was before this read: a change during it is read next time
    facts = {"session": _shown(saved["session"])}
    # The tail as the state keeps it, redacted (as the daemon's ledger holds its items): the fill
    # counted from the raw tail was another when a key was in it than after a restore.
    tail = saved["session"].get("tail")
    return Read(Stored(path, agent, before, session.cwd if session.cwd is not None else cwd, facts, json_text(saved),
                       reader.offset),
                session, tail if isinstance(tail, list) else list(session.tail),
                reader.bytes_read if start == 0 else max(0, reader.offset - start))


def json_text(value: dict[str, Any]) -> str:
    """A reader's state, a summary or a stamp as the summaries store them: strict JSON by the
    protocol's encoder (a fifth of `json`'s time: a cold listing's workers spent 7% of their CPU
    encoding states, and `ctxd sessions`' first run a tenth of its own on the summaries), or by
    `json` for what strict JSON cannot hold (an infinite number a hostile file gave)."""
    from ctxd.protocol import jsontext

    try:
        return jsontext.dumps(value).decode("utf-8")
    except ValueError:
        return json.dumps(value)


def fill(session: Session, tail: list[dict[str, Any]] | None = None, wait: bool = True) -> int | None:
    """The fill by docs/sessions.md's one rule, as the gauge computes it from the mirrored ledger
    (`ctxd.ledger.thread.thread_usage`): the agent's latest report plus ctxd's count of the items
    written after it (`tail`, else the session's), with the session model's counter (`wait`: for
    its encoding, else an estimate while it loads); None until the agent has reported (a new
    session, after a compaction)."""
    if session.baseline is None:
        return None
    after = session.after_report() if tail is None else tail
    if not after:
        return session.baseline
    from ctxd.ledger.truncation import truncate_tool_output, with_serialization_allowance
    from ctxd.settings import Settings
    from ctxd.tokens.counter import TOKENIZERS, Counter, count_item

    counter = TOKENIZERS.counter(session.model)
    if counter.slot is not None:
        if wait:
            counter.slot.wait(timeout=60)  # exact, as the daemon is once its encoding is loaded
        elif counter.slot.get() is None:
            counter = Counter(None, counter.profile, None)
    limit = with_serialization_allowance(Settings().tool_output_token_limit)
    return session.baseline + sum(count_item(truncate_tool_output(item, limit), counter.count) for item in after)


def _shown(state: dict[str, Any]) -> dict[str, Any]:
    """What a summary keeps of a session's state (`Session.to_state`) to show it: not its
    instructions, tools, tail or first request."""
    return {name: value for name, value in state.items() if name not in _NOT_SHOWN}


_NOT_SHOWN = frozenset(("base_instructions", "tools", "tail", "first_request"))


def shown_session(stored: Stored) -> Session | None:
    """The session a summary shows; None when it holds none, or its row makes none (a damaged
    database: the file is read again)."""
    if stored.facts is None:
        return None
    try:
        return Session.from_state(stored.agent, stored.path, stored.facts["session"])
    except (ArithmeticError, AttributeError, LookupError, TypeError, ValueError):
        return None


def fresh(stored: Stored | None, path: str) -> bool:
    """The file is exactly as it was when `stored` was made, and the row is one a read makes: a
    summary's reader stood within the file as stamped (a row with facts and no state, or whose
    reader's offset lies past the size stamped, was made by no read: the file is read again, its
    state taken up only once every byte it read is checked). (A row forged whole, as a read would
    make it, cannot be told: the database is in the user's private state dir, as are the files.)"""
    if stored is None or file_facts(path, stored.agent) != stored.file:
        return False
    if stored.facts is None:
        return True  # a peek: its cwd alone
    found = stored.file.get("stamp")
    return isinstance(found, list) and len(found) == 4 and 0 <= stored.offset <= found[2]


@dataclass
class Found:
    """A session of the folder, from its summary or read whole; `used` its fill when known (else
    counted from the session)."""

    session: Session
    used: int | None = None
    shown: Any = None  # what the caller's `show` made of it (as it was read, or from its summary)


Counter = Callable[[Session, list[dict[str, Any]]], int | None]
Job = tuple[str, str, dict[str, Any] | None, str | None, dict[str, Any] | None]  # `summarize`'s arguments


class Shower(Protocol):
    """What a caller shows of a session with its fill (`ctxd sessions`' row), and keeps of it beside
    the summary: a file that did not change is shown again from what was kept, while `key` (what
    else the showing depends on) is the same."""

    key: str

    def __call__(self, session: Session, used: int | None) -> Any: ...

    def kept(self, shown: Any) -> str:
        """The text to keep of `shown`."""

    def taken_up(self, kept: str) -> Any | None:
        """`kept` shown again; None when it cannot be (then it is made again)."""


def collect(folder: Path, sources: list[discovery.Source], state_dir: Path | None, fill: Counter,
            workers: int = 1, show: Shower | None = None) -> list[Found]:
    """Every session of `folder`. Those of an agent that summarizes: from the summaries where the
    file did not change, else read (from where its summary stood), their fill counted (`fill`),
    the summaries written back; with more than PARALLEL_BYTES to read and `workers` > 1, the reads
    run in that many processes; what `show` makes of each is made as it arrives (`Found.shown`),
    while the others are read. The others' are read whole, once, as the daemon reads them."""
    summarized = [s for s in sources if s.enabled and s.store is not None and summarizes(s.agent)]
    found = _collect_summarized(folder, summarized, state_dir, fill, workers, show) if summarized else []
    others = [s for s in sources if s not in summarized]
    if any(s.enabled and s.store is not None for s in others):
        found.extend(Found(session) for session in _collect_followed(folder, others, state_dir))
    return found


def _collect_followed(folder: Path, sources: list[discovery.Source], state_dir: Path | None) -> list[Session]:
    """The sessions of agents without a summary reader (OpenCode's rows), read as the daemon reads
    them: their readers taken up where the last run left them, when they can be (their states are
    kept beside the summaries, under their sessions' paths), and put aside again."""
    from ctxd.sessions.follower import Follower

    store = Summaries(state_dir) if state_dir is not None else None
    follower = Follower(lambda _update: None, sources, window=False, poll=True,
                        resume=(lambda _folder, path: store.state(path)) if store is not None else None)
    try:
        follower.set_folders([folder])
        follower.scan_once()
        if store is not None:
            store.save(Stored(session.path, session.agent, {"stamp": saved.get("stamp")}, session.cwd,
                              state=json.dumps(saved), offset=0) for session, saved in follower.reader_states())
        return follower.sessions(folder)
    finally:
        if store is not None:
            store.close()


def _collect_summarized(folder: Path, sources: list[discovery.Source], state_dir: Path | None, fill: Counter,
                        workers: int, show: Shower | None) -> list[Found]:
    store = Summaries(state_dir) if state_dir is not None else None
    known = store.load(kept=show.key if show is not None else None) if store is not None else {}
    kept: list[tuple[Stored, str]] = []  # shown from a summary, to keep (`Shower`)
    read_kept: dict[str, str] = {}  # shown as read, by path: kept as their summaries are saved
    folders = Folders([folder])
    found: dict[str, Found | None] = {}  # by path, in the stores' order (None: to read); ties show as the next run's
    # The files not summarized as they are now: how much of each is left to read, and whether its
    # head was peeked at before (a fresh summary without facts: in the folder).
    unread: list[tuple[int, str, discovery.Source, bool]] = []
    for source in sources:
        assert source.store is not None
        for path in source.store.keys():
            stored = known.get(path)
            if stored is not None and stored.agent == source.agent and fresh(stored, path):
                if folders.folder_of(stored.cwd) != folder:
                    continue
                if stored.facts is None:
                    found[path] = None
                    unread.append((_size(path), path, source, True))
                    continue
                session = shown_session(stored)
                if session is not None:
                    used = stored.facts.get("used")
                    used = used if isinstance(used, int) else None
                    found[path] = Found(session, used, _shown_again(show, stored, session, used, kept))
                    continue
            found[path] = None
            left = _size(path) - (max(0, stored.offset) if stored is not None and stored.agent == source.agent else 0)
            unread.append((left, path, source, False))
    unread.sort(key=lambda entry: -entry[0])  # the largest first, so that the workers end together
    unsaved: list[Stored] = []

    def jobs() -> Iterator[Job]:
        """The files to read, each peeked at (its head) when not known to be in the folder: made as
        the workers read those before them, which start on the largest at once."""
        for _, path, source, peeked_before in unread:
            assert source.store is not None
            if peeked_before:
                yield path, source.agent, None, known[path].cwd, None
                continue
            facts = file_facts(path, source.agent)
            if facts is None:
                continue
            cwd, complete, peeked = source.store.peek_cwd(path, folders)
            if not complete:
                continue  # its head is not written yet
            if folders.folder_of(cwd) != folder:
                if cwd is not None or peeked:  # (nothing read: not looked at, its name says it is elsewhere)
                    unsaved.append(Stored(path, source.agent, facts, cwd))
                continue
            yield path, source.agent, store.state(path) if store is not None and path in known else None, cwd, facts

    # The reads as the workers finish them (forked: this process runs no thread yet): each one's
    # fill is counted, its row made and its summary saved (in batches) while the others are read:
    # this process ends only once they are written, and after the last read they would be paid
    # alone (the owner's listing, which goes on, writes its own once every thread is listed).
    batch = max(1, len(unread) // (max(1, workers) * BATCHES))
    for read in reads(jobs(), workers, "fork", batch, shown_only=True,
                      parallel=len(unread) > 1 and sum(entry[0] for entry in unread) > PARALLEL_BYTES):
        if read is None:
            continue
        used = None
        if read.stored.facts is not None:
            used = read.stored.facts["used"] = fill(read.session, read.tail)
        if folders.folder_of(read.stored.cwd) == folder:
            shown = show(read.session, used) if show is not None else None
            found[read.stored.path] = Found(read.session, used, shown)
            if show is not None:
                read_kept[read.stored.path] = show.kept(shown)
        unsaved.append(read.stored)
        if store is not None and len(unsaved) >= SAVE_BATCH:
            store.save(unsaved, (show.key, read_kept) if show is not None else None)
            unsaved.clear()
            read_kept.clear()
    if store is not None:
        store.save(unsaved, (show.key, read_kept) if show is not None else None)
        if show is not None:
            store.keep(show.key, kept)
        store.close()
    # (a file that states no session id yet is none: a Gemini CLI resume's stub, its header alone)
    return [f for f in found.values() if f is not None and f.session.id is not None]


def _shown_again(show: Shower | None, stored: Stored, session: Session, used: int | None,
                 kept: list[tuple[Stored, str]]) -> Any:
    """What `show` makes of a session from its summary: from the row kept of it, else made (and
    added to `kept`). (A file read is kept as its summary is saved.)"""
    if show is None:
        return None
    shown = show.taken_up(stored.kept) if stored.kept is not None else None
    if shown is None:
        shown = show(session, used)
        if stored.written is not None:
            kept.append((stored, show.kept(shown)))
    return shown


def _summarize_job(job: Job) -> Read | None:
    try:
        return summarize(*job)
    except Exception:  # noqa: BLE001 - one file that fails is left out, the others are shown
        log.exception("cannot summarize %s", job[0])
        return None


def _worker_job(secrets: tuple[str, ...], shown_only: bool, job: Job) -> Read | None:
    """`_summarize_job` in a worker, which knows the caller's secrets (`redact`: a worker forked
    before the settings were read had none); `shown_only`: see `reads`."""
    if secrets:
        redact.adopt(secrets)
    read = _summarize_job(job)
    if read is not None:
        read.shown_only = shown_only
    return read


def _worker_start(parent: int) -> None:
    """A reading worker's start. Freed memory is kept as the daemon keeps it: every chunk read is a
    new megabyte, which glibc would otherwise give back and fault in again (a tenth of a first
    run's reading CPU, bench/README.md). And it leaves when `parent` does: a worker waiting for
    its next job, or to hand back its last, would otherwise wait forever once its parent was
    killed (the pool's pipes stay open in the workers themselves)."""
    heap.keep_freed_memory()
    gc.enable()  # (`ctxd sessions` forks them from a process that collects nothing: overview.main)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK_SECONDS)
        os._exit(0)

    threading.Thread(target=watch, name="ctxd-reader-parent", daemon=True).start()


def _pool(workers: int, context: str) -> ProcessPoolExecutor:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    if context == "fork":  # (what each worker's first `json_text` imports, 40 ms: once, before they fork)
        from ctxd.protocol import jsontext  # noqa: F401
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(context),
                               initializer=_worker_start, initargs=(os.getpid(),))
    _widen_pipes(pool)
    return pool


def _widen_pipes(pool: ProcessPoolExecutor) -> None:
    """The pool's pipes made PIPE_BYTES large where the system lets them (best effort: the pool
    works the same with the default size, only its workers wait more)."""
    if not sys.platform.startswith("linux"):
        return
    import fcntl

    for queue in (getattr(pool, "_call_queue", None), getattr(pool, "_result_queue", None)):
        reader = getattr(queue, "_reader", None)
        try:
            fcntl.fcntl(reader.fileno(), F_SETPIPE_SZ, PIPE_BYTES)  # type: ignore[union-attr]
        except (AttributeError, OSError, ValueError):  # (a lower pipe-max-size, another Python)
            continue


_ready: ProcessPoolExecutor | None = None  # `fork_readers`' workers, until reads take them
_ready_lock = threading.Lock()


def fork_readers(workers: int) -> None:
    """Fork the workers of this process's first reads in worker processes now: the owner calls it at
    its start, before it runs any thread (a fork then is safe), and its first listing takes them.
    A worker spawned then would start Python and import the readers, about 0.1 s of CPU each while
    the cold owner's own start wants the same cores: its first jobs ran 60-80 ms after the listing
    handed them out, forked ones 10 ms after (bench/README.md, round nineteen).
    Linux only (elsewhere a fork without exec is not the platform's habit: the listing spawns), and
    only while this process runs no other thread. Workers no reads took by READY_SECONDS are let go."""
    global _ready
    if workers < 2 or not sys.platform.startswith("linux") or threading.active_count() > 1:
        return
    import multiprocessing

    pool = None
    try:
        pool = _pool(workers, "fork")
        pool.submit(int)  # (a fork pool makes all its processes at its first job: now)
    except (OSError, RuntimeError) as error:  # (no processes to be had: the listing spawns, or reads here)
        # Those forked before the failure would wait for a job forever (and this process's exit for
        # them): this process has no other child yet.
        for child in multiprocessing.active_children():
            child.kill()
            child.join(1)
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        log.info("no reading workers forked ahead (%s)", error)
        return
    with _ready_lock:
        _ready = pool
    log.info("%d reading workers forked ahead of the first listing", workers)
    timer = threading.Timer(READY_SECONDS, close_ready)
    timer.daemon = True
    timer.start()


def _take_ready() -> ProcessPoolExecutor | None:
    global _ready
    with _ready_lock:
        pool, _ready = _ready, None
    return pool


def readers_ready() -> bool:
    """Whether workers `fork_readers` made wait for their first reads."""
    return _ready is not None


def close_ready() -> None:
    """Let `fork_readers`' workers go, when no reads took them."""
    pool = _take_ready()
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)


def reads(jobs: Iterable[Job], workers: int, context: str, batch: int = 1, shown_only: bool = False,
          parallel: bool | None = None) -> Iterator[Read | None]:
    """The jobs' reads in their order, each as soon as it is done (its `batch` of jobs, handed to a
    worker at once): in `workers` processes (made by `context`: "spawn" from a process that runs
    threads; those `fork_readers` made, when they wait) when there is more than PARALLEL_BYTES to
    read (`parallel`, when the caller knows; `jobs` may then be made as the workers read those
    before them), else here; here too when no process can be had. The workers know this
    process's secrets (`ctxd.redact`): no title they read keeps the configured API key.
    `shown_only`: the caller shows each session as its summary has it (the session object stays
    in the worker)."""
    if parallel is None:
        jobs = list(jobs)
        parallel = len(jobs) > 1 and sum(_size(path) - int((state or {}).get("offset", 0))
                                         for path, _, state, *_ in jobs) > PARALLEL_BYTES
    if workers < 2 or not parallel:
        yield from (_summarize_job(job) for job in jobs)
        return
    left = iter(jobs)  # (a list too: after a worker died, the rest are those not taken yet)
    taken: list[Job] = []

    def taking() -> Iterator[Job]:
        for job in left:
            taken.append(job)
            yield job

    done = 0
    try:
        ready = _take_ready()
        if ready is not None:
            log.info("reading in the workers forked ahead")
        with ready or _pool(workers, context) as pool:
            job = functools.partial(_worker_job, redact.secrets(), shown_only)
            for result in pool.map(job, taking(), chunksize=batch):
                done += 1
                yield result
    except (OSError, RuntimeError) as error:  # no processes to be had (or one died): the rest here
        log.info("summarizing in this process (%s)", error)
        yield from (_summarize_job(job) for job in itertools.chain(taken[done:], left))


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
