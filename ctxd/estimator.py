"""A fast token estimate for text whose tokenizer is not loaded (or not known).

bytes/4 is a quarter too high on English and a third too low on JSON and logs, and for cl100k it
undercounts Chinese by a third; ascii/4 + 1.5 per non-ASCII character doubles o200k's count of
Chinese. A BPE tokenizer first cuts text into chunks (a word with its leading space, a run of
punctuation, up to three digits, a run of whitespace) and most chunks are one token, so the count
follows the character classes and the boundaries between them.

The estimate is a weighted sum over every pair (previous character class, character class), with
integer weights fitted against tiktoken. It is computed without a per-character Python loop, in a
fixed number of C-level passes, because it must stay at least 20 times cheaper than tiktoken:

1. `bytes.translate` maps each UTF-8 byte to its class, a number below 8 (continuation bytes are
   a class of their own, so a CJK character is a lead byte plus two continuation bytes);
2. as one big integer, `x | x << 12` puts the previous byte's class in the high nibble of every
   byte, so each byte becomes a pair code;
3. a second `bytes.translate` maps each pair code to its weight;
4. `zlib.adler32` sums the weights (its low half is 1 + the byte sum modulo 65521, so the text
   is summed in chunks small enough never to wrap).

The weights are fitted on `bench/corpus/` by `bench/fit_estimator.py` (least squares on relative
error, every text class weighted equally, rounded to multiples of 1/SCALE one at a time with a
refit of the rest); `bench/bench_tokens.py` reports the error per class and the speed.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Final

# Character classes, one per UTF-8 byte.
BLANK, LETTER, DIGIT, PUNCT, NEWLINE, CONT, CJK_SYMBOL, LEAD = range(8)
CLASS_NAMES: Final = ("blank", "letter", "digit", "punct", "newline", "cont", "cjk_symbol", "lead")


def _class_table() -> bytes:
    table = bytearray(256)  # BLANK: space, tab, control characters
    for byte in range(33, 127):
        table[byte] = PUNCT
    for byte in b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ":
        table[byte] = LETTER
    for byte in b"0123456789":
        table[byte] = DIGIT
    table[ord("\n")] = table[ord("\r")] = NEWLINE
    for byte in range(0x80, 0xC0):
        table[byte] = CONT
    for byte in range(0xC0, 0x100):
        table[byte] = LEAD
    table[0xE3] = CJK_SYMBOL  # U+3000..U+3FFF: kana and CJK punctuation
    return bytes(table)


CLASS_TABLE: Final = _class_table()

# The model's features: a weight per character class, plus a weight for a few class pairs.
SINGLE_FEATURES: Final = ("blank", "letter", "digit", "punct", "newline", "cont", "cjk_symbol")
PAIR_FEATURES: Final = {
    "word_after_space": (BLANK, LETTER),  # " word": the commonest chunk of prose
    "word_after_punct": (PUNCT, LETTER),  # identifiers after `.`, `(`, `"`, `_`, `/`
    "blank_after_blank": (BLANK, BLANK),  # indentation: runs of spaces are chunks of their own
}
FEATURES: Final = (*SINGLE_FEATURES, *PAIR_FEATURES)
SCALE: Final = 128  # weights are multiples of 1/SCALE token

# Fitted by bench/fit_estimator.py: weight numerators (tokens * SCALE), in the order of FEATURES.
WEIGHTS: Final[dict[str, tuple[int, ...]]] = {
    "o200k": (59, 9, 110, 6, 132, 51, -10, 41, 229, -43),
    "cl100k": (77, 8, 110, 4, 131, 74, -23, 27, 221, -63),
}
DEFAULT_PROFILE: Final = "o200k"


def pair_weights(weights: tuple[int, ...]) -> list[int]:
    """Weight (in 1/SCALE tokens) of each pair code `previous_class << 4 | class`."""
    single = dict(zip(SINGLE_FEATURES, weights))
    pairs = dict(zip(PAIR_FEATURES, weights[len(SINGLE_FEATURES) :]))
    out = [0] * 256
    for prev in range(8):
        for cls in range(8):
            out[prev << 4 | cls] = single.get(CLASS_NAMES[cls], 0)
    for name, (prev, cls) in PAIR_FEATURES.items():
        out[prev << 4 | cls] += pairs[name]
    return out


@dataclass(frozen=True)
class _Profile:
    table: bytes  # pair code -> weight + offset, so that every byte is >= 0
    offset: int
    chunk: int  # bytes per adler32 call so that the sum stays below 65521

    @classmethod
    def build(cls, weights: tuple[int, ...]) -> _Profile:
        raw = pair_weights(weights)
        offset = max(0, -min(raw))
        table = [w + offset for w in raw]
        if max(table) > 255:
            raise ValueError("estimator weights do not fit in a byte")
        return cls(bytes(table), offset, 65520 // max(1, max(table)))


_PROFILES: Final = {name: _Profile.build(w) for name, w in WEIGHTS.items()}


def estimate_tokens(text: str, profile: str = DEFAULT_PROFILE) -> int:
    """Estimated token count of `text` for the encoding family `profile` (o200k or cl100k)."""
    if not text:
        return 0
    p = _PROFILES.get(profile) or _PROFILES[DEFAULT_PROFILE]
    raw = text.encode("utf-8", "surrogatepass")
    n = len(raw)
    x = int.from_bytes(raw.translate(CLASS_TABLE), "little")
    # Byte i of `codes` is the pair (class of byte i-1, class of byte i); byte 0 pairs with a
    # blank, so a leading word counts as a word after a space. Byte n holds (last class, blank).
    codes = (x | x << 12).to_bytes(n + 1, "little").translate(p.table)
    if n + 1 <= p.chunk:
        total = (zlib.adler32(codes) & 0xFFFF) - 1
    else:
        view = memoryview(codes)
        total = 0
        for start in range(0, n + 1, p.chunk):
            total += (zlib.adler32(view[start : start + p.chunk]) & 0xFFFF) - 1
    total -= codes[n] + p.offset * n
    return max(1, round(total / SCALE))


def bytes_over_four(text: str) -> int:
    """Codex's rule, kept for comparison: UTF-8 bytes / 4, rounded up."""
    return (len(text.encode("utf-8", "surrogatepass")) + 3) // 4


def qwen_heuristic(text: str) -> int:
    """qwen-code's rule, kept for comparison: ASCII chars / 4 + 1.5 per other character."""
    non_ascii = len(text) - len(text.encode("ascii", "ignore"))
    return math.ceil((len(text) - non_ascii) / 4 + non_ascii * 1.5)
