"""Storms of issue #27's attacks for bench/stress.py, against real git and the real daemon.

planted: cycles of a repository that came with a hostile `.git/ctxd/store` (no mark, a forged
  mark, a changed config, a link to another store, on-disk alternates, `.git/ctxd` a file) and
  commands in its own `.git/config`, each with a `.gitattributes` applying them; every cycle
  snapshots, lists and restores. Counts: commands that ran, refusals (1002 naming the path), wrong
  answers.
tcp: rounds of probers (stalled, no token, a wrong token, a request before initialize, garbage)
  connecting before and while an editor authenticates and records over `ctxd --tcp`. Counts:
  probers given a session, editor failures, daemon exits.
numbers: rounds of a `.ctxd.toml` with random huge numbers (401 digits, inf, nan) in random
  settings; each records and asks the gauge. Counts: failed requests, unreported bad values.
threads: memory as a client touches 20,000 threads: RSS growth after the 1,000th, at most
  THREADS_GROWTH_MIB.
folders: 2,000 folders added at once while the first workspace is asked for its history: the
  time until the last is usable, and the first one's slowest answer as a share of it; a followed
  session's line written then must be shown, its latency at most that time.
gitfile: cycles of a folder whose `.git` file names a foreign git dir (another project's
  `--separate-git-dir`, `.git`, linked worktree, submodule, a bare repository), snapshotted, listed
  and restored, beside a legitimate layout (a linked worktree, a submodule, a vouched separate git
  dir). Counts: foreign git dirs used, refusals not naming the path, legitimate layouts refused.
leaks: cycles of followed sessions whose titles, instructions, model names and prompts carry the
  configured API key and escape sequences. Counts: the key in answers, on the terminal or in files;
  raw control characters printed by `ctxd sessions`.
frame: rounds of one 47 MB `ctxd/record`: the daemon's RSS after each answer, against its own
  before the first, grows at most FRAME_GROWTH_MIB; its peak while it takes each (VmHWM) at most
  FRAME_PEAK_TIMES the frame over its RSS before it.
Goal for all: every bad count is 0.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ctxd.errors import CtxdError, GitFailed
from ctxd.ghost import api as ghost
from tests import session_fixtures as fx
from tests.ghost_repo import make_repo
from tests.rpc import Client, RpcError, daemon_env, start_daemon
from tests.test_hostile_round2 import (
    _attributes,
    _commands_config,
    _frame,
    _initialize,
    _marking_script,
    _plant_store,
    _read_reply,
)

REPO = Path(__file__).resolve().parents[1]
PLANTS = ("unmarked", "forged", "config_changed", "link", "alternates", "ctxd_file")


def _plant(kind: str, repo: Any, script: Path, other: Any) -> Path:
    store = repo.git_dir / "ctxd" / "store"
    if kind == "unmarked":
        return _plant_store(repo, script)
    if kind == "forged":
        _plant_store(repo, script)
        (store / "ctxd-owner").write_text(json.dumps({"nonce": "0" * 32, "seal": "f" * 64}))
        return store
    if kind in ("config_changed", "alternates"):
        ghost.snapshot(repo.root)
        if kind == "alternates":
            (store / "objects" / "info" / "alternates").write_text(str(other.git_dir / "objects") + "\n")
        else:
            with open(store / "config", "a") as handle:
                handle.write(_commands_config(script))
            (store / "info" / "attributes").write_text("* filter=evil\n")
        return store
    if kind == "link":
        ghost.snapshot(other.root)
        store.parent.mkdir()
        store.symlink_to(other.git_dir / "ctxd" / "store")
        return store
    store.parent.write_text("a file\n")  # ctxd_file
    return store.parent


def planted_storm(root: Path, cycles: int) -> dict[str, Any]:
    figures: dict[str, Any] = {"cycles": 0, "commands_ran": 0, "refused_1002": 0, "wrong_answers": 0}
    for cycle in range(cycles):
        base = root / f"p{cycle}"
        marker = base / "ran"
        base.mkdir(parents=True)
        script = _marking_script(base, marker)
        repo, other = make_repo(base / "repo"), make_repo(base / "other")
        kind = PLANTS[cycle % len(PLANTS)]
        named = _plant(kind, repo, script, other)
        with open(repo.git_dir / "config", "a") as handle:
            handle.write(_commands_config(script))
        _attributes(repo)
        root = repo.root
        for operation in (lambda: ghost.snapshot(root), lambda: ghost.list_snapshots(root),  # noqa: B023
                          lambda: ghost.restore(root, "0" * 40)):  # noqa: B023
            try:
                operation()
                figures["wrong_answers"] += 1
            except GitFailed as error:
                if str(named) in error.message:
                    figures["refused_1002"] += 1
                else:
                    figures["wrong_answers"] += 1
        figures["commands_ran"] += marker.exists()
        figures["cycles"] += 1
        shutil.rmtree(base, ignore_errors=True)
    return figures


def _probe(port: int, kind: str, token: str) -> bool:
    """One prober; True when it was given a session (an answer that is not an error)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as probe:
        if kind == "stalled":
            probe.settimeout(30)
            return bool(probe.recv(1))  # closed by the daemon: b""
        if kind == "garbage":
            probe.sendall(b"Content-Length: 5\r\n\r\nnope!")
        elif kind == "before_initialize":
            probe.sendall(_frame({"jsonrpc": "2.0", "id": 1, "method": "ctxd/threads", "params": {}}))
        else:
            probe.sendall(_frame(_initialize(None if kind == "no_token" else token[::-1])))
        reply = _read_reply(probe)
        return reply is not None and "result" in reply


