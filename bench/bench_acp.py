"""`ctxd acp` between an editor and an agent: what the proxy adds to each message, and to a write.

    python bench/bench_acp.py [--files 20000] [--changed 10] [--messages 400] [--rounds 30]

One client (an editor written out here) talks to the scripted ACP agent of tests/acp_agent.py
twice in the same run: directly (the floor), and through `ctxd acp`, with an editor's daemon of
the repository running (the owner, which watches the tree). Figures:

- per message: round trips of a request the agent answers at once (`_bench/echo`); the proxy
  adds (proxied - direct) / 2 to each message (a round trip is two). Goal: p50 <= 5 ms.
- a checkpointed write: in a repository of 20,000 committed files, each round the agent asks to
  edit a file, 10 files change meanwhile, the editor allows it, and the time from that answer to
  the agent's `fs/write_text_file` reaching the editor is taken. Through the proxy the answer
  waits for a checkpoint (the 10 changed files), the write for another (nothing changed since).
  Goal: p95 <= 150 ms through the proxy (as the hooks' goal with a daemon), and the direct
  time in the same run is shown as the floor.

The exit status is 1 on a miss.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from queue import Queue
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

from bench_ghost import ENV, generate  # noqa: E402
from bench_hooks import change, load_average, percentile  # noqa: E402
from table import Row, ms, report  # noqa: E402

from tests.rpc import start_daemon  # noqa: E402  (after the path tweak above)

AGENT = [sys.executable, str(ROOT / "tests" / "acp_agent.py")]
PROXY = [sys.executable, "-m", "ctxd", "acp", "--"]


class Editor:
    """The client: one request at a time, answers matched by id."""

    def __init__(self, command: list[str], env: dict[str, str], cwd: Path) -> None:
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=str(cwd))
        self.inbox: Queue[tuple[float, dict[str, Any]]] = Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.ids = 0

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.inbox.put((time.perf_counter(), json.loads(line)))

    def send(self, message: dict[str, Any]) -> float:
        assert self.proc.stdin is not None
        data = json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n"
        sent = time.perf_counter()
        self.proc.stdin.write(data)
        self.proc.stdin.flush()
        return sent

    def request(self, method: str, params: dict[str, Any]) -> tuple[float, int]:
        self.ids += 1
        return self.send({"id": self.ids, "method": method, "params": params}), self.ids

    def until(self, check: Any, timeout: float = 60.0) -> tuple[float, dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while True:
            at, message = self.inbox.get(timeout=max(0.01, deadline - time.monotonic()))
            if check(message):
                return at, message

    def call(self, method: str, params: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        sent, msg_id = self.request(method, params)
        at, message = self.until(lambda m: m.get("id") == msg_id and "method" not in m)
        return at - sent, message

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def session(editor: Editor, repo: Path) -> str:
    editor.call("initialize", {"protocolVersion": 1, "clientCapabilities": {"fs": {"writeTextFile": True}}})
    return str(editor.call("session/new", {"cwd": str(repo), "mcpServers": []})[1]["result"]["sessionId"])


def echoes(editor: Editor, count: int) -> list[float]:
    payload = {"text": "x" * 200, "n": 0}
    times = []
    for n in range(count):
        took, _ = editor.call("_bench/echo", {**payload, "n": n})
        times.append(took)
    return times


def writes(editor: Editor, sid: str, repo: Path, rounds: int, files: int, changed: int, first: int) -> list[float]:
    """Each round: the agent asks to edit a.txt, files change, the editor allows; the time from
    the answer to the agent's fs/write_text_file."""
    times = []
    for round_ in range(first, first + rounds):
        _, prompt_id = editor.request("session/prompt", {"sessionId": sid, "prompt": [
            {"type": "text", "text": f"write {repo / 'a.txt'} round {round_}"}]})
        _, asked = editor.until(lambda m: m.get("method") == "session/request_permission")
        change(repo, files, changed, round_)
        allowed = editor.send({"id": asked["id"], "result": {"outcome": {"outcome": "selected", "optionId": "yes"}}})
        arrived, write = editor.until(lambda m: m.get("method") == "fs/write_text_file")
        times.append(arrived - allowed)
        (repo / "a.txt").write_text(write["params"]["content"])
        editor.send({"id": write["id"], "result": {}})
        editor.until(lambda m: m.get("id") == prompt_id)
    return times


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--changed", type=int, default=10)
    parser.add_argument("--messages", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ctxd-bench-acp-") as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        generate(repo, args.files)
        (repo / "a.txt").write_text("start\n")
        env = {**{k: v for k, v in ENV.items() if k != "PYTHONDONTWRITEBYTECODE" and not k.startswith("CTXD_")},
               "PYTHONPATH": str(ROOT), "PYTHONPYCACHEPREFIX": str(Path(tmp) / "pycache"),
               "HOME": str(Path(tmp) / "home"), "XDG_STATE_HOME": str(Path(tmp) / "state"),
               "XDG_CONFIG_HOME": str(Path(tmp) / "config")}
        daemon = start_daemon(Path(env["XDG_STATE_HOME"]), env={"HOME": env["HOME"]})  # an editor has it open
        try:
            daemon.initialize([repo])
            figures: dict[str, dict[str, list[float]]] = {}
            for name, command in (("direct", AGENT), ("proxied", PROXY + AGENT)):
                editor = Editor(command, env, repo)
                try:
                    sid = session(editor, repo)
                    echoes(editor, 50)  # warm: imports, the owner's session
                    writes(editor, sid, repo, 3, args.files, args.changed, 10_000)  # the owner's watch starts
                    figures[name] = {"echo": echoes(editor, args.messages),
                                     "write": writes(editor, sid, repo, args.rounds, args.files, args.changed,
                                                     100 * (name == "proxied"))}
                finally:
                    editor.close()
            log = Path(env["XDG_STATE_HOME"]) / "ctxd" / "acp" / "proxy.log"
            logged = log.read_text("utf-8").splitlines()
            by_owner = sum(1 for line in logged if "by the owner" in line)
            here = sum(1 for line in logged if ") here in" in line)
            print(f"{args.files} files, {args.changed} changed per write; checkpoints by the owner {by_owner}, "
                  f"in the proxy {here}; load average {load_average()}")
            for label, what in (("before edit", "the permission's (10 changed)"),
                                ("before fs/write_text_file", "the write's (nothing changed since)")):
                took = [float(line.split(" in ")[-1].split(" ms")[0]) for line in logged if label in line]
                if took:
                    print(f"  {what}: p50 {statistics.median(took):.0f} ms, p95 {percentile(took, 0.95):.0f} ms "
                          "(as the proxy waited for the owner's answer)")
        finally:
            daemon.shutdown(timeout=10)
    median = statistics.median
    direct, proxied = figures["direct"], figures["proxied"]
    added = (median(proxied["echo"]) - median(direct["echo"])) / 2
    direct_write = median(direct["write"])
    rows = [
        Row("ctxd acp: added per message, p50", ms(added), f"{ms(median(direct['echo']))} (a direct round trip)",
            f"{added / (median(direct['echo']) / 2):.2f}x", "<= 5.000 ms", added <= 0.005),
        Row(f"ctxd acp: checkpointed write, {args.changed} changed of {args.files} files, p50",
            ms(median(proxied["write"])), f"{ms(direct_write)} (the same write, direct)",
            f"{median(proxied['write']) / direct_write:.1f}x", "shown", True),
        Row(f"ctxd acp: checkpointed write, {args.changed} changed of {args.files} files, p95",
            ms(percentile(proxied["write"], 0.95)), f"{ms(percentile(direct['write'], 0.95))} (direct, p95)",
            f"{percentile(proxied['write'], 0.95) / direct_write:.1f}x", "<= 150.000 ms",
            percentile(proxied["write"], 0.95) <= 0.150),
    ]
    return report(rows)


if __name__ == "__main__":
    os.environ.pop("CTXD_OWNER", None)
    raise SystemExit(main(sys.argv[1:]))
