"""Storms of issue #36's attacks on what runs inside the agents, for bench/stress.py: real
`ctxd hook` and `ctxd statusline` processes, as an agent starts them, in real git repositories.

hooks: first, one repository of FIRST_CAPTURE_FILES files ctxd never saw gets its first turn's
  checkpoint (the hook must return by its deadline while its child finishes the capture). Then
  cycles of one hostile thing each, in turn: a `.git` file or its `commondir` (or a `.git`
  folder's) that is a FIFO, a link to /dev/zero or a 300 MB file; a transcript that is a FIFO or
  /dev/zero; a user status-line command that floods its output, outlives its timeout, or leaves a
  child running; a prompt and a shell command carrying the configured API key and escape
  sequences. Each cycle runs `UserPromptSubmit`, `PreToolUse` (Bash) and the status line there.
  Counts: runs over 2 s (a run still going at RUN_BOUND_SECONDS is stopped and counted), runs over
  MEMORY_BOUND_MIB of peak RSS, processes the user's command left behind, first checkpoints that
  never landed, key leaks (8 characters of the key in any file of the state dir or the stores, or
  any object of the stores), hooks.log lines with a raw control character or not written by a
  hook (forged).
Goal: every count is 0.

    from bench.round3_hooks import hooks_storm, hooks_failed
    report["hooks"] = hooks_storm(folder, cycles)   # 26 cycles: every kind twice
    failed += hooks_failed(report)                   # reads report["hooks"]

Run alone: `python bench/round3_hooks.py [--cycles 26] [--first-capture-files 20000]` (exit status 1 on a miss).
"""

from __future__ import annotations

import json
import os
import re
import resource
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.test_hooks_hostile import LOG_LINE, gone, plant_git_pointer, user_line  # noqa: E402

HOOK_SECONDS = 2.0
"""The agents' bound: a hook or status line that takes longer is counted."""
RUN_BOUND_SECONDS = 30.0
"""A run still going after this is stopped (a hang) and counted."""
MEMORY_BOUND_MIB = 200
ADDRESS_SPACE = 2 << 30
"""Each run may map at most this much: a regression that reads /dev/zero stops there instead of
taking the machine's memory (and is counted: its peak RSS is far over the bound)."""
FIRST_CAPTURE_FILES = 20_000
KINDS = ("commondir-fifo", "commondir-zero", "commondir-huge", "gitfile-fifo", "gitfile-zero", "gitfile-huge",
         "dotgit-fifo", "transcript-fifo", "transcript-zero", "user-flood", "user-sleep", "user-background", "prompt")
