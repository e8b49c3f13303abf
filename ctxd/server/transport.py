"""Bytes in and out: LSP base-protocol frames over byte streams, hardened for a long-running daemon.

Reading: `read_frame` takes the next body from a stream (at most `MAX_BODY_BYTES`, a lying
Content-Length allocates nothing up front and is caught at the next frame's header, over-long
string values are shortened as they stream past). Writing: `LockedWriter` sends each frame whole,
whichever thread writes. What the bytes mean is `codec.py`'s business; who answers is `app.py`'s.
"""

from __future__ import annotations

import json
import re
import threading
from typing import BinaryIO

from ctxd.server.codec import encodable

MAX_HEADER_BYTES = 8192
MAX_BODY_BYTES = 512 * 1024 * 1024


class FrameError(Exception):
    """The byte stream cannot be read as LSP frames any more (bad header): the session ends."""


# Frames up to this size are joined and written at once (see `LockedWriter.write_message`).
SMALL_FRAME_BYTES = 256 * 1024


class LockedWriter:
    """`write_message` sends a whole frame in one piece, whichever thread calls it."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def write_message(self, body: list[bytes]) -> None:
        """One frame whose body is the concatenation of `body`. A small frame goes out in one
        write (stdout may be unbuffered, `python -u`: a header written on its own would wake the
        client for nothing); a large one part by part, without concatenating (a prompt's body can
        be tens of megabytes)."""
        size = sum(map(len, body))
        header = b"Content-Length: %d\r\n\r\n" % size
        with self._lock:
            if size <= SMALL_FRAME_BYTES:
                self._write_all(b"".join([header, *body]))
            else:
                for part in (header, *body):
                    self._write_all(part)
            self._stream.flush()

    def _write_all(self, data: bytes) -> None:
        """An unbuffered stream may take only part of a write (a signal in between)."""
        view = memoryview(data)
        while view:
            view = view[self._stream.write(view) or 0:]

    def close(self) -> None:
        with self._lock:
            try:
                self._stream.close()
            except OSError:
                pass


READ_CHUNK = 1 << 20
# A JSON string value longer than this is shortened while its frame is read (head and tail kept):
# a 200 MB tool output then costs a few MB of memory, not several copies of 200 MB. The cap is far
# above any context window (about 2M tokens) and above `tool_output_token_limit`, which shortens
# tool outputs further anyway. `data:` URLs (images) are kept whole: cutting one would corrupt it.
MAX_STRING_BYTES = 8 * 1024 * 1024
_CONTENT_LENGTH = re.compile(rb"content-length[ \t]*:[ \t]*(-?\d+)[ \t]*\r?\n$", re.IGNORECASE)


# The header block of a frame. Raw CR LF CR LF never occurs in a JSON text after letters, so
# finding this inside a body proves the body's Content-Length lied (it is the next frame).
_NEXT_FRAME = re.compile(rb"Content-Length[ \t]*:[ \t]*\d+[ \t]*\r\n(?:[A-Za-z][A-Za-z0-9-]*:[^\r\n]*\r\n)*\r\n",
                         re.IGNORECASE)
_OVERLAP = 512
_USUAL_HEADER = re.compile(rb"Content-Length: ([0-9]{1,9})\r\n\r\n")


class Input:
    """A byte stream with a pushback buffer; reads only what has arrived (read1), never waits for
    more than it needs."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.buffer = bytearray()

    def _fill(self, size: int = 65536) -> bool:
        read1 = getattr(self.stream, "read1", None)
        data = read1(size) if read1 is not None else self.stream.read(1)
        if not data:
            return False
        self.buffer += data
        return True

    def readline(self, limit: int) -> bytes:
        while True:
            newline = self.buffer.find(b"\n", 0, limit)
            if newline >= 0 or len(self.buffer) >= limit:
                end = newline + 1 if newline >= 0 else limit
                line = bytes(self.buffer[:end])
                del self.buffer[:end]
                return line
            if not self._fill():
                line = bytes(self.buffer)
                self.buffer.clear()
                return line

    def read_some(self, size: int) -> bytes:
        """Between 1 and `size` bytes (fewer if that is what has arrived), or b"" at the end."""
        if not self.buffer and not self._fill(max(1, min(size, READ_CHUNK))):
            return b""
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    def unread(self, data: bytes) -> None:
        self.buffer[:0] = data

    def take_frame(self) -> bytes | None:
        """The next body when its whole frame has arrived in the usual shape (one Content-Length
        header, a body of at most READ_CHUNK bytes holding no frame break), else None having
        consumed nothing: `read_frame`'s checks then read it. Saves a request's header lines and
        chunked body their Python-level passes (`bench/bench_speed.py`)."""
        if not self.buffer and not self._fill():
            return None
        found = _USUAL_HEADER.match(self.buffer)
        if found is None:
            return None
        start = found.end()
        end = start + int(found.group(1))
        if end > len(self.buffer) or end - start > READ_CHUNK:
            return None
        body = bytes(self.buffer[start:end])
        if body.find(b"\r\n\r\n") >= 0:  # (not `in`: see `jsontext.dumps`)
            return None  # perhaps the start of the next frame: a lying length, left to `_read_body`
        del self.buffer[:end]
        return body


