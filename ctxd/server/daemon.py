"""The composition root: what every session of one daemon shares (`Daemon`): the open workspaces,
the workers and the order they run requests in, the usage pushes, the agents' sessions it follows,
what the hooks wrote, and the tree watch; and `Broadcast`, its notifications to every session.

Over stdio (and in memory) a session has its own daemon; over TCP, and in the owner
(`owner.py`), every session shares one. The sessions themselves are `app.CtxdServer`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxd.errors import CtxdError
from ctxd.places import estimator_dir
from ctxd.protocol import methods
from ctxd.server.events import CompactionEvents, Throttle
from ctxd.server.lanes import Lanes
from ctxd.settings import load_settings
from ctxd.workspace import Service, Workspace
from ctxd.workspace.core import uri_to_path

if TYPE_CHECKING:
    from ctxd.ghost.treewatch import TreeWatch
    from ctxd.protocol import shapes
    from ctxd.server.app import CtxdServer

log = logging.getLogger(__name__)

USAGE_INTERVAL_SECONDS = 0.1
WORKER_THREADS = 8
# Threads of one workspace that may hold workers at once (see lanes.py).
WORKSPACE_WORKERS = 2
WARM_UP_WAIT_SECONDS = 30.0
LISTING_WAIT_SECONDS = 30.0
"""The longest the imports after the first listing wait for it (`Daemon._import_after_listing`)."""
FOLLOW_RETRY_SECONDS = 2.0
"""A daemon whose state dir's sessions another process follows (its follow lock, `ownerlink.follow_lock`)
tries to take them over this often: it follows them once that process has left."""
WATCH_FOLLOWER_SECONDS = 1.0
"""Meanwhile it looks this often for what that process wrote (`Daemon._watch_follower`)."""
USAGE_PUSHES_AT_ONCE = 64
"""The most `ctxd/usageChanged` one look sends for the threads it found written (the latest written
first): a follower's first listing writes thousands, and each push reads its thread's items."""


RecordNow = Callable[[Callable[[str], Workspace], Any], "shapes.RecordResult | None"]
"""`handlers.record_now`: a small record stored on the reading thread, or None to hand it on."""


class Daemon:
    """What every session of one daemon shares: the open workspaces, the workers and the order they
    run requests in, the usage pushes, and the agents' sessions it follows. Over stdio there is one
    session; over TCP, one per authenticated connection (`tcp.py`), each seeing the same workspaces
    (a folder closes when the last session holding it lets it go)."""

    def __init__(self, state_dir: Path | None = None) -> None:
        self.state_dir_override = state_dir
        self.service = Service(state_dir, listener=self._usage_changed)
        self.service.on_open = self._on_open
        self.executor = ThreadPoolExecutor(max_workers=WORKER_THREADS, thread_name_prefix="ctxd-worker")
        self.lanes = Lanes(self.executor, WORKSPACE_WORKERS)
        # Checks run for every folder opened (an interrupted restore), one at a time: thousands of
        # folders added at once never hold the workers that answer requests.
        self.background = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctxd-background")
        self.throttle: Throttle[tuple[str, str], dict[str, Any]] = Throttle(self._send_usage, USAGE_INTERVAL_SECONDS)
        self.everyone = Broadcast(self)
        self.events = CompactionEvents(self.everyone, self.throttle)  # automatic compactions: every client's
        self.sessions: Any = None  # ctxd.sessions.bridge.SessionBridge, once warmed up
        self.hook_watcher: Any = None  # ctxd.sessions.hook_watch.HookWatcher, started with it
        self.tree_watch: TreeWatch | None = None  # this daemon's file watch, from the warm-up on (`watch_trees`)
        # The state dir's follow lock while this daemon follows the sessions; None: not (yet) taken.
        self._follow_lock: int | None = None
        self._following = threading.Lock()  # one start of the following at a time (the warm-up, a retry)
        self._follow_retry: threading.Timer | None = None
        self.followed_elsewhere = False  # another process follows the sessions (and writes their threads)
        self._watcher: threading.Thread | None = None  # looks for what that process writes, meanwhile
        self._watch_stop = threading.Event()  # set at close
        self.configured = False  # the first `initialize` set the state dir and the options
        self._warming = False
        self._warmed = threading.Event()  # set when `_warm_up` is done
        # `handlers.record_now`, once the warm-up imported it (it imports pydantic: not at start).
        self.record_handler: RecordNow | None = None
        self._lock = threading.Lock()
        self.clients: list[CtxdServer] = []
        self._holders: dict[str, int] = {}  # per open folder: how many sessions hold it
        self._closed = False
        # The owner's daemon (ctxd/server/owner.py) serves editors and ctxd's own tools at once:
        # only a session that brings options (an editor's) configures it.
        self.shared = False

    # --- sessions --------------------------------------------------------------------------------

    def join(self, server: CtxdServer) -> None:
        with self._lock:
            self.clients.append(server)

    def leave(self, server: CtxdServer) -> None:
        """A session ended. Its folders stay open until the daemon closes (its requests may still be
        running in them); its holds are dropped, so another session's removal closes them."""
        with self._lock:
            if server in self.clients:
                self.clients.remove(server)
            for uri in server.folders:
                left = self._holders.get(uri, 1) - 1
                if left > 0:
                    self._holders[uri] = left
                else:
                    self._holders.pop(uri, None)
            server.folders.clear()

    def hold(self, server: CtxdServer, workspace: Workspace) -> None:
        with self._lock:
            if workspace.uri not in server.folders:
                server.folders.add(workspace.uri)
                self._holders[workspace.uri] = self._holders.get(workspace.uri, 0) + 1

    def release(self, server: CtxdServer, uri: str) -> None:
        with self._lock:
            if uri not in server.folders:
                return
            server.folders.discard(uri)
            left = self._holders.get(uri, 1) - 1
            if left > 0:
                self._holders[uri] = left
                return
            self._holders.pop(uri, None)
        self.service.close_folder(uri)
        if self.tree_watch is not None:
            self.tree_watch.release(uri_to_path(uri))

    def initialized_clients(self) -> list[CtxdServer]:
        with self._lock:
            return [client for client in self.clients if client.initialized]

    # --- outgoing --------------------------------------------------------------------------------

    def _usage_changed(self, uri: str, thread: str, usage: shapes.UsageSnapshot) -> None:
        self.throttle.offer((uri, thread), dict(usage))  # most are replaced before they go: built in `_send_usage`

    def _send_usage(self, key: tuple[str, str], usage: dict[str, Any]) -> None:
        self.everyone.notify(methods.USAGE_CHANGED, {"workspace": key[0], "thread": key[1], **usage})

    def threads_changed(self, uri: str, threads: list[str] | None = None) -> None:
        """Threads' listings changed (None: any of the folder's): `ctxd/threadsChanged` names them."""
        params: dict[str, Any] = {"workspace": uri}
        if threads is not None:
            params["threads"] = threads
        self.everyone.notify(methods.THREADS_CHANGED, params)

    # --- after the first `initialize` ------------------------------------------------------------

    def warm_up(self) -> None:
        with self._lock:
            if self._warming:
                return
            self._warming = True
        self.executor.submit(self._warm_up)

    def _warm_up(self) -> None:
        """After `initialize` is answered, while the editor is still starting: import what requests
        need (pydantic, the handlers), build the estimator's tables, follow the agents' sessions,
        then import what compactions and snapshots need, instead of in the first request that does."""
        try:
            self.watch_trees()
            log.debug("warm-up: following the sessions")
            self._follow_sessions()
            from ctxd.server import handlers
            from ctxd.tokens import estimator

            self.record_handler = handlers.record_now
            estimator.prepare(estimator_dir(self.service.state_dir))  # estimates until tiktoken loads: its tables now
            self.take_acp_spools_soon()
        finally:
            self._warmed.set()
        threading.Thread(target=self._import_after_listing, name="ctxd-imports", daemon=True).start()

    def _import_after_listing(self) -> None:
        """What compactions and snapshots import, once the sessions found at the start are listed:
        a cold owner listing thousands of them has both cores busy, and these imports (0.2 s of CPU)
        would run beside it, each system call of its listing then waiting for the interpreter's lock."""
        if self.sessions is not None:
            self.sessions.follower.listed.wait(LISTING_WAIT_SECONDS)
        import ctxd.compact.run  # noqa: F401
        import ctxd.workspace.checkpoints  # noqa: F401

    def take_acp_spools_soon(self) -> None:
        """`_take_acp_spools` on the background thread (nothing waits for it; a closed daemon skips it)."""
        with contextlib.suppress(RuntimeError):
            self.background.submit(self._take_acp_spools)

    def _take_acp_spools(self) -> None:
        """Store the records `ctxd acp` proxies that ended left unsent (ctxd/acpspool.py): after the
        warm-up, and when a proxy opens a session (one may have ended while none could be reached)."""
        from ctxd import acpspool
        from ctxd.server import handlers

        try:
            stored = acpspool.take_ended(self.service.state_dir,
                                         functools.partial(handlers.acp_spooled, self.service, self.everyone.notify),
                                         log.info)
        except Exception:  # noqa: BLE001 - the spools stay for the next time
            log.exception("storing the records ACP proxies left failed")
            return
        if stored:
            log.info("stored %d records ACP proxies left", stored)

    def wait_warmed(self) -> None:
        self._warmed.wait(WARM_UP_WAIT_SECONDS)

    def _follow_sessions(self) -> None:
        """Follow the agents' sessions (ctxd/sessions). `sources.*` come from the user's config and
        the editor's options, never from a workspace's own file.

        Only while this daemon holds its state dir's follow lock (`ownerlink.follow_lock`): each
        followed session's thread has one writer, whatever runs beside it (the owner, daemons
        serving alone with `CTXD_OWNER=0`). When another process holds it, this daemon reads the
        threads that one writes and tries again every FOLLOW_RETRY_SECONDS, so that it follows
        them once the other left (from where its store says that one stopped)."""
        from ctxd.sessions.bridge import SessionBridge

        with self._following:
            if self.sessions is not None or self._closed or not self._take_follow_lock():
                return
            from ctxd.sessions.hook_watch import HookWatcher  # what the agents' hooks and status line wrote

            settings = load_settings(None, self.service.init_options, [])
            self.sessions = SessionBridge(self.service, settings, self.threads_changed,
                                          state_dir=self.service.state_dir)
            self.sessions.start([w.root for w in self.service.folders()])  # (first: a cold listing waits for it)
            everyone = self.everyone
            self.hook_watcher = HookWatcher(
                self.service, lambda uri: everyone.notify(methods.GHOST_CHANGED, {"workspace": uri}))
            self.hook_watcher.start()

    def _take_follow_lock(self) -> bool:
        """Whether this daemon may follow the sessions: it holds the state dir's follow lock, or no
        lock can be had there (its folder cannot be made or trusted: no owner can run there either,
        and the daemon follows as it always did). When another process holds it, a retry is set."""
        from ctxd import ownerlink

        try:
            self._follow_lock = ownerlink.follow_lock(self.service.state_dir)
        except OSError as error:
            log.warning("following the agents' sessions without the state dir's follow lock (%s): another "
                        "ctxd process serving alone on %s would follow them too", error, self.service.state_dir)
            return True
        if self._follow_lock is not None:
            if self.followed_elsewhere:
                log.warning("the process that followed the agents' sessions of %s left: this one follows them now",
                            self.service.state_dir)
            self.followed_elsewhere = False
            return True
        if not self.followed_elsewhere:
            log.warning("another ctxd process follows the agents' sessions of %s (the owner, or a daemon serving "
                        "alone): this one reads the threads it writes, and follows them once it leaves",
                        self.service.state_dir)
        self.followed_elsewhere = True
        with self._lock:
            if not self._closed:
                if self._watcher is None or not self._watcher.is_alive():
                    self._watcher = threading.Thread(target=self._watch_follower, name="ctxd-watch-follower",
                                                     daemon=True)
                    self._watcher.start()
                self._follow_retry = threading.Timer(FOLLOW_RETRY_SECONDS, self._follow_sessions)
                self._follow_retry.daemon = True
                self._follow_retry.name = "ctxd-follow-retry"
                self._follow_retry.start()
        return False

    def _watch_follower(self) -> None:
        """While another process follows the sessions, tell this daemon's clients what it writes
        to their threads, as the follower tells its own: the editor's thread list and gauge would
        otherwise stay as they were until the user asked again. A look costs a read of the ledger's
        `-shm` header while nothing was committed (`Store.data_version`); it ends once this daemon
        follows them itself (its own writes tell its clients)."""
        seen: dict[str, tuple[Any, dict[str, tuple[Any, ...]]]] = {}
        while not self._watch_stop.wait(WATCH_FOLLOWER_SECONDS) and self.followed_elsewhere:
            for workspace in self.service.folders():
                try:
                    self._notice_follower_writes(workspace, seen)
                except CtxdError as error:  # (the store unavailable for now: the next look tries again)
                    log.debug("%s: no look at what the follower wrote: %s", workspace.uri, error.message)
                except Exception:  # noqa: BLE001 - one folder's failure never ends the looks at the others
                    log.exception("%s: looking at what the follower wrote failed", workspace.uri)

    def _notice_follower_writes(self, workspace: Workspace, seen: dict[str, tuple[Any, dict[str, tuple[Any, ...]]]],
                                ) -> None:
        """One look at a folder's ledger: the followed threads whose rows changed since the last
        are named in `ctxd/threadsChanged` and their usage pushed (each read again from the store:
        the cache drops what another process changed). The first look only notes them."""
        version = workspace.committed_elsewhere()
        known = seen.get(workspace.uri)
        if version is None or (known is not None and known[0] == version):
            return
        rows = workspace.followed_rows()  # (after the version: a commit in between is seen again next time)
        seen[workspace.uri] = (version, rows)
        if known is None:
            return
        before = known[1]
        changed = sorted(thread for thread in rows.keys() | before.keys() if rows.get(thread) != before.get(thread))
        if not changed:
            return
        self.threads_changed(workspace.uri, changed)
        written = sorted((thread for thread in changed if thread in rows), key=lambda thread: rows[thread][0],
                         reverse=True)
        for thread in written[:USAGE_PUSHES_AT_ONCE]:
            self._usage_changed(workspace.uri, thread, workspace.usage(thread))

    def folders_changed(self) -> None:
        if self.sessions is not None:
            self.sessions.set_folders([w.root for w in self.service.folders()])

    def _on_open(self, workspace: Workspace) -> None:
        workspace.auto_compactor = self._auto_compact  # compacts before a prompt over the limit
        workspace.pricer = functools.partial(self._price, workspace)  # a client thread's cost
        workspace.tree_watch = self.tree_watch  # None until the warm-up (`watch_trees`)
        if self.tree_watch is not None:
            self._prime(workspace)

    def watch_trees(self) -> None:
        """From now on this daemon's captures re-check only what its file watch saw change
        (`ctxd.ghost.treewatch`), and the open folders are watched at once; with CTXD_TREE_WATCH=0
        every capture reads the whole tree."""
        if os.environ.get("CTXD_TREE_WATCH") == "0":
            return
        from ctxd.ghost.treewatch import TreeWatch

        with self._lock:
            if self.tree_watch is not None or self._closed:
                return
            self.tree_watch = TreeWatch()
        for workspace in self.service.folders():
            workspace.tree_watch = self.tree_watch
            self._prime(workspace)

    def _prime(self, workspace: Workspace) -> None:
        """Start watching a folder whose checkpoints are automatic, so its first one is short."""
        from ctxd.ghost.checkpoint import automatic_on

        if automatic_on(workspace.settings.ghost):
            self.background.submit(self._prime_now, workspace)

    def _prime_now(self, workspace: Workspace) -> None:
        from ctxd.ghost.take import prime

        watch = self.tree_watch
        if watch is None:
            return
        try:
            prime(workspace.opened_root(), settings=workspace.settings.ghost, watch=watch, state_dir=workspace.state_dir)
        except CtxdError as error:
            log.info("%s: no capture ahead of the first checkpoint: %s", workspace.uri, error.message)

    @staticmethod
    def _price(workspace: Workspace, spend: dict[str, dict[str, int]]) -> dict[str, Any]:
        from ctxd.sessions.pricing import client_cost

        return client_cost(spend, workspace.settings.prices)

    def _auto_compact(self, workspace: Workspace, thread: str) -> None:
        from ctxd.compact import run as compaction

        compaction.auto_compact(workspace, thread, self.events)

    def close(self) -> None:
        """The last session ended: requests already running finish, nothing else starts."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            retry = self._follow_retry
        self._watch_stop.set()
        if retry is not None:
            retry.cancel()
        with self._following:  # (a retry taking the sessions over now: once it has, they are stopped)
            if self.sessions is not None:
                self.sessions.stop()
            if self.hook_watcher is not None:
                self.hook_watcher.stop()
        if self.tree_watch is not None:
            self.tree_watch.close()
        self.lanes.close()
        self.background.shutdown(wait=False, cancel_futures=True)
        self.executor.shutdown(wait=True, cancel_futures=True)
        self.service.close()
        if self._follow_lock is not None:  # what it followed is written: another process may follow them now
            with contextlib.suppress(OSError):
                os.close(self._follow_lock)
            self._follow_lock = None


class Broadcast:
    """Notifications about the workspaces (usage, threads, snapshots, automatic compactions): to
    every session that is past `initialize`."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon

    def notify(self, method: str, params: dict[str, Any]) -> None:
        for client in self.daemon.initialized_clients():
            try:
                client.outbox.notify(method, params)
            except (OSError, ValueError):  # that client is gone (its socket, or its closed file); the others get it
                log.debug("a notification to a departed client was dropped")

    def show_message(self, message: str, kind: int = methods.MESSAGE_WARNING) -> None:
        self.notify(methods.SHOW_MESSAGE, {"type": kind, "message": message})

    def progress(self, token: int | str | None, value: dict[str, Any]) -> None:
        if token is not None:
            self.notify(methods.PROGRESS, {"token": token, "value": value})
