"""Followed sessions (issue #16); every figure is measured against a floor from the same run.

1. Importing a 50 MB Codex rollout (CodexReader, from the file) vs `json.loads` over its lines
   (the bytes already in memory), in CPU time, best of 5. Goal ≤ 2×.
2. From a line appended to a followed rollout to `ctxd/usageChanged` on the wire of the real
   daemon, with 50 other sessions on disk. Goal: median ≤ 150 ms, p95 ≤ 400 ms. Floor printed
   for scale: a no-op round trip to the same daemon.
3. An idle daemon following 200 session files: its CPU time over a quiet interval, as a share of
   one core. Goal < 1%.
4. From a user turn appended to a followed rollout to its automatic checkpoint listed by
   `ctxd/ghost/list` (a 200-file repository). Goal: median <= 200 ms. Floor printed for scale: the
   same snapshot taken by `ctxd/ghost/snapshot`.

Run: python bench/bench_sessions.py [--mb 50] [--appends 40] [--idle-seconds 10]
Exits non-zero when a goal is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from table import Row, ms, report

from ctxd.agents.codex import CodexReader
from tests import session_fixtures as fx
from tests.ghost_repo import make_repo
from tests.rpc import Client, RpcError, start_daemon


def big_rollout(path: Path, megabytes: int, cwd: Path) -> int:
    """A realistic rollout: turns of user message, reasoning, shell calls with outputs, answers,
    token counts; about `megabytes` MB."""
    target = megabytes * 1024 * 1024
    records = fx.codex_session(cwd)
    size = 0
    n = 0
    with path.open("wb") as f:
        for r in records:
            f.write(json.dumps(r).encode() + b"\n")
        while size < target:
            ts = f"2025-10-03T11:{(n // 60) % 60:02d}:{n % 60:02d}.000Z"
            batch = fx.codex_turn(f"step {n}: refactor module_{n}.py", ts)
            for k in range(4):
                batch += fx.codex_tool_round(f"call_{n}_{k}", f"sed -n 1,200p module_{n}.py",
                                             f"def f_{n}_{k}(x):\n    return x + {k}\n" * 60, ts)
            batch.append(fx.codex_answer(f"Refactored module_{n}.py.", ts))
            batch.append(fx.codex_token_count(20_000 + n, {"input_tokens": 100 * n, "cached_input_tokens": 50 * n,
                                                           "output_tokens": 10 * n, "reasoning_output_tokens": n,
                                                           "total_tokens": 110 * n}, ts))
            data = b"".join(json.dumps(r).encode() + b"\n" for r in batch)
            f.write(data)
            size += len(data)
            n += 1
    return path.stat().st_size


def bench_import(tmp: Path, megabytes: int, rounds: int = 5) -> list[Row]:
    """The reader's parse of a whole rollout against `json.loads` of its lines. The rollout is
    taken in 50 slices of whole lines, and each slice is timed through both in turn (`json.loads`
    of its lines, then the reader reading it appended to its file), so that a machine whose speed
    drifts slows both alike; each round gives a ratio and the median counts."""
    path = tmp / "rollout-big.jsonl"
    size = big_rollout(path, megabytes, tmp)
    data = path.read_bytes()
    ends = [data.index(b"\n", size * k // 50) + 1 for k in range(1, 50)] + [size]
    slices = [data[start:end] for start, end in zip([0, *ends], ends) if end > start]
    clock = time.process_time  # CPU time of this one-threaded process: fair on a busy machine
    results = []  # (ratio, ours, floor) for each round
    for round_ in range(rounds):
        followed = tmp / f"rollout-import-{round_}.jsonl"
        followed.write_bytes(b"")
        reader = CodexReader(str(followed))
        floor = ours = 0.0
        with followed.open("ab") as out:
            for chunk in slices:
                start = clock()
                for line in chunk.split(b"\n"):
                    if line:
                        json.loads(line)
                floor += clock() - start
                out.write(chunk)
                out.flush()
                start = clock()
                reader.read()
                ours += clock() - start
        assert reader.offset == size and reader.session.baseline
        results.append((ours / floor, ours, floor))
    ratio, ours, floor = sorted(results)[(rounds - 1) // 2]
    ok = ratio <= 2.0
    print(f"1. import {size / 1e6:.1f} MB rollout ({len(reader.session.items)} items): {ours:.3f} s CPU; "
          f"json.loads over its lines {floor:.3f} s CPU; ratio {ratio:.2f}, the median of "
          f"{', '.join(f'{r:.2f}' for r, _, _ in results)} (goal <= 2) {'ok' if ok else 'MISS'}")
    return [Row(f"import a {size / 1e6:.0f} MB Codex rollout (CPU)", ms(ours), ms(floor) + " json.loads",
                f"{ratio:.2f}x", "<= 2x", ok)]


def _daemon(tmp: Path, ws: Path) -> tuple[Client, Path, Path]:
    codex_home, claude_home = tmp / "codex", tmp / "claude"
    state = tmp / "state"
    state.mkdir(exist_ok=True)
    client = start_daemon(state, env={"CODEX_HOME": str(codex_home), "CLAUDE_CONFIG_DIR": str(claude_home),
                                      "HOME": str(tmp)}, log_file=tmp / "daemon.log")
    client.initialize([ws], {"ghost": {"auto": "off"}})
    return client, codex_home, claude_home


def _wait_threads(client: Client, ws: Path, count: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        threads = client.request("ctxd/threads", {"workspace": ws.as_uri()})["threads"]
        if sum(1 for t in threads if t.get("source") in ("codex", "claude")) >= count:
            return
        time.sleep(0.2)
    raise SystemExit(f"the daemon did not follow {count} sessions in {timeout} s")


def bench_latency(tmp: Path, appends: int) -> list[Row]:
    ws = tmp / "ws-latency"
    ws.mkdir()
    codex_home = tmp / "codex"
    others = []
    for i in range(50):  # 50 other sessions on disk: 25 in the workspace, 25 elsewhere
        sid = f"0199a213-0000-7800-8aa1-{i:012d}"
        cwd = ws if i % 2 else tmp / "elsewhere"
        others.append(fx.write_jsonl(fx.codex_path(codex_home, sid), fx.codex_session(cwd, sid)))
    target = fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(ws))
    client, _, _ = _daemon(tmp, ws)
    try:
        _wait_threads(client, ws, 26)
        thread = f"codex:{fx.CODEX_ID}"
        floor = []
        for _ in range(20):
            start = time.perf_counter()
            try:
                client.request("ctxd/noSuchMethod", {})
            except RpcError:
                pass
            floor.append(time.perf_counter() - start)
        samples = []
        for n in range(appends):
            used = 30_000 + n * 7
            seen = len(client.notifications)
            line = json.dumps(fx.codex_token_count(used, {"input_tokens": used, "cached_input_tokens": 0,
                                                          "output_tokens": 300, "reasoning_output_tokens": 0,
                                                          "total_tokens": used + n},
                                                   "2025-10-03T12:00:00.000Z")).encode() + b"\n"
            start = time.perf_counter()
            with target.open("ab") as f:
                f.write(line)
            client.wait_for_notification("ctxd/usageChanged",
                                         lambda p: p.get("thread") == thread and p.get("usedTokens") == used,
                                         timeout=10, after=seen)
            samples.append(time.perf_counter() - start)
            time.sleep(0.15)  # past the 100 ms per-thread throttle, so each append is its own push
        samples.sort()
        median = statistics.median(samples)
        p95 = samples[int(0.95 * (len(samples) - 1))]
        noop = statistics.median(floor)
        print(f"2. append -> ctxd/usageChanged ({appends} appends, 50 other sessions on disk): median "
              f"{median * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms (goal <= 150 / <= 400 ms); "
              f"no-op round trip {noop * 1000:.2f} ms")
        return [Row("append -> ctxd/usageChanged, median (50 other sessions)", ms(median), ms(noop) + " no-op",
                    f"{median / noop:.0f}x", "<= 150 ms", median <= 0.150),
                Row("append -> ctxd/usageChanged, p95", ms(p95), ms(noop) + " no-op", f"{p95 / noop:.0f}x",
                    "<= 400 ms", p95 <= 0.400)]
    finally:
        client.shutdown(timeout=10)


def bench_idle(tmp: Path, seconds: float) -> list[Row]:
    ws = tmp / "ws-idle"
    ws.mkdir()
    codex_home = tmp / "codex-idle"
    for i in range(200):
        sid = f"0199a213-1111-7800-8aa1-{i:012d}"
        fx.write_jsonl(fx.codex_path(codex_home, sid), fx.codex_session(ws, sid))
    state = tmp / "state-idle"
    state.mkdir()
    client = start_daemon(state, env={"CODEX_HOME": str(codex_home), "CLAUDE_CONFIG_DIR": str(tmp / "claude-idle"),
                                      "HOME": str(tmp)}, log_file=tmp / "daemon-idle.log")
    try:
        client.initialize([ws], {"ghost": {"auto": "off"}})
        _wait_threads(client, ws, 200)
        time.sleep(float(os.environ.get("BENCH_IDLE_WARMUP", "2")))
        pid = client.daemon_pid

        def cpu() -> float:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

        before, start = cpu(), time.monotonic()
        time.sleep(seconds)
        share = (cpu() - before) / (time.monotonic() - start)
        ok = share < 0.01
        print(f"3. idle daemon following 200 session files: {share * 100:.2f}% of a core over {seconds:.0f} s "
              f"(goal < 1%) {'ok' if ok else 'MISS'}")
        return [Row("idle daemon following 200 session files", f"{share * 100:.2f}% CPU", "1 core",
                    f"{share:.4f}", "< 1%", ok)]
    finally:
        client.shutdown(timeout=10)


def bench_checkpoint(tmp: Path, turns: int) -> list[Row]:
    repo = make_repo(tmp / "repo-checkpoint")
    for i in range(200):
        repo.write(f"src/m{i}.py", f"def f{i}():\n    return {i}\n")
    repo.commit_all("files")
    ws = repo.root
    codex_home = tmp / "codex-checkpoint"
    rollout = fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(ws))
    state = tmp / "state-checkpoint"
    state.mkdir()
    client = start_daemon(state, env={"CODEX_HOME": str(codex_home), "CLAUDE_CONFIG_DIR": str(tmp / "claude-cp"),
                                      "HOME": str(tmp)}, log_file=tmp / "daemon-checkpoint.log")
    try:
        client.initialize([ws])
        _wait_threads(client, ws, 1)
        uri = ws.as_uri()
        floor = []
        for n in range(3):
            repo.write(f"src/m{n}.py", f"changed {n}\n")
            start = time.perf_counter()
            client.request("ctxd/ghost/snapshot", {"workspace": uri, "thread": "bench", "message": f"floor {n}"})
            floor.append(time.perf_counter() - start)
        samples = []
        for n in range(turns):
            repo.write(f"src/m{n}.py", f"turn {n}\n")  # something to capture each time
            label = f"turn {n} of the checkpoint bench"
            start, wall = time.perf_counter(), time.time()
            fx.append_jsonl(rollout, fx.codex_turn(label, "2025-10-03T13:00:00.000Z", cwd=str(ws)))
            found: list[dict] = []
            while not found:
                if time.perf_counter() - start > 10:
                    raise SystemExit(f"no checkpoint for {label!r} in 10 s")
                time.sleep(0.05)  # polling the list is the bench's cost; the snapshot's own time is read below
                found = [s for s in client.request("ctxd/ghost/list", {"workspace": uri})["snapshots"]
                         if s["message"] == label]
            # createdAt is stamped when the working tree has been captured (ctxd/ghost/commits.py).
            captured = datetime.fromisoformat(found[0]["createdAt"].replace("Z", "+00:00")).timestamp()
            samples.append(captured - wall)
        median = statistics.median(samples)
        ok = median <= 0.200
        snap = statistics.median(floor)
        print(f"4. user turn appended -> working tree captured by its automatic checkpoint ({turns} turns, 200-file repo): median "
              f"{median * 1000:.0f} ms, max {max(samples) * 1000:.0f} ms (goal <= 200 ms) {'ok' if ok else 'MISS'}; "
              f"ctxd/ghost/snapshot of the same tree {snap * 1000:.0f} ms")
        return [Row("user turn appended -> checkpoint captured, median", ms(median), ms(snap) + " snapshot",
                    f"{median / snap:.2f}x", "<= 200 ms", ok)]
    finally:
        client.shutdown(timeout=10)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=50)
    parser.add_argument("--appends", type=int, default=40)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--only", choices=("import", "latency", "idle", "checkpoint"))
    args = parser.parse_args()
    results: list[Row] = []
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        if args.only in (None, "import"):
            results += bench_import(tmp, args.mb)
        if args.only in (None, "latency"):
            results += bench_latency(tmp, args.appends)
        if args.only in (None, "idle"):
            results += bench_idle(tmp, args.idle_seconds)
        if args.only in (None, "checkpoint"):
            results += bench_checkpoint(tmp, args.turns)
    return report(results)


if __name__ == "__main__":
    raise SystemExit(main())
