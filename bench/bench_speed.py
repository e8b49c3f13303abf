"""ctxd's request speed against a floor that does not share its costs (issue #12, "Speed").

The floor is bench/floor_daemon.py: a minimal Python JSON-RPC daemon (LSP framing over stdio,
`json`, a SQLite WAL commit for a record). Both run as subprocesses, get the same requests from the
same client in the same run, taking turns call by call so machine noise falls on both (the growth's
two prompt sizes take turns in the same way, beside the floor's). The client
times a call from writing the request to having read the whole answer; it parses answers only
after the clock stops (the client's parsing is not the daemon's cost).

| figure | floor | goal |
|---|---|---|
| one-item durable `ctxd/record` | the floor's durable record | <= 2x |
| `ctxd/usage` on a 100k-item thread | the floor's usage round trip | <= 1.3x |
| `ctxd/prompt` of 100k items | the floor sending the same items back | <= 1.5x |
| `ctxd/prompt` growth, 25k to 100k items | the floor's own growth, same run (issue #27) | <= 1.1x |
| cold start to `initialize` answered | importing pygls' server (`from pygls.lsp.server import LanguageServer`) | <= 2x |

The client and both daemons run on one CPU (the client pins itself before spawning them; children
inherit it). A round trip is far shorter than a wake-up on another CPU of a virtual machine (0.1 to
0.2 ms here), and the scheduler places the two daemons as it likes: whichever sat beside the client
looked two to five times faster, and kept that place for the rest of the run. On one CPU both pay
the same. Printed without a goal: the 100k-item prompt with the client moved to another CPU,
beside a plain process that only moves as many bytes through a default pipe across CPUs.

The issue's reference for the cold start is "importing pygls alone", with ctxd then at 1.3x: a
daemon that imported pygls' server could only be 1.3x of that import, not of `import pygls`
(pygls 2's `__init__`, about a bare Python start), so the row compares with the server import.
Printed beside it, the stricter comparisons: the floor daemon's own cold start, `import pygls`,
and how long after spawning ctxd its first `ctxd/usage` is answered (it waits for the imports the
warm-up after `initialize` does).

    python bench/bench_speed.py [--items 100000] [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(REPO), str(HERE)]

from table import Row, ms, report

from tests.rpc import daemon_env

NOTIFICATION_MAX = 64 * 1024  # answers larger than this are never notifications
# Unmeasured prompts of each size first, by both daemons: the first few of a process (its heap and
# the client's growing to 25 MB answers) take up to three times as long as the rest.
WARM_UP_PROMPTS = 3


class Wire:
    """A synchronous LSP-framed client: one request at a time, no reader thread in between."""

    def __init__(self, cmd: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, cwd=str(REPO))
        self._ids = itertools.count(1)

    def send(self, message: dict[str, Any]) -> None:
        body = json.dumps(message).encode()
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        self.proc.stdin.flush()

    def _read(self) -> bytes:
        stream = self.proc.stdout
        assert stream is not None
        length = 0
        while True:
            line = stream.readline()
            if not line:
                raise RuntimeError(f"{self.proc.args} closed its output (exit {self.proc.poll()})")
            if line in (b"\r\n", b"\n"):
                break
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return stream.read(length)

    def call(self, method: str, params: Any) -> tuple[float, bytes]:
        """(seconds from sending to having read the answer, the answer's bytes)."""
        msg_id = next(self._ids)
        message = {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}
        start = time.perf_counter()
        self.send(message)
        while True:
            body = self._read()
            end = time.perf_counter()  # the answer's own parsing is the client's cost, not the daemon's
            if len(body) > NOTIFICATION_MAX:
                break
            parsed = json.loads(body)
            if "method" not in parsed:
                break
            if "id" in parsed:  # a request from the daemon: answer it, as an editor would
                self.send({"jsonrpc": "2.0", "id": parsed["id"], "result": None})
        return end - start, body

    def request(self, method: str, params: Any) -> Any:
        _, body = self.call(method, params)
        return result_of(body, method)

    def close(self) -> None:
        try:
            self.request("shutdown", None)
            self.send({"jsonrpc": "2.0", "method": "exit"})
            self.proc.wait(10)
        except (OSError, RuntimeError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


def result_of(body: bytes, method: str) -> Any:
    answer = json.loads(body)
    if "error" in answer:
        raise RuntimeError(f"{method}: {answer['error']}")
    return answer["result"]


def turn(i: int) -> list[dict[str, Any]]:
    """One turn as a reasoning model's agent records it: the reasoning item of a finished turn is
    left out of later prompts (as Codex does), so the 100k-item prompt is not a copy of the ledger."""
    return [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"please look at file_{i}.py"}]},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": f"Reading file_{i}.py first."}],
         "encrypted_content": "gAAAAB" + "x" * 64},
        {"type": "function_call", "call_id": f"c{i}", "name": "shell", "arguments": f'{{"cmd": "cat file_{i}.py"}}'},
        {"type": "function_call_output", "call_id": f"c{i}", "output": f"def f{i}():\n    return {i}\n" * 3},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": f"file_{i}.py looks fine"}]},
    ]


