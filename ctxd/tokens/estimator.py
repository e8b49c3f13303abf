"""A fast token estimate for text whose tokenizer is not loaded (or not known).

There are two estimators. When the optional C extension `_fastcount` is built (setup.py; a compiler
at install time) and the encoding's file ships (encodings.py), `estimate_tokens` cuts the text into
about the pieces the encoding's regex would and counts a piece the vocabulary holds as one token,
any other by a greedy cut into the longest prefixes that are tokens (a short ASCII one by its
length): a few percent off tiktoken and many times faster (the figures: bench/README.md, measured
by bench/bench_tokens.py; see _fastcount.c). Its table, a Bloom filter of the vocabulary, is built
in memory from the encoding's file (no tiktoken import) by `prepare` in the daemon's warm-up,
or else at the first estimate for each encoding. Without the extension, or when that file is
missing, `estimate_by_classes` below answers (about 5% off), with nothing but this module.

The rest of this docstring is about `estimate_by_classes`.

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

Byte classes cannot tell a German or French word from an English one, and BPE cuts the former into
more pieces: a text whose non-ASCII characters are mostly Latin letters with diacritics (or
Cyrillic letters) is counted by a script model: a weighted sum over pairs of letter classes that
tell which letter a byte is (e, a, i, ...; for Russian its vowels and consonant groups, by their
UTF-8 continuation byte), added to the class pairs, which have weights of their own in the model.

Everything runs without a per-character Python loop, in a fixed number of C-level passes, because
it must stay far cheaper than tiktoken:

1. `bytes.translate` maps each UTF-8 byte to its class, written as a hex digit;
2. `binascii.unhexlify` turns each two digits into one byte, a pair code (previous class << 4 |
   class): once from the first digit and once from the second, so that both halves together hold
   every pair of neighbours;
3. a second `bytes.translate` maps each pair code to its weight;
4. `zlib.adler32` sums the weights (its low half is 1 + the byte sum modulo 65521; the weights
   are fitted within a narrow span, so that a text of a kilobyte or two is summed in one call per
   half, and a longer one in chunks small enough never to wrap);
5. only for a text that is not ASCII: `bytes.count` of the script's lead bytes picks the script
   model, whose letter pairs take steps 1-4 once more.

The weights are fitted by `bench/fit_estimator.py` on the training part of a corpus of real text
from registry packages (`bench/real_corpus.py`), and kept as data beside this module (`fitted.json`,
with the C estimator's constants); `bench/bench_tokens.py` reports the error on the held-out part,
per text class, and the speed.
"""

from __future__ import annotations

import binascii
import hashlib
import json
import math
import os
import threading
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, NamedTuple

from ctxd.safefile import read_bounded, write_whole
from ctxd.tokens import encodings, families

try:  # the optional C extension (setup.py); without it, the byte classes below
    from ctxd.tokens import _fastcount
except ImportError:
    _fastcount = None  # type: ignore[assignment]

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
    for i, (low, high) in enumerate(zip(bounds, bounds[1:], strict=False)):
        table[low:high] = bytes([i + 1]) * (high - low)
    return bytes(table)


def _letters(groups: list[bytes | range]) -> bytes:
    """Byte -> 1 + index of the first group holding it (ASCII letters of either case), 0 in none."""
    table = bytearray(256)
    for i, group in reversed(list(enumerate(groups))):
        for byte in group:
            table[byte] = i + 1
            if 97 <= byte <= 122:
                table[byte - 32] = i + 1
    return bytes(table)


def _cyrillic(letters: str) -> bytes:
    """The continuation bytes of Cyrillic letters (each is a lead byte D0 or D1 and one of these)."""
    return bytes(ch.encode()[1] for ch in letters)


def _hex(table: bytes) -> bytes:
    return bytes(b"0123456789abcdef"[cls] for cls in table)


