"""Where a JSON object's top-level values are, without building them (ctxd/agents/_skim.c).

A session file's summary needs a few small fields of each line; most of a line's bytes are a
tool's output or a file that it never reads. `fields` returns offsets into the line, so that only
what is needed is decoded, and `kinds` the type of each block of a content array; `scan` gives a
reader, in one pass over a chunk, the lines it must look at with the values at its key paths
(small plain containers, a usage, built), so that the lines it passes over never reach Python. The C extension is optional
(setup.py): without it the same functions run here, in Python, with the same answers (slower).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_BLANK = b" \t\r\n"
_DELIMITERS = frozenset(b",}] \t\r\n")


def _blanks(data: bytes, i: int) -> int:
    n = len(data)
    while i < n and data[i] in _BLANK:
        i += 1
    return i


def _string_end(data: bytes, i: int) -> int:
    """The offset after the string opened at `i`, or -1 when it is not closed."""
    p = i + 1
    while True:
        at = data.find(b'"', p)
        if at < 0:
            return -1
        back = at - 1
        while back > i and data[back] == 0x5C:  # a backslash
            back -= 1
        if (at - 1 - back) % 2 == 0:
            return at + 1
        p = at + 1


RUN_DIGITS = 309  # (_json.h) DBL_MAX has 309 digits: a number of fewer cannot overflow without an exponent
_DIGITS = frozenset(b"0123456789")
_ODD = frozenset(b"NIE")


class _Odd:
    """(_json.h `Oddities`) Whether a walk met, outside strings, a value `parse` may refuse: 'N', 'I'
    or 'E' (NaN, Infinity), an 'e' after a digit (an exponent) or a run of RUN_DIGITS digits."""

    __slots__ = ("odd", "run")

    def __init__(self) -> None:
        self.odd = False
        self.run = 0  # the digits just before the byte looked at

    def see(self, c: int) -> None:
        if c in _DIGITS:
            self.run += 1
            if self.run >= RUN_DIGITS:
                self.odd = True
            return
        if c in _ODD or (c == 0x65 and self.run > 0):  # e
            self.odd = True
        self.run = 0


def _value_end(data: bytes, i: int, odd: _Odd | None = None) -> int:
    n = len(data)
    if i >= n:
        return -1
    c = data[i]
    if c == 0x22:  # "
        return _string_end(data, i)
    if odd is not None:
        odd.run = 0
    if c in b"{[":
        depth = 0
        while i < n:
            c = data[i]
            if c == 0x22:
                i = _string_end(data, i)
                if i < 0:
                    return -1
                if odd is not None:
                    odd.run = 0
                continue
            if odd is not None:
                odd.see(c)
            if c in b"{[":
                depth += 1
            elif c in b"}]":
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
        return -1
    start = i
    while i < n and data[i] not in _DELIMITERS:
        if odd is not None:
            odd.see(data[i])
        i += 1
    return i if i > start else -1


def py_fields(data: bytes | memoryview, start: int, keys: tuple[bytes, ...]) -> tuple[int, ...] | None:
    """The C extension's `fields`, in Python (see _skim.c)."""
    data = bytes(data)
    spans = [-1] * (2 * len(keys))
    n = len(data)
    i = _blanks(data, start) if start >= 0 else n
    if i >= n or data[i] != 0x7B:  # {
        return None
    i = _blanks(data, i + 1)
    if i < n and data[i] == 0x7D:
        return (*spans, i + 1)
    while i < n and data[i] == 0x22:
        key_end = _string_end(data, i)
        if key_end < 0 or b"\\" in data[i + 1:key_end - 1]:
            return None
        name = data[i + 1:key_end - 1]
        i = _blanks(data, key_end)
        if i >= n or data[i] != 0x3A:  # :
            return None
        i = _blanks(data, i + 1)
        value_start, stop = i, _value_end(data, i)
        if stop < 0:
            return None
        for k, key in enumerate(keys):
            if key == name:
                spans[2 * k], spans[2 * k + 1] = value_start, stop
        i = _blanks(data, stop)
        if i < n and data[i] == 0x2C:  # ,
            i = _blanks(data, i + 1)
            continue
        if i < n and data[i] == 0x7D:
            return (*spans, i + 1)
        return None
    return None


