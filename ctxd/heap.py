"""How a long or heavy ctxd process asks glibc to keep its freed memory: the daemon (its large
strings), the workers that read a history's sessions (a megabyte a chunk). Elsewhere than glibc:
nothing."""

from __future__ import annotations

# glibc's mallopt parameters.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8
KEEP_FREED_BYTES = 64 * 1024 * 1024
# glibc's heaps ("arenas") for a process's threads: by default up to 8 per core, each keeping what
# its thread freed. Mirroring a heavy history (issue #38) runs the follower, the mirror and the
# request workers at once: at full size the owner peaked at 318 MiB with the default, 278 with two.
ARENAS = 2


def keep_freed_memory() -> None:
    """Let the process reuse the memory of its large blocks. By default glibc maps every block over
    a few megabytes afresh and unmaps it when freed, and gives the top of its heap back as soon as
    it is free, so the JSON of a large prompt (built twice), or each chunk of a session file read,
    is paid in page faults every time, several times the cost of copying it (bench/README.md).
    Blocks up to 32 MB now come from the heap, which keeps up to 64 MB free for the next one
    instead of returning it at once; the threads share ARENAS heaps."""
    import ctypes  # (not imported by the commands that start light: `ctxd usage`, the hooks)

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024)
    mallopt(M_TRIM_THRESHOLD, KEEP_FREED_BYTES)
    mallopt(M_ARENA_MAX, ARENAS)
