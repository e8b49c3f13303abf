"""A hook hands its checkpoint to a running daemon of the workspace, which takes it at once.

A daemon watches its workspaces' files (`ctxd.ghost.treewatch`), so its capture re-checks only
what changed, and with nothing changed it answers from the index it kept without starting git
for the files. A hook process could only read every file's stat data again. So the daemon
listens on a Unix socket, `<state dir>/hooks/sockets/<pid>.sock` (a folder only its owner can
enter; a keeper, `ctxd.hooks.keeper`, listens there as `keeper-<pid>.sock`); the hook sends its
job (what `ctxd.hooks.hook.plan` made) as one JSON line and waits for one JSON line back: the
commit, or why not (not one of this daemon's folders, ghost.auto off, a failure). A connection
from another user is closed unread (`SO_PEERCRED`).

The hook hands over a prompt's words and a command, so it checks both ends too: the socket folder
and `hooks/` above it must be real folders (not links), the user's own, mode 0700 (checked on the
descriptors it then goes through), or no daemon is asked (`LinkRefused`); and a listener whose
peer credentials are another user's is sent nothing. A daemon or keeper uses only such folders,
making them 0700 when they are the user's own, and never changes another user's.

Nothing changes for the hook when there is no daemon, or it answers nothing usable in time: it
takes the checkpoint itself, as before. The socket is reached through `/proc/self/fd/<folder>`
so that a long state dir path never exceeds the 107 bytes a socket path may have (Linux; on
other systems there is no link and hooks always work alone).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import stat
import struct
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

MAX_BYTES = 1024 * 1024
SERVE_SECONDS = 30.0
"""A connection that sends nothing for this long is closed (a checkpoint itself may take longer)."""


class LinkRefused(OSError):
    """The hooks' socket folder is not the user's alone: nothing is handed over through it."""


def _sockets(state_dir: Path) -> Path:
    return Path(state_dir) / "hooks" / "sockets"


def _open_folder(name: Path, dir_fd: int | None = None) -> int:
    """A descriptor of the folder `name` (only its last part, relative to `dir_fd`, when one is
    given), never through a link. Raises LinkRefused for a link or a file, OSError for none."""
    try:
        return os.open(name if dir_fd is None else name.name,
                       os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            raise LinkRefused(f"{name} is a link or not a folder") from None
        raise


def _check_private(fd: int, name: Path, make_private: bool) -> None:
    """Raise LinkRefused unless the open folder is this user's and 0700 (with `make_private`, the
    user's own folder is made 0700)."""
    info = os.fstat(fd)
    if info.st_uid != os.getuid():
        raise LinkRefused(f"{name} belongs to another user (uid {info.st_uid})")
    if stat.S_IMODE(info.st_mode) != 0o700:
        if not make_private:
            raise LinkRefused(f"{name} is open to other users (mode {stat.S_IMODE(info.st_mode):o})")
        os.fchmod(fd, 0o700)


def _open_sockets(state_dir: Path, make: bool) -> int:
    """A descriptor of `<state dir>/hooks/sockets` once it and `hooks/` are found the user's alone
    (with `make`, the daemon's side: created when missing, made 0700). Raises LinkRefused, or
    OSError (FileNotFoundError: no daemon ever listened here)."""
    sockets = _sockets(state_dir)
    if make:
        sockets.parent.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            sockets.parent.mkdir(mode=0o700)
    parent = _open_folder(sockets.parent)
    try:
        if make:  # nothing is made in a folder that is not the user's
            _check_private(parent, sockets.parent, True)
            with contextlib.suppress(FileExistsError):
                os.mkdir(sockets.name, 0o700, dir_fd=parent)
        fd = _open_folder(sockets, parent)
        try:
            _check_private(parent, sockets.parent, make)
            _check_private(fd, sockets, make)
        except BaseException:
            os.close(fd)
            raise
        return fd
    finally:
        os.close(parent)


def _peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


def available() -> bool:
    return sys.platform.startswith("linux") and hasattr(socket, "SO_PEERCRED")


def _read_line(conn: socket.socket, deadline: float) -> bytes | None:
    data = b""
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0 or len(data) > MAX_BYTES:
            return None
        conn.settimeout(left)
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    return data.split(b"\n", 1)[0]


# --- the hook's side ---


def ask(state_dir: Path, job: dict[str, Any], deadline: float) -> dict[str, Any] | None:
    """The answer of the first daemon that takes the job ({"commit": ...} or {"skipped": why}),
    or None: no daemon did (none runs, none has the folder open, none answered by `deadline`).
    Raises LinkRefused when the socket folder is not the user's alone."""
    if not available():
        return None
    try:
        fd = _open_sockets(state_dir, make=False)
    except LinkRefused:
        raise
    except OSError:
        return None
    try:
        names = sorted(n for n in os.listdir(fd) if n.endswith(".sock"))
        line = json.dumps({**job, "folder": str(job["folder"]), "stateDir": str(job["stateDir"])}).encode() + b"\n"
        for name in names:
            answer = _ask_one(f"/proc/self/fd/{fd}/{name}", line, deadline)
            if answer is not None and answer.get("taken"):
                return answer
    finally:
        os.close(fd)
    return None


