"""The skimmer (ctxd/agents/_skim.c and its Python twins in ctxd/agents/skim.py, issue #38): `scan`
gives the lines a summary reader looks at with the values at its key paths.
The C extension and the Python fallback answer the same, on JSON and on hostile lines (cut short,
escaped keys, huge numbers, control characters, bytes that are not UTF-8); a summary read with
the fallback is the one read with the extension.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxd.agents import skim
from ctxd.agents.claude import ClaudeReader
from ctxd.agents.codex import CodexReader
from ctxd.sessions import summaries
from tests.test_summaries import fixture_files

native = pytest.mark.skipif(not skim.NATIVE, reason="the C extension is not built here (setup.py: no compiler)")

PATHS = ((b"type",), (b"payload",), (b"payload", b"type"), (b"payload", b"info"), (b"payload", b"info", b"n"),
         (b"message", b"usage"), (b"w",), (b"v",))
SPANS = (0,) * len(PATHS)  # containers given as their offsets
BUILT = (0, 0, 1 << 20, 1 << 20, 1 << 20, 16, 1 << 20, 1 << 20)  # built when plain (usage: when small)
READERS = ((b"type", CodexReader.skip_types, (b'"token_count"',)), (b"type", ClaudeReader.skip_types, ()),
           (b"type", (), ()), (b"kind", (b'"x"', b"1"), (b"k",)))
# What a line passed over by its key is still looked at for: a value at a path (Codex's `MARKS`, and
# paths into values of any kind).
MARKS = (CodexReader("x", summary=True).marks() + (((b"payload", b"info", b"n"), (b"1", b'"a"', b"null")),
                                                   ((b"w",), (b"[]", b"{}"))), ())

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-10**30, max_value=10**30) | st.floats(allow_nan=False)
    | st.text(st.characters(codec="utf-8"), max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["type", "info", "n", "k", "usage", "x"]),
                                                                 inner, max_size=4),
    max_leaves=16)
# What a hostile file puts in a line: a raw control character, bytes that are not UTF-8, an escaped
# quote or key, a number past 18 digits or past a float, a duplicate key, a line cut anywhere.
NOISE = [b"\x01", b"\t", b"\xff\xfe", b"\xe2\x82", b'\\"', b'"\\u0074ype"', b"123456789012345678901234567890",
         b"1e999", b"-0", b"01", b"NaN", b'"type":"dup",', b"{", b"]", b"\\", b" "]


def lines_of(value: Any, kind: str, noise: list[tuple[int, int]], cuts: list[int]) -> bytes:
    """Lines around `value` (as a payload, a message's usage and plain values), spoiled by `noise`
    (where, which) and cut at `cuts`."""
    records = [{"type": kind, "payload": {"type": "token_count", "info": value}, "w": [value, {"k": value}]},
               {"kind": "x", "message": {"usage": value, "id": "m"}, "v": value, "type": kind},
               {"type": "response_item", "payload": value, "x": "token_count"}]
    out = []
    for n, record in enumerate(records):
        line = json.dumps(record, ensure_ascii=n % 2 == 0).encode()
        for at, which in noise:
            at %= len(line) + 1
            line = line[:at] + NOISE[which % len(NOISE)] + line[at:]
        out.append(line[:cuts[n] % (len(line) + 1)] if n < len(cuts) else line)
    return b"\n".join(out) + b"\n\n  \n" + out[0]  # a blank line, and a last one without its newline


@native
@settings(max_examples=400, deadline=None)
@given(json_values, st.sampled_from(["event_msg", "user", "progress", "x"]),
       st.lists(st.tuples(st.integers(0, 400), st.integers(0, 100)), max_size=3),
       st.lists(st.integers(0, 400), max_size=2))
def test_scan_and_its_python_twin_agree(value: Any, kind: str, noise: list[tuple[int, int]], cuts: list[int]) -> None:
    data = lines_of(value, kind, noise, cuts)
    for key, skip, needles in READERS:
        for limits, marks in ((SPANS, MARKS[0]), (BUILT, MARKS[1]), (BUILT, MARKS[0])):
            assert skim.scan(data, 0, len(data), key, skip, needles, PATHS, limits, marks) == skim.py_scan(
                data, 0, len(data), key, skip, needles, PATHS, limits, marks)
        assert skim.lines(data, 0, len(data), key, skip, needles) == skim.py_lines(data, 0, len(data), key, skip,
                                                                                   needles)
    start = data.find(b"\n") + 1  # from inside the data, to a cut short of its end
    assert skim.scan(data, start, len(data) - 3, b"type", (), (), PATHS, BUILT) == skim.py_scan(
        data, start, len(data) - 3, b"type", (), (), PATHS, BUILT)


@native
@pytest.mark.parametrize("needles", [
    (b'"token_count"', b'"user_message"', b'"UserMessage"', b'"task_started"', b'"role":"user"', b'"role": "user"'),
    (b'"a', b'"b', b'"c', b'"d', b'"e'),  # more second bytes than one pass looks for
    (b'"t', b"xt"),  # not one first byte
    (b'"',), (b"ab",), ()], ids=["codex", "five", "mixed", "quote", "plain", "none"])
def test_a_line_holding_a_needle_is_looked_at(needles: tuple[bytes, ...]) -> None:
    """A line passed over by its type is looked at when it holds one of the needles, wherever (the
    C extension's one pass over the line, 16 bytes at a time, finds what memmem finds)."""
    rng = random.Random(38)
    alphabet = b'"tuUrkabcde\\ x:{}[],'
    for _ in range(3000):
        line = b'{"type":"s","v":"' + bytes(rng.choice(alphabet) for _ in range(rng.randrange(60))) + b'"}'
        if rng.random() < 0.3:
            line += b'"token_count"'[:rng.randrange(14)]
        data = line + b"\n" + line[:rng.randrange(len(line) + 1)]
        assert skim.lines(data, 0, len(data), b"type", (b'"s"',), needles) == skim.py_lines(
            data, 0, len(data), b"type", (b'"s"',), needles), data


@native
def test_long_lines_of_quotes_backslashes_and_braces_answer_as_the_python_twin() -> None:
    """Runs of backslashes before quotes, braces inside strings, and text that is not JSON (a
    backslash outside a string, a line cut anywhere), in lines of up to a few KB: the C extension
    reads them as the bytewise Python twin does."""
    rng = random.Random(64)
    alphabet = '\\"{}[]a:, '

    def text() -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randrange(150)))

    def nested(depth: int) -> Any:
        if depth == 0 or rng.random() < 0.3:
            return text()
        if rng.random() < 0.5:
            return [nested(depth - 1) for _ in range(rng.randrange(4))]
        return {text()[:5]: nested(depth - 1) for _ in range(rng.randrange(4))}

    keys = (b"type", b"v", b"w")
    paths = ((b"type",), (b"v",), (b"w",), (b"w", b"a"))
    for n in range(4000):
        line = json.dumps({"type": "t", "v": nested(4), "w": {"a": text()}}).encode()
        if n % 3 == 1:  # not JSON: bytes of the alphabet spliced in (a backslash outside a string)
            at = rng.randrange(len(line) + 1)
            line = line[:at] + text().encode() + line[at:]
        elif n % 3 == 2:
            line = line[:rng.randrange(len(line) + 1)]
        assert skim.fields(line, 0, keys) == skim.py_fields(line, 0, keys), line
        assert skim.values(line, 0, len(line), keys) == skim.py_values(line, 0, len(line), keys), line
        found = skim.py_fields(line, 0, keys)
        if found is not None and found[2] >= 0:
            assert skim.kinds(line, found[2], found[3]) == skim.py_kinds(line, found[2], found[3]), line
        data = line + b"\n" + line
        for limits in ((0, 0, 0, 0), (0, 1 << 20, 1 << 20, 1 << 20)):
            assert skim.scan(data, 0, len(data), b"type", (b'"s"',), (), paths, limits) == skim.py_scan(
                data, 0, len(data), b"type", (b'"s"',), (), paths, limits), line


