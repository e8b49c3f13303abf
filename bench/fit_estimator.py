"""Fit ctxd/estimator.py's weights against tiktoken on bench/corpus/.

    python bench/fit_estimator.py [--ridge 0.01]

Prints the WEIGHTS dict to paste into ctxd/estimator.py. The model: the cost of a byte is the
weight of its class plus a correction for the (previous class, class) pair. Least squares on the
relative error (each sample weighted by 1/true count, every text class weighted equally), with a
ridge penalty on the pair corrections so that pairs seen in few samples stay near their class's
weight; plain normal equations, no numpy. The weights are then rounded to multiples of 1/SCALE
and nudged by one unit at a time, most frequent pairs first, while that lowers the error.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from corpus_samples import load_samples

from ctxd.tokens import encodings
from ctxd.tokens.estimator import CLASS_TABLE, DIGIT, LOWER, N_CLASSES, SCALE, UPPER

# tiktoken's encodings, built from the files the install ships (as the daemon builds them), once each.
get_encoding = functools.lru_cache(encodings.load)

ENCODINGS = {"o200k": "o200k_base", "cl100k": "cl100k_base"}
LOWEST = -8  # lowest weight, in 1/SCALE tokens
RUN_FLOOR = 2  # lowest weight of a letter or digit after one of its own class


def pair_counts(text: str) -> Counter[int]:
    """How often each pair code (previous class << 4 | class) occurs: the slow, obvious way, and
    the reference the fast path in ctxd/estimator.py is tested against."""
    classes = text.encode("utf-8", "surrogatepass").translate(CLASS_TABLE)
    return Counter(prev << 4 | cls for prev, cls in zip(b"\0" + classes, classes))


def solve(a: list[list[float]], b: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[pivot] = m[pivot], m[col]
        if not m[col][col]:
            continue
        for r in range(col + 1, n):
            f = m[r][col] / m[col][col]
            if f:
                row, top = m[r], m[col]
                for c in range(col, n + 1):
                    row[c] -= f * top[c]
    x = [0.0] * n
    for i in reversed(range(n)):
        if m[i][i]:
            x[i] = (m[i][n] - sum(m[i][j] * x[j] for j in range(i + 1, n))) / m[i][i]
    return x


def fit(samples: list[tuple[str, str]], encoding: str, ridge: float) -> list[list[int]]:
    enc = get_encoding(encoding)
    per_class = Counter(cls for cls, _ in samples)
    counts = [pair_counts(text) for _, text in samples]
    ys = [float(len(enc.encode_ordinary(text))) for _, text in samples]
    ws = [1.0 / (per_class[cls] * y * y) for (cls, _), y in zip(samples, ys)]
    codes = sorted({code for c in counts for code in c})
    # Unknowns: one weight per class, then one correction per pair code seen.
    names = [("class", k) for k in range(N_CLASSES)] + [("pair", code) for code in codes]
    rows = []
    for c in counts:
        row = [0.0] * len(names)
        for code, n in c.items():
            row[code & 0xF] += n
            row[N_CLASSES + codes.index(code)] += n
        rows.append(row)
    size = len(names)
    ata = [[0.0] * size for _ in range(size)]
    atb = [0.0] * size
    for row, y, w in zip(rows, ys, ws):
        nz = [(i, v) for i, v in enumerate(row) if v]
        for i, vi in nz:
            atb[i] += w * vi * y
            for j, vj in nz:
                ata[i][j] += w * vi * vj
    scale = sum(ata[i][i] for i in range(size)) / size
    for i in range(size):
        ata[i][i] += scale * ridge
    coef = solve(ata, atb)

    # The estimator keeps weight + offset in a byte: clamp to a span of 255 units.
    def clamp(value: float) -> int:
        return max(LOWEST, min(LOWEST + 255, round(value * SCALE)))

    weights = [[clamp(coef[cls]) for cls in range(N_CLASSES)] for _ in range(N_CLASSES)]
    for i, code in enumerate(codes):
        prev, cls = code >> 4, code & 0xF
        weights[prev][cls] = clamp(coef[cls] + coef[N_CLASSES + i])

    def loss() -> float:
        return sum(w * (sum(n * weights[code >> 4][code & 0xF] for code, n in c.items()) / SCALE - y) ** 2
                   for c, y, w in zip(counts, ys, ws))

    # A run of one class (a long word, a hex string, digits) still costs something: BPE cuts long
    # chunks. The corpus's ordinary words alone would let these weights fall to zero.
    for cls in (LOWER, UPPER, DIGIT):
        weights[cls][cls] = max(weights[cls][cls], RUN_FLOOR)

    frequency = Counter()
    for c in counts:
        frequency.update(c)
    best = loss()
    for _ in range(3):
        for code, _n in frequency.most_common():
            prev, cls = code >> 4, code & 0xF
            for step in (1, -1):
                floor = RUN_FLOOR if prev == cls and cls in (LOWER, UPPER, DIGIT) else LOWEST
                if not floor <= weights[prev][cls] + step <= LOWEST + 255:
                    continue
                weights[prev][cls] += step
                trial = loss()
                if trial < best:
                    best = trial
                    break
                weights[prev][cls] -= step
    return weights


def cross_validate(samples: list[tuple[str, str]], ridge: float, folds: int) -> None:
    """Fit on all folds but one, measure on that one: the error to expect on unseen text."""
    for profile, encoding in ENCODINGS.items():
        enc = get_encoding(encoding)
        errors: dict[str, list[float]] = {}
        for k in range(folds):
            train = [s for i, s in enumerate(samples) if i % folds != k]
            weights = fit(train, encoding, ridge)
            for i, (cls, text) in enumerate(samples):
                if i % folds == k:
                    est = sum(n * weights[c >> 4][c & 0xF] for c, n in pair_counts(text).items()) / SCALE
                    true = len(enc.encode_ordinary(text))
                    errors.setdefault(cls, []).append(abs(est - true) / true)
        means = {cls: sum(e) / len(e) for cls, e in sorted(errors.items())}
        print(f"{profile}: {folds}-fold mean error {sum(means.values()) / len(means) * 100:.1f}%, worst class "
              f"{max(means.values()) * 100:.1f}% | " + " ".join(f"{c}={m * 100:.1f}%" for c, m in means.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ridge", type=float, default=0.0003)
    parser.add_argument("--cv", type=int, default=0, metavar="K",
                        help="instead of printing weights, report the K-fold cross-validated error")
    args = parser.parse_args()
    samples = load_samples()
    if args.cv:
        cross_validate(samples, args.ridge, args.cv)
        return
    print("WEIGHTS: Final[dict[str, tuple[tuple[int, ...], ...]]] = {")
    for profile, encoding in ENCODINGS.items():
        weights = fit(samples, encoding, args.ridge)
        print(f'    "{profile}": (')
        for row in weights:
            print(f"        ({', '.join(str(w) for w in row)}),")
        print("    ),")
    print("}")


if __name__ == "__main__":
    main()
