"""The proxy's side of ctxd: its session's records and checkpoints, through the owner.

The proxy opens one session with the owner (`ownerlink.Session`, role "acp": the only kind of
session the owner lets write an `acp:` thread) in the background as soon as it starts, so the
first turn does not wait for an owner to start. Records go through a queue, in order, on a thread
of their own: passing a message never waits for the owner. A checkpoint waits (it must exist
before the change), with bounds: when no owner answers in time it is taken in this process
(`ctxd.ghost.checkpoint`, as a hook alone does), and past its bound the proxy goes on without it.
Whatever fails here is logged (`<state dir>/acp/proxy.log`) and never reaches the editor or the
agent.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ctxd import ownerlink

CONNECT_WAIT_SECONDS = 5.0
"""A checkpoint waits this long for an owner still starting, then is taken here."""
CHECKPOINT_SECONDS = 20.0
"""At most this long for the owner's checkpoint (a first capture of a large tree), then one here."""
LOCAL_CHECKPOINT_SECONDS = 20.0
"""At most this long for a checkpoint taken here; past it the change goes on (the capture finishes alone)."""
RECORD_SECONDS = 30.0
"""A record waits this long for an owner that is starting (one died, a new one is slow), then is dropped (logged)."""
RECORD_RETRY_SECONDS = 0.5
FOLDER_RETRIES = 40
"""A folder just added to the owner's session opens in the background: a record retries meanwhile."""
LOG_BYTES = 1024 * 1024
RECONNECT_SECONDS = 10.0
"""After the owner's session ends (the owner died), a new one is tried at most this often."""


def log(state_dir: Path, message: str) -> None:
    """One line in the proxy's log, API keys taken out (a label holds a prompt's first words); a
    log that cannot be written is nobody's problem."""
    try:
        from ctxd import acplink
        from ctxd.logs import RedactSecrets

        message = RedactSecrets().redact(message)

        path = acplink.folder(state_dir) / "proxy.log"
        with contextlib.suppress(OSError):
            if path.stat().st_size > LOG_BYTES:
                os.replace(path, path.with_suffix(".log.1"))
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as handle:
            handle.write(f"{stamp} [{os.getpid()}] {message}\n")
    except (OSError, ValueError):
        pass


class NoOwner(OSError):
    """No owner's session to send on: none could be reached yet (the request was never sent)."""


def describe(error: BaseException) -> str:
    message = getattr(error, "message", None) or str(error) or type(error).__name__
    return f"{type(error).__name__}: {message}"


