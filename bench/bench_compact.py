"""Offline compaction quality: how many planted facts survive, at what token reduction.

Generates long coding sessions (deterministic, seeded) the size a thread reaches when it hits the
auto-compact limit of a 128k window: user requests, file reads, searches, test and build runs with
long logs, patches, and assistant commentary. Into them it plants facts a successor needs: the
files the agent touched, the error strings it saw, the constraints the user stated, and the
decisions taken. Each fact has a unique marker; a fact survives when its marker is still in the
text of the compacted history.

Two groups of facts are scored apart. Most live where masking keeps them (messages, tool calls, an
output's first error lines). The others live only deep inside old tool outputs, whose bodies
masking removes: an error a test run reported after its first three (`output error`), and a file
found by a search, named nowhere else (`output path`, the search's definition hit). Only what a
placeholder quotes (a few distinct error lines, the definitions a search found) and what the
extractive summary picks out carry them.

Strategies compared on the same sessions, in the same run:
- `offline`: ctxd's offline compaction (masking, then the extractive handoff summary);
- `tail` (baseline): keep the newest items that fit in the same number of tokens as `offline`'s
  result, i.e. what dropping the oldest history achieves at the same reduction;
- `mask-only`: only the first step of `offline` (all but the newest 3 tool outputs masked);
- `summary-only`: only the second step (the extractive summary), at the 4x target;
- `offline Nx` / `tail Nx`: both under a harder target (1/N of the thread), where masking is not
  enough and the summary has to choose what to keep.

A second scenario compacts twice (the session goes on after the first compaction until it is full
again) and counts the facts of both halves, which tests that summaries carry forward.

    python bench/bench_compact.py [--sessions 20] [--seed 7]

Goal: offline keeps >= 95% of each group of facts at >= 4x reduction, in both rounds. The floor is
`tail` at the same size; the ratio is offline's share of facts over tail's.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ctxd.compact import compact
from ctxd.compact.model import drop_oldest
from ctxd.compact.offline import history_tokens, mask_tool_outputs, offline_compact
from ctxd.ledger.truncation import truncate_tool_output
from ctxd.settings import Settings
from ctxd.tokens.approx import item_tokens

sys.path.insert(0, str(Path(__file__).resolve().parent))
from table import Row, report

CONTEXT_WINDOW = 128_000
FILL_TOKENS = 118_000  # a little over 0.9 x 128k: where auto-compaction fires
OUTPUT_KINDS = ("output error", "output path")  # facts only the summary can carry out of a masked output
FACTORS = (10, 50, 100)  # harder targets than 4x, to show where the summary starts to lose facts
WORDS = ["cache", "config", "handler", "worker", "queue", "retry", "token", "session", "client", "server", "parser", "index", "request", "response", "schema", "model", "route", "store", "lock", "event", "stream", "buffer", "batch", "job"]
PACKAGES = ("api", "core", "billing", "auth", "sync", "storage", "cli", "web", "jobs", "metrics")
FILLER = [
    "Let me look at how this is wired up before changing anything.",
    "The handler reads its settings once at start-up.",
    "That output is long; the interesting part is near the end.",
    "Now the tests for this module.",
    "I will use rg to find the other call sites.",
    "This should be a small change.",
    "The fixture builds a fresh database for every test.",
    "OK, that part works now.",
    "Next I'll check the error path.",
    "Looking at the git history of this file for context.",
]


@dataclass
class Fact:
    kind: str
    marker: str
    phase: int = 1


@dataclass
class Session:
    items: list[dict[str, Any]] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)


def hexid(rng: random.Random, n: int = 6) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def msg(role: str, text: str) -> dict[str, Any]:
    kind = "input_text" if role == "user" else "output_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


def shell(call_id: str, command: str) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": "shell",
            "arguments": json.dumps({"command": ["bash", "-lc", command], "workdir": "/repo"})}


def out(call_id: str, text: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": text}


class Generator:
    """Builds one session turn by turn, planting facts as it goes."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.session = Session()
        self.calls = 0
        self.phase = 1
        self.tokens = 0
        self.files = [self.new_path() for _ in range(40)]

    def new_path(self) -> str:
        r = self.rng
        return f"src/{r.choice(PACKAGES)}/{r.choice(WORDS)}_{hexid(r, 4)}.{r.choice(['py', 'py', 'ts', 'go'])}"

    def plant(self, kind: str, marker: str) -> str:
        self.session.facts.append(Fact(kind, marker, self.phase))
        return marker

    def add(self, *items: dict[str, Any]) -> None:
        # As ctxd/record would store them: tool outputs over 10k tokens are middle-truncated.
        stored = [truncate_tool_output(item, 10_000) for item in items]
        self.session.items.extend(stored)
        self.tokens += sum(item_tokens(item) for item in stored)

    def call_id(self) -> str:
        self.calls += 1
        return f"call_{self.calls}"

    # --- content -------------------------------------------------------------------------------

    def code(self, lines: int) -> str:
        r = self.rng
        body = []
        for n in range(lines):
            w1, w2 = r.choice(WORDS), r.choice(WORDS)
            body.append(r.choice([f"def {w1}_{w2}(self, {w2}):", f"    return self.{w1}.get({w2!r})",
                                  f"    {w1} = {w2}_factory({n})", f"# {w1} {w2} handling", "",
                                  f"    if not {w1}:", f"        raise ValueError('{w1} missing')"]))
        return "\n".join(body)

    def test_log(self, test_file: str, errors: list[str], noise: int) -> str:
        r = self.rng
        lines = ["============================= test session starts ==============================",
                 f"collected {r.randint(40, 300)} items", ""]
        for n in range(r.randint(80, 260)):
            lines.append(f"{test_file}::test_{r.choice(WORDS)}_{n} PASSED{' ' * r.randint(1, 20)}[{n % 100:>3}%]")
        for _ in range(noise):
            lines.append(f"WARNING: DeprecationWarning: {r.choice(WORDS)}_{hexid(r)} is deprecated")
        for error in errors:
            lines += ["", "_" * 30 + f" test_{r.choice(WORDS)} " + "_" * 30, self.code(6), f"E   {error}"]
        status = f"{len(errors)} failed, " if errors else ""
        lines.append(f"=========== {status}{r.randint(40, 300)} passed in {r.random() * 20:.2f}s ===========")
        return "\n".join(lines)

    def error(self) -> str:
        r = self.rng
        h = hexid(r)
        return r.choice([
            f"KeyError: 'tenant_{h}'",
            f"AssertionError: expected status 200, got 503 from /v1/{r.choice(WORDS)}_{h}",
            f"TypeError: {r.choice(WORDS)}_{h}() missing 1 required positional argument: 'ctx'",
            f"sqlite3.OperationalError: no such column: {r.choice(WORDS)}_{h}",
            f"ModuleNotFoundError: No module named '{r.choice(WORDS)}_{h}'",
            f"error[E0382]: borrow of moved value: `cfg_{h}`",
            f"TimeoutError: lock lease_{h} not acquired after 30s",
            f"npm ERR! code ERESOLVE: could not resolve peer_{h}",  # no error word the extractor keys on
            f"panic: runtime error: index out of range [{h}]",
        ])

    # --- turns ---------------------------------------------------------------------------------

    def user_turn(self, first: bool = False) -> None:
        r = self.rng
        parts = []
        if first:
            parts.append(f"We need to fix the flaky {r.choice(WORDS)} sync in {r.choice(PACKAGES)} and clean up its retries.")
        else:
            parts.append(r.choice(["Continue.", "Good, go on with the next part.", "What's left?",
                                   f"Also look at the {r.choice(WORDS)} module while you are there.",
                                   "Run the full test suite when that is done."]))
        if first or r.random() < 0.35:
            h = hexid(r)
            template, marker = r.choice([
                ("Please never modify the generated files under {}/.", f"gen/proto_{h}"),
                ("Keep compatibility with {} for the client library.", f"py3.9-{h}"),
                ("Don't add any dependency other than {}.", f"httpx-{h}"),
                ("The public function {} must keep its signature.", f"open_session_{h}"),
                ("Only use the {} database for manual checks.", f"staging-{h}"),
                ("I prefer small commits; prefix their messages with {}.", f"SYNC-{h}"),
                ("Tabs for indentation in {}, like the rest of that package.", f"fmt_{h}.cfg"),  # no cue word
            ])
            parts.append(template.format(self.plant("constraint", marker)))
        self.add(msg("user", " ".join(parts)))

    def assistant_note(self, decision: bool) -> None:
        r = self.rng
        text = [r.choice(FILLER), r.choice(FILLER)]
        if decision:
            h = hexid(r)
            template, marker = r.choice([
                ("Decision: switch the cache to {} and drop the TTL map.", f"lru-{h}"),
                ("I'll go with {} rather than a fixed sleep between retries.", f"backoff_{h}"),
                ("We settled on {} for the event payloads.", f"schema v{h}"),
                ("Root cause: the worker reuses {} after fork.", f"conn_pool_{h}"),
                ("The fix is to serialize access through {}.", f"mutex_{h}"),
                ("Switching the queue to {} now.", f"ringbuf_{h}"),  # no cue word
                ("{} it is: it copes with back-pressure.", f"Channel_{h}"),  # no cue word
            ])
            text.insert(1, template.format(self.plant("decision", marker)))
        self.add(msg("assistant", " ".join(text)))

    def read_file(self) -> None:
        r = self.rng
        path = r.choice(self.files)
        if r.random() < 0.5:
            self.plant("path", path)
        cid = self.call_id()
        self.add(shell(cid, f"sed -n '1,{r.randint(120, 400)}p' {path}"), out(cid, self.code(r.randint(150, 500))))

    def search(self) -> None:
        r = self.rng
        symbol = f"{r.choice(WORDS)}_{r.choice(WORDS)}"
        lines = [f"{r.choice(self.files)}:{r.randint(1, 900)}:    {symbol}({r.choice(WORDS)})"
                 for _ in range(r.randint(20, 120))]
        if r.random() < 0.4:  # the definition, in a file no call or message names
            path = self.plant("output path", self.new_path())
            lines.insert(r.randrange(len(lines) + 1), f"{path}:{r.randint(1, 900)}:def {symbol}(ctx, *args):")
        hits = "\n".join(lines)
        cid = self.call_id()
        self.add(shell(cid, f"rg -n '{symbol}' src/"), out(cid, hits))

    def run_tests(self) -> None:
        r = self.rng
        test_file = f"tests/test_{r.choice(WORDS)}.py"
        errors = [self.plant("error", self.error()) for _ in range(r.choice([0, 0, 1, 1, 2]))]
        if errors and r.random() < 0.5:  # the same failure, seen again
            errors.append(errors[0])
        if errors and r.random() < 0.3:  # a run with many failures: the later ones only in the body
            while len(set(errors)) < 3:
                errors.append(self.plant("error", self.error()))
            errors += [self.plant("output error", self.error()) for _ in range(r.randint(1, 2))]
        cid = self.call_id()
        log = self.test_log(test_file, errors, r.randint(0, 12))
        code = 1 if errors else 0
        self.add(shell(cid, f"pytest -q {test_file}"),
                 out(cid, json.dumps({"output": log, "metadata": {"exit_code": code, "duration_seconds": 3.2}})))

    def patch(self) -> None:
        r = self.rng
        path = r.choice(self.files) if r.random() < 0.7 else self.new_path()
        self.plant("path", path)
        cid = self.call_id()
        body = "\n".join(f"+{line}" for line in self.code(r.randint(10, 60)).splitlines())
        patch = f"*** Begin Patch\n*** Update File: {path}\n@@\n{body}\n*** End Patch"
        self.add({"type": "custom_tool_call", "call_id": cid, "name": "apply_patch", "input": patch},
                 {"type": "custom_tool_call_output", "call_id": cid,
                  "output": json.dumps({"output": f"Success. Updated the following files:\nM {path}\n",
                                        "metadata": {"exit_code": 0}})})

    def turn(self, first: bool = False) -> None:
        r = self.rng
        self.user_turn(first)
        for _ in range(r.randint(2, 6)):
            r.choice([self.read_file, self.read_file, self.search, self.run_tests, self.patch])()
            if r.random() < 0.5:
                self.assistant_note(decision=r.random() < 0.3)
        self.assistant_note(decision=r.random() < 0.3)

    def fill(self, tokens: int) -> None:
        first = not self.session.items
        self.tokens = history_tokens(self.session.items)
        while self.tokens < tokens:
            self.turn(first)
            first = False


