"""OpenCode: its SQLite store, window and compaction rule, plugin hook and configuration
(ctxd/agents/base.py; the facts are in docs/agents-research.md, read from OpenCode 1.18.33).

Sessions are rows of one SQLite database, `$XDG_DATA_HOME/opencode/opencode.db` (default
`~/.local/share/opencode`), in WAL mode, written by every OpenCode process of the user: `session`
(its folder `directory`, `title`, `version`, recorded `cost` and token sums, `revert` after an
undo), `message` (JSON `data`: one user message per prompt, one assistant message per model step
with its `tokens` and `cost`), and `part` (JSON `data` by `type`: `text`, `reasoning`, `tool`,
`step-start`, `step-finish`, `compaction`...). ctxd reads it only through a read-only connection
(`file:...?mode=ro`) opened for one short read transaction and closed at once: a read
transaction held open would stop OpenCode's WAL checkpoints. While its `-wal` holds nothing it
is read as an immutable file (`connect`: no lock that could fail an OpenCode starting, nothing
created in OpenCode's folder). The database, its `-wal` and `-shm` are opened only when each is
a regular file (never through a link, never a FIFO or a device).

A session key is its id (`ses_...`); its stamp is the database file's identity, the session's
message count (fewer: OpenCode removed reverted messages, read afresh) and the latest
`time_updated` of the session and its messages. A message is read once it is settled (a user
message with its parts, an assistant message completed or failed, or any message followed by
another), in OpenCode's order (`time_created`, `id`).

Fill (the TUI's session footer and sidebar, `findLast(m => m.role === "assistant" &&
m.tokens.output > 0)`): the last assistant message with output, `input + output + reasoning +
cache.read + cache.write`, over the model's `limit.context`. This is the figure OpenCode's main
screen shows; its ACP `usage_update` leaves the output out.

Its own compaction: a user message with a `compaction` part (`auto` true when OpenCode compacted
by itself) replaces the window; the assistant message after it with `summary: true` holds the
summary, which is the new window's start. An undo (`session.revert`, `SessionRevert.revert`)
takes the messages from `revert.messageID` on out of the window: a rewind; clearing it without
OpenCode's cleanup (`unrevert`) puts them back.
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ctxd.agents import payloads
from ctxd.agents.base import (
    Action,
    Agent,
    AgentConfig,
    AgentLimits,
    HookAction,
    HookInput,
    Scope,
    SessionReader,
    SessionStore,
    Stamp,
)
from ctxd.agents.jsonl import parse
from ctxd.agents.session import Change, Session, Turn, Usage, first_request, note_report, shorten, tokens

if TYPE_CHECKING:
    import sqlite3

    from ctxd.agents.config.plan import ConfigChange
    from ctxd.agents.folders import Folders

VERSION = "1.18.33"
DATABASE = "opencode.db"
SIDE_FILES = ("-wal", "-shm")  # SQLite's files beside the database, written with it
MAX_ROW = 8 * 1024 * 1024  # a message or part whose JSON is longer is skipped (as a JSONL line would be)
MESSAGES_PER_READ = 500  # messages one read takes at most before the other sessions get a turn
BUSY_SECONDS = 0.5  # a database locked longer (an old rollback journal) is read at the next change
# A database without OpenCode's tables is one its first start is making (its migrations run after
# it opens the file): a missing table is only warned of once it stays missing this long.
MIGRATION_SECONDS = 30.0
DEFAULT_TITLE = "New session - "  # OpenCode's placeholder title until its title request answers
IDLE_MESSAGES = 64  # messages a reader that caught up remembers the start of (`OpenCodeReader.trim`)
SETTLE_SECONDS = 10  # a prompt with no message after it is taken as whole this long after it was made (`_settled`)


def _iso(ms: Any) -> str | None:
    """A row's time (milliseconds since the epoch) as ISO 8601 UTC."""
    from datetime import UTC, datetime

    if type(ms) is not int or ms <= 0:
        return None
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return None


