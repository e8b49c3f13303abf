"""Heavy qwen-code and Gemini CLI histories: issue #38's goals for the sessions of the agents that
are not Claude Code or Codex. Until this benchmark, a restart read every file of theirs again and
every window was held in memory.

Built from the sessions the agents wrote (tests/fixtures/agents/<agent>/session.jsonl), in one
project, `--sessions` files of about `--kb` KB each: qwen-code 0.24.4's records up to its
/compress, then its second turn again and again (new uuids on one chain, a larger tool output);
Gemini CLI 0.61.0's header, then its first turn again and again (new message and call ids, a
larger tool output); OpenCode 1.18.33's database (tests/fixtures/agents/opencode/opencode.db), its
sessions made of a prompt and a reply with a tool call again and again, as tests/opencode_db.py
writes them. Measured in one run, per agent:

1. `ctxd sessions`, first run and nothing changed since: <= 1 s for the second.
2. A cold owner (empty state dir) until idle: CPU shown, peak RSS <= 300 MiB.
3. A warm owner over that state dir until idle: CPU <= 5 s (against the cold owner's, shown as the
   floor), peak RSS <= 300 MiB.

Run: python bench/bench_agent_history.py [--agent qwen|gemini|opencode] [--sessions 900] [--kb 300]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sqlite3
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
from tests.opencode_db import FIXTURE as OPENCODE_FIXTURE
from tests.opencode_db import assistant, user
from tests.rpc import start_daemon

FIXTURES = REPO / "tests" / "fixtures" / "agents"
COMPRESS = 23  # the qwen fixture's records before its /compress
TURN = slice(9, 23)  # its second turn: a prompt, replies, tool calls and results, telemetry
GEMINI_TURN = slice(2, 11)  # the Gemini fixture's first turn: a prompt, a reply written twice, a result, a reply
HOME_VARIABLE = {"qwen": "QWEN_HOME", "gemini": "GEMINI_CLI_HOME", "opencode": "XDG_DATA_HOME"}


def build(agent: str, folder: Path, sessions: int, kb: int) -> tuple[Path, Path]:
    """The agent's home and the project folder (built once per size, kept in `folder`)."""
    work, home = folder / "work", folder / agent
    if not (folder / "built").is_file():
        shutil.rmtree(folder, ignore_errors=True)
        work.mkdir(parents=True)
        {"qwen": build_qwen, "gemini": build_gemini, "opencode": build_opencode}[agent](home, work, sessions, kb)
        (folder / "built").write_text("ok")
    return home, work


def written(path: Path, lines: list[str], n: int, sessions: int) -> None:
    """Session `n` of `sessions`, an hour apart, the newest last."""
    path.write_text("\n".join(lines) + "\n")
    at = time.time() - (sessions - n) * 3600
    os.utime(path, (at, at))


def build_gemini(home: Path, work: Path, sessions: int, kb: int) -> None:
    project = home / ".gemini" / "tmp" / "work"
    (project / "chats").mkdir(parents=True)
    (project / ".project_root").write_text(str(work))
    records = [json.loads(line) for line in (FIXTURES / "gemini" / "session.jsonl").read_text().splitlines()]
    for n in range(sessions):
        header = {**records[0], "sessionId": f"00000000-0000-4000-8000-{n:012d}",
                  "projectHash": hashlib.sha256(str(work).encode()).hexdigest()}
        lines = [json.dumps(header)]
        size, run = 0, 0
        while size < kb * 1024:
            for record in records[GEMINI_TURN]:
                copy: dict[str, Any] = json.loads(json.dumps(record))
                if "id" in copy:
                    copy["id"] = f"{copy['id']}-{run}"
                for part in copy.get("content") if isinstance(copy.get("content"), list) else []:
                    if "functionResponse" in part:
                        part["functionResponse"]["id"] += f"-{run}"
                        part["functionResponse"]["response"] = {"output": f"line {run}\n" * 800}
                for call in copy.get("toolCalls") or []:
                    call["id"] += f"-{run}"
                lines.append(json.dumps(copy))
                size += len(lines[-1]) + 1
            run += 1
        written(project / "chats" / f"session-2026-12-02T01-18-{n:08d}.jsonl", lines, n, sessions)