def _elements(data: bytes | memoryview, start: int) -> tuple[int, ...] | None:
    """The start and end offsets of each element of the array at `start`; None when there is none."""
    data = bytes(data)
    out: list[int] = []
    n = len(data)
    i = _blanks(data, start) if start >= 0 else n
    if i >= n or data[i] != 0x5B:  # [
        return None
    i = _blanks(data, i + 1)
    if i < n and data[i] == 0x5D:
        return ()
    while i < n:
        stop = _value_end(data, i)
        if stop < 0:
            return None
        out += (i, stop)
        i = _blanks(data, stop)
        if i < n and data[i] == 0x2C:
            i = _blanks(data, i + 1)
            continue
        if i < n and data[i] == 0x5D:
            return tuple(out)
        return None
    return None


def py_kinds(data: bytes | memoryview, start: int, end: int) -> list[Any] | None:
    """The C extension's `kinds`, in Python (see _skim.c)."""
    data = bytes(data)[:end]
    found = _elements(data, start)
    if found is None:
        return None
    out = []
    for k in range(0, len(found), 2):
        typed = py_values(data, found[k], found[k + 1], (b"type",))
        out.append(typed[0] if typed is not None else None)
    return out


def value(data: bytes, base: int, found: tuple[int, ...], n: int) -> Any:
    """The value of the `n`-th skimmed key (offsets from `base`), decoded; None when absent or not
    JSON. A plain string, true, false and null are read without the JSON parser."""
    start, end = found[2 * n], found[2 * n + 1]
    if start < 0:
        return None
    start, end = start + base, end + base
    first = data[start]
    if first == 0x22 and data.find(b"\\", start, end) < 0:  # a string without escapes
        return data[start + 1:end - 1].decode("utf-8", "replace")
    if end - start <= 5:
        word = data[start:end]
        if word in _WORDS:
            return _WORDS[word]
    from ctxd.agents.jsonl import parse

    rec = parse('{"v":' + data[start:end].decode("utf-8", "replace") + "}")
    return rec.get("v") if rec is not None else None


_WORDS: dict[bytes, Any] = {b"true": True, b"false": False, b"null": None}


def _plain(data: bytes, start: int, end: int) -> Any:
    if start < 0:
        return None
    text = data[start:end]
    if text[:1] == b'"' and b"\\" not in text:
        return text[1:-1].decode("utf-8", "replace")
    if text in _WORDS:
        return _WORDS[text]
    if len(text) <= 18 and (text.isdigit() or (text[:1] == b"-" and text[1:].isdigit())):
        digits = text.lstrip(b"-")
        if digits and not (digits[:1] == b"0" and len(digits) > 1):
            return int(text)
    return (start, end)


def py_values(data: bytes | memoryview, start: int, end: int, keys: tuple[bytes, ...]) -> tuple[Any, ...] | None:
    """The C extension's `values`, in Python (see _skim.c)."""
    data = bytes(data)[:end]
    found = py_fields(data, start, keys)
    if found is None:
        return None
    return tuple(_plain(data, found[2 * k], found[2 * k + 1]) for k in range(len(keys)))


def decode(data: bytes, found: Any) -> Any:
    """A value `values` gave: as it is, or decoded from its offsets (None when it is not JSON)."""
    if not isinstance(found, tuple):
        return found
    from ctxd.agents.jsonl import parse

    rec = parse('{"v":' + data[found[0]:found[1]].decode("utf-8", "replace") + "}")
    return rec.get("v") if rec is not None else None


def _find_key(line: bytes, i: int, key: bytes) -> tuple[int, int] | None:
    """The C extension's `find_key`: the span of the top-level `key`'s value (its last one), or None."""
    n = len(line)
    i = _blanks(line, i)
    if i >= n or line[i] != 0x7B:
        return None
    i = _blanks(line, i + 1)
    found = None
    while i < n and line[i] == 0x22:
        key_end = _string_end(line, i)
        if key_end < 0:
            return None
        match = line[i + 1:key_end - 1] == key
        i = _blanks(line, key_end)
        if i >= n or line[i] != 0x3A:
            return None
        i = _blanks(line, i + 1)
        stop = _value_end(line, i)
        if stop < 0:
            return None
        if match:
            found = (i, stop)
        i = _blanks(line, stop)
        if i < n and line[i] == 0x2C:
            i = _blanks(line, i + 1)
            continue
        return found if i < n and line[i] == 0x7D else None
    return None


