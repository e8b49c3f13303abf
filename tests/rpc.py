"""A small, real JSON-RPC client that drives the ctxd daemon as a subprocess over stdio."""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from pydantic import TypeAdapter, ValidationError

from ctxd.protocol import shapes

REPO = Path(__file__).resolve().parents[1]


_ADAPTERS = {name: TypeAdapter(shape) for name, shape in {**shapes.RESULTS, **shapes.NOTIFICATIONS}.items()}


def check_shape(method: str, value: Any) -> str | None:
    """What is wrong with `value` as the result or params of `method` (ctxd/protocol/shapes.py)."""
    adapter = _ADAPTERS.get(method)
    if adapter is None:
        return None
    try:
        adapter.validate_python(value, strict=True)
    except ValidationError as error:
        return f"{method}: {error}"
    return None


def _not_json(token: str) -> Any:
    raise ValueError(f"the daemon sent {token}, which strict JSON parsers reject")


class RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.data = data


def daemon_env(state_dir: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXD_")}
    env["XDG_STATE_HOME"] = str(state_dir)
    env["XDG_CONFIG_HOME"] = str(state_dir / "config")
    env["PYTHONUNBUFFERED"] = "1"
    env["CTXD_OWNER_IDLE_SECONDS"] = "0"  # a test's owner leaves with its last session
    # The daemon follows agent sessions (ctxd/sessions): never this machine's real ones in a test.
    env["CODEX_HOME"] = str(state_dir / "codex-home")
    env["CLAUDE_CONFIG_DIR"] = str(state_dir / "claude-home")
    env["QWEN_HOME"] = str(state_dir / "qwen-home")
    env["GEMINI_CLI_HOME"] = str(state_dir / "gemini-home")
    env["XDG_DATA_HOME"] = str(state_dir / "data")  # OpenCode keeps its sessions in $XDG_DATA_HOME/opencode
    env.update(extra or {})
    return env


class Client:
    """Speaks LSP framing to a daemon's stdin/stdout. Thread-safe requests."""

    def __init__(self, proc: subprocess.Popen[bytes], stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:
        """Talks over the daemon's stdin/stdout, or over the given streams (a TCP connection)."""
        self.proc = proc
        self.stdin = stdin or proc.stdin
        self.stdout = stdout or proc.stdout
        self.initialize_result: dict[str, Any] = {}
        self.auth_token: str | None = None  # over TCP: sent in initialize (docs/protocol.md, "Over TCP")
        self.methods: dict[int, str] = {}  # request id -> method, to check each reply's shape
        self.shape_errors: list[str] = []  # notifications that did not match their shape
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._cond = threading.Condition()
        self._responses: dict[Any, dict[str, Any]] = {}
        self.notifications: list[dict[str, Any]] = []
        self.stray: list[dict[str, Any]] = []  # responses with no id we asked for (e.g. parse errors)
        self._reading = threading.Event()  # cleared: the daemon's output is left unread (`pause_reading`)
        self._reading.set()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    # --- wire ---

    def send_raw(self, data: bytes) -> None:
        with self._lock:
            assert self.stdin is not None
            self.stdin.write(data)
            self.stdin.flush()

    def send(self, message: dict[str, Any]) -> None:
        body = json.dumps(message).encode()
        self.send_raw(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def _read(self) -> None:
        stream = self.stdout
        assert stream is not None
        while True:
            self._reading.wait()
            length = None
            while True:
                line = stream.readline()
                if not line:
                    with self._cond:
                        self._cond.notify_all()
                    return
                if line in (b"\r\n", b"\n"):
                    break
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            body = stream.read(length or 0)
            if len(body) < (length or 0):  # the stream ended inside a frame: the daemon was killed
                with self._cond:
                    self._cond.notify_all()
                return
            message = json.loads(body, parse_constant=_not_json)  # strictly: no NaN or Infinity
            with self._cond:
                if "method" in message:
                    problem = check_shape(message["method"], message.get("params"))
                    if problem:
                        self.shape_errors.append(problem)
                    self.notifications.append(message)
                elif message.get("id") is None:
                    self.stray.append(message)
                else:
                    self._responses[message["id"]] = message
                self._cond.notify_all()

    def pause_reading(self) -> threading.Event:
        """Leave the daemon's output unread (a client that does not keep up) until the returned
        event is set."""
        self._reading.clear()
        return self._reading

    # --- calls ---

    def request_async(self, method: str, params: Any = None) -> int:
        msg_id = next(self._ids)
        self.methods[msg_id] = method
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return msg_id

    def response(self, msg_id: Any, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while msg_id not in self._responses:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.proc.poll() is not None and msg_id not in self._responses:
                    raise TimeoutError(f"no response to request {msg_id} (daemon exit code {self.proc.poll()})")
                self._cond.wait(min(remaining, 0.5))
            return self._responses.pop(msg_id)

    def result(self, msg_id: Any, timeout: float = 30.0) -> Any:
        message = self.response(msg_id, timeout)
        if "error" in message:
            error = message["error"]
            raise RpcError(error["code"], error["message"], error.get("data"))
        problem = check_shape(self.methods.get(msg_id, ""), message["result"])
        assert problem is None, problem  # every reply has the shape the protocol declares
        return message["result"]

    def request(self, method: str, params: Any = None, timeout: float = 30.0) -> Any:
        return self.result(self.request_async(method, params), timeout)

    def notify(self, method: str, params: Any = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def wait_for_notification(self, method: str, predicate: Callable[[dict[str, Any]], bool] | None = None,
                              timeout: float = 10.0, after: int = 0) -> dict[str, Any]:
        """The params of the first notification `method` (from index `after`) that matches."""
        deadline = time.monotonic() + timeout
        with self._cond:
            index = after
            while True:
                while index < len(self.notifications):
                    note = self.notifications[index]
                    index += 1
                    if note["method"] == method and (predicate is None or predicate(note.get("params"))):
                        return note.get("params")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"no {method} notification matched")
                self._cond.wait(min(remaining, 0.5))

    def notes(self, method: str) -> list[Any]:
        with self._cond:
            return [n.get("params") for n in self.notifications if n["method"] == method]

    # --- lifecycle ---

    def initialize(self, folders: list[Path], options: dict[str, Any] | None = None) -> dict[str, Any]:
        result = self.request("initialize", {
            "processId": os.getpid(),
            "rootUri": folders[0].as_uri() if folders else None,
            "capabilities": {"window": {"workDoneProgress": True}},
            "workspaceFolders": [{"uri": f.as_uri(), "name": f.name} for f in folders],
            "initializationOptions": {"ctxd": options or {}},
            **({"authToken": self.auth_token} if self.auth_token is not None else {}),
        })
        self.notify("initialized", {})
        self.initialize_result = result
        with _ATTACHED_LOCK:
            _ATTACHED.setdefault(self.daemon_pid, set()).add(self)
        return result

    def shutdown(self, timeout: float = 30.0) -> int:
        """`shutdown` and `exit`; returns the exit code once the daemon is gone: the owner too
        when this was the last of the test's clients it served (it leaves with its last session
        in tests, `daemon_env`), so that what it wrote last is on disk."""
        try:
            self.request("shutdown", timeout=timeout)
            self.notify("exit")
        except (OSError, TimeoutError, RpcError):
            pass
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._detach(timeout)
        return code

    def _detach(self, timeout: float) -> None:
        pid = self.daemon_pid
        with _ATTACHED_LOCK:
            clients = _ATTACHED.get(pid, set())
            clients.discard(self)
            last = not clients
        if last and pid != self.proc.pid:
            wait_gone(pid, timeout)

    @property
    def daemon_pid(self) -> int:
        """The process that serves this client: the owner of its state dir (docs/processes.md),
        which `initialize` names; this client's own process before that, or when it serves alone."""
        experimental = self.initialize_result.get("capabilities", {}).get("experimental", {})
        pid = experimental.get("ctxd", {}).get("processId")
        return pid if isinstance(pid, int) else self.proc.pid

    def kill(self) -> None:
        """kill -9 of the daemon: the owner that serves this client, and the client's own process."""
        pid = self.daemon_pid
        if pid != self.proc.pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            wait_gone(pid)
        self.proc.kill()
        self.proc.wait()
        with _ATTACHED_LOCK:
            _ATTACHED.get(pid, set()).discard(self)


_ATTACHED: dict[int, set[Client]] = {}  # owner pid -> the clients it serves, in this test process
_ATTACHED_LOCK = threading.Lock()


def wait_gone(pid: int, timeout: float = 30.0) -> None:
    """Until `pid` has exited (a process that is not this one's child cannot be waited for)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                if handle.read().rsplit(b")", 1)[-1].split()[0] == b"Z":
                    return
        except OSError:
            return
        time.sleep(0.01)


def start_daemon(state_dir: Path, *args: str, env: dict[str, str] | None = None, log_file: Path | None = None,
                 transport: str = "stdio") -> Client:
    """Start `python -m ctxd` and connect to it over `transport` ("stdio" or "tcp")."""
    cmd = [sys.executable, "-m", "ctxd", *args]
    if log_file is not None:
        cmd += ["--log-file", str(log_file)]
    if transport == "stdio":
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                env=daemon_env(state_dir, env), cwd=str(REPO))
        return Client(proc)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    token_file = state_dir / f"tcp-{port}.token"
    proc = subprocess.Popen([*cmd, "--tcp", "--host", "127.0.0.1", "--port", str(port), "--token-file", str(token_file)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=daemon_env(state_dir, env), cwd=str(REPO))
    deadline = time.monotonic() + 20
    while not token_file.exists():  # written once the daemon listens
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise TimeoutError(f"the daemon wrote no token file {token_file}")
        time.sleep(0.05)
    connection = socket.create_connection(("127.0.0.1", port), timeout=5)
    connection.settimeout(None)
    client = Client(proc, connection.makefile("wb"), connection.makefile("rb"))
    client.auth_token = token_file.read_text().strip()
    return client
