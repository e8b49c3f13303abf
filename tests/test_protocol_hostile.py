"""Hostile frames and bytes on the wire (issue #13): no single frame ends the session, numbers
strict JSON cannot carry are refused with -32602, everything the daemon sends parses strictly
(tests/rpc.py rejects NaN and Infinity), and file names that are not UTF-8 are sent escaped with
`"pathEncoding": "escaped"`."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ctxd.protocol.paths import unescape_path
from tests.ghost_repo import isolated_git_env, make_repo
from tests.helpers import user
from tests.rpc import Client

BIG = "9" * 5000  # over Python's int conversion limit of 4,300 digits


def frame(body: str) -> bytes:
    data = body.encode()
    return b"Content-Length: %d\r\n\r\n" % len(data) + data


def wait_stray(client: Client, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while len(client.stray) < count:
        assert time.monotonic() < deadline, f"expected {count} replies with a null id, got {client.stray}"
        time.sleep(0.01)
    return client.stray


def still_alive(client: Client, workspace: Path) -> None:
    assert client.request("ctxd/record", {"workspace": workspace.as_uri(), "items": [user("still here")]})
    assert client.proc.poll() is None


@pytest.mark.parametrize("where", ["field", "item", "id"])
def test_a_huge_number_never_ends_the_session(client: Client, workspace: Path, where: str) -> None:
    uri = workspace.as_uri()
    if where == "id":
        client.send_raw(frame('{"jsonrpc":"2.0","id":%s,"method":"ctxd/usage","params":{"workspace":"%s"}}' % (BIG, uri)))
        reply = wait_stray(client, 1)[0]
        assert reply["error"]["code"] == -32600
    else:
        inner = ('{"workspace":"%s","limit":%s}' % (uri, BIG) if where == "field" else
                 '{"workspace":"%s","items":[{"type":"message","role":"user","n":%s,"content":[]}]}' % (uri, BIG))
        method = "ctxd/history" if where == "field" else "ctxd/record"
        client.send_raw(frame('{"jsonrpc":"2.0","id":"big","method":"%s","params":%s}' % (method, inner)))
        reply = client.response("big")
        assert reply["error"]["code"] == -32602 and "strict JSON" in reply["error"]["message"]
    still_alive(client, workspace)


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999", "-1e999"])
def test_numbers_strict_json_cannot_carry_are_refused(client: Client, workspace: Path, number: str) -> None:
    uri = workspace.as_uri()
    item = '{"type":"function_call_output","call_id":"c1","output":"ok","score":%s}' % number
    client.send_raw(frame('{"jsonrpc":"2.0","id":7,"method":"ctxd/record","params":{"workspace":"%s","items":[%s]}}'
                          % (uri, item)))
    reply = client.response(7)
    assert reply["error"]["code"] == -32602
    history = client.request("ctxd/history", {"workspace": uri})
    assert history["total"] == 0  # nothing of it was stored (and this reply parsed strictly)
    still_alive(client, workspace)


def test_restore_reply_escapes_file_names_that_are_not_utf8(daemon_factory, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in isolated_git_env(tmp_path / "home").items():
        monkeypatch.setenv(key, value)
    repo = make_repo(tmp_path / "repo")
    root = repo.root
    name = b"caf\xe9-\\x41.txt"  # Latin-1, and a backslash that must survive the escaping
    path = os.path.join(os.fsencode(root), name)
    with open(path, "wb") as handle:
        handle.write(b"before\n")
    client = daemon_factory([root])
    uri = root.as_uri()
    snap = client.request("ctxd/ghost/snapshot", {"workspace": uri})
    with open(path, "wb") as handle:
        handle.write(b"after\n")
    result = client.request("ctxd/ghost/restore", {"workspace": uri, "id": snap["id"]})  # read as strict UTF-8
    assert result["pathEncoding"] == "escaped"
    assert [unescape_path(p) for p in result["restored"]] == [name]
    with open(path, "rb") as handle:
        assert handle.read() == b"before\n"


def test_an_endpoint_answering_nan_cannot_poison_the_thread(daemon_factory, workspace: Path) -> None:
    from tests.fake_openai import FakeOpenAI, Step

    with FakeOpenAI() as fake:
        fake.script(Step(path="/v1/responses/compact", body={"output": [
            {"type": "compaction", "encrypted_content": "abc", "score": float("nan")}]}))
        client = daemon_factory([workspace], {"llm": {"baseUrl": fake.base_url, "model": "m", "api": "responses",
                                                      "maxRetries": 0}})
        uri = workspace.as_uri()
        client.request("ctxd/record", {"workspace": uri, "items": [user("one"), user("two")]})
        reply = client.response(client.request_async("ctxd/compact", {"workspace": uri, "strategy": "remote"}))
        assert reply["error"]["code"] == 1001 and "did not parse" in reply["error"]["message"]
        assert fake.requests[-1].path == "/v1/responses/compact"
        history = client.request("ctxd/history", {"workspace": uri, "includeArchived": True})  # parses strictly
        assert history["total"] == 2


@pytest.mark.parametrize("bad_id", [[1, 2], {"a": 1}, 1.5, None])
def test_a_cancel_naming_no_valid_id_is_ignored(client: Client, workspace: Path, bad_id: Any) -> None:
    client.notify("$/cancelRequest", {"id": bad_id})
    still_alive(client, workspace)


def test_a_client_that_does_not_read_its_answers_cannot_fill_the_daemons_memory(client: Client, workspace: Path) -> None:
    """Requests keep coming while no answer is read: the daemon stops reading once its backlog is
    full (app.BACKLOG_BYTES), so the sender blocks, and every answer arrives once it reads again."""
    uri = workspace.as_uri()
    client.request("ctxd/record", {"workspace": uri, "items": [user("x" * 100_000)]})
    before = rss_kib(client.daemon_pid)
    padding = "p" * (1024 * 1024)  # an ignored field: each request is 1 MiB
    body = b'{"jsonrpc":"2.0","id":"h%%d","method":"ctxd/history","params":{"workspace":"%s","pad":"%s"}}' % (
        uri.encode(), padding.encode())
    total, sent = 200, []
    stop_reading = client.pause_reading()
    sender = threading.Thread(target=lambda: [client.send_raw(frame((body % i).decode())) or sent.append(i)
                                              for i in range(total)], daemon=True)
    sender.start()
    wait_until_stalled(sent)
    grown = rss_kib(client.daemon_pid) - before
    assert len(sent) < total / 2, f"{len(sent)} requests of 1 MiB were taken in while no answer was read"
    assert grown < 150 * 1024, f"the daemon grew by {grown // 1024} MiB"
    stop_reading.set()
    sender.join(timeout=120)
    assert len(sent) == total
    for i in range(total):
        assert "items" in client.result(f"h{i}", timeout=60)


def rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1])


def wait_until_stalled(sent: list[int]) -> None:
    """Until the sender has made no progress for a while (it is blocked on a full pipe)."""
    seen, still = -1, 0
    while still < 20:
        time.sleep(0.1)
        still = still + 1 if len(sent) == seen else 0
        seen = len(sent)
