"""OpenCode's database as OpenCode 1.18.33 writes it, for the tests of ctxd/agents/opencode.py.

The start is `tests/fixtures/agents/opencode/opencode.db`, written by the real OpenCode 1.18.33
(`opencode run`, then `--session`: write, read + edit, an automatic compaction; captured by
`python -m tests.fixtures.agents.capture opencode`, its journal switched to DELETE for the copy).
`Database` copies it, points its session at a test's folder, puts it back in WAL mode (as
OpenCode keeps it: `journal_mode = WAL`, `synchronous = NORMAL`) and appends rows in OpenCode's
shapes (docs/agents-research.md, "OpenCode 1.18.33": message `data` without its id, one assistant
message per model step with `tokens` and `cost`, parts by `type`), each write one short
transaction, as OpenCode's drizzle layer does.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

FIXTURE = Path(__file__).parent / "fixtures" / "agents" / "opencode" / "opencode.db"
SESSION = "ses_dcba9c604ffeKhk0JORT9UoCkC"
MODEL = "qwen3-coder-plus"
FIXTURE_DIRECTORY = "/home/user/app"


class Database:
    def __init__(self, data: Path, directory: Path | str = FIXTURE_DIRECTORY) -> None:
        data.mkdir(parents=True, exist_ok=True)
        self.path = data / "opencode.db"
        shutil.copyfile(FIXTURE, self.path)
        self.clock = 1796174500000  # after the fixture's rows (ms)
        self.serial = 0
        with self.connect() as db:
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("UPDATE session SET directory = ? WHERE id = ?", (str(directory), SESSION))

    def connect(self) -> _Closing:
        db = sqlite3.connect(self.path, isolation_level=None)
        db.execute("PRAGMA busy_timeout = 5000")
        db.execute("PRAGMA synchronous = NORMAL")
        return _Closing(db)

    def _id(self, prefix: str) -> str:
        self.serial += 1
        return f"{prefix}_2345{self.clock:012x}{self.serial:04d}zz"

    def message(self, info: dict[str, Any], parts: list[dict[str, Any]], session: str = SESSION) -> str:
        """A message and its parts, written as OpenCode writes them (one transaction each): a reply
        is made in progress, its parts follow, and it is marked completed last (a reader that
        found it completed before its parts would read a reply without its text)."""
        self.clock += 1000
        mid = self._id("msg")
        times: dict[str, Any] = info["time"] if isinstance(info.get("time"), dict) else {}
        completed = "completed" in times
        begun = {**info, "time": {k: v for k, v in times.items() if k != "completed"}} if completed else info
        with self.connect() as db:
            db.execute("INSERT INTO message (id, session_id, time_created, time_updated, data) VALUES (?, ?, ?, ?, ?)",
                       (mid, session, self.clock, self.clock, json.dumps(begun)))
            for part in parts:
                self.part(mid, part, session, db)
            if completed:
                db.execute("UPDATE message SET data = ? WHERE id = ?", (json.dumps(info), mid))
            db.execute("UPDATE session SET time_updated = ? WHERE id = ?", (self.clock, session))
        return mid

    def part(self, mid: str, part: dict[str, Any], session: str = SESSION, db: Any = None) -> None:
        own = db is None
        db = db or self.connect()
        try:
            db.execute("INSERT INTO part (id, message_id, session_id, time_created, time_updated, data)"
                       " VALUES (?, ?, ?, ?, ?, ?)", (self._id("prt"), mid, session, self.clock, self.clock,
                                                      json.dumps(part)))
        finally:
            if own:
                db.close()

    def update(self, mid: str, info: dict[str, Any]) -> None:
        self.clock += 1000
        with self.connect() as db:
            db.execute("UPDATE message SET data = ?, time_updated = ? WHERE id = ?", (json.dumps(info), self.clock, mid))
            db.execute("UPDATE session SET time_updated = ? WHERE id = ?", (self.clock, SESSION))

    def prompt(self, text: str, session: str = SESSION) -> str:
        return self.message(user(self.clock), [{"type": "text", "text": text}], session)

    def reply(self, text: str, parent: str, prompt: int, cached: int, output: int, cost: float = 0.001,
              completed: bool = True, parts: list[dict[str, Any]] | None = None, session: str = SESSION) -> str:
        info = assistant(parent, self.clock + 1000, prompt, cached, output, cost, completed)
        return self.message(info, [{"type": "step-start"}, *(parts or []), {"type": "text", "text": text},
                                   {"type": "step-finish", "reason": "stop", "tokens": info["tokens"],
                                    "cost": cost}], session)

    def set_session(self, column: str, value: Any) -> None:
        self.clock += 1000
        with self.connect() as db:
            db.execute(f"UPDATE session SET {column} = ?, time_updated = ? WHERE id = ?",  # noqa: S608 - the test's own
                       (value, self.clock, SESSION))

    def rows(self, sql: str, *args: Any) -> list[Any]:
        with self.connect() as db:
            return db.execute(sql, args).fetchall()


class _Closing:
    """A connection that closes when its `with` ends (sqlite3's own `with` only commits)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        return self.db

    def __exit__(self, *exc: object) -> None:
        self.db.close()

    def execute(self, *args: Any) -> sqlite3.Cursor:
        return self.db.execute(*args)

    def close(self) -> None:
        self.db.close()


def user(created: int) -> dict[str, Any]:
    return {"role": "user", "time": {"created": created}, "agent": "build",
            "model": {"providerID": "fake", "modelID": MODEL}, "summary": {"diffs": []}}


def assistant(parent: str, created: int, prompt: int, cached: int, output: int, cost: float,
              completed: bool = True) -> dict[str, Any]:
    """An assistant message: `tokens.input` is the prompt less its cached part (OpenCode's split)."""
    info: dict[str, Any] = {
        "parentID": parent, "role": "assistant", "mode": "build", "agent": "build",
        "path": {"cwd": FIXTURE_DIRECTORY, "root": "/"}, "cost": cost,
        "tokens": {"total": prompt + output, "input": prompt - cached, "output": output, "reasoning": 0,
                   "cache": {"write": 0, "read": cached}},
        "modelID": MODEL, "providerID": "fake", "time": {"created": created}, "finish": "stop"}
    if completed:
        info["time"]["completed"] = created + 500
    return info


def read_only_checkpoint_free(path: Path) -> bool:
    """Whether a writer can checkpoint the whole WAL now: no reader holds a read transaction."""
    with closing(sqlite3.connect(path, isolation_level=None)) as db:
        busy, _, _ = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    return busy == 0
