"""Calling a model endpoint robustly: classification, bounded backoff, cancellation.

Compactions happen when a thread is full, which is when a flaky endpoint hurts most, so passing
faults (429, 5xx, network) are retried with exponential backoff and jitter, bounded in count and in
total time; faults that will not pass (401/403, a bad request, an answer that does not parse) fail
at once. A request that overflows the model's window is reported separately so that the caller can
shrink the input and try again. Every wait and every in-flight request yields to a cancel event, and
a request is given up (its connection closed) when it has run for its whole time, however slowly
the endpoint keeps sending.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ctxd.errors import Cancelled, CompactionFailed

if TYPE_CHECKING:
    import openai

T = TypeVar("T")

POLL_SECONDS = 0.05
BASE_DELAY = 0.5
MAX_DELAY = 8.0
MAX_RETRY_AFTER = 30.0


class ContextTooLong(Exception):
    """The endpoint said the request does not fit the model's context window."""


class Overdue(Exception):
    """The request ran for its whole time (an endpoint that trickles its answer never times out
    between two reads): given up, as a timeout is."""


class AnswerTooLarge(Exception):
    """The endpoint's answer is over the size a compaction reads: refused before it fills memory."""


@dataclass
class RetryPolicy:
    max_retries: int = 4
    budget_seconds: float = 60.0
    base_delay: float = BASE_DELAY
    max_delay: float = MAX_DELAY

    def delay(self, attempt: int, retry_after: float | None, rng: Callable[[], float] = random.random) -> float:
        """Exponential backoff with full jitter; a server's Retry-After wins when it gives one."""
        if retry_after is not None:
            return min(max(0.0, retry_after), MAX_RETRY_AFTER)
        ceiling = min(self.max_delay, self.base_delay * (2.0 ** attempt))
        return ceiling / 2 + rng() * ceiling / 2


def _retry_after(error: openai.APIStatusError) -> float | None:
    headers = error.response.headers if error.response is not None else {}
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return float(value) * scale
        except ValueError:
            return None
    return None


def _error_code(error: openai.APIStatusError) -> str:
    code = getattr(error, "code", None)
    if isinstance(code, str):
        return code
    body = error.body if isinstance(error.body, dict) else {}
    inner = body.get("error", body) if isinstance(body, dict) else {}
    value = inner.get("code") if isinstance(inner, dict) else None
    return value if isinstance(value, str) else ""


def is_context_overflow(error: Exception) -> bool:
    import openai  # lazily: the daemon starts without it

    if not isinstance(error, openai.APIStatusError):
        return False
    if _error_code(error) == "context_length_exceeded":
        return True
    text = str(error).lower()
    return error.status_code in (400, 413) and ("context_length_exceeded" in text or "maximum context length" in text)


def is_transient(error: Exception) -> bool:
    """Faults worth another try: rate limits (not an exhausted quota), 408/409, 5xx, network."""
    import openai  # lazily: the daemon starts without it

    if isinstance(error, (openai.APITimeoutError, openai.APIConnectionError, Overdue)):
        return True
    if isinstance(error, openai.APIStatusError):
        if error.status_code == 429:
            return _error_code(error) != "insufficient_quota"
        return error.status_code in (408, 409) or error.status_code >= 500
    return False


def describe(error: Exception, secret: str | None = None) -> str:
    """A short, key-free description of a failed request for the error the client sees."""
    import openai  # lazily: the daemon starts without it

    if isinstance(error, openai.APIStatusError):
        code = _error_code(error)
        message = ""
        body = error.body
        if isinstance(body, dict):
            inner = body.get("error", body)
            if isinstance(inner, dict) and isinstance(inner.get("message"), str):
                message = inner["message"]
        text = f"HTTP {error.status_code}" + (f" ({code})" if code else "") + (f": {message}" if message else "")
    elif isinstance(error, (openai.APITimeoutError, Overdue, AnswerTooLarge)):
        text = "the request timed out" if isinstance(error, openai.APITimeoutError) else str(error)
    elif isinstance(error, openai.APIConnectionError):
        text = "could not reach the endpoint"
    else:
        text = f"{type(error).__name__}: {error}"
    if secret:
        text = text.replace(secret, "***")
    return text[:300]


def run_cancellable(call: Callable[[], T], cancel: threading.Event, on_cancel: Callable[[], None] | None = None,
                    seconds: float | None = None) -> T:
    """Run a blocking call in a helper thread so that a cancel takes effect within POLL_SECONDS,
    and give it up (Overdue) when it has run for `seconds`.

    A cancelled or overdue call is abandoned (its result, if it ever comes, is dropped); `on_cancel`
    can close the connection under it.
    """
    done = threading.Event()
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = call()
        except BaseException as error:  # handed to the caller's thread
            box["error"] = error
        finally:
            done.set()

    threading.Thread(target=work, name="ctxd-compact-request", daemon=True).start()
    until = None if seconds is None else time.monotonic() + seconds
    while not done.wait(POLL_SECONDS):
        overdue = until is not None and time.monotonic() >= until
        if cancel.is_set() or overdue:
            if on_cancel is not None:
                try:
                    on_cancel()
                except Exception:
                    pass
            if overdue:
                raise Overdue(f"no whole answer within {seconds:g} s")
            raise Cancelled("the compaction was cancelled")
    if "error" in box:
        raise box["error"]
    return cast("T", box["value"])


def call_with_retries(
    call: Callable[[], T],
    *,
    policy: RetryPolicy,
    cancel: threading.Event,
    progress: Callable[[str], None] | None = None,
    secret: str | None = None,
    on_cancel: Callable[[], None] | None = None,
    attempt_seconds: float | None = None,
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    rng: Callable[[], float] = random.random,
) -> T:
    """Call until success, a permanent fault, or the retry count or time budget runs out. Each
    attempt is given up after `attempt_seconds`; `deadline` (on `clock`, default: the policy's
    budget from now) is when no retry may start any more.

    Raises ContextTooLong, Cancelled, or CompactionFailed (with a key-free reason).
    """
    deadline = clock() + policy.budget_seconds if deadline is None else deadline
    attempt = 0
    while True:
        if cancel.is_set():
            raise Cancelled("the compaction was cancelled")
        try:
            return run_cancellable(call, cancel, on_cancel, attempt_seconds)
        except (Cancelled, CompactionFailed, ContextTooLong):
            raise
        except Exception as error:
            if is_context_overflow(error):
                raise ContextTooLong(describe(error, secret)) from None
            reason = describe(error, secret)
            if not is_transient(error):
                raise CompactionFailed(f"compaction request failed: {reason}") from None
            if attempt >= policy.max_retries:
                raise CompactionFailed(f"compaction request failed after {attempt + 1} attempts: {reason}") from None
            retry_after = (_retry_after(cast("openai.APIStatusError", error))
                           if hasattr(error, "status_code") and hasattr(error, "response") else None)
            delay = policy.delay(attempt, retry_after, rng)
            if clock() + delay > deadline:
                raise CompactionFailed(f"compaction request failed; retry time budget spent: {reason}") from None
            if progress is not None:
                progress(f"{reason}; retrying in {delay:.1f}s")
            if cancel.wait(delay):
                raise Cancelled("the compaction was cancelled") from None
            attempt += 1
