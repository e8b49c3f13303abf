"""Fit the C estimator's constants (ctxd/tokens/estimator.py's FAST) on the corpus's training part.

    python bench/real_corpus.py                  # once: build the corpus from registry packages
    python bench/fit_fastcount.py [--write]      # --write writes ctxd/tokens/fitted.json
    python bench/fit_fastcount.py --families [--claude-python PATH] [--write]

Two kinds of constants, per encoding, both fitted on the "train" samples only (bench_tokens.py
reports the held-out ones):

- ascii_base, ascii_per_byte: an ASCII piece that is not a token, of at most ascii_max bytes
  (chosen, not fitted: longer ones, German compounds say, are cut greedily) is counted from its
  length rather than cut greedily (cheaper, and about as good for English and code). Least
  squares of tiktoken's count of each such piece (cut with the encoding's own regex) on its bytes.
- scale: the whole count is scaled by scale / 1024, the factor within 0.95-1.05 that gives the
  least mean over text classes of the mean relative error (the Bloom filter's false positives and
  the greedy cut count a little low).

With --families, the other families (ctxd/tokens/families.py), against their exact counters
(Claude: ctok's counts from an interpreter that has it, on every 8th training sample): the scale
of each family's own table (its ASCII constants are cl100k's or o200k's, not refitted), and the
ratio (RATIOS) over the o200k or cl100k estimate, whichever fits better, that stands in for
families without a table or whose package is not installed.

Needs numpy and the `regex` module (installed with tiktoken).
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import numpy as np
import regex
from bench_families import claude_counts
from fitted_data import DATA
from fitted_data import write as write_part
from real_corpus import load

from ctxd.tokens import _fastcount, encodings, estimator
from ctxd.tokens.estimator import FAST, FastSpec


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
    table = estimator._build_table(spec._replace(scale=1024), name.startswith("o200k"))  # OpenAI's only
    by_class: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for row in rows:
        by_class[row["class"]].append((_fastcount.count(row["text"], table), len(enc.encode_ordinary(row["text"]))))

    def error(scale: int) -> float:
        return float(np.mean([np.mean([abs(((est * scale + 512) >> 10) - true) / true for est, true in pairs])
                              for pairs in by_class.values()]))

    return min(range(973, 1076), key=error)


def best_scale(pairs_by_class: dict[str, list[tuple[int, int]]], low: int, high: int) -> tuple[int, float]:
    """The scale (in 1/1024) in [low, high) with the least mean over classes of the mean relative
    error of round(estimate * scale / 1024) against the true count, and that error."""
    def error(scale: int) -> float:
        return float(np.mean([np.mean([abs(((est * scale + 512) >> 10) - true) / true for est, true in pairs])
                              for pairs in pairs_by_class.values()]))

    scale = min(range(low, high, 2), key=error)
    return scale, error(scale)


def fit_families(train: list[dict[str, str]], claude_python: str | None) -> tuple[dict[str, FastSpec],
                                                                                  dict[str, tuple[str, int]]]:
    """(FAST entries with refitted scales, RATIOS) for the non-OpenAI families."""
    from ctxd.tokens import families

    fast, ratios = dict(FAST), dict(estimator.RATIOS)
    truths: dict[str, tuple[list[dict[str, str]], list[int]]] = {}
    for name, family in families.FAMILIES.items():
        if family.hot_path:
            try:
                count = families.load(name).count_tokens
            except encodings.EncodingUnavailable as error:
                print(f"{name}: skipped ({error})")
                continue
            truths[family.profile] = (train, [count(row["text"]) for row in train])
    if claude_python:
        sub = train[::8]
        counts = claude_counts(claude_python, [row["text"] for row in sub])
        truths["claude"] = (sub, counts["claude-v3"])
        truths["claude-4.7"] = (sub, counts["claude-v4.7"])  # v4.8 is the same vocabulary
    for profile, (rows, truth) in truths.items():
        def pairs(estimate) -> dict[str, list[tuple[int, int]]]:
            by_class: dict[str, list[tuple[int, int]]] = defaultdict(list)
            for row, true in zip(rows, truth):
                if true:
                    by_class[row["class"]].append((estimate(row["text"]), true))
            return by_class

        fits = {base: best_scale(pairs(lambda t, b=base: estimator.estimate_tokens(t, b)), 700, 2400)
                for base in ("o200k", "cl100k")}
        base = min(fits, key=lambda b: fits[b][1])
        ratios[profile] = (base, fits[base][0])
        print(f"{profile}: ratio over {base} {fits[base][0]}/1024, train error {fits[base][1]:.1%}")
        if profile in fast:
            spec = fast[profile]._replace(scale=1024)
            table = estimator._build_table(spec, profile in estimator.O200K_SPLIT)
            scale, err = best_scale(pairs(lambda t: _fastcount.count(t, table)), 900, 1300)
            fast[profile] = spec._replace(scale=scale)
            print(f"{profile}: table scale {scale}/1024, train error {err:.1%}")
    return fast, ratios


def write_ratios(ratios: dict[str, tuple[str, int]], path: Path = DATA) -> None:
    """Replace the RATIOS in ctxd/tokens/fitted.json."""
    write_part("ratios", {profile: list(ratio) for profile, ratio in ratios.items()}, path)


def write(fast: dict[str, FastSpec], path: Path = DATA) -> None:
    """Replace the FAST constants in ctxd/tokens/fitted.json."""
    write_part("fast", {profile: list(spec) for profile, spec in fast.items()}, path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the constants into ctxd/tokens/fitted.json")
    parser.add_argument("--families", action="store_true", help="fit the non-OpenAI families instead")
    parser.add_argument("--claude-python", help="an interpreter with ctok (Python >= 3.12) for Claude's counts")
    parser.add_argument("--every", type=int, default=1, help="fit on every Nth training sample")
    args = parser.parse_args()
    if _fastcount is None:
        print("the C extension is not built: pip install -e . (or python setup.py build_ext --inplace)")
        return 1
    train = load("train")[:: args.every]
    if args.families:
        fast, ratios = fit_families(train, args.claude_python)
        if args.write:
            write(fast)
            write_ratios(ratios)
            print(f"wrote {DATA}")
        return 0
    fast = {}
    for profile, spec in FAST.items():
        if profile not in ("o200k", "cl100k"):
            fast[profile] = spec
            continue
        base, per_byte = ascii_model(spec.encoding, spec.ascii_max, train)
        spec = spec._replace(ascii_base=base, ascii_per_byte=per_byte)
        fast[profile] = spec._replace(scale=fit_scale(spec.encoding, spec, train))
        print(f"{profile}: {fast[profile]}")
    if args.write:
        write(fast)
        print(f"wrote {DATA}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
