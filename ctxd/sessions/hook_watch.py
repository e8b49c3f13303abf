"""In the daemon, beside the session follower: what ctxd's hooks and status line wrote, applied.

- A checkpoint a hook took: the workspace's snapshot store gets a new `last-<scope>.json`; the
  clients are told with `ctxd/ghostChanged` (they list the snapshots again).
- The exact usage `ctxd statusline` handed over (`<state dir>/hooks/usage/<agent>-<id>.json`): it
  becomes the followed thread's reported usage (`ctxd/usageChanged` follows).
  Every state dir an open folder uses is watched (the daemon's, and a trusted `.ctxd.toml`'s own).
- A compaction a hook noted (`compactedAt` in `<state dir>/hooks/sessions/<thread>.json`): the
  thread's baseline from before it is dropped at once (`Workspace.agent_compacted`).

watchdog's observer wakes the worker on a write in those folders; a slow tick re-checks the
files' stamps anyway (a folder created later, a lost event), so a missed event costs a delay.
Files present when the daemon starts are old news: only what changes afterwards is acted on.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ctxd.errors import CtxdError
from ctxd.places import default_state_dir, git_common_dir, hooks_dir, marks_dir, note_state_dir, plain_store, usage_dir
from ctxd.sessions.follower import stop_observer
from ctxd.workspace import Service, Workspace

log = logging.getLogger("ctxd")

TICK_SECONDS = 2.0
WRITE_EVENTS = frozenset({"created", "modified", "moved", "closed", "deleted"})
Stamps = dict[str, tuple[int, int, int]]


def snapshot_store(root: Path, state_dir: Path) -> Path:
    """Where a workspace folder's snapshots live (`ctxd.ghost.gitstore`), found without git."""
    for candidate in (root, *root.parents):
        if (candidate / ".git").exists():
            common = git_common_dir(candidate)
            if common is not None:
                return common / "ctxd" / "store"
            break
    return plain_store(state_dir, root)


