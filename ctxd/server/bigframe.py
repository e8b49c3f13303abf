"""A huge frame's body read without holding it all parsed (issue #36).

Parsed at once, a 47 MB `ctxd/record` of 200-byte items took 155 MB as Python objects, beside the
body and its decoded text: the daemon's peak was eight times the frame. A body of at least
BIG_FRAME_BYTES is read here instead. Its text is decoded piece by piece (a character outside the
BMP widens the piece it is in, not the whole text), every value is read by `json`'s own scanner,
and the elements of `params.items` are checked (`codec.unsafe_content`) and kept as their JSON
text (`RawItem`), each parsed again when it is stored, one at a time. What is held at once is the
body and its items' texts: about twice the frame.

Only `params.items` is read element by element: a single item of tens of megabytes of small parts
is still parsed whole (no client sends one). The answers are those of `codec.parse`: a parse
error, an invalid request, invalid params with the request's id.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Callable
from typing import Any

from ctxd.errors import InvalidRequest, ParseError
from ctxd.protocol import methods
from ctxd.protocol.rawjson import RawItem
from ctxd.server.codec import DECODER, NotJson, Rejected, parse, refused, unsafe_content, unsafe_walk
from ctxd.server.memory import after_reading

BIG_FRAME_BYTES = 8 * 1024 * 1024
DECODE_BYTES = 1024 * 1024  # the body is decoded this much at a time (more for a longer value)
GIVE_BACK_BYTES = 8 * 1024 * 1024  # and the heap trimmed each time this much of it was read
_SPACE = re.compile(r"[ \t\n\r]*")
_ITEM_DEPTH = 3  # message, params, items: an item's own nesting starts below them


def parse_frame(body: bytes | bytearray) -> dict[str, Any] | Rejected:
    """A body as a JSON-RPC message object, or the reason it cannot be one (`codec.parse`); a
    huge body is read here."""
    return parse(body) if len(body) < BIG_FRAME_BYTES else parse_big(body)


def parse_big(body: bytes | bytearray) -> dict[str, Any] | Rejected:
    """`codec.parse` of a huge body, its `params.items` kept as texts (see the module's docstring).
    A `bytearray` body is consumed as it is read (emptied: its memory goes back as the texts are
    made)."""
    reader = _Reader(body)
    try:
        reader.space()
        if reader.peek() != "{":  # not an object: read whole, as `codec.parse` does
            reader.value()
            reader.end()
            return Rejected(InvalidRequest("Invalid Request: a message must be a JSON object"))
        message = reader.object(reader.message_member)
        reader.end()
    except (ValueError, RecursionError) as error:  # JSONDecodeError and UnicodeDecodeError included
        return Rejected(ParseError(f"Parse error: {reader.located(error)}"))
    problem = reader.problem or unsafe_walk(message, strings=True)  # (the items are texts: not walked)
    if problem is not None:
        return refused(message, problem)
    params = message.get("params")
    if isinstance(params, dict) and isinstance(params.get("items"), list) and message.get("method") != methods.RECORD:
        params["items"] = [item.take() for item in params["items"]]  # only `ctxd/record` takes them as texts
    return message


class _Reader:
    """The body's text, decoded as far as the reading needs, and a position in it. What was read
    is dropped from `text` when more is decoded; `dropped` counts it, for the errors' positions."""

    def __init__(self, body: bytes | bytearray) -> None:
        self.body = body
        self.offset = 0  # bytes of the body decoded (of a bytearray: deleted from it instead)
        self.given = 0  # bytes deleted from a bytearray body since the heap was last trimmed
        self.decoder = codecs.getincrementaldecoder("utf-8")()  # strict: a bad byte is a parse error
        self.text = ""
        self.pos = 0
        self.dropped = 0
        self.problem: str | None = None  # the first item that `codec.unsafe_content` refuses

    def more(self) -> bool:
        """Decode at least as much again as is left to read (so that a long value is read a few
        times at most, never once per piece); False at the end of the body."""
        if self.offset >= len(self.body):
            return False
        wanted = max(DECODE_BYTES, len(self.text) - self.pos)
        piece = self.body[self.offset:self.offset + wanted]
        if isinstance(self.body, bytearray):  # given back as it is read: CPython moves what is left
            del self.body[:len(piece)]  # into a smaller buffer each time half of it was read, and the
            self.given += len(piece)  # heap is trimmed often enough for the freed one to go back
            if self.given >= GIVE_BACK_BYTES:
                self.given = 0
                after_reading(BIG_FRAME_BYTES)
        else:
            self.offset += len(piece)
        decoded = self.decoder.decode(piece, self.offset >= len(self.body))
        self.dropped += self.pos
        self.text, self.pos = self.text[self.pos:] + decoded, 0
        return True

    def peek(self) -> str:
        """The next character, or "" at the end."""
        while self.pos >= len(self.text):
            if not self.more():
                return ""
        return self.text[self.pos]

    def space(self) -> None:
        while True:
            found = _SPACE.match(self.text, self.pos)
            self.pos = found.end() if found else self.pos
            if self.pos < len(self.text) or not self.more():
                return

    def expect(self, char: str, what: str) -> None:
        if self.peek() != char:
            raise json.JSONDecodeError(f"Expecting {what}", self.text, self.pos)
        self.pos += 1
        self.space()

    def end(self) -> None:
        self.space()
        if self.peek():
            raise json.JSONDecodeError("Extra data", self.text, self.pos)

    def _scan(self) -> tuple[Any, int]:
        """The value at the position, read by `json`'s scanner, and where it starts in `text`; the
        position is left at its end. A value cut off by the end of what is decoded is read again
        with more."""
        while True:
            start = self.pos
            try:
                value, end = DECODER.raw_decode(self.text, start)
            except json.JSONDecodeError as error:
                if (error.pos >= len(self.text) - 8 or error.msg.startswith("Unterminated string")) and self.more():
                    continue
                raise
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if end + (2 if number else 0) >= len(self.text) and self.more():
                continue  # a value may go on in what is not decoded yet (`1` of `1e+5` before `e+`)
            self.pos = end
            return value, start

    def value(self) -> Any:
        value, _ = self._scan()
        self.space()
        return value

    def value_and_text(self) -> tuple[Any, str]:
        value, start = self._scan()
        text = self.text[start:self.pos]
        self.space()
        return value, text

    def object(self, member: Callable[[str], Any]) -> dict[str, Any]:
        """The object at the position; each member's value read by `member(key)`. A key given
        twice keeps its last value, as `json` does."""
        result: dict[str, Any] = {}
        self.expect("{", "'{'")
        if self.peek() == "}":
            self.expect("}", "'}'")
            return result
        while True:
            if self.peek() != '"':
                raise json.JSONDecodeError("Expecting property name enclosed in double quotes", self.text, self.pos)
            key = self.value()
            self.expect(":", "':' delimiter")
            result[key] = member(key)
            if self.peek() == "}":
                self.expect("}", "'}'")
                return result
            self.expect(",", "',' delimiter")

    def message_member(self, key: str) -> Any:
        """A member of the message: `params` read member by member, the rest whole."""
        if key == "params" and self.peek() == "{":
            return self.object(self.params_member)
        return self.value()

    def params_member(self, key: str) -> Any:
        """A member of the params: `items` kept as texts, the rest whole."""
        if key == "items" and self.peek() == "[":
            return self.items()
        return self.value()

    def items(self) -> list[RawItem]:
        """Each element checked and kept as its JSON text."""
        items: list[RawItem] = []
        self.expect("[", "'['")
        if self.peek() == "]":
            self.expect("]", "']'")
            return items
        while True:
            made = NotJson.made
            value, text = self.value_and_text()
            if self.problem is None:  # the item, one level below a stand-in for the items list
                self.problem = unsafe_content({"item": value}, text, numbers=NotJson.made != made,
                                              depth=_ITEM_DEPTH - 1)
            items.append(RawItem(text))
            del value
            if self.peek() == "]":
                self.expect("]", "']'")
                return items
            self.expect(",", "',' delimiter")

    def located(self, error: Exception) -> str:
        """The error, with a position in the whole text when it has one."""
        if isinstance(error, json.JSONDecodeError):
            return f"{error.msg}: char {self.dropped + error.pos}"
        return str(error)
