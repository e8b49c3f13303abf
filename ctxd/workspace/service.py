"""The open workspace folders (`Service`) and the `Workspace` the handlers call: its reads and
its writes over one core (core.py)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ctxd import settings as settings_mod
from ctxd.errors import InvalidParams
from ctxd.workspace.core import UsageListener, is_folder, path_to_uri, uri_to_path
from ctxd.workspace.reads import WorkspaceReads
from ctxd.workspace.writes import WorkspaceWrites

log = logging.getLogger("ctxd")


class Workspace(WorkspaceReads, WorkspaceWrites):
    """One open workspace folder: what it reads (reads.py) and what it writes (writes.py)."""


class Service:
    """The set of open workspace folders."""

    def __init__(self, state_dir: Path | None = None, listener: UsageListener | None = None) -> None:
        self.state_dir = state_dir or settings_mod.default_state_dir()
        self.listener = listener
        self.init_options: dict[str, Any] = {}
        self._daemon_settings: tuple[dict[str, Any], settings_mod.Settings] | None = None
        self._workspaces: dict[str, Workspace] = {}
        self._lock = threading.Lock()
        self.on_open: Callable[[Workspace], None] | None = None

    @staticmethod
    def canonical(uri: str) -> str:
        return path_to_uri(uri_to_path(uri))

    def open_folder(self, uri: str, options: dict[str, Any] | None = None) -> Workspace:
        """The folder's workspace, opened if it is not yet. `options`: the opening editor's
        (`initializationOptions.ctxd`); None for ctxd's own tools, which take the folder as it is
        (or as the first editor configured the daemon). An editor that opens a folder already open
        configures it again: its options, and the config files as they are now (a restart reads
        them afresh, as when each editor had a daemon of its own)."""
        root = uri_to_path(uri)
        key = path_to_uri(root)
        with self._lock:
            workspace = self._workspaces.get(key)
            if workspace is not None and options is not None:
                workspace.configure(options)
            if workspace is None:
                if not is_folder(root):
                    raise InvalidParams(f"workspace: {uri} is not a folder")
                workspace = Workspace(key, root, self.state_dir, self.init_options if options is None else options,
                                      self.listener, daemon=self.daemon_settings())
                self._workspaces[key] = workspace
                for problem in workspace.problems:
                    log.warning("%s: %s", key, problem)
                if self.on_open is not None:
                    self.on_open(workspace)
            return workspace

    def daemon_settings(self) -> settings_mod.Settings:
        """The daemon's own settings, without any folder's `.ctxd.toml` (the user's config and the
        editor's options): read once for the options it was given."""
        known = self._daemon_settings
        if known is None or known[0] is not self.init_options:
            known = self._daemon_settings = (self.init_options, settings_mod.load_settings(None, self.init_options, []))
        return known[1]

    def close_folder(self, uri: str) -> None:
        try:
            key = self.canonical(uri)
        except InvalidParams:
            return
        with self._lock:
            workspace = self._workspaces.pop(key, None)
        if workspace is not None:
            workspace.close()

    def workspace(self, uri: str) -> Workspace:
        """The open workspace named by `uri`; anything else is refused (-32602)."""
        fast = self._workspaces.get(uri)  # clients repeat the URI they opened: skip re-parsing it
        if fast is not None:
            return fast
        try:
            key = self.canonical(uri)
        except InvalidParams:
            raise InvalidParams(f"workspace: {uri!r} is not an open workspace folder") from None
        with self._lock:
            workspace = self._workspaces.get(key)
        if workspace is None:
            raise InvalidParams(f"workspace: {uri} is not an open workspace folder")
        return workspace

    def folders(self) -> list[Workspace]:
        with self._lock:
            return list(self._workspaces.values())

    def close(self) -> None:
        with self._lock:
            workspaces, self._workspaces = list(self._workspaces.values()), {}
        for workspace in workspaces:
            try:
                workspace.close()
            except Exception:  # noqa: BLE001 - one store that fails to close never keeps the others open
                log.exception("%s: closing its store failed", workspace.uri)