def _regular(path: Path, required: bool) -> bool:
    """Whether `path` is a regular file (not a link, FIFO or device); absent is fine unless `required`."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return not required
    except OSError:
        return False


def connect(db: Path) -> sqlite3.Connection | None:
    """A read-only connection to the database, or None when it is not one ctxd reads: missing,
    not a regular file, or with a `-wal`/`-shm` that is not one. The caller closes it at once.

    While its `-wal` holds nothing (absent, or empty: no OpenCode running, or one that has not
    written yet), everything committed is in the file itself, which is read as an immutable file:
    no lock is taken and nothing is created beside it. A read-only connection would make the
    `-wal` and `-shm` it does not find, and a lock it held at the moment an OpenCode starts makes
    that OpenCode exit with "database is locked": its first statement, `journal_mode = WAL`, runs
    before it sets a busy timeout; its first write, after. An OpenCode that writes during that one
    read makes it fail: read again at the next change."""
    import sqlite3
    from urllib.parse import quote

    if not _regular(db, True) or not all(_regular(Path(f"{db}{side}"), False) for side in SIDE_FILES):
        return None
    try:
        idle = os.lstat(f"{db}-wal").st_size == 0
    except OSError:
        idle = True
    try:
        connection = sqlite3.connect(f"file:{quote(str(db))}?mode=ro{'&immutable=1' if idle else ''}", uri=True,
                                     timeout=BUSY_SECONDS, isolation_level=None, check_same_thread=False)
    except sqlite3.Error:
        return None
    return connection


def busy(error: Exception) -> bool:
    """A database another process holds locked for now (not one ctxd cannot read)."""
    text = str(error).lower()
    return "locked" in text or "busy" in text


def _ident(db: Path) -> tuple[int, int] | None:
    try:
        st = os.lstat(db)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class _Row(NamedTuple):
    directory: str | None
    top: bool  # not a subagent's session (`parent_id` null)
    updated: int


class OpenCodeSessions(SessionStore):
    """The sessions in `<root>/opencode.db`. The session table is listed by one query when the
    database or its WAL changed on disk, and kept until it changes again; the messages of a
    session are counted only for one that is followed (the message table holds every session's
    conversation: scanning it at each of OpenCode's writes would cost a core while it streams).
    Only the folder itself is watched: beside the database OpenCode keeps its own git stores
    (`snapshot/`), a folder tree that grows with every project."""

    recursive = False

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.db = root / DATABASE
        # The session table and the files' stat data it was read at, as one value: the watcher's
        # thread (`touched`) and the follower's (`stamp`) both read it.
        self._table: tuple[tuple[int, ...] | None, dict[str, _Row]] = (None, {})
        self._reported: dict[str, _Row] = {}  # the rows as `touched` last saw them
        self._counts: dict[str, tuple[tuple[int, ...], int, int]] = {}  # session -> (files, messages, latest)
        self._followed: set[str] = set()  # the sessions a reader was made for
        self._warned = False
        self._missing_since: float | None = None  # when a query first found a table missing (`_worth_a_warning`)

    def _files(self) -> tuple[int, ...] | None:
        """What changes on disk when OpenCode writes: the database's and its WAL's stat data."""
        found: list[int] = []
        for path in (self.db, Path(f"{self.db}-wal")):
            try:
                st = os.lstat(path)
            except OSError:
                found += [0, 0, 0, 0]
                continue
            found += [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]
        return tuple(found) if found[1] else None

    def _query(self, sql: str, *args: Any) -> list[Any] | None:
        """The rows of one short read-only query; None when the database cannot be read now."""
        import sqlite3

        connection = connect(self.db)
        if connection is None:
            return None
        try:
            rows = connection.execute(sql, args).fetchall()
            self._missing_since = None
            return rows
        except sqlite3.Error as error:
            if not busy(error) and not self._warned and self._worth_a_warning(error):
                import logging  # (not at the top: `ctxd hook opencode` imports this module on every tool call)

                self._warned = True
                logging.getLogger(__name__).warning(
                    "%s: not a database of OpenCode %s ctxd can read (%s); its sessions are not followed",
                    self.db, VERSION, error)
            return None
        finally:
            connection.close()

    def _worth_a_warning(self, error: sqlite3.Error) -> bool:
        """Any error, but a missing table only once it has stayed missing MIGRATION_SECONDS (a
        database being made at OpenCode's first start has none yet; its sessions follow)."""
        if "no such table" not in str(error).lower():
            return True
        now = time.monotonic()
        if self._missing_since is None:
            self._missing_since = now
        return now - self._missing_since >= MIGRATION_SECONDS

    def rows(self) -> dict[str, _Row]:
        key = self._files()
        known_key, known = self._table
        if key is None:
            self._table = (None, {})
            return {}
        if key == known_key:
            return known
        found = self._query("SELECT id, directory, parent_id IS NULL, time_updated FROM session")
        if found is None:
            return known  # as it was, asked again at the next write
        rows = {sid: _Row(directory if isinstance(directory, str) else None, bool(top),
                          updated if type(updated) is int else 0)
                for sid, directory, top, updated in found if isinstance(sid, str) and sid.startswith("ses_")}
        self._table = (key, rows)
        return rows

    def keys(self) -> list[str]:
        # A subagent's session (`task`) is a session of its own in OpenCode; ctxd follows the
        # sessions a user typed into.
        return [sid for sid, row in self.rows().items() if row.top]

    def owns(self, key: str) -> bool:
        return key.startswith("ses_") and "/" not in key

    def touched(self, path: str) -> list[str]:
        """A write to the database or its WAL: the sessions whose row moved, and the followed ones
        (a message may change without its session's row)."""
        if Path(path).parent != self.root or Path(path).name not in (DATABASE, f"{DATABASE}-wal"):
            return []
        rows = self.rows()
        moved = [sid for sid, row in rows.items() if row.top and self._reported.get(sid) != row]
        self._reported = dict(rows)
        return moved + [sid for sid in list(self._followed) if sid in rows and sid not in moved]

    def stamp(self, key: str) -> Stamp | None:
        row = self.rows().get(key)
        ident = _ident(self.db)
        if row is None or ident is None:
            return None
        files = self._table[0] or ()
        known = self._counts.get(key)
        if known is None or known[0] != files:
            found = self._query("SELECT count(*), coalesce(max(time_updated), 0) FROM message WHERE session_id = ?", key)
            count, latest = found[0] if found else (0, 0)
            known = self._counts[key] = (files, count if type(count) is int else 0, latest if type(latest) is int else 0)
        return Stamp(ident, known[1], max(row.updated, known[2]), _regular(self.db, True))

    def written(self, key: str, stamp: Stamp) -> float:
        """The latest `time_updated` of the session and its messages (`stamp`'s version, in ms)."""
        return stamp.version / 1000

    def peek_cwd(self, key: str, folders: Folders) -> tuple[str | None, bool, int]:
        """The session row's `directory`: the folder OpenCode ran in (from `$PWD`)."""
        row = self.rows().get(key)
        if row is None:
            return None, False, 0
        return row.directory, True, len((row.directory or "").encode())

    def reader(self, key: str) -> OpenCodeReader:
        self._followed.add(key)
        return OpenCodeReader(self.db, key)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


class OpenCodeReader(SessionReader):
    """One OpenCode session, read from its rows: each read opens the database read-only, reads
    the messages settled since the last one in one short transaction, and closes it.

    The daemon's readers hold no window (`holds_window` False): they count it, and remember where
    each message's items start (once caught up, the latest IDLE_MESSAGES). An undo undone
    (its messages back), one moved while another is on, or one to a message forgotten has the
    session read again from its start in the same transaction: the rows are all there. A reader
    is taken up where it stood (`state`, `resume`); a read that finds the message it read last gone
    (an undo OpenCode cleaned up removes the messages it took out) reads the session again."""

    def __init__(self, db: Path, session_id: str) -> None:
        self.db = db
        self.session_id = session_id
        self.bytes_read = 0
        self.caught_up = True
        self.stop_when_rewritten = False
        self.rewritten = False  # never: another database (a new inode) is read afresh by the follower
        self._init()

    def _init(self) -> None:
        self.session = Session("opencode", f"{self.db}#{self.session_id}")
        self._cursor: tuple[int, str] | None = None  # (time_created, id) of the last message read
        self._count = 0  # the items since the last compaction, a revert's included
        # Message id -> where its items start among them: every message since the last compaction
        # (`_complete`), or the latest ones (`trim`).
        self._starts: dict[str, int] = {}
        self._complete = True
        self._revert: str | None = None  # the message a revert starts at
        self._outside: str | None = None  # a revert's message found in no message since the last compaction
        self._fill = 0  # the latest fill (a compaction's "before")
        self._carried = 0  # the estimate of the items before the first report (`first_request`)
        self._again = False  # the session must be read again from its start (see the class)
        self._taken_at: list[Any] | None = None  # the stamp a `resume` took the reader up at

    def reset(self) -> None:
        self._init()

    def read(self, ident: tuple[int, int] | None = None, budget: int | None = None) -> Change:
        import sqlite3

        self._taken_at = None
        change = Change(from_start=self._cursor is None)
        if ident is not None and _ident(self.db) != ident:
            return change
        connection = connect(self.db)
        if connection is None:
            return change
        try:
            connection.execute("BEGIN")  # one snapshot for the session row and its messages
            self._read(connection, change, budget)
            if self._again:
                self._init()
                change = Change(from_start=True)
                self._read(connection, change, budget)
        except sqlite3.DatabaseError as error:
            self.caught_up = True  # read again at its next change
            if not busy(error):  # a schema this module does not know (a newer OpenCode), a damaged file:
                self.session.count_unknown("database")  # shown as format drift in ctxd/status
        finally:
            connection.close()  # ends the read transaction
        return change

    # --- put aside, taken up again ---

    def trim(self, messages: int = IDLE_MESSAGES) -> None:
        """Caught up: forget where all but the latest `messages` messages start."""
        if not self.holds_window and len(self._starts) > messages:
            self._starts = dict(list(self._starts.items())[-messages:])
            self._complete = False

    def state(self) -> dict[str, Any] | None:
        starts = list(self._starts.items())[-IDLE_MESSAGES:]
        return {"cursor": list(self._cursor) if self._cursor else None, "count": self._count,
                "starts": [list(entry) for entry in starts], "complete": self._complete and len(self._starts) <= IDLE_MESSAGES,
                "revert": self._revert, "outside": self._outside, "fill": self._fill, "carried": self._carried, "read": self.bytes_read,
                "session": self.session.to_state()}

    def resume(self, saved: dict[str, Any], stamp: Stamp) -> bool:
        try:
            cursor = saved["cursor"]
            self._cursor = (int(cursor[0]), str(cursor[1])) if cursor else None
            self._count = int(saved["count"])
            self._starts = {str(mid): int(at) for mid, at in saved["starts"]}
            self._complete = bool(saved["complete"])
            revert = saved["revert"]
            self._revert = str(revert) if revert is not None else None
            outside = saved.get("outside")
            self._outside = str(outside) if outside is not None else None
            self._fill, self._carried = int(saved["fill"]), int(saved["carried"])
            self.bytes_read = int(saved["read"])
            self.session = Session.from_state("opencode", f"{self.db}#{self.session_id}", saved["session"])
            taken = saved.get("stamp")
            if not isinstance(taken, list) or taken[:2] != list(stamp.ident):
                raise ValueError("another database")
            self._taken_at = taken
            return True
        except (AttributeError, LookupError, TypeError, ValueError):
            self._init()
            return False

    def _still_there(self, connection: sqlite3.Connection) -> bool:
        """The message read last is still in the database (an undo cleaned up removes the last ones)."""
        return self._cursor is None or connection.execute(
            "SELECT 1 FROM message WHERE id = ? AND session_id = ?", (self._cursor[1], self.session_id)).fetchone() is not None

    def left(self, stamp: Stamp) -> int:
        """Nothing, right after it was taken up at the session's stamp as it is now."""
        return 0 if self._taken_at is not None and self._taken_at == list(stamp.key()) else max(1, stamp.size)

    # --- rows ---

    def _read(self, connection: sqlite3.Connection, change: Change, budget: int | None) -> None:
        session = self.session
        stop_at = self.bytes_read + budget if budget is not None else None
        row = connection.execute(
            "SELECT directory, title, version, model, revert, time_created, time_updated FROM session WHERE id = ?",
            (self.session_id,)).fetchone()
        if row is None:
            return
        directory, title, version, model, revert, created, updated = row
        if session.id is None:
            session.id = self.session_id
            session.cwd = _text(directory)
            session.started = _iso(created)
            change.meta = True
        if isinstance(version, str) and version != session.version:
            session.version = version
            change.meta = True
        if isinstance(title, str) and title and not title.startswith(DEFAULT_TITLE) and shorten(title) != session.title:
            session.title = shorten(title)
            change.meta = True
        if session.model is None and isinstance(model, str):
            named = parse(model)
            if named is not None and isinstance(named.get("id"), str):
                session.model = named["id"]
                change.meta = True
        session.last_activity = _iso(updated) or session.last_activity
        if not self._still_there(connection):  # an undo cleaned up before this reader saw it
            self._again = True
            return
        undone = parse(revert) if isinstance(revert, str) else None
        start = _text(undone.get("messageID")) if undone is not None else None
        if start is None:  # an undo undone or cleaned up: before the messages (those after it are in the window)
            self._reverted(connection, None, updated, change)
        after = self._cursor or (-1, "")
        messages = connection.execute(
            "SELECT id, time_created, CASE WHEN length(data) <= ? THEN data END FROM message"
            " WHERE session_id = ? AND (time_created > ? OR (time_created = ? AND id > ?))"
            " ORDER BY time_created, id LIMIT ?",
            (MAX_ROW, self.session_id, after[0], after[0], after[1], MESSAGES_PER_READ + 1)).fetchall()
        self.caught_up = len(messages) <= MESSAGES_PER_READ
        infos = [parse(data) if isinstance(data, str) else None for _, _, data in messages]
        last_reply = max((n for n, info in enumerate(infos) if info is not None and info.get("role") == "assistant"),
                         default=-1)
        messages = messages[:MESSAGES_PER_READ]
        for number, (mid, mcreated, data) in enumerate(messages):
            if not isinstance(mid, str) or type(mcreated) is not int:
                session.bad_lines += 1
                continue
            info = infos[number]
            self.bytes_read += len(data) if isinstance(data, str) else 0
            parts = self._parts(connection, mid)
            if info is None:
                session.bad_lines += 1
            elif not _settled(info, parts, mcreated, number + 1 < len(infos), number < last_reply):
                self.caught_up = True
                break  # still being written: read when it is settled
            else:
                self._message(mid, mcreated, info, parts, change)
            self._cursor = (mcreated, mid)
            if stop_at is not None and self.bytes_read >= stop_at and number < len(messages) - 1:
                self.caught_up = False  # the rest after the other sessions' turn
                break
        if start is not None:  # an undo: after them (it may start at one this read found)
            self._reverted(connection, start, updated, change)

    def _parts(self, connection: sqlite3.Connection, message_id: str) -> list[dict[str, Any]]:
        found = []
        for (data,) in connection.execute(
                "SELECT CASE WHEN length(data) <= ? THEN data END FROM part WHERE message_id = ? ORDER BY id",
                (MAX_ROW, message_id)):
            part = parse(data) if isinstance(data, str) else None
            self.bytes_read += len(data) if isinstance(data, str) else 0
            if part is None:
                self.session.bad_lines += 1
            else:
                found.append(part)
        return found

    # --- messages ---

    def _add(self, item: dict[str, Any], change: Change, summary: bool = False) -> None:
        self._count += 1
        if self._revert is not None:
            return  # (after the message a revert starts at: out of the window)
        session = self.session
        session.add_item(item, self.holds_window)
        if summary:
            change.add_to_replacement(item, session)
        else:
            change.add(item, session)
        if session.first_request is None:
            from ctxd.tokens.approx import item_tokens  # (not for a hook, which imports this module)

            self._carried += item_tokens(item)

    def _message(self, mid: str, created: int, info: dict[str, Any], parts: list[dict[str, Any]],
                 change: Change) -> None:
        self._starts[mid] = self._count
        role = info.get("role")
        if role == "user":
            self._user(created, parts, change)
        elif role == "assistant":
            self._assistant(created, info, parts, change)
        else:
            self.session.count_unknown(f"message.{role}")

    def _user(self, created: int, parts: list[dict[str, Any]], change: Change) -> None:
        session = self.session
        compaction = next((p for p in parts if p.get("type") == "compaction"), None)
        if compaction is not None:
            self._compact(created, compaction, change)
        content: list[dict[str, Any]] = []
        typed = False
        for part in parts:
            kind = part.get("type")
            if kind == "text" and isinstance(part.get("text"), str):
                if part["text"]:
                    content.append({"type": "input_text", "text": part["text"]})
                    typed = typed or not part.get("synthetic")
            elif kind == "file":
                name = _text(part.get("filename")) or _text(part.get("url")) or "a file"
                content.append({"type": "input_text", "text": f"[attached: {name}]"})
            elif kind != "compaction":
                session.count_unknown(f"part.{kind}")
        if not content:
            return
        if typed and compaction is None:
            text = "\n".join(p["text"] for p in content)
            turn = Turn(session.window, shorten(text, 60), _iso(created), session.generation)
            session.add_turn(turn, self.holds_window)
            change.turns.append(turn)
            if session.title is None:  # the row's title is OpenCode's placeholder until its title request answers
                session.title = shorten(text)
                change.meta = True
        self._add({"type": "message", "role": "user", "content": content}, change)

    def _assistant(self, created: int, info: dict[str, Any], parts: list[dict[str, Any]], change: Change) -> None:
        session = self.session
        carried = self._carried  # what its request carried came before its parts
        summary = info.get("summary") is True
        for part in parts:
            kind = part.get("type")
            if kind == "text" and isinstance(part.get("text"), str):
                if part["text"]:
                    self._add({"type": "message", "role": "assistant",
                               "content": [{"type": "output_text", "text": part["text"]}]}, change, summary)
            elif kind == "reasoning" and isinstance(part.get("text"), str):
                self._add({"type": "reasoning", "summary": [],
                           "content": [{"type": "reasoning_text", "text": part["text"]}]}, change, summary)
            elif kind == "tool":
                self._tool(part, change)
            elif kind not in ("step-start", "step-finish", "snapshot", "patch", "retry", "agent"):
                session.count_unknown(f"part.{kind}")
        self._usage(created, info, carried, change)

    def _tool(self, part: dict[str, Any], change: Change) -> None:
        state = _object(part.get("state"))
        call_id = str(part.get("callID") or "")
        self._add({"type": "function_call", "call_id": call_id, "name": str(part.get("tool") or ""),
                   "arguments": json.dumps(state.get("input", {}), ensure_ascii=False)}, change)
        if state.get("status") in ("completed", "error"):
            output = state.get("output") if state.get("status") == "completed" else state.get("error")
            self._add({"type": "function_call_output", "call_id": call_id,
                       "output": output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)}, change)

    def _usage(self, created: int, info: dict[str, Any], carried: int, change: Change) -> None:
        session = self.session
        raw = info.get("tokens")
        if not isinstance(raw, dict):
            return
        cache = _object(raw.get("cache"))
        read, written = tokens(cache.get("read")), tokens(cache.get("write"))
        uncached, output, reasoning = tokens(raw.get("input")), tokens(raw.get("output")), tokens(raw.get("reasoning"))
        model = _text(info.get("modelID")) or session.model or ""
        if model and model != session.model:
            session.model = model
            change.meta = True
        request = Usage(input=uncached, cached_input=read, cache_write=written, output=output + reasoning,
                        reasoning=reasoning)
        if request.input or request.cached_input or request.cache_write or request.output:
            session.bill(model, request)
            change.usage = True
        prompt = uncached + read + written
        if prompt and session.first_request is None:
            session.first_request = first_request(prompt, [], carried)
        if not output:
            return  # the TUI's figure is the last message with output
        used = prompt + output + reasoning
        note_report(session, used, request, model, _iso(created))
        self._fill = used
        last = {"input": uncached, "output": output, "reasoning": reasoning, "cacheRead": read, "cacheWrite": written,
                "total": tokens(raw.get("total"))}
        if used != session.baseline or last != session.last_usage:
            session.last_usage = last
            change.usage = True
        session.reported(used)

    def _compact(self, created: int, part: dict[str, Any], change: Change) -> None:
        """A compaction starts: the window is replaced; the summary that follows starts the new one."""
        session = self.session
        at = _iso(created) or session.last_activity
        session.agent_compactions.append({"trigger": "auto" if part.get("auto") is True else "manual",
                                          "tokensBefore": self._fill or session.baseline or None,
                                          "tokensAfter": None, "at": at})
        session.replace_window([], self.holds_window)
        self._count, self._starts, self._revert, self._complete = 0, {}, None, True
        session.compactions += 1
        session.generation += 1
        session.baseline_items = 0
        change.replace(session, [], session.compactions - 1, at)
        change.usage = True

    def _reverted(self, connection: sqlite3.Connection, start: str | None, updated: Any, change: Change) -> None:
        """`session.revert` changed: the messages from `start` on leave the window (a rewind), or
        come back when OpenCode undid the revert without removing them."""
        if start == self._revert or (start is not None and start == self._outside):
            return
        session = self.session
        if start is not None and start not in self._starts:
            if not self._complete:
                self._again = True  # forgotten: from the start, where every message is known
            elif self.caught_up:  # of an earlier window, or of no message here: nothing to take out, and
                self._outside = start  # not read again at each read (a trimmed reader did, at every write)
            return  # (else perhaps not read yet)
        if self._revert is not None:
            kept = start is not None or connection.execute(
                "SELECT 1 FROM message WHERE session_id = ? AND id = ?", (self.session_id, self._revert)).fetchone()
            if kept:  # its messages back (or another revert): the window again, from the start
                self._again = True
                return
            self._count = self._starts.get(self._revert, session.window)  # OpenCode's cleanup removed them: out
            self._starts = {mid: at for mid, at in self._starts.items() if at < self._count}
            self._revert = None
            return
        assert start is not None  # (None while none was on: the same)
        keep = self._starts[start]
        self._revert = start
        if self.holds_window:
            del session.items[keep:]
        if session.baseline is not None:
            session.tail = session.tail[:max(0, keep - session.baseline_items)]
        session.window, session.baseline_items = keep, min(session.baseline_items, keep)
        session.rewinds += 1
        session.generation += 1
        change.replace(session, [], None, _iso(updated) or session.last_activity, keep=keep)
        change.usage = True


def _settled(info: dict[str, Any], parts: list[dict[str, Any]], created: int, followed: bool, replied: bool) -> bool:
    """Whether a message is written whole, so that a read may go past it (nothing of it is read
    again). OpenCode writes a prompt's message, then its parts one write each (an attached file's
    after its text), then starts the reply: a user message is whole once a message follows it, or
    SETTLE_SECONDS after it was made (an OpenCode that stopped there). It writes a prompt typed
    while a reply streams at once, before the reply has its tokens and its last parts: an assistant
    message is whole once completed or failed, or once a later step's message follows it (one
    left so by an OpenCode that stopped)."""
    if info.get("role") == "user":
        return bool(parts) and (followed or time.time() * 1000 - created > SETTLE_SECONDS * 1000)
    times = _object(info.get("time"))
    return type(times.get("completed")) is int or info.get("error") is not None or replied


# --- how full, when it compacts -------------------------------------------------------------------
# OpenCode 1.18.33 (the session loop's overflow check, `SessionCompaction.isOverflow`): usable =
# `limit.input - reserved` when the model declares an input limit, else `limit.context -
# maxOutputTokens`, where maxOutputTokens = min(limit.output, 32,000) and reserved =
# `compaction.reserved` ?? min(20,000, maxOutputTokens). A step whose tokens reach it compacts.
# `compaction.auto: false` or OPENCODE_DISABLE_AUTOCOMPACT turns that off.

OUTPUT_MAX = 32_000  # OPENCODE_EXPERIMENTAL_OUTPUT_TOKEN_MAX's default
RESERVED_MAX = 20_000
UNKNOWN_WINDOW = 128_000


def _number(value: Any) -> int | None:
    return value if type(value) is int and value > 0 else None


def usable(context: int, output: int | None, input_limit: int | None, reserved: int | None) -> int:
    """Where OpenCode compacts a model with these declared limits."""
    most = min(output or OUTPUT_MAX, OUTPUT_MAX)
    if input_limit:
        return max(0, input_limit - (reserved if reserved is not None else min(RESERVED_MAX, most)))
    return max(0, context - most)


def config_dir(env: Mapping[str, str]) -> Path:
    """OpenCode's global configuration folder: `$XDG_CONFIG_HOME/opencode`."""
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base) / "opencode"