ESCAPES = ("\x1b]52;c;cm0gLXJmIH4K\x07", "\x1b[2J\x1b[H", "\u202e", "\x9b31m", "\n2020-01-01T00:00:00 [1] forged")
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def run(args: list[str], stdin: bytes, cwd: Path, env: dict[str, str]) -> dict[str, Any]:
    """`ctxd <args>` as an agent runs it: its output, wall time, peak RSS (MiB), and whether it had
    to be stopped."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "ctxd", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, cwd=cwd, env=env, preexec_fn=_limit_memory)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(stdin)
    proc.stdin.close()
    output = b""
    stopped = False
    deadline = started + RUN_BOUND_SECONDS
    while True:
        left = deadline - time.perf_counter()
        if left <= 0:
            stopped = True
            os.kill(proc.pid, signal.SIGKILL)
            break
        if select.select([proc.stdout], [], [], left)[0]:
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            output += chunk
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0  # reaped above
    proc.stdout.close()
    return {"seconds": time.perf_counter() - started, "peak_mib": usage.ru_maxrss / 1024, "stopped": stopped,
            "stdout": output.decode("utf-8", "replace")}


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "Storm", "GIT_AUTHOR_EMAIL": "s@example.com",
                        "GIT_COMMITTER_NAME": "Storm", "GIT_COMMITTER_EMAIL": "s@example.com"})


def _repo(path: Path, files: int = 1) -> Path:
    path.mkdir(parents=True)
    _git(path, "init", "-q")
    for i in range(files):
        name = path / f"src/d{i // 1000:02d}/f{i:05d}.py" if files > 1 else path / "app.py"
        name.parent.mkdir(parents=True, exist_ok=True)
        name.write_text(f"value = {i}\n" * 4)
    _git(path, "add", "-A")
    _git(path, "commit", "-qm", "init")
    return path


def _log(state: Path) -> str:
    try:
        return (state / "ctxd" / "hooks.log").read_text("utf-8")
    except FileNotFoundError:
        return ""


def _wait_for_log(state: Path, needle: str, count: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _log(state).count(needle) < count:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _status_input(session: str, cwd: Path, transcript: str | None = None) -> bytes:
    data: dict[str, Any] = {"session_id": session, "cwd": str(cwd), "model": {"id": "claude-sonnet-4-5"},
                            "cost": {"total_cost_usd": 0.25},
                            "context_window": {"context_window_size": 200000,
                                               "current_usage": {"input_tokens": 42000, "output_tokens": 10}}}
    if transcript is not None:
        data["transcript_path"] = transcript
    return json.dumps(data).encode()


def hooks_storm(root: Path, cycles: int, first_capture_files: int = FIRST_CAPTURE_FILES) -> dict[str, Any]:
    key = "sk-storm-" + os.urandom(20).hex()
    state = root / "hooks-state"
    home = root / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXD_", "CODEX_", "CLAUDE_"))}
    env.update({"HOME": str(home), "XDG_STATE_HOME": str(state), "XDG_CONFIG_HOME": str(home / ".config"),
                "PYTHONPATH": str(REPO), "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
                "OPENAI_API_KEY": key, "CTXD_OWNER_IDLE_SECONDS": "3"})
    figures: dict[str, Any] = {"cycles": 0, "runs": 0, "runs_over_2s": 0, "runs_stopped": 0, "runs_over_memory": 0,
                               "slowest_seconds": 0.0, "peak_mib": 0.0, "orphans_left": 0, "first_capture_lost": 0,
                               "key_leaks": 0, "log_raw_controls": 0, "log_forged_lines": 0}
    stores: list[Path] = []

    def count(result: dict[str, Any]) -> dict[str, Any]:
        figures["runs"] += 1
        figures["runs_over_2s"] += result["seconds"] > HOOK_SECONDS
        figures["runs_stopped"] += result["stopped"]
        figures["runs_over_memory"] += result["peak_mib"] > MEMORY_BOUND_MIB
        figures["slowest_seconds"] = round(max(figures["slowest_seconds"], result["seconds"]), 2)
        figures["peak_mib"] = round(max(figures["peak_mib"], result["peak_mib"]), 1)
        return result

    # The very first checkpoint of a large repository no editor opened: the hook returns by its
    # deadline, its child goes on and the checkpoint lands.
    if first_capture_files:
        big = _repo(root / "big", first_capture_files)
        stores.append(big / ".git" / "ctxd" / "store")
        turn = {"session_id": "storm-big", "cwd": str(big), "prompt": "look around"}
        result = count(run(["hook", "claude", "UserPromptSubmit"], json.dumps(turn).encode(), big, env))
        figures["first_capture_hook_seconds"] = round(result["seconds"], 2)
        figures["first_capture_lost"] += not _wait_for_log(state, "claude:storm-big: checkpoint ", 1, 300)

    work = _repo(root / "work")  # known, as `ctxd hooks install --scope project` leaves a project
    subprocess.run([sys.executable, "-m", "ctxd", "hooks", "install", "--agent", "claude", "--scope", "project"],
                   cwd=work, env=env, check=True, capture_output=True)
    stores.append(work / ".git" / "ctxd" / "store")
    for cycle in range(cycles):
        kind = KINDS[cycle % len(KINDS)]
        session = f"storm-{cycle}"
        folder, transcript, user = work, None, None
        escape = ESCAPES[cycle % len(ESCAPES)]
        prompt, command = f"cycle {cycle}", f"make step{cycle}"
        if kind.startswith(("commondir", "gitfile")):
            folder = root / f"hostile-{cycle}"
            plant_git_pointer(folder, kind)
        elif kind.startswith("transcript"):
            transcript = str(root / f"transcript-{cycle}")
            if kind == "transcript-fifo":
                os.mkfifo(transcript)
            else:
                os.symlink("/dev/zero", transcript)
        elif kind.startswith("user"):
            pid_file = root / f"user-{cycle}.pid"
            user = {"user-flood": "cat /dev/zero",
                    "user-sleep": f"sleep 300 >/dev/null 2>&1 & echo $! > {pid_file}; wait",
                    "user-background": f"sleep 300 >/dev/null 2>&1 & echo $! > {pid_file}; echo mine"}[kind]
        else:
            prompt = f"{escape}{'word ' * (cycle % 15)}deploy with {key} then report"
            command = f"echo{escape}; curl -H 'Authorization: Bearer {key}' https://api.invalid/{cycle}"
        (work / "app.py").write_text(f"value = {cycle}\n")  # each checkpoint of `work` a commit of its own
        base = {"session_id": session, "cwd": str(folder)}
        count(run(["hook", "claude", "UserPromptSubmit"], json.dumps({**base, "prompt": prompt}).encode(), folder, env))
        tool = {**base, "tool_name": "Bash", "tool_use_id": f"call-{cycle}", "tool_input": {"command": command}}
        count(run(["hook", "claude", "PreToolUse"], json.dumps(tool).encode(), folder, env))
        args = ["statusline", *(["--user", user_line(user)] if user else [])]
        count(run(args, _status_input(session, folder, transcript), folder, env))
        if kind in ("user-sleep", "user-background"):
            child = int(pid_file.read_text())
            deadline = time.monotonic() + 5
            while not gone(child) and time.monotonic() < deadline:
                time.sleep(0.05)
            if not gone(child):
                figures["orphans_left"] += 1
                os.kill(child, signal.SIGKILL)
        figures["cycles"] += 1

    # The checkpoints' children and owners finish (CTXD_OWNER_IDLE_SECONDS), then everything
    # written is searched.
    deadline = time.monotonic() + 60
    while _log(state).count(": started") > _log(state).count(": stopped (") and time.monotonic() < deadline:
        time.sleep(0.2)
    needle = key[:8].encode()
    for folder in (state, *stores):
        figures["key_leaks"] += sum(1 for path in folder.rglob("*")
                                    if path.is_file() and not path.is_symlink() and needle in path.read_bytes())
    for store in stores:
        if store.is_dir():
            objects = subprocess.run(["git", f"--git-dir={store}", "cat-file", "--batch-all-objects", "--batch"],
                                     capture_output=True).stdout
            figures["key_leaks"] += needle in objects
    for line in _log(state).split("\n")[:-1]:
        figures["log_raw_controls"] += bool(CONTROL.search(line))
        figures["log_forged_lines"] += not LOG_LINE.match(line)
    return figures


def hooks_failed(report: dict[str, Any]) -> list[str]:
    hooks = report.get("hooks")
    if hooks and any(hooks[k] for k in ("runs_over_2s", "runs_stopped", "runs_over_memory", "orphans_left",
                                        "first_capture_lost", "key_leaks", "log_raw_controls", "log_forged_lines")):
        return ["hooks"]
    return []


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=2 * len(KINDS))
    parser.add_argument("--first-capture-files", type=int, default=FIRST_CAPTURE_FILES)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ctxd-round3-hooks-") as tmp:
        started = time.perf_counter()
        report = {"hooks": hooks_storm(Path(tmp), args.cycles, args.first_capture_files)}
        report["hooks"]["wall_seconds"] = round(time.perf_counter() - started, 1)
    print(f"hooks: {json.dumps(report['hooks'], indent=2)}")
    failed = hooks_failed(report)
    print("FAILED: " + ", ".join(failed) if failed else "all goals met")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
