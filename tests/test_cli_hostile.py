"""The command line a user meets first, against what a shell gives it: a deleted current folder, a
symlink loop for `--workspace`, output piped to a reader that went away, a non-UTF-8 output
encoding, and a summary stored before the API key was configured. Each a real `python -m ctxd`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.session_fixtures import codex_path, codex_session, write_jsonl

REPO = Path(__file__).resolve().parent.parent
KEY = "sk-proj-cliSECRETKEY0123456789"


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CTXD_", "XDG_", "CODEX_", "CLAUDE_", "QWEN_", "GEMINI_", "OPENCODE_"))
           and k not in ("OPENAI_API_KEY", "PYTHONIOENCODING")}
    env.update(HOME=str(home), PYTHONPATH=str(REPO), **extra)
    return env


def _codex_home(tmp_path: Path, cwd: Path, title: str | None = None, sessions: int = 1) -> Path:
    home = tmp_path / "home"
    for i in range(sessions):
        sid = f"0199a213-81c0-7800-8aa1-{i:012x}"
        records = codex_session(cwd, sid)
        if title is not None:
            for record in records:
                payload = record.get("payload", {})
                if payload.get("type") == "user_message":
                    payload["message"] = title
                if payload.get("type") == "message" and payload.get("role") == "user" and \
                        "parser" in payload["content"][0]["text"]:
                    payload["content"][0]["text"] = title
        write_jsonl(codex_path(home / ".codex", sid), records)
    return home


def _ctxd(args: list[str], cwd: Path, env: dict[str, str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ctxd", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120, **kw)  # type: ignore[call-overload]


@pytest.mark.parametrize("command", [["sessions"], ["usage"], ["hooks", "status"]])
def test_a_deleted_current_folder_is_an_error_not_a_traceback(tmp_path: Path, command: list[str]) -> None:
    home = tmp_path / "home"
    home.mkdir()
    gone = tmp_path / "gone"
    gone.mkdir()
    # A shell left in a folder that was deleted since (another terminal's `rm -rf build`).
    script = 'cd "$1" && rmdir "$1" && shift && exec "$@"'
    done = subprocess.run(["sh", "-c", script, "sh", str(gone), sys.executable, "-m", "ctxd", *command],
                          cwd=tmp_path, env=_env(home), capture_output=True, text=True, timeout=120)
    assert not gone.exists()
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode != 0 and "current folder" in done.stderr


@pytest.mark.parametrize("command", [["sessions"], ["usage"]])
def test_a_workspace_that_is_a_symlink_loop_is_an_error_not_a_traceback(tmp_path: Path,
                                                                        command: list[str]) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    done = _ctxd([*command, "--workspace", str(tmp_path / "a")], tmp_path, _env(home))
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode != 0 and str(tmp_path / "a") in done.stderr


@pytest.mark.parametrize("command", [["sessions"], ["sessions", "--format", "json"], ["hooks", "status"]])
def test_output_to_a_reader_that_went_away_prints_no_traceback(tmp_path: Path, command: list[str]) -> None:
    project = tmp_path / "project"
    project.mkdir()
    home = _codex_home(tmp_path, project.resolve(), sessions=3)
    read, write = os.pipe()
    os.close(read)  # `ctxd sessions | head -1`, head gone before ctxd writes
    try:
        done = subprocess.run([sys.executable, "-m", "ctxd", *command], cwd=project, env=_env(home),
                              stdout=write, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr


def test_sessions_on_a_non_utf8_output_encoding_prints_no_traceback(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    home = _codex_home(tmp_path, project.resolve(), title="Café ☕ fix the parser")
    done = _ctxd(["sessions"], project, _env(home, PYTHONIOENCODING="latin-1"), encoding="latin-1")  # a latin-1 terminal
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 0 and "Café" in done.stdout and "fix the parser" in done.stdout


@pytest.mark.parametrize("form", ["table", "json"])
def test_a_summary_stored_before_the_key_was_configured_never_shows_it(tmp_path: Path, form: str) -> None:
    project = tmp_path / "project"
    project.mkdir()
    home = _codex_home(tmp_path, project.resolve(), title=f"use the key {KEY} for the client")
    # A first run in a shell without the key: the summary is stored with the prompt's words.
    first = _ctxd(["sessions"], project, _env(home))
    assert first.returncode == 0, first.stderr
    # Then the key is configured: it must not be printed, whatever the summaries kept.
    done = _ctxd(["sessions", "--format", form], project, _env(home, OPENAI_API_KEY=KEY))
    assert done.returncode == 0, done.stderr
    assert "use the key" in done.stdout
    assert KEY not in done.stdout and KEY not in done.stderr


def test_a_dry_run_never_prints_the_api_key_a_settings_file_holds(tmp_path: Path) -> None:
    """`ctxd hooks install --dry-run` prints the change as a diff, with the settings file's lines
    around it: a key the user keeps in Claude Code's `env` (as its docs show) was printed there."""
    project = tmp_path / "project"
    project.mkdir()
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    settings = home / ".claude" / "settings.json"
    text = json.dumps({"env": {"OPENAI_API_KEY": KEY}}, indent=2) + "\n"
    settings.write_text(text)
    done = _ctxd(["hooks", "install", "--agent", "claude", "--dry-run"], project, _env(home, OPENAI_API_KEY=KEY))
    assert done.returncode == 0, done.stderr
    assert "OPENAI_API_KEY" in done.stdout and "[redacted]" in done.stdout  # the line, without its value
    assert KEY not in done.stdout and KEY not in done.stderr
    assert settings.read_text() == text  # nothing written