def thread_items(count: int) -> list[dict[str, Any]]:
    return list(itertools.islice(itertools.chain.from_iterable(turn(i) for i in itertools.count()), count))


def prompt_length(items: list[dict[str, Any]]) -> int:
    """How many items ctxd's prompt of `items` holds: all but the reasoning before the last user message."""
    last_user = max(i for i, item in enumerate(items) if item.get("role") == "user")
    return len(items) - sum(1 for item in items[:last_user] if item["type"] == "reasoning")


ONE_ITEM = {"type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": "I read src/app/config.py; the loader ignores the "
                         "TENANT variable, so tests/test_config.py fails on line 42. Next I will pass the "
                         "tenant through load_settings() and rerun the tests."}]}


Contender = tuple[Wire, dict[str, Any]]  # a daemon, and the params it is sent


def interleaved(contenders: dict[str, Contender], method: str, calls: int) -> dict[str, float]:
    """Median seconds per call for each contender, taking turns call by call (who goes first
    rotates): noise on this machine comes in phases longer than a call, and so falls on all."""
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    last: dict[str, bytes] = {}
    names = list(contenders)
    for n in range(calls):
        shift = n % len(names)
        for name in names[shift:] + names[:shift]:
            wire, params = contenders[name]
            seconds, last[name] = wire.call(method, params)
            samples[name].append(seconds)
    for body in last.values():  # an error would be fast and wrong: the answers must be results
        result_of(body, method)
    return {name: statistics.median(values) for name, values in samples.items()}


PYGLS_SERVER = "from pygls.lsp.server import LanguageServer"


def spawn_to_initialize(cmd: list[str], env: dict[str, str], init: dict[str, Any],
                        then: tuple[str, dict[str, Any]] | None = None) -> tuple[float, float]:
    """Seconds from spawning a daemon to having read its `initialize` answer, and (with `then`)
    to having read the answer to one more request."""
    start = time.perf_counter()
    wire = Wire(cmd, env)
    initialized = time.perf_counter() - start + wire.call("initialize", init)[0]
    answered = initialized
    if then is not None:
        wire.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        answered = initialized + wire.call(*then)[0]
    wire.close()
    return initialized, answered


def spawn_to_exit(code: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=str(REPO))
    return time.perf_counter() - start


