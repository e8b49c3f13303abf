"""The token estimator's error on text it was not fitted on, and its speed, against tiktoken.

    python bench/bench_tokens.py [--encoding o200k_base|cl100k_base] [--folds 5] [--rounds 20]

Accuracy is held out: the samples of bench/corpus/ (whatever corpus_samples.load_samples() reads)
are split into K folds; for each fold the weights are refitted on the other folds with
fit_estimator.fit and scored on that fold, so no sample is scored by weights that saw it. The
shipped weights' error on the same samples is in-sample (they were fitted on them) and is printed
for reference only. Goals: held-out mean of the class means <= 3%, worst class <= 8%.

Speed: the estimator with its shipped weights against tiktoken's encode_ordinary, same samples,
one call per sample, best of N rounds, same run. Goal: >= 20x faster.

tiktoken's encoding is built as the daemon builds it (ctxd.tokens.encodings: the shipped files).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from corpus_samples import load_samples  # noqa: E402
from fit_estimator import fit, get_encoding, pair_counts  # noqa: E402
from table import Row, ms, report  # noqa: E402

from ctxd.tokens.estimator import SCALE, bytes_over_four, estimate_tokens, qwen_heuristic  # noqa: E402

PROFILE = {"o200k_base": "o200k", "cl100k_base": "cl100k"}
GOAL_MEAN, GOAL_WORST, GOAL_SPEEDUP = 0.03, 0.08, 20.0
RIDGE = 0.0003  # fit_estimator.py's default


def best_time(func: Callable[[str], int], texts: list[str], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for text in texts:
            func(text)
        best = min(best, time.perf_counter() - start)
    return best


def class_means(errors: dict[str, list[float]]) -> dict[str, float]:
    return {cls: sum(e) / len(e) for cls, e in sorted(errors.items())}


def held_out_errors(samples: list[tuple[str, str]], truth: list[int], encoding: str, folds: int) -> dict[str, list[float]]:
    """Each sample's relative error under weights fitted without its fold."""
    errors: dict[str, list[float]] = defaultdict(list)
    for k in range(folds):
        train = [s for i, s in enumerate(samples) if i % folds != k]
        weights = fit(train, encoding, RIDGE)
        for i, (cls, text) in enumerate(samples):
            if i % folds == k:
                estimate = sum(n * weights[c >> 4][c & 0xF] for c, n in pair_counts(text).items()) / SCALE
                errors[cls].append(abs(estimate - truth[i]) / truth[i])
    return errors


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encoding", default="o200k_base", choices=sorted(PROFILE))
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args(argv)

    enc = get_encoding(args.encoding)
    profile = PROFILE[args.encoding]
    samples = load_samples()
    truth = [len(enc.encode_ordinary(text)) for _, text in samples]
    held_out = class_means(held_out_errors(samples, truth, args.encoding, args.folds))
    methods: dict[str, Callable[[str], int]] = {
        "shipped (in-sample)": lambda text: estimate_tokens(text, profile),
        "bytes/4": bytes_over_four,
        "qwen": qwen_heuristic,
    }
    errors: dict[str, dict[str, list[float]]] = {m: defaultdict(list) for m in methods}
    for (cls, text), true in zip(samples, truth):
        for name, func in methods.items():
            errors[name][cls].append(abs(func(text) - true) / true)
    means = {name: class_means(errs) for name, errs in errors.items()}

    print(f"reference: tiktoken {args.encoding}; {len(samples)} samples, "
          f"{sum(len(t.encode()) for _, t in samples) / 1024:.0f} KiB; error = |est - true| / true, mean per class")
    columns = {f"held-out ({args.folds}-fold)": held_out, **means}
    print(f"{'class':<18}{'n':>4}" + "".join(f"{name:>22}" for name in columns))
    for cls in held_out:
        n = sum(1 for c, _ in samples if c == cls)
        print(f"{cls:<18}{n:>4}" + "".join(f"{col[cls] * 100:>21.1f}%" for col in columns.values()))
    print(f"{'mean of classes':<22}" + "".join(f"{sum(c.values()) / len(c) * 100:>21.1f}%" for c in columns.values()))
    print(f"{'worst class':<22}" + "".join(f"{max(c.values()) * 100:>21.1f}%" for c in columns.values()))

    texts = [text for _, text in samples]
    t_tik = best_time(enc.encode_ordinary, texts, args.rounds)
    t_est = best_time(methods["shipped (in-sample)"], texts, args.rounds)
    mean, worst = sum(held_out.values()) / len(held_out), max(held_out.values())
    b4 = means["bytes/4"]
    return report([
        Row(f"estimator held-out error, mean of classes ({args.encoding})", f"{mean:.1%}",
            f"{sum(b4.values()) / len(b4):.1%} (bytes/4)", f"{mean / (sum(b4.values()) / len(b4)):.2f}x",
            f"<= {GOAL_MEAN:.0%}", mean <= GOAL_MEAN),
        Row(f"estimator held-out error, worst class ({max(held_out, key=held_out.get)})", f"{worst:.1%}",
            f"{max(b4.values()):.1%} (bytes/4)", f"{worst / max(b4.values()):.2f}x", f"<= {GOAL_WORST:.0%}",
            worst <= GOAL_WORST),
        Row("estimator speed", ms(t_est), f"{ms(t_tik)} (tiktoken)", f"{t_tik / t_est:.1f}x faster",
            f">= {GOAL_SPEEDUP:g}x faster", t_tik / t_est >= GOAL_SPEEDUP),
    ])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
