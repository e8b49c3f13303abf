"""ctxd.leanjson reads and writes what the `json` package does: the hooks' way to the owner uses it
(hookio, ownerlink, redact) and the owner answers with it, so a difference would be a hook input
misread or a message the other side refuses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ctxd import leanjson

VALUES = [
    '{"a":1}',
    ' [1, 2.5, -3e10, 1E400, true, false, null, "x\\u00e9\\ud83d\\ude00"] ',
    '{"n": NaN, "i": Infinity, "m": -Infinity}',
    "12345678901234567890123456789",
    '"\\ud800 a lone surrogate"',
    '{"a": {"b": [{}, [], ""]}}',
    '  \n{"k": "v\\n\\t\\"\\\\"}\r\n\n',
    '{"dup": 1, "dup": 2}',
    '{"tool_input": {"command": "printf \'\\u001b[31m\'", "file_path": "/tmp/\\u202e.txt"}}',
    '"' + "é" * 1000 + '"',
]

NOT_JSON = ["", " ", "{", '{"a":1} x', "[1,]", '{"a" 1}', "nan", '"\x01"', '{"a":1}{}', "\ufeff{}", "[" * 100_000]


@pytest.mark.parametrize("text", VALUES)
def test_it_reads_and_writes_as_json_does(text: str) -> None:
    value = leanjson.loads(text)
    assert repr(value) == repr(json.loads(text))
    assert repr(leanjson.loads(text.encode())) == repr(value)
    assert leanjson.dumps(value) == json.dumps(value, separators=(",", ":"))
    assert leanjson.dumps(value, ascii_only=False) == json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@pytest.mark.parametrize("text", NOT_JSON)
def test_what_is_not_one_json_value_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        leanjson.loads(text)


def test_bytes_that_are_not_utf8_are_refused_and_strings_quote_as_json_dumps() -> None:
    with pytest.raises(ValueError):
        leanjson.loads(b'{"a": "\xff"}')
    for text in ["a\"é\n\x00\u2028", "\U0001f600", "\ud800"]:
        assert leanjson.quoted(text) == json.dumps(text)
        assert leanjson.quoted(text, ascii_only=False) == json.dumps(text, ensure_ascii=False)


def test_what_json_cannot_write_it_refuses_as_json_does() -> None:
    with pytest.raises(TypeError):
        leanjson.dumps({"a": object()})
    looped: list[object] = []
    looped.append(looped)
    with pytest.raises(ValueError):
        leanjson.dumps(looped)
    assert leanjson.dumps({"after": "a refusal"}) == '{"after":"a refusal"}'  # (the circular check is per call)


def test_importing_it_imports_neither_json_nor_re() -> None:
    """What it is for: a hook pays for `re` and `enum` otherwise (`-S`: not this checkout's
    development install, whose start-up imports its own)."""
    done = subprocess.run([sys.executable, "-S", "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                           "from ctxd import leanjson; leanjson.dumps(leanjson.loads('{\"a\": [1]}')); "
                           "print(sorted({'json', 're', 'enum'} & set(sys.modules)))",
                           str(Path(leanjson.__file__).parents[1])],
                          capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