def cold_start(env: dict[str, str], root: Path, repeat: int) -> dict[str, float]:
    """Median seconds to start each of: ctxd and the floor daemon (to `initialize` answered, and
    ctxd to its first `ctxd/usage` answered), `python -c 'import pygls'` and `python -c
    PYGLS_SERVER` (to exit); interleaved."""
    workspace = root / "ws"
    init = {"processId": None, "rootUri": workspace.as_uri(), "capabilities": {},
            "workspaceFolders": [{"uri": workspace.as_uri(), "name": workspace.name}]}
    first_usage = ("ctxd/usage", {"workspace": workspace.as_uri(), "thread": "cold"})
    samples: dict[str, list[float]] = {"ctxd": [], "ctxd usage": [], "floor": [], "import pygls": [],
                                       "pygls server": []}
    for n in range(repeat):
        initialized, answered = spawn_to_initialize([sys.executable, "-m", "ctxd"], env, init, first_usage)
        samples["ctxd"].append(initialized)
        samples["ctxd usage"].append(answered)
        samples["floor"].append(spawn_to_initialize([sys.executable, str(HERE / "floor_daemon.py"),
                                                     str(root / f"floor-cold-{n}")], env, init)[0])
        samples["import pygls"].append(spawn_to_exit("import pygls", env))
        samples["pygls server"].append(spawn_to_exit(PYGLS_SERVER, env))
    return {name: statistics.median(values) for name, values in samples.items()}


