"""The log: to stderr or a file, never stdout (stdout is the protocol), never with an API key."""

from __future__ import annotations

import logging
import os
import re
import stat
import sys
from typing import IO

from ctxd import redact

SECRET_PATTERN = re.compile(r"(sk-[A-Za-z0-9_\-]{8,}|Bearer\s+[A-Za-z0-9_\-\.]{8,})")


class RedactSecrets(logging.Filter):
    """Belt and braces: no API key reaches a log, whatever a message carries."""

    def __init__(self) -> None:
        super().__init__()
        self.values = [v for k, v in os.environ.items() if k.endswith(("_API_KEY", "_TOKEN")) and len(v) >= 8]

    def redact(self, text: str) -> str:
        text = redact.redact(text)  # the configured key's actual value, whatever its shape
        text = SECRET_PATTERN.sub("[redacted]", text)
        for value in self.values:
            text = text.replace(value, "[redacted]")
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = self.redact(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        if record.exc_info:  # a traceback's text can carry a key too (an exception's message)
            record.exc_text = self.redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        return True


def open_private_log(path: str, follow_links: bool = True) -> IO[str]:
    """A log file opened for appending, made 0600 whatever the umask (an existing one of the user's
    closed to others): it quotes what the user and the agents wrote. Without `follow_links`, a
    link in its place is refused (OSError) rather than written through."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    fd = os.open(path, flags, 0o600)
    try:
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) & 0o077:
            os.fchmod(fd, stat.S_IMODE(info.st_mode) & 0o700)
        return open(fd, "a", encoding="utf-8", errors="backslashreplace")
    except BaseException:
        os.close(fd)
        raise


class PrivateFileHandler(logging.FileHandler):
    """A FileHandler whose file is the user's alone (`open_private_log`)."""

    def _open(self) -> IO[str]:  # type: ignore[override]
        return open_private_log(self.baseFilename)


def private_rotating_handler(path: str | os.PathLike[str], max_bytes: int, backups: int) -> logging.Handler:
    """A RotatingFileHandler whose file is the user's alone, never written through a link (the
    owner's log). `logging.handlers` is imported here, not by every command (it imports `socket`,
    `queue` and more: 16 ms of each `ctxd sessions`)."""
    import logging.handlers

    class PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
        def _open(self) -> IO[str]:  # type: ignore[override]
            return open_private_log(self.baseFilename, follow_links=False)

    return PrivateRotatingFileHandler(path, maxBytes=max_bytes, backupCount=backups)


def setup_logging(verbose: bool, log_file: str | None) -> None:
    """Logs go to stderr or a file, never stdout (stdout is the protocol)."""
    handler: logging.Handler = PrivateFileHandler(log_file) if log_file else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactSecrets())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.WARNING)
    logging.getLogger("ctxd").setLevel(logging.DEBUG if verbose else logging.INFO)
    for noisy in ("httpx", "httpcore", "openai", "git", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
