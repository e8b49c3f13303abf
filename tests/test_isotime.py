"""ISO times read one way everywhere (ctxd/isotime.py): a time without a zone is UTC whatever the
machine's zone (the gauge's newest session, `ctxd/threads`' order and a snapshot's time read it as
local time, the cache's expiry as UTC), and what is no time is None, never an exception."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from ctxd import isotime


@pytest.fixture
def new_york() -> Iterator[None]:
    before = os.environ.get("TZ")
    os.environ["TZ"] = "America/New_York"
    time.tzset()
    yield
    if before is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = before
    time.tzset()


def test_a_time_without_a_zone_is_utc_whatever_the_machines_zone(new_york: None) -> None:
    assert time.timezone != 0  # (the zone took)
    assert isotime.seconds("2026-11-26T21:18:51") == isotime.seconds("2026-11-26T21:18:51Z") == 1795727931.0
    assert isotime.seconds("2026-11-26T21:18:51.325Z") == 1795727931.325
    assert isotime.seconds("2026-11-26T22:18:51+01:00") == 1795727931.0


@pytest.mark.parametrize("value", [None, 1795727931, "", "yesterday", "2026-13-01T00:00:00Z", "0001-01-01T00:00:00-14:00x",
                                   "2026-11-26T21:18:51Z" + " " * 60, ["2026-11-26T21:18:51Z"], "\ud800"])
def test_what_is_no_time_is_none(value: object) -> None:
    assert isotime.seconds(value) is None


def test_the_edges_of_what_datetime_holds_are_times() -> None:
    assert isotime.seconds("0001-01-01T00:00:00+14:00") == -62135647200.0
    assert isotime.seconds("9999-12-31T23:59:59-14:00") == 253402351199.0
