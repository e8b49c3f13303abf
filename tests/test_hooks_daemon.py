"""`ctxd hook` hands its checkpoint to the owner of its state dir (docs/processes.md).

The owner takes it with its file watch (only what changed is re-checked), so a file written just
before the hook runs must still be in the checkpoint; without an owner, or with one that is gone,
the hook takes it itself, and its child goes on as the owner for the hooks after it.
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
from tests.test_hooks import REPO, ctxd, env_for, known_project

pytestmark = pytest.mark.skipif(not hasattr(socket, "SO_PEERCRED"), reason="the owner's socket is Linux's "
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


def owner_socket(tmp_path: Path) -> Path:
    return tmp_path / "state" / "ctxd" / "owner" / "owner.sock"


def bound_owner_socket(tmp_path: Path) -> socket.socket:
    """A socket bound where the owner listens (by its short name: the full path may be over the
    limit of a socket's address), not listening yet."""
    folder = owner_socket(tmp_path).parent
    folder.mkdir(parents=True, mode=0o700)
    bound = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.getcwd()
    os.chdir(folder)
    try:
        bound.bind("owner.sock")
    finally:
        os.chdir(old)
    return bound


def owner_log(tmp_path: Path) -> list[str]:
    path = tmp_path / "state" / "ctxd" / "owner" / "owner.log"
    return path.read_text("utf-8").splitlines() if path.exists() else []


def linked(client: Client, project: Path, tmp_path: Path) -> None:
    """The daemon is the owner: its socket is there once it serves."""
    assert owner_socket(tmp_path).exists()
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
    assert len(taken) == 12 and all("by the owner" in line for line in taken), taken
    count = len(listed(client, project))
    tool_hook(tmp_path, project, 99)  # nothing changed: the owner answers with the last checkpoint
    assert len(listed(client, project)) == count
    assert "by the owner" in hook_log(tmp_path)[-1]


def test_a_folder_no_editor_opened_is_checkpointed_by_the_owner_too(daemon_factory, tmp_path: Path,
                                                                  state_dir: Path) -> None:
    project = known_project(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    client = daemon_factory([other], env={"HOME": str(tmp_path / "home")})  # an editor, not of this folder
    linked(client, other, tmp_path)
    for n in range(3):
        (project / "app.py").write_text(f"print('kept {n}')\n")
        tool_hook(tmp_path, project, n)
        line = [x for x in hook_log(tmp_path) if ": checkpoint " in x][-1]
        assert "by the owner" in line, line


def test_a_socket_left_by_a_dead_owner_means_the_hook_works_alone(tmp_path: Path) -> None:
    project = known_project(tmp_path)
    bound_owner_socket(tmp_path).close()  # what a killed owner leaves: a socket no one serves
    (project / "app.py").write_text("print('alone')\n")
    tool_hook(tmp_path, project, 1)
    taken = [line for line in hook_log(tmp_path) if ": checkpoint " in line]
    assert len(taken) == 1 and "by the owner" not in taken[0]
    store = project / ".git" / "ctxd" / "store"
    refs = [p for p in (store / "refs" / "ctxd").rglob("*") if p.is_file()]
    assert len(refs) == 1 and file_in(project, refs[0].name, "app.py") == "print('alone')\n"


# --- a hook that worked alone leaves an owner that takes the checkpoints of the hooks after it ------


def owner_pid(tmp_path: Path) -> int | None:
    """The pid of the owner listening in the state dir, from its log's last start."""
    starts = [line for line in owner_log(tmp_path) if ": listening (pid " in line]
    if not starts or not owner_socket(tmp_path).exists():
        return None
    return int(starts[-1].split(": listening (pid ", 1)[1].split(",", 1)[0])


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


def test_a_hook_that_worked_alone_leaves_an_owner_that_takes_the_next_checkpoints(tmp_path: Path) -> None:
    project = known_project(tmp_path)
    (project / "app.py").write_text("print('first')\n")
    started = time.monotonic()
    tool_hook(tmp_path, project, 0)  # captured output: an owner holding the agent's pipes would hang this
    assert time.monotonic() - started < 20, "the hook waited for the owner it started"
    taken = [line for line in hook_log(tmp_path) if ": checkpoint " in line]
    assert len(taken) == 1 and "by the" not in taken[0]
    pid = wait_for("the owner to listen", lambda: owner_pid(tmp_path))
    assert alive(pid)
    assert os.readlink(f"/proc/{pid}/fd/0") == os.devnull and os.readlink(f"/proc/{pid}/fd/1") == os.devnull
    for n in range(1, 6):
        (project / "app.py").write_text(f"print('step {n}')\n")  # the agent's write, then at once its next tool
        (project / f"new{n}.py").write_text(f"made at {n}\n")
        tool_hook(tmp_path, project, n)
        line = [x for x in hook_log(tmp_path) if ": checkpoint " in x][-1]
        assert "by the owner" in line, line
        commit = line.split(": checkpoint ", 1)[1].split()[0]
        full = subprocess.run(["git", f"--git-dir={project / '.git' / 'ctxd' / 'store'}", "rev-parse", commit],
                              capture_output=True, text=True).stdout.strip()
        assert file_in(project, full, "app.py") == f"print('step {n}')\n"
        assert file_in(project, full, f"new{n}.py") == f"made at {n}\n"
    refs = project / ".git" / "ctxd" / "store" / "refs" / "ctxd"
    count = sum(1 for p in refs.rglob("*") if p.is_file())
    tool_hook(tmp_path, project, 99)  # nothing changed: the owner answers with the last checkpoint
    assert sum(1 for p in refs.rglob("*") if p.is_file()) == count
    assert "by the owner" in [x for x in hook_log(tmp_path) if ": checkpoint " in x][-1]
    # With no request for CTXD_OWNER_IDLE_SECONDS (20 in these tests) it leaves, and says why.
    wait_for("the owner to leave when idle", lambda: not alive(pid), 60)
    assert any("leaving (no session and no request for 20 s)" in x for x in owner_log(tmp_path)), owner_log(tmp_path)


def test_one_owner_per_state_dir_and_a_folder_replaced_is_watched_afresh(tmp_path: Path) -> None:
    project = known_project(tmp_path)
    (project / "app.py").write_text("print('first')\n")
    tool_hook(tmp_path, project, 0)
    pid = wait_for("the owner to listen", lambda: owner_pid(tmp_path))
    from tests.rpc import REPO
    from tests.test_hooks import env_for

    env = {**env_for(tmp_path), "PYTHONPATH": str(REPO)}
    second = subprocess.run([sys.executable, "-m", "ctxd", "owner", "--state-dir", str(tmp_path / "state" / "ctxd")],
                            env=env, capture_output=True, timeout=60)
    assert second.returncode == 0  # another owner answers: it leaves at once
    assert owner_pid(tmp_path) == pid and alive(pid)
    assert sum(": listening (pid " in line for line in owner_log(tmp_path)) == 1
    tool_hook(tmp_path, project, 1)
    assert "by the owner" in [x for x in hook_log(tmp_path) if ": checkpoint " in x][-1]
    project.rename(tmp_path / "moved")  # another folder in its place: watched afresh, never the old one's state
    project = known_project(tmp_path)
    (project / "app.py").write_text("print('the new folder')\n")
    tool_hook(tmp_path, project, 2)
    line = [x for x in hook_log(tmp_path) if ": checkpoint " in x][-1]
    commit = line.split(": checkpoint ", 1)[1].split()[0]
    full = subprocess.run(["git", f"--git-dir={project / '.git' / 'ctxd' / 'store'}", "rev-parse", commit],
                          capture_output=True, text=True).stdout.strip()
    assert file_in(project, full, "app.py") == "print('the new folder')\n"


def test_no_owner_when_the_environment_says_so(tmp_path: Path) -> None:
    project = known_project(tmp_path)
    from tests.test_hooks import env_for

    for variable in ("CTXD_OWNER", "CTXD_HOOK_KEEPER"):
        env = {**env_for(tmp_path), variable: "0"}
        for n in range(2):
            (project / "app.py").write_text(f"print({variable!r}, {n})\n")
            data = {"session_id": "s-off", "cwd": str(project), "hook_event_name": "PreToolUse", "tool_name": "Bash",
                    "tool_input": {"command": "make"}}
            done = ctxd(tmp_path, "hook", "claude", "PreToolUse", cwd=project, stdin=json.dumps(data).encode(), env=env)
            assert done.returncode == 0
    time.sleep(1)
    assert not owner_socket(tmp_path).exists()
    taken = [line for line in hook_log(tmp_path) if ": checkpoint " in line]
    assert len(taken) == 4 and not any("by the" in line for line in taken)


def test_a_hook_the_owner_answers_imports_only_what_that_path_needs(daemon_factory, tmp_path: Path,
                                                                    state_dir: Path) -> None:
    """The agent pays for the hook's process at every tool call: with the owner answering, the hook
    reads its input, redacts it and hands it over (op "hook"), and the owner does the rest. So the
    hook imports no process machinery (`subprocess`, only needed to start an owner), nor the
    settings, SQLite, the agents' modules (their readers import the most), the hooks' marks or
    the checkpoint code: the owner's. `-X importtime` lists every module the process imported
    (`-S`: not those of this checkout's development install, which an installed ctxd has not)."""
    project = known_project(tmp_path)
    client = daemon_factory([project], env={"HOME": str(tmp_path / "home")})
    linked(client, project, tmp_path)
    data = {"session_id": "s-imports", "cwd": str(project), "hook_event_name": "PreToolUse", "tool_name": "Bash",
            "tool_use_id": "call-1", "tool_input": {"command": "make"}}
    done = subprocess.run([sys.executable, "-S", "-X", "importtime", "-m", "ctxd", "hook", "claude", "PreToolUse"],
                          cwd=project, input=json.dumps(data).encode(), capture_output=True, timeout=60,
                          env={**env_for(tmp_path), "PYTHONPATH": str(REPO)})
    assert done.returncode == 0 and done.stdout == b""
    assert listed(client, project)[0]["tool"]["callId"] == "call-1"
    assert "by the owner" in [line for line in hook_log(tmp_path) if ": checkpoint " in line][-1]
    imported = {line.split("|")[-1].strip() for line in done.stderr.decode().splitlines()
                if line.startswith("import time:")}
    assert "ctxd.ownerlink" in imported, done.stderr.decode()[-2000:]
    heavy = {"subprocess", "ctxd.settings", "sqlite3", "ctxd.ghost.checkpoint", "ctxd.ghost.take", "ctxd.ghost.capture",
             "ctxd.ghost.gitstore", "ctxd.ledger", "ctxd.agents", "ctxd.agents.claude", "ctxd.marks",
             "hashlib",  # (OpenSSL's: only a path's digest needs it, which is the owner's to compute)
             # each of these costs the agent milliseconds at every hook (bench/bench_agents.py)
             "pathlib", "typing", "socket", "threading", "urllib.parse", "json", "re", "enum", "ctxd.terminal",
             "fcntl", "struct"}  # (C modules: a dlopen each)
    assert not heavy & imported, heavy & imported


def test_the_owner_answers_a_malformed_hook_and_goes_on_serving(daemon_factory, tmp_path: Path,
                                                                  state_dir: Path) -> None:
    """A hook's request (op "hook") is the owner's to check: whatever its fields hold, it answers
    "not done" (the hook then works alone) or "done", never drops the connection, and serves on."""
    from ctxd import ownerlink

    project = known_project(tmp_path)
    client = daemon_factory([project], env={"HOME": str(tmp_path / "home")})
    linked(client, project, tmp_path)
    state = tmp_path / "state" / "ctxd"
    malformed = [{"op": "hook"}, {"op": "hook", "agent": 5, "event": [], "input": "x", "exclude": "no"},
                 {"op": "hook", "agent": "claude", "event": "PreToolUse", "input": [1, 2], "exclude": []},
                 {"op": "hook", "agent": "claude", "event": "PreToolUse", "input": {"session_id": "s"}, "exclude": [5]},
                 {"op": "hook", "agent": "nosuch", "event": "X", "input": {}, "exclude": []}]
    for message in malformed:
        answer = ownerlink.ask(state, message, 30.0)
        assert answer is not None and answer.get("done") in (True, False), (message, answer)
    tool_hook(tmp_path, project, 1)  # and the next real hook is the owner's
    assert "by the owner" in [line for line in hook_log(tmp_path) if ": checkpoint " in line][-1]


def test_an_editors_ctxd_that_meets_an_owner_dying_goes_to_the_next_one(tmp_path: Path) -> None:
    """An owner killed while an editor's `ctxd` connects: its socket outlives the process's first
    thread (a thread in a system call holds the files), so the connection is accepted and then
    closed without an answer. Before, that `ctxd` exited 1 (the editor sees its daemon fail);
    nothing of the session was read, so it now goes on to the next owner, which it starts. Here a
    listener of the test's accepts one connection, takes the request, closes it, and goes away."""
    import threading

    from tests.rpc import daemon_env

    state = tmp_path / "state"
    dying = bound_owner_socket(tmp_path)
    dying.listen(1)

    def die() -> None:
        conn, _ = dying.accept()
        conn.recv(1 << 16)  # the request came in: the owner dies before it answers
        conn.close()
        dying.close()
        owner_socket(tmp_path).unlink()

    threading.Thread(target=die, daemon=True).start()
    proc = subprocess.Popen([sys.executable, "-m", "ctxd"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=daemon_env(state), cwd=str(REPO))
    client = Client(proc)
    try:
        answer = client.initialize([known_project(tmp_path)])
        assert answer["serverInfo"]["name"] == "ctxd"
    finally:
        client.shutdown()
