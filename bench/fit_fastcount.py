"""Fit the C estimator's constants (ctxd/tokens/estimator.py's FAST) on the corpus's training part.

    python bench/real_corpus.py                  # once: build the corpus from registry packages
    python bench/fit_fastcount.py [--write]      # --write edits ctxd/tokens/estimator.py

Two kinds of constants, per encoding, both fitted on the "train" samples only (bench_tokens.py
reports the held-out ones):

- ascii_base, ascii_per_byte: an ASCII piece that is not a token, of at most ascii_max bytes
  (chosen, not fitted: longer ones, German compounds say, are cut greedily) is counted from its
  length rather than cut greedily (cheaper, and about as good for English and code). Least
  squares of tiktoken's count of each such piece (cut with the encoding's own regex) on its bytes.
- scale: the whole count is scaled by scale / 1024, the factor within 0.95-1.05 that gives the
  least mean over text classes of the mean relative error (the Bloom filter's false positives and
  the greedy cut count a little low).

Needs numpy and the `regex` module (installed with tiktoken).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import numpy as np  # noqa: E402
import regex  # noqa: E402
from real_corpus import load  # noqa: E402

from ctxd.tokens import _fastcount, encodings, estimator  # noqa: E402
from ctxd.tokens.estimator import FAST, FastSpec  # noqa: E402


def ascii_model(name: str, ascii_max: int, rows: list[dict[str, str]]) -> tuple[int, int]:
    """(base, per byte) in 1/1024 tokens of an ASCII regex piece that is not a token."""
    enc = encodings.load(name)
    pattern, vocabulary = regex.compile(enc._pat_str), set(enc._mergeable_ranks)
    sizes, counts = [], []
    for row in rows:
        for piece in pattern.findall(row["text"]):
            data = piece.encode("utf-8", "surrogatepass")
            if piece.isascii() and not piece.isdigit() and len(data) <= ascii_max and data not in vocabulary:
                sizes.append(len(data))
                counts.append(len(enc.encode_ordinary(piece)))
    x = np.c_[np.ones(len(sizes)), sizes]
    base, per_byte = np.linalg.lstsq(x, np.array(counts, float), rcond=None)[0]
    return round(base * 1024), round(per_byte * 1024)


def fit_scale(name: str, spec: FastSpec, rows: list[dict[str, str]]) -> int:
    """The scale (in 1/1024) that gives the least mean over classes of the mean relative error."""
    enc = encodings.load(name)
    table = estimator._build_table(spec._replace(scale=1024), name.startswith("o200k"))
    by_class: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for row in rows:
        by_class[row["class"]].append((_fastcount.count(row["text"], table), len(enc.encode_ordinary(row["text"]))))

    def error(scale: int) -> float:
        return float(np.mean([np.mean([abs(((est * scale + 512) >> 10) - true) / true for est, true in pairs])
                              for pairs in by_class.values()]))

    return min(range(973, 1076), key=error)


def write(fast: dict[str, FastSpec]) -> None:
    """Replace the fitted block of ctxd/tokens/estimator.py."""
    path = Path(estimator.__file__)
    lines = "".join(f'    "{profile}": FastSpec("{s.encoding}", {s.log2_words}, {s.ascii_base}, {s.ascii_per_byte}, '
                    f"{s.ascii_max}, {s.scale}),\n" for profile, s in fast.items())
    block = f"FAST: Final[dict[str, FastSpec]] = {{\n{lines}}}\n"
    text = re.sub(r"FAST: Final\[dict\[str, FastSpec\]\] = \{\n.*?\n\}\n", lambda _: block, path.read_text(),
                  count=1, flags=re.S)
    path.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the constants into ctxd/tokens/estimator.py")
    args = parser.parse_args()
    if _fastcount is None:
        print("the C extension is not built: pip install -e . (or python setup.py build_ext --inplace)")
        return 1
    train = load("train")
    fast = {}
    for profile, spec in FAST.items():
        base, per_byte = ascii_model(spec.encoding, spec.ascii_max, train)
        spec = spec._replace(ascii_base=base, ascii_per_byte=per_byte)
        fast[profile] = spec._replace(scale=fit_scale(spec.encoding, spec, train))
        print(f"{profile}: {fast[profile]}")
    if args.write:
        write(fast)
        print(f"wrote {estimator.__file__}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
