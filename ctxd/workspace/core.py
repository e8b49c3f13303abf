"""A workspace folder's state, shared by its reads and its writes, and the URI rules of folders.

`ctxd.workspace.service.Workspace` puts `WorkspaceReads` (reads.py) and `WorkspaceWrites`
(writes.py) together over this core; the server calls it from worker threads.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from ctxd import agents
from ctxd.errors import GitFailed, InvalidParams, StoreUnavailable
from ctxd.ledger.cache import ThreadCache
from ctxd.ledger.store import Store, database_path
from ctxd.ledger.thread import ThreadLedger
from ctxd.places import Unsafe, private_state_dir
from ctxd.protocol import jsontext
from ctxd.settings import WORKSPACE_FILE, Problem, Settings, is_trusted, load_settings
from ctxd.tokens.counter import TOKENIZERS
from ctxd.usage.view import UsageView

if TYPE_CHECKING:
    from ctxd.ghost.treewatch import TreeWatch
    from ctxd.protocol.shapes import UsageSnapshot
    from ctxd.workspace.service import Workspace

UsageListener = Callable[[str, str, "UsageSnapshot"], None]
ACP = "acp"
"""`acp:<id>` is an ACP session seen by a `ctxd acp` proxy (ctxd/acp), which alone writes it
(`ctxd/acp/record`): like an agent's session, no client may write to it."""
AWAITING_REPORT = "awaitingReport"
"""Thread state after an agent's hook announced a compaction: the stale baseline, until a new report."""


def uri_to_path(uri: str) -> Path:
    """A workspace folder URI as an absolute path; anything but a plain file URI is refused."""
    if not isinstance(uri, str) or not uri:
        raise InvalidParams("workspace: must be a file URI")
    try:
        parsed = urlparse(uri)
    except ValueError as error:  # a broken host part, such as `file://[::1/x`
        raise InvalidParams(f"workspace: {uri!r} is not a valid URI ({error})") from None
    if parsed.scheme != "file":
        raise InvalidParams(f"workspace: {uri!r} is not a file URI")
    if parsed.netloc not in ("", "localhost"):
        raise InvalidParams(f"workspace: {uri!r} names a remote host")
    raw = unquote(parsed.path)
    if "\x00" in raw or any(part == ".." for part in raw.split("/")):
        raise InvalidParams(f"workspace: {uri!r} has '..' or NUL in its path")
    path = Path(raw)
    if not path.is_absolute():
        raise InvalidParams(f"workspace: {uri!r} is not an absolute path")
    return path


def followed_agent(thread: str) -> str | None:
    """The agent (ctxd/agents) for a followed session's thread, `<agent>:<id>`, else None: it
    mirrors the agent's session (ctxd/sessions), the agent owns that history, and no client may
    write to it. `codex:` alone is one too: no client may write under an agent's name. "acp" for
    an ACP session's thread (`acp:<id>`), which only a `ctxd acp` proxy writes."""
    name, sep, _ = thread.partition(":")
    return ACP if sep and name == ACP else agents.followed(thread)


def agent_title(agent: str) -> str:
    """The agent's name as its users know it ("Claude Code")."""
    if agent == ACP:
        return "ctxd acp"
    found = agents.find(agent)
    return found.title if found is not None else agent


def agent_titles() -> dict[str, str]:
    """Every agent's name as its users know it, by its thread prefix: the `initialize` answer
    gives it to the editors, which show no name of their own for an agent."""
    return {agent.name: agent.title for agent in agents.every()}


def is_folder(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):  # a name too long for the file system
        return False


def _folder_identity(path: Path) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def path_to_uri(path: Path) -> str:
    return path.as_uri()


def _own_state_dir(root: Path, settings: Settings, daemon: Settings, state_dir: Path,
                   problems: list[Problem]) -> Path:
    """Where this folder's ledger lives: the `state_dir` its own `.ctxd.toml` names (a trusted
    folder's: an untrusted one's was dropped when the settings were read), relative to the folder;
    else the daemon's. The editor's `stateDir` comes before the file, as every setting does."""
    name = settings.state_dir
    if not name or name == daemon.state_dir:
        return state_dir  # not the file's: the daemon's own (the editor's, the user's or --state-dir)
    try:
        own = Path(os.path.abspath(root / Path(name).expanduser()))
        real, folder = own.resolve(), root.resolve()
    except (OSError, RuntimeError, ValueError) as error:  # `~someone` who is not a user here; a NUL
        why = f"cannot be used ({error})"
    else:
        if real != folder and folder not in real.parents:
            return own
        why = "is inside the folder, whose snapshots would take the ledger in and restore it over itself"
    problems.append(Problem(str(root / WORKSPACE_FILE), f"setting 'state_dir' {name!r} {why}; this folder's "
                            f"ledger stays in {state_dir}", "state_dir"))
    return state_dir


def _check_sources(root: Path, settings: Settings, daemon: Settings, problems: list[Problem]) -> None:
    """Report what a `.ctxd.toml` asks of the followed sessions that one daemon cannot do for one
    folder: another home for an agent's sessions (one folder per agent is watched, for every
    workspace), or an agent the daemon does not follow at all. `sources.<agent> = false` (for any
    agent) is honoured: that folder's sessions of that agent are not followed."""
    source = str(root / WORKSPACE_FILE)
    for agent in agents.names():
        home = f"{agent}_home"
        mine, theirs = settings.sources.home(agent), daemon.sources.home(agent)
        if mine != theirs:
            problems.append(Problem(source, f"setting 'sources.{home}' ignored: ctxd follows one folder of "
                                            f"{agent_title(agent)} sessions for every workspace, chosen in the "
                                            "user's config.toml or the editor's settings", f"sources.{home}"))
        if settings.sources.follows(agent) and not daemon.sources.follows(agent):
            problems.append(Problem(source, f"setting 'sources.{agent} = true' ignored: {agent_title(agent)} "
                                            "sessions are not followed at all (sources."
                                            f"{agent} is false in the user's config.toml or the editor's settings)",
                                    f"sources.{agent}"))


