"""Followed sessions into the open workspaces: the one consumer of the follower's updates.

For every update it mirrors the session into its workspace's thread (`Workspace.mirror`: items,
the API baseline, model, window, title, cost), and when the session started a new user turn and
`ghost.auto` is `"turn"`, it snapshots the workspace at once, on a thread of its own, labelled with
the turn's first words. The server only starts it, tells it the open folders, and forwards
`threads_changed` as `ctxd/threadsChanged`. No wire code here.

Mirroring runs on a thread of its own (`_Mirrors`), in slices of `SLICE_ITEMS` items, taking the
threads with work in turns: a 100,000-line session being imported holds the workspace's lock for
one slice at a time, so a client's own request waits for a slice, never for the import, and a
live session's new line waits for one slice of another session's import.

What a file says is bounded before it reaches a thread: strings too long to be what they claim
(a model name, a timestamp) and numbers out of range (a context window) are dropped and logged,
and the defaults apply. A file claiming the session id of another file that still exists is not
mirrored (the thread stays the first file's).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ctxd.errors import CtxdError
from ctxd.redact import redact, redact_json
from ctxd.sessions import cachecost, discovery, drift, limits, pricing
from ctxd.sessions.follower import Follower, Update
from ctxd.sessions.model import Session, Turn
from ctxd.settings import Problem, Settings
from ctxd.workspace import Service, Workspace, path_to_uri

if TYPE_CHECKING:
    from ctxd.protocol.shapes import SourceState, Watching

log = logging.getLogger("ctxd")

SLICE_ITEMS = 500  # items mirrored under the workspace's lock at a time
MAX_CONTEXT_WINDOW = 100_000_000  # a window a file states above this is not believed
# Longest string a file may give for each field; a longer one is dropped (logged), never stored.
MAX_CHARS = {"model": 200, "title": 400, "lastActivity": 64, "started": 64, "path": 4096, "cwd": 4096,
             "baseInstructions": 1024 * 1024}


class SessionBridge:
    def __init__(self, service: Service, settings: Settings, threads_changed: Callable[[str], None],
                 problems: list[Problem] | None = None) -> None:
        self.service = service
        self.threads_changed = threads_changed
        problems = problems if problems is not None else []
        self.prices = pricing.price_table(settings.prices, problems)
        for problem in problems:
            log.warning("%s: %s", problem.source, problem.message)
        sources = discovery.sources(settings.sources.codex_home, settings.sources.claude_home,
                                    codex=settings.sources.codex, claude=settings.sources.claude)
        self.follower = Follower(self._update, sources)
        roots = {s.agent: s.root for s in sources}
        # The agents' own auto-compact settings, read once (read-only; ctxd/sessions/limits.py).
        self.codex_limit = limits.codex_configured_limit(roots[discovery.CODEX].parent)
        self.claude_pct = limits.claude_pct_override(roots[discovery.CLAUDE].parent)
        self._checkpoints = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctxd-checkpoint")
        self._mirrors = _Mirrors(threads_changed)
        self._owners: dict[tuple[str, str], str] = {}  # (workspace, thread) -> the file it mirrors
        self._warned: set[tuple[str, str]] = set()
        self.checkpoints_taken = 0
        self._annotated: dict[str, tuple[int, int]] = {}  # thread -> the compaction whose fill after was told

    def start(self, folders: list[Path]) -> None:
        self.set_folders(folders)
        self.follower.start()

    def set_folders(self, folders: list[Path]) -> None:
        self.follower.set_folders(folders, self._turned_off())

    def _turned_off(self) -> dict[str, set[Path]]:
        """Per agent, the open folders whose settings turn its sessions off (a trusted folder's
        `.ctxd.toml` may: `sources.codex = false`)."""
        off: dict[str, set[Path]] = {}
        for workspace in self.service.folders():
            for agent in (discovery.CODEX, discovery.CLAUDE):
                if not getattr(workspace.settings.sources, agent):
                    off.setdefault(agent, set()).add(workspace.root)
        return off

    def stop(self) -> None:
        self.follower.stop()
        self._mirrors.stop()
        self._checkpoints.shutdown(wait=False, cancel_futures=True)

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Block until every session file was read and what it brought is mirrored."""
        deadline = time.monotonic() + timeout
        read = self.follower.wait_idle(timeout)
        return self._mirrors.wait_idle(max(0.0, deadline - time.monotonic())) and read

    def status(self, workspace: Workspace | None = None) -> list[SourceState]:
        """`ctxd/status` `sources`: agent, root, enabled (for `workspace`, when given: its settings
        may turn an agent off), sessions followed (and how)."""
        sessions = self.follower.sessions()
        own = workspace.settings.sources if workspace is not None else None
        return [{"agent": s.agent, "root": s.root, "sessions": s.sessions,
                 "enabled": s.enabled and (own is None or bool(getattr(own, s.agent, True))),
                 "watching": cast("Watching", s.watching),
                 "unread": drift.unread(sessions, s.agent)}
                for s in self.follower.status()]

    # --- on the follower's thread ---

    def _update(self, update: Update) -> None:
        uri = path_to_uri(update.folder)
        try:
            workspace = self.service.workspace(uri)
        except CtxdError:
            return  # closed meanwhile
        session, change = update.session, update.change
        owned = self._owns(workspace, session)
        if owned is None:
            return
        live = update.fresh or not update.new  # a session found anew has only old turns, unless it started now
        if live and update.caught_up and change.turns and workspace.settings.ghost.auto == "turn":
            # First: the agent is about to act on this turn. One per batch, the latest: turns
            # written at once were not acted on one by one, and a flood must not evict the
            # user's snapshots. A session found anew (also a file rewritten) has no new turns.
            self._checkpoints.submit(self._checkpoint, workspace, session.thread, change.turns[-1],
                                     len(session.turns))
        replace = update.new or change.replaced or not owned
        items = session.items if replace else change.appended
        context, info = self._context(session), self._info(session)
        compactions = [{"strategy": session.agent, "automatic": c["trigger"] == "auto", "trigger": c["trigger"],
                        "tokensBefore": c["tokensBefore"], "tokensAfter": c["tokensAfter"]}
                       for c in session.agent_compactions] if replace else None
        after = self._compaction_after(session)
        # The Compactions list shows the agent's compaction at once (a replacement, or its fill after).
        self._mirrors.put(_Job(workspace, session.thread, list(items), replace, session.baseline,
                               max(0, len(session.items) - session.baseline_items), context, info,
                               announce=update.new or not owned or change.replaced or after is not None,
                               compactions=compactions, tokens_after=after))

    def _compaction_after(self, session: Session) -> int | None:
        """The fill after the agent's latest compaction, when it became known with this update."""
        if not session.agent_compactions:
            return None
        after: int | None = session.agent_compactions[-1]["tokensAfter"]
        if after is None:
            return None
        key = (len(session.agent_compactions), after)
        if self._annotated.get(session.thread) == key:
            return None
        self._annotated[session.thread] = key
        return after

    def _owns(self, workspace: Workspace, session: Session) -> bool | None:
        """Whether this session's file is the one its thread mirrors: True; False when it just took
        the thread over (the file before it is gone); None when another existing file has it."""
        key = (workspace.uri, session.thread)
        owner = self._owners.get(key)
        if owner is None:
            try:
                owner = workspace.followed_path(session.thread) or session.path
            except CtxdError:
                owner = session.path
            self._owners[key] = owner
        if owner == session.path:
            return True
        if os.path.lexists(owner):
            self._warn(session.path, "thread", f"claims session id {session.id!r} of {owner}; not mirrored")
            return None
        self._owners[key] = session.path
        return False

    def _warn(self, path: str, what: str, message: str) -> None:
        if (path, what) not in self._warned:
            self._warned.add((path, what))
            log.warning("%s: %s", path, message)

    def _text(self, session: Session, name: str, value: Any) -> str | None:
        """A string from the file, if it is one of a plausible length (else dropped, logged once)."""
        if not isinstance(value, str):
            return None
        if len(value) > MAX_CHARS[name]:
            self._warn(session.path, name, f"{name} of {len(value)} characters ignored")
            return None
        return value

    def _window(self, session: Session) -> int | None:
        window = session.context_window
        if window is None:
            return None
        if type(window) is not int or not 0 < window <= MAX_CONTEXT_WINDOW:
            shown = window if type(window) is int and window.bit_length() <= 64 else "of more than 19 digits"
            self._warn(session.path, "contextWindow", f"context window {shown} out of range "
                       f"(1 to {MAX_CONTEXT_WINDOW}); the default applies")
            return None
        return window

    def _context(self, session: Session) -> dict[str, Any]:
        """The prompt context of the mirrored thread: the model, the session's window and the
        agent's auto-compact point (`followed` marks them as the agent's, never the editor's)."""
        model = self._text(session, "model", session.model)
        if session.agent == discovery.CODEX:
            agent = limits.codex(model, self._window(session), self.codex_limit)
        else:
            agent = limits.claude(model, self.claude_pct)
        context: dict[str, Any] = {"followed": {
            "agent": session.agent, "autoCompactLimit": agent.limit, "warnAt": agent.warn_at,
            "windowSource": agent.window_source, "limitSource": agent.limit_source}}
        if model:
            context["model"] = model
        context["contextWindow"] = agent.window
        instructions = self._text(session, "baseInstructions", session.base_instructions)
        if instructions:
            context["baseInstructions"] = redact(instructions)
        if session.tools:
            context["tools"] = redact_json(session.tools)
        if session.first_request:
            context["followed"]["firstRequest"] = session.first_request
        return context

    def _info(self, session: Session) -> dict[str, Any]:
        usage = {model: u.as_dict() for model, u in session.cumulative.items()
                 if model == "" or self._text(session, "model", model)}
        info: dict[str, Any] = redact_json({"source": session.agent, "title": self._text(session, "title", session.title),
                "model": self._text(session, "model", session.model),
                "lastActivity": self._text(session, "lastActivity", session.last_activity),
                "path": self._text(session, "path", session.path), "cwd": self._text(session, "cwd", session.cwd),
                "turns": len(session.turns), "compactions": session.compactions, "usage": usage,
                "cost": pricing.cost({m: u for m, u in session.cumulative.items() if m in usage}, self.prices),
                "cache": cachecost.facts(session, self.prices)})
        return info

    def _checkpoint(self, workspace: Workspace, thread: str, turn: Turn, number: int) -> None:
        from ctxd.ghost import snapshots as ghost
        from ctxd.hooks.marks import hooked

        if hooked(workspace.state_dir, thread):
            return  # the agent's own hooks take this session's checkpoints (before each turn and tool)
        started = time.monotonic()
        try:
            commit = ghost.snapshot(workspace.opened_root(), turn.text or f"{thread} turn", settings=workspace.settings.ghost,
                                    state_dir=workspace.state_dir, trigger="turn", thread=thread,
                                    turn={"index": number, "text": turn.text})
        except CtxdError as error:
            log.info("%s: no checkpoint for %s: %s", workspace.uri, thread, error.message)
            return
        self.checkpoints_taken += 1
        log.info("%s: checkpoint %s for %s in %.0f ms", workspace.uri, commit.get("id"), thread,
                 (time.monotonic() - started) * 1000)


