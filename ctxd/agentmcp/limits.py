"""The bounds of `ctxd mcp`'s tool arguments, declared in each tool's input schema (an agent sees
them) and checked before a tool runs; a value outside them is a tool error naming the argument."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

MAX_QUERY_CHARS = 100_000  # a log pasted whole: searched by its first words (`ctxd/ledger/search.py`)
MAX_LIMIT = 100  # `ctxd/recall`'s own bound
MAX_SEQ = 2**32 - 1  # a thread's seqs: what the recall index's rowids hold (`search.SEQ_BITS`)
MAX_THREAD_CHARS = 256  # as `ctxd/*` requests' `thread`
MAX_CHECKPOINTS = 1000
MAX_LABEL_CHARS = 10_000  # as `ctxd/ghost/snapshot`'s message
MAX_ID_CHARS = 64  # a snapshot id: a commit id, SHA-1 or SHA-256, in hexadecimal

# The tools' arguments as their input schemas declare them: strict (a string is no number, a
# number no boolean), within the bounds above.
Query = Annotated[str, Field(strict=True, max_length=MAX_QUERY_CHARS)]
Limit = Annotated[int, Field(strict=True, ge=1, le=MAX_LIMIT)]
Scope = Literal["thread", "workspace"]  # (a literal is matched exactly anyway)
Seq = Annotated[int, Field(strict=True, ge=1, le=MAX_SEQ)]
Thread = Annotated[str | None, Field(strict=True, min_length=1, max_length=MAX_THREAD_CHARS)]
Count = Annotated[int, Field(strict=True, ge=1, le=MAX_CHECKPOINTS)]
Label = Annotated[str | None, Field(strict=True, max_length=MAX_LABEL_CHARS)]
SnapshotId = Annotated[str, Field(strict=True, min_length=1, max_length=MAX_ID_CHARS)]
Confirm = Annotated[bool, Field(strict=True)]
