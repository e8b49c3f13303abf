"""The JSON-RPC glue: pygls server, lifecycle, and one thin handler per `ctxd/*` method.

Handlers run on a thread pool of their own (never on the event loop, never on the reader's
thread), so a compaction or a snapshot in progress does not stall the gauge. Each handler parses
its params with a pydantic model, calls the service, and returns a plain JSON dict.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable

from lsprotocol import types
from pydantic import BaseModel
from pygls.exceptions import JsonRpcException, JsonRpcInternalError
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol, lsp_method
from pygls.protocol.json_rpc import JsonRPCResponseMessage

from ctxd import PROTOCOL_VERSION, __version__
from ctxd.compact import run as compaction
from ctxd.errors import Cancelled, CtxdError, InvalidParams
from ctxd.ghost import snapshots as ghost
from ctxd.ledger.workspace import Service, Workspace
from ctxd.protocol import methods as wire
from ctxd.protocol import params as models
from ctxd.server.events import Throttle
from ctxd.server.framing import LockedWriter, error_response, frame, reader_loop
from ctxd.settings import load_settings

log = logging.getLogger("ctxd")

USAGE_INTERVAL_SECONDS = 0.1
WORKER_THREADS = 8


@dataclass
class Call:
    """What a handler gets besides its params."""

    server: "CtxdServer"
    workspace: Workspace
    cancel: threading.Event

    def progress(self, token: int | str | None, kind: str, message: str | None = None,
                 title: str | None = None, percentage: int | None = None) -> None:
        if token is None:
            return
        value: dict[str, Any] = {"kind": kind}
        for key, item in (("title", title), ("message", message), ("percentage", percentage)):
            if item is not None:
                value[key] = item
        self.server.notify(wire.PROGRESS, {"token": token, "value": value})

    def check_cancelled(self) -> None:
        if self.cancel.is_set():
            raise Cancelled("request cancelled")


Handler = Callable[[Call, Any], Any]
HANDLERS: dict[str, tuple[type[BaseModel], Handler]] = {}


def handler(method: str, params_model: type[BaseModel]) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        HANDLERS[method] = (params_model, fn)
        return fn

    return register


class CtxdProtocol(LanguageServerProtocol):
    def _send_data(self, data: Any) -> None:
        """Serialize first, then frame: a reply that cannot be serialized becomes an error reply
        (pygls would log it and leave the client waiting forever). Bodies are never logged."""
        if not data or self.writer is None:
            return
        if isinstance(data, JsonRPCResponseMessage):
            # Our handlers return plain JSON; cattrs would deep-copy it first (a 100k-item prompt
            # became 100k fresh dicts and the garbage collector's work grew faster than linear).
            data = {"jsonrpc": data.jsonrpc, "id": data.id, "result": data.result}
        try:
            body = json.dumps(data, default=self._serialize_message, ensure_ascii=False).encode("utf-8", "surrogatepass")
        except Exception:
            log.exception("could not serialize a message to the client")
            msg_id = getattr(data, "id", None)
            if msg_id is None:
                return
            body = error_response(msg_id, -32603, "Internal error: the reply could not be serialized")
        self.writer.write(frame(body))

    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams):  # type: ignore[override]
        result = yield from super().lsp_initialize(params)
        result.capabilities.experimental = {
            "ctxd": {"protocolVersion": PROTOCOL_VERSION, "methods": sorted(HANDLERS)}
        }
        return result


class CtxdServer(LanguageServer):
    def __init__(self, state_dir: Path | None = None) -> None:
        super().__init__("ctxd", __version__, protocol_cls=CtxdProtocol,
                         text_document_sync_kind=types.TextDocumentSyncKind.None_)
        self.state_dir_override = state_dir
        self.service = Service(state_dir, listener=self._usage_changed)
        compaction.install(self.service, compaction.ServerEvents(self))  # auto-compaction before prompts
        self.executor = ThreadPoolExecutor(max_workers=WORKER_THREADS, thread_name_prefix="ctxd-worker")
        self.throttle = Throttle(self._send_usage, USAGE_INTERVAL_SECONDS)
        self.initialized = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self._writer: LockedWriter | None = None
        self._tails: dict[tuple[Any, Any], asyncio.Future[None]] = {}
        self._register()

    # --- outgoing --------------------------------------------------------------------------------

    def notify(self, method: str, params: dict[str, Any]) -> None:
        """Send a notification from any thread (the writer is locked). Written as plain JSON:
        pygls would unstructure `$/progress` and `window/showMessage` as their lsprotocol types and
        fail on a dict (the client got "Error in server: 'dict' object has no attribute 'token'")."""
        if self._writer is None:
            self.protocol.notify(method, params)
            return
        self._writer.write(frame(json.dumps({"jsonrpc": "2.0", "method": method, "params": params}).encode()))

    def show_message(self, message: str, kind: int = wire.MESSAGE_WARNING) -> None:
        self.notify(wire.SHOW_MESSAGE, {"type": kind, "message": message})

    def _usage_changed(self, uri: str, thread: str, usage: dict[str, Any]) -> None:
        self.throttle.offer((uri, thread), {"workspace": uri, "thread": thread, **usage})

    def _send_usage(self, _key: Any, params: dict[str, Any]) -> None:
        self.notify(wire.USAGE_CHANGED, params)

    # --- handlers --------------------------------------------------------------------------------

    def _register(self) -> None:
        for method in HANDLERS:
            self.feature(method)(self._async_handler(method))

        @self.feature(types.INITIALIZE)
        def on_initialize(params: types.InitializeParams) -> None:
            self._initialize(params)

        @self.feature(types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
        def on_folders(params: types.DidChangeWorkspaceFoldersParams) -> None:
            for folder in params.event.removed:
                self.service.close_folder(folder.uri)
            for folder in params.event.added:
                self._open(folder.uri)

        @self.feature(types.SHUTDOWN)
        def on_shutdown(*_args: Any) -> None:
            self.executor.shutdown(wait=False, cancel_futures=True)

        @self.feature(types.EXIT)
        def on_exit(*_args: Any) -> None:
            # Leave at once: the reader thread is blocked on stdin, and an interpreter shutdown
            # with a thread inside a buffered read aborts the process.
            code = 0 if self.protocol._shutdown else 1
            self.executor.shutdown(wait=True, cancel_futures=True)
            self.service.close()
            os._exit(code)

    def _async_handler(self, method: str) -> Callable[[Any], Any]:
        async def run(raw_params: Any) -> Any:
            loop = asyncio.get_running_loop()
            key = _ordering_key(method, raw_params)
            previous = self._tails.get(key) if key else None
            mine = loop.create_future()
            if key:
                self._tails[key] = mine
            try:
                if previous is not None:
                    await asyncio.shield(previous)  # the thread's earlier requests finish first
                cancel = threading.Event()
                future = loop.run_in_executor(self.executor, self._call, method, raw_params, cancel)
                try:
                    return await asyncio.shield(future)
                except asyncio.CancelledError:
                    # $/cancelRequest: ask the worker to stop, then answer with what really happened.
                    cancel.set()
                    return await future
            finally:
                mine.set_result(None)
                if key and self._tails.get(key) is mine:
                    del self._tails[key]

        return run

    def _usage_now(self, raw_params: Any) -> dict[str, Any] | None:
        """`ctxd/usage` answered on the event loop when that cannot wait on anything (the gauge's
        hot path: no thread hop); None sends it to the workers like every other request."""
        try:
            params = models.parse_params(models.Params, raw_params)
            return self.service.workspace(params.workspace).breakdown_now(params.thread)
        except CtxdError:
            return None  # the worker path reports the error

    def _call(self, method: str, raw_params: Any, cancel: threading.Event) -> Any:
        params_model, fn = HANDLERS[method]
        if log.isEnabledFor(logging.DEBUG):  # -v; RedactSecrets (ctxd/cli.py) takes keys out
            log.debug("request %s %.2000s", method, json.dumps(raw_params, ensure_ascii=False, default=str))
        try:
            params = models.parse_params(params_model, raw_params)
            workspace = self.service.workspace(params.workspace)
            return fn(Call(self, workspace, cancel), params)
        except CtxdError as error:
            raise wire.to_rpc_error(error) from None
        except JsonRpcException:
            raise
        except Exception:
            log.exception("%s failed", method)
            raise JsonRpcInternalError(f"{method} failed inside ctxd; see the daemon's log") from None

    # --- lifecycle -------------------------------------------------------------------------------

    def _initialize(self, params: types.InitializeParams) -> None:
        options = params.initialization_options
        ctxd_options = options.get("ctxd") if isinstance(options, dict) else None
        self.service.init_options = ctxd_options if isinstance(ctxd_options, dict) else {}
        if self.state_dir_override is None:
            problems: list[str] = []
            state_dir = load_settings(None, self.service.init_options, problems).state_dir
            if state_dir:
                self.service.state_dir = Path(state_dir).expanduser()
        folders = [f.uri for f in params.workspace_folders or []]
        if not folders and params.root_uri:
            folders = [params.root_uri]
        for uri in folders:
            self._open(uri)
        self.initialized = True

    def _open(self, uri: str) -> None:
        try:
            self.service.open_folder(uri)
        except CtxdError as error:
            log.warning("not opening workspace folder: %s", error.message)
            self.show_message(f"ctxd: not opening workspace folder: {error.message}")

    def _send_raw_error(self, msg_id: Any, code: int, message: str) -> None:
        if self._writer is not None:
            self._writer.write(frame(error_response(msg_id, code, message)))

    def dispatch(self, message: dict[str, Any]) -> None:
        """Check a message's envelope and lifecycle state, then hand it to pygls (loop thread)."""
        method = message.get("method")
        has_id = "id" in message
        msg_id = message.get("id")
        if (message.get("jsonrpc") != "2.0" or (method is not None and not isinstance(method, str))
                or (has_id and (isinstance(msg_id, bool) or not isinstance(msg_id, (int, str, type(None)))))):
            if has_id:
                valid_id = isinstance(msg_id, (int, str)) and not isinstance(msg_id, bool)
                self._send_raw_error(msg_id if valid_id else None, -32600, "Invalid Request")
            return
        if method is None:
            if not has_id or ("result" not in message and "error" not in message):
                return
        elif has_id and method == types.INITIALIZE and self.initialized:
            self._send_raw_error(msg_id, -32600, "Invalid Request: already initialized")
            return
        elif not self.initialized and method not in (types.INITIALIZE, types.EXIT):
            if has_id:
                self._send_raw_error(msg_id, -32002, "Server not initialized: send 'initialize' first")
            return
        elif self.protocol._shutdown and method != types.EXIT:
            if has_id:
                self._send_raw_error(msg_id, -32600, "Invalid Request: the server is shutting down")
            return
        if method is not None and "params" not in message:
            message["params"] = None  # pygls cannot structure an untyped request without params
        if method == wire.USAGE and has_id and _ordering_key(method, message.get("params")) not in self._tails:
            # The gauge's hot path: answered right here when it need not wait on anything.
            answer = self._usage_now(message.get("params"))
            if answer is not None:
                self.protocol._send_data({"jsonrpc": "2.0", "id": msg_id, "result": answer})
                return
        raw_params = message.get("params")  # structuring below rewrites the dict in place
        try:
            structured = self.protocol.structure_message(message)
        except JsonRpcException as error:
            if has_id:
                self._send_raw_error(msg_id, error.code, error.message or "Invalid params")
            return
        if method in HANDLERS:
            structured.params = raw_params  # pygls would hand us namedtuples: keep plain JSON
        self.protocol.handle_message(structured)

    def serve(self, stdin: BinaryIO, stdout: BinaryIO) -> None:
        """Serve one client over a pair of byte streams until it leaves."""
        self._writer = LockedWriter(stdout)
        self.protocol.set_writer(self._writer)

        async def main() -> None:
            self.loop = loop = asyncio.get_running_loop()
            finished = asyncio.Event()

            def deliver(message: dict[str, Any]) -> None:
                loop.call_soon_threadsafe(self.dispatch, message)

            def read() -> None:
                try:
                    reader_loop(stdin, self._writer, deliver)  # type: ignore[arg-type]
                finally:
                    loop.call_soon_threadsafe(finished.set)

            threading.Thread(target=read, name="ctxd-reader", daemon=True).start()
            await finished.wait()

        try:
            asyncio.run(main())
        finally:
            self.executor.shutdown(wait=True, cancel_futures=True)
            self.service.close()

    def serve_tcp(self, host: str, port: int) -> None:
        with socket.create_server((host, port)) as listener:
            log.warning("listening on %s:%d", host, listener.getsockname()[1])
            connection, _ = listener.accept()
        with connection, connection.makefile("rb") as reader, connection.makefile("wb") as writer:
            self.serve(reader, writer)