@native
@pytest.mark.parametrize("piece", [b'\\"', b'\\\\"', b'\\\\\\"', b'"', b'\\', b"{", b"]", b'"}', b'\\"}'],
                         ids=["escaped-quote", "escaped-backslash", "three", "quote", "backslash", "open", "close",
                              "quote-close", "escaped-close"])
def test_a_container_read_64_bytes_at_a_time_ends_where_the_bytewise_walk_ends(piece: bytes) -> None:
    """The C extension passes over a container a block of 64 bytes at a time (_json.h `container_end`):
    an escape, a quote or a bracket at every offset across two block edges, inside a string and
    outside one (where a backslash is any other byte), ends each container where the bytewise
    Python twin ends it."""
    keys = (b"type", b"v", b"w")
    for offset in range(140):
        for inside in (b'"' + b"a" * offset + piece + b'x"', b"a" * offset + piece):
            for value in (b"[" + inside + b"]", b'{"k":[' + inside + b'],"j":{"s":"' + b"b" * offset + b'"}}'):
                line = b'{"type":"t","v":' + value + b',"w":1}'
                assert skim.fields(line, 0, keys) == skim.py_fields(line, 0, keys), line
                data = line + b"\n" + line[:len(line) - 1]
                assert skim.scan(data, 0, len(data), b"type", (), (), ((b"v",), (b"w",)), (0, 0)) == skim.py_scan(
                    data, 0, len(data), b"type", (), (), ((b"v",), (b"w",)), (0, 0)), line


