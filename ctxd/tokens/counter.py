"""Token counters: exact when the model's tokenizer is known and loaded (tiktoken for OpenAI's
encodings, families.py for Qwen, DeepSeek, Llama 3, Mistral and Claude), otherwise the fast
estimator with that family's profile.

Loading an encoding takes about a second (from the files the install ships: see encodings.py), so
it never happens on a request's path: the first count for an encoding starts a background thread
and is answered by the estimator, as is every count until the thread is done (a load nobody
waits for starts after the owner's first look at the agents' session files: `Tokenizers.quiet`).
When the encoding cannot be loaded (its file missing or not the one tiktoken expects) the daemon
says so once in its log and keeps estimating; the usage snapshot reports which counter is in use
(`tokenizer`, `tokenizerStatus`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

from ctxd.imports import import_shared_modules
from ctxd.tokens import catalog, encodings, families
from ctxd.tokens.approx import IMAGE_BYTES, approx_tokens_from_bytes, item_tokens
from ctxd.tokens.estimator import estimate_tokens

log = logging.getLogger(__name__)

EXACT, LOADING, UNAVAILABLE, ESTIMATE = "exact", "loading", "unavailable", "estimate"
QUIET_SECONDS = 10.0  # the longest a load waits for `Tokenizers.quiet` to end


class _Quiet:
    """While held, a load that nobody waits for waits (`Tokenizers.quiet`)."""

    def __init__(self) -> None:
        self._held = 0
        self._changed = threading.Condition()

    @contextmanager
    def held(self) -> Iterator[None]:
        with self._changed:
            self._held += 1
        try:
            yield
        finally:
            with self._changed:
                self._held -= 1
                self._changed.notify_all()

    def wait(self, wanted: Callable[[], bool], timeout: float) -> None:
        """Until nothing holds it, `wanted()` is true, or `timeout` passed."""
        with self._changed:
            self._changed.wait_for(lambda: self._held == 0 or wanted(), timeout)

    def wake(self) -> None:
        with self._changed:
            self._changed.notify_all()


class _Slot:
    """One encoding: loaded once, in the background, by whoever asks first."""

    def __init__(self, name: str, loader: Callable[[str], Any], quiet: _Quiet) -> None:
        self.name = name
        self._loader = loader
        self._quiet = quiet
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._wanted = False  # someone waits for it (`wait`): loaded at once, quiet or not
        self.encoding: Any = None
        self.error: str | None = None
        self._retried = False  # (`wait` tries a failed load once more)

    @property
    def status(self) -> str:
        if self.encoding is not None:
            return EXACT
        return UNAVAILABLE if self.error is not None else LOADING

    def get(self) -> Any:
        """The encoding if it is loaded; otherwise start loading it (once) and return None."""
        if self.encoding is not None or self.error is not None:
            return self.encoding
        with self._lock:
            if self._thread is None:
                import_shared_modules()  # (what the load imports, not beside this thread's imports)
                self._thread = threading.Thread(target=self._load, name=f"ctxd-tokenizer-{self.name}", daemon=True)
                self._thread.start()
        return None

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the load has finished (`ctxd usage`, tests, benches); True if it succeeded.
        A load that failed is tried once more here, in the caller's thread, which waits with
        nothing else to do: one beside another thread's imports can fail for that alone (`ctxd
        usage` counted estimates where the daemon beside it counted exactly, in a CI run)."""
        self._wanted = True
        self._quiet.wake()
        self.get()
        assert self._thread is not None
        self._thread.join(timeout)
        if self.encoding is None and self.error is not None and not self._thread.is_alive():
            with self._lock:
                if self.encoding is None and not self._retried:
                    self._retried = True
                    try:
                        self.encoding = self._loader(self.name)
                        self.error = None
                    except Exception as error:  # noqa: BLE001 - as the load thread: estimates
                        self.error = f"{type(error).__name__}: {error}"
        return self.encoding is not None

    def _load(self) -> None:
        self._quiet.wait(lambda: self._wanted, QUIET_SECONDS)
        try:
            try:
                encoding = self._loader(self.name)
            except RuntimeError as error:  # an import met another thread's (`_DeadlockError`): once more
                if "deadlock" not in str(error):
                    raise
                encoding = self._loader(self.name)
        except Exception as error:  # noqa: BLE001 - any failure means: keep estimating
            self.error = f"{type(error).__name__}: {error}"
            log.warning("tokenizer %s is unavailable (%s); token counts are estimates",
                        self.name, self.error[:300])
            return
        self.encoding = encoding
        log.info("tokenizer %s loaded; token counts are exact from now on", self.name)


