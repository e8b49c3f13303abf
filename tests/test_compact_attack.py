"""Compaction through a hostile model server (an attack run): real HTTP servers on 127.0.0.1 that
trickle, flood, echo the API key or answer in odd shapes, against a real daemon. A failed
compaction changes nothing and says why within a bound; the daemon never holds a huge answer in
memory, and the key never reaches the ledger, the log, the state dir or the client."""

from __future__ import annotations

import json
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import call, output, user
from tests.rpc import RpcError
from tests.test_compact_e2e import KEY, KEY_ENV, start, stored, thread_items

COMPACTION_FAILED = 1001

Behaviour = Callable[[socket.socket], None]


class RawServer:
    """An HTTP server on 127.0.0.1 that reads each request whole, then lets `behaviour` write
    anything at all back on the socket (so it can break HTTP as no framework would)."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.requests: list[bytes] = []
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._stopping = threading.Event()
        threading.Thread(target=self._accept, name="raw-server", daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}/v1"

    @property
    def stopping(self) -> threading.Event:
        return self._stopping

    def close(self) -> None:
        self._stopping.set()
        self._sock.close()

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                while len(body) < length and (chunk := conn.recv(65536)):
                    body += chunk
                self.requests.append(head + b"\r\n\r\n" + body)
                self.behaviour(conn)
            except OSError:  # the daemon gave up on it
                pass


@pytest.fixture
def raw_server() -> Iterator[Callable[[Behaviour], RawServer]]:
    servers: list[RawServer] = []

    def make(behaviour: Behaviour) -> RawServer:
        servers.append(RawServer(behaviour))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


def answer(body: bytes, status: int = 200, headers: bytes = b"") -> Behaviour:
    def send(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n"
                     % (status, len(body), headers) + body)
    return send


def chat_answer(content: Any) -> bytes:
    return json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                       "choices": [{"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": content}}]}).encode()


def options(server: RawServer, api: str = "chat", **llm: Any) -> dict[str, Any]:
    return {"llm": {"baseUrl": server.base_url, "model": "fake-model", "api": api, "apiKeyEnv": "FAKE_OPENAI_KEY",
                    "maxRetries": 1, "retryBudgetSeconds": 5, "timeoutSeconds": 3, **llm}}


def everything_written(state_dir: Path, tmp_path: Path) -> Iterator[tuple[Path, bytes]]:
    """Every file of the state dir and every daemon log, as bytes."""
    for folder, pattern in ((state_dir, "**/*"), (tmp_path, "daemon-*.log")):
        for path in folder.glob(pattern):
            if path.is_file():
                yield path, path.read_bytes()


def trickle(conn: socket.socket) -> None:
    """Headers at once, then the body a byte every half second, for ever: no read ever times out."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n")
    while True:
        conn.sendall(b" ")
        time.sleep(0.5)


def test_a_trickled_answer_is_given_up_within_the_request_timeout(daemon_factory, workspace, raw_server) -> None:
    """`llm.timeout_seconds` bounds a request in all: the openai client's timeout is between two
    reads, so an endpoint sending a byte every half second held the compaction (and the prompt
    that waited on an automatic one) for ever."""
    server = raw_server(trickle)
    client = start(daemon_factory, workspace, {**options(server), "autoCompactTokenLimit": 3000})
    ws = workspace.as_uri()
    client.request("ctxd/record", {"workspace": ws, "items": thread_items()})
    before = stored(client, ws)
    with pytest.raises(RpcError) as caught:
        client.result(client.request_async("ctxd/compact", {"workspace": ws, "strategy": "llm"}), timeout=45)
    assert caught.value.code == COMPACTION_FAILED and "no whole answer within 3 s" in caught.value.message
    assert stored(client, ws) == before
    # Before a prompt: the automatic compaction gives up on the endpoint and compacts offline.
    prompt = client.result(client.request_async("ctxd/prompt", {"workspace": ws}), timeout=45)
    compacted = client.wait_for_notification("ctxd/compacted")
    assert compacted["strategy"] == "offline" and prompt["estimatedTokens"] == compacted["tokensAfter"]


def flood(size: int, gzipped: bool = False) -> Behaviour:
    """A 200 answer of `size` bytes of JSON whitespace, sent as fast as the daemon reads; or the
    same gzipped (about a MB on the wire, compressed here before the daemon asks)."""
    block = b" " * (1 << 20)
    packed = b""
    if gzipped:
        packer = zlib.compressobj(9, zlib.DEFLATED, 31)
        packed = b"".join(packer.compress(block) for _ in range(size >> 20)) + packer.flush()

    def send(conn: socket.socket) -> None:
        if gzipped:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(packed) + packed)
            return
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % size)
        for _ in range(size >> 20):
            conn.sendall(block)
    return send


def peak_memory_mb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))) // 1024