# Long operations run beside a thread's other requests; everything else on a thread runs in the
# order it arrived, so a client may pipeline record, record, usage without waiting.
UNORDERED = frozenset({wire.COMPACT, wire.GHOST_SNAPSHOT, wire.GHOST_LIST, wire.GHOST_RESTORE})


def _ordering_key(method: str, raw_params: Any) -> tuple[Any, Any] | None:
    if method in UNORDERED or not isinstance(raw_params, dict):
        return None
    workspace, thread = raw_params.get("workspace"), raw_params.get("thread", "default")
    if not isinstance(workspace, str) or not isinstance(thread, str):
        return None
    return (workspace, thread)


# --- ctxd/* handlers ------------------------------------------------------------------------------


@handler(wire.RECORD, models.RecordParams)
def record(call: Call, params: models.RecordParams) -> dict[str, Any]:
    return call.workspace.record(params.thread, params.items)


@handler(wire.REPORT_TOKEN_USAGE, models.ReportTokenUsageParams)
def report_token_usage(call: Call, params: models.ReportTokenUsageParams) -> dict[str, Any]:
    return call.workspace.report_usage(params.thread, params.usage.total_tokens)


@handler(wire.SET_PROMPT_CONTEXT, models.SetPromptContextParams)
def set_prompt_context(call: Call, params: models.SetPromptContextParams) -> dict[str, Any]:
    context = params.model_dump(by_alias=True, exclude_none=True, exclude={"workspace", "thread", "work_done_token"})
    return call.workspace.set_prompt_context(params.thread, context)