@dataclass(frozen=True)
class Counter:
    """Counts tokens for one model: exactly once its encoding is loaded, estimated until then."""

    encoding: str | None
    profile: str
    slot: _Slot | None

    def count(self, text: str) -> int:
        if not text:
            return 0
        if self.slot is not None:
            encoding = self.slot.get()
            if encoding is not None:
                exact = getattr(encoding, "count_tokens", None)
                return exact(text) if exact is not None else len(encoding.encode_ordinary(text))
        return estimate_tokens(text, self.profile)

    @property
    def status(self) -> str:
        return self.slot.status if self.slot is not None else ESTIMATE

    @property
    def name(self) -> str:
        """What counts right now: the encoding's name, or `estimate:<profile>`."""
        return self.encoding if self.status == EXACT and self.encoding else f"estimate:{self.profile}"


class Tokenizers:
    """The process's counters; each encoding is loaded at most once."""

    def __init__(self, loader: Callable[[str], Any] | None = None) -> None:
        self._loader = loader or _load
        self._slots: dict[str, _Slot] = {}
        self._counters: dict[tuple[str | None, str | None], Counter] = {}
        self._lock = threading.Lock()
        self._quiet = _Quiet()

    def quiet(self) -> AbstractContextManager[None]:
        """No encoding starts loading while this is held (at most QUIET_SECONDS), unless someone
        waits for it. Building one runs Python code that holds the GIL 5 ms at a time, and a
        thread making system calls waits that long after each: a cold owner's first look at
        3,000 session files' heads took about 0.4 s beside a load, and 0.16 s without (bench/README.md)."""
        return self._quiet.held()

    def slot(self, encoding: str) -> _Slot:
        with self._lock:
            slot = self._slots.get(encoding)
            if slot is None:
                slot = self._slots[encoding] = _Slot(encoding, self._loader, self._quiet)
            return slot

    def statuses(self) -> list[dict[str, str]]:
        """Each exact tokenizer ctxd knows (tiktoken's encodings, the families') and its state:
        `exact` (loaded), `loading`, `unavailable`, or `idle` (no thread has needed it yet)."""
        with self._lock:
            slots = dict(self._slots)
        return [{"name": name, "status": slots[name].status if name in slots else "idle"}
                for name in sorted([*encodings.SPECS, *(n for n, f in families.FAMILIES.items() if f.hot_path)])]

    def counter(self, model: str | None, override: str | None = None) -> Counter:
        """The counter for a model (asked on every request: remembered per model and override)."""
        counter = self._counters.get((model, override))
        if counter is None:
            encoding, profile = catalog.counter_spec(model, override)
            counter = self._counters[(model, override)] = Counter(encoding, profile,
                                                                  self.slot(encoding) if encoding else None)
        return counter

    def preload(self, model: str | None, override: str | None = None) -> None:
        """Start loading the model's encoding in the background (returns at once)."""
        counter = self.counter(model, override)
        if counter.slot is not None:
            counter.slot.get()


def _load(name: str) -> Any:
    """An OpenAI encoding from the files the install ships, or another family's exact counter."""
    return families.load(name) if name in families.FAMILIES else encodings.load(name)


TOKENIZERS = Tokenizers()


# --- ledger items ---------------------------------------------------------------------------------

ITEM_FRAMING_TOKENS = 4  # role markers and separators the model API wraps every item in
_TEXT_KEYS = ("text", "name", "arguments", "input", "output", "refusal")


def _text_tokens(value: Any, count: Callable[[str], int]) -> int:
    """Tokens of the text a model sees in an item's content: strings under text-bearing keys,
    lists of content parts, and images at Codex's fixed price."""
    if isinstance(value, str):
        return count(value)
    total = 0  # loops, not sum() over generators: this runs for every recorded item
    if isinstance(value, list):
        for part in value:
            total += _text_tokens(part, count)
    elif isinstance(value, dict):
        if value.get("type") == "input_image":
            return approx_tokens_from_bytes(IMAGE_BYTES)
        for key in _TEXT_KEYS:
            if key in value:
                total += _text_tokens(value[key], count)
    return total


def count_item(item: dict[str, Any], count: Callable[[str], int]) -> int:
    """One ledger item's tokens with a real counter. Codex's fixed rules stay where the text is
    not visible: encrypted reasoning and remote compactions (decoded length / 4), images (7,373
    bytes), ghost snapshots (0: never sent to a model)."""
    kind = item.get("type")
    if kind == "ghost_snapshot":
        return 0
    encrypted = item.get("encrypted_content")
    if kind in ("reasoning", "compaction") and isinstance(encrypted, str) and encrypted:
        return item_tokens(item)
    if kind == "reasoning":
        body = _text_tokens(item.get("summary"), count) + _text_tokens(item.get("content"), count)
    elif kind == "message":
        body = _text_tokens(item.get("content"), count)
    else:
        body = sum(_text_tokens(item[key], count) for key in _TEXT_KEYS if key in item)
    return body + ITEM_FRAMING_TOKENS