class LyingLength(Exception):
    """The body held the start of the next frame: its Content-Length was larger than the body."""


def read_frame(stream: Input, capper: StringCapper | None = None, resync: bool = False) -> bytes | bytearray | None:
    """The next message body, or None at end of stream. Raises FrameError on a broken header and
    LyingLength on a body that turned out to hold the next frame.

    With `resync`, lines are skipped until one ends with a `Content-Length` header: after a
    broken frame, reading resumes at the next good one, so the client can go on talking.
    """
    if not resync:
        body = stream.take_frame()
        if body is not None:
            return body
    length: int | None = None
    header_bytes = 0
    while True:
        line = stream.readline(MAX_HEADER_BYTES + 1)
        if not line:
            return None
        match = _CONTENT_LENGTH.search(line)
        if resync:
            if match is None:
                continue
            resync = False
        header_bytes += len(line)
        if header_bytes > MAX_HEADER_BYTES:
            raise FrameError("header too long")
        if line in (b"\r\n", b"\n"):
            if length is None:
                raise FrameError("message without Content-Length")
            break
        if match is not None:
            # Also found at the end of a line of junk: the leftover of a frame whose length lied.
            length = int(match.group(1))
            if length < 0 or length > MAX_BODY_BYTES:
                raise FrameError(f"Content-Length {length} out of range")
            continue
        name, sep, _value = line.decode("ascii", "replace").partition(":")
        if not sep or not name.strip() or " " in name.strip():
            raise FrameError(f"malformed header line {line[:80]!r}")
        if name.strip().lower() == "content-length":
            raise FrameError(f"bad Content-Length {line[:80]!r}")
    return _read_body(stream, length, capper or StringCapper())


def _read_body(stream: Input, length: int, capper: StringCapper) -> bytes | bytearray | None:
    """Read `length` bytes as they arrive: a lying Content-Length allocates nothing up front, a
    body that runs into the next frame is given up, and long string values are shortened as
    they stream past (bodies over MAX_STRING_BYTES only; such a body is the capper's own buffer,
    not a copy of it: issue #36)."""
    small = length <= MAX_STRING_BYTES
    body = bytearray()
    capper.reset()
    tail = b""
    remaining = length
    while remaining:
        chunk = stream.read_some(min(READ_CHUNK, remaining))
        if not chunk:
            return None
        window = tail + chunk
        if b"\r\n\r\n" in window:
            found = _NEXT_FRAME.search(window)
            if found is not None:
                stream.unread(window[found.start():])
                raise LyingLength(f"Content-Length {length} is longer than the message")
        tail = window[-_OVERLAP:]
        remaining -= len(chunk)
        if small:
            body += chunk
        else:
            capper.feed(chunk)
    return bytes(body) if small else capper.finish()


