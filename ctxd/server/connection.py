"""A client's connection: where the server reads messages and writes frames, given to it when it
is built (rust-analyzer's `lsp-server` `Connection` is the model).

`StreamConnection` is a pair of byte streams (stdio, or an authenticated TCP socket): frames come
off the transport (`transport.py`) and are decoded (`codec.py`) on the reading thread.
`memory()` gives a connection whose other end is a `MemoryClient` in the same process: the same
codec, the same server, no process and no pipe, for tests that drive `dispatch` directly.
"""

from __future__ import annotations

import io
import json
import logging
import os
import queue
from collections.abc import Callable
from typing import Any, BinaryIO

from ctxd import redact
from ctxd.errors import ParseError
from ctxd.server.bigframe import parse_frame
from ctxd.server.codec import Incoming, Rejected, Shortened
from ctxd.server.events import FrameWriter
from ctxd.server.memory import after_reading
from ctxd.server.transport import FrameError, Input, LockedWriter, LyingLength, StringCapper, read_frame

log = logging.getLogger(__name__)

Deliver = Callable[[Incoming, int], None]
"""`dispatch`: a message (or what to answer instead) and its body's length in bytes."""


class Prefixed(io.RawIOBase):
    """The bytes a client already read (a TCP session's `initialize`, checked for its token; an
    editor's, read to find its state dir), then the rest of the stream."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self.head, self.rest = head, rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.head:
            count = min(len(buffer), len(self.head))
            buffer[:count] = self.head[:count]
            self.head = self.head[count:]
            return count
        read1 = getattr(self.rest, "read1", None)
        data = read1(len(buffer)) if read1 is not None else self.rest.read(len(buffer))  # what has arrived
        buffer[:len(data)] = data
        return len(data)


def with_head(head: bytes, stream: BinaryIO) -> BinaryIO:
    return io.BufferedReader(Prefixed(head, stream)) if head else stream


class Connection:
    """Messages in (`receive`), frames out (`writer`), and what `exit` does to the session."""

    writer: FrameWriter

    def __init__(self) -> None:
        self.closed = False
        self.exit_code: int | None = None  # set by `exit`

    def receive(self, deliver: Deliver) -> None:
        """Hand every incoming message to `deliver`, in order, until the client leaves."""
        raise NotImplementedError

    def exit(self, code: int) -> None:
        """The client sent `exit`: stop receiving (the process, the socket: see the subclasses)."""
        self.exit_code = code
        self.closed = True


class StreamConnection(Connection):
    """A pair of byte streams. By default `exit` ends the process at once: the reading thread may
    be inside a buffered read, and an interpreter shutdown with a thread there aborts. A TCP
    session passes `on_exit` to close its socket instead."""

    def __init__(self, reader: BinaryIO, writer: BinaryIO, on_exit: Callable[[int], None] = os._exit) -> None:
        super().__init__()
        self.reader = reader
        self.writer = LockedWriter(writer)
        self.on_exit = on_exit

    def receive(self, deliver: Deliver) -> None:
        """Nothing a client sends ends the session but the end of the stream: a broken frame is
        answered with a parse error (id null) and reading resumes at the next good frame."""
        source = Input(self.reader)
        capper = StringCapper()
        resync = False
        while not self.closed:
            try:
                body = read_frame(source, capper, resync)
                resync = False
            except (FrameError, LyingLength) as error:
                log.warning("bad frame: %s", error)  # (the log's own filter takes keys out)
                deliver(Rejected(ParseError(f"Parse error: {redact.redact(str(error))}")), 0)
                resync = isinstance(error, FrameError)
                continue
            if body is None:
                return
            if capper.shortened:
                deliver(Shortened(capper.shortened), 0)
                capper.shortened = []
            size = len(body)
            after_reading(size)  # a huge frame: the reading's buffers go back before its items' texts are made
            message = parse_frame(body)  # (a huge body is emptied as it is read: bigframe.py)
            del body  # a large frame's bytes are freed before its request runs
            after_reading(size)  # and the decoding's, before its rows are made
            deliver(message, size)
            del message  # not held while the next frame is awaited: a huge request is freed once answered

    def exit(self, code: int) -> None:
        super().exit(code)
        self.on_exit(code)


_END = object()


class _Queued:
    """A memory connection's writer: each frame is decoded as the client would (strict JSON)."""

    def __init__(self, to_client: queue.Queue[Any]) -> None:
        self.to_client = to_client

    def write_message(self, body: list[bytes]) -> None:
        self.to_client.put(json.loads(b"".join(body), parse_constant=_not_strict))


def _not_strict(name: str) -> None:
    raise ValueError(f"the server sent {name}, which strict JSON does not have")


class MemoryConnection(Connection):
    """The server's end of `memory()`: bodies from the client are decoded by the codec, frames to
    the client are read back as JSON."""

    def __init__(self, from_client: queue.Queue[Any], to_client: queue.Queue[Any]) -> None:
        super().__init__()
        self.from_client = from_client
        self.writer = _Queued(to_client)

    def receive(self, deliver: Deliver) -> None:
        while not self.closed:
            body = self.from_client.get()
            if body is _END:
                return
            size = len(body)
            deliver(parse_frame(body), size)


class MemoryClient:
    """The client's end of `memory()`: send messages, take the server's in the order written."""

    def __init__(self, to_server: queue.Queue[Any], from_server: queue.Queue[Any]) -> None:
        self.to_server = to_server
        self.from_server = from_server

    def send(self, message: dict[str, Any] | bytes) -> None:
        """A message (or a body's raw bytes, to send what is not JSON)."""
        self.to_server.put(message if isinstance(message, bytes) else json.dumps(message).encode("utf-8"))

    def receive(self, timeout: float) -> dict[str, Any]:
        """The server's next message; queue.Empty when none came within `timeout` seconds."""
        message: dict[str, Any] = self.from_server.get(timeout=timeout)
        return message

    def close(self) -> None:
        """The end of the stream, as when an editor's pipe closes."""
        self.to_server.put(_END)


def memory() -> tuple[MemoryConnection, MemoryClient]:
    """A connected pair: the server's end and the client's."""
    to_server: queue.Queue[Any] = queue.Queue()
    to_client: queue.Queue[Any] = queue.Queue()
    return MemoryConnection(to_server, to_client), MemoryClient(to_server, to_client)
