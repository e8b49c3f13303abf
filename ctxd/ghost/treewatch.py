"""In the daemon: which paths of a workspace changed since its last capture (a dirty set).

The daemon owns a `TreeWatch` (one per process that writes: the owner, or a daemon serving alone)
and hands it to its captures; everything else captures without one.

A capture normally reads the stat data of every tracked file (`git add --update`), which on a
large repository is most of its time. The daemon instead watches the workspace's folders with
inotify and hands a capture the paths that had an event since the capture before it, so that git
re-checks only those against the index that capture kept (`ctxd.ghost.capture`).

What makes the short pass as right as the full one:
- A barrier: before taking the dirty set, the capture touches a file of its own watched by the
  same inotify instance and waits until the reader has read that event. inotify queues an event
  in the writing system call, in order, so every write that returned before the capture started
  has been read by then (a turn's line comes after the writes before it).
- The set is only used with the index kept by this tracker's own previous capture (its stat
  stamp): an index kept by another process (a hook, another daemon, the daemon before a
  restart) was made before this set began, so the capture reads everything.
- Anything unsure means a full pass: a queue overflow (`IN_Q_OVERFLOW`; the folders are walked
  again for watches missed meanwhile), a watch that cannot be added (the inotify limit, more than
  `MAX_DIRS` folders or an eighth of the user's inotify watches: the watches are then given back),
  the workspace folder itself moved or deleted, a barrier not seen in time
  (its file is then retired: a late event of it can never release a later capture),
  more than `MAX_PATHS` changed paths, a full pass older than `FULL_PASS_SECONDS`, a capture that
  failed, and any platform without inotify.
- A folder created or moved in is watched (walked) before it is marked dirty as a whole, so a
  file written into it before its watch existed is still read; a folder moved out or deleted is
  marked as a whole too. `.git` folders are not watched: submodules are always re-checked.
- A file with other hard links gets a watch of its own (a write through another name reaches no
  folder watch of this tree); a new link count shows as an attribute change first.

Left to the periodic full pass: writes through a shared memory mapping after its file was
closed, and changes made on another machine of a network file system (inotify reports neither).
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import stat
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def _log() -> Any:
    """The daemon's logger (imported on first use: a hook's capture never logs here)."""
    import logging

    return logging.getLogger("ctxd")


MAX_DIRS = 20_000
"""Folders watched per workspace at most; a larger tree is always read in full."""
WATCH_SHARE = 8
"""And at most this fraction (1/8) of the user's inotify watches: the editor and other tools
need theirs (VS Code's file watcher stops working when the limit is reached)."""
MAX_PATHS = 2_000
"""More changed paths than this and a full pass (one stat pass) is cheaper than the list."""
FULL_PASS_SECONDS = 600.0
"""A full pass at least this often: it catches what inotify cannot report (see above)."""
BARRIER_SECONDS = 2.0
MAX_LINKED_FILES = 2_000

IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_CLOSE_WRITE = 0x8
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_UNMOUNT = 0x2000
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x1000000
IN_DONT_FOLLOW = 0x2000000
IN_EXCL_UNLINK = 0x4000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000

CHANGES = IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
DIR_MASK = CHANGES | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK
FILE_MASK = IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_DONT_FOLLOW
_EVENT = struct.Struct("iIII")

_libc: ctypes.CDLL | None = None
if sys.platform.startswith("linux"):
    try:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.inotify_init1.argtypes = [ctypes.c_int]
        _libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        _libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
    except (OSError, AttributeError):  # pragma: no cover - every Linux libc has inotify
        _libc = None


def max_dirs() -> int:
    """MAX_DIRS, or less where the user's inotify watch limit is low."""
    try:
        limit = int(Path("/proc/sys/fs/inotify/max_user_watches").read_text())
    except (OSError, ValueError):
        return MAX_DIRS
    return min(MAX_DIRS, limit // WATCH_SHARE)


class Unwatchable(Exception):
    """The tree cannot be watched completely: captures read it in full."""


@dataclass
class Ticket:
    """What one capture may rely on: `dirty` (repository paths; a folder's path covers all below
    it) changed since the index whose stat stamp is `kept` was captured; None: read everything."""

    dirty: list[str] | None
    kept: tuple[int, int, int] | None
    tracker: Tracker | None = None
    reason: str = ""
    serial: int = 0
    kept_token: str = ""  # the `token` the kept index was saved with
    token: str = ""  # saved with the index this capture keeps (`ctxd.ghost.capture`)

    def done(self, kept: tuple[int, int, int] | None) -> None:
        """The capture kept a new index (its stamp), or none (None): the next capture relies on it."""
        if self.tracker is not None:
            self.tracker.done(self, kept)

    def report(self, checked: list[str] | None) -> None:
        """Say in the daemon's log how the capture read the tree."""
        if self.tracker is None:
            return
        if checked is None:
            _log().info("%s: capture reads the whole tree (%s)", self.tracker.root,
                        self.reason or "the kept index is not this watch's")
        else:
            _log().info("%s: capture re-checks %d changed paths", self.tracker.root, len(checked))


NO_TICKET = Ticket(None, None, None, "no watcher")


@dataclass
class Tracker:
    """One workspace folder's watch: an inotify instance, its reader thread and its dirty set."""

    root: Path  # the folder watched (the work tree's top joined with the scope's prefix)
    prefix: str  # the scope's prefix: dirty paths are repository paths
    barrier_dir: Path
    _fd: int = -1
    _wds: dict[int, str] = field(default_factory=dict)  # watch -> folder relative to root ("" or "a/b/")
    _dirs: dict[str, int] = field(default_factory=dict)
    _files: dict[int, set[str]] = field(default_factory=dict)  # watch -> a hard-linked file's paths
    _dirty: set[str] = field(default_factory=set)
    _complete: bool = False  # the set holds every change since it was last taken
    _kept: tuple[int, int, int] | None = None
    _kept_token: str = ""
    _id: str = field(default_factory=lambda: os.urandom(8).hex())
    _broken: str | None = None
    _ready: bool = False
    _last_full: float = 0.0
    _issued: int = 0  # tickets handed out; `done` applies to the latest only
    _barrier: Path | None = None
    _barrier_wd: int = -1
    _barriers_seen: int = 0
    _lock: threading.Condition = field(default_factory=threading.Condition)
    _barrier_lock: threading.Lock = field(default_factory=threading.Lock)
    _stop_r: int = -1
    _stop_w: int = -1
    _max_dirs: int = field(default_factory=lambda: max_dirs())
    _thread: threading.Thread | None = None

    # --- life ---

    def start(self) -> None:
        if _libc is None:
            raise Unwatchable("no inotify on this platform")
        fd = _libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise Unwatchable(f"inotify_init1: {os.strerror(ctypes.get_errno())}")
        self._fd = fd
        self._stop_r, self._stop_w = os.pipe()
        self.barrier_dir.mkdir(parents=True, exist_ok=True)
        _clean_barriers(self.barrier_dir)
        self._new_barrier()
        self._thread = threading.Thread(target=self._run, name="ctxd-treewatch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._stop_w >= 0:
            os.write(self._stop_w, b"x")
        if self._thread is not None:
            self._thread.join(timeout=2)
        for fd in (self._fd, self._stop_r, self._stop_w):
            if fd >= 0:
                os.close(fd)
        self._fd = self._stop_r = self._stop_w = -1
        if self._barrier is not None:
            self._barrier.unlink(missing_ok=True)

    # --- what captures ask ---

    def begin(self) -> Ticket:
        """Wait until every event queued before now is read, then take the dirty set (the next
        one starts empty). The ticket's `dirty` is None when the capture must read everything."""
        if not self._barrier_passed():
            return Ticket(None, None, self, self._broken or "barrier")
        with self._lock:
            dirty, complete, kept, kept_token = self._dirty, self._complete, self._kept, self._kept_token
            self._dirty, self._kept, self._kept_token = set(), None, ""
            self._complete = self._ready and self._broken is None
            self._issued += 1
            ticket = Ticket(None, kept, self, "", self._issued, kept_token, f"{os.getpid()}-{self._id}-{self._issued}")
            if self._broken is not None:
                ticket.reason = self._broken
            elif not complete or kept is None:
                ticket.reason = "no set since the last kept index"
            elif len(dirty) > MAX_PATHS:
                ticket.reason = f"{len(dirty)} paths changed"
            elif time.monotonic() - self._last_full > FULL_PASS_SECONDS:
                ticket.reason = "periodic full pass"
            else:
                ticket.dirty = sorted(dirty)
            return ticket

    def done(self, ticket: Ticket, kept: tuple[int, int, int] | None) -> None:
        with self._lock:
            if ticket.serial != self._issued:
                return
            self._kept, self._kept_token = kept, ticket.token if kept is not None else ""
            if ticket.dirty is None and kept is not None:
                self._last_full = time.monotonic()

    def _barrier_passed(self) -> bool:
        if self._broken is not None or self._barrier is None:
            return False
        with self._barrier_lock:
            with self._lock:
                target = self._barriers_seen + 1
            try:
                os.utime(self._barrier)
            except OSError as error:
                self._break(f"barrier: {error}")
                return False
            deadline = time.monotonic() + BARRIER_SECONDS
            with self._lock:
                while self._barriers_seen < target and self._broken is None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._lock.wait(left)
                else:
                    return self._broken is None
            # Not seen in time (the reader is walking a large tree, say). Its event, read later,
            # must never release a later capture early: that file is retired for a new one.
            try:
                self._new_barrier()
            except (OSError, Unwatchable) as error:
                self._break(f"barrier: {error}")
            return False

    def _new_barrier(self) -> None:
        old, old_wd = self._barrier, self._barrier_wd
        barrier = self.barrier_dir / f"barrier-{os.getpid()}-{os.urandom(6).hex()}"
        barrier.touch()
        wd = self._add(barrier, IN_ATTRIB | IN_DONT_FOLLOW)
        if wd < 0:
            raise Unwatchable(f"cannot watch {barrier}")
        with self._lock:
            self._barrier, self._barrier_wd, self._barriers_seen = barrier, wd, 0
        if old is not None:
            assert _libc is not None
            _libc.inotify_rm_watch(self._fd, old_wd)
            old.unlink(missing_ok=True)

    # --- the reader thread ---

    def _run(self) -> None:
        try:
            self._walk("")
            from ctxd.ghost.gitstore import fan_out

            fan_out(self.barrier_dir.parent)  # the store's
            with self._lock:
                self._ready = True
                self._complete = False  # what happened during the walk is unknown: a full pass first
            poller = select.poll()
            poller.register(self._fd, select.POLLIN)
            poller.register(self._stop_r, select.POLLIN)
            while True:
                ready = {fd for fd, _ in poller.poll()}
                if self._stop_r in ready:
                    return
                try:
                    data = os.read(self._fd, 256 * 1024)
                except BlockingIOError:
                    continue
                self._handle(data)
        except Unwatchable as error:
            self._give_up(str(error))
        except Exception as error:  # noqa: BLE001 - a broken watcher only means full passes
            _log().exception("watching %s failed", self.root)
            self._give_up(f"watcher failed: {error}")

    def _give_up(self, reason: str) -> None:
        """A broken tracker gives its folders' and files' watches back to the user's budget at
        once (this thread is the only one that adds them), then says it is broken: whoever sees
        it broken sees them given back."""
        assert _libc is not None
        try:
            for wd in [*self._wds, *self._files]:
                _libc.inotify_rm_watch(self._fd, wd)
            self._wds.clear()
            self._dirs.clear()
            self._files.clear()
        finally:
            self._break(reason)

    def _break(self, reason: str) -> None:
        with self._lock:
            if self._broken is None:
                _log().info("%s: captures read the whole tree (%s)", self.root, reason)
                self._broken = reason
            self._lock.notify_all()

    def _handle(self, data: bytes) -> None:
        offset, barrier = 0, -1
        while offset + _EVENT.size <= len(data):
            wd, mask, _cookie, size = _EVENT.unpack_from(data, offset)
            name = data[offset + _EVENT.size:offset + _EVENT.size + size].split(b"\0", 1)[0]
            offset += _EVENT.size + size
            if wd == self._barrier_wd:
                barrier = wd if mask & IN_ATTRIB else barrier
                continue
            if wd not in self._wds and wd not in self._files and not mask & IN_Q_OVERFLOW:
                continue  # a retired barrier's, or a watch removed by a move
            self._event(wd, mask, os.fsdecode(name))
        if barrier >= 0:
            with self._lock:
                if barrier == self._barrier_wd:  # not retired meanwhile (`_new_barrier`)
                    self._barriers_seen += 1
                    self._lock.notify_all()

    def _event(self, wd: int, mask: int, name: str) -> None:
        if mask & IN_Q_OVERFLOW:
            with self._lock:
                self._complete = False
            self._walk("")  # folders made meanwhile have no watch yet
            return
        if mask & IN_UNMOUNT:
            raise Unwatchable("the file system was unmounted")
        if wd in self._files:
            if mask & IN_IGNORED:
                del self._files[wd]
            else:
                for path in self._files[wd]:
                    self._mark(path)
            return
        folder = self._wds.get(wd)
        if folder is None:
            return  # a watch removed by a move: its folder was marked as a whole
        if mask & IN_IGNORED:
            self._forget(folder, wd)
            return
        if mask & (IN_DELETE_SELF | IN_MOVE_SELF):
            if folder == "":
                raise Unwatchable("the workspace folder was moved or deleted")
            self._mark(folder)
            return
        if not name or name == ".git":
            if name == ".git" and folder:  # a nested repository or submodule came or went
                self._mark(folder.rstrip("/"))
            return
        path = folder + name
        if mask & IN_ISDIR:
            if mask & (IN_MOVED_FROM | IN_DELETE):
                self._unwatch(path + "/")
            elif mask & (IN_CREATE | IN_MOVED_TO):
                self._unwatch(path + "/")
                self._walk(path + "/")  # watched first, then marked: nothing written in it is missed
            self._mark(path + "/")
            return
        if mask & (IN_CREATE | IN_MOVED_TO | IN_ATTRIB):
            self._watch_if_linked(path)
        self._mark(path)

    def _mark(self, path: str) -> None:
        with self._lock:
            self._dirty.add(self.prefix + path)

    # --- watches ---

    def _add(self, path: Path, mask: int) -> int:
        assert _libc is not None
        wd = int(_libc.inotify_add_watch(self._fd, os.fsencode(path), mask))
        if wd < 0:
            code = ctypes.get_errno()
            if code in (errno.ENOENT, errno.ENOTDIR, errno.EACCES):
                return -1
            raise Unwatchable(f"inotify_add_watch {path}: {os.strerror(code)}")
        return wd

    def _walk(self, start: str) -> None:
        """Watch `start` ("" is the root, else "a/b/") and every folder below it (one watched
        already keeps its watch: inotify gives the same one back)."""
        pending = [start]
        while pending:
            rel = pending.pop()
            here = self.root / rel if rel else self.root
            wd = self._add(here, DIR_MASK)
            if wd < 0:
                if rel == "":
                    raise Unwatchable(f"cannot watch {self.root}")
                continue  # gone meanwhile: its parent's event marks it
            self._wds[wd] = rel
            self._dirs[rel] = wd
            if len(self._dirs) > self._max_dirs:
                raise Unwatchable(f"more than {self._max_dirs} folders")
            try:
                with os.scandir(here) as entries:
                    for entry in entries:
                        if entry.is_dir(follow_symlinks=False):
                            if entry.name != ".git":
                                pending.append(f"{rel}{entry.name}/")
                        elif entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_nlink > 1:
                            self._watch_file(f"{rel}{entry.name}")
            except OSError:
                continue  # gone or unreadable: marked by its parent's event

    def _watch_if_linked(self, path: str) -> None:
        try:
            st = os.lstat(self.root / path)
        except OSError:
            return
        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            self._watch_file(path)

    def _watch_file(self, path: str) -> None:
        if len(self._files) >= MAX_LINKED_FILES:
            raise Unwatchable(f"more than {MAX_LINKED_FILES} hard-linked files")
        wd = self._add(self.root / path, FILE_MASK)
        if wd >= 0:
            self._files.setdefault(wd, set()).add(path)

    def _unwatch(self, start: str) -> None:
        """Forget the watches of `start` and below (a folder moved: its watches would name the old path)."""
        assert _libc is not None
        for rel in [r for r in self._dirs if r.startswith(start)]:
            wd = self._dirs.pop(rel)
            self._wds.pop(wd, None)
            _libc.inotify_rm_watch(self._fd, wd)
        for wd, paths in list(self._files.items()):
            paths -= {p for p in paths if p.startswith(start)}
            if not paths:
                del self._files[wd]
                _libc.inotify_rm_watch(self._fd, wd)

    def _forget(self, folder: str, wd: int) -> None:
        self._wds.pop(wd, None)
        if self._dirs.get(folder) == wd:
            del self._dirs[folder]
        if folder == "":
            raise Unwatchable("the workspace folder's watch was removed")


def _clean_barriers(folder: Path) -> None:
    """Remove the barrier files of daemons that are gone (`barrier-<pid>-<random>`)."""
    for path in folder.glob("barrier-*"):
        try:
            pid = int(path.name.split("-")[1])
            os.kill(pid, 0)
        except ProcessLookupError:
            path.unlink(missing_ok=True)
        except (ValueError, IndexError, OSError):
            continue


class TreeWatch:
    """A daemon's file watches, one tracker per folder of a store it captures: owned by the daemon
    (`Daemon.tree_watch`) and handed to each of its captures (`CaptureOptions.watch`). A process
    without one (a hook alone, the command line) reads the whole tree at every capture."""

    def __init__(self) -> None:
        self._trackers: dict[tuple[str, str], Tracker] = {}
        self._guard = threading.Lock()
        self._closed = False

    def ticket(self, store: Path, key: str, top: Path, prefix: str) -> Ticket:
        """The ticket for a capture of the scope `prefix` of work tree `top` (store `store`, folder
        key `key`): the first call starts watching it (that capture, and the next, read everything)."""
        with self._guard:
            if self._closed:
                return NO_TICKET
            tracker = self._trackers.get((str(store), key))
            if tracker is None:
                root = top / prefix if prefix else top
                tracker = Tracker(root=root, prefix=prefix, barrier_dir=store / "ctxd-watch")
                try:
                    tracker.start()
                except (Unwatchable, OSError) as error:
                    _log().info("%s: no file watch (%s): captures read the whole tree", root, error)
                    tracker._broken = str(error)
                self._trackers[(str(store), key)] = tracker
        return tracker.begin()

    def release(self, folder: Path) -> None:
        """Stop watching a workspace folder that was closed."""
        real = os.path.realpath(folder)
        with self._guard:
            found = [k for k, t in self._trackers.items() if os.path.realpath(t.root) == real]
            stopped = [self._trackers.pop(k) for k in found]
        for tracker in stopped:
            tracker.stop()

    def close(self) -> None:
        """Stop every watch; later captures read the whole tree."""
        with self._guard:
            self._closed = True
            trackers = list(self._trackers.values())
            self._trackers.clear()
        for tracker in trackers:
            tracker.stop()
