"""Over TCP the daemon serves several authenticated clients at once (issue #27, the TCP bullet):
each gets a session of its own over the same workspaces, and connections that stall before
authenticating hold up none of them. The daemon leaves when its last client leaves."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import assistant, user
from tests.rpc import Client, daemon_env

REPO = Path(__file__).resolve().parents[1]


def _connect(proc: subprocess.Popen[bytes], port: int, token: str) -> Client:
    connection = socket.create_connection(("127.0.0.1", port), timeout=30)
    connection.settimeout(None)
    client = Client(proc, connection.makefile("wb"), connection.makefile("rb"))
    client.auth_token = token
    return client


def test_two_editors_are_served_at_once_and_stalled_probers_block_neither(state_dir: Path, workspace: Path,
                                                                         tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    token_file = tmp_path / "run" / "ctxd.token"
    command = [sys.executable, "-m", "ctxd", "--tcp", "--port", str(port), "--token-file", str(token_file)]
    proc = subprocess.Popen(command,
                            env=daemon_env(state_dir), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd=str(REPO))
    stalled: list[socket.socket] = []
    try:
        deadline = time.monotonic() + 20
        while not token_file.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "no token file"
            time.sleep(0.05)
        token = token_file.read_text().strip()
        # Two probers get there first: one sends nothing, one half a frame.
        stalled.append(socket.create_connection(("127.0.0.1", port)))
        stalled.append(socket.create_connection(("127.0.0.1", port)))
        stalled[1].sendall(b"Content-Length: 500\r\n\r\n{\"jsonrpc\"")
        first, second = _connect(proc, port, token), _connect(proc, port, token)
        first.initialize([workspace])
        second.initialize([workspace])
        uri = workspace.as_uri()
        # Both sessions at once: a request of each is in flight before either is answered.
        asked = [first.request_async("ctxd/record", {"workspace": uri, "thread": "a", "items": [user("first")]}),
                 second.request_async("ctxd/record", {"workspace": uri, "thread": "b", "items": [user("second")]})]
        assert first.result(asked[0])["itemCount"] == 1 and second.result(asked[1])["itemCount"] == 1
        # The same workspaces: each sees the other's thread, and its usage pushes.
        assert {t["thread"] for t in first.request("ctxd/threads", {"workspace": uri})["threads"]} == {"a", "b"}
        second.request("ctxd/record", {"workspace": uri, "thread": "b", "items": [assistant("hello")]})
        first.wait_for_notification("ctxd/usageChanged", lambda p: p["thread"] == "b", timeout=30)
        # The first leaves (shutdown, exit): the second is still served, the daemon still runs.
        first.request("shutdown")
        first.notify("exit")
        assert second.request("ctxd/history", {"workspace": uri, "thread": "a"})["total"] == 1
        assert proc.poll() is None and token_file.exists()
        # The stalled probers were closed by the daemon without a session.
        for prober in stalled:
            prober.settimeout(60)
            assert prober.recv(65536, socket.MSG_WAITALL).find(b'"result"') < 0
        # The last client leaves: so does the daemon, with the token file.
        assert second.shutdown() == 0
        assert not token_file.exists()
    finally:
        for prober in stalled:
            prober.close()
        if proc.poll() is None:
            proc.kill()
