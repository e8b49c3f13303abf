"""Followed sessions into the open workspaces: the one consumer of the follower's updates.

For every update it mirrors the session into its workspace's thread (`Workspace.mirror`: items,
the API baseline, model, window, title, cost), and when the session started a new user turn it
asks for a checkpoint at once (`ctxd.ghost.checkpoint`: taken unless `ghost.auto` is "off"), on a
thread of its own, labelled with the turn's first words. The server only starts it, tells it the open folders, and forwards
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

import itertools
import logging
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ctxd import agents, isotime
from ctxd.agents.base import AgentConfig
from ctxd.agents.session import Session, Step, Turn
from ctxd.errors import CtxdError
from ctxd.ledger.rules import is_real_user_message
from ctxd.redact import redact, redact_json
from ctxd.sessions import cachecost, discovery, drift, pricing
from ctxd.sessions.follower import Follower, KnownCwd, Update, valid_id
from ctxd.settings import Problem, Settings
from ctxd.tokens.counter import TOKENIZERS
from ctxd.workspace import Service, Workspace, path_to_uri

if TYPE_CHECKING:
    from ctxd.protocol.shapes import SourceState, Watching
    from ctxd.workspace.writes import Listed

log = logging.getLogger("ctxd")

SLICE_ITEMS = 500  # items mirrored under the workspace's lock at a time
MAX_CONTEXT_WINDOW = 100_000_000  # a window a file states above this is not believed
# Longest string a file may give for each field; a longer one is dropped (logged), never stored.
MAX_CHARS = {"model": 200, "title": 400, "lastActivity": 64, "started": 64, "path": 4096, "cwd": 4096,
             "baseInstructions": 1024 * 1024}


# Items queued for the mirror at most: past this the follower puts off reading large parts of files
# (it reads faster than the store takes items in, and a history of thousands of sessions must not
# wait in memory); a live session's few new lines are read all the same.
MAX_QUEUED_ITEMS = 5_000
# The sessions a cold owner lists are handed to its readers' workers this many at a time: one at a
# time, the pool's own traffic was a third of the owner's work (3,000 listed in 5.1 s; 4.2 s with 16).
# With workers forked ahead, 32: each waited for the owner to take its reads about 35 times, 5 ms
# each (a median of 1.49 s to list 3,000; 1.44 s so; 8: 1.47 s; 64: as 32).
LIST_BATCH = 32
# The files a listing is given as their heads are peeked at are looked up in the stores (followed
# already? summarized?) this many at a time.
LIST_CHUNK = 128
# The summaries a first listing reads are written once every thread is listed (on 2 cores, writing
# them as they came cost a cold owner's listing of 3,000 sessions 0.08 s: bench/README.md, round
# eighteen), or whenever this many wait (about 20 MB of readers' state: memory bounded).
LIST_SAVE_ROWS = 4_096
# The threads a listing makes and tells at once (one write, one `ctxd/threadsChanged`): the newest
# session alone, then 64, doubling up to 1,024 (each told batch is an editor's request: 48 of them
# for 3,000 sessions cost a cold owner a tenth of a second of CPU beside its readers).
LIST_BATCH_FIRST, LIST_BATCH_MAX = 64, 1_024
# A session whose mirroring failed (its ledger could not be written: a full disk) is read again
# from its start this long after; twice as long after each failure in a row, up to the most.
REMIRROR_SECONDS = 2.0
REMIRROR_MAX_SECONDS = 120.0


class SessionBridge:
    def __init__(self, service: Service, settings: Settings,
                 threads_changed: Callable[[str, list[str] | None], None],
                 problems: list[Problem] | None = None, state_dir: Path | None = None) -> None:
        """`threads_changed(uri, threads)`: these threads' listings changed (None: any of the folder's).
        `state_dir`: where the sessions' summaries are shared with `ctxd sessions` (summaries.py)."""
        self.service = service
        self.threads_changed = threads_changed
        problems = problems if problems is not None else []
        self.prices = pricing.price_table(settings.prices, problems)
        for problem in problems:
            log.warning("%s: %s", problem.source, problem.message)
        names = agents.names()
        sources = discovery.sources({name: settings.sources.home(name) for name in names},
                                    enabled={name: settings.sources.follows(name) for name in names})
        self.follower = Follower(self._update, sources, window=False, resume=self._resume, listing=self._list,
                                 known_cwds=self._known_cwds, quiet=TOKENIZERS.quiet,
                                 backlog=lambda: self._mirrors.queued > MAX_QUEUED_ITEMS)
        self.state_dir = state_dir
        # The agents' own auto-compact settings, read once (read-only; each agent's `read_config`).
        self.configs: dict[str, AgentConfig] = {
            agent.name: agent.read_config(agent.home(os.environ, settings.sources.home(agent.name)))
            for agent in agents.every()}
        self._checkpoints = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctxd-checkpoint")
        self._mirrors = _Mirrors(threads_changed, self.follower.stored, self.follower.reread)
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
            for agent in agents.names():
                if not workspace.settings.sources.follows(agent):
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
        return [{"agent": s.agent, "version": agents.get(s.agent).version, "root": s.root, "sessions": s.sessions,
                 "enabled": s.enabled and (own is None or own.follows(s.agent)),
                 "watching": cast("Watching", s.watching),
                 "unread": drift.unread(sessions, s.agent)}
                for s in self.follower.status()]

    # --- on the follower's thread ---

    def _resume(self, folder: Path, path: str) -> dict[str, Any] | None:
        """Where the owner before this one left the file's reader, as the folder's store has it."""
        try:
            workspace = self.service.workspace(path_to_uri(folder))
            return workspace.store.follow_state(path)
        except CtxdError:
            return None

    def _known_cwds(self, paths: list[str]) -> Mapping[str, KnownCwd]:
        """The cwds the summaries found (`Follower`'s `known_cwds`)."""
        if self.state_dir is None:
            return {}
        from ctxd.sessions import summaries

        store = summaries.Summaries(self.state_dir)
        try:
            return store.cwds(paths)
        finally:
            store.close()

    def _list(self, files: Iterable[tuple[str, Path, str]]) -> None:
        """Before the first scan reads the files (newest first), every session not in its folder's
        store yet is listed from its summary (summaries.py: shared with `ctxd sessions`, read once,
        skimmed): its thread shows its title, cost and fill at once, its items follow. `files` may
        come as their heads are peeked at: those read are handed to the readers as they come."""
        from ctxd.sessions import summaries

        store = summaries.Summaries(self.state_dir) if self.state_dir is not None else None
        fresh: list[summaries.Stored] = []  # the summaries read, not written yet (LIST_SAVE_ROWS)
        waiting: dict[str, tuple[Workspace, list[Listed]]] = {}  # per folder, the threads to list next
        batch: dict[str, int] = {}  # per folder, how many threads its next listing waits for (doubling)
        # Each folder's workspace (None: not open), and the threads its store has (a session whose
        # thread it has not is its file's: `_owns` asks the store no more); the sessions to list, in
        # their order, and those read.
        workspaces: dict[Path, Workspace | None] = {}
        stored_threads: dict[str, set[str]] = {}
        todo: list[tuple[str, Workspace, summaries.Stored | None, Session | None]] = []
        to_read: set[str] = set()

        def unread() -> Iterator[summaries.Job]:
            """The files not followed yet, LIST_CHUNK at a time as they come, into `todo`; the jobs of
            those whose summary is not fresh."""
            summarized = ((path, folder, agent) for path, folder, agent in files
                          if summaries.summarizes(agent))  # (the others are read whole: listed as they are mirrored)
            while chunk := list(itertools.islice(summarized, LIST_CHUNK)):
                followed: set[str] = set()  # those of the chunk their folder's store follows
                for folder in {folder for _, folder, _ in chunk}:
                    if folder not in workspaces:
                        workspaces[folder] = self._listing_workspace(folder, stored_threads)
                    try:
                        if (workspace := workspaces[folder]) is not None:
                            followed |= workspace.store.followed_paths([p for p, f, _ in chunk if f == folder])
                    except CtxdError as error:
                        log.info("%s: not listed: %s", folder, error.message)
                        workspaces[folder] = None
                unlisted = [(path, workspace, agent) for path, folder, agent in chunk
                            if (workspace := workspaces[folder]) is not None and path not in followed]
                known = store.load([path for path, _, _ in unlisted]) if store is not None else {}
                for path, workspace, agent in unlisted:
                    stored = known.get(path)
                    shown = summaries.shown_session(stored) if stored is not None and summaries.fresh(stored, path) else None
                    todo.append((path, workspace, stored, shown))
                    if shown is None:
                        to_read.add(path)
                        yield path, agent, store.state(path) if store is not None and stored is not None else None, None, None

        # Streamed when workers forked ahead wait (`summaries.fork_readers`): they read while the
        # heads are still peeked at; else every head first, and the size to read decides.
        streamed = not isinstance(files, list) and summaries.readers_ready()
        reads = iter(summaries.reads(unread(), os.cpu_count() or 1, "spawn", LIST_BATCH,
                                     parallel=True if streamed else None))  # newest first, as they come
        # Every session is in `todo` once the first read is back (all jobs are handed out first).
        reads = itertools.chain([next(reads, None)], reads)
        for path, workspace, stored, shown in todo:
            try:
                if shown is not None:
                    assert stored is not None and stored.facts is not None
                    session = shown
                    used = stored.facts.get("used")
                else:
                    read = next(reads, None)
                    if read is None:
                        continue
                    session = read.session
                    used = summaries.fill(session, read.tail)
                    if read.stored.facts is not None:
                        read.stored.facts["used"] = used
                        fresh.append(read.stored)
                if session.id is None or not valid_id(session.id):
                    continue
                if session.thread not in stored_threads[workspace.uri]:
                    self._owners.setdefault((workspace.uri, session.thread), session.path)
                if self._owns(workspace, session) is None:
                    continue
                entries = waiting.setdefault(workspace.uri, (workspace, []))[1]
                entries.append((session.thread, used if isinstance(used, int) else None, self._context(session),
                                self._info(session)))
                if len(entries) >= batch.get(workspace.uri, 1):  # the newest at once, the others in batches
                    if workspace.uri not in batch:
                        log.debug("%s: listing %s first", workspace.uri, session.thread)
                    batch[workspace.uri] = min(LIST_BATCH_MAX, 2 * batch.get(workspace.uri, LIST_BATCH_FIRST // 2))
                    self._list_threads(*waiting.pop(workspace.uri))
            except CtxdError as error:
                log.info("%s: not listed: %s", path, error.message)
            if len(fresh) >= LIST_SAVE_ROWS and store is not None:
                store.save(fresh)
                fresh = []
        for workspace, entries in waiting.values():
            self._list_threads(workspace, entries)
        if streamed:
            log.info("listed %d sessions, %d read as their heads were peeked at", len(todo), len(to_read))
        if store is not None:
            store.save(fresh)
            store.close()

    def _listing_workspace(self, folder: Path, stored_threads: dict[str, set[str]]) -> Workspace | None:
        """The workspace of a folder whose sessions are listed, the threads its store has put in
        `stored_threads`; None when it cannot be listed."""
        try:
            workspace = self.service.workspace(path_to_uri(folder))
            stored_threads[workspace.uri] = {row[0] for row in workspace.store.listing()}
        except CtxdError as error:
            log.info("%s: not listed: %s", folder, error.message)
            return None
        return workspace

    def _list_threads(self, workspace: Workspace, entries: list[Listed]) -> None:
        """Make the threads of sessions listed before they are mirrored (one write), and tell the
        clients of the ones made."""
        try:
            made = workspace.list_followed(entries)
        except CtxdError as error:
            log.info("%s: %d sessions not listed: %s", workspace.uri, len(entries), error.message)
            return
        if made:
            self.threads_changed(workspace.uri, made)

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
        if not owned and not change.from_start:  # a file taking the thread over: its whole history
            self.follower.reread(session.path)
            return
        live = update.fresh or not update.new  # a session found anew has only old turns, unless it started now
        if live and update.caught_up and change.turns:  # `ghost.checkpoint.take` decides whether it is taken
            # First: the agent is about to act on this turn. One per batch, the latest: turns
            # written at once were not acted on one by one, and a flood must not evict the
            # user's snapshots. A session found anew (also a file rewritten) has no new turns.
            self._checkpoints.submit(self._checkpoint, workspace, session.thread, change.turns[-1],
                                     session.turn_total)
        context, info = self._context(session), self._info(session)
        after = self._compaction_after(session)
        # From its start, the whole history as the file has it (a session found, or a file that took
        # its thread over); else what this read added, after what the thread holds.
        steps, start = change.steps, change.from_start
        listing = {step.compaction: _listing(session, step.compaction) for step in steps if step.compaction is not None}
        follow = (session.path, update.state) if update.state is not None else None
        # The Compactions list shows the agent's compaction at once (a replacement, or its fill after).
        self._mirrors.put(_Job(workspace, session.thread, steps, start, listing, update.caught_up, session.baseline,
                               max(0, session.size - session.baseline_items), context, info,
                               announce=(update.new and not update.resumed) or not owned or change.replaced
                               or after is not None, tokens_after=after, follow=follow,
                               path=session.path))

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
        agent = agents.get(session.agent).limits(model, self._window(session),
                                                 self.configs.get(session.agent) or AgentConfig())
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
                "turns": session.turn_total, "compactions": session.compactions, "usage": usage,
                "cost": pricing.cost({m: u for m, u in session.cumulative.items() if m in usage}, self.prices),
                "cache": cachecost.facts(session, self.prices)})
        return info

    def _checkpoint(self, workspace: Workspace, thread: str, turn: Turn, number: int) -> None:
        from ctxd.ghost.checkpoint import Job, take
        from ctxd.marks import hooked

        if hooked(workspace.state_dir, thread):
            return  # the agent's own hooks take this session's checkpoints (before each turn and tool)
        job = Job(workspace.root, workspace.state_dir, thread, "turn", turn={"index": number, "text": turn.text or ""},
                  message=turn.text or f"{thread} turn")
        if take(job, workspace, log=lambda line: log.info("%s: %s", workspace.uri, line)).commit is not None:
            self.checkpoints_taken += 1