def _probe_into(served: list[bool], port: int, kind: str, token: str) -> None:
    served.append(_probe(port, kind, token))


def tcp_storm(root: Path, rounds: int, probers: int = 8) -> dict[str, Any]:
    import threading

    figures: dict[str, Any] = {"rounds": 0, "probers": 0, "probers_served": 0, "editor_failures": 0,
                               "daemon_exits": 0}
    kinds = ("stalled", "no_token", "wrong_token", "before_initialize", "garbage")
    for n in range(rounds):
        state, ws = root / f"t{n}" / "state", root / f"t{n}" / "ws"
        state.mkdir(parents=True)
        ws.mkdir()
        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            port = free.getsockname()[1]
        token_file = state / "tcp.token"
        proc = subprocess.Popen([sys.executable, "-m", "ctxd", "--tcp", "--port", str(port), "--token-file",
                                 str(token_file)], env=daemon_env(state), cwd=str(REPO),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while not token_file.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        token = token_file.read_text().strip()
        served: list[bool] = []
        threads = [threading.Thread(target=_probe_into, args=(served, port, kinds[i % len(kinds)], token))
                   for i in range(probers)]
        for thread in threads[: probers // 2]:
            thread.start()
        try:
            connection = socket.create_connection(("127.0.0.1", port), timeout=30)
            connection.settimeout(None)
            client = Client(proc, connection.makefile("wb"), connection.makefile("rb"))
            client.auth_token = token
            client.initialize([ws])
            for thread in threads[probers // 2:]:
                thread.start()
            for i in range(20):
                client.request("ctxd/record", {"workspace": ws.as_uri(), "items": [
                    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"m{i}"}]}]})
            for thread in threads:
                thread.join(60)
            if client.request("ctxd/history", {"workspace": ws.as_uri()})["total"] != 20:
                figures["editor_failures"] += 1
            figures["daemon_exits"] += proc.poll() is not None
            client.shutdown()
        except (OSError, RpcError, TimeoutError):
            figures["editor_failures"] += 1
            proc.kill()
        figures["probers"] += len(served)
        figures["probers_served"] += sum(served)
        figures["rounds"] += 1
    return figures


NUMBER_KEYS = ("context_window", "auto_compact_token_limit", "tool_output_token_limit", "auto_compact_ratio",
               "compact_user_message_max_tokens", "ghost.keep", "ghost.max_age_days", "ghost.warn_after_seconds",
               "ghost.max_untracked_file_bytes", "ghost.max_untracked_dir_files")
BAD_NUMBERS = (str(int("9" * 401)), "inf", "nan", "-inf", "1e308", str(2**64))


