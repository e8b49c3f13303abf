"""Sessions kept as one JSONL file each: the shared store and the incremental reader.

`JsonlStore` is the `SessionStore` of an agent that writes one JSONL file per session (Codex, Claude
Code): keys are the files' paths, stamps their stat data; its module says which files are sessions,
where their head states the session's folder, and how records become items (`Reader.record`).

A reader keeps the byte offset of the end of the last complete line it consumed. A last line the
agent is still writing (no newline yet) is left for the next read, never lost and never parsed
half. A file that shrank below the offset, or whose bytes before the offset are not the ones
read (rewritten in place), was rewritten: the reader starts over. (A file that grew is checked
whole while it is short; a long one by sampled blocks, and whole each time the offset doubled:
FULL_CHECK_BYTES.) A line nested too deeply for
the ledger is skipped, as is a hole in a sparse file (never read through byte by byte).
"""

from __future__ import annotations

import errno
import gc
import json
import math
import os
import re
import stat
from abc import abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxd.agents import skim
from ctxd.agents.base import SessionReader, SessionStore, Stamp
from ctxd.agents.session import MAX_HELD_ITEMS, Change, Session

if TYPE_CHECKING:
    from ctxd.agents.folders import Folders

try:  # zlib's CRC-32, folded with carry-less multiplies (x86-64): a tenth of a first read was zlib's
    from ctxd.agents._crc32 import crc32
except ImportError:
    from zlib import crc32

# A read's size: the skimmer and the rewrite check then run over bytes still in the CPU's cache (reads
# of 8 MiB cost a heavy history's first read a tenth more CPU). A line longer than a chunk is read again
# in a chunk four times larger, up to MAX_LINE.
READ_CHUNK = 1024 * 1024
MAX_LINE = 8 * 1024 * 1024  # a longer line (newline included) is skipped, never held whole in memory
# Rewinds to a line a reader had forgotten (its bounds: a long session, a reader taken up) that it
# reads its file again from the start for (`replay`), each remembered that time, until a read
# catches up; a rewind to another one after those is not followed (a hostile file cannot have one
# change read again and again). Counted per change, not per reader: a daemon's reader of a long
# Gemini CLI session spent one on each compression, and after 16 took a resume for a compaction.
MAX_REPLAYS = 16
HEAD_CHUNK = 4096  # how far past a first line a peek may read (never parsed)
HEAD_LIMIT = 4 * 1024 * 1024  # a file without its first lines in this many bytes is not a session
MAX_DEPTH = 100  # a record nested deeper is skipped: the ledger's JSON (and the wire's) cannot hold it
EDGE_BLANKS = 64  # blank lines passed over at a chunk's edge to find the line whose time it gives
CHECK_BYTES = 64  # bytes kept from the file's start and from just before the offset (rewrite check)
# A file that grew is checked for a rewrite of what was read before (in its middle too): whole, by the
# CRC of every byte read, while it was read no further than FULL_CHECK_BYTES; a longer one by its
# first and last bytes read and by SAMPLES blocks of SAMPLE_BYTES spread over what was read (kept as
# the reading passed them: at most twice as many), and whole again each time its offset doubled since
# its last whole check (at most twice its bytes read again over its life). An append cannot be told
# from a rewrite that also grew the file by anything but the bytes: a check of every byte on each
# append would read a long history again and again.
FULL_CHECK_BYTES = 1024 * 1024  # (a live session's each change: at most this much read again)
SAMPLES = 8
SAMPLE_BYTES = 4096
# Never block on a FIFO or a device, never follow a link out of the agents' folders.
OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC

_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _reject(value: str) -> float:
    raise ValueError(f"{value} is not JSON a ledger can store")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        _reject(text)
    return value


# NaN, Infinity and 1e999 make a line bad: the ledger's strict JSON cannot hold them.
_DECODER = json.JSONDecoder(parse_constant=_reject, parse_float=_finite)


