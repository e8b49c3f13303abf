"""Reading a file that someone else may have planted: a repository's config, an agent's config, a
`.git` pointer, a transcript path handed to a hook; and writing a private file whole.

Such a path may name a FIFO (an open for reading blocks until a writer comes), a device
(`/dev/zero` never ends), or a regular file of gigabytes. `read_bounded` opens without blocking,
checks what it opened (not what the name named a moment before), and reads at most `limit` bytes
plus one, so none of these can hang the caller or grow its memory. No other ctxd import: the
hooks import this on every tool call.
"""

from __future__ import annotations

import errno
import os
import stat

OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)


class FileRefused(OSError):
    """The path is not a regular file, or is larger than the caller's bound: it was not read."""


def read_bounded(path: str | os.PathLike[str], limit: int, *, follow_links: bool = True) -> bytes:
    """The bytes of the regular file at `path`, at most `limit` of them. Raises FileNotFoundError
    when there is none, FileRefused when it is a FIFO, a device, a socket, a folder, a link (with
    `follow_links` False) or over `limit` bytes, and OSError when it cannot be read."""
    flags = OPEN_FLAGS | (0 if follow_links else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as error:
        if not follow_links and error.errno == errno.ELOOP:
            raise FileRefused(f"{os.fspath(path)}: a symbolic link; not read") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FileRefused(f"{os.fspath(path)}: not a regular file; not read")
        if info.st_size > limit:
            raise FileRefused(f"{os.fspath(path)}: {info.st_size} bytes, over the limit of {limit}; not read")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:  # the file may grow after the fstat: never more than limit + 1 bytes
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise FileRefused(f"{os.fspath(path)}: over the limit of {limit} bytes; not read")
    return b"".join(chunks)


def read_text_bounded(path: str | os.PathLike[str], limit: int, *, follow_links: bool = True,
                      errors: str = "strict") -> str:
    """`read_bounded` decoded as UTF-8 (UnicodeDecodeError with the default `errors`)."""
    return read_bounded(path, limit, follow_links=follow_links).decode("utf-8", errors)


def write_whole(path: str | os.PathLike[str], data: bytes) -> None:
    """Write a private file (0600) whole: under a fresh name, never through a link, then renamed
    onto `path`, so that a reader sees the old file or the new one, never half. On a failure the
    fresh file is removed and the error raised."""
    pending = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{os.urandom(8).hex()}.tmp")
    fd = os.open(pending, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(pending, path)
    except BaseException:
        try:
            os.unlink(pending)
        except OSError:
            pass
        raise
