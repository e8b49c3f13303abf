"""What a frame's body means: strict JSON in and out, and what in a parsed message the code behind
the reader could not take.

`parse` turns a body into a message or a `Rejected` (the error `dispatch` answers it with, from
the table in `ctxd/errors.py`). Decoding parses only the top-level message (pygls structured every
nested object carrying a `jsonrpc` key); numbers strict JSON cannot carry become `NotJson` so the
request is refused with its own id instead of breaking the decoder.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from ctxd.errors import CtxdError, InvalidParams, InvalidRequest, ParseError
from ctxd.protocol import jsontext
from ctxd.protocol.rawjson import RawJsonList


class NotJson(float):
    """Stands in for a number strict JSON cannot carry (`NaN`, `Infinity`, `1e999`, an integer of
    more than 4,300 digits), so that the request gets InvalidParams with its own id instead of breaking
    the decoder (Python's int conversion limit raises; NaN would be stored and sent back)."""

    made = 0  # how many were ever made: a message whose decoding made none holds none

    text: str

    def __new__(cls, text: str) -> NotJson:
        value = super().__new__(cls, "nan")
        value.text = text[:40]
        NotJson.made += 1
        return value


MAX_INT_DIGITS = 4300


def _parse_int(text: str) -> int | NotJson:
    return int(text) if len(text) <= MAX_INT_DIGITS else NotJson(text)


def _parse_float(text: str) -> float | NotJson:
    value = float(text)
    return value if value not in (float("inf"), float("-inf")) else NotJson(text)


_RAW_MARK = f"ctxd-raw-json-{uuid.uuid4().hex}-"
_raw = threading.local()  # the raw JSON texts of the message being encoded, on this thread


def _raw_placeholder(value: object) -> str:
    """The encoder's `fallback`: a `RawJsonList` becomes a marker string, replaced by its texts after."""
    if isinstance(value, RawJsonList):
        _raw.parts.append(value)
        return f"{_RAW_MARK}{len(_raw.parts) - 1}"
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# Built once: `json.loads` with options builds a new decoder per call.
DECODER = json.JSONDecoder(parse_int=_parse_int, parse_float=_parse_float, parse_constant=NotJson)


def decode(body: bytes | bytearray) -> object:
    """Parse one message body (UTF-8, as LSP frames are); numbers strict JSON cannot carry become
    `NotJson`."""
    return DECODER.decode(body.decode("utf-8"))


def encode_parts(message: object) -> list[bytes]:
    """Serialize for the wire: strict JSON (no NaN or Infinity), UTF-8, in parts whose
    concatenation is the message; a `RawJsonList` is written as the JSON texts it holds, joined
    once, in a part of its own."""
    _raw.parts = []
    try:
        text = jsontext.dumps(message, fallback=_raw_placeholder)
        raws: list[RawJsonList] = _raw.parts
    finally:
        _raw.parts = []
    parts: list[bytes] = []
    for n, raw in enumerate(raws):
        before, _, text = text.partition(f'"{_RAW_MARK}{n}"'.encode())
        parts += [before + b"[", ",".join(raw.texts).encode("utf-8"), b"]"]
    parts.append(text)
    return parts


def encode(message: object) -> bytes:
    """`encode_parts`, concatenated."""
    parts = encode_parts(message)
    return parts[0] if len(parts) == 1 else b"".join(parts)


MAX_JSON_DEPTH = 128
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_TEXT = re.compile(r"\\u[dD][89a-fA-F]")


def unsafe_content(message: dict[str, Any], body: bytes | bytearray | str, numbers: bool = True,
                   depth: int = 1) -> str | None:
    """What in a parsed message would break the code behind the reader, if anything.

    Deep nesting: the JSON decoder copes (up to ~990 levels), but validation, the store's encoder
    and token counting recurse too, and would fail with RecursionError deep inside a handler.
    Unpaired surrogates (`\\ud800`): valid JSON, but not Unicode; SQLite cannot store them.
    A number strict JSON cannot carry (`NotJson`): refused rather than stored.
    All are checked without recursion, and only where they can be: the surrogate walk when the
    body (the message's JSON text) has such escapes, the depth when it has enough brackets, the
    numbers when decoding made a `NotJson` (`numbers`). Most requests need no walk at all.
    `depth`: how deep `message` itself sits in the message (a huge frame's items are checked one
    by one: `bigframe.py`).
    """
    if isinstance(body, str):
        strings = _SURROGATE_ESCAPE_TEXT.search(body) is not None
        brackets = body.count("{") + body.count("[")
    else:
        strings = _SURROGATE_ESCAPE.search(body) is not None
        brackets = body.count(b"{") + body.count(b"[")
    if not strings and not numbers and brackets <= MAX_JSON_DEPTH - depth + 1:
        return None
    return unsafe_walk(message, strings, depth)


def unsafe_walk(message: dict[str, Any], strings: bool, depth: int = 1) -> str | None:
    """`unsafe_content`'s walk (`strings`: look at every string for unpaired surrogates)."""
    stack: list[tuple[object, int]] = [(message, depth)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
        children: Any = value.values() if isinstance(value, dict) else value
        for child in children:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
            elif isinstance(child, NotJson):
                more = "..." if len(child.text) >= 40 else ""
                return f"the number {child.text}{more} cannot be carried in strict JSON"
            elif strings and isinstance(child, str) and not encodable(child):
                return "a string holds an unpaired UTF-16 surrogate"
        if strings and isinstance(value, dict) and not all(encodable(key) for key in value):
            return "a key holds an unpaired UTF-16 surrogate"
    return None


def encodable(text: str) -> bool:
    """Whether `text` is Unicode (no unpaired UTF-16 surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True



@dataclass
class Rejected:
    """A frame that is not a message the server can take: `dispatch` answers it with `error`, to
    `msg_id` (None when the id could not be read), or with nothing when `answer` is False (a
    notification: nothing may answer it)."""

    error: CtxdError
    msg_id: int | str | None = None
    answer: bool = True


@dataclass
class Shortened:
    """Over-long string values were shortened while the frame was read: (original, kept) bytes."""

    sizes: list[tuple[int, int]] = field(default_factory=list)


Incoming = dict[str, Any] | Rejected | Shortened
"""What a connection hands `dispatch`: a message, or what to tell the client instead."""


def parse(body: bytes | bytearray) -> dict[str, Any] | Rejected:
    """A body as a JSON-RPC message object, or the reason it cannot be one."""
    made = NotJson.made
    try:
        message = decode(body)
    except (ValueError, RecursionError) as error:  # JSONDecodeError and UnicodeDecodeError included
        return Rejected(ParseError(f"Parse error: {error}"))
    if not isinstance(message, dict):
        return Rejected(InvalidRequest("Invalid Request: a message must be a JSON object"))
    problem = unsafe_content(message, body, numbers=NotJson.made != made)
    return message if problem is None else refused(message, problem)


def refused(message: dict[str, Any], problem: str) -> Rejected:
    """The answer to a message that holds what the code behind the reader cannot take."""
    msg_id = message.get("id")
    if isinstance(msg_id, NotJson):
        return Rejected(InvalidRequest(f"Invalid Request: {problem} (the id)"))
    if "id" in message and isinstance(msg_id, (int, str)) and not isinstance(msg_id, bool):
        return Rejected(InvalidParams(f"Invalid params: {problem}"), msg_id)
    return Rejected(InvalidParams(f"Invalid params: {problem}"), answer=False)


def error_body(msg_id: object, error: CtxdError) -> bytes:
    """An error reply's JSON text, `error.data` included when there is any."""
    fields: dict[str, Any] = {"code": int(error.code), "message": error.message}
    if error.data is not None:
        fields["data"] = error.data
    return encode({"jsonrpc": "2.0", "id": msg_id, "error": fields})
