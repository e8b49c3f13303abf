"""What runs inside the agents on every event, against hostile folders, inputs and neighbours
(issue #36): `ctxd hook` and `ctxd statusline` as real subprocesses, in real git repositories.

A hook must return within 2 s whatever the folder holds. Here each run is bounded by a generous
timeout that only a hang reaches (HANG_SECONDS) and its memory by its peak RSS, measured by a
small parent process (`RUSAGE_CHILDREN`), against a bound far above a normal run (MEMORY_KIB).
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import shutil
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.ghost_repo import IDENTITY
from tests.test_hooks import ctxd, ctxd_bin, env_for, hook, known_project, make_repo, snapshots

HANG_SECONDS = 20.0
"""A hook takes well under a second: only a hang reaches this."""
MEMORY_KIB = 200 * 1024
"""A hook or status line peaks at a few tens of MB: this bound is far above that."""
ADDRESS_SPACE = 2 << 30
"""A measured run may map at most this much: a regression that reads /dev/zero stops here instead
of taking the shared machine's memory."""
AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a folder another user's "
                             "(os.chown) or to listen as another user; runs where the tests run as root")
LINUX_LINK = pytest.mark.skipif(not hasattr(socket, "SO_PEERCRED"), reason="the hook-daemon link is Linux's "
                                "(SO_PEERCRED, /proc/self/fd); elsewhere hooks always work alone")

MEASURE = """
import json, resource, subprocess, sys
limit = int(sys.argv[2])
def bounded():
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
try:
    done = subprocess.run(sys.argv[3:], stdin=sys.stdin, capture_output=True, timeout=float(sys.argv[1]),
                          preexec_fn=bounded)
    result = {"hung": False, "rc": done.returncode, "stdout": done.stdout.decode("utf-8", "replace"),
              "stderr": done.stderr.decode("utf-8", "replace")[-2000:]}
except subprocess.TimeoutExpired:
    result = {"hung": True}
result["peakKib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps(result))
"""


def measured(tmp_path: Path, args: list[str], stdin: bytes, cwd: Path, env: dict[str, str] | None = None
             ) -> dict[str, Any]:
    """`ctxd <args>` run by a parent of its own, which reports whether it hung and its peak RSS."""
    done = subprocess.run([sys.executable, "-c", MEASURE, str(HANG_SECONDS), str(ADDRESS_SPACE),
                           str(ctxd_bin(tmp_path)), *args], input=stdin, capture_output=True, cwd=cwd,
                          env=env or env_for(tmp_path), timeout=HANG_SECONDS + 60)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def check_bounded(result: dict[str, Any], what: str) -> None:
    assert not result["hung"], f"{what} hung (still running after {HANG_SECONDS:g} s)"
    assert result["rc"] == 0, f"{what}: {result}"
    assert result["peakKib"] < MEMORY_KIB, f"{what} peaked at {result['peakKib'] // 1024} MB"


def hook_log(tmp_path: Path) -> str:
    path = tmp_path / "state" / "ctxd" / "hooks.log"
    return path.read_text("utf-8") if path.exists() else ""


def wait_for_log(tmp_path: Path, needle: str, count: int = 1) -> None:
    """Until the hook log holds `count` lines with `needle` (a hook's child may finish after it)."""
    deadline = time.monotonic() + 60
    while sum(needle in line for line in hook_log(tmp_path).splitlines()) < count:
        assert time.monotonic() < deadline, f"never logged {count}x {needle!r}:\n{hook_log(tmp_path)}"
        time.sleep(0.05)


def quiet_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The agent's environment, with no owner left behind (where the test is not about it)."""
    return {**env_for(tmp_path), "CTXD_HOOK_KEEPER": "0", **extra}


# --- 1. `.git` pointers: no hang, no runaway memory ------------------------------------------------


def plant_git_pointer(project: Path, kind: str) -> None:
    """A folder whose `.git` is hostile: a `.git` file naming `.hostile`, whose `commondir` (or the
    `.git` file itself) is a FIFO, a link to /dev/zero, or a 300 MB (sparse) file; or a `.git`
    folder (an archive's) whose `commondir` is a FIFO."""
    if kind == "dotgit-fifo":
        make_repo(project)
        os.mkfifo(project / ".git" / "commondir")
        return
    project.mkdir(parents=True)
    (project / "app.py").write_text("print(1)\n")
    hostile = project / ".hostile"
    hostile.mkdir()
    (hostile / "HEAD").write_text("ref: refs/heads/main\n")
    dot_git = project / ".git"
    where, what = kind.split("-")
    target = hostile / "commondir" if where == "commondir" else dot_git
    if where == "commondir":
        dot_git.write_text("gitdir: .hostile\n")
    if what == "fifo":
        os.mkfifo(target)
    elif what == "zero":
        target.symlink_to("/dev/zero")
    else:
        with open(target, "wb") as handle:
            handle.write(b"gitdir: .hostile\n" if where == "gitfile" else b"../elsewhere\n")
            handle.truncate(300 * 1024 * 1024)


