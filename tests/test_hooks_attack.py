"""`ctxd hooks install | uninstall` and `ctxd hook` against what an attack run found: the real `ctxd`
command in real git repositories and real home folders (tests/test_hooks.py's helpers)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.rpc import REPO
from tests.test_hooks import CLAUDE_SETTINGS, CODEX_CONFIG, ctxd, env_for, make_repo, on_machine, snapshots


def tree(folder: Path) -> set[str]:
    """Every path under `folder` (but a repository's .git), relative to it."""
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if ".git" not in p.relative_to(folder).parts}


def test_uninstall_takes_away_the_folders_install_made_so_no_agent_seems_on_the_machine(tmp_path: Path) -> None:
    """`install --agent all` made `~/.codex`, `~/.gemini`, `~/.qwen`, OpenCode's `plugins` (and a
    project's `.claude`, `.codex`...); uninstall removed the files and left the folders: every agent
    then counted as on this machine, and the next plain install wrote into all of them."""
    on_machine(tmp_path, ".claude")
    home = tmp_path / "home"
    project = make_repo(tmp_path / "proj")
    home_before, project_before = tree(home), tree(project)
    for scope in ("user", "project"):
        assert ctxd(tmp_path, "hooks", "install", "--agent", "all", "--scope", scope, cwd=project).returncode == 0
    assert {".codex", ".gemini", ".qwen"} <= {p.name for p in home.iterdir()}
    for scope in ("user", "project"):
        done = ctxd(tmp_path, "hooks", "uninstall", "--scope", scope, cwd=project)
        assert done.returncode == 0, done.stderr
    assert tree(home) == home_before
    assert tree(project) == project_before
    status = ctxd(tmp_path, "hooks", "status", cwd=project).stdout.decode().splitlines()
    assert [line.split("; on this machine ")[1][:3] for line in status if line.startswith("codex ")] == ["no ", "no "]

    # A folder that holds something else by then stays.
    assert ctxd(tmp_path, "hooks", "install", "--agent", "gemini", cwd=project).returncode == 0
    (home / ".gemini" / "trustedFolders.json").write_text("{}\n")
    assert ctxd(tmp_path, "hooks", "uninstall", "--agent", "gemini", cwd=project).returncode == 0
    assert sorted(p.name for p in (home / ".gemini").iterdir()) == ["trustedFolders.json"]


@pytest.mark.parametrize("action", ["install", "uninstall"])
def test_a_read_only_settings_file_is_refused_and_left_as_it_was(tmp_path: Path, action: str) -> None:
    """A settings file the user made read-only (0444) in a folder they can write was replaced by
    install (a file renamed over it) and kept its 0444."""
    on_machine(tmp_path, ".claude")
    project = make_repo(tmp_path / "proj")
    settings = tmp_path / "home" / ".claude" / "settings.json"
    settings.write_text('{"model": "opus"}\n')
    if action == "uninstall":
        assert ctxd(tmp_path, "hooks", "install", "--agent", "claude", cwd=project).returncode == 0
    settings.chmod(0o444)
    before = settings.read_bytes()
    done = ctxd(tmp_path, "hooks", action, "--agent", "claude", cwd=project)
    assert done.returncode == 1, done.stdout
    err = done.stderr.decode()
    assert f"{settings} is read-only" in err and "nothing was written" in err and "Traceback" not in err
    assert settings.read_bytes() == before and stat.S_IMODE(settings.stat().st_mode) == 0o444


FILES = {  # file under the home folder -> (what the user had, the agent whose install writes it)
    ".claude/settings.json": ('{\n  "hooks": {},\n  "model": "opus"\n}\n', "claude"),
    ".claude.json": ('{"numStartups": 3, "mcpServers": {}, "tipsHistory": {}}\n', "claude"),
    ".qwen/settings.json": ('{\n  "ui": {},\n  "hooks": {"PreToolUse": []},\n  "general": {}\n}\n', "qwen"),
    ".gemini/settings.json": ('{\n  "mcpServers": {},\n  "hooks": null,\n  "theme": "x"\n}\n', "gemini"),
}


