"""Incremental JSONL reading shared by the agents' readers.

A reader keeps the byte offset of the end of the last complete line it consumed. A last line the
agent is still writing (no newline yet) is left for the next read, never lost and never parsed
half. A file that shrank below the offset was rewritten: the reader starts over.
"""

from __future__ import annotations

import gc
import json
import os
from typing import Any

from ctxd.sessions.model import Change, Session

READ_CHUNK = 8 * 1024 * 1024
HEAD_CHUNK = 4096  # how far past a first line a peek may read (never parsed)


class Reader:
    """Base of the Codex and Claude readers: bytes in, `Session` updated, `Change` out."""

    agent = ""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = 0
        self.bytes_read = 0  # every byte this reader ever read from the file (the privacy check)
        self.session = Session(agent=self.agent, path=path)

    # --- subclasses ---

    def record(self, rec: dict[str, Any], change: Change) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    # --- feeding ---

    def feed(self, data: bytes) -> tuple[Change, int]:
        """Consume the complete lines in `data`; return the change and the bytes consumed."""
        change = Change()
        end = data.rfind(b"\n")
        if end < 0:
            return change, 0
        # Parsed records are trees without cycles: the cyclic collector would only re-scan the
        # growing history again and again (a third of a large import's time). Paused per chunk.
        collecting = gc.isenabled()
        gc.disable()
        try:
            self._feed_lines(data, end, change)
        finally:
            if collecting:
                gc.enable()
        return change, end + 1

    def _feed_lines(self, data: bytes, end: int, change: Change) -> None:
        loads = json.loads
        session = self.session
        # One decode for the whole chunk (json.loads on bytes would detect the encoding per line);
        # bytes that are not UTF-8 become U+FFFD rather than losing the line.
        for line in data[:end].decode("utf-8", "replace").split("\n"):
            if not line.strip():
                continue
            try:
                rec = loads(line)
            except ValueError:
                session.bad_lines += 1
                continue
            if type(rec) is not dict:
                session.bad_lines += 1
                continue
            change.lines += 1
            self.record(rec, change)

    def read(self) -> Change:
        """Read what the file gained since the last read."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return Change()
        try:
            size = os.fstat(fd).st_size
            if size < self.offset:
                self.reset()
            total = Change()
            while self.offset < size:
                os.lseek(fd, self.offset, os.SEEK_SET)
                data = os.read(fd, max(READ_CHUNK, 0))
                if not data:
                    break
                self.bytes_read += len(data)
                change, used = self.feed(data)
                merge(total, change)
                if used == 0:
                    if len(data) < READ_CHUNK:
                        break  # an unfinished last line: wait for its newline
                    # A single line longer than a chunk: read it whole.
                    data = _read_line(fd, self.offset, size)
                    self.bytes_read += len(data)
                    change, used = self.feed(data)
                    merge(total, change)
                    if used == 0:
                        break
                self.offset += used
            if total.replaced:
                total.appended = []
            return total
        finally:
            os.close(fd)

    def reset(self) -> None:
        self.offset = 0
        self.session = Session(agent=self.agent, path=self.path)


def merge(total: Change, change: Change) -> None:
    if change.replaced:
        total.replaced = True
        total.appended = []
    elif not total.replaced:
        total.appended.extend(change.appended)
    total.turns.extend(change.turns)
    total.usage = total.usage or change.usage
    total.meta = total.meta or change.meta
    total.lines += change.lines


def _read_line(fd: int, offset: int, size: int) -> bytes:
    parts = []
    pos = offset
    while pos < size:
        os.lseek(fd, pos, os.SEEK_SET)
        chunk = os.read(fd, READ_CHUNK)
        if not chunk:
            break
        parts.append(chunk)
        pos += len(chunk)
        if b"\n" in chunk:
            break
    return b"".join(parts)


def head(path: str, lines: int = 1, limit: int = 4 * 1024 * 1024) -> tuple[list[dict[str, Any]], int]:
    """The file's first complete `lines` lines, parsed, and the bytes read to get them.

    A session outside every open workspace is never read further than this (one line for Codex,
    whose first line is the session's meta; see discovery.py for Claude). At most `limit` bytes.
    """
    records: list[dict[str, Any]] = []
    read = 0
    try:
        with open(path, "rb") as f:
            buf = b""
            while len(records) < lines and read < limit:
                chunk = f.read(min(HEAD_CHUNK, limit - read))
                if not chunk:
                    break
                read += len(chunk)
                buf += chunk
                while len(records) < lines:
                    cut = buf.find(b"\n")
                    if cut < 0:
                        break
                    line, buf = buf[:cut], buf[cut + 1:]
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        rec = None
                    records.append(rec if isinstance(rec, dict) else {})
    except OSError:
        pass
    return records, read
