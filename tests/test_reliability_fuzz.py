"""Framing and params fuzzing against one real daemon (issue 8).

Hypothesis builds hostile JSON-RPC traffic: random bytes in well-framed bodies, envelopes with odd
ids, methods and params, and `ctxd/*` params mutated from valid ones (wrong types, missing fields,
huge strings, deep nesting, lone surrogates, huge numbers). The daemon must answer every request
that has a usable id with a result or the right error code, never with an internal error (-32603:
an exception nobody expected), never crash, and answer a normal request afterwards.

One daemon serves the whole module: starting one per example would spend the budget on startup.
`derandomize=True` keeps CI deterministic; `bench/stress.py` runs the same strategies 10,000 times.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import assistant, call, output, user
from tests.rpc import Client, RpcError, start_daemon

CI_EXAMPLES = 150
FUZZ_SETTINGS = settings(max_examples=CI_EXAMPLES, deadline=None, derandomize=True, database=None,
                         suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

WORKSPACE = "WORKSPACE"  # replaced by the daemon's workspace URI
NO_INTERNAL_ERRORS = {-32600, -32601, -32602, -32002, -32800, 1001, 1002, 1003}

# --- strategies -----------------------------------------------------------------------------------

scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)


class Deep(int):
    """Stands for a value nested this deep; built only when sent (Hypothesis would recurse
    printing the value itself)."""

    def build(self) -> Any:
        value: Any = 1
        for i in range(self):
            value = [value] if i % 2 else {"k": value}
        return value


class Big(int):
    """Stands for a string of this many characters."""

    def build(self) -> Any:
        return "x" * self


def materialize(value: Any) -> Any:
    if isinstance(value, (Deep, Big)):
        return value.build()
    if isinstance(value, dict):
        return {k: materialize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [materialize(v) for v in value]
    return value


hostile = st.one_of(
    json_values,
    st.integers(min_value=100, max_value=980).map(Deep),
    st.sampled_from(["\ud800", "a\udfffb", "\x00", "\u2028", "é" * 3, "😀"]),
    st.integers(min_value=10_000, max_value=300_000).map(Big),
    st.sampled_from([2**63, 2**64 + 1, -(2**63) - 1, 10**30, 1e308, float("nan")]),
)

VALID_ITEMS = [user("fix the bug"), call("c1"), output("c1", "done"), assistant("fixed"),
               {"type": "reasoning", "summary": [{"type": "summary_text", "text": "thinking"}]},
               {"type": "custom_tool_call", "call_id": "k", "name": "apply_patch", "input": "*** Begin"},
               {"type": "ghost_snapshot", "ghost_commit": {"id": "abc", "parent": None}}]

VALID_PARAMS: dict[str, dict[str, Any]] = {
    "ctxd/record": {"items": VALID_ITEMS[:4]},
    "ctxd/reportTokenUsage": {"usage": {"inputTokens": 10, "outputTokens": 2, "totalTokens": 12}},
    "ctxd/setPromptContext": {"model": "gpt-4.1", "contextWindow": 100000, "baseInstructions": "be brief",
                              "tools": [{"name": "shell", "kind": "builtin", "schema": {}}],
                              "memoryFiles": [{"path": "AGENTS.md", "content": "x"}],
                              "skills": [{"name": "s", "description": "d"}]},
    "ctxd/usage": {},
    "ctxd/prompt": {"inputModalities": ["text"]},
    "ctxd/compact": {"strategy": "offline"},
    "ctxd/rollback": {"turns": 1},
    "ctxd/history": {"offset": 0, "limit": 5, "includeArchived": True},
    "ctxd/threads": {},
    "ctxd/ghost/snapshot": {"message": "fuzz"},
    "ctxd/ghost/list": {},
    "ctxd/ghost/restore": {"id": "0" * 40},
}
METHODS = sorted(VALID_PARAMS)


@st.composite
def ctxd_params(draw: st.DrawFn) -> tuple[str, Any]:
    """A `ctxd/*` method and params that start valid, then get zero or more mutations."""
    method = draw(st.sampled_from(METHODS))
    params: dict[str, Any] = {"workspace": WORKSPACE, "thread": draw(st.sampled_from(["default", "t1", "t2"])),
                              **json.loads(json.dumps(VALID_PARAMS[method]))}
    for _ in range(draw(st.integers(0, 3))):
        keys = sorted(params)
        action = draw(st.sampled_from(["drop", "replace", "add", "item", "nest-item", "inner"]))
        if action == "drop" and keys:
            params.pop(draw(st.sampled_from(keys)))
        elif action == "replace" and keys:
            params[draw(st.sampled_from(keys))] = draw(hostile)
        elif action == "add":
            params[draw(st.text(max_size=10))] = draw(hostile)
        elif action == "item":
            item = dict(draw(st.sampled_from(VALID_ITEMS)))
            field = draw(st.sampled_from(sorted(item) + ["extra"]))
            item[field] = draw(hostile)
            params["items"] = [*VALID_ITEMS[:1], item]
        elif action == "inner" and any(isinstance(v, dict) for v in params.values()):
            key = draw(st.sampled_from(sorted(k for k, v in params.items() if isinstance(v, dict))))
            inner = dict(params[key])
            inner[draw(st.sampled_from(sorted(inner) or ["x"]))] = draw(hostile)
            params[key] = inner
        elif action == "nest-item":
            params["items"] = [{**user("deep"), "x_vendor": draw(st.integers(100, 900).map(Deep))}]
    if draw(st.integers(0, 20)) == 0:
        return method, draw(st.sampled_from([None, [], [params], "params", 7]))
    return method, params


# Never the client's own ids (small integers): a stray answer would be taken for one of them.
ids = st.one_of(st.integers(min_value=10**12, max_value=2**53), st.text(max_size=12).map("fuzz:".__add__))
odd_ids = st.one_of(st.booleans(), st.floats(allow_nan=False), st.lists(st.integers(), max_size=2),
                    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@st.composite
def envelopes(draw: st.DrawFn) -> dict[str, Any]:
    """Whole messages whose envelope may be wrong: version, id, method, params."""
    message: dict[str, Any] = {}
    message["jsonrpc"] = draw(st.sampled_from(["2.0", "2.0", "2.0", "1.0", 2.0, None]))
    message["id"] = draw(st.one_of(ids, odd_ids))
    message["method"] = draw(st.one_of(st.sampled_from([*METHODS, "initialize", "no/such/method", "$/odd"]),
                                       st.text(max_size=30), st.integers(), st.none()))
    if draw(st.booleans()):
        message["params"] = draw(json_values)
    return message


# --- the daemon -----------------------------------------------------------------------------------


class Fuzzed:
    """The module's daemon, its workspace, and the figures of the run."""

    def __init__(self, client: Client, workspace: Path, log_file: Path) -> None:
        self.client = client
        self.workspace = workspace
        self.uri = workspace.as_uri()
        self.log_file = log_file
        self.cases = 0
        self.internal: list[tuple[Any, Any]] = []

    def fill(self, params: Any) -> Any:
        params = materialize(params)
        if isinstance(params, dict) and params.get("workspace") == WORKSPACE:
            return {**params, "workspace": self.uri}
        return params

    def alive(self) -> None:
        assert self.client.proc.poll() is None, f"the daemon died (exit {self.client.proc.poll()})"
        usage = self.client.request("ctxd/usage", {"workspace": self.uri, "thread": "health"}, timeout=30)
        assert usage["contextWindow"] > 0


