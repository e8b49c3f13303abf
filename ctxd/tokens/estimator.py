"""A fast token estimate for text whose tokenizer is not loaded (or not known).

bytes/4 is a quarter too high on English and a third too low on JSON and logs, and for cl100k it
undercounts Chinese by a third; ascii/4 + 1.5 per non-ASCII character doubles o200k's count of
Chinese. A BPE tokenizer first cuts text into chunks (a word with its leading space, a run of
punctuation, up to three digits, a run of whitespace) and most chunks are one token, so the count
follows the character classes and the boundaries between them.

The estimate is a weighted sum over every pair (previous character class, character class), with
integer weights fitted against tiktoken. It is computed without a per-character Python loop, in a
fixed number of C-level passes, because it must stay at least 20 times cheaper than tiktoken:

1. `bytes.translate` maps each UTF-8 byte to its class, a number below 16 (continuation bytes
   are a class of their own, so a CJK character is a lead byte plus two continuation bytes);
2. as one big integer, `x | x << 12` (computed as `x * 4097`: the bits do not overlap) puts the
   previous byte's class in the high nibble of every byte, so each byte becomes a pair code;
3. a second `bytes.translate` maps each pair code to its weight;
4. `zlib.adler32` sums the weights (its low half is 1 + the byte sum modulo 65521, so the text
   is summed in chunks small enough never to wrap).

The weights are fitted on `bench/corpus/` by `bench/fit_estimator.py`: a weight per class, plus a
ridge-penalised correction per pair seen in the corpus (least squares on relative error, every
text class weighted equally), then rounded to 1/SCALE. `bench/bench_tokens.py` reports the error
per text class and the speed.
"""

from __future__ import annotations

import math
import zlib
from typing import Final, NamedTuple

# Character classes, one per UTF-8 byte.
BLANK, LOWER, DIGIT, PUNCT, NEWLINE, CONT, CJK_SYMBOL, LEAD, UPPER = range(9)
CLASS_NAMES: Final = ("blank", "lower", "digit", "punct", "newline", "cont", "cjk_symbol", "lead", "upper")
N_CLASSES: Final = len(CLASS_NAMES)


def _class_table() -> bytes:
    table = bytearray(256)  # BLANK: space, tab, control characters
    for byte in range(33, 127):
        table[byte] = PUNCT
    for byte in b"abcdefghijklmnopqrstuvwxyz":
        table[byte] = LOWER
    for byte in b"ABCDEFGHIJKLMNOPQRSTUVWXYZ":
        table[byte] = UPPER
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
SCALE: Final = 32  # weights are multiples of 1/SCALE token

# Fitted by bench/fit_estimator.py: WEIGHTS[profile][previous class][class] is the cost, in
# 1/SCALE tokens, of a byte of `class` that follows a byte of `previous class`.
WEIGHTS: Final[dict[str, tuple[tuple[int, ...], ...]]] = {
    "o200k": (
        (4, 19, 52, 13, 23, 7, -3, -8, 6),
        (8, 2, 30, 5, 42, 7, 2, -2, 28),
        (23, 33, 10, 25, 6, 7, 2, 2, 33),
        (21, 36, 36, 1, 14, 7, 2, 1, 5),
        (27, 11, 0, 34, 38, 7, 6, 13, 6),
        (5, 14, 26, 12, 24, 11, 4, 5, 13),
        (11, 18, 26, 13, 22, 9, 2, 2, 13),
        (11, 18, 26, 13, 22, 8, 2, 2, 13),
        (-7, 17, 52, 8, 26, 7, 2, 6, 14),
    ),
    "cl100k": (
        (4, 19, 51, 16, 24, 9, -5, -7, 5),
        (8, 2, 30, 3, 44, 9, 3, -2, 26),
        (23, 32, 11, 24, 3, 9, 3, 1, 38),
        (21, 38, 34, 0, 11, 9, 3, 0, 8),
        (25, 16, -2, 33, 33, 9, 10, -2, 5),
        (-4, 16, 26, 12, 26, 14, 7, 11, 14),
        (9, 19, 26, 13, 21, 12, 3, 1, 14),
        (9, 19, 26, 13, 21, 11, 3, 1, 14),
        (-8, 21, 58, 9, 26, 9, 3, -3, 14),
    ),
}
DEFAULT_PROFILE: Final = "o200k"


class _Profile(NamedTuple):
    table: bytes  # pair code (previous class << 4 | class) -> weight + offset, every byte >= 0
    offset: int
    chunk: int  # bytes per adler32 call so that the sum stays below 65521

    @classmethod
    def build(cls, matrix: tuple[tuple[int, ...], ...]) -> "_Profile":
        raw = [0] * 256
        for prev, row in enumerate(matrix):
            for klass, weight in enumerate(row):
                raw[prev << 4 | klass] = weight
        offset = max(0, -min(raw))
        table = [w + offset for w in raw]
        if max(table) > 255:
            raise ValueError("estimator weights do not fit in a byte")
        return cls(bytes(table), offset, 65520 // max(1, max(table)))


_PROFILES: Final = {name: _Profile.build(w) for name, w in WEIGHTS.items()}
_DEFAULT: Final = _PROFILES[DEFAULT_PROFILE]
_from_bytes = int.from_bytes
_adler32 = zlib.adler32


def estimate_tokens(text: str, profile: str = DEFAULT_PROFILE) -> int:
    """Estimated token count of `text` for the encoding family `profile` (o200k or cl100k)."""
    if not text:
        return 0
    table, offset, chunk = _PROFILES.get(profile, _DEFAULT)
    try:
        raw = text.encode()
    except UnicodeEncodeError:  # lone surrogates: count them as the bytes they would be
        raw = text.encode("utf-8", "surrogatepass")
    n = len(raw)
    x = _from_bytes(raw.translate(CLASS_TABLE), "little")
    # Byte i of `codes` is the pair (class of byte i-1, class of byte i); byte 0 pairs with a
    # blank, so a leading word counts as a word after a space. Byte n holds (last class, blank).
    codes = (x * 4097).to_bytes(n + 1, "little").translate(table)  # x * 4097 == x | x << 12
    if n < chunk:
        total = (_adler32(codes) & 0xFFFF) - 1
    else:
        view = memoryview(codes)
        total = 0
        for start in range(0, n + 1, chunk):
            total += (_adler32(view[start : start + chunk]) & 0xFFFF) - 1
    total -= codes[n] + offset * n
    return max(1, (total + SCALE // 2) // SCALE)


def bytes_over_four(text: str) -> int:
    """Codex's rule, kept for comparison: UTF-8 bytes / 4, rounded up."""
    return (len(text.encode("utf-8", "surrogatepass")) + 3) // 4


def qwen_heuristic(text: str) -> int:
    """qwen-code's rule, kept for comparison: ASCII chars / 4 + 1.5 per other character."""
    non_ascii = len(text) - len(text.encode("ascii", "ignore"))
    return math.ceil((len(text) - non_ascii) / 4 + non_ascii * 1.5)