@native
@pytest.mark.parametrize("odd", [b"NaN", b"-Infinity", b"1e999", b"2E3", b"1.5e-7", b"9" * 309 + b".5", b"9" * 309,
                                 b"9" * 308, b"true", b"1.5", b'"NaN 1e999"'],
                         ids=["nan", "infinity", "exponent", "upper-exponent", "small", "long-float", "long-int",
                              "shorter", "true", "float", "in-a-string"])
def test_a_line_parse_may_refuse_is_left_to_it_as_by_the_python_twin(odd: bytes) -> None:
    """A number JSON has not (NaN, Infinity) or one that may not fit a double (an exponent, a run of 309
    digits), outside strings, at every offset across the skimmer's block edges, in a container or a
    walked field, and an object glued to another: the line is looked at and left to `parse` (no values),
    by the C extension as by its Python twin; anything else is skimmed."""
    paths, limits = ((b"v",), (b"w",)), (0, 1 << 20)
    for offset in range(0, 140, 3):
        pad = b'"' + b"a" * offset + b'"'
        for value in (b"[" + pad + b"," + odd + b"]", b'{"k":[' + pad + b',{"n":' + odd + b'}],"j":1}', odd,
                      b"[" + b" " * offset + odd + b"]"):
            for line in (b'{"type":"skip","v":' + value + b',"w":{"x":1}}', b'{"type":"skip","w":{"x":' + value + b"}}"):
                for data in (line, line + b'{"type":"skip"}', line + b"  "):
                    found = skim.scan(data, 0, len(data), b"type", (b'"skip"',), (), paths, limits)
                    assert found == skim.py_scan(data, 0, len(data), b"type", (b'"skip"',), (), paths, limits), data
                    refusable = odd not in (b"9" * 308, b"true", b"1.5", b'"NaN 1e999"') or data != line and not data.endswith(b" ")
                    assert found == (0, [(0, len(data))] if refusable else []), data


@settings(max_examples=300, deadline=None)
@given(json_values, st.lists(st.tuples(st.integers(0, 400), st.integers(0, 100)), max_size=2))
def test_a_container_scan_builds_is_the_one_json_builds(value: Any, noise: list[tuple[int, int]]) -> None:
    """A container built by `scan` is what the JSON parser makes of its text (`skim.decode` of its
    offsets): else it is given as its offsets."""
    data = lines_of(value, "event_msg", noise, [])
    built = skim.scan(data, 0, len(data), b"type", (), (), PATHS, BUILT)
    spans = skim.scan(data, 0, len(data), b"type", (), (), PATHS, SPANS)
    assert built[0] == spans[0] == data.count(b"\n")
    for row, span_row in zip(built[1], spans[1]):
        assert row[:2] == span_row[:2]
        for got, span in zip(row[2:], span_row[2:]):
            if isinstance(got, (dict, list)):
                assert got == skim.decode(data, span) and json.dumps(got) == json.dumps(skim.decode(data, span))
            else:
                assert got == span


