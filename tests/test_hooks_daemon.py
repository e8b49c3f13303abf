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