CLASS_TABLE: Final = _class_table()
HEX_TABLE: Final = _hex(CLASS_TABLE)  # the class as a hex digit
HEX_VALUE: Final = bytes(int(chr(b), 16) if chr(b) in "0123456789abcdef" else 0 for b in range(256))
# Byte ranges of the legacy encodings: GBK (extension, symbols and kana, common hanzi, rarer
# hanzi, user area) and CP949 (extension, symbols, common Hangul, hanja and the rest).
GBK_BOUNDS: Final = (0x81, 0xA1, 0xB0, 0xD8, 0xF8, 0xFF)
CP949_BOUNDS: Final = (0x81, 0xA1, 0xB0, 0xC9, 0xFF)
GBK_TABLE: Final = _range_table(GBK_BOUNDS)
CP949_TABLE: Final = _range_table(CP949_BOUNDS)
# The script models: {name: (lead-byte class, byte -> letter class)}. The letter classes tell which
# letter a byte is, as far as 16 classes can: German or French is told apart from English by its
# letters, and a Russian letter by its UTF-8 continuation byte.
SCRIPTS: Final = {
    "latin": (LATIN, _letters([b"e", b"a", b"i", b"o", b"u", b"n", b"r", b"s", b"t", b"l", b"dc", b"m",
                               b"hgpbfvwkjxqzy", range(0x80, 0xC0), range(0xC0, 0x100)])),
    "cyrillic": (CYRILLIC, _letters([b"\n\r", b"0123456789", b"abcdefghijklmnopqrstuvwxyz", range(33, 127), b"\xd0",
                                     b"\xd1", _cyrillic("аеиоуыэюя"), _cyrillic("нтср"), _cyrillic("влкм"),
                                     _cyrillic("дп"), _cyrillic("бгзй"), _cyrillic("жфхцчшщъь"), range(0x90, 0xB0),
                                     range(0x80, 0xC0), range(0xC0, 0x100)])),
}
SCRIPT_MIN = 2  # a text is in a script when it has this many of its lead bytes, and they make at
# least half of the bytes its non-ASCII characters add (2 for every 3-byte character, ...)
SCALE: Final = 16  # weights are multiples of 1/SCALE token

# The fitted numbers are data (`fitted.json`), written by the fit scripts (bench/fitted_data.py):
# WEIGHTS (bench/fit_estimator.py --write): WEIGHTS[profile]["pairs"][previous class][class] is the
# cost, in 1/SCALE tokens, of a byte of `class` after a byte of `previous class`; "gbk" and "cp949"
# the cost of a byte in each range; [script]["pairs"] the same as "pairs" for a text in the script,
# [script]["letters"] the cost of a byte of one letter class after one of another.
with open(os.path.join(os.path.dirname(__file__), "fitted.json"), encoding="utf-8") as _file:
    _FITTED: Final[dict[str, Any]] = json.load(_file)
WEIGHTS: Final[dict[str, dict[str, Any]]] = _FITTED["weights"]
DEFAULT_PROFILE: Final = "o200k"