def numbers_storm(root: Path, rounds: int, seed: int = 27) -> dict[str, Any]:
    rng = random.Random(seed)
    figures: dict[str, Any] = {"rounds": 0, "failed_requests": 0, "unreported": 0}
    for n in range(rounds):
        ws, state = root / f"n{n}" / "ws", root / f"n{n}" / "state"
        ws.mkdir(parents=True)
        state.mkdir()
        chosen = rng.sample(NUMBER_KEYS, 3)
        top = [f"{k} = {rng.choice(BAD_NUMBERS)}" for k in chosen if "." not in k]
        nested = [f"{k.split('.')[1]} = {rng.choice(BAD_NUMBERS)}" for k in chosen if "." in k]
        (ws / ".ctxd.toml").write_text("\n".join(top) + "\n[ghost]\n" + "\n".join(nested) + "\n")
        client = start_daemon(state)
        client.initialize([ws])
        uri = ws.as_uri()
        try:
            client.request("ctxd/record", {"workspace": uri, "items": [
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}]})
            client.request("ctxd/usage", {"workspace": uri})
            keys = {p.get("key") for p in client.request("ctxd/status", {"workspace": uri})["problems"]}
            # 1e308 is a finite float: refused only where it is over the bound (all of them here).
            figures["unreported"] += len(set(chosen) - keys)
        except (RpcError, TimeoutError):
            figures["failed_requests"] += 1
        client.shutdown()
        figures["rounds"] += 1
    return figures


def hostile_failed(report: dict[str, Any]) -> list[str]:
    failed = []
    planted = report.get("planted")
    if planted and (planted["commands_ran"] or planted["wrong_answers"]):
        failed.append("planted")
    tcp = report.get("tcp")
    if tcp and (tcp["probers_served"] or tcp["editor_failures"] or tcp["daemon_exits"]):
        failed.append("tcp")
    numbers = report.get("numbers")
    if numbers and (numbers["failed_requests"] or numbers["unreported"]):
        failed.append("numbers")
    folders = report.get("folders")
    if folders and not folders["within_bound"]:
        failed.append(f"folders (the first workspace stalled over {FOLDERS_STALL_SHARE:.0%} of the opening, or a "
                      f"followed session's line took over {FOLDERS_APPEND_SHARE:.0%} of it or never came)")
    threads = report.get("threads")
    if threads and not threads["within_bound"]:
        failed.append(f"threads (RSS grew over {THREADS_GROWTH_MIB} MiB)")
    gitfile = report.get("gitfile")
    if gitfile and (gitfile["foreign_used"] or gitfile["unnamed_refusals"] or gitfile["legit_refused"]):
        failed.append("gitfile")
    leaks = report.get("leaks")
    if leaks and any(leaks[k] for k in ("key_in_answers", "key_on_terminal", "raw_controls_on_terminal", "key_in_files",
                                        "sessions_not_followed")):
        failed.append("leaks")
    frame = report.get("frame")
    if frame and not frame["within_bound"]:
        failed.append(f"frame (RSS after a huge frame's answer grew over {FRAME_GROWTH_MIB} MiB, or its peak "
                      f"over {FRAME_PEAK_TIMES:g} times the frame)")
    return failed


THREADS_GROWTH_MIB = 8
"""Bound for `threads_memory`: the daemon's RSS may grow at most this much from the 1,000th thread
touched to the last (every thread used to keep its cached gauge for good)."""


def threads_memory(root: Path, threads: int) -> dict[str, Any]:
    """Record into and ask the gauge of `threads` threads, one after another; the daemon's RSS
    after the 1,000th and after the last."""
    ws, state = root / "ws", root / "state"
    ws.mkdir(exist_ok=True)
    state.mkdir(exist_ok=True)
    client = start_daemon(state)
    client.initialize([ws])
    uri = ws.as_uri()

    def rss_mib() -> float:
        for line in Path(f"/proc/{client.daemon_pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello"}]}
    marks: dict[int, float] = {}
    for n in range(threads):
        last = client.request_async("ctxd/record", {"workspace": uri, "thread": f"t{n}", "items": [item]})
        client.request_async("ctxd/usage", {"workspace": uri, "thread": f"t{n}"})
        if n % 500 == 499 or n + 1 == threads:
            client.result(last, timeout=120)
        if n + 1 in (1000, threads):
            marks[n + 1] = rss_mib()
    client.shutdown()
    growth = marks[threads] - marks[1000]
    return {"threads": threads, "rss_at_1000_mib": round(marks[1000], 1),
            f"rss_at_{threads}_mib": round(marks[threads], 1), "growth_mib": round(growth, 1),
            "within_bound": growth <= THREADS_GROWTH_MIB}


