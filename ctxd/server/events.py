"""A keyed throttle for push notifications.

A gauge needs the latest value, not every value: per key, at most one send per interval, and the
last value offered always goes out (a trailing send is scheduled when values arrive too fast).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Hashable

Scheduler = Callable[[float, Callable[[], None]], None]


def thread_timer(delay: float, fn: Callable[[], None]) -> None:
    timer = threading.Timer(delay, fn)
    timer.daemon = True
    timer.start()


class Throttle:
    def __init__(self, send: Callable[[Hashable, Any], None], interval: float = 0.1,
                 schedule: Scheduler = thread_timer, clock: Callable[[], float] = time.monotonic) -> None:
        self._send = send
        self._interval = interval
        self._schedule = schedule
        self._clock = clock
        self._lock = threading.Lock()
        self._last_sent: dict[Hashable, float] = {}
        self._pending: dict[Hashable, Any] = {}

    def offer(self, key: Hashable, value: Any) -> None:
        with self._lock:
            now = self._clock()
            wait = self._last_sent.get(key, float("-inf")) + self._interval - now
            if key in self._pending:
                self._pending[key] = value  # a trailing send is already scheduled: it takes this value
                return
            if wait > 0:
                self._pending[key] = value
                self._schedule(wait, lambda: self._flush(key))
                return
            self._last_sent[key] = now
        self._send(key, value)

    def flush(self, key: Hashable) -> None:
        """Send a pending value now, e.g. when a notification that must follow it is about to go."""
        self._flush(key)

    def _flush(self, key: Hashable) -> None:
        with self._lock:
            if key not in self._pending:
                return
            value = self._pending.pop(key)
            self._last_sent[key] = self._clock()
        self._send(key, value)
