"""LSP conformance, end to end (issue #28, "The design card's stack"): pygls' `LanguageClient`, an LSP
client nobody here wrote, starts `python -m ctxd` as a subprocess and drives it through initialize,
workspace folders, progress, cancellation, showMessage, shutdown and exit. Every message ctxd sends
that the LSP specification defines is structured into lsprotocol's type for it with lsprotocol's
own converter (and `$/progress` values into the work-done progress type their `kind` names); any
failure there, or any message pygls itself could not take, fails the test."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import converters, types
from pygls.exceptions import JsonRpcException
from pygls.lsp.client import LanguageClient
from pygls.protocol import LanguageServerProtocol

from tests.ghost_repo import isolated_git_env, make_repo
from tests.helpers import assistant, user
from tests.rpc import daemon_env

REPO = Path(__file__).resolve().parents[1]
WAIT = 30.0  # a bound on waiting for what must come, not a timing goal

PROGRESS_KINDS: dict[str, type] = {"begin": types.WorkDoneProgressBegin, "report": types.WorkDoneProgressReport,
                                   "end": types.WorkDoneProgressEnd}


class RecordingProtocol(LanguageServerProtocol):
    """pygls' own protocol, keeping every message the daemon sent as it came (before pygls
    structures it), so each can be checked against the specification's type afterwards."""

    def __init__(self, server: Any, converter: Any) -> None:
        super().__init__(server, converter)
        self.received: list[dict[str, Any]] = []
        self.methods: dict[Any, str] = {}  # request id -> method, to know each response's type

    def structure_message(self, data: dict[str, Any]) -> Any:
        self.received.append(data)
        return super().structure_message(data)

    def send_request(self, method: str, params: Any | None = None, callback: Any = None, msg_id: Any = None) -> Any:
        future = super().send_request(method, params, callback, msg_id)
        for request_id, pending in self._request_futures.items():
            if pending is future:
                self.methods[request_id] = method
        return future


class Client(LanguageClient):
    def __init__(self) -> None:
        super().__init__("ctxd-conformance", "1", protocol_cls=RecordingProtocol)
        self.errors: list[str] = []  # what pygls could not take from the daemon
        self.returncode: int | None = None
        self.messages: list[types.ShowMessageParams] = []
        self.progress: list[types.ProgressParams] = []

        @self.feature(types.WINDOW_SHOW_MESSAGE)
        def show_message(params: types.ShowMessageParams) -> None:
            self.messages.append(params)

        @self.feature(types.PROGRESS)
        def progress(params: types.ProgressParams) -> None:
            self.progress.append(params)

    def report_server_error(self, error: Exception, source: Any) -> None:
        self.errors.append(f"{type(error).__name__}: {error}")

    async def server_exit(self, server: asyncio.subprocess.Process) -> None:
        self.returncode = server.returncode

    @property
    def recorder(self) -> RecordingProtocol:
        assert isinstance(self.protocol, RecordingProtocol)
        return self.protocol

    async def ctxd(self, method: str, params: dict[str, Any]) -> Any:
        return await self.protocol.send_request_async(method, params)


def check_against_the_specification(protocol: RecordingProtocol) -> list[str]:
    """Each LSP message the daemon sent, structured with lsprotocol's converter into its type:
    the problems found (none when ctxd conforms)."""
    converter = converters.get_converter()
    problems: list[str] = []
    checked = 0
    for message in protocol.received:
        method = message.get("method") or protocol.methods.get(message.get("id"), "")
        if method.startswith("ctxd/") or not method:
            continue  # ctxd's own methods: their shapes are docs/protocol.schema.json's (test_spine.py)
        kinds = types.METHOD_TO_TYPES.get(method)
        if kinds is None:
            problems.append(f"{method}: not an LSP method")
            continue
        if "error" in message:
            shape: Any = types.ResponseErrorMessage
        elif "method" in message:
            shape = kinds[0]  # the notification's (or the server's request's) message type
        else:
            shape = kinds[1]  # the response's type
        try:
            structured = converter.structure(message, shape)
            if isinstance(structured, types.ProgressNotification):
                value = structured.params.value
                converter.structure(value, PROGRESS_KINDS[value["kind"]])
        except Exception as error:  # noqa: BLE001 - every failure is a finding
            problems.append(f"{method}: {message!r} does not structure into {shape.__name__}: {error}")
        checked += 1
    assert checked, "nothing was checked"
    return problems