@pytest.fixture(scope="module")
def fuzzed() -> Iterator[Fuzzed]:
    with tempfile.TemporaryDirectory(prefix="ctxd-fuzz-") as tmp:
        root = Path(tmp)
        workspace, state = root / "ws", root / "state"
        workspace.mkdir()
        state.mkdir()
        log_file = root / "daemon.log"
        client = start_daemon(state, log_file=log_file)
        client.initialize([workspace], {"toolOutputTokenLimit": 200})
        target = Fuzzed(client, workspace, log_file)
        try:
            yield target
            target.alive()
        except BaseException:
            print(log_file.read_text(errors="replace")[-4000:] if log_file.exists() else "(no log)")
            raise
        finally:
            client.shutdown(timeout=10)


def expect_answer(fuzzed: Fuzzed, msg_id: Any, what: Any) -> dict[str, Any]:
    response = fuzzed.client.response(msg_id, timeout=30)
    if "error" in response:
        code = response["error"]["code"]
        assert code in NO_INTERNAL_ERRORS, f"{what!r:.300} -> {response['error']}"
    return response


# --- tests ----------------------------------------------------------------------------------------


@FUZZ_SETTINGS
@given(case=ctxd_params())
def test_ctxd_params_fuzz(fuzzed: Fuzzed, case: tuple[str, Any]) -> None:
    method, params = case
    params = fuzzed.fill(params)
    msg_id = fuzzed.client.request_async(method, params)
    response = expect_answer(fuzzed, msg_id, (method, params))
    fuzzed.cases += 1
    if "error" in response and method not in ("ctxd/ghost/snapshot", "ctxd/ghost/list", "ctxd/ghost/restore",
                                                "ctxd/compact"):
        # Everything but git and compaction fails only on params.
        assert response["error"]["code"] in (-32602, -32601), f"{method} {params!r:.300}: {response['error']}"
    if fuzzed.cases % 25 == 0:
        fuzzed.alive()