@pytest.mark.parametrize("gzipped", [False, True], ids=["1GB", "gzip-bomb-1GB"])
def test_a_huge_answer_is_refused_without_holding_it(daemon_factory, workspace, raw_server, gzipped) -> None:
    """The whole answer was read into memory (and a gzipped one inflated whole) before anything
    looked at it: a 1 GB answer took the daemon past 2 GB."""
    if not Path("/proc/self/status").exists():
        pytest.skip("reads the daemon's peak memory from /proc")
    server = raw_server(flood(1 << 30, gzipped))
    client = start(daemon_factory, workspace, options(server, api="responses"))
    ws = workspace.as_uri()
    client.request("ctxd/record", {"workspace": ws, "items": thread_items()})
    before = stored(client, ws)
    for strategy in ("llm", "remote"):
        with pytest.raises(RpcError) as caught:
            client.result(client.request_async("ctxd/compact", {"workspace": ws, "strategy": strategy}), timeout=60)
        assert caught.value.code == COMPACTION_FAILED and "larger than 16 MiB" in caught.value.message
    assert stored(client, ws) == before
    assert peak_memory_mb(client.proc.pid) < 400


def one_long_turn(calls: int) -> list[dict[str, Any]]:
    items = [user("Rename every module under src/ to snake_case.")]
    for n in range(calls):
        items += [call(f"c{n}", "shell", json.dumps({"cmd": f"git mv src/Mod{n}.py src/mod_{n}.py"})),
                  output(f"c{n}", f"renamed {n} " * 40)]
    return items


def test_the_request_ladder_stops_when_the_retry_budget_is_spent(daemon_factory, workspace, raw_server) -> None:
    """Each rung of the ladder had its own retry budget, and a turn of N items is N rungs: an
    endpoint answering 'too long' slowly held a compaction for N times its answer time."""
    too_long = json.dumps({"error": {"message": "This model's maximum context length is 10 tokens.",
                                     "type": "invalid_request_error", "code": "context_length_exceeded"}}).encode()

    def slowly(conn: socket.socket) -> None:
        time.sleep(0.2)
        answer(too_long, 400)(conn)

    server = raw_server(slowly)
    client = start(daemon_factory, workspace, options(server))
    ws = workspace.as_uri()
    client.request("ctxd/record", {"workspace": ws, "items": one_long_turn(300)})
    before = stored(client, ws)
    with pytest.raises(RpcError) as caught:
        client.result(client.request_async("ctxd/compact", {"workspace": ws, "strategy": "llm"}), timeout=45)
    assert caught.value.code == COMPACTION_FAILED and "budget" in caught.value.message
    assert len(server.requests) < 100  # 5 s of rungs, not one per item of the turn (302)
    assert stored(client, ws) == before


LONE = b'{"choices":[{"message":{"role":"assistant","content":"Fixed the parser \\ud800 in src/\\u0000p.py"}}]}'


def test_a_summary_with_a_lone_surrogate_is_kept_and_can_be_undone(daemon_factory, workspace, raw_server) -> None:
    """A summary holding a lone surrogate (valid JSON, not Unicode) failed inside the store with
    -32603; it is kept with U+FFFD in its place, and the compaction undoes exactly."""
    server = raw_server(answer(LONE))
    client = start(daemon_factory, workspace, options(server))
    ws = workspace.as_uri()
    recorded = client.request("ctxd/record", {"workspace": ws, "items": thread_items()})
    before = client.request("ctxd/history", {"workspace": ws})
    result = client.request("ctxd/compact", {"workspace": ws, "strategy": "llm"})
    assert result["summary"] == "Fixed the parser \ufffd in src/\x00p.py"
    assert result["historyVersion"] == recorded["historyVersion"] + 1
    assert "Fixed the parser \ufffd" in json.dumps(client.request("ctxd/prompt", {"workspace": ws})["items"],
                                                   ensure_ascii=False)
    client.request("ctxd/undo", {"workspace": ws, "thread": "default", "id": result["undoId"]})
    assert client.request("ctxd/history", {"workspace": ws})["items"] == before["items"]


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("body", [
    b'{"output":[{"type":"compaction","encrypted_content":"gAAA\\udc00BB"}]}',
    b'{"output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"a\\ud800"}]}]}',
    json.dumps({"output": [{"type": "compaction", "encrypted_content": "gAAA", "extra": nested(300)}]}).encode(),
], ids=["surrogate-in-compaction", "surrogate-in-message", "nested-300-deep"])
def test_a_remote_item_the_store_cannot_hold_fails_cleanly(daemon_factory, workspace, raw_server, body) -> None:
    """Output items of /responses/compact holding a lone surrogate or nested 300 deep failed inside
    the store with -32603 ('see the daemon's log'); they are refused with 1001, nothing changed."""
    server = raw_server(answer(body))
    client = start(daemon_factory, workspace, options(server, api="responses"))
    ws = workspace.as_uri()
    client.request("ctxd/record", {"workspace": ws, "items": thread_items()})
    before = stored(client, ws)
    with pytest.raises(RpcError) as caught:
        client.request("ctxd/compact", {"workspace": ws, "strategy": "remote"})
    assert caught.value.code == COMPACTION_FAILED and "unusable item" in caught.value.message
    assert stored(client, ws) == before


