"""The folded CRC-32 (ctxd/agents/_crc32.c): the values zlib.crc32 gives, which a session reader's saved
position holds (a file rewritten in place is read again, never taken up), on every length and split."""

from __future__ import annotations

import random
import zlib

import pytest

from ctxd.agents import jsonl

try:
    from ctxd.agents._crc32 import WIDE, crc32
except ImportError as error:  # no compiler at install, or a CPU without carry-less multiplies
    pytest.skip(f"the folded CRC-32 is not built or cannot run here ({error}); zlib.crc32 is used",
                allow_module_level=True)


def test_it_gives_zlibs_values_on_every_length_and_start_value() -> None:
    """Every length up to five of the wide fold's blocks (256 bytes, where the CPU has it: `WIDE`),
    the narrow one's (64) below 256 and after the wide blocks, and longer ones."""
    chance = random.Random(38)
    for length in [*range(0, 1300), *(chance.randrange(1300, 1 << 20) for _ in range(60))]:
        data = chance.randbytes(length)
        start = chance.randrange(1 << 32)
        assert crc32(data) == zlib.crc32(data), length
        assert crc32(data, start) == zlib.crc32(data, start), (length, start)


def test_a_crc_carried_over_a_split_is_the_whole_ones() -> None:
    chance = random.Random(7)
    data = chance.randbytes(300_000)
    for _ in range(200):
        cut = chance.randrange(len(data) + 1)
        assert crc32(memoryview(data)[cut:], crc32(data[:cut])) == zlib.crc32(data)


def test_the_readers_use_it() -> None:
    assert jsonl.crc32 is crc32
    assert isinstance(WIDE, bool)
