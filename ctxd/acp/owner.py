"""The proxy's side of ctxd: its session's records and checkpoints, through the owner.

The proxy opens one session with the owner (`ownerlink.Session`, role "acp": the only kind of
session the owner lets write an `acp:` thread) in the background as soon as it starts, so the
first turn does not wait for an owner to start. Records go through a queue, in order, on a thread
of their own: passing a message never waits for the owner. Each is kept in the proxy's spool
until the owner answers it (`ctxd.acpspool`): while no owner can be reached the records wait,
and those still unanswered when the proxy ends are the next owner's to store. A checkpoint waits (it must exist
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
from typing import Any, NamedTuple

from ctxd import ownerlink
from ctxd.acpspool import Spool

CONNECT_WAIT_SECONDS = 5.0
"""A checkpoint waits this long for an owner still starting, then is taken here."""
CHECKPOINT_SECONDS = 20.0
"""At most this long for the owner's checkpoint (a first capture of a large tree), then one here."""
LOCAL_CHECKPOINT_SECONDS = 20.0
"""At most this long for a checkpoint taken here; past it the change goes on (the capture finishes alone)."""
RECORD_RETRY_SECONDS = 0.5
"""While no owner answers, a record is tried again this often (it waits in the spool meanwhile)."""
FOLDER_RETRIES = 40
"""A folder just added to the owner's session opens in the background: a record retries meanwhile."""
LOG_BYTES = 1024 * 1024
OPEN_WRITE_SECONDS = 1.0
"""A folder opened on a message's way (`session/new`) waits this long at most to be written to the owner."""
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


class Record(NamedTuple):
    """One `ctxd/acp/record` to send, and what to do with its answer."""

    folder: Path
    params: dict[str, Any]
    answered: Callable[[Any], None] | None


class NoOwner(OSError):
    """No owner's session to send on: none could be reached yet (the request was never sent)."""