def test_uninstall_after_the_agent_rewrote_its_file_keeps_the_users_empty_objects(tmp_path: Path) -> None:
    """`"hooks": {}`, `"mcpServers": {}`, `"ui": {}`, `"hooks": null` of the user's, in a file the agent
    rewrote between install and uninstall: uninstall took them out with ctxd's last entry."""
    home = tmp_path / "home"
    project = make_repo(tmp_path / "proj")
    for rel, (text, _agent) in FILES.items():
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text(text)
    for agent in ("claude", "qwen", "gemini"):
        assert ctxd(tmp_path, "hooks", "install", "--agent", agent, cwd=project).returncode == 0
    for rel in FILES:  # the agent saves its file: its own key added, its own formatting
        value = json.loads((home / rel).read_text())
        (home / rel).write_text(json.dumps({**value, "agentSaved": True}, indent=4) + "\n")
    done = ctxd(tmp_path, "hooks", "uninstall", cwd=project)
    assert done.returncode == 0, done.stderr
    for rel, (text, _agent) in FILES.items():
        left = json.loads((home / rel).read_text())
        wanted = {**json.loads(text), "agentSaved": True}
        assert left == wanted and list(left) == list(wanted), rel


def test_a_patch_naming_thousands_of_files_neither_floods_the_log_nor_the_checkpoint(tmp_path: Path) -> None:
    """An `apply_patch` naming 5,000 deep paths: the hook's plan walked every one (a second for a 4 MB
    input, before its deadline counted) and logged a label naming them all (megabytes a call)."""
    project = make_repo(tmp_path / "proj")
    names = [f"{'deep/' * 40}f{i}.py" for i in range(5000)]
    patch = "*** Begin Patch\n" + "".join(f"*** Add File: {n}\n+x\n" for n in names) + "*** End Patch\n"
    (project / "app.py").write_text("print('v2')\n")  # a changed tree: a new checkpoint, with its message
    data = {"session_id": "c-1", "cwd": str(project), "tool_name": "apply_patch", "tool_use_id": "call_1",
            "tool_input": {"command": patch}}
    env = {**env_for(tmp_path), "CTXD_HOOK_KEEPER": "0"}
    done = ctxd(tmp_path, "hook", "codex", "PreToolUse", cwd=project, stdin=json.dumps(data).encode(), env=env)
    assert done.returncode == 0 and done.stdout == b""
    log = tmp_path / "state" / "ctxd" / "hooks.log"
    deadline = time.monotonic() + 60  # the hook's child may finish after it
    while "checkpoint" not in (text := log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, "no checkpoint logged"
        time.sleep(0.1)
    assert "before apply_patch deep/" in text
    assert max(len(line) for line in text.splitlines()) < 4096
    listed = snapshots(tmp_path, project)
    assert [len(s["tool"]["paths"]) for s in listed if s.get("trigger") == "tool"] == [50]


def test_a_users_empty_hook_group_is_not_ctxds_to_remove(tmp_path: Path) -> None:
    """A group of the user's with no hooks (`{"matcher": "X", "hooks": []}`) in an event ctxd hooks:
    install dropped it from the file, so after the agent saved the file uninstall could not give it back."""
    project = make_repo(tmp_path / "proj")
    settings = tmp_path / "home" / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    mine = {"hooks": {"PreToolUse": [{"matcher": "X", "hooks": []},
                                     {"matcher": "Y", "hooks": [{"type": "command", "command": "me"}]}]}}
    settings.write_text(json.dumps(mine))
    assert ctxd(tmp_path, "hooks", "install", "--agent", "claude", cwd=project).returncode == 0
    installed = json.loads(settings.read_text())
    assert installed["hooks"]["PreToolUse"][:2] == mine["hooks"]["PreToolUse"]
    settings.write_text(json.dumps({**installed, "agentSaved": True}))
    assert ctxd(tmp_path, "hooks", "uninstall", "--agent", "claude", cwd=project).returncode == 0
    assert json.loads(settings.read_text()) == {**mine, "agentSaved": True}


RACER = """
import os, random, sys, time
sys.path[0] = {root!r}
from ctxd.agents.config import files
from ctxd.entry import main

real = files._replace
def slow(*args, **kwargs):  # a slow disk: the writes of two installs at once interleave
    time.sleep(random.uniform(0, 0.15))
    real(*args, **kwargs)
files._replace = slow
gate = {gate!r}
open(os.path.join(gate, str(os.getpid())), "w").close()
deadline = time.monotonic() + 60
while len(os.listdir(gate)) < 2 and time.monotonic() < deadline:  # both start together
    time.sleep(0.005)
raise SystemExit(main(sys.argv[1:]))
"""

USER_FILES = {  # what the user had, under the home folder
    ".claude/settings.json": CLAUDE_SETTINGS,
    ".claude.json": '{"numStartups": 3, "mcpServers": {"docs": {"command": "docs-mcp"}}}\n',
    ".codex/config.toml": CODEX_CONFIG,
    ".gemini/settings.json": '{\n  "theme": "x",\n  "mcpServers": {}\n}\n',
    ".qwen/settings.json": '{\n  "ui": {},\n  "general": {"vimMode": true}\n}\n',
    ".config/opencode/opencode.json": '{\n  // mine\n  "theme": "x",\n  "mcp": {},\n}\n',
}


def test_two_installs_at_once_of_two_ctxds_leave_one_whole_install_and_the_users_entries(tmp_path: Path) -> None:
    """Two `ctxd hooks install` at once from two ctxds (two venvs: two commands to write): each read
    the files, then wrote them one by one, so the agents' files ended up some from one, some from
    the other, or one's failure put back files the other had written while it said it wrote them.
    They take turns now: the files are all of the one that ran last, and uninstall gives the
    user's bytes back."""
    home = tmp_path / "home"
    project = make_repo(tmp_path / "proj")
    env = env_for(tmp_path)
    for rel, text in USER_FILES.items():
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text(text)
    roots = {name: tmp_path / name for name in ("venv-a", "venv-b")}
    for root in roots.values():
        root.symlink_to(REPO)  # another path to ctxd: another command in the agents' files
    for round_ in range(3):
        gate = tmp_path / f"gate{round_}"
        gate.mkdir()
        racers = [subprocess.Popen([sys.executable, "-c", RACER.format(root=str(root), gate=str(gate)),
                                    "hooks", "install", "--agent", "all"], cwd=project, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE) for root in roots.values()]
        results = [(*racer.communicate(timeout=120), racer.returncode) for racer in racers]  # (a guard against a hang)
        assert all(code == 0 for _, _, code in results), results
        texts = {rel: (home / rel).read_text() for rel in USER_FILES}
        texts["plugin"] = (home / ".config" / "opencode" / "plugins" / "ctxd.js").read_text()
        whose = {rel: {name for name, root in roots.items() if f"{root}{os.sep}ctxd" in text}
                 for rel, text in texts.items()}
        assert len({frozenset(names) for names in whose.values()}) == 1 and len(whose["plugin"]) == 1, whose
    assert "~/bin/guard.sh" in (home / ".codex" / "config.toml").read_text()
    assert '"Read(~/.zshrc)"' in (home / ".claude" / "settings.json").read_text()
    done = ctxd(tmp_path, "hooks", "uninstall", cwd=project, env=env)
    assert done.returncode == 0, done.stderr
    for rel, text in USER_FILES.items():
        assert (home / rel).read_text() == text, rel
    assert not (home / ".config" / "opencode" / "plugins").exists()


@pytest.mark.parametrize("kind", ["held", "fifo", "link"])
def test_the_install_lock_never_blocks_for_good_nor_is_written_through(tmp_path: Path, kind: str) -> None:
    """The lock that makes installs take turns (`one_at_a_time`): held by a stuck install, it is
    waited for a bounded time; a FIFO or a link in its place is refused, never opened through."""
    import fcntl

    from ctxd.agents.config.files import InstallError
    from ctxd.agents.config.plan import one_at_a_time
    from ctxd.places import hooks_dir

    state = tmp_path / "state"
    lock = hooks_dir(state) / "install.lock"
    target = tmp_path / "elsewhere"
    holder = None
    if kind == "fifo":
        os.mkfifo(lock)
    elif kind == "link":
        lock.symlink_to(target)
    else:
        holder = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(holder, fcntl.LOCK_EX)  # a stuck install
    try:
        with pytest.raises(InstallError), one_at_a_time(state, wait=0.2):
            pass
    finally:
        if holder is not None:
            os.close(holder)
    assert not target.exists()
    if kind == "held":
        with one_at_a_time(state, wait=0.2):  # released: taken at once
            pass