FOLDERS_STALL_SHARE = 0.1
"""Bound for `folders_storm`: the first workspace's slowest answer while the folders open, as a
share of the time they take to open (same run): the first workspace must never wait for the bulk
(bench/README.md has the figures before and after)."""
FOLDERS_APPEND_SHARE = 1.0
"""And the time a followed session's line written as the last folder opens takes to be shown, as a
share of the time the folders take to open (same run). Issue #36: every session file was matched
against every folder again, each folder resolved each time, under the follower's lock: the line
waited 20 s and more."""
FOLDERS_OTHER_SESSIONS = 500
"""Older Codex sessions of other projects beside the followed one: a user's history."""
FOLDERS_HANG_SECONDS = 60.0


def folders_storm(root: Path, count: int) -> dict[str, Any]:
    """`count` folders added in one notification while the client keeps asking the first workspace
    for its history: how long until the last is usable, and the first workspace's slowest answer.
    The first workspace follows a Codex session (beside FOLDERS_OTHER_SESSIONS of other projects);
    a line written to it when the last folder is usable must be shown, and how long that took."""
    ws, state = root / "ws", root / "state"
    ws.mkdir(exist_ok=True)
    state.mkdir(exist_ok=True)
    codex_home = state / "codex-home"  # tests.rpc.daemon_env's CODEX_HOME
    session = fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(ws))
    for n in range(FOLDERS_OTHER_SESSIONS):
        other = f"0199a213-81c0-7800-8aa1-{n:012d}"
        fx.write_jsonl(fx.codex_path(codex_home, other), [fx.codex_meta(root / "elsewhere" / f"p{n}", other)])
    folders = [root / "many" / f"f{n}" for n in range(count)]
    for folder in folders:
        folder.mkdir(parents=True)
    client = start_daemon(state)
    client.initialize([ws])
    uri = ws.as_uri()
    thread = f"codex:{fx.CODEX_ID}"
    client.request("ctxd/record", {"workspace": uri, "items": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}]})

    def history_seconds() -> float:
        started = time.perf_counter()
        client.request("ctxd/history", {"workspace": uri})
        return time.perf_counter() - started

    def session_total() -> int:
        try:
            return int(client.request("ctxd/history", {"workspace": uri, "thread": thread})["total"])
        except RpcError:
            return 0  # not followed yet

    deadline = time.perf_counter() + FOLDERS_HANG_SECONDS
    while session_total() == 0 and time.perf_counter() < deadline:
        time.sleep(0.05)
    before = session_total()
    time.sleep(3.0)  # the start-up scan of the older sessions done: the storm is the folders' alone
    idle = sorted(history_seconds() for _ in range(21))[10]
    started = time.perf_counter()
    client.notify("workspace/didChangeWorkspaceFolders", {"event": {
        "added": [{"uri": f.as_uri(), "name": f.name} for f in folders], "removed": []}})
    slowest = 0.0
    while True:
        slowest = max(slowest, history_seconds())
        try:
            client.request("ctxd/usage", {"workspace": folders[-1].as_uri()})
            break
        except RpcError:
            time.sleep(0.02)
    opened = time.perf_counter() - started
    written = time.perf_counter()
    fx.append_jsonl(session, [fx.codex_answer("written as the last folder opened", "2025-10-03T10:01:00.000Z")])
    shown: float | None = None
    while time.perf_counter() - written < FOLDERS_HANG_SECONDS:
        if before and session_total() > before:
            shown = time.perf_counter() - written
            break
        time.sleep(0.02)
    client.shutdown()
    return {"folders": count, "all_usable_seconds": round(opened, 2), "idle_median_ms": round(idle * 1000, 2),
            "slowest_during_ms": round(slowest * 1000, 2), "stall_share": round(slowest / opened, 3),
            "other_sessions": FOLDERS_OTHER_SESSIONS,
            "append_shown_seconds": None if shown is None else round(shown, 2),
            "append_share": None if shown is None else round(shown / opened, 3),
            "within_bound": (slowest / opened <= FOLDERS_STALL_SHARE and shown is not None
                             and shown / opened <= FOLDERS_APPEND_SHARE)}


