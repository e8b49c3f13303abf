"""How close a vocabulary-based estimate can get to tiktoken (issue #15), ignoring speed.

    python bench/real_corpus.py       # once: build the corpus
    python bench/vocab_ceiling.py

The byte-class estimator (ctxd/tokens/estimator.py) misses the accuracy goals because a text's
bytes do not tell which words are in the encoding's vocabulary. This script measures what knowing
words buys, on the held-out text, in two ways, both cutting the text with the encoding's own
pattern first:

- the whole vocabulary: a piece that is a token counts one, any other is cut greedily into the
  longest tokens it starts with (not BPE's merge order);
- only the pieces seen at least twice in the training part of the corpus, with their exact counts
  (what a table shipped with ctxd could hold), and the byte-class estimator for any other piece.

It prints the held-out error per class against tiktoken, and how long the first took against
tiktoken itself. Neither is an estimator ctxd uses: the first needs the encoding's vocabulary
loaded, and in Python it is slower than tiktoken; the second is no better than the byte classes.
"""

from __future__ import annotations

import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

import regex

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from real_corpus import SAMPLES, load

from ctxd.tokens.encodings import load as load_encoding
from ctxd.tokens.estimator import estimate_tokens

PROFILE = {"o200k_base": "o200k", "cl100k_base": "cl100k"}
TABLE_MIN_SEEN = 2  # a training piece goes into the table when it was seen this often


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


def print_errors(title: str, errors: dict[str, list[float]], extra: str = "") -> None:
    means = {cls: sum(values) / len(values) for cls, values in sorted(errors.items())}
    print(f"\n{title}")
    for cls, mean in means.items():
        print(f"  {cls:<11}{mean * 100:6.2f}%")
    worst = max(means, key=means.get)
    print(f"  mean of classes {sum(means.values()) / len(means) * 100:.2f}%, worst class {worst} "
          f"{means[worst] * 100:.2f}%{extra}")


def main() -> int:
    if not SAMPLES.exists():
        print(f"{SAMPLES} is missing: build the corpus first with `python bench/real_corpus.py`")
        return 1
    train, rows = load("train"), load("heldout")
    for name, profile in PROFILE.items():
        encoding = load_encoding(name)
        pattern = regex.compile(encoding._pat_str)
        vocabulary = set(encoding._mergeable_ranks)
        longest = max(map(len, vocabulary))
        seen = Counter(piece for row in train for piece in pattern.findall(row["text"]))
        table = {piece: len(encoding.encode_ordinary(piece)) for piece, n in seen.items() if n >= TABLE_MIN_SEEN}
        counts: dict[str, Callable[[str], int]] = {
            "vocabulary": lambda piece: 1 if (data := piece.encode()) in vocabulary
            else greedy_tokens(data, vocabulary, longest),
            "table": lambda piece: table.get(piece) or estimate_tokens(piece, profile),
        }
        errors: dict[str, dict[str, list[float]]] = {method: defaultdict(list) for method in counts}
        spent = {"tiktoken": 0.0, "vocabulary": 0.0}
        for row in rows:
            start = time.process_time()
            true = len(encoding.encode_ordinary(row["text"]))
            middle = time.process_time()
            pieces = pattern.findall(row["text"])
            estimate = sum(map(counts["vocabulary"], pieces))
            spent["tiktoken"] += middle - start
            spent["vocabulary"] += time.process_time() - middle
            errors["vocabulary"][row["class"]].append(abs(estimate - true) / true)
            estimate = sum(map(counts["table"], pieces))
            errors["table"][row["class"]].append(abs(estimate - true) / true)
        print_errors(f"{name}: held-out error of a count with the whole vocabulary ({len(rows)} samples)",
                     errors["vocabulary"], f"; time {spent['vocabulary'] / spent['tiktoken']:.1f}x tiktoken's")
        print_errors(f"{name}: held-out error with a table of the {len(table)} pieces seen at least "
                     f"{TABLE_MIN_SEEN} times in training, byte classes for the rest", errors["table"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