def jsonc(text: str) -> Any:
    """JSON with comments and trailing commas, as OpenCode reads its configuration."""
    return json.loads(_as_json(text.removeprefix("\ufeff")))


def _as_json(text: str) -> str:
    """JSONC as JSON of the same length, offset for offset: comments and trailing commas blanked
    (a comment's line ends kept), strings untouched."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        if text[i] == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif text.startswith(("//", "/*"), i):
            end = _comment_end(text, i)
            out[i:end] = [c if c == "\n" else " " for c in text[i:end]]
            i = end - 1
        elif text[i] == ",":
            after = i + 1
            while after < n and (text[after] in " \t\r\n" or text.startswith(("//", "/*"), after)):
                after = after + 1 if text[after] in " \t\r\n" else _comment_end(text, after)
            if text[after:after + 1] in ("}", "]"):
                out[i] = " "
        i += 1
    return "".join(out)


def _comment_end(text: str, i: int) -> int:
    """Just past the comment at i (`//` to its line's end, `/*` to its `*/`)."""
    if text.startswith("//", i):
        end = text.find("\n", i)
        return len(text) if end < 0 else end
    end = text.find("*/", i + 2)
    return len(text) if end < 0 else end + 2


def _blank_end(blanked: str, i: int) -> int:
    while i < len(blanked) and blanked[i] in " \t\r\n":
        i += 1
    return i


def _member_spans(blanked: str, path: tuple[str, ...]) -> tuple[int, list[tuple[str, int, int, int]]] | None:
    """In JSONC made JSON (`_as_json`), the object at `path`: where its `{` is, and each member's
    key, key start, value start and value end. None when `path` names no object."""
    decoder = json.JSONDecoder()
    at = _blank_end(blanked, 0)
    for depth in range(len(path) + 1):
        if blanked[at:at + 1] != "{":
            return None
        members: list[tuple[str, int, int, int]] = []
        i = _blank_end(blanked, at + 1)
        while blanked[i:i + 1] != "}":
            key, j = decoder.raw_decode(blanked, i)
            value = _blank_end(blanked, _blank_end(blanked, j) + 1)
            end = decoder.raw_decode(blanked, value)[1]
            members.append((key, i, value, end))
            i = _blank_end(blanked, end)
            if blanked[i:i + 1] == ",":
                i = _blank_end(blanked, i + 1)
        if depth == len(path):
            return at, members
        found = [m for m in members if m[0] == path[depth]]
        if not found:
            return None
        at = found[-1][2]
    return None


def without_member(text: str, path: tuple[str, ...]) -> str | None:
    """JSONC `text` less the member at `path` (its comma, and its line when nothing else is left
    on it), the rest byte for byte: comments kept. None when it has no such member."""
    blanked = _as_json(text)
    spans = _member_spans(blanked, path[:-1])
    found = [m[1:] for m in spans[1] if m[0] == path[-1]] if spans is not None else []
    if not found:
        return None
    start, _, end = found[-1]
    comma = None  # the comma before it, when it is the last member (trailing commas being blanks)
    after = end
    while after < len(text) and blanked[after] in " \t\r\n" and text[after] != ",":  # (a trailing comma is a blank)
        after += 1
    if text[after:after + 1] == ",":
        end = after + 1
    else:
        before = start - 1
        while before >= 0 and blanked[before] in " \t\r\n":
            before -= 1
        comma = before if blanked[before:before + 1] == "," else None
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end
    if not (text[line_start:start] + text[end:line_end]).strip():  # nothing else on its line(s)
        start, end = line_start, min(len(text), line_end + 1)
    kept = text[:start] + text[end:]
    return kept if comma is None else kept[:comma] + kept[comma + 1:]


def with_member(text: str, path: tuple[str, ...], name: str, value: Any) -> str | None:
    """JSONC `text` with `name: value` in the object at `path` (its value replaced when it has
    that member, else added last, on a line of its own when the object closes on its own line),
    every other byte kept: comments too. None when `path` names no object."""
    blanked = _as_json(text)
    spans = _member_spans(blanked, path)
    if spans is None:
        return None
    at, members = spans
    body = json.dumps(value)
    same = [m for m in members if m[0] == name]
    if same:
        return text[:same[-1][2]] + body + text[same[-1][3]:]
    close = _blank_end(blanked, members[-1][3] if members else at + 1)
    member = f"{json.dumps(name)}: {body}"
    line_start = text.rfind("\n", 0, close) + 1
    if text[line_start:close].strip() or line_start <= at:  # `}` shares its line: added before it
        cut, added = close, (" " if members else "") + member
    else:
        first = text.rfind("\n", 0, members[-1][1]) + 1 if members else line_start
        indent = text[first:members[-1][1]] if members and not text[first:members[-1][1]].strip() \
            else text[line_start:close] + "  "
        cut, added = line_start, f"{indent}{member}\n"
    if members and not _trailing_comma(text, members[-1][3]):  # the comma it now needs, after its value
        end = members[-1][3]
        return text[:end] + "," + text[end:cut] + added + text[cut:]
    return text[:cut] + added + text[cut:]


def _trailing_comma(text: str, i: int) -> bool:
    """A comma follows the value ending at i (blanks and comments between)."""
    while i < len(text):
        if text[i] in " \t\r\n":
            i += 1
        elif text.startswith(("//", "/*"), i):
            i = _comment_end(text, i)
        else:
            break
    return text[i:i + 1] == ","


def read_settings(path: Path) -> dict[str, Any]:
    """One configuration file (a regular file of at most 1 MiB), {} when it is none."""
    from ctxd.safefile import read_bounded

    try:
        value = jsonc(read_bounded(path, 1 << 20, follow_links=True).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def configured(files: list[Path], env: Mapping[str, str]) -> AgentConfig:
    """What OpenCode's global configuration says of its models' limits and its compaction."""
    windows: dict[str, int] = {}
    points: dict[str, int] = {}
    auto = env.get("OPENCODE_DISABLE_AUTOCOMPACT") not in ("1", "true")
    reserved: int | None = None
    found = []
    for path in files:
        settings = read_settings(path)
        if not settings:
            continue
        found.append(str(path))
        compaction = settings.get("compaction")
        if isinstance(compaction, dict):
            if compaction.get("auto") is False:
                auto = False
            reserved = _number(compaction.get("reserved")) or reserved
        providers = settings.get("provider")
        for provider, entry in providers.items() if isinstance(providers, dict) else ():
            models = entry.get("models") if isinstance(entry, dict) else None
            for model, spec in models.items() if isinstance(models, dict) else ():
                limit = spec.get("limit") if isinstance(spec, dict) else None
                context = _number(limit.get("context")) if isinstance(limit, dict) else None
                if context is None or not isinstance(limit, dict):
                    continue
                point = usable(context, _number(limit.get("output")), _number(limit.get("input")), reserved)
                for name in (str(model), f"{provider}/{model}"):
                    windows[name] = context
                    points[name] = point
    return AgentConfig(auto_compact=auto, windows=windows, compact_limits=points,
                       source=", ".join(found) or str(files[-1]) if files else None)


def compact_limits(model: str | None, config: AgentConfig) -> AgentLimits:
    """OpenCode's window for `model` and where it compacts by itself."""
    from ctxd.tokens import catalog

    name = model or ""
    if name in config.windows:
        window, window_source = config.windows[name], f"limit.context of {name} in {config.source}"
        limit = config.compact_limits.get(name, usable(window, None, None, None))
        limit_source = (f"OpenCode {VERSION}: limit.context - min(limit.output, {OUTPUT_MAX:,}) "
                        f"(or limit.input - reserved) of {name} in {config.source}")
    else:
        window = catalog.context_window_for(model) or UNKNOWN_WINDOW
        window_source = f"ctxd's model catalogue ({name})" if catalog.lookup(model) else \
            f"inferred: {UNKNOWN_WINDOW:,} (model {name!r} is not in OpenCode's configuration nor ctxd's catalogue)"
        limit = usable(window, None, None, None)
        limit_source = f"OpenCode {VERSION}: window - {OUTPUT_MAX:,} (the model's output limit unknown: at most that)"
    if not config.auto_compact:
        limit, limit_source = window, "automatic compaction off (compaction.auto false or OPENCODE_DISABLE_AUTOCOMPACT)"
    return AgentLimits(window, window_source, limit, limit_source, limit * 4 // 5)  # no warning tier of its own


# --- hooks: a plugin of ctxd's ----------------------------------------------------------------------
# OpenCode's hooks are plugins: `<config>/plugins/*.js` modules whose exported functions return
# hooks. ctxd's plugin runs `ctxd hook opencode <event>` with a JSON payload of its own on stdin
# (`sessionID`, `directory`, and `prompt`, or `tool`/`callID`/`args`), waits at most 2 s, and never
# throws: a hook that throws fails the tool call it wraps (seen in 1.18.33).

CHANGES_FILES = {"write", "edit", "bash", "apply_patch"}
"""Tools that can change the working tree (`apply_patch` stands in for edit/write with OpenAI models)."""
PLUGIN_MARK = "// ctxd's plugin for OpenCode"
"""The plugin file's first line: how install and uninstall know the file is ctxd's."""
PLUGIN_TEMPLATE = PLUGIN_MARK + """ (written by `ctxd hooks install --agent opencode`; removed by uninstall).
// Before each typed prompt and each tool call, and after OpenCode's compaction, it runs
// `ctxd hook opencode <event>` with a JSON payload on stdin; it waits at most 2 s and never throws
// (a plugin hook that throws would fail the tool call it wraps).
const COMMAND = __COMMAND__
const CHANGES_FILES = new Set(__TOOLS__)  // the tools that may change files: no process for the others
const LIMIT_MS = 2000

async function run(event, payload) {
  let timer
  try {
    const child = Bun.spawn([...COMMAND, event], {
      stdin: new Blob([JSON.stringify(payload)]), stdout: "ignore", stderr: "ignore",
    })
    const late = new Promise((resolve) => { timer = setTimeout(resolve, LIMIT_MS, "late") })
    if ((await Promise.race([child.exited, late])) === "late") child.kill()
  } catch {
    // no ctxd there, or it failed: OpenCode goes on
  } finally {
    clearTimeout(timer)
  }
}

function typed(parts) {
  try {
    return (parts || []).filter((p) => p && p.type === "text" && !p.synthetic).map((p) => p.text).join("\\n")
  } catch {
    return ""
  }
}

export const Ctxd = async ({ directory }) => ({
  "chat.message": async (input, output) =>
    run("chat.message", { sessionID: input.sessionID, directory, prompt: typed(output && output.parts) }),
  "tool.execute.before": async (input, output) => {
    if (CHANGES_FILES.has(input.tool)) {
      await run("tool.execute.before", { sessionID: input.sessionID, directory, tool: input.tool, callID: input.callID,
                                         args: output && output.args })
    }
  },
  event: async ({ event }) => {
    if (event && event.type === "session.compacted") {
      await run("session.compacted", { sessionID: event.properties && event.properties.sessionID, directory })
    }
  },
})
"""


def plugin_text(ctxd: list[str]) -> str:
    return PLUGIN_TEMPLATE.replace("__COMMAND__", json.dumps([*ctxd, "hook", "opencode"])).replace(
        "__TOOLS__", json.dumps(sorted(CHANGES_FILES)))


def plugin_is_ours(text: str) -> bool:
    return text.startswith(PLUGIN_MARK)


def mcp_is_ours(entry: Any) -> bool:
    """An `mcp` entry of opencode.json that runs `<ctxd> mcp`."""
    from ctxd.agents.config.ours import runs_ctxd

    command = entry.get("command") if isinstance(entry, dict) else None
    return (isinstance(command, list) and all(isinstance(w, str) for w in command) and command[-1:] == ["mcp"]
            and runs_ctxd(command[:-1]))


def mcp_add(settings: dict[str, Any], ctxd: list[str]) -> dict[str, Any]:
    from ctxd.agents.config.files import InstallError

    servers = settings.setdefault("mcp", {})
    if not isinstance(servers, dict):
        raise InstallError("`mcp` is not an object; left unchanged")
    if "ctxd" in servers and not mcp_is_ours(servers["ctxd"]):
        raise InstallError("an MCP server named `ctxd` that is not ctxd's is configured; left unchanged")
    servers["ctxd"] = {"type": "local", "command": [*ctxd, "mcp"], "enabled": True}
    return settings


def mcp_remove(settings: dict[str, Any]) -> dict[str, Any]:
    servers = settings.get("mcp")
    if isinstance(servers, dict) and mcp_is_ours(servers.get("ctxd")):
        del servers["ctxd"]
        if not servers:
            del settings["mcp"]
    return settings


def _without_our_mcp(text: str, original: str | None = None) -> str | None:
    """A configuration with comments or trailing commas (JSONC: OpenCode reads it so, and a user
    may add a comment after install, which made uninstall fail for every agent) without ctxd's MCP
    server, every other byte kept; None when it is not JSONC either, or the cut does not read as
    `mcp_remove` would leave it. `mcp` left empty stays when it is the user's: it was in the file
    before install (`original`, the backup's text), or holds a comment of theirs."""
    import copy

    try:
        value = jsonc(text)
        if not isinstance(value, dict):
            return None
        wanted = mcp_remove(copy.deepcopy(value))
        if wanted == value:
            return text  # nothing of ctxd's
        cut = without_member(text, ("mcp", "ctxd"))
        if cut is not None and "mcp" not in wanted:
            if _had_empty_mcp(original) or _holds_comment(cut, ("mcp",)):
                wanted["mcp"] = {}
            else:
                cut = without_member(cut, ("mcp",))
        return cut if cut is not None and jsonc(cut) == wanted else None
    except (ValueError, RecursionError):
        return None


def _had_empty_mcp(original: str | None) -> bool:
    """Whether the file as it was before install (JSON or JSONC) had `"mcp": {}`."""
    try:
        was = jsonc(original) if original is not None else None
    except (ValueError, RecursionError):
        return False
    return isinstance(was, dict) and was.get("mcp") == {}


def _holds_comment(text: str, path: tuple[str, ...]) -> bool:
    """Whether the value at `path` in JSONC `text` has a comment in it."""
    blanked = _as_json(text)
    spans = _member_spans(blanked, path[:-1])
    found = [m for m in spans[1] if m[0] == path[-1]] if spans is not None else []
    start, end = found[-1][2:] if found else (0, 0)  # (what differs but a comma, a trailing one: a comment)
    return any(a != b and a != "," for a, b in zip(text[start:end], blanked[start:end], strict=True))


def _with_our_mcp(text: str, ctxd: list[str]) -> str | None:
    """A configuration with comments or trailing commas with ctxd's MCP server added (`mcp_add`
    raises InstallError for what it refuses), every other byte kept; None when it is not JSONC
    either, or the result does not read as `mcp_add` would make it."""
    import copy

    try:
        value = jsonc(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    wanted = mcp_add(copy.deepcopy(value), ctxd)
    if wanted == value:
        return text
    entry = wanted["mcp"]["ctxd"]
    added = with_member(text, ("mcp",), "ctxd", entry) if isinstance(value.get("mcp"), dict) \
        else with_member(text, (), "mcp", {"ctxd": entry})
    try:
        return added if added is not None and jsonc(added) == wanted else None
    except (ValueError, RecursionError):
        return None


def holds_mcp(text: str) -> bool:
    """Whether the configuration (JSON, or JSONC) holds ctxd's MCP server."""
    from ctxd.agents.config import json_settings

    return json_settings.holds(text, mcp_remove, jsonc)


def _settings_value(path: Path, text: str | None) -> dict[str, Any]:
    """A configuration file's object, JSON or JSONC ({} for none); InstallError when it is neither."""
    from ctxd.agents.config import json_settings
    from ctxd.agents.config.files import InstallError

    try:
        return json_settings.load(path, text)
    except InstallError:
        try:
            value = jsonc(text or "")
        except (ValueError, RecursionError):
            raise InstallError(f"{path}: not valid JSON or JSONC; left unchanged") from None
        if not isinstance(value, dict):
            raise
        return value


class OpenCode(Agent):
    name = "opencode"
    title = "OpenCode"
    version = VERSION
    cache_provider = None  # the model's provider's
    overhead = (("builtinTools", "OpenCode's built-in tools and instructions (inferred)", 1.0),)
    hook_events: Mapping[str, HookAction] = {
        "chat.message": "turn",
        "tool.execute.before": "tool",
        "session.compacted": "compacted",
    }

    def home(self, env: Mapping[str, str], configured: str | None) -> Path:
        """OpenCode's data folder, which holds opencode.db: `$XDG_DATA_HOME/opencode`."""
        user = Path(env.get("HOME") or Path.home())
        return Path(configured or Path(env.get("XDG_DATA_HOME") or user / ".local" / "share") / "opencode").expanduser()

    def session_root(self, home: Path) -> Path:
        return home

    def sessions(self, root: Path) -> OpenCodeSessions:
        return OpenCodeSessions(root)

    def read_config(self, home: Path) -> AgentConfig:
        folder = config_dir(os.environ)
        files = [folder / name for name in ("config.json", "opencode.json", "opencode.jsonc")]
        if os.environ.get("OPENCODE_CONFIG"):
            files.append(Path(os.environ["OPENCODE_CONFIG"]))
        return configured(files, os.environ)

    def limits(self, model: str | None, stated_window: int | None, config: AgentConfig) -> AgentLimits:
        return compact_limits(model, config)

    # --- hooks ---

    def hook_input(self, event: str, data: dict[str, Any]) -> HookInput | None:
        return HookInput(self.hook_events.get(event), _text(data.get("sessionID")), _text(data.get("directory")),
                         _text(data.get("prompt")), _text(data.get("tool")), data.get("args"), _text(data.get("callID")))

    def changes_files(self, tool_name: str, tool_input: Any) -> bool:
        return tool_name in CHANGES_FILES

    def tool_paths(self, tool_name: str, tool_input: Any) -> list[str]:
        if tool_name == "apply_patch" and isinstance(tool_input, dict):
            return payloads.patch_paths({"patch": tool_input.get("patchText") or tool_input.get("patch")})
        return payloads.named_paths(tool_input, ("filePath",))

    def shell_command(self, tool_name: str, tool_input: Any) -> str | None:
        return payloads.command(tool_input) if tool_name == "bash" else None

    # --- ctxd's entries in its configuration: the plugin file and `mcp` in opencode.json ---

    def marks(self, env: Mapping[str, str]) -> list[Path]:
        """Its configuration folder (where install writes) or its data folder (opencode.db): it
        makes both on its first start."""
        return [config_dir(env), self.home(env, None)]

    def _files(self, scope: str, project: Path) -> tuple[Path, Path]:
        folder = project / ".opencode" if scope == "project" else config_dir(os.environ)
        settings = project / "opencode.json" if scope == "project" else folder / "opencode.json"
        return folder / "plugins" / "ctxd.js", settings

    def config_changes(self, action: Action, scope: Scope, project: Path, state_dir: Path,
                       ctxd: list[str]) -> tuple[list[ConfigChange], list[str]]:
        from ctxd.agents.config.files import InstallError
        from ctxd.agents.config.plan import ConfigChange, json_install, json_uninstall, read_backup, read_scoped

        plugin, settings = self._files(scope, project)
        before = read_scoped(plugin, scope, project)
        current = read_scoped(settings, scope, project)
        notes: list[str] = []
        if action == "install":
            if before is not None and not plugin_is_ours(before):
                raise InstallError(f"{plugin}: a plugin of your own has this name; left unchanged")
            try:
                mcp = json_install(settings, current, lambda value: mcp_add(value, ctxd), holds_mcp)
            except InstallError:  # JSONC (OpenCode reads its configuration so): added in its text
                if current is None or (text := _with_our_mcp(current, ctxd)) is None:
                    raise
                mcp = ConfigChange(settings, current, text, holds_mcp)
            changes = [ConfigChange(plugin, before, plugin_text(ctxd), plugin_is_ours), mcp]
            notes.append("OpenCode loads the plugin when it starts: restart a running OpenCode.")
            if scope == "project":
                notes.append(f"OpenCode also installs its plugin package into {plugin.parent.parent} "
                             "(its own npm step) the first time it loads that folder.")
            return changes, notes
        after = None if before is not None and plugin_is_ours(before) else before
        try:
            without = json_uninstall(settings, current, mcp_remove, state_dir, holds_mcp, jsonc)
        except InstallError:
            original = (read_backup(state_dir, settings) or {}).get("original")  # (the user's `"mcp": {}` stays)
            text = _without_our_mcp(current, original if isinstance(original, str) else None) if current else None
            if text is None:
                raise
            without = ConfigChange(settings, current, text, holds_mcp)
        return [ConfigChange(plugin, before, after, plugin_is_ours), without], notes

    def config_status(self, scope: Scope, project: Path) -> str:
        from ctxd.agents.config.files import InstallError
        from ctxd.agents.config.plan import read_scoped

        plugin, settings = self._files(scope, project)
        try:
            text = read_scoped(plugin, scope, project)
            value = _settings_value(settings, read_scoped(settings, scope, project))
        except InstallError as error:
            return f"opencode {scope}: {error}"
        ours = text is not None and plugin_is_ours(text)
        events = ", ".join(self.hook_events) if ours else "none"
        servers = value.get("mcp")
        mcp = isinstance(servers, dict) and mcp_is_ours(servers.get("ctxd"))
        return f"opencode {scope}: hooks {events} ({plugin}); MCP server {'yes' if mcp else 'no'} ({settings})"

    def mcp_installed(self, project: Path) -> bool:
        from ctxd.agents.config.files import InstallError
        from ctxd.agents.config.plan import read_scoped

        for scope in ("project", "user"):
            settings = self._files(scope, project)[1]
            try:
                servers = _settings_value(settings, read_scoped(settings, scope, project)).get("mcp")
            except InstallError:
                continue
            if isinstance(servers, dict) and mcp_is_ours(servers.get("ctxd")):
                return True
        return False


AGENT = OpenCode()
