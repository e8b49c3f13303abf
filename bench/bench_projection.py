"""The projection's growth with a ledger's length, timed (tests/test_units.py counts it instead).

`ctxd.ledger.projection.project` over a ledger whose calls lack half their outputs (so the full
projection runs: outputs are synthesized, finished turns' reasoning dropped), at 5k and at 40k
turns. Its growth between the two sizes is compared with the growth of a floor over the same
items, a plain linear pass that reads each item's type and call id into a set, measured in the
same run and taking turns with it; each is its fastest of the rounds. Linear, both grow about 8x; a projection that searched the list
for each call's output would grow about 64x. (`bench_speed.py` times `ctxd/prompt` through the
daemon, on a ledger that needs no repair.)

| figure | floor | goal |
|---|---|---|
| the projection's growth, 5k to 40k turns | the floor's own growth, same run | <= 1.5x |

    python bench/bench_projection.py [--rounds 9]
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from table import Row, report

from ctxd.ledger.projection import project

SMALL, LARGE = 20_000, 160_000
GOAL = 1.5


def ledger(turns: int) -> list[dict[str, Any]]:
    """Turns of tool calls, every other one without its output; a user message and a reasoning
    item every tenth turn (the shape of tests/test_units.py's counted ledger)."""
    items: list[dict[str, Any]] = []
    for i in range(turns):
        if i % 10 == 0:
            items.append({"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"turn {i}"}]})
            items.append({"type": "reasoning", "summary": [], "encrypted_content": "x"})
        items.append({"type": "function_call", "call_id": f"c{i}", "name": "shell", "arguments": '{"cmd": "ls"}'})
        if i % 2:
            items.append({"type": "function_call_output", "call_id": f"c{i}", "output": "ok"})
    return items


def floor(items: list[dict[str, Any]]) -> Any:
    """Two linear passes over the same items, as the projection makes: each one's type and call id
    into a set, then the position of each whose pair is in it."""
    seen = {(item.get("type"), item.get("call_id")) for item in items}
    return [index for index, item in enumerate(items) if (item.get("type"), item.get("call_id")) in seen]


def timed(fn: Callable[[list[dict[str, Any]]], Any], items: list[dict[str, Any]]) -> float:
    """Seconds of one call, the garbage collector held off (its passes land on either side)."""
    gc.collect()
    gc.disable()
    try:
        started = time.perf_counter()
        fn(items)
        return time.perf_counter() - started
    finally:
        gc.enable()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    sizes = {"small": ledger(SMALL), "large": ledger(LARGE)}
    runs: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds + 1):  # the first round warms up and is dropped
        for size, items in sizes.items():
            for name, fn in (("projection", project), ("floor", floor)):
                runs.setdefault((name, size), []).append(timed(fn, items))
    # The fastest of the rounds: on a shared machine the others carry other processes' time.
    fastest = {key: min(values[1:]) for key, values in runs.items()}
    growth = fastest[("projection", "large")] / fastest[("projection", "small")]
    floor_growth = fastest[("floor", "large")] / fastest[("floor", "small")]
    print(f"projection: {fastest[('projection', 'small')] * 1e3:.2f} ms at {SMALL // 1000}k turns, "
          f"{fastest[('projection', 'large')] * 1e3:.2f} ms at {LARGE // 1000}k; floor: "
          f"{fastest[('floor', 'small')] * 1e3:.2f} ms, {fastest[('floor', 'large')] * 1e3:.2f} ms")
    ratio = growth / floor_growth
    return report([Row(f"projection growth, {SMALL // 1000}k to {LARGE // 1000}k turns", f"{growth:.2f}x",
                       f"{floor_growth:.2f}x (linear pass)", f"{ratio:.2f}x", f"<= {GOAL:g}x", ratio <= GOAL)])


if __name__ == "__main__":
    raise SystemExit(main())
