"""History operations and their undo, at length (issue #36): many random sequences of record,
snapshot, compact (offline, auto, llm, remote against tests/fake_openai.py), rollback, restore with
and without the conversation, and undo of any earlier operation (or of a restore's safety
snapshot), each on a fresh thread of one real daemon, compared after every step with the reference
model of tests/history_model.py (tests/history_harness.py compares; the state machine of
tests/test_history_property.py is the short run of the same).

Counted, by the sequences they ended (a sequence stops at its first problem, as the model and the
daemon part there): disagreements with the model, duplicates (a user turn active twice), losses (a
recorded item in no listing) and unclear refusals (an undo refused with another code, or without
naming the operation to undo first). Every count must be 0.

Run: python bench/round3_history.py [--cycles 300] [--seed 1]
From bench/stress.py (or any driver): `history_storm(root, cycles)` returns the report,
`history_failed(report)` the goals it misses (empty when all are met).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fake_openai import FakeOpenAI  # noqa: E402
from tests.history_harness import STRATEGIES, HistoryHarness  # noqa: E402
from tests.rpc import start_daemon  # noqa: E402
from tests.test_codex_parity import KEY_ENV, llm_options  # noqa: E402

STEPS = 25  # per sequence
UNKNOWN = 10**9  # an operation id no thread has
KINDS = {"disagree": "disagreements", "duplicate": "duplicates", "lost": "losses", "unclear refusal": "unclear_refusals"}
EXAMPLES = 5


def _step(h: HistoryHarness, rng: random.Random) -> tuple[str, list[str]]:
    """One random step on `h`: what it was, and the problems it found."""
    ops = h.op_ids()
    choices = ["record", "record", "snapshot"]
    if h.turns:
        choices += ["compact", "compact", "rollback", "rollback"]
    if h.model.snapshots:
        choices += ["restore", "restore"]
    if h.restore_ops():
        choices += ["restore_undo_id"]
    if ops:
        choices += ["undo_in_effect", "undo_in_effect", "undo_older", "undo_any"]
    kind = rng.choice(choices)
    if kind == "record":
        count, size = rng.randint(1, 2), rng.choice([5, 150])
        return f"record({count}, {size})", h.record(count, size)
    if kind == "snapshot":
        return "snapshot()", h.snapshot()
    if kind == "compact":
        strategy = rng.choice(STRATEGIES)
        return f"compact({strategy})", h.compact(strategy)
    if kind == "rollback":
        turns = rng.randint(1, 3)
        return f"rollback({turns})", h.rollback(turns)
    if kind == "restore":
        commit, conversation = rng.choice(list(h.model.snapshots)), rng.random() < 0.7
        return f"restore({commit[:8]}, conversation={conversation})", h.restore(commit, conversation)
    if kind == "restore_undo_id":
        op = rng.choice(h.restore_ops())
        return f"restore_undo_id({op})", h.restore_undo_id(op)
    in_effect = [op.id for op in h.model.ops if op.in_effect]
    if kind == "undo_in_effect" and in_effect:
        target = rng.choice(in_effect)
    elif kind == "undo_older" and len(ops) > 1:
        target = rng.choice(ops[:-1])
    else:
        target = rng.choice([*ops, UNKNOWN])
    return f"undo({target})", h.undo(target)


def history_storm(root: Path, cycles: int, seed: int = 1) -> dict[str, Any]:
    """`cycles` random sequences of STEPS steps on one daemon in `root`; see the module's docstring."""
    folder, state = root / "ws", root / "state"
    folder.mkdir(parents=True, exist_ok=True)
    state.mkdir(parents=True, exist_ok=True)
    counts: Counter[str] = Counter({name: 0 for name in KINDS.values()})
    tally: Counter[str] = Counter()
    examples: list[dict[str, Any]] = []
    steps = 0
    started = time.monotonic()
    with FakeOpenAI() as fake:
        client = start_daemon(state, env=KEY_ENV, log_file=root / "daemon.log")
        try:
            client.initialize([folder], llm_options(fake))
            for cycle in range(cycles):
                rng = random.Random(seed * 1_000_003 + cycle)
                h = HistoryHarness(client, folder, f"storm-{seed}-{cycle}")
                done: list[str] = []
                for _ in range(STEPS):
                    try:
                        what, problems = _step(h, rng)
                        problems = problems or h.check()
                    except Exception as error:  # an answer the harness did not expect: the daemon's fault
                        what, problems = "(step)", [f"disagree: {type(error).__name__}: {error}"]
                    done.append(what)
                    steps += 1
                    if problems:
                        for kind in {_kind(problem) for problem in problems}:
                            counts[kind] += 1
                        if len(examples) < EXAMPLES:
                            examples.append({"seed": seed, "cycle": cycle, "steps": done, "problems": problems[:3]})
                        break
                tally.update(h.tally)
                client.notifications.clear()  # the usage pushes of a long run add up
        finally:
            if client.proc.poll() is None:
                client.shutdown(timeout=10)
    return {"cycles": cycles, "steps": steps, "seconds": round(time.monotonic() - started, 1), **counts,
            "did": dict(sorted(tally.items())), "examples": examples}


def _kind(problem: str) -> str:
    head = problem.split(":", 1)[0].removesuffix(" (model)")
    return KINDS.get(head, "disagreements")


def history_failed(report: dict[str, Any]) -> list[str]:
    """The goals `report` misses: every count is 0."""
    return [f"history storm: {report[name]} sequence(s) with {name.replace('_', ' ')}"
            for name in KINDS.values() if report.get(name)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ctxd-history-") as tmp:
        report = history_storm(Path(tmp), args.cycles, args.seed)
    print(json.dumps(report, indent=2))
    failed = history_failed(report)
    for line in failed:
        print(f"FAILED: {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
