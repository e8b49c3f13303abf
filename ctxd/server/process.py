"""What the daemon's process asks of the system: memory kept for its large strings (`ctxd.heap`), fewer
collections, wide pipes, Python children that import nothing from its folder."""

from __future__ import annotations

import gc
import os
import stat

from ctxd.heap import keep_freed_memory
from ctxd.imports import import_shared_modules

# The size asked for the stdio pipes (see `widen_pipes`): Linux lets any user ask up to 1 MB.
PIPE_BYTES = 1024 * 1024
YOUNG_OBJECTS = 10_000  # the objects made between two collections of the youngest (`fewer_collections`)


def daemon_process() -> None:
    """What every daemon process (the owner, one serving alone, `--tcp`) asks at its start, before
    any thread runs."""
    keep_freed_memory()
    fewer_collections()
    safe_python_children()
    import_shared_modules()  # (before the threads that would import them at once)


def fewer_collections() -> None:
    """The collector runs after YOUNG_OBJECTS new objects, not Python's 700: a cold owner collected
    350 times while it listed 3,000 sessions (0.39 s) and 1,500 times over their whole import
    (4.5 s), each pass over the same young survivors (bench/README.md, round thirty-four). The
    garbage a pass finds is the same; it waits a little longer for it."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_OBJECTS, middle, old)


def safe_python_children() -> None:
    """The Python processes the daemon starts import nothing from the folder it runs in. The
    session readers' workers (`ctxd.sessions.summaries.reads`, "spawn") start as `python -c …` in
    the daemon's current folder, which Python puts first on `sys.path`: an editor starts the
    daemon in the workspace, and a repository's `multiprocessing/` folder would run in each
    worker. PYTHONSAFEPATH (Python 3.11+) keeps it off; set here, before any thread starts, so
    that every child inherits it."""
    os.environ["PYTHONSAFEPATH"] = "1"


def widen_pipes() -> None:
    """When stdin and stdout are pipes (a client started with Python's subprocess, Go's os/exec,
    a shell), let a large reply leave in 1 MB pieces instead of Linux's default 64 KB: a large
    prompt then wakes the client sixteen times less often, which matters when the client runs on
    another CPU (`bench/bench_speed.py` prints it beside a plain pipe; bench/README.md). Requests
    get the same room. Editors built on libuv (VS Code,
    Neovim) pass socket pairs, whose buffers are already about 200 KB: nothing to do there, nor
    where pipes cannot be resized (another OS, a lower `/proc/sys/fs/pipe-max-size`)."""
    try:
        import fcntl
    except ImportError:  # Windows
        return
    set_size = getattr(fcntl, "F_SETPIPE_SZ", None)
    if set_size is None:
        return
    for fd in (0, 1):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                fcntl.fcntl(fd, set_size, PIPE_BYTES)
        except OSError:
            pass
