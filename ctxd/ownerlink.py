"""The way to the owner: the one ctxd process per user and state dir that follows the agents'
sessions, watches working trees, writes ledgers and takes checkpoints (docs/processes.md).

Every other ctxd process — the editor's `ctxd`, hooks, the status line, `ctxd mcp`, `ctxd acp`,
the CLI — reaches it here: find it on its socket, start it when none answers (gopls's
`-remote=auto`, watchman's per-user server), then hand it a session or a job. The layout, in the
state dir, is a folder only this user can enter:

    owner/owner.sock   where the owner listens
    owner/owner.lock   held by the running owner (flock): at most one per state dir
    owner/start.lock   held by whoever is starting one: at most one start at a time
    owner/follow.lock  held by the one process that follows the agents' sessions into the ledgers:
                       the owner, or a daemon serving alone (`CTXD_OWNER=0`) beside it or another
    owner/owner.log    the owner's log

A folder that is a link, belongs to another user or is open to others is refused (another local
user could listen there and read what a hook hands over); after connecting, the owner's peer
credentials must be this user's. A message is one JSON line, with file descriptors beside it
for a session (SCM_RIGHTS). Only the standard library: hooks import this on every tool call, so a
client's connection is a bare `_socket.socket` (the `socket` module's enums, `typing` and `pathlib`
would cost each hook milliseconds); `socket` is imported where descriptors travel.
"""

from __future__ import annotations

import _socket
import contextlib
import errno
import os
import sys
import time

from ctxd import leanjson, places
from ctxd.places import ctxd_command
from ctxd.places import owner_dir as owner_dir  # (its home is ctxd.places)

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from collections.abc import Callable, Iterator, Sequence
    from pathlib import Path
    from typing import Any, TypeVar

    StateDir = str | Path
    Folder = TypeVar("Folder", str, Path)

MAX_LINE_BYTES = 1024 * 1024
SOCKET_NAME = "owner.sock"
LOCK_NAME = "owner.lock"
START_LOCK_NAME = "start.lock"
FOLLOW_LOCK_NAME = "follow.lock"
LOG_NAME = "owner.log"
START_SECONDS = 20.0
"""How long a client that started the owner waits for it to listen (its imports take a moment)."""
WRITE_SECONDS = 30.0
"""A session's notification is written within this long (a request: within its timeout), or not at all."""


Unsafe = places.Unsafe
"""The owner's folder or its state dir cannot be trusted (a link, another user's, open to others)."""


def available() -> bool:
    """Unix sockets with peer credentials and descriptor passing (Linux)."""
    return sys.platform.startswith("linux") and hasattr(_socket, "SO_PEERCRED") and hasattr(_socket.socket, "sendmsg")


def _open_private(path: StateDir, make: bool) -> int:
    """A descriptor of `path`, checked on the descriptor itself (no race with a swap): a folder,
    not a link, this user's, closed to others, in a folder (the state dir) that is this user's and
    not a link, which no other user can write into. With `make` both are created when missing and
    made 0700 when they are the user's own. Raises Unsafe, or FileNotFoundError when missing."""
    parent = places.open_private(os.path.dirname(os.path.abspath(path)), make, refused=0o022)
    try:
        return places.open_private(os.path.basename(path), make, dir_fd=parent)
    finally:
        os.close(parent)


def private_dir(path: Folder, create: bool) -> Folder:
    """`path` once checked as `_open_private` checks it (and created with `create`)."""
    os.close(_open_private(path, create))
    return path


@contextlib.contextmanager
def folder_fd(path: StateDir, make: bool = False) -> Iterator[int]:
    """A descriptor of the checked folder: sockets are reached through `/proc/self/fd/<fd>/<name>`,
    so the path used is the folder checked, and a long state dir never exceeds the 107 bytes a
    socket's path may have."""
    fd = _open_private(path, make)
    try:
        yield fd
    finally:
        os.close(fd)


def _peer(conn: _socket.socket, field: int) -> int:
    """A field of the peer's credentials (`struct ucred`: pid, uid, gid, three native ints), read
    without `struct`: each C module a hook loads costs it a `dlopen`."""
    creds = conn.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
    return int.from_bytes(creds[4 * field:4 * field + 4], sys.byteorder, signed=True)


def peer_uid(conn: _socket.socket) -> int:
    return _peer(conn, 1)


def peer_pid(conn: _socket.socket) -> int:
    return _peer(conn, 0)


