"""A huge frame read without holding it all parsed (issue #36, ctxd/server/bigframe.py).

`bigframe.parse_big` must answer exactly what `codec.parse` answers, whatever the body: the same
message (its record items kept as texts, equal once taken), or the same refusal (its class, code,
id). The body is decoded a few bytes at a time here, so that every value, number, escape and
multi-byte character is cut somewhere. Then through the real daemon: a frame over the threshold
stores what small frames store, and one bad item refuses it whole.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxd.protocol.rawjson import RawItem
from ctxd.server import bigframe
from ctxd.server.codec import Rejected, parse
from tests.helpers import assistant, call, output, user
from tests.rpc import Client, RpcError

KEY = "sk-proj-bigframeTestKey0123456789abcdef"


@pytest.fixture(autouse=True)
def tiny_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bigframe, "DECODE_BYTES", 7)


def taken(result: dict[str, Any] | Rejected) -> Any:
    """A message with its items parsed from their texts; a refusal as what a client sees of it."""
    if isinstance(result, Rejected):
        return ("rejected", type(result.error).__name__, result.error.code, result.msg_id, result.answer)
    items = result.get("params", {}).get("items") if isinstance(result.get("params"), dict) else None
    if isinstance(items, list):
        result["params"]["items"] = [item.take() if isinstance(item, RawItem) else item for item in items]
    return result


def same_as_parse(body: bytes) -> None:
    expected, got = taken(parse(body)), taken(bigframe.parse_big(bytearray(body)))
    assert got == expected, body[:300]


def record(items: list[Any], msg_id: Any = 7, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "method": "ctxd/record",
            "params": {"workspace": "file:///w", "thread": "t", "items": items, **params}}


json_leaf = (st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30)
             | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20))
json_value = st.recursive(json_leaf, lambda inner: st.lists(inner, max_size=4)
                          | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=12)


@settings(max_examples=150, deadline=None)
@given(items=st.lists(json_value, max_size=6), ascii_only=st.booleans(), spaced=st.booleans(),
       params_first=st.booleans())
def test_any_record_reads_as_parse_reads_it(items: list[Any], ascii_only: bool, spaced: bool,
                                            params_first: bool) -> None:
    message = record(items)
    if params_first:
        message = {"params": message.pop("params"), **message}
    separators = (" ,\n ", " :\t") if spaced else (",", ":")
    same_as_parse(json.dumps(message, ensure_ascii=ascii_only, separators=separators).encode())


CASES = {
    "emoji and escapes": json.dumps(record([assistant("naïve 😀 \\u263a \"quoted\" \n tab\t"), user("日本語")]),
                                    ensure_ascii=False),
    "escaped astral": json.dumps(record([assistant("😀" * 5)])),
    "numbers at every cut": json.dumps(record([{"type": "x", "n": 123456789012345, "f": -1.5e-7, "t": True}])),
    "nan in an item, id after": '{"params": {"workspace": "file:///w", "items": [{"n": NaN}]}, "id": 3, '
                                '"method": "ctxd/record", "jsonrpc": "2.0"}',
    "huge int in an item": json.dumps(record([{"n": 1}]))[:-3] + ', {"n": ' + "9" * 5000 + "}]}}",
    "lone surrogate in an item": json.dumps(record([assistant("\ud800")])),
    "lone surrogate in a key": json.dumps(record([{"\udc00": 1}])),
    "deep item": json.dumps(record([{"a": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}])),
    "too deep item": json.dumps(record([json.loads("[" * 200 + "]" * 200)])),
    "too deep elsewhere": json.dumps(record([], other=json.loads("[" * 200 + "]" * 200))),
    "nan in the id": '{"jsonrpc": "2.0", "id": NaN, "method": "ctxd/record", "params": {"items": []}}',
    "an item that is not an object": json.dumps(record([1, "two", None, [3]])),
    "items not a list": json.dumps(record({"type": "message"})),  # type: ignore[arg-type]
    "no params": '{"jsonrpc": "2.0", "id": 1, "method": "ctxd/record"}',
    "params not an object": '{"jsonrpc": "2.0", "id": 1, "method": "ctxd/record", "params": [1, 2]}',
    "items twice": '{"jsonrpc":"2.0","id":1,"method":"ctxd/record","params":{"items":[{"a":1}],"items":[{"b":2}]}}',
    "another method's items": json.dumps({**record([{"a": 1}]), "method": "ctxd/usage"}),
    "empty object": "{}",
    "empty items": json.dumps(record([])),
    "not an object": "[1, 2, 3]",
    "a string": '"hello"',
    "truncated": json.dumps(record([assistant("cut")]))[:-9],
    "trailing data": json.dumps(record([])) + " {}",
    "missing comma": '{"jsonrpc": "2.0" "id": 1}',
    "missing colon": '{"jsonrpc" "2.0"}',
    "bad key": '{"jsonrpc": "2.0", 5: 1}',
    "trailing comma in items": '{"params": {"items": [{"a": 1},]}}',
    "bad escape": json.dumps(record([assistant("x")])).replace("x", "\\q"),
    "spaces only": "   \n ",
    "nothing": "",
}


@pytest.mark.parametrize("case", CASES)
def test_each_hard_case_reads_as_parse_reads_it(case: str) -> None:
    same_as_parse(CASES[case].encode())


@pytest.mark.parametrize("piece", range(1, 17))
def test_every_cut_of_every_kind_of_value_reads_the_same(piece: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Numbers (`0.0`, `1e+5`, `-12.5E-3`), words, escapes and characters of 1 to 4 bytes, the body
    decoded `piece` bytes at a time: each is cut at every place by one of the sizes."""
    monkeypatch.setattr(bigframe, "DECODE_BYTES", piece)
    values = [0.0, 1e5, -12.5e-3, 123456789, -0, True, False, None, "\\\"\u00e9\u263a\U0001f600\n", "ab", [], {}]
    for ascii_only in (False, True):  # (escaped: a surrogate pair's two escapes cut apart too)
        text = json.dumps(record([{"type": "x", "v": value} for value in values]), ensure_ascii=ascii_only)
        same_as_parse(text.replace("100000.0", "1e+5").replace("-0.0125", "-12.5E-3").encode())
        for value in values:
            same_as_parse(json.dumps(record([value]), ensure_ascii=ascii_only).encode())