def _clean(value: Any) -> Any:
    """`value` with every lone surrogate (only a JSON `\\udXXX` escape makes one) replaced by U+FFFD:
    such a string cannot be encoded, so it would break every reply that holds it."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, dict):
        return {_clean(k): _clean(v) for k, v in value.items()}
    return value


def kind_of(rec: dict[str, Any]) -> str | None:
    """A record's (an item's, an event's) `type`, None when it is no string: an object there made
    every later read of the session fail, and its gauge stop."""
    kind = rec.get("type")
    return kind if isinstance(kind, str) else None


def parse(line: str) -> dict[str, Any] | None:
    """One line as a JSON object, or None when it is not one a ledger can store (bad JSON, too
    deeply nested, NaN/Infinity). Lone surrogates are replaced, so nothing unencodable leaves."""
    try:
        try:  # `decode` less its two whitespace scans, done below only when a line has any
            rec, end = _DECODER.raw_decode(line)
        except ValueError:
            rec, end = _DECODER.decode(line), len(line)  # whitespace first (or bad JSON: raises)
        if type(rec) is not dict or (end < len(line) and not line[end:].isspace()):
            return None
        if line.count("{") + line.count("[") > MAX_DEPTH and _depth(rec) > MAX_DEPTH:
            return None
        return _clean(rec) if "\\u" in line and _ESCAPED_SURROGATE.search(line) else rec
    except (ValueError, RecursionError):
        return None


def _depth(value: Any) -> int:
    """How deeply `value` nests (an object or list counts one), without recursion."""
    deepest = 0
    pending = [(value, 1)]
    while pending:
        node, depth = pending.pop()
        if depth > deepest:
            deepest = depth
            if deepest > MAX_DEPTH:
                return deepest
        children = node.values() if isinstance(node, dict) else node
        pending.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def open_regular(path: str) -> tuple[int, os.stat_result] | None:
    """An fd and its stat when `path` is a regular file (not a link, FIFO or device), else None."""
    try:
        fd = os.open(path, OPEN_FLAGS)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
    except OSError:
        st = None
    if st is None or not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return None
    return fd, st


def printable(path: str) -> str:
    """`path` as UTF-8 text (a name that is not UTF-8 gets U+FFFD), for what a reply shows."""
    return os.fsencode(path).decode("utf-8", "replace")


class Reader(SessionReader):
    """Base of the JSONL readers: bytes in, `Session` updated, `Change` out.

    `window`: keep the window's items in `Session.items` (tests, one-off reads); the daemon's
    readers hand them on in each `Change` and keep only their count, so that thousands of followed
    sessions hold no history in memory. `summary`: build no item at all, only what a summary shows
    (ctxd/sessions/summaries.py): lines are skimmed (ctxd/agents/skim.py) and only the fields it
    needs are decoded; the items after the last report (`Session.tail`, for the fill) are read at
    the end of each read from the lines kept for it. A reader that skims (`skims`) is one of an
    agent that summarizes (`JsonlStore.summarizes`)."""

    agent = ""
    skims = False  # lines go through `take` (a subclass that skims them), not `record` whole
    resumable = False  # a subclass whose whole state `position()` holds (with `own_state`) may be taken up later

    def __init__(self, path: str, *, window: bool = True, summary: bool = False) -> None:
        self.path = path
        self.summary = summary
        self.holds_window = window and not summary
        self.replay = False  # a rewind named a line no longer remembered: read again from the start
        self.wanted: set[str] = set()  # the lines those reads were for (`read_again_for`; kept until caught up)
        self.line_stop = -1  # where the line being read ends in its chunk (a skimming reader)
        self.offset = 0
        self.bytes_read = 0  # every byte this reader ever read from the file (the privacy check)
        self.ident: tuple[int, int] | None = None  # (st_dev, st_ino) of the file read
        self.skipping = False  # inside a line longer than MAX_LINE: read past it up to its newline
        self.caught_up = True  # the last read reached the end of the file (not stopped by its budget)
        self.stop_when_rewritten = False  # set: a file rewritten in place is not read but `rewritten`
        self.rewritten = False
        # (length, CRC-32) of the file's first bytes and of those just before `offset`, as read: what a
        # rewrite check compares. Never the bytes themselves, which a saved position would keep (a
        # key in a session's first line).
        self._head: tuple[int, int] | None = None
        self._tail: tuple[int, int] | None = None
        self._crc: int | None = 0  # CRC-32 of every byte before `offset` (None past a hole jumped over)
        self._ctime: int | None = None  # the file's ctime when this reader last read it (None: not yet)
        # (position, length, CRC-32) of blocks spread over what was read (`_sample`), one at most per
        # `_stride` bytes; and how far every byte read was last checked (or read from the start).
        self._samples: list[tuple[int, int, int]] = []
        self._stride = READ_CHUNK
        self._next_sample = 0
        self._verified = 0
        self._checked = False  # this read checked every byte read before (`matches`)
        self.session = Session(agent=self.agent, path=printable(path))

    # --- subclasses ---

    def record(self, rec: dict[str, Any], change: Change) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    # --- feeding ---

    def feed(self, data: bytes, room: int = MAX_HELD_ITEMS) -> tuple[Change, int]:
        """Consume the complete lines in `data`; return the change and the bytes consumed. Stops
        after a replacement once the replacements name more than `room` items (MAX_HELD_ITEMS)."""
        change = Change()
        end = data.rfind(b"\n")
        if end < 0:
            return change, 0
        # Parsed records are trees without cycles: the cyclic collector would only re-scan the
        # growing history again and again (a third of a large import's time). Paused per chunk.
        collecting = gc.isenabled()
        gc.disable()
        try:
            stopped = self._feed_lines(data, end, change, room)
        finally:
            if collecting:
                gc.enable()
        if stopped is None:
            return change, end + 1
        return change, stopped

    def take(self, data: bytes, row: tuple[Any, ...], change: Change) -> None:  # pragma: no cover - abstract
        """One line, `data[row[0]:row[1]]`, for a reader that `skims`; the rest of `row` is the values at
        `paths` (ctxd/agents/skim.py `scan`), or nothing when the line is not an object to skim."""
        raise NotImplementedError

    def take_whole(self, line: bytes, change: Change) -> None:
        """A line parsed whole (one the skimmer cannot read, or that is needed whole)."""
        rec = parse(line.decode("utf-8", "replace"))
        if rec is None:
            self.session.bad_lines += 1
            return
        self.record(rec, change)

    # The lines a skimming reader need not look at (ctxd/agents/skim.py `scan`): those whose
    # top-level "type" is one of `skip_types`, unless one of `marks()` holds (a path's value is one
    # of its texts); a line the skimmer cannot walk (an escaped key, say), unless it holds one of
    # `needles()`.
    skip_types: tuple[bytes, ...] = ()
    # The key paths whose values `take` is given, and how large a container among them may be to be
    # given built (else its offsets): skim.py `scan`.
    paths: tuple[tuple[bytes, ...], ...] = ()
    limits: tuple[int, ...] = ()

    def needles(self) -> tuple[bytes, ...]:
        return ()

    def marks(self) -> tuple[tuple[tuple[bytes, ...], tuple[bytes, ...]], ...]:
        return ()

    # A reader that reads a run of lines at once (`fold`) in summary mode: claude.py, codex.py.
    folds = False

    def fold(self, data: bytes, rows: list[tuple[Any, ...]], i: int, change: Change) -> int:
        """The rows from rows[i] on that are read at once, without `take`; the index after them."""
        return i

    def skipped(self, data: bytes, start: int, stop: int, change: Change) -> None:
        """A line that was not looked at, the first or last of a chunk (its time, say)."""

    def _skim_lines(self, data: bytes, end: int, change: Change, room: int) -> int | None:
        """The lines a skimming reader looks at; the bytes consumed when it stopped (`room`), or None.
        A summary never estimates what the first request carried (`Session.first_request`, the
        breakdown's inferred overhead): it would have to build every item before the first
        report (5% of a first `ctxd sessions`' CPU); the owner's mirror estimates it."""
        newlines, rows = skim.scan(data, 0, end + 1, b"type", self.skip_types, self.needles(), self.paths,
                                   self.limits, self.marks())
        # The file's first line that is not blank, when passed over, gives the session's start: a
        # blank line at its edge (an extra newline) must not hide it. Only the file's: the first line
        # of a later chunk (of a file read in one part or in several) gives no time the lines before
        # it did not. (At most EDGE_BLANKS of them: a file of nothing but newlines is not walked
        # line by line.)
        first_start, first_stop = 0, data.find(b"\n", 0, end + 1)
        for _ in range(EDGE_BLANKS):
            if first_stop >= end or not _blank(data, first_start, first_stop):
                break
            first_start, first_stop = first_stop + 1, data.find(b"\n", first_stop + 1, end + 1)
        first = self.offset == 0 and not _blank(data, first_start, first_stop) and (not rows or rows[0][0] != first_start)
        if first:
            self.skipped(data, first_start, first_stop, change)
        change.lines += newlines
        take, fold = self.take, self.fold if self.folds else None
        i, count = 0, len(rows)
        while i < count:
            if fold is not None:
                i = fold(data, rows, i, change)
                if i == count:
                    break
            row = rows[i]
            self.line_stop = row[1]
            take(data, row, change)
            i += 1
            if change.held > room or self.replay:
                stopped: int = row[1] + 1
                return stopped
        # The chunk's last line that states a time (past blank lines and lines without one, at most
        # EDGE_BLANKS), when passed over, gives the session's latest: the same line, whether it
        # ended an earlier read of the file (or chunk) or not.
        r, last_stop = len(rows) - 1, end
        for _ in range(EDGE_BLANKS):
            last_start = data.rfind(b"\n", 0, last_stop) + 1
            while r >= 0 and rows[r][0] > last_start:
                r -= 1
            taken = r >= 0 and rows[r][0] == last_start
            # (a line taken whole is timed as `parse` has it: one it refuses states no time)
            if not _blank(data, last_start, last_stop) and _timed(data, last_start, last_stop,
                                                                    taken and len(rows[r]) == 2):
                if not taken and not (first and last_start == first_start):
                    self.skipped(data, last_start, last_stop, change)
                break
            if last_start == 0:
                break
            last_stop = last_start - 1
        self.chunk_read(data, end)
        return None

    def chunk_read(self, data: bytes, end: int) -> None:
        """A skimming reader read every line of `data[:end]`."""

    def _feed_lines(self, data: bytes, end: int, change: Change, room: int) -> int | None:
        """Read the lines; the bytes consumed when it stopped (`room`), or None."""
        if self.skims:
            return self._skim_lines(data, end, change, room)
        session = self.session
        # One decode for the whole chunk (json.loads on bytes would detect the encoding per line);
        # bytes that are not UTF-8 become U+FFFD rather than losing the line.
        for number, line in enumerate(data[:end].decode("utf-8", "replace").split("\n")):
            if not line.strip():
                continue
            rec = parse(line)
            if rec is None:
                session.bad_lines += 1
                continue
            change.lines += 1
            self.record(rec, change)
            if change.held > room or self.replay:
                cut = -1
                for _ in range(number + 1):  # the newline ending line number `number` (a newline is never
                    cut = data.find(b"\n", cut + 1)  # part of a byte sequence that is not UTF-8)
                return cut + 1
        return None

    def read(self, ident: tuple[int, int] | None = None, budget: int | None = None) -> Change:
        """Read what the file gained since the last read. Another file under the same name (a new
        inode), a shorter one, or one rewritten in place is read from the start; with `ident`, a
        file that is not that one is not read at all (it was replaced after the caller looked).
        With `budget`, stop after about that many bytes (`caught_up` False: call again)."""
        opened = open_regular(self.path)
        if opened is None:
            return Change()
        fd, st = opened
        try:
            found = (st.st_dev, st.st_ino)
            self._checked = False
            if ident is not None and found != ident:
                return Change()
            if (self.ident is not None and found != self.ident) or st.st_size < self.offset:
                self.reset()
            elif self._rewritten(fd) or (self._ctime not in (None, st.st_ctime_ns) and not self._same(fd, st)):
                # (changed since this reader read it: what it read is checked, `_same`)
                if self.stop_when_rewritten:
                    self.rewritten = True  # the caller decides the file again, as a new one
                    return Change()
                self.reset()
            self.ident = found
            # (read from the start, or every byte read before checked: all it read is as it is now)
            whole = self.offset == 0 or self._checked
            total = Change(from_start=self.offset == 0)
            spent = 0  # bytes consumed (a chunk read again larger counts once)
            chunk = READ_CHUNK
            # A file with fewer blocks than its size has holes (a session written on never does:
            # two `lseek`s a chunk are asked only of such a file).
            sparse = st.st_blocks * 512 < st.st_size
            while (self.offset < st.st_size and (budget is None or spent < budget) and total.held <= MAX_HELD_ITEMS
                   and not self.replay):
                jumped = _next_data(fd, self.offset, st.st_size) if sparse else self.offset  # over a hole, never through
                if jumped != self.offset:
                    if not self.skipping:
                        self.session.bad_lines += 1  # the hole's zeros and what follows up to a newline
                        self.skipping = True
                    self.offset, self._crc = jumped, None
                if self.offset >= st.st_size:
                    break
                end = _hole(fd, self.offset, st.st_size) if sparse else st.st_size
                data = os.pread(fd, min(chunk, end - self.offset), self.offset)
                if not data:
                    break
                self.bytes_read += len(data)
                if self._head is None and self.offset == 0:
                    self._head = _check(data[:CHECK_BYTES])
                if self.skipping:
                    cut = data.find(b"\n")
                    self.skipping = cut < 0
                    used = len(data) if cut < 0 else cut + 1
                else:
                    change, used = self.feed(data, MAX_HELD_ITEMS - total.held)
                    total.extend(change)
                if used == 0:
                    if len(data) < chunk and self.offset + len(data) >= st.st_size:
                        break  # an unfinished last line: wait for its newline
                    if len(data) == chunk < MAX_LINE:
                        chunk = min(MAX_LINE, 4 * chunk)  # a line longer than the chunk: read again, larger
                        continue
                    # A line over MAX_LINE, or one that runs into a hole: skipped, never held whole.
                    self.session.bad_lines += 1
                    self.skipping = True
                    used = len(data)
                self._advance(data, used)
                spent += used
                chunk = READ_CHUNK
            if whole:
                self._verified = self.offset
            self._ctime = st.st_ctime_ns
            self.caught_up = self.offset >= st.st_size or (
                (budget is None or spent < budget) and total.held <= MAX_HELD_ITEMS)
            if self.caught_up and not self.replay:
                self.wanted.clear()  # read again for those and caught up: the next change has its own MAX_REPLAYS
            if self.summary:
                self.finish_summary()
            return total
        finally:
            os.close(fd)

    def finish_summary(self) -> None:
        """Summary mode, at the end of a read: `Session.tail` from the lines kept for it."""

    # --- a reader put aside and taken up again (ctxd/sessions/summaries.py, the daemon's restart) ---

    def state(self) -> dict[str, Any] | None:
        return self.position() if self.resumable else None

    def position(self) -> dict[str, Any]:
        """Where this reader stands, as JSON: `restore` takes it up there, reading nothing again."""
        return {"offset": self.offset, "ident": list(self.ident) if self.ident else None,
                "head": self._head, "tail": self._tail, "skipping": self.skipping, "crc": self._crc,
                "ctime": self._ctime, "samples": [list(sample) for sample in self._samples], "stride": self._stride,
                "verified": self._verified,
                "session": self.session.to_state(), "reader": self.own_state()}

    def restore(self, state: dict[str, Any]) -> None:
        """Take up where `state` (from `position()`) left off. The caller checked that the file is the
        one it was (`matches`)."""
        from ctxd.agents.session import Session

        self.offset = int(state["offset"])
        ident = state.get("ident")
        self.ident = (int(ident[0]), int(ident[1])) if ident else None
        self._head, self._tail = _saved_check(state["head"]), _saved_check(state["tail"])
        self.skipping = bool(state.get("skipping"))
        crc = state.get("crc")
        self._crc = crc if isinstance(crc, int) else None
        ctime = state.get("ctime")  # (None in a state saved before it was kept: its file is checked)
        self._ctime = ctime if isinstance(ctime, int) and not isinstance(ctime, bool) else None
        self._samples = _saved_samples(state.get("samples"), self.offset)
        stride = state.get("stride", READ_CHUNK)
        if not isinstance(stride, int) or stride < 1:
            raise ValueError(f"not a saved stride: {stride!r}")
        self._stride = stride
        self._next_sample = (self._samples[-1][0] // stride + 1) * stride if self._samples else 0
        verified = state.get("verified", self.offset)
        if type(verified) is not int or not 0 <= verified <= self.offset:
            raise ValueError(f"not a saved check: {verified!r}")
        self._verified = verified
        self.session = Session.from_state(self.agent, printable(self.path), state["session"])
        self.restore_own(state.get("reader") or {})

    def resume(self, saved: dict[str, Any], stamp: Stamp) -> bool:
        """Take up where `saved` stood: at once when the file is stamped as it was then and its ctime
        did not move since it was read (a file rewritten in place with its size and mtime put back,
        `os.utime`, is stamped as it was), else once every byte read is checked to be the same
        (`matches`) and the file did not change without growing."""
        if not self.resumable:
            return False
        try:
            self.restore(saved)
            if list(stamp.key()) == saved.get("stamp") and self._ctime is not None and self._ctime == _ctime_of(self.path):
                return True
            opened = open_regular(self.path)
            if opened is None:
                return False
            fd, now = opened
            try:
                still = Stamp((now.st_dev, now.st_ino), now.st_size, now.st_mtime_ns).key()
                return self.matches(fd, now) and not (now.st_size == self.offset and list(still) != saved.get("stamp"))
            finally:
                os.close(fd)
        except (ArithmeticError, AttributeError, LookupError, TypeError, ValueError):  # a damaged state: read from the start
            return False

    def read_again_for(self, line: str) -> None:
        """A rewind to `line`, which this reader forgot: the file again from its start (`replay`),
        that line remembered (`wanted`); for at most MAX_REPLAYS lines, the rest not followed."""
        if line not in self.wanted and len(self.wanted) < MAX_REPLAYS:
            self.wanted.add(line)
            self.replay = True

    def left(self, stamp: Stamp) -> int:
        return max(0, stamp.size - self.offset)

    def own_state(self) -> dict[str, Any]:
        """A subclass's own part of `position()`."""
        return {}

    def restore_own(self, state: dict[str, Any]) -> None:
        """A subclass's own part of `restore()`."""

    def matches(self, fd: int, st: os.stat_result) -> bool:
        """The open file is still the one this reader read, up to its offset: not replaced, not
        shorter, and every byte before the offset as read (its CRC-32: a file rewritten in place,
        in its middle too, is not taken up where it was left)."""
        if self.ident is not None and (st.st_dev, st.st_ino) != self.ident:
            return False
        if st.st_size < self.offset or self._rewritten(fd):
            return False
        if self._crc is not None:  # (None: a hole was jumped over; the first bytes and those before the offset say)
            crc, at = 0, 0
            while at < self.offset:
                data = os.pread(fd, min(READ_CHUNK, self.offset - at), at)
                if not data:
                    return False
                crc = crc32(data, crc)
                at += len(data)
            if crc != self._crc:
                return False
        # (checked as the file is now: not again before it changes)
        self._verified, self._ctime, self._checked = self.offset, st.st_ctime_ns, True
        return True

    def _same(self, fd: int, st: os.stat_result) -> bool:
        """Whether the bytes read are still the file's, now that it changed since this reader read it
        (its ctime moved). Every one of them (`matches`) when it did not grow, when it was read no
        further than FULL_CHECK_BYTES, or when the offset doubled since they were last checked whole
        (a file read in parts, `budget`, while it grows is not read again at each part);
        else the blocks sampled as they were read (an append and a rewrite in place that grew the
        file look alike but for the bytes: FULL_CHECK_BYTES)."""
        if st.st_size == self.offset:
            return self.matches(fd, st)
        if self.offset <= FULL_CHECK_BYTES or self.offset >= 2 * self._verified:
            return Reader.matches(self, fd, st)  # (its own bytes: the files a subclass reads beside it check theirs)
        try:
            return all(_check(os.pread(fd, length, at)) == (length, crc) for at, length, crc in self._samples)
        except OSError:
            return False

    def _advance(self, data: bytes, used: int) -> None:
        if self.offset >= self._next_sample:  # a block kept for the rewrite check (`_same`): one per stride
            self._sample(data, used)
        self.offset += used
        if self._crc is not None:
            self._crc = crc32(memoryview(data)[:used], self._crc)
        self._tail = _check(data[max(0, used - CHECK_BYTES):used])

    def _sample(self, data: bytes, used: int) -> None:
        """Keep the check of the first bytes of `data` (read at the offset): at most 2 * SAMPLES blocks,
        spread over what was read (past that, every other one goes and the stride doubles)."""
        self._samples.append((self.offset, *_check(data[:min(SAMPLE_BYTES, used)])))
        if len(self._samples) > 2 * SAMPLES:
            self._samples = self._samples[::2]
            self._stride *= 2
        self._next_sample = (self.offset // self._stride + 1) * self._stride

    def _rewritten(self, fd: int) -> bool:
        """The bytes at the start and just before the offset are not the ones read: the file was
        rewritten in place (same inode, not shorter), so what follows the offset is not new."""
        if self.offset == 0:
            return False
        try:
            head = _check(os.pread(fd, self._head[0], 0)) if self._head else None
            tail = _check(os.pread(fd, self._tail[0], self.offset - self._tail[0])) if self._tail else None
        except OSError:
            return True
        return head != self._head or tail != self._tail

    def reset(self) -> None:
        self.offset = 0
        self.skipping = False
        self.replay = False
        self._head = self._tail = None
        self._crc = 0
        self._samples, self._stride, self._next_sample, self._verified = [], READ_CHUNK, 0, 0
        self.session = Session(agent=self.agent, path=printable(self.path))


_NOT_BLANK = re.compile(rb"[^ \t\r\n\f\v]")


def _blank(data: bytes, start: int, stop: int) -> bool:
    """Whether `data[start:stop]` is only whitespace (a blank line), without copying it."""
    return _NOT_BLANK.search(data, start, stop) is None


def _timed(data: bytes, start: int, stop: int, whole: bool = False) -> bool:
    """Whether the line `data[start:stop]` states its time (a string `timestamp`), as its reader
    finds it: skimmed, else (or `whole`: one the skimmer leaves to `parse`) parsed whole."""
    found = None if whole else skim.fields(memoryview(data)[start:stop], 0, (b"timestamp",))
    if found is not None:
        return found[0] >= 0 and data[start + found[0]] == 0x22  # "
    rec = parse(data[start:stop].decode("utf-8", "replace"))
    return rec is not None and isinstance(rec.get("timestamp"), str)


def _check(data: bytes) -> tuple[int, int]:
    """What a rewrite check keeps of some bytes: their length and CRC-32."""
    return len(data), crc32(data)


def _saved_check(value: Any) -> tuple[int, int] | None:
    """A check as `position()` saved it (a pair of integers, or nothing); anything else is refused
    (ValueError: the reader is not taken up, the file is read again from its start)."""
    if value is None:
        return None
    if isinstance(value, list) and len(value) == 2 and all(isinstance(n, int) and n >= 0 for n in value):
        return value[0], value[1]
    raise ValueError(f"not a saved check: {value!r}")


def _saved_samples(value: Any, offset: int) -> list[tuple[int, int, int]]:
    """Sampled blocks as `position()` saved them (none in a state saved before they were kept);
    anything else is refused (ValueError: the file is read again from its start)."""
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > 2 * SAMPLES + 1:
        raise ValueError("not saved samples")
    samples = []
    for sample in value:
        if not (isinstance(sample, list) and len(sample) == 3 and all(type(n) is int and n >= 0 for n in sample)
                and sample[1] <= SAMPLE_BYTES and sample[0] + sample[1] <= offset):
            raise ValueError(f"not a saved sample: {sample!r}")
        samples.append((sample[0], sample[1], sample[2]))
    return samples


def _ctime_of(path: str) -> int | None:
    try:
        return os.lstat(path).st_ctime_ns
    except OSError:
        return None


def _hole(fd: int, offset: int, size: int) -> int:
    """Where the next hole of a sparse file starts (at or after `offset`; the size without one):
    a read stops there, so that the hole is jumped over, not read."""
    try:
        return max(offset + 1, os.lseek(fd, offset, os.SEEK_HOLE))
    except OSError:
        return size


def _next_data(fd: int, offset: int, size: int) -> int:
    """Where data starts again at or after `offset`: a sparse file's hole is skipped, not read."""
    try:
        return os.lseek(fd, offset, os.SEEK_DATA)
    except OSError as error:
        return size if error.errno == errno.ENXIO else offset  # ENXIO: only a hole up to the end


def head(path: str, lines: int = 1, limit: int = HEAD_LIMIT, until: str | None = None) -> tuple[list[dict[str, Any]], int]:
    """The file's first complete `lines` lines, parsed, and the bytes read to get them; with
    `until`, none after the first whose `until` is a string (the lines after it are not parsed).

    A session outside every open workspace is never read further than this (one line for Codex,
    whose first line is the session's meta; its agent's `peek_cwd` says how many). At most `limit` bytes:
    `read == limit` with fewer records means the file has no such head.
    """
    records: list[dict[str, Any]] = []
    read = 0
    opened = open_regular(path)
    if opened is None:
        return records, read
    fd = opened[0]
    try:
        buf = bytearray()  # appended to in place: no copy of what came before per chunk
        start = 0  # where the line being read starts in buf
        found = False
        while len(records) < lines and read < limit and not found:
            chunk = os.read(fd, min(HEAD_CHUNK, limit - read))
            if not chunk:
                break
            read += len(chunk)
            search = len(buf)
            buf += chunk
            while len(records) < lines and not found:
                cut = buf.find(b"\n", search)
                if cut < 0:
                    break
                records.append(parse(buf[start:cut].decode("utf-8", "replace")) or {})
                found = until is not None and isinstance(records[-1].get(until), str)
                start = search = cut + 1
    except OSError:
        pass
    finally:
        os.close(fd)
    return records, read


def entries(directory: str) -> list[os.DirEntry[str]]:
    """The entries of `directory`; none when it cannot be listed."""
    try:
        return list(os.scandir(directory))
    except OSError:
        return []


class JsonlStore(SessionStore):
    """The sessions of an agent that writes one JSONL file per session: a key is a file's path.
    Only regular files are sessions: a symlink (it may point anywhere, ~/.ssh included), a FIFO
    or a device never is."""

    @abstractmethod
    def session_files(self) -> list[str]:
        """Every session file under the root, as they are now (regular files only)."""

    @abstractmethod
    def is_session_file(self, path: str) -> bool:
        """Whether `path` is a session file of this store (from its name and place alone)."""

    def keys(self) -> list[str]:
        return self.session_files() if self.root.is_dir() else []

    def owns(self, key: str) -> bool:
        return key.endswith(".jsonl") and self.is_session_file(key)

    def stamp(self, key: str) -> Stamp | None:
        try:
            st = os.lstat(key)
        except OSError:
            return None
        return Stamp((st.st_dev, st.st_ino), st.st_size, st.st_mtime_ns, stat.S_ISREG(st.st_mode))

    @abstractmethod
    def peek_cwd(self, key: str, folders: Folders) -> tuple[str | None, bool, int]: ...

    @abstractmethod
    def reader(self, key: str) -> Reader: ...


def under(path: Path, root: Path) -> bool:
    """Whether `path` is inside `root` (by name)."""
    try:
        path.relative_to(root)
        return True
    except ValueError:
        return False


def read_tail(path: str, size: int) -> bytes:
    """The last `size` bytes of the regular file at `path`. Opened without blocking and checked on
    what was opened: a FIFO or a device raises FileRefused (`ctxd.safefile`) instead of blocking
    or never ending."""
    from ctxd.safefile import OPEN_FLAGS as SAFE_FLAGS
    from ctxd.safefile import FileRefused

    fd = os.open(path, SAFE_FLAGS)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FileRefused(f"{path}: not a regular file; not read")
        os.lseek(fd, max(0, info.st_size - size), os.SEEK_SET)
        chunks: list[bytes] = []
        left = size
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)
