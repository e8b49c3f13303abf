"""Estimator accuracy and speed against tiktoken, per text class, in one run.

    python bench/bench_tokens.py [--encoding o200k_base|cl100k_base] [--rounds N]

For each text class of bench/corpus/ (samples of about 1 KB, see corpus_samples.py) prints the
mean and worst relative error of ctxd's estimator, of bytes/4 (Codex) and of qwen-code's
ascii/4 + 1.5 per non-ASCII character, plus the estimator's speed relative to tiktoken measured
in the same run (same samples, one call per sample, best of N rounds). Goals: mean error <= 3%,
worst class <= 8%, >= 20x faster than tiktoken; the exit status is 1 when one is missed.

The estimator's weights were fitted on this same corpus, so these are in-sample figures;
`python bench/fit_estimator.py --cv 5` reports the error on held-out samples.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(ROOT.parent / "shared" / "tiktoken"))

import tiktoken
from corpus_samples import load_samples

from ctxd.tokens.estimator import bytes_over_four, estimate_tokens, qwen_heuristic

PROFILE = {"o200k_base": "o200k", "cl100k_base": "cl100k"}


def best_time(func: Callable[[str], int], texts: list[str], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for text in texts:
            func(text)
        best = min(best, time.perf_counter() - start)
    return best


GOAL_MEAN, GOAL_WORST, GOAL_SPEEDUP = 0.03, 0.08, 20.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encoding", default="o200k_base", choices=sorted(PROFILE))
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()

    enc = tiktoken.get_encoding(args.encoding)
    profile = PROFILE[args.encoding]
    samples = load_samples()
    truth = [len(enc.encode_ordinary(text)) for _, text in samples]
    methods: dict[str, Callable[[str], int]] = {
        "ctxd": lambda text: estimate_tokens(text, profile),
        "bytes/4": bytes_over_four,
        "qwen": qwen_heuristic,
    }
    errors: dict[str, dict[str, list[float]]] = {m: defaultdict(list) for m in methods}
    for (cls, text), true in zip(samples, truth):
        for name, func in methods.items():
            errors[name][cls].append(abs(func(text) - true) / true)

    classes = sorted({cls for cls, _ in samples})
    print(f"reference: tiktoken {args.encoding}; {len(samples)} samples, "
          f"{sum(len(t.encode()) for _, t in samples) / 1024:.0f} KiB; error = |est - true| / true")
    header = f"{'class':<18}{'n':>4}{'tokens':>8}" + "".join(f"{m + ' mean/worst':>22}" for m in methods)
    print(header)
    print("-" * len(header))
    for cls in classes:
        n = len(errors["ctxd"][cls])
        tokens = sum(t for (c, _), t in zip(samples, truth) if c == cls)
        row = f"{cls:<18}{n:>4}{tokens:>8}"
        for name in methods:
            errs = errors[name][cls]
            row += f"{sum(errs) / n * 100:>14.1f}% /{max(errs) * 100:>4.0f}%"
        print(row)
    print("-" * len(header))
    ctxd_means = [sum(errors["ctxd"][c]) / len(errors["ctxd"][c]) for c in classes]
    summary = f"{'mean of classes':<30}"
    worst = f"{'worst class (mean)':<30}"
    for name in methods:
        means = [sum(errors[name][c]) / len(errors[name][c]) for c in classes]
        summary += f"{sum(means) / len(means) * 100:>14.1f}%      "
        worst += f"{max(means) * 100:>14.1f}%      "
    print(summary)
    print(worst)

    texts = [text for _, text in samples]
    t_tik = best_time(enc.encode_ordinary, texts, args.rounds)
    t_est = best_time(methods["ctxd"], texts, args.rounds)
    t_b4 = best_time(bytes_over_four, texts, args.rounds)
    t_qwen = best_time(qwen_heuristic, texts, args.rounds)
    total = sum(len(t.encode()) for t in texts)
    print()
    print(f"speed (best of {args.rounds}, one call per sample):")
    for name, t in [("tiktoken", t_tik), ("ctxd", t_est), ("bytes/4", t_b4), ("qwen", t_qwen)]:
        print(f"  {name:<10}{t * 1e3:8.2f} ms  {total / t / 1e6:8.1f} MB/s  {t_tik / t:6.1f}x tiktoken")
    goals = [
        ("mean error", sum(ctxd_means) / len(ctxd_means) <= GOAL_MEAN),
        ("worst class", max(ctxd_means) <= GOAL_WORST),
        ("speed", t_tik / t_est >= GOAL_SPEEDUP),
    ]
    print("\ngoals: " + ", ".join(f"{name} {'met' if ok else 'MISSED'}" for name, ok in goals))
    return 0 if all(ok for _, ok in goals) else 1


if __name__ == "__main__":
    raise SystemExit(main())
