"""Run every benchmark in this folder, one after another, and print their tables.

Each benchmark measures its own baseline in the same run and prints ratios, so the figures hold
on a noisy machine. Run: python bench/run.py [name ...]   (e.g. `python bench/run.py spine tokens`)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    names = argv or sorted(p.stem.removeprefix("bench_") for p in HERE.glob("bench_*.py"))
    missed = []
    for name in names:
        script = HERE / f"bench_{name}.py"
        print(f"\n=== {name} ({script.name}) ===", flush=True)
        if subprocess.run([sys.executable, str(script)]).returncode != 0:
            missed.append(name)
    if missed:
        print(f"\nmissed a goal or failed: {', '.join(missed)}")
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
