"""`ctxd hook` hands its checkpoint to a running daemon of the workspace (ctxd/hooks/link.py).

The daemon takes it with its file watch (only what changed is re-checked), so a file written
just before the hook runs must still be in the checkpoint; without a daemon of the folder, or
with one that is gone, the hook takes it itself as before.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.rpc import Client
from tests.test_hooks import ctxd, known_project

pytestmark = pytest.mark.skipif(not hasattr(socket, "SO_PEERCRED"), reason="the hook-daemon link is Linux's "
                                "(SO_PEERCRED, /proc/self/fd); elsewhere hooks always work alone")


def tool_hook(tmp_path: Path, project: Path, n: int) -> None:
    data = {"session_id": "s-link", "cwd": str(project), "hook_event_name": "PreToolUse", "tool_name": "Bash",
            "tool_use_id": f"call-{n}", "tool_input": {"command": f"make step{n}"}}
    done = ctxd(tmp_path, "hook", "claude", "PreToolUse", cwd=project, stdin=json.dumps(data).encode())
    assert done.returncode == 0 and done.stdout == b""


def hook_log(tmp_path: Path) -> list[str]:
    path = tmp_path / "state" / "ctxd" / "hooks.log"
    return path.read_text("utf-8").splitlines() if path.exists() else []


def listed(client: Client, project: Path) -> list[dict[str, Any]]:
    return list(client.request("ctxd/ghost/list", {"workspace": project.as_uri()})["snapshots"])


def file_in(project: Path, commit: str, name: str) -> str:
    store = project / ".git" / "ctxd" / "store"
    done = subprocess.run(["git", f"--git-dir={store}", "cat-file", "blob", f"{commit}:{name}"], capture_output=True)
    return done.stdout.decode() if done.returncode == 0 else "<missing>"


def linked(client: Client, project: Path, tmp_path: Path) -> None:
    """Wait until the daemon listens for hooks (it starts with its session follower)."""
    deadline = time.monotonic() + 30
    while not list((tmp_path / "state" / "ctxd" / "hooks" / "sockets").glob("*.sock")):
        assert time.monotonic() < deadline, "the daemon never listened for hooks"
        time.sleep(0.05)
    listed(client, project)


def test_a_running_daemon_takes_the_hooks_checkpoints_and_misses_no_write(daemon_factory, tmp_path: Path,
                                                                         state_dir: Path) -> None:
    project = known_project(tmp_path)
    client = daemon_factory([project], env={"HOME": str(tmp_path / "home")})
    linked(client, project, tmp_path)
    for n in range(12):
        (project / "app.py").write_text(f"print('step {n}')\n")  # the agent's write, then at once its next tool
        if n % 3 == 0:
            (project / f"new{n}.py").write_text(f"made at {n}\n")
        tool_hook(tmp_path, project, n)
        newest = listed(client, project)[0]
        assert newest["tool"]["callId"] == f"call-{n}"
        assert file_in(project, newest["id"], "app.py") == f"print('step {n}')\n"
        if n % 3 == 0:
            assert file_in(project, newest["id"], f"new{n}.py") == f"made at {n}\n"
    taken = [line for line in hook_log(tmp_path) if ": checkpoint " in line]
    assert len(taken) == 12 and all("by the daemon" in line for line in taken), taken
    count = len(listed(client, project))
    tool_hook(tmp_path, project, 99)  # nothing changed: the daemon answers with the last checkpoint
    assert len(listed(client, project)) == count
    assert "by the daemon" in hook_log(tmp_path)[-1]


def test_without_a_daemon_of_the_folder_the_hook_works_alone(daemon_factory, tmp_path: Path, state_dir: Path) -> None:
    project = known_project(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    client = daemon_factory([other], env={"HOME": str(tmp_path / "home")})  # a daemon, not of this folder
    linked(client, other, tmp_path)
    sockets = tmp_path / "state" / "ctxd" / "hooks" / "sockets"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # what a killed daemon leaves: a socket no one serves
    old = os.getcwd()
    os.chdir(sockets)
    try:
        dead.bind("1.sock")
    finally:
        os.chdir(old)
    dead.close()
    (project / "app.py").write_text("print('alone')\n")
    tool_hook(tmp_path, project, 1)
    taken = [line for line in hook_log(tmp_path) if ": checkpoint " in line]
    assert len(taken) == 1 and "by the daemon" not in taken[0]
    store = project / ".git" / "ctxd" / "store"
    refs = [p for p in (store / "refs" / "ctxd").rglob("*") if p.is_file()]
    assert len(refs) == 1 and file_in(project, refs[0].name, "app.py") == "print('alone')\n"


# --- the keeper: a hook that worked alone keeps the workspace for the hooks after it ---------------


def keepers(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "state" / "ctxd" / "hooks" / "sockets").glob("keeper-*.sock"))


def wait_for(what: str, probe: Any, seconds: float = 30) -> Any:
    deadline = time.monotonic() + seconds
    while not (value := probe()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return status != "Z"


def test_a_hook_that_worked_alone_leaves_a_keeper_that_takes_the_next_checkpoints(tmp_path: Path) -> None:
    project = known_project(tmp_path)
    (project / "app.py").write_text("print('first')\n")
    started = time.monotonic()
    tool_hook(tmp_path, project, 0)  # captured output: a keeper holding the agent's pipes would hang this
    assert time.monotonic() - started < 20, "the hook waited for its keeper"
    taken = [line for line in hook_log(tmp_path) if ": checkpoint " in line]
    assert len(taken) == 1 and "by the" not in taken[0]
    socket_path = wait_for("the keeper to listen", lambda: keepers(tmp_path))[0]
    pid = int(socket_path.stem.rsplit("-", 1)[1])
    assert alive(pid)
    assert os.readlink(f"/proc/{pid}/fd/0") == os.devnull and os.readlink(f"/proc/{pid}/fd/1") == os.devnull
    for n in range(1, 6):
        (project / "app.py").write_text(f"print('step {n}')\n")  # the agent's write, then at once its next tool
        (project / f"new{n}.py").write_text(f"made at {n}\n")
        tool_hook(tmp_path, project, n)
        line = [x for x in hook_log(tmp_path) if ": checkpoint " in x][-1]
        assert "by the keeper" in line, line
        commit = line.split(": checkpoint ", 1)[1].split()[0]
        full = subprocess.run(["git", f"--git-dir={project / '.git' / 'ctxd' / 'store'}", "rev-parse", commit],
                              capture_output=True, text=True).stdout.strip()
        assert file_in(project, full, "app.py") == f"print('step {n}')\n"
        assert file_in(project, full, f"new{n}.py") == f"made at {n}\n"
    refs = project / ".git" / "ctxd" / "store" / "refs" / "ctxd"
    count = sum(1 for p in refs.rglob("*") if p.is_file())
    tool_hook(tmp_path, project, 99)  # nothing changed: the keeper answers with the last checkpoint
    assert sum(1 for p in refs.rglob("*") if p.is_file()) == count
    assert "by the keeper" in [x for x in hook_log(tmp_path) if ": checkpoint " in x][-1]
    # With no hook for CTXD_HOOK_KEEPER_SECONDS (20 in these tests) it leaves, and says why.
    wait_for("the keeper to leave when idle", lambda: not alive(pid), 60)
    assert any("stopped (no hook for 20 s)" in x for x in hook_log(tmp_path)), hook_log(tmp_path)[-3:]
    assert not keepers(tmp_path)


def test_one_keeper_per_folder_and_it_leaves_with_its_folder(tmp_path: Path) -> None:
    project = known_project(tmp_path)
    (project / "app.py").write_text("print('first')\n")
    tool_hook(tmp_path, project, 0)
    pid = int(wait_for("the keeper to listen", lambda: keepers(tmp_path))[0].stem.rsplit("-", 1)[1])
    from tests.rpc import REPO
    from tests.test_hooks import env_for

    env = {**env_for(tmp_path), "PYTHONPATH": str(REPO)}
    second = subprocess.run([sys.executable, "-m", "ctxd.hooks.keeper", str(project), str(tmp_path / "state" / "ctxd")],
                            env=env, capture_output=True, timeout=60)
    assert second.returncode == 0
    assert "stopped (another keeper has this folder)" in hook_log(tmp_path)[-1]
    assert len(keepers(tmp_path)) == 1 and alive(pid)
    moved = tmp_path / "moved"
    project.rename(moved)  # the folder is gone from its place: the keeper leaves
    wait_for("the keeper to leave with its folder", lambda: not alive(pid), 30)
    assert any("stopped (its folder was replaced or removed)" in x for x in hook_log(tmp_path))


def test_no_keeper_when_the_environment_says_so(tmp_path: Path) -> None:
    project = known_project(tmp_path)
    from tests.test_hooks import env_for

    env = {**env_for(tmp_path), "CTXD_HOOK_KEEPER": "0"}
    for n in range(2):
        (project / "app.py").write_text(f"print({n})\n")
        data = {"session_id": "s-off", "cwd": str(project), "hook_event_name": "PreToolUse", "tool_name": "Bash",
                "tool_input": {"command": "make"}}
        done = ctxd(tmp_path, "hook", "claude", "PreToolUse", cwd=project, stdin=json.dumps(data).encode(), env=env)
        assert done.returncode == 0
    time.sleep(1)
    assert not keepers(tmp_path)
    taken = [line for line in hook_log(tmp_path) if ": checkpoint " in line]
    assert len(taken) == 2 and not any("by the" in line for line in taken)
    assert not any("keeper" in line for line in hook_log(tmp_path))