def build_opencode(home: Path, work: Path, sessions: int, kb: int) -> None:
    """`home/opencode/opencode.db`: the fixture's database, and `sessions` more in `work`."""
    path = home / "opencode" / "opencode.db"
    path.parent.mkdir(parents=True)
    shutil.copyfile(OPENCODE_FIXTURE, path)
    db = sqlite3.connect(path)
    columns = [row[1] for row in db.execute("PRAGMA table_info(session)")]
    template = dict(zip(columns, db.execute("SELECT * FROM session").fetchone(), strict=True))
    clock = int(time.time() * 1000) - sessions * 3_600_000
    for n in range(sessions):
        sid = f"ses_bench{n:012d}zz"
        rows: list[tuple[str, int, str, list[dict[str, Any]]]] = []  # (message id, created, data, parts)
        size, run = 0, 0
        while size < kb * 1024:
            clock += 1000
            prompt = f"msg_bench{n:08d}{run:05d}a"
            rows.append((prompt, clock, json.dumps(user(clock)), [{"type": "text", "text": f"Turn {run}: read it."}]))
            tool = {"type": "tool", "tool": "read", "callID": f"call_{run}",
                    "state": {"status": "completed", "input": {"filePath": str(work / "a.txt")}, "output": f"line {run}\n" * 800}}
            info = assistant(prompt, clock + 500, 4000 + 10 * run, 3000, 20, 0.001)
            rows.append((f"msg_bench{n:08d}{run:05d}b", clock + 500, json.dumps(info),
                         [{"type": "step-start"}, tool, {"type": "text", "text": "Read."},
                          {"type": "step-finish", "reason": "stop", "tokens": info["tokens"], "cost": 0.001}]))
            size += sum(len(data) + sum(len(json.dumps(part)) for part in parts) for _, _, data, parts in rows[-2:])
            run += 1
        db.execute(f"INSERT INTO session ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",  # noqa: S608
                   [{**template, "id": sid, "slug": sid, "directory": str(work), "time_created": rows[0][1],
                     "time_updated": clock + 500}[column] for column in columns])
        for mid, created, data, parts in rows:
            db.execute("INSERT INTO message (id, session_id, time_created, time_updated, data) VALUES (?, ?, ?, ?, ?)",
                       (mid, sid, created, created, data))
            db.executemany("INSERT INTO part (id, message_id, session_id, time_created, time_updated, data)"
                           " VALUES (?, ?, ?, ?, ?, ?)",
                           [(f"prt_{mid}_{k}", mid, sid, created, created, json.dumps(part)) for k, part in enumerate(parts)])
    db.commit()
    db.close()


def build_qwen(home: Path, work: Path, sessions: int, kb: int) -> None:
    chats = home / "projects" / encode_project(work) / "chats"
    chats.mkdir(parents=True)
    records = [json.loads(line) for line in (FIXTURES / "qwen" / "session.jsonl").read_text().splitlines()]
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
        written(chats / f"{session}.jsonl", lines, n, sessions)


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


def measure(agent: str, cache: Path, sessions: int, kb: int) -> list[Row]:
    home, work = build(agent, cache / f"{agent}-v1-{sessions}x{kb}", sessions, kb)
    total = sum(p.stat().st_size for p in home.rglob("*") if p.suffix in (".jsonl", ".db"))
    print(f"history: {sessions} {agent} sessions, {total / 1e6:.0f} MB")
    with tempfile.TemporaryDirectory(prefix=f"ctxd-{agent}-bench-") as tmp_name:
        tmp = Path(tmp_name)
        compile_ctxd(tmp)
        env = {variable: str(tmp / "none") for variable in HOME_VARIABLE.values()}
        env.update({"CODEX_HOME": str(tmp / "none"), "CLAUDE_CONFIG_DIR": str(tmp / "none"), "HOME": str(tmp),
                    "PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX": str(tmp / "pycache"),
                    HOME_VARIABLE[agent]: str(home)})
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
    return [
        Row(f"{agent}: `ctxd sessions`, nothing changed", ms(again.wall), f"{ms(first.wall)} first run",
            f"{again.wall / first.wall:.2f}x", "<= 1 s", again.wall <= 1.0),
        Row(f"{agent}: cold owner's peak RSS (every file mirrored)", f"{cold['peak']:.0f} MiB",
            f"{total / 2**20:.0f} MiB read", "-", "<= 300 MiB", cold["peak"] <= 300),
        Row(f"{agent}: warm restart, CPU until idle", f"{warm['cpu']:.1f} s", f"{cold['cpu']:.1f} s cold",
            f"{warm['cpu'] / cold['cpu']:.2f}x", "<= 5 s", warm["cpu"] <= 5.0),
        Row(f"{agent}: warm restart's peak RSS", f"{warm['peak']:.0f} MiB", "-", "-", "<= 300 MiB", warm["peak"] <= 300),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", choices=sorted(HOME_VARIABLE), action="append",
                        help="only this agent's history (default: each)")
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--kb", type=int, default=300)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "ctxd-bench")
    args = parser.parse_args()
    rows = [row for agent in args.agent or sorted(HOME_VARIABLE) for row in measure(agent, args.cache, args.sessions, args.kb)]
    return report(rows)


if __name__ == "__main__":
    raise SystemExit(main())
