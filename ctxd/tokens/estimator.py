"""A fast token estimate for text whose tokenizer is not loaded (or not known).

bytes/4 is a quarter too high on English and a third too low on JSON and logs, and for cl100k it
undercounts Chinese by a third; ascii/4 + 1.5 per non-ASCII character doubles o200k's count of
Chinese. A BPE tokenizer first cuts text into chunks (a word with its leading space, a run of
punctuation, up to three digits, a run of whitespace) and most chunks are one token, so the count
follows the character classes and the boundaries between them.

The estimate is a weighted sum over every pair (previous byte's class, byte's class) of the text's
UTF-8 bytes, with integer weights fitted against tiktoken. There are 16 classes: blank, newline,
consonant, vowel, capital, digit, bracket or quote, other punctuation, UTF-8 continuation byte, and
lead bytes by script (Latin and Greek, Cyrillic, Hebrew and Arabic, CJK ideographs, Hangul, other
three-byte characters, four-byte characters), so a word costs its start plus a little per letter,
and a Chinese, Russian or Korean character costs what its script costs.

How many tokens a Chinese or Korean character takes depends on how common it is, which its UTF-8
bytes do not tell; their legacy encodings do: GBK puts the 3,755 commonest Chinese characters
under lead bytes B0-D7 and the rarer ones after them, CP949 the 2,350 common Hangul syllables
under B0-C8. A text with ideographs (or Hangul) adds a weight per byte of its GBK (CP949) encoding.

Everything runs without a per-character Python loop, in a fixed number of C-level passes, because
it must stay at least 20 times cheaper than tiktoken:

1. `bytes.translate` maps each UTF-8 byte to its class, written as a hex digit;
2. `binascii.unhexlify` turns each two digits into one byte, a pair code (previous class << 4 |
   class): once from the first digit and once from the second, so that both halves together hold
   every pair of neighbours;
3. a second `bytes.translate` maps each pair code to its weight;
4. `zlib.adler32` sums the weights (its low half is 1 + the byte sum modulo 65521, so long texts
   are summed in chunks small enough never to wrap).

The weights are fitted by `bench/fit_estimator.py` on the training part of a corpus of real text
from registry packages (`bench/real_corpus.py`); `bench/bench_tokens.py` reports the error on the
held-out part, per text class, and the speed.
"""

from __future__ import annotations

import binascii
import math
import zlib
from typing import Final, NamedTuple

# Character classes, one per UTF-8 byte.
(BLANK, CONSONANT, VOWEL, BRACKET, CAPITAL, DIGIT, PUNCT, NEWLINE, CONT, LATIN, CYRILLIC, RTL, CJK, HANGUL,
 OTHER3, LEAD4) = range(16)
CLASS_NAMES: Final = ("blank", "consonant", "vowel", "bracket", "capital", "digit", "punct", "newline", "cont",
                      "latin", "cyrillic", "rtl", "cjk", "hangul", "other3", "lead4")
N_CLASSES: Final = len(CLASS_NAMES)