def connect(state_dir: StateDir, timeout: float = 2.0) -> _socket.socket | None:
    """A connection to the running owner of `state_dir`, or None when none answers. Raises Unsafe
    when its folder or its listener is not this user's alone: nothing is sent then."""
    if not available():
        return None
    try:
        with folder_fd(owner_dir(state_dir)) as fd:
            conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            try:
                conn.settimeout(max(0.01, timeout))
                conn.connect(f"/proc/self/fd/{fd}/{SOCKET_NAME}")
                if peer_uid(conn) != os.getuid():
                    raise Unsafe(f"{owner_dir(state_dir)}: its socket is another user's; nothing is sent there")
            except BaseException:
                conn.close()
                raise
    except Unsafe:
        raise
    except OSError:
        return None
    return conn


def follow_lock(state_dir: StateDir) -> int | None:
    """The state dir's follow lock (`owner/follow.lock`, an exclusive flock, not waited for): its
    descriptor, held while this process follows the agents' sessions into the ledgers; None when
    another process holds it (it follows them: an owner, or a daemon serving alone). Every history
    has one writer, however many processes serve the state dir. Raises Unsafe, or OSError, when the
    owner's folder cannot be made or trusted."""
    import fcntl

    with folder_fd(owner_dir(state_dir), make=True) as folder:
        fd = os.open(FOLLOW_LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600, dir_fd=folder)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        os.close(fd)
        if error.errno in (errno.EAGAIN, errno.EACCES):
            return None
        raise
    return fd


def owner_command(state_dir: StateDir) -> list[str]:
    return [*ctxd_command(), "owner", "--state-dir", os.fspath(os.path.abspath(state_dir)), "--detach"]


@contextlib.contextmanager
def _held(path: str, deadline: float) -> Iterator[bool]:
    """An exclusive flock of `path` until `deadline`; yields whether it was taken."""
    import fcntl  # (here: a hook that finds the owner running never starts one)

    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as error:
                if error.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(0.02)
        yield True
    finally:
        os.close(fd)


def reach(state_dir: StateDir, timeout: float, *, start: bool = True) -> _socket.socket | None:
    """A connection to the owner of `state_dir`; when none answers and `start`, one is started
    (by one client at a time) and waited for until `timeout`. None: no owner within the time.
    Raises Unsafe as `connect` does."""
    deadline = time.monotonic() + timeout
    conn = connect(state_dir, max(0.05, min(2.0, timeout)))
    if conn is not None or not start or not available():
        return conn
    try:
        folder = private_dir(owner_dir(state_dir), create=True)
    except Unsafe:
        raise
    except OSError:
        return None
    with _held(os.path.join(folder, START_LOCK_NAME), deadline) as mine:
        conn = connect(state_dir, 0.5)
        if conn is not None or not mine:
            return conn
        import subprocess  # only here: every hook imports this module, few start an owner

        try:
            subprocess.run(owner_command(state_dir), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, close_fds=True, cwd="/", timeout=max(1.0, timeout))
        except (OSError, subprocess.SubprocessError):
            return None
        while time.monotonic() < deadline:  # it listens once its lock is taken and its socket bound
            conn = connect(state_dir, 0.5)
            if conn is not None:
                return conn
            time.sleep(0.02)
    return None


def send(conn: _socket.socket, message: dict[str, Any], fds: Sequence[int] = ()) -> None:
    """One message as a JSON line; OSError (EMSGSIZE) for one the other side would not read."""
    data = leanjson.dumps(message).encode("utf-8") + b"\n"
    if len(data) > MAX_LINE_BYTES:
        raise OSError(errno.EMSGSIZE, f"a message of {len(data)} bytes; the bound is {MAX_LINE_BYTES}")
    if fds:  # the descriptors travel with the first byte (`socket.send_fds`)
        import array

        conn.sendmsg([data[:1]], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, array.array("i", fds))])
        data = data[1:]
    conn.sendall(data)


def _raw_line(conn: _socket.socket, deadline: float | None, data: bytes = b"") -> bytes | None:
    """Bytes up to the next newline (without it). Peeks first, then takes only the line: what
    follows it may be a session's stream, which must stay in the socket."""
    line = bytearray(data)
    while not line.endswith(b"\n"):
        if len(line) > MAX_LINE_BYTES:
            return None
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            conn.settimeout(left)
        else:
            conn.settimeout(None)
        try:
            ahead = conn.recv(65536, _socket.MSG_PEEK)
            if not ahead:
                return None
            end = ahead.find(b"\n")
            line += conn.recv(end + 1 if end >= 0 else len(ahead))
        except (OSError, ValueError):
            return None
    return bytes(line[:-1])