def unicode_only(value: Any) -> Any:
    """`value` with each unpaired UTF-16 surrogate in its strings (`"\\ud83d"`: valid JSON, which an
    editor or agent cutting a string between the halves of a pair writes, but not Unicode) made
    U+FFFD: the owner refuses a message holding one, and a commit message cannot hold one."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # (halves of one pair that came apart, in two chunks, are joined again)
            return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
        return value
    if isinstance(value, dict):
        return {unicode_only(key): unicode_only(item) for key, item in value.items()}
    if isinstance(value, list):
        return [unicode_only(item) for item in value]
    return value


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
        self._disabled = os.environ.get("CTXD_OWNER") == "0"  # no owner is ever asked, nothing recorded
        # Records in order; an event: set once the records before it were sent; None: the end.
        self._records: queue.Queue[Record | threading.Event | None] = queue.Queue()
        self._seq = 0  # the last record's number
        self._submitting = threading.Lock()  # numbers given and records spooled in one order
        self.spool = Spool(state_dir, f"{os.getpid()}-{time.time_ns()}")
        self._spooling = True  # until the spool cannot be written
        threading.Thread(target=self._connect, name="ctxd-acp-owner", daemon=True).start()
        threading.Thread(target=self._work, name="ctxd-acp-records", daemon=True).start()

    def _connect(self) -> None:
        session: ownerlink.Session | None = None
        try:
            if self._disabled:
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
    def _open(session: ownerlink.Session, folder: Path, timeout: float = ownerlink.WRITE_SECONDS) -> None:
        session.notify("workspace/didChangeWorkspaceFolders",
                       {"event": {"added": [{"uri": folder.as_uri(), "name": folder.name}], "removed": []}}, timeout)

    def want(self, folder: Path) -> None:
        """Have the owner open `folder` (its tree watch starts: the first checkpoint is short)."""
        with self._lock:
            if folder in self._folders:
                return
            self._folders.add(folder)
            session = self._session
        if session is not None:  # on a message's way: a short wait (a request opens it again when it is not open)
            with contextlib.suppress(OSError):
                self._open(session, folder, OPEN_WRITE_SECONDS)

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

    # --- records: in order, kept until answered, never waited for ---

    def submit(self, folder: Path, params: dict[str, Any], answered: Callable[[Any], None] | None = None) -> None:
        """Send `params` as `ctxd/acp/record` about `folder`, after the records submitted before
        it, numbered and kept in the spool first; `answered(answer)` once the owner answered.
        Nothing with CTXD_OWNER=0 (nothing is recorded)."""
        if self._disabled:
            return
        params = unicode_only(params)
        with self._submitting:
            self._seq += 1
            params = {**params, "proxy": self.spool.proxy, "seq": self._seq}
            if self._spooling:
                try:
                    self.spool.append(folder, params)
                except OSError as error:  # sent all the same; lost only if no owner takes it
                    self._spooling = False
                    log(self.state_dir, f"records are not kept on disk ({describe(error)})")
            self._records.put(Record(folder, params, answered))

    def _work(self) -> None:
        while True:
            record = self._records.get()
            try:
                if record is None:
                    return
                if isinstance(record, threading.Event):
                    record.set()
                    continue
                answer = self._send(record)
                if record.answered is not None and answer is not None:
                    record.answered(answer)
            except Exception as error:  # noqa: BLE001 - fail open: logged
                log(self.state_dir, f"recording failed: {describe(error)}")
            finally:
                self._records.task_done()

    def _send(self, record: Record) -> Any:
        """The owner's answer to one record; while no owner can be reached it is tried again (the
        records after it wait their turn). None when the owner refused it."""
        thread, seq = record.params["thread"], record.params["seq"]
        waiting = False
        while True:
            try:
                answer = self.request(record.folder, "ctxd/acp/record", record.params, 30.0)
                break
            except NoOwner:
                pass
            except ownerlink.RemoteError as error:
                log(self.state_dir, f"{thread}: the owner refused a record ({error.message})")
                answer = None
                break
            except (OSError, TimeoutError) as error:  # sent again: the owner stores it once (its number)
                log(self.state_dir, f"{thread}: a record is sent again ({describe(error)})")
            if not waiting:
                waiting = True
                log(self.state_dir, f"{thread}: no owner to record to: the records wait"
                                    + (f" (kept in {self.spool.path})" if self._spooling else ""))
            time.sleep(RECORD_RETRY_SECONDS)
        self.spool.answered(seq)
        return answer

    def drain(self, timeout: float) -> None:
        """Let the records already queued go (the proxy is ending), for at most `timeout`; those
        left stay in the spool for the next owner."""
        done = threading.Event()
        self._records.put(done)
        done.wait(timeout)
        if self.spool.waiting:
            log(self.state_dir, f"{self.spool.waiting} records not answered yet: the next owner stores them "
                                f"from {self.spool.path}")

    def close(self) -> None:
        self._records.put(None)
        self.spool.close()
        if self._session is not None:
            with contextlib.suppress(Exception):
                self._session.close()

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

    def _request_on(self, session: ownerlink.Session, folder: Path, method: str, params: dict[str, Any],
                    timeout: float) -> Any:
        for attempt in range(FOLDER_RETRIES):
            try:
                return session.request(method, {"workspace": folder.as_uri(), **params}, timeout)
            except ownerlink.RemoteError as error:
                if "not an open workspace folder" not in error.message or attempt == FOLDER_RETRIES - 1:
                    raise
                if attempt == 0:  # (its opening may not have been written: the owner was not reading)
                    self._open(session, folder, timeout)
                time.sleep(0.05)
        raise OSError("unreachable")

    # --- checkpoints: waited for, with bounds ---

    def checkpoint(self, folder: Path, params: dict[str, Any]) -> str | None:
        """A checkpoint of `folder` (params: thread, trigger, message, turn, tool) before a change:
        by the owner, else here. The commit's id, or None (none taken; the reason is logged)."""
        params = unicode_only(params)
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
