"""`ctxd hooks install|uninstall|status`, `ctxd hook`, `ctxd statusline`, and checkpoints that say
what took them: the real `ctxd` command in real git repositories, the real daemon for the wire."""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

from ctxd.places import ctxd_command
from tests.ghost_repo import IDENTITY
from tests.rpc import REPO, check_shape, start_daemon

CLAUDE_SETTINGS = """{
    "$schema": "https://json.schemastore.org/claude-code-settings.json",
    "permissions": {
        "allow": ["Bash(npm run test:*)", "Read(~/.zshrc)"],
        "deny": []
    },
    "hooks": {
        "PreToolUse": [
            {
                "matcher": "Bash",
                "hooks": [{"type": "command", "command": "~/bin/audit.sh", "timeout": 3}]
            }
        ],
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]
    },
    "statusLine": {"type": "command", "command": "echo user-line; cat >/dev/null", "padding": 1},
    "someFutureKey": {"nested": [1, 2.5, null, "\u00e9"]}
}
"""

CODEX_CONFIG = """# my Codex settings
model = "gpt-5.4"  # the default model
approval_policy = "on-request"

[features]
# hooks are on by default; keep them
hooks = true

[[hooks.PreToolUse]]
matcher = "Bash"
[[hooks.PreToolUse.hooks]]
type = "command"
command = "~/bin/guard.sh"

[mcp_servers.docs]
command = "docs-mcp"
args = ["--stdio"]

[projects."/home/me/work"]
trust_level = "trusted"
"""