def _stamps(folder: Path, prefix: str) -> Stamps:
    found: Stamps = {}
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.startswith(prefix) and entry.name.endswith(".json"):
                    st = entry.stat(follow_symlinks=False)
                    found[entry.path] = (st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        pass
    return found


def _read(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            value = json.loads(handle.read(65536))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _report(workspace: Workspace, thread: str, used: int) -> None:
    """The fill the status line wrote, as the thread's usage."""
    workspace.agent_reported(thread, used)


def _inside(path: Any, root: Path) -> bool:
    if not isinstance(path, str):
        return True  # no cwd said: any workspace that follows the thread
    normal = os.path.normpath(path)
    return normal == str(root) or normal.startswith(str(root).rstrip(os.sep) + os.sep)


class HookWatcher:
    def __init__(self, service: Service, snapshots_changed: Callable[[str], None]) -> None:
        self.service = service
        self.snapshots_changed = snapshots_changed
        self._wake = threading.Condition()
        self._poked = False
        self._stop = False
        self._observer: Any = None
        self._handler: Any = None
        self._watched: set[str] = set()
        self._stores: dict[str, Stamps] = {}  # workspace uri -> its store's last-*.json
        self._usage: dict[Path, Stamps] = {}  # per state dir: its hooks/usage/<agent>-*.json
        self._marks: dict[Path, Stamps] = {}  # per state dir: its hooks/sessions/*.json
        self._compacted: dict[str, Any] = {}  # mark file -> its compactedAt
        self._worker: threading.Thread | None = None
        self._noted: set[str] = set()  # workspace uris whose state dir the hooks can find

    @property
    def usage_dir(self) -> Path:
        return usage_dir(self.service.state_dir)

    @property
    def marks_dir(self) -> Path:
        return marks_dir(self.service.state_dir)

    def state_dirs(self, workspaces: list[Workspace]) -> list[Path]:
        """The daemon's state dir, and every other one an open folder keeps its ledger in (a
        trusted `.ctxd.toml`'s `state_dir`): a folder's hooks write in its own (`ctxd.places`)."""
        found = [self.service.state_dir]
        for workspace in workspaces:
            if workspace.state_dir not in found:
                found.append(workspace.state_dir)
        return found

    def start(self) -> None:
        for folder in (self.usage_dir, self.marks_dir):
            try:
                hooks_dir(folder.parent.parent)  # the state dir's and hooks/ checked and made 0700
                folder.mkdir(mode=0o700, exist_ok=True)
            except OSError as error:
                log.warning("cannot create %s: %s", folder, error)
        try:
            from watchdog.events import FileSystemEvent, FileSystemEventHandler
            from watchdog.observers import Observer

            watcher = self

            class Handler(FileSystemEventHandler):
                def on_any_event(self, event: FileSystemEvent) -> None:
                    if event.event_type in WRITE_EVENTS:  # not our own reads ("opened", "closed_no_write")
                        watcher.poke()

            self._handler = Handler()
            self._observer = Observer()
            self._observer.start()
        except Exception as error:  # noqa: BLE001 - without events the tick still checks
            log.warning("hook watcher without file events (%s): checking every %g s", error, TICK_SECONDS)
            self._observer = None
        self.check()  # what is there now is the starting point
        worker = threading.Thread(target=self._run, name="ctxd-hooks", daemon=True)
        worker.start()
        self._worker = worker  # (started first: `stop` may run meanwhile, and joins what it sees)
        with self._wake:
            stopped = self._stop
        if stopped:  # the daemon closed while this started: `stop` may have seen no observer yet
            stop_observer(self._observer)

    def stop(self) -> None:
        with self._wake:
            self._stop = True
            self._wake.notify_all()
        stop_observer(self._observer)
        if self._worker is not None:  # a check under way ends before the stores close
            self._worker.join(timeout=5)

    def poke(self) -> None:
        with self._wake:
            self._poked = True
            self._wake.notify_all()

    def _run(self) -> None:
        while True:
            with self._wake:
                if not (self._poked or self._stop):
                    self._wake.wait(TICK_SECONDS)
                if self._stop:
                    return
                self._poked = False
            try:
                self.check()
            except Exception:  # noqa: BLE001 - the worker outlives any bug
                log.exception("watching the hooks' files failed")

    def _watch(self, folder: Path) -> None:
        if self._observer is None or str(folder) in self._watched or not folder.is_dir():
            return
        try:
            self._observer.schedule(self._handler, str(folder), recursive=False)
            self._watched.add(str(folder))
        except Exception as error:  # noqa: BLE001 - e.g. the inotify watch limit: the tick checks
            if not self._stop:  # (while stopping, the observer is already closed: nothing to say)
                log.warning("cannot watch %s (%s)", folder, error)

    # --- what changed ---

    def check(self) -> None:
        workspaces = self.service.folders()
        state_dirs = self.state_dirs(workspaces)
        self._note_state_dirs(workspaces)
        self._check_snapshots(workspaces)
        for state_dir in state_dirs:
            self._check_marks(state_dir, workspaces)  # before the usage: a compaction makes an old report stale
        for state_dir in state_dirs:
            self._check_usage(state_dir, workspaces)

    def _note_state_dirs(self, workspaces: list[Workspace]) -> None:
        """Tell the hooks (which know only the default state dir) where this daemon keeps each workspace."""
        for workspace in workspaces:
            if workspace.uri in self._noted:
                continue
            try:
                note_state_dir(default_state_dir(), workspace.root, workspace.state_dir)
                self._noted.add(workspace.uri)
            except OSError as error:
                log.warning("%s: the hooks cannot be told of state dir %s (%s)", workspace.uri,
                            workspace.state_dir, error)
                self._noted.add(workspace.uri)

    def _check_snapshots(self, workspaces: list[Workspace]) -> None:
        for workspace in workspaces:
            store = snapshot_store(workspace.root, workspace.state_dir)
            self._watch(store)
            now = _stamps(store, "last-")
            before = self._stores.get(workspace.uri)
            self._stores[workspace.uri] = now
            if before is not None and now != before:
                self.snapshots_changed(workspace.uri)

    def _check_marks(self, state_dir: Path, workspaces: list[Workspace]) -> None:
        marks = marks_dir(state_dir)
        self._watch(marks)
        now = _stamps(marks, "")
        before = self._marks.get(state_dir)
        self._marks[state_dir] = now
        first = before is None
        for path, stamp in now.items():
            if before is not None and before.get(path) == stamp:
                continue
            mark = _read(path)
            when = mark.get("compactedAt")
            if self._compacted.get(path) == when:
                continue
            self._compacted[path] = when
            if first or when is None or not isinstance(mark.get("thread"), str):
                continue
            for workspace in workspaces:
                self._apply(workspace, mark["thread"], None, lambda w, t: w.agent_compacted(t))

    def _check_usage(self, state_dir: Path, workspaces: list[Workspace]) -> None:
        usage = usage_dir(state_dir)
        self._watch(usage)
        now = _stamps(usage, "")  # `<agent>-<session id>.json` (a pending `.<name>.tmp` never ends in .json)
        before = self._usage.get(state_dir)
        self._usage[state_dir] = now
        if before is None:
            return
        for path, stamp in now.items():
            if before.get(path) == stamp:
                continue
            record = _read(path)
            used, output, thread = record.get("usedTokens"), record.get("outputTokens", 0), record.get("thread")
            if not isinstance(thread, str) or not _count(used) or not _count(output):
                continue
            used += output  # ctxd's one rule for a followed fill counts the reply too (docs/sessions.md)
            for workspace in workspaces:
                self._apply(workspace, thread, record.get("cwd"), functools.partial(_report, used=used))

    def _apply(self, workspace: Workspace, thread: str, cwd: Any, action: Callable[[Workspace, str], Any]) -> None:
        if not _inside(cwd, workspace.root):
            return
        try:
            if workspace.exists(thread):
                action(workspace, thread)
        except CtxdError as error:
            log.info("%s: %s not updated from its hooks: %s", workspace.uri, thread, error.message)