def fill(wire: Wire, params: dict[str, Any], items: list[dict[str, Any]]) -> None:
    for start in range(0, len(items), 2000):
        wire.request("ctxd/record", {**params, "items": items[start:start + 2000]})


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (run.py's default)")
    args = parser.parse_args(argv)
    spare_cpus = pin_to_one_cpu()
    calls, cold_repeats = (500, 5) if args.quick else (3000, 9)
    prompts = 15  # a prompt's time swings more than a small call's: as many with --quick
    big, quarter = thread_items(args.items), thread_items(args.items // 4)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="ctxd-bench-speed-") as tmp:
        root = Path(tmp)
        workspace = root / "ws"
        workspace.mkdir()
        env = daemon_env(root / "state")
        ctxd = Wire([sys.executable, "-m", "ctxd"], env)
        floor = Wire([sys.executable, str(HERE / "floor_daemon.py"), str(root / "floor")], env)
        wires = {"ctxd": ctxd, "floor": floor}
        try:
            ctxd.request("initialize", {"processId": None, "rootUri": workspace.as_uri(), "capabilities": {},
                                        "workspaceFolders": [{"uri": workspace.as_uri(), "name": "ws"}],
                                        "initializationOptions": {"ctxd": {"autoCompactTokenLimit": 0}}})
            ctxd.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
            floor.request("initialize", {})
            where = {"workspace": workspace.as_uri()}
            for wire in wires.values():
                fill(wire, {**where, "thread": "big"}, big)
                fill(wire, {**where, "thread": "quarter"}, quarter)

            def each(params: dict[str, Any]) -> dict[str, Contender]:
                return {name: (wire, params) for name, wire in wires.items()}

            record = interleaved(each({**where, "thread": "records", "items": [ONE_ITEM]}), "ctxd/record", calls)
            rows.append(ratio_row("one-item durable ctxd/record", record["ctxd"], record["floor"], 2.0))

            usage = interleaved(each({**where, "thread": "big"}), "ctxd/usage", calls)
            rows.append(ratio_row(f"ctxd/usage, {args.items // 1000}k-item thread", usage["ctxd"], usage["floor"], 1.3))

            # Both must send every item back, but ctxd leaves out finished turns' reasoning.
            expected = {"ctxd": prompt_length(big), "floor": len(big)}
            for name, wire in wires.items():
                for _ in range(WARM_UP_PROMPTS):
                    count = len(wire.request("ctxd/prompt", {**where, "thread": "big"})["items"])
                    if count != expected[name]:
                        raise RuntimeError(f"{name}: ctxd/prompt sent {count} items, not {expected[name]}")
                    wire.request("ctxd/prompt", {**where, "thread": "quarter"})
            # Both sizes in one run, taking turns: the growth compares two medians of one phase.
            prompt = interleaved({**each({**where, "thread": "big"}),
                                  **{f"{name} quarter": (wire, {**where, "thread": "quarter"})
                                     for name, wire in wires.items()}}, "ctxd/prompt", prompts)
            rows.append(ratio_row(f"ctxd/prompt, {args.items // 1000}k items", prompt["ctxd"], prompt["floor"], 1.5))
            growth = prompt["ctxd"] / prompt["ctxd quarter"]
            floor_growth = prompt["floor"] / prompt["floor quarter"]
            print(f"(ctxd's own growth {growth:.2f}x: {ms(prompt['ctxd quarter'])} at {args.items // 4000}k; "
                  f"the floor's {floor_growth:.2f}x)")
            rows.append(Row(f"ctxd/prompt growth, {args.items // 4000}k to {args.items // 1000}k items",
                            f"{growth:.2f}x", f"{floor_growth:.2f}x (floor daemon's growth)",
                            f"{growth / floor_growth:.2f}x", "<= 1.1x", growth <= 1.1 * floor_growth))
            if spare_cpus:
                across, plain = across_cpus(ctxd, {**where, "thread": "big"}, spare_cpus, prompts)
                print(f"(the client on another CPU: ctxd's {args.items // 1000}k-item prompt {ms(across)}; the same "
                      f"bytes through a default 64 KB pipe {ms(plain)}, {across / plain:.2f}x)")
        finally:
            for wire in wires.values():
                wire.close()
        cold = cold_start(daemon_env(root / "cold"), root, cold_repeats)
        started = cold["ctxd"]
        print(f"(cold starts: the floor daemon's {ms(cold['floor'])}, so ctxd's is {started / cold['floor']:.2f}x it; "
              f"`import pygls` {ms(cold['import pygls'])}; ctxd's first ctxd/usage answered {ms(cold['ctxd usage'])} "
              "after spawning it)")
        rows.append(Row("cold start to initialize answered", ms(started), f"{ms(cold['pygls server'])} (pygls server import)",
                        f"{started / cold['pygls server']:.2f}x", "<= 2x", started / cold["pygls server"] <= 2.0))
    return report(rows)


def pin_to_one_cpu() -> set[int]:
    """Run this process, and every process it spawns, on one CPU (see the module's docstring);
    return the other CPUs it could have used."""
    if not hasattr(os, "sched_setaffinity"):
        return set()
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    return cpus - {min(cpus)}


PIPE_WRITER = """
import sys
out, bodies = sys.stdout.buffer, {}
for line in sys.stdin.buffer:
    size = int(line)
    out.write(b"Content-Length: %d\\r\\n\\r\\n" % size)
    out.write(bodies.setdefault(size, b"x" * size))
    out.flush()
"""


def across_cpus(ctxd: Wire, params: dict[str, Any], spare_cpus: set[int], calls: int) -> tuple[float, float]:
    """Median seconds of `ctxd/prompt` with this client on another CPU than the daemon (where a
    scheduler with idle CPUs puts it), and of a plain process sending as many bytes through a pipe
    of the default size, also across CPUs: what ctxd's wider pipes (`ctxd.server.process.widen_pipes`) buy."""
    home = os.sched_getaffinity(0)
    writer = subprocess.Popen([sys.executable, "-c", PIPE_WRITER], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    os.sched_setaffinity(0, {min(spare_cpus)})
    try:
        prompt = [ctxd.call("ctxd/prompt", params) for _ in range(calls)]
        size = len(prompt[-1][1])
        plain = []
        for _ in range(calls):
            start = time.perf_counter()
            assert writer.stdin is not None and writer.stdout is not None
            writer.stdin.write(b"%d\n" % size)
            writer.stdin.flush()
            writer.stdout.readline()
            writer.stdout.readline()
            writer.stdout.read(size)
            plain.append(time.perf_counter() - start)
    finally:
        os.sched_setaffinity(0, home)
        writer.kill()
        writer.wait()
    return statistics.median(seconds for seconds, _ in prompt), statistics.median(plain)


def ratio_row(figure: str, measured: float, floor: float, goal: float) -> Row:
    ratio = measured / floor
    return Row(figure, ms(measured), f"{ms(floor)} (floor daemon)", f"{ratio:.2f}x", f"<= {goal:g}x", ratio <= goal)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