def _ask_one(address: str, line: bytes, deadline: float) -> dict[str, Any] | None:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(max(0.01, deadline - time.monotonic()))
            conn.connect(address)
            if _peer_uid(conn) != os.getuid():
                return None  # another user's listener: it is told nothing
            conn.sendall(line)
            raw = _read_line(conn, deadline)
    except OSError:
        return None  # a daemon that is gone (its socket left behind), or too slow
    try:
        value = json.loads(raw) if raw else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


# --- the daemon's side ---


class Listener:
    """The daemon's socket: each connection is one job, answered on a thread of its own."""

    def __init__(self, state_dir: Path, take: Callable[[dict[str, Any]], dict[str, Any]],
                 prefix: str = "") -> None:
        self.state_dir = Path(state_dir)
        self.folder = _sockets(state_dir)
        self.take = take
        self.prefix = prefix
        self.path: Path | None = None
        self._server: socket.socket | None = None
        self._closed = False

    def start(self) -> None:
        """Listen; raises OSError (LinkRefused: the folder is a link or another user's) when it cannot."""
        if not available():
            return
        fd = _open_sockets(self.state_dir, make=True)
        try:
            self._clean(fd)
            name = f"{self.prefix}{os.getpid()}.sock"
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=fd)
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(f"/proc/self/fd/{fd}/{name}")
            self.path = self.folder / name
        finally:
            os.close(fd)
        server.listen(16)
        self._server = server
        threading.Thread(target=self._accept, name="ctxd-hook-link", daemon=True).start()

    def stop(self) -> None:
        self._closed = True
        if self._server is not None:
            with contextlib.suppress(OSError):
                self._server.shutdown(socket.SHUT_RDWR)
            self._server.close()
        if self.path is not None:
            self.path.unlink(missing_ok=True)

    def _clean(self, fd: int) -> None:
        """Sockets of daemons (and keepers) that are gone, in the folder open as `fd`."""
        for name in os.listdir(fd):
            if not name.endswith(".sock"):
                continue
            try:
                os.kill(int(name[:-len(".sock")].rsplit("-", 1)[-1]), 0)
            except ProcessLookupError:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=fd)
            except (ValueError, OSError):
                continue

    def _accept(self) -> None:
        assert self._server is not None
        while not self._closed:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), name="ctxd-hook-job", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                if _peer_uid(conn) != os.getuid():
                    return  # another user: never read
                raw = _read_line(conn, time.monotonic() + SERVE_SECONDS)
                job = json.loads(raw) if raw else None
                answer = self.take(job) if isinstance(job, dict) else {"taken": False, "reason": "not a JSON object"}
                conn.settimeout(5)
                conn.sendall(json.dumps(answer).encode() + b"\n")
            except (OSError, ValueError):
                return
            except Exception:  # noqa: BLE001 - the hook then takes its checkpoint itself
                import logging

                logging.getLogger("ctxd").exception("a hook's checkpoint failed in the daemon")


def daemon_checkpoint(folders: Callable[[], list[Any]], job: dict[str, Any]) -> dict[str, Any]:
    """Take a hook's checkpoint in the daemon, when the job's folder is one of its workspaces
    (`folders()`: the open ones) and its state dir is the workspace's."""
    from ctxd.errors import CtxdError
    from ctxd.ghost import snapshots as ghost

    folder, state_dir = job.get("folder"), job.get("stateDir")
    if not isinstance(folder, str) or not isinstance(state_dir, str):
        return {"taken": False, "reason": "no folder"}
    wanted = (os.path.realpath(folder), os.path.realpath(state_dir))
    workspace = next((w for w in folders()
                      if (os.path.realpath(w.root), os.path.realpath(w.state_dir)) == wanted), None)
    if workspace is None:
        return {"taken": False, "reason": "not a workspace of this daemon"}
    settings = workspace.settings.ghost
    if settings.auto == "off":
        return {"taken": True, "skipped": "ghost.auto is off"}
    fields = {key: job.get(key) for key in ("thread", "trigger", "turn", "tool", "message")}
    if not isinstance(fields["thread"], str) or fields["trigger"] not in ("turn", "tool"):
        return {"taken": False, "reason": "no thread or trigger"}
    try:
        commit = ghost.snapshot(workspace.opened_root(), str(fields["message"] or ""),
                                settings=settings, trigger=str(fields["trigger"]),
                                thread=fields["thread"],
                                turn=fields["turn"] if isinstance(fields["turn"], dict) else None,
                                tool=fields["tool"] if isinstance(fields["tool"], dict) else None,
                                state_dir=workspace.state_dir)
    except CtxdError as error:  # the hook tries itself (and logs what it finds)
        return {"taken": False, "reason": error.message}
    return {"taken": True, "commit": {"id": commit["id"]}}