def item_text(item: dict[str, Any]) -> str:
    """An item as stored: strict JSON (what cannot be sent back is never stored), in the wire's
    format, so that a prompt can send an item as it is stored."""
    return jsontext.dumps(item).decode("utf-8")


class WorkspaceCore:
    """One open workspace folder's state: its settings, its database, its loaded threads
    (`ThreadCache`) and the `UsageView` the gauge is read through. One lock keeps the store and
    the loaded threads in step. `WorkspaceReads` and `WorkspaceWrites` add the requests."""

    def __init__(self, uri: str, root: Path, state_dir: Path, init_options: dict[str, Any] | None,
                 listener: UsageListener | None = None, daemon: Settings | None = None) -> None:
        """`state_dir`: the daemon's; `daemon`: the daemon's own settings (the user's config and the
        editor's options), to tell what this folder's `.ctxd.toml` changed of them."""
        self.uri = uri
        self.root = root
        self._root_identity = _folder_identity(root)
        self._daemon = daemon
        self._daemon_state_dir = state_dir
        self._store: Store | None = None  # opened by the first request, on a worker (see `store`)
        self.listener = listener
        self.lock = threading.RLock()
        self.cache = ThreadCache()
        self.state_dir = state_dir
        self.configure(init_options, first=True)
        self.db_path = database_path(self.state_dir, root)
        self._thread_locks: dict[str, threading.Lock] = {}
        self._listed: dict[str, Any] = {}  # `ctxd/threads` entries, each kept until its row changes (reads.py)
        self._listing: Any = None  # the last listing's order, kept until the next commit (reads.py)
        # Set by the server: compacts a thread before a prompt when it is over the limit.
        self.auto_compactor: Callable[[Workspace, str], None] | None = None
        # Set by the server: `Breakdown.cost` of a client thread's spend ({model: {input, cachedInput, output}}).
        self.pricer: Callable[[dict[str, dict[str, int]]], dict[str, Any]] | None = None
        # Set by the server: its file watch, so that this folder's captures re-check only what changed.
        self.tree_watch: TreeWatch | None = None

    def configure(self, init_options: dict[str, Any] | None, first: bool = False) -> None:
        """The settings from the editor's options (and the config files): at open, and again when
        another editor opens the folder with options of its own (the owner serves several: the
        latest editor's options hold). The ledger's place is decided at open: a `state_dir`
        changed since is reported, and takes effect when the folder is opened again."""
        problems: list[Problem] = []
        settings = load_settings(self.root, init_options, problems)
        daemon = self._daemon
        state_dir = self._daemon_state_dir if daemon is None else _own_state_dir(
            self.root, settings, daemon, self._daemon_state_dir, problems)
        if daemon is not None:
            _check_sources(self.root, settings, daemon, problems)
        if not first and state_dir != self.state_dir:
            problems.append(Problem(str(self.root / WORKSPACE_FILE), f"this folder's ledger stays in {self.state_dir} "
                                    "while it is open: a changed 'state_dir' takes effect when it is opened again",
                                    "state_dir"))
        TOKENIZERS.preload(settings.model, settings.tokenizer)  # in the background
        with self.lock:
            if first:
                self.state_dir = state_dir
            self.init_options = init_options
            self.trusted = is_trusted(init_options)
            self.problems = problems
            self.settings = settings
            self.view = UsageView(settings, lambda settings: TOKENIZERS.counter(settings.model, settings.tokenizer))

    def opened_root(self) -> Path:
        """The folder, if it is still the one that was opened. Snapshots and restores go through
        this: a folder replaced since (by a link to somewhere else, or another folder moved onto
        its name) is refused, so that they never read or write a folder the user did not open."""
        if _folder_identity(self.root) != self._root_identity:
            raise GitFailed(f"{self.root} is no longer the folder that was opened (it was replaced or "
                            "moved); reopen it to take or restore snapshots")
        return self.root

    @property
    def store(self) -> Store:
        """The workspace's store, opened on first use. Opening can wait (a database locked by
        another process, up to the store's bound) or fail (StoreUnavailable, 1003): it happens in
        the request that needs it, never while a folder is being added. A failed open is tried
        again by the next request (the user may have fixed it)."""
        store = self._store
        if store is None:
            with self.lock:
                if self._store is None:
                    try:  # a state dir another user made first in a shared place, or a link to theirs
                        private_state_dir(self.state_dir)
                    except Unsafe as error:
                        raise StoreUnavailable(f"{error}: the ledger of {self.root} is not kept there. Choose a "
                                               "state dir of your own (--state-dir, stateDir or state_dir), "
                                               "then retry.") from None
                    except OSError:
                        pass  # (none, and it cannot be made: the store says so, naming it)
                    self._store = Store(self.db_path, workspace=self.root)
                store = self._store
        return store

    def close(self) -> None:
        with self.lock:
            if self._store is not None:
                self._store.close()

    def thread_lock(self, thread: str) -> threading.Lock:
        """Held for a whole long operation on a thread (a compaction), so two never overlap."""
        with self.lock:
            return self._thread_locks.setdefault(thread, threading.Lock())

    def _ledger(self, thread: str) -> ThreadLedger:
        return self.cache.get(self.store, thread)