@FUZZ_SETTINGS
@given(message=envelopes())
def test_envelope_fuzz(fuzzed: Fuzzed, message: dict[str, Any]) -> None:
    message = {**message, "params": fuzzed.fill(message.get("params"))} if "params" in message else message
    before = len(fuzzed.client.stray)
    fuzzed.client.send(message)
    msg_id = message["id"]
    usable = (isinstance(msg_id, (int, str)) and not isinstance(msg_id, bool) and message["jsonrpc"] == "2.0"
              and isinstance(message["method"], str))
    if usable:
        expect_answer(fuzzed, msg_id, message)
    fuzzed.alive()  # also flushes: every answer to `message` has arrived by now (ordered writer)
    for stray in fuzzed.client.stray[before:]:
        assert stray["error"]["code"] in (-32600, -32700, -32602), stray


@FUZZ_SETTINGS
@given(body=st.one_of(st.binary(max_size=200), st.text(max_size=100).map(str.encode),
                      json_values.map(lambda v: json.dumps(v).encode())))
def test_raw_body_fuzz(fuzzed: Fuzzed, body: bytes) -> None:
    before = len(fuzzed.client.stray)
    fuzzed.client.send_raw(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    fuzzed.alive()
    for stray in fuzzed.client.stray[before:]:
        assert stray["error"]["code"] in (-32600, -32700, -32602), stray


GOOD = b'{"jsonrpc":"2.0","id":"after","method":"ctxd/threads","params":{"workspace":"WS"}}'


@pytest.mark.parametrize("name, data", [
    ("short length", b"Content-Length: 10\r\n\r\n" + b'{"jsonrpc":"2.0","id":"lost","method":"x"}'),
    ("long length", b"Content-Length: 400\r\n\r\n" + b'{"jsonrpc":"2.0","id":"lost","method":"x"}'),
    ("huge length", b"Content-Length: 500000000\r\n\r\n{}"),
    ("negative length", b"Content-Length: -1\r\n\r\n{}"),
    ("absurd length", b"Content-Length: 99999999999999999999\r\n\r\n{}"),
    ("no length", b"Content-Type: x\r\n\r\n{}"),
    ("not a number", b"Content-Length: ten\r\n\r\n{}"),
    ("garbage header", b"\x00\xff garbage without colon\r\n\r\n"),
    ("endless header", b"X-Long: " + b"a" * 20000 + b"\r\n\r\n"),
    ("invalid utf-8", b'Content-Length: 11\r\n\r\n{"a":"\xff\xfe\xfd"}'),
    ("one byte too long", b'Content-Length: 12\r\n\r\n{"a":"b"}\r\n'[:-1]),
    ("deep nesting", b"Content-Length: 200000\r\n\r\n" + b"[" * 100000 + b"]" * 100000),
    ("batch", b'Content-Length: 48\r\n\r\n[{"jsonrpc":"2.0","id":9,"method":"ctxd/usage"}]'),
])
def test_framing_faults_are_survived(fuzzed: Fuzzed, name: str, data: bytes) -> None:
    """A broken frame gets -32700 (or -32600), and the daemon is back in step within two frames:
    a lying length may take the frame after it down too (its bytes were read as the body or as
    headers), never more."""
    before = len(fuzzed.client.stray)
    first = GOOD.replace(b"WS", fuzzed.uri.encode()).replace(b'"after"', b'"after-1"')
    second = first.replace(b'"after-1"', b'"after-2"')
    fuzzed.client.send_raw(data + b"Content-Length: %d\r\n\r\n" % len(first) + first
                           + b"Content-Length: %d\r\n\r\n" % len(second) + second)
    response = fuzzed.client.response("after-2", timeout=30)
    assert "result" in response, response
    errors = [s["error"]["code"] for s in fuzzed.client.stray[before:]]
    assert errors and set(errors) <= {-32700, -32600}, (name, fuzzed.client.stray[before:])
    fuzzed.alive()


@pytest.mark.parametrize("method, params, named", [
    ("ctxd/record", {"items": [user("a\ud800b")]}, "surrogate"),
    ("ctxd/reportTokenUsage", {"usage": {"inputTokens": 2**64, "totalTokens": 2**64}}, "usage.inputTokens"),
    ("ctxd/rollback", {"turns": 10**30}, "turns"),
    ("ctxd/history", {"offset": 10**30}, "offset"),
    ("ctxd/history", {"limit": 10**30}, "limit"),
])
def test_lone_surrogates_and_huge_numbers_are_invalid_params(fuzzed: Fuzzed, method: str, params: dict,
                                                             named: str) -> None:
    """A count no client can mean (over 2**53 - 1, what JavaScript sends exactly) is -32602 naming the
    field, and nothing changes: `turns: 10**30` must not quietly roll the whole thread back."""
    where = {"workspace": fuzzed.uri, "thread": f"numbers-{method}-{named}"}
    fuzzed.client.request("ctxd/record", {**where, "items": [user("keep me"), user("and me")]})
    before = fuzzed.client.request("ctxd/history", where)
    with pytest.raises(RpcError) as error:
        fuzzed.client.request(method, {**where, **params})
    assert error.value.code == -32602 and named in error.value.message, error.value
    assert fuzzed.client.request("ctxd/history", where) == before
    fuzzed.alive()


# --- the frame reader's string cap, in process ------------------------------------------------------

from ctxd.server.transport import StringCapper  # noqa: E402


def capped(data: bytes, limit: int, chunk: int) -> bytes:
    capper = StringCapper(limit)
    capper.reset()
    for start in range(0, len(data), chunk):
        capper.feed(data[start:start + chunk])
    return capper.finish()


texts = st.text(alphabet=st.sampled_from(['a', 'é', '"', '\\', '\n', '😀', '\u2028', 'u', '0']), max_size=300)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(value=st.recursive(texts, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
                          max_leaves=6),
       chunk=st.integers(1, 64), ascii_only=st.booleans())
def test_string_cap_is_exact_below_the_limit_and_valid_above(value: Any, chunk: int, ascii_only: bool) -> None:
    """Split anywhere (escapes and UTF-8 characters across chunks): below the limit the bytes are
    untouched; above it every string still parses, keeps its head and tail, and is shorter."""
    data = json.dumps(value, ensure_ascii=ascii_only).encode()
    assert capped(data, 1 << 20, chunk) == data
    small = json.loads(capped(data, 64, chunk))
    assert type(small) is type(value)

    def check(original: Any, shortened: Any) -> None:
        if isinstance(original, str) and shortened != original:
            head, marker, tail = shortened.partition("\n\u2026[ctxd: ")
            assert marker and original.startswith(head)  # the head is cut exactly
            tail = tail.split("]\u2026\n", 1)[1]
            assert original.endswith(tail[6:])  # the tail's first escape may be cut (it is a seam)
            shortened.encode("utf-8")  # never half a surrogate pair: the request would be refused
        elif isinstance(original, list):
            assert len(shortened) == len(original)
            for a, b in zip(original, shortened):
                check(a, b)
        elif isinstance(original, dict):
            assert len(shortened) == len(original)
            for a, b in zip(original.values(), shortened.values()):
                check(a, b)

    check(value, small)
