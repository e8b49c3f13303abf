"""How close a vocabulary-based estimate can get to tiktoken (issue #15), ignoring speed.

    python bench/real_corpus.py       # once: build the corpus
    python bench/vocab_ceiling.py

The byte-class estimator (ctxd/tokens/estimator.py) misses the accuracy goals because a text's
bytes do not tell which words are in the encoding's vocabulary. This script measures what knowing
the vocabulary buys: cut the held-out text with the encoding's own pattern, count a piece that is a
token as one, and cut any other piece greedily into the longest tokens it starts with (not BPE's
merge order). It prints the held-out error per class against tiktoken and how long it took
against tiktoken itself. It is a measurement, not an estimator ctxd uses: it needs the encoding's
vocabulary loaded, and in Python it is slower than tiktoken.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from pathlib import Path

import regex

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from real_corpus import SAMPLES, load  # noqa: E402

from ctxd.tokens.encodings import load as load_encoding  # noqa: E402


def greedy_tokens(piece: bytes, vocabulary: set[bytes], longest: int) -> int:
    """Tokens of `piece` cut greedily into the longest vocabulary entries it starts with."""
    count = start = 0
    while start < len(piece):
        size = min(longest, len(piece) - start)
        while size > 1 and piece[start:start + size] not in vocabulary:
            size -= 1
        count += 1
        start += size
    return count


def main() -> int:
    if not SAMPLES.exists():
        print(f"{SAMPLES} is missing: build the corpus first with `python bench/real_corpus.py`")
        return 1
    rows = load("heldout")
    for name in ("cl100k_base", "o200k_base"):
        encoding = load_encoding(name)
        vocabulary = set(encoding._mergeable_ranks)
        longest = max(map(len, vocabulary))
        pattern = regex.compile(encoding._pat_str)
        errors: dict[str, list[float]] = defaultdict(list)
        spent = {"tiktoken": 0.0, "vocabulary": 0.0}
        for row in rows:
            start = time.process_time()
            true = len(encoding.encode_ordinary(row["text"]))
            middle = time.process_time()
            estimate = 0
            for piece in pattern.findall(row["text"]):
                data = piece.encode("utf-8")
                estimate += 1 if data in vocabulary else greedy_tokens(data, vocabulary, longest)
            spent["tiktoken"] += middle - start
            spent["vocabulary"] += time.process_time() - middle
            errors[row["class"]].append(abs(estimate - true) / true)
        means = {cls: sum(values) / len(values) for cls, values in sorted(errors.items())}
        print(f"\n{name}: held-out error of a vocabulary count ({len(rows)} samples)")
        for cls, mean in means.items():
            print(f"  {cls:<11}{mean * 100:6.2f}%")
        worst = max(means, key=means.get)
        print(f"  mean of classes {sum(means.values()) / len(means) * 100:.2f}%, worst class {worst} "
              f"{means[worst] * 100:.2f}%; time {spent['vocabulary'] / spent['tiktoken']:.1f}x tiktoken's")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