async def drive(tmp_path: Path) -> Client:
    home = tmp_path / "home"
    env = daemon_env(tmp_path / "state", isolated_git_env(home))
    repo = make_repo(tmp_path / "repo")
    other = tmp_path / "other"
    other.mkdir()
    client = Client()
    await client.start_io(sys.executable, "-m", "ctxd", env=env, cwd=str(REPO))
    try:
        result = await asyncio.wait_for(client.initialize_async(types.InitializeParams(
            capabilities=types.ClientCapabilities(window=types.WindowClientCapabilities(work_done_progress=True)),
            process_id=os.getpid(),
            workspace_folders=[types.WorkspaceFolder(uri=repo.root.as_uri(), name="repo")])), WAIT)
        assert result.server_info is not None and result.server_info.name == "ctxd"
        folders = result.capabilities.workspace and result.capabilities.workspace.workspace_folders
        assert folders is not None and folders.supported and folders.change_notifications is True
        client.initialized(types.InitializedParams())
        uri = repo.root.as_uri()
        recorded = await client.ctxd("ctxd/record", {"workspace": uri, "items": [user("hi"), assistant("hello")]})
        assert recorded.itemCount == 2

        # Workspace folders: one added, and one that cannot be opened (told with window/showMessage).
        missing = (tmp_path / "missing").as_uri()
        client.workspace_did_change_workspace_folders(types.DidChangeWorkspaceFoldersParams(
            event=types.WorkspaceFoldersChangeEvent(
                added=[types.WorkspaceFolder(uri=other.as_uri(), name="other"),
                       types.WorkspaceFolder(uri=missing, name="missing")], removed=[])))
        for _ in range(200):
            if any(missing in m.message for m in client.messages):
                break
            await asyncio.sleep(0.05)
        assert any(m.type == types.MessageType.Warning and missing in m.message for m in client.messages)
        threads = await client.ctxd("ctxd/threads", {"workspace": other.as_uri()})
        assert threads.threads == []

        # Progress: a snapshot with the client's work-done token reports begin ... end.
        snapshot = await asyncio.wait_for(client.ctxd("ctxd/ghost/snapshot", {
            "workspace": uri, "message": "before", "workDoneToken": "snap-1"}), WAIT)
        assert snapshot.id
        kinds = [p.value["kind"] for p in client.progress if p.token == "snap-1"]
        assert kinds[0] == "begin" and kinds[-1] == "end"

        # Cancellation: the request is answered, by its result or by RequestCancelled; the
        # session goes on. (Which of the two depends on timing; test_server_memory.py pins it.)
        total = (await client.ctxd("ctxd/history", {"workspace": uri})).total  # the snapshot is an item too
        pending = client.protocol.send_request_async("ctxd/history", {"workspace": uri})
        request_id = list(client.recorder.methods)[-1]
        client.cancel_request(types.CancelParams(id=request_id))
        try:
            answered = await asyncio.wait_for(pending, WAIT)
            assert answered.total == total
        except JsonRpcException as error:
            assert error.code == types.LSPErrorCodes.RequestCancelled
        assert (await client.ctxd("ctxd/history", {"workspace": uri})).total == total

        # An error reply structures too (not an LSP method: the envelope is JSON-RPC's).
        with pytest.raises(JsonRpcException) as refused:
            await client.ctxd("ctxd/history", {"workspace": missing})
        assert refused.value.code == types.ErrorCodes.InvalidParams

        await asyncio.wait_for(client.shutdown_async(None), WAIT)
        client.exit(None)
        await asyncio.wait_for(client.stop(), WAIT)
    finally:
        if client.returncode is None and client._server is not None and client._server.returncode is None:
            client._server.kill()
    return client


def test_pygls_client_drives_ctxd_and_every_lsp_message_structures(tmp_path: Path) -> None:
    client = asyncio.run(drive(tmp_path))
    assert client.errors == []
    assert client.returncode == 0
    methods = {m.get("method") for m in client.recorder.received}
    assert {"window/showMessage", "$/progress"} <= methods
    assert check_against_the_specification(client.recorder) == []
