"""Fit ctxd/estimator.py's weights against tiktoken on bench/corpus/.

    python bench/fit_estimator.py

Prints the WEIGHTS dict to paste into ctxd/estimator.py. Weighted least squares on the relative
error (each sample weighted by 1/true count, every text class weighted equally), solved with
plain normal equations (no numpy). The weights are then rounded to multiples of 1/SCALE one at a
time (at each step the one whose rounding costs least), refitting the others after each, which
loses far less than rounding them all at once.
"""

from __future__ import annotations

import math
import os
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(ROOT.parent / "shared" / "tiktoken"))

import tiktoken  # noqa: E402  (after TIKTOKEN_CACHE_DIR is set)

from corpus_samples import load_samples  # noqa: E402
from ctxd.estimator import CLASS_NAMES, CLASS_TABLE, FEATURES, PAIR_FEATURES, SCALE  # noqa: E402

ENCODINGS = {"o200k": "o200k_base", "cl100k": "cl100k_base"}


def feature_counts(text: str) -> list[float]:
    """The model's features, counted the slow and obvious way (the reference for the fast path)."""
    classes = text.encode("utf-8", "surrogatepass").translate(CLASS_TABLE)
    singles = Counter(classes)
    pairs = Counter(zip(b"\0" + classes, classes))
    out: list[float] = []
    for name in FEATURES:
        if name in PAIR_FEATURES:
            out.append(pairs[PAIR_FEATURES[name]])
        else:
            out.append(singles[CLASS_NAMES.index(name)])
    return out


def solve(a: list[list[float]], b: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting for the small normal-equation system."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(n):
            if r != col and m[col][col]:
                f = m[r][col] / m[col][col]
                m[r] = [x - f * y for x, y in zip(m[r], m[col])]
    return [m[i][n] / m[i][i] if m[i][i] else 0.0 for i in range(n)]


def least_squares(rows: list[list[float]], ys: list[float], ws: list[float], fixed: dict[int, float]) -> list[float]:
    """Minimise sum(w * (row . coef - y)^2) with some coefficients held at fixed values."""
    free = [i for i in range(len(rows[0])) if i not in fixed]
    ata = [[0.0] * len(free) for _ in free]
    atb = [0.0] * len(free)
    for row, y, w in zip(rows, ys, ws):
        rest = y - sum(row[i] * v for i, v in fixed.items())
        for a, i in enumerate(free):
            atb[a] += w * row[i] * rest
            for b, j in enumerate(free):
                ata[a][b] += w * row[i] * row[j]
    coef = dict(zip(free, solve(ata, atb)))
    coef.update(fixed)
    return [coef[i] for i in range(len(rows[0]))]


def fit(samples: list[tuple[str, str]], encoding: str) -> tuple[int, ...]:
    enc = tiktoken.get_encoding(encoding)
    per_class = Counter(cls for cls, _ in samples)
    rows = [feature_counts(text) for _, text in samples]
    ys = [float(len(enc.encode_ordinary(text))) for _, text in samples]
    ws = [1.0 / (per_class[cls] * y * y) for (cls, _), y in zip(samples, ys)]
    fixed: dict[int, float] = {}
    while len(fixed) < len(FEATURES):
        coef = least_squares(rows, ys, ws, fixed)
        best: tuple[float, int, float] | None = None
        for i in range(len(coef)):
            if i in fixed:
                continue
            for value in (math.floor(coef[i] * SCALE) / SCALE, math.ceil(coef[i] * SCALE) / SCALE):
                trial = least_squares(rows, ys, ws, {**fixed, i: value})
                loss = sum(w * (sum(r * c for r, c in zip(row, trial)) - y) ** 2 for row, y, w in zip(rows, ys, ws))
                if best is None or loss < best[0]:
                    best = (loss, i, value)
        assert best is not None
        fixed[best[1]] = best[2]
    return tuple(round(fixed[i] * SCALE) for i in range(len(FEATURES)))


def main() -> None:
    samples = load_samples()
    print("WEIGHTS: Final[dict[str, tuple[int, ...]]] = {")
    for profile, encoding in ENCODINGS.items():
        print(f'    "{profile}": {fit(samples, encoding)},')
    print("}")


if __name__ == "__main__":
    main()