def _listing(session: Session, number: int) -> dict[str, Any]:
    """The agent's compaction `number` as `ctxd/history` lists it."""
    found = session.agent_compactions[number] if 0 <= number < len(session.agent_compactions) else {}
    return {"strategy": session.agent, "automatic": found.get("trigger") == "auto", "trigger": found.get("trigger"),
            "tokensBefore": found.get("tokensBefore"), "tokensAfter": found.get("tokensAfter")}


@dataclass
class _Job:
    """One update to mirror: `steps` (ctxd/agents/session.py), replayed in order. `start`: they
    begin at the session's start (a session found, or found again after a restart, whose thread may
    hold part of it already). `listing`: the agent's compactions they name, as listed."""

    workspace: Workspace
    thread: str
    steps: list[Step]
    start: bool
    listing: dict[int, dict[str, Any]]
    caught_up: bool
    baseline: int | None
    after_baseline: int
    context: dict[str, Any]
    info: dict[str, Any]
    announce: bool  # tell threads_changed after the first slice (a thread found, or taken over)
    tokens_after: int | None = None  # the fill after the agent's latest compaction, newly known
    follow: tuple[str, dict[str, Any]] | None = None  # the file's path and where its reader stands after these steps
    path: str | None = None  # the session's file (`Session.path`), read again when this job fails
    ops: deque[_Op] | None = None  # what is left to write, once planned (the first slice)
    started: bool = False
    key: tuple[str, str] = field(init=False)
    count: int = field(init=False)  # items in its steps (the queue's bound)

    def __post_init__(self) -> None:
        self.key = (self.workspace.uri, self.thread)
        self.count = sum(len(step.items) for step in self.steps)

    def merge(self, later: _Job) -> None:
        """`later`, an update of the same thread not begun either, added to this one."""
        for step in later.steps:
            last = self.steps[-1] if self.steps else None
            if last is not None and not last.replace and not step.replace:
                self.steps[-1] = Step(last.items + step.items, compactions_before=last.compactions_before)
            else:
                self.steps.append(step)
        self.listing.update(later.listing)
        self.announce = self.announce or later.announce
        self.tokens_after = later.tokens_after if later.tokens_after is not None else self.tokens_after
        self.caught_up, self.baseline, self.after_baseline = later.caught_up, later.baseline, later.after_baseline
        self.context, self.info = later.context, later.info
        self.follow = later.follow or self.follow
        self.path = later.path or self.path
        self.count += later.count


