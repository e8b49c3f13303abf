"""What the server pushes to the client: the outbox every reply and notification goes through, and
a keyed throttle for usage pushes.

A gauge needs the latest value, not every value: per key, at most one send per interval, and the
last value offered always goes out (a trailing send is scheduled when values arrive too fast).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Generic, Protocol, TypeVar

from ctxd import redact
from ctxd.errors import CtxdError, InternalError
from ctxd.protocol import methods
from ctxd.server.codec import encode, encode_parts, error_body

log = logging.getLogger(__name__)

Scheduler = Callable[[float, Callable[[], None]], None]
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def thread_timer(delay: float, fn: Callable[[], None]) -> None:
    timer = threading.Timer(delay, fn)
    timer.daemon = True
    timer.start()


class Throttle(Generic[K, V]):
    def __init__(self, send: Callable[[K, V], None], interval: float = 0.1,
                 schedule: Scheduler = thread_timer, clock: Callable[[], float] = time.monotonic) -> None:
        self._send = send
        self._interval = interval
        self._schedule = schedule
        self._clock = clock
        self._lock = threading.Lock()
        self._last_sent: dict[K, float] = {}
        self._pending: dict[K, V] = {}

    def offer(self, key: K, value: V) -> None:
        with self._lock:
            if key in self._pending:
                self._pending[key] = value  # a trailing send is already scheduled: it takes this value
                return
            now = self._clock()
            wait = self._last_sent.get(key, float("-inf")) + self._interval - now
            if wait > 0:
                self._pending[key] = value
                self._schedule(wait, lambda: self._flush(key))
                return
            self._last_sent[key] = now
            if len(self._last_sent) > 1024:  # a send older than the interval delays nothing
                self._last_sent = {k: t for k, t in self._last_sent.items() if t + self._interval > now}
        self._send(key, value)

    def flush(self, key: K) -> None:
        """Send a pending value now, e.g. when a notification that must follow it is about to go."""
        self._flush(key)

    def _flush(self, key: K) -> None:
        with self._lock:
            if key not in self._pending:
                return
            value = self._pending.pop(key)
            self._last_sent[key] = self._clock()
        self._send(key, value)


class FrameWriter(Protocol):
    """Where a connection's frames go (`transport.LockedWriter`, or a memory connection's queue)."""

    def write_message(self, body: list[bytes]) -> None: ...


class Notifier(Protocol):
    """What sends notifications: one client's outbox, or every client's (`daemon.Broadcast`)."""

    def notify(self, method: str, params: dict[str, Any]) -> None: ...

    def show_message(self, message: str, kind: int = methods.MESSAGE_WARNING) -> None: ...

    def progress(self, token: int | str | None, value: dict[str, Any]) -> None: ...


class Outbox:
    """Everything the server sends: replies and notifications, from any thread, one whole frame
    at a time, always strict JSON (a reply that cannot be encoded becomes an error reply)."""

    def __init__(self, writer: FrameWriter) -> None:
        self.writer = writer
        self._last_result: tuple[Any, bytes] | None = None  # see `reply_repeated`

    def send(self, message: dict[str, Any]) -> None:
        try:
            body = encode_parts(message)
            if "result" not in message and redact.secrets():
                # Errors and notifications carry text made of other text (an endpoint's error, a
                # fallback reason): the configured API key never goes out in them, whatever its shape.
                body = [redact.redact(b"".join(body).decode("utf-8")).encode("utf-8")]
        except (TypeError, ValueError):
            log.exception("could not encode a message to the client")
            if "id" not in message:
                return
            body = [error_body(message["id"], InternalError("Internal error: the reply could not be encoded"))]
        self.writer.write_message(body)

    def reply(self, msg_id: Any, result: Any) -> None:
        self.send({"jsonrpc": "2.0", "id": msg_id, "result": result})

    def reply_repeated(self, msg_id: Any, result: Mapping[str, object]) -> None:
        """A reply whose result is often the very object sent last time (the gauge's breakdown,
        polled while nothing changed): its JSON is encoded once. Only the reader thread calls this."""
        last = self._last_result
        if last is None or last[0] is not result:
            try:
                last = self._last_result = (result, encode(result))
            except (TypeError, ValueError):
                self.reply(msg_id, result)  # reports the failure as `reply` does
                return
        msg_id_json = b"%d" % msg_id if isinstance(msg_id, int) else encode(msg_id)
        self.writer.write_message([b'{"jsonrpc":"2.0","id":%s,"result":%s}' % (msg_id_json, last[1])])

    def fail(self, msg_id: Any, error: CtxdError) -> None:
        """The error reply for `error`: its code from the table in `ctxd/errors.py`."""
        fields: dict[str, Any] = {"code": int(error.code), "message": error.message}
        if error.data is not None:
            fields["data"] = error.data
        self.send({"jsonrpc": "2.0", "id": msg_id, "error": fields})

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def show_message(self, message: str, kind: int = methods.MESSAGE_WARNING) -> None:
        self.notify(methods.SHOW_MESSAGE, {"type": kind, "message": message})

    def progress(self, token: int | str | None, value: dict[str, Any]) -> None:
        if token is not None:
            self.notify(methods.PROGRESS, {"token": token, "value": value})


class SlowWarning:
    """Calls `warn` once when an operation runs past `seconds`: from a timer while it runs, or at
    `finish` if the timer had no chance to (so a threshold of 0 is still deterministic)."""

    def __init__(self, seconds: float, warn: Callable[[], None]) -> None:
        self.seconds, self.warn = seconds, warn
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.sent = False
        self.timer = threading.Timer(seconds, self.fire)
        self.timer.daemon = True
        self.timer.start()

    def fire(self) -> None:
        with self.lock:
            if self.sent:
                return
            self.sent = True
        self.warn()

    def finish(self) -> None:
        self.timer.cancel()
        if time.monotonic() - self.started >= self.seconds:
            self.fire()


class CompactionEvents:
    """What a compaction tells the client (ctxd.compact.run.Events), sent through the outbox."""

    def __init__(self, outbox: Notifier, throttle: Throttle[tuple[str, str], dict[str, Any]]) -> None:
        self.outbox, self.throttle = outbox, throttle

    def usage_now(self, uri: str, thread: str) -> None:
        self.throttle.flush((uri, thread))

    def compacted(self, params: dict[str, Any]) -> None:
        self.outbox.notify(methods.COMPACTED, params)

    def warn(self, message: str) -> None:
        self.outbox.show_message(message, methods.MESSAGE_WARNING)

    def progress(self, token: int | str | None, value: dict[str, Any]) -> None:
        self.outbox.progress(token, value)
