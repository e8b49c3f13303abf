"""The real Codex CLI and Claude Code, pinned, for end-to-end tests (tests/test_real_agents.py).

`install()` fetches an agent from the npm registry once per machine into
`$XDG_CACHE_HOME/ctxd-tests/agents/<package>@<version>` (default `~/.cache`): npm installs into a
temporary folder beside it, the binary is tried, and only then the folder is renamed into place,
so an interrupted install is never reused. Without npm the tests skip, saying so.

`Codex` and `Claude` run one agent non-interactively in a home of its own (CODEX_HOME,
CLAUDE_CONFIG_DIR, HOME), pointed at a scripted model server (tests/model_servers.py) on
127.0.0.1, with telemetry, update checks and other traffic off: nothing leaves the machine.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.model_servers import MessagesServer, ResponsesServer

CODEX = ("@openai/codex", "0.171.0", "codex")  # package, version, executable
CLAUDE = ("@anthropic-ai/claude-code", "2.1.332", "claude")
CODEX_MODEL = "gpt-5.5"  # in Codex 0.171's own model catalogue (tools: exec_command, apply_patch)
CLAUDE_MODEL = "claude-sonnet-4-5"
RUN_TIMEOUT = 180.0  # seconds for one agent run: only a hung agent comes near


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ctxd-tests" / "agents"


def install(package: tuple[str, str, str]) -> Path:
    """The agent's executable, installed from the npm registry on first use."""
    name, version, command = package
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: the real-agent tests install the pinned agents with it")
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{name.replace('/', '+')}@{version}"
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel test processes install once
        binary = _binary(final, command)
        if binary is not None:
            return binary
        shutil.rmtree(final, ignore_errors=True)
        temp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=root))
        try:
            done = subprocess.run([npm, "install", "--prefix", str(temp), "--no-audit", "--no-fund",
                                   "--no-save", "--loglevel=error", f"{name}@{version}"],
                                  capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
            if done.returncode != 0:
                pytest.fail(f"npm install {name}@{version} failed: {done.stderr.strip()[-2000:]}")
            binary = _binary(temp, command)
            if binary is None:
                pytest.fail(f"{name}@{version} installed but its executable does not run")
            temp.rename(final)
        finally:
            shutil.rmtree(temp, ignore_errors=True)
        found = _binary(final, command)
        assert found is not None
        return found


def _binary(prefix: Path, command: str) -> Path | None:
    """The installed executable if it answers `--version`, else None."""
    exe = prefix / "node_modules" / ".bin" / command
    if not exe.exists():
        return None
    try:
        ok = subprocess.run([str(exe), "--version"], capture_output=True, timeout=60, stdin=subprocess.DEVNULL,
                            env={**os.environ, "DISABLE_AUTOUPDATER": "1"})
    except (OSError, subprocess.TimeoutExpired):
        return None
    return exe if ok.returncode == 0 else None


# Every switch that keeps an agent quiet and local.
QUIET = {
    "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1", "NO_COLOR": "1",
}


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


class _Agent:
    def __init__(self, exe: Path, base: Path) -> None:
        self.exe = exe
        self.base = base
        (base / "home").mkdir(parents=True, exist_ok=True)

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("OPENAI_", "ANTHROPIC_", "CODEX_", "CLAUDE_", "CTXD_"))}
        env.update(QUIET)
        env["HOME"] = str(self.base / "home")
        env["XDG_CONFIG_HOME"] = str(self.base / "home" / ".config")
        env["XDG_CACHE_HOME"] = str(self.base / "home" / ".cache")
        env["XDG_STATE_HOME"] = str(self.base / "home" / ".local" / "state")
        env["CTXD_HOOK_KEEPER_SECONDS"] = "20"  # the keepers the agents' hooks start end soon after their test
        return env

    def _run(self, args: list[str], cwd: Path) -> Run:
        done = subprocess.run([str(self.exe), *args], cwd=str(cwd), env=self.env(), capture_output=True,
                              text=True, timeout=RUN_TIMEOUT, stdin=subprocess.DEVNULL)
        result = Run(done.returncode, done.stdout, done.stderr)
        if done.returncode != 0:
            raise AssertionError(f"{self.exe.name} {' '.join(args[:3])} exited {done.returncode}:\n"
                                 f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
        return result

    def env(self) -> dict[str, str]:
        raise NotImplementedError


class Codex(_Agent):
    """`codex exec` against a ResponsesServer, in CODEX_HOME `home` (the folder ctxd follows)."""

    def __init__(self, base: Path, home: Path, server: ResponsesServer, auto_compact_limit: int | None = None) -> None:
        super().__init__(install(CODEX), base)
        self.home = home
        self.server = server
        home.mkdir(parents=True, exist_ok=True)
        limit = f"model_auto_compact_token_limit = {auto_compact_limit}\n" if auto_compact_limit else ""
        (home / "config.toml").write_text(
            f'model = "{CODEX_MODEL}"\n'
            'model_provider = "fake"\n'
            'approval_policy = "never"\n'
            'sandbox_mode = "danger-full-access"\n'
            'check_for_update_on_startup = false\n'
            f"{limit}"
            "[model_providers.fake]\n"
            'name = "fake"\n'
            f'base_url = "{server.base_url}/v1"\n'
            'wire_api = "responses"\n'
            'env_key = "CTXD_TEST_OPENAI_KEY"\n'
            "request_max_retries = 0\n"
            "stream_max_retries = 0\n"
            "[analytics]\n"
            "enabled = false\n"
            "[feedback]\n"
            "enabled = false\n")

    def env(self) -> dict[str, str]:
        env = self._env()
        env["CODEX_HOME"] = str(self.home)
        env["CTXD_TEST_OPENAI_KEY"] = "sk-test-not-a-key"
        return env

    def exec(self, prompt: str, cwd: Path, resume: str | None = None) -> Run:
        flags = ["--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "--json"]
        args = ["exec", "resume", *flags, resume, prompt] if resume else ["exec", *flags, "-C", str(cwd), prompt]
        return self._run(args, cwd)

    @staticmethod
    def thread_id(run: Run) -> str:
        """The session id from `--json`'s `thread.started` event."""
        for line in run.stdout.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and event.get("type") == "thread.started":
                return str(event["thread_id"])
        raise AssertionError(f"no thread.started in codex's output:\n{run.stdout[-2000:]}")


class Claude(_Agent):
    """`claude -p` against a MessagesServer, in CLAUDE_CONFIG_DIR `home`."""

    def __init__(self, base: Path, home: Path, server: MessagesServer, extra_env: dict[str, str] | None = None) -> None:
        super().__init__(install(CLAUDE), base)
        self.home = home
        self.server = server
        self.extra_env = extra_env or {}
        home.mkdir(parents=True, exist_ok=True)

    def env(self) -> dict[str, str]:
        env = self._env()
        env["CLAUDE_CONFIG_DIR"] = str(self.home)
        env["ANTHROPIC_BASE_URL"] = self.server.base_url
        env["ANTHROPIC_API_KEY"] = "sk-ant-test-not-a-key"
        if os.geteuid() == 0:
            env["IS_SANDBOX"] = "1"  # else --dangerously-skip-permissions refuses to run as root
        env.update(self.extra_env)
        return env

    def prompt(self, prompt: str, cwd: Path, resume: str | None = None) -> Run:
        args = ["-p", prompt, "--output-format", "json", "--dangerously-skip-permissions", "--model", CLAUDE_MODEL]
        if resume:
            args += ["--resume", resume]
        return self._run(args, cwd)
