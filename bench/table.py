"""The one table every benchmark reports in: figure, measured, floor, ratio, goal, met.

A benchmark builds its rows, calls `report(rows)`, and exits with what it returns (1 when a goal is
missed). When `BENCH_ROWS_FILE` is set (by run.py), the rows are also appended to that file as JSON
lines, so run.py can print all benchmarks' rows as one table.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

ROWS_FILE = "BENCH_ROWS_FILE"


@dataclass
class Row:
    figure: str
    measured: str
    floor: str
    """What the measurement is compared with, measured in the same run (or "-" when there is none)."""
    ratio: str
    goal: str
    met: bool


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms" if seconds < 1 else f"{seconds:.2f} s"


def print_table(rows: list[Row]) -> None:
    header = ("figure", "measured", "floor", "ratio", "goal", "met")
    cells = [header] + [(r.figure, r.measured, r.floor, r.ratio, r.goal, "yes" if r.met else "MISSED") for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for n, row in enumerate(cells):
        print("  ".join(cell.ljust(width) if i == 0 else cell.rjust(width) for i, (cell, width) in enumerate(zip(row, widths))))
        if n == 0:
            print("  ".join("-" * width for width in widths))


def report(rows: list[Row]) -> int:
    """Print the rows, hand them to run.py if it asked, and return the exit status (1 on a miss)."""
    print()
    print_table(rows)
    path = os.environ.get(ROWS_FILE)
    if path:
        with open(path, "a", encoding="utf-8") as out:
            for row in rows:
                out.write(json.dumps(asdict(row)) + "\n")
    return 0 if rows and all(row.met for row in rows) else 1


def read_rows(path: str) -> list[Row]:
    with open(path, encoding="utf-8") as source:
        return [Row(**json.loads(line)) for line in source if line.strip()]