@pytest.mark.parametrize("scan", [skim.scan, skim.py_scan], ids=["c", "python"])
def test_scan_on_hostile_lines(scan: Any) -> None:
    """Each line as a reader must take it: the values, or only its offsets (parsed whole) when it is
    not an object to skim; a number, a string or a container that is not plain is given as its
    offsets, for the JSON parser."""
    paths = ((b"type",), (b"a",), (b"p",), (b"p", b"q"), (b"p", b"r"))
    limits = (0, 1 << 20, 0, 1 << 20, 1 << 20)
    lines = [
        b'{"type":"t","a":12345678901234567890,"p":{"q":[1,"x",{"y":null}],"r":"\\u00e9"}}',  # huge number, escape
        b'{"type":"t","a":{"b":"\x01"},"p":{"q":{"s":1.5},"r":"\xff\xfe"}}',  # control character, float, not UTF-8
        b'{"type":"t","p":{"q":1},"p":"again"}',  # a repeated key: the last one's values only
        b'{"type":"t","a":1,"p":{"q":1}',  # cut short
        b'{"ty\\"pe":"t"}',  # an escaped key: parsed whole
        b'{"type":"skip","a":1}',  # passed over
        b'  {"type" : "t" , "a" : [ 1 , 2 ] , "p" : { "q" : { } , "r" : true } }  ',
        b'[1,2]',
        b'',
        b'{"type":"t","a":' + b"[" * 30 + b"]" * 30 + b"}",  # nested deeper than PLAIN_DEPTH
    ]
    data = b"\n".join(lines)
    starts = [sum(len(line) + 1 for line in lines[:n]) for n in range(len(lines))]
    newlines, rows = scan(data, 0, len(data), b"type", (b'"skip"',), (), paths, limits)
    assert newlines == len(lines) - 1
    by_start = {row[0]: row for row in rows}
    assert sorted(by_start) == [starts[n] for n in (0, 1, 2, 3, 4, 6, 7, 9)]  # not the skipped, not the blank
    huge = by_start[starts[0]]
    assert huge[2] == "t" and skim.decode(data, huge[3]) == 12345678901234567890
    assert huge[5] == [1, "x", {"y": None}] and skim.decode(data, huge[6]) == "é"
    spoiled = by_start[starts[1]]
    assert isinstance(spoiled[3], tuple) and skim.decode(data, spoiled[3]) is None  # json refuses the control character
    assert isinstance(spoiled[5], tuple) and skim.decode(data, spoiled[5]) == {"s": 1.5}
    assert spoiled[6] == "\ufffd\ufffd"
    assert by_start[starts[2]][4:] == ("again", None, None)
    assert [len(by_start[starts[n]]) for n in (3, 4, 7)] == [2, 2, 2]  # only the offsets: parsed whole
    spaced = by_start[starts[6]]
    assert spaced[2:4] == ("t", [1, 2]) and spaced[5:] == ({}, True)
    deep = by_start[starts[9]]
    assert isinstance(deep[3], tuple) and skim.decode(data, deep[3]) == json.loads(b"[" * 30 + b"]" * 30)


def summaries_of(files: list[tuple[str, str]]) -> list[tuple[dict[str, Any], list[dict[str, Any]], str | None]]:
    out = []
    for path, agent in files:
        read = summaries.summarize(path, agent, None, None)
        assert read is not None
        out.append((read.session.to_state(), read.tail, read.stored.state))
    return out


@native
def test_the_python_fallback_summarizes_as_the_extension_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the C extension (no compiler at install), the summaries are the same, to the byte of
    the state they keep."""
    files = fixture_files(tmp_path)
    with_extension = summaries_of(files)
    for name in ("fields", "kinds", "lines", "values", "scan"):
        monkeypatch.setattr(skim, name, getattr(skim, f"py_{name}"))
    assert summaries_of(files) == with_extension
