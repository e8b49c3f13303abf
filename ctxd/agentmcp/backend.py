"""What `ctxd mcp` answers, without the MCP SDK: the workspace it serves, the agent session it
serves, and its six tools as functions returning plain dicts.

It works on the workspace's store and snapshots in its own process, so a daemon need not run.
It follows the workspace's agent sessions itself (the daemon's follower, restricted to this one
folder), so that what the agent's own compaction replaced is kept even when no daemon is running;
a change a daemon has already mirrored is left alone (see `_Mirror`).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from ctxd.agentmcp import limits
from ctxd.errors import CtxdError, InvalidParams
from ctxd.ledger import recall as history
from ctxd.ledger.store import database_path
from ctxd.protocol.items import validate_items
from ctxd.sessions import discovery
from ctxd.settings import default_state_dir, load_settings
from ctxd.workspace import FOLLOWED_AGENTS, Service, Workspace, followed_agent, path_to_uri

log = logging.getLogger("ctxd")

SESSION_ENV = "CTXD_SESSION"
# How long a change seen in a session file is left for a running daemon to mirror first.
DAEMON_GRACE_SECONDS = 1.2
FOLLOW_WAIT_SECONDS = 3.0


def enclosing_workspace(folder: Path, state_dir: Path) -> Path:
    """The workspace `folder` is in: the nearest enclosing folder ctxd has a store for, else the
    git root, else the folder itself."""
    folder = folder.resolve()
    chain = [folder, *folder.parents]
    for candidate in chain:
        if database_path(state_dir, candidate).exists():
            return candidate
    for candidate in chain:
        if (candidate / ".git").exists():
            return candidate
    return folder


def _kept(items: list[dict[str, Any]]) -> int:
    """How many of a session's items a mirror stores (`Workspace.mirror`: valid, not system)."""
    count = 0
    for item in items:
        if item.get("type") == "message" and item.get("role") == "system":
            continue
        try:
            validate_items([item])
        except InvalidParams:
            continue
        count += 1
    return count