@pytest.mark.parametrize("kind", ["commondir-fifo", "commondir-zero", "commondir-huge", "gitfile-fifo",
                                  "gitfile-zero", "gitfile-huge", "dotgit-fifo"])
def test_a_hostile_git_pointer_neither_blocks_nor_bloats_a_hook_or_the_status_line(tmp_path: Path, kind: str) -> None:
    project = tmp_path / "proj"
    plant_git_pointer(project, kind)
    base = {"session_id": "s-hostile", "cwd": str(project)}
    events = [("UserPromptSubmit", {**base, "prompt": "go"}),
              ("PreToolUse", {**base, "tool_name": "Bash", "tool_input": {"command": "rm app.py"}})]
    for event, data in events:
        result = measured(tmp_path, ["hook", "claude", event], json.dumps(data).encode(), project,
                          quiet_env(tmp_path))
        check_bounded(result, f"ctxd hook claude {event} ({kind})")
        assert result["stdout"] == ""
    status = {"session_id": "s-hostile", "cwd": str(project),
              "context_window": {"context_window_size": 200000, "current_usage": {"input_tokens": 10}}}
    result = measured(tmp_path, ["statusline", "--no-colour"], json.dumps(status).encode(), project,
                      quiet_env(tmp_path))
    check_bounded(result, f"ctxd statusline ({kind})")
    assert result["stdout"].startswith("claude · 0% of 167k") and "no checkpoint" in result["stdout"]
    assert not (project / ".hostile" / "ctxd").exists() and not (project / ".git" / "ctxd").exists()
    assert hook_log(tmp_path).count("is not followed") == 1  # said once, not at every event