class StringCapper:
    """Copies a JSON text chunk by chunk, keeping only the head and tail of over-long strings.

    It only tracks where strings start and end (quotes not escaped by an odd run of
    backslashes); everything else is copied as it came, so invalid JSON stays invalid.
    """

    def __init__(self, limit: int = MAX_STRING_BYTES) -> None:
        self.head = limit // 2
        self.tail = limit - self.head
        self.reset()

    def reset(self) -> None:
        self.out = bytearray()
        self.in_string = False
        self.escaped = False  # the next byte of the string is escaped (a run split across chunks)
        self.start = 0  # where the current string's content starts in `out`
        self.size = 0  # bytes of the current string's content so far
        self.rest = bytearray()  # past the head: the latest bytes, the tail candidates
        self.exempt = False
        self.shortened: list[tuple[int, int]] = []  # (original size, kept size) per shortened string

    def feed(self, chunk: bytes) -> None:
        pos, end = 0, len(chunk)
        while pos < end:
            if not self.in_string:
                quote = chunk.find(b'"', pos)
                if quote < 0:
                    self.out += chunk[pos:]
                    return
                self.out += chunk[pos:quote + 1]
                self.in_string, self.escaped, self.size = True, False, 0
                self.start, self.exempt = len(self.out), False
                self.rest.clear()
                pos = quote + 1
                continue
            segment = pos
            if self.escaped:
                pos += 1
                self.escaped = False
            quote = chunk.find(b'"', pos)
            stop = quote if quote >= 0 else end
            run = 0
            while stop - run - 1 >= pos and chunk[stop - run - 1] == 0x5C:  # backslash
                run += 1
            if quote < 0:
                self._content(chunk[segment:end])
                self.escaped = run % 2 == 1
                return
            if run % 2 == 1:  # an escaped quote: part of the string
                self._content(chunk[segment:quote + 1])
                pos = quote + 1
                continue
            self._content(chunk[segment:quote])
            self._close()
            self.out += b'"'
            pos = quote + 1

    def _content(self, data: bytes) -> None:
        if not data:
            return
        room = self.head - self.size
        first_overflow = room >= 0
        self.size += len(data)
        if self.exempt or room >= len(data):
            self.out += data
            return
        if room > 0:
            self.out += data[:room]
        if first_overflow and self.out[self.start:self.start + 5] == b"data:":
            self.exempt = True  # the head (over 5 bytes) is in `out` by now
            self.out += data[max(room, 0):]
            return
        self.rest += data[max(room, 0):]
        if len(self.rest) > 2 * self.tail:
            del self.rest[:len(self.rest) - self.tail]

    def _close(self) -> None:
        self.in_string = False
        if self.exempt or not self.rest:
            return
        if self.size <= self.head + self.tail:
            self.out += self.rest
        else:
            head_end = _valid_end(self.out, self.start, len(self.out))
            del self.out[head_end:]
            tail = bytes(self.rest[-self.tail:])
            tail = tail[_valid_start(tail):]
            kept = (head_end - self.start) + len(tail)
            removed = self.size - kept
            self.out += rb"\n\u2026[ctxd: %d bytes removed while reading the request]\u2026\n" % removed  # JSON escapes
            self.out += tail
            self.shortened.append((self.size, kept))
        self.rest.clear()

    def finish(self) -> bytearray:
        """The body, handed over (its buffer, not a copy: a copy of a frame of tens of megabytes
        was the first of the peaks of issue #36)."""
        if self.in_string:  # an unterminated string: the JSON is broken anyway
            self.out += self.rest
        body = self.out
        self.out = bytearray()
        self.rest = bytearray()
        return body


def _valid_end(data: bytearray, start: int, end: int) -> int:
    """A cut point at or a little before `end` that splits neither an escape nor a UTF-8 char.
    The whole head is parsed: a run of backslashes can reach back arbitrarily far."""
    for cut in range(end, max(start, end - 16), -1):
        try:
            text = json.loads(b'"' + bytes(data[start:cut]) + b'"')
        except ValueError:
            continue
        if encodable(text):  # not between the halves of a surrogate pair
            return cut
    return end


def _valid_start(tail: bytes) -> int:
    for skip in range(0, min(16, len(tail))):
        try:
            text = json.loads(b'"' + tail[skip:] + b'"')
        except ValueError:
            continue
        if encodable(text):  # a cut inside `\ud83d\ude00` would leave half a pair
            return skip
    return 0

