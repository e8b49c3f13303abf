"""The token corpus split into samples, shared by the fit script, the benchmark and the tests.

Each file in `corpus/` is one text class (all `code_*` files form the class `code`). A file is
cut at form feeds when it has them (generated files: one tool output per sample), otherwise at
blank lines; consecutive blocks are joined until a sample holds at least `min_bytes` of UTF-8,
about the size of a typical ledger item.
"""

from __future__ import annotations

from pathlib import Path

CORPUS = Path(__file__).parent / "corpus"
MIN_BYTES = 1000


def text_class(path: Path) -> str:
    name = path.stem
    return "code" if name.startswith("code_") else name


def load_samples(min_bytes: int = MIN_BYTES) -> list[tuple[str, str]]:
    """[(class, text)] in a stable order."""
    samples: list[tuple[str, str]] = []
    for path in sorted(CORPUS.glob("*.txt")):
        text = path.read_text(encoding="utf-8")
        blocks = [b.strip("\n") for b in text.split("\f")] if "\f" in text else text.split("\n\n")
        current = ""
        for block in blocks:
            current = f"{current}\n\n{block}" if current else block
            if len(current.encode()) >= min_bytes:
                samples.append((text_class(path), current))
                current = ""
        if current.strip():
            samples.append((text_class(path), current))
    return samples