def _wanted(line: bytes, key: bytes, skip: tuple[bytes, ...], needles: tuple[bytes, ...]) -> bool:
    """The C extension's `wanted`: whether a reader looks at the line."""
    first = _blanks(line, 0)
    if first >= len(line):
        return False
    found = _find_key(line, first, key)
    return found is None or line[found[0]:found[1]] not in skip or any(needle in line for needle in needles)


def py_lines(data: bytes | memoryview, start: int, end: int, key: bytes, skip: tuple[bytes, ...],
             needles: tuple[bytes, ...]) -> list[int]:
    """The C extension's `lines`, in Python (see _skim.c)."""
    data = bytes(data)
    out: list[int] = []
    end = min(end, len(data))
    i = max(0, start)
    while i < end:
        stop = data.find(b"\n", i, end)
        if stop < 0:
            stop = end
        if _wanted(data[i:stop], key, skip, needles):
            out += (i, stop)
        i = stop + 1
    return out


_NOT_PLAIN = object()
PLAIN_DEPTH = 20  # (_skim.c) a container nested deeper is given as its span
PLAIN_BYTES = 65_536  # what a reader lets `scan` build of a container (a usage, a prompt), at most


def _walk(line: bytes, i: int, paths: tuple[tuple[bytes, ...], ...], active: list[int], level: int,
          spans: list[int], odd: _Odd | None = None) -> int:
    """The C extension's `walk` (see _skim.c): where the active paths' values are in the object at `i`."""
    n = len(line)
    i = _blanks(line, i)
    if i >= n or line[i] != 0x7B:  # {
        return -1
    i = _blanks(line, i + 1)
    if i < n and line[i] == 0x7D:
        return i + 1
    while i < n and line[i] == 0x22:
        key_end = _string_end(line, i)
        if key_end < 0 or b"\\" in line[i + 1:key_end - 1]:
            return -1
        name = line[i + 1:key_end - 1]
        i = _blanks(line, key_end)
        if i >= n or line[i] != 0x3A:  # :
            return -1
        i = _blanks(line, i + 1)
        matched = [k for k in active if paths[k][level] == name]
        leaves = [k for k in matched if len(paths[k]) == level + 1]
        inner = [k for k in matched if len(paths[k]) > level + 1]
        if inner:
            for k in inner:
                spans[2 * k] = spans[2 * k + 1] = -1
            stop = _walk(line, i, paths, inner, level + 1, spans, odd) if line[i:i + 1] == b"{" else _value_end(
                line, i, odd)
        else:
            stop = _value_end(line, i, odd)
        if stop < 0:
            return -1
        for k in leaves:
            spans[2 * k], spans[2 * k + 1] = i, stop
        i = _blanks(line, stop)
        if i < n and line[i] == 0x2C:  # ,
            i = _blanks(line, i + 1)
            continue
        return i + 1 if i < n and line[i] == 0x7D else -1
    return -1


def _plain_value(data: bytes, i: int, depth: int) -> tuple[Any, int]:
    """The C extension's `plain_value`: the value at `i` and the offset after it, or _NOT_PLAIN."""
    n = len(data)
    i = _blanks(data, i)
    if i >= n:
        return _NOT_PLAIN, i
    c = data[i]
    if c == 0x22:
        j = i + 1
        while j < n and data[j] != 0x22:
            if data[j] == 0x5C or data[j] < 0x20:
                return _NOT_PLAIN, i
            j += 1
        if j >= n:
            return _NOT_PLAIN, i
        return data[i + 1:j].decode("utf-8", "replace"), j + 1
    if c in b"{[":
        if depth >= PLAIN_DEPTH:
            return _NOT_PLAIN, i
        close = 0x7D if c == 0x7B else 0x5D
        out: Any = {} if c == 0x7B else []
        i = _blanks(data, i + 1)
        if i < n and data[i] == close:
            return out, i + 1
        while True:
            key: Any = None
            if c == 0x7B:
                if i >= n or data[i] != 0x22:
                    return _NOT_PLAIN, i
                key, i = _plain_value(data, i, depth + 1)
                if key is _NOT_PLAIN:
                    return _NOT_PLAIN, i
                i = _blanks(data, i)
                if i >= n or data[i] != 0x3A:
                    return _NOT_PLAIN, i
                i += 1
            item, i = _plain_value(data, i, depth + 1)
            if item is _NOT_PLAIN:
                return _NOT_PLAIN, i
            if c == 0x7B:
                out[key] = item
            else:
                out.append(item)
            i = _blanks(data, i)
            if i < n and data[i] == 0x2C:
                i = _blanks(data, i + 1)
                continue
            if i < n and data[i] == close:
                return out, i + 1
            return _NOT_PLAIN, i
    j = i
    while j < n and data[j] not in _DELIMITERS:
        j += 1
    word = _plain(data, i, j) if j > i else (i, j)
    return (_NOT_PLAIN, i) if isinstance(word, tuple) else (word, j)