@dataclass
class _Op:
    """One write of a job's plan: `items` appended; or with `replace` (the operation's info) the
    active history replaced by them, dated `at`; or with `sync` the active history brought to
    `items` (what it lacks appended; something else there: replaced, as the agent's); or with
    `archive` archived under that compaction, dated `at`; or with `rewound` a rewind met while the
    history is matched, `items` the window before it (`_Mirrors._resolve`)."""

    items: list[dict[str, Any]]
    replace: dict[str, Any] | None = None
    at: float | None = None
    sync: bool = False
    unless_same: bool = False  # a rewind: nothing to do when the history is that already
    archive: int | None = None  # `items` archived under this listed compaction (`Workspace.mirror_archive`)
    last_sync: bool = False  # the job's final sync: a history ahead of it waits for the next job
    keep: int | None = None  # a rewind: the active history's first `keep` items are the window now
    rebuild: bool = False  # the active history's real user messages, then `items`, are the window now
    rewound: _Op | None = None  # the rewind's own write, made when the thread holds no more than `items` (a part)

    @property
    def unresolved(self) -> bool:
        """It needs the thread as stored to know what it writes (`_Mirrors._resolve`)."""
        return self.sync or self.unless_same or self.rebuild or self.rewound is not None


def _replaced(window: list[dict[str, Any]] | None, step: Step) -> list[dict[str, Any]]:
    """The window after a replacing step, from the window before it (when known)."""
    if step.keep is not None:
        return list(window or [])[:step.keep]
    if step.rebuild:
        return [item for item in window or [] if is_real_user_message(item)] + list(step.items)
    return list(step.items)