def _parse(line: bytes | None) -> dict[str, Any] | None:
    if line is None:
        return None
    try:
        value = leanjson.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def read_line(conn: _socket.socket, deadline: float | None) -> dict[str, Any] | None:
    """The next JSON object line from `conn` (None: closed, too long, not an object, or past
    `deadline`)."""
    return _parse(_raw_line(conn, deadline))


MAX_FDS = 4


def read_request(conn: socket.socket, deadline: float) -> tuple[dict[str, Any] | None, list[int]]:
    """The owner's side of `send`: the first line and the descriptors that came with its first
    byte (the caller closes them)."""
    import socket

    conn.settimeout(max(0.01, deadline - time.monotonic()))
    try:
        first, fds, _flags, _address = socket.recv_fds(conn, 1, MAX_FDS)
    except (OSError, ValueError):
        return None, []
    return _parse(_raw_line(conn, deadline, first) if first else None), list(fds)


def ask(state_dir: StateDir, message: dict[str, Any], timeout: float, *, start: bool = False) -> dict[str, Any] | None:
    """One request and its answer (a hook's checkpoint, the status line's usage), or None: no
    owner answered within `timeout`."""
    deadline = time.monotonic() + timeout
    conn = reach(state_dir, timeout, start=start)
    if conn is None:
        return None
    try:
        conn.settimeout(max(0.01, deadline - time.monotonic()))
        send(conn, message)
        return read_line(conn, deadline)
    except OSError:
        return None
    finally:
        conn.close()


ACK_SECONDS = 30.0


def hand_over(state_dir: StateDir, message: dict[str, Any], fds: Sequence[int],
              taken: Callable[[], None] = lambda: None) -> int | None:
    """Give a session (`message`, an op `session`, with the descriptors it is served on) to the
    owner of `state_dir`, starting one if needed, and wait for the session's end: its exit code.
    None when no owner took it (the caller serves it itself). `taken` runs once the owner has the
    descriptors (the caller lets go of its own copies)."""
    deadline = time.monotonic() + START_SECONDS
    while True:
        conn = reach(state_dir, max(0.1, deadline - time.monotonic()))
        if conn is None:
            return None
        try:
            try:
                send(conn, message, fds=fds)
            except OSError:
                return None
            acked_by = time.monotonic() + ACK_SECONDS
            ack = read_line(conn, acked_by)
            closed = ack is None and time.monotonic() < acked_by  # (before its bound: the end of the stream)
            if (closed or ack is not None and ack.get("retry")) and time.monotonic() < deadline:
                # An owner on its way out did not take them, or one dying as this connected (its
                # socket outlives the process's first thread) closed without a word, before it
                # read anything of the session: the next one starts.
                time.sleep(0.05)
                continue
            if ack is None or not ack.get("ok"):
                return 1  # the descriptors went over: serving them here too would answer twice
            taken()
            end = read_line(conn, None)
        finally:
            conn.close()
        code = end.get("exit") if end is not None else None
        return code if isinstance(code, int) and not isinstance(code, bool) else 1


