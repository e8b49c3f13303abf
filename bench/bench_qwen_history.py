"""A heavy qwen-code history: issue #38's goals for the sessions of an agent that is not Claude Code
or Codex. Until this benchmark, a restart read every qwen-code file again and every window was
held in memory.

Built from the session qwen-code 0.24.4 wrote (tests/fixtures/agents/qwen/session.jsonl): its
records up to its /compress, then its second turn again and again (new uuids on one chain, a
larger tool output) until each file holds about `--kb` KB; `--sessions` files, in one project.
Measured in one run:

1. `ctxd sessions`, first run and nothing changed since: <= 1 s for the second.
2. A cold owner (empty state dir) until idle: CPU shown, peak RSS <= 300 MiB.
3. A warm owner over that state dir until idle: CPU <= 5 s (against the cold owner's, shown as the
   floor), peak RSS <= 300 MiB.

Run: python bench/bench_qwen_history.py [--sessions 900] [--kb 300]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

from bench_heavy import compile_ctxd, cpu_seconds, rss_mib, run_measured
from table import Row, ms, report

from ctxd.agents.qwen import encode_project
from tests.rpc import start_daemon

FIXTURE = REPO / "tests" / "fixtures" / "agents" / "qwen" / "session.jsonl"
COMPRESS = 23  # the fixture's records before its /compress
TURN = slice(9, 23)  # its second turn: a prompt, replies, tool calls and results, telemetry


def build(folder: Path, sessions: int, kb: int) -> tuple[Path, Path]:
    """The qwen home and the project folder (built once per size, kept in `folder`)."""
    work, home = folder / "work", folder / "qwen"
    if (folder / "built").is_file():
        return home, work
    shutil.rmtree(folder, ignore_errors=True)
    work.mkdir(parents=True)
    chats = home / "projects" / encode_project(work) / "chats"
    chats.mkdir(parents=True)
    records = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    for n in range(sessions):
        session = f"00000000-0000-4000-8000-{n:012d}"
        lines: list[str] = []
        parent: str | None = None
        size, run = 0, 0
        while size < kb * 1024:
            for record in records[:COMPRESS] if run == 0 else records[TURN]:
                copy: dict[str, Any] = json.loads(json.dumps(record))
                copy.update(uuid=f"{n}-{len(lines)}", parentUuid=parent, sessionId=session, cwd=str(work))
                parent = copy["uuid"]
                if copy.get("type") == "tool_result":
                    copy["message"]["parts"][0]["functionResponse"]["response"] = {"output": f"line {run}\n" * 800}
                lines.append(json.dumps(copy))
                size += len(lines[-1]) + 1
            run += 1
        path = chats / f"{session}.jsonl"
        path.write_text("\n".join(lines) + "\n")
        written = time.time() - (sessions - n) * 3600  # an hour apart, the newest last
        os.utime(path, (written, written))
    (folder / "built").write_text("ok")
    return home, work


def owner_until_idle(state: Path, env: dict[str, str], work: Path) -> dict[str, float]:
    start = time.perf_counter()
    client = start_daemon(state, env=env, log_file=state.parent / "owner.log")
    try:
        client.initialize([work], {"ghost": {"auto": "off"}})
        pid = client.daemon_pid
        peak = 0.0
        while not client.request("ctxd/sessions/sync", {"workspace": work.as_uri()}, timeout=600).get("idle"):
            peak = max(peak, rss_mib(pid))
        return {"idle": time.perf_counter() - start, "cpu": cpu_seconds(pid), "peak": max(peak, rss_mib(pid, "VmHWM"))}
    finally:
        client.shutdown(timeout=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--kb", type=int, default=300)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "ctxd-bench")
    args = parser.parse_args()
    home, work = build(args.cache / f"qwen-v1-{args.sessions}x{args.kb}", args.sessions, args.kb)
    total = sum(p.stat().st_size for p in home.rglob("*.jsonl"))
    print(f"history: {args.sessions} qwen-code sessions, {total / 1e6:.0f} MB")
    with tempfile.TemporaryDirectory(prefix="ctxd-qwen-bench-") as tmp_name:
        tmp = Path(tmp_name)
        compile_ctxd(tmp)
        env = {"QWEN_HOME": str(home), "CODEX_HOME": str(tmp / "none"), "CLAUDE_CONFIG_DIR": str(tmp / "none"),
               "GEMINI_CLI_HOME": str(tmp / "none"), "XDG_DATA_HOME": str(tmp / "none"), "HOME": str(tmp),
               "PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX": str(tmp / "pycache")}
        cli_env = {**os.environ, **env, "XDG_STATE_HOME": str(tmp / "cli-state")}
        cli = [sys.executable, "-m", "ctxd", "sessions", "--workspace", str(work)]
        first = run_measured(cli, cli_env, REPO)
        again = run_measured(cli, cli_env, REPO)
        print(f"  ctxd sessions: {first.wall:.2f} s, then {again.wall:.2f} s")
        state = tmp / "owner-state"
        state.mkdir()
        cold = owner_until_idle(state, env, work)
        print(f"  cold owner: idle after {cold['idle']:.1f} s, CPU {cold['cpu']:.1f} s, peak RSS {cold['peak']:.0f} MiB")
        warm = owner_until_idle(state, env, work)
        print(f"  warm owner: idle after {warm['idle']:.1f} s, CPU {warm['cpu']:.1f} s, peak RSS {warm['peak']:.0f} MiB")
    rows = [
        Row("qwen: `ctxd sessions`, nothing changed", ms(again.wall), f"{ms(first.wall)} first run",
            f"{again.wall / first.wall:.2f}x", "<= 1 s", again.wall <= 1.0),
        Row("qwen: cold owner's peak RSS (every file mirrored)", f"{cold['peak']:.0f} MiB", f"{total / 2**20:.0f} MiB read",
            "-", "<= 300 MiB", cold["peak"] <= 300),
        Row("qwen: warm restart, CPU until idle", f"{warm['cpu']:.1f} s", f"{cold['cpu']:.1f} s cold",
            f"{warm['cpu'] / cold['cpu']:.2f}x", "<= 5 s", warm["cpu"] <= 5.0),
        Row("qwen: warm restart's peak RSS", f"{warm['peak']:.0f} MiB", "-", "-", "<= 300 MiB", warm["peak"] <= 300),
    ]
    return report(rows)


if __name__ == "__main__":
    raise SystemExit(main())