class _Mirrors:
    """The mirroring thread: jobs queued per thread, one slice of each thread's first job in turn."""

    def __init__(self, threads_changed: Callable[[str, list[str] | None], None],
                 stored: Callable[[str], None], reread: Callable[[str], None] = lambda path: None) -> None:
        """`stored(path)`: where the file's reader stood (a job's `follow`) is in its store now.
        `reread(path)`: read the session's file again from its start (a job of it failed)."""
        self.threads_changed = threads_changed
        self.stored = stored
        self.reread = reread
        # Threads whose mirroring failed: what the file adds after the failure is not appended to a
        # history that misses what failed; they wait for the file read again from its start.
        self._broken: dict[tuple[str, str], int] = {}  # -> failures in a row
        self._queues: OrderedDict[tuple[str, str], deque[_Job]] = OrderedDict()
        self._queued = 0  # items in the queued jobs' steps
        # Per thread: the history a session found again was being matched against, when the thread
        # held more than the file had given so far (a long file read in parts after a restart).
        self._behind: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self._passing: dict[tuple[str, str], list[dict[str, Any]]] = {}  # see `_plan`
        self._written: set[Workspace] = set()  # since the queue was last empty
        self._wake = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="ctxd-mirror", daemon=True)
        self._thread.start()

    def put(self, job: _Job) -> None:
        with self._wake:
            if self._broken.get(job.key, 0) > 0:
                if not job.start:
                    return  # the whole file follows (`_failed`), these lines with it
                self._broken[job.key] = -self._broken[job.key]  # (its failures, until it is written)
            self._queued += job.count
            queue = self._queues.setdefault(job.key, deque())
            if job.start:  # the history from its start: what was waiting is in it
                while queue and not queue[-1].started:
                    dropped = queue.pop()
                    self._queued -= dropped.count
                    job.announce = job.announce or dropped.announce
                    job.tokens_after = job.tokens_after if job.tokens_after is not None else dropped.tokens_after
            elif queue and not queue[-1].started:
                queue[-1].merge(job)  # two updates not begun: one, with the newer facts
                self._wake.notify()
                return
            queue.append(job)
            self._wake.notify()

    @property
    def queued(self) -> int:
        """Items in the queued jobs' steps."""
        return self._queued

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
                if finished and job.follow is not None:
                    self.stored(job.follow[0])
            except CtxdError as error:
                log.warning("%s: cannot mirror %s: %s", job.workspace.uri, job.thread, error.message)
                finished = self._failed(job, queue)
            except Exception:  # noqa: BLE001 - the mirroring thread must outlive any one session
                log.exception("%s: cannot mirror %s", job.workspace.uri, job.thread)
                finished = self._failed(job, queue)
            with self._wake:
                self._written.add(job.workspace)
                if finished and self._broken.get(job.key, 0) < 0:
                    del self._broken[job.key]  # written, at last
                if finished:
                    self._queued -= queue.popleft().count
                    if not queue and self._queues.get(key) is queue:
                        del self._queues[key]
                    self._wake.notify_all()
                written, idle = self._written, not self._queues
                if idle:
                    self._written = set()
            if idle:  # all caught up: the ledgers written give back the pages their writes freed
                for workspace in written:
                    try:
                        workspace.store.give_back_free_pages()
                    except Exception:  # noqa: BLE001 - the pages stay; the mirroring thread goes on
                        log.exception("%s: cannot give back the ledger's free pages", workspace.uri)
            time.sleep(0)  # let a client's request that waits for the workspace's lock take it

    def _failed(self, job: _Job, queue: deque[_Job]) -> bool:
        """A job that could not be written (its ledger full, say): it and the jobs queued after it
        (which add to what it left unwritten) are dropped, and the session's file is read again from
        its start a little later, to be matched against what the thread holds then (nothing lost,
        nothing written twice). True: the job is done with."""
        with self._wake:
            while len(queue) > 1:
                self._queued -= queue.pop().count
            self._behind.pop(job.key, None)
            self._passing.pop(job.key, None)
            if job.path is not None and not self._stop:
                failures = abs(self._broken.get(job.key, 0)) + 1
                self._broken[job.key] = failures
                wait = min(REMIRROR_MAX_SECONDS, REMIRROR_SECONDS * 2 ** min(failures - 1, 16))
                timer = threading.Timer(wait, self.reread, (job.path,))
                timer.daemon = True
                timer.start()
        return True

    # --- a job's plan ---

    def _plan(self, job: _Job) -> deque[_Op]:
        """The writes that bring the thread to where the job's steps leave the session. A step the
        thread has already (before one of the agent's compactions it lists: a restart reads the
        file from its start again, and `ctxd mcp` mirrors the same file) is passed over; after
        it, or from a session's start, the history is matched against the thread's (`sync`)."""
        listed = job.workspace.followed_compactions(job.thread)
        stored = len(listed)
        target: list[dict[str, Any]] | None = [] if job.start else self._behind.get(job.key)
        self._behind.pop(job.key, None)
        # The session's window while its steps are passed over, from its start: a compaction an
        # earlier version listed without archiving anything gets what the window held before it.
        window: list[dict[str, Any]] | None = [] if job.start else self._passing.get(job.key)
        self._passing.pop(job.key, None)
        ops: deque[_Op] = deque()
        for step in job.steps:
            if (step.compaction if step.compaction is not None else step.compactions_before) < stored:
                if step.replace:
                    target = _replaced(window if window is not None else target, step)  # the window it left
                if window is not None:
                    if step.compaction is not None and window and not listed[step.compaction][1].get("removed"):
                        ops.append(_Op(window, archive=listed[step.compaction][0], at=isotime.seconds(step.at)))
                    window = _replaced(window, step) if step.replace else window + step.items
                continue  # archived already by a compaction the thread lists
            window = None
            if not step.replace:
                if target is not None:
                    target.extend(step.items)
                elif step.items:
                    ops.append(_Op(step.items))
                continue
            if step.compaction is None and target is not None:
                # A rewind while the history is being matched (a file read from its start): the
                # window after it is what is matched next. What it dropped is archived once: a
                # thread that holds no more than a part of the window before it (a session found
                # with its rewinds in it, or followed up to its branch) is brought to that window,
                # then cut back as the rewind did; one past it (it archived the branch when it saw
                # the rewind) is left to the matching.
                ops.append(_Op(target, rewound=_Op(list(step.items), {"strategy": "agent"}, isotime.seconds(step.at),
                                                         unless_same=True, keep=step.keep)))
                target = _replaced(target, step)
                continue
            if target is not None:
                rebuilt = _replaced(target, step) if step.rebuild else None  # what it keeps is known here
                ops.append(_Op(target, sync=True))
                target = None
                if rebuilt is not None:
                    ops.append(_Op(rebuilt, job.listing.get(step.compaction or 0) or {"strategy": job.thread.split(":")[0]},
                                   isotime.seconds(step.at)))
                    continue
            if step.compaction is None:
                ops.append(_Op(list(step.items), {"strategy": "agent"}, isotime.seconds(step.at), unless_same=True,
                               keep=step.keep))
            else:
                ops.append(_Op(step.items, job.listing.get(step.compaction) or {"strategy": job.thread.split(":")[0]},
                               isotime.seconds(step.at), rebuild=step.rebuild))
        if target is not None:
            ops.append(_Op(target, sync=True, last_sync=True))
        if window is not None and job.steps and not job.caught_up:
            self._passing[job.key] = window  # the file's next part is passed over too
        return ops

    def _resolve(self, job: _Job, op: _Op) -> list[_Op]:
        """A sync, a rewind or a rebuilt window turned into the writes it needs against the thread
        as stored (the store holds the window: the daemon's readers keep none)."""
        if op.rewound is not None:
            kept, held = job.workspace.mirror_start(job.thread, op.items)
            if held < 0:
                return []  # past the rewind, or something else: the matching after it decides
            return ([_Op(kept[held:])] if held < len(kept) else []) + [op.rewound]
        if op.keep is not None or op.rebuild:
            active = job.workspace.active_items(job.thread)
            if op.rebuild:
                return [_Op([item for item in active if is_real_user_message(item)] + op.items, op.replace, op.at)]
            if len(active) == op.keep:
                return []  # as stored already
            return [_Op(active[:op.keep], op.replace, op.at)]
        kept, held = job.workspace.mirror_start(job.thread, op.items)
        if op.unless_same:
            return [] if held == len(kept) else [_Op(op.items, op.replace, op.at)]
        if held == -2:  # the thread holds more: the file's next lines (or it went on meanwhile)
            if op.last_sync:
                self._behind[job.key] = op.items
            return []
        if held == -1:  # something else: the file's history replaces it (nothing is deleted)
            return [_Op(kept, {"strategy": "agent"})]
        return [_Op(kept[held:])] if held < len(kept) else []

    def _slice(self, job: _Job) -> bool:
        """Mirror the job's next slice; True when it was the last."""
        if job.ops is None:
            job.ops = self._plan(job)
        ops = job.ops
        while ops and ops[0].unresolved:
            ops.extendleft(reversed(self._resolve(job, ops.popleft())))
        if not ops and job.workspace.mirror_current(job.thread, job.baseline, job.context, job.info):
            if job.follow is not None:
                job.workspace.note_followed(job.thread, *job.follow)
            self._annotate(job)
            if job.announce:
                job.announce = False
                self.threads_changed(job.workspace.uri, [job.thread])
            return True  # as stored: nothing to write, and its items are not loaded
        while ops and ops[0].archive is not None:  # a repair, whole: it is done once
            op = ops.popleft()
            job.workspace.mirror_archive(job.thread, cast(int, op.archive), op.items, op.at)
            while ops and ops[0].unresolved:
                ops.extendleft(reversed(self._resolve(job, ops.popleft())))
        op = ops[0] if ops else _Op([])
        part = op.items[:SLICE_ITEMS]
        if ops:
            ops.popleft()
            if len(op.items) > SLICE_ITEMS:  # the rest is appended after it
                ops.appendleft(_Op(op.items[SLICE_ITEMS:]))
        last = not ops  # (a rewind next may turn out to need no write: the next slice says so)
        # Before the last slice the agent's report covers every item written so far: an import
        # shows the session's fill from its first slice, not a count growing with it.
        job.workspace.mirror(job.thread, part, replace=op.replace, at=op.at, baseline=job.baseline,
                             after_baseline=job.after_baseline if last else 0, context=job.context, info=job.info,
                             follow=job.follow if last else None)
        if last:
            self._annotate(job)
        if job.announce:
            job.announce = False
            self.threads_changed(job.workspace.uri, [job.thread])
        return last

    @staticmethod
    def _annotate(job: _Job) -> None:
        if job.tokens_after is not None:
            job.workspace.annotate_followed_compaction(job.thread, job.tokens_after)