class Backend:
    """The served workspace and session, and the tools."""

    def __init__(self, cwd: Path, state_dir: Path | None = None, session: str | None = None,
                 follow: bool = True) -> None:
        self.state_dir = state_dir or default_state_dir()
        self.root = enclosing_workspace(cwd, self.state_dir)
        self.service = Service(self.state_dir)
        self.workspace: Workspace = self.service.open_folder(path_to_uri(self.root))
        self.named_session = session
        self.bridge: Any = None
        if follow:
            self._start_following()

    def _start_following(self) -> None:
        from ctxd.sessions.bridge import SessionBridge

        settings = load_settings(self.root, None, [])
        bridge = SessionBridge(self.service, settings, lambda uri: None)
        self.mirror = _Mirror(self.workspace, bridge._update)
        bridge.follower.on_update = self.mirror
        bridge.follower.set_folders([self.root])
        bridge.follower.scan_once()  # every session of this folder, read now, on this thread
        bridge.start([self.root])
        self.bridge = bridge

    def close(self) -> None:
        """Mirror what the follower has still to read (the agent may have written its last lines
        just before closing the server), then stop."""
        if self.bridge is not None:
            follower = self.bridge.follower
            self.mirror.closing = True  # no more waiting for a daemon: mirror now
            for source in follower.sources:  # a session file new or grown since it was last read
                if source.enabled:
                    for path in discovery.session_files(source):
                        follower.touch(path)
            self.bridge.wait_idle(FOLLOW_WAIT_SECONDS)
            self.bridge.stop()
        self.service.close()

    # --- which session ---------------------------------------------------------------------------

    def thread(self) -> str:
        """The session served: the one CTXD_SESSION names, else the newest followed session of
        the workspace (the one the follower saw last active, else the store's newest)."""
        if self.bridge is not None:
            self.bridge.wait_idle(FOLLOW_WAIT_SECONDS)
        if self.named_session:
            if followed_agent(self.named_session) is None or not self.named_session.partition(":")[2]:
                raise InvalidParams(f"{SESSION_ENV}={self.named_session!r} is not an agent session's thread "
                                    f"(expected {' or '.join(f'{a}:<session id>' for a in FOLLOWED_AGENTS)})")
            return self.named_session
        listed = [t["thread"] for t in self.workspace.threads()["threads"] if followed_agent(t["thread"]) is not None]
        if not listed and self.bridge is not None:  # read but not stored yet
            seen = sorted(self.bridge.follower.sessions(self.root), key=lambda s: s.last_activity or "")
            listed = [session.thread for session in reversed(seen) if session.id]
        if not listed:
            raise InvalidParams(f"no Codex or Claude Code session of {self.root} is known to ctxd yet; set "
                                f"{SESSION_ENV} to the session's thread (such as claude:<session id>)")
        return listed[0]  # `threads()` lists the newest activity first

    # --- the tools -------------------------------------------------------------------------------

    def context_usage(self) -> dict[str, Any]:
        thread = self.thread()
        breakdown = self.workspace.breakdown(thread)
        usage = breakdown["usage"]
        return {"thread": thread, "agent": followed_agent(thread) or "client", "model": breakdown.get("model"),
                "usedTokens": usage["usedTokens"], "contextWindow": usage["contextWindow"],
                "percent": usage["percent"], "compactAt": usage["autoCompactLimit"], "cost": breakdown.get("cost"),
                "categories": breakdown["categories"], "cache": breakdown.get("cache")}

    def recall(self, query: str, limit: int = 5, scope: str = "thread") -> dict[str, Any]:
        _whole_number("limit", limit, 1, limits.MAX_LIMIT)
        if scope not in ("thread", "workspace"):
            raise InvalidParams(f"scope: must be 'thread' or 'workspace', not {scope!r}")
        if not isinstance(query, str) or not query.strip():
            raise InvalidParams("query: give the words to search for")
        if len(query) > limits.MAX_QUERY_CHARS:
            raise InvalidParams(f"query: at most {limits.MAX_QUERY_CHARS} characters, not {len(query)}")
        return history.recall(self.workspace.store, self.thread(), query, limit, scope)  # type: ignore[arg-type]

    def history_item(self, seq: int, thread: str | None = None) -> dict[str, Any]:
        _whole_number("seq", seq, 1, limits.MAX_SEQ)
        if thread is not None and (not isinstance(thread, str) or not 1 <= len(thread) <= limits.MAX_THREAD_CHARS):
            raise InvalidParams(f"thread: must be a thread's name (1 to {limits.MAX_THREAD_CHARS} characters)")
        return history.item(self.workspace.store, thread or self.thread(), seq)

    def checkpoints(self, limit: int = 20) -> dict[str, Any]:
        from ctxd.ghost import snapshots as ghost

        _whole_number("limit", limit, 1, limits.MAX_CHECKPOINTS)
        found = ghost.list_snapshots(self.workspace.opened_root(), state_dir=self.state_dir)
        return {"checkpoints": found[:limit]}

    def checkpoint(self, label: str | None = None) -> dict[str, Any]:
        """A snapshot of the working tree (an agent session's own ledger records nothing of it)."""
        from ctxd.ghost import snapshots as ghost

        if label is not None and (not isinstance(label, str) or len(label) > limits.MAX_LABEL_CHARS):
            raise InvalidParams(f"label: must be text of at most {limits.MAX_LABEL_CHARS} characters")
        return ghost.snapshot(self.workspace.opened_root(), label, settings=self.workspace.settings.ghost,
                              state_dir=self.state_dir)

    def restore_checkpoint(self, id: str, confirm: bool = False) -> dict[str, Any]:
        """The files only: the conversation is the agent's own. Without `confirm`, a preview."""
        from ctxd.ghost import snapshots as ghost

        if not isinstance(id, str) or not 1 <= len(id) <= limits.MAX_ID_CHARS:
            raise InvalidParams("id: give the id of a checkpoint (see the checkpoints tool)")
        if not isinstance(confirm, bool):
            raise InvalidParams(f"confirm: must be true or false, not {confirm!r}")
        result = ghost.restore(self.workspace.opened_root(), id, settings=self.workspace.settings.ghost,
                               dry_run=not confirm, state_dir=self.state_dir)
        if not confirm:
            return {"preview": {"restored": result["restored"], "removed": result["removed"]}}
        return {"restored": result["restored"], "removed": result["removed"], "undoId": result.get("undoId")}


def _whole_number(name: str, value: Any, low: int, high: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise InvalidParams(f"{name}: must be a whole number from {low} to {high}, not {shown}")


class _Mirror:
    """The follower's updates into the store, unless a daemon (following the same session) has
    mirrored them already. A change is left DAEMON_GRACE_SECONDS for a daemon to go first; then
    new items are appended only where the store's active history is where this reader was before
    them, and anything else is mirrored whole (`Workspace.mirror` leaves an equal history as it is)."""

    def __init__(self, workspace: Workspace, mirror: Any) -> None:
        self.workspace = workspace
        self.mirror = mirror
        self.closing = False

    def _active(self, thread: str) -> int:
        with self.workspace.store.reading() as db:
            return int(db.execute("SELECT count(*) FROM items WHERE thread = ? AND archived IS NULL",
                                  (thread,)).fetchone()[0])

    def __call__(self, update: Any) -> None:
        session, change = update.session, update.change
        thread = session.thread
        try:
            total = _kept(session.items)
            replace = update.new or change.replaced
            added = 0 if replace else _kept(change.appended)
            deadline = time.monotonic() + DAEMON_GRACE_SECONDS
            while self._active(thread) != total and time.monotonic() < deadline and not self.closing:
                time.sleep(0.1)
            active = self._active(thread)
            if not replace and added:
                if active == total:
                    return  # a daemon mirrored it (and its usage)
                if active != total - added:
                    update.new = True  # the store is elsewhere: take the session whole
            self.mirror(update)
        except CtxdError as error:
            log.warning("%s: cannot mirror %s: %s", self.workspace.uri, thread, error.message)


def backend_from_environment(cwd: Path | None = None) -> Backend:
    return Backend(cwd or Path.cwd(), session=os.environ.get(SESSION_ENV) or None)