# --- measuring -----------------------------------------------------------------------------------


def flat_text(items: list[dict[str, Any]]) -> str:
    """Every string in the items, so a marker is found whatever field holds it."""
    parts: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            parts.append(value)
        elif isinstance(value, dict):
            for inner in value.values():
                walk(inner)
        elif isinstance(value, list):
            for inner in value:
                walk(inner)

    walk(items)
    text = "\n".join(parts)
    # Tool outputs are often JSON inside a string: look inside them too.
    return text + "\n" + text.replace('\\"', '"').replace("\\n", "\n")


def kept(facts: list[Fact], items: list[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    text = flat_text(items)
    by_kind: dict[str, tuple[int, int]] = {}
    for fact in facts:
        hit, total = by_kind.get(fact.kind, (0, 0))
        by_kind[fact.kind] = (hit + (fact.marker in text), total + 1)
    return by_kind


def tail(items: list[dict[str, Any]], budget: int) -> list[dict[str, Any]]:
    out = list(items)
    while out and history_tokens(out) > budget:
        out, _ = drop_oldest(out)
    return out


@dataclass
class Tally:
    before: int = 0
    after: int = 0
    hits: dict[str, list[int]] = field(default_factory=dict)
    seconds: float = 0.0

    def add(self, before: int, after: int, by_kind: dict[str, tuple[int, int]]) -> None:
        self.before += before
        self.after += after
        for kind, (hit, total) in by_kind.items():
            acc = self.hits.setdefault(kind, [0, 0])
            acc[0] += hit
            acc[1] += total

    def fraction(self, *kinds: str) -> float:
        """The share of facts kept, of the given kinds (all kinds when none is given)."""
        pairs = [self.hits[k] for k in kinds if k in self.hits] if kinds else list(self.hits.values())
        hit, total = sum(p[0] for p in pairs), sum(p[1] for p in pairs)
        return hit / total if total else 1.0

    def reduction(self) -> float:
        return self.before / self.after if self.after else float("inf")


def run(sessions: int, seed: int) -> dict[str, Tally]:
    settings = Settings(context_window=CONTEXT_WINDOW)
    names = ("offline", "tail", "mask-only", "summary-only", *(f"{s} {f}x" for f in FACTORS for s in ("offline", "tail")),
             "offline x2", "tail x2")
    tallies = {name: Tally() for name in names}
    for n in range(sessions):
        gen = Generator(seed * 1000 + n)
        gen.fill(FILL_TOKENS)
        items, facts = gen.session.items, gen.session.facts
        before = history_tokens(items)

        started = time.perf_counter()
        result = compact(items, strategy="offline", settings=settings).items
        tallies["offline"].seconds += time.perf_counter() - started
        after = history_tokens(result)
        tallies["offline"].add(before, after, kept(facts, result))
        tallies["tail"].add(before, after, kept(facts, tail(items, after)))
        masked, _ = mask_tool_outputs(items)
        tallies["mask-only"].add(before, history_tokens(masked), kept(facts, masked))
        # The extractive summary on its own, and both steps under harder targets than 4x.
        limit = settings.compact_user_message_max_tokens
        summary = offline_compact(items, target_tokens=before // 4, user_message_max_tokens=limit, try_masking=False).items
        tallies["summary-only"].add(before, history_tokens(summary), kept(facts, summary))
        for factor in FACTORS:
            harder = offline_compact(items, target_tokens=before // factor, user_message_max_tokens=limit).items
            size = history_tokens(harder)
            tallies[f"offline {factor}x"].add(before, size, kept(facts, harder))
            tallies[f"tail {factor}x"].add(before, size, kept(facts, tail(items, size)))

        # Second round: the session goes on from the compacted history until it is full again.
        gen.phase = 2
        gen.session.items = list(result)
        gen.fill(FILL_TOKENS)
        before2 = history_tokens(gen.session.items)
        second = compact(gen.session.items, strategy="offline", settings=settings).items
        after2 = history_tokens(second)
        tallies["offline x2"].add(before2, after2, kept(gen.session.facts, second))
        # The baseline's second round starts from its own first-round result.
        base = tail(items, after) + gen.session.items[len(result):]
        tallies["tail x2"].add(history_tokens(base), after2, kept(gen.session.facts, tail(base, after2)))
    return tallies


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    tallies = run(args.sessions, args.seed)
    kinds = sorted(tallies["offline"].hits)
    kept_kinds = [k for k in kinds if k not in OUTPUT_KINDS]
    counts = {k: tallies["offline"].hits[k][1] for k in kinds}
    print(f"{args.sessions} sessions of ~{FILL_TOKENS // 1000}k tokens (seed {args.seed}); facts planted: "
          + ", ".join(f"{k} {n}" for k, n in counts.items()))
    header = f"{'strategy':<12} {'reduction':>9} {'facts':>7} {'in outputs':>10}  " + "  ".join(f"{k:>12}" for k in kinds)
    print(header)
    print("-" * len(header))
    for name, tally in tallies.items():
        cells = "  ".join(f"{tally.fraction(k):>12.1%}" for k in kinds)
        print(f"{name:<12} {tally.reduction():>8.1f}x {tally.fraction(*kept_kinds):>7.1%} "
              f"{tally.fraction(*OUTPUT_KINDS):>10.1%}  {cells}")
    offline = tallies["offline"]
    print(f"offline time per compaction {1000 * offline.seconds / args.sessions:.0f} ms")
    rows = []
    for group, label in ((kept_kinds, "facts masking keeps"), (OUTPUT_KINDS, "facts inside old tool outputs")):
        for name, base in (("offline", "tail"), ("offline x2", "tail x2")):
            ours, theirs = tallies[name].fraction(*group), tallies[base].fraction(*group)
            reduction = tallies[name].reduction()
            rows.append(Row(f"compaction{' (2nd round)' if 'x2' in name else ''}: {label}",
                            f"{ours:.1%} at {reduction:.1f}x", f"{theirs:.1%} (tail, same size)",
                            f"{ours / theirs:.1f}x" if theirs else "-", ">= 95% at >= 4x",
                            ours >= 0.95 and reduction >= 4))
    return report(rows)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
