"""ctxd.protocol.jsontext writes strict JSON: a value holding a NaN or an infinity is refused (as
`json` refuses it with allow_nan=False), whatever text its strings hold, and everything else is
written as JSON that reads back as the value. Its serializer writes a NaN as the bare word: these
tests put the words "NaN" and "Infinity" in strings too, next to every delimiter."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxd.protocol.jsontext import dumps

WORDS = ["NaN", "-NaN", "Infinity", "-Infinity", ",", ":", "[", "]", "{", "}", '"', "\\", " ", "x", "é"]
TEXTS = st.lists(st.sampled_from(WORDS), max_size=8).map("".join)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), TEXTS,
                    st.floats(allow_nan=True, allow_infinity=True))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(TEXTS, inner, max_size=4)), max_leaves=12)


def strict(value: Any) -> str | None:
    try:
        return json.dumps(value, allow_nan=False)
    except ValueError:
        return None


@settings(max_examples=500, deadline=None, derandomize=True, database=None)
@given(VALUES)
def test_it_refuses_what_strict_json_refuses_and_writes_the_rest_as_json(value: Any) -> None:
    if strict(value) is None:
        with pytest.raises(ValueError):
            dumps(value)
    else:
        assert json.loads(dumps(value)) == json.loads(strict(value) or "")


@pytest.mark.parametrize("value", [math.nan, -math.inf, [math.inf], {"a": math.nan}, [1, {"b": [2, -math.inf]}],
                                   {"NaN": math.nan}, ["NaN", math.inf]])
def test_a_real_nan_or_infinity_is_refused_wherever_it_is(value: Any) -> None:
    with pytest.raises(ValueError):
        dumps(value)


@pytest.mark.parametrize("value", ["NaN", "Infinity", "a,NaN,b", "[NaN]", ":-Infinity}", {"NaN": "isNaN(x)"},
                                   ["Infinity", "NaN"], {"k": "x:NaN,"}])
def test_the_words_in_strings_are_written(value: Any) -> None:
    assert json.loads(dumps(value)) == value
