"""The log: to stderr or a file, never stdout (stdout is the protocol), never with an API key."""

from __future__ import annotations

import logging
import os
import re
import sys

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


def setup_logging(verbose: bool, log_file: str | None) -> None:
    """Logs go to stderr or a file, never stdout (stdout is the protocol)."""
    handler: logging.Handler = logging.FileHandler(log_file) if log_file else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactSecrets())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.WARNING)
    logging.getLogger("ctxd").setLevel(logging.DEBUG if verbose else logging.INFO)
    for noisy in ("httpx", "httpcore", "openai", "git", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
