"""LSP base-protocol framing over byte streams, hardened for a long-running daemon.

pygls' own stdio loop reads with the same thread pool that runs handlers (a few slow compactions
would stall reading), structures every nested JSON object that happens to carry a `jsonrpc` key,
and answers malformed frames with nothing. This loop reads on a thread of its own, parses only
the top-level message, answers parse errors with -32700, and writes frames under a lock so that
worker threads can notify safely.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import BinaryIO, Callable

log = logging.getLogger("ctxd.transport")

MAX_HEADER_BYTES = 8192
MAX_BODY_BYTES = 512 * 1024 * 1024


class FrameError(Exception):
    """The byte stream cannot be read as LSP frames any more (bad header): the session ends."""


class LockedWriter:
    """pygls' writer interface; `write` gets a whole frame and sends it in one piece."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def write(self, data: bytes) -> None:
        with self._lock:
            self._stream.write(data)
            self._stream.flush()

    def close(self) -> None:
        with self._lock:
            try:
                self._stream.close()
            except OSError:
                pass


def frame(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


def read_frame(stream: BinaryIO) -> bytes | None:
    """The next message body, or None at end of stream. Raises FrameError on a broken header."""
    length: int | None = None
    header_bytes = 0
    while True:
        line = stream.readline(MAX_HEADER_BYTES + 1)
        if not line:
            return None
        header_bytes += len(line)
        if header_bytes > MAX_HEADER_BYTES:
            raise FrameError("header too long")
        if line in (b"\r\n", b"\n"):
            if length is None:
                raise FrameError("message without Content-Length")
            break
        name, sep, value = line.decode("ascii", "replace").partition(":")
        if not sep:
            raise FrameError(f"malformed header line {line[:80]!r}")
        if name.strip().lower() == "content-length":
            try:
                length = int(value.strip())
            except ValueError:
                raise FrameError(f"bad Content-Length {value.strip()[:40]!r}") from None
            if length < 0 or length > MAX_BODY_BYTES:
                raise FrameError(f"Content-Length {length} out of range")
    body = stream.read(length)
    if body is None or len(body) < length:
        return None
    return body


def error_response(msg_id: object, code: int, message: str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}).encode()


def reader_loop(stream: BinaryIO, writer: LockedWriter, deliver: Callable[[dict], None]) -> None:
    """Read frames until end of stream; hand each well-formed JSON object to `deliver`."""
    while True:
        try:
            body = read_frame(stream)
        except FrameError as error:
            log.error("closing the connection: %s", error)
            writer.write(frame(error_response(None, -32700, f"Parse error: {error}")))
            return
        if body is None:
            return
        try:
            message = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
            writer.write(frame(error_response(None, -32700, f"Parse error: {error}")))
            continue
        if not isinstance(message, dict):
            writer.write(frame(error_response(None, -32600, "Invalid Request: a message must be a JSON object")))
            continue
        deliver(message)