def _class_table() -> bytes:
    table = bytearray(256)  # BLANK: space, tab, control characters
    spans = [
        (PUNCT, range(33, 127)), (BRACKET, b"\"'()[]{}"), (CONSONANT, b"abcdefghijklmnopqrstuvwxyz"),
        (VOWEL, b"aeiouy"), (CAPITAL, b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"), (DIGIT, b"0123456789"), (NEWLINE, b"\n\r"),
        (CONT, range(0x80, 0xC0)), (LATIN, range(0xC0, 0xD0)), (CYRILLIC, range(0xD0, 0xD5)),
        (RTL, range(0xD5, 0xE0)), (OTHER3, range(0xE0, 0xF0)), (CJK, range(0xE4, 0xEA)),
        (HANGUL, range(0xEA, 0xEE)), (LEAD4, range(0xF0, 0x100)),
    ]
    for cls, span in spans:
        for byte in span:
            table[byte] = cls
    return bytes(table)


def _range_table(bounds: tuple[int, ...]) -> bytes:
    """Byte -> 1 + index of the range [bounds[i], bounds[i+1]) it falls in, 0 outside them all."""
    table = bytearray(256)
    for i, (low, high) in enumerate(zip(bounds, bounds[1:])):
        table[low:high] = bytes([i + 1]) * (high - low)
    return bytes(table)


CLASS_TABLE: Final = _class_table()
HEX_TABLE: Final = bytes(b"0123456789abcdef"[cls] for cls in CLASS_TABLE)  # the class as a hex digit
# Byte ranges of the legacy encodings: GBK (extension, symbols and kana, common hanzi, rarer
# hanzi, user area) and CP949 (extension, symbols, common Hangul, hanja and the rest).
GBK_BOUNDS: Final = (0x81, 0xA1, 0xB0, 0xD8, 0xF8, 0xFF)
CP949_BOUNDS: Final = (0x81, 0xA1, 0xB0, 0xC9, 0xFF)
GBK_TABLE: Final = _range_table(GBK_BOUNDS)
CP949_TABLE: Final = _range_table(CP949_BOUNDS)
SCALE: Final = 32  # weights are multiples of 1/SCALE token

# BEGIN FITTED WEIGHTS (bench/fit_estimator.py --write)
# WEIGHTS[profile]["pairs"][previous class][class] is the cost, in 1/SCALE tokens, of a byte of
# `class` after a byte of `previous class`; "gbk" and "cp949" the cost of a byte in each range.
WEIGHTS: Final[dict[str, dict[str, tuple]]] = {
    "o200k": {
        "pairs": (
            (1, 15, 7, 22, 17, 53, 23, 45, 8, 92, -13, -1, 25, 16, 4, -16),
            (9, 4, 2, 10, 31, 51, 16, 59, 8, 10, 6, 1, -16, -16, -8, -16),
            (14, 2, 5, 9, 4, 28, 24, 64, 8, 9, 6, 0, 14, 37, -16, -16),
            (11, 5, 14, 4, 36, 43, 28, 25, 8, 15, 40, -15, 17, 33, -16, -16),
            (1, 4, -1, 26, 2, 43, 32, 72, 8, 75, 7, 0, -16, -16, 0, -16),
            (9, 19, 20, 21, 70, 13, 17, 64, 8, 27, 6, 0, -5, 43, -16, -16),
            (18, 21, 12, 24, 15, 41, 0, 14, 8, -16, 50, 1, 31, 50, 13, -16),
            (23, 11, 16, 7, 24, 1, 19, 5, 8, 6, 18, -3, 9, 32, 13, -16),
            (2, 25, -14, 36, 45, 45, 26, 57, 8, -10, 1, 4, 12, 25, -2, -16),
            (11, 11, 4, 16, 22, 39, 21, 43, 9, 27, 6, 0, 14, 25, 3, -16),
            (11, 11, 4, 16, 22, 39, 21, 43, 8, 27, 6, 0, 14, 25, 3, -16),
            (11, 11, 4, 16, 22, 39, 21, 43, 8, 27, 6, 0, 14, 25, 3, -16),
            (11, 11, 4, 16, 22, 39, 21, 43, 8, 27, 6, 0, 14, 25, 3, -16),
            (11, 11, 4, 16, 22, 39, 21, 43, 8, 27, 6, 0, 14, 25, 3, -16),
            (11, 11, 4, 16, 22, 39, 21, 43, 8, 27, 6, 0, 14, 25, 3, -16),
            (11, 11, 4, 16, 22, 39, 21, 43, 8, 27, 6, 0, 14, 25, 3, -16),
        ),
        "gbk": (23, 5, -3, 0, -15),
        "cp949": (0, 4, -7, -16),
    },
    "cl100k": {
        "pairs": (
            (1, 10, 6, 18, 13, 52, 20, 60, 21, 89, -16, 23, 28, 15, 6, -16),
            (12, 4, 2, 8, 32, 52, 15, 58, 21, 25, -4, 8, -16, 10, -16, -16),
            (18, 2, 7, 7, 1, 36, 22, 69, 21, 30, -4, 7, 12, 86, -16, -16),
            (11, 11, 20, 3, 35, 42, 29, 28, 21, -13, 58, 23, 8, 14, -16, -16),
            (4, 4, 0, 25, 2, 38, 30, 72, 21, 104, -4, 8, -2, -16, -16, -16),
            (14, 19, 15, 12, 71, 11, 17, 68, 21, 38, -4, 7, -4, 43, -16, -16),
            (22, 20, 9, 25, 12, 42, 1, 15, 21, -16, 61, 8, 20, 71, 15, -16),
            (25, 8, 19, 4, 28, 7, 23, 4, 21, 48, 19, -7, 9, 48, -4, -16),
            (7, 29, -13, 23, 68, 12, 23, 65, 21, 3, -7, 0, 10, 29, -9, -16),
            (13, 11, 6, 13, 21, 39, 20, 45, 21, 38, -4, 7, 12, 29, -4, -16),
            (13, 11, 6, 13, 21, 39, 20, 45, 20, 38, -4, 7, 12, 29, -4, -16),
            (13, 11, 6, 13, 21, 39, 20, 45, 21, 38, -4, 7, 12, 29, -4, -16),
            (13, 11, 6, 13, 21, 39, 20, 45, 21, 38, -4, 7, 12, 29, -4, -16),
            (13, 11, 6, 13, 21, 39, 20, 45, 21, 38, -4, 7, 12, 29, -4, -16),
            (13, 11, 6, 13, 21, 39, 20, 45, 21, 38, -4, 7, 12, 29, -4, -16),
            (13, 11, 6, 13, 21, 39, 20, 45, 21, 38, -4, 7, 12, 29, -4, -16),
        ),
        "gbk": (40, 2, -14, -7, -9),
        "cp949": (0, -6, -16, -25),
    },
}
# END FITTED WEIGHTS
DEFAULT_PROFILE: Final = "o200k"


class _Sum(NamedTuple):
    """A weight table with every entry made non-negative, and how to undo that."""

    table: bytes
    offset: int  # added to every weight
    chunk: int  # bytes per adler32 call so that the sum stays below 65521

    @classmethod
    def build(cls, weights: list[int]) -> "_Sum":
        offset = max(0, -min(weights))
        table = [w + offset for w in weights]
        if max(table) > 255:
            raise ValueError("estimator weights do not fit in a byte")
        return cls(bytes(table), offset, 65520 // max(1, max(table)))

    def total(self, codes: bytes) -> int:
        """Sum of the weights of `codes` (bytes already translated through `table`)."""
        n = len(codes)
        if n < self.chunk:
            return (_adler32(codes) & 0xFFFF) - 1 - self.offset * n
        view = memoryview(codes)
        total = -self.offset * n
        for start in range(0, n, self.chunk):
            total += (_adler32(view[start : start + self.chunk]) & 0xFFFF) - 1
        return total


class _Profile(NamedTuple):
    pairs: _Sum  # indexed by pair code (previous class << 4 | class)
    gbk: _Sum  # indexed by a byte of the GBK encoding
    cp949: _Sum  # indexed by a byte of the CP949 encoding

    @classmethod
    def build(cls, weights: dict[str, tuple]) -> "_Profile":
        pairs = [weights["pairs"][code >> 4][code & 0xF] for code in range(256)]
        gbk = [(0, *weights["gbk"])[i] for i in GBK_TABLE]
        cp949 = [(0, *weights["cp949"])[i] for i in CP949_TABLE]
        return cls(_Sum.build(pairs), _Sum.build(gbk), _Sum.build(cp949))


_adler32 = zlib.adler32
_unhexlify = binascii.unhexlify
_PROFILES: Final = {name: _Profile.build(w) for name, w in WEIGHTS.items()}
_DEFAULT: Final = _PROFILES.get(DEFAULT_PROFILE)
_CJK_DIGIT: Final = b"0123456789abcdef"[CJK : CJK + 1]
_HANGUL_DIGIT: Final = b"0123456789abcdef"[HANGUL : HANGUL + 1]


def estimate_tokens(text: str, profile: str = DEFAULT_PROFILE) -> int:
    """Estimated token count of `text` for the encoding family `profile` (o200k or cl100k)."""
    if not text:
        return 0
    weights = _PROFILES.get(profile, _DEFAULT)
    try:
        raw = text.encode()
    except UnicodeEncodeError:  # lone surrogates: count them as the bytes they would be
        raw = text.encode("utf-8", "surrogatepass")
    n = len(raw)
    digits = raw.translate(HEX_TABLE)
    # A blank before the first byte (a leading word counts as a word after a space) and one after
    # the last: the pairs (blank, c0), (c1, c2), ... and (c0, c1), (c2, c3), ..., one of the two
    # ending with the padding pair (last class, blank), which is taken off below.
    padded = b"0" + digits + b"0"
    if n & 1:
        first, second = _unhexlify(padded[:-1]), _unhexlify(padded[1:])
    else:
        first, second = _unhexlify(padded), _unhexlify(padded[1:-1])
    table, offset, chunk = weights.pairs
    first, second = first.translate(table), second.translate(table)
    padding = table[CLASS_TABLE[raw[-1]] << 4]
    if len(first) < chunk:  # the common case, inlined: one adler32 call per half
        total = (_adler32(first) & 0xFFFF) + (_adler32(second) & 0xFFFF) - 2 - offset * n - padding
    else:
        total = weights.pairs.total(first) + weights.pairs.total(second) + offset - padding
    if _CJK_DIGIT in digits:
        total += weights.gbk.total(text.encode("gbk", "replace").translate(weights.gbk.table))
    if _HANGUL_DIGIT in digits:
        total += weights.cp949.total(text.encode("cp949", "replace").translate(weights.cp949.table))
    return max(1, (total + SCALE // 2) // SCALE)


def bytes_over_four(text: str) -> int:
    """Codex's rule, kept for comparison: UTF-8 bytes / 4, rounded up."""
    return (len(text.encode("utf-8", "surrogatepass")) + 3) // 4


def qwen_heuristic(text: str) -> int:
    """qwen-code's rule, kept for comparison: ASCII chars / 4 + 1.5 per other character."""
    non_ascii = len(text) - len(text.encode("ascii", "ignore"))
    return math.ceil((len(text) - non_ascii) / 4 + non_ascii * 1.5)