def _path_value(line: bytes, base: int, start: int, end: int, limit: int) -> Any:
    if start < 0:
        return None
    if line[start] in b"{[" and end - start <= limit:
        value, stop = _plain_value(line[:end], start, 0)
        if value is not _NOT_PLAIN and stop == end:
            return value
    found = _plain(line, start, end)
    return (found[0] + base, found[1] + base) if isinstance(found, tuple) else found


def py_scan(data: bytes | memoryview, start: int, end: int, key: bytes, skip: tuple[bytes, ...],
            needles: tuple[bytes, ...], paths: tuple[tuple[bytes, ...], ...],
            limits: tuple[int, ...], marks: tuple[tuple[tuple[bytes, ...], tuple[bytes, ...]], ...] = ()
            ) -> tuple[int, list[tuple[Any, ...]]]:
    """The C extension's `scan`, in Python (see _skim.c)."""
    data = bytes(data)
    end = min(end, len(data))
    rows: list[tuple[Any, ...]] = []
    newlines = 0
    i = max(0, start)
    walked_paths = (*paths, (key,), *(path for path, _ in marks))
    while i < end:
        stop = data.find(b"\n", i, end)
        if stop < 0:
            stop = end
        else:
            newlines += 1
        line = data[i:stop]
        # The line is walked once, for the paths, `key` and the marks' paths: a line walked is looked
        # at from the values found on the way; any other, as `_wanted` says.
        spans = [-1] * (2 * len(walked_paths))
        odd = _Odd()
        after = _walk(line, 0, walked_paths, list(range(len(walked_paths))), 0, spans, odd)
        # An object followed by more than blanks (two glued by a torn append), or one with an odd value
        # (NaN, 1e999: `_Odd`), is one `parse` may refuse: looked at, and parsed whole.
        whole = after >= 0 and (odd.odd or _blanks(line, after) < len(line))
        walked = after >= 0 and not whole
        if whole:
            look = True
        elif walked:
            at = 2 * len(paths)
            look = spans[at] < 0 or line[spans[at]:spans[at + 1]] not in skip or any(
                spans[at + 2 + 2 * m] >= 0 and line[spans[at + 2 + 2 * m]:spans[at + 3 + 2 * m]] in texts
                for m, (_, texts) in enumerate(marks))
        else:
            look = _wanted(line, key, skip, needles)
        if look:
            if not walked:
                rows.append((i, stop))
            else:
                rows.append((i, stop, *(_path_value(line, i, spans[2 * k], spans[2 * k + 1], limits[k])
                                        for k in range(len(paths)))))
        i = stop + 1
    return newlines, rows


fields: Callable[[bytes | memoryview, int, tuple[bytes, ...]], tuple[int, ...] | None]
kinds: Callable[[bytes | memoryview, int, int], list[Any] | None]
lines: Callable[[bytes | memoryview, int, int, bytes, tuple[bytes, ...], tuple[bytes, ...]], list[int]]
values: Callable[[bytes | memoryview, int, int, tuple[bytes, ...]], tuple[Any, ...] | None]
scan: Callable[[bytes | memoryview, int, int, bytes, tuple[bytes, ...], tuple[bytes, ...],
                tuple[tuple[bytes, ...], ...], tuple[int, ...], tuple[tuple[tuple[bytes, ...], tuple[bytes, ...]], ...]],
               tuple[int, list[tuple[Any, ...]]]]
try:
    from ctxd.agents._skim import fields, kinds, lines, scan, values
    NATIVE = True
except ImportError:  # no compiler at install: the same answers, in Python
    fields, kinds, lines, values, scan = py_fields, py_kinds, py_lines, py_values, py_scan
    NATIVE = False