@handler(wire.USAGE, models.Params)
def usage(call: Call, params: models.Params) -> dict[str, Any]:
    return call.workspace.breakdown(params.thread)


@handler(wire.PROMPT, models.PromptParams)
def prompt(call: Call, params: models.PromptParams) -> dict[str, Any]:
    return call.workspace.prompt(params.thread, list(params.input_modalities))


@handler(wire.ROLLBACK, models.RollbackParams)
def rollback(call: Call, params: models.RollbackParams) -> dict[str, Any]:
    return call.workspace.rollback(params.thread, params.turns)


@handler(wire.HISTORY, models.HistoryParams)
def history(call: Call, params: models.HistoryParams) -> dict[str, Any]:
    return call.workspace.history(params.thread, params.offset, params.limit, params.include_archived)


@handler(wire.THREADS, models.ThreadsParams)
def threads(call: Call, params: models.ThreadsParams) -> dict[str, Any]:
    return call.workspace.threads()


# Compaction (issue 4) and ghost commits (issue 5) register their handlers below.


@handler(wire.COMPACT, models.CompactParams)
def compact(call: Call, params: models.CompactParams) -> dict[str, Any]:
    return compaction.compact_thread(call.workspace, params.thread, strategy=params.strategy, cancel=call.cancel,
                                     events=compaction.ServerEvents(call.server),
                                     progress_token=params.work_done_token)


