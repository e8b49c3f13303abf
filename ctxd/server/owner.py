"""`ctxd owner`: the one process per user and state dir that writes (docs/processes.md).

It is the daemon (`daemon.Daemon`: the open workspaces, the workers, the followed sessions, the
tree watches, what the hooks hand over) serving every ctxd process of the user through
`ctxd.ownerlink`'s socket. A connection's first line says what it wants:

- `session`: an LSP session. An editor's `ctxd` passes its stdin and stdout along (SCM_RIGHTS)
  and waits: the owner reads and writes the editor's own pipes, so no byte is relayed, and tells
  the waiting process the session's exit code at its end (`{"exit": code}`). A connection that
  passes no descriptors is itself the session's stream (`ctxd mcp`, `ctxd acp`, the CLI). `head`
  holds what the client already read of the stream (the editor's `initialize`, read to find the
  state dir).
- `checkpoint`: a hook's job (`ctxd.ghost.checkpoint.Job`), taken with the folder's tree watch, so
  the capture re-checks only what changed since the last one (a hook alone would read every
  file's stat data). A folder no editor has open is kept (watched) for the hooks until no job came
  for `idle` seconds. The answer is the commit, or why not.
- `ping`: the owner's pid and version.

It leaves when no session is attached and nothing asked for it for `idle` seconds
(`CTXD_OWNER_IDLE_SECONDS`, default 600, counted from the last session's end or the last
request), when its state dir is removed, or on SIGTERM. One runs per state dir (a lock held
while it runs); a crash releases the lock, and the next client starts another.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, cast

from ctxd import __version__, ownerlink
from ctxd.hookio import log as log_hook
from ctxd.server.app import CtxdServer
from ctxd.server.connection import StreamConnection, with_head
from ctxd.server.daemon import Daemon
from ctxd.settings import env_seconds

if TYPE_CHECKING:
    from ctxd.ghost.checkpoint import Job, Outcome
    from ctxd.ghost.treewatch import TreeWatch
    from ctxd.settings import Settings

log = logging.getLogger(__name__)

IDLE_SECONDS = 600.0
TICK_SECONDS = 1.0
FIRST_CLIENT_SECONDS = 20.0
"""A new owner waits at least this long for the client that started it, whatever `idle` says."""
LOCK_WAIT_SECONDS = 30.0
"""A new owner waits this long for an old one that is leaving to let go of the lock."""
LOG_BYTES = 4 * 1024 * 1024
ACCEPT_RETRY_SECONDS = 0.1
"""A client that cannot be taken now (no descriptor, no thread to spare) is tried again this often."""
CLOSE_SECONDS = 10.0
"""A leaving owner waits this long for requests still running (of sessions that ended) before it
exits; its lock is let go first, so the next owner starts meanwhile."""
SPOOL_AFTER_SECONDS = 1.0
"""After a `ctxd acp` proxy's session ends, its spool is looked for this much later: a killed proxy's
socket and the lock on its spool close together as it exits, in no set order."""


class SessionLogs:
    """A session may name a log file (`ctxd --log-file`): the owner's log goes there too while
    that session lasts, so an editor's own log still shows what its daemon did."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._handlers: dict[str, tuple[logging.Handler, int]] = {}

    def attach(self, path: str | None, verbose: bool) -> None:
        if verbose:
            logging.getLogger("ctxd").setLevel(logging.DEBUG)
        if not path:
            return
        from ctxd.logs import PrivateFileHandler, RedactSecrets

        with self._lock:
            handler, count = self._handlers.get(path, (None, 0))
            if handler is None:
                try:
                    handler = PrivateFileHandler(path)
                except OSError as error:
                    log.warning("cannot log to %s: %s", path, error)
                    return
                handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
                handler.addFilter(RedactSecrets())
                logging.getLogger().addHandler(handler)
            self._handlers[path] = (handler, count + 1)

    def detach(self, path: str | None) -> None:
        if not path:
            return
        with self._lock:
            handler, count = self._handlers.get(path, (None, 0))
            if handler is None:
                return
            if count > 1:
                self._handlers[path] = (handler, count - 1)
                return
            del self._handlers[path]
        logging.getLogger().removeHandler(handler)
        handler.close()


