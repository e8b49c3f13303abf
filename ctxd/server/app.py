"""Where every message enters: the JSON-RPC server, its lifecycle, and the order requests run in.

One stack, ctxd's own, without an event loop. The server is built with its connection
(`connection.py`: stdio, an authenticated TCP socket, or memory): the connection reads frames on
one thread (`transport.py`), decodes them (`codec.py`) and calls `dispatch` for each, which answers
what could not be read and every protocol error with its code from `ctxd/errors.py`, checks the
envelope and the LSP lifecycle, answers lifecycle messages itself, and hands each `ctxd/*` request
to a worker (`lanes.py`: in order per (workspace, thread); compactions, snapshots and restores run
beside them). The worker parses the params, calls its handler (`handlers.py`) and writes the
reply, encoded there as strict JSON. Over TCP several sessions share one `Daemon` (daemon.py: the
workspaces, the workers); over stdio and in memory a session has its own.

Why not pygls: its per-message structuring costs several times what the rest of a small request
does, and its stdio loop reads on the handlers' pool (the README's "Why" section, measured by
`bench/bench_stack.py`). Why no asyncio either: every request would cross from the reader to the
loop and from the loop to a worker; going from the reader straight to the worker halves the
thread switches on the hot path. What pygls gave besides was a method table and cancellation.

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
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from ctxd import __version__
from ctxd.errors import (
    Cancelled,
    CtxdError,
    InternalError,
    InvalidParams,
    InvalidRequest,
    MethodNotFound,
    ServerNotInitialized,
)
from ctxd.protocol import methods
from ctxd.server import memory
from ctxd.server.codec import Incoming, Rejected, Shortened
from ctxd.server.connection import Connection, StreamConnection
from ctxd.server.daemon import Daemon, RecordNow
from ctxd.server.events import CompactionEvents, Outbox
from ctxd.server.lanes import Backlog
from ctxd.server.transport import MAX_STRING_BYTES
from ctxd.settings import load_settings
from ctxd.workspace import Workspace, agent_titles

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

# A `ctxd/record` request at most this large may be stored on the reader thread (see above).
RECORD_NOW_MAX_BYTES = 64 * 1024
# Requests handed to workers and not answered yet, at most (see lanes.Backlog).
BACKLOG_REQUESTS = 1024
BACKLOG_BYTES = 32 * 1024 * 1024

# Long operations run beside a thread's other requests.
UNORDERED = frozenset({methods.COMPACT, methods.GHOST_SNAPSHOT, methods.GHOST_LIST, methods.GHOST_RESTORE,
                       methods.GHOST_DIFF, methods.GHOST_DELETE, methods.STATUS, methods.SESSIONS_SYNC,
                       methods.ACP_CHECKPOINT})


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
    """One client's session, built with its connection: its lifecycle state, its requests in flight,
    the folders it opened; the workspaces and workers are its daemon's."""

    def __init__(self, connection: Connection, state_dir: Path | None = None, daemon: Daemon | None = None,
                 role: str | None = None) -> None:
        self.connection = connection
        # "acp": a `ctxd acp` proxy's session, the only one that writes `acp:` threads. Only ctxd's own
        # code says so, on the owner's socket (ownerlink.Session); an editor's session never can.
        self.writes_acp = role == "acp"
        self.owns_daemon = daemon is None  # over stdio (and in memory) the session is the daemon
        self.daemon = daemon if daemon is not None else Daemon(state_dir)
        self.service = self.daemon.service
        self.outbox = Outbox(connection.writer)
        self.events = CompactionEvents(self.outbox, self.daemon.throttle)
        self.backlog = Backlog(BACKLOG_REQUESTS, BACKLOG_BYTES)
        self.initialized = False  # `initialize` answered
        self.shutting_down = False
        self.folders: set[str] = set()  # the workspaces this session opened (see Daemon.hold)
        self._cancels: dict[Any, threading.Event] = {}
        self._shown: set[str] = set()  # settings problems already shown (each once per session)
        self.options: dict[str, Any] | None = None  # `initializationOptions.ctxd`, when the client sent them
        self.daemon.join(self)

    @property
    def sessions(self) -> Any:
        return self.daemon.sessions

    # --- dispatch (the reader thread) ------------------------------------------------------------

    def dispatch(self, message: Incoming, size: int = 0) -> None:
        """Answer what could not be read, check a message's envelope and the lifecycle, then answer
        it or hand it to a worker. `size`: the message's length in bytes."""
        if isinstance(message, Rejected):
            if message.answer:
                self.outbox.fail(message.msg_id, message.error)
            return
        if isinstance(message, Shortened):
            self._report_shortened(message.sizes)
            return
        method, has_id, msg_id = message.get("method"), "id" in message, message.get("id")
        if (message.get("jsonrpc") != "2.0" or (method is not None and not isinstance(method, str))
                or (has_id and msg_id is not None and not _valid_id(msg_id))):
            if has_id:
                self.outbox.fail(msg_id if _valid_id(msg_id) else None, InvalidRequest("Invalid Request"))
            return
        if method is None:
            return  # a response to something we never ask: nothing to do
        params = message.get("params")
        if not has_id:
            self._notification(method, params)
            return
        try:
            self._check_lifecycle(method)
            if method not in methods.REQUESTS and method not in (methods.INITIALIZE, methods.SHUTDOWN):
                raise MethodNotFound(f"Method not found: {method}")
        except CtxdError as error:
            self.outbox.fail(msg_id, error)
            return
        if method == methods.INITIALIZE:
            self._initialize(msg_id, params)
        elif method == methods.SHUTDOWN:
            self.shutting_down = True
            self.outbox.reply(msg_id, None)
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
            self.daemon.executor.submit(self._change_folders, params)
        # `initialized`, `$/setTrace` and any other notification: nothing to do.

    def _answer_now(self, method: str, msg_id: Any, params: Any, size: int) -> bool:
        """Answer `ctxd/usage` or a small `ctxd/record` at once when nothing of its thread is queued
        and the answer needs no waiting; False hands it to a worker like every other request."""
        key = _ordering_key(method, params)
        if key is None or self.daemon.lanes.busy(key):
            return False
        if method == methods.USAGE:
            return self._usage_now(key, msg_id)
        record = self.daemon.record_handler
        if method == methods.RECORD and size <= RECORD_NOW_MAX_BYTES and record is not None:
            return self._record_now(record, msg_id, params)
        return False

    def _usage_now(self, key: tuple[str, str], msg_id: Any) -> bool:
        """The gauge's breakdown from memory; a worker reports any error."""
        try:
            answer = self.service.workspace(key[0]).breakdown_now(key[1])
        except Exception:  # noqa: BLE001 - the worker's attempt reports it
            return False
        if answer is not None:
            self.outbox.reply_repeated(msg_id, answer)
        return answer is not None

    def _record_now(self, record: RecordNow, msg_id: Any, params: Any) -> bool:
        """A small record stored here, or False having written nothing; errors are answered here."""
        try:
            answer = record(self.service.workspace, params)
        except Exception as error:  # noqa: BLE001 - reported to the client
            self._report(methods.RECORD, msg_id, error)
            return True
        if answer is not None:
            self.outbox.reply(msg_id, answer)
        return answer is not None

    def _submit(self, method: str, msg_id: Any, raw_params: Any, size: int) -> None:
        self.backlog.admit(size)  # waits while too many answers are still to be sent
        cancel = self._cancels[msg_id] = threading.Event()
        job = functools.partial(self._run, method, msg_id, [raw_params], cancel, size)
        key = _ordering_key(method, raw_params)
        if key is None:  # long operations (and unaddressed requests) run beside the rest
            self.daemon.executor.submit(job)
        else:
            self.daemon.lanes.submit(key, job)

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

        params_model, fn = HANDLERS[method]
        if method in (methods.STATUS, methods.SESSIONS_SYNC):
            self.daemon.wait_warmed()  # the session sources are followed by then
        try:
            if cancel.is_set():  # cancelled while it waited for the thread's earlier requests
                raise Cancelled("request cancelled")
            params = parse_params(params_model, raw_params)
            workspace = self.service.workspace(params.workspace)
            result = fn(Call(workspace, cancel, self.outbox, self.events, self.sessions, self.writes_acp,
                             self.daemon.everyone.notify), params)
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
        if not isinstance(error, CtxdError):
            log.error("%s failed", method, exc_info=error)
            error = InternalError(f"{method} failed inside ctxd; see the daemon's log")
        self.outbox.fail(msg_id, error)

    def _report_shortened(self, shortened: list[tuple[int, int]]) -> None:
        sizes = ", ".join(f"{size} to {kept}" for size, kept in shortened)
        log.warning("shortened %d over-long string value(s) while reading a request (bytes: %s)", len(shortened), sizes)
        self.outbox.show_message(f"ctxd: a request carried {len(shortened)} string value(s) over {MAX_STRING_BYTES} "
                                 f"bytes; their middles were dropped before parsing (bytes: {sizes}).")

    # --- lifecycle -------------------------------------------------------------------------------

    def _initialize(self, msg_id: Any, params: Any) -> None:
        """On the reader thread: nothing else is read until the folders are open."""
        try:
            self._open_initial_folders(params)
        except Exception as error:  # noqa: BLE001 - a bug of ours must not end the session
            self._report(methods.INITIALIZE, msg_id, error)
            return  # the client may try again
        self.outbox.reply(msg_id, {
            "capabilities": {
                "workspace": {"workspaceFolders": {"supported": True, "changeNotifications": True}},
                "experimental": {"ctxd": {"protocolVersion": methods.PROTOCOL_VERSION,
                                          "methods": sorted(methods.REQUESTS), "processId": os.getpid(),
                                          "agents": agent_titles()}},
            },
            "serverInfo": {"name": "ctxd", "version": __version__},
        })
        self.initialized = True
        self.daemon.warm_up()

    def _open_initial_folders(self, params: Any) -> None:
        if params is not None and not isinstance(params, dict):
            raise InvalidParams("params: must be an object")
        params = params or {}
        options = params.get("initializationOptions")
        ctxd_options = options.get("ctxd") if isinstance(options, dict) else None
        self.options = ctxd_options if isinstance(ctxd_options, dict) else None
        if not self.daemon.configured and (self.options is not None or not self.daemon.shared):
            self._configure(params)  # the first session's options: the others share its workspaces
        folders = params.get("workspaceFolders")
        uris = [f.get("uri") for f in folders if isinstance(f, dict)] if isinstance(folders, list) else []
        if not uris and isinstance(params.get("rootUri"), str):
            uris = [params["rootUri"]]
        for uri in uris:
            self._open(uri)
        self.daemon.folders_changed()  # an owner already following sessions: these folders too

    def _configure(self, params: dict[str, Any]) -> None:
        options = params.get("initializationOptions")
        ctxd_options = options.get("ctxd") if isinstance(options, dict) else None
        self.service.init_options = ctxd_options if isinstance(ctxd_options, dict) else {}
        if self.daemon.state_dir_override is None or self.daemon.shared:
            state_dir = load_settings(None, self.service.init_options, []).state_dir
            if state_dir:
                try:
                    chosen = Path(state_dir).expanduser()
                    if not self.daemon.shared:  # an owner's is its own: its clients chose it (server/forward.py)
                        self.service.state_dir = chosen
                except RuntimeError as error:  # `~someone` who is not a user here
                    self.outbox.show_message(f"ctxd: stateDir {state_dir!r} cannot be used ({error}); "
                                             f"ledgers stay in {self.service.state_dir}")
        self.daemon.configured = True

    def _open(self, uri: Any) -> None:
        if not isinstance(uri, str):
            return
        try:
            workspace = self.service.open_folder(uri, self.options if self.daemon.shared else None)
        except Exception as error:  # noqa: BLE001 - one folder that cannot open never ends the session
            message = error.message if isinstance(error, CtxdError) else f"{uri!r}: {type(error).__name__}: {error}"
            log.warning("not opening workspace folder: %s", message, exc_info=not isinstance(error, CtxdError))
            self.outbox.show_message(f"ctxd: not opening workspace folder: {message}")
            return
        self.daemon.hold(self, workspace)
        for problem in workspace.problems:  # bad values, unknown keys, settings ignored (trust)
            text = f"ctxd: {problem}"
            if text not in self._shown:
                self._shown.add(text)
                self.outbox.show_message(text)
        self.daemon.background.submit(self._report_interrupted_restore, workspace)

    def _report_interrupted_restore(self, workspace: Workspace) -> None:
        """A snapshot restore a crash cut short is told at once, with the snapshot to go back to."""
        from ctxd.ghost import api as ghost

        try:
            found = ghost.interrupted_restore(workspace.opened_root(), state_dir=workspace.state_dir, create=False)
        except CtxdError:
            return
        if found is not None:
            self.outbox.show_message(f"ctxd: {workspace.root}: {found['message']}")

    def _change_folders(self, params: Any) -> None:
        event = params.get("event") if isinstance(params, dict) else None
        if not isinstance(event, dict):
            return
        for folder in event.get("removed") or []:
            if isinstance(folder, dict) and isinstance(folder.get("uri"), str):
                try:
                    uri = self.service.canonical(folder["uri"])
                except CtxdError:
                    continue
                self.daemon.release(self, uri)
        for folder in event.get("added") or []:
            if isinstance(folder, dict):
                self._open(folder.get("uri"))
        self.daemon.folders_changed()

    def _exit(self, code: int) -> None:
        """`exit`: requests already running finish; then the connection decides (stdio: the
        process ends at once; TCP: this session's socket closes; memory: `serve` returns)."""
        try:
            if self.owns_daemon:
                self.daemon.close()
        finally:
            self.connection.exit(code)  # a failure while closing never keeps the process alive

    # --- serving ---------------------------------------------------------------------------------

    def serve(self) -> int | None:
        """Serve the client until it leaves; the code `exit` asked for, or None at the end of the
        stream without one."""
        try:
            self.connection.receive(self.dispatch)
        finally:
            self.daemon.leave(self)
            if self.owns_daemon:
                self.daemon.close()
        return self.connection.exit_code