class _SlowWarning:
    """Warn once when a snapshot runs past the threshold: from a timer while it runs, or at the
    end if the timer had no chance to (a threshold of 0 is then still deterministic)."""

    def __init__(self, call: Call, seconds: float) -> None:
        self.call, self.seconds = call, seconds
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.sent = False
        self.timer = threading.Timer(seconds, self.fire)
        self.timer.daemon = True
        self.timer.start()

    def fire(self) -> None:
        with self.lock:
            if self.sent:
                return
            self.sent = True
        self.call.server.show_message(ghost.slow_warning(self.call.workspace.root, self.seconds))

    def finish(self) -> None:
        self.timer.cancel()
        if time.monotonic() - self.started >= self.seconds:
            self.fire()


@handler(wire.GHOST_SNAPSHOT, models.GhostSnapshotParams)
def ghost_snapshot(call: Call, params: models.GhostSnapshotParams) -> dict[str, Any]:
    workspace, token = call.workspace, params.work_done_token
    settings = workspace.settings.ghost
    call.progress(token, "begin", title="Snapshotting the working tree")
    slow = _SlowWarning(call, settings.warn_after_seconds)
    try:
        commit = ghost.snapshot(workspace.root, params.message, settings=settings, cancel=call.cancel,
                                progress=lambda message: call.progress(token, "report", message))
    finally:
        slow.finish()
        call.progress(token, "end")
    workspace.record(params.thread, [ghost.ledger_item(commit)])
    return commit


@handler(wire.GHOST_LIST, models.GhostListParams)
def ghost_list(call: Call, params: models.GhostListParams) -> dict[str, Any]:
    return {"snapshots": ghost.list_snapshots(call.workspace.root)}


@handler(wire.GHOST_RESTORE, models.GhostRestoreParams)
def ghost_restore(call: Call, params: models.GhostRestoreParams) -> dict[str, Any]:
    workspace = call.workspace
    point = None
    if params.conversation:  # found first: an id the thread never recorded changes nothing
        seqs = [e.seq for e in workspace.entries(params.thread) if ghost.item_commit_id(e.item) == params.id]
        if not seqs:
            raise InvalidParams(f"id: snapshot {params.id} is not recorded in thread '{params.thread}'")
        point = seqs[-1]
    call.check_cancelled()
    result = ghost.restore(workspace.root, params.id, settings=workspace.settings.ghost)
    if point is not None:  # keep the snapshot's own item, drop everything the model did after it
        result["removedItems"] = workspace.rollback_to(params.thread, point + 1)
    return result