class Owner:
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        self.folder = Path(ownerlink.owner_dir(self.state_dir))
        self.daemon = Daemon(self.state_dir)
        self.daemon.shared = True
        self.logs = SessionLogs()
        self.idle = env_seconds("CTXD_OWNER_IDLE_SECONDS", IDLE_SECONDS)
        self._lock = threading.Condition()
        self._connections = 0
        self._last = time.monotonic()
        self._served = False  # a client came: from then on `idle` alone decides
        self._stopping = threading.Event()
        self._listener: socket.socket | None = None
        self._socket_id: tuple[int, int] | None = None
        self._kept: dict[str, KeptFolder] = {}  # folders no editor opened, watched for the hooks
        self._locks: list[int] = []  # its lock (and one made again after the state dir was removed)

    # --- start and stop ---

    def take_lock(self, wait: float = LOCK_WAIT_SECONDS) -> int | None:
        """The owner's lock, held until the process ends; None when another owner keeps it."""
        fd = os.open(self.folder / ownerlink.LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except OSError:
                if ownerlink.connect(self.state_dir, 0.5) is not None or time.monotonic() > deadline:
                    os.close(fd)  # one answers: it is the owner
                    return None
                time.sleep(0.05)

    def listen(self) -> None:
        with ownerlink.folder_fd(self.folder) as fd:
            path = f"/proc/self/fd/{fd}/{ownerlink.SOCKET_NAME}"
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)  # left by an owner that crashed (the lock is ours)
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(path)
            os.chmod(path, 0o600)
            self._socket_id = _identity(path)
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, name="ctxd-owner-accept", daemon=True).start()

    def run(self) -> int:
        self.listen()
        log.info("owner of %s: listening (pid %d, ctxd %s)", self.state_dir, os.getpid(), __version__)
        why = self._wait()
        log.info("owner of %s: leaving (%s)", self.state_dir, why)
        self.stop()
        return 0

    def _wait(self) -> str:
        while not self._stopping.is_set():
            with self._lock:
                left = (self.idle if self._served else max(self.idle, FIRST_CLIENT_SECONDS)) - (
                    time.monotonic() - self._last)
                if self._connections == 0 and left <= 0:
                    return f"no session and no request for {self.idle:g} s"
                self._lock.wait(min(TICK_SECONDS, left) if self._connections == 0 else TICK_SECONDS)
            self._release_idle_folders()
            # Its own socket, not merely one: the state dir removed, another owner may listen in the
            # folder made again (a client came before this tick), and write the same ledgers.
            if _identity(str(self.folder / ownerlink.SOCKET_NAME)) != self._socket_id:
                with self._lock:
                    busy = self._connections > 0
                if not busy:
                    return "its socket or state dir was removed"
                if not self._listen_again():  # another owner now: the histories are its alone
                    return "another owner listens in its state dir (it was removed and made again)"
        return "asked to stop"

    def _listen_again(self) -> bool:
        """The state dir was removed under sessions that still run: the owner makes its folder
        again and listens there, under a new lock (so no second owner starts beside it). False
        when another owner got there first: this one then leaves (its sessions' clients go to that
        one, as after an owner's death), so that each history keeps one writer."""
        try:
            ownerlink.private_dir(self.folder, create=True)
            lock = self.take_lock(wait=0)
        except OSError as error:
            log.warning("owner of %s: its folder is gone and cannot be made again: %s", self.state_dir, error)
            return True  # keep serving the sessions there are; try again at the next tick
        if lock is None:
            return False
        self._locks.append(lock)
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()
        self.listen()
        log.warning("owner of %s: its socket was removed (the state dir deleted?); listening again", self.state_dir)
        return True

    def stop(self) -> None:
        self._stopping.set()
        if self._listener is not None:
            with contextlib.suppress(OSError), ownerlink.folder_fd(self.folder) as fd:
                path = f"/proc/self/fd/{fd}/{ownerlink.SOCKET_NAME}"
                if _identity(path) == self._socket_id:  # ours, not a later owner's
                    os.unlink(path)  # new clients start the next owner
            with contextlib.suppress(OSError):
                self._listener.close()
        from ctxd.sessions import summaries

        summaries.close_ready()
        for fd in self._locks:  # the next owner may start now: the ledgers are safe between processes
            with contextlib.suppress(OSError):
                os.close(fd)
        closing = threading.Thread(target=self.daemon.close, name="ctxd-owner-close", daemon=True)
        closing.start()
        closing.join(CLOSE_SECONDS)

    def ask_to_stop(self) -> None:
        self._stopping.set()
        with self._lock:
            self._lock.notify_all()

    def _touch(self, connections: int = 0) -> None:
        with self._lock:
            self._connections += connections
            self._last = time.monotonic()
            self._served = True
            self._lock.notify_all()

    # --- the hooks' checkpoints ---

    def keep(self, folder: Path) -> KeptFolder:
        """The folder, watched for the hooks (a capture ahead of the first checkpoint starts the
        watch, as a daemon does for a folder it opens)."""
        from ctxd.ghost.take import prime

        real = os.path.realpath(folder)
        watch = self.daemon.tree_watch
        with self._lock:
            kept = self._kept.get(real)
            if kept is not None and kept.identity == _identity(real):
                kept.last = time.monotonic()
                return kept
            replaced = kept is not None  # another folder under that name now: its watch is the old one's
            kept = self._kept[real] = KeptFolder(Path(real), self.state_dir, watch)
        if replaced and watch is not None:
            watch.release(Path(real))
        if watch is not None:
            try:
                prime(kept.opened_root(), settings=kept.settings.ghost, watch=watch, state_dir=self.state_dir)
            except Exception as error:  # noqa: BLE001 - the checkpoints then read the whole tree
                log.info("%s: no capture ahead of the hooks' checkpoints: %s", real, error)
        return kept

    def checkpoint(self, sent: Any) -> dict[str, Any]:
        """A hook's checkpoint (`ctxd.ghost.checkpoint.Job`, as JSON): in the folder's open workspace,
        else in a folder kept for the hooks. `taken` false: the hook takes it itself."""
        from ctxd.ghost.checkpoint import Job

        try:
            job = Job.from_wire(sent)
        except ValueError as error:
            return {"taken": False, "reason": str(error)}
        outcome = self._take(job)
        if isinstance(outcome, str):
            return {"taken": False, "reason": outcome}
        return {**outcome.to_answer(), "by": "owner"}  # the hook logs what it says

    def hook(self, request: dict[str, Any]) -> dict[str, Any]:
        """A hook's whole work (`ctxd hook`, its input redacted already; `ctxd.hookplan`): the hook
        process imports neither the agents' modules nor the checkpoint code, and waits for this.
        The owner logs what it did. `done` false: the hook does the work itself (the line after a
        compaction, which asks the agent's configuration found from the agent's environment), or
        hands `job` to the owner of the workspace's own state dir (its `.ctxd.toml`'s)."""
        from ctxd import hookplan

        agent, event, data, exclude = (request.get(k) for k in ("agent", "event", "input", "exclude"))
        if not (isinstance(agent, str) and isinstance(event, str) and isinstance(data, dict)
                and isinstance(exclude, list) and all(isinstance(e, str) for e in exclude)):
            return {"done": False}
        found = hookplan.read_hook(agent, event, data)
        if found is None:
            return {"done": True}
        module, hook = found
        if hook.action == "after-compaction":
            return {"done": False}
        job = hookplan.plan(module, event, hook, self.state_dir, exclude)
        if job is None:
            return {"done": True}
        outcome = self._take(job)
        if isinstance(outcome, str):
            return {"done": False, "job": job.to_wire()}
        log_hook(outcome.line(job, by="the owner"), self.state_dir)  # (here: the hook would import the log's escaping)
        return {"done": True}

    def _take(self, job: Job) -> Outcome | str:
        """The job's checkpoint taken in the folder's open workspace, else in a folder kept for the
        hooks; a text saying why not when its state dir is not this owner's."""
        from ctxd.ghost.checkpoint import take

        if not job.automatic or job.thread is None:
            return "not a hook's checkpoint (a turn's or a tool's, for a thread)"
        real, store = os.path.realpath(job.folder), os.path.realpath(job.state_dir)
        open_ = [w for w in self.daemon.service.folders()
                 if os.path.realpath(w.root) == real and os.path.realpath(w.state_dir) == store]
        if not open_ and store != os.path.realpath(self.state_dir):  # a folder's own state dir (its .ctxd.toml)
            return f"not a state dir of this owner's ({self.state_dir})"
        return take(job, open_[0] if open_ else self.keep(job.folder))

    def _release_idle_folders(self) -> None:
        watch = self.daemon.tree_watch
        with self._lock:
            idle = [real for real, kept in self._kept.items() if time.monotonic() - kept.last > self.idle]
            for real in idle:
                del self._kept[real]
        for real in idle:
            if watch is not None and not any(os.path.realpath(w.root) == real for w in self.daemon.service.folders()):
                watch.release(Path(real))

    # --- connections ---

    def _accept(self) -> None:
        listener = self._listener
        assert listener is not None
        failing = False
        while not self._stopping.is_set():
            try:
                conn, _ = listener.accept()
            except OSError as error:
                if listener.fileno() < 0 or self._listener is not listener:
                    return  # closed: the owner leaves, or listens again elsewhere (`_listen_again`)
                problem: BaseException | None = error
            else:
                try:
                    threading.Thread(target=self._serve, args=(conn,), name="ctxd-owner-client", daemon=True).start()
                    problem = None
                except RuntimeError as error:  # no thread to serve it
                    conn.close()
                    problem = error
            if problem is None:
                failing = False
                continue
            # Out of descriptors or threads for a moment (clients that connect and say nothing hold
            # theirs for the handshake's bound): the clients queued wait, and are taken once there is
            # room. Returning left an owner that holds the lock and answers no one while it runs.
            if not failing:
                log.warning("owner: cannot take a client now (%s); trying again", problem)
            failing = True
            time.sleep(ACCEPT_RETRY_SECONDS)

    def _serve(self, conn: socket.socket) -> None:
        fds: list[int] = []
        counted = False
        try:
            if ownerlink.peer_uid(conn) != os.getuid():
                conn.close()
                return  # another user: never read
            self._touch(+1)  # an open connection keeps the owner (a session's lasts as long as it)
            counted = True
            request, fds = ownerlink.read_request(conn, time.monotonic() + 30)
            if request is None:
                return
            if self._stopping.is_set():  # leaving: the client starts the next owner
                ownerlink.send(conn, {"ok": False, "retry": True})
                return
            op = request.get("op")
            if op == "session":
                self._session(conn, request, fds)
                fds = []  # the session's now
            elif op == "checkpoint":
                ownerlink.send(conn, self.checkpoint(request.get("job")))
            elif op == "hook":
                ownerlink.send(conn, self.hook(request))
            elif op == "ping":
                ownerlink.send(conn, {"pid": os.getpid(), "version": __version__, "stateDir": str(self.state_dir)})
            else:
                ownerlink.send(conn, {"error": f"unknown op {op!r}"})
        except OSError as error:
            log.debug("owner: a client's connection failed: %s", error)
        except Exception:  # noqa: BLE001 - one client's failure never ends the owner
            log.exception("owner: serving a client failed")
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            with contextlib.suppress(OSError):
                conn.close()
            if counted:
                self._touch(-1)

    def _session(self, conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
        """One LSP session on the passed descriptors (stdin, stdout), or on `conn` itself."""
        try:
            head = base64.b64decode(request.get("head") or "", validate=True)
        except ValueError:
            head = b""
        log_file = request.get("logFile") if isinstance(request.get("logFile"), str) else None
        stream: socket.socket | None = None  # the session's socket, when it is one (TCP, or `conn` itself)
        control: socket.socket | None = conn  # where the waiting client is told the exit code
        if len(fds) == 2:  # an editor's pipes
            reader: BinaryIO = os.fdopen(fds[0], "rb", buffering=0)
            writer: BinaryIO = os.fdopen(fds[1], "wb", buffering=0)
        else:
            if len(fds) == 1:  # a TCP client's socket
                stream = socket.socket(fileno=fds[0])
            else:
                for fd in fds:
                    os.close(fd)
                stream, control = conn, None
                conn.settimeout(None)  # (the request's read had a bound: a session may be idle for hours)
            reader = cast(BinaryIO, stream.makefile("rb", buffering=0))
            writer = cast(BinaryIO, stream.makefile("wb", buffering=0))
        ended = threading.Event()

        def end(code: int) -> None:
            """The session's end: the waiting client is told, the editor sees its stdout close."""
            if ended.is_set():
                return
            ended.set()
            if control is not None:
                with contextlib.suppress(OSError):
                    ownerlink.send(control, {"exit": code})
            with contextlib.suppress(OSError, ValueError):
                writer.close()
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.shutdown(socket.SHUT_RDWR)

        ownerlink.send(conn, {"ok": True, "pid": os.getpid()})
        if control is not None:
            threading.Thread(target=self._watch_client, args=(control, end), name="ctxd-owner-watch",
                             daemon=True).start()
        self.logs.attach(log_file, request.get("verbose") is True)
        code: int | None = None
        role = request.get("role") if not fds and request.get("role") == "acp" else None  # ctxd acp's own socket
        try:
            if role == "acp":  # what proxies that ended left unsent (ctxd/acpspool.py)
                self.daemon.take_acp_spools_soon()
            server = CtxdServer(StreamConnection(with_head(head, reader), writer, on_exit=end), daemon=self.daemon,
                                role=role)
            code = server.serve()
        finally:
            end(code if code is not None else 0)
            with contextlib.suppress(OSError, ValueError):
                reader.close()
            if stream is not None and stream is not conn:
                stream.close()
            self.logs.detach(log_file)
            if role == "acp":  # a proxy killed with records unanswered: its spool, once its lock is let go
                taking = threading.Timer(SPOOL_AFTER_SECONDS, self.daemon.take_acp_spools_soon)
                taking.daemon = True
                taking.start()


    @staticmethod
    def _watch_client(control: socket.socket, end: Callable[[int], None]) -> None:
        """The waiting client died (killed by its editor, say): its session ends with it, and the
        editor sees the session's output close, as it would have with a daemon of its own."""
        try:
            control.settimeout(None)
            while control.recv(1):
                pass
        except OSError:
            pass
        end(1)


class KeptFolder:
    """A folder the hooks checkpoint that no editor has open: its settings are read afresh for each
    job (the user may change them meanwhile), and it must still be the folder first seen."""

    def __init__(self, root: Path, state_dir: Path, tree_watch: TreeWatch | None) -> None:
        self.root = root
        self.state_dir = state_dir
        self.tree_watch = tree_watch
        self.identity = _identity(str(root))
        self.last = time.monotonic()

    @property
    def settings(self) -> Settings:
        from ctxd.settings import load_settings

        return load_settings(self.root)

    def opened_root(self) -> Path:
        from ctxd.errors import GitFailed

        if _identity(str(self.root)) != self.identity:
            raise GitFailed(f"{self.root} was replaced or moved since the hooks' checkpoints began")
        return self.root


def _identity(path: str) -> tuple[int, int] | None:
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def setup_log(folder: Path) -> None:
    from ctxd.logs import RedactSecrets, private_rotating_handler

    handler = private_rotating_handler(folder / ownerlink.LOG_NAME, LOG_BYTES, 1)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactSecrets())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("ctxd").setLevel(logging.INFO)
    for noisy in ("httpx", "httpcore", "openai", "git", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def detach() -> None:
    """Leave the starting process at once (it waits for this): a session of its own, no
    terminal, stdio on /dev/null; the grandchild goes on as the owner."""
    if os.fork() > 0:
        os._exit(0)
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


def main(state_dir: Path, *, detached: bool, keep: Path | None = None) -> int:
    from ctxd.server.process import daemon_process

    if detached:
        detach()
    state_dir, keep = state_dir.absolute(), keep.absolute() if keep is not None else None
    os.chdir("/")  # a hook starts it in the agent's folder: it outlives it, and holds no folder of the user's
    try:
        folder = ownerlink.private_dir(Path(ownerlink.owner_dir(state_dir)), create=True)
    except OSError as error:
        print(f"ctxd owner: {error}", file=sys.stderr)
        return 1
    setup_log(folder)
    daemon_process()
    from ctxd.sessions import summaries

    if keep is None:  # (one a hook started, to keep a folder, may see no editor for hours)
        summaries.fork_readers(os.cpu_count() or 1)  # before any thread: for its first listing
    owner = Owner(state_dir)
    lock = owner.take_lock()
    if lock is None:
        summaries.close_ready()
        return 0  # another owner runs
    owner._locks.append(lock)
    signal.signal(signal.SIGTERM, lambda *_: owner.ask_to_stop())
    owner.daemon.watch_trees()  # before any session's warm-up: the hooks' checkpoints need it first
    try:
        if keep is not None:  # started by a hook that checkpointed this folder alone: the next is short
            threading.Thread(target=owner.keep, args=(keep,), name="ctxd-owner-keep", daemon=True).start()
        code = owner.run()
    except Exception:  # noqa: BLE001 - logged; the lock goes with the process, the next client starts another
        log.exception("owner of %s failed", state_dir)
        code = 1
    os._exit(code)  # threads inside accept() or blocking reads: leave without an interpreter shutdown
