"""How an item's JSON is kept in `items.body` (issue #38): the one place that writes and reads it.

A body of at least COMPRESS_FROM characters is stored as a zlib (level 1) BLOB when that is
smaller; a shorter one stays TEXT, so the hot paths (a one-item `ctxd/record`, `ctxd/usage`) pay
nothing. SQLite keeps each value's storage class, so a reader tells them apart by type: `bytes`
is compressed, `str` is the JSON itself. Ledgers written before hold TEXT only, which stays valid.
A ledger that may hold BLOBs is schema version 2 (store.py), which an older ctxd refuses.

Every SQL statement that needs an item's text reads it through `decode` in Python: SQL's own
`instr`, `substr` or `=` on `body` would see the compressed bytes.
"""

from __future__ import annotations

import zlib

# Shorter bodies stay TEXT: in the heavy history of `bench/bench_heavy.py` they are 59% of the
# items but 10% of the JSON, and compress least (to 77%); from 512 characters on, the state dir
# is 0.197x its input, from 1024 0.2025x (`bench/README.md`, issue #38, round four).
COMPRESS_FROM = 512
LEVEL = 1  # zlib's fastest: most of level 6's gain on JSON, at a fraction of its time


class DamagedBody(Exception):
    """A stored BLOB that does not decompress to UTF-8 text: the store turns it into its 1003
    error naming the file (`Store._guard`)."""


def encode(body: str) -> str | bytes:
    """What to store for an item's JSON text."""
    if len(body) < COMPRESS_FROM:
        return body
    raw = body.encode("utf-8")
    packed = zlib.compress(raw, LEVEL)
    return packed if len(packed) < len(raw) else body


def decode(stored: str | bytes) -> str:
    """An item's JSON text from what `encode` stored (or a ledger written before: TEXT)."""
    if isinstance(stored, str):
        return stored
    try:
        return zlib.decompress(stored).decode("utf-8")
    except (zlib.error, UnicodeDecodeError, TypeError) as error:
        raise DamagedBody(f"a stored item's compressed JSON cannot be read ({error})") from None
