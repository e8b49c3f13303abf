"""`ctxd hooks install | uninstall` and `ctxd hook` against what an attack run found: the real `ctxd`
command in real git repositories and real home folders (tests/test_hooks.py's helpers)."""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import pytest

from tests.test_hooks import ctxd, env_for, make_repo, on_machine, snapshots


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