def ctxd_bin(tmp_path: Path) -> Path:
    """A `ctxd` executable on PATH that runs this worktree's code (what install must name)."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    script = folder / "ctxd"
    script.write_text(f"#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} -m ctxd \"$@\"\n")
    script.chmod(0o755)
    return script


def env_for(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CTXD_", "CODEX_", "CLAUDE_", "QWEN_", "GEMINI_", "OPENCODE_"))}
    ctxd_bin(tmp_path)
    env.update({"HOME": str(home), "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(home / ".config"),
                "XDG_DATA_HOME": str(home / ".local" / "share"),
                "PATH": f"{tmp_path / 'bin'}{os.pathsep}{env.get('PATH', '')}", "GIT_CONFIG_GLOBAL": os.devnull,
                "GIT_CONFIG_NOSYSTEM": "1", **IDENTITY})
    env["CTXD_OWNER_IDLE_SECONDS"] = "20"  # the owner hooks start ends soon after their test
    return env


def on_machine(tmp_path: Path, *folders: str) -> None:
    """The agents whose home folders are named (".claude", ".codex") have run in env_for's home:
    `ctxd hooks install` with no `--agent` installs only into those."""
    for folder in folders:
        (tmp_path / "home" / folder).mkdir(parents=True, exist_ok=True)


def ctxd(tmp_path: Path, *args: str, cwd: Path, stdin: bytes = b"", env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([str(ctxd_bin(tmp_path)), *args], cwd=cwd, input=stdin, capture_output=True,
                          env=env or env_for(tmp_path), timeout=60)  # a guard against a hang, not a speed check


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    for args in (["init", "-q"], ["add", "-A"]):
        subprocess.run(["git", *args], cwd=path, check=True)
    (path / "app.py").write_text("print('v1')\n")
    subprocess.run(["git", "add", "-A"], cwd=path, check=True)
    subprocess.run(["git", "commit", "-qm", "init"], cwd=path, check=True, env={**os.environ, **IDENTITY})
    return path


# --- install / uninstall ------------------------------------------------------------------------------


def test_claude_project_install_keeps_every_byte_and_uninstall_puts_them_back(tmp_path: Path) -> None:
    project = make_repo(tmp_path / "proj")
    settings = project / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(CLAUDE_SETTINGS)
    mcp = project / ".mcp.json"
    mcp.write_text('{\n  "mcpServers": {\n    "docs": {"command": "docs-mcp"}\n  }\n}\n')
    original_mcp = mcp.read_bytes()

    done = ctxd(tmp_path, "hooks", "install", "--agent", "claude", "--scope", "project", cwd=project / ".claude")
    assert done.returncode == 0, done.stderr
    value = json.loads(settings.read_text())
    exe = shlex.join(ctxd_command())  # what install writes: ctxd.launch, whatever started it
    assert value["permissions"]["allow"] == ["Bash(npm run test:*)", "Read(~/.zshrc)"]
    assert value["someFutureKey"] == {"nested": [1, 2.5, None, "é"]}
    assert value["hooks"]["Stop"] == [{"hooks": [{"type": "command", "command": "notify-send done"}]}]
    pre = value["hooks"]["PreToolUse"]
    assert pre[0]["hooks"][0]["command"] == "~/bin/audit.sh"  # the user's own hook first, as it was
    assert pre[1]["matcher"] == "Write|Edit|MultiEdit|NotebookEdit|Bash"
    assert pre[1]["hooks"][0]["command"] == f"{exe} hook claude PreToolUse"
    for event in ("UserPromptSubmit", "PostCompact", "SessionStart"):
        assert value["hooks"][event][-1]["hooks"][0]["command"] == f"{exe} hook claude {event}"
    assert value["hooks"]["SessionStart"][-1]["matcher"] == "compact"
    assert value["statusLine"]["command"].startswith(f"{exe} statusline --user ")
    servers = json.loads(mcp.read_text())["mcpServers"]
    assert servers["docs"] == {"command": "docs-mcp"}
    assert servers["ctxd"] == {"type": "stdio", "command": sys.executable, "args": [*ctxd_command()[1:], "mcp"]}
    assert "approve `ctxd`" in done.stdout.decode()

    installed = settings.read_bytes(), mcp.read_bytes()
    again = ctxd(tmp_path, "hooks", "install", "--agent", "claude", "--scope", "project", cwd=project)
    assert again.returncode == 0 and (settings.read_bytes(), mcp.read_bytes()) == installed

    done = ctxd(tmp_path, "hooks", "uninstall", "--agent", "claude", "--scope", "project", cwd=project)
    assert done.returncode == 0, done.stderr
    assert settings.read_text() == CLAUDE_SETTINGS
    assert mcp.read_bytes() == original_mcp


def test_claude_uninstall_after_the_user_changed_the_file_removes_only_ctxds_entries(tmp_path: Path) -> None:
    project = make_repo(tmp_path / "proj")
    settings = project / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(CLAUDE_SETTINGS)
    assert ctxd(tmp_path, "hooks", "install", "--agent", "claude", "--scope", "project", cwd=project).returncode == 0
    value = json.loads(settings.read_text())
    value["model"] = "opus"  # Claude Code or the user wrote to it since
    settings.write_text(json.dumps(value, indent=2) + "\n")

    assert ctxd(tmp_path, "hooks", "uninstall", "--agent", "claude", "--scope", "project", cwd=project).returncode == 0
    expected = json.loads(CLAUDE_SETTINGS)
    expected["model"] = "opus"
    assert json.loads(settings.read_text()) == expected
    assert json.loads(settings.read_text())["statusLine"] == json.loads(CLAUDE_SETTINGS)["statusLine"]


def test_codex_install_edits_the_toml_as_text_and_uninstall_restores_it_byte_for_byte(tmp_path: Path) -> None:
    project = make_repo(tmp_path / "proj")
    config = project / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text(CODEX_CONFIG)

    dry = ctxd(tmp_path, "hooks", "install", "--agent", "codex", "--scope", "project", "--dry-run", cwd=project)
    assert dry.returncode == 0 and config.read_text() == CODEX_CONFIG
    assert "+[[hooks.PreToolUse]]" in dry.stdout.decode() and "+[mcp_servers.ctxd]" in dry.stdout.decode()

    done = ctxd(tmp_path, "hooks", "install", "--agent", "codex", "--scope", "project", cwd=project)
    assert done.returncode == 0, done.stderr
    text = config.read_text()
    assert CODEX_CONFIG in text  # every byte of the user's, in order
    parsed = tomllib.loads(text)
    exe = shlex.join(ctxd_command())  # what install writes: ctxd.launch, whatever started it
    assert "notify" not in parsed  # Codex refuses a project's `notify` (tests/test_hooks_install.py)
    assert parsed["model"] == "gpt-5.4" and parsed["mcp_servers"]["docs"]["command"] == "docs-mcp"
    pre = parsed["hooks"]["PreToolUse"]
    assert pre[0]["hooks"][0]["command"] == "~/bin/guard.sh"
    assert pre[1]["hooks"][0]["command"] == f"{exe} hook codex PreToolUse"
    assert "apply_patch" in pre[1]["matcher"] and "Bash" in pre[1]["matcher"]
    assert parsed["hooks"]["UserPromptSubmit"][0]["hooks"][0]["command"] == f"{exe} hook codex UserPromptSubmit"
    assert parsed["mcp_servers"]["ctxd"] == {"command": sys.executable, "args": [*ctxd_command()[1:], "mcp"]}
    out = done.stdout.decode()
    assert "/hooks" in out and "trust_level" in out  # says what the user must do, trusts nothing itself
    assert "[hooks.state" not in text and str(project) not in (tmp_path / "home").joinpath(".codex").as_posix()

    assert ctxd(tmp_path, "hooks", "install", "--agent", "codex", "--scope", "project", cwd=project).returncode == 0
    assert config.read_text() == text
    assert ctxd(tmp_path, "hooks", "uninstall", "--agent", "codex", "--scope", "project", cwd=project).returncode == 0
    assert config.read_bytes() == CODEX_CONFIG.encode()


def test_user_scope_files_created_by_install_are_removed_by_uninstall(tmp_path: Path) -> None:
    folder = make_repo(tmp_path / "proj")
    home = tmp_path / "home"
    on_machine(tmp_path, ".claude", ".codex")
    assert ctxd(tmp_path, "hooks", "install", cwd=folder).returncode == 0
    created = [home / ".claude" / "settings.json", home / ".claude.json", home / ".codex" / "config.toml"]
    assert all(p.exists() for p in created)
    status = ctxd(tmp_path, "hooks", "status", cwd=folder).stdout.decode()
    assert ("claude user: hooks UserPromptSubmit, PreToolUse, PostCompact, SessionStart; status line yes; "
            "MCP server yes") in status
    assert ("codex user: hooks UserPromptSubmit, PreToolUse, PostCompact, SessionStart (installed, not trusted yet"
            in status) and "MCP server yes" in status and "notify" not in status
    assert ctxd(tmp_path, "hooks", "uninstall", cwd=folder).returncode == 0
    assert not any(p.exists() for p in created)


def test_a_file_that_cannot_be_parsed_is_left_alone_with_a_clear_error(tmp_path: Path) -> None:
    project = make_repo(tmp_path / "proj")
    settings = project / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{"hooks": {,}\n')
    config = project / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text('[hooks]\nPreToolUse = [ { matcher = "x" } ]\n')  # valid, but ctxd's tables cannot join it
    for agent, path in (("claude", settings), ("codex", config)):
        before = path.read_bytes()
        done = ctxd(tmp_path, "hooks", "install", "--agent", agent, "--scope", "project", cwd=project)
        assert done.returncode == 1
        assert str(path) in done.stderr.decode() and "left unchanged" in done.stderr.decode()
        assert path.read_bytes() == before
    assert not (project / ".mcp.json").exists()


def test_codex_users_own_notify_is_kept(tmp_path: Path) -> None:
    project = make_repo(tmp_path / "proj")
    config = tmp_path / "home" / ".codex" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('notify = ["my-notifier"]\n')
    done = ctxd(tmp_path, "hooks", "install", "--agent", "codex", cwd=project)
    assert done.returncode == 0
    assert tomllib.loads(config.read_text())["notify"] == ["my-notifier"]
    assert ctxd(tmp_path, "hooks", "uninstall", "--agent", "codex", cwd=project).returncode == 0
    assert config.read_text() == 'notify = ["my-notifier"]\n'


def test_codex_install_runs_no_program_after_each_turn_and_removes_an_older_ctxds(tmp_path: Path) -> None:
    """An older ctxd wrote a `notify` that ran `ctxd hook codex notify` after every turn and did
    nothing (the turn's checkpoints are taken before it): a process per turn the user waited for.
    Install writes none now, and takes out an older install's; its status says where one is left."""
    project = make_repo(tmp_path / "proj")
    config = tmp_path / "home" / ".codex" / "config.toml"
    config.parent.mkdir(parents=True)
    older = ('# >>> ctxd notify: written by `ctxd hooks install`; `ctxd hooks uninstall` removes it\n'
             'notify = ["/usr/local/bin/ctxd", "hook", "codex", "notify"]\n# <<< ctxd notify\nmodel = "gpt-5.4"\n')
    config.write_text(older)
    assert "an older ctxd's `notify`" in ctxd(tmp_path, "hooks", "status", "--agent", "codex", cwd=project).stdout.decode()
    assert ctxd(tmp_path, "hooks", "install", "--agent", "codex", cwd=project).returncode == 0
    parsed = tomllib.loads(config.read_text())
    assert "notify" not in parsed and parsed["model"] == "gpt-5.4" and "UserPromptSubmit" in parsed["hooks"]
    assert "notify" not in ctxd(tmp_path, "hooks", "status", "--agent", "codex", cwd=project).stdout.decode()
    assert ctxd(tmp_path, "hooks", "uninstall", "--agent", "codex", cwd=project).returncode == 0
    assert config.read_text() == 'model = "gpt-5.4"\n'


# --- ctxd hook -------------------------------------------------------------------------------------


def hook(tmp_path: Path, agent: str, event: str, data: Any, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    return ctxd(tmp_path, "hook", agent, event, cwd=cwd, stdin=raw)


def snapshots(tmp_path: Path, folder: Path) -> list[dict[str, Any]]:
    """The folder's checkpoints as the daemon lists them (`ctxd/ghost/list`), checked against the shapes."""
    client = start_daemon(tmp_path / "state", env={"HOME": str(tmp_path / "home")})
    try:
        client.initialize([folder])
        listed = client.request("ctxd/ghost/list", {"workspace": folder.as_uri()})
        assert check_shape("ctxd/ghost/list", listed) is None
        return listed["snapshots"]
    finally:
        client.shutdown()


def known_project(tmp_path: Path) -> Path:
    project = make_repo(tmp_path / "proj")
    assert ctxd(tmp_path, "hooks", "install", "--agent", "claude", "--scope", "project", cwd=project).returncode == 0
    return project


def test_a_checkpoint_before_each_tool_that_changes_files_and_at_each_turn(tmp_path: Path) -> None:
    project = known_project(tmp_path)
    base = {"session_id": "s-1", "cwd": str(project / ".claude"), "transcript_path": "/nowhere"}
    prompt = {**base, "prompt": "Make  app.py print v2"}
    assert hook(tmp_path, "claude", "UserPromptSubmit", prompt, project).returncode == 0
    write = {**base, "tool_name": "Write", "tool_use_id": "toolu_1",
             "tool_input": {"file_path": str(project / "src" / "new.py"), "content": "x"}}
    assert hook(tmp_path, "claude", "PreToolUse", write, project).returncode == 0
    (project / "src").mkdir()
    (project / "src" / "new.py").write_text("x\n")
    read = {**base, "tool_name": "Read", "tool_input": {"file_path": str(project / "app.py")}}
    assert hook(tmp_path, "claude", "PreToolUse", read, project).returncode == 0
    bash = {**base, "tool_name": "Bash", "tool_use_id": "toolu_2", "tool_input": {"command": "sed -i s/v1/v2/ app.py"}}
    assert hook(tmp_path, "claude", "PreToolUse", bash, project).returncode == 0
    patch = {"session_id": "c-9", "cwd": str(project), "tool_name": "apply_patch", "tool_use_id": "call_7",
             "tool_input": {"command": "*** Begin Patch\n*** Update File: app.py\n@@\n-a\n+b\n"
                                       "*** Add File: b.txt\n+b\n*** End Patch\n"}}
    (project / "app.py").write_text("print('v2')\n")
    assert hook(tmp_path, "codex", "PreToolUse", patch, project).returncode == 0

    listed = snapshots(tmp_path, project)
    by_message = {s["message"]: s for s in listed}
    turn = by_message["Make app.py print v2"]
    assert turn["trigger"] == "turn" and turn["thread"] == "claude:s-1"
    assert turn["turn"] == {"index": 1, "text": "Make app.py print v2"}
    # Before Write the tree was the turn's: no second commit, the turn's checkpoint is listed once.
    assert "before Write src/new.py" not in by_message
    sed = by_message["before Bash: sed -i s/v1/v2/ app.py"]
    assert sed["trigger"] == "tool" and sed["tool"] == {"name": "Bash", "callId": "toolu_2"}
    assert sed["turn"] == {"index": 1, "text": "Make app.py print v2"}
    codex = by_message["before apply_patch app.py, b.txt"]
    assert codex["thread"] == "codex:c-9" and codex["tool"] == {"name": "apply_patch", "callId": "call_7",
                                                               "paths": ["app.py", "b.txt"]}
    assert "turn" not in codex
    assert len(listed) == 3 and not any("Read" in s["message"] for s in listed)


def test_the_hook_never_fails_the_agent(tmp_path: Path) -> None:
    project = known_project(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    log = tmp_path / "state" / "ctxd" / "hooks.log"
    cases = [
        (b"\x00\xff not json", project),
        (b"[1, 2]", project),
        (json.dumps({"session_id": "s", "cwd": "relative/path", "prompt": "x"}).encode(), project),
        (json.dumps({"session_id": "s", "cwd": str(outside), "prompt": "x"}).encode(), outside),
    ]
    for raw, cwd in cases:
        done = hook(tmp_path, "claude", "UserPromptSubmit", raw, cwd)
        assert done.returncode == 0 and done.stdout == b"" and done.stderr == b""
    assert ctxd(tmp_path, "hook", "nobody", "x", cwd=project).returncode == 0
    text = log.read_text()
    assert "not JSON" in text and "not a JSON object" in text and "no session_id or absolute cwd" in text
    assert f"{outside} is neither in a git work tree nor in a folder ctxd knows" in text
    assert not (outside / ".git").exists()
    ghost_state = tmp_path / "state" / "ctxd" / "ghost"  # only the key that proves ctxd made its stores
    assert not ghost_state.exists() or {p.name for p in ghost_state.iterdir()} == {"owner.key"}

    # A repository it must not touch: its .git names another folder's work tree.
    other = make_repo(tmp_path / "other")
    (other / ".git" / "ctxd" / "store").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "--bare", str(other / ".git" / "ctxd" / "store")], check=True)
    subprocess.run(["git", "config", "core.worktree", str(project)], cwd=other, check=True)
    done = hook(tmp_path, "claude", "UserPromptSubmit", {"session_id": "s", "cwd": str(other), "prompt": "x"}, other)
    assert done.returncode == 0
    assert "no checkpoint" in log.read_text()


def test_a_locked_store_does_not_block_the_agent_and_the_checkpoint_follows(tmp_path: Path) -> None:
    project = known_project(tmp_path)
    lock = project / ".git" / "ctxd" / "store" / "ctxd.lock"
    with open(lock, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        done = hook(tmp_path, "claude", "UserPromptSubmit", {"session_id": "s", "cwd": str(project), "prompt": "go"},
                    project)
        assert done.returncode == 0
        refs = project / ".git" / "ctxd" / "store" / "refs" / "ctxd"
        assert not refs.exists() or not any(refs.rglob("*"))
    deadline = time.monotonic() + 30
    while not any(p.is_file() for p in refs.rglob("*")) if refs.exists() else True:
        assert time.monotonic() < deadline, "the checkpoint never followed the lock's release"
        time.sleep(0.1)
    assert "goes on after the hook returned" in (tmp_path / "state" / "ctxd" / "hooks.log").read_text()


def test_after_a_compaction_the_model_is_told_about_recall_only_with_the_mcp_server(tmp_path: Path) -> None:
    project = make_repo(tmp_path / "proj")
    start = {"session_id": "s", "cwd": str(project), "hook_event_name": "SessionStart", "source": "compact"}
    assert hook(tmp_path, "claude", "SessionStart", start, project).stdout == b""
    on_machine(tmp_path, ".claude", ".codex")
    assert ctxd(tmp_path, "hooks", "install", "--scope", "project", cwd=project).returncode == 0
    for agent in ("claude", "codex"):
        out = json.loads(hook(tmp_path, agent, "SessionStart", start, project).stdout)
        assert out["hookSpecificOutput"]["hookEventName"] == "SessionStart"
        assert "recall" in out["hookSpecificOutput"]["additionalContext"]
    assert hook(tmp_path, "claude", "SessionStart", {**start, "source": "startup"}, project).stdout == b""


# --- statusline --------------------------------------------------------------------------------------


STATUS = {"session_id": "abc", "cwd": "", "model": {"id": "claude-sonnet-4-5", "display_name": "Sonnet"},
          "cost": {"total_cost_usd": 1.234},
          "context_window": {"context_window_size": 200000, "total_input_tokens": 150000,
                             "current_usage": {"input_tokens": 10, "output_tokens": 5,
                                               "cache_creation_input_tokens": 2000,
                                               "cache_read_input_tokens": 148000}}}


def test_statusline_prints_fill_against_the_compaction_point_and_runs_the_users_command(tmp_path: Path) -> None:
    project = known_project(tmp_path)  # its status line now carries the user's (none here)
    data = {**STATUS, "cwd": str(project)}
    done = ctxd(tmp_path, "statusline", "--no-colour", cwd=project, stdin=json.dumps(data).encode())
    line = done.stdout.decode().strip()
    # 150,010 of Claude Code's compaction point (200,000 - 20,000 - 13,000 = 167,000): 90%.
    assert line.startswith("claude · 90% of 167k · $1.23 · "), line
    handed = json.loads((tmp_path / "state" / "ctxd" / "hooks" / "usage" / "claude-abc.json").read_text())
    assert handed["usedTokens"] == 150010 and handed["thread"] == "claude:abc" and handed["compactAt"] == 167000
    coloured = ctxd(tmp_path, "statusline", cwd=project, stdin=json.dumps(data).encode()).stdout.decode()
    assert coloured.startswith("\033[33m")  # warn: from 80% of the compaction point

    settings = project / ".claude" / "settings.json"
    settings.write_text(json.dumps({"statusLine": {"type": "command", "command": "printf 'mine:'; head -c 12"}}))
    assert ctxd(tmp_path, "hooks", "install", "--agent", "claude", "--scope", "project", cwd=project).returncode == 0
    command = json.loads(settings.read_text())["statusLine"]["command"]
    done = subprocess.run(command, shell=True, input=json.dumps(data).encode(), capture_output=True, cwd=project,
                          env=env_for(tmp_path), timeout=60)
    lines = done.stdout.decode().splitlines()
    assert len(lines) == 2 and "90% of 167k" in lines[0] and lines[1] == 'mine:{"session_id'


# --- the store: retention, unchanged trees, the workspace from a subfolder --------------------------------


def test_automatic_checkpoints_have_their_own_retention(tmp_path: Path) -> None:
    from ctxd.ghost import api as ghost
    from ctxd.settings import GhostSettings

    project = make_repo(tmp_path / "proj")
    settings = GhostSettings(keep=2, keep_auto=3)
    state = tmp_path / "state"
    manual = []
    for n in range(2):
        (project / "app.py").write_text(f"manual {n}\n")
        manual.append(ghost.snapshot(project, f"mine {n}", settings=settings, state_dir=state)["id"])
    auto = []
    for n in range(6):
        (project / "app.py").write_text(f"auto {n}\n")
        auto.append(ghost.snapshot(project, f"tool {n}", settings=settings, state_dir=state, trigger="tool",
                                   tool={"name": "Edit", "paths": ["app.py"]})["id"])
    again = ghost.snapshot(project, "no change", settings=settings, state_dir=state, trigger="tool",
                           tool={"name": "Bash"})
    assert again["id"] == auto[-1] and again["trigger"] == "tool"
    kept = [s["id"] for s in ghost.list_snapshots(project, state_dir=state)]
    assert set(kept) == set(manual) | set(auto[-3:])  # six tools evicted three of theirs, none of the user's
    (project / "app.py").write_text("manual 2\n")
    ghost.snapshot(project, "mine 2", settings=settings, state_dir=state)
    kept = [s["id"] for s in ghost.list_snapshots(project, state_dir=state)]
    assert manual[0] not in kept and manual[1] in kept and set(auto[-3:]) <= set(kept)
    # A manual snapshot of an unchanged tree is still taken (the user asked for it).
    assert ghost.snapshot(project, "mine 3", settings=settings, state_dir=state)["id"] not in kept


def test_usage_and_sessions_find_the_enclosing_workspace_from_a_subfolder(tmp_path: Path) -> None:
    from ctxd.places import find_workspace

    project = make_repo(tmp_path / "proj")
    deep = project / "src" / "pkg"
    deep.mkdir(parents=True)
    state = tmp_path / "state" / "ctxd"
    assert find_workspace(deep, state) == (project, False, state, True)  # the git root, not known yet
    plain = tmp_path / "plain" / "sub"
    plain.mkdir(parents=True)
    assert find_workspace(plain, state) == (plain, False, state, False)
    client = start_daemon(tmp_path / "state", env={"HOME": str(tmp_path / "home")})
    try:
        client.initialize([project / "src"])  # an editor opened the subfolder: its database makes it known
        client.request("ctxd/record", {"workspace": (project / "src").as_uri(), "items": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello"}]}]})
    finally:
        client.shutdown()
    assert find_workspace(deep, state) == (project / "src", True, state, False)
    done = ctxd(tmp_path, "usage", "--format", "json", cwd=deep)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["usage"]["usedTokens"] > 0
    sessions = ctxd(tmp_path, "sessions", "--format", "json", cwd=deep)
    assert sessions.returncode == 0 and json.loads(sessions.stdout) == []


def test_the_file_watching_checkpoint_steps_aside_for_a_hooked_session(daemon_factory, tmp_path: Path,
                                                                        state_dir: Path) -> None:
    from tests import session_fixtures as fx
    from tests.test_sessions_e2e import CODEX_THREAD, followed_codex_repo

    repo, rollout, client = followed_codex_repo(daemon_factory, tmp_path, {"a.txt": "a\n"})
    uri = repo.root.as_uri()

    def labels() -> list[str]:
        return [s["message"] for s in client.request("ctxd/ghost/list", {"workspace": uri})["snapshots"]]

    fx.append_jsonl(rollout, fx.codex_turn("not hooked yet", "2025-10-03T10:05:00.000Z", cwd=str(repo.root)))
    deadline = time.monotonic() + 30
    while "not hooked yet" not in labels():
        assert time.monotonic() < deadline, "no file-watching checkpoint for a session without hooks"
        time.sleep(0.05)
    turn = next(s for s in client.request("ctxd/ghost/list", {"workspace": uri})["snapshots"])
    assert turn["trigger"] == "turn" and turn["thread"] == CODEX_THREAD and turn["turn"]["text"] == "not hooked yet"

    # The session's hooks run (a tool that changes nothing: no checkpoint of their own).
    env = {**env_for(tmp_path), "XDG_STATE_HOME": str(state_dir)}
    read = {"session_id": CODEX_THREAD.split(":", 1)[1], "cwd": str(repo.root), "tool_name": "view_image",
            "tool_input": {"path": "a.txt"}}
    assert ctxd(tmp_path, "hook", "codex", "PreToolUse", cwd=repo.root, stdin=json.dumps(read).encode(),
                env=env).returncode == 0
    (repo.root / "a.txt").write_text("changed, so that a checkpoint would commit\n")
    fx.append_jsonl(rollout, fx.codex_turn("hooked now", "2025-10-03T10:06:00.000Z", cwd=str(repo.root)))
    deadline = time.monotonic() + 30
    while not any("hooked now" in json.dumps(i) for i in client.request(
            "ctxd/history", {"workspace": uri, "thread": CODEX_THREAD})["items"]):
        assert time.monotonic() < deadline, "the daemon never read the second turn"
        time.sleep(0.05)
    time.sleep(1.0)  # the checkpoint, had it been asked for, is queued before the mirror: give it time
    assert "hooked now" not in labels()


def test_keep_auto_is_a_setting_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ctxd.settings import load_settings

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    folder = tmp_path / "ws"
    folder.mkdir()
    assert load_settings(folder).ghost.keep_auto == 300
    (folder / ".ctxd.toml").write_text("[ghost]\nkeep_auto = 12\nkeep = 5\n")
    settings = load_settings(folder)
    assert (settings.ghost.keep_auto, settings.ghost.keep) == (12, 5)
    (folder / ".ctxd.toml").write_text("[ghost]\nkeep_auto = 0\n")
    problems: list[Any] = []
    assert load_settings(folder, None, problems).ghost.keep_auto == 300
    assert any(p.key == "ghost.keep_auto" for p in problems)


def test_a_linked_configuration_file_stays_a_link(tmp_path: Path) -> None:
    """At user scope, a dotfile linked elsewhere is the user's own setup: written where it lives.
    (At project scope a link out of the project is refused: tests/test_hooks_install.py.)"""
    project = make_repo(tmp_path / "proj")
    dotfiles = tmp_path / "dotfiles" / "config.toml"
    dotfiles.parent.mkdir()
    dotfiles.write_text(CODEX_CONFIG)
    linked = tmp_path / "home" / ".codex" / "config.toml"
    linked.parent.mkdir(parents=True)
    linked.symlink_to(dotfiles)
    assert ctxd(tmp_path, "hooks", "install", "--agent", "codex", cwd=project).returncode == 0
    assert linked.is_symlink() and "# >>> ctxd" in dotfiles.read_text()
    assert ctxd(tmp_path, "hooks", "uninstall", "--agent", "codex", cwd=project).returncode == 0
    assert linked.is_symlink() and dotfiles.read_text() == CODEX_CONFIG


# --- a running daemon learns what the hooks and the status line wrote ------------------------------


def watching(client: Any, folder: Path) -> None:
    """Wait until the daemon follows sessions (its hook watcher starts just before)."""
    deadline = time.monotonic() + 30
    while not client.request("ctxd/status", {"workspace": folder.as_uri()})["sources"]:
        assert time.monotonic() < deadline, "the daemon never started following sessions"
        time.sleep(0.05)


def test_a_running_daemon_tells_its_clients_when_a_hook_takes_a_checkpoint(daemon_factory, tmp_path: Path,
                                                                           state_dir: Path) -> None:
    project = known_project(tmp_path)
    client = daemon_factory([project], env={"HOME": str(tmp_path / "home")})
    uri = project.as_uri()
    watching(client, project)
    seen = len(client.notifications)
    turn = {"session_id": "s-7", "cwd": str(project), "prompt": "Rename the app"}
    assert hook(tmp_path, "claude", "UserPromptSubmit", turn, project).returncode == 0
    pushed = client.wait_for_notification("ctxd/ghostChanged", lambda p: p["workspace"] == uri, timeout=15, after=seen)
    assert check_shape("ctxd/ghostChanged", pushed) is None
    listed = client.request("ctxd/ghost/list", {"workspace": uri})["snapshots"]
    assert [(s["message"], s["trigger"], s["thread"]) for s in listed] == [("Rename the app", "turn", "claude:s-7")]


def followed_claude(daemon_factory, tmp_path: Path) -> tuple[Path, Any]:
    """A workspace with a Claude Code session the daemon follows (its file reports 15,546 tokens)."""
    from tests import session_fixtures as fx
    from tests.test_sessions_e2e import CLAUDE_THREAD, homes, wait_thread

    project = make_repo(tmp_path / "proj")
    _, claude_home, env = homes(tmp_path)
    fx.write_jsonl(fx.claude_path(claude_home, project), fx.claude_session(project))
    client = daemon_factory([project], env={**env, "HOME": str(tmp_path / "home")})
    wait_thread(client, project, CLAUDE_THREAD, lambda t: t["usage"]["usedTokens"] == 15_546)
    watching(client, project)
    return project, client


def status_input(project: Path, session: str, input_tokens: int, read: int, output: int) -> bytes:
    return json.dumps({"session_id": session, "cwd": str(project), "model": {"id": "claude-sonnet-4-5"},
                       "cost": {"total_cost_usd": 0.42},
                       "context_window": {"context_window_size": 200_000, "current_usage": {
                           "input_tokens": input_tokens, "cache_creation_input_tokens": 0,
                           "cache_read_input_tokens": read, "output_tokens": output}}}).encode()


def test_the_status_lines_exact_usage_reaches_every_clients_gauge(daemon_factory, tmp_path: Path,
                                                                  state_dir: Path) -> None:
    from tests import session_fixtures as fx
    from tests.test_sessions_e2e import CLAUDE_THREAD

    project, client = followed_claude(daemon_factory, tmp_path)
    seen = len(client.notifications)
    done = ctxd(tmp_path, "statusline", "--no-colour", cwd=project,
                stdin=status_input(project, fx.CLAUDE_ID, 10, 60_000, 90))
    assert done.returncode == 0 and done.stdout.startswith(b"claude \xc2\xb7 36% of 167k")
    pushed = client.wait_for_notification("ctxd/usageChanged", lambda p: p["thread"] == CLAUDE_THREAD,
                                          timeout=15, after=seen)
    assert check_shape("ctxd/usageChanged", pushed) is None
    # Claude Code's request plus the reply, ctxd's one rule for Claude's fill (docs/sessions.md).
    assert (pushed["usedTokens"], pushed["source"]) == (60_100, "api")
    usage = client.request("ctxd/usage", {"workspace": project.as_uri(), "thread": CLAUDE_THREAD})["usage"]
    assert usage["usedTokens"] == 60_100
    # Another session's status line (a thread this workspace does not follow) changes nothing here.
    seen = len(client.notifications)
    assert ctxd(tmp_path, "statusline", cwd=project, stdin=status_input(project, "other", 1, 2, 3)).returncode == 0
    handed = status_input(project, fx.CLAUDE_ID, 7, 70_000, 3)
    assert ctxd(tmp_path, "statusline", cwd=project, stdin=handed).returncode == 0
    pushed = client.wait_for_notification("ctxd/usageChanged", lambda p: p["thread"] == CLAUDE_THREAD,
                                          timeout=15, after=seen)
    assert pushed["usedTokens"] == 70_010
    assert not any(n["method"] == "ctxd/usageChanged" and n["params"]["thread"] != CLAUDE_THREAD
                   for n in client.notifications[seen:])


def test_after_a_compaction_the_gauge_drops_the_fill_from_before_it_at_once(daemon_factory, tmp_path: Path,
                                                                            state_dir: Path) -> None:
    from tests import session_fixtures as fx
    from tests.test_sessions_e2e import CLAUDE_THREAD

    project, client = followed_claude(daemon_factory, tmp_path)
    uri = project.as_uri()
    seen = len(client.notifications)
    compacted = {"session_id": fx.CLAUDE_ID, "cwd": str(project), "hook_event_name": "PostCompact", "trigger": "manual"}
    assert hook(tmp_path, "claude", "PostCompact", compacted, project).returncode == 0
    pushed = client.wait_for_notification("ctxd/usageChanged", lambda p: p["thread"] == CLAUDE_THREAD,
                                          timeout=15, after=seen)
    assert pushed["source"] == "estimate" and pushed["usedTokens"] != 15_546
    # Claude Code's SessionStart (source "compact") follows: the same compaction, told twice.
    assert hook(tmp_path, "claude", "SessionStart", {**compacted, "source": "compact"}, project).returncode == 0
    # The status line Claude Code runs next still carries the request from before the compaction:
    # it does not bring the stale fill back, nor does the session file's old report.
    stale = ctxd(tmp_path, "statusline", cwd=project, stdin=status_input(project, fx.CLAUDE_ID, 6, 15_500, 40))
    assert stale.returncode == 0
    claude_file = fx.claude_path(tmp_path / "claude-home", project)
    fx.append_jsonl(claude_file, [fx.claude_user("and now?", "u9", "a2", project, "2025-10-03T11:06:00.000Z")])
    from tests.test_sessions_e2e import wait_thread

    wait_thread(client, project, CLAUDE_THREAD, lambda t: t["itemCount"] == 7)
    usage = client.request("ctxd/usage", {"workspace": uri, "thread": CLAUDE_THREAD})["usage"]
    assert usage["source"] == "estimate" and usage["usedTokens"] != 15_546
    # The first report after the compaction is the gauge again.
    seen = len(client.notifications)
    assert ctxd(tmp_path, "statusline", cwd=project,
                stdin=status_input(project, fx.CLAUDE_ID, 5, 4_000, 100)).returncode == 0
    pushed = client.wait_for_notification("ctxd/usageChanged", lambda p: p["thread"] == CLAUDE_THREAD
                                          and p["source"] == "api", timeout=15, after=seen)
    assert pushed["usedTokens"] == 4_105


def test_codexs_post_compact_hook_drops_the_fill_from_before_it_at_once(daemon_factory, tmp_path: Path,
                                                                        state_dir: Path) -> None:
    from tests.test_sessions_e2e import CODEX_THREAD, followed_codex_repo, wait_thread

    repo, _, client = followed_codex_repo(daemon_factory, tmp_path, {"a.txt": "a\n"})
    before = wait_thread(client, repo.root, CODEX_THREAD, lambda t: t["usage"]["source"] == "api")["usage"]
    watching(client, repo.root)
    seen = len(client.notifications)
    compacted = {"session_id": CODEX_THREAD.split(":", 1)[1], "cwd": str(repo.root), "hook_event_name": "PostCompact",
                 "trigger": "auto"}
    assert hook(tmp_path, "codex", "PostCompact", compacted, repo.root).returncode == 0
    pushed = client.wait_for_notification("ctxd/usageChanged", lambda p: p["thread"] == CODEX_THREAD,
                                          timeout=15, after=seen)
    assert pushed["source"] == "estimate" and pushed["usedTokens"] != before["usedTokens"]


def test_a_daemon_with_a_state_dir_of_its_own_gets_the_hooks_checkpoints_and_marks(daemon_factory, tmp_path: Path,
                                                                                    state_dir: Path) -> None:
    """The hooks know only the default state dir; a daemon whose `stateDir` is elsewhere names it
    for each workspace it opens, so a plain folder's checkpoints (whose store lives in the state
    dir) and the session's marks land where that daemon looks."""
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "notes.txt").write_text("first\n")
    elsewhere = tmp_path / "elsewhere"
    client = daemon_factory([folder], {"stateDir": str(elsewhere)}, env={"HOME": str(tmp_path / "home")})
    uri = folder.as_uri()
    watching(client, folder)
    seen = len(client.notifications)
    turn = {"session_id": "s-9", "cwd": str(folder), "prompt": "Tidy the notes"}
    assert hook(tmp_path, "claude", "UserPromptSubmit", turn, folder).returncode == 0
    client.wait_for_notification("ctxd/ghostChanged", lambda p: p["workspace"] == uri, timeout=15, after=seen)
    listed = client.request("ctxd/ghost/list", {"workspace": uri})["snapshots"]
    assert [(s["message"], s["trigger"], s["thread"]) for s in listed] == [("Tidy the notes", "turn", "claude:s-9")]
    from ctxd import marks

    assert marks.hooked(elsewhere, "claude:s-9") and not marks.hooked(state_dir / "ctxd", "claude:s-9")
    # The status line hands its exact usage over where that daemon reads it, and sees the checkpoint.
    shown = ctxd(tmp_path, "statusline", "--no-colour", cwd=folder, stdin=status_input(folder, "s-9", 1000, 0, 10))
    assert "checkpoint" in shown.stdout.decode() and "no checkpoint" not in shown.stdout.decode()
    assert (elsewhere / "hooks" / "usage" / "claude-s-9.json").is_file()
    assert not (state_dir / "ctxd" / "hooks" / "usage" / "claude-s-9.json").exists()
