"""Where every message enters: the JSON-RPC server, its lifecycle, and the order requests run in.

One stack, ctxd's own, without an event loop. The hardened reader (`framing.py`) reads frames on
one thread and calls `dispatch` for each: it checks the envelope and the LSP lifecycle, answers
lifecycle messages itself, and hands each `ctxd/*` request to a worker (`lanes.py`: in order per
(workspace, thread); compactions, snapshots and restores run beside them). The worker parses the
params, calls its handler (`handlers.py`) and writes the reply, encoded there as strict JSON.

Why not pygls: measured on the landed daemon, pygls' per-message structuring (cattrs building
lsprotocol objects, then thrown away for the raw params ctxd's pydantic models parse) was ~1.7 ms
of a 2.4 ms `ctxd/record`; its notify could not send plain dicts, its stdio loop read on the
handlers' pool, and ctxd had to reach into private attributes for the lifecycle. Why no asyncio
either: every request crossed from the reader to the loop and from the loop to a worker; going
from the reader straight to the worker halves the thread switches on the hot path
(`bench/bench_speed.py`). What pygls gave besides was a method table and cancellation, a few
dozen lines here.

Two requests are answered on the reader thread itself when nothing of their thread is queued and
they need no waiting: `ctxd/usage` of a thread in memory (the gauge's hot path, read-only), and a
small `ctxd/record` into a thread in memory while the workspace and its database are free (an
agent's hot path). Handing a request to a worker costs more CPU than storing a small record
(`bench/bench_speed.py`); anything that would wait still goes to a worker, so one locked database
never stalls reading.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO, Callable

from ctxd import __version__
from ctxd.errors import (
    Cancelled,
    CtxdError,
    InternalError,
    InvalidParams,
    InvalidRequest,
    ServerNotInitialized,
)
from ctxd.ledger.workspace import Service, Workspace
from ctxd.protocol import methods
from ctxd.server import memory
from ctxd.server.events import CompactionEvents, Outbox, Throttle
from ctxd.server.framing import LockedWriter, reader_loop
from ctxd.server.lanes import Backlog, Lanes
from ctxd.settings import load_settings

log = logging.getLogger(__name__)

USAGE_INTERVAL_SECONDS = 0.1
WORKER_THREADS = 8
# Threads of one workspace that may hold workers at once (see lanes.py).
WORKSPACE_WORKERS = 2
WARM_UP_WAIT_SECONDS = 30.0
# A `ctxd/record` request at most this large may be stored on the reader thread (see above).
RECORD_NOW_MAX_BYTES = 64 * 1024
# Requests handed to workers and not answered yet, at most (see lanes.Backlog).
BACKLOG_REQUESTS = 1024
BACKLOG_BYTES = 32 * 1024 * 1024

# Long operations run beside a thread's other requests.
UNORDERED = frozenset({methods.COMPACT, methods.GHOST_SNAPSHOT, methods.GHOST_LIST, methods.GHOST_RESTORE,
                       methods.GHOST_DIFF, methods.GHOST_DELETE, methods.STATUS})


def _valid_id(value: Any) -> bool:
    return isinstance(value, (int, str)) and not isinstance(value, bool)


def _ordering_key(method: str, raw_params: Any) -> tuple[str, str] | None:
    if method in UNORDERED or not isinstance(raw_params, dict):
        return None
    workspace, thread = raw_params.get("workspace"), raw_params.get("thread", "default")
    if not isinstance(workspace, str) or not isinstance(thread, str):
        return None
    return (workspace, thread)


class CtxdServer:
    """One client's session: the open workspaces, the workers, and the lifecycle state."""

    def __init__(self, state_dir: Path | None = None) -> None:
        self.state_dir_override = state_dir
        self.service = Service(state_dir, listener=self._usage_changed)
        self.executor = ThreadPoolExecutor(max_workers=WORKER_THREADS, thread_name_prefix="ctxd-worker")
        self.lanes = Lanes(self.executor, WORKSPACE_WORKERS)
        # Checks run for every folder opened (an interrupted restore), one at a time: thousands of
        # folders added at once never hold the workers that answer requests.
        self.background = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctxd-background")
        self.backlog = Backlog(BACKLOG_REQUESTS, BACKLOG_BYTES)
        self.throttle = Throttle(self._send_usage, USAGE_INTERVAL_SECONDS)
        self.outbox: Outbox | None = None
        self.events: CompactionEvents | None = None
        self.initialized = False  # `initialize` answered
        self.shutting_down = False
        self._cancels: dict[Any, threading.Event] = {}
        self._shown: set[str] = set()  # settings problems already shown (each once per session)
        self.sessions: Any = None  # ctxd.sessions.bridge.SessionBridge, once warmed up
        self.hook_watcher: Any = None  # ctxd.sessions.hook_watch.HookWatcher, started with it
        self._warmed = threading.Event()  # set when `_warm_up` is done
        # `handlers.record_now`, once the warm-up imported it (it imports pydantic: not at start).
        self._record_handler: Callable[[Callable[[str], Workspace], Any], dict[str, Any] | None] | None = None

    # --- outgoing --------------------------------------------------------------------------------

    def _usage_changed(self, uri: str, thread: str, usage: dict[str, Any]) -> None:
        self.throttle.offer((uri, thread), usage)  # most are replaced before they go: built in `_send_usage`

    def _send_usage(self, key: tuple[str, str], usage: dict[str, Any]) -> None:
        if self.outbox is not None:
            self.outbox.notify(methods.USAGE_CHANGED, {"workspace": key[0], "thread": key[1], **usage})

    # --- dispatch (the reader thread) ------------------------------------------------------------

    def dispatch(self, message: dict[str, Any], size: int = 0) -> None:
        """Check a message's envelope and the lifecycle, then answer it or hand it to a worker.
        `size`: the message's length in bytes."""
        assert self.outbox is not None
        method, has_id, msg_id = message.get("method"), "id" in message, message.get("id")
        if (message.get("jsonrpc") != "2.0" or (method is not None and not isinstance(method, str))
                or (has_id and msg_id is not None and not _valid_id(msg_id))):
            if has_id:
                self.outbox.error(msg_id if _valid_id(msg_id) else None, -32600, "Invalid Request")
            return
        if method is None:
            return  # a response to something we never ask: nothing to do
        params = message.get("params")
        if not has_id:
            self._notification(method, params)
            return
        try:
            self._check_lifecycle(method)
        except CtxdError as error:
            self.outbox.error(msg_id, error.code, error.message)
            return
        if method == methods.INITIALIZE:
            self._initialize(msg_id, params)
        elif method == methods.SHUTDOWN:
            self.shutting_down = True
            self.outbox.reply(msg_id, None)
        elif method not in methods.REQUESTS:
            self.outbox.error(msg_id, -32601, f"Method not found: {method}")
        else:
            if log.isEnabledFor(logging.DEBUG):  # -v; RedactSecrets (ctxd/cli.py) takes keys out
                log.debug("request %s %.2000r", method, params)
            if not self._answer_now(method, msg_id, params, size):
                self._submit(method, msg_id, params, size)

    def _check_lifecycle(self, method: str) -> None:
        if method == methods.INITIALIZE:
            if self.initialized:
                raise InvalidRequest("Invalid Request: already initialized")
        elif not self.initialized:
            raise ServerNotInitialized("Server not initialized: send 'initialize' first")
        elif self.shutting_down:
            raise InvalidRequest("Invalid Request: the server is shutting down")

    def _notification(self, method: str, params: Any) -> None:
        if method == methods.EXIT:
            self._exit(0 if self.shutting_down else 1)
        elif method == methods.CANCEL_REQUEST:
            msg_id = params.get("id") if isinstance(params, dict) else None
            cancel = self._cancels.get(msg_id) if _valid_id(msg_id) else None
            if cancel is not None:
                cancel.set()
        elif method == methods.DID_CHANGE_WORKSPACE_FOLDERS and self.initialized:
            self.executor.submit(self._change_folders, params)
        # `initialized`, `$/setTrace` and any other notification: nothing to do.

    def _answer_now(self, method: str, msg_id: Any, params: Any, size: int) -> bool:
        """Answer `ctxd/usage` or a small `ctxd/record` at once when nothing of its thread is queued
        and the answer needs no waiting; False hands it to a worker like every other request."""
        key = _ordering_key(method, params)
        if key is None or self.lanes.busy(key):
            return False
        if method == methods.USAGE:
            return self._usage_now(key, msg_id)
        if method == methods.RECORD and size <= RECORD_NOW_MAX_BYTES and self._record_handler is not None:
            return self._record_now(msg_id, params)
        return False

    def _usage_now(self, key: tuple[str, str], msg_id: Any) -> bool:
        """The gauge's breakdown from memory; a worker reports any error."""
        try:
            answer = self.service.workspace(key[0]).breakdown_now(key[1])
        except Exception:  # noqa: BLE001 - the worker's attempt reports it
            return False
        if answer is not None:
            self.outbox.reply_repeated(msg_id, answer)  # type: ignore[union-attr]
        return answer is not None

    def _record_now(self, msg_id: Any, params: Any) -> bool:
        """A small record stored here, or False having written nothing; errors are answered here."""
        assert self._record_handler is not None
        try:
            answer = self._record_handler(self.service.workspace, params)
        except Exception as error:  # noqa: BLE001 - reported to the client
            self._report(methods.RECORD, msg_id, error)
            return True
        if answer is not None:
            self.outbox.reply(msg_id, answer)  # type: ignore[union-attr]
        return answer is not None

    def _submit(self, method: str, msg_id: Any, raw_params: Any, size: int) -> None:
        self.backlog.admit(size)  # waits while too many answers are still to be sent
        cancel = self._cancels[msg_id] = threading.Event()
        job = functools.partial(self._run, method, msg_id, [raw_params], cancel, size)
        key = _ordering_key(method, raw_params)
        if key is None:  # long operations (and unaddressed requests) run beside the rest
            self.executor.submit(job)
        else:
            self.lanes.submit(key, job)

    def _run(self, method: str, msg_id: Any, boxed_params: list[Any], cancel: threading.Event, size: int) -> None:
        """On a worker: parse, call the handler, send the reply (encoded here). The params come in a
        box emptied here, so that nothing holds them once answered (memory.after_request)."""
        try:
            self._answer(method, msg_id, boxed_params.pop(), cancel)
        finally:
            self.backlog.done(size)
            memory.after_request(size)

    def _answer(self, method: str, msg_id: Any, raw_params: Any, cancel: threading.Event) -> None:
        from ctxd.protocol.params import parse_params
        from ctxd.server.handlers import HANDLERS, Call

        assert self.outbox is not None and self.events is not None
        params_model, fn = HANDLERS[method]
        if method == methods.STATUS:
            self._warmed.wait(WARM_UP_WAIT_SECONDS)  # it lists the session sources
        try:
            if cancel.is_set():  # cancelled while it waited for the thread's earlier requests
                raise Cancelled("request cancelled")
            params = parse_params(params_model, raw_params)
            workspace = self.service.workspace(params.workspace)
            result = fn(Call(workspace, cancel, self.outbox, self.events, self.sessions), params)
        except Exception as error:  # noqa: BLE001 - reported to the client
            self._report(method, msg_id, error)
            return
        finally:
            if self._cancels.get(msg_id) is cancel:
                del self._cancels[msg_id]
        self.outbox.reply(msg_id, result)

    def _report(self, method: str, msg_id: Any, error: Exception) -> None:
        """The error reply of a request that raised `error`; anything but a CtxdError is a bug of
        ours, logged with its traceback."""
        assert self.outbox is not None
        if isinstance(error, CtxdError):
            self.outbox.error(msg_id, error.code, error.message, error.data)
        else:
            log.error("%s failed", method, exc_info=error)
            self.outbox.error(msg_id, InternalError.code, f"{method} failed inside ctxd; see the daemon's log")

    # --- lifecycle -------------------------------------------------------------------------------

    def _initialize(self, msg_id: Any, params: Any) -> None:
        """On the reader thread: nothing else is read until the folders are open."""
        assert self.outbox is not None
        try:
            self._open_initial_folders(params)
        except CtxdError as error:
            self.outbox.error(msg_id, error.code, error.message)
            return  # the client may try again
        except Exception as error:  # noqa: BLE001 - a bug of ours must not end the session
            self._report(methods.INITIALIZE, msg_id, error)
            return
        self.outbox.reply(msg_id, {
            "capabilities": {
                "workspace": {"workspaceFolders": {"supported": True, "changeNotifications": True}},
                "experimental": {"ctxd": {"protocolVersion": methods.PROTOCOL_VERSION, "methods": sorted(methods.REQUESTS)}},
            },
            "serverInfo": {"name": "ctxd", "version": __version__},
        })
        self.initialized = True
        self.executor.submit(self._warm_up)

    def _warm_up(self) -> None:
        """After `initialize` is answered, while the editor is still starting: import what requests
        need (pydantic, the handlers), build the estimator's tables, follow the agents' sessions,
        then import what compactions and snapshots need, instead of in the first request that does."""
        try:
            from ctxd.server import handlers  # the first request needs it: first
            from ctxd.tokens import estimator

            self._record_handler = handlers.record_now
            estimator.prepare()  # counts before tiktoken is loaded are estimates: its tables now
            self._follow_sessions()
            import ctxd.compact.run  # noqa: F401
            import ctxd.ghost.checkpoints  # noqa: F401
        finally:
            self._warmed.set()

    def _open_initial_folders(self, params: Any) -> None:
        if params is not None and not isinstance(params, dict):
            raise InvalidParams("params: must be an object")
        params = params or {}
        options = params.get("initializationOptions")
        ctxd_options = options.get("ctxd") if isinstance(options, dict) else None
        self.service.init_options = ctxd_options if isinstance(ctxd_options, dict) else {}
        if self.state_dir_override is None:
            state_dir = load_settings(None, self.service.init_options, []).state_dir
            if state_dir:
                try:
                    self.service.state_dir = Path(state_dir).expanduser()
                except RuntimeError as error:  # `~someone` who is not a user here
                    self.outbox.show_message(f"ctxd: stateDir {state_dir!r} cannot be used ({error}); "  # type: ignore[union-attr]
                                             f"ledgers stay in {self.service.state_dir}")
        folders = params.get("workspaceFolders")
        uris = [f.get("uri") for f in folders if isinstance(f, dict)] if isinstance(folders, list) else []
        if not uris and isinstance(params.get("rootUri"), str):
            uris = [params["rootUri"]]
        for uri in uris:
            self._open(uri)

    def _follow_sessions(self) -> None:
        """Follow the agents' sessions (ctxd/sessions). `sources.*` come from the user's config and
        the editor's options, never from a workspace's own file."""
        from ctxd.sessions.bridge import SessionBridge

        if self.sessions is not None:
            return
        from ctxd.sessions.hook_watch import HookWatcher  # what the agents' hooks and status line wrote

        self.hook_watcher = HookWatcher(
            self.service, lambda uri: self.outbox.notify(methods.GHOST_CHANGED, {"workspace": uri}))  # type: ignore[union-attr]
        self.hook_watcher.start()
        settings = load_settings(None, self.service.init_options, [])
        self.sessions = SessionBridge(
            self.service, settings, lambda uri: self.outbox.notify(methods.THREADS_CHANGED, {"workspace": uri}))  # type: ignore[union-attr]
        self.sessions.start([w.root for w in self.service.folders()])

    def _open(self, uri: Any) -> None:
        if not isinstance(uri, str):
            return
        try:
            workspace = self.service.open_folder(uri)
        except Exception as error:  # noqa: BLE001 - one folder that cannot open never ends the session
            message = error.message if isinstance(error, CtxdError) else f"{uri!r}: {type(error).__name__}: {error}"
            log.warning("not opening workspace folder: %s", message, exc_info=not isinstance(error, CtxdError))
            self.outbox.show_message(f"ctxd: not opening workspace folder: {message}")  # type: ignore[union-attr]
            return
        for problem in workspace.problems:  # bad values, unknown keys, settings ignored (trust)
            text = f"ctxd: {problem}"
            if text not in self._shown:
                self._shown.add(text)
                self.outbox.show_message(text)  # type: ignore[union-attr]
        self.background.submit(self._report_interrupted_restore, workspace)

    def _report_interrupted_restore(self, workspace: Any) -> None:
        """A snapshot restore a crash cut short is told at once, with the snapshot to go back to."""
        from ctxd.ghost import snapshots as ghost

        try:
            found = ghost.interrupted_restore(workspace.opened_root(), state_dir=workspace.state_dir, create=False)
        except CtxdError:
            return
        if found is not None:
            self.outbox.show_message(f"ctxd: {workspace.root}: {found['message']}")  # type: ignore[union-attr]

    def _on_open(self, workspace: Workspace) -> None:
        workspace.auto_compactor = self._auto_compact  # compacts before a prompt over the limit
        workspace.pricer = functools.partial(self._price, workspace)  # a client thread's cost

    @staticmethod
    def _price(workspace: Workspace, spend: dict[str, dict[str, int]]) -> dict[str, Any]:
        from ctxd.sessions.pricing import client_cost

        return client_cost(spend, workspace.settings.prices)

    def _auto_compact(self, workspace: Workspace, thread: str) -> None:
        from ctxd.compact import run as compaction

        assert self.events is not None
        compaction.auto_compact(workspace, thread, self.events)

    def _change_folders(self, params: Any) -> None:
        event = params.get("event") if isinstance(params, dict) else None
        if not isinstance(event, dict):
            return
        for folder in event.get("removed") or []:
            if isinstance(folder, dict) and isinstance(folder.get("uri"), str):
                self.service.close_folder(folder["uri"])
        for folder in event.get("added") or []:
            if isinstance(folder, dict):
                self._open(folder.get("uri"))
        if self.sessions is not None:
            self.sessions.set_folders([w.root for w in self.service.folders()])

    def _exit(self, code: int) -> None:
        # Leave at once: the reader thread is blocked on stdin, and an interpreter shutdown with a
        # thread inside a buffered read aborts the process. Requests already running finish.
        self.lanes.close()
        self.background.shutdown(wait=False, cancel_futures=True)
        self.executor.shutdown(wait=True, cancel_futures=True)
        self.service.close()
        os._exit(code)

    # --- serving ---------------------------------------------------------------------------------

    def serve(self, stdin: BinaryIO, stdout: BinaryIO) -> None:
        """Serve one client over a pair of byte streams until it leaves."""
        writer = LockedWriter(stdout)
        self.outbox = Outbox(writer)
        self.events = CompactionEvents(self.outbox, self.throttle)
        self.service.on_open = self._on_open
        try:
            reader_loop(stdin, writer, self.dispatch)
        finally:
            if self.sessions is not None:
                self.sessions.stop()
            if self.hook_watcher is not None:
                self.hook_watcher.stop()
            self.lanes.close()
            self.background.shutdown(wait=False, cancel_futures=True)
            self.executor.shutdown(wait=True, cancel_futures=True)
            self.service.close()

    def serve_tcp(self, host: str, port: int, token_file: Path | None = None) -> None:
        """Serve the first client that authenticates over TCP (ctxd/server/tcp.py)."""
        from ctxd.server import tcp

        tcp.serve(host, port, self.service.state_dir, token_file, self.serve)
