"""The order requests run in: one lane per (workspace, thread), a few lanes per workspace at once.

A client may pipeline `record, record, usage` on a thread and expects the answers to describe the
ledger in that order, so requests with the same key run one at a time, in arrival order. Lanes of
one workspace serialise on its lock anyway; capping how many hold a worker at once keeps a
workspace whose database is locked by another process (each request waits up to the store's bound)
from taking every worker while other workspaces wait.

A request goes from the thread that read it straight to a worker, which keeps running its lane's
next jobs without handing them back: one thread switch per request, none per queued one.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import Executor

log = logging.getLogger(__name__)

Job = Callable[[], None]
Key = tuple[Hashable, Hashable]  # (group, lane): (workspace, thread)


class Lanes:
    """Runs jobs on `executor`: jobs of one key in order, one at a time; at most `per_group` keys
    of one group at once (the others wait their turn, round robin)."""

    def __init__(self, executor: Executor, per_group: int) -> None:
        self.executor = executor
        self.per_group = per_group
        self._lock = threading.Lock()
        self._queues: dict[Key, deque[Job]] = {}  # a key is here while it has jobs queued or running
        self._running: dict[Hashable, int] = {}  # per group: keys holding a worker
        self._waiting: dict[Hashable, deque[Key]] = {}  # per group: keys with jobs but no worker
        self._closed = False

    def close(self) -> None:
        """Drop every job not yet started (the client left): running ones finish, no more start."""
        with self._lock:
            self._closed = True
            for queue in self._queues.values():
                while len(queue) > 1:  # the first one may be running: it leaves when done
                    queue.pop()
            self._waiting.clear()

    def busy(self, key: Key) -> bool:
        """Whether a job of `key` is queued or running (so an answer given elsewhere would overtake it)."""
        return key in self._queues

    def submit(self, key: Key, job: Job) -> None:
        group = key[0]
        with self._lock:
            if self._closed:
                return
            queue = self._queues.get(key)
            if queue is not None:
                queue.append(job)  # its worker (or its turn) takes it after the ones before
                return
            self._queues[key] = deque([job])
            if self._running.get(group, 0) >= self.per_group:
                self._waiting.setdefault(group, deque()).append(key)
                return
            self._running[group] = self._running.get(group, 0) + 1
        self.executor.submit(self._drain, key)

    def _drain(self, key: Key) -> None:
        """On a worker: run `key`'s jobs, and those of keys of the same group waiting for a worker."""
        group = key[0]
        while True:
            with self._lock:
                job = self._queues[key][0]  # stays queued while it runs: `busy` and `submit` see it
            try:
                job()
            except Exception:  # noqa: BLE001 - a job reports its own errors; never lose the lane
                log.exception("a request failed outside its handler")
            with self._lock:
                queue = self._queues[key]
                queue.popleft()
                waiting = self._waiting.get(group)
                if queue and waiting:  # others wait for a worker: take turns
                    waiting.append(key)
                if not queue:
                    del self._queues[key]
                if waiting:
                    key = waiting.popleft()
                    if not waiting:
                        del self._waiting[group]
                elif not queue:
                    left = self._running[group] - 1
                    if left:
                        self._running[group] = left
                    else:
                        del self._running[group]
                    return


class Backlog:
    """Requests read but not answered yet, bounded in count and bytes: past the bound the reading
    thread waits for answers to go out, so a client that sends faster than it reads its answers
    fills its own pipe, not the daemon's memory. One request is always let in, however large."""

    def __init__(self, max_requests: int, max_bytes: int) -> None:
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self._changed = threading.Condition()
        self._count = 0
        self._bytes = 0

    def admit(self, size: int) -> None:
        with self._changed:
            while self._count and (self._count >= self.max_requests or self._bytes + size > self.max_bytes):
                self._changed.wait()
            self._count += 1
            self._bytes += size

    def done(self, size: int) -> None:
        with self._changed:
            self._count -= 1
            self._bytes -= size
            self._changed.notify()