# --- issue #27, the last two items: `.git` files into foreign git dirs, huge frames -----------------

GITFILE_KINDS = ("separate", "dotgit", "worktree", "module", "bare")
"""Foreign git dirs a `.git` file names: another project's `--separate-git-dir`, its `.git`, one of its
linked worktrees' admin folders, one of its submodules' `.git/modules/<name>`, a bare repository."""
GITFILE_LEGIT = ("linked", "submodule", "vouched")
"""What must keep working: a real linked worktree, a submodule, and a `--separate-git-dir` project
whose git dir names it (`core.worktree`)."""


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t"})


def _foreign_git_dir(kind: str, base: Path) -> Path:
    """Another project (made here) and the git dir of it that a planted `.git` file will name."""
    other = make_repo(base / "other")
    if kind == "separate":
        project = base / "sep"
        _git("init", "-q", "--separate-git-dir", str(base / "sep.git"), str(project), cwd=base)
        (project / "a.txt").write_text("theirs\n")
        _git("add", "-A", cwd=project)
        _git("commit", "-qm", "c", cwd=project)
        return base / "sep.git"
    if kind == "dotgit":
        return other.git_dir
    if kind == "worktree":
        other.git("worktree", "add", "-q", str(base / "linked"))
        return other.git_dir / "worktrees" / "linked"
    if kind == "module":
        library = make_repo(base / "lib").root
        other.git("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(library), "lib")
        return other.git_dir / "modules" / "lib"
    bare = base / "bare.git"
    _git("clone", "-q", "--bare", str(other.root), str(bare), cwd=base)
    return bare


def _legit_folder(kind: str, base: Path) -> Path:
    other = make_repo(base / "other")
    if kind == "linked":
        other.git("worktree", "add", "-q", str(base / "linked"))
        return base / "linked"
    if kind == "submodule":
        library = make_repo(base / "lib").root
        other.git("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(library), "lib")
        return other.root / "lib"
    project = base / "sep"
    _git("init", "-q", "--separate-git-dir", str(base / "sep.git"), str(project), cwd=base)
    _git("config", "--file", str(base / "sep.git" / "config"), "core.worktree", str(project), cwd=base)
    return project


def gitfile_storm(root: Path, cycles: int) -> dict[str, Any]:
    """Cycles of a folder whose `.git` file names a foreign git dir (each kind in turn), snapshotted,
    listed and restored, and of each legitimate layout snapshotted. Counts: foreign git dirs used
    (an operation that did not refuse, or anything written into the foreign git dir), refusals that
    do not name the `.git`, legitimate layouts refused."""
    figures: dict[str, Any] = {"cycles": 0, "foreign_used": 0, "refused_1002": 0, "unnamed_refusals": 0,
                               "legit_snapshots": 0, "legit_refused": 0}
    state = root / "state"
    for cycle in range(cycles):
        base = root / f"g{cycle}"
        base.mkdir(parents=True)
        foreign = _foreign_git_dir(GITFILE_KINDS[cycle % len(GITFILE_KINDS)], base)
        before = sorted(p.name for p in foreign.iterdir())
        folder = base / "intruder"
        folder.mkdir()
        (folder / ".git").write_text(f"gitdir: {foreign}\n")
        (folder / "mine.txt").write_text("mine\n")
        for operation in (lambda: ghost.snapshot(folder, state_dir=state),  # noqa: B023 - called in this turn
                          lambda: ghost.list_snapshots(folder, state_dir=state),  # noqa: B023
                          lambda: ghost.restore(folder, "0" * 40, state_dir=state)):  # noqa: B023
            try:
                operation()
                figures["foreign_used"] += 1
            except CtxdError as error:  # anything but 1002 reached the foreign store (an unknown snapshot)
                figures["refused_1002"] += error.code == 1002
                figures["foreign_used"] += error.code != 1002
                figures["unnamed_refusals"] += error.code == 1002 and str(folder / ".git") not in error.message \
                    and str(foreign) not in error.message
        figures["foreign_used"] += sorted(p.name for p in foreign.iterdir()) != before
        legit = _legit_folder(GITFILE_LEGIT[cycle % len(GITFILE_LEGIT)], base / "legit")
        (legit / "new.txt").write_text(f"cycle {cycle}\n")
        try:
            ghost.snapshot(legit, state_dir=state)
            figures["legit_snapshots"] += 1
        except GitFailed:
            figures["legit_refused"] += 1
        figures["cycles"] += 1
        shutil.rmtree(base, ignore_errors=True)
    return figures


FRAME_MIB = 47
"""The frame of the issue: 47 MB of items in one `ctxd/record`."""
FRAME_GROWTH_MIB = 48
"""Bound for `frame_storm`: the JSON loaded threads may hold (ctxd.ledger.cache.MAX_HELD_CHARS, 32 MiB),
and half as much again for the loaded items' other fields and the allocator."""
FRAME_PEAK_TIMES = 3.0
"""And the daemon's peak while it takes a frame (VmHWM, reset before each) over its RSS before it,
in frames: the body as it is read, then its items' texts, then their rows, each about the frame's
size and never all three at once (ctxd/server/bigframe.py; issue #36: 7.3 times before)."""


def frame_storm(root: Path, rounds: int, mib: int = FRAME_MIB) -> dict[str, Any]:
    """Rounds of one huge `ctxd/record` frame (items of 2 KB, then of 200 bytes, then more into a
    thread already over the bounds), each answered and followed by a gauge request on a small
    thread. The daemon's RSS after each answer, against its own RSS before the first: the growth
    must stay within FRAME_GROWTH_MIB, however large the frames (bench/README.md has the figures
    before: the thread held each item parsed and as JSON, and the reader the parsed frame). And its
    peak while each frame is taken: within FRAME_PEAK_TIMES the frame."""
    ws, state = root / "ws", root / "state"
    ws.mkdir(exist_ok=True)
    state.mkdir(exist_ok=True)
    client = start_daemon(state)
    client.initialize([ws])
    uri = ws.as_uri()
    status = Path(f"/proc/{client.daemon_pid}/status")

    def memory_mib(field: str = "VmRSS") -> float:
        for line in status.read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def items(size: int, count: int) -> list[dict[str, Any]]:
        pad = "looked at src/module.py and found nothing to change; "
        text = pad * (size // len(pad))
        return [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": f"{i}: {text}"}]}
                for i in range(count)]

    small = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}]
    client.request("ctxd/record", {"workspace": uri, "thread": "small", "items": small})
    client.request("ctxd/usage", {"workspace": uri, "thread": "small"})
    baseline = memory_mib()
    growths: list[float] = []
    peaks: list[float] = []
    frames: list[float] = []
    failures = 0
    for n in range(rounds):
        size = (2000, 200, 2000)[n % 3]
        thread = "grown" if n % 3 == 2 else f"big{n}"
        params = {"workspace": uri, "thread": thread, "items": items(size, mib * 1024 * 1024 // (size + 60))}
        frames.append(len(json.dumps(params)) / 1024 / 1024)
        (status.parent / "clear_refs").write_text("5")  # VmHWM: the peak from now on
        before = memory_mib()
        try:
            client.request("ctxd/record", params, timeout=900)
            peaks.append(memory_mib("VmHWM") - before)
            del params
            time.sleep(0.5)
            growths.append(memory_mib() - baseline)
            client.request("ctxd/usage", {"workspace": uri, "thread": "small"})
        except (RpcError, TimeoutError):
            failures += 1
    client.shutdown()
    worst = max(growths, default=0.0)
    peak_times = max((peak / frame for peak, frame in zip(peaks, frames, strict=False)), default=0.0)
    return {"rounds": rounds, "frame_mib": round(max(frames), 1), "baseline_rss_mib": round(baseline, 1),
            "growth_after_answers_mib": [round(g, 1) for g in growths], "worst_growth_mib": round(worst, 1),
            "peak_growth_mib": [round(p, 1) for p in peaks], "worst_peak_times_frame": round(peak_times, 2),
            "failed_requests": failures, "bound_mib": FRAME_GROWTH_MIB, "peak_bound_times_frame": FRAME_PEAK_TIMES,
            "within_bound": not failures and worst <= FRAME_GROWTH_MIB and peak_times <= FRAME_PEAK_TIMES}


ESCAPES = ("\x1b]52;c;cm0gLXJmIH4K\x07", "\x1b[2J\x1b[H", "\u202e", "\x9b31m", "\x1b]8;;http://x.invalid\x07", "\x07")
"""Clipboard writes (OSC 52), screen clears, a bidirectional override, a C1 CSI, a hyperlink, a bell."""
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def leaks_storm(root: Path, cycles: int, seed: int = 27) -> dict[str, Any]:
    """Cycles of a followed Codex session whose title, instructions, model name and later prompts
    carry the configured API key and escape sequences (random ones, at random places), while a
    daemon follows them; after each, `ctxd/threads`, the session's prompt, `ctxd/ghost/list` and
    `ctxd sessions` are read, and at the end every file of the state dir and the snapshot store.
    Counts: key leaks (answers, terminal output, files), raw control characters on the terminal."""
    rng = random.Random(seed)
    key = "sk-proj-storm-" + "".join(rng.choice("abcdefghijkLMNOPQ0123456789") for _ in range(40))
    repo = make_repo(root / "repo")
    codex_home, state = root / "codex-home", root / "state"
    env = {"CODEX_HOME": str(codex_home), "CLAUDE_CONFIG_DIR": str(root / "claude-home"), "OPENAI_API_KEY": key}
    client = start_daemon(state, env=env)
    client.initialize([repo.root])
    uri = repo.root.as_uri()
    figures: dict[str, Any] = {"cycles": 0, "key_in_answers": 0, "key_on_terminal": 0, "raw_controls_on_terminal": 0,
                               "key_in_files": 0, "sessions_not_followed": 0}
    cli_env = {**daemon_env(state), **env}
    for cycle in range(cycles):
        session = f"0199a213-81c0-7800-8aa1-{cycle:012d}"
        escape = rng.choice(ESCAPES)
        title = rng.choice([f"Use {key} to deploy{escape}", f"{escape}fix it with the key {key}",
                            f"{'word ' * rng.randrange(20)}{key}{escape}"])
        meta = fx.codex_meta(repo.root, session)
        meta["payload"]["instructions"] = f"The deploy key is {key}{escape}; never print it."
        records = [meta, *fx.codex_turn(title, "2025-10-03T10:00:02.000Z", model=f"gpt-5{escape}",
                                        cwd=str(repo.root))]
        rollout = fx.write_jsonl(fx.codex_path(codex_home, session), records)
        repo.write(f"change-{cycle}.txt", f"{cycle}\n")
        fx.append_jsonl(rollout, fx.codex_turn(f"now rotate {key}{escape}", "2025-10-03T10:05:00.000Z",
                                               cwd=str(repo.root)))
        thread = f"codex:{session}"
        deadline = time.monotonic() + 30
        while True:
            listed = client.request("ctxd/threads", {"workspace": uri})
            if any(t["thread"] == thread for t in listed["threads"]):
                break
            if time.monotonic() > deadline:
                figures["sessions_not_followed"] += 1
                break
            time.sleep(0.05)
        answers = [listed, client.request("ctxd/prompt", {"workspace": uri, "thread": thread}),
                   client.request("ctxd/ghost/list", {"workspace": uri})]
        figures["key_in_answers"] += key in json.dumps(answers)
        shown = subprocess.run([sys.executable, "-m", "ctxd", "sessions", "--workspace", str(repo.root)],
                               capture_output=True, text=True, env=cli_env, cwd=str(REPO), timeout=120)
        figures["key_on_terminal"] += key[:24] in shown.stdout + shown.stderr  # (the table cuts a title: half a key)
        figures["raw_controls_on_terminal"] += bool(CONTROL.search(shown.stdout + shown.stderr))
        figures["cycles"] += 1
    client.shutdown()
    needle = key.encode()
    for folder in (state, repo.git_dir / "ctxd"):
        figures["key_in_files"] += sum(1 for path in folder.rglob("*")
                                       if path.is_file() and needle in path.read_bytes())
    messages = subprocess.run(["git", f"--git-dir={repo.git_dir / 'ctxd' / 'store'}", "log", "--format=%B", "--all"],
                              capture_output=True, text=True).stdout
    figures["key_in_files"] += key in messages
    return figures
