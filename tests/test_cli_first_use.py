"""What a newcomer sees first: `ctxd sessions` in a folder with no agent session yet says what to do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ctxd import agents
from ctxd.sessions.overview import _either
from tests.ghost_repo import make_repo

REPO = Path(__file__).resolve().parent.parent


def test_ctxd_sessions_with_no_session_says_what_to_do(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "project")
    sub = repo.root / "src" / "pkg"
    sub.mkdir(parents=True)
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXD_", "XDG_", "CODEX_", "CLAUDE_"))}
    env.update(HOME=str(home), PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-m", "ctxd", "sessions"], cwd=sub, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    # The enclosing workspace (the git root), not the subfolder, and how to start each agent.
    titles, names = [a.title for a in agents.every()], [f"`{n}`" for n in agents.names()]
    assert f"No {_either(titles)} sessions in {repo.root.resolve()} yet." in done.stdout
    assert f"({_either(names)})" in done.stdout and "ctxd hooks install" in done.stdout


def test_every_agent_is_named_once_in_a_list_that_reads() -> None:
    assert [_either(list(words)) for words in ("a", "ab", "abc", "abcd")] == ["a", "a or b", "a, b or c", "a, b, c or d"]