class _Sum(NamedTuple):
    """A weight table with every entry made non-negative, and how to undo that."""

    table: bytes
    offset: int  # added to every weight
    chunk: int  # bytes per adler32 call so that the sum stays below 65521

    @classmethod
    def build(cls, weights: list[int]) -> _Sum:
        offset = max(0, -min(weights))
        table = [w + offset for w in weights]
        if max(table) > 255:
            raise ValueError("estimator weights do not fit in a byte")
        return cls(bytes(table), offset, 65519 // max(1, max(table)))  # 1 + the sum < 65521

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

    def pairs(self, digits: bytes) -> int:
        """Sum of the weights of every pair of neighbours in `digits` (classes as hex digits), the
        first one after a blank (class 0): `unhexlify` makes a pair code of every two digits, once
        from the first digit and once from the second."""
        table, offset, chunk = self
        if len(digits) & 1:
            first, second = _unhexlify(digits[:-1]), _unhexlify(digits[1:])
        else:
            first, second = _unhexlify(digits), _unhexlify(digits[1:-1])
        start = table[HEX_VALUE[digits[0]]] - offset  # the pair (blank, first class)
        first, second = first.translate(table), second.translate(table)
        if len(first) < chunk:  # the common case, inlined: one adler32 call per half
            n = len(first) + len(second)
            return (_adler32(first) & 0xFFFF) + (_adler32(second) & 0xFFFF) - 2 - offset * n + start
        return self.total(first) + self.total(second) + start


class _Script(NamedTuple):
    digit: bytes  # the script's lead-byte class as a hex digit
    letters_hex: bytes  # byte -> the script's letter class as a hex digit
    pairs: _Sum  # the class pairs' weights for a text in this script
    letters: _Sum  # and its letter pairs' weights


class _Profile(NamedTuple):
    pairs: _Sum  # indexed by pair code (previous class << 4 | class)
    gbk: _Sum  # indexed by a byte of the GBK encoding
    cp949: _Sum  # indexed by a byte of the CP949 encoding
    scripts: tuple[_Script, ...]

    @classmethod
    def build(cls, weights: dict[str, Any]) -> _Profile:
        def pairs(rows: tuple[tuple[int, ...], ...]) -> _Sum:
            return _Sum.build([rows[code >> 4][code & 0xF] for code in range(256)])

        gbk = [(0, *weights["gbk"])[i] for i in GBK_TABLE]
        cp949 = [(0, *weights["cp949"])[i] for i in CP949_TABLE]
        scripts = tuple(_Script(_hex(bytes([lead])), _hex(table), pairs(weights[name]["pairs"]),
                                pairs(weights[name]["letters"]))
                        for name, (lead, table) in SCRIPTS.items() if name in weights)
        return cls(pairs(weights["pairs"]), _Sum.build(gbk), _Sum.build(cp949), scripts)


_adler32 = zlib.adler32
_unhexlify = binascii.unhexlify
_PROFILES: Final = {name: _Profile.build(w) for name, w in WEIGHTS.items()}
_DEFAULT: Final = _PROFILES[DEFAULT_PROFILE]
# Profiles estimated by their byte-class weights only (Claude's: fitted against ctok, the
# vocabulary having no BPE ranks for a table).
_CLASSES_ONLY: Final = frozenset(_PROFILES) - {"o200k", "cl100k"}
_CJK_DIGIT: Final = b"0123456789abcdef"[CJK : CJK + 1]
_HANGUL_DIGIT: Final = b"0123456789abcdef"[HANGUL : HANGUL + 1]


class FastSpec(NamedTuple):
    """The C estimator's table for one profile: see _fastcount.c's build()."""

    encoding: str  # whose vocabulary and pre-tokenizer
    log2_words: int  # the Bloom filter has 2**log2_words words of 64 bits (3 bits per token)
    ascii_base: int  # an ASCII piece that is not a token, of at most ascii_max bytes, counts
    ascii_per_byte: int  # (ascii_base + ascii_per_byte * its bytes) / 1024 tokens
    ascii_max: int
    scale: int  # the count is scaled by scale / 1024


# The C estimator's constants (bench/fit_fastcount.py, on the corpus's training part).
FAST: Final[dict[str, FastSpec]] = {name: FastSpec(*spec) for name, spec in _FITTED["fast"].items()}
# Profiles cut as o200k's pre-tokenizer cuts (case changes split words); the others as cl100k's.
O200K_SPLIT: Final = frozenset({"o200k", "tekken"})
# RATIOS (bench/fit_fastcount.py): profile -> (OpenAI profile, scale / 1024). The estimate of a
# family while its table is built, and when its package is not installed. Claude's profiles have
# byte-class weights of their own (WEIGHTS), which are used instead; their ratios are kept for comparison.
RATIOS: Final[dict[str, tuple[str, int]]] = {name: (str(base), int(scale))
                                             for name, (base, scale) in _FITTED["ratios"].items()}
def _no_extension(text: str, table: bytes) -> int:
    raise RuntimeError("the C extension is not built")  # never called: no table exists without it


# bound once: the hot path's call
_count: Final[Callable[[str, bytes], int]] = _fastcount.count if _fastcount is not None else _no_extension
_tables: dict[str, bytes] = {}  # profile -> its C table, once built (only with the extension)
_no_table: set[str] = set()  # profiles whose table cannot be built: estimated by byte classes
_tables_lock = threading.Lock()


def _table(profile: str, kept: Path | None = None) -> bytes | None:
    """The C table of `profile` (any other profile: the default's), built at its first use (or
    read from `kept`, where `prepare` keeps it); None without the extension or the encoding's file."""
    if profile not in FAST:
        profile = DEFAULT_PROFILE
    with _tables_lock:  # built once even when threads ask at the same time
        if profile not in _tables and profile not in _no_table:
            spec, o200k = FAST[profile], profile in O200K_SPLIT
            path = _kept_path(kept, profile, spec, o200k) if kept is not None else None
            table = _read_kept(path) if path is not None else None
            if table is None:
                table = _build_table(spec, o200k)
                if table is not None and path is not None:
                    _keep(path, profile, table)
            if table is None:
                _no_table.add(profile)
            else:
                _tables[profile] = table
        return _tables.get(profile)


KEPT_TABLE_BYTES = (8 << 24) + (1 << 20)  # more than the largest table build() makes (its filter and header)
_DIGEST = 32  # a kept table ends with its SHA-256: a file cut short or damaged is built again


def _kept_path(folder: Path, profile: str, spec: FastSpec, o200k: bool) -> Path | None:
    """Where the table of `profile` is kept, named by everything it is made of: the encoding's file
    (by the SHA-256 tiktoken expects of it), the fitted constants and the extension that builds it
    (a new ctxd, or the extension built again, makes it again). None for a family's vocabulary,
    which is not one of the files checked against tiktoken's digests."""
    shipped = encodings.SPECS.get(spec.encoding)
    if _fastcount is None or shipped is None:
        return None
    try:
        built = os.stat(_fastcount.__file__)
    except (OSError, AttributeError, TypeError):
        return None
    made_of = repr((tuple(spec), o200k, shipped.sha256, built.st_size, built.st_mtime_ns))
    return folder / f"{profile}-{hashlib.sha256(made_of.encode()).hexdigest()[:32]}.table"


def _read_kept(path: Path) -> bytes | None:
    """A table kept before, if it is there whole (a regular file, not a link, its digest right)."""
    try:
        data = read_bounded(path, KEPT_TABLE_BYTES + _DIGEST, follow_links=False)
    except OSError:
        return None
    table, digest = data[:-_DIGEST], data[-_DIGEST:]
    return table if len(data) > _DIGEST and hashlib.sha256(table).digest() == digest else None


def _keep(path: Path, profile: str, table: bytes) -> None:
    """Keep a table for the next start (its own file, written whole and then named), in place of
    the profile's table made of anything else (an earlier ctxd's); a folder that cannot be written to
    only means the next start builds it again."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_whole(path, table + hashlib.sha256(table).digest())
        for other in path.parent.glob(f"{profile}-*.table"):
            if other.name != path.name:
                other.unlink(missing_ok=True)
    except OSError:
        pass


def _build_table(spec: FastSpec, o200k: bool) -> bytes | None:
    if _fastcount is None:
        return None
    try:
        if spec.encoding in families.FAMILIES:
            data = families.tiktoken_ranks(spec.encoding)
        else:
            data = encodings.shipped_file(spec.encoding)
    except encodings.EncodingUnavailable:
        return None
    return _fastcount.build(data, spec.log2_words, o200k, spec.ascii_base, spec.ascii_per_byte, spec.ascii_max,
                            spec.scale)


_started: set[str] = set()


def _build_in_background(profile: str) -> None:
    """Start building a family's table (a second or more for the larger vocabularies), once."""
    with _tables_lock:
        if profile in _started:
            return
        _started.add(profile)
    threading.Thread(target=_table, args=(profile,), name=f"ctxd-table-{profile}", daemon=True).start()


def prepare(kept: Path | None = None) -> None:
    """Build every profile's table now (the daemon's warm-up), so that no estimate on a request's
    path pays for it. The other families' tables are built at their first use. `kept`: a folder of
    the daemon's state dir where the tables are kept once built: a start then reads 0.7 MB instead of
    decompressing, checking and reading the encodings' 5 MB (50 ms of a cold owner's warm-up)."""
    for profile in ("o200k", "cl100k"):
        _table(profile, kept)


def implementation(profile: str = DEFAULT_PROFILE) -> str:
    """Which estimator `estimate_tokens` uses for `profile` (builds its table if need be)."""
    return "C (_fastcount: vocabulary)" if _table(profile) is not None else "Python (byte classes)"


def estimate_tokens(text: str, profile: str = DEFAULT_PROFILE) -> int:
    """Estimated token count of `text` for the encoding family `profile` (o200k or cl100k): by the
    vocabulary when the C extension is built, else by byte classes (see the module's docstring)."""
    table = _tables.get(profile)
    if table is not None:  # the hot path: one lookup, one call
        return _count(text, table)
    if profile in _CLASSES_ONLY:
        return estimate_by_classes(text, profile)
    ratio = RATIOS.get(profile)
    if ratio is not None:  # a family: its table (if it has one) is built off the request path
        if profile in FAST:
            _build_in_background(profile)
        base, scale = ratio
        return (estimate_tokens(text, base) * scale + 512) >> 10
    table = _table(profile)
    return _count(text, table) if table is not None else estimate_by_classes(text, profile)


def estimate_by_classes(text: str, profile: str = DEFAULT_PROFILE) -> int:
    """Estimated token count of `text` for the encoding family `profile` (o200k or cl100k) from its
    bytes' classes alone: what `estimate_tokens` answers without the C extension."""
    if not text:
        return 0
    weights = _PROFILES.get(profile, _DEFAULT)
    try:
        raw = text.encode()
    except UnicodeEncodeError:  # lone surrogates: count them as the bytes they would be
        raw = text.encode("utf-8", "surrogatepass")
    digits = raw.translate(HEX_TABLE)
    pairs, total = weights.pairs, 0
    if extra := len(raw) - len(text):  # not ASCII: the script models and the legacy encodings
        for script in weights.scripts:
            leads = digits.count(script.digit)
            if leads >= SCRIPT_MIN and 2 * leads >= extra:
                pairs, total = script.pairs, script.letters.pairs(raw.translate(script.letters_hex))
                break
        if _CJK_DIGIT in digits:
            total += weights.gbk.total(text.encode("gbk", "replace").translate(weights.gbk.table))
        if _HANGUL_DIGIT in digits:
            total += weights.cp949.total(text.encode("cp949", "replace").translate(weights.cp949.table))
    total += pairs.pairs(digits)
    return max(1, (total + SCALE // 2) // SCALE)


def bytes_over_four(text: str) -> int:
    """Codex's rule, kept for comparison: UTF-8 bytes / 4, rounded up."""
    return (len(text.encode("utf-8", "surrogatepass")) + 3) // 4


def qwen_heuristic(text: str) -> int:
    """qwen-code's rule, kept for comparison: ASCII chars / 4 + 1.5 per other character."""
    non_ascii = len(text) - len(text.encode("ascii", "ignore"))
    return math.ceil((len(text) - non_ascii) / 4 + non_ascii * 1.5)