def processes_in(folder: Path) -> dict[int, str]:
    """The processes whose working folder is `folder` (a git or a hook's child left running there)."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/cwd") == str(folder):
                found[int(pid)] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
        except OSError:
            continue
    return found


@pytest.mark.parametrize("kind", ["index-fifo", "index-zero", "gitignore-fifo", "nested-gitignore-fifo",
                                  "exclude-fifo", "exclude-zero"])
def test_a_fifo_or_a_device_where_git_reads_is_refused_and_leaves_nothing_running(tmp_path: Path, kind: str) -> None:
    """Where a checkpoint (and the git it runs in the user's repository) reads the index or an
    ignore rule: a FIFO held the checkpoint, and its git for ever, one more at each hook; a link
    to /dev/zero was read until memory ran out. The checkpoint is refused at once, and said."""
    project = make_repo(tmp_path / "proj")
    target = {"index-fifo": ".git/index", "index-zero": ".git/index", "gitignore-fifo": ".gitignore",
              "nested-gitignore-fifo": "src/.gitignore", "exclude-fifo": ".git/info/exclude",
              "exclude-zero": ".git/info/exclude"}[kind]
    planted = project / target
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.unlink(missing_ok=True)
    if kind.endswith("fifo"):
        os.mkfifo(planted)
    else:
        planted.symlink_to("/dev/zero")
    data = {"session_id": "s-planted", "cwd": str(project), "tool_name": "Bash", "tool_input": {"command": "rm app.py"}}
    try:
        for n in range(2):
            result = measured(tmp_path, ["hook", "claude", "PreToolUse"], json.dumps(data).encode(), project,
                              quiet_env(tmp_path))
            check_bounded(result, f"ctxd hook claude PreToolUse ({kind})")
            wait_for_log(tmp_path, "no checkpoint for claude:s-planted", n + 1)
        assert re.search(r"not an index git wrote|a FIFO or a device where git reads", hook_log(tmp_path)), \
            hook_log(tmp_path)
        time.sleep(0.5)
        assert processes_in(project) == {}
    finally:
        for pid in processes_in(project):  # (a failure here must not leave them to the next test)
            os.kill(pid, 9)


def test_a_git_in_the_users_repository_that_never_ends_is_stopped(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Wherever git waits (here the user's own `core.excludesFile`, a FIFO), a git command in the
    user's repository is killed after USER_GIT_SECONDS and the capture fails, said."""
    from ctxd.errors import GitFailed
    from ctxd.ghost import gitstore

    project = make_repo(tmp_path / "proj")
    fifo = tmp_path / "ignore-fifo"
    os.mkfifo(fifo)
    config = tmp_path / "gitconfig"
    config.write_text(f"[core]\n\texcludesFile = {fifo}\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setattr(gitstore, "USER_GIT_SECONDS", 1.0)
    site = gitstore.open_site(project, tmp_path / "state")
    assert site is not None
    with pytest.raises(GitFailed, match="had not ended after 1 s"):  # (the timeout's own message: stopped, not ended)
        site.user("ls-files", "-z", "--others", "--exclude-standard")
    assert processes_in(project) == {}


# --- 2. the status line -------------------------------------------------------------------------------


STATUS = {"session_id": "s-status", "model": {"id": "claude-sonnet-4-5"}, "cost": {"total_cost_usd": 0.5},
          "context_window": {"context_window_size": 200000,
                             "current_usage": {"input_tokens": 150000, "output_tokens": 5}}}


def user_line(command: str) -> str:
    """The `--user` argument that `ctxd hooks install` gives ctxd's status line for the user's own."""
    return base64.urlsafe_b64encode(json.dumps({"type": "command", "command": command}).encode()).decode()


def test_a_fifo_transcript_does_not_block_the_status_line(tmp_path: Path) -> None:
    project = make_repo(tmp_path / "proj")
    fifo = tmp_path / "transcript.jsonl"
    os.mkfifo(fifo)
    data = {**STATUS, "cwd": str(project), "transcript_path": str(fifo)}
    result = measured(tmp_path, ["statusline", "--no-colour"], json.dumps(data).encode(), project)
    check_bounded(result, "ctxd statusline with a FIFO transcript")
    assert "cache until" in result["stdout"]  # the request just reported stands in for the transcript's


def test_a_flooding_user_command_is_read_only_up_to_a_bound(tmp_path: Path) -> None:
    project = make_repo(tmp_path / "proj")
    data = {**STATUS, "cwd": str(project)}
    result = measured(tmp_path, ["statusline", "--no-colour", "--user", user_line("cat /dev/zero | tr '\\0' x")],
                      json.dumps(data).encode(), project)
    check_bounded(result, "ctxd statusline with a flooding user command")
    first, mine = result["stdout"].split("\n", 1)
    assert first.startswith("claude · 90% of 167k")
    assert 0 < len(mine.strip()) <= 64 * 1024 and set(mine.strip()) == {"x"}


@pytest.mark.parametrize("cost", ["1e999", "-1e308", "-0.5", "NaN", "1e300"])
def test_a_cost_that_is_no_amount_is_not_shown(tmp_path: Path, cost: str) -> None:
    """Claude's `cost.total_cost_usd` as a hostile or broken file has it (JSON's 1e999 is infinity to
    Python): the status line showed `$inf` or a 300-digit amount; it shows no cost instead."""
    project = make_repo(tmp_path / "proj")
    text = json.dumps({**STATUS, "cwd": str(project)}).replace('"total_cost_usd": 0.5', f'"total_cost_usd": {cost}')
    result = measured(tmp_path, ["statusline", "--no-colour"], text.encode(), project)
    check_bounded(result, f"ctxd statusline with a cost of {cost}")
    assert result["stdout"].startswith("claude · 90% of 167k") and "$" not in result["stdout"], result["stdout"]


@pytest.mark.parametrize("window", [200000, int("9" * 1000)], ids=["window", "huge window"])
def test_a_count_of_a_thousand_digits_is_shown_clamped(tmp_path: Path, window: int) -> None:
    """Counts far past any real session's (a thousand digits): the status line said `ctxd:
    OverflowError` instead of a gauge (or a window of a thousand digits); the counts are clamped
    as the readers clamp them."""
    project = make_repo(tmp_path / "proj")
    huge = int("9" * 1000)
    data = {**STATUS, "cwd": str(project), "context_window": {"context_window_size": window,
                                                              "current_usage": {"input_tokens": huge, "output_tokens": 5}}}
    result = measured(tmp_path, ["statusline", "--no-colour"], json.dumps(data).encode(), project)
    check_bounded(result, "ctxd statusline with counts of a thousand digits")
    assert result["stdout"].startswith("claude · ") and "Error" not in result["stdout"], result["stdout"]


def gone(pid: int) -> bool:
    """Whether the process has ended (a zombie waiting for init to reap it has)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return fields[0] in ("Z", "X")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads a process's state from /proc")
@pytest.mark.parametrize("ending", ["outlives its timeout", "leaves a child behind"])
def test_the_users_command_leaves_no_process_behind(tmp_path: Path, ending: str) -> None:
    project = make_repo(tmp_path / "proj")
    pid_file = tmp_path / "child.pid"
    tail = "wait" if ending == "outlives its timeout" else "echo mine"
    command = f"sleep 300 >/dev/null 2>&1 & echo $! > {pid_file}; {tail}"
    data = {**STATUS, "cwd": str(project)}
    result = measured(tmp_path, ["statusline", "--no-colour", "--user", user_line(command)],
                      json.dumps(data).encode(), project)
    check_bounded(result, f"ctxd statusline whose user command {ending}")
    if ending == "leaves a child behind":
        assert result["stdout"].splitlines()[1:] == ["mine"]
    child = int(pid_file.read_text())
    deadline = time.monotonic() + HANG_SECONDS
    while not gone(child):
        if time.monotonic() > deadline:
            os.kill(child, 9)
            pytest.fail(f"the user command's child {child} is still running after the status line ended")
        time.sleep(0.05)


def test_no_color_turns_the_status_lines_colours_off(tmp_path: Path) -> None:
    project = make_repo(tmp_path / "proj")
    data = json.dumps({**STATUS, "cwd": str(project)}).encode()
    coloured = ctxd(tmp_path, "statusline", cwd=project, stdin=data, env={**env_for(tmp_path), "NO_COLOR": ""})
    assert coloured.stdout.startswith(b"\033[33m")  # an empty NO_COLOR is not set (no-color.org)
    for value in ("1", "0", "yes"):
        plain = ctxd(tmp_path, "statusline", cwd=project, stdin=data, env={**env_for(tmp_path), "NO_COLOR": value})
        assert plain.stdout.startswith(b"claude \xc2\xb7 90% of 167k") and b"\033" not in plain.stdout


# --- 3. the configured API key ---------------------------------------------------------------------------


def everything_written(tmp_path: Path, project: Path) -> dict[str, bytes]:
    """Every file under the state dir and the snapshot store, and every object of the store."""
    store = project / ".git" / "ctxd" / "store"
    found = {str(p): p.read_bytes() for root in (tmp_path / "state", store) for p in root.rglob("*")
             if p.is_file() and not p.is_symlink()}
    objects = subprocess.run(["git", f"--git-dir={store}", "cat-file", "--batch-all-objects", "--batch"],
                             capture_output=True, check=True).stdout
    found["objects"] = objects
    return found


@pytest.mark.parametrize("variable", ["OPENAI_API_KEY", "MY_LLM_KEY"])
def test_the_api_key_in_a_prompt_or_command_is_never_stored_or_logged(tmp_path: Path, variable: str) -> None:
    """The key is the value of OPENAI_API_KEY, or of the variable the user's config names."""
    key = "sk-" + secrets.token_hex(24)
    project = known_project(tmp_path)
    if variable != "OPENAI_API_KEY":
        config = tmp_path / "home" / ".config" / "ctxd" / "config.toml"
        config.parent.mkdir(parents=True)
        config.write_text(f'[llm]\napi_key_env = "{variable}"\n')
    env = {**env_for(tmp_path), variable: key}
    base = {"session_id": "s-key", "cwd": str(project)}
    # Each key is placed where a cut falls: the label's 72 characters, turn.text's 200, the Bash label's 60.
    events = [
        ("UserPromptSubmit", {**base, "prompt": "w" * 60 + f" {key} please"}),
        ("PreToolUse", {**base, "tool_name": "Bash", "tool_use_id": "call-1",
                        "tool_input": {"command": f"curl -H 'Authorization: Bearer {key}' https://api.example"}}),
        ("UserPromptSubmit", {**base, "prompt": "q " * 95 + f"{key} now"}),
        ("PreToolUse", {**base, "tool_name": "Write", "tool_use_id": "call-2",
                        "tool_input": {"file_path": str(project / f"notes-{key}.md"), "content": "x"}}),
    ]
    for n, (event, data) in enumerate(events):
        (project / "app.py").write_text(f"print({n})\n")  # each checkpoint a commit of its own
        done = subprocess.run([str(ctxd_bin(tmp_path)), "hook", "claude", event], input=json.dumps(data).encode(),
                              cwd=project, env=env, capture_output=True, timeout=60)
        assert done.returncode == 0 and done.stdout == b""
        wait_for_log(tmp_path, ": checkpoint ", n + 1)
    listed = snapshots(tmp_path, project)
    assert sum("[redacted]" in s["message"] for s in listed) >= 3, [s["message"] for s in listed]
    for name, data in everything_written(tmp_path, project).items():
        assert key[:8].encode() not in data, f"the key's first 8 characters are in {name}"


# --- 4. another local user --------------------------------------------------------------------------------


def listening(path: Path) -> socket.socket:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(4)
    server.setblocking(False)
    return server


def plant_owner(state: Path, kind: str, elsewhere: Path) -> Path:
    """The owner's folder (`<state>/owner`, docs/processes.md), or `<state>/hooks`, as another local
    user could arrange it; returns where a listener of theirs would sit."""
    owner, hooks = state / "owner", state / "hooks"
    state.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(owner, ignore_errors=True)
    shutil.rmtree(hooks, ignore_errors=True)
    elsewhere.mkdir(mode=0o755)
    os.chmod(elsewhere, 0o755)
    if kind == "owner-link":
        owner.symlink_to(elsewhere)
        return elsewhere
    if kind == "hooks-link":
        hooks.symlink_to(elsewhere)
        owner.mkdir(mode=0o700)
        return owner
    owner.mkdir(mode=0o700)
    if kind == "open-mode":
        os.chmod(owner, 0o777)
    elif kind == "other-owner":
        os.chown(owner, 65534, 65534)
        os.chmod(owner, 0o755)
    return owner


@LINUX_LINK
@pytest.mark.parametrize("kind", ["owner-link", "hooks-link", "open-mode", pytest.param("other-owner", marks=AS_ROOT)])
def test_a_hook_hands_nothing_to_a_listener_in_a_folder_not_the_users_alone(tmp_path: Path, kind: str) -> None:
    project = known_project(tmp_path)
    where = plant_owner(tmp_path / "state" / "ctxd", kind, tmp_path / "elsewhere")
    server = listening(where / "owner.sock")
    try:
        data = {"session_id": "s-user", "cwd": str(project), "prompt": "the secret plan"}
        done = ctxd(tmp_path, "hook", "claude", "UserPromptSubmit", cwd=project, stdin=json.dumps(data).encode(),
                    env=quiet_env(tmp_path))
        assert done.returncode == 0
        if kind != "hooks-link":
            with pytest.raises(BlockingIOError):
                server.accept()  # nobody connected: the job never reached it
    finally:
        server.close()
    if kind == "hooks-link":  # `hooks/` itself is not the user's: no prompt is written there
        wait_for_log(tmp_path, "the hooks write nothing there")
        assert not (tmp_path / "elsewhere" / "sessions").exists()
    else:
        wait_for_log(tmp_path, ": checkpoint ")  # the hook took its checkpoint itself
        assert "the owner is not asked" in hook_log(tmp_path)


def listen_as_another_user(path: Path) -> tuple[int, int]:
    """A child that binds `path`, becomes uid 65534, listens, and writes how many bytes its first
    connection sent (-1: none came) to the pipe returned with its pid."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(str(path))
            os.setgid(65534)
            os.setuid(65534)
            server.listen(4)  # the credentials a client sees are the listener's at this call
            os.write(write_end, b"ready\n")
            server.settimeout(HANG_SECONDS)
            try:
                conn, _ = server.accept()
                conn.settimeout(HANG_SECONDS)
                received = b""
                while chunk := conn.recv(65536):
                    received += chunk
                count = len(received)
            except TimeoutError:
                count = -1
            os.write(write_end, f"{count}\n".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    return pid, read_end


@LINUX_LINK
@AS_ROOT
def test_a_hook_sends_nothing_to_a_listener_of_another_user(tmp_path: Path) -> None:
    project = known_project(tmp_path)
    owner = plant_owner(tmp_path / "state" / "ctxd", "private", tmp_path / "elsewhere")
    pid, reports = listen_as_another_user(owner / "owner.sock")
    with os.fdopen(reports) as answers:
        assert answers.readline() == "ready\n"
        data = {"session_id": "s-user", "cwd": str(project), "prompt": "the secret plan"}
        done = ctxd(tmp_path, "hook", "claude", "UserPromptSubmit", cwd=project, stdin=json.dumps(data).encode(),
                    env=quiet_env(tmp_path))
        assert done.returncode == 0
        received = int(answers.readline())
    os.waitpid(pid, 0)
    assert received in (0, -1), f"another user's listener received {received} bytes of the job"
    wait_for_log(tmp_path, ": checkpoint ")


def modes(*folders: Path) -> dict[Path, tuple[int, int]]:
    return {folder: (os.stat(folder).st_uid, stat.S_IMODE(os.stat(folder).st_mode)) for folder in folders}


@LINUX_LINK
@pytest.mark.parametrize("kind", ["owner-link", pytest.param("other-owner", marks=AS_ROOT)])
def test_an_owner_never_listens_in_or_changes_a_folder_not_the_users(tmp_path: Path, kind: str) -> None:
    project = known_project(tmp_path)
    where = plant_owner(tmp_path / "state" / "ctxd", kind, tmp_path / "elsewhere")
    before = modes(where)
    data = {"session_id": "s-owner", "cwd": str(project), "prompt": "go"}
    env = {**env_for(tmp_path), "CTXD_OWNER_IDLE_SECONDS": "5"}
    assert ctxd(tmp_path, "hook", "claude", "UserPromptSubmit", cwd=project, stdin=json.dumps(data).encode(),
                env=env).returncode == 0
    wait_for_log(tmp_path, ": checkpoint ")  # taken alone; its child tried to go on as the owner
    time.sleep(2)
    assert modes(where) == before and not list(where.glob("*.sock")) and not list(where.glob("*.lock"))
    assert "the owner is not asked" in hook_log(tmp_path)


@LINUX_LINK
@AS_ROOT
def test_an_editors_daemon_never_listens_in_or_changes_another_users_owner_folder(daemon_factory, tmp_path: Path,
                                                                                 state_dir: Path) -> None:
    where = plant_owner(state_dir / "ctxd", "other-owner", tmp_path / "elsewhere")
    before = modes(where)
    client = daemon_factory([make_repo(tmp_path / "proj")])
    assert client.request("ctxd/threads", {"workspace": (tmp_path / "proj").as_uri()}) == {"threads": []}
    assert client.daemon_pid == client.proc.pid  # it serves alone
    log = tmp_path / "daemon-0.log"
    assert "belongs to another user" in log.read_text()
    assert modes(where) == before and not list(where.glob("*.sock"))


# --- 5. the hook log ----------------------------------------------------------------------------------------


@pytest.mark.skipif(not Path("/proc/self/cwd").exists(), reason="finds the hook's child by its folder in /proc")
@pytest.mark.parametrize("planted", ["fifo", "link"])
def test_a_hook_log_planted_as_a_fifo_or_a_link_neither_blocks_nor_is_written_through(tmp_path: Path,
                                                                                        planted: str) -> None:
    project = known_project(tmp_path)
    log = tmp_path / "state" / "ctxd" / "hooks.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.unlink(missing_ok=True)
    theirs = tmp_path / "theirs.log"
    theirs.write_text("")
    if planted == "fifo":
        os.mkfifo(log)
    else:
        log.symlink_to(theirs)
    data = {"session_id": "s-planted", "cwd": str(project), "prompt": "the secret plan"}
    result = measured(tmp_path, ["hook", "claude", "UserPromptSubmit"], json.dumps(data).encode(), project,
                      quiet_env(tmp_path))
    check_bounded(result, f"ctxd hook with hooks.log a {planted}")
    deadline = time.monotonic() + HANG_SECONDS  # the hook's child, which logs the checkpoint, ends too
    while working_in(project):
        assert time.monotonic() < deadline, "the hook's child never ended"
        time.sleep(0.05)
    assert theirs.read_text() == ""


def working_in(folder: Path) -> bool:
    """Whether a process (the hook's child, a git it runs) has `folder` as its working folder."""
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and os.readlink(entry / "cwd") == str(folder):
                return True
        except OSError:
            continue
    return False


LOG_LINE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d \[\d+\] ")
FORGED = "\n2020-01-01T00:00:00 [1] forged\x1b]52;c;QUFBQQ==\x07\x1b[2J\x9b31m\u202e"


def test_the_hook_log_takes_no_raw_control_character_nor_a_forged_line(tmp_path: Path) -> None:
    project = known_project(tmp_path)
    odd = tmp_path / f"odd{FORGED.replace('/', '_')}"
    odd.mkdir()
    env = quiet_env(tmp_path)
    runs = [
        (odd, {"session_id": "s-log", "cwd": str(odd), "prompt": "x"}, "UserPromptSubmit"),
        (project, {"session_id": "s-log", "cwd": str(project), "prompt": f"do it{FORGED}"}, "UserPromptSubmit"),
        (project, {"session_id": "s-log", "cwd": str(project), "tool_name": "Bash",
                   "tool_input": {"command": f"echo{FORGED}"}}, "PreToolUse"),
    ]
    for n, (cwd, data, event) in enumerate(runs):
        (project / "app.py").write_text(f"print({n})\n")
        assert ctxd(tmp_path, "hook", "claude", event, cwd=cwd, stdin=json.dumps(data).encode(),
                    env=env).returncode == 0
    wait_for_log(tmp_path, ": checkpoint ", 2)
    text = (tmp_path / "state" / "ctxd" / "hooks.log").read_text("utf-8")
    for line in text.split("\n")[:-1]:
        assert LOG_LINE.match(line), f"a line the hook did not write: {line!r}"
        assert not re.search("[\x00-\x1f\x7f-\x9f\u202e]", line), f"a raw control character: {line!r}"
    assert "forged\\x1b]52;c;QUFBQQ==\\x07" in text and "\\x0a2020-01-01T00:00:00 [1] forged" in text


# --- 6. which folders get checkpoints --------------------------------------------------------------------


def file_in(project: Path, commit: str, name: str) -> str | None:
    store = project / ".git" / "ctxd" / "store"
    done = subprocess.run(["git", f"--git-dir={store}", "cat-file", "blob", f"{commit}:{name}"], capture_output=True)
    return done.stdout.decode() if done.returncode == 0 else None


def fresh_repo(path: Path) -> Path:
    """A git repository ctxd never saw, with a committed a.txt."""
    project = make_repo(path)
    (project / "a.txt").write_text("keep me\n")
    subprocess.run(["git", "add", "a.txt"], cwd=project, check=True)
    subprocess.run(["git", "commit", "-qm", "a"], cwd=project, check=True, env={**os.environ, **IDENTITY})
    return project


def test_a_git_repository_ctxd_never_saw_gets_the_first_turns_checkpoint_and_one_before_rm(tmp_path: Path) -> None:
    project = fresh_repo(tmp_path / "proj")
    base = {"session_id": "s-new", "cwd": str(project)}
    assert hook(tmp_path, "claude", "UserPromptSubmit", {**base, "prompt": "clean up"}, project).returncode == 0
    wait_for_log(tmp_path, ": checkpoint ")
    (project / "b.txt").write_text("the agent wrote this\n")
    rm = {**base, "tool_name": "Bash", "tool_use_id": "call-rm", "tool_input": {"command": "rm a.txt"}}
    assert hook(tmp_path, "claude", "PreToolUse", rm, project).returncode == 0
    wait_for_log(tmp_path, ": checkpoint ", 2)
    (project / "a.txt").unlink()  # what the agent's command does once the hook returned
    listed = {s["message"]: s for s in snapshots(tmp_path, project)}
    assert listed["clean up"]["trigger"] == "turn" and listed["clean up"]["turn"]["index"] == 1
    before_rm = listed["before Bash: rm a.txt"]
    assert before_rm["trigger"] == "tool" and file_in(project, before_rm["id"], "a.txt") == "keep me\n"

    # A session whose first event is the command itself, in another repository ctxd never saw.
    other = fresh_repo(tmp_path / "other")
    (other / "src").mkdir()
    assert hook(tmp_path, "codex", "PreToolUse", {**rm, "cwd": str(other / "src")}, other).returncode == 0
    wait_for_log(tmp_path, ": checkpoint ", 3)
    [only] = snapshots(tmp_path, other)
    assert only["message"] == "before Bash: rm a.txt" and file_in(other, only["id"], "a.txt") == "keep me\n"


def test_hooks_exclude_from_the_users_config_only_and_a_plain_folder_is_logged_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    config = home / ".config" / "ctxd" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'[hooks]\nexclude = ["~/scratch", "{tmp_path}/pat-*"]\n')
    skipped = [fresh_repo(home / "scratch" / "r1"), fresh_repo(tmp_path / "pat-x" / "r2")]
    taken = fresh_repo(tmp_path / "work")
    (taken / ".ctxd.toml").write_text('[hooks]\nexclude = ["/"]\n')  # a repository cannot exclude itself
    plain = tmp_path / "notes"
    plain.mkdir()
    for folder in [*skipped, taken, plain, *skipped, plain]:
        data = {"session_id": "s-cover", "cwd": str(folder), "prompt": "go"}
        assert hook(tmp_path, "claude", "UserPromptSubmit", data, folder).returncode == 0
    wait_for_log(tmp_path, ": checkpoint ")
    for folder in skipped:
        assert not (folder / ".git" / "ctxd").exists()
    assert [s["message"] for s in snapshots(tmp_path, taken)] == ["go"]
    text = hook_log(tmp_path)
    assert text.count("is excluded by hooks.exclude") == 2
    assert text.count(f"{plain} is neither in a git work tree nor in a folder ctxd knows") == 1
    ghost_state = tmp_path / "state" / "ctxd" / "ghost"  # no store was made for the plain folder
    assert {p.name for p in ghost_state.iterdir()} == {"owner.key"}


def test_hooks_exclude_is_validated_and_never_taken_from_a_workspace(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from ctxd.settings import load_settings

    config = tmp_path / "config" / "ctxd" / "config.toml"
    config.parent.mkdir(parents=True)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / ".ctxd.toml").write_text('[hooks]\nexclude = ["/"]\n')
    for bad in ('"~/one"', '["relative/path"]', '[1]', '[""]'):
        config.write_text(f"[hooks]\nexclude = {bad}\n")
        problems: list[Any] = []
        assert load_settings(None, problems=problems).hooks.exclude == []
        assert [p.key for p in problems] == ["hooks.exclude"], (bad, problems)
    config.write_text('[hooks]\nexclude = ["~/scratch", "/tmp/*/x"]\n')
    problems = []
    settings = load_settings(workspace, {"hooks": {"exclude": ["/srv"]}}, problems)
    assert settings.hooks.exclude == ["~/scratch", "/tmp/*/x"]
    assert sorted(p.source for p in problems if p.key == "hooks.exclude") == sorted(
        [str(workspace / ".ctxd.toml"), "initializationOptions"])



SWAPPER = """
import os, sys
from pathlib import Path

folder = Path(sys.argv[1])
name = folder / ".ctxd.toml"
n = 0
while not (folder / "stop").exists():
    n += 1
    fifo, regular = folder / f"f{n}", folder / f"r{n}"
    os.mkfifo(fifo)
    os.replace(fifo, name)
    regular.write_text("model = 'x'\\n")
    os.replace(regular, name)
"""
READER = """
import sys
from pathlib import Path
from ctxd.settings import load_toml

for _ in range(int(sys.argv[2])):
    load_toml(Path(sys.argv[1]) / ".ctxd.toml", [], follow_links=False)
print("done")
"""


def test_a_fifo_swapped_in_for_a_workspace_config_after_its_check_does_not_block_the_reader(tmp_path: Path) -> None:
    """A hook's checkpoint and the owner read the repository's `.ctxd.toml`: checked as a regular
    file, then swapped for a FIFO (by another process) before it is opened, it must not block them."""
    swapper = subprocess.Popen([sys.executable, "-c", SWAPPER, str(tmp_path)])
    try:
        done = subprocess.run([sys.executable, "-c", READER, str(tmp_path), "20000"], capture_output=True,
                              timeout=HANG_SECONDS * 3)
    except subprocess.TimeoutExpired:
        pytest.fail("load_toml blocked on a FIFO swapped in after its check")
    finally:
        (tmp_path / "stop").touch()
        swapper.wait(timeout=HANG_SECONDS)
    assert done.stdout == b"done\n", done.stderr


def owner_pids(state_dir: Path) -> list[int]:
    """The owners of `state_dir` running (their command line names it)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"owner" in words and os.fsencode(state_dir) in words:
            found.append(int(entry.name))
    return found


@LINUX_LINK
def test_a_ctxd_folder_in_the_repository_never_runs_in_place_of_ctxd(tmp_path: Path) -> None:
    """A repository may hold a folder named `ctxd` (a checkout, or a trap). The command install
    writes, run by the agent in that repository, and the owner the hook starts there when none runs,
    run ctxd's own code (`ctxd.launch`): `python -m ctxd` would have imported the folder's. The
    owner then leaves the repository for `/`."""
    project = known_project(tmp_path)
    mark = tmp_path / "trap-ran"
    (project / "ctxd").mkdir()
    for name in ("__init__.py", "__main__.py", "entry.py"):
        (project / "ctxd" / name).write_text(f"open({str(mark)!r}, 'a').write({name!r})\n")
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    command = settings["hooks"]["UserPromptSubmit"][-1]["hooks"][0]["command"]
    state_dir = tmp_path / "state" / "ctxd"
    assert not owner_pids(state_dir)
    prompt = {"session_id": "s-1", "cwd": str(project), "transcript_path": "/nowhere", "prompt": "Hi"}
    done = subprocess.run(command, shell=True, cwd=project, input=json.dumps(prompt).encode(), capture_output=True,
                          env=env_for(tmp_path), timeout=HANG_SECONDS)
    assert done.returncode == 0, done.stderr
    from ctxd import ownerlink

    deadline = time.monotonic() + 15
    while (conn := ownerlink.connect(state_dir, 1.0)) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert conn is not None, "the hook started no owner"
    conn.close()
    pids = owner_pids(state_dir)
    assert not mark.exists(), f"the repository's ctxd folder ran: {mark.read_text()}"
    assert {os.readlink(f"/proc/{pid}/cwd") for pid in pids} == {"/"}
    assert "(turn) in" in (state_dir / "hooks.log").read_text()  # the hook's own checkpoint