@dataclass
class _Job:
    """One update to mirror: `items` appended, or with `replace` the session's whole history."""

    workspace: Workspace
    thread: str
    items: list[dict[str, Any]]
    replace: bool
    baseline: int | None
    after_baseline: int
    context: dict[str, Any]
    info: dict[str, Any]
    announce: bool  # tell threads_changed after the first slice (a thread found, or taken over)
    compactions: list[dict[str, Any]] | None = None  # the agent's, with a replacement (Workspace.mirror)
    tokens_after: int | None = None  # the fill after the agent's latest compaction, newly known
    done: int = 0
    started: bool = False
    key: tuple[str, str] = field(init=False)

    def __post_init__(self) -> None:
        self.key = (self.workspace.uri, self.thread)


class _Mirrors:
    """The mirroring thread: jobs queued per thread, one slice of each thread's first job in turn."""

    def __init__(self, threads_changed: Callable[[str], None]) -> None:
        self.threads_changed = threads_changed
        self._queues: OrderedDict[tuple[str, str], deque[_Job]] = OrderedDict()
        self._wake = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="ctxd-mirror", daemon=True)
        self._thread.start()

    def put(self, job: _Job) -> None:
        with self._wake:
            queue = self._queues.setdefault(job.key, deque())
            if job.replace:  # the whole history: what was waiting to be mirrored is in it
                while queue and not queue[-1].started:
                    dropped = queue.pop()
                    job.announce = job.announce or dropped.announce
                    job.tokens_after = job.tokens_after if job.tokens_after is not None else dropped.tokens_after
            elif queue and not queue[-1].started and not queue[-1].replace:
                last = queue.pop()  # two appends not begun: one, with the newer facts
                job.items = last.items + job.items
                job.announce = job.announce or last.announce
                job.tokens_after = job.tokens_after if job.tokens_after is not None else last.tokens_after
            queue.append(job)
            self._wake.notify()

    def stop(self) -> None:
        with self._wake:
            self._stop = True
            self._wake.notify()
        self._thread.join(timeout=5)

    def wait_idle(self, timeout: float) -> bool:
        """Block until every queued job is mirrored (or `timeout` passes); True when idle."""
        deadline = time.monotonic() + timeout
        with self._wake:
            while self._queues and not self._stop and time.monotonic() < deadline:
                self._wake.wait(0.02)
            return not self._queues

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._queues and not self._stop:
                    self._wake.wait()
                if self._stop:
                    return
                key, queue = next(iter(self._queues.items()))
                self._queues.move_to_end(key)  # the other threads' turn next
                job = queue[0]
                job.started = True
            try:
                finished = self._slice(job)
            except CtxdError as error:
                log.warning("%s: cannot mirror %s: %s", job.workspace.uri, job.thread, error.message)
                finished = True
            except Exception:  # noqa: BLE001 - the mirroring thread must outlive any one session
                log.exception("%s: cannot mirror %s", job.workspace.uri, job.thread)
                finished = True
            with self._wake:
                if finished:
                    queue.popleft()
                    if not queue and self._queues.get(key) is queue:
                        del self._queues[key]
                    self._wake.notify_all()
            time.sleep(0)  # let a client's request that waits for the workspace's lock take it

    def _slice(self, job: _Job) -> bool:
        """Mirror the job's next slice; True when it was the last."""
        if job.replace and job.done == 0:
            kept, held = job.workspace.mirror_start(job.thread, job.items)
            job.items = kept[held:] if held >= 0 else kept
            # The thread holds its start already (a restart): append the rest. A session found with
            # compactions in its file still lists them (`mirror` skips those listed already).
            job.replace = held < 0 or (held == 0 and bool(job.compactions))
            if not job.items and not job.replace and job.workspace.mirror_current(job.thread, job.baseline,
                                                                                  job.context, job.info):
                self._annotate(job)
                job.announce = False
                self.threads_changed(job.workspace.uri)
                return True  # as stored: nothing to write, and its items are not loaded
        part = job.items[job.done: job.done + SLICE_ITEMS]
        last = job.done + len(part) >= len(job.items)
        first = job.replace and job.done == 0
        job.workspace.mirror(job.thread, part, replace=first,
                             baseline=job.baseline if last else None, after_baseline=job.after_baseline if last else 0,
                             context=job.context, info=job.info, compactions=job.compactions if first else None)
        job.done += len(part)
        if last:
            self._annotate(job)
        if job.announce:
            job.announce = False
            self.threads_changed(job.workspace.uri)
        return last

    @staticmethod
    def _annotate(job: _Job) -> None:
        if job.tokens_after is not None:
            job.workspace.annotate_followed_compaction(job.thread, job.tokens_after)
