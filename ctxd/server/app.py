"""Where every message enters: the JSON-RPC server, its lifecycle, and the order requests run in.

One stack, ctxd's own. The hardened reader (`framing.py`) reads frames on a thread of its own and
hands each parsed message to the event loop; `dispatch` checks the envelope and the LSP lifecycle,
answers lifecycle messages itself, and runs each `ctxd/*` handler (`handlers.py`) on a worker
thread. Replies are encoded on the worker, as strict JSON, and written under a lock.

Why not pygls: measured on the landed daemon, pygls' per-message structuring (cattrs building
lsprotocol objects, then thrown away for the raw params ctxd's pydantic models parse) was ~1.7 ms
of a 2.4 ms `ctxd/record`; its notify could not send plain dicts, its stdio loop read on the
handlers' pool, and ctxd had to reach into private attributes for the lifecycle. What pygls gave
ctxd besides was a method table and cancellation, a few dozen lines here.

Ordering: requests on one (workspace, thread) run in the order they arrived, so a client may
pipeline record, record, usage; long operations (compaction, snapshots, restores) run beside them.
`ctxd/usage` is answered on the loop itself when nothing is queued before it and the thread is in
memory: the gauge's hot path, read-only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, AsyncIterator, BinaryIO

from ctxd import __version__
from ctxd.compact import run as compaction
from ctxd.errors import (
    Cancelled,
    CtxdError,
    InternalError,
    InvalidParams,
    InvalidRequest,
    ServerNotInitialized,
)
from ctxd.ledger.workspace import Service
from ctxd.protocol import methods
from ctxd.protocol.params import parse_params
from ctxd.server.events import Outbox, Throttle
from ctxd.server.framing import LockedWriter, reader_loop
from ctxd.ghost import snapshots as ghost
from ctxd.server.handlers import HANDLERS, Call, CompactionEvents
from ctxd.settings import load_settings

log = logging.getLogger(__name__)

USAGE_INTERVAL_SECONDS = 0.1
WORKER_THREADS = 8
# Short requests of one workspace that may hold workers at once. They serialise on the workspace's
# lock anyway; the cap keeps a workspace whose database is locked by another process (each request
# waits up to the store's bound) from taking every worker while other workspaces wait.
WORKSPACE_WORKERS = 2

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


def _pending_key(message: dict[str, Any]) -> tuple[str, str] | None:
    """The (workspace, thread) a `ctxd/*` request is ordered on, if it is one (with an id)."""
    method = message.get("method")
    if "id" not in message or method not in HANDLERS:
        return None
    return _ordering_key(method, message.get("params"))


class KeyedLimit:
    """At most `limit` holders per key at once (event loop only); idle keys are forgotten."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._slots: dict[str, tuple[asyncio.Semaphore, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        semaphore, users = self._slots.get(key) or (asyncio.Semaphore(self.limit), 0)
        self._slots[key] = (semaphore, users + 1)
        try:
            async with semaphore:
                yield
        finally:
            semaphore, users = self._slots[key]
            if users == 1:
                del self._slots[key]
            else:
                self._slots[key] = (semaphore, users - 1)