class Owner:
    """The owner as the proxy sees it: a session opened once, in the background."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self._session: ownerlink.Session | None = None
        self._folders: set[Path] = set()
        self._ready = threading.Event()  # the attempt to open it ended (with or without a session)
        self._lock = threading.Lock()
        self._tried = float("-inf")  # when a session was last opened again
        self._disabled = False  # CTXD_OWNER=0: no owner is ever asked
        self._jobs: queue.Queue[tuple[Callable[[], None]] | None] = queue.Queue()
        threading.Thread(target=self._connect, name="ctxd-acp-owner", daemon=True).start()
        threading.Thread(target=self._work, name="ctxd-acp-records", daemon=True).start()

    def _connect(self) -> None:
        session: ownerlink.Session | None = None
        try:
            if os.environ.get("CTXD_OWNER") == "0":
                self._disabled = True
                log(self.state_dir, "CTXD_OWNER=0: no owner; checkpoints are taken here, nothing is recorded")
                return
            session = ownerlink.Session.open(self.state_dir, [], role="acp")
            if session is None:
                log(self.state_dir, f"no owner of {self.state_dir} could be reached: checkpoints are taken "
                                    "here, the session is not recorded")
                return
            with self._lock:
                self._session = session
                folders = sorted(self._folders)
            for folder in folders:
                self._open(session, folder)
        except Exception as error:  # noqa: BLE001 - fail open: logged
            log(self.state_dir, f"opening a session with the owner failed: {describe(error)}")
        finally:
            self._ready.set()

    @staticmethod
    def _open(session: ownerlink.Session, folder: Path) -> None:
        session.notify("workspace/didChangeWorkspaceFolders",
                       {"event": {"added": [{"uri": folder.as_uri(), "name": folder.name}], "removed": []}})

    def want(self, folder: Path) -> None:
        """Have the owner open `folder` (its tree watch starts: the first checkpoint is short)."""
        with self._lock:
            if folder in self._folders:
                return
            self._folders.add(folder)
            session = self._session
        if session is not None:
            with contextlib.suppress(OSError):
                self._open(session, folder)

    def session(self, folder: Path, wait: float) -> ownerlink.Session | None:
        """The owner's session with `folder` open (added when new), or None. A session the owner
        ended (it died), or none at all once an attempt to open one ended without (no owner could
        be reached), is tried again, with the folders opened again: at most every RECONNECT_SECONDS."""
        self.want(folder)
        self._ready.wait(wait)
        with self._lock:
            session = self._session
            if session is not None and not session.closed:
                return session
            if self._disabled or not self._ready.is_set() or time.monotonic() - self._tried < RECONNECT_SECONDS:
                return None  # an attempt is under way, or one was made a moment ago
            self._session, self._tried = None, time.monotonic()
            self._ready.clear()
        log(self.state_dir, "no session with the owner (it ended, or none was reached): opening another")
        threading.Thread(target=self._connect, name="ctxd-acp-owner", daemon=True).start()
        self._ready.wait(wait)
        return self._session

    # --- records: in order, never waited for ---

    def submit(self, job: Callable[[], None]) -> None:
        self._jobs.put((job,))

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                job[0]()
            except Exception as error:  # noqa: BLE001 - fail open: logged
                log(self.state_dir, f"recording failed: {describe(error)}")
            finally:
                self._jobs.task_done()

    def request(self, folder: Path, method: str, params: dict[str, Any], timeout: float) -> Any:
        """A request about `folder`'s workspace; retried while the folder is still opening, and
        once on a new session when the owner ended the one it was sent on (it died).
        Raises NoOwner when there is no owner's session, OSError, ownerlink.RemoteError, TimeoutError."""
        for attempt in (0, 1):
            session = self.session(folder, CONNECT_WAIT_SECONDS)
            if session is None:
                raise NoOwner("no owner")
            try:
                return self._request_on(session, folder, method, params, timeout)
            except TimeoutError:
                raise  # the owner is there, and slow: not sent again
            except OSError:
                seen = time.monotonic() + 1.0  # a write can fail before the reader sees the end
                while not session.closed and time.monotonic() < seen:
                    time.sleep(0.02)
                if attempt or not session.closed:
                    raise
        raise OSError("unreachable")

    @staticmethod
    def _request_on(session: ownerlink.Session, folder: Path, method: str, params: dict[str, Any],
                    timeout: float) -> Any:
        for attempt in range(FOLDER_RETRIES):
            try:
                return session.request(method, {"workspace": folder.as_uri(), **params}, timeout)
            except ownerlink.RemoteError as error:
                if "not an open workspace folder" not in error.message or attempt == FOLDER_RETRIES - 1:
                    raise
                time.sleep(0.05)
        raise OSError("unreachable")

    def record(self, folder: Path, params: dict[str, Any]) -> Any:
        """`ctxd/acp/record` on the records' thread: while no owner can be reached (one died and
        the next is starting) it is sent again, for up to RECORD_SECONDS, the records after it
        waiting their turn (their order is kept). Raises as `request`."""
        deadline = time.monotonic() + RECORD_SECONDS
        while True:
            try:
                return self.request(folder, "ctxd/acp/record", params, 30.0)
            except NoOwner:
                if self._disabled or time.monotonic() >= deadline:
                    raise
                time.sleep(RECORD_RETRY_SECONDS)

    def drain(self, timeout: float) -> None:
        """Let the records already queued land (the proxy is ending), for at most `timeout`."""
        done = threading.Event()
        self._jobs.put((done.set,))
        done.wait(timeout)

    def close(self) -> None:
        self._jobs.put(None)
        if self._session is not None:
            with contextlib.suppress(Exception):
                self._session.close()

    # --- checkpoints: waited for, with bounds ---

    def checkpoint(self, folder: Path, params: dict[str, Any]) -> str | None:
        """A checkpoint of `folder` (params: thread, trigger, message, turn, tool) before a change:
        by the owner, else here. The commit's id, or None (none taken; the reason is logged)."""
        started = time.monotonic()
        try:
            answer = self.request(folder, "ctxd/acp/checkpoint", params, CHECKPOINT_SECONDS)
            if isinstance(answer, dict) and answer.get("skipped"):
                log(self.state_dir, f"{params['thread']}: {answer['skipped']}: no checkpoint")
                return None
            commit_id = answer.get("id") if isinstance(answer, dict) else None
            log(self.state_dir, f"{params['thread']}: checkpoint {str(commit_id)[:12]} ({params['trigger']}) by the "
                                f"owner in {(time.monotonic() - started) * 1000:.0f} ms: {params['message']}")
            return str(commit_id) if commit_id else None
        except (OSError, TimeoutError, ownerlink.RemoteError) as error:
            log(self.state_dir, f"{params['thread']}: the owner took no checkpoint ({describe(error)}): taking it here")
        return self._local_checkpoint(folder, params)

    def _local_checkpoint(self, folder: Path, params: dict[str, Any]) -> str | None:
        taken: list[str] = []

        def take() -> None:
            try:
                from ctxd.ghost.checkpoint import Job
                from ctxd.ghost.checkpoint import take as take_job

                job = Job(folder, self.state_dir, params["thread"], params["trigger"], turn=params.get("turn"),
                          tool=params.get("tool"), message=params["message"])
                outcome = take_job(job, log=lambda line: log(self.state_dir, line))
                if outcome.commit is not None:
                    taken.append(str(outcome.commit["id"]))
            except Exception as error:  # noqa: BLE001 - fail open: logged
                log(self.state_dir, f"{params['thread']}: no checkpoint: {describe(error)}")

        worker = threading.Thread(target=take, name="ctxd-acp-checkpoint", daemon=True)
        worker.start()
        worker.join(LOCAL_CHECKPOINT_SECONDS)
        if worker.is_alive():
            log(self.state_dir, f"{params['thread']}: the checkpoint goes on after the change was let through "
                                f"(over {LOCAL_CHECKPOINT_SECONDS:g} s)")
        return taken[0] if taken else None