def test_a_body_that_is_not_utf8_is_a_parse_error() -> None:
    body = json.dumps(record([assistant("é")]), ensure_ascii=False).encode().replace("é".encode(), b"\xe9")
    assert taken(bigframe.parse_big(bytearray(body)))[:3] == ("rejected", "ParseError", -32700)
    same_as_parse(body)


def test_a_parse_error_names_the_place_in_the_whole_body() -> None:
    body = json.dumps(record([assistant("a" * 100)])).encode() + b" x"
    result = bigframe.parse_big(bytearray(body))
    assert isinstance(result, Rejected) and f"char {len(body) - 1}" in result.error.message


def test_the_body_is_given_back_as_it_is_read() -> None:
    body = bytearray(json.dumps(record([assistant(f"item {i}") for i in range(50)])).encode())
    message = bigframe.parse_big(body)
    assert not body, "the bytearray was not consumed"
    assert isinstance(message, dict) and all(isinstance(item, RawItem) for item in message["params"]["items"])


# --- through the real daemon ----------------------------------------------------------------------------


def frame_of(items: list[dict[str, Any]], floor_bytes: int) -> list[dict[str, Any]]:
    """`items`, then padding items enough for a body over `floor_bytes`."""
    pad = "padding so that this frame is read as a huge one; " * 40
    count = floor_bytes // (len(pad) + 80) + 1
    return items + [assistant(f"{i}: {pad}") for i in range(count)]


def test_a_huge_frame_stores_what_small_frames_store(daemon_factory, workspace: Path) -> None:
    """System messages dropped, a long tool output truncated, the configured key redacted, the
    thread titled: the same history whether the items came in one huge frame or in small ones."""
    client: Client = daemon_factory([workspace], {"toolOutputTokenLimit": 200, "llm": {"apiKeyEnv": "LLM_KEY"}},
                                    env={"LLM_KEY": KEY})
    uri = workspace.as_uri()
    first = [{"type": "message", "role": "system", "content": "be terse"}, user(f"deploy with {KEY} please"),
             call("c1"), output("c1", "line of build log\n" * 2000), assistant(f"done; the key {KEY} is set")]
    items = frame_of(first, bigframe.BIG_FRAME_BYTES)
    assert len(json.dumps(items)) > bigframe.BIG_FRAME_BYTES
    huge = client.request("ctxd/record", {"workspace": uri, "thread": "huge", "items": items}, timeout=300)
    for start in range(0, len(items), 500):
        small = client.request("ctxd/record", {"workspace": uri, "thread": "small", "items": items[start:start + 500]},
                               timeout=300)
    assert huge["itemCount"] == small["itemCount"] == len(items) - 1
    assert huge["usage"]["usedTokens"] == small["usage"]["usedTokens"]

    def history(thread: str) -> list[dict[str, Any]]:
        return client.request("ctxd/history", {"workspace": uri, "thread": thread}, timeout=300)["items"]

    stored = history("huge")
    assert stored == history("small")
    assert KEY not in json.dumps(stored[:4]) and "truncated" in json.dumps(stored[2])
    threads = {t["thread"]: t for t in client.request("ctxd/threads", {"workspace": uri})["threads"]}
    assert threads["huge"]["title"] == threads["small"]["title"]


def test_one_bad_item_refuses_a_huge_frame_whole(daemon_factory, workspace: Path) -> None:
    client: Client = daemon_factory([workspace])
    uri = workspace.as_uri()
    items = frame_of([user("first")], bigframe.BIG_FRAME_BYTES)
    bad = [*items, {"type": "message", "role": "user"}]
    with pytest.raises(RpcError) as refused:
        client.request("ctxd/record", {"workspace": uri, "thread": "t", "items": bad}, timeout=300)
    assert refused.value.code == -32602 and f"items[{len(items)}]" in refused.value.message
    assert client.request("ctxd/history", {"workspace": uri, "thread": "t"})["total"] == 0
    nan = json.dumps({"jsonrpc": "2.0", "id": 99, "method": "ctxd/record",
                      "params": {"workspace": uri, "thread": "t", "items": items}})[:-3] + ', {"n": NaN}]}}'
    client.send_raw(b"Content-Length: %d\r\n\r\n" % len(nan.encode()) + nan.encode())
    answer = client.response(99, timeout=300)
    assert answer["error"]["code"] == -32602 and "NaN" in answer["error"]["message"]
    assert client.request("ctxd/history", {"workspace": uri, "thread": "t"})["total"] == 0
    assert client.request("ctxd/record", {"workspace": uri, "thread": "t", "items": items}, timeout=300)["itemCount"] \
        == len(items)