class CtxdServer:
    """One client's session: the open workspaces, the workers, and the lifecycle state."""

    def __init__(self, state_dir: Path | None = None) -> None:
        self.state_dir_override = state_dir
        self.service = Service(state_dir, listener=self._usage_changed)
        self.executor = ThreadPoolExecutor(max_workers=WORKER_THREADS, thread_name_prefix="ctxd-worker")
        self.throttle = Throttle(self._send_usage, USAGE_INTERVAL_SECONDS)
        self.outbox: Outbox | None = None
        self.events: CompactionEvents | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.initialized: asyncio.Future[None] | None = None  # set when `initialize` arrives
        self.shutting_down = False
        self._tails: dict[tuple[str, str], asyncio.Future[None]] = {}
        self._cancels: dict[Any, threading.Event] = {}
        # Requests read but not yet answered, per (workspace, thread); read by the reader thread.
        self._pending: dict[tuple[str, str], int] = {}
        self._pending_lock = threading.Lock()
        self._ready = threading.Event()  # `initialize` answered and no `shutdown` yet
        self._slots = KeyedLimit(WORKSPACE_WORKERS)
        self._shown: set[str] = set()  # settings problems already shown (each once per session)
        self.sessions: Any = None  # ctxd.sessions.bridge.SessionBridge, from `initialize` on

    # --- outgoing --------------------------------------------------------------------------------

    def _usage_changed(self, uri: str, thread: str, usage: dict[str, Any]) -> None:
        self.throttle.offer((uri, thread), {"workspace": uri, "thread": thread, **usage})

    def _send_usage(self, _key: Any, params: dict[str, Any]) -> None:
        if self.outbox is not None:
            self.outbox.notify(methods.USAGE_CHANGED, params)

    # --- dispatch (event loop) -------------------------------------------------------------------

    def dispatch(self, message: dict[str, Any]) -> None:
        """Check a message's envelope and the lifecycle, then answer it or start its handler."""
        if not self._dispatch(message):
            self._release(_pending_key(message))

    def _dispatch(self, message: dict[str, Any]) -> bool:
        """True when a `_request` task took the message (and releases its pending count)."""
        assert self.outbox is not None
        method, has_id, msg_id = message.get("method"), "id" in message, message.get("id")
        if (message.get("jsonrpc") != "2.0" or (method is not None and not isinstance(method, str))
                or (has_id and msg_id is not None and not _valid_id(msg_id))):
            if has_id:
                self.outbox.error(msg_id if _valid_id(msg_id) else None, -32600, "Invalid Request")
            return False
        if method is None:
            return False  # a response to something we never ask: nothing to do
        params = message.get("params")
        if not has_id:
            self._notification(method, params)
            return False
        try:
            self._check_lifecycle(method)
        except CtxdError as error:
            self.outbox.error(msg_id, error.code, error.message)
            return False
        if method == methods.INITIALIZE:
            self.initialized = self.loop.create_future()  # type: ignore[union-attr]
            self.loop.create_task(self._initialize(msg_id, params))  # type: ignore[union-attr]
        elif method == methods.SHUTDOWN:
            self.shutting_down = True
            self._ready.clear()
            self.outbox.reply(msg_id, None)
        elif method not in HANDLERS:
            self.outbox.error(msg_id, -32601, f"Method not found: {method}")
        else:
            self.loop.create_task(self._request(method, msg_id, params))  # type: ignore[union-attr]
            return True
        return False

    def _check_lifecycle(self, method: str) -> None:
        if method == methods.INITIALIZE:
            if self.initialized is not None:
                raise InvalidRequest("Invalid Request: already initialized")
        elif self.initialized is None:
            raise ServerNotInitialized("Server not initialized: send 'initialize' first")
        elif self.shutting_down:
            raise InvalidRequest("Invalid Request: the server is shutting down")

    def _notification(self, method: str, params: Any) -> None:
        if method == methods.EXIT:
            self._exit(0 if self.shutting_down else 1)
        elif method == methods.CANCEL_REQUEST:
            cancel = self._cancels.get(params.get("id")) if isinstance(params, dict) else None
            if cancel is not None:
                cancel.set()
        elif method == methods.DID_CHANGE_WORKSPACE_FOLDERS and self.initialized is not None:
            self.loop.run_in_executor(self.executor, self._change_folders, params)  # type: ignore[union-attr]
        # `initialized`, `$/setTrace` and any other notification: nothing to do.

    def _usage_now(self, message: dict[str, Any]) -> bool:
        """On the reader thread: answer the gauge's `ctxd/usage` at once when nothing of its thread
        is pending and the answer needs no waiting (the thread in memory, the workspace free);
        False hands it to the loop like every other request (which also reports any error)."""
        key = _pending_key(message)
        if message.get("method") != methods.USAGE or key is None or not self._ready.is_set():
            return False
        with self._pending_lock:
            if self._pending.get(key):
                return False
        try:
            workspace = self.service.workspace(key[0])
            answer = workspace.breakdown_now(key[1])
        except CtxdError:
            return False
        if answer is None:
            return False
        self.outbox.reply(message["id"], answer)  # type: ignore[union-attr]
        return True

    def _accept(self, message: dict[str, Any]) -> None:
        """On the reader thread: count the request as pending on its thread until it is answered
        (so an answer given here never overtakes it), then hand it to the loop."""
        key = _pending_key(message)
        if key is not None:
            with self._pending_lock:
                self._pending[key] = self._pending.get(key, 0) + 1
        self.loop.call_soon_threadsafe(self.dispatch, message)  # type: ignore[union-attr]

    def _release(self, key: tuple[str, str] | None) -> None:
        if key is None:
            return
        with self._pending_lock:
            left = self._pending.get(key, 0) - 1
            if left > 0:
                self._pending[key] = left
            else:
                self._pending.pop(key, None)

    async def _request(self, method: str, msg_id: Any, raw_params: Any) -> None:
        """Run one `ctxd/*` request on a worker, after the thread's earlier requests."""
        loop = asyncio.get_running_loop()
        key = _ordering_key(method, raw_params)
        previous = self._tails.get(key) if key else None
        mine: asyncio.Future[None] = loop.create_future()
        if key:
            self._tails[key] = mine
        cancel = self._cancels[msg_id] = threading.Event()
        try:
            await asyncio.shield(self.initialized)  # type: ignore[arg-type]
            if previous is not None:
                await asyncio.shield(previous)
            if key is None:  # long operations (and unaddressed requests) are not capped
                await loop.run_in_executor(self.executor, self._run, method, msg_id, raw_params, cancel)
            else:
                async with self._slots.hold(key[0]):
                    await loop.run_in_executor(self.executor, self._run, method, msg_id, raw_params, cancel)
        finally:
            self._cancels.pop(msg_id, None)
            mine.set_result(None)
            if key and self._tails.get(key) is mine:
                del self._tails[key]
            self._release(key if method in HANDLERS else None)

    def _run(self, method: str, msg_id: Any, raw_params: Any, cancel: threading.Event) -> None:
        """On a worker: parse, call the handler, send the reply (encoded here, off the loop)."""
        assert self.outbox is not None and self.events is not None
        params_model, fn = HANDLERS[method]
        if log.isEnabledFor(logging.DEBUG):  # -v; RedactSecrets (ctxd/cli.py) takes keys out
            log.debug("request %s %.2000r", method, raw_params)
        try:
            if cancel.is_set():  # cancelled while it waited for the thread's earlier requests
                raise Cancelled("request cancelled")
            params = parse_params(params_model, raw_params)
            workspace = self.service.workspace(params.workspace)
            result = fn(Call(workspace, cancel, self.outbox, self.events, self.sessions), params)
        except CtxdError as error:
            self.outbox.error(msg_id, error.code, error.message, error.data)
            return
        except Exception:
            log.exception("%s failed", method)
            self.outbox.error(msg_id, InternalError.code, f"{method} failed inside ctxd; see the daemon's log")
            return
        self.outbox.reply(msg_id, result)

    # --- lifecycle -------------------------------------------------------------------------------

    async def _initialize(self, msg_id: Any, params: Any) -> None:
        assert self.outbox is not None and self.initialized is not None
        try:
            await asyncio.get_running_loop().run_in_executor(self.executor, self._open_initial_folders, params)
        except CtxdError as error:
            self.outbox.error(msg_id, error.code, error.message)
            self.initialized = None  # the client may try again
            return
        self.outbox.reply(msg_id, {
            "capabilities": {
                "workspace": {"workspaceFolders": {"supported": True, "changeNotifications": True}},
                "experimental": {"ctxd": {"protocolVersion": methods.PROTOCOL_VERSION, "methods": sorted(HANDLERS)}},
            },
            "serverInfo": {"name": "ctxd", "version": __version__},
        })
        self.initialized.set_result(None)
        self._ready.set()

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
                self.service.state_dir = Path(state_dir).expanduser()
        folders = params.get("workspaceFolders")
        uris = [f.get("uri") for f in folders if isinstance(f, dict)] if isinstance(folders, list) else []
        if not uris and isinstance(params.get("rootUri"), str):
            uris = [params["rootUri"]]
        for uri in uris:
            self._open(uri)
        self._follow_sessions()

    def _follow_sessions(self) -> None:
        """Follow the agents' sessions (ctxd/sessions). `sources.*` come from the user's config and
        the editor's options, never from a workspace's own file."""
        from ctxd.sessions.bridge import SessionBridge

        if self.sessions is not None:
            return
        settings = load_settings(None, self.service.init_options, [])
        self.sessions = SessionBridge(
            self.service, settings, lambda uri: self.outbox.notify(methods.THREADS_CHANGED, {"workspace": uri}))  # type: ignore[union-attr]
        self.sessions.start([w.root for w in self.service.folders()])

    def _open(self, uri: Any) -> None:
        if not isinstance(uri, str):
            return
        try:
            workspace = self.service.open_folder(uri)
        except CtxdError as error:
            log.warning("not opening workspace folder: %s", error.message)
            self.outbox.show_message(f"ctxd: not opening workspace folder: {error.message}")  # type: ignore[union-attr]
            return
        for problem in workspace.problems:  # bad values, unknown keys, settings ignored (trust)
            text = f"ctxd: {problem}"
            if text not in self._shown:
                self._shown.add(text)
                self.outbox.show_message(text)  # type: ignore[union-attr]
        self.executor.submit(self._report_interrupted_restore, workspace)

    def _report_interrupted_restore(self, workspace: Any) -> None:
        """A snapshot restore a crash cut short is told at once, with the snapshot to go back to."""
        try:
            found = ghost.interrupted_restore(workspace.root, state_dir=workspace.state_dir, create=False)
        except CtxdError:
            return
        if found is not None:
            self.outbox.show_message(f"ctxd: {workspace.root}: {found['message']}")  # type: ignore[union-attr]

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
        # thread inside a buffered read aborts the process.
        self.executor.shutdown(wait=True, cancel_futures=True)
        self.service.close()
        os._exit(code)

    # --- serving ---------------------------------------------------------------------------------

    def serve(self, stdin: BinaryIO, stdout: BinaryIO) -> None:
        """Serve one client over a pair of byte streams until it leaves."""
        writer = LockedWriter(stdout)
        self.outbox = Outbox(writer)
        self.events = CompactionEvents(self.outbox, self.throttle)
        compaction.install(self.service, self.events)  # auto-compaction before prompts

        async def main() -> None:
            self.loop = loop = asyncio.get_running_loop()
            finished = asyncio.Event()

            def deliver(message: dict[str, Any]) -> None:
                if not self._usage_now(message):
                    self._accept(message)

            def read() -> None:
                try:
                    reader_loop(stdin, writer, deliver)
                finally:
                    loop.call_soon_threadsafe(finished.set)

            threading.Thread(target=read, name="ctxd-reader", daemon=True).start()
            await finished.wait()

        try:
            asyncio.run(main())
        finally:
            if self.sessions is not None:
                self.sessions.stop()
            self.executor.shutdown(wait=True, cancel_futures=True)
            self.service.close()

    def serve_tcp(self, host: str, port: int) -> None:
        with socket.create_server((host, port)) as listener:
            log.warning("listening on %s:%d", host, listener.getsockname()[1])
            connection, _ = listener.accept()
        with connection, connection.makefile("rb") as reader, connection.makefile("wb") as writer:
            self.serve(reader, writer)
