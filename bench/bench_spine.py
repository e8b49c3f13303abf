"""Spine benchmarks, against the real daemon over stdio; every figure is a ratio to a baseline
measured in the same run.

1. `ctxd/usage` on a 100k-item ledger vs a no-op round trip (an unknown method). Goal ≤ 1.5×.
2. a durable `ctxd/record` vs shipping the same bytes to a no-op. Goal ≤ 3×.
3. `ctxd/prompt` (projection) at 100k items vs 25k items. Goal ≤ 5× (linear).

Run: python bench/bench_spine.py [--items 100000]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.rpc import Client, RpcError, start_daemon  # noqa: E402


def turn(i: int) -> list[dict]:
    return [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"please look at file_{i}.py"}]},
        {"type": "function_call", "call_id": f"c{i}", "name": "shell", "arguments": f'{{"cmd": "cat file_{i}.py"}}'},
        {"type": "function_call_output", "call_id": f"c{i}", "output": f"def f{i}():\n    return {i}\n" * 3},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": f"file_{i}.py looks fine"}]},
    ]


def fill(client: Client, ws: Path, thread: str, count: int) -> None:
    items: list[dict] = []
    i = 0
    while len(items) < count:
        items += turn(i)
        i += 1
    for start in range(0, count, 2000):
        client.request("ctxd/record", {"workspace": ws.as_uri(), "thread": thread, "items": items[start:start + 2000]}, timeout=120)


def per_call(client: Client, method: str, params: dict, repeat: int, expect_error: bool = False) -> float:
    """Median seconds per round trip over `repeat` sequential calls. The client's own garbage
    collector is paused while timing: parsing a 100k-item answer is the client's cost, not ctxd's."""
    gc.collect()
    gc.disable()
    try:
        return _per_call(client, method, params, repeat, expect_error)
    finally:
        gc.enable()


def _per_call(client: Client, method: str, params: dict, repeat: int, expect_error: bool) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        try:
            client.request(method, params, timeout=120)
        except RpcError:
            if not expect_error:
                raise
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        state, ws = Path(tmp) / "state", Path(tmp) / "ws"
        state.mkdir()
        ws.mkdir()
        client = start_daemon(state)
        client.initialize([ws], {"autoCompactTokenLimit": 0})  # measure projection, not compaction
        uri = ws.as_uri()
        try:
            fill(client, ws, "big", args.items)
            client.request("ctxd/reportTokenUsage", {"workspace": uri, "thread": "big",  # "actual" mode
                                                     "usage": {"inputTokens": 90_000, "totalTokens": 100_000}})
            fill(client, ws, "quarter", args.items // 4)
            rows = []

            noop = per_call(client, "bench/noop", {"workspace": uri}, 300, expect_error=True)
            usage = per_call(client, "ctxd/usage", {"workspace": uri, "thread": "big"}, 300)
            rows.append(("usage on %dk items vs no-op" % (args.items // 1000), usage, noop, 1.5))

            items = turn(10**6)
            payload = {"workspace": uri, "thread": "records", "items": items}
            noop_bytes = per_call(client, "bench/noop", payload, 300, expect_error=True)
            record = per_call(client, "ctxd/record", payload, 300)
            rows.append(("durable record vs same bytes to no-op", record, noop_bytes, 3.0))

            small = min(per_call(client, "ctxd/prompt", {"workspace": uri, "thread": "quarter"}, 3) for _ in range(2))
            large = min(per_call(client, "ctxd/prompt", {"workspace": uri, "thread": "big"}, 3) for _ in range(2))
            rows.append(("projection %dk vs %dk items" % (args.items // 1000, args.items // 4000), large, small, 5.0))
        finally:
            client.shutdown()

    print(f"{'benchmark':<42} {'measured':>12} {'baseline':>12} {'ratio':>7} {'goal':>6}")
    failed = 0
    for name, value, base, goal in rows:
        ratio = value / base
        failed += ratio > goal
        print(f"{name:<42} {value * 1e3:>10.3f}ms {base * 1e3:>10.3f}ms {ratio:>6.2f}x {'≤' + str(goal):>6} {'ok' if ratio <= goal else 'MISSED'}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
