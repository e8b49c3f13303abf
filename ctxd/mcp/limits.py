"""The bounds of `ctxd mcp`'s tool arguments, declared in each tool's input schema (an agent sees
them) and checked before a tool runs (`protocol.check_arguments`); a value outside them is a tool
error naming the argument. They are the daemon's own (tests/test_mcp.py compares)."""

from __future__ import annotations

MAX_QUERY_CHARS = 100_000  # a log pasted whole: searched by its first words (`ctxd/ledger/search.py`)
ASKED_QUERY_CHARS = 10_000  # `ctxd/recall`'s own bound: a longer query is asked as its first words
MAX_LIMIT = 100  # `ctxd/recall`'s own bound
MAX_SEQ = 2**32 - 1  # a thread's seqs: what the recall index's rowids hold (`search.SEQ_BITS`)
MAX_THREAD_CHARS = 256  # as `ctxd/*` requests' `thread`
MAX_CHECKPOINTS = 1000
MAX_LABEL_CHARS = 10_000  # as `ctxd/ghost/snapshot`'s message
MAX_ID_CHARS = 64  # a snapshot id: a commit id, SHA-1 or SHA-256, in hexadecimal
