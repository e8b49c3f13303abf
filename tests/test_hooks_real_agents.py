"""The real Claude Code and Codex CLI (tests/agents.py) with ctxd's hooks installed by
`ctxd hooks install --scope project`: a checkpoint before every change, Bash and shell commands
included, each restorable to exactly the files as they were."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.agents import Claude, Codex, Run
from tests.model_servers import MessagesServer, Reply, ResponsesServer, apply_patch, shell, tool
from tests.rpc import Client
from tests.test_hooks import ctxd, env_for
from tests.test_real_agents import Setup, setup


def install(tmp_path: Path, s: Setup, agent: str) -> None:
    env = {**env_for(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state")}
    done = ctxd(tmp_path, "hooks", "install", "--agent", agent, "--scope", "project", cwd=s.repo.root, env=env)
    assert done.returncode == 0, done.stderr


def checkpoints(s: Setup, thread: str) -> list[dict[str, Any]]:
    listed = s.client.request("ctxd/ghost/list", {"workspace": s.uri})["snapshots"]
    return [c for c in listed if c["thread"] == thread]


def restore(s: Setup, commit: dict[str, Any]) -> None:
    s.client.request("ctxd/ghost/restore", {"workspace": s.uri, "id": commit["id"]})


def one(found: list[dict[str, Any]], check: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    matching = [c for c in found if check(c)]
    assert len(matching) == 1, json.dumps(found, indent=1)
    return matching[0]


def claude_writes_then_changes_twice(s: Setup, state_dir: Path, first: Callable[[], None] | None = None
                                     ) -> tuple[str, dict[str, str]]:
    """The real Claude Code writes hello.txt with Write, changes it with Edit, then with Bash `sed -i`
    (`first` runs before the model answers the prompt). Returns its thread and the files after the Write."""
    ws = s.repo.root
    seen: dict[str, dict[str, str]] = {}
    with MessagesServer() as server:
        claude = Claude(s.base, s.claude_home, server, extra_env={"XDG_STATE_HOME": str(state_dir)})
        server.script(
            Reply(calls=[tool("t1", "Write", file_path=str(ws / "hello.txt"), content="one\n")], before=first),
            Reply(calls=[tool("t2", "Edit", file_path=str(ws / "hello.txt"), old_string="one", new_string="two")],
                  before=lambda: seen.setdefault("after write", s.repo.files())),
            Reply(calls=[tool("t3", "Bash", command="sed -i s/two/three/ hello.txt", description="sed")]),
            Reply(text="Done."))
        run: Run = claude.prompt("Write hello.txt, then change it twice", ws)
        assert server.pending == 0
    assert s.repo.files()["hello.txt"] == "three\n"
    return f"claude:{run.json()['session_id']}", seen["after write"]


def check_each_change_has_its_checkpoint(s: Setup, thread: str, after_write: dict[str, str]) -> None:
    found = checkpoints(s, thread)
    turn = one(found, lambda c: c["trigger"] == "turn")
    assert turn["turn"] == {"index": 1, "text": "Write hello.txt, then change it twice"}
    edit = one(found, lambda c: c.get("tool", {}).get("name") == "Edit")
    assert edit["trigger"] == "tool" and edit["tool"]["paths"] == ["hello.txt"] and edit["tool"]["callId"] == "t2"
    bash = one(found, lambda c: c.get("tool", {}).get("name") == "Bash")
    assert bash["message"] == "before Bash: sed -i s/two/three/ hello.txt"
    assert len(found) == 3  # the Write's checkpoint is the turn's: the same tree, listed once

    restore(s, bash)
    assert s.repo.files()["hello.txt"] == "two\n"
    restore(s, edit)  # the one before the second change: exactly the files after the first
    assert s.repo.files() == after_write
    restore(s, turn)
    assert "hello.txt" not in s.repo.files()


def test_claude_code_write_edit_and_bash_each_have_a_checkpoint_before_them(
        daemon_factory: Callable[..., Client], tmp_path: Path, state_dir: Path) -> None:
    s = setup(daemon_factory, tmp_path)
    install(tmp_path, s, "claude")
    thread, after_write = claude_writes_then_changes_twice(s, state_dir)
    check_each_change_has_its_checkpoint(s, thread, after_write)


def test_claude_code_with_no_editor_open_gets_the_same_checkpoints_from_the_hooks_and_the_owner(
        daemon_factory: Callable[..., Client], tmp_path: Path, state_dir: Path) -> None:
    """An agent in a terminal, no daemon running: the first hook works alone and goes on as the
    owner of the state dir (docs/processes.md), unless `ctxd mcp` started one first; the owner takes
    the checkpoints of the hooks after it."""
    s = setup(daemon_factory, tmp_path)
    install(tmp_path, s, "claude")
    assert s.client.shutdown() == 0  # no editor open: the owner left with it
    hooks_state = state_dir / "ctxd"  # the agent's XDG_STATE_HOME is the daemons' state dir
    assert not (hooks_state / "owner" / "owner.sock").exists()

    def owner_listens() -> None:
        deadline = time.monotonic() + 30
        while not (hooks_state / "owner" / "owner.sock").exists() and time.monotonic() < deadline:
            time.sleep(0.05)

    thread, after_write = claude_writes_then_changes_twice(s, state_dir, first=owner_listens)
    taken = [line for line in (hooks_state / "hooks.log").read_text().splitlines() if ": checkpoint " in line]
    # The turn's: alone, or by the owner `ctxd mcp` (installed too) started as Claude Code started it,
    # whichever came first (tests/test_hooks_daemon.py has the hook that works alone, no MCP server).
    assert len(taken) == 4, taken
    assert all("by the owner" in line for line in taken[1:]), taken
    # An editor opened later lists them and restores each.
    check_each_change_has_its_checkpoint(dataclasses.replace(s, client=daemon_factory([s.repo.root])), thread,
                                         after_write)


class HookedCodex(Codex):
    """Codex with the hook trust a user gives in `/hooks` replaced by its flag for automation
    (the test's own choice; `ctxd hooks install` only says what to do), in a trusted project."""

    def __init__(self, *args: Any, state_dir: Path, project: Path, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.state_dir = state_dir
        with open(self.home / "config.toml", "a") as config:
            config.write(f'\n[projects.{json.dumps(str(project))}]\ntrust_level = "trusted"\n')

    def env(self) -> dict[str, str]:
        return {**super().env(), "XDG_STATE_HOME": str(self.state_dir)}

    def exec(self, prompt: str, cwd: Path, resume: str | None = None) -> Run:
        flags = ["--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "--json",
                 "--dangerously-bypass-hook-trust"]
        return self._run(["exec", *flags, "-C", str(cwd), prompt], cwd)


PATCH_ADD = "*** Begin Patch\n*** Add File: hello.txt\n+one\n*** End Patch\n"
PATCH_EDIT = "*** Begin Patch\n*** Update File: hello.txt\n@@\n-one\n+two\n*** End Patch\n"


def test_codex_apply_patch_and_shell_each_have_a_checkpoint_before_them(
        daemon_factory: Callable[..., Client], tmp_path: Path, state_dir: Path) -> None:
    s = setup(daemon_factory, tmp_path)
    ws = s.repo.root
    install(tmp_path, s, "codex")
    seen: dict[str, dict[str, str]] = {}
    with ResponsesServer() as server:
        codex = HookedCodex(s.base, s.codex_home, server, state_dir=state_dir, project=ws)
        server.script(
            Reply(calls=[apply_patch("c1", PATCH_ADD)]),
            Reply(calls=[apply_patch("c2", PATCH_EDIT)], before=lambda: seen.setdefault("after add", s.repo.files())),
            Reply(calls=[shell("c3", "sed -i s/two/three/ hello.txt")]),
            Reply(text="Done."))
        run = codex.exec("Add hello.txt, then change it twice", ws)
        assert server.pending == 0
    thread = f"codex:{Codex.thread_id(run)}"
    assert s.repo.files()["hello.txt"] == "three\n"

    found = checkpoints(s, thread)
    turn = one(found, lambda c: c["trigger"] == "turn")
    assert turn["turn"]["text"] == "Add hello.txt, then change it twice"
    patch = one(found, lambda c: c.get("tool", {}).get("name") == "apply_patch")
    assert patch["tool"]["paths"] == ["hello.txt"] and patch["tool"]["callId"] == "c2"
    sed = one(found, lambda c: c.get("tool", {}).get("name") == "Bash")
    assert "sed -i s/two/three/ hello.txt" in sed["message"]
    assert len(found) == 3  # the first patch's checkpoint is the turn's: the same tree, listed once

    restore(s, sed)
    assert s.repo.files()["hello.txt"] == "two\n"
    restore(s, patch)
    assert s.repo.files() == seen["after add"]
    restore(s, turn)
    assert "hello.txt" not in s.repo.files()
