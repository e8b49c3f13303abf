"""Freed memory given back to the system after a huge request (issue #27), and while one is read
(issue #36).

The daemon keeps up to 64 MB of freed memory for its next large answer (`ctxd.heap.keep_freed_memory`),
and glibc returns memory only from the top of its heap: after a request of tens of megabytes, the
memory its items took stayed with the process although nothing used it. A request that large is
rare, so after one is answered the heap is trimmed (`malloc_trim`); answers, however large, are not
affected. The same is done once such a frame is read, every few megabytes of it parsed, and once it
is parsed: the buffers the reading grew (copied as they grew), the body as it is given back and the
decoding's pieces would otherwise stay with the process beside the items' texts and then their
rows, at the request's peak (issue #36). Elsewhere than glibc: nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

BIG_REQUEST_BYTES = 8 * 1024 * 1024


@functools.cache
def _trimmer() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, looked up at the first huge request (not at start-up)."""
    import ctypes

    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


def after_request(size: int) -> None:
    """Give freed memory back after a request of `size` bytes, if it was a huge one."""
    if size >= BIG_REQUEST_BYTES and (trim := _trimmer()) is not None:
        trim(0)


def after_reading(size: int) -> None:
    """Give freed memory back once a frame of `size` bytes was read, or parsed, if it is a huge one
    (and while one is parsed: `bigframe.py` gives its body back as it reads it)."""
    after_request(size)