def test_the_key_echoed_back_never_leaves_the_daemon(daemon_factory, workspace, raw_server, state_dir,
                                                     tmp_path) -> None:
    """Held: an endpoint that echoes the key in its error bodies (message, code, type), in a
    'too long' answer the ladder reports, and in a summary: nothing the client gets, nothing
    stored, nothing logged (with -v) holds it."""
    echo = json.dumps({"error": {"message": f"bad key {KEY}; maximum context length", "code": KEY,
                                 "type": KEY}}).encode()
    steps = iter([answer(echo, 400), answer(echo, 500, b"Retry-After: 0\r\n"), answer(echo, 401),
                  answer(chat_answer(f"Summary. The key was {KEY}."))])
    server = raw_server(lambda conn: next(steps)(conn))
    client = daemon_factory([workspace], options(server), env=KEY_ENV, args=("-v",))
    ws = workspace.as_uri()
    client.request("ctxd/record", {"workspace": ws, "items": thread_items()})
    with pytest.raises(RpcError) as caught:
        client.request("ctxd/compact", {"workspace": ws, "strategy": "llm", "workDoneToken": 1})
    assert caught.value.code == COMPACTION_FAILED and KEY not in caught.value.message
    result = client.request("ctxd/compact", {"workspace": ws, "strategy": "llm"})
    assert KEY not in json.dumps(result)
    assert KEY not in json.dumps(client.request("ctxd/history", {"workspace": ws, "includeArchived": True}))
    assert not [n for n in client.notifications if KEY in json.dumps(n)]
    assert len(server.requests) == 4
    client.shutdown(timeout=5)
    assert not [path for path, data in everything_written(state_dir, tmp_path) if KEY.encode() in data]


def test_a_prompt_past_the_warning_point_with_a_cold_cache_compacts_first(daemon_factory, workspace,
                                                                          state_dir) -> None:
    """docs/protocol.md: automatic compaction also runs before a prompt when the thread is past
    its warning point and its cache is cold. `ctxd/prompt` only ever asked for one at the limit,
    so it never did."""
    from ctxd.tokens import prompt_cache
    from ctxd.workspace import Workspace

    settings = {"autoCompactTokenLimit": 4000, "model": "claude-sonnet-4-5"}
    ws = Workspace(workspace.as_uri(), workspace, state_dir / "ctxd", settings)
    try:
        body = "\n".join(f"line {i}: collecting tests from module_{i}.py and more words" for i in range(40))
        n = 0
        while ws.usage("t")["tier"] == "ok":
            ws.record("t", [user(f"turn {n}: fix bug {n}"),
                            {"type": "message", "role": "assistant",
                             "content": [{"type": "output_text", "text": body + str(n)}]}])
            n += 1
        used = ws.usage("t")["usedTokens"]
        ws.report_usage("t", used, {"input": 10, "cachedInput": used - 10, "output": 5})
        facts = ws.state("t")["cacheFacts"]  # the last request was an hour ago: the cache has expired
        ws.update_state("t", cacheFacts={**facts, "lastRequestAt": prompt_cache.iso(time.time() - 3600)})
    finally:
        ws.close()
    client = daemon_factory([workspace], settings)
    uri = workspace.as_uri()
    usage = client.request("ctxd/usage", {"workspace": uri, "thread": "t"})
    assert usage["usage"]["tier"] == "warn" and usage["cache"]["state"] == "cold"
    prompt = client.request("ctxd/prompt", {"workspace": uri, "thread": "t"})
    compacted = client.wait_for_notification("ctxd/compacted")
    assert compacted["thread"] == "t" and prompt["estimatedTokens"] == compacted["tokensAfter"] < used


def test_an_enormous_summary_is_cut_to_a_bound(daemon_factory, workspace, raw_server) -> None:
    """A 10 MB summary made a 3,756-token thread 2.6 million tokens, and since every later
    compaction keeps an earlier summary word for word, none could shrink it again ('nothing worth
    compacting'; automatic compaction tripped its breaker). It is middle-truncated to half the
    auto-compact limit, its head and tail kept."""
    big = "HEAD: the parser in src/p.py is fixed. " + "Then ran the tests again. " * 400_000 + "TAIL: next, README."
    server = raw_server(answer(chat_answer(big)))
    client = start(daemon_factory, workspace, {**options(server), "autoCompactTokenLimit": 3000})
    ws = workspace.as_uri()
    client.request("ctxd/record", {"workspace": ws, "items": thread_items()})
    result = client.result(client.request_async("ctxd/compact", {"workspace": ws, "strategy": "llm"}), timeout=60)
    assert result["tokensAfter"] < 3000 <= result["tokensBefore"]
    summary = result["summary"]
    assert summary.startswith("HEAD: the parser") and summary.endswith("TAIL: next, README.")
    assert "tokens truncated" in summary
    assert client.request("ctxd/usage", {"workspace": ws})["usage"]["tier"] == "ok"
