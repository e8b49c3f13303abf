"""A `ctxd acp` proxy's records, kept on disk until an owner has stored them (docs/acp.md).

The proxy hands its session to the owner as records (`ctxd/acp/record`), in order, from one
thread, never on the messages' way. Each record is first appended to the proxy's spool,
`<state dir>/acp/spool/<proxy id>.jsonl` (one line: the folder and the record's params), then
sent; the spool is emptied once every record in it was answered. While no owner can be reached
(one died and none could start) the records wait there, in order, and go once one answers. The
proxy holds an exclusive flock on its spool while it runs: a spool nobody holds is a proxy that
ended (or was killed) with records unsent, and the next owner stores them
(`take_ended`), at its start and when a proxy opens a session with it.

Each record carries its proxy's id and its number (`proxy`, `seq`, from 1), and a thread keeps
the last number it stored of each proxy (`WorkspaceWrites.record_followed`): a record sent twice
(its answer lost, an owner killed while it stored a spool) is stored once.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ctxd import acplink, ownerlink

FOLDER = "spool"
MAX_LINE_BYTES = 64 * 1024 * 1024
"""A spooled record longer than this is not read back (nothing the proxy sends is this long)."""


def folder(state_dir: Path, create: bool = True) -> Path:
    """`<state dir>/acp/spool`, private to this user; raises OSError as `acplink.folder`."""
    return ownerlink.private_dir(acplink.folder(state_dir, create) / FOLDER, create=create)


class Spool:
    """One proxy's spool, written by it alone (under its flock); made at its first record."""

    def __init__(self, state_dir: Path, proxy: str) -> None:
        self.state_dir = state_dir
        self.proxy = proxy
        self.path: Path | None = None
        self._fd: int | None = None
        self._lock = threading.Lock()
        self._written = 0  # the last record number appended
        self._done = 0  # the last record number answered (every one before it too)

    def append(self, folder_path: Path, params: dict[str, Any]) -> None:
        """Keep one record (its `seq` the next number). Raises OSError when the spool cannot be
        written (the record is sent all the same)."""
        line = (json.dumps({"folder": str(folder_path), "params": params}, separators=(",", ":")) + "\n").encode()
        with self._lock:
            if os.write(self._open(), line) != len(line):  # a full disk: the line is cut short (passed over)
                raise OSError(errno.ENOSPC, "the spool is full")
            self._written = int(params["seq"])

    def answered(self, seq: int) -> None:
        """Record `seq` (and every one before it) is stored: an empty spool is emptied on disk."""
        with self._lock:
            self._done = max(self._done, seq)
            if self._fd is not None and self._done >= self._written:
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, 0)

    @property
    def waiting(self) -> int:
        """Records kept and not answered yet."""
        with self._lock:
            return max(0, self._written - self._done)

    def close(self) -> None:
        """The proxy ends: an empty spool goes, one with records unanswered stays for the next
        owner (its flock goes with this process)."""
        with self._lock:
            if self._fd is None:
                return
            if self._done >= self._written and self.path is not None:
                with contextlib.suppress(OSError):
                    self.path.unlink()
            os.close(self._fd)
            self._fd = None

    def _open(self) -> int:
        if self._fd is None:
            import fcntl

            # Made under another name and locked before it gets its own: an owner looking for
            # spools never takes one whose proxy has not locked it yet.
            made = folder(self.state_dir) / f"{self.proxy}.new"
            fd = os.open(made, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                path = made.with_suffix(".jsonl")
                os.rename(made, path)
            except OSError:
                os.close(fd)
                made.unlink(missing_ok=True)
                raise
            self.path, self._fd = path, fd
        return self._fd


Store = Callable[[Path, dict[str, Any]], None]
"""Stores one spooled record (the owner's `ctxd/acp/record`); raises to keep the spool for later."""


def take_ended(state_dir: Path, store: Store, log: Callable[[str], None]) -> int:
    """Store the records of every spool no proxy holds, in their order, and remove the spool; a
    spool whose record could not be stored (the owner is stopping, its disk is full) stays for
    the next time. Returns the records stored."""
    try:
        where = folder(state_dir, create=False)
    except OSError:
        return 0
    spools, unnamed = sorted(where.glob("*.jsonl")), list(where.glob("*.new"))
    for path in unnamed:  # a proxy that died while it made its spool: it wrote nothing there
        with _held(path) as fd:
            if fd is not None:
                path.unlink(missing_ok=True)
    stored = 0
    for path in spools:
        with _held(path) as fd:
            if fd is None:
                continue  # its proxy runs (it sends them itself), or not a spool of ours
            try:
                for record in _records(fd):
                    store(Path(record["folder"]), record["params"])
                    stored += 1
            except Exception as error:  # noqa: BLE001 - kept for the next owner
                log(f"{path.name}: records kept for later: {type(error).__name__}: {error}")
                continue
            path.unlink(missing_ok=True)
            log(f"{path.name}: the records a proxy left were stored")
    return stored


@contextlib.contextmanager
def _held(path: Path) -> Iterator[int | None]:
    """The spool open and flocked, when it is a regular file of this user's that no one holds."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        yield None
        return
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            yield None
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            yield None
            return
        yield fd
    finally:
        os.close(fd)


def _records(fd: int) -> Iterator[dict[str, Any]]:
    """The spool's records, line by line; a line that is not one (cut short by a crash, too
    long) is passed over."""
    with os.fdopen(os.dup(fd), "rb") as handle:
        skipping = False
        while line := handle.readline(MAX_LINE_BYTES + 1):
            whole = line.endswith(b"\n")
            if skipping or not whole:
                skipping = not whole  # inside a line too long, up to its end
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("folder"), str) \
                    and isinstance(record.get("params"), dict):
                yield record