class RemoteError(Exception):
    """An error answer of the owner: its JSON-RPC code and message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Session:
    """An LSP session with the owner over its socket, for ctxd's own tools (`ctxd mcp`, `ctxd
    acp`): requests from any thread, each waiting for its answer; notifications go to `on_notify`."""

    def __init__(self, conn: socket.socket, on_notify: Callable[[str, Any], None] | None = None) -> None:
        import itertools
        import threading

        self.conn = conn
        self.on_notify = on_notify
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._answers: dict[int, dict[str, Any]] = {}
        self._arrived = threading.Condition()
        self._closed = False
        self._reader = threading.Thread(target=self._read, name="ctxd-owner-session", daemon=True)
        self._reader.start()

    @classmethod
    def open(cls, state_dir: Path, folders: list[Path], timeout: float = START_SECONDS,
             on_notify: Callable[[str, Any], None] | None = None, role: str | None = None) -> Session | None:
        """A session with the owner of `state_dir` (started if needed) with `folders` open, or None.
        Raises Unsafe when the owner's folder is not the user's alone. `role` "acp": a `ctxd acp`
        proxy's session, the one kind that may write `acp:` threads."""
        conn = reach(state_dir, timeout)
        if conn is None:
            return None
        try:
            send(conn, {"op": "session", **({"role": role} if role else {})})
            ack = read_line(conn, time.monotonic() + ACK_SECONDS)
        except OSError:
            conn.close()
            return None
        if ack is None or not ack.get("ok"):
            conn.close()
            return None
        import socket

        full = socket.socket(fileno=conn.detach())  # (the reader's `makefile`)
        full.settimeout(None)  # a session waits for its next message however long: no bound of the handshake's
        session = cls(full, on_notify)
        try:
            session.request("initialize", {"processId": os.getpid(), "capabilities": {},
                                           "workspaceFolders": [{"uri": f.as_uri(), "name": f.name} for f in folders]},
                            timeout)
            session.notify("initialized", {})
        except (OSError, RemoteError, TimeoutError):
            session.close()
            return None
        return session

    @property
    def closed(self) -> bool:
        """The owner ended the session (it left, or died)."""
        return self._closed

    def _write(self, message: dict[str, Any], timeout: float) -> None:
        """Write one message within `timeout`, or raise TimeoutError: an owner that reads nothing
        (hung, stopped) never holds a writer longer, nor the writers waiting behind it. A message
        cut short ends the session (what follows it could not be read)."""
        import select

        body = leanjson.dumps(message).encode("utf-8")
        data = memoryview(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        deadline = time.monotonic() + timeout
        if not self._lock.acquire(timeout=max(0.0, timeout)):
            raise TimeoutError(f"the owner reads nothing: no message written within {timeout:g} s")
        try:
            whole = len(data)
            while data:
                try:
                    data = data[self.conn.send(data, _socket.MSG_DONTWAIT):]
                except BlockingIOError:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        if len(data) < whole:
                            self._cut()
                        raise TimeoutError(f"the owner reads nothing: a message not written within {timeout:g} s") \
                            from None
                    waiting = select.poll()  # (not select.select: a descriptor past 1023 is fine)
                    waiting.register(self.conn, select.POLLOUT)
                    waiting.poll(left * 1000)
        finally:
            self._lock.release()

    def _cut(self) -> None:
        """End a session whose stream holds a message cut short."""
        with contextlib.suppress(OSError):
            self.conn.shutdown(_socket.SHUT_RDWR)
        with self._arrived:
            self._closed = True
            self._arrived.notify_all()

    def notify(self, method: str, params: Any = None, timeout: float = WRITE_SECONDS) -> None:
        self._write({"jsonrpc": "2.0", "method": method, **({"params": params} if params is not None else {})},
                    timeout)

    def request(self, method: str, params: Any = None, timeout: float = 60.0) -> Any:
        msg_id = next(self._ids)
        deadline = time.monotonic() + timeout
        self._write({"jsonrpc": "2.0", "id": msg_id, "method": method,
                     **({"params": params} if params is not None else {})}, timeout)
        with self._arrived:
            while msg_id not in self._answers:
                left = deadline - time.monotonic()
                if self._closed:
                    raise OSError("the owner closed the session")
                if left <= 0:
                    raise TimeoutError(f"{method}: no answer from the owner within {timeout:g} s")
                self._arrived.wait(left)
            answer = self._answers.pop(msg_id)
        if "error" in answer:
            error = answer["error"] if isinstance(answer["error"], dict) else {}
            raise RemoteError(int(error.get("code") or 0), str(error.get("message") or "error"))
        return answer.get("result")

    def _read(self) -> None:
        stream = self.conn.makefile("rb")
        try:
            while True:
                length = None
                while True:
                    line = stream.readline(65536)
                    if not line:
                        return
                    if line in (b"\r\n", b"\n"):
                        break
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                body = stream.read(length or 0)
                if length is None or len(body) < length:
                    return
                message = leanjson.loads(body)
                if not isinstance(message, dict):
                    continue
                if "id" in message and "method" not in message:
                    with self._arrived:
                        self._answers[message["id"]] = message
                        self._arrived.notify_all()
                elif self.on_notify is not None and isinstance(message.get("method"), str):
                    self.on_notify(message["method"], message.get("params"))
        except (OSError, ValueError):
            return
        finally:
            with self._arrived:
                self._closed = True
                self._arrived.notify_all()

    def close(self) -> None:
        import contextlib

        with contextlib.suppress(OSError, RemoteError, TimeoutError):
            self.request("shutdown", None, 5.0)
            self.notify("exit", timeout=1.0)
        with contextlib.suppress(OSError):
            self.conn.shutdown(_socket.SHUT_RDWR)
        self.conn.close()
