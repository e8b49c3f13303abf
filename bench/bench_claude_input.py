"""Claude transcripts: what ctxd counts of each request against the input the API reported for it.

    python bench/bench_claude_input.py [TRANSCRIPT.jsonl ...] [--claude-home DIR]

For every main-chain request of a followed Claude Code transcript (an assistant message with
`usage`, counted once per `message.id`), the items the request carried are read as the daemon
mirrors them (ctxd/agents/claude.py) and counted with ctxd's Claude estimator for the message's
model (ctxd/tokens/catalog.py: the family's byte-class weights fitted against ctok). The API
reported `input_tokens + cache_creation_input_tokens + cache_read_input_tokens`.

- residual = reported - counted: the system prompt and the tools (which the transcript does not
  hold), plus the estimator's error. It should be the same on every request of a session.
- growth: between two consecutive requests of a session (no compaction between), what ctxd
  counted was added against what the API says was added. Its ratio is the estimator's error on the
  conversation itself, free of the system prompt: the figure this bench reports per generation
  (claude-v3: Claude 3 to Opus 4.6, claude-v4.7, claude-v4.8; ctxd/tokens/families.py).

Default transcripts: the ones the real agents wrote (tests/fixtures/agents), whose usage comes
from the scripted model server, so their figures check the method, not Claude's counts; pass
published transcripts or `--claude-home ~/.claude` for real ones. Goal: growth within 10% of the
API's on real transcripts (the estimator's held-out error is reported by bench_families.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from table import Row, report  # noqa: E402

from ctxd.agents.claude import ClaudeReader  # noqa: E402
from ctxd.tokens import families  # noqa: E402
from ctxd.tokens.counter import TOKENIZERS, count_item  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "agents"
GOAL = 0.10


def requests(path: Path) -> list[dict[str, Any]]:
    """Per main-chain request: model, what the API reported, what ctxd counts of the items it
    carried, and whether a compaction came before it since the previous request."""
    lines = path.read_bytes().splitlines(keepends=True)
    found: list[dict[str, Any]] = []
    seen: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / path.name
        copy.write_bytes(b"")
        reader = ClaudeReader(str(copy))
        compactions = 0
        with copy.open("ab") as out:
            for raw in lines:
                try:
                    rec = json.loads(raw)
                except ValueError:
                    rec = None
                message = rec.get("message") if isinstance(rec, dict) else None
                usage = message.get("usage") if isinstance(message, dict) else None
                key = message.get("id") if isinstance(message, dict) else None
                if (isinstance(rec, dict) and rec.get("type") == "assistant" and not rec.get("isSidechain")
                        and isinstance(usage, dict) and isinstance(key, str) and key not in seen
                        and message.get("model") != "<synthetic>"):
                    seen.add(key)
                    out.flush()
                    reader.read()  # the items before this reply: what its request carried
                    model = str(message.get("model") or "")
                    count = TOKENIZERS.counter(model).count
                    reported = sum(int(usage.get(k) or 0) for k in (
                        "input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
                    found.append({"model": model, "reported": reported,
                                  "counted": sum(count_item(item, count) for item in reader.session.items),
                                  "compacted": reader.session.compactions != compactions})
                    compactions = reader.session.compactions
                out.write(raw)
    return found


def transcripts(paths: list[str], claude_home: str | None) -> list[Path]:
    found = [Path(p) for p in paths]
    if claude_home:
        found += sorted((Path(claude_home).expanduser() / "projects").glob("*/*.jsonl"))
    return found or [FIXTURES / "claude-2.1.332.jsonl"]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", help="Claude Code transcripts (.jsonl)")
    parser.add_argument("--claude-home", help="measure every session under DIR/projects")
    args = parser.parse_args(argv)
    scripted = not args.paths and not args.claude_home
    residuals: dict[str, list[int]] = defaultdict(list)
    growth: dict[str, list[tuple[int, int]]] = defaultdict(list)
    by_model: dict[str, list[tuple[int, int]]] = defaultdict(list)
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for path in transcripts(args.paths, args.claude_home):
        previous: dict[str, Any] | None = None
        for request in requests(path):
            generation = families.family_for(request["model"]) or "unknown"
            residuals[generation].append(request["reported"] - request["counted"])
            total = totals[generation]
            total[0] += request["reported"]
            total[1] += request["counted"]
            total[2] += 1
            if previous is not None and previous["model"] == request["model"] and not request["compacted"]:
                step = (request["counted"] - previous["counted"], request["reported"] - previous["reported"])
                growth[generation].append(step)
                by_model[request["model"]].append(step)
            previous = request
    print(f"{'generation':<12} {'requests':>8} {'reported':>10} {'counted':>10} {'residual (median)':>18} "
          f"{'residual spread':>16} {'growth counted/API':>19}")
    rows: list[Row] = []
    for generation in sorted(totals):
        reported, counted, n = totals[generation]
        spread = max(residuals[generation]) - min(residuals[generation])
        added = sum(a for _, a in growth[generation])
        ratio = sum(c for c, _ in growth[generation]) / added if added > 0 else float("nan")
        median = statistics.median(residuals[generation])
        print(f"{generation:<12} {n:>8} {reported:>10,} {counted:>10,} {median:>18,.0f} {spread:>16,} {ratio:>19.3f}")
        label = "scripted fixture" if scripted else "transcripts"
        met = scripted or (added > 0 and abs(ratio - 1) <= GOAL)
        rows.append(Row(f"Claude {generation}: growth counted / API-reported ({label}, {n} requests)",
                        f"{ratio:.3f}", "API-reported growth", f"{ratio:.3f}",
                        "method check" if scripted else f"within {GOAL:.0%}", met))
    for model, steps in sorted(by_model.items()):
        added = sum(a for _, a in steps)
        if added > 0:
            print(f"  {model}: growth counted/API {sum(c for c, _ in steps) / added:.3f} over {len(steps)} steps")
    if scripted:
        print("(the fixture's usage comes from the scripted model server: these figures check the method only)")
    return report(rows)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
