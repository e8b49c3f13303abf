"""The server driven in memory (issue #28, item 2): the real `CtxdServer`, its workspaces and workers,
built with a memory connection (`ctxd.server.connection.memory`, after lsp-server's
`Connection::memory()`), no process and no pipe. Dispatch, the lifecycle, the order requests run in,
cancellation and every protocol error are checked here; the wire (frames, stdio, TCP) keeps its
subprocess tests (test_spine.py, test_protocol_hostile.py)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ctxd.errors import Code
from ctxd.server.app import CtxdServer
from ctxd.server.connection import MemoryClient, memory
from tests.helpers import assistant, user

WAIT = 30.0  # seconds a test waits for a message it must get (a bound, not a timing goal)


@dataclass
class Session:
    server: CtxdServer
    client: MemoryClient
    thread: threading.Thread
    exit_code: list[int | None]
    notifications: list[dict[str, Any]]
    ids: Iterator[int]

    def send(self, method: str, params: Any = None, msg_id: int | None = None) -> int:
        msg_id = next(self.ids) if msg_id is None else msg_id
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
        if params is not None:
            message["params"] = params
        self.client.send(message)
        return msg_id

    def notify(self, method: str, params: Any = None) -> None:
        self.client.send({"jsonrpc": "2.0", "method": method, **({"params": params} if params is not None else {})})

    def answer(self, msg_id: int | str | None) -> dict[str, Any]:
        """The reply to `msg_id`; notifications that come first are kept in `notifications`."""
        while True:
            message = self.client.receive(WAIT)
            if "method" in message and "id" not in message:
                self.notifications.append(message)
                continue
            assert message.get("id") == msg_id, f"expected the reply to {msg_id}, got {message}"
            return message

    def request(self, method: str, params: Any = None) -> dict[str, Any]:
        return self.answer(self.send(method, params))

    def result(self, method: str, params: Any = None) -> Any:
        reply = self.request(method, params)
        assert "error" not in reply, reply
        return reply["result"]

    def error_code(self, method: str, params: Any = None) -> int:
        reply = self.request(method, params)
        assert "result" not in reply, reply
        code: int = reply["error"]["code"]
        return code


@pytest.fixture
def session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Session]:
    # The daemon follows agent sessions after `initialize`: never this machine's real ones.
    for name, folder in (("XDG_STATE_HOME", "xdg-state"), ("XDG_CONFIG_HOME", "xdg-config"),
                         ("CODEX_HOME", "codex-home"), ("CLAUDE_CONFIG_DIR", "claude-home"),
                         ("QWEN_HOME", "qwen-home"), ("GEMINI_CLI_HOME", "gemini-home"), ("XDG_DATA_HOME", "xdg-data")):
        monkeypatch.setenv(name, str(tmp_path / folder))
    connection, client = memory()
    server = CtxdServer(connection, tmp_path / "state")
    exit_code: list[int | None] = []
    thread = threading.Thread(target=lambda: exit_code.append(server.serve()), daemon=True)
    thread.start()
    made = Session(server, client, thread, exit_code, [], iter(range(1, 1_000_000)))
    yield made
    if thread.is_alive():
        client.close()
        thread.join(WAIT)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    return folder


def initialize(session: Session, workspace: Path) -> dict[str, Any]:
    folders = [{"uri": workspace.as_uri(), "name": "ws"}]
    result: dict[str, Any] = session.result("initialize", {"processId": None, "rootUri": None, "capabilities": {},
                                                           "workspaceFolders": folders})
    session.notify("initialized", {})
    return result


def test_lifecycle_initialize_shutdown_exit(session: Session, workspace: Path) -> None:
    assert session.error_code("ctxd/threads", {"workspace": workspace.as_uri()}) == Code.SERVER_NOT_INITIALIZED
    result = initialize(session, workspace)
    assert result["serverInfo"]["name"] == "ctxd"
    assert result["capabilities"]["workspace"]["workspaceFolders"] == {"supported": True, "changeNotifications": True}
    assert "ctxd/record" in result["capabilities"]["experimental"]["ctxd"]["methods"]
    assert session.error_code("initialize", {"capabilities": {}}) == Code.INVALID_REQUEST  # a second one
    assert session.result("ctxd/threads", {"workspace": workspace.as_uri()}) == {"threads": []}
    assert session.result("shutdown") is None
    assert session.error_code("ctxd/threads", {"workspace": workspace.as_uri()}) == Code.INVALID_REQUEST
    session.notify("exit")
    session.thread.join(WAIT)
    assert not session.thread.is_alive() and session.exit_code == [0]
    assert session.server.daemon.executor._shutdown  # the workers were let go


def test_exit_without_shutdown_is_code_1(session: Session, workspace: Path) -> None:
    initialize(session, workspace)
    session.notify("exit")
    session.thread.join(WAIT)
    assert session.exit_code == [1]


def test_the_end_of_the_stream_ends_the_session(session: Session, workspace: Path) -> None:
    initialize(session, workspace)
    session.client.close()
    session.thread.join(WAIT)
    assert session.exit_code == [None]


def test_protocol_errors_come_from_the_table(session: Session, workspace: Path) -> None:
    session.client.send(b'{"jsonrpc": "2.0", "id": 1, "method": ')  # not JSON
    reply = session.answer(None)
    assert reply["error"]["code"] == Code.PARSE_ERROR and reply["error"]["message"].startswith("Parse error")
    session.client.send(b"[1, 2]")
    assert session.answer(None)["error"]["code"] == Code.INVALID_REQUEST
    session.client.send({"jsonrpc": "1.0", "id": 5, "method": "initialize"})
    assert session.answer(5)["error"]["code"] == Code.INVALID_REQUEST
    session.client.send({"jsonrpc": "2.0", "id": 2.5, "method": "initialize"})  # an id JSON-RPC does not allow
    assert session.answer(None)["error"]["code"] == Code.INVALID_REQUEST
    initialize(session, workspace)
    reply = session.request("ctxd/noSuchMethod", {})
    assert reply["error"] == {"code": Code.METHOD_NOT_FOUND, "message": "Method not found: ctxd/noSuchMethod"}
    elsewhere = (workspace.parent / "elsewhere").as_uri()
    reply = session.request("ctxd/threads", {"workspace": elsewhere})
    assert reply["error"]["code"] == Code.INVALID_PARAMS and elsewhere in reply["error"]["message"]
    bad_items = {"workspace": workspace.as_uri(), "items": "not a list"}
    assert session.error_code("ctxd/record", bad_items) == Code.INVALID_PARAMS
    session.client.send(b'{"jsonrpc": "2.0", "id": 9, "method": "ctxd/usage", "params": {"workspace": "x", "n": NaN}}')
    reply = session.answer(9)
    assert reply["error"]["code"] == Code.INVALID_PARAMS and "NaN" in reply["error"]["message"]
    nested = b"[" * 200 + b"]" * 200
    session.client.send(b'{"jsonrpc": "2.0", "id": 10, "method": "ctxd/usage", "params": ' + nested + b"}")
    reply = session.answer(10)
    assert reply["error"]["code"] == Code.INVALID_PARAMS and "nested deeper" in reply["error"]["message"]
    # Nothing above ended the session.
    assert session.result("ctxd/threads", {"workspace": workspace.as_uri()}) == {"threads": []}


def test_pipelined_requests_of_a_thread_are_answered_in_order(session: Session, workspace: Path) -> None:
    initialize(session, workspace)
    uri = workspace.as_uri()
    sent = []
    for n in range(20):
        items = [user(f"q{n}"), assistant(f"a{n}")]
        sent.append(session.send("ctxd/record", {"workspace": uri, "thread": "t", "items": items}))
        sent.append(session.send("ctxd/history", {"workspace": uri, "thread": "t", "offset": 0, "limit": 1000}))
    replies = {}
    while len(replies) < len(sent):
        message = session.client.receive(WAIT)
        if "id" in message:
            replies[message["id"]] = message
    for n in range(20):
        recorded, listed = replies[sent[2 * n]]["result"], replies[sent[2 * n + 1]]["result"]
        assert recorded["itemCount"] == 2 * (n + 1)
        assert listed["total"] == 2 * (n + 1) and listed["items"][-1] == assistant(f"a{n}")


def test_a_cancelled_request_is_answered_request_cancelled(session: Session, workspace: Path) -> None:
    initialize(session, workspace)
    uri = workspace.as_uri()
    session.result("ctxd/record", {"workspace": uri, "items": [user("hello")]})
    # Hold the thread's lane with a job of our own (the real Lanes), so the request waits behind it.
    started, release = threading.Event(), threading.Event()
    session.server.daemon.lanes.submit((uri, "default"), lambda: (started.set(), release.wait(WAIT)))
    assert started.wait(WAIT)
    waiting = session.send("ctxd/history", {"workspace": uri})
    other = session.send("ctxd/history", {"workspace": uri})
    session.notify("$/cancelRequest", {"id": waiting})
    session.notify("$/cancelRequest", {"id": 12345})  # not a request in flight: nothing to answer
    release.set()
    reply = session.answer(waiting)
    assert reply["error"]["code"] == Code.REQUEST_CANCELLED
    assert session.answer(other)["result"]["total"] == 1  # the next one runs as usual
    with pytest.raises(queue.Empty):
        session.client.receive(0.2)  # and nothing answered the unknown id


def test_workspace_folders_change_and_usage_is_pushed(session: Session, workspace: Path, tmp_path: Path) -> None:
    initialize(session, workspace)
    second = tmp_path / "second"
    second.mkdir()
    session.notify("workspace/didChangeWorkspaceFolders",
                   {"event": {"added": [{"uri": second.as_uri(), "name": "second"}],
                              "removed": [{"uri": workspace.as_uri(), "name": "ws"}]}})
    for _ in range(100):  # the change runs on a worker: its effect is seen by a later request
        reply = session.request("ctxd/threads", {"workspace": second.as_uri()})
        if "result" in reply:
            break
    assert reply.get("result") == {"threads": []}
    assert session.error_code("ctxd/threads", {"workspace": workspace.as_uri()}) == Code.INVALID_PARAMS
    session.result("ctxd/record", {"workspace": second.as_uri(), "thread": "t", "items": [user("hi")]})
    while not any(n["method"] == "ctxd/usageChanged" for n in session.notifications):
        session.notifications.append(session.client.receive(WAIT))
    pushed = next(n for n in session.notifications if n["method"] == "ctxd/usageChanged")
    assert pushed["params"]["workspace"] == second.as_uri() and pushed["params"]["thread"] == "t"


def test_error_codes_are_written_only_in_the_table() -> None:
    """Issue #28, item 3: the server answers every protocol error through `ctxd/errors.py`'s table;
    no module of it writes a JSON-RPC, LSP or ctxd error code as a number."""
    import re

    server = Path(__file__).resolve().parents[1] / "ctxd" / "server"
    literal = re.compile(r"(?<![\w.])-32[0-9]{3}\b|\bcode\W{1,4}1[0-9]{3}\b")
    found = [f"{path.name}:{n}: {line.strip()}" for path in sorted(server.glob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if literal.search(line)]
    assert found == []
    assert not (server / "framing.py").exists()  # bytes in transport.py, meaning in codec.py


def test_two_sessions_of_one_daemon_share_workspaces_not_lifecycles(session: Session, workspace: Path) -> None:
    """What TCP gives each authenticated connection (tcp.py): a session of its own over the same
    workspaces. A folder one session removes stays open for the other; the other's exit ends only it."""
    initialize(session, workspace)
    connection, client = memory()
    other = CtxdServer(connection, daemon=session.server.daemon)
    codes: list[int | None] = []
    thread = threading.Thread(target=lambda: codes.append(other.serve()), daemon=True)
    thread.start()
    second = Session(other, client, thread, codes, [], iter(range(1, 1_000_000)))
    uri = workspace.as_uri()
    assert second.error_code("ctxd/threads", {"workspace": uri}) == Code.SERVER_NOT_INITIALIZED  # its own lifecycle
    initialize(second, workspace)
    second.result("ctxd/record", {"workspace": uri, "thread": "b", "items": [user("from the second")]})
    while not any(n["method"] == "ctxd/usageChanged" and n["params"]["thread"] == "b" for n in session.notifications):
        session.notifications.append(session.client.receive(WAIT))  # the first session is told too
    removed = {"added": [], "removed": [{"uri": uri, "name": "ws"}]}
    session.notify("workspace/didChangeWorkspaceFolders", {"event": removed})
    for _ in range(1000):  # the removal runs on a worker: wait until it has let the folder go
        if not session.server.folders:
            break
        threading.Event().wait(0.01)
    assert not session.server.folders
    # Still open: the second holds it.
    assert second.result("ctxd/history", {"workspace": uri, "thread": "b"})["total"] == 1
    assert second.result("shutdown") is None
    second.notify("exit")
    thread.join(WAIT)
    assert codes == [0]
    assert session.result("ctxd/threads", {"workspace": uri})["threads"][0]["thread"] == "b"  # the first goes on
    assert not session.server.daemon.executor._shutdown