def serve_stdio(state_dir: Path | None, stdin: BinaryIO, stdout: BinaryIO) -> None:
    """Serve the editor that started this process over its pipes until it leaves."""
    CtxdServer(StreamConnection(stdin, stdout), state_dir).serve()


def serve_tcp(state_dir: Path | None, host: str, port: int, token_file: Path | None = None) -> None:
    """Serve every client that authenticates over TCP (ctxd/server/tcp.py), until the last leaves."""
    from ctxd.server import tcp

    daemon = Daemon(state_dir)
    hand_over = None if os.environ.get("CTXD_OWNER") == "0" else functools.partial(_hand_over_tcp,
                                                                                   daemon.service.state_dir)
    code = tcp.serve(host, port, daemon.service.state_dir, token_file,
                     lambda connection: CtxdServer(connection, daemon=daemon).serve(), hand_over)
    daemon.close()
    os._exit(code)  # the accepting thread is inside accept(): leave without an interpreter shutdown


def _hand_over_tcp(state_dir: Path, connection: Any, head: bytes) -> int | None:
    """An authenticated TCP client's session, served by the owner of `state_dir` (its exit code),
    or None when none could be reached (it is served here)."""
    import base64

    from ctxd import ownerlink

    message = {"op": "session", "head": base64.b64encode(head).decode("ascii")}
    try:
        return ownerlink.hand_over(state_dir, message, [connection.fileno()])
    except ownerlink.Unsafe as error:
        log.warning("tcp: serving here, alone: %s", error)
        return None
